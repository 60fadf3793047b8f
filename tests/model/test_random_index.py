"""Parameters indexed by a random discrete variable (issue 11 item 3, issue 15 item 7):
``ff.Constant(p)[z]`` under ``ff.Switch(z)`` or ``ff.Case(z, k)``, ``array[z]`` under
``ff.Case``, Dirichlet rows ``ff.Discrete(A[z])`` and LDA's ``ff.Discrete(theta[doc])``,
each against exact enumeration written here."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import gammaln, logsumexp

import factorflow as ff
from tests.conftest import assert_close


def dirichlet_multinomial(alpha: np.ndarray, counts: np.ndarray) -> float:
    """log ∫ Π_v p_v^{c_v} Dir(p; α) dp (a sequence of draws, not a multiset)."""
    return float(gammaln(alpha.sum()) - gammaln(alpha.sum() + counts.sum())
                 + np.sum(gammaln(alpha + counts) - gammaln(alpha)))


@st.composite
def table_cases(draw):
    k = draw(st.integers(1, 4))
    n = draw(st.integers(0, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    w = rng.dirichlet(np.ones(k))
    kind = draw(st.sampled_from(["bernoulli", "discrete"]))
    if kind == "bernoulli":
        table = rng.uniform(0.05, 0.95, k)
        obs = rng.random(n) < 0.5
        lik = np.where(obs[:, None], table, 1 - table)  # (n, k)
    else:
        v = draw(st.integers(1, 3))
        table = rng.dirichlet(np.ones(v), size=k)
        obs = rng.integers(0, v, n)
        lik = table[:, obs].T
    gate = draw(st.sampled_from(["switch", "case"]))
    return w, table, obs, lik, kind, gate


@settings(max_examples=10, deadline=None, derandomize=True)
@given(table_cases())
def test_constant_indexed_by_a_random_variable_is_exact(case):
    """z ~ Discrete(w); y[n] | z ~ Bernoulli(p[z]) or Discrete(B[z]), written with
    ff.Constant(...)[z] inside ff.Switch(z) or one ff.Case(z, k) per value: EP and VMP
    give P(z | y) and log p(y) exactly (z is the only latent variable)."""
    w, table, obs, lik, kind, gate = case
    factory = ff.Bernoulli if kind == "bernoulli" else ff.Discrete
    with ff.Model() as model:
        z = ff.Discrete("z", w)
        n = ff.Range("n", len(obs))
        if gate == "switch":
            with ff.Switch(z), ff.Plate(n):
                factory("y", ff.Constant(table)[z], observed=obs)
        else:
            for k in range(len(w)):
                with ff.Case(z, k), ff.Plate(n):
                    factory("y", ff.Constant(table)[z], observed=obs)
    joint = w * np.prod(lik, axis=0)
    for algorithm in ("ep", "vmp"):
        result = model.infer(algorithm, progress=False)
        assert_close(result["z"].probs, joint / joint.sum(), 1e-10, 1e-12)
        assert_close(result.log_evidence, np.log(joint.sum()), 1e-10, 1e-12)


def test_constant_indexed_by_an_observed_variable_gathers():
    """An observed condition: each element's case is its value, the row is gathered."""
    p = np.array([0.2, 0.6, 0.9])
    zs, ys = np.array([0, 2, 2, 1]), np.array([True, False, True, True])
    with ff.Model() as model:
        with ff.Plate(ff.Range("n", 4)):
            z = ff.Discrete("z", np.ones(3) / 3, observed=zs)
            with ff.Switch(z):
                ff.Bernoulli("y", ff.Constant(p)[z], observed=ys)
    expected = np.sum(np.log(np.where(ys, p[zs], 1 - p[zs]))) + 4 * np.log(1 / 3)
    for algorithm in ("ep", "vmp"):
        assert_close(model.infer(algorithm, progress=False).log_evidence, expected, 1e-12)


@st.composite
def case_cases(draw):
    k = draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    return (rng.dirichlet(np.ones(k)), rng.normal(0, 2, k), rng.gamma(2.0, 1.0, k) + 0.1,
            float(rng.normal(0, 2)))


@settings(max_examples=6, deadline=None, derandomize=True)
@given(case_cases())
def test_array_indexed_inside_case_is_its_element(case):
    """``means[z]`` under ff.Case(z, k) is means[k] (issue 15 item 7): z ~ Discrete(w),
    means[k] ~ N(μ_k, v_k), y | z ~ N(means[z], 1).  EP is exact on this tree (P(z | y),
    log p(y)); VMP's bound is below log p(y)."""
    w, mu, var, y = case
    with ff.Model() as model:
        z = ff.Discrete("z", w)
        with ff.Plate(ff.Range("k", len(w))):
            means = ff.Gaussian("means", mu, variance=var)
        for k in range(len(w)):
            with ff.Case(z, k):
                ff.Gaussian("y", means[z], precision=1.0, observed=y)
    lik = np.exp(-0.5 * (y - mu) ** 2 / (var + 1)) / np.sqrt(2 * np.pi * (var + 1))
    joint = w * lik
    result = model.infer("ep", progress=False)
    assert_close(result["z"].probs, joint / joint.sum(), 1e-10, 1e-12)
    assert_close(result.log_evidence, np.log(joint.sum()), 1e-10)
    bound = model.infer("vmp", progress=False)
    assert bound.log_evidence <= np.log(joint.sum()) + 1e-10
    assert np.all(np.diff(bound.trace) > -1e-10)


@st.composite
def row_cases(draw):
    k = draw(st.integers(1, 3))
    v = draw(st.integers(2, 3))  # (a Dirichlet over one category is a point mass)
    n = draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    return (rng.dirichlet(np.ones(k)), rng.gamma(2.0, 1.0, (k, v)) + 0.2,
            rng.integers(0, v, n))


@settings(max_examples=8, deadline=None, derandomize=True)
@given(row_cases())
def test_dirichlet_rows_indexed_by_a_switch(case):
    """rows[k] ~ Dirichlet(α_k); z[n] ~ Discrete(w); y[n] | z ~ Discrete(rows[z[n]]) (a
    mixture of categoricals).  With one observation the graph is a tree and EP gives
    P(z | y) and log p(y) exactly; VMP's bound is below log p(y) (enumerated over z) and
    never falls."""
    w, alpha, obs = case
    k = len(w)
    with ff.Model() as model:
        with ff.Plate(ff.Range("k", k)):
            rows = ff.Dirichlet("rows", alpha)
        with ff.Plate(ff.Range("n", len(obs))):
            z = ff.Discrete("z", w)
            with ff.Switch(z):
                ff.Discrete("y", rows[z], observed=obs)
    terms = []
    for zs in itertools.product(range(k), repeat=len(obs)):
        zs = np.array(zs)
        terms.append(np.sum(np.log(w[zs])) + sum(
            dirichlet_multinomial(alpha[j], np.bincount(obs[zs == j],
                                                        minlength=alpha.shape[1]))
            for j in range(k)))
    log_z = logsumexp(terms)
    if len(obs) == 1:
        result = model.infer("ep", progress=False)
        assert_close(result["z"].probs[0], np.exp(np.array(terms) - log_z), 1e-10, 1e-12)
        assert_close(result.log_evidence, log_z, 1e-10)
    init = ff.distributions.Discrete(np.random.default_rng(0).dirichlet(np.ones(k),
                                                                        size=len(obs)))
    bound = model.infer("vmp", iterations=100, init={"z": init}, progress=False)
    assert bound.log_evidence <= log_z + 1e-10
    assert np.all(np.diff(bound.trace) > -1e-10)


def test_lda_documents_index_their_topic_proportions():
    """``ff.Discrete(theta[doc])`` with doc observed per token: conjugate, so EP and VMP
    give Dirichlet(α + counts per document) and log p(words) exactly."""
    doc = np.array([0, 0, 1, 2, 2, 2])
    words = np.array([0, 1, 1, 2, 0, 2])
    alpha = np.array([[0.5, 1.0, 2.0], [1.0, 1.0, 1.0], [3.0, 0.2, 0.7]])
    with ff.Model() as model:
        with ff.Plate(ff.Range("d", 3)):
            theta = ff.Dirichlet("theta", alpha)
        with ff.Plate(ff.Range("n", len(doc))):
            ff.Discrete("w", theta[doc], observed=words)
    counts = np.stack([np.bincount(words[doc == d], minlength=3) for d in range(3)])
    log_z = sum(dirichlet_multinomial(alpha[d], counts[d]) for d in range(3))
    for algorithm in ("ep", "vmp"):
        result = model.infer(algorithm, progress=False)
        assert_close(result["theta"].alpha, alpha + counts, 1e-12)
        assert_close(result.log_evidence, log_z, 1e-10)


def test_lda_with_latent_topics_vmp_bound():
    """LDA: z[n] ~ Discrete(theta[doc[n]]), w[n] | z ~ Discrete(phi[z]): VMP's bound never
    falls and stays below log p(words), enumerated over the topic assignments."""
    doc, words = np.array([0, 0, 1, 1]), np.array([0, 2, 1, 2])
    a_theta, a_phi = np.full((2, 2), 0.5), np.full((2, 3), 0.8)
    with ff.Model() as model:
        with ff.Plate(ff.Range("d", 2)):
            theta = ff.Dirichlet("theta", a_theta)
        with ff.Plate(ff.Range("k", 2)):
            phi = ff.Dirichlet("phi", a_phi)
        with ff.Plate(ff.Range("n", len(doc))):
            z = ff.Discrete("z", theta[doc])
            with ff.Switch(z):
                ff.Discrete("w", phi[z], observed=words)
    terms = []
    for topics in itertools.product(range(2), repeat=len(doc)):
        topics = np.array(topics)
        terms.append(sum(dirichlet_multinomial(a_theta[d], np.bincount(topics[doc == d],
                                                                       minlength=2))
                         for d in range(2))
                     + sum(dirichlet_multinomial(a_phi[j], np.bincount(words[topics == j],
                                                                       minlength=3))
                           for j in range(2)))
    log_z = logsumexp(terms)
    init = ff.distributions.Discrete(np.random.default_rng(0).dirichlet(np.ones(2), size=4))
    result = model.infer("vmp", iterations=200, init={"z": init}, progress=False)
    assert np.all(np.diff(result.trace) > -1e-10)
    assert result.log_evidence <= log_z + 1e-10


def test_constant_index_errors():
    with ff.Model():
        z = ff.Discrete("z", [0.5, 0.5])
        with pytest.raises(ff.ModelError, match=r"write it inside `with ff.Switch\(z\):`"):
            ff.Bernoulli("y", ff.Constant([0.1, 0.2])[z])
        with ff.Switch(z), pytest.raises(ff.ModelError, match="2 cases but the constant "
                                                              "has 3 rows"):
            ff.Bernoulli("y", ff.Constant([0.1, 0.2, 0.3])[z])
        with ff.Switch(z), pytest.raises(ff.DataError):
            ff.Bernoulli("y", ff.Constant([0.1, 1.2])[z])
    with pytest.raises(ff.ModelError, match="needs an array"):
        ff.Constant(0.5)


def test_predictive_draws_through_a_constant_and_gibbs_refuses_it():
    """Posterior predictive of y | z ~ Bernoulli(p[z]): P(y) = Σ_k q(z = k) p_k (4,000
    draws, within 4 standard errors); Gibbs sampling refuses ff.Constant by name."""
    p = np.array([0.1, 0.7, 0.4])
    with ff.Model() as model:
        z = ff.Discrete("z", [0.2, 0.3, 0.5])
        with ff.Switch(z), ff.Plate(ff.Range("n", 2)):
            ff.Bernoulli("y", ff.Constant(p)[z], observed=[True, False])
    result = model.infer("ep", progress=False)
    draws = model.predictive(result, n=4_000, rng=0)["y"]
    expected = float(result["z"].probs @ p)
    assert abs(draws.mean() - expected) < 4 * np.sqrt(expected * (1 - expected) / 8_000)
    with pytest.raises(ff.UnsupportedFactorError, match="ff.Constant"):
        model.infer("gibbs", draws=5)


def test_index_by_a_boolean_inside_if_and_ifnot():
    """``array[b]`` inside ff.If(b) is array[1], inside ff.IfNot(b) array[0]:
    P(b | y) = 0.3·0.9 / (0.3·0.9 + 0.7·0.2), exactly, under EP and VMP."""
    with ff.Model() as model:
        b = ff.Bernoulli("b", 0.3)
        with ff.Plate(ff.Range("k", 2)):
            p = ff.Beta("p", np.array([2.0, 9.0]), np.array([8.0, 1.0]))
        for gate in (ff.If, ff.IfNot):
            with gate(b):
                ff.Bernoulli("y", p[b], observed=True)
    evidence = 0.3 * 0.9 + 0.7 * 0.2
    for algorithm in ("ep", "vmp"):
        result = model.infer(algorithm, progress=False)
        if algorithm == "ep":  # a tree: exact
            assert_close(result["b"].p, 0.3 * 0.9 / evidence, 1e-10)
            assert_close(result.log_evidence, np.log(evidence), 1e-10)
        else:
            assert result.log_evidence <= np.log(evidence) + 1e-10
