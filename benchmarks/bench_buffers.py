"""Shared work read Fresh (factor buffers): time per EP sweep with and without it.

Greater's messages to ``a`` and ``b`` both need the truncated-Gaussian message to
d = a − b; Gate.EnterOne's messages to the value and to the cases both need the clone's
evidence.  With the buffer (the default) that work is done once per sweep and read Fresh;
``Factor.buffers_inlined()`` gives the program without it, where each operator does it
itself.  The models are EP TrueSkill and the EP Gaussian mixture under ``ff.Switch``
(``tests/runtime/handwritten.py``).

Run: ``python benchmarks/bench_buffers.py`` (``--sizes 100:10000 1000:100000``,
``--points 10000 100000``, ``--sweeps 20``).  Prints, per model, the milliseconds per
sweep both ways (the median sweep in CPU time of this process, so that other work on the
machine counts little; the best of ``--repeat`` alternated runs) and the part of it spent
in the factor's operators (and buffer), with their ratios, and the largest difference
between the two runs' posteriors; for TrueSkill also the truncated-moment evaluations
per sweep.
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
from tests.runtime.handwritten import (  # noqa: E402
    MIX_INIT,
    MIX_K,
    mixture_data,
    mixture_model,
    trueskill_games,
    trueskill_model,
)

#: seconds spent in the timed factor's operators and buffers (``time_factor`` wraps them)
SPENT = [0.0]


def time_factor(name: str) -> None:
    """Wrap every operator (and buffer) of factor ``name`` so that the time inside
    accumulates in SPENT; programs compiled afterwards call the wrapped functions."""
    factor = FACTORS[name]

    def timed(fn):
        def run(**args):
            start = time.process_time()
            try:
                return fn(**args)
            finally:
                SPENT[0] += time.process_time() - start
        return run

    for key, op in list(factor.operators.items()):
        factor.operators[key] = dataclasses.replace(op, fn=timed(op.fn))


def per_sweep(compiled, sweeps: int, name: str, init: dict | None
              ) -> tuple[float, float, ff.distributions.Distribution]:
    """(seconds per sweep, seconds per sweep inside the timed factor, the posterior of
    ``name``): medians over ``sweeps`` sweeps, each timed from the end of the one before
    (so compiling and the initialisation do not count, nor a busy machine's slowest
    sweeps)."""
    marks: list[tuple[float, float]] = []

    def mark(*_):
        marks.append((time.process_time(), SPENT[0]))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ff.ConvergenceWarning)
        compiled.run(iterations=1, tolerance=None, progress=False, init=init)  # warm
        result = compiled.run(iterations=sweeps + 1, tolerance=None, progress=False,
                              on_iteration=mark, init=init)
    steps = np.diff(np.array(marks), axis=0)
    return float(np.median(steps[:, 0])), float(np.median(steps[:, 1])), result[name]


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


def cases(sizes: list[str], points: list[int]):
    """(label, factor, model builder, posterior name, init) for each row."""
    for size in sizes:
        players, games = (int(v) for v in size.split(":"))
        winner, loser = trueskill_games(players, games)
        yield (f"EP TrueSkill {players}/{winner.size}", "Greater",
               lambda w=winner, lo=loser, p=players: trueskill_model(p, w, lo), "skill", None)
    for n in points:
        x = mixture_data(n)
        init = {"means": ff.distributions.Gaussian(MIX_INIT, np.ones(MIX_K))}
        yield (f"EP mixture k=3 n={n}", "Gate.EnterOne",
               lambda x=x: mixture_model(x), "means", init)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["100:10000", "1000:100000"],
                        help="TrueSkill players:games")
    parser.add_argument("--points", nargs="+", type=int, default=[10_000, 100_000],
                        help="EP mixture data sizes")
    parser.add_argument("--sweeps", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for name in ("Greater", "Gate.EnterOne"):
        time_factor(name)
    print(f"{'model':<26} {'sweep ms':>8} {'inlined':>8} {'ratio':>5}  {'factor ms':>9} "
          f"{'inlined':>8} {'ratio':>5}  {'max |Δ posterior|':>17}")
    for label, factor, build, name, init in cases(args.sizes, args.points):
        owner = FACTORS[factor]
        shared = build().compile("ep", init=list(init or ()))
        with owner.buffers_inlined():
            inlined = build().compile("ep", init=list(init or ()))
        best = {"shared": (math.inf, math.inf), "inlined": (math.inf, math.inf)}
        posterior = {}
        for _ in range(args.repeat):  # alternated, best of each: a busy machine drifts
            for variant, compiled in (("shared", shared), ("inlined", inlined)):
                if variant == "inlined":
                    with owner.buffers_inlined():
                        sweep, inside, posterior[variant] = per_sweep(
                            compiled, args.sweeps, name, init)
                else:
                    sweep, inside, posterior[variant] = per_sweep(
                        compiled, args.sweeps, name, init)
                best[variant] = (min(best[variant][0], sweep), min(best[variant][1], inside))
        a, b = posterior["shared"], posterior["inlined"]
        delta = max(float(np.max(np.abs(a.mean - b.mean))),
                    float(np.max(np.abs(a.variance - b.variance))))
        (t_s, g_s), (t_i, g_i) = best["shared"], best["inlined"]
        print(f"{label:<26} {1e3 * t_s:>8.1f} {1e3 * t_i:>8.1f} {t_i / t_s:>5.2f}  "
              f"{1e3 * g_s:>9.2f} {1e3 * g_i:>8.2f} {g_i / g_s:>5.2f}  {delta:>17.1e}")
        if factor == "Greater":
            m_shared = moment_calls(shared, 2)
            with owner.buffers_inlined():
                m_inlined = moment_calls(inlined, 2)
            print(f"{'':<26} truncated-moment evaluations per sweep: {m_shared:.0f} vs "
                  f"{m_inlined:.0f}")


if __name__ == "__main__":
    main()
