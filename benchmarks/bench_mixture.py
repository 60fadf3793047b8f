"""The VMP 1-D Gaussian mixture (``benchmarks/mixture_reference.py``), factorflow against
the hand-written NumPy updates, and against another factorflow checkout (before/after),
side by side in one run.

Each system runs in its own interpreter (so that two factorflow checkouts can be timed
in one run), one BLAS thread; the measurements go round the systems in turn, ``--rounds``
times, and each row keeps its best: CPU time per sweep (``time.process_time`` of 2n
sweeps minus n sweeps: set-up and the final bound are not counted).  Rows: factorflow's
``run()`` as it is by default under VMP (the bound after every sweep, ``trace=True``) and
with ``trace=False``; the ratio to the hand-written updates (which compute no bound),
and with ``--baseline`` each factorflow row's ratio to the baseline's same row.
Every factorflow row is checked against the hand-written posterior means (1e-8).

With ``--gaussian N`` the same rows for learning a Gaussian from N points under VMP
(mean ~ N(0, 100), precision ~ Gamma(1, 1): ``benchmarks/run.py``'s model) against its
hand-written updates (``benchmarks.bench_foundation.hand_written``), where the cost of
a sweep at small N is the Python in the operators.

With ``--gate`` also this checkout with the Switch left to the gate path
(``compile(..., fuse_switch=False)``: no ``transforms.fuse_switch``; with ``--baseline``
the baseline's too, each gate row's ratio to the baseline's), and without
``--baseline`` the "× before" column is the fused rows against those.

Run: ``python benchmarks/bench_mixture.py [--baseline PATH] [--gate] [--rounds R] [--sizes K,N
...] [--gaussian N]``, PATH a
checkout of another factorflow (``git worktree add --detach /tmp/base main``).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZES = ((10, 200), (40, 2000), (40, 20_000))


def worker(k: int, n: int, system: str, trace: bool) -> dict[str, float]:
    """Seconds of CPU per sweep of ``system`` ("hand", "factorflow", or "gate": factorflow
    with the Switch left to the gate path, ``fuse_switch=False``) on K = k, N = n, best
    of 3 (2s sweeps minus s), and the largest error of its means."""
    import warnings

    import numpy as np

    sys.path.append(str(ROOT))  # (for ``benchmarks``: PYTHONPATH's factorflow comes first)
    import factorflow as ff
    from benchmarks import mixture_reference as mix
    from benchmarks.run import per_iteration
    warnings.simplefilter("ignore", ff.ConvergenceWarning)
    if k == 0:
        return gaussian_worker(n, system, trace)
    x = mix.data(k, n)
    sweeps = max(4, 40_000 // n)
    if system == "hand":
        def run(s: int) -> object:
            return mix.hand_written(x, k, s)
        error = 0.0
    else:
        # (this checkout fuses on request; a baseline checkout may predate the option)
        from factorflow.runtime.compiled import compile_model
        fuse = ({"fuse_switch": system != "gate"}
                if "fuse_switch" in inspect.signature(compile_model).parameters else {})
        compiled = mix.model(x, k).compile("vmp", init=["means"], **fuse)
        init = mix.factorflow_init(x, k)

        def run(s: int) -> object:
            return compiled.run(iterations=s, init=init, tolerance=None, progress=False,
                                trace=trace)
        got = run(sweeps)["means"].mean
        error = float(np.max(np.abs(got - mix.hand_written(x, k, sweeps).mean)))
        assert error < 1e-8, f"{ff.__file__}: the means differ from the hand-written by {error}"
    run(2)  # warm
    return {"seconds": per_iteration(run, sweeps), "error": error,
            "module": ff.__file__}


def gaussian_worker(n: int, system: str, trace: bool) -> dict[str, float]:
    """``worker`` for learning a Gaussian from ``n`` points (``--gaussian``): seconds of
    CPU per sweep and the largest error of q(mean)'s mean and q(prec)'s mean against the
    hand-written updates after the same sweeps (both at their fixed point)."""
    import numpy as np

    import factorflow as ff
    from benchmarks.bench_foundation import hand_written
    from benchmarks.run import per_iteration
    x = np.random.default_rng(1).normal(3.0, 2.0, n)
    sweeps = max(50, 40_000 // n)
    if system == "hand":
        return {"seconds": per_iteration(lambda s: hand_written(x, s), sweeps), "error": 0.0,
                "module": ff.__file__}
    sys.path.append(str(ROOT / "examples"))
    import learning_gaussian
    compiled = learning_gaussian.build(x).compile("vmp")

    def run(s: int) -> object:
        return compiled.run(iterations=s, tolerance=None, progress=False, trace=trace)
    got = run(sweeps).posteriors
    m, _, a, b = hand_written(x, sweeps)
    error = max(abs(float(got["mean"].mean) - m), abs(float(got["prec"].mean) - a / b))
    assert error < 1e-8, f"{ff.__file__}: learning a Gaussian differs by {error}"
    run(2)  # warm
    return {"seconds": per_iteration(run, sweeps), "error": error, "module": ff.__file__}


def bound_terms(k: int, n: int) -> None:
    """The bound's three (N, K) terms of the mixture, Σ_k q_nk (E[log w_k] + ℓ_nk −
    log q_nk) per datum (the Discrete's, the gate's Σ q ℓ and the entropy), on the
    posteriors of a run, computed three ways: as three ``einsum`` passes (E[log w]
    broadcast: the code before), as a matrix-vector product and two ``einsum`` passes
    (the code now: ``discrete._rows_dot``), and as one pass over blocks of rows (the three
    summed in cache, a block of 32,768 elements at a time); and by factorflow's own
    evidence operators.  CPU ms each, best of 7; the largest difference from the first."""
    import timeit
    import warnings

    import numpy as np

    sys.path.append(str(ROOT))
    import factorflow as ff
    from benchmarks import mixture_reference as mix
    from factorflow.distributions.base import log_normalize
    from factorflow.distributions.moments import Elog
    from factorflow.factors import discrete, gate
    warnings.simplefilter("ignore", ff.ConvergenceWarning)
    x = mix.data(k, n)
    compiled = mix.model(x, k).compile("vmp", init=["means"])
    post = compiled.run(iterations=30, init=mix.factorflow_init(x, k), tolerance=None,
                        progress=False)
    z, w = post["z"], post["weights"]
    q, logq, elog = z.probs, log_normalize(z.eta[0]), w.mean_log()
    tau, m, v = post["precs"].mean, post["means"].mean, post["means"].variance
    ell = (0.5 * Elog(post["precs"]) - 0.5 * np.log(2 * np.pi)
           - 0.5 * tau * ((x[:, None] - m) ** 2 + v))                      # (N, K)
    cases = ff.distributions.Bernoulli.from_natural(ell)

    def three() -> np.ndarray:
        return (np.einsum("...k,...k->...", q, elog)
                - np.einsum("...k,...k->...", q, logq) + np.einsum("...k,...k->...", q, ell))

    def now() -> np.ndarray:
        return (q @ elog - np.einsum("...k,...k->...", q, logq)
                + np.einsum("...k,...k->...", q, ell))

    def blocked() -> np.ndarray:
        step = max(1, 32768 // k)
        out = np.empty(n)
        for i in range(0, n, step):
            rows = slice(i, i + step)
            t = np.subtract(ell[rows], logq[rows])
            out[rows] = np.einsum("nk,nk->n", q[rows], t) + q[rows] @ elog
        return out

    def kernels() -> np.ndarray:
        return (discrete._average_log_factor(z, w) + z.entropy()
                + gate._cases_average_log_factor(cases, z))

    want = three()
    print(f"K, N = {k}, {n:,}: the bound's (N, K) terms, ms (× the three einsums), "
          f"max relative difference")
    first = None
    for name, fn in (("three einsum passes (before)", three),
                     ("matrix-vector + two einsums (now)", now),
                     ("one pass over blocks of rows", blocked),
                     ("factorflow's evidence operators", kernels)):
        got = fn()
        diff = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
        seconds = min(timeit.repeat(fn, number=10, repeat=7)) / 10
        first = first or seconds
        print(f"  {name:<36} {seconds * 1e3:8.3f} {seconds / first:6.2f} {diff:10.1e}")


def measure(path: Path, k: int, n: int, system: str, trace: bool) -> dict[str, float]:
    """``worker`` in a fresh interpreter with ``path``'s factorflow first on the path."""
    env = dict(os.environ, PYTHONPATH=str(path), OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run([sys.executable, __file__, "--worker", str(k), str(n), system,
                          str(int(trace))], env=env, capture_output=True, text=True,
                         check=True, cwd=str(ROOT))
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if not Path(got.pop("module")).resolve().is_relative_to(path.resolve()):
        raise SystemExit(f"{path}: its factorflow was not the one imported")
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", type=Path, help="another factorflow checkout")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", nargs="+", metavar="K,N",
                        help="the (K, N) to time (default: 10,200 40,2000 40,20000)")
    parser.add_argument("--bound-terms", action="store_true",
                        help="time the bound's three (N, K) terms three ways instead")
    parser.add_argument("--gaussian", type=int, metavar="N",
                        help="learning a Gaussian from N points instead of the mixture")
    parser.add_argument("--gate", action="store_true",
                        help="also this checkout's gate path (fuse_switch=False)")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bound_terms:
        for k, n in ([tuple(int(v) for v in s.split(",")) for s in args.sizes]
                     if args.sizes else SIZES):
            bound_terms(k, n)
        return
    if args.worker:
        k, n, system, trace = args.worker
        print(json.dumps(worker(int(k), int(n), system, trace == "1")))
        return
    systems = [("hand-written NumPy", ROOT, "hand", False),
               ("factorflow", ROOT, "factorflow", True),
               ("factorflow, trace=False", ROOT, "factorflow", False)]
    if args.gate:
        systems += [("gate path", ROOT, "gate", True),
                    ("gate path, trace=False", ROOT, "gate", False)]
    if args.baseline is not None:
        systems += [("baseline factorflow", args.baseline, "factorflow", True),
                    ("baseline, trace=False", args.baseline, "factorflow", False)]
        if args.gate:
            systems += [("baseline gate path", args.baseline, "gate", True),
                        ("baseline gate, trace=False", args.baseline, "gate", False)]
    # (after / before: the factorflow rows against the baseline's same row)
    before = {"factorflow": "baseline factorflow",
              "factorflow, trace=False": "baseline, trace=False",
              "gate path": "baseline gate path",
              "gate path, trace=False": "baseline gate, trace=False"}
    if args.baseline is None and args.gate:  # (the fused rows against the gate path's)
        before = {"factorflow": "gate path", "factorflow, trace=False": "gate path, trace=False"}
    print(f"{'K, N':<12} {'system':<26} {'ms/iter':>9} {'× hand':>7} {'× before':>9} "
          f"{'max |Δ mean|':>13}")
    sizes = [tuple(int(v) for v in s.split(",")) for s in args.sizes] if args.sizes \
        else SIZES
    if args.gaussian:
        sizes = [(0, args.gaussian)]  # (K = 0: learning a Gaussian, ``gaussian_worker``)
    for k, n in sizes:
        best: dict[str, dict[str, float]] = {}
        for _ in range(args.rounds):
            for name, path, system, trace in systems:
                got = measure(path, k, n, system, trace)
                if name not in best or got["seconds"] < best[name]["seconds"]:
                    best[name] = got
        hand = best["hand-written NumPy"]["seconds"]
        for name, *_ in systems:
            got = best[name]
            ratio = (f"{got['seconds'] / best[before[name]]['seconds']:9.2f}"
                     if before.get(name) in best else f"{'':9}")
            label = f"{k}, {n:,}" if k else f"N = {n:,}"
            print(f"{label:<12} {name:<26} {got['seconds'] * 1e3:9.3f} "
                  f"{got['seconds'] / hand:7.2f} {ratio} {got['error']:13.1e}")


if __name__ == "__main__":
    main()
