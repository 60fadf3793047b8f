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

from typing import Any

import numpy as np

from factorflow.distributions import Gamma, Gaussian, VectorGaussian
from factorflow.distributions.base import all_true, distinct, traced
from factorflow.distributions.families import LOG_2PI
from factorflow.distributions.moments import E, Elog, V, is_known
from factorflow.distributions.multivariate import (
    _shared_precision,
    outer,
    quad_form,
    remembered,
)
from factorflow.factors.arithmetic import _linear_evidence, _no_observed_output
from factorflow.factors.common import (
    Reduce,
    broadcast_naturals,
    collapsed,
    plate_einsum,
    reduced_shape,
    times_finite,
    unsupported,
)
from factorflow.factors.registry import define_factor
from factorflow.factors.vector_gaussian import mean_cov, vector_gaussian


def _log_density(product, a, b):
    value = np.sum(np.multiply(a, b), axis=-1)
    return np.where(np.asarray(product) == value, 0.0, -np.inf)


INNER_PRODUCT = define_factor("InnerProduct", ("product", "real"), ("a", "vector"),
                              ("b", "vector"), deterministic=True, log_density=_log_density)


def _forward_moments(a, b) -> tuple[np.ndarray, np.ndarray]:
    """(E[aᵀb], Var[aᵀb]) for independent a and b (on a grid of two plates, matrix
    products: ``_grid_forward``)."""
    grid = _grid_forward(a, b)
    if grid is not None:
        mean, var = grid
        for v in (a, b):  # a uniform vector leaves aᵀb uniform: infinite variance
            if not all_true(~v.is_uniform()):
                var = np.where(v.is_uniform(), np.inf, var)
        return mean, var
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
    if not traced() and not is_known(a) and not is_known(b) and all_true(
            ~a.is_uniform()) and all_true(~b.is_uniform()):
        grid = _grid_forward(a, b)  # fresh arrays: the naturals are written over them
        if grid is not None and np.min(grid[1], initial=1.0) > 0 and np.isfinite(
                np.max(grid[1], initial=1.0)):
            mean, var = grid
            prec = np.reciprocal(var, out=var)
            return Gaussian.from_natural(np.multiply(mean, prec, out=mean), prec)
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


# ----- fused: y ~ N(aᵀb, 1/τ) with a and b random (VMP) -------------------------------------
# InnerProductGaussian(sample | a, b, precision): the Gaussian whose mean is the inner
# product of two random D-vectors, one factor (BayesPy's ``GaussianARD(Dot(W, z), τ)``).
# ``transforms.fusion`` makes it from ``ff.Gaussian(name, a @ b, precision=τ)`` under VMP
# when the product is used nowhere else: no per-element Gaussian of aᵀb is formed, and the
# messages are sums of the data's sufficient statistics over the plates:
#
# * to a: naturals (Σ E[τ] E[y] E[b], Σ E[τ] E[b bᵀ]), and symmetrically to b;
# * to τ: (½ Σ 1, −½ Σ E[(y − aᵀb)²]) with E[(y − aᵀb)²] = (E y − E aᵀ E b)² + Var y +
#   tr(Σ_a E[b bᵀ]) + E aᵀ Σ_b E a (non-negative terms: no cancellation);
# * to y (latent): N(E[a]ᵀ E[b], 1/E[τ]);
# * evidence: E log N(y; aᵀb, 1/τ) = ½ E log τ − ½ log 2π − ½ E[τ] E[(y − aᵀb)²].
#
# Each is the message the unfused pair (InnerProduct, then Gaussian) sends in the same
# schedule, so the posteriors and the bound are the same (to rounding).  On a grid — two
# plates, a varying along one and b along the other, one τ (Bayesian PCA's W[m] · z[n])
# — every sum is a matrix product of the N × M data with an N × D or M × D matrix of
# means, or a D × D product (``_grid``, ``_grid_message``); otherwise one ``plate_einsum``
# per sum.
# Precisions equal along a plate axis (z[n]'s, all N of them) are inverted once.
#
# Missing observations: an optional known boolean ``mask`` over the statement's plates
# (True where y was seen; ``transforms.fusion`` passes the condition of the gate that
# ``observed=np.ma.masked_array(...)`` puts around y).  A missing element contributes
# nothing: every sum above runs over the seen elements only (E τ replaced by E τ · mask
# in the messages to a and b, the count and the squared error to τ summed where seen,
# the evidence 0 where missing).  On a grid the sums stay matrix products: with O the
# N × M mask, the message to W[m] is (τ (O ∘ Y)ᵀ E z, τ Σ_n O_nm E[z_n z_nᵀ]), the latter
# one (M × N) · (N × K²) product (BayesPy's per-row sums of E[z zᵀ] over the seen
# entries), and symmetrically to z[n].
def _fused_log_density(sample, a, b, precision, mask=None):
    mean = np.sum(np.multiply(a, b), axis=-1)
    out = 0.5 * np.log(precision) - 0.5 * LOG_2PI - 0.5 * precision * (sample - mean) ** 2
    return out if mask is None else np.where(mask, out, 0.0)


INNER_PRODUCT_GAUSSIAN = define_factor(
    "InnerProductGaussian", ("sample", "real"), ("a", "vector"), ("b", "vector"),
    ("precision", "positive"), ("mask", "bool"), log_density=_fused_log_density)


def shared_moments(v: Any) -> tuple[np.ndarray, Any]:
    """(E[v], Cov[v]) of a vector argument, as ``mean_cov``, except that the covariance
    keeps length 1 along each plate axis where the precisions are all equal (a stride-0
    view, or equal values: the latent coordinates of PCA share one precision), so that
    one D × D matrix per distinct precision is inverted and the covariance broadcasts.
    A message's moments are remembered while the memory of its natural parameters lives
    (``multivariate.remembered``, as the posteriors' own moments): reading one message
    again, or a view of it (a posterior laid out anew for each statement), costs
    nothing; the arrays returned are read-only."""
    if is_known(v):
        return np.asarray(v, float), 0.0
    return _shared_moments(v)


@remembered(distinct=False)
def _shared_moments(v: VectorGaussian) -> tuple[np.ndarray, Any]:
    """``shared_moments`` of a VectorGaussian message."""
    p = collapsed(v.eta[1], 2)
    if traced() or type(p) is not np.ndarray:  # no branch on values when traced
        return v.mean_and_covariance()
    p = _shared_precision(p)  # the axes along which every precision is the same: length 1
    if p.size == v.eta[1].size:
        return v.mean_and_covariance()
    cov = VectorGaussian.from_natural(np.zeros(p.shape[:-1] + (1,)), p).covariance
    return (cov @ v.eta[0])[..., 0], cov  # Σ h, Σ broadcast over the shared axes


def _cov_sum(cov: Any, count: int) -> Any:
    """Σ Cov over ``count`` elements of a covariance stack (K, D, D) with K = count or 1
    (shared); the scalar 0 of a known vector stays 0."""
    if not np.ndim(cov):
        return 0.0
    return cov[0] * count if cov.shape[0] == 1 else np.sum(cov, axis=0)


def _side(moments: tuple[np.ndarray, Any], axis: int, shape: tuple[int, ...]
          ) -> tuple[np.ndarray, Any] | None:
    """One side of a grid: (E v as shape[axis] × D, Cov v as (shape[axis] or 1) × D × D,
    or 0 for a known vector) from a vector argument's ``shared_moments``, whose plates
    (right-aligned to the two of ``shape``) vary along ``axis`` at most; None if they
    vary along the other."""
    m, cov = moments
    m = np.asarray(m, float)
    if m.ndim > 3 or (np.ndim(cov) and np.ndim(cov) > 4):
        return None
    m = m.reshape((1,) * (3 - m.ndim) + m.shape)
    if m.shape[1 - axis] != 1:
        return None
    m = np.broadcast_to(np.take(m, 0, axis=1 - axis), (shape[axis], m.shape[-1]))
    if np.ndim(cov):
        cov = np.asarray(cov, float)
        cov = cov.reshape((1,) * (4 - cov.ndim) + cov.shape)
        if cov.shape[1 - axis] != 1:
            return None
        cov = np.take(cov, 0, axis=1 - axis)
    return m, cov


def _grid_data(sample, shape: tuple[int, ...], rows: int) -> tuple[np.ndarray, Any]:
    """(E y, Var y) as matrices whose rows run along plate axis ``rows`` (Var y: 0 for
    data)."""
    y = np.broadcast_to(np.asarray(E(sample), float), shape)
    vy = 0.0 if is_known(sample) else np.broadcast_to(np.asarray(V(sample), float), shape)
    if rows == 1:
        y, vy = y.T, (vy.T if np.ndim(vy) else vy)
    return y, vy


def _scalar(tau: Any, shape: tuple[int, ...]) -> float | None:
    """τ as a float where a grid applies (two plates, one τ); None otherwise (or traced)."""
    if len(shape) != 2 or np.size(tau) != 1 or traced():
        return None
    return float(np.reshape(tau, ()))


def _second(m: np.ndarray, cov: Any) -> np.ndarray:
    """Σ_k E[v_k v_kᵀ] = Mᵀ M + Σ Cov over the K rows of one side."""
    return m.T @ m + _cov_sum(cov, len(m))


def _grid_message(sample, other: tuple[np.ndarray, Any], precision, reduce: Reduce | None,
                  mask: Any = None) -> VectorGaussian | None:
    """The message to one vector summed over the plate axis ``other`` varies along, on a
    grid: (τ Yᵀ M, τ (Mᵀ M + Σ Cov)) with M the other's means, the rows of Y along that
    axis; with a ``mask`` O (rows as Y's), (τ (O ∘ Y)ᵀ M, τ Σ_p O_pq E[m_p m_pᵀ]) per
    target element q, the latter as one (Q × P) · (P × D²) product.  None where no grid
    applies (the general path runs)."""
    if reduce is None or len(reduce[1]) != 1:
        return None
    shape, (axis,) = tuple(reduce[0]), tuple(reduce[1])
    tau = _scalar(E(precision), shape)
    side = None if tau is None else _side(other, axis, shape)
    if side is None:
        return None
    m, cov = side
    y = _grid_data(sample, shape, axis)[0]
    d = m.shape[-1]
    if mask is None:
        return vector_gaussian(tau * (y.T @ m), np.broadcast_to(tau * _second(m, cov),
                                                              (shape[1 - axis], d, d)))
    seen = _grid_mask(mask, shape, axis)
    h = tau * (np.where(seen, y, 0.0).T @ m)
    second = outer(m, m)  # E[m_p m_pᵀ], one matrix product with the mask
    if np.ndim(cov) and cov.shape[0] != 1:
        second += cov
    prec = seen.T @ second.reshape(len(m), d * d)
    if np.ndim(cov) and cov.shape[0] == 1:  # one covariance: times the count seen
        prec += np.sum(seen, axis=0)[:, None] * cov.reshape(1, d * d)
    prec *= tau
    return vector_gaussian(h, prec.reshape(-1, d, d))


def _grid_mask(mask: Any, shape: tuple[int, ...], rows: int) -> np.ndarray:
    """The mask as a float matrix (1 seen, 0 missing) whose rows run along plate axis
    ``rows``, as ``_grid_data``'s."""
    seen = np.broadcast_to(np.asarray(mask, float), shape)
    return seen.T if rows == 1 else seen


def _grid(sample, a: tuple[np.ndarray, Any], b: tuple[np.ndarray, Any],
          shape: tuple[int, ...]) -> tuple[np.ndarray, Any, tuple, tuple, int] | None:
    """(E y, Var y, a's side, b's side, b's axis) from the vectors' moments, with the rows
    of y along b's axis, where a varies along one plate axis at most and b along the
    other; None otherwise (and when traced: the general path, with no value read)."""
    if traced():
        return None
    for b_axis in (0, 1):
        sa, sb = _side(a, 1 - b_axis, shape), _side(b, b_axis, shape)
        if sa is not None and sb is not None:
            y, vy = _grid_data(sample, shape, b_axis)
            return y, vy, sa, sb, b_axis
    return None


def _grid_square_error(sample, a: tuple[np.ndarray, Any], b: tuple[np.ndarray, Any],
                       shape: tuple[int, ...], total: bool, mask: Any = None
                       ) -> np.ndarray | float | None:
    """E[(y − aᵀb)²] on a grid, summed (``total``) or per element in the statement's
    layout; None where no grid applies.  Summed: Σ (E y − E aᵀE b)² + Σ Var y +
    tr(Σ Cov a · Σ E[b bᵀ]) + tr(Σ Cov b · Σ E a E aᵀ), D × D products.  Per element:
    the residual, plus vec(E[b_p b_pᵀ]) · vec(Cov a_q) and vec(Cov b_p) · vec(E a_q E a_qᵀ)
    as matrix products over the D² entries (a shared covariance: a row or a column).
    With a ``mask``, the sum over the seen elements (the per-element values, times the
    mask); per element, unmasked (the caller masks them)."""
    grid = _grid(sample, a, b, shape)
    if grid is None:
        return None
    if mask is not None and total:
        per_element = _grid_square_error(sample, a, b, shape, False)
        return float(np.vdot(np.broadcast_to(np.asarray(mask, float), shape), per_element))
    y, vy, (ma, ca), (mb, cb), b_axis = grid
    resid = mb @ ma.T  # fresh: the residual and its square are written over it
    np.subtract(y, resid, out=resid)
    if total:
        out = float(np.vdot(resid, resid)) + float(np.sum(vy))
        if np.ndim(ca):
            out += float(np.vdot(_cov_sum(ca, len(ma)), _second(mb, cb)))
        if np.ndim(cb):
            out += float(np.vdot(_cov_sum(cb, len(mb)), ma.T @ ma))
        return out
    out = np.multiply(resid, resid, out=resid)
    if np.ndim(vy):
        out += vy
    out = _grid_spread(ma, ca, mb, cb, out)
    return out.T if b_axis == 1 else out


def _grid_spread(ma: np.ndarray, ca: Any, mb: np.ndarray, cb: Any,
                 out: np.ndarray | None = None) -> np.ndarray:
    """Var[aᵀb] = tr(Cov a_q E[b_p b_pᵀ]) + E a_qᵀ Cov b_p E a_q on a grid (P × Q), added
    into ``out`` (a fresh P × Q array; zeros when None).  A covariance shared by all rows
    of its side gives a column (b_pᵀ Σ_a b_p + tr(Σ_a Cov b_p)) or a row (a_qᵀ Σ_b a_q);
    otherwise vec(E[b_p b_pᵀ]) · vec(Cov a_q) and vec(Cov b_p) · vec(E a_q E a_qᵀ) are
    matrix products over the D² entries."""
    if out is None:
        out = np.zeros((len(mb), len(ma)))
    d2 = ma.shape[-1] ** 2
    # (matrix products throughout: einsum's path search costs more than these sums)
    if np.ndim(ca) and ca.shape[0] == 1:
        col = np.sum((mb @ ca[0]) * mb, axis=1)
        if np.ndim(cb):
            col = col + cb.reshape(-1, d2) @ ca[0].reshape(d2)
        out += col[:, None]
    elif np.ndim(ca):
        out += (outer(mb, mb) + cb).reshape(-1, d2) @ ca.reshape(-1, d2).T
    if np.ndim(cb) and cb.shape[0] == 1:
        out += np.sum((ma @ cb[0]) * ma, axis=1)[None, :]
    elif np.ndim(cb):
        out += cb.reshape(-1, d2) @ outer(ma, ma).reshape(-1, d2).T
    return out


def _grid_forward(a, b) -> tuple[np.ndarray, np.ndarray] | None:
    """(E[aᵀb], Var[aᵀb]) of two random vectors laid out as a grid (two plates, a varying
    along one and b along the other: W[m] · z[n]), by matrix products, as fresh arrays in
    the statement's layout; None otherwise."""
    if is_known(a) or is_known(b) or traced():
        return None
    shape = np.broadcast_shapes(a.batch_shape, b.batch_shape)
    if len(shape) != 2:
        return None
    moments_a, moments_b = shared_moments(a), shared_moments(b)
    for b_axis in (0, 1):
        sa, sb = _side(moments_a, 1 - b_axis, shape), _side(moments_b, b_axis, shape)
        if sa is not None and sb is not None:
            (ma, ca), (mb, cb) = sa, sb
            mean, var = mb @ ma.T, _grid_spread(ma, ca, mb, cb)
            return (mean.T, var.T) if b_axis == 1 else (mean, var)
    return None


# ----- the general path: one plate_einsum per sum --------------------------------------
def _second_moment_sum(ma, ca, mb, cb, reduce: Reduce) -> np.ndarray:
    """Σ E[(aᵀb)²] − (E aᵀ E b)² = Σ tr(Σ_a E[b bᵀ]) + E aᵀ Σ_b E a over the plate axes
    of ``reduce`` (a covariance with length-1 axes is summed once)."""
    out = np.zeros(reduced_shape(reduce))
    if np.ndim(ca):
        out = out + plate_einsum("", [(ca, "ij"), (mb, "i"), (mb, "j")], reduce)
        if np.ndim(cb):
            out = out + plate_einsum("", [(ca, "ij"), (cb, "ij")], reduce)
    if np.ndim(cb):
        out = out + plate_einsum("", [(cb, "ij"), (ma, "i"), (ma, "j")], reduce)
    return out


def _plate_shape(*arrays_and_events: tuple[Any, int]) -> tuple[int, ...]:
    """The broadcast plate shape of arrays given with their event ranks."""
    return np.broadcast_shapes(*(np.shape(a)[: np.ndim(a) - k] for a, k in arrays_and_events))


def _square_error(sample, a: tuple[np.ndarray, Any], b: tuple[np.ndarray, Any],
                  reduce: Reduce | None = None) -> np.ndarray:
    """E[(y − aᵀb)²] per element (``reduce`` None) or summed over the plate axes of
    ``reduce``, from the vectors' moments: (E y − E aᵀE b)² + Var y + the second-moment
    part."""
    (ma, ca), (mb, cb) = a, b
    y = np.asarray(E(sample), float)
    shape = _plate_shape((y, 0), (ma, 1), (mb, 1)) if reduce is None else reduce[0]
    every = (tuple(shape), ())  # no axis summed: the per-element values
    resid = y - plate_einsum("", [(ma, "i"), (mb, "i")], every)
    if reduce is None:
        out = resid * resid + _second_moment_sum(ma, ca, mb, cb, every)
        return out if is_known(sample) else out + V(sample)
    out = plate_einsum("", [(resid, ""), (resid, "")], reduce) + _second_moment_sum(
        ma, ca, mb, cb, reduce)
    if not is_known(sample):
        out = out + plate_einsum("", [(V(sample), "")], reduce)
    return out


def _to_vector(sample, other: tuple[np.ndarray, Any], precision, reduce: Reduce | None,
               mask: Any = None) -> VectorGaussian:
    """Naturals (E[τ] E[y] E[b], E[τ] E[b bᵀ]) for b's moments ``other``; with ``reduce``
    their sums over its plate axes (Σ τ y E[b]; Σ τ E[b] E[b]ᵀ + Σ τ Cov b); with a
    ``mask``, E[τ] · mask in place of E[τ] (a missing element sends nothing)."""
    tau, y = distinct(E(precision)), np.asarray(E(sample), float)
    if mask is not None:
        tau = np.multiply(tau, np.asarray(mask, float))
        y = np.where(mask, y, 0.0)
    m, cov = other
    if reduce is None:
        prec = np.multiply(np.asarray(tau)[..., None, None], outer(m, m) + cov)
        return vector_gaussian((tau * y)[..., None] * m, prec)
    h = plate_einsum("i", [(tau, ""), (y, ""), (m, "i")], reduce)
    prec = plate_einsum("ij", [(tau, ""), (m, "i"), (m, "j")], reduce)
    if np.ndim(cov):
        cover = np.broadcast_to(np.asarray(tau, float), np.broadcast_shapes(
            np.shape(tau), np.shape(cov)[:-2]))  # τ over Cov b's plates, for its sum
        prec = prec + plate_einsum("ij", [(cover, ""), (cov, "ij")], reduce)
    return vector_gaussian(h, prec)


# ----- operators ----------------------------------------------------------------------------
@INNER_PRODUCT_GAUSSIAN.operator("vmp", "a", proper=("sample", "b", "precision"))
def _fused_a_vmp(sample, b, precision, mask=None, *, reduce: Reduce | None = None
                 ) -> VectorGaussian:
    """exp E[log N(y; aᵀb, 1/τ)] as a function of a: (E τ E y E b, E τ E[b bᵀ]), summed
    over the plate axes of ``reduce`` (over the seen elements of ``mask``)."""
    moments = shared_moments(b)
    grid = _grid_message(sample, moments, precision, reduce, mask)
    return grid if grid is not None else _to_vector(sample, moments, precision, reduce,
                                                    mask)


@INNER_PRODUCT_GAUSSIAN.operator("vmp", "b", proper=("sample", "a", "precision"))
def _fused_b_vmp(sample, a, precision, mask=None, *, reduce: Reduce | None = None
                 ) -> VectorGaussian:
    """(E τ E y E a, E τ E[a aᵀ]), summed as the message to a."""
    moments = shared_moments(a)
    grid = _grid_message(sample, moments, precision, reduce, mask)
    return grid if grid is not None else _to_vector(sample, moments, precision, reduce,
                                                    mask)


@INNER_PRODUCT_GAUSSIAN.operator("vmp", "precision", proper=("sample", "a", "b"))
def _fused_precision_vmp(sample, a, b, mask=None, *, reduce: Reduce | None = None) -> Gamma:
    """Gamma naturals (½, −½ E[(y − aᵀb)²]); with ``reduce`` their sums over its plate
    axes (on a grid: matrix products, no per-element array but the residual); with a
    ``mask``, over the seen elements only (0 where missing)."""
    a, b = shared_moments(a), shared_moments(b)
    if reduce is not None and tuple(sorted(reduce[1])) == (0, 1) and len(reduce[0]) == 2:
        total = _grid_square_error(sample, a, b, tuple(reduce[0]), True, mask)
        if total is not None:
            count = float(np.prod(reduce[0]) if mask is None else np.count_nonzero(
                np.broadcast_to(mask, tuple(reduce[0]))))
            return Gamma.from_natural(np.asarray(0.5 * count), np.asarray(-0.5 * total))
    if mask is None:
        d2 = _square_error(sample, a, b, reduce)
        seen = np.broadcast_to(1.0, np.shape(d2) if reduce is None else reduce[0])
    else:  # per element, then the seen ones summed
        d2 = np.where(mask, _square_error(sample, a, b), 0.0)
        seen = np.broadcast_to(np.asarray(mask, float), np.shape(d2))
        if reduce is not None:
            d2 = plate_einsum("", [(d2, "")], reduce)
    count = 0.5 * (np.array(seen) if reduce is None else
                   plate_einsum("", [(seen, "")], reduce))
    return Gamma.from_natural(count, -0.5 * d2)


@INNER_PRODUCT_GAUSSIAN.operator("vmp", "sample", proper=("a", "b", "precision"))
def _fused_sample_vmp(a, b, precision) -> Gaussian:
    """N(E aᵀ E b, 1/E τ)."""
    ma, mb = shared_moments(a)[0], shared_moments(b)[0]
    tau = E(precision)
    mean = plate_einsum("", [(ma, "i"), (mb, "i")], (_plate_shape((ma, 1), (mb, 1)), ()))
    return Gaussian.from_natural(*broadcast_naturals(tau * mean, tau))


@INNER_PRODUCT_GAUSSIAN.evidence_operator("vmp")
def _fused_average_log_factor(sample, a, b, precision, mask=None) -> np.ndarray:
    """½ E log τ − ½ log 2π − ½ E τ E[(y − aᵀb)²] per element (0 where ``mask`` says
    the element is missing)."""
    out = _average_log_factor(sample, a, b, precision)
    return out if mask is None else np.where(mask, out, 0.0)


def _average_log_factor(sample, a, b, precision) -> np.ndarray:
    """The unmasked evidence terms per element (see ``_fused_average_log_factor``)."""
    a, b = shared_moments(a), shared_moments(b)
    shape = _plate_shape((E(sample), 0), (a[0], 1), (b[0], 1))
    d2 = None
    if _scalar(E(precision), shape) is not None:
        d2 = _grid_square_error(sample, a, b, shape, False)
    if d2 is not None:  # a fresh array, one τ: the terms are written over it
        d2 *= -0.5 * float(np.reshape(E(precision), ()))
        d2 += 0.5 * float(np.reshape(Elog(precision), ())) - 0.5 * LOG_2PI
        return d2
    d2 = _square_error(sample, a, b)
    return 0.5 * Elog(precision) - 0.5 * LOG_2PI - 0.5 * E(precision) * d2
