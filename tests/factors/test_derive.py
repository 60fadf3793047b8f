"""Conjugate messages derived from log-density formulas, against closed-form updates and
against the hand-written built-in VMP operators."""

from __future__ import annotations

import re

import numpy as np
import pytest
from scipy import special

from factorflow.distributions import Bernoulli, Beta, Dirichlet, Discrete, Gamma, Gaussian
from factorflow.distributions import moments as mom
from factorflow.errors import ModelError
from factorflow.factors.derive import derive_messages, derive_naturals, sufficient_statistics
from factorflow.factors.registry import FACTORS
from factorflow.rewrite.evaluate import evaluate
from factorflow.rewrite.expectations import moment_atoms
from factorflow.rewrite.terms import (
    ELOG,
    ELOG1M,
    EXPECT,
    VARIANCE,
    E,
    Elog,
    Term,
    V,
    at,
    data,
    exp,
    index_sum,
    lgamma,
    log,
    sym,
)
from tests.conftest import assert_close

rng = np.random.default_rng(20)
LOG_2PI = np.log(2 * np.pi)
x, mu, tau, p, lam, theta, z = map(sym, ("x", "mu", "tau", "p", "lam", "theta", "z"))


def gaussian_log_density(sample: Term, mean: Term, precision: Term) -> Term:
    return -0.5 * precision * (sample - mean) ** 2 + 0.5 * log(precision) - 0.5 * log(2 * np.pi)


def total(values, n: int) -> np.ndarray:
    """The sum of a per-datum natural parameter over a plate of ``n`` data."""
    return np.broadcast_to(values, (n,)).sum()


def test_gaussian_mean_naturals_give_the_closed_form_posterior():
    d = derive_naturals(gaussian_log_density(data("x"), mu, tau), mu, "Gaussian")
    assert [str(t) for t in d.naturals] == ["data(x)*E(tau)", "-0.5*E(tau)"]
    xs, a, b, m0, v0 = rng.normal(size=9), 3.0, 2.0, 0.7, 4.0
    env = {"x": xs, E(tau): a / b}
    eta1 = m0 / v0 + total(evaluate(d.naturals[0], env), 9)
    eta2 = -0.5 / v0 + total(evaluate(d.naturals[1], env), 9)
    precision = 1 / v0 + 9 * a / b
    assert_close(-2 * eta2, precision, rtol=1e-12)
    assert_close(-eta1 / (2 * eta2), (m0 / v0 + a / b * xs.sum()) / precision, rtol=1e-12)


def test_gaussian_precision_naturals_give_the_closed_form_posterior():
    d = derive_naturals(gaussian_log_density(data("x"), mu, tau), tau, "Gamma")
    assert str(d.naturals[0]) == "0.5"
    assert str(d.naturals[1]) == "data(x)*E(mu) - 0.5*E(mu)**2 - 0.5*V(mu) - 0.5*data(x)**2"
    xs, m, v, a0, b0 = rng.normal(size=7), 0.3, 0.2, 2.0, 1.5
    env = {"x": xs, E(mu): m, V(mu): v}
    shape = a0 + total(evaluate(d.naturals[0], env), 7)
    rate = b0 - total(evaluate(d.naturals[1], env), 7)
    assert_close(shape, a0 + 3.5, rtol=1e-12)
    assert_close(rate, b0 + 0.5 * ((xs - m) ** 2 + v).sum(), rtol=1e-12)


def test_gaussian_natural_parameters_for_a_latent_sample():
    d = derive_naturals(gaussian_log_density(x, mu, tau), x, "Gaussian")
    assert [str(t) for t in d.naturals] == ["E(mu)*E(tau)", "-0.5*E(tau)"]
    assert str(d.statistics[1]) == "x**2"


def test_expected_log_factor_is_the_elbo_term():
    d = derive_naturals(gaussian_log_density(x, mu, tau), tau, "Gamma")
    mx, vx, mm, vm, a, b = 0.4, 0.3, -0.2, 0.5, 2.5, 1.3
    env = {E(x): mx, V(x): vx, E(mu): mm, V(mu): vm, E(tau): a / b,
           Elog(tau): special.digamma(a) - np.log(b)}
    closed = (0.5 * (special.digamma(a) - np.log(b)) - 0.5 * LOG_2PI
              - 0.5 * a / b * (vx + vm + (mx - mm) ** 2))
    assert_close(evaluate(d.expected_log_factor, env), closed, rtol=1e-12)
    reassembled = (evaluate(d.constant, env) + evaluate(d.naturals[0], env) * env[Elog(tau)]
                   + evaluate(d.naturals[1], env) * env[E(tau)])
    assert_close(reassembled, closed, rtol=1e-12)


def test_beta_bernoulli_and_beta_binomial():
    ys, a, b = rng.integers(0, 2, size=11).astype(float), 1.5, 2.5
    d = derive_naturals(data("y") * log(p) + (1 - data("y")) * log(1 - p), p, "Beta")
    assert [str(t) for t in d.naturals] == ["data(y)", "1 - data(y)"]
    alpha = a + total(evaluate(d.naturals[0], {"y": ys}), 11)
    beta = b + total(evaluate(d.naturals[1], {"y": ys}), 11)
    assert_close([alpha, beta], [a + ys.sum(), b + 11 - ys.sum()], rtol=1e-12)
    n, k = data("N"), data("k")
    binomial = (lgamma(n + 1) - lgamma(k + 1) - lgamma(n - k + 1)
                + k * log(p) + (n - k) * log(1 - p))
    d = derive_naturals(binomial, p, "Beta")
    env = {"N": 12.0, "k": 5.0}
    assert_close([evaluate(t, env) for t in d.naturals], [5.0, 7.0], rtol=1e-12)
    assert_close(evaluate(d.constant, env), np.log(special.comb(12, 5)), rtol=1e-12)


def test_gamma_poisson():
    counts, a, b = rng.poisson(3.0, size=8).astype(float), 2.0, 0.5
    d = derive_naturals(data("n") * log(lam) - lam - lgamma(data("n") + 1), lam, "Gamma")
    assert [str(t) for t in d.naturals] == ["data(n)", "-1"]
    shape = a + total(evaluate(d.naturals[0], {"n": counts}), 8)
    rate = b - total(evaluate(d.naturals[1], {"n": counts}), 8)
    assert_close([shape, rate], [a + counts.sum(), b + 8], rtol=1e-12)


def test_dirichlet_discrete_both_ways():
    f = index_sum(at(z, "k") * log(at(theta, "k")), "k")
    to_theta = derive_naturals(f, theta, "Dirichlet")
    to_z = derive_naturals(f, z, "Discrete")
    assert str(to_theta.naturals[0]) == "at(E(z), k)"
    assert str(to_z.naturals[0]) == "at(Elog(theta), k)"
    alpha, r = rng.uniform(0.5, 3, size=4), rng.dirichlet(np.ones(4))
    assert_close(alpha + evaluate(to_theta.naturals[0], {E(z): r}), alpha + r, rtol=1e-12)
    elog = special.digamma(alpha) - special.digamma(alpha.sum())
    logits = evaluate(to_z.naturals[0], {Elog(theta): elog})
    q = np.exp(logits - logits.max())
    assert_close(q / q.sum(), np.exp(elog) / np.exp(elog).sum(), rtol=1e-12)
    renamed = derive_naturals(index_sum(at(z, "j") * log(at(theta, "j")), "j"), theta, "Dirichlet")
    assert renamed.naturals[0] is to_theta.naturals[0]


def test_user_factor_with_scaled_precision():
    c = 2.5
    f = -0.5 * c * tau * (data("x") - mu) ** 2 + 0.5 * log(c * tau) - 0.5 * log(2 * np.pi)
    d = derive_naturals(f, tau, "Gamma")
    env = {"x": 1.2, E(mu): 0.4, V(mu): 0.3}
    assert_close([evaluate(t, env) for t in d.naturals],
                 [0.5, -0.5 * c * ((1.2 - 0.4) ** 2 + 0.3)], rtol=1e-12)
    to_mu = derive_naturals(f, mu, "Gaussian")
    assert [str(t) for t in to_mu.naturals] == ["2.5*data(x)*E(tau)", "-1.25*E(tau)"]


@pytest.mark.parametrize(("formula", "target", "family", "blocker"), [
    (x * exp(x) + x, x, "Gaussian", "the term x*exp(x)"),
    (log(x + mu), x, "Gaussian", "the term log(mu + x)"),
    (x**3 * tau, x, "Gaussian", "the term x**3"),
    (gaussian_log_density(x, mu, tau), mu, "Gamma", "the term mu**2"),
])
def test_what_blocks_conjugacy_is_named(formula, target, family, blocker):
    with pytest.raises(ModelError, match=re.escape(blocker)):
        derive_naturals(formula, target, family)


def test_unclosable_coefficients_and_unrelated_targets_are_errors():
    with pytest.raises(ModelError, match=r"E\[exp\(tau\)\]"):
        derive_naturals(exp(tau) * mu, mu, "Gaussian")
    with pytest.raises(ModelError, match="does not depend on lam"):
        derive_naturals(gaussian_log_density(x, mu, tau), lam, "Gamma")
    with pytest.raises(ModelError, match="no conjugate family"):
        sufficient_statistics("Cauchy", x)


def _moments_env(terms, posteriors) -> dict:
    functions = {EXPECT: mom.E, VARIANCE: mom.V, ELOG: mom.Elog, ELOG1M: mom.Elog1m}
    env: dict = {}
    for term in terms:
        for m in moment_atoms(term):
            q = posteriors[m.args[0].payload[0]]
            one_hot = m.op == EXPECT and isinstance(q, Discrete)   # E[one-hot(z)]
            env[m] = mom.Eonehot(q, q.probs.shape[-1]) if one_hot else functions[m.op](q)
    return env


def _check_against_builtin(factor, target, kwargs, derivation, posteriors, scale=(1.0, 1.0)):
    message = FACTORS[factor].get_operator("vmp", target).fn(**kwargs)
    env = {**_moments_env(derivation.naturals, posteriors),
           **{k: v for k, v in posteriors.items() if not hasattr(v, "eta")}}
    for eta, derived, s in zip(message.eta, derivation.naturals, scale, strict=False):
        assert_close(np.broadcast_to(s * evaluate(derived, env), np.shape(eta)), eta,
                     rtol=1e-10, atol=1e-12)


def test_rederived_gaussian_operators_match_the_builtin_ones():
    q_x, q_mu, q_tau = Gaussian(0.3, 0.4), Gaussian(-0.5, 2.0), Gamma(3.0, 2.0)
    post = {"x": q_x, "mu": q_mu, "tau": q_tau}
    f = gaussian_log_density(x, mu, tau)
    d = derive_messages(f, {x: "Gaussian", mu: "Gaussian", tau: "Gamma"})
    _check_against_builtin("Gaussian", "sample", {"mean": q_mu, "precision": q_tau}, d[x], post,
                           scale=(1.0, -2.0))
    _check_against_builtin("Gaussian", "mean", {"sample": q_x, "precision": q_tau}, d[mu], post,
                           scale=(1.0, -2.0))
    _check_against_builtin("Gaussian", "precision", {"sample": q_x, "mean": q_mu}, d[tau], post)


def test_rederived_discrete_family_operators_match_the_builtin_ones():
    q_p, q_y = Beta(2.0, 3.0), Bernoulli(0.3)
    bern = sym("y") * log(p) + (1 - sym("y")) * log(1 - p)
    d = derive_messages(bern, {p: "Beta", sym("y"): "Bernoulli"})
    post = {"p": q_p, "y": q_y}
    _check_against_builtin("Bernoulli", "p", {"sample": q_y}, d[p], post)
    _check_against_builtin("Bernoulli", "sample", {"p": q_p}, d[sym("y")], post)
    q_theta = Dirichlet(np.array([1.5, 2.0, 0.7]))
    f = index_sum(at(z, "k") * log(at(theta, "k")), "k")
    to_z = derive_naturals(f, z, "Discrete")
    _check_against_builtin("Discrete", "sample", {"probs": q_theta}, to_z, {"theta": q_theta})
    q_z = Discrete(np.array([0.2, 0.5, 0.3]))
    to_theta = derive_naturals(f, theta, "Dirichlet")
    _check_against_builtin("Discrete", "probs", {"sample": q_z, "probs": q_theta}, to_theta,
                           {"z": q_z, "theta": q_theta})


def test_rederived_count_operators_match_the_builtin_ones():
    counts, trials = np.array([0.0, 3.0, 7.0]), np.array([4.0, 5.0, 9.0])
    n, k = data("n"), data("k")
    poisson = derive_naturals(n * log(lam) - lam - lgamma(n + 1), lam, "Gamma")
    _check_against_builtin("Poisson", "rate", {"sample": counts}, poisson, {"n": counts})
    binomial = derive_naturals(lgamma(n + 1) - lgamma(k + 1) - lgamma(n - k + 1)
                               + k * log(p) + (n - k) * log(1 - p), p, "Beta")
    _check_against_builtin("Binomial", "p", {"sample": counts, "trials": trials}, binomial,
                           {"n": trials, "k": counts})


def test_rederived_gamma_with_random_rate_matches_the_builtin_operators_and_elbo():
    r, shape = sym("r"), data("a")
    f = shape * log(r) - lgamma(shape) + (shape - 1) * log(x) - r * x
    d = derive_messages(f, {x: "Gamma", r: "Gamma"})
    q_x, q_r, a = Gamma(2.5, 1.5), Gamma(np.array([3.0, 0.7]), np.array([2.0, 4.0])), 1.7
    post = {"x": q_x, "r": q_r, "a": a}
    _check_against_builtin("Gamma", "sample", {"shape": a, "rate": q_r}, d[x], post)
    _check_against_builtin("Gamma", "rate", {"sample": q_x, "shape": a}, d[r], post)
    env = {**_moments_env([d[x].expected_log_factor], post), "a": a}
    elbo = FACTORS["Gamma"].evidence["vmp"](sample=q_x, shape=a, rate=q_r)
    assert_close(evaluate(d[x].expected_log_factor, env), elbo, rtol=1e-10, atol=1e-12)
