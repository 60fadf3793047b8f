"""Vector benchmarks: Bayesian linear regression under VMP with a Gamma noise precision
(w ~ N(0, I), τ ~ Gamma, y[n] ~ N(X[n] @ w, 1/τ)), per sweep, side by side in one run:

* factorflow's generated code (the weights' message fused over the data: one einsum);
* the same message without the fusion (one D × D message per datum, then summed), which
  is what a per-datum message costs;
* a hand-written NumPy coordinate ascent (XᵀX precomputed once: a lower bound).

Peak memory of one weights' message is printed beside (tracemalloc).  Read the ratios;
machines are noisy.  Run: ``python benchmarks/bench_vectors.py [--dim D]``.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

import factorflow as ff
from factorflow.distributions import Gaussian
from factorflow.factors import FACTORS
from factorflow.runtime.kernels import prod_over


def _best(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
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


def main(dim: int) -> None:
    print(f"VMP linear regression, D = {dim}, Gamma noise; time per sweep (ms) and peak "
          "memory of the weights' message (MiB)")
    print(f"{'N':>9} | {'factorflow':>10} {'hand NumPy':>10} {'ratio':>6} | "
          f"{'fused msg':>9} {'per-datum':>9} {'speedup':>7} | {'fused MiB':>9} "
          f"{'per-datum MiB':>13}")
    for n in (10**3, 10**4, 10**5, 10**6):
        print(_row(n, dim))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dim", type=int, default=10)
    main(parser.parse_args().dim)
