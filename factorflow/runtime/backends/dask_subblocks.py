"""A chunk's task run over its rows in sub-blocks: the Dask backend's bound on a task's
own memory.

A chunk's task (``dask_fusion``) runs the NumPy work of a pass over one data chunk:
about forty steps, a dozen of them making a (rows, K) array (a mixture's log
responsibilities, their exponential, their products with the data's statistics, the
bound's terms).  Run on the whole chunk, four or five such arrays are alive at its peak
(9–10 MB at the default 26,214 rows and K = 10, ``tracemalloc`` per task): the largest
thing a worker holds when it reads its data from a file.  ``run`` runs the same steps
on the chunk's rows ``SUB_BLOCK_BYTES`` at a time instead (a few thousand rows of a
mixture of K = 10), so that a task's temporaries are bounded by the sub-block, not the
chunk, while the scheduler still sees one task per chunk.

Each step of the chunk's program is classified as the first sub-block runs, from what
it reads:

- *global*: reads nothing per datum (K values, a broadcast of them): run once, on the
  whole chunk, before the rows;
- *row-wise*: a step whose every output row depends on the same row of its per-datum
  inputs, and on nothing else per datum: run on each sub-block.  Only operations known
  to be row-wise are (``_row_step``): NumPy's ufuncs and the ``operator`` functions on
  arrays whose rows line up under broadcasting, ``np.where``, indexing that keeps the
  rows whole, ``reshape`` that keeps the rows leading, Dask's concatenation of blocks
  and ``matmul`` of a per-datum array with a K-sized one, reductions along other axes,
  and factorflow's ``log_normalize`` (over the last axis) and ``exp_flushed``;
- *plate reduction*: a reduction whose axes include the rows (a sum, a maximum, ``any``,
  ``all``), or Dask's ``matmul`` contracting the rows (a sufficient statistic): run on
  each sub-block, the results combined by the same reduction (a sum of the sub-blocks'
  sums, a maximum of their maxima);
- *after*: reads a plate reduction: run once, on the combined value, after the rows.

A per-datum value is one with exactly one axis of the chunk's length (its *row axis*),
or computed from one by a row-wise step; the row axes of a step's inputs are checked
to line up (a value of K entries that happened to have the chunk's length would not
line up with the data's rows, and is refused).  A program with any other step reading
a per-datum value (a cumulative sum, a sort, a function this module does not know),
or whose steps fail on a sub-block, is not split: the chunk's task runs it whole, as
before (``dask_fusion._run_chunk``), so the result is always the unsplit program's, up
to the order of the sums' additions (a sum over the chunk is the sum of the
sub-blocks' sums).  Chunks of fewer than ``2 * FIRST_ROWS`` rows are run whole.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np

#: the largest per-datum array a sub-block makes, in bytes (the sub-block's rows are
#: set from the widest per-datum row the first sub-block made: 256 KiB is 3,276 rows
#: of a mixture of K = 10)
SUB_BLOCK_BYTES = 2**18

#: the rows of the first sub-block, which measures the widest per-datum row
FIRST_ROWS = 1024

#: what ``run`` did on this process since it started: chunks run in sub-blocks
#: ("split"), and run whole because a step could not be split ("whole"; the reason of
#: the last such, "why") — read by tests and benchmarks on the workers
STATS: dict[str, Any] = {"split": 0, "whole": 0, "why": None}

_GLOBAL = None        # the kind of a value that is not per datum
_REDUCED = "reduced"  # the kind of a plate reduction's (combined) value


class Unsplittable(Exception):
    """A step of the chunk's program that cannot run on sub-blocks (its reason)."""


def _elementwise_functions() -> frozenset[Any]:
    names = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "neg", "pos",
             "abs", "invert", "and_", "or_", "xor", "eq", "ne", "lt", "le", "gt", "ge")
    return frozenset(getattr(operator, n) for n in names) | {np.where}


_ELEMENTWISE = _elementwise_functions()

#: the reductions a chunk's program may apply along the rows, and how two partial
#: results combine (the same reduction of the two)
_REDUCTIONS: dict[Any, Any] = {np.sum: np.add, np.nansum: np.add, np.any: np.logical_or,
                               np.all: np.logical_and, np.max: np.maximum,
                               np.min: np.minimum, np.amax: np.maximum, np.amin: np.minimum,
                               np.nanmax: np.fmax, np.nanmin: np.fmin}


def _dask_reductions() -> None:
    """Dask's own chunk functions of ``max`` and ``min`` (NumPy's, but for empty
    blocks, which a sub-block never is) into ``_REDUCTIONS``."""
    from dask.array import reductions
    _REDUCTIONS.setdefault(reductions.chunk_max, np.maximum)
    _REDUCTIONS.setdefault(reductions.chunk_min, np.minimum)


def run(inner: Mapping[Hashable, Any], exports: tuple[Hashable, ...],
        external: tuple[Hashable, ...], values: tuple[Any, ...],
        rows: int) -> tuple[Any, ...] | None:
    """The values of ``exports`` of the chunk's program ``inner`` (task-spec nodes, its
    inputs ``external`` = ``values``; ``rows``: the chunk's length along the plate),
    computed over the rows in sub-blocks (see the module doc); None where the program
    cannot be split (run it whole)."""
    if rows < 2 * FIRST_ROWS:
        return None
    _dask_reductions()
    try:
        out = _Split(inner, exports, external, values, rows).run()
    except Unsplittable as e:
        STATS["whole"] += 1
        STATS["why"] = str(e)
        return None
    STATS["split"] += 1
    return out


class _Split:
    """One run of a chunk's program in sub-blocks (``run``)."""

    def __init__(self, inner: Mapping[Hashable, Any], exports: tuple[Hashable, ...],
                 external: tuple[Hashable, ...], values: tuple[Any, ...], rows: int) -> None:
        from factorflow.runtime.backends.dask_fusion import _post_order
        self.inner, self.exports, self.rows = inner, exports, rows
        self.order = _post_order(inner, exports)
        self.whole: dict[Hashable, Any] = dict(zip(external, values, strict=True))
        self.kind: dict[Hashable, Any] = {k: _row_axis(v, rows)
                                          for k, v in self.whole.items()}
        self.row_steps: list[Hashable] = []  # run on each sub-block, in order
        self.after: list[Hashable] = []      # run once after the rows
        self.combine: dict[Hashable, Any] = {}  # plate reduction -> its combining ufunc
        self.reduced: dict[Hashable, Any] = {}  # its combined value so far
        self.gathered: dict[Hashable, np.ndarray] = {}  # per-datum exports, whole
        self.readers: dict[Hashable, int] = {}  # readers among the row steps

    def run(self) -> tuple[Any, ...]:
        """Classify and run the steps on the first sub-block, then the other sub-blocks,
        then the steps after the rows; the exports."""
        start = min(FIRST_ROWS, self.rows)
        widest = self._sub_block(0, start, first=True)
        step = max(FIRST_ROWS, SUB_BLOCK_BYTES // max(1, widest))
        lo = start
        while lo < self.rows:
            hi = min(self.rows, lo + step)
            self._sub_block(lo, hi)
            lo = hi
        values = {**self.whole, **self.reduced}
        for key in self.after:
            node = self.inner[key]
            if any(self.kind.get(d) not in (_GLOBAL, _REDUCED) for d in node.dependencies):
                raise Unsplittable(f"{_name(node)} reads a per-datum value and a plate "
                                   "reduction")
            values[key] = node(values)
        values.update(self.gathered)
        return tuple(values[k] for k in self.exports)

    def _sub_block(self, lo: int, hi: int, first: bool = False) -> int:
        """Run the row steps on rows ``lo:hi`` (on the first sub-block: every step, each
        classified as it comes); the widest per-datum row made, in bytes."""
        views: dict[Hashable, Any] = {}

        def value(key: Hashable) -> Any:
            kind = self.kind.get(key, _GLOBAL)
            if key in views:
                return views[key]
            v = self.whole[key]
            if isinstance(kind, int):  # (a per-datum value computed whole: its rows)
                v = v[(slice(None),) * kind + (slice(lo, hi),)]
            views[key] = v
            return v

        widest = 0
        steps = self.order if first else self.row_steps
        # each value's readers still to run (on the first sub-block, every step's)
        readers = dict(self.readers if not first else _readers(self.inner, self.order))
        for key in steps:
            node = self.inner[key]
            deps = node.dependencies
            kinds = [self.kind.get(d, _GLOBAL) for d in deps]
            if first:
                classified = True
                if any(k == _REDUCED for k in kinds):
                    self.after.append(key)
                    self.kind[key] = _REDUCED  # (what reads it runs after the rows too)
                elif all(k is _GLOBAL for k in kinds):  # once, on the whole chunk
                    self.whole[key] = node(self.whole)
                    self.kind[key] = _row_axis(self.whole[key], self.rows)
                else:
                    classified = False
                    self.row_steps.append(key)
                if classified:
                    _release(deps, readers, views, self.whole)
                    continue
            out, kind = _row_step(node, {d: value(d) for d in deps},
                                  {d: self.kind.get(d, _GLOBAL) for d in deps}, hi - lo)
            if first:
                self.kind[key] = _REDUCED if kind is _REDUCED else kind
                if kind is _REDUCED:
                    self.combine[key] = _combining(node)
            elif (_REDUCED if kind is _REDUCED else kind) != self.kind[key]:
                raise Unsplittable(f"{_name(node)} changed its kind between sub-blocks")
            if kind is _REDUCED:
                done = self.reduced.get(key)
                self.reduced[key] = out if done is None else self.combine[key](done, out)
            else:
                widest = max(widest, _row_bytes(out, kind))
                views[key] = out
                if key in self.exports:
                    self._gather(key, out, kind, lo, hi)
            _release(deps, readers, views, self.whole)
        if first:  # (the row steps' readers, for the next sub-blocks)
            self.readers = _readers(self.inner, self.row_steps)
        return widest

    def _gather(self, key: Hashable, out: Any, axis: int, lo: int, hi: int) -> None:
        """A per-datum export's rows ``lo:hi`` into its whole value."""
        out = np.asarray(out)
        whole = self.gathered.get(key)
        if whole is None:
            shape = list(out.shape)
            shape[axis] = self.rows
            whole = self.gathered[key] = np.empty(shape, out.dtype)
        whole[(slice(None),) * axis + (slice(lo, hi),)] = out


def _readers(inner: Mapping[Hashable, Any], steps: list[Hashable]) -> dict[Hashable, int]:
    """How many of ``steps`` read each key."""
    out: dict[Hashable, int] = {}
    for key in steps:
        for d in inner[key].dependencies:
            out[d] = out.get(d, 0) + 1
    return out


def _release(deps: Any, readers: dict[Hashable, int], views: dict[Hashable, Any],
             whole: Mapping[Hashable, Any]) -> None:
    """A step has read ``deps``: a sub-block's value freed after its last reader."""
    for d in deps:
        if d in readers:
            readers[d] -= 1
            if not readers[d] and d in views and d not in whole:
                del views[d]


def _row_axis(value: Any, rows: int) -> int | None:
    """The row axis of a value computed on the whole chunk: its one axis of length
    ``rows``; None (global) for none; Unsplittable for several, or for a container
    holding an array with an axis of that length (rows that could not be followed)."""
    if isinstance(value, list | tuple | dict):
        items = value.values() if isinstance(value, dict) else value
        if any(_row_axis(v, rows) is not None for v in items):
            raise Unsplittable("a container of per-datum arrays")
        return None
    at = [i for i, n in enumerate(np.shape(value)) if n == rows] \
        if isinstance(value, np.ndarray | np.generic) else []
    if len(at) > 1:
        raise Unsplittable(f"a value of shape {np.shape(value)} has several axes of the "
                           f"chunk's length {rows}")
    return at[0] if at else None


def _row_bytes(value: Any, axis: int) -> int:
    """The bytes of one row of a per-datum array."""
    n = np.shape(value)[axis]
    return int(getattr(value, "nbytes", 0) // n) if n else 0


def _name(node: Any) -> str:
    """The name of a task's function (out of a ``functools.partial``)."""
    func = _unwrap(getattr(node, "func", node))[0]
    return getattr(func, "__name__", None) or type(func).__name__


def _unwrap(func: Any) -> tuple[Any, dict[str, Any]]:
    """A function and its keyword arguments, out of a ``functools.partial``."""
    if isinstance(func, functools.partial) and not func.args:
        return func.func, dict(func.keywords)
    return func, {}


def _combining(node: Any) -> Any:
    """The ufunc combining two partial results of the plate reduction ``node``."""
    func, _ = _unwrap(node.func)
    if func in _REDUCTIONS:
        return _REDUCTIONS[func]
    return np.add  # (a contraction over the rows: its partial products add)


def _evaluated(arg: Any, values: Mapping[Hashable, Any], kinds: Mapping[Hashable, Any]
               ) -> tuple[Any, Any]:
    """A task argument's value and kind (None global, an int the row axis of a
    per-datum array, a list of kinds for a list); Unsplittable for a nested task that
    computes from a per-datum value (its result's rows could not be told)."""
    from dask._task_spec import Alias, DataNode, List, Task, TaskRef, _identity_cast
    if isinstance(arg, TaskRef | Alias):
        key = arg.key if isinstance(arg, TaskRef) else arg.target
        return values[key], kinds.get(key, _GLOBAL)
    if isinstance(arg, DataNode):
        return arg.value, _GLOBAL
    if isinstance(arg, List) or (isinstance(arg, Task) and arg.func is _identity_cast):
        pairs = [_evaluated(a, values, kinds) for a in arg.args]
        return [v for v, _ in pairs], [k for _, k in pairs]
    if isinstance(arg, Task):
        if any(kinds.get(d, _GLOBAL) is not _GLOBAL for d in arg.dependencies):
            raise Unsplittable(f"a nested {_name(arg)} reads a per-datum value")
        return arg({d: values[d] for d in arg.dependencies}), _GLOBAL
    if isinstance(arg, list | tuple) and any(isinstance(a, Task | TaskRef) for a in arg):
        raise Unsplittable("a task's argument nests tasks in a plain container")
    return arg, _GLOBAL


def _row_step(node: Any, values: Mapping[Hashable, Any], kinds: Mapping[Hashable, Any],
              rows: int) -> tuple[Any, Any]:
    """Run ``node`` on a sub-block of ``rows`` rows: its value and kind (the row axis of
    a per-datum result, or ``_REDUCED`` for a plate reduction's partial result);
    Unsplittable where the step is not known to be row-wise (the module doc)."""
    from factorflow.distributions import base
    if not hasattr(node, "func"):
        raise Unsplittable(f"a {type(node).__name__} reads a per-datum value")
    pairs = [_evaluated(a, values, kinds) for a in node.args]
    args, arg_kinds = [v for v, _ in pairs], [k for _, k in pairs]
    kw_pairs = {k: _evaluated(a, values, kinds) for k, a in node.kwargs.items()}
    if any(k is not _GLOBAL for _, k in kw_pairs.values()):
        raise Unsplittable(f"{_name(node)} has a per-datum keyword argument")
    func, kwargs = _unwrap(node.func)
    kwargs.update((k, v) for k, (v, _) in kw_pairs.items())

    if isinstance(func, np.ufunc) or func in _ELEMENTWISE or func is base.exp_flushed:
        if func is base.exp_flushed:
            if kwargs.get("out") is not None or len(args) != 1:
                raise Unsplittable("exp_flushed writing into out=")
            kwargs = {}
        if set(kwargs) - {"dtype", "casting"}:
            raise Unsplittable(f"{_name(node)} with keywords {sorted(kwargs)}")
        axis = _lined_up(args, arg_kinds)
        return _checked(func(*args, **kwargs), axis, rows, node), axis
    from dask.array.chunk import getitem
    if func is operator.getitem or func is getitem:
        return _getitem(func, args, arg_kinds, rows, node)
    from dask.utils import methodcaller
    if isinstance(func, methodcaller) and func.method == "reshape":
        return _reshape(args, arg_kinds, rows, node, kwargs)
    from dask.array.core import concatenate_shaped
    if func is concatenate_shaped:
        return _concatenate(args, arg_kinds, rows, node)
    from dask.array.routines import _matmul
    if func is _matmul:
        return _matmul_step(func, args, arg_kinds, rows, node)
    if func is base.log_normalize:
        (x,), (axis,) = args, arg_kinds
        if len(args) != 1 or not isinstance(axis, int) or np.ndim(x) < 2 \
                or axis == np.ndim(x) - 1:
            raise Unsplittable("log_normalize over the rows")
        return _checked(func(x), axis, rows, node), axis
    if func in _REDUCTIONS:
        return _reduction(func, args, arg_kinds, kwargs, rows, node)
    from toolz.functoolz import Compose
    if isinstance(func, Compose) and not kwargs:
        return _compose(func, args, arg_kinds, rows, node)
    raise Unsplittable(f"{_name(node)} is not known to be row-wise")


def _checked(out: Any, axis: int, rows: int, node: Any) -> Any:
    """``out`` if its row axis ``axis`` has the sub-block's ``rows``."""
    shape = np.shape(out)
    if not isinstance(out, np.ndarray | np.generic) or axis >= len(shape) \
            or shape[axis] != rows:
        raise Unsplittable(f"{_name(node)} gave shape {shape}, not {rows} rows on axis "
                           f"{axis}")
    return out


def _lined_up(args: list[Any], kinds: list[Any]) -> int:
    """The row axis of an elementwise step's result: its per-datum inputs' row axes must
    meet under broadcasting, and its other inputs have length 1 (or no axis) there."""
    if any(isinstance(k, list) or k is _REDUCED for k in kinds):
        raise Unsplittable("an elementwise step of a list or a plate reduction")
    ndim = max((np.ndim(a) for a in args), default=0)
    axes = {k + ndim - np.ndim(a) for a, k in zip(args, kinds, strict=True)
            if isinstance(k, int)}
    if len(axes) != 1:
        raise Unsplittable(f"an elementwise step whose rows do not line up ({axes})")
    (axis,) = axes
    for a, k in zip(args, kinds, strict=True):
        at = axis - (ndim - np.ndim(a))
        if k is _GLOBAL and at >= 0 and np.shape(a)[at] != 1:
            raise Unsplittable(f"a global value of shape {np.shape(a)} meets the rows")
    return axis


def _getitem(func: Any, args: list[Any], kinds: list[Any], rows: int, node: Any
             ) -> tuple[Any, Any]:
    """``x[index]`` (``operator.getitem``, or Dask's, which copies a small selection)
    keeping the rows whole: the rows' new axis."""
    if len(args) != 2 or not isinstance(kinds[0], int) or kinds[1] is not _GLOBAL:
        raise Unsplittable("indexing by a per-datum value, or of a list")
    x, index = args
    index = index if isinstance(index, tuple) else (index,)
    at, out_at, axis = 0, 0, None
    for item in index:
        if item is None:
            out_at += 1
        elif isinstance(item, slice):
            if at == kinds[0]:
                if item != slice(None):
                    raise Unsplittable("indexing that cuts the rows")
                axis = out_at
            at, out_at = at + 1, out_at + 1
        elif isinstance(item, int | np.integer) and not isinstance(item, bool):
            if at == kinds[0]:
                raise Unsplittable("indexing that takes one row")
            at += 1
        else:
            raise Unsplittable(f"indexing by {type(item).__name__}")
    if axis is None:
        axis = out_at + kinds[0] - at
    return _checked(func(x, index), axis, rows, node), axis


def _reshape(args: list[Any], kinds: list[Any], rows: int, node: Any,
             kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """``x.reshape(shape)`` with the rows leading both: the shape's rows the
    sub-block's."""
    if len(args) != 2 or kinds[0] != 0 or kwargs:
        raise Unsplittable("a reshape whose rows do not lead")
    x, shape = args
    shape = tuple(shape) if isinstance(shape, tuple | list) else (shape,)
    if not shape or shape[0] < 0 or any(not isinstance(n, int | np.integer) for n in shape) \
            or int(np.prod(shape[1:])) != int(np.prod(np.shape(x)[1:])):
        raise Unsplittable(f"a reshape to {shape} that moves the rows")
    return _checked(x.reshape((rows,) + shape[1:]), 0, rows, node), 0


def _concatenate(args: list[Any], kinds: list[Any], rows: int, node: Any
                 ) -> tuple[Any, Any]:
    """Dask's ``concatenate_shaped(blocks, grid)`` of per-datum blocks, one block along
    the rows."""
    from dask.array.core import concatenate_shaped
    blocks, grid = args
    axes = set(kinds[0]) if isinstance(kinds[0], list) else {None}
    if len(args) != 2 or kinds[1] is not _GLOBAL or len(axes) != 1 \
            or not isinstance(axis := axes.pop(), int) or axis >= len(grid) \
            or grid[axis] != 1 or len({np.ndim(b) for b in blocks}) != 1:
        raise Unsplittable("a concatenation along the rows, or of global blocks")
    return _checked(concatenate_shaped(blocks, grid), axis, rows, node), axis


def _matmul_step(func: Any, args: list[Any], kinds: list[Any], rows: int, node: Any
                 ) -> tuple[Any, Any]:
    """Dask's blockwise ``_matmul(a, b)`` (a @ b, with an axis of 1 put back before the
    last): rows of a per-datum ``a`` times a global matrix ``b`` (row-wise), or a
    contraction over the rows of two per-datum matrices (a plate reduction, whose
    partial products add)."""
    if len(args) != 2 or any(isinstance(k, list) or k is _REDUCED for k in kinds):
        raise Unsplittable("a matmul of lists")
    (a, b), (ka, kb) = args, kinds
    na, nb = np.ndim(a), np.ndim(b)
    if isinstance(ka, int) and kb is _GLOBAL and nb == 2 and na >= 2 and ka <= na - 2:
        return _checked(func(a, b), ka, rows, node), ka
    if isinstance(ka, int) and isinstance(kb, int) and na == nb and na >= 3 \
            and ka == kb and ka < na - 2:
        return _checked(func(a, b), ka, rows, node), ka
    if na == nb == 2 and ka == 1 and kb == 0:
        return func(a, b), _REDUCED
    raise Unsplittable(f"a matmul of shapes {np.shape(a)}, {np.shape(b)} with rows on "
                       f"axes {ka}, {kb}")


def _reduction(func: Any, args: list[Any], kinds: list[Any], kwargs: dict[str, Any],
               rows: int, node: Any) -> tuple[Any, Any]:
    """A reduction of a per-datum array: along other axes row-wise, along the rows a
    plate reduction."""
    if len(args) != 1 or not isinstance(kinds[0], int) \
            or set(kwargs) - {"axis", "keepdims", "dtype"}:
        raise Unsplittable(f"{_name(node)} of a list, or with keywords {sorted(kwargs)}")
    (x,), (axis,) = args, kinds
    ndim = np.ndim(x)
    reduced = kwargs.get("axis")
    reduced = range(ndim) if reduced is None else (
        reduced if isinstance(reduced, tuple | list) else (reduced,))
    reduced = {int(a) % ndim for a in reduced} if ndim else set()
    out = func(x, **kwargs)
    if axis in reduced:
        return out, _REDUCED
    if not kwargs.get("keepdims", False):
        axis -= sum(1 for a in reduced if a < axis)
    return _checked(out, axis, rows, node), axis


def _compose(func: Any, args: list[Any], kinds: list[Any], rows: int, node: Any
             ) -> tuple[Any, Any]:
    """Dask's combining step of a reduction inside one chunk: ``Compose(reduce,
    partial(_concatenate2, axes))`` of a list of one block, the reduction of that block
    (``_reduction``)."""
    from dask.array.core import _concatenate2
    first, later = _unwrap(func.first), func.funcs
    if len(args) != 1 or not isinstance(args[0], list) or len(args[0]) != 1 \
            or first[0] is not _concatenate2 or len(later) != 1:
        raise Unsplittable("a composed function other than a one-block reduction")
    reduce, kwargs = _unwrap(later[0])
    if reduce not in _REDUCTIONS:
        raise Unsplittable(f"a composed {getattr(reduce, '__name__', reduce)}")
    return _reduction(reduce, [args[0][0]], [kinds[0][0]], kwargs, rows, node)


__all__ = ["run", "SUB_BLOCK_BYTES", "FIRST_ROWS", "STATS", "Unsplittable"]
