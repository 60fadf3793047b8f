"""Latent Dirichlet allocation under VMP on a synthetic corpus.

θ[d] ~ Dirichlet(α) per document, φ[k] ~ Dirichlet(η) per topic; each token n of document
doc[n] has a topic z[n] ~ Discrete(θ[doc[n]]) and a word w[n] ~ Discrete(φ[z[n]]):
``ff.Discrete("z", theta[doc])`` and ``ff.Discrete("w", phi[z])`` inside
``ff.Switch(z)``.  Documents and tokens are plates (array axes): one sweep is a few array
operations over all tokens at once, whatever the corpus size; the topic-word counts
Σ_n q(z[n] = k) one-hot(w[n]) are one scatter-add, never a one-hot array per token.

The sweep is mean-field coordinate ascent (θ, then z, then φ), so the bound never falls;
perplexity is exp(−bound / tokens), the quantity scikit-learn's
``LatentDirichletAllocation.perplexity`` reports (its bound, with q(z) optimal given
q(θ), q(φ), is written out in ``lda_bound``).  The topics start where scikit-learn's start
(``RandomState(seed).gamma(100, 0.01)``); ``SklearnStart`` hands scikit-learn's E-step
factorflow's start of q(θ); with its passes fixed too (``max_doc_update_iter=passes``,
``mean_change_tol=0``) the two runs agree to scikit-learn's digamma (tested).  The test
suite checks the posteriors against a mean-field LDA written out in NumPy (1e-10) and the
perplexity against scikit-learn's batch LDA with the same priors and iterations;
``benchmarks/bench_lda.py`` times both.
"""

from __future__ import annotations

import time

import numpy as np
from scipy import special

import factorflow as ff


def synthetic_corpus(n_docs: int, n_topics: int, n_words: int, doc_length: int,
                     rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Documents of ``doc_length`` tokens drawn from LDA itself: sparse topics
    (Dirichlet(0.05) over the vocabulary) and documents of few topics (Dirichlet(0.2))."""
    topics = rng.dirichlet(np.full(n_words, 0.05), n_topics)
    mixes = rng.dirichlet(np.full(n_topics, 0.2), n_docs)
    doc = np.repeat(np.arange(n_docs), doc_length)
    u = rng.random((2, doc.size, 1))  # inverse-cdf draws, all tokens at once
    z = np.minimum((u[0] > np.cumsum(mixes[doc], axis=1)).sum(axis=1), n_topics - 1)
    words = np.minimum((u[1] > np.cumsum(topics, axis=1)[z]).sum(axis=1), n_words - 1)
    return {"doc": doc, "words": words, "topics": topics}


def lda(doc: np.ndarray, words: np.ndarray, n_docs: int, n_topics: int, n_words: int,
        alpha: float, eta: float) -> ff.Model:
    """LDA over a token plate ``n`` (``doc[n]``, ``words[n]``)."""
    with ff.Model("lda") as model:
        with ff.Plate(ff.Range("d", n_docs)):
            theta = ff.Dirichlet("theta", np.full(n_topics, alpha))
        with ff.Plate(ff.Range("k", n_topics)):
            phi = ff.Dirichlet("phi", np.full(n_words, eta))
        with ff.Plate(ff.Range("n", doc.size)):
            z = ff.Discrete("z", theta[doc])
            with ff.Switch(z):
                ff.Discrete("w", phi[z], observed=words)
    return model


def sklearn_start(n_topics: int, n_words: int, seed: int) -> np.ndarray:
    """The topic-word pseudo-counts scikit-learn's LDA starts from (``random_state=seed``)."""
    return np.random.RandomState(seed).gamma(100.0, 0.01, (n_topics, n_words))


class SklearnStart(np.random.RandomState):
    """A ``random_state`` for scikit-learn's LDA that fixes its E-step's start: its first
    draw, the topics, is ``RandomState(seed)``'s as usual (``sklearn_start``), but each
    E-step, which would start every document's q(θ) from a fresh Gamma(100, 1/100) draw,
    starts from ``start`` (documents × topics) instead, the same every iteration — as
    factorflow's restart does (``em_options``: θ's prior, or ``init={"theta": ...}``).
    It relies on scikit-learn drawing both through ``random_state.gamma`` (1.3–1.9)."""

    def __init__(self, seed: int, start: np.ndarray):
        super().__init__(seed)
        self.start = np.asarray(start, float)
        self.topics_drawn = False

    def gamma(self, shape, scale=1.0, size=None):  # noqa: D102 (numpy's signature)
        if not self.topics_drawn:
            self.topics_drawn = True
            return super().gamma(shape, scale, size)
        if size is None or tuple(np.atleast_1d(size)) != self.start.shape:
            raise ValueError(f"SklearnStart: an E-step start of shape {size} was asked "
                             f"for; the start given is {self.start.shape}")
        return self.start.copy()


def lda_bound(doc: np.ndarray, words: np.ndarray, gamma: np.ndarray, lam: np.ndarray,
              alpha: float, eta: float) -> float:
    """The mean-field bound with q(z) at its optimum given q(θ) = Dir(gamma) and
    q(φ) = Dir(lam): Σ_n log Σ_k exp(E log θ[doc n, k] + E log φ[k, w n]) − KL terms
    (scikit-learn's ``_approx_bound``)."""
    def elog(a: np.ndarray) -> np.ndarray:
        return special.digamma(a) - special.digamma(a.sum(axis=1, keepdims=True))

    def prior_terms(prior: float, q: np.ndarray) -> float:  # E log p − E log q
        return float(np.sum((prior - q) * elog(q)) + np.sum(special.gammaln(q))
                     - q.size * special.gammaln(prior)
                     + np.sum(special.gammaln(prior * q.shape[1])
                              - special.gammaln(q.sum(axis=1))))

    tokens = special.logsumexp(elog(gamma)[doc] + elog(lam)[:, words].T, axis=1).sum()
    return float(tokens + prior_terms(alpha, gamma) + prior_terms(eta, lam))


def plugin_perplexity(doc: np.ndarray, words: np.ndarray, gamma: np.ndarray,
                      lam: np.ndarray) -> float:
    """Held-in perplexity at the posterior means: exp(−Σ_n log Σ_k E[θ[doc n, k]]
    E[φ[k, w n]] / tokens), with E[θ] = gamma / Σ gamma and E[φ] = lam / Σ lam.  It
    needs neither system's bound, so it compares any two LDA fits the same way."""
    theta = gamma / gamma.sum(axis=1, keepdims=True)
    phi = lam / lam.sum(axis=1, keepdims=True)
    return float(np.exp(-np.log(np.einsum("nk,kn->n", theta[doc], phi[:, words])).sum()
                        / doc.size))


def em_options(passes: int, tolerance: float | None = None) -> dict[str, object]:
    """Compile options for batch variational EM (scikit-learn's batch LDA): each sweep
    puts every document's q(θ) back to its prior, iterates q(θ) and q(z) ``passes``
    times with the topics held fixed (the E-step, an inner loop of the generated code),
    then updates q(φ) (the M-step).  With ``tolerance``, each document's passes stop on
    their own once its q(θ) moves by less than it (relative; ``local_stop="each"``, its
    q(θ) then kept by a mask over the documents), as scikit-learn's E-step stops each
    document.  None of it is specific to LDA: ``local`` names the variables of the inner
    loop (``factorflow.transforms.local_loop``)."""
    options: dict[str, object] = {"local": ("theta", "z"), "local_iterations": passes,
                                  "local_restart": True}
    if tolerance is not None:
        options.update(local_tolerance=tolerance, local_stop="each")
    return options


def main(n_docs: int = 100, n_topics: int = 4, n_words: int = 100, doc_length: int = 40,
         iterations: int = 50, seed: int = 0, em_passes: int = 0) -> dict[str, object]:
    """Fit LDA to a synthetic corpus: plain VMP sweeps (θ, z, φ once each), or with
    ``em_passes`` > 0 variational EM (``em_options``)."""
    rng = np.random.default_rng(seed)
    corpus = synthetic_corpus(n_docs, n_topics, n_words, doc_length, rng)
    doc, words = corpus["doc"], corpus["words"]
    alpha = eta = 1.0 / n_topics  # scikit-learn's default priors
    model = lda(doc, words, n_docs, n_topics, n_words, alpha, eta)
    compiled = model.compile("vmp", init=["phi"], **(em_options(em_passes) if em_passes else {}))
    start_counts = sklearn_start(n_topics, n_words, seed)
    start = time.perf_counter()
    result = compiled.run(iterations=iterations, tolerance=None, progress=False,
                          init={"phi": ff.distributions.Dirichlet(start_counts)})
    ms = 1e3 * (time.perf_counter() - start) / iterations
    perplexity = float(np.exp(-result.log_evidence / doc.size))
    found = result["phi"].mean
    cosine = (found @ corpus["topics"].T) / np.outer(np.linalg.norm(found, axis=1),
                                                    np.linalg.norm(corpus["topics"], axis=1))
    how = f"variational EM, {em_passes} local passes," if em_passes else "VMP"
    print(f"LDA, {n_docs} documents, {doc.size} tokens, {n_words} words, {n_topics} topics: "
          f"{iterations} {how} sweeps, {ms:.1f} ms each")
    print(f"  bound {result.log_evidence:.4f}, perplexity {perplexity:.4f}; never falls: "
          f"{bool(np.all(np.diff(result.trace) > -1e-9 * np.abs(result.trace[1:])))}")
    print(f"  each true topic's best match among the found ones (cosine): "
          f"{np.round(cosine.max(axis=0), 3)}")
    top = np.argsort(-found, axis=1)[:, :6]
    for k in range(n_topics):
        print(f"  topic {k}: words {top[k].tolist()}")
    return {"result": result, "doc": doc, "words": words, "alpha": alpha, "eta": eta,
            "start": start_counts, "perplexity": perplexity, "cosine": cosine,
            "n_docs": n_docs, "n_topics": n_topics, "n_words": n_words}


if __name__ == "__main__":
    main()
