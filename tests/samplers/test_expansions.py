"""Scale-mixture expansions found by exploring rewrites, checked against quadrature."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, stats

import factorflow as ff
from factorflow.samplers.expansions import explore_statements, rules_behind, show
from tests.samplers.checks import assert_mean_within


def posterior_mean(density, lo, hi, points=()):
    """E[u] under the unnormalised density on [lo, hi], by quadrature."""
    z = integrate.quad(density, lo, hi, points=points, limit=400)[0]
    return integrate.quad(lambda u: u * density(u), lo, hi, points=points, limit=400)[0] / z


def student_t_location(y):
    with ff.Model() as model:
        mu = ff.Gaussian("mu", 0.0, variance=100.0)
        with ff.Plate(ff.Range("n", len(y))):
            ff.StudentT("y", mu, 3.0, precision=2.0, observed=y)
    return model


@pytest.mark.parametrize("seed", [0, 1])
def test_student_t_likelihood_location_against_quadrature(seed):
    y = np.array([1.0, 2.0, 3.0, 10.0])
    exact = posterior_mean(lambda u: stats.norm.pdf(u, 0, 10) * np.prod(
        stats.t.pdf(y, 3, u, 2.0**-0.5)), -40, 40, points=[2.0])
    model = student_t_location(y)
    result = model.infer("gibbs", draws=800, chains=4, seed=seed)
    assert_mean_within(result.samples("mu"), exact)
    assert "y__precision" not in result  # the auxiliary is sampled, not reported


def test_student_t_expansion_is_explained():
    samplers = student_t_location(np.array([0.5, 1.5])).compile("gibbs").samplers
    assert samplers["mu"].sampler == "Gaussian (conjugate)"
    aux = samplers["y__precision"]
    assert aux.sampler == "Gamma (conjugate)"
    assert "rules: student_t_gamma_precision" in aux.rewrites[0]
    assert "mixture[precision](gamma(nu*0.5, nu*0.5)" in aux.rewrites[0]


@pytest.mark.parametrize("seed", [0, 1])
def test_laplace_prior_location_against_quadrature(seed):
    y = np.array([1.0, 2.0, 1.5])
    with ff.Model() as model:
        mu = ff.Laplace("mu", 0.0, 0.5)
        with ff.Plate(ff.Range("n", len(y))):
            ff.Gaussian("y", mu, precision=1.0, observed=y)
    exact = posterior_mean(lambda u: stats.laplace.pdf(u, 0, 0.5) * np.prod(
        stats.norm.pdf(y, u, 1.0)), -20, 20, points=[0.0])
    compiled = model.compile("gibbs")
    chain = compiled.samplers["mu__variance"]
    assert chain.sampler == "GIG (conjugate)"
    assert ("rules: laplace_exponential_variance, exponential_gamma, variance_precision"
            in chain.rewrites[0])
    result = compiled.run(draws=800, chains=4, seed=seed)
    assert_mean_within(result.samples("mu"), exact)


@pytest.mark.parametrize("y", [0.3, 2.5])
def test_horseshoe_normal_mean_against_quadrature(y):
    """beta ~ N(0, lam²), lam ~ C+(0, 1), y ~ N(beta, 1): E[beta | y] by quadrature over
    lam (beta integrates out: y ~ N(0, 1 + lam²), E[beta | lam, y] = y lam²/(1+lam²))."""
    with ff.Model() as model:
        lam = ff.HalfCauchy("lam", 1.0)
        beta = ff.Gaussian("beta", 0.0, scale=lam)
        ff.Gaussian("y", beta, precision=1.0, observed=y)

    def weight(s):
        return stats.halfcauchy.pdf(s) * stats.norm.pdf(y, 0, np.sqrt(1 + s * s))

    z = integrate.quad(weight, 0, np.inf, limit=400)[0]
    exact = integrate.quad(lambda s: weight(s) * y * s * s / (1 + s * s), 0, np.inf,
                           limit=400)[0] / z
    compiled = model.compile("gibbs")
    assert compiled.samplers["lam"].sampler == "RootInverseGamma (conjugate)"
    assert "half_cauchy_inverse_gamma" in compiled.samplers["lam"].rewrites[0]
    result = compiled.run(draws=1000, chains=4, seed=0)
    assert_mean_within(result.samples("beta"), exact)


def test_horseshoe_shrinks_small_means_and_keeps_large_ones():
    y = np.array([0.1, -0.3, 6.0, 0.2, 4.0, 0.0])
    with ff.Model() as model:
        tau = ff.HalfCauchy("tau", 1.0)
        with ff.Plate(ff.Range("j", len(y))):
            lam = ff.HalfCauchy("lam", tau)
            beta = ff.Gaussian("beta", 0.0, scale=lam)
            ff.Gaussian("y", beta, precision=1.0, observed=y)
    result = model.infer("gibbs", draws=600, chains=2, seed=0)
    median = np.median(result.samples("beta").reshape(-1, len(y)), axis=0)
    assert np.all(np.abs(median[[0, 1, 3, 5]]) < 0.1)
    assert np.all(np.abs(median[[2, 4]] - y[[2, 4]]) < 0.5 * np.abs(y[[2, 4]]))


def test_exploration_reads_every_form_and_names_the_rules():
    with ff.Model() as model:
        ff.Laplace("mu", 0.0, 1.0)
    forms = explore_statements(model.statements)[0]
    shown = [show(f) for f in forms]
    assert shown[0] == "laplace(mean, scale)"
    assert len(forms) == 5  # exponential/gamma x variance/precision, and the original
    assert "mixture[variance](exponential(1/((scale)**2*2.0)), gaussian_variance(mean, " \
           "aux[variance]))" in shown
    assert rules_behind(forms[1], forms[0])[0] == "laplace_exponential_variance"


def test_message_passing_refuses_scale_factors_and_says_to_sample():
    model = student_t_location(np.array([0.5, 1.5]))
    with pytest.raises(ff.ModelError, match="gibbs"):
        model.infer("vmp")


def test_expandable_factors_are_the_ones_the_rules_rewrite():
    from factorflow.samplers.expansions import _ELIMINATES, ENCODE, FUSED_LOGISTIC
    from factorflow.samplers.plan import EXPANDABLE

    rewritten = set(_ELIMINATES.values())
    assert EXPANDABLE == {f for f, (law, _) in ENCODE.items() if law in rewritten} | set(
        FUSED_LOGISTIC)
