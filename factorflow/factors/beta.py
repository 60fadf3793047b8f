"""Beta(sample | alpha, beta): the Beta prior of a probability, with known pseudo-counts.

log f = (α − 1) log x + (β − 1) log(1 − x) − log B(α, β).

The factor is itself a Beta message to its sample, under EP and VMP alike.
"""

from __future__ import annotations

import numpy as np

from factorflow.distributions import Beta
from factorflow.distributions.base import log_normalizer_or_zero
from factorflow.distributions.moments import E, Elog, Elog1m, is_known
from factorflow.factors.common import broadcast_batch, full
from factorflow.factors.registry import define_factor
from factorflow.lazy import special


def _log_density(sample, alpha, beta):
    return (special.xlogy(alpha - 1, sample) + special.xlog1py(beta - 1, -sample)
            - special.betaln(alpha, beta))


BETA = define_factor("Beta", ("sample", "unit"), ("alpha", "positive"), ("beta", "positive"),
                     log_density=_log_density)


def _prior(alpha, beta) -> Beta:
    s = broadcast_batch(alpha, beta)
    return Beta.from_natural(full(s, E(alpha) - 1.0), full(s, E(beta) - 1.0))


@BETA.operator("vmp", "sample", known=("alpha", "beta"))
def _sample_vmp(alpha, beta) -> Beta:
    """Beta(α, β): log f is linear in the sample's statistics (log x, log(1 − x))."""
    return _prior(alpha, beta)


@BETA.operator("ep", "sample", known=("alpha", "beta"))
def _sample_ep(alpha, beta) -> Beta:
    """Beta(α, β): the exact message."""
    return _prior(alpha, beta)


@BETA.evidence_operator("vmp")
def _average_log_factor(sample, alpha, beta) -> np.ndarray:
    """E_q[log f] = (α − 1) E[log x] + (β − 1) E[log(1 − x)] − log B(α, β)."""
    a, b = E(alpha), E(beta)
    return (a - 1) * Elog(sample) + (b - 1) * Elog1m(sample) - special.betaln(a, b)


@BETA.evidence_operator("ep")
def _log_average_factor(sample, alpha, beta) -> np.ndarray:
    """log ∫ f m_x: the log density at a known sample, else A(prior · m) − A₀(m) − A(prior),
    A₀ the log normaliser or 0 for a uniform m (the weight 1)."""
    if is_known(sample):
        return _log_density(E(sample), E(alpha), E(beta))
    prior = _prior(alpha, beta)
    with np.errstate(divide="ignore", invalid="ignore"):
        return ((prior * sample).log_normalizer() - log_normalizer_or_zero(sample)
                - prior.log_normalizer())
