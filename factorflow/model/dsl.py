"""User-defined factors from their log-density formulas (VinDsl's ``@deffactor``).

``@ff.factor(sample="real", mean="real", precision="positive")`` on a function that
returns a log density written with the arguments as symbols (``+ - * / **``, ``ff.log``,
``ff.exp``, ``ff.lgamma``, ``ff.digamma``, ``ff.logdet``, ``ff.sum``) registers a factor
whose VMP messages and ELBO term are derived by the rewrite engine: the expected log
factor is rewritten into ⟨natural parameters, E[sufficient statistics of the target]⟩ +
constant for each argument whose family is conjugate (``factorflow.factors.derive``).
Where no conjugate form exists, the factor has no message to that argument and the
compiler says which term blocks it.  Calling the decorated object inside a model creates
the variable it defines (the first argument), like the built-in factories.

Indices (VinDsl's inner and outer indices). An argument with a vector domain — a
``"simplex"`` (Dirichlet family) or an ``"int"`` category (Discrete family, seen in the
formula as its one-hot vector) — carries one *inner* index, written in the formula:
``theta["k"]``, and summed with ``ff.sum(expr, "k")``; the formula's value must be a
scalar, so every inner index is summed. Plates are the *outer* indices: they are never
written, and the compiler sums the factor over them (one array operation per plate).
When the factor is called in a model, the arguments sharing an inner index must have the
same number of components; the output variable takes that number.

Vectors and matrices. A ``"vector"`` argument (VectorGaussian family) is written with one
inner index per use, ``x["i"]``, and a ``"posdef"`` one (Wishart family, positive-definite
matrices) with two, ``lam["i", "j"]`` (row ``i``, column ``j``), or whole in
``ff.logdet(lam)``; unlike a simplex, one vector may be read under several index names
(``x["i"]`` and ``x["j"]`` in a quadratic form), each summed: ``ff.sum(term, "i", "j")``.
Every index name takes one size, the dimension D of the arguments it indexes. The
multivariate normal, written as VinDsl writes it, derives the built-in
``ff.VectorGaussian``'s conjugate messages (see :func:`logdet`).
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
from factorflow.distributions.multivariate import VectorGaussian, Wishart
from factorflow.errors import ModelError
from factorflow.factors import gradient
from factorflow.factors.common import Reduce, plate_einsum
from factorflow.factors.derive import COL, ROW, Derivation, derive_naturals
from factorflow.factors.gradient import GaussianFallback
from factorflow.factors.registry import FACTORS, Factor, define_factor
from factorflow.model import links
from factorflow.model.core import Data, Indexed, Variable
from factorflow.model.factories import new_variable
from factorflow.rewrite.evaluate import evaluate, evaluate_named
from factorflow.rewrite.terms import (
    COVARIANCE,
    ELOG,
    ELOG1M,
    ELOGDET,
    ELOGGAMMA,
    EXPECT,
    INDEX,
    INDEX_SUM,
    LOGDET,
    MOMENTS,
    PROD,
    SUM,
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
from factorflow.rewrite.terms import logdet as _logdet


def _vector_message(h: np.ndarray, j: np.ndarray, jd: np.ndarray) -> VectorGaussian:
    """The VectorGaussian with log density h·x + Σ_rc J_rc x_r x_c + Σ_r Jd_r x_r² + const:
    precision P = −(J + Jᵀ) − 2 diag(Jd), precision times mean h."""
    jd2 = jd[..., :, None] * np.eye(jd.shape[-1])
    return VectorGaussian.from_natural(h[..., None], -(j + np.swapaxes(j, -1, -2)) - 2.0 * jd2)


def _wishart_message(a: np.ndarray, b: np.ndarray) -> Wishart:
    """The Wishart with log density a log|Λ| + Σ_rc B_rc Λ_rc + const (Λ symmetric: the
    natural parameter of Λ is the symmetric part of B)."""
    return Wishart.from_natural(a[..., None, None], 0.5 * (b + np.swapaxes(b, -1, -2)))


#: the conjugate family of each scalar domain, and how its derived naturals (the
#: coefficients of its sufficient statistics) become a message
_FAMILY: dict[str, tuple[str, Callable[..., Any]]] = {
    "real": ("Gaussian", lambda e1, e2: Gaussian.from_natural(e1, -2.0 * e2)),
    "positive": ("Gamma", lambda e1, e2: Gamma.from_natural(e1, e2)),
    "unit": ("Beta", lambda e1, e2: Beta.from_natural(e1, e2)),
    "bool": ("Bernoulli", lambda e1: Bernoulli.from_natural(e1)),
    "simplex": ("Dirichlet", lambda e: Dirichlet.from_natural(e)),
    "int": ("Discrete", lambda e: Discrete.from_natural(e)),
    "vector": ("VectorGaussian", _vector_message),
    "posdef": ("Wishart", _wishart_message),
}
#: domains whose values are vectors with one inner index (an "int" is its one-hot vector)
_VECTOR = frozenset({"simplex", "int"})
#: the vector and matrix domains: the number of inner indices of each use, and the event
#: shape of each natural parameter of their family (``_FAMILY``) at dimension D
_MATRIX: dict[str, tuple[int, Callable[[int], tuple[tuple[int, ...], ...]]]] = {
    "vector": (1, lambda d: ((d,), (d, d), (d,))),
    "posdef": (2, lambda d: ((), (d, d))),
}
#: domains an argument may have only as a known (observed or constant) value
_KNOWN_ONLY = frozenset({"count"})
#: the moment each atom of a derived formula asks of an argument
_MOMENT: dict[str, Callable[[Any], np.ndarray]] = {
    EXPECT: moments.E, VARIANCE: moments.V, ELOG: moments.Elog, ELOG1M: moments.Elog1m,
    COVARIANCE: moments.C, ELOGGAMMA: moments.Eloggamma, ELOGDET: moments.Elogdet,
}


def _formula(build: Callable[[Any], Term], what: str, x: Any) -> Term:
    """``build(x)``, or ModelError naming ``what`` if ``x`` is not a formula value (a
    number, an array, or a term of the factor's arguments)."""
    try:
        return build(x)
    except TypeError:
        raise ModelError(f"ff.{what}({x!r}): the argument must be a number or a formula of "
                         "the factor's arguments (inside @ff.factor or @ff.naturals).") from None


def log(x: Any) -> Term:
    """log(x) in a factor formula (a symbolic term; the factor evaluates it).  The Poisson
    law written as a formula, with a Gamma(1, 1) prior on its rate: the VMP posterior
    is Gamma(1 + Σy, 1 + n), exactly the built-in ``ff.Poisson``'s:

    >>> @ff.factor(sample="count", rate="positive")
    ... def doc_poisson(sample, rate):
    ...     return sample * ff.log(rate) - rate - ff.lgamma(sample + 1)
    >>> with ff.Model() as model:
    ...     rate = ff.Gamma("rate", 1.0, rate=1.0)
    ...     with ff.Plate(ff.Range("n", 3)):
    ...         y = doc_poisson("y", rate=rate, observed=[2, 0, 4])
    >>> model.infer("vmp")["rate"]
    Gamma(shape=7.0, rate=4.0)
    >>> ff.log("rate")
    Traceback (most recent call last):
    ...
    factorflow.errors.ModelError: ff.log('rate'): ...
    """
    if isinstance(x, Variable | Indexed | links.Link):
        raise ModelError(f"ff.log({x!r}): the log of a model value is not a factor; ff.log "
                         "writes factor formulas (@ff.factor). For a log link, write the "
                         "rate as ff.exp of a real variable: ff.Poisson(name, ff.exp(x)).")
    return _formula(_log, "log", x)


def exp(x: Any) -> Any:
    """exp(x) in a factor formula; of a real model value (a variable or an expression of
    variables), the log link ``ff.Poisson(name, ff.exp(x))`` (``model.links.exp``).

    A unit-variance Gaussian factor centred at exp(k) for a known count k: the
    posterior of a variable it alone defines is N(e^k, 1):

    >>> @ff.factor(sample="real", k="count")
    ... def doc_centred_at_exp(sample, k):
    ...     return -0.5 * (sample - ff.exp(k)) ** 2
    >>> with ff.Model() as model:
    ...     x = doc_centred_at_exp("x", k=2)
    >>> posterior = model.infer("vmp")["x"]
    >>> bool(np.isclose(posterior.mean, np.exp(2.0))), float(posterior.variance)
    (True, 1.0)
    """
    if isinstance(x, Variable | Indexed):
        return links.exp(x)
    return _formula(_exp, "exp", x)


def lgamma(x: Any) -> Term:
    """log Γ(x) in a factor formula.  The Gamma law with a known integer shape k, written
    as a formula, as a prior: the posterior of a variable it alone defines is Gamma(k, 2):

    >>> @ff.factor(sample="positive", k="count")
    ... def doc_gamma_rate_2(sample, k):
    ...     return k * ff.log(2.0) - ff.lgamma(k) + (k - 1) * ff.log(sample) - 2.0 * sample
    >>> with ff.Model() as model:
    ...     g = doc_gamma_rate_2("g", k=3)
    >>> model.infer("vmp")["g"]
    Gamma(shape=3.0, rate=2.0)
    """
    return _formula(_lgamma, "lgamma", x)


def digamma(x: Any) -> Term:
    """ψ(x) (the digamma function, d/dx log Γ(x)) in a factor formula.  A unit-variance
    Gaussian factor centred at ψ(k): the posterior is N(ψ(3), 1), ψ(3) = 3/2 − γ:

    >>> @ff.factor(sample="real", k="count")
    ... def doc_centred_at_digamma(sample, k):
    ...     return -0.5 * (sample - ff.digamma(k)) ** 2
    >>> with ff.Model() as model:
    ...     x = doc_centred_at_digamma("x", k=3)
    >>> bool(np.isclose(model.infer("vmp")["x"].mean, 1.5 - np.euler_gamma))
    True
    """
    return _formula(_digamma, "digamma", x)


def logdet(x: Any) -> Term:
    """log |x| of a positive-definite matrix argument (domain ``"posdef"``) in a factor
    formula.  The multivariate normal as VinDsl writes it, with the precision's two inner
    indices: its derived messages are the built-in ``ff.VectorGaussian``'s, so a Wishart
    prior on the precision gets the Normal–Wishart conjugate posterior, dof ν + n:

    >>> @ff.factor(x="vector", mu="vector", lam="posdef")
    ... def doc_mvn(x, mu, lam):
    ...     d = lambda i: x[i] - mu[i]
    ...     return 0.5 * ff.logdet(lam) - 0.5 * ff.sum(d("i") * lam["i", "j"] * d("j"), "i", "j")
    >>> with ff.Model() as model:
    ...     lam = ff.Wishart("lam", 3.0, rate=np.eye(2))
    ...     with ff.Plate(ff.Range("n", 2)):
    ...         y = doc_mvn("y", mu=np.zeros(2), lam=lam, observed=[[1.0, 0.0], [0.0, 2.0]])
    >>> posterior = model.infer("vmp")["lam"]
    >>> float(posterior.dof), bool(np.allclose(posterior.rate, [[2.0, 0.0], [0.0, 5.0]]))
    (5.0, True)
    """
    return _formula(_logdet, "logdet", x)


def E(x: Any) -> Term:  # noqa: N802 - VinDsl's name
    """E[x] in a natural-parameter update (``@ff.naturals``): the posterior mean of the
    argument ``x``.  The seed's update of a Gaussian's mean, (E[x] E[τ], −E[τ]/2), is
    checked against the derived one and gives the exact posterior N(Σy/(n + 1/100), …):

    >>> @ff.factor(x="real", mu="real", tau="positive")
    ... def doc_normal(x, mu, tau):           # VinDsl's LogNormalFactor
    ...     return -0.5 * (tau * (x - mu) ** 2 + np.log(2 * np.pi) - ff.log(tau))
    >>> @ff.naturals(doc_normal, "mu", "Gaussian")
    ... def doc_mu_update(x, tau):
    ...     return ff.E(x) * ff.E(tau), -ff.E(tau) / 2
    >>> with ff.Model() as model:
    ...     mu = ff.Gaussian("mu", 0.0, variance=100.0)
    ...     with ff.Plate(ff.Range("n", 2)):
    ...         y = doc_normal("y", mu=mu, tau=1.0, observed=[5.0, 7.0])
    >>> bool(np.isclose(model.infer("vmp")["mu"].mean, 12 / 2.01)), doc_normal.custom
    (True, {'mu'})
    """
    return _formula(_E, "E", x)


def V(x: Any) -> Term:  # noqa: N802
    """Var[x] in a natural-parameter update (``@ff.naturals``): the posterior variance
    of the argument ``x``.  The update of a Gaussian's precision τ (coefficients of
    log τ and τ) reads the variances of x and μ; a wrong one is refused:

    >>> @ff.factor(x="real", mu="real", tau="positive")
    ... def doc_normal_v(x, mu, tau):           # VinDsl's LogNormalFactor
    ...     return -0.5 * (tau * (x - mu) ** 2 + np.log(2 * np.pi) - ff.log(tau))
    >>> @ff.naturals(doc_normal_v, "tau", "Gamma")
    ... def doc_tau_update(x, mu):
    ...     return 0.5, -0.5 * (ff.V(x) + ff.V(mu) + (ff.E(x) - ff.E(mu)) ** 2)
    >>> @ff.naturals(doc_normal_v, "tau", "Gamma")
    ... def doc_wrong_tau_update(x, mu):
    ...     return 0.5, -0.5 * (ff.E(x) - ff.E(mu)) ** 2          # forgets the variances
    Traceback (most recent call last):
    ...
    factorflow.errors.ModelError: @ff.naturals(doc_normal_v, 'tau'): ...
    >>> with ff.Model() as model:
    ...     tau = ff.Gamma("tau", 1.0, rate=1.0)
    ...     y = doc_normal_v("y", mu=0.0, tau=tau, observed=2.0)
    >>> model.infer("vmp")["tau"]                         # Gamma(1 + 1/2, 1 + 2²/2)
    Gamma(shape=1.5, rate=3.0)
    """
    return _formula(_V, "V", x)


def Elog(x: Any) -> Term:  # noqa: N802
    """E[log x] in a natural-parameter update (``@ff.naturals``).  The update of a
    category z from its probabilities θ (a Dirichlet): E[log θ_k] per category; at the
    VMP fixed point z's probabilities are ∝ exp(E[log θ_k]) under θ's posterior:

    >>> @ff.factor(z="int", theta="simplex")
    ... def doc_categorical(z, theta):
    ...     return ff.sum(z["k"] * ff.log(theta["k"]), "k")
    >>> @ff.naturals(doc_categorical, "z", "Discrete")
    ... def doc_z_update(theta):
    ...     return (ff.Elog(theta),)
    >>> with ff.Model() as model:
    ...     theta = ff.Dirichlet("theta", [2.0, 1.0, 1.0])
    ...     z = doc_categorical("z", theta=theta)
    >>> result = model.infer("vmp")
    >>> p = np.exp(result["theta"].mean_log())
    >>> bool(np.allclose(result["z"].probs, p / p.sum()))
    True
    """
    return _formula(_Elog, "Elog", x)


def sum_over(x: Any, index: Any, *more: str) -> Any:
    """``ff.sum``: the sum of ``x`` over the inner index ``index`` (and the indices
    ``more``, VinDsl's Σ_ij: ``ff.sum(t, "i", "j")``) in a factor formula; with a model
    variable and an ``ff.Range``, the sum of a plate of real variables (a variable outside
    that plate, ``model.reductions.plate_sum``)."""
    from factorflow.model.core import Range, Variable
    if isinstance(x, Variable) or isinstance(index, Range):
        from factorflow.model.reductions import plate_sum
        return plate_sum(x, index)
    for k in (index, *more):
        if not isinstance(x, Term) or not isinstance(k, str) or k not in x.indices:
            raise ModelError(f"ff.sum(..., {k!r}): the summand must be a formula that "
                             f"carries the index {k!r} (write the vector argument as "
                             f"arg[{k!r}]).")
        x = index_sum(x, k)
    return x


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
        elif t.op == COVARIANCE and isinstance(args[name], VectorGaussian):
            env[t] = args[name].covariance
        else:
            env[t] = np.asarray(_MOMENT[t.op](args[name]), dtype=float)
    return env


def _inner_last(value: np.ndarray, term: Term) -> np.ndarray:
    """``value`` of ``term`` with its free inner index (first axis) moved last."""
    return np.moveaxis(value, 0, -1) if term.indices else value


def _index_uses(density: Term) -> tuple[dict[str, set[tuple[str, ...]]], set[str], set[str]]:
    """How the formula reads each argument: the inner indices of each indexed use
    (``lam["i", "j"]`` is ``("i", "j")``), the arguments used bare, and those used whole
    in ``logdet``."""
    uses: dict[str, set[tuple[str, ...]]] = {}
    bare: set[str] = set()
    whole: set[str] = set()
    stack, seen = [density], set()
    while stack:
        t = stack.pop()
        if t in seen:
            continue
        seen.add(t)
        chain: list[str] = []
        base = t
        while base.op == INDEX and isinstance(base.payload, str):
            chain.append(base.payload)  # at(at(lam, j), i) is lam[i, j]
            base = base.args[0]
        if chain and base.op == SYM:
            uses.setdefault(base.payload[0], set()).add(tuple(chain))
            continue
        if t.op == LOGDET and t.args[0].op == SYM:
            whole.add(t.args[0].payload[0])
            continue
        if t.op == SYM:
            bare.add(t.payload[0])
        stack.extend(t.args)
    return uses, bare, whole


def _inner_indices(density: Term, arguments: dict[str, str], fname: str
                   ) -> tuple[dict[str, str], dict[str, frozenset[str]]]:
    """The inner index of each simplex or category argument, and the index names of each
    vector or matrix argument; ModelError naming the formula and the argument for a
    misuse of indices."""
    if density.indices:
        k = sorted(density.indices)[0]
        raise ModelError(f"{fname}: the formula's value still carries the index {k!r}; sum it "
                         f"with ff.sum(..., {k!r}) (a factor's log density is a scalar).")
    found, bare, whole = _index_uses(density)
    names = {k for ks in found.values() for use in ks for k in use}
    reserved = sorted(k for k in names if k.startswith("_"))
    if reserved:
        raise ModelError(f"{fname}: the index name {reserved[0]!r} starts with '_', which "
                         "factorflow keeps for its own indices; rename it.")
    for name, domain in arguments.items():
        uses = sorted(found.get(name, ()))
        if domain in _MATRIX:
            _check_matrix_uses(fname, name, domain, uses, name in bare, name in whole)
            continue
        if name in whole:
            raise ModelError(f"{fname}: ff.logdet({name}) needs a positive-definite matrix, "
                             f"but {name!r} has the domain {domain!r}; declare it \"posdef\".")
        if domain not in _VECTOR and uses:
            raise ModelError(f"{fname}: argument {name!r} has the scalar domain {domain!r} but "
                             f"is indexed as {name}[{', '.join(map(repr, uses[0]))}]; index only "
                             f"vector arguments ({sorted(_VECTOR | set(_MATRIX))}).")
        if domain in _VECTOR and (name in bare or not uses):
            raise ModelError(f"{fname}: the vector argument {name!r} ({domain}) must be used "
                             f"with its inner index, as {name}['k'] inside ff.sum(..., 'k').")
        if domain in _VECTOR and (len(uses) > 1 or len(uses[0]) != 1):
            raise ModelError(f"{fname}: argument {name!r} is indexed as "
                             f"{', '.join(f'{name}{list(u)}' for u in uses)}; a {domain} "
                             "argument has one inner index.")
    inner = {n: found[n].copy().pop()[0] for n, d in arguments.items() if d in _VECTOR}
    indices = {n: frozenset(k for use in found.get(n, ()) for k in use)
               for n, d in arguments.items() if d in _MATRIX}
    return inner, indices


def _check_matrix_uses(fname: str, name: str, domain: str, uses: list[tuple[str, ...]],
                       bare: bool, whole: bool) -> None:
    """ModelError unless every use of the vector or matrix argument ``name`` has its
    number of inner indices (distinct), and a matrix used whole is under ``logdet``."""
    count = _MATRIX[domain][0]
    example = f"{name}['i']" if count == 1 else f"{name}['i', 'j']"
    for use in uses:
        if len(use) != count or len(set(use)) != count:
            raise ModelError(f"{fname}: argument {name!r} ({domain}) is indexed as "
                             f"{name}[{', '.join(map(repr, use))}]; it takes {count} distinct "
                             f"inner index{'es' if count > 1 else ''} per use, as {example}.")
    if bare or (whole and domain != "posdef"):
        raise ModelError(f"{fname}: argument {name!r} ({domain}) is used whole; write it with "
                         f"its inner indices, as {example} inside ff.sum"
                         + (", or as ff.logdet({name})." if domain == "posdef" else "."))
    if not uses and not whole:
        raise ModelError(f"{fname}: argument {name!r} ({domain}) is not read by the formula.")


@dataclass
class UserFactor:
    """A factor defined by its log density; call it in a model to create a variable."""

    name: str
    arguments: dict[str, str]
    log_density: Term
    derivations: dict[str, Derivation] = field(default_factory=dict)
    blocked: dict[str, str] = field(default_factory=dict)
    factor: Factor | None = None
    #: the inner index of each simplex or category argument
    inner: dict[str, str] = field(default_factory=dict)
    #: the inner index names of each vector or matrix argument (``"vector"``, ``"posdef"``)
    indices: dict[str, frozenset[str]] = field(default_factory=dict)
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
        self._check_shapes(name, args)
        sizes = self._sizes(name, args)
        size = sizes.get(self.inner.get(output, ""))
        if self.arguments[output] in _VECTOR and size is None:
            raise ModelError(f"{self.name}({name!r}): the number of components of {output!r} "
                             f"comes from an argument sharing its index "
                             f"{self.inner[output]!r}, and there is none.")
        if self.arguments[output] in _MATRIX:
            size = self._dimension(name, output, sizes, observed)
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
            if arg not in self.inner and arg not in self.indices:
                continue
            if isinstance(value, Variable):
                k = value.size
            else:  # a constant, or an ff.Data's value when built (it fixes the size)
                shape = np.shape(value.value if isinstance(value, Data) else value)
                sized = self.arguments[arg] in ("simplex", *_MATRIX)
                k = int(shape[-1]) if sized and shape else None
            if k is None:
                continue
            names = self.indices.get(arg) or {self.inner[arg]}
            for index in sorted(names):
                if index in sizes and sizes[index][0] != k:
                    other_k, other = sizes[index]
                    raise ModelError(f"{self.name}({name!r}): index {index!r} has {other_k} "
                                     f"components in {other!r} but {k} in {arg!r}; arguments "
                                     "sharing an inner index must have the same size.")
                sizes[index] = (k, arg)
        return {index: k for index, (k, _) in sizes.items()}

    def _check_shapes(self, name: str, args: dict[str, Any]) -> None:
        """ModelError naming the factor and the argument when a vector or matrix argument
        is given a scalar variable or value (or a scalar argument a vector variable)."""
        for arg, value in args.items():
            domain = self.arguments[arg]
            what = f"{self.name}({name!r}): argument {arg!r}"
            if isinstance(value, Variable) and (domain in _MATRIX or value.domain in _MATRIX) \
                    and value.domain != domain and domain not in _KNOWN_ONLY:
                raise ModelError(f"{what} is declared {domain!r} in the formula, but the "
                                 f"variable {value.name!r} given for it is {value.domain}-valued.")
            if domain in _MATRIX and not isinstance(value, Variable):
                shape = np.shape(value.value if isinstance(value, Data) else value)
                ndim = _MATRIX[domain][0]
                if len(shape) < ndim or (ndim == 2 and shape[-1] != shape[-2]):
                    need = "a D-vector" if ndim == 1 else "a D × D matrix"
                    raise ModelError(f"{what} is declared {domain!r} in the formula (a "
                                     f"{need}), but the value given has shape {shape}.")

    def _dimension(self, name: str, output: str, sizes: dict[str, int], observed: Any) -> int:
        """D of a vector or matrix output: from an argument sharing one of its indices, or
        from its observed value."""
        for index in sorted(self.indices.get(output, ())):
            if index in sizes:
                return sizes[index]
        shape = np.shape(observed.value if isinstance(observed, Data) else observed)
        if observed is not None and shape:
            return int(shape[-1])
        raise ModelError(f"{self.name}({name!r}): the dimension of {output!r} comes from an "
                         f"argument sharing one of its indices {sorted(self.indices[output])} "
                         "or from its observed value, and there is none.")


def factor(**arguments: str) -> Callable[[Callable[..., Term]], UserFactor]:
    """Declare a factor from its log-density formula; see the module docstring.

    Guarantees: the VMP message to every conjugate argument and the ELBO term equal the
    derivative and value of E_q[log f] (checked against the built-ins in the tests).

    A coin written as a formula: with a Beta(1, 1) prior and flips T, T, T, F the
    posterior is Beta(1 + 3, 1 + 1), as the built-in ``ff.Bernoulli`` gives:

    >>> @ff.factor(sample="bool", p="unit")
    ... def doc_coin(sample, p):
    ...     return sample * ff.log(p) + (1 - sample) * ff.log(1 - p)
    >>> with ff.Model() as model:
    ...     p = ff.Beta("p", 1.0, 1.0)
    ...     with ff.Plate(ff.Range("n", 4)):
    ...         flips = doc_coin("flip", p=p, observed=[True, True, True, False])
    >>> model.infer("vmp")["p"]
    Beta(alpha=4.0, beta=2.0)
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
                             "ff.log, ff.exp, ff.lgamma, ff.digamma, ff.logdet and "
                             "ff.sum.") from None
        if not isinstance(density, Term):
            raise ModelError(f"{fn.__name__}: the formula must involve its arguments.")
        inner, indices = _inner_indices(density, arguments, fn.__name__)
        name = sanitize(fn.__name__)
        known = _USER_FACTORS.get(name)
        if known is not None and known.arguments == arguments and known.log_density is density:
            return known  # the same definition again (a model built twice): one factor
        if name in FACTORS:
            raise ModelError(f"a factor named {name!r} already exists with another formula or "
                             "arguments; rename the function.")
        user = UserFactor(name, dict(arguments), density, inner=inner, indices=indices)
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
    reads = (*others, target) if domain in _VECTOR or domain in _MATRIX else others
    build = _matrix_operator if domain in _MATRIX else _operator
    registered.operator("vmp", target, proper=others)(
        build(d, _FAMILY[domain][1], reads, dict(user.arguments), user.inner))


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


def _matrix_operator(d: Derivation, to_message: Callable[..., Any], reads: tuple[str, ...],
                     domains: dict[str, str], inner: dict[str, str]) -> Callable[..., Any]:
    """The message to a vector or matrix target (the last of ``reads``): each natural
    parameter evaluated with its own indices (``_row``, ``_col``) as its last axes, in that
    order (size 1 where it does not carry one: a coefficient the same for every
    component), broadcast to the plates' shape + its event shape at the target's D.
    With ``reduce`` (a target outside plates its use adds), the product over those plate
    axes, each natural summed by one einsum per monomial (:func:`_fused_natural`)."""
    naturals = list(d.naturals)
    target = reads[-1]
    owns = [tuple(k for k in (ROW, COL) if k in stat.indices) for stat in d.statistics]
    events = _MATRIX[domains[target]][1]

    def message(*, reduce: Reduce | None = None, **args: Any) -> Any:
        env = _environment(naturals, args, domains, inner)
        if reduce is None:
            values = [_own_last(evaluate(n, env), n, own)
                      for n, own in zip(naturals, owns, strict=True)]
        else:
            values = [_fused_natural(n, env, own, reduce)
                      for n, own in zip(naturals, owns, strict=True)]
        batch = np.broadcast_shapes(*(np.shape(v)[:np.ndim(v) - len(own)]
                                      for v, own in zip(values, owns, strict=True)))
        dim = _dim_of(args[target], values, owns)
        return to_message(*(np.broadcast_to(v, batch + e)
                            for v, e in zip(values, events(dim), strict=True)))

    params = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY) for n in reads]
    params.append(inspect.Parameter("reduce", inspect.Parameter.KEYWORD_ONLY, default=None))
    message.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return message


def _fused_natural(term: Term, env: dict[Any, np.ndarray], own: tuple[str, ...] = (),
                   reduce: Reduce | None = None) -> np.ndarray:
    """Σ over the plate axes of ``reduce`` (none without it) of ``term``, a closed sum of
    monomials (a product of factors under index sums), equal to its ``evaluate``: each
    monomial is one ``plate_einsum`` over its factors' values, their inner indices as
    event subscripts, so no array of plates × D × D is formed (Σ_n E[x_n] E[x_n]ᵀ is one
    matrix product, E[x_n]ᵀ E[Λ] E[x_n] one einsum per datum). The result has the kept
    plate axes, then ``own`` (size 1 where ``term`` lacks one)."""
    letters: dict[str, str] = {}

    def subscripts(names: tuple[str, ...]) -> str:
        return "".join(letters.setdefault(n, chr(ord("A") + len(letters))) for n in names)

    total: Any = 0.0
    for monomial in term.args if term.op == SUM else (term,):
        body = monomial
        while body.op == INDEX_SUM:
            body = body.args[0]
        operands = []
        for f in body.args if body.op == PROD else (body,):
            value, names = evaluate_named(f, env)
            value = np.asarray(value, float)  # (named axes last: plate_einsum's events)
            value = np.moveaxis(value, range(len(names)), range(-len(names), 0))
            operands.append((value, subscripts(names)))
        present = tuple(k for k in own if k in monomial.indices)
        plates = np.broadcast_shapes(*(v.shape[:v.ndim - len(e)] for v, e in operands))
        out = plate_einsum(subscripts(present), operands,
                           (plates, ()) if reduce is None else reduce)
        kept = out.shape[:out.ndim - len(present)]
        carried = iter(out.shape[len(kept):])
        total = total + out.reshape(kept + tuple(next(carried) if k in present else 1
                                                 for k in own))
    return np.asarray(total, float)


def _own_last(value: np.ndarray, term: Term, own: tuple[str, ...]) -> np.ndarray:
    """``value`` of ``term`` (its free indices first, sorted: ``evaluate``'s order) with
    the indices ``own`` last, in that order; a size-1 axis for each it does not carry."""
    present = sorted(term.indices)
    source = [present.index(k) for k in own if k in term.indices]
    value = np.moveaxis(np.asarray(value, float), source, range(-len(source), 0))
    batch = value.shape[:value.ndim - len(source)]
    carried = iter(value.shape[len(batch):])
    return value.reshape(batch + tuple(next(carried) if k in term.indices else 1
                                       for k in own))


def _dim_of(target: Any, values: list[np.ndarray], owns: list[tuple[str, ...]]) -> int:
    """D of a vector or matrix target: its message's, else the largest own axis."""
    if isinstance(target, VectorGaussian | Wishart):
        return target.dim
    return max([int(np.shape(v)[-1]) for v, own in zip(values, owns, strict=True) if own]
               + [1])


def _elbo(term: Term, domains: dict[str, str], inner: dict[str, str]) -> Callable[..., Any]:
    fused = any(d in _MATRIX for d in domains.values())  # (vectors: no plates × D × D)

    def average_log_factor(**args: Any) -> np.ndarray:
        env = _environment([term], args, domains, inner)
        return _fused_natural(term, env) if fused else evaluate(term, env)

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
