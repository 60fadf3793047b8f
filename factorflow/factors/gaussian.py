"""Gaussian(sample | mean, precision): the Gaussian likelihood and prior.

log f = ½ log τ − ½ log 2π − ½ τ (x − μ)²
"""

from __future__ import annotations

import numpy as np

from factorflow.distributions import Gamma, Gaussian
from factorflow.distributions.base import distinct, log_normalizer_or_zero
from factorflow.distributions.families import LOG_2PI
from factorflow.distributions.moments import E, Elog, V, is_known
from factorflow.factors.common import Reduce, collapsed, plate_einsum
from factorflow.factors.registry import define_factor


def _log_density(sample, mean, precision):
    return 0.5 * np.log(precision) - 0.5 * LOG_2PI - 0.5 * precision * (sample - mean) ** 2


GAUSSIAN = define_factor("Gaussian", ("sample", "real"), ("mean", "real"),
                         ("precision", "positive"), log_density=_log_density)


def _spread(v):
    """Var[v] — a scalar zero for a known value, so no array of zeros is made."""
    return 0.0 if is_known(v) else V(v)


def _expected_square_diff(a, b):
    """E[(a − b)²] = (E a − E b)² + Var a + Var b for independent a, b (three array
    passes over a plate, the cost of the same update written by hand)."""
    d = np.subtract(E(a), E(b))  # a fresh array: the squares below reuse it in place
    if np.ndim(d) == 0:
        return np.asarray(d * d + (_spread(a) + _spread(b)))
    d = np.multiply(d, d, out=d)
    d += distinct(_spread(a)) + distinct(_spread(b))  # broadcast variances: no copy
    return d


# ----- VMP --------------------------------------------------------------------------
@GAUSSIAN.operator("vmp", "sample", proper=("mean", "precision"))
def _sample_vmp(mean, precision) -> Gaussian:
    tau = E(precision)
    return Gaussian.from_natural(*np.broadcast_arrays(distinct(tau) * E(mean), tau))


@GAUSSIAN.operator("vmp", "mean", proper=("sample", "precision"))
def _mean_vmp(sample, precision, *, reduce: Reduce | None = None,
              weights: np.ndarray | None = None) -> Gaussian:
    """Naturals (E[τ] E[x], E[τ]); with ``reduce``, their sums over its plate axes, each
    element's raised to ``weights`` when given (a mixture's Σ_n q_nk E[τ_k] x_n as one
    matrix-vector product: no (N, K) message)."""
    tau = E(precision)  # under a gate: K distinct values, an outer product with the data
    if reduce is None:
        return Gaussian.from_natural(*np.broadcast_arrays(distinct(tau) * E(sample), tau))
    w = [] if weights is None else [(weights, "")]
    x, tau = E(sample), distinct(tau)
    tau_all = np.broadcast_to(tau, np.broadcast_shapes(np.shape(tau), np.shape(x)))
    return Gaussian.from_natural(plate_einsum("", w + [(tau, ""), (x, "")], reduce),
                                 plate_einsum("", w + [(collapsed(tau_all), "")], reduce))


@GAUSSIAN.operator("vmp", "precision", proper=("sample", "mean"))
def _precision_vmp(sample, mean, *, reduce: Reduce | None = None,
                   weights: np.ndarray | None = None) -> Gamma:
    """Naturals (½, −½ E[(x − μ)²]); with ``reduce``, their sums over its plate axes, each
    element's raised to ``weights`` when given (one weighted sum: no (N, K) message)."""
    d2 = _expected_square_diff(sample, mean)
    if reduce is None:
        d2 = np.multiply(d2, -0.5, out=d2 if np.ndim(d2) else None)
        return Gamma.from_natural(np.broadcast_to(0.5, np.shape(d2)), d2)
    w = [] if weights is None else [(weights, "")]
    half = np.broadcast_to(0.5, np.shape(d2))
    return Gamma.from_natural(plate_einsum("", w + [(half, "")], reduce),
                              -0.5 * plate_einsum("", w + [(d2, "")], reduce))


@GAUSSIAN.evidence_operator("vmp")
def _average_log_factor(sample, mean, precision) -> np.ndarray:
    out = _expected_square_diff(sample, mean)
    tau, elog = distinct(E(precision)), distinct(Elog(precision))  # K values under a gate
    shape = np.broadcast_shapes(np.shape(out), np.shape(tau), np.shape(elog))
    if np.shape(out) != shape or not np.ndim(out):
        return 0.5 * elog - 0.5 * LOG_2PI - 0.5 * tau * out
    out *= -0.5 * tau                      # in place on the fresh (N, K) array
    out += 0.5 * elog - 0.5 * LOG_2PI
    return out


# ----- EP (known precision: the random-precision case is not Gaussian-closed) --------
def _convolve(msg, precision):
    """The message through a Gaussian of known precision: variance adds 1/τ."""
    with np.errstate(divide="ignore"):
        var = V(msg) + 1.0 / np.asarray(precision, float)
        prec = 1.0 / var
    return Gaussian.from_natural(E(msg) * prec, prec)


@GAUSSIAN.operator("ep", "sample", known=("precision",))
def _sample_ep(mean, precision) -> Gaussian:
    return _convolve(mean, precision)


@GAUSSIAN.operator("ep", "mean", skip_if_uniform=("sample",), known=("precision",))
def _mean_ep(sample, precision) -> Gaussian:
    return _convolve(sample, precision)


@GAUSSIAN.evidence_operator("ep")
def _log_average_factor(sample, mean, precision) -> np.ndarray:
    """log ∫∫ N(x; μ, 1/τ) m_x(x) m_μ(μ): zero when either side is integrated out."""
    if not is_known(sample) and not is_known(mean):
        joint = _convolve(mean, precision) * sample
        return (log_normalizer_or_zero(joint) - log_normalizer_or_zero(sample)
                - log_normalizer_or_zero(_convolve(mean, precision)))
    known, msg = (sample, mean) if is_known(sample) else (mean, sample)
    if is_known(msg):
        return _log_density(E(known), E(msg), precision)
    with np.errstate(divide="ignore", invalid="ignore"):  # a uniform message weighs 1
        return np.where(msg.is_uniform(), 0.0, _convolve(msg, precision).log_prob(E(known)))
