"""A multivariate normal written as an ``@ff.factor`` formula against the built-in factor.

The formula (VinDsl's inner indices: ``x["i"]``, the precision ``lam["i", "j"]``)

    ½ log|Λ| − ½ Σ_ij (y_i − μ_i) Λ_ij (y_j − μ_j)

derives its VMP messages by the rewrite engine (``factorflow.factors.derive``); they are
evaluated by ``factorflow.rewrite.evaluate`` over arrays with named index axes, where the
built-in ``ff.VectorGaussian`` runs hand-written einsums over the plate. The model is the
Gaussian–Wishart one: μ ~ N(0, 10 I), Λ ~ W(D + 1, I), y_n ~ N(μ, Λ⁻¹) observed over a
plate of N. Both run a fixed number of VMP sweeps (tolerance 0) after one warm-up run;
the table shows CPU seconds per sweep, best of ``--repeat``, side by side in one process,
and the largest difference of the posteriors' natural parameters relative to their largest
magnitude (the two schedules update μ and Λ in different orders, so after a fixed number
of sweeps they agree to the convergence left, not to rounding). The declaration row is
the CPU time of deriving the formula's three messages and its ELBO term.

Run: ``python benchmarks/bench_dsl_vectors.py``.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import factorflow as ff


def _declare(name: str) -> ff.model.dsl.UserFactor:
    def mvn(y, mu, lam):
        def d(i):
            return y[i] - mu[i]
        return 0.5 * ff.logdet(lam) - 0.5 * ff.sum(d("i") * lam["i", "j"] * d("j"), "i", "j")

    mvn.__name__ = name
    return ff.factor(y="vector", mu="vector", lam="posdef")(mvn)


def _model(factor, data: np.ndarray) -> ff.Model:
    n, dim = data.shape
    with ff.Model() as model:
        mu = ff.VectorGaussian("mu", np.zeros(dim), precision=0.1 * np.eye(dim))
        lam = ff.Wishart("lam", dim + 1.0, rate=np.eye(dim))
        with ff.Plate(ff.Range("n", n)):
            if factor is None:
                ff.VectorGaussian("y", mu, precision=lam, observed=data)
            else:
                factor("y", mu=mu, lam=lam, observed=data)
    return model


def _per_sweep(compiled, sweeps: int, repeat: int) -> tuple[float, ff.Result]:
    warnings.simplefilter("ignore", ff.ConvergenceWarning)  # (a fixed number of sweeps)
    compiled.run(iterations=2, tolerance=0.0, progress=False)  # warm-up
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.process_time()
        result = compiled.run(iterations=sweeps, tolerance=0.0, progress=False)
        best = min(best, (time.process_time() - start) / sweeps)
    return best, result


def main(sizes: list[tuple[int, int]], sweeps: int, repeat: int) -> None:
    start = time.process_time()
    user = _declare("bench_mvn_formula")
    declared = time.process_time() - start
    print(f"declaration (derive 3 messages and the ELBO term): {declared * 1e3:.0f} ms CPU\n")
    print(f"{'D':>3} {'N':>8} | {'formula ms/sweep':>16} {'built-in ms/sweep':>17} "
          f"{'ratio':>6} | {'max |Δη|/|η|':>12}")
    print("-" * 70)
    rng = np.random.default_rng(0)
    for dim, n in sizes:
        data = rng.normal(size=(n, dim)) + 1.0
        ours, a = _per_sweep(_model(user, data).compile("vmp"), sweeps, repeat)
        theirs, b = _per_sweep(_model(None, data).compile("vmp"), sweeps, repeat)
        gap = max(float(np.max(np.abs(e1 - e2)) / np.max(np.abs(e2))) for name in ("mu", "lam")
                  for e1, e2 in zip(a[name].eta, b[name].eta, strict=True))
        print(f"{dim:>3} {n:>8} | {ours * 1e3:>16.3f} {theirs * 1e3:>17.3f} "
              f"{ours / theirs:>5.1f}x | {gap:>12.1e}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sweeps", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="the two smallest sizes only")
    args = parser.parse_args()
    sizes = [(2, 100), (3, 1_000), (3, 100_000), (10, 10_000)]
    main(sizes[:2] if args.quick else sizes, args.sweeps, args.repeat)
