"""Buffers: work shared by the operators of one factor, read Fresh (seed 000's reason for
Fresh, Infer.NET's ``[Buffers]``).

Greater's messages to ``a`` and to ``b`` both need the truncated-Gaussian message to
d = a − b; the factor's buffer ``difference`` computes it once and both read it Fresh.
The numbers are those of the operators computing it themselves (``buffers_inlined``),
and the hand-written parallel EP of ``tests/runtime/handwritten.py``."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import factorflow as ff
from factorflow.factors import FACTORS
from factorflow.ir import Stmt
from factorflow.transforms import dependency_info, greedy
from factorflow.transforms.dependency_info import dependency_graph
from factorflow.transforms.scheduling import schedule
from tests.conftest import assert_close
from tests.runtime.handwritten import (
    distance,
    factorflow_trace,
    trueskill_ep,
    trueskill_games,
    trueskill_model,
)

GREATER = FACTORS["Greater"]


def _two_means() -> ff.Model:
    """Six races x > y, x around one mean and y around another (no gathered variable:
    every sweep is sequential)."""
    with ff.Model("races") as model:
        mu = ff.Gaussian("mu", 0.0, variance=4.0)
        nu = ff.Gaussian("nu", 0.5, variance=4.0)
        with ff.Plate(ff.Range("n", 6)):
            x = ff.Gaussian("x", mu, variance=1.0)
            y = ff.Gaussian("y", nu, variance=2.0)
            ff.constrain_true(x > y)
    return model


def _loop(model: ff.Model) -> tuple[str, ...]:
    return model.compile("ep").schedule.loop[0]


TRUESKILL_LOOP = """\
v_pw__F
v_pw__marginal
v_pw__use0__F
v_pl__F
v_pl__marginal
v_pl__use0__F
v_pw_pl__difference
v_pw__use0__B
v_pl__use0__B
v_pw__marginal
v_pw__use0__F
v_pw__B
v_pl__marginal
v_pl__use0__F
v_pl__B
v_skill__use0__B
v_skill__use1__B
v_skill__marginal
v_skill__use0__F
v_skill__use1__F"""


def test_golden_trueskill_sweep_computes_the_difference_once():
    """The buffer runs once, then both messages out of Greater read it, before either
    posterior they feed is updated; the skills' posterior and the messages from it are
    computed once per sweep (at its end: the next sweep starts from them).  Greater's
    message to ``pw > pl`` is not in the sweep: the constraint fixes that posterior
    (``transforms.pruning.fix_certain``), and only the evidence, after the loop, reads it."""
    winner, loser = trueskill_games(5, 12)
    schedule = trueskill_model(5, winner, loser).compile("ep").schedule
    assert "\n".join(schedule.loop[0]) == TRUESKILL_LOOP
    assert "v_pw_pl__F" in schedule.suffix[0]


def test_the_generated_code_calls_the_buffer_and_passes_it():
    winner, loser = trueskill_games(5, 12)
    source = trueskill_model(5, winner, loser).compile("ep").source
    assert source.count("v_pw_pl__difference = Greater_difference(") == 1
    assert "difference=v_pw_pl__difference" in source


def test_each_posterior_is_checked_proper_once_per_sweep():
    """pw's and pl's posteriors are updated once a sweep, after the messages out of
    Greater (the update before the buffer is left out: its one use's message is the
    definition's, ``codegen.python._cavities``, and nothing else reads it): checked once."""
    winner, loser = trueskill_games(5, 12)
    source = trueskill_model(5, winner, loser).compile("ep").source
    loop = source.split("# ---- iterations")[1].split("if on_iteration")[0]
    assert loop.count("v_pw__marginal = ") == 1
    assert loop.count("v_pw__use0__F = fit_plates(v_pw__F, (v_game,))") == 1
    checks = [line.split("(")[1].split(",")[0] for line in loop.splitlines()
              if "check_proper(" in line]
    assert sorted(checks) == ["v_pl__marginal", "v_pw__marginal", "v_skill__marginal"]


def test_without_unaffected_edges_the_buffer_is_computed_twice(monkeypatch):
    """A factor's message in leaves the message out on the same edge unchanged (EP): that
    lets both operators read one buffer.  Without it, the posterior of pw is updated
    between them and the difference computed again."""
    monkeypatch.setattr(dependency_info, "_unaffected", lambda stmts, writer: frozenset())
    winner, loser = trueskill_games(5, 12)
    assert _loop(trueskill_model(5, winner, loser)).count("v_pw_pl__difference") == 2


def test_posteriors_equal_the_operators_computing_it_themselves():
    """TrueSkill, sweep for sweep, to 1e-12: the shared buffer changes no number (the
    schedule is parallel EP either way)."""
    winner, loser = trueskill_games(20, 200)
    shared, _ = factorflow_trace(trueskill_model(20, winner, loser), "ep", "skill", 25)
    with GREATER.buffers_inlined():
        assert "difference" not in trueskill_model(20, winner, loser).compile("ep").source
        alone, _ = factorflow_trace(trueskill_model(20, winner, loser), "ep", "skill", 25)
    assert max(distance(a, b) for a, b in zip(shared, alone, strict=True)) < 1e-12


def test_sequential_fixed_point_equals_the_operators_computing_it_themselves():
    """A sequential model: the sweeps may run in another order, the fixed point is the
    same to 1e-12."""
    shared = _two_means().infer("ep", iterations=2000, tolerance=1e-14)
    with GREATER.buffers_inlined():
        alone = _two_means().infer("ep", iterations=2000, tolerance=1e-14)
    assert shared.converged and alone.converged
    for name in ("mu", "nu", "x", "y"):
        assert_close(shared[name].mean, alone[name].mean, rtol=0, atol=1e-12)
        assert_close(shared[name].variance, alone[name].variance, rtol=0, atol=1e-12)
    assert_close(shared.log_evidence, alone.log_evidence, rtol=0, atol=1e-12)


def test_trueskill_with_the_buffer_is_handwritten_parallel_ep():
    winner, loser = trueskill_games(20, 200)
    hand = trueskill_ep(20, winner, loser, 30)
    ours, _ = factorflow_trace(trueskill_model(20, winner, loser), "ep", "skill", 30)
    assert max(distance(a, b) for a, b in zip(ours, hand, strict=True)) < 1e-10


#: the buffers of the built-in factors, as their statements' labels end
BUFFER_NAMES = ("__difference", "__messages", "__weight")


def _between() -> ff.Model:
    """x truncated to (w, 2), w Gaussian: IsBetween's buffer ``messages``."""
    with ff.Model("between") as model:
        x = ff.Gaussian("x", 0.3, variance=1.2)
        w = ff.Gaussian("w", -1.0, variance=0.8)
        with ff.Plate(ff.Range("n", 2)):
            ff.Gaussian("y", x, variance=1.0, observed=[0.5, 1.5])
        ff.constrain_true(ff.is_between(x, w, 2.0))
    return model


def _mixture() -> ff.Model:
    """A two-component mixture under ff.Switch: EnterOne's buffer ``weight``."""
    with ff.Model("mixture") as model:
        with ff.Plate(ff.Range("k", 2)):
            means = ff.Gaussian("means", 0.0, variance=10.0)
        with ff.Plate(ff.Range("n", 4)):
            z = ff.Discrete("z", [0.5, 0.5])
            with ff.Switch(z):
                ff.Gaussian("x", means[z], variance=1.0, observed=[-2.0, -1.5, 1.0, 2.5])
    return model


def _stale_reads(graph, sched) -> list[str]:
    """Replay one pass of the loop after another and name every operator that reads the
    buffer after one of the buffer's own inputs was updated since it was computed."""
    ix = graph.index
    buffers = {n for n in graph.nodes if n.endswith(BUFFER_NAMES)}
    readers = {b: [ix.labels[t] for t in ix.reads_dst[ix.pos[b]]] for b in buffers}
    inputs = {b: {ix.labels[s] for s in ix.reads_src[ix.pos[b]]} for b in buffers}
    updated_since: dict[str, bool] = {b: True for b in buffers}
    stale = []
    for step in list(sched.init[0]) + 2 * list(sched.loop[0]):
        for b in buffers:
            if step in readers[b] and updated_since[b]:
                stale.append(step)
        for b in buffers:
            if step == b:
                updated_since[b] = False
            elif step in inputs[b]:
                updated_since[b] = True
    return stale


@pytest.mark.parametrize("fresh", [True, False])
def test_fresh_not_program_order_brings_the_buffer_up_to_date(monkeypatch, fresh):
    """With the buffer's statement last in program order (so the greedy scheduler's ties
    would run the operators first), the Fresh annotation still has the buffer computed
    from the current messages before each operator reads it; without the annotation the
    operators read a buffer from before their inputs changed."""
    if not fresh:
        for key in (("ep", "a"), ("ep", "b")):
            monkeypatch.setitem(GREATER.operators, key, dataclasses.replace(
                GREATER.operators[key], fresh=frozenset()))
    program = _two_means().compile("ep").compilation.stages["pruning"]
    body = [s for s in program.body if not (isinstance(s, Stmt) and s.outputs and
                                            s.outputs[0].var.endswith("__difference"))]
    body += [s for s in program.body if s not in body]
    graph, _ = dependency_graph(dataclasses.replace(program, body=tuple(body), _by_name={}))
    stale = _stale_reads(graph, schedule(graph))
    assert (stale == []) is fresh, stale


@pytest.mark.parametrize("model", [_two_means, _between, _mixture])
def test_every_buffered_factor_reads_its_buffer_fresh(model):
    """Each factor with a buffer (Greater's ``difference``, IsBetween's ``messages``,
    EnterOne's ``weight``), its buffer statements last in program order: no operator
    reads the buffer after its inputs changed (Greater's without its Fresh annotations:
    the test above)."""
    program = model().compile("ep").compilation.stages["pruning"]
    late = [s for s in program.body if isinstance(s, Stmt) and s.outputs
            and s.outputs[0].var.endswith(BUFFER_NAMES)]
    assert late
    body = [s for s in program.body if s not in late] + late
    graph, _ = dependency_graph(dataclasses.replace(program, body=tuple(body), _by_name={}))
    assert _stale_reads(graph, schedule(graph)) == []


def test_every_operator_reading_a_buffer_reads_it_fresh():
    """The registry's rule for buffers (``Factor.buffer``): an operator that reads one
    declares it ``fresh``, so the scheduler brings it up to date first."""
    readers = [(op, b) for f in FACTORS.values() for op in f.operators.values()
               for b in op.reads if b in f.buffers]
    assert len(readers) >= 7  # Greater a, b; IsBetween x, lower, upper; EnterOne value, cases
    for op, b in readers:
        assert b in op.fresh, (op.qualname, b)


def test_without_the_still_fresh_rule_the_buffer_runs_twice(monkeypatch):
    """``_still_fresh``: a posterior read Fresh only by the message out on the operator's
    own edge stays fresh when that operator runs; without it pw's posterior is refreshed
    between Greater's two messages and the buffer runs twice."""
    monkeypatch.setattr(greedy._Greedy, "_still_fresh", lambda self, x, t: False)
    winner, loser = trueskill_games(5, 12)
    assert _loop(trueskill_model(5, winner, loser)).count("v_pw_pl__difference") == 2


def test_buffer_message_function_equals_the_operator_reading_it():
    """``Factor.message`` computes the buffer from the arguments when it is not given."""
    a, b = ff.distributions.Gaussian(1.0, 2.0), ff.distributions.Gaussian(-0.5, 0.5)
    out = np.array(True)
    diff = GREATER.operators[("ep", "difference")].fn(out=out, a=a, b=b)
    for target in ("a", "b"):
        direct = GREATER.operators[("ep", target)].fn(out=out, a=a, b=b, difference=diff)
        called = GREATER.message("ep", target)(out=out, a=a, b=b)
        assert_close(np.array(called.eta), np.array(direct.eta), rtol=0, atol=0)
