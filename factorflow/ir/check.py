"""The IR verifier: run after every pass in tests and with ``debug=True``."""

from __future__ import annotations

from collections import Counter

from factorflow.errors import ModelError
from factorflow.ir.nodes import For, If, Node, Program, Ref, Stmt, While, refs_in


class IRError(ModelError):
    """A pass produced an ill-formed program (a compiler bug, not a user error)."""


def check(program: Program) -> Program:
    """Raise IRError unless every name is declared once (ranges and variables share one
    namespace), every reference is declared, every ``for`` names a declared range, index
    items name declared ranges, and every ``if`` condition is well formed (a switch names
    an enclosing ``for``; only a boolean ``if`` is negated; case values are non-negative).

    (Flat message programs index by plate outside any ``for``: a plate index there means
    the whole plate axis.)"""
    names = [d.name for d in program.decls]
    counts = Counter(names + [r for r, _ in program.ranges])
    dup = {n for n, k in counts.items() if k > 1}
    if dup:
        raise IRError(f"{program.name}: declared more than once: {sorted(dup)}")
    declared = set(names)
    ranges = {r for r, _ in program.ranges}
    for d in program.decls:
        bad = [p for p in d.plates if p not in ranges]
        if bad:
            raise IRError(f"{program.name}: {d.name} uses undeclared ranges {bad}")

    def visit(nodes: tuple[Node, ...], loops: tuple[str, ...]) -> None:
        for node in nodes:
            if isinstance(node, For):
                if node.range not in ranges:
                    raise IRError(f"{program.name}: for over undeclared range {node.range}")
                visit(node.body, loops + (node.range,))
            elif isinstance(node, If):
                _check_ref(node.condition, loops)
                _check_condition(node, loops)
                visit(node.body, loops)
            elif isinstance(node, While):
                visit(node.init, loops)
                visit(node.body, loops)
            elif isinstance(node, Stmt):
                for ref in node.outputs:
                    _check_ref(ref, loops)
                for _, operand in node.inputs:
                    if isinstance(operand, Ref):
                        _check_ref(operand, loops)

    def _check_condition(node: If, loops: tuple[str, ...]) -> None:
        what = f"{program.name}: if on {node.condition.var}"
        if node.negated and node.value is not None:
            raise IRError(f"{what}: only a boolean if (no value) can be negated")
        if isinstance(node.value, str) and node.value not in loops:
            raise IRError(f"{what} == {node.value}: a switch needs an enclosing for over "
                          f"{node.value}")
        if (isinstance(node.value, int) and not isinstance(node.value, bool)
                and node.value < 0):
            raise IRError(f"{what} == {node.value}: a case value must be non-negative")

    def _check_ref(ref: Ref, loops: tuple[str, ...]) -> None:
        for name in refs_in(ref):
            if name not in declared:
                raise IRError(f"{program.name}: {name} is used but not declared")
        for item in ref.index:
            if isinstance(item, str) and item not in ranges:
                raise IRError(f"{program.name}: {ref.var} indexed by undeclared range {item}")

    visit(program.body, ())
    return program
