"""The mixture's fast paths (issue 14, item 1) against the general paths they replace.

A VMP ``Switch`` over a plate reads one (N, K) array of responsibilities per sweep:

* a Discrete posterior's normalisation computes its probabilities with it
  (``base._normalize_with_probs``: one exponential) — the general path normalises with
  ``logsumexp`` and exponentiates the normalised logs again;
* the mean's and the precision's messages of a Gaussian component read the same data
  sums Σ_n q_nk [1, x_n, x_n²], one BLAS product per sweep (``gaussian._data_sums``) —
  the general path sums each natural parameter with ``plate_einsum``;
* the Discrete posterior's product of the cases' evidence (an (N, 3) × (3, K) product
  with a column of ones, ``base.rows_product``) and E[log w] is the same BLAS product
  with E[log w] added into the coefficients (``base._add_naturals``) — the general path
  adds the (N, K) array and the row;
* the bound's Σ_k q_nk E[log w_k] is one matrix-vector product (``discrete._rows_dot``)
  — the general path an ``einsum`` with the row broadcast;
* the Dirichlet's message Σ_n q_nk is one matrix-vector product 1ᵀ q
  (``discrete._column_sums``) — the general path ``plate_einsum``.

Whole runs with the fast paths switched off (monkeypatched to the general ones) give
the same posteriors and bound to 1e-10, over random K, N, data and priors, with Gamma
and with known precisions; each operator's fast path equals the product of the
per-element messages it replaces.  The bound's refresh pruned to what is live gives the
same bits as the whole refresh, after every sweep.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import factorflow as ff
from factorflow.distributions import Gamma, Gaussian, base
from factorflow.factors import discrete, gaussian
from tests.conftest import assert_close


def _general_normalize(x: np.ndarray) -> np.ndarray:
    """log_normalize's general path: x − logsumexp(x), no probabilities remembered."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = x - base.logsumexp(x, axis=-1, keepdims=True)
    out.flags.writeable = False
    base.remember("log_normalize", out, out)
    return out


@st.composite
def mixtures(draw):
    k = draw(st.integers(2, 6))
    n = draw(st.integers(2, 80))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, draw(st.floats(0.5, 20.0)), k)
    x = rng.normal(centres[rng.integers(0, k, n)], draw(st.floats(0.05, 3.0)))
    prior = (draw(st.floats(-5.0, 5.0)), draw(st.floats(0.5, 1e3)))   # mean, variance
    gamma = (draw(st.floats(0.5, 5.0)), draw(st.floats(0.1, 5.0)))    # shape, rate
    known = draw(st.one_of(st.none(), st.floats(0.1, 10.0)))           # a known precision
    alpha = draw(st.floats(0.3, 5.0))
    # distinct starting means: components started equal are a symmetric, unstable fixed
    # point that rounding breaks one way or another (both paths right, not equal)
    return k, x, prior, gamma, known, alpha, np.sort(rng.choice(x, k)) + 0.5 * np.arange(k)


def _model(k, x, prior, gamma, known, alpha) -> ff.Model:
    with ff.Model("mixture") as m:
        weights = ff.Dirichlet("weights", np.full(k, alpha))
        with ff.Plate(ff.Range("k", k)):
            means = ff.Gaussian("means", prior[0], variance=prior[1])
            if known is None:
                precs = ff.Gamma("precs", gamma[0], rate=gamma[1])
        with ff.Plate(ff.Range("n", x.size)):
            z = ff.Discrete("z", weights)
            with ff.Switch(z):
                ff.Gaussian("x", means[z], precision=known if known is not None else precs[z],
                            observed=x)
    return m


@settings(max_examples=30, deadline=None, derandomize=True)
@given(mixtures(), st.booleans())
def test_mixture_runs_equal_the_general_paths(case, fuse):
    """On the fused Switch (the default) and on the gate path (``fuse_switch=False``, as
    the Dask backend runs it), drawn at random."""
    with pytest.MonkeyPatch.context() as mp:
        # (the fold into the BLAS product runs from COMPACT_ABOVE elements: from 1 here)
        mp.setattr(base, "COMPACT_ABOVE", 1)
        _check_run(case, fuse)


def _check_run(case, fuse: bool = False) -> None:
    k, x, prior, gamma, known, alpha, start = case
    compiled = _model(k, x, prior, gamma, known, alpha).compile("vmp", init=["means"],
                                                               fuse_switch=fuse)
    init = {"means": Gaussian(start, np.ones(k))}
    fast = compiled.run(iterations=15, init=init, tolerance=None, progress=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(base, "_normalize_with_probs", _general_normalize)
        mp.setattr(gaussian, "_data_sums", lambda *args: None)
        mp.setattr(base, "_add_naturals", lambda a, b: a + b)
        mp.setattr(discrete, "_rows_dot", lambda q, e: np.einsum("...k,...k->...", q, e))
        mp.setattr(discrete, "_column_sums", lambda *args: None)
        general = compiled.run(iterations=15, init=init, tolerance=None, progress=False)
    for name in ("weights", "means", "z") + (("precs",) if known is None else ()):
        for a, b in zip(fast[name].eta, general[name].eta, strict=True):
            assert_close(a, b, rtol=1e-10, atol=1e-10)
    assert_close(fast.log_evidence, general.log_evidence, rtol=1e-10, atol=1e-9)
    assert_close(np.sum(fast["z"].probs, axis=-1), np.ones(x.size), rtol=0, atol=1e-13)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(mixtures(), st.booleans())
def test_mixture_runs_with_the_pruned_refresh_are_bit_identical(case, fuse):
    """The bound's refresh pruned to what is live (``codegen.liveness``) against the whole
    refresh: the posteriors and the bound after every sweep bit for bit; and a run
    without the bound (``trace=False``) gives the same posteriors (fused or gate path)."""
    from tests.codegen.test_liveness import _check, _whole_refresh
    k, x, prior, gamma, known, alpha, start = case
    compiled = _model(k, x, prior, gamma, known, alpha).compile("vmp", init=["means"],
                                                               fuse_switch=fuse)
    assert len(compiled.source) < len(_whole_refresh(compiled).source)
    _check(compiled, {"init": {"means": Gaussian(start, np.ones(k))}}, 12)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.integers(1, 7), st.integers(2, 60), st.integers(0, 2**16), st.booleans())
def test_switch_messages_equal_the_products_of_per_element_messages(k, n, seed, known):
    """Σ_n q_nk η_nk of the per-element (N, K) messages (the general path) against the
    fused data sums, for the mean's and the precision's messages."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 5.0, (n, 1))
    q = rng.dirichlet(np.ones(k), n)
    mean = Gaussian(rng.normal(0.0, 3.0, k), rng.uniform(0.1, 2.0, k)).broadcast_to((n, k))
    precision = 2.5 if known else Gamma(rng.uniform(0.5, 4.0, k),
                                        rate=rng.uniform(0.5, 2.0, k)).broadcast_to((n, k))
    reduce = ((n, k), (0,))
    assert gaussian._data_sums(x, q, reduce) is not None
    for op, args in ((gaussian._mean_vmp, dict(sample=x, precision=precision)),
                     (gaussian._precision_vmp, dict(sample=x, mean=mean))):
        fused = op(**args, reduce=reduce, weights=q)
        each = op(**args)
        each = each.broadcast_to((n, k)) if each.batch_shape != (n, k) else each
        for a, e in zip(fused.eta, each.eta, strict=True):
            assert_close(a, np.sum(q * np.broadcast_to(e, (n, k)), axis=0), rtol=1e-10,
                         atol=1e-10)


def test_data_sums_are_made_once_per_weights_and_data():
    """The precision's and the mean's messages of a sweep read one product: remembered
    per weights array and data memory, not for other data."""
    rng = np.random.default_rng(0)
    x, y, q = rng.normal(size=(30, 1)), rng.normal(size=(30, 1)), rng.dirichlet(np.ones(4), 30)
    reduce = ((30, 4), (0,))
    first = gaussian._data_sums(x, q, reduce)
    assert gaussian._data_sums(x[:, :], q, reduce) is first  # a new view of the same data
    other = gaussian._data_sums(y, q, reduce)
    assert other is not first
    assert_close(other[1], y[:, 0] @ q, rtol=1e-13, atol=1e-13)
    assert gaussian._data_sums(x, q.copy(), ((30, 4), (1,))) is None  # other reductions


def test_discrete_probabilities_come_with_the_normalisation():
    """One exponential: the probabilities of a normalised array are remembered with it,
    equal to softmax, rows summing to 1; −inf entries are exactly 0."""
    from scipy import special
    rng = np.random.default_rng(1)
    x = rng.normal(size=(40, 5)) * 400
    x[3, 2] = -np.inf
    d = ff.distributions.Discrete.from_natural(x)
    out = base.log_normalize(x)
    assert base.recall("exp", out) is d.probs
    assert_close(d.probs, special.softmax(x, axis=-1), rtol=1e-12, atol=1e-300)
    assert d.probs[3, 2] == 0.0
    assert_close(out, x - special.logsumexp(x, axis=-1, keepdims=True), rtol=0, atol=1e-10)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.integers(1, 60), st.integers(1, 9), st.integers(1, 4), st.integers(0, 2**16),
       st.floats(0.1, 200.0))
def test_a_row_added_to_a_rows_product_is_the_product_with_the_row_folded_in(n, k, j, seed,
                                                                             scale):
    """(N, J) × (J, K) with a column of ones, plus a K-row (as a Discrete posterior's
    product of a gate's case evidence and a Dirichlet's E[log w]): one BLAS product with
    the row in the ones column's coefficients, equal to the sum to the rounding of the
    largest term, remembered as such (so that a second row folds too); the operands
    stay as they were."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(base, "COMPACT_ABOVE", 1)  # (from 4,096 elements otherwise)
        _check_fold(n, k, j, seed, scale)


def _check_fold(n: int, k: int, j: int, seed: int, scale: float) -> None:
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, scale, (n, j))
    x[:, 0] = 1.0
    coef = rng.normal(0.0, 3.0, (j, k))
    kept = coef.copy()
    prod = base.rows_product(x, coef, ones=0)
    row, row2 = rng.normal(0.0, 5.0, k), rng.normal(0.0, 5.0, (1, k))
    for a, b in ((prod, row), (row, prod), (prod, np.broadcast_to(row, (n, k)))):
        got = base._add_naturals(a, b)
        assert got is not prod and base.recall("rows_product", got) is not None
        tol = 1e-15 * 8 * (np.abs(x) @ np.abs(coef) + np.abs(row)).max()
        assert_close(got, prod + row, rtol=0, atol=tol)
    twice = base._add_naturals(base._add_naturals(prod, row), row2)
    assert base.recall("rows_product", twice) is not None
    assert_close(twice, prod + row + row2, rtol=0,
                 atol=1e-15 * 16 * (np.abs(x) @ np.abs(coef) + 10.0).max())
    assert np.array_equal(coef, kept) and base.recall("rows_product", prod)[1] is coef
    d = ff.distributions.Discrete
    assert_close((d.from_natural(row) * d.from_natural(prod)).eta[0], prod + row, rtol=0,
                 atol=1e-15 * 8 * (np.abs(x) @ np.abs(coef) + np.abs(row)).max())


def test_other_sums_take_the_general_addition(monkeypatch):
    """Bit for bit a + b: an array that is not a remembered product, a second operand
    that varies along the rows, a row with an infinite entry, and a product under
    ``COMPACT_ABOVE`` elements (where the sum is cheaper than the BLAS call)."""
    rng = np.random.default_rng(3)
    x = np.column_stack([np.ones(20), rng.normal(size=(20, 2))])
    prod = base.rows_product(x, rng.normal(size=(3, 4)), ones=0)
    plain, full = prod.copy(), rng.normal(size=(20, 4))
    row = rng.normal(size=4)
    inf_row = row.copy()
    inf_row[1] = -np.inf
    for a, b in ((prod, row), (plain, row), (prod, full), (prod, inf_row),
                 (prod, full[:1] + full)):
        got = base._add_naturals(a, b)
        assert np.array_equal(got, a + b) and base.recall("rows_product", got) is None
        monkeypatch.setattr(base, "COMPACT_ABOVE", 1)  # (the first, small, as it is)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.integers(1, 50), st.integers(1, 8), st.integers(0, 2**16),
       st.sampled_from(["row", "row2", "view", "full", "vector"]))
def test_the_bound_discrete_term_by_a_matrix_vector_product(n, k, seed, kind):
    """Σ_k q_nk E[log p_k] (``discrete._rows_dot``) against the einsum it replaces, to
    1e-13 relative, for every shape E[log p] comes in; and the factor's evidence with a
    zero probability against log 0 (the elementwise way: 0 · −inf adds nothing)."""
    rng = np.random.default_rng(seed)
    q = rng.dirichlet(np.ones(k), n)
    e = {"row": rng.normal(size=k), "row2": rng.normal(size=(1, k)),
         "view": np.broadcast_to(rng.normal(size=k), (n, k)),
         "full": rng.normal(size=(n, k)), "vector": rng.normal(size=k)}[kind]
    if kind == "vector":
        q = q[0]
    got, want = discrete._rows_dot(q, e), np.einsum("...k,...k->...", q, e)
    assert got.shape == want.shape
    assert_close(got, want, rtol=1e-13, atol=1e-13 * float(np.abs(e).max()))
    sample = ff.distributions.Discrete(q)
    probs = np.full(k, 1.0 / k)
    if k > 1:
        probs[0], probs[1] = 0.0, 2.0 / k
        sample = ff.distributions.Discrete(np.where(np.arange(k) == 0, 0.0, q + 0.1))
    with np.errstate(divide="ignore", invalid="ignore"):
        logp = np.log(probs)
        want = np.sum(np.where(sample.probs == 0, 0.0, sample.probs * logp), axis=-1)
    assert_close(discrete._average_log_factor(sample, probs), want, rtol=1e-13, atol=1e-13)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.integers(1, 40), st.integers(1, 6), st.integers(0, 2**16),
       st.sampled_from([None, np.nan, np.inf, -np.inf, "row"]), st.booleans())
def test_normalised_logs_without_nan_skip_the_cases_properness_pass(n, k, seed, bad, big):
    """A normalisation whose row maxima are all finite is remembered NaN-free, and the
    properness of a Bernoulli with those log-odds (a gate's cases) is then read from
    that: the verdict equals the elementwise one (no NaN anywhere), for every kind of
    bad entry, on the whole-array and the blocked normalisation."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 30.0, (n * (700 if big else 1), k))
    if bad == "row":
        x[0] = -np.inf  # every value ruled out: the row is NaN once normalised
    elif bad is not None:
        x[rng.integers(x.shape[0]), rng.integers(k)] = bad
    out = base.log_normalize(x)
    nan_free = base.recall("nan_free", out) is not None
    assert nan_free == bool(np.all(np.isfinite(np.max(x, axis=-1))))
    cases = ff.distributions.Bernoulli.from_natural(out)
    assert cases.all_proper() == (not np.isnan(out).any())
    if nan_free:
        assert not np.isnan(out).any()


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.integers(1, 300), st.integers(1, 12), st.integers(0, 2**16))
def test_the_dirichlet_counts_by_a_matrix_vector_product(n, k, seed):
    """Σ_n q_nk (``discrete._column_sums``) against ``plate_einsum``, 1e-13 relative;
    other reductions and weighted counts keep the general path."""
    from factorflow.factors.common import plate_einsum
    rng = np.random.default_rng(seed)
    q = rng.dirichlet(np.ones(k), n)
    got = discrete._column_sums(q, ((n,), (0,)))
    assert_close(got, plate_einsum("i", [(q, "i")], ((n,), (0,))), rtol=1e-13, atol=1e-13)
    message = discrete._probs_vmp(ff.distributions.Discrete(q),
                                  ff.distributions.Dirichlet(np.ones(k)), reduce=((n,), (0,)))
    assert_close(message.eta[0], q.sum(axis=0), rtol=1e-13, atol=1e-13)
    assert discrete._column_sums(q[None], ((1, n), (1,))) is None
    assert discrete._column_sums(q, ((n, 1), (0,))) is None
