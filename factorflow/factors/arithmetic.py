"""Arithmetic of real variables: Plus, Minus, ScaleBy (known scale) and Product.

log f = log δ(out − g(a, b)) with g(a, b) = a + b, a − b, scale · a or a · b.

EP (Infer.NET's DoublePlusOp, GaussianProductOp with a known factor): Plus, Minus and
ScaleBy are linear, so every message is the exact Gaussian of g or of its inverse,
e.g. m(sum) = N(m_a + m_b, v_a + v_b), m(a) = N(m_sum − m_b, v_sum + v_b).

VMP (DoublePlusVmpOp, DoubleMinusVmpOp, GaussianProductVmpOp): the output is a derived
variable.  The message to it is the forward distribution of g under q(a) q(b) (for
Product matched in mean and variance: m_a m_b, m_b² v_a + m_a² v_b + v_a v_b).  The message
to an input is exp E[log m_out(g(a, b))] with m_out(y) ∝ exp(h y − τ y²/2) the output's
incoming message: for Plus (h − τ E[b], τ), for Product (h E[b], τ E[b²]).  An observed
output with a random other input is not supported under VMP, as in Infer.NET.  These
deterministic factors have no VMP evidence term (Infer.NET's [Skip] AverageLogFactor).

Gaussians cannot represent point masses, so a message that all-known arguments would
make a point mass (for example to ``a`` from an observed sum and an observed ``b``)
raises UnsupportedFactorError: such a variable is determined and should be observed.
"""

from __future__ import annotations

import numpy as np

from factorflow.distributions import Gaussian
from factorflow.distributions.base import log_normalizer_or_zero
from factorflow.distributions.moments import E2, gaussian_moments, is_known
from factorflow.factors.common import (
    broadcast_batch,
    broadcast_naturals,
    full,
    times_finite,
    unsupported,
)
from factorflow.factors.registry import define_factor


def _log_delta(out, value):
    return np.where(np.asarray(out) == value, 0.0, -np.inf)


def _plus_log_density(sum, a, b):
    return _log_delta(sum, np.add(a, b))


def _minus_log_density(diff, a, b):
    return _log_delta(diff, np.subtract(a, b))


def _scale_log_density(product, a, scale):
    return _log_delta(product, np.multiply(a, scale))


def _product_log_density(product, a, b):
    return _log_delta(product, np.multiply(a, b))


PLUS = define_factor("Plus", ("sum", "real"), ("a", "real"), ("b", "real"), deterministic=True,
                     log_density=_plus_log_density)
MINUS = define_factor("Minus", ("diff", "real"), ("a", "real"), ("b", "real"),
                      deterministic=True, log_density=_minus_log_density)
SCALE_BY = define_factor("ScaleBy", ("product", "real"), ("a", "real"), ("scale", "real"),
                         deterministic=True, log_density=_scale_log_density)
PRODUCT = define_factor("Product", ("product", "real"), ("a", "real"), ("b", "real"),
                        deterministic=True, log_density=_product_log_density)


def _gaussian(name: str, target: str, mean, var, *args) -> Gaussian:
    """N(mean, var) over the broadcast plates of ``args`` (uniform where var is infinite);
    all-known ``args`` would make a point mass, which is refused."""
    if all(is_known(a) for a in args):
        raise unsupported(name, "message passing", f"cannot send a message to {target!r}: "
                          "the known arguments determine it exactly; observe it instead.")
    shape = broadcast_batch(*args)
    return gaussian_from_moments(full(shape, mean), full(shape, var))


def gaussian_from_moments(mean: np.ndarray, var: np.ndarray) -> Gaussian:
    """N(mean, var) in natural parameters, uniform where ``var`` is infinite; a point mass
    at 0 (a zero scale: 0 · a) is (0, ∞), not (0 · ∞, ∞)."""
    with np.errstate(divide="ignore"):
        prec = 1.0 / var
    return Gaussian.from_natural(np.where(mean == 0, 0.0, times_finite(prec, mean)), prec)


def _no_observed_output(name: str, out) -> None:
    if is_known(out):
        raise unsupported(name, "vmp", "does not support an observed output (the message to "
                          "an input would be a meaningless point mass); use EP.")


def _linear_evidence(out, mean, var, *inputs) -> np.ndarray:
    """log ∫ δ(y − g) w_out(y) Π m_in: the forward Gaussian N(mean, var) of g averaged over
    the output's weight (its normalised message, or 1 where it is uniform)."""
    y = gaussian_moments(out)[0] if is_known(out) else None
    with np.errstate(divide="ignore", invalid="ignore"):
        if all(is_known(a) for a in inputs):
            if y is not None:
                return np.where(y == mean, 0.0, -np.inf)
            return np.where(out.is_uniform(), 0.0, out.log_prob(mean))
        prec = 1.0 / np.asarray(var, float)
        fwd = Gaussian.from_natural(np.where(np.asarray(mean) == 0, 0.0,
                                             times_finite(prec, mean)), prec)
        if y is not None:
            return np.where(fwd.is_uniform(), 0.0, fwd.log_prob(y))
        general = (log_normalizer_or_zero(fwd * out) - log_normalizer_or_zero(out)
                   - log_normalizer_or_zero(fwd))
        # g a point mass (a zero scale, var 0): the output is a constant, its own
        # evidence terms are 0 (``ep_variable_evidence``) and so is this factor's
        return np.where(np.asarray(var) == 0, 0.0, general)


# ----- Plus: sum = a + b ------------------------------------------------------------
@PLUS.operator("ep", "sum", skip_if_uniform=("a", "b"))
def _plus_sum_ep(a, b) -> Gaussian:
    """N(m_a + m_b, v_a + v_b)."""
    (ma, va), (mb, vb) = gaussian_moments(a), gaussian_moments(b)
    return _gaussian("Plus", "sum", ma + mb, va + vb, a, b)


@PLUS.operator("ep", "a", skip_if_uniform=("sum", "b"))
def _plus_a_ep(sum, b) -> Gaussian:
    """N(m_sum − m_b, v_sum + v_b)."""
    (ms, vs), (mb, vb) = gaussian_moments(sum), gaussian_moments(b)
    return _gaussian("Plus", "a", ms - mb, vs + vb, sum, b)


@PLUS.operator("ep", "b", skip_if_uniform=("sum", "a"))
def _plus_b_ep(sum, a) -> Gaussian:
    """N(m_sum − m_a, v_sum + v_a)."""
    return _plus_a_ep(sum, a)


@PLUS.operator("vmp", "sum", skip_if_uniform=("a", "b"), trigger=("a", "b"))
def _plus_sum_vmp(a, b) -> Gaussian:
    """The forward distribution N(E[a] + E[b], Var[a] + Var[b])."""
    return _plus_sum_ep(a, b)


@PLUS.operator("vmp", "a", skip_if_uniform=("sum",), proper=("sum", "b"))
def _plus_a_vmp(sum, b) -> Gaussian:
    """exp E_b[log m_sum(a + b)]: natural parameters (h − τ E[b], τ)."""
    _no_observed_output("Plus", sum)
    h, tau = sum.eta
    return Gaussian.from_natural(*broadcast_naturals(h - tau * gaussian_moments(b)[0], tau))


@PLUS.operator("vmp", "b", skip_if_uniform=("sum",), proper=("sum", "a"))
def _plus_b_vmp(sum, a) -> Gaussian:
    """exp E_a[log m_sum(a + b)]: natural parameters (h − τ E[a], τ)."""
    return _plus_a_vmp(sum, a)


@PLUS.evidence_operator("ep")
def _plus_log_average_factor(sum, a, b) -> np.ndarray:
    """log ∫ w_sum(a + b) m_a m_b."""
    (ma, va), (mb, vb) = gaussian_moments(a), gaussian_moments(b)
    return _linear_evidence(sum, ma + mb, va + vb, a, b)


# ----- Minus: diff = a − b ----------------------------------------------------------
@MINUS.operator("ep", "diff", skip_if_uniform=("a", "b"))
def _minus_diff_ep(a, b) -> Gaussian:
    """N(m_a − m_b, v_a + v_b)."""
    (ma, va), (mb, vb) = gaussian_moments(a), gaussian_moments(b)
    return _gaussian("Minus", "diff", ma - mb, va + vb, a, b)


@MINUS.operator("ep", "a", skip_if_uniform=("diff", "b"))
def _minus_a_ep(diff, b) -> Gaussian:
    """N(m_diff + m_b, v_diff + v_b)."""
    (md, vd), (mb, vb) = gaussian_moments(diff), gaussian_moments(b)
    return _gaussian("Minus", "a", md + mb, vd + vb, diff, b)


@MINUS.operator("ep", "b", skip_if_uniform=("diff", "a"))
def _minus_b_ep(diff, a) -> Gaussian:
    """N(m_a − m_diff, v_a + v_diff)."""
    (md, vd), (ma, va) = gaussian_moments(diff), gaussian_moments(a)
    return _gaussian("Minus", "b", ma - md, va + vd, diff, a)


@MINUS.operator("vmp", "diff", skip_if_uniform=("a", "b"), trigger=("a", "b"))
def _minus_diff_vmp(a, b) -> Gaussian:
    """The forward distribution N(E[a] − E[b], Var[a] + Var[b])."""
    return _minus_diff_ep(a, b)


@MINUS.operator("vmp", "a", skip_if_uniform=("diff",), proper=("diff", "b"))
def _minus_a_vmp(diff, b) -> Gaussian:
    """exp E_b[log m_diff(a − b)]: natural parameters (h + τ E[b], τ)."""
    _no_observed_output("Minus", diff)
    h, tau = diff.eta
    return Gaussian.from_natural(*broadcast_naturals(h + tau * gaussian_moments(b)[0], tau))


@MINUS.operator("vmp", "b", skip_if_uniform=("diff",), proper=("diff", "a"))
def _minus_b_vmp(diff, a) -> Gaussian:
    """exp E_a[log m_diff(a − b)]: natural parameters (τ E[a] − h, τ)."""
    _no_observed_output("Minus", diff)
    h, tau = diff.eta
    return Gaussian.from_natural(*broadcast_naturals(tau * gaussian_moments(a)[0] - h, tau))


@MINUS.evidence_operator("ep")
def _minus_log_average_factor(diff, a, b) -> np.ndarray:
    """log ∫ w_diff(a − b) m_a m_b."""
    (ma, va), (mb, vb) = gaussian_moments(a), gaussian_moments(b)
    return _linear_evidence(diff, ma - mb, va + vb, a, b)


# ----- ScaleBy: product = scale · a (scale known and non-zero) -----------------------
def _scale_forward(a, scale) -> Gaussian:
    ma, va = gaussian_moments(a)
    c = gaussian_moments(scale)[0]
    return _gaussian("ScaleBy", "product", c * ma, c * c * va, a, scale)


def _scale_backward(product, scale) -> Gaussian:
    """m(a) ∝ m_product(c a): natural parameters (c h, c² τ) — exact for EP and VMP."""
    if is_known(product):
        raise unsupported("ScaleBy", "message passing", "cannot send a message to 'a' from "
                          "an observed product: a = product / scale is determined; "
                          "observe it instead.")
    c = gaussian_moments(scale)[0]
    h, tau = product.eta
    return Gaussian.from_natural(c * h, c * c * tau)


@SCALE_BY.operator("ep", "product", skip_if_uniform=("a",), known=("scale",))
def _scale_product_ep(a, scale) -> Gaussian:
    """N(c m_a, c² v_a)."""
    return _scale_forward(a, scale)


@SCALE_BY.operator("ep", "a", skip_if_uniform=("product",), known=("scale",))
def _scale_a_ep(product, scale) -> Gaussian:
    """N(m_p / c, v_p / c²)."""
    return _scale_backward(product, scale)


@SCALE_BY.operator("vmp", "product", skip_if_uniform=("a",), trigger=("a",),
                   known=("scale",))
def _scale_product_vmp(a, scale) -> Gaussian:
    """The forward distribution N(c E[a], c² Var[a])."""
    return _scale_forward(a, scale)


@SCALE_BY.operator("vmp", "a", skip_if_uniform=("product",), known=("scale",))
def _scale_a_vmp(product, scale) -> Gaussian:
    """exp log m_product(c a): the same message as EP, since c is known."""
    return _scale_backward(product, scale)


@SCALE_BY.evidence_operator("ep")
def _scale_log_average_factor(product, a, scale) -> np.ndarray:
    """log ∫ w_product(c a) m_a."""
    ma, va = gaussian_moments(a)
    c = gaussian_moments(scale)[0]
    return _linear_evidence(product, c * ma, c * c * va, a, scale)


# ----- Product: product = a · b (VMP) -------------------------------------------------
@PRODUCT.operator("vmp", "product", skip_if_uniform=("a", "b"), trigger=("a", "b"))
def _product_vmp(a, b) -> Gaussian:
    """N(m_a m_b, m_b² v_a + m_a² v_b + v_a v_b) (Winn's rule for deterministic factors)."""
    (ma, va), (mb, vb) = gaussian_moments(a), gaussian_moments(b)
    var = times_finite(mb * mb, va) + times_finite(ma * ma, vb) + times_finite(va, vb)
    return _gaussian("Product", "product", ma * mb, var, a, b)


@PRODUCT.operator("vmp", "a", skip_if_uniform=("product",), proper=("b",))
def _product_a_vmp(product, b) -> Gaussian:
    """exp E_b[log m_product(a b)]: natural parameters (h E[b], τ E[b²])."""
    _no_observed_output("Product", product)
    h, tau = product.eta
    return Gaussian.from_natural(h * gaussian_moments(b)[0], tau * E2(b))


@PRODUCT.operator("vmp", "b", skip_if_uniform=("product",), proper=("a",))
def _product_b_vmp(product, a) -> Gaussian:
    """exp E_a[log m_product(a b)]: natural parameters (h E[a], τ E[a²])."""
    return _product_a_vmp(product, a)
