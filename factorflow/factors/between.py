"""IsBetween(out | x, lower, upper): out = (lower < x < upper), Infer.NET's IsBetween.

log f = log [out = (lower < x < upper)].

EP (Infer.NET's IsBetweenGaussianOp, with Gaussian or known bounds).  Under the incoming
messages, d₁ = x − lower and d₂ = upper − x are jointly Gaussian with means μ₁, μ₂,
variances σ₁² = v_x + v_l, σ₂² = v_x + v_u and correlation ρ = −v_x/(σ₁σ₂), so

    P = P(lower < x < upper) = Φ₂(μ₁/σ₁, μ₂/σ₂; ρ)

(the bivariate normal distribution function, through Owen's T), and the evidence is
Z = w(T) P + w(F) (1 − P).  Every message comes from the derivatives of log Z with
respect to the incoming means and variances (g = ∂ log Z/∂m, G = ∂ log Z/∂v):  the
tilted mean is m + v g and variance v − v² (g² − 2G), so the message has precision
β/(1 − vβ) and precision × mean (g + mβ)/(1 − vβ), β = g² − 2G — exact moment matching,
written without the cancellation of dividing two nearly equal Gaussians.  These
derivatives are the work the three messages share: the factor's buffer ``messages``
computes all three at once (stacked on a last axis), and each operator reads it Fresh.

With one bound uniform (nothing known about it yet) the factor is a one-sided
truncation of x (Greater), and the message to that bound is uniform; the other messages
are not.  Seed 000 asks for exactly this case to be a *penalty*, not a constraint: the
operators are annotated ``uniform_penalty`` on the other arguments, so the
initialization schedule computes the bounds' messages first where it can, and starts
from a uniform bound where it cannot.

VMP: the message to ``out`` (the forward distribution, as for Greater), and, with ``out``
and both bounds known, the message to a Gaussian x (Infer.NET's
``DoubleIsBetweenOp.XAverageLogarithm``).  The optimal q(x) is then the truncation of
x's other messages to the interval (or to its complement when ``out`` is false): with
p = q(x) / (this factor's previous message to x), the message is proj[p · f] / p, which
is the EP message to x computed from p, so that q(x) carries the truncated moments.  The
bound's term is the entropy that q(x) has beyond its Gaussian projection,
H[p · f / Z] − H[proj], = log Z + v G − ½ log(1 − v β) in the derivatives above.  The
update reads q(x) as it stood before x's other messages last changed (a VMP posterior
reads its messages fresh, so this one cannot be read after them): a fixed-point step
(``ascent=False``) whose bound may fall on the way; at its fixed point p is current and
q(x) is the mean-field optimum (exact, bound = log Z, where x is the model's only
latent variable).  It holds for one truncation of each element of x (a second, whose
q(x) would be the truncation to both intervals, is refused by name).  Random
bounds are refused under VMP (a Gaussian q of a bound puts mass on both sides of x:
E log f = −∞), as in Infer.NET.
"""

from __future__ import annotations

import numpy as np

from factorflow.distributions import Bernoulli, Gaussian
from factorflow.distributions.moments import gaussian_moments, is_known
from factorflow.errors import UnsupportedFactorError
from factorflow.factors.common import bool_log_weights, broadcast_batch, full
from factorflow.factors.registry import define_factor
from factorflow.lazy import special

_TWO_PI = 2 * np.pi


def _is_between_log_density(out, x, lower, upper):
    inside = (np.asarray(lower) < np.asarray(x)) & (np.asarray(x) < np.asarray(upper))
    return np.where(np.asarray(out, bool) == inside, 0.0, -np.inf)


IS_BETWEEN = define_factor("IsBetween", ("out", "bool"), ("x", "real"), ("lower", "real"),
                           ("upper", "real"), deterministic=True,
                           log_density=_is_between_log_density)


def _incoming(v, shape):
    """(mean, variance, uniform) of an argument on ``shape``; a uniform message gets mean 0
    and variance 1 (its terms are masked by ``uniform``)."""
    m, var = gaussian_moments(v)
    m, var = full(shape, m), full(shape, var)
    uniform = np.isinf(var)
    return np.where(uniform, 0.0, m), np.where(uniform, 1.0, var), uniform


def _standard(mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """μ/σ, and ±∞ for a known difference (σ = 0: the bound holds or fails for certain)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(sd > 0, mu / np.where(sd > 0, sd, 1.0), np.where(mu > 0, np.inf,
                                                                          -np.inf))


def _owen(h: np.ndarray, k: np.ndarray, rho: np.ndarray, s: np.ndarray) -> np.ndarray:
    """T(h, (k − ρh)/(h s)) of Owen, h ≠ 0 and s > 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return special.owens_t(h, (k - rho * h) / (h * s))


def bivariate_cdf(h: np.ndarray, k: np.ndarray, rho: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Φ₂(h, k; ρ) = P(Z₁ < h, Z₂ < k) for standard normals of correlation ρ, s = √(1 − ρ²)
    given (computed by the caller without cancellation).  s = 0, ρ = −1: the interval
    probability Φ(h) − Φ(−k); otherwise Owen's formula
    ½Φ(h) + ½Φ(k) − T(h, a_h) − T(k, a_k) − [hk < 0]/2.  Infinite h or k are allowed."""
    h, k, rho, s = np.broadcast_arrays(*(np.asarray(a, float) for a in (h, k, rho, s)))
    tiny = np.finfo(float).tiny  # h = 0 or k = 0: Owen's formula is continuous from above
    hh, kk = np.where(h == 0, tiny, h), np.where(k == 0, tiny, k)
    finite = np.isfinite(hh) & np.isfinite(kk) & (s > 0)
    safe_h, safe_k = np.where(finite, hh, 1.0), np.where(finite, kk, 1.0)
    safe_s = np.where(finite, s, 1.0)
    owen = (0.5 * special.ndtr(safe_h) + 0.5 * special.ndtr(safe_k)
            - _owen(safe_h, safe_k, rho, safe_s) - _owen(safe_k, safe_h, rho, safe_s)
            - 0.5 * (safe_h * safe_k < 0))
    # infinite arguments: Φ₂(∞, k) = Φ(k), Φ₂(−∞, k) = 0
    edge = np.where(h == -np.inf, 0.0, np.where(k == -np.inf, 0.0, np.where(
        h == np.inf, special.ndtr(k), special.ndtr(h))))
    interval = np.where(h < 0, special.ndtr(h) - special.ndtr(-k),
                        special.ndtr(k) - special.ndtr(-h))
    interval = np.maximum(interval, 0.0)
    out = np.where(np.isinf(h) | np.isinf(k), edge, np.where(s > 0, owen, interval))
    return np.clip(out, 0.0, 1.0)


def _gradient(h, k, rho, s):
    """(∂Φ₂/∂h, ∂Φ₂/∂k, ∂Φ₂/∂ρ): φ(h) Φ((k − ρh)/s), φ(k) Φ((h − ρk)/s) and the bivariate
    density; at s = 0 (ρ = −1) the first two are φ(h)[h + k > 0], φ(k)[h + k > 0]."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        pdf_h = np.where(np.isinf(h), 0.0, np.exp(-0.5 * h * h) / np.sqrt(_TWO_PI))
        pdf_k = np.where(np.isinf(k), 0.0, np.exp(-0.5 * k * k) / np.sqrt(_TWO_PI))
        pos = s > 0
        ss = np.where(pos, s, 1.0)
        fh, fk = np.where(np.isinf(h), 0.0, h), np.where(np.isinf(k), 0.0, k)
        cond_h = np.where(pos, special.ndtr((k - rho * fh) / ss), (h + k > 0) * 1.0)
        cond_k = np.where(pos, special.ndtr((h - rho * fk) / ss), (h + k > 0) * 1.0)
        quad = (fh * fh - 2 * rho * fh * fk + fk * fk) / (ss * ss)
        dens = np.where(pos & np.isfinite(h) & np.isfinite(k),
                        np.exp(-0.5 * quad) / (_TWO_PI * ss), 0.0)
    return pdf_h * np.where(np.isinf(k) & (k < 0), 0.0, cond_h), \
        pdf_k * np.where(np.isinf(h) & (h < 0), 0.0, cond_k), dens


def _derivatives(out, x, lower, upper):
    """log Z and, for x, lower and upper, (mean, variance, g, G, uniform) on the batch.

    A uniform bound is no bound (its d is dropped: h or k = +∞); a uniform x makes every
    message uniform (the tilted distribution is improper)."""
    shape = broadcast_batch(out, x, lower, upper)
    (mx, vx, ux), (ml, vl, ul), (mu, vu, uu) = (_incoming(a, shape) for a in (x, lower, upper))
    lw_true, lw_false = (full(shape, w) for w in bool_log_weights(out))
    var1, var2 = vx + vl, vx + vu
    sd1, sd2 = np.sqrt(var1), np.sqrt(var2)
    h = np.where(ul, np.inf, _standard(mx - ml, sd1))
    k = np.where(uu, np.inf, _standard(mu - mx, sd2))
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = np.where(vx > 0, -vx / (sd1 * sd2), 0.0)
        # 1 − ρ² = (v_x v_l + v_x v_u + v_l v_u) / (σ₁² σ₂²), without cancellation
        s = np.where(vx > 0, np.sqrt((vx * vl + vx * vu + vl * vu) / (var1 * var2)), 1.0)
    p = np.where(ux, 0.5, bivariate_cdf(h, k, rho, s))  # a uniform x: weight split evenly
    with np.errstate(divide="ignore"):
        log_z = np.logaddexp(lw_true + np.log(p), lw_false + np.log1p(-p))
        # ∂ log Z / ∂P
        slope = np.exp(lw_true - log_z) - np.exp(lw_false - log_z)
    dh, dk, drho = _gradient(h, k, rho, s)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv1, inv2 = 1 / np.where(sd1 > 0, sd1, np.inf), 1 / np.where(sd2 > 0, sd2, np.inf)
        hf, kf = np.where(np.isinf(h), 0.0, h), np.where(np.isinf(k), 0.0, k)
        # ∂h, ∂k, ∂ρ with respect to each incoming mean and variance
        dv_rho1 = -rho * 0.5 * inv1 * inv1  # ∂ρ/∂σ₁²
        dv_rho2 = -rho * 0.5 * inv2 * inv2
        d_rho_vx = np.where(vx > 0, -inv1 * inv2 + dv_rho1 + dv_rho2, 0.0)
        grads = {
            "x": (slope * (dh * inv1 - dk * inv2),
                  slope * (-dh * hf * 0.5 * inv1 * inv1 - dk * kf * 0.5 * inv2 * inv2
                           + drho * d_rho_vx)),
            "lower": (slope * (-dh * inv1),
                      slope * (-dh * hf * 0.5 * inv1 * inv1 + drho * dv_rho1)),
            "upper": (slope * (dk * inv2),
                      slope * (-dk * kf * 0.5 * inv2 * inv2 + drho * dv_rho2)),
        }
    incoming = {"x": (mx, vx, ux), "lower": (ml, vl, ul), "upper": (mu, vu, uu)}
    return log_z, {a: incoming[a][:2] + grads[a] + (ux | incoming[a][2],) for a in incoming}


def _message(mean, var, g, big_g, uniform) -> Gaussian:
    """The EP message of moment matching, from the derivatives of log Z:
    precision β/(1 − vβ), precision × mean (g + mβ)/(1 − vβ), β = g² − 2G."""
    with np.errstate(divide="ignore", invalid="ignore"):
        beta = g * g - 2 * big_g
        denom = 1 - var * beta
        prec, h = beta / denom, (g + mean * beta) / denom
    return Gaussian.from_natural(np.where(uniform, 0.0, h), np.where(uniform, 0.0, prec))


@IS_BETWEEN.buffer("ep", "messages", "real", skip_if_uniform=("out", "x"))
def _is_between_messages(out, x, lower, upper) -> Gaussian:
    """The messages to x, lower and upper, stacked on a last axis: the work they share
    (the bivariate probability and its derivatives), computed once and read Fresh."""
    _, parts = _derivatives(out, x, lower, upper)
    msgs = [_message(*parts[a]) for a in ("x", "lower", "upper")]
    return Gaussian.from_natural(*(np.stack(e, axis=-1) for e in zip(
        *(m.eta for m in msgs), strict=True)))


def _pick(messages: Gaussian, i: int) -> Gaussian:
    return Gaussian.from_natural(*(e[..., i] for e in messages.eta))


@IS_BETWEEN.operator("ep", "x", skip_if_uniform=("out", "x"),
                     uniform_penalty=("lower", "upper"), fresh=("messages",))
def _is_between_x_ep(out, x, lower, upper, messages) -> Gaussian:
    """The truncation of x to (lower, upper), Gaussian or known bounds."""
    return _pick(messages, 0)


@IS_BETWEEN.operator("ep", "lower", skip_if_uniform=("out", "x"),
                     uniform_penalty=("lower", "upper"), fresh=("messages",))
def _is_between_lower_ep(out, x, lower, upper, messages) -> Gaussian:
    """The message to the lower bound (uniform while the lower bound's own is)."""
    return _pick(messages, 1)


@IS_BETWEEN.operator("ep", "upper", skip_if_uniform=("out", "x"),
                     uniform_penalty=("lower", "upper"), fresh=("messages",))
def _is_between_upper_ep(out, x, lower, upper, messages) -> Gaussian:
    """The message to the upper bound (uniform while the upper bound's own is)."""
    return _pick(messages, 2)


def _out_message(x, lower, upper) -> Bernoulli:
    """Bernoulli(P(lower < x < upper)) under the incoming messages (log-odds from logs)."""
    uniform_out = np.zeros(broadcast_batch(x, lower, upper), bool)
    shape = uniform_out.shape
    truth = Bernoulli.from_natural(full(shape, np.inf))
    log_p, _ = _derivatives(truth, x, lower, upper)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_q = np.log(-np.expm1(log_p))
        odds = np.where(np.isneginf(log_q), np.inf, log_p - log_q)
    if not is_known(x):
        odds = np.where(np.isinf(gaussian_moments(x)[1]), 0.0, odds)
    return Bernoulli.from_natural(odds)


@IS_BETWEEN.operator("ep", "out", skip_if_uniform=("x",), uniform_penalty=("lower", "upper"))
def _is_between_out_ep(x, lower, upper) -> Bernoulli:
    """Bernoulli(Φ₂(μ₁/σ₁, μ₂/σ₂; ρ))."""
    return _out_message(x, lower, upper)


@IS_BETWEEN.operator("vmp", "out", skip_if_uniform=("x",), trigger=("x", "lower", "upper"))
def _is_between_out_vmp(x, lower, upper, out=None) -> Bernoulli:
    """The forward distribution Bernoulli(P(lower < x < upper)) under the posteriors; for
    a random x where the boolean is known (its own message a point mass), that value: q(x)
    is then the truncation to where it holds (the message to x), so it holds surely."""
    forward = _out_message(x, lower, upper)
    if out is None or is_known(x) or is_known(out):
        return forward
    certain = np.isinf(np.asarray(out.log_odds))
    return Bernoulli.from_natural(np.where(certain, out.log_odds, forward.log_odds))


@IS_BETWEEN.operator("vmp", "x", skip_if_uniform=("out",), known=("lower", "upper"),
                     ascent=False, sole=True)
def _is_between_x_vmp(out, x, lower, upper, *, previous=None) -> Gaussian:
    """proj[p · f] / p, p = q(x) / previous: q(x) becomes the truncation of p."""
    _require_known(out)
    prior = _prior(x, previous)
    _, parts = _derivatives(out, prior, lower, upper)
    return _message(*parts["x"])


def _require_known(out) -> None:
    """VMP's message to x needs the boolean known (observed, or ``ff.constrain_true``)."""
    if not is_known(out) and not np.all(np.isinf(np.asarray(out.log_odds))):
        raise UnsupportedFactorError(
            "IsBetween under VMP: the message to x needs the boolean lower < x < upper "
            "known (observe it or apply ff.constrain_true to it); with a random boolean "
            "use 'ep'.")


def _prior(x: Gaussian, to_x: Gaussian | None) -> Gaussian:
    """x's other messages: its posterior divided by this factor's message to it."""
    if to_x is None:
        return x
    return Gaussian.from_natural(*(a - b for a, b in zip(x.eta, to_x.eta, strict=True)))


@IS_BETWEEN.evidence_operator("vmp")
def _is_between_average_log_factor(out, x, lower, upper, to_x=None) -> np.ndarray:
    """The bound's term for a random x: H[q] − H[proj q] with q the truncation of x's other
    messages (log Z + v G − ½ log(1 − v β)); 0 for a known x (out is then computed from
    it, and has no term)."""
    if is_known(x):
        return np.zeros(broadcast_batch(out, x, lower, upper))
    _require_known(out)
    log_z, parts = _derivatives(out, _prior(x, to_x), lower, upper)
    _, var, g, big_g, _ = parts["x"]
    with np.errstate(divide="ignore", invalid="ignore"):
        return log_z + var * big_g - 0.5 * np.log1p(-var * (g * g - 2 * big_g))


@IS_BETWEEN.evidence_operator("ep")
def _is_between_log_average_factor(out, x, lower, upper) -> np.ndarray:
    """log(w(T) P + w(F) (1 − P))."""
    return _derivatives(out, x, lower, upper)[0]
