"""Whole models with vectors and matrices against closed forms and direct computations.

* Bayesian linear regression with VectorGaussian weights and known noise: the posterior
  N(P⁻¹ τ Xᵀy, P⁻¹), P = Λ0 + τ XᵀX, and the evidence N(y; X m0, X Λ0⁻¹ Xᵀ + I/τ), under EP
  and VMP, for hypothesis-generated problems (D 1..4, N 0..6).
* With a Gamma noise precision (VMP): the bound never falls, equals the ELBO computed
  directly from the posteriors, and the fixed point is a hand-written coordinate ascent's.
* A multivariate Gaussian with a VectorGaussian mean and a Wishart precision (VMP): the
  same checks.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special, stats

import factorflow as ff
from tests.conftest import assert_close


def regression(X, y, tau, prior_mean, prior_precision, name="lr"):
    n_rows, dim = X.shape
    with ff.Model(name) as model:
        w = ff.VectorGaussian("w", prior_mean, precision=prior_precision)
        with ff.Plate(ff.Range("n", n_rows)):
            ff.Gaussian("y", X @ w, precision=tau, observed=y)
    return model


def closed_form(X, y, tau, m0, p0):
    p = p0 + tau * X.T @ X
    cov = np.linalg.inv(p)
    mean = cov @ (p0 @ m0 + tau * X.T @ y)
    if not len(y):
        return mean, cov, 0.0
    evidence = stats.multivariate_normal(X @ m0, X @ np.linalg.inv(p0) @ X.T
                                         + np.eye(len(y)) / tau)
    return mean, cov, evidence.logpdf(y)


def spd(rng, dim):
    a = rng.normal(size=(dim, dim))
    return a @ a.T + 0.5 * np.eye(dim)


@settings(max_examples=30, deadline=None)
@given(dim=st.integers(1, 4), rows=st.integers(0, 6), seed=st.integers(0, 2**32 - 1),
       algorithm=st.sampled_from(["ep", "vmp"]))
def test_linear_regression_is_the_closed_form(dim, rows, seed, algorithm):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, dim))
    y = rng.normal(size=rows) * 2
    tau = float(rng.uniform(0.3, 5))
    m0, p0 = rng.normal(size=dim), spd(rng, dim)
    mean, cov, log_z = closed_form(X, y, tau, m0, p0)
    result = regression(X, y, tau, m0, p0).infer(algorithm)
    q = result["w"]
    assert isinstance(q, ff.distributions.VectorGaussian)
    assert result.converged
    assert_close(q.mean, mean, rtol=1e-10, atol=1e-10)
    assert_close(q.covariance, cov, rtol=1e-10, atol=1e-10)
    # EP's evidence is exact here; VMP's bound too (w is the only latent variable)
    assert_close(result.log_evidence, log_z, rtol=1e-10, atol=1e-10)


def test_inner_product_with_a_constant_vector_and_either_order():
    rng = np.random.default_rng(4)
    c = rng.normal(size=3)
    p0 = spd(rng, 3)
    for order in ("w @ c", "c @ w", "inner"):
        with ff.Model() as model:
            w = ff.VectorGaussian("w", np.zeros(3), precision=p0)
            if order == "w @ c":
                s = w @ c
            elif order == "c @ w":
                s = c @ w
            else:
                s = ff.inner(c, w)
            ff.Gaussian("y", s, precision=2.0, observed=1.5)
        mean, cov, _ = closed_form(c[None, :], np.array([1.5]), 2.0, np.zeros(3), p0)
        for algorithm in ("ep", "vmp"):
            q = model.infer(algorithm)["w"]
            assert_close(q.mean, mean, rtol=1e-10, atol=1e-12)
            assert_close(q.covariance, cov, rtol=1e-10, atol=1e-12)


def test_weights_per_plate_element_broadcast_through_the_inner_product():
    """One weight vector per group k, each with its own data: groups are independent
    regressions, laid out over the plate."""
    rng = np.random.default_rng(8)
    groups, rows, dim = 3, 4, 2
    X = rng.normal(size=(groups, rows, dim))
    y = rng.normal(size=(groups, rows))
    with ff.Model() as model:
        k = ff.Range("k", groups)
        with ff.Plate(k):
            w = ff.VectorGaussian("w", 0.0, precision=np.eye(dim))
            with ff.Plate(ff.Range("n", rows)):
                ff.Gaussian("y", X @ w, precision=3.0, observed=y)
    for algorithm in ("ep", "vmp"):
        q = model.infer(algorithm)["w"]
        assert q.batch_shape == (groups,)
        for g in range(groups):
            mean, cov, _ = closed_form(X[g], y[g], 3.0, np.zeros(dim), np.eye(dim))
            assert_close(q.mean[g], mean, rtol=1e-10, atol=1e-12)
            assert_close(q.covariance[g], cov, rtol=1e-10, atol=1e-12)


# ----- VMP with a random noise precision -------------------------------------------------
def _gamma_regression_elbo(X, y, q_w, q_tau, a0, b0):
    m, cov = q_w.mean, q_w.covariance
    e_tau, e_log_tau = q_tau.mean, special.digamma(q_tau.shape_param) - np.log(q_tau.rate)
    resid = (y - X @ m) ** 2 + np.einsum("ni,ij,nj->n", X, cov, X)
    like = np.sum(0.5 * e_log_tau - 0.5 * np.log(2 * np.pi) - 0.5 * e_tau * resid)
    dim = len(m)
    prior_w = -0.5 * dim * np.log(2 * np.pi) - 0.5 * (m @ m + np.trace(cov))
    prior_tau = a0 * np.log(b0) - special.gammaln(a0) + (a0 - 1) * e_log_tau - b0 * e_tau
    entropy = (stats.multivariate_normal(m, cov).entropy()
               + stats.gamma(q_tau.shape_param, scale=1 / q_tau.rate).entropy())
    return like + prior_w + prior_tau + entropy


def _gamma_regression_by_hand(X, y, a0, b0, sweeps=500):
    """Coordinate ascent written out: q(w) = N(m, Σ), q(τ) = Gamma(a, b)."""
    dim = X.shape[1]
    e_tau = a0 / b0
    for _ in range(sweeps):
        cov = np.linalg.inv(np.eye(dim) + e_tau * X.T @ X)
        m = cov @ (e_tau * X.T @ y)
        a = a0 + len(y) / 2
        b = b0 + 0.5 * np.sum((y - X @ m) ** 2 + np.einsum("ni,ij,nj->n", X, cov, X))
        e_tau = a / b
    return m, cov, a, b


def test_regression_with_a_gamma_noise_precision_under_vmp():
    rng = np.random.default_rng(11)
    X = rng.normal(size=(25, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + rng.normal(size=25) * 0.7
    with ff.Model() as model:
        w = ff.VectorGaussian("w", 0.0, precision=np.eye(3))
        tau = ff.Gamma("tau", 2.0, rate=0.5)
        with ff.Plate(ff.Range("n", 25)):
            ff.Gaussian("y", X @ w, precision=tau, observed=y)
    bounds = []
    compiled = model.compile("vmp")
    result = compiled.run(iterations=200)
    for sweeps in (1, 2, 3, 5, 8):
        partial = compiled.run(iterations=sweeps, tolerance=None)
        bounds.append(partial.log_evidence)
        assert_close(partial.log_evidence, _gamma_regression_elbo(
            X, y, partial["w"], partial["tau"], 2.0, 0.5), rtol=1e-11, atol=1e-10)
    assert result.converged
    assert np.all(np.diff(result.trace) > -1e-9 * abs(result.trace[-1]))
    assert np.all(np.diff(bounds) > -1e-9)
    m, cov, a, b = _gamma_regression_by_hand(X, y, 2.0, 0.5)
    assert_close(result["w"].mean, m, rtol=1e-8)
    assert_close(result["w"].covariance, cov, rtol=1e-8)
    assert_close(result["tau"].shape_param, a, rtol=1e-10)
    assert_close(result["tau"].rate, b, rtol=1e-8)


def _wishart_model_elbo(x, q_mu, q_lam, m0, p0, nu0, r0):
    dim = x.shape[1]
    m, s = q_mu.mean, q_mu.covariance
    e_lam, e_logdet = q_lam.mean, q_lam.mean_log_det()
    d = x - m
    like = np.sum(0.5 * e_logdet - 0.5 * dim * np.log(2 * np.pi)
                  - 0.5 * (np.einsum("ni,ij,nj->n", d, e_lam, d) + np.trace(e_lam @ s)))
    dm = m - m0
    prior_mu = (0.5 * np.linalg.slogdet(p0)[1] - 0.5 * dim * np.log(2 * np.pi)
                - 0.5 * (dm @ p0 @ dm + np.trace(p0 @ s)))
    prior_lam = (0.5 * (nu0 - dim - 1) * e_logdet - 0.5 * np.trace(r0 @ e_lam)
                 + 0.5 * nu0 * np.linalg.slogdet(r0)[1] - 0.5 * nu0 * dim * np.log(2)
                 - special.multigammaln(nu0 / 2, dim))
    entropy = (stats.multivariate_normal(m, s).entropy()
               + stats.wishart(df=q_lam.dof, scale=np.linalg.inv(q_lam.rate)).entropy())
    return like + prior_mu + prior_lam + entropy


def _wishart_model_by_hand(x, m0, p0, nu0, r0, sweeps=500):
    n, dim = x.shape
    e_lam = nu0 * np.linalg.inv(r0)
    for _ in range(sweeps):
        p = p0 + n * e_lam
        s = np.linalg.inv(p)
        m = s @ (p0 @ m0 + e_lam @ x.sum(axis=0))
        d = x - m
        nu = nu0 + n
        r = r0 + d.T @ d + n * s
        e_lam = nu * np.linalg.inv(r)
    return m, s, nu, r


def test_vector_gaussian_with_a_wishart_precision_under_vmp():
    rng = np.random.default_rng(12)
    dim, n = 3, 30
    x = rng.multivariate_normal([1.0, -1.0, 0.0], spd(rng, dim), size=n)
    m0, p0, nu0, r0 = np.zeros(dim), 0.1 * np.eye(dim), dim + 2.0, np.eye(dim)
    with ff.Model() as model:
        mu = ff.VectorGaussian("mu", m0, precision=p0)
        lam = ff.Wishart("lam", nu0, rate=r0)
        with ff.Plate(ff.Range("n", n)):
            ff.VectorGaussian("x", mu, precision=lam, observed=x)
    compiled = model.compile("vmp")
    result = compiled.run(iterations=300)
    assert result.converged
    assert np.all(np.diff(result.trace) > -1e-9 * abs(result.trace[-1]))
    for sweeps in (1, 2, 4):
        partial = compiled.run(iterations=sweeps, tolerance=None)
        assert_close(partial.log_evidence, _wishart_model_elbo(
            x, partial["mu"], partial["lam"], m0, p0, nu0, r0), rtol=1e-11, atol=1e-10)
    m, s, nu, r = _wishart_model_by_hand(x, m0, p0, nu0, r0)
    assert isinstance(result["lam"], ff.distributions.Wishart)
    assert_close(result["mu"].mean, m, rtol=1e-8, atol=1e-10)
    assert_close(result["mu"].covariance, s, rtol=1e-8)
    assert_close(result["lam"].dof, nu, rtol=1e-12)
    assert_close(result["lam"].rate, r, rtol=1e-8)


def test_known_mean_wishart_posterior_is_conjugate_under_ep():
    """x[n] ~ N(μ known, Λ⁻¹), Λ ~ W(ν0, R0): EP's posterior is W(ν0 + N, R0 + Σ dd ᵀ)."""
    rng = np.random.default_rng(13)
    x = rng.normal(size=(10, 2))
    mu = np.array([0.2, -0.1])
    with ff.Model() as model:
        lam = ff.Wishart("lam", 3.0, rate=np.eye(2))
        with ff.Plate(ff.Range("n", 10)):
            ff.VectorGaussian("x", mu, precision=lam, observed=x)
    d = x - mu
    # a known precision is what EP needs: here the precision is random, so only VMP
    with pytest.raises(ff.UnsupportedFactorError, match="precision"):
        model.infer("ep")
    q = model.infer("vmp")["lam"]
    assert_close(q.dof, 13.0, rtol=1e-12)
    assert_close(q.rate, np.eye(2) + d.T @ d, rtol=1e-12)


# ----- fused reductions over plates (VMP) --------------------------------------------------
def test_vmp_messages_to_a_shared_vector_are_reduced_by_their_operator():
    """The weights' messages from N data are summed inside the operator (one einsum): the
    message is declared over the weights' plates, and no prod_over follows it."""
    rng = np.random.default_rng(14)
    X, y = rng.normal(size=(6, 3)), rng.normal(size=6)
    source = regression(X, y, 2.0, np.zeros(3), np.eye(3)).compile("vmp").source
    assert "InnerProduct_a_average_logarithm(product=v_w_X__B, b=v_X, reduce=((v_n,), (0,)))" \
        in source.replace("v_w_array", "v_w_X").replace("b=v_w_X__b", "b=v_X")
    assert "v_w__use0__B = VectorGaussian.uniform((), 3)" in source
    assert "prod_over(v_w__use0__B" not in source
    with ff.Model() as mvn:
        mu = ff.VectorGaussian("mu", 0.0, precision=np.eye(2))
        lam = ff.Wishart("lam", 3.0, rate=np.eye(2))
        with ff.Plate(ff.Range("n", 5)):
            ff.VectorGaussian("x", mu, precision=lam, observed=rng.normal(size=(5, 2)))
    source = mvn.compile("vmp").source
    assert "VectorGaussian_precision_average_logarithm(sample=v_x, mean=v_mu__use0__F, " \
        "reduce=((v_n,), (0,)))" in source
    # EP keeps one message per datum: its cavities need them
    assert "reduce=" not in regression(X, y, 2.0, np.zeros(3), np.eye(3)).compile("ep").source


def test_fused_operators_equal_the_product_of_their_messages():
    from factorflow.factors import FACTORS
    from factorflow.runtime.kernels import prod_over

    rng = np.random.default_rng(15)
    K, N, D = 3, 5, 2
    m_out = ff.distributions.Gaussian(rng.normal(size=(K, N)), rng.uniform(0.5, 2, (K, N)))
    b = rng.normal(size=(N, D))        # a design matrix shared by the K groups
    q_b = ff.distributions.VectorGaussian(rng.normal(size=(K, N, D)),
                                          np.broadcast_to(np.eye(D), (K, N, D, D)))
    to_a = FACTORS["InnerProduct"].operators[("vmp", "a")].fn
    for other in (b, q_b):
        fused = to_a(product=m_out, b=other, reduce=((K, N), (1,)))
        plain = prod_over(to_a(product=m_out, b=other), (K, N), (1,))
        assert fused.batch_shape == (K,)
        for e_fused, e_plain in zip(fused.eta, plain.eta, strict=True):
            assert_close(e_fused, e_plain, rtol=1e-12, atol=1e-12)
    to_lam = FACTORS["VectorGaussian"].operators[("vmp", "precision")].fn
    x = rng.normal(size=(N, D))
    q_mu = ff.distributions.VectorGaussian(rng.normal(size=(K, 1, D)), 0.5 * np.eye(D))
    fused = to_lam(sample=x, mean=q_mu, reduce=((K, N), (1,)))
    plain = prod_over(to_lam(sample=x, mean=q_mu), (K, N), (1,))
    for e_fused, e_plain in zip(fused.eta, plain.eta, strict=True):
        assert_close(e_fused, e_plain, rtol=1e-12, atol=1e-12)
    # a term constant along the summed axis counts once per element
    assert_close(to_lam(sample=np.zeros(D), mean=q_mu, reduce=((K, N), (1,))).dof,
                 np.full(K, N + D + 1.0), rtol=1e-12)


def test_weighted_fused_operators_and_gate_clone_messages_equal_the_plain_product():
    """A gate clone's deferred message, weighted by its case probabilities and reduced by
    Gate.EnterOne (the mixture's path), equals the per-(n, k) messages raised to those
    probabilities and multiplied over n; so do the weighted fused operators themselves."""
    from factorflow.factors import FACTORS
    from factorflow.factors.common import Deferred
    from factorflow.factors.mixtures import expand, power_product
    from factorflow.runtime.kernels import prod_over

    rng = np.random.default_rng(16)
    N, K, D = 7, 3, 2
    x = rng.normal(size=(N, 1, D))
    resp = rng.dirichlet(np.ones(K), size=N)
    q_mu = ff.distributions.VectorGaussian(rng.normal(size=(K, D)),
                                           np.stack([spd(rng, D) for _ in range(K)]))
    q_lam = ff.distributions.Wishart(np.full(K, D + 2.0),
                                     np.stack([spd(rng, D) for _ in range(K)]))
    clones = {"mean": q_mu.broadcast_to((N, K)), "precision": q_lam.broadcast_to((N, K))}
    enter = FACTORS["Gate.EnterOne"].operators[("vmp", "value")].fn
    # the cases' message carries log weights, normalised over the K cases
    cases = ff.distributions.Bernoulli.from_natural(np.log(resp))
    for target, other, value in (("precision", "mean", q_lam), ("mean", "precision", q_mu)):
        op = FACTORS["VectorGaussian"].operators[("vmp", target)].fn
        args = {"sample": x, other: clones[other]}
        plain = prod_over(power_product(expand(op(**args), (N, K, 1)), resp[..., None]),
                          (N, K), (0,))
        for msg in (Deferred(op, args), op(**args)):
            fused = enter(enter_one=msg, cases=cases, value=value, index=np.arange(K),
                          reduce=((N, K), (0,)))
            assert fused.batch_shape == (K,)
            for e_fused, e_plain in zip(fused.eta, plain.eta, strict=True):
                assert_close(e_fused, e_plain, rtol=1e-12, atol=1e-12)
        direct = enter(enter_one=Deferred(op, args), cases=cases, value=value,
                       index=np.arange(K))   # not reduced: the deferred call is made
        per_element = power_product(expand(op(**args), (N, K, 1)), resp[..., None])
        for e_direct, e_plain in zip(direct.eta, per_element.eta, strict=True):
            assert_close(e_direct, e_plain, rtol=1e-12, atol=1e-12)


def test_a_mixture_makes_no_per_datum_component_matrices():
    """In a D-dimensional mixture under VMP the components' messages from the data are
    deferred and reduced inside Gate.EnterOne on the gate path (``fuse_switch=False``; the
    generated code shows the deferred calls) and are one contraction in the fused
    statement (the default): either way a sweep's peak memory stays below one
    (N, K, D, D) array."""
    import tracemalloc

    n, k, dim = 1500, 6, 8
    rng = np.random.default_rng(3)
    x = rng.normal(size=(n, dim)) + 4 * rng.integers(0, 2, size=(n, 1))
    gmm = runpy.run_path(str(Path(__file__).parents[2] / "examples" / "gaussian_mixture.py"))
    gate = gmm["mixture"](x, k).compile("vmp", init=["means"], fuse_switch=False)
    assert gate.source.count("Deferred(VectorGaussian_") >= 2
    assert "reduce=((v_n, v_k,), (0,))" in gate.source
    fused = gmm["mixture"](x, k).compile("vmp", init=["means"])
    assert "SwitchVectorGaussian" in fused.source
    start = ff.distributions.VectorGaussian(rng.normal(size=(k, dim)) * 3,
                                            np.broadcast_to(np.eye(dim), (k, dim, dim)))
    for compiled in (gate, fused):
        compiled.run(init={"means": start}, iterations=1, tolerance=None)
        tracemalloc.start()
        compiled.run(init={"means": start}, iterations=2, tolerance=None)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < n * k * dim * dim * 8


def test_a_mixture_with_deferred_messages_resumes_and_runs_standalone(tmp_path):
    """A checkpoint saves a deferred message as its value: the resumed run is the
    uninterrupted one, bit for bit; the standalone module gives the same numbers."""
    gmm = runpy.run_path(str(Path(__file__).parents[2] / "examples" / "gaussian_mixture.py"))
    x = gmm["data"](60)
    compiled = gmm["mixture"](x, 3).compile("vmp", init=["means"])
    start = ff.distributions.VectorGaussian(gmm["CENTERS"] + 0.5,
                                            np.broadcast_to(np.eye(2), (3, 2, 2)))
    whole = compiled.run(init={"means": start}, iterations=12, tolerance=None)
    compiled.run(init={"means": start}, iterations=12, tolerance=None,
                 checkpoint=tmp_path / "c.ckpt", every=5)
    again = compiled.run(init={"means": start}, iterations=12, tolerance=None,
                         checkpoint=tmp_path / "c.ckpt")
    for name in ("means", "precs"):
        for a, b in zip(again[name].eta, whole[name].eta, strict=True):
            assert np.array_equal(a, b)
    compiled.save_module(tmp_path / "standalone.py")
    posteriors, bound = runpy.run_path(str(tmp_path / "standalone.py"))["run"](
        12, init={"means": start})
    assert_close(posteriors["precs"].rate, whole["precs"].rate, rtol=1e-12)
    assert_close(bound, whole.log_evidence, rtol=1e-12)


# ----- a D-dimensional Gaussian mixture with Wishart precisions (VMP) ---------------------
def gmm_by_hand(x, k, init_means, m0, p0, nu0, r0, alpha0, sweeps=2000):
    """Bishop's variational mixture (§10.2) with μ_k ⊥ Λ_k, written out: coordinate ascent
    on q(z) q(π) Π q(μ_k) q(Λ_k), starting from q(μ_k) = N(init_means[k], I) and the
    other factors at their priors.  Returns the posteriors' parameters and the ELBO."""
    n, dim = x.shape
    m, s = init_means.copy(), np.broadcast_to(np.eye(dim), (k, dim, dim)).copy()
    nu, r = np.full(k, nu0), np.broadcast_to(r0, (k, dim, dim)).copy()
    alpha = np.full(k, alpha0)
    for _ in range(sweeps):
        before = m.copy()
        e_lam = nu[:, None, None] * np.linalg.inv(r)
        e_logdet = (np.sum(special.digamma((nu[:, None] - np.arange(dim)) / 2), axis=1)
                    + dim * np.log(2) - np.linalg.slogdet(r)[1])
        e_logpi = special.digamma(alpha) - special.digamma(alpha.sum())
        d = x[:, None, :] - m[None]                                   # (n, k, D)
        quad = (np.einsum("nki,kij,nkj->nk", d, e_lam, d)
                + np.einsum("kij,kji->k", e_lam, s))
        log_rho = e_logpi + 0.5 * e_logdet - 0.5 * dim * np.log(2 * np.pi) - 0.5 * quad
        resp = np.exp(log_rho - special.logsumexp(log_rho, axis=1, keepdims=True))
        counts = resp.sum(axis=0)
        alpha = alpha0 + counts
        p = p0 + counts[:, None, None] * e_lam
        s = np.linalg.inv(p)
        m = np.einsum("kij,kj->ki", s, p0 @ m0 + np.einsum("kij,kj->ki", e_lam, resp.T @ x))
        d = x[:, None, :] - m[None]
        nu = nu0 + counts
        r = r0 + np.einsum("nk,nki,nkj->kij", resp, d, d) + counts[:, None, None] * s
        if np.max(np.abs(m - before)) < 1e-14:
            break
    # the ELBO at the final posteriors, each term written from its definition
    e_lam = nu[:, None, None] * np.linalg.inv(r)
    e_logdet = (np.sum(special.digamma((nu[:, None] - np.arange(dim)) / 2), axis=1)
                + dim * np.log(2) - np.linalg.slogdet(r)[1])
    e_logpi = special.digamma(alpha) - special.digamma(alpha.sum())
    d = x[:, None, :] - m[None]
    quad = np.einsum("nki,kij,nkj->nk", d, e_lam, d) + np.einsum("kij,kji->k", e_lam, s)
    log_rho = e_logpi + 0.5 * e_logdet - 0.5 * dim * np.log(2 * np.pi) - 0.5 * quad
    resp = np.exp(log_rho - special.logsumexp(log_rho, axis=1, keepdims=True))
    dm = m - m0
    elbo = (np.sum(resp * log_rho) - np.sum(special.xlogy(resp, resp))
            + special.gammaln(k * alpha0) - k * special.gammaln(alpha0)
            + (alpha0 - 1) * e_logpi.sum() + stats.dirichlet(alpha).entropy()
            + np.sum(0.5 * np.linalg.slogdet(p0)[1] - 0.5 * dim * np.log(2 * np.pi)
                     - 0.5 * (np.einsum("ki,ij,kj->k", dm, p0, dm)
                              + np.einsum("ij,kji->k", p0, s)))
            + np.sum(0.5 * (nu0 - dim - 1) * e_logdet - 0.5 * np.einsum("ij,kji->k", r0, e_lam)
                     + 0.5 * nu0 * np.linalg.slogdet(r0)[1] - 0.5 * nu0 * dim * np.log(2)
                     - special.multigammaln(nu0 / 2, dim))
            + sum(stats.multivariate_normal(m[j], s[j]).entropy()
                  + stats.wishart(df=nu[j], scale=np.linalg.inv(r[j])).entropy()
                  for j in range(k)))
    return {"means": m, "covariances": s, "dof": nu, "rates": r, "alpha": alpha,
            "elbo": elbo}


def gmm_data(seed=0, n=60):
    rng = np.random.default_rng(seed)
    centers = np.array([[0.0, 0.0], [5.0, 5.0], [-5.0, 5.0]])
    x = centers[rng.integers(0, 3, n)] + rng.normal(size=(n, 2))
    return x, centers + 0.5


def test_gaussian_mixture_with_wishart_precisions_matches_hand_written_vmp():
    """The gallery's model (examples/gaussian_mixture.py) on other data."""
    x, init = gmm_data()
    k, dim = 3, 2
    example = Path(__file__).parents[2] / "examples" / "gaussian_mixture.py"
    model = runpy.run_path(str(example))["mixture"](x, k)
    start = ff.distributions.VectorGaussian(init, np.broadcast_to(np.eye(dim), (k, dim, dim)))
    result = model.infer("vmp", init={"means": start}, iterations=500)
    assert result.converged
    assert np.all(np.diff(result.trace) > -1e-9 * abs(result.trace[-1]))
    ref = gmm_by_hand(x, k, init, np.zeros(dim), 0.01 * np.eye(dim), dim + 1.0, np.eye(dim),
                      1.0)
    assert_close(result["means"].mean, ref["means"], rtol=1e-7, atol=1e-8)
    assert_close(result["means"].covariance, ref["covariances"], rtol=1e-7, atol=1e-10)
    assert_close(result["precs"].dof, ref["dof"], rtol=1e-8)
    assert_close(result["precs"].rate, ref["rates"], rtol=1e-7)
    assert_close(result["weights"].alpha, ref["alpha"], rtol=1e-8)
    assert_close(result.log_evidence, ref["elbo"], rtol=1e-9)


def test_vector_results_save_resume_and_run_standalone(tmp_path):
    rng = np.random.default_rng(16)
    X, y = rng.normal(size=(5, 3)), rng.normal(size=5)
    with ff.Model("saved") as model:
        w = ff.VectorGaussian("w", 0.0, precision=np.eye(3))
        lam = ff.Wishart("lam", 4.0, rate=np.eye(3))
        tau = ff.Gamma("tau", 1.0, rate=1.0)
        with ff.Plate(ff.Range("n", 5)):
            ff.Gaussian("y", X @ w, precision=tau, observed=y)
            ff.VectorGaussian("x", w, precision=lam, observed=X)
    compiled = model.compile("vmp")
    result = compiled.run(iterations=100)
    result.to_netcdf(tmp_path / "r.nc")
    loaded = ff.load_result(tmp_path / "r.nc")
    for name in ("w", "lam"):
        for a, b in zip(loaded[name].eta, result[name].eta, strict=True):
            assert np.array_equal(a, b)
    first = compiled.run(iterations=20, checkpoint=tmp_path / "c.ckpt", every=3)
    again = compiled.run(iterations=20, checkpoint=tmp_path / "c.ckpt")
    assert np.array_equal(first["lam"].eta[1], again["lam"].eta[1])
    compiled.save_module(tmp_path / "standalone.py")
    posteriors, log_evidence = runpy.run_path(str(tmp_path / "standalone.py"))["run"](100)
    assert_close(posteriors["w"].mean, result["w"].mean, rtol=1e-12)
    assert_close(log_evidence, result.log_evidence, rtol=1e-12)


def test_an_observed_vector_variable_is_a_design_matrix():
    rng = np.random.default_rng(17)
    X, y = rng.normal(size=(6, 3)), rng.normal(size=6)
    with ff.Model() as model:
        w = ff.VectorGaussian("w", 0.0, precision=np.eye(3))
        with ff.Plate(ff.Range("n", 6)):
            x = ff.VectorGaussian("x", 0.0, precision=np.eye(3), observed=X)
            ff.Gaussian("y", x @ w, precision=2.0, observed=y)
    mean, cov, _ = closed_form(X, y, 2.0, np.zeros(3), np.eye(3))
    for algorithm in ("ep", "vmp"):
        q = model.infer(algorithm)["w"]
        assert_close(q.mean, mean, rtol=1e-10, atol=1e-12)
        assert_close(q.covariance, cov, rtol=1e-10, atol=1e-12)


def test_inner_product_of_two_random_vectors_under_vmp():
    """y[n] ~ N(w · z[n], 1/τ), w and z[n] VectorGaussian: mean-field VMP written out."""
    rng = np.random.default_rng(18)
    n, dim, tau = 8, 2, 3.0
    y = rng.normal(size=n) + 1.0
    with ff.Model() as model:
        w = ff.VectorGaussian("w", np.ones(dim), precision=np.eye(dim))
        with ff.Plate(ff.Range("n", n)):
            z = ff.VectorGaussian("z", 0.5, precision=2.0 * np.eye(dim))
            ff.Gaussian("y", w @ z, precision=tau, observed=y)
    result = model.infer("vmp", iterations=2000, tolerance=1e-13)
    # by hand: q(w) = N(mw, Sw), q(z_n) = N(mz_n, Sz_n), coordinate ascent to convergence
    mw, sw = np.ones(dim), np.eye(dim)
    pz0, mz0 = 2.0 * np.eye(dim), np.full(dim, 0.5)
    for _ in range(5000):
        ww = np.outer(mw, mw) + sw
        sz = np.linalg.inv(pz0 + tau * ww)
        mz = (sz @ (pz0 @ mz0 + tau * np.outer(y, mw)).T).T            # (n, D)
        zz = np.einsum("ni,nj->ij", mz, mz) + n * sz
        sw_new = np.linalg.inv(np.eye(dim) + tau * zz)
        mw_new = sw_new @ (np.ones(dim) + tau * mz.T @ y)
        done = np.max(np.abs(mw_new - mw)) < 1e-15
        mw, sw = mw_new, sw_new
        if done:
            break
    assert result.converged
    assert np.all(np.diff(result.trace) > -1e-9 * abs(result.trace[-1]))
    assert_close(result["w"].mean, mw, rtol=1e-8, atol=1e-10)
    assert_close(result["w"].covariance, sw, rtol=1e-8)
    assert_close(result["z"].mean, mz, rtol=1e-8, atol=1e-10)


def test_a_wishart_rate_is_conjugate_to_the_wishart():
    """R ~ W(ν0, R0), Λ[n] ~ W(ν, R) observed: R's posterior is W(ν0 + N ν, R0 + Σ Λ[n])
    (exact under VMP and EP: R is the only latent variable)."""
    rng = np.random.default_rng(19)
    lams = np.array([spd(rng, 2) for _ in range(4)])
    with ff.Model() as model:
        rate = ff.Wishart("rate", 3.0, rate=np.eye(2))
        with ff.Plate(ff.Range("n", 4)):
            ff.Wishart("lam", 2.5, rate=rate, observed=lams)
    ref = stats.wishart(df=3.0 + 4 * 2.5, scale=np.linalg.inv(np.eye(2) + lams.sum(axis=0)))
    for algorithm in ("vmp", "ep"):
        result = model.infer(algorithm)
        q = result["rate"]
        assert_close(q.dof, 13.0, rtol=1e-12)
        assert_close(q.rate, np.eye(2) + lams.sum(axis=0), rtol=1e-12)
        assert_close(q.entropy(), ref.entropy(), rtol=1e-10)
    # the evidence: Π_n W(Λ_n; ν, R) integrated over R's prior, by the normalisers
    prior, post = ff.distributions.Wishart(3.0, np.eye(2)), q
    log_z = (post.log_normalizer() - prior.log_normalizer()
             + np.sum(0.5 * (2.5 - 3) * np.linalg.slogdet(lams)[1]
                      - 0.5 * 2.5 * 2 * np.log(2) - special.multigammaln(1.25, 2)))
    assert_close(model.infer("ep").log_evidence, log_z, rtol=1e-10)


# ----- B @ z and vector sums: linear-Gaussian models --------------------------------------
def _linear_gaussian_posterior(blocks, offset, y, lam, m0, p0):
    """The exact posterior of z and log p(y) for y[n] ~ N(Σ_k blocks[k][n] z + offset[n],
    Λ⁻¹), z ~ N(m0, P0⁻¹) (``blocks``: (N, M, D) per datum, z stacked)."""
    a = blocks  # (N, M, D)
    p = p0 + np.einsum("nkd,kl,nle->de", a, lam, a)
    cov = np.linalg.inv(p)
    mean = cov @ (p0 @ m0 + np.einsum("nkd,kl,nl->d", a, lam, y - offset))
    big_a = a.reshape(-1, a.shape[-1])
    noise = np.kron(np.eye(len(y)), np.linalg.inv(lam))
    marg = stats.multivariate_normal((big_a @ m0 + offset.ravel()),
                                     big_a @ np.linalg.inv(p0) @ big_a.T + noise)
    return mean, cov, marg.logpdf(y.ravel())


@settings(max_examples=30, deadline=None)
@given(dim=st.integers(1, 4), data=st.data(), rows=st.integers(1, 4),
       seed=st.integers(0, 2**32 - 1), algorithm=st.sampled_from(["ep", "vmp"]),
       per_datum=st.booleans())
def test_a_plus_b_at_z_is_the_closed_form(dim, data, rows, seed, algorithm, per_datum):
    """y[n] ~ N(a + B z, Λ⁻¹) with a known B (one for all, or one per datum): posterior
    mean, covariance and evidence are the closed form (1e-10) under EP and VMP."""
    out = data.draw(st.integers(1, dim))
    rng = np.random.default_rng(seed)
    # singular values in [0.5, 2]: through the product's message (B Σ Bᵀ inverted) the
    # evidence loses about cond(B)² ε (1e-9 at cond(B) = 4,000, seen at D = M = 2)
    u, _, vt = np.linalg.svd(rng.normal(size=(rows, out, dim) if per_datum else (out, dim)),
                             full_matrices=False)
    b = np.einsum("...ij,...j,...jk->...ik", u, rng.uniform(0.5, 2.0, size=u.shape[:-1]), vt)
    a = rng.normal(size=(rows, out))
    lam, m0, p0 = spd(rng, out), rng.normal(size=dim), spd(rng, dim)
    y = rng.normal(size=(rows, out)) * 2
    with ff.Model() as model:
        z = ff.VectorGaussian("z", m0, precision=p0)
        with ff.Plate(ff.Range("n", rows)):
            # B (rows, M, D) per datum is B @ z; one (M, D) B could also read as a design
            # matrix (one row per datum) when M == rows, so it is written explicitly
            product = b @ z if per_datum else ff.matvec(b, z)
            ff.VectorGaussian("y", a + product, precision=lam, observed=y)
    assert_conditioning(model.infer(algorithm), np.broadcast_to(b, (rows, out, dim)), a, y,
                        lam, m0, p0)


def assert_conditioning(result, blocks, offset, y, lam, m0, p0):
    """``result`` converged, and its z's mean and covariance and its evidence are
    ``_linear_gaussian_posterior``'s (1e-10)."""
    mean, cov, log_z = _linear_gaussian_posterior(blocks, offset, y, lam, m0, p0)
    assert result.converged
    assert_close(result["z"].mean, mean, rtol=1e-10, atol=1e-10)
    assert_close(result["z"].covariance, cov, rtol=1e-10, atol=1e-10)
    assert_close(result.log_evidence, log_z, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("algorithm", ["ep", "vmp"])
@pytest.mark.parametrize("form", ["u + B @ v", "B @ v + u", "u - B @ v", "B @ v - u"])
def test_a_sum_of_two_random_vectors(algorithm, form):
    """y ~ N(u ± B v, Λ⁻¹) with u and v random: EP's posteriors are the exact marginals of
    the joint Gaussian posterior (and its evidence log p(y)); VMP's means are the exact
    means (mean field on a Gaussian), its precisions the joint precision's diagonal
    blocks."""
    rng = np.random.default_rng(7)
    d = 3
    b = rng.normal(size=(d, d))
    lam, pu, pv = spd(rng, d), spd(rng, d), spd(rng, d)
    mu, mv, y = rng.normal(size=d), rng.normal(size=d), rng.normal(size=d)
    sign = -1.0 if "-" in form else 1.0
    su, sv = (1.0, sign) if form.startswith("u") else (sign, 1.0)
    with ff.Model() as model:
        u = ff.VectorGaussian("u", mu, precision=pu)
        v = ff.VectorGaussian("v", mv, precision=pv)
        mean = {"u + B @ v": lambda: u + b @ v, "B @ v + u": lambda: b @ v + u,
                "u - B @ v": lambda: u - b @ v, "B @ v - u": lambda: b @ v - u}[form]()
        ff.VectorGaussian("y", mean, precision=lam, observed=y)
    a = np.hstack([su * np.eye(d), sv * b])  # y = A [u; v] + noise
    p0 = np.block([[pu, np.zeros((d, d))], [np.zeros((d, d)), pv]])
    m0 = np.concatenate([mu, mv])
    post_mean, post_cov, log_z = _linear_gaussian_posterior(a[None], np.zeros((1, d)),
                                                            y[None], lam, m0, p0)
    result = model.infer(algorithm, iterations=500, tolerance=1e-14)
    assert_close(result["u"].mean, post_mean[:d], rtol=1e-9, atol=1e-9)
    assert_close(result["v"].mean, post_mean[d:], rtol=1e-9, atol=1e-9)
    if algorithm == "ep":
        assert_close(result["u"].covariance, post_cov[:d, :d], rtol=1e-10, atol=1e-10)
        assert_close(result["v"].covariance, post_cov[d:, d:], rtol=1e-10, atol=1e-10)
        assert_close(result.log_evidence, log_z, rtol=1e-10, atol=1e-10)
    else:
        joint = np.linalg.inv(post_cov)
        assert_close(result["u"].precision, joint[:d, :d], rtol=1e-10, atol=1e-10)
        assert_close(result["v"].precision, joint[d:, d:], rtol=1e-10, atol=1e-10)


# ----- Bayesian PCA: W[d] @ z[n], both random (VMP) ---------------------------------------
def _gamma_kl(a, b, a0, b0):
    return ((a - a0) * special.digamma(a) - special.gammaln(a) + special.gammaln(a0)
            + a0 * (np.log(b) - np.log(b0)) + a * (b0 - b) / b)


def _standard_normal_kl(mean, cov):
    """Σ KL(N(mean, cov) ‖ N(0, I)) over the leading axis."""
    k = mean.shape[-1]
    return np.sum(0.5 * (np.trace(cov, axis1=-2, axis2=-1) + np.sum(mean**2, axis=-1) - k
                         - np.linalg.slogdet(cov)[1]))


def bpca_by_hand(y, z_mean, z_cov, sweeps, a0=1.0, b0=1.0):
    """Mean-field VMP for y[n, d] ~ N(W[d]·z[n], 1/τ), W[d], z[n] ~ N(0, I), τ ~ Gamma(a0,
    b0), written as BayesPy's updates, in factorflow's schedule order: τ from its prior,
    then per sweep W, τ, z (BayesPy's order, τ's prior mean in the first W update; the
    fused InnerProductGaussian factor).  Returns the posteriors and the ELBO computed
    directly."""
    n, dim = y.shape
    k = z_mean.shape[1]
    w_mean, w_cov = np.zeros((dim, k)), np.broadcast_to(np.eye(k), (dim, k, k)).copy()

    def tau_update():
        ezz = z_cov + z_mean[:, :, None] * z_mean[:, None, :]
        eww = w_cov + w_mean[:, :, None] * w_mean[:, None, :]
        resid = (np.sum(y**2) - 2 * np.einsum("nd,dk,nk->", y, w_mean, z_mean)
                 + np.einsum("dij,nij->", eww, ezz))
        return a0 + n * dim / 2, b0 + 0.5 * resid, resid

    a, b = a0, b0
    for _ in range(sweeps):
        e_tau = a / b
        ezz = np.sum(z_cov + z_mean[:, :, None] * z_mean[:, None, :], axis=0)
        w_cov = np.broadcast_to(np.linalg.inv(np.eye(k) + e_tau * ezz), (dim, k, k)).copy()
        w_mean = np.einsum("dij,dj->di", w_cov, e_tau * y.T @ z_mean)
        a, b, _ = tau_update()
        e_tau = a / b
        eww = np.sum(w_cov + w_mean[:, :, None] * w_mean[:, None, :], axis=0)
        z_cov = np.broadcast_to(np.linalg.inv(np.eye(k) + e_tau * eww), (n, k, k)).copy()
        z_mean = np.einsum("nij,nj->ni", z_cov, e_tau * y @ w_mean)
    _, _, resid = tau_update()
    e_log_tau = special.digamma(a) - np.log(b)
    elbo = (n * dim * 0.5 * (e_log_tau - np.log(2 * np.pi)) - 0.5 * (a / b) * resid
            - _standard_normal_kl(w_mean, w_cov) - _standard_normal_kl(z_mean, z_cov)
            - _gamma_kl(a, b, a0, b0))
    return {"w_mean": w_mean, "w_cov": w_cov, "z_mean": z_mean, "z_cov": z_cov,
            "tau": (a, b), "elbo": elbo}


def test_bayesian_pca_equals_hand_written_vmp():
    """W @ z with W's rows and z random (one inner product per (n, d)): after each number
    of sweeps the posteriors and the bound equal a hand-written VMP run in the same order
    from the same start (1e-9), and the bound never falls."""
    rng = np.random.default_rng(2)
    n, dim, k = 30, 4, 2
    y = rng.normal(size=(n, k)) @ rng.normal(size=(k, dim)) * 2 + 0.3 * rng.normal(
        size=(n, dim))
    bpca = runpy.run_path(str(Path(__file__).parents[2] / "examples" / "bayesian_pca.py"))
    compiled = bpca["pca"](y, k).compile("vmp", init=["z"])
    z0 = rng.normal(size=(n, k))
    start = ff.distributions.VectorGaussian(z0, np.broadcast_to(np.eye(k), (n, k, k)))
    bounds = []
    for sweeps in (1, 2, 5, 20):
        result = compiled.run(init={"z": start}, iterations=sweeps, tolerance=None)
        ref = bpca_by_hand(y, z0, np.broadcast_to(np.eye(k), (n, k, k)), sweeps)
        assert_close(result["W"].mean, ref["w_mean"], rtol=1e-9, atol=1e-9)
        assert_close(result["W"].covariance, ref["w_cov"], rtol=1e-9, atol=1e-9)
        assert_close(result["z"].mean, ref["z_mean"], rtol=1e-9, atol=1e-9)
        assert_close(result["z"].covariance, ref["z_cov"], rtol=1e-9, atol=1e-9)
        assert_close([result["tau"].shape_param, result["tau"].rate], ref["tau"], rtol=1e-10)
        assert_close(result.log_evidence, ref["elbo"], rtol=1e-10)
        bounds.append(result.log_evidence)
    assert np.all(np.diff(result.trace) > -1e-9 * abs(result.trace[-1]))
    assert np.all(np.diff(bounds) > 0)


def test_ep_vector_gaussian_entered_into_a_gate_is_the_mixture_projection():
    """w ~ N(0, I₂), c ~ Bernoulli(0.5); If(c): y ~ N(a·w, 1), else y ~ N(0, 1), y = 0.3.
    One non-Gaussian site: EP's posterior of w is the exact mixture's mean and full
    covariance (it raised a raw TypeError: no projection of VectorGaussian mixtures),
    and P(c | y) and log Z are exact."""
    a, y = np.array([1.0, 2.0]), 0.3
    with ff.Model() as model:
        w = ff.VectorGaussian("w", np.zeros(2), precision=np.eye(2))
        c = ff.Bernoulli("c", 0.5)
        with ff.If(c):
            ff.Gaussian("y", ff.inner(w, a), precision=1.0, observed=y)
        with ff.IfNot(c):
            ff.Gaussian("y", 0.0, precision=1.0, observed=y)
    z_on, z_off = 0.5 * stats.norm(0, np.sqrt(1 + a @ a)).pdf(y), 0.5 * stats.norm.pdf(y)
    p_on = z_on / (z_on + z_off)
    mean_on = a * y / (1 + a @ a)
    cov_on = np.eye(2) - np.outer(a, a) / (1 + a @ a)
    mean = p_on * mean_on
    second = p_on * (cov_on + np.outer(mean_on, mean_on)) + (1 - p_on) * np.eye(2)
    result = model.infer("ep", iterations=50)
    assert_close(result.log_evidence, np.log(z_on + z_off), atol=1e-10)
    assert_close(result["c"].p, p_on, atol=1e-10)
    assert_close(result["w"].mean, mean, atol=1e-10)
    assert_close(result["w"].covariance, second - np.outer(mean, mean), atol=1e-10)
