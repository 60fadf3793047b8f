"""Max(out | a, b): out = max(a, b) of two real variables (``ff.max``; ``ff.min(a, b)`` is
−max(−a, −b)).  EP only, in closed form, as Infer.NET's MaxGaussianOp.

log f = log δ(out − max(a, b)).

With Gaussian messages a ~ N(m_a, v_a), b ~ N(m_b, v_b) and out's message N(m_o, v_o),
every tilted distribution is a sum of two terms of the form "Gaussian × Φ(linear)":
splitting at a > b (out = a) and b ≥ a (out = b),

* over out: C_a N(y; μ_a, s_a) Φ((y − m_b)/√v_b) + C_b N(y; μ_b, s_b) Φ((y − m_a)/√v_a),
* over a:   C_a N(a; μ_a, s_a) Φ((a − m_b)/√v_b) + C_b N(a; m_a, v_a) Φ((μ_b − a)/√s_b),

where N(x; m_a, v_a) N(x; m_o, v_o) = C_a N(x; μ_a, s_a) (C_a = N(m_a; m_o, v_a + v_o); C = 1,
μ = m, s = v for a uniform out message), and symmetrically for b.  Each term's mass,
mean and variance are those of probit EP (the truncated-Gaussian moments of
``factors.compare``, precise in the tails), and the two are combined as a mixture.  A
uniform out message gives Clark's (1961) moments of the maximum forward and uniform
messages back.  VMP has no message here (the pair is refused by name).
"""

from __future__ import annotations

import numpy as np

from factorflow.distributions import Gaussian
from factorflow.distributions.moments import gaussian_moments, is_known
from factorflow.factors.common import broadcast_batch, full, unsupported
from factorflow.factors.compare import truncated_normal_moments
from factorflow.factors.registry import define_factor
from factorflow.lazy import special


def _max_log_density(out, a, b):
    return np.where(np.asarray(out) == np.maximum(a, b), 0.0, -np.inf)


MAX = define_factor("Max", ("out", "real"), ("a", "real"), ("b", "real"), deterministic=True,
                    log_density=_max_log_density)

_CLOSED_FORM = "EP: closed form, moments of Gaussian x Phi terms (Clark 1961; MaxGaussianOp)"


def _times_probit(mu, s, c, w, sign):
    """(log mass, mean, variance) of N(x; μ, s) Φ(sign (x − c)/√w), sign ±1 (w = 0: a
    truncation; s = 0: a point mass)."""
    mu, c = sign * mu, sign * c  # reflected, so that the weight is Φ((x − c)/√w)
    total = s + w
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (mu - c) / np.sqrt(total)
    excess, var_u = truncated_normal_moments(-z)
    with np.errstate(invalid="ignore"):
        mean = mu + s / np.sqrt(total) * (excess - z)
        var = s * w / total + s * s / total * var_u  # non-negative terms: no cancellation
    return special.log_ndtr(z), sign * mean, var


def _mixture(first, second):
    """(log mass, mean, variance) of the sum of two weighted terms, each (log mass, mean,
    variance)."""
    total = np.logaddexp(first[0], second[0])
    w1, w2 = np.exp(first[0] - total), np.exp(second[0] - total)
    mean = w1 * first[1] + w2 * second[1]
    var = w1 * first[2] + w2 * second[2] + w1 * w2 * (first[1] - second[1]) ** 2
    return total, mean, var


def _with_out(m, v, out):
    """(log C, μ, s): N(x; m, v) · m_out(x) = C N(x; μ, s); C = 1 for a uniform m_out."""
    mo, vo = gaussian_moments(out)
    uniform = np.isinf(vo)
    vo_ = np.where(uniform, 1.0, vo)
    total = v + vo_
    log_c = -0.5 * np.log(2 * np.pi * total) - 0.5 * (m - mo) ** 2 / total
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(uniform, v, v * vo_ / total)
        mu = np.where(uniform, m, (m * vo_ + mo * v) / total)
    return np.where(uniform, 0.0, log_c), mu, s


def _args(out, a, b):
    shape = broadcast_batch(out, a, b)
    (ma, va), (mb, vb) = gaussian_moments(a), gaussian_moments(b)
    return shape, *(full(shape, x) for x in (ma, va, mb, vb))


def _over_out(out, a, b):
    """The tilted distribution over out: (log Z, mean, variance)."""
    shape, ma, va, mb, vb = _args(out, a, b)
    ca, mua, sa = _with_out(ma, va, out)
    cb, mub, sb = _with_out(mb, vb, out)
    ta = _times_probit(mua, sa, mb, vb, 1.0)
    tb = _times_probit(mub, sb, ma, va, 1.0)
    return _mixture((ca + ta[0], ta[1], ta[2]), (cb + tb[0], tb[1], tb[2]))


def _over_first(out, a, b):
    """The tilted distribution over a (the argument named first): (log Z, mean, var)."""
    shape, ma, va, mb, vb = _args(out, a, b)
    ca, mua, sa = _with_out(ma, va, out)
    cb, mub, sb = _with_out(mb, vb, out)
    ta = _times_probit(mua, sa, mb, vb, 1.0)   # a > b, out = a
    tb = _times_probit(ma, va, mub, sb, -1.0)  # b ≥ a, out = b: weight Φ((μ_b − a)/√s_b)
    return _mixture((ca + ta[0], ta[1], ta[2]), (cb + tb[0], tb[1], tb[2]))


def _message(tilted, incoming) -> Gaussian:
    """proj[tilted] / incoming (the projection itself where the incoming message is
    uniform: the forward message to out)."""
    _, mean, var = tilted
    m, v = gaussian_moments(incoming)
    shape = np.shape(mean)
    m, v = full(shape, m), full(shape, v)
    uniform = np.isinf(v)
    with np.errstate(divide="ignore", invalid="ignore"):
        prec = 1 / var - np.where(uniform, 0.0, 1 / v)
        h = mean / var - np.where(uniform, 0.0, m / v)
    return Gaussian.from_natural(h, prec)


def _refuse_determined(out, a, b, target: str) -> None:
    if target == "out" and is_known(a) and is_known(b):
        raise unsupported("Max", "message passing", "cannot send a message to 'out': the "
                          "known arguments determine it exactly; observe it instead.")


@MAX.operator("ep", "out", skip_if_uniform=("a", "b"), proper=("a", "b"), method=_CLOSED_FORM)
def _max_out_ep(out, a, b) -> Gaussian:
    """proj[m_out(y) p(y)] / m_out(y), p(y) the density of max(a, b)."""
    _refuse_determined(out, a, b, "out")
    return _message(_over_out(out, a, b), out)


@MAX.operator("ep", "a", skip_if_uniform=("out", "b"), proper=("a", "b"), method=_CLOSED_FORM)
def _max_a_ep(out, a, b) -> Gaussian:
    """proj[m_a(a) ∫ m_b(b) m_out(max(a, b)) db] / m_a(a)."""
    return _message(_over_first(out, a, b), a)


@MAX.operator("ep", "b", skip_if_uniform=("out", "a"), proper=("a", "b"), method=_CLOSED_FORM)
def _max_b_ep(out, a, b) -> Gaussian:
    """The message to a with the arguments' roles swapped."""
    return _message(_over_first(out, b, a), b)


@MAX.evidence_operator("ep")
def _max_log_average_factor(out, a, b) -> np.ndarray:
    """log ∫∫ m_a m_b w_out(max(a, b)) (w_out: out's normalised message, 1 if uniform)."""
    return _over_out(out, a, b)[0]
