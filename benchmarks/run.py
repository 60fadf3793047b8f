"""One benchmark table: factorflow against its peers and hand-written NumPy, side by side.

For each model × system, in one run: compile time (factorflow: ``model.compile``; NumPyro:
its first run minus a second, the jit), time per iteration, iterations to converge, the
final bound (VMP) or log evidence (EP), and peak memory (``tracemalloc``, the NumPy and
Python allocations of one run; "-" where the allocations are outside Python's view).

* **VMP 1-D Gaussian mixture** (``benchmarks/mixture_reference.py``: Dirichlet weights,
  Gaussian means, Gamma precisions, ``ff.Switch(z)``), K × N as in issue 14: factorflow's
  ``run()`` (its bound after every sweep, the default) and ``run(trace=False)``;
  BayesPy's VB on the same model; the hand-written NumPy updates (equal to factorflow's
  to 1e-10, ``tests/runtime/test_mixture_reference.py``).  Iterations: the first sweep
  after which the bound changed by at most 1e-10 relative (BayesPy: its ``tol=1e-10``,
  the same rule), at most ``--max-iter``.
* **EP TrueSkill** (``tests/runtime/handwritten.py``): factorflow against the hand-written
  parallel EP (gather, truncated-Gaussian moments, ``np.bincount`` scatter).
  Iterations: sweeps until within 1e-3 of the hand-written fixed point.
* **Learning a Gaussian** (mean ~ N(0, 100), precision ~ Gamma(1, 1), N = 1,000 points):
  factorflow VMP, the hand-written VMP, and NumPyro's NUTS (iterations: draws, warm-up
  included).
* **VMP Gaussian mixture in D dimensions** (``benchmarks/vmixture_reference.py``:
  VectorGaussian means, Wishart precisions, Dirichlet weights), BayesPy's published
  configurations K = 10, N = 200, D = 2 (and, with ``--full``, K = 40, N = 2,000, D = 10):
  factorflow, the hand-written NumPy updates, and BayesPy from the same start with the
  same update order (``bench_vectors._bayespy_mixture``; its CPU time per sweep over a
  fixed number of sweeps, the bound every sweep, as BayesPy computes it).
* **LDA** (``benchmarks/bench_lda.py``'s small corpus, 100 documents, K = 4, 50
  iterations): factorflow's variational EM and plain VMP against scikit-learn's batch
  ``LatentDirichletAllocation`` with the same E-step passes and start; the value column
  is the perplexity at the final topics (lower is better), not a bound.
* **Cold start**: ``import factorflow`` and the first compile of the mixture in a fresh
  interpreter (median of 3).

Time per iteration is CPU time (``time.process_time``, BLAS on one thread) of a run of
2n iterations minus one of n, best of 3, n chosen so that a run of n takes at least
``--least`` CPU seconds (0.1 by default; a shorter run's difference is mostly noise):
set-up and the final bound are not counted, and the noise of a shared machine is.
Iterations are counted by one rule for every NumPy-like system (the bound settled to
1e-10 relative); factorflow's JAX backend is counted by the same rule on its trace.
Systems that are not installed are skipped with a note (``pip install "factorflow[bench]"``);
factorflow's JAX backend is used when this factorflow has one.  Not in this table:
Bayesian PCA against BayesPy (``bench_vectors.py --pca``) and the Dask backend on a
cluster (``bench_dask.py``), whose set-ups differ.

Run: ``python benchmarks/run.py`` (about 4 minutes; ``--full`` adds K = 40, N = 20,000's
peers, the D = 10 mixture and TrueSkill at 1,000 players and 10⁵ games; ``--quick``:
small sizes, no peers and no JAX, a check that the script runs).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one BLAS thread: CPU time is then comparable

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import factorflow as ff  # noqa: E402
from benchmarks import mixture_reference as mix  # noqa: E402
from benchmarks.bench_foundation import hand_written as hand_gaussian  # noqa: E402
from tests.runtime import handwritten as hw  # noqa: E402

warnings.simplefilter("ignore", ff.ConvergenceWarning)
Row = tuple[str, str, float | None, float, str, float | None, float | None]


#: CPU seconds a timed run of n iterations takes at least (``--least``)
LEAST = [0.1]


def calibrated(run: Callable[[int], object], least: float | None = None,
               start: int = 2, most: int = 2**14, warm: bool = False) -> int:
    """The smallest n among start·2^i (at most ``most``) whose run takes at least
    ``least`` CPU seconds (``LEAST`` unless given); ``warm``: each n's run is timed the
    second time (JAX compiles once per iteration count)."""
    least = LEAST[0] if least is None else least
    n = start
    while n < most:
        if warm:
            run(n)
        t0 = time.process_time()
        run(n)
        if time.process_time() - t0 >= least:
            break
        n *= 2
    return n


def per_iteration(run: Callable[[int], object], n: int | None = None,
                  repeats: int = 3, warm: bool = False) -> float:
    """Seconds of CPU per iteration: (time of 2n iterations − time of n), best of
    ``repeats`` each (a first run's compile is then not counted); n by
    :func:`calibrated` (with ``warm``) unless given."""
    n = calibrated(run, warm=warm) if n is None else n
    one, two = [], []
    for _ in range(repeats):
        t0 = time.process_time()
        run(n)
        t1 = time.process_time()
        run(2 * n)
        t2 = time.process_time()
        one.append(t1 - t0)
        two.append(t2 - t1)
    return max(min(two) - min(one), 1e-9) / n


def peak_mb(run: Callable[[], object]) -> float:
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def timed_compile(model: ff.Model, *args: object, **kwargs: object) -> tuple[object, float]:
    start = time.perf_counter()
    compiled = model.compile(*args, **kwargs)
    return compiled, time.perf_counter() - start


def jax_backend(model: ff.Model, algorithm: str, **kwargs: object) -> object | None:
    """The model compiled for factorflow's JAX backend, or None where there is none."""
    if not has("jax"):
        return None
    try:
        return model.compile(algorithm, backend="jax", **kwargs)
    except (TypeError, ff.ModelError):
        return None


# ----- the mixture ---------------------------------------------------------------------
def mixture_rows(k: int, n: int, max_iter: int, peers: bool, notes: set[str],
                 jax: bool = True) -> list[Row]:
    x = mix.data(k, n)
    label = f"VMP mixture K={k} N={n:,}"
    rows: list[Row] = []
    compiled, compile_s = timed_compile(mix.model(x, k), "vmp", init=["means"])
    init = mix.factorflow_init(x, k)
    full = compiled.run(iterations=max_iter, init=init, progress=False, tolerance=None)
    iters = bound_settled(full.trace, max_iter)
    for name, trace in (("factorflow numpy", True), ("factorflow numpy, trace=False", False)):
        def sweeps(s: int, trace: bool = trace) -> object:
            return compiled.run(iterations=s, init=init, tolerance=None, progress=False,
                                trace=trace)
        rows.append((label, name, compile_s, per_iteration(sweeps),
                     iters, full.log_evidence, peak_mb(lambda s=sweeps: s(10))))
    jax_compiled = jax_backend(mix.model(x, k), "vmp", init=["means"]) if jax else None
    if jax_compiled is not None:
        def jax_sweeps(s: int) -> object:
            return jax_compiled.run(iterations=s, init=init, tolerance=None, progress=False)
        jax_sweeps(2)
        result = jax_compiled.run(iterations=max_iter, init=init, progress=False,
                                  tolerance=None)
        rows.append((label, "factorflow jax", None, per_iteration(jax_sweeps, warm=True),
                     bound_settled(result.trace, max_iter), result.log_evidence, None))
    elif jax:
        notes.add("factorflow jax: skipped (no JAX backend in this factorflow)")
    if peers:
        if has("bayespy"):
            rows.append(bayespy_row(label, x, k, max_iter))
        else:
            notes.add('BayesPy: skipped (pip install "factorflow[bench]")')
    hand_iters = hand_converged(x, k, max_iter)
    rows.append((label, "hand-written NumPy", None,
                 per_iteration(lambda s: mix.hand_written(x, k, s)),
                 hand_iters, mix.bound(x, mix.hand_written(x, k, max_iter)),
                 peak_mb(lambda: mix.hand_written(x, k, 10))))
    return rows


def bound_settled(trace: list[float] | tuple[float, ...], max_iter: int) -> str:
    """The first sweep after which the bound changed by at most 1e-10 relative."""
    for s in range(1, len(trace)):
        if abs(trace[s] - trace[s - 1]) <= 1e-10 * (1 + abs(trace[s])):
            return str(s + 1)
    return f">{max_iter}"


def hand_converged(x: np.ndarray, k: int, max_iter: int) -> str:
    """Sweeps until the bound's relative change is below 1e-10 (the bound computed
    apart, after each sweep, so the hand-written loop's timing is not changed)."""
    bounds: list[float] = []

    def settled(q: mix.Posteriors) -> bool:
        bounds.append(mix.bound(x, q))
        return bound_settled(bounds, max_iter)[0] != ">"

    mix.hand_written(x, k, max_iter, settled)
    return bound_settled(bounds, max_iter)


def bayespy_model(x: np.ndarray, k: int) -> object:
    from bayespy.inference import VB
    from bayespy.nodes import Categorical, Dirichlet, Gamma, GaussianARD, Mixture

    weights = Dirichlet(np.ones(k))
    z = Categorical(weights, plates=(x.size,))
    means = GaussianARD(mix.PRIOR_MEAN, 1.0 / mix.PRIOR_VAR, plates=(k,))
    precs = Gamma(mix.PREC_SHAPE, mix.PREC_RATE, plates=(k,))
    y = Mixture(z, GaussianARD, means, precs)
    y.observe(x)
    means.initialize_from_value(mix.init_means(x, k))
    return VB(y, z, weights, precs, means)


def bayespy_row(label: str, x: np.ndarray, k: int, max_iter: int) -> Row:
    start = time.perf_counter()
    bayespy_model(x, k)
    build_s = time.perf_counter() - start

    def sweeps(s: int) -> object:
        vb = bayespy_model(x, k)
        vb.update(repeat=s, tol=0.0, verbose=False)  # tol 0: exactly s sweeps
        return vb

    vb = bayespy_model(x, k)
    vb.update(repeat=max_iter, tol=1e-10, verbose=False)
    iters = str(vb.iter) if vb.iter < max_iter else f">{max_iter}"
    return (label, "BayesPy " + _version("bayespy"), build_s, per_iteration(sweeps),
            iters, float(vb.compute_lowerbound()), peak_mb(lambda: sweeps(10)))


# ----- TrueSkill -----------------------------------------------------------------------
def trueskill_rows(players: int, games: int, sweeps: int) -> list[Row]:
    winner, loser = hw.trueskill_games(players, games)
    label = f"EP TrueSkill {players:,} players/{winner.size:,} games"
    ref = hw.trueskill_ep(players, winner, loser, 20_000, stop=1e-9)[-1]
    model = hw.trueskill_model(players, winner, loser)
    compiled, compile_s = timed_compile(model, "ep")
    trace, _ = hw.factorflow_trace(model, "ep", "skill", sweeps)
    reached = hw.sweeps_within(trace, ref, 1e-3)
    result = compiled.run(iterations=sweeps, tolerance=None, progress=False)
    hand = hw.trueskill_ep(players, winner, loser, sweeps)
    hand_reached = hw.sweeps_within(hand, ref, 1e-3)

    def ff_sweeps(s: int) -> object:
        return compiled.run(iterations=s, tolerance=None, progress=False)

    return [
        (label, "factorflow numpy", compile_s, per_iteration(ff_sweeps),
         str(reached) if reached else f">{sweeps}", result.log_evidence,
         peak_mb(lambda: ff_sweeps(5))),
        (label, "hand-written NumPy", None,
         per_iteration(lambda s: hw.trueskill_ep(players, winner, loser, s)),
         str(hand_reached) if hand_reached else f">{sweeps}", None,
         peak_mb(lambda: hw.trueskill_ep(players, winner, loser, 5))),
    ]


# ----- learning a Gaussian (NumPyro's NUTS where it fits) --------------------------------
def gaussian_rows(n: int, draws: int, notes: set[str], peers: bool = True) -> list[Row]:
    x = np.random.default_rng(1).normal(3.0, 2.0, n)
    label = f"learning a Gaussian N={n:,}"
    with ff.Model("learning_gaussian") as model:
        mean = ff.Gaussian("mean", 0.0, variance=100.0)
        prec = ff.Gamma("prec", 1.0, rate=1.0)
        with ff.Plate(ff.Range("n", n)):
            ff.Gaussian("x", mean, precision=prec, observed=x)
    compiled, compile_s = timed_compile(model, "vmp")
    result = compiled.run(iterations=1000, progress=False)
    rows: list[Row] = [(label, "factorflow numpy (VMP)", compile_s, per_iteration(
        lambda s: compiled.run(iterations=s, tolerance=None, progress=False)),
        str(result.iterations), result.log_evidence,
        peak_mb(lambda: compiled.run(iterations=10, tolerance=None, progress=False)))]
    rows.append((label, "hand-written NumPy (VMP)", None,
                 per_iteration(lambda s: hand_gaussian(x, s)), "-", None,
                 peak_mb(lambda: hand_gaussian(x, 10))))
    if not peers:
        notes.add("NumPyro: left out (--quick)")
    elif has("numpyro"):
        rows.append(numpyro_row(label, x, draws))
    else:
        notes.add('NumPyro: skipped (pip install "factorflow[bench]")')
    return rows


def numpyro_row(label: str, x: np.ndarray, draws: int) -> Row:
    import jax
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS

    def model(x: object) -> None:
        mean = numpyro.sample("mean", dist.Normal(0.0, 10.0))
        prec = numpyro.sample("prec", dist.Gamma(1.0, 1.0))
        with numpyro.plate("n", x.shape[0]):
            numpyro.sample("x", dist.Normal(mean, 1.0 / jax.numpy.sqrt(prec)), obs=x)

    def sample(seed: int) -> float:
        mcmc = MCMC(NUTS(model), num_warmup=draws // 2, num_samples=draws,
                    progress_bar=False)
        start = time.perf_counter()
        mcmc.run(jax.random.PRNGKey(seed), x)
        jax.block_until_ready(mcmc.get_samples())
        return time.perf_counter() - start

    first = sample(0)
    second = sample(1)
    total = draws + draws // 2
    return (label, "NumPyro NUTS " + _version("numpyro"), first - second, second / total,
            f"{total} draws", None, None)


# ----- the mixture in D dimensions ------------------------------------------------------
def vector_mixture_rows(k: int, n: int, dim: int, max_iter: int, peers: bool,
                        notes: set[str]) -> list[Row]:
    """factorflow (with the bound every sweep and without), the hand-written updates and
    BayesPy on ``vmixture_reference``'s model and start."""
    from benchmarks import vmixture_reference as vref
    x, start = vref.data(k, n, dim)
    label = f"VMP mixture K={k} N={n:,} D={dim}"
    compiled, compile_s = timed_compile(vref.model(x, k), "vmp", init=["means"])
    init = vref.factorflow_init(start)
    full = compiled.run(iterations=max_iter, init=init, progress=False, tolerance=None)
    iters = bound_settled(full.trace, max_iter)
    rows: list[Row] = []
    for name, trace in (("factorflow numpy", True), ("factorflow numpy, trace=False", False)):
        def sweeps(s: int, trace: bool = trace) -> object:
            return compiled.run(iterations=s, init=init, tolerance=None, progress=False,
                                trace=trace)
        rows.append((label, name, compile_s, per_iteration(sweeps), iters,
                     full.log_evidence, peak_mb(lambda s=sweeps: s(10))))
    if peers and has("bayespy"):
        from benchmarks.bench_vectors import _bayespy_mixture
        fixed = max(3, min(50, max_iter))
        _, bayespy_bound, cpu_ms = _bayespy_mixture(x, start, fixed, 3)
        rows.append((label, "BayesPy " + _version("bayespy"), None, cpu_ms / 1e3,
                     f"{fixed} (fixed)", bayespy_bound, None))
    elif peers:
        notes.add('BayesPy: skipped (pip install "factorflow[bench]")')
    hand_bounds: list[float] = []

    def settled(q: object) -> bool:
        hand_bounds.append(vref.bound(x, q))
        return bound_settled(hand_bounds, max_iter)[0] != ">"

    vref.hand_written(x, start, max_iter, settled)
    rows.append((label, "hand-written NumPy", None,
                 per_iteration(lambda s: vref.hand_written(x, start, s)),
                 bound_settled(hand_bounds, max_iter), hand_bounds[-1],
                 peak_mb(lambda: vref.hand_written(x, start, 10))))
    return rows


# ----- LDA against scikit-learn -----------------------------------------------------------
def lda_rows(notes: set[str]) -> list[Row]:
    """``bench_lda``'s small corpus, seed 0, 50 iterations: CPU ms per iteration and the
    perplexity at the final topics (in the value column)."""
    if not has("sklearn"):
        notes.add('scikit-learn: skipped (pip install "factorflow[bench]")')
        return []
    from benchmarks.bench_lda import CORPORA, _fit
    docs, topics, words, length = CORPORA["small"]
    label = f"LDA {docs} docs K={topics} (perplexity)"
    fits = _fit("small", 0, 50, 5)
    names = {"sklearn_passes": "scikit-learn batch " + _version("scikit-learn"),
             "em": "factorflow numpy (EM)", "vmp": "factorflow numpy (VMP)"}
    return [(label, name, None, fits[key][0], "50 (fixed)", fits[key][1], None)
            for key, name in names.items()]


# ----- cold start ------------------------------------------------------------------------
COLD = """
import sys, time
t0 = time.perf_counter()
import factorflow as ff
t1 = time.perf_counter()
sys.path.insert(0, {root!r})
from benchmarks import mixture_reference as mix
x = mix.data(10, 200)
m = mix.model(x, 10)
t2 = time.perf_counter()
m.compile("vmp", init=["means"])
t3 = time.perf_counter()
print(t1 - t0, t3 - t2)
"""


def cold_start(repeats: int = 3) -> tuple[float, float]:
    """Median seconds of ``import factorflow`` and of the first compile of the mixture,
    each in a fresh interpreter (bytecode cached, as for an installed package)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    code = COLD.format(root=str(ROOT))
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    runs = [tuple(map(float, subprocess.run([sys.executable, "-c", code], env=env,
                                            check=True, capture_output=True,
                                            text=True).stdout.split()))
            for _ in range(repeats)]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


# ----- the table -------------------------------------------------------------------------
def _version(module: str) -> str:
    from importlib.metadata import version
    return version(module)


def show(rows: list[Row]) -> None:
    print(f"{'model':<38} {'system':<31} {'compile s':>9} {'ms/iter':>9} {'× hand':>7} "
          f"{'iters':>10} {'bound / log Z':>14} {'peak MB':>8}")
    hand = {r[0]: r[3] for r in rows if r[1].startswith("hand-written")}
    for label, system, compile_s, sec, iters, value, mb in rows:
        ratio = f"{sec / hand[label]:7.1f}" if label in hand and sec > 0 else f"{'-':>7}"
        print(f"{label:<38} {system:<31} "
              f"{'-' if compile_s is None else f'{compile_s:.3f}':>9} {sec * 1e3:9.3f} "
              f"{ratio} {iters:>10} {'-' if value is None else f'{value:.6f}':>14} "
              f"{'-' if mb is None else f'{mb:.1f}':>8}")


def main(argv: list[str] | None = None) -> list[Row] | None:
    """Print the table (``argv`` as on the command line); with ``--quick`` return its
    rows too, without the cold start."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--full", action="store_true",
                        help="the peers at K = 40, N = 20,000 and TrueSkill at 10⁵ games")
    parser.add_argument("--quick", action="store_true",
                        help="small sizes, no peers, no JAX: a check that the script runs")
    parser.add_argument("--max-iter", type=int, default=300)
    parser.add_argument("--least", type=float, default=0.1,
                        help="CPU seconds a timed run of n iterations takes at least")
    args = parser.parse_args(argv)
    LEAST[0] = 0.005 if args.quick else args.least
    notes: set[str] = set()
    rows: list[Row] = []
    max_iter = min(args.max_iter, 30) if args.quick else args.max_iter
    sizes = ((3, 50),) if args.quick else ((10, 200), (40, 2000), (40, 20_000))
    for k, n in sizes:
        rows += mixture_rows(k, n, max_iter, peers=not args.quick and (args.full or n <= 2000),
                             notes=notes, jax=not args.quick)
    vector_sizes = ((2, 30, 2),) if args.quick else (
        ((10, 200, 2), (40, 2000, 10)) if args.full else ((10, 200, 2),))
    for k, n, dim in vector_sizes:
        rows += vector_mixture_rows(k, n, dim, max_iter, peers=not args.quick, notes=notes)
    players, games = ((20, 200) if args.quick else
                      (1000, 100_000) if args.full else (200, 10_000))
    rows += trueskill_rows(players, games, 60 if args.quick else 900 if args.full else 400)
    rows += gaussian_rows(100 if args.quick else 1000, 1000, notes, peers=not args.quick)
    if not args.quick:
        rows += lda_rows(notes)
    show(rows)
    if args.quick:
        return rows
    imp, first = cold_start()
    print(f"\ncold start: import factorflow {imp:.2f} s; first compile of the K=10 "
          f"mixture after it {first:.2f} s")
    for note in sorted(notes):
        print("note:", note)
    return None


if __name__ == "__main__":
    main()
