"""Every distribution family against SciPy and numerical integration: densities, moments,
entropies, log normalisers, KL, message products and ratios, uniforms, batching and
sampling."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from scipy import integrate, special, stats

from factorflow.distributions import (
    Bernoulli,
    Beta,
    Binomial,
    Dirichlet,
    Discrete,
    Gamma,
    Gaussian,
    PointMass,
    Poisson,
)
from factorflow.errors import ImproperMessageError
from tests.conftest import assert_close

QUAD = {"epsabs": 1e-14, "epsrel": 1e-11, "limit": 400}


@dataclass(frozen=True)
class Case:
    """A family with random parameters: how to build it, its SciPy twin, its support."""

    name: str
    make: Callable[[np.random.Generator, tuple[int, ...]], Any]
    scipy: Callable[[Any], Any]
    #: the support as a list of points (discrete) or an interval (continuous)
    support: Callable[[Any], Any]
    discrete: bool


def _beta_params(rng, shape):
    return Beta(rng.uniform(0.6, 4, shape), rng.uniform(0.6, 4, shape))


CASES = [
    Case("Gaussian", lambda rng, s: Gaussian(rng.normal(0, 2, s), rng.uniform(0.2, 3, s)),
         lambda d: stats.norm(d.mean, np.sqrt(d.variance)), lambda d: (-np.inf, np.inf), False),
    Case("Gamma", lambda rng, s: Gamma(rng.uniform(0.6, 5, s), rng.uniform(0.3, 3, s)),
         lambda d: stats.gamma(d.shape_param, scale=1 / d.rate), lambda d: (0, np.inf), False),
    Case("Beta", _beta_params, lambda d: stats.beta(d.alpha, d.beta), lambda d: (0, 1), False),
    Case("Bernoulli", lambda rng, s: Bernoulli(rng.uniform(0.05, 0.95, s)),
         lambda d: stats.bernoulli(d.p), lambda d: [0, 1], True),
    Case("Poisson", lambda rng, s: Poisson(rng.uniform(0.3, 6, s)),
         lambda d: stats.poisson(d.rate), lambda d: list(range(80)), True),
    Case("Binomial", lambda rng, s: Binomial(np.full(s, 9), rng.uniform(0.05, 0.95, s)),
         lambda d: stats.binom(d.trials.astype(int), d.p), lambda d: list(range(10)), True),
    Case("Discrete", lambda rng, s: Discrete(rng.dirichlet(np.ones(3), s)),
         lambda d: stats.rv_discrete(values=(np.arange(3), d.probs)), lambda d: [0, 1, 2],
         True),
]
SCALAR_CASES = {c.name: c for c in CASES}


def _integrate(case: Case, d, fn: Callable[[float], float]) -> float:
    """∫ fn over the support (a sum for a discrete family)."""
    support = case.support(d)
    if case.discrete:
        return float(sum(fn(x) for x in support))
    lo, hi = support
    if case.name == "Gaussian":
        m, s = float(d.mean), float(np.sqrt(d.variance))
        lo, hi = m - 40 * s, m + 40 * s
    if case.name == "Gamma":
        hi = float(d.mean + 60 * np.sqrt(d.variance) + 60)
    return integrate.quad(fn, lo, hi, **QUAD)[0]


def _log_unnormalised(d, x) -> float:
    """<η, T(x)> + log h(x): the density before dividing by exp A(η)."""
    x = np.asarray(x, float)
    return float(d._inner(d.eta, d.sufficient_stats(x)) + d.log_base_measure(x))


@pytest.fixture(params=[0, 1, 2], ids=lambda s: f"seed{s}")
def rng(request):
    return np.random.default_rng(100 + request.param)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_log_prob_mean_variance_entropy_against_scipy(case, rng):
    d = case.make(rng, ())
    ref = case.scipy(d)
    xs = ref.rvs(size=5, random_state=rng)
    logpdf = ref.logpmf if case.discrete else ref.logpdf
    assert_close(d.log_prob(xs), logpdf(xs), rtol=1e-10)
    assert_close([d.mean, d.variance], [ref.mean(), ref.var()], rtol=1e-10)
    assert_close(d.entropy(), ref.entropy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_log_normalizer_and_expected_stats_by_integration(case, rng):
    d = case.make(rng, ())
    if case.name == "Discrete":   # the category index needs an int; integrate by summing
        assert_close(d.log_normalizer(), special.logsumexp(d.eta[0]))
        assert_close(d.expected_stats()[0], np.exp(d.eta[0] - special.logsumexp(d.eta[0])))
        return
    z = _integrate(case, d, lambda x: math.exp(_log_unnormalised(d, x)))
    assert_close(d.log_normalizer(), math.log(z), rtol=1e-9)
    for k, stat in enumerate(d.expected_stats()):
        value = _integrate(case, d, lambda x, k=k: math.exp(float(d.log_prob(x)))
                           * float(d.sufficient_stats(np.asarray(x, float))[k]))
        assert_close(stat, value, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("case", [c for c in CASES if c.name != "Poisson"],
                         ids=lambda c: c.name)
def test_kl_by_integration(case, rng):
    p, q = case.make(rng, ()), case.make(rng, ())
    if case.name == "Binomial":
        q = Binomial(p.trials, q.p)
    if case.name == "Discrete":
        expected = float(np.sum(p.probs * (np.log(p.probs) - np.log(q.probs))))
    else:
        expected = _integrate(case, p, lambda x: math.exp(float(p.log_prob(x)))
                              * float(p.log_prob(x) - q.log_prob(x)))
    assert_close(p.kl(q), expected, rtol=1e-8, atol=1e-12)
    assert_close(p.kl(p), 0.0, atol=1e-12)


@pytest.mark.parametrize("case", [c for c in CASES if c.name not in ("Poisson", "Binomial")],
                         ids=lambda c: c.name)
def test_product_and_ratio_of_messages(case, rng):
    p, q = case.make(rng, ()), case.make(rng, ())
    pq = p * q
    # the product is proportional to p·q, normalised by ∫ p q = exp(log_average_of)
    if case.name == "Discrete":
        xs, overlap = np.arange(3), float(np.sum(p.probs * q.probs))
    else:
        xs = case.scipy(pq).rvs(size=4, random_state=rng)
        overlap = _integrate(case, p, lambda x: math.exp(float(p.log_prob(x) + q.log_prob(x))))
    assert_close(pq.log_prob(xs), p.log_prob(xs) + q.log_prob(xs) - math.log(overlap),
                 rtol=1e-9, atol=1e-12)
    assert_close(p.log_average_of(q), math.log(overlap), rtol=1e-9, atol=1e-12)
    ratio = pq / q
    for a, b in zip(ratio.eta, p.eta, strict=True):
        assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert (p / p).is_uniform()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_uniform_is_the_unit_of_the_product(case, rng):
    d = case.make(rng, (4,))
    event = d.eta[0].shape[1:]
    uniform = type(d).uniform((4,), *event)
    if case.name == "Binomial":
        uniform = Binomial.from_natural(*uniform.eta, trials=d.trials)
    assert np.all(uniform.is_uniform()) and not np.any(d.is_uniform())
    for a, b in zip((d * uniform).eta, d.eta, strict=True):
        assert_close(a, b)


def test_propriety():
    assert not Gaussian.uniform(()).is_proper()
    assert not Gamma.uniform(()).is_proper()
    assert Beta.uniform(()).is_proper()   # the uniform Beta(1, 1) is a proper density
    assert_close(Beta.uniform(()).log_normalizer(), 0.0)
    bad = Gaussian.from_natural(np.array([0.0, 1.0]), np.array([1.0, -1.0]))
    np.testing.assert_array_equal(bad.is_proper(), [True, False])
    with pytest.raises(ImproperMessageError, match=r"posterior of x is improper at index \(1,\)"):
        bad.check_proper("posterior of x")
    Gaussian(0.0, 1.0).check_proper("posterior of x")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_one_object_holds_a_plate(case, rng):
    """Batched queries equal elementwise ones; products broadcast like NumPy."""
    d = case.make(rng, (3, 2))
    ref_shape = (3, 2)
    x = d.sample(rng=rng)
    assert x.shape[:2] == ref_shape and d.batch_shape == ref_shape
    queries = [lambda e, v: e.log_prob(v), lambda e, v: e.mean, lambda e, v: e.variance,
               lambda e, v: e.log_normalizer()]
    if case.name != "Poisson":
        queries.append(lambda e, v: e.entropy())
    for query in queries:
        batched = np.broadcast_to(query(d, x), ref_shape)
        for i in np.ndindex(ref_shape):
            assert_close(batched[i], query(d[i], x[i]), rtol=1e-12)
    if case.name in ("Poisson", "Binomial"):
        return
    row = case.make(rng, (2,))   # (3, 2) * (2,) broadcasts over the leading axis
    both = d * row
    assert both.batch_shape == ref_shape
    for i in np.ndindex(ref_shape):
        for a, b in zip(both[i].eta, (d[i] * row[i[1]]).eta, strict=True):
            assert_close(a, b)
    total = d.prod(axis=0)
    assert total.batch_shape == (2,)
    for j in range(2):
        acc = d[0, j] * d[1, j] * d[2, j]
        for a, b in zip(total[j].eta, acc.eta, strict=True):
            assert_close(a, b, rtol=1e-12)


def test_gather_scatter_and_broadcast_keep_batch_parameters():
    rng = np.random.default_rng(7)
    g = Gaussian(rng.normal(size=4), rng.uniform(0.5, 2, 4))
    index = np.array([2, 0, 2, 3, 3])
    taken = g.take(index)
    assert_close(taken.mean, g.mean[index])
    scattered = taken.scatter_prod(index, 4)
    assert_close(scattered.precision, g.precision * np.bincount(index, minlength=4))
    assert g.broadcast_to((3, 4)).batch_shape == (3, 4)
    b = Binomial(np.array([3.0, 5.0, 7.0]), np.array([0.2, 0.5, 0.7]))
    assert_close(b[1].trials, 5.0)
    assert_close(b.take(np.array([2, 2, 0])).trials, [7.0, 7.0, 3.0])
    assert_close((b * b).trials, b.trials)
    assert_close(b.broadcast_to((2, 3)).trials, np.broadcast_to(b.trials, (2, 3)))
    assert_close(b.log_prob(np.array([1, 2, 3])), stats.binom.logpmf([1, 2, 3], b.trials, b.p))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_sampling_moments(case, rng):
    d = case.make(rng, ())
    n = 40_000
    x = np.asarray(d.sample(n, rng=rng), float)
    mean, var = float(d.mean), float(d.variance)
    standard_error = math.sqrt(var / n)
    assert abs(x.mean() - mean) < 6 * standard_error
    fourth = float(np.mean((x - mean) ** 4))   # the sample variance's standard error
    assert abs(x.var() - var) < 6 * math.sqrt(max(fourth - var**2, 1e-300) / n)


def test_dirichlet_against_scipy_and_integration():
    rng = np.random.default_rng(8)
    alpha = np.array([1.5, 2.0, 0.8])
    d, ref = Dirichlet(alpha), stats.dirichlet(alpha)
    x = ref.rvs(size=3, random_state=rng)
    assert_close(d.log_prob(x), [ref.logpdf(v) for v in x], rtol=1e-10)
    assert_close(d.mean, ref.mean(), rtol=1e-12)
    assert_close(d.variance, ref.var(), rtol=1e-12)
    assert_close(d.entropy(), ref.entropy(), rtol=1e-10)

    # ∫ Π x_k^(α_k − 1) over the simplex: x2 = (1 − x1) t, QAWS for the endpoint powers
    inner = integrate.quad(lambda t: 1.0, 0, 1, weight="alg",
                           wvar=(alpha[1] - 1, alpha[2] - 1), **QUAD)[0]
    z = inner * integrate.quad(lambda x1: 1.0, 0, 1, weight="alg",
                               wvar=(alpha[0] - 1, alpha[1] + alpha[2] - 1), **QUAD)[0]
    assert_close(d.log_normalizer(), math.log(z), rtol=1e-9)
    # E[log x_k] from the Beta(α_k, Σα − α_k) marginal, with the logarithm as QAWS weight
    s = alpha.sum()
    elog = [integrate.quad(lambda x: 1.0, 0, 1, weight="alg-loga", wvar=(a - 1, s - a - 1),
                           **QUAD)[0] / special.beta(a, s - a) for a in alpha]
    assert_close(d.expected_stats()[0], elog, rtol=1e-8)
    other = Dirichlet(np.array([2.5, 1.0, 1.2]))
    # KL = −H(d) − E_d[log other(x)], the latter linear in the integrated E[log x_k]
    cross = float(np.dot(other.alpha - 1, elog) - other.log_normalizer())
    assert_close(d.kl(other), -ref.entropy() - cross, rtol=1e-8)
    assert not np.any(d.is_uniform()) and np.all(Dirichlet.uniform((2,), 3).is_uniform())
    x = d.sample(40_000, rng=rng)
    assert np.all(np.abs(x.mean(axis=0) - d.mean) < 6 * np.sqrt(d.variance / 40_000))


def test_point_masses():
    b = Bernoulli.from_natural(np.array([np.inf, -np.inf]))
    np.testing.assert_array_equal(b.p, [1.0, 0.0])
    np.testing.assert_array_equal(b.log_prob(np.array([True, True])), [0.0, -np.inf])
    assert np.all((b / b).is_uniform())
    assert_close(b.entropy(), [0.0, 0.0])
    p = PointMass(np.array([1.0, 2.0]))
    np.testing.assert_array_equal(p.mean, [1.0, 2.0])
    np.testing.assert_array_equal(p.variance, [0.0, 0.0])
    np.testing.assert_array_equal(p.log_prob(np.array([1.0, 3.0])), [0.0, -np.inf])
    assert p[1].value == 2.0 and p.sample(3).shape == (3, 2)


def test_constructors_and_descriptions():
    assert_close(Gaussian(1.0, precision=4.0).variance, 0.25)
    assert_close(Gamma(2.0, scale=0.5).rate, 2.0)
    with pytest.raises(TypeError):
        Gaussian(0.0)
    with pytest.raises(TypeError):
        Gamma(1.0, rate=1.0, scale=1.0)
    assert repr(Gaussian(1.0, 2.0)) == "Gaussian(mean=1.0, variance=2.0)"
    assert Gaussian(np.zeros(3), np.ones(3)).describe()["mean"].shape == (3,)
    with pytest.raises(AttributeError):
        Gaussian(0.0, 1.0).eta = ()
    assert Gaussian(0.0, 1.0) == Gaussian(0.0, 1.0) and Gaussian(0.0, 1.0) != Gamma(1.0, 1.0)


def test_to_scipy_of_a_categorical_batch_says_to_index() -> None:
    import factorflow as ff
    probs = np.array([[0.2, 0.8], [0.5, 0.5]])
    with pytest.raises(ff.ModelError, match=r"shape \(2,\).*posterior\[i\]\.to_scipy\(\)"):
        Discrete(probs).to_scipy()
    with pytest.raises(ff.ModelError, match=r"batch of Dirichlets"):
        Dirichlet(probs + 1.0).to_scipy()
    np.testing.assert_allclose(Discrete(probs)[1].to_scipy().pmf([0, 1]), [0.5, 0.5])
    np.testing.assert_allclose(Dirichlet(probs + 1.0)[0].to_scipy().mean(), [0.4, 0.6])


@pytest.mark.parametrize("make", [
    lambda a, b: Gaussian(a, variance=b),
    lambda a, b: Gamma(a, rate=b),
    lambda a, b: Beta(a, b),
], ids=["Gaussian", "Gamma", "Beta"])
def test_two_parameter_families_broadcast_a_scalar_parameter(make):
    """A vector first parameter with a scalar second one (``Gaussian([..], variance=1)``)
    is a batch: indexing, ``take``, ``prod`` and ``scatter_prod`` see one batch shape and
    give what the element-by-element construction gives."""
    first = np.array([1.0, 2.0, 3.0])
    batch, scalar = make(first, 2.0), make(first, np.full(3, 2.0))
    assert [e.shape for e in batch.eta] == [(3,), (3,)]
    assert batch == scalar
    assert batch.take([2, 0]) == make(first[[2, 0]], 2.0)
    assert batch.prod() == scalar.prod()
    assert batch.scatter_prod(np.array([0, 1, 0]), 2) == scalar.scatter_prod(
        np.array([0, 1, 0]), 2)
    assert batch[1] == make(2.0, 2.0)
