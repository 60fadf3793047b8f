"""Wishart(sample | dof, rate): the prior of a D × D precision matrix.

log f = ((ν − D − 1)/2) log |X| − ½ tr(R X) + (ν/2) log |R| − (ν D/2) log 2 − log Γ_D(ν/2)

with X = sample, ν = dof (known), R = rate.  As a function of the rate, f ∝ |R|^(ν/2)
e^(−tr(R X)/2): a Wishart message with naturals (ν/2, −X/2) (dof ν + D + 1, rate X), which
makes the Wishart conjugate to its own rate, as the Gamma is (Infer.NET's
WishartFromShapeAndRateOp).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from factorflow.distributions import Wishart
from factorflow.distributions.base import log_normalizer_or_zero, recall, remember
from factorflow.distributions.moments import is_known
from factorflow.distributions.multivariate import log_multigamma, logdet, trace_product
from factorflow.factors.common import unsupported
from factorflow.factors.registry import define_factor
from factorflow.factors.vector_gaussian import (
    distinct_components,
    matrix_mean,
    mean_log_det,
    wishart_from_naturals,
)


def _log_density(sample, dof, rate):
    dim = np.shape(rate)[-1]
    nu = np.asarray(dof, float)
    return (0.5 * (nu - dim - 1) * logdet(sample) - 0.5 * trace_product(rate, sample)
            + 0.5 * nu * logdet(rate) - 0.5 * nu * dim * np.log(2.0)
            - log_multigamma(0.5 * nu, dim))


WISHART = define_factor("Wishart", ("sample", "posdef"), ("dof", "positive"),
                        ("rate", "posdef"), log_density=_log_density)


def _prior(dof, rate) -> Wishart:
    """W(ν, E[R]): naturals ((ν − D − 1)/2, −E[R]/2) over the broadcast plates."""
    r = matrix_mean(rate)
    nu = np.asarray(dof, float)
    r = np.broadcast_to(r, np.broadcast_shapes(nu.shape, r.shape[:-2]) + r.shape[-2:])
    return wishart_from_naturals(0.5 * (nu - r.shape[-1] - 1), -0.5 * r)


def _rate_message(sample, dof) -> Wishart:
    """The factor as a function of R, averaged over X: naturals (ν/2, −E[X]/2)."""
    x = matrix_mean(sample)
    nu = np.asarray(dof, float)
    x = np.broadcast_to(x, np.broadcast_shapes(nu.shape, x.shape[:-2]) + x.shape[-2:])
    return wishart_from_naturals(0.5 * nu, -0.5 * x)


# ----- VMP ------------------------------------------------------------------------------
@WISHART.operator("vmp", "sample", proper=("rate",), known=("dof",))
def _sample_vmp(dof, rate) -> Wishart:
    return _prior(dof, rate)


@WISHART.operator("vmp", "rate", proper=("sample",), known=("dof",))
def _rate_vmp(sample, dof) -> Wishart:
    return _rate_message(sample, dof)


@WISHART.evidence_operator("vmp")
def _average_log_factor(sample, dof, rate) -> np.ndarray:
    """E_q[log f]: log |X| and log |R| by their expectations, tr(R X) by tr(E[R] E[X]).
    For (K,) posteriors under a known number of degrees of freedom and a known rate
    (the components' prior term of the bound, every sweep) the same operations in the
    same order, so the same numbers, with the prior's terms made once a run
    (``_known_prior_terms``)."""
    if (type(dof) in (float, int) and type(rate) is np.ndarray and rate.dtype == float
            and type(sample) is Wishart and distinct_components(sample)):
        own, scale, shift = _known_prior_terms(float(dof), rate)
        mean, mean_log_det_x = sample._moments()[:2]
        return (own * mean_log_det_x - 0.5 * trace_product(rate, mean) + scale - shift[0]
                - shift[1])
    r = matrix_mean(rate)
    dim = r.shape[-1]
    # (a known number of degrees of freedom stays a Python number: log Γ_D(ν/2) of it is
    # remembered)
    nu = float(dof) if isinstance(dof, (int, float)) else np.asarray(dof, float)
    return (0.5 * (nu - dim - 1) * mean_log_det(sample)
            - 0.5 * trace_product(r, matrix_mean(sample)) + 0.5 * nu * mean_log_det(rate)
            - 0.5 * nu * dim * np.log(2.0) - log_multigamma(0.5 * nu, dim))


def _known_prior_terms(nu: float, rate: np.ndarray) -> tuple[Any, Any, tuple[Any, Any]]:
    """((ν − D − 1)/2, ν/2 E log |R|, (ν D/2 log 2, log Γ_D(ν/2))) of a known ν and a
    known rate R, as ``_average_log_factor``'s general path computes them (the same
    NumPy scalars), made once while R's array lives and ν stays the same."""
    hit = recall("wishart_known_prior_terms", rate)
    if hit is not None and hit[0] == nu:
        return hit[1]
    dim = rate.shape[-1]
    terms = (0.5 * (nu - dim - 1), 0.5 * nu * mean_log_det(rate),
             (0.5 * nu * dim * np.log(2.0), log_multigamma(0.5 * nu, dim)))
    remember("wishart_known_prior_terms", rate, (nu, terms))
    return terms


# ----- EP (exact with a known rate, or a known sample when sending to the rate) ------------
@WISHART.operator("ep", "sample", known=("dof", "rate"))
def _sample_ep(dof, rate) -> Wishart:
    return _prior(dof, rate)


@WISHART.operator("ep", "rate", known=("sample", "dof"))
def _rate_ep(sample, dof) -> Wishart:
    return _rate_message(sample, dof)


@WISHART.evidence_operator("ep")
def _log_average_factor(sample, dof, rate) -> np.ndarray:
    """log ∫ f m_X m_R with normalised messages (a uniform message is the weight 1); exact
    when at most one of sample and rate is random."""
    if is_known(sample) and is_known(rate):
        return _log_density(sample, dof, rate)
    if is_known(rate):
        prior = _prior(dof, rate)
        with np.errstate(divide="ignore", invalid="ignore"):
            return ((prior * sample).log_normalizer() - log_normalizer_or_zero(sample)
                    - prior.log_normalizer())
    if is_known(sample):
        x = np.asarray(sample, float)
        nu = np.asarray(dof, float)
        dim = x.shape[-1]
        tilted = _rate_message(x, nu) * rate
        with np.errstate(divide="ignore", invalid="ignore"):
            return (0.5 * (nu - dim - 1) * logdet(x) - 0.5 * nu * dim * np.log(2.0)
                    - log_multigamma(0.5 * nu, dim) + tilted.log_normalizer()
                    - log_normalizer_or_zero(rate))
    raise unsupported("Wishart", "ep", "evidence needs the sample or the rate to be known.")
