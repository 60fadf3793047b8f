"""``dist.sample(size=None, rng=None)``, as NumPy's Generator methods and SciPy's ``rvs``:
``size`` first, the shape ``size + batch_shape + event_shape``, ``rng`` a Generator, a
seed or None.  Each family's sample moments are checked against closed forms written
from its parameters (not from the class's own ``mean``/``variance``)."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import factorflow as ff
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
from tests.conftest import assert_close

N = 200_000
#: the tolerance, in standard errors of the sample mean and of the sample variance:
#: with a fixed seed the check is deterministic, and 6 SE is far beyond chance
TOLERANCE_SE = 6.0

PROBS = np.array([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]])
#: family -> (a batch of two, closed-form mean, closed-form variance, event shape)
CLOSED_FORMS = {
    "Gaussian": (Gaussian(np.array([-1.0, 3.0]), np.array([0.5, 4.0])),
                 np.array([-1.0, 3.0]), np.array([0.5, 4.0]), ()),
    "Gamma": (Gamma(np.array([2.0, 0.7]), rate=np.array([3.0, 0.5])),
              np.array([2.0 / 3.0, 0.7 / 0.5]), np.array([2.0 / 9.0, 0.7 / 0.25]), ()),
    "Beta": (Beta(np.array([2.0, 0.5]), np.array([5.0, 0.5])),
             np.array([2.0 / 7.0, 0.5]), np.array([10.0 / (49.0 * 8.0), 0.25 / 2.0]), ()),
    "Bernoulli": (Bernoulli(np.array([0.2, 0.9])), np.array([0.2, 0.9]),
                  np.array([0.16, 0.09]), ()),
    "Poisson": (Poisson(np.array([0.5, 7.0])), np.array([0.5, 7.0]), np.array([0.5, 7.0]), ()),
    "Binomial": (Binomial(np.array([10.0, 3.0]), np.array([0.3, 0.8])),
                 np.array([3.0, 2.4]), np.array([2.1, 0.48]), ()),
    "Discrete": (Discrete(PROBS), PROBS @ np.arange(3),
                 PROBS @ np.arange(3) ** 2 - (PROBS @ np.arange(3)) ** 2, ()),
    "Dirichlet": (Dirichlet(np.array([[1.0, 2.0, 3.0], [0.5, 0.5, 4.0]])),
                  np.array([[1 / 6, 2 / 6, 3 / 6], [0.1, 0.1, 0.8]]),
                  np.array([[1 * 5 / (36 * 7), 2 * 4 / (36 * 7), 3 * 3 / (36 * 7)],
                            [0.5 * 4.5 / 25 / 6, 0.5 * 4.5 / 25 / 6, 4 * 1 / 25 / 6]]),
                  (3,)),
}


@pytest.mark.parametrize("family", list(CLOSED_FORMS))
def test_sample_moments_match_closed_forms(family):
    d, mean, var, event = CLOSED_FORMS[family]
    x = np.asarray(d.sample(N, rng=20240611), float)
    assert x.shape == (N, 2) + event
    sample_mean, sample_var = x.mean(axis=0), x.var(axis=0)
    assert np.all(np.abs(sample_mean - mean) < TOLERANCE_SE * np.sqrt(var / N))
    fourth = np.mean((x - mean) ** 4, axis=0)   # the sample variance's standard error
    assert np.all(np.abs(sample_var - var) < TOLERANCE_SE * np.sqrt((fourth - var**2) / N))


@pytest.mark.parametrize("family", list(CLOSED_FORMS))
@pytest.mark.parametrize(("size", "lead"), [(None, ()), (5, (5,)), ((4, 3), (4, 3)),
                                            ((), ()), (0, (0,)), (np.int64(2), (2,))],
                         ids=["none", "int", "tuple", "empty-tuple", "zero", "numpy-int"])
def test_sample_shape_is_size_then_batch_then_event(family, size, lead):
    d, _, _, event = CLOSED_FORMS[family]
    assert np.shape(d.sample(size, rng=0)) == lead + (2,) + event
    one = d[0]
    assert np.shape(one.sample(size, rng=0)) == lead + event


def test_unbatched_sample_without_size_is_a_numpy_scalar():
    x = Gaussian(0.0, 1.0).sample(rng=1)
    assert isinstance(x, np.floating) and np.ndim(x) == 0
    assert isinstance(Poisson(2.0).sample(rng=1), np.integer)
    assert isinstance(Bernoulli(0.5).sample(rng=1), np.bool_)


def test_the_first_positional_argument_is_the_size():
    """Issue 10: sample(1000) used to take 1000 as the seed and return one value."""
    x = Gaussian(2.0, 1.0).sample(1000)
    assert x.shape == (1000,) and len(np.unique(x)) == 1000


@pytest.mark.parametrize("rng", [7, np.random.SeedSequence(7), np.random.PCG64(7)],
                         ids=["int", "seed-sequence", "bit-generator"])
def test_same_seed_same_draws(rng):
    d = Gamma(np.array([1.5, 3.0]), rate=2.0)
    reference = d.sample((3,), rng=np.random.default_rng(7))
    np.testing.assert_array_equal(d.sample((3,), rng=rng), reference)


def test_a_generator_advances():
    gen = np.random.default_rng(3)
    a, b = Gaussian(0.0, 1.0).sample(4, rng=gen), Gaussian(0.0, 1.0).sample(4, rng=gen)
    assert not np.array_equal(a, b)


def test_without_rng_draws_differ():
    d = Gaussian(0.0, 1.0)
    assert not np.array_equal(d.sample(8), d.sample(8))


@pytest.mark.parametrize(("size", "match"), [(-1, r"size.*got -1"), (2.5, r"size.*got 2\.5"),
                                             ((2, "a"), r"size.*\(2, 'a'\)"),
                                             (True, r"size.*got True")],
                         ids=["negative", "float", "string-in-tuple", "bool"])
def test_bad_size(size, match):
    with pytest.raises(ff.ModelError, match=match):
        Gaussian(0.0, 1.0).sample(size)


@pytest.mark.parametrize("rng", ["seed", 1.5, True, object()],
                         ids=["string", "float", "bool", "object"])
def test_bad_rng(rng):
    with pytest.raises(ff.ModelError, match=r"rng must be a numpy.random.Generator"):
        Gaussian(0.0, 1.0).sample(3, rng=rng)


def test_point_mass_samples_its_values():
    p = PointMass(np.array([1.0, 2.0]))
    np.testing.assert_array_equal(p.sample(3), [[1.0, 2.0]] * 3)
    assert p.sample().shape == (2,)
    assert PointMass(4.0).sample() == 4.0


def test_posterior_samples_follow_the_posterior(known_precision_model):
    """A posterior from inference samples like any distribution: mean N(12/2.01, 1/2.01)."""
    posterior = known_precision_model.infer("ep")["mean"]
    x = posterior.sample(N, rng=5)
    assert abs(x.mean() - 12.0 / 2.01) < TOLERANCE_SE * np.sqrt(1 / 2.01 / N)


@pytest.mark.parametrize("family", list(CLOSED_FORMS))
def test_pickle_and_deepcopy_keep_every_parameter(family):
    d = CLOSED_FORMS[family][0]
    for copied in (pickle.loads(pickle.dumps(d)), copy.deepcopy(d)):
        assert type(copied) is type(d) and copied == d
        assert copied.eta is not d.eta
        if family == "Binomial":
            np.testing.assert_array_equal(copied.trials, d.trials)
        with pytest.raises(AttributeError, match="immutable"):
            copied.eta = ()
    p = PointMass(np.array([True, False]))
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(p)).value, p.value)
    np.testing.assert_array_equal(copy.deepcopy(p).value, p.value)
    assert_close(pickle.loads(pickle.dumps(d)).log_normalizer(), d.log_normalizer(), rtol=0,
                 atol=0)
