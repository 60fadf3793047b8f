"""The fused Switch at run time (``factors.fused_switch``): on generated mixtures (K, N,
priors, data, sweeps, with and without the bound after each sweep) the fused program
gives the gate path's posteriors and bound (1e-10) and the hand-written NumPy updates'
(``benchmarks/mixture_reference.py``); its messages against their definitions."""

from __future__ import annotations

import warnings

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import factorflow as ff
from benchmarks import mixture_reference as mix
from factorflow.distributions import Discrete, Gamma, Gaussian
from factorflow.factors import fused_switch
from factorflow.runtime.kernels import NAMESPACE
from tests.conftest import assert_close
from tests.runtime.test_mixture_reference import assert_hand_written

NAMES = ("weights", "means", "precs", "z")


@st.composite
def mixtures(draw):
    """(x, K, priors, sweeps, trace): a small mixture, its data and a run."""
    k = draw(st.integers(1, 6))
    n = draw(st.sampled_from([1, 2, 5, 17, 60]))
    seed = draw(st.integers(0, 1000))
    x = mix.data(k, n, seed) * draw(st.sampled_from([0.3, 1.0, 3.0]))
    priors = mix.Priors(alpha=draw(st.sampled_from([0.5, 1.0, 4.0])),
                        mean=draw(st.sampled_from([-2.0, 0.0, 5.0])),
                        var=draw(st.sampled_from([1.0, 100.0])),
                        shape=draw(st.sampled_from([0.5, 1.0, 3.0])),
                        rate=draw(st.sampled_from([0.2, 1.0, 5.0])))
    return x, k, priors, draw(st.integers(0, 8)), draw(st.booleans())


def _run(x, k, priors, sweeps, trace, fused):
    compiled = mix.model(x, k, priors).compile("vmp", init=["means"], fuse_switch=fused)
    assert ("SwitchGaussian" in compiled.source) == fused
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ff.ConvergenceWarning)
        return compiled.run(iterations=sweeps, init=mix.factorflow_init(x, k),
                            tolerance=None, progress=False, trace=trace)


def assert_same_runs(fused: ff.Result, gate: ff.Result, names: tuple[str, ...],
                     trace: bool) -> None:
    """The fused run and the gate path's: the posteriors of ``names`` (natural
    parameters, 1e-10), the bound, the number of sweeps and (``trace``) every sweep's
    bound."""
    for name in names:
        for a, b in zip(fused[name].eta, gate[name].eta, strict=True):
            assert_close(a, b, rtol=1e-10, atol=1e-10)
    assert_close(fused.log_evidence, gate.log_evidence, rtol=1e-10, atol=1e-9)
    assert len(fused.trace) == len(gate.trace)
    if trace:
        assert_close(fused.trace, gate.trace, rtol=1e-10, atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(mixtures())
def test_fused_equals_the_gate_path_and_the_hand_written_updates(case):
    x, k, priors, sweeps, trace = case
    fused, gate = (_run(x, k, priors, sweeps, trace, f) for f in (True, False))
    assert_same_runs(fused, gate, NAMES, trace)
    # (the reference starts from the same initialisation: after a sweep; and only with the
    # data within 10 prior standard deviations of the prior mean: one point 24 out, as
    # (47.6, K = 5, mean -2, variance 1), puts the reference's own rounding at 8e-10 of the
    # precisions' rate after 2 sweeps, where the fused and the gate path agree bit for bit)
    # The reference's own rounding grows with the data's distance from the prior: the
    # precisions' rate is Σ r x² − 2 E μ Σ r x + E μ² Σ r (cancellation up to x² / var) and
    # the responsibilities' logits carry it (59.6 with the prior (−2, 100), K = 6, 4
    # sweeps: the reference's identical components 4e-10 apart from each other; 13.4 with
    # (5, 1), K = 5: 3.6e-10 in the weights, where the fused and gate path agree to the
    # last bits); the comparison with the reference is at 1e-10 times that factor
    cancel = max(1.0, float(np.max(x * x)) / priors.var)
    if sweeps and np.max(np.abs(x - priors.mean)) <= 10 * np.sqrt(priors.var):
        assert_hand_written(fused, mix.hand_written(x, k, sweeps, priors=priors), x, priors,
                            tol=1e-10 * cancel)


def _messages(k=4, n=30, seed=3):
    """The fused operators' arguments laid out as the generated code lays them out:
    the data (N, 1), q(z) over (N, 1) with K values, q(means) and q(precs) over (K,)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 3.0, n)
    laid = NAMESPACE["align_plates"](x, (0,), 2)
    z = Discrete.from_natural(rng.normal(0.0, 2.0, (n, k)))
    means = Gaussian(rng.normal(0.0, 3.0, k), rng.uniform(0.1, 2.0, k))
    precs = Gamma(rng.uniform(1.0, 5.0, k), rng.uniform(0.5, 2.0, k))
    return x, laid, z, NAMESPACE["align_plates"](z, (0,), 2), means, precs


def test_the_messages_are_their_definitions():
    """Each message against its formula computed elementwise (Winn & Bishop's VMP): the
    logits E log N(x_n; μ_k, 1/τ_k), the weighted sums to μ and τ, the evidence."""
    x, laid, z, zl, means, precs = _messages()
    n, k = x.size, means.mean.size
    tau, elog = precs.mean, precs.mean_log()
    ell = (0.5 * elog - 0.5 * np.log(2 * np.pi)
           - 0.5 * tau * ((x[:, None] - means.mean) ** 2 + means.variance))  # (N, K)
    r = z.probs
    to_z = fused_switch._selector_vmp(laid, means, precs, None, reduce=((n, k), (1,)))
    assert_close(to_z.probs, z.__class__.from_natural(ell).probs, rtol=1e-12)
    assert_close(to_z.eta[0] - to_z.eta[0][:, :1], ell - ell[:, :1], rtol=1e-10, atol=1e-10)
    to_mean = fused_switch._mean_vmp(laid, zl, precs, None, reduce=((n, k), (0,)))
    assert_close(to_mean.eta[0], tau * (r * x[:, None]).sum(0), rtol=1e-12)
    assert_close(to_mean.eta[1], tau * r.sum(0), rtol=1e-12)
    to_prec = fused_switch._precision_vmp(laid, zl, means, None, reduce=((n, k), (0,)))
    sq = (x[:, None] - means.mean) ** 2 + means.variance
    assert_close(to_prec.eta[0], 0.5 * r.sum(0), rtol=1e-12)
    assert_close(to_prec.eta[1], -0.5 * (r * sq).sum(0), rtol=1e-10)
    evidence = fused_switch._average_log_factor(laid, zl, means, precs, None)
    assert_close(evidence, (r * ell).sum(1), rtol=1e-10, atol=1e-10)


def test_a_latent_sample_is_refused_by_name():
    """The operators take known data only (the pass fuses nothing else)."""
    import pytest
    _, laid, _, zl, means, precs = _messages()
    with pytest.raises(ff.ModelError, match="SwitchGaussian"):
        fused_switch._mean_vmp(Gaussian(np.zeros((30, 1)), np.ones((30, 1))), zl, precs,
                               None, reduce=((30, 4), (0,)))


def test_the_jax_backend_runs_the_fused_statement():
    """The fusion is on under JAX too (``fuse_switch.FUSED_BACKENDS``): the fused program
    traces and gives the gate path's numbers (1e-10); its passes, sizes and errors
    against NumPy's fused run: ``tests/runtime/backends/test_jax_fused_switch.py``."""
    import pytest
    pytest.importorskip("jax")
    x, k = mix.data(3, 60, 2), 3
    init = mix.factorflow_init(x, k)
    gate = _run(x, k, mix.Priors(), 7, False, False)
    compiled = mix.model(x, k).compile("vmp", init=["means"], backend="jax",
                                       fuse_switch=True)
    assert "SwitchGaussian" in compiled.source
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ff.ConvergenceWarning)
        got = compiled.run(iterations=7, init=init, tolerance=None, progress=False)
    for name in NAMES:
        for a, b in zip(got[name].eta, gate[name].eta, strict=True):
            assert_close(np.asarray(a), b, rtol=1e-10, atol=1e-10)
    assert_close(float(got.log_evidence), gate.log_evidence, rtol=1e-10, atol=1e-9)


def test_the_dask_backend_keeps_the_gate_path():
    """The fusion is off on Dask (``fuse_switch.FUSED_BACKENDS``): its chunked runs are
    tested on the gate path's statements (``tests/runtime/backends/test_dask.py``)."""
    import pytest
    pytest.importorskip("dask.distributed")
    x, k = mix.data(3, 60, 2), 3
    compiled = mix.model(x, k).compile("vmp", init=["means"], backend="dask",
                                       fuse_switch=True)
    assert "SwitchGaussian" not in compiled.source
    assert "Gate_Cases_selector_average_logarithm" in compiled.source


def assert_poisoned_logits_are_named(compiled: object, operator: str, init: dict) -> None:
    """A NaN put into a datum's logits from the fused statement ``operator`` of
    ``compiled``: the run stops with an ImproperMessageError naming the first posterior
    it reaches (the weights', read from q(z) made in the initialisation) and the
    iteration: never a silent NaN."""
    import pytest
    names = compiled._infer.__globals__
    real = names[operator]

    def poisoned(*args, **kwargs):
        out = real(*args, **kwargs)
        eta = np.array(out.eta[0])
        eta[7] = np.nan
        return Discrete.from_natural(eta)
    names[operator] = poisoned
    try:
        with pytest.raises(ff.ImproperMessageError,
                           match="posterior of weights .* at iteration 1 is improper"):
            compiled.run(init=init, iterations=5)
    finally:
        names[operator] = real


def test_improper_responsibilities_are_named_on_the_fused_path():
    """A NaN in a datum's logits: named (``assert_poisoned_logits_are_named``)."""
    x, k = mix.data(3, 60), 3
    compiled = mix.model(x, k).compile("vmp", init=["means"], fuse_switch=True)
    assert_poisoned_logits_are_named(compiled, "SwitchGaussian_selector_average_logarithm",
                                     mix.factorflow_init(x, k))
