"""PlateSum(sum | array): the sum of a plate of real variables, ``ff.sum(x, n)``.

log f = log δ(sum − Σ_i x_i), the array's last plate axis summed (Infer.NET's FastSumOp).

EP (exact): forward N(Σ m_i, Σ v_i) from the messages x_i → factor; backward to x_i
N(m_s − Σ_{j≠i} m_j, v_s + Σ_{j≠i} v_j), with (m_s, v_s) the sum's message (uniform where
another element's message is).

VMP: forward, the sum's distribution under q: N(Σ E[x_i], Σ Var[x_i]).  Backward, the
elements are coupled through (Σ x)², so Winn's message to x_i, (h − τ Σ_{j≠i} E[x_j], τ)
from the sum's message (h, τ), updates them as a Jacobi step, which diverges for a large
plate.  The operator instead sends each x_i the message (h − τ Σ_{j≠i} μ_j, τ) at the
optimum μ of the whole block of elements given the rest of the model (each x_i's other
messages (η_i, p_i) = q(x_i) / its previous message): the means of the Gaussian with
precision diag(p) + τ 1 1ᵀ and linear term η + h 1, by Sherman–Morrison in O(n).  That is
coordinate ascent on the block, so the bound never falls, and its fixed point is Winn's.
"""

from __future__ import annotations

import numpy as np

from factorflow.distributions import Gaussian
from factorflow.distributions.base import traced
from factorflow.distributions.moments import gaussian_moments, is_known
from factorflow.factors.arithmetic import _linear_evidence
from factorflow.factors.common import broadcast_naturals, times_finite, unsupported
from factorflow.factors.registry import define_factor


def _log_density(sum, array):
    return np.where(np.asarray(sum) == np.sum(array, axis=-1), 0.0, -np.inf)


PLATE_SUM = define_factor("PlateSum", ("sum", "real"), ("array", "real"), deterministic=True,
                          log_density=_log_density)


def _gaussian(mean, var) -> Gaussian:
    """N(mean, var), uniform where var is infinite."""
    with np.errstate(divide="ignore"):
        prec = 1.0 / np.asarray(var, float)
    return Gaussian.from_natural(np.where(mean == 0, 0.0, times_finite(prec, mean)), prec)


def _forward_moments(array) -> tuple[np.ndarray, np.ndarray]:
    m, v = gaussian_moments(array)
    return np.sum(m, axis=-1), np.sum(np.broadcast_to(v, np.shape(m)), axis=-1)


def _forward(array) -> Gaussian:
    if is_known(array):
        raise unsupported("PlateSum", "message passing", "cannot send a message to 'sum': "
                          "the known array determines it exactly; observe it.")
    return _gaussian(*_forward_moments(array))


@PLATE_SUM.operator("ep", "sum", skip_if_uniform=("array",))
def _sum_ep(array) -> Gaussian:
    """N(Σ m_i, Σ v_i): exact."""
    return _forward(array)


@PLATE_SUM.operator("ep", "array", skip_if_uniform=("sum",))
def _array_ep(sum, array) -> Gaussian:
    """N(m_s − Σ_{j≠i} m_j, v_s + Σ_{j≠i} v_j): exact; uniform where another element's
    message is uniform."""
    ms, vs = gaussian_moments(sum)
    m, v = gaussian_moments(array)
    v = np.broadcast_to(v, np.shape(m))
    flat = np.isinf(v)
    finite = np.where(flat, 0.0, v)
    others_flat = np.sum(flat, axis=-1, keepdims=True) - flat > 0
    mean = np.asarray(ms)[..., None] - (np.sum(m * ~flat, axis=-1, keepdims=True)
                                        - m * ~flat)
    var = np.where(others_flat, np.inf, np.asarray(vs)[..., None]
                   + np.sum(finite, axis=-1, keepdims=True) - finite)
    return _gaussian(np.where(others_flat, 0.0, mean), var)


@PLATE_SUM.evidence_operator("ep")
def _log_average_factor(sum, array) -> np.ndarray:
    """log ∫ w_sum(Σ x) Π m_i."""
    if is_known(array):
        total = np.sum(np.asarray(array, float), axis=-1)
        return _log_density(sum, array) if is_known(sum) else sum.log_prob(total)
    mean, var = _forward_moments(array)
    return _linear_evidence(sum, mean, var, array)


@PLATE_SUM.operator("vmp", "sum", skip_if_uniform=("array",), trigger=("array",))
def _sum_vmp(array) -> Gaussian:
    """The sum's distribution under q: N(Σ E[x_i], Σ Var[x_i])."""
    return _forward(array)


@PLATE_SUM.operator("vmp", "array", skip_if_uniform=("sum",))
def _array_vmp(sum, array, *, previous: Gaussian | None = None) -> Gaussian:
    """(h − τ Σ_{j≠i} μ_j, τ) with μ the optimum of the block of elements given their
    other messages q(x_i) / ``previous`` (see the module docstring)."""
    if is_known(sum):
        raise unsupported("PlateSum", "vmp", "does not support an observed sum (the "
                          "message to an element would be a point mass); use EP.")
    h, tau = (np.asarray(e)[..., None] for e in sum.eta)
    eta, p = array.eta
    if previous is not None:
        eta, p = eta - previous.eta[0], p - previous.eta[1]
    with np.errstate(divide="ignore", invalid="ignore"):
        b = eta + h
        spread = np.sum(1.0 / p, axis=-1, keepdims=True)
        mu = (b - tau * np.sum(b / p, axis=-1, keepdims=True) / (1 + tau * spread)) / p
    finite = np.all(np.isfinite(mu))
    if traced():  # (the same choice, made on the device)
        mu = np.where(finite, mu, gaussian_moments(array)[0])
    elif not finite:  # an element with no other proper message: Winn's
        mu = gaussian_moments(array)[0]  # Jacobi step from the current means
    total = np.sum(mu, axis=-1, keepdims=True)
    return Gaussian.from_natural(*broadcast_naturals(h - tau * (total - mu), tau))
