"""Dependency information of a message program, read from operator annotations.

Input: the flat message program (``messages.py``).  Output: a ``DependencyGraph`` with a
node per message update (labelled by the message it writes) and, per input, an edge
whose kinds come from the operator's annotations — Required from ``skip_if_uniform`` and
``proper``, Trigger from ``trigger``, Fresh from ``fresh`` — and, for variable nodes, the
rule of the algorithm: under VMP a message from a factor triggers the variable's
marginal, which triggers every message the variable sends (Infer.NET's VMP: a
variable-to-factor message always reflects the latest factor-to-variable messages).
Nothing here knows an algorithm beyond what the statements and registry say.
"""

from __future__ import annotations

from factorflow.codegen.names import marginal
from factorflow.factors.registry import FACTORS
from factorflow.factors.variable import NODE_ANNOTATIONS
from factorflow.ir import Program, Ref, Stmt, refs_in
from factorflow.transforms.dependencies import Dep, DependencyGraph


def _vmp_read(posterior: bool) -> Dep:
    """How a VMP factor reads a message that is not its own target's.

    VMP is coordinate ascent (see factors.variable.NODE_ANNOTATIONS): messages through
    derived variables are brought up to date before they are read (Fresh).  A posterior
    q is always the latest (Trigger) and is read plainly, but must have been computed
    once (Required; the first is its prior's message).  An operator reads its own
    target's message (for a shape, or a selector's own weights) plainly: Fresh or
    Required through it would close a cycle through the target."""
    return Dep.DEPENDENCY | (Dep.REQUIRED if posterior else Dep.FRESH)


def _operator_kind(stmt: Stmt, arg: str, posterior: bool) -> Dep:
    """The kind of the edge by which an operator reads ``arg``; ``posterior``: the value
    is a (non-derived) variable's posterior sent to the factor."""
    factor, algorithm, target = stmt.param("operator")
    op = FACTORS[factor].operators[(algorithm, target)]
    kind = Dep.DEPENDENCY
    if algorithm == "vmp" and arg != target:
        kind |= _vmp_read(posterior)
    if arg in op.skip_if_uniform or arg in op.proper:
        kind |= Dep.REQUIRED
    if arg in op.trigger:
        kind |= Dep.TRIGGER
    if arg in op.fresh:
        kind |= Dep.FRESH
    return kind


_KIND = {"dependency": Dep.DEPENDENCY, "required": Dep.DEPENDENCY | Dep.REQUIRED,
         "trigger": Dep.DEPENDENCY | Dep.TRIGGER,
         "required trigger": Dep.DEPENDENCY | Dep.REQUIRED | Dep.TRIGGER,
         "fresh": Dep.DEPENDENCY | Dep.FRESH,
         "required fresh trigger": Dep.DEPENDENCY | Dep.REQUIRED | Dep.FRESH | Dep.TRIGGER,
         "required fresh": Dep.DEPENDENCY | Dep.REQUIRED | Dep.FRESH}


def _node_kind(stmt: Stmt, arg: str, derived: bool, posterior: bool) -> Dep:
    if stmt.param("to_gate"):  # an evidence term sent to a gate's case: as a factor
        evidence = stmt.param("evidence")
        vmp = (evidence[1] if evidence else stmt.param("algorithm")) == "vmp"
        return _vmp_read(posterior) if vmp else Dep.DEPENDENCY
    update = stmt.op.removeprefix("Variable.")
    if update == "use" and arg != "marginal":
        return Dep.DEPENDENCY
    if update == "marginal" and arg == "def":
        update = "marginal.def"
    elif update in ("use", "backward") and derived:
        update += ".derived"
    return _KIND[NODE_ANNOTATIONS[(stmt.param("algorithm"), update)]]


def describe(stmt: Stmt, program: Program) -> str:
    """One line saying which message a statement computes, for schedule listings."""
    out = stmt.outputs[0].var
    label = program.decl(out).label
    if stmt.param("to_gate"):
        return f"{label}: evidence of {stmt.op.split('.')[0]} to its case"
    if stmt.param("operator"):
        factor, algorithm, target = stmt.param("operator")
        return f"{label}: {factor}.{target} ({algorithm.upper()})"
    return f"{label} ({stmt.param('algorithm', '').upper()})"


def dependency_graph(program: Program, user_initialized: frozenset[str] = frozenset()
                     ) -> tuple[DependencyGraph, dict[str, Stmt]]:
    """The graph of ``program``'s message updates and the statement behind each node.

    ``outputs`` are the marginals and every message an evidence statement reads;
    ``user_initialized`` (variable names) marks those variables' marginals.
    """
    stmts = [s for s in program.body if isinstance(s, Stmt)]
    derived = {d.name for d in program.decls if d.attr("derived")}
    posteriors = {o.var for s in stmts
                  if s.op in ("Variable.marginal", "Variable.use", "Variable.backward")
                  and s.param("target") not in derived for o in s.outputs}
    writer: dict[str, list[str]] = {}  # a message -> the labels of the statements writing it
    for s in stmts:
        for o in s.outputs:
            writer.setdefault(o.var, []).append(node_label(s))
    nodes = tuple(node_label(s) for s in stmts if s.outputs)
    edges: dict[tuple[str, str], Dep] = {}
    outputs: set[str] = set()
    for s in stmts:
        if not s.outputs:  # evidence: its inputs are outputs of the schedule
            outputs.update(label for _, v in s.inputs if isinstance(v, Ref)
                           for n in refs_in(v) if n in writer for label in writer[n])
            continue
        label = node_label(s)
        if s.op == "Variable.marginal":
            outputs.add(label)
        for arg, value in s.inputs:
            if not isinstance(value, Ref):
                continue
            for name in refs_in(value):
                if name not in writer:
                    continue
                kind = (_operator_kind(s, arg, name in posteriors) if s.param("operator") else
                        _node_kind(s, arg, s.param("target") in derived,
                                   name in posteriors))
                for source in writer[name]:
                    key = (source, label)
                    edges[key] = edges.get(key, Dep(0)) | kind
    inits = frozenset(marginal(v) for v in user_initialized) & set(nodes)
    descriptions = {node_label(s): describe(s, program) for s in stmts if s.outputs}
    return (DependencyGraph(nodes, edges, frozenset(outputs), inits, descriptions),
            {node_label(s): s for s in stmts if s.outputs})


def node_label(stmt: Stmt) -> str:
    """The message a statement writes, with the slot for a gate clone's element."""
    out = stmt.outputs[0]
    slots = [str(i) for i in out.index if isinstance(i, int) and not isinstance(i, bool)]
    label = f"{out.var}[{', '.join(slots)}]" if slots else out.var
    for cond, value, negated in stmt.param("mask", ()):  # one writer per observed branch
        label += f" if {'not ' if negated else ''}{cond.var}" + (
            f" == {value}" if value is not None else "")
    return label
