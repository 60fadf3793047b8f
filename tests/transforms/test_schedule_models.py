"""The scheduler on whole models: triggers keep VMP consistent; the schedule is visible."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import factorflow as ff
from factorflow.factors import variable
from tests.conftest import assert_close


def _learning_gaussian() -> ff.Model:
    with ff.Model("learning_gaussian") as model:
        mean = ff.Gaussian("mean", 0.0, variance=100.0)
        prec = ff.Gamma("prec", 1.0, rate=1.0)
        n = ff.Range("n", 2)
        with ff.Plate(n):
            ff.Gaussian("x", mean, precision=prec, observed=[5.0, 7.0])
    return model


def _mean_is_consistent_with_prec(result) -> bool:
    """The posterior of mean reflects the latest message from x's factor, which was
    computed from the posterior of prec: the coordinate-ascent update holds exactly."""
    e_prec = float(result["prec"].mean)
    post_prec = 0.01 + 2 * e_prec
    return bool(abs(float(result["mean"].mean) - e_prec * 12.0 / post_prec) < 1e-12
                and abs(float(result["mean"].variance) - 1 / post_prec) < 1e-12)


@pytest.mark.parametrize("iterations", [1, 2, 3])
def test_vmp_messages_reflect_the_latest_factor_messages(iterations):
    result = _learning_gaussian().infer("vmp", iterations=iterations)
    assert _mean_is_consistent_with_prec(result)


def test_removing_the_trigger_annotations_breaks_it(monkeypatch):
    for key in [k for k in variable.NODE_ANNOTATIONS if k[0] == "vmp"]:
        monkeypatch.setitem(variable.NODE_ANNOTATIONS, key,
                            variable.NODE_ANNOTATIONS[key].replace("trigger", "").strip()
                            or "dependency")
    result = _learning_gaussian().infer("vmp", iterations=1)
    assert not _mean_is_consistent_with_prec(result)


def _correlated_regression(order: tuple[int, ...]) -> tuple[ff.Model, np.ndarray]:
    """Linear regression with scalar weights on features of correlation 0.9, the terms
    summed in ``order``; and the exact posterior mean of (w0, w1, w2, b)."""
    rng = np.random.default_rng(1)
    n = 50
    corr = np.full((3, 3), 0.9) + 0.1 * np.eye(3)
    x = rng.multivariate_normal(np.zeros(3), corr, size=n)
    y = x @ np.array([1.0, -2.0, 0.5]) + 0.3 + rng.normal(0, 0.5, n)
    with ff.Model("regression") as model:
        w = [ff.Gaussian(f"w{i}", 0.0, variance=10.0) for i in range(3)]
        b = ff.Gaussian("b", 0.0, variance=10.0)
        with ff.Plate(ff.Range("n", n)):
            terms = [w[i] * ff.Data(f"x{i}", x[:, i]) for i in range(3)] + [b]
            mu = terms[order[0]]
            for i in order[1:]:
                mu = mu + terms[i]
            ff.Gaussian("y", mu, precision=4.0, observed=y)
    design = np.column_stack([x, np.ones(n)])
    precision = np.eye(4) / 10 + 4 * design.T @ design
    return model, np.linalg.solve(precision, 4 * design.T @ y)


@pytest.mark.parametrize("order", [(0, 1, 2, 3), (3, 2, 1, 0), (2, 0, 3, 1)])
def test_vmp_updates_each_variable_from_the_latest_of_the_others(order):
    """Coordinate ascent (VMP's Fresh reads): the bound rises at every sweep and the
    means reach the exact posterior means, whatever the order of the + terms (a sweep
    from one old state diverged to 1e52 here)."""
    model, exact = _correlated_regression(order)
    compiled = model.compile("vmp")
    bounds = [compiled.run(iterations=k).log_evidence for k in range(1, 40)]
    assert all(b2 >= b1 - 1e-9 for b1, b2 in zip(bounds, bounds[1:], strict=False))
    result = compiled.run(iterations=400)
    means = [float(result[f"w{i}"].mean) for i in range(3)] + [float(result["b"].mean)]
    assert_close(means, exact, rtol=0, atol=1e-8)


def test_removing_the_fresh_reads_breaks_coordinate_ascent(monkeypatch):
    from factorflow.transforms import dependency_info

    monkeypatch.setattr(dependency_info, "_vmp_read",
                        lambda posterior: dependency_info.Dep.DEPENDENCY)
    for key in [k for k in variable.NODE_ANNOTATIONS if k[0] == "vmp"]:
        monkeypatch.setitem(variable.NODE_ANNOTATIONS, key,
                            " ".join(variable.NODE_ANNOTATIONS[key].replace("fresh", "")
                                     .split()) or "dependency")
    model, _ = _correlated_regression((0, 1, 2, 3))
    result = model.infer("vmp", iterations=50)
    assert abs(float(result["w0"].mean)) > 1e3  # diverges, as before the fix


def test_learning_a_gaussian_numbers_under_the_scheduler():
    result = _learning_gaussian().infer("vmp", iterations=50)
    assert_close(result["mean"].mean, 5.9603207170807826, rtol=0, atol=1e-9)
    assert_close(result["prec"].rate, 2.6628958274937107, rtol=0, atol=1e-9)


def test_schedule_is_printed_with_reasons():
    compiled = _learning_gaussian().compile("vmp")
    text = str(compiled.schedule)
    assert text == """\
prefix:
  v_mean__F  read by v_mean__marginal  # message to mean from its definition: Gaussian.sample (VMP)
  v_prec__F  read by v_prec__marginal  # message to prec from its definition: Gamma.sample (VMP)
loop 1:
  init:
    v_mean__marginal  required by v_mean__use0__F; starts from the initial v_mean__use0__B (nothing can run first)  # posterior of mean (VMP)
    v_mean__use0__F   hoisted from the start of the loop: nothing it reads changes from its last update in a pass to there  # message from mean to its use 0 (VMP)
  iteration:
    v_prec__use0__B   read by v_prec__marginal  # message to prec from its use 0: Gaussian.precision (VMP)
    v_prec__marginal  output  # posterior of prec (VMP)
    v_prec__use0__F   output  # message from prec to its use 0 (VMP)
    v_mean__use0__B   read by v_mean__marginal  # message to mean from its use 0: Gaussian.mean (VMP)
    v_mean__marginal  output  # posterior of mean (VMP)
    v_mean__use0__F   triggered by v_mean__marginal  # message from mean to its use 0 (VMP)
after loop 1:
  v_mean__B  output  # message from mean to its definition (VMP)
  v_prec__B  output  # message from prec to its definition (VMP)"""
    dot = compiled.schedule.to_graphviz()
    assert dot.startswith("digraph") and "trigger" in dot and "v_mean__use0__B" in dot


def _mixture() -> ff.Model:
    from tests.runtime.test_gated_models import mixture
    return mixture()


def test_user_initialisation_is_used_before_it_is_recomputed():
    """The loop reads the initialised posterior of means before it recomputes it, and no
    ScheduleWarning says the initialisation was overwritten."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", ff.ScheduleWarning)
        schedule = _mixture().compile("vmp", init=("means",)).schedule
    loop = schedule.loop[0]
    assert "v_means__marginal" not in schedule.init[0]
    # the message out of the initialised posterior is sent before the loop or early in
    # it, and the loop reads it (the gate's copy of means) before updating means
    sent = "v_means__use0__F" in schedule.init[0] or (
        loop.index("v_means__use0__F") < loop.index("v_means__marginal"))
    assert sent
    assert loop.index("v_means__k_cond_z_n__F") < loop.index("v_means__marginal")


def test_schedule_without_initialisation_is_deterministic():
    first = str(_mixture().compile("vmp").schedule)
    assert all(str(_mixture().compile("vmp").schedule) == first for _ in range(3))


def test_too_many_initialisations_warn():
    # under VMP coordinate ascent the first update of one of the two reads the other's
    # initial posterior and overwrites its own; under EP z's is overwritten
    with pytest.warns(ff.ScheduleWarning, match="v_mean__marginal is overwritten before"):
        _learning_gaussian().compile("vmp", init=("mean", "prec"))
    with pytest.warns(ff.ScheduleWarning, match="v_z__marginal is overwritten before"):
        _mixture().compile("ep", init=("means", "z", "weights"))


def test_every_initialisation_of_the_mixture_is_used_under_vmp():
    with warnings.catch_warnings():
        warnings.simplefilter("error", ff.ScheduleWarning)
        _mixture().compile("vmp", init=("means", "z", "weights"))


def _gallery() -> list[tuple[str, ff.Model, str, dict]]:
    """(id, model, algorithm, init) of models whose loops recompute posteriors twice
    before the recomputations are dropped."""
    from tests.runtime import handwritten as hw
    from tests.transforms.test_uniform_penalty import _shifted

    winner, loser = hw.trueskill_games(6, 30)
    x = hw.mixture_data(40)
    init = {"means": ff.distributions.Gaussian(hw.MIX_INIT, np.ones(hw.MIX_K))}
    return [("trueskill", hw.trueskill_model(6, winner, loser), "ep", {}),
            ("mixture", hw.mixture_model(x), "vmp", init),
            ("sprinkler", hw.sprinkler_model(), "ep", {}),
            ("learning", _learning_gaussian(), "vmp", {}),
            ("between", _shifted(), "ep", {})]


def _sweeps(model: ff.Model, algorithm: str, init: dict, sweeps: int) -> list[dict]:
    seen: list[dict] = []

    def record(i, posteriors, *_):
        seen.append({k: [np.array(e) for e in v.eta] for k, v in posteriors.items()})

    model.compile(algorithm, init=list(init)).run(iterations=sweeps, init=init,
                                                  on_iteration=record, tolerance=None,
                                                  progress=False)
    return seen


@pytest.mark.parametrize("case", range(5), ids=["trueskill", "mixture", "sprinkler",
                                                "learning", "between"])
def test_dropping_recomputed_posteriors_changes_no_number(case, monkeypatch):
    """Each posterior is computed once per sweep where its inputs allow (a recomputation
    at the start of the loop moves before it): every sweep's posteriors are those of the
    schedule that recomputes them, to 1e-12."""
    from factorflow.transforms import schedule_pass

    _, model, algorithm, init = _gallery()[case]
    lean_loop = model.compile(algorithm, init=list(init)).schedule.loop[0]
    lean = _sweeps(model, algorithm, init, 12)
    monkeypatch.setattr(schedule_pass, "_without_recomputations", lambda s, *_: s)
    _, model, algorithm, init = _gallery()[case]  # (compiled anew)
    full_loop = model.compile(algorithm, init=list(init)).schedule.loop[0]
    assert len(lean_loop) < len(full_loop)
    assert len(set(lean_loop)) == len(set(full_loop))
    full = _sweeps(model, algorithm, init, 12)
    for a, b in zip(lean, full, strict=True):
        for name in a:
            for x, y in zip(a[name], b[name], strict=True):
                assert_close(x, y, rtol=1e-12, atol=1e-12)
