"""User-defined factors from their log-density formulas (VinDsl's ``@deffactor``).

``@ff.factor(sample="real", mean="real", precision="positive")`` on a function that
returns a log density written with the arguments as symbols (``+ - * / **``, ``ff.log``,
``ff.exp``, ``ff.lgamma``, ``ff.digamma``, ``ff.sum``) registers a factor whose VMP messages and
ELBO term are derived by the rewrite engine: the expected log factor is rewritten into
⟨natural parameters, E[sufficient statistics of the target]⟩ + constant for each
argument whose family is conjugate (``factorflow.factors.derive``).  Where no conjugate
form exists, the factor has no message to that argument and the compiler says which term
blocks it.  Calling the decorated object inside a model creates the variable it defines
(the first argument), like the built-in factories.

Indices (VinDsl's inner and outer indices). An argument with a vector domain — a
``"simplex"`` (Dirichlet family) or an ``"int"`` category (Discrete family, seen in the
formula as its one-hot vector) — carries one *inner* index, written in the formula:
``theta["k"]``, and summed with ``ff.sum(expr, "k")``; the formula's value must be a
scalar, so every inner index is summed. Plates are the *outer* indices: they are never
written, and the compiler sums the factor over them (one array operation per plate).
When the factor is called in a model, the arguments sharing an inner index must have the
same number of components; the output variable takes that number.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from factorflow.codegen.names import sanitize
from factorflow.distributions import moments
from factorflow.distributions.families import (
    Bernoulli,
    Beta,
    Dirichlet,
    Discrete,
    Gamma,
    Gaussian,
)
from factorflow.errors import ModelError
from factorflow.factors import gradient
from factorflow.factors.derive import Derivation, derive_naturals
from factorflow.factors.gradient import GaussianFallback
from factorflow.factors.registry import FACTORS, Factor, define_factor
from factorflow.model import links
from factorflow.model.core import Data, Indexed, Variable
from factorflow.model.factories import new_variable
from factorflow.rewrite.evaluate import evaluate
from factorflow.rewrite.terms import (
    COVARIANCE,
    ELOG,
    ELOG1M,
    ELOGDET,
    ELOGGAMMA,
    EXPECT,
    INDEX,
    MOMENTS,
    SYM,
    VARIANCE,
    Term,
    data,
    index_sum,
    sym,
)
from factorflow.rewrite.terms import E as _E
from factorflow.rewrite.terms import Elog as _Elog
from factorflow.rewrite.terms import V as _V
from factorflow.rewrite.terms import digamma as _digamma
from factorflow.rewrite.terms import exp as _exp
from factorflow.rewrite.terms import lgamma as _lgamma
from factorflow.rewrite.terms import log as _log

#: the conjugate family of each scalar domain, and how its derived naturals (the
#: coefficients of its sufficient statistics) become a message
_FAMILY: dict[str, tuple[str, Callable[..., Any]]] = {
    "real": ("Gaussian", lambda e1, e2: Gaussian.from_natural(e1, -2.0 * e2)),
    "positive": ("Gamma", lambda e1, e2: Gamma.from_natural(e1, e2)),
    "unit": ("Beta", lambda e1, e2: Beta.from_natural(e1, e2)),
    "bool": ("Bernoulli", lambda e1: Bernoulli.from_natural(e1)),
    "simplex": ("Dirichlet", lambda e: Dirichlet.from_natural(e)),
    "int": ("Discrete", lambda e: Discrete.from_natural(e)),
}
#: domains whose values are vectors with one inner index (an "int" is its one-hot vector)
_VECTOR = frozenset({"simplex", "int"})
#: domains an argument may have only as a known (observed or constant) value
_KNOWN_ONLY = frozenset({"count"})
#: the moment each atom of a derived formula asks of an argument
_MOMENT: dict[str, Callable[[Any], np.ndarray]] = {
    EXPECT: moments.E, VARIANCE: moments.V, ELOG: moments.Elog, ELOG1M: moments.Elog1m,
    COVARIANCE: moments.C, ELOGGAMMA: moments.Eloggamma, ELOGDET: moments.Elogdet,
}


def log(x: Any) -> Term:
    """log(x) in a factor formula."""
    if isinstance(x, Variable | Indexed | links.Link):
        raise ModelError(f"ff.log({x!r}): the log of a model value is not a factor; ff.log "
                         "writes factor formulas (@ff.factor). For a log link, write the "
                         "rate as ff.exp of a real variable: ff.Poisson(name, ff.exp(x)).")
    return _log(x)


def exp(x: Any) -> Any:
    """exp(x) in a factor formula; of a real model value (a variable or an expression of
    variables), the log link ``ff.Poisson(name, ff.exp(x))`` (``model.links.exp``)."""
    if isinstance(x, Variable | Indexed):
        return links.exp(x)
    return _exp(x)


def lgamma(x: Any) -> Term:
    """log Γ(x) in a factor formula."""
    return _lgamma(x)


def digamma(x: Any) -> Term:
    """ψ(x) in a factor formula."""
    return _digamma(x)


def E(x: Any) -> Term:  # noqa: N802 - VinDsl's name
    """E[x] in a natural-parameter update (``@ff.naturals``)."""
    return _E(x)


def V(x: Any) -> Term:  # noqa: N802
    """Var[x] in a natural-parameter update."""
    return _V(x)


def Elog(x: Any) -> Term:  # noqa: N802
    """E[log x] in a natural-parameter update."""
    return _Elog(x)


def sum_over(x: Any, index: Any) -> Any:
    """``ff.sum``: the sum of ``x`` over the inner index ``index`` in a factor formula;
    with a model variable and an ``ff.Range``, the sum of a plate of real variables (a
    variable outside that plate, ``model.reductions.plate_sum``)."""
    from factorflow.model.core import Range, Variable
    if isinstance(x, Variable) or isinstance(index, Range):
        from factorflow.model.reductions import plate_sum
        return plate_sum(x, index)
    if not isinstance(x, Term) or not isinstance(index, str) or index not in x.indices:
        raise ModelError(f"ff.sum(..., {index!r}): the summand must be a formula that carries "
                         f"the index {index!r} (write the vector argument as arg[{index!r}]).")
    return index_sum(x, index)


def _atoms(term: Term) -> set[Term]:
    out: set[Term] = set()
    stack = [term]
    while stack:
        t = stack.pop()
        if t.op in MOMENTS:
            out.add(t)
        else:
            stack.extend(a for a in t.args if isinstance(a, Term))
    return out


def _components(value: Any) -> int | None:
    """The number of components of a vector argument's value or message, if it shows it."""
    if isinstance(value, Dirichlet):
        return int(np.shape(value.alpha)[-1])
    if isinstance(value, Discrete):
        return int(np.shape(value.probs)[-1])
    return None


def _environment(terms: list[Term], args: dict[str, Any],
                 domains: dict[str, str] | None = None,
                 inner: dict[str, str] | None = None) -> dict[Any, np.ndarray]:
    """The value of every moment atom in ``terms`` from the arguments' posteriors, and of
    every known argument (data) by name; an "int" argument enters as its one-hot vector,
    as long as the vector arguments sharing its inner index (``inner``) show."""
    domains, inner = domains or {}, inner or {}
    sizes: dict[str, int] = {}
    for n, v in args.items():
        k = _components(v)
        if k is None and domains.get(n) == "simplex" and moments.is_known(v):
            k = int(np.shape(v)[-1])
        if k is not None and n in inner:
            sizes.setdefault(inner[n], k)

    def one_hot(name: str, v: Any) -> np.ndarray:
        k = sizes.get(inner.get(name, ""), _components(v))
        if k is None:
            raise ModelError(f"the number of categories of {name!r} is unknown: give a vector "
                             "argument that shares its inner index.")
        return moments.Eonehot(v, k)

    env: dict[Any, np.ndarray] = {
        k: one_hot(k, v) if domains.get(k) == "int" else np.asarray(v, dtype=float)
        for k, v in args.items() if moments.is_known(v)}
    for t in set().union(*(_atoms(x) for x in terms)):
        name = t.args[0].payload[0]
        if t.op not in _MOMENT or name not in args:
            raise ModelError(f"cannot evaluate {t}: factorflow knows E, V, C, Elog, Elog1m, "
                             "Eloggamma and Elogdet of a factor's arguments")
        if t.op == EXPECT and domains.get(name) == "int":
            env[t] = one_hot(name, args[name])
        elif t.op == COVARIANCE and domains.get(name) == "int" and moments.is_known(args[name]):
            env[t] = moments.C(one_hot(name, args[name]))   # a known one-hot: zeros (K, K)
        else:
            env[t] = np.asarray(_MOMENT[t.op](args[name]), dtype=float)
    return env


def _inner_last(value: np.ndarray, term: Term) -> np.ndarray:
    """``value`` of ``term`` with its free inner index (first axis) moved last."""
    return np.moveaxis(value, 0, -1) if term.indices else value


def _inner_indices(density: Term, arguments: dict[str, str], fname: str) -> dict[str, str]:
    """The inner index of each vector argument; ModelError for a misuse of indices."""
    if density.indices:
        k = sorted(density.indices)[0]
        raise ModelError(f"{fname}: the formula's value still carries the index {k!r}; sum it "
                         f"with ff.sum(..., {k!r}) (a factor's log density is a scalar).")
    found: dict[str, set[str]] = {}
    bare: set[str] = set()
    stack, seen = [density], set()
    while stack:
        t = stack.pop()
        if t in seen:
            continue
        seen.add(t)
        if t.op == INDEX and t.args[0].op == SYM:
            found.setdefault(t.args[0].payload[0], set()).add(t.payload)
            continue
        if t.op == SYM:
            bare.add(t.payload[0])
        stack.extend(t.args)
    for name, domain in arguments.items():
        if domain not in _VECTOR and name in found:
            raise ModelError(f"{fname}: argument {name!r} has the scalar domain {domain!r} but "
                             f"is indexed as {name}[{sorted(found[name])[0]!r}]; index only "
                             f"vector arguments ({sorted(_VECTOR)}).")
        if domain in _VECTOR and (name in bare or name not in found):
            raise ModelError(f"{fname}: the vector argument {name!r} ({domain}) must be used "
                             f"with its inner index, as {name}['k'] inside ff.sum(..., 'k').")
        if domain in _VECTOR and len(found[name]) > 1:
            raise ModelError(f"{fname}: argument {name!r} is indexed by both "
                             f"{sorted(found[name])}; a vector argument has one inner index.")
    return {name: next(iter(ix)) for name, ix in found.items()}


@dataclass
class UserFactor:
    """A factor defined by its log density; call it in a model to create a variable."""

    name: str
    arguments: dict[str, str]
    log_density: Term
    derivations: dict[str, Derivation] = field(default_factory=dict)
    blocked: dict[str, str] = field(default_factory=dict)
    factor: Factor | None = None
    #: the inner index of each vector argument
    inner: dict[str, str] = field(default_factory=dict)
    #: the arguments whose update the user wrote (``@ff.naturals``), checked against the
    #: derived one
    custom: set[str] = field(default_factory=set)
    #: the Gaussian arguments with no conjugate form, updated by the gradient fallback
    fallbacks: dict[str, GaussianFallback] = field(default_factory=dict)

    def __call__(self, name: str, *, observed: Any = None, **args: Any) -> Variable:
        output = next(iter(self.arguments))
        expected = set(self.arguments) - {output}
        if set(args) != expected:
            raise ModelError(f"{self.name}({name!r}): give exactly the arguments "
                             f"{sorted(expected)}, got {sorted(args)}.")
        domains = {k: self.arguments[k] for k in args}
        sizes = self._sizes(name, args)
        size = sizes.get(self.inner.get(output, ""))
        if self.arguments[output] in _VECTOR and size is None:
            raise ModelError(f"{self.name}({name!r}): the number of components of {output!r} "
                             f"comes from an argument sharing its index "
                             f"{self.inner[output]!r}, and there is none.")
        derived = frozenset(t for t in self.fallbacks if isinstance(args.get(t), Variable)
                            and args[t].derived)
        factor = _of_expressions(self, derived) if derived else self.name
        return new_variable(factor, name, self.arguments[output], args, domains, observed,
                            size=size)

    def _sizes(self, name: str, args: dict[str, Any]) -> dict[str, int]:
        """The size of each inner index over the vector arguments that carry it, checked
        to agree."""
        sizes: dict[str, tuple[int, str]] = {}
        for arg, value in args.items():
            if arg not in self.inner:
                continue
            if isinstance(value, Variable):
                k = value.size
            else:  # a constant, or an ff.Data's value when built (it fixes the size)
                shape = np.shape(value.value if isinstance(value, Data) else value)
                k = int(shape[-1]) if self.arguments[arg] == "simplex" and shape else None
            if k is None:
                continue
            index = self.inner[arg]
            if index in sizes and sizes[index][0] != k:
                other_k, other = sizes[index]
                raise ModelError(f"{self.name}({name!r}): index {index!r} has {other_k} "
                                 f"components in {other!r} but {k} in {arg!r}; arguments "
                                 "sharing an inner index must have the same size.")
            sizes[index] = (k, arg)
        return {index: k for index, (k, _) in sizes.items()}


def factor(**arguments: str) -> Callable[[Callable[..., Term]], UserFactor]:
    """Declare a factor from its log-density formula; see the module docstring.

    Guarantees: the VMP message to every conjugate argument and the ELBO term equal the
    derivative and value of E_q[log f] (checked against the built-ins in the tests).
    """
    for k, d in arguments.items():
        if d not in _FAMILY and d not in _KNOWN_ONLY:
            raise ModelError(f"@ff.factor argument {k!r}: domain {d!r} is not supported; "
                             f"use one of {sorted(_FAMILY) + sorted(_KNOWN_ONLY)}.")

    def declare(fn: Callable[..., Term]) -> UserFactor:
        params = list(inspect.signature(fn).parameters)
        if params != list(arguments):
            raise ModelError(f"@ff.factor on {fn.__name__}: the function's arguments "
                             f"{params} must be the declared ones {list(arguments)}, in order.")
        try:  # known-only arguments are data: E[data] = data
            density = fn(*(data(a) if d in _KNOWN_ONLY else sym(a)
                           for a, d in arguments.items()))
        except NameError as exc:
            raise ModelError(f"{fn.__name__}: the formula uses an unknown name ({exc}).") \
                from None
        except (TypeError, AttributeError) as exc:
            raise ModelError(f"{fn.__name__}: the formula applies an operation factorflow "
                             f"cannot read symbolically ({exc}); write it with + - * / **, "
                             "ff.log, ff.exp, ff.lgamma, ff.digamma and ff.sum.") from None
        if not isinstance(density, Term):
            raise ModelError(f"{fn.__name__}: the formula must involve its arguments.")
        inner = _inner_indices(density, arguments, fn.__name__)
        name = sanitize(fn.__name__)
        known = _USER_FACTORS.get(name)
        if known is not None and known.arguments == arguments and known.log_density is density:
            return known  # the same definition again (a model built twice): one factor
        if name in FACTORS:
            raise ModelError(f"a factor named {name!r} already exists with another formula or "
                             "arguments; rename the function.")
        user = UserFactor(name, dict(arguments), density, inner=inner)
        registered = define_factor(name, *arguments.items(),
                                   log_density=_numeric(density, dict(arguments), inner))
        for target, domain in arguments.items():
            if domain in _KNOWN_ONLY:  # counts: observed or constant, never messages
                registered.notes[("vmp", target)] = f"{domain} arguments must be observed"
                continue
            family = _FAMILY[domain][0]
            try:
                d = derive_naturals(density, sym(target), family,
                                    index=inner.get(target, "k"))
            except ModelError as exc:
                why = _fallback(user, registered, target, str(exc))
                if why is not None:
                    user.blocked[target] = why
                    registered.notes[("vmp", target)] = why
                continue
            _conjugate(user, registered, target, d)
        for target in [t for t in user.blocked if user.fallbacks]:
            # beside a fallback the ELBO term is the fallback's, so a conjugate argument
            # needs only its naturals closed (the rest may hold the fallback's terms)
            try:
                d = derive_naturals(density, sym(target), _FAMILY[arguments[target]][0],
                                    index=inner.get(target, "k"), close_rest=False)
            except ModelError:
                continue
            del user.blocked[target], registered.notes[("vmp", target)]
            _conjugate(user, registered, target, d)
        full = next(iter(user.derivations.values()), None)
        if user.fallbacks:  # E_q[log f] with the fallback's quadrature over its target
            registered.evidence_operator("vmp")(_fallback_elbo(
                next(iter(user.fallbacks.values())), dict(arguments), inner))
        elif full is not None:
            registered.evidence_operator("vmp")(_elbo(full.expected_log_factor,
                                                      dict(arguments), inner))
        user.factor = registered
        _USER_FACTORS[name] = user
        # the twins for fallback arguments given as expressions, made now so that a
        # pickled model using one loads wherever this declaration has run
        targets = sorted(user.fallbacks)
        for r in range(1, len(targets) + 1):
            for subset in itertools.combinations(targets, r):
                _of_expressions(user, frozenset(subset))
        return user

    return declare


def _conjugate(user: UserFactor, registered: Factor, target: str, d: Derivation) -> None:
    """Register the derived conjugate VMP message to ``target``."""
    domain = user.arguments[target]
    user.derivations[target] = d
    others = tuple(a for a in user.arguments if a != target)
    # a vector target's own message is read for its number of components
    reads = (*others, target) if domain in _VECTOR else others
    registered.operator("vmp", target, proper=others)(
        _operator(d, _FAMILY[domain][1], reads, dict(user.arguments), user.inner))


#: the user factors by registered name, so that declaring one again reuses it
_USER_FACTORS: dict[str, UserFactor] = {}


def _signature(fn: Callable[..., Any], names: tuple[str, ...]) -> Callable[..., Any]:
    fn.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY) for n in names])
    return fn


def _operator(d: Derivation, to_message: Callable[..., Any], others: tuple[str, ...],
              domains: dict[str, str], inner: dict[str, str]) -> Callable[..., Any]:
    naturals = list(d.naturals)

    def message(**args: Any) -> Any:
        env = _environment(naturals, args, domains, inner)
        values = [_inner_last(evaluate(n, env), n) for n in naturals]
        shape = np.broadcast_shapes(*(np.shape(v) for v in values))
        return to_message(*(np.broadcast_to(v, shape) for v in values))

    return _signature(message, others)


def _elbo(term: Term, domains: dict[str, str], inner: dict[str, str]) -> Callable[..., Any]:
    def average_log_factor(**args: Any) -> np.ndarray:
        return evaluate(term, _environment([term], args, domains, inner))

    return _signature(average_log_factor, tuple(domains))


def _numeric(density: Term, domains: dict[str, str], inner: dict[str, str]
             ) -> Callable[..., Any]:
    def log_density(**values: Any) -> np.ndarray:
        return evaluate(density, _environment([], values, domains, inner))

    return log_density


# ----- the gradient fallback (factors.gradient) ------------------------------------------
def _fallback(user: UserFactor, registered: Factor, target: str, blocked: str) -> str | None:
    """Register the gradient fallback's VMP update of the Gaussian argument ``target``
    (no conjugate form: ``blocked`` says why); None if registered, else why not."""
    if user.arguments[target] != "real":
        return blocked
    try:
        fb = gradient.gaussian_fallback(user.log_density, target)
    except ModelError as exc:
        return f"{blocked}; the gradient fallback does not apply either: {exc}"
    user.fallbacks[target] = fb
    domains = dict(user.arguments)
    others = tuple(a for a in domains if a != target)

    def message(*, reduce: Any = None, previous: Any = None, **args: Any) -> Any:
        coefficients, _, known, shape = _fallback_inputs(fb, args, domains, user.inner)
        if reduce is not None:
            shape = reduce[0]
        return gradient.optimize_gaussian(fb, coefficients, known, args[target], previous,
                                          shape, reduce)

    params = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY) for n in (*others, target)]
    params += [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None)
               for n in ("reduce", "previous")]
    message.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    registered.operator("vmp", target, proper=(*others, target),
                        method=gradient.METHOD)(message)
    return None


def _ncvmp_operator(user: UserFactor, fb: GaussianFallback) -> Callable[..., Any]:
    """Non-conjugate VMP's message to the derived target of ``fb`` (factors.gradient)."""
    domains, target = dict(user.arguments), fb.target

    def message(*, reduce: Any = None, **args: Any) -> Any:
        coefficients, _, known, shape = _fallback_inputs(fb, args, domains, user.inner)
        if reduce is not None:
            shape = reduce[0]
        return gradient.ncvmp_message(fb, coefficients, known, args[target], shape, reduce)

    params = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY)
              for n in (*(a for a in domains if a != target), target)]
    params.append(inspect.Parameter("reduce", inspect.Parameter.KEYWORD_ONLY, default=None))
    message.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return message


def _of_expressions(user: UserFactor, targets: frozenset[str]) -> str:
    """The name of ``user``'s twin factor whose fallback ``targets`` are expressions
    (derived variables): their messages non-conjugate VMP's, the rest shared."""
    name = f"{user.name}__of_{'_'.join(sorted(targets))}"
    if name in FACTORS:
        return name
    base = FACTORS[user.name]
    twin = define_factor(name, *((a.name, a.domain) for a in base.args),
                         log_density=base.log_density)
    twin.operators.update({key: replace(op, factor=name) for key, op in base.operators.items()
                           if key[1] not in targets})
    twin.evidence.update(base.evidence)
    twin.notes.update(base.notes)
    others = {t: tuple(a for a in user.arguments if a != t) for t in targets}
    for t in sorted(targets):
        twin.operator("vmp", t, proper=(*others[t], t), method=gradient.NCVMP_METHOD,
                      ascent=False)(_ncvmp_operator(user, user.fallbacks[t]))
    return name


def _fallback_inputs(fb: GaussianFallback, args: dict[str, Any], domains: dict[str, str],
                     inner: dict[str, str]) -> tuple[list[np.ndarray], np.ndarray,
                                                    dict[str, np.ndarray], tuple[int, ...]]:
    """The fallback's closed coefficients and constant from the other arguments' moments,
    the known values its parts read, and the plate shape they span."""
    others = {k: v for k, v in args.items() if k != fb.target}
    env = _environment(list(fb.closed_terms), others, domains, inner)
    values = [np.asarray(evaluate(t, env), float) for t in fb.closed_terms]
    random = sorted(n for n in fb.part_symbols if not moments.is_known(others.get(n)))
    if random:
        raise ModelError(f"the gradient fallback for {fb.target!r} integrates over "
                         f"{fb.target!r} alone, but its terms {', '.join(map(str, fb.parts))} "
                         f"also read the random argument {random[0]!r}; observe it, or "
                         "write the factor so that the two are separate terms.")
    known = {n: np.asarray(others[n], float) for n in fb.part_symbols}
    target = args.get(fb.target)
    tshape = target.batch_shape if isinstance(target, Gaussian) else np.shape(target)
    shape = np.broadcast_shapes(tshape, *(np.shape(v) for v in values),
                                *(np.shape(v) for v in known.values()))
    return values[:-1], values[-1], known, shape


def _fallback_elbo(fb: GaussianFallback, domains: dict[str, str],
                   inner: dict[str, str]) -> Callable[..., Any]:
    def average_log_factor(**args: Any) -> np.ndarray:
        coefficients, constant, known, shape = _fallback_inputs(fb, args, domains, inner)
        return gradient.expected_log_factor(fb, coefficients, constant, known,
                                            args[fb.target], shape)

    return _signature(average_log_factor, tuple(domains))
