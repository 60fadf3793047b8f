"""Joint Gaussian draws of regression coefficients against closed forms and quadrature.

Conjugate Bayesian linear regression has the posterior N(Q⁻¹b, Q⁻¹) in closed form:
the sampled means, and the covariances (the means of the centred products), are within
4 Monte Carlo standard errors of it over several seeds.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import factorflow as ff
from tests.samplers.checks import assert_mean_within
from tests.samplers.test_polya_gamma import grid_means

SEEDS = (0, 1, 2)


def regression_data(seed: int, n: int = 30, p: int = 3):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, p))
    beta = rng.normal(size=p)
    return x, x @ beta + rng.normal(size=n) * 0.7


def exact_regression(x, y, m0, v0, tau):
    """The posterior of β ~ N(m0, diag v0), y ~ N(X β, 1/τ): (mean, covariance)."""
    q = np.diag(1 / v0) + tau * x.T @ x
    cov = np.linalg.inv(q)
    return cov @ (m0 / v0 + tau * x.T @ y), cov


def assert_gaussian_within(draws: np.ndarray, mean: np.ndarray, cov: np.ndarray) -> None:
    """Means, and covariances as means of the centred products, within 4 MCSE."""
    assert_mean_within(draws, mean)
    centred = draws - mean
    assert_mean_within(centred[..., :, None] * centred[..., None, :], cov)


def plate_regression(x, y, m0, v0, tau):
    n, p = x.shape
    with ff.Model("regression") as model:
        i, k = ff.Range("i", n), ff.Range("k", p)
        with ff.Plate(k):
            beta = ff.Gaussian("beta", m0, variance=v0)
        with ff.Plate(i):
            with ff.Plate(k):
                scaled = x * beta
            ff.Gaussian("y", ff.sum(scaled, k), precision=tau, observed=y)
    return model


@pytest.mark.parametrize("seed", SEEDS)
def test_plate_of_coefficients_is_drawn_jointly(seed):
    """y[i] ~ N(Σ_k X[i, k] β[k], 1/τ): β from its closed-form posterior."""
    x, y = regression_data(seed)
    m0, v0, tau = np.array([0.5, -0.2, 0.0]), np.array([2.0, 0.5, 4.0]), 2.0
    model = plate_regression(x, y, m0, v0, tau)
    choice = model.compile("gibbs").samplers["beta"]
    assert choice.sampler == "Gaussian, jointly (conjugate)"
    assert "N(Q⁻¹b, Q⁻¹) by a Cholesky factor of Q (3 coordinates)" in choice.rewrites[-1]
    result = model.infer("gibbs", draws=400, chains=4, seed=seed)
    assert result.samples("beta").shape == (4, 400, 3)
    assert_gaussian_within(result.samples("beta"), *exact_regression(x, y, m0, v0, tau))


@pytest.mark.parametrize("seed", SEEDS)
def test_scalar_coefficients_and_an_offset_are_drawn_jointly(seed):
    """y ~ N(a + b1 x1 + b2 x2 + c, 1/τ) with three scalar variables: one joint draw."""
    x, y = regression_data(seed + 10)
    c = np.linspace(-1.0, 1.0, len(y))
    m0, v0, tau = np.array([0.0, 1.0, -1.0]), np.array([10.0, 1.0, 3.0]), 1.5
    with ff.Model() as model:
        a = ff.Gaussian("a", m0[0], variance=v0[0])
        b1 = ff.Gaussian("b1", m0[1], variance=v0[1])
        b2 = ff.Gaussian("b2", m0[2], variance=v0[2])
        with ff.Plate(ff.Range("n", len(y))):
            ff.Gaussian("y", a + b1 * x[:, 1] + b2 * x[:, 2] + c, precision=tau, observed=y)
    design = np.column_stack([np.ones(len(y)), x[:, 1], x[:, 2]])
    mean, cov = exact_regression(design, y - c, m0, v0, tau)
    result = model.infer("gibbs", draws=600, chains=4, seed=seed)
    draws = np.stack([result.samples(name) for name in ("a", "b1", "b2")], axis=-1)
    assert_gaussian_within(draws, mean, cov)


def test_intercept_and_plate_of_coefficients_with_random_noise_precision():
    """An intercept beside the summed plate, and a Gamma noise precision: given τ the
    coefficients are Gaussian, so E[(a, β) | y] = E_τ[mean(τ)], by quadrature over τ."""
    x, y = regression_data(4, n=20, p=2)
    with ff.Model() as model:
        i, k = ff.Range("i", len(y)), ff.Range("k", 2)
        a = ff.Gaussian("a", 0.0, variance=4.0)
        tau = ff.Gamma("tau", 2.0, rate=1.0)
        with ff.Plate(k):
            beta = ff.Gaussian("beta", 0.0, variance=1.0)
        with ff.Plate(i):
            with ff.Plate(k):
                scaled = x * beta
            ff.Gaussian("y", a + ff.sum(scaled, k), precision=tau, observed=y)
    design = np.column_stack([np.ones(len(y)), x])
    m0, v0 = np.zeros(3), np.array([4.0, 1.0, 1.0])
    taus = np.linspace(0.005, 8.0, 1600)  # p(τ | y) ∝ p(τ) N(y; X m0, X V0 Xᵀ + I/τ)
    cov_y = (design @ np.diag(v0) @ design.T)[None] + np.eye(len(y)) / taus[:, None, None]
    resid = y - design @ m0
    log_w = (stats.gamma.logpdf(taus, 2.0, scale=1.0) - 0.5 * np.linalg.slogdet(cov_y)[1]
             - 0.5 * np.einsum("i,tij,j->t", resid, np.linalg.inv(cov_y), resid))
    w = np.exp(log_w - log_w.max())
    means = np.array([exact_regression(design, y, m0, v0, t)[0] for t in taus])
    exact = (w[:, None] * means).sum(0) / w.sum()
    result = model.infer("gibbs", draws=600, chains=4, seed=5)
    assert model.compile("gibbs").samplers["a"].sampler == "Gaussian, jointly (conjugate)"
    assert_mean_within(result.samples("a"), exact[0])
    assert_mean_within(result.samples("beta"), exact[1:])
    assert_mean_within(result.samples("tau"), (w * taus).sum() / w.sum())


T_X = np.array([[1.0, 0.3], [0.5, -1.2], [-0.7, 0.8], [1.5, 1.1], [0.2, -0.4]])
T_Y = np.array([1.8, -0.9, 0.4, 3.1, 0.1])


def test_student_t_priors_sample_the_coefficient_precisions():
    """β[k] ~ StudentT(0, ν = 3, 1): the exploration expands each prior into a Gamma
    precision, so the joint draw reads sampled per-coefficient precisions; E[β | y] on
    a 2-D grid."""
    with ff.Model() as model:
        i, k = ff.Range("i", len(T_Y)), ff.Range("k", 2)
        with ff.Plate(k):
            beta = ff.StudentT("beta", 0.0, 3.0, precision=1.0)
        with ff.Plate(i):
            with ff.Plate(k):
                scaled = T_X * beta
            ff.Gaussian("y", ff.sum(scaled, k), precision=1.0, observed=T_Y)

    def log_density(b1, b2):
        mean = b1[..., None] * T_X[:, 0] + b2[..., None] * T_X[:, 1]
        return (stats.t.logpdf(b1, 3) + stats.t.logpdf(b2, 3)
                + stats.norm.logpdf(T_Y, mean, 1.0).sum(-1))

    exact = grid_means(log_density, np.linspace(-6, 8, 561), np.linspace(-6, 8, 561))
    samplers = model.compile("gibbs").samplers
    assert samplers["beta"].sampler == "Gaussian, jointly (conjugate)"
    assert "student_t_gamma_precision" in samplers["beta"].rewrites[0]
    assert samplers["beta__precision"].sampler == "Gamma (conjugate)"
    result = model.infer("gibbs", draws=1500, chains=4, seed=0)
    assert_mean_within(result.samples("beta"), exact)


def test_logistic_regression_over_a_plate_of_coefficients():
    """y[i] ~ Bernoulli(σ(Σ_k X[i, k] β[k])): Pólya-Gamma augmentation with the joint
    draw; E[β | y] on a 2-D grid."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(40, 2))
    y = (rng.random(40) < 1 / (1 + np.exp(-(x @ [1.0, -1.5])))).astype(int)
    with ff.Model() as model:
        i, k = ff.Range("i", len(y)), ff.Range("k", 2)
        with ff.Plate(k):
            beta = ff.Gaussian("beta", 0.0, variance=4.0)
        with ff.Plate(i):
            with ff.Plate(k):
                scaled = x * beta
            ff.Bernoulli("y", ff.logistic(ff.sum(scaled, k)), observed=y)

    def log_density(b1, b2):
        psi = b1[..., None] * x[:, 0] + b2[..., None] * x[:, 1]
        return (stats.norm.logpdf(b1, 0, 2) + stats.norm.logpdf(b2, 0, 2)
                + (y * psi - np.logaddexp(0, psi)).sum(-1))

    exact = grid_means(log_density, np.linspace(-3, 5, 401), np.linspace(-6, 2, 401))
    samplers = model.compile("gibbs").samplers
    assert samplers["beta"].sampler == "Gaussian, jointly (conjugate)"
    assert samplers["y__pg"].sampler == "PolyaGamma (conjugate)"
    result = model.infer("gibbs", draws=800, chains=4, seed=1)
    assert_mean_within(result.samples("beta"), exact)


def test_summed_coefficients_without_a_gaussian_conditional_are_refused_by_name():
    """A plate summed inside exp(·) of a Poisson rate is not quadratic: refused at
    compile time, naming the variable, the term and the fallbacks refused."""
    x = np.array([[1.0, 0.5], [0.2, -1.0], [0.3, 0.3]])
    with ff.Model() as model:
        i, k = ff.Range("i", 3), ff.Range("k", 2)
        with ff.Plate(k):
            beta = ff.Gaussian("beta", 0.0, variance=1.0)
        with ff.Plate(i):
            with ff.Plate(k):
                scaled = x * beta
            ff.Poisson("y", ff.exp(ff.sum(scaled, k)), observed=[1, 0, 2])
    with pytest.raises(ff.ModelError, match=r"no sampler for 'beta': a site sums the "
                       r"elements .* is not affine in 'beta'.* fallbacks refused: one "
                       r"element at a time"):
        model.compile("gibbs")


HORSESHOE = runpy.run_path(str(Path(__file__).parents[2] / "examples"
                                / "horseshoe_regression.py"))


@pytest.mark.slow
def test_horseshoe_regression_recovers_the_truth():
    """examples/horseshoe_regression.py (N = 50, p = 10, β = (1, 1.5, 0, …, 0), σ = 1) on
    a second data set (the example's own, seed 0, runs in tests/test_examples.py), 3,000
    iterations: posterior medians within atol 0.1 or rtol 0.5 of the truth; the
    half-Cauchy expansion was found by exploring the rewrites (every variable
    conjugate, the coefficients jointly)."""
    seed, truth = 1, HORSESHOE["TRUE"]
    model = HORSESHOE["build"](*HORSESHOE["data"](seed))
    compiled = model.compile("gibbs")
    samplers = compiled.samplers
    for name in ("tau", "lam"):
        assert samplers[name].sampler == "RootInverseGamma (conjugate)"
        assert ("[rules: half_cauchy_inverse_gamma; one of 2 forms explored]"
                in samplers[name].rewrites[0])
    assert samplers["lam__mixing"].sampler == "InverseGamma (conjugate)"
    assert samplers["beta"].sampler == "Gaussian, jointly (conjugate)"
    assert compiled.plan.forms == 4  # two half-Cauchy statements, two forms each
    result = compiled.run(draws=2000, burn=1000, chains=2, seed=seed)
    median = np.median(result.samples("beta").reshape(-1, len(truth)), axis=0)
    close = np.isclose(median, truth, atol=0.1, rtol=0) | np.isclose(median, truth,
                                                                      atol=0, rtol=0.5)
    assert close.all(), (median, truth)


@pytest.mark.parametrize("seed", SEEDS)
def test_vector_gaussian_coefficients_by_inner_products(seed):
    """w ~ N(m0, P0⁻¹) with a full precision P0, y[n] ~ N(X[n] @ w, 1/τ): the closed-form
    posterior N((P0 + τ XᵀX)⁻¹ (P0 m0 + τ Xᵀy), (P0 + τ XᵀX)⁻¹)."""
    x, y = regression_data(seed + 20, n=25)
    m0 = np.array([0.2, 0.0, -0.1])
    p0 = np.array([[2.0, 0.3, 0.0], [0.3, 1.0, 0.2], [0.0, 0.2, 0.5]])
    tau = 1.5
    with ff.Model() as model:
        w = ff.VectorGaussian("w", m0, precision=p0)
        with ff.Plate(ff.Range("n", len(y))):
            ff.Gaussian("y", x @ w, precision=tau, observed=y)
    q = p0 + tau * x.T @ x
    cov = np.linalg.inv(q)
    result = model.infer("gibbs", draws=400, chains=4, seed=seed)
    assert result.samples("w").shape == (4, 400, 3)
    assert model.compile("gibbs").samplers["w"].sampler == "Gaussian, jointly (conjugate)"
    assert_gaussian_within(result.samples("w"), cov @ (p0 @ m0 + tau * x.T @ y), cov)


def test_vector_gaussian_observed_through_a_matrix():
    """z ~ N(m0, P0⁻¹), y[n] ~ N(B z + c, Λ⁻¹) with B a known 2 × 3 matrix: the posterior
    N(Q⁻¹b, Q⁻¹) with Q = P0 + N BᵀΛB, b = P0 m0 + Σ_n BᵀΛ(y[n] − c)."""
    rng = np.random.default_rng(11)
    m0, p0 = np.array([0.5, -1.0, 0.0]), np.diag([1.0, 2.0, 0.5])
    matrix = np.array([[1.0, 0.5, -0.3], [0.2, -1.0, 0.8]])
    offset, lam = np.array([0.3, -0.2]), np.array([[2.0, 0.4], [0.4, 1.0]])
    y = rng.normal(size=(6, 2)) + 1.0
    with ff.Model() as model:
        z = ff.VectorGaussian("z", m0, precision=p0)
        with ff.Plate(ff.Range("n", len(y))):
            ff.VectorGaussian("y", matrix @ z + offset, precision=lam, observed=y)
    q = p0 + len(y) * matrix.T @ lam @ matrix
    cov = np.linalg.inv(q)
    mean = cov @ (p0 @ m0 + matrix.T @ lam @ (y - offset).sum(0))
    result = model.infer("gibbs", draws=400, chains=4, seed=0)
    assert_gaussian_within(result.samples("z"), mean, cov)


def test_vector_gaussian_with_a_vector_gaussian_mean():
    """m ~ N(0, I), w ~ N(m, P⁻¹), y[n] ~ N(X[n] @ w, 1): one block (m, w); w's
    posterior from its marginal prior N(0, I + P⁻¹) in closed form."""
    x, y = regression_data(30, n=15, p=2)
    p = np.array([[3.0, 1.0], [1.0, 2.0]])
    with ff.Model() as model:
        m = ff.VectorGaussian("m", 0.0, precision=np.eye(2))
        w = ff.VectorGaussian("w", m, precision=p)
        with ff.Plate(ff.Range("n", len(y))):
            ff.Gaussian("y", x @ w, precision=1.0, observed=y)
    prior = np.linalg.inv(np.eye(2) + np.linalg.inv(p))
    cov = np.linalg.inv(prior + x.T @ x)
    samplers = model.compile("gibbs").samplers
    assert "jointly with m, w" in samplers["w"].rewrites[-1]
    result = model.infer("gibbs", draws=500, chains=4, seed=2)
    assert_gaussian_within(result.samples("w"), cov @ x.T @ y, cov)


def test_joint_draw_inside_an_observed_gate():
    """y[n] ~ N(a + b x[n], 1) where flag[n], else N(0, 1): the gate's mask keeps only
    the flagged points in Q and b (closed form over them)."""
    x = np.array([0.5, -1.0, 1.5, 2.0, -0.3, 0.8])
    y = np.array([1.1, -0.8, 2.9, 3.2, 7.0, -5.0])
    flag = np.array([1, 1, 1, 1, 0, 0])
    with ff.Model() as model:
        a = ff.Gaussian("a", 0.0, variance=4.0)
        b = ff.Gaussian("b", 0.0, variance=4.0)
        with ff.Plate(ff.Range("n", len(y))):
            on = ff.Bernoulli("on", 0.5, observed=flag)
            with ff.If(on):
                ff.Gaussian("y", a + b * x, precision=1.0, observed=y)
            with ff.IfNot(on):
                ff.Gaussian("y", 0.0, precision=1.0, observed=y)
    design = np.column_stack([np.ones(4), x[:4]])
    mean, cov = exact_regression(design, y[:4], np.zeros(2), np.array([4.0, 4.0]), 1.0)
    result = model.infer("gibbs", draws=500, chains=4, seed=3)
    assert model.compile("gibbs").samplers["a"].sampler == "Gaussian, jointly (conjugate)"
    draws = np.stack([result.samples("a"), result.samples("b")], axis=-1)
    assert_gaussian_within(draws, mean, cov)
