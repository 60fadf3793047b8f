"""moments.C, the covariance over the last axis, against independent computations: exact
enumeration of every outcome (Discrete, Bernoulli), SciPy's Dirichlet and the Dirichlet's
closed form entry by entry, and the identities every covariance matrix satisfies."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from factorflow.distributions import (
    Bernoulli,
    Beta,
    Dirichlet,
    Discrete,
    Gamma,
    Gaussian,
    PointMass,
    moments,
)
from tests.conftest import assert_close


def _enumerated_covariance(points: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Σ_s p_s (x_s - m)(x_s - m)ᵀ over every outcome s (exact, no sampling)."""
    centred = points - probs @ points
    return (probs[:, None] * centred).T @ centred


def test_discrete_is_the_covariance_of_its_one_hot_vector_by_enumeration():
    probs = np.array([[0.2, 0.5, 0.3], [0.05, 0.05, 0.9]])
    c = moments.C(Discrete(probs))
    assert c.shape == (2, 3, 3)
    for row, cov in zip(probs, c, strict=True):
        assert_close(cov, _enumerated_covariance(np.eye(3), row), rtol=1e-14, atol=1e-15)
        assert_close(cov.sum(axis=1), np.zeros(3), atol=1e-15)   # one-hot components sum to 1


def test_dirichlet_matches_scipy_and_its_closed_form():
    alpha = np.array([[1.5, 2.0, 0.7, 4.0], [0.3, 0.3, 9.0, 1.0]])
    c = moments.C(Dirichlet(alpha))
    assert c.shape == (2, 4, 4)
    for a, cov in zip(alpha, c, strict=True):
        a0 = a.sum()
        assert_close(np.diag(cov), stats.dirichlet(a).var(), rtol=1e-12)
        assert_close(cov, stats.dirichlet(a).cov(), rtol=1e-12, atol=1e-15)
        for i, j in itertools.permutations(range(4), 2):
            assert_close(cov[i, j], -a[i] * a[j] / (a0**2 * (a0 + 1)), rtol=1e-12)
        assert_close(cov.sum(axis=1), np.zeros(4), atol=1e-15)   # the components sum to one


def test_independent_bernoulli_components_by_enumerating_every_state():
    p = np.array([0.1, 0.35, 0.6, 0.9])
    states = np.array(list(itertools.product([0.0, 1.0], repeat=p.size)))
    w = np.prod(np.where(states == 1.0, p, 1.0 - p), axis=1)
    assert_close(moments.C(Bernoulli(p)), _enumerated_covariance(states, w),
                 rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("make", [
    lambda: Gaussian(np.array([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]),
                     np.array([[1.0, 2.0, 3.0], [0.5, 0.5, 0.5]])),
    lambda: Gamma(np.array([2.0, 3.0, 0.5]), np.array([1.0, 4.0, 2.0])),
    lambda: Beta(np.array([2.0, 3.0]), np.array([5.0, 0.5])),
], ids=["gaussian", "gamma", "beta"])
def test_families_of_independent_scalars_have_diagonal_covariances(make):
    q = make()
    c = moments.C(q)
    assert c.shape == q.variance.shape + q.variance.shape[-1:]
    assert_close(np.diagonal(c, axis1=-2, axis2=-1), q.variance, rtol=1e-15)
    assert_close(c - c * np.eye(c.shape[-1]), np.zeros_like(c), atol=0)


@pytest.mark.parametrize("known", [np.ones(4), np.arange(6.0).reshape(2, 3),
                                   PointMass(np.ones((2, 5)))], ids=["vector", "batch", "point"])
def test_known_values_have_zero_covariance(known):
    shape = np.shape(known.value if isinstance(known, PointMass) else known)
    assert_close(moments.C(known), np.zeros(shape + shape[-1:]), atol=0)


def test_a_known_scalar_has_the_zero_that_broadcasts():
    """A known category index stands for a known one-hot vector: its covariance is 0."""
    assert moments.C(2).shape == () and moments.C(2) == 0.0
    assert_close(moments.C(2) + moments.C(Discrete([0.5, 0.5])), [[0.25, -0.25], [-0.25, 0.25]],
                 rtol=1e-15)


@pytest.mark.parametrize("scalar", [Gaussian(0.0, 1.0), Gamma(2.0, 1.0)],
                         ids=["gaussian", "gamma"])
def test_a_scalar_distribution_has_no_covariance_matrix(scalar):
    with pytest.raises(TypeError, match="needs a vector"):
        moments.C(scalar)


def _quad_expectation(f, dist) -> float:
    """E[f(x)] under a SciPy distribution by adaptive quadrature, split at the mean."""
    from scipy import integrate

    lo, hi = dist.support()
    m = dist.mean()
    parts = [integrate.quad(lambda x: f(x) * dist.pdf(x), a, b, epsabs=1e-13, epsrel=1e-13,
                            limit=500)[0] for a, b in ((lo, m), (m, hi))]
    return parts[0] + parts[1]


SHAPES_RATES = [(0.3, 1.0), (1.0, 0.05), (2.5, 7.0), (40.0, 1.0), (0.8, 1e3)]


@pytest.mark.parametrize("shape,rate", SHAPES_RATES, ids=lambda v: f"{v:g}")
def test_gamma_eloggamma_matches_scipy_quadrature(shape, rate):
    from scipy import special

    want = _quad_expectation(special.gammaln, stats.gamma(shape, scale=1.0 / rate))
    assert_close(moments.Eloggamma(Gamma(shape, rate=rate)), want, rtol=1e-9, atol=1e-10)


def test_eloggamma_is_batched_and_exact_for_known_values():
    from scipy import special

    shapes, rates = np.array([[0.3, 2.5], [40.0, 1.0]]), np.array([[1.0, 7.0], [1.0, 0.05]])
    got = moments.Eloggamma(Gamma(shapes, rate=rates))
    assert got.shape == (2, 2)
    for i, j in itertools.product(range(2), range(2)):
        assert_close(got[i, j], moments.Eloggamma(Gamma(shapes[i, j], rate=rates[i, j])),
                     rtol=1e-14)
    x = np.array([0.5, 3.0, 11.0])
    assert_close(moments.Eloggamma(x), special.gammaln(x), rtol=1e-15)
    assert_close(moments.Eloggamma(PointMass(x)), special.gammaln(x), rtol=1e-15)


def test_elogdet_of_gamma_and_dirichlet_vectors_matches_scipy_quadrature():
    shapes, rates = np.array([0.7, 3.0, 12.0]), np.array([2.0, 0.5, 1.0])
    want = sum(_quad_expectation(np.log, stats.gamma(a, scale=1 / b))
               for a, b in zip(shapes, rates, strict=True))
    assert_close(moments.Elogdet(Gamma(shapes, rate=rates)), want, rtol=1e-9)
    alpha = np.array([0.4, 2.0, 5.0, 1.0])
    want = sum(_quad_expectation(np.log, stats.beta(a, alpha.sum() - a)) for a in alpha)
    assert_close(moments.Elogdet(Dirichlet(alpha)), want, rtol=1e-9)
    with pytest.raises(TypeError, match="scalar Gamma"):
        moments.Elogdet(Gamma(2.0, rate=1.0))


def test_elogdet_of_a_wishart_matches_bartletts_decomposition_by_quadrature():
    """X ~ Wishart(ν, rate R): log |X| = log |R⁻¹| + Σ_i log c_i with c_i ~ χ²(ν − i + 1)
    independent (Bartlett); each E[log c_i] by quadrature over SciPy's χ²."""
    from factorflow.distributions.multivariate import Wishart

    rate = np.array([[2.0, 0.3, 0.1], [0.3, 1.0, -0.2], [0.1, -0.2, 0.7]])
    for nu in (3.5, 8.0):
        want = -np.log(np.linalg.det(rate)) + sum(
            _quad_expectation(np.log, stats.chi2(nu - i)) for i in range(3))
        assert_close(moments.Elogdet(Wishart(nu, rate)), want, rtol=1e-9)


def test_elogdet_of_known_matrices_and_bad_input():
    from factorflow.errors import ModelError

    rng = np.random.default_rng(3)
    a = rng.normal(size=(2, 3, 3))
    spd = a @ np.swapaxes(a, -1, -2) + 0.5 * np.eye(3)
    assert_close(moments.Elogdet(spd), np.log(np.linalg.det(spd)), rtol=1e-12)
    with pytest.raises(ModelError, match="not positive definite"):
        moments.Elogdet(-spd)
    with pytest.raises(ModelError, match="square matrices"):
        moments.Elogdet(np.ones(3))


def test_new_families_register_their_moments(monkeypatch):
    """The extension point a matrix family (a Wishart) uses for its Elogdet."""
    monkeypatch.setattr(moments, "_BY_FAMILY", dict(moments._BY_FAMILY))

    class Diagonal(Gaussian):      # stands for a family that is not registered yet
        pass

    d = Diagonal(np.zeros(2), variance=np.ones(2))
    with pytest.raises(TypeError, match=r"register_moment\('Elogdet', Diagonal\)"):
        moments.Elogdet(d)
    moments.register_moment("Elogdet", Diagonal)(lambda v: np.sum(v.variance, axis=-1))
    assert_close(moments.Elogdet(d), 2.0)
    with pytest.raises(TypeError, match="Eloggamma is not defined for Gaussian"):
        moments.Eloggamma(Gaussian(0.0, variance=1.0))
