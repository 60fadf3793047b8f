"""The scheduler on whole models: triggers keep VMP consistent; the schedule is visible."""

from __future__ import annotations

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
    v_mean__marginal  required by v_mean__use0__F  # posterior of mean (VMP)
  iteration:
    v_mean__use0__F   output  # message from mean to its use 0 (VMP)
    v_prec__use0__B   read by v_prec__marginal  # message to prec from its use 0: Gaussian.precision (VMP)
    v_prec__marginal  output  # posterior of prec (VMP)
    v_prec__use0__F   output  # message from prec to its use 0 (VMP)
    v_mean__use0__B   read by v_mean__marginal  # message to mean from its use 0: Gaussian.mean (VMP)
    v_mean__marginal  output  # posterior of mean (VMP)
    v_mean__use0__F   triggered by v_mean__use0__B  # message from mean to its use 0 (VMP)
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
    assert loop.index("v_means__use0__F") < loop.index("v_means__marginal")


def test_schedule_without_initialisation_is_deterministic():
    first = str(_mixture().compile("vmp").schedule)
    assert all(str(_mixture().compile("vmp").schedule) == first for _ in range(3))


def test_too_many_initialisations_warn():
    init = ("means", "z", "weights")
    with pytest.warns(ff.ScheduleWarning, match="overwritten before it is used"):
        _mixture().compile("vmp", init=init)
