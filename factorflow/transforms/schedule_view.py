"""Seeing a schedule: a text listing and Graphviz DOT source of the dependency graph.

``format_schedule`` prints one line per update, with its label and why it is there
(``output``, ``read by X``, ``required by X``, ``triggered by Y``, ``fresh for Z``),
grouped into the straight-line part, and per loop its initialization and iteration.
``to_graphviz`` returns the DOT text as a ``factorflow.viz.Diagram`` (a ``str`` that
renders to SVG/PNG where Graphviz is installed) with edge kinds drawn as styles. Both are
deterministic, so tests compare golden text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from factorflow.transforms.dependencies import Dep, DependencyGraph
from factorflow.viz import Diagram
from factorflow.viz import quote as _quote

if TYPE_CHECKING:
    from factorflow.transforms.scheduling import Schedule

_EDGE_STYLE = (  # the first kind an edge carries, in this order, picks its style
    (Dep.TRIGGER, 'style=dashed, color="firebrick", label="trigger"'),
    (Dep.FRESH, 'style=dotted, color="royalblue", label="fresh"'),
    (Dep.REQUIRED, 'style=bold, label="required"'),
    (Dep.DEPENDENCY, ""),
    (Dep.INITIALIZER, 'style=dashed, color="gray50", label="init"'),
    (Dep.DECLARATION, 'style=dotted, color="gray50", label="decl"'),
)


def _lines(names: tuple[str, ...], part: str, k: int, schedule: Schedule,
           graph: DependencyGraph | None, indent: str) -> list[str]:
    if not names:
        return [f"{indent}(nothing)"]
    width = max(map(len, names))
    lines = []
    for i, name in enumerate(names):
        line = f"{indent}{name:<{width}}  {schedule.why.get((part, k, i), '')}".rstrip()
        text = graph.describe.get(name) if graph is not None else None
        lines.append(f"{line}  # {text}" if text else line)
    return lines


def _sweep_lines(body: tuple[str, ...], graph: DependencyGraph | None) -> list[str]:
    """One line per variable of the loop that receives messages from several uses over a
    plate: whether the loop sweeps it in parallel or sequentially, and why."""
    if graph is None:
        return []
    return [f"  sweep: {how} {graph.describe.get(name, name).split(' (')[0]} {why}"
            for name in dict.fromkeys(body) if name in graph.sweeps
            for how, why in [graph.sweeps[name]]]


def format_schedule(schedule: Schedule, graph: DependencyGraph | None = None) -> str:
    """The schedule as text: ``prefix``, then per loop ``loop k`` with ``init`` and
    ``iteration``, then ``after loop k``; parts that are empty outside loops are left out.
    ``graph`` (default: the schedule's own) adds each statement's description."""
    graph = graph if graph is not None else schedule.graph
    out = []
    if schedule.prefix or not schedule.loop:
        out += ["prefix:", *_lines(schedule.prefix, "prefix", 0, schedule, graph, "  ")]
    for k, (init, body, after) in enumerate(zip(schedule.init, schedule.loop, schedule.suffix,
                                                strict=True)):
        out += [f"loop {k + 1}:", *_sweep_lines(body, graph),
                "  init:", *_lines(init, "init", k, schedule, graph, "    "),
                "  iteration:", *_lines(body, "loop", k, schedule, graph, "    ")]
        if after:
            out += [f"after loop {k + 1}:", *_lines(after, "suffix", k, schedule, graph, "  ")]
    return "\n".join(out)


def to_graphviz(graph: DependencyGraph, schedule: Schedule | None = None) -> Diagram:
    """DOT source for ``graph``: outputs drawn double, user-initialized messages filled,
    edges styled by kind (several kinds: the first of trigger, fresh, required,
    dependency, initializer, declaration); with a ``schedule``, each loop a cluster."""
    lines = ["digraph schedule {", "  rankdir=LR;", "  node [shape=box, fontsize=10];"]

    def node(name: str, indent: str) -> str:
        text = f"{name}\n{graph.describe[name]}" if name in graph.describe else name
        attrs = [f"label={_quote(text)}"]
        if name in graph.outputs:
            attrs.append("peripheries=2")
        if name in graph.user_initialized:
            attrs.append('style=filled, fillcolor="lightyellow"')
        return f"{indent}{_quote(name)} [{', '.join(attrs)}];"

    pos = graph.index.pos
    clustered = set()
    for k, body in enumerate(schedule.loop if schedule is not None else ()):
        members = sorted(set(body), key=pos.__getitem__)
        lines += [f"  subgraph cluster_loop{k + 1} {{", f'    label="loop {k + 1}";']
        lines += [node(name, "    ") for name in members]
        lines.append("  }")
        clustered.update(members)
    lines += [node(name, "  ") for name in graph.nodes if name not in clustered]
    for (a, b), kind in sorted(graph.edges.items(), key=lambda e: (pos[e[0][0]], pos[e[0][1]])):
        style = next(s for k, s in _EDGE_STYLE if kind & k)
        lines.append(f"  {_quote(a)} -> {_quote(b)}" + (f" [{style}];" if style else ";"))
    lines.append("}")
    return Diagram("\n".join(lines))
