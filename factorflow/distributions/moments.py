"""Expectations of a factor argument that is either known (an array) or a distribution.

Message operators are written with these (VinDsl's E, V, C, Elog), so one operator serves
an observed argument and a random one alike: for a known value x, E(x) = x, V(x) = 0 and
C(x) = 0 (a PointMass counts as known).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from factorflow.distributions.base import Distribution
from factorflow.distributions.families import (
    Bernoulli,
    Beta,
    Dirichlet,
    Discrete,
    Gamma,
    Gaussian,
    PointMass,
)
from factorflow.lazy import special


def is_known(v: Any) -> bool:
    """True for a constant or observed argument (not a distribution)."""
    return not isinstance(v, Distribution)


def _value(v: Any) -> np.ndarray:
    return v.value if isinstance(v, PointMass) else np.asarray(v, float)


def E(v: Any) -> np.ndarray:
    """E[x]."""
    return _value(v) if is_known(v) else v.mean


def V(v: Any) -> np.ndarray:
    """Var[x] (zero for a known value)."""
    return np.zeros(np.shape(_value(v))) if is_known(v) else v.variance


def E2(v: Any) -> np.ndarray:
    """E[x²]."""
    m = E(v)
    return m * m + V(v)


def Elog(v: Any) -> np.ndarray:
    """E[log x] for positive or simplex-valued x."""
    if is_known(v):
        with np.errstate(divide="ignore"):
            return np.log(_value(v))
    if isinstance(v, Gamma):
        return v.mean_log()
    if isinstance(v, Beta):
        return v.expected_stats()[0]
    if isinstance(v, Dirichlet):
        return v.mean_log()
    raise TypeError(f"E[log x] is not defined for {type(v).__name__}")


def Elog1m(v: Any) -> np.ndarray:
    """E[log(1 - x)] for x in (0, 1)."""
    if is_known(v):
        with np.errstate(divide="ignore"):
            return np.log1p(-_value(v))
    if isinstance(v, Beta):
        return v.expected_stats()[1]
    raise TypeError(f"E[log(1-x)] is not defined for {type(v).__name__}")


def Eprob(v: Any) -> np.ndarray:
    """P(x = true) for a boolean argument."""
    if is_known(v):
        return _value(v).astype(float)
    if isinstance(v, Bernoulli):
        return v.p
    raise TypeError(f"P(x) is not defined for {type(v).__name__}")


def Eonehot(v: Any, size: int) -> np.ndarray:
    """E[one-hot(x)] over ``size`` categories for an integer argument."""
    if is_known(v):
        x = np.asarray(_value(v), int)
        return np.asarray(x[..., None] == np.arange(size), float)
    if isinstance(v, Discrete):
        return v.probs
    raise TypeError(f"one-hot expectation is not defined for {type(v).__name__}")


def C(v: Any) -> np.ndarray:
    """Cov[x] over the last axis (VinDsl's C): an array of shape ``x.shape + x.shape[-1:]``,
    one symmetric matrix per vector of the leading (batch) axes.

    Exact closed forms: zeros for a known vector (or a PointMass), and the scalar 0 for a
    known scalar (a category index, say, whose one-hot vector is known: 0 broadcasts to
    its matrix, as the rule ``C[a] -> 0`` does); ``diag(V)`` for a family whose components
    are independent scalars (Gaussian, Gamma, Beta, Bernoulli, ...); for a Dirichlet
    ``(α_i δ_ij α0 - α_i α_j) / (α0² (α0 + 1))``; for a Discrete the covariance
    ``diag(p) - p pᵀ`` of its one-hot vector (the vector its E is taken of in factor
    formulas). Raises TypeError for a scalar distribution (no last axis) and for a family
    with vector events that has no formula here.
    """
    if is_known(v):
        x = _value(v)
        return np.zeros(x.shape + x.shape[-1:])
    if isinstance(v, Dirichlet):
        a = v.alpha
        a0 = a.sum(axis=-1, keepdims=True)[..., None]
        return (_diag(a) * a0 - a[..., :, None] * a[..., None, :]) / (a0**2 * (a0 + 1.0))
    if isinstance(v, Discrete):
        p = v.probs
        return _diag(p) - p[..., :, None] * p[..., None, :]
    if v.event_ndim:
        raise TypeError(f"the covariance C is not defined for {type(v).__name__}")
    var = np.asarray(V(v), float)
    if var.ndim == 0:
        raise TypeError(f"the covariance C needs a vector (an array with a last axis), got a "
                        f"scalar {type(v).__name__}")
    return _diag(var)


def _diag(x: np.ndarray) -> np.ndarray:
    """Diagonal matrices with ``x`` (over its last axis) on their diagonals."""
    return x[..., :, None] * np.eye(x.shape[-1])


def Elogit(v: Any) -> np.ndarray:
    """E[log x] - E[log(1-x)]: the expected log-odds of a probability."""
    return Elog(v) - Elog1m(v)


def gaussian_moments(v: Any) -> tuple[np.ndarray, np.ndarray]:
    """(mean, variance) of a real argument, known or Gaussian."""
    if is_known(v) or isinstance(v, Gaussian):
        return E(v), V(v)
    raise TypeError(f"expected a real-valued argument, got {type(v).__name__}")


__all__ = ["E", "V", "C", "E2", "Elog", "Elog1m", "Eprob", "Eonehot", "Elogit", "is_known",
           "gaussian_moments", "special"]
