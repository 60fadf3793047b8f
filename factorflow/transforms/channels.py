"""Channels: every use of a random variable becomes its own edge (Infer.NET's channel
transform with UsesEqualDef / Replicate / GetItems folded into one variable node).

Guarantees: each read of a latent (role ``random``) variable ``v`` is replaced by a read of
a fresh use variable ``v_useK`` declared with the plates of the reading statement; right
after ``v``'s defining statement a ``Variable`` statement defines all of ``v``'s uses,
with a ``uses`` parameter that says, per use, how the use's array relates to ``v``'s:
``("same",)``, ``("broadcast", extra_plates)`` or ``("gather", index_ref)``.  Observed
variables and constants are read directly and get no node.
"""

from __future__ import annotations

from dataclasses import replace

from factorflow.errors import ModelError
from factorflow.ir import For, If, Node, Program, Ref, Stmt, VarDecl, While


def channels(program: Program) -> Program:
    random = {d.name: d for d in program.decls if d.role == "random"}
    uses: dict[str, list[tuple[str, tuple]]] = {v: [] for v in random}
    taken = {d.name for d in program.decls} | {r for r, _ in program.ranges}
    new_decls: list[VarDecl] = []

    def use_of(ref: Ref, loops: tuple[str, ...], where: str) -> Ref:
        decl = random[ref.var]
        k = len(uses[ref.var])
        name = f"{ref.var}_use{k}"
        while name in taken:
            name += "_"
        taken.add(name)
        if ref.index and isinstance(ref.index[0], Ref):
            kind: tuple = ("gather", ref.index[0])
        elif tuple(loops) == decl.plates:
            kind = ("same",)
        else:
            it = iter(loops)
            if not all(p in it for p in decl.plates):
                raise ModelError(f"{where}: {decl.label} is used inside plates {loops} whose "
                                 f"order differs from its own plates {decl.plates}.")
            kind = ("broadcast", tuple(p for p in loops if p not in decl.plates))
        uses[ref.var].append((name, kind))
        new_decls.append(VarDecl(name, "use", decl.domain, plates=tuple(loops),
                                 event=decl.event, label=f"use {k} of {decl.label}",
                                 attrs=(("of", ref.var),)))
        return Ref(name, tuple(loops))

    def rewrite(nodes: tuple[Node, ...], loops: tuple[str, ...]) -> tuple[Node, ...]:
        out: list[Node] = []
        for node in nodes:
            if isinstance(node, Stmt):
                inputs = tuple(
                    (k, use_of(v, loops, node.provenance or node.op)
                     if isinstance(v, Ref) and v.var in random else v)
                    for k, v in node.inputs)
                out.append(replace(node, inputs=inputs))
            elif isinstance(node, For):
                out.append(replace(node, body=rewrite(node.body, loops + (node.range,))))
            elif isinstance(node, If | While):
                out.append(replace(node, body=rewrite(node.body, loops)))
        return tuple(out)

    body = rewrite(program.body, ())

    def add_nodes(nodes: tuple[Node, ...]) -> tuple[Node, ...]:
        out: list[Node] = []
        for node in nodes:
            if isinstance(node, Stmt):
                out.append(node)
                for o in node.outputs:
                    if o.var in random:
                        out.append(Stmt("Variable", tuple(Ref(n) for n, _ in uses[o.var]),
                                        (("def", o),),
                                        (("uses", tuple(k for _, k in uses[o.var])),),
                                        node.provenance))
            elif isinstance(node, For | If | While):
                out.append(replace(node, body=add_nodes(node.body)))
        return tuple(out)

    return replace(program, decls=program.decls + tuple(new_decls), body=add_nodes(body),
                   _by_name={})
