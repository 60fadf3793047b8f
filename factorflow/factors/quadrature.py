"""Moments of a Gaussian tilted by a smooth step: log ∫ N(x; m, v) h(x) dx, mean, variance.

EP's message from a non-conjugate factor to a real variable is the Gaussian with the
moments of the tilted distribution N(x; m, v) h(x) (m, v: the cavity), divided by the
cavity.  The likelihoods here (the logistic σ(x), and e^(−eˣ), to which the Poisson
likelihood with a log link reduces after shifting the cavity's mean by y·v) are smooth
steps: log-concave, near 1 on one side of x = 0 and decaying exponentially or faster on
the other.  Two quadratures, each used where it is accurate:

* **Gauss–Hermite** (``numpy.polynomial.hermite_e.hermegauss``, ``GH_NODES`` = 64 nodes)
  on a Gaussian placed at the tilted distribution's mode (safeguarded Newton) with its
  Laplace scale (for exp(−eˣ) once more at the moments so found).  Exact for polynomials
  of degree 127 times the proposal; measured against adaptive quadrature
  (``scipy.integrate.quad``), log Z, mean and variance agree to 3e-11 for σ (cavity
  variance up to 4) and 4e-11 for exp(−eˣ) (up to 1.75; its error grows with the
  variance, 1e-8 at 3 and 1e-7 at 4, which put oracle seed 13 off by 2.5e-7), or where
  the tilted distribution is narrower than the step; 32 nodes left errors of 1e-8 for σ
  at cavity variance 4.
* **Step + Gauss–Laguerre** where the tilted distribution is wide: h = [x on the step's
  high side] + ε(x), ε decaying like e^(−|x|) on both sides.  The step's part is a
  truncated-normal moment (closed form); ε's is ∫₀^∞ e^(−t) [eᵗ ε(±t)] N(±t; m, v) dt, with
  smooth bounded eᵗ ε(±t), by Gauss–Laguerre (SciPy's ``roots_laguerre``, 64 nodes; for
  exp(−eˣ)'s double-exponential side in s = eᵗ − 1): 1e-11 for σ (cavity variances from
  4 to 10⁴) and 1e-13 for exp(−eˣ) (from 1.75 to 10⁴, cavity means within ±1000, against
  mpmath) when the mode lies within ``_REACH`` = 6 Laplace scales of the step on its low
  side (σ: 2e-9 at 8 scales).  Where the cavity's mean is on the step's low side the
  tilted mass is pressed against the step, many of the cavity's standard deviations from
  its mean: the moments are then taken about the step, its part from the overshoot
  integrals (``_overshoot``), and relative to the cavity's density there, which
  underflows (taken about the cavity's mean they were 1e-9 off at variance 100 and 5e-8 at
  1000 with the mean 20-30 standard deviations above the step).  Hermite nodes cannot do
  this: a step of width 1 inside a Gaussian of standard deviation 10 sits between two
  nodes (errors of 1e-2 at variance 200 with 64 nodes).

Everything is vectorised over the batch (plates) axes: one (batch, nodes) array per
quadrature, no Python loop per element.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from factorflow.distributions.base import any_true, traced
from factorflow.lazy import special

#: Gauss–Hermite nodes (see the module docstring for why 64)
GH_NODES = 64
#: Gauss–Laguerre nodes for the step's exponential tails
LAGUERRE_NODES = 64
#: the Laguerre split is used where the cavity variance is above ``Step.wide_cavity``,
#: the tilted distribution's Laplace scale above ``_WIDE`` and its mode not beyond
#: ``_REACH`` of those scales on the step's low side (there h is exponential in x over
#: all the tilted mass and the tilted distribution a Gaussian, which Hermite nodes
#: integrate exactly, while Laguerre's nodes lie in its far tail: σ's errors 2e-9 at 8
#: scales, 1e-15 by Hermite from 6)
_WIDE = 0.5
_REACH = 6.0
_NEWTON_STEPS = 200

_HERMITE = np.polynomial.hermite_e.hermegauss(GH_NODES)
_HERMITE_LOGW = np.log(_HERMITE[1] / np.sqrt(2 * np.pi))  # weights of N(0, 1), summing to 1
#: the overshoot integrals are taken by Laguerre rather than from the Mills ratio beyond
#: this many standard deviations (``_overshoot``)
_MILLS_CUT = 3.0


#: Gauss–Laguerre nodes for the overshoot integrals beyond ``_MILLS_CUT`` (measured
#: against mpmath: 7e-16 from z = 3 with 32 nodes, 1e-14 with 24)
OVERSHOOT_NODES = 32


@functools.cache
def _laguerre_nodes(n: int = LAGUERRE_NODES) -> tuple[np.ndarray, np.ndarray]:
    """The ``n``-node Gauss–Laguerre rule (nodes t > 0, weights of e⁻ᵗ), from SciPy on
    first use (NumPy constants, the same in every trace).  SciPy's rather than NumPy's
    ``laggauss``, whose Σ w t and Σ w t²/2 are 5e-14 and 8e-14 off 1 at 64 nodes (SciPy's
    2e-15)."""
    from scipy.special import roots_laguerre
    return roots_laguerre(n)


def standard_normal_rule() -> tuple[np.ndarray, np.ndarray]:
    """The ``GH_NODES``-node Gauss–Hermite rule of N(0, 1): nodes z and weights summing to
    1, so that E[f(m + √v z)] ≈ Σ w f(m + √v z) (exact for polynomials of degree 127)."""
    return _HERMITE[0], np.exp(_HERMITE_LOGW)


@dataclass(frozen=True)
class Step:
    """A smooth step likelihood h(x) > 0 with log h concave.

    ``log_h``, ``d1``, ``d2``: log h and its first two derivatives; ``up``: True if h → 1
    as x → +∞ (the step's high side is x > 0), False if h → 1 as x → −∞.  With ε = h − step,
    ``pos()`` and ``neg()`` give quadrature rules (nodes t > 0, weights) for ∫₀^∞ ε(t) g(t) dt
    and ∫₀^∞ ε(−t) g(−t) dt: the weights carry ε.  ``bracket(m, v)``: an interval that
    holds the tilted distribution's mode; ``recentre``: further Hermite passes, each at the
    moments found by the last (measured: none needed for σ, one for exp(−eˣ), whose
    skewed tilted distributions are 3e-5 off the Laplace proposal's rule without it).
    """

    log_h: Callable[[np.ndarray], np.ndarray]
    d1: Callable[[np.ndarray], np.ndarray]
    d2: Callable[[np.ndarray], np.ndarray]
    up: bool
    pos: Callable[[], tuple[np.ndarray, np.ndarray]]
    neg: Callable[[], tuple[np.ndarray, np.ndarray]]
    bracket: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
    #: Hermite passes after the first, each at the moments the last one found
    recentre: int = 0
    #: the cavity variance above which the Laguerre split is used where the tilted
    #: distribution is wide (the crossover of the two rules' measured errors)
    wide_cavity: float = 4.0
    #: log h(x + d) − log h(x) without cancellation where log h is large (None: the
    #: difference of ``log_h``)
    log_ratio: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None


def _once(compute: Callable[[], Any]) -> Callable[[], Any]:
    """``compute()`` computed at its first call and kept (under tracing a value belongs to
    its trace: computed in each, never kept)."""
    cached = functools.cache(compute)
    return lambda: compute() if traced() else cached()


def _laguerre_rule(tail: Callable[[np.ndarray], np.ndarray]
                   ) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
    """The rule for ∫₀^∞ ε(t) g(t) dt where ``tail(t)`` = eᵗ ε(t) is smooth, built on first
    use (SciPy loads when first needed)."""

    def compute() -> tuple[np.ndarray, np.ndarray]:
        t, w = _laguerre_nodes()
        return t, w * tail(t)
    return _once(compute)


def _logistic_bracket(m, v):
    step = v * special.expit(-m)  # f'(m) = σ(−m) > 0: the mode is in [m, m + v σ(−m)]
    return m, m + step


#: h(x) = σ(x), the logistic: ε(t) = σ(t) − 1 = −e⁻ᵗ σ(t), ε(−t) = σ(−t) = e⁻ᵗ σ(t)
LOGISTIC = Step(
    log_h=lambda x: special.log_expit(x),
    d1=lambda x: special.expit(-x),
    d2=lambda x: -special.expit(x) * special.expit(-x),
    up=True,
    pos=_laguerre_rule(lambda t: -special.expit(t)),
    neg=_laguerre_rule(lambda t: special.expit(t)),
    bracket=_logistic_bracket,
)


def _exp_neg_exp_bracket(m, v):
    # f'(x) = −(x − m)/v − eˣ: negative at m, non-negative at min(m, 0) − v
    return np.minimum(m, 0.0) - v, m


@_once
def _double_exponential_rule() -> tuple[np.ndarray, np.ndarray]:
    """∫₀^∞ exp(−eᵗ) g(t) dt = e⁻¹ ∫₀^∞ e⁻ˢ g(log(1 + s)) / (1 + s) ds (s = eᵗ − 1), by
    Gauss–Laguerre in s: smooth where Laguerre in t would meet a double exponential."""
    s, w = _laguerre_nodes()
    return np.log1p(s), w * np.exp(-1.0) / (1 + s)


def _exp_neg_exp_ratio(x, d):
    # −eˣ (eᵈ − 1) by expm1 (at a mode of 13 under a cavity of mean 900 and variance 0.003,
    # eˣ is 4e5 and the tilted distribution 2e-3 wide: the difference of −eˣ⁺ᵈ and −eˣ was
    # 1e-8 off its variance); −eˣ⁺ᵈ where that is 0·∞ (eˣ underflows, eᵈ overflows)
    with np.errstate(over="ignore", invalid="ignore"):
        ex = np.exp(x)
        ratio = -ex * np.expm1(d)
        if any_true(ex == 0):
            ratio = np.where(np.isnan(ratio), -np.exp(x + d), ratio)
    return ratio


#: h(x) = exp(−eˣ): a Poisson likelihood with a log link and count 0 (any count reduces
#: to it by shifting the cavity); ε(t) = exp(−eᵗ), ε(−t) = exp(−e⁻ᵗ) − 1
EXP_NEG_EXP = Step(
    log_h=lambda x: -np.exp(x),
    d1=lambda x: -np.exp(x),
    d2=lambda x: -np.exp(x),
    up=False,
    pos=_double_exponential_rule,
    neg=_laguerre_rule(lambda t: np.exp(t) * np.expm1(-np.exp(-t))),
    bracket=_exp_neg_exp_bracket,
    recentre=1,
    wide_cavity=1.75,
    log_ratio=_exp_neg_exp_ratio,
)


def _mode(m: np.ndarray, v: np.ndarray, h: Step) -> np.ndarray:
    """argmax of f(x) = −(x − m)²/2v + log h(x): Newton's method kept inside a shrinking
    bracket, bisecting where a Newton step leaves it or does not halve it (rtsafe)."""
    lo, hi = h.bracket(m, v)
    lo, hi = np.minimum(lo, hi), np.maximum(lo, hi)

    def step(x: np.ndarray, lo: np.ndarray, hi: np.ndarray, last: np.ndarray) -> tuple:
        with np.errstate(over="ignore", invalid="ignore"):
            g = -(x - m) / v + h.d1(x)
            curv = 1 / v - h.d2(x)  # −f'' > 0
            lo = np.where(g > 0, x, lo)
            hi = np.where(g > 0, hi, x)
            size = g / curv
            newton = x + size
            # Newton inside the bracket and at least halving the last step (or already at
            # rounding, where bisecting would throw a converged element away)
            ok = (newton >= lo) & (newton <= hi) & (
                (np.abs(size) < 0.5 * last) | (np.abs(size) <= 1e-13 * (1 + np.abs(x))))
            nxt = np.where(ok, newton, 0.5 * (lo + hi))
        return nxt, lo, hi, np.abs(nxt - x)

    def settled(x: np.ndarray, last: np.ndarray) -> np.ndarray:
        return np.all(last <= 1e-13 * (1 + np.abs(x)))

    x, last = 0.5 * (lo + hi), hi - lo
    if traced():  # the same steps in a loop on the device (its trace does not unroll)
        from jax import lax
        return lax.while_loop(
            lambda c: (c[0] < _NEWTON_STEPS) & ((c[0] == 0) | ~settled(c[1], c[4])),
            lambda c: (c[0] + 1, *step(*c[1:])), (0, x, lo, hi, last))[1]
    for _ in range(_NEWTON_STEPS):
        x, lo, hi, last = step(x, lo, hi, last)
        if settled(x, last):
            break
    return x


def _level(c, m0, v, k):
    """g(c) = −(c − m₀)²/2v + k c, the log of N(c; m₀, v) e^(k c) √(2πv): the level that log Z
    is taken from.  The quadratures integrate under the shifted cavity N(x; m₀ + k v, v),
    whose log density at c, −(c − m₀ − k v)²/2v, is g(c) less k m₀ + k² v/2; adding that
    back cancelled (both 5.5e7 for k = 105 under a cavity of variance 10⁴, whose rounding,
    and that of m₀ + k v, left log Z 1.2e-8 off), g(c) directly does not."""
    return -(c - m0) ** 2 / (2 * v) + k * c


def _hermite(m, v, h: Step, center, scale, m0, k):
    """(log Z, mean, variance) by Gauss–Hermite on N(center, scale²), of the cavity
    N(x; m, v), m = m₀ + k v, with log Z that of N(x; m₀, v) e^(k x) h(x) (``_level``)."""
    z, lw = _HERMITE[0], _HERMITE_LOGW
    c, s = center[..., None], scale[..., None]
    mm, vv = m[..., None], v[..., None]
    d = s * z
    with np.errstate(over="ignore", under="ignore"):
        f_c = _level(center, m0, v, k) + h.log_h(center)
        # f(c + d) − f(c), as differences: f(c) alone may be 1e8 (a cavity of mean 900 and
        # variance 0.003), which f(c + d) − f(c) lost to rounding (1e-8 of the variance)
        ratio = (h.log_ratio(c, d) if h.log_ratio is not None
                 else h.log_h(c + d) - h.log_h(c))
        ell = d * ((mm - c) / vv - d * (0.5 / vv)) + ratio + (z * z / 2 + lw)
    top = np.max(ell, axis=-1, keepdims=True)
    total = np.log(np.sum(np.exp(ell - top), axis=-1)) + top[..., 0]
    p = np.exp(ell - total[..., None])
    delta = np.sum(p * z, axis=-1)
    var = scale**2 * np.sum(p * (z - delta[..., None]) ** 2, axis=-1)
    # ∫ N(x; m, v) h = (s/√v) E_z[exp(f(c + s z) + z²/2)], f = −(x − m)²/2v + log h
    log_z = f_c + np.log(scale / np.sqrt(v)) + total
    return log_z, center + scale * delta, var


def _overshoot(z: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """J_k(z) = ∫₀^∞ yᵏ e^(−z y − y²/2) dy for k = 0, 1, 2 and z ≥ 0: the moments of the
    overshoot U − z of U ~ N(0, 1) beyond z, divided by φ(z) (E[(U − z)ᵏ; U > z] = φ(z) J_k),
    which underflows from z ≈ 38.  Below ``_MILLS_CUT`` from the Mills ratio
    R = J_0 = √(π/2) erfcx(z/√2), with J_1 = 1 − z R and J_2 = (1 + z²) R − z (4e-15 relative
    at most); beyond, where those cancel (J_2 is 5e-12 off at z = 20 and 6e-9 at 100), by
    Gauss–Laguerre in s = z y: J_k = z^−(k+1) ∫₀^∞ sᵏ e⁻ˢ e^(−s²/2z²) ds, smooth and bounded
    (``OVERSHOOT_NODES``)."""
    near = np.minimum(z, _MILLS_CUT)
    r = np.sqrt(np.pi / 2) * special.erfcx(near / np.sqrt(2))
    closed = (r, 1 - near * r, (1 + near * near) * r - near)
    s, w = _laguerre_nodes(OVERSHOOT_NODES)

    def tail(far):
        g = w * np.exp(-s * s / (2 * far[..., None] ** 2))
        return tuple(np.sum(g * s**k, axis=-1) / far ** (k + 1) for k in range(3))
    if traced():  # every element both ways
        return tuple(np.where(z < _MILLS_CUT, a, b) for a, b in
                     zip(closed, tail(np.maximum(z, _MILLS_CUT)), strict=True))
    far = z >= _MILLS_CUT
    if np.any(far):
        closed = tuple(np.array(a, float) for a in closed)
        for a, b in zip(closed, tail(z[far]), strict=True):
            a[far] = b
    return closed


def _laguerre(m, v, h: Step, m0, k):
    """(log Z, mean, variance) by the step's truncated-normal moments plus Gauss–Laguerre over its
    exponential tails (the cavity N(x; m, v), m = m₀ + k v, log Z that of N(x; m₀, v) e^(k x)
    h(x), as ``_hermite``). Every term is taken relative to the cavity's density at a centre c,
    and the moments about c, so that none cancels or underflows: c = m where the cavity's mean
    is on the step's high side (the tilted distribution is near the cavity), c = 0, the step,
    where it is on the low side (the tilted mass is pressed against the step, far from m:
    moments about m lost 1e-9 to 5e-8 of the variance to cancellation with the mean 20-30
    standard deviations from the step); there the step's moments are the overshoot integrals
    ``_overshoot``."""
    sd = np.sqrt(v)
    sign = 1.0 if h.up else -1.0  # the step's high side is sign·x > 0
    z = -sign * m / sd  # the cavity's mean, in standard deviations on the step's low side
    low = z > 0
    c = np.where(low, 0.0, m)
    # the step's moments E[(x − c)ᵏ; sign·x > 0] / N(c; m, v), k = 0, 1, 2: with
    # w = sign·(x − m)/sd > z, E[wᵏ; w > z] is (Q, φ(z), Q + z φ(z)), Q = Φ(−z), on the high
    # side; on the low side sign·x = sd (w − z), the overshoot
    high_z = np.minimum(z, 0.0)
    root = np.sqrt(2 * np.pi)  # 1 / N(m; m, v), in units of sd
    q, phi = special.ndtr(-high_z), np.exp(-0.5 * high_z**2) / root
    high = (q * root, phi * root, (q + high_z * phi) * root)
    over = _overshoot(np.maximum(z, 0.0))
    step = [sign**k * sd ** (k + 1) * np.where(low, b, a)
            for k, (a, b) in enumerate(zip(high, over, strict=True))]
    mm, vv, cc = m[..., None], v[..., None], c[..., None]
    (tp, wp), (tn, wn) = h.pos(), h.neg()
    pos, neg = tp - cc, -tn - cc
    with np.errstate(under="ignore", over="ignore"):
        # N(x; m, v) / N(c; m, v) = exp(−((x − m)² − (c − m)²)/2v)
        dens_pos = wp * np.exp(-pos * (tp + cc - 2 * mm) / (2 * vv))
        dens_neg = wn * np.exp(-neg * (-tn + cc - 2 * mm) / (2 * vv))
    moments = [s + np.sum(pos**k * dens_pos + neg**k * dens_neg, axis=-1)
               for k, s in enumerate(step)]
    z0, z1, z2 = moments
    with np.errstate(divide="ignore", invalid="ignore"):
        shift = z1 / z0
        log_z = np.log(z0) + _level(c, m0, v, k) - 0.5 * np.log(2 * np.pi * v)
        return log_z, c + shift, z2 / z0 - shift**2


def tilted_moments(m: np.ndarray, v: np.ndarray, h: Step, tilt: np.ndarray | float = 0.0
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(log ∫ N(x; m, v) e^(tilt·x) h(x) dx, mean, variance) of the tilted distribution,
    elementwise over the broadcast of ``m``, ``v`` (finite, v > 0) and ``tilt``.  The
    exponential tilt shifts the cavity to N(x; m + tilt·v, v), the Gaussian that the
    quadratures see; log Z is taken from −(c − m)²/2v + tilt·c at the rule's centre c, not
    as the shifted cavity's log Z plus tilt·m + tilt²v/2, which cancels (``_level``)."""
    m0, v, k = (np.array(a, float) for a in np.broadcast_arrays(m, v, tilt))
    m = m0 + k * v
    x = _mode(m, v, h)
    scale = 1 / np.sqrt(1 / v - h.d2(x))
    deep = (-x if h.up else x) > _REACH * scale  # far on the step's low side: e^(±x) there
    # (and the cavity's mean less than 30 standard deviations on the step's high side:
    # beyond, the cavity's density at the Laguerre nodes underflows, and the tilted
    # distribution is the cavity's, which Hermite integrates)
    high = m if h.up else -m
    wide = (v > h.wide_cavity) & (scale > _WIDE) & ~deep & (high < 30 * np.sqrt(v))
    if traced():  # no boolean indexing: every element both ways, its own rule selected
        lz, mu, s2 = _hermite(m, v, h, x, scale, m0, k)
        for _ in range(h.recentre):
            lz, mu, s2 = _hermite(m, v, h, mu, np.sqrt(s2), m0, k)
        return tuple(np.where(wide, b, a) for a, b in zip(
            (lz, mu, s2), _laguerre(m, v, h, m0, k), strict=True))
    log_z, mean, var = np.empty_like(m), np.empty_like(m), np.empty_like(m)
    narrow = ~wide
    if np.any(narrow):
        mn, vn, rest = m[narrow], v[narrow], (m0[narrow], k[narrow])
        lz, mu, s2 = _hermite(mn, vn, h, x[narrow], scale[narrow], *rest)
        for _ in range(h.recentre):  # again, at the moments so found
            lz, mu, s2 = _hermite(mn, vn, h, mu, np.sqrt(s2), *rest)
        log_z[narrow], mean[narrow], var[narrow] = lz, mu, s2
    if np.any(wide):
        log_z[wide], mean[wide], var[wide] = _laguerre(m[wide], v[wide], h, m0[wide], k[wide])
    return log_z, mean, var
