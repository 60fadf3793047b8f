"""Rewrite benchmarks: the e-graph against the naive search of seed 003, and message derivation.

Exploration: for the seed example and for generated expressions of growing size, all
graphs the rules ``SEED`` (``log(exp(a)) -> a``, ``a + a -> 2a``, associativity of ``+``)
produce in any order. The naive search clones the whole graph for every applied rewrite,
breadth first, within a budget (``--max-graphs``, ``--max-allocations``, ``--timeout``);
the e-graph loads the term once and saturates. "allocations" counts graph nodes
allocated by the naive search (node copies); the e-graph allocates each of its e-nodes
once. A generated expression is a balanced binary sum of blocks
``log(exp(x_i + x_i)) + (x_i + x_i)``, one distinct variable per block, so the number of
distinct graphs grows exponentially with its size.

Stream: seconds to the first 1, 5 and 100 terms of a generated sum's class (the lazy
stream), against building every term of a size before yielding any of them (the former
stream; 3,124 terms of 6,250 nodes before the second term of the 12,499-node class).

Chains: ``log(a1 + (a2 + (... + an))) + log(a1 + ... + an)``, whose two sums differ by up
to n - 1 levels of nesting: one class, so ``2*log(a1 + ... + an)`` is its best term, with
complete lazy associativity; eager flattening stores about n²/2 flattenings.

Derivation: every VMP message and ELBO term of a 20-factor model (Gaussian, Gamma,
Beta–Bernoulli, Gamma–Poisson, Dirichlet–Discrete, Beta–Binomial factors).

Run: ``python benchmarks/bench_rewrite.py``. Output on the development machine (2 CPU
cores, naive budget 20 s or 20,000 graphs per row)::

                                      |   naive: clone per rewrite, BFS    |    e-graph (egglog)
            expression (rules)  nodes |   graphs allocations  seconds done |  e-nodes  seconds done
    -----------------------------------------------------------------------------------------------
           seed example (SEED)      8 |       10          94    0.001  yes |       12    0.028  yes
       generated 10 (no assoc)      9 |        6          38    0.001  yes |       10    0.011  yes
      generated 100 (no assoc)    119 |    15561     3671205   20.000   no |      120    0.025  yes
     generated 1000 (no assoc)   1249 |     4724     3662707   20.047   no |     1250    0.193  yes
    generated 10000 (no assoc)  12499 |      359     2685000   20.021   no |    12500    2.240  yes
           generated 10 (SEED)      9 |       13         131    0.002  yes |       12    0.018  yes
           generated 30 (SEED)     29 |    20000     1785325   13.297   no |       36    0.020  yes
          generated 100 (SEED)    119 |    20000     3076091   17.316   no |      144    0.036  yes
         generated 1000 (SEED)   1249 |     4791     3604806   20.000   no |     1500    0.220  yes
        generated 10000 (SEED)  12499 |      376     2812501   20.017   no |    15000    2.547  yes

                                      | lazy (bridges + read-out) |    eager flattening
             expression (SEED)  nodes |  e-nodes  seconds done |  e-nodes  seconds done
    -----------------------------------------------------------------------------------
                  generated 10      9 |       12    0.017  yes |       12    0.015  yes
                  generated 30     29 |       36    0.102  yes |      118    0.014  yes
                 generated 100    119 |      144    0.035  yes |    72395    0.600   no

    20-factor model, all 44 messages and ELBO terms derived: 273 ms (best of 5; first 284 ms)

The stream and chain tables, measured on the same machine shared with other jobs (load
about 9 on its 2 cores, so times are 3 to 4 times the idle ones)::

                                      | lazy stream: seconds to the first k terms |       eager
             expression (SEED)  nodes |   first 1   first 5 first 100 | whole size   ratio
    --------------------------------------------------------------------------------------
                 generated 100    119 |     0.015     0.016     0.043 |      0.410     10x
                generated 1000   1249 |     0.134     0.166     0.662 |      1.609      2x
               generated 10000  12499 |     3.118     3.546     5.523 |    252.325     46x

                                      |   lazy + flattening unions   |    eager flattening
             expression (SEED)  nodes |  e-nodes  seconds       best |  e-nodes  seconds done
    -----------------------------------------------------------------------------------------
                      chain 10     33 |       25    0.326 2*log(...) |       60    0.188  yes
                      chain 50    153 |      105    0.791 2*log(...) |     1280    3.328  yes
                     chain 100    303 |      205    1.662 2*log(...) |     5055   34.658  yes
                     chain 200    603 |      405    1.766 2*log(...) |        -        -    -

Reading it: the e-graph grows linearly (about one e-node per node, plus ``2*x_i`` per
block) and saturates 12,499 nodes in 2.2 to 2.5 s with or without the associativity of
``+``, while the naive search, paying a whole clone per rewrite, is far from done after
20 s from 100 nodes on. Associativity is lazy (see :mod:`factorflow.rewrite.egraph`): run
as an ordinary rewrite, the flattened forms of a balanced tree of rewritable sums
multiply, and the e-graph stops at its node limit already at 119 nodes. The lazy stream
gives the first terms of a 12,499-node class after reading the e-graph and building one
term per class (its first term's subterms), where building every term of a size first
built 3,124 terms of 6,250 nodes; with lazy associativity complete, a chain of nested
sums stays at 2n + 5 e-nodes, while eager flattening stores about n²/2.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from factorflow.factors.derive import derive_messages
from factorflow.rewrite.egraph import Limits, explore
from factorflow.rewrite.match import Ruleset
from factorflow.rewrite.naive import naive_explore
from factorflow.rewrite.rules import SEED
from factorflow.rewrite.terms import (
    SUM,
    Term,
    at,
    data,
    exp,
    index_sum,
    lgamma,
    log,
    sym,
)


def seed_term() -> Term:
    x = sym("x")
    return log(exp(x + x)) + x + x


NO_ASSOC = Ruleset("seed_without_assoc", (SEED["log_exp"], SEED["double"]))


def generated(nodes: int) -> Term:
    """A balanced binary sum of blocks ``log(exp(x_i + x_i)) + (x_i + x_i)`` over distinct
    variables, about ``nodes`` nodes (every sum has two arguments: nothing is flattened)."""
    blocks = []
    for i in range(max(1, nodes // 8)):
        pair = Term(SUM, (sym(f"x{i}"), sym(f"x{i}")))
        blocks.append(Term(SUM, (log(exp(pair)), pair)))
    while len(blocks) > 1:
        blocks = [Term(SUM, tuple(blocks[j:j + 2])) for j in range(0, len(blocks), 2)]
    return blocks[0]


def _row(name: str, term: Term, rules: Ruleset, args: argparse.Namespace) -> str:
    naive = naive_explore(term, rules, max_graphs=args.max_graphs,
                          max_allocations=args.max_allocations, timeout=args.timeout)
    start = time.perf_counter()
    ex = explore(term, rules, Limits(max_nodes=args.max_nodes, timeout=60.0))
    seconds = time.perf_counter() - start
    return (f"{name:>26} {term.size:>6} | {len(naive.terms):>8} {naive.allocations:>11} "
            f"{naive.seconds:>8.3f} {'yes' if naive.complete else 'no':>4} | {ex.nodes:>8} "
            f"{seconds:>8.3f} {'yes' if ex.complete else 'no':>4}")


def bench_associativity(args: argparse.Namespace) -> list[str]:
    """SEED on balanced sums: lazy associativity against the rule run as a rewrite."""
    header = (f"{'expression (SEED)':>26} {'nodes':>6} | {'e-nodes':>8} {'seconds':>8} {'done':>4}"
              f" | {'e-nodes':>8} {'seconds':>8} {'done':>4}")
    rows = [f"{'':>33} | {'lazy (bridges + read-out)':^22} | {'eager flattening':^22}",
            header, "-" * len(header)]
    for n in args.eager_sizes:
        term, cells = generated(n), []
        for lazy in (True, False):
            start = time.perf_counter()
            ex = explore(term, SEED, Limits(max_nodes=args.max_nodes, timeout=60.0),
                         lazy_associativity=lazy)
            cells.append(f"{ex.nodes:>8} {time.perf_counter() - start:>8.3f} "
                         f"{'yes' if ex.complete else 'no':>4}")
        rows.append(f"{f'generated {n}':>26} {term.size:>6} | {cells[0]} | {cells[1]}")
    return rows


def bench_exploration(args: argparse.Namespace) -> list[str]:
    header = (f"{'expression (rules)':>26} {'nodes':>6} | {'graphs':>8} {'allocations':>11} "
              f"{'seconds':>8} {'done':>4} | {'e-nodes':>8} {'seconds':>8} {'done':>4}")
    rows = [f"{'':>33} | {'naive: clone per rewrite, BFS':^34} | {'e-graph (egglog)':^22}",
            header, "-" * len(header)]
    rows.append(_row("seed example (SEED)", seed_term(), SEED, args))
    for n in args.sizes:
        rows.append(_row(f"generated {n} (no assoc)", generated(n), NO_ASSOC, args))
    for n in args.assoc_sizes:
        rows.append(_row(f"generated {n} (SEED)", generated(n), SEED, args))
    return rows


def bench_stream(args: argparse.Namespace) -> list[str]:
    """Time to the first k terms of the class of a generated sum (SEED, saturated): the lazy
    stream against building every term of a size before yielding any (the former stream)."""
    ks = args.first_terms
    header = (f"{'expression (SEED)':>26} {'nodes':>6} | "
              + " ".join(f"{f'first {k}':>9}" for k in ks) + f" | {'whole size':>10} {'ratio':>7}")
    rows = [f"{'':>33} | {'lazy stream: seconds to the first k terms':^{10 * len(ks) - 1}} | "
            f"{'eager':^18}", header, "-" * len(header)]
    for n in args.stream_sizes:
        term = generated(n)
        ex = explore(term, SEED, Limits(max_nodes=args.max_nodes, timeout=60.0))
        cells, start, stream = [], time.perf_counter(), ex.stream()
        for k in ks:
            for _ in range(k - (int(cells[-1][1]) if cells else 0)):
                next(stream)
            cells.append((time.perf_counter() - start, k))
        ex._cache.clear()
        start = time.perf_counter()
        language, root = ex._language()
        size, found = int(language.min_size[root]), 0
        while found < ks[-1]:                       # whole sizes, as the former stream did
            found += len(sorted(language.terms(root, size), key=lambda t: t.order_key))
            size += 1
        eager = time.perf_counter() - start
        rows.append(f"{f'generated {n}':>26} {term.size:>6} | "
                    + " ".join(f"{c[0]:>9.3f}" for c in cells)
                    + f" | {eager:>10.3f} {eager / cells[-1][0]:>6.0f}x")
    return rows


def chain_beside_flat(n: int) -> Term:
    """``log(a1 + (a2 + (... + an))) + log(a1 + a2 + ... + an)``: one class only when nestings
    any number of levels apart are united; then ``2*log(a1 + ... + an)``."""
    xs = [sym(f"a{i}") for i in range(n)]
    chain = xs[-1]
    for x in reversed(xs[:-1]):
        chain = Term(SUM, (x, chain))
    return Term(SUM, (log(chain), log(Term(SUM, tuple(xs)))))


def bench_chains(args: argparse.Namespace) -> list[str]:
    """Complete associativity on chains: e-nodes and seconds, lazy against eager."""
    header = (f"{'expression (SEED)':>26} {'nodes':>6} | {'e-nodes':>8} {'seconds':>8} {'best':>10}"
              f" | {'e-nodes':>8} {'seconds':>8} {'done':>4}")
    rows = [f"{'':>33} | {'lazy + flattening unions':^28} | {'eager flattening':^22}",
            header, "-" * len(header)]
    for n in args.chain_sizes:
        term, start = chain_beside_flat(n), time.perf_counter()
        ex = explore(term, SEED, Limits(max_nodes=args.max_nodes, timeout=60.0))
        lazy = time.perf_counter() - start
        best = "2*log(...)" if str(ex.best()).startswith("2*log(") else "unmerged"
        cell = f"{'-':>8} {'-':>8} {'-':>4}"
        if n <= args.eager_chain_max:
            start = time.perf_counter()
            eager = explore(term, SEED, Limits(max_nodes=args.max_nodes, timeout=60.0),
                            lazy_associativity=False)
            cell = (f"{eager.nodes:>8} {time.perf_counter() - start:>8.3f} "
                    f"{'yes' if eager.complete else 'no':>4}")
        rows.append(f"{f'chain {n}':>26} {term.size:>6} | {ex.nodes:>8} {lazy:>8.3f} {best:>10}"
                    f" | {cell}")
    return rows


def twenty_factor_model() -> list[tuple[Term, dict[Term, str]]]:
    """20 factors: a Gaussian chain with a shared precision, its priors, and conjugate pairs."""
    tau, factors = sym("tau"), []

    def gaussian(sample: Term, mean: Term, precision: Term) -> Term:
        return (-0.5 * precision * (sample - mean) ** 2 + 0.5 * log(precision)
                - 0.5 * log(2 * np.pi))

    chain = [sym(f"m{i}") for i in range(11)]
    factors.append((gaussian(chain[0], data("m_prior"), data("m_precision")),
                    {chain[0]: "Gaussian"}))
    for a, b in zip(chain, chain[1:], strict=False):
        factors.append((gaussian(b, a, tau), {a: "Gaussian", b: "Gaussian", tau: "Gamma"}))
    factors.append((2.0 * log(tau) - tau, {tau: "Gamma"}))
    for i in range(3):
        p, y = sym(f"p{i}"), sym(f"y{i}")
        factors.append((y * log(p) + (1 - y) * log(1 - p), {p: "Beta", y: "Bernoulli"}))
    for i in range(3):
        lam, n = sym(f"lam{i}"), data(f"n{i}")
        factors.append((n * log(lam) - lam - lgamma(n + 1), {lam: "Gamma"}))
    theta, z = sym("theta"), sym("z")
    factors.append((index_sum(at(z, "k") * log(at(theta, "k")), "k"),
                    {theta: "Dirichlet", z: "Discrete"}))
    q, n, k = sym("q"), data("N"), data("k")
    factors.append((lgamma(n + 1) - lgamma(k + 1) - lgamma(n - k + 1) + k * log(q)
                    + (n - k) * log(1 - q), {q: "Beta"}))
    return factors


def bench_derivation(repeats: int) -> list[str]:
    model = twenty_factor_model()
    times, messages = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        messages = sum(len(derive_messages(f, targets)) for f, targets in model)
        times.append(time.perf_counter() - start)
    return [f"{len(model)}-factor model, all {messages} messages and ELBO terms derived: "
            f"{min(times) * 1e3:.0f} ms (best of {repeats}; first {times[0] * 1e3:.0f} ms)"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[10, 100, 1000, 10000])
    parser.add_argument("--assoc-sizes", type=int, nargs="*", default=[10, 30, 100, 1000, 10000])
    parser.add_argument("--eager-sizes", type=int, nargs="*", default=[10, 30, 100])
    parser.add_argument("--stream-sizes", type=int, nargs="*", default=[100, 1000, 10000])
    parser.add_argument("--first-terms", type=int, nargs="*", default=[1, 5, 100])
    parser.add_argument("--chain-sizes", type=int, nargs="*", default=[10, 50, 100, 200])
    parser.add_argument("--eager-chain-max", type=int, default=100)
    parser.add_argument("--max-nodes", type=int, default=200_000)
    parser.add_argument("--max-graphs", type=int, default=20_000)
    parser.add_argument("--max-allocations", type=int, default=20_000_000)
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print("\n".join(bench_exploration(args)))
    print()
    print("\n".join(bench_associativity(args)))
    print()
    print("\n".join(bench_stream(args)))
    print()
    print("\n".join(bench_chains(args)))
    print()
    print("\n".join(bench_derivation(args.repeats)))


if __name__ == "__main__":
    main()
