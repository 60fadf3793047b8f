"""The naive exploration seed 003 describes, as a baseline for the e-graph.

Breadth first from the input graph: for every graph in the queue, every node, every
rule and every match, clone the whole graph (a fresh mutable node per node, as cloning
an Aesara ``FunctionGraph`` does), replace the matched node in the clone by the rule's
right-hand side (all its uses, as ``FunctionGraph.replace``), and queue the result if it
is new. Each applied rewrite costs a copy of the graph; the graphs found are the terms
the rules reach read left to right. Budgets on graphs, allocations and seconds make it
stop; ``complete`` says whether the queue emptied first.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from factorflow.rewrite.match import Rule, Ruleset, apply_at_root
from factorflow.rewrite.terms import Term


class _Node:
    """A mutable graph node (an ``Apply`` node: op, payload and input nodes)."""

    __slots__ = ("op", "payload", "inputs")

    def __init__(self, op: str, payload: object, inputs: list[_Node]) -> None:
        self.op, self.payload, self.inputs = op, payload, inputs


@dataclass(frozen=True)
class NaiveResult:
    """Distinct graphs found (breadth-first order, the input first) and the cost of finding them."""

    terms: tuple[Term, ...]
    allocations: int
    applications: int
    seconds: float
    complete: bool


def subterms(term: Term) -> list[Term]:
    """The distinct subterms of ``term`` (its graph's nodes), children before parents."""
    seen: dict[Term, None] = {}
    stack: list[tuple[Term, bool]] = [(term, False)]
    while stack:
        t, expanded = stack.pop()
        if t in seen:
            continue
        if expanded:
            seen[t] = None
        else:
            stack.append((t, True))
            stack.extend((a, False) for a in t.args if a not in seen)
    return list(seen)


def _clone(term: Term, nodes: dict[Term, _Node] | None = None
           ) -> tuple[_Node, dict[Term, _Node], int]:
    nodes = {} if nodes is None else nodes
    made = 0
    for t in subterms(term):
        if t not in nodes:
            nodes[t] = _Node(t.op, t.payload, [nodes[a] for a in t.args])
            made += 1
    return nodes[term], nodes, made


def _to_term(root: _Node) -> Term:
    memo: dict[int, Term] = {}
    stack = [root]
    while stack:
        n = stack[-1]
        todo = [i for i in n.inputs if id(i) not in memo]
        if todo:
            stack.extend(todo)
            continue
        stack.pop()
        memo[id(n)] = Term(n.op, tuple(memo[id(i)] for i in n.inputs), n.payload)
    return memo[id(root)]


def _replaced(graph: Term, old: Term, new: Term) -> tuple[Term, int]:
    """Clone ``graph`` whole, replace ``old`` by ``new`` in the clone; return it and the
    number of nodes allocated. Nodes of ``new`` that contain ``old`` are fresh, so only the
    clone's uses of ``old`` are redirected (no cycle when ``new`` contains ``old``)."""
    root, nodes, made = _clone(graph)
    reaches: dict[Term, bool] = {}
    for t in nodes:                       # children before parents
        reaches[t] = t is old or any(reaches[a] for a in t.args)
    shared = {t: n for t, n in nodes.items() if t is old or not reaches[t]}
    new_node, _, extra = _clone(new, shared)
    old_node = nodes[old]
    for n in nodes.values():
        n.inputs = [new_node if i is old_node else i for i in n.inputs]
    return _to_term(new_node if root is old_node else root), made + extra


def naive_explore(term: Term, rules: Ruleset | Sequence[Rule], *, max_graphs: int = 10_000,
                  max_allocations: int = 10_000_000, timeout: float = 10.0) -> NaiveResult:
    """Every graph the rules reach from ``term``, breadth first, one whole clone per rewrite."""
    start = time.perf_counter()
    seen: dict[Term, None] = {term: None}
    queue = deque([term])
    allocations = applications = 0

    def out_of_budget() -> bool:
        return (len(seen) >= max_graphs or allocations >= max_allocations
                or time.perf_counter() - start > timeout)

    stopped = False
    while queue and not stopped:
        graph = queue.popleft()
        for node, r in ((n, r) for n in subterms(graph) for r in rules):
            for result in apply_at_root(r, node):
                new, made = _replaced(graph, node, result)
                allocations += made
                applications += 1
                if new not in seen:
                    seen[new] = None
                    queue.append(new)
                stopped = out_of_budget()
                if stopped:
                    break
            if stopped:
                break
    return NaiveResult(tuple(seen), allocations, applications, time.perf_counter() - start,
                       not queue and not stopped)
