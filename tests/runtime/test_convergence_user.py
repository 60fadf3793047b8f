"""The convergence test watches what the user reads (``runtime.compiled.watched``): under
VMP the user's posteriors and the bound, so that a run stopped by ``tolerance`` stops at
the same sweep however the program was compiled (the fused Switch, the default on NumPy,
or the gate path) and on every backend (Dask keeps the gate path); under EP also
the gate transform's own posteriors, without which a nested Switch stops two sweeps
early with a posterior at its prior (``test_ep_needs_the_gate_s_own_posteriors``)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import factorflow as ff
from benchmarks import mixture_reference as mix
from factorflow.runtime import compiled as compiled_module
from factorflow.runtime.compiled import ROUNDING, watched
from tests.conftest import assert_close
from tests.oracle import models
from tests.oracle.build import build
from tests.oracle.checks import _statistics as oracle_statistics

NAMES = ("weights", "means", "precs", "z")


# ----- the rule ----------------------------------------------------------------------------
def test_the_rule():
    """VMP: the user's posteriors alone; EP: the gate transform's own too."""
    user, internal = {"z": 1}, {"v_means__k_cond_z_n": 2}
    assert watched("vmp", user, internal) == user
    assert watched("ep", user, internal) == user | internal
    assert watched("ep", user, None) == user


# ----- EP: a nested Switch passes its message on while the user's posteriors stand still ---
def nested_switch() -> ff.Model:
    """g1 ~ N(2, 1); e4 ~ N(g1, 1) in every case of Switch(z3) inside Switch(z5) (identical
    cases: a tree); g6[n] ~ N(e4, 1), y7[n] ~ N(g6[n], 1) observed (0, 1.9, -1.1)."""
    with ff.Model("nested_switch") as model:
        g1 = ff.Gaussian("g1", 2.0, precision=1.0)
        z3 = ff.Discrete("z3", [0.667, 0.333])
        z5 = ff.Discrete("z5", [0.4, 0.6])
        with ff.Switch(z3):
            with ff.Switch(z5):
                e4 = ff.Gaussian("e4", g1, precision=1.0)
        with ff.Plate(ff.Range("n", 3)):
            g6 = ff.Gaussian("g6", e4, precision=1.0)
            ff.Gaussian("y7", g6, precision=1.0, observed=[0.0, 1.9, -1.1])
    return model


def _record(monkeypatch) -> list[tuple[float, float]]:
    """Each sweep's largest relative change of the user's posteriors and of the gate
    transform's own, as the monitor measures them (``_Monitor._changes``); a program of
    several loops (one after the other) appends each loop's sweeps."""
    changes: list[tuple[float, float]] = []
    call = compiled_module._Monitor.__call__
    users, owns = compiled_module._Monitor("ep", 0.0, None), compiled_module._Monitor(
        "ep", 0.0, None)

    def recording(self, iteration, posteriors, evidence, state=None, internal=None):
        if iteration == 0:  # (a loop's first sweep: its changes start afresh)
            changes.append((np.inf, np.inf))
            users._changes(posteriors), owns._changes(internal or {})
        else:
            changes.append((users._changes(posteriors)[0], owns._changes(internal or {})[0]))
        return call(self, iteration, posteriors, evidence, state, internal)
    monkeypatch.setattr(compiled_module._Monitor, "__call__", recording)
    return changes


def test_ep_needs_the_gate_s_own_posteriors(monkeypatch):
    """Under EP the user's posteriors stand still (changes within rounding) in sweeps 6
    and 7 while the per-case values of e4 move (0.3), and move again at sweep 8: watching
    the user's alone would stop at sweep 7 with g1 at its prior N(2, 1).  EP watches the
    gate's own too, and stops at the exact answer: y[n] = g1 + u + v[n] with u ~ N(0, 1)
    and v[n] ~ N(0, 2), so g1 | y ~ N(2 + Σ(y − 2) / 8, 1 − 3 / 8) = N(1.35, 0.625)."""
    model = nested_switch()
    changes = _record(monkeypatch)
    result = model.infer("ep", tolerance=1e-6, progress=False)
    assert result.converged
    assert_close(result["g1"].mean, 1.35, rtol=1e-9)
    assert_close(result["g1"].variance, 0.625, rtol=1e-9)
    quiet = [t + 1 for t, (user, own) in enumerate(changes) if user <= ROUNDING < own]
    assert quiet[:2] == [6, 7] and changes[7][0] > 0.1  # (sweep 8 moves g1)
    # the VMP rule under EP: the run stops in the quiet sweeps, at the prior
    monkeypatch.setattr(compiled_module, "watched", lambda algorithm, user, internal: user)
    early = model.infer("ep", tolerance=1e-6, progress=False)
    assert early.iterations < result.iterations
    assert_close(early["g1"].mean, 2.0, rtol=1e-12)
    assert_close(early["g1"].variance, 1.0, rtol=1e-12)


def test_vmp_stops_on_the_nested_switch_with_either_rule(monkeypatch):
    """The same model under VMP: the gate's own posteriors move with the user's (each is
    recomputed from them every sweep), and a run watching them too stops at the same
    sweep with the same posteriors."""
    model = nested_switch()
    changes = _record(monkeypatch)
    user = model.infer("vmp", tolerance=1e-8, progress=False)
    assert user.converged
    assert not any(u <= ROUNDING < own for u, own in changes)
    monkeypatch.setattr(compiled_module, "watched",
                        lambda algorithm, user, internal: user | (internal or {}))
    both = model.infer("vmp", tolerance=1e-8, progress=False)
    assert both.iterations == user.iterations
    for a, b in zip(both["g1"].eta, user["g1"].eta, strict=True):
        assert_close(a, b, rtol=1e-14)
    assert_close(user["g1"].mean, 1.35, rtol=1e-6)  # (VMP's mean is EP's, exact)


# ----- VMP on random gated models: the user's watch stops as near the fixed point -----------
def _statistics(result: Any) -> dict[str, np.ndarray]:
    """Each posterior's probabilities, or its means and variances (the oracle's)."""
    return {name: oracle_statistics(result[name]) for name in result.posteriors}


def _error(result: Any, reference: dict[str, np.ndarray]) -> float:
    got = _statistics(result)
    return max((float(np.max(np.abs(got[k] - v) / (1.0 + np.abs(v)), initial=0.0))
                for k, v in reference.items()), default=0.0)


@pytest.mark.slow
@settings(max_examples=20, derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(st.one_of(models.linear_gaussian(gated=True), models.discrete(nested=True)),
       st.sampled_from([1e-3, 1e-5, 1e-8]))
def test_vmp_watching_the_user_s_posteriors_stops_as_near_the_fixed_point(spec, tolerance):
    """Random gated models of the oracle (linear-Gaussian with Switch/Case/If, nested
    discrete gates) under VMP: once the user's posteriors have stood still (within
    rounding) for two sweeps in a row, the gate's own stand still too and nothing moves
    in later sweeps (a gate's own posterior may lag the user's by one sweep, which is
    why the test asks two); and a run watching the user's posteriors stops no later and
    no farther from the fixed point (a run to 1e-14) than one watching the gate's own
    too (or within 10 x the tolerance)."""
    model, _ = build(spec)
    try:
        model.compile("vmp")
    except ff.ModelError:  # (a model VMP refuses by name)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fixed = model.infer("vmp", tolerance=1e-14, iterations=3000, progress=False)
        reference = _statistics(fixed)
        with pytest.MonkeyPatch.context() as patch:
            changes = _record(patch)
            model.infer("vmp", tolerance=None, iterations=fixed.iterations + 10,
                        progress=False)
        starts = [t for t, c in enumerate(changes) if c[0] == np.inf] + [len(changes)]
        for start, end in zip(starts, starts[1:], strict=False):  # each loop's sweeps
            quiet = [t for t in range(start + 2, end)
                     if max(changes[t - 1][0], changes[t][0]) <= ROUNDING]
            for t in quiet:
                assert changes[t][1] <= ROUNDING, (t, changes[t])
                assert max(u for u, _ in changes[t:end]) <= 1e-10, (t, changes[t:end])
        user = model.infer("vmp", tolerance=tolerance, iterations=3000, progress=False)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(compiled_module, "watched",
                          lambda algorithm, user, internal: user | (internal or {}))
            both = model.infer("vmp", tolerance=tolerance, iterations=3000, progress=False)
    assert user.iterations <= both.iterations
    assert _error(user, reference) <= max(10 * _error(both, reference), 10 * tolerance)


# ----- the mixture: fused (NumPy's default) and gate path stop at the same sweep -----------
def _mixture_run(x: np.ndarray, k: int, tolerance: Any, priors: mix.Priors | None = None,
                 **compile_options: Any) -> ff.Result:
    compiled = mix.model(x, k, priors or mix.Priors()).compile("vmp", init=["means"],
                                                               **compile_options)
    options: dict[str, Any] = {} if tolerance == "default" else {"tolerance": tolerance}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ff.ConvergenceWarning)
        return compiled.run(init=mix.factorflow_init(x, k), progress=False, **options)


def _same(a: ff.Result, b: ff.Result) -> None:
    """The same sweep, posteriors (natural parameters) and bound to 1e-10."""
    assert a.iterations == b.iterations
    assert a.converged == b.converged
    for name in NAMES:
        for p, q in zip(a[name].eta, b[name].eta, strict=True):
            assert_close(np.asarray(p), np.asarray(q), rtol=1e-10, atol=1e-10)
    assert_close(a.log_evidence, b.log_evidence, rtol=1e-10, atol=1e-9)


@st.composite
def mixtures(draw):
    """(x, K, priors, tolerance): a small mixture and a tolerance-stopped run."""
    k = draw(st.integers(1, 5))
    n = draw(st.sampled_from([1, 5, 17, 37, 120, 300]))
    x = mix.data(k, n, draw(st.integers(0, 1000))) * draw(st.sampled_from([0.3, 1.0, 3.0]))
    priors = mix.Priors(alpha=draw(st.sampled_from([0.5, 1.0, 4.0])),
                        mean=draw(st.sampled_from([-2.0, 0.0, 5.0])),
                        var=draw(st.sampled_from([1.0, 100.0])),
                        shape=draw(st.sampled_from([0.5, 1.0, 3.0])),
                        rate=draw(st.sampled_from([0.2, 1.0, 5.0])))
    return x, k, priors, draw(st.sampled_from([1e-3, 1e-4, 1e-6, 1e-8, "default"]))


@settings(max_examples=40, deadline=None)
@given(mixtures())
def test_fused_default_and_gate_path_stop_at_the_same_sweep(case):
    """A tolerance-stopped default run (the fused Switch) and the gate path's
    (``fuse_switch=False``): the same sweep, posteriors and bound (1e-10)."""
    x, k, priors, tolerance = case
    fused = _mixture_run(x, k, tolerance, priors)
    assert "SwitchGaussian" in mix.model(x, k, priors).compile("vmp").source
    _same(fused, _mixture_run(x, k, tolerance, priors, fuse_switch=False))


@pytest.mark.parametrize("names", [(), ("means",), ("precs",), ("weights",),
                                   ("means", "precs"), ("means", "weights")])
def test_the_default_is_fused_and_sweeps_as_the_gate_path(names):
    """By default the Switch is fused whatever the user initialises (the fused program
    updates the components in the gate path's order: ``fuse_switch._gate_order``); the
    default run stops at the gate path's sweep with its posteriors (1e-10)."""
    k, n = 3, 37
    x = mix.data(k, n, 0)
    values = {"means": mix.factorflow_init(x, k)["means"],
              "precs": ff.distributions.Gamma(np.full(k, 2.0), rate=np.ones(k)),
              "weights": ff.distributions.Dirichlet(np.array([1.0, 2.0, 3.0]))}
    runs = []
    for options in ({}, {"fuse_switch": False}):
        compiled = mix.model(x, k).compile("vmp", init=list(names), **options)
        assert ("SwitchGaussian" in compiled.source) == (not options)
        runs.append(compiled.run(init={name: values[name] for name in names},
                                 tolerance=1e-8, progress=False))
    _same(*runs)


def test_fuse_switch_must_be_a_bool():
    """``fuse_switch=`` other than True or False is refused by name."""
    x = mix.data(2, 5, 0)
    with pytest.raises(ff.ModelError, match="fuse_switch must be True or False"):
        mix.model(x, 2).compile("vmp", fuse_switch=None)


#: (K, N, tolerance): the sweeps the fused path used to stop early at included
#: (37 points at 1e-6: 118 against 123 sweeps; 300 points at 1e-4: 29 against 30)
GRID = [(3, 37, 1e-6), (3, 300, 1e-4), (4, 120, 1e-8), (5, 60, "default")]


@pytest.mark.slow
@pytest.mark.parametrize("k, n, tolerance", GRID)
def test_jax_stops_where_numpy_does(k, n, tolerance):
    """JAX (fused too, the convergence test on device) against NumPy's default
    (fused): the same sweep, posteriors and bound (1e-10)."""
    pytest.importorskip("jax")
    x = mix.data(k, n, 1)
    _same(_mixture_run(x, k, tolerance, backend="jax"), _mixture_run(x, k, tolerance))


@pytest.mark.slow
@settings(max_examples=3, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(mixtures())
def test_jax_stops_where_numpy_does_on_generated_mixtures(case):
    pytest.importorskip("jax")
    x, k, priors, tolerance = case
    _same(_mixture_run(x, k, tolerance, priors, backend="jax"),
          _mixture_run(x, k, tolerance, priors))


@pytest.fixture(scope="module")
def client():
    pytest.importorskip("distributed")
    from factorflow.runtime.backends.dask_backend import default_client
    return default_client()


@pytest.mark.slow
@pytest.mark.parametrize("k, n, tolerance", [(3, 37, 1e-6)])
def test_dask_stops_where_numpy_does(k, n, tolerance, client):
    """Dask (the gate path, q(z) chunked, the changes reduced on the workers) against
    NumPy's default (fused): the same sweep, posteriors and bound (1e-10), on the case
    the fused path used to stop early at (37 points at 1e-6).  (A tolerance of 1e-4 is
    ``test_dask.py::test_convergence_test_reduces_on_the_workers``'s: 300 points against
    NumPy's default run, sweep by sweep.)"""
    x = mix.data(k, n, 1)
    compiled = mix.model(x, k).compile("vmp", init=["means"], backend="dask")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ff.ConvergenceWarning)
        got = compiled.run(init=mix.factorflow_init(x, k), tolerance=tolerance,
                           progress=False, client=client, chunks=(n + 1) // 2)
    _same(got, _mixture_run(x, k, tolerance))
