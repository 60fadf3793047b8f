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
