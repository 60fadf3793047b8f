"""The Dask backend on issue 14's 1-D mixture: time per sweep and peak memory per worker
beside the NumPy backend, in one run.

Model: ``benchmarks/mixture_reference.py`` (K components, Dirichlet weights, Gaussian
means, Gamma precisions, ``ff.Switch(z)``), VMP, S sweeps with the bound after each
(``tolerance=None``), at each N of ``--sizes``.  The Dask backend runs on a
``LocalCluster`` of 2 worker processes (one thread each), the data in chunks of
``--chunk`` points.  Printed per N: the data size (the observed array, MB), the NumPy
backend's and the Dask backend's seconds per sweep, the peak resident memory of each
Dask worker process (MB, ``ru_maxrss``: the largest over the run, the worker's Python
and libraries included) and of this process, the per-datum state of one (N, K) float64
message (MB) for scale, and the largest relative difference of the two backends'
posteriors.  ``--no-numpy`` leaves the NumPy backend out (at sizes its single process
cannot hold).

Run: ``python benchmarks/bench_dask.py [--sizes N ...] [--k K] [--sweeps S]
[--chunk C] [--no-numpy]``.  Timings on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import mixture_reference as mix  # noqa: E402


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _difference(a, b) -> float:
    worst = 0.0
    for name in ("weights", "means", "precs", "z"):
        for x, y in zip(a[name].eta, b[name].eta, strict=True):
            worst = max(worst, float(np.max(np.abs(x - y) / (1 + np.abs(x)), initial=0.0)))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**5, 10**6])
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--sweeps", type=int, default=3)
    parser.add_argument("--chunk", type=int, default=250_000)
    parser.add_argument("--no-numpy", action="store_true")
    args = parser.parse_args()

    from factorflow.runtime.backends.dask_backend import default_client
    client = default_client()
    print(f"1-D mixture, K = {args.k}, VMP, {args.sweeps} sweeps (bound after each), "
          f"chunks of {args.chunk:,} points, LocalCluster of "
          f"{len(client.scheduler_info()['workers'])} workers")
    print()
    print("| N | data MB | one (N, K) message MB | NumPy s/sweep | Dask s/sweep | "
          "peak MB per worker | peak MB client | max rel. diff |")
    print("|---|---|---|---|---|---|---|---|")
    for n in args.sizes:
        x = mix.data(args.k, n)
        model, init = mix.model(x, args.k), mix.factorflow_init(x, args.k)
        run = {"iterations": args.sweeps, "init": init, "tolerance": None,
               "progress": False}
        numpy_sweep, a = float("nan"), None
        if not args.no_numpy:
            compiled = model.compile("vmp", init=["means"])
            begin = time.perf_counter()
            a = compiled.run(**run)
            numpy_sweep = (time.perf_counter() - begin) / args.sweeps
        client.restart()  # fresh workers: their peak memory is this run's
        compiled = model.compile("vmp", init=["means"], backend="dask")
        begin = time.perf_counter()
        b = compiled.run(**run, client=client, chunks=args.chunk)
        dask_sweep = (time.perf_counter() - begin) / args.sweeps
        peaks = client.run(_peak_mb)
        diff = "-" if a is None else f"{_difference(a, b):.1e}"
        print(f"| {n:,} | {x.nbytes / 1e6:,.0f} | {n * args.k * 8 / 1e6:,.0f} | "
              f"{numpy_sweep:.2f} | {dask_sweep:.2f} | "
              f"{' / '.join(f'{p:,.0f}' for p in peaks.values())} | {_peak_mb():,.0f} | "
              f"{diff} |", flush=True)


if __name__ == "__main__":
    main()
