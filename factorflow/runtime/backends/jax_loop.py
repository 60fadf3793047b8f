"""The JAX backend's loop: sweeps in ``lax.while_loop``, the convergence test on device.

``Sweeps`` is the ``sweeps`` the generated JAX program calls for each of its loops
(``factorflow.codegen.jax``).  It runs ``sweep`` until the run has converged or
``iterations`` sweeps are done, computing after each sweep exactly what the NumPy
backend's monitor (``runtime.compiled._Monitor``) computes on the host: the largest
relative change of any watched posterior's natural parameters (and of the VMP bound;
what is watched: ``compiled.watched``, the user's posteriors, under EP also the gate
transform's own),
the contraction rate and the distance to the fixed point, the sweeps in a row that met
the tolerance, whether each step reversed the one before (the oscillation hint), the
first fall of the VMP bound, and the trace of the log evidence.  ``to_monitor`` copies
those numbers into a ``_Monitor`` after the run, so that ``result.converged``,
``result.iterations``, ``result.trace`` and the ``ConvergenceWarning`` text come from
the same code as for NumPy.

Checks: ``check_proper`` and ``check_proper_input`` cannot raise inside ``jit``.  The
JAX kernels record each check's verdict (a boolean on the device) in ``CHECKS`` while
the sweep is traced; the loop keeps, per check, the first sweep at which it failed and
stops there (the condition of the while loop), and the host raises
``ImproperMessageError`` naming the check and that sweep once the loop has returned
(``raise_failures``).  Checks before the loops are returned as booleans the same way.
EP's ``skip_improper`` records how many elements it skipped; the loop keeps, per update,
its first and last skipping sweep and counts, from which the host gives NumPy's
``ImproperMessageWarning`` and the table its verdict reads (``report_skips``).

The loop carries only what the next sweep and the code after the loop read, broadcast
views as their distinct elements (``jax_carry``); the convergence test compares each
watched posterior's distinct elements, as ``_Monitor`` does.  Where the bound follows
every sweep, a sweep that takes ``refreshed`` (``settled``) skips what ``evidence()``
computed: the first sweep runs before the ``lax.while_loop`` without the skip, the
loop's body with it.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from factorflow.errors import ImproperMessageError
from factorflow.runtime.backends.jax_bound import value as bound_value
from factorflow.runtime.backends.jax_carry import Carry
from factorflow.runtime.backends.jax_namespace import namespace
from factorflow.runtime.compiled import watched

#: turns (step reversals) kept per posterior: the NumPy monitor reads its last 10
TURNS = 10


class Frame(list):
    """The checks met while one program or sweep is traced: (what, ok) per check, ``ok``
    a boolean on the device (True: every element passed; with a ``slow`` verdict, see
    ``verdicts``, only its witness); ``skips``: (what, count) per EP update that
    ``skip_improper`` may skip, ``count`` the elements it skipped (an integer on the
    device, as NumPy's ``kernels.SKIPPED`` counts them)."""

    def __init__(self) -> None:
        super().__init__()
        self.skips: list[tuple[str, Any]] = []
        #: per check: None, or the exact verdict to compute where its witness failed
        self.slow: list[Callable[[], Any] | None] = []

    def verdicts(self) -> Any:
        """Each check's verdict (a boolean vector, in order): the witnesses where all
        hold; else, in one ``lax.cond``, each failed witness's exact verdict (the
        elementwise test with its exemptions: NumPy's path after ``all_proper``)."""
        if not self:
            return jnp.zeros(0, bool)
        fast = jnp.stack([ok for _, ok in self])
        if not any(s is not None for s in self.slow):
            return fast

        def exact() -> Any:
            return jnp.stack([ok if s is None else ok | jnp.asarray(s(), bool)
                              for (_, ok), s in zip(self, self.slow, strict=True)])
        return jax.lax.cond(jnp.all(fast), lambda: fast, exact)


class Checks:
    """The run-time checks met while a program is traced, one ``Frame`` per traced
    program or sweep (the innermost is recorded into)."""

    def __init__(self) -> None:
        self.frames: list[Frame] = []

    def _top(self) -> Frame:
        if not self.frames:
            raise RuntimeError("a JAX kernel check ran outside a traced program")
        return self.frames[-1]

    def record(self, what: str, ok: Any, slow: Callable[[], Any] | None = None) -> None:
        """A check's verdict ``ok``; with ``slow``, ``ok`` is a witness (True: passed;
        False: ``slow()``, computed only then, gives the verdict)."""
        frame = self._top()
        frame.append((what, jnp.asarray(ok, bool)))
        frame.slow.append(slow)

    def skipped(self, what: str, count: Any) -> None:
        self._top().skips.append((what, jnp.asarray(count, int)))

    @contextlib.contextmanager
    def frame(self) -> Iterator[Frame]:
        found = Frame()
        self.frames.append(found)
        try:
            yield found
        finally:
            self.frames.pop()


CHECKS = Checks()


def _unify(a: Any, b: Any) -> Any:
    """``a`` broadcast to the shape it shares with ``b`` (a loop's carry keeps one shape:
    a message that starts uniform over fewer plates than the sweep gives it is laid out
    over the sweep's plates, which broadcasting makes the same message)."""
    shape = jnp.broadcast_shapes(jnp.shape(a), jnp.shape(b))
    dtype = jnp.result_type(a, b)
    if shape == jnp.shape(a) and dtype == jnp.result_type(a):
        return a
    ns = namespace()
    base = ns["factorflow.distributions.base"]
    if base.is_zeros_view((a,)) and dtype == jnp.result_type(a):  # still a uniform message
        return base.zeros_view(shape)
    # a recorded view of a's distinct elements (see ``jax_carry``)
    return ns.numpy.broadcast_to(jnp.asarray(base.distinct(a), dtype), shape)


def _settle_shapes(state: Any, step: Callable[[Any], Any]) -> Any:
    """``state`` with every leaf broadcast to the shape ``step`` keeps (at most 4
    rounds: each round can only add axes)."""
    for _ in range(4):
        out = jax.eval_shape(step, state)
        same = jax.tree_util.tree_map(lambda a, b: jnp.shape(a) == b.shape and
                                      jnp.result_type(a) == b.dtype, state, out)
        if all(jax.tree_util.tree_leaves(same)):
            return state
        state = jax.tree_util.tree_map(
            lambda a, b: _unify(a, jnp.zeros(b.shape, b.dtype)), state, out)
    return state


def _change(eta: tuple, old: tuple) -> Any:
    """The largest relative change |Δη| / (1 + |η_old|) over the parameters (0 where a
    parameter is unchanged, which an infinite one, a point mass, may be)."""
    d = jnp.asarray(0.0)
    for a, b in zip(eta, old, strict=True):
        rel = jnp.where(a == b, 0.0, jnp.abs(a - b) / (1.0 + jnp.abs(b)))
        d = jnp.maximum(d, jnp.max(rel, initial=0.0)) if rel.size else d
    return d


def _step(eta: tuple, old: tuple) -> Any:
    return jnp.concatenate([jnp.ravel(jnp.where(a == b, 0.0, a - b))
                            for a, b in zip(eta, old, strict=True)])


def _pmax(current: Any, new: Any) -> Any:
    """Python's ``max(current, new)``: ``new`` only when it is greater (NaN never is)."""
    return jnp.where(new > current, new, current)


def _laid_out(a: Any, ref: Any) -> Any:
    """A leaf of a sweep's new state laid out as the carry's ``ref`` (see ``_unify``):
    itself where it already is, else a recorded broadcast view."""
    a = jnp.asarray(a) if not isinstance(a, jax.Array) else a
    if jnp.shape(a) == jnp.shape(ref) and a.dtype == ref.dtype:
        return a
    return namespace().numpy.broadcast_to(jnp.asarray(a, ref.dtype), jnp.shape(ref))


def _materialised(state: tuple) -> tuple:
    """``state`` with every deferred message (``factors.common.Deferred``, a call kept
    for ``Gate.EnterOne`` to fuse) computed: a loop carries arrays only.  Within a sweep
    the deferred calls stay fused; a carried one is only read again if a later sweep
    reads it before making it anew, and the compiler drops it otherwise."""
    deferred = namespace()["factorflow.factors.common"].Deferred
    return tuple(v.value() if isinstance(v, deferred) else v for v in state)


class Sweeps:
    """The ``sweeps`` of one traced run (see the module docstring)."""

    #: whether a sweep after evidence() skips what evidence() computed (``settled``; a
    #: switch for the tests, which compare the loop with and without)
    skip_refreshed = True

    def __init__(self, algorithm: str, tolerance: Any, capacity: int,
                 tracing: bool = True, stall: bool = False, limit: Any = None) -> None:
        # ``tolerance``: None, a number or a device scalar; ``limit``: None (each loop
        # makes at most the ``iterations`` it is called with) or a device scalar, the
        # sweeps' limit then (``capacity``, the trace's length, or fewer)
        self.algorithm, self.tolerance, self.capacity = algorithm, tolerance, capacity
        self.limit = limit
        #: the bound or log evidence after every sweep (``run(trace=)``); the default
        #: run stops when the changes stop shrinking (``stall``, as ``_Monitor``'s)
        self.tracing, self.stall = tracing, stall
        self.names: list[str] = []
        self.monitor: dict[str, Any] | None = None
        #: per loop: the names of its checks and the sweep each first failed at (-1: none)
        self.failures: list[tuple[list[str], Any]] = []
        #: per loop: the names of its skip_improper updates and, per update, (the first
        #: sweep that skipped elements, how many, the last such sweep, how many; -1, 0:
        #: none), the numbers NumPy's ``kernels.SKIPPED`` and warning report
        self.skips: list[tuple[list[str], Any]] = []
        #: per loop: what its carry holds (``jax_carry.Carry.summary``)
        self.carried: list[dict[str, int]] = []

    def _start(self, shapes: list[tuple[tuple[int, ...], ...]]) -> dict[str, Any]:
        """The monitor before the first sweep, for watched posteriors whose parameters
        have ``shapes`` (their distinct elements; the previous values are read only
        once there are some: ``has_prev``)."""
        etas = tuple(tuple(jnp.zeros(s) for s in shape) for shape in shapes)
        return {
            "count": jnp.asarray(0), "has_prev": jnp.asarray(False), "prev": etas,
            "has_step": jnp.asarray(False),
            "steps": tuple(jnp.zeros(sum(int(np.prod(s)) for s in shape))
                           for shape in shapes),
            "turns": jnp.zeros((len(etas), TURNS), bool), "n_turns": jnp.asarray(0),
            "change": jnp.asarray(jnp.inf), "moved": jnp.asarray(-1),
            "distance": jnp.asarray(jnp.inf), "settled": jnp.asarray(0),
            "fell_at": jnp.asarray(-1), "fell_step": jnp.asarray(0.0),
            "trace": jnp.zeros(self.capacity), "n_trace": jnp.asarray(0),
            "least": jnp.asarray(jnp.inf), "least_at": jnp.asarray(0),
            "stalled": jnp.asarray(False),
        }

    def _widen(self, shapes: list[tuple[tuple[int, ...], ...]]) -> None:
        """The monitor of an earlier loop, for a loop whose watched posteriors have
        ``shapes``: the previous values broadcast to the shapes both share; a step of
        another shape is not compared with the last one (as ``_Monitor``)."""
        m = dict(self.monitor or {})
        old = [tuple(jnp.shape(e) for e in eta) for eta in m["prev"]]
        both = [tuple(jnp.broadcast_shapes(a, b) for a, b in zip(o, n, strict=True))
                for o, n in zip(old, shapes, strict=True)]
        if both == old:
            return
        m["prev"] = tuple(tuple(jnp.broadcast_to(e, s) for e, s in zip(eta, shape,
                                                                         strict=True))
                          for eta, shape in zip(m["prev"], both, strict=True))
        m["steps"] = tuple(jnp.zeros(sum(int(np.prod(s)) for s in shape)) for shape in both)
        m["has_step"] = jnp.asarray(False)
        self.monitor = m

    def _observe(self, m: dict[str, Any], iteration: Any, etas: tuple,
                 value: Any) -> dict[str, Any]:
        """The monitor after sweep ``iteration`` (``_Monitor.__call__``, on device), from
        the watched posteriors' natural parameters ``etas`` (their distinct elements,
        laid out as the monitor's previous ones)."""
        m = dict(m)
        count = iteration + 1
        etas = tuple(tuple(jnp.broadcast_to(e, jnp.shape(o)) for e, o in zip(eta, old,
                                                                             strict=True))
                     for eta, old in zip(etas, m["prev"], strict=True))
        change, moved = jnp.asarray(0.0), jnp.asarray(-1)
        steps, turns = [], []
        for k, (eta, old) in enumerate(zip(etas, m["prev"], strict=True)):
            step = _step(eta, old) if eta else jnp.zeros(0)
            turns.append(jnp.nansum(step * m["steps"][k]) < 0)
            steps.append(step)
            d = _change(eta, old)
            # before the first sweep a posterior has no previous value: it moved infinitely
            d = jnp.where(m["has_prev"], d, jnp.inf)
            bigger = ~(d <= change) | ~m["has_prev"]
            change, moved = jnp.where(bigger, d, change), jnp.where(bigger, k, moved)
        if etas:
            # a step is compared with the last one once there is one (from the 3rd sweep)
            record = m["has_step"]
            ring = jnp.roll(m["turns"], -1, axis=1).at[:, -1].set(jnp.stack(turns))
            m["turns"] = jnp.where(record, ring, m["turns"])
            m["n_turns"] = m["n_turns"] + record.astype(int)
            m["has_step"] = m["has_step"] | m["has_prev"]
            m["steps"] = tuple(jnp.where(m["has_prev"], s, o)
                               for s, o in zip(steps, m["steps"], strict=True))
        if value is not None:
            value = jnp.asarray(value, float)
            n = m["n_trace"]
            if self.algorithm == "vmp":
                last = m["trace"][jnp.maximum(n - 1, 0)]
                step = value - last
                change = jnp.where(n > 0, _pmax(change, jnp.abs(step) / (1.0 + jnp.abs(value))),
                                   change)
                falls = (n > 0) & (step < -1e-9 * jnp.maximum(1.0, jnp.abs(value))) & (
                    m["fell_at"] < 0)
                m["fell_at"] = jnp.where(falls, count, m["fell_at"])
                m["fell_step"] = jnp.where(falls, step, m["fell_step"])
            m["trace"] = m["trace"].at[n].set(value)
            m["n_trace"] = n + 1
        prev_change = m["change"]
        rate = jnp.where((prev_change > 0) & (prev_change < jnp.inf), change / prev_change, 1.0)
        distance = jnp.where(rate < 1.0, change / (1.0 - rate),
                             jnp.where(change == 0, 0.0, jnp.inf))
        from factorflow.runtime.compiled import ROUNDING, STALL_SWEEPS
        shrank = (change < 0.999 * m["least"]) | ~jnp.isfinite(m["least"])
        least = jnp.where(shrank, change, m["least"])
        least_at = jnp.where(shrank, count, m["least_at"])
        stalled = jnp.asarray(self.stall) & (count - least_at >= STALL_SWEEPS)
        if self.tolerance is None:
            settled = jnp.asarray(False)
        else:
            settled = (distance <= self.tolerance) | (change <= ROUNDING)
        settled = jnp.where(settled, m["settled"] + 1, 0)
        # the noise floor below the tolerance: nothing more to gain (``_Monitor``)
        floor = stalled & (change <= (0.0 if self.tolerance is None else self.tolerance))
        m.update(count=count, has_prev=jnp.asarray(True), prev=etas, change=change,
                 moved=moved, distance=distance, least=least, least_at=least_at,
                 settled=jnp.where(floor, 2, settled), stalled=stalled & ~floor)
        return m

    def __call__(self, sweep: Callable, state: tuple, iterations: int,
                 posteriors: Callable, evidence: Callable | None,
                 after: Callable | None = None, settled: bool = False) -> tuple:
        """Run ``sweep`` from ``state`` (see the module docstring); the final state.
        ``after``: the program's ``evidence``, where the code after this loop is its
        call and the user's posteriors (so that the loop carries only what those and
        the sweeps read: ``jax_carry``); None: a later loop may read any message.
        ``settled``: ``sweep`` takes ``refreshed`` (whether ``evidence`` ran since the
        last sweep; True, it skips the statements whose values evidence() computed, as
        the NumPy program's ``if not refreshed:``).  Where the bound follows every sweep
        (``tracing``) the first sweep is traced with it False and runs before the
        ``lax.while_loop``, whose body is the sweep traced with it True: the same
        statements on the same values as NumPy's loop, each choice made when traced."""
        base = namespace()["factorflow.distributions.base"]
        names: list[str] = []  # the checks' names, in the order they run
        skip_names: list[str] = []  # the skip_improper updates' names, likewise
        shapes: list[tuple[tuple[int, ...], ...]] = []  # the watched parameters'
        # the first sweep apart (refreshed False), the loop's after evidence() (True)
        peel = (settled and self.skip_refreshed and evidence is not None and self.tracing
                and iterations > 0)

        def one(iteration: Any, s: tuple, refreshed: bool = False) -> tuple[tuple, Any]:
            """A sweep, then the bound; what the loop keeps besides the state."""
            with CHECKS.frame() as found:
                new = sweep(iteration, s, refreshed) if settled else sweep(iteration, s)
                user, internal = posteriors(new)
                value = None
                if evidence is not None and self.tracing:
                    value, new = evidence(new)
                    value = bound_value(value)  # (its terms summed: jax_bound)
                ok = found.verdicts()
            # the convergence test reads each posterior's distinct elements (a gate's
            # clone of K components over N data: the K), as ``_Monitor`` does; without a
            # tolerance nothing reads the changes, which are not computed (``_Monitor``)
            seen = watched(self.algorithm, user, internal) if self.tolerance is not None \
                else {}
            etas = tuple(tuple(jnp.asarray(base.distinct(e), float) for e in d.eta)
                         for d in seen.values())
            names[:] = [what for what, _ in found]
            skip_names[:] = [what for what, _ in found.skips]
            shapes[:] = [tuple(jnp.shape(e) for e in eta) for eta in etas]
            counts = (jnp.stack([c for _, c in found.skips]) if found.skips
                      else jnp.zeros(0, int))
            return _materialised(new), (etas, value, ok, counts)

        state = _settle_shapes(_materialised(state),
                               lambda s: one(jnp.asarray(0), s)[0])
        if peel:  # (the loop's sweeps too may lay a message out over more plates)
            checks = (list(names), list(skip_names))
            state = _settle_shapes(state, lambda s: one(jnp.asarray(1), s, True)[0])
            # both sweeps must make the same checks, which the loop keeps by position
            # (so they do, the checks of skipped posteriors being outside what is
            # skipped, as in the NumPy program): else every sweep runs everything
            peel = checks == (names, skip_names)
        leaves, tree = jax.tree_util.tree_flatten(state)
        leaves = [v if isinstance(v, jax.Array) else jnp.asarray(v) for v in leaves]

        def step(iteration: Any, full: list[Any], refreshed: bool = peel
                 ) -> tuple[list[Any], Any]:
            new, kept = one(iteration, jax.tree_util.tree_unflatten(tree, full), refreshed)
            new = jax.tree_util.tree_leaves(new)
            return [_laid_out(a, ref) for a, ref in zip(new, full, strict=True)], kept

        def rest(full: list[Any]) -> Any:
            s = jax.tree_util.tree_unflatten(tree, full)
            assert after is not None
            with CHECKS.frame():  # traced for what it reads only: its checks run later
                return bound_value(after(s)[0]), posteriors(s)[0]

        def advance(loop: tuple, new: list[Any], kept: tuple) -> tuple:
            """The loop's values after the sweep ``loop[0]`` that gave ``new``, ``kept``
            (the state still whole)."""
            iteration, _, m, bad, skips = loop
            etas, value, ok, counts = kept
            bad = jnp.where((bad < 0) & ~ok, iteration, bad)
            if skip_names:
                skips = _skipped(skips, iteration, counts)
            m = self._observe(m, iteration, etas, value)
            return iteration + 1, new, m, bad, skips

        first = None
        if peel:
            new, kept = step(jnp.asarray(0), leaves, False)
            first = (new, kept)
            leaves = new
        carry = Carry(leaves, step, rest if after is not None else None)
        self.carried.append(carry.summary())
        self.names = list(watched(self.algorithm, *posteriors(state))
                          ) if self.tolerance is not None else []
        if self.monitor is None:
            self.monitor = self._start(shapes)
        else:
            self._widen(shapes)

        def body(loop: tuple) -> tuple:
            iteration, small = loop[:2]
            new, kept = step(iteration, carry.unpack(small))
            out = advance(loop, new, kept)
            return (out[0], carry.pack(out[1]), *out[2:])

        def cond(loop: tuple) -> Any:
            iteration, _, m, bad, _ = loop
            limit = iterations if self.limit is None else self.limit
            return ((iteration < limit) & (m["settled"] < 2) & ~m["stalled"]
                    & jnp.all(bad < 0))

        skips = jnp.tile(jnp.asarray([-1, 0, -1, 0]), (len(skip_names), 1))
        monitor = dict(self.monitor)
        # the monitor's settled count starts afresh in each loop (it stops at 2)
        monitor["settled"] = jnp.asarray(0)
        start = (jnp.asarray(0), carry.pack(leaves), monitor, -jnp.ones(len(names), int),
                 skips)
        if first is not None:  # the first sweep, run before the loop
            out = advance((jnp.asarray(0), None, *start[2:]), *first)
            start = (out[0], carry.pack(out[1]), *out[2:])
        _, small, self.monitor, bad, skips = jax.lax.while_loop(cond, body, start)
        self.failures.append((names, bad))
        self.skips.append((skip_names, skips))
        return jax.tree_util.tree_unflatten(tree, carry.unpack(small))

    def outputs(self) -> dict[str, Any]:
        """What the host needs after the run: the monitor and the checks' failures."""
        return {"monitor": self.monitor, "failures": tuple(b for _, b in self.failures),
                "skips": tuple(s for _, s in self.skips)}


def _skipped(skips: Any, iteration: Any, counts: Any) -> Any:
    """The skip records (see ``Sweeps.skips``) after a sweep that skipped ``counts``
    elements per update."""
    now = counts > 0
    first = now & (skips[:, 0] < 0)
    return jnp.stack([jnp.where(first, iteration, skips[:, 0]),
                      jnp.where(first, counts, skips[:, 1]),
                      jnp.where(now, iteration, skips[:, 2]),
                      jnp.where(now, counts, skips[:, 3])], axis=1)


def report_skips(names: list[list[str]], skips: tuple) -> dict[str, tuple[int, int]]:
    """The EP updates skipped on the device, as NumPy's ``skip_improper`` reports them:
    one ``ImproperMessageWarning`` per update name, at the first sweep that skipped it
    (in the order the sweeps ran them), and the table ``kernels.SKIPPED`` holds after the
    run (name -> (the last sweep that skipped it, the elements skipped then)), which
    the monitor's verdict reads."""
    from factorflow.runtime.kernels import skipped_warning
    first: list[tuple[int, int, int, str, int]] = []
    last: dict[str, tuple[int, int]] = {}
    for k, (loop_names, records) in enumerate(zip(names, skips, strict=True)):
        for j, (what, (at, count, last_at, last_count)) in enumerate(
                zip(loop_names, np.asarray(records).tolist(), strict=True)):
            if at >= 0:
                first.append((k, at, j, what, count))
                if what not in last or last[what][0] <= last_at:
                    last[what] = (last_at, last_count)
    warned: set[str] = set()
    for _, at, _, what, count in sorted(first):
        if what not in warned:
            warned.add(what)
            warnings.warn(skipped_warning(what, count, at), stacklevel=4)
    return last


def raise_failures(names: list[list[str]], failures: tuple, before: list[str],
                   passed: Any) -> None:
    """ImproperMessageError for the first check that failed: before the loops
    (``before``/``passed``), or in a loop at the first sweep where one did."""
    for what, ok in zip(before, np.asarray(passed, bool).reshape(-1), strict=True):
        if not ok:
            raise ImproperMessageError(
                f"{what} needs a proper message, got an improper or uniform one before the "
                "first iteration (JAX backend: checked on the device). Give the variables "
                "around it proper priors, or initialise them (init=...).")
    for loop_names, bad in zip(names, failures, strict=True):
        bad = np.asarray(bad)
        if bad.size and np.any(bad >= 0):
            first = int(np.min(bad[bad >= 0]))
            what = loop_names[int(np.flatnonzero(bad == first)[0])]
            raise ImproperMessageError(
                f"{what}, at iteration {first + 1} is improper (JAX backend: checked on "
                "the device after the sweep). Give the variable a proper prior, observe "
                "more data, or initialise its messages (init=...).")


def to_monitor(monitor: Any, names: list[str], out: dict[str, Any]) -> None:
    """Copy the device monitor's numbers ``out`` into the host ``_Monitor``."""
    count = int(out["count"])
    if count == 0:
        return
    monitor.count = count
    monitor.change = float(out["change"])
    moved = int(out["moved"])
    monitor.moved = names[moved] if 0 <= moved < len(names) else ""
    monitor.distance = float(out["distance"])
    monitor.settled = int(out["settled"])
    monitor.least = (float(out["least"]), int(out["least_at"]))
    monitor.stalled = bool(out["stalled"])
    monitor.trace = [float(v) for v in np.asarray(out["trace"])[: int(out["n_trace"])]]
    if int(out["fell_at"]) >= 0:
        monitor.fell = (int(out["fell_at"]), float(out["fell_step"]))
    n = min(int(out["n_turns"]), TURNS)
    turns = np.asarray(out["turns"])
    monitor.turns = {name: [bool(t) for t in turns[k, TURNS - n:]]
                     for k, name in enumerate(names)} if n else {}


__all__ = ["Sweeps", "CHECKS", "raise_failures", "report_skips", "to_monitor"]
