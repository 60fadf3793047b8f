"""Pruning: drop message updates that are always uniform (seed 000's SkipIfUniform).

Input: the flat message program.  A message is *always uniform* when it is the message a
variable with no uses sends back to its definition (its marginal is its definition's
message, divided out: EP; or an empty product: a derived variable under VMP), or when
an operator computes it that is annotated ``skip_if_uniform`` on an input that is always
uniform (the seed's example: under EP, the message up from an unobserved child with no
descendants).  Guarantees: those statements are removed; their messages keep the uniform
value they are declared with, so every remaining statement computes the same numbers.
Statements no output needs are pruned by the scheduler (``dependencies.needed``).
"""

from __future__ import annotations

from dataclasses import replace

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


def prune(program: Program) -> Program:
    """``program`` without the updates of always-uniform messages."""
    uniform = always_uniform(program)
    body = tuple(s for s in program.body
                 if not (isinstance(s, Stmt) and s.outputs and s.outputs[0].var in uniform))
    return replace(program, body=body)
