"""Dependency graphs between statements: what the scheduler works on (seed 000).

A node is a statement label (in practice one message update). An edge ``(A, B)``
says that B depends on A; it carries one or more ``Dep`` kinds:

=============  ==========================================================================
DECLARATION    B uses what A declares: A runs once before B first runs. Not a read.
DEPENDENCY     B reads A's current value: A must be valid whenever B runs.
REQUIRED       "B requires A": a read, and A runs at least once before B first runs.
TRIGGER        "A invalidates B": a read, and after every update of A, B must be
               recomputed before anything reads B.
FRESH          "B needs a fresh A": a read, and A must be up to date when B runs.
INITIALIZER    A computes the user's initial value of B: A runs before B's loop starts.
PREFERRED      "B would rather not start from a uniform A": the initialization runs A
               before B's first run where it can (SkipIfUniform as a penalty).  Not a
               read by itself (B may prefer a message it reads only through a
               posterior); an edge that is also a read carries Dependency too.
=============  ==========================================================================

Semantics of running a statement X, which the scheduler guarantees and the tests
replay: X is then executed, valid and fresh; every *other* statement that reads X
becomes stale (not fresh); every statement that X triggers, transitively, becomes
invalid. Trigger and Fresh apply transitively (if A triggers B and B triggers C then
A triggers C). Directed cycles of Required, Trigger or Fresh edges are errors. At the
start nothing has run, everything is valid and nothing is fresh; a statement may read
its own previous value even when invalid; a user's initial value is put in place when
its statement's loop starts, and counts as run, valid and fresh.
"""

from __future__ import annotations

import enum
import heapq
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType

import numpy as np

from factorflow.errors import ScheduleError


class Dep(enum.Flag):
    """The kinds of dependency an edge can carry (several at once)."""

    DECLARATION = enum.auto()
    DEPENDENCY = enum.auto()
    REQUIRED = enum.auto()
    TRIGGER = enum.auto()
    FRESH = enum.auto()
    INITIALIZER = enum.auto()
    PREFERRED = enum.auto()


READS = Dep.DEPENDENCY | Dep.REQUIRED | Dep.TRIGGER | Dep.FRESH
"""Edge kinds under which the target reads the source's value."""
NEEDS_RUN = Dep.REQUIRED | Dep.DECLARATION
"""Edge kinds under which the source must have run once before the target first runs."""
USES = READS | Dep.DECLARATION
"""Edge kinds that tie statements together in loops and keep updates alive."""


@dataclass(frozen=True)
class DependencyGraph:
    """Statements and the dependencies between them.

    ``nodes`` are labels in program order (ties are always broken by it); ``edges``
    maps ``(A, B)`` to the kinds by which B depends on A (Required, Trigger and Fresh
    imply Dependency, which is added when missing); ``outputs`` are the statements
    whose values are needed at the end (marginals, evidence); ``user_initialized`` the
    messages the user gave initial values; ``describe`` optional text per node;
    ``no_init`` the statements whose initial (uniform) value may start the loop (their
    operators are annotated ``no_init``: the initialization schedule never runs them);
    ``sweeps`` the marginals that receive messages from several uses over a plate, each
    with how its loop sweeps them: ``("parallel" | "sequential", why)`` (see
    ``dependency_info``); the scheduler holds back updates of the parallel ones.
    """

    nodes: tuple[str, ...]
    edges: Mapping[tuple[str, str], Dep]
    outputs: frozenset[str] = frozenset()
    user_initialized: frozenset[str] = frozenset()
    describe: Mapping[str, str] = field(default_factory=dict)
    sweeps: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    no_init: frozenset[str] = frozenset()
    unaffected: frozenset[tuple[str, str]] = frozenset()

    def __post_init__(self) -> None:
        nodes = tuple(self.nodes)
        if len(set(nodes)) != len(nodes):
            raise ScheduleError("dependency graph has duplicate statement labels")
        known = set(nodes)
        edges, normal = {}, {}
        for (a, b), kind in self.edges.items():
            if kind not in normal:
                normal[kind] = kind | Dep.DEPENDENCY if kind & READS else kind
            if a not in known or b not in known:
                raise ScheduleError(f"edge {a} -> {b} names a statement not in the graph")
            if not kind:
                raise ScheduleError(f"edge {a} -> {b} carries no dependency kind")
            edges[a, b] = normal[kind]
        for name in ("outputs", "user_initialized", "no_init"):
            extra = set(getattr(self, name)) - known
            if extra:
                raise ScheduleError(f"{name} names unknown statements: {sorted(extra)}")
            object.__setattr__(self, name, frozenset(getattr(self, name)))
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "edges", MappingProxyType(edges))
        object.__setattr__(self, "describe", MappingProxyType(dict(self.describe)))
        extra = set(self.sweeps) - known
        if extra:
            raise ScheduleError(f"sweeps names unknown statements: {sorted(extra)}")
        object.__setattr__(self, "sweeps", MappingProxyType(dict(self.sweeps)))
        object.__setattr__(self, "unaffected", frozenset(self.unaffected))

    @cached_property
    def index(self) -> GraphIndex:
        """Integer adjacency lists of this graph (built once, shared by the passes)."""
        return GraphIndex(self)


Adjacency = list[tuple[int, ...]]


def _adjacency(n: int, pairs: Iterable[tuple[int, int]]) -> tuple[Adjacency, Adjacency]:
    src: dict[int, list[int]] = {}
    dst: dict[int, list[int]] = {}
    for a, b in sorted(pairs):
        dst.setdefault(a, []).append(b)
        src.setdefault(b, []).append(a)
    return ([tuple(src[b]) if b in src else () for b in range(n)],
            [tuple(dst[a]) if a in dst else () for a in range(n)])


class GraphIndex:
    """Adjacency of a ``DependencyGraph`` over node numbers (program order).

    ``*_src[b]`` lists the a with an edge (a, b) of that kind, ``*_dst[a]`` the b;
    lists are sorted. Closures are computed on first use and raise ScheduleError
    when the graph has a forbidden cycle.
    """

    def __init__(self, graph: DependencyGraph) -> None:
        self.labels = graph.nodes
        self.pos = {label: i for i, label in enumerate(graph.nodes)}
        self.unaffected = {(self.pos[a], self.pos[b]) for a, b in graph.unaffected
                           if a in self.pos and b in self.pos}
        n, pos = len(self.labels), self.pos
        masks = {"reads": READS.value, "need": NEEDS_RUN.value, "uses": USES.value,
                 "req": Dep.REQUIRED.value, "trig": Dep.TRIGGER.value, "fresh": Dep.FRESH.value,
                 "pref": Dep.PREFERRED.value}
        by_kind: dict[str, list[tuple[int, int]]] = {k: [] for k in (*masks, "all")}
        for (a, b), kind in graph.edges.items():
            pair, value = (pos[a], pos[b]), kind.value
            by_kind["all"].append(pair)
            for name, mask in masks.items():
                if value & mask:
                    by_kind[name].append(pair)
        self.reads_src, self.reads_dst = _adjacency(n, by_kind["reads"])
        self.need_src, self.need_dst = _adjacency(n, by_kind["need"])
        self.req_dst = _adjacency(n, by_kind["req"])[1]
        self.uses_src, self.uses_dst = _adjacency(n, by_kind["uses"])
        self.trig_src, self.trig_dst = _adjacency(n, by_kind["trig"])
        self.fresh_src, self.fresh_dst = _adjacency(n, by_kind["fresh"])
        self.pref_src = _adjacency(n, by_kind["pref"])[0]
        self.all_src, self.all_dst = _adjacency(n, by_kind["all"])

    @cached_property
    def triggers(self) -> list[tuple[int, ...]]:
        """``triggers[a]``: every node a invalidates, transitively, nearest first (less
        the graph's ``unaffected`` pairs)."""
        closure = self._closure(self.trig_dst, "Trigger")
        if not self.unaffected:
            return closure
        return [tuple(b for b in reach if (a, b) not in self.unaffected)
                for a, reach in enumerate(closure)]

    @cached_property
    def needs_fresh(self) -> list[tuple[int, ...]]:
        """``needs_fresh[b]``: every node b needs fresh, transitively, deepest first."""
        return self._closure(self.fresh_src, "Fresh")

    @cached_property
    def triggered_by(self) -> list[tuple[int, ...]]:
        """``triggered_by[b]``: every node that invalidates b, transitively."""
        return _reverse(self.triggers)

    @cached_property
    def fresh_for(self) -> list[tuple[int, ...]]:
        """``fresh_for[a]``: every node that needs a fresh, transitively."""
        return _reverse(self.needs_fresh)

    def _closure(self, succ: Adjacency, what: str) -> list[tuple[int, ...]]:
        order = topological_order(succ)
        if order is None:
            raise ScheduleError(_cycle_message(self, succ, what))
        rank = {node: r for r, node in enumerate(order)}
        closure: list[tuple[int, ...]] = [()] * len(succ)
        for node in reversed(order):
            reach = set(succ[node])
            for nxt in succ[node]:
                reach.update(closure[nxt])
            # Trigger: nearest first; Fresh: furthest source first (what must run first)
            closure[node] = tuple(sorted(reach, key=rank.__getitem__, reverse=what == "Fresh"))
        return closure


def _reverse(closure: Sequence[tuple[int, ...]]) -> list[tuple[int, ...]]:
    rev: dict[int, list[int]] = {}
    for a, reach in enumerate(closure):
        for b in reach:
            rev.setdefault(b, []).append(a)
    return [tuple(rev[b]) if b in rev else () for b in range(len(closure))]


def topological_order(succ: Sequence[Sequence[int]]) -> list[int] | None:
    """Kahn's order of a graph over 0..n-1, ties by smallest number; None if cyclic."""
    indegree = [0] * len(succ)
    for targets in succ:
        for b in targets:
            indegree[b] += 1
    ready = [a for a, d in enumerate(indegree) if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        a = heapq.heappop(ready)
        order.append(a)
        for b in succ[a]:
            indegree[b] -= 1
            if indegree[b] == 0:
                heapq.heappush(ready, b)
    return order if len(order) == len(succ) else None


def strong_components(succ: Sequence[Sequence[int]]) -> np.ndarray:
    """Label of the strongly connected component of each node: Tarjan's algorithm,
    iterative (a program's graph has hundreds of nodes: plain Python is faster than
    importing ``scipy.sparse.csgraph``, which alone took most of a cold first compile)."""
    n = len(succ)
    index, low = [-1] * n, [0] * n
    on_stack, stack = [False] * n, []
    labels = np.full(n, -1, dtype=np.int64)
    counter = components = 0
    for root in range(n):
        if index[root] >= 0:
            continue
        work = [(root, 0)]  # (node, position in its successor list)
        while work:
            a, i = work.pop()
            if i == 0:
                index[a] = low[a] = counter
                counter += 1
                stack.append(a)
                on_stack[a] = True
            targets = succ[a]
            while i < len(targets):
                b = targets[i]
                i += 1
                if index[b] < 0:  # descend into b; come back to a's next successor
                    work.append((a, i))
                    work.append((b, 0))
                    break
                if on_stack[b]:
                    low[a] = min(low[a], index[b])
            else:  # every successor done: a closes a component if it is its root
                if low[a] == index[a]:
                    while True:
                        b = stack.pop()
                        on_stack[b] = False
                        labels[b] = components
                        if b == a:
                            break
                    components += 1
                if work:  # propagate to the parent
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[a])
    return labels


def _cycles(succ: Sequence[Sequence[int]]) -> list[list[int]]:
    """One directed cycle through each cyclic strongly connected component."""
    labels = strong_components(succ)
    sizes = np.bincount(labels)
    cycles, seen = [], set()
    for start in range(len(succ)):
        comp = labels[start]
        if comp not in seen and (sizes[comp] > 1 or start in succ[start]):
            seen.add(comp)
            cycles.append(_cycle_through(start, succ, labels))
    return cycles


def _cycle_through(start: int, succ: Sequence[Sequence[int]], labels: np.ndarray) -> list[int]:
    """A shortest directed cycle start -> ... -> start inside start's component."""
    parent = {start: start}
    queue = deque([start])
    while queue:
        a = queue.popleft()
        for b in succ[a]:
            if b == start:
                path = [a]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return path[::-1]
            if labels[b] == labels[start] and b not in parent:
                parent[b] = a
                queue.append(b)
    raise AssertionError("a cyclic component always has a cycle through each node")


def _cycle_message(ix: GraphIndex, succ: Sequence[Sequence[int]], what: str) -> str:
    lines = []
    for cycle in _cycles(succ):
        names = [ix.labels[i] for i in cycle] + [ix.labels[cycle[0]]]
        lines.append(f"directed cycle of {what} edges: {' -> '.join(names)}")
    return "; ".join(lines)


def check(graph: DependencyGraph) -> None:
    """Raise ScheduleError naming the statements on every forbidden directed cycle.

    Forbidden are cycles of Required edges, of Trigger edges and of Fresh edges
    (each kind on its own, as the seed says); other cycles become loops.
    """
    ix = graph.index
    problems = [_cycle_message(ix, succ, what)
                for succ, what in ((ix.req_dst, "Required"), (ix.trig_dst, "Trigger"),
                                   (ix.fresh_dst, "Fresh"))]
    problems = [p for p in problems if p]
    if problems:
        raise ScheduleError("; ".join(problems))


def needed(graph: DependencyGraph) -> frozenset[str]:
    """Statements from which an output can be reached along edges of any kind."""
    ix = graph.index
    reached = {ix.pos[o] for o in graph.outputs}
    queue = deque(reached)
    while queue:  # backwards along every edge, from the outputs
        b = queue.popleft()
        for a in ix.all_src[b]:
            if a not in reached:
                reached.add(a)
                queue.append(a)
    return frozenset(ix.labels[i] for i in reached)


def sources(graph: DependencyGraph, node: str, kind: Dep = Dep.DEPENDENCY) -> tuple[str, ...]:
    """The A with an edge (A, node) carrying any of ``kind``, in program order."""
    ix = graph.index
    return tuple(ix.labels[a] for a in ix.all_src[ix.pos[node]]
                 if graph.edges[ix.labels[a], node] & kind)


def targets(graph: DependencyGraph, node: str, kind: Dep = Dep.DEPENDENCY) -> tuple[str, ...]:
    """The B with an edge (node, B) carrying any of ``kind``, in program order."""
    ix = graph.index
    return tuple(ix.labels[b] for b in ix.all_dst[ix.pos[node]]
                 if graph.edges[node, ix.labels[b]] & kind)


def trigger_closure(graph: DependencyGraph) -> dict[str, frozenset[str]]:
    """Each statement mapped to every statement it invalidates, transitively."""
    ix = graph.index
    return {ix.labels[a]: frozenset(ix.labels[b] for b in reach)
            for a, reach in enumerate(ix.triggers)}


def fresh_closure(graph: DependencyGraph) -> dict[str, frozenset[str]]:
    """Each statement mapped to every statement it needs fresh, transitively."""
    ix = graph.index
    return {ix.labels[b]: frozenset(ix.labels[a] for a in reach)
            for b, reach in enumerate(ix.needs_fresh)}
