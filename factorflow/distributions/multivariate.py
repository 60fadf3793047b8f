"""Distributions over vectors and matrices: VectorGaussian and Wishart.

Both keep every natural parameter as a matrix (``event_ndim = 2``): the VectorGaussian's
precision-times-mean is stored as a D × 1 column beside its D × D precision, and the
Wishart's scalar (ν − D − 1)/2 as a 1 × 1 matrix beside its D × D −R/2.  So products and
ratios of messages, reductions over plates, gathers, scatters and broadcasts (all of
``base.Distribution``) treat them exactly as the scalar families, one array operation per
plate; the properties people read (``mean``, ``mean_times_precision``, ``dof``) drop the
unit axes again.

Linear algebra is batched over the leading (plate) axes with NumPy's stacked
``linalg`` routines; sums of products go through ``np.einsum`` (optimize=True).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from factorflow.distributions.base import (
    Distribution,
    _based_on,
    broadcast_shapes,
    broadcast_view,
    memo_of,
    recall,
    remember,
    strides,
    traced,
    zeros_view,
)
from factorflow.errors import DataError
from factorflow.lazy import special, stats

LOG_2PI = float(np.log(2 * np.pi))
LOG_2 = float(np.log(2.0))
LOG_PI = float(np.log(np.pi))


# ----- batched linear algebra ---------------------------------------------------------
#: up to this D, stacks of small SPD matrices are inverted by Gauss–Jordan elimination
#: written over the batch (``spd_inverse``): D³ elementwise array operations, several
#: times faster than LAPACK's call per matrix for thousands of 2 × 2 or 4 × 4 blocks
ELEMENTWISE_INVERSE_LIMIT = 6


def gauss_jordan(a: list[list[Any]]) -> tuple[list[list[Any]], Any]:
    """The inverse of the SPD matrix with entries ``a[i][j]`` (arrays over a batch) and its
    log-determinant: Gauss–Jordan elimination without pivoting (stable for SPD matrices,
    like Cholesky's), one elementwise operation over the batch per entry and step.  A
    matrix that is not positive definite gives a NaN or infinite entry or log-determinant
    (a pivot ≤ 0)."""
    d = len(a)
    a = [list(row) for row in a]
    one, zero = np.ones(np.shape(a[0][0])), np.zeros(np.shape(a[0][0]))
    inv = [[one if i == j else zero for j in range(d)] for i in range(d)]
    log_det: Any = zero
    with np.errstate(divide="ignore", invalid="ignore"):
        for k in range(d):
            pivot = a[k][k]
            log_det = log_det + np.log(pivot)
            scale = 1.0 / pivot
            a[k] = [v * scale if j > k else v for j, v in enumerate(a[k])]
            inv[k] = [v * scale for v in inv[k]]
            for i in range(d):
                if i != k:
                    f = a[i][k]
                    a[i] = [v - f * a[k][j] if j > k else v for j, v in enumerate(a[i])]
                    inv[i] = [v - f * w for v, w in zip(inv[i], inv[k], strict=True)]
    return inv, log_det


#: up to this many D × D matrices per D², a stack goes to LAPACK (``spd_inverse``): the
#: elimination's D³ array operations cost more than LAPACK's loop over the matrices below
#: about 60 (D = 2), 100 (D = 3), 150–200 (D = 4), 300–400 (D = 6) matrices, measured
#: (one BLAS thread; an inverse and a Cholesky factor against ``gauss_jordan``)
LAPACK_MATRICES_PER_D2 = 12


def spd_inverse(m: Any) -> tuple[np.ndarray, np.ndarray]:
    """(M⁻¹, log |M|) of each symmetric positive-definite D × D matrix of ``m``
    (..., D, D): ``gauss_jordan`` up to ``ELEMENTWISE_INVERSE_LIMIT``, LAPACK above, and
    LAPACK (Cholesky for the log-determinant) for a stack of at most
    ``LAPACK_MATRICES_PER_D2`` · D² matrices, where the elimination's D³ array operations
    cost more than one call per matrix.  The inverse is symmetrised.  Where a matrix is
    not positive definite its inverse and log-determinant hold NaN or infinite entries on
    every path (LAPACK's above the limit too: an indefinite matrix's ordinary-looking
    log |det| would be a silent wrong answer)."""
    m = np.asarray(m, float)
    d = m.shape[-1]
    if d > ELEMENTWISE_INVERSE_LIMIT:
        if traced():  # (no branch on values: a Cholesky factor's NaNs where not definite)
            chol = np.linalg.cholesky(m)
            return np.linalg.inv(m), 2.0 * np.log(chol.diagonal(0, -2, -1)).sum(-1)
        definite = positive_definite(m)
        if np.all(definite):
            return np.linalg.inv(m), logdet(m)
        # (the identity where a matrix is not: LAPACK's inverse raises on a singular one)
        safe = np.where(definite[..., None, None], m, np.eye(d))
        nan = np.where(definite, 0.0, np.nan)
        return np.linalg.inv(safe) + nan[..., None, None], logdet(safe) + nan
    if 0 < m.size <= LAPACK_MATRICES_PER_D2 * d**4 and not traced():  # (few matrices)
        try:
            chol = np.linalg.cholesky(m)
            inv = np.linalg.inv(m)
        except np.linalg.LinAlgError:  # not (numerically) positive definite: the
            pass                       # elimination's NaNs or infinities below
        else:
            # (the array methods: the same reductions without the functions' wrappers)
            log_det = 2.0 * np.log(chol.diagonal(0, -2, -1)).sum(-1)
            return 0.5 * (inv + inv.swapaxes(-1, -2)), log_det
    inv, log_det = gauss_jordan([[m[..., i, j] for j in range(d)] for i in range(d)])
    out = np.stack([np.stack(row, axis=-1) for row in inv], axis=-2)
    return 0.5 * (out + np.swapaxes(out, -1, -2)), log_det


def smallest_eigenvalue(matrix: Any) -> np.ndarray:
    """The smallest eigenvalue of each symmetric matrix (last two axes): in closed form
    for D ≤ 2 (λ_min = det / λ_max, no cancellation in λ_max), LAPACK's ``eigvalsh``
    above."""
    m = np.asarray(matrix, float)
    if m.ndim >= 2 and m.shape[-1] == m.shape[-2] == 1:
        return m[..., 0, 0]
    if m.ndim >= 2 and m.shape[-1] == m.shape[-2] == 2:
        a, b, c = m[..., 0, 0], 0.5 * (m[..., 0, 1] + m[..., 1, 0]), m[..., 1, 1]
        top = 0.5 * (a + c) + np.hypot(0.5 * (a - c), b)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(top > 0, (a * c - b * b) / np.where(top > 0, top, 1.0),
                            0.5 * (a + c) - np.hypot(0.5 * (a - c), b))
    return np.linalg.eigvalsh(m)[..., 0]


def positive_definite(matrix: Any) -> np.ndarray:
    """Whether each symmetric matrix (last two axes, lower triangle read, as ``eigvalsh``
    reads it) is positive definite: one batched Cholesky factorisation where every
    matrix is (the common case: a posterior's precisions, about 10 times cheaper than
    their eigenvalues at D = 10, a fifth of the closed form's time on ten 2 × 2
    matrices), ``smallest_eigenvalue(matrix) > 0`` otherwise, for D = 1 and when traced
    (no branch on values).  A matrix with a NaN or
    infinite entry is not (False, where LAPACK's ``eigvalsh`` would raise)."""
    m = np.asarray(matrix, float)
    if m.ndim >= 2 and m.shape[-1] > 1 and m.size and not traced():
        try:
            chol = np.linalg.cholesky(m)
        except np.linalg.LinAlgError:  # some matrix is not: each one's eigenvalue below
            chol = None
        if chol is not None and np.all(np.isfinite(chol)):  # (NaN or inf entries factor
            return np.ones(m.shape[:-2], bool)               # without an error)
    if m.ndim < 2:
        return smallest_eigenvalue(m) > 0
    finite = np.all(np.isfinite(m), axis=(-2, -1))
    return finite & (smallest_eigenvalue(np.where(finite[..., None, None], m, 0.0)) > 0)


def check_positive_definite(matrix: Any, what: str) -> np.ndarray:
    """``matrix`` as a float array if it is a stack of symmetric positive-definite D × D
    matrices; DataError naming ``what`` with the smallest eigenvalue (or the asymmetry)
    otherwise."""
    m = np.asarray(matrix, float)
    if m.ndim < 2 or m.shape[-1] != m.shape[-2]:
        raise DataError(f"{what}: expected a square D × D matrix (or one per plate element), "
                        f"got shape {m.shape}.")
    if not np.all(np.isfinite(m)):
        raise DataError(f"{what} contains NaN or inf; give a finite matrix.")
    gap = np.max(np.abs(m - np.swapaxes(m, -1, -2)), initial=0.0)
    if gap > 1e-9 * max(1.0, float(np.max(np.abs(m), initial=0.0))):
        raise DataError(f"{what} is not symmetric (entries differ by up to {gap:.3g} from "
                        "their transposes); give (M + M.T) / 2.")
    low = smallest_eigenvalue(m) if m.size else np.zeros(0)
    if np.any(low <= 0):
        at = np.unravel_index(int(np.argmin(low)), low.shape) if low.ndim else ()
        where = f" at plate element {tuple(int(i) for i in at)}" if at else ""
        raise DataError(f"{what} is not positive definite{where}: its smallest eigenvalue "
                        f"is {float(np.min(low)):.6g}; give a positive-definite matrix.")
    return m


def inverse(matrix: np.ndarray) -> np.ndarray:
    """The inverse of each matrix; the pseudo-inverse for a stack holding a singular one
    (an improper message, such as a uniform one, whose covariance is undefined)."""
    try:
        return np.linalg.inv(matrix)
    except np.linalg.LinAlgError:
        return np.linalg.pinv(matrix, hermitian=True)


def _inverse_or_nan(matrix: np.ndarray) -> np.ndarray:
    """``inverse(matrix)``, or NaN where a matrix with NaN entries makes LAPACK give up
    (the moments of an improper message, read by its propriety check, are NaN, not an
    error)."""
    try:
        return inverse(matrix)
    except np.linalg.LinAlgError:
        return np.full(np.shape(matrix), np.nan)


def solve(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """matrix⁻¹ vector for stacks of matrices and vectors (last axis), with ``inverse``'s
    fallback for singular matrices."""
    vector = np.asarray(vector, float)
    try:
        return np.linalg.solve(matrix, vector[..., None])[..., 0]
    except np.linalg.LinAlgError:
        return np.einsum("...ij,...j->...i", inverse(matrix), vector, optimize=True)


def logdet(matrix: np.ndarray) -> np.ndarray:
    """log |det M| of each matrix (−inf for a singular one)."""
    return np.linalg.slogdet(matrix)[1]


def outer(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a bᵀ for stacks of vectors (last axis)."""
    return np.asarray(a)[..., :, None] * np.asarray(b)[..., None, :]


def quad_form(matrix: np.ndarray, x: np.ndarray) -> np.ndarray:
    """xᵀ M x for stacks (broadcast over the leading axes), without forming x xᵀ; one
    matrix product for a single matrix and many vectors (a plate of data), and one per
    distinct matrix where a stack repeats its matrices along axes of x (K components seen
    by N data: K products of an N × D block, not N·K vector products)."""
    matrix, x = np.asarray(matrix, float), np.asarray(x, float)
    if matrix.ndim == 2:  # (the array's own sum: ``np.sum``'s reduction, no dispatch)
        return ((x @ matrix) * x).sum(axis=-1)
    full = np.broadcast_shapes(matrix.shape[:-2], x.shape[:-1])
    # a stack that only repeats some matrices (stride 0) is read as it is
    m = matrix[tuple(slice(0, 1) if matrix.shape[k] > 1 and strides(matrix)[k] == 0
                     else slice(None) for k in range(matrix.ndim - 2))]
    lead = np.broadcast_shapes(m.shape[:-2], x.shape[:-1])
    nd = len(lead)
    m = m.reshape((1,) * (nd + 2 - m.ndim) + m.shape)
    x = x.reshape((1,) * (nd + 1 - x.ndim) + x.shape)
    rows = [a for a in range(nd) if m.shape[a] == 1 and x.shape[a] > 1]
    if not rows:
        return _broadcast(np.sum(np.matmul(x[..., None, :], m)[..., 0, :] * x, axis=-1),
                          full)
    # the axes along which the matrices repeat become the rows of each matrix product
    keep = [a for a in range(nd) if a not in rows]
    xt = np.transpose(np.broadcast_to(x, tuple(lead[a] if a in keep else x.shape[a]
                                               for a in range(nd)) + x.shape[-1:]),
                      keep + rows + [nd])
    shape = xt.shape[:nd]
    xt = xt.reshape(shape[:len(keep)] + (-1, xt.shape[-1]))
    m = m.reshape(tuple(m.shape[a] for a in keep) + m.shape[-2:])
    out = np.sum(np.matmul(xt, m) * xt, axis=-1).reshape(shape)
    order = keep + rows  # (a Python list: jax.numpy's argsort takes arrays only)
    return _broadcast(np.transpose(out, sorted(range(nd), key=order.__getitem__)), full)


def _broadcast(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``a`` itself where it has ``shape``, else a (read-only) view broadcast to it."""
    return a if a.shape == shape else np.broadcast_to(a, shape)


def trace_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """tr(A B) for stacks of symmetric matrices: Σ_ij A_ij B_ij (once per distinct pair
    where both are broadcast views along the same axes)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.ndim == 2 and b.ndim > 2 and a.shape == b.shape[-2:] and not traced():
        # one matrix against a stack: one matrix-vector product
        return b.reshape(b.shape[:-2] + (a.size,)) @ a.reshape(a.size)
    shape = broadcast_shapes(a.shape, b.shape)
    # (views made directly, and the shared axes looked for only where both have one:
    # the set-up cost more than the product on K small matrices)
    if a.shape != shape:
        a = broadcast_view(a, shape)
    if b.shape != shape:
        b = broadcast_view(b, shape)
    if len(shape) > 2:
        sa, sb = strides(a)[:-2], strides(b)[:-2]
        if 0 in sa and 0 in sb:
            index = tuple(slice(0, 1) if shape[k] > 1 and sa[k] == 0 and sb[k] == 0
                          else slice(None) for k in range(len(shape) - 2))
            a, b = a[index], b[index]
    # Σ_ij A_ij B_ij as a batched (1 × D²) · (D² × 1) product: the numbers of
    # ``einsum(optimize=True)``, which makes it, without the path search
    flat = a.shape[:-2] + (1, a.shape[-2] * a.shape[-1])
    out = np.matmul(a.reshape(flat), b.reshape(flat[:-2] + flat[-1:] + (1,)))[..., 0, 0]
    return out if out.shape == shape[:-2] else np.broadcast_to(out, shape[:-2])


#: up to this D, Σ_{i<D} f(a − i/2) is summed by D elementwise calls (the (..., D) array,
#: its call and its reduction cost more on the K numbers of a sweep)
SMALL_SUM = 4


def log_multigamma(a: np.ndarray, dim: int) -> np.ndarray:
    """log Γ_D(a) = D(D−1)/4 log π + Σ_{i<D} log Γ(a − i/2), elementwise (no domain error:
    NaN or inf where a ≤ (D−1)/2, which only an improper message has); of a Python
    number remembered (a prior's known degrees of freedom, read every sweep)."""
    if type(a) is float and not traced():  # (a traced value must not outlive its trace)
        return _log_multigamma_of(a, dim)
    a = np.asarray(a, float)
    if dim <= SMALL_SUM and not traced():  # (D elementwise calls: no (..., D) array)
        out = special.gammaln(a)
        for i in range(1, dim):
            out = out + special.gammaln(a - 0.5 * i)
        return dim * (dim - 1) / 4.0 * LOG_PI + out
    half = np.arange(dim) / 2.0
    return dim * (dim - 1) / 4.0 * LOG_PI + np.sum(special.gammaln(a[..., None] - half),
                                                   axis=-1)


@lru_cache(maxsize=256)
def _log_multigamma_of(a: float, dim: int) -> Any:
    return log_multigamma(np.asarray(a), dim)  # (a NumPy scalar: immutable)


def multi_digamma(a: np.ndarray, dim: int) -> np.ndarray:
    """ψ_D(a) = Σ_{i<D} ψ(a − i/2), the derivative of log Γ_D."""
    a = np.asarray(a, float)
    if dim <= SMALL_SUM and not traced():  # (D elementwise calls: no (..., D) array)
        out = special.digamma(a)
        for i in range(1, dim):
            out = out + special.digamma(a - 0.5 * i)
        return out
    return np.sum(special.digamma(a[..., None] - np.arange(dim) / 2.0), axis=-1)


def _matrix_or_inverse(family: str, name: str, value: Any, inverse_name: str,
                       inverse_value: Any) -> np.ndarray:
    """The matrix given as ``name=`` or by its inverse as ``inverse_name=`` (exactly one),
    checked symmetric positive definite."""
    if (value is None) == (inverse_value is None):
        raise TypeError(f"{family} takes exactly one of {inverse_name}= or {name}=")
    if value is None:
        return inverse(check_positive_definite(inverse_value, f"{family} {inverse_name}"))
    return check_positive_definite(value, f"{family} {name}")


def _as_matrix(value: Any) -> np.ndarray:
    """A scalar parameter as a 1 × 1 matrix per batch element."""
    return np.asarray(value, float)[..., None, None]


def _distinct(method: Any) -> Any:
    """Compute ``method`` (returning arrays, or a tuple of them, whose leading axes are the
    batch) once per distinct element: batch axes along which every natural parameter is
    a broadcast view (stride 0, as a gate's clones of a component over N data points) are
    collapsed first and the result broadcast back, so that the moments of K Wisharts
    seen by N data cost K inversions, not N · K, and no (N, K, D, D) array is made."""

    def wrapper(self: Any, *args: Any) -> Any:
        nb = len(self.batch_shape)
        axes = [k for k in range(nb) if self.eta[0].shape[k] > 1
                and all(e.shape[k] == 1 or strides(e)[k] == 0 for e in self.eta)]
        if not axes:
            return method(self, *args)
        index = tuple(slice(0, 1) if k in axes else slice(None) for k in range(nb))
        small = method(type(self).from_natural(*(e[index] for e in self.eta)), *args)

        def back(r: Any) -> np.ndarray:
            r = np.asarray(r)
            return np.broadcast_to(r, self.batch_shape + r.shape[nb:])

        return tuple(back(r) for r in small) if isinstance(small, tuple) else back(small)

    wrapper.__name__, wrapper.__doc__ = method.__name__, method.__doc__
    wrapper.__qualname__ = method.__qualname__   # so inspect.getdoc finds an inherited doc
    return wrapper


def memory_owner(a: np.ndarray) -> np.ndarray:
    """The array that owns ``a``'s memory (the end of its chain of views)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def by_data(x: np.ndarray, what: str, compute: Any) -> Any:
    """``compute(x)`` of known data ``x``, made once per data and remembered while the
    memory of the data lives (a fresh view of the same memory, a run's data laid out
    again, finds it; arrays in it read-only); made afresh when traced or for data
    without memory of its own (Dask's chunks)."""
    if traced():  # remembered for the rest of the trace while ``x`` lives (XLA moves
        # each copy out of the loop apart and carries every one: it does not merge them)
        return memo_of(what, x, compute)
    if type(x) is not np.ndarray:
        return compute(x)
    ident = (x.__array_interface__["data"][0], x.shape, x.strides)
    root = memory_owner(x)
    hit = recall(what, root)
    if hit is not None and hit[0] == ident:
        return hit[1]
    value = compute(x)
    for a in value if isinstance(value, tuple) else (value,):
        if type(a) is np.ndarray:
            a.flags.writeable = False
    remember(what, root, (ident, value))
    return value


def _memory_key(e: np.ndarray) -> tuple:
    """Where ``e``'s elements are: its address, shape and strides, the stride of a
    length-1 axis read as 0 (it addresses nothing else; a broadcast view gives it 0)."""
    return (e.__array_interface__["data"][0], e.shape,
            tuple(0 if n == 1 else st for n, st in zip(e.shape, e.strides, strict=True)))


def _freeze(arrays: tuple[np.ndarray, ...]) -> None:
    """Make ``arrays`` and the arrays that own their memory read-only: what is remembered
    of them (``remembered``, ``remembered_verdict``) can then not go stale by an in-place
    write through any of them, or through a view made of them afterwards (NumPy refuses
    the write).  An owner whose flag cannot be cleared (memory NumPy does not own) is
    left as it is."""
    for e in arrays:
        flags = e.flags
        if flags.writeable:
            flags.writeable = False
        if e.base is None:  # (its own memory: a fresh posterior's parameters)
            continue
        owner = memory_owner(e)
        if owner.flags.writeable:
            try:
                owner.flags.writeable = False
            except ValueError:  # (not ours to change)
                pass


def _recall_by_memory(name: str, small: tuple[np.ndarray, ...]) -> tuple[tuple, np.ndarray, Any]:
    """(the layout of ``small``: the address, shape and strides of each, ``_memory_key``;
    the owner of the last one's memory; what ``_remember_by_memory`` recorded for that
    layout under ``name`` or None).  One entry per name and owner, named by text (the
    layout is compared, not hashed into the name: building a key cost as much as the
    lookup)."""
    layout = tuple(_memory_key(e) for e in small)
    owner = memory_owner(small[-1])
    hit = recall(name, owner)
    return layout, owner, hit[2] if hit is not None and hit[0] == layout else None


def _remember_by_memory(name: str, layout: tuple, owner: np.ndarray,
                        small: tuple[np.ndarray, ...], value: Any) -> None:
    """Record ``value`` for ``_recall_by_memory``: forgotten with ``owner``; the entry
    holds the other arrays' owners, so that their memory is not reused while it lives;
    the memory of all of them is made read-only (``_freeze``)."""
    _freeze(small)
    held = tuple(o for o in map(memory_owner, small[:-1]) if o is not owner)
    remember(name, owner, (layout, held, value))


def _parts(value: Any) -> tuple:
    """``value`` as a tuple of its arrays (a tuple as it is, one array as a 1-tuple)."""
    return value if isinstance(value, tuple) else (value,)


def _each(value: Any, f: Any) -> Any:
    """``f`` of each array of ``value`` (a tuple of arrays, or one array), in its form."""
    return tuple(map(f, value)) if isinstance(value, tuple) else f(value)


def remembered(method: Any = None, *, distinct: bool = True) -> Any:
    """``method(self)`` (moments of ``self``'s natural parameters alone: an array or a
    tuple of arrays whose leading axes are the batch) computed once and remembered: the
    one memory-keyed cache of the vector families and their messages.  Safe because

    * an entry lives while the memory it was computed from does (it is keyed by the
      owner of the last parameter's memory, and holds the others', so that no memory or
      identity it names is reused meanwhile), and
    * that memory is made read-only when the entry is made (``_freeze``): an in-place
      write through the parameters, their owners or a view made of them afterwards
      raises instead of leaving a stale value (the natural parameters of messages are
      never written in place; an array written through a writable view made before
      its moments were first read is the one way round this, and nothing does that);
    * the results are read-only too.

    Lookups, cheapest first:

    * by the identities of ``self``'s parameters (a second read of the same message:
      one dictionary lookup);
    * for a broadcast view of parameters whose moments are remembered (a gate's clone
      of a posterior: ``broadcast_base``), their moments with the leading axes put back
      (views; no address read);
    * else the batch axes set aside along which every parameter has length 1 or is a
      broadcast view (stride 0) — with ``distinct=False`` the leading axes of length 1
      only, and the stride-0 axes are kept (``inner_product.shared_moments``, whose
      callers read the shape of its results) — and the result looked up by the memory
      of what is left (``_memory_key``: a gate's clone of K components over (N, K)
      finds the (K,) posterior's moments), or computed on it;
    * the axes set aside put back (length 1, or broadcast: read-only views, no
      (N, K, D, D) array).

    Parameters that own their memory (a fresh posterior) are found by identity and
    their views through ``broadcast_base``, so they get no memory entry (its lookup
    reads addresses).  A result that is a view of the parameters is not remembered (it
    would keep them alive).  When traced, or for parameters that are not NumPy arrays
    of one rank, the result is computed afresh (on the distinct elements, with
    ``distinct``)."""
    if method is None:
        return lambda m: remembered(m, distinct=distinct)
    name = "moments:" + method.__qualname__
    ident_name = "identity:" + method.__qualname__
    fresh = _distinct(method) if distinct else method

    def wrapper(self: Any) -> Any:
        eta = self.eta
        last = eta[-1]
        if traced():
            return fresh(self)
        # (entries named by text, one per array: the other parameters are checked by
        # identity against those the entry holds; an entry is made for NumPy arrays
        # alone, so a hit needs no test of their types first)
        hit = recall(ident_name, last)
        if hit is not None and _same(hit[0], eta):
            return hit[1]
        for e in eta:
            if type(e) is not np.ndarray or e.ndim != last.ndim:
                return fresh(self)
        # (an array that owns its memory is no view of another's)
        value = None if last.base is None else _of_bases(eta, ident_name, distinct)
        if value is not None:  # (a gate's clone of a posterior read already)
            remember(ident_name, last, (eta[:-1], value))
            return value
        nb = last.ndim - self.event_ndim
        if distinct:
            drop = [k for k in range(nb) if last.shape[k] and all(
                e.shape[k] == 1 or e.strides[k] == 0 for e in eta)]  # (not an empty axis)
        else:
            drop = []
            while len(drop) < nb and all(e.shape[len(drop)] == 1 for e in eta):
                drop.append(len(drop))
        if drop:
            index = tuple(0 if k in drop else slice(None) for k in range(nb))
            small = tuple(e[index] for e in eta)
        else:
            small = eta
        owned = all(e.base is None for e in small)
        value = None
        if not owned:
            layout, owner, value = _recall_by_memory(name, small)
        if value is None:
            value = method(self if small is eta else type(self).from_natural(*small))
            parts = _parts(value)
            # (a view of the parameters would keep them alive for ever; fresh arrays,
            # the common case, have no base to follow)
            if all(type(v) is np.ndarray and (v.base is None or not any(
                    _based_on(v, memory_owner(e)) for e in small)) for v in parts):
                for v in parts:
                    v.flags.writeable = False
                if not owned:
                    _remember_by_memory(name, layout, owner, small, value)
            else:
                return _each(value, lambda v: _undrop(v, drop, last.shape[:nb]))
        if drop:  # the dropped axes back, as length 1, then broadcast (views)
            batch = last.shape[:nb]
            if drop == list(range(len(drop))) and all(batch[k] == 1 for k in drop):
                lead = (None,) * len(drop)  # (leading unit axes, a gate's (1, K) clone)
                value = _each(value, lambda v: v[lead])
            else:
                value = _each(value, lambda v: _undrop(v, drop, batch))
        if not any(v is last or (v.base is not None and _based_on(v, last))
                   for v in _parts(value) + eta[:-1]):
            _freeze(eta)
            remember(ident_name, last, (eta[:-1], value))
        return value

    wrapper.__name__, wrapper.__doc__ = method.__name__, method.__doc__
    wrapper.__qualname__ = method.__qualname__
    return wrapper


def broadcast_base(eta: tuple[np.ndarray, ...]) -> tuple[tuple[np.ndarray, ...], int] | None:
    """(the arrays that ``eta`` merely broadcast, the number of leading axes added), or
    None: a gate's clone of a posterior (``broadcast_to`` over (N, K), or that compacted
    to (1, K)) is a view of the posterior's own parameters (``base``) with leading axes
    of stride 0 or length 1 and the rest of the base's shape and strides (so, being
    inside it, at its address).  Read from the views' attributes alone (no address, no
    values): a C-contiguous, non-empty base each."""
    bases = tuple(e.base for e in eta)
    lead = eta[0].ndim - (bases[0].ndim if type(bases[0]) is np.ndarray else 0)
    # (plain loops with early exits: this runs on every clone a sweep reads)
    for e, b in zip(eta, bases, strict=True):
        if (type(b) is not np.ndarray or not b.size or not b.flags.c_contiguous
                or e.ndim - b.ndim != lead or e.shape[lead:] != b.shape):
            return None
        st = e.strides
        for n, se, sb in zip(b.shape, st[lead:], b.strides, strict=True):
            if se != sb and n > 1:
                return None
        for n, se in zip(e.shape[:lead], st[:lead], strict=True):
            if se and n > 1:
                return None
    return bases, lead


def _of_bases(eta: tuple[np.ndarray, ...], ident_name: str, broadcast: bool = True
              ) -> Any:
    """What ``remembered`` keeps by identity (under ``ident_name``) for the arrays that
    ``eta`` merely broadcast (``broadcast_base``), else None: one lookup, no address
    read; the values are the posterior's with the leading axes put in front (views:
    of length 1, or with ``broadcast`` broadcast to ``eta``'s)."""
    found = broadcast_base(eta)
    if found is None:
        return None
    bases, lead = found
    hit = recall(ident_name, bases[-1])
    if hit is None or not _same(hit[0], bases):
        return None
    shape = eta[0].shape[:lead]
    if all(n == 1 for n in shape):
        return _each(hit[1], lambda v: v[(None,) * lead])
    if not broadcast:
        return None
    return _each(hit[1], lambda v: broadcast_view(v, shape + v.shape))


def _same(held: tuple[np.ndarray, ...], eta: tuple[np.ndarray, ...]) -> bool:
    """Whether ``held`` are the very arrays ``eta[:-1]`` (an entry's other parameters)."""
    for a, b in zip(held, eta, strict=False):
        if a is not b:
            return False
    return True


def _undrop(v: np.ndarray, drop: list[int], batch: tuple[int, ...]) -> np.ndarray:
    """``v`` (the batch without the axes ``drop``, then its own trailing axes) with those
    axes put back as length 1 and broadcast to ``batch`` (a read-only view)."""
    if not drop:
        return v
    nb = len(batch)
    kept = iter(v.shape[:nb - len(drop)])
    tail = v.shape[nb - len(drop):]
    return broadcast_view(v.reshape(tuple(1 if k in drop else next(kept) for k in range(nb))
                                    + tail), batch + tail)


def _distinct_elements(d: Distribution) -> Distribution:
    """``d`` without the batch axes along which every natural parameter is a broadcast
    view (stride 0) or of length 1 (element 0 taken: a view, no copy): a gate's clone of
    K components over (N, K) gives the K components' own parameters, at their address,
    shape and strides."""
    first = d.eta[0]
    nb = first.ndim - d.event_ndim
    if nb == 1 and first.shape[0] > 1 and first.strides[0]:
        return d  # (K messages, the first parameter not repeated: nothing to drop)
    if first.size == 0:  # (an empty plate: nothing to take element 0 of)
        return d
    drop = [k for k in range(nb) if all(e.shape[k] == 1 or e.strides[k] == 0 for e in d.eta)]
    if not drop:
        return d
    index = tuple(0 if k in drop else slice(None) for k in range(nb))
    return type(d).from_natural(*(e[index] for e in d.eta))


def remembered_verdict(d: Distribution, verdict: Any) -> bool:
    """``verdict(d)`` (whether every element of ``d`` is proper, a bool from its natural
    parameters alone), remembered while their memory lives, in ``remembered``'s
    memory-keyed entries (``_recall_by_memory``: keyed by the owner of the last
    parameter and the address, shape and strides of the distinct elements of each,
    ``_distinct_elements``; the memory made read-only): a posterior's verdict is found
    again for a broadcast view of it (a gate's clone of the components, checked in the
    next sweep: the same parameters over (N, K)).  Not when traced, nor for parameters
    that are not NumPy arrays."""
    if traced() or any(type(e) is not np.ndarray for e in d.eta):
        return verdict(d)
    small = _distinct_elements(d)
    layout, owner, value = _recall_by_memory("all_proper", small.eta)
    if value is not None:
        return value
    value = bool(verdict(small))
    _remember_by_memory("all_proper", layout, owner, small.eta, value)
    return value


def _all_zero(eta: tuple[np.ndarray, ...], batch: tuple[int, ...]) -> np.ndarray:
    """Per batch element, whether every natural parameter is zero (the uniform message)."""
    out = np.ones(batch, bool)
    for e in eta:
        out &= np.all(e == 0, axis=(-2, -1))
    return out


def _unbatched(d: Distribution, what: str) -> None:
    if d.batch_shape:
        raise ValueError(f"to_scipy() of a batched {what}: index one element first")


# ----- VectorGaussian -------------------------------------------------------------------
def _well_conditioned_inverse(p: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``spd_inverse(p)`` where every matrix of ``p`` is positive definite with
    tr(P)·tr(P⁻¹) < 10⁸ (so its condition number is below 10⁸, every eigenvalue far above
    the cut-offs of ``inverse``'s pseudo-inverse and ``log_normalizer``'s eigen-
    decomposition: the formulas agree to rounding); None otherwise, and when traced or D
    is above ``ELEMENTWISE_INVERSE_LIMIT`` (the general path runs)."""
    if traced() or p.shape[-1] > ELEMENTWISE_INVERSE_LIMIT or p.size == 0:
        return None
    inv, log_det = spd_inverse(p)
    size = p.trace(0, -2, -1) * inv.trace(0, -2, -1)
    # (one pass: a NaN log-determinant or size fails every comparison, silently)
    if not ((np.abs(log_det) < np.inf) & (size > 0) & (size < 1e8)).all():
        return None
    return inv, log_det


def _closed_form_inverse_2x2(m: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``_well_conditioned_inverse(m)`` for a stack of 2 × 2 matrices in closed form
    (M⁻¹ = [[c, −b], [−b, a]] / (ac − b²), log |M| = log(ac − b²), the lower triangle
    read as LAPACK's Cholesky factor reads it; symmetric by construction), equal to
    LAPACK's to rounding: where every matrix has a > 0, ac − b² > 0 (positive definite)
    and tr(M) tr(M⁻¹) = (a + c)² / (ac − b²) < 10⁸; None otherwise, and when traced.
    Ten 2 × 2 Wishart rates cost a third of LAPACK's two calls and their wrappers."""
    if traced() or m.shape[-2:] != (2, 2) or not m.size:
        return None
    a, b, c = m[..., 0, 0], m[..., 1, 0], m[..., 1, 1]
    det = a * c - b * b
    trace = a + c
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        size = trace * trace / det
        # (one pass: a NaN entry fails every comparison, silently)
        if not ((a > 0) & (det > 0) & (size < 1e8)).all():
            return None
        inv = np.empty(m.shape)
        inv[..., 0, 0] = c / det
        inv[..., 1, 1] = a / det
        np.divide(0.0 - b, det, out=inv[..., 0, 1])  # (0 − b: no −0 off a diagonal)
        inv[..., 1, 0] = inv[..., 0, 1]
    return inv, np.log(det)


def _shared_precision(p: np.ndarray) -> np.ndarray:
    """``p`` (batch + (D, D)) with each batch axis along which every matrix is the same
    cut to length 1 (a broadcast view, or equal values: the N latent vectors of Bayesian
    PCA share one posterior precision while their means differ), so that what depends
    on the precision alone (covariance, log-determinant, propriety) is computed once per
    distinct matrix and broadcast back; ``p`` as it is when traced (no branch on
    values) or where nothing is shared.  The comparison is one pass over ``p`` (none past
    the first two matrices where they differ)."""
    if traced() or type(p) is not np.ndarray or p.ndim <= 2:
        return p
    if (p.ndim == 3 and p.shape[0] > 1 and p.shape[1] and p.strides[0]
            and p.item(0) != p.item(p.shape[1] * p.shape[2])):
        return p  # (K posteriors whose first two differ: told in O(1), the loop's verdict)
    for axis in range(p.ndim - 2):
        if p.shape[axis] > 1:
            lead = (slice(None),) * axis
            first = p[lead + (slice(0, 1),)]  # (views: no gather)
            if p.strides[axis] == 0 or (  # (the first two first: distinct ones differ)
                    (first == p[lead + (slice(1, 2),)]).all() and (p == first).all()):
                p = first
    return p


class VectorGaussian(Distribution):
    """N(x; mean, precision⁻¹) over x in R^D.

    T(x) = (x as a D × 1 column, −x xᵀ/2); eta = (precision · mean as a D × 1 column,
    precision).  Construct from ``mean`` (batch + (D,)) and exactly one of
    ``covariance=`` or ``precision=`` (batch + (D, D), positive definite).
    """

    natural_names = ("mean_times_precision", "precision")
    event_ndim = 2

    def __init__(self, mean: Any, covariance: Any = None, *, precision: Any = None):
        prec = _matrix_or_inverse("VectorGaussian", "precision", precision, "covariance",
                                  covariance)
        if precision is not None:  # (the caller's array stays theirs, writable: what is
            prec = prec.copy()      # remembered makes the memory it read read-only)
        mean = np.asarray(mean, float)
        if mean.ndim == 0 or mean.shape[-1] != prec.shape[-1]:
            raise DataError(f"VectorGaussian: the mean has shape {mean.shape} but the "
                            f"{'covariance' if precision is None else 'precision'} has shape "
                            f"{prec.shape}; the mean's last axis must be D = "
                            f"{prec.shape[-1]}.")
        h = np.einsum("...ij,...j->...i", prec, mean, optimize=True)
        batch = np.broadcast_shapes(h.shape[:-1], prec.shape[:-2])
        dim = prec.shape[-1]
        super().__init__(np.broadcast_to(h[..., None], batch + (dim, 1)),
                         np.broadcast_to(prec, batch + (dim, dim)))

    @classmethod
    def _uniform_naturals(cls, batch_shape: tuple[int, ...], *event: int) -> tuple:
        if not event:
            raise TypeError("VectorGaussian.uniform needs the dimension D")
        d = event[0]  # read-only views of one zero: a plate of uniform messages is free
        return (zeros_view(batch_shape + (d, 1)),
                zeros_view(batch_shape + (d, d)))

    @property
    def dim(self) -> int:
        """D, the length of the vector.

        >>> ff.distributions.VectorGaussian([0.0, 0.0, 0.0], np.eye(3)).dim
        3
        """
        return int(self.eta[1].shape[-1])

    @property
    def mean_times_precision(self) -> np.ndarray:
        """precision · mean, shape batch + (D,).

        >>> ff.distributions.VectorGaussian([1.0, 2.0], precision=np.diag([2.0, 3.0])
        ...                                 ).mean_times_precision
        array([2., 6.])
        """
        return self.eta[0][..., 0]

    @property
    def precision(self) -> np.ndarray:
        """The precision matrix (the inverse covariance), shape batch + (D, D).

        >>> ff.distributions.VectorGaussian([0.0, 0.0], np.diag([2.0, 4.0])).precision
        array([[0.5 , 0.  ],
               [0.  , 0.25]])
        """
        return self.eta[1]

    @property
    @remembered
    def mean(self) -> np.ndarray:
        """precision⁻¹ · (precision · mean); 0 where the precision is zero (uniform).

        >>> ff.distributions.VectorGaussian([1.0, -2.0], np.eye(2)).mean
        array([ 1., -2.])
        """
        return solve(self.eta[1], self.eta[0][..., 0])

    @property
    def covariance(self) -> np.ndarray:
        """The covariance matrix, precision⁻¹ (the pseudo-inverse for a singular one).

        >>> ff.distributions.VectorGaussian([0.0, 0.0], precision=[[2.0, 1.0], [1.0, 2.0]]
        ...                                 ).covariance * 3       # inverse: [[2, −1], [−1, 2]] / 3
        array([[ 2., -1.],
               [-1.,  2.]])
        """
        return self._moments()[1]

    @remembered
    def _moments(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(E[x], Cov[x], log |P|) from one inversion of the distinct precisions
        (``_shared_precision``: length 1 along the axes where all are equal): P⁻¹ and
        log |P| by ``_well_conditioned_inverse`` where every precision is well
        conditioned, else the (pseudo-)inverse and a log-determinant of NaN (the
        general formulas run where they are read: ``_precision_inverse``).  Remembered
        while the memory of the parameters lives, so that a posterior's propriety, its
        moments (read by its gate's clones too), its entropy and its bound all read one
        inversion a sweep, in one lookup each."""
        p = self.eta[1]
        shared = _shared_precision(p)
        fast = _well_conditioned_inverse(shared)
        if fast is None:
            cov, log_det = _inverse_or_nan(shared), np.full(shared.shape[:-2], np.nan)
        else:
            cov, log_det = fast[0], np.asarray(fast[1])  # (an array, as remembered)
        cov = cov if cov.shape == p.shape else np.broadcast_to(cov, p.shape)
        # (a batched matrix product: the same numbers as ``einsum(optimize=True)``, which
        # makes it, without the path search that cost more than the product at small K)
        return np.matmul(cov, self.eta[0])[..., 0], cov, log_det

    def _precision_inverse(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(P⁻¹, log |P|) when every precision is well conditioned
        (``_well_conditioned_inverse``), else None (and when traced, or for no matrices):
        the covariance and log-determinant of ``_moments``."""
        if traced() or not self.eta[1].size:
            return None
        _, cov, log_det = self._moments()
        return None if np.isnan(log_det).any() else (cov, log_det)

    @property
    def variance(self) -> np.ndarray:
        """The marginal variance of each component (the covariance's diagonal).

        >>> ff.distributions.VectorGaussian([0.0, 0.0], [[4.0, 1.0], [1.0, 9.0]]).variance
        array([4., 9.])
        """
        return np.diagonal(self.covariance, axis1=-2, axis2=-1).copy()

    def mean_and_covariance(self) -> tuple[np.ndarray, np.ndarray]:
        """(E[x], Cov[x]) from one inversion of the precision.

        >>> m, cov = ff.distributions.VectorGaussian([1.0, 2.0], np.eye(2)).mean_and_covariance()
        >>> m, cov
        (array([1., 2.]), array([[1., 0.],
               [0., 1.]]))
        """
        m, cov, _ = self._moments()
        return m, cov

    @_distinct
    def log_normalizer(self) -> np.ndarray:
        """A(η) = hᵀ P⁻¹ h / 2 − log |P| / 2 + D log(2π) / 2 (log |det P| for an improper
        message, as the scalar Gaussian does).

        A message of singular precision (EP's message from a few rank-one factors, fewer
        than D) is uniform along the null space of P; as for a uniform message (see
        ``base.log_normalizer_or_zero``) that part weighs 1, so A is taken over the range
        of P: pseudo-inverse, pseudo-determinant and rank · log(2π) / 2.  The evidence
        terms that read such a message cancel its A exactly, as they cancel a uniform
        message's 0.

        >>> a = ff.distributions.VectorGaussian([0.0, 0.0], np.eye(2)).log_normalizer()
        >>> bool(np.isclose(a, np.log(2 * np.pi)))          # D log(2π) / 2 with D = 2
        True
        """
        h, p = self.eta[0][..., 0], self.eta[1]
        if p.size == 0:
            return np.zeros(self.batch_shape)
        fast = self._precision_inverse()
        if fast is not None:  # hᵀ P⁻¹ h = h · E[x]
            quad = np.sum(h * self._moments()[0], axis=-1)
            return 0.5 * quad - 0.5 * fast[1] + 0.5 * self.dim * LOG_2PI
        w, v = np.linalg.eigh(_shared_precision(p))  # (broadcast against h where shared)
        scale = np.max(np.abs(w), axis=-1, keepdims=True)
        live = np.abs(w) > self.dim * np.finfo(float).eps * scale
        proj = np.einsum("...ji,...j->...i", v, h, optimize=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            quad = np.sum(np.where(live, proj * proj / w, 0.0), axis=-1)
            logdet_p = np.sum(np.where(live, np.log(np.abs(w)), 0.0), axis=-1)
        return 0.5 * quad - 0.5 * logdet_p + 0.5 * np.sum(live, axis=-1) * LOG_2PI

    def entropy(self) -> np.ndarray:
        """½ log |2πe Σ| = D (1 + log 2π)/2 − ½ log |P|, from the log-determinant of the
        precisions' inversion (``_precision_inverse``, which the posterior's moments
        read): the general A(η) − ⟨η, E[T]⟩ (``Distribution.entropy``) in closed form,
        equal to rounding; that formula where the precisions are not well conditioned
        (and when traced).

        >>> h = ff.distributions.VectorGaussian([0.0, 0.0], np.diag([2.0, 0.5])).entropy()
        >>> bool(np.isclose(h, np.log(2 * np.pi * np.e)))   # |Σ| = 1
        True
        """
        fast = self._precision_inverse() if self.eta[1].size else None
        if fast is None:
            return super().entropy()
        out = 0.5 * self.dim * (1.0 + LOG_2PI) - 0.5 * fast[1]
        return out if out.shape == self.batch_shape else np.broadcast_to(
            out, self.batch_shape).copy()

    def expected_stats(self) -> tuple[np.ndarray, ...]:
        m, cov = self.mean_and_covariance()
        return m[..., None], -0.5 * (cov + outer(m, m))

    def sufficient_stats(self, x: Any) -> tuple[np.ndarray, ...]:
        x = np.asarray(x, float)
        return x[..., None], -0.5 * outer(x, x)

    def log_base_measure(self, x: Any) -> np.ndarray:
        return np.zeros(np.shape(x)[:-1])

    def log_prob(self, x: Any) -> np.ndarray:
        """log N(x; mean, precision⁻¹); ``x`` has shape (..., D); equal to SciPy's
        ``multivariate_normal.logpdf``.

        >>> vg = ff.distributions.VectorGaussian([0.0, 1.0], [[2.0, 0.5], [0.5, 1.0]])
        >>> bool(np.isclose(vg.log_prob([0.3, 0.2]), vg.to_scipy().logpdf([0.3, 0.2])))
        True
        """
        x = np.asarray(x, float)
        h, p = self.eta[0][..., 0], self.eta[1]
        return (np.sum(h * x, axis=-1) - 0.5 * quad_form(p, x) - self.log_normalizer())

    @_distinct
    def is_proper(self) -> np.ndarray:
        if self.eta[1].size == 0:
            return np.ones(self.batch_shape, bool)
        p = self.eta[1]
        return np.broadcast_to(positive_definite(_shared_precision(p)), p.shape[:-2])

    def all_proper(self) -> bool:
        """``Distribution.all_proper`` (every precision positive definite, no NaN
        parameter), remembered (``remembered_verdict``): where the precisions are well
        conditioned (``_precision_inverse``, the inversion the posterior's mean and
        covariance read anyway) they are positive definite, and only h is tested for
        NaN; the general verdict otherwise.

        >>> VG = ff.distributions.VectorGaussian
        >>> VG([0.0, 0.0], np.eye(2)).all_proper(), VG.uniform((3,), 2).all_proper()
        (True, False)
        """
        fast = self._fast_verdict()
        return remembered_verdict(self, VectorGaussian._verdict) if fast is None else fast

    def _fast_verdict(self) -> bool | None:
        """True where the precisions of the distinct elements (``_distinct_elements``)
        were inverted by ``_well_conditioned_inverse`` (then positive definite: a
        Cholesky factor, positive pivots or the closed form's a > 0, ad − b² > 0) and h
        has no NaN: read from the remembered ``_moments``, which the posterior's moments
        need anyway, in one lookup; None (the general verdict) otherwise, and when
        traced."""
        if traced() or type(self.eta[1]) is not np.ndarray or not self.eta[1].size:
            return None
        small = _distinct_elements(self)
        # (the reductions ``.any`` calls, without its wrapper: NumPy arrays here)
        if np.logical_or.reduce(np.isnan(small._moments()[2]), None):
            return None
        return not np.logical_or.reduce(np.isnan(small.eta[0]), None)

    def _verdict(self) -> bool:
        if self.eta[1].size and self._precision_inverse() is not None:
            return not np.isnan(self.eta[0]).any()  # (P⁻¹ came by a Cholesky factor or
        return Distribution.all_proper(self)         # positive pivots: P has no NaN)

    @_distinct
    def is_uniform(self) -> np.ndarray:
        """All natural parameters zero (checked once per distinct element).

        >>> ff.distributions.VectorGaussian.uniform((2,), 3).is_uniform()
        array([ True,  True])
        """
        return _all_zero(self.eta, self.batch_shape)

    def _draw(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        m, cov = self.mean_and_covariance()
        chol = np.linalg.cholesky(cov)
        z = rng.standard_normal(shape + (self.dim,))
        return m + np.einsum("...ij,...j->...i", chol, z, optimize=True)

    def to_scipy(self) -> Any:
        _unbatched(self, "VectorGaussian")
        m, cov = self.mean_and_covariance()
        return stats.multivariate_normal(m, cov)

    def describe(self) -> dict[str, np.ndarray]:
        m, cov = self.mean_and_covariance()
        return {"mean": m, "covariance": cov}


# ----- Wishart ------------------------------------------------------------------------
class Wishart(Distribution):
    """W(X; dof ν, rate R) over symmetric positive-definite D × D matrices X:

        p(X) ∝ |X|^((ν − D − 1)/2) exp(−tr(R X)/2),   E[X] = ν R⁻¹,

    the rate R being the inverse of SciPy's ``scale`` (``stats.wishart(ν, R⁻¹)``); for
    D = 1 it is Gamma(ν/2, rate R/2).  T(X) = (log |X| as a 1 × 1 matrix, X);
    eta = ((ν − D − 1)/2 as a 1 × 1 matrix, −R/2).
    """

    natural_names = ("dof_term", "minus_half_rate")
    event_ndim = 2

    def __init__(self, dof: Any, rate: Any = None, *, scale: Any = None):
        r = _matrix_or_inverse("Wishart", "rate", rate, "scale", scale)
        dim = r.shape[-1]
        dof = np.asarray(dof, float)
        if np.any(dof <= dim - 1):
            raise DataError(f"Wishart: the degrees of freedom must exceed D − 1 = {dim - 1}, "
                            f"got {float(np.min(dof))!r}.")
        batch = np.broadcast_shapes(dof.shape, r.shape[:-2])
        super().__init__(np.broadcast_to(_as_matrix(0.5 * (dof - dim - 1)), batch + (1, 1)),
                         np.broadcast_to(-0.5 * r, batch + (dim, dim)))

    @classmethod
    def _uniform_naturals(cls, batch_shape: tuple[int, ...], *event: int) -> tuple:
        if not event:
            raise TypeError("Wishart.uniform needs the dimension D")
        d = event[0]  # read-only views of one zero, as VectorGaussian's
        return (zeros_view(batch_shape + (1, 1)),
                zeros_view(batch_shape + (d, d)))

    @property
    def dim(self) -> int:
        """D, the size of each D × D matrix.

        >>> ff.distributions.Wishart(5.0, np.eye(2)).dim
        2
        """
        return int(self.eta[1].shape[-1])

    @property
    @_distinct
    def dof(self) -> np.ndarray:
        """The degrees of freedom ν.

        >>> float(ff.distributions.Wishart(5.0, np.eye(2)).dof)
        5.0
        """
        return 2.0 * self.eta[0][..., 0, 0] + self.dim + 1

    @property
    @_distinct
    def rate(self) -> np.ndarray:
        """The rate matrix R (the inverse of ``scale``).

        >>> ff.distributions.Wishart(5.0, scale=np.diag([0.5, 0.25])).rate
        array([[2., 0.],
               [0., 4.]])
        """
        return -2.0 * self.eta[1]

    @property
    def scale(self) -> np.ndarray:
        """The scale matrix S = R⁻¹ (SciPy's ``scale``).

        >>> ff.distributions.Wishart(5.0, np.diag([2.0, 4.0])).scale
        array([[0.5 , 0.  ],
               [0.  , 0.25]])
        """
        return self._moments()[2]

    @remembered
    def _moments(self) -> tuple[np.ndarray, ...]:
        """(E[X], E[log |X|], R⁻¹, log |R|, whether ν > D − 1 and R⁻¹ and log |R| came by
        ``_well_conditioned_inverse``, ν, ν/2) from one inversion of the rate: the closed form or
        LAPACK's Cholesky factor where every rate is well conditioned (then each is
        positive definite: ``all_proper`` reads the flag), the (pseudo-)inverse and the
        log-determinant otherwise.  Remembered while the memory of the parameters lives,
        so that a posterior's propriety, its moments (read by its gate's clones), its
        entropy and its bound read one inversion a sweep, in one lookup each."""
        first, second = self.eta
        dim = second.shape[-1]
        rate = -2.0 * second
        nu = 2.0 * first[..., 0, 0] + dim + 1
        # (a Wishart is VMP's or a known rate's: the closed form's rounding moves no EP
        # fixed point, as a VectorGaussian's inverse would)
        fast = _closed_form_inverse_2x2(rate) if dim == 2 else None
        if fast is None:
            fast = _well_conditioned_inverse(rate)
        if fast is None:
            scale, log_r = _inverse_or_nan(rate), logdet(rate)
        else:
            scale, log_r = fast
        with np.errstate(invalid="ignore"):  # (a NaN ν: not proper)
            proper = (nu > dim - 1) if fast is not None else np.zeros(nu.shape, bool)
        half = 0.5 * nu
        mean_log_det = multi_digamma(half, dim) + dim * LOG_2 - log_r
        return (nu[..., None, None] * scale, np.asarray(mean_log_det), scale,
                np.asarray(log_r), proper, nu, half)

    @property
    def mean(self) -> np.ndarray:
        """E[X] = ν R⁻¹.

        >>> ff.distributions.Wishart(4.0, np.diag([2.0, 4.0])).mean
        array([[2., 0.],
               [0., 1.]])
        """
        return self._moments()[0]

    @property
    @_distinct
    def variance(self) -> np.ndarray:
        """Var[X_ij] = ν (S_ij² + S_ii S_jj), S = R⁻¹.

        >>> ff.distributions.Wishart(4.0, np.eye(2)).variance      # 4 · (2 on, 1 off the diagonal)
        array([[8., 4.],
               [4., 8.]])
        """
        s = self.scale
        diag = np.diagonal(s, axis1=-2, axis2=-1)
        return self.dof[..., None, None] * (s * s + outer(diag, diag))

    def mean_log_det(self) -> np.ndarray:
        """E[log |X|] = ψ_D(ν/2) + D log 2 − log |R|.  For D = 1 it is Gamma(ν/2, R/2)'s
        E[log x] = ψ(ν/2) − log(R/2):

        >>> from scipy.special import digamma
        >>> w = ff.distributions.Wishart(3.0, [[2.0]])
        >>> bool(np.isclose(w.mean_log_det(), digamma(1.5) - np.log(1.0)))
        True
        """
        return self._moments()[1]

    def _rate_log_det(self) -> np.ndarray:
        """log |R|, from the inversion of ``_moments`` (E[log |X|], the log-normaliser
        and the entropy read it)."""
        return self._moments()[3]

    @_distinct
    def log_normalizer(self) -> np.ndarray:
        """A(η) = ν D log 2 / 2 − ν log |R| / 2 + log Γ_D(ν/2).  For D = 1, R = 2 it is
        Gamma(ν/2, 1)'s log Γ(ν/2):

        >>> from scipy.special import gammaln
        >>> bool(np.isclose(ff.distributions.Wishart(3.0, [[2.0]]).log_normalizer(),
        ...                 gammaln(1.5)))
        True
        """
        nu = 2.0 * self.eta[0][..., 0, 0] + self.dim + 1  # (``dof``, without its lookup)
        with np.errstate(invalid="ignore"):
            return (0.5 * nu * (self.dim * np.log(2.0) - self._rate_log_det())
                    + log_multigamma(0.5 * nu, self.dim))

    def entropy(self) -> np.ndarray:
        """A(η) − (ν − D − 1)/2 E[log |X|] + ν D/2: the general A(η) − ⟨η, E[T]⟩
        (``Distribution.entropy``) with ⟨−R/2, E[X]⟩ = −ν tr(R R⁻¹)/2 = −ν D/2 in closed
        form, equal to rounding.  For D = 1 it is the entropy of Gamma(ν/2, rate R/2):

        >>> from scipy import stats
        >>> h = ff.distributions.Wishart(3.0, [[2.0]]).entropy()
        >>> bool(np.isclose(h, stats.gamma(1.5, scale=1.0).entropy()))
        True
        """
        dim = self.dim
        # (ν and ν/2 as ``_moments`` made them: the same numbers, no arithmetic again)
        _, mean_log_det, _, log_r, _, nu, half = self._moments()
        with np.errstate(invalid="ignore"):
            log_normalizer = half * (dim * np.log(2.0) - log_r) + log_multigamma(half, dim)
            return log_normalizer - 0.5 * (nu - dim - 1) * mean_log_det + half * dim

    def expected_stats(self) -> tuple[np.ndarray, ...]:
        return _as_matrix(self.mean_log_det()), self.mean

    def sufficient_stats(self, x: Any) -> tuple[np.ndarray, ...]:
        x = np.asarray(x, float)
        return _as_matrix(logdet(x)), x

    def log_base_measure(self, x: Any) -> np.ndarray:
        return np.zeros(np.shape(x)[:-2])

    @_distinct
    def is_proper(self) -> np.ndarray:
        if self.eta[1].size == 0:
            return np.ones(self.batch_shape, bool)
        return (self.dof > self.dim - 1) & positive_definite(self.rate)

    def all_proper(self) -> bool:
        """``Distribution.all_proper`` (ν > D − 1, the rate positive definite, no NaN
        parameter) written out over the distinct elements and remembered
        (``remembered_verdict``: a gate's clone of the precisions finds the posterior's
        verdict).  A NaN in the first parameter fails the comparison, one in the second
        the positive-definiteness test: the same verdict.

        >>> W = ff.distributions.Wishart
        >>> improper = W.from_natural([[0.0]], np.eye(2))   # rate −2 I
        >>> W(3.0, np.eye(2)).all_proper(), improper.all_proper()
        (True, False)
        """
        fast = self._fast_verdict()
        return remembered_verdict(self, Wishart._verdict) if fast is None else fast

    def _fast_verdict(self) -> bool | None:
        """True where the distinct elements (``_distinct_elements``) have ν > D − 1 and
        rates inverted by ``_well_conditioned_inverse`` (then positive definite): read
        from the remembered ``_moments``, which the posterior's moments need anyway, in
        one lookup; None (the general verdict) otherwise, and when traced."""
        second = self.eta[1]
        if traced() or type(second) is not np.ndarray or not second.size:
            return None
        with np.errstate(invalid="ignore", divide="ignore"):  # (a NaN or singular rate)
            proper = _distinct_elements(self)._moments()[4]
            return True if np.logical_and.reduce(proper, None) else None

    def _verdict(self) -> bool:
        first, second = self.eta
        if not second.size:
            return True
        dim = second.shape[-1]
        return (bool(np.all(2.0 * first[..., 0, 0] + dim + 1 > dim - 1))
                and bool(np.all(positive_definite(-2.0 * second))))

    @_distinct
    def is_uniform(self) -> np.ndarray:
        """All natural parameters zero (checked once per distinct element).

        >>> ff.distributions.Wishart.uniform((2,), 3).is_uniform()
        array([ True,  True])
        """
        return _all_zero(self.eta, self.batch_shape)

    def _draw(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        """Bartlett: X = L A Aᵀ Lᵀ with L L ᵀ = R⁻¹, A lower triangular, A_ii² ~ χ²(ν − i),
        A_ij ~ N(0, 1) below the diagonal."""
        d = self.dim
        chol = np.linalg.cholesky(self.scale)
        dof = np.broadcast_to(self.dof[..., None] - np.arange(d), shape + (d,))
        a = np.tril(rng.standard_normal(shape + (d, d)), k=-1)
        a = a + np.sqrt(rng.chisquare(dof))[..., None] * np.eye(d)
        la = np.einsum("...ij,...jk->...ik", chol, a, optimize=True)
        return np.einsum("...ij,...kj->...ik", la, la, optimize=True)

    def to_scipy(self) -> Any:
        _unbatched(self, "Wishart")
        return stats.wishart(df=float(self.dof), scale=self.scale)

    def describe(self) -> dict[str, np.ndarray]:
        return {"dof": self.dof, "rate": self.rate}


__all__ = ["VectorGaussian", "Wishart", "check_positive_definite", "inverse", "solve",
           "logdet", "outer", "quad_form", "trace_product", "log_multigamma",
           "multi_digamma", "positive_definite", "smallest_eigenvalue", "spd_inverse",
           "gauss_jordan", "memory_owner", "remembered", "broadcast_base"]
