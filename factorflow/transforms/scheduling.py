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
* user-initialized messages are kept where possible (penalties for recomputing or
  invalidating them); a ``ScheduleWarning`` names the ones overwritten before use.

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

VALID, FRESH, RAN, PRISTINE = 1, 2, 4, 8  # per-node state bits; PRISTINE: unread user init


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


class _Loop:
    """One loop's adjacency restricted to its members (node numbers of the GraphIndex)."""

    def __init__(self, graph: DependencyGraph, members: Iterable[int], keep: set[int]) -> None:
        ix = graph.index
        self.labels, self.members = ix.labels, sorted(members)
        inside = set(self.members)

        def local(lists: Sequence[Sequence[int]]) -> dict[int, tuple[int, ...]]:
            return {a: tuple(b for b in lists[a] if b in inside) for a in self.members}

        self.reads_src, self.reads_dst = local(ix.reads_src), local(ix.reads_dst)
        self.need_src, self.need_dst = local(ix.need_src), local(ix.need_dst)
        self.triggers, self.triggered_by = local(ix.triggers), local(ix.triggered_by)
        self.needs_fresh, self.fresh_for = local(ix.needs_fresh), local(ix.fresh_for)
        self.user = {ix.pos[x] for x in graph.user_initialized} & inside
        before = {a: [t for t in ix.triggered_by[a] if t in keep and t not in inside]
                  for a in self.members if a not in self.user}
        self.invalid_on_entry = {a: t[0] for a, t in before.items() if t}
        # a user's initial value is up to date when placed; it matters where read fresh
        self.fresh_on_entry = {a for a in self.user if self.fresh_for[a]}
        def after(lists: Sequence[Sequence[int]]) -> dict[int, int]:
            out = {a: [b for b in lists[a] if b in keep and b not in inside]
                   for a in self.members}
            return {a: b[0] for a, b in out.items() if b}

        self.valid_after = {a: f"read by {ix.labels[b]}" for a, b in after(ix.reads_dst).items()}
        self.valid_after |= {a: "output" for a in inside if ix.labels[a] in graph.outputs}
        self.live_out = set(after(ix.all_dst)) | {a for a in inside
                                                  if ix.labels[a] in graph.outputs}
        self.exit_fresh = {a: f"fresh for {ix.labels[b]}" for a, b in after(ix.fresh_for).items()}
        self.first_why = {a: "output" if ix.labels[a] in graph.outputs else
                          f"read by {ix.labels[(self.reads_dst[a] or ix.all_dst[a])[0]]}"
                          for a in self.members}


class _Trial:
    """Tentative effects of a plan on top of the real state."""

    __slots__ = ("ov", "cause", "steps", "penalty", "invalidated", "hit")

    def __init__(self) -> None:
        self.ov: dict[int, int] = {}
        self.cause: dict[int, int] = {}
        self.steps: list[tuple[int, str]] = []
        self.penalty = self.invalidated = 0
        self.hit: list[int] = []


class _Greedy:
    """The seed's greedy scheduler over one loop's statements, in one of three modes.

    ``iteration``: everything has run; whatever gets invalidated is queued again.
    ``init``: executed marks count (Required sources must have run); an invalidated
    statement is queued again only if ``keep_valid`` names it (with why it must be
    valid) or a waiting one reads it.
    ``exit``: like init after the loop, from the state ``st`` the iteration ended in.
    """

    def __init__(self, lp: _Loop, mode: str, keep_valid: Mapping[int, str] | None = None,
                 st: Mapping[int, int] | None = None) -> None:
        self.lp, self.keep_valid = lp, keep_valid or {}
        self.init_mode, self.selective = mode == "init", mode != "iteration"
        self.st = dict(st) if st is not None else {
            a: VALID | (RAN if a in lp.user or mode != "init" else 0)
            | (PRISTINE if a in lp.user else 0) | (FRESH if a in lp.fresh_on_entry else 0)
            for a in lp.members}
        self.cause: dict[int, int] = {}
        self.done: set[int] = set()
        self.waiting: dict[int, str] = {}
        self.key: dict[int, tuple[int, ...]] = {}
        self.heap: list[tuple[int, ...]] = []
        self.steps: list[tuple[int, str]] = []

    def _get(self, trial: _Trial, a: int) -> int:
        return trial.ov[a] if a in trial.ov else self.st[a]

    def _apply(self, x: int, trial: _Trial, why: str) -> None:
        """Run x on top of ``trial``: valid, fresh, ran; readers stale; triggered invalid."""
        get, ov, lp = self._get, trial.ov, self.lp
        if get(trial, x) & PRISTINE and get(trial, x) & VALID:
            trial.penalty += 1
        for s in lp.reads_src[x]:
            if get(trial, s) & PRISTINE:
                ov[s] = get(trial, s) & ~PRISTINE
        ov[x] = VALID | FRESH | RAN
        for t in lp.reads_dst[x]:
            if t != x and get(trial, t) & FRESH:
                ov[t] = get(trial, t) & ~FRESH
        for t in lp.triggers[x]:
            m = get(trial, t)
            if m & VALID:
                trial.invalidated += 1
                trial.penalty += bool(m & PRISTINE)
                ov[t], trial.cause[t] = m & ~VALID, x
                trial.hit.append(t)
        trial.steps.append((x, why))

    def _ensure(self, y: int, trial: _Trial, active: frozenset[int]) -> bool:
        """Run in ``trial`` what y needs first: stale Fresh sources (recursively), and
        sources that those runs invalidated. False if that cannot be done."""
        lp, label = self.lp, self.lp.labels
        for _ in range(len(lp.needs_fresh[y]) + 4):
            need = next((s for s in lp.needs_fresh[y] if not self._get(trial, s) & FRESH), None)
            why = f"fresh for {label[y]}"
            if need is None:
                for s in lp.reads_src[y]:
                    if s != y and not self._get(trial, s) & VALID:
                        if not self.st[s] & VALID:
                            return False  # invalid before this plan: the seed's rule
                        need, why = s, f"triggered by {label[trial.cause[s]]}, read by {label[y]}"
                        break
            if need is None:
                return not self.init_mode or all(self._get(trial, r) & RAN for r in lp.need_src[y])
            if need in active or not self._ensure(need, trial, active | {need}):
                return False
            self._apply(need, trial, why)
        return False

    def _plan(self, x: int) -> _Trial | None:
        st, lp = self.st, self.lp
        if any(s != x and not st[s] & VALID for s in lp.reads_src[x]):
            return None
        if self.init_mode and any(not st[r] & RAN for r in lp.need_src[x]):
            return None
        trial = _Trial()
        if not self._ensure(x, trial, frozenset((x,))):
            return None
        self._apply(x, trial, self.waiting.get(x, ""))
        return trial

    def _score(self, x: int) -> tuple[int, ...]:
        """(blocked, penalty, -sources already scheduled, invalidations, program order)."""
        lp, st = self.lp, self.st
        if lp.needs_fresh[x]:
            trial = self._plan(x)
            if trial is None:
                return (1, 0, 0, 0, x)
            penalty, invalidated = trial.penalty, trial.invalidated
        else:  # the plan is x alone: the same numbers without a trial
            if any(s != x and not st[s] & VALID for s in lp.reads_src[x]) or (
                    self.init_mode and any(not st[r] & RAN for r in lp.need_src[x])):
                return (1, 0, 0, 0, x)
            penalty = int(st[x] & (PRISTINE | VALID) == PRISTINE | VALID)
            invalidated = 0
            for t in lp.triggers[x]:
                if st[t] & VALID:
                    invalidated += 1
                    penalty += bool(st[t] & PRISTINE) and t not in lp.reads_src[x]
        done = sum(s in self.done for s in lp.reads_src[x])
        return (0, penalty, -done, invalidated, x)

    def _rescore(self, x: int) -> None:
        key = self._score(x)
        if self.key.get(x) != key:
            self.key[x] = key
            heapq.heappush(self.heap, key)

    def enqueue(self, x: int, why: str) -> None:
        """Add x to the waiting list; in init mode also what x's plan needs run first."""
        todo = [(x, why)]
        while todo:
            y, why = todo.pop()
            if y in self.waiting:
                continue
            self.waiting[y] = why
            self._rescore(y)
            if not self.selective:
                continue
            for p in (y, *self.lp.needs_fresh[y]):
                label = self.lp.labels[p]
                todo += [(r, f"required by {label}") for r in self.lp.need_src[p]
                         if not self.st[r] & RAN]
                todo += [(s, f"triggered by {self.lp.labels[self.cause[s]]}, read by {label}")
                         for s in self.lp.reads_src[p] if s != p and not self.st[s] & VALID]

    def _best(self) -> int:
        verified = False
        while True:
            key = heapq.heappop(self.heap)
            x = key[-1]
            if x not in self.waiting or self.key.get(x) != key:
                continue
            now = self._score(x)
            if now != key:
                self.key[x] = now
                heapq.heappush(self.heap, now)
            elif not key[0]:
                return x
            else:
                heapq.heappush(self.heap, key)
                if verified:
                    raise ScheduleError(self._stuck())
                verified = True
                for y in list(self.waiting):
                    self._rescore(y)

    def _stuck(self) -> str:
        lp, label = self.lp, self.lp.labels
        lines = []
        for y in sorted(self.waiting)[:8]:
            bad = [label[s] for s in lp.reads_src[y] if s != y and not self.st[s] & VALID]
            unrun = [label[r] for r in lp.need_src[y] if not self.st[r] & RAN]
            lines.append(f"{label[y]} " + (f"reads invalid {', '.join(bad)}" if bad else
                         f"requires {', '.join(unrun)}, not yet run" if unrun else
                         "needs Fresh sources that cannot all be brought up to date"))
        return "no statement in the loop can run without breaking a constraint: " + "; ".join(
            lines)

    def _commit(self, x: int) -> None:
        trial = self._plan(x)
        assert trial is not None
        self.st.update(trial.ov)
        self.cause.update(trial.cause)
        lp, label = self.lp, self.lp.labels
        ran = [a for a, _ in trial.steps]
        for a, why in trial.steps:
            self.steps.append((a, why))
            self.done.add(a)
            if self.waiting.pop(a, None) is not None:
                del self.key[a]
        for t in dict.fromkeys(trial.hit):
            if self.st[t] & VALID or t in self.waiting:
                continue
            why = f"triggered by {label[self.cause[t]]}"
            need = self.keep_valid.get(t)
            if need is None and self.selective:
                reader = next((r for r in lp.reads_dst[t] if r in self.waiting), None)
                need = None if reader is None else f"read by {label[reader]}"
            if not self.selective:
                self.enqueue(t, why)
            elif need is not None:
                self.enqueue(t, f"{why}, {need}")
        dirty: set[int] = set()
        for p in ran:
            dirty.update(lp.reads_dst[p], lp.need_dst[p], lp.fresh_for[p], lp.triggered_by[p])
            for t in lp.reads_dst[p]:
                dirty.update(lp.fresh_for[t])
            if lp.user:
                for s in lp.reads_src[p]:
                    dirty.update(lp.triggered_by[s], lp.fresh_for[s], (s,))
        for t in trial.hit:
            dirty.update(lp.reads_dst[t], lp.triggered_by[t])
            for u in lp.reads_dst[t]:
                dirty.update(lp.fresh_for[u])
        for y in dirty:
            if y in self.waiting:
                self._rescore(y)

    def replay(self, nodes: Iterable[int]) -> None:
        """Apply the effects of running ``nodes`` in order (no checks)."""
        for a in nodes:
            trial = _Trial()
            self._apply(a, trial, "")
            self.st.update(trial.ov)
            self.cause.update(trial.cause)

    def settle(self, keep_fresh: Mapping[int, str]) -> list[tuple[int, str]]:
        """``run``, then again while a statement of ``keep_fresh`` is stale (what follows
        assumes it up to date); ``run`` stops this if refreshing never ends."""
        while True:
            self.run()
            stale = [(a, why) for a, why in keep_fresh.items() if not self.st[a] & FRESH]
            if not stale:
                return self.steps
            for a, why in stale:
                self.enqueue(a, why)

    def run(self) -> list[tuple[int, str]]:
        """Schedule until nothing waits; the steps with the reason for each."""
        lp = self.lp
        limit = 8 * (len(lp.members) + sum(map(len, lp.triggers.values()))) + 64
        while self.waiting:
            self._commit(self._best())
            if len(self.steps) > limit:
                raise ScheduleError(f"scheduling a loop of {len(lp.members)} statements does "
                                    "not settle: Trigger and Fresh edges keep undoing each other")
        return self.steps


def _requirements(lp: _Loop, body: Sequence[int]) -> tuple[dict[int, str], dict[int, int]]:
    """S: what the first pass of ``body`` requires before running it, with a reason;
    U: what it reads before updating it, with the first reader."""
    ran, updated = set(lp.user), set()
    required: dict[int, str] = {}
    used: dict[int, int] = {}
    for x in body:
        for r in lp.need_src[x]:
            if r not in ran:
                required.setdefault(r, f"required by {lp.labels[x]}")
        for r in lp.reads_src[x]:
            if r not in updated and r != x:
                used.setdefault(r, x)
        ran.add(x)
        updated.add(x)
    return required, used


def _iterate(lp: _Loop) -> list[tuple[int, str]]:
    """The iteration schedule. It counts on user-initialized messages read fresh being
    up to date on entry, and so leaves them up to date for the next pass; if that cannot
    be done (``lp.fresh_on_entry`` is then emptied), it assumes nothing is up to date."""
    greedy = _Greedy(lp, "iteration")
    for a in lp.members:
        greedy.enqueue(a, lp.first_why[a])
    try:
        return greedy.settle({a: "fresh again for the next pass" for a in lp.fresh_on_entry})
    except ScheduleError:
        if not lp.fresh_on_entry:
            raise
        lp.fresh_on_entry = set()
        return _iterate(lp)


def _leave(lp: _Loop, body: Sequence[int]) -> list[tuple[int, str]]:
    """What runs after the loop so that statements after it find what they need fresh
    up to date (without re-validating messages nothing after the loop reads)."""
    greedy = _Greedy(lp, "iteration")
    greedy.replay(body)  # a pass's end state does not depend on where it started
    leave = _Greedy(lp, "exit", keep_valid=lp.valid_after, st=greedy.st)
    leave.cause = greedy.cause
    return leave.settle(lp.exit_fresh)


def _initialize(lp: _Loop, body: Sequence[int]) -> list[tuple[int, str]]:
    required, used = _requirements(lp, body)
    greedy = _Greedy(lp, "init", keep_valid={a: f"read by {lp.labels[x]}"
                                             for a, x in used.items()})
    for a, cause in lp.invalid_on_entry.items():  # triggered by statements before the loop
        greedy.st[a] &= ~VALID
        greedy.cause[a] = cause
    for a, why in required.items():
        greedy.enqueue(a, why)
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
    return tuple(lp.labels[a] for a, _ in _iterate(lp))


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
        body = _iterate(lp)
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
