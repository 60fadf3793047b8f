"""Shared work read Fresh (factor buffers): time per EP sweep with and without it.

Greater's messages to ``a`` and ``b`` both need the truncated-Gaussian message to
d = a − b.  With the buffer (the default) it is computed once per sweep and read Fresh by
both; ``Factor.buffers_inlined()`` gives the program without it, where each operator
computes it itself.  The model is EP TrueSkill (``tests/runtime/handwritten.py``).

Run: ``python benchmarks/bench_buffers.py`` (``--sizes 100:10000 1000:100000``,
``--sweeps 20``).  Prints, per size, the milliseconds per sweep both ways (the median
sweep in CPU time of this process, so that other work on the machine counts little; the
best of ``--repeat`` alternated runs) and the part of it spent in Greater's
operators (and buffer), with their ratios, the truncated-moment evaluations per sweep,
and the largest difference between the two runs' posteriors.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import factorflow as ff
from factorflow.factors import FACTORS, compare

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.runtime.handwritten import trueskill_games, trueskill_model  # noqa: E402

#: seconds spent in Greater's operators and buffer (``time_greater`` wraps them)
SPENT = [0.0]


def time_greater() -> None:
    """Wrap every Greater operator (and buffer) so that the time inside accumulates in
    SPENT; programs compiled afterwards call the wrapped functions."""
    greater = FACTORS["Greater"]

    def timed(fn):
        def run(**args):
            start = time.process_time()
            try:
                return fn(**args)
            finally:
                SPENT[0] += time.process_time() - start
        return run

    for key, op in list(greater.operators.items()):
        greater.operators[key] = dataclasses.replace(op, fn=timed(op.fn))


def per_sweep(compiled, sweeps: int) -> tuple[float, float, ff.distributions.Gaussian]:
    """(seconds per sweep, seconds per sweep inside Greater's operators and buffer, the
    posterior of skill): medians over ``sweeps`` sweeps, each timed from the end of the
    one before (so compiling and the initialisation do not count, nor a busy machine's
    slowest sweeps)."""
    marks: list[tuple[float, float]] = []

    def mark(*_):
        marks.append((time.process_time(), SPENT[0]))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ff.ConvergenceWarning)
        compiled.run(iterations=1, tolerance=None, progress=False)  # warm (lazy imports)
        result = compiled.run(iterations=sweeps + 1, tolerance=None, progress=False,
                              on_iteration=mark)
    steps = np.diff(np.array(marks), axis=0)
    return float(np.median(steps[:, 0])), float(np.median(steps[:, 1])), result["skill"]


def moment_calls(compiled, sweeps: int) -> float:
    """Evaluations of the truncated-Gaussian moments per sweep."""
    calls = 0
    original = compare.truncated_normal_moments

    def counted(t):
        nonlocal calls
        calls += 1
        return original(t)

    compare.truncated_normal_moments = counted
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ff.ConvergenceWarning)
            compiled.run(iterations=sweeps, tolerance=None, progress=False)
            before = calls
            compiled.run(iterations=2 * sweeps, tolerance=None, progress=False)
    finally:
        compare.truncated_normal_moments = original
    return (calls - 2 * before) / sweeps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["100:10000", "1000:100000"],
                        help="players:games")
    parser.add_argument("--sweeps", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    greater = FACTORS["Greater"]
    time_greater()
    print(f"{'players':>8} {'games':>8}  {'sweep ms':>8} {'inlined':>8} {'ratio':>5}  "
          f"{'Greater ms':>10} {'inlined':>8} {'ratio':>5}  {'moments/sweep':>13}  "
          f"{'max |Δ posterior|':>17}")
    for size in args.sizes:
        players, games = (int(v) for v in size.split(":"))
        winner, loser = trueskill_games(players, games)
        shared = trueskill_model(players, winner, loser).compile("ep")
        with greater.buffers_inlined():
            inlined = trueskill_model(players, winner, loser).compile("ep")
        best = {"shared": (math.inf, math.inf), "inlined": (math.inf, math.inf)}
        posterior = {}
        for _ in range(args.repeat):  # alternated, best of each: a busy machine drifts
            for name, compiled in (("shared", shared), ("inlined", inlined)):
                if name == "inlined":
                    with greater.buffers_inlined():
                        sweep, inside, posterior[name] = per_sweep(compiled, args.sweeps)
                else:
                    sweep, inside, posterior[name] = per_sweep(compiled, args.sweeps)
                best[name] = (min(best[name][0], sweep), min(best[name][1], inside))
        m_shared = moment_calls(shared, 2)
        with greater.buffers_inlined():
            m_inlined = moment_calls(inlined, 2)
        q_shared, q_inlined = posterior["shared"], posterior["inlined"]
        delta = max(float(np.max(np.abs(q_shared.mean - q_inlined.mean))),
                    float(np.max(np.abs(q_shared.variance - q_inlined.variance))))
        (t_s, g_s), (t_i, g_i) = best["shared"], best["inlined"]
        print(f"{players:>8} {winner.size:>8}  {1e3 * t_s:>8.1f} {1e3 * t_i:>8.1f} "
              f"{t_i / t_s:>5.2f}  {1e3 * g_s:>10.2f} {1e3 * g_i:>8.2f} {g_i / g_s:>5.2f}  "
              f"{m_shared:>6.0f} vs {m_inlined:<4.0f}  {delta:>17.1e}")


if __name__ == "__main__":
    main()
