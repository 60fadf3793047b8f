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
