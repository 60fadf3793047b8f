"""Gaussian(sample | mean, precision): the Gaussian likelihood and prior.

log f = ½ log τ − ½ log 2π − ½ τ (x − μ)²
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from factorflow.distributions import Distribution, Gamma, Gaussian
from factorflow.distributions.base import (
    _recall_traced,
    _remember_traced,
    distinct,
    log_normalizer_or_zero,
    recall,
    remember,
    rows_product,
    traced,
)
from factorflow.distributions.families import LOG_2PI
from factorflow.distributions.moments import E, Elog, V, distinct_vector, is_known, own_moments
from factorflow.distributions.multivariate import by_data
from factorflow.factors.common import Reduce, broadcast_naturals, collapsed, plate_einsum
from factorflow.factors.registry import define_factor


def _log_density(sample, mean, precision):
    return 0.5 * np.log(precision) - 0.5 * LOG_2PI - 0.5 * precision * (sample - mean) ** 2


GAUSSIAN = define_factor("Gaussian", ("sample", "real"), ("mean", "real"),
                         ("precision", "positive"), log_density=_log_density)


def _spread(v):
    """Var[v] — a scalar zero for a known value, so no array of zeros is made."""
    return 0.0 if is_known(v) else V(v)


def _expected_square_diff(a, b):
    """E[(a − b)²] = (E a − E b)² + Var a + Var b for independent a, b (three array
    passes over a plate, the cost of the same update written by hand)."""
    # (a K-vector posterior's mean and variance made together, as the properties make them)
    ma, va = (own_moments(a) if type(a) is Gaussian and distinct_vector(a)
              else (None, None))
    d = np.subtract(E(a) if ma is None else ma, E(b))  # a fresh array: the squares below
    if np.ndim(d) == 0:                                # reuse it in place
        return np.asarray(d * d + (_spread(a) + _spread(b)))
    d = np.multiply(d, d, out=d)
    d += distinct(_spread(a) if va is None else va) + distinct(_spread(b))  # (no copy of
    return d                                                 # a broadcast variance)


def _rows(v):
    """A message with its broadcast batch axes shrunk to length 1 whatever its size (a
    gate's clone of K components over (N, K) is K messages), so that its moments show
    which axes they are constant along; a known value as it is.  Remembered while the
    message lives (messages are immutable): a sweep reads a clone's rows in several
    operators (the cases' evidence, the components' messages)."""
    if not isinstance(v, Distribution):
        return v
    if traced():
        return v.compact(always=True)
    if distinct_vector(v):  # (a K-vector posterior: nothing to shrink, nothing kept)
        return v
    hit = recall("gaussian_rows", v)
    if hit is not None:
        return hit
    rows = _compact(v)
    # an axis materialised with equal values (a state restored from a checkpoint): shrunk
    # too, so that the same path, and the same rounding, is taken as for the view
    for axis, n in enumerate(rows.batch_shape):
        first = (slice(None),) * axis + (slice(0, 1),)  # (a view: no gather)
        if n > 1 and not _differ_at_start(rows.eta, axis) and all(
                (e[first] == e).all() for e in rows.eta):
            rows = rows._map(lambda e, nd, first=first: e[first])
    remember("gaussian_rows", v, rows)
    return rows


def _compact(v: Distribution) -> Distribution:
    """``v.compact(always=True)``, the same views, for a scalar family whose natural
    parameters are NumPy arrays of one shape (a gate's clone of K components over
    (N, K), each sweep), without the generic calls; ``compact`` itself otherwise."""
    eta = v.eta
    shape = eta[0].shape
    if (v.event_ndim or not shape or type(v)._map is not Distribution._map
            or any(type(e) is not np.ndarray or e.shape != shape for e in eta)):
        return v.compact(always=True)
    index, shrunk = [], False
    for i, n in enumerate(shape):  # (an axis every parameter repeats: stride 0)
        repeat = n > 1
        for e in eta:
            repeat = repeat and not e.strides[i]
        index.append(slice(0, 1) if repeat else slice(None))
        shrunk = shrunk or repeat
    if not shrunk:
        return v
    at = tuple(index)
    return v.from_natural(*[e[at] for e in eta])


def _differ_at_start(eta: tuple, axis: int) -> bool:
    """Whether some NumPy array of ``eta`` has different first two elements along batch
    ``axis`` (the other axes at 0): then not every parameter is constant along it, told
    in O(1) (NaN ≠ NaN: a NaN differs, as an elementwise == finds no equality there).
    False where it cannot tell (the caller's elementwise test decides)."""
    for e in eta:
        if type(e) is np.ndarray and e.size and e.ndim > axis and e.shape[axis] > 1:
            at = [0] * e.ndim  # (a non-empty array: its element 0 along every axis)
            start = e.item(tuple(at))
            at[axis] = 1
            if start != e.item(tuple(at)):
                return True
    return False


#: the moments of a mean and of a precision that the fused paths read, in that order
_MOMENTS = {"mean": (E, _spread), "precision": (E, Elog)}
#: the family whose own moments those are (``_row_moments``' direct path)
_FAMILY = {"mean": Gaussian, "precision": Gamma}


def _row_moments(v, kind: str) -> tuple:
    """``distinct(moment(_rows(v)))`` for each moment of ``kind`` (``"mean"``: E and Var,
    ``"precision"``: E and E log), computed together and remembered (read-only) while
    the message lives: a clone's moments are read by the cases' evidence and by the
    components' messages in one sweep, and by the evidence again in the next; of a known
    value, as they are."""
    hit = None if traced() or not isinstance(v, Distribution) else recall(
        "gaussian_" + kind, v)
    if hit is not None:
        return hit
    if type(v) is _FAMILY[kind] and distinct_vector(v):
        # a K-vector posterior (its own rows): its moments as the family's properties
        # make them (``Gaussian.mean``/``variance``, ``Gamma.mean``/``mean_log``), the
        # same ufuncs in the same order, so the same numbers bit for bit
        out = own_moments(v)
    elif type(rows := _rows(v)) is _FAMILY[kind] and rows.compact() is rows and not traced():
        # (what E, Var and E log read of a message with no axis left to shrink: its
        # own moments, without the generic calls around them)
        second = rows.variance if kind == "mean" else rows.mean_log()
        out = (distinct(rows.mean), distinct(second))
    else:
        out = tuple(distinct(moment(rows)) for moment in _MOMENTS[kind])
    if isinstance(v, Distribution) and not traced():
        for a in out:
            if type(a) is np.ndarray:
                a.flags.writeable = False
        remember("gaussian_" + kind, v, out)
    return out


def _constant_along(a, shape: tuple[int, ...], axes: tuple[int, ...]) -> bool:
    """Whether ``a`` (a scalar, or an array right-aligned to the plate ``shape`` with its
    broadcast axes already cut to length 1) has one value along every axis in ``axes``."""
    own = np.shape(a)
    lead = len(shape) - len(own)
    for ax in axes:  # (a loop: this runs several times a sweep on K-vectors)
        if ax >= lead and own[ax - lead] != 1:
            return False
    return True


def _kept(a, shape: tuple[int, ...], axes: tuple[int, ...]) -> np.ndarray:
    """``a`` (constant along ``axes``) with those axes dropped: it lines up with the
    result of ``plate_einsum`` over the same ``reduce``."""
    a = np.asarray(a, float)
    if not a.ndim and len(axes) == len(shape):  # (every axis dropped: the scalar itself)
        return a
    full = (1,) * (len(shape) - a.ndim) + a.shape
    return a.reshape(tuple([n for k, n in enumerate(full) if k not in axes]))


def _reduced_square_diff(sample, mean, weights, reduce: Reduce):
    """(Σ w, Σ w E[(x − μ)²]) over the plate axes of ``reduce`` when the mean's moments
    are constant along them (a mixture's component means seen by every datum): by the
    sufficient statistics, Σ w E[x²] − 2 E[μ] Σ w E[x] + E[μ²] Σ w — matrix-vector
    products, no (N, K) array.  None when the mean varies along a reduced axis (the
    caller then takes the elementwise path).  Agrees with the elementwise sum to
    rounding of the data's square (about 1e-16 · max x² / E[(x − μ)²] relative)."""
    shape, axes = reduce
    em, vm = _row_moments(mean, "mean")
    if not (_constant_along(em, shape, axes) and _constant_along(vm, shape, axes)):
        return None
    sums = _data_sums(sample, weights, reduce)
    if sums is None:
        ex = distinct(E(sample))
        ex2 = ex * ex if is_known(sample) else ex * ex + distinct(V(sample))
        sums = _weighted_sums(weights, (np.broadcast_to(1.0, shape), ex, ex2), reduce)
    return square_diff_from_sums(sums, _kept(em, shape, axes), _kept(vm, shape, axes))


def square_diff_from_sums(sums, em, vm):
    """(Σ w, Σ w E[(x − μ)²]) from the data sums (Σ w, Σ w x, Σ w x²) and the mean's
    moments E μ, Var μ: Σ w x² − 2 E μ Σ w x + (E μ² + Var μ) Σ w (the gate path's
    ``_reduced_square_diff`` and the fused Switch's precision message, one formula)."""
    s0, s1, s2 = sums
    return s0, s2 - 2.0 * em * s1 + (em * em + vm) * s0


def _data_sums(sample, weights, reduce: Reduce) -> tuple[np.ndarray, ...] | None:
    """(Σ w, Σ w x, Σ w x²) over the first of two plate axes, for a known data column x
    (N, 1) and (N, K) weights (a ``Switch`` over a plate: q(z_n = k)): one (3, N) × (N, K)
    product, the hand-written mixture's, remembered while the weights array lives (the
    precision's and the mean's messages read the same sums in a sweep).  Without
    weights, (N, Σ x, Σ x²) of known data over its one plate (``_unweighted_sums``).
    None for other shapes (the callers' general paths)."""
    shape, axes = reduce
    if type(weights) is np.ndarray and not traced():
        # the second message of a sweep (the mean's, after the precision's): the sums made
        # for this very data array and weights, over the same axis (the checks below
        # passed when they were made)
        hit = recall("data_sums", weights)
        plain = len(shape) == 2 and tuple(axes) == (0,) and weights.shape == tuple(shape)
        if hit is not None and hit[0] is sample and plain:
            return hit[2]
        # the first message of a sweep on the data whose [1, x, x²] columns were made for
        # this very array (the checks below passed then: a known (N, 1) column)
        columns = recall("gaussian_columns_of", sample) if plain else None
        if columns is not None and columns.shape[1] == shape[0]:
            return _remember_sums(sample, columns, weights)
    if weights is None and not traced() and is_known(sample):
        return _unweighted_sums(sample, reduce)
    if (not is_known(sample) or not isinstance(weights, np.ndarray)
            or len(shape) != 2 or tuple(axes) != (0,) or weights.shape != tuple(shape)):
        return None
    x = distinct(np.asarray(E(sample), float))
    if x.shape != (shape[0], 1) or shape[0] == 1:
        return None
    if traced():
        return _traced_data_sums(x, weights)
    hit = recall("data_sums", weights)
    if hit is not None and hit[0] is x:  # (the same view of the data: the same memory)
        return hit[2]
    # (chunked Dask data has no memory of its own: its sums are Dask's reductions)
    memory = getattr(x, "__array_interface__", None)
    if memory is None:
        return None
    # the data by its memory (a fresh view each call); the memo holds the view, so that
    # memory is not reused while the entry lives
    ident = (memory["data"][0], x.strides)
    if hit is not None and hit[1] == ident:
        return hit[2]
    # (the same laid-out data in every sweep: its [1, x, x²] columns found by its identity)
    columns = recall("gaussian_columns_of", x) if type(x) is np.ndarray else None
    if columns is None:
        columns = _data_columns(x, rows=False)
        if type(x) is np.ndarray:
            remember("gaussian_columns_of", x, columns)
    return _remember_sums(x, columns, weights, ident)


def _remember_sums(x: np.ndarray, columns: np.ndarray, weights: np.ndarray,
                   ident: tuple | None = None) -> tuple[np.ndarray, ...]:
    """``columns @ weights`` ((3, N) × (N, K): Σ w, Σ w x, Σ w x²), remembered as the
    weights' ``"data_sums"`` of the data ``x`` (by its memory ``ident``, where given)."""
    if ident is None:
        ident = (x.__array_interface__["data"][0], x.strides)
    sums = tuple(columns @ weights)
    remember("data_sums", weights, (x, ident, sums))
    return sums


def _traced_data_sums(x: Any, weights: Any) -> tuple[Any, ...]:
    """``_data_sums`` under tracing: the sums Sᵀ q that the normalisation which made the
    weights accumulated block by block over the same statistics S = [1, x, x²]
    (``base._normalize_traced_product``: a mixture's responsibilities from its data's
    evidence), where it did; else the same one (3, N) × (N, K) product as NumPy's (the
    general path's stacked columns were three passes over the weights in XLA).
    Remembered for the rest of the trace with the data it read, so that the mean's and
    the precision's messages read one; Σ_n w_nk is remembered as the weights'
    ``"column_sums"`` (the Dirichlet's counts and the bound read it:
    ``discrete._column_sums``, ``runtime.backends.jax_bound``)."""
    hit = _recall_traced("data_sums", weights)
    if hit is not None and hit[0] is x:
        return hit[1]
    fused = _recall_traced("rows_sums", weights)
    if fused is not None and fused[0] is _data_columns(x, rows=True):
        sums = tuple(fused[1])
    else:
        sums = tuple(_data_columns(x, rows=False) @ weights)
    _remember_traced("data_sums", weights, (x, sums))
    _remember_traced("column_sums", weights, sums[0])
    return sums


def _unweighted_sums(sample, reduce: Reduce) -> tuple[np.ndarray, ...] | None:
    """(N, Σ x, Σ x²) of known data x over its one plate axis (learning a Gaussian's
    mean and precision from N points): the sums of the general path (one
    ``plate_einsum`` each, the same numbers), made once per data and remembered while
    its memory lives (``multivariate.by_data``), where the general path summed N points twice a
    sweep.  None for other shapes."""
    shape, axes = reduce
    mine = type(sample) is np.ndarray and not traced()
    if mine:  # the same data array in every sweep: its sums found by its identity
        hit = recall("gaussian_sums_of", sample)
        if hit is not None and hit[0] == (tuple(shape), tuple(axes)):
            return hit[1]
    x = distinct(np.asarray(E(sample), float))
    if len(shape) != 1 or tuple(axes) != (0,) or x.shape != tuple(shape) or shape[0] < 2:
        return None
    sums = by_data(x, "gaussian_sums", lambda x: tuple(_weighted_sums(
        None, (np.broadcast_to(1.0, shape), x, x * x), reduce)))
    if mine:
        remember("gaussian_sums_of", sample, ((tuple(shape), tuple(axes)), sums))
    return sums


def _data_columns(x: np.ndarray, rows: bool) -> np.ndarray:
    """[1, x, x²] of a known data column x (N, 1): as (N, 3) rows (``rows``: the data's
    evidence, times (3, K) coefficients) or as a C-ordered (3, N) array (the weighted
    sums, times (N, K) weights; a transposed view of the rows would round the BLAS
    product differently).  Made once per data and layout, remembered (read-only) while
    the memory of the data lives, as ``vector_gaussian._data_stats`` (a fresh view of
    the same memory, a run's data laid out again, finds them); made afresh when traced
    or for data without memory of its own (Dask's chunks)."""
    def columns(x: np.ndarray) -> np.ndarray:
        col = x[:, 0]
        return (np.stack([np.ones_like(col), col, col * col], axis=1) if rows else
                np.stack([np.ones_like(col), col, col * col]))
    return by_data(x, "gaussian_data_rows" if rows else "gaussian_data_columns", columns)


def _weighted_sums(weights, columns, reduce: Reduce) -> list[np.ndarray]:
    """[Σ w c for c in columns] over the plate axes of ``reduce``: for (N, K) weights
    summed over N and columns that vary along N only (the data, 1), one (C, N) × (N, K)
    matrix product; otherwise one ``plate_einsum`` each."""
    shape, axes = reduce
    n = shape[0] if shape else 0
    cols = [distinct(np.asarray(c, float)) for c in columns]
    if (weights is not None and len(shape) == 2 and tuple(axes) == (0,)
            and np.shape(weights) == shape
            and all(c.ndim <= 2 and np.shape(c) in ((), (1,), (1, 1), (n, 1)) for c in cols)):
        stats = np.stack([np.broadcast_to(c.reshape(-1), (n,)) for c in cols])  # (C, N)
        return list(stats @ np.asarray(weights, float))
    w = [] if weights is None else [(weights, "")]
    return [plate_einsum("", w + [(c, "")], reduce) for c in cols]


def _vector_size(*moments: Any) -> int | None:
    """K where every moment is a float NumPy array of shape (K,), K > 1 (the components'
    posteriors of a mixture: ``_data_evidence_by_blas`` reads them as they are); None
    otherwise (its general path, which lays out rows, scalars and broadcasts)."""
    shape = None
    if traced():
        return None
    for a in moments:
        if type(a) is not np.ndarray or a.dtype != np.float64 or a.ndim != 1:
            return None
        if shape is None:
            shape = a.shape
        elif a.shape != shape:
            return None
    return shape[0] if shape is not None and shape[0] > 1 else None


def _data_evidence_by_blas(sample, mean, precision):
    """E[log N(x | μ, 1/τ)] on the (N, K) grid of N known points (N, 1) against K
    components (1, K) as one (N, 3) × (3, K) product: −½E[τ] x² + E[τ]E[μ] x +
    (½E[log τ] − ½ log 2π − ½E[τ]E[μ²]), the hand-written mixture's single pass.  None
    unless the sample is a known column and the mean and precision rows (the shapes of
    a ``Switch`` over a plate); the elementwise path agrees to rounding of x² (about
    1e-16 · max x² absolute)."""
    if not is_known(sample):
        return None
    mine = type(sample) is np.ndarray and not traced()
    # the same laid-out data in every sweep: its [1, x, x²] rows found by its identity
    columns = recall("gaussian_rows_of", sample) if mine else None
    if columns is None:
        x = distinct(np.asarray(E(sample), float))
        if x.ndim != 2 or x.shape[1] != 1 or x.shape[0] == 1:
            return None
    m, v = _row_moments(mean, "mean")
    tau, elog = _row_moments(precision, "precision")
    k = _vector_size(m, v, tau, elog)
    if k is None:  # (moments of other shapes: rows, scalars, broadcast K-vectors)
        rows = [np.asarray(a, float) for a in (m, v, tau, elog)]
        k = max(r.shape[-1] if r.ndim else 1 for r in rows)
        if k == 1 or any(r.ndim > 2 or (r.ndim == 2 and r.shape[0] != 1)
                         or (r.ndim and r.shape[-1] not in (1, k)) for r in rows):
            return None
        rows = [r[0] if r.ndim == 2 else r for r in rows]
        m, v, tau, elog = (r if r.shape == (k,) else np.broadcast_to(r, (k,)) for r in rows)
    if columns is None:
        columns = _data_columns(x, rows=True)
        if mine:
            remember("gaussian_rows_of", sample, columns)
    return evidence_product(columns, m, v, tau, elog)


def evidence_product(columns, m, v, tau, elog):
    """E[log N(x_n; μ_k, 1/τ_k)] on the (N, K) grid as [1, x, x²] (``columns``, N × 3)
    times the (3, K) coefficients (½E[log τ] − ½ log 2π − ½E[τ](E[μ]² + Var μ), E[τ]E[μ],
    −½E[τ]) of the K-vectors of moments ``m``, ``v``, ``tau``, ``elog``: the one formula
    of ``_data_evidence_by_blas`` and the fused Switch's logits
    (``fused_switch._selector_vmp``).  The result is remembered as a product with a
    column of ones (``base.rows_product``): a Discrete posterior's product of this
    evidence and E[log w] adds E[log w] into the coefficients (``base._add_naturals``)."""
    const = 0.5 * elog - 0.5 * LOG_2PI - 0.5 * tau * (m * m + v)
    if traced():
        coef = np.stack([const, tau * m, -0.5 * tau])                    # (3, K)
    else:  # (the same numbers written in place: no stacked copy)
        coef = np.empty((3, const.shape[-1]))
        coef[0] = const
        np.multiply(tau, m, out=coef[1])
        np.multiply(-0.5, tau, out=coef[2])
    return rows_product(columns, coef, ones=0)


# ----- VMP --------------------------------------------------------------------------
@GAUSSIAN.operator("vmp", "sample", proper=("mean", "precision"))
def _sample_vmp(mean, precision) -> Gaussian:
    tau = E(precision)
    return Gaussian.from_natural(*broadcast_naturals(distinct(tau) * E(mean), tau))


@GAUSSIAN.operator("vmp", "mean", proper=("sample", "precision"),
                   method="VMP; weighted over known data (a Switch): τ_k Σ_n q_nk [x_n, 1] "
                          "from the data sums, one BLAS product a sweep (_data_sums)")
def _mean_vmp(sample, precision, *, reduce: Reduce | None = None,
              weights: np.ndarray | None = None) -> Gaussian:
    """Naturals (E[τ] E[x], E[τ]); with ``reduce``, their sums over its plate axes, each
    element's raised to ``weights`` when given (a mixture's Σ_n q_nk E[τ_k] x_n as one
    matrix-vector product: no (N, K) message)."""
    if reduce is None:
        tau = E(precision)  # under a gate: K distinct values, an outer product with the data
        return Gaussian.from_natural(*broadcast_naturals(distinct(tau) * E(sample), tau))
    sums = _data_sums(sample, weights, reduce)
    if sums is not None:  # a mixture: τ_k Σ_n q_nk x_n and τ_k Σ_n q_nk, when τ is a row
        # (its rows, as a restored checkpoint's materialised copy shows them too)
        rows = (_row_moments(precision, "precision")[0] if isinstance(precision, Gamma)
                else distinct(E(_rows(precision))))
        if _constant_along(rows, *reduce):
            kept = _kept(rows, *reduce)
            return Gaussian.from_natural(kept * sums[1], kept * sums[0])
    x, tau = E(sample), distinct(E(precision))  # (the general path's moments alone)
    w = [] if weights is None else [(weights, "")]
    tau_all = np.broadcast_to(tau, np.broadcast_shapes(np.shape(tau), np.shape(x)))
    return Gaussian.from_natural(plate_einsum("", w + [(tau, ""), (x, "")], reduce),
                                 plate_einsum("", w + [(collapsed(tau_all), "")], reduce))


@GAUSSIAN.operator("vmp", "precision", proper=("sample", "mean"),
                   method="VMP; weighted over known data (a Switch): Σ_n q_nk E[(x_n − μ_k)²] "
                          "from the same data sums (_data_sums)")
def _precision_vmp(sample, mean, *, reduce: Reduce | None = None,
                   weights: np.ndarray | None = None) -> Gamma:
    """Naturals (½, −½ E[(x − μ)²]); with ``reduce``, their sums over its plate axes, each
    element's raised to ``weights`` when given (one weighted sum: no (N, K) message)."""
    if reduce is not None:
        fused = _reduced_square_diff(sample, mean, weights, reduce)
        if fused is not None:
            return Gamma.from_natural(0.5 * fused[0], -0.5 * fused[1])
    d2 = _expected_square_diff(sample, mean)
    if reduce is None:
        d2 = np.multiply(d2, -0.5, out=d2 if np.ndim(d2) else None)
        return Gamma.from_natural(np.broadcast_to(0.5, np.shape(d2)), d2)
    w = [] if weights is None else [(weights, "")]
    half = np.broadcast_to(0.5, np.shape(d2))
    return Gamma.from_natural(plate_einsum("", w + [(half, "")], reduce),
                              -0.5 * plate_einsum("", w + [(d2, "")], reduce))


def _known(value: float) -> np.ndarray:
    """A known number as ``E`` reads it (a 0-d float array)."""
    return np.asarray(value, float)


@functools.lru_cache(maxsize=64)
def _known_precision_terms(precision: float) -> tuple[Any, Any]:
    """(−½ τ, ½ log τ − ½ log 2π) of a known precision τ, as ``_average_log_factor``'s
    general path computes them (NumPy scalars: the same numbers)."""
    tau, elog = distinct(E(precision)), distinct(Elog(precision))
    return -0.5 * tau, 0.5 * elog - 0.5 * LOG_2PI


@GAUSSIAN.evidence_operator("vmp")
def _average_log_factor(sample, mean, precision) -> np.ndarray:
    if (type(mean) in (float, int) and type(precision) in (float, int)
            and type(sample) is Gaussian and distinct_vector(sample)):
        # a K-vector posterior under a prior of known numbers (the components' prior
        # term of the bound): the general path's arithmetic below, in its order, with
        # the prior's terms made once a run and the posterior's moments together
        m, v = own_moments(sample)
        out = np.subtract(m, _known(mean))
        out = np.multiply(out, out, out=out)
        out += v + 0.0  # (``distinct(V(sample)) + distinct(0.0)``)
        scale, shift = _known_precision_terms(float(precision))
        out *= scale
        out += shift
        return out
    fused = _data_evidence_by_blas(sample, mean, precision)
    if fused is not None:
        return fused
    out = _expected_square_diff(sample, mean)
    tau, elog = distinct(E(precision)), distinct(Elog(precision))  # K values under a gate
    # (known scalars broadcast to any array: the common prior term, told without a call)
    shape = (out.shape if type(out) is np.ndarray and not np.ndim(tau) and not np.ndim(elog)
             else np.broadcast_shapes(np.shape(out), np.shape(tau), np.shape(elog)))
    if np.shape(out) != shape or not np.ndim(out):
        return 0.5 * elog - 0.5 * LOG_2PI - 0.5 * tau * out
    out *= -0.5 * tau                      # in place on the fresh (N, K) array
    out += 0.5 * elog - 0.5 * LOG_2PI
    return out


# ----- EP (known precision: the random-precision case is not Gaussian-closed) --------
#: the smallest normal double: a precision at least this has a finite variance 1/p
_TINY = float(np.finfo(float).tiny)


def proper_moments(msg: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """(mean, variance) = (h/p, 1/p) of a Gaussian message whose precisions p are all
    normal positive numbers (so every variance is finite), as fresh arrays the caller may
    write into: bit for bit what ``E`` and ``V`` give there, in two passes over the batch
    and one reduction (``E``'s mask for p = 0 and the search for broadcast axes are
    needed only elsewhere).  None for anything else (a known value, a single message, a
    uniform, improper or broadcast one, or under tracing): the caller takes its general
    path."""
    if traced() or not isinstance(msg, Gaussian):
        return None
    h, p = msg.eta
    if (type(p) is not np.ndarray or type(h) is not np.ndarray or not p.ndim
            or not p.size or h.shape != p.shape or 0 in p.strides or not p.min() >= _TINY):
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        return h / p, 1.0 / p


def _convolve(msg, precision):
    """The message through a Gaussian of known precision: variance adds 1/τ.  A batch of
    positive precisions p (``proper_moments``' condition) through one finite positive τ
    takes the natural form (h, p)/(1 + p/τ): four passes, two reductions (p/τ kept below
    overflow), equal to the moments' form below to rounding."""
    inv = np.asarray(precision, float)
    if isinstance(msg, Gaussian) and not traced() and not inv.ndim and 0 < inv < np.inf:
        h, p = msg.eta
        c = 1.0 / float(inv)
        if (type(p) is np.ndarray and type(h) is np.ndarray and p.ndim and p.size
                and h.shape == p.shape and p.min() >= _TINY and float(p.max()) * c < 1e300):
            scale = p * c
            scale += 1.0
            h_out = h / scale
            p_out = np.divide(p, scale, out=scale)
            return Gaussian.from_natural(h_out, p_out)
    with np.errstate(divide="ignore"):
        var = V(msg) + 1.0 / inv
        prec = 1.0 / var
    return Gaussian.from_natural(E(msg) * prec, prec)


@GAUSSIAN.operator("ep", "sample", known=("precision",))
def _sample_ep(mean, precision) -> Gaussian:
    return _convolve(mean, precision)


@GAUSSIAN.operator("ep", "mean", skip_if_uniform=("sample",), known=("precision",))
def _mean_ep(sample, precision) -> Gaussian:
    return _convolve(sample, precision)


@GAUSSIAN.evidence_operator("ep")
def _log_average_factor(sample, mean, precision) -> np.ndarray:
    """log ∫∫ N(x; μ, 1/τ) m_x(x) m_μ(μ): zero when either side is integrated out."""
    if not is_known(sample) and not is_known(mean):
        joint = _convolve(mean, precision) * sample
        return (log_normalizer_or_zero(joint) - log_normalizer_or_zero(sample)
                - log_normalizer_or_zero(_convolve(mean, precision)))
    known, msg = (sample, mean) if is_known(sample) else (mean, sample)
    if is_known(msg):
        return _log_density(E(known), E(msg), precision)
    with np.errstate(divide="ignore", invalid="ignore"):  # a uniform message weighs 1
        return np.where(msg.is_uniform(), 0.0, _convolve(msg, precision).log_prob(E(known)))
