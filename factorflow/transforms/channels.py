"""Channels: every use of a random variable becomes its own edge (Infer.NET's channel
transform with UsesEqualDef / Replicate / GetItems folded into one variable node).

Guarantees: each read of a latent (role ``random``) variable ``v`` is replaced by a read of
a fresh use variable ``v__useK`` (``names.use``) declared with the plates of the reading
statement; one ``Variable`` statement per latent variable defines all of ``v``'s uses, with
a ``uses`` parameter that says, per use, how the use's array relates to ``v``'s: ``("same",)``,
``("broadcast", extra_plates)``, ``("gather", index_ref)`` or ``("element", fixed,
extra_plates)`` (``fixed``: (axis, value) pairs for integer indices, as gate clones are
read case by case).  The node follows ``v``'s definition, or, for a variable defined
element by element in the branches of a gate, the last of those branches.

Gates: every statement inside ``if cases[..]`` on a random cases variable gets an extra
input ``gate``, a use of that cases variable (its evidence is a message to the case), and
so does the node of a variable the gate transform made for a gate (attr ``gate``).
Observed variables and constants are read directly and get no node.
"""

from __future__ import annotations

from dataclasses import replace

from factorflow.codegen.names import display, use
from factorflow.errors import ModelError
from factorflow.ir import For, If, IRError, Node, Program, Ref, Stmt, VarDecl, While


def channels(program: Program) -> Program:
    random = {d.name: d for d in program.decls if d.role == "random"}
    uses: dict[str, list[tuple[str, tuple]]] = {v: [] for v in random}
    taken = {d.name for d in program.decls} | {r for r, _ in program.ranges}
    new_decls: list[VarDecl] = []

    def use_of(ref: Ref, loops: tuple[str, ...], where: str, kind: tuple | None = None,
               mask: tuple = ()) -> Ref:
        decl = random[ref.var]
        # an index by a range that is not a loop here reads that whole axis
        loops = tuple(loops) + tuple(i for i in ref.index if isinstance(i, str)
                                     and i not in loops)
        k = len(uses[ref.var])
        name = use(ref.var, k)
        if name in taken:  # impossible for names made by factorflow.codegen.names
            raise IRError(f"{program.name}: the use name {name} is already declared.")
        taken.add(name)
        kind = kind or _use_kind(ref, decl, loops, where)
        loops = _use_plates(ref, decl, loops, kind)
        uses[ref.var].append((name, kind))
        new_decls.append(VarDecl(name, "use", decl.domain, plates=tuple(loops),
                                 event=decl.event, label=f"use {k} of {decl.label}",
                                 attrs=(("of", ref.var),) + ((("mask", mask),) if mask
                                                             else ())))
        return Ref(name, tuple(loops))

    gated_at: dict[int, tuple[Ref, tuple[str, ...]]] = {}  # id(stmt) -> its gate, loops

    def rewrite(nodes: tuple[Node, ...], loops: tuple[str, ...], gate: Ref | None,
                mask: tuple = ()) -> tuple[Node, ...]:
        """``mask``: the observed conditions around (a use made here exists only where
        they hold: the variable's evidence counts its edge only there)."""
        out: list[Node] = []
        for node in nodes:
            if isinstance(node, Stmt):
                where = node.provenance or node.op
                # a gate entering a whole array (the gate transform's alternative method):
                # a range indexing both the clone and the value entered, outside every
                # loop, is a loop of the statement, as if written inside ``for``
                here = loops
                if node.op.startswith("Gate.Enter"):
                    value = node.input("value")
                    read = set(value.index) if isinstance(value, Ref) else set()
                    here += tuple(dict.fromkeys(
                        i for o in node.outputs for i in o.index
                        if isinstance(i, str) and i not in loops and i in read))
                inputs = tuple(
                    (k, use_of(v, here, where, mask=mask)
                     if isinstance(v, Ref) and v.var in random else v)
                    for k, v in node.inputs)
                if gate is not None:
                    inputs += (("gate", use_of(gate, loops, where)),)
                new = replace(node, inputs=inputs)
                if gate is not None:
                    gated_at[id(new)] = (gate, loops)
                out.append(new)
            elif isinstance(node, For):
                out.append(replace(node, body=rewrite(node.body, loops + (node.range,), gate,
                                                      mask)))
            elif isinstance(node, If):
                known = node.condition.var not in random
                inner = gate if known else node.condition
                more = ((node.condition, node.value, node.negated),) if known else ()
                out.append(replace(node, body=rewrite(node.body, loops, inner, mask + more)))
            elif isinstance(node, While):
                out.append(replace(node, body=rewrite(node.body, loops, gate, mask)))
        return tuple(out)

    body = rewrite(program.body, (), None)
    last_def = _last_definitions(body, set(random))
    n_defs: dict[str, int] = {}
    for s in _stmts(body):
        for o in s.outputs:
            n_defs[o.var] = n_defs.get(o.var, 0) + 1

    def inline(o: Ref, masked: bool) -> bool:
        """Whether the node of ``o``'s variable follows its definition in place: always,
        except for a variable defined in several branches of an observed condition (its
        node follows the condition, outside every branch).  A variable defined in one
        observed branch only keeps its node inside it, so that the branch's mask covers
        its evidence too (where the branch is off, the variable does not exist)."""
        return not _by_element(o) and (not masked or n_defs[o.var] == 1)

    def node_for(v: str, where: str, gated: bool) -> Stmt:
        decl = random[v]
        inputs: tuple = (("def", Ref(v, decl.plates)),)
        cases = decl.attr("gate") if _is_clone(decl) else None
        if cases is not None and not gated and cases in random:
            definition = last_def.get(v)
            slots = definition.param("indices") if definition is not None else None
            one = definition.param("index") if definition is not None else None
            if slots is not None:  # EnterPartial: clone slot s is case slots[s]
                inputs += (("gate", use_of(Ref(cases), decl.plates, where,
                                           ("slots", tuple(slots)))),)
            elif isinstance(one, int):  # EnterOne into one case of a Case (not a
                # Switch: ff.Switch(z) inside ff.Case(z, k) reading a[z], which is a[k])
                plates = random[cases].plates
                inputs += (("gate", use_of(Ref(cases, plates[:-1] + (one,)), decl.plates,
                                           where)),)
            elif _within(random[cases].plates, decl.plates):
                # the cases are shared by the clone's extra plates (a condition outside
                # the plate of the variable it gates): the use broadcasts over them
                inputs += (("gate", use_of(Ref(cases, random[cases].plates), decl.plates,
                                           where)),)
            else:
                raise ModelError(f"{decl.label}: its gate's cases {random[cases].label} have "
                                 f"plates {_show(random[cases].plates)}, not "
                                 f"{_show(decl.plates)}.")
        return Stmt("Variable", tuple(Ref(n) for n, _ in uses[v]), inputs, (), where)

    def in_gate_of(definition: Stmt, stmt: Stmt) -> Stmt:
        """The variable node ``stmt`` with the gate of its ``definition``, if it is in
        one: the node's evidence goes to the same case."""
        if id(definition) not in gated_at:
            return stmt
        gate, loops = gated_at[id(definition)]
        return replace(stmt, inputs=stmt.inputs + (
            ("gate", use_of(gate, loops, definition.provenance)),))

    emitted: set[str] = set()  # the variables whose node follows a gate (added once)

    def add_nodes(nodes: tuple[Node, ...], gated: bool, masked: bool = False
                  ) -> tuple[Node, ...]:
        out: list[Node] = []
        for node in nodes:
            if isinstance(node, Stmt):
                out.append(node)
                for o in node.outputs:
                    if last_def.get(o.var) is node and inline(o, masked):
                        if _enters_own_gate(random[o.var], random):
                            # a value entered into a gate inside another gate: its clone's
                            # evidence goes to its own gate's cases, which the outer
                            # gate's case hears through their Gate.Cases (as exits do)
                            out.append(node_for(o.var, node.provenance, False))
                        else:
                            out.append(in_gate_of(node, node_for(o.var, node.provenance,
                                                                 gated)))
            elif isinstance(node, For | While):
                out.append(replace(node, body=add_nodes(node.body, gated, masked)))
            elif isinstance(node, If):
                known = node.condition.var not in random  # an observed condition masks
                element = [(o.var, s)
                           for s in _own_stmts(node.body, set(random), masked or known)
                           for o in s.outputs
                           if last_def.get(o.var) is s and (_by_element(o) or known)
                           and not inline(o, True)]
                out.append(replace(node, body=add_nodes(node.body, gated or not known,
                                                        masked or known)))
                # a variable defined in several branches of observed conditions has its
                # node after the last of those branches, in the innermost body holding
                # all its definitions (inside any outer observed branch, whose mask then
                # covers its evidence: where that branch is off it does not exist); a
                # random gate's element definitions (its clones) have theirs after it,
                # also inside an observed branch
                if masked and known:
                    element = [(v, d) for v, d in element
                               if not _defined_by_element(d, v)
                               and _count_defs(node.body, v) < n_defs[v]]
                elif known:
                    element = [(v, d) for v, d in element if _defined_by_element(d, v)
                               or _is_clone(random[v])
                               or _count_defs(node.body, v) < n_defs[v]]
                element = [(v, d) for v, d in element if v not in emitted]
                emitted.update(v for v, _ in element)
                # a random gate's exit clones send their evidence to its own cases,
                # also inside an outer gate (whose cases hear it through Gate.Cases)
                # (and a variable defined in the branches of an observed condition,
                # inside a gate, sends its evidence to that gate's case)
                out.extend(node_for(v, d.provenance, False) if _is_clone(random[v])
                           else in_gate_of(d, node_for(v, d.provenance, gated))
                           for v, d in element)
        return tuple(out)

    body = add_nodes(body, False)
    body = _set_uses(body, uses)
    return replace(program, decls=program.decls + tuple(new_decls), body=body, _by_name={})


def _use_kind(ref: Ref, decl: VarDecl, loops: tuple[str, ...], where: str) -> tuple:
    if ref.index and isinstance(ref.index[0], Ref):
        return ("gather", ref.index[0])
    fixed = tuple((i, item) for i, item in enumerate(ref.index) if isinstance(item, int))
    own = tuple(p for i, p in enumerate(decl.plates) if i not in dict(fixed))
    if not set(own) <= set(loops):
        raise ModelError(f"{where}: {decl.label} is used inside plates {_show(loops)} whose "
                         f"order differs from its own plates {_show(decl.plates)}.")
    extra = tuple(p for p in loops if p not in own)
    if fixed:
        return ("element", fixed, extra)
    if not extra:
        return ("same",)
    return ("broadcast", extra)


def _use_plates(ref: Ref, decl: VarDecl, loops: tuple[str, ...], kind: tuple
                ) -> tuple[str, ...]:
    """The plates of a use read inside ``loops``: the loops, except where the variable's
    own plates run there in another order (a gate's clone with its cases axis last, read
    in a Switch's loop opened around the array's plate): then its own plates first, in
    its order, and the others after them (the generated code permutes the reading
    statement's operand).  A gather along the first axis of an array with more plates,
    read at those (``copy[idx[n], k]``, a switch case's copy of an entered array): the
    loops the index runs over, then the array's other plates."""
    if kind[0] == "gather":
        rest = decl.plates[1:]
        if rest and tuple(ref.index[1:]) == rest:
            return tuple(p for p in loops if p not in rest) + rest
        return loops
    if kind[0] not in ("same", "broadcast", "element"):
        return loops
    fixed = dict(kind[1]) if kind[0] == "element" else {}
    own = tuple(p for i, p in enumerate(decl.plates) if i not in fixed)
    it = iter(loops)
    if not set(own) <= set(loops) or all(p in it for p in own):
        return loops
    return own + tuple(p for p in loops if p not in own)


def _show(plates: tuple[str, ...]) -> str:
    """Plates as the user named them: ``(n, k)``."""
    return "(" + ", ".join(display(p) for p in plates) + ")"


def _enters_own_gate(decl: VarDecl, random: dict[str, VarDecl]) -> bool:
    """Whether ``decl`` is the clone of a value entered into a gate on a random condition
    (its node's evidence belongs to that gate's cases)."""
    return decl.attr("clone_of") is not None and decl.attr("gate") in random


def _is_clone(decl: VarDecl) -> bool:
    """Whether the gate transform made ``decl`` as a gate's clone (enter or exit)."""
    return decl.attr("clone_of") is not None or decl.attr("exit_of") is not None


def _own_stmts(nodes: tuple[Node, ...], random: set[str], masked: bool):
    """The statements in ``nodes`` whose variable nodes this level adds: all of them,
    except those inside a nested gate on a random condition that is not masked (such a
    gate adds the nodes of its own element definitions)."""
    for node in nodes:
        if isinstance(node, Stmt):
            yield node
        elif isinstance(node, If):
            if masked or node.condition.var not in random:
                yield from _own_stmts(node.body, random, True)
        else:
            yield from _own_stmts(node.body, random, masked)


def _defined_by_element(stmt: Stmt, var: str) -> bool:
    """Whether ``stmt`` defines single elements of ``var`` (``x[0] = …``)."""
    return any(_by_element(o) for o in stmt.outputs if o.var == var)


def _count_defs(nodes: tuple[Node, ...], var: str) -> int:
    """How many statements in ``nodes`` (at any depth) define ``var``."""
    return sum(o.var == var for s in _stmts(nodes) for o in s.outputs)


def _within(inner: tuple[str, ...], outer: tuple[str, ...]) -> bool:
    """Whether the plates ``inner`` appear in ``outer`` in the same order."""
    it = iter(outer)
    return all(p in it for p in inner)


def _by_element(ref: Ref) -> bool:
    return any(isinstance(i, int) for i in ref.index)


def _stmts(nodes: tuple[Node, ...]):
    for node in nodes:
        if isinstance(node, Stmt):
            yield node
        else:
            yield from _stmts(node.body)


def _last_definitions(nodes: tuple[Node, ...], random: set[str]) -> dict[str, Stmt]:
    last: dict[str, Stmt] = {}
    for s in _stmts(nodes):
        for o in s.outputs:
            if o.var in random:
                last[o.var] = s
    return last


def _set_uses(nodes: tuple[Node, ...], uses: dict[str, list[tuple[str, tuple]]]
              ) -> tuple[Node, ...]:
    """Give every variable node all its uses (nodes made later add uses to earlier ones)."""
    out: list[Node] = []
    for node in nodes:
        if isinstance(node, Stmt):
            if node.op == "Variable":
                v = dict(node.inputs)["def"].var
                node = replace(node, outputs=tuple(Ref(n) for n, _ in uses[v]),
                               params=(("uses", tuple(k for _, k in uses[v])),))
            out.append(node)
        else:
            out.append(replace(node, body=_set_uses(node.body, uses)))
    return tuple(out)
