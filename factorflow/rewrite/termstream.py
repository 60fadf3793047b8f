"""The terms an e-class represents, enumerated lazily by increasing size, each once.

A saturated e-graph is read back (from egglog's frozen tables) as a map from e-class to
e-nodes ``(op, payload, child classes)``. The terms of size exactly ``n`` in a class with
a given op on top are produced by a generator over the e-nodes with that op and every
split of ``n - 1`` among their children, and memoized as a *lazy sequence*: an element is
built when some consumer first asks for it, so the first term of a class costs one path
of the recursion, not every term of its size (the first five terms of the class of a
balanced sum of 12,499 nodes come in about as long as reading the e-graph takes, under a
second, where building each size in full took 40 s to minutes:
``benchmarks/bench_rewrite.py``). Sizes
strictly decrease towards children, so the recursion terminates even when the e-graph
has cycles (``log(exp(a)) = a`` makes one): then the language is infinite and the stream
is unbounded unless limited. Sum and product e-nodes with fewer than two arguments are
representation artifacts (they are unioned with their element, or with 0 / 1) and are
skipped.

Order. :func:`stream_terms` yields terms by nondecreasing size; within one size the order
is the generation order (e-nodes in the order the e-graph lists them, then splits of the
size among the children, then the children's own terms in that order): deterministic for
one e-graph, but not sorted (sorting a size would build all of its terms first).
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from egglog import EGraph

from factorflow.rewrite.egglog_terms import CONSTRUCTORS
from factorflow.rewrite.terms import COMMUTATIVE, CONST, DATA, INDEX, INDEX_SUM, SYM, Term

ClassId = Any
INF = float("inf")


@dataclass(frozen=True)
class ENode:
    """One e-node: an op, its payload and the e-classes of its arguments."""

    op: str
    payload: Any
    children: tuple[ClassId, ...]


def read_egraph(egraph: EGraph) -> tuple[dict[ClassId, tuple[ENode, ...]], ClassId]:
    """The e-classes of the ``Tm`` sort and the class of the term bound to ``root``.

    Reads the tables of egglog's core e-graph directly (``EGraph._egraph.freeze()``): the
    public ``EGraph.freeze()`` builds Python declarations for every row and is some 300
    times slower on large e-graphs. Classes are numbered 0, 1, ... in the order read.
    """
    core = egraph._egraph
    frozen = core.freeze()
    found: dict[ClassId, list[ENode]] = {}
    number: dict[Any, int] = {}
    for name, function in frozen.functions.items():
        op = name.rsplit("tm_", 1)[-1]
        if op not in CONSTRUCTORS:
            continue
        for row in function.rows:
            node = _enode(core, op, row.inputs, number)
            if node is not None:
                found.setdefault(number.setdefault(row.output, len(number)), []).append(node)
    root = number[frozen.functions["$root"].rows[0].output]
    return {c: tuple(nodes) for c, nodes in found.items()}, root


def _enode(core: Any, op: str, inputs: list[Any], number: dict[Any, int]) -> ENode | None:
    if op == CONST:
        return ENode(op, core.value_to_f64(inputs[0]) + 0.0, ())
    if op in (SYM, DATA):
        indices = core.value_to_string(inputs[1])
        return ENode(op, (core.value_to_string(inputs[0]),
                          tuple(indices.split(",")) if indices else ()), ())
    if op in COMMUTATIVE:
        elements = tuple(number.setdefault(e, len(number))
                         for e in core.value_to_multiset(inputs[0]))
        return ENode(op, None, elements) if len(elements) >= 2 else None
    if op in (INDEX, INDEX_SUM):
        return ENode(op, core.value_to_string(inputs[1]),
                     (number.setdefault(inputs[0], len(number)),))
    return ENode(op, None, tuple(number.setdefault(i, len(number)) for i in inputs))


class Lazy:
    """A memoized lazy sequence: ``get(i)`` runs the source until it has ``i + 1`` items."""

    __slots__ = ("items", "source")

    def __init__(self, source: Iterable[Any]) -> None:
        self.items: list[Any] = []
        self.source: Iterator[Any] | None = iter(source)

    def get(self, i: int) -> Any:
        """The ``i``-th item, or None when the sequence has fewer."""
        while len(self.items) <= i and self.source is not None:
            item = next(self.source, None)
            if item is None:
                self.source = None
            else:
                self.items.append(item)
        return self.items[i] if i < len(self.items) else None

    def __iter__(self) -> Iterator[Any]:
        i = 0
        while (item := self.get(i)) is not None:
            yield item
            i += 1


class Language:
    """The terms of each e-class, by size, as lazy duplicate-free sequences.

    For an op in ``associative`` the terms of its e-nodes include every flattening: an
    argument whose class holds a term with the same op may be that term or, spliced in,
    that term's arguments (``(a + b) + c`` and ``a + b + c``), recursively. A spliced
    argument loses the node of its op, so flattened terms are smaller.
    """

    def __init__(self, classes: dict[ClassId, tuple[ENode, ...]],
                 associative: frozenset[str] = frozenset()) -> None:
        self.classes = classes
        self.associative = associative
        self.ops = {c: tuple(dict.fromkeys(n.op for n in nodes)) for c, nodes in classes.items()}
        self.memo: dict[tuple[Any, ...], Lazy] = {}
        self.min_size, self.min_op_size = self._fixpoint(lambda op, payload: 1.0)
        self.max_sizes: dict[ClassId, float] | None = None
        #: per e-node (by id: the nodes live as long as the language), its children's
        #: least and greatest piece sizes
        self.bounds: dict[int, tuple[list[int] | None, list[float]]] = {}

    def _fixpoint(self, cost: Any) -> tuple[dict[ClassId, float],
                                            dict[tuple[ClassId, str], float]]:
        """The least cost of each class, and of its terms with a given associative op on
        top, over all (flattened) terms: Bellman-Ford over the e-graph."""
        best = {c: INF for c in self.classes}
        best_op: dict[tuple[ClassId, str], float] = {}
        changed = True
        while changed:
            changed = False
            for c, nodes in self.classes.items():
                for n in nodes:
                    value = cost(n.op, n.payload) + sum(
                        self._piece_cost(best, best_op, ch, n.op, cost) for ch in n.children)
                    if value < best[c]:
                        best[c], changed = value, True
                    if n.op in self.associative and value < best_op.get((c, n.op), INF):
                        best_op[c, n.op], changed = value, True
        return best, best_op

    def _piece_cost(self, best: dict[ClassId, float], best_op: dict[tuple[ClassId, str], float],
                    child: ClassId, op: str, cost: Any) -> float:
        whole = best.get(child, INF)
        if op not in self.associative:
            return whole
        return min(whole, best_op.get((child, op), INF) - cost(op, None))

    def max_size(self, c: ClassId) -> float:
        """The size of the largest term of class ``c`` (inf when there are infinitely many)."""
        if self.max_sizes is None:
            self.max_sizes = self._max_sizes()
        return self.max_sizes.get(c, INF)

    def _max_sizes(self) -> dict[ClassId, float]:
        """Largest term sizes, children before parents (Kahn's order over e-nodes that have
        terms); a class never reached lies on or above a cycle and has infinitely many."""
        live = {c: [n for n in nodes if all(self.min_size.get(ch, INF) < INF for ch in n.children)]
                for c, nodes in self.classes.items()}
        waiting = {c: sum(len(n.children) for n in nodes) for c, nodes in live.items()}
        parents: dict[ClassId, list[ClassId]] = {}
        for c, nodes in live.items():
            for n in nodes:
                for ch in n.children:
                    parents.setdefault(ch, []).append(c)
        ready = [c for c, w in waiting.items() if w == 0 and live[c]]
        out: dict[ClassId, float] = {}
        while ready:
            c = ready.pop()
            out[c] = max(1 + sum(out[ch] for ch in n.children) for n in live[c])
            for p in parents.get(c, ()):
                waiting[p] -= 1
                if waiting[p] == 0:
                    ready.append(p)
        return out

    def terms(self, c: ClassId, n: int) -> Lazy:
        """The terms of class ``c`` with ``n`` nodes (distinct: their ops differ)."""
        key = (c, n)
        if key not in self.memo:
            self.memo[key] = Lazy(t for op in self.ops.get(c, ()) for t in self.op_terms(c, op, n))
        return self.memo[key]

    def op_terms(self, c: ClassId, op: str, n: int) -> Lazy:
        """The distinct terms of class ``c`` with ``n`` nodes and ``op`` on top."""
        key = (c, op, n)
        if key not in self.memo:
            self.memo[key] = Lazy(self._generate(c, op, n))
        return self.memo[key]

    def _generate(self, c: ClassId, op: str, n: int) -> Iterator[Term]:
        seen: set[Term] = set()
        for node in self.classes.get(c, ()):
            if node.op != op:
                continue
            for args in self._splits(node, n - 1):
                t = Term(node.op, args, node.payload)
                if t not in seen:
                    seen.add(t)
                    yield t

    def _pieces(self, c: ClassId, op: str, n: int) -> Lazy:
        """The argument lists of total size ``n`` that class ``c`` contributes to an ``op``
        e-node: one term of ``c``, or (``op`` associative) the arguments of one of its
        ``op`` terms."""
        key = (c, op, n, "pieces")
        if key not in self.memo:
            whole = ((t,) for t in self.terms(c, n))
            if op in self.associative:
                spliced = (t.args for t in self.op_terms(c, op, n + 1))
                self.memo[key] = Lazy(piece for part in (whole, spliced) for piece in part)
            else:
                self.memo[key] = Lazy(whole)
        return self.memo[key]

    def _piece_min(self, c: ClassId, op: str) -> float:
        return self._piece_cost(self.min_size, self.min_op_size, c, op, lambda o, p: 1.0)

    def _splits(self, node: ENode, total: int) -> Iterator[tuple[Term, ...]]:
        """Every argument tuple of ``node`` (pieces concatenated) of ``total`` nodes."""
        children = node.children
        bounds = self.bounds.get(id(node))
        if bounds is None:
            lows = [self._piece_min(ch, node.op) for ch in children]
            bounds = self.bounds[id(node)] = (
                None if INF in lows else [int(x) for x in lows],
                [self.max_size(ch) for ch in children])
        lows, highs = bounds
        if lows is None:
            return
        def allowed(i: int, k: int) -> bool:
            return self._pieces(children[i], node.op, k).get(0) is not None

        for sizes in compositions(lows, highs, total, allowed):
            seqs = [self._pieces(ch, node.op, k) for ch, k in zip(children, sizes, strict=True)]
            for pieces in lazy_product(seqs):
                yield tuple(a for piece in pieces for a in piece)

    def cheapest(self, root: ClassId, cost: Any) -> Term:
        """A term of least total ``cost`` (positive per node) in ``root``'s class."""
        return self.builder(cost)(root)

    def builder(self, cost: Any) -> Callable[[ClassId], Term]:
        """A function giving, for any class, a term of least total ``cost`` in it."""
        best, best_op = self._fixpoint(cost)
        memo: dict[tuple[ClassId, str | None], Term] = {}

        def build(c: ClassId, top: str | None = None) -> Term:
            """The cheapest term of ``c`` (with ``top`` as its op, when given)."""
            if (c, top) in memo:
                return memo[c, top]
            target = best[c] if top is None else best_op[c, top]
            for n in self.classes[c]:
                if top is not None and n.op != top:
                    continue
                pieces = [self._piece_cost(best, best_op, ch, n.op, cost) for ch in n.children]
                if cost(n.op, n.payload) + sum(pieces) != target:
                    continue
                args: list[Term] = []
                for ch, piece in zip(n.children, pieces, strict=True):
                    if n.op in self.associative and piece < best.get(ch, INF):
                        args.extend(build(ch, n.op).args)
                    else:
                        args.append(build(ch, None))
                memo[c, top] = Term(n.op, tuple(args), n.payload)
                return memo[c, top]
            raise RuntimeError(f"no e-node of class {c} reaches its least cost {target}")

        return build


def compositions(lows: list[int], highs: list[float], total: int,
                 allowed: Callable[[int, int], bool]) -> Iterator[tuple[int, ...]]:
    """Every tuple ``k`` with ``lows[i] <= k[i] <= highs[i]`` and ``allowed(i, k[i])``
    summing to ``total``, in lexicographic order. A depth-first search that prunes at
    the first position with no allowed size, written without recursion (sums of
    thousands of arguments are fine)."""
    m = len(lows)
    suffix_low, suffix_high = [0] * (m + 1), [0.0] * (m + 1)
    for i in reversed(range(m)):
        suffix_low[i] = suffix_low[i + 1] + lows[i]
        suffix_high[i] = suffix_high[i + 1] + highs[i]
    if not suffix_low[0] <= total <= suffix_high[0]:
        return
    if m == 0:
        yield ()
        return
    k, left = [-1] * m, [total] * (m + 1)
    i = 0
    while i >= 0:
        low = max(lows[i], left[i] - suffix_high[i + 1])
        high = min(highs[i], left[i] - suffix_low[i + 1])
        size = int(max(k[i] + 1, low))
        while size <= high and not allowed(i, size):
            size += 1
        if size > high:
            k[i] = -1
            i -= 1
            continue
        k[i] = size
        if i == m - 1:
            yield tuple(k)
        else:
            left[i + 1] = left[i] - size
            i += 1


def lazy_product(seqs: list[Lazy]) -> Iterator[tuple[Any, ...]]:
    """The Cartesian product of lazy sequences, built on demand (last varies fastest)."""
    if any(s.get(0) is None for s in seqs):
        return
    index = [0] * len(seqs)
    while True:
        yield tuple(s.items[i] for s, i in zip(seqs, index, strict=True))
        j = len(seqs) - 1
        while j >= 0:
            index[j] += 1
            if seqs[j].get(index[j]) is not None:
                break
            index[j] = 0
            j -= 1
        if j < 0:
            return


def stream_terms(language: Language, root: ClassId, *, max_terms: int | None = None,
                 max_term_size: int | None = None) -> Iterator[Term]:
    """Every term of ``root``'s class, each once, by nondecreasing size (within one size in
    the generation order of the module docstring). Lazy: a term is built when it is
    requested.

    Stops after ``max_terms`` terms, above ``max_term_size`` nodes, or when the class has
    no larger terms; with neither limit and a cyclic class it never stops by itself.
    """
    top = language.max_size(root)
    if max_term_size is not None:
        top = min(top, max_term_size)
    n, count = int(language.min_size[root]), 0
    while n <= top:
        terms, i = language.terms(root, n), 0
        while True:
            if max_terms is not None and count >= max_terms:
                return
            with _collection_paused(), recursion_limit(20_000):
                t = terms.get(i)
            if t is None:
                break
            count, i = count + 1, i + 1
            yield t
        n += 1


@contextmanager
def _collection_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while one term is built: building allocates
    many small containers and generators, and the collections they trigger rescan every
    interned term (four times the work on a 12,499-node class). Nothing built is cyclic."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextmanager
def recursion_limit(limit: int) -> Iterator[None]:
    """Raise Python's recursion limit to at least ``limit`` inside the block: egglog
    converts a term with some eight nested calls per level, so a chain of 200 nested
    sums passes the default limit of 1,000."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)
