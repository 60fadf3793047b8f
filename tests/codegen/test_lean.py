"""The generated program leaves out what changes nothing (``codegen.python.LEAN``, issue
14): calls whose result is uniform whatever their inputs (``_silent``: a gate clone's
messages to its cases and its evidence of 0), and in a VMP sweep the statements that
compute again what their names hold or whose values nothing reads before the sweep
computes them again (``_dropped``, ``liveness.repeated`` and ``liveness.overwritten``).

Meaning: on every example model run under VMP and on 1-D mixtures (hypothesis: K, N,
seed, trace on and off, up to 2,000 points, where the fused paths of ``base`` take over
from 4,096 elements), the posteriors after every sweep, the bound after every sweep and
the results are bit-identical to the program that leaves nothing out (``LEAN`` off)
(resumed runs: ``tests/runtime/test_checkpoint.py``).  Rules: the two analyses on
small hand-made sweeps.  Text: the 1-D mixture's sweep (the statements it runs, in
order) and ``evidence()``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import factorflow as ff
from factorflow.codegen import python
from factorflow.codegen.liveness import implied, implied_later, overwritten, repeated, steps
from tests.codegen.test_liveness import (
    EXAMPLES,
    VMP_EXAMPLES,
    _arrays,
    _identical,
    _mixture,
    _run,
    _vmp_runs,
)

NAMES = frozenset("abcdpqm") | {"iteration"}


def _stmts(*lines: str) -> list[list]:
    return [steps([line], NAMES) for line in lines]


# ----- the rules -----------------------------------------------------------------------
def test_a_computation_of_values_that_have_not_moved_is_repeated():
    sweep = _stmts("a = f(p)", "b = g(a)", "p = h(b)", "a = f(p)", "c = f(q)", "c = f(q)")
    # a = f(p) again after p moved: not the value a holds; c = f(q) twice: the same
    assert repeated(sweep) == [False, False, False, False, False, True]
    # a copy of the same value, and a statement that writes nothing, stay
    assert repeated(_stmts("a = p", "a = p", "e(a)", "e(a)")) == [False, True, False, False]
    # an input written in between (even to the value it had) is another value
    assert repeated(_stmts("a = f(p)", "p = g(q)", "a = f(p)")) == [False, False, False]


def test_a_value_written_again_before_anything_reads_it_is_overwritten():
    sweep = _stmts("a = f(p)", "b = g(p)", "a = h(b)", "e(a)")
    assert overwritten(sweep) == [True, False, False, False]
    # read in between (by any statement), or written only at the end: kept
    assert overwritten(_stmts("a = f(p)", "b = g(a)", "a = h(b)")) == [False] * 3
    assert overwritten(_stmts("a = f(p)", "b = g(p)")) == [False, False]
    # a statement that reads what it writes reads the value before it
    assert overwritten(_stmts("a = f(p)", "a = g(a)")) == [False, False]


def test_a_check_of_a_copy_of_a_value_checked_before_is_implied():
    # c copies p (a clone), after p's check: c's check is implied; q's is not
    sweep = _stmts("p = f(a)", "c = g(p)", "q = h(c)")
    assert implied(sweep, [{}, {"c": "p"}, {}], ["p", "c", "q"]) == [False, True, False]
    # p moved after its check: the copy is checked
    sweep = _stmts("p = f(a)", "p = f(b)", "c = g(p)")
    assert implied(sweep, [{}, {}, {"c": "p"}], ["p", None, "c"]) == [False] * 3
    # copied before it is checked: checked
    sweep = _stmts("c = g(p)", "p = f(c)")
    assert implied(sweep, [{"c": "p"}, {}], ["c", "p"]) == [False, False]
    # ... but in every later sweep the copy is of the value the last sweep checked,
    # unless what runs between two sweeps moves it
    assert implied_later(sweep, [{"c": "p"}, {}], ["c", "p"], [([], [])]) == [True, False]
    assert implied_later(sweep, [{"c": "p"}, {}], ["c", "p"],
                         [([], []), (_stmts("p = k(a)"), [{}])]) == [False, False]


# ----- the meaning ---------------------------------------------------------------------
def _whole(compiled):
    """``compiled`` with the program that leaves nothing out."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(python, "LEAN", False)
        mp.setattr(python, "_LAST_DROPPED", (lambda: None, {}))
        mp.setattr(python, "_LAST_STEPS", (lambda: None, {}))  # (remembered per program)
        whole = dataclasses.replace(compiled, generated=type(compiled)._generate_source(
            compiled.compilation.final))
    python._LAST_STEPS = (lambda: None, {})  # (the whole program's: not the lean one's)
    return whole


def _same(compiled, options: dict, sweeps: int) -> None:
    """Lean against whole, bit for bit: every sweep's posteriors, the bounds, the result."""
    whole = _whole(compiled)
    for trace in (True, False):
        seen, result = _run(compiled, options, sweeps, trace)
        whole_seen, expected = _run(whole, options, sweeps, trace)
        assert result.trace == expected.trace
        assert result.log_evidence == expected.log_evidence
        assert all(_identical(s[n], w[n]) for s, w in zip(seen, whole_seen, strict=True)
                   for n in s)
        assert all(_identical(_arrays(result[n]), _arrays(expected[n]))
                   for n in result.posteriors)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_gives_the_same_bits_as_the_whole_program(path):
    runs = _vmp_runs(path)
    assert bool(runs) == (path.stem in VMP_EXAMPLES)
    for compiled, options in runs:
        _same(compiled, options, 6)


@settings(max_examples=12, deadline=None)
@given(k=st.integers(1, 12), n=st.sampled_from([1, 7, 40, 200, 600, 2000]),
       seed=st.integers(0, 5))
def test_mixtures_give_the_same_bits_as_the_whole_program(k, n, seed):
    model, init = _mixture(k, n, seed)
    compiled = model.compile("vmp", init=["means"], fuse_switch=False)  # (the gate path)
    assert len(compiled.source) < len(_whole(compiled).source)
    _same(compiled, {"init": init}, 8)


@pytest.mark.parametrize("algorithm", ["ep", "vmp"])
@pytest.mark.parametrize("name", ["mixture", "clinical_trial", "sprinkler"])
def test_gated_models_give_the_same_bits_under_ep_and_vmp(name, algorithm):
    """The uniform messages left out under EP too (``_silent``: a gate's evidence of 0)."""
    from factorflow.distributions import Gaussian
    from tests.runtime import test_gated_models as gated
    model = {"mixture": gated.mixture, "clinical_trial": gated.clinical_trial,
             "sprinkler": lambda: gated.sprinkler_model(True)}[name]()
    init = {"means": Gaussian(np.array([0.0, 5.0, 10.0]), np.ones(3))} \
        if name == "mixture" else None
    compiled = model.compile(algorithm, init=tuple(init or ()))
    seen, result = _run(compiled, {"init": init}, 6, algorithm == "vmp")
    whole_seen, expected = _run(_whole(compiled), {"init": init}, 6, algorithm == "vmp")
    assert result.log_evidence == expected.log_evidence and result.trace == expected.trace
    assert all(_identical(s[n], w[n]) for s, w in zip(seen, whole_seen, strict=True)
               for n in s)


def test_an_improper_initialisation_is_reported_as_before():
    """The same error as the whole program (``initial`` refuses it before any sweep;
    the first sweeps check a gate's clone of it too, ``swept``)."""
    model, init = _mixture(3, 40)
    compiled = model.compile("vmp", init=["means"])
    means = init["means"]
    bad = {"means": type(means).from_natural(means.eta[0], -np.abs(means.eta[1]))}
    errors = []
    for program in (compiled, _whole(compiled)):
        with pytest.raises(ff.ImproperMessageError) as caught:
            _run(program, {"init": bad}, 3, False)
        errors.append(str(caught.value))
    assert errors[0] == errors[1]


# ----- the text ------------------------------------------------------------------------
def _sweep_of(source: str) -> list[str]:
    """The names each statement of the generated sweep assigns (``check:`` a posterior's
    check), in order; ``if`` a block run only where evidence() has not, ``if first`` one
    run in a run's first sweeps alone."""
    lines = source.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("    for iteration"))
    out = []
    for line in lines[start + 1:]:
        text = line.strip()
        if not line.startswith("        ") or text.startswith("if on_iteration"):
            break
        if text.startswith("#"):
            continue
        if text.startswith("if not refreshed"):
            out.append("if")
        elif text.startswith("if not swept"):
            out.append("if first")
        elif text.startswith("check_proper("):
            out.append("check: " + text[len("check_proper("):].split(",")[0])
        else:
            out.append(text.split(" = ")[0])
    return out


def test_the_mixture_sweep_leaves_out_the_uniform_messages_the_second_clone_and_its_checks():
    """The gate's uniform messages to the cases are gone; the means are entered once a
    sweep (not again after the cases move), their clone checked in the run's first
    sweeps alone (then the means were checked at the end of the last sweep); the
    precisions' clone is not checked (the precisions were, just before)."""
    model, _ = _mixture()
    source = model.compile("vmp", init=["means"], fuse_switch=False).source  # (gate path)
    assert "Gate_EnterOne_cases_average_logarithm" not in source
    assert "Gate_EnterOne_average_log_factor" not in source
    # (a derived variable's one message over its plates is its product with the uniform
    # factor: no product)
    assert "v_z__n_cases__B = fit_plates(v_z__n_cases__use4__B, (v_n, v_k,))" in source
    assert _sweep_of(source) == [
        "v_weights__use0__B", "v_weights__marginal", "check: v_weights__marginal",
        "v_weights__use0__F",
        "if", "v_means__k_cond_z_n__F", "v_means__k_cond_z_n__marginal",
        "v_means__k_cond_z_n__use0__F", "v_z__n_cases__use4__B",
        "if first", "check: v_means__k_cond_z_n__marginal",
        "v_precs__k_cond_z_n__use0__B", "v_precs__k_cond_z_n__B", "v_z__n_cases__B",
        "v_z__use0__B", "v_z__F", "v_z__marginal", "check: v_z__marginal", "v_z__use0__F",
        "v_z__B", "v_z__n_cases__F", "v_z__n_cases__marginal",
        "check: v_z__n_cases__marginal", "v_z__n_cases__use2__F", "v_z__n_cases__use0__F",
        "v_precs__use0__B", "v_precs__marginal", "check: v_precs__marginal",
        "v_precs__use0__F", "v_precs__k_cond_z_n__F", "v_means__use0__F",
        "v_precs__k_cond_z_n__marginal", "v_precs__k_cond_z_n__use0__F", "v_means__k_cond_z_n__use0__B",
        "v_means__k_cond_z_n__B", "v_means__use0__B", "v_means__marginal",
        "check: v_means__marginal", "v_means__use0__F", "refreshed", "swept"]
