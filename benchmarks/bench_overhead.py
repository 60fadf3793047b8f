"""The fixed cost of a sweep on small models (issue 14: "within 1.5x of hand-written on
every gallery model"): per model, the hand-written NumPy sweep beside factorflow's, and
factorflow's sweep cut into its parts.

Models: learning a Gaussian (VMP; N = 1,000 and N = 10: mean ~ N(0, 100), precision ~
Gamma(1, 1), ``bench_foundation.hand_written``), EP TrueSkill (200 players, 9,946 games,
``tests/runtime/handwritten.trueskill_ep``), the 1-D VMP mixture at K = 10, N = 200
(``mixture_reference.hand_written``).

Columns, µs of CPU a sweep (``time.process_time``: a loaded machine's waits are not
counted), each the time of 2n sweeps minus that of n (the run's set-up and final bound
cancel), the best of ``--repeats``:

* ``hand``: the hand-written sweep;
* ``sweep``: factorflow's sweep with nothing watching it, ``run(tolerance=None,
  trace=False)``: the generated statements and the bare hook;
* ``bound``: what ``trace=True`` adds (the bound after every sweep, VMP's default): the
  best time of a run of 2n sweeps with it, minus the best without, over 2n (the three
  runs of 2n interleaved, so that a load that changes falls on all three);
* ``monitor``: the convergence monitor's changes (``_Monitor`` with a tolerance) on the
  run's own posteriors, eight recorded sweeps replayed through it (the monitor alone:
  a run that meets its tolerance early, as learning a Gaussian does in 7 sweeps, cannot
  time it);
* ``in run``: the same in the running sweep, ``run(tolerance=1e-300)`` against
  ``tolerance=None`` as ``bound`` (caches as the operators leave them), where the run
  goes the whole 2n sweeps (else -);
* ``default``: a default run's sweep, ``sweep + in run`` (``monitor`` where there is no
  ``in run``), ``+ bound`` under VMP;
  ``x hand``: ``default / hand``.

With ``--baseline PATH`` (another factorflow checkout, say ``/work/main``) each round
measures this checkout and that one, each in its own interpreter, alternately, and the
table shows both, with the ratio of this checkout's ``default`` to the baseline's; then
the two monitors side by side in this one process (the baseline's ``_Monitor`` class
run in this checkout's loop), the steadier comparison on a loaded machine.

Run: ``python benchmarks/bench_overhead.py [--repeats R] [--baseline PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("gaussian N=1,000", "gaussian N=10", "trueskill 200", "mixture K10 N200")
CELLS = ("hand", "sweep", "bound", "monitor", "in run")


def per_sweep(run: Callable[[int], Any], n: int, repeats: int) -> float:
    """µs of CPU a sweep: (time of 2n sweeps − time of n), best of ``repeats`` each (the
    README table's ``benchmarks/run.py`` measure)."""
    from benchmarks.run import per_iteration
    return per_iteration(run, n, repeats) * 1e6


def programs() -> dict[str, tuple[Any, Any, Callable[[int], Any], int]]:
    """label -> (compiled model, its init, the hand-written run of s sweeps, n)."""
    import numpy as np

    sys.path.append(str(ROOT))  # (``benchmarks``, ``tests``: PYTHONPATH's factorflow first)
    import factorflow as ff
    from benchmarks import mixture_reference as mix
    from benchmarks.bench_foundation import hand_written
    from tests.runtime import handwritten as hw

    out = {}
    for n in (1000, 10):
        x = np.random.default_rng(1).normal(3.0, 2.0, n)
        with ff.Model("learning_gaussian") as model:
            mean = ff.Gaussian("mean", 0.0, variance=100.0)
            prec = ff.Gamma("prec", 1.0, rate=1.0)
            with ff.Plate(ff.Range("n", n)):
                ff.Gaussian("x", mean, precision=prec, observed=x)
        out[f"gaussian N={n:,}"] = (model.compile("vmp"), None,
                                     lambda s, x=x: hand_written(x, s), 200)
    winner, loser = hw.trueskill_games(200, 10_000)
    out["trueskill 200"] = (hw.trueskill_model(200, winner, loser).compile("ep"), None,
                            lambda s: hw.trueskill_ep(200, winner, loser, s), 20)
    x = mix.data(10, 200)
    out["mixture K10 N200"] = (mix.model(x, 10).compile("vmp", init=["means"]),
                               mix.factorflow_init(x, 10),
                               lambda s: mix.hand_written(x, 10, s), 40)
    return out


def replayed_monitor(compiled: Any, init: Any, repeats: int, monitor_class: Any = None
                     ) -> float:
    """µs a sweep of the monitor's changes, eight recorded sweeps' posteriors replayed
    through a ``_Monitor`` (or ``monitor_class``) with a tolerance (best of ``repeats``
    rounds of 200 calls)."""
    from factorflow.runtime.compiled import _Monitor
    recorded: list[dict[str, Any]] = []
    compiled.run(iterations=8, init=init, tolerance=None, trace=False, progress=False,
                 on_iteration=lambda i, posteriors: recorded.append(dict(posteriors)))
    monitor = (monitor_class or _Monitor)(compiled.algorithm, 1e-300, None, trace=False)
    best = float("inf")
    for k in range(4):
        monitor(k, recorded[k], None)
    for _ in range(repeats):
        t0 = time.process_time()
        for k in range(200):
            monitor(k + 4, recorded[k % 8], None)
        best = min(best, (time.process_time() - t0) / 200 * 1e6)
    return best


def worker(repeats: int) -> dict[str, dict[str, float | None]]:
    """One round of every cell of every model, in this interpreter."""
    import factorflow as ff
    warnings.simplefilter("ignore", ff.ConvergenceWarning)
    out: dict[str, dict[str, float | None]] = {}
    for label, (compiled, init, hand, n) in programs().items():
        def run(s: int, tolerance: float | None = None, trace: bool = False,
                compiled: Any = compiled, init: Any = init) -> Any:
            return compiled.run(iterations=s, init=init, tolerance=tolerance, trace=trace,
                                progress=False)
        full = run(2 * n, 1e-300).iterations == 2 * n and run(n, 1e-300).iterations == n
        # the three runs of 2n sweeps interleaved, each the best of its own (a load that
        # changes during the round falls on all three), their differences a sweep's
        variants = {"plain": run, "traced": lambda s, run=run: run(s, trace=True),
                    "watched": lambda s, run=run: run(s, 1e-300)}
        if compiled.algorithm != "vmp":
            del variants["traced"]
        if not full:
            del variants["watched"]
        best = {k: float("inf") for k in variants}
        for _ in range(repeats):
            for k, variant in variants.items():
                start = time.process_time()
                variant(2 * n)
                best[k] = min(best[k], time.process_time() - start)
        extra = {k: (v - best["plain"]) / (2 * n) * 1e6 for k, v in best.items()}
        out[label] = {
            "hand": per_sweep(hand, n, repeats),
            "sweep": per_sweep(run, n, repeats),
            "bound": extra.get("traced", 0.0),
            "monitor": replayed_monitor(compiled, init, repeats),
            "in run": extra.get("watched"),
        }
    return out


def monitors_side_by_side(baseline: Path, repeats: int) -> None:
    """The monitor of this checkout and the baseline's (its ``_Monitor`` class loaded
    from ``baseline``'s ``runtime/compiled.py``), in this one process: replayed, and in
    the running sweep (runs of 2n sweeps with each in turn, and with none, interleaved;
    the best of ``repeats`` each)."""
    import importlib.util
    sys.path.insert(0, str(ROOT))  # (this checkout's factorflow, whatever is installed)

    import factorflow as ff
    from factorflow.runtime import compiled as here
    assert Path(ff.__file__).resolve().is_relative_to(ROOT), ff.__file__
    warnings.simplefilter("ignore", ff.ConvergenceWarning)
    spec = importlib.util.spec_from_file_location(
        "baseline_compiled", baseline / "factorflow" / "runtime" / "compiled.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    classes = {"this": here._Monitor, "baseline": module._Monitor}
    print("\nThe monitor side by side in one process: µs of CPU a sweep")
    print(f"{'model':<18}{'replayed':>11}{'baseline':>11}{'in run':>11}{'baseline':>11}")
    for label, (compiled, init, _, n) in programs().items():
        replay = {k: replayed_monitor(compiled, init, repeats, c) for k, c in classes.items()}
        best = {k: float("inf") for k in ("none", *classes)}
        full = compiled.run(iterations=2 * n, init=init, tolerance=1e-300,
                            progress=False).iterations == 2 * n
        for _ in range(repeats if full else 0):
            for k in best:
                here._Monitor = classes.get(k, classes["this"])
                start = time.process_time()
                compiled.run(iterations=2 * n, init=init, trace=False, progress=False,
                             tolerance=None if k == "none" else 1e-300)
                best[k] = min(best[k], time.process_time() - start)
        here._Monitor = classes["this"]
        run = [f"{(best[k] - best['none']) / (2 * n) * 1e6:11.1f}" if full else f"{'-':>11}"
               for k in classes]
        print(f"{label:<18}{replay['this']:11.1f}{replay['baseline']:11.1f}" + "".join(run))


def measure(path: Path, repeats: int) -> dict[str, dict[str, float | None]]:
    """``worker`` in its own interpreter on the factorflow at ``path``."""
    env = dict(os.environ, PYTHONPATH=str(path), OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    done = subprocess.run([sys.executable, __file__, "--worker", str(repeats)], env=env,
                          capture_output=True, text=True, check=True, cwd=str(ROOT))
    return json.loads(done.stdout.strip().splitlines()[-1])


def best(rounds: list[dict[str, dict[str, float | None]]]) -> dict[str, dict[str, Any]]:
    """Each cell's least over the rounds (None where a round had none)."""
    out: dict[str, dict[str, Any]] = {}
    for label in rounds[0]:
        out[label] = {}
        for cell in CELLS:
            values = [r[label][cell] for r in rounds if r[label][cell] is not None]
            out[label][cell] = min(values) if values else None
        row = out[label]
        watch = row["monitor"] if row["in run"] is None else row["in run"]
        row["default"] = row["sweep"] + watch + row["bound"]
        row["x hand"] = row["default"] / max(row["hand"], 1e-9)
    return out


def show(title: str, table: dict[str, dict[str, Any]],
         baseline: dict[str, dict[str, Any]] | None = None) -> None:
    print(f"\n{title}: µs of CPU a sweep")
    head = ["model", *CELLS, "default", "x hand"] + (["x baseline"] if baseline else [])
    print(f"{head[0]:<18}" + "".join(f"{h:>11}" for h in head[1:]))
    for label, row in table.items():
        cells = [row[c] for c in (*CELLS, "default")]
        text = "".join(f"{'-':>11}" if v is None else f"{v:11.1f}" for v in cells)
        text += f"{row['x hand']:11.1f}"
        if baseline:
            text += f"{row['default'] / baseline[label]['default']:11.2f}"
        print(f"{label:<18}{text}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="best of (per round)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per checkout")
    parser.add_argument("--baseline", type=Path, help="another factorflow checkout")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        print(json.dumps(worker(args.worker)))
        return
    now: list[dict[str, Any]] = []
    before: list[dict[str, Any]] = []
    for _ in range(args.rounds):  # (alternately: the machine's load falls on both)
        now.append(measure(ROOT, args.repeats))
        if args.baseline:
            before.append(measure(args.baseline, args.repeats))
    old = best(before) if before else None
    if old is not None:
        show(f"baseline ({args.baseline})", old)
    show(f"this checkout ({ROOT})", best(now), old)
    if args.baseline:
        monitors_side_by_side(args.baseline, args.repeats)


if __name__ == "__main__":
    main()
