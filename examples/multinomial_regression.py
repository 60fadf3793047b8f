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
its covariance; ``exact_posterior`` computes it by quadrature instead (the tests' and
``benchmarks/bench_softmax.py``'s reference).  The plate form under EP extrapolates its
messages (``factors.softmax._extrapolated``): its posterior means are near the exact ones,
its variances far below them (independent classes cannot hold the width of their common
shift, which the likelihood leaves to the prior).
"""

from __future__ import annotations

import itertools
import time

import numpy as np
from scipy import optimize, special

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


def _differences(k: int, d: int) -> np.ndarray:
    """L: vec W (row-major W[k, d]) -> the differences W_j − W_0, j = 1 … K − 1."""
    return np.kron(np.hstack([-np.ones((k - 1, 1)), np.eye(k - 1)]), np.eye(d))


def _log_likelihood(delta: np.ndarray, X: np.ndarray, y: np.ndarray, k: int) -> np.ndarray:
    """Σ_n log softmax_y(W X_n) at W_0 = 0, W_j = Δ_j; ``delta`` (S, (K − 1)·D)."""
    s, d = delta.shape[0], X.shape[1]
    W = np.concatenate([np.zeros((s, 1, d)), delta.reshape(s, k - 1, d)], 1)
    logits = np.einsum("nd,skd->snk", X, W)
    picked = np.take_along_axis(logits, np.broadcast_to(y[None, :, None], logits.shape[:2] + (1,)),
                                2)[..., 0]
    return (picked - special.logsumexp(logits, axis=2)).sum(1)


def exact_posterior(X, y, k: int, mu0, cov0, nodes: int = 80) -> tuple[np.ndarray, np.ndarray]:
    """The exact posterior mean and covariance of vec W (row-major W[k, d]) under the
    prior N(mu0, cov0) on vec W.  The likelihood depends on W only through the
    (K − 1)·D differences Δ = L vec W (W_j − W_0), so the posterior is p(Δ | y) times
    the prior's Gaussian conditional of vec W given Δ: the moments of p(Δ | y) by a
    product Gauss–Hermite rule (``nodes`` per axis, at the Laplace fit widened 1.3
    times), carried through that conditional exactly: E[W] = μ₀ + G (E[Δ] − Lμ₀),
    Cov[W] = Σ₀ − G L Σ₀ + G Cov[Δ] Gᵀ, G = Σ₀Lᵀ(LΣ₀Lᵀ)⁻¹.  The grid has
    nodes^((K − 1)·D) points: up to 4 dimensions (20 nodes: 1e-8 here)."""
    d = X.shape[1]
    L = _differences(k, d)
    m_d, prec_d = L @ mu0, np.linalg.inv(L @ cov0 @ L.T)
    dim = L.shape[0]

    def neg_log_post(t):
        u = np.atleast_2d(t) - m_d
        return -(_log_likelihood(np.atleast_2d(t), X, y, k)
                 - 0.5 * np.einsum("si,ij,sj->s", u, prec_d, u))

    mode = optimize.minimize(lambda t: neg_log_post(t)[0], m_d, method="BFGS",
                             options={"gtol": 1e-10}).x
    h, eye = 1e-4, np.eye(dim)
    hess = np.array([[(neg_log_post(mode + h * (eye[i] + eye[j]))
                       - neg_log_post(mode + h * (eye[i] - eye[j]))
                       - neg_log_post(mode - h * (eye[i] - eye[j]))
                       + neg_log_post(mode - h * (eye[i] + eye[j])))[0] / (4 * h * h)
                      for j in range(dim)] for i in range(dim)])
    chol = 1.3 * np.linalg.cholesky(np.linalg.inv(hess))
    x, w = np.polynomial.hermite_e.hermegauss(nodes)
    grid = np.array(list(itertools.product(range(nodes), repeat=dim)))
    z = x[grid]
    t = mode + z @ chol.T
    chunks = range(0, len(t), max(1, 2_000_000 // len(y)))  # (chunk, N, K) logits at a time
    log_w = np.log(w[grid]).sum(1) + 0.5 * (z * z).sum(1) - np.concatenate(
        [neg_log_post(t[i:i + chunks.step]) for i in chunks])
    p = np.exp(log_w - log_w.max())
    p /= p.sum()
    mean_d = p @ t
    cov_d = (p[:, None] * (t - mean_d)).T @ (t - mean_d)
    gain = cov0 @ L.T @ prec_d
    return (mu0 + gain @ (mean_d - m_d),
            cov0 - gain @ L @ cov0 + gain @ cov_d @ gain.T)


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
    result = plate.infer("ep", progress=False)
    out["plate_ep"] = result
    print(f"EP (a plate of classes, independent): E[W] = "
          f"{np.round(result['W'].mean, 4).tolist()} ({result.iterations} sweeps), largest "
          f"difference from importance sampling "
          f"{np.abs(np.ravel(result['W'].mean) - mean_is).max():.4f}")
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
