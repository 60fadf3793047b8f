"""Gates on a selector inside gates on its exit variables (issue 10/11: never a silent
wrong answer; gatebound15).

A variable ``e`` defined in every case of a gate on ``z`` (an *exit* variable) has, under
VMP, one posterior per case, q(e | z) (its clone ``e__cond_z[k]``), and outside the gates on
``z`` it is read through its merged posterior q(e) = Σ_k q(k) q(e | k).  A statement that
reads ``e`` and ``z`` together outside a gate on ``z`` — ``ff.Case(z, 0)`` inside
``ff.IfNot(e)``, or two exits of ``z`` in one factor — would take its expectation under
q(e) q(z), which is not the joint the bound's other terms (the entropy of q(e | z)) use:
the sum was above log Z (oracle seed 8: −0.152 against −0.241).  Inside a gate on ``z``
the same statement reads ``e`` in the case, and the expectation is the joint's.

* :func:`selectors_outside` rewrites the first kind: a gate on ``z`` nested (at any depth)
  inside gates on exit variables of ``z``'s gates moves outside them — ``IfNot(e){Case(z,
  0){S}}`` becomes ``Case(z, 0){IfNot(e){S}}``, the same indicator [e = False][z = 0] on
  ``S``'s factors — statement by statement, where nothing else changes meaning (the
  rewritten program must pass ``analyze_gates`` with the same variables' homes; else the
  original is kept).  Both algorithms: under EP the graph becomes the tree it is.
  Then an observed statement that still reads such a pair (two exits of one gate, in
  ``ff.If(e2)`` around ``ff.If(e3)``) is written once per case of ``z``, inside
  ``ff.Case(z, k)`` (``ff.If`` / ``ff.IfNot`` for a boolean): the same factor, each copy
  reading the exits in its case.
* VMP (exit19, fuzz seed 22): a gate on a condition ``w`` defined inside the gate on
  ``e`` that lies between the gates on ``e`` and ``z`` keeps them in place (moved out,
  the gate on ``z`` would read ``w`` outside the gate that defines it).
  :func:`_copies_per_case` then writes that gate on ``e``'s block once per case k of
  ``z``, inside ``ff.Case(z, k)``: each variable it draws outside gates on ``z`` one
  variable per case (``w`` -> ``w__z_k``, ``names.fresh``), a gate on ``z`` inside
  reduced to its body in its case and dropped in the others — the same model, an
  indicator [z = k] on each copy.  factorflow reports a variable drawn inside a gate by
  its posterior given the gate's case, so the user's ``w`` is P(w | e = c) = Σ_k
  P(z = k | e = c) P(w | z = k, e = c): :func:`exits_given`, after the gate transform,
  defines it by ``Gate.ExitGiven`` (``factors/gate.py``), the copies weighted by
  q(z = k) q(e = c | z = k), normalised (``Gate.Exit`` weighs by q(z = k) alone: 0.5154
  for fuzz seed 22's v9, where enumeration gives 0.5026).  Both algorithms: as written,
  EP's graph had a loop (finite, not exact); the copies make it the tree it is, exact.
* :func:`check_joint_reads` (VMP) refuses, naming both variables and the statement, any
  read of such a pair that remains, with what to write instead: a latent variable
  defined under gates on two exits of one gate; an exit and its selector (or two
  exits) in one factor where the gates could not move and no copy per case was made —
  among them the gate on ``e`` above where :func:`_copies_per_case` does not apply:
  the gate on ``e`` or a gate on ``z`` inside another gate (of an observed condition
  too), ``z`` or ``e`` indexed otherwise than by the loops around the gate on ``e``, a
  gate on ``z`` in it that is a Switch's or reads ``z`` at other indices, or a block
  that defines outside the gates on ``z`` anything but latent variables over exactly
  those loops (data, a variable drawn in an inner loop) (:func:`_blocker` says why the
  gates could not move).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from factorflow.codegen.names import display, fresh, token
from factorflow.errors import ModelError
from factorflow.ir import For, If, Program, Ref, Stmt, VarDecl, framed, nest, refs_in, walk
from factorflow.ir.printer import format_ref
from factorflow.transforms.gate_analysis import (
    GateAnalysis,
    analyze_gates,
    case_of,
    condition_key,
    show_ref,
)

#: a frame around a statement: ("for", range, id) or ("if", condition, value, negated,
#: id), the id that of the IR node (``ir.nest`` keeps blocks with one id together,
#: and apart from their neighbours, as they were)
Frame = tuple


def _paths(frames: tuple[Frame, ...], decls: Mapping[str, VarDecl],
           sizes: Mapping[str, int]) -> list[tuple | None]:
    """For each frame, the stochastic path around it (``gate_analysis.Path``), and for a
    random condition's frame its (key, case) appended; None for the other frames."""
    path: tuple = ()
    loops: tuple[str, ...] = ()
    out: list[tuple | None] = []
    for f in frames:
        if f[0] == "for":
            loops += (f[1],)
            out.append(None)
            continue
        decl = decls[f[1].var]
        if decl.role != "random":
            out.append(None)
            continue
        case, _, _ = case_of(If(f[1], (), f[2], f[3]), decl, loops, sizes)
        key = condition_key(path, f[1])
        out.append((path, key, case))
        path = path + ((key, case),)
    return out


def _span(frames: tuple[Frame, ...], i: int) -> tuple[int, int]:
    """The frames of the gate at ``i``: itself, and its loop before it for a switch."""
    f = frames[i]
    if isinstance(f[2], str) and i > 0 and frames[i - 1][:2] == ("for", f[2]):
        return i - 1, i + 1
    return i, i + 1


def _reorder(frames: tuple[Frame, ...], a: GateAnalysis, decls: Mapping[str, VarDecl],
             sizes: Mapping[str, int]) -> tuple[Frame, ...]:
    """``frames`` with each gate on a selector moved outside the gates on its exit
    variables around it (see the module docstring), where its condition's indices are
    open there."""
    for _ in range(len(frames)):
        paths = _paths(frames, decls, sizes)
        move = None
        for i, at in enumerate(paths):
            if at is None or move is not None:
                continue
            z = frames[i][1]
            for h in range(i):
                outer = paths[h]
                if outer is None:
                    continue
                e = frames[h][1].var
                if condition_key(outer[0], z) not in a.exits.get(e, ()):
                    continue
                lo, hi = _span(frames, i)
                start = _span(frames, h)[0]
                between = {f[1] for f in frames[start:lo] if f[0] == "for"}
                if any(isinstance(x, str) and x in between for x in z.index):
                    continue  # its condition needs a loop opened inside those gates
                move = (start, lo, hi)
                break
        if move is None:
            return frames
        start, lo, hi = move
        frames = frames[:start] + frames[lo:hi] + frames[start:lo] + frames[hi:]
    return frames


def selectors_outside(program: Program, refuse: bool = False) -> Program:
    """``program`` with gates on selectors moved outside the gates on their exit variables,
    a gate on an exit that a condition drawn inside it keeps around a gate on the
    selector written once per case of the selector (:func:`_copies_per_case`), and
    observed statements that read two exits of one gate outside it written once per
    case (module docstring); the same program where there is none, or where rewriting
    would change where a variable lives.  ``refuse`` (VMP): then ModelError for a read
    that remains (:func:`check_joint_reads`)."""
    stmts: list[tuple[tuple[Frame, ...], Stmt]] = []
    if not framed(program.body, (), stmts) or not any(
            f[0] == "if" for frames, _ in stmts for f in frames):
        return program
    a = analyze_gates(program)
    if not any(a.exits.values()):
        return program
    decls = {d.name: d for d in program.decls}
    sizes = dict(program.ranges)
    moved = [(_reorder(f, a, decls, sizes), s) for f, s in stmts]
    out, b = program, a
    if any(m[0] != f for m, (f, _) in zip(moved, stmts, strict=True)):
        out = _checked(program, a, replace(program, body=nest(moved), _by_name={}))
        if out is program:
            moved = stmts
        else:
            b = analyze_gates(out)
    # an observed statement that still reads two variables of one selector's case (two
    # exits of its gates): once per case of the selector, inside ff.Case(z, k)
    refs = {p[1]: f[1] for frames, _ in moved
            for f, p in zip(frames, _paths(frames, decls, sizes), strict=True) if p}
    conflicts = list(_conflicts(out, b, list(moved)))
    for frames, _, found in conflicts:  # a gate on w drawn inside the gate on e keeps
        # the gate on z inside it: the gate on e's block once per case of z
        copied = None if found is None else _copies_per_case(out, frames, b, decls, sizes)
        if copied is not None:
            return selectors_outside(copied, refuse)
    split: list[tuple[tuple[Frame, ...], Stmt]] = []
    left = []  # the conflicts no copy per case removes
    for frames, stmt, found in conflicts:
        copies = None
        if found is not None and _observed_only(stmt, decls) and found[3] in refs:
            copies = _per_case(frames, found[3], refs[found[3]],
                               b.conditions[found[3]][0], decls, sizes)
        if found is not None and not copies:
            left.append((frames, stmt, found))
        split += [(f, stmt) for f in copies] if copies else [(frames, stmt)]
    if len(split) != len(moved):
        final = _checked(program, a, replace(program, body=nest(split), _by_name={}))
        if final is not program:
            out = final
        if refuse:
            check_joint_reads(out)
        return out
    if refuse and left:
        frames, stmt, (exit_var, other, z, _) = left[0]
        _refuse(stmt, decls[exit_var], decls[other], decls[z], program, decls,
                    _blocker(frames, b, decls, sizes))
    return out


def _blocker(frames: tuple[Frame, ...], a: GateAnalysis, decls: Mapping[str, VarDecl],
             sizes: Mapping[str, int]) -> tuple[str, str, str] | None:
    """(w, e, z) where the gate on a selector z in ``frames`` sits inside a gate on its
    exit e around a gate on a random w defined inside that gate on e (fuzz seed 22's
    v9): moved outside, the gate on z would read w outside the gate that defines it, so
    :func:`_reorder`'s move is undone (``_checked``); None where there is none."""
    found = _blocking(frames, a, decls, sizes)
    return None if found is None else found[:3]


def _blocking(frames: tuple[Frame, ...], a: GateAnalysis, decls: Mapping[str, VarDecl],
              sizes: Mapping[str, int]) -> tuple[str, str, str, int, int] | None:
    """:func:`_blocker`'s (w, e, z) with the positions in ``frames`` of the gate on e
    and of the gate on z."""
    paths = _paths(frames, decls, sizes)
    gates = [(j, f[1], p) for j, (f, p) in enumerate(zip(frames, paths, strict=True))
             if p is not None]
    for i, (at_z, z, _) in enumerate(gates):
        for h, (at_e, e, pe) in enumerate(gates[:i]):
            if condition_key(pe[0], z) not in a.exits.get(e.var, ()):
                continue
            for _, w, _ in gates[h + 1:i]:
                if decls[w.var].role == "random" and a.home.get(w.var, 0) > len(pe[0]):
                    return w.var, e.var, z.var, at_e, at_z
    return None


def _copies_per_case(program: Program, frames: tuple[Frame, ...], a: GateAnalysis,
                     decls: Mapping[str, VarDecl], sizes: Mapping[str, int]
                     ) -> Program | None:
    """``program`` with the gate on e that blocks the statement in ``frames``
    (:func:`_blocking`) written once per case k of its selector z, inside the gate on
    z's case k: each random variable the block draws outside gates on z one variable
    per case (``names.fresh``), a gate on z inside reduced to its body in its own case
    and dropped in the others (with its statements).  The user's variable keeps its
    declaration, ``derived``, with attr ``exit_given`` (z, e, e's case, the copies in
    the order of z's cases), which :func:`exits_given` turns into ``Gate.ExitGiven``
    once the gates are converted.  The same model (an indicator [z = k] on each copy).

    None (nothing rewritten: the refusal stands) unless the gate on e and every gate on
    z sit in loops alone (no gate around them), z and e are indexed by exactly those
    loops, the block defines nothing but random variables outside gates on z, each
    indexed by those loops, and every gate on z in the block reads z as the gate that
    defines e does, by a literal case; or where the result's gates do not check."""
    found = _blocking(frames, a, decls, sizes)
    if found is None:
        return None
    _, e, z, at_e, at_z = found
    gate_e, zref = frames[at_e], frames[at_z][1]
    outer = frames[:at_e]
    loops = tuple(f[1] for f in outer)
    if any(f[0] != "for" for f in outer) or zref.index != loops \
            or gate_e[1].index != loops:
        return None
    stmts: list[tuple[tuple[Frame, ...], Stmt]] = []
    framed(program.body, (), stmts)
    block = [i for i, (f, _) in enumerate(stmts) if f[:at_e + 1] == frames[:at_e + 1]]
    if block != list(range(block[0], block[-1] + 1)):
        return None
    if any(f[0] == "if" and f[1].var == z for fs, _ in stmts for f in fs
           if not (f[1] == zref and all(g[0] == "for" for g in fs[:fs.index(f)])
                   or fs[:at_e + 1] == frames[:at_e + 1])):
        return None  # a gate on z inside another gate, or reading z otherwise
    count, switch = a.conditions.get(condition_key((), zref), (0, "?"))
    if switch is not None or count < 2:
        return None
    drawn: list[str] = []
    for fs, stmt in (stmts[i] for i in block):
        inner = fs[at_e + 1:]
        on_z = [f for f in inner if f[0] == "if" and f[1].var == z]
        if any(f[1] != zref or not isinstance(f[2], int | None) for f in on_z):
            return None
        if on_z:
            continue
        for o in stmt.outputs:
            if decls[o.var].role != "random" or o.index != loops \
                    or decls[o.var].plates != loops or o.var in drawn:
                return None
            drawn.append(o.var)
    if not drawn:
        return None
    zdecl = decls[zref.var]
    taken = set(decls) | set(sizes)
    ecase = case_of(If(gate_e[1], (), gate_e[2], gate_e[3]), decls[e], loops, sizes)[0]
    new_decls = list(program.decls)
    renames = []
    for k in range(count):
        renames.append({w: fresh(w, token(zref.var, k), taken) for w in drawn})
        new_decls += [replace(decls[w], name=renames[k][w], label=(
            f"{decls[w].label or display(w)} in case {k} of {decls[z].label or display(z)}"))
            for w in drawn]
    new_decls = [replace(d, attrs=d.attrs + (("derived", True), ("exit_given", (
        zref, gate_e[1], ecase, tuple(r[d.name] for r in renames)))))
        if d.name in drawn else d for d in new_decls]
    copies: list[tuple[tuple[Frame, ...], Stmt]] = []
    for k in range(count):
        zframe = (("if", zref, k, False) if zdecl.domain != "bool"
                  else ("if", zref, None, k == 1)) + ((gate_e[4], "z", k),)
        for fs, stmt in (stmts[i] for i in block):
            inner = []
            for f in fs[at_e + 1:]:
                if f[0] == "if" and f[1].var == z:
                    if case_of(If(f[1], (), f[2], f[3]), zdecl, loops, sizes)[0] != k:
                        break
                    continue
                inner.append(_renamed_frame(f, renames[k], k))
            else:
                copies.append((outer + (zframe, _renamed_frame(gate_e, renames[k], k))
                               + tuple(inner), _renamed(stmt, renames[k])))
    body = stmts[:block[0]] + copies + stmts[block[-1] + 1:]
    out = replace(program, decls=tuple(new_decls), body=nest(body), _by_name={})
    try:
        analyze_gates(out)
    except ModelError:
        return None
    return out


def _rename_ref(ref: Ref, names: Mapping[str, str]) -> Ref:
    """``ref`` with each variable it reads (its base, gather indices) renamed."""
    return Ref(names.get(ref.var, ref.var), tuple(
        _rename_ref(i, names) if isinstance(i, Ref) else i for i in ref.index))


def _renamed(stmt: Stmt, names: Mapping[str, str]) -> Stmt:
    return replace(stmt, outputs=tuple(_rename_ref(o, names) for o in stmt.outputs),
                   inputs=tuple((n, _rename_ref(v, names) if isinstance(v, Ref) else v)
                                for n, v in stmt.inputs))


def _renamed_frame(frame: Frame, names: Mapping[str, str], k: int) -> Frame:
    """``frame`` of copy ``k``: its condition renamed, its id its own."""
    if frame[0] == "for":
        return frame[:2] + ((frame[2], k),)
    return ("if", _rename_ref(frame[1], names), frame[2], frame[3], (frame[4], k))


def _checked(program: Program, a: GateAnalysis, out: Program) -> Program:
    """``out`` if its gates are valid and its exit variables ``program``'s, else
    ``program``."""
    try:
        b = analyze_gates(out)
    except ModelError:
        return program
    if {v for v, k in b.exits.items() if k} != {v for v, k in a.exits.items() if k}:
        return program
    return out


def _conflicts(program: Program, a: GateAnalysis,
               stmts: list[tuple[tuple[Frame, ...], Stmt]]):
    """For each statement, in program order: (frames, statement, conflict), the conflict
    None or (exit variable, the other variable, selector z, the exit's key on z): two of
    the statement's reads (its gates' conditions and its inputs) whose posteriors both
    depend on z's case outside the gates on z (module docstring)."""
    decls = {d.name: d for d in program.decls}
    sizes = dict(program.ranges)
    selector: dict[tuple, str] = {}  # condition key -> its variable
    for frames, _ in stmts:
        for f, p in zip(frames, _paths(frames, decls, sizes), strict=True):
            if p is not None:
                selector[p[1]] = f[1].var

    selectors = set(selector.values())
    derived: dict[str, dict[str, tuple]] = {}  # a deterministic variable: its inputs'

    def depends(v: str, open_keys: set) -> dict[str, tuple]:
        """The selectors whose case v's posterior depends on, read where the gates
        ``open_keys`` are open (inside a gate on z an exit of z is its case's), each with
        the key of the exit that makes it so (a deterministic variable: its inputs')."""
        out: dict[str, tuple] = dict(derived.get(v, {}))
        for key in a.exits.get(v, ()):
            if key in open_keys or key not in selector:
                continue
            z = selector[key]
            out.setdefault(z, key)
            for y in depends(z, open_keys):
                out.setdefault(y, key)
        return out

    for frames, stmt in stmts:
        paths = _paths(frames, decls, sizes)
        reads: list[tuple[str, dict[str, tuple]]] = []
        open_keys: set = set()
        for f, p in zip(frames, paths, strict=True):
            if p is None:
                continue
            reads.append((f[1].var, depends(f[1].var, open_keys)))
            open_keys.add(p[1])
        opened = {selector[k] for k in open_keys}
        inputs = [(v, depends(v, open_keys)) for _, operand in stmt.inputs
                  for v in (refs_in(operand) if isinstance(operand, Ref) else ())
                  if decls[v].role == "random" and v not in opened]
        reads += inputs
        for o in stmt.outputs:
            if decls[o.var].attr("derived"):
                deps = derived.setdefault(o.var, {})
                for u, du in inputs:
                    deps.update(du)
                    if u in selectors:
                        deps.setdefault(u, ())
        found = None
        for i, (u, du) in enumerate(reads):
            for v, dv in reads[:i]:
                shared = (set(du) & set(dv)) | ({u} & set(dv)) | ({v} & set(du))
                if u != v and shared and found is None:
                    z = sorted(shared)[0]
                    exit_var = v if z in dv else u
                    found = (exit_var, u if exit_var == v else v, z,
                             (dv if z in dv else du)[z])
        yield frames, stmt, found


def check_joint_reads(program: Program) -> None:
    """VMP: ModelError for a statement that reads, outside the gates on a selector ``z``,
    two variables whose posteriors both depend on ``z``'s case — ``z`` itself (as a value
    or a gate's condition) or an exit variable of gates on ``z`` (transitively: exits of
    gates on those) — see the module docstring."""
    stmts: list[tuple[tuple[Frame, ...], Stmt]] = []
    if not framed(program.body, (), stmts):
        return
    a = analyze_gates(program)
    if not any(a.exits.values()):
        return
    decls = {d.name: d for d in program.decls}
    for frames, stmt, found in _conflicts(program, a, stmts):
        if found is not None:
            exit_var, other, z, _ = found
            _refuse(stmt, decls[exit_var], decls[other], decls[z], program, decls,
                    _blocker(frames, a, decls, dict(program.ranges)))


def _per_case(frames: tuple[Frame, ...], key: tuple, zref: Ref, count: int,
              decls: Mapping[str, VarDecl], sizes: Mapping[str, int]
              ) -> list[tuple[Frame, ...]] | None:
    """``frames`` once per case of ``zref`` (the condition of ``key``, an exit's key on
    z, with ``count`` cases), ``ff.Case(z, k)`` (``ff.If`` / ``ff.IfNot``) inserted
    where the gates of ``key`` sit: after the gates of its path and the loops z's
    indices need; None where there is no such place."""
    path = key[0]
    at = 0
    if path:  # just after the last gate of the key's path
        at = next((i + 1 for i, p in enumerate(_paths(frames, decls, sizes))
                   if p is not None and p[0] + ((p[1], p[2]),) == path), None)
        if at is None:
            return None
    loops = [f[1] for f in frames[:at] if f[0] == "for"]
    while any(isinstance(x, str) and x not in loops for x in zref.index):
        if at >= len(frames) or frames[at][0] != "for":
            return None
        loops.append(frames[at][1])
        at += 1
    if decls[zref.var].domain == "bool":
        gates = [("if", zref, None, negated, (key, negated)) for negated in (False, True)]
    else:
        gates = [("if", zref, k, False, (key, k)) for k in range(count)]
    return [frames[:at] + (g,) + frames[at:] for g in gates]


def _observed_only(stmt: Stmt, decls: Mapping[str, VarDecl]) -> bool:
    return all(decls[o.var].role != "random" for o in stmt.outputs)


def _refuse(stmt: Stmt, e: VarDecl, other: VarDecl, z: VarDecl, program: Program,
            decls: Mapping[str, VarDecl],
            blocker: tuple[str, str, str] | None = None) -> None:
    """The VMP refusal of ``stmt`` (module docstring), naming the variables; ``blocker``
    (:func:`_blocker`): why the gates around it could not move, and what to write."""
    name = {d.name: d.label or d.name for d in (e, other, z)}
    why = ""
    if blocker is not None:
        w, ge, gz = (decls[v].label or v for v in blocker)
        why = (f"  (The gate on {gz} sits inside a gate on {ge} around a gate on {w}, "
               f"which is defined inside that gate on {ge}: moved outside it, the gate on "
               f"{gz} would read {w} where it is not defined, so nothing moves.  Write "
               f"that gate on {ge}'s block once per case of {gz}, inside ff.Case({gz}, k) "
               f"for each k, {w} one variable per case: where {ge}'s case holds, {w} is "
               f"then the mixture of those variables weighted by P({gz} = k | {ge}'s "
               f"case).  factorflow writes it so itself only where the gates on {ge} "
               f"and {gz} sit outside other gates, over the loops that index both, "
               f"and that gate on {ge} draws nothing else outside the gates on {gz} "
               f"but latent variables over those loops.)")
    both = f"{name[e.name]} and {name[other.name]}"
    beside = ("its selector" if other is z
              else "another variable that depends on the same case")
    raise ModelError(
        f"VMP: {stmt.provenance or 'a statement'} reads {both} together outside a gate on "
        f"{show_ref(Ref(z.name, z.plates), decls)}: {name[e.name]} is defined in every "
        f"case of a gate on {name[z.name]}, so its posterior is one per case, and a factor "
        f"that reads it beside {beside} outside that gate would not give a bound on the "
        f"evidence.  Open the gates on {name[z.name]} around it (ff.Case({name[z.name]}, "
        f"k) for each k, or ff.Switch({name[z.name]}), outside the gates on "
        f"{name[e.name]}: there each is its definition in the case; a variable it defines "
        "in some branches only needs its own name in each case), or use EP." + why)


def exits_given(program: Program) -> Program:
    """The gate transform's output with each user variable that :func:`_copies_per_case`
    wrote once per case of a selector z (attr ``exit_given``) defined again, after the
    program: its copies stacked on z's case axis (``Copy``, the array ``derived``; each
    copy's ``Copy`` just after its definition, in its gates, so that under EP the
    edge term it sends goes to the case its variable's evidence goes to: they cancel,
    also where a copy's message is exactly uniform, whose mass EP counts as K, and the
    stack sends none) and ``w = Gate.ExitGiven(cases, given=e's clone per case,
    values=the stack, case: e's case)``, in the loops of ``e = Gate.Exit(...)`` — the
    mixture of the copies given e's case (``factors/gate.py``), which is how factorflow
    reports a variable drawn in a gate.  The same program where there is none."""
    wanted = [d for d in program.decls if d.attr("exit_given") is not None]
    if not wanted:
        return program
    cases = {format_ref(s.inputs[0][1]): s.outputs[0].var for s, _ in walk(program.body)
             if s.op == "Gate.Cases"}
    exits = {(s.outputs[0].var, dict(s.inputs)["cases"].var): (s, loops)
             for s, loops in walk(program.body) if s.op == "Gate.Exit"}
    taken = {d.name for d in program.decls} | {r for r, _ in program.ranges}
    decls, body = list(program.decls), list(program.body)
    for w in wanted:
        zref, eref, ecase, copies = w.attr("exit_given")
        exit_stmt, loops = exits[(eref.var, cases[format_ref(zref)])]
        inputs = dict(exit_stmt.inputs)
        axis = inputs["cases"].index[-1]
        stack = fresh(w.name, token("given", zref.var), taken)
        cases_ref = inputs["cases"]
        decls.append(VarDecl(stack, "random", w.domain, plates=w.plates + (axis,),
                             event=w.event, label=f"{w.label or display(w.name)} per case "
                             f"of {display(zref.var)}", attrs=(
                                 ("gate", cases_ref.var), ("exit_of", w.name),
                                 ("derived", True), ("do_not_send_evidence", True))))
        here = tuple(w.plates)
        if tuple(loops) != here:
            raise ModelError(f"{w.label or w.name}: its copies per case of "
                             f"{display(zref.var)} are not in the loops of its exit")
        # copy k just after the copy's definition, in its gates
        for k, c in enumerate(copies):
            body = list(_after(tuple(body), c, Stmt(
                "Copy", (Ref(stack, here + (k,)),), (("value", Ref(c, here)),))))
        nodes: tuple = (Stmt("Gate.ExitGiven", (Ref(w.name, here),), (
            ("cases", inputs["cases"]), ("given", inputs["values"]),
            ("values", Ref(stack, here + (axis,)))), (("case", ecase),),
            exit_stmt.provenance),)
        for r in reversed(here):
            nodes = (For(r, nodes),)
        body += nodes
    return replace(program, decls=tuple(decls), body=tuple(body), _by_name={})


def _after(nodes: tuple, var: str, stmt: Stmt) -> tuple:
    """``nodes`` with ``stmt`` inserted just after the statement that defines ``var``,
    in its block."""
    out: list = []
    for node in nodes:
        if isinstance(node, Stmt):
            out.append(node)
            if any(o.var == var for o in node.outputs):
                out.append(stmt)
        else:
            out.append(replace(node, body=_after(node.body, var, stmt)))
    return tuple(out)
