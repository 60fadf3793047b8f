"""Gates benchmark: a 2-D Gaussian mixture (means and precisions per component and axis)
with a Switch over K components inside a plate of N points, under VMP.

Every message update is one array operation of shape (N, K); the table prints the time
per iteration (the difference of two runs, so set-up and the evidence bound are not
counted) and how well the components are recovered.

Run: ``python benchmarks/bench_gates.py [--points N]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import factorflow as ff
from factorflow.distributions import Gaussian

CENTRES = np.array([[0.0, 0.0], [6.0, 1.0], [2.0, 7.0]])


def model(points: np.ndarray) -> ff.Model:
    k_size = len(CENTRES)
    with ff.Model("mixture_2d") as m:
        k = ff.Range("k", k_size)
        weights = ff.Dirichlet("weights", np.ones(k_size))
        with ff.Plate(k):
            mean_x = ff.Gaussian("mean_x", 0.0, variance=100.0)
            mean_y = ff.Gaussian("mean_y", 0.0, variance=100.0)
            prec_x = ff.Gamma("prec_x", 1.0, rate=1.0)
            prec_y = ff.Gamma("prec_y", 1.0, rate=1.0)
        n = ff.Range("n", len(points))
        with ff.Plate(n):
            z = ff.Discrete("z", weights)
            with ff.Switch(z):
                ff.Gaussian("x", mean_x[z], precision=prec_x[z], observed=points[:, 0])
                ff.Gaussian("y", mean_y[z], precision=prec_y[z], observed=points[:, 1])
    return m


def main(n_points: int, iterations: int = 20) -> None:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, len(CENTRES), size=n_points)
    points = CENTRES[labels] + rng.normal(0.0, 0.7, size=(n_points, 2))
    start = time.perf_counter()
    m = model(points)
    compiled = m.compile("vmp", init=("mean_x", "mean_y"))
    compile_ms = (time.perf_counter() - start) * 1e3
    init = {"mean_x": Gaussian(CENTRES[:, 0] + 0.5, np.ones(3)),
            "mean_y": Gaussian(CENTRES[:, 1] - 0.5, np.ones(3))}
    t0 = time.perf_counter()
    compiled.run(iterations=iterations, init=init)
    t1 = time.perf_counter()
    result = compiled.run(iterations=2 * iterations, init=init)
    t2 = time.perf_counter()
    per_iteration = ((t2 - t1) - (t1 - t0)) / iterations
    found = np.stack([result["mean_x"].mean, result["mean_y"].mean], axis=1)
    print(f"2-D Gaussian mixture, K = {len(CENTRES)}, VMP, N = {n_points:,}")
    print(f"{'compile (ms)':>14s} {'ms/iteration':>14s} {'max |mean error|':>18s}")
    print(f"{compile_ms:14.1f} {per_iteration * 1e3:14.2f} "
          f"{np.max(np.abs(found - CENTRES)):18.4f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", type=int, default=100_000)
    main(parser.parse_args().points)
