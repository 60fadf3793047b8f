"""The (N, K) responsibilities normalised over blocks of rows (``distributions.base``:
``_normalize_blocked`` of a ``rows_product``), with what the next messages and the bound
read of them accumulated block by block (Σ_n q_nk, Sᵀ q, Σ_k q_nk E[log w_k]), against
the same quantities computed from their definitions, and whole mixture runs with the
blocked path against the whole-array one (``_BLOCK_ELEMENTS`` set so that the same N
takes one or the other): the same posteriors and bound to 1e-10 relative, for N below
and above the threshold and N not a multiple of the block."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special

import factorflow as ff
from benchmarks import mixture_reference as mix
from benchmarks import vmixture_reference as vref
from factorflow.distributions import base
from factorflow.factors import discrete
from tests.conftest import assert_close

#: ``_BLOCK_ELEMENTS`` that no array reaches: the whole-array path everywhere
WHOLE = 10**12


def _blocks(monkeypatch: pytest.MonkeyPatch, elements: int) -> None:
    """Blocks of ``elements`` (N·K from 2 × that on are normalised block by block), and
    E[log w] added into the data's evidence as a product at any size (from
    ``COMPACT_ABOVE`` elements otherwise): small arrays take the large-N paths."""
    monkeypatch.setattr(base, "_BLOCK_ELEMENTS", elements)
    monkeypatch.setattr(base, "COMPACT_ABOVE", 1)


def _responsibilities(stats, coef, row, ask_sums: bool):
    """The Discrete posterior's naturals as a mixture makes them (the data's evidence a
    ``rows_product``, E[log w] added into it), normalised, and the three quantities read
    of its probabilities, through the kernels' own entry points."""
    if ask_sums:  # (a component's message asked for these statistics' weighted sums)
        base.weighted_rows(stats, np.zeros((stats.shape[0], coef.shape[1])))
    evidence = base.rows_product(stats, coef, ones=0)
    eta = base._add_naturals(evidence, row[None, :])
    logs = base.log_normalize(eta)
    q = base.recall("exp", logs)
    n = stats.shape[0]
    return (eta, logs, q, base.weighted_rows(stats, q),
            discrete._column_sums(q, ((n,), (0,))), discrete._rows_dot(q, row))


@settings(max_examples=60, deadline=None)
@given(k=st.integers(2, 12), j=st.integers(2, 7), block=st.integers(1, 120),
       extra=st.integers(-3, 90), seed=st.integers(0, 2**16), ask=st.booleans(),
       spread=st.sampled_from([1.0, 30.0, 400.0]))
def test_blocked_responsibilities_equal_their_definitions(k, j, block, extra, seed, ask,
                                                          spread):
    """Normalised logs, probabilities, Sᵀ q, Σ_n q and Σ_k q E[log w] from the blocked
    pass equal their definitions (1e-12 relative; the logs 1e-12 of the largest |logit|)
    with N·K just below, at and above the threshold (2 blocks), N not a multiple of the
    block; and equal the whole-array path's."""
    with pytest.MonkeyPatch.context() as mp:
        _blocks(mp, block * k)
        rng = np.random.default_rng(seed)
        n = max(1, 2 * block + extra)  # (2 blocks of rows: the threshold)
        stats = np.ones((n, j))
        stats[:, 1:] = rng.normal(size=(n, j - 1)) * 3.0
        stats.flags.writeable = False
        coef = rng.normal(size=(j, k)) * spread / 9.0
        row = np.log(rng.dirichlet(np.ones(k)))
        eta, logs, q, sums, columns, dots = _responsibilities(stats, coef, row, ask)
        want_eta = stats @ coef + row
        want_logs = want_eta - special.logsumexp(want_eta, axis=-1, keepdims=True)
        want_q = np.exp(want_logs)
        assert_close(eta, want_eta, rtol=1e-12, atol=1e-12 * np.max(np.abs(want_eta)))
        assert_close(logs, want_logs, rtol=1e-12, atol=1e-12 * np.max(np.abs(want_eta)))
        assert_close(q, want_q, rtol=1e-12, atol=1e-300)
        assert_close(sums, stats.T @ want_q, rtol=1e-12, atol=1e-12 * n * 9.0)
        assert_close(columns, want_q.sum(axis=0), rtol=1e-12, atol=1e-12 * n)
        assert_close(dots, want_q @ row, rtol=1e-12, atol=1e-12)
        if n >= 2 * block:  # (blocked: the three were made in the pass)
            assert base.recall("column_sums", q) is not None
            assert base.recall("rows_dot", q) is not None
            assert (base.recall("rows_sums", q) is not None) == ask
        # the whole-array path, the same numbers to rounding
        mp.setattr(base, "_BLOCK_ELEMENTS", WHOLE)
        whole = _responsibilities(stats, coef, row, ask)
        for got, ref in zip((eta, logs, q, sums, columns, dots), whole, strict=True):
            assert_close(got, ref, rtol=1e-12, atol=1e-12 * max(1.0, np.max(np.abs(ref))))


def test_weighted_rows_reads_the_sums_only_for_its_own_statistics():
    """Sums remembered with q are those of the statistics that made q: another array of
    statistics (equal values, other memory, or other values) gets its own product."""
    rng = np.random.default_rng(5)
    n, k = 40_000, 10
    stats = np.ones((n, 3))
    stats[:, 1:] = rng.normal(size=(n, 2))
    base.weighted_rows(stats, np.zeros((n, k)))
    eta = base._add_naturals(base.rows_product(stats, rng.normal(size=(3, k)), ones=0),
                             np.zeros((1, k)))
    q = base.recall("exp", base.log_normalize(eta))
    assert base.weighted_rows(stats, q) is base.recall("rows_sums", q)[1]
    other = stats.copy()
    assert_close(base.weighted_rows(other, q), other.T @ q, rtol=0, atol=0)
    other[:, 1] += 1.0
    assert_close(base.weighted_rows(other, q), other.T @ q, rtol=0, atol=0)
    # a row other than the one added: its own product
    row = rng.normal(size=k)
    assert np.array_equal(discrete._rows_dot(q, row), q @ row)


def _run_1d(k, n, sweeps, seed):
    x = mix.data(k, n, seed=seed)
    compiled = mix.model(x, k).compile("vmp", init=["means"], fuse_switch=False)
    return compiled.run(iterations=sweeps, init=mix.factorflow_init(x, k), tolerance=None,
                        progress=False)


def _run_vector(k, n, dim, sweeps, seed):
    x, start = vref.data(k, n, dim, seed=seed)
    compiled = vref.model(x, k).compile("vmp", init=["means"], fuse_switch=False)
    return compiled.run(iterations=sweeps, init=vref.factorflow_init(start), tolerance=None,
                        progress=False)


def _same_run(blocked, whole, names):
    assert_close(blocked.log_evidence, whole.log_evidence, rtol=1e-10, atol=0)
    for name, attrs in names.items():
        for attr in attrs:
            a, b = getattr(blocked[name], attr), getattr(whole[name], attr)
            assert_close(a, b, rtol=1e-10, atol=1e-10 * max(1.0, np.max(np.abs(b)))), (
                name, attr)


@settings(max_examples=12, deadline=None)
@given(k=st.integers(2, 9), block=st.integers(2, 60), extra=st.integers(-5, 130),
       sweeps=st.sampled_from([1, 2, 5]), seed=st.integers(0, 1000))
def test_1d_mixture_blocked_equals_whole_array(k, block, extra, sweeps, seed):
    """The 1-D mixture (Gaussian means, Gamma precisions, Switch(z)): its run with the
    responsibilities blocked (N·K across the threshold) equals the whole-array run."""
    warnings.simplefilter("ignore", ff.ConvergenceWarning)
    n = max(3, 2 * block + extra)
    with pytest.MonkeyPatch.context() as mp:
        _blocks(mp, block * k)
        blocked = _run_1d(k, n, sweeps, seed)
        mp.setattr(base, "_BLOCK_ELEMENTS", WHOLE)
        whole = _run_1d(k, n, sweeps, seed)
    if n >= 2 * block:  # (the blocked pass made the Dirichlet's counts)
        assert base.recall("column_sums", blocked["z"].probs) is not None
    _same_run(blocked, whole, {"weights": ["alpha"], "means": ["mean", "variance"],
                               "precs": ["shape", "rate"], "z": ["probs"]})


@pytest.mark.parametrize("k,n,dim,block", [(3, 41, 2, 7), (10, 401, 2, 64),
                                           (4, 130, 5, 65), (5, 99, 3, 50)])
def test_vector_mixture_blocked_equals_whole_array(k, n, dim, block):
    """The D-dimensional mixture (VectorGaussian means, Wishart precisions): blocked
    responsibilities (the data sums Σ_n q [1, x, x xᵀ] read from the pass) against the
    whole-array run, after 1, 3 and 8 sweeps; N just below and above 2 blocks too."""
    warnings.simplefilter("ignore", ff.ConvergenceWarning)
    for sweeps in (1, 3, 8):
        with pytest.MonkeyPatch.context() as mp:
            _blocks(mp, block * k)
            blocked = _run_vector(k, n, dim, sweeps, seed=k + n)
            # (the data sums the components read came from the pass: from the first
            # sweep after the initialisation, which asked for them)
            assert (base.recall("rows_sums", blocked["z"].probs) is not None) == (
                n >= 2 * block and sweeps > 1)
            mp.setattr(base, "_BLOCK_ELEMENTS", WHOLE)
            whole = _run_vector(k, n, dim, sweeps, seed=k + n)
        _same_run(blocked, whole, {"weights": ["alpha"], "means": ["mean", "covariance"],
                                   "precs": ["dof", "rate"], "z": ["probs"]})


def test_vector_mixture_blocked_equals_hand_written_at_scale():
    """At N = 40,000 (K = 10, D = 2: past the threshold with the default block) the
    generated program equals the hand-written updates after 1 and 4 sweeps (1e-10)."""
    k, n, dim = 10, 40_000, 2
    x, start = vref.data(k, n, dim, seed=1)
    compiled = vref.model(x, k).compile("vmp", init=["means"])
    assert n * k >= 2 * base._BLOCK_ELEMENTS
    for sweeps in (1, 4):
        got = compiled.run(iterations=sweeps, init=vref.factorflow_init(start),
                           tolerance=None, progress=False)
        ref = vref.hand_written(x, start, sweeps)
        assert_close(got["weights"].alpha, ref.alpha, rtol=1e-10, atol=1e-10)
        assert_close(got["means"].mean, ref.mean, rtol=1e-10, atol=1e-10)
        assert_close(got["precs"].rate, ref.rate, rtol=1e-10, atol=1e-10)
        assert_close(got["z"].probs, ref.r, rtol=0, atol=1e-10)
        assert_close(got.log_evidence, vref.bound(x, ref), rtol=1e-10, atol=0)
