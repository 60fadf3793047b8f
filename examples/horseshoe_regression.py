"""Horseshoe linear regression by Gibbs sampling (AeMCMC's acceptance test).

Fifty observations, ten coefficients, two of them non-zero: β = (1, 1.5, 0, …, 0),
y = X β + ε with ε ~ N(0, 1). The horseshoe prior, written as a user would:
τ ~ C⁺(0, 1), λ[k] ~ C⁺(0, τ), β[k] ~ N(0, λ[k]²), and the linear predictor as
``ff.sum(X * beta, k)``. Nothing in factorflow names this model: the compiler explores
the scale-mixture rewrites in an e-graph and finds that each half-Cauchy is the root of
an inverse Gamma with an inverse-Gamma auxiliary (every scale then conjugate), and the
coefficients, summed together, are drawn jointly from their Gaussian conditional.
``compiled.samplers`` says which rewrites it used.
"""

from __future__ import annotations

import numpy as np

import factorflow as ff

TRUE = np.zeros(10)
TRUE[:2] = [1.0, 1.5]


def data(seed: int = 0, n: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """(X, y): X standard normal (n × 10), y = X β + N(0, 1) noise."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, TRUE.size))
    return x, x @ TRUE + rng.normal(size=n)


def build(x: np.ndarray, y: np.ndarray) -> ff.Model:
    with ff.Model("horseshoe_regression") as model:
        i, k = ff.Range("i", len(y)), ff.Range("k", x.shape[1])
        tau = ff.HalfCauchy("tau", 1.0)
        with ff.Plate(k):
            lam = ff.HalfCauchy("lam", tau)
            beta = ff.Gaussian("beta", 0.0, scale=lam)
        with ff.Plate(i):
            with ff.Plate(k):
                scaled = x * beta
            ff.Gaussian("y", ff.sum(scaled, k), precision=1.0, observed=y)
    return model


def main() -> dict[str, np.ndarray]:
    compiled = build(*data(0)).compile("gibbs")
    print(compiled.samplers["lam"])
    print(compiled.samplers["beta"])
    result = compiled.run(draws=2000, burn=1000, chains=2, seed=0)  # 3,000 sweeps
    median = np.median(result.samples("beta").reshape(-1, TRUE.size), axis=0)
    print("true β:           ", TRUE)
    print("posterior median: ", np.round(median, 2))
    return {"median": median}


if __name__ == "__main__":
    main()
