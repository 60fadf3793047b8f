"""Sweep schedule: hoist loop-invariant messages, initialise forward, iterate by variable.

Input: the flat message program.  Output: ``prefix + (While(init, body),) + evidence``.

* prefix: statements whose inputs are all known (constants, observed values, or outputs
  of other prefix statements) — computed once;
* init: a forward pass in model order: each variable's defining message, marginal and
  outgoing messages (use messages still uniform), so every marginal is proper before the
  loop; a user-initialised variable takes its marginal from ``init`` instead;
* body: for each variable in model order, every message into it, its marginal, then its
  outgoing messages — a full coordinate-ascent (VMP) or sequential (EP) sweep;
* evidence statements last.
"""

from __future__ import annotations

from dataclasses import replace

from factorflow.ir import Program, Ref, Stmt, While, refs_in


def sweep(program: Program, user_initialized: frozenset[str] = frozenset()) -> Program:
    stmts = [s for s in program.body if isinstance(s, Stmt)]
    computed = {o.var for s in stmts for o in s.outputs}
    known: set[str] = set()
    prefix: list[Stmt] = []
    changed = True
    rest = [s for s in stmts if s.outputs]
    while changed:
        changed = False
        for s in rest:
            if s in prefix:
                continue
            reads = {n for _, v in s.inputs if isinstance(v, Ref) for n in refs_in(v)}
            if all(n in known or n not in computed for n in reads):
                prefix.append(s)
                known.update(o.var for o in s.outputs)
                changed = True
    prefix_set = set(map(id, prefix))
    order: list[str] = []
    by_var: dict[str, list[Stmt]] = {}
    for s in stmts:
        target = s.param("target")
        if target is None or not s.outputs:
            continue
        if target not in by_var:
            order.append(target)
            by_var[target] = []
        by_var[target].append(s)

    init: list[Stmt] = []
    body: list[Stmt] = []
    for v in order:
        incoming = [s for s in by_var[v] if not s.op.startswith("Variable.")]
        node = [s for s in by_var[v] if s.op.startswith("Variable.")]
        defining = [s for s in incoming if s.outputs[0].var == f"{v}_F"]
        for s in defining + node:
            if id(s) in prefix_set:
                continue
            if s.op == "Variable.marginal" and v in user_initialized:
                init.append(replace(s, op="Variable.initial", inputs=(),
                                    params=s.params + (("init", v),)))
            else:
                init.append(s)
        body.extend(s for s in incoming + node if id(s) not in prefix_set)
    evidence = [s for s in stmts if not s.outputs]
    return replace(program, body=tuple(prefix) + (While(tuple(body), tuple(init)),)
                   + tuple(evidence))
