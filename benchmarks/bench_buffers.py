"""Shared work read Fresh (factor buffers): time per EP sweep with and without it.

Greater's messages to ``a`` and ``b`` both need the truncated-Gaussian message to
d = a − b.  With the buffer (the default) it is computed once per sweep and read Fresh by
both; ``Factor.buffers_inlined()`` gives the program without it, where each operator
computes it itself.  The model is EP TrueSkill (``tests/runtime/handwritten.py``).

Run: ``python benchmarks/bench_buffers.py`` (``--sizes 100:10000 1000:100000``,
``--sweeps 20``).  Prints, per size, the seconds per sweep both ways (the difference of
runs of 2k and k sweeps, best of ``--repeat``, so compiling and the first evidence do not
count), their ratio, the truncated-moment evaluations per sweep, and the largest
difference between the two runs' posteriors.
"""

from __future__ import annotations

import argparse
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


def per_sweep(compiled, sweeps: int, repeat: int) -> tuple[float, ff.distributions.Gaussian]:
    """Seconds per sweep: (time of 2k sweeps − time of k sweeps) / k, best of ``repeat``."""
    best = math.inf
    result = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ff.ConvergenceWarning)
        for _ in range(repeat):
            times = []
            for k in (sweeps, 2 * sweeps):
                start = time.perf_counter()
                result = compiled.run(iterations=k, tolerance=None, progress=False)
                times.append(time.perf_counter() - start)
            best = min(best, (times[1] - times[0]) / sweeps)
    return best, result["skill"]


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
    print(f"{'players':>8} {'games':>8}  {'shared ms':>9}  {'inlined ms':>10}  {'ratio':>5}  "
          f"{'moments/sweep':>13}  {'max |Δ posterior|':>17}")
    for size in args.sizes:
        players, games = (int(v) for v in size.split(":"))
        winner, loser = trueskill_games(players, games)
        shared = trueskill_model(players, winner, loser).compile("ep")
        with greater.buffers_inlined():
            inlined = trueskill_model(players, winner, loser).compile("ep")
            t_inlined, q_inlined = per_sweep(inlined, args.sweeps, args.repeat)
            m_inlined = moment_calls(inlined, 2)
        t_shared, q_shared = per_sweep(shared, args.sweeps, args.repeat)
        m_shared = moment_calls(shared, 2)
        delta = max(float(np.max(np.abs(q_shared.mean - q_inlined.mean))),
                    float(np.max(np.abs(q_shared.variance - q_inlined.variance))))
        print(f"{players:>8} {winner.size:>8}  {1e3 * t_shared:>9.1f}  {1e3 * t_inlined:>10.1f}"
              f"  {t_inlined / t_shared:>5.2f}  {m_shared:>6.0f} vs {m_inlined:<4.0f}"
              f"  {delta:>17.1e}")


if __name__ == "__main__":
    main()
