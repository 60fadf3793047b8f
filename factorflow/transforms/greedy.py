"""The seed's greedy scheduler over one loop's statements (seed 000), used by
``scheduling``: per-statement state (valid, fresh, ran, pristine user initialization),
trial plans that schedule stale Fresh sources first, heuristic scores kept in a heap.

Guarantees: deterministic (ties by program order); a statement is scheduled only when
what it reads is valid and, in init mode, what it requires has run; ``ScheduleError``
names the blocked statements when no choice satisfies the constraints.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence

from factorflow.errors import ScheduleError
from factorflow.transforms.dependencies import DependencyGraph

VALID, FRESH, RAN, PRISTINE = 1, 2, 4, 8  # per-node state bits; PRISTINE: unread user init
STALED = 16  # made stale in this pass by a run of one of its sources (``_behind``)


class _Loop:
    """One loop's adjacency restricted to its members (node numbers of the GraphIndex)."""

    def __init__(self, graph: DependencyGraph, members: Iterable[int], keep: set[int]) -> None:
        ix = graph.index
        self.index, self.labels, self.members = ix, ix.labels, sorted(members)
        inside = set(self.members)

        def local(lists: Sequence[Sequence[int]]) -> dict[int, tuple[int, ...]]:
            return {a: tuple(b for b in lists[a] if b in inside) for a in self.members}

        self.reads_src, self.reads_dst = local(ix.reads_src), local(ix.reads_dst)
        self.need_src, self.need_dst = local(ix.need_src), local(ix.need_dst)
        self.triggers, self.triggered_by = local(ix.triggers), local(ix.triggered_by)
        self.needs_fresh, self.fresh_for = local(ix.needs_fresh), local(ix.fresh_for)
        self.fresh_src, self.fresh_dst = local(ix.fresh_src), local(ix.fresh_dst)
        self.trig_src = local(ix.trig_src)
        self.needs_fresh_set = {a: frozenset(self.needs_fresh[a]) for a in self.members}
        # operators reading the same messages (of one factor: a chain's messages to its
        # states and to its parameters) share work when they run from the same values
        group: dict[frozenset[int], list[int]] = {}
        for a in self.members:
            if ix.reads_src[a]:
                group.setdefault(frozenset(ix.reads_src[a]), []).append(a)
        self.siblings = {a: tuple(b for b in group.get(frozenset(ix.reads_src[a]), ())
                                  if b != a) for a in self.members}
        self.pref_src = local(ix.pref_src)
        self.unaffected = ix.unaffected
        self.user = {ix.pos[x] for x in graph.user_initialized} & inside
        self.no_init = {ix.pos[x] for x in graph.no_init} & inside
        before = {a: [t for t in ix.triggered_by[a] if t in keep and t not in inside]
                  for a in self.members if a not in self.user | self.no_init}
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
        # parallel sweeps (``dependency_info``): the hubs, and what invalidates them
        self.hubs = {ix.pos[h] for h, (how, _) in graph.sweeps.items()
                     if how == "parallel"} & inside
        self.feeds_hub = {a for a in self.members if self.hubs & set(self.triggers[a])}
        self.first_why = {a: "output" if ix.labels[a] in graph.outputs else
                          f"read by {ix.labels[(self.reads_dst[a] or ix.all_dst[a])[0]]}"
                          for a in self.members}


class _Trial:
    """Tentative effects of a plan on top of the real state."""

    __slots__ = ("ov", "cause", "steps", "penalty", "invalidated", "hit", "waived", "failed",
                 "staled", "stale_cause")

    def __init__(self) -> None:
        self.ov: dict[int, int] = {}
        self.cause: dict[int, int] = {}
        self.steps: list[tuple[int, str]] = []
        self.penalty = self.invalidated = 0
        self.hit: list[int] = []
        self.waived: dict[int, list[int]] = {}  # node -> Fresh sources read as they are
        #: statements this plan could not bring up to date: not tried again in it (each
        #: retry would search the same sources again, exponential in the depth of Fresh
        #: chains)
        self.failed: set[int] = set()
        #: statements the plan made stale, in order, and the run that made each stale
        self.staled: list[int] = []
        self.stale_cause: dict[int, int] = {}


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
            a: VALID | (RAN if a in lp.user or a in lp.no_init or mode != "init" else 0)
            | (PRISTINE if a in lp.user else 0) | (FRESH if a in lp.fresh_on_entry else 0)
            for a in lp.members}
        self.cause: dict[int, int] = {}
        self.done: set[int] = set()
        self.waiting: dict[int, str] = {}
        self.key: dict[int, tuple[int, ...]] = {}
        self.heap: list[tuple[int, ...]] = []
        self.steps: list[tuple[int, str]] = []
        self.lenient = False  # see _unreadable
        #: score ``_wasted`` (a second plan of the pass, kept where it is shorter)
        self.waste = False
        self.stale_cause: dict[int, int] = {}
        #: waiting only because a statement prefers them run first (``Dep.PREFERRED``):
        #: dropped when they cannot run
        self.optional: set[int] = set()

    def _unreadable(self, s: int, state: int) -> bool:
        """Whether a statement may not read message s in ``state``: s is invalid (a
        trigger source changed since s ran), and not NoInit in the init schedule.  Only
        when the init schedule is otherwise stuck (``lenient``), a message that has not
        run yet may be read at its initial value although statements before the loop
        triggered it: Infer.NET leaves those statements out of the graph, and a cycle
        through a Required edge (an exit variable's message to its definition, under EP)
        has no other way in."""
        if self._unreadable_ok(s):
            return False
        return not state & VALID and not (self.lenient and not state & RAN)

    def _unreadable_ok(self, s: int) -> bool:
        """NoInit: in the init schedule s is read as it is (its initial value), never run."""
        return self.init_mode and s in self.lp.no_init

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
            if t != x and get(trial, t) & FRESH and not self._still_fresh(x, t):
                ov[t] = get(trial, t) & ~FRESH | STALED
                trial.staled.append(t)
                trial.stale_cause[t] = x
        for t in lp.triggers[x]:
            m = get(trial, t)
            if m & VALID:
                trial.invalidated += 1
                trial.penalty += bool(m & PRISTINE)
                ov[t], trial.cause[t] = m & ~VALID, x
                trial.hit.append(t)
        trial.steps.append((x, why))

    def _ensure(self, y: int, trial: _Trial, active: frozenset[int]) -> bool:
        """Run in ``trial`` what y needs first: stale Fresh sources (recursively),
        sources that those runs invalidated, and, in a plan avoiding recomputation
        (``waste``), statements y would read behind (``_behind``). False if that cannot
        be done."""
        lp, label = self.lp, self.lp.labels
        waived: set[int] = set()
        for _ in range(len(lp.needs_fresh[y]) + 4):
            need = next((s for s in lp.needs_fresh[y] if not self._get(trial, s) & FRESH
                         and s not in waived and not self._unreadable_ok(s)), None)
            why = f"fresh for {label[y]}"
            if need is None and self.waste:
                need = next((s for s in lp.fresh_src[y] if s not in waived
                             and self._reads_invalidated(s, trial)), None)
            if need is None:
                for s in lp.reads_src[y]:
                    if s != y and self._unreadable(s, self._get(trial, s)):
                        # invalid (before this plan, or made so by it): brought up to
                        # date first, as the statement it feeds needs it fresh
                        cause = trial.cause.get(s, self.cause.get(s))
                        need, why = s, (f"triggered by {label[cause]}, " if cause is not None
                                        else "") + f"read by {label[y]}"
                        break
            if need is None and self.waste:
                behind = self._behind(y, trial)
                if behind is not None:
                    need, through = behind
                    why = (f"stale since {label[self._stale_cause(need, trial)]}, read by "
                           f"{label[y]}" + (f" through {label[through]}" if through != need
                                            else ""))
            if need is None:
                return not self.init_mode or all(self._get(trial, r) & RAN for r in lp.need_src[y])
            if need in active or need in trial.failed or not self._ensure(
                    need, trial, active | {need}):
                if need not in active:
                    trial.failed.add(need)
                if self.lenient and not self._get(trial, need) & RAN:
                    # a stuck init schedule starts from initial values: a Fresh source
                    # that cannot run yet (it requires what has not run) is read as is
                    waived.add(need)
                    trial.waived.setdefault(y, []).append(need)
                    continue
                return False
            self._apply(need, trial, why)
        return False

    def _reads_invalidated(self, s: int, trial: _Trial) -> bool:
        """Whether s reads a message that a run since s's own has invalidated (it will
        change), unless that run does not reach s (the graph's ``unaffected``: EP's
        message out on the edge its message in arrived by) or was itself computed from s
        (it needs s, or a sibling of s, fresh: a chain's parameters updated from the pass
        that gave the chain's posterior).  In a plan avoiding recomputation a statement
        waits for such a Fresh source to be computed again: under VMP an update then
        sees every posterior updated before it (coordinate ascent)."""
        lp, get = self.lp, self._get
        for r in lp.reads_src[s]:
            if r == s or not self._unreadable(r, get(trial, r)):
                continue
            c = trial.cause.get(r, self.cause.get(r))
            if c is None or (c, s) in lp.unaffected:
                continue
            used = lp.needs_fresh_set[c] if c in lp.needs_fresh_set else frozenset()
            if s not in used and not used.intersection(lp.siblings[s]):
                return True
        return False

    def _stale_cause(self, p: int, trial: _Trial) -> int:
        """The run that last made p stale (p itself if none is recorded)."""
        return trial.stale_cause.get(p, self.stale_cause.get(p, p))

    def _behind(self, y: int, trial: _Trial) -> tuple[int, int] | None:
        """(p, r): a statement computed from Fresh sources (a posterior, under VMP) that a
        run in this pass made stale, and that y reads, directly (r = p) or through a
        message r that p triggers (a message out of that posterior); None if there is
        none.  y then waits for p to be computed again: under VMP a message read by an
        update must reflect every posterior update before it (coordinate ascent: a
        parallel, Jacobi-like update of two posteriors from each other's old values can
        lower the bound).  Not when what made p stale does not reach r or y (the graph's
        ``unaffected``)."""
        lp, get, unaffected = self.lp, self._get, self.lp.unaffected
        for r in lp.reads_src[y]:
            if r == y:
                continue
            for p in (r, *lp.trig_src[r]):
                if p == y or not get(trial, p) & STALED or not lp.fresh_src[p]:
                    continue
                cause = self._stale_cause(p, trial)
                if (cause, r) not in unaffected and (cause, y) not in unaffected:
                    return p, r
        return None

    def _still_fresh(self, x: int, t: int) -> bool:
        """Whether t, which reads x, stays fresh when x runs: x does not reach t's value
        (the graph's ``unaffected``), or t is needed fresh only by statements that x does
        not reach (a posterior read fresh only by the message out on x's own edge).  It
        may still be invalid (a Trigger): then it is recomputed before it is read."""
        lp = self.lp
        if (x, t) in lp.unaffected:
            return True
        return bool(lp.fresh_dst[t]) and all((x, u) in lp.unaffected for u in lp.fresh_dst[t])

    def _plan(self, x: int) -> _Trial | None:
        st, lp = self.st, self.lp
        if any(s != x and self._unreadable(s, st[s]) for s in lp.reads_src[x]):
            return None
        if self.init_mode and any(not st[r] & RAN for r in lp.need_src[x]):
            return None
        trial = _Trial()
        if not self._ensure(x, trial, frozenset((x,))):
            return None
        self._apply(x, trial, self.waiting.get(x, ""))
        return trial

    def _deferred(self, x: int) -> bool:
        """In a parallel sweep, whether x would change a hub's posterior (and the messages
        it sends) while a waiting statement still has to read those messages this pass:
        running x then would give that statement a newer cavity than the ones read before
        it (a sequential sweep)."""
        if self.selective or x not in self.lp.feeds_hub:
            return False
        lp = self.lp
        hit = set(lp.triggers[x])
        return any(y != x and y not in hit and (hit.intersection(lp.reads_src[y])
                                                 or hit.intersection(lp.needs_fresh[y]))
                   for y in self.waiting)

    def _uniform_starts(self, x: int) -> int:
        """In the init schedule, how many sources x prefers computed (``Dep.PREFERRED``,
        SkipIfUniform as a penalty) have not run yet: x would start from their uniform
        initial values."""
        if not self.init_mode:
            return 0
        return sum(s != x and not self.st[s] & RAN for s in self.lp.pref_src[x])

    def _score(self, x: int) -> tuple[int, ...]:
        """(blocked, deferred, initial values read, uniform starts, wasted, penalty,
        -sources already scheduled, invalidations, program order).  The second holds
        back, in a parallel sweep, the messages into a hub (``_deferred``).  The third
        counts only when the init schedule is stuck (``lenient``): it starts where the
        fewest initial values are read; the fourth (init only) where the fewest preferred
        sources are still uniform (``_uniform_starts``); the fifth only in a plan that
        avoids recomputation (``waste``): how much this pass already computed the plan
        would leave to compute again (``_wasted``)."""
        lp, st = self.lp, self.st
        initial = 0
        if lp.needs_fresh[x] or self.waste:  # (``_behind`` too: only a plan sees it)
            trial = self._plan(x)
            if trial is None:
                return (1, 0, 0, 0, 0, 0, 0, 0, x)
            penalty, invalidated = trial.penalty, trial.invalidated
            initial = sum(map(len, trial.waived.values()))
            wasted = self._wasted(trial) if self.waste else 0
        else:  # the plan is x alone: the same numbers without a trial
            if any(s != x and self._unreadable(s, st[s]) for s in lp.reads_src[x]) or (
                    self.init_mode and any(not st[r] & RAN for r in lp.need_src[x])):
                return (1, 0, 0, 0, 0, 0, 0, 0, x)
            penalty = int(st[x] & (PRISTINE | VALID) == PRISTINE | VALID)
            wasted = 0
            invalidated = 0
            for t in lp.triggers[x]:
                if st[t] & VALID:
                    invalidated += 1
                    penalty += bool(st[t] & PRISTINE) and t not in lp.reads_src[x]
        if self.lenient:
            initial += sum(s != x and not st[s] & (VALID | RAN) for s in lp.reads_src[x])
        done = sum(s in self.done for s in lp.reads_src[x])
        return (0, int(self._deferred(x)), initial, self._uniform_starts(x), wasted, penalty,
                -done, invalidated, x)

    def _wasted(self, trial: _Trial) -> int:
        """How many statements up to date before the plan ``trial`` it leaves stale while
        a waiting statement outside it needs them fresh (each is computed again before
        that statement runs: work this pass already did), and how many statements run in
        this pass it changes the inputs of while a sibling (``_Loop.siblings``: reading the
        same messages) still waits to run from them (a chain's forward–backward pass is
        then run twice per sweep where once would do)."""
        lp, waiting = self.lp, self.waiting
        ran = {a for a, _ in trial.steps}
        wasted = sum(t not in waiting and not trial.ov[t] & FRESH and any(
            y in waiting and y not in ran for y in lp.fresh_for[t]) for t in set(trial.staled))
        # a run of this pass whose siblings still wait loses the work they would share
        return wasted + sum(t in self.done and t not in waiting and any(
            u in waiting and u not in ran for u in lp.siblings[t])
            for t in {t for a in ran for t in lp.reads_dst[a] if t not in ran})

    def _rescore(self, x: int) -> None:
        key = self._score(x)
        if self.key.get(x) != key:
            self.key[x] = key
            heapq.heappush(self.heap, key)

    def enqueue(self, x: int, why: str, optional: bool = False) -> None:
        """Add x to the waiting list; in init mode also what x's plan needs run first,
        and (``optional``: dropped if they cannot run) the sources it prefers computed."""
        todo = [(x, why, optional)]
        while todo:
            y, why, opt = todo.pop()
            if y in self.waiting:
                if not opt and y in self.optional:  # needed after all
                    self.optional.discard(y)
                    todo += [(r, w, False) for r, w in self._needs(y)]
                continue
            self.waiting[y] = why
            if opt:
                self.optional.add(y)
            self._rescore(y)
            if not self.selective:
                continue
            todo += [(r, w, opt) for r, w in self._needs(y)]
            if self.init_mode:
                label = self.lp.labels[y]
                todo += [(s, f"preferred by {label} (not to start it from a uniform "
                             "message)", True) for s in self.lp.pref_src[y]
                         if s != y and not self.st[s] & RAN and s not in self.lp.no_init]

    def _needs(self, y: int) -> list[tuple[int, str]]:
        """What y's plan needs run first in init mode, with why: Required sources not
        yet run, invalid sources it reads (of y and of what it needs fresh)."""
        out = []
        for p in (y, *self.lp.needs_fresh[y]):
            label = self.lp.labels[p]
            out += [(r, f"required by {label}") for r in self.lp.need_src[p]
                    if not self.st[r] & RAN]
            out += [(s, f"triggered by {self.lp.labels[self.cause[s]]}, read by {label}")
                    for s in self.lp.reads_src[p] if s != p and not self.st[s] & VALID
                    and not self._unreadable_ok(s)]
        return out

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
                if verified and self.optional & self.waiting.keys():
                    for y in self.optional & self.waiting.keys():  # cannot run: not needed
                        del self.waiting[y], self.key[y]
                    self.optional.clear()
                    if not self.waiting:
                        return -1
                    verified = False
                    continue
                if verified and self.init_mode and not self.lenient:
                    self.lenient, verified = True, False  # for one step: see _unreadable
                    for y in list(self.waiting):
                        self._rescore(y)
                    continue
                if verified:
                    raise ScheduleError(self._stuck())
                verified = True
                for y in list(self.waiting):
                    self._rescore(y)

    def _stuck(self) -> str:
        lp, label = self.lp, self.lp.labels
        lines = []
        for y in sorted(self.waiting)[:8]:
            bad = [label[s] for s in lp.reads_src[y] if s != y and self._unreadable(s, self.st[s])]
            unrun = [label[r] for r in lp.need_src[y] if not self.st[r] & RAN]
            lines.append(f"{label[y]} " + (f"reads invalid {', '.join(bad)}" if bad else
                         f"requires {', '.join(unrun)}, not yet run" if unrun else
                         "needs Fresh sources that cannot all be brought up to date"))
        return "no statement in the loop can run without breaking a constraint: " + "; ".join(
            lines)

    def _commit(self, x: int) -> None:
        trial = self._plan(x)
        assert trial is not None
        self.lenient = False
        lp, label = self.lp, self.lp.labels
        uniform = {}  # init: the preferred sources each step starts from uniform
        if self.init_mode:
            before = {a for a in lp.members if self.st[a] & RAN}
            for a, _ in trial.steps:
                uniform[a] = [label[s] for s in lp.pref_src[a] if s != a and s not in before]
                before.add(a)
        self.st.update(trial.ov)
        self.cause.update(trial.cause)
        self.stale_cause.update(trial.stale_cause)
        ran = [a for a, _ in trial.steps]
        for a, why in trial.steps:
            if a in trial.waived:
                why += "; starts from the initial " + ", ".join(
                    label[s] for s in trial.waived[a]) + " (nothing can run first)"
            if uniform.get(a):
                why += "; starts from the uniform " + ", ".join(uniform[a]) + \
                    " (it cannot run first)"
            self.steps.append((a, why))
            self.done.add(a)
            self.optional.discard(a)
            if self.waiting.pop(a, None) is not None:
                del self.key[a]
        for t in dict.fromkeys(trial.hit):
            if self.st[t] & VALID or t in self.waiting or self._unreadable_ok(t):
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
        if lp.feeds_hub and not self.selective:  # the waiting set changed
            dirty.update(lp.feeds_hub)
        if self.waste:  # ``_wasted`` reads the waiting set and what is fresh anywhere
            dirty.update(self.waiting)
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
            self.stale_cause.update(trial.stale_cause)

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
            x = self._best()
            if x < 0:  # only optional statements were left, and none can run
                break
            self._commit(x)
            if len(self.steps) > limit:
                raise ScheduleError(f"scheduling a loop of {len(lp.members)} statements does "
                                    "not settle: Trigger and Fresh edges keep undoing each other")
        return self.steps
