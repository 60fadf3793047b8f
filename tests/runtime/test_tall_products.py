"""``ff.VectorGaussian(name, B @ z + a, precision=Λ)`` with B z degenerate (M > D, or
dependent rows): the fused LinearVectorGaussian factor, against Gaussian conditioning.

* B known, z latent: the posterior of z and the evidence are the closed form (1e-10)
  under EP and VMP, for hypothesis-generated shapes, offsets on either side, one B for
  all data or one per datum.
* x = B z + a + noise latent, observed through a second Gaussian: EP's posterior of z is
  exact, VMP's mean is (mean field on a Gaussian).
* Bayesian PCA with more observed dimensions than latent ones (W's rows and z random,
  VMP): the posteriors and the bound equal a hand-written VMP of BayesPy's updates (1e-8)
  for hypothesis-generated shapes.
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
from tests.runtime.test_vector_models import (
    _linear_gaussian_posterior,
    assert_conditioning,
    bpca_by_hand,
    spd,
)

FORMS = {  # form -> (the model's mean of B z, a, (sign of B, sign of a) in y = ±B z ± a)
    "B @ z + a": (lambda bz, a: bz + a, (1.0, 1.0)),
    "a + B @ z": (lambda bz, a: a + bz, (1.0, 1.0)),
    "B @ z - a": (lambda bz, a: bz - a, (1.0, -1.0)),
    "a - B @ z": (lambda bz, a: a - bz, (-1.0, 1.0)),
    "B @ z": (lambda bz, a: bz, (1.0, 0.0)),
}


@settings(max_examples=25, deadline=None)
@given(dim=st.integers(1, 3), extra=st.integers(0, 3), rows=st.integers(1, 3),
       seed=st.integers(0, 2**32 - 1), algorithm=st.sampled_from(["ep", "vmp"]),
       per_datum=st.booleans(), form=st.sampled_from(sorted(FORMS)))
def test_a_tall_known_matrix_is_gaussian_conditioning(dim, extra, rows, seed, algorithm,
                                                      per_datum, form):
    """y[n] ~ N(±B z ± a, Λ⁻¹), B of M = D + 1 + ``extra`` rows (``extra`` 0 with D > 1:
    M = D with two equal rows, rank deficient), z ~ N(m0, P0⁻¹): z's posterior mean,
    covariance and the evidence equal Gaussian conditioning (1e-10)."""
    rng = np.random.default_rng(seed)
    out = dim + 1 + extra if extra or dim == 1 else dim
    b = rng.normal(size=(rows, out, dim) if per_datum else (out, dim))
    if out == dim:  # rank deficient: the last row repeats the first
        b[..., -1, :] = b[..., 0, :]
    a = rng.normal(size=(rows, out))
    lam, m0, p0 = spd(rng, out), rng.normal(size=dim), spd(rng, dim)
    y = rng.normal(size=(rows, out)) * 2
    build, (sb, sa) = FORMS[form]
    with ff.Model() as model:
        z = ff.VectorGaussian("z", m0, precision=p0)
        with ff.Plate(ff.Range("n", rows)):
            # one (M, D) B would read as a design matrix (one row per datum) when M equals
            # the number of data, so it is written explicitly
            product = b @ z if per_datum else ff.matvec(b, z)
            ff.VectorGaussian("y", build(product, a), precision=lam, observed=y)
    assert any(s.factor == "LinearVectorGaussian" for s in model.statements)
    assert_conditioning(model.infer(algorithm), np.broadcast_to(sb * b, (rows, out, dim)),
                        sa * a, y, lam, m0, p0)


@pytest.mark.parametrize("algorithm", ["ep", "vmp"])
def test_a_latent_tall_product_observed_through_noise(algorithm):
    """x ~ N(B z + a, Λ⁻¹) latent (M = 4 > D = 2), y ~ N(x, S⁻¹) observed: z's posterior
    is conditioning on y ~ N(B z + a, Λ⁻¹ + S⁻¹).  EP: mean, covariance and evidence exact
    (1e-10); VMP: the mean exact (mean field over x and z), the bound below log p(y)."""
    rng = np.random.default_rng(3)
    out, dim = 4, 2
    b, a = rng.normal(size=(out, dim)), rng.normal(size=out)
    lam, s, m0, p0 = spd(rng, out), spd(rng, out), rng.normal(size=dim), spd(rng, dim)
    y = rng.normal(size=out)
    with ff.Model() as model:
        z = ff.VectorGaussian("z", m0, precision=p0)
        x = ff.VectorGaussian("x", b @ z + a, precision=lam)
        ff.VectorGaussian("y", x, precision=s, observed=y)
    noise = np.linalg.inv(np.linalg.inv(lam) + np.linalg.inv(s))
    mean, cov, log_z = _linear_gaussian_posterior(b[None], a[None], y[None], noise, m0, p0)
    result = model.infer(algorithm, iterations=2000, tolerance=1e-15)
    assert_close(result["z"].mean, mean, rtol=1e-9, atol=1e-9)
    if algorithm == "ep":
        assert_close(result["z"].covariance, cov, rtol=1e-10, atol=1e-10)
        assert_close(result.log_evidence, log_z, rtol=1e-10, atol=1e-10)
        x_cov = np.linalg.inv(np.linalg.inv(b @ np.linalg.inv(p0) @ b.T + np.linalg.inv(lam))
                              + s)
        assert_close(result["x"].covariance, x_cov, rtol=1e-10, atol=1e-10)
    else:
        assert result.log_evidence < log_z


def test_a_wishart_noise_precision_under_vmp_matches_coordinate_ascent():
    """y[n] ~ N(B z + a, Λ⁻¹), B 3 × 2, Λ ~ Wishart(ν, R), z ~ N(m0, P0⁻¹) under VMP: the
    fixed point is a hand-written coordinate ascent's (1e-9) and the bound is the ELBO
    computed directly from the posteriors."""
    rng = np.random.default_rng(5)
    n, out, dim = 6, 3, 2
    b, a = rng.normal(size=(out, dim)), rng.normal(size=out)
    m0, p0, rate, nu = rng.normal(size=dim), spd(rng, dim), spd(rng, out), out + 2.0
    y = rng.normal(size=(n, out))
    with ff.Model() as model:
        z = ff.VectorGaussian("z", m0, precision=p0)
        lam = ff.Wishart("lam", nu, rate=rate)
        with ff.Plate(ff.Range("n", n)):
            ff.VectorGaussian("y", b @ z + a, precision=lam, observed=y)
    result = model.infer("vmp", iterations=500, tolerance=1e-14)
    # coordinate ascent: q(z) = N(m, C), q(Λ) = Wishart(ν + n, R + Σ E[r rᵀ])
    e_lam = nu * np.linalg.inv(rate)
    for _ in range(500):
        prec = p0 + n * b.T @ e_lam @ b
        c = np.linalg.inv(prec)
        m = c @ (p0 @ m0 + b.T @ e_lam @ np.sum(y - a, axis=0))
        r = y - a - b @ m
        post_rate = rate + r.T @ r + n * b @ c @ b.T
        e_lam = (nu + n) * np.linalg.inv(post_rate)
    assert_close(result["z"].mean, m, rtol=1e-9, atol=1e-9)
    assert_close(result["z"].covariance, c, rtol=1e-9, atol=1e-9)
    assert_close(result["lam"].rate, post_rate, rtol=1e-9, atol=1e-9)
    post = stats.wishart(nu + n, np.linalg.inv(post_rate))
    e_logdet = (np.sum(special.digamma((nu + n - np.arange(out)) / 2)) + out * np.log(2)
                - np.linalg.slogdet(post_rate)[1])
    lik = n * (0.5 * e_logdet - 0.5 * out * np.log(2 * np.pi)) - 0.5 * np.trace(
        e_lam @ (r.T @ r + n * b @ c @ b.T))
    kl_z = 0.5 * (np.trace(p0 @ c) + (m - m0) @ p0 @ (m - m0) - dim
                  - np.linalg.slogdet(p0)[1] - np.linalg.slogdet(c)[1])
    # KL(q ‖ p) = −H(q) − E_q log p(Λ), p's normaliser in closed form
    kl_lam = (-post.entropy() - (0.5 * (nu - out - 1) * e_logdet
                                 - 0.5 * np.trace(rate @ e_lam))
              + _wishart_log_normalizer(nu, rate))
    assert_close(result.log_evidence, lik - kl_z - kl_lam, rtol=1e-9, atol=1e-9)


def _wishart_log_normalizer(nu, rate):
    """log of ∫ |Λ|^((ν − D − 1)/2) exp(−tr(R Λ)/2) dΛ."""
    d = rate.shape[-1]
    return (0.5 * nu * d * np.log(2) - 0.5 * nu * np.linalg.slogdet(rate)[1]
            + special.multigammaln(0.5 * nu, d))


# ----- Bayesian PCA with M > D: W's rows and z random (VMP) -------------------------------
_PCA = runpy.run_path(str(Path(__file__).parents[2] / "examples" / "bayesian_pca.py"))


@settings(max_examples=15, deadline=None)
@given(n=st.integers(2, 8), k=st.integers(1, 3), extra=st.integers(1, 3),
       sweeps=st.integers(1, 6), seed=st.integers(0, 2**32 - 1))
def test_bayesian_pca_with_more_dimensions_than_latents_is_hand_written_vmp(
        n, k, extra, sweeps, seed):
    """y[n, m] ~ N(W[m] · z[n], 1/τ), M = K + ``extra`` observed dimensions, K latent:
    after ``sweeps`` sweeps from a random start of z, the posterior means and covariances
    of W and z, τ's Gamma and the bound equal a hand-written VMP (BayesPy's updates in the
    same order, its ELBO computed directly) to 1e-8."""
    rng = np.random.default_rng(seed)
    dim = k + extra
    y = rng.normal(size=(n, k)) @ rng.normal(size=(k, dim)) + 0.5 * rng.normal(size=(n, dim))
    z0 = rng.normal(size=(n, k))
    start = ff.distributions.VectorGaussian(z0, np.broadcast_to(np.eye(k), (n, k, k)))
    result = _PCA["pca"](y, k).compile("vmp", init=["z"]).run(
        init={"z": start}, iterations=sweeps, tolerance=None)
    ref = bpca_by_hand(y, z0, np.broadcast_to(np.eye(k), (n, k, k)), sweeps)
    assert_close(result["W"].mean, ref["w_mean"], rtol=1e-8, atol=1e-8)
    assert_close(result["W"].covariance, ref["w_cov"], rtol=1e-8, atol=1e-8)
    assert_close(result["z"].mean, ref["z_mean"], rtol=1e-8, atol=1e-8)
    assert_close(result["z"].covariance, ref["z_cov"], rtol=1e-8, atol=1e-8)
    assert_close([result["tau"].shape_param, result["tau"].rate], ref["tau"], rtol=1e-8)
    assert_close(result.log_evidence, ref["elbo"], rtol=1e-8, atol=1e-8)
