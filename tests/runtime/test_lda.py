"""LDA under VMP (issue 11, gallery): the generated sweep against a mean-field LDA written
out here in NumPy, the fused Discrete messages (observed words scattered into topic-word
counts) against the per-token messages, and the perplexity against scikit-learn's batch
``LatentDirichletAllocation`` with the same priors, start and iterations."""

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

EXAMPLE = runpy.run_path(str(Path(__file__).parents[2] / "examples" / "lda.py"))


def lda_by_hand(doc, words, n_docs, n_words, alpha, eta, lam, sweeps):
    """Token-level mean-field LDA in factorflow's order: q(θ) = Dir(α) and q(φ) = Dir(lam)
    to start, q(z) from them; then per sweep q(θ), q(z), q(φ).  Returns the pseudo-counts,
    the responsibilities and the ELBO of the final posteriors (written out term by term)."""
    gamma = np.full((n_docs, lam.shape[0]), alpha)

    def elog(a):
        return special.digamma(a) - special.digamma(a.sum(axis=1, keepdims=True))

    def responsibilities():
        logits = elog(gamma)[doc] + elog(lam)[:, words].T
        return np.exp(logits - special.logsumexp(logits, axis=1, keepdims=True))

    def counts(index, size, r):
        out = np.zeros((size, r.shape[1]))
        np.add.at(out, index, r)
        return out

    r = responsibilities()
    for _ in range(sweeps):
        gamma = alpha + counts(doc, n_docs, r)
        r = responsibilities()
        lam = eta + counts(words, n_words, r).T

    def dirichlet_terms(prior, q):  # E log p(θ) − E log q(θ), summed over the rows
        e = elog(q)
        return np.sum(special.gammaln(prior.sum(1)) - special.gammaln(prior).sum(1)
                      - special.gammaln(q.sum(1)) + special.gammaln(q).sum(1)
                      + np.sum((prior - q) * e, axis=1))

    token_terms = np.sum(r * (elog(gamma)[doc] + elog(lam)[:, words].T)) - np.sum(
        special.xlogy(r, r))
    elbo = (token_terms + dirichlet_terms(np.full_like(gamma, alpha), gamma)
            + dirichlet_terms(np.full_like(lam, eta), lam))
    return gamma, lam, r, float(elbo)


@settings(max_examples=8, deadline=None, derandomize=True)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 4), st.integers(0, 12),
       st.integers(1, 4), st.integers(0, 2**31))
def test_lda_sweeps_equal_mean_field_written_out(n_docs, n_topics, n_words, n_tokens,
                                                  sweeps, seed):
    """Posteriors and bound after a few sweeps equal the hand-written updates (1e-10):
    small corpora, including empty documents and unused words."""
    rng = np.random.default_rng(seed)
    doc, words = rng.integers(0, n_docs, n_tokens), rng.integers(0, n_words, n_tokens)
    alpha, eta = rng.uniform(0.1, 2.0, 2)
    lam = rng.gamma(100.0, 0.01, (n_topics, n_words))
    model = EXAMPLE["lda"](doc, words, n_docs, n_topics, n_words, alpha, eta)
    result = model.compile("vmp", init=["phi"]).run(
        iterations=sweeps, tolerance=None, progress=False,
        init={"phi": ff.distributions.Dirichlet(lam)})
    gamma, lam, r, elbo = lda_by_hand(doc, words, n_docs, n_words, alpha, eta, lam, sweeps)
    assert_close(result["theta"].alpha, gamma, 1e-10, 1e-12)
    assert_close(result["phi"].alpha, lam, 1e-10, 1e-12)
    assert_close(result["z"].probs, r, 1e-10, 1e-12)
    assert_close(result.log_evidence, elbo, 1e-10, 1e-10)


def test_the_bound_with_optimal_topics_is_at_least_the_elbo():
    """``lda_bound`` (q(z) optimal) is ≥ the ELBO at any q(z), equal at q(z)'s optimum."""
    rng = np.random.default_rng(3)
    doc, words = rng.integers(0, 3, 30), rng.integers(0, 6, 30)
    lam0 = rng.gamma(100.0, 0.01, (2, 6))
    gamma, lam, r, elbo = lda_by_hand(doc, words, 3, 6, 0.5, 0.5, lam0, 5)
    assert EXAMPLE["lda_bound"](doc, words, gamma, lam, 0.5, 0.5) >= elbo
    _, _, _, elbo_at_opt = lda_by_hand(doc, words, 3, 6, 0.5, 0.5, lam, 0)
    assert_close(EXAMPLE["lda_bound"](doc, words, np.full((3, 2), 0.5), lam, 0.5, 0.5),
                 elbo_at_opt, 1e-10)


@settings(max_examples=10, deadline=None, derandomize=True)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 4), st.integers(1, 8),
       st.integers(0, 2**31))
def test_plugin_perplexity_is_the_mixture_likelihood_enumerated(n_docs, n_topics, n_words,
                                                                n_tokens, seed):
    """``plugin_perplexity`` equals exp(−Σ_n log Σ_k θ̄[d_n, k] φ̄[k, w_n] / N) summed term
    by term over tokens and topics, with θ̄ and φ̄ the Dirichlet means (1e-12)."""
    rng = np.random.default_rng(seed)
    doc, words = rng.integers(0, n_docs, n_tokens), rng.integers(0, n_words, n_tokens)
    gamma = rng.uniform(0.1, 3.0, (n_docs, n_topics))
    lam = rng.uniform(0.1, 3.0, (n_topics, n_words))
    log_p = 0.0
    for d, w in zip(doc, words, strict=True):
        log_p += np.log(sum(gamma[d, k] / gamma[d].sum() * lam[k, w] / lam[k].sum()
                            for k in range(n_topics)))
    assert_close(EXAMPLE["plugin_perplexity"](doc, words, gamma, lam),
                 np.exp(-log_p / n_tokens), 1e-12)


def test_discrete_fused_counts_equal_the_product_of_token_messages():
    """Discrete's VMP message to its probabilities, fused over a plate with weights (a
    Switch's responsibilities), equals the per-element Dirichlet messages raised to the
    weights and multiplied: observed words (a scatter-add) and uncertain ones (einsum)."""
    from factorflow.factors import FACTORS
    from factorflow.factors.common import Deferred
    from factorflow.runtime.kernels import prod_over

    rng = np.random.default_rng(11)
    N, K, V = 9, 3, 5
    words = rng.integers(0, V, (N, 1))
    resp = rng.dirichlet(np.ones(K), size=N)
    q_phi = ff.distributions.Dirichlet(rng.uniform(0.5, 2.0, (K, V)))
    op = FACTORS["Discrete"].operators[("vmp", "probs")].fn
    uncertain = ff.distributions.Discrete(rng.dirichlet(np.ones(V), size=(N, 1)))
    enter = FACTORS["Gate.EnterOne"].operators[("vmp", "value")].fn
    cases = ff.distributions.Bernoulli.from_natural(np.log(resp))
    for sample in (words, uncertain):
        args = {"sample": sample, "probs": q_phi.broadcast_to((N, K))}
        per_token = op(**args)
        plain = prod_over(per_token.from_natural(per_token.eta[0] * resp[..., None]),
                          (N, K), (0,))
        fused = enter(enter_one=Deferred(op, args), cases=cases, value=q_phi,
                      index=np.arange(K), reduce=((N, K), (0,)))
        assert fused.batch_shape == (K,)
        assert_close(fused.eta[0], plain.eta[0], 1e-12, 1e-12)
        unweighted = op(**args, reduce=((N, K), (0,)))
        assert_close(unweighted.eta[0], prod_over(per_token, (N, K), (0,)).eta[0], 1e-12)
    # a word constant along the reduced axis counts once per element of it
    counts = op(sample=np.array(2), probs=q_phi, reduce=((N, K), (0,))).eta[0]
    assert_close(counts, np.where(np.arange(V) == 2, float(N), 0.0) * np.ones((K, 1)), 0)


@pytest.mark.parametrize(("change", "match"), [
    ({"words": [0, 4, 1]}, r"observed value of 'w': 4.0 is outside the support "
                           r"\(integers in 0..3\)"),
    ({"doc": [0, 2, 1]}, r"index of theta: 2.0 is outside the support \(integers in 0..1\)"),
    ({"topics": 2}, r"variable 'w', argument 'probs': ff.Switch\(z\) has 3 cases but 'phi' "
                    r"has 2 elements over range 'k'; they must match"),
])
def test_lda_bad_input_is_named(change, match):
    """A word past the vocabulary, a document index past the documents, and fewer topic
    rows than topics are refused naming the variable and the bound."""
    doc, words = np.array(change.get("doc", [0, 1, 1])), np.array(change.get("words", [0, 3, 1]))
    with pytest.raises(ff.ModelError, match=match), ff.Model() as model:
        with ff.Plate(ff.Range("d", 2)):
            theta = ff.Dirichlet("theta", np.ones(3))
        with ff.Plate(ff.Range("k", change.get("topics", 3))):
            phi = ff.Dirichlet("phi", np.ones(4))
        with ff.Plate(ff.Range("n", 3)):
            z = ff.Discrete("z", theta[doc])
            with ff.Switch(z):
                ff.Discrete("w", phi[z], observed=words)
        model.infer("vmp", progress=False)


@pytest.mark.parametrize("seed", [0, 1])
def test_lda_reaches_the_perplexity_of_scikit_learn_batch(seed):
    """The acceptance line: same corpus, priors (1/K), start and iterations (50) as
    scikit-learn's batch LatentDirichletAllocation; factorflow's perplexity is at most
    1% above scikit-learn's (seed 1: both at the same optimum, 0.07% apart; seed 0:
    scikit-learn stops in a worse one, 23.57 against 19.40).  Both perplexities come
    from ``lda_bound``, which reproduces scikit-learn's own to 1e-9."""
    from scipy import sparse
    from sklearn import decomposition

    out = EXAMPLE["main"](iterations=50, seed=seed)
    doc, words, n_docs, n_words = out["doc"], out["words"], out["n_docs"], out["n_words"]
    counts = sparse.csr_matrix(np.bincount(doc * n_words + words, minlength=n_docs * n_words)
                               .reshape(n_docs, n_words).astype(float))
    sk = decomposition.LatentDirichletAllocation(
        out["n_topics"], doc_topic_prior=out["alpha"], topic_word_prior=out["eta"],
        learning_method="batch", max_iter=50, random_state=seed).fit(counts)
    sk_perplexity = sk.perplexity(counts)
    # its perplexity is exp(−lda_bound / tokens) at its own E-step's q(θ) (private API)
    gamma = sk._e_step(counts, cal_sstats=False, random_init=False)[0]
    bound = EXAMPLE["lda_bound"](doc, words, gamma, sk.components_, out["alpha"], out["eta"])
    assert_close(np.exp(-bound / doc.size), sk_perplexity, 1e-9)
    result = out["result"]
    ours = EXAMPLE["lda_bound"](doc, words, result["theta"].alpha, result["phi"].alpha,
                                out["alpha"], out["eta"])
    assert ours >= result.log_evidence - 1e-9 * abs(ours)  # q(z) optimal: no lower
    assert np.exp(-ours / doc.size) <= 1.01 * sk_perplexity
    if seed == 1:
        assert abs(np.exp(-ours / doc.size) / sk_perplexity - 1) < 0.01


@pytest.mark.parametrize(("passes", "start"), [(5, "prior"), (3, "random")])
def test_em_with_scikit_learns_start_and_passes_is_scikit_learns_run(passes, start):
    """Given the same start — topics ``sklearn_start``, and each E-step's q(θ) from the
    same pseudo-counts (``SklearnStart``: θ's prior, or one Gamma(100, 1/100) draw) — and
    the same E-step (``passes`` passes per document: ``max_doc_update_iter=passes``,
    ``mean_change_tol=0``), factorflow's variational EM is scikit-learn's batch LDA: the
    topics agree to 1e-7, relative (scikit-learn's Cython digamma is an approximation,
    2e-9 off SciPy's), after 20 iterations."""
    sk_lda = pytest.importorskip("sklearn.decomposition")
    from scipy import sparse

    n_docs, n_topics, n_words = 100, 4, 100
    corpus = EXAMPLE["synthetic_corpus"](n_docs, n_topics, n_words, 40,
                                         np.random.default_rng(0))
    doc, words = corpus["doc"], corpus["words"]
    counts = sparse.csr_matrix(np.bincount(doc * n_words + words, minlength=n_docs * n_words)
                               .reshape(n_docs, n_words).astype(float))
    prior = 1.0 / n_topics
    theta0 = (np.full((n_docs, n_topics), prior) if start == "prior" else
              np.random.default_rng(1).gamma(100.0, 0.01, (n_docs, n_topics)))
    sk = sk_lda.LatentDirichletAllocation(
        n_topics, doc_topic_prior=prior, topic_word_prior=prior, learning_method="batch",
        max_iter=20, max_doc_update_iter=passes, mean_change_tol=0.0,
        random_state=EXAMPLE["SklearnStart"](0, theta0)).fit(counts)
    compiled = EXAMPLE["lda"](doc, words, n_docs, n_topics, n_words, prior, prior).compile(
        "vmp", init=["phi", "theta"], **EXAMPLE["em_options"](passes))
    result = compiled.run(iterations=20, tolerance=None, progress=False, init={
        "phi": ff.distributions.Dirichlet(EXAMPLE["sklearn_start"](n_topics, n_words, 0)),
        "theta": ff.distributions.Dirichlet(theta0)})
    assert_close(result["phi"].alpha, sk.components_, 1e-7, 0.0)


def test_the_fast_kernels_equal_numpy_bit_for_bit():
    """The kernels LDA's passes spend their time in, against NumPy written out: the
    scatter of (tokens, K) messages into documents (a cached 0/1 CSR matrix) against
    ``np.add.at``; the last-axis max by columns (K ≤ 16) against ``np.max``, with NaN
    and ±inf; the normalisation of q(z) in blocks of rows against the one-pass one (and
    logsumexp); ``exp_flushed``'s one-pass path against exp with the e^-700 cut."""
    from factorflow.distributions import base

    rng = np.random.default_rng(3)
    for k in (1, 3, 10, 16, 17):
        index = rng.integers(0, 50, 5000)
        msg = ff.distributions.Dirichlet(rng.gamma(1.0, 1.0, (5000, k)) + 0.5)
        expected = np.zeros((60, k))
        np.add.at(expected, index, msg.eta[0])
        got = msg.scatter_prod(index, 60).eta[0]
        assert np.array_equal(got, expected), k
        assert msg.scatter_prod(index, 60).eta[0] is not got  # (a new array each time)
        x = rng.normal(size=(700, k)) * 100
        x[0, 0], x[1, -1], x[2, :] = np.nan, np.inf, -np.inf
        assert np.array_equal(base.last_axis_max(x), np.max(x, axis=-1, keepdims=True),
                              equal_nan=True), k
        assert np.array_equal(base.row_max(x), np.max(x, axis=-1, keepdims=True),
                              equal_nan=True), k
    for k in (1, 3, 10, 17, 100):  # the blocked normalisation against the one-pass one
        x = rng.normal(size=(70000 // k + 3, k)) * 200
        x[0, 0], x[1, :], x[2, 0] = -np.inf, -np.inf, np.inf
        blocked = base._normalize_blocked(x)
        with np.errstate(invalid="ignore"):
            plain = x - special.logsumexp(x, axis=-1, keepdims=True)
        assert_close(blocked[3:], plain[3:], 1e-12, 1e-9)
        base_block = base._BLOCK_ELEMENTS
        try:
            base._BLOCK_ELEMENTS = 10**12  # (the one-pass way)
            one_pass = base._normalize_with_probs(x.copy())
        finally:
            base._BLOCK_ELEMENTS = base_block
        assert np.array_equal(blocked, one_pass, equal_nan=True), k
        assert np.array_equal(base.recall("exp", blocked), base.recall("exp", one_pass),
                              equal_nan=True), k
        assert np.array_equal(base.row_max(x), np.max(x, axis=-1, keepdims=True)), k
    for shift in (0.0, -650.0, -750.0):
        x = rng.normal(size=(800, 10)) * 30 + shift
        expected = np.where(x >= -700.0, np.exp(np.maximum(x, -700.0)), 0.0)
        assert np.array_equal(base.exp_flushed(x), expected), shift


@pytest.mark.slow
@pytest.mark.parametrize("seed", [2])
def test_em_is_scikit_learns_run_on_the_larger_corpus(seed):
    """The acceptance line where the local optimum is not left to chance: on the 10^5-token
    corpus, with scikit-learn given factorflow's start and E-step (``SklearnStart`` at θ's
    prior, 5 passes per document), both reach the same topics and perplexity
    (``perplexity()`` at the topics, 1e-6; the topics 1e-4, relative: scikit-learn's
    approximate digamma, 2e-9 off, grows to 4e-6 over 50 iterations on seed 2), here on
    seed 2, the seed that was 7% off (16 s a seed; the suite's one slow LDA test;
    ``benchmarks/bench_lda.py`` runs seeds 0–9 the same way, and compares EM with
    scikit-learn as it comes there) — where scikit-learn as it comes
    (a random E-step start each iteration, stopping each document on its own) lands in
    optima 6% apart either way (``benchmarks/bench_lda.py``)."""
    sk_lda = pytest.importorskip("sklearn.decomposition")
    from scipy import sparse

    n_docs, n_topics, n_words = 1000, 10, 1000
    corpus = EXAMPLE["synthetic_corpus"](n_docs, n_topics, n_words, 100,
                                         np.random.default_rng(seed))
    doc, words = corpus["doc"], corpus["words"]
    counts = sparse.csr_matrix(np.bincount(doc * n_words + words, minlength=n_docs * n_words)
                               .reshape(n_docs, n_words).astype(float))
    sk = sk_lda.LatentDirichletAllocation(
        n_topics, doc_topic_prior=0.1, topic_word_prior=0.1, learning_method="batch",
        max_iter=50, max_doc_update_iter=5, mean_change_tol=0.0,
        random_state=EXAMPLE["SklearnStart"](seed, np.full((n_docs, n_topics), 0.1)))
    sk.fit(counts)
    compiled = EXAMPLE["lda"](doc, words, n_docs, n_topics, n_words, 0.1, 0.1).compile(
        "vmp", init=["phi"], **EXAMPLE["em_options"](5))
    result = compiled.run(iterations=50, tolerance=None, progress=False, trace=False, init={
        "phi": ff.distributions.Dirichlet(EXAMPLE["sklearn_start"](n_topics, n_words, seed))})
    assert_close(result["phi"].alpha, sk.components_, 1e-4, 1e-8)
    theirs = sk.perplexity(counts)
    sk.components_ = result["phi"].alpha
    sk.exp_dirichlet_component_ = np.exp(
        special.digamma(sk.components_)
        - special.digamma(sk.components_.sum(axis=1, keepdims=True)))
    assert_close(sk.perplexity(counts), theirs, 1e-6)
