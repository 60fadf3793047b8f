"""Discrete(sample | probs): a category in {0..K−1} drawn with probabilities ``probs``.

log f = Σ_k [x = k] log p_k.

``probs`` is known (an array with K on the last axis) or Dirichlet-distributed; Discrete
messages carry their K categories on the last axis.  As a function of the probabilities
the factor is a Dirichlet message with pseudo-counts 1 + one-hot(x); under EP with an
uncertain sample it is the mixture Σ_k q_k p_k, projected onto a Dirichlet by matching
the mean and Σ_k E[p_k²] (Infer.NET's DiscreteFromDirichletOp with
``Dirichlet.AllowImproperSum``).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from factorflow.distributions import Dirichlet, Discrete
from factorflow.distributions.base import (
    COMPACT_ABOVE,
    _recall_traced,
    add_at,
    broadcast_shapes,
    broadcast_view,
    distinct,
    log_normalizer_or_zero,
    recall,
    traced,
)
from factorflow.distributions.moments import E, Elog, Eonehot, is_known
from factorflow.factors.common import (
    Reduce,
    batch_shape,
    collapsed,
    logsumexp,
    plate_einsum,
    project_dirichlet_mixture,
    reduced_shape,
    times_finite,
)
from factorflow.factors.registry import define_factor


def _pick(values: np.ndarray, x: Any) -> np.ndarray:
    """values[..., x] over the broadcast plates of ``values`` (K last) and the indices x;
    a broadcast view of ``values`` (a gate's clone over the data) is read on its distinct
    elements, the gather broadcasting them (O(plate elements), not × K)."""
    x = np.asarray(x, int)
    values = np.asarray(values)
    shape = np.broadcast_shapes(x.shape, values.shape[:-1])
    nd = len(shape)
    values = collapsed(values.reshape((1,) * (nd + 1 - values.ndim) + values.shape), 1)
    x = x.reshape((1,) * (nd - x.ndim) + x.shape)[..., None]
    return np.broadcast_to(np.take_along_axis(values, x, -1)[..., 0], shape)


def _log_density(sample, probs) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return _pick(np.log(np.asarray(probs, float)), sample)


DISCRETE = define_factor("Discrete", ("sample", "int"), ("probs", "simplex"),
                         log_density=_log_density)


def _size(probs: Any) -> int:
    """K, the number of categories: the last axis of ``probs``, known or a Dirichlet."""
    if type(probs) is Dirichlet:  # (its natural parameters' shape: no moment made)
        return int(probs.eta[0].shape[-1])
    return int(np.shape(E(probs) if is_known(probs) else probs.eta[0])[-1])


def _log_mean_probs(probs) -> np.ndarray:
    """log E[p_k] for known probabilities or a Dirichlet message."""
    if is_known(probs):
        with np.errstate(divide="ignore"):
            return np.log(np.asarray(E(probs), float))
    a = probs.alpha
    return np.log(a) - np.log(np.sum(a, axis=-1, keepdims=True))


def _sample_stats(sample, size: int) -> np.ndarray:
    """E[one-hot(x)]: exact for a known sample, the probabilities of a Discrete message."""
    return Eonehot(sample, size)


# ----- VMP --------------------------------------------------------------------------
@DISCRETE.operator("vmp", "sample", skip_if_uniform=("probs",))
def _sample_vmp(probs) -> Discrete:
    """log-probabilities E[log p_k] (for a Dirichlet: digamma(α_k) − digamma(Σ α))."""
    if type(probs) is Dirichlet and (probs.eta[0].size < COMPACT_ABOVE
                                     or probs.compact() is probs):  # (Elog's own path;
        return Discrete.from_natural(probs.mean_log())               # K weights: no look)
    return Discrete.from_natural(np.asarray(Elog(probs), float))


@DISCRETE.operator("vmp", "probs")
def _probs_vmp(sample, probs, *, reduce: Reduce | None = None,
               weights: np.ndarray | None = None) -> Dirichlet:
    """Dirichlet(1 + E[one-hot(x)]); ``probs`` is read for K and its plate shape.  With
    ``reduce``, the pseudo-counts summed over its plate axes, each element's weighted by
    ``weights`` when given (LDA's topic-word counts Σ_n q(z_n = k) one-hot(w_n)): for an
    observed sample a scatter-add, O(elements), never a one-hot array per element."""
    size = _size(probs)
    if reduce is None:
        shape = broadcast_shapes(batch_shape(sample), batch_shape(probs, 1))
        stats = _sample_stats(sample, size)
        return Dirichlet.from_natural(broadcast_view(stats, shape + stats.shape[-1:]))
    if not is_known(sample):  # (no weights: the probabilities summed, no product made)
        q = sample.probs
        counts = _column_sums(q, reduce) if weights is None else None
        if counts is None:
            terms = ([(q, "i")] if weights is None else
                     [(np.asarray(weights, float), ""), (q, "i")])
            counts = plate_einsum("i", terms, reduce)
        return Dirichlet.from_natural(broadcast_view(counts, reduced_shape(reduce) + (size,)))
    w = np.ones(()) if weights is None else np.asarray(weights, float)
    return Dirichlet.from_natural(_scatter_counts(np.asarray(E(sample), int), w, size,
                                                  reduce))


def _column_sums(probs: Any, reduce: Reduce) -> np.ndarray | None:
    """Σ_n q_nk of an (N, K) array of probabilities over its one plate axis (a mixture's
    responsibilities, the counts of its Dirichlet's message) as one BLAS matrix-vector
    product 1ᵀ q, which reads q once: ``einsum``'s sum along the rows took 2–4× the
    time at K = 40, N = 2,000, 1.2–2.4× at N = 20,000 (the same sums to rounding).  None
    for other shapes (``plate_einsum``).  Under tracing, the sums a fused normalisation
    accumulated where it made ``probs`` (``base._normalize_traced_product``, or the data
    sums, ``gaussian._traced_data_sums``), so that the Dirichlet's message reads no
    (N, K) array; None otherwise (the general path)."""
    shape, axes = reduce
    if (not isinstance(probs, np.ndarray) or probs.ndim != 2
            or len(shape) != 1 or tuple(axes) != (0,) or probs.shape[0] != shape[0]):
        return None
    if traced():  # (the copy's ``np.ndarray`` is JAX's arrays too)
        return _recall_traced("column_sums", probs)
    known = recall("column_sums", probs)  # (a mixture's data sums read them already)
    return _ones(shape[0]) @ probs if known is None else known


@functools.lru_cache(maxsize=16)
def _ones(n: int) -> np.ndarray:
    """A read-only vector of n ones (``_column_sums``' 1ᵀ, made once per N)."""
    out = np.ones(n)
    out.flags.writeable = False
    return out


def _scatter_counts(x: np.ndarray, w: np.ndarray, size: int, reduce: Reduce) -> np.ndarray:
    """Σ over the plate axes ``reduce[1]`` of w · one-hot(x) (x, w broadcast right-aligned
    to the plate shape ``reduce[0]``): the kept plate axes, then ``size`` counts (one
    ``np.bincount`` over the elements, in their own memory order)."""
    shape, axes = reduce
    kept = tuple(n for k, n in enumerate(shape) if k not in axes)
    row = np.zeros((1,) * len(shape), int)  # each element's row of the result
    stride = 1
    for k in reversed(range(len(shape))):
        if k not in axes:
            row = row + stride * np.arange(shape[k]).reshape(
                (-1,) + (1,) * (len(shape) - 1 - k))
            stride *= shape[k]
    flat, w = (a if a.shape == shape else np.broadcast_to(a, shape)  # (a view's ravel
               for a in (row * size + x, np.asarray(w)))                # copies: only then)
    if traced():  # (bincount's length is the values' there: a scatter-add instead)
        counts = add_at(np.zeros(stride * size), flat.ravel(), w.ravel(), repeats=True)
    else:
        counts = np.bincount(flat.ravel(), weights=w.ravel(), minlength=stride * size)
    return counts.reshape(kept + (size,))


@DISCRETE.evidence_operator("vmp")
def _average_log_factor(sample, probs) -> np.ndarray:
    """E_q[log f] = Σ_k q(x = k) E[log p_k] (a zero-probability category adds nothing); an
    observed x reads E[log p_x] alone (no one-hot array over the categories)."""
    if is_known(sample):
        return _pick(Elog(probs), E(sample))
    q, elog = _sample_stats(sample, _size(probs)), Elog(probs)
    if traced():  # the same sum, a term the bound adds up with the others over q in one
        from factorflow.runtime.backends.jax_bound import row_term  # pass (``row_term``)
        return row_term(q, elog)
    if not traced():  # one fused pass (a mixture's (N, K) responsibilities against the
        # K log-weights); 0 · (−inf) gives NaN there and takes the elementwise way below
        with np.errstate(invalid="ignore"):
            fast = _rows_dot(q, elog)
        if not np.isnan(fast).any():
            return fast
    return np.sum(times_finite(q, elog), axis=-1)


def _rows_dot(q: np.ndarray, elog: np.ndarray) -> np.ndarray:
    """Σ_k q[..., k] elog[..., k] over the broadcast batch.  When ``elog`` is one row
    (a K-vector, or a view that only repeats one: a Dirichlet's E[log w] seen by every
    datum) it is one BLAS matrix-vector product, which reads q once (``einsum`` took
    about twice the time on a mixture's responsibilities at K = 40, N = 2,000, 1.3× at
    N = 20,000); the same sum to rounding (1e-15 relative)."""
    q, elog = np.asarray(q, float), np.asarray(elog, float)
    row = distinct(elog)
    # (one row: the batch is q's, told without a call)
    shape = (q.shape[:-1] if elog.ndim == 1 and q.ndim
             else np.broadcast_shapes(q.shape[:-1], elog.shape[:-1]))
    if q.ndim >= 2 and q.shape[:-1] == shape and all(n == 1 for n in row.shape[:-1]):
        row = row.reshape(-1)
        # q normalised block by block from a product with this row added into it (a
        # mixture's responsibilities and E[log w]): the same products, made per block
        # while it was in cache (base._normalize_blocked)
        known = recall("rows_dot", q)
        if known is not None and np.array_equal(known[0], row):
            return known[1]
        return np.matmul(q, row)
    return np.einsum("...k,...k->...", q, elog)


# ----- EP ---------------------------------------------------------------------------
@DISCRETE.operator("ep", "sample", skip_if_uniform=("probs",))
def _sample_ep(probs) -> Discrete:
    """Discrete(E[p]) (for a Dirichlet, probabilities α_k / Σ α)."""
    return Discrete.from_natural(_log_mean_probs(probs))


@DISCRETE.operator("ep", "probs", skip_if_uniform=("sample",), no_init=True)
def _probs_ep(sample, probs) -> Dirichlet:
    """proj[m_p · Σ_k q_k p_k] / m_p: the mixture Σ_k w_k Dir(α + e_k), w_k ∝ q_k α_k,
    matched in mean and Σ_k E[p_k²]; an observed sample gives Dir(1 + one-hot(x)).

    Infer.NET marks the incoming ``probs`` message NoInit: it need not be initialised.
    """
    size = _size(probs)
    if is_known(sample):
        return Dirichlet.from_natural(_sample_stats(sample, size))
    alpha = probs.alpha
    shape = np.broadcast_shapes(sample.batch_shape, probs.batch_shape) + (size,)
    alpha = np.broadcast_to(alpha, shape)
    with np.errstate(divide="ignore"):
        log_q = sample.eta[0] - logsumexp(sample.eta[0], axis=-1, keepdims=True)
        log_w = log_q + np.log(alpha)
    return Dirichlet.from_natural(project_dirichlet_mixture(alpha, log_w) - alpha)


@DISCRETE.evidence_operator("ep")
def _log_average_factor(sample, probs) -> np.ndarray:
    """log Σ_k w_k E[p_k], w the normalised sample message (weight 1 where uniform)."""
    log_mean = _log_mean_probs(probs)
    if is_known(sample):
        return _pick(log_mean, E(sample))
    with np.errstate(divide="ignore", invalid="ignore"):
        log_w = sample.eta[0] - log_normalizer_or_zero(sample)[..., None]
        return logsumexp(log_w + log_mean, axis=-1)
