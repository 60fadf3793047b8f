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
