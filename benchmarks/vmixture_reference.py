"""The D-dimensional Gaussian mixture with Wishart precisions under VMP
(``examples/gaussian_mixture.py``), as factorflow models it and as a person writes the
same updates by hand in NumPy: the reference of ``benchmarks/bench_vectors.py`` (time per
sweep) and of ``tests/runtime/test_vector_mixture_fast_paths.py`` (the same posteriors
and bound after every number of sweeps, to 1e-10).

Model (K components, N points of dimension D)::

    weights ~ Dirichlet(1, …, 1)
    means[k] ~ N(0, (0.01 I)⁻¹),  precs[k] ~ Wishart(D + 1, rate I)

(other constants: ``Priors``; the defaults are these, the example's).
    z[n] ~ Discrete(weights),  x[n] ~ N(means[z[n]], precs[z[n]]⁻¹)   (ff.Switch(z))

The hand-written coordinate ascent (Bishop §10.2 with μ_k ⊥ Λ_k) keeps one (N, K)
responsibility array r and the sufficient statistics Σ_n r_nk, Σ_n r_nk x_n and
Σ_n r_nk x_n x_nᵀ: BLAS products of r with the (N, 1), (N, D) and (N, D(D+1)/2) arrays
[1, x, x xᵀ] (the last: the upper triangle of each x xᵀ, made once).  The
responsibilities' logs are one (N, D(D+1)/2) × (D(D+1)/2, K) product (−½ xᵀ E[Λ_k] x, the
off-diagonal entries doubled) plus one (N, D) × (D, K) product (xᵀ E[Λ_k] m_k) plus a
K-vector.  The update order is factorflow's: at the start q(weights) and q(precs) are
their priors and q(means) the initialisation, from which the responsibilities are
computed; then each sweep updates weights, responsibilities, precisions, means.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import special

import factorflow as ff

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import gaussian_mixture  # noqa: E402

LOG_2PI = float(np.log(2 * np.pi))
PRIOR_PRECISION = 0.01   # means[k] ~ N(0, (0.01 I)⁻¹)
ALPHA0 = 1.0             # weights ~ Dirichlet(1, …, 1)


@dataclass(frozen=True)
class Priors:
    """The model's constants (the defaults: the example's): weights ~ Dirichlet(alpha,
    …, alpha), means[k] ~ N(mean · 1, (precision · I)⁻¹), precs[k] ~ Wishart(D + 1 +
    extra_dof, rate · I)."""
    alpha: float = ALPHA0
    mean: float = 0.0
    precision: float = PRIOR_PRECISION
    extra_dof: float = 0.0
    rate: float = 1.0

    def constants(self, dim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """(m0 (D,), P0 (D, D), R0 (D, D), ν0) at dimension ``dim``."""
        eye = np.eye(dim)
        return (np.full(dim, self.mean), self.precision * eye, self.rate * eye,
                dim + 1.0 + self.extra_dof)


def data(k: int, n: int, dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` points around ``k`` random centres (N(0, 25 I)) with unit noise, and the
    means' initial posterior means (the centres + 0.5)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(k, dim)) * 5
    return centers[rng.integers(0, k, n)] + rng.normal(size=(n, dim)), centers + 0.5


def model(x: np.ndarray, k: int, priors: Priors | None = None) -> ff.Model:
    """The factorflow model of ``k`` components for the points ``x`` (N × D): the
    example's own (``examples/gaussian_mixture.mixture``, whose priors are ``Priors()``;
    the test against ``hand_written`` holds them equal), or with ``priors`` the same
    model with those constants."""
    if priors is None:
        return gaussian_mixture.mixture(x, k)
    m0, p0, r0, nu0 = priors.constants(x.shape[1])
    with ff.Model("gaussian_mixture") as m:
        weights = ff.Dirichlet("weights", np.full(k, priors.alpha))
        with ff.Plate(ff.Range("k", k)):
            means = ff.VectorGaussian("means", m0, precision=p0)
            precs = ff.Wishart("precs", nu0, rate=r0)
        with ff.Plate(ff.Range("n", len(x))):
            z = ff.Discrete("z", weights)
            with ff.Switch(z):
                ff.VectorGaussian("x", means[z], precision=precs[z], observed=x)
    return m


def factorflow_init(start: np.ndarray) -> dict[str, ff.distributions.VectorGaussian]:
    """The ``init=`` of ``model(x, k).compile("vmp", init=["means"]).run``: q(means[k]) =
    N(start[k], I)."""
    k, dim = start.shape
    return {"means": ff.distributions.VectorGaussian(
        start, np.broadcast_to(np.eye(dim), (k, dim, dim)))}


@dataclass
class Posteriors:
    """The hand-written run's posteriors, in the parameters factorflow reports."""
    alpha: np.ndarray        # q(weights) = Dirichlet(alpha)
    mean: np.ndarray         # q(means[k]) = N(mean[k], cov[k]), (K, D), (K, D, D)
    cov: np.ndarray
    dof: np.ndarray          # q(precs[k]) = Wishart(dof[k], rate[k]), (K,), (K, D, D)
    rate: np.ndarray
    r: np.ndarray            # q(z[n] = k), (N, K)


def _triangle(dim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The upper triangle's (row, column) indices of a D × D matrix and the weight of each
    entry in a symmetric quadratic form (1 on the diagonal, 2 off it)."""
    i, j = np.triu_indices(dim)
    return i, j, np.where(i == j, 1.0, 2.0)


def _moments(dof: np.ndarray, rate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(E[Λ_k], E[log |Λ_k|]) of the Wisharts, by one Cholesky factor each."""
    dim = rate.shape[-1]
    chol = np.linalg.cholesky(rate)
    inv = np.linalg.inv(rate)
    log_det = 2.0 * np.sum(np.log(np.diagonal(chol, axis1=-2, axis2=-1)), axis=-1)
    e_logdet = (np.sum(special.digamma(0.5 * (dof[:, None] - np.arange(dim))), axis=1)
                + dim * np.log(2.0) - log_det)
    return dof[:, None, None] * inv, e_logdet


def _components(s0: np.ndarray, s1: np.ndarray, s2: np.ndarray, mean: np.ndarray,
                cov: np.ndarray, priors: Priors = Priors()) -> tuple[np.ndarray, ...]:
    """The components' VMP updates from the data sums Σ r (K,), Σ r x (K, D) and Σ r x xᵀ
    (K, D, D), reading the means' last posterior: (dof, rate, mean, cov)."""
    dim = s1.shape[1]
    m0, p0, r0, nu0 = priors.constants(dim)
    # precisions: ν0 + Σ r, R0 + Σ_n r_nk E[(x_n − μ_k)(x_n − μ_k)ᵀ]
    ms1 = mean[:, :, None] * s1[:, None, :]
    dof = nu0 + s0
    rate = (r0 + s2 - ms1 - np.swapaxes(ms1, 1, 2)
            + s0[:, None, None] * (mean[:, :, None] * mean[:, None, :] + cov))
    # means: P0 + Σ r E[Λ_k], P0 m0 + E[Λ_k] Σ r x
    e_lam = dof[:, None, None] * np.linalg.inv(rate)
    cov = np.linalg.inv(p0 + s0[:, None, None] * e_lam)
    mean = np.einsum("kij,kj->ki", cov, p0 @ m0 + np.einsum("kij,kj->ki", e_lam, s1))
    return dof, rate, mean, cov


def hand_written(x: np.ndarray, start: np.ndarray, sweeps: int,
                 each: Callable[[Posteriors], bool] | None = None,
                 priors: Priors = Priors()) -> Posteriors:
    """``sweeps`` sweeps of VMP on the mixture, written by hand (see the module doc), from
    q(means[k]) = N(start[k], I); ``each(posteriors)`` after every sweep (True stops)."""
    n, dim = x.shape
    k = len(start)
    i, j, twice = _triangle(dim)
    xx = x[:, i] * x[:, j]                                   # (N, D(D+1)/2), made once
    _, _, r0, nu0 = priors.constants(dim)
    mean, cov = np.array(start, float), np.broadcast_to(np.eye(dim), (k, dim, dim))
    dof, rate = np.full(k, nu0), np.broadcast_to(r0, (k, dim, dim))
    alpha = np.full(k, priors.alpha)

    def responsibilities() -> np.ndarray:
        # log r_nk = E log w_k + ½E log|Λ_k| − ½ xᵀE[Λ_k]x + xᵀE[Λ_k]m_k
        #            − ½(m_kᵀE[Λ_k]m_k + tr(E[Λ_k] S_k)) + const
        e_lam, e_logdet = _moments(dof, rate)
        e_log_w = special.digamma(alpha) - special.digamma(alpha.sum())
        lam_m = np.einsum("kij,kj->ki", e_lam, mean)
        const = (e_log_w + 0.5 * e_logdet
                 - 0.5 * (np.einsum("ki,ki->k", lam_m, mean)
                          + np.einsum("kij,kij->k", e_lam, cov)))
        log_r = xx @ (-0.5 * twice * e_lam[:, i, j]).T + x @ lam_m.T + const
        log_r -= log_r.max(axis=1, keepdims=True)
        r = np.exp(log_r)
        r /= r.sum(axis=1, keepdims=True)
        return r

    r = responsibilities()
    for _ in range(sweeps):
        alpha = priors.alpha + r.sum(axis=0)
        r = responsibilities()
        s2 = np.empty((k, dim, dim))
        s2[:, i, j] = s2[:, j, i] = r.T @ xx                 # Σ r x xᵀ
        dof, rate, mean, cov = _components(r.sum(axis=0), r.T @ x, s2, mean, cov, priors)
        if each is not None and each(Posteriors(alpha, mean, cov, dof, rate, r)):
            break
    return Posteriors(alpha, mean, cov, dof, rate, r)


#: rows per block of ``hand_written_blocked``: a block of the statistics, of the logits
#: and of the responsibilities (2¹⁴ rows × K = 10: 1.3 MB each at D = 2) stays in cache
#: through the block's steps
BLOCK_ROWS = 2**14


def hand_written_blocked(x: np.ndarray, start: np.ndarray, sweeps: int,
                         block: int = BLOCK_ROWS) -> Posteriors:
    """``hand_written``'s updates, the responsibilities fused as a person writes them for
    memory passes at large N: over blocks of ``block`` rows (a Python loop over blocks,
    none over data), the logits of a block are one (rows, 1+D+T) × (1+D+T, K) BLAS
    product of the statistics [1, x, x xᵀ] with the components' coefficients (E[log w]
    added into the row of ones), normalised and exponentiated in place into the (N, K)
    responsibilities (one array, written again each sweep: no fresh (N, K) memory to
    fault in), and Σ_n r_nk [1, x, x xᵀ] is accumulated from the block while it is in
    cache.  One pass over the (N, K) memory a sweep, where ``hand_written`` makes
    about ten.  The same numbers to rounding (the tests: 1e-10)."""
    n, dim = x.shape
    k = len(start)
    i, j, twice = _triangle(dim)
    t = len(i)
    stats = np.empty((n, 1 + dim + t))                        # [1, x, x xᵀ], made once
    stats[:, 0], stats[:, 1:1 + dim] = 1.0, x
    np.multiply(x[:, i], x[:, j], out=stats[:, 1 + dim:])
    r0, nu0 = np.eye(dim), dim + 1.0
    mean, cov = np.array(start, float), np.broadcast_to(np.eye(dim), (k, dim, dim))
    dof, rate = np.full(k, nu0), np.broadcast_to(r0, (k, dim, dim))
    alpha = np.full(k, ALPHA0)
    r = np.empty((n, k))
    coef = np.empty((1 + dim + t, k))

    def responsibilities() -> np.ndarray:
        """r (written in place) and Σ_n r_nk [1, x, x xᵀ], (1+D+T, K)."""
        e_lam, e_logdet = _moments(dof, rate)
        lam_m = np.einsum("kij,kj->ki", e_lam, mean)
        coef[0] = (special.digamma(alpha) - special.digamma(alpha.sum()) + 0.5 * e_logdet
                   - 0.5 * (np.einsum("ki,ki->k", lam_m, mean)
                            + np.einsum("kij,kij->k", e_lam, cov)))
        coef[1:1 + dim] = lam_m.T
        coef[1 + dim:] = (-0.5 * twice * e_lam[:, i, j]).T
        sums = np.zeros((1 + dim + t, k))
        for lo in range(0, n, block):
            rows = slice(lo, lo + block)
            part = np.matmul(stats[rows], coef, out=r[rows])
            part -= part.max(axis=1, keepdims=True)
            np.exp(part, out=part)
            part /= part.sum(axis=1, keepdims=True)
            sums += stats[rows].T @ part
        return sums

    sums = responsibilities()
    for _ in range(sweeps):
        alpha = ALPHA0 + sums[0]
        sums = responsibilities()
        s2 = np.empty((k, dim, dim))
        s2[:, i, j] = s2[:, j, i] = sums[1 + dim:].T
        dof, rate, mean, cov = _components(sums[0], sums[1:1 + dim].T, s2, mean, cov)
    return Posteriors(alpha, mean, cov, dof, rate, r)


def _log_multigamma(a: np.ndarray, dim: int) -> np.ndarray:
    return special.multigammaln(a, dim) if np.ndim(a) == 0 else np.array(
        [special.multigammaln(v, dim) for v in a])


def bound(x: np.ndarray, q: Posteriors, priors: Priors = Priors()) -> float:
    """The VMP lower bound (ELBO) of the posteriors ``q``: E_q[log p(x, z, θ)] + H[q],
    each term written from its definition."""
    n, dim = x.shape
    k = q.alpha.size
    m0, p0, r0, nu0 = priors.constants(dim)
    alpha0 = priors.alpha
    e_lam, e_logdet = _moments(q.dof, q.rate)
    e_log_w = special.digamma(q.alpha) - special.digamma(q.alpha.sum())
    d = x[:, None, :] - q.mean[None]                                       # (N, K, D)
    lik = (0.5 * e_logdet - 0.5 * dim * LOG_2PI
           - 0.5 * (np.einsum("nki,kij,nkj->nk", d, e_lam, d, optimize=True)
                    + np.einsum("kij,kij->k", e_lam, q.cov)))
    data_terms = np.sum(q.r * (e_log_w + lik)) - np.sum(special.xlogy(q.r, q.r))
    # weights: E log Dir(w | α0) + H[Dir(α)]
    weights = (special.gammaln(k * alpha0) - k * special.gammaln(alpha0)
               + (alpha0 - 1) * e_log_w.sum()
               - (special.gammaln(q.alpha.sum()) - special.gammaln(q.alpha).sum()
                  + np.sum((q.alpha - 1) * e_log_w)))
    # means: E log N(μ | m0, P0⁻¹) + H[N(m, S)]
    dm = q.mean - m0
    means = np.sum(0.5 * np.linalg.slogdet(p0)[1] - 0.5 * dim * LOG_2PI
                   - 0.5 * (np.einsum("ki,ij,kj->k", dm, p0, dm)
                            + np.einsum("ij,kji->k", p0, q.cov))
                   + 0.5 * dim * (1 + LOG_2PI) + 0.5 * np.linalg.slogdet(q.cov)[1])
    # precisions: E log W(Λ | ν0, R0) + H[W(ν, R)]
    log_z0 = 0.5 * nu0 * dim * np.log(2) - 0.5 * nu0 * np.linalg.slogdet(r0)[1] \
        + special.multigammaln(0.5 * nu0, dim)
    log_z = (0.5 * q.dof * dim * np.log(2) - 0.5 * q.dof * np.linalg.slogdet(q.rate)[1]
             + _log_multigamma(0.5 * q.dof, dim))
    precs = np.sum(0.5 * (nu0 - dim - 1) * e_logdet - 0.5 * np.einsum("ij,kji->k", r0, e_lam)
                   - log_z0
                   + log_z - 0.5 * (q.dof - dim - 1) * e_logdet + 0.5 * q.dof * dim)
    return float(data_terms + weights + means + precs)
