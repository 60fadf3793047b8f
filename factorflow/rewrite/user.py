"""A user's own functions and their simplification rules (VinDsl's ``@simplify``).

``ff.function(name, impl)`` declares an elementwise function for factor formulas: it
builds the term ``name(args...)`` and evaluates it with ``impl`` (vectorized NumPy).
``@ff.simplify_rule(a="unit", ...)`` registers a rule about such functions as data, like
the built-in rulesets of :mod:`factorflow.rewrite.rules`: the decorated function takes
pattern variables and returns ``(lhs, rhs)``::

    logit = ff.function("logit", scipy.special.logit)

    @ff.simplify_rule(a="unit")
    def logit_as_logs(a):                 # logit(a) -> log(a) - log(1 - a)
        return logit(a), ff.log(a) - ff.log(1 - a)

Guarantees. A rule is registered only after both sides agree on 64 random values of its
variables drawn from their domains (``"real"``, ``"positive"``, ``"unit"``), to 1e-9
relative; a rule that disagrees raises :class:`~factorflow.errors.ModelError` naming it
and the values where it fails. Its left side must apply a user function (rules never
change the built-in algebra), and its right side may use only the left side's
variables. The registered rules join the message derivation
(:func:`~factorflow.factors.derive.derive_naturals`) and the expectation algebra
(:func:`~factorflow.rewrite.expectations.simplify_expectation`), after the built-in rules,
for every factor declared afterwards.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from factorflow.errors import ModelError
from factorflow.rewrite.evaluate import FUNCTION_IMPLEMENTATIONS, evaluate
from factorflow.rewrite.match import Rule, Ruleset
from factorflow.rewrite.terms import CALL, VAR, Term, TermLike, call, var

#: the user's rules, in the order registered
_RULES: dict[str, Rule] = {}
#: how random values are drawn for a variable of each domain
_DOMAINS: dict[str, Callable[[np.random.Generator, int], np.ndarray]] = {
    "real": lambda rng, n: rng.normal(0.0, 3.0, n),
    "positive": lambda rng, n: np.exp(rng.normal(0.0, 1.5, n)),
    "unit": lambda rng, n: rng.uniform(0.01, 0.99, n),
}
_SAMPLES = 64


def function(name: str, impl: Callable[..., Any]) -> Callable[..., Term]:
    """Declare the user function ``name`` (an identifier) evaluated by ``impl``; returns the
    builder used in formulas and rules. Declaring a name again replaces its ``impl``.

    A unit-variance Gaussian factor centred at √k for a known count k: the formula
    calls ``impl`` (here NumPy's ``sqrt``), and the posterior is N(√9, 1) = N(3, 1):

    >>> doc_sqrt = ff.function("doc_sqrt", np.sqrt)
    >>> doc_sqrt("k")
    Traceback (most recent call last):
    ...
    factorflow.errors.ModelError: doc_sqrt('k',): the arguments of a user function must be ...
    >>> @ff.factor(sample="real", k="count")
    ... def doc_centred_at_sqrt(sample, k):
    ...     return -0.5 * (sample - doc_sqrt(k)) ** 2
    >>> with ff.Model() as model:
    ...     x = doc_centred_at_sqrt("x", k=9)
    >>> model.infer("vmp")["x"]
    Gaussian(mean=3.0, variance=1.0)
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ModelError(f"ff.function: the name {name!r} must be a Python identifier")
    if not callable(impl):
        raise ModelError(f"ff.function({name!r}): the implementation must be callable")
    FUNCTION_IMPLEMENTATIONS[name] = impl

    def build(*args: TermLike) -> Term:
        try:
            return call(name, *args)
        except TypeError:
            raise ModelError(f"{name}{args!r}: the arguments of a user function must be "
                             "numbers or formulas of the factor's arguments (inside "
                             "@ff.factor, @ff.naturals or @ff.simplify_rule).") from None

    build.__name__ = name
    build.__doc__ = f"The user function {name}(...) in a factor formula or rule."
    return build


def simplify_rule(**domains: str) -> Callable[[Callable[..., tuple[Term, Term]]], Rule]:
    """Register the rule returned by the decorated function; see the module docstring.
    ``domains`` gives each of its arguments' domain (default ``"real"``).

    A coin written with a user function ``logit``: without a rule the derivation cannot
    see that p·logit(p)… is conjugate to a Beta; with logit(a) → log a − log(1 − a)
    (checked on random values first) it is, and the posterior is the exact Beta(4, 2):

    >>> from scipy import special
    >>> doc_logit = ff.function("doc_logit", special.logit)
    >>> @ff.simplify_rule(a="unit")
    ... def doc_logit_as_logs(a):            # logit(a) -> log(a) - log(1 - a)
    ...     return doc_logit(a), ff.log(a) - ff.log(1 - a)
    >>> print(doc_logit_as_logs)
    doc_logit_as_logs: doc_logit(?a) -> log(?a) - log(1 - ?a)
    >>> @ff.factor(sample="bool", p="unit")
    ... def doc_coin_by_logit(sample, p):
    ...     return sample * doc_logit(p) + ff.log(1 - p)
    >>> with ff.Model() as model:
    ...     p = ff.Beta("p", 1.0, 1.0)
    ...     with ff.Plate(ff.Range("n", 4)):
    ...         flips = doc_coin_by_logit("flip", p=p, observed=[True, True, True, False])
    >>> model.infer("vmp")["p"]
    Beta(alpha=4.0, beta=2.0)
    """
    for name, domain in domains.items():
        if domain not in _DOMAINS:
            raise ModelError(f"@ff.simplify_rule: variable {name!r} has domain {domain!r}; "
                             f"use one of {sorted(_DOMAINS)}")

    def register(fn: Callable[..., tuple[Term, Term]]) -> Rule:
        params = list(inspect.signature(fn).parameters)
        unknown = set(domains) - set(params)
        if unknown:
            raise ModelError(f"@ff.simplify_rule on {fn.__name__}: domains given for "
                             f"{sorted(unknown)}, which are not its arguments {params}")
        sides = fn(*(var(p) for p in params))
        if not (isinstance(sides, tuple) and len(sides) == 2
                and all(isinstance(s, Term) for s in sides)):
            raise ModelError(f"rule {fn.__name__} must return (lhs, rhs), two formulas")
        r = Rule(fn.__name__, *sides)
        _check_shape(r)
        _check_values(r, {p: domains.get(p, "real") for p in params})
        known = _RULES.get(r.name)
        if known is not None and (known.lhs, known.rhs) != (r.lhs, r.rhs):
            raise ModelError(f"a simplify rule named {r.name!r} already exists with other "
                             "sides; rename the function")
        _RULES[r.name] = r
        return r

    return register


def user_rules() -> Ruleset:
    """The rules registered so far, as a ruleset (in registration order)."""
    return Ruleset("user", tuple(_RULES.values()))


def _walk(t: Term) -> list[Term]:
    out, stack = [], [t]
    while stack:
        u = stack.pop()
        out.append(u)
        stack.extend(u.args)
    return out


def _variables(t: Term) -> set[str]:
    return {u.payload[0] for u in _walk(t) if u.op == VAR}


def _check_shape(r: Rule) -> None:
    if not any(u.op == CALL for u in _walk(r.lhs)):
        raise ModelError(f"rule {r.name}: its left side {r.lhs} applies no user function "
                         "(ff.function); rules may only simplify the user's own functions")
    extra = _variables(r.rhs) - _variables(r.lhs)
    if extra:
        raise ModelError(f"rule {r.name}: the right side uses {sorted(extra)}, which the "
                         f"left side {r.lhs} does not bind")


def _check_values(r: Rule, domains: dict[str, str]) -> None:
    """Both sides on random values of the variables; ModelError naming the rule if not equal."""
    rng = np.random.default_rng(20_240_917)
    values = {var(name): _DOMAINS[d](rng, _SAMPLES) for name, d in domains.items()}
    with np.errstate(all="ignore"):
        lhs = np.broadcast_to(evaluate(r.lhs, values), (_SAMPLES,))
        rhs = np.broadcast_to(evaluate(r.rhs, values), (_SAMPLES,))
    good = np.isclose(lhs, rhs, rtol=1e-9, atol=1e-12) & np.isfinite(lhs) & np.isfinite(rhs)
    if not good.all():
        i = int(np.argmin(good))
        at = ", ".join(f"{name}={values[var(name)][i]:.6g}" for name in domains)
        raise ModelError(f"simplify rule {r.name} is wrong: at {at}, {r.lhs} = {lhs[i]:.10g} "
                         f"but {r.rhs} = {rhs[i]:.10g}; fix the rule or its variables' domains")
