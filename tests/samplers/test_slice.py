"""The slice-sampling fallback for non-conjugate scalar variables, against quadrature."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, stats

import factorflow as ff
from factorflow.samplers.slice import slice_step
from tests.samplers.checks import assert_mean_within


def quadrature_mean(density, lo, hi):
    z = integrate.quad(density, lo, hi, limit=400)[0]
    return integrate.quad(lambda u: u * density(u), lo, hi, limit=400)[0] / z


@ff.factor(sample="real", mean="real")
def quartic_slice(sample, mean):
    return -((sample - mean) ** 4)


def test_real_variable_with_a_non_conjugate_likelihood():
    with ff.Model() as model:
        m = ff.Gaussian("m", 0.0, variance=1.0)
        with ff.Plate(ff.Range("n", 2)):
            quartic_slice("y", mean=m, observed=[1.0, 2.0])
    compiled = model.compile("gibbs")
    assert compiled.samplers["m"].sampler == "slice sampling (no conjugate conditional)"
    exact = quadrature_mean(lambda u: np.exp(-u * u / 2 - (1 - u) ** 4 - (2 - u) ** 4), -10, 10)
    result = compiled.run(draws=600, chains=4, seed=0)
    assert_mean_within(result.samples("m"), exact)


def test_positive_variable_without_a_useful_expansion():
    """A half-Cauchy Poisson rate: its expansion leaves the rate non-conjugate too, so the
    plan keeps the model as written (fewer variables) and slice-samples the rate."""
    y = [2, 5, 3]
    with ff.Model() as model:
        lam = ff.HalfCauchy("lam", 1.0)
        with ff.Plate(ff.Range("n", len(y))):
            ff.Poisson("y", lam, observed=y)
    compiled = model.compile("gibbs")
    assert [c.variable for c in compiled.samplers] == ["lam"]
    exact = quadrature_mean(lambda u: u**10 * np.exp(-3 * u) / (1 + u * u), 0, 60)
    assert abs(exact - quadrature_mean(lambda u: stats.halfcauchy.pdf(u) * np.prod(
        stats.poisson.pmf(y, u)), 0, 60)) < 1e-8
    result = compiled.run(draws=600, chains=4, seed=1)
    assert_mean_within(result.samples("lam"), exact)


@pytest.mark.parametrize("domain,law", [
    ("real", stats.norm(1.0, 2.0)), ("positive", stats.gamma(3.0, scale=0.5)),
    ("unit", stats.beta(2.0, 5.0))])
def test_slice_step_leaves_a_law_invariant(domain, law):
    """Many independent elements, each stepped from a draw of ``law``: after 5 steps they
    are still distributed as ``law`` (mean and variance within sampling error)."""
    rng = np.random.default_rng(0)
    x = law.rvs(size=(4, 5000), random_state=rng)
    for _ in range(5):
        x = slice_step(law.logpdf, x, domain, rng)
    n = x.size
    assert abs(x.mean() - law.mean()) < 4 * law.std() / np.sqrt(n)
    assert abs(x.var() - law.var()) < 4 * law.var() * np.sqrt(2 / n) * 2
