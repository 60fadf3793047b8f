"""One task per data chunk: the Dask backend's graph optimisation.

Each computation of the Dask backend (a K-sized message, the bound, a properness check)
is one pass over the data whose graph holds, per data chunk, some forty small tasks (the
kernels' NumPy operations, Dask's reductions over the cases axis, its matrix products):
run by ``distributed`` as separate tasks, each pays the scheduler's overhead, and a
worker holds the (chunk, K) results of many chunks at once while their consumers wait
(a dozen 7.6 MB partial products per worker, sampled at 10⁶ points in chunks of
100,000).  ``optimize`` (installed as Dask's ``array_optimize`` for the run) rewrites
every such graph, in place of Dask's own array optimisations (whose blockwise fusion
would rename the data's blocks): the tasks that depend on one data chunk only become
a single task per chunk (``fuse_chunks``), which runs them one branch after another in
the worker, frees each intermediate as soon as its last reader has run (``_run_chunk``)
and returns only what leaves the chunk (a partial sum of a reduction over the plate, or
a per-datum result the computation asks for).  A worker then holds one chunk's
intermediates at a time.  Chunks that do the same work on their own blocks share one
*program* (``_shared_program``): a chunk's tasks less its blocks, with local keys
(``_canonical``), put into the graph once as data; each chunk's task names it and
carries only its blocks' tasks (``Heads``: the data read by place, a NumPy array's
piece), so the scheduler sends each worker a program once per computation instead of
some forty tasks per chunk.

What depends on one chunk is found from the *plate keys* (``PLATE_KEYS``): the blocks of
the run's arrays chunked along the plate (the data, and NumPy arrays over the plate
brought into the graph, ``register``), each with its chunk index.  A task belongs to
chunk i when it reads (directly or not) chunk i's blocks and no other chunk's; a task
that reads no chunk (K values, a broadcast of them) joins chunk i's task when only that
chunk's tasks read it; the rest (a tree reduction's combining steps, the K-sized globals
shared by every chunk) stay as they are.  The rewrite does not change what is computed:
each task runs with the same inputs, in a topological order.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

#: the blocks of the run's arrays chunked along the plate: key -> chunk index (empty
#: outside a run: ``optimize`` is then Dask's own)
PLATE_KEYS: dict[Hashable, int] = {}

_GLOBAL, _MIXED = -1, -2  # a task reading no chunk; one reading several


def register(arr: Any) -> None:
    """Note the blocks of ``arr`` (a Dask array chunked along the plate, axis 0) as plate
    keys: block (i, ...) is chunk i."""
    from dask.core import flatten
    for i, row in enumerate(arr.__dask_keys__()):
        for key in flatten([row]):  # (a 1-D array's row is one key)
            PLATE_KEYS[key] = i


def optimize(dsk: Any, keys: Any, **kwargs: Any) -> Any:
    """The graph of ``keys`` for a run's computation (installed as Dask's
    ``array_optimize`` by the backend during a run): while the run has plate keys, culled
    to ``keys`` and fused chunk by chunk (``fuse_chunks``), in place of Dask's own array
    optimisation, whose blockwise fusion renames the data's blocks (a lazily read array's
    chunks fused into their first reader) so that they could no longer be told apart
    (and whose fusing the chunk tasks subsume); Dask's own otherwise."""
    from dask._task_spec import convert_legacy_graph
    from dask.array.optimization import optimize as array_optimize
    from dask.core import flatten
    from dask.highlevelgraph import HighLevelGraph
    from dask.utils import ensure_dict
    if not PLATE_KEYS:
        return array_optimize(dsk, keys, **kwargs)
    outputs = set(flatten(keys if isinstance(keys, list) else [keys]))
    if isinstance(dsk, HighLevelGraph):
        dsk = dsk.cull(outputs)
    return fuse_chunks(convert_legacy_graph(ensure_dict(dsk)), outputs, PLATE_KEYS)


def compute(*values: Any) -> tuple[Any, ...]:
    """``dask.compute(*values)`` with their graph optimised in this process
    (``_optimised_here``), on the scheduler of Dask's config (the run's client)."""
    import dask
    todo, how = _optimised_here(values)
    return tuple(dask.compute(*todo, **how))


def persist(*values: Any) -> tuple[Any, ...]:
    """``dask.persist(*values)`` with their graph optimised in this process
    (``_optimised_here``)."""
    import dask
    todo, how = _optimised_here(values)
    return tuple(dask.persist(*todo, **how))


def optimised(*values: Any) -> tuple[Any, ...]:
    """``values`` (Dask arrays) with their graph fused here (``_optimised_here``): Dask
    arrays that keep the run's one task per chunk wherever and whenever they are
    computed.  The stored blocks they read (data persisted on the cluster) stay in
    their graph as the futures that hold them (``optimize`` leaves them out, for the
    run's own computations, whose arrays hold them), so that the arrays can be
    computed after the run."""
    from dask.highlevelgraph import HighLevelGraph
    from distributed import Future
    done, how = _optimised_here(values)
    if not how:  # (outside a run: nothing fused, the arrays as they are)
        return done
    merged = HighLevelGraph.merge(*(v.__dask_graph__() for v in values))
    graph = dict(done[0].__dask_graph__())  # (the same graph for each of them)
    for key in {d for node in list(graph.values()) for d in node.dependencies} - graph.keys():
        held = merged.get(key)
        if isinstance(held, Future):
            graph[key] = held
    out = []
    for v in done:
        rebuild, args = v.__dask_postpersist__()
        out.append(rebuild(graph, *args))
    return tuple(out)


def _optimised_here(values: tuple[Any, ...]) -> tuple[tuple[Any, ...], dict[str, bool]]:
    """``values`` with their graphs already optimised in this process (``optimize``:
    fused chunk by chunk while the run has plate keys) and the keyword arguments that
    make ``dask.compute``/``dask.persist`` send that graph as it is.

    ``distributed`` optimises a collection's graph where the scheduler runs (Dask sends
    it the graph and the collection's optimiser, which reads ``array_optimize`` from the
    scheduler process's config): a scheduler in another process (``Client(address)``)
    has neither this run's ``array_optimize`` nor its ``PLATE_KEYS``, and would run
    Dask's own optimisation, one task per operation per chunk.  Optimised here, the
    graph is the same on any scheduler.  The collections' graphs are merged and
    optimised together, as Dask does for one computation (a chunk's work shared by
    several of them stays one task per chunk).
    Outside a run (no plate keys), or where a value is a collection other than a Dask
    array: ``values`` as they are, optimised by Dask's own rules wherever they run."""
    import dask
    import dask.array as da
    from dask.highlevelgraph import HighLevelGraph
    at = [i for i, v in enumerate(values) if dask.is_dask_collection(v)]
    if not PLATE_KEYS or not at or not all(isinstance(values[i], da.Array) for i in at):
        return values, {}
    graph = optimize(HighLevelGraph.merge(*(values[i].__dask_graph__() for i in at)),
                     [values[i].__dask_keys__() for i in at])
    out = list(values)
    for i in at:
        rebuild, args = values[i].__dask_postpersist__()
        out[i] = rebuild(graph, *args)
    return tuple(out), {"optimize_graph": False}


def fuse_chunks(dsk: Mapping[Hashable, Any], outputs: set[Hashable],
                plate_keys: Mapping[Hashable, int]) -> dict[Hashable, Any]:
    """``dsk`` (task-spec nodes) with the tasks of each data chunk fused into one task.

    ``outputs``: the keys the computation asks for (kept, under their own keys);
    ``plate_keys``: block key -> chunk index.  Chunk i's task is keyed
    ``("chunkpass-<token>", i)`` and returns the tuple of its members read from outside
    it (its *exports*); each export keeps its key, as a ``getitem`` of that tuple, so
    nothing else in the graph changes; where the computation asks for none of them (a
    pass that returns partial sums), each is instead a ``getitem`` inside the tasks that
    read it, so a chunk is one task in the scheduler, not one per export.  A chunk with
    one task is left as it is."""
    from dask._task_spec import Task, TaskRef
    from dask.base import tokenize

    order = _topological(dsk)
    dependents: dict[Hashable, list[Hashable]] = {k: [] for k in dsk}
    chunk: dict[Hashable, int] = {}
    for key in order:  # the chunks each task reads, from its dependencies
        c = plate_keys.get(key, _GLOBAL)
        for dep in dsk[key].dependencies:
            if dep in dsk:
                dependents[dep].append(key)
            c = _merge(c, chunk[dep] if dep in dsk else plate_keys.get(dep, _GLOBAL))
        chunk[key] = c
    for key in reversed(order):  # a task of no chunk that only chunk i's tasks read
        if chunk[key] == _GLOBAL and key not in outputs and dependents[key]:
            readers = {chunk[d] for d in dependents[key]}
            if len(readers) == 1 and (only := readers.pop()) >= 0:
                chunk[key] = only
    members: dict[int, list[Hashable]] = {}
    for key in order:
        if chunk[key] >= 0:
            members.setdefault(chunk[key], []).append(key)
    out = dict(dsk)
    token = tokenize(sorted(map(str, outputs)), len(dsk))
    inlined: dict[Hashable, Any] = {}  # export -> its getitem, inlined into its readers
    programs: dict[bytes, Hashable] = {}  # a chunk program's pickle -> its key
    for i, group in members.items():
        if len(group) < 2:
            continue
        inside = set(group)
        exports = tuple(sorted((k for k in group if k in outputs
                                or any(d not in inside for d in dependents[k])),
                               key=_shape_of_key))
        external = tuple(sorted({d for k in group for d in dsk[k].dependencies} - inside,
                                key=str))
        fused = (f"chunkpass-{token}", i)
        producer = any(dsk[k].data_producer for k in group)
        heads = [k for k in group if k in plate_keys]
        shared = _shared_program({k: dsk[k] for k in group}, exports, set(heads), programs,
                                 token, out)
        if shared is None:  # (a program that does not pickle: the chunk's own tasks)
            out[fused] = Task(fused, _run_chunk, {k: dsk[k] for k in group}, exports,
                              external, *(TaskRef(k) for k in external),
                              _data_producer=producer)
        else:
            at, reads = shared
            blocks = tuple(k for k in external if k in plate_keys)  # (stored data)
            out[fused] = Task(fused, _run_program, TaskRef(at),
                              Heads(tuple(dsk[k] for k in heads), blocks), reads, external,
                              *(TaskRef(k) for k in external), _data_producer=producer)
        for k in group:
            del out[k]
        # the exports as tasks of their own only where the computation asks for one
        # (a per-datum result): else each is taken from the chunk's tuple inside its
        # readers (a reduction's partial sums), one task per chunk instead of one per
        # export, and nothing else of the tuple is large
        whole = any(k in outputs for k in exports)
        for j, k in enumerate(exports):
            if whole:
                out[k] = Task(k, operator.getitem, TaskRef(fused), j)
            else:
                inlined[k] = Task(k, operator.getitem, TaskRef(fused), j)
    if inlined:  # (the readers outside the chunks' tasks: inside, each reads its cache)
        for key in {d for k in inlined for d in dependents[k]} & out.keys():
            out[key] = out[key].substitute(inlined)
    return out


class ChunkProgram:
    """One chunk's tasks with their keys made local (``_canonical``): the same object
    for every chunk whose work is the same but for the blocks it reads."""

    __slots__ = ("inner", "exports", "external")

    def __init__(self, inner: dict[Hashable, Any], exports: tuple[Hashable, ...],
                 external: tuple[Hashable, ...]) -> None:
        self.inner, self.exports, self.external = inner, exports, external

    def __reduce__(self) -> tuple[Any, ...]:
        return ChunkProgram, (self.inner, self.exports, self.external)


def _shape_of_key(key: Hashable) -> tuple[str, Any]:
    """A key without its chunk index (a block key's second element, the block's place
    along the plate), to order a chunk's keys the same way in every chunk."""
    if isinstance(key, tuple) and len(key) > 1:
        return str(key[0]), tuple(map(str, key[2:]))
    return str(key), ()


class Heads:
    """A chunk's own blocks (its plate keys: the data read, a NumPy array's piece) as
    tasks, run at the start of its task: they differ from chunk to chunk (a block's
    place in the file or the array), so they are kept out of the shared program; and
    the keys of its blocks stored on the cluster (``blocks``: NumPy data sent once),
    read from outside.  Either gives the chunk's rows (``_rows``)."""

    __slots__ = ("nodes", "blocks")

    def __init__(self, nodes: tuple[Any, ...], blocks: tuple[Hashable, ...] = ()) -> None:
        self.nodes, self.blocks = nodes, blocks

    def __reduce__(self) -> tuple[Any, ...]:
        return Heads, (self.nodes, self.blocks)


def _canonical(inner: dict[Hashable, Any], exports: tuple[Hashable, ...],
               heads: set[Hashable]) -> tuple[ChunkProgram, tuple[Hashable, ...]]:
    """``inner`` (one chunk's tasks) less its ``heads`` (its blocks) as a
    ``ChunkProgram`` whose keys are local: ``("l", j)`` for the j-th task in a traversal
    from ``exports`` that visits each task's dependencies in the order of their keys
    without the chunk index (``_shape_of_key``), and ``("x", m)`` for the m-th key it
    reads that it does not compute (a head, or a key from outside); and those keys, in
    that order.  Chunks doing the same work on different blocks give equal programs."""
    names: dict[Hashable, Hashable] = {}
    reads: list[Hashable] = []

    def computed(key: Hashable) -> list[Hashable]:
        """The chunk's tasks ``key`` reads, in the order of their keys without the chunk
        index; what it reads and the chunk does not compute is named as it is met."""
        deps = sorted(inner[key].dependencies, key=_shape_of_key, reverse=True)
        for d in deps:
            if (d not in inner or d in heads) and d not in names:
                names[d] = ("x", len(reads))
                reads.append(d)
        return [d for d in deps if d in inner and d not in heads]

    order = _post_order(inner, exports, computed)
    names.update((key, ("l", j)) for j, key in enumerate(order))
    local = {names[k]: inner[k].substitute(names, key=names[k]) for k in order}
    return ChunkProgram(local, tuple(names[k] for k in exports),
                        tuple(names[k] for k in reads)), tuple(reads)


def _shared_program(inner: dict[Hashable, Any], exports: tuple[Hashable, ...],
                    heads: set[Hashable], programs: dict[bytes, Hashable], token: str,
                    out: dict[Hashable, Any]) -> tuple[Hashable, tuple[Hashable, ...]] | None:
    """The key of the program of ``inner`` less ``heads`` in ``out`` (added there, as
    data, the first time a chunk has it: the scheduler sends each worker the program
    once, and each chunk's task names it) and the keys the program reads, in its order;
    None where the program does not pickle, or an export is a head."""
    import cloudpickle
    from dask._task_spec import DataNode
    if heads & set(exports) or any(d in inner and d not in heads
                                   for h in heads for d in inner[h].dependencies):
        return None  # (a head reading the chunk's other work: run as it is)
    program, reads = _canonical(inner, exports, heads)
    try:  # (cloudpickle, as Dask's: a function of __main__ or a local one by value)
        blob = cloudpickle.dumps(program, protocol=5)
    except Exception:  # (what Dask could not send either: its own error, unchanged)
        return None
    at = programs.get(blob)
    if at is None:
        at = programs[blob] = (f"chunkprogram-{token}", len(programs))
        out[at] = DataNode(at, program)
    return at, reads


def _run_program(program: ChunkProgram, heads: Heads, reads: tuple[Hashable, ...],
                 external: tuple[Hashable, ...], *values: Any) -> tuple[Any, ...]:
    """Run a chunk's task: its ``heads`` (on the values of the ``external`` keys), then
    the shared ``program`` on the values of ``reads`` (heads, or external keys)."""
    cache = dict(zip(external, values, strict=True))
    for node in heads.nodes:
        cache[node.key] = node(cache)
    rows = _rows(heads, cache)
    args = tuple(cache[k] for k in reads)
    del cache
    if rows:  # the rows in sub-blocks, where every step allows (else the chunk whole)
        from factorflow.runtime.backends import dask_subblocks
        out = dask_subblocks.run(program.inner, program.exports, program.external, args,
                                 rows)
        if out is not None:
            return out
    return _run_chunk(program.inner, program.exports, program.external, *args)


def _rows(heads: Heads, cache: Mapping[Hashable, Any]) -> int:
    """The chunk's length along the plate: its blocks' first axis (0 where they
    disagree, or there is none)."""
    blocks = [cache[node.key] for node in heads.nodes] + [cache[k] for k in heads.blocks
                                                           if k in cache]
    lengths = {len(v) for v in blocks if getattr(v, "ndim", 0)}
    return lengths.pop() if len(lengths) == 1 else 0


def _run_chunk(inner: dict[Hashable, Any], exports: tuple[Hashable, ...],
               external: tuple[Hashable, ...], *values: Any) -> tuple[Any, ...]:
    """Run one chunk's tasks ``inner`` (their inputs from outside: ``external`` =
    ``values``) depth first from each export (``_post_order``), each intermediate freed
    after its last reader has run; return the values of ``exports``."""
    cache = dict(zip(external, values, strict=True))
    readers: dict[Hashable, int] = {}
    for node in inner.values():
        for dep in node.dependencies:
            readers[dep] = readers.get(dep, 0) + 1
    keep = set(exports)
    for key in _post_order(inner, exports):
        node = inner[key]
        cache[key] = node(cache)
        for dep in node.dependencies:
            readers[dep] -= 1
            if not readers[dep] and dep not in keep:
                del cache[dep]
    return tuple(cache[k] for k in exports)


def _post_order(inner: Mapping[Hashable, Any], roots: tuple[Hashable, ...],
                children: Callable[[Hashable], Iterable[Hashable]] | None = None
                ) -> list[Hashable]:
    """The keys of ``inner`` that ``roots`` need, each after its dependencies: depth
    first from each root in turn, so that a branch is finished (and its intermediates
    freed) before the next begins.  (Dask's own ``order`` costs more than the chunk's
    NumPy work for a graph of this size.)  ``children(key)``: the keys to visit under
    ``key``, in order (default: its dependencies in ``inner``)."""
    if children is None:
        def children(key: Hashable) -> Iterable[Hashable]:
            return (d for d in inner[key].dependencies if d in inner)
    seen: set[Hashable] = set()
    out: list[Hashable] = []
    for root in roots:
        stack: list[tuple[Hashable, bool]] = [(root, False)]
        while stack:
            key, done = stack.pop()
            if done:
                out.append(key)
                continue
            if key in seen:
                continue
            seen.add(key)
            stack.append((key, True))
            stack.extend((d, False) for d in children(key) if d not in seen)
    return out


def _merge(a: int, b: int) -> int:
    """The chunk of a task reading what reads chunks ``a`` and ``b``."""
    if a == _GLOBAL or a == b:
        return b
    return a if b == _GLOBAL else _MIXED


def _topological(dsk: Mapping[Hashable, Any]) -> list[Hashable]:
    """The keys of ``dsk``, each after every one of its dependencies in ``dsk``."""
    waiting = {k: sum(1 for d in node.dependencies if d in dsk) for k, node in dsk.items()}
    readers: dict[Hashable, list[Hashable]] = {}
    for k, node in dsk.items():
        for d in node.dependencies:
            if d in dsk:
                readers.setdefault(d, []).append(k)
    ready = [k for k, n in waiting.items() if n == 0]
    order: list[Hashable] = []
    while ready:
        k = ready.pop()
        order.append(k)
        for r in readers.get(k, ()):
            waiting[r] -= 1
            if waiting[r] == 0:
                ready.append(r)
    return order


__all__ = ["PLATE_KEYS", "register", "optimize", "compute", "persist", "optimised", "fuse_chunks",
           "ChunkProgram"]

