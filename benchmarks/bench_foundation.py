"""Foundation benchmarks: compile time per example model, and VMP time per iteration on
learning a Gaussian with 10⁷ points against a hand-written NumPy implementation of the
same updates, side by side in one run (the ratio is what to read; machines are noisy).

Run: ``python benchmarks/bench_foundation.py [--points N]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import factorflow as ff


def models() -> dict[str, ff.Model]:
    out = {}
    with ff.Model("learning_gaussian") as m:
        mean = ff.Gaussian("mean", 0.0, variance=100.0)
        prec = ff.Gamma("prec", 1.0, rate=1.0)
        n = ff.Range("n", 2)
        with ff.Plate(n):
            ff.Gaussian("x", mean, precision=prec, observed=[5.0, 7.0])
    out["learning a Gaussian (vmp)"] = (m, "vmp")
    with ff.Model("two_coins") as m:
        a = ff.Bernoulli("first", 0.5)
        b = ff.Bernoulli("second", 0.5)
        ff.constrain_true(~(a & b))
    out["two coins (ep)"] = (m, "ep")
    with ff.Model("truncated") as m:
        t = ff.Data("threshold", 0.5)
        x = ff.Gaussian("x", 0.0, variance=1.0)
        ff.constrain_true(x > t)
    out["truncated Gaussian (ep)"] = (m, "ep")
    return out


def bench_compile(repeats: int = 20) -> None:
    print(f"Compile time (model -> generated Python, best of {repeats})")
    print(f"{'model':32s} {'ms':>8s} {'lines':>6s}   target < 50 ms (Infer.NET ~1000 ms)")
    for label, (model, algorithm) in models().items():
        best = np.inf
        for _ in range(repeats):
            model._compiled.clear()
            start = time.perf_counter()
            compiled = model.compile(algorithm)
            best = min(best, time.perf_counter() - start)
        print(f"{label:32s} {best * 1e3:8.2f} {compiled.source.count(chr(10)):6d}")


def hand_written(x: np.ndarray, iterations: int) -> tuple[float, float, float, float]:
    """The same VMP updates, written by hand: mean ~ N(0, 100), prec ~ Gamma(1, 1)."""
    n = x.size
    a, b = 1.0, 1.0
    m, v = 0.0, 100.0
    for _ in range(iterations):
        e_prec = a / b
        post_prec = 0.01 + n * e_prec
        m = e_prec * np.sum(x) / post_prec
        v = 1.0 / post_prec
        a = 1.0 + 0.5 * n
        b = 1.0 + 0.5 * (np.sum((x - m) ** 2) + n * v)
    return m, v, a, b


def bench_vmp(points: int, iterations: int = 10) -> None:
    x = np.random.default_rng(1).normal(3.0, 2.0, size=points)
    with ff.Model("learning_gaussian_big") as model:
        mean = ff.Gaussian("mean", 0.0, variance=100.0)
        prec = ff.Gamma("prec", 1.0, rate=1.0)
        n = ff.Range("n", points)
        with ff.Plate(n):
            ff.Gaussian("x", mean, precision=prec, observed=x)
    compiled = model.compile("vmp")
    compiled.run(iterations=1)  # warm
    rows = []
    for _ in range(3):
        # the difference of two runs removes the once-per-run work (initialisation, the
        # evidence bound) that the hand-written loop does not do
        start = time.perf_counter()
        compiled.run(iterations=iterations)
        mid = time.perf_counter()
        result = compiled.run(iterations=2 * iterations)
        t_ff = ((time.perf_counter() - mid) - (mid - start)) / iterations
        start = time.perf_counter()
        m, v, a, b = hand_written(x, iterations)
        t_np = (time.perf_counter() - start) / iterations
        rows.append((t_ff, t_np))
    t_ff, t_np = min(r[0] for r in rows), min(r[1] for r in rows)
    err = abs(float(result["mean"].mean) - m)
    print(f"\nLearning a Gaussian, VMP, {points:,} points, {iterations} iterations (best of 3)")
    print(f"{'implementation':24s} {'ms/iteration':>13s}")
    print(f"{'factorflow (generated)':24s} {t_ff * 1e3:13.2f}")
    print(f"{'hand-written NumPy':24s} {t_np * 1e3:13.2f}")
    print(f"ratio factorflow / hand-written: {t_ff / t_np:.2f}  (target <= 2)   "
          f"|mean difference| = {err:.2e}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", type=int, default=10_000_000)
    args = parser.parse_args()
    bench_compile()
    bench_vmp(args.points)
