"""The D-dimensional Gaussian mixture (VectorGaussian means, Wishart precisions,
``ff.Switch(z)``) under VMP: the generated program against the hand-written NumPy updates
of ``benchmarks/vmixture_reference.py`` (the reference ``benchmarks/bench_vectors.py``
times), after every number of sweeps, to 1e-10."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special

import factorflow as ff
from benchmarks.vmixture_reference import (
    data,
    factorflow_init,
    hand_written,
    hand_written_blocked,
    model,
)
from factorflow.distributions import VectorGaussian, Wishart, multivariate
from factorflow.factors import vector_gaussian
from tests.conftest import assert_close
from tests.runtime.vmixture_checks import assert_hand_written


@pytest.mark.parametrize("k,n,dim", [(2, 9, 1), (3, 40, 2), (4, 60, 5), (5, 80, 10)],
                         ids=["k2-n9-d1", "k3-n40-d2", "k4-n60-d5", "k5-n80-d10"])
def test_generated_vector_mixture_equals_the_hand_written_updates(k, n, dim):
    x, start = data(k, n, dim, seed=k)
    compiled = model(x, k).compile("vmp", init=["means"])
    for sweeps in (1, 2, 7, 20):
        got = compiled.run(iterations=sweeps, init=factorflow_init(start), tolerance=None,
                           progress=False)
        assert_hand_written(got, x, start, sweeps)


@pytest.mark.parametrize("k,n,dim,block", [(3, 40, 2, 7), (4, 300, 3, 64), (5, 90, 10, 90)])
def test_blocked_hand_written_reference_is_the_plain_one(k, n, dim, block):
    """``hand_written_blocked`` (the responsibilities and their sums fused over blocks of
    rows, the benchmark's large-N reference) equals ``hand_written`` after 1–10 sweeps,
    with a last block shorter than the others (1e-10)."""
    x, start = data(k, n, dim, seed=k + n)
    for sweeps in (1, 3, 10):
        plain, blocked = hand_written(x, start, sweeps), hand_written_blocked(
            x, start, sweeps, block=block)
        for name in ("alpha", "mean", "cov", "dof", "rate", "r"):
            assert_close(getattr(blocked, name), getattr(plain, name), rtol=1e-10,
                         atol=1e-12)


# ----- the fast paths against the general ones -----------------------------------------
@st.composite
def vector_mixtures(draw):
    k = draw(st.integers(2, 5))
    n = draw(st.integers(2, 60))
    dim = draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    centres = rng.normal(0.0, draw(st.floats(0.5, 10.0)), (k, dim))
    x = centres[rng.integers(0, k, n)] + draw(st.floats(0.1, 3.0)) * rng.normal(size=(n, dim))
    prior = (rng.normal(size=dim), draw(st.floats(1e-3, 10.0)))     # mean, precision scale
    wishart = (dim - 1.0 + draw(st.floats(0.5, 5.0)), draw(st.floats(0.1, 5.0)))  # ν, rate
    a = rng.normal(size=(dim, dim))
    known = draw(st.one_of(st.none(), st.just(a @ a.T + dim * np.eye(dim))))  # known Λ
    alpha = draw(st.floats(0.3, 5.0))
    # distinct starting means (components started equal are a symmetric, unstable fixed
    # point that rounding breaks one way or another: both paths right, not equal)
    start = x[rng.choice(n, k, replace=n < k)] + 0.5 * np.arange(k)[:, None]
    return k, x, prior, wishart, known, alpha, start


def _model(k, x, prior, wishart, known, alpha) -> ff.Model:
    dim = x.shape[1]
    with ff.Model("vector_mixture") as m:
        weights = ff.Dirichlet("weights", np.full(k, alpha))
        with ff.Plate(ff.Range("k", k)):
            means = ff.VectorGaussian("means", prior[0], precision=prior[1] * np.eye(dim))
            if known is None:
                precs = ff.Wishart("precs", wishart[0], rate=wishart[1] * np.eye(dim))
        with ff.Plate(ff.Range("n", len(x))):
            z = ff.Discrete("z", weights)
            with ff.Switch(z):
                ff.VectorGaussian("x", means[z], precision=known if known is not None
                                  else precs[z], observed=x)
    return m


@settings(max_examples=30, deadline=None, derandomize=True)
@given(vector_mixtures(), st.booleans())
def test_vector_mixture_runs_equal_the_general_paths(case, fuse):
    """Whole runs with the sufficient-statistic paths of ``factors/vector_gaussian.py``
    switched off (``_switch_data`` returning None: the (N, K, D) differences and
    weighted einsums of before) give the same posteriors and bound to 1e-10, on the
    fused Switch (the default) and the gate path (``fuse_switch=False``), drawn."""
    k, x, prior, wishart, known, alpha, start = case
    compiled = _model(k, x, prior, wishart, known, alpha).compile("vmp", init=["means"],
                                                               fuse_switch=fuse)
    init = factorflow_init(start)
    fast = compiled.run(iterations=12, init=init, tolerance=None, progress=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(vector_gaussian, "_switch_data", lambda sample: None)
        general = compiled.run(iterations=12, init=init, tolerance=None, progress=False)
    for name in ("weights", "means", "z") + (("precs",) if known is None else ()):
        for a, b in zip(fast[name].eta, general[name].eta, strict=True):
            assert_close(a, b, rtol=1e-10, atol=1e-10 * max(1.0, float(np.max(np.abs(b)))))
    assert_close(fast.log_evidence, general.log_evidence, rtol=1e-10, atol=1e-9)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.integers(1, 6), st.integers(2, 50), st.integers(1, 5), st.integers(0, 2**16),
       st.sampled_from(["wishart", "known", "shared", "materialised"]))
def test_switch_operators_equal_the_elementwise_formulas(k, n, dim, seed, kind):
    """The (N, K) evidence and the weighted, summed messages to the components' means and
    precisions against the per-(n, k) formulas: with Wishart precisions (a gate's clones,
    broadcast views), one known precision per component, one shared by all, and clones
    materialised as a restored checkpoint holds them (equal rows, no stride 0)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 5.0, (n, 1, dim))
    q = rng.dirichlet(np.ones(k), n)
    a = rng.normal(size=(k, dim, dim))
    spd = a @ np.swapaxes(a, 1, 2) + dim * np.eye(dim)
    mean = VectorGaussian(rng.normal(0.0, 3.0, (k, dim)), spd / 3.0).broadcast_to((n, k))
    precision = {"wishart": Wishart(dim + rng.uniform(0.0, 4.0, k), spd).broadcast_to((n, k)),
                 "known": spd[None], "shared": spd[0],
                 "materialised": Wishart(dim + rng.uniform(0.0, 4.0, k), spd)}[kind]
    if kind == "materialised":
        mean = VectorGaussian.from_natural(*(np.array(e) for e in mean.eta))
        precision = Wishart.from_natural(*(np.array(np.broadcast_to(e, (n,) + e.shape))
                                           for e in precision.eta))
    reduce = ((n, k), (0,))
    assert vector_gaussian._switch_sums(x, q, reduce) is not None
    assert vector_gaussian._switch_evidence(x, mean, precision) is not None
    ops = vector_gaussian.VECTOR_GAUSSIAN
    evidence = ops.evidence["vmp"]
    fast = evidence(sample=x, mean=mean, precision=precision)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(vector_gaussian, "_switch_data", lambda sample: None)
        slow = evidence(sample=x, mean=mean, precision=precision)
        each = {name: ops.operators[("vmp", name)].fn(sample=x, **{other: arg})
                for name, other, arg in (("mean", "precision", precision),
                                         ("precision", "mean", mean))}
    assert fast.shape == (n, k)
    assert_close(fast, slow, rtol=1e-10, atol=1e-10 * float(np.max(np.abs(slow))))
    for name, other, arg in (("mean", "precision", precision), ("precision", "mean", mean)):
        fused = ops.operators[("vmp", name)].fn(sample=x, **{other: arg}, reduce=reduce,
                                                 weights=q)
        msg = each[name]
        for got, e in zip(fused.eta, msg.eta, strict=True):
            e = np.broadcast_to(e, (n, k) + e.shape[-2:])
            want = np.einsum("nk,nkij->kij", q, e)
            assert_close(got, want, rtol=1e-10, atol=1e-10 * float(np.max(np.abs(want))))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.integers(1, 8), st.integers(1, 6), st.integers(0, 2**16),
       st.sampled_from(["spd", "indefinite", "nan", "singular"]))
def test_positive_definite_agrees_with_the_smallest_eigenvalue(dim, batch, seed, kind):
    """The Cholesky test of propriety against the eigenvalues it replaces, with one bad
    matrix in the stack (not positive definite, NaN, singular)."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(batch, dim, dim))
    m = a @ np.swapaxes(a, 1, 2) + 0.1 * np.eye(dim)
    bad = int(rng.integers(batch))
    if kind == "indefinite":
        m[bad] -= (np.linalg.eigvalsh(m[bad])[-1] + 1.0) * np.eye(dim) * 0.5
        m[bad, 0, 0] = -1.0
    elif kind == "nan":
        m[bad, dim - 1, 0] = np.nan
    elif kind == "singular":
        v = rng.normal(size=dim)
        m[bad] = np.outer(v, v) if dim > 1 else 0.0
    if kind == "nan":  # not positive definite (eigvalsh alone would raise on NaN)
        assert not multivariate.positive_definite(m)[bad]
        assert np.all(multivariate.positive_definite(m)[np.arange(len(m)) != bad])
        return
    got = multivariate.positive_definite(m)
    assert got.shape == (batch,)
    if kind == "singular":  # (rounding decides the sign of a zero eigenvalue)
        assert not np.delete(got, bad).size or np.all(np.delete(got, bad))
    else:
        assert np.array_equal(got, multivariate.smallest_eigenvalue(m) > 0)
        assert got[bad] == (kind == "spd")


def test_moments_are_remembered_by_memory_and_read_only():
    """A posterior's moments, read again through a new object or a view of the same
    memory (a gate's clone), are not computed again; other memory is; the remembered
    arrays cannot be written."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(4, 3, 3))
    spd = a @ np.swapaxes(a, 1, 2) + np.eye(3)
    w = Wishart(np.full(4, 5.0), spd)
    first = w.mean
    again = Wishart.from_natural(*w.eta).mean
    assert again is first
    assert not first.flags.writeable
    clone = w.broadcast_to((7, 4))
    assert_close(clone.mean[3], first, rtol=0, atol=0)
    other = Wishart.from_natural(*(np.array(e) for e in w.eta))
    assert other.mean is not first
    assert_close(other.mean, first, rtol=0, atol=0)
    g = VectorGaussian(rng.normal(size=(4, 3)), spd)
    m, cov = g.mean_and_covariance()
    assert VectorGaussian.from_natural(*g.eta).mean_and_covariance()[1] is cov
    assert_close(cov, spd, rtol=1e-12, atol=1e-12)  # (the second argument: the covariance)


# ----- the fused Switch's (K,) components: short paths against the general ones ---------
def _components(rng, k, dim):
    """(K,) VectorGaussian means and Wishart precisions, random and proper."""
    a = rng.normal(size=(k, dim, dim))
    spd = a @ np.swapaxes(a, 1, 2) + dim * np.eye(dim)
    mean = VectorGaussian(rng.normal(0.0, 3.0, (k, dim)), spd / rng.uniform(1.0, 5.0))
    precision = Wishart(dim + rng.uniform(0.5, 5.0, k), spd[::-1] + np.eye(dim))
    return mean, precision


def _expected_precision(precision):
    """(E Λ, E log |Λ|) of Wishart(ν, R) from their definitions: ν R⁻¹ and
    Σ_i ψ((ν − i)/2) + D log 2 − log |R| (SciPy's digamma, LAPACK's inverse)."""
    nu, rate = precision.dof, precision.rate
    dim = rate.shape[-1]
    elog = (sum(special.digamma((nu - i) / 2.0) for i in range(dim)) + dim * np.log(2.0)
            - np.linalg.slogdet(rate)[1])
    return nu[:, None, None] * np.linalg.inv(rate), elog


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.integers(1, 4), st.integers(1, 3), st.integers(2, 30), st.integers(0, 2**16))
def test_component_short_paths_equal_the_general_ones(k, dim, n, seed):
    """The fused Switch's operators on its (K,) posteriors (``distinct_components``: their
    own rows, their moments read in one lookup) give the numbers of the general path —
    the same posteriors as a gate's (N, K) clones and as materialised copies
    (``gaussian._rows``' comparisons) — bit for bit, and the evidence its definition,
    ½ E log|Λ_k| − (D/2) log 2π − ½ ((x_n − E μ_k)ᵀ E Λ_k (x_n − E μ_k) + tr(E Λ_k Cov μ_k)),
    to 1e-10."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 3.0, (n, 1, dim))
    q = rng.dirichlet(np.ones(k), n)
    mean, precision = _components(rng, k, dim)
    assert vector_gaussian.distinct_components(mean) == (k > 1)
    ops = vector_gaussian.VECTOR_GAUSSIAN
    reduce = ((n, k), (0,))

    def run(m, p):
        return (ops.evidence["vmp"](sample=x, mean=m, precision=p),
                ops.operators[("vmp", "mean")].fn(sample=x, precision=p, reduce=reduce,
                                                  weights=q),
                ops.operators[("vmp", "precision")].fn(sample=x, mean=m, reduce=reduce,
                                                       weights=q))

    short = run(mean, precision)
    for layout in ("clone", "copy"):
        m, p = mean.broadcast_to((n, k)), precision.broadcast_to((n, k))
        if layout == "copy":
            m, p = (type(d).from_natural(*(np.array(e) for e in d.eta)) for d in (m, p))
        general = run(m, p)
        assert np.array_equal(np.broadcast_to(short[0], (n, k)), general[0])
        for a, b in zip(short[1:], general[1:], strict=True):
            for ea, eb in zip(a.eta, b.eta, strict=True):
                assert np.array_equal(ea, eb)
    lam, elog = _expected_precision(precision)
    d = x - mean.mean
    want = (0.5 * elog - 0.5 * dim * np.log(2 * np.pi)
            - 0.5 * (np.einsum("nki,kij,nkj->nk", d, lam, d)
                     + np.einsum("kij,kji->k", lam, mean.covariance)))
    assert_close(short[0], want, rtol=1e-10, atol=1e-10 * float(np.max(np.abs(want))))


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.integers(1, 4), st.integers(1, 3), st.integers(0, 2**16))
def test_prior_terms_of_known_numbers_equal_the_general_path(k, dim, seed):
    """The components' prior terms of the bound with the prior's constants made once a
    run (a VectorGaussian under a known mean and precision; a Wishart under a known ν
    and rate) are the general path's numbers bit for bit (``distinct_components``
    switched off) and their definitions to 1e-10:
    ½ log|Λ₀| − (D/2) log 2π − ½ ((E μ − μ₀)ᵀ Λ₀ (E μ − μ₀) + tr(Λ₀ Cov μ)) and
    (ν₀ − D − 1)/2 E log|Λ| − ½ tr(R₀ E Λ) + (ν₀/2) log|R₀| − (ν₀ D/2) log 2 − log Γ_D(ν₀/2)."""
    from factorflow.factors import wishart
    rng = np.random.default_rng(seed)
    mean, precision = _components(rng, k, dim)
    m0 = rng.normal(size=dim)
    a = rng.normal(size=(dim, dim))
    p0 = a @ a.T + 0.1 * np.eye(dim)
    nu0 = dim - 1.0 + rng.uniform(0.5, 4.0)
    r0 = p0[::-1, ::-1] + np.eye(dim)
    vg_term = vector_gaussian.VECTOR_GAUSSIAN.evidence["vmp"]
    w_term = wishart.WISHART.evidence["vmp"]
    got = (vg_term(sample=mean, mean=m0, precision=p0),
           w_term(sample=precision, dof=nu0, rate=r0))
    with pytest.MonkeyPatch.context() as mp:
        for module in (vector_gaussian, wishart):
            mp.setattr(module, "distinct_components", lambda v: False)
        general = (vg_term(sample=mean, mean=m0, precision=p0),
                   w_term(sample=precision, dof=nu0, rate=r0))
    assert np.array_equal(got[0], general[0]) and np.array_equal(got[1], general[1])
    d = mean.mean - m0
    want = (0.5 * np.linalg.slogdet(p0)[1] - 0.5 * dim * np.log(2 * np.pi)
            - 0.5 * (np.einsum("ki,ij,kj->k", d, p0, d)
                     + np.einsum("ij,kji->k", p0, mean.covariance)))
    assert_close(got[0], want, rtol=1e-10, atol=1e-10)
    lam, elog = _expected_precision(precision)
    want = (0.5 * (nu0 - dim - 1) * elog - 0.5 * np.einsum("ij,kji->k", r0, lam)
            + 0.5 * nu0 * np.linalg.slogdet(r0)[1] - 0.5 * nu0 * dim * np.log(2.0)
            - special.multigammaln(0.5 * nu0, dim))
    assert_close(got[1], want, rtol=1e-10, atol=1e-10)


@settings(max_examples=8, deadline=None, derandomize=True)
@given(st.integers(1, 4), st.integers(1, 3), st.sampled_from([2, 9, 40]),
       st.integers(0, 1000), st.booleans())
def test_runs_with_the_short_paths_are_the_general_paths_bit_for_bit(k, dim, n, seed, trace):
    """Whole fused runs (with the bound after each sweep or not) with the components'
    short paths and with them switched off (``distinct_components`` False: the general
    rows, moments and prior terms) are equal bit for bit, and equal the hand-written
    updates to 1e-10."""
    from factorflow.factors import wishart
    x, start = data(k, n, dim, seed=seed)
    compiled = model(x, k).compile("vmp", init=["means"])
    assert "SwitchVectorGaussian" in compiled.source

    def run():
        return compiled.run(iterations=6, init=factorflow_init(start), tolerance=None,
                            progress=False, trace=trace)

    short = run()
    with pytest.MonkeyPatch.context() as mp:
        for module in (vector_gaussian, wishart):
            mp.setattr(module, "distinct_components", lambda v: False)
        general = run()
    for name in ("weights", "means", "precs", "z"):
        for a, b in zip(short[name].eta, general[name].eta, strict=True):
            assert np.array_equal(a, b)
    assert np.array_equal(short.trace, general.trace)
    assert short.log_evidence == general.log_evidence
    assert_hand_written(short, x, start, 6)
