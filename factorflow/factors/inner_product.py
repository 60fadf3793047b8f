"""InnerProduct(product | a, b): the scalar aᵀ b of two D-vectors (``ff.inner(a, b)``,
``a @ b``).

log f = log δ(product − aᵀ b)

EP (Infer.NET's InnerProductOp with b known, as a design-matrix row per plate element):
both messages are exact.  Forward, N(bᵀ m_a, bᵀ Σ_a b); backward, the product's message
m(y) ∝ exp(h y − τ y²/2) read as a function of a: a VectorGaussian of rank one with
natural parameters (h b, τ b bᵀ).

VMP (InnerProductPartialCovarianceOp): the product is a derived variable.  Forward, its
distribution under q(a) q(b) matched in mean and variance: E[a]ᵀE[b] and
E[a]ᵀ Σ_b E[a] + E[b]ᵀ Σ_a E[b] + tr(Σ_a Σ_b).  Backward to a, exp E_b[log m(aᵀ b)]:
naturals (h E[b], τ E[b bᵀ]), and symmetrically to b.  Deterministic factors add no VMP
evidence term.

The factory puts the random vector in ``a``: EP needs ``b`` known.
"""

from __future__ import annotations

import numpy as np

from factorflow.distributions import Gaussian, VectorGaussian
from factorflow.distributions.moments import is_known
from factorflow.distributions.multivariate import outer, quad_form
from factorflow.factors.arithmetic import _linear_evidence, _no_observed_output
from factorflow.factors.common import Reduce, plate_einsum, times_finite, unsupported
from factorflow.factors.registry import define_factor
from factorflow.factors.vector_gaussian import mean_cov, vector_gaussian


def _log_density(product, a, b):
    value = np.sum(np.multiply(a, b), axis=-1)
    return np.where(np.asarray(product) == value, 0.0, -np.inf)


INNER_PRODUCT = define_factor("InnerProduct", ("product", "real"), ("a", "vector"),
                              ("b", "vector"), deterministic=True, log_density=_log_density)


def _forward_moments(a, b) -> tuple[np.ndarray, np.ndarray]:
    """(E[aᵀb], Var[aᵀb]) for independent a and b."""
    (ma, ca), (mb, cb) = mean_cov(a), mean_cov(b)
    mean = np.sum(ma * mb, axis=-1)
    var = np.zeros(np.shape(mean))
    if np.ndim(ca) and np.ndim(cb):
        # tr(Σ_a E[b bᵀ]) + E[a]ᵀ Σ_b E[a] (non-negative terms, no cancellation), each one
        # einsum over the plates: a matrix product where a and b vary along different
        # plates (BPCA's W[d] · z[n]), with no (N, D, K, K) array
        shape = (np.shape(mean), ())
        var = var + plate_einsum("", [(ca, "ij"), (outer(mb, mb) + cb, "ij")], shape)
        var = var + plate_einsum("", [(cb, "ij"), (outer(ma, ma), "ij")], shape)
    elif np.ndim(ca):
        var = var + quad_form(ca, mb)
    elif np.ndim(cb):
        var = var + quad_form(cb, ma)
    for v in (a, b):  # a uniform vector leaves aᵀb uniform: infinite variance
        if not is_known(v):
            var = np.where(v.is_uniform(), np.inf, var)
    return mean, var


def _forward(a, b) -> Gaussian:
    """N(E[aᵀb], Var[aᵀb]) over the broadcast plates of a and b."""
    if is_known(a) and is_known(b):
        raise unsupported("InnerProduct", "message passing", "cannot send a message to "
                          "'product': the known vectors determine it exactly; observe it.")
    mean, var = _forward_moments(a, b)
    with np.errstate(divide="ignore"):
        prec = 1.0 / var
    return Gaussian.from_natural(np.where(mean == 0, 0.0, times_finite(prec, mean)), prec)


def _backward(product, other, reduce: Reduce | None = None) -> VectorGaussian:
    """Naturals (h E[b], τ E[b bᵀ]) from the product's message (h, τ); with ``reduce``,
    their sums over its plate axes (Σ h E[b], Σ τ E[b] E[b]ᵀ + Σ τ Cov b) by one einsum
    each, without the per-element D × D matrices."""
    if is_known(product):
        raise unsupported("InnerProduct", "message passing", "cannot send a message to a "
                          "vector from an observed inner product (a point mass on a "
                          "hyperplane); observe the vector, or add noise with ff.Gaussian.")
    h, tau = product.eta
    m, cov = mean_cov(other)
    if reduce is None:
        return vector_gaussian(h[..., None] * m, tau[..., None, None] * (outer(m, m) + cov))
    prec = plate_einsum("ij", [(tau, ""), (m, "i"), (m, "j")], reduce)
    if np.ndim(cov):
        prec = prec + plate_einsum("ij", [(tau, ""), (cov, "ij")], reduce)
    return vector_gaussian(plate_einsum("i", [(h, ""), (m, "i")], reduce), prec)


# ----- EP (b known) -------------------------------------------------------------------------
@INNER_PRODUCT.operator("ep", "product", skip_if_uniform=("a",), known=("b",))
def _product_ep(a, b) -> Gaussian:
    """N(bᵀ m_a, bᵀ Σ_a b)."""
    return _forward(a, b)


@INNER_PRODUCT.operator("ep", "a", skip_if_uniform=("product",), known=("b",))
def _a_ep(product, b) -> VectorGaussian:
    """(h b, τ b bᵀ): exact."""
    return _backward(product, b)


@INNER_PRODUCT.evidence_operator("ep")
def _log_average_factor(product, a, b) -> np.ndarray:
    """log ∫ w_product(bᵀ a) m_a."""
    mean, var = _forward_moments(a, b)
    return _linear_evidence(product, mean, var, a, b)


# ----- VMP ------------------------------------------------------------------------------
@INNER_PRODUCT.operator("vmp", "product", skip_if_uniform=("a", "b"), trigger=("a", "b"))
def _product_vmp(a, b) -> Gaussian:
    """The forward distribution matched in mean and variance."""
    return _forward(a, b)


@INNER_PRODUCT.operator("vmp", "a", skip_if_uniform=("product",), proper=("b",))
def _a_vmp(product, b, *, reduce: Reduce | None = None) -> VectorGaussian:
    """exp E_b[log m_product(aᵀ b)]: naturals (h E[b], τ E[b bᵀ]) (their product over the
    plate axes of ``reduce``, fused)."""
    _no_observed_output("InnerProduct", product)
    return _backward(product, b, reduce)


@INNER_PRODUCT.operator("vmp", "b", skip_if_uniform=("product",), proper=("a",))
def _b_vmp(product, a, *, reduce: Reduce | None = None) -> VectorGaussian:
    """exp E_a[log m_product(aᵀ b)]: naturals (h E[a], τ E[a aᵀ]) (fused as ``_a_vmp``)."""
    _no_observed_output("InnerProduct", product)
    return _backward(product, a, reduce)
