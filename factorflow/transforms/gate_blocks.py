"""The gate pass's working state: mutable blocks, conditions and clones, frozen at the end.

The gate transform builds its output in mutable lists because what it emits early is
completed later: a clone read in several cases of a condition gets one more
``Gate.EnterPartial`` index per case.  Only
the transform (``factorflow.transforms.gates``) uses these; ``freeze`` turns them into IR.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from factorflow.ir import For, If, Node, Ref, Stmt


@dataclass(eq=False)
class ForB:
    """A ``for`` under construction."""

    range: str
    items: list = field(default_factory=list)


@dataclass(eq=False)
class IfB:
    """An ``if`` under construction: a case wrapper, or (``wraps`` False) a deterministic
    gate kept as it was."""

    condition: Ref
    items: list = field(default_factory=list)
    value: Any = None
    negated: bool = False
    wraps: bool = True


@dataclass(eq=False)
class Gen:
    """A generated statement, made at the end (when EnterPartial's indices are final); the
    wrapping of gate ``level`` leaves it out (it feeds that gate from outside)."""

    level: int
    make: Callable[[], Stmt]


@dataclass(eq=False)
class Frame:
    """An open block: ``kind`` root | for | if | det, its items and its builder node."""

    kind: str
    items: list
    node: Any = None


@dataclass(eq=False)
class Cond:
    """One stochastic condition (Infer.NET's ConditionInformation), shared by its ``If``
    blocks: its cases array and its clones."""

    key: tuple
    lhs: Ref
    count: int
    switch: str | None
    cases: str = ""
    axis: str = ""
    plates: tuple[str, ...] = ()
    clones: dict = field(default_factory=dict)
    switch_for: Any = None
    pending: list = field(default_factory=list)

    def ref(self, case: int | str | None = None) -> Ref:
        """The whole cases array, or its element for ``case``."""
        return Ref(self.cases, self.plates if case is None else self.plates[:-1] + (case,))


@dataclass(eq=False)
class Clone:
    """The clones of one expression ``src`` in one condition: ``kind`` partial | enter |
    one | exit; ``used``: the cases an EnterPartial reads (in slot order) or an exit
    variable is defined in; ``locals``: per-case copies in a switch."""

    kind: str
    name: str
    src: Ref
    plates: tuple[str, ...]
    axis: str = ""
    var: str = ""
    prov: str = ""
    used: list = field(default_factory=list)
    locals: dict = field(default_factory=dict)
    emitted: bool = False

    def ref(self, slot: int | str | None = None) -> Ref:
        """The clone array (slot None) or its element ``slot``."""
        return Ref(self.name, self.plates + (() if slot is None else (slot,)))


def flat(ref: Ref, loops: tuple[str, ...]) -> tuple[str, ...]:
    """The readable parts of an expression: ``array[i, 2]`` -> ``("array", "i", "2")``
    (whole axes omitted), for ``names.token``."""
    parts: list[str] = [ref.var]
    for i in ref.index:
        if isinstance(i, Ref):
            parts.extend(flat(i, loops))
        elif not isinstance(i, str) or i in loops:
            parts.append(str(i))
    return tuple(parts)


def wrap(items: list, level: int, condition: Ref) -> list:
    """Each statement in ``if condition`` (consecutive ones share one); ``for`` loops and
    deterministic gates get their bodies wrapped; ``level``'s own generated statements stay
    outside."""
    out: list = []
    group: IfB | None = None
    for it in items:
        if isinstance(it, ForB) or (isinstance(it, IfB) and not it.wraps):
            it.items[:] = wrap(it.items, level, condition)
            out.append(it)
            group = None
        elif isinstance(it, Gen) and it.level == level:
            out.append(it)
            group = None
        else:
            if group is None:
                group = IfB(condition)
                out.append(group)
            group.items.append(it)
    return out


def freeze(items: list) -> tuple[Node, ...]:
    """The IR nodes of a finished block."""
    out: list[Node] = []
    for it in items:
        if isinstance(it, ForB):
            out.append(For(it.range, freeze(it.items)))
        elif isinstance(it, IfB):
            out.append(If(it.condition, freeze(it.items), it.value, it.negated))
        else:
            out.append(it.make() if isinstance(it, Gen) else it)
    return tuple(out)
