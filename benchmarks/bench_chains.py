"""Chain benchmarks: a 3-state HMM and a 1-D linear-Gaussian state-space model written over
a plate (``x[t]`` from ``x[t - 1]``), printed side by side in one run:

* compile time at T = 10 and T = 10,000 (after one warm-up compile): the chain is one
  statement, so the two should match;
* time per sweep at T = 25,000 (EP and VMP, 15 sweeps, the evidence computed after each
  sweep as ``run`` does), beside a hand-written NumPy forward–backward (one t at a time,
  Rabiner's scaling) or Kalman filter + RTS smoother doing one pass, and the chain
  factor's own forward–backward kernel.  With known emissions the messages into the
  chain do not change between sweeps and its last pass is reused (``factors.chains``);
  the "A, B learnt" row (Dirichlet transition and emission rows under VMP) runs a new
  pass every sweep.

RxInfer reports 15.5 s for 15 VMP iterations of the 3-state HMM at T = 25,000, learning
A and B, and 5.6 s for 2-D state-space filtering at T = 100,000 (its published
benchmarks; not run here).  The last table smooths a 2-D rotating state at T = 100,000
with the vector chain (``VectorGaussianChain``) beside a hand-written Kalman filter + RTS
smoother.  Read the ratios; machines are noisy.
Run: ``python benchmarks/bench_chains.py``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import factorflow as ff  # noqa: E402
from factorflow.factors.chains import discrete_forward_backward  # noqa: E402
from tests.runtime.handwritten import forward_backward_by_hand, rts_by_hand  # noqa: E402

K, V = 3, 4


def hmm(t_len: int, rng: np.random.Generator, learn: bool = False) -> ff.Model:
    """The 3-state HMM, its transitions and emissions known, or (``learn``) both
    Dirichlet rows learnt by VMP (RxInfer's benchmark; the messages into the chain then
    change every sweep)."""
    pi = np.full(K, 1.0 / K)
    trans = 0.8 * np.eye(K) + 0.1 * (1 - np.eye(K))
    emission = rng.dirichlet(np.ones(V), size=K)
    obs = rng.integers(0, V, t_len)
    with ff.Model("hmm") as model:
        if learn:
            with ff.Plate(ff.Range("k", K)):
                rows = ff.Dirichlet("B", np.ones((K, V)))
                steps = ff.Dirichlet("A", np.ones((K, K)))
        t = ff.Range("t", t_len)
        with ff.Plate(t):
            with ff.If(t == 0):
                x = ff.Discrete("x", pi)
            with ff.If(t > 0):
                x = ff.Discrete("x", steps[x[t - 1]] if learn
                                else ff.Constant(trans)[x[t - 1]])
            with ff.Switch(x):
                ff.Discrete("y", rows[x] if learn else ff.Constant(emission)[x],
                            observed=obs)
    if learn:
        model.initial["B"] = ff.distributions.Dirichlet(1.0 + 3.0 * emission)
    return model


def state_space(t_len: int, rng: np.random.Generator) -> ff.Model:
    y = np.cumsum(rng.normal(size=t_len)) + rng.normal(size=t_len)
    with ff.Model("ssm") as model:
        t = ff.Range("t", t_len)
        with ff.Plate(t):
            with ff.If(t == 0):
                x = ff.Gaussian("x", 0.0, precision=0.01)
            with ff.If(t > 0):
                x = ff.Gaussian("x", x[t - 1], precision=1.0)
            ff.Gaussian("y", x, precision=1.0, observed=y)
    return model


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _best_compile(build, t_len: int, algorithm: str, rng: np.random.Generator) -> float:
    """The best of 3 compiles, each of a freshly built model (building not timed)."""
    times = []
    for _ in range(3):
        model = build(t_len, rng)
        times.append(_seconds(lambda m=model: m.compile(algorithm)))
    return min(times)


def compile_table() -> None:
    rng = np.random.default_rng(0)
    hmm(10, rng).compile("vmp")  # warm-up: imports and operator tables
    print("compile time (s), best of 3   T = 10    T = 10,000   ratio")
    for name, build in (("HMM", hmm), ("state space", state_space)):
        for algorithm in ("ep", "vmp"):
            small, large = (_best_compile(build, t_len, algorithm, rng)
                            for t_len in (10, 10_000))
            print(f"  {name:12s} {algorithm:4s}         {small:8.4f}   {large:10.4f}   "
                  f"{large / small:5.2f}")


def sweep_table(t_len: int = 25_000, sweeps: int = 15) -> None:
    rng = np.random.default_rng(1)
    print(f"\nper sweep at T = {t_len:,} (ms)   factorflow   hand-written pass   "
          "kernel alone")
    model = hmm(t_len, rng)
    trans = 0.8 * np.eye(K) + 0.1 * (1 - np.eye(K))
    lik = rng.dirichlet(np.ones(K), size=t_len)
    hand = _seconds(lambda: forward_backward_by_hand(np.full(K, 1 / K), trans, lik))
    kernel = _seconds(lambda: discrete_forward_backward(np.full(K, 1 / K), trans,
                                                        np.log(lik)))
    for algorithm in ("ep", "vmp"):
        compiled = model.compile(algorithm)
        per = _seconds(lambda c=compiled: c.run(iterations=sweeps, tolerance=None,
                                                progress=False)) / sweeps
        print(f"  HMM, 3 states, {algorithm:4s}       {1e3 * per:9.1f}   {1e3 * hand:17.1f}   "
              f"{1e3 * kernel:12.1f}")
    learnt = hmm(t_len, rng, learn=True)
    init = {"B": learnt.initial["B"]}
    compiled = learnt.compile("vmp", init=init)
    total = _seconds(lambda: compiled.run(iterations=sweeps, init=init, tolerance=None,
                                          progress=False))
    print(f"  HMM, A, B learnt, vmp     {1e3 * total / sweeps:9.1f}   {1e3 * hand:17.1f}   "
          f"{1e3 * kernel:12.1f}")
    y = rng.normal(size=t_len)
    model = state_space(t_len, rng)
    hand = _seconds(lambda: rts_by_hand(y))
    for algorithm in ("ep", "vmp"):
        compiled = model.compile(algorithm)
        per = _seconds(lambda c=compiled: c.run(iterations=sweeps, tolerance=None,
                                                progress=False)) / sweeps
        print(f"  state space, {algorithm:4s}         {1e3 * per:9.1f}   {1e3 * hand:17.1f}")
    print(f"\nHMM, {sweeps} VMP sweeps at T = {t_len:,} learning A and B: {total:.2f} s "
          f"(RxInfer reports 15.5 s: {15.5 / total:.1f}x)")


THETA = np.pi / 20
ROTATION = np.array([[np.cos(THETA), -np.sin(THETA)], [np.sin(THETA), np.cos(THETA)]])
SEEN = np.diag([1.3, 0.7])


def rotating_data(t_len: int, rng: np.random.Generator) -> np.ndarray:
    """Observations of a 2-D state turning by π/20 a step with unit process noise, seen
    through B = diag(1.3, 0.7) with unit noise."""
    x = np.zeros((t_len, 2))
    noise = rng.normal(size=(t_len, 2))
    for t in range(1, t_len):
        x[t] = ROTATION @ x[t - 1] + noise[t]
    return x @ SEEN.T + rng.normal(size=(t_len, 2))


def rotating_state(y: np.ndarray) -> ff.Model:
    """The vector chain (``VectorGaussianChain``, x[0] ~ N(0, 100 I)) and a ``B @ x``
    emission over a plate of T."""
    with ff.Model("rotating") as model:
        t = ff.Range("t", len(y))
        with ff.Plate(t):
            with ff.If(t == 0):
                s = ff.VectorGaussian("x", np.zeros(2), precision=0.01 * np.eye(2))
            with ff.If(t > 0):
                s = ff.VectorGaussian("x", ROTATION @ s[t - 1], precision=np.eye(2))
            ff.VectorGaussian("y", ff.matvec(SEEN, s), precision=np.eye(2), observed=y)
    return model


def vector_state_space_table(t_len: int = 100_000) -> None:
    """2-D state-space smoothing at T = 10⁵: factorflow building, compiling and running
    to convergence (timed once), beside a hand-written NumPy Kalman filter + RTS smoother
    (one t at a time, with log p(y)), the chain factor's solver alone, and RxInfer's
    reported 5.6 s (2-D state-space filtering at T = 10⁵; not run here)."""
    from factorflow.factors.vector_chains import ChainParams, smooth
    from tests.model.test_vector_chains import kalman_rts
    y = rotating_data(t_len, np.random.default_rng(2))
    print(f"\n2-D state space, smoothing at T = {t_len:,}    seconds  sweeps  "
          "RxInfer 5.6 s /  max |mean - RTS|")
    start = time.perf_counter()
    ms, _, log_z = kalman_rts(y, ROTATION, np.zeros(2), np.eye(2), SEEN, np.eye(2),
                              np.zeros(2), 0.01 * np.eye(2))
    hand = time.perf_counter() - start
    for algorithm in ("ep", "vmp"):
        start = time.perf_counter()
        result = rotating_state(y).infer(algorithm, progress=False)
        total = time.perf_counter() - start
        err = float(np.max(np.abs(result["x"].mean - ms)))
        print(f"  factorflow {algorithm:3s} (build, compile, run)  {total:7.3f}  "
              f"{result.iterations:6d}  {5.6 / total:14.1f}x  {err:16.1e}   (log evidence "
              f"{result.log_evidence - log_z:+.1e} from Kalman's)")
    chain = ChainParams(np.zeros(2), 0.01 * np.eye(2), ROTATION, np.zeros(2), np.eye(2))
    h, j = y @ SEEN, np.broadcast_to(SEEN.T @ SEEN, (t_len, 2, 2))
    kernel = min(_seconds(lambda: smooth(chain, h, j)) for _ in range(3))
    print(f"  the chain's solver alone, one pass  {kernel:7.3f}       1  "
          f"{5.6 / kernel:14.1f}x")
    print(f"  hand-written NumPy Kalman + RTS     {hand:7.3f}       1  {5.6 / hand:14.1f}x")


if __name__ == "__main__":
    compile_table()
    sweep_table()
    vector_state_space_table()
