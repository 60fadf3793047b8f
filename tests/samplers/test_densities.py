"""The term log densities of the built-in factors equal their numeric ones."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special, stats

from factorflow.factors.registry import FACTORS
from factorflow.rewrite.terms import data
from factorflow.samplers.densities import EXPRESSION, LOG_DENSITY
from factorflow.samplers.numpy_terms import compile_term
from tests.conftest import assert_close

RNG = np.random.default_rng(0)
N = 7
#: random argument values of each factor (one-hot categories, simplex vectors)
VALUES = {
    "Gaussian": dict(sample=RNG.normal(size=N), mean=RNG.normal(size=N),
                     precision=RNG.gamma(2.0, size=N)),
    "Gamma": dict(sample=RNG.gamma(2.0, size=N), shape=RNG.gamma(2.0, size=N) + 0.5,
                  rate=RNG.gamma(2.0, size=N)),
    "Beta": dict(sample=RNG.uniform(0.05, 0.95, N), alpha=RNG.gamma(2.0, size=N),
                 beta=RNG.gamma(2.0, size=N)),
    "Bernoulli": dict(sample=RNG.integers(0, 2, N).astype(float), p=RNG.uniform(0.1, 0.9, N)),
    "Binomial": dict(sample=np.array([0, 1, 2, 3, 4, 5, 6.0]), trials=np.full(N, 9.0),
                     p=RNG.uniform(0.1, 0.9, N)),
    "Poisson": dict(sample=RNG.poisson(3.0, N).astype(float), rate=RNG.gamma(2.0, size=N)),
    "BernoulliFromLogOdds": dict(sample=RNG.integers(0, 2, N).astype(float),
                                 logodds=3 * RNG.normal(size=N)),
    "PoissonFromLogRate": dict(sample=RNG.poisson(3.0, N).astype(float),
                               lograte=RNG.normal(size=N)),
    "Discrete": dict(sample=RNG.integers(0, 3, N), probs=RNG.dirichlet(np.ones(3), N)),
    "Dirichlet": dict(sample=RNG.dirichlet(np.ones(3), N), alpha=RNG.gamma(2.0, size=(N, 3))),
    "StudentT": dict(sample=RNG.normal(size=N), mean=RNG.normal(size=N),
                     nu=RNG.gamma(2.0, size=N) + 0.5, precision=RNG.gamma(2.0, size=N)),
    "Laplace": dict(sample=RNG.normal(size=N), mean=RNG.normal(size=N),
                    scale=RNG.gamma(2.0, size=N)),
    "HalfCauchy": dict(sample=RNG.gamma(2.0, size=N), scale=RNG.gamma(2.0, size=N)),
    "GaussianScale": dict(sample=RNG.normal(size=N), mean=RNG.normal(size=N),
                          scale=RNG.gamma(2.0, size=N)),
    "InverseGamma": dict(sample=RNG.gamma(2.0, size=N), shape=RNG.gamma(2.0, size=N),
                         scale=RNG.gamma(2.0, size=N)),
    "RootInverseGamma": dict(sample=RNG.gamma(2.0, size=N), shape=RNG.gamma(2.0, size=N),
                             scale=RNG.gamma(2.0, size=N)),
    "NegativeBinomial": dict(sample=RNG.poisson(3.0, N).astype(float),
                             dispersion=RNG.gamma(2.0, size=N), p=RNG.uniform(0.1, 0.9, N)),
    "PolyaGamma": dict(sample=RNG.gamma(2.0, size=N) / 4, shape=RNG.gamma(2.0, size=N) + 0.5),
    "PolyaGammaBinomial": dict(sample=np.array([0, 1, 2, 3, 4, 5, 6.0]), trials=np.full(N, 9.0),
                               logit=RNG.normal(size=N), omega=RNG.gamma(2.0, size=N)),
    "PolyaGammaNegativeBinomial": dict(sample=RNG.poisson(3.0, N).astype(float),
                                       dispersion=RNG.gamma(2.0, size=N),
                                       logit=RNG.normal(size=N), omega=RNG.gamma(2.0, size=N)),
}


@pytest.mark.parametrize("factor", sorted(LOG_DENSITY))
def test_term_log_density_is_the_factor_log_density(factor):
    values = VALUES[factor]
    term = LOG_DENSITY[factor](**{k: data(k) for k in values})
    env = {k: (np.eye(3)[v] if factor == "Discrete" and k == "sample" else v)
           for k, v in values.items()}
    fn, _ = compile_term(term)
    if factor == "Discrete":
        expected = np.log(values["probs"][np.arange(N), values["sample"]])
    else:
        expected = FACTORS[factor].log_density(**values)
    assert_close(fn(env), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("factor,expected", [
    ("Plus", 5.0), ("Minus", -1.0), ("ScaleBy", 6.0), ("Product", 6.0)])
def test_expressions(factor, expected):
    a, b = FACTORS[factor].arg_names[1:]
    fn, _ = compile_term(EXPRESSION[factor](**{a: data(a), b: data(b)}))
    assert fn({a: 2.0, b: 3.0}) == expected


@pytest.mark.parametrize("factor,scipy_logpdf", [
    ("StudentT", lambda v: stats.t.logpdf(v["sample"], v["nu"], v["mean"],
                                          v["precision"] ** -0.5)),
    ("Laplace", lambda v: stats.laplace.logpdf(v["sample"], v["mean"], v["scale"])),
    ("HalfCauchy", lambda v: stats.halfcauchy.logpdf(v["sample"], 0, v["scale"])),
    ("GaussianScale", lambda v: stats.norm.logpdf(v["sample"], v["mean"], v["scale"])),
    ("InverseGamma", lambda v: stats.invgamma.logpdf(v["sample"], v["shape"], 0, v["scale"])),
    ("RootInverseGamma", lambda v: stats.invgamma.logpdf(v["sample"] ** 2, v["shape"], 0,
                                                         v["scale"]) + np.log(2 * v["sample"])),
    ("NegativeBinomial", lambda v: stats.nbinom.logpmf(v["sample"], v["dispersion"],
                                                       1 - v["p"])),
])
def test_scale_factors_are_scipy_densities(factor, scipy_logpdf):
    assert_close(FACTORS[factor].log_density(**VALUES[factor]), scipy_logpdf(VALUES[factor]),
                 rtol=1e-10, atol=1e-12)


def test_logistic_expression():
    fn, _ = compile_term(EXPRESSION["Logistic"](x=data("x")))
    x = np.array([-30.0, -2.0, 0.0, 0.7, 30.0])
    assert_close(fn({"x": x}), special.expit(x), rtol=1e-14, atol=1e-300)
