"""The operators' remembered per-message and per-data work (issue 14) gives the numbers
of the work done afresh: a clone's rows and moments, known data's sums and columns, a
gate's uniform case messages, the Switch's index; and each memo lives no longer than
what it is remembered for."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from factorflow.distributions import Bernoulli, Gamma, Gaussian, base
from factorflow.factors import gate
from factorflow.factors import gaussian as g
from factorflow.factors.common import plate_einsum
from tests.conftest import assert_close
from tests.factors.checks import op


def _entries(obj: object) -> int:
    return sum(1 for what, ident in base._MEMO if ident == id(obj))


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 300), seed=st.integers(0, 2**16))
def test_unweighted_sums_equal_the_general_path(n, seed):
    """Learning a Gaussian: the messages to the mean and the precision from N known
    points, read from the data's remembered (N, Σx, Σx²), equal the per-point messages
    multiplied over the plate (plate_einsum of the naturals) to 1e-12."""
    rng = np.random.default_rng(seed)
    x = rng.normal(3.0, 2.0, n)
    mean = Gaussian(rng.normal(), rng.uniform(0.1, 2.0))
    prec = Gamma(rng.uniform(1, 5), rate=rng.uniform(0.5, 2))
    reduce = ((n,), (0,))
    for target, other in (("mean", {"precision": prec}), ("precision", {"mean": mean})):
        fn = op("Gaussian", "vmp", target)
        fused = fn(sample=x, reduce=reduce, **other)
        each = fn(sample=x, **other)  # one message per point
        for got, e in zip(fused.eta, each.eta, strict=True):
            want = plate_einsum("", [(np.broadcast_to(e, (n,)), "")], reduce)
            assert_close(got, want, rtol=1e-12, atol=1e-12)
        again = fn(sample=x.reshape(n)[:], reduce=reduce, **other)  # a fresh view: found
        assert all(np.array_equal(a, b) for a, b in zip(again.eta, fused.eta, strict=True))
        other_data = fn(sample=x + 1.0, reduce=reduce, **other)  # other data: its own sums
        assert not np.array_equal(other_data.eta[-1 if target == "precision" else 0],
                                  fused.eta[-1 if target == "precision" else 0])


def test_data_memo_lives_as_long_as_the_data():
    x = np.random.default_rng(0).normal(size=(50, 1))
    cols = g._data_columns(x, rows=True)
    assert np.array_equal(cols, np.stack([np.ones(50), x[:, 0], x[:, 0] ** 2], axis=1))
    assert g._data_columns(x[:], rows=True) is cols and not cols.flags.writeable
    assert _entries(x) == 1
    del x, cols
    gc.collect()
    assert not any(what.startswith("gaussian_data_rows") for what, _ in base._MEMO)


def test_remembered_rows_and_moments_of_a_clone():
    def remembered() -> int:
        return sum(1 for what, _ in base._MEMO if what in ("gaussian_rows", "gaussian_mean",
                                                            "gaussian_precision"))
    gc.collect()
    before = remembered()
    rng = np.random.default_rng(1)
    k, n = 4, 30
    post = Gaussian(rng.normal(size=k), rng.uniform(0.5, 2, k))
    clone = post.broadcast_to((n, k))
    m, v = g._row_moments(clone, "mean")
    assert m.shape == (1, k) and np.array_equal(m[0], post.mean)
    assert np.array_equal(v[0], post.variance) and not m.flags.writeable
    assert g._row_moments(clone, "mean") is g._row_moments(clone, "mean")
    tau = Gamma(rng.uniform(1, 3, k), rate=rng.uniform(1, 2, k)).broadcast_to((n, k))
    e, elog = g._row_moments(tau, "precision")
    assert np.array_equal(e[0], Gamma(tau.eta[0][0] + 1, rate=-tau.eta[1][0]).mean)
    assert np.array_equal(elog[0], Gamma.from_natural(*(t[0] for t in tau.eta)).mean_log())
    # a copy with the axis materialised (a restored checkpoint) shrinks to the same rows
    copy = Gaussian.from_natural(*(np.array(e) for e in clone.eta))
    assert all(np.array_equal(a, b) for a, b in zip(g._row_moments(copy, "mean"),
                                                    (m, v), strict=True))
    # another message of other values is not confused with the first
    moved = Gaussian(post.mean + 1.0, post.variance).broadcast_to((n, k))
    assert np.array_equal(g._row_moments(moved, "mean")[0], m + 1.0)
    assert _entries(clone) == 2  # its rows and its moments, dropped with it
    del clone, copy, moved, tau
    gc.collect()
    assert remembered() == before


def test_a_gates_uniform_case_messages_are_one_per_shape():
    cases = Bernoulli.from_natural(np.log(np.full((6, 3), 1 / 3)))
    value = Gaussian(np.zeros(3), np.ones(3))
    index = np.arange(3)
    a = gate._uniform_cases(cases, value, index)
    b = gate._uniform_cases(cases, value, index)
    assert a is b and a.batch_shape == (6, 3) and np.all(a.is_uniform())
    assert base.is_zeros_view(a.eta) and not a.eta[0].flags.writeable
    wide = gate._uniform_cases(Bernoulli.from_natural(np.zeros((7, 3))), value, index)
    assert wide.batch_shape == (7, 3) and wide is not a


def test_the_switch_index_is_recognised_exactly():
    assert gate._is_switch(np.arange(5), 5) and gate._is_switch(np.arange(5.0), 5)
    assert not gate._is_switch(np.array([0, 1, 2, 4, 3]), 5)
    assert not gate._is_switch(np.arange(4), 5) and not gate._is_switch(
        np.arange(5)[None], 5)


def test_learning_a_gaussian_equals_the_hand_written_updates():
    """The whole program with the remembered sums: q(mean) and q(prec) after 30 sweeps
    equal the closed-form coordinate ascent (precision first, as the schedule) to 1e-12."""
    sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
    import learning_gaussian
    x = np.random.default_rng(2).normal(3.0, 2.0, 1000)
    got = learning_gaussian.build(x).compile("vmp").run(iterations=30, tolerance=None, progress=False)
    n, m, v = x.size, 0.0, 100.0
    for _ in range(30):
        a, b = 1.0 + 0.5 * n, 1.0 + 0.5 * (np.sum(x * x) - 2 * m * np.sum(x) + n * (m * m + v))
        post_prec = 0.01 + n * a / b
        m, v = (a / b) * np.sum(x) / post_prec, 1.0 / post_prec
    q_mean, q_prec = got.posteriors["mean"], got.posteriors["prec"]
    assert_close(q_mean.mean, m, rtol=1e-12) and assert_close(q_mean.variance, v, rtol=1e-12)
    assert_close(q_prec.shape_param, a, rtol=1e-12) and assert_close(q_prec.rate, b,
                                                                       rtol=1e-12)


def test_a_value_entered_twice_is_one_clone():
    """``Gate.EnterOne``'s clone of the same posterior over the same batch is the same
    immutable message (what is remembered of it is found again); another posterior, or
    another batch, gets its own."""
    enter = op("Gate.EnterOne", "vmp", "enter_one")
    cases = Bernoulli.from_natural(np.log(np.full((6, 3), 1 / 3)))
    value = Gaussian(np.arange(3.0), np.ones(3))
    index = np.arange(3)
    a = enter(cases=cases, value=value, index=index)
    assert a.batch_shape == (6, 3) and np.array_equal(a.mean, np.broadcast_to(value.mean,
                                                                             (6, 3)))
    assert enter(cases=cases, value=value, index=index) is a
    moved = Gaussian(np.arange(3.0) + 1.0, np.ones(3))
    b = enter(cases=cases, value=moved, index=index)
    assert b is not a and np.array_equal(b.mean[0], moved.mean)
    wide = enter(cases=Bernoulli.from_natural(np.zeros((9, 3))), value=value, index=index)
    assert wide.batch_shape == (9, 3)
