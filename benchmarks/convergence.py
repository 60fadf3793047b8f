"""Sweeps to converge and time per sweep: factorflow against hand-written message passing.

For each model, a hand-written vectorised NumPy implementation of the same algorithm
(``tests/runtime/handwritten.py``) gives the reference fixed point (run until the distance
to it, estimated from the rate at which its steps shrink, is below 1e-9); both are then
run sweep by sweep, and the table shows how many sweeps each needs to stay within
``--tol`` (default 1e-3) of that fixed point — the largest difference of any posterior
mean or variance — the time per sweep, side by side with their ratios, and the time to
solution (those sweeps times the time per sweep); "ff final" is factorflow's distance
after its last sweep.

* EP TrueSkill: ``skill[winner]``, ``skill[loser]`` (prior N(25, 70)), performance noise of
  variance 16, ``constrain_true(pw > pl)``; the hand-written EP gathers the skills,
  divides out each game's messages (cavities), computes the truncated-Gaussian moments
  of every game at once and scatters the new messages back with ``np.bincount`` (a
  parallel sweep: every game reads the posteriors of the previous sweep).
* VMP Gaussian mixture (3 components, unit precision, Dirichlet(1) weights, means
  N(0, 100), the README's mixture): coordinate ascent weights -> z -> means by hand.
* The sprinkler network (cloudy -> sprinkler, rain -> wet grass, observed wet; written
  with gates): loopy EP against loopy belief propagation by hand (the same fixed point).
* Chains (T = 1,000 and 25,000): a 3-state HMM with known transitions and emissions
  (``ff.If(t == 0)`` / ``ff.If(t > 0)``, ``ff.Switch(x)`` for the emissions) against
  scaled forward–backward by hand, and a 1-D linear-Gaussian state-space model against a
  Kalman filter and RTS smoother by hand, one t at a time; both are exact in one pass,
  so the reference fixed point is the hand-written pass (the posterior mean and variance
  of x[t]: for the HMM, of the state's index).

A second table runs each model with the default settings (``model.infer(algorithm)``:
until converged, tolerance 1e-10) and prints the sweeps it took, whether it converged,
whether it warned, and its distance to the reference fixed point.

Last, EP TrueSkill's time per sweep (the largest size run) in alternating rounds against
the hand-written EP, with the median of the rounds' ratios (a drifting machine speed moves
the rows above, measured apart).

Run: ``python benchmarks/convergence.py`` (``--quick`` for the small sizes only;
``--paired [--rounds R]`` for the paired TrueSkill rounds alone, ``--statements`` for
TrueSkill's CPU µs per statement of one sweep, the generated program's and the
hand-written EP's side by side).
"""

from __future__ import annotations

import argparse
import collections
import inspect
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import factorflow as ff  # noqa: E402
from tests.runtime.handwritten import (  # noqa: E402
    MIX_INIT,
    MIX_K,
    Trace,
    distance,
    factorflow_trace,
    hmm_data,
    hmm_forward_backward,
    hmm_model,
    mixture_data,
    mixture_model,
    mixture_vmp,
    sprinkler_bp,
    sprinkler_model,
    ssm_data,
    ssm_model,
    ssm_rts,
    sweeps_within,
    trueskill_ep,
    trueskill_games,
    trueskill_model,
)


def hand_time(run: Callable[[int], Trace], sweeps: int) -> float:
    start = time.perf_counter()
    run(sweeps)
    return (time.perf_counter() - start) / sweeps


def row(label: str, ff_trace: Trace, ff_sec: float, hand: Trace, hand_sec: float,
        ref: tuple[np.ndarray, np.ndarray], tol: float) -> str:
    a, b = sweeps_within(ff_trace, ref, tol), sweeps_within(hand, ref, tol)
    ratio = f"{a / b:6.2f}" if a and b else "     -"
    fmt = lambda s: f"{s:>8d}" if s else f">{len(ff_trace):>7d}"  # noqa: E731
    # time to solution: the sweeps to the tolerance times the time per sweep
    solve = (f"{1e3 * a * ff_sec:10.1f} {1e3 * b * hand_sec:10.1f}" if a and b
             else f"{'-':>10} {'-':>10}")
    return (f"{label:<34} {fmt(a)} {fmt(b)} {ratio}   {1e3 * ff_sec:9.2f} {1e3 * hand_sec:9.2f}"
            f" {ff_sec / hand_sec:6.1f}   {solve}   {distance(ff_trace[-1], ref):9.1e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tol", type=float, default=1e-3)
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    parser.add_argument("--paired", action="store_true",
                        help="only the paired TrueSkill rounds (1,000 players, 10^5 games)")
    parser.add_argument("--statements", action="store_true",
                        help="only TrueSkill's CPU µs per statement of one sweep, both sides")
    parser.add_argument("--rounds", type=int, default=8, help="paired rounds (--paired)")
    args = parser.parse_args()
    if args.paired or args.statements:
        print(statement_profile(1000, 100_000) if args.statements
              else paired_trueskill(1000, 100_000, rounds=args.rounds))
        return
    print(f"sweeps until within {args.tol:g} of the fixed point (max |Δ mean|, |Δ variance|)"
          ", ms per sweep, and ms to solution (sweeps × ms per sweep)")
    print(f"{'model':<34} {'ff':>8} {'hand':>8} {'ratio':>6}   {'ff ms':>9} {'hand ms':>9}"
          f" {'ratio':>6}   {'ff to sol':>10} {'hand to sol':>10}   {'ff final':>9}")
    sizes = [(20, 500, 300)] if args.quick else [(20, 500, 300), (1000, 100_000, 900)]
    defaults = []  # (label, model, algorithm, names, reference, init) for the second table
    for players, games, sweeps in sizes:
        winner, loser = trueskill_games(players, games)
        ref = trueskill_ep(players, winner, loser, 20_000, stop=1e-12)[-1]
        hand = trueskill_ep(players, winner, loser, sweeps)
        hand_sec = hand_time(lambda s: trueskill_ep(players, winner, loser, s),  # noqa: B023
                             min(sweeps, 100))
        model = trueskill_model(players, winner, loser)
        ff_trace, ff_sec = factorflow_trace(model, "ep", "skill", sweeps)
        label = f"EP TrueSkill {players} players/{winner.size} games"
        print(row(label, ff_trace, ff_sec, hand, hand_sec, ref, args.tol))
        defaults.append((label, model, "ep", "skill", ref, None))
    for n in [200] if args.quick else [200, 20_000]:
        x = mixture_data(n)
        ref = mixture_vmp(x, 20_000, stop=1e-12)[-1]
        hand = mixture_vmp(x, 200)
        hand_sec = hand_time(lambda s: mixture_vmp(x, s), 200)  # noqa: B023
        init = {"means": ff.distributions.Gaussian(MIX_INIT, np.ones(MIX_K))}
        ff_trace, ff_sec = factorflow_trace(mixture_model(x), "vmp", "means", 200, init)
        label = f"VMP mixture k=3 n={n}"
        print(row(label, ff_trace, ff_sec, hand, hand_sec, ref, args.tol))
        defaults.append((label, mixture_model(x), "vmp", "means", ref, init))
    for t_len in [1000] if args.quick else [1000, 25_000]:
        emission, obs = hmm_data(t_len)
        y = ssm_data(t_len)
        chains = (("HMM 3 states", hmm_model(emission, obs),
                   lambda s: hmm_forward_backward(emission, obs, s)),  # noqa: B023
                  ("state space", ssm_model(y), lambda s: ssm_rts(y, s)))  # noqa: B023
        for name, model, by_hand in chains:
            ref = by_hand(1)[-1]  # exact in one pass
            hand = by_hand(10)
            hand_sec = hand_time(by_hand, 3)
            for algorithm in ("ep", "vmp"):
                ff_trace, ff_sec = factorflow_trace(model, algorithm, "x", 10)
                label = f"{algorithm.upper()} {name} T={t_len:,}"
                print(row(label, ff_trace, ff_sec, hand, hand_sec, ref, args.tol))
                defaults.append((label, model, algorithm, "x", ref, None))
    names = ("cloudy", "sprinkler", "rain")
    ref = sprinkler_bp(20_000, stop=1e-13)[-1]
    hand = sprinkler_bp(100)
    hand_sec = hand_time(sprinkler_bp, 100)
    ff_trace, ff_sec = factorflow_trace(sprinkler_model(), "ep", names, 100)
    print(row("loopy EP sprinkler (vs loopy BP)", ff_trace, ff_sec, hand, hand_sec, ref,
              args.tol))
    defaults.append(("loopy EP sprinkler", sprinkler_model(), "ep", names, ref, None))
    print()
    print("default settings: model.infer(algorithm) (until converged, tolerance 1e-10)")
    print(f"{'model':<34} {'sweeps':>7} {'converged':>9} {'warned':>6} {'seconds':>8}"
          f" {'distance':>9}")
    for label, model, algorithm, name, ref, init in defaults:
        print(default_row(label, model, algorithm, name, ref, init))
    players, games, _ = sizes[-1]
    print()
    print(paired_trueskill(players, games))


def paired_trueskill(players: int, games: int, rounds: int = 8, sweeps: int = 30) -> str:
    """EP TrueSkill's time per sweep against the hand-written EP in alternating rounds
    (factorflow's ``run`` with no callback, less a run of no sweeps): the median of the
    rounds' ratios holds up where the machine's speed drifts between the rows above.
    Wall-clock time, and beside it the CPU time of this thread (``time.thread_time``:
    on a loaded machine the waits for a core are not counted), with the load average."""
    winner, loser = trueskill_games(players, games)
    compiled = trueskill_model(players, winner, loser).compile("ep")
    ours, hand, ours_cpu, hand_cpu = [], [], [], []
    load = os.getloadavg()[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ff.ConvergenceWarning)
        for _ in range(rounds):
            start, cpu = time.perf_counter(), time.thread_time()
            compiled.run(iterations=sweeps, tolerance=None, progress=False)
            middle, cpu_middle = time.perf_counter(), time.thread_time()
            compiled.run(iterations=0, tolerance=None, progress=False)
            ours.append((2 * middle - start - time.perf_counter()) / sweeps)
            ours_cpu.append((2 * cpu_middle - cpu - time.thread_time()) / sweeps)
            cpu = time.thread_time()
            hand.append(hand_time(lambda s: trueskill_ep(players, winner, loser, s), sweeps))
            hand_cpu.append((time.thread_time() - cpu) / sweeps)
    ratios = np.array(ours) / np.array(hand)
    cpu_ratios = np.array(ours_cpu) / np.array(hand_cpu)
    return (f"EP TrueSkill {players} players/{winner.size} games, {rounds} paired rounds of "
            f"{sweeps} sweeps (load {load:.1f} to {os.getloadavg()[0]:.1f}): factorflow "
            f"{1e3 * np.median(ours):.2f} ms, hand-written {1e3 * np.median(hand):.2f} ms per "
            f"sweep; ratio median {np.median(ratios):.2f} (min {ratios.min():.2f}, max "
            f"{ratios.max():.2f}); CPU time {1e3 * np.median(ours_cpu):.2f} ms against "
            f"{1e3 * np.median(hand_cpu):.2f}, ratio median {np.median(cpu_ratios):.2f} "
            f"(min {cpu_ratios.min():.2f}, max {cpu_ratios.max():.2f})")


def statement_profile(players: int, games: int, sweeps: int = 20) -> str:
    """CPU µs of each statement of one EP TrueSkill sweep (the median over ``sweeps``
    sweeps), factorflow's generated program (``compiled.source``) and the hand-written
    EP's lines, timed by a line tracer with ``time.thread_time`` (a statement's time
    includes the tracer's few µs)."""
    winner, loser = trueskill_games(players, games)
    compiled = trueskill_model(players, winner, loser).compile("ep")
    lines: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ff.ConvergenceWarning)
        compiled.run(iterations=3, tolerance=None, progress=False)
        sides = (("factorflow", compiled._infer.__code__, compiled.source.splitlines(), 1,
                  lambda s: compiled.run(iterations=s, tolerance=None, progress=False)),
                 ("hand-written", trueskill_ep.__code__,
                  *inspect.getsourcelines(trueskill_ep),
                  lambda s: trueskill_ep(players, winner, loser, s)))
        for label, code, source, first, run in sides:
            per_line = _line_times(code, run, sweeps)
            total = 0.0
            lines.append(f"{label}: CPU µs per statement, one sweep (median of {sweeps})")
            for number in sorted(per_line):
                calls, us = per_line[number]
                if calls < 0.99 or calls > 1.01:  # (statements outside the sweep's loop)
                    continue
                total += us
                lines.append(f"{us:9.0f}  {source[number - first].strip()[:110]}")
            lines.append(f"{total:9.0f}  total of one sweep, {label}")
    return "\n".join(lines)


def _line_times(code: Any, run: Callable[[int], Any], sweeps: int
                ) -> dict[int, tuple[float, float]]:
    """{line: (runs per sweep, median CPU µs)} of the lines of ``code`` in ``run(sweeps)``."""
    times: dict[int, list[float]] = collections.defaultdict(list)
    last: list[Any] = [None, 0.0]

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code is not code:
            return None

        def local(frame: Any, event: str, arg: Any) -> Any:
            now = time.thread_time()
            if last[0] is not None:
                times[last[0]].append(now - last[1])
            last[0] = frame.f_lineno if event == "line" else None
            last[1] = time.thread_time()
            return local
        return local

    sys.settrace(tracer)
    try:
        run(sweeps)
    finally:
        sys.settrace(None)
    return {line: (len(ts) / sweeps, 1e6 * float(np.median(ts))) for line, ts in times.items()}


def default_row(label: str, model: ff.Model, algorithm: str, name: str | tuple[str, ...],
                ref: tuple[np.ndarray, np.ndarray], init: dict | None) -> str:
    """One run with the default settings: sweeps, converged, warned, seconds, and the
    distance of its posteriors to the reference fixed point."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ff.ConvergenceWarning)
        start = time.perf_counter()
        result = model.infer(algorithm, init=init, progress=False)
        seconds = time.perf_counter() - start
    warned = any(issubclass(w.category, ff.ConvergenceWarning) for w in caught)
    names = (name,) if isinstance(name, str) else name
    got = (np.concatenate([np.ravel(result[n].mean) for n in names]),
           np.concatenate([np.ravel(result[n].variance) for n in names]))
    return (f"{label:<34} {result.iterations:>7d} {str(result.converged):>9} "
            f"{str(warned):>6} {seconds:>8.1f} {distance(got, ref):>9.1e}")


if __name__ == "__main__":
    main()
