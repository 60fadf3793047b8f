"""User-written natural-parameter updates (VinDsl's ``@defnaturals``), checked, then used.

``@ff.naturals(factor, argument, family)`` on a function of the factor's *other* arguments
that returns the natural parameters of the VMP message to ``argument``, written for one
element (a kernel: the compiler sums over plates, as for the factor's formula), in
moments ``ff.E``, ``ff.V``, ``ff.Elog``, ... of those arguments. The parameters follow the
derivation's convention: the coefficients of the family's sufficient statistics in
E_q[log f] (Gaussian: of x and x², so VinDsl's ``(E(x) E(τ), -E(τ)/2)``; Gamma: of log x
and x; Beta: of log x and log(1 - x); Bernoulli: of x; Dirichlet, Discrete: of the
inner-indexed statistic)::

    @ff.naturals(gaussian_factor, "mu", "Gaussian")
    def mu_update(x, tau):
        return ff.E(x) * ff.E(tau), -ff.E(tau) / 2

Guarantees: before it is used, the update is compared with the update derived from the
formula on three sets of random inputs (a random posterior per argument); a mismatch, a
family that is not the argument's, a wrong number of parameters, or an argument with no
conjugate update at all raises :class:`~factorflow.errors.ModelError` naming the factor
and the argument. Once checked, the factor's message to ``argument`` evaluates the user's
formula (``factor.custom`` lists the arguments that have one).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from factorflow.distributions.families import (
    Bernoulli,
    Beta,
    Dirichlet,
    Discrete,
    Gamma,
    Gaussian,
)
from factorflow.errors import ModelError
from factorflow.model.dsl import (
    _FAMILY,
    _KNOWN_ONLY,
    _VECTOR,
    UserFactor,
    _environment,
    _inner_last,
    _operator,
)
from factorflow.rewrite.evaluate import evaluate
from factorflow.rewrite.terms import Term, as_term, data, sym

_N, _K = 6, 3
#: a random posterior (or known value) of each domain, for the check
_RANDOM: dict[str, Callable[[np.random.Generator], Any]] = {
    "real": lambda r: Gaussian(r.normal(size=_N), r.uniform(0.5, 2.0, _N)),
    "positive": lambda r: Gamma(r.uniform(1.0, 3.0, _N), rate=r.uniform(0.5, 2.0, _N)),
    "unit": lambda r: Beta(r.uniform(1.0, 3.0, _N), r.uniform(1.0, 3.0, _N)),
    "bool": lambda r: Bernoulli(r.uniform(0.1, 0.9, _N)),
    "simplex": lambda r: Dirichlet(r.uniform(0.5, 2.0, (_N, _K))),
    "int": lambda r: Discrete(_normalized(r.uniform(0.1, 1.0, (_N, _K)))),
    "count": lambda r: r.integers(0, 10, _N).astype(float),
}


def _normalized(p: np.ndarray) -> np.ndarray:
    return p / p.sum(axis=-1, keepdims=True)


def naturals(user: UserFactor, argument: str, family: str
             ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a checked natural-parameter update; see the module docstring.  Returns
    the decorated function unchanged; ``user.custom`` then names ``argument``.

    The seed's update of a Gaussian's mean in its LogNormalFactor, (E[x] E[τ], −E[τ]/2),
    checked against the derived one; the posterior is the exact N(12 / 2.01, 1 / 2.01):

    >>> @ff.factor(x="real", mu="real", tau="positive")
    ... def doc_log_normal(x, mu, tau):
    ...     return -0.5 * (tau * (x - mu) ** 2 + np.log(2 * np.pi) - ff.log(tau))
    >>> @ff.naturals(doc_log_normal, "mu", "Gaussian")
    ... def doc_log_normal_mu(x, tau):
    ...     return ff.E(x) * ff.E(tau), -ff.E(tau) / 2
    >>> with ff.Model() as model:
    ...     mu = ff.Gaussian("mu", 0.0, variance=100.0)
    ...     with ff.Plate(ff.Range("n", 2)):
    ...         y = doc_log_normal("y", mu=mu, tau=1.0, observed=[5.0, 7.0])
    >>> posterior = model.infer("vmp")["mu"]
    >>> bool(np.allclose([posterior.mean, posterior.variance], [12 / 2.01, 1 / 2.01]))
    True
    >>> ff.naturals(doc_log_normal, "mu", "Gamma")(doc_log_normal_mu)
    Traceback (most recent call last):
    ...
    factorflow.errors.ModelError: @ff.naturals(doc_log_normal, 'mu'): 'mu' has domain 'real', ...
    """
    if not isinstance(user, UserFactor):
        raise ModelError(f"@ff.naturals: {user!r} is not a factor declared with @ff.factor")
    where = f"@ff.naturals({user.name}, {argument!r})"
    matrices = sorted(a for a, d in user.arguments.items() if d not in _RANDOM)
    if matrices:  # (no random posteriors of theirs to check an update on)
        raise ModelError(f"{where}: {user.name} has the vector or matrix arguments "
                         f"{matrices}; a written update is checked only for scalar, simplex "
                         "and category arguments, so the derived updates are used.")
    if argument not in user.arguments:
        raise ModelError(f"{where}: {user.name} has no argument {argument!r}; its arguments "
                         f"are {list(user.arguments)}")
    domain = user.arguments[argument]
    if domain in _KNOWN_ONLY:
        raise ModelError(f"{where}: {argument!r} is a {domain} and must be observed; it "
                         "receives no messages")
    expected, to_message = _FAMILY[domain]
    if family != expected:
        raise ModelError(f"{where}: {argument!r} has domain {domain!r}, whose conjugate family "
                         f"is {expected}, not {family}")
    if argument not in user.derivations:
        raise ModelError(f"{where}: {argument!r} has no conjugate update to write: "
                         f"{user.blocked.get(argument, 'not conjugate')}")

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        others = [a for a in user.arguments if a != argument]
        params = list(inspect.signature(fn).parameters)
        if not set(params) <= set(others):
            raise ModelError(f"{where}: {fn.__name__} takes {params}; it may take only the "
                             f"other arguments {others}")
        out = fn(*(data(p) if user.arguments[p] in _KNOWN_ONLY else sym(p) for p in params))
        terms = tuple(as_term(t) for t in (out if isinstance(out, tuple) else (out,)))
        derived = user.derivations[argument]
        if len(terms) != len(derived.naturals):
            raise ModelError(f"{where}: {fn.__name__} returns {len(terms)} natural parameters; "
                             f"{family} has {len(derived.naturals)}")
        _check(where, user, argument, terms, derived.naturals)
        mine = replace(derived, naturals=terms)
        user.derivations[argument] = mine
        user.custom.add(argument)
        reads = (*others, argument) if domain in _VECTOR else tuple(others)
        assert user.factor is not None
        user.factor.operator("vmp", argument, proper=tuple(others))(
            _operator(mine, to_message, reads, dict(user.arguments), user.inner))
        return fn

    return register


def _check(where: str, user: UserFactor, argument: str, mine: tuple[Term, ...],
           derived: tuple[Term, ...]) -> None:
    """ModelError unless ``mine`` equals ``derived`` on three random sets of posteriors."""
    domains = dict(user.arguments)
    for seed in range(3):
        rng = np.random.default_rng(seed)
        args = {a: _RANDOM[d](rng) for a, d in domains.items() if a != argument}
        env = _environment([*mine, *derived], args, domains, user.inner)
        for i, (m, d) in enumerate(zip(mine, derived, strict=True)):
            got, want = (_inner_last(evaluate(t, env), t) for t in (m, d))
            got, want = np.broadcast_arrays(got, want)
            if not np.allclose(got, want, rtol=1e-9, atol=1e-12):
                j = np.unravel_index(np.argmax(np.abs(got - want)), got.shape)
                raise ModelError(
                    f"{where}: natural parameter {i + 1} is {m}, which differs from the update "
                    f"derived from the formula, {d}, on random inputs ({float(got[j]):.6g} "
                    f"against {float(want[j]):.6g}); fix the update or the formula")
