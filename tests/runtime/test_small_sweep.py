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
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy import special

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


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 8).flatmap(lambda k: st.tuples(
    hnp.arrays(float, st.integers(2, 40), elements=st.floats(-50, 50)),
    hnp.arrays(float, k, elements=st.floats(-20, 20)),
    hnp.arrays(float, k, elements=st.floats(0.05, 20)),
    hnp.arrays(float, k, elements=st.floats(0.5, 30)),
    hnp.arrays(float, k, elements=st.floats(0.5, 30)))))
def test_fused_logits_of_the_plain_mixture_are_the_general_ones(arrays):
    """The fused Switch's logits by ``gaussian.evidence_product`` of the components'
    remembered moments (``fused_switch._plain_rows``) are the Gaussian's general
    evidence operator's bit for bit, and E log N(x_n; μ_k, 1/τ_k) by its definition."""
    from factorflow.factors import fused_switch
    from factorflow.runtime.kernels import NAMESPACE
    x, mean, var, shape, rate = arrays
    laid = NAMESPACE["align_plates"](x, (0,), 2)
    means, precs = Gaussian(mean, variance=var), Gamma(shape, rate=rate)
    # K-vectors told apart in O(1): their first two natural parameters differ (a mean of
    # 5e-324 over a variance of 2 is h = 0, as a mean of 0 is: not told apart)
    assume(all(any(e[0] != e[1] for e in v.eta) for v in (means, precs)))
    general = gaussian._average_log_factor(laid, means, precs)     # (makes the data's rows)
    fresh = (Gaussian.from_natural(*(e.copy() for e in means.eta)),
             Gamma.from_natural(*(e.copy() for e in precs.eta)))
    assert fused_switch._plain_rows(laid, *fresh) is not None      # (the short path)
    got = fused_switch._case_log_likelihood(laid, *fresh)
    assert same(got, general)
    tau, elog = shape / rate, special.digamma(shape) - np.log(rate)
    ell = 0.5 * elog - 0.5 * np.log(2 * np.pi) - 0.5 * tau * ((x[:, None] - mean) ** 2 + var)
    scale = 1.0 + tau * (x[:, None] ** 2 + mean ** 2 + var)  # (the terms that cancel)
    assert np.all(np.abs(got - ell) <= 1e-13 * scale)


def test_fused_logits_take_the_general_path_outside_the_plain_mixture():
    """Components that are not K-vector posteriors of their families (a broadcast view, a
    known precision) and data without remembered rows: ``_plain_rows`` is None and the
    logits are the general operator's."""
    from factorflow.factors import fused_switch
    from factorflow.runtime.kernels import NAMESPACE
    x = np.linspace(-3.0, 5.0, 11)
    laid = NAMESPACE["align_plates"](x, (0,), 2)
    means = Gaussian(np.arange(3.0), variance=np.ones(3))
    precs = Gamma(np.arange(2.0, 5.0), rate=np.ones(3))
    assert fused_switch._plain_rows(laid, means, precs) is None   # (no rows made yet)
    gaussian._average_log_factor(laid, means, precs)
    assert fused_switch._plain_rows(laid, means, precs) is not None
    flat = Gamma(2.0, rate=1.0).broadcast_to((3,))                 # (a view: not distinct)
    assert fused_switch._plain_rows(laid, means, flat) is None
    assert same(fused_switch._case_log_likelihood(laid, means, flat),
                gaussian._average_log_factor(laid, means, flat))


def test_data_sums_first_read_by_the_datas_identity_is_the_general_one():
    """The first data sums of a sweep, found through the columns remembered on the
    laid-out data array itself, are the general path's (a fresh view of the same data,
    which finds its columns by their memory) bit for bit, and [1, x, x²]ᵀ w."""
    from factorflow.distributions.base import recall
    from factorflow.runtime.kernels import NAMESPACE
    rng = np.random.default_rng(5)
    x = rng.normal(size=60)
    laid = NAMESPACE["align_plates"](x, (0,), 2)
    reduce = ((60, 4), (0,))
    gaussian._data_sums(laid, rng.dirichlet(np.ones(4), 60), reduce)  # (the columns made)
    assert recall("gaussian_columns_of", laid) is not None
    w = rng.dirichlet(np.ones(4), 60)
    fast = gaussian._data_sums(laid, w, reduce)
    general = gaussian._data_sums(x.reshape(60, 1), w.copy(), reduce)
    assert all(same(a, b) for a, b in zip(fast, general, strict=True))
    ref = np.stack([np.ones(60), x, x * x]) @ w
    assert all(same(a, b) for a, b in zip(fast, ref, strict=True))
    # another plate size (a different reduce): not these columns
    assert gaussian._data_sums(laid, w[:30], ((30, 4), (0,))) is None


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(float, st.tuples(st.integers(1, 30), st.integers(1, 12)),
                  elements=st.one_of(st.floats(-800, 800), st.just(-np.inf))))
def test_normalize_rows_known_finite_is_the_guarded_path(x):
    """``_normalize_rows`` with every row maximum finite (told by ``_finite``) skips
    the error-state guard: the same logs and probabilities bit for bit, no warning."""
    import warnings
    top = base.last_axis_max(x) if x.shape[-1] > 1 else x.copy()
    assume(base._finite(top))
    guarded = base._normalize_rows(x, top)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="raise"):
            fast = base._normalize_rows(x, top, finite=True)
    assert same(fast[0], guarded[0]) and same(fast[1], guarded[1])
