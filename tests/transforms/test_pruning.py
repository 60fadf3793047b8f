"""Pruning of always-uniform messages (seed 000), by golden text and by meaning."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import stats

import factorflow as ff
from factorflow.factors.registry import FACTORS
from factorflow.transforms.pruning import always_uniform, certain_uses
from tests.conftest import assert_close


def _unobserved_child() -> ff.Model:
    with ff.Model("child") as model:
        x = ff.Gaussian("x", 0.0, variance=1.0)
        ff.Gaussian("y", x, precision=1.0)
        ff.Gaussian("z", x, precision=1.0, observed=2.0)
    return model


def test_message_up_from_an_unobserved_leaf_is_pruned_under_ep():
    compiled = _unobserved_child().compile("ep")
    uniform = always_uniform(compiled.compilation.stages["messages"])
    assert uniform == {"v_y__B", "v_x__use0__B"}
    assert "v_x__use0__B =" not in compiled.source.split("# every message starts uniform")[1] \
        .split("log_evidence = 0.0")[1]
    result = compiled.run()
    # the leaf carries no information: x's posterior uses z alone
    assert_close(result["x"].mean, 1.0, rtol=1e-12)
    assert_close(result["x"].variance, 0.5, rtol=1e-12)
    assert_close(result["y"].variance, 1.5, rtol=1e-12)


def test_nothing_is_pruned_when_everything_carries_information():
    with ff.Model("full") as model:
        x = ff.Gaussian("x", 0.0, variance=1.0)
        ff.Gaussian("z", x, precision=1.0, observed=2.0)
    assert always_uniform(model.compile("ep").compilation.stages["messages"]) == set()


# ----- posteriors fixed by a certain message (ff.constrain_true under EP) --------------
def _races() -> ff.Model:
    with ff.Model("races") as model:
        mu = ff.Gaussian("mu", 0.0, variance=4.0)
        with ff.Plate(ff.Range("n", 5)):
            x = ff.Gaussian("x", mu, variance=1.0)
            ff.constrain_true(x > np.array([0.3, -1.0, 2.0, 0.0, 1.5]))
    return model


def _or_of_two() -> ff.Model:
    """c ~ Bernoulli(0.3), d ~ Bernoulli(0.6), constrain_true(c), constrain_true(c | d)."""
    with ff.Model("or") as model:
        c = ff.Bernoulli("c", 0.3)
        d = ff.Bernoulli("d", 0.6)
        ff.constrain_true(c)
        ff.constrain_true(c | d)
    return model


def test_a_constraint_fixes_its_posterior_and_takes_the_message_out_of_the_loop():
    compiled = _races().compile("ep")
    fixed = certain_uses(compiled.compilation.stages["messages"])
    assert len(fixed) == 1
    assert fixed == {d.name: ("use0",) for d in compiled.compilation.final.decls
                     if d.role == "random" and d.label.startswith("(x >")}
    loop = compiled.source.split("# ---- iterations")[1].split("if iterations == 0")[0]
    assert "Greater_out_average_conditional" not in loop
    assert "Greater_out_average_conditional" in compiled.source  # for the evidence


@pytest.mark.parametrize("model", [_races, _or_of_two], ids=["greater", "bernoulli-or"])
def test_fixed_posteriors_give_the_numbers_of_the_full_update(model, monkeypatch):
    """The same posteriors and evidence as the variable's full update, to rounding."""
    fixed = model().infer("ep", iterations=30, tolerance=None)
    ops = FACTORS["ConstrainTrue"].operators
    monkeypatch.setitem(ops, ("ep", "value"),
                        dataclasses.replace(ops[("ep", "value")], certain=False))
    full = model().infer("ep", iterations=30, tolerance=None)
    assert_close(fixed.log_evidence, full.log_evidence, rtol=1e-12)
    for name in full.posteriors:
        for a, b in zip(fixed[name].eta, full[name].eta, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_a_constrained_bernoulli_by_enumeration():
    """P(c, c | d) = P(c) = 0.3; given the constraints c is certain and d keeps its prior."""
    result = _or_of_two().infer("ep")
    assert_close(np.exp(result.log_evidence), 0.3, rtol=1e-12)
    assert_close(result["c"].mean, 1.0, rtol=0, atol=0)
    assert_close(result["d"].mean, 0.6, rtol=1e-12)


def test_a_truncated_gaussian_by_closed_form():
    """x ~ N(0, 1), constrain_true(x > 0.5): evidence Φ(−0.5), posterior the truncated
    normal's moments (the bool's posterior the point mass)."""
    with ff.Model("one") as model:
        x = ff.Gaussian("x", 0.0, variance=1.0)
        ff.constrain_true(x > 0.5)
    result = model.infer("ep")
    truncated = stats.truncnorm(0.5, np.inf)
    assert_close(result.log_evidence, stats.norm.logsf(0.5), rtol=1e-12)
    assert_close(result["x"].mean, truncated.mean(), rtol=1e-10)
    assert_close(result["x"].variance, truncated.var(), rtol=1e-10)
    assert_close(result["(x > 0.5)"].mean, 1.0, rtol=0, atol=0)
