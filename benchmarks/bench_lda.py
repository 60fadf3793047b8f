"""LDA in factorflow (``examples/lda.py``) beside scikit-learn's batch
``LatentDirichletAllocation``, side by side in one run: the same synthetic corpus, priors
(α = η = 1/K, scikit-learn's defaults), starting topics (``RandomState(seed).gamma(100,
0.01)``, scikit-learn's) and number of iterations.

factorflow runs two ways: plain VMP (one sweep θ → z → φ over the token plate per
iteration) and batch variational EM, scikit-learn's algorithm (``em_options``: per
iteration each document's q(θ) restarts from its prior, θ and z are iterated ``--passes``
times with φ fixed, an inner loop of the generated code, then φ is updated once).

Per corpus and seed: CPU time per iteration (factorflow without the per-sweep bound,
``trace=False``; scikit-learn: one EM iteration, whose E-step iterates each document's θ
and z until its mean change is < 1e-3, at most 100 times) and two perplexities, each
computed the same way for both systems on the same (held-in) tokens:

* bound: exp(−bound / tokens) with the bound of ``lda_bound`` (scikit-learn's
  ``_approx_bound``, q(z) optimal given q(θ), q(φ)), at each system's final q(θ), q(φ).
  For scikit-learn that is what ``perplexity()`` reports (its final q(φ) and q(θ) from
  a converged E-step; the tests reproduce it to 1e-9);
* plug-in: exp(−Σ_n log Σ_k E[θ[d_n, k]] E[φ[k, w_n]] / tokens) at the posterior means
  (``plugin_perplexity``; no bound involved).

Run: ``python benchmarks/bench_lda.py [--iterations 50] [--seeds 3] [--passes 5]
[--small]``.
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


def _fit(name: str, seed: int, iterations: int, passes: int) -> dict[str, object]:
    """factorflow (plain VMP, and variational EM with ``passes`` local passes) and
    scikit-learn on one corpus: CPU seconds per iteration, bound and plug-in perplexity
    of each."""
    from scipy import sparse
    from sklearn.decomposition import LatentDirichletAllocation

    n_docs, n_topics, n_words, length = CORPORA[name]
    corpus = EXAMPLE["synthetic_corpus"](n_docs, n_topics, n_words, length,
                                         np.random.default_rng(seed))
    doc, words = corpus["doc"], corpus["words"]
    prior = 1.0 / n_topics
    start = EXAMPLE["sklearn_start"](n_topics, n_words, seed)

    def perplexities(gamma: np.ndarray, lam: np.ndarray) -> tuple[float, float]:
        bound = EXAMPLE["lda_bound"](doc, words, gamma, lam, prior, prior)
        return (float(np.exp(-bound / doc.size)),
                EXAMPLE["plugin_perplexity"](doc, words, gamma, lam))

    out: dict[str, object] = {}
    for system, options in (("vmp", {}), ("em", EXAMPLE["em_options"](passes))):
        compiled = EXAMPLE["lda"](doc, words, n_docs, n_topics, n_words, prior,
                                  prior).compile("vmp", init=["phi"], **options)
        t0 = time.process_time()
        result = compiled.run(iterations=iterations, tolerance=None, progress=False,
                              trace=False, init={"phi": ff.distributions.Dirichlet(start)})
        out[system] = ((time.process_time() - t0) / iterations,
                       *perplexities(result["theta"].alpha, result["phi"].alpha))
    counts = sparse.csr_matrix(np.bincount(doc * n_words + words, minlength=n_docs * n_words)
                               .reshape(n_docs, n_words).astype(float))
    sk = LatentDirichletAllocation(n_topics, doc_topic_prior=prior, topic_word_prior=prior,
                                   learning_method="batch", max_iter=iterations,
                                   random_state=seed)
    t0 = time.process_time()
    sk.fit(counts)
    sk_s = (time.process_time() - t0) / iterations
    # its final q(θ): the converged E-step from ones that perplexity() runs (private API)
    gamma = sk._e_step(counts, cal_sstats=False, random_init=False)[0]
    out["sklearn"] = (sk_s, *perplexities(gamma, sk.components_))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--passes", type=int, default=5, help="local passes per EM iteration")
    parser.add_argument("--small", action="store_true", help="the small corpus only")
    args = parser.parse_args()
    warnings.simplefilter("ignore", ff.ConvergenceWarning)
    print(f"LDA, {args.iterations} iterations; CPU ms per iteration (process time); "
          f"perplexity by the bound and plug-in; ratios to scikit-learn")
    print("| corpus (docs, K, V, tokens) | seed | system | ms/iter | × sklearn "
          "| perplexity (bound) | ratio | plug-in | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    systems = {"sklearn": "scikit-learn batch", "em": f"factorflow EM ({args.passes} passes)",
               "vmp": "factorflow VMP"}
    for name in (["small"] if args.small else list(CORPORA)):
        n_docs, n_topics, n_words, length = CORPORA[name]
        label = f"{name} ({n_docs}, {n_topics}, {n_words}, {n_docs * length:,})"
        runs = [_fit(name, seed, args.iterations, args.passes) for seed in range(args.seeds)]
        for seed, run in enumerate(runs):
            sk = run["sklearn"]
            for key, system in systems.items():
                t, p, q = run[key]
                print(f"| {label} | {seed} | {system} | {1e3 * t:.1f} | {t / sk[0]:.2f} "
                      f"| {p:.3f} | {p / sk[1]:.4f} | {q:.3f} | {q / sk[2]:.4f} |")
        for key, system in systems.items():
            t, p, q = (np.mean([run[key][i] for run in runs]) for i in range(3))
            s0, s1, s2 = (np.mean([run["sklearn"][i] for run in runs]) for i in range(3))
            print(f"| {label} | mean | {system} | {1e3 * t:.1f} | {t / s0:.2f} | {p:.3f} "
                  f"| {p / s1:.4f} | {q:.3f} | {q / s2:.4f} |")


if __name__ == "__main__":
    main()
