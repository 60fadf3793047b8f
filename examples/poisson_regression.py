"""Poisson regression with a log link, under EP and VMP, against the exact posterior.

Counts of events against a covariate: w ~ N(0, I) over (intercept, slope), y[n] ~
Poisson(exp(X[n] @ w)): ``ff.Poisson("y", ff.exp(X @ w), observed=counts)``.  EP matches
each tilted distribution's moments by quadrature (the Poisson likelihood times the
cavity is a shifted Gaussian times exp(−eˣ)); VMP is non-conjugate VMP (Knowles & Minka
2011), E[eˣ] = exp(m + v/2) in closed form, whose bound is the exact ELBO of the
Gaussian posterior it returns.  The reference is the exact posterior summed on a grid.
"""

from __future__ import annotations

import numpy as np
from scipy import special

import factorflow as ff


def grid_posterior(X: np.ndarray, y: np.ndarray, center, half: float = 1.0, n: int = 201):
    """The exact posterior means of w and log p(y), by summing on a grid of half-width
    ``half`` around ``center`` (the data pin w down to ±0.05)."""
    g0 = np.linspace(center[0] - half, center[0] + half, n)
    g1 = np.linspace(center[1] - half, center[1] + half, n)
    w0, w1 = np.meshgrid(g0, g1, indexing="ij")
    eta = w0[..., None] * X[:, 0] + w1[..., None] * X[:, 1]
    log_p = (-0.5 * (w0**2 + w1**2) - np.log(2 * np.pi)
             + (y * eta - np.exp(eta) - special.gammaln(y + 1)).sum(-1))
    top = log_p.max()
    p = np.exp(log_p - top)
    area = (g0[1] - g0[0]) * (g1[1] - g1[0])
    return (np.array([(p * w0).sum(), (p * w1).sum()]) / p.sum(),
            float(np.log(p.sum() * area) + top))


def main() -> dict[str, float]:
    rng = np.random.default_rng(0)
    n_rows = 200
    covariate = rng.uniform(-1.0, 1.0, size=n_rows)
    X = np.column_stack([np.ones(n_rows), covariate])
    counts = rng.poisson(np.exp(X @ np.array([1.0, 0.8])))

    with ff.Model("poisson_regression") as model:
        w = ff.VectorGaussian("w", 0.0, precision=np.eye(2))
        with ff.Plate(ff.Range("n", n_rows)):
            ff.Poisson("y", ff.exp(X @ w), observed=counts)

    out: dict[str, float] = {}
    results = {algorithm: model.infer(algorithm, iterations=200) for algorithm in ("ep", "vmp")}
    exact_mean, log_z = grid_posterior(X, counts, results["ep"]["w"].mean)
    print(f"exact (grid): E[w] = {np.round(exact_mean, 4)}, log p(y) = {log_z:.6f}")
    out["log_z"] = log_z
    for algorithm, result in results.items():
        q = result["w"]
        err = float(np.abs(q.mean - exact_mean).max())
        what = "log evidence" if algorithm == "ep" else "bound"
        print(f"{algorithm.upper()}: E[w] = {np.round(q.mean, 4)}, sd = "
              f"{np.round(np.sqrt(np.diag(q.covariance)), 4)}; largest difference from the "
              f"exact means {err:.1e}; {what} {result.log_evidence:.6f} "
              f"({result.iterations} sweeps)")
        out[f"{algorithm}_mean_error"] = err
        out[f"{algorithm}_log_evidence"] = float(result.log_evidence)
    return out


if __name__ == "__main__":
    main()
