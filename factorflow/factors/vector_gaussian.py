"""VectorGaussian(sample | mean, precision): the multivariate Gaussian, D-dimensional.

log f = ½ log |Λ| − (D/2) log 2π − ½ (x − μ)ᵀ Λ (x − μ)

VMP (Infer.NET's VectorGaussianOp, Winn & Bishop 2005): the messages to x and μ are
VectorGaussians with natural parameters (E[Λ] E[μ], E[Λ]) and (E[Λ] E[x], E[Λ]); the message
to Λ is the Wishart with naturals (½, −½ E[(x − μ)(x − μ)ᵀ]), i.e. dof D + 2 and rate
E[(x − μ)(x − μ)ᵀ] = (E x − E μ)(E x − E μ)ᵀ + Cov x + Cov μ.

EP (known Λ): the message through the factor convolves with N(0, Λ⁻¹).  For a message of
precision P and precision-times-mean h this is precision Λ − Λ (Λ + P)⁻¹ Λ and
precision-times-mean Λ (Λ + P)⁻¹ h, which holds for singular P too (a uniform message
stays uniform).

Vector arguments arrive as arrays of shape batch + (D,) when known, or as VectorGaussian
messages; the precision as batch + (D, D) arrays or Wishart messages.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from factorflow.distributions import Gamma, VectorGaussian, Wishart
from factorflow.distributions.base import (
    broadcast_view,
    log_normalizer_or_zero,
    memo_of,
    recall,
    remember,
    rows_product,
    traced,
    weighted_rows,
)
from factorflow.distributions.moments import E, Elog, is_known
from factorflow.distributions.multivariate import (
    LOG_2PI,
    broadcast_base,
    by_data,
    logdet,
    outer,
    quad_form,
    solve,
    trace_product,
)
from factorflow.factors.common import Reduce, plate_einsum
from factorflow.factors.gaussian import _rows
from factorflow.factors.registry import define_factor


def _log_density(sample, mean, precision):
    d = np.subtract(sample, mean)
    dim = np.shape(precision)[-1]
    return 0.5 * logdet(precision) - 0.5 * dim * LOG_2PI - 0.5 * quad_form(precision, d)


VECTOR_GAUSSIAN = define_factor("VectorGaussian", ("sample", "vector"), ("mean", "vector"),
                                ("precision", "posdef"), log_density=_log_density)


# ----- moments of vector and matrix arguments, known or random ----------------------------
def mean_cov(v: Any) -> tuple[np.ndarray, Any]:
    """(E[v], Cov[v]) of a vector argument; the covariance of a known vector is the scalar
    0 (it broadcasts, and no array of zeros is made)."""
    if is_known(v):
        return np.asarray(v, float), 0.0
    return v.mean_and_covariance()


def matrix_mean(v: Any) -> np.ndarray:
    """E[Λ] of a matrix argument (a known matrix, or a Wishart)."""
    return np.asarray(v, float) if is_known(v) else v.mean


def mean_log_det(v: Any) -> np.ndarray:
    """E[log |Λ|] of a matrix argument; a known matrix's log-determinant is remembered
    while the array lives (``memo_of``: a prior's constant, read every sweep)."""
    if not is_known(v):
        return v.mean_log_det()
    if type(v) is np.ndarray and v.dtype == float:
        return memo_of("logdet", v, logdet)
    return logdet(np.asarray(v, float))


def vector_gaussian(h: np.ndarray, precision: np.ndarray) -> VectorGaussian:
    """The VectorGaussian with precision-times-mean ``h`` (batch + (D,)) and ``precision``
    (batch + (D, D)), both broadcast to their common batch shape."""
    h, precision = np.asarray(h, float), np.asarray(precision, float)
    if h.shape[:-1] == precision.shape[:-2] and h.shape[-1:] == precision.shape[-1:]:
        return VectorGaussian.from_natural(h[..., None], precision)  # (nothing to broadcast)
    d = precision.shape[-1]
    batch = np.broadcast_shapes(h.shape[:-1], precision.shape[:-2])
    return VectorGaussian.from_natural(np.broadcast_to(h[..., None], batch + (d, 1)),
                                       np.broadcast_to(precision, batch + (d, d)))


def wishart_from_naturals(dof_term: Any, minus_half_rate: np.ndarray) -> Wishart:
    """The Wishart with naturals ((ν − D − 1)/2, −R/2), the first broadcast to the batch."""
    m = np.asarray(minus_half_rate, float)
    first = np.asarray(dof_term, float)[..., None, None]
    if first.shape[:-2] != m.shape[:-2]:
        first = np.broadcast_to(first, m.shape[:-2] + (1, 1))
    return Wishart.from_natural(first, m)


def _matvec(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    # (a batched matrix product: the numbers of ``einsum("...ij,...j->...i",
    # optimize=True)``, which makes it, without the path search that cost more than the
    # product on K small matrices)
    return np.matmul(matrix, np.asarray(vector)[..., None])[..., 0]


def _expected_outer_diff(a: Any, b: Any) -> tuple[np.ndarray, Any]:
    """(E a − E b, Cov a + Cov b): E[(a − b)(a − b)ᵀ] is d dᵀ + the covariance part, kept
    apart so that a quadratic form needs no d dᵀ array per plate element."""
    (ma, ca), (mb, cb) = mean_cov(a), mean_cov(b)
    # a known side adds no covariance: the other's is kept as it is (a broadcast view of
    # K components over N data stays one)
    cov = cb if np.ndim(ca) == 0 and ca == 0 else ca if np.ndim(cb) == 0 and cb == 0 \
        else np.add(ca, cb)
    return np.subtract(ma, mb), cov


# ----- a Switch over known data: sufficient-statistic paths ------------------------------
# Inside ``ff.Switch(z)`` over a plate of N known points the factor sees the data as an
# (N, 1, D) column against K components on an (N, K) grid (a gate's clones: broadcast
# views of the K means and precisions).  Every quantity the data send is then linear in
# the data's sufficient statistics [1, x, x xᵀ] (the upper triangle of x xᵀ: D(D+1)/2
# entries), so that, as the hand-written mixture (``benchmarks/vmixture_reference.py``):
#
# * the (N, K) evidence E log N(x_n | μ_k, Λ_k) is one (N, 1+D+T) × (1+D+T, K) product,
#   −½ Σ_ij x_i x_j E[Λ_k]_ij + xᵀ E[Λ_k] E[μ_k] − ½ (E[μ_k]ᵀ E[Λ_k] E[μ_k] + tr(E[Λ_k]
#   Cov μ_k)) + ½ E log |Λ_k| − (D/2) log 2π, with the components' moments computed once
#   per component (K, D, D), never per datum;
# * the messages to the components, weighted by the responsibilities q (N, K) and summed
#   over the data, read Σ_n q_nk [1, x_n, x_n x_nᵀ]: one (1+D+T, N) × (N, K) product,
#   remembered while q lives (the mean's and the precision's messages of a sweep share
#   it).
#
# No (N, K, D) array of differences and no (N, K, D, D) array is made.  The results equal
# the elementwise formulas to the rounding of the data's products (about 1e-16 ·
# max |x|² relative to the spread); ``tests/runtime/test_vector_mixture_fast_paths.py``
# checks whole runs against the general paths to 1e-10.
def _triangle(dim: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.triu_indices(dim)``: the upper triangle's (row, column) indices of a D × D
    matrix, in the order of the data's statistics' columns; made once per D (every
    statement of a sweep reads them; never written), and afresh under tracing (a traced
    array remembered across traces would leak out of its trace)."""
    return np.triu_indices(dim) if traced() else _triangle_of(dim)


@lru_cache(maxsize=32)
def _triangle_of(dim: int) -> tuple[np.ndarray, np.ndarray]:
    return np.triu_indices(dim)


def _switch_data(sample: Any) -> np.ndarray | None:
    """The data as an (N, D) array when ``sample`` is the (N, 1, D) column of N > 1 known
    points of a Switch over a plate; None otherwise.  Under tracing the same test on what
    is known while tracing (the data: an array of that layout, a JAX one), so that the
    traced kernels take the same path as NumPy's."""
    if traced():
        if not isinstance(sample, np.ndarray):  # (the copy's ``np.ndarray``: JAX's too)
            return None
    elif type(sample) is not np.ndarray:  # (not a masked array: its mask has a say)
        return None
    if sample.ndim != 3 or sample.shape[1] != 1 or sample.shape[0] < 2:
        return None
    return np.asarray(sample[:, 0, :], float)


def _data_stats(x: np.ndarray) -> np.ndarray:
    """[1, x, x_i x_j (i ≤ j)] per point, (N, 1 + D + D(D+1)/2), made once per data (a
    fresh view of the same memory finds it again) and remembered while the data live.
    Under tracing one expression (the compiler makes it once per run: it reads the data
    alone)."""
    n, dim = x.shape
    if traced():
        i, j = _triangle(dim)
        return np.concatenate([np.ones((n, 1)), x, x[:, i] * x[:, j]], axis=1)

    def stats_of(x: np.ndarray) -> np.ndarray:
        stats = np.empty((n, 1 + dim + dim * (dim + 1) // 2))
        stats[:, 0] = 1.0
        stats[:, 1:1 + dim] = x
        for col, (i, j) in enumerate(zip(*_triangle(dim), strict=True), start=1 + dim):
            np.multiply(x[:, i], x[:, j], out=stats[:, col])  # (column by column: no copies)
        return stats
    return by_data(x, "vector_data_stats", stats_of)


def _sample_stats(sample: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``_data_stats(x)`` of the data ``x`` that ``_switch_data`` read from ``sample``,
    found first by the identity of ``sample`` (the run's data laid out once, read by
    every statement of every sweep: one lookup, no address read), else by the data's
    memory (``by_data``).  Under tracing made once per ``sample`` (the run's data laid
    out once) for the rest of the trace, and in the loops' bodies the program's
    (``base.memo_of``), where each call made them anew from its own slice of the data:
    the evidence's product, its normalisation and the weighted sums then read one
    array, and a loop carries the evidence as the product's coefficients
    (``runtime.backends.jax_carry``)."""
    if traced():
        return memo_of("vector_sample_stats", sample, lambda _: _data_stats(x))
    hit = recall("vector_sample_stats", sample)
    if hit is not None:
        return hit
    stats = _data_stats(x)
    remember("vector_sample_stats", sample, stats)
    return stats


@lru_cache(maxsize=32)
def _pair_weights(dim: int) -> np.ndarray:
    """(D², T): column t of the upper triangle's entry (i, j) (``np.triu_indices``
    order) picks Λ_ii on the diagonal and Λ_ij + Λ_ji off it from a flattened Λ, so that
    the quadratic form's coefficients of all K components are one product; made once
    per D (read-only)."""
    i, j = np.triu_indices(dim)
    w = np.zeros((dim * dim, len(i)))
    w[i * dim + j, np.arange(len(i))] = 1.0
    w[j * dim + i, np.arange(len(i))] = 1.0  # (the same entry again where i = j)
    w.flags.writeable = False
    return w


def _symmetric_index(dim: int) -> np.ndarray:
    """(D, D) positions, among the upper triangle's entries in ``np.triu_indices``
    order, of each entry of a symmetric D × D matrix (entry (a, b) is entry (min, max));
    made once per D, and afresh under tracing (as ``_triangle``)."""
    return _symmetric_positions(dim) if traced() else _symmetric_index_of(dim)


@lru_cache(maxsize=32)
def _symmetric_index_of(dim: int) -> np.ndarray:
    where = _symmetric_positions(dim)
    where.flags.writeable = False  # (shared by every call: never written)
    return where


def _symmetric_positions(dim: int) -> np.ndarray:
    """Entry (a, b) is (r, c) = (min, max), at r D − r (r − 1)/2 + c − r in the upper
    triangle's row-major order (the rows before r hold D, D − 1, … entries): an
    expression of ``arange``s, the same under tracing."""
    a = np.arange(dim)
    r, c = np.minimum(a[:, None], a[None, :]), np.maximum(a[:, None], a[None, :])
    return r * dim - r * (r - 1) // 2 + c - r


def _per_component(parts: list[tuple[Any, int]], k: int | None = None
                   ) -> list[np.ndarray] | None:
    """Moments of the components on an (N, K) grid (``parts``: (array, its number of
    event axes), right-aligned to the grid) as arrays (K,) + event, when each is
    constant along the data axis (a gate's clone after ``_rows``, a known array, one
    shared value); None otherwise.  K is ``k``, or the components' own count (1 where
    every part is one shared value)."""
    arrays = [(np.asarray(a, float), event) for a, event in parts]
    # (the common case, a (K,) posterior's moments as they are: nothing to lay out)
    first = arrays[0][0]
    want = first.shape[:1] if k is None and first.ndim == arrays[0][1] + 1 else (k,)
    for a, event in arrays:
        if a.ndim != event + 1 or a.shape[0] != want[0]:
            break
    else:
        return [a for a, _ in arrays]
    sizes = set()
    for a, event in arrays:
        batch = a.shape[: a.ndim - event]
        if len(batch) > 2 or (len(batch) == 2 and batch[0] != 1):
            return None  # varies along the data axis (or over more plates)
        if batch and batch[-1] != 1:
            sizes.add(batch[-1])
    if k is None and len(sizes) > 1:
        return None
    k = k if k is not None else max(sizes, default=1)
    if not sizes <= {k}:
        return None
    out = []
    for a, event in arrays:
        tail = a.shape[a.ndim - event:]
        a = a.reshape((-1,) + tail) if a.ndim > event else a
        # (a view made directly, and none where the K rows are there already)
        out.append(a if a.shape == (k,) + tail else broadcast_view(a, (k,) + tail))
    return out


def distinct_components(v: Any) -> bool:
    """Whether ``v`` is a K-vector of VectorGaussian or Wishart messages told apart in
    O(1), as ``moments.distinct_vector`` tells the scalar families': one batch axis,
    every natural parameter a NumPy array of its own along it (no stride 0: nothing for
    ``compact`` to shrink), and the first entries of the first two elements differ in
    at least one parameter (NaN ≠ NaN: a NaN differs, as an elementwise == finds no
    equality there).  The fused Switch's components (the (K,) posteriors themselves):
    ``gaussian._rows`` would return them as they are, after comparing every element.
    False under tracing and for anything else (the callers' general paths)."""
    if type(v) not in (VectorGaussian, Wishart) or traced():
        return False
    differ = False
    for e in v.eta:  # (a loop: a few such posteriors a sweep, each µs counts)
        if (type(e) is not np.ndarray or e.ndim != 3 or e.shape[0] < 2 or not e.strides[0]
                or not e.size):
            return False
        differ = differ or e.item(0) != e.item(e.shape[1] * e.shape[2])
    return differ


def _components(v: Any) -> Any:
    """``gaussian._rows(v)`` (the components' messages, constant along the data axis of
    length 1), or for a gate's clone of a (K,) posterior (``broadcast_base``: views of
    its own parameters) that posterior itself: its remembered moments are then found by
    identity, with no compaction or comparison of the clone's parameters.  A (K,)
    posterior told apart in O(1) (``distinct_components``: the fused Switch's
    components) is its own rows."""
    if distinct_components(v):
        return v
    if isinstance(v, (VectorGaussian, Wishart)) and not traced() and all(
            type(e) is np.ndarray for e in v.eta):
        hit = recall("vector_components", v)  # (a sweep reads a clone more than once)
        if hit is not None:
            return hit
        found = broadcast_base(v.eta)
        if found is not None:
            posterior = type(v).from_natural(*found[0])
            remember("vector_components", v, posterior)
            return posterior
    return _rows(v)


def _own_components(v: Any, k: int | None = None) -> list[np.ndarray] | None:
    """What ``_per_component`` makes of ``v``'s moments, for (K,) posteriors told apart
    in O(1) (``distinct_components``: the fused Switch's components; K = ``k`` where
    given): a VectorGaussian's [E μ, Cov μ], a Wishart's [E Λ, E log |Λ|], the very
    arrays of its remembered moments, read in one lookup; None otherwise."""
    if not distinct_components(v) or (k is not None and v.eta[0].shape[0] != k):
        return None
    return list(v._moments()[:2])


def _mean_rows(mean: Any) -> list[tuple[Any, int]]:
    """(E μ, 1) and, for a random mean, (Cov μ, 2), once per distinct component."""
    m, cov = mean_cov(_components(mean))
    return [(m, 1)] + ([(cov, 2)] if np.ndim(cov) else [])


def _switch_evidence(sample: Any, mean: Any, precision: Any) -> np.ndarray | None:
    """E log N(x_n | μ_k, Λ_k⁻¹) on the (N, K) grid of a Switch over known data as one
    (N, 1+D+T) × (1+D+T, K) product of the data's statistics with the components'
    coefficients; None where the pattern does not hold (the general path runs)."""
    x = _switch_data(sample)
    if x is None:
        return None
    own = _own_components(precision), _own_components(mean)
    if own[0] is not None and own[1] is not None and len(own[0][0]) == len(own[1][0]):
        comps = own[0] + own[1]
    else:
        precision = _components(precision)
        comps = _per_component([(matrix_mean(precision), 2), (mean_log_det(precision), 0)]
                               + _mean_rows(mean))
    if comps is None:
        return None
    lam, elogdet, m = comps[:3]
    cov = comps[3] if len(comps) > 3 else None
    dim = x.shape[1]
    if traced():
        i, j = _triangle(dim)
        lam_m = np.einsum("kij,kj->ki", lam, m)
        spread = np.einsum("ki,ki->k", m, lam_m)
        if cov is not None:
            spread = spread + np.einsum("kij,kij->k", lam, cov)
        # −½ xᵀ Λ x over the upper triangle: Λ_ii, and Λ_ij + Λ_ji off the diagonal
        pairs = np.where(i == j, lam[:, i, j], lam[:, i, j] + lam[:, j, i])
    else:  # the same sums as batched products (no einsum set-up, no gathers)
        flat = lam.reshape(len(lam), dim * dim)
        lam_m = np.matmul(lam, m[:, :, None])[:, :, 0]
        add = np.add.reduce  # (the reduction ``.sum`` calls, without its wrapper)
        spread = add(m * lam_m, 1)
        if cov is not None:
            spread = spread + add(flat * cov.reshape(flat.shape), 1)
        pairs = flat @ _pair_weights(dim)                                  # (K, T)
    coef = np.concatenate([(0.5 * elogdet - 0.5 * dim * LOG_2PI - 0.5 * spread)[None],
                           lam_m.T, -0.5 * pairs.T], axis=0)              # (1+D+T, K)
    # remembered as a product with a column of ones (the statistics' column 0): the
    # Discrete posterior's product of this evidence and E[log w] is the same product
    # with E[log w] added into that row of coefficients (base._add_naturals), no (N, K)
    # sum, as the 1-D mixture's (factors/gaussian.py)
    return rows_product(_sample_stats(sample, x), coef, ones=0)


def _switch_sums(sample: Any, weights: Any, reduce: Reduce | None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(Σ_n q_nk (K,), Σ_n q_nk x_n (K, D), Σ_n q_nk x_n x_nᵀ (K, D, D)) for known data
    on the (N, K) grid of a Switch summed over the data axis with weights q (N, K): one
    (1+D+T, N) × (N, K) product, remembered while ``weights`` lives (under tracing not
    remembered: the compiler shares it between the mean's and the precision's
    messages); None otherwise."""
    x = None if reduce is None else _switch_data(sample)
    if (x is None or not isinstance(weights, np.ndarray) or len(reduce[0]) != 2
            or tuple(reduce[1]) != (0,) or weights.shape != tuple(reduce[0])
            or weights.shape[0] != len(x)):
        return None
    # (the entry holds the data it was made from: found again for the same array, by
    # identity; other data, or a new layout of them, gets its own sums)
    hit = recall("vector_switch_sums", weights)
    if hit is not None and hit[0] is sample:
        return hit[1]
    dim = x.shape[1]
    # (1+D+T, K); accumulated by the blocked normalisation that made q (base)
    sums = weighted_rows(_sample_stats(sample, x), weights)
    # Σ q x xᵀ from its upper triangle: one gather, each entry (a, b) from (min, max)
    s2 = sums[1 + dim:].T[:, _symmetric_index(dim)]
    out = (sums[0], sums[1:1 + dim].T, s2)
    remember("vector_switch_sums", weights, (sample, out))
    # Σ_n q_nk (the ones' row) is also the Dirichlet's message from the same q
    # (factors/discrete._column_sums reads it instead of a pass over q)
    remember("column_sums", weights, sums[0])
    return out


# ----- VMP ------------------------------------------------------------------------------
@VECTOR_GAUSSIAN.operator("vmp", "sample", proper=("mean", "precision"))
def _sample_vmp(mean, precision) -> VectorGaussian:
    lam = matrix_mean(precision)
    return vector_gaussian(_matvec(lam, mean_cov(mean)[0]), lam)


@VECTOR_GAUSSIAN.operator("vmp", "mean", proper=("sample", "precision"))
def _mean_vmp(sample, precision, *, reduce: Reduce | None = None,
              weights: np.ndarray | None = None) -> VectorGaussian:
    """Naturals (E[Λ] E[x], E[Λ]); with ``reduce``, their sums over its plate axes, each
    element's raised to ``weights`` when given (Σ w E[Λ] E[x], Σ w E[Λ], one einsum each:
    no D × D matrix per element)."""
    sums = _switch_sums(sample, weights, reduce)
    if sums is not None:  # a Switch over known data: E[Λ_k] Σ_n q_nk x_n, Σ_n q_nk E[Λ_k]
        comps = _own_components(precision, len(sums[0])) or _per_component(
            [(matrix_mean(_components(precision)), 2)], len(sums[0]))
        if comps is not None:
            lam_k = comps[0]
            return vector_gaussian(_matvec(lam_k, sums[1]), sums[0][:, None, None] * lam_k)
    lam = matrix_mean(precision)
    x = mean_cov(sample)[0]
    if reduce is None:
        return vector_gaussian(_matvec(lam, x), lam)
    w = [] if weights is None else [(weights, "")]
    return vector_gaussian(plate_einsum("i", w + [(lam, "ij"), (x, "j")], reduce),
                           plate_einsum("ij", w + [(np.broadcast_to(lam, np.broadcast_shapes(
                               lam.shape[:-2], np.shape(x)[:-1]) + lam.shape[-2:]), "ij")],
                               reduce))


@VECTOR_GAUSSIAN.operator("vmp", "precision", proper=("sample", "mean"))
def _precision_vmp(sample, mean, *, reduce: Reduce | None = None,
                   weights: np.ndarray | None = None) -> Wishart:
    """Wishart naturals (½, −½ E[(x − μ)(x − μ)ᵀ]); with ``reduce``, their sums over its
    plate axes, each element's raised to ``weights`` when given (Σ w d dᵀ by one einsum:
    no D × D matrix per plate element; in a Switch over known data, from the data's
    weighted statistics: Σ q x xᵀ − Σ q x μᵀ − μ Σ q xᵀ + Σ q (μ μᵀ + Cov μ))."""
    sums = _switch_sums(sample, weights, reduce)
    if sums is not None:
        comps = _own_components(mean, len(sums[0])) or _per_component(
            _mean_rows(mean), len(sums[0]))
        if comps is not None:
            s0, s1, s2 = sums
            m, cov = comps[0], comps[1] if len(comps) > 1 else None
            cross = m[:, :, None] * s1[:, None, :]
            spread = s2 - cross - np.swapaxes(cross, 1, 2) + s0[:, None, None] * (
                m[:, :, None] * m[:, None, :] + (0.0 if cov is None else cov))
            return wishart_from_naturals(0.5 * s0, -0.5 * spread)
    return residual_wishart(*_expected_outer_diff(sample, mean), reduce, weights)


def residual_wishart(d: np.ndarray, cov: Any, reduce: Reduce | None = None,
                     weights: np.ndarray | None = None) -> Wishart:
    """The Wishart message (½, −½ E[r rᵀ]) of a Gaussian residual r with E r = ``d`` and
    Cov r = ``cov`` (a scalar 0 when known); fused over the plate axes of ``reduce``."""
    if reduce is None:
        return wishart_from_naturals(0.5, -0.5 * (outer(d, d) + cov))
    w = [] if weights is None else [(weights, "")]
    spread = plate_einsum("ij", w + [(d, "i"), (d, "j")], reduce)
    if np.ndim(cov):
        spread = spread + plate_einsum("ij", w + [(np.broadcast_to(cov, np.shape(d)[:-1]
                                                                    + cov.shape[-2:]), "ij")],
                                       reduce)
    half = np.broadcast_to(0.5, np.shape(d)[:-1])
    return wishart_from_naturals(plate_einsum("", w + [(half, "")], reduce), -0.5 * spread)


@VECTOR_GAUSSIAN.evidence_operator("vmp")
def _average_log_factor(sample, mean, precision) -> np.ndarray:
    """½ E log|Λ| − (D/2) log 2π − ½ (dᵀ E[Λ] d + tr(E[Λ] (Cov x + Cov μ))); in a Switch
    over known data one BLAS product (``_switch_evidence``); for (K,) posteriors under a
    prior of known arrays (``_prior_average_log``) the same arithmetic with the prior's
    constant made once a run."""
    if (type(mean) is np.ndarray and type(precision) is np.ndarray and precision.ndim == 2
            and mean.dtype == float and precision.dtype == float
            and type(sample) is VectorGaussian and distinct_components(sample)):
        return _prior_average_log(sample, mean, precision)
    fused = _switch_evidence(sample, mean, precision)
    if fused is not None:
        return fused
    return residual_average_log(*_expected_outer_diff(sample, mean), precision)


def _prior_average_log(sample: VectorGaussian, mean: np.ndarray, precision: np.ndarray
                       ) -> np.ndarray:
    """``residual_average_log(*_expected_outer_diff(sample, mean), precision)`` of (K,)
    posteriors under a prior of a known mean and one known D × D precision (the
    components' prior term of the bound, every sweep): the same operations in the same
    order, so the same numbers bit for bit, with ½ log |Λ| − (D/2) log 2π made once
    while the precision's array lives (``memo_of``) and no known-or-random dispatch."""
    m, cov = sample.mean_and_covariance()
    shift = memo_of("vector_gaussian_prior_shift", precision,
                    lambda p: 0.5 * mean_log_det(p) - 0.5 * p.shape[-1] * LOG_2PI)
    spread = trace_product(precision, cov)
    return shift - 0.5 * (quad_form(precision, np.subtract(m, mean)) + spread)


def residual_average_log(d: np.ndarray, cov: Any, precision: Any) -> np.ndarray:
    """E log N(r; 0, Λ⁻¹) for a Gaussian residual r (E r = ``d``, Cov r = ``cov``):
    ½ E log|Λ| − (D/2) log 2π − ½ (dᵀ E[Λ] d + tr(E[Λ] cov))."""
    lam = matrix_mean(precision)
    spread = trace_product(lam, cov) if np.ndim(cov) else 0.0
    return (0.5 * mean_log_det(precision) - 0.5 * lam.shape[-1] * LOG_2PI
            - 0.5 * (quad_form(lam, d) + spread))


# ----- EP (known precision) -----------------------------------------------------------------
def convolve(msg: Any, precision: Any) -> VectorGaussian:
    """The message through N(· ; ·, Λ⁻¹) with Λ known: precision Λ (Λ + P)⁻¹ P
    (= Λ − Λ (Λ + P)⁻¹ Λ, exactly 0 for a uniform message) and Λ (Λ + P)⁻¹ h for a
    message (h, P); N(x, Λ⁻¹) itself for a known x."""
    lam = np.asarray(precision, float)
    if is_known(msg):
        return vector_gaussian(_matvec(lam, np.asarray(msg, float)), lam)
    h, p = msg.eta[0][..., 0], msg.eta[1]
    # (Λ + P)⁻¹ Λ, transposed: Λ (Λ + P)⁻¹ (both symmetric)
    gain = np.swapaxes(np.linalg.solve(lam + p, np.broadcast_to(lam, np.broadcast_shapes(
        lam.shape, p.shape))), -1, -2)
    new_p = np.einsum("...ij,...jk->...ik", gain, p, optimize=True)  # = Λ − gain Λ
    return vector_gaussian(_matvec(gain, h), 0.5 * (new_p + np.swapaxes(new_p, -1, -2)))


@VECTOR_GAUSSIAN.operator("ep", "sample", known=("precision",))
def _sample_ep(mean, precision) -> VectorGaussian:
    return convolve(mean, precision)


@VECTOR_GAUSSIAN.operator("ep", "mean", skip_if_uniform=("sample",), known=("precision",))
def _mean_ep(sample, precision) -> VectorGaussian:
    return convolve(sample, precision)


def _through_constant(msg: VectorGaussian, precision: np.ndarray) -> np.ndarray:
    """K in ∫ exp(⟨η_μ, T(μ)⟩) N(x; μ, Λ⁻¹) dμ = exp(⟨η', T(x)⟩ + K), η' = convolve(η_μ):
    K = ½ hᵀ (Λ + P)⁻¹ h − ½ log |Λ + P| + ½ log |Λ|.  For a proper message K = A(η');
    written out, it holds for a message of singular precision too."""
    lam = np.asarray(precision, float)
    h, total = msg.eta[0][..., 0], lam + msg.eta[1]
    return (0.5 * np.sum(h * solve(total, h), axis=-1) - 0.5 * logdet(total)
            + 0.5 * logdet(lam))


@VECTOR_GAUSSIAN.evidence_operator("ep")
def _log_average_factor(sample, mean, precision) -> np.ndarray:
    """log ∫∫ N(x; μ, Λ⁻¹) m_x(x) m_μ(μ) with normalised messages (a uniform one weighs 1;
    a message of singular precision is normalised over the range of its precision, as
    ``VectorGaussian.log_normalizer`` says, and that normaliser cancels against the
    variable's evidence term)."""
    if not is_known(sample) and not is_known(mean):
        through = convolve(mean, precision)
        return (log_normalizer_or_zero(through * sample) + _through_constant(mean, precision)
                - log_normalizer_or_zero(sample) - log_normalizer_or_zero(mean))
    known, msg = (sample, mean) if is_known(sample) else (mean, sample)
    if is_known(msg):
        return _log_density(np.asarray(known, float), np.asarray(msg, float), precision)
    # the factor as a function of the random argument is N(·; known, Λ⁻¹)
    factor = convolve(np.asarray(known, float), precision)
    return (log_normalizer_or_zero(factor * msg) - factor.log_normalizer()
            - log_normalizer_or_zero(msg))


# ----- VectorGaussianARD: a diagonal precision from a plate of D positive variables --------
# VectorGaussianARD(sample | mean, precision): x ~ N(μ, diag(α)⁻¹) with α a plate of D
# positive variables (Gamma: automatic relevance determination, BayesPy's
# ``GaussianARD(μ, α, shape=(D,))``; ``ff.VectorGaussian(name, μ, precision=alpha)`` with
# alpha over a plate of D elements that is not open there).  α's plate is the event
# axis: the operators read it as the last axis of the precision (batch + (D,)), and its
# message is one Gamma per (plate element, component), multiplied over the statement's
# plates by the compiler.
#
# log f = Σ_d [½ log α_d − ½ log 2π − ½ α_d (x_d − μ_d)²]
#
# VMP (Winn & Bishop's rules, the precision diagonal): to x, (E α ⊙ E μ, diag(E α)); to
# μ, (E α ⊙ E x, diag(E α)); to α_d, the Gamma (½, −½ E[(x_d − μ_d)²]) with
# E[(x_d − μ_d)²] = (E x_d − E μ_d)² + Var x_d + Var μ_d; evidence Σ_d E log f_d.
def _ard_log_density(sample, mean, precision):
    d = np.subtract(sample, mean)
    a = np.asarray(precision, float)
    return np.sum(0.5 * np.log(a) - 0.5 * LOG_2PI - 0.5 * a * d * d, axis=-1)


VECTOR_GAUSSIAN_ARD = define_factor("VectorGaussianARD", ("sample", "vector"),
                                    ("mean", "vector"), ("precision", "positive"),
                                    log_density=_ard_log_density)


def _diagonal(precision) -> np.ndarray:
    """E α as an array, D last."""
    return np.asarray(E(precision), float)


def _ard_message(other, precision) -> VectorGaussian:
    """(E α ⊙ E[other], diag(E α))."""
    a = _diagonal(precision)
    m = np.asarray(mean_cov(other)[0], float)
    return vector_gaussian(a * m, a[..., :, None] * np.eye(a.shape[-1]))


def _ard_square(sample, mean) -> np.ndarray:
    """E[(x_d − μ_d)²] per component, D last."""
    d, cov = _expected_outer_diff(sample, mean)
    return d * d + np.diagonal(cov, axis1=-2, axis2=-1) if np.ndim(cov) else d * d


@VECTOR_GAUSSIAN_ARD.operator("vmp", "sample", proper=("mean", "precision"))
def _ard_sample_vmp(mean, precision) -> VectorGaussian:
    """(E α ⊙ E μ, diag(E α))."""
    return _ard_message(mean, precision)


@VECTOR_GAUSSIAN_ARD.operator("vmp", "mean", proper=("sample", "precision"))
def _ard_mean_vmp(sample, precision) -> VectorGaussian:
    """(E α ⊙ E x, diag(E α))."""
    return _ard_message(sample, precision)


@VECTOR_GAUSSIAN_ARD.operator("vmp", "precision", proper=("sample", "mean"))
def _ard_precision_vmp(sample, mean) -> Gamma:
    """Per component, the Gamma naturals (½, −½ E[(x_d − μ_d)²])."""
    sq = _ard_square(sample, mean)
    return Gamma.from_natural(np.full(np.shape(sq), 0.5), -0.5 * sq)


@VECTOR_GAUSSIAN_ARD.evidence_operator("vmp")
def _ard_average_log_factor(sample, mean, precision) -> np.ndarray:
    """Σ_d [½ E log α_d − ½ log 2π − ½ E α_d E[(x_d − μ_d)²]]."""
    a, elog = _diagonal(precision), np.asarray(Elog(precision), float)
    return np.sum(0.5 * elog - 0.5 * LOG_2PI - 0.5 * a * _ard_square(sample, mean), axis=-1)
