"""Multinomial (softmax) regression over a plate of data, under EP and VMP, against
importance sampling of the exact posterior.

K = 3 classes, D = 2 features (an intercept and x), weights W (K × D) ~ N(0, I):
y[n] ~ Discrete(softmax(W X[n])).  Two ways to write the logits:

* one vector: w = vec(W) a VectorGaussian of K·D, logits ``B[n] @ w`` with B[n] = I_K ⊗
  X[n] (``ff.Discrete("y", ff.softmax(B @ w))``): the weights' full covariance;
* a plate over the classes: W[k] a VectorGaussian of D per class, logits ``X[n] @ W[k]``
  inside plates (n, k), ``ff.Discrete("y", ff.softmax(eta, k))``: the classes independent.

EP integrates each tilted distribution by quadrature (K = 3: a logistic quadrature inside
a trapezoid rule); VMP maximises Böhning's bound (its posterior means are the MAP
weights: the bound's stationary point does not depend on its curvature).  The reference is
self-normalised importance sampling from a Student-t (ν = 5) at the EP posterior with twice
its covariance.
"""

from __future__ import annotations

import time

import numpy as np
from scipy import special

import factorflow as ff

N, D, K = 120, 2, 3
TRUE_W = np.array([[0.0, -1.0], [0.5, 0.5], [-0.5, 1.5]])


def data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(N), rng.normal(size=N)])
    p = special.softmax(X @ TRUE_W.T, axis=1)
    y = (rng.random(N)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
    return X, y


def importance_sampling(X, y, mean, cov, n=100_000, seed=1, chunk=20_000):
    """E[vec W] and log p(y) by self-normalised importance sampling (a Student-t proposal
    with 5 degrees of freedom), with the effective sample size."""
    rng = np.random.default_rng(seed)
    dim, nu = len(mean), 5.0
    chol = np.linalg.cholesky(2.0 * cov)
    log_w, draws = [], []
    for _ in range(n // chunk):
        z = rng.standard_normal((chunk, dim))
        g = rng.chisquare(nu, size=(chunk, 1)) / nu
        w = mean + (z @ chol.T) / np.sqrt(g)
        u = np.linalg.solve(chol, (w - mean).T).T
        log_q = (special.gammaln((nu + dim) / 2) - special.gammaln(nu / 2)
                 - 0.5 * dim * np.log(nu * np.pi) - np.log(np.diag(chol)).sum()
                 - 0.5 * (nu + dim) * np.log1p((u * u).sum(1) / nu))
        logits = np.einsum("nd,skd->snk", X, w.reshape(chunk, K, D))
        loglik = (np.take_along_axis(logits, y[None, :, None], 2)[..., 0]
                  - special.logsumexp(logits, axis=2)).sum(1)
        log_prior = -0.5 * (w * w).sum(1) - 0.5 * dim * np.log(2 * np.pi)
        log_w.append(loglik + log_prior - log_q)
        draws.append(w)
    log_w, draws = np.concatenate(log_w), np.concatenate(draws)
    top = log_w.max()
    p = np.exp(log_w - top)
    return (p @ draws / p.sum(), float(np.log(p.mean()) + top),
            float(p.sum() ** 2 / (p * p).sum()))


def models(X, y):
    blocks = np.einsum("kj,nd->nkjd", np.eye(K), X).reshape(N, K, K * D)  # I_K ⊗ X[n]
    with ff.Model("multinomial_regression") as vector:
        w = ff.VectorGaussian("w", np.zeros(K * D), precision=np.eye(K * D))
        with ff.Plate(ff.Range("n", N)):
            ff.Discrete("y", ff.softmax(blocks @ w), observed=y)
    with ff.Model("multinomial_regression_plate") as plate:
        k = ff.Range("k", K)
        with ff.Plate(k):
            W = ff.VectorGaussian("W", np.zeros(D), precision=np.eye(D))
        with ff.Plate(ff.Range("n", N)):
            with ff.Plate(k):
                eta = ff.inner(W, X[:, None, :])
            ff.Discrete("y", ff.softmax(eta, k), observed=y)
    return vector, plate


def main() -> dict[str, object]:
    X, y = data()
    vector, plate = models(X, y)
    out: dict[str, object] = {}
    for algorithm in ("ep", "vmp"):
        start = time.perf_counter()
        result = vector.infer(algorithm, progress=False)
        ms = (time.perf_counter() - start) * 1e3
        out[algorithm] = result
        what = "log evidence" if algorithm == "ep" else "bound"
        print(f"{algorithm.upper()} (vector logits): E[W] = "
              f"{np.round(result['w'].mean.reshape(K, D), 4).tolist()}, {what} "
              f"{result.log_evidence:.6f} ({result.iterations} sweeps, {ms:.0f} ms)")
    q = out["ep"]["w"]
    mean_is, log_z, ess = importance_sampling(X, y, q.mean, q.covariance)
    out.update(is_mean=mean_is, is_log_z=log_z, ess=ess)
    print(f"importance sampling (ESS {ess:,.0f}): E[W] = "
          f"{np.round(mean_is.reshape(K, D), 4).tolist()}, log p(y) = {log_z:.4f}")
    for algorithm in ("ep", "vmp"):
        err = float(np.abs(out[algorithm]["w"].mean - mean_is).max())
        out[f"{algorithm}_error"] = err
        print(f"   {algorithm.upper()}: largest difference from importance sampling {err:.4f}")
    result = plate.infer("vmp", progress=False)
    out["plate_vmp"] = result
    print(f"VMP (a plate of classes, independent): E[W] = "
          f"{np.round(result['W'].mean, 4).tolist()}, bound {result.log_evidence:.6f} "
          "(looser: the separable bound ½ I)")
    lines = vector.compile("vmp").source.splitlines()
    at = next(i for i, line in enumerate(lines) if "DiscreteFromSoftmax_logits" in line)
    print("   generated code:", lines[at - 1].strip(), "\n    ", lines[at].strip())
    return out


if __name__ == "__main__":
    main()
