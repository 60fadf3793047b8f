"""VinDsl's gradient fallback (factors.gradient, through ``@ff.factor``) against a direct
numerical optimisation of the ELBO, each expectation by SciPy's adaptive quadrature and
the optimum by SciPy's optimiser: the VMP fixed point must be that optimum (1e-6) and
the bound must never fall."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, optimize, special

import factorflow as ff


@ff.factor(sample="bool", x="real")
def logit_coin(sample, x):
    """Bernoulli with log-odds x: no conjugate form for x (log(1 + eˣ))."""
    return sample * x - ff.log(1 + ff.exp(x))


@ff.factor(sample="real", x="real", tau="positive")
def skewed_noise(sample, x, tau):
    """A Gaussian observation of x with precision tau, times σ(x): x has no conjugate form,
    tau has (log tau, tau)."""
    return 0.5 * ff.log(tau) - 0.5 * tau * (sample - x) ** 2 - ff.log(1 + ff.exp(-x))


def gaussian_expect(fn, m: float, v: float) -> float:
    sd = math.sqrt(v)

    def integrand(x):
        return math.exp(-0.5 * ((x - m) / sd) ** 2) / (sd * math.sqrt(2 * math.pi)) * fn(x)

    return integrate.quad(integrand, m - 30 * sd, m + 30 * sd, epsabs=1e-13, epsrel=1e-12,
                          limit=200)[0]


def gaussian_kl(m, v, m0, v0):
    return 0.5 * (v / v0 + (m - m0) ** 2 / v0 - 1 + math.log(v0 / v))


def assert_ascends(trace) -> None:
    trace = np.asarray(trace)
    assert np.all(np.diff(trace) >= -1e-12 * np.abs(trace[1:]))


@pytest.mark.parametrize("m0, v0, ones, n", [(0.5, 2.0, 6, 8), (-1.0, 0.5, 1, 5),
                                             (2.0, 9.0, 0, 3)])
def test_shared_gaussian_reaches_the_elbo_optimum(m0, v0, ones, n):
    """x ~ N(m0, v0), n coins with log-odds x (one x for the plate: the fallback sums
    the data's terms and optimises once)."""
    y = np.arange(n) < ones
    with ff.Model() as model:
        x = ff.Gaussian("x", m0, variance=v0)
        with ff.Plate(ff.Range("n", n)):
            logit_coin("y", x=x, observed=y)
    result = model.infer("vmp")

    def elbo(params):
        m, v = params[0], math.exp(params[1])
        data = gaussian_expect(lambda t: ones * t - n * np.logaddexp(0.0, t), m, v)
        return data - gaussian_kl(m, v, m0, v0)

    best = optimize.minimize(lambda p: -elbo(p), [m0, math.log(v0)], method="Nelder-Mead",
                             options={"xatol": 1e-11, "fatol": 1e-15, "maxiter": 4000})
    q = result["x"]
    assert abs(q.mean - best.x[0]) < 1e-6 and abs(q.variance - math.exp(best.x[1])) < 1e-6
    assert abs(result.log_evidence + best.fun) < 1e-9
    assert result.converged
    assert_ascends(result.trace)


def test_a_plate_of_gaussians_each_reaches_its_optimum():
    """One x per datum (no sum over a plate): each element optimised on its own."""
    m0, v0, y = np.array([0.0, 1.5, -2.0]), np.array([1.0, 4.0, 0.3]), [True, False, True]
    with ff.Model() as model:
        with ff.Plate(ff.Range("n", 3)):
            x = ff.Gaussian("x", m0, variance=v0)
            logit_coin("y", x=x, observed=y)
    result = model.infer("vmp")
    total = 0.0
    for i in range(3):
        def elbo(params, i=i):
            m, v = params[0], math.exp(params[1])
            data = gaussian_expect(lambda t: y[i] * t - np.logaddexp(0.0, t), m, v)
            return data - gaussian_kl(m, v, m0[i], v0[i])

        best = optimize.minimize(lambda p: -elbo(p), [m0[i], math.log(v0[i])],
                                 method="Nelder-Mead",
                                 options={"xatol": 1e-11, "fatol": 1e-15, "maxiter": 4000})
        assert abs(result["x"].mean[i] - best.x[0]) < 1e-6
        assert abs(result["x"].variance[i] - math.exp(best.x[1])) < 1e-6
        total -= best.fun
    assert abs(result.log_evidence - total) < 1e-9


def test_beside_a_conjugate_gamma_the_mean_field_optimum_is_reached():
    """skewed_noise: x by the fallback, tau by its derived conjugate Gamma message; the
    fixed point is the optimum of the whole mean-field ELBO over (m, v, shape, rate)."""
    data = np.array([0.3, -0.4, 1.2, 0.8])
    m0, v0, a0, b0 = 0.0, 4.0, 2.0, 1.0
    with ff.Model() as model:
        x = ff.Gaussian("x", m0, variance=v0)
        tau = ff.Gamma("tau", a0, rate=b0)
        with ff.Plate(ff.Range("n", len(data))):
            skewed_noise("y", x=x, tau=tau, observed=data)
    result = model.infer("vmp")

    def elbo(params):
        m, v, a, b = params[0], math.exp(params[1]), math.exp(params[2]), math.exp(params[3])
        e_tau, e_log_tau = a / b, special.digamma(a) - math.log(b)
        sq = np.sum((data - m) ** 2) + len(data) * v
        terms = (0.5 * len(data) * e_log_tau - 0.5 * e_tau * sq
                 - len(data) * gaussian_expect(lambda t: np.logaddexp(0.0, -t), m, v))
        kl_tau = ((a - a0) * special.digamma(a) - special.gammaln(a) + special.gammaln(a0)
                  + a0 * (math.log(b) - math.log(b0)) + a * (b0 - b) / b)
        return terms - gaussian_kl(m, v, m0, v0) - kl_tau

    start = [m0, math.log(v0), math.log(a0), math.log(b0)]
    best = optimize.minimize(lambda p: -elbo(p), start, method="BFGS",
                             options={"gtol": 1e-10})
    q, g = result["x"], result["tau"]
    assert abs(q.mean - best.x[0]) < 1e-6 and abs(q.variance - math.exp(best.x[1])) < 1e-6
    assert abs(g.shape_param - math.exp(best.x[2])) < 1e-6 and abs(g.rate - math.exp(best.x[3])) < 1e-6
    assert abs(result.log_evidence + best.fun) < 1e-8
    assert_ascends(result.trace)


def test_an_expression_gets_non_conjugate_vmp_at_the_elbo_optimum():
    """logit_coin of X @ w (a derived variable: its marginal is not a posterior of its
    own): non-conjugate VMP's message, whose fixed point is the optimum of the ELBO over
    q(w) = N(m, S), here by BFGS over (m, Cholesky of S) with 80-node Hermite per datum."""
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(30, 2)), rng.random(30) < 0.6
    with ff.Model() as model:
        w = ff.VectorGaussian("w", 0.0, precision=np.eye(2))
        with ff.Plate(ff.Range("n", 30)):
            logit_coin("y", x=X @ w, observed=y)
    result = model.infer("vmp")
    assert "non-conjugate VMP (Knowles & Minka 2011)" in model.compile("vmp").source
    z, weights = np.polynomial.hermite_e.hermegauss(80)
    weights = weights / math.sqrt(2 * math.pi)

    def elbo(p):
        chol = np.array([[math.exp(p[2]), 0.0], [p[3], math.exp(p[4])]])
        cov = chol @ chol.T
        x = (X @ p[:2])[:, None] + np.sqrt(np.einsum("nd,de,ne->n", X, cov, X))[:, None] * z
        data = ((y[:, None] * x - np.logaddexp(0.0, x)) @ weights).sum()
        return data - 0.5 * (np.trace(cov) + p[:2] @ p[:2] - 2 - np.linalg.slogdet(cov)[1])

    best = optimize.minimize(lambda p: -elbo(p), np.zeros(5), method="BFGS",
                             options={"gtol": 1e-11})
    chol = np.array([[math.exp(best.x[2]), 0.0], [best.x[3], math.exp(best.x[4])]])
    assert np.max(np.abs(result["w"].mean - best.x[:2])) < 1e-6
    assert np.max(np.abs(result["w"].covariance - chol @ chol.T)) < 1e-6
    assert abs(result.log_evidence + best.fun) < 1e-9


def test_generated_code_names_the_fallback():
    with ff.Model() as model:
        x = ff.Gaussian("x", 0.0, variance=1.0)
        logit_coin("y", x=x, observed=True)
    source = model.compile("vmp").source
    assert "gradient fallback (no conjugate form)" in source
    assert "logit_coin_x_average_logarithm(sample=v_y, x=" in source


def test_a_term_mixing_two_random_arguments_is_refused_by_name():
    @ff.factor(sample="real", x="real", s="real")
    def coupled(sample, x, s):
        return -sample * ff.exp(x * s) - 0.5 * x**2

    with ff.Model() as model:
        x = ff.Gaussian("x", 0.0, variance=1.0)
        s = ff.Gaussian("s", 0.0, variance=1.0)
        coupled("y", x=x, s=s, observed=1.0)
    with pytest.raises(ff.ModelError, match=r"no conjugate form.*|.*gradient fallback"):
        model.infer("vmp")


def test_a_non_gaussian_argument_stays_refused_with_its_term():
    @ff.factor(sample="real", rate="positive")
    def exp_rate2(sample, rate):
        return sample * ff.exp(rate) - rate

    assert "exp(rate)" in exp_rate2.blocked["rate"] and "rate" not in exp_rate2.fallbacks
