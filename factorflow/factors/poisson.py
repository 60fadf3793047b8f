"""Poisson(sample | rate): an observed count with a known or Gamma-distributed rate.

log f = k log λ − λ − log k!,   k = sample, λ = rate.

The count is observed (factorflow has no latent count variables), so the factor is a
Gamma message of shape k + 1 and rate 1 to λ — conjugate and exact under both EP and VMP
(Infer.NET's PoissonOp).
"""

from __future__ import annotations

import numpy as np

from factorflow.distributions import Gamma
from factorflow.distributions.moments import E, Elog, is_known
from factorflow.factors.common import message_log_normalizer, times_finite, unsupported
from factorflow.factors.registry import define_factor
from factorflow.lazy import special


def _log_density(sample, rate):
    k = np.asarray(sample, float)
    return special.xlogy(k, rate) - rate - special.gammaln(k + 1)


POISSON = define_factor("Poisson", ("sample", "count"), ("rate", "positive"),
                        log_density=_log_density)


def _rate_message(sample) -> Gamma:
    """The factor as a function of λ: Gamma natural parameters (k, −1)."""
    k = np.asarray(E(sample), float)
    return Gamma.from_natural(k, np.full(k.shape, -1.0))


def _observed(sample) -> None:
    if not is_known(sample):
        raise unsupported("Poisson", "message passing",
                          "needs the count 'sample' to be observed.")


@POISSON.operator("vmp", "rate", known=("sample",))
def _rate_vmp(sample) -> Gamma:
    """Gamma(k + 1, 1): log f is linear in (log λ, λ)."""
    return _rate_message(sample)


@POISSON.operator("ep", "rate", known=("sample",))
def _rate_ep(sample) -> Gamma:
    """Gamma(k + 1, 1): the exact message for an observed count."""
    return _rate_message(sample)


@POISSON.evidence_operator("vmp")
def _average_log_factor(sample, rate) -> np.ndarray:
    """E_q[log f] = k E[log λ] − E[λ] − log k!."""
    _observed(sample)
    k = np.asarray(E(sample), float)
    return times_finite(k, Elog(rate)) - E(rate) - special.gammaln(k + 1)


@POISSON.evidence_operator("ep")
def _log_average_factor(sample, rate) -> np.ndarray:
    """log ∫ f m_λ = A(m_λ · Gamma(k + 1, 1)) − A(m_λ) − log k!, exact."""
    _observed(sample)
    k = np.asarray(E(sample), float)
    if is_known(rate):
        return _log_density(k, E(rate))
    with np.errstate(divide="ignore", invalid="ignore"):
        return ((_rate_message(sample) * rate).log_normalizer() - message_log_normalizer(rate)
                - special.gammaln(k + 1))
