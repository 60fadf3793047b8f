"""The convergence monitor's changes, computed on one flat array of every watched
posterior's natural parameters once per sweep (``_Monitor._changes``), against the
per-posterior computation it replaced (the oracle below, the code as it was): the same
largest change, the same posterior named, the same steps and previous values, bit for
bit; the same oscillation verdicts (the signs of dot products summed in another order:
equal where they are not within rounding of 0, as here)."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from factorflow.distributions import Gamma, Gaussian
from factorflow.factors.common import collapsed
from factorflow.runtime.compiled import _Monitor, _relative, _step


class Oracle:
    """The monitor's per-posterior loop before the flat arrays (verbatim)."""

    def __init__(self) -> None:
        self.previous: dict = {}
        self.steps: dict = {}
        self.turns: dict = {}

    def __call__(self, watched: dict) -> tuple[float, str]:
        change, moved = 0.0, ""
        for name, post in watched.items():
            eta = tuple(np.array(collapsed(np.asarray(e, dtype=float))) for e in post.eta)
            old = self.previous.get(name)
            if old is None:
                change, moved = np.inf, name
            else:
                diffs = [_step(a, b) for a, b in zip(eta, old, strict=True)]
                step = np.concatenate([np.ravel(s) for s in diffs]) if len(diffs) > 1 \
                    else np.ravel(diffs[0])
                last = self.steps.get(name)
                if last is not None and last.shape == step.shape:
                    with np.errstate(invalid="ignore", over="ignore"):
                        dot = np.dot(step, last)
                        if np.isnan(dot):
                            dot = np.nansum(step * last)
                    self.turns.setdefault(name, []).append(bool(dot < 0))
                self.steps[name] = step
                d = max((_relative(s, b) for s, b in zip(diffs, old, strict=True)),
                        default=0.0)
                if not d <= change:
                    change, moved = d, name
            self.previous[name] = eta
        return change, moved


#: one sweep's posterior: its family, batch shape, whether it is a broadcast view of
#: its first row (a gate's clone), and its values
_values = st.floats(-4.0, 4.0, allow_nan=False) | st.sampled_from([0.0, np.inf, -np.inf,
                                                                    np.nan])


@st.composite
def sweeps(draw: st.DrawFn) -> list[dict]:
    names = draw(st.lists(st.sampled_from("abcde"), min_size=1, max_size=4, unique=True))
    shapes = {n: draw(st.sampled_from([(), (3,), (4, 3), (0,)])) for n in names}
    out = []
    for _ in range(draw(st.integers(1, 7))):
        watched = {}
        for n in names:
            if shapes[n] != (0,) and draw(st.booleans()) and draw(st.booleans()):
                # now and then another shape (one that broadcasts against the last)
                shapes[n] = draw(st.sampled_from([(), (3,), (4, 3)]))
            shape = shapes[n]
            size = int(np.prod(shape))
            a = np.array(draw(st.lists(_values, min_size=size, max_size=size))).reshape(shape)
            # (now and then NaN in the second parameter too: ``max`` over the parameters'
            # largest changes keeps the first parameter's where the second's is NaN)
            b = np.array(draw(st.lists(st.floats(0.5, 3.0) | st.just(np.nan),
                                       min_size=size, max_size=size))).reshape(shape)
            family = Gaussian if n in "ace" else Gamma
            post = family.from_natural(a, b)
            if len(shape) == 2 and draw(st.booleans()):  # a broadcast view of one row
                post = post[:1].broadcast_to(shape)
            watched[n] = post
        out.append(watched)
    return out


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


@settings(max_examples=150, deadline=None)
@given(sweeps(), st.integers(0, 6))
def test_the_flat_changes_are_the_per_posterior_changes(runs, resume_at):
    monitor, oracle = _Monitor("vmp", 1e-10, None), Oracle()
    for i, watched in enumerate(runs):
        if i == resume_at:  # a checkpoint saved and loaded: the dicts set again
            saved = {k: copy.deepcopy(getattr(monitor, k)) for k in ("previous", "steps")}
            for k, v in saved.items():
                setattr(monitor, k, v)
        with np.errstate(all="ignore"):
            got = monitor._changes(watched)
            want = oracle(watched)
        assert got[1] == want[1]
        assert got[0] == want[0] or (np.isnan(got[0]) and np.isnan(want[0]))
        assert monitor.previous.keys() == oracle.previous.keys()
        for name, eta in oracle.previous.items():
            assert all(_same(a, b) for a, b in zip(monitor.previous[name], eta, strict=True))
        assert monitor.steps.keys() == oracle.steps.keys()
        assert all(_same(monitor.steps[n], s) for n, s in oracle.steps.items())
        assert monitor.turns == oracle.turns


def _mixture():
    import sys
    from pathlib import Path
    sys.path.append(str(Path(__file__).resolve().parents[2]))
    from benchmarks import mixture_reference as mix
    x = mix.data(3, 60, seed=2)
    return mix.model(x, 3).compile("vmp", init=["means"]), mix.factorflow_init(x, 3)


def _oracle_changes():
    """A ``_Monitor._changes`` that computes with an ``Oracle`` of its own per monitor."""
    oracles: dict[int, Oracle] = {}

    def changes(self, watched):
        oracle = oracles.setdefault(id(self), Oracle())
        out = oracle(watched)
        self.turns = oracle.turns
        return out
    return changes


def _converge(compiled, init, monkeypatch, flat: bool) -> tuple:
    """Run to convergence, with the flat monitor or the oracle in its place: the
    sweeps, the verdict, the monitor's last change, what moved, the turns, the means
    and the bound."""
    monitors: list[_Monitor] = []
    original = _Monitor.finish
    changes = _oracle_changes()

    def finish(self, *args, **kwargs):
        monitors.append(self)
        return original(self, *args, **kwargs)
    with monkeypatch.context() as mp:
        if not flat:
            mp.setattr(_Monitor, "_changes", changes)
        mp.setattr(_Monitor, "finish", finish)
        result = compiled.run(init=init, progress=False)
    m = monitors[-1]
    return (result.iterations, result.converged, m.change, m.moved, m.turns,
            result["means"].mean.tolist(), result.log_evidence)


def test_runs_stop_where_the_per_posterior_monitor_stopped(monkeypatch):
    """Whole runs to convergence (the mixture: its gate's clones are broadcast views)
    with the flat monitor and with the oracle in its place: the same sweeps, verdict,
    last change and the posterior that made it."""
    compiled, init = _mixture()
    flat = _converge(compiled, init, monkeypatch, True)
    assert flat == _converge(compiled, init, monkeypatch, False)
    assert flat[1] and flat[0] > 20


def _gallery(name: str) -> tuple:
    """A small model of the gallery compiled, its init and run options: the default run
    (learning a Gaussian, TrueSkill, the sprinkler network, an HMM, the mixture), and
    one stopped by ``iterations`` with the log evidence traced."""
    import sys
    from pathlib import Path
    sys.path.append(str(Path(__file__).resolve().parents[2] / "examples"))
    import learning_gaussian

    from tests.runtime import handwritten as hw
    if name == "gaussian-vmp":
        x = np.random.default_rng(1).normal(3.0, 2.0, 50)
        return learning_gaussian.build(x).compile("vmp"), None, {}
    if name.startswith("trueskill"):
        winner, loser = hw.trueskill_games(20, 300)
        options = {"iterations": 30, "trace": True} if name.endswith("traced") else {}
        return hw.trueskill_model(20, winner, loser).compile("ep"), None, options
    if name == "sprinkler-ep":
        return hw.sprinkler_model().compile("ep"), None, {}
    if name == "hmm-vmp":
        return hw.hmm_model(*hw.hmm_data(40)).compile("vmp"), None, {}
    return (*_mixture(), {})


def _sweeps(compiled, init, options, monkeypatch, flat: bool) -> tuple:
    """A run with the flat monitor or the oracle in its place: after every sweep the
    user's posteriors' natural parameters, the bound or log evidence traced, the change
    and what moved, and the verdict; then the result and the warnings."""
    sweeps: list[tuple] = []
    call = _Monitor.__call__
    changes = _oracle_changes()

    def record(self, iteration, posteriors, *args, **kwargs):
        stop = call(self, iteration, posteriors, *args, **kwargs)
        sweeps.append((iteration, {k: [np.array(e).tolist() for e in v.eta]
                                   for k, v in posteriors.items()},
                       list(self.trace), self.change, self.moved, stop,
                       {k: list(v) for k, v in self.turns.items()}))
        return stop
    with monkeypatch.context() as mp, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if not flat:
            mp.setattr(_Monitor, "_changes", changes)
        mp.setattr(_Monitor, "__call__", record)
        result = compiled.run(init=init, progress=False, **options)
    return (sweeps, result.iterations, result.converged, result.log_evidence,
            [str(w.message) for w in caught])


GALLERY = ("gaussian-vmp", "trueskill-ep", "trueskill-ep-traced", "sprinkler-ep", "hmm-vmp",
           "mixture-vmp")


@pytest.mark.parametrize("name", GALLERY)
def test_gallery_runs_sweep_for_sweep_as_with_the_per_posterior_monitor(name, monkeypatch):
    """Small gallery models run with the flat monitor and with the per-posterior
    computation it replaced (the oracle, verbatim) in its place: after every sweep the
    same posteriors and bound (the monitor reads them, it changes nothing), the same
    change, posterior named, turns and verdict; the same sweeps run, result and
    warnings (compared with ==: NaN would fail, and none is expected)."""
    compiled, init, options = _gallery(name)
    flat = _sweeps(compiled, init, options, monkeypatch, True)
    assert flat == _sweeps(compiled, init, options, monkeypatch, False)
    assert len(flat[0]) >= flat[1] > 2  # (more: an EP run restarted with damping)


@pytest.mark.parametrize("name", ("gaussian-vmp", "hmm-vmp", "mixture-vmp",
                                  "trueskill-ep-traced"))
def test_the_final_bound_is_the_one_computed_afresh(name):
    """The run's final bound is the hook's after the last sweep (the generated program
    does not compute it again): the same number, bit for bit, as a run without the trace,
    whose end computes it afresh from the state the last sweep left; for runs stopped
    by ``iterations`` and by the convergence test, and for one of no sweep."""
    compiled, init, _ = _gallery(name)
    source = compiled.source
    assert "known_bound[1] if known_bound is not None and known_bound[0] == iteration" \
        in source
    for options in ({"iterations": 7, "tolerance": None}, {}):
        traced = compiled.run(init=init, progress=False, trace=True, **options)
        afresh = compiled.run(init=init, progress=False, trace=False,
                              **{**options, "iterations": traced.iterations,
                                 "tolerance": None})
        assert traced.trace[-1] == traced.log_evidence == afresh.log_evidence
        assert traced.iterations == afresh.iterations
    if init is None:  # (no sweep: the initialisation's bound, computed at the end)
        none = compiled.run(iterations=0, progress=False, trace=True)
        assert none.trace == () and np.isfinite(none.log_evidence)
