"""Dead code: drop updates whose value is overwritten before anything uses it (seed 000).

The scheduler is conservative and leaves every message valid at the end of each
pass, so it may append updates that nobody reads before the same message is
updated again in the next pass (the seed's redundant trailing B). This pass
removes them by a liveness analysis over the loop body read in cyclic order.

Assumes: ``reads(x)`` lists every statement whose value an update of x uses
(any dependency kind); statements never have side effects, so dropping an update
whose value is not read changes nothing that is read.
Guarantees: an update is removed only if no statement reads its value before the
next update of the same statement (cyclically, and at loop exit when the value is
needed after the loop); every statement keeps at least one update in the body.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from factorflow.transforms.dependencies import DependencyGraph
    from factorflow.transforms.scheduling import Schedule

Node = TypeVar("Node", bound=Hashable)


def _backward(body: Sequence[Node], reads: Callable[[Node], Iterable[Node]], live: set[Node],
              forced: set[int]) -> list[bool]:
    """One backward pass: mark live updates; ``live`` ends as the set live on entry."""
    keep = [False] * len(body)
    for i in range(len(body) - 1, -1, -1):
        x = body[i]
        if x in live or i in forced:
            keep[i] = True
            live.discard(x)
            live.update(reads(x))
    return keep


def live_on_entry(body: Sequence[Node], reads: Callable[[Node], Iterable[Node]]) -> set[Node]:
    """Statements whose value on entry to ``body`` is used before ``body`` updates them."""
    updated: set[Node] = set()
    used: set[Node] = set()
    for x in body:
        used.update(r for r in reads(x) if r not in updated)
        updated.add(x)
    return used


def live_positions(body: Sequence[Node], reads: Callable[[Node], Iterable[Node]],
                   live_out: Iterable[Node], *, cyclic: bool = True) -> tuple[int, ...]:
    """Positions of the updates of ``body`` that are used, in order.

    ``live_out``: statements whose value is needed after the body ends (for a loop,
    after it exits). ``cyclic``: the body repeats, so a value at its end also flows
    into its start. A cyclic body keeps the last update of a statement that would
    otherwise have none. The result is a least fixed point: updates that only feed
    each other and nothing live are dead too.
    """
    last = {x: i for i, x in enumerate(body)}
    read = {r for x in last for r in reads(x)}
    out = set(live_out)
    entry: set[Node] = set()
    forced: set[int] = set()
    while True:
        live = out | entry
        keep = _backward(body, reads, live, forced)
        if cyclic and not live <= entry:  # what the next pass reads on entry is live at exit
            entry |= live
            continue
        kept = {body[i] for i, k in enumerate(keep) if k}
        missing = [x for x in last if x not in kept] if cyclic else []
        if not missing:
            return tuple(i for i, k in enumerate(keep) if k)
        # one at a time, unread ones first: their reads may revive the others
        forced.add(last[min(missing, key=lambda x: (x in read, -last[x]))])


def eliminate(graph: DependencyGraph, body: Sequence[str], live_out: Iterable[str],
              *, cyclic: bool = True) -> tuple[str, ...]:
    """``body`` without its dead updates; reads are the graph's Uses edges."""
    ix = graph.index

    def reads(x: str) -> list[str]:
        return [ix.labels[a] for a in ix.uses_src[ix.pos[x]]]

    return tuple(body[i] for i in live_positions(body, reads, live_out, cyclic=cyclic))


def overwritten_initializations(graph: DependencyGraph, schedule: Schedule) -> tuple[str, ...]:
    """User-initialized statements whose initial value is replaced before any use.

    The initial value is put in place when the statement's loop starts (for a
    statement outside loops: before the program). It is used if some statement
    reads it (any Uses edge) before the first update of the statement itself.
    Statements that are never scheduled count as overwritten: nothing uses them.
    """
    ix = graph.index
    runs = [schedule.prefix]
    located = {x: 0 for x in schedule.prefix}
    for k, (init, body) in enumerate(zip(schedule.init, schedule.loop, strict=True)):
        runs.append(init + body)
        located.update({x: k + 1 for x in body})
    bad = []
    for x in sorted(graph.user_initialized, key=ix.pos.__getitem__):
        if x not in located:
            bad.append(x)
            continue
        for y in runs[located[x]]:
            if ix.pos[x] in ix.uses_src[ix.pos[y]]:
                break
            if y == x:
                bad.append(x)
                break
    return tuple(bad)


def unchanged_recomputations(body: Sequence[Node], reads: Callable[[Node], Iterable[Node]],
                             pure: Callable[[Node], bool]) -> tuple[list[int], list[int]]:
    """Updates of a cyclic ``body`` that recompute what the statement already holds.

    An update of x (a ``pure`` statement: a function of what it ``reads`` alone, not of
    its own value, updated more than once per pass) is a recomputation when nothing it
    reads is updated between x's previous update (cyclically: the last one of the pass
    before) and it.  Such an update is dropped.  When its previous update is in the
    pass before, the first pass would have computed x from the values the loop starts
    with: if nothing earlier in the pass reads x, that update moves before the loop (it
    computes the same value there), and is listed in ``moved``.

    Returns (positions kept, positions moved before the loop), positions in ``body``;
    one at a time, in order, to a fixed point (dropping one update may make another a
    recomputation).  Guarantees: every read sees the value it saw before, in every pass.
    """
    alive = list(range(len(body)))
    moved: list[int] = []
    reads_of = {x: set(reads(x)) for x in set(body)}
    changed = True
    while changed:
        changed = False
        for at, i in enumerate(alive):
            x = body[i]
            mine = [k for k, j in enumerate(alive) if body[j] == x]
            if len(mine) < 2 or not pure(x) or x in reads_of[x]:  # (reads its own value)
                continue
            before = [k for k in mine if k < at]
            prev = before[-1] if before else mine[-1]
            between = alive[prev + 1:at] if before else alive[prev + 1:] + alive[:at]
            if any(body[j] in reads_of[x] for j in between):
                continue
            if not before:  # the first update of the pass: computed before the loop
                if any(x in reads_of[body[j]] for j in range(i)):
                    continue
                moved.append(i)
            del alive[at]
            changed = True
            break
    return alive, sorted(moved)
