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
    """The terms of each e-class, by size. ``terms(c, n)`` is sorted and duplicate-free.

    For an op in ``associative`` the terms of its e-nodes include every flattening: an
    argument whose class holds a term with the same op may be that term or, spliced in,
    that term's arguments (``(a + b) + c`` and ``a + b + c``), recursively. A spliced
    argument loses the node of its op, so flattened terms are smaller.
    """

    def __init__(self, classes: dict[ClassId, tuple[ENode, ...]],
                 associative: frozenset[str] = frozenset()) -> None:
        self.classes = classes
        self.associative = associative
        self.memo: dict[tuple[ClassId, int], tuple[Term, ...]] = {}
        self.pieces_memo: dict[tuple[ClassId, str, int], tuple[tuple[Term, ...], ...]] = {}
        self.min_size, self.min_op_size = self._fixpoint(lambda op, payload: 1.0)

    def _fixpoint(self, cost: Any) -> tuple[dict[ClassId, float],
                                            dict[tuple[ClassId, str], float]]:
        """The least cost of each class, and of its terms with a given associative op on
        top, over all (flattened) terms: Bellman-Ford over the e-graph."""
        inf = float("inf")
        best = {c: inf for c in self.classes}
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
                    if n.op in self.associative and value < best_op.get((c, n.op), inf):
                        best_op[c, n.op], changed = value, True
        return best, best_op

    def _piece_cost(self, best: dict[ClassId, float], best_op: dict[tuple[ClassId, str], float],
                    child: ClassId, op: str, cost: Any) -> float:
        whole = best.get(child, float("inf"))
        if op not in self.associative:
            return whole
        return min(whole, best_op.get((child, op), float("inf")) - cost(op, None))

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
                    for args in self._splits(node.op, node.children, n - 1):
                        found[Term(node.op, args, node.payload)] = None
            self.memo[key] = tuple(sorted(found, key=lambda t: t.order_key))
        return self.memo[key]

    def _pieces(self, c: ClassId, op: str, n: int) -> tuple[tuple[Term, ...], ...]:
        """The argument lists of total size ``n`` that class ``c`` contributes to an ``op``
        e-node: one term of ``c``, or (``op`` associative) the arguments of one of its
        ``op`` terms."""
        if op not in self.associative:
            return tuple((t,) for t in self.terms(c, n))
        key = (c, op, n)
        if key not in self.pieces_memo:
            whole = [(t,) for t in self.terms(c, n)]
            spliced = [t.args for t in self.terms(c, n + 1) if t.op == op]
            self.pieces_memo[key] = tuple(whole + spliced)
        return self.pieces_memo[key]

    def _piece_min(self, c: ClassId, op: str) -> float:
        return self._piece_cost(self.min_size, self.min_op_size, c, op, lambda o, p: 1.0)

    def _splits(self, op: str, children: tuple[ClassId, ...], total: int
                ) -> Iterator[tuple[Term, ...]]:
        if not children:
            if total == 0:
                yield ()
            return
        first, rest = children[0], children[1:]
        rest_min = sum(self._piece_min(ch, op) for ch in rest)
        first_min = self._piece_min(first, op)
        if first_min == float("inf") or rest_min == float("inf"):
            return
        k = int(first_min)
        while k + rest_min <= total:
            heads = self._pieces(first, op, k)
            if heads:
                for tail in self._splits(op, rest, total - k):
                    for head in heads:
                        yield (*head, *tail)
            k += 1

    def cheapest(self, root: ClassId, cost: Any) -> Term:
        """A term of least total ``cost`` (positive per node) in ``root``'s class."""
        best, best_op = self._fixpoint(cost)
        memo: dict[tuple[ClassId, str | None], Term] = {}

        def build(c: ClassId, top: str | None) -> Term:
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
                    if n.op in self.associative and piece < best.get(ch, float("inf")):
                        args.extend(build(ch, n.op).args)
                    else:
                        args.append(build(ch, None))
                memo[c, top] = Term(n.op, tuple(args), n.payload)
                return memo[c, top]
            raise RuntimeError(f"no e-node of class {c} reaches its least cost {target}")

        return build(root, None)


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
