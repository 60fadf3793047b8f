"""Pólya-Gamma augmentation, found by exploring rewrites, against quadrature.

The identity behind each rule is checked by one-dimensional quadrature over ω; the
samplers' posterior means are checked (within 4 Monte Carlo standard errors, several
seeds) against two-dimensional grid quadrature of the exact, un-augmented posterior.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, special, stats

import factorflow as ff
from factorflow.factors.registry import FACTORS
from tests.conftest import assert_close
from tests.samplers.checks import assert_mean_within


def _marginal(kernel: str, shape: float, **args: float) -> float:
    """∫ exp(kernel(ω)) PG(ω | b, 0) dω in closed form: the kernel is exp(−ω ψ²/2) times
    a part free of ω, and E[exp(−ω t²/2)] = cosh(t/2)^−b under PG(b, 0) (its definition
    by Laplace transform, Polson, Scott & Windle 2013)."""
    free = FACTORS[kernel].log_density(omega=0.0, **args)
    return float(np.exp(free - shape * np.log(np.cosh(args["logit"] / 2))))


@pytest.mark.parametrize("trials,y,logit", [(1, 0, 0.7), (1, 1, -1.3), (5, 2, 2.1),
                                            (9, 9, -0.4)])
def test_binomial_identity(trials, y, logit):
    """Binomial(y | n, σ(ψ)) = ∫ PolyaGammaBinomial(y | n, ψ, ω) PG(ω | n, 0) dω."""
    got = _marginal("PolyaGammaBinomial", trials, sample=y, trials=trials, logit=logit)
    assert_close(got, stats.binom.pmf(y, trials, special.expit(logit)), rtol=1e-12)


@pytest.mark.parametrize("y,r,logit", [(0, 1.5, 0.3), (4, 2.7, -0.8), (11, 0.6, 1.4)])
def test_negative_binomial_identity(y, r, logit):
    """NB(y | r, σ(ψ)) = ∫ PolyaGammaNegativeBinomial(y | r, ψ, ω) PG(ω | y + r, 0) dω."""
    got = _marginal("PolyaGammaNegativeBinomial", y + r, sample=y, dispersion=r,
                    logit=logit)
    assert_close(got, stats.nbinom.pmf(y, r, 1 - special.expit(logit)), rtol=1e-12)


@pytest.mark.parametrize("shape,tilt", [(1.0, 0.0), (2.5, -0.8), (11.6, -4.0)])
def test_polya_gamma_draws_have_the_tilted_mean(shape, tilt):
    """The family's draw from PG(b, 0) · exp(η ω) is PG(b, z), z = √(−2η), whose mean is
    b / (2z) tanh(z / 2) (b / 4 at z = 0)."""
    from factorflow.samplers.families import FAMILIES

    draws = FAMILIES["PolyaGamma"].draw(np.random.default_rng(0),
                                        [np.full(40_000, tilt), np.full(40_000, shape)], "w")
    z = np.sqrt(-2 * tilt)
    exact = shape / 4 if z == 0 else shape / (2 * z) * np.tanh(z / 2)
    assert abs(draws.mean() - exact) < 4 * draws.std() / np.sqrt(draws.size)


def test_polya_gamma_density_where_its_series_is_accurate():
    """log PG(x | b, 0) integrates to 1 and has mean b / 4 (quadrature up to x = 5, where
    the polyagamma package's series still holds its digits; the tail beyond is below
    1e-4 for these shapes)."""
    log_pg = FACTORS["PolyaGamma"].log_density
    for b in (1.0, 2.0):
        def density(x, b=b):
            return np.exp(log_pg(sample=x, shape=b))

        mass = integrate.quad(density, 0, 5, limit=200)[0]
        mean = integrate.quad(lambda x, b=b: x * density(x), 0, 5, limit=200)[0]
        assert_close(mass, 1.0, rtol=1e-4)
        assert_close(mean, b / 4, rtol=2e-3)


X = np.array([-1.6, -1.1, -0.7, -0.3, 0.0, 0.2, 0.5, 0.9, 1.3, 1.8, -0.5, 0.4])
Y = np.array([0, 0, 1, 0, 1, 0, 1, 1, 1, 1, 0, 0])


def logistic_regression(x=X, y=Y):
    with ff.Model("logistic") as model:
        a = ff.Gaussian("a", 0.0, variance=4.0)
        b = ff.Gaussian("b", 0.0, variance=4.0)
        with ff.Plate(ff.Range("n", len(x))):
            ff.Bernoulli("y", ff.logistic(a + b * x), observed=y)
    return model


def grid_means(log_density, a, b):
    """Posterior means of the two coordinates on the grid ``a`` × ``b`` (trapezoid)."""
    A, B = np.meshgrid(a, b, indexing="ij")
    lp = log_density(A, B)
    w = np.exp(lp - lp.max())
    z = integrate.trapezoid(integrate.trapezoid(w, b, axis=1), a)
    return [integrate.trapezoid(integrate.trapezoid(w * c, b, axis=1), a) / z for c in (A, B)]


def logistic_exact() -> list[float]:
    def log_density(a, b):
        psi = a[..., None] + b[..., None] * X
        return (stats.norm.logpdf(a, 0, 2) + stats.norm.logpdf(b, 0, 2)
                + (Y * psi - np.logaddexp(0, psi)).sum(-1))

    return grid_means(log_density, np.linspace(-6, 6, 601), np.linspace(-5, 9, 601))


def test_logistic_regression_is_augmented_by_exploration():
    compiled = logistic_regression().compile("gibbs")
    samplers = compiled.samplers
    assert samplers["a"].sampler == samplers["b"].sampler == "Gaussian, jointly (conjugate)"
    assert samplers["a"].rewrites[-1].startswith("jointly with a, b: every site reading them")
    aux = samplers["y__pg"]
    assert aux.sampler == "PolyaGamma (conjugate)"
    assert "rules: bernoulli_binomial, binomial_polya_gamma; one of 3 forms explored" \
        in aux.rewrites[0]
    assert "PolyaGamma(y__pg): the base law PolyaGamma(1.0)" in aux.rewrites[1]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_logistic_regression_against_grid_quadrature(seed):
    exact = logistic_exact()
    result = logistic_regression().infer("gibbs", draws=600, chains=4, seed=seed)
    assert_mean_within(result.samples("a"), exact[0])
    assert_mean_within(result.samples("b"), exact[1])
    assert "y__pg" not in result  # the auxiliary is sampled, not reported


def test_binomial_logistic_intercept_against_quadrature():
    """k[j] ~ Binomial(n[j], σ(a + c[j])), a ~ N(0, 1): E[a] by one-dimensional
    quadrature; a known offset c[j] inside σ."""
    n, k, c = np.array([5, 8, 3, 10]), np.array([1, 6, 2, 9]), np.array([-1.0, 0.5, 0.0, 1.0])
    with ff.Model() as model:
        a = ff.Gaussian("a", 0.0, variance=1.0)
        with ff.Plate(ff.Range("j", len(n))):
            ff.Binomial("k", n, ff.logistic(a + c), observed=k)

    def weight(u):
        return stats.norm.pdf(u) * np.prod(stats.binom.pmf(k, n, special.expit(u + c)))

    z = integrate.quad(weight, -8, 8)[0]
    exact = integrate.quad(lambda u: u * weight(u), -8, 8)[0] / z
    compiled = model.compile("gibbs")
    assert "binomial_polya_gamma" in compiled.samplers["k__pg"].rewrites[0]
    assert_mean_within(compiled.run(draws=600, chains=4, seed=0).samples("a"), exact)


COUNTS = np.array([0, 3, 1, 7, 2, 0, 4, 12, 1, 5])


def negative_binomial_intercept():
    with ff.Model("negative_binomial") as model:
        a = ff.Gaussian("a", 0.0, variance=4.0)
        r = ff.Gamma("r", 2.0, rate=0.5)
        with ff.Plate(ff.Range("n", len(COUNTS))):
            ff.NegativeBinomial("y", r, ff.logistic(a), observed=COUNTS)
    return model


def test_negative_binomial_dispersion_is_collapsed():
    samplers = negative_binomial_intercept().compile("gibbs").samplers
    assert samplers["a"].sampler == "Gaussian (conjugate)"
    assert "rules: negative_binomial_polya_gamma" in samplers["y__pg"].rewrites[0]
    assert samplers["r"].sampler == "slice sampling (no conjugate conditional)"
    assert "y__pg marginalized: reads NegativeBinomial(y) as written" in \
        samplers["r"].rewrites[-1]
    names = [c.variable for c in samplers]
    assert names.index("y__pg") == names.index("r") + 1  # (r, ω) drawn as a block


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_negative_binomial_with_gamma_dispersion_against_grid_quadrature(seed):
    """y[n] ~ NB(r, σ(a)), a ~ N(0, 4), r ~ Gamma(2, rate 0.5): E[a], E[r] on a grid
    over (a, log r)."""
    def log_density(a, log_r):
        r = np.exp(log_r)
        return (stats.norm.logpdf(a, 0, 2) + stats.gamma.logpdf(r, 2.0, scale=2.0) + log_r
                + stats.nbinom.logpmf(COUNTS, r[..., None], 1 - special.expit(a)[..., None]
                                      ).sum(-1))

    a_grid, s_grid = np.linspace(-5, 7, 481), np.linspace(-5, 5, 481)
    e_a = grid_means(log_density, a_grid, s_grid)[0]
    A, S = np.meshgrid(a_grid, s_grid, indexing="ij")
    w = np.exp(log_density(A, S) - log_density(A, S).max())
    e_r = (w * np.exp(S)).sum() / w.sum()
    result = negative_binomial_intercept().infer("gibbs", draws=500, chains=4, seed=seed)
    assert_mean_within(result.samples("a"), e_a)
    assert_mean_within(result.samples("r"), e_r)


NB_X = np.array([-1.2, 0.3, -0.5, 1.1, 0.0, -1.6, 0.6, 1.9, -0.8, 0.9])


@pytest.mark.slow
def test_negative_binomial_regression_with_gamma_dispersion_against_grid_quadrature():
    """y[n] ~ NB(r, σ(a + b x[n])), a, b ~ N(0, 4), r ~ Gamma(2, rate 0.5): a and b in one
    joint Gaussian draw given ω, r slice-sampled with ω integrated out; E[a], E[b],
    E[r] on a 3-D grid over (a, b, log r)."""
    with ff.Model("negative_binomial_regression") as model:
        a = ff.Gaussian("a", 0.0, variance=4.0)
        b = ff.Gaussian("b", 0.0, variance=4.0)
        r = ff.Gamma("r", 2.0, rate=0.5)
        with ff.Plate(ff.Range("n", len(COUNTS))):
            ff.NegativeBinomial("y", r, ff.logistic(a + b * NB_X), observed=COUNTS)
    a_grid, b_grid, s_grid = (np.linspace(-3, 5, 73), np.linspace(-3, 4, 65),
                              np.linspace(-4, 5, 71))
    A, B, S = np.meshgrid(a_grid, b_grid, s_grid, indexing="ij")
    r_grid = np.exp(S)[..., None]
    psi = A[..., None] + B[..., None] * NB_X
    # NB(y | r, p = σ(ψ)): Γ(y + r)/(Γ(r) y!) p^y (1 − p)^r
    log_lik = (special.gammaln(COUNTS + r_grid) - special.gammaln(r_grid)
               + COUNTS * special.log_expit(psi) + r_grid * special.log_expit(-psi)).sum(-1)
    log_p = (stats.norm.logpdf(A, 0, 2) + stats.norm.logpdf(B, 0, 2)
             + stats.gamma.logpdf(np.exp(S), 2.0, scale=2.0) + S + log_lik)
    w = np.exp(log_p - log_p.max())
    exact = [(w * v).sum() / w.sum() for v in (A, B, np.exp(S))]
    samplers = model.compile("gibbs").samplers
    assert samplers["a"].sampler == samplers["b"].sampler == "Gaussian, jointly (conjugate)"
    result = model.infer("gibbs", draws=600, chains=4, seed=0)
    for name, value in zip(("a", "b", "r"), exact, strict=True):
        assert_mean_within(result.samples(name), value)


def test_logistic_of_a_number_and_message_passing_refusal():
    """σ of numbers is their value; a Binomial of σ(x) (no fused factor: the derived σ(x)
    that Gibbs augments) is refused by EP naming the factor and the algorithm."""
    from factorflow.model.factories import logistic_variable

    assert_close(logistic_variable(np.array([-2.0, 0.0, 3.0])),
                 special.expit([-2.0, 0.0, 3.0]), rtol=1e-14)
    with ff.Model() as model:
        a = ff.Gaussian("a", 0.0, variance=1.0)
        ff.Binomial("k", 5, ff.logistic(a), observed=2)
    with pytest.raises(ff.ModelError, match="(?i)logistic.*ep|ep.*logistic"):
        model.infer("ep")


def test_a_fused_bernoulli_of_log_odds_is_augmented_the_same_way():
    """A Bernoulli fused with its logistic link (one factor ``BernoulliFromLogOdds(y |
    logodds)``, as Infer.NET writes it, and as ``ff.Bernoulli(name, ff.logistic(x))``
    builds it) reads as bernoulli(logistic(logodds)): the rules find the Pólya-Gamma
    form, whose kernel reads ψ directly."""
    from factorflow.samplers.expansions import explore_statements, materialize, show

    model = logistic_regression()
    statements = list(model.statements)
    i, call = next((i, c) for i, c in enumerate(statements)
                   if c.factor == "BernoulliFromLogOdds")
    psi = call.args["logodds"]
    forms = explore_statements(statements)[i]
    assert show(forms[0]) == "bernoulli(logistic(logodds))"
    pg = next(f for f in forms if f[0] == "mixture")
    assert show(pg) == "mixture[pg](polya_gamma(1.0), pg_binomial(1.0, logodds, aux[pg]))"
    expansion = materialize(statements[i], pg, set(model.variables))
    assert [c.factor for c in expansion.statements] == ["PolyaGamma", "PolyaGammaBinomial"]
    assert expansion.statements[1].args["logit"] is psi
    assert expansion.statements[1].args["omega"] is expansion.auxiliaries[0]
