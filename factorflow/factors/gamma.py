"""Gamma(sample | shape, rate): the Gamma prior and likelihood of a positive variable.

log f = a log r − log Γ(a) + (a − 1) log x − r x,   x = sample, a = shape (known), r = rate.

As a function of the rate, f ∝ r^a e^{−r x}: a Gamma message of shape a + 1 and rate x,
which makes the Gamma conjugate to its own rate (Infer.NET's GammaFromShapeAndRateOp).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from factorflow.distributions import Gamma
from factorflow.distributions.base import traced
from factorflow.distributions.moments import E, Elog, distinct_vector, is_known, own_moments
from factorflow.factors.common import broadcast_batch, full, message_log_normalizer, unsupported
from factorflow.factors.registry import define_factor
from factorflow.lazy import special


def _log_density(sample, shape, rate):
    return (special.xlogy(shape, rate) - special.gammaln(shape)
            + special.xlogy(shape - 1, sample) - rate * sample)


GAMMA = define_factor("Gamma", ("sample", "positive"), ("shape", "positive"),
                      ("rate", "positive"), log_density=_log_density)


def _rate_naturals(x, shape):
    """Natural parameters (a, −x) of the factor as a function of the rate."""
    return full(np.shape(x), shape), -np.asarray(x, float)


# ----- VMP --------------------------------------------------------------------------
@GAMMA.operator("vmp", "sample", proper=("rate",), known=("shape",))
def _sample_vmp(shape, rate) -> Gamma:
    """Gamma(a, E[r]): exp E_r[log f] as a function of x."""
    s = broadcast_batch(shape, rate)
    return Gamma.from_natural(full(s, E(shape) - 1.0), full(s, -E(rate)))


@GAMMA.operator("vmp", "rate", proper=("sample",), known=("shape",))
def _rate_vmp(sample, shape) -> Gamma:
    """Gamma(a + 1, E[x]): exp E_x[log f] as a function of r."""
    s = broadcast_batch(sample, shape)
    return Gamma.from_natural(full(s, E(shape)), full(s, -E(sample)))


@GAMMA.evidence_operator("vmp")
def _average_log_factor(sample, shape, rate) -> np.ndarray:
    """E_q[log f] = a E[log r] − log Γ(a) + (a − 1) E[log x] − E[r] E[x]."""
    if (type(sample) is Gamma and type(shape) in (float, int) and type(rate) in (float, int)
            and not traced() and distinct_vector(sample)):
        # a K-vector posterior under a prior of known numbers: the prior's terms made
        # once a run, the posterior's E[x] and E[log x] together (the same arithmetic,
        # in the same order: the same numbers)
        const, a1, r = _known_terms(float(shape), float(rate))
        mean, mean_log = own_moments(sample)
        return const + a1 * mean_log - r * mean
    a = E(shape)
    return (a * Elog(rate) - special.gammaln(a) + (a - 1) * Elog(sample)
            - E(rate) * E(sample))


@functools.lru_cache(maxsize=64)
def _known_terms(shape: float, rate: float) -> tuple[Any, Any, Any]:
    """(a log r − log Γ(a), a − 1, r) of known numbers a, r, as ``_average_log_factor``'s
    general path computes them (NumPy scalars: the same numbers)."""
    a = E(shape)
    return a * Elog(rate) - special.gammaln(a), a - 1, E(rate)


# ----- EP (exact: the rate must be known, or the sample when sending to the rate) ----
@GAMMA.operator("ep", "sample", known=("shape", "rate"))
def _sample_ep(shape, rate) -> Gamma:
    """The prior Gamma(a, r) itself."""
    s = broadcast_batch(shape, rate)
    return Gamma.from_natural(full(s, E(shape) - 1.0), full(s, -E(rate)))


@GAMMA.operator("ep", "rate", known=("sample", "shape"))
def _rate_ep(sample, shape) -> Gamma:
    """Gamma(a + 1, x): the factor as a function of the rate, for an observed sample."""
    s = broadcast_batch(sample, shape)
    return Gamma.from_natural(full(s, E(shape)), full(s, -E(sample)))


@GAMMA.evidence_operator("ep")
def _log_average_factor(sample, shape, rate) -> np.ndarray:
    """log ∫ f m_x m_r with normalised messages (a uniform message is the weight 1).

    Exact when at most one of sample and rate is random; both random has no closed form
    (and no EP operator needs it).
    """
    a = E(shape)
    if is_known(sample) and is_known(rate):
        return _log_density(E(sample), a, E(rate))
    if is_known(rate):
        prior = _sample_ep(shape, rate)
        with np.errstate(divide="ignore", invalid="ignore"):
            return ((prior * sample).log_normalizer() - message_log_normalizer(sample)
                    - prior.log_normalizer())
    if is_known(sample):
        x = E(sample)
        tilted = Gamma.from_natural(*_rate_naturals(x, a)) * rate
        with np.errstate(divide="ignore", invalid="ignore"):
            return (special.xlogy(a - 1, x) - special.gammaln(a)
                    + tilted.log_normalizer() - message_log_normalizer(rate))
    raise unsupported("Gamma", "ep", "evidence needs the sample or the rate to be known.")
