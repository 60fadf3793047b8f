"""LDA in factorflow (``examples/lda.py``) beside scikit-learn's batch
``LatentDirichletAllocation``, side by side in one run: the same synthetic corpus, priors
(α = η = 1/K, scikit-learn's defaults), starting topics (``RandomState(seed).gamma(100,
0.01)``, scikit-learn's) and number of iterations.

The runs, per corpus and seed:

* scikit-learn batch, as it comes: each iteration's E-step starts every document's q(θ)
  from a fresh Gamma(100, 1/100) draw and iterates it until its mean change is < 1e-3
  (at most 100 passes; ~18 on average on the larger corpus), then the M-step;
* scikit-learn, E-step from θ's prior: the same, but each E-step starts from Dir(α)
  (``SklearnStart``), the start of factorflow's restart;
* scikit-learn, ``--passes`` passes from θ's prior (``max_doc_update_iter=passes``,
  ``mean_change_tol=0``): factorflow's EM algorithm exactly;
* factorflow batch variational EM (``em_options``: per iteration each document's q(θ)
  restarts from its prior, θ and z are iterated ``--passes`` times with φ fixed, an inner
  loop of the generated code, then φ is updated once);
* factorflow plain VMP (one sweep θ → z → φ over the token plate per iteration);
* with ``--each``, factorflow EM with scikit-learn's E-step convergence: each document's
  passes stop on their own (``local_stop="each"``, ``local_tolerance=--each``, at most
  100 passes), from θ's prior (slow: every pass runs over all tokens, finished documents
  masked, so a sweep costs the slowest document's passes).

Columns: CPU time per iteration (process time; factorflow without the per-sweep bound,
``trace=False``), and the perplexity at each run's final topics as scikit-learn's
``perplexity()`` computes it (q(θ) from a converged E-step from ones given the topics,
then exp(−bound / tokens); ``lda_bound`` reproduces it to 1e-9), as a ratio to
scikit-learn as it comes and to the run with the same start and E-step.

After each corpus, a summary over the seeds: each run's perplexity ratio to
scikit-learn as it comes (mean, best, worst) and on how many seeds it is within 1% of
scikit-learn's or better.

Run: ``python benchmarks/bench_lda.py [--iterations 50] [--seeds 10] [--passes 5]
[--each 1e-3] [--small]``.
"""

from __future__ import annotations

import argparse
import copy
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


def _fit(name: str, seed: int, iterations: int, passes: int, each: float | None = None
         ) -> dict[str, tuple[float, float]]:
    """Every run of the module docstring on one corpus: CPU seconds per iteration and the
    perplexity at its final topics."""
    from scipy import sparse, special
    from sklearn.decomposition import LatentDirichletAllocation

    n_docs, n_topics, n_words, length = CORPORA[name]
    corpus = EXAMPLE["synthetic_corpus"](n_docs, n_topics, n_words, length,
                                         np.random.default_rng(seed))
    doc, words = corpus["doc"], corpus["words"]
    prior = 1.0 / n_topics
    start = EXAMPLE["sklearn_start"](n_topics, n_words, seed)
    counts = sparse.csr_matrix(np.bincount(doc * n_words + words, minlength=n_docs * n_words)
                               .reshape(n_docs, n_words).astype(float))
    at_prior = np.full((n_docs, n_topics), prior)

    def sklearn(**options: object) -> LatentDirichletAllocation:
        return LatentDirichletAllocation(n_topics, doc_topic_prior=prior,
                                         topic_word_prior=prior, learning_method="batch",
                                         max_iter=iterations, **options)

    judge_: list[LatentDirichletAllocation] = []  # a fitted copy: perplexity() at any topics

    def perplexity(topics: np.ndarray) -> float:
        judge = judge_[0]
        judge.components_ = topics
        judge.exp_dirichlet_component_ = np.exp(
            special.digamma(topics) - special.digamma(topics.sum(axis=1, keepdims=True)))
        return float(judge.perplexity(counts))

    out: dict[str, tuple[float, float]] = {}
    runs = {"sklearn": {"random_state": seed},
            "sklearn_prior": {"random_state": EXAMPLE["SklearnStart"](seed, at_prior)},
            "sklearn_passes": {"random_state": EXAMPLE["SklearnStart"](seed, at_prior),
                               "max_doc_update_iter": passes, "mean_change_tol": 0.0}}
    for key, options in runs.items():
        model = sklearn(**options)
        t0 = time.process_time()
        model.fit(counts)
        judge_ = judge_ or [copy.deepcopy(model)]  # (scikit-learn as it comes: first)
        out[key] = ((time.process_time() - t0) / iterations, perplexity(model.components_))
    ours: dict[str, dict[str, object]] = {"em": EXAMPLE["em_options"](passes), "vmp": {}}
    if each is not None:
        ours["each"] = EXAMPLE["em_options"](100, each)
    for key, options in ours.items():
        compiled = EXAMPLE["lda"](doc, words, n_docs, n_topics, n_words, prior,
                                  prior).compile("vmp", init=["phi"], **options)
        t0 = time.process_time()
        result = compiled.run(iterations=iterations, tolerance=None, progress=False,
                              trace=False, init={"phi": ff.distributions.Dirichlet(start)})
        out[key] = ((time.process_time() - t0) / iterations, perplexity(result["phi"].alpha))
    return out


#: each run's peer: the scikit-learn run with the same start and E-step
PEERS = {"sklearn_prior": None, "sklearn_passes": None, "em": "sklearn_passes", "vmp": None,
         "each": None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--passes", type=int, default=5, help="local passes per EM iteration")
    parser.add_argument("--each", type=float, default=None,
                        help="also factorflow EM stopping each document alone at this "
                             "local_tolerance")
    parser.add_argument("--small", action="store_true", help="the small corpus only")
    args = parser.parse_args()
    warnings.simplefilter("ignore", ff.ConvergenceWarning)
    print(f"LDA, {args.iterations} iterations; CPU ms per iteration (process time); "
          "perplexity by scikit-learn's perplexity() at each run's final topics; ratios to "
          "scikit-learn as it comes and to the run with the same start and E-step")
    print("| corpus (docs, K, V, tokens) | seed | system | ms/iter | × sklearn "
          "| perplexity | ratio | |ratio − 1| to same start and E-step |")
    print("|---|---|---|---|---|---|---|---|")
    systems = {"sklearn": "scikit-learn batch",
               "sklearn_prior": "scikit-learn, E-step from θ's prior",
               "sklearn_passes": f"scikit-learn, {args.passes} passes from θ's prior",
               "em": f"factorflow EM ({args.passes} passes)", "vmp": "factorflow VMP"}
    if args.each is not None:
        systems["each"] = f"factorflow EM, each document alone (tolerance {args.each:g})"
    for name in (["small"] if args.small else list(CORPORA)):
        n_docs, n_topics, n_words, length = CORPORA[name]
        label = f"{name} ({n_docs}, {n_topics}, {n_words}, {n_docs * length:,})"
        runs = []
        for seed in range(args.seeds):
            run = _fit(name, seed, args.iterations, args.passes, args.each)
            runs.append(run)
            sk = run["sklearn"]
            for key, system in systems.items():
                t, p = run[key]
                peer = PEERS.get(key)
                same = f"{abs(p / run[peer][1] - 1):.1e}" if peer else "-"
                print(f"| {label} | {seed} | {system} | {1e3 * t:.1f} | {t / sk[0]:.2f} "
                      f"| {p:.2f} | {p / sk[1]:.4f} | {same} |", flush=True)
        print(f"\n{label}, seeds 0–{args.seeds - 1}: perplexity ratio to scikit-learn "
              "as it comes\n| system | ms/iter | × sklearn | mean ratio | best | worst "
              "| seeds within 1% or better |\n|---|---|---|---|---|---|---|")
        for key, system in systems.items():
            t, s0 = (np.mean([run[key][0] for run in runs]),
                     np.mean([run["sklearn"][0] for run in runs]))
            ratios = np.array([run[key][1] / run["sklearn"][1] for run in runs])
            print(f"| {system} | {1e3 * t:.1f} | {t / s0:.2f} | {ratios.mean():.4f} "
                  f"| {ratios.min():.4f} | {ratios.max():.4f} "
                  f"| {int(np.sum(ratios <= 1.01))}/{len(ratios)} |", flush=True)
        print()


if __name__ == "__main__":
    main()
