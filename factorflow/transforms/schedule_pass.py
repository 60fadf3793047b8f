"""Schedule the message program: prefix, loops with their initialization, evidence.

Input: the flat message program.  Output: ``prefix + Σ_k (While(init_k, loop_k) +
suffix_k) + evidence`` where the order comes from ``scheduling.schedule`` on the
dependency graph of ``dependency_info`` (pruning, iteration and initialization schedules,
user initializations and dead code, as in seed 000).  The ``Schedule`` is kept on the
result (``Scheduled.schedule``) for people to read.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from factorflow.codegen.names import marginal
from factorflow.errors import ScheduleError
from factorflow.ir import Node, Program, Stmt, While
from factorflow.transforms import deadcode
from factorflow.transforms.dependency_info import dependency_graph
from factorflow.transforms.scheduling import Schedule, schedule


@dataclass(frozen=True)
class Scheduled:
    program: Program
    schedule: Schedule


def schedule_program(program: Program, user_initialized: frozenset[str] = frozenset()
                     ) -> Scheduled:
    graph, stmt_of = dependency_graph(program, user_initialized)
    try:
        sched = schedule(graph)
    except ScheduleError:
        if not any(how == "parallel" for how, _ in graph.sweeps.values()):
            raise
        # a parallel sweep the greedy scheduler cannot realise: sweep sequentially
        graph, stmt_of = dependency_graph(program, user_initialized, parallel=False)
        sched = schedule(graph)

    sched = _without_recomputations(sched, stmt_of, program.algorithm)

    def stmts(names: tuple[str, ...]) -> tuple[Stmt, ...]:
        return tuple(stmt_of[n] for n in names)

    body: list[Node] = list(stmts(sched.prefix))
    for init, loop, suffix in zip(sched.init, sched.loop, sched.suffix, strict=True):
        body.append(While(stmts(loop), stmts(init)))
        body.extend(stmts(suffix))
    if not sched.loop:
        body.append(While((), ()))
    body.extend(s for s in program.body if isinstance(s, Stmt) and not s.outputs)
    marked = {marginal(v): program.decl(v).label for v in user_initialized}
    decls = tuple(replace(d, attrs=d.attrs + (("init", marked[d.name]),))
                  if d.name in marked else d for d in program.decls)
    return Scheduled(replace(program, decls=decls, body=tuple(body), _by_name={}), sched)


def _pure(s: Stmt, algorithm: str | None) -> bool:
    """Whether running ``s`` twice on the same inputs gives the same value: not a Gibbs
    draw, not an operator reading the message it sent last (``previous``) or keeping a
    state (``state``), not an EP operator's message (damping mixes in the old one)."""
    if algorithm not in ("ep", "vmp") or s.param("previous") or s.param("state"):
        return False
    return s.op.startswith("Variable.") or algorithm == "vmp"


def _without_recomputations(sched: Schedule, stmt_of: dict[str, Stmt],
                            algorithm: str | None) -> Schedule:
    """``sched`` without the loop updates that recompute an unchanged value
    (``deadcode.unchanged_recomputations``): each posterior is computed once per pass
    where its inputs allow; a first-pass update that moves before the loop is appended
    to the loop's initialization, and the schedule printout says so."""
    if sched.graph is None:
        return sched
    ix = sched.graph.index
    why = dict(sched.why)
    inits, loops = list(sched.init), list(sched.loop)
    def reads(x: str) -> list[str]:
        return [ix.labels[a] for a in ix.uses_src[ix.pos[x]]]

    user = sched.graph.user_initialized  # (put in place when the loop starts: what reads
    # them stays in the loop)
    for k, body in enumerate(sched.loop):
        kept, moved = deadcode.unchanged_recomputations(
            body, reads, lambda x: x not in user and not user & set(reads(x))
            and _pure(stmt_of[x], algorithm))
        if len(kept) == len(body):
            continue
        for i, at in enumerate(kept):
            why[("loop", k, i)] = sched.why.get(("loop", k, at), "")
        for i in range(len(kept), len(body)):
            why.pop(("loop", k, i), None)
        init = list(inits[k])
        for x in (body[i] for i in moved):
            # already computed by the initialization from what the loop starts with
            last = max((i for i, y in enumerate(init) if y == x), default=None)
            if last is not None and not set(init[last + 1:]) & set(reads(x)):
                continue
            why[("init", k, len(init))] = ("hoisted from the start of the loop: nothing it "
                                           "reads changes from its last update in a pass "
                                           "to there")
            init.append(x)
        inits[k] = tuple(init)
        loops[k] = tuple(body[i] for i in kept)
    return replace(sched, init=tuple(inits), loop=tuple(loops), why=why)
