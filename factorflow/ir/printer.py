"""Deterministic text form of a program, for golden tests and for reading."""

from __future__ import annotations

from typing import Any

import numpy as np

from factorflow.ir.nodes import (
    Arange,
    Const,
    For,
    If,
    Node,
    Operand,
    Program,
    Ref,
    Stmt,
    VarDecl,
    While,
)


def format_operand(op: Operand) -> str:
    if isinstance(op, Const):
        return format_value(op.value)
    return format_ref(op)


def format_ref(ref: Ref) -> str:
    if not ref.index:
        return ref.var
    items = ", ".join(format_ref(i) if isinstance(i, Ref) else str(i) for i in ref.index)
    return f"{ref.var}[{items}]"


def format_value(value: Any) -> str:
    if isinstance(value, Arange):
        return f"arange({value.range})"
    if isinstance(value, tuple):
        return "(" + ", ".join(format_value(v) for v in value) + ("," if len(value) == 1
                                                                  else "") + ")"
    arr = np.asarray(value)
    if arr.ndim == 0:
        item = arr.item()
        return repr(float(item)) if isinstance(item, float | int) and not isinstance(
            item, bool) else repr(item)
    return f"<array {arr.shape}>"


def format_param(value: Any) -> str:
    if isinstance(value, tuple):
        return "(" + ", ".join(format_param(v) for v in value) + ")"
    if isinstance(value, Ref):
        return format_ref(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return str(value) if isinstance(value, str) else format_value(value)


def format_stmt(stmt: Stmt) -> str:
    outs = ", ".join(format_ref(o) for o in stmt.outputs)
    args = [f"{k}={format_operand(v)}" for k, v in stmt.inputs]
    args += [f"{k}: {format_param(v)}" for k, v in stmt.params]
    call = f"{stmt.op}({', '.join(args)})"
    return f"{outs} = {call}" if outs else call


def format_decl(d: VarDecl) -> str:
    typ = d.family or d.domain or "?"
    shape = "".join(f"[{p}]" for p in d.plates)
    event = f"<{d.event}>" if d.event else ""
    label = f"  # {d.label}" if d.label and d.label != d.name else ""
    return f"{d.role} {typ}{event} {d.name}{shape}{label}"


def format_condition(node: If) -> str:
    """``c``, ``not c``, ``i == 2`` (a case) or ``i == j`` (a switch over the loop ``j``)."""
    cond = format_ref(node.condition)
    if node.value is None:
        return f"not {cond}" if node.negated else cond
    return f"{cond} == {node.value}"


def _lines(nodes: tuple[Node, ...], depth: int, out: list[str]) -> None:
    pad = "    " * depth
    for node in nodes:
        if isinstance(node, Stmt):
            out.append(pad + format_stmt(node))
        elif isinstance(node, For):
            out.append(f"{pad}for {node.range}:")
            _lines(node.body, depth + 1, out)
        elif isinstance(node, If):
            out.append(f"{pad}if {format_condition(node)}:")
            _lines(node.body, depth + 1, out)
        elif isinstance(node, While):
            if node.restart:
                out.append(f"{pad}restart {', '.join(node.restart)}")
            if node.init:
                out.append(f"{pad}init:")
                _lines(node.init, depth + 1, out)
            limit = "" if node.sweeps is None else f" at most {node.sweeps} sweeps" + (
                "" if node.tolerance is None else f", tolerance {node.tolerance:g}") + (
                f" for each element of {', '.join(node.each)}" if node.each else "")
            out.append(f"{pad}while{limit}:")
            _lines(node.body, depth + 1, out)


def format_program(program: Program, decls: bool = True) -> str:
    """The program as text: ranges, declarations, then the body, one statement a line."""
    out = [f"program {program.name}" + (f" ({program.algorithm})" if program.algorithm
                                        else "")]
    if program.ranges:
        out.append("ranges " + ", ".join(f"{n}={s}" for n, s in program.ranges))
    if decls:
        out.extend(format_decl(d) for d in program.decls)
    _lines(program.body, 0, out)
    return "\n".join(out) + "\n"
