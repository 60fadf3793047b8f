"""Convergence: tolerance, the true iteration count, the trace, ConvergenceWarning."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import factorflow as ff
from tests.conftest import assert_close


def _learning_gaussian() -> ff.Model:
    with ff.Model("learning_gaussian") as model:
        mean = ff.Gaussian("mean", 0.0, variance=100.0)
        prec = ff.Gamma("prec", 1.0, rate=1.0)
        with ff.Plate(ff.Range("n", 2)):
            ff.Gaussian("x", mean, precision=prec, observed=[5.0, 7.0])
    return model


def test_a_converging_run_stops_early_and_says_so():
    with warnings.catch_warnings():
        warnings.simplefilter("error", ff.ConvergenceWarning)
        result = _learning_gaussian().infer("vmp", iterations=500)
    assert result.converged
    assert 2 <= result.iterations < 500
    assert len(result.trace) == result.iterations
    assert_close(result.trace[-1], result.log_evidence, rtol=0, atol=1e-12)
    assert all(b >= a - 1e-12 for a, b in zip(result.trace, result.trace[1:], strict=False))
    assert_close(result["mean"].mean, 5.9603207170807826, rtol=0, atol=1e-9)


def test_an_unconverged_run_warns_naming_the_variable():
    with pytest.warns(ff.ConvergenceWarning, match=r"not converged after 2 iterations.*'"):
        result = _learning_gaussian().infer("vmp", iterations=2)
    assert not result.converged and result.iterations == 2
    assert "not converged" in repr(result)


def test_tolerance_none_runs_every_sweep():
    compiled = _learning_gaussian().compile("vmp")
    result = compiled.run(iterations=30, tolerance=None)
    assert result.iterations == 30 and result.converged


def test_on_iteration_stops_and_the_count_is_true():
    seen = []
    result = _learning_gaussian().compile("vmp").run(
        iterations=50, on_iteration=lambda i, post: seen.append(i) or i == 3)
    assert seen == [0, 1, 2, 3] and result.iterations == 4


@pytest.mark.parametrize("bad", [-1, "x", np.nan, np.inf])
def test_bad_tolerance_is_refused(bad):
    with pytest.raises(ff.ModelError, match="tolerance"):
        _learning_gaussian().compile("vmp").run(tolerance=bad)


def test_ep_trueskill_converges_with_the_default_settings():
    """20 players, 500 games (issue 16): parallel EP contracts at 0.978 per sweep (the
    common shift of all skills is held only by the prior), so the default tolerance needs
    about 740 sweeps; the default run goes on until converged, without a warning."""
    rng = np.random.default_rng(0)
    players, games = 20, 500
    true = rng.normal(25, 5, players)
    a, b = rng.integers(0, players, games), rng.integers(0, players, games)
    keep = a != b
    a, b = a[keep], b[keep]
    perf_a = true[a] + rng.normal(0, 4, a.size)
    perf_b = true[b] + rng.normal(0, 4, b.size)
    winner, loser = np.where(perf_a > perf_b, a, b), np.where(perf_a > perf_b, b, a)
    with ff.Model("trueskill") as model:
        with ff.Plate(ff.Range("player", players)):
            skill = ff.Gaussian("skill", 25.0, variance=70.0)
        with ff.Plate(ff.Range("game", winner.size)):
            pw = ff.Gaussian("pw", skill[winner], variance=16.0)
            pl = ff.Gaussian("pl", skill[loser], variance=16.0)
            ff.constrain_true(pw > pl)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ff.ConvergenceWarning)
        result = model.infer("ep")
    warned = any(issubclass(w.category, ff.ConvergenceWarning) for w in caught)
    assert result.converged and not warned
    assert 50 < result.iterations < 2000
    assert np.all(np.isfinite(result["skill"].mean))


def test_a_default_run_that_stops_shrinking_stops_early_and_warns():
    """Without ``iterations``, a run whose changes have not shrunk for 100 sweeps (here an
    oscillation) stops there, unconverged, and says so."""
    from factorflow.distributions import Gaussian
    from factorflow.runtime.compiled import STALL_SWEEPS, _Monitor

    monitor = _Monitor("ep", 1e-10, None, stall=True)
    for i in range(10 * STALL_SWEEPS):
        if monitor(i, {"swing": Gaussian(1.0 + (-1.0) ** i * 0.5, 1.0)}, None):
            break
    assert monitor.count == STALL_SWEEPS + 2
    with pytest.warns(ff.ConvergenceWarning, match=r"not shrunk for 100 sweeps.*damping=0\.5"):
        assert not monitor.finish("m", 10_000, 0.0)


def test_changes_below_the_tolerance_that_no_longer_shrink_are_converged():
    """Rounding noise under the tolerance (changes that neither shrink nor grow) is the
    end of a default run, converged."""
    from factorflow.distributions import Gaussian
    from factorflow.runtime.compiled import STALL_SWEEPS, _Monitor

    monitor = _Monitor("ep", 1e-10, None, stall=True)
    for i in range(10 * STALL_SWEEPS):
        if monitor(i, {"x": Gaussian(1.0 + (-1.0) ** i * 3e-11, 1.0)}, None):
            break
    assert monitor.count <= STALL_SWEEPS + 2 and monitor.finish("m", 10_000, 0.0)


def test_explicit_iterations_are_a_cap_without_stall_stops():
    """``iterations=k`` runs at most k sweeps and never stops for a stall."""
    from factorflow.distributions import Gaussian
    from factorflow.runtime.compiled import STALL_SWEEPS, _Monitor

    monitor = _Monitor("ep", 1e-10, None)
    assert not any(monitor(i, {"swing": Gaussian(1.0 + (-1.0) ** i * 0.5, 1.0)}, None)
                   for i in range(2 * STALL_SWEEPS))


def _exit_model() -> ff.Model:
    with ff.Model("exit") as model:
        c = ff.Bernoulli("c", 0.5)
        with ff.If(c):
            y = ff.Gaussian("y", 3.0, variance=1.0)
        with ff.IfNot(c):
            y = ff.Gaussian("y", 0.0, variance=1.0)
        ff.Gaussian("obs", y, precision=4.0, observed=1.2)
    return model


@pytest.mark.parametrize("damping", [0.0, 0.5, 0.9, {"c": 0.7}, {"y": 0.5, "c": 0.2}])
def test_ep_damping_keeps_the_fixed_point(damping):
    """Damping mixes each new message with the old one; the exact answer is unchanged."""
    result = _exit_model().infer("ep", iterations=2000, damping=damping)
    assert result.converged
    assert_close(result["c"].p, 0.3273929829322395, rtol=0, atol=1e-9)
    assert_close(result["y"].mean, 1.1564357897593438, rtol=0, atol=1e-9)
    assert_close(result.log_evidence, -1.9030634424414987, rtol=0, atol=1e-9)


def test_damping_slows_the_approach_to_the_fixed_point():
    compiled = _exit_model().compile("ep")
    plain = compiled.run(iterations=200)
    damped = compiled.run(iterations=200, damping=0.8)
    assert damped.iterations > plain.iterations


@pytest.mark.parametrize(("damping", "match"), [
    (1.0, r"damping must be a number in \[0, 1\)"),
    (-0.1, r"damping must be a number in \[0, 1\)"),
    ("0.5", r"damping must be a number in \[0, 1\)"),
    ({"c": 2.0}, r"damping\['c'\] must be a number"),
    ({"nope": 0.5}, r"no variable 'nope'"),
])
def test_bad_damping_is_refused(damping, match):
    with pytest.raises(ff.ModelError, match=match):
        _exit_model().compile("ep").run(damping=damping)


def test_damping_is_for_ep():
    with pytest.raises(ff.ModelError, match="damping= applies to EP"):
        _learning_gaussian().infer("vmp", damping=0.5)


def test_an_oscillating_posterior_is_named_with_the_damping_hint():
    """The monitor sees a posterior that jumps back and forth sweep after sweep."""
    from factorflow.distributions import Gaussian
    from factorflow.runtime.compiled import _Monitor

    monitor = _Monitor("ep", 1e-10, None)
    for i in range(20):
        monitor(i, {"steady": Gaussian(1.0, 1.0),
                    "swing": Gaussian(1.0 + (-1.0) ** i * 0.5 / (i + 1) ** 0.1, 1.0)}, None)
    with pytest.warns(ff.ConvergenceWarning, match=r"'swing'.*oscillates.*damping=0\.5"):
        assert not monitor.finish("m", 20, 0.0)


def test_ep_skips_the_log_evidence_per_sweep_unless_traced():
    """EP computes its log evidence once, after the last sweep, unless ``trace=True``;
    the posteriors and the final log evidence are the same either way."""
    with ff.Model("truncated") as model:
        x = ff.Gaussian("x", 0.0, variance=1.0)
        ff.constrain_true(x > 0.5)
    compiled = model.compile("ep")
    quiet = compiled.run(iterations=4, tolerance=None)
    traced = compiled.run(iterations=4, tolerance=None, trace=True)
    assert quiet.trace == () and len(traced.trace) == 4
    assert quiet.log_evidence == traced.log_evidence == traced.trace[-1]
    assert quiet["x"] == traced["x"]


def test_vmp_traces_its_bound_unless_told_not_to():
    compiled = _learning_gaussian().compile("vmp")
    traced = compiled.run(iterations=6, tolerance=None)
    quiet = compiled.run(iterations=6, tolerance=None, trace=False)
    assert len(traced.trace) == 6 and quiet.trace == ()
    assert quiet["mean"] == traced["mean"] and quiet.log_evidence == traced.log_evidence
    with pytest.raises(ff.ModelError, match="trace must be True, False or None"):
        compiled.run(iterations=1, trace="yes")
