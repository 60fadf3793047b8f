"""Comparisons of real variables: IsPositive(out | x) and Greater(out | a, b), out = a > b.

log f = log [out = (x > 0)]   and   log [out = (a > b)].

EP (Infer.NET's IsPositiveOp): the message to ``out`` is Bernoulli(P(x > 0)); the message
to ``x`` projects the tilted distribution m_x(x) · (w(T) [x > 0] + w(F) [x ≤ 0]) — a
mixture of two truncated Gaussians — onto a Gaussian by matching mean and variance, then
divides by m_x.  The truncated moments are computed relative to the truncation point
with erfcx and, in the far tail, with Laplace's continued fraction for the Mills ratio,
so that a constraint many standard deviations away keeps full precision.  Unlike
Infer.NET's default ``IsPositiveOp_Proper``, the message is not forced to be proper:
(message × incoming) always has exactly the tilted moments.

Greater is IsPositive of d = a − b: the message to d is computed as above and passed
back through the difference (exact, since a − b and its orthogonal complement are
independent under the incoming Gaussians).  Either side may be known.  The message to d
is the factor's buffer ``difference`` (Infer.NET's ``[Buffers]``), computed once and read
Fresh by the messages to a and to b, which only pass it back through the difference.

VMP: only the message to ``out`` (the forward distribution, as Infer.NET's
IsPositiveAverageLogarithm).  Infer.NET's VMP message to ``x`` needs the factor's previous
message to x (``to_x``), which the operator calling convention does not pass, so it is
left unregistered and the compiler reports the pair as unsupported.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from factorflow.distributions import Bernoulli, Gaussian
from factorflow.distributions.base import all_true, any_true, recall, remember, traced
from factorflow.distributions.moments import E, V, gaussian_moments, is_known
from factorflow.factors.common import bool_log_weights, broadcast_batch, full, times_finite
from factorflow.factors.gaussian import proper_moments
from factorflow.factors.registry import define_factor
from factorflow.lazy import special

_SQRT_2_OVER_PI = float(np.sqrt(2 / np.pi))
_LOG_SQRT_2PI = float(0.5 * np.log(2 * np.pi))
#: above this standardised threshold the continued fraction replaces the direct formula
_TAIL = 4.0
_CF_TERMS = 50


def _is_positive_log_density(out, x):
    return np.where(np.asarray(out, bool) == (np.asarray(x) > 0), 0.0, -np.inf)


def _greater_log_density(out, a, b):
    return np.where(np.asarray(out, bool) == (np.asarray(a) > np.asarray(b)), 0.0, -np.inf)


IS_POSITIVE = define_factor("IsPositive", ("out", "bool"), ("x", "real"), deterministic=True,
                            log_density=_is_positive_log_density)
GREATER = define_factor("Greater", ("out", "bool"), ("a", "real"), ("b", "real"),
                        deterministic=True, log_density=_greater_log_density)


def truncated_normal_moments(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(E[X] − t, Var[X]) for X ~ N(0, 1) conditioned on X > t, to full relative precision.

    With λ = φ(t)/Q(t) = √(2/π)/erfcx(t/√2): E[X] − t = λ − t and Var[X] = 1 − λ(λ − t).
    For t > 4 both cancel, and they come instead from the continued fraction
    1/λ = 1/(t + 1/D₁), D_k = t + (k+1)/D_{k+1}:  λ − t = 1/D₁, Var = (2/D₂ − 1/D₁)/D₁.
    """
    return _truncated(t)[1:]


def _truncated(t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(λ, E[X] − t, Var[X]) of ``truncated_normal_moments``, λ = φ(t)/Q(t) the inverse
    Mills ratio (the tilted mean's shift u of a certain constraint, ``_x_message``)."""
    return _truncated_parts(t)[:3]


def _truncated_parts(t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, Any]:
    """``_truncated(t)`` and the mask of the elements whose moments came from the
    continued fraction (t > 4), or None where there are none (and under tracing).  Off
    that mask, Var[X] = 1 − λ·(E[X] − t) exactly as computed; for an array ``t``, the
    three arrays are fresh."""
    t = np.asarray(t, float)
    if traced() or not t.ndim:
        lam = _SQRT_2_OVER_PI / special.erfcx(t / np.sqrt(2))
        with np.errstate(invalid="ignore"):
            excess = lam - t
            var = 1 - lam * excess
    else:  # the same arithmetic, each step written into the array it makes fresh
        lam = t / np.sqrt(2)
        special.erfcx(lam, out=lam)
        np.divide(_SQRT_2_OVER_PI, lam, out=lam)
        with np.errstate(invalid="ignore"):
            excess = lam - t
            var = lam * excess
            np.subtract(1, var, out=var)
        top = t.max() if t.size else 0.0  # (one reduction; NaN: the mask decides)
        if top <= _TAIL:
            return lam, excess, var, None
    tail = t > _TAIL
    if not any_true(tail):
        return lam, excess, var, None
    # the continued fraction, on the tail elements only (traced: on every element, a
    # harmless point in place of the others, and the tail's values selected)
    tt = np.where(tail, t, 2 * _TAIL) if traced() else t[tail]
    d = tt
    for k in range(_CF_TERMS, 1, -1):
        d = tt + (k + 1) / d
    d1 = tt + 2 / d
    if traced():
        return (lam, np.where(tail, 1 / d1, excess),
                np.where(tail, (2 / d - 1 / d1) / d1, var), None)
    if not t.ndim:
        excess, var = np.array(excess, float), np.array(var, float)
    excess[tail] = 1 / d1  # (else fresh arrays of this call's own)
    var[tail] = (2 / d - 1 / d1) / d1
    return lam, excess, var, tail


def _standardise(mean, var):
    with np.errstate(divide="ignore", invalid="ignore"):
        return mean / np.sqrt(var)


def _out_message(mean, var, known) -> Bernoulli:
    """Bernoulli(P(x > 0)) for x ~ N(mean, var); a known x (var 0) gives a certainty."""
    if known:
        return Bernoulli.from_natural(np.where(mean > 0, np.inf, -np.inf))
    z = _standardise(mean, var)
    with np.errstate(invalid="ignore"):
        lo = special.log_ndtr(z) - special.log_ndtr(-z)
    return Bernoulli.from_natural(np.where(np.isinf(var), 0.0, lo))


def _weight_difference(out) -> np.ndarray:
    """w(T) − w(F) for the evidence weights of ``bool_log_weights``: ±1 for a known or
    certain out, tanh(lo/2) for a Bernoulli message (exactly 0 when it is uniform), to
    full relative precision however close to uniform the message is."""
    if is_known(out):
        return np.where(np.asarray(E(out)) > 0.5, 1.0, -1.0)
    return np.tanh(np.asarray(out.log_odds, float) / 2)


def _certain_sign(out) -> float:
    """+1 where ``out`` is certainly true everywhere, −1 certainly false, else 0 (known
    values, or a Bernoulli message of log-odds ±inf: a constraint's)."""
    if is_known(out):
        value = np.asarray(E(out)) > 0.5
        return 1.0 if all_true(value) else -1.0 if all_true(~value) else 0.0
    lo = out.log_odds
    if not traced() and type(lo) is np.ndarray and lo.size:  # one reduction each, no mask
        return 1.0 if lo.min() == np.inf else -1.0 if lo.max() == -np.inf else 0.0
    return 1.0 if all_true(lo == np.inf) else -1.0 if all_true(lo == -np.inf) else 0.0


def _x_message(out, mean, var) -> Gaussian:
    """proj[N(x; mean, var) · (w(T)[x > 0] + w(F)[x ≤ 0])] / N(x; mean, var).

    In standard units X = (x − mean)/√var, with z = mean/√var, the tilted distribution
    has mean u = (w(T) − w(F)) φ(z)/Z (Z = w(T)Φ(z) + w(F)Φ(−z), u = ∂log Z/∂z) and
    variance 1 − k, k = u(u + z) = −∂²log Z/∂z²; the message is
    τ = k/(var (1 − k)), τμ = (u + z k)/(√var (1 − k)).  Where the tilted variance is
    below half the incoming one (a strong truncation: u + z and 1 − k cancel), u + z and
    1 − k come instead from the truncated halves' moments measured from 0, summed from
    non-negative terms (w₁V₁ + w₀V₀ + w₁w₀(μ₁ − μ₀)²).  Elsewhere the message is
    proportional to w(T) − w(F): exactly uniform for a uniform out and as small as it
    should be for a nearly uniform one (the difference 1/var_tilted − 1/var instead
    leaves rounding noise of either sign, an improper message).  A uniform incoming
    message gives a uniform message.
    """
    # none uniform, as a rule: a finite sum of the variances tells it in one reduction,
    # and no masking passes follow
    finite = not traced() and type(var) is np.ndarray and bool(np.isfinite(np.sum(var)))
    uniform = None if finite else np.isinf(var)
    some_uniform = not finite and any_true(uniform)
    v = np.where(uniform, 1.0, var) if some_uniform else np.asarray(var, float)
    m = np.where(uniform, 0.0, mean) if some_uniform else np.asarray(mean, float)
    s = np.sqrt(v)
    z = m / s
    sign = _certain_sign(out)
    if sign == 1.0:  # out certainly true (a constraint): one truncated half, whose
        # inverse Mills ratio λ = φ(z)/Φ(z) is u itself (no log Φ needed)
        u, t_excess, t_var, tail = _truncated_parts(-z)
    elif sign == -1.0:
        u, excess, t_var, tail = _truncated_parts(z)
        u, t_excess = -u, -excess
    else:
        lw_true, lw_false = bool_log_weights(out)
        log_true = lw_true + special.log_ndtr(z)
        log_false = lw_false + special.log_ndtr(-z)
        with np.errstate(invalid="ignore"):
            log_z = np.logaddexp(log_true, log_false)
            w1, w0 = np.exp(log_true - log_z), np.exp(log_false - log_z)
        excess1, var1 = truncated_normal_moments(-z)
        excess0, var0 = truncated_normal_moments(z)
        t_excess = w1 * excess1 - w0 * excess0
        t_var = w1 * var1 + w0 * var0 + w1 * w0 * (excess1 + excess0) ** 2
        # u = ∂log Z/∂z
        u = _weight_difference(out) * np.exp(-z * z / 2 - _LOG_SQRT_2PI - log_z)
    # t_excess = E[x]/√var = u + z, t_var = Var[x]/var = 1 − k (standard units)
    if sign and not some_uniform and not traced() and np.ndim(z) \
            and np.shape(u) == np.shape(z) == np.shape(v):
        return Gaussian.from_natural(*_certain_naturals(u, t_excess, t_var, z, v, s, tail))
    k = u * (u + z)
    strong = t_var < 0.5
    k, rest = np.where(strong, 1 - t_var, k), np.where(strong, t_var, 1 - k)
    num = np.where(strong, t_excess - z * t_var, u + z * k)
    with np.errstate(divide="ignore", invalid="ignore"):
        prec = k / (v * rest) + 0.0  # + 0.0: no −0.0 (a variance of −inf) from u = 0
        mtp = num / (s * rest) + 0.0
    if not some_uniform:
        return Gaussian.from_natural(mtp, prec)
    return Gaussian.from_natural(np.where(uniform, 0.0, mtp), np.where(uniform, 0.0, prec))


def _certain_naturals(u: np.ndarray, t_excess: np.ndarray, t_var: np.ndarray,
                      z: np.ndarray, v: np.ndarray, s: np.ndarray, tail: Any
                      ) -> tuple[np.ndarray, np.ndarray]:
    """(τμ, τ) of ``_x_message``'s message where out is certain (one truncated half,
    moments from ``_truncated_parts``, ``tail`` its continued-fraction mask), with no
    pass that selects between the strong and weak formulas (a mask that falls at random
    over the batch costs a branch mispredicted per element, four times a plain pass):

    * 1 − k is t_var itself: off the tail t_var = 1 − λ(λ + z) is computed as 1 − k;
    * k = u(u + z) off the tail: where t_var < 0.5, k > 0.5 and 1 − t_var = 1 − (1 − k)
      is exact (Sterbenz), so the strong formula 1 − t_var gives the same bits;
    * the numerator u + z k off the tail, the strong formula's t_excess − z t_var only in
      the tail.  With t ≤ 4, |u|, |z k| ≤ 4.3 against a numerator ≥ 0.4, so u + z k
      loses at most a few units in the last place there (≤ 1e-14 relative; the
      difference from ``_x_message``'s general formulas);
    * in the tail (t > 4: the continued fraction's moments) the strong formulas.

    13 passes over the batch; reads its arguments only (u and t_excess may be written
    into by the caller afterwards: nothing returned aliases them)."""
    k = u + z
    k *= u                                  # k = u(u + z)
    num = z * k
    num += u                                # u + z k
    if tail is not None:  # the few continued-fraction elements: the strong formulas
        tv = t_var[tail]
        k[tail] = 1 - tv
        num[tail] = t_excess[tail] - z[tail] * tv
    with np.errstate(divide="ignore", invalid="ignore"):
        prec = v * t_var
        np.divide(k, prec, out=prec)
        prec += 0.0  # no −0.0 (a variance of −inf) from u = 0
        mtp = s * t_var
        np.divide(num, mtp, out=mtp)
        mtp += 0.0
    return mtp, prec


def _log_average(out, mean, var, known) -> np.ndarray:
    """log Σ_out ∫ [out = (x > 0)] w_out N(x; mean, var): log(w(T) Φ(z) + w(F) Φ(−z)).
    A uniform x message splits its weight evenly, as in Infer.NET."""
    lw_true, lw_false = bool_log_weights(out)
    if known:
        return np.where(mean > 0, lw_true, lw_false)
    z = np.where(np.isinf(var), 0.0, _standardise(mean, np.where(np.isinf(var), 1.0, var)))
    return np.logaddexp(lw_true + special.log_ndtr(z), lw_false + special.log_ndtr(-z))


# ----- IsPositive -------------------------------------------------------------------
@IS_POSITIVE.operator("ep", "out", skip_if_uniform=("x",), proper=("x",))
def _is_positive_out_ep(x) -> Bernoulli:
    """Bernoulli(Φ(m/√v)), log-odds log Φ(z) − log Φ(−z)."""
    return _out_message(E(x), V(x), is_known(x))


@IS_POSITIVE.operator("ep", "x", skip_if_uniform=("out", "x"), proper=("x",))
def _is_positive_x_ep(out, x) -> Gaussian:
    """The truncated-Gaussian projection of the tilted distribution, divided by m_x."""
    m, v = gaussian_moments(x)
    return _x_message(out, full(broadcast_batch(out, x), m), full(broadcast_batch(out, x), v))


@IS_POSITIVE.operator("vmp", "out", skip_if_uniform=("x",), trigger=("x",))
def _is_positive_out_vmp(x) -> Bernoulli:
    """The forward distribution Bernoulli(P(x > 0)) under q(x) (the same as EP)."""
    return _out_message(E(x), V(x), is_known(x))


@IS_POSITIVE.evidence_operator("ep")
def _is_positive_log_average_factor(out, x) -> np.ndarray:
    """log(w(T) Φ(z) + w(F) Φ(−z)), z = m/√v."""
    return _log_average(out, E(x), V(x), is_known(x))


# ----- Greater (a > b) ---------------------------------------------------------------
def _spread(shape: tuple[int, ...], value) -> np.ndarray:
    """``value`` over ``shape``: itself where it already has that shape (the operators
    below only read it), else a fresh broadcast copy (``full``)."""
    return value if np.shape(value) == shape else full(shape, value)


def _shared_moments(x) -> tuple[np.ndarray, np.ndarray] | None:
    """``proper_moments(x)``, remembered (read-only) while x's precision array lives:
    the messages to a and to b read the moments of b and of a that the buffer's message
    to d = a − b computed in the same sweep (two passes over the batch each, saved).
    None where ``proper_moments`` is None (then each caller takes its general path)."""
    if not isinstance(x, Gaussian) or traced():
        return None
    h, p = x.eta
    hit = recall("greater_moments", p)
    if hit is not None and hit[0]() is h:
        return hit[1], hit[2]
    moments = proper_moments(x)
    if moments is None:
        return None
    for arr in moments:
        arr.flags.writeable = False
    try:
        remember("greater_moments", p, (weakref.ref(h), *moments))
    except TypeError:  # (h not weakly referable: nothing remembered)
        pass
    return moments


def _difference(a, b):
    """Mean and variance of d = a − b under the incoming messages."""
    fa, fb = _shared_moments(a), _shared_moments(b)
    if fa is not None and fb is not None and fa[0].shape == fb[0].shape:
        (ma, va), (mb, vb) = fa, fb  # (the same sums as below: bit for bit)
        return ma - mb, va + vb
    (ma, va), (mb, vb) = gaussian_moments(a), gaussian_moments(b)
    return ma - mb, va + vb


@GREATER.operator("ep", "out", skip_if_uniform=("a", "b"), proper=("a", "b"))
def _greater_out_ep(a, b) -> Bernoulli:
    """Bernoulli(P(a > b)) = Bernoulli(Φ((m_a − m_b)/√(v_a + v_b)))."""
    return _out_message(*_difference(a, b), is_known(a) and is_known(b))


def _through_difference(msg_d: Gaussian, other_mean, other_var, sign: float,
                        finite_other: bool = False) -> Gaussian:
    """The message to a (sign +1) or b (sign −1) from the message to d = a − b:
    N(d; μ, 1/τ) convolved with the other side, precision τ/(1 + τ v_other).
    ``finite_other``: the caller knows every v_other is finite (a fast path)."""
    h, tau = msg_d.eta
    if finite_other and not traced() and np.shape(tau) == np.shape(h) \
            == np.shape(other_mean) == np.shape(other_var) and np.ndim(tau):
        # a finite v_other: times_finite is the plain product; the same arithmetic
        # written into two fresh arrays (1·h = h and −1·h = −h exactly)
        scale = tau * other_var
        scale += 1
        num = tau * other_mean
        num = np.add(num, h, out=num) if sign == 1.0 else np.subtract(num, h, out=num)
        num /= scale
        return Gaussian.from_natural(num, tau / scale)
    scale = 1 + times_finite(tau, other_var)
    return Gaussian.from_natural((sign * h + tau * other_mean) / scale, tau / scale)


@GREATER.buffer("ep", "difference", "real", skip_if_uniform=("out", "a", "b"),
                proper=("a", "b"))
def _greater_difference_ep(out, a, b) -> Gaussian:
    """IsPositive's message to d = a − b (the truncated-Gaussian moments of the tilted d),
    shared by the messages to ``a`` and ``b``: computed once per sweep, read Fresh."""
    shape = broadcast_batch(out, a, b)
    m, v = _difference(a, b)
    return _x_message(out, _spread(shape, m), _spread(shape, v))


def _through_other(out, a, b, other, difference: Gaussian, sign: float) -> Gaussian:
    """``_through_difference`` of the fresh message to d, with the other side's moments
    (``proper_moments`` where it is a proper message: finite variances, as the message
    to d remembered them)."""
    shape = broadcast_batch(out, a, b)
    fast = _shared_moments(other)
    if fast is not None and fast[0].shape == shape:
        return _through_difference(difference, *fast, sign, finite_other=True)
    mo, vo = gaussian_moments(other)
    return _through_difference(difference, _spread(shape, mo), _spread(shape, vo), sign)


@GREATER.operator("ep", "a", skip_if_uniform=("out", "a", "b"), fresh=("difference",))
def _greater_a_ep(out, a, b, difference) -> Gaussian:
    """The message to d = a − b (``difference``, fresh), shifted by m_b and widened by v_b."""
    return _through_other(out, a, b, b, difference, 1.0)


@GREATER.operator("ep", "b", skip_if_uniform=("out", "a", "b"), fresh=("difference",))
def _greater_b_ep(out, a, b, difference) -> Gaussian:
    """The message to d = a − b (``difference``, fresh), reflected, shifted by m_a and
    widened by v_a."""
    return _through_other(out, a, b, a, difference, -1.0)


@GREATER.operator("vmp", "out", skip_if_uniform=("a", "b"), trigger=("a", "b"))
def _greater_out_vmp(a, b) -> Bernoulli:
    """The forward distribution Bernoulli(P(a > b)) under q(a) q(b) (the same as EP)."""
    return _out_message(*_difference(a, b), is_known(a) and is_known(b))


@GREATER.evidence_operator("ep")
def _greater_log_average_factor(out, a, b) -> np.ndarray:
    """log(w(T) Φ(z) + w(F) Φ(−z)), z = (m_a − m_b)/√(v_a + v_b)."""
    return _log_average(out, *_difference(a, b), is_known(a) and is_known(b))
