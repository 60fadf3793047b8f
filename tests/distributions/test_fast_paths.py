"""The array fast paths the generated code leans on give the numbers of the plain ones:
moments of broadcast messages on their distinct elements, products that skip uniform
factors, remembered normalisations, scatters by ``np.bincount``."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special

from factorflow.distributions import Bernoulli, Discrete, Gamma, Gaussian
from factorflow.distributions.base import COMPACT_ABOVE, distinct, log_normalize, zeros_view
from factorflow.distributions.moments import E, Elog, V
from tests.conftest import assert_close

N, K = COMPACT_ABOVE, 3  # a clone of K messages over an (N, K) plate, large enough to compact


def test_moments_of_a_broadcast_message_equal_the_moments_of_its_copy():
    rng = np.random.default_rng(0)
    gamma = Gamma(rng.uniform(1, 5, K), rate=rng.uniform(1, 3, K))
    gauss = Gaussian(rng.normal(size=K), rng.uniform(0.5, 2, K))
    for d in (gamma, gauss):
        clone = d.broadcast_to((N, K))
        copy = type(d).from_natural(*(np.array(e) for e in clone.eta))  # no broadcast axis
        assert clone.compact().batch_shape == (1, K) and copy.compact() is copy
        assert np.array_equal(E(clone), E(copy)) and np.array_equal(V(clone), V(copy))
    assert np.array_equal(Elog(gamma.broadcast_to((N, K))), special.digamma(
        np.broadcast_to(gamma.shape_param, (N, K))) - np.log(gamma.rate))
    small = gauss.broadcast_to((5, K))  # below COMPACT_ABOVE: not worth compacting
    assert small.compact() is small


def test_distinct_shrinks_only_broadcast_axes():
    a = np.broadcast_to(np.arange(3.0), (4, 3))
    assert distinct(a).shape == (1, 3) and np.array_equal(distinct(a) + np.zeros((4, 3)), a)
    b = np.arange(12.0).reshape(4, 3)
    assert distinct(b) is b


def test_a_product_with_a_uniform_message_is_the_other_message():
    rng = np.random.default_rng(1)
    msg = Gaussian.from_natural(rng.normal(size=(6, 2)), rng.uniform(1, 2, (6, 2)))
    assert (Gaussian.uniform((6, 2)) * msg) is msg and (msg * Gaussian.uniform((6, 2))) is msg
    wider = Gaussian.uniform((3, 6, 2)) * msg  # the shape still broadcasts
    assert wider.batch_shape == (3, 6, 2) and np.array_equal(wider.eta[1][2], msg.eta[1])
    both = Bernoulli.uniform((4,)) * Bernoulli.from_natural(np.zeros(()))
    assert both.batch_shape == (4,) and np.all(both.is_uniform())
    explicit = Gaussian.from_natural(np.zeros((6, 2)), np.zeros((6, 2))) * msg
    assert explicit == msg
    assert not zeros_view((2,)).flags.writeable


def test_normalisation_is_remembered_and_exact():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(50, 4)) * 30
    out = log_normalize(x)
    assert_close(out, x - special.logsumexp(x, axis=-1, keepdims=True), rtol=0, atol=1e-13)
    assert log_normalize(x) is out and log_normalize(out) is out
    with pytest.raises(ValueError, match="read-only"):
        out[0, 0] = 1.0
    d = Discrete.from_natural(x)
    assert_close(d.probs, special.softmax(x, axis=-1), rtol=1e-13, atol=0)
    assert_close(Discrete.from_natural(np.array([[-np.inf, 0.0]])).probs, [[0.0, 1.0]])


def test_remembered_normalisations_are_forgotten_with_their_arrays():
    """A normalised array is its own normalisation: the memo table must not hold it (it
    did, and every sweep of a mixture leaked its (N, K) log-probabilities and their
    exponentials, which also made every sweep fault in fresh memory)."""
    import gc
    import weakref

    from factorflow.distributions import base
    gc.collect()  # (entries of earlier tests' arrays in reference cycles go first)
    before = len(base._MEMO)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(20, 3))
    d = Discrete.from_natural(x)
    out, probs = log_normalize(x), d.probs
    assert log_normalize(out) is out and d.probs is probs
    gone = weakref.ref(out)
    del x, d, out, probs
    gc.collect()
    assert gone() is None
    assert len(base._MEMO) == before


def test_scatter_by_bincount_equals_add_at():
    rng = np.random.default_rng(3)
    index = rng.integers(0, 7, 200)
    msg = Gaussian.from_natural(rng.normal(size=200), rng.uniform(0, 1, 200))
    got = msg.scatter_prod(index, 9)
    for e, g in zip(msg.eta, got.eta, strict=True):
        ref = np.zeros(9)
        np.add.at(ref, index, e)
        assert_close(g, ref, rtol=1e-13, atol=1e-13)


def test_exp_flushed_is_exp_above_the_cut_and_zero_below():
    """exp(x) for x ≥ −700, exactly 0 below (where NumPy's exp leaves its fast path),
    NaN and +inf kept; in place too; logsumexp with it equals SciPy's to 1e-15 on rows
    spanning −13,000 to 0."""
    from factorflow.distributions.base import exp_flushed, logsumexp

    rng = np.random.default_rng(2)
    x = np.concatenate([rng.uniform(-700, 5, 500), rng.uniform(-13_000, -700.001, 500),
                        [-np.inf, np.nan, np.inf, -700.0]])
    got = exp_flushed(x)
    above = x >= -700
    assert np.array_equal(got[above], np.exp(x[above]), equal_nan=True)
    assert np.all(got[~above & ~np.isnan(x)] == 0.0)
    y = x.copy()
    assert exp_flushed(y, out=y) is y and np.array_equal(y, got, equal_nan=True)
    rows = rng.uniform(-13_000, 0, (200, 40))
    rows[:, 0] = 0.0
    assert_close(logsumexp(rows, axis=-1), special.logsumexp(rows, axis=-1), 1e-15, 1e-15)


@pytest.mark.parametrize("family", ["Discrete", "Bernoulli", "Gamma"])
def test_all_proper_is_the_elementwise_verdict(family):
    """``all_proper`` (one reduction for Discrete and Bernoulli) is True exactly when every
    element is proper and no parameter is NaN, on arrays with NaN, ±inf and all -inf
    rows injected at random."""
    from factorflow import distributions as dist

    rng = np.random.default_rng(6)
    for trial in range(200):
        eta = [rng.normal(size=(7, 3)) for _ in range(2 if family == "Gamma" else 1)]
        for e in eta:
            for _ in range(rng.integers(0, 3)):
                e[rng.integers(7), rng.integers(3)] = rng.choice([np.nan, np.inf, -np.inf])
            if trial % 17 == 0:
                e[rng.integers(7)] = -np.inf
        d = getattr(dist, family).from_natural(*eta)
        want = bool(np.all(d.is_proper())) and not any(np.isnan(e).any() for e in eta)
        assert d.all_proper() is want or d.all_proper() == want


def test_discrete_entropy_and_gate_evidence_equal_the_elementwise_sums():
    """Discrete.entropy (one pass over the remembered log-probabilities) equals SciPy's
    entropy, and the VMP gate evidence Σ_k q_k ℓ_k its elementwise sum, to 1e-13, with
    zero-probability entries (−inf), where the one-pass forms fall back."""
    from scipy import stats

    from factorflow.distributions import Bernoulli
    from factorflow.factors import FACTORS

    rng = np.random.default_rng(7)
    x = rng.normal(size=(40, 6)) * 5
    x[::3, 2] = -np.inf
    d = Discrete.from_natural(x)
    assert_close(d.entropy(), stats.entropy(special.softmax(x, axis=-1), axis=-1),
                 rtol=1e-13, atol=1e-15)
    lw = rng.normal(size=(40, 6)) * 3
    gate = FACTORS["Gate.Cases"].evidence["vmp"]
    fn = getattr(gate, "fn", gate)
    q = special.softmax(x, axis=-1)
    assert_close(fn(cases=Bernoulli.from_natural(lw), selector=d), np.sum(q * lw, axis=-1),
                 rtol=1e-13, atol=1e-14)
    lw[6, 2] = -np.inf  # a case of probability 0 for the selector there: it adds 0
    with np.errstate(invalid="ignore"):
        want = np.sum(np.where(q == 0, 0.0, q * lw), axis=-1)
    assert_close(fn(cases=Bernoulli.from_natural(lw), selector=d), want, rtol=1e-13)


def test_a_gaussian_quotient_of_positive_precision_equals_the_general_quotient():
    """``Gaussian.__truediv__``'s two-difference path (every quotient precision > 0) and
    its mending (a precision of exactly 0 zeroes h; inf − inf is 0) give the bits of the
    base class's quotient followed by that mending, whichever elements take which path."""
    from factorflow.distributions.base import Distribution

    rng = np.random.default_rng(3)
    n = 64
    for case in range(7):
        h1, p1, h2, p2 = rng.normal(size=(4, n)) * 3
        if case % 2:  # every quotient precision positive: the fast path
            p1, p2 = np.abs(p1) + np.abs(p2) + 0.1, np.abs(p2)
        if case == 2:  # equal precisions, h left with rounding: mended to h = 0
            p1[:8], h1[:8] = p2[:8], h2[:8] + 1e-17
        if case == 3:  # point masses divided by themselves
            p1[:4] = p2[:4] = h1[:4] = h2[:4] = np.inf
        if case == 4:
            p1[:4] = np.nan
        if case == 5:  # an infinite h: its NaN test sends the quotient the general way
            h1[:4] = h2[:4] = np.inf
        a, b = Gaussian.from_natural(h1, p1), Gaussian.from_natural(h2, p2)
        got = a / b
        plain = Distribution.__truediv__(a, b)
        flat = plain.eta[1] == 0
        want = (np.where(flat, 0.0, plain.eta[0]), plain.eta[1])
        for g, w in zip(got.eta, want, strict=True):
            assert np.array_equal(g, w, equal_nan=True)
            assert np.array_equal(np.signbit(g) & ~np.isnan(g), np.signbit(w) & ~np.isnan(w))
    uniform = Gaussian.uniform((n,))  # (a broadcast zero: the general path)
    assert np.array_equal((a / uniform).eta[1], a.eta[1])


def test_a_product_divided_by_one_factor_is_the_other_factor():
    """A large product of two Gaussians remembers its factors weakly: dividing it by
    either one (the very arrays) gives the other exactly, the general quotient to
    rounding; anything else (a small product, a factor that has died, a divisor sharing
    only the precision array, a broadcast factor) takes the general quotient."""
    from factorflow.distributions.base import Distribution

    rng = np.random.default_rng(4)
    n = COMPACT_ABOVE
    a = Gaussian.from_natural(rng.normal(size=n), rng.uniform(0.5, 2, n))
    b = Gaussian.from_natural(rng.normal(size=n), rng.uniform(0.5, 2, n))
    prod = a * b
    for divisor, other in ((b, a), (a, b)):
        got = prod / divisor
        assert all(g is o for g, o in zip(got.eta, other.eta, strict=True))
        plain = Distribution.__truediv__(prod, divisor)
        for g, w in zip(got.eta, plain.eta, strict=True):
            assert_close(g, w, rtol=1e-14, atol=1e-15)
    lookalike = Gaussian.from_natural(b.eta[0].copy(), b.eta[1])  # same p, another h
    assert (prod / lookalike).eta[0] is not a.eta[0]
    small = a[:10] * b[:10]
    assert (small / b[:10]).eta[0] is not a.eta[0][:10]
    c = Gaussian.from_natural(rng.normal(size=n), rng.uniform(0.5, 2, n))
    prod_c = a * c
    del c  # the factor's arrays die with it: nothing to give back
    assert np.array_equal((prod_c / a).eta[1], Distribution.__truediv__(prod_c, a).eta[1])
    one = Gaussian.from_natural(np.ones(1), np.ones(1))  # broadcast over the product
    quotient = (a * one) / a
    assert quotient.batch_shape == (n,) and np.array_equal(
        quotient.eta[1], Distribution.__truediv__(a * one, a).eta[1])
