"""Explore every term that rewrites reach, by equality saturation on an egglog e-graph.

``explore(term, rules, limits)`` loads ``term`` into an e-graph once and runs the rules
in every order at once (equality saturation): a rewrite adds e-nodes and merges
e-classes, and never copies the rest of the graph — the answer to seed 003's "construct
the graphs produced by arbitrarily ordered applications of rewrites without cloning
whole graphs". The :class:`Exploration` it returns gives the cheapest equivalent term
(:meth:`Exploration.best`, egglog's extractor with an additive cost model) and a lazy
stream of the distinct equivalent terms, smallest first (:meth:`Exploration.stream`).
Saturation stops at the :class:`Limits` (iterations, e-nodes, seconds); a rule set that
does not terminate gives an exploration with ``complete == False``, never a hang.

Associativity and commutativity. Binary ``+``/``*`` with rules ``a + b = b + a`` and
``(a + b) + c = a + (b + c)`` make an e-graph hold every bracketing and order: for a sum
of n terms, 2^n - 1 sub-sums and exponentially many e-nodes — the AC explosion. Here:

* Commutativity is free: sums and products are n-ary over an egglog ``MultiSet``
  container, which has no order. Patterns match inside a multiset through a member
  index (see :mod:`factorflow.rewrite.egglog_terms`), each match once.
* Associativity is lazy. A rule of the shape ``(a + b) + c -> a + b + c`` (``sum_assoc``,
  ``prod_assoc``) is not run as a rewrite: run eagerly, it puts every flattening of a
  nested sum into the e-graph as its own e-node, and on a balanced tree of rewritable
  sums those multiply (every combination of the children's forms is a distinct flat
  multiset). Instead (1) the stream and ``best`` read every flattening out of the nested
  e-nodes (:class:`~factorflow.rewrite.termstream.Language` splices a nested sum's
  arguments into its parent), and (2) each other rule gets *bridges*
  (:func:`~factorflow.rewrite.egglog_terms.compile_bridges`) that flatten a nested sum
  into its parent only where the rule matches across the nesting, as in
  ``(x + y) + (x + z) -> 2x + y + z``; and (3) when the rules have saturated, classes
  that share a flattening are united (:mod:`factorflow.rewrite.flattening`: each class's
  maximal flattenings are computed as multisets of classes, never stored as e-nodes) and
  saturation resumes, so ``a + (b + (c + d))`` and ``a + b + c + d``, or ``a + (b + c)``
  and ``(a + b) + c``, are one class at any depth of nesting, as eager flattening finds.
  The e-graph then grows with the rewrites, not with the bracketings: a balanced sum of
  12,499 nodes saturates under ``SEED`` in 15,000 e-nodes, where eager flattening stops
  incomplete at 72,395 e-nodes from 119 nodes; ``log`` of a chain ``a1 + (a2 + (... + an))``
  beside ``log`` of its flat form becomes ``2*log(a1 + ... + an)`` in 2n + 5 e-nodes, where
  eager flattening stores about n²/2 flattenings (``benchmarks/bench_rewrite.py``).

  The lazy e-graph streams exactly what eager flattening streams (each step is one of its
  equalities, and every equality of eager flattening is a shared flattening), with two
  documented limits of the union pass that can only leave terms out: a cycle of sums
  (``0 + a = a``) stops the flattening at the repeated class, and a sum whose members have
  more than 256 maximal flattenings between them keeps the first 256. Property tests
  compare the two on random terms. ``explore(..., lazy_associativity=False)`` runs the
  eager form.

What the stream holds. An e-class is the set of terms *equal* to the input under the
rules read as equations, which contains every term the rules reach left to right (the
naive search of :mod:`factorflow.rewrite.naive`) and possibly more: with
``log(exp(a)) = a`` the class of ``x + x`` also holds ``log(exp(x + x))`` and, through
the cycle, infinitely many larger terms; limit the stream by ``max_term_size`` or
``max_terms``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from egglog import EGraph, ruleset, union
from egglog import Ruleset as EggRuleset
from egglog.runtime import resolve_callable

from factorflow.rewrite.egglog_terms import (
    CONTAINERS,
    NESTING,
    OP_OF_NAME,
    associative_op,
    compile_bridges,
    compile_rule,
    to_egglog,
)
from factorflow.rewrite.flattening import shared_flattenings
from factorflow.rewrite.match import Rule, Ruleset
from factorflow.rewrite.terms import Term
from factorflow.rewrite.termstream import Language, read_egraph, recursion_limit, stream_terms

#: Cost of one node given its op and payload; a term costs the sum over its nodes.
CostModel = Callable[[str, Any], float]


def ast_size(op: str, payload: Any) -> float:
    """Every node costs 1: the cheapest term is the smallest."""
    return 1.0


def term_cost(term: Term, cost: CostModel = ast_size) -> float:
    """The cost of ``term`` under ``cost`` (nodes counted as a tree, as extraction does)."""
    return cost(term.op, term.payload) + sum(term_cost(a, cost) for a in term.args)


@dataclass(frozen=True)
class Limits:
    """Bounds on saturation (iterations, e-nodes, seconds) and on the stream of terms.

    egglog cannot be interrupted inside an iteration, so saturation also stops *before*
    an iteration projected (from the last iteration's growth) to pass ``max_nodes`` or
    ``timeout``: an exploding rule set stops at a bounded e-graph instead of hanging.
    """

    max_iterations: int = 50
    max_nodes: int = 20_000
    timeout: float = 10.0
    max_terms: int | None = None
    max_term_size: int | None = None


@dataclass(frozen=True)
class Exploration:
    """The saturated (or stopped) e-graph of one term. ``complete`` is True when the rules
    reached a fixed point within the limits, so the e-graph holds all their equalities."""

    term: Term
    complete: bool
    stop_reason: str
    iterations: int
    nodes: int
    seconds: float
    limits: Limits
    egraph: EGraph = field(repr=False)
    root: Any = field(repr=False)
    associative: frozenset[str] = frozenset()
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def best(self, cost: CostModel = ast_size) -> Term:
        """The cheapest term equal to the input, flattened forms included (``cost`` must
        be positive on every node)."""
        language, root = self._language()
        with recursion_limit(20_000):       # one level per nesting of the term
            return language.cheapest(root, cost)

    def stream(self, *, max_terms: int | None = None,
               max_term_size: int | None = None) -> Iterator[Term]:
        """Lazily, each distinct term equal to the input once, by nondecreasing size (within
        one size in the e-graph's order, see :mod:`~factorflow.rewrite.termstream`); each
        term is built when requested. Bounded by the given limits, else by ``self.limits``."""
        language, root = self._language()
        return stream_terms(
            language, root,
            max_terms=max_terms if max_terms is not None else self.limits.max_terms,
            max_term_size=max_term_size if max_term_size is not None
            else self.limits.max_term_size)

    def _language(self) -> tuple[Language, Any]:
        if "language" not in self._cache:
            classes, root = read_egraph(self.egraph)
            self._cache["language"] = (Language(classes, self.associative), root)
        return self._cache["language"]


_COMPILED: dict[tuple[tuple[Rule, ...], bool], tuple[EggRuleset, frozenset[str]]] = {}


def egglog_ruleset(rules: Ruleset | Sequence[Rule], *, lazy_associativity: bool = True
                   ) -> tuple[EggRuleset, frozenset[str]]:
    """The egglog ruleset of ``rules`` and the ops they declare associative (compiled once
    per distinct rule tuple). With ``lazy_associativity`` the associativity rules are
    replaced by the bridges of the other rules (:func:`compile_bridges`)."""
    key = (tuple(rules), lazy_associativity)
    if key not in _COMPILED:
        associative = frozenset(op for r in key[0] if (op := associative_op(r)) is not None)
        if lazy_associativity:
            others = [r for r in key[0] if associative_op(r) is None]
            compiled = [compile_rule(r) for r in others]
            compiled += [b for r in others for b in compile_bridges(r, associative)]
        else:
            compiled = [compile_rule(r) for r in key[0]]
        _COMPILED[key] = (ruleset(*compiled, name=f"factorflow_rules_{len(_COMPILED)}"),
                          associative)
    return _COMPILED[key]


def explore(term: Term, rules: Ruleset | Sequence[Rule], limits: Limits = Limits(), *,
            lazy_associativity: bool = True) -> Exploration:
    """Saturate ``term`` under ``rules`` within ``limits``.

    Each iteration saturates the built-in container rules, then applies every rule to
    every match once. Stops when an iteration changes nothing (``complete``), or at the
    first limit reached or projected to be passed by the next iteration
    (``stop_reason``: ``"iterations"``, ``"nodes"`` or ``"time"``). The stream and
    ``best`` are the same with ``lazy_associativity`` off (the associativity rules then
    run as ordinary rewrites, which is exponential on balanced trees; for comparison).
    """
    with recursion_limit(20_000):   # egglog loads terms recursively: deep nests load
        return _explore(term, rules, limits, lazy_associativity)


def _explore(term: Term, rules: Ruleset | Sequence[Rule], limits: Limits,
             lazy_associativity: bool) -> Exploration:
    start = time.perf_counter()
    egraph = EGraph()
    root = egraph.let("root", to_egglog(term))   # loaded once; read_egraph finds "$root"
    compiled, associative = egglog_ruleset(rules, lazy_associativity=lazy_associativity)
    index = CONTAINERS.saturate()
    for op in sorted(associative) if lazy_associativity else ():
        index = index + NESTING[op].saturate()
    step = index + compiled
    complete, reason, iterations = False, "iterations", 0
    nodes = node_count(egraph)
    while iterations < limits.max_iterations:
        iterations += 1
        began, before = time.perf_counter(), nodes
        updated = egraph.run(step).updated
        nodes, took = node_count(egraph), time.perf_counter() - began
        if not updated:
            if lazy_associativity and unite_flattenings(egraph, associative):
                continue            # new equalities: saturate again
            complete, reason = True, "saturated"
            break
        growth = max(nodes / max(before, 1), 1.0)
        if nodes * growth > limits.max_nodes:
            reason = "nodes"
            break
        if time.perf_counter() - start + took * growth * growth > limits.timeout:
            reason = "time"
            break
    egraph.run(CONTAINERS.saturate())   # one-element containers join their element
    return Exploration(term, complete, reason, iterations, node_count(egraph),
                       time.perf_counter() - start, limits, egraph, root, associative)


def unite_flattenings(egraph: EGraph, associative: frozenset[str]) -> bool:
    """Union the classes of ``egraph`` that share a flattening under an op of
    ``associative`` (:mod:`factorflow.rewrite.flattening`); whether any were united."""
    if not associative:
        return False
    classes, _ = read_egraph(egraph)
    pairs = shared_flattenings(classes, associative)
    if not pairs:
        return False
    build = Language(classes).builder(ast_size)   # exact e-nodes: no flattening read out
    for a, b in pairs:
        egraph.register(union(to_egglog(build(a))).with_(to_egglog(build(b))))
    return True


def node_count(egraph: EGraph) -> int:
    """The number of e-nodes of terms in ``egraph`` (the member index is not counted)."""
    return sum(size for fn, size in egraph.all_function_sizes()
               if resolve_callable(fn)[0].ident.name in OP_OF_NAME)
