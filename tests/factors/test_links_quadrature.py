"""The tilted moments of badly scaled link sites (``factors.quadrature`` through the
links' own entry points) against ``scipy.integrate.quad`` at tight tolerances, to 1e-9
relative: cavity means far from the step (±30), cavity variances from 10⁻³ to 25, Poisson
counts up to 1000 (the cavity shifted by k·v, far past the step).

Found by oracle seed 13: exp(−eˣ) under the cavity N(−3.11, 3.90) was 3e-7 off in its
variance by Gauss–Hermite, which was then used up to cavity variance 4.  The limits of
the range tested are those where both rules were measured below 1e-9; beyond them (cavity
variance 100 and more with the cavity's mean 10-30 standard deviations above the step,
i.e. large counts under wide cavities) exp(−eˣ)'s errors reached 1e-9 to 5e-8 (and 1.5e-7
beyond 30 standard deviations, where Hermite took over): the moments were taken about the
cavity's mean, 20-30 of its standard deviations from the tilted mass, and cancelled.  The
wide-cavity tests below cover cavity variances up to 10⁴ and means up to ±1000 against
``stable_reference`` (``scipy.integrate.quad`` on f(x) − f(x₀) written without
cancellation), itself checked against mpmath at 30 digits.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import integrate, optimize, special

from factorflow.factors import links
from factorflow.factors.quadrature import EXP_NEG_EXP, LOGISTIC, tilted_moments

#: scipy.integrate.quad's tolerances for the reference (its error is far below 1e-9)
_QUAD = {"epsabs": 0.0, "epsrel": 1e-13, "limit": 1000}


def reference(m: float, v: float, loglik) -> tuple[float, float, float]:
    """(log ∫ N(x; m, v) e^loglik(x) dx, mean, variance) by ``scipy.integrate.quad``,
    about the tilted mode x₀ (bounded Brent search), split at x₀ ± 1, 3, 10 local scales
    and at the step (x = 0).  loglik concave makes the tilted log density fall at least
    as fast as the cavity's, (x − x₀)²/2v, so x₀ ± 40√v holds all but e^(−800) of it."""
    def f(x):
        return -(x - m) ** 2 / (2 * v) + loglik(x)

    sd = math.sqrt(v)
    lo, hi = m - 40 * sd - 50, m + 40 * sd + 50
    from scipy import optimize
    mode = optimize.minimize_scalar(lambda x: -f(x), bounds=(max(lo, -60.0), min(hi, 60.0)),
                                    method="bounded", options={"xatol": 1e-12}).x
    top = f(mode)
    eps = 1e-4 * min(sd, 1.0)
    curv = -(f(mode + eps) - 2 * top + f(mode - eps)) / eps**2
    scale = 1 / math.sqrt(max(curv, 1 / v))
    lo, hi = mode - 40 * sd, mode + 40 * sd
    cuts = sorted({lo, hi, 0.0, *(mode + s * j * scale for s in (-1, 0, 1)
                                  for j in (1, 3, 10))})
    cuts = [c for c in cuts if lo <= c <= hi]

    def integral(fn):
        return sum(integrate.quad(fn, a, b, **_QUAD)[0] for a, b in itertools.pairwise(cuts))

    def dens(x):
        return math.exp(f(x) - top)

    z = integral(dens)
    m1 = integral(lambda x: (x - mode) * dens(x)) / z
    m2 = integral(lambda x: (x - mode - m1) ** 2 * dens(x)) / z
    return math.log(z) + top - 0.5 * math.log(2 * math.pi * v), mode + m1, m2


def assert_relative(actual, expected, tol: float = 1e-9) -> None:
    """log Z and the mean to ``tol`` relative (absolute below 1, or ``tol`` standard
    deviations for the mean if that is larger), the variance to ``tol`` relative."""
    (lz, mean, var), (rz, rmean, rvar) = (tuple(float(a) for a in t) for t in (actual, expected))
    assert abs(lz - rz) <= tol * max(1.0, abs(rz)), ("log Z", actual, expected)
    assert abs(mean - rmean) <= tol * max(1.0, abs(rmean), math.sqrt(rvar)), (
        "mean", actual, expected)
    assert abs(var / rvar - 1) <= tol, ("variance", actual, expected)


cavity_means = st.floats(-30.0, 30.0)
log10_variances = st.floats(-3.0, math.log10(25.0))
QUICK = settings(max_examples=60, deadline=None, derandomize=True)


@given(cavity_means, log10_variances, st.integers(0, 1000))
@QUICK
def test_poisson_tilted_moments_of_badly_scaled_sites(m, log10_v, count):
    """PoissonFromLogRate's tilted moments (exp(−eˣ) under the cavity shifted by k·v)."""
    v = 10.0**log10_v
    actual = links._poisson_tilted(np.array(float(count)), np.array(m), np.array(v))

    def loglik(x):
        return count * x - math.exp(x) - math.lgamma(count + 1)
    assert_relative(actual, reference(m, v, loglik))


@given(cavity_means, log10_variances, st.sampled_from([1.0, -1.0]))
@QUICK
def test_logistic_tilted_moments_of_badly_scaled_sites(m, log10_v, sign):
    """BernoulliFromLogOdds's tilted moments, σ(±x) under the cavity."""
    v = 10.0**log10_v
    actual = links._logistic_tilted(np.array(m), np.array(v), sign)
    assert_relative(actual, reference(m, v, lambda x: float(special.log_expit(sign * x))))


def test_seed13_poisson_site_and_the_crossover():
    """Oracle seed 13's Poisson site, N(−3.1135, 3.9043) with count 0 (3e-7 off before),
    and exp(−eˣ) and σ either side of the rules' crossovers (cavity variances 1.7, 1.8,
    3.9, 4.1) with the tilted mode on the step or several scales below it."""
    cases = [(EXP_NEG_EXP, -3.1135100048666966, 3.904301812619383)]
    cases += [(h, m, v) for h in (EXP_NEG_EXP, LOGISTIC) for v in (1.7, 1.8, 3.9, 4.1)
              for m in (-20.0, -6.0, -3.0, 0.0, 3.0, 6.0, 20.0)]
    for h, m, v in cases:
        actual = tilted_moments(np.array(m), np.array(v), h)
        assert_relative(actual, reference(m, v, lambda x, h=h: float(h.log_h(np.array(x)))))


def _stable_moments(m: float, v: float, mode: float, ratio, right: float
                    ) -> tuple[float, float, float]:
    """(log ∫ N(x; m, v) h(x) dx − log h(x₀), mean, variance) by ``scipy.integrate.quad``
    over f(x) − f(x₀), f = log N + log h, written as differences: f(x₀) itself may be −1e8
    (a cavity of mean 900 and variance 0.003), whose rounding ``reference`` carries into
    every value of the integrand.  ``ratio(x₀, d)`` = log h(x₀ + d) − log h(x₀); x₀ the
    tilted mode; the integral over [x₀ − 40√v, x₀ + 40 ``right``] (f'' ≤ −1/v everywhere,
    ``right`` a scale that f falls at least as fast as beyond x₀), split at the step and
    at x₀ ± 1, 3, 10, ..., 1000 local scales and ± 1, 3, 10 cavity ones."""
    sd = math.sqrt(v)
    scale = min(right, sd)
    lo, hi = mode - 40 * sd, mode + 40 * right
    cuts = {lo, hi, 0.0, mode}
    cuts |= {mode + s * j * scale for s in (-1, 1) for j in (1, 3, 10, 30, 100, 300, 1000)}
    cuts |= {mode + s * j * sd for s in (-1, 1) for j in (1, 3, 10)}
    cuts = sorted(c for c in cuts if lo <= c <= hi)

    def integral(fn, power):  # ∫ (x − x₀)^power e^(f − f(x₀)) is about s^(power + 1)
        tol = {**_QUAD, "epsabs": 1e-16 * scale ** (power + 1)}
        return sum(integrate.quad(fn, a, b, **tol)[0] for a, b in itertools.pairwise(cuts)
                   if b - a > 1e-12 * scale)  # two cuts may meet (x₀ + 40 s, x₀ + 30√v)

    def dens(x):
        d = x - mode
        return math.exp(-d * (2 * (mode - m) + d) / (2 * v) + ratio(mode, d))

    z = integral(dens, 0)
    m1 = integral(lambda x: (x - mode) * dens(x), 1) / z
    m2 = integral(lambda x: (x - mode - m1) ** 2 * dens(x), 2) / z
    log_z = math.log(z) - (mode - m) ** 2 / (2 * v) - 0.5 * math.log(2 * math.pi * v)
    return log_z, mode + m1, m2


def stable_reference(m: float, v: float, count: int = 0) -> tuple[float, float, float]:
    """(log ∫ N(x; m, v) Poisson(count | eˣ) dx, mean, variance) by ``_stable_moments``:
    x₀ by Brent's root finding on f' in [min(m, 0) − v − 1, m + count·v + 1]; f falls
    beyond x₀ at least as fast as at scale s = 1/√(1/v + e^x₀) (f'' ≤ −1/s² there)."""
    k = float(count)

    def slope(x):
        return -(x - m) / v + k - math.exp(min(x, 700.0))

    mode = optimize.brentq(slope, min(m, 0.0) - v - 1.0, m + k * v + 1.0, xtol=1e-15,
                           rtol=1e-15, maxiter=500)
    e0 = math.exp(mode)

    def ratio(x0, d):  # k d − e^x₀ (eᵈ − 1)
        if d > 1:
            return k * d + (-math.inf if x0 + d > 700 else e0 - math.exp(x0 + d))
        return k * d - e0 * math.expm1(d)

    log_z, mean, var = _stable_moments(m, v, mode, ratio, 1 / math.sqrt(1 / v + e0))
    return log_z + k * mode - e0 - math.lgamma(k + 1), mean, var


def stable_logistic_reference(m: float, v: float, sign: float
                              ) -> tuple[float, float, float]:
    """(log ∫ N(x; m, v) σ(sign·x) dx, mean, variance) by ``_stable_moments``: x₀ by
    Brent's root finding on f' in [m, m + sign·(v + 1)]."""
    def slope(x):
        return -(x - m) / v + sign * float(special.expit(-sign * x))

    a, b = sorted((m, m + sign * (v + 1)))  # f' = ±(1 + 1/v) − σ > 0 at the far end
    mode = optimize.brentq(slope, a, b, xtol=1e-15, rtol=1e-15, maxiter=500)
    top = float(special.log_expit(sign * mode))

    def ratio(x0, d):
        return float(special.log_expit(sign * (x0 + d))) - top

    log_z, mean, var = _stable_moments(m, v, mode, ratio, math.sqrt(v))
    return log_z + top, mean, var


def mpmath_reference(m: float, v: float, count: int = 0, digits: int = 30
                     ) -> tuple[float, float, float]:
    """(log Z, mean, variance) of N(x; m, v) Poisson(count | eˣ) (exp(−eˣ) for count 0) by
    mpmath's tanh-sinh quadrature at ``digits`` digits (no rounding to speak of in f),
    split as ``stable_reference``."""
    mp = pytest.importorskip("mpmath")
    with mp.workdps(digits):
        mm, vv, k = mp.mpf(m), mp.mpf(v), mp.mpf(count)
        lo, hi = mp.mpf(min(m, 0.0) - v - 1.0), mm + k * vv
        for _ in range(4 * digits + 200):  # bisection of f' on a bracket of the mode
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if -(mid - mm) / vv + k - mp.exp(mid) > 0 else (lo, mid)
        mode = (lo + hi) / 2

        def f(x):
            return -(x - mm) ** 2 / (2 * vv) + k * x - mp.exp(x) - mp.loggamma(k + 1)

        top, sd = f(mode), mp.sqrt(vv)
        scale = 1 / mp.sqrt(1 / vv + mp.exp(mode))
        lo, hi = mode - 40 * sd, mode + 40 * scale
        cuts = {lo, hi, mp.mpf(0), mode}
        cuts |= {mode + s * j * scale for s in (-1, 1) for j in (1, 3, 10, 30, 100, 300, 1000)}
        cuts = sorted(c for c in cuts if lo <= c <= hi)

        def dens(x):
            return mp.exp(f(x) - top)

        z = mp.quad(dens, cuts)
        m1 = mp.quad(lambda x: (x - mode) * dens(x), cuts) / z
        m2 = mp.quad(lambda x: (x - mode - m1) ** 2 * dens(x), cuts) / z
        return (float(mp.log(z) + top - mp.log(2 * mp.pi * vv) / 2), float(mode + m1),
                float(m2))


#: exp(−eˣ) where the rules were 1e-8 to 2e-7 off (cavity mean, cavity variance): the
#: mean 29 and 31 standard deviations above the step at variance 1000 (5e-8 and 1.5e-7 in
#: the variance), 20 at 100 (9e-10), and a mean of 926 under variance 0.0027 (Hermite's
#: f(c + d) − f(c) rounded: 1.4e-8)
HARD = [(917.061, 1000.0), (980.306, 1000.0), (200.0, 100.0), (926.3634334794699,
                                                                0.0027097457737584032)]


@pytest.mark.parametrize(("m", "v"), [*HARD, (1500.0, 1e4), (-1000.0, 1e4), (3.0, 5.0)])
def test_the_stable_reference_against_mpmath(m, v):
    """The two references agree to 1e-12 (``scipy.integrate.quad`` in doubles, mpmath's
    tanh-sinh at 30 digits), where the rules' errors were."""
    assert_relative(stable_reference(m, v), mpmath_reference(m, v), tol=1e-12)


@given(st.floats(-1000.0, 1000.0), st.floats(-3.0, 4.0))
@example(*HARD[0][:1], math.log10(HARD[0][1]))
@example(HARD[1][0], 3.0)
@example(HARD[3][0], math.log10(HARD[3][1]))
@QUICK
def test_exp_neg_exp_from_narrow_to_wide_cavities(m, log10_v):
    """exp(−eˣ)'s tilted moments to 1e-9 relative over cavity means in [−1000, 1000] and
    variances from 10⁻³ to 10⁴."""
    v = 10.0**log10_v
    actual = tilted_moments(np.array(m), np.array(v), EXP_NEG_EXP)
    assert_relative(actual, stable_reference(m, v))


@given(st.floats(0.0, 60.0), st.floats(2.0, 4.0))
@example(29.0, 3.0)
@example(31.0, 3.0)
@example(20.0, 2.0)
@QUICK
def test_exp_neg_exp_pressed_against_the_step(z, log10_v):
    """The case that was open: cavity variance 100 to 10⁴ with its mean z = 0 to 60
    standard deviations above the step (the tilted mass is a log-gamma-like bump at the
    step, 20-60 standard deviations from the cavity's mean): 1e-9 relative."""
    v = 10.0**log10_v
    m = z * math.sqrt(v)
    actual = tilted_moments(np.array(m), np.array(v), EXP_NEG_EXP)
    assert_relative(actual, stable_reference(m, v))


#: (cavity mean, cavity variance, count) where PoissonFromLogRate's log Z was 1.2e-8 and
#: 6.8e-8 off (the shifted cavity's log Z plus k m + k² v/2, both ~k² v/2, cancelling)
POISSON_HARD = [(0.0, 1e4, 105), (-5.0, 1e4, 1000)]


@pytest.mark.parametrize(("m", "v", "count"), [*POISSON_HARD, (50.0, 300.0, 1000),
                                                (-50.0, 100.0, 1)])
def test_poisson_sites_and_the_stable_reference_against_mpmath(m, v, count):
    """PoissonFromLogRate's tilted moments and ``stable_reference`` against mpmath (30
    digits) to 1e-12 where the counts shift the cavity by up to 10⁷ (worst over counts
    1-1000, variances 10²-10⁴, means ±50: 1.8e-13 and 1.0e-13 in log Z)."""
    want = mpmath_reference(m, v, count)
    actual = links._poisson_tilted(np.array(float(count)), np.array(m), np.array(v))
    assert_relative(actual, want, tol=1e-12)
    assert_relative(stable_reference(m, v, count), want, tol=1e-12)


@given(st.floats(-1000.0, 1000.0), st.floats(-3.0, 4.0), st.integers(0, 1000))
@example(0.0, 4.0, 105)
@example(-5.0, 4.0, 1000)
@QUICK
def test_poisson_tilted_moments_under_wide_cavities(m, log10_v, count):
    """PoissonFromLogRate's tilted moments with counts up to 1000 (the cavity shifted by
    count·v, up to 10⁷) under cavities of variance up to 10⁴: 1e-9 relative.  Found by
    hypothesis: N(0, 10⁴) with count 105, log Z 1.2e-8 off when it was the shifted
    cavity's (−5.5e7) plus k m + k² v/2 (5.5e7); now 4e-14."""
    v = 10.0**log10_v
    actual = links._poisson_tilted(np.array(float(count)), np.array(m), np.array(v))
    assert_relative(actual, stable_reference(m, v, count))


def test_the_traced_rule_selects_the_same_moments():
    """Under JAX (every element through both rules, ``np.where`` choosing): the same
    moments as NumPy's to 1e-12 for cavities narrow and wide, their means from 1000 below
    to 60 standard deviations above the step (the overshoot integrals both from the Mills
    ratio and by Laguerre), with nothing undefined leaking from the rule not chosen."""
    jax = pytest.importorskip("jax")
    from factorflow.runtime.backends.jax_namespace import namespace
    v = np.repeat([1e-3, 0.5, 3.0, 100.0, 1e3, 1e4], 8)
    z = np.tile([-1000.0, -30.0, -2.0, 0.0, 1.0, 2.9, 20.0, 60.0], 6)
    m = np.maximum(z * np.sqrt(v), -1000.0)
    want = tilted_moments(m, v, EXP_NEG_EXP)
    q = namespace()["factorflow.factors.quadrature"]
    with jax.enable_x64(True):
        got = q.tilted_moments(m, v, q.EXP_NEG_EXP)
    for a, b in zip(want, got, strict=True):
        a, b = np.asarray(a), np.asarray(b, float)
        assert np.all(np.isfinite(b)), b
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)


@given(st.floats(-1000.0, 1000.0), st.floats(-3.0, 4.0), st.sampled_from([1.0, -1.0]))
@QUICK
def test_logistic_from_narrow_to_wide_cavities(m, log10_v, sign):
    """σ(±x)'s tilted moments to 1e-9 relative over cavity means in [−1000, 1000] and
    variances from 10⁻³ to 10⁴ (the Laguerre split's moments about the step where the
    cavity's mean is on its low side, as for exp(−eˣ))."""
    v = 10.0**log10_v
    actual = links._logistic_tilted(np.array(m), np.array(v), sign)
    assert_relative(actual, stable_logistic_reference(m, v, sign))
