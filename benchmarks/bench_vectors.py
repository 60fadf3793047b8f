"""Vector benchmarks: Bayesian linear regression under VMP with a Gamma noise precision
(w ~ N(0, I), τ ~ Gamma, y[n] ~ N(X[n] @ w, 1/τ)), per sweep, side by side in one run:

* factorflow's generated code (the weights' message fused over the data: one einsum);
* the same message without the fusion (one D × D message per datum, then summed), which
  is what a per-datum message costs;
* a hand-written NumPy coordinate ascent (XᵀX precomputed once: a lower bound).

Peak memory of one weights' message is printed beside (tracemalloc).

Then the Gaussian mixture with Wishart precisions (``examples/gaussian_mixture.py``) under
VMP at BayesPy's published configurations (K = 10, N = 200, D = 2 and K = 40, N = 2,000,
D = 10) and at N = 10⁶ (K = 10, D = 2), per sweep from the same start and in the same
update order: factorflow's generated code (with the bound every sweep, as BayesPy, and
without), the hand-written NumPy coordinate ascent ``benchmarks/vmixture_reference.py``
(equal to factorflow to 1e-10, as a test checks; and its ``hand_written_blocked``, the
responsibilities and their data sums fused over blocks of rows in one pass over the
(N, K) memory, what a fused sweep can reach) and BayesPy (when installed: ``pip
install bayespy``), with both final bounds; and the components' precision message inside
the Switch, fused (the clone's deferred operator weighted by the responsibilities and
reduced over the data: no (N, K, D, D) array) against the per-(n, k) messages then
multiplied, in time and peak memory.

Then Bayesian PCA (``examples/bayesian_pca.py``: W's M rows and z[n] random, τ ~ Gamma;
y[n, m] ~ N(W[m] · z[n], 1/τ), one fused InnerProductGaussian factor) under VMP at
BayesPy's PCA demo's size and larger, per sweep: factorflow's generated code (with the
bound every sweep, as BayesPy computes it, and without), the hand-written NumPy VMP the
tests compare it with and BayesPy's own PCA (``Dot(W, Z)`` into ``GaussianARD``, when
installed) on the same model, priors, start and update order, with both final bounds
(they agree to rounding).  Read the ratios; machines are noisy.  Run: ``python
benchmarks/bench_vectors.py [--dim D] [--pca | --mixture] [--cpu]`` (``--pca``,
``--mixture``: that table alone;
``--cpu``: CPU time instead of wall time, steadier on a loaded machine, with
``OPENBLAS_NUM_THREADS=1``).  ``--paired [--baseline PATH] [--rounds R]``: BayesPy's
small configuration alone (K = 10, N = 200, D = 2), this checkout and another one timed in
turn beside BayesPy, round by round (``paired_small``); with ``--size K,N,D [--sweeps S]
[--repeats R]`` another configuration (``--size 40,2000,10``, ``--size 10,1000000,2
--sweeps 3 --repeats 3``), BayesPy beside it with ``--bayespy``.  ``--fused [--rounds R]
[--repeats R]``: the fused Switch (``fuse_switch=True``) against the gate path, paired in
this process, beside BayesPy, at the mixture's three sizes (``paired_fused``; ``--size
K,N,D --sweeps S`` for one other).
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[1]))  # (for ``benchmarks``)

import factorflow as ff  # noqa: E402
from benchmarks import vmixture_reference as vref  # noqa: E402
from factorflow.distributions import Gaussian  # noqa: E402
from factorflow.distributions import VectorGaussian as VG  # noqa: E402
from factorflow.distributions import Wishart as W  # noqa: E402
from factorflow.factors import FACTORS  # noqa: E402
from factorflow.factors.common import Deferred  # noqa: E402
from factorflow.factors.mixtures import expand, power_product  # noqa: E402
from factorflow.runtime.kernels import prod_over  # noqa: E402

#: Bayesian PCA's (N, M, K): BayesPy's PCA demo (N = 100, M = 10, K = 5; without its ARD
#: prior and missing values), then larger problems with M ≫ K
PCA_SIZES = ((100, 10, 5), (100, 5, 2), (1000, 20, 3), (2000, 50, 5), (10000, 100, 10))


#: the clock of the timings: wall time, or with ``--cpu`` this process's CPU time (on a
#: loaded shared machine the steadier measure; run with OPENBLAS_NUM_THREADS=1 so that
#: BLAS threads waiting for work do not count)
CLOCK = time.perf_counter


def _best(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = CLOCK()
        fn()
        times.append(CLOCK() - start)
    return min(times)


def _peak_mb(fn) -> float:
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def _row(n: int, dim: int, sweeps: int = 10) -> str:
    """One line of the table: N data points of dimension ``dim``."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, dim))
    y = X @ rng.normal(size=dim) + rng.normal(size=n)
    with ff.Model("regression") as model:
        w = ff.VectorGaussian("w", 0.0, precision=np.eye(dim))
        tau = ff.Gamma("tau", 1.0, rate=1.0)
        with ff.Plate(ff.Range("n", n)):
            ff.Gaussian("y", X @ w, precision=tau, observed=y)
    compiled = model.compile("vmp")
    ff_ms = _best(lambda: compiled.run(iterations=sweeps, tolerance=None)) / sweeps

    def by_hand() -> None:
        xtx, xty = X.T @ X, X.T @ y
        e_tau = 1.0
        for _ in range(sweeps):
            cov = np.linalg.inv(np.eye(dim) + e_tau * xtx)
            m = cov @ (e_tau * xty)
            resid = np.sum((y - X @ m) ** 2) + np.einsum("ij,ji->", xtx, cov)
            e_tau = (1.0 + n / 2) / (1.0 + 0.5 * resid)

    hand_ms = _best(by_hand) / sweeps
    to_w = FACTORS["InnerProduct"].operators[("vmp", "a")].fn
    msg = Gaussian(y, np.full(n, 2.0))

    def fused() -> object:
        return to_w(product=msg, b=X, reduce=((n,), (0,)))

    def per_datum() -> object:
        return prod_over(to_w(product=msg, b=X), (n,), (0,))

    t_fused, t_plain = _best(fused), _best(per_datum)
    return (f"{n:>9,} | {ff_ms * 1e3:>10.2f} {hand_ms * 1e3:>10.2f} {ff_ms / hand_ms:>6.1f} | "
            f"{t_fused * 1e3:>9.2f} {t_plain * 1e3:>9.2f} {t_plain / t_fused:>7.1f} | "
            f"{_peak_mb(fused):>9.1f} {_peak_mb(per_datum):>13.1f}")


# ----- the D-dimensional Gaussian mixture (VMP) --------------------------------------------
#: (K, N, D, sweeps timed): BayesPy's published configurations, then N = 10⁶
MIXTURE_SIZES = ((10, 200, 2, 20), (40, 2000, 10, 10), (10, 10**6, 2, 3))


def _bayespy_mixture(x: np.ndarray, start: np.ndarray, sweeps: int,
                     repeats: int) -> tuple[float, float, float] | None:
    """BayesPy's ms per iteration, final bound and CPU ms per iteration (this process's,
    every thread) on the same model, priors, start and update order as factorflow's
    (q(means) = N(start, I), the others their priors; z first, then weights, z, precs,
    means each sweep; the bound every iteration, never stopping early), or None if
    BayesPy is absent.  Timed, as factorflow's run is, from the start: the first update of
    z (factorflow's initialisation) and the sweeps."""
    try:
        from bayespy.inference import VB
        from bayespy.nodes import Categorical, Dirichlet, Gaussian, Mixture, Wishart
    except ImportError:
        return None
    n, dim = x.shape
    k = len(start)
    times, cpu, bound = [], [], 0.0
    for _ in range(repeats):
        alpha = Dirichlet(np.full(k, vref.ALPHA0))
        z = Categorical(alpha, plates=(n,))
        mu = Gaussian(np.zeros(dim), vref.PRIOR_PRECISION * np.eye(dim), plates=(k,))
        lam = Wishart(dim + 1.0, np.eye(dim), plates=(k,))
        y = Mixture(z, Gaussian, mu, lam)
        y.observe(x)
        mu.initialize_from_parameters(start, np.eye(dim))
        q = VB(y, alpha, z, lam, mu)
        begin, begin_cpu = CLOCK(), time.process_time()  # (timed from the same point as
        z.update()  # factorflow's run: with the initialisation, the cases from the start)
        q.update(repeat=sweeps, verbose=False, tol=-np.inf)
        times.append(CLOCK() - begin)
        cpu.append(time.process_time() - begin_cpu)
        bound = float(q.L[sweeps - 1])
    return min(times) / sweeps * 1e3, bound, min(cpu) / sweeps * 1e3


def _mixture_row(k: int, n: int, dim: int, sweeps: int) -> str:
    """One line: factorflow (the bound every sweep, as BayesPy, and without), the
    hand-written NumPy VMP (``benchmarks/vmixture_reference.py``), BayesPy: ms per sweep
    from the same start, and the final bounds of factorflow and BayesPy."""
    x, start_means = vref.data(k, n, dim)
    compiled = vref.model(x, k).compile("vmp", init=["means"])
    init = vref.factorflow_init(start_means)
    repeats = 3  # (BayesPy once at N = 10⁶: about 4 s a sweep)
    result = compiled.run(init=init, iterations=sweeps, tolerance=None)
    ff_ms = _best(lambda: compiled.run(init=init, iterations=sweeps, tolerance=None),
                  repeats) / sweeps * 1e3
    quiet_ms = _best(lambda: compiled.run(init=init, iterations=sweeps, tolerance=None,
                                          trace=False), repeats) / sweeps * 1e3
    hand_ms = _best(lambda: vref.hand_written(x, start_means, sweeps), repeats) / sweeps * 1e3
    blocked_ms = _best(lambda: vref.hand_written_blocked(x, start_means, sweeps),
                       repeats) / sweeps * 1e3
    bp = _bayespy_mixture(x, start_means, sweeps, repeats if n < 10**5 else 1)
    bp_text = (f"{bp[0]:>9.2f} {bp[0] / ff_ms:>6.2f} {bp[0] / quiet_ms:>6.2f} | "
               f"{result.log_evidence:>15.6f} {bp[1]:>15.6f} "
               f"{abs(result.log_evidence - bp[1]):>8.1e}"
               if bp is not None else
               f"{'—':>9} {'—':>6} {'—':>6} | {result.log_evidence:>15.6f}")
    return (f"{k:>3} {n:>9,} {dim:>3} | {ff_ms:>9.2f} {quiet_ms:>9.2f} {hand_ms:>9.2f} "
            f"{ff_ms / hand_ms:>6.1f} {blocked_ms:>9.2f} | {bp_text}")


def _small_worker(sweeps: int, repeats: int, k: int = 10, n: int = 200, dim: int = 2
                  ) -> dict[str, float]:
    """factorflow at K, N, D (K = 10, N = 200, D = 2 unless given; ``--paired``'s worker,
    run with the checkout to time first on PYTHONPATH): best ms per sweep with the bound
    and with ``trace=False``, and the final bound."""
    x, start_means = vref.data(k, n, dim)
    compiled = vref.model(x, k).compile("vmp", init=["means"])
    init = vref.factorflow_init(start_means)
    bound = compiled.run(init=init, iterations=sweeps, tolerance=None).log_evidence
    ff_ms = _best(lambda: compiled.run(init=init, iterations=sweeps, tolerance=None),
                  repeats) / sweeps * 1e3
    quiet_ms = _best(lambda: compiled.run(init=init, iterations=sweeps, tolerance=None,
                                          trace=False), repeats) / sweeps * 1e3
    return {"ff": ff_ms, "quiet": quiet_ms, "bound": float(bound)}


def paired_small(baseline: Path | None, rounds: int = 2, sweeps: int = 200,
                 repeats: int = 7, size: tuple[int, int, int] = (10, 200, 2),
                 bayespy: bool = True) -> None:
    """BayesPy's small configuration (K = 10, N = 200, D = 2, or ``size``) paired: in each
    round this checkout's factorflow, ``baseline``'s (another checkout, when given) and
    BayesPy (with ``bayespy``), one after the other (each factorflow in a fresh
    interpreter with its checkout first on PYTHONPATH, one BLAS thread; BayesPy in this
    process), ms per sweep by ``CLOCK`` (best of ``repeats`` runs of ``sweeps`` sweeps;
    BayesPy the same), each ratio to the BayesPy of its own round, and the final
    bounds."""
    import json
    import os
    import subprocess
    here = Path(__file__).resolve().parents[1]
    checkouts = [("this", here)] + ([("baseline", baseline.resolve())] if baseline else [])
    k, n, dim = size
    x, start_means = vref.data(k, n, dim)
    clock = "wall" if CLOCK is time.perf_counter else "CPU"
    print(f"K = {k}, N = {n:,}, D = {dim}: ms per sweep ({clock} time, best of {repeats} runs of "
          f"{sweeps} sweeps), the bound every sweep and trace=False; ratio: BayesPy / "
          "factorflow of the same round")
    print(f"{'round':>5} {'checkout':>9} | {'ff':>7} {'quiet':>7} | {'BayesPy':>8} "
          f"{'ratio':>6} {'quiet':>6} | {'ff bound':>15} {'BayesPy bound':>15}")
    for r in range(rounds):
        rows = []
        for label, path in checkouts:
            env = dict(os.environ, PYTHONPATH=str(path), OPENBLAS_NUM_THREADS="1",
                       OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
            args = [sys.executable, __file__, "--small-worker", str(sweeps), str(repeats),
                    str(k), str(n), str(dim)]
            if CLOCK is not time.perf_counter:
                args.append("--cpu")
            out = subprocess.run(args, env=env, capture_output=True, text=True, check=True,
                                 cwd=str(here))
            rows.append((label, json.loads(out.stdout.strip().splitlines()[-1])))
        bp = _bayespy_mixture(x, start_means, sweeps, repeats) if bayespy else None
        for label, got in rows:
            bp_text = (f"{bp[0]:>8.3f} {bp[0] / got['ff']:>6.2f} {bp[0] / got['quiet']:>6.2f} | "
                       f"{got['bound']:>15.6f} {bp[1]:>15.6f}" if bp is not None else
                       f"{'—':>8} {'—':>6} {'—':>6} | {got['bound']:>15.6f}")
            print(f"{r + 1:>5} {label:>9} | {got['ff']:>7.3f} {got['quiet']:>7.3f} | "
                  f"{bp_text}")


def _ms_per_sweep(compiled: object, init: dict, sweeps: int, trace: bool, repeats: int
                  ) -> float:
    """Best ms per sweep of ``repeats`` runs of ``sweeps`` sweeps from ``init``."""
    return _best(lambda: compiled.run(init=init, iterations=sweeps, tolerance=None,
                                      trace=trace), repeats) / sweeps * 1e3


#: (K, N, D, sweeps a run) of ``paired_fused``: the mixture's sizes, more sweeps where
#: one takes a millisecond
FUSED_SIZES = ((10, 200, 2, 200), (40, 2000, 10, 50), (10, 10**6, 2, 3))


def paired_fused(sizes: tuple[tuple[int, int, int, int], ...] = FUSED_SIZES,
                 rounds: int = 3, repeats: int = 3, bayespy: bool = True) -> None:
    """The fused Switch (``compile("vmp", fuse_switch=True)``: one SwitchVectorGaussian
    statement) against the gate path (``fuse_switch=False``) on the mixture at each (K,
    N, D, sweeps) of ``sizes``, paired in this process: in each round the two are timed
    one after the other, alternating which goes first, with the bound every sweep and
    with ``trace=False`` (ms per sweep by ``CLOCK``, best of ``repeats`` runs of
    ``sweeps`` sweeps, the initialisation counted), then BayesPy once (best of
    ``repeats``; one run at N ≥ 10⁵) beside them; each ratio is to the gate path or to
    BayesPy of its own round.  The final bounds of the three agree to rounding (the
    fused and the gate path to 1e-10, tested)."""
    clock = "wall" if CLOCK is time.perf_counter else "CPU"
    print(f"Fused Switch vs gate path, paired in one process ({clock} time, ms per sweep, "
          f"best of {repeats}); ratios: gate / fused, BayesPy / fused (with the bound; "
          "trace=False)")
    print(f"{'K':>3} {'N':>9} {'D':>3} {'rnd':>3} | {'fused':>8} {'gate':>8} {'×':>5} | "
          f"{'f quiet':>8} {'g quiet':>8} {'×':>5} | {'BayesPy':>8} {'×':>6} {'×quiet':>6} | "
          f"{'fused bound':>15} {'|f − g|':>8} {'|f − BP|':>8}")
    for k, n, dim, sweeps in sizes:
        x, start = vref.data(k, n, dim)
        init = vref.factorflow_init(start)
        runs = {f: vref.model(x, k).compile("vmp", init=["means"], fuse_switch=f)
                for f in (True, False)}
        assert "SwitchVectorGaussian" in runs[True].source

        bounds = {f: runs[f].run(init=init, iterations=sweeps, tolerance=None).log_evidence
                  for f in (True, False)}
        for r in range(rounds):
            got: dict[tuple[bool, bool], float] = {}
            for fused in ((True, False) if r % 2 == 0 else (False, True)):
                for trace in (True, False):
                    got[fused, trace] = _ms_per_sweep(runs[fused], init, sweeps, trace,
                                                      repeats)
            bp = (_bayespy_mixture(x, start, sweeps, repeats if n < 10**5 else 1)
                  if bayespy else None)
            f, g = got[True, True], got[False, True]
            fq, gq = got[True, False], got[False, False]
            bp_text = (f"{bp[0]:>8.2f} {bp[0] / f:>6.1f} {bp[0] / fq:>6.1f} | "
                       f"{bounds[True]:>15.6f} {abs(bounds[True] - bounds[False]):>8.1e} "
                       f"{abs(bounds[True] - bp[1]):>8.1e}" if bp is not None else
                       f"{'—':>8} {'—':>6} {'—':>6} | {bounds[True]:>15.6f} "
                       f"{abs(bounds[True] - bounds[False]):>8.1e} {'—':>8}")
            print(f"{k:>3} {n:>9,} {dim:>3} {r + 1:>3} | {f:>8.3f} {g:>8.3f} {g / f:>5.2f} | "
                  f"{fq:>8.3f} {gq:>8.3f} {gq / fq:>5.2f} | {bp_text}", flush=True)


def _message_row(n: int, k: int, dim: int) -> str:
    """The components' precision message inside the Switch, fused (``reduce=`` and the
    responsibilities as ``weights=``) against the per-(n, k) messages then multiplied: ms
    and peak MiB."""
    x, start_means = vref.data(k, n, dim)
    rng = np.random.default_rng(1)
    resp = rng.dirichlet(np.ones(k), size=n)
    clone = VG(start_means, np.broadcast_to(np.eye(dim), (k, dim, dim))).broadcast_to((n, k))
    cases = ff.distributions.Bernoulli.from_natural(np.log(resp))  # log weights
    to_prec = FACTORS["VectorGaussian"].operators[("vmp", "precision")].fn
    enter = FACTORS["Gate.EnterOne"].operators[("vmp", "value")].fn
    sample = x[:, None, :]
    value = W(np.full(k, dim + 1.0), np.broadcast_to(np.eye(dim), (k, dim, dim)))

    def fused() -> object:
        return enter(enter_one=Deferred(to_prec, {"sample": sample, "mean": clone}),
                     cases=cases, value=value, index=np.arange(k), reduce=((n, k), (0,)))

    def per_element() -> object:
        msg = to_prec(sample=sample, mean=clone)
        powered = power_product(expand(msg, msg.batch_shape + (1,)), resp[..., None])
        return prod_over(powered, (n, k), (0,))

    t_fused, t_plain = _best(fused), _best(per_element)
    return (f"{k:>3} {n:>9,} {dim:>3} | {t_fused * 1e3:>8.2f} {t_plain * 1e3:>8.2f} "
            f"{_peak_mb(fused):>9.1f} {_peak_mb(per_element):>10.1f}")


def mixture_table() -> None:
    """The Gaussian mixture's table (``--mixture`` prints it alone)."""
    print("VMP Gaussian mixture with Wishart precisions (examples/gaussian_mixture.py), the "
          "same start and update order in all three: ms per sweep of factorflow (bound "
          "every sweep, as BayesPy; and trace=False), the hand-written NumPy VMP "
          "(benchmarks/vmixture_reference.py; and the same with its responsibilities fused "
          "over blocks of rows, hand_written_blocked) and BayesPy, BayesPy / factorflow (with "
          "the bound; without), and the final bounds")
    print(f"{'K':>3} {'N':>9} {'D':>3} | {'ff':>9} {'ff quiet':>9} {'hand':>9} {'×hand':>6} "
          f"{'blocked':>9} | "
          f"{'BayesPy':>9} {'ratio':>6} {'quiet':>6} | {'ff bound':>15} {'BayesPy bound':>15} "
          f"{'|diff|':>8}")
    for k, n, d, sweeps in MIXTURE_SIZES:
        print(_mixture_row(k, n, d, sweeps))
    print()
    print("The components' precision message in the Switch, fused vs per-(n, k): ms and peak "
          "MiB")
    print(f"{'K':>3} {'N':>9} {'D':>3} | {'fused':>8} {'per-nk':>8} {'fused MiB':>9} "
          f"{'per-nk MiB':>10}")
    for k, n, d, _ in MIXTURE_SIZES[:2]:
        print(_message_row(n, k, d))


def bayespy_pca(y: np.ndarray, z0: np.ndarray, ard: bool,
                seen: np.ndarray | None = None) -> tuple:
    """BayesPy's PCA of ``y`` (N × M, K = z0's columns), factorflow's model, priors,
    start and update order (W, [α,] τ, z; z from N(z0, I), τ and α from their priors):
    its ``VB`` and W's node.  ``ard``: W's rows ``GaussianARD(0, α, shape=(K,))`` as in
    BayesPy's demo; ``seen``: its demo's missing values, ``Y.observe(data, mask=seen)``.
    Raises ImportError without BayesPy."""
    from bayespy.inference import VB
    from bayespy.nodes import Dot, Gamma, Gaussian, GaussianARD
    n, m = y.shape
    k = z0.shape[1]
    if ard:
        alpha = Gamma(1e-2, 1e-2, plates=(k,))
        w = GaussianARD(0.0, alpha, shape=(k,), plates=(m, 1))
    else:
        w = Gaussian(np.zeros(k), np.identity(k), plates=(m, 1))
    z = Gaussian(np.zeros(k), np.identity(k), plates=(1, n))
    tau = Gamma(1.0, 1.0)
    obs = GaussianARD(Dot(w, z), tau)
    obs.observe(y.T, mask=True if seen is None else seen.T)
    q = VB(obs, w, alpha, tau, z) if ard else VB(obs, w, tau, z)
    z.initialize_from_parameters(z0[None], np.identity(k))
    return q, w


def _pca_bayespy(y: np.ndarray, z0: np.ndarray, sweeps: int, repeats: int, ard: bool,
                 seen: np.ndarray | None = None) -> tuple[float, float] | None:
    """BayesPy's ms per iteration and final bound on ``bayespy_pca``'s model, or None if
    BayesPy is absent."""
    try:
        import bayespy  # noqa: F401
    except ImportError:
        return None
    times, bound = [], 0.0
    for _ in range(repeats):
        q = bayespy_pca(y, z0, ard, seen)[0]
        start = CLOCK()
        q.update(repeat=sweeps, verbose=False)  # computes the bound every iteration
        times.append(CLOCK() - start)
        bound = float(q.L[sweeps - 1])
    return min(times) / sweeps * 1e3, bound


def _pca_row(n: int, m: int, k: int, ard: bool = False, sweeps: int = 20, repeats: int = 5,
             missing: float = 0.0) -> str:
    """One line: factorflow (the fused InnerProductGaussian factor; bound every sweep, as
    BayesPy, and without), the hand-written NumPy VMP, BayesPy: ms per sweep, and the
    final bounds of factorflow and BayesPy.  ``missing``: the fraction of y's entries
    missing at random (BayesPy's demo: 0.5), ``observed=np.ma.masked_array(...)`` and
    BayesPy's ``observe(y, mask=seen)``."""
    import runpy
    from pathlib import Path
    root = Path(__file__).parents[1]
    pca = runpy.run_path(str(root / "examples" / "bayesian_pca.py"))["pca"]
    by_hand = runpy.run_path(str(root / "tests" / "runtime" / "test_vector_models.py"))[
        "bpca_by_hand"]
    rng = np.random.default_rng(0)
    y = rng.normal(size=(n, k)) @ rng.normal(size=(k, m)) + 0.3 * rng.normal(size=(n, m))
    z0 = rng.normal(size=(n, k))
    eye = np.broadcast_to(np.eye(k), (n, k, k))
    seen = rng.random((n, m)) >= missing if missing else None
    compiled = pca(y if seen is None else np.ma.masked_array(y, mask=~seen), k,
                   ard=ard).compile("vmp", init=["z"])
    start = VG(z0, eye)
    result = compiled.run(init={"z": start}, iterations=sweeps, tolerance=None)
    ff_ms = _best(lambda: compiled.run(init={"z": start}, iterations=sweeps,
                                       tolerance=None), repeats) / sweeps * 1e3
    quiet_ms = _best(lambda: compiled.run(init={"z": start}, iterations=sweeps,
                                          tolerance=None, trace=False), repeats) / sweeps * 1e3
    if seen is not None and ard:
        hand_ms = None  # (no masked ARD VMP by hand)
    elif seen is not None:
        masked = runpy.run_path(str(root / "tests" / "model" / "test_missing.py"))[
            "masked_bpca_by_hand"]
        hand_ms = _best(lambda: masked(y, seen, z0, eye, sweeps), repeats) / sweeps * 1e3
    elif ard:
        by_hand = runpy.run_path(str(root / "tests" / "model" / "test_vectors.py"))[
            "ard_pca_by_hand"]
        hand_ms = _best(lambda: by_hand(y, z0, eye, sweeps, a0=1.0, b0=1.0),
                        repeats) / sweeps * 1e3
    else:
        hand_ms = _best(lambda: by_hand(y, z0, eye, sweeps), repeats) / sweeps * 1e3
    bp = _pca_bayespy(y, z0, sweeps, repeats, ard, seen)
    bp_text = (f"{bp[0]:>8.2f} {bp[0] / ff_ms:>6.2f} | {result.log_evidence:>13.6f} "
               f"{bp[1]:>13.6f} {abs(result.log_evidence - bp[1]):>8.1e}"
               if bp is not None else f"{'—':>8} {'—':>6} | {result.log_evidence:>13.6f}")
    hand_text = "—" if hand_ms is None else f"{hand_ms:.2f}"
    kind = ("ARD" if ard else "") + (f" {missing:.0%} missing" if missing else "")
    return (f"{kind:>15} {n:>6,} {m:>4} {k:>3} | {ff_ms:>8.2f} "
            f"{quiet_ms:>8.2f} {hand_text:>8} | "
            f"{bp_text}")


def pca_table() -> None:
    """The Bayesian PCA table (``--pca`` prints it alone)."""
    print("VMP Bayesian PCA, y[n, m] ~ N(W[m] · z[n], 1/τ) (N data, M observed and K latent "
          "dimensions; 20 sweeps from the same start, in BayesPy's order W, [α,] τ, z; ARD: W[m] ~ "
          "N(0, diag(α)⁻¹), α[k] ~ Gamma(0.01, 0.01)):\nms per "
          "sweep of factorflow (bound every sweep, as BayesPy; and without), the hand-written "
          "NumPy VMP and BayesPy, BayesPy / factorflow, and the final bounds")
    print(f"{'':>15} {'N':>6} {'M':>4} {'K':>3} | {'ff':>8} {'ff quiet':>8} {'hand':>8} | "
          f"{'BayesPy':>8} {'ratio':>6} | {'ff bound':>13} {'BayesPy bound':>13} "
          f"{'|diff|':>8}")
    for n, m, k in PCA_SIZES:
        print(_pca_row(n, m, k))
    for n, m, k in PCA_SIZES[:1] + PCA_SIZES[3:4]:  # with BayesPy's demo's ARD prior on W
        print(_pca_row(n, m, k, ard=True))
    masked_table()


def masked_table() -> None:
    """The rows with half of y missing at random, as BayesPy's PCA demo (``--masked``
    prints them alone)."""
    for n, m, k in PCA_SIZES[:1] + PCA_SIZES[2:]:
        print(_pca_row(n, m, k, missing=0.5))
    for n, m, k in PCA_SIZES[:1] + PCA_SIZES[3:4]:  # BayesPy's demo: ARD and a mask
        print(_pca_row(n, m, k, ard=True, missing=0.5))


def main(dim: int) -> None:
    print(f"VMP linear regression, D = {dim}, Gamma noise; time per sweep (ms) and peak "
          "memory of the weights' message (MiB)")
    print(f"{'N':>9} | {'factorflow':>10} {'hand NumPy':>10} {'ratio':>6} | "
          f"{'fused msg':>9} {'per-datum':>9} {'speedup':>7} | {'fused MiB':>9} "
          f"{'per-datum MiB':>13}")
    for n in (10**3, 10**4, 10**5, 10**6):
        print(_row(n, dim))
    print()
    mixture_table()
    print()
    pca_table()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dim", type=int, default=10)
    parser.add_argument("--pca", action="store_true", help="only the Bayesian PCA table")
    parser.add_argument("--mixture", action="store_true",
                        help="only the Gaussian mixture's tables")
    parser.add_argument("--masked", action="store_true",
                        help="only the Bayesian PCA rows with missing values")
    parser.add_argument("--cpu", action="store_true",
                        help="time by this process's CPU time, not wall time")
    parser.add_argument("--paired", action="store_true",
                        help="only K = 10, N = 200, D = 2: this checkout (and --baseline's) "
                             "beside BayesPy, round by round")
    parser.add_argument("--baseline", type=Path,
                        help="with --paired: another factorflow checkout, timed in turn")
    parser.add_argument("--rounds", type=int, default=2, help="with --paired: rounds")
    parser.add_argument("--size", help="with --paired: K,N,D (default 10,200,2)")
    parser.add_argument("--sweeps", type=int, default=200, help="with --paired: sweeps a run")
    parser.add_argument("--repeats", type=int, default=7, help="with --paired: runs (best of)")
    parser.add_argument("--bayespy", action="store_true",
                        help="with --paired --size: BayesPy beside (always at the default)")
    parser.add_argument("--fused", action="store_true",
                        help="only the fused Switch against the gate path (fuse_switch=True "
                             "/ False), paired in this process, beside BayesPy, at the "
                             "mixture's sizes (or --size K,N,D with --sweeps)")
    parser.add_argument("--small-worker", nargs="+", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cpu:
        CLOCK = time.process_time
    if args.small_worker:
        import json
        print(json.dumps(_small_worker(*args.small_worker)))
    elif args.fused:
        sizes = ((*(int(v) for v in args.size.split(",")), args.sweeps),) if args.size \
            else FUSED_SIZES
        paired_fused(sizes, args.rounds, args.repeats, bayespy=not args.size or args.bayespy)
    elif args.paired:
        size = tuple(int(v) for v in args.size.split(",")) if args.size else (10, 200, 2)
        paired_small(args.baseline, args.rounds, args.sweeps, args.repeats, size,
                     bayespy=args.bayespy or not args.size)
    elif args.mixture:
        mixture_table()
    elif args.masked:
        masked_table()
    elif args.pca:
        pca_table()
    else:
        main(args.dim)
