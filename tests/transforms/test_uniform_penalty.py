"""SkipIfUniform as a penalty (seed 000's third case: EP IsBetween with one uniform bound):
the initialization computes a preferred input first where it can, and starts from its
uniform value where it must."""

from __future__ import annotations

import dataclasses

import factorflow as ff
from factorflow.factors import FACTORS
from factorflow.transforms.dependencies import Dep, DependencyGraph
from factorflow.transforms.scheduling import schedule

D, R, T, P = Dep.DEPENDENCY, Dep.REQUIRED, Dep.TRIGGER, Dep.PREFERRED


def graph(nodes: str, edges: dict[str, Dep], outputs: str) -> DependencyGraph:
    return DependencyGraph(tuple(nodes.split()),
                           {tuple(pair.split()): kind for pair, kind in edges.items()},
                           frozenset(outputs.split()))


def _shifted() -> ff.Model:
    """x truncated to (−1, w + 0.5): the upper bound's message to IsBetween is computed in
    the loop, from w's."""
    with ff.Model("shifted") as model:
        x = ff.Gaussian("x", 0.3, variance=1.2)
        w = ff.Gaussian("w", 1.0, variance=0.8)
        ff.constrain_true(ff.is_between(x, -1.0, w + 0.5))
    return model


GOLDEN_INIT = """\
v_x__marginal            required by v_x__use0__F
v_x__use0__F             triggered by v_x__F, read by v_1_0_x_w_0_5__F
v_w__marginal            triggered by v_w__F, read by v_w__use0__F
v_w__use0__F             triggered by v_w__F, read by v_w_0_5__F
v_w_0_5__F               required by v_w_0_5__marginal
v_w_0_5__marginal        required by v_w_0_5__use0__F
v_w_0_5__use0__F         preferred by v_1_0_x_w_0_5__F (not to start it from a uniform message)
v_1_0_x_w_0_5__F         required by v_1_0_x_w_0_5__marginal
v_1_0_x_w_0_5__marginal  triggered by v_1_0_x_w_0_5__use0__B, read by v_1_0_x_w_0_5__B
v_1_0_x_w_0_5__B         required by v_1_0_x_w_0_5__messages"""


def _init(model: ff.Model) -> str:
    sched = model.compile("ep").schedule
    width = max(map(len, sched.init[0]))
    return "\n".join(f"{name:<{width}}  {sched.why['init', 0, i]}"
                     for i, name in enumerate(sched.init[0]))


def test_golden_init_computes_the_bound_before_the_message_that_prefers_it():
    """IsBetween's message to its boolean waits for the upper bound's message (w + 0.5
    from w's prior) instead of starting from a uniform upper bound."""
    assert _init(_shifted()) == GOLDEN_INIT


def test_without_the_penalty_the_init_starts_from_a_uniform_bound(monkeypatch):
    between = FACTORS["IsBetween"]
    for key, op in list(between.operators.items()):
        monkeypatch.setitem(between.operators, key,
                            dataclasses.replace(op, uniform_penalty=frozenset()))
    init = _shifted().compile("ep").schedule.init[0]
    assert init.index("v_1_0_x_w_0_5__F") < init.index("v_w_0_5__use0__F")
    assert _init(_shifted()) != GOLDEN_INIT


def test_preferred_source_runs_first_where_it_can():
    # the loop runs b before a, and b prefers a: the init runs a first, though no
    # constraint asks for it; as a plain read (Dependency) the loop starts from a uniform a
    edges = {"a b": P, "b out": R, "out b": D, "out a": D}
    s = schedule(graph("b a out", edges, outputs="out"))
    assert s.loop == (("b", "out", "a"),)
    assert s.init == (("a",),)
    assert "a  preferred by b (not to start it from a uniform message)" in str(s)
    plain = schedule(graph("b a out", edges | {"a b": D}, outputs="out"))
    assert plain.init == ((),) and plain.loop == s.loop


def test_preferred_source_that_needs_its_reader_starts_uniform():
    # b prefers a, but a requires b: b starts from a's uniform value, and says so
    g = graph("a b out", {"a b": P, "b a": R, "a out": R, "out a": D}, outputs="out")
    s = schedule(g)
    assert s.init == (("b",),)
    assert "starts from the uniform a (it cannot run first)" in str(s)


def test_required_instead_would_deadlock_where_the_penalty_does_not():
    """The same graph with Required in place of Preferred closes a cycle of Required
    edges, which the scheduler refuses: the penalty is what lets it start."""
    g = graph("a b out", {"a b": R, "b a": R, "a out": R, "out a": D}, outputs="out")
    try:
        schedule(g)
    except ff.ScheduleError:
        return
    raise AssertionError("a cycle of Required edges should be refused")
