"""Pruning: drop message updates that are always uniform (seed 000's SkipIfUniform).

Input: the flat message program.  A message is *always uniform* when it is the message a
variable with no uses sends back to its definition (its marginal is its definition's
message, divided out: EP; or an empty product: a derived variable under VMP), or when
an operator computes it that is annotated ``skip_if_uniform`` on an input that is always
uniform (the seed's example: under EP, the message up from an unobserved child with no
descendants).  Guarantees: those statements are removed; their messages keep the uniform
value they are declared with, so every remaining statement computes the same numbers.
Statements no output needs are pruned by the scheduler (``dependencies.needed``).

Under EP, a variable with a use whose message is a point mass whatever happens (an
operator annotated ``certain``: ``ff.constrain_true``'s) has that point mass as its
posterior, and as its message back to its definition (the definition's message divided
out of a point mass leaves the point mass).  Guarantees: those two updates read the
certain messages only (same numbers), so the definition's message (Greater's
P(pw > pl) in TrueSkill) is no longer computed every sweep — only once for the
evidence, which now names it as an input.
"""

from __future__ import annotations

from dataclasses import replace

from factorflow.codegen import names
from factorflow.factors.registry import FACTORS
from factorflow.ir import Program, Ref, Stmt, refs_in


def _seeds(s: Stmt) -> bool:
    """A variable with no uses sends its definition a uniform message."""
    if s.op != "Variable.backward" or s.param("uses"):
        return False
    return s.param("algorithm") == "ep" or bool(s.param("derived"))


def always_uniform(program: Program) -> frozenset[str]:
    """The messages of ``program`` that every run leaves uniform."""
    stmts = [s for s in program.body if isinstance(s, Stmt) and s.outputs]
    uniform = {s.outputs[0].var for s in stmts if _seeds(s)}
    changed = True
    while changed:
        changed = False
        for s in stmts:
            out = s.outputs[0].var
            if out in uniform or not s.param("operator"):
                continue
            factor, algorithm, target = s.param("operator")
            op = FACTORS[factor].operators[(algorithm, target)]
            reads = {k: set(refs_in(v)) for k, v in s.inputs if isinstance(v, Ref)}
            if any(reads.get(k, set()) & uniform for k in op.skip_if_uniform):
                uniform.add(out)
                changed = True
    return frozenset(uniform)


def certain_uses(program: Program) -> dict[str, tuple[str, ...]]:
    """EP variables (by name) -> their use-message inputs (``use0``…) that are always
    point masses: written by a ``certain`` operator, on the variable's own plates (a use
    of kind ``same``), outside any gate or observed condition."""
    stmts = [s for s in program.body if isinstance(s, Stmt)]
    certain = {s.outputs[0].var for s in stmts
               if s.outputs and s.param("operator") and not s.param("mask")
               and s.param("operator")[1] == "ep"
               and FACTORS[s.param("operator")[0]].operators[s.param("operator")[1:]].certain}
    gated = {s.param("target") for s in stmts if s.param("to_gate")}
    found: dict[str, tuple[str, ...]] = {}
    for s in stmts:
        if s.op != "Variable.marginal" or s.param("algorithm") != "ep" \
                or s.param("derived") or s.param("target") in gated:
            continue
        hows, masks = s.param("uses"), s.param("use_masks")
        keys = tuple(f"use{k}" for k, (how, mask) in enumerate(zip(hows, masks, strict=True))
                     if how == ("same",) and not mask
                     and set(refs_in(s.input(f"use{k}"))) & certain)
        if keys:
            found[s.param("target")] = keys
    return found


def fix_certain(program: Program) -> Program:
    """``program`` with the posteriors of ``certain_uses`` (and their messages back to
    their definitions) computed from the certain messages alone; their evidence terms
    read the definition's message (``forward``) explicitly."""
    fixed = certain_uses(program)
    if not fixed:
        return program

    def rewrite(s: Stmt | object) -> Stmt | object:
        if not isinstance(s, Stmt) or s.param("target") not in fixed \
                or s.param("algorithm") != "ep":
            return s
        keys = fixed[s.param("target")]
        if s.op == "Variable.marginal":
            return replace(s, inputs=tuple((k, v) for k, v in s.inputs if k in keys))
        if s.op == "Variable.backward":
            return replace(s, inputs=tuple((k, v) for k, v in s.inputs if k != "def"))
        if s.op == "Variable.evidence":
            forward = Ref(names.forward(s.param("target")))
            return replace(s, inputs=s.inputs + (("forward", forward),))
        return s

    return replace(program, body=tuple(rewrite(s) for s in program.body))


def prune(program: Program) -> Program:
    """``program`` without the updates of always-uniform messages, and with the
    posteriors that certain messages fix read from those alone (``fix_certain``)."""
    uniform = always_uniform(program)
    body = tuple(s for s in program.body
                 if not (isinstance(s, Stmt) and s.outputs and s.outputs[0].var in uniform))
    return fix_certain(replace(program, body=body))
