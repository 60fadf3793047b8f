"""SkipIfUniform as a penalty (seed 000's third case: EP IsBetween with one uniform bound,
VMP BernoulliFromBeta with a uniform child message): the initialization computes a
preferred input first where it can, and starts from its uniform value where it must."""

from __future__ import annotations

import dataclasses

import pytest

import factorflow as ff
from factorflow.factors import FACTORS
from factorflow.transforms.dependencies import READS, Dep, DependencyGraph
from factorflow.transforms.dependency_info import dependency_graph
from factorflow.transforms.pipeline import compile_program
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


def _init(model: ff.Model, algorithm: str = "ep") -> str:
    sched = model.compile(algorithm).schedule
    width = max(map(len, sched.init[0]))
    return "\n".join(f"{name:<{width}}  {sched.why['init', 0, i]}"
                     for i, name in enumerate(sched.init[0]))


@pytest.mark.usefixtures("uncertain_constraints")
def test_golden_init_computes_the_bound_before_the_message_that_prefers_it():
    """IsBetween's message to its boolean waits for the upper bound's message (w + 0.5
    from w's prior) instead of starting from a uniform upper bound."""
    assert _init(_shifted()) == GOLDEN_INIT


@pytest.mark.usefixtures("uncertain_constraints")
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
    edges = {"a b": D | P, "b out": R, "out b": D, "out a": D}
    s = schedule(graph("b a out", edges, outputs="out"))
    assert s.loop == (("b", "out", "a"),)
    assert s.init == (("a",),)
    assert "a  preferred by b (not to start it from a uniform message)" in str(s)
    plain = schedule(graph("b a out", edges | {"a b": D}, outputs="out"))
    assert plain.init == ((),) and plain.loop == s.loop


def test_preferred_source_that_needs_its_reader_starts_uniform():
    # b prefers a, but a requires b: b starts from a's uniform value, and says so
    g = graph("a b out", {"a b": D | P, "b a": R, "a out": R, "out a": D}, outputs="out")
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


def _two_children() -> ff.Model:
    """p ~ Beta; b, c ~ Bernoulli(p), each with a child (an observation gated on it)."""
    with ff.Model("two children") as model:
        p = ff.Beta("p", 1.0, 1.0)
        b = ff.Bernoulli("b", p)
        with ff.If(b):
            ff.Bernoulli("y", 0.9, observed=True)
        with ff.IfNot(b):
            ff.Bernoulli("y", 0.2, observed=True)
        c = ff.Bernoulli("c", p)
        with ff.If(c):
            ff.Bernoulli("z", 0.7, observed=False)
    return model


GOLDEN_VMP_INIT = """\
v_c__use0__B   preferred by v_p__use1__B (not to start it from a uniform message)
v_p__marginal  required by v_p__use0__F; starts from the initial v_p__use1__B, v_p__use0__B \
(nothing can run first)
v_p__use0__F   required by v_b__F
v_p__use1__F   required by v_c__F
v_b__F         required by v_b__marginal
v_c__F         required by v_c__marginal
v_c__marginal  required by v_c__B
v_c__use0__F   triggered by v_c__marginal, read by v_c__use0__B
v_c__B         required by v_p__use1__B
v_b__use0__B   fresh for v_b__marginal
v_b__marginal  required by v_b__B
v_b__use0__F   triggered by v_b__marginal, read by v_b__use0__B"""


def test_golden_vmp_init_computes_the_childs_message_before_the_message_to_p():
    """VMP Bernoulli's message to p reads q(c), uniform until c's child (the gate on c)
    has sent its message: the loop's first pass sends c's message to p (v_p__use1__B)
    before c's child message (v_c__use0__B), so the init computes that child message
    first, for that reason."""
    assert _init(_two_children(), "vmp") == GOLDEN_VMP_INIT
    graph, _ = dependency_graph(compile_program(_two_children(), "vmp").stages["pruning"])
    # through c's posterior: a preference, not a read (nothing else changes)
    assert graph.edges["v_c__use0__B", "v_p__use1__B"] == P
    assert graph.edges["v_c__B", "v_p__use1__B"] == D | R | P
    assert not P & READS


def test_without_the_vmp_penalty_the_init_does_not_put_the_child_first(monkeypatch):
    bernoulli = FACTORS["Bernoulli"]
    op = bernoulli.operators["vmp", "p"]
    monkeypatch.setitem(bernoulli.operators, ("vmp", "p"),
                        dataclasses.replace(op, uniform_penalty=frozenset()))
    init = _two_children().compile("vmp").schedule.init[0]
    assert init[0] != "v_c__use0__B"
    assert _init(_two_children(), "vmp") != GOLDEN_VMP_INIT
