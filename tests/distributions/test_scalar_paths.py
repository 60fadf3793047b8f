"""A scalar posterior's moments, entropy and properness test take Python floats instead
of 0-d arrays (``families._scalar_of``: the same IEEE double arithmetic, in the same
order), and the other small-N paths of the message algebra (a product of small messages
adding its naturals inline, ``compact`` reading NumPy's strides, ``broadcast_to``
without ``_map``) give what the general paths give, bit for bit (issue 14)."""

from __future__ import annotations

import warnings

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from factorflow.distributions import Binomial, Dirichlet, Gamma, Gaussian
from factorflow.distributions.base import Distribution, _add_naturals, strides

#: natural parameters of every sign and size, the edges of properness included
EDGES = st.sampled_from([0.0, -0.0, -1.0, -1.0 + 2**-52, 1e-300, -1e-300, 1e300,
                         np.inf, -np.inf, np.nan, 2.5, -3.0])
VALUES = st.one_of(st.floats(-1e6, 1e6), st.floats(-1e-6, 1e-6), EDGES)


def _same(got, want) -> None:
    """The same value, bit for bit (NaN as NaN), and the same type and shape."""
    assert type(got) is type(want), (type(got), type(want))
    assert np.shape(got) == np.shape(want)
    assert np.array_equal(np.asarray(got), np.asarray(want), equal_nan=True), (got, want)


def _by_array(d: Distribution, what: str):
    """``what`` of ``d`` computed on its naturals as (1,) arrays (the general path),
    back at ``d``'s shape ()."""
    one = type(d).from_natural(*(e.reshape(1) for e in d.eta))
    value = getattr(one, what)
    value = value() if callable(value) else value
    return value if isinstance(value, bool | np.bool_) else np.asarray(value)[0]


def _assert_the_array_path(dist, names) -> None:
    """Each of ``names`` on the scalar ``dist`` equals, bit for bit (NaN as NaN), the same
    on its (1,)-array twin."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for what in names:
            value = getattr(dist, what)
            got = value() if callable(value) else value
            want = _by_array(dist, what)
            assert np.array_equal(np.asarray(got), np.asarray(want), equal_nan=True), (
                what, dist.eta, got, want)


@settings(max_examples=300, deadline=None)
@given(h=VALUES, p=VALUES)
def test_scalar_gaussian_is_the_array_path(h, p):
    g = Gaussian.from_natural(h, p)
    _assert_the_array_path(g, ("mean", "variance", "entropy", "all_proper"))
    # the types the 0-d arrays' arithmetic gives
    assert type(g.mean) is np.ndarray and g.mean.shape == ()
    if p != 0 and p == p:
        assert type(g.variance) is np.float64


@settings(max_examples=300, deadline=None)
@given(a=VALUES, r=VALUES)
def test_scalar_gamma_is_the_array_path(a, r):
    _assert_the_array_path(Gamma.from_natural(a, r), ("mean", "mean_log", "entropy",
                                                      "all_proper"))


@settings(max_examples=100, deadline=None)
@given(shape=st.lists(st.integers(0, 3), max_size=3).map(tuple), data=st.data())
def test_small_product_adds_as_add_naturals(shape, data):
    values = st.lists(VALUES, min_size=2, max_size=2)
    a = np.full(shape, data.draw(values)[0])
    b = np.full(shape, data.draw(values)[1])
    x = Gaussian.from_natural(a, a * 0.5)
    y = Gaussian.from_natural(b, np.abs(b))
    with np.errstate(all="ignore"):
        got = x * y
        want = [_add_naturals(u, v) for u, v in zip(x.eta, y.eta, strict=True)]
    for e, w in zip(got.eta, want, strict=True):
        _same(e, np.asarray(w, float))


def _compact_by_strides(d: Distribution) -> tuple:
    """``compact(always=True)``'s shapes as the general rule gives them (``strides``)."""
    nb = d.eta[0].ndim - d.event_ndim
    every = [(e.shape, strides(e)) for e in d.eta]
    shrink = [i for i in range(nb) if all(st_[i] == 0 and sh[i] > 1 for sh, st_ in every)]
    return tuple(tuple(1 if i in shrink else n for i, n in enumerate(e.shape))
                 for e in d.eta)


@settings(max_examples=100, deadline=None)
@given(k=st.integers(1, 4), n=st.integers(1, 5), lead=st.integers(0, 2))
def test_compact_and_broadcast_to(k, n, lead):
    rng = np.random.default_rng(k * 31 + n)
    for d in (Gaussian(rng.normal(size=k), np.ones(k)), Dirichlet(rng.random((k, 3)) + 1),
              Gamma(rng.random(k) + 1, rate=rng.random(k) + 1)):
        batch = (n,) * lead + d.batch_shape
        view = d.broadcast_to(batch)
        for e, src in zip(view.eta, d.eta, strict=True):
            _same(e, np.broadcast_to(src, batch + src.shape[d.eta[0].ndim - d.event_ndim:]))
            assert not e.flags.writeable
        small = view.compact(always=True)
        assert tuple(e.shape for e in small.eta) == _compact_by_strides(view)
        for e, full in zip(small.eta, view.eta, strict=True):
            assert np.array_equal(np.broadcast_to(e, full.shape), full)


def test_binomial_broadcast_keeps_its_trials():
    """A family that maps more than its naturals (a Binomial's trials) still goes
    through its own ``_map`` when broadcast."""
    b = Binomial(np.array([3, 5]), np.array([0.2, 0.7]))
    wide = b.broadcast_to((4, 2))
    assert wide.batch_shape == (4, 2)
    assert np.array_equal(np.broadcast_to(wide.trials, (4, 2)), np.broadcast_to([3, 5], (4, 2)))
