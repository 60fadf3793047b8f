"""The convergence test of a Dask run, with the per-datum posteriors' changes reduced on
the workers.

The NumPy backend's monitor (``runtime.compiled._Monitor``) compares every watched
posterior's natural parameters (``compiled.watched``: the user's posteriors, under EP
also the gate transform's own) with the last sweep's, element by element, in this
process: for a per-datum posterior of a Dask run (q(z) of a mixture, an (N, K) chunked
Dask array) that would gather the whole array here every sweep (800 MB at N = 10⁷,
K = 10) and keep two copies of it.  ``ChunkedChanges`` replaces the monitor's
``_changes`` for the run: the posteriors whose parameters are NumPy arrays go to the
monitor's own method as they are; for each chunked one it builds, before the monitor
reads them, lazy Dask scalars from this sweep's parameters and the last two sweeps'
(lazy too: each recomputed chunk by chunk from the data and that sweep's NumPy globals,
never stored):

- the largest relative change max |Δη| / (1 + |η_old|) of each natural parameter (Δη =
  η − η_old, 0 where both are the same infinity), a maximum per chunk and then over the
  chunks;
- the dot product of this sweep's step with the last one (NaN terms counting 0), the
  monitor's test of a step reversing the one before (its oscillation hint).

These are computed in the same round trip as the bound and the pending checks (the
backend's ``_with_checks``), so the convergence test costs no pass over the data of its
own and brings back a few floats.  The monitor's verdicts are the NumPy backend's: the
same numbers, the same rule for the variable that moved most (NaN counts as the
largest, a posterior seen for the first time as an infinite change).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _is_dask(a: Any) -> bool:
    import dask.array as da
    return isinstance(a, da.Array)


def chunked(posterior: Any) -> bool:
    """Whether ``posterior`` has a natural parameter that is a Dask array (per datum,
    left lazy on the cluster)."""
    return any(_is_dask(e) for e in getattr(posterior, "eta", ()) or ())


def _shapes(eta: tuple[Any, ...]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(np.shape(e)) for e in eta)


def _step(new: Any, old: Any) -> Any:
    """new − old, 0 where they are equal (the same infinity: a point mass not moved)."""
    return np.where(new == old, 0.0, new - old)


class ChunkedChanges:
    """The ``_changes`` of a run's monitor (see the module doc): ``prepare(watched)``
    gives the lazy Dask scalars of this sweep's changes, ``receive(values)`` takes their
    computed values, and the monitor's call (``__call__``) returns the change and the
    variable that made it, as ``_Monitor._changes`` does."""

    def __init__(self, monitor: Any) -> None:
        self.monitor = monitor
        self.own = monitor._changes  # (the monitor's method: its NumPy posteriors)
        #: each chunked posterior's parameters after the last sweep, and the sweep before
        self.last: dict[str, tuple[Any, ...]] = {}
        self.before: dict[str, tuple[Any, ...]] = {}
        #: this sweep's lazy scalars: name -> (peaks per parameter, dot or None), or None
        #: for a posterior with no last sweep of its shape (an infinite change)
        self._plan: dict[str, tuple[int, int, bool] | None] = {}
        self._values: list[float] = []

    def watching(self) -> bool:
        """Whether the monitor reads the changes (a tolerance or a progress bar)."""
        return self.monitor.tolerance is not None or self.monitor.bar is not None

    def prepare(self, watched: dict[str, Any]) -> list[Any]:
        """The lazy Dask scalars of the changes of ``watched``'s chunked posteriors since
        the last sweep (each parameter's largest relative change, then the dot product of
        the step with the last one where there was one)."""
        out: list[Any] = []
        self._plan = {}
        for name, post in watched.items():
            if not chunked(post):
                continue
            eta, old = tuple(post.eta), self.last.get(name)
            if old is None or _shapes(old) != _shapes(eta):
                self._plan[name] = None
                continue
            at = len(out)
            steps = [_step(e, o) for e, o in zip(eta, old, strict=True)]
            for s, o in zip(steps, old, strict=True):
                out.append(np.max(np.abs(s) / (1.0 + np.abs(o))) if s.size
                           else np.float64(0.0))
            older = self.before.get(name)
            dot = older is not None and _shapes(older) == _shapes(eta)
            if dot:
                out.append(sum(np.nansum(s * _step(o, b)) for s, o, b
                               in zip(steps, old, older, strict=True)))
            self._plan[name] = (at, len(eta), dot)
        return out

    def receive(self, values: Any) -> None:
        """The computed values of ``prepare``'s scalars, in its order."""
        self._values = [float(v) for v in values]

    def __call__(self, watched: dict[str, Any]) -> tuple[float, str]:
        """The monitor's ``_changes``: the largest relative change of ``watched`` and the
        posterior that made it; the chunked posteriors' from the values received, the
        others' by the monitor's own method."""
        change, moved = self.own({k: v for k, v in watched.items() if not chunked(v)})
        for name, post in watched.items():
            if not chunked(post):
                continue
            plan = self._plan.get(name)
            if plan is None:  # a posterior not seen before (or of another shape)
                change, moved = np.inf, name
            else:
                at, n, dot = plan
                d = max(self._values[at: at + n], default=0.0)
                if dot:
                    self.monitor.turns.setdefault(name, []).append(
                        bool(self._values[at + n] < 0))
                if not d <= change:  # NaN counts as the largest change
                    change, moved = d, name
            self.before[name] = self.last.get(name)
            self.last[name] = tuple(post.eta)
        self._plan, self._values = {}, []
        return change, moved


__all__ = ["ChunkedChanges", "chunked"]
