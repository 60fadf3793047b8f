"""Linear maps of vectors: MatrixVectorProduct (``B @ z``) and VectorPlus (``a + b``).

MatrixVectorProduct(product | matrix, vector): product = B z with B a known M × D matrix
(one for all, or one per plate element) and z a D-vector.  VectorPlus(sum | a, b): the
sum of two D-vectors, either of them known.

log f = log δ(product − B z),   log f = log δ(sum − a − b)

Both are linear, so EP's messages are exact (Infer.NET's MatrixVectorProductOp and
VectorGaussianOp-style convolutions) and VMP's are Winn's rules for deterministic factors
(the output a derived variable, no evidence term):

* forward, the distribution of the output: N(B m, B Σ Bᵀ), N(m_a + m_b, Σ_a + Σ_b);
* backward to z from the output's message (h, P): naturals (Bᵀ h, Bᵀ P B) — exactly the
  message ∫ δ(y − B z) m(y) dy, for EP and VMP alike;
* backward to a: EP ∫ m_sum(a + b) m_b(b) db, the output's message shifted by E[b] and
  convolved with b's Gaussian; VMP exp E_b[log m_sum(a + b)], naturals (h − P E[b], P).

A VectorGaussian message holds natural parameters, so the forward distribution must have
a positive-definite covariance: B of full row rank with M ≤ D (checked where the model is
written).  A taller B (more outputs than inputs) is written row by row, as scalar inner
products over a plate of rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from factorflow.distributions import VectorGaussian
from factorflow.distributions.base import log_normalizer_or_zero
from factorflow.distributions.moments import is_known
from factorflow.distributions.multivariate import inverse
from factorflow.factors.common import Reduce, plate_einsum, unsupported
from factorflow.factors.registry import define_factor
from factorflow.factors.vector_gaussian import convolve, mean_cov, vector_gaussian


def _matvec(b: np.ndarray, z: np.ndarray) -> np.ndarray:
    return np.einsum("...kd,...d->...k", b, z, optimize=True)


def _mvp_log_density(product, matrix, vector):
    value = _matvec(np.asarray(matrix, float), np.asarray(vector, float))
    return np.where(np.all(np.asarray(product) == value, axis=-1), 0.0, -np.inf)


def _plus_log_density(sum, a, b):
    return np.where(np.all(np.asarray(sum) == np.add(a, b), axis=-1), 0.0, -np.inf)


MATRIX_VECTOR_PRODUCT = define_factor(
    "MatrixVectorProduct", ("product", "vector"), ("matrix", "matrix"), ("vector", "vector"),
    deterministic=True, log_density=_mvp_log_density)
VECTOR_PLUS = define_factor("VectorPlus", ("sum", "vector"), ("a", "vector"), ("b", "vector"),
                            deterministic=True, log_density=_plus_log_density)


def _from_moments(mean: np.ndarray, cov: Any, uniform: Any) -> VectorGaussian:
    """N(mean, cov) as natural parameters; uniform where ``uniform`` holds."""
    mean = np.asarray(mean, float)
    cov = np.broadcast_to(np.asarray(cov, float), mean.shape + mean.shape[-1:])
    prec = np.where(np.asarray(uniform)[..., None, None], 0.0, inverse(cov))
    return vector_gaussian(np.einsum("...ij,...j->...i", prec, mean, optimize=True), prec)


def _is_uniform(v: Any) -> Any:
    return False if is_known(v) else v.is_uniform()


def _no_point_mass(name: str, target: str, *args: Any) -> None:
    if all(is_known(a) for a in args):
        raise unsupported(name, "message passing", f"cannot send a message to {target!r}: "
                          "the known arguments determine it exactly; observe it instead.")


# ----- MatrixVectorProduct ----------------------------------------------------------------
def _product_forward(matrix, vector) -> VectorGaussian:
    """N(B m, B Σ Bᵀ), uniform where the vector's message is uniform."""
    _no_point_mass("MatrixVectorProduct", "product", vector)
    b = np.asarray(matrix, float)
    m, cov = mean_cov(vector)
    spread = np.einsum("...kd,...de,...le->...kl", b, cov, b, optimize=True)
    return _from_moments(_matvec(b, m), spread, _is_uniform(vector))


def _vector_backward(product, matrix, reduce: Reduce | None = None) -> VectorGaussian:
    """Naturals (Bᵀ h, Bᵀ P B) from the product's message (h, P); with ``reduce`` their
    sums over its plate axes, one einsum each (no D × D matrix per plate element)."""
    if is_known(product):
        raise unsupported("MatrixVectorProduct", "message passing", "cannot send a message "
                          "to the vector from an observed product B z (a point mass on an "
                          "affine subspace); add noise with ff.VectorGaussian around B @ z.")
    b = np.asarray(matrix, float)
    h, p = product.eta[0][..., 0], product.eta[1]
    if reduce is None:
        return vector_gaussian(np.einsum("...kd,...k->...d", b, h, optimize=True),
                               np.einsum("...kd,...kl,...le->...de", b, p, b, optimize=True))
    return vector_gaussian(plate_einsum("D", [(b, "KD"), (h, "K")], reduce),
                           plate_einsum("DE", [(b, "KD"), (p, "KL"), (b, "LE")], reduce))


@MATRIX_VECTOR_PRODUCT.operator("ep", "product", skip_if_uniform=("vector",),
                                known=("matrix",))
def _product_ep(matrix, vector) -> VectorGaussian:
    """N(B m, B Σ Bᵀ): exact."""
    return _product_forward(matrix, vector)


@MATRIX_VECTOR_PRODUCT.operator("ep", "vector", skip_if_uniform=("product",),
                                known=("matrix",))
def _vector_ep(product, matrix) -> VectorGaussian:
    """(Bᵀ h, Bᵀ P B): exact."""
    return _vector_backward(product, matrix)


@MATRIX_VECTOR_PRODUCT.operator("vmp", "product", skip_if_uniform=("vector",),
                                trigger=("vector",), known=("matrix",))
def _product_vmp(matrix, vector) -> VectorGaussian:
    """The distribution of B z under q(z): N(B E[z], B Cov[z] Bᵀ)."""
    return _product_forward(matrix, vector)


@MATRIX_VECTOR_PRODUCT.operator("vmp", "vector", skip_if_uniform=("product",),
                                known=("matrix",))
def _vector_vmp(product, matrix, *, reduce: Reduce | None = None) -> VectorGaussian:
    """exp log m_product(B z): (Bᵀ h, Bᵀ P B), as EP (B is known); fused over the plate
    axes of ``reduce``."""
    return _vector_backward(product, matrix, reduce)


def _linear_evidence(out: Any, forward: VectorGaussian) -> np.ndarray:
    """log ∫ w_out(y) N(y; forward): the output's normalised message averaged over the
    forward distribution of the linear map (the density at a known output)."""
    if is_known(out):
        return forward.log_prob(np.asarray(out, float))
    return (log_normalizer_or_zero(forward * out) - log_normalizer_or_zero(out)
            - log_normalizer_or_zero(forward))


@MATRIX_VECTOR_PRODUCT.evidence_operator("ep")
def _mvp_log_average_factor(product, matrix, vector) -> np.ndarray:
    """log ∫ w_product(B z) m_z(z) dz (log δ at known arguments)."""
    if is_known(vector):
        return _mvp_log_density(product, matrix, vector) if is_known(product) else \
            product.log_prob(_matvec(np.asarray(matrix, float), np.asarray(vector, float)))
    return _linear_evidence(product, _product_forward(matrix, vector))


# ----- VectorPlus -------------------------------------------------------------------------
def _sum_forward(a, b) -> VectorGaussian:
    """N(m_a + m_b, Σ_a + Σ_b), uniform where either message is uniform."""
    _no_point_mass("VectorPlus", "sum", a, b)
    (ma, ca), (mb, cb) = mean_cov(a), mean_cov(b)
    mean = np.add(ma, mb)
    return _from_moments(mean, np.add(ca, cb), np.logical_or(_is_uniform(a), _is_uniform(b)))


def _shift(msg: VectorGaussian, offset: np.ndarray) -> VectorGaussian:
    """m(x + offset) as a function of x: naturals (h − P offset, P)."""
    h, p = msg.eta[0][..., 0], msg.eta[1]
    return vector_gaussian(h - np.einsum("...ij,...j->...i", p, offset, optimize=True), p)


def _addend_ep(sum, other) -> VectorGaussian:
    """∫ m_sum(a + b) m_b(b) db as a function of a: m_sum shifted by E[b], convolved with
    b's Gaussian (nothing to convolve for a known b; uniform where b's message is)."""
    _no_point_mass("VectorPlus", "a", sum, other)
    if is_known(other):
        return _shift(sum, np.asarray(other, float))
    m, lam = mean_cov(other)[0], other.eta[1]
    flat = other.is_uniform()[..., None, None]
    shifted = np.asarray(sum, float) - m if is_known(sum) else _shift(sum, m)
    msg = convolve(shifted, np.where(flat, np.eye(other.dim), lam))
    return vector_gaussian(np.where(flat[..., 0], 0.0, msg.eta[0][..., 0]),
                           np.where(flat, 0.0, msg.eta[1]))


@VECTOR_PLUS.operator("ep", "sum", skip_if_uniform=("a", "b"))
def _sum_ep(a, b) -> VectorGaussian:
    """N(m_a + m_b, Σ_a + Σ_b): exact."""
    return _sum_forward(a, b)


@VECTOR_PLUS.operator("ep", "a", skip_if_uniform=("sum", "b"))
def _a_ep(sum, b) -> VectorGaussian:
    """∫ m_sum(a + b) m_b(b) db: exact."""
    return _addend_ep(sum, b)


@VECTOR_PLUS.operator("ep", "b", skip_if_uniform=("sum", "a"))
def _b_ep(sum, a) -> VectorGaussian:
    """∫ m_sum(a + b) m_a(a) da: exact."""
    return _addend_ep(sum, a)


@VECTOR_PLUS.operator("vmp", "sum", skip_if_uniform=("a", "b"), trigger=("a", "b"))
def _sum_vmp(a, b) -> VectorGaussian:
    """The distribution of a + b under q(a) q(b)."""
    return _sum_forward(a, b)


def _addend_vmp(sum, other) -> VectorGaussian:
    if is_known(sum):
        raise unsupported("VectorPlus", "vmp", "does not support an observed sum (the "
                          "message to an addend would be a point mass); use EP.")
    return _shift(sum, mean_cov(other)[0])


@VECTOR_PLUS.operator("vmp", "a", skip_if_uniform=("sum",), proper=("b",))
def _a_vmp(sum, b) -> VectorGaussian:
    """exp E_b[log m_sum(a + b)]: naturals (h − P E[b], P)."""
    return _addend_vmp(sum, b)


@VECTOR_PLUS.operator("vmp", "b", skip_if_uniform=("sum",), proper=("a",))
def _b_vmp(sum, a) -> VectorGaussian:
    """exp E_a[log m_sum(a + b)]: naturals (h − P E[a], P)."""
    return _addend_vmp(sum, a)


@VECTOR_PLUS.evidence_operator("ep")
def _plus_log_average_factor(sum, a, b) -> np.ndarray:
    """log ∫ w_sum(a + b) m_a m_b (log δ at known arguments)."""
    if is_known(a) and is_known(b):
        return _plus_log_density(sum, a, b) if is_known(sum) else \
            sum.log_prob(np.add(a, b))
    return _linear_evidence(sum, _sum_forward(a, b))
