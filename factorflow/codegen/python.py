"""Emit the scheduled message program as Python source over NumPy arrays.

Guarantees: the source defines one function ``infer(data, sizes, init, iterations,
on_iteration, damping, resume)`` returning ``(posteriors, log_evidence)``; after each
sweep it calls ``on_iteration(iteration, posteriors, evidence, state)``, where
``state()`` is the whole state of the run (every message that changes, what each
stateful operator keeps between calls, and the loop and sweeps done), and ``resume=``
such a state replaces the initialisation and the sweeps done, so that the run goes on
exactly as the one that saved it; every statement is one call on whole arrays (no
Python loop over plate elements); each block is preceded by a comment
quoting the model statement it comes from; identifiers come only from the IR (already
safe), user labels appear only as ``repr`` string literals or sanitised comments.
What reads only the plate sizes, the data and constants (``np.arange`` of a range, the
data laid out over a statement's plates, a derived variable's uniform factor) is made
once per run, as a commented local before the statements (``_Emitter.hoist``; the NumPy
program's, not the JAX backend's, which traces the function once anyway).
Under VMP ``evidence()`` runs only the updates the bound reads or the run reads after it
(``codegen.liveness``), and a sweep right after it skips the updates it computed from
the same values: a run with the bound (``trace=True``) and one without compute the same
posteriors, bit for bit.  Where ``LEAN`` (the default), the program leaves out what it
proves changes nothing: calls whose result is uniform whatever their inputs
(``_silent``), and in a VMP sweep statements that compute again what their names hold
or whose values nothing reads (``_dropped``) and properness checks that an earlier
check implies (``_unchecked``, ``_checked_first``: the NumPy program's sweep); every
posterior and bound is the same, bit for bit.

Names: the program's own names (``GENERATED``: parameters, locals, builtins) and the
runtime's helpers (``reserved``) are checked to be apart from every name of the IR, and
resolved symbols (operators, families) get names apart from both (``names.symbol``), so
with the scheme of ``factorflow.codegen.names`` no user name can shadow or be shadowed.
"""

from __future__ import annotations

import weakref
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from factorflow.codegen import liveness, variable_nodes
from factorflow.codegen.names import USER_PREFIX, comment, marginal, symbol
from factorflow.errors import ModelError
from factorflow.factors.registry import FACTORS
from factorflow.ir import Const, IRError, Program, Ref, Stmt, VarDecl, While, refs_in
from factorflow.ir.nodes import Arange, walk
from factorflow.ir.printer import format_stmt

#: the names the generated function binds or reads itself: parameters, locals, builtins
GENERATED = frozenset({"infer", "data", "sizes", "init", "iterations", "on_iteration",
                       "damping", "resume", "evidence", "state", "log_evidence",
                       "iteration", "range", "local_sweep", "local_before",
                       "local_done", "refreshed", "swept", "known_bound"})


#: whether the emitter leaves out the statements it proves change nothing (``_silent``:
#: calls whose result is uniform whatever their inputs); the tests turn it off to
#: compare the two programs' runs bit for bit
LEAN = True


#: the event axes of a known value of each domain (a vector's one, a matrix's two)
_EVENT_NDIM = {"simplex": 1, "vector": 1, "posdef": 2}


@dataclass(frozen=True)
class Generated:
    source: str
    #: identifiers the source expects in its globals -> (kind, key) to resolve them
    symbols: dict[str, tuple[str, Any]]


class _Emitter:
    def __init__(self, program: Program, reserved: frozenset[str]) -> None:
        self.p = program
        self.decls = {d.name: d for d in program.decls}
        self.symbols: dict[str, tuple[str, Any]] = {}
        self.lines: list[str] = []
        self.last_prov: str | None = None
        self.iteration = "None"  # the run-time iteration where a statement is emitted
        own = Counter([d.name for d in program.decls] + [r for r, _ in program.ranges])
        twice = {n for n, k in own.items() if k > 1}
        clash = sorted(twice | (set(own) & (GENERATED | reserved)))
        if clash:
            raise IRError(f"{program.name}: the name {clash[0]} is not the program's own "
                          "(declared twice, or a name of the generated code).")
        self.taken = set(own) | GENERATED | reserved
        self.named: dict[tuple[str, Any], str] = {}
        #: whether loop-invariant expressions become locals made once per run (``hoist``)
        self.hoisting = False
        self.hoisted: dict[str, str] = {}  # expression -> its local
        #: the data and constants no statement assigns (read as given, all run long)
        assigned = {o.var for s, _ in walk(program.body) for o in s.outputs}
        self.fixed = {d.name for d in program.decls if d.role in ("observed", "constant")
                      and d.name not in assigned}
        #: the statements left out (``_silent``: their messages stay uniform)
        self.silent = _silent(program)
        assigned = {o.var for s, _ in walk(program.body) if id(s) not in self.silent
                    for o in s.outputs}
        #: the messages that keep their uniform start all run long (none assigns them)
        self.uniform = {d.name for d in program.decls if d.role == "message"
                        and d.attr("init") is None and d.name not in assigned}
        #: the dict each stateful operator keeps between calls (``Operator.state``), by
        #: the message it computes
        self.kept = {o.var: symbol(f"state_{o.var.removeprefix(USER_PREFIX)}", self.taken)
                     for s, _ in walk(program.body) if s.param("state") for o in s.outputs}
        #: EP, a variable with one use taken as it is: {id of its use or backward
        #: statement: the one message that is the quotient} (``_cavities``)
        self.cavities = _cavities(program)
        #: {message: whether every statement assigning it makes it deferred
        #: (``Deferred``, a gate clone's under VMP)}, those that none or all do
        kinds: defaultdict[str, set[bool]] = defaultdict(set)
        for s, _ in walk(program.body):
            for o in s.outputs:
                kinds[o.var].add(bool(s.param("defer")))
        self.deferred = {name: all(k) for name, k in kinds.items() if len(k) == 1}

    def hoist(self, expr: str, name: str) -> str:
        """A local holding ``expr`` (which reads only the plate sizes, the data and
        constants: the same value in every sweep), made once per run before the
        statements (``hoisted_lines``), where ``hoisting``; else ``expr``."""
        if not self.hoisting:
            return expr
        ident = self.hoisted.get(expr)
        if ident is None:
            ident = self.hoisted[expr] = symbol(name, self.taken)
        return ident

    def hoisted_lines(self) -> list[str]:
        """The definitions of the hoisted locals, at depth 1."""
        if not self.hoisted:
            return []
        return (["    # the same in every sweep, made once per run: ranges, the data laid out "
                 "over", "    # statements' plates, uniform messages"]
                + [f"    {ident} = {expr}" for expr, ident in self.hoisted.items()])

    # ----- operands ---------------------------------------------------------------
    def symbol(self, name: str, kind: str, key: Any) -> str:
        """The name of a resolved symbol: one per (kind, key), apart from every other."""
        ident = self.named.get((kind, key))
        if ident is None:
            ident = self.named[(kind, key)] = symbol(name, self.taken)
            self.symbols[ident] = (kind, key)
        return ident

    def shape(self, plates: tuple[str, ...]) -> str:
        return "(" + "".join(f"{p}, " for p in plates).rstrip(" ") + ")"

    def operand(self, op: Any, stmt_plates: tuple[str, ...]) -> str:
        if isinstance(op, Const):
            v = op.value
            if isinstance(v, Arange):
                return self.hoist(f"np.arange({v.range})", f"arange_{v.range}")
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
        order = tuple(sorted(range(len(own)), key=lambda i: stmt_plates.index(own[i]))) \
            if set(own) <= set(stmt_plates) else ()
        if order != tuple(range(len(order))):
            # an array whose plates run in another order than the statement's loops
            text = f"permute_plates({text}, {order})"
            own = tuple(own[i] for i in order)
        if own and stmt_plates and tuple(stmt_plates[-len(own):]) != own and len(own) < len(
                stmt_plates):
            positions = tuple(stmt_plates.index(p) for p in own)
            event = _EVENT_NDIM.get(self.decls[op.var].domain or "", 0) if self.decls[
                op.var].role in ("observed", "constant") else 0
            text = (f"align_plates({text}, {positions}, {len(stmt_plates)}"
                    + (f", {event})" if event else ")"))
        if op.var in self.fixed and text != op.var:  # the data laid out: once per run
            return self.hoist(text, f"laid_{op.var.removeprefix(USER_PREFIX)}")
        return text

    def emit(self, line: str, depth: int) -> None:
        self.lines.append("    " * depth + line)

    def provenance(self, stmt: Stmt, depth: int) -> None:
        if stmt.provenance and stmt.provenance != self.last_prov:
            self.emit(f"# {comment(stmt.provenance)}", depth)
            self.last_prov = stmt.provenance

    # ----- statements -------------------------------------------------------------
    def statement(self, s: Stmt, depth: int, check: bool, last: bool = True) -> None:
        """Emit ``s``; ``check``: inside the loop (a posterior is checked proper after
        its update, where ``last``: its last update in the sweep).  Nothing for a
        statement left out (``_silent``)."""
        if id(s) in self.silent:
            return
        self.provenance(s, depth)
        self.iteration = "iteration" if check else "None"
        emit: Callable[[Stmt, int], None] = getattr(
            self, "stmt_" + s.op.replace(".", "_"), self.stmt_operator)
        emit(s, depth)
        if check and last and s.op == "Variable.marginal":
            self.check_proper(s, depth)

    def check_proper(self, s: Stmt, depth: int) -> None:
        """Emit the check that the posterior ``s`` updates is proper."""
        d = self.decls[s.param("target")]
        where = f"posterior of {d.label} ({comment(s.provenance)})" if s.provenance \
            else f"posterior of {d.label}"
        mask = self.mask(s)  # a variable inside an observed condition's branch: it
        # exists (and must be proper) only where the condition holds
        only = f", where={mask}" if mask is not None else ""
        self.emit(f"check_proper({s.outputs[0].var}, {where!r}, iteration{only})", depth)

    def stmt_operator(self, s: Stmt, depth: int) -> None:
        if s.param("evidence"):
            return self.evidence_operator(s, depth)
        fn = self.symbol(s.op, "operator", s.param("operator"))
        plates = s.param("plates", ())
        args = ", ".join(f"{k}={self.operand(v, plates)}" for k, v in s.inputs)
        if s.param("reduce"):  # the messages multiplied over these plate axes, fused
            args += f", reduce=({self.shape(plates)}, {s.param('reduce')!r})"
        if s.param("previous"):  # the message this operator sent last time
            args += f", previous={self.operand(s.outputs[0], plates)}"
        if s.param("state"):  # what this operator keeps between calls
            args += f", state={self.kept[s.outputs[0].var]}"
        rhs = f"{fn}({args})"
        own = self.decls[s.outputs[0].var].plates
        if s.param("defer"):  # the call kept for Gate.EnterOne to make weighted, reduced
            rhs = f"Deferred({fn}, dict({args}))"
        elif not _fixed(s.outputs[0]) and own != plates and sorted(own) == sorted(plates):
            # computed in the loops' order, stored in the array's (see ``operand``)
            rhs = f"permute_plates({rhs}, {tuple(plates.index(p) for p in own)})"
        method = FACTORS[s.param("operator")[0]].operators[s.param("operator")[1:]].method
        if method:  # how this message is computed, where that is a choice
            self.emit(f"# {comment(method)}", depth)
        checks = self.proper_inputs(s)
        if self.p.algorithm == "ep" and s.param("target") in self.decls:
            out, fixed = s.outputs[0], _fixed(s.outputs[0])
            old = f"take_element({out.var}, {fixed})" if fixed else out.var
            if checks and s.param("defer") is None:
                # a message to a variable keeps its old value where its input is improper
                inputs, what, extra = checks
                rhs = (f"skip_improper({old}, lambda: {rhs}, ({', '.join(inputs)},), {what!r}, "
                       f"{self.iteration}{extra})")
                checks = None
            # EP damping: the new message to the variable mixed with the old one
            label = self.decls[s.param("target")].label
            rhs = f"damp({old}, {rhs}, damping, {label!r})"
        if checks:
            inputs, what, extra = checks
            for value in inputs:
                self.emit(f"check_proper_input({value}, {what!r}, {self.iteration}{extra})",
                          depth)
        self.assign(s.outputs[0], rhs, depth, s)

    def proper_inputs(self, s: Stmt) -> tuple[list[str], str, str] | None:
        """For an EP operator annotated ``proper`` for some arguments (seed 000: its output
        is not defined on a uniform input): those inputs' operands, what to call them in a
        run-time error, and the mask argument; None if there are none."""
        factor, algorithm, target = s.param("operator")
        if algorithm != "ep":  # VMP reads posteriors; a derived variable's message may
            return None  # be uniform before the first sweep and its operators accept that
        plates = s.param("plates", ())
        proper = FACTORS[factor].operators[(algorithm, target)].proper
        values = [self.operand(value, plates) for arg, value in s.inputs if arg in proper]
        if not values:
            return None
        # each argument named with what it reads (the variable's label: "message from x to
        # its use 0"); a constant, proper by construction, only where nothing else is
        named = [f"{arg!r} ({self.decls[value.var].label})" for arg, value in s.inputs
                 if arg in proper and isinstance(value, Ref) and value.var in self.decls
                 and self.decls[value.var].label]
        args = named or [repr(arg) for arg, _ in s.inputs if arg in proper]
        what = f"{factor}'s message to {target!r}, from argument " + " or ".join(args)
        if s.provenance:
            what += f" ({comment(s.provenance)})"
        mask = self.mask(s)
        return values, what, f", {mask}" if mask is not None else ""

    def mask(self, s: Stmt) -> str | None:
        """The boolean array (over the statement's plates) of the observed conditions
        around ``s``, or None."""
        plates = s.param("plates", self.decls[s.outputs[0].var].plates if s.outputs else ())
        return self.mask_of(s.param("mask", ()), plates)

    def mask_of(self, conditions: tuple, plates: tuple[str, ...]) -> str | None:
        """The boolean array over ``plates`` of observed ``conditions``, or None."""
        parts = []
        for cond, value, negated in conditions:
            text = self.operand(cond, plates)
            own = self.decls[cond.var].plates if isinstance(cond, Ref) else ()
            if (own and not _fixed(cond) and not (cond.index and isinstance(cond.index[0], Ref))
                    and len(own) < len(plates) and text == cond.var):
                # the mask spans every one of ``plates``, so that the kernels may lay it
                # over a target's leading axes (a gate's cases axis comes after them)
                text = (f"align_plates({text}, {tuple(plates.index(p) for p in own)}, "
                        f"{len(plates)})")
            if value is not None and not isinstance(value, str):
                text = f"({text} == {int(value)})"
            parts.append(f"~as_bool({text})" if negated else f"as_bool({text})")
        return " & ".join(parts) if parts else None

    def assign(self, out: Ref, rhs: str, depth: int, stmt: Stmt | None = None) -> None:
        mask = self.mask(stmt) if stmt is not None else None
        fixed = _fixed(out)
        if mask is not None:  # where the condition fails, the slot keeps its old value
            old = f"take_element({out.var}, {fixed})" if fixed else out.var
            rhs = f"where_mask({mask}, {rhs}, {old})"
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
        elif s.param("plates", ()):  # a plate of size 0 has no instances: no term
            self.emit(f"log_evidence += total({term}, {self.shape(s.param('plates'))})",
                      depth)
        else:
            self.emit(f"log_evidence += total({term})", depth)

    # the variable node's statements (factorflow.codegen.variable_nodes)
    stmt_Variable_marginal = variable_nodes.marginal
    stmt_Variable_use = variable_nodes.use
    stmt_Variable_backward = variable_nodes.backward
    stmt_Variable_evidence = variable_nodes.evidence

    def initial_value(self, d: VarDecl) -> str:
        """The value a message or posterior starts from: uniform, or the user's
        initialisation (from ``init``)."""
        fam = self.symbol(d.family or "", "family", d.family)
        if d.attr("init") is not None:
            return f"initial(init, {d.attr('init')!r}, {fam}, {self.shape(d.plates)})"
        return f"{fam}.uniform({self.shape(d.plates)}{self.event(d)})"

    def event(self, d: VarDecl) -> str:
        return f", {d.event}" if d.family in ("Discrete", "Dirichlet", "VectorGaussian",
                                              "Wishart") else ""


#: the variable-node updates: each recomputes a posterior or an edge message from the
#: messages as they stand, without any factor's operator
_NODE_UPDATES = ("Variable.marginal", "Variable.use", "Variable.backward")


def flat(body: tuple[Any, ...]) -> list[Stmt]:
    """A loop body's statements in the order a sweep with one pass of each inner (local)
    loop runs them: its inner loops' statements in their place."""
    out: list[Stmt] = []
    for node in body:
        out.extend(flat(node.body) if isinstance(node, While) else [node])
    return out


def _local_loop(e: _Emitter, inner: While, depth: int, checked: dict[str, int],
                position: int) -> int:
    """Emit an inner loop (``transforms/local_loop.py``): the restart, then at most
    ``inner.sweeps`` passes over its statements, stopping once the local posteriors
    change by less than ``inner.tolerance`` — or, with ``inner.each``, once each element
    of those posteriors has (an element that has stopped keeps its value: a mask over
    the plate); the posteriors are checked proper after it.  Returns the position after
    its statements in the flattened sweep."""
    stmts = flat(inner.body)
    internal = ("gate", "clone_of", "exit_of", "local_of")
    watched = [s.outputs[0].var for s in stmts if s.op == "Variable.marginal"
               and not any(e.decls[s.param("target")].attr(a) is not None for a in internal)]
    labels = ", ".join(e.decls[s.param("target")].label for s in stmts
                       if s.outputs and s.outputs[0].var in watched)
    e.last_prov = None
    e.emit(f"# ---- local loop ({comment(labels)}): their updates iterated with every "
           "other", depth)
    e.emit("# posterior held fixed (variational EM's E-step)"
           + (", restarted from their initialisation" if inner.restart or inner.init else ""),
           depth)
    for name in inner.restart:
        e.emit(f"{name} = {e.initial_value(e.decls[name])}", depth)
    for s in inner.init:
        e.statement(s, depth, check=False)
    e.last_prov = None
    each = inner.each if inner.tolerance is not None else ()
    if each:
        stop = ", ".join(e.decls[s.param("target")].label for s in stmts
                         if s.outputs and s.outputs[0].var in each)
        e.emit(f"# each element of {comment(stop)} stops on its own once it moves by less "
               f"than {inner.tolerance!r} (relative),", depth)
        e.emit("# then keeps its posterior (the others follow from it); the loop ends once "
               "all have stopped", depth)
        e.emit("local_done = None", depth)
        watched = list(each)
    e.emit(f"for local_sweep in range({int(inner.sweeps or 1)}):", depth)
    tuple_of = "(" + "".join(f"{w}, " for w in watched).rstrip(" ") + ")"
    if inner.tolerance is not None:
        e.emit(f"local_before = {tuple_of}", depth + 1)
    for s in stmts:
        e.statement(s, depth + 1, check=True, last=False)
        if each and s.op == "Variable.marginal" and s.outputs[0].var in each:
            name = s.outputs[0].var
            e.emit(f"{name} = local_keep({name}, local_before, local_done, "
                   f"{each.index(name)})", depth + 1)
    if each:
        e.emit(f"local_done = local_stopped({tuple_of}, local_before, local_done, "
               f"{inner.tolerance!r})", depth + 1)
        e.emit("if local_all_stopped(local_done):", depth + 1)
        e.emit("break", depth + 2)
    elif inner.tolerance is not None:
        e.emit(f"if local_change({tuple_of}, local_before) < {inner.tolerance!r}:", depth + 1)
        e.emit("break", depth + 2)
    e.last_prov = None
    for k, s in enumerate(stmts):
        if s.op == "Variable.marginal" and checked[s.outputs[0].var] == position + k:
            e.check_proper(s, depth)
    return position + len(stmts)


def _no_sweep(e: _Emitter, loop: While) -> None:
    """With ``iterations == 0`` the loop body never runs.  The result is then the state
    before any evidence flows up the model: the messages as initialised (from the data,
    and the user's initial posteriors, which stay as given), with the prior propagated
    once down the model — each factor's message to the variable it defines, in schedule
    order — and every posterior (and the messages the evidence reads) recomputed from
    them, so that no posterior is left at its uniform starting value."""
    initialised = {d.name for d in e.p.decls if d.attr("init") is not None}
    updates = [s for s in flat(loop.body) if (s.op in _NODE_UPDATES or _forward(s))
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


def _refresh(program: Program, last: int) -> list[Stmt]:
    """Under VMP, every loop's updates other than the posteriors of non-derived
    variables, loop by loop in schedule order: run before the evidence terms, they
    recompute every message from the current posteriors (a sweep leaves some, such as
    a gate's messages to its cases, from before later posteriors moved; so does each
    loop before the last, whose messages the bound reads too), so that the bound
    reported after a sweep is the ELBO of the posteriors reported with it.  An operator
    that reads the message it sent last (``previous``) is left out: it divides that
    message out of a posterior that is not recomputed here, and the bound does not
    read its message (only that posterior does); so is one that keeps a state (an
    extra call would move it)."""
    if program.algorithm != "vmp" or last < 0:
        return []
    loops = [n for n in program.body[: last + 1] if isinstance(n, While)]
    return [s for loop in loops for s in flat(loop.body) if s.outputs and not (
        s.op == "Variable.marginal" and not s.param("derived"))
        and not s.param("previous") and not s.param("state")]


def _uniform_call(s: Stmt) -> bool:
    """Whether ``s`` calls an operator or evidence function whose result is uniform (a
    term of 0) whatever its inputs (``factors.common.uniform_message``)."""
    key = s.param("evidence")
    if isinstance(key, tuple) and len(key) == 2 and key[0] in FACTORS:
        fn = FACTORS[key[0]].evidence.get(key[1])
    else:
        key = s.param("operator")
        if not (isinstance(key, tuple) and len(key) == 3 and key[0] in FACTORS):
            return False
        op = FACTORS[key[0]].operators.get((key[1], key[2]))
        fn = op.fn if op is not None else None
    return bool(getattr(fn, "uniform_message", False))


def _silent(program: Program) -> frozenset[int]:
    """The ids of the statements the program leaves out (where ``LEAN``): calls whose
    result is uniform whatever their inputs (``_uniform_call``) — an evidence term of 0
    (added to the total, or sent to a gate's case as a uniform message), and a message
    every statement assigning which is such a call (it keeps its uniform start all run
    long, which products leave out, ``variable_nodes.backward``).  Left out, a message
    is the uniform one over its declaration's plates instead of the shape the call would
    have given it (a broadcast of the same zeros)."""
    global _LAST_SILENT
    if not LEAN:
        return frozenset()
    owner, known = _LAST_SILENT  # (one read: another thread may replace it)
    if owner() is program:
        return known
    stmts = [s for s, _ in walk(program.body)]
    by_name: defaultdict[str, list[Stmt]] = defaultdict(list)
    for s in stmts:
        for o in s.outputs:
            by_name[o.var].append(s)
    out = set()
    for s in stmts:
        if not _uniform_call(s):
            continue
        if s.param("evidence") and not s.param("to_gate"):
            out.add(id(s))  # (log_evidence += 0: nothing)
        elif s.outputs and all(_uniform_call(t) for o in s.outputs for t in by_name[o.var]):
            out.add(id(s))
    _LAST_SILENT = (weakref.ref(program), frozenset(out))
    return _LAST_SILENT[1]


#: the last program ``_silent`` read, and its verdict
_LAST_SILENT: tuple[Callable[[], Any], frozenset[int]] = (lambda: None, frozenset())


def _cavities(program: Program) -> dict[int, str]:
    """EP, a variable with one use laid out as it is (``same``), not initialised by the
    user, whose posterior is its definition's message F times that use's message B:
    the message to the use, posterior / B, is F, and the message to the definition,
    posterior / F, is B — equal to rounding (F·B/B against F: 1e-16 of the terms).
    {id of such a ``Variable.use`` statement: F's name, of such a ``Variable.backward``:
    B's name}, where the statement follows that posterior's update in the same statement
    list (a loop's body or initialisation, or the statements around the loops) with
    neither F, B nor the posterior written in between: the quotient is then of the
    values F and B hold.  Not where B comes from an operator that reads its last message
    or keeps a state (below).  Nothing under VMP (the use's message is the posterior)."""
    if program.algorithm != "ep":
        return {}
    decls = {d.name: d for d in program.decls}
    out: dict[int, str] = {}
    # a use's message from an operator that reads its last message or keeps a state (an
    # extrapolation over sweeps, ``DiscreteFromSoftmaxPlate``): its quotients are kept,
    # so that the sequences it extrapolates are the same numbers (its convergence is
    # sensitive to their rounding: 135 sweeps against 157 on multinomial regression)
    stateful = {o.var for s, _ in walk(program.body)
                if s.param("state") or s.param("previous") for o in s.outputs}

    def plain(ref: Any) -> bool:
        return isinstance(ref, Ref) and not ref.index

    def block(nodes: tuple[Any, ...] | list[Any]) -> None:
        fresh: dict[str, tuple[str, str, str]] = {}  # target -> (posterior, F, B)
        for node in nodes:
            if isinstance(node, While):
                block(node.init)
                block(node.body)
                fresh.clear()  # (what a loop writes: not followed)
                continue
            ins = dict(node.inputs)
            target = node.param("target")
            known = fresh.get(target) if isinstance(target, str) else None
            if known and node.op == "Variable.use" and node.param("use") == 0 \
                    and plain(ins.get("marginal")) and plain(ins.get("use")) \
                    and (ins["marginal"].var, ins["use"].var) == (known[0], known[2]):
                out[id(node)] = known[1]
            elif known and node.op == "Variable.backward" and not node.param("derived") \
                    and plain(ins.get("marginal")) and plain(ins.get("def")) \
                    and (ins["marginal"].var, ins["def"].var) == known[:2]:
                out[id(node)] = known[2]
            written = {o.var for o in node.outputs}
            for v in [v for v, names in fresh.items() if written & set(names)]:
                del fresh[v]
            if node.op == "Variable.marginal" and not node.param("derived") \
                    and len(node.param("uses", ())) == 1 \
                    and node.param("uses")[0][0] == "same" and set(ins) == {"def", "use0"} \
                    and plain(ins["def"]) and plain(ins["use0"]) \
                    and plain(node.outputs[0]) and not node.param("mask") \
                    and ins["use0"].var not in stateful \
                    and decls[node.outputs[0].var].attr("init") is None:
                fresh[target] = (node.outputs[0].var, ins["def"].var, ins["use0"].var)

    block(program.body)
    return out


def _fixed(ref: Ref) -> tuple[tuple[int, int], ...]:
    """(axis, value) of each integer index of a reference (a gate clone's slot)."""
    return tuple((i, int(item)) for i, item in enumerate(ref.index)
                 if isinstance(item, int) and not isinstance(item, bool))


def _state_names(program: Program) -> list[str]:
    """The locals that make up the state of a run: every message and posterior that
    some statement assigns (the others keep the value they start with, uniform or
    the user's initialisation, which a resumed run gives them again)."""
    assigned: set[str] = set()
    silent = _silent(program)

    def visit(nodes: tuple[Any, ...]) -> None:
        for node in nodes:
            if isinstance(node, Stmt) and id(node) not in silent:
                assigned.update(o.var for o in node.outputs)
            elif isinstance(node, While):
                visit(node.init)
                visit(node.body)
    visit(program.body)
    return [d.name for d in program.decls if d.role in ("message", "marginal")
            and d.name in assigned]


def _state(e: _Emitter, program: Program) -> None:
    """Emit ``state(loop, sweeps)``: the whole state of a run after ``sweeps`` sweeps of
    loop ``loop`` — every message and posterior that changes, by name.  Every other
    local is read from ``data``, ``sizes`` and ``init``, and the operators are pure,
    so a run resumed from ``state()`` (``_restore``) goes on exactly as the run that
    saved it would have."""
    e.emit("# ---- the state of the run: every message and posterior by name, and where", 1)
    e.emit("# the run is (after ``sweeps`` sweeps of loop ``loop``)", 1)
    e.emit("def state(loop, sweeps):", 1)
    e.emit("return {'loop': loop, 'sweeps': sweeps, 'messages': {", 2)
    for name in _state_names(program):
        e.emit(f"{name!r}: {name},", 3)
    if e.kept:  # what stateful operators keep, by their message (a copy: a snapshot)
        e.emit("}, 'operators': {", 2)
        for name, kept in e.kept.items():
            e.emit(f"{name!r}: dict({kept}),", 3)
    e.emit("}}", 2)


def _deferred_of_data(program: Program, before: list[Stmt]) -> list[Stmt]:
    """The statements of ``before`` (what runs before the first loop, and its
    initialisation) that make a deferred message (``Deferred``) from the data and
    constants alone, and those that carry it on unchanged (a variable's product with
    uniform messages), where no loop assigns it again: a resumed run makes them again.
    A state saves a deferred message as its value, and the product a gate then takes of
    the value is another computation than the deferred one (its rounding differs); made
    again from the same data it is the same call, so the resumed run stays bit-identical
    to the uninterrupted one."""
    looped: set[str] = set()  # what every other statement assigns: sweeps, later loops
    first = True  # (the statements before the first loop and its init are ``before``)
    for node in program.body:
        if isinstance(node, While):
            for inner in node.body + (() if first else node.init):
                if isinstance(inner, Stmt):
                    looped.update(o.var for o in inner.outputs)
            first = False
        elif isinstance(node, Stmt) and not first:
            looped.update(o.var for o in node.outputs)
    fixed = {d.name for d in program.decls if d.role in ("observed", "constant")}
    made: set[str] = set()
    out = []
    for s in before:
        if not isinstance(s, Stmt):
            continue
        outputs = {o.var for o in s.outputs}
        reads = {r for _, v in s.inputs for r in refs_in(v)}
        if (not outputs or outputs & looped or not reads <= fixed | made
                or not (s.param("defer") or reads & made)):
            continue
        made |= outputs
        out.append(s)
    return out


def _restore(e: _Emitter, program: Program, before: list[Stmt]) -> None:
    """Emit the other branch of the first loop's ``if resume is None:``: every message
    as the state passed back as ``resume`` holds it, in place of the statements before
    the loops and of their initialisation (``first_sweep`` skips the sweeps done); the
    deferred messages of the data alone made again (``_deferred_of_data``)."""
    e.emit("else:  # ---- resuming: every message as the state saved it", 1)
    names = _state_names(program)
    for name in names:
        e.emit(f"{name} = resume['messages'][{name!r}]", 2)
    for name, kept in e.kept.items():  # (a copy: the operator writes into it)
        e.emit(f"{kept} = dict(resume['operators'][{name!r}])", 2)
    again = _deferred_of_data(program, before)
    if again:
        e.emit("# deferred messages of the data alone: made again, as the fresh run made", 2)
        e.emit("# them (saved, a deferred message is its value: another computation)", 2)
        e.last_prov = None
        for s in again:
            e.statement(s, 2, check=False)
    if not names and not again and not e.kept:
        e.emit("pass", 2)


def _prologue(e: _Emitter, program: Program) -> None:
    """The first lines of every backend's ``infer``: the plate sizes, the data, and every
    message uniform (a posterior the user initialised from ``init``)."""
    for r, _ in program.ranges:
        e.emit(f"{r} = sizes[{r!r}]", 1)
    for d in program.decls:
        if d.role in ("observed", "constant"):
            e.emit(f"{d.name} = data[{d.name!r}]  # {comment(d.role + ' ' + d.label)}", 1)
    e.emit("# every message starts uniform, a posterior the user initialised from init", 1)
    for d in program.decls:
        if d.role in ("message", "marginal"):
            e.emit(f"{d.name} = {e.initial_value(d)}", 1)
    if e.kept:
        e.emit("# what each stateful operator keeps between calls, by its message: empty at", 1)
        e.emit("# the start of a run (state() returns it, a resumed run gets it back)", 1)
    for name, kept in e.kept.items():
        e.emit(f"{kept} = {{}}  # of {name}", 1)


def _outputs(program: Program) -> list[VarDecl]:
    """The variables whose posteriors the user gets (not the gate transform's own)."""
    internal = ("gate", "clone_of", "exit_of", "local_of")  # the gate transform's own
    return [d for d in program.decls if d.role == "random"
            and not any(d.attr(a) is not None for a in internal)]


def _posteriors(program: Program) -> tuple[str, str]:
    """The source of the user's posteriors (a dict by label) and of the gate transform's
    own, for the convergence check alone: messages may still be moving through them while
    the user's posteriors stand still."""
    outputs = _outputs(program)
    result = "{" + ", ".join(f"{d.label!r}: {marginal(d.name)}" for d in outputs) + "}"
    hidden = [d for d in program.decls if d.role == "random" and d not in outputs
              and any(m.name == marginal(d.name) for m in program.decls)]
    watched = "{" + ", ".join(f"{d.name!r}: {marginal(d.name)}" for d in hidden) + "}"
    return result, watched


def _sections(program: Program, lean: bool = False
              ) -> tuple[list[Stmt], list[While], int, list[Stmt], list[Stmt]]:
    """The program's parts as ``infer`` lays them out: the evidence terms, the loops, the
    index of the last loop in the body, the updates after it, and the VMP refresh that
    brings every message up to date before the bound (``_refresh``); ``lean``: the
    last loop's sweep leaves out what ``_dropped`` finds (the NumPy program's)."""
    evidence = [n for n in program.body if isinstance(n, Stmt) and not n.outputs]
    loops = [n for n in program.body if isinstance(n, While)]
    last = max((i for i, n in enumerate(program.body) if isinstance(n, While)), default=-1)
    tail = [n for n in program.body[last + 1:] if isinstance(n, Stmt) and n.outputs]
    refresh = _refresh(program, last)
    if refresh:
        refresh = _live(program, program.body[last], refresh, tail + evidence, lean=lean)
    return evidence, loops, last, tail, refresh


#: the last program ``_node_steps`` read, and the steps of its nodes by (id, check):
#: ``_live``, ``_settled`` and ``_dropped`` read the same statements of one program,
#: emitted once (and under "emitter" the scratch emitter, ``_scratch``)
_LAST_STEPS: tuple[Callable[[], Any], dict[Any, Any]] = (lambda: None, {})


def _stretches(program: Program, loop: While, refresh: list[Stmt], after: list[Stmt],
               lean: bool = False) -> tuple[list[list[liveness.Step]], ...]:
    """The steps (``codegen.liveness``) of the sweep of ``loop`` (one per node of its body,
    an inner loop opaque; with ``lean``, none for a statement the sweep leaves out,
    ``_dropped``), of
    ``refresh`` and of ``after``, as this emitter writes them (``_node_steps``).  Raises
    SyntaxError where they do not read as Python."""
    steps = _node_steps(program)
    dropped = _dropped(program, loop) if lean else frozenset()
    return ([[] if j in dropped else steps(n, True) for j, n in enumerate(loop.body)],
            [steps(s, False) for s in refresh], [steps(s, False) for s in after])


def _node_steps(program: Program) -> Callable[[Stmt | While, bool], list[liveness.Step]]:
    """``steps(node, check)``: the steps of a node of ``program`` as this emitter writes
    it (with ``check``, as in a sweep: a posterior's check after it) — a scratch
    emitter's lines; a statement's steps do not depend on what was emitted before it, so
    those of the last program are remembered.  An inner loop is opaque.  Raises
    SyntaxError where they do not read as Python."""
    global _LAST_STEPS
    owner, table = _LAST_STEPS  # (one read: another thread may replace it)
    if owner() is not program:
        table = {}
        _LAST_STEPS = (weakref.ref(program), table)
    e = _scratch(program)
    names = frozenset(e.decls) | {liveness.ITERATION}

    def steps(node: Stmt | While, check: bool) -> list[liveness.Step]:
        key = (id(node), check)  # (the program holds its nodes: ids stay apart)
        if key not in table:
            start = len(e.lines)
            if isinstance(node, While):  # an inner loop: opaque
                _local_loop(e, node, 0, defaultdict(lambda: -1), 0)
            else:
                e.statement(node, 0, check=check)
            table[key] = liveness.steps(e.lines[start:], names,
                                        opaque=isinstance(node, While))
        return table[key]

    return steps


def _scratch(program: Program) -> _Emitter:
    """An emitter of ``program`` whose lines nobody reads (the analyses' steps), made
    once for the last program ``_node_steps`` read."""
    owner, table = _LAST_STEPS
    if owner() is not program:
        return _Emitter(program, frozenset())
    e = table.get("emitter")
    if e is None:
        e = table["emitter"] = _Emitter(program, frozenset())
    return e


#: the last program ``_dropped`` read, and its verdicts by loop (id)
_LAST_DROPPED: tuple[Callable[[], Any], dict[int, frozenset[int]]] = (lambda: None, {})


def _dropped(program: Program, loop: While) -> frozenset[int]:
    """The positions in the body of ``loop`` of the statements the NumPy program's sweep
    leaves out (VMP, where ``LEAN``; the JAX program keeps them: XLA merges repeated
    work itself, and its loop would carry the values instead): those that compute again
    what their names hold (``liveness.repeated``: a gate's clone of a posterior that
    has not moved, entered again after the cases moved, and what is computed from it),
    then those whose values nothing reads before the sweep computes them again
    (``liveness.overwritten``).  Every name holds the same value after the sweep, and at
    every point where a statement reads it.  Kept: inner loops, stateful operators
    (a call moves their state), and every statement where the source does not read as
    Python.  The inputs an operator reads for their shape alone
    (``Operator.shape_only``) do not count as its inputs' values where every statement
    that assigns them lays out a posterior (``Variable.use``), whose shape is fixed."""
    return _lean_sweep(program, loop)[0]


def _unchecked(program: Program, loop: While) -> frozenset[int]:
    """The positions in the body of ``loop`` of the posterior updates after which the
    sweep leaves out the properness check (VMP, where ``LEAN``): the value is proper by
    then (``liveness.implied``): a gate's clone of a posterior checked earlier in the
    sweep (the same posterior over the clone's batch), a posterior's copy or layout."""
    return _lean_sweep(program, loop)[1]


def _lean_sweep(program: Program, loop: While) -> tuple[frozenset[int], frozenset[int]]:
    """``_dropped`` and ``_unchecked`` of ``loop``, remembered for the last program."""
    global _LAST_DROPPED
    if not LEAN or program.algorithm not in ("vmp", "ep"):
        return frozenset(), frozenset()
    owner, table = _LAST_DROPPED  # (one read: another thread may replace it)
    if owner() is not program:
        table = {}
        _LAST_DROPPED = (weakref.ref(program), table)
    if id(loop) in table:
        return table[id(loop)]
    ep = program.algorithm == "ep"
    layouts = _layouts(program)
    raw: list[list[liveness.Step]] = []
    valued: list[list[liveness.Step]] = []  # the reads of values alone (``shape_only``)
    fixed: list[bool] = []  # never left out
    try:
        steps = _node_steps(program)
        e = _scratch(program)
        for node in loop.body:
            got = steps(node, True)  # (a check after a statement only reads)
            raw.append(got)
            if isinstance(node, While):
                valued.append(got)
                fixed.append(True)
                continue
            shape = _shape_reads(node, layouts)
            valued.append([(text, tuple(r for r in reads if r not in shape), writes)
                           for text, reads, writes in got])
            # (EP: only the variable nodes' products and quotients are left out; an
            # operator's call may skip, warn or count improper inputs)
            fixed.append(bool(node.param("state")) or (
                ep and node.op not in ("Variable.marginal", "Variable.use",
                                       "Variable.backward")))
    except SyntaxError:
        table[id(loop)] = (frozenset(), frozenset())
        return table[id(loop)]
    if ep:  # a posterior computed twice, the first value read by nothing, a message laid
        # out again from the same values (``_cavities``)
        out = {j for j, hit in enumerate(liveness.repeated(raw)) if hit and not fixed[j]}
        kept = [[] if j in out else stmt for j, stmt in enumerate(raw)]
        out |= {j for j, hit in enumerate(liveness.overwritten(kept)) if hit and not fixed[j]}
        table[id(loop)] = (frozenset(out), frozenset())
        return table[id(loop)]
    again = liveness.repeated(valued)
    out = {j for j, hit in enumerate(again) if hit and not fixed[j]}
    kept = [[] if j in out else stmt for j, stmt in enumerate(raw)]
    while True:  # (a statement read only by one left out goes next)
        dead = {j for j, hit in enumerate(liveness.overwritten(kept))
                if hit and not fixed[j]}
        if not dead:
            break
        out |= dead
        kept = [[] if j in out else stmt for j, stmt in enumerate(raw)]
    # the check after each posterior's last update the sweep runs, and what is proper
    # where another value is
    at = [0]  # the position of each node of the body in ``flat(loop.body)`` (``_sweep``)
    for node in loop.body:
        at.append(at[-1] + (len(flat(node.body)) if isinstance(node, While) else 1))
    gone = {at[j] for j in out}
    last = {n.outputs[0].var: i for i, n in enumerate(flat(loop.body))
            if i not in gone and n.op == "Variable.marginal"}
    checks = [n.outputs[0].var if isinstance(n, Stmt) and n.op == "Variable.marginal"
              and last.get(n.outputs[0].var) == at[j] and e.mask(n) is None else None
              for j, n in enumerate(loop.body)]
    follows = [{} if j in out or isinstance(n, While) else _follows(e, n)
               for j, n in enumerate(loop.body)]
    valued = [[] if j in out else stmt for j, stmt in enumerate(valued)]
    implied = liveness.implied(valued, follows, checks)
    unchecked = frozenset(j for j, hit in enumerate(implied) if hit)
    checks = [None if j in unchecked else c for j, c in enumerate(checks)]
    table[id(loop)] = (frozenset(out), unchecked)
    table[("sweep", id(loop))] = (valued, follows, checks)
    return table[id(loop)]


def _checked_first(program: Program, loop: While, between: list[Stmt]) -> frozenset[int]:
    """The positions in the body of ``loop`` of the posterior updates whose properness
    check the NumPy program runs in the first sweeps of a run alone (``swept``, VMP,
    where ``LEAN``): in every later sweep the value is proper by then
    (``liveness.implied_later``, with ``between`` — ``evidence()``'s statements, after
    the last loop — or nothing run between two sweeps): a gate's clone, at the start of
    a sweep, of a posterior checked at the end of the last sweep and not moved since.
    A first sweep's check lets a uniform element pass (``kernels.check_proper``): the
    sweep after the run's first sweep checks too."""
    _lean_sweep(program, loop)
    _, table = _LAST_DROPPED
    if ("sweep", id(loop)) not in table:
        return frozenset()
    valued, follows, checks = table[("sweep", id(loop))]
    layouts = _layouts(program)
    stretch, stretch_follows = [], []
    try:
        steps = _node_steps(program)
        e = _scratch(program)
        for s in between:
            shape = _shape_reads(s, layouts)
            stretch.append([(text, tuple(r for r in reads if r not in shape), writes)
                            for text, reads, writes in steps(s, False)])
            stretch_follows.append(_follows(e, s))
    except SyntaxError:
        return frozenset()
    variants = [([], [])] + ([(stretch, stretch_follows)] if between else [])
    later = liveness.implied_later(valued, follows, checks, variants)
    return frozenset(j for j, hit in enumerate(later) if hit and checks[j] is not None)


#: the operators whose message is the value itself over the clone's batch (a gate's
#: clones under VMP: ``gate._enter_one``, ``_enter``, ``_enter_partial``)
_CLONES = {("Gate.EnterOne", "vmp", "enter_one"): "value", ("Gate.Enter", "vmp", "enter"):
           "value", ("Gate.EnterPartial", "vmp", "enter_partial"): "value"}


def _follows(e: _Emitter, s: Stmt) -> dict[str, str]:
    """{output: input} where ``s`` (under VMP) makes its output proper wherever that input
    is: a posterior laid out on a use (no division: a copy, a gather, a slot), the
    posterior of a derived variable that is its definition's message alone, a gate's
    clone of a value.  Empty for a masked statement or an output written element by
    element."""
    if not s.outputs or _fixed(s.outputs[0]) or e.mask(s) is not None:
        return {}
    out = s.outputs[0].var
    ins = dict(s.inputs)
    if s.op == "Variable.use" and "use" not in ins and isinstance(ins.get("marginal"), Ref):
        return {out: ins["marginal"].var}
    if s.op == "Variable.marginal" and set(ins) == {"def"} and isinstance(ins["def"], Ref):
        return {out: ins["def"].var}
    arg = _CLONES.get(s.param("operator"))
    value = ins.get(arg) if arg else None
    if isinstance(value, Ref) and all(isinstance(i, str) for i in value.index) \
            and not s.param("defer"):
        return {out: value.var}
    return {}


def _layouts(program: Program) -> frozenset[str]:
    """The messages every statement assigning which lays out a posterior
    (``Variable.use``, or left out: ``_silent``): their shape is fixed all run long."""
    silent = _silent(program)
    by: defaultdict[str, set[str]] = defaultdict(set)
    for s, _ in walk(program.body):
        if id(s) not in silent:
            for o in s.outputs:
                by[o.var].add(s.op if all(isinstance(i, str) for i in o.index)
                              else "indexed")
    return frozenset(n for n, ops in by.items() if ops == {"Variable.use"})


def _shape_reads(s: Stmt, layouts: frozenset[str]) -> frozenset[str]:
    """The names ``s`` reads for their shape alone (its operator's ``shape_only``
    arguments, plain references to ``layouts`` read by no other argument)."""
    key = s.param("operator")
    if not (isinstance(key, tuple) and len(key) == 3 and key[0] in FACTORS):
        return frozenset()
    op = FACTORS[key[0]].operators.get((key[1], key[2]))
    if op is None or not op.shape_only:
        return frozenset()
    shape = {v.var for arg, v in s.inputs if arg in op.shape_only and isinstance(v, Ref)
             and all(isinstance(i, str) for i in v.index) and v.var in layouts}
    other = {r for arg, v in s.inputs if arg not in op.shape_only for r in refs_in(v)}
    return frozenset(shape - other)


def _before(program: Program, loop: While) -> list[list[liveness.Step]]:
    """The steps of what runs before the first sweep of ``loop`` (the last loop): the
    statements before it, and each earlier loop as its initialisation and one sweep
    (an inner loop opaque), then ``loop``'s initialisation.  Raises SyntaxError where
    they do not read as Python."""
    e = _Emitter(program, frozenset())
    names = frozenset(e.decls) | {liveness.ITERATION}
    out: list[list[liveness.Step]] = []

    def add(node: Stmt | While, check: bool) -> None:
        start = len(e.lines)
        if isinstance(node, While):  # an inner loop: opaque
            _local_loop(e, node, 0, defaultdict(lambda: -1), 0)
        else:
            e.statement(node, 0, check=check)
        out.append(liveness.steps(e.lines[start:], names, opaque=isinstance(node, While)))

    for node in program.body:
        if isinstance(node, While):
            for s in node.init:
                add(s, False)
            if node is loop:
                return out
            for s in node.body:
                add(s, True)
        elif node.outputs:
            add(node, False)
    return out


def _live(program: Program, loop: While, refresh: list[Stmt], after: list[Stmt],
          lean: bool = False) -> list[Stmt]:
    """The statements of ``refresh`` that ``evidence()`` must run (``codegen.liveness``):
    those the bound reads, and those without which the next sweep, the next
    ``evidence()`` or the posteriors returned would read another value than today;
    ``after``: what ``evidence()`` runs after the refresh."""
    try:
        sweep, steps, rest = _stretches(program, loop, refresh, after, lean)
        before = _before(program, loop)
    except SyntaxError:  # (the emitter writes Python: keep every statement)
        return refresh
    kept = liveness.live_refresh(sweep, steps, rest,
                                 frozenset(marginal(d.name) for d in _outputs(program)),
                                 before=before)
    return [refresh[i] for i in kept]


def _settled(program: Program, loop: While, refresh: list[Stmt], after: list[Stmt],
             lean: bool = False) -> list[bool]:
    """For each node of the body of ``loop`` (the last loop, whose sweeps ``evidence()``
    may follow): whether a sweep right after ``evidence()`` may skip it, the value it
    computes being the one its outputs hold (``liveness.settled``), where it is part of
    a run of such statements that computes more than copies; none where the statements
    do not read as Python."""
    try:
        skip = liveness.settled(*_stretches(program, loop, refresh, after, lean))
    except SyntaxError:
        return [False] * len(loop.body)
    silent = _silent(program)
    dropped = _dropped(program, loop) if lean else frozenset()
    # a statement left out (``_silent``, ``_dropped``) emits nothing: it joins the run
    # around it
    quiet = [id(n) in silent or j in dropped for j, n in enumerate(loop.body)]
    j = 0
    while j < len(skip):  # a run of nothing but copies is not worth its ``if``: run it
        run = j
        while run < len(skip) and (skip[run] or (quiet[run] and run > j)):
            run += 1
        if all(quiet[r] or loop.body[r].op in ("Variable.use", "Variable.backward")
               for r in range(j, run)):  # type: ignore
            skip[j:run] = [False] * (run - j)
        else:
            skip[j:run] = [True] * (run - j)
        j = run + 1
    return skip


def _sweep(e: _Emitter, loop: While, skip: list[bool], first: frozenset[int] = frozenset(),
           lean: bool = False) -> None:
    """Emit the body of ``loop`` — with ``lean`` (the NumPy program) but the statements
    the sweep leaves out (``_dropped``) and the checks it need not run (``_unchecked``);
    the statements ``skip`` marks run only where ``evidence()`` has not run since the
    last sweep (``refreshed``), in runs under one ``if``; a posterior's check after its
    last update stays outside; the checks after the updates ``first`` marks run only
    until a sweep past the run's first has run (``swept``, ``_checked_first``)."""
    body = list(loop.body)
    dropped = _dropped(e.p, loop) if lean else frozenset()
    at = [0]  # the position of each node of the body in ``flat(loop.body)``
    for node in body:
        at.append(at[-1] + (len(flat(node.body)) if isinstance(node, While) else 1))
    gone = {at[j] for j in dropped}
    # (the value proper by then: no check)
    unchecked = _unchecked(e.p, loop) if lean else frozenset()
    # a posterior updated twice in a sweep is checked once, after its last update
    final_update = {s.outputs[0].var: i for i, s in enumerate(flat(loop.body))
                    if s.op == "Variable.marginal" and i not in gone}
    i = 0
    j = 0
    while j < len(body):
        s = body[j]
        if isinstance(s, While):  # an inner (local) loop
            i = _local_loop(e, s, 2, final_update, i)
            j += 1
            continue
        if j in dropped:
            i, j = i + 1, j + 1
            continue
        if not skip[j]:
            e.statement(s, 2, check=True, last=s.op != "Variable.marginal"
                        or (final_update[s.outputs[0].var] == i and j not in unchecked
                            and j not in first))
            if j in first:
                _check_first(e, s)
            i, j = i + 1, j + 1
            continue
        e.last_prov = None
        e.emit("if not refreshed:  # (else evidence() computed these from the same values)",
               2)
        checks = []
        while j < len(body) and (skip[j] or j in dropped):
            s = body[j]
            if j in dropped:
                i, j = i + 1, j + 1
                continue
            e.statement(s, 3, check=True, last=False)
            if s.op == "Variable.marginal" and final_update[s.outputs[0].var] == i \
                    and j not in unchecked:
                checks.append((s, j in first))
            i, j = i + 1, j + 1
        e.last_prov = None
        for s, once in checks:
            if once:
                _check_first(e, s)
            else:
                e.check_proper(s, 2)


def _check_first(e: _Emitter, s: Stmt) -> None:
    """The check of the posterior ``s`` updates, in the run's first sweeps alone."""
    e.emit("if not swept:  # (later, the value it copies was checked in the last sweep)", 2)
    e.check_proper(s, 3)


def generate(program: Program, reserved: frozenset[str] = frozenset()) -> Generated:
    """Python source for a scheduled message program (see module docstring); ``reserved``:
    the names the runtime puts in the source's globals besides the symbols."""
    if any(n.startswith(USER_PREFIX) for n in GENERATED | reserved):
        raise IRError(f"a generated name starts with the user prefix {USER_PREFIX!r}.")
    e = _Emitter(program, frozenset(reserved))
    e.hoisting = True
    algo = (program.algorithm or "").upper()
    e.emit("def infer(data, sizes, init, iterations, on_iteration=None, damping=None,", 0)
    e.emit("          resume=None):", 0)
    e.emit(f'"""{algo} for model {comment(program.name)!s}: generated by factorflow.', 1)
    e.emit("", 0)
    e.emit("After each sweep ``on_iteration(iteration, posteriors, evidence, state)`` runs", 1)
    e.emit("(True stops); ``state()`` is the whole state of the run, and passed back as", 1)
    e.emit('``resume`` it replaces the initialisation: the run goes on from there."""', 1)
    _prologue(e, program)
    constants = len(e.lines)  # (where the hoisted locals go, once all is emitted)
    result, watched = _posteriors(program)
    # the statements after the last loop and the evidence form ``evidence()``, which the
    # loop's hook may call after any sweep (the bound per iteration) and which runs once
    # at the end; names it assigns are the function's own (nonlocal)
    evidence, loops, last, tail, refresh = _sections(program, lean=True)
    hook = "evidence" if tail or evidence else "None"
    # the last loop's statements that a sweep right after evidence() may skip
    skip = _settled(program, program.body[last], refresh, tail + evidence, lean=True) \
        if refresh else []
    assigned = sorted({o.var for s in refresh + tail for o in s.outputs})
    if any(skip):
        e.emit("refreshed = False  # whether evidence() has run since the last sweep", 1)
        assigned.append("refreshed")
    # the hook's bound after the last sweep is the run's final one: evidence() is a
    # function of the state the sweep left (and leaves a state it gives the same value
    # on), so the end of the run reads it instead of computing it again
    known = last >= 0 and hook == "evidence"
    if known:
        e.emit("# (the sweep evidence() last ran after, and its value: the final bound when", 1)
        e.emit("# no sweep has run since)", 1)
        e.emit("iteration, known_bound = -1, None", 1)
        assigned.append("known_bound")
    e.emit("# ---- evidence: what runs after the last loop, then the evidence terms; the", 1)
    e.emit("# loop's hook may call it after any sweep (the bound per iteration)", 1)
    e.emit("def evidence():", 1)
    if assigned:
        e.emit(f"nonlocal {', '.join(assigned)}", 2)
    if any(skip):
        e.emit("refreshed = True", 2)
    e.emit("log_evidence = 0.0", 2)
    if refresh:
        e.emit("# VMP: every message brought up to date with the current posteriors, so", 2)
        e.emit("# that the bound is the bound of those posteriors", 2)
    e.last_prov = None
    for s in refresh + tail + evidence:
        e.statement(s, 2, check=False)
    if known:
        e.emit("known_bound = (iteration, log_evidence)", 2)
    e.emit("return log_evidence", 2)
    _state(e, program)
    e.last_prov = None
    pending: list[Stmt] = []  # the statements before a loop run with its initialisation
    for node in program.body[: last + 1]:
        if isinstance(node, Stmt) and node.outputs:
            pending.append(node)
        elif isinstance(node, While):
            k = loops.index(node) + 1
            suffix = f" {k}" if len(loops) > 1 else ""
            e.emit("if resume is None:  # a fresh run (resuming: the saved state, below)"
                   if k == 1 else f"if resume is None or resume['loop'] < {k}:  # a fresh "
                   f"run, or one saved before loop {k}", 1)
            for s in pending:
                e.statement(s, 2, check=False)
            e.emit(f"# ---- initialisation{suffix}", 2)
            e.last_prov = None
            for s in node.init:
                e.statement(s, 2, check=False)
            if not pending and not node.init:
                e.emit("pass  # nothing to initialise", 2)
            before, pending = pending + list(node.init), []
            e.last_prov = None
            if k == 1:
                _restore(e, program, before)
            e.emit(f"# ---- iterations{suffix}", 1)
            final = node is program.body[last]
            # the checks the sweeps after the first two need not run (``swept``)
            first = _checked_first(program, node, refresh + tail + evidence if final
                                   else [])
            if first:
                e.emit("swept = False  # whether a sweep past the run's first has run", 1)
            e.emit(f"for iteration in range(first_sweep(resume, {k}, iterations), "
                   "iterations):", 1)
            e.last_prov = None
            _sweep(e, node, skip if final and skip else [False] * len(node.body), first,
                   lean=True)
            if not node.body:
                e.emit("pass  # nothing to iterate: every message is exact after one pass",
                       2)
            if final and any(skip):
                e.emit("refreshed = False", 2)
            if first:  # (a first sweep's check lets a uniform element pass)
                e.emit("swept = iteration > 0", 2)
            e.emit(f"if on_iteration is not None and on_iteration(iteration, {result}, "
                   f"{hook if final else 'None'},", 2)
            e.emit(f"        lambda: state({k}, iteration + 1), {watched}):", 2)
            e.emit("break", 3)
            e.last_prov = None
            _no_sweep(e, node)
    if known:  # (a run of no sweep, or whose hook read no bound: computed here)
        e.emit("log_evidence = known_bound[1] if known_bound is not None and known_bound[0] "
               "== iteration \\", 1)
        e.emit("    else evidence()", 1)
    else:
        e.emit("log_evidence = evidence()", 1)
    e.emit(f"return {result}, log_evidence", 1)
    e.lines[constants:constants] = e.hoisted_lines()
    header = [f"# Generated by factorflow: {algo} message passing for model "
              f"{comment(program.name)}.",
              "# Each statement is one array operation over a whole plate.", ""]
    return Generated("\n".join(header + e.lines) + "\n", e.symbols)


__all__ = ["generate", "Generated", "format_stmt"]
