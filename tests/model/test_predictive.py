"""model.predictive against closed-form posterior predictive moments.

Each check draws N samples with a fixed seed and requires the sample mean and variance
to lie within 5 Monte Carlo standard errors of the closed form (the standard error of a
sample mean is sqrt(var / N); of a sample variance sqrt(var((x - mean)^2) / N)); for
discrete outcomes the probability itself is checked the same way.
"""

import numpy as np
import pytest

import factorflow as ff
from tests.conftest import gaussian_mixture

N = 40_000


def assert_moments(draws: np.ndarray, mean: np.ndarray, variance: np.ndarray) -> None:
    m = draws.mean(axis=0)
    centred = (draws - m) ** 2
    se_mean = np.sqrt(draws.var(axis=0) / len(draws))
    se_var = np.sqrt(centred.var(axis=0) / len(draws))
    assert np.all(np.abs(m - mean) < 5 * se_mean), (m, mean, se_mean)
    assert np.all(np.abs(draws.var(axis=0) - variance) < 5 * se_var), (
        draws.var(axis=0), variance, se_var)


def test_gaussian_with_known_precision() -> None:
    # mean ~ N(0, 100), x_i ~ N(mean, 1/2): EP is exact here, and the predictive of a
    # new x_i is N(m, v + 1/2) with (m, v) the posterior of the mean
    data = np.array([5.0, 7.0, 6.0, 4.5])
    with ff.Model("known_precision") as model:
        mean = ff.Gaussian("mean", 0.0, variance=100.0)
        with ff.Plate(ff.Range("n", 4)):
            ff.Gaussian("x", mean, precision=2.0, observed=data)
    result = model.infer("ep")
    v = 1.0 / (1 / 100 + 2.0 * 4)
    m = v * 2.0 * data.sum()
    assert result["mean"].mean == pytest.approx(m, rel=1e-12)
    draws = model.predictive(result, n=N, rng=0)["x"]
    assert draws.shape == (N, 4)
    assert_moments(draws, np.full(4, m), np.full(4, v + 0.5))
    # the draws share the mean within a draw: Cov(x_1, x_2) = v
    cov = np.cov(draws[:, 0], draws[:, 1])[0, 1]
    assert abs(cov - v) < 5 * np.sqrt((v + 0.5) ** 2 / N)


def test_poisson_gamma_is_negative_binomial() -> None:
    counts = np.array([3, 5, 4])
    with ff.Model("counts") as model:
        rate = ff.Gamma("rate", 2.0, rate=1.0)
        with ff.Plate(ff.Range("n", 3)):
            ff.Poisson("k", rate, observed=counts)
    result = model.infer("vmp")
    a, b = 2.0 + counts.sum(), 1.0 + 3   # the exact posterior Gamma(a, b)
    assert result["rate"].shape_param == pytest.approx(a)
    assert result["rate"].rate == pytest.approx(b)
    draws = model.predictive(result, n=N, rng=1)["k"]
    assert draws.dtype.kind == "i"
    assert_moments(draws, np.full(3, a / b), np.full(3, a / b + a / b**2))


def test_mixture_through_switch() -> None:
    model = gaussian_mixture([-1.0, 0.5, 5.0, 6.0])
    result = model.infer("vmp", init={"means": ff.distributions.Gaussian([0, 5], [1, 1])})
    q, m, v = result["z"].probs, result["means"].mean, result["means"].variance
    mean = q @ m                                      # mixture over q(z_i) and q(means)
    variance = q @ (v + 1.0 + m**2) - mean**2
    draws = model.predictive(result, n=N, rng=2)["x"]
    assert_moments(draws, mean, variance)


def test_gated_observation_if_ifnot() -> None:
    with ff.Model("rain") as model:
        cloudy = ff.Bernoulli("cloudy", 0.3)
        with ff.If(cloudy):
            ff.Bernoulli("rain", 0.8, observed=True)
        with ff.IfNot(cloudy):
            ff.Bernoulli("rain", 0.1, observed=True)
    result = model.infer("ep")
    q = float(result["cloudy"].p)
    assert q == pytest.approx(0.3 * 0.8 / (0.3 * 0.8 + 0.7 * 0.1), rel=1e-9)
    draws = model.predictive(result, n=N, rng=3)["rain"]
    assert draws.dtype == bool
    p = q * 0.8 + (1 - q) * 0.1
    assert abs(draws.mean() - p) < 5 * np.sqrt(p * (1 - p) / N)


def test_same_seed_same_draws_and_shapes() -> None:
    with ff.Model("seeded") as model:
        mean = ff.Gaussian("mean", 0.0, variance=1.0)
        with ff.Plate(ff.Range("n", 2)):
            ff.Gaussian("x", mean, precision=1.0, observed=[0.0, 1.0])
    result = model.infer("ep")
    a = model.predictive(result, n=5, rng=7)["x"]
    b = model.predictive(result, n=5, rng=7)["x"]
    np.testing.assert_array_equal(a, b)
    assert model.predictive(result, n=0)["x"].shape == (0, 2)


def test_bad_requests_name_what_to_do() -> None:
    with ff.Model("bad") as model:
        mean = ff.Gaussian("mean", 0.0, variance=1.0)
        ff.Gaussian("x", mean, precision=1.0, observed=0.5)
    result = model.infer("ep")
    with pytest.raises(ff.ModelError, match="n must be a non-negative integer"):
        model.predictive(result, n=-1)
    with pytest.raises(ff.ModelError, match=r"\['mean'\] are latent"):
        model.predictive(result, variables=["mean"])
    with ff.Model("other") as other:
        mu = ff.Gaussian("mu", 0.0, variance=1.0)
        ff.Gaussian("x", mu, precision=1.0, observed=0.5)
    with pytest.raises(ff.ModelError, match="no posterior for 'mu'"):
        other.predictive(result)


def test_user_factor_has_no_sampler() -> None:
    @ff.factor(sample="real", mean="real")
    def unit_gaussian(sample, mean):
        return -0.5 * (sample - mean) ** 2

    with ff.Model("custom") as model:
        mean = ff.Gaussian("mean", 0.0, variance=1.0)
        with ff.Plate(ff.Range("n", 2)):
            unit_gaussian("y", mean=mean, observed=[1.0, 2.0])
    result = model.infer("vmp")
    with pytest.raises(ff.UnsupportedFactorError, match="'y' is defined by the factor"):
        model.predictive(result)


def test_indexing_by_observed_integers() -> None:
    # skill[p] ~ N(0, 4); score[g] ~ N(skill[who[g]], 1): a new score of game g is
    # N(m[who[g]], v[who[g]] + 1), each skill's posterior in closed form
    who = np.array([0, 1, 1, 2, 0])
    scores = np.array([1.0, 2.0, 2.5, -1.0, 0.5])
    with ff.Model("skills") as model:
        with ff.Plate(ff.Range("p", 3)):
            skill = ff.Gaussian("skill", 0.0, variance=4.0)
        index = ff.Data("who", who)
        with ff.Plate(ff.Range("g", 5)):
            ff.Gaussian("score", skill[index], precision=1.0, observed=scores)
    result = model.infer("ep")
    precision = 0.25 + np.bincount(who, minlength=3)
    m, v = np.bincount(who, scores, minlength=3) / precision, 1.0 / precision
    np.testing.assert_allclose(result["skill"].mean, m, rtol=1e-12)
    draws = model.predictive(result, n=N, rng=4)["score"]
    assert_moments(draws, m[who], v[who] + 1.0)


def test_case_gates_pick_the_branch_of_each_draw() -> None:
    with ff.Model("cases") as model:
        z = ff.Discrete("z", [0.3, 0.7])
        with ff.Case(z, 0):
            ff.Gaussian("x", 0.0, variance=1.0, observed=2.0)
        with ff.Case(z, 1):
            ff.Gaussian("x", 3.0, variance=1.0, observed=2.0)
    result = model.infer("ep")
    like = np.array([0.3, 0.7]) * np.exp(-0.5 * (2.0 - np.array([0.0, 3.0])) ** 2)
    q = like / like.sum()
    np.testing.assert_allclose(result["z"].probs, q, rtol=1e-12)
    draws = model.predictive(result, n=N, rng=5)["x"]
    mean = q @ [0.0, 3.0]
    assert_moments(draws, mean, q @ (1.0 + np.array([0.0, 9.0])) - mean**2)


def test_beta_binomial() -> None:
    with ff.Model("coins") as model:
        p = ff.Beta("p", 1.0, 1.0)
        with ff.Plate(ff.Range("n", 3)):
            ff.Binomial("k", 10, p, observed=[3, 4, 5])
    result = model.infer("ep")
    a, b = 1.0 + 12, 1.0 + 18                         # the exact posterior Beta(a, b)
    assert (result["p"].alpha, result["p"].beta) == pytest.approx((a, b))
    draws = model.predictive(result, n=N, rng=6)["k"]
    mean = 10 * a / (a + b)
    variance = 10 * a * b * (a + b + 10) / ((a + b) ** 2 * (a + b + 1))
    assert_moments(draws, np.full(3, mean), np.full(3, variance))
