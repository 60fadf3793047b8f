"""Bayesian linear regression with VectorGaussian weights, under EP and VMP.

w ~ N(0, I), y[n] ~ N(X[n] @ w, 1/τ).  With τ known both algorithms give the exact
posterior (the weights are one vector, so their correlations are kept): the closed form
N(P⁻¹ τ Xᵀy, P⁻¹), P = I + τ XᵀX, to rounding.  With τ ~ Gamma, VMP learns the noise too.
The design matrix is ``ff.Data``: new data runs without recompiling.
"""

from __future__ import annotations

import time

import numpy as np

import factorflow as ff


def main() -> dict[str, float]:
    rng = np.random.default_rng(0)
    n_rows, dim, tau = 200, 4, 4.0
    true_w = np.array([1.0, -2.0, 0.5, 0.0])
    X = rng.normal(size=(n_rows, dim))
    y = X @ true_w + rng.normal(size=n_rows) / np.sqrt(tau)

    with ff.Model("linear_regression") as model:
        design = ff.Data("X", X)
        w = ff.VectorGaussian("w", 0.0, precision=np.eye(dim))
        with ff.Plate(ff.Range("n", n_rows)):
            ff.Gaussian("y", design @ w, precision=tau, observed=y)

    precision = np.eye(dim) + tau * X.T @ X
    exact_mean = np.linalg.solve(precision, tau * X.T @ y)
    exact_cov = np.linalg.inv(precision)
    out = {}
    for algorithm in ("ep", "vmp"):
        compiled = model.compile(algorithm)
        start = time.perf_counter()
        result = compiled.run()
        ms = (time.perf_counter() - start) * 1e3
        q = result["w"]
        err = max(np.abs(q.mean - exact_mean).max(), np.abs(q.covariance - exact_cov).max())
        print(f"{algorithm.upper()}: E[w] = {np.round(q.mean, 4)}, sd = "
              f"{np.round(np.sqrt(np.diag(q.covariance)), 4)}; largest difference from the "
              f"closed form {err:.1e}; log evidence {result.log_evidence:.6f} "
              f"({result.iterations} sweeps, {ms:.1f} ms)")
        out[f"{algorithm}_error"] = float(err)
        out[f"{algorithm}_log_evidence"] = float(result.log_evidence)

    # unknown noise: τ ~ Gamma(1, 1), learnt with the weights (VMP)
    with ff.Model("linear_regression_noise") as noisy:
        w = ff.VectorGaussian("w", 0.0, precision=np.eye(dim))
        noise = ff.Gamma("tau", 1.0, rate=1.0)
        with ff.Plate(ff.Range("n", n_rows)):
            ff.Gaussian("y", X @ w, precision=noise, observed=y)
    result = noisy.infer("vmp", iterations=200)
    print(f"VMP with unknown noise: E[w] = {np.round(result['w'].mean, 4)}, E[tau] = "
          f"{float(result['tau'].mean):.4f} (true {tau}); bound {result.log_evidence:.6f} "
          f"after {result.iterations} sweeps")
    out["tau_mean"] = float(result["tau"].mean)
    out["exact_log_evidence"] = float(
        -0.5 * n_rows * np.log(2 * np.pi) - 0.5 * np.linalg.slogdet(
            X @ X.T + np.eye(n_rows) / tau)[1]
        - 0.5 * y @ np.linalg.solve(X @ X.T + np.eye(n_rows) / tau, y))
    print("\nThe generated VMP code (the weights' update, one array operation per plate):")
    print("\n".join(line for line in model.compile("vmp").source.splitlines()
                    if "v_w__" in line and "=" in line and "resume" not in line)[:1500])
    return out


if __name__ == "__main__":
    main()
