"""The non-conjugate links (factors.links, factors.quadrature) against numbers computed
without them: adaptive quadrature (scipy.integrate.quad), the closed-form Jaakkola–Jordan
bound and its fixed point, the probit augmentation's fixed point, and the exact Gaussian
ELBO of a Poisson-log observation maximised by scipy.optimize.

EP with one non-Gaussian site is exact in moments and evidence, so a single Gaussian
variable with one logistic, probit or Poisson-log observation must match the tilted
distribution's quadrature to 1e-6."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import optimize, special

import factorflow as ff
from factorflow.distributions import Bernoulli, Gaussian
from factorflow.factors import links
from factorflow.factors.quadrature import EXP_NEG_EXP, LOGISTIC, tilted_moments
from tests.conftest import assert_close
from tests.factors.checks import SETTINGS, gaussian_expect, quad

prior_means = st.floats(-3.0, 3.0)
prior_sds = st.floats(0.3, 3.0)
LOGLIK = {
    "logistic": lambda y: (lambda x: special.log_expit(x if y else -x)),
    "probit": lambda y: (lambda x: special.log_ndtr(x if y else -x)),
    "exp": lambda y: (lambda x: y * x - math.exp(x) - math.lgamma(y + 1)),
}


def tilted_by_quad(m: float, v: float, loglik) -> tuple[float, float, float]:
    """(log ∫ N(x; m, v) e^loglik(x) dx, mean, variance) by adaptive quadrature around the
    tilted mode (found by scipy), scaled by the mode's density so that a tiny Z keeps its
    relative accuracy; integrated out to where the log density has fallen by 60."""
    def f(x):
        return -(x - m) ** 2 / (2 * v) + loglik(x)

    mode = optimize.minimize_scalar(lambda x: -f(x), bracket=(m - 1.0, m + 1.0)).x
    top = f(mode)

    def edge(sign):
        d = 0.01 * math.sqrt(v) + 1e-3
        while f(mode + sign * d) > top - 60:
            d *= 1.5
        return mode + sign * d

    lo, hi = edge(-1.0), edge(1.0)

    def dens(x):
        return math.exp(f(x) - top)

    z = quad(dens, lo, hi, [0.0, mode])
    m1 = quad(lambda x: (x - mode) * dens(x), lo, hi, [0.0, mode]) / z
    m2 = quad(lambda x: (x - mode - m1) ** 2 * dens(x), lo, hi, [0.0, mode]) / z
    return math.log(z) + top - 0.5 * math.log(2 * math.pi * v), mode + m1, m2


def assert_moments(actual, expected, tol: float) -> None:
    """log Z to ``tol``, the mean to ``tol`` standard deviations, the variance relatively."""
    (lz, mean, var), (rz, rmean, rvar) = actual, expected
    assert abs(lz - rz) < tol and abs(mean - rmean) < tol * math.sqrt(rvar) and \
        abs(var / rvar - 1) < tol, (actual, expected)


# ----- the quadrature ---------------------------------------------------------------------
@given(st.floats(-30.0, 30.0), st.floats(-3.0, 3.0), st.sampled_from(["logistic", "exp"]))
@SETTINGS
def test_tilted_moments_match_adaptive_quadrature(m, log10_v, which):
    """Gauss–Hermite at the mode, or the step + Gauss–Laguerre split where the tilted
    distribution is wide: 1e-7 from cavity variance 10⁻³ to 10³."""
    h = LOGISTIC if which == "logistic" else EXP_NEG_EXP
    v = 10.0**log10_v
    actual = [float(a) for a in tilted_moments(np.array(m), np.array(v), h)]
    assert_moments(actual, tilted_by_quad(m, v, lambda x: float(h.log_h(np.array(x)))), 1e-7)


def test_wide_cavities_that_defeat_hermite_nodes():
    """σ(x) under N(6, 200) and N(−40, 50), exp(−eˣ) under N(0, 16): a step of width 1
    inside a wide Gaussian, where 64 Hermite nodes alone are off by 1e-2 to 1e-4."""
    for h, m, v in [(LOGISTIC, 6.0, 200.0), (LOGISTIC, -40.0, 50.0), (EXP_NEG_EXP, 0.0, 16.0),
                    (EXP_NEG_EXP, -40.0, 1e4)]:
        actual = [float(a) for a in tilted_moments(np.array(m), np.array(v), h)]
        assert_moments(actual, tilted_by_quad(m, v, lambda x, h=h: float(h.log_h(np.array(x)))),
                       1e-9)


def test_tilted_moments_are_vectorised():
    m, v = np.array([[-3.0, 0.0, 40.0]]), np.array([[0.01], [50.0]])
    log_z, mean, var = tilted_moments(m, v, LOGISTIC)
    assert log_z.shape == mean.shape == var.shape == (2, 3)
    for i, j in np.ndindex(2, 3):
        one = tilted_moments(m[0, j], v[i, 0], LOGISTIC)
        assert_close([log_z[i, j], mean[i, j], var[i, j]], [float(a) for a in one],
                     rtol=1e-12)


# ----- EP on one observation: exact -------------------------------------------------------
def _one_observation(link: str, algorithm: str):
    """x ~ N(mu, 1/prec); y ~ Bernoulli(ff.logistic(x)) / Bernoulli(ff.probit(x)) /
    Poisson(ff.exp(x)), compiled once (all numbers are ff.Data)."""
    with ff.Model(f"one_{link}") as model:
        x = ff.Gaussian("x", ff.Data("mu", 0.0), precision=ff.Data("prec", 1.0))
        obs = ff.Data("obs", 1)
        if link == "exp":
            ff.Poisson("y", ff.exp(x), observed=obs)
        else:
            ff.Bernoulli("y", getattr(ff, link)(x), observed=obs)
    return model.compile(algorithm)


_COMPILED: dict[tuple[str, str], object] = {}


def compiled(link: str, algorithm: str):
    if (link, algorithm) not in _COMPILED:
        _COMPILED[(link, algorithm)] = _one_observation(link, algorithm)
    return _COMPILED[(link, algorithm)]


@given(prior_means, prior_sds, st.sampled_from(["logistic", "probit", "exp"]),
       st.integers(0, 20))
@SETTINGS
def test_ep_one_observation_is_exact(mu, sd, link, count):
    y = count if link == "exp" else count % 2
    result = compiled(link, "ep").run(data={"mu": mu, "prec": sd**-2, "obs": y})
    post = result["x"]
    actual = (result.log_evidence, float(post.mean), float(post.variance))
    assert_moments(actual, tilted_by_quad(mu, sd * sd, LOGLIK[link](y)), 1e-6)


def _mixture_tilted(m: float, v: float, q: float, link) -> tuple[float, float, float]:
    """(Z, mean, variance) of N(x; m, v) (q link(x) + (1 − q) link(−x)) by quadrature."""
    def lik(x):
        return q * link(x) + (1 - q) * link(-x)

    z = gaussian_expect(lik, m, v, [0.0])
    mean = gaussian_expect(lambda x: x * lik(x), m, v, [0.0]) / z
    return z, mean, gaussian_expect(lambda x: (x - mean) ** 2 * lik(x), m, v, [0.0]) / z


def test_ep_message_from_a_random_sample_is_the_mixture_projection():
    """A Bernoulli message to the sample: the tilted distribution is
    N(x) (q σ(x) + (1 − q) σ(−x)) (likewise Φ), projected by its mean and variance."""
    m, v, q = np.array([0.7, -2.0]), np.array([1.5, 30.0]), np.array([0.3, 0.9])
    cavity, sample = Gaussian(m, v), Bernoulli(q)
    for to_x, to_sample, link in [
            (links._logit_logodds_ep, links._logit_sample_ep, special.expit),
            (links._probit_x_ep, links._probit_sample_ep, special.ndtr)]:
        post = to_x(sample, cavity) * cavity
        for i in range(2):
            _, mean, var = _mixture_tilted(m[i], v[i], q[i], link)
            assert_close([post.mean[i], post.variance[i]], [mean, var], rtol=1e-7)
        expected = [gaussian_expect(link, m[i], v[i], [0.0]) for i in range(2)]
        assert_close(to_sample(cavity).p, expected, rtol=1e-8)


# ----- VMP ----------------------------------------------------------------------------------
def _jj_fixed_point(mu, v0, y, sweeps=2000):
    """Jaakkola & Jordan's updates for one logistic observation, written out:
    ξ² = E[x²]; precision 1/v0 + 2λ(ξ); mean (mu/v0 + y − ½)/precision."""
    m, v = mu, v0
    for _ in range(sweeps):
        xi = math.sqrt(m * m + v)
        lam = math.tanh(xi / 2) / (4 * xi) if xi > 1e-8 else 0.125
        prec = 1 / v0 + 2 * lam
        m, v = (mu / v0 + y - 0.5) / prec, 1 / prec
    return m, v


def _probit_fixed_point(mu, v0, y, sweeps=2000):
    """The probit augmentation's updates: q(z) ∝ N(z; m, 1)[s z > 0], then
    q(x) = N((mu/v0 + E[z]) / (1/v0 + 1), 1/(1/v0 + 1))."""
    s = 1.0 if y else -1.0
    m, v = mu, 1 / (1 / v0 + 1)
    for _ in range(sweeps):
        ez = m + s * math.exp(-0.5 * m * m - 0.5 * math.log(2 * math.pi)
                              - special.log_ndtr(s * m))
        m = (mu / v0 + ez) * v
    return m, v


def _elbo(mu, v0, m, v, expected_log_lik):
    """E_q[log N(x; mu, v0)] + H[q] + E_q[log f], q = N(m, v)."""
    return (-0.5 * math.log(2 * math.pi * v0) - ((m - mu) ** 2 + v) / (2 * v0)
            + 0.5 * math.log(2 * math.pi * math.e * v) + expected_log_lik(m, v))


@given(prior_means, prior_sds, st.sampled_from(["logistic", "probit"]), st.booleans())
@SETTINGS
def test_vmp_bounds_rise_to_their_closed_form_fixed_points(mu, sd, link, y):
    """The Jaakkola–Jordan and probit-augmentation runs: the bound never falls, stays
    below log Z (quadrature) and ends at the fixed point of the written-out updates, with
    the bound in closed form there."""
    v0 = sd * sd
    result = compiled(link, "vmp").run(data={"mu": mu, "prec": 1 / v0, "obs": int(y)},
                                       iterations=500)
    trace = np.asarray(result.trace)
    assert np.all(np.diff(trace) >= -1e-12 * (1 + np.abs(trace[1:])))
    log_z = tilted_by_quad(mu, v0, LOGLIK[link](int(y)))[0]
    assert result.log_evidence <= log_z + 1e-12
    m, v = (_jj_fixed_point if link == "logistic" else _probit_fixed_point)(mu, v0, y)
    assert_close([result["x"].mean, result["x"].variance], [m, v], rtol=1e-8, atol=1e-10)
    s = 1.0 if y else -1.0
    if link == "logistic":  # (y − ½) m + log σ(ξ) − ξ/2, ξ = √(m² + v)
        def bound(m, v):
            xi = math.sqrt(m * m + v)
            return (y - 0.5) * m + special.log_expit(xi) - xi / 2
    else:  # log Φ(s m) − v/2
        def bound(m, v):
            return special.log_ndtr(s * m) - v / 2
    assert_close(result.log_evidence, _elbo(mu, v0, m, v, bound), rtol=1e-9, atol=1e-9)


@given(st.floats(-4.0, 4.0), st.floats(0.0, 4.0), st.booleans())
@SETTINGS
def test_jaakkola_jordan_term_is_the_bound_at_its_optimal_xi(m, v, y):
    """The VMP term equals max over ξ of E_q[log σ(ξ) + (s x − ξ)/2 − λ(ξ)(x² − ξ²)] (found
    numerically), lies below E_q[log σ(s x)] (quadrature), and is tight for a known x."""
    s = 1.0 if y else -1.0
    term = float(links._logit_average_log_factor(np.array(float(y)), Gaussian(m, v)
                                                  if v > 0 else np.array(m)))

    def jj(xi):
        lam = math.tanh(xi / 2) / (4 * xi)
        return special.log_expit(xi) + (s * m - xi) / 2 - lam * (m * m + v - xi * xi)

    best = -optimize.minimize_scalar(lambda xi: -jj(xi), bounds=(1e-6, 50.0),
                                     method="bounded", options={"xatol": 1e-10}).fun
    assert abs(term - best) < 1e-9
    if v > 0:
        exact = gaussian_expect(lambda x: special.log_expit(s * x), m, v, [0.0])
        assert term <= exact + 1e-12
    else:
        assert_close(term, special.log_expit(s * m), rtol=1e-14)


@given(prior_means, st.floats(0.3, 1.0), st.integers(0, 20))
@SETTINGS
def test_ncvmp_poisson_reaches_the_best_gaussian_elbo(mu, sd, count):
    """Non-conjugate VMP (Knowles & Minka 2011) for Poisson(e^x): its fixed point maximises
    the exact ELBO over Gaussians q = N(m, v) (E[eˣ] = e^(m + v/2) in closed form;
    maximised here over v by scipy, with the optimal m for each v by Brent's method), which
    lies below log Z.  (A
    fixed-point iteration: with priors wider than these it may oscillate, README.)"""
    v0 = sd * sd
    result = compiled("exp", "vmp").run(data={"mu": mu, "prec": 1 / v0, "obs": count},
                                        iterations=500)
    assert result.converged

    def expected(m, v):
        return count * m - math.exp(m + v / 2) - math.lgamma(count + 1)

    def best_mean(v):  # the ELBO's stationary m for this v: a decreasing equation in m
        def g(m):
            return -(m - mu) / v0 + count - math.exp(m + v / 2)
        return optimize.brentq(g, mu - v0 * math.exp(mu + v / 2), mu + v0 * count,
                               xtol=1e-14, rtol=1e-15)

    profile = optimize.minimize_scalar(
        lambda u: -_elbo(mu, v0, best_mean(math.exp(u)), math.exp(u), expected),
        bounds=(math.log(v0) - 12, math.log(v0)), method="bounded",
        options={"xatol": 1e-10})
    v = math.exp(profile.x)
    m = best_mean(v)
    assert abs(result.log_evidence - _elbo(mu, v0, m, v, expected)) < 1e-9
    assert_close([result["x"].mean, result["x"].variance], [m, v], rtol=1e-6, atol=1e-9)
    assert result.log_evidence <= tilted_by_quad(mu, v0, LOGLIK["exp"](count))[0] + 1e-12


# ----- generated code, plates -----------------------------------------------------------
def test_generated_code_names_each_method():
    expected = {("logistic", "ep"): "moment matching", ("logistic", "vmp"): "Jaakkola-Jordan",
                ("probit", "ep"): "closed form", ("probit", "vmp"): "probit augmentation",
                ("exp", "ep"): "Gauss-Hermite", ("exp", "vmp"): "Knowles & Minka"}
    for (link, algorithm), words in expected.items():
        assert f"# {algorithm.upper()}: " in compiled(link, algorithm).source
        assert words in compiled(link, algorithm).source


def test_a_plate_of_observations_is_one_call_per_sweep():
    """Twelve observations of one x: the EP message to x is one vectorised operator call
    over the plate (the source has no loop over it), equal per element to the scalar op."""
    y = np.arange(12) % 3 == 0
    with ff.Model() as model:
        x = ff.Gaussian("x", 0.5, variance=2.0)
        with ff.Plate(ff.Range("n", 12)):
            ff.Bernoulli("y", ff.logistic(x), observed=y)
    source = model.compile("ep").source
    assert source.count("BernoulliFromLogOdds_logodds_average_conditional(") >= 1
    assert "for n in" not in source and "for i in" not in source
    cavity = Gaussian(np.linspace(-2, 2, 12), np.linspace(0.5, 8, 12))
    batched = links._logit_logodds_ep(y, cavity)
    for i in range(12):
        one = links._logit_logodds_ep(np.array(y[i]), Gaussian(cavity.mean[i],
                                                               cavity.variance[i]))
        assert_close(np.array(batched.eta)[:, i], np.array(one.eta), rtol=1e-12)


@pytest.mark.parametrize("algorithm", ["ep", "vmp"])
def test_known_real_argument(algorithm):
    """A constant log-odds or log-rate: the sample's message is the likelihood itself."""
    with ff.Model() as model:
        ff.Bernoulli("y", ff.logistic(np.array(0.8)))
    assert_close(model.infer(algorithm)["y"].p, special.expit(0.8), rtol=1e-14)
