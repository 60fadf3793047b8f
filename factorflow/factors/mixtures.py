"""Messages along a batch axis: log weights, pairwise evidence, mixtures and their projection.

The gate operators (``factorflow.factors.gate``) combine one message per case: they weigh,
mix and project along the last batch axis.  Everything here is one array operation over
whole batches and follows the evidence convention of ``factors.common``: a uniform message
weighs 1 on every value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from factorflow.distributions import (
    Bernoulli,
    Beta,
    Dirichlet,
    Discrete,
    Gamma,
    Gaussian,
    VectorGaussian,
)
from factorflow.distributions.base import Distribution, log_normalize, log_normalizer_or_zero
from factorflow.distributions.moments import E, is_known
from factorflow.factors.common import bool_log_probs, bool_log_weights, logsumexp, times_finite
from factorflow.lazy import special


def normalized(log_w: np.ndarray) -> np.ndarray:
    """log weights normalised over the last axis (``distributions.base.log_normalize``)."""
    return log_normalize(log_w)


def log1mexp(x: np.ndarray) -> np.ndarray:
    """log(1 − exp(x)) for x ≤ 0, accurate at both ends."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x > -0.693, np.log(-np.expm1(x)), np.log1p(-np.exp(x)))


def log_probs(d: Any) -> np.ndarray:
    """log p(value) of a boolean (values true, false) or discrete argument over a new last
    axis, normalised."""
    if isinstance(d, Discrete):
        return normalized(d.eta[0])
    if isinstance(d, Bernoulli) or np.asarray(E(d)).dtype == bool:
        return np.stack(np.broadcast_arrays(*bool_log_probs(d)), axis=-1)
    raise TypeError(f"expected a boolean or discrete argument, got {type(d).__name__}")


def log_weights(d: Any) -> np.ndarray | None:
    """The evidence log weights of each value of a finite-family argument (last axis):
    normalised, or 0 everywhere for a uniform message; None for continuous families."""
    if isinstance(d, Discrete):
        uniform = np.all(d.eta[0] == 0, axis=-1, keepdims=True)
        return np.where(uniform, 0.0, normalized(d.eta[0]))
    if isinstance(d, Bernoulli) or (is_known(d) and np.asarray(E(d)).dtype == bool):
        return np.stack(np.broadcast_arrays(*bool_log_weights(d)), axis=-1)
    return None


def log_average(a: Distribution, b: Distribution) -> np.ndarray:
    """log ∫ â b̂ (finite families summed in log weights, so certain booleans stay exact)."""
    wa, wb = log_weights(a), log_weights(b)
    with np.errstate(divide="ignore", invalid="ignore"):
        if wa is not None and wb is not None:
            return logsumexp(wa + wb, axis=-1)
        return (log_normalizer_or_zero(a * b) - log_normalizer_or_zero(a)
                - log_normalizer_or_zero(b))


def log_mass(d: Distribution) -> np.ndarray:
    """log ∫ m̂ under the evidence convention: log K for a uniform finite-family message
    (it weighs 1 on every value), 0 for a normalised one and for continuous families."""
    w = log_weights(d)
    if w is None:
        return np.zeros(d.batch_shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        return logsumexp(w, axis=-1)


def average_log(q: Distribution, p: Distribution) -> np.ndarray:
    """E_q[log p̂] (0 where p is uniform)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return p._inner(p.eta, q.expected_stats()) - log_normalizer_or_zero(p)


def expand(d: Distribution, shape: tuple[int, ...]) -> Distribution:
    """``d`` with a new last batch axis, broadcast to batch ``shape``."""
    return d._map(lambda e, nd: np.expand_dims(e, e.ndim - nd)).broadcast_to(shape)


def concat(a: Distribution, b: Distribution) -> Distribution:
    """``a`` and ``b`` side by side along the last batch axis."""
    ax = -1 - a.event_ndim
    return type(a).from_natural(*(np.concatenate([x, y], axis=ax)
                                  for x, y in zip(a.eta, b.eta, strict=True)))


def project(comps: Distribution, log_w: np.ndarray) -> Distribution:
    """proj[Σ_j w_j comps[..., j]], w ∝ exp(log_w) over the last batch axis: the family
    member with the mixture's mean and variance (Gaussian, Gamma, Beta; exact for
    Bernoulli and Discrete), for a Dirichlet its mean and Σ_k E[p_k²] (Infer.NET's
    SetToSum)."""
    w = np.exp(normalized(log_w))

    def mix(x: np.ndarray, nd: int = 0) -> np.ndarray:
        return np.sum(times_finite(w[(...,) + (None,) * nd], x), axis=-1 - nd)

    if isinstance(comps, Bernoulli):
        # P(true) and P(false) mixed apart: Σ_j w_j p_j of certain components can round
        # above 1 (a NaN log-odds); this way a certain mixture stays exactly certain
        with np.errstate(divide="ignore"):
            return Bernoulli.from_natural(np.log(mix(comps.p))
                                          - np.log(mix(special.expit(-comps.log_odds))))
    if isinstance(comps, Discrete):
        return Discrete(mix(comps.probs, 1))
    if isinstance(comps, VectorGaussian):  # the mixture's mean and full covariance
        mean, cov = comps.mean_and_covariance()
        m = mix(mean, 1)
        second = mix(cov + mean[..., :, None] * mean[..., None, :], 2)
        return VectorGaussian(m, second - m[..., :, None] * m[..., None, :])
    nd = comps.event_ndim
    with np.errstate(invalid="ignore", over="ignore"):
        m = mix(comps.mean, nd)
        v = mix(comps.variance + comps.mean ** 2, nd) - m * m
    if isinstance(comps, Gaussian):
        return Gaussian(m, v)
    if isinstance(comps, Gamma):
        return Gamma(m * m / v, rate=m / v)
    if isinstance(comps, Beta):
        s = m * (1 - m) / v - 1
        return Beta(m * s, (1 - m) * s)
    if isinstance(comps, Dirichlet):
        s = np.sum(m * (1 - m), axis=-1, keepdims=True) / np.sum(v, axis=-1, keepdims=True)
        return Dirichlet(m * (s - 1))
    raise TypeError(f"no projection of mixtures of {type(comps).__name__}")


def power_each(d: Distribution, q: np.ndarray) -> Distribution:
    """d ** q elementwise over the batch (0 · ∞ = 0): one multiplication per natural
    parameter where the distinct natural parameters of ``d`` are all finite."""
    nd = d.event_ndim
    w = q[(...,) + (None,) * nd]
    finite = all(np.all(np.isfinite(e)) for e in d.compact().eta)
    return d.from_natural(*((w * e) if finite else times_finite(w, e) for e in d.eta))


def power_product(comps: Distribution, q: np.ndarray) -> Distribution:
    """Π_j comps[..., j] ** q_j over the last batch axis (0 · ∞ = 0)."""
    nd = comps.event_ndim
    return comps.from_natural(*(np.sum(times_finite(q[(...,) + (None,) * nd], e), axis=-1 - nd)
                                for e in comps.eta))
