"""factorflow's kernels over chunked Dask arrays: the same source, a third namespace.

The Dask backend runs the NumPy program itself (statement for statement, the same
operators) with the data of the chunked plate as ``dask.array`` arrays.  NumPy
dispatches every function and ufunc it is given a Dask array to Dask (NEP 18,
``__array_function__`` / ``__array_ufunc__``; SciPy's special functions are ufuncs and
become element-wise Dask maps), so a statement over the plate builds a chunked Dask
array and a reduction over the plate (``np.sum(axis=0)``, ``np.einsum``) a Dask
reduction.  What does not dispatch is ``np.asarray``/``np.array``, which would gather
the whole array into this process: the copy of the kernel modules loaded here (the
loader of ``jax_namespace``, with its own module names) sees a ``numpy`` whose
``asarray`` and ``array`` leave a Dask array as it is, and whose ``ndarray`` is either
kind.  NumPy arrays stay NumPy arrays: only what depends on the chunked data is Dask.

The copies run untraced (``TRACED`` is False, NumPy's paths), with a few functions
wrapped (``_OVERRIDES``), each passing NumPy input to the original: ``all_true`` /
``any_true`` take the general path for a Dask condition (the same result on every
element, with no computation to choose a fast one); ``is_zeros_view`` (NumPy's reads
``.strides``), ``memo_of`` and ``log_normalize`` (NumPy's mark results read-only) accept
Dask arrays; ``_product_normalized`` makes a large (N, K) product lazily instead of
block by block in place; ``tilted_moments`` (EP's logistic and Poisson links: boolean
indexing and writes in place) and ``_scatter_counts`` (weighted ``bincount``) run NumPy's
own chunk by chunk; ``total`` leaves a Dask term's sum lazy, so the evidence is one
computation; and ``check_proper`` computes a K-sized posterior's verdict in one round
trip with its parameters, and defers a per-datum one's to the next round trip
(``materialise``).  ``Discrete.entropy`` and the VMP evidence of a gate's cases take
their general path on Dask arrays (NumPy's chooses a faster one by testing the whole
result for NaN, a computation of its own).  An operator that writes into a Dask array
in place, or calls what Dask lacks, fails in Dask; the backend turns that into
``ff.BackendError``.
"""

from __future__ import annotations

import functools
import types
from typing import Any

import numpy

from factorflow.runtime.backends.jax_namespace import Namespace


class _DaskNumPy(types.ModuleType):
    """``numpy`` as the Dask copies see it: NumPy, except ``asarray``/``array``/
    ``asanyarray`` (a Dask array passes through, cast where a dtype is asked for),
    ``ndarray`` (NumPy's or Dask's array class), ``stack`` (of Dask arrays: the new
    axis one chunk), ``take_along_axis`` (chunk by chunk) and ``linalg``
    (``_DaskLinalg``)."""

    def __init__(self) -> None:
        super().__init__("numpy")
        import dask.array as da
        self._da = da
        self.ndarray = (numpy.ndarray, da.Array)
        self.asarray = self._passing(numpy.asarray)
        self.asanyarray = self._passing(numpy.asanyarray)
        self.array = self._passing(numpy.array)
        self.stack = self._stack
        self.take_along_axis = self._take_along_axis
        self.linalg = _DaskLinalg()

    def _stack(self, arrays: Any, axis: int = 0, out: Any = None, **kwargs: Any) -> Any:
        """``numpy.stack``; of Dask arrays, with the new axis one chunk (Dask's makes
        each stacked array its own chunk along it, so that a product contracting that
        axis, as the data's (N, 3) statistics times (3, K) coefficients, would be three
        outer products and their sum per chunk)."""
        arrays = list(arrays)
        if not any(isinstance(a, self._da.Array) for a in arrays):
            return numpy.stack(arrays, axis, out, **kwargs)
        if out is not None:  # Dask arrays are immutable: Dask's own way of declining,
            # which the backend's run turns into ff.BackendError naming the operation
            raise NotImplementedError("np.stack(..., out=) into a Dask array")
        out = self._da.stack(arrays, axis=axis, **kwargs)
        return out.rechunk({axis % out.ndim: -1})

    def _take_along_axis(self, arr: Any, indices: Any, axis: Any) -> Any:
        """``numpy.take_along_axis``; along the last axis of Dask arrays, NumPy's own
        chunk by chunk (the other axes broadcast and chunked alike, the last whole).
        Dask has none: it warns and computes its arguments whole into this process."""
        da = self._da
        dask_args = isinstance(arr, da.Array) or isinstance(indices, da.Array)
        last = axis is not None and numpy.ndim(arr) == numpy.ndim(indices) and \
            axis in (-1, numpy.ndim(arr) - 1)
        if not (dask_args and last):
            return numpy.take_along_axis(arr, indices, axis)
        batch = numpy.broadcast_shapes(numpy.shape(arr)[:-1], numpy.shape(indices)[:-1])
        lead = arr if isinstance(arr, da.Array) else indices
        rows = lead.chunks[0] if batch and lead.shape[0] == batch[0] else None
        pieces = []
        for a in (arr, indices):
            a = da.broadcast_to(da.asarray(a), batch + numpy.shape(a)[-1:])
            pieces.append(a.rechunk(((rows,) if rows else ((batch[0],) if batch else ()))
                                    + tuple((n,) for n in a.shape[1:]))
                          if a.ndim else a)
        a, i = pieces
        return da.map_blocks(numpy.take_along_axis, a, i, axis=-1, chunks=i.chunks,
                             dtype=a.dtype)

    def _passing(self, fn: Any) -> Any:
        da = self._da

        def call(a: Any, dtype: Any = None, *args: Any, **kwargs: Any) -> Any:
            if isinstance(a, da.Array):
                return a if dtype is None or a.dtype == dtype else a.astype(dtype)
            return fn(a, dtype, *args, **kwargs)
        call.__name__ = fn.__name__
        return call

    def __getattr__(self, name: str) -> Any:
        value = getattr(numpy, name)
        setattr(self, name, value)
        return value


class _DaskLinalg(types.ModuleType):
    """``numpy.linalg`` as the Dask copies see it: NumPy's, with a stack of matrices in a
    Dask array refused by name (NotImplementedError, Dask's own way of declining, which
    the backend turns into ``ff.BackendError``): Dask's linear algebra takes one matrix
    and raises a bare ValueError (``Dimension must be 2``) for a stack, as per-datum
    vector Gaussians' operators make."""

    def __init__(self) -> None:
        super().__init__("numpy.linalg")

    def __getattr__(self, name: str) -> Any:
        original = getattr(numpy.linalg, name)
        if not callable(original) or isinstance(original, type):
            return original

        def call(*args: Any, **kwargs: Any) -> Any:
            stacked = [a for a in args if _is_dask(a) and a.ndim > 2]
            if stacked:
                raise NotImplementedError(
                    f"np.linalg.{name} of a stack of matrices (a Dask array of shape "
                    f"{stacked[0].shape}): Dask's linear algebra takes one matrix")
            return original(*args, **kwargs)
        call.__name__ = name
        setattr(self, name, call)
        return call


class _Lazy(types.ModuleType):
    """``factorflow.lazy`` for the copies: SciPy as it is (its ufuncs dispatch)."""

    def __init__(self) -> None:
        super().__init__("factorflow.lazy")
        from factorflow import lazy
        self.special = lazy.special
        self.stats = lazy.stats
        self.lazy_module = lazy.lazy_module


#: the chunked plate of the run in progress, [(its size, its chunk lengths)] or []
PLATE: list[tuple[int, tuple[int, ...]]] = []


#: per-datum posteriors whose properness verdicts wait for the next round trip:
#: (the check's arguments, its lazy verdicts), in the order of the checks
_PENDING: list[tuple[tuple[Any, ...], list[Any]]] = []


def materialise(*ds: Any, verdict: Any = None, checks: bool = True) -> bool:
    """Compute the one-chunk (K-sized: a plate reduced) Dask parameters of the
    distributions ``ds`` into NumPy arrays here, written into each distribution itself
    (every name bound to it reads them), in one round trip with ``verdict()`` (Dask
    booleans over those arrays) and every pending per-datum check (``_PENDING``);
    returns whether ``verdict()`` holds.  Chunked (per-datum) parameters are left lazy:
    never stored, each computation recomputes them chunk by chunk from the data and the
    NumPy globals, so a worker holds one chunk's intermediates at a time.  A pending
    check that fails runs NumPy's check, which raises its error (before this one's).
    ``checks=False``: no round trip for the pending checks alone (they wait for the
    next computation) when nothing else is to be computed."""
    import dask.array as da
    small: list[tuple[Any, int]] = []
    for d in ds:
        eta = getattr(d, "eta", None)
        if isinstance(eta, tuple):
            small += [(d, i) for i, e in enumerate(eta)
                      if isinstance(e, da.Array) and e.npartitions == 1]
    own = list(verdict()) if verdict else []
    if not small and not own and not (checks and _PENDING):
        return True
    got = compute_now(*(d.eta[i] for d, i in small), *own)
    for (d, i), value in zip(small, got, strict=False):
        _set(d, i, numpy.asarray(value))
    return bool(all(got[len(small):]))


def compute_now(*values: Any) -> tuple[Any, ...]:
    """``values`` (Dask arrays, or anything ``dask.compute`` passes through) computed here
    as NumPy, in one round trip with every pending per-datum check (``_PENDING``), which
    raises its error first where it fails: a computation that passes over the data takes
    the checks along instead of a pass of their own."""
    from factorflow.runtime.backends import dask_fusion
    pending = _PENDING[:]
    del _PENDING[:]
    checks = [v for _, verdicts in pending for v in verdicts]
    got = dask_fusion.compute(*checks, *values)  # (fused here, for any scheduler)
    at = 0
    for args, verdicts in pending:
        if not all(got[at:at + len(verdicts)]):
            args[0](*args[1:])  # NumPy's check: raises the error naming the posterior
        at += len(verdicts)
    return tuple(got[at:])


def flush_checks() -> None:
    """Run the pending per-datum checks now (one round trip); raises the first error."""
    if _PENDING:
        materialise()


def _set(d: Any, i: int, value: Any) -> None:
    eta = list(d.eta)
    eta[i] = value
    object.__setattr__(d, "eta", tuple(eta))


def _is_dask(a: Any) -> bool:
    import dask.array as da
    return isinstance(a, da.Array)


def _is_zeros_view(original: Any, module: Any) -> Any:
    """``base.is_zeros_view``: a Dask array (computed, not a view) never is one."""
    def is_zeros_view(eta: tuple[Any, ...]) -> bool:
        return not any(_is_dask(e) for e in eta) and original(eta)
    return is_zeros_view


def _memo_of(original: Any, module: Any) -> Any:
    """``base.memo_of``: a Dask result is remembered as it is (it has no read-only
    flag; a Dask array is never written in place)."""
    def memo_of(what: str, arr: Any, compute: Any) -> Any:
        if not _is_dask(arr):
            return original(what, arr, compute)
        hit = module.recall(what, arr)
        if hit is not None:
            return hit
        value = compute(arr)
        module.remember(what, arr, value)
        return value
    return memo_of


def _product_normalized(original: Any, module: Any) -> Any:
    """``base._product_normalized`` (a large (N, K) ``rows_product`` with a row added
    into its coefficients, made block by block in place beside its normalisation) of
    Dask statistics: the product as the smaller arrays' path makes it
    (``rows_product``, lazy, chunk by chunk; the row remembered as ``"rows_added"``),
    where NumPy's would write into the blocks of a Dask array (``out=``, which Dask
    lacks: at N·K ≥ 2·``_BLOCK_ELEMENTS`` every Dask run of a mixture failed)."""
    def product_normalized(stats: Any, coef: Any, ones: int, row: Any) -> Any:
        if not _is_dask(stats):
            return original(stats, coef, ones, row)
        out = module.rows_product(stats, coef, ones)
        module.remember("rows_added", out, row)
        return out
    return product_normalized


def _log_normalize(original: Any, module: Any) -> Any:
    """``base.log_normalize`` of a Dask array whose last axis is one chunk: NumPy's own
    block by block (``map_blocks``; a row's normalisation reads that row only), one
    step in each chunk's task instead of Dask's dozen (a max, a test for infinities, an
    exponential, a sum, a logarithm); remembered per Dask array as NumPy's is."""
    def log_normalize(log_w: Any) -> Any:
        if not _is_dask(log_w):
            return original(log_w)

        def compute(x: Any) -> Any:
            if x.ndim and x.numblocks[-1] == 1:
                out = x.map_blocks(_numpy_base().log_normalize, dtype=float)
            else:
                out = x - module.logsumexp(x, axis=-1, keepdims=True)
            module.remember("log_normalize", out, out)
            return out
        return module.memo_of("log_normalize", log_w.astype(float), compute)
    return log_normalize


def _check_proper(original: Any, module: Any) -> Any:
    """``kernels.check_proper`` over Dask parameters (NumPy's where it has none).  A
    posterior with one-chunk (K-sized) parameters is computed into NumPy here with its
    verdict (every element proper, no NaN), and every pending check, in one round trip
    (``materialise``).  A
    per-datum posterior (chunked parameters) stays lazy: its verdict joins the pending
    checks, computed in the next round trip together with what that computes, so
    checking it costs no pass over the data of its own.  NumPy's check runs only where
    a verdict fails (its message, its first-sweep rule for uniform elements)."""
    def check_proper(d: Any, what: str, iteration: int | None = None,
                     where: Any = None) -> None:
        def verdict() -> list[Any]:
            return [numpy.all(d.is_proper())] + [~numpy.any(numpy.isnan(e)) for e in d.eta]
        if not any(_is_dask(e) for e in d.eta):  # NumPy's (a broadcast of K values)
            return original(d, what, iteration, where)
        if where is None and any(e.npartitions > 1 for e in d.eta if _is_dask(e)):
            _PENDING.append(((original, d, what, iteration, where), verdict()))
            return
        if where is None and materialise(d, verdict=verdict):
            return
        original(d, what, iteration, where)
    return check_proper


def _total(original: Any, module: Any) -> Any:
    """``variable.total``: a Dask term's sum stays a Dask scalar, so that the evidence
    terms are summed in one computation (the run's ``float`` of the bound)."""
    def total(value: Any, plates: tuple[int, ...] = ()) -> Any:
        if 0 in plates:
            return 0.0
        return numpy.sum(value) if _is_dask(value) else original(value)
    return total


def _all_true(original: Any, module: Any) -> Any:
    """``base.all_true``: False for a Dask condition (the general path, which gives the
    same result on every element, without a computation to choose the fast one)."""
    def all_true(cond: Any) -> bool:
        return not _is_dask(cond) and original(cond)
    return all_true


def _any_true(original: Any, module: Any) -> Any:
    """``base.any_true``: True for a Dask condition (the general path)."""
    def any_true(cond: Any) -> bool:
        return _is_dask(cond) or original(cond)
    return any_true


def _exp_flushed(original: Any, module: Any) -> Any:
    """``base.exp_flushed`` of a Dask array: NumPy's own function block by block
    (``map_blocks``), so that its test for the fast path (``np.min(x)`` against the
    cut) is each block's, in the chunk's task: as a Python ``bool`` of the whole Dask
    array it would compute every datum's x once more, a pass over the data of its own
    at each call.  The same values as NumPy's (it is NumPy's, on each block); the result
    is returned, never written into ``out`` (a Dask array is immutable)."""
    def exp_flushed(x: Any, out: Any = None) -> Any:
        if not _is_dask(x):
            return original(x, out=out)
        return x.astype(float).map_blocks(_numpy_base().exp_flushed, dtype=float)
    return exp_flushed


def _numpy_base() -> Any:
    """factorflow's own ``distributions.base`` (NumPy's functions, which a worker
    imports by name; the Dask copies' live in this process only)."""
    from factorflow.distributions import base
    return base


#: Σ_n q_nk of per-datum Discrete probabilities (N, K), computed ahead with the data
#: sums (``_data_sums``) or the last sweep's bound (``ahead_sums``), by the name of the
#: probabilities' Dask array
_COLUMN_SUMS: dict[str, Any] = {}

#: the data sums of ``_data_sums`` computed this run, by the names of the Dask arrays
#: they were computed from: (weights, data) -> (Σ w, Σ w x, Σ w x²), NumPy (the last few)
_SUMS: dict[tuple[str, str], tuple[Any, ...]] = {}


def _data_sums(original: Any, module: Any) -> Any:
    """``gaussian._data_sums`` over chunked Dask data and (N, K) Dask weights (a
    ``Switch`` over the chunked plate): (Σ w, Σ w x, Σ w x²) as one (3, N) × (N, K)
    product, a Dask reduction computed at once into NumPy (``compute_now``, with the
    pending checks), and kept by the names of the weights and the data (Dask names an
    array by what computes it): the mixture's precision and mean messages of a sweep then
    read the sums of one pass over the data, not a pass each (NumPy's remembers them by
    the weights array; Dask data has no memory to key them by); Σ w is kept as the
    weights' column sums too (``_column_sums``).  NumPy's otherwise."""
    def data_sums(sample: Any, weights: Any, reduce: Any) -> Any:
        if not _is_dask(weights):
            return original(sample, weights, reduce)
        shape, axes = reduce
        if (not module.is_known(sample) or len(shape) != 2 or tuple(axes) != (0,)
                or weights.shape != tuple(shape)):
            return None
        x = module.distinct(module.np.asarray(module.E(sample), float))
        if not _is_dask(x) or x.shape != (shape[0], 1) or shape[0] == 1:
            return None
        key = (weights.name, x.name)
        if key not in _SUMS:
            col = x[:, 0]
            stats = module.np.stack([numpy.ones_like(col), col, col * col])
            if len(_SUMS) > 8:  # (a sweep reads one; older ones are done with)
                _SUMS.clear()
                _COLUMN_SUMS.clear()
            _SUMS[key] = tuple(compute_now(stats @ weights)[0])
            # Σ_n w_nk, as the next sweep's Dirichlet message sums the same
            # probabilities (a mixture's q(z)): no pass of its own, bound or not
            _COLUMN_SUMS[weights.name] = _SUMS[key][0]
        return _SUMS[key]
    return data_sums


def ahead_sums(messages: Any) -> list[tuple[str, Any]]:
    """The column sums (over the chunked plate) of the probabilities of every per-datum
    Discrete message among ``messages``, as lazy Dask arrays named by the probabilities':
    the next sweep's Dirichlet message is those sums (a mixture's Σ_n q(z_n = k)), and
    computed with this sweep's bound, which computes the same probabilities chunk by chunk
    anyway, they cost no pass over the data of their own (``_column_sums`` reads them)."""
    out: dict[str, Any] = {}
    for m in messages:
        eta = getattr(m, "eta", None)
        if (type(m).__name__ == "Discrete" and isinstance(eta, tuple) and _is_dask(eta[0])
                and eta[0].ndim == 2 and eta[0].npartitions > 1):
            p = m.probs
            out.setdefault(p.name, p.sum(axis=0))
    return list(out.items())


def _column_sums(original: Any, module: Any) -> Any:
    """``discrete._column_sums`` of (N, K) Dask probabilities: the sums computed ahead
    with the last data sums or bound (NumPy, no pass over the data), else Dask's sum over
    the plate axis (NumPy's 1ᵀ q would bring an (N,) array of ones into the graph, sent
    whole with the computation: 80 MB at 10⁷ points).  NumPy's otherwise."""
    def column_sums(probs: Any, reduce: Any) -> Any:
        shape, axes = reduce
        if not (_is_dask(probs) and probs.ndim == 2 and len(shape) == 1
                and tuple(axes) == (0,) and probs.shape[0] == shape[0]):
            return original(probs, reduce)
        hit = _COLUMN_SUMS.get(probs.name)
        return probs.sum(axis=0) if hit is None else hit
    return column_sums


def _tilted_moments(original: Any, module: Any) -> Any:
    """``quadrature.tilted_moments`` over Dask arrays: NumPy's own, block by block
    (``map_blocks``; it is elementwise), the three results one stacked block each.
    NumPy's splits the elements between its two rules by boolean indexing and writes
    the parts into its results in place, which Dask arrays cannot do (their masked
    parts have unknown lengths: every EP run of a logistic or Poisson link over a
    chunked plate failed).  The same values as NumPy's (it is NumPy's, on each block).
    ``h`` is one of the module's steps (``LOGISTIC``, ``EXP_NEG_EXP``), passed to the
    workers by its name."""
    def tilted_moments(m: Any, v: Any, h: Any, tilt: Any = 0.0) -> Any:
        if not any(_is_dask(a) for a in (m, v, tilt)):
            return original(m, v, h, tilt)
        import dask.array as da
        step = next(name for name, value in vars(module).items() if value is h)
        shape = numpy.broadcast_shapes(*(numpy.shape(a) for a in (m, v, tilt)))
        m, v, k = _aligned([m, v, tilt], shape, float)
        out = da.map_blocks(functools.partial(_tilted_block, step), m, v, k, new_axis=0,
                            chunks=((3,),) + m.chunks, dtype=float)
        return out[0], out[1], out[2]
    return tilted_moments


def _tilted_block(step: str, m: Any, v: Any, k: Any) -> Any:
    """NumPy's ``tilted_moments`` of one block, stacked (run on the workers)."""
    from factorflow.factors import quadrature
    return numpy.stack(quadrature.tilted_moments(m, v, getattr(quadrature, step), k))


def _aligned(arrays: list[Any], shape: tuple[int, ...], dtype: Any = None) -> list[Any]:
    """``arrays`` (Dask or NumPy; at least one Dask) broadcast to ``shape`` as Dask arrays
    chunked alike: along axis 0 as the first Dask one of them is, every other axis
    whole (a NumPy array led by the chunked plate enters chunked like the data,
    ``dask_backend._repeats_stay_small``)."""
    import dask.array as da
    out = [da.broadcast_to(da.asarray(a) if dtype is None else da.asarray(a, dtype=dtype),
                           shape) for a in arrays]
    lead = next(b for a, b in zip(arrays, out, strict=True) if _is_dask(a))
    chunks = (lead.chunks[0],) + tuple(shape[1:])
    return [a.rechunk(chunks) for a in out]


def _scatter_counts(original: Any, module: Any) -> Any:
    """``discrete._scatter_counts`` (weighted counts of categories over plate axes, one
    ``np.bincount``) of Dask categories or weights: NumPy's own on each chunk of the
    plate (``blockwise``), the chunks' counts then summed where the chunked axis is
    reduced (a K-sized tree reduction) or laid side by side where it is kept.  Dask's
    ``bincount`` takes weights only as a Dask array chunked as the categories are, and
    no kept axes (an LDA's q(θ) message failed on it).  NumPy's otherwise."""
    def scatter_counts(x: Any, w: Any, size: int, reduce: Any) -> Any:
        if not (_is_dask(x) or _is_dask(w)):
            return original(x, w, size, reduce)
        import dask.array as da
        shape, axes = tuple(reduce[0]), tuple(reduce[1])
        x, w = _aligned([x, w], shape)
        letters = "abcdefghijklmnopqrstuvwxy"[:len(shape)]
        summed = 0 in axes  # (the chunked axis: a partial count per chunk, then summed)
        out = letters[0] + "".join(c for k, c in enumerate(letters) if k and k not in axes)
        counts = da.blockwise(functools.partial(_counts_block, size, axes, summed),
                              out + "z", x, letters, w, letters, new_axes={"z": size},
                              adjust_chunks={"a": 1} if summed else None, dtype=float,
                              concatenate=True)
        return counts.sum(axis=0) if summed else counts
    return scatter_counts


def _counts_block(size: int, axes: tuple[int, ...], summed: bool, x: Any, w: Any) -> Any:
    """NumPy's ``_scatter_counts`` of one chunk (run on the workers); with a leading axis
    of length 1 where the chunked axis is reduced (the chunk's partial counts)."""
    from factorflow.factors import discrete
    counts = discrete._scatter_counts(x, w, size, (x.shape, axes))
    return counts[None] if summed else counts


#: module name -> {name: (the copy's function, the copy) -> its replacement}
_OVERRIDES: dict[str, dict[str, Any]] = {
    "factorflow.distributions.base": {"all_true": _all_true, "any_true": _any_true,
                                      "is_zeros_view": _is_zeros_view,
                                      "memo_of": _memo_of,
                                      "log_normalize": _log_normalize,
                                      "_product_normalized": _product_normalized,
                                      "exp_flushed": _exp_flushed},
    "factorflow.factors.gaussian": {"_data_sums": _data_sums},
    "factorflow.factors.discrete": {"_column_sums": _column_sums,
                                    "_scatter_counts": _scatter_counts},
    "factorflow.factors.quadrature": {"tilted_moments": _tilted_moments},
    "factorflow.factors.variable": {"total": _total},
    "factorflow.runtime.kernels": {"check_proper": _check_proper},
}


def _patch_families(module: Any) -> None:
    """``Discrete.entropy`` of Dask probabilities: −Σ p log p the general way (NumPy's
    one-pass way is taken only when no element is NaN, a test that would compute the
    posterior of every datum once more each time the bound is read)."""
    discrete = module.Discrete
    original = discrete.entropy

    def entropy(self: Any) -> Any:
        if not _is_dask(self.eta[0]):
            return original(self)
        p = self.probs
        return -numpy.sum(module.special.xlogy(p, p), axis=-1)
    discrete.entropy = entropy


def _patch_gate(module: Any) -> None:
    """The VMP evidence of a gate's cases over Dask logits: Σ_k q(k) ℓ_k the general way
    (0 · −inf = 0), with no test for NaN choosing a faster one (see ``_patch_families``)."""
    original = module.CASES.evidence["vmp"]

    def cases_average_log_factor(cases: Any, selector: Any) -> Any:
        lw = module._logits(cases)
        lp = module.log_probs(selector)
        if not (_is_dask(lw) or _is_dask(lp)):
            return original(cases, selector)
        q = module.memo_of("exp", lp, module.exp_flushed)  # (NumPy's q, remembered)
        return numpy.sum(module.times_finite(q, lw), axis=-1)
    module.CASES.evidence["vmp"] = cases_average_log_factor


def _patch_discrete(module: Any) -> None:
    """The VMP evidence of a Discrete factor over a Dask q: Σ_k q_k E[log p_k] the
    general way (0 · −inf = 0), with no test for NaN choosing the fused product (see
    ``_patch_families``: the test computes every datum's q once more)."""
    original = module.DISCRETE.evidence["vmp"]

    def average_log_factor(sample: Any, probs: Any) -> Any:
        if module.is_known(sample) or not (_is_dask(probs) or any(
                _is_dask(e) for d in (sample, probs) for e in getattr(d, "eta", ()))):
            return original(sample, probs)
        q = module._sample_stats(sample, module._size(probs))
        return numpy.sum(module.times_finite(q, module.Elog(probs)), axis=-1)
    module.DISCRETE.evidence["vmp"] = average_log_factor


#: module name -> a function adapting the Dask copy of that module in place
_PATCHES: dict[str, Any] = {"factorflow.distributions.families": _patch_families,
                            "factorflow.factors.discrete": _patch_discrete,
                            "factorflow.factors.gate": _patch_gate}


class DaskNamespace(Namespace):
    """The Dask copies of factorflow's kernel modules (``namespace()``)."""

    prefix = "factorflow._dask."

    def _shims(self) -> tuple[Any, types.ModuleType]:
        return _DaskNumPy(), _Lazy()

    def _install(self, name: str, module: types.ModuleType) -> None:
        if name in _PATCHES:
            _PATCHES[name](module)
        for attr, make in _OVERRIDES.get(name, {}).items():
            fn = make(getattr(module, attr), module)
            setattr(module, attr, fn)
            table = getattr(module, "NAMESPACE", None)
            if table is not None and attr in table:
                table[attr] = fn


_NAMESPACE: DaskNamespace | None = None


def namespace() -> DaskNamespace:
    """The Dask copies of factorflow's kernel modules (loaded at the first call)."""
    global _NAMESPACE
    if _NAMESPACE is None:
        _NAMESPACE = DaskNamespace()
    return _NAMESPACE


__all__ = ["namespace", "DaskNamespace", "materialise", "flush_checks"]
