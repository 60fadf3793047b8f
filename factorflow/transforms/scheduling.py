"""Scheduling: loops, iteration and initialization schedules, user initializations (seed 000).

Assumes a ``DependencyGraph`` whose edges carry every constraint (the scheduler knows
no inference algorithm) and ``check(graph)`` passes. Guarantees, for the statements
from which an output can be reached (the others are pruned):

* strongly connected parts become loops; the rest runs once, in topological order;
* inside a loop every statement runs only when what it reads is valid and what it
  needs fresh is up to date; each pass ends with every message valid (before dead
  code removes updates nobody reads, ``deadcode.py``);
* the initialization schedule runs what the first pass requires but does not run
  itself, and leaves valid every message the first pass reads before updating it;
* a NoInit statement (its operator annotated ``no_init``) is never run by the
  initialization schedule: its initial value starts the loop, even where a statement
  requires it or the first pass reads it;
* user-initialized messages are kept where possible (penalties for recomputing or
  invalidating them); a ``ScheduleWarning`` names the ones overwritten before use;
* where the greedy iteration schedule updates a statement twice after dead code, a
  second plan that avoids recomputation replaces it when it is shorter (``_choose``); it
  delays recomputations, so it makes explicit what the greedy plan's eager order gave
  VMP (coordinate ascent): a statement waits until the messages it needs fresh have seen
  the posteriors updated before it (``_Greedy._reads_invalidated``), and reads nothing
  sent by a posterior whose update is pending (``_Greedy._behind``).

All choices are deterministic: ties go to the statement earliest in program order.
A ``ScheduleError`` says which statements are blocked when no choice satisfies the
constraints.
"""

from __future__ import annotations

import heapq
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from factorflow.errors import ScheduleError, ScheduleWarning
from factorflow.transforms import deadcode, schedule_view
from factorflow.transforms.dependencies import (
    USES,
    Dep,
    DependencyGraph,
    check,
    needed,
    strong_components,
)
from factorflow.transforms.greedy import VALID, _Greedy, _Loop


@dataclass(frozen=True)
class Schedule:
    """A complete schedule: ``prefix`` runs once; then for each loop k, ``init[k]`` once,
    ``loop[k]`` repeatedly, and ``suffix[k]`` once after it. ``why`` maps
    ``(part, k, position)`` (part in prefix/init/loop/suffix; k is 0 for prefix) to the
    reason that statement is there."""

    prefix: tuple[str, ...]
    init: tuple[tuple[str, ...], ...] = ()
    loop: tuple[tuple[str, ...], ...] = ()
    suffix: tuple[tuple[str, ...], ...] = ()
    why: Mapping[tuple[str, int, int], str] = field(default_factory=dict, compare=False)
    graph: DependencyGraph | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return schedule_view.format_schedule(self, self.graph)

    def to_graphviz(self) -> str:
        """DOT source of the dependency graph with this schedule's loops as clusters."""
        if self.graph is None:
            raise ValueError("this schedule was built without its dependency graph")
        return schedule_view.to_graphviz(self.graph, self)


def loops(graph: DependencyGraph) -> list[tuple[str, ...]]:
    """Blocks in execution order: each a straight-line statement or a loop's statements.

    Loops are the strongly connected parts under Uses edges; blocks are ordered
    topologically under all edges (Initializer edges too), ties by program order.
    """
    ix = graph.index
    comp = strong_components(ix.uses_dst)
    members: dict[int, list[int]] = {}
    for a, c in enumerate(comp):
        members.setdefault(int(c), []).append(a)
    succ: dict[int, set[int]] = {c: set() for c in members}
    for a, targets in enumerate(ix.all_dst):
        for b in targets:
            if comp[a] != comp[b]:
                succ[int(comp[a])].add(int(comp[b]))
            elif graph.edges[ix.labels[a], ix.labels[b]] & Dep.INITIALIZER:
                raise ScheduleError(f"{ix.labels[a]} initializes {ix.labels[b]} but is computed "
                                    "in the same loop")
    indegree = {c: 0 for c in members}
    for targets in succ.values():
        for d in targets:
            indegree[d] += 1
    ready = [(members[c][0], c) for c, d in indegree.items() if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, c = heapq.heappop(ready)
        order.append(tuple(ix.labels[a] for a in members[c]))
        for d in succ[c]:
            indegree[d] -= 1
            if indegree[d] == 0:
                heapq.heappush(ready, (members[d][0], d))
    if len(order) != len(members):
        stuck = sorted(ix.labels[m[0]] for c, m in members.items() if indegree[c] > 0)
        raise ScheduleError(f"Initializer edges close a cycle through {', '.join(stuck)}")
    return order


def is_loop(graph: DependencyGraph, block: Sequence[str]) -> bool:
    """Whether a block of ``loops`` repeats (several statements, or one that uses itself)."""
    return len(block) > 1 or bool(graph.edges.get((block[0], block[0]), Dep(0)) & USES)


def _requirements(lp: _Loop, body: Sequence[int]
                  ) -> tuple[dict[int, str], dict[int, int], dict[int, str]]:
    """S: what the first pass of ``body`` requires before running it, with a reason;
    U: what it reads before updating it, with the first reader; P: what it would rather
    not read uniform before running it (``Dep.PREFERRED``), with a reason."""
    ran, updated = set(lp.user) | lp.no_init, set()
    required: dict[int, str] = {}
    used: dict[int, int] = {}
    preferred: dict[int, str] = {}
    for x in body:
        for r in lp.pref_src[x]:
            if r not in ran and r != x:
                preferred.setdefault(r, f"preferred by {lp.labels[x]} (not to start it "
                                        "from a uniform message)")
        for r in lp.need_src[x]:
            if r not in ran:
                required.setdefault(r, f"required by {lp.labels[x]}")
        for r in lp.reads_src[x]:
            if r not in updated and r != x:
                used.setdefault(r, x)
        ran.add(x)
        updated.add(x)
    return required, used, preferred


def _iterate(lp: _Loop, waste: bool = False) -> list[tuple[int, str]]:
    """The iteration schedule. It counts on user-initialized messages read fresh being
    up to date on entry, and so leaves them up to date for the next pass; if that cannot
    be done (``lp.fresh_on_entry`` is then emptied), it assumes nothing is up to date.
    ``waste``: the greedy choice avoids recomputation (``_Greedy._wasted``)."""
    greedy = _Greedy(lp, "iteration")
    greedy.waste = waste
    for a in lp.members:
        greedy.enqueue(a, lp.first_why[a])
    try:
        return greedy.settle({a: "fresh again for the next pass" for a in lp.fresh_on_entry})
    except ScheduleError:
        if not lp.fresh_on_entry:
            raise
        lp.fresh_on_entry = set()
        return _iterate(lp, waste)


def _lean_size(lp: _Loop, body: Sequence[int]) -> int:
    """How many updates of ``body`` dead code keeps."""
    uses = lp.index.uses_src
    return len(deadcode.live_positions(list(body), lambda a: uses[a], lp.live_out))


def _choose(lp: _Loop) -> list[tuple[int, str]]:
    """The iteration schedule: ``_iterate``'s, or, where dead code leaves it fewer
    updates, the one planned avoiding recomputation (``_Greedy._wasted``: not leaving
    stale what this pass computed while a waiting statement still needs it fresh, as
    when a chain's posterior would be computed before its parameters' and again after).
    The second plan is tried only where dead code leaves some statement updated twice
    (otherwise no pass can be shorter)."""
    body = _iterate(lp)
    size = _lean_size(lp, [a for a, _ in body])
    if size <= len({a for a, _ in body}):
        return body
    counted = lp.fresh_on_entry  # (the second plan may give up counting on them)
    try:
        other = _iterate(lp, waste=True)
    except ScheduleError:
        other = None
    if other is not None and _lean_size(lp, [a for a, _ in other]) < size:
        return other
    lp.fresh_on_entry = counted
    return body


def _leave(lp: _Loop, body: Sequence[int]) -> list[tuple[int, str]]:
    """What runs after the loop so that statements after it find what they need fresh
    up to date (without re-validating messages nothing after the loop reads)."""
    greedy = _Greedy(lp, "iteration")
    greedy.replay(body)  # a pass's end state does not depend on where it started
    leave = _Greedy(lp, "exit", keep_valid=lp.valid_after, st=greedy.st)
    leave.cause = greedy.cause
    return leave.settle(lp.exit_fresh)


def _initialize(lp: _Loop, body: Sequence[int]) -> list[tuple[int, str]]:
    required, used, preferred = _requirements(lp, body)
    greedy = _Greedy(lp, "init", keep_valid={a: f"read by {lp.labels[x]}"
                                             for a, x in used.items() if a not in lp.no_init})
    for a, cause in lp.invalid_on_entry.items():  # triggered by statements before the loop
        greedy.st[a] &= ~VALID
        greedy.cause[a] = cause
    for a, why in required.items():
        greedy.enqueue(a, why)
    for a, why in preferred.items():  # where they can run first (a penalty, seed 000)
        greedy.enqueue(a, why, optional=True)
    for a in used.keys() & lp.invalid_on_entry.keys():
        greedy.enqueue(a, f"triggered by {lp.labels[greedy.cause[a]]} before the loop, "
                          f"read by {lp.labels[used[a]]}")
    return greedy.settle({a: "fresh for the first pass" for a in lp.fresh_on_entry})


def _loop_of(graph: DependencyGraph, loop_nodes: Iterable[str]) -> _Loop:
    check(graph)
    ix = graph.index
    keep = {ix.pos[x] for x in needed(graph)}
    return _Loop(graph, (ix.pos[x] for x in loop_nodes if ix.pos[x] in keep), keep)


def iteration_schedule(graph: DependencyGraph, loop_nodes: Iterable[str]) -> tuple[str, ...]:
    """One pass of the loop over ``loop_nodes`` (a block of ``loops``), before dead code.

    Starts from every message valid and stale; ends with every message valid."""
    lp = _loop_of(graph, loop_nodes)
    return tuple(lp.labels[a] for a, _ in _choose(lp))


def initialization_schedule(graph: DependencyGraph, loop_nodes: Iterable[str],
                            iteration: Sequence[str]) -> tuple[str, ...]:
    """What runs once before the loop so that ``iteration``'s first pass meets its
    Required edges and reads only valid messages."""
    lp = _loop_of(graph, loop_nodes)
    pos = graph.index.pos
    return tuple(lp.labels[a] for a, _ in _initialize(lp, [pos[x] for x in iteration]))


def schedule(graph: DependencyGraph, *, dead_code: bool = True) -> Schedule:
    """The whole schedule of ``graph``: blocks, and per loop its init and iteration.

    ``dead_code=False`` keeps the scheduler's conservative updates (for comparison).
    Warns (ScheduleWarning) about user initializations overwritten before use.
    """
    check(graph)
    ix = graph.index
    keep = {ix.pos[x] for x in needed(graph)}

    def uses(a: int) -> list[int]:
        return ix.uses_src[a]

    parts: dict[str, list[list[tuple[int, str]]]] = {"prefix": [[]], "init": [], "loop": [],
                                                     "suffix": []}
    segment = parts["prefix"][0]
    for block in loops(graph):
        first = ix.pos[block[0]]
        if first not in keep:
            continue
        if not is_loop(graph, block):
            readers = [ix.labels[b] for b in ix.all_dst[first] if b in keep]
            segment.append((first, "output" if block[0] in graph.outputs else
                            f"read by {readers[0]}"))
            continue
        lp = _Loop(graph, (ix.pos[x] for x in block), keep)
        body = _choose(lp)
        nodes = [a for a, _ in body]
        init = _initialize(lp, nodes)  # also serves the body after dead code
        leave = None
        if dead_code:
            lean = [body[i] for i in deadcode.live_positions(nodes, uses, lp.live_out)]
            try:
                leave = _leave(lp, [a for a, _ in lean])
                body = lean
            except ScheduleError:  # keep what the exit needs, found from the whole body
                leave = _leave(lp, nodes)
                redone = [a for a, _ in leave]
                live = deadcode.live_on_entry(redone, uses) | (lp.live_out - set(redone))
                body = [body[i] for i in deadcode.live_positions(nodes, uses, live)]
        leave = _leave(lp, nodes) if leave is None else leave
        nodes = [a for a, _ in body]
        if dead_code:
            entry = deadcode.live_on_entry(nodes, uses)
            init = [init[i] for i in deadcode.live_positions([a for a, _ in init], uses, entry,
                                                             cyclic=False)]
        parts["init"].append(init)
        parts["loop"].append(body)
        segment = list(leave)
        parts["suffix"].append(segment)
    why = {(part, k, i): reason for part, runs in parts.items() for k, run in enumerate(runs)
           for i, (_, reason) in enumerate(run)}
    names = {part: tuple(tuple(ix.labels[a] for a, _ in run) for run in runs)
             for part, runs in parts.items()}
    result = Schedule(names["prefix"][0], names["init"], names["loop"], names["suffix"],
                      why, graph)
    lost = deadcode.overwritten_initializations(graph, result)
    if lost:
        warnings.warn(f"user initialization of {', '.join(lost)} is overwritten before it is "
                      "used (too many initializations for this schedule)", ScheduleWarning,
                      stacklevel=2)
    return result
