"""Seeing a model: a short text summary (``repr(model)``) and its factor graph as DOT.

``summary`` lists the plates, the variables and one line per factor statement, in the
order they were written; ``factor_graph`` draws the same statements as a factor graph
(variables as circles, factors as small squares, plates as boxes, gates as dashed boxes,
observed variables shaded).  Both are deterministic, so tests compare golden text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from factorflow.distributions.base import format_values
from factorflow.model.core import Data, FactorCall, GateFrame, Indexed, Range, Variable
from factorflow.viz import Diagram, quote

if TYPE_CHECKING:
    from factorflow.model.core import Model

#: the most factor lines ``summary`` prints before it says how many it left out
MAX_LINES = 12


def describe_value(value: Any) -> str:
    """A factor argument as a person writes it: a variable by name, ``means[z]``,
    ``Data(x)``, a scalar, a short array, or ``array(shape=...)`` for a long one."""
    if isinstance(value, Variable):
        return value.name
    if isinstance(value, Indexed):
        index = value.index
        inner = index.name if isinstance(index, Variable | Data) else describe_value(index)
        return f"{value.base.name}[{inner}]"
    if isinstance(value, Data):
        return f"Data({value.name})"
    arr = np.asarray(value)
    if arr.ndim == 0 or (arr.ndim == 1 and arr.size <= 4):
        return format_values(arr)
    return f"array(shape={arr.shape})"


def _indexed_name(var: Variable) -> str:
    return var.name + "".join(f"[{r.name}]" for r in var.plates)


def describe_statement(call: FactorCall) -> str:
    """``x[n] ~ Gaussian(mean=means[z], precision=1.0)  in ff.Switch(z)``: one statement,
    ``=`` for a deterministic one, with the gates around it."""
    from factorflow.factors.registry import FACTORS

    args = ", ".join(f"{k}={describe_value(v)}" for k, v in call.args.items())
    text = f"{call.factor}({args})"
    if call.output is not None:
        factor = FACTORS.get(call.factor)
        sign = "=" if factor is not None and factor.deterministic else "~"
        text = f"{_indexed_name(call.output)} {sign} {text}"
    gates = [f.describe() for f in call.frames if isinstance(f, GateFrame)]
    return text + (f"  in {', '.join(gates)}" if gates else "")


def summary(model: Model) -> str:
    """The model in a few lines: plates with sizes, variables (domain; category count;
    observed), and each factor statement (at most MAX_LINES, then how many more)."""
    def count(n: int, what: str) -> str:
        return f"{n} {what}{'' if n == 1 else 's'}"
    head = (f"Model({model.name!r}): {count(len(model.ranges), 'plate')}, "
            f"{count(len(model.variables), 'variable')}, "
            f"{count(len(model.statements), 'factor')}")
    lines = [head]
    if model.ranges:
        lines.append("  plates:    " + ", ".join(f"{r.name} ({r.size})"
                                                 for r in model.ranges.values()))
    if model.variables:
        def variable(v: Variable) -> str:
            notes = [v.domain] + ([str(v.size)] if v.size is not None else [])
            notes += ["observed"] if v.is_observed else []
            return f"{_indexed_name(v)} ({', '.join(notes)})"
        names = [variable(v) for v in model.variables.values()]
        if len(names) > MAX_LINES:
            names = names[:MAX_LINES] + [f"... ({len(names) - MAX_LINES} more)"]
        lines.append("  variables: " + ", ".join(names))
    if model.statements:
        lines.append("  factors:")
        lines += [f"    {describe_statement(c)}" for c in model.statements[:MAX_LINES]]
        if len(model.statements) > MAX_LINES:
            lines.append(f"    ... ({len(model.statements) - MAX_LINES} more)")
    return "\n".join(lines)


# ----- the factor graph as DOT --------------------------------------------------------
def _frame_label(frame: Any) -> str:
    return (f"{frame.name} ({frame.size})" if isinstance(frame, Range)
            else frame.describe().removeprefix("ff."))


def _common_prefix(paths: list[tuple[Any, ...]]) -> tuple[Any, ...]:
    prefix = paths[0]
    for path in paths[1:]:
        n = 0
        while n < min(len(prefix), len(path)) and prefix[n] is path[n]:
            n += 1
        prefix = prefix[:n]
    return prefix


def _argument_variable(value: Any) -> Variable | None:
    return value.base if isinstance(value, Indexed) else (
        value if isinstance(value, Variable) else None)


def factor_graph(model: Model) -> Diagram:
    """DOT source of the model's factor graph.

    Guarantees: one circle per variable (labelled with its name, shaded grey when
    observed, dashed when deterministic), one small filled square per factor statement
    (labelled with the factor, ``xlabel`` the statement), an edge from each factor to
    every variable it reads (labelled with the argument) and to the one it defines
    (arrow); plates are solid boxes labelled ``name (size)``, gates dashed boxes labelled
    ``If(c)``, ``Case(z, 1)``, ``Switch(z)``, nested as they were written, each joined
    to its condition variable by a dashed edge.  A variable is drawn in the plates and
    gates common to all the statements defining it (an exit variable of a gate is drawn
    outside it).
    """
    ids: dict[int, str] = {}
    paths: dict[tuple[int, ...], list[str]] = {}  # frame path (ids) -> node lines in it
    frames_of: dict[tuple[int, ...], tuple[Any, ...]] = {}
    first_factor: dict[tuple[int, ...], str] = {}  # the first factor inside each path

    def place(path: tuple[Any, ...], line: str, factor: str | None = None) -> None:
        key = tuple(id(f) for f in path)
        for n in range(len(path) + 1):
            frames_of.setdefault(key[:n], path[:n])
            paths.setdefault(key[:n], [])
            if factor is not None:
                first_factor.setdefault(key[:n], factor)
        paths[key].append(line)

    defining: dict[str, list[tuple[Any, ...]]] = {}
    for call in model.statements:
        if call.output is not None:
            defining.setdefault(call.output.name, []).append(call.frames)
    for k, var in enumerate(model.variables.values()):
        ids[id(var)] = f"v{k}"
        attrs = ["shape=circle", f"label={quote(var.name)}"]
        if var.is_observed:
            attrs.append('style=filled, fillcolor="gray80"')
        elif var.derived:
            attrs.append("style=dashed")
        frames = defining.get(var.name)
        path = _common_prefix(frames) if frames else var.plates
        place(path, f"v{k} [{', '.join(attrs)}];")
    edges = []
    for k, call in enumerate(model.statements):
        node = f"f{k}"
        tooltip = describe_statement(call)
        place(call.frames, f"{node} [shape=square, style=filled, fillcolor=black, "
                           f"width=0.15, height=0.15, fixedsize=true, label=\"\", "
                           f"xlabel={quote(call.factor)}, tooltip={quote(tooltip)}];",
              node)
        if call.output is not None:
            edges.append(f"{node} -> {ids[id(call.output)]};")
        for arg, value in call.args.items():
            var = _argument_variable(value)
            if var is not None and id(var) in ids:
                edges.append(f"{ids[id(var)]} -> {node} [arrowhead=none, "
                             f"label={quote(arg)}];")
            if isinstance(value, Indexed) and isinstance(value.index, Variable):
                edges.append(f"{ids[id(value.index)]} -> {node} [arrowhead=none, "
                             f"label={quote(arg + ' index')}];")
    lines = [f"digraph {quote(model.name)} {{", "  compound=true;", "  node [fontsize=11];",
             "  edge [fontsize=9, color=gray30];"]
    clusters: list[tuple[tuple[int, ...], str]] = []

    def emit(key: tuple[int, ...], indent: str) -> None:
        lines.extend(indent + line for line in paths.get(key, ()))
        children = [k for k in paths if len(k) == len(key) + 1 and k[:len(key)] == key]
        for child in children:
            frame = frames_of[child][-1]
            style = "solid" if isinstance(frame, Range) else "dashed"
            name = f"cluster_{len(clusters)}"
            clusters.append((child, name))
            lines.append(f"{indent}subgraph {name} {{")
            lines.append(f"{indent}  label={quote(_frame_label(frame))}; style={style};")
            emit(child, indent + "  ")
            lines.append(f"{indent}}}")

    emit((), "  ")
    for key, name in clusters:   # a gate's condition points at the gate's box
        frame = frames_of[key][-1]
        if isinstance(frame, GateFrame) and key in first_factor:
            edges.append(f"{ids[id(frame.condition)]} -> {first_factor[key]} "
                         f"[lhead={name}, style=dashed, arrowhead=none];")
    lines += [f"  {e}" for e in edges]
    lines.append("}")
    return Diagram("\n".join(lines))
