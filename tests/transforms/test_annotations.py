"""Operator annotations the scheduler honours (seed 000, issue 15 items 3 and 4): Proper
(the schedule never starts with an improper input, and the run refuses one, naming the
factor, argument and iteration) and NoInit (the initialization schedule never runs it)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import factorflow as ff
from factorflow.distributions import Gaussian
from factorflow.factors.registry import FACTORS
from factorflow.transforms.dependencies import Dep, DependencyGraph
from factorflow.transforms.scheduling import schedule

D, R, T = Dep.DEPENDENCY, Dep.REQUIRED, Dep.TRIGGER


def _positive() -> ff.Model:
    with ff.Model("positive") as model:
        x = ff.Gaussian("x", 0.0, variance=1.0)
        ff.constrain_true(ff.is_positive(x))
    return model


# ----- Proper -------------------------------------------------------------------------
def test_proper_alone_makes_the_schedule_start_from_a_computed_message(monkeypatch):
    """IsPositive's message to out, annotated Proper on x and nothing else, may run only
    after the message from x has been computed (a Required edge): it is not the first
    update, and the message it reads runs before it (after the loop: the constraint fixes
    out's posterior, so only the evidence reads the message, ``transforms.pruning``)."""
    op = FACTORS["IsPositive"].operators[("ep", "out")]
    monkeypatch.setitem(FACTORS["IsPositive"].operators, ("ep", "out"), dataclasses.replace(
        op, skip_if_uniform=frozenset(), proper=frozenset({"x"})))
    compiled = _positive().compile("ep")
    graph = compiled.schedule.graph
    assert graph.edges["v_x__use0__F", "v_x_0__F"] & R
    sched = compiled.schedule
    order = [*sched.prefix, *sched.init[0], *sched.loop[0], *sched.suffix[0]]
    assert order.index("v_x__use0__F") < order.index("v_x_0__F")


def _resume_with(compiled, messages: dict) -> None:
    """Run 3 sweeps, then resume from that state with some messages replaced."""
    states = []
    compiled._infer(compiled._data(None), {}, {}, 3,
                    lambda i, post, ev, state, internal: states.append(state()), None, None)
    state = states[-1]
    compiled._infer(compiled._data(None), {}, {}, 10, None, None,
                    {**state, "messages": {**state["messages"], **messages}})


@pytest.mark.usefixtures("uncertain_constraints")
def test_a_proper_operator_refuses_a_uniform_message_naming_it():
    """The message into IsPositive (x's posterior divided by IsPositive's message) made
    uniform: the run stops at the operator, not with a NaN."""
    compiled = _positive().compile("ep")
    assert "skip_improper(v_x__use0__B, lambda: IsPositive_x_average_conditional(" \
        in compiled.source
    pattern = (r"IsPositive's message to 'out', from argument 'x' \(.*is_positive.*\) needs a "
               r"proper message, got an improper or uniform one at iteration \d")
    uniform = Gaussian.from_natural(np.float64(0.0), np.float64(0.0))
    with pytest.raises(ff.ImproperMessageError, match=pattern):
        _resume_with(compiled, {"v_x__F": uniform,
                                "v_x__use0__B": Gaussian.from_natural(np.float64(0.0),
                                                                      np.float64(3.0))})


@pytest.mark.usefixtures("uncertain_constraints")
def test_an_improper_cavity_skips_the_update_and_says_so():
    """The classic EP failure: the posterior is proper (precision 2) but the cavity, the
    posterior divided by IsPositive's own message (precision 3), is not (precision −1).
    The operator is not run there: its message keeps its previous value, and an
    ImproperMessageWarning names the factor, the argument and the sweep; the uniform
    check above still raises."""
    compiled = _positive().compile("ep")
    with pytest.warns(ff.ImproperMessageWarning,
                      match=r"IsPositive's message to 'x', from argument 'x' \(.*\): its "
                            r"input was improper at 1 element\(s\) at iteration \d"):
        _resume_with(compiled, {"v_x__F": Gaussian.from_natural(np.float64(0.0),
                                                                np.float64(-1.0)),
                                "v_x__use0__B": Gaussian.from_natural(np.float64(0.0),
                                                                      np.float64(3.0))})


def test_proper_inputs_are_checked_only_where_annotated():
    source = _positive().compile("ep").source
    checks = [line.strip() for line in source.splitlines() if "skip_improper(" in line]
    # IsPositive.out and .x read x Proper; .x also reads out, which is not annotated
    assert {c.split("), (")[1].split(",)")[0] for c in checks} == {"v_x__use0__F"}
    assert {"'out', from argument 'x'", "'x', from argument 'x'"} <= {
        c.split("message to ")[1].split(" (")[0] for c in checks}


# ----- NoInit -------------------------------------------------------------------------
def _loop(no_init: frozenset[str] = frozenset()) -> DependencyGraph:
    """x requires y, y reads x: without NoInit the initialization runs y for x."""
    return DependencyGraph(("x", "y"), {("y", "x"): D | R, ("x", "y"): D},
                           frozenset({"x"}), no_init=no_init)


def test_no_init_is_never_run_by_the_initialization():
    assert schedule(_loop()).init == (("y",),)
    plain = schedule(_loop(frozenset({"y"})))
    assert plain.init == ((),)
    assert set(plain.loop[0]) == {"x", "y"}


def test_no_init_reads_its_initial_value_even_when_triggered_before_the_loop():
    """z (before the loop) triggers y; the first pass reads y before updating it."""
    edges = {("z", "y"): D | T, ("y", "x"): D | R, ("x", "y"): D}
    g = DependencyGraph(("z", "x", "y"), edges, frozenset({"x"}))
    assert "y" in schedule(g).init[0]
    g = dataclasses.replace(g, no_init=frozenset({"y"}))
    assert schedule(g).init == ((),)


def test_the_registry_annotation_reaches_the_graph():
    """Discrete's EP message to probs is NoInit (as in Infer.NET)."""
    with ff.Model("counts") as model:
        weights = ff.Dirichlet("weights", np.ones(2))
        with ff.Plate(ff.Range("n", 3)):
            z = ff.Discrete("z", weights)
            with ff.Switch(z):
                ff.Gaussian("x", 0.0, precision=1.0, observed=[0.0, 1.0, 2.0])
    graph = model.compile("ep").schedule.graph
    assert graph.no_init == {"v_weights__use0__B"}


def test_the_proper_check_takes_empty_plates_and_vector_messages():
    """Elements of an empty plate and Dirichlet-like event axes: nothing to refuse."""
    from factorflow.distributions import Dirichlet
    from factorflow.runtime.kernels import check_proper_input

    empty = Dirichlet(np.ones((0, 3)))
    assert check_proper_input(empty, "nothing") is empty
    bad = Dirichlet.from_natural(np.array([[0.0, 1.0], [np.nan, 1.0]]))
    with pytest.raises(ff.ImproperMessageError, match=r"x needs a proper message.*index \(1,\)"):
        check_proper_input(bad, "x", 2)
