"""User-defined factors: messages derived from the log density by the rewrite engine."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import factorflow as ff
from factorflow.distributions import Beta as BetaD
from factorflow.distributions import Gamma as GammaD
from factorflow.distributions import Gaussian as GaussianD
from factorflow.distributions import VectorGaussian as VectorGaussianD
from factorflow.distributions import Wishart as WishartD
from factorflow.factors.registry import FACTORS
from tests.conftest import assert_close

LOG_2PI = float(np.log(2 * np.pi))


@ff.factor(sample="real", mean="real", precision="positive")
def gaussian_scaled_by_3(sample, mean, precision):
    return 0.5 * ff.log(3.0 * precision) - 0.5 * LOG_2PI - 1.5 * precision * (sample - mean) ** 2


@ff.factor(sample="real", mean="real", precision="positive")
def plain_gaussian(sample, mean, precision):
    return 0.5 * ff.log(precision) - 0.5 * LOG_2PI - 0.5 * precision * (sample - mean) ** 2


@ff.factor(sample="bool", p="unit")
def coin(sample, p):
    return sample * ff.log(p) + (1 - sample) * ff.log(1 - p)


def test_user_factor_in_a_model_matches_the_builtin():
    """Gaussian with precision 3·τ, τ ~ Gamma(1, 1) equals the built-in Gaussian with
    precision τ' = 3τ ~ Gamma(1, rate 1/3)."""
    data = [5.0, 7.0, 6.5]
    with ff.Model("user") as user:
        mean = ff.Gaussian("mean", 0.0, variance=100.0)
        tau = ff.Gamma("tau", 1.0, rate=1.0)
        n = ff.Range("n", len(data))
        with ff.Plate(n):
            gaussian_scaled_by_3("x", mean=mean, precision=tau, observed=data)
    with ff.Model("builtin") as builtin:
        mean = ff.Gaussian("mean", 0.0, variance=100.0)
        tau3 = ff.Gamma("tau3", 1.0, rate=1.0 / 3.0)
        n = ff.Range("n", len(data))
        with ff.Plate(n):
            ff.Gaussian("x", mean, precision=tau3, observed=data)
    a, b = user.infer("vmp"), builtin.infer("vmp")
    assert_close(a["mean"].mean, b["mean"].mean, rtol=1e-10)
    assert_close(a["mean"].variance, b["mean"].variance, rtol=1e-10)
    assert_close(a["tau"].shape_param, b["tau3"].shape_param, rtol=1e-10)
    assert_close(a["tau"].rate, 3.0 * b["tau3"].rate, rtol=1e-10)  # τ' = 3τ: rate / 3


@pytest.mark.parametrize("seed", range(5))
def test_derived_gaussian_messages_equal_the_builtin(seed):
    rng = np.random.default_rng(seed)
    x = GaussianD(rng.normal(size=4), rng.uniform(0.5, 2, size=4))
    mu = GaussianD(rng.normal(size=4), rng.uniform(0.5, 2, size=4))
    tau = GammaD(rng.uniform(1, 3, size=4), rate=rng.uniform(0.5, 2, size=4))
    user, builtin = FACTORS["plain_gaussian"], FACTORS["Gaussian"]
    args = {"sample": x, "mean": mu, "precision": tau}
    for target in ("sample", "mean", "precision"):
        ours = user.operators[("vmp", target)].fn(**{k: v for k, v in args.items()
                                                     if k != target})
        theirs = builtin.operators[("vmp", target)].fn(**{k: v for k, v in args.items()
                                                          if k != target})
        for e1, e2 in zip(ours.eta, theirs.eta, strict=True):
            assert_close(e1, e2, rtol=1e-10, atol=1e-12)
    assert_close(user.evidence["vmp"](**args), builtin.evidence["vmp"](**args), rtol=1e-10)


def test_derived_bernoulli_beta_messages_equal_the_builtin():
    p = BetaD(np.array([2.0, 3.0]), np.array([5.0, 1.5]))
    user, builtin = FACTORS["coin"], FACTORS["Bernoulli"]
    assert_close(user.operators[("vmp", "sample")].fn(p=p).eta[0],
                 builtin.operators[("vmp", "sample")].fn(p=p).eta[0], rtol=1e-10)
    sample = np.array([1.0, 0.0])
    for e1, e2 in zip(user.operators[("vmp", "p")].fn(sample=sample).eta,
                      builtin.operators[("vmp", "p")].fn(sample=sample).eta, strict=True):
        assert_close(e1, e2, rtol=1e-10, atol=1e-12)


def test_non_conjugate_argument_is_named_and_refused_by_the_compiler():
    @ff.factor(sample="real", rate="positive")
    def exp_rate(sample, rate):
        return sample * ff.exp(rate) - rate

    with ff.Model() as model:
        r = ff.Gamma("r", 1.0, rate=1.0)
        exp_rate("y", rate=r, observed=0.5)
    with pytest.raises(ff.UnsupportedFactorError, match=r"'rate'.*exp"):
        model.compile("vmp")


def test_unknown_name_in_a_formula():
    with pytest.raises(ff.ModelError, match="unknown name"):
        @ff.factor(sample="real")
        def broken(sample):
            return undefined_thing * sample  # noqa: F821


def test_declared_arguments_must_match_the_function():
    with pytest.raises(ff.ModelError, match="must be the declared ones"):
        @ff.factor(sample="real", mean="real")
        def wrong(sample, other):
            return sample * other


def test_deterministic_node_reaches_the_mean_field_fixed_point():
    """y ~ N(2a + b, 1) with s = 2a + b an expression node: the VMP fixed point solves
    m_a = 2 Σ(y − m_b) / 12.1 and m_b = (0.1 + Σ(y − 2 m_a)) / 3.1."""
    data = np.array([3.0, 4.0, 5.5])
    with ff.Model("expression_node") as model:
        a = ff.Gaussian("a", 0.0, variance=10.0)
        b = ff.Gaussian("b", 1.0, variance=10.0)
        s = ff.Deterministic("s", lambda a, b: 2.0 * a + b, a=a, b=b)
        n = ff.Range("n", 3)
        with ff.Plate(n):
            ff.Gaussian("y", s, precision=1.0, observed=data)
    result = model.infer("vmp", iterations=3000)
    lhs = np.array([[12.1, 6.0], [6.0, 3.1]])
    m_a, m_b = np.linalg.solve(lhs, [2 * data.sum(), 0.1 + data.sum()])
    assert_close(result["a"].mean, m_a, rtol=1e-9)
    assert_close(result["b"].mean, m_b, rtol=1e-9)
    assert_close(result["a"].variance, 1 / 12.1, rtol=1e-12)
    assert_close(result["s"].mean, 2 * m_a + m_b, rtol=1e-9)
    assert_close(result["s"].variance, 4 / 12.1 + 1 / 3.1, rtol=1e-9)


def test_deterministic_formula_that_cannot_be_closed():
    with ff.Model():
        a = ff.Gaussian("a", 0.0, variance=1.0)
        with pytest.raises(ff.ModelError, match="exp"):
            ff.Deterministic("e", lambda a: ff.exp(a) * a, a=a)


@ff.factor(sample="count", rate="positive")
def poisson_formula(sample, rate):
    return sample * ff.log(rate) - rate - ff.lgamma(sample + 1)


@ff.factor(sample="count", trials="count", p="unit")
def binomial_formula(sample, trials, p):
    return sample * ff.log(p) + (trials - sample) * ff.log(1 - p)


@ff.factor(sample="positive", shape="positive", rate="positive")
def gamma_formula(sample, shape, rate):
    return (shape * ff.log(rate) - ff.lgamma(shape) + (shape - 1) * ff.log(sample)
            - rate * sample)


def _same_message(a, b):
    for e1, e2 in zip(a.eta, b.eta, strict=True):
        assert_close(np.broadcast_to(e1, np.shape(e2)), e2, rtol=1e-10, atol=1e-12)


def test_rederived_poisson_binomial_gamma_messages_equal_the_builtins():
    counts = np.array([0.0, 3.0, 7.0])
    rate = GammaD(np.array([2.0, 1.5, 4.0]), rate=np.array([1.0, 0.5, 2.0]))
    _same_message(FACTORS["poisson_formula"].operators[("vmp", "rate")].fn(sample=counts),
                  FACTORS["Poisson"].operators[("vmp", "rate")].fn(sample=counts))
    assert_close(FACTORS["poisson_formula"].evidence["vmp"](sample=counts, rate=rate),
                 FACTORS["Poisson"].evidence["vmp"](sample=counts, rate=rate), rtol=1e-10)
    trials = np.array([5.0, 3.0, 9.0])
    _same_message(FACTORS["binomial_formula"].operators[("vmp", "p")].fn(sample=counts,
                                                                        trials=trials),
                  FACTORS["Binomial"].operators[("vmp", "p")].fn(sample=counts,
                                                                trials=trials))
    x = GammaD(np.array([2.0, 3.0, 1.2]), rate=np.array([1.0, 2.0, 0.7]))
    _same_message(FACTORS["gamma_formula"].operators[("vmp", "rate")].fn(sample=x, shape=2.5),
                  FACTORS["Gamma"].operators[("vmp", "rate")].fn(sample=x, shape=2.5))
    _same_message(FACTORS["gamma_formula"].operators[("vmp", "sample")].fn(shape=2.5,
                                                                           rate=rate),
                  FACTORS["Gamma"].operators[("vmp", "sample")].fn(shape=2.5, rate=rate))


# ----- vector arguments: inner indices (VinDsl) -------------------------------------------
@ff.factor(z="int", theta="simplex")
def categorical(z, theta):
    return ff.sum(z["k"] * ff.log(theta["k"]), "k")


ALPHA = np.array([1.0, 2.0, 0.5])
CATEGORIES = np.array([0, 2, 2, 1, 0, 0, 2])
POINTS = np.array([0, 1, 2, 5, 6, 7, 10, 11, 12.0])


def test_observed_categories_give_the_conjugate_dirichlet_posterior():
    results = []
    for user in (True, False):
        with ff.Model() as model:
            theta = ff.Dirichlet("theta", ALPHA)
            with ff.Plate(ff.Range("n", CATEGORIES.size)):
                if user:
                    categorical("z", theta=theta, observed=CATEGORIES)
                else:
                    ff.Discrete("z", theta, observed=CATEGORIES)
        results.append(model.infer("vmp"))
    exact = ALPHA + np.bincount(CATEGORIES, minlength=3)
    assert_close(results[0]["theta"].alpha, exact, rtol=1e-12)
    assert_close(results[0]["theta"].alpha, results[1]["theta"].alpha, rtol=1e-12)
    assert_close(results[0].log_evidence, results[1].log_evidence, rtol=1e-12)


def _mixture(user: bool) -> ff.Model:
    with ff.Model("mixture") as model:
        k = ff.Range("k", 3)
        weights = ff.Dirichlet("weights", np.ones(3))
        with ff.Plate(k):
            means = ff.Gaussian("means", 6.0, variance=100.0)
        with ff.Plate(ff.Range("n", POINTS.size)):
            z = categorical("z", theta=weights) if user else ff.Discrete("z", weights)
            with ff.Switch(z):
                ff.Gaussian("x", means[z], precision=1.0, observed=POINTS)
    return model


def test_latent_categories_in_a_mixture_match_the_builtin_discrete():
    init = {"means": GaussianD(np.array([0.0, 5.0, 10.0]), np.ones(3))}
    a = _mixture(True).infer("vmp", iterations=30, init=init)
    b = _mixture(False).infer("vmp", iterations=30, init=init)
    assert_close(a["z"].probs, b["z"].probs, rtol=1e-10, atol=1e-12)
    assert_close(a["weights"].alpha, b["weights"].alpha, rtol=1e-10)
    assert_close(a["means"].mean, b["means"].mean, rtol=1e-10)
    assert_close(a.log_evidence, b.log_evidence, rtol=1e-10)
    assert_close(a["means"].mean, [1.0, 6.0, 11.0], rtol=0, atol=0.2)


@pytest.mark.parametrize(("formula", "domains", "message"), [
    (lambda z, theta: z["k"] * ff.log(theta["k"]), dict(z="int", theta="simplex"),
     r"still carries the index 'k'; sum it with ff.sum\(\.\.\., 'k'\)"),
    (lambda x, theta: ff.sum(x["k"] * ff.log(theta["k"]), "k"), dict(x="real", theta="simplex"),
     r"'x' has the scalar domain 'real' but is indexed"),
    (lambda z, theta: z * ff.sum(ff.log(theta["k"]), "k"), dict(z="int", theta="simplex"),
     r"vector argument 'z' \(int\) must be used with its inner index"),
    (lambda z, theta: ff.sum(z["k"], "j"), dict(z="int", theta="simplex"),
     r"ff.sum\(\.\.\., 'j'\): the summand must be a formula that carries the index 'j'"),
    (lambda x, m: np.sin(x - m), dict(x="real", m="real"),
     r"operation factorflow cannot read symbolically.*ff.log"),
])
def test_misused_indices_and_functions_are_named(formula, domains, message):
    with pytest.raises(ff.ModelError, match=message):
        ff.factor(**domains)(formula)


def test_arguments_sharing_an_index_must_agree_in_size():
    with ff.Model():
        theta = ff.Dirichlet("theta", np.ones(3))
        with pytest.raises(ff.ModelError, match=r"index 'k' has 3 components in 'theta' but 4 "
                                                r"in 'probs'"):
            both("z", theta=theta, probs=np.full(4, 0.25))


@ff.factor(z="int", theta="simplex", probs="simplex")
def both(z, theta, probs):
    return ff.sum(z["k"] * (ff.log(theta["k"]) + ff.log(probs["k"])), "k")


@ff.factor(z="int", theta="simplex", w="simplex")
def categorical_and_tilt(z, theta, w):
    return ff.sum(z["k"] * ff.log(theta["k"]), "k") + ff.sum(ff.log(w["j"]), "j")


def test_inner_indices_of_different_sizes_stay_apart():
    """theta has 3 categories (index k), w has 2 (index j); each datum adds its one-hot
    count to theta and 1 to every component of w."""
    with ff.Model() as model:
        theta = ff.Dirichlet("theta", ALPHA)
        w = ff.Dirichlet("w", np.ones(2))
        with ff.Plate(ff.Range("n", CATEGORIES.size)):
            categorical_and_tilt("z", theta=theta, w=w, observed=CATEGORIES)
    result = model.infer("vmp")
    assert model.variables["z"].size == 3
    assert_close(result["theta"].alpha, ALPHA + np.bincount(CATEGORIES, minlength=3), rtol=1e-12)
    assert_close(result["w"].alpha, np.full(2, 1.0 + CATEGORIES.size), rtol=1e-12)


def test_covariance_of_a_known_category_plate_is_one_zero_matrix_per_datum():
    from factorflow.model.dsl import _environment
    from factorflow.rewrite.terms import C, sym

    env = _environment([C(sym("z"))], {"z": CATEGORIES, "theta": np.full(3, 1 / 3)},
                       {"z": "int", "theta": "simplex"}, {"z": "k", "theta": "k"})
    assert env[C(sym("z"))].shape == (CATEGORIES.size, 3, 3)
    assert not env[C(sym("z"))].any()


def test_an_inner_index_sized_by_an_ff_data_value():
    """A simplex argument given as ff.Data sizes its inner index from the value it has
    when built; a run may change the value (VMP evidence: log theta[z])."""

    @ff.factor(z="int", theta="simplex")
    def data_categorical(z, theta):
        return ff.sum(z["k"] * ff.log(theta["k"]), "k")

    with ff.Model("data-sized") as model:
        theta = ff.Data("theta", np.array([0.1, 0.1, 0.8]))
        data_categorical("z", theta=theta, observed=2)
    compiled = model.compile("vmp")
    assert_close(compiled.run().log_evidence, np.log(0.8))
    assert_close(compiled.run(data={"theta": np.array([0.2, 0.2, 0.6])}).log_evidence,
                 np.log(0.6))


@ff.factor(x="positive", shape="positive")
def gamma_of_random_shape(x, shape):
    return (shape - 1) * ff.log(x) - x - ff.lgamma(shape)


def test_elbo_term_with_lgamma_of_a_random_argument_uses_eloggamma():
    """E[log f] = (E[a] - 1) E[log x] - E[x] - E[log Γ(a)], each factor by SciPy quadrature;
    the shape has no conjugate message (log Γ(a) is not a Gamma statistic)."""
    from scipy import integrate, special, stats

    def expect(f, dist):
        return integrate.quad(lambda v: f(v) * dist.pdf(v), 0, np.inf, epsabs=1e-13,
                              epsrel=1e-13, limit=500)[0]

    x, shape = GammaD(2.0, rate=3.0), GammaD(4.5, rate=1.5)
    ex, ea = stats.gamma(2.0, scale=1 / 3.0), stats.gamma(4.5, scale=1 / 1.5)
    want = (ea.mean() - 1) * expect(np.log, ex) - ex.mean() - expect(special.gammaln, ea)
    got = FACTORS["gamma_of_random_shape"].evidence["vmp"](x=x, shape=shape)
    assert_close(got, want, rtol=1e-9)
    assert "shape" in gamma_of_random_shape.blocked and "lgamma(shape)" in \
        gamma_of_random_shape.blocked["shape"]


@pytest.mark.parametrize("fn", [ff.log, ff.exp, ff.lgamma, ff.digamma, ff.E, ff.V, ff.Elog],
                         ids=lambda f: f.__name__)
def test_formula_functions_refuse_what_is_not_a_formula(fn):
    """A string (a misspelt argument name) is named in a ModelError, not a TypeError."""
    with pytest.raises(ff.ModelError, match=rf"ff\.{fn.__name__}\('tau'\): the argument must be"):
        fn("tau")


def test_a_user_function_refuses_what_is_not_a_formula():
    twice = ff.function("twice_for_test", lambda x: 2 * x)
    with pytest.raises(ff.ModelError, match=r"twice_for_test\('k',\): the arguments of a user"):
        twice("k")


# ----- vectors and matrices: two inner indices (VinDsl's Wishart Λ[i, j]) -----------------
@ff.factor(x="vector", mu="vector", lam="posdef")
def mvn_formula(x, mu, lam):
    """The multivariate normal without its constant −(D/2) log 2π (D is not a symbol)."""
    def d(i):
        return x[i] - mu[i]
    return 0.5 * ff.logdet(lam) - 0.5 * ff.sum(d("i") * lam["i", "j"] * d("j"), "i", "j")


def _random_vector_gaussian(rng, batch, dim):
    a = rng.normal(size=(*batch, dim, dim))
    return VectorGaussianD(rng.normal(size=(*batch, dim)),
                           precision=a @ np.swapaxes(a, -1, -2) + dim * np.eye(dim))


def _random_wishart(rng, batch, dim):
    a = rng.normal(size=(*batch, dim, dim))
    return WishartD(dim + rng.uniform(0.5, 3.0, size=batch),
                    rate=a @ np.swapaxes(a, -1, -2) + dim * np.eye(dim))


def _same_message(ours, theirs):
    assert type(ours) is type(theirs)
    for e1, e2 in zip(ours.eta, theirs.eta, strict=True):
        e1, e2 = np.broadcast_arrays(e1, e2)
        assert_close(e1, e2, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_derived_multivariate_normal_messages_equal_the_builtin_vector_gaussian(dim):
    """On random posteriors (a plate of 4 x's, one μ and one Λ), every derived message
    (x: VectorGaussian, μ: VectorGaussian, Λ: Wishart, read off the formula's inner indices)
    equals the built-in ``VectorGaussian`` factor's VMP message, and the ELBO term equals
    the built-in's plus the (D/2) log 2π the formula leaves out."""
    rng = np.random.default_rng(dim)
    args = {"x": _random_vector_gaussian(rng, (4,), dim),
            "mu": _random_vector_gaussian(rng, (), dim), "lam": _random_wishart(rng, (), dim)}
    names = {"x": "sample", "mu": "mean", "lam": "precision"}
    user, builtin = FACTORS["mvn_formula"], FACTORS["VectorGaussian"]
    for target in args:
        ours = user.operators[("vmp", target)].fn(**args)  # (reads its target for D)
        theirs = builtin.operators[("vmp", names[target])].fn(
            **{names[k]: v for k, v in args.items() if k != target})
        _same_message(ours, theirs)
    theirs = builtin.evidence["vmp"](**{names[k]: v for k, v in args.items()})
    assert_close(user.evidence["vmp"](**args), theirs + 0.5 * dim * LOG_2PI, rtol=1e-10)


def _gaussian_wishart(user, data, prior_mean, prior_precision, dof, rate, latent=False):
    """μ ~ N(m0, P0), Λ ~ W(ν, R), y_n ~ N(μ, Λ⁻¹) over the plate n (the user's formula or
    the built-in factor); with ``latent``, x_n ~ N(μ, Λ⁻¹) is latent and y_n ~ N(x_n, I)."""
    n, dim = data.shape
    with ff.Model() as model:
        mu = ff.VectorGaussian("mu", prior_mean, precision=prior_precision)
        lam = ff.Wishart("lam", dof, rate=rate)
        with ff.Plate(ff.Range("n", n)):
            if latent:
                x = (mvn_formula("x", mu=mu, lam=lam) if user
                     else ff.VectorGaussian("x", mu, precision=lam))
                ff.VectorGaussian("y", x, precision=np.eye(dim), observed=data)
            elif user:
                mvn_formula("y", mu=mu, lam=lam, observed=data)
            else:
                ff.VectorGaussian("y", mu, precision=lam, observed=data)
    return model


@settings(max_examples=25, deadline=None)
@given(dim=st.integers(1, 3), n=st.integers(0, 5), seed=st.integers(0, 2**16),
       latent=st.booleans())
def test_gaussian_wishart_model_equals_the_builtin(dim, n, seed, latent):
    """A Gaussian–Wishart model (D 1–3, N 0–5, observed or latent vectors mixing the plate
    with the inner indices): the posteriors of μ, Λ (and the latent x) and the bound
    equal the built-in ``ff.VectorGaussian``'s, the bound up to the formula's missing
    −(D/2) log 2π per vector. (An empty plate of latent vectors fails in the built-in
    factor's propriety check as in ours, in ``multivariate._distinct_elements``: left out.)"""
    assume(n > 0 or not latent)
    rng = np.random.default_rng(seed)
    data = rng.normal(size=(n, dim)) * 2.0 + 1.0
    a = rng.normal(size=(dim, dim))
    parts = (data, rng.normal(size=dim), a @ a.T + np.eye(dim), dim + 1.5,
             np.eye(dim) + 0.3 * np.diag(rng.uniform(size=dim)))
    # (to the fixed point: the two schedules visit μ and Λ in different orders)
    ours, theirs = (_gaussian_wishart(user, *parts, latent=latent).infer(
        "vmp", iterations=2000, tolerance=1e-13) for user in (True, False))
    for name in ("mu", "lam", *(("x",) if latent and n else ())):
        for e1, e2 in zip(ours[name].eta, theirs[name].eta, strict=True):
            assert_close(e1, e2, rtol=1e-10, atol=1e-10)
    assert_close(ours.log_evidence, theirs.log_evidence + 0.5 * n * dim * LOG_2PI,
                 rtol=1e-10, atol=1e-10)


@settings(max_examples=20, deadline=None)
@given(dim=st.integers(1, 3), n=st.integers(0, 5), seed=st.integers(0, 2**16))
def test_conjugate_posteriors_have_the_closed_form(dim, n, seed):
    """Known mean m: Λ ~ W(ν, R) gives W(ν + N, R + Σ (y − m)(y − m)ᵀ); known precision
    Λ: μ ~ N(m0, P0⁻¹) gives precision P0 + N Λ and mean (P0 m0 + Λ Σ y) / that — the
    Normal–Wishart conjugate posteriors, exact under VMP (one random argument)."""
    rng = np.random.default_rng(seed)
    data = rng.normal(size=(n, dim)) + 0.5
    m, m0 = rng.normal(size=dim), rng.normal(size=dim)
    a = rng.normal(size=(dim, dim))
    lam_known, p0, rate = a @ a.T + np.eye(dim), np.eye(dim) * 0.5, np.eye(dim) * 2.0
    with ff.Model() as wishart_model:
        lam = ff.Wishart("lam", dim + 1.0, rate=rate)
        with ff.Plate(ff.Range("n", n)):
            mvn_formula("y", mu=m, lam=lam, observed=data)
    with ff.Model() as gaussian_model:
        mu = ff.VectorGaussian("mu", m0, precision=p0)
        with ff.Plate(ff.Range("n", n)):
            mvn_formula("y", mu=mu, lam=lam_known, observed=data)
    posterior = wishart_model.infer("vmp")["lam"]
    d = data - m
    assert_close(posterior.dof, dim + 1.0 + n, rtol=1e-12)
    assert_close(posterior.rate, rate + d.T @ d, rtol=1e-10, atol=1e-12)
    posterior = gaussian_model.infer("vmp")["mu"]
    precision = p0 + n * lam_known
    assert_close(posterior.precision, precision, rtol=1e-10, atol=1e-12)
    assert_close(posterior.mean, np.linalg.solve(precision, p0 @ m0 + lam_known @ data.sum(0)),
                 rtol=1e-10, atol=1e-12)


@ff.factor(x="vector", m="vector", tau="positive")
def isotropic_formula(x, m, tau):
    return -0.5 * tau * ff.sum((x["i"] - m["i"]) ** 2, "i")


def test_a_square_of_one_index_is_the_diagonal_of_the_precision():
    """Σ_i τ (x_i − m_i)² reads x_i² (one index, the algebra's square): the message to x
    is N(E[m], (E[τ] I)⁻¹), the built-in's with the known precision E[τ] I."""
    rng = np.random.default_rng(7)
    m = _random_vector_gaussian(rng, (3,), 2)
    ours = FACTORS["isotropic_formula"].operators[("vmp", "x")].fn(
        m=m, tau=2.5, x=VectorGaussianD.uniform((3,), 2))
    theirs = FACTORS["VectorGaussian"].operators[("vmp", "sample")].fn(
        mean=m, precision=2.5 * np.eye(2))
    _same_message(ours, theirs)


def test_derived_vector_and_matrix_statements_print_as_golden_text():
    user = mvn_formula
    assert str(user.derivations["x"].naturals) == (
        "(sum[j](0.5*at(at(E(lam), j), _row)*at(E(mu), j)) + sum[i](0.5*at(E(mu), i)"
        "*at(at(E(lam), _row), i)), -0.5*at(at(E(lam), _row), _col), 0)")
    assert str(user.derivations["lam"].statistics) == "(logdet(lam), at(at(lam, _col), _row))"
    assert str(user.derivations["lam"].naturals) == (
        "(0.5, -0.5*at(E(x), _col)*at(E(x), _row) - 0.5*at(E(mu), _row)*at(E(mu), _col) "
        "+ 0.5*at(E(x), _col)*at(E(mu), _row) - 0.5*at(at(C(mu), _col), _row) "
        "- 0.5*at(at(C(x), _row), _col) + 0.5*at(E(x), _row)*at(E(mu), _col))")


@pytest.mark.parametrize(("formula", "domains", "message"), [
    (lambda x, lam: ff.sum(x["i", "j"] * lam["i", "j"], "i", "j"),
     dict(x="vector", lam="posdef"),
     r"bad_indices: argument 'x' \(vector\) is indexed as x\['i', 'j'\]; it takes 1 distinct"),
    (lambda x, lam: ff.sum(x["i"] * lam["i"], "i"), dict(x="vector", lam="posdef"),
     r"bad_indices: argument 'lam' \(posdef\) is indexed as lam\['i'\]; it takes 2 distinct"),
    (lambda x, lam: ff.sum(x["i"] * lam["i", "i"], "i"), dict(x="vector", lam="posdef"),
     r"argument 'lam' \(posdef\) is indexed as lam\['i', 'i'\]; it takes 2 distinct"),
    (lambda x, lam: ff.sum(x["i"], "i") * ff.logdet(lam) + x, dict(x="vector", lam="posdef"),
     r"bad_indices: argument 'x' \(vector\) is used whole"),
    (lambda x, lam: ff.sum(x["i"], "i") + ff.logdet(x) * ff.logdet(lam),
     dict(x="vector", lam="posdef"), r"argument 'x' \(vector\) is used whole"),
    (lambda x, tau: ff.sum(x["i"], "i") + ff.logdet(tau), dict(x="vector", tau="positive"),
     r"ff.logdet\(tau\) needs a positive-definite matrix, but 'tau' has the domain 'positive'"),
    (lambda x, lam: ff.sum(x["_r"], "_r") + ff.logdet(lam), dict(x="vector", lam="posdef"),
     r"the index name '_r' starts with '_'"),
    (lambda x, lam: ff.sum(x[0], "i") + ff.logdet(lam), dict(x="vector", lam="posdef"),
     r"bad_indices: the formula applies an operation .*inner indices are written as names"),
])
def test_misused_vector_and_matrix_indices_are_named(formula, domains, message):
    def bad_indices(*args):
        return formula(*args)
    bad_indices.__signature__ = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in domains])
    with pytest.raises(ff.ModelError, match=message):
        ff.factor(**domains)(bad_indices)


def test_an_index_used_with_two_sizes_is_named():
    with ff.Model():
        lam = ff.Wishart("lam", 4.0, rate=np.eye(3))
        with pytest.raises(ff.ModelError, match=r"mvn_formula\('y'\): index 'i' has 2 "
                                                r"components in 'mu' but 3 in 'lam'"):
            mvn_formula("y", mu=np.zeros(2), lam=lam, observed=np.zeros(2))


def test_a_scalar_variable_for_a_vector_argument_is_named():
    with ff.Model():
        lam = ff.Wishart("lam", 4.0, rate=np.eye(3))
        g = ff.Gaussian("g", 0.0, variance=1.0)
        with pytest.raises(ff.ModelError, match=r"mvn_formula\('y'\): argument 'mu' is "
                                                r"declared 'vector' .* variable 'g' .* real"):
            mvn_formula("y", mu=g, lam=lam, observed=np.zeros(3))
        with pytest.raises(ff.ModelError, match=r"mvn_formula\('y'\): argument 'lam' is "
                                                r"declared 'posdef' .* shape \(3,\)"):
            mvn_formula("y", mu=np.zeros(3), lam=np.ones(3), observed=np.zeros(3))


@ff.factor(lam="posdef", rate="posdef")
def wishart_dof_4_formula(lam, rate):
    """W(Λ; ν = 4, R) in D = 2 without its normalizer: ½(ν − D − 1) log|Λ| − ½ tr(R Λ)."""
    return 0.5 * (4.0 - 2 - 1) * ff.logdet(lam) - 0.5 * ff.sum(rate["i", "j"] * lam["i", "j"],
                                                               "i", "j")


def test_a_matrix_variable_defined_by_a_formula_equals_the_builtin_wishart():
    """The formula's variable takes D from the rate sharing its indices; as a prior of a
    VectorGaussian's precision its posterior is the built-in ``ff.Wishart``'s,
    W(4 + N, R + Σ y yᵀ) in closed form."""
    y = np.random.default_rng(3).normal(size=(5, 2))
    rate = np.array([[2.0, 0.5], [0.5, 1.0]])
    with ff.Model() as model:
        lam = wishart_dof_4_formula("lam", rate=rate)
        with ff.Plate(ff.Range("n", len(y))):
            ff.VectorGaussian("y", np.zeros(2), precision=lam, observed=y)
    assert model.variables["lam"].size == 2
    posterior = model.infer("vmp")["lam"]
    assert_close(posterior.dof, 4.0 + len(y), rtol=1e-12)
    assert_close(posterior.rate, rate + y.T @ y, rtol=1e-12)


def test_the_formula_evaluates_to_the_multivariate_normal_log_density():
    """The factor's numeric log density on known vectors (a plate of 4, D = 3) is SciPy's
    multivariate normal log density plus the (D/2) log 2π the formula leaves out."""
    from scipy import stats

    rng = np.random.default_rng(4)
    x, mu, a = rng.normal(size=(4, 3)), rng.normal(size=3), rng.normal(size=(3, 3))
    lam = a @ a.T + np.eye(3)
    ours = FACTORS["mvn_formula"].log_density(x=x, mu=mu, lam=lam)
    assert_close(ours - 1.5 * LOG_2PI,
                 stats.multivariate_normal(mu, np.linalg.inv(lam)).logpdf(x), rtol=1e-12)


def test_a_written_update_for_a_factor_with_vector_arguments_is_refused_by_name():
    with pytest.raises(ff.ModelError, match=r"@ff.naturals\(mvn_formula, 'lam'\): mvn_formula "
                                            r"has the vector or matrix arguments"):
        @ff.naturals(mvn_formula, "lam", "Wishart")
        def lam_update(x, mu):
            return 0.5, -0.5 * ff.E(x)


@pytest.mark.parametrize("dim", [1, 3])
def test_fused_messages_over_a_plate_are_the_product_of_the_per_element_ones(dim):
    """With ``reduce`` (a target outside the plate its use adds: μ and Λ over a (2, 3)
    plate of x, summed over one or both axes) each derived message is the product of the
    per-element messages (their naturals summed), and the built-in's fused message."""
    rng = np.random.default_rng(10 + dim)
    args = {"x": _random_vector_gaussian(rng, (2, 3), dim),
            "mu": _random_vector_gaussian(rng, (), dim), "lam": _random_wishart(rng, (), dim)}
    names = {"x": "sample", "mu": "mean", "lam": "precision"}
    user, builtin = FACTORS["mvn_formula"], FACTORS["VectorGaussian"]
    for target in ("mu", "lam"):
        op = user.operators[("vmp", target)]
        assert op.reduces
        each = op.fn(**args)
        for axes in ((0,), (0, 1)):
            fused = op.fn(**args, reduce=((2, 3), axes))
            summed = type(each).from_natural(*(e.sum(axis=axes) for e in each.eta))
            _same_message(fused, summed)
            theirs = builtin.operators[("vmp", names[target])].fn(
                **{names[k]: v for k, v in args.items() if k != target},
                reduce=((2, 3), axes))
            _same_message(fused, theirs)
