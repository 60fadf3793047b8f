"""The cheaper small-N paths of the message algebra give what the general ones give: a
broadcast view built from an array's memory is ``np.broadcast_to``'s, the fused
properness tests are the elementwise verdict, the row maxima by columns are ``np.max``'s,
the remembered broadcast of shapes is NumPy's, and ``isinstance`` of a message keeps its
meaning (issue 14)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from factorflow.distributions import Dirichlet, Discrete, Distribution, Gamma, Gaussian
from factorflow.distributions.base import (
    broadcast_shapes,
    broadcast_view,
    is_zeros_view,
    last_axis_max,
    zeros_view,
)

SHAPES = st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple)
#: values a posterior's natural parameters can take, the edges of properness included
EDGES = st.sampled_from([0.0, -1.0, -1.0 + 2**-52, 1e-300, -1e-300, np.inf, -np.inf,
                         np.nan, 2.5, -3.0])
VALUES = st.one_of(st.floats(-5, 5), EDGES)


def _same_view(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.strides == want.strides
    assert got.dtype == want.dtype and not got.flags.writeable
    assert np.array_equal(got, want, equal_nan=True)


@settings(max_examples=60, deadline=None)
@given(source=SHAPES, lead=SHAPES, data=st.data())
def test_broadcast_view_is_numpys(source, lead, data):
    # a target the source broadcasts to: each length-1 axis of the source may grow
    grown = tuple(data.draw(st.sampled_from([1, 3])) if n == 1 else n for n in source)
    target = lead + grown
    for dtype in (float, int, bool):
        a = (np.arange(int(np.prod(source))) % 3).astype(dtype).reshape(source)
        _same_view(broadcast_view(a, target), np.broadcast_to(a, target))
    b = np.arange(float(np.prod(source)) or 1.0).reshape(source or ())
    view = np.broadcast_to(b, target)  # not contiguous: NumPy's own way, the same view
    _same_view(broadcast_view(view, target), np.broadcast_to(view, target))


def test_broadcast_view_refuses_what_numpy_refuses():
    with pytest.raises(ValueError):
        broadcast_view(np.zeros(3), (4,))
    with pytest.raises(ValueError):
        broadcast_view(np.zeros((3, 4)), (4,))
    empty = broadcast_view(np.zeros(3), (0, 3))
    assert empty.shape == (0, 3) and not empty.flags.writeable
    assert is_zeros_view((zeros_view((200, 10)),)) and not zeros_view((2,)).flags.writeable


@settings(max_examples=150, deadline=None)
@given(a=st.lists(VALUES, min_size=1, max_size=6), b=st.lists(VALUES, min_size=1,
                                                                  max_size=6))
def test_fused_properness_is_the_elementwise_verdict(a, b):
    n = min(len(a), len(b))
    x, y = np.array(a[:n]), np.array(b[:n])
    for d in (Gaussian.from_natural(x, y), Gamma.from_natural(x, y),
              Dirichlet.from_natural(x), Dirichlet.from_natural(np.stack([x, y]))):
        assert d.all_proper() == Distribution.all_proper(d), d
        with np.errstate(invalid="ignore"):
            verdict = bool(np.all(d.is_proper())) and not any(np.isnan(e).any()
                                                              for e in d.eta)
        assert d.all_proper() == verdict


def test_fused_properness_on_broadcast_and_empty_messages():
    clone = Gaussian(np.arange(3.0), np.ones(3)).broadcast_to((50, 3))
    assert clone.all_proper()
    assert not Gaussian.from_natural(np.zeros(3), np.array([1.0, 0.0, 2.0])).all_proper()
    assert Gamma.from_natural(np.zeros(0), np.zeros(0)).all_proper()  # nothing improper
    assert not Gamma.from_natural(np.array([-1.0]), np.array([-1.0])).all_proper()  # a = 0


@settings(max_examples=80, deadline=None)
@given(rows=st.integers(0, 40), k=st.integers(1, 20), lead=st.integers(1, 3),
       seed=st.integers(0, 2**16), special=st.sampled_from([None, np.nan, np.inf, -np.inf]))
def test_row_maxima_by_columns_are_numpys(rows, k, lead, seed, special):
    x = np.random.default_rng(seed).normal(size=(lead, rows, k))
    if special is not None and x.size:
        x.flat[seed % x.size] = special
    got, want = last_axis_max(x), np.max(x, axis=-1, keepdims=True) if x.size else None
    if want is not None:
        assert got.shape == want.shape and np.array_equal(got, want, equal_nan=True)


def test_remembered_broadcast_of_shapes_is_numpys():
    assert broadcast_shapes((200, 1), (10,)) == np.broadcast_shapes((200, 1), (10,))
    assert broadcast_shapes([3, 1], (4,)) == (3, 4)  # a list: not remembered, still right
    assert broadcast_shapes() == ()
    with pytest.raises(ValueError):
        broadcast_shapes((3,), (4,))


def test_isinstance_of_a_message_keeps_its_meaning():
    assert isinstance(Gaussian(0.0, 1.0), Distribution)
    assert isinstance(Discrete.uniform((2,), 3), Distribution)
    assert not isinstance(np.zeros(3), Distribution) and not isinstance(1.0, Distribution)
    with pytest.raises(TypeError, match="abstract"):
        Distribution()  # still abstract


def test_a_product_of_messages_equals_the_sum_of_their_naturals():
    rng = np.random.default_rng(3)
    a = Gaussian.from_natural(rng.normal(size=(20, 4)), rng.uniform(1, 2, (20, 4)))
    b = Gaussian(rng.normal(size=4), rng.uniform(1, 2, 4)).broadcast_to((20, 4))
    got = a * b
    assert np.array_equal(got.eta[0], a.eta[0] + b.eta[0])
    assert np.array_equal(got.eta[1], a.eta[1] + b.eta[1])
    assert (Gaussian.uniform((20, 4)) * a) is a and (a * Gaussian.uniform((4,))) is a
    wider = a * Gaussian.uniform((3, 20, 4))
    assert wider.batch_shape == (3, 20, 4) and np.array_equal(wider.eta[0][1], a.eta[0])
