"""The small-N sweep's short paths (sweep18) give the general paths' numbers bit for bit.

Each short path computes what a general one computes, with fewer calls: a K-vector
posterior's moments together (``moments.own_moments``), the bound's prior terms of known
numbers once a run (Gamma, Gaussian, Dirichlet evidence), the Dirichlet's entropy, the
row maximum of a small (N, K) array as one reduction, the data sums' second read.  Each
is checked here against the general path on the same inputs, exactly (``array_equal``,
signs of zero included where a maximum picks between them).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from factorflow.distributions import Dirichlet, Gamma, Gaussian, base
from factorflow.distributions.base import Distribution
from factorflow.distributions.moments import distinct_vector, own_moments
from factorflow.factors import dirichlet, gamma, gaussian

FINITE = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
POSITIVE = st.floats(1e-3, 1e3)


def same(a, b) -> bool:
    """Equal arrays, NaN where NaN, and the same sign of every zero."""
    a, b = np.asarray(a), np.asarray(b)
    return (a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
            and np.array_equal(np.signbit(a), np.signbit(b)))


def column_max(x: np.ndarray) -> np.ndarray:
    """The row maximum as ``last_axis_max`` computed it column by column before."""
    out = x[..., 0].copy()
    for j in range(1, x.shape[-1]):
        np.maximum(out, x[..., j], out=out)
    return out[..., None]


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(float, hnp.array_shapes(min_dims=2, max_dims=3, min_side=1, max_side=40)
                  .filter(lambda s: 2 <= s[-1] <= 16),
                  elements=st.one_of(FINITE, st.sampled_from([0.0, -0.0, np.nan, np.inf,
                                                              -np.inf]))))
def test_row_max_of_a_small_array_is_the_column_by_column_max(x):
    """The same numbers; a row of zeros of both signs may give either zero (NumPy's
    maximum of −0 and 0 depends on the loop it takes: its reduction over a contiguous
    copy and the column passes differ there, as ``np.max`` and the passes do), which
    changes nothing the maximum is read for (a normalisation's x − max and its
    exponential)."""
    got = base.last_axis_max(x)
    assert got.shape == x.shape[:-1] + (1,)
    assert np.array_equal(got, column_max(x), equal_nan=True)
    assert np.array_equal(got, np.max(x, axis=-1, keepdims=True)) or np.isnan(x).any()


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 12).flatmap(lambda k: st.tuples(
    hnp.arrays(float, k, elements=FINITE),
    hnp.arrays(float, k, elements=st.one_of(POSITIVE, st.just(0.0))),
    hnp.arrays(float, k, elements=POSITIVE), hnp.arrays(float, k, elements=POSITIVE))))
def test_own_moments_are_the_properties(arrays):
    h, p, a, b = arrays
    g = Gaussian.from_natural(h, p)
    m, v = own_moments(g)
    with np.errstate(divide="ignore"):
        assert same(m, g.mean) and same(v, g.variance)
    q = Gamma(a, rate=b)
    m, elog = own_moments(q)
    assert same(m, q.mean) and same(elog, q.mean_log())
    # the entropy's array path reads the same moments
    if (p > 0).all():
        assert same(g.entropy(), Distribution.entropy(g))


def test_distinct_vector_is_told_by_the_first_two_elements():
    assert distinct_vector(Gaussian(np.arange(3.0), variance=np.ones(3)))
    assert not distinct_vector(Gaussian(np.arange(3.0), variance=1.0))   # p: a view
    assert not distinct_vector(Gaussian(np.zeros(3), variance=np.ones(3)))  # equal
    assert not distinct_vector(Gaussian(0.0, variance=1.0).broadcast_to((3,)))  # a view
    assert not distinct_vector(Gaussian(np.ones((2, 3)), variance=1.0))  # two axes
    assert not distinct_vector(Gaussian(np.ones(1), variance=1.0))
    assert not distinct_vector(Dirichlet(np.ones(3)))                    # an event axis
    assert distinct_vector(Gaussian.from_natural([np.nan, np.nan], [1.0, 1.0]))  # NaN ≠ NaN


@settings(max_examples=40, deadline=None)
@given(hnp.arrays(float, st.integers(2, 12), elements=POSITIVE),
       hnp.arrays(float, st.integers(2, 12), elements=POSITIVE))
def test_dirichlet_entropy_and_evidence_are_the_general_ones(alpha, prior):
    d = Dirichlet(alpha)
    assert same(d.entropy(), Distribution.entropy(d))
    prior = np.resize(prior, alpha.shape)
    fast = dirichlet._average_log_factor(d, prior)                 # (the memo path)
    again = dirichlet._average_log_factor(d, prior)                # (log B(α) recalled)
    general = dirichlet._average_log_factor(d, list(prior))        # (not an array)
    assert same(fast, general) and same(again, general)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 10).flatmap(lambda k: st.tuples(
    hnp.arrays(float, k, elements=POSITIVE), hnp.arrays(float, k, elements=POSITIVE),
    hnp.arrays(float, k, elements=FINITE))), POSITIVE, POSITIVE, FINITE)
def test_prior_terms_of_known_numbers_are_the_general_ones(arrays, shape, rate, mean):
    a, b, h = arrays
    q = Gamma(a, rate=b)
    assert same(gamma._average_log_factor(q, shape, rate),
                gamma._average_log_factor(q, np.asarray(shape), np.asarray(rate)))
    g = Gaussian.from_natural(h, a)
    assert same(gaussian._average_log_factor(g, mean, rate),
                gaussian._average_log_factor(g, np.asarray(mean), np.asarray(rate)))
    # an int prior reads as its float
    assert same(gamma._average_log_factor(q, 2, 1), gamma._average_log_factor(q, 2.0, 1.0))


def test_data_sums_second_read_is_the_first_and_checks_the_axis():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(50, 1))
    w = rng.dirichlet(np.ones(4), 50)
    first = gaussian._data_sums(x, w, ((50, 4), (0,)))
    assert first is not None
    assert gaussian._data_sums(x, w, ((50, 4), (0,))) is first
    # the same weights summed over the other axis: not these sums (the general path's)
    assert gaussian._data_sums(x, w, ((50, 4), (1,))) is None
    ref = np.stack([np.ones(50), x[:, 0], x[:, 0] ** 2]) @ w
    assert all(same(s, r) for s, r in zip(first, ref, strict=True))


@pytest.mark.parametrize("trace", [True, False])
def test_small_mixture_fused_equals_the_gate_path(trace):
    """The fused Switch and the gate path reach the same posteriors and bounds bit for
    bit at K = 10, N = 200 (both read the short paths: the same numbers)."""
    import sys
    from pathlib import Path
    sys.path.append(str(Path(__file__).resolve().parents[2]))
    from benchmarks import mixture_reference as mix
    x = mix.data(10, 200)
    runs = [mix.model(x, 10).compile("vmp", init=["means"], fuse_switch=fuse).run(
        iterations=12, init=mix.factorflow_init(x, 10), tolerance=None, progress=False,
        trace=trace) for fuse in (True, False)]
    for name in ("weights", "means", "precs"):
        for a, b in zip(runs[0][name].eta, runs[1][name].eta, strict=True):
            assert same(a, b), name
    assert runs[0].trace == runs[1].trace and runs[0].log_evidence == runs[1].log_evidence


def test_a_clones_rows_are_its_compact_rows():
    """``gaussian._rows`` of a gate's clone (a K-vector broadcast over (N, K)) is what
    ``compact(always=True)`` and the equal-values test made: the same shape and values,
    a materialised copy shrunk as the view (a restored checkpoint)."""
    g = Gaussian(np.arange(10.0), variance=np.arange(1.0, 11.0))
    clone = g.broadcast_to((7, 10))
    rows, ref = gaussian._rows(clone), clone.compact(always=True)
    assert rows.batch_shape == ref.batch_shape == (1, 10)
    assert all(same(a, b) for a, b in zip(rows.eta, ref.eta, strict=True))
    copied = Gaussian.from_natural(*[np.array(e) for e in clone.eta])
    assert gaussian._rows(copied).batch_shape == (1, 10)
    flat = Gaussian.from_natural(np.full((7, 10), 2.0), np.full((7, 10), 0.5))
    assert gaussian._rows(flat).batch_shape == (1, 1)
    nan = Gaussian.from_natural(np.full((7, 10), np.nan), np.ones((7, 10)))
    assert gaussian._rows(nan).batch_shape == (7, 10)  # (NaN == NaN is False)
    empty = Gaussian.from_natural(np.zeros((0, 3)), np.ones((0, 3)))  # (an empty plate: a
    assert gaussian._rows(empty).batch_shape == (0, 1)                # minibatch of none)
