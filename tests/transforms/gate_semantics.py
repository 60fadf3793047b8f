"""A reference interpreter of gated IR, for checking what the gate transform means.

``trace(program, conditions)`` runs a model IR (before the pass) or its gated form (after)
for one assignment of the condition variables and returns the trace of the factors that
apply, in order: (op, arguments), each argument the value it reads — a condition's value,
a token naming a variable element that no statement defines (``x``, ``array(1,)``), or
``def<n>…`` for a value the n-th applied factor defined.  The gate statements (``Gate.*``,
``Copy``) only move values (cases are one-hot in the condition, clones copy their value,
an exit picks its true case), so the pass preserves a program's meaning exactly when the
traces before and after are equal for every assignment of the conditions.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any

from factorflow.ir import For, If, Node, Program, Ref, Stmt, walk

MOVES = {"Gate.Cases", "Gate.Enter", "Gate.EnterPartial", "Gate.EnterOne", "Gate.Exit", "Copy"}


def assignments(program: Program, names: list[str]) -> Iterator[dict[str, dict]]:
    """Every assignment of the named bool / int variables, element by element."""
    sizes = dict(program.ranges)
    decls = {d.name: d for d in program.decls}
    slots = []
    for n in names:
        d = decls[n]
        values = (True, False) if d.domain == "bool" else tuple(range(d.event or 0))
        for idx in itertools.product(*(range(sizes[p]) for p in d.plates)):
            slots.append((n, idx, values))
    for combo in itertools.product(*(values for _, _, values in slots)):
        out: dict[str, dict] = {n: {} for n in names}
        for (n, idx, _), v in zip(slots, combo, strict=True):
            out[n][idx] = v
        yield out


def trace(program: Program, conditions: Mapping[str, Mapping[tuple, Any]]) -> list:
    """The factors that apply, in order, with the values they read (see the docstring)."""
    return _Run(program, conditions).run()


class _Run:
    def __init__(self, program: Program, conditions: Mapping[str, Mapping[tuple, Any]]):
        self.sizes = dict(program.ranges)
        self.decls = {d.name: d for d in program.decls}
        self.program = program
        defined = {o.var for s, _ in walk(program.body) for o in s.outputs}
        self.env: dict[str, dict[tuple, Any]] = {}
        for d in program.decls:
            if d.name in conditions:
                self.env[d.name] = dict(conditions[d.name])
            elif d.name in defined:
                self.env[d.name] = {}
            else:
                self.env[d.name] = {idx: f"{d.name}{idx if idx else ''}" for idx in
                                    itertools.product(*(range(self.sizes[p])
                                                        for p in d.plates))}
        self.fixed = set(conditions)
        self.out: list = []

    def run(self) -> list:
        self.nodes(self.program.body, {})
        return self.out

    # a reference reads or writes the elements over its whole (unbound) axes, by key
    def axes(self, ref: Ref, loops: dict[str, int]) -> list[Any]:
        plates = self.decls[ref.var].plates
        items = list(ref.index) + list(plates[len(ref.index):])
        out: list[Any] = []
        for item in items:
            if isinstance(item, Ref):
                out.append(self.read(item, loops)[()])
            elif isinstance(item, str) and item not in loops:
                out.append(range(self.sizes[item]))
            else:
                out.append(loops[item] if isinstance(item, str) else item)
        return out

    def keys(self, ref: Ref, loops: dict[str, int]) -> Iterator[tuple[tuple, tuple]]:
        axes = self.axes(ref, loops)
        whole = [a for a in axes if isinstance(a, range)]
        for key in itertools.product(*whole):
            it = iter(key)
            yield key, tuple(next(it) if isinstance(a, range) else a for a in axes)

    def read(self, ref: Ref, loops: dict[str, int]) -> dict[tuple, Any]:
        env = self.env[ref.var]  # an element no statement has defined yet reads "undefined"
        return {key: env.get(full, "undefined") for key, full in self.keys(ref, loops)}

    def write(self, ref: Ref, loops: dict[str, int], value) -> None:
        if ref.var in self.fixed:
            return  # a condition: its value is the assignment's
        for key, full in self.keys(ref, loops):
            self.env[ref.var][full] = value(key)

    def nodes(self, nodes: tuple[Node, ...], loops: dict[str, int]) -> None:
        for node in nodes:
            if isinstance(node, For):
                for i in range(self.sizes[node.range]):
                    self.nodes(node.body, loops | {node.range: i})
            elif isinstance(node, If):
                c = self.read(node.condition, loops)[()]
                if node.value is None:
                    holds = bool(c) != node.negated
                elif isinstance(node.value, str):
                    holds = c == loops[node.value]
                else:
                    holds = c == node.value
                if holds:
                    self.nodes(node.body, loops)
            elif isinstance(node, Stmt):
                self.stmt(node, loops)

    def stmt(self, s: Stmt, loops: dict[str, int]) -> None:
        args = {k: self.read(v, loops) if isinstance(v, Ref) else {(): ("const", v.value)}
                for k, v in s.inputs}
        if s.op not in MOVES:
            n = len(self.out)
            self.out.append((s.op, tuple((k, tuple(sorted(a.items())))
                                         for k, a in args.items())))
            for o in s.outputs:
                self.write(o, loops, lambda key, n=n: f"def{n}{key if key else ''}")
            return
        out = s.outputs[0]
        if s.op == "Gate.Cases":
            sel = args["selector"][()]
            case = (0 if sel else 1) if isinstance(sel, bool) else sel
            self.write(out, loops, lambda key: key[-1] == case)
        elif s.op == "Gate.Exit":
            on = [k[-1] for k, v in args["cases"].items() if v]
            assert len(on) == 1, f"{s}: exactly one case holds"
            values = args["values"]
            self.write(out, loops, lambda key: values[key + (on[0],)])
        else:  # Enter, EnterPartial (one more axis: the slot), EnterOne, Copy
            value = args["value"]
            width = len(next(iter(value)))
            self.write(out, loops, lambda key: value[key[:width]])


def same_meaning(before: Program, after: Program, conditions: list[str]) -> int:
    """Assert equal traces for every assignment of ``conditions``; the number checked."""
    count = 0
    for a in assignments(before, conditions):
        assert trace(after, a) == trace(before, a), f"traces differ for {a}"
        count += 1
    return count


__all__ = ["assignments", "same_meaning", "trace"]
