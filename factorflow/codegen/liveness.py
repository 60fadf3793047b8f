"""Liveness of the VMP refresh in the generated ``evidence()``: only what the bound reads.

Input: the emitted source of three stretches of the program, each statement as its list
of lines — the last loop's sweep, the refresh that ``evidence()`` runs first (under VMP,
every update of every loop's sweep but the posteriors of non-derived variables, recomputed from
the posteriors as they stand), and what ``evidence()`` runs after it (the statements
after the loop and the evidence terms).  The names the analysis follows are the
program's messages and posteriors: each top-level Python statement reads the names it
loads and writes the names it stores (``steps``).

A refresh statement is kept when the bound reads its output, directly or through other
kept statements (backward liveness).  ``evidence()`` also assigns its messages for good
(``nonlocal``): the next sweep, the next call of ``evidence()`` and the posteriors
returned read them.  So a statement is dropped only where that cannot change what they
read: each name they read before writing it (``live after``) holds, at the end of the
pruned refresh, the value today's full refresh leaves there.  Values are compared
symbolically (``_Values``): each name's value after a statement is a number interned
from the statement's text and the numbers of the values it reads, so two values with
one number are one computation of the same inputs.  A sweep is simulated once from
unknown values; a value the full refresh recomputes with the number the sweep left
(no posterior it reads changed since the sweep computed it) need not be recomputed.

The other way round (``settled``): a sweep that follows ``evidence()`` begins by
recomputing messages that ``evidence()`` has just computed from the same values (a
gate's messages, before the posteriors they read move again); the generated sweep
skips those while ``evidence()`` has run since the last sweep (``refreshed``).

Within a sweep (``repeated``, ``overwritten``, ``implied``, ``implied_later``): the
statements that compute again what their names already hold, those whose values
nothing reads before the sweep computes them again, and the properness checks of values
proper by then (an earlier check of the value a copy or a gate's clone was made from),
which the generated sweep leaves out.

Assumes: the operators are pure (a statement's values are a function of its text and
of the values of the names it reads); the refresh runs on the state a sweep leaves (the
hook after a sweep), or it is the last ``evidence()`` of the run, after which only the
bound and the posteriors named ``keep`` are read; an inner (local) loop is opaque: every
name it writes is read before it, and gets a value no other computation has.
Guarantees: the statements kept are in their order; every statement after the refresh
reads, name by name, the values it reads after the full refresh (so the bound is the
same computation), and so does the next sweep and every name of ``keep`` at the end —
checked on the pruned stretch by the same simulation, and where that check fails, or a
statement's source cannot be read, every statement is kept.  A statement ``settled``
marks, skipped in a sweep right after ``evidence()``, leaves every name as running it
would (so a run with the bound computes the posteriors of a run without, bit for bit).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

#: the generated loop's variable: a name the steps read, with a new value every sweep
ITERATION = "iteration"

#: one top-level Python statement of the emitted source: its text (None: opaque, a value
#: no other statement computes), the names it reads and the names it writes
Step = tuple[str | None, tuple[str, ...], tuple[str, ...]]


def steps(lines: Sequence[str], names: frozenset[str], opaque: bool = False) -> list[Step]:
    """The steps of a statement's emitted ``lines`` (at depth 0), over ``names``; one opaque
    step (an inner loop) reads every name it reads or writes.  Raises SyntaxError where
    the lines are not a block of Python statements."""
    out = list(_steps(tuple(lines), names))
    if opaque:
        reads = {r for _, rs, ws in out for r in rs + ws}
        return [(None, tuple(sorted(reads)), tuple(sorted({w for *_, ws in out for w in ws})))]
    return out


@lru_cache(maxsize=4096)
def _steps(lines: tuple[str, ...], names: frozenset[str]) -> tuple[Step, ...]:
    """``steps`` of one chunk of source (remembered: the sweep and the refresh emit the
    same statements, and so does every compile of a model)."""
    out = []
    for node in ast.parse("\n".join(lines)).body:
        reads, writes = set(), set()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and sub.id in names:
                (reads if isinstance(sub.ctx, ast.Load) else writes).add(sub.id)
        text = "\n".join(lines[node.lineno - 1: node.end_lineno])
        out.append((text, tuple(sorted(reads)), tuple(sorted(writes))))
    return tuple(out)


@dataclass
class _Values:
    """Symbolic values: name -> number, numbers interned by (text, name, inputs)."""
    table: dict[tuple, int]
    now: dict[str, int]

    def get(self, name: str) -> int:
        if name not in self.now:  # the value a name has before anything simulated
            self.now[name] = self.intern(("unknown", name))
        return self.now[name]

    def intern(self, key: tuple) -> int:
        return self.table.setdefault(key, len(self.table))

    def run(self, stmt: Sequence[Step], seen: list[dict[str, int]] | None = None) -> None:
        """Simulate one statement; ``seen`` gets the values each of its steps reads."""
        for text, reads, writes in stmt:
            inputs = {r: self.get(r) for r in reads}
            if seen is not None:
                seen.append(inputs)
            for w in writes:
                self.now[w] = self.intern(("opaque", len(self.table)) if text is None
                                          else (text, w, tuple(inputs.items())))

    def fork(self) -> _Values:
        return _Values(self.table, dict(self.now))


def _exposed(stretch: Sequence[Sequence[Step]]) -> set[str]:
    """The names a stretch reads before it writes them."""
    written: set[str] = set()
    out: set[str] = set()
    for stmt in stretch:
        for _, reads, writes in stmt:
            out.update(r for r in reads if r not in written)
            written.update(writes)
    return out


def _backward(refresh: Sequence[Sequence[Step]], after: Sequence[Sequence[Step]],
              live: set[str]) -> list[int]:
    """Positions of the refresh statements whose outputs are read later (by ``after``, by
    kept statements, or at the end: ``live``)."""
    live = set(live)
    for stmt in reversed(after):
        for _, reads, writes in reversed(stmt):
            live.difference_update(writes)
            live.update(reads)
    kept = []
    for i in range(len(refresh) - 1, -1, -1):
        if not any(w in live for _, _, ws in refresh[i] for w in ws):
            continue
        kept.append(i)
        for _, reads, writes in reversed(refresh[i]):
            live.difference_update(writes)
            live.update(reads)
    return kept[::-1]


def live_refresh(sweep: Sequence[Sequence[Step]], refresh: Sequence[Sequence[Step]],
                 after: Sequence[Sequence[Step]], keep: frozenset[str],
                 before: Sequence[Sequence[Step]] = ()) -> list[int]:
    """The positions of the ``refresh`` statements to emit (see the module docstring):
    ``sweep`` the last loop's statements in the order a sweep runs them, ``after`` what
    ``evidence()`` runs after the refresh, ``keep`` the names read at the end of the run
    whatever the state (the posteriors returned), ``before`` what runs before the last
    loop's first sweep (earlier loops as one sweep each: the refresh recomputes their
    messages too, and one the sweeps after it left as it was need not be)."""
    every = list(range(len(refresh)))
    start = _Values({}, {})
    for stmt in list(before) + list(sweep):
        start.run(stmt)
    full = start.fork()
    full_seen: list[dict[str, int]] = []
    for stmt in refresh:
        full.run(stmt)
    for stmt in after:
        full.run(stmt, full_seen)
    # read after evidence(): by the next sweep, the next evidence(), the posteriors
    later = _exposed(sweep) | _exposed(list(refresh) + list(after)) | set(keep)
    # a name must end as the full refresh leaves it where that differs from the sweep's
    needed = set(keep) | {n for n in later if full.get(n) != start.get(n)}
    while True:
        kept = _backward(refresh, after, needed)
        pruned = start.fork()
        seen: list[dict[str, int]] = []
        for i in kept:
            pruned.run(refresh[i])
        for stmt in after:
            pruned.run(stmt, seen)
        if seen != full_seen:  # (not by construction: keep everything)
            return every
        wrong = {n for n in later if pruned.get(n) != full.get(n)}
        if not wrong:
            return kept
        if wrong <= needed:  # (not by construction either)
            return every
        needed |= wrong


def settled(sweep: Sequence[Sequence[Step]], refresh: Sequence[Sequence[Step]],
            after: Sequence[Sequence[Step]]) -> list[bool]:
    """For each statement of ``sweep``: whether, in a sweep that follows ``evidence()`` (the
    kept ``refresh``, then ``after``) run right after another sweep, it computes for each
    name it writes the value that name already holds — what ``evidence()`` computed from
    the same values (a gate's messages from posteriors that the sweep has not yet moved).
    Such a statement may be skipped there: the state is the same.  ``ITERATION`` (the
    sweep's number) has a new value in every sweep."""
    values = _Values({}, {})
    values.now[ITERATION] = values.intern(("sweep", 0))
    for stmt in list(sweep) + list(refresh) + list(after):
        values.run(stmt)
    values.now[ITERATION] = values.intern(("sweep", 1))
    return _unchanged(values, sweep)


def repeated(sweep: Sequence[Sequence[Step]]) -> list[bool]:
    """For each statement of ``sweep``: whether, in every sweep, each name it writes
    already holds the value it computes — the same computation of the same values ran
    earlier in the sweep, and none of its inputs has moved since (a gate's clone of a
    posterior that has not moved, entered again after the cases moved, which it reads
    for their shape alone).  Simulated once from unknown values, so it holds whatever
    the state the sweep starts from; a statement skipped after ``evidence()`` leaves
    the value it would compute (``settled``).  Such a statement may be left out of the
    sweep: every name holds the same value at every point, with or without it, and
    leaving out several such statements keeps that (by induction along the sweep).
    Statements that write nothing, or that are opaque, are kept."""
    return _unchanged(_Values({}, {}), sweep)


def _unchanged(values: _Values, sweep: Sequence[Sequence[Step]]) -> list[bool]:
    """Runs ``sweep`` on ``values``; for each statement, whether it wrote something and
    every name it wrote already held the value it computed (opaque statements: False)."""
    out = []
    for stmt in sweep:
        held = {w: values.get(w) for _, _, writes in stmt for w in writes}
        values.run(stmt)
        out.append(bool(held) and all(text is not None for text, *_ in stmt)
                   and all(values.get(w) == v for w, v in held.items()))
    return out


def overwritten(sweep: Sequence[Sequence[Step]]) -> list[bool]:
    """For each statement of ``sweep``: whether every name it writes is written again
    later in the same sweep before any statement reads it (a message a sweep computes
    twice, whose first value nothing reads).  Left out, the names hold other values in
    between, which nothing reads; every name holds the same value after the statement
    that writes it again, and so at the end of the sweep.  Leaving out several such
    statements keeps that: a read by any statement, left out or not, keeps the writer.
    Statements that write nothing, or that are opaque, are kept."""
    out = []
    for i, stmt in enumerate(sweep):
        pending = {w for _, _, writes in stmt for w in writes}
        if not pending or any(text is None for text, *_ in stmt):
            out.append(False)
            continue
        dead = False
        for later in sweep[i + 1:]:
            for _, reads, writes in later:
                if pending & set(reads):
                    break
                pending -= set(writes)
            else:
                if not pending:
                    dead = True
                    break
                continue
            break
        out.append(dead)
    return out


def implied(sweep: Sequence[Sequence[Step]], follows: Sequence[dict[str, str]],
            checks: Sequence[str | None]) -> list[bool]:
    """For each statement of ``sweep``: whether the properness check after it of the
    name ``checks[i]`` (None: no check) checks a value that is proper by then, in every
    sweep: a value an earlier check of the same sweep passed, or one that statement
    ``j`` made from such a value where ``follows[j]`` maps its output to that input (a
    posterior's copy or layout, a gate's clone of a value: proper where the value is).
    Simulated once from unknown values, as ``repeated``; a check that fails raises, so
    after it the value is proper.  Such a check may be left out."""
    return _proper_run(_Values({}, {}), set(), sweep, follows, checks)


def _proper_run(values: _Values, proper: set[int], stretch: Sequence[Sequence[Step]],
                follows: Sequence[dict[str, str]], checks: Sequence[str | None]
                ) -> list[bool]:
    """Simulate ``stretch`` (see ``implied``) from ``values`` and ``proper`` (updated):
    for each statement, whether its check is implied."""
    out = []
    for stmt, follow, check in zip(stretch, follows, checks, strict=True):
        inputs = {i: values.get(i) for i in follow.values()}
        values.run(stmt)
        for o, i in follow.items():
            if inputs[i] in proper:
                proper.add(values.get(o))
        if check is None:
            out.append(False)
            continue
        value = values.get(check)
        out.append(value in proper)
        proper.add(value)
    return out


def implied_later(sweep: Sequence[Sequence[Step]], follows: Sequence[dict[str, str]],
                  checks: Sequence[str | None],
                  between: Sequence[tuple[Sequence[Sequence[Step]], Sequence[dict[str, str]]]]
                  ) -> list[bool]:
    """For each statement of ``sweep``: whether its check (as ``implied``) is implied in
    every sweep but the first of a run — in a sweep that follows another, with each of
    ``between`` (statements and their ``follows``: what may run between two sweeps, such
    as ``evidence()``'s) run in between.  (A value checked at the end of one sweep, a
    posterior that has not moved since, cloned at the start of the next.)"""
    out = [True] * len(sweep)
    for stretch, stretch_follows in between:
        values, proper = _Values({}, {}), set()
        _proper_run(values, proper, sweep, follows, checks)
        _proper_run(values, proper, stretch, stretch_follows, [None] * len(stretch))
        later = _proper_run(values, proper, sweep, follows, checks)
        out = [a and b for a, b in zip(out, later, strict=True)]
    return out


__all__ = ["ITERATION", "Step", "steps", "live_refresh", "settled", "repeated",
           "overwritten", "implied", "implied_later"]
