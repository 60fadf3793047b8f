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
of n terms, 2^n - 1 sub-sums and exponentially many e-nodes — the AC explosion. Instead
sums and products are n-ary over an egglog ``MultiSet`` container (the canonical
multiset form): commutativity holds by construction (a multiset has no order), and
associativity is the ordinary rule ``(a + b) + c -> a + b + c`` that flattens a nested
sum into its parent (``SEED`` and ``ALGEBRA`` name it ``sum_assoc``), which adds one
e-node per nesting instead of all bracketings. Patterns match inside a multiset through
a member index (see :mod:`factorflow.rewrite.egglog_terms`), each match once. The
limit of this choice: a flat container cannot share its elements with the container it
was flattened from, so when many nested sums each have several equivalent sum forms,
the flat forms of their parent multiply (as the distinct terms do); a chain of nested
sums flattens in a quadratic number of e-nodes, a balanced tree of rewritable sums in
exponentially many (``benchmarks/bench_rewrite.py`` measures both). Rules that need no
associativity keep binary sums shared and the e-graph linear.

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

from egglog import EGraph, MultiSet, ruleset
from egglog import Ruleset as EggRuleset
from egglog.deconstruct import get_callable_args, get_callable_fn, get_literal_value
from egglog.runtime import resolve_callable

from factorflow.rewrite.egglog_terms import (
    CONTAINERS,
    OP_OF_NAME,
    compile_rule,
    from_egglog,
    to_egglog,
)
from factorflow.rewrite.match import Rule, Ruleset
from factorflow.rewrite.terms import CONST, Term
from factorflow.rewrite.termstream import Language, read_egraph, stream_terms

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
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def best(self, cost: CostModel = ast_size) -> Term:
        """The cheapest term equal to the input (ties broken by egglog's extractor)."""
        return from_egglog(self.egraph.extract(self.root, cost_model=_egglog_cost(cost)))

    def stream(self, *, max_terms: int | None = None,
               max_term_size: int | None = None) -> Iterator[Term]:
        """Lazily, each distinct term equal to the input once, smallest first (then in
        canonical order); bounded by the given limits, else by ``self.limits``."""
        if "language" not in self._cache:
            classes, root = read_egraph(self.egraph)
            self._cache["language"] = (Language(classes), root)
        language, root = self._cache["language"]
        return stream_terms(
            language, root,
            max_terms=max_terms if max_terms is not None else self.limits.max_terms,
            max_term_size=max_term_size if max_term_size is not None
            else self.limits.max_term_size)


_COMPILED: dict[tuple[Rule, ...], EggRuleset] = {}


def egglog_ruleset(rules: Ruleset | Sequence[Rule]) -> EggRuleset:
    """The egglog ruleset of ``rules`` (compiled once per distinct rule tuple)."""
    key = tuple(rules)
    if key not in _COMPILED:
        _COMPILED[key] = ruleset(*(compile_rule(r) for r in key),
                                 name=f"factorflow_rules_{len(_COMPILED)}")
    return _COMPILED[key]


def explore(term: Term, rules: Ruleset | Sequence[Rule], limits: Limits = Limits()) -> Exploration:
    """Saturate ``term`` under ``rules`` within ``limits``.

    Each iteration saturates the built-in container rules, then applies every rule to
    every match once. Stops when an iteration changes nothing (``complete``), or at the
    first limit reached or projected to be passed by the next iteration
    (``stop_reason``: ``"iterations"``, ``"nodes"`` or ``"time"``).
    """
    start = time.perf_counter()
    egraph = EGraph()
    root = egraph.let("root", to_egglog(term))   # loaded once; read_egraph finds "$root"
    step = CONTAINERS.saturate() + egglog_ruleset(rules)
    complete, reason, iterations = False, "iterations", 0
    nodes = node_count(egraph)
    while iterations < limits.max_iterations:
        iterations += 1
        began, before = time.perf_counter(), nodes
        updated = egraph.run(step).updated
        nodes, took = node_count(egraph), time.perf_counter() - began
        if not updated:
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
                       time.perf_counter() - start, limits, egraph, root)


def node_count(egraph: EGraph) -> int:
    """The number of e-nodes of terms in ``egraph`` (the member index is not counted)."""
    return sum(size for fn, size in egraph.all_function_sizes()
               if resolve_callable(fn)[0].ident.name in OP_OF_NAME)


def _egglog_cost(cost: CostModel) -> Callable[[EGraph, Any, list[float]], float]:
    def model(egraph: EGraph, expr: Any, children: list[float]) -> float:
        if isinstance(expr, MultiSet):
            return sum(children, 0.0)
        fn = get_callable_fn(expr)
        name = resolve_callable(fn)[0].ident.name if fn is not None else None
        if name not in OP_OF_NAME:
            return 0.0
        op = OP_OF_NAME[name]
        payload = get_literal_value(get_callable_args(expr)[0]) if op == CONST else None
        return cost(op, payload) + sum(children, 0.0)

    return model
