"""Missing observations: ``observed=np.ma.masked_array(values, mask=missing)``.

A masked element contributes nothing to the posteriors or the bound.  Oracles: the same
model on the seen elements alone (a plain Gaussian over a plate; PCA with whole rows
missing, the rows dropped), a hand-written masked VMP in NumPy (BayesPy's updates with
sums over the seen entries), the unfused program (the gate of an observed condition)
sweep by sweep, and BayesPy itself with the same mask where it is installed.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special

import factorflow as ff
from tests.conftest import assert_close
from tests.model.test_vectors import _greedy_order, _pca_data, _same_pca_runs, _without_fusion
from tests.runtime.test_vector_models import _gamma_kl, _standard_normal_kl


# ----- a plain Gaussian over a plate ------------------------------------------------------
def _normal(observed, n: int, algorithm: str) -> ff.Model:
    """m ~ N(0, 10), τ ~ Gamma(1, 1) (VMP; EP: τ = 2 known), y[n] ~ N(m, 1/τ)."""
    with ff.Model() as model:
        m = ff.Gaussian("m", 0.0, variance=10.0)
        tau = ff.Gamma("tau", 1.0, rate=1.0) if algorithm == "vmp" else 2.0
        with ff.Plate(ff.Range("n", n)):
            ff.Gaussian("y", m, precision=tau, observed=observed)
    return model


@settings(max_examples=25, deadline=None)
@given(seen=st.lists(st.booleans(), min_size=1, max_size=12).filter(any),
       algorithm=st.sampled_from(["vmp", "ep"]), seed=st.integers(0, 2**32 - 1))
def test_a_masked_plate_is_the_seen_elements_alone(seen, algorithm, seed):
    """Posteriors and evidence (EP) or bound (VMP) with masked elements equal those of
    the model over the seen elements alone (1e-12), whatever the values under the mask."""
    seen = np.array(seen)
    y = np.random.default_rng(seed).normal(size=seen.size) * 3
    under = np.where(seen, y, 1e6)  # never read
    masked = _normal(np.ma.masked_array(under, mask=~seen), seen.size, algorithm)
    alone = _normal(y[seen], int(seen.sum()), algorithm)
    a = masked.infer(algorithm, iterations=30, tolerance=None)
    b = alone.infer(algorithm, iterations=30, tolerance=None)
    assert_close([a["m"].mean, a["m"].variance], [b["m"].mean, b["m"].variance],
                 rtol=1e-12, atol=1e-12)
    if algorithm == "vmp":
        assert_close([a["tau"].shape_param, a["tau"].rate],
                     [b["tau"].shape_param, b["tau"].rate], rtol=1e-12)
    assert_close(a.log_evidence, b.log_evidence, rtol=1e-12)


@pytest.mark.parametrize("algorithm", ["ep", "vmp"])
def test_missing_elements_in_branches_of_a_latent_gate(algorithm):
    """y observed with a mask in both branches of ``ff.If(c)``/``ff.IfNot(c)``: the
    posteriors of c and m and the evidence are those of the seen elements alone."""
    y, seen = np.array([0.5, 3.0, 2.5, -1.0, 2.0, 4.0]), np.array([1, 1, 0, 1, 0, 1], bool)

    def model(observed, n):
        with ff.Model() as model:
            c = ff.Bernoulli("c", 0.3)
            m = ff.Gaussian("m", 0.0, variance=10.0)
            with ff.Plate(ff.Range("n", n)):
                with ff.If(c):
                    ff.Gaussian("y", m, precision=1.0, observed=observed)
                with ff.IfNot(c):
                    ff.Gaussian("y", 0.0, precision=0.5, observed=observed)
        return model

    a = model(np.ma.masked_array(y, mask=~seen), 6).infer(algorithm)
    b = model(y[seen], 4).infer(algorithm)
    assert_close([a["c"].p, a["m"].mean, a["m"].variance],
                 [b["c"].p, b["m"].mean, b["m"].variance], rtol=1e-12)
    assert_close(a.log_evidence, b.log_evidence, rtol=1e-12)


def test_gibbs_on_a_masked_plate_draws_as_on_the_seen_elements_alone():
    """Gibbs sampling skips the missing elements: the same seed gives the same draws as
    the model over the seen elements alone."""
    y, seen = np.array([1.0, 2.0, 3.0, 4.0, -1.0]), np.array([1, 0, 1, 1, 0], bool)
    a = _normal(np.ma.masked_array(y, mask=~seen), 5, "vmp").infer("gibbs", draws=500, seed=1)
    b = _normal(y[seen], 3, "vmp").infer("gibbs", draws=500, seed=1)
    assert_close([a["m"].mean, a["m"].sd], [b["m"].mean, b["m"].sd], rtol=1e-12)


def test_nan_data_stays_refused_and_masked_invalid_marks_it_missing():
    """Plain NaN data is refused by name; ``np.ma.masked_invalid`` makes it missing."""
    y = np.array([1.0, np.nan, 2.5])
    with pytest.raises(ff.DataError, match=r"observed value of 'y' contains NaN"):
        _normal(y, 3, "vmp")
    got = _normal(np.ma.masked_invalid(y), 3, "vmp").infer("vmp", iterations=20)
    want = _normal(y[[0, 2]], 2, "vmp").infer("vmp", iterations=20)
    assert_close(got["m"].mean, want["m"].mean, rtol=1e-12)


# ----- Bayesian PCA: the fused InnerProductGaussian with a mask -----------------------------
# the model is the gallery's (examples/bayesian_pca.py): the tests check what it runs
_pca = runpy.run_path(str(Path(__file__).parents[2] / "examples" / "bayesian_pca.py"))["pca"]


def _second(mean, cov):
    return cov + mean[..., :, None] * mean[..., None, :]


def masked_bpca_by_hand(y, seen, z_mean, z_cov, sweeps, a0=1.0, b0=1.0):
    """``tests.runtime.test_vector_models.bpca_by_hand`` with y[n, d] seen only where
    ``seen[n, d]``: BayesPy's updates with every sum over the seen entries (W[d]'s
    precision I + E τ Σ_n seen[n, d] E[z_n z_nᵀ], one per d; z[n]'s likewise; τ's count
    and squared error over the seen entries), in factorflow's order (τ from its prior,
    then W, τ, z per sweep), the ELBO computed directly."""
    n, dim = y.shape
    k = z_mean.shape[1]
    o = seen.astype(float)
    y = np.where(seen, y, 0.0)
    w_mean, w_cov = np.zeros((dim, k)), np.broadcast_to(np.eye(k), (dim, k, k)).copy()

    def tau_update():
        resid = (np.sum(o * y**2) - 2 * np.einsum("nd,dk,nk->", o * y, w_mean, z_mean)
                 + np.einsum("nd,dij,nij->", o, _second(w_mean, w_cov),
                             _second(z_mean, z_cov)))
        return a0 + o.sum() / 2, b0 + 0.5 * resid, resid

    a, b = a0, b0
    for _ in range(sweeps):
        e_tau = a / b
        w_cov = np.linalg.inv(np.eye(k) + e_tau * np.einsum("nd,nij->dij", o,
                                                            _second(z_mean, z_cov)))
        w_mean = np.einsum("dij,dj->di", w_cov, e_tau * y.T @ z_mean)
        a, b, _ = tau_update()
        e_tau = a / b
        z_cov = np.linalg.inv(np.eye(k) + e_tau * np.einsum("nd,dij->nij", o,
                                                            _second(w_mean, w_cov)))
        z_mean = np.einsum("nij,nj->ni", z_cov, e_tau * y @ w_mean)
    _, _, resid = tau_update()
    e_log_tau = special.digamma(a) - np.log(b)
    elbo = (o.sum() * 0.5 * (e_log_tau - np.log(2 * np.pi)) - 0.5 * (a / b) * resid
            - _standard_normal_kl(w_mean, w_cov) - _standard_normal_kl(z_mean, z_cov)
            - _gamma_kl(a, b, a0, b0))
    return {"w_mean": w_mean, "w_cov": w_cov, "z_mean": z_mean, "z_cov": z_cov,
            "tau": (a, b), "elbo": elbo}


def _assert_pca(result, ref, tol=1e-10):
    for name, key in (("W", "w"), ("z", "z")):
        assert_close(result[name].mean, ref[f"{key}_mean"], rtol=tol, atol=tol)
        assert_close(result[name].covariance, ref[f"{key}_cov"], rtol=tol, atol=tol)
    assert_close([result["tau"].shape_param, result["tau"].rate], ref["tau"], rtol=tol)
    assert_close(result.log_evidence, ref["elbo"], rtol=tol)


@st.composite
def _masked_pca(draw):
    n, m, k = draw(st.integers(1, 7)), draw(st.integers(1, 5)), draw(st.integers(1, 3))
    seen = np.array(draw(st.lists(st.booleans(), min_size=n * m, max_size=n * m)
                         .filter(any))).reshape(n, m)
    return n, m, k, seen


@settings(max_examples=30, deadline=None)
@given(shape=_masked_pca(), sweeps=st.integers(1, 8), seed=st.integers(0, 2**32 - 1))
def test_masked_pca_is_the_hand_written_masked_vmp(shape, sweeps, seed):
    """Generated N, M, K and masks (whole rows and columns missing among them): the fused
    program (its statement reads the mask; no gate is left) gives the posteriors of W, z
    and τ and the bound of the hand-written masked VMP after ``sweeps`` sweeps (1e-10),
    and the bound never falls."""
    n, m, k, seen = shape
    rng = np.random.default_rng(seed)
    y, start = _pca_data(rng, n, m, k)
    compiled = _pca(np.ma.masked_array(np.where(seen, y, np.nan), mask=~seen), k).compile(
        "vmp", init=["z"])
    fused = [line for line in compiled.source.splitlines()
             if "InnerProductGaussian_a_average_logarithm(" in line]
    if not seen.all():
        assert fused and all("mask=" in line for line in fused)
        assert "where_mask" not in compiled.source
    result = compiled.run(init={"z": start}, iterations=sweeps, tolerance=None)
    _assert_pca(result, masked_bpca_by_hand(y, seen, start.mean, start.covariance, sweeps))
    assert np.all(np.diff(result.trace) >= -1e-10 * np.abs(result.trace[1:]))


@pytest.mark.parametrize("ard", [False, True], ids=["plain", "ard"])
def test_masked_pca_equals_the_unfused_gated_program_sweep_by_sweep(monkeypatch, ard):
    """The fused masked factor against the unfused pair inside the observed gate (the
    generic masking of every factor), both with z and τ initialised and the unfused one
    scheduled by the greedy plan alone, so that they run one schedule
    (``_greedy_order``): equal after 1, 3 and 12 sweeps (1e-10), with ARD on W too."""
    rng = np.random.default_rng(5)
    n, m, k = 30, 6, 3
    y, start = _pca_data(rng, n, m, k)
    seen = rng.random((n, m)) > 0.3
    observed = np.ma.masked_array(y, mask=~seen)
    init = {"z": start, "tau": ff.distributions.Gamma(2.0, rate=3.0)}
    fused = _pca(observed, k, ard).compile("vmp", init=["z", "tau"])
    _without_fusion(monkeypatch)
    _greedy_order(monkeypatch)
    plain = _pca(observed, k, ard).compile("vmp", init=["z", "tau"])
    assert "InnerProductGaussian" in fused.source and "where_mask" in plain.source
    _same_pca_runs(fused, plain, init, (1, 3, 12))


def test_pca_with_whole_rows_missing_is_pca_without_those_rows():
    """Rows of y missing entirely: W and τ, the other rows' z and the bound are those of
    the model without those rows (1e-10); the missing rows' z are their prior after a
    sweep."""
    rng = np.random.default_rng(7)
    n, m, k = 20, 5, 2
    y, start = _pca_data(rng, n, m, k)
    gone = np.zeros(n, bool)
    gone[[2, 3, 11]] = True
    observed = np.ma.masked_array(y, mask=np.repeat(gone[:, None], m, axis=1))
    kept = _rows(start, ~gone)
    for sweeps in (1, 4):
        a = _pca(observed, k).compile("vmp", init=["z"]).run(
            init={"z": start}, iterations=sweeps, tolerance=None)
        b = _pca(y[~gone], k).compile("vmp", init=["z"]).run(
            init={"z": kept}, iterations=sweeps, tolerance=None)
        assert_close(a["W"].mean, b["W"].mean, rtol=1e-10, atol=1e-12)
        assert_close(a["W"].covariance, b["W"].covariance, rtol=1e-10, atol=1e-12)
        assert_close(a["z"].mean[~gone], b["z"].mean, rtol=1e-10, atol=1e-12)
        assert_close(a["z"].mean[gone], 0.0, atol=0)
        assert_close(a["z"].covariance[gone], np.broadcast_to(np.eye(k), (3, k, k)), atol=0)
        assert_close([a["tau"].shape_param, a["tau"].rate],
                     [b["tau"].shape_param, b["tau"].rate], rtol=1e-10)
        assert_close(a.log_evidence, b.log_evidence, rtol=1e-10)


def _rows(v, keep):
    """The rows ``keep`` of a batch of VectorGaussians."""
    return ff.distributions.VectorGaussian(v.mean[keep], v.covariance[keep])


@pytest.mark.parametrize("ard", [False, True], ids=["plain", "ard"])
def test_masked_pca_bound_is_bayespys(ard):
    """BayesPy's PCA with ``Y.observe(data, mask=seen)`` (its mask: True where seen), the
    same model, priors, start and update order (with ARD as in its demo): the same
    bound after 10 sweeps (1e-10) and the same E[W]."""
    pytest.importorskip("bayespy")
    from benchmarks.bench_vectors import bayespy_pca
    rng = np.random.default_rng(11)
    n, m, k, sweeps = 40, 7, 3, 10
    y, start = _pca_data(rng, n, m, k)
    seen = rng.random((n, m)) > 0.25
    q, w = bayespy_pca(y, start.mean, ard, seen)
    q.update(repeat=sweeps, verbose=False)
    result = _pca(np.ma.masked_array(y, mask=~seen), k, ard).compile("vmp", init=["z"]).run(
        init={"z": start}, iterations=sweeps, tolerance=None)
    assert_close(result.log_evidence, float(q.L[sweeps - 1]), rtol=1e-10)
    assert_close(result["W"].mean, w.get_moments()[0][:, 0], rtol=1e-8, atol=1e-10)


# ----- bad input --------------------------------------------------------------------------
def test_bad_masks_are_refused_by_name():
    """A partly masked vector, a fully masked value and a masked ff.Data or parameter are
    refused naming the variable; a mask is never silently dropped."""
    with ff.Model() as model:
        with ff.Plate(ff.Range("n", 2)):
            partial = np.ma.masked_array(np.ones((2, 3)), mask=[[1, 0, 0], [0, 0, 0]])
            with pytest.raises(ff.DataError, match=r"'x'.*element at \(0,\) is partly "
                                                   r"masked.*a whole vector"):
                ff.VectorGaussian("x", np.zeros(3), precision=np.eye(3), observed=partial)
            with pytest.raises(ff.DataError, match=r"'y'.*every element is masked"):
                ff.Gaussian("y", 0.0, precision=1.0,
                            observed=np.ma.masked_array([1.0, 2.0], mask=True))
            with pytest.raises(ff.DataError, match=r"'u'.*a mask needs the full shape \(2,\)"):
                ff.Gaussian("u", 0.0, precision=1.0,
                            observed=np.ma.masked_array(1.0, mask=True))
            with pytest.raises(ff.DataError, match=r"'v', argument 'mean'.*masked array"):
                ff.Gaussian("v", np.ma.masked_array([1.0, 2.0], mask=[0, 1]), precision=1.0)
            with pytest.raises(ff.DataError, match=r"'s'.*has shape \(3,\); a mask needs "
                                                   r"the full shape \(2,\) of the plates"):
                ff.Gaussian("s", 0.0, precision=1.0,
                            observed=np.ma.masked_array([1.0, 2.0, 3.0], mask=[0, 1, 0]))
            with pytest.raises(ff.DataError, match=r"'c'.*complex data"):
                ff.Gaussian("c", 0.0, precision=1.0,
                            observed=np.ma.masked_array([1j, 2.0], mask=[0, 1]))
            with pytest.raises(ff.DataError, match=r"'p'.*outside the support"):
                ff.Gamma("p", 1.0, rate=1.0,
                         observed=np.ma.masked_array([-1.0, 2.0], mask=[0, 1]))
            d = ff.Data("d", np.zeros(2))
            ff.Gaussian("w", 0.0, precision=1.0, observed=d)
    with pytest.raises(ff.DataError, match=r"ff.Data\('d'\): a masked array with 1 "
                                           r"masked element.*only in the observed value"):
        model.infer("vmp", data={"d": np.ma.masked_array([1.0, 2.0], mask=[0, 1])})
    # a whole vector missing is fine: the vector's factor is left out there
    with ff.Model() as model:
        mu = ff.VectorGaussian("mu", np.zeros(2), precision=np.eye(2))
        with ff.Plate(ff.Range("n", 3)):
            xs = np.ma.masked_array(np.arange(6.0).reshape(3, 2),
                                    mask=[[0, 0], [1, 1], [0, 0]])
            ff.VectorGaussian("x", mu, precision=np.eye(2), observed=xs)
    got = model.infer("vmp", iterations=5)["mu"]
    assert_close(got.mean, np.array([0.0 + 4.0, 1.0 + 5.0]) / 3, rtol=1e-12)


def test_results_show_missing_elements_as_nan_and_the_mask_beside():
    """``result["y"]`` is the observed value with NaN where missing (the value under the
    mask is never shown or read); the mask is an observed variable ``"y seen"``; the
    model's text shows the statement inside ``ff.If(y seen)``."""
    model = _normal(np.ma.masked_array([1.0, 2.0, 3.0], mask=[0, 1, 0]), 3, "vmp")
    assert "y[n] ~ Gaussian(mean=m, precision=tau)  in ff.If(y seen)" in str(model)
    result = model.infer("vmp", iterations=5)
    assert_close(result["y"].mean, [1.0, np.nan, 3.0], atol=0)
    assert result["y seen"].mean.tolist() == [True, False, True]


def test_predictive_draws_the_missing_elements():
    """``model.predictive`` draws a missing element from its posterior predictive as it
    draws a seen one (N(E m, Var m + 1/τ)), not the value under the mask."""
    with ff.Model() as model:
        m = ff.Gaussian("m", 0.0, variance=10.0)
        with ff.Plate(ff.Range("n", 4)):
            ff.Gaussian("y", m, precision=1.0,
                        observed=np.ma.masked_array([1.0, 2.0, 3.0, 4.0], mask=[0, 1, 0, 0]))
    result = model.infer("vmp")
    draws = model.predictive(result, n=40_000, rng=0)["y"][:, 1]
    post = result["m"]
    assert abs(draws.mean() - post.mean) < 0.05
    assert abs(draws.var() / (post.variance + 1.0) - 1.0) < 0.05
