"""The statement IR: a program is a list of frozen statements inside blocks.

Modelled on Infer.NET's MSL and JAX's ``JaxprEqn``: declarations, assignments
``outputs = op(inputs)``, ``for`` blocks over ranges (plates: array axes, never a Python
loop per datum), ``if`` blocks for gates and ``while`` blocks for iteration.  Everything is
immutable; passes build new programs with ``dataclasses.replace``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Ref:
    """A reference to a variable, optionally indexed: ``x[n]``, ``skill[winner[n]]``.

    Index items are range names (the loop index of an enclosing ``For``), integers, or
    other references (a gather by observed integers).
    """

    var: str
    index: tuple[str | int | Ref, ...] = ()


@dataclass(frozen=True, slots=True)
class Const:
    """A literal scalar known at compile time."""

    value: Any


@dataclass(frozen=True, slots=True)
class Arange:
    """The values 0..size-1 of a range, as a constant argument (a switch's case index)."""

    range: str


Operand = Ref | Const


@dataclass(frozen=True, slots=True)
class VarDecl:
    """A declared variable.

    ``role``: random | observed | constant | message | marginal;  ``domain``: the value
    domain of a model variable; ``family``: the distribution family of a message;
    ``plates``: its array axes (range names); ``event``: categories/dimension if any.
    """

    name: str
    role: str
    domain: str | None = None
    family: str | None = None
    plates: tuple[str, ...] = ()
    event: int | None = None
    label: str = ""
    attrs: tuple[tuple[str, Any], ...] = ()

    def attr(self, key: str, default: Any = None) -> Any:
        return dict(self.attrs).get(key, default)


@dataclass(frozen=True, slots=True)
class Stmt:
    """``outputs = op(inputs)``: one factor call, message update or variable node."""

    op: str
    outputs: tuple[Ref, ...]
    inputs: tuple[tuple[str, Operand], ...] = ()
    params: tuple[tuple[str, Any], ...] = ()
    provenance: str = ""

    def param(self, key: str, default: Any = None) -> Any:
        return dict(self.params).get(key, default)

    def input(self, key: str) -> Operand:
        return dict(self.inputs)[key]


@dataclass(frozen=True, slots=True)
class For:
    """The body runs once per element of ``range`` — as one array operation per statement."""

    range: str
    body: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class If:
    """The body applies where the condition holds (gates).

    Three kinds of condition, as in Infer.NET's MSL:

    * ``value`` None — an *if*: ``condition`` is boolean; the body applies where it is
      true, or where it is false when ``negated`` (an else branch is a second, negated
      ``If`` on the same condition);
    * ``value`` an int or bool literal — a *case*: the body applies where
      ``condition == value``;
    * ``value`` a str — a *switch*: the name of an enclosing ``For`` range over all values
      of ``condition``; the body applies where ``condition`` equals that loop's index.
    """

    condition: Ref
    body: tuple[Node, ...]
    value: int | bool | str | None = None
    negated: bool = False

    @property
    def kind(self) -> str:
        """"if", "case" or "switch"."""
        if self.value is None:
            return "if"
        return "switch" if isinstance(self.value, str) else "case"


@dataclass(frozen=True, slots=True)
class While:
    """The iteration loop of message passing (``init`` runs once before it).

    Nested in another loop's body, an inner loop (``sweeps`` set): each outer sweep it
    resets the messages named in ``restart`` to their starting values, runs ``init``,
    then ``body`` at most ``sweeps`` times, stopping early once its posteriors change by
    less than ``tolerance`` (``transforms/local_loop.py``); with ``each`` (posteriors'
    names) each element of those posteriors stops on its own once its change is below
    ``tolerance`` and keeps its value, the loop ending once all have stopped."""

    body: tuple[Node, ...]
    init: tuple[Node, ...] = ()
    sweeps: int | None = None
    tolerance: float | None = None
    restart: tuple[str, ...] = ()
    each: tuple[str, ...] = ()


Node = Stmt | For | If | While


@dataclass(frozen=True)
class Program:
    """A whole program: ranges (name, size), declarations and a body."""

    name: str
    ranges: tuple[tuple[str, int], ...]
    decls: tuple[VarDecl, ...]
    body: tuple[Node, ...]
    algorithm: str | None = None
    _by_name: dict[str, VarDecl] = field(default_factory=dict, compare=False, repr=False)

    def decl(self, name: str) -> VarDecl:
        if not self._by_name:
            self._by_name.update({d.name: d for d in self.decls})
        return self._by_name[name]

    def range_size(self, name: str) -> int:
        return dict(self.ranges)[name]

    def __str__(self) -> str:
        """The program as text (``ir.printer.format_program``), as ``print`` shows it."""
        from factorflow.ir.printer import format_program
        return format_program(self)


def walk(nodes: tuple[Node, ...], loops: tuple[str, ...] = ()
         ) -> Iterator[tuple[Stmt, tuple[str, ...]]]:
    """Every statement with the ranges of the ``For`` blocks around it, in program order."""
    for node in nodes:
        if isinstance(node, Stmt):
            yield node, loops
        elif isinstance(node, For):
            yield from walk(node.body, loops + (node.range,))
        elif isinstance(node, If):
            yield from walk(node.body, loops)
        elif isinstance(node, While):
            yield from walk(node.init, loops)
            yield from walk(node.body, loops)


def framed(nodes: tuple[Node, ...], frames: tuple[tuple, ...],
           out: list[tuple[tuple[tuple, ...], Stmt]]) -> bool:
    """Every statement of ``nodes`` appended to ``out`` with its frames, outermost first:
    ("for", range, id) and ("if", condition, value, negated, id), the id that of the IR
    node, so that :func:`nest` gives the blocks back as they were.  False (``out`` then
    partial) where a node is neither a statement, a ``For`` nor an ``If`` (a ``While``)."""
    for node in nodes:
        if isinstance(node, Stmt):
            out.append((frames, node))
        elif isinstance(node, For):
            if not framed(node.body, frames + (("for", node.range, id(node)),), out):
                return False
        elif isinstance(node, If):
            if not framed(node.body, frames + (("if", node.condition, node.value,
                                                 node.negated, id(node)),), out):
                return False
        else:
            return False
    return True


def nest(stmts: list[tuple[tuple, Stmt]]) -> tuple[Node, ...]:
    """Group consecutive statements with a common frame prefix into shared For / If
    blocks (a frame is ("for", range[, id]) or ("if", condition, value, negated, id):
    equal frames share a block; :func:`framed`'s inverse)."""
    out: list[Node] = []
    i = 0
    while i < len(stmts):
        frames, stmt = stmts[i]
        if not frames:
            out.append(stmt)
            i += 1
            continue
        head = frames[0]
        j = i
        inner: list[tuple[tuple, Stmt]] = []
        while j < len(stmts) and stmts[j][0][:1] == (head,):
            inner.append((stmts[j][0][1:], stmts[j][1]))
            j += 1
        if head[0] == "for":
            out.append(For(head[1], nest(inner)))
        else:
            out.append(If(head[1], nest(inner), value=head[2], negated=head[3]))
        i = j
    return tuple(out)


def refs_in(operand: Operand) -> Iterator[str]:
    """Names of every variable an operand reads (the base and any gather indices)."""
    if isinstance(operand, Ref):
        yield operand.var
        for item in operand.index:
            if isinstance(item, Ref):
                yield from refs_in(item)
