"""The fused Switch on the JAX backend against the gate path and NumPy's fused Switch.

Issue 14's 1-D mixture (``benchmarks/mixture_reference.py``: K = 10 components,
Dirichlet weights, Gaussian means, Gamma precisions, ``ff.Switch(z)``) under VMP at
N = 10⁵ and 10⁶ (``--sizes``), compiled three ways: JAX with the fused statement
(``compile(fuse_switch=True)``, ``factors.fused_switch``: one blocked pass over the
data a sweep), JAX on the gate path (``fuse_switch=False``) and NumPy with the fused
statement.  Each is timed as ``bench_backends`` times a backend (``_per_sweep``: runs
of 1 and 1 + S sweeps, each followed by the bound; the difference over S; S = 4, and
4·10⁵/N where that is more), one run
each in turn, ``--rounds`` times (paired and alternated: the machine's load moves
between rounds, not within a pair); the table prints each configuration's CPU ms a
sweep (every thread's) and wall ms a sweep, the best round and the median, and the
ratios of the best: gate / fused on JAX, NumPy fused / JAX fused.  The last column is
the largest relative difference of a natural parameter between the JAX fused and the
NumPy fused posteriors (the same sweeps).  The header gives the cores and the load
(the 1-minute load average before and after the table).

Run: ``python benchmarks/bench_jax_fused.py [--sizes N ...] [--rounds R] [--sweeps S]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import mixture_reference as mix  # noqa: E402
from benchmarks.bench_backends import _difference, _per_sweep  # noqa: E402

NAMES = ("weights", "means", "precs", "z")
#: (label, backend, fuse_switch)
CONFIGS = (("JAX fused", "jax", True), ("JAX gate", "jax", False),
           ("NumPy fused", "numpy", True))


def rows(n: int, rounds: int, sweeps: int) -> list[str]:
    """The table's lines for N = ``n`` (see the module docstring)."""
    x = mix.data(10, n)
    init = mix.factorflow_init(x, 10)
    model = mix.model(x, 10)
    compiled = {label: model.compile("vmp", init=["means"], backend=backend,
                                     fuse_switch=fused)
                for label, backend, fused in CONFIGS}
    for c in compiled.values():  # (JAX's first call of each length traces and compiles)
        for iterations in (1, 1 + sweeps):
            c.run(init=init, iterations=iterations, tolerance=None, progress=False)
    cpu: dict[str, list[float]] = {label: [] for label in compiled}
    wall: dict[str, list[float]] = {label: [] for label in compiled}
    results = {}
    for _ in range(rounds):
        for label, c in compiled.items():
            w, p, _, results[label] = _per_sweep(c, sweeps, init, 1)
            cpu[label].append(p * 1e3)
            wall[label].append(w * 1e3)
    diff = _difference(results["NumPy fused"], results["JAX fused"], NAMES)
    out = []
    for label in compiled:
        out.append(f"| {n:>9,} | {label:<11} | {min(cpu[label]):8.1f} | "
                   f"{statistics.median(cpu[label]):8.1f} | {min(wall[label]):8.1f} | "
                   f"{statistics.median(wall[label]):8.1f} | "
                   f"{' / '.join(f'{v:.1f}' for v in cpu[label])} |")
    best = {label: min(v) for label, v in cpu.items()}
    out.append(f"| {n:>9,} | ratios (best CPU) | gate / fused on JAX "
               f"{best['JAX gate'] / best['JAX fused']:.2f}× | NumPy fused / JAX fused "
               f"{best['NumPy fused'] / best['JAX fused']:.1f}× | max rel. diff JAX / NumPy "
               f"fused {diff:.1e} | |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[10**5, 10**6])
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds")
    parser.add_argument("--sweeps", type=int, default=None,
                        help="the sweeps the longer timed run adds (default: 4, and "
                             "4·10⁵/N where that is more)")
    args = parser.parse_args()
    import jax
    print(f"1-D Gaussian mixture (K = 10, issue 14's), VMP, the bound every sweep; JAX "
          f"{jax.__version__} on {jax.devices()[0].platform.upper()}; {os.cpu_count()} "
          f"cores, load {os.getloadavg()[0]:.1f}", flush=True)
    print("| N | program | CPU ms/sweep best | median | wall ms/sweep best | median "
          "| CPU ms each round |")
    print("|---|---|---|---|---|---|---|")
    begin = time.perf_counter()
    for n in args.sizes:
        for line in rows(n, args.rounds, args.sweeps or max(4, 400_000 // n)):
            print(line, flush=True)
    print(f"(load after: {os.getloadavg()[0]:.1f}; {time.perf_counter() - begin:.0f} s)")


if __name__ == "__main__":
    main()
