"""Emit the scheduled message program as Python source over NumPy arrays.

Guarantees: the source defines one function ``infer(data, sizes, init, iterations,
on_iteration)`` returning ``(posteriors, log_evidence)``; every statement is one call on
whole arrays (no Python loop over plate elements); each block is preceded by a comment
quoting the model statement it comes from; identifiers come only from the IR (already
safe), user labels appear only as ``repr`` string literals or sanitised comments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from factorflow.codegen.names import comment, identifier
from factorflow.errors import ModelError
from factorflow.factors.registry import FACTORS
from factorflow.ir import Const, Program, Ref, Stmt, VarDecl, While
from factorflow.ir.nodes import Arange
from factorflow.ir.printer import format_stmt


@dataclass(frozen=True)
class Generated:
    source: str
    #: identifiers the source expects in its globals -> (kind, key) to resolve them
    symbols: dict[str, tuple[str, Any]]


class _Emitter:
    def __init__(self, program: Program) -> None:
        self.p = program
        self.decls = {d.name: d for d in program.decls}
        self.symbols: dict[str, tuple[str, Any]] = {}
        self.lines: list[str] = []
        self.last_prov: str | None = None

    # ----- operands ---------------------------------------------------------------
    def symbol(self, name: str, kind: str, key: Any) -> str:
        ident = identifier(name)
        self.symbols[ident] = (kind, key)
        return ident

    def shape(self, plates: tuple[str, ...]) -> str:
        return "(" + "".join(f"{p}, " for p in plates).rstrip(" ") + ")"

    def operand(self, op: Any, stmt_plates: tuple[str, ...]) -> str:
        if isinstance(op, Const):
            v = op.value
            if isinstance(v, Arange):
                return f"np.arange({v.range})"
            if isinstance(v, tuple) and all(isinstance(i, int) for i in v):
                return repr(tuple(int(i) for i in v))
            if isinstance(v, bool):
                return repr(v)
            if isinstance(v, int | float):
                return repr(float(v))
            raise ModelError(f"cannot emit constant {v!r}")
        assert isinstance(op, Ref)
        text = op.var
        if op.index and isinstance(op.index[0], Ref):
            text = f"{op.var}[{op.index[0].var}]"
            return text
        own = self.decls[op.var].plates
        fixed = _fixed(op)
        if fixed:
            text = f"take_element({text}, {fixed})"
            own = tuple(p for i, p in enumerate(own) if i not in dict(fixed))
        if own and stmt_plates and tuple(stmt_plates[-len(own):]) != own and len(own) < len(
                stmt_plates):
            positions = tuple(stmt_plates.index(p) for p in own)
            return f"align_plates({text}, {positions}, {len(stmt_plates)})"
        return text

    def emit(self, line: str, depth: int) -> None:
        self.lines.append("    " * depth + line)

    def provenance(self, stmt: Stmt, depth: int) -> None:
        if stmt.provenance and stmt.provenance != self.last_prov:
            self.emit(f"# {comment(stmt.provenance)}", depth)
            self.last_prov = stmt.provenance

    # ----- statements -------------------------------------------------------------
    def statement(self, s: Stmt, depth: int, check: bool) -> None:
        self.provenance(s, depth)
        emit: Callable[[Stmt, int], None] = getattr(
            self, "stmt_" + s.op.replace(".", "_"), self.stmt_operator)
        emit(s, depth)
        if check and s.op == "Variable.marginal":
            d = self.decls[s.param("target")]
            self.emit(f"check_proper({s.outputs[0].var}, {('posterior of ' + d.label)!r})",
                      depth)

    def stmt_operator(self, s: Stmt, depth: int) -> None:
        if s.param("evidence"):
            return self.evidence_operator(s, depth)
        fn = self.symbol(s.op, "operator", s.param("operator"))
        plates = s.param("plates", ())
        args = ", ".join(f"{k}={self.operand(v, plates)}" for k, v in s.inputs)
        self.assign(s.outputs[0], f"{fn}({args})", depth, s)

    def mask(self, s: Stmt) -> str | None:
        """The boolean array (over the statement's plates) of the observed conditions
        around ``s``, or None."""
        parts = []
        plates = s.param("plates", self.decls[s.outputs[0].var].plates if s.outputs else ())
        for cond, value, negated in s.param("mask", ()):
            text = self.operand(cond, plates)
            if value is not None and not isinstance(value, str):
                text = f"({text} == {int(value)})"
            parts.append(f"~as_bool({text})" if negated else f"as_bool({text})")
        return " & ".join(parts) if parts else None

    def assign(self, out: Ref, rhs: str, depth: int, stmt: Stmt | None = None) -> None:
        mask = self.mask(stmt) if stmt is not None else None
        if mask is not None:
            rhs = f"where_mask({mask}, {rhs}, {out.var})"
        fixed = _fixed(out)
        if fixed:
            self.emit(f"{out.var} = with_element({out.var}, {fixed}, {rhs})", depth)
        else:
            self.emit(f"{out.var} = {rhs}", depth)

    def evidence_operator(self, s: Stmt, depth: int) -> None:
        fn = self.symbol(s.op, "evidence", s.param("evidence"))
        plates = s.param("plates", ())
        args = ", ".join(f"{k}={self.operand(v, plates)}" for k, v in s.inputs)
        self.evidence_term(s, f"{fn}({args})", depth)

    def evidence_term(self, s: Stmt, term: str, depth: int) -> None:
        """Add to the total, or — inside a gate — send it to the case as a message."""
        mask = self.mask(s)
        if mask is not None:
            term = f"mask_term({mask}, {term})"
        if s.param("to_gate"):
            self.emit(f"{s.outputs[0].var} = gate_message({term})", depth)
        else:
            self.emit(f"log_evidence += total({term})", depth)

    def reduced(self, name: str, how: tuple, use_plates: tuple[str, ...],
                var: VarDecl) -> str:
        if how[0] == "same":
            return name
        if how[0] == "broadcast":
            axes = tuple(use_plates.index(p) for p in how[1])
            return f"prod_over({name}, {self.shape(use_plates)}, axis={axes})"
        if how[0] == "element":
            axes = tuple(use_plates.index(p) for p in how[2])
            return (f"place_element({name}, {tuple(how[1])}, {self.shape(use_plates)}, "
                    f"{axes}, {self.shape(var.plates)})")
        if how[0] == "slots":
            return f"place_slots({name}, {tuple(how[1])}, {self.shape(var.plates)})"
        size = var.plates[0]
        return f"scatter_prod({name}, {how[1].var}, {self.shape(use_plates)}, {size})"

    def stmt_Variable_marginal(self, s: Stmt, depth: int) -> None:
        var = self.decls[s.param("target")]
        hows, uplates = s.param("uses"), s.param("use_plates")
        terms = [dict(s.inputs)["def"].var]
        for k, (how, up) in enumerate(zip(hows, uplates, strict=True)):
            key = f"use{k}"
            if key in dict(s.inputs):
                terms.append(self.reduced(dict(s.inputs)[key].var, how, up, var))
        product = " * ".join(terms)
        if var.plates:  # a message shared by the whole plate still gives one posterior each
            product = f"fit_plates({product}, {self.shape(var.plates)})"
        self.emit(f"{s.outputs[0].var} = {product}", depth)

    def stmt_Variable_use(self, s: Stmt, depth: int) -> None:
        var = self.decls[s.param("target")]
        k = s.param("use")
        how, up = s.param("uses")[k], s.param("use_plates")[k]
        ins = dict(s.inputs)
        marg = ins["marginal"].var
        if how[0] == "gather":
            marg = f"{marg}.take({how[1].var})"
        elif how[0] == "element":
            marg = f"take_element({marg}, {tuple(how[1])})"
            rest = tuple(p for i, p in enumerate(var.plates) if i not in dict(how[1]))
            if rest and up[-len(rest):] != rest:
                marg = f"align_plates({marg}, {tuple(up.index(p) for p in rest)}, {len(up)})"
        elif how[0] == "slots":
            marg = f"take_slots({marg}, {tuple(how[1])})"
        elif how[0] == "broadcast" and var.plates and up[-len(var.plates):] != var.plates:
            marg = f"align_plates({marg}, {tuple(up.index(p) for p in var.plates)}, {len(up)})"
        rhs = f"{marg} / {ins['use'].var}" if "use" in ins else marg
        self.emit(f"{s.outputs[0].var} = {rhs}", depth)

    def stmt_Variable_backward(self, s: Stmt, depth: int) -> None:
        ins = dict(s.inputs)
        out = s.outputs[0].var
        if s.param("derived"):
            var = self.decls[s.param("target")]
            fam = self.symbol(var_family(self.decls, out), "family", var_family(self.decls,
                                                                               out))
            terms = [f"{fam}.uniform({self.shape(var.plates)}{self.event(var)})"]
            for k, (how, up) in enumerate(zip(s.param("uses"), s.param("use_plates"),
                                              strict=True)):
                terms.append(self.reduced(ins[f"use{k}"].var, how, up, var))
            self.emit(f"{out} = {' * '.join(terms)}", depth)
        elif "def" in ins:
            self.emit(f"{out} = {ins['marginal'].var} / {ins['def'].var}", depth)
        else:
            self.emit(f"{out} = {ins['marginal'].var}", depth)

    def stmt_Variable_evidence(self, s: Stmt, depth: int) -> None:
        ins = dict(s.inputs)
        marg = ins["marginal"].var
        if s.param("algorithm") == "vmp":
            self.evidence_term(s, f"vmp_variable_evidence({marg})", depth)
            return
        var = self.decls[s.param("target")]
        v = s.param("target")
        edges = [f"({v}_F, {ins['def'].var}, None, ())"]
        for k, (how, up) in enumerate(zip(s.param("uses"), s.param("use_plates"),
                                          strict=True)):
            if how[0] == "gather":
                h = f"('gather', {how[1].var})"
            elif how[0] == "broadcast":
                h = f"('broadcast', None, {tuple(up.index(p) for p in how[1])})"
            elif how[0] in ("element", "slots"):
                h = repr((how[0], tuple(how[1]), tuple(up.index(p) for p in how[2])) if
                         how[0] == "element" else ("slots", tuple(how[1])))
            else:
                h = "('same',)"
            edges.append(f"({ins[f'use{k}'].var[:-2]}_B, {ins[f'use{k}'].var}, {h}, "
                         f"{self.shape(up)})")
        self.evidence_term(s, f"ep_variable_evidence({marg}, [{', '.join(edges)}], "
                              f"{self.shape(var.plates)})", depth)

    def event(self, d: VarDecl) -> str:
        return f", {d.event}" if d.family in ("Discrete", "Dirichlet") else ""


#: the variable-node updates: each recomputes a posterior or an edge message from the
#: messages as they stand, without any factor's operator
_NODE_UPDATES = ("Variable.marginal", "Variable.use", "Variable.backward")


def _no_sweep(e: _Emitter, loop: While) -> None:
    """With ``iterations == 0`` the loop body never runs.  The result is then the state
    before any evidence flows up the model: the messages as initialised (from the data,
    and the user's initial posteriors, which stay as given), with the prior propagated
    once down the model — each factor's message to the variable it defines, in schedule
    order — and every posterior (and the messages the evidence reads) recomputed from
    them, so that no posterior is left at its uniform starting value."""
    initialised = {d.name for d in e.p.decls if d.attr("init") is not None}
    updates = [s for s in loop.body if (s.op in _NODE_UPDATES or _forward(s))
               and not (s.op == "Variable.marginal" and s.outputs[0].var in initialised)]
    if not updates:
        return
    e.emit("if iterations == 0:  # no sweep: the initialisation, the prior sent down once", 1)
    for s in updates:
        e.statement(s, 2, check=False)
    e.last_prov = None


def _forward(s: Stmt) -> bool:
    """Whether ``s`` is a factor's message to the variable the factor defines."""
    key = s.param("operator")
    if s.param("evidence") or not isinstance(key, tuple) or len(key) != 3:
        return False
    factor = FACTORS.get(key[0])
    return factor is not None and key[2] == factor.args[0].name


def _fixed(ref: Ref) -> tuple[tuple[int, int], ...]:
    """(axis, value) of each integer index of a reference (a gate clone's slot)."""
    return tuple((i, int(item)) for i, item in enumerate(ref.index)
                 if isinstance(item, int) and not isinstance(item, bool))


def var_family(decls: dict[str, VarDecl], name: str) -> str:
    family = decls[name].family
    assert family is not None
    return family


def generate(program: Program) -> Generated:
    """Python source for a scheduled message program (see module docstring)."""
    e = _Emitter(program)
    algo = (program.algorithm or "").upper()
    e.emit("def infer(data, sizes, init, iterations, on_iteration=None):", 0)
    e.emit(f'"""{algo} for model {comment(program.name)!s}: generated by factorflow."""', 1)
    for r, _ in program.ranges:
        e.emit(f"{r} = sizes[{r!r}]", 1)
    for d in program.decls:
        if d.role in ("observed", "constant"):
            e.emit(f"{d.name} = data[{d.name!r}]  # {comment(d.role + ' ' + d.label)}", 1)
    e.emit("# every message starts uniform, a posterior the user initialised from init", 1)
    for d in program.decls:
        if d.role in ("message", "marginal"):
            fam = e.symbol(d.family or "", "family", d.family)
            if d.attr("init") is not None:
                e.emit(f"{d.name} = initial(init, {d.attr('init')!r}, {fam}, "
                       f"{e.shape(d.plates)})", 1)
            else:
                e.emit(f"{d.name} = {fam}.uniform({e.shape(d.plates)}{e.event(d)})", 1)
    e.emit("log_evidence = 0.0", 1)
    internal = ("gate", "clone_of", "exit_of")  # the gate transform's own variables
    outputs = [d for d in program.decls if d.role == "random"
               and not any(d.attr(a) is not None for a in internal)]
    result = "{" + ", ".join(f"{d.label!r}: {d.name}_marginal" for d in outputs) + "}"
    evidence = [n for n in program.body if isinstance(n, Stmt) and not n.outputs]
    loops = [n for n in program.body if isinstance(n, While)]
    for node in program.body:
        if isinstance(node, Stmt) and node.outputs:
            e.statement(node, 1, check=False)
        elif isinstance(node, While):
            k = loops.index(node) + 1
            suffix = f" {k}" if len(loops) > 1 else ""
            e.emit(f"# ---- initialisation{suffix}", 1)
            e.last_prov = None
            for s in node.init:
                e.statement(s, 1, check=False)
            e.emit(f"# ---- iterations{suffix}", 1)
            e.emit("for iteration in range(iterations):", 1)
            e.last_prov = None
            for s in node.body:
                e.statement(s, 2, check=True)
            if not node.body:
                e.emit("pass  # nothing to iterate: every message is exact after one pass",
                       2)
            e.emit(f"if on_iteration is not None and on_iteration(iteration, {result}):", 2)
            e.emit("break", 3)
            e.last_prov = None
            _no_sweep(e, node)
    after = evidence
    e.emit("# ---- evidence", 1)
    e.last_prov = None
    for s in after:
        e.statement(s, 1, check=False)
    e.emit(f"return {result}, log_evidence", 1)
    header = [f"# Generated by factorflow: {algo} message passing for model "
              f"{comment(program.name)}.",
              "# Each statement is one array operation over a whole plate.", ""]
    return Generated("\n".join(header + e.lines) + "\n", e.symbols)


__all__ = ["generate", "Generated", "format_stmt"]
