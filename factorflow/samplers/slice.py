"""Univariate slice sampling (Neal 2003), elementwise over whole arrays.

The fallback for a scalar continuous variable whose conditional is in no conjugate
family. Every element of the variable (all plate elements, all chains) takes one slice
step at once: the log density is evaluated on whole arrays, the stepping out and the
shrinkage are loops of a bounded number of array steps with masks — never a loop per
element. A positive variable is sampled as its logarithm, a probability as its logit
(the Jacobian added), so every interval lies in the variable's support.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from factorflow.errors import ModelError

#: the domains slice sampling handles, with the space it moves in
SLICE_DOMAINS = {"real": "the value itself", "positive": "log space",
                 "unit": "logit space"}
WIDTH, MAX_STEPS, MAX_SHRINK = 1.0, 32, 200


def to_free(x: np.ndarray, domain: str) -> np.ndarray:
    if domain == "positive":
        return np.log(x)
    if domain == "unit":
        return np.log(x) - np.log1p(-x)
    return x


def from_free(u: np.ndarray, domain: str) -> tuple[np.ndarray, np.ndarray]:
    """(value, log |d value / d u|)."""
    if domain == "positive":
        return np.exp(u), u
    if domain == "unit":
        x = 1.0 / (1.0 + np.exp(-u))
        return x, np.log(x) + np.log1p(-x)
    return u, np.zeros_like(u)


def slice_step(log_density: Callable[[np.ndarray], np.ndarray], current: np.ndarray,
               domain: str, rng: np.random.Generator, width: float = WIDTH) -> np.ndarray:
    """One slice-sampling update of every element of ``current`` under the elementwise
    ``log_density`` (a function of the whole array), with initial intervals of ``width``
    in the free space; the stationary law of each element is its conditional. Raises
    ModelError if the current value has zero density."""

    def f(u: np.ndarray) -> np.ndarray:
        x, jac = from_free(u, domain)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            out = log_density(x) + jac
        return np.where(np.isnan(out), -np.inf, out)

    u0 = to_free(np.asarray(current, dtype=float), domain)
    f0 = f(u0)
    if not np.all(np.isfinite(f0)):
        raise ModelError("slice sampling started at a value of zero density; give an init "
                         "inside the support.")
    level = f0 - rng.standard_exponential(u0.shape)
    left = u0 - width * rng.uniform(size=u0.shape)
    right = left + width
    for _ in range(MAX_STEPS):  # step out until both ends are below the slice
        grow_left, grow_right = f(left) > level, f(right) > level
        if not (grow_left.any() or grow_right.any()):
            break
        left = np.where(grow_left, left - width, left)
        right = np.where(grow_right, right + width, right)
    new, done = u0.copy(), np.zeros(u0.shape, bool)
    for _ in range(MAX_SHRINK):  # shrink towards the current point until accepted
        proposal = left + (right - left) * rng.uniform(size=u0.shape)
        accept = ~done & (f(proposal) > level)
        new = np.where(accept, proposal, new)
        done |= accept
        if done.all():
            break
        below = ~done & (proposal < u0)
        left = np.where(below, proposal, left)
        right = np.where(~done & ~below, proposal, right)
    return from_free(new, domain)[0]
