"""Gibbs sampling against closed-form posteriors, quadrature and enumeration.

Every check is a posterior mean within 4 Monte Carlo standard errors (ArviZ's ESS of the
mean) of the exact value, over several seeds.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

import factorflow as ff
from tests.conftest import assert_close
from tests.samplers.checks import assert_mean_within

SEEDS = (0, 1, 2)


def beta_binomial(a=2.0, b=3.0, trials=10, counts=(3, 4, 5, 2, 6)):
    with ff.Model("beta_binomial") as model:
        p = ff.Beta("p", a, b)
        with ff.Plate(ff.Range("n", len(counts))):
            ff.Binomial("k", trials, p, observed=list(counts))
    return model


@pytest.mark.parametrize("seed", SEEDS)
def test_beta_binomial(seed):
    result = beta_binomial().infer("gibbs", draws=500, chains=4, seed=seed)
    assert_mean_within(result.samples("p"), (2 + 20) / (2 + 3 + 50))


@pytest.mark.parametrize("seed", SEEDS)
def test_gamma_poisson(seed):
    y = [3, 1, 4, 1, 5, 9]
    with ff.Model() as model:
        lam = ff.Gamma("lam", 2.0, rate=0.5)
        with ff.Plate(ff.Range("n", len(y))):
            ff.Poisson("y", lam, observed=y)
    result = model.infer("gibbs", draws=500, chains=4, seed=seed)
    assert_mean_within(result.samples("lam"), (2 + sum(y)) / (0.5 + len(y)))
    assert model.compile("gibbs").samplers["lam"].sampler == "Gamma (conjugate)"


@pytest.mark.parametrize("seed", SEEDS)
def test_normal_normal(seed):
    x = np.array([1.2, 0.4, 2.2, 1.9])
    with ff.Model() as model:
        mu = ff.Gaussian("mu", 0.5, variance=4.0)
        with ff.Plate(ff.Range("n", len(x))):
            ff.Gaussian("x", mu, precision=2.0, observed=x)
    prec = 1 / 4.0 + 2.0 * len(x)
    result = model.infer("gibbs", draws=500, chains=4, seed=seed)
    assert_mean_within(result.samples("mu"), (0.5 / 4.0 + 2.0 * x.sum()) / prec)
    assert_close(result["mu"].sd, prec**-0.5, rtol=0.1)


@pytest.mark.parametrize("seed", SEEDS)
def test_normal_gamma_precision(seed):
    x = np.array([0.3, -1.1, 2.0, 0.7, -0.2])
    with ff.Model() as model:
        tau = ff.Gamma("tau", 2.0, rate=1.5)
        with ff.Plate(ff.Range("n", len(x))):
            ff.Gaussian("x", 0.4, precision=tau, observed=x)
    shape, rate = 2.0 + len(x) / 2, 1.5 + ((x - 0.4) ** 2).sum() / 2
    result = model.infer("gibbs", draws=500, chains=4, seed=seed)
    assert_mean_within(result.samples("tau"), shape / rate)


@pytest.mark.parametrize("seed", SEEDS)
def test_unknown_mean_and_precision_against_quadrature(seed):
    """The README model: E[mean] and E[prec] by one-dimensional quadrature (the
    precision integrates out in closed form given the mean)."""
    x = np.array([5.0, 7.0, 6.1])
    with ff.Model() as model:
        mean = ff.Gaussian("mean", 0.0, variance=100.0)
        prec = ff.Gamma("prec", 1.0, rate=1.0)
        with ff.Plate(ff.Range("n", len(x))):
            ff.Gaussian("x", mean, precision=prec, observed=x)
    shape = 1.0 + len(x) / 2

    def rate(m):
        return 1.0 + ((x - m) ** 2).sum() / 2

    def weight(m):  # p(mean = m | x) up to a constant
        return stats.norm.pdf(m, 0, 10) * rate(m) ** -shape

    z = integrate.quad(weight, -50, 60, points=[6.0], limit=200)[0]
    e_mean = integrate.quad(lambda m: m * weight(m), -50, 60, points=[6.0], limit=200)[0] / z
    e_prec = integrate.quad(lambda m: shape / rate(m) * weight(m), -50, 60, points=[6.0],
                            limit=200)[0] / z
    result = model.infer("gibbs", draws=1000, chains=4, seed=seed)
    assert_mean_within(result.samples("mean"), e_mean)
    assert_mean_within(result.samples("prec"), e_prec)


@pytest.mark.parametrize("seed", SEEDS)
def test_dirichlet_discrete(seed):
    z = [0, 0, 1, 2, 2, 2, 2]
    alpha = np.array([1.0, 2.0, 0.5])
    with ff.Model() as model:
        w = ff.Dirichlet("w", alpha)
        with ff.Plate(ff.Range("n", len(z))):
            ff.Discrete("z", w, observed=z)
    post = alpha + np.bincount(z, minlength=3)
    result = model.infer("gibbs", draws=500, chains=4, seed=seed)
    assert result.samples("w").shape == (4, 500, 3)
    assert_mean_within(result.samples("w"), post / post.sum())


def test_affine_mean_against_gaussian_conditioning():
    """y[n] ~ N(a + 2 b, 1): the joint posterior of (a, b) is Gaussian in closed form."""
    y = np.array([1.0, 2.0, 3.0, 2.5])
    with ff.Model() as model:
        a = ff.Gaussian("a", 0.0, variance=10.0)
        b = ff.Gaussian("b", 1.0, variance=4.0)
        with ff.Plate(ff.Range("n", len(y))):
            ff.Gaussian("y", a + 2.0 * b, precision=1.0, observed=y)
    design = np.tile([1.0, 2.0], (len(y), 1))
    prior_prec = np.diag([1 / 10.0, 1 / 4.0])
    cov = np.linalg.inv(prior_prec + design.T @ design)
    mean = cov @ (prior_prec @ [0.0, 1.0] + design.T @ y)
    result = model.infer("gibbs", draws=2000, chains=4, seed=3)
    assert_mean_within(result.samples("a"), mean[0])
    assert_mean_within(result.samples("b"), mean[1])


def test_indexed_by_observed_integers():
    """y[g] ~ N(skill[player[g]], 1): each skill's posterior is Gaussian, closed form."""
    player = np.array([0, 1, 1, 2, 0, 1])
    y = np.array([0.5, 1.5, 2.0, -1.0, 0.1, 1.1])
    with ff.Model() as model:
        with ff.Plate(ff.Range("p", 3)):
            skill = ff.Gaussian("skill", 0.0, variance=1.0)
        with ff.Plate(ff.Range("g", len(y))):
            ff.Gaussian("y", skill[player], precision=1.0, observed=y)
    prec = 1 + np.bincount(player, minlength=3)
    exact = np.bincount(player, weights=y, minlength=3) / prec
    result = model.infer("gibbs", draws=1000, chains=4, seed=0)
    assert result.samples("skill").shape == (4, 1000, 3)
    assert_mean_within(result.samples("skill"), exact)


def test_gate_posterior_by_enumeration():
    """P(cloudy | rain) = 0.5 * 0.8 / (0.5 * 0.8 + 0.5 * 0.2) = 0.8."""
    with ff.Model() as model:
        cloudy = ff.Bernoulli("cloudy", 0.5)
        with ff.If(cloudy):
            ff.Bernoulli("rain", 0.8, observed=True)
        with ff.IfNot(cloudy):
            ff.Bernoulli("rain", 0.2, observed=True)
    result = model.infer("gibbs", draws=2000, chains=4, seed=0)
    assert_mean_within(result.samples("cloudy"), 0.8)


def hierarchical_beta_binomial(n=(12, 20, 9, 15, 30, 7), y=(2, 5, 1, 4, 9, 0)):
    with ff.Model("hierarchy") as model:
        a = ff.Gamma("a", 2.0, rate=0.5)
        b = ff.Gamma("b", 2.0, rate=0.1)
        with ff.Plate(ff.Range("j", len(n))):
            p = ff.Beta("p", a, b)
            ff.Binomial("y", np.array(n), p, observed=np.array(y))
    return model, np.array(n), np.array(y)


def test_hyperparameters_integrate_out_their_conjugate_children():
    compiled = hierarchical_beta_binomial()[0].compile("gibbs")
    assert [c.variable for c in compiled.samplers] == ["a", "b", "p"]
    for name in ("a", "b"):
        rewrites = compiled.samplers[name].rewrites
        assert "p integrated out (Beta: log Z(η_prior + η_data) − log Z(η_prior))" in \
            rewrites[-2]
        assert rewrites[-1].startswith("jointly with a, b: independence Metropolis-Hastings")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hierarchical_beta_binomial_against_grid_quadrature(seed):
    """E[a], E[b] and E[p] on a grid over (log a, log b), the p's integrated out in
    closed form: Π_j B(a + y_j, b + n_j − y_j) / B(a, b)."""
    from scipy import special

    model, n, y = hierarchical_beta_binomial()
    la, lb = np.meshgrid(np.linspace(-5, 5, 401), np.linspace(-3, 7, 401), indexing="ij")
    a, b = np.exp(la), np.exp(lb)
    log_post = (stats.gamma.logpdf(a, 2.0, scale=2.0) + stats.gamma.logpdf(b, 2.0, scale=10.0)
                + la + lb + (special.betaln(a[..., None] + y, b[..., None] + n - y)
                             - special.betaln(a, b)[..., None]).sum(-1))
    w = np.exp(log_post - log_post.max())
    w /= w.sum()
    e_p = np.einsum("ij,ijk->k", w, (a[..., None] + y) / (a + b)[..., None] / 1.0
                    / (1 + n / (a + b)[..., None]))
    result = model.infer("gibbs", draws=400, chains=4, seed=seed)
    assert_mean_within(result.samples("a"), (w * a).sum())
    assert_mean_within(result.samples("b"), (w * b).sum())
    assert_mean_within(result.samples("p"), e_p)


def test_mixture_agrees_with_vmp_on_separated_data():
    rng = np.random.default_rng(0)
    data = np.concatenate([rng.normal(-4, 1, 40), rng.normal(4, 1, 40)])
    with ff.Model() as mixture:
        k = ff.Range("k", 2)
        weights = ff.Dirichlet("weights", np.ones(2))
        with ff.Plate(k):
            means = ff.Gaussian("means", 0.0, variance=100.0)
        with ff.Plate(ff.Range("n", len(data))):
            z = ff.Discrete("z", weights)
            with ff.Switch(z):
                ff.Gaussian("x", means[z], precision=1.0, observed=data)
    vmp = mixture.infer("vmp", init={"means": ff.distributions.Gaussian([-1.0, 1.0],
                                                                        [1.0, 1.0])})
    gibbs = mixture.infer("gibbs", draws=300, chains=2, seed=0,
                          init={"means": [-1.0, 1.0]})
    compiled = mixture.compile("gibbs")
    assert [c.variable for c in compiled.samplers] == ["z", "weights", "means"]
    loop = compiled.schedule.loop[0]  # each sample triggers the conditionals that read it
    assert loop.index("sample z") < loop.index("conditional of means") < loop.index(
        "sample means")
    assert_close(gibbs["means"].mean, vmp["means"].mean, atol=0.05, rtol=0)
    assert_close(gibbs["weights"].mean, vmp["weights"].mean, atol=0.02, rtol=0)
    # the indicators: each point's component, as VMP's responsibilities
    assert_close(gibbs["z"].mean, vmp["z"].probs[:, 1], atol=0.02, rtol=0)


# ----- results -------------------------------------------------------------------------
def test_result_layout_summary_and_arviz():
    az = pytest.importorskip("arviz")
    result = beta_binomial().infer("gibbs", draws=200, burn=50, thin=2, chains=3, seed=5)
    p = result.samples("p")
    assert p.shape == (3, 200) and not p.flags.writeable
    assert_close(result["p"].mean, p.mean(), rtol=1e-12)
    assert_close(result["p"].sd, p.std(ddof=1), rtol=1e-12)
    idata = result.to_arviz()
    assert_close(idata.posterior["p"].values, p, rtol=0, atol=0)
    summary = az.summary(idata)
    assert_close(summary.loc["p", "mean"], p.mean(), atol=1e-3, rtol=0)
    assert float(az.rhat(idata)["p"]) < 1.05
    assert float(az.ess(idata)["p"]) > 100


def test_plates_are_named_dimensions_in_arviz():
    x = np.array([[1.0, 2.0], [0.0, 1.0], [3.0, 2.0]])
    with ff.Model() as model:
        with ff.Plate(ff.Range("group", 3)):
            mu = ff.Gaussian("mu", 0.0, variance=10.0)
            with ff.Plate(ff.Range("n", 2)):
                ff.Gaussian("x", mu, precision=1.0, observed=x)
    result = model.infer("gibbs", draws=100, chains=2, seed=0)
    assert result.samples("mu").shape == (2, 100, 3)
    assert result.to_arviz().posterior["mu"].dims == ("chain", "draw", "group")


def test_same_seed_same_draws():
    a = beta_binomial().infer("gibbs", draws=50, chains=2, seed=11).samples("p")
    b = beta_binomial().infer("gibbs", draws=50, chains=2, seed=11).samples("p")
    c = beta_binomial().infer("gibbs", draws=50, chains=2, seed=12).samples("p")
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert not np.array_equal(a[0], a[1])  # the chains differ


def test_thinning_keeps_every_thin_th_sweep_after_the_burn_in():
    """Same seed, same sweeps: thin=3 keeps sweeps burn + 3, burn + 6, ... of the run
    that keeps them all."""
    compiled = beta_binomial().compile("gibbs")
    every = compiled.run(draws=30, burn=7, thin=1, chains=2, seed=4).samples("p")
    thinned = compiled.run(draws=10, burn=7, thin=3, chains=2, seed=4)
    assert thinned.samples("p").shape == (2, 10) and thinned.thin == 3
    assert np.array_equal(thinned.samples("p"), every[:, 2::3])


def test_data_changes_without_recompiling():
    with ff.Model() as model:
        counts = ff.Data("counts", np.array([1, 2]))
        lam = ff.Gamma("lam", 1.0, rate=1.0)
        with ff.Plate(ff.Range("n", 2)):
            ff.Poisson("y", lam, observed=counts)
    compiled = model.compile("gibbs")
    result = compiled.run(draws=500, chains=4, seed=0, data={"counts": np.array([10, 20])})
    assert_mean_within(result.samples("lam"), 31 / 3)


# ----- bad input -----------------------------------------------------------------------
@pytest.mark.parametrize("define", [
    lambda: ff.Poisson("hidden", ff.Gamma("lam", 1.0, rate=1.0)),
    lambda: ff.NegativeBinomial("hidden", ff.Gamma("r", 2.0, rate=1.0), 0.3),
    lambda: ff.Binomial("hidden", 5, ff.Beta("p", 1.0, 1.0)),
], ids=["poisson", "negative_binomial", "binomial"])
def test_latent_count_is_refused_at_compile_time(define):
    with ff.Model() as model:
        define()
    with pytest.raises(ff.UnsupportedFactorError,
                       match="no sampler for 'hidden': it is a latent count, whose support is "
                             "unbounded.*fallbacks refused: enumeration"):
        model.compile("gibbs")


def test_vector_variable_with_a_random_precision_is_refused_naming_it():
    with ff.Model() as model:
        lam = ff.Wishart("lam", 3.0, rate=np.eye(2))
        w = ff.VectorGaussian("w", np.zeros(2), precision=lam)
        with ff.Plate(ff.Range("n", 3)):
            ff.Gaussian("y", ff.inner(w, np.ones((3, 2))), precision=1.0, observed=[1., 2, 3])
    with pytest.raises(ff.UnsupportedFactorError,
                       match="factor Wishart \\(defining 'lam'\\) has no log-density formula"):
        model.compile("gibbs")


def test_non_conjugate_simplex_is_named_with_the_fallbacks_refused():
    @ff.factor(sample="real", w="simplex")
    def squared_weights_gibbs(sample, w):
        return -sample * ff.sum(w["k"] * w["k"], "k")

    with ff.Model() as model:
        w = ff.Dirichlet("w", np.ones(3))
        squared_weights_gibbs("y", w=w, observed=1.0)
    with pytest.raises(ff.ModelError, match="no sampler for 'w'.*Dirichlet.*fallbacks refused: "
                                            "slice sampling"):
        model.compile("gibbs")


@pytest.mark.parametrize("options,match", [
    (dict(draws=0), "draws must be an integer >= 1"),
    (dict(draws=10, thin=0), "thin must be"),
    (dict(draws=10, chains=2.5), "chains must be"),
    (dict(draws=10, init={"nope": 1.0}), "not sampled variables"),
    (dict(draws=10, init={"p": [0.1, 0.2]}), r"init\['p'\] has shape"),
])
def test_bad_run_options(options, match):
    with pytest.raises(ff.ModelError, match=match):
        beta_binomial().infer("gibbs", **options)


@pytest.mark.parametrize("args,options,match", [
    ((10,), {}, "iterations= belong to message passing"),
    ((), {"damping": 0.5}, "damping= belong to message passing"),
    ((), {"draw": 10}, "unknown option draw="),
])
def test_message_passing_options_are_refused_for_gibbs(args, options, match):
    with pytest.raises(ff.ModelError, match=match):
        beta_binomial().infer("gibbs", *args, **options)


# ----- generated conjugate models ------------------------------------------------------
@settings(max_examples=12, deadline=None, derandomize=True)
@given(a=st.floats(0.5, 5.0), b=st.floats(0.5, 5.0),
       counts=st.lists(st.integers(0, 6), min_size=0, max_size=5),
       family=st.sampled_from(["beta_binomial", "gamma_poisson", "normal_normal",
                               "normal_gamma", "dirichlet_discrete"]))
def test_generated_conjugate_models(a, b, counts, family):
    """Small conjugate models with random priors and data (an empty plate included)
    against their closed-form posterior means."""
    y = np.asarray(counts, float)
    with ff.Model() as model:
        if family == "beta_binomial":
            x = ff.Beta("x", a, b)
            exact = (a + y.sum()) / (a + b + 6 * len(y))
        elif family == "gamma_poisson":
            x = ff.Gamma("x", a, rate=b)
            exact = (a + y.sum()) / (b + len(y))
        elif family == "normal_normal":
            x = ff.Gaussian("x", a, precision=b)
            exact = (a * b + 0.5 * y.sum()) / (b + 0.5 * len(y))
        elif family == "normal_gamma":
            x = ff.Gamma("x", a, rate=b)
            exact = (a + len(y) / 2) / (b + ((y - 3.0) ** 2).sum() / 2)
        else:
            alpha = np.array([a, b, 1.0])
            x = ff.Dirichlet("x", alpha)
            post = alpha + np.bincount(np.asarray(counts, int) % 3, minlength=3)
            exact = post / post.sum()
        with ff.Plate(ff.Range("n", len(y))):
            if family == "beta_binomial":
                ff.Binomial("y", 6, x, observed=counts)
            elif family == "gamma_poisson":
                ff.Poisson("y", x, observed=counts)
            elif family == "normal_normal":
                ff.Gaussian("y", x, precision=0.5, observed=y)
            elif family == "normal_gamma":
                ff.Gaussian("y", 3.0, precision=x, observed=y)
            else:
                ff.Discrete("y", x, observed=np.asarray(counts, int) % 3)
    result = model.infer("gibbs", draws=200, chains=4, seed=len(counts))
    assert_mean_within(result.samples("x"), exact)


def test_compiled_sampler_pickles_and_prints_its_schedule():
    import pickle

    compiled = beta_binomial().compile("gibbs")
    again = pickle.loads(pickle.dumps(compiled))
    a = compiled.run(draws=20, chains=2, seed=3).samples("p")
    assert np.array_equal(a, again.run(draws=20, chains=2, seed=3).samples("p"))
    assert str(compiled.schedule) == (
        "prefix:\n  conditional of p  read by sample p\n"
        "  sample p          output  # draw p ~ Beta (conjugate)")
    assert str(compiled.samplers) == (
        "p: Beta (conjugate)\n"
        "    Beta(p): log density linear in (log(x), log(1 - x)), coefficients "
        "(-1 + 2.0, -1 + 3.0)\n"
        "    Binomial(k): log density linear in (log(x), log(1 - x)), coefficients "
        "(k, 10.0 - k)")


def test_coupled_elements_are_refused():
    from factorflow.model.factories import minus

    with ff.Model() as model:
        with ff.Plate(ff.Range("p", 3)):
            skill = ff.Gaussian("skill", 0.0, variance=1.0)
        with ff.Plate(ff.Range("g", 2)):
            diff = minus(skill[np.array([0, 1])], skill[np.array([1, 2])])
            ff.Gaussian("y", diff, precision=1.0, observed=[1.0, 0.5])
    with pytest.raises(ff.ModelError, match="several elements of 'skill'.*coupled"):
        model.compile("gibbs")


def test_logic_factors_are_refused_by_name():
    with ff.Model() as model:
        a = ff.Gaussian("a", 0.0, variance=1.0)
        b = ff.Gaussian("b", 0.0, variance=1.0)
        ff.constrain_true(a > b)
    with pytest.raises(ff.UnsupportedFactorError, match="ConstrainTrue.*use 'ep' or 'vmp'"):
        model.compile("gibbs")


def test_continuous_exit_variable_of_a_gate():
    """x is N(0, 1) if c else N(5, 1); y = 4 ~ N(x, 1): P(c | y) and E[x | y] exactly."""
    with ff.Model() as model:
        c = ff.Bernoulli("c", 0.3)
        with ff.If(c):
            x = ff.Gaussian("x", 0.0, variance=1.0)
        with ff.IfNot(c):
            x = ff.Gaussian("x", 5.0, variance=1.0)
        ff.Gaussian("y", x, precision=1.0, observed=4.0)
    w1, w0 = 0.3 * stats.norm.pdf(4, 0, 2**0.5), 0.7 * stats.norm.pdf(4, 5, 2**0.5)
    p1 = w1 / (w1 + w0)
    result = model.infer("gibbs", draws=1500, chains=4, seed=0)
    assert_mean_within(result.samples("x"), p1 * 2.0 + (1 - p1) * 4.5)


def test_latent_coins_with_a_beta_prior_against_enumeration():
    """f[n] ~ Bernoulli(p), p ~ Beta(1, 1), o[n] ~ N(f[n], 1/4): every configuration of f
    enumerated with p integrated out (Beta function)."""
    import itertools

    from scipy import special

    o = np.array([1.1, 0.9, 0.0, 1.2])
    with ff.Model() as model:
        p = ff.Beta("p", 1.0, 1.0)
        with ff.Plate(ff.Range("n", len(o))):
            f = ff.Bernoulli("f", p)
            with ff.If(f):
                ff.Gaussian("o", 1.0, precision=4.0, observed=o)
            with ff.IfNot(f):
                ff.Gaussian("o", 0.0, precision=4.0, observed=o)
    configs = np.array(list(itertools.product([0, 1], repeat=len(o))))
    k = configs.sum(axis=1)
    weight = np.exp(special.betaln(1 + k, 1 + len(o) - k)
                    + stats.norm.logpdf(o, configs, 0.5).sum(axis=1))
    weight /= weight.sum()
    result = model.infer("gibbs", draws=1000, chains=4, seed=0)
    assert_mean_within(result.samples("f"), weight @ configs)
    assert_mean_within(result.samples("p"), weight @ ((1 + k) / (2 + len(o))))


def test_a_variable_read_twice_by_one_expression_stays_conjugate():
    """y ~ N(m + 2m, 1): one element of m read twice, the conditional is Gaussian with
    coefficient 3 (closed form)."""
    y = np.array([3.0, 4.5])
    with ff.Model() as model:
        m = ff.Gaussian("m", 0.0, variance=1.0)
        with ff.Plate(ff.Range("n", len(y))):
            ff.Gaussian("y", m + 2.0 * m, precision=1.0, observed=y)
    compiled = model.compile("gibbs")
    assert compiled.samplers["m"].sampler == "Gaussian (conjugate)"
    prec = 1.0 + 9.0 * len(y)
    result = compiled.run(draws=500, chains=4, seed=0)
    assert_mean_within(result.samples("m"), 3.0 * y.sum() / prec)


def test_constant_inside_an_expression_over_outer_plates():
    """mu[k] + offset[k] used inside the nested plate n: each mu[k] is Gaussian with the
    data shifted by its offset (closed form)."""
    y = np.array([[1.0, 2.0, 1.5], [-3.0, -2.0, -2.5]])
    offset = np.array([1.0, -1.0])
    with ff.Model() as model:
        with ff.Plate(ff.Range("k", 2)):
            mu = ff.Gaussian("mu", 0.0, variance=10.0)
            shifted = mu + offset
            with ff.Plate(ff.Range("n", 3)):
                ff.Gaussian("y", shifted, precision=1.0, observed=y)
    result = model.infer("gibbs", draws=500, chains=4, seed=0)
    assert_mean_within(result.samples("mu"), (y - offset[:, None]).sum(axis=1) / 3.1)


def test_plates_opened_in_another_order():
    """mu has plates (k, n); its data sit in plates (n, k): mu[k, n] = y[n, k] / 2."""
    y = np.arange(6.0).reshape(3, 2)
    with ff.Model() as model:
        k, n = ff.Range("k", 2), ff.Range("n", 3)
        with ff.Plate(k), ff.Plate(n):
            mu = ff.Gaussian("mu", 0.0, variance=1.0)
        with ff.Plate(n), ff.Plate(k):
            ff.Gaussian("y", mu, precision=1.0, observed=y)
    result = model.infer("gibbs", draws=500, chains=4, seed=0)
    assert result.samples("mu").shape == (4, 500, 2, 3)
    assert_mean_within(result.samples("mu"), y.T / 2)


def test_children_integrated_out_are_drawn_every_sweep_after_their_parents():
    """p is read by no conditional (a and b integrate it out), so the scheduler puts it
    after the loop; it is still drawn every sweep, right after a and b (and mixes)."""
    with ff.Model() as model:
        a = ff.Gamma("a", 2.0, rate=0.5)
        b = ff.Gamma("b", 2.0, rate=0.1)
        mu = ff.Gaussian("mu", 0.0, variance=1.0)
        ff.Gaussian("o", mu, precision=a, observed=1.0)
        with ff.Plate(ff.Range("j", 3)):
            p = ff.Beta("p", a, b)
            ff.Binomial("y", np.array([5, 6, 7]), p, observed=np.array([1, 2, 3]))
    compiled = model.compile("gibbs")
    order = [c.variable for c in compiled.samplers]
    assert sorted(order) == ["a", "b", "mu", "p"]
    assert order.index("p") == max(order.index("a"), order.index("b")) + 1
    draws = compiled.run(draws=30, chains=2, seed=0).samples("p")
    assert np.all(np.diff(draws, axis=1) != 0)  # a fresh conjugate draw at every sweep
