"""LinearVectorGaussian(sample | matrix, vector, offset, precision): x ~ N(B z + a, Λ⁻¹),
the VectorGaussian whose mean is a linear map of a D-vector z, fused into one factor.

log f = ½ log |Λ| − (M/2) log 2π − ½ (x − B z − a)ᵀ Λ (x − B z − a)

B is a known M × D matrix of any shape and rank (one for all, or one per plate element), a
a known M-vector, Λ an M × M precision.  ``ff.VectorGaussian(name, B @ z + a, precision=Λ)``
becomes this factor when B z has no proper Gaussian (M > D, or dependent rows): the
product's message would then be a VectorGaussian of singular covariance, which natural
parameters cannot hold; fused, the messages to z come straight from the Gaussian
likelihood (as Infer.NET's and BayesPy's linear-Gaussian nodes do), so nothing degenerate
is formed.

EP (Λ known; exact, the factor is linear-Gaussian):

* to x: N(B m + a, B Σ Bᵀ + Λ⁻¹) for z's message N(m, Σ) (N(B z + a, Λ⁻¹) for a known z);
* to z: x's message (h, P) convolved through Λ (precision Λ (Λ + P)⁻¹ P, precision times
  mean Λ (Λ + P)⁻¹ h: ``vector_gaussian.convolve``) is a message (h', P') on μ = B z + a;
  as a function of z its naturals are (Bᵀ (h' − P' a), Bᵀ P' B), of rank ≤ D.

VMP (Λ known or a Wishart; Winn & Bishop's VectorGaussian rules through the linear map):

* to x: (E[Λ] (B E[z] + a), E[Λ]);
* to z: (Bᵀ E[Λ] (E[x] − a), Bᵀ E[Λ] B), summed over plate axes by one einsum each
  (``reduce=``) when z is shared by many x;
* to Λ: the Wishart (½, −½ E[r rᵀ]) of the residual r = x − B z − a, whose mean is
  E[x] − B E[z] − a and covariance Cov x + B Cov z Bᵀ;
* evidence: E log N(r; 0, Λ⁻¹).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from factorflow.distributions import VectorGaussian, Wishart
from factorflow.distributions.moments import is_known
from factorflow.distributions.multivariate import inverse
from factorflow.factors.common import Reduce, plate_einsum
from factorflow.factors.linear_vector import _from_moments, _is_uniform, _linear_evidence
from factorflow.factors.registry import define_factor
from factorflow.factors.vector_gaussian import (
    _log_average_factor as _vector_gaussian_evidence,
)
from factorflow.factors.vector_gaussian import (
    _log_density as _vector_gaussian_density,
)
from factorflow.factors.vector_gaussian import (
    convolve,
    matrix_mean,
    mean_cov,
    residual_average_log,
    residual_wishart,
    vector_gaussian,
)


def _mean(matrix, vector, offset) -> np.ndarray:
    """B z + a for known arrays (z, or its mean)."""
    return np.einsum("...md,...d->...m", np.asarray(matrix, float), np.asarray(vector, float),
                     optimize=True) + np.asarray(offset, float)


def _log_density(sample, matrix, vector, offset, precision):
    return _vector_gaussian_density(sample, _mean(matrix, vector, offset), precision)


LINEAR_VECTOR_GAUSSIAN = define_factor(
    "LinearVectorGaussian", ("sample", "vector"), ("matrix", "matrix"), ("vector", "vector"),
    ("offset", "vector"), ("precision", "posdef"), log_density=_log_density)


def _spread(matrix, cov: Any) -> Any:
    """B Σ Bᵀ (the scalar 0 for a known z)."""
    if not np.ndim(cov):
        return 0.0
    b = np.asarray(matrix, float)
    return np.einsum("...kd,...de,...le->...kl", b, cov, b, optimize=True)


def _pull_back(h: np.ndarray, p: np.ndarray, matrix, offset,
               reduce: Reduce | None = None) -> VectorGaussian:
    """A message (h, P) on μ = B z + a as a function of z: naturals (Bᵀ (h − P a), Bᵀ P B);
    with ``reduce``, their sums over its plate axes (one einsum each)."""
    b, a = np.asarray(matrix, float), np.asarray(offset, float)
    shifted = h - np.einsum("...ij,...j->...i", p, a, optimize=True)
    if reduce is None:
        return vector_gaussian(np.einsum("...kd,...k->...d", b, shifted, optimize=True),
                               np.einsum("...kd,...kl,...le->...de", b, p, b, optimize=True))
    p = np.broadcast_to(p, np.broadcast_shapes(p.shape[:-2], shifted.shape[:-1]) + p.shape[-2:])
    return vector_gaussian(plate_einsum("D", [(b, "KD"), (shifted, "K")], reduce),
                           plate_einsum("DE", [(b, "KD"), (p, "KL"), (b, "LE")], reduce))


def _forward(matrix, vector, offset, precision) -> VectorGaussian:
    """N(B m + a, B Σ Bᵀ + Λ⁻¹): the distribution of x with z integrated out (uniform where
    z's message is)."""
    if is_known(vector):
        return convolve(_mean(matrix, vector, offset), precision)
    m, cov = mean_cov(vector)
    return _from_moments(_mean(matrix, m, offset),
                         _spread(matrix, cov) + inverse(np.asarray(precision, float)),
                         _is_uniform(vector))


# ----- EP (known precision) -----------------------------------------------------------------
@LINEAR_VECTOR_GAUSSIAN.operator("ep", "sample", skip_if_uniform=("vector",),
                                 known=("matrix", "offset", "precision"))
def _sample_ep(matrix, vector, offset, precision) -> VectorGaussian:
    """N(B m + a, B Σ Bᵀ + Λ⁻¹): exact."""
    return _forward(matrix, vector, offset, precision)


@LINEAR_VECTOR_GAUSSIAN.operator("ep", "vector", skip_if_uniform=("sample",),
                                 known=("matrix", "offset", "precision"))
def _vector_ep(sample, matrix, offset, precision) -> VectorGaussian:
    """x's message convolved through Λ, pulled back through B z + a: exact."""
    on_mean = convolve(sample, precision)
    return _pull_back(on_mean.eta[0][..., 0], on_mean.eta[1], matrix, offset)


@LINEAR_VECTOR_GAUSSIAN.evidence_operator("ep")
def _log_average_factor(sample, matrix, vector, offset, precision) -> np.ndarray:
    """log ∫∫ N(x; B z + a, Λ⁻¹) m_x(x) m_z(z) with normalised messages."""
    if is_known(vector):
        return _vector_gaussian_evidence(sample, _mean(matrix, vector, offset), precision)
    return _linear_evidence(sample, _forward(matrix, vector, offset, precision))


# ----- VMP ----------------------------------------------------------------------------------
def _residual(sample, matrix, vector, offset) -> tuple[np.ndarray, Any]:
    """(E r, Cov r) of r = x − B z − a under q(x) q(z)."""
    (mx, cx), (mz, cz) = mean_cov(sample), mean_cov(vector)
    cov = np.add(cx, _spread(matrix, cz))
    return mx - _mean(matrix, mz, offset), cov


@LINEAR_VECTOR_GAUSSIAN.operator("vmp", "sample", proper=("vector", "precision"),
                                 known=("matrix", "offset"))
def _sample_vmp(matrix, vector, offset, precision) -> VectorGaussian:
    """(E[Λ] (B E[z] + a), E[Λ])."""
    lam = matrix_mean(precision)
    mu = _mean(matrix, mean_cov(vector)[0], offset)
    return vector_gaussian(np.einsum("...ij,...j->...i", lam, mu, optimize=True), lam)


@LINEAR_VECTOR_GAUSSIAN.operator("vmp", "vector", proper=("sample", "precision"),
                                 known=("matrix", "offset"))
def _vector_vmp(sample, matrix, offset, precision, *,
                reduce: Reduce | None = None) -> VectorGaussian:
    """(Bᵀ E[Λ] (E[x] − a), Bᵀ E[Λ] B), fused over the plate axes of ``reduce``."""
    lam = matrix_mean(precision)
    x = mean_cov(sample)[0]
    return _pull_back(np.einsum("...ij,...j->...i", lam, x, optimize=True), lam, matrix,
                      offset, reduce)


@LINEAR_VECTOR_GAUSSIAN.operator("vmp", "precision", proper=("sample", "vector"),
                                 known=("matrix", "offset"))
def _precision_vmp(sample, matrix, vector, offset, *,
                   reduce: Reduce | None = None) -> Wishart:
    """The Wishart (½, −½ E[r rᵀ]) of the residual r = x − B z − a."""
    d, cov = _residual(sample, matrix, vector, offset)
    return residual_wishart(d, cov, reduce)


@LINEAR_VECTOR_GAUSSIAN.evidence_operator("vmp")
def _average_log_factor(sample, matrix, vector, offset, precision) -> np.ndarray:
    """E log N(x − B z − a; 0, Λ⁻¹) under the posteriors."""
    return residual_average_log(*_residual(sample, matrix, vector, offset), precision)
