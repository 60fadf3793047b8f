"""The terms an e-class represents, enumerated lazily, smallest first, each once.

A saturated e-graph is read back (from egglog's frozen tables) as a map from e-class to
e-nodes ``(op, payload, child classes)``. The terms of size exactly ``n`` in a class are
the e-nodes' ops over every split of ``n - 1`` among their child classes; they are
computed on demand and memoized per ``(class, n)``, so sizes are visited in increasing
order and each term is built once. Sizes strictly decrease towards children, so the
recursion terminates even when the e-graph has cycles (``log(exp(a)) = a`` makes one):
then the language is infinite and the stream is unbounded unless limited. Sum and
product e-nodes with fewer than two arguments are representation artifacts (they are
unioned with their element, or with 0 / 1) and are skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from egglog import EGraph

from factorflow.rewrite.egglog_terms import CONSTRUCTORS
from factorflow.rewrite.terms import COMMUTATIVE, CONST, DATA, INDEX, INDEX_SUM, SYM, Term

ClassId = Any


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
    times slower on large e-graphs.
    """
    core = egraph._egraph
    frozen = core.freeze()
    found: dict[ClassId, list[ENode]] = {}
    for name, function in frozen.functions.items():
        op = name.rsplit("tm_", 1)[-1]
        if op not in CONSTRUCTORS:
            continue
        for row in function.rows:
            node = _enode(core, op, row.inputs)
            if node is not None:
                found.setdefault(row.output, []).append(node)
    root = frozen.functions["$root"].rows[0].output
    return {c: tuple(nodes) for c, nodes in found.items()}, root


def _enode(core: Any, op: str, inputs: list[Any]) -> ENode | None:
    if op == CONST:
        return ENode(op, core.value_to_f64(inputs[0]) + 0.0, ())
    if op in (SYM, DATA):
        indices = core.value_to_string(inputs[1])
        return ENode(op, (core.value_to_string(inputs[0]),
                          tuple(indices.split(",")) if indices else ()), ())
    if op in COMMUTATIVE:
        elements = tuple(core.value_to_multiset(inputs[0]))
        return ENode(op, None, elements) if len(elements) >= 2 else None
    if op in (INDEX, INDEX_SUM):
        return ENode(op, core.value_to_string(inputs[1]), (inputs[0],))
    return ENode(op, None, tuple(inputs))


class Language:
    """The terms of each e-class, by size. ``terms(c, n)`` is sorted and duplicate-free."""

    def __init__(self, classes: dict[ClassId, tuple[ENode, ...]]) -> None:
        self.classes = classes
        self.memo: dict[tuple[ClassId, int], tuple[Term, ...]] = {}
        self.min_size = self._min_sizes()

    def _min_sizes(self) -> dict[ClassId, float]:
        best = {c: float("inf") for c in self.classes}
        changed = True
        while changed:
            changed = False
            for c, nodes in self.classes.items():
                for n in nodes:
                    size = 1 + sum(best.get(ch, float("inf")) for ch in n.children)
                    if size < best[c]:
                        best[c], changed = size, True
        return best

    def max_size(self, root: ClassId) -> float:
        """The size of the largest term of ``root``'s class (inf when there are infinitely many)."""
        memo: dict[ClassId, float] = {}
        active: set[ClassId] = set()

        def go(c: ClassId) -> float:
            if c in memo:
                return memo[c]
            if c in active:
                return float("inf")
            active.add(c)
            memo[c] = max(1 + sum(go(ch) for ch in n.children) for n in self.classes[c])
            active.discard(c)
            return memo[c]

        return go(root)

    def terms(self, c: ClassId, n: int) -> tuple[Term, ...]:
        key = (c, n)
        if key not in self.memo:
            found: dict[Term, None] = {}
            if n >= self.min_size.get(c, float("inf")):
                for node in self.classes[c]:
                    for args in self._splits(node.children, n - 1):
                        found[Term(node.op, args, node.payload)] = None
            self.memo[key] = tuple(sorted(found, key=lambda t: t.order_key))
        return self.memo[key]

    def _splits(self, children: tuple[ClassId, ...], total: int) -> Iterator[tuple[Term, ...]]:
        if not children:
            if total == 0:
                yield ()
            return
        first, rest = children[0], children[1:]
        rest_min = sum(self.min_size.get(ch, float("inf")) for ch in rest)
        if first not in self.min_size or rest_min == float("inf"):
            return
        k = int(self.min_size[first])
        while k + rest_min <= total:
            heads = self.terms(first, k)
            if heads:
                for tail in self._splits(rest, total - k):
                    for head in heads:
                        yield (head, *tail)
            k += 1


def stream_terms(language: Language, root: ClassId, *, max_terms: int | None = None,
                 max_term_size: int | None = None) -> Iterator[Term]:
    """Every term of ``root``'s class, by increasing size (then canonical order), each once.

    Stops after ``max_terms`` terms, above ``max_term_size`` nodes, or when the class has
    no larger terms; with neither limit and a cyclic class it never stops by itself.
    """
    top = language.max_size(root)
    if max_term_size is not None:
        top = min(top, max_term_size)
    n, count = int(language.min_size[root]), 0
    while n <= top:
        for t in language.terms(root, n):
            if max_terms is not None and count >= max_terms:
                return
            count += 1
            yield t
        n += 1
