"""LDA under VMP (``examples/lda.py``) beside scikit-learn's batch
``LatentDirichletAllocation``, side by side in one run: the same synthetic corpus, priors
(α = η = 1/K, scikit-learn's defaults), starting topics (``RandomState(seed).gamma(100,
0.01)``, scikit-learn's) and number of iterations.

Per corpus and seed: time per iteration (factorflow: one sweep of the generated code,
θ → z → φ over the token plate, without the per-sweep bound, ``trace=False``;
scikit-learn: one EM iteration, whose E-step iterates each document's θ and z to
convergence before φ moves) and the perplexity exp(−bound / tokens) of each result, both
from ``lda_bound`` (scikit-learn's ``perplexity`` formula), and the plug-in perplexity
at each system's posterior means (``plugin_perplexity``, no bound involved).  The two
are coordinate ascent on the same bound from the same start but take different paths
(scikit-learn also redraws each document's q(θ) from Gamma(100, 0.01) at every E-step),
so they can stop in different local optima: read the per-seed rows.  Run:
``python benchmarks/bench_lda.py [--iterations 50] [--seeds 3] [--small]``.
"""

from __future__ import annotations

import argparse
import runpy
import time
import warnings
from pathlib import Path

import numpy as np

import factorflow as ff

EXAMPLE = runpy.run_path(str(Path(__file__).parents[1] / "examples" / "lda.py"))
CORPORA = {  # name: (documents, topics, words, tokens per document)
    "small": (100, 4, 100, 40),
    "medium": (1000, 10, 1000, 100),
}


def _row(name: str, seed: int, iterations: int) -> tuple[float, ...]:
    """(factorflow s/iter, scikit-learn s/iter, factorflow perplexity, scikit-learn's, both
    plug-in perplexities)."""
    from scipy import sparse
    from sklearn.decomposition import LatentDirichletAllocation

    n_docs, n_topics, n_words, length = CORPORA[name]
    corpus = EXAMPLE["synthetic_corpus"](n_docs, n_topics, n_words, length,
                                         np.random.default_rng(seed))
    doc, words = corpus["doc"], corpus["words"]
    prior = 1.0 / n_topics
    compiled = EXAMPLE["lda"](doc, words, n_docs, n_topics, n_words, prior, prior).compile(
        "vmp", init=["phi"])
    start = EXAMPLE["sklearn_start"](n_topics, n_words, seed)
    t0 = time.process_time()
    result = compiled.run(iterations=iterations, tolerance=None, progress=False, trace=False,
                          init={"phi": ff.distributions.Dirichlet(start)})
    ff_s = (time.process_time() - t0) / iterations
    counts = sparse.csr_matrix(np.bincount(doc * n_words + words, minlength=n_docs * n_words)
                               .reshape(n_docs, n_words).astype(float))
    sk = LatentDirichletAllocation(n_topics, doc_topic_prior=prior, topic_word_prior=prior,
                                   learning_method="batch", max_iter=iterations,
                                   random_state=seed)
    t0 = time.process_time()
    sk.fit(counts)
    sk_s = (time.process_time() - t0) / iterations
    bound = EXAMPLE["lda_bound"](doc, words, result["theta"].alpha, result["phi"].alpha,
                                 prior, prior)
    plugin = EXAMPLE["plugin_perplexity"]
    return (ff_s, sk_s, float(np.exp(-bound / doc.size)), float(sk.perplexity(counts)),
            plugin(doc, words, result["theta"].alpha, result["phi"].alpha),
            plugin(doc, words, sk.transform(counts), sk.components_))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--small", action="store_true", help="the small corpus only")
    args = parser.parse_args()
    warnings.simplefilter("ignore", ff.ConvergenceWarning)
    print(f"LDA, {args.iterations} iterations, CPU time per iteration (process time)")
    print("| corpus (docs, K, V, tokens) | seed | factorflow ms | scikit-learn ms | ratio "
          "| factorflow perplexity | scikit-learn perplexity | ratio | plug-in factorflow "
          "| plug-in scikit-learn | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in (["small"] if args.small else list(CORPORA)):
        n_docs, n_topics, n_words, length = CORPORA[name]
        rows = [_row(name, seed, args.iterations) for seed in range(args.seeds)]
        for seed, (ff_s, sk_s, ff_p, sk_p, ff_q, sk_q) in enumerate(rows):
            print(f"| {name} ({n_docs}, {n_topics}, {n_words}, {n_docs * length:,}) | {seed} "
                  f"| {1e3 * ff_s:.1f} | {1e3 * sk_s:.1f} | {ff_s / sk_s:.2f} | {ff_p:.3f} "
                  f"| {sk_p:.3f} | {ff_p / sk_p:.4f} | {ff_q:.3f} | {sk_q:.3f} "
                  f"| {ff_q / sk_q:.4f} |")
        ff_t, sk_t, ff_p, sk_p, ff_q, sk_q = (np.array(c) for c in zip(*rows, strict=True))
        print(f"| {name}: mean | | {1e3 * ff_t.mean():.1f} | {1e3 * sk_t.mean():.1f} "
              f"| {ff_t.mean() / sk_t.mean():.2f} | {ff_p.mean():.3f} | {sk_p.mean():.3f} "
              f"| {ff_p.mean() / sk_p.mean():.4f} | {ff_q.mean():.3f} | {sk_q.mean():.3f} "
              f"| {ff_q.mean() / sk_q.mean():.4f} |")


if __name__ == "__main__":
    main()
