"""Messages: factor calls and variable nodes become message-update statements.

Input: the channel IR.  Output: a flat program of statements, each one array operation
over its plates, with declarations for every message.  For a latent variable ``v`` with
uses ``u``: ``v__F`` (defining factor → v), ``v__B`` (v → defining factor), ``u__B``
(using factor → v), ``u__F`` (v → using factor) and ``v__marginal`` (names from
``factorflow.codegen.names``: distinct from every other name of the program).  Factor statements
become one operator call per random argument, looked up in the factor registry for the
algorithm (an unsupported pair raises UnsupportedFactorError naming the statement), plus
one evidence statement.  Every statement carries ``params``: ``target`` (the variable whose
message it computes), ``plates`` and, for operators, ``operator`` = (factor, algorithm,
argument) so later passes read annotations from the registry.  Under VMP, two or more
``ff.sum`` of one variable's elements share one block update (``_joint_sum_updates``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from factorflow.codegen.names import backward, display, forward, fresh, marginal
from factorflow.errors import ModelError, UnsupportedFactorError
from factorflow.factors.plate_sum import MAX_SUMS as _MAX_SUMS
from factorflow.factors.registry import DOMAIN_FAMILY, FACTORS
from factorflow.ir import Const, For, If, Program, Ref, Stmt, VarDecl
from factorflow.ir.nodes import Arange, Operand, walk

SUFFIX = {"ep": "average_conditional", "vmp": "average_logarithm"}
EVIDENCE = {"ep": "log_average_factor", "vmp": "average_log_factor"}


def messages(program: Program, algorithm: str) -> Program:
    if algorithm not in SUFFIX:
        raise ModelError(f"unknown algorithm {algorithm!r}; use 'ep' or 'vmp'.")
    decls = {d.name: d for d in program.decls}
    random = {n: d for n, d in decls.items() if d.role == "random"}
    use_of = {n: d.attr("of") for n, d in decls.items() if d.role == "use"}
    derived = {n for n, d in random.items() if d.attr("derived")}
    vmp_derived = derived if algorithm == "vmp" else set()
    fused = _fused_reductions(program, decls) if algorithm == "vmp" else {}
    joint = _joint_sum_updates(program, decls) if algorithm == "vmp" else {}
    deferred = _deferred_clone_messages(program, decls, fused)
    new_decls: list[VarDecl] = []

    defined_at = {o.var: stmt.provenance for stmt, _ in walk(program.body)
                  for o in stmt.outputs}
    _refuse_constant_arithmetic(program, decls)
    if algorithm == "vmp":
        _refuse_shared_inner_sums(program, decls)

    def message_decl(name: str, of: VarDecl, plates: tuple[str, ...], label: str,
                     role: str = "message") -> None:
        if of.domain == "count":
            where = defined_at.get(of.name, "") or of.attr("where", "")
            raise UnsupportedFactorError(
                f"{of.label}{f' ({where})' if where else ''}: latent count variables are "
                f"not supported by {algorithm.upper()}; observe {of.label!r}.")
        new_decls.append(VarDecl(name, role, of.domain, DOMAIN_FAMILY[of.domain], plates,
                                 of.event, label))

    for v, d in random.items():
        message_decl(forward(v), d, d.plates, f"message to {d.label} from its definition")
        message_decl(backward(v), d, d.plates, f"message from {d.label} to its definition")
        message_decl(marginal(v), d, d.plates, f"posterior of {d.label}", "marginal")
    for u, v in use_of.items():
        du = decls[u]
        # a fused message is over the variable's plates: its operator multiplied it over
        # the plates the use adds
        message_decl(backward(u), random[v], random[v].plates if u in fused else du.plates,
                     f"message to {random[v].label} from its {du.label.split(' of ')[0]}")
        message_decl(forward(u), random[v], du.plates, f"message from {random[v].label} "
                     f"to its {du.label.split(' of ')[0]}")

    taken = set(decls) | {d.name for d in new_decls} | {r for r, _ in program.ranges}

    def buffer_decl(stmt: Stmt, factor: str, name: str, loops: tuple[str, ...]) -> str:
        """Declare the buffer ``name`` of one factor statement: over its loops, named
        after the variable the statement defines (or its first random argument)."""
        base = next(r.var for r in stmt.outputs + tuple(v for _, v in stmt.inputs)
                    if isinstance(r, Ref))
        ident = fresh(base, name, taken)
        domain = FACTORS[factor].buffers[name]
        new_decls.append(VarDecl(ident, "message", domain, DOMAIN_FAMILY[domain], loops,
                                 None, f"{factor}'s {name} for {decls[base].label}"))
        return ident

    body: list[Stmt] = []
    sole: dict[str, str] = {}
    for stmt, loops, mask in _walk_masked(program.body, (), (), decls):
        if stmt.op == "Variable":
            made = _variable_statements(stmt, decls, algorithm, vmp_derived, fused)
        else:
            _check_sole(stmt, algorithm, decls, sole)
            made = _factor_statements(stmt, loops, decls, algorithm, fused, buffer_decl,
                                      deferred)
            if id(stmt) in joint:  # one block update for all the sums of its elements
                made = [t for s in made for t in (
                    [joint[id(stmt)]] if s.param("operator") == ("PlateSum", "vmp", "array")
                    else [s]) if t is not None]
        body.extend(replace(s, params=s.params + (("mask", mask),)) if mask else s
                    for s in made)
    return replace(program, decls=program.decls + tuple(new_decls), body=tuple(body),
                   algorithm=algorithm, _by_name={})


def _check_sole(stmt: Stmt, algorithm: str, decls: dict[str, VarDecl],
                seen: dict[str, str]) -> None:
    """UnsupportedFactorError where an operator that holds only as the sole one of its
    factor on each element of its target (``Operator.sole``) is not: a second statement
    on the same variable, or one over a plate the variable lacks."""
    factor = FACTORS.get(stmt.op)
    if factor is None:
        return
    for name, value in stmt.inputs:
        op = factor.operators.get((algorithm, name))
        if op is None or not op.sole or not isinstance(value, Ref) \
                or decls[value.var].role != "use":
            continue
        var = decls[value.var].attr("of")
        where = stmt.provenance or stmt.op
        extra = [p for p in decls[value.var].plates if p not in decls[var].plates]
        if var in seen or extra:
            label = decls[var].label
            raise UnsupportedFactorError(
                f"{where}: {algorithm.upper()}'s {factor.name} message to {name!r} holds for "
                f"one {factor.name} on each element of {label}, and "
                + (f"{label} has one already ({seen[var]})" if var in seen else
                   f"this one is repeated over {', '.join(map(display, extra))}, which "
                   f"{label} lacks")
                + "; combine them into one (the intersection), or use 'ep'.")
        seen[var] = where


def _walk_masked(nodes: tuple, loops: tuple[str, ...], mask: tuple, decls: dict[str, VarDecl]):
    """Statements with their loops and the observed conditions around them: an ``If`` on
    a known condition masks its body (its statements apply only where it holds)."""
    for node in nodes:
        if isinstance(node, Stmt):
            yield node, loops, mask
        elif isinstance(node, For):
            yield from _walk_masked(node.body, loops + (node.range,), mask, decls)
        elif isinstance(node, If):
            known = decls[node.condition.var].role in ("observed", "constant")
            inner = mask + ((node.condition, node.value, node.negated),) if known else mask
            yield from _walk_masked(node.body, loops, inner, decls)
        else:
            yield from _walk_masked(node.body, loops, mask, decls)


def _fused_reductions(program: Program, decls: dict[str, VarDecl]) -> dict[str, tuple]:
    """Under VMP, the uses whose message to their variable is multiplied over plates the
    use adds (a broadcast use) by the factor's operator itself, with the plate axes it
    multiplies over: where the operator takes ``reduce=`` (``Operator.reduces``), the use
    is read by an unmasked factor statement, and the use's other plates are the
    variable's, in order.  Its message is then declared over the variable's plates and
    needs no reduction after it (BayesPy's fused sums: no per-element D × D messages)."""
    hows: dict[str, tuple] = {}
    for stmt, _, mask in _walk_masked(program.body, (), (), decls):
        if stmt.op == "Variable" and not mask:
            for out, how in zip(stmt.outputs, stmt.param("uses"), strict=True):
                hows[out.var] = how
    fused: dict[str, tuple] = {}
    for stmt, loops, mask in _walk_masked(program.body, (), (), decls):
        factor = FACTORS.get(stmt.op)
        # a statement in a gate sends VMP messages as any other (its gate input only
        # takes its evidence to the case), so it may be fused too
        if factor is None or mask:
            continue
        for name, operand in stmt.inputs:
            how = hows.get(operand.var) if isinstance(operand, Ref) else None
            op = factor.operators.get(("vmp", name))
            if how is None or how[0] != "broadcast" or op is None or not op.reduces:
                continue
            use_decl = decls[operand.var]
            var_plates = decls[use_decl.attr("of")].plates
            if use_decl.attr("mask") or tuple(loops) != use_decl.plates or tuple(
                    p for p in loops if p not in how[1]) != var_plates:
                continue
            fused[operand.var] = tuple(loops.index(p) for p in how[1])
    return fused


def _deferred_clone_messages(program: Program, decls: dict[str, VarDecl],
                             fused: dict[str, tuple]) -> set[str]:
    """Under VMP, the uses of gate clones whose message is deferred
    (``factors.common.Deferred``): the clone is made by a ``Gate.EnterOne`` whose message
    to the value is fused over the plate the gate repeats it on, the clone has this one
    use, and the factor reading it takes ``weights`` in its fused form.  Then the clone's
    messages are only ever weighted by their cases and multiplied over that plate, which
    the factor's own operator does in one einsum (a mixture's (N, K, D, D) statistics are
    never made; BayesPy issue #83)."""
    uses_of: dict[str, list[str]] = {}
    reader: dict[str, tuple[str, bool]] = {}
    for stmt, _, mask in _walk_masked(program.body, (), (), decls):
        if stmt.op == "Variable":
            v = stmt.input("def")
            uses_of[v.var] = [o.var for o in stmt.outputs]
            continue
        factor = FACTORS.get(stmt.op)
        for name, operand in stmt.inputs:
            if factor is not None and isinstance(operand, Ref):
                op = factor.operators.get(("vmp", name))
                reader[operand.var] = (name, bool(op is not None and op.weights and not mask))
    out: set[str] = set()
    for stmt, _, _ in _walk_masked(program.body, (), (), decls):
        value = dict(stmt.inputs).get("value")
        if stmt.op != "Gate.EnterOne" or not isinstance(value, Ref) or value.var not in fused:
            continue
        uses = uses_of.get(stmt.outputs[0].var, [])
        # (a use its reader already multiplies over plates of its own is not deferred)
        if len(uses) == 1 and uses[0] not in fused and reader.get(uses[0], ("", False))[1]:
            out.add(uses[0])
    return out


def _joint_sum_updates(program: Program, decls: dict[str, VarDecl]
                       ) -> dict[int, Stmt | None]:
    """Under VMP, the ``ff.sum`` statements (``PlateSum``) that sum one variable's
    elements, two or more over the same plate, each the elements themselves or
    ``c * x`` with c known (``ScaleBy``), outside gates: their elements get one block
    update over all of them (``factors.plate_sum``, ``PlateSums``: coordinate ascent,
    where each sum's own update would not be).  Returns, by ``id`` of each such
    statement, the block update that replaces its message to its array: the update
    for the first sum (an unscaled one where there is one), None for the others (their
    arrays keep a uniform message from them; the update sends their part)."""
    scaled: dict[str, tuple[str, Operand]] = {}  # c * x -> (x, c)
    for stmt, _, mask in _walk_masked(program.body, (), (), decls):
        if stmt.op != "ScaleBy" or mask or not stmt.outputs:
            continue
        a, scale = stmt.input("a"), stmt.input("scale")
        if isinstance(a, Ref) and decls[a.var].role == "use" and _plain(a, decls) and (
                isinstance(scale, Const) or (isinstance(scale, Ref) and decls[scale.var].role
                                             in ("constant", "observed"))):
            scaled[stmt.outputs[0].var] = (decls[a.var].attr("of"), scale)
    groups: dict[tuple, list[tuple[Stmt, tuple[str, ...], Ref, Operand | None]]] = {}
    for stmt, loops, mask in _walk_masked(program.body, (), (), decls):
        array = dict(stmt.inputs).get("array")
        if stmt.op != "PlateSum" or mask or not isinstance(array, Ref) \
                or decls[array.var].role != "use" or not _plain(array, decls) \
                or decls[stmt.outputs[0].var].role != "random":
            continue
        of = decls[array.var].attr("of")
        root, scale = scaled.get(of, (of, None))
        if decls[root].role != "random" or decls[root].attr("derived"):
            continue
        groups.setdefault((root, loops, array.index), []).append((stmt, loops, array, scale))
    out: dict[int, Stmt | None] = {}
    for (root, _, _), members in groups.items():
        if len(members) < 2:
            continue  # one sum: its own update (PlateSum), the same thing
        if len(members) > _MAX_SUMS:
            raise UnsupportedFactorError(
                f"{members[_MAX_SUMS][0].provenance}: VMP updates at most {_MAX_SUMS} sums of "
                f"one variable's elements together, and {decls[root].label!r} has "
                f"{len(members)}; use 'ep', or sum fewer.")
        members.sort(key=lambda m: m[3] is not None)  # (stable) an unscaled sum first
        (first, loops, array, scale) = members[0]
        reads: list[tuple[str, Operand]] = [("array", Ref(forward(array.var), array.index)),
                                            ("sum", Ref(backward(first.outputs[0].var),
                                                        first.outputs[0].index))]
        if scale is not None:
            reads.append(("scale", scale))
        for k, (stmt, _, _, other) in enumerate(members[1:], 1):
            reads.append((f"sum{k}", Ref(backward(stmt.outputs[0].var), stmt.outputs[0].index)))
            if other is not None:
                reads.append((f"scale{k}", other))
        out[id(first)] = Stmt(
            "PlateSums.array_average_logarithm", (Ref(backward(array.var), array.index),),
            tuple(reads), (("plates", loops), ("operator", ("PlateSums", "vmp", "array")),
                           ("target", decls[array.var].attr("of")), ("previous", True)),
            first.provenance)
        out.update((id(stmt), None) for stmt, _, _, _ in members[1:])
    return out


def _plain(ref: Ref, decls: dict[str, VarDecl]) -> bool:
    """Whether ``ref`` reads a use of a variable element for element: over the variable's
    own plates, in order, not gathered or broadcast."""
    d = decls[ref.var]
    return d.plates == decls[d.attr("of")].plates and ref.index == d.plates


def _edge_out(ref: Ref, decls: dict[str, VarDecl]) -> Ref | None:
    """The message carrying this variable towards the factor, or None if it is known."""
    d = decls[ref.var]
    if d.role == "use":
        return Ref(forward(ref.var), ref.index)
    if d.role == "random":
        return Ref(backward(ref.var), ref.index)
    return None


def _factor_statements(stmt: Stmt, loops: tuple[str, ...], decls: dict[str, VarDecl],
                       algorithm: str, fused: dict[str, tuple],
                       buffer_decl: Callable[[Stmt, str, str, tuple[str, ...]], str],
                       deferred: frozenset[str] | set[str] = frozenset()) -> list[Stmt]:
    factor = FACTORS.get(stmt.op)
    where = stmt.provenance or stmt.op
    if factor is None:
        raise ModelError(f"{where}: unknown factor {stmt.op!r}.")
    args: dict[str, Operand] = {}
    edges: dict[str, Ref] = {}
    if stmt.outputs:
        args[factor.args[0].name] = stmt.outputs[0]
    args.update(dict(stmt.inputs))
    gate = args.pop("gate", None)
    for key, value in stmt.params:  # constant arguments written as parameters (gate slots)
        if key in factor.arg_names:
            args[key] = Const(Arange(value) if isinstance(value, str) else value)
    for name, operand in args.items():
        if isinstance(operand, Ref):
            out = _edge_out(operand, decls)
            if out is not None:
                edges[name] = out
    params_common = (("plates", loops),)
    result: list[Stmt] = []
    # the buffers the operators below read: each computed by its own statement, first
    needed = dict.fromkeys(b for name in args if (algorithm, name) in factor.operators
                           and name in edges for b in factor.operators[(algorithm, name)].reads
                           if b in factor.buffers)
    for b in needed:
        op = factor.operators[(algorithm, b)]
        ref = Ref(buffer_decl(stmt, factor.name, b, loops), loops)
        args[b] = edges[b] = ref
        reads = tuple((k, edges.get(k, args[k])) for k in op.reads if k in args)
        result.append(Stmt(op.qualname, (ref,), reads,
                           params_common + (("operator", (factor.name, algorithm, b)),),
                           stmt.provenance))
    for name, operand in args.items():
        if name not in edges or name in needed:
            continue
        assert isinstance(operand, Ref)
        op = factor.get_operator(algorithm, name, where)
        bad = [k for k in op.known if k in edges]
        if bad:
            ok = [a for a in ("ep", "vmp") if (a, name) in factor.operators
                  and not (set(factor.operators[(a, name)].known) & set(edges))]
            hint = f"use {' or '.join(map(repr, ok))}" if ok else f"observe {bad[0]!r}"
            raise UnsupportedFactorError(
                f"{where}: {algorithm.upper()} needs {factor.name} argument {bad[0]!r} to be "
                f"known (a constant or observed), but it is random; {hint}.")
        decl = decls[operand.var]
        target = (Ref(backward(operand.var), operand.index) if decl.role == "use"
                  else Ref(forward(operand.var), operand.index))
        var = decl.attr("of") if decl.role == "use" else operand.var
        reads = tuple((k, edges.get(k, args[k])) for k in op.reads if k in args)
        extra: tuple = ()
        if operand.var in fused:  # the operator multiplies its messages over these axes
            target = Ref(target.var, decls[var].plates)
            extra = (("reduce", fused[operand.var]),)
        if op.previous:  # the operator reads the message it sent last time
            extra += (("previous", True),)
        if op.state:  # the operator keeps a state of its own between calls
            extra += (("state", True),)
        if operand.var in deferred:  # computed, weighted and reduced, by Gate.EnterOne
            extra += (("defer", True),)
        result.append(Stmt(op.qualname, (target,), reads,
                           params_common + (("operator", (factor.name, algorithm, name)),
                                            ("target", var)) + extra,
                           stmt.provenance))
    if algorithm in factor.evidence:
        reads = tuple((k, edges.get(k, v)) for k, v in args.items() if k not in needed)
        reads += _messages_sent(factor.evidence[algorithm], result)
        evidence = Stmt(f"{factor.name}.{EVIDENCE[algorithm]}", (), reads,
                        params_common + (("evidence", (factor.name, algorithm)),),
                        stmt.provenance)
        result.append(_to_gate(evidence, gate, decls))
    elif not factor.deterministic or algorithm == "ep":
        raise UnsupportedFactorError(f"{where}: factor {factor.name} has no {algorithm.upper()}"
                                     " evidence operator.")
    for name, operand in args.items():
        if name not in edges and isinstance(operand, Const) and operand.value is None:
            raise ModelError(f"{where}: argument {name!r} has no value.")
    return result


def _messages_sent(fn: Callable[..., Any], stmts: list[Stmt]) -> tuple[tuple[str, Ref], ...]:
    """The reads ``to_<argument>`` that an evidence term ``fn`` names in its signature: the
    message this factor sends to that argument (as Infer.NET's ``to_X``), where an
    operator computes it here (not fused over plates)."""
    wanted = set(inspect.signature(fn).parameters)
    return tuple((f"to_{s.param('operator')[2]}", s.outputs[0]) for s in stmts
                 if s.param("operator") and not s.param("reduce")
                 and f"to_{s.param('operator')[2]}" in wanted)


def _to_gate(evidence: Stmt, gate: Operand | None, decls: dict[str, VarDecl]) -> Stmt:
    """Inside a gate, an evidence term is the message to the gate's case instead of a
    term of the total (Minka & Winn's gates: the case weighs its body's evidence)."""
    if gate is None:
        return evidence
    assert isinstance(gate, Ref)
    cases = decls[gate.var].attr("of")
    return replace(evidence, outputs=(Ref(backward(gate.var), gate.index),),
                   params=evidence.params + (("to_gate", cases),))


def _variable_statements(stmt: Stmt, decls: dict[str, VarDecl], algorithm: str,
                         vmp_derived: set[str], fused: dict[str, tuple]) -> list[Stmt]:
    v = stmt.input("def")
    assert isinstance(v, Ref)
    d = decls[v.var]
    hows = stmt.param("uses")
    uses = [o.var for o in stmt.outputs]
    derived = v.var in vmp_derived
    common = (("plates", d.plates), ("target", v.var), ("uses", hows),
              ("use_plates", tuple(decls[u].plates for u in uses)),
              ("use_masks", tuple(decls[u].attr("mask") or () for u in uses)))
    reduced = tuple(k for k, u in enumerate(uses) if u in fused)
    if reduced:  # the messages from these uses come already multiplied over their plates
        common += (("reduced_uses", reduced),)
    marg, fwd, back = Ref(marginal(v.var)), Ref(forward(v.var)), Ref(backward(v.var))
    use_b = tuple((f"use{k}", Ref(backward(u))) for k, u in enumerate(uses))
    out = [Stmt("Variable.marginal", (marg,), (("def", fwd),) + (() if derived else use_b),
                common + (("algorithm", algorithm), ("derived", derived)), stmt.provenance)]
    for k, u in enumerate(uses):
        inputs: tuple = (("marginal", marg),)
        if algorithm == "ep":
            inputs += (("use", Ref(backward(u))),)
        out.append(Stmt("Variable.use", (Ref(forward(u)),), inputs,
                        common + (("use", k), ("algorithm", algorithm)), stmt.provenance))
    back_inputs: tuple = use_b if derived else (("marginal", marg),) + (
        (("def", fwd),) if algorithm == "ep" else ())
    out.append(Stmt("Variable.backward", (back,), back_inputs,
                    common + (("algorithm", algorithm), ("derived", derived)),
                    stmt.provenance))
    gate = dict(stmt.inputs).get("gate")
    if d.attr("do_not_send_evidence"):
        return out
    if algorithm == "ep":
        ev = (("marginal", marg), ("def", back)) + tuple(
            (f"use{k}", Ref(forward(u))) for k, u in enumerate(uses))
        out.append(_to_gate(Stmt("Variable.evidence", (), ev, common + (
            ("algorithm", "ep"),), stmt.provenance), gate, decls))
    elif not derived:
        out.append(_to_gate(Stmt("Variable.evidence", (), (("marginal", marg),),
                                 common + (("algorithm", "vmp"),), stmt.provenance),
                            gate, decls))
    return out


# the real-valued arithmetic factors whose operators cannot send a message to a result
# that known arguments fix exactly (a point mass is no Gaussian message)
_POINT_MASS_ARITHMETIC = frozenset({"Plus", "Minus", "ScaleBy", "Product"})


def _refuse_constant_arithmetic(program: Program, decls: dict[str, VarDecl]) -> None:
    """Refuse, naming its statement, arithmetic on known values alone whose result is a
    random variable of the program (the run would refuse it without the statement)."""
    def known(op: Any) -> bool:
        if isinstance(op, Const):
            return True
        if isinstance(op, Ref):
            decl = decls.get(op.var)
            return decl is not None and decl.role in ("observed", "constant")
        return False

    for stmt, _ in walk(program.body):
        if stmt.op not in _POINT_MASS_ARITHMETIC or not stmt.outputs:
            continue
        out = decls.get(stmt.outputs[0].var)
        if out is None or out.role != "random" or not stmt.inputs:
            continue
        if all(known(op) for _, op in stmt.inputs):
            raise UnsupportedFactorError(
                f"{out.label} ({stmt.provenance or 'a statement'}): every argument of "
                f"{stmt.op} is known, so its result is a constant that message passing "
                "cannot send a message to; compute it with NumPy and pass the number.")



def _refuse_shared_inner_sums(program: Program, decls: dict[str, VarDecl]) -> None:
    """Under VMP, refuse a sum of sums whose inner sum has a second use.

    ``s[k] = ff.sum(x[k, n], n)`` read by ``ff.sum(s, k)`` (or by ``ff.sum(c * s, k)``,
    ``ff.sum(s + b, k)``: any chain of deterministic statements) and also by another
    factor (``y[k] ~ N(s[k], ...)``): the inner sum's update (``PlateSum``) takes its
    elements' posterior to be the product of their messages, which a derived sum's is not
    when the outer sum and the other use both send to it; the sweep is not coordinate
    ascent and diverges (NaN posteriors after a few hundred sweeps,
    test_regressions17_sumref).  Raises UnsupportedFactorError naming the outer sum, the
    inner one and the other use.  A sum of sums with no other use of the inner sum or of
    the chain between them is left alone (it reaches the mean-field optimum)."""
    defined: dict[str, Stmt] = {}  # a derived variable -> its defining statement
    readers: dict[str, list[Stmt]] = {}  # a variable -> the statements reading it
    for stmt, _ in walk(program.body):
        for o in stmt.outputs:
            if decls[o.var].role == "random" and decls[o.var].attr("derived"):
                defined[o.var] = stmt
        for _, value in stmt.inputs if stmt.op != "Variable" else ():  # (its uses)
            if isinstance(value, Ref) and value.var in decls:
                d = decls[value.var]
                readers.setdefault(d.attr("of") if d.role == "use" else value.var,
                                   []).append(stmt)

    def chain(var: str, seen: tuple[str, ...]) -> list[tuple[str, ...]]:
        """The derived variables from an inner sum up to ``var`` (each such path)."""
        stmt = defined.get(var)
        if stmt is None or var in seen:
            return []
        if stmt.op == "PlateSum":
            return [(var,) + seen]
        out = []
        for _, value in stmt.inputs:
            if isinstance(value, Ref) and value.var in decls:
                d = decls[value.var]
                out += chain(d.attr("of") if d.role == "use" else value.var, (var,) + seen)
        return out

    for outer, _ in walk(program.body):
        array = dict(outer.inputs).get("array")
        if outer.op != "PlateSum" or not isinstance(array, Ref) or array.var not in decls:
            continue
        d = decls[array.var]
        for path in chain(d.attr("of") if d.role == "use" else array.var, ()):
            inside = {id(outer)} | {id(defined[v]) for v in path}
            for var in path:
                others = [r for r in readers.get(var, ()) if id(r) not in inside]
                if not others:
                    continue
                inner = defined[path[0]]
                raise UnsupportedFactorError(
                    f"{outer.provenance or 'ff.sum'}: VMP cannot sum "
                    f"{decls[path[0]].label!r} (itself an ff.sum, "
                    f"{inner.provenance or 'PlateSum'}) while "
                    f"{decls[var].label!r} has another use "
                    f"({', '.join(r.provenance or r.op for r in others)}): its update "
                    "would diverge.  Use 'ep' (exact here), or make the inner sum a latent "
                    "with its own precision, e.g. s = ff.Gaussian('s', ff.sum(x, n), "
                    "precision=10.0), and sum and use that.")
