"""The Dask backend on issue 14's 1-D mixture: time per sweep and peak memory per worker
beside the NumPy backend, in one run.

Model: ``benchmarks/mixture_reference.py`` (K components, Dirichlet weights, Gaussian
means, Gamma precisions, ``ff.Switch(z)``), VMP, S sweeps with the bound after each
(``tolerance=None``), at each N of ``--sizes``.  The Dask backend runs on a
``LocalCluster`` of 2 worker processes (one thread each), the data in chunks of
``--chunk`` points, given as a Dask array that the client never holds: each chunk is
read by a worker from a ``.npy`` file (memory-mapped, ``--source file``, the default: the
data is reread at each pass, as from Zarr or Parquet), or the NumPy array is sent to the
workers once (``--source numpy``: half the data resident on each worker).

Printed per N: the data size (the observed array, MB) and its share per worker; the
seconds per sweep of the NumPy backend (``--reference factorflow``) or of the
hand-written NumPy updates of ``mixture_reference.hand_written`` (``--reference hand``,
which at 10⁷ points needs a few (N, K) arrays where the NumPy backend needs dozens),
and of the Dask backend, and their ratio; the CPU seconds per sweep of each (Dask's: its
two workers' and this process's, which runs the client and the ``LocalCluster``'s
scheduler; a steadier figure than wall time on a loaded machine) and their ratio; the
tasks the scheduler ran per sweep (the whole run's, over S) and the passes over the
data in the whole run (fused chunk tasks over the number of chunks: each pass is one
task per chunk); each Dask worker's resident memory idle (a fresh ``LocalCluster`` for
each N, ``dask_backend.local_client``, closed after it: no ``client.restart()``, which
several times did not see its workers come back within 600 s on a loaded machine,
distributed's issue 8534), ready (the run's libraries, factorflow, dask.array and
SciPy, imported), its peak over the run (sampled every 5 ms in the worker), and the
run's own memory, peak less ready, and that over the data's share per worker (issue
14's target: a quarter or less);
the bytes of the tasks the scheduler sends the workers per sweep (each computation's
optimised graph, pickled: the fused chunk tasks and, where chunks share their program,
the program once) and of the results the workers send (Dask's transfer counters: to
each other, and to this process, the per-datum posteriors gathered at the end among
them); the cluster's idle CPU (its heartbeats and monitors, and the memory sampling:
measured for ``--idle`` seconds before the run, per wall second) over the run's wall
time, per sweep, so that the CPU of the work itself can be read on a loaded machine; and
the largest relative difference of the posteriors (q(weights), q(means), q(precs), q(z))
from the reference's.  Each worker's resident memory after the run, less ready, is what
it kept ("kept MB per worker"), and after glibc's ``malloc_trim(0)`` in the worker (what
of it malloc held free); the chunk tasks run in sub-blocks and run whole
(``dask_subblocks.STATS``).  ``--dask-defaults``: the ``LocalCluster``'s workers with
Dask's own configuration (profiler on, 1,000-entry logs, ``key_split``'s cache
unbounded), as the backend started them before it bounded their diagnostics
(``dask_backend.WORKER_CONFIG``, ``KEY_CACHE_LIMIT``).  ``--tolerance``: the run's
convergence test (None by default: all S sweeps; a number runs the monitor, whose
changes of q(z) are reduced on the workers).

Run: ``python benchmarks/bench_dask.py [--sizes N ...] [--k K] [--sweeps S]
[--chunk C] [--source file|numpy] [--reference factorflow|hand] [--tolerance T]
[--idle SECONDS] [--gather all|none] [--dask-defaults]`` (``--gather none``: q(z) left
on the cluster, computed there after the timing for the comparison; ``--chunk``: the
backend's default, ``default_chunk_rows``, when not given).  Timings on a shared machine
are noisy.

``--checks``: instead, the run's data checks alone (``checks.run_data``) of the points given
as a Dask array the workers read from a file, read whole into this process beside chunk
by chunk on the cluster (``checks.lazy_data``), at each N of ``--sizes``: wall and CPU
seconds of this process and its peak traced memory (``check_table``).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import mixture_reference as mix  # noqa: E402


def _idle(dask_worker) -> float:
    """Run in each freshly started worker: its resident memory, MB (nothing imported
    beyond what a worker starts with)."""
    import psutil
    return psutil.Process().memory_info().rss / 2**20


def _start_sampling(dask_worker, every: float = 0.005) -> float:
    """Run in each worker: import what the run's tasks use (factorflow, whose functions
    the chunk tasks call, Dask's array functions and SciPy's special functions: about
    45 MB, most of it ``dask.array``), then sample the worker
    process's resident memory every ``every`` seconds in a thread, keeping the largest
    (``ru_maxrss`` cannot serve: a worker forked from a large process starts with that
    process's peak).  Returns the resident memory now ("ready"), MB."""
    import threading

    import dask.array  # noqa: F401
    import psutil
    import scipy.special  # noqa: F401

    import factorflow.runtime.backends.dask_fusion  # noqa: F401
    import factorflow.runtime.backends.dask_subblocks  # noqa: F401

    process = psutil.Process()
    state = {"peak": process.memory_info().rss, "run": True}

    def sample() -> None:
        while state["run"]:
            state["peak"] = max(state["peak"], process.memory_info().rss)
            time.sleep(every)
    threading.Thread(target=sample, daemon=True).start()
    dask_worker._bench_memory = state
    return process.memory_info().rss / 2**20


def _cpu(dask_worker) -> float:
    """Run in each worker: the CPU seconds its process has used (user and system, all
    its threads)."""
    import psutil
    times = psutil.Process().cpu_times()
    return times.user + times.system


def _stop_sampling(dask_worker) -> float:
    """Run in each worker: stop the sampling, return the largest resident memory, MB."""
    state = dask_worker._bench_memory
    state["run"] = False
    return state["peak"] / 2**20


def _rss(dask_worker) -> float:
    """Run in each worker: its resident memory now, MB."""
    import psutil
    return psutil.Process().memory_info().rss / 2**20


def _trimmed(dask_worker) -> float:
    """Run in each worker: its resident memory, MB, after glibc's ``malloc_trim(0)``
    (the free memory malloc keeps in its heaps given back to the system; the workers
    already run with Dask's ``MALLOC_TRIM_THRESHOLD_=65536``)."""
    import ctypes
    import ctypes.util

    import psutil
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # (not glibc)
        pass
    return psutil.Process().memory_info().rss / 2**20


def _split(dask_worker) -> tuple[int, int]:
    """Run in each worker: the chunk tasks run in sub-blocks, and run whole."""
    from factorflow.runtime.backends import dask_subblocks
    return dask_subblocks.STATS["split"], dask_subblocks.STATS["whole"]


def _sent(dask_worker) -> int:
    """Run in each worker: the bytes of results it has sent (to other workers and to
    the client)."""
    return int(dask_worker.transfer_outgoing_bytes_total)


class TaskBytes:
    """The bytes of the tasks the scheduler sends the workers: each computation's graph
    as ``dask_fusion.fuse_chunks`` leaves it (the LocalCluster's scheduler optimises in
    this process), every task pickled on its own, as the scheduler sends them."""

    def __init__(self) -> None:
        from factorflow.runtime.backends import dask_fusion
        self.module, self.real, self.total = dask_fusion, dask_fusion.fuse_chunks, 0

    def __enter__(self) -> TaskBytes:
        from distributed.protocol.pickle import dumps  # (the scheduler's pickling)

        def counted(dsk, outputs, plate_keys):
            out = self.real(dsk, outputs, plate_keys)
            self.total += sum(len(dumps(node)) for node in out.values())
            return out
        self.module.fuse_chunks = counted
        return self

    def __exit__(self, *exc) -> None:
        self.module.fuse_chunks = self.real


def _read(block_info=None, path: str = "") -> np.ndarray:
    """One chunk of the data, read from the ``.npy`` file at ``path`` (memory-mapped:
    only that chunk's rows are read)."""
    lo, hi = block_info[None]["array-location"][0]
    return np.array(np.load(path, mmap_mode="r")[lo:hi])


def lazy_data(x: np.ndarray, chunk: int, folder: str):
    """``x`` as a Dask array whose chunks the workers read from a file in ``folder``."""
    import dask.array as da
    path = str(Path(folder) / "x.npy")
    np.save(path, x)
    return da.map_blocks(_read, path=path, chunks=(da.core.normalize_chunks(chunk, x.shape)[0],),
                         dtype=float, meta=np.empty(0))


def data_model(n: int, k: int):
    """``mixture_reference.model`` with its points named ``ff.Data("xs")``, given at run
    time (a Dask array the client never holds)."""
    import factorflow as ff
    with ff.Model("mixture_1d") as m:
        weights = ff.Dirichlet("weights", np.ones(k))
        with ff.Plate(ff.Range("k", k)):
            means = ff.Gaussian("means", mix.PRIOR_MEAN, variance=mix.PRIOR_VAR)
            precs = ff.Gamma("precs", mix.PREC_SHAPE, rate=mix.PREC_RATE)
        with ff.Plate(ff.Range("n", n)):
            z = ff.Discrete("z", weights)
            with ff.Switch(z):
                ff.Gaussian("x", means[z], precision=precs[z], observed=ff.Data("xs"))
    return m


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(np.asarray(a) - b) / (1 + np.abs(b)), initial=0.0))


def _difference(result, ref) -> float:
    """The largest relative difference of ``result``'s posteriors from ``ref``'s (an
    ``ff.Result`` or ``mixture_reference.Posteriors``)."""
    if isinstance(ref, mix.Posteriors):
        pairs = [(result["weights"].alpha, ref.alpha), (result["means"].mean, ref.mean),
                 (result["means"].variance, ref.var),
                 (result["precs"].shape_param, ref.shape), (result["precs"].rate, ref.rate),
                 (result["z"].probs, ref.r)]
    else:
        pairs = [(x, y) for name in ("weights", "means", "precs", "z")
                 for x, y in zip(result[name].eta, ref[name].eta, strict=True)]
    return max(_relative(x, y) for x, y in pairs)


def check_table(sizes: list[int], chunk: int, repeats: int = 3) -> None:
    """``--checks``: the run's data checks (``checks.run_data``) of ``ff.Data("xs")``
    given as a Dask array the workers read from a file, read whole into this process (as
    before ``checks.lazy_data``) beside chunk by chunk on the cluster (within it), side
    by side in one process: the best of ``repeats`` wall and CPU seconds of this process
    (the workers' read is in the wall time) and this process's peak of traced memory
    (``tracemalloc``) over the checks, MB."""
    import time
    import tracemalloc
    from tempfile import TemporaryDirectory

    import dask

    from factorflow.model import checks
    from factorflow.runtime.backends.dask_backend import local_client
    client = local_client()
    print(f"data checks of ff.Data('xs') (the 1-D mixture's points, a Dask array read by "
          f"the workers from a .npy file in chunks of {chunk:,}), best of {repeats}")
    print(f"{'N':>12} | {'data MB':>8} | {'how':>14} | {'wall s':>7} | {'CPU s here':>10} | "
          f"{'peak MB here':>12}")
    try:
        for n in sizes:
            x = np.random.default_rng(0).normal(size=n)
            model = data_model(n, 2)
            with TemporaryDirectory() as folder, dask.config.set(scheduler=client):
                arr = lazy_data(x, chunk, folder)
                for how, context in (("read whole", contextlib.nullcontext),
                                     ("chunk by chunk", checks.lazy_data)):
                    best = [np.inf, np.inf, np.inf]
                    for _ in range(repeats):
                        tracemalloc.start()
                        wall, cpu = time.perf_counter(), time.process_time()
                        with context():
                            checks.run_data(model, {"xs": arr})
                        got = [time.perf_counter() - wall, time.process_time() - cpu,
                               tracemalloc.get_traced_memory()[1] / 1e6]
                        tracemalloc.stop()
                        best = [min(a, b) for a, b in zip(best, got, strict=True)]
                    print(f"{n:>12,} | {x.nbytes / 1e6:>8.1f} | {how:>14} | {best[0]:>7.2f} | "
                          f"{best[1]:>10.2f} | {best[2]:>12.1f}")
    finally:
        client.close()
        client.cluster.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**5, 10**6])
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--sweeps", type=int, default=3)
    parser.add_argument("--chunk", type=int, default=None,
                        help="points per chunk (default: the backend's own choice)")
    parser.add_argument("--source", choices=("file", "numpy"), default="file")
    parser.add_argument("--reference", choices=("factorflow", "hand"), default="factorflow")
    parser.add_argument("--tolerance", type=float, default=None,
                        help="the run's tolerance (default None: all the sweeps)")
    parser.add_argument("--gather", choices=("all", "none"), default="all",
                        help="the run's gather= (all: q(z) gathered at the end, the "
                             "default; none: left lazy on the cluster)")
    parser.add_argument("--idle", type=float, default=10.0,
                        help="seconds the cluster's idle CPU is measured before each run")
    parser.add_argument("--dask-defaults", action="store_true",
                        help="the workers with Dask's own configuration (before the "
                             "backend bounded their diagnostics)")
    parser.add_argument("--checks", action="store_true",
                        help="time the run's data checks only (read whole against chunk "
                             "by chunk on the cluster; check_table)")
    args = parser.parse_args()
    if args.checks:
        from factorflow.runtime.backends.dask_backend import default_chunk_rows
        check_table(args.sizes, args.chunk or default_chunk_rows(1))
        return

    from distributed import get_task_stream

    from factorflow.runtime.backends import dask_backend
    from factorflow.runtime.backends.dask_backend import default_chunk_rows, local_client
    if args.dask_defaults:
        dask_backend.WORKER_CONFIG, dask_backend.KEY_CACHE_LIMIT = {}, None
    workers = 2  # (the backend's own LocalCluster: local_client)
    chunk = args.chunk or default_chunk_rows(args.k)
    print(f"1-D mixture, K = {args.k}, VMP, {args.sweeps} sweeps (bound after each), "
          f"chunks of {chunk:,} points{'' if args.chunk else ' (the default)'} read from "
          f"{args.source}, LocalCluster of {workers} workers (1 thread each); reference: "
          f"{'the NumPy backend' if args.reference == 'factorflow' else 'hand-written NumPy'}"
          "; worker memory (resident, MB): idle (fresh), ready (its libraries imported), "
          "peak over the run (sampled every 5 ms), and the run's own (peak − ready), "
          "one figure per worker; workers configured as "
          f"{'Dask defaults' if args.dask_defaults else 'the backend sets (WORKER_CONFIG)'}")
    print()
    print("| N | data MB | data MB per worker | NumPy s/sweep | Dask s/sweep | ratio | "
          "CPU s/sweep NumPy / Dask | CPU ratio | idle CPU s/sweep | CPU ratio less idle | "
          "tasks per sweep | task MB to workers per sweep | MB sent by workers per sweep | "
          "passes over the data | "
          "worker idle | worker ready | worker peak | run's MB per worker | "
          "run's MB / data MB per worker | kept MB per worker | kept after malloc_trim | "
          "chunks split / whole | max rel. diff |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
          "---|---|")
    for n in args.sizes:
        x = mix.data(args.k, n)
        model, init = mix.model(x, args.k), mix.factorflow_init(x, args.k)
        run = {"iterations": args.sweeps, "init": init, "tolerance": args.tolerance,
               "progress": False}
        begin, cpu = time.perf_counter(), time.process_time()
        if args.reference == "factorflow":
            ref = model.compile("vmp", init=["means"]).run(**run)
        else:
            ref = mix.hand_written(x, args.k, args.sweeps)
        numpy_sweep = (time.perf_counter() - begin) / args.sweeps
        numpy_cpu = (time.process_time() - cpu) / args.sweeps
        # a fresh cluster for each N (its workers' peak memory is this run's), closed
        # after it: no ``client.restart()``, which did not see its workers come back
        # within 600 s several times on a loaded machine
        client = local_client()
        client.wait_for_workers(workers, timeout=300)
        idle = client.run(_idle)
        rest = client.run(_start_sampling)
        # the cluster's own CPU at rest (heartbeats, monitors, the sampling), per second
        before, cpu, at = client.run(_cpu), time.process_time(), time.perf_counter()
        time.sleep(args.idle)
        background = (time.process_time() - cpu + sum(
            t - before[w] for w, t in client.run(_cpu).items())) / (time.perf_counter() - at)
        with tempfile.TemporaryDirectory() as folder:
            data = (lazy_data(x, chunk, folder) if args.source == "file" else x)
            compiled = data_model(n, args.k).compile("vmp", init=["means"], backend="dask")
            worker_cpu, sent = client.run(_cpu), client.run(_sent)
            begin, cpu = time.perf_counter(), time.process_time()
            with get_task_stream(client) as stream, TaskBytes() as task_bytes:
                got = compiled.run(**run, data={"xs": data}, client=client,
                                   chunks=args.chunk, gather=args.gather == "all")
            wall = time.perf_counter() - begin
            dask_sweep = wall / args.sweeps
            own_cpu = time.process_time() - cpu  # (the client's, and the scheduler's)
            worker_cpu = sum(t - worker_cpu[w] for w, t in client.run(_cpu).items())
            sent = sum(t - sent[w] for w, t in client.run(_sent).items())
            peaks = client.run(_stop_sampling)
            after = client.run(_rss)
            trimmed = client.run(_trimmed)
            split = client.run(_split)
            if args.gather == "none":  # (for the comparison, after the measures: q(z)
                # computed on the cluster, while the file it reads is there)
                object.__setattr__(got["z"], "eta",
                                   (client.compute(got["z"].eta[0]).result(),))
        client.close()
        client.cluster.close(timeout=60)
        chunks = -(-n // chunk)
        tasks = len(stream.data)
        passes = sum(str(t["key"][0] if isinstance(t["key"], tuple) else t["key"])
                     .startswith("chunkpass") for t in stream.data) / chunks
        used = [peaks[w] - rest[w] for w in peaks]

        def each(values) -> str:
            return " / ".join(f"{v:,.0f}" for v in values)
        dask_cpu = (own_cpu + worker_cpu) / args.sweeps
        idle_cpu = background * wall / args.sweeps
        print(f"| {n:,} | {x.nbytes / 1e6:,.0f} | {x.nbytes / 1e6 / workers:,.0f} | "
              f"{numpy_sweep:.2f} | {dask_sweep:.2f} | {dask_sweep / numpy_sweep:.1f} | "
              f"{numpy_cpu:.2f} / {dask_cpu:.2f} | {dask_cpu / numpy_cpu:.1f} | "
              f"{idle_cpu:.2f} | {(dask_cpu - idle_cpu) / numpy_cpu:.1f} | "
              f"{tasks / args.sweeps:,.0f} | {task_bytes.total / 1e6 / args.sweeps:.2f} | "
              f"{sent / 1e6 / args.sweeps:.2f} | {passes:.0f} | "
              f"{each(idle[w] for w in peaks)} | {each(rest[w] for w in peaks)} | "
              f"{each(peaks.values())} | {each(used)} | "
              f"{' / '.join(f'{u / (x.nbytes / 2**20 / workers):.2f}' for u in used)} | "
              f"{each(after[w] - rest[w] for w in peaks)} | "
              f"{each(trimmed[w] - rest[w] for w in peaks)} | "
              f"{sum(s[0] for s in split.values()):,} / {sum(s[1] for s in split.values()):,} | "
              f"{_difference(got, ref):.1e} |", flush=True)


if __name__ == "__main__":
    main()
