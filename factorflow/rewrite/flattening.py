"""Complete associativity for the lazy e-graph: classes with a common flattening are one.

With associativity lazy (see :mod:`factorflow.rewrite.egraph`), the e-graph keeps every
sum as loaded or built, nested, and never stores its flattenings. Eager flattening
would make two classes one as soon as some flattening of one equals some flattening of
the other: ``a + (b + (c + d))`` and ``a + b + c + d``, or ``a + (b + c)`` and
``(a + b) + c``. This pass finds those pairs without building a single flattening as an
e-node, so the e-graph stays the size of the rewrites (linear in the term on chains and
balanced trees):

* A *maximal flattening* of a sum e-node is the multiset of classes obtained by
  replacing every member whose class holds a sum e-node by a maximal flattening of one
  of those e-nodes, recursively. Flattening is transitive, so if two classes share any
  flattening they share a maximal one (flatten the common one further, with the same
  choices); and a class without cycles through sums has finitely many.
* :func:`shared_flattenings` computes them per class (memoized, children first) as
  hashable multisets, and returns the pairs of distinct classes that share one. The
  caller unions each pair and saturates again (new equalities may fire rules and make
  new sums), until a pass finds none.

Limits, both only ever leave a pair out (every pair returned is a true equality):
through a cycle of sums (a class holding a sum with itself as a member, as ``0 + a = a``
makes) the flattening keeps the repeated class as a member instead of recursing; and a
sum e-node whose members have more than ``cap`` maximal flattenings between them (a
product of many alternatives, the exponential set lazy associativity exists to avoid)
keeps only the first ``cap`` of them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from factorflow.rewrite.termstream import ClassId, ENode

#: A multiset of classes, as its sorted (class, count) pairs.
Flat = tuple[tuple[ClassId, int], ...]


def shared_flattenings(classes: Mapping[ClassId, tuple[ENode, ...]], ops: frozenset[str], *,
                       cap: int = 256) -> list[tuple[ClassId, ClassId]]:
    """Pairs of distinct classes with a common maximal flattening under an op of ``ops``
    (one pair per class joined to the first class with that flattening)."""
    pairs: list[tuple[ClassId, ClassId]] = []
    for op in sorted(ops):
        owner: dict[Flat, ClassId] = {}
        for c, flats in _maximal_flattenings(classes, op, cap).items():
            for flat in flats:
                first = owner.setdefault(flat, c)
                if first != c:
                    pairs.append((first, c))
    return pairs


def _maximal_flattenings(classes: Mapping[ClassId, tuple[ENode, ...]], op: str, cap: int
                         ) -> dict[ClassId, list[Flat]]:
    """For each class with an ``op`` e-node, its maximal flattenings (at most ``cap`` per
    e-node), without duplicates."""
    holders = {c for c, nodes in classes.items() if any(n.op == op for n in nodes)}
    memo: dict[ClassId, list[Counter[ClassId]]] = {}
    active: set[ClassId] = set()

    def flats(c: ClassId) -> list[Counter[ClassId]]:
        if c in memo:
            return memo[c]
        active.add(c)
        found: dict[Flat, Counter[ClassId]] = {}
        for node in classes[c]:
            if node.op != op:
                continue
            combos: list[Counter[ClassId]] = [Counter()]
            for member in node.children:
                options = (flats(member) if member in holders and member not in active
                           else [Counter({member: 1})])
                combos = [a + b for a in combos for b in options][:cap]
            for combo in combos:
                found.setdefault(_key(combo), combo)
        active.discard(c)
        memo[c] = list(found.values())
        return memo[c]

    return {c: [_key(f) for f in flats(c)] for c in sorted(holders)}


def _key(multiset: Counter[ClassId]) -> Flat:
    return tuple(sorted(multiset.items()))
