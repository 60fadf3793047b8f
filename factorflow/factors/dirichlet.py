"""Dirichlet(sample | alpha): the Dirichlet prior of a probability vector (known alpha).

log f = Σ_k (α_k − 1) log x_k − (Σ_k log Γ(α_k) − log Γ(Σ_k α_k)).

Probability vectors carry their K categories on the last axis.  The factor is itself a
Dirichlet message to its sample, under EP and VMP alike.
"""

from __future__ import annotations

import numpy as np

from factorflow.distributions import Dirichlet
from factorflow.distributions.base import log_normalizer_or_zero, memo_of, traced
from factorflow.distributions.moments import E, Elog, is_known
from factorflow.factors.registry import define_factor
from factorflow.lazy import special


def _log_normalizer(alpha):
    return np.sum(special.gammaln(alpha), axis=-1) - special.gammaln(np.sum(alpha, axis=-1))


def _log_density(sample, alpha):
    return np.sum(special.xlogy(alpha - 1, sample), axis=-1) - _log_normalizer(alpha)


DIRICHLET = define_factor("Dirichlet", ("sample", "simplex"), ("alpha", "positive"),
                          log_density=_log_density)


def _prior(alpha) -> Dirichlet:
    return Dirichlet.from_natural(np.asarray(E(alpha), float) - 1.0)


@DIRICHLET.operator("vmp", "sample", known=("alpha",))
def _sample_vmp(alpha) -> Dirichlet:
    """Dirichlet(α): log f is linear in the sample's statistics log x."""
    return _prior(alpha)


@DIRICHLET.operator("ep", "sample", known=("alpha",))
def _sample_ep(alpha) -> Dirichlet:
    """Dirichlet(α): the exact message."""
    return _prior(alpha)


@DIRICHLET.evidence_operator("vmp")
def _average_log_factor(sample, alpha) -> np.ndarray:
    """E_q[log f] = Σ_k (α_k − 1) E[log x_k] − log B(α)."""
    a = np.asarray(E(alpha), float)
    terms = (a - 1) * Elog(sample)
    if traced() or type(alpha) is not np.ndarray or type(terms) is not np.ndarray:
        return np.sum(terms, axis=-1) - _log_normalizer(a)
    # a known α's log B(α), a constant of the run: computed once while its array lives;
    # the array's own sum (the reduction ``np.sum`` calls: the same numbers)
    return terms.sum(axis=-1) - memo_of("dirichlet_log_normalizer", a, _log_normalizer)


@DIRICHLET.evidence_operator("ep")
def _log_average_factor(sample, alpha) -> np.ndarray:
    """log ∫ f m_x: the log density at a known sample, else A(prior · m) − A₀(m) − A(prior),
    A₀ the log normaliser or 0 for a uniform m (the weight 1)."""
    if is_known(sample):
        return _log_density(E(sample), np.asarray(E(alpha), float))
    prior = _prior(alpha)
    with np.errstate(divide="ignore", invalid="ignore"):
        return ((prior * sample).log_normalizer() - log_normalizer_or_zero(sample)
                - prior.log_normalizer())
