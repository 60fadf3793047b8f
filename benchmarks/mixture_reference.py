"""The 1-D Gaussian mixture under VMP, as factorflow models it and as a person writes the
same updates by hand in NumPy: the reference of ``benchmarks/run.py`` (time per sweep)
and of ``tests/runtime/test_mixture_reference.py`` (the same posteriors after every
number of sweeps, to 1e-10).

Model (K components, N points)::

    weights ~ Dirichlet(1, …, 1)
    means[k] ~ N(0, 100),  precs[k] ~ Gamma(1, rate 1)
    z[n] ~ Discrete(weights),  x[n] ~ N(means[z[n]], 1 / precs[z[n]])   (ff.Switch(z))

The hand-written coordinate ascent keeps one (N, K) responsibility array and the three
sufficient statistics Σ_n r_nk, Σ_n r_nk x_n, Σ_n r_nk x_n² (one BLAS product of the
(N, 3) array [1, x, x²] with r), in factorflow's order: at the start q(weights) is its
prior, q(precs) its prior and q(means) the initialisation, from which the
responsibilities are computed; then each sweep updates weights, responsibilities,
precisions, means.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import special

import factorflow as ff

PRIOR_MEAN, PRIOR_VAR = 0.0, 100.0  # means[k]
PREC_SHAPE, PREC_RATE = 1.0, 1.0    # precs[k]
INIT_VAR = 1.0                      # the variance of the initial q(means)


@dataclass(frozen=True)
class Priors:
    """The model's constants (the defaults: the benchmark's): weights ~ Dirichlet(alpha,
    …, alpha), means[k] ~ N(mean, var), precs[k] ~ Gamma(shape, rate)."""
    alpha: float = 1.0
    mean: float = PRIOR_MEAN
    var: float = PRIOR_VAR
    shape: float = PREC_SHAPE
    rate: float = PREC_RATE


def data(k: int, n: int, seed: int = 0) -> np.ndarray:
    """``n`` points from ``k`` unit-variance clusters centred at 0, 4, 8, …"""
    rng = np.random.default_rng(seed)
    return rng.normal(4.0 * rng.integers(0, k, n), 1.0)


def init_means(x: np.ndarray, k: int) -> np.ndarray:
    """The means' initial posterior means: ``k`` evenly spaced quantiles of the data."""
    return np.quantile(x, (np.arange(k) + 0.5) / k)


def model(x: np.ndarray, k: int, priors: Priors = Priors()) -> ff.Model:
    """The factorflow model of ``k`` components for the points ``x``."""
    with ff.Model("mixture_1d") as m:
        weights = ff.Dirichlet("weights", np.full(k, priors.alpha))
        with ff.Plate(ff.Range("k", k)):
            means = ff.Gaussian("means", priors.mean, variance=priors.var)
            precs = ff.Gamma("precs", priors.shape, rate=priors.rate)
        with ff.Plate(ff.Range("n", x.size)):
            z = ff.Discrete("z", weights)
            with ff.Switch(z):
                ff.Gaussian("x", means[z], precision=precs[z], observed=x)
    return m


def factorflow_init(x: np.ndarray, k: int) -> dict[str, ff.distributions.Gaussian]:
    """The ``init=`` of ``model(x, k).compile("vmp", init=["means"]).run``."""
    return {"means": ff.distributions.Gaussian(init_means(x, k), np.full(k, INIT_VAR))}


@dataclass
class Posteriors:
    """The hand-written run's posteriors, in the parameters factorflow reports."""
    alpha: np.ndarray        # q(weights) = Dirichlet(alpha)
    mean: np.ndarray         # q(means[k]) = N(mean, var)
    var: np.ndarray
    shape: np.ndarray        # q(precs[k]) = Gamma(shape, rate)
    rate: np.ndarray
    r: np.ndarray            # q(z[n] = k), (N, K)


def hand_written(x: np.ndarray, k: int, sweeps: int,
                 each: Callable[[Posteriors], bool] | None = None,
                 priors: Priors = Priors()) -> Posteriors:
    """``sweeps`` sweeps of VMP on the mixture, written by hand (see the module doc);
    ``each(posteriors)`` after every sweep (True stops)."""
    stats = np.stack([np.ones_like(x), x, x * x], axis=1)      # (N, 3): 1, x, x²
    mean, var = init_means(x, k), np.full(k, INIT_VAR)
    shape, rate = np.full(k, priors.shape), np.full(k, priors.rate)
    alpha = np.full(k, priors.alpha)

    def responsibilities() -> np.ndarray:
        # log r_nk = E[log w_k] + E[log N(x_n | μ_k, 1/τ_k)] + const, linear in (1, x, x²)
        e_tau = shape / rate
        e_log_w = special.digamma(alpha) - special.digamma(alpha.sum())
        e_log_tau = special.digamma(shape) - np.log(rate)
        coef = np.stack([e_log_w + 0.5 * e_log_tau - 0.5 * e_tau * (mean**2 + var),
                         e_tau * mean, -0.5 * e_tau])                 # (3, K)
        log_r = stats @ coef
        log_r -= log_r.max(axis=1, keepdims=True)
        r = np.exp(log_r)
        r /= r.sum(axis=1, keepdims=True)
        return r

    r = responsibilities()
    for _ in range(sweeps):
        alpha = priors.alpha + r.sum(axis=0)
        r = responsibilities()
        n_k, s1, s2 = stats.T @ r                                     # Σ r, Σ r x, Σ r x²
        shape = priors.shape + 0.5 * n_k
        rate = priors.rate + 0.5 * (s2 - 2.0 * mean * s1 + (mean**2 + var) * n_k)
        e_tau = shape / rate
        precision = 1.0 / priors.var + e_tau * n_k
        mean = (priors.mean / priors.var + e_tau * s1) / precision
        var = 1.0 / precision
        if each is not None and each(Posteriors(alpha, mean, var, shape, rate, r)):
            break
    return Posteriors(alpha, mean, var, shape, rate, r)


def bound(x: np.ndarray, q: Posteriors, priors: Priors = Priors()) -> float:
    """The VMP lower bound (ELBO) of the posteriors ``q``: E_q[log p(x, z, θ)] + H[q]."""
    k = q.alpha.size
    a0 = priors.alpha
    e_log_w = special.digamma(q.alpha) - special.digamma(q.alpha.sum())
    e_tau = q.shape / q.rate
    e_log_tau = special.digamma(q.shape) - np.log(q.rate)
    lik = (0.5 * e_log_tau - 0.5 * np.log(2 * np.pi)
           - 0.5 * e_tau * ((x[:, None] - q.mean) ** 2 + q.var))          # (N, K)
    kl_w = (special.gammaln(q.alpha.sum()) - special.gammaln(q.alpha).sum()
            - special.gammaln(k * a0) + k * special.gammaln(a0)
            + np.sum((q.alpha - a0) * e_log_w))
    kl_means = 0.5 * np.sum(np.log(priors.var / q.var) - 1.0
                            + (q.var + (q.mean - priors.mean) ** 2) / priors.var)
    kl_precs = np.sum((q.shape - priors.shape) * special.digamma(q.shape)
                      - special.gammaln(q.shape) + special.gammaln(priors.shape)
                      + priors.shape * (np.log(q.rate) - np.log(priors.rate))
                      + q.shape * (priors.rate - q.rate) / q.rate)
    return float(np.sum(q.r * (e_log_w + lik)) - np.sum(special.xlogy(q.r, q.r))
                 - kl_w - kl_means - kl_precs)
