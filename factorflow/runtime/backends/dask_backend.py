"""The Dask backend: the NumPy program run over chunked data on a ``dask.distributed``
cluster.

``model.compile(algorithm, backend="dask")`` gives a ``DaskCompiledModel``: its source is
the NumPy program's, bound to the Dask copies of the kernels (``dask_namespace``), so
both backends compute the same updates.  ``run(..., client=None, chunks=None)``:

- the *chunked plate* is the largest plate that leads an observed variable's axes; every
  observed or constant array whose first axis is that plate becomes a ``dask.array``
  chunked along it (``chunks`` rows per chunk: an int, or a tuple of chunk lengths that
  sum to the plate's size; by default ``default_chunk_rows`` of the program's widest
  per-datum row, 26,214 rows for a mixture of K = 10), every other axis whole.  NumPy data
  is sent to the workers once, at the start; a Dask array given in ``data`` is used as
  it is, with its own chunks unless ``chunks`` is given (then rechunked along the plate
  as asked), checked chunk by chunk on the cluster (``checks.lazy_data``; one read
  lazily, by ``da.from_zarr`` or ``map_blocks``, is read chunk by chunk at each pass
  and never held whole anywhere, the checks included; ``persist()`` it to keep it in
  the workers' memory);
- each statement over that plate is then a lazy chunked Dask array, and each message
  that sums over it (to a K-sized variable) is computed where its operator makes it
  (``_eager``): one pass over the data, chunk by chunk, then a tree reduction of the
  K-sized partial results, into a NumPy array here.  Per-datum messages are never
  stored: each such computation recomputes them from the data chunk and the NumPy
  globals, the work on each chunk fused into one task (``dask_fusion``), so a worker
  holds one chunk's intermediates at a time, not the (N, K) per-datum state, and a NumPy
  array over the plate enters the graph chunked like the data
  (``_repeats_stay_small``); a per-datum message whose graph would grow from sweep to sweep (one
  that reads a per-datum message of the previous sweep) is the exception, persisted
  (``_cut_chains``).  A per-datum posterior's properness check rides along with the
  next computation (``dask_namespace.materialise``);
- the run goes to ``client``: a ``distributed.Client``, a scheduler address
  (``"tcp://host:8786"``), or None for a ``LocalCluster`` of 2 worker processes started
  at the first call and kept for the process.  Every computation's graph is fused in
  this process before it is sent (``dask_fusion.compute``), so a scheduler in another
  process runs the same one task per chunk as the ``LocalCluster``'s in-process one.

The posteriors come back as NumPy distributions (the per-datum ones gathered once, at
the end, chunk by chunk), or with ``gather=False`` (or the names to gather) the
per-datum ones left as lazy Dask arrays with the run's fused graph (``run``).  The
bound, convergence test, warnings and ``Result`` are the NumPy backend's.
Refused with ``ff.BackendError``: checkpoints (the state lives on the workers),
``save_module``, factors defined in the process, data that float64 would round, and a
model whose operators use an array operation Dask arrays lack (in-place writes, as the
vector Gaussian operators' ``out=``; stacked ``linalg.inv``; ``bincount`` with weights):
the error names it.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

import factorflow.distributions as dist
from factorflow.codegen.names import display
from factorflow.errors import BackendError, DataError, ModelError
from factorflow.model import checks
from factorflow.runtime.backends import dask_fusion, dask_namespace
from factorflow.runtime.backends.dask_monitor import ChunkedChanges
from factorflow.runtime.backends.dask_namespace import (
    _PENDING,
    _set,
    compute_now,
    flush_checks,
    materialise,
    namespace,
)
from factorflow.runtime.backends.jax_namespace import load_program
from factorflow.runtime.compiled import CompiledModel, _Monitor, compile_model, watched
from factorflow.runtime.svi import data_plate

#: the elements of one chunk's widest per-datum array when ``chunks`` is not given
#: (``default_chunk_rows``): 2**18 float64, 2 MiB, so that the few dozen such arrays a
#: chunk's task makes stay small beside a worker's share of the data
CHUNK_ELEMENTS = 2**18


#: the chunks' partial results a step of a tree reduction over the plate combines during
#: a run (Dask's default is 4: a reduction over 382 chunks was 127 small tasks, and a
#: pass's few reductions (the bound's terms, the checks) three tasks per chunk beside
#: the chunk's own; with 32, 13): the partial results are K-sized
SPLIT_EVERY = 32


def default_chunk_rows(width: int) -> int:
    """Rows per chunk when ``chunks`` is not given, for per-datum arrays of ``width``
    values a row (a mixture's K): ``CHUNK_ELEMENTS // width``, at least 1."""
    return max(1, CHUNK_ELEMENTS // max(1, int(width)))

_LOCK = threading.Lock()
_CLIENTS: dict[Any, Any] = {}


def _distributed() -> Any:
    """``distributed``, imported on first use (it is an optional extra). Importing it
    installs tblib's pickling of every exception class (with its traceback and
    context); factorflow's errors pickle either way (they keep no link to the
    exceptions of the libraries they report, as ``ParseError`` does for lark's)."""
    import distributed

    return distributed


#: the Dask configuration of the workers of the backend's own ``LocalCluster``
#: (``default_client``; a cluster of the caller's is used as it is).  Dask's defaults
#: keep a worker's diagnostics growing with the tasks it runs and with the time it
#: lives: its statistical profiler (a call tree every second for 1,000 s, twice, and
#: the source lines of every frame it sampled, about 2.5 MB), its developers' logs of
#: the last 1,000 events, transitions, messages and transfers (about 3 MB at 1,000
#: tasks), and a system-monitor sample every 0.5 s for an hour: together 9 of the 10 MB
#: a worker held after 4 sweeps over 10⁶ points in 100 chunks (``tracemalloc``,
#: cleared one by one).  Here the profiler is off (the dashboard's profile pages stay
#: empty), the logs keep 100 entries and the monitor 10 minutes.
#: (Dotted keys: the nanny merges them over this process's configuration, one level
#: deep, and each worker sets them.)
WORKER_CONFIG: dict[str, Any] = {"distributed.worker.profile.enabled": False,
                                 "distributed.admin.low-level-log-length": 100,
                                 "distributed.admin.system-monitor.log-length": 1200}

#: the entries of ``dask.utils.key_split``'s cache a worker of the backend's own
#: ``LocalCluster`` keeps (``dask_workers.BoundedKeyCache``; None: Dask's 100,000)
KEY_CACHE_LIMIT: int | None = 1000


def default_client() -> Any:
    """The process's own ``LocalCluster`` client (``local_client``), started at the
    first call and kept for the process."""
    with _LOCK:
        if None not in _CLIENTS:
            client = _CLIENTS[None] = local_client()
            atexit.register(client.cluster.close)  # (last in, first out: the client first)
            atexit.register(client.close)
        return _CLIENTS[None]


def local_client() -> Any:
    """A new ``LocalCluster`` as the backend starts its own, and its client: 2 worker
    processes of one thread each, their diagnostics and ``key_split``'s cache bounded
    (``WORKER_CONFIG``, ``KEY_CACHE_LIMIT``).  The caller closes it
    (``client.close(); client.cluster.close()``); ``default_client`` keeps one."""
    distributed = _distributed()
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=":0", config=WORKER_CONFIG)
    client = distributed.Client(cluster, set_as_default=False)
    if KEY_CACHE_LIMIT is not None:  # (each worker's, restarted ones too)
        from factorflow.runtime.backends.dask_workers import BoundedKeyCache
        client.register_plugin(BoundedKeyCache(KEY_CACHE_LIMIT))
    return client


def resolve_client(client: Any) -> Any:
    """``client`` as a ``distributed.Client``: itself, one connected to a scheduler
    address (kept per address), or ``default_client()`` for None."""
    Client = _distributed().Client  # noqa: N806
    if client is None:
        return default_client()
    if isinstance(client, Client):
        return client
    if isinstance(client, str):
        with _LOCK:
            if client not in _CLIENTS:
                _CLIENTS[client] = Client(client, set_as_default=False)
            return _CLIENTS[client]
    raise BackendError(f"client must be a distributed.Client, a scheduler address or "
                       f"None, got {type(client).__name__}.")


def plate_chunks(chunks: Any, size: int, plate: str) -> tuple[int, ...]:
    """``chunks`` (rows per chunk, or the chunk lengths) as the chunk lengths along a
    plate of ``size`` (``plate``: its identifier); DataError naming the plate as the model
    does where they do not tile it."""
    if chunks is None:
        chunks = default_chunk_rows(1)
    if isinstance(chunks, int | np.integer) and not isinstance(chunks, bool):
        if chunks < 1:
            raise DataError(f"chunks must be a positive number of rows, got {chunks}.")
        full, rest = divmod(size, int(chunks))
        return (int(chunks),) * full + ((rest,) if rest else ()) or (0,)
    try:
        lengths = tuple(int(c) for c in chunks)
    except (TypeError, ValueError):
        raise DataError(f"chunks must be a number of rows or a tuple of chunk lengths, "
                        f"got {chunks!r}.") from None
    if any(c < 1 for c in lengths) or sum(lengths) != size:
        raise DataError(f"chunks {lengths} do not tile the plate {display(plate)!r} of size "
                        f"{size}: the chunk lengths must be positive and sum to it.")
    return lengths


def check_dtype(name: str, arr: np.ndarray) -> np.ndarray:
    """``arr`` as the Dask backend computes it: float64 for floats (float32 widened
    exactly); DataError naming ``name`` for a dtype float64 would round (extended
    precision, complex), as every backend refuses it (``checks.check_dtype``)."""
    checks.check_dtype(arr.dtype, name)
    return arr.astype(np.float64) if arr.dtype.kind == "f" else arr


def check_dask_chunks(name: str, arr: Any, plate: str | None) -> Any:
    """A Dask array given as data: chunked along its first axis only, and only where
    that axis is the chunked plate; DataError otherwise."""
    if plate is None or any(len(c) > 1 for c in arr.chunks[1:]):
        raise DataError(f"{name}: a Dask array chunked as {arr.chunks}, but the Dask "
                        f"backend chunks data along its plate "
                        f"{'axis 0' if plate is None else repr(display(plate))} only "
                        f"({'it has no plate' if plate is None else 'as axis 0'}): "
                        "rechunk it so every other axis is one chunk "
                        "(arr.rechunk({0: n, 1: -1, ...})).")
    return arr


def _to_numpy(value: Any, client: Any = None, gather: bool = True) -> Any:
    """A Dask-copy distribution (Dask or NumPy parameters) as factorflow's own class with
    NumPy arrays; a chunked parameter gathered chunk by chunk (``gather_chunks``), or
    with ``gather=False`` left a lazy Dask array whose graph is the run's, fused chunk
    by chunk (``dask_fusion.optimised``: computed later on any scheduler, it is one pass
    over the data, one task per chunk)."""
    import dask.array as da
    cls = getattr(dist, type(value).__name__)
    obj = cls.__new__(cls)
    state = value.__getstate__()
    names = list(state)
    computed = dask_fusion.compute(*(state[n] for n in names if n != "eta"))
    for name, v in zip([n for n in names if n != "eta"], computed, strict=True):
        object.__setattr__(obj, name, v)
    if "eta" in state:
        eta = list(state["eta"])
        chunked = [i for i, e in enumerate(eta) if isinstance(e, da.Array) and e.npartitions > 1]
        rest = [i for i in range(len(eta)) if i not in chunked]
        fetched = (gather_chunks(eta[i], client) for i in chunked) if gather else \
            dask_fusion.optimised(*(eta[i] for i in chunked))
        for i, e in zip(chunked, fetched, strict=True):
            eta[i] = e
        for i, e in zip(rest, dask_fusion.compute(*(eta[i] for i in rest)), strict=True):
            eta[i] = np.asarray(e, float)
        object.__setattr__(obj, "eta", tuple(eta))
    return obj


#: the chunks of a per-datum posterior ``gather_chunks`` keeps in flight per worker
#: (each, once computed, held by its worker until this process has copied it in): with
#: 2, a worker held two chunks' results (2 MB each at the default chunks of a mixture
#: of K = 10) beside the one it computed, its peak memory over a run (the run's own, at
#: 10⁶ points: 8 / 8 MB per worker with 2, 4 / 6 with 1, ``benchmarks/bench_dask.py``)
GATHER_PER_WORKER = 1


def gather_chunks(arr: Any, client: Any = None) -> np.ndarray:
    """A chunked Dask array (chunked along axis 0) as a NumPy array here, a few chunks at a
    time: each chunk is submitted when an earlier one has been copied in (at most
    ``GATHER_PER_WORKER`` per worker in flight) and released on its worker once copied, so
    that a worker never holds more than those few (``dask.compute`` of the whole array would
    keep every chunk on the workers until all were done, and computing all at once lets them
    pile up there faster than this process copies them in). The array's graph is optimised
    once (fused chunk by chunk during a run) and each chunk's submission carries only the
    tasks that chunk needs (``_culled``): a chunk's ``to_delayed`` would carry the whole
    array's graph, sent and unpacked once per chunk, a cost growing as the square of the
    number of chunks."""
    import dask
    from dask.core import flatten
    from dask.delayed import Delayed
    if any(len(c) > 1 for c in arr.chunks[1:]):
        arr = arr.rechunk({axis: -1 for axis in range(1, arr.ndim)})
    out = np.empty(arr.shape, float)
    keys = list(flatten(arr.__dask_keys__()))
    graph = _task_graph(arr.__dask_optimize__(arr.__dask_graph__(), keys))
    blocks = [(i, Delayed(key, _culled(graph, key))) for i, key in enumerate(keys)]
    bounds = np.cumsum((0,) + arr.chunks[0])
    if client is None or not hasattr(client, "compute"):
        for i, block in blocks:
            out[bounds[i]:bounds[i + 1]] = dask.compute(block, optimize_graph=False)[0]
        return out
    from distributed import as_completed
    window = GATHER_PER_WORKER * max(1, len(client.scheduler_info().get("workers", ())))
    done = as_completed(loop=client.loop)  # (the run's client, not a default one)
    where: dict[Any, int] = {}

    def submit() -> None:
        if blocks:
            i, block = blocks.pop(0)
            future = client.compute(block, optimize_graph=False)
            where[future.key] = i
            done.add(future)
    for _ in range(window):
        submit()
    for future in done:
        i = where.pop(future.key)
        out[bounds[i]:bounds[i + 1]] = future.result()
        future.release()
        submit()
    return out


def _task_graph(dsk: Any) -> dict[Any, Any]:
    """An optimised graph (a ``HighLevelGraph`` or a dict, legacy tuples or task-spec
    nodes) as a dict of task-spec nodes."""
    from dask._task_spec import convert_legacy_graph
    from dask.utils import ensure_dict
    return convert_legacy_graph(ensure_dict(dsk))


def _culled(graph: dict[Any, Any], key: Any) -> dict[Any, Any]:
    """The tasks of ``graph`` that ``key`` needs, itself included."""
    out: dict[Any, Any] = {}
    stack = [key]
    while stack:
        k = stack.pop()
        if k in out or k not in graph:
            continue
        out[k] = graph[k]
        stack.extend(graph[k].dependencies)
    return out


@dataclass(repr=False)
class DaskCompiledModel(CompiledModel):
    """A model compiled for one algorithm, run on a Dask cluster (see the module doc)."""

    backend = "dask"

    def __post_init__(self) -> None:
        ns = namespace()
        self._program = load_program(ns, self, "Dask")
        names = self._program.__globals__
        for ident, (kind, _) in self.generated.symbols.items():
            if kind == "operator":
                names[ident] = _eager(names[ident])
        self._infer = self._run_dask
        self._client: Any = None
        self._chunks: Any = None
        self._chunks_given = False
        self._given: dict[str, Any] = {}
        self._gather: Any = True

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _recompile_dask, (self.model, self.algorithm,
                                 tuple(sorted(self.user_initialized)),
                                 self.enter_whole_arrays)

    def __repr__(self) -> str:
        return super().__repr__().replace("CompiledModel(", "DaskCompiledModel(", 1)

    def save_module(self, path: Any, data: Any = None, init: Any = None) -> Any:
        raise BackendError("save_module writes the NumPy program; compile with "
                           "backend='numpy' to save a standalone module.")

    def chunked_plate(self) -> str | None:
        """The identifier of the plate the data is chunked along: the largest plate that
        leads an observed variable's axes (``svi.data_plate``; None: no observed
        variable has a plate)."""
        return data_plate(self)

    def run(self, iterations: int | None = None, data: dict[str, Any] | None = None,
            init: dict[str, Any] | None = None, on_iteration: Any = None, *,
            client: Any = None, chunks: Any = None, gather: Any = True,
            **options: Any) -> Any:
        """As ``CompiledModel.run``, on the Dask cluster ``client`` (None: a local one of
        2 workers) with the data chunked along its plate, ``chunks`` rows per chunk (or
        the chunk lengths); see the module docstring.  ``data`` may hold Dask arrays
        chunked along the plate only: their own chunks are kept, unless ``chunks`` is
        given, which rechunks them along the plate.  Checkpoints raise
        ``ff.BackendError``.

        ``gather``: which per-datum posteriors (those whose parameters are chunked along
        the plate) come back as NumPy arrays, gathered chunk by chunk at the end: True
        (the default: every posterior is NumPy, as on the other backends), False (none),
        or a collection of variable names.  A posterior not gathered is factorflow's own
        distribution whose natural parameters (``.eta``) are lazy Dask arrays: nothing
        of it is computed or held anywhere until asked for (``client.compute(...)``,
        ``dask.compute(..., scheduler=client)``, ``da.to_zarr``), and then it is one
        pass over the data, one task per chunk (the run's fused graph); NumPy data sent
        to the cluster stays there while such an array refers to it."""
        for name in ("checkpoint", "every", "resume"):
            if options.get(name) is not None:
                raise BackendError(f"{name}= (checkpoints) writes every message to one "
                                   "file; the Dask backend keeps the per-datum messages on "
                                   "the workers: use backend='numpy'.")
        self._gather = self._gathered(gather)
        self._prepare(data, client, chunks)
        return super().run(iterations, data, init, on_iteration, **options)

    def _gathered(self, gather: Any) -> Any:
        """``gather`` checked: a bool, or the set of names it holds, each a variable of
        the model (``ff.ModelError`` naming one that is not)."""
        if isinstance(gather, bool | np.bool_):
            return bool(gather)
        names = {gather} if isinstance(gather, str) else gather
        try:
            names = set(names)
        except TypeError:
            raise ModelError(f"gather must be True, False or variable names, got "
                             f"{gather!r}.") from None
        known = {d.label for d in self.compilation.final.decls}
        unknown = sorted(n for n in names if n not in known)
        if unknown:
            raise ModelError(f"gather names {unknown[0]!r}, which is no variable of "
                             f"{self.model.name}.")
        return names

    def _prepare(self, data: dict[str, Any] | None, client: Any, chunks: Any) -> None:
        """Note the run's cluster, chunks and the Dask arrays among ``data`` (checked:
        chunked along the plate only)."""
        import dask.array as da
        plate = self.chunked_plate()
        self._given = {k: check_dask_chunks(f"data[{k!r}]", v, plate)
                       for k, v in (data or {}).items() if isinstance(v, da.Array)}
        self._client = resolve_client(client)
        self._chunks = default_chunk_rows(self.row_width()) if chunks is None else chunks
        self._chunks_given = chunks is not None

    def _data(self, data: dict[str, Any] | None) -> dict[str, Any]:
        """``CompiledModel._data`` (the run's values, checked) with the Dask arrays among
        them checked where they are, on the run's cluster, never read whole into this
        process (``checks.lazy_data``): their dtype and shape from their metadata, their
        values one boolean per chunk."""
        import dask
        with checks.lazy_data(), dask.config.set(scheduler=self._client):
            return super()._data(data)

    def row_width(self) -> int:
        """The widest row of a per-datum array of the program: the largest product, over
        the variables led by the chunked plate, of their other plates' sizes and their
        categories or dimension (a mixture's K; 1 when there is no such variable)."""
        plate = self.chunked_plate()
        sizes = dict(self.compilation.final.ranges)
        return max((int(np.prod([sizes[p] for p in d.plates[1:]])) * (d.event or 1)
                    for d in self.compilation.final.decls
                    if d.plates and d.plates[0] == plate), default=1)

    def _chunked_data(self, values: dict[str, Any]) -> dict[str, Any]:
        """The program's data: the arrays led by the chunked plate as Dask arrays."""
        import dask
        import dask.array as da
        plate = self.chunked_plate()
        sizes = dict(self.compilation.final.ranges)
        given = self._given
        scatter: list[str] = []  # the NumPy arrays chunked here
        lengths = None if plate is None else plate_chunks(self._chunks, sizes[plate], plate)
        out = {}
        for d in self.compilation.final.decls:
            if d.name not in values or values[d.name] is None:
                continue
            value = given.get(d.attr("data"), values[d.name])
            if isinstance(value, da.Array):  # (its dtype checked before any cast)
                value = check_dtype(d.label, value)
                if (self._chunks_given and lengths is not None and value.ndim
                        and value.shape[0] == sizes[plate] and value.chunks[0] != lengths):
                    value = value.rechunk({0: lengths})  # (chunks= asked for: as asked)
                out[d.name] = value
                continue
            arr = check_dtype(d.label, np.asarray(value))
            if d.plates and d.plates[0] == plate and arr.ndim and lengths is not None:
                arr = da.from_array(arr, chunks=(lengths,) + arr.shape[1:])
                scatter.append(d.name)
            out[d.name] = arr
        # NumPy data sent to the workers once, chunk by chunk: every computation's graph
        # then names the stored chunks instead of carrying the data from this process
        stored = dask.persist(*(out[name] for name in scatter))
        return {**values, **out, **dict(zip(scatter, stored, strict=True))}

    def _run_dask(self, values: dict[str, Any], sizes: dict[str, int],
                  init: dict[str, Any], iterations: int, hook: Any, damping: Any,
                  saved: Any) -> tuple[dict[str, Any], float]:
        """The generated program over the chunked data, every computation on the
        client's cluster; after each sweep its K-sized messages are computed here, its
        per-datum ones left lazy (``_cut_chains``), before the monitor reads them."""
        import dask
        import dask.array as da
        ns = namespace()
        start = {k: _copy_of(ns, v) for k, v in init.items()}
        lazy: dict[str, int] = {}  # the per-datum messages the last sweep left lazy
        # the monitor's changes of the per-datum posteriors reduced on the workers
        # (``dask_monitor``), not gathered here each sweep
        changes = ChunkedChanges(hook) if isinstance(hook, _Monitor) else None
        if changes is not None:
            hook._changes = changes  # (the instance's: this run's monitor only)

        def each(iteration: int, posteriors: Any, evidence: Any, state: Any,
                 extra: Any = None) -> Any:
            nonlocal lazy
            messages = list({id(m): m for m in state()["messages"].values()}.values())
            materialise(*messages, checks=False)  # (the K-sized ones left, if any)
            lazy = _cut_chains(messages, lazy)
            if hook is None:
                return False
            ahead = dask_namespace.ahead_sums(messages)
            more = (changes.prepare(watched(hook.algorithm, posteriors, extra))
                    if changes is not None and changes.watching() else [])
            bound = None if evidence is None else _with_checks(
                evidence, ahead, more, changes.receive if changes is not None else None)
            if more:  # the changes now, with the bound where the monitor reads one
                if bound is not None and hook.tracing:
                    bound()
                else:
                    changes.receive(compute_now(*more))
            return hook(iteration, posteriors, bound, state, extra)

        del _PENDING[:]
        plate = self.chunked_plate()
        with dask.config.set(scheduler=self._client, array_optimize=dask_fusion.optimize,
                             split_every=SPLIT_EVERY), _repeats_stay_small():
            try:
                data = self._chunked_data(values)
                if plate is not None:  # (as the data is chunked: given, or made here)
                    led = [v for v in data.values() if isinstance(v, da.Array)
                           and v.ndim and v.shape[0] == sizes[plate]]
                    _PLATE[:] = [(sizes[plate], led[0].chunks[0] if led else plate_chunks(
                        self._chunks, sizes[plate], plate))]
                    for v in led:  # (each pass over the data: one task per chunk)
                        if v.chunks[0] == _PLATE[0][1]:
                            dask_fusion.register(v)
                posteriors, lazy_bound = self._program(data, sizes, start, iterations,
                                                       each, damping, saved)
                # the bound as the last sweep's hook computed it (the same graph, so the
                # same name), else now with the last pending checks
                log_evidence = _BOUNDS.get(getattr(lazy_bound, "name", None) or "")
                if log_evidence is None:
                    log_evidence = float(compute_now(lazy_bound)[0])
                flush_checks()
                # gathered while the run's plate keys hold: chunk by chunk, fused
                gather = self._gather
                result = ({k: _to_numpy(v, self._client, gather is True or (
                    gather is not False and k in gather)) for k, v in posteriors.items()},
                          log_evidence)
            except ModelError:
                raise
            except (NotImplementedError, AttributeError, TypeError, ValueError) as e:
                # Dask's refusals: an in-place write (``out=``, ``x[mask] = ...``), a
                # NumPy-only method (``.tolist``), linear algebra on stacks of matrices;
                # any other error (a fault of factorflow's own) propagates as it is
                if not _refused_by_dask(e):
                    raise
                raise BackendError(
                    f"{self.model.name}: an operator of this model uses an array "
                    f"operation that chunked Dask arrays do not support "
                    f"({type(e).__name__}: {e}); use backend='numpy'.") from None
            finally:
                del _PENDING[:]
                dask_namespace._SUMS.clear()
                _BOUNDS.clear()
                _COLUMN_SUMS.clear()
                del _PLATE[:]
                dask_fusion.PLATE_KEYS.clear()
            return result


#: the chunked plate of the run in progress, [(its size, its chunk lengths)] or []
_PLATE = dask_namespace.PLATE
_COLUMN_SUMS = dask_namespace._COLUMN_SUMS


@contextlib.contextmanager
def _repeats_stay_small() -> Any:
    """While a run is in progress: a NumPy array led by the chunked plate that meets the
    data in a Dask operation enters the graph chunked like the data
    (``_chunked_like_plate``).  Dask's own conversion (``asanyarray``, ``asarray``, as
    ``stack`` and the ufuncs call it) would make it one chunk, put it into every graph
    whole and pickle it at full size (a stride-0 view of K values, as ``np.broadcast_to``
    makes of a gate's clones of q(means), pickles as the (N, K) array): sent with each
    computation, and held whole by whichever worker runs the chunk's first task."""
    import sys

    import dask.array.core as core
    originals = {name: getattr(core, name) for name in ("asanyarray", "asarray")}
    places = [(module, name) for key, module in list(sys.modules.items())
              if key.startswith("dask.array") and module is not None
              for name, fn in originals.items() if getattr(module, name, None) is fn]

    def converting(original: Any) -> Any:
        def convert(a: Any, *args: Any, **kwargs: Any) -> Any:
            if (_PLATE and isinstance(a, np.ndarray) and a.ndim
                    and a.shape[0] == _PLATE[0][0] and not args
                    and set(kwargs) <= {"dtype", "order", "allow_unknown_chunksizes"}):
                out = _chunked_like_plate(a, _PLATE[0][1])
                dtype = kwargs.get("dtype")
                return out if dtype is None or out.dtype == dtype else out.astype(dtype)
            return original(a, *args, **kwargs)
        return convert
    for module, name in places:  # (each module of dask.array that imported them)
        setattr(module, name, converting(originals[name]))
    try:
        yield
    finally:
        for module, name in places:
            setattr(module, name, originals[name])


def _chunked_like_plate(a: np.ndarray, lengths: tuple[int, ...]) -> Any:
    """``a`` (a NumPy array whose first axis is the chunked plate) as a Dask array chunked
    along that axis as the data is (``lengths``), every other axis whole.  Only its
    distinct values enter the graph: each axis it repeats along (stride 0, a broadcast
    view) is cut to length 1 and broadcast again chunk by chunk on the workers, so K
    values repeated over the plate cost K values, and a per-datum array costs its own
    chunk on the worker that reads it."""
    import dask.array as da
    small = np.ascontiguousarray(a[tuple(slice(0, 1) if stride == 0 and n > 1 else slice(None)
                                         for n, stride in zip(a.shape, a.strides, strict=True))])
    chunks = (lengths,) + a.shape[1:]
    if small.shape[0] == a.shape[0]:  # per-datum values: each chunk its own piece
        small = da.from_array(small, chunks=(lengths,) + small.shape[1:])
        dask_fusion.register(small)  # (named by its values: the same keys each sweep)
    # (a broadcast's blocks are not registered: their names change with the values each
    # sweep, and the fusion puts each into the one chunk's task that reads it anyway)
    return da.broadcast_to(small, a.shape, chunks=chunks)


def cluster_data(model: Any, data: dict[str, Any] | None, client: Any, chunks: Any
                 ) -> tuple[dict[str, Any], Any]:
    """The data of ``model``'s program as the Dask backend holds it (for SVI): checked as
    a run checks it, every array led by the data plate chunked along it on the cluster
    ``client`` (NumPy data sent once; a Dask array as it is), and a function bringing
    arrays of the cluster here (``gather(*arrays)``: their NumPy values, in one round
    trip)."""
    import dask
    compiled = compile_model(model, "vmp", (), backend="dask")
    assert isinstance(compiled, DaskCompiledModel)
    compiled._prepare(data, client, chunks)
    scheduler = compiled._client
    with dask.config.set(scheduler=scheduler):
        values = compiled._chunked_data(compiled._data(data))

    def gather(*arrays: Any) -> tuple[np.ndarray, ...]:
        return tuple(np.asarray(a) for a in dask.compute(*arrays, scheduler=scheduler))
    return values, gather


def _cut_chains(messages: list[Any], lazy: dict[str, int]) -> dict[str, int]:
    """Keep the task graph from growing with the sweeps, storing as little as it can.

    A per-datum (chunked) message is left lazy, recomputed from the data and the NumPy
    globals by whatever reads it.  Its *depth* counts the sweeps its graph reaches back:
    0 if it reads no per-datum message that the last sweep left lazy (``lazy``: their
    names and depths) and this sweep replaced, else one more than the deepest it reads.
    A message of depth 2 would let each sweep add to the next one's graph: it alone is
    persisted on the workers (a model whose per-datum messages depend on each other
    across sweeps); depth 1 (reading, say, last sweep's broadcast of K values) is
    bounded.  Returns the names and depths of the per-datum messages left lazy now."""
    import dask.array as da
    chunked = [(m, i, e) for m in messages for i, e in enumerate(getattr(m, "eta", ()) or ())
               if isinstance(e, da.Array) and e.npartitions > 1]
    current = {e.name for _, _, e in chunked}
    stale = {name: depth for name, depth in lazy.items() if name not in current}
    keep, store = {}, []
    for m, i, e in chunked:
        if e.name in lazy:  # (unchanged since the last sweep)
            keep[e.name] = lazy[e.name]
            continue
        reads = [stale[name] for name in e.__dask_graph__().layers if name in stale]
        depth = 1 + max(reads) if reads else 0
        if depth >= 2:
            store.append((m, i))
        else:
            keep[e.name] = depth
    stored = dask_fusion.persist(*(m.eta[i] for m, i in store))
    for (m, i), value in zip(store, stored, strict=True):
        _set(m, i, value)
    return keep


#: the bounds the run's hooks computed, by the name of their Dask scalar (the run's
#: final bound, after the last sweep, is the last hook's: the same graph, not computed
#: again)
_BOUNDS: dict[str, float] = {}


def _with_checks(evidence: Any, ahead: list[tuple[str, Any]] = (), more: list[Any] = (),
                 sink: Any = None) -> Any:
    """The loop's ``evidence()`` computed at once, in one round trip with the pending
    per-datum checks (``compute_now``), the column sums ``ahead`` (``ahead_sums``) and
    the Dask scalars ``more`` (the monitor's changes, whose values go to ``sink``): the
    bound's pass over the data checks the sweep's per-datum posteriors, sums what the
    next sweep's first message sums and measures the convergence.  (Where the hook reads
    no bound, the checks ride along with the next sweep's first pass, and the run's last
    with its end.)  The value is computed once per sweep, however often it is read."""
    done: list[float] = []

    def computed() -> float:
        if done:
            return done[0]
        value = evidence()
        name = getattr(value, "name", None)  # (None: a NumPy bound, nothing to keep)
        if name is None or name not in _BOUNDS or more:
            _BOUNDS.clear()  # (only the last sweep's can be the run's final one)
            got = compute_now(value, *(sums for _, sums in ahead), *more)
            _COLUMN_SUMS.clear()
            _COLUMN_SUMS.update((key, np.asarray(v)) for (key, _), v in
                                zip(ahead, got[1:1 + len(ahead)], strict=True))
            if more:
                sink(got[1 + len(ahead):])
            if name is not None:
                _BOUNDS[name] = float(got[0])
            done.append(float(got[0]))
        else:
            done.append(_BOUNDS[name])
        return done[0]
    return computed


def _eager(operator: Any) -> Any:
    """``operator`` computing its result's one-chunk (K-sized) Dask parameters at once
    (``materialise``, with the pending per-datum checks): a message that reduces the
    chunked plate is computed where it is made, in one pass over the data, so that
    everything downstream of it (the posterior, the next statements, the messages the
    sweep leaves) is NumPy and no later computation passes over the data again for it."""
    def eager(*args: Any, **kwargs: Any) -> Any:
        out = operator(*args, **kwargs)
        eta = getattr(out, "eta", None)
        if isinstance(eta, tuple) and any(getattr(e, "npartitions", 0) == 1 for e in eta):
            materialise(out)
        return out
    eager.__name__ = getattr(operator, "__name__", "operator")
    eager.__wrapped__ = operator  # type: ignore[attr-defined]
    return eager


def _refused_by_dask(error: BaseException) -> bool:
    """Whether ``error`` is Dask declining an array operation: NotImplementedError (Dask's
    own way, as for ``out=`` and in-place writes), an attribute a Dask array lacks, or
    NumPy finding no Dask implementation of a function.  Nothing else is, wherever it was
    raised: an error inside Dask's code from what factorflow handed it (a NumPy weight
    where Dask needs a Dask array, a shape of unknown length) is a fault of factorflow's
    own and propagates as it is."""
    import dask.array as da
    if isinstance(error, NotImplementedError):
        return True
    if isinstance(error, AttributeError) and isinstance(getattr(error, "obj", None), da.Array):
        return True
    return "__array_function__" in str(error) or "__array_ufunc__" in str(error)


def _copy_of(ns: Any, value: Any) -> Any:
    """A NumPy distribution as the Dask copy of its class (the same slots)."""
    cls = getattr(ns["factorflow.distributions"], type(value).__name__)
    obj = cls.__new__(cls)
    for name, v in value.__getstate__().items():
        object.__setattr__(obj, name, v)
    return obj


def _recompile_dask(model: Any, algorithm: str, init: tuple[str, ...],
                    enter_whole_arrays: bool = False) -> CompiledModel:
    """The compiled model ``pickle`` loads: compiled again for Dask."""
    return compile_model(model, algorithm, init, enter_whole_arrays=enter_whole_arrays,
                         backend="dask")


__all__ = ["DaskCompiledModel", "default_client", "local_client", "resolve_client", "plate_chunks",
           "cluster_data", "default_chunk_rows", "CHUNK_ELEMENTS"]
