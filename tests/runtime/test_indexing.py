"""Array variables indexed by observed integers inside a plate (``skill[winner]``)."""

from __future__ import annotations

import ast

import numpy as np
from scipy import stats

import factorflow as ff
from tests.conftest import assert_close


def _skill_model(prior_means, winners, losers):
    with ff.Model("skills") as model:
        players = ff.Range("players", len(prior_means))
        with ff.Plate(players):
            skill = ff.Gaussian("skill", np.asarray(prior_means, float), variance=1.0)
        games = ff.Range("games", len(winners))
        with ff.Plate(games):
            perf_w = ff.Gaussian("perf_w", skill[np.asarray(winners)], variance=1.0)
            perf_l = ff.Gaussian("perf_l", skill[np.asarray(losers)], variance=1.0)
            ff.constrain_true(perf_w > perf_l)
    return model


def _one_game_closed_form(mu_w: float, mu_l: float):
    """d = perf_w - perf_l ~ N(mu_w - mu_l, 4); skills move by Cov(skill, d)/Var(d)."""
    m, v = mu_w - mu_l, 4.0
    a = m / np.sqrt(v)
    evidence = stats.norm.cdf(a)
    lam = stats.norm.pdf(a) / stats.norm.cdf(a)
    mean_d = m + np.sqrt(v) * lam
    var_d = v * (1 - lam * (lam + a))
    gain = 1.0 / v  # Cov(skill_w, d) = 1
    return (evidence, mu_w + gain * (mean_d - m), mu_l - gain * (mean_d - m),
            1 - gain + gain**2 * var_d)


def test_gathered_skills_match_closed_form_per_game():
    # players (0 beats 1) and (3 beats 2): two independent games in one plate
    model = _skill_model([1.0, 0.0, 0.5, -0.5], winners=[0, 3], losers=[1, 2])
    result = model.infer("ep")
    ev1, w1, l1, var1 = _one_game_closed_form(1.0, 0.0)
    ev2, w2, l2, var2 = _one_game_closed_form(-0.5, 0.5)
    skill = result["skill"]
    assert_close(skill.mean, [w1, l1, l2, w2], rtol=1e-9)
    assert_close(skill.variance, [var1, var1, var2, var2], rtol=1e-9)
    assert_close(result.log_evidence, np.log(ev1) + np.log(ev2), rtol=1e-9)


def test_gather_source_is_one_array_operation_per_statement():
    model = _skill_model([0.0] * 3, winners=[0, 1, 0], losers=[1, 2, 2])
    source = model.compile("ep").source
    assert ".take(" in source and "scatter_prod(" in source
    loops = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.For | ast.While)]
    assert len(loops) == 1  # the iteration loop only: none over games or players
    result = model.infer("ep")
    assert np.argmax(result["skill"].mean) == 0 and np.argmin(result["skill"].mean) == 2
