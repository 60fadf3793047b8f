"""Exact expectations by enumeration, the independent check for the expectation algebra.

Each random symbol gets an independent discrete posterior with a few support points
(scalars, vectors or matrices); a moment ``E[f]``, ``V[f]``, ``Elog(f)``, ... is the
weighted sum over the joint support of the symbols in ``f`` — exact, no sampling.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from factorflow.rewrite.evaluate import evaluate
from factorflow.rewrite.terms import (
    COVARIANCE,
    ELOG,
    ELOG1M,
    ELOGDET,
    ELOGGAMMA,
    EXPECT,
    MOMENTS,
    VARIANCE,
    Term,
    lgamma,
    log,
    logdet,
)


@dataclass(frozen=True)
class DiscretePosterior:
    """Support points ``values[i]`` (any shape) with probabilities ``probs[i]``."""

    values: np.ndarray
    probs: np.ndarray


def random_posterior(rng: np.random.Generator, shape: tuple[int, ...] = (), points: int = 3,
                     low: float = 0.1, high: float = 0.9) -> DiscretePosterior:
    """A random discrete posterior; matrices (shape (n, n)) are symmetric positive definite."""
    if len(shape) == 2:
        a = rng.normal(size=(points, *shape))
        values = a @ np.swapaxes(a, 1, 2) + shape[0] * np.eye(shape[0])
    else:
        values = rng.uniform(low, high, size=(points, *shape))
    return DiscretePosterior(values, rng.dirichlet(np.ones(points)))


def _integrand(m: Term) -> Term:
    arg = m.args[0]
    return {EXPECT: arg, VARIANCE: arg, COVARIANCE: arg, ELOG: log(arg), ELOG1M: log(1 - arg),
            ELOGGAMMA: lgamma(arg), ELOGDET: logdet(arg)}[m.op]


def exact_value(term: Term, posteriors: Mapping[str, DiscretePosterior],
                env: Mapping[Term | str, object] | None = None) -> np.ndarray:
    """The value of ``term`` with every moment in it computed exactly (inner ones first);
    symbols outside moments take their values from ``env``."""
    env = dict(env or {})
    for m in _moments_inner_first(term):
        if m in env:
            continue
        f = _integrand(m)
        names = sorted(m.args[0].random_symbols)
        first = second = 0.0
        for combo in itertools.product(*(range(len(posteriors[n].probs)) for n in names)):
            p = np.prod([posteriors[n].probs[i] for n, i in zip(names, combo, strict=True)])
            point = {**env, **{n: posteriors[n].values[i] for n, i in zip(names, combo,
                                                                            strict=True)}}
            v = evaluate(f, point)
            first, second = first + p * v, second + p * _square(v, m.op)
        if m.op in (VARIANCE, COVARIANCE):
            env[m] = second - _square(first, m.op)
        else:
            env[m] = first
    return evaluate(term, env)


def _square(v: np.ndarray, op: str) -> np.ndarray:
    """v² for a variance, the outer product over the last axis for a covariance."""
    v = np.asarray(v)
    return v[..., :, None] * v[..., None, :] if op == COVARIANCE else v * v


def _moments_inner_first(term: Term) -> list[Term]:
    order: dict[Term, None] = {}

    def visit(t: Term) -> None:
        for a in t.args:
            visit(a)
        if t.op in MOMENTS:
            order[t] = None

    visit(term)
    return list(order)
