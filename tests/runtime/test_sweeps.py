"""Parallel sweeps (issue 16): EP TrueSkill scheduled as hand-written parallel EP.

The references are hand-written vectorised NumPy message passing (``handwritten.py``).
Sweeps are counted, never timed."""

from __future__ import annotations

import numpy as np
import pytest

import factorflow as ff
from factorflow.transforms import dependency_info, greedy
from tests.conftest import assert_close
from tests.runtime.handwritten import (
    distance,
    factorflow_trace,
    sweeps_within,
    trueskill_ep,
    trueskill_games,
    trueskill_model,
)

PLAYERS, GAMES = 20, 200


@pytest.fixture(scope="module")
def games():
    winner, loser = trueskill_games(PLAYERS, GAMES)
    fixed_point = trueskill_ep(PLAYERS, winner, loser, 20_000, stop=1e-13)[-1]
    return winner, loser, fixed_point


@pytest.mark.slow
def test_trueskill_fixed_point_is_the_handwritten_one(games):
    winner, loser, (mean, variance) = games
    result = trueskill_model(PLAYERS, winner, loser).infer("ep", iterations=2000,
                                                           tolerance=1e-12)
    assert result.converged
    assert_close(result["skill"].mean, mean, rtol=0, atol=1e-10)
    assert_close(result["skill"].variance, variance, rtol=0, atol=1e-10)


def test_trueskill_converges_within_twice_the_handwritten_sweeps(games):
    winner, loser, fixed_point = games
    hand = trueskill_ep(PLAYERS, winner, loser, 140)
    ours, _ = factorflow_trace(trueskill_model(PLAYERS, winner, loser), "ep", "skill", 140)
    needed, by_hand = (sweeps_within(t, fixed_point, 1e-3) for t in (ours, hand))
    assert by_hand is not None and needed is not None
    assert needed <= 2 * by_hand


def _sweep_for_sweep(winner, loser) -> float:
    """The largest difference between factorflow's posteriors and parallel EP's by hand,
    over the first 30 sweeps."""
    hand = trueskill_ep(PLAYERS, winner, loser, 30)
    ours, _ = factorflow_trace(trueskill_model(PLAYERS, winner, loser), "ep", "skill", 30)
    return max(distance(a, b) for a, b in zip(ours, hand, strict=True))


def test_the_schedule_is_parallel_ep_sweep_for_sweep(games):
    winner, loser, _ = games
    assert _sweep_for_sweep(winner, loser) < 1e-10
    schedule = str(trueskill_model(PLAYERS, winner, loser).compile("ep").schedule)
    assert "sweep: parallel posterior of skill over v_game" in schedule


@pytest.mark.parametrize("removed", ["consistent cavities", "deferred hub updates"])
def test_removing_either_half_of_the_mechanism_breaks_it(games, monkeypatch, removed):
    """Without Fresh reads the factors read cavities of different ages; without holding
    back the messages into skill the sweep turns sequential: either way factorflow no
    longer runs parallel EP."""
    if removed == "consistent cavities":
        monkeypatch.setattr(dependency_info, "_generative_read", lambda stmt, arg: False)
    else:
        monkeypatch.setattr(greedy._Greedy, "_deferred", lambda self, x: False)
    winner, loser, _ = games
    assert _sweep_for_sweep(winner, loser) > 1e-3


def _gathered_linear_model() -> ff.Model:
    """skill[player] ~ N(0, 10); per game pa ~ N(skill[a], 1), pb ~ N(skill[b], 1),
    observed through noise of variance 0.5: a loop in EP and VMP, exact in EP."""
    with ff.Model("gathered") as model:
        with ff.Plate(ff.Range("player", 3)):
            skill = ff.Gaussian("skill", 0.0, variance=10.0)
        with ff.Plate(ff.Range("game", 4)):
            pa = ff.Gaussian("pa", skill[LINEAR_A], variance=1.0)
            pb = ff.Gaussian("pb", skill[LINEAR_B], variance=1.0)
            ff.Gaussian("oa", pa, variance=0.5, observed=LINEAR_YA)
            ff.Gaussian("ob", pb, variance=0.5, observed=LINEAR_YB)
    return model


LINEAR_A, LINEAR_B = np.array([0, 1, 2, 0]), np.array([1, 2, 0, 2])
LINEAR_YA, LINEAR_YB = np.array([1.0, 2.0, 0.5, 0.0]), np.array([0.0, 1.0, 1.5, 2.0])


def test_parallel_ep_is_exact_on_a_gathered_linear_gaussian_model():
    """Exact Gaussian conditioning: precision I/10 + Σ e e^T / 1.5, one e per observation."""
    design = np.zeros((8, 3))
    design[np.arange(4), LINEAR_A] = 1.0
    design[4 + np.arange(4), LINEAR_B] = 1.0
    precision = np.eye(3) / 10 + design.T @ design / 1.5
    cov = np.linalg.inv(precision)
    mean = cov @ design.T @ np.concatenate([LINEAR_YA, LINEAR_YB]) / 1.5
    compiled = _gathered_linear_model().compile("ep")
    assert "sweep: parallel posterior of skill over v_game" in str(compiled.schedule)
    result = compiled.run(iterations=100)
    assert result.converged
    assert_close(result["skill"].mean, mean, rtol=0, atol=1e-10)
    assert_close(result["skill"].variance, np.diag(cov), rtol=0, atol=1e-10)


def test_vmp_keeps_its_sequential_sweep():
    schedule = str(_gathered_linear_model().compile("vmp").schedule)
    assert "sweep: sequential posterior of skill over v_game: coordinate ascent" in schedule


def test_sweeps_within_counts_from_the_last_excursion():
    ref = (np.zeros(1), np.zeros(1))
    trace = [(np.array([x]), np.zeros(1)) for x in (1.0, 1e-4, 1.0, 1e-4, 1e-5)]
    assert sweeps_within(trace, ref, 1e-3) == 4
    assert sweeps_within(trace[:3], ref, 1e-3) is None
