"""The fused D-dimensional Switch at run time (``factors.fused_vector_switch``): on
generated vector mixtures (K, D, N, priors, data, sweeps, with and without the bound
after each sweep) the fused program gives the gate path's posteriors and bound (1e-10)
and the hand-written NumPy updates' (``benchmarks/vmixture_reference.py``, 1e-9); its
messages against their definitions, written elementwise."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import factorflow as ff
from benchmarks import vmixture_reference as vref
from factorflow.distributions import Discrete, VectorGaussian, Wishart
from factorflow.factors import fused_vector_switch as fvs
from factorflow.runtime.kernels import NAMESPACE
from tests.conftest import assert_close
from tests.runtime.test_fused_switch import assert_poisoned_logits_are_named, assert_same_runs
from tests.runtime.vmixture_checks import assert_hand_written

NAMES = ("weights", "means", "precs", "z")
FUSED = "SwitchVectorGaussian"


@st.composite
def vector_mixtures(draw):
    """(x, start, K, priors, sweeps, trace): a small vector mixture, its data, the means'
    initial posterior means and a run."""
    k, dim = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    n = draw(st.sampled_from([1, 2, 3, 7, 19, 40]))
    x, start = vref.data(k, n, dim, seed=draw(st.integers(0, 1000)))
    scale = draw(st.sampled_from([0.3, 1.0, 3.0]))
    priors = vref.Priors(alpha=draw(st.sampled_from([0.5, 1.0, 4.0])),
                         mean=draw(st.sampled_from([-2.0, 0.0, 3.0])),
                         precision=draw(st.sampled_from([0.01, 0.1, 1.0])),
                         extra_dof=draw(st.sampled_from([0.0, 0.5, 3.0])),
                         rate=draw(st.sampled_from([0.2, 1.0, 5.0])))
    return (x * scale, start * scale, k, priors, draw(st.integers(0, 30)),
            draw(st.booleans()))


def _run(x, start, k, priors, sweeps, trace, fused):
    compiled = vref.model(x, k, priors).compile("vmp", init=["means"], fuse_switch=fused)
    assert (FUSED in compiled.source) == fused
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ff.ConvergenceWarning)
        return compiled.run(iterations=sweeps, init=vref.factorflow_init(start),
                            tolerance=None, progress=False, trace=trace)


@settings(max_examples=40, deadline=None)
@given(vector_mixtures())
def test_fused_equals_the_gate_path_and_the_hand_written_updates(case):
    x, start, k, priors, sweeps, trace = case
    fused, gate = (_run(x, start, k, priors, sweeps, trace, f) for f in (True, False))
    assert_same_runs(fused, gate, NAMES, trace)
    # (only with the data within 10 prior standard deviations of the prior mean, as the
    # 1-D test: far out, the reference's own rounding grows beyond 1e-9)
    if np.max(np.abs(x - priors.mean)) <= 10 / np.sqrt(priors.precision):
        assert_hand_written(fused, x, start, sweeps, priors, tol=1e-9)


@pytest.mark.parametrize("k,n,dim", [(2, 9, 1), (3, 40, 2), (4, 60, 5), (5, 80, 10)],
                         ids=["k2-n9-d1", "k3-n40-d2", "k4-n60-d5", "k5-n80-d10"])
def test_the_example_fused_equals_the_hand_written_updates(k, n, dim):
    """The example's own model (``examples/gaussian_mixture.py``) fused, after 0–30
    sweeps, against ``vmixture_reference.hand_written`` (1e-10)."""
    x, start = vref.data(k, n, dim, seed=k)
    compiled = vref.model(x, k).compile("vmp", init=["means"], fuse_switch=True)
    assert FUSED in compiled.source
    for sweeps in (0, 1, 7, 30):
        got = compiled.run(iterations=sweeps, init=vref.factorflow_init(start),
                           tolerance=None, progress=False)
        assert_hand_written(got, x, start, sweeps)


def _messages(k=4, n=30, dim=3, seed=3):
    """The fused operators' arguments laid out as the generated code lays them out: the
    data (N, 1, D), q(z) over (N, 1) with K values, q(means) and q(precs) over (K,)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 3.0, (n, dim))
    laid = NAMESPACE["align_plates"](x, (0,), 2, 1)
    z = Discrete.from_natural(rng.normal(0.0, 2.0, (n, k)))
    a = rng.normal(size=(k, dim, dim))
    cov = a @ np.swapaxes(a, 1, 2) / dim + 0.2 * np.eye(dim)
    means = VectorGaussian(rng.normal(0.0, 3.0, (k, dim)), cov)
    b = rng.normal(size=(k, dim, dim))
    precs = Wishart(dim + 1.0 + rng.uniform(0.0, 4.0, k),
                    b @ np.swapaxes(b, 1, 2) + np.eye(dim))
    return x, laid, z, NAMESPACE["align_plates"](z, (0,), 2), means, precs


@pytest.mark.parametrize("n", [1, 30])
def test_the_messages_are_their_definitions(n):
    """Each message against its formula computed elementwise (Winn & Bishop's VMP):
    the logits E log N(x_n; μ_k, Λ_k⁻¹) from (N, K, D) differences, the weighted sums to
    μ and Λ, the evidence Σ_k r ℓ (N = 30: the statistics' BLAS paths; N = 1: the
    elementwise ones)."""
    x, laid, z, zl, means, precs = _messages(n=n)
    k, dim = means.mean.shape
    lam, elogdet = precs.mean, precs.mean_log_det()
    m, s = means.mean, means.covariance
    d = x[:, None, :] - m[None]                                            # (N, K, D)
    ell = (0.5 * elogdet - 0.5 * dim * np.log(2 * np.pi)
           - 0.5 * (np.einsum("nki,kij,nkj->nk", d, lam, d)
                    + np.einsum("kij,kji->k", lam, s)))                     # (N, K)
    r = z.probs
    to_z = fvs._selector_vmp(laid, means, precs, None, reduce=((n, k), (1,)))
    assert_close(to_z.probs, Discrete.from_natural(ell).probs, rtol=1e-12, atol=1e-14)
    assert_close(to_z.eta[0] - to_z.eta[0][:, :1], ell - ell[:, :1], rtol=1e-10,
                 atol=1e-10)
    to_mean = fvs._mean_vmp(laid, zl, precs, None, reduce=((n, k), (0,)))
    assert_close(to_mean.eta[1], r.sum(0)[:, None, None] * lam, rtol=1e-12)
    assert_close(to_mean.eta[0][..., 0], np.einsum("kij,nk,nj->ki", lam, r, x), rtol=1e-12)
    to_prec = fvs._precision_vmp(laid, zl, means, None, reduce=((n, k), (0,)))
    spread = np.einsum("nk,nki,nkj->kij", r, d, d) + r.sum(0)[:, None, None] * s
    ref = Wishart.from_natural(0.5 * r.sum(0)[:, None, None], -0.5 * spread)
    for got, want in zip(to_prec.eta, ref.eta, strict=True):
        assert_close(got, want, rtol=1e-10, atol=1e-12)
    evidence = fvs._average_log_factor(laid, zl, means, precs, None)
    assert_close(evidence, (r * ell).sum(1), rtol=1e-10, atol=1e-10)


def test_a_latent_sample_and_another_reduction_are_refused_by_name():
    """The operators take known data only (the pass fuses nothing else), and sum over the
    data axis (to the components) or the cases' (to z) only."""
    _, laid, _, zl, means, precs = _messages()
    latent = VectorGaussian(np.zeros((30, 1, 3)), np.broadcast_to(np.eye(3), (30, 1, 3, 3)))
    with pytest.raises(ff.ModelError, match=FUSED):
        fvs._mean_vmp(latent, zl, precs, None, reduce=((30, 4), (0,)))
    with pytest.raises(ff.ModelError, match=FUSED):
        fvs._precision_vmp(laid, zl, means, None, reduce=((30, 4), (1,)))
    with pytest.raises(ff.ModelError, match=FUSED):
        fvs._selector_vmp(laid, means, precs, None, reduce=((30, 4), (0,)))


def test_the_dask_backend_keeps_the_gate_path():
    """Dask keeps the gate path (``fuse_switch.FUSED_BACKENDS``)."""
    pytest.importorskip("dask.distributed")
    x, start = vref.data(3, 40, 2)
    source = vref.model(x, 3).compile("vmp", init=["means"], backend="dask").source
    assert FUSED not in source
    assert "Gate_Cases_selector_average_logarithm" in source


def test_improper_responsibilities_are_named_on_the_fused_path():
    """A NaN in a datum's logits: named (``assert_poisoned_logits_are_named``)."""
    x, start = vref.data(3, 60, 2)
    compiled = vref.model(x, 3).compile("vmp", init=["means"], fuse_switch=True)
    assert_poisoned_logits_are_named(
        compiled, "SwitchVectorGaussian_selector_average_logarithm",
        vref.factorflow_init(start))
