"""Expression nodes and user factors are named by content (issue 10, item 4): the same
model built twice compiles to the same source, the registry does not grow with every
build, and any parent name works (item 2's naming case)."""

from __future__ import annotations

import numpy as np
import pytest

import factorflow as ff
from factorflow.factors.registry import FACTORS
from tests.conftest import assert_close

DATA = np.array([3.0, 4.0, 5.5])


def build(a_name: str = "a", b_name: str = "b") -> ff.Model:
    """y ~ my_normal(2a + b, 2) with the node s = 2a + b; the parents are called
    ``a_name`` and ``b_name`` inside the formula.  The factor is declared on every call,
    as a notebook cell or a model-building function would."""

    @ff.factor(sample="real", mean="real", precision="positive")
    def node_normal(sample, mean, precision):
        return 0.5 * ff.log(precision) - 0.5 * precision * (sample - mean) ** 2

    formula = eval(f"lambda {a_name}, {b_name}: 2.0 * {a_name} + {b_name}")  # noqa: S307
    with ff.Model("nodes") as model:
        a = ff.Gaussian("a", 0.0, variance=10.0)
        b = ff.Gaussian("b", 1.0, variance=10.0)
        s = ff.Deterministic("s", formula, **{a_name: a, b_name: b})
        n = ff.Range("n", 3)
        with ff.Plate(n):
            node_normal("y", mean=s, precision=2.0, observed=DATA)
    return model


def test_the_same_model_built_twice_compiles_to_the_same_source():
    first, second = build().compile("vmp"), build().compile("vmp")
    assert first.source.encode() == second.source.encode()
    one, two = first.run(iterations=40), second.run(iterations=40)
    for name in ("a", "b", "s"):
        for x, y in zip(one[name].eta, two[name].eta, strict=True):
            assert np.asarray(x).tobytes() == np.asarray(y).tobytes()
    assert repr(one.log_evidence) == repr(two.log_evidence)


def test_building_the_same_model_a_thousand_times_does_not_grow_the_registry():
    build()
    size = len(FACTORS)
    for _ in range(1000):
        build()
    assert len(FACTORS) == size


def test_another_formula_registers_another_node_factor():
    build()
    size = len(FACTORS)
    with ff.Model():
        a = ff.Gaussian("a", 0.0, variance=10.0)
        b = ff.Gaussian("b", 1.0, variance=10.0)
        ff.Deterministic("s", lambda a, b: 3.0 * a + b, a=a, b=b)
        ff.Deterministic("t", lambda a, b: 3.0 * a + b, a=a, b=b)  # the same content again
    assert len(FACTORS) == size + 1


def test_a_factor_declared_again_with_another_formula_is_refused():
    build()
    with pytest.raises(ff.ModelError, match="node_normal.*another formula"):
        @ff.factor(sample="real", mean="real", precision="positive")
        def node_normal(sample, mean, precision):
            return ff.log(precision) - precision * (sample - mean) ** 2


def test_a_node_that_cannot_be_closed_fails_the_same_way_twice():
    for _ in range(2):
        with ff.Model():
            a = ff.Gaussian("a", 0.0, variance=1.0)
            with pytest.raises(ff.ModelError, match="exp"):
                ff.Deterministic("e", lambda a: ff.exp(a) * a, a=a)


@pytest.mark.parametrize("a_name, b_name", [
    ("value", "b"), ("a", "value"), ("eta1", "b"), ("a", "eta2"), ("eta1", "eta2"),
    ("value", "value_"), ("children", "args"), ("sample", "mean"),
])
def test_parents_named_like_internal_parameters(a_name, b_name):
    """The node's output argument and the children's message (η₁, η₂) are named apart from
    the parents: the posterior is the one with harmless parent names."""
    reference = build().infer("vmp", iterations=200)
    result = build(a_name, b_name).infer("vmp", iterations=200)
    for name in ("a", "b", "s"):
        for got, want in zip(result[name].eta, reference[name].eta, strict=True):
            assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert_close(result.log_evidence, reference.log_evidence, rtol=1e-12, atol=1e-12)


def test_the_node_fixed_point_with_a_parent_named_value():
    """The mean-field fixed point of y ~ N(2a + b, 1/2): the normal equations
    (prior precision + 2·3·[[4, 2], [2, 1]]) m = (2·2Σy, 0.1 + 2Σy), solved independently."""
    result = build("value", "b").infer("vmp", iterations=4000)
    lhs = np.array([[0.1 + 24.0, 12.0], [12.0, 0.1 + 6.0]])
    m_a, m_b = np.linalg.solve(lhs, [4.0 * DATA.sum(), 0.1 + 2.0 * DATA.sum()])
    assert_close(result["a"].mean, m_a, rtol=1e-8)
    assert_close(result["b"].mean, m_b, rtol=1e-8)


def test_a_node_of_a_parent_that_is_exactly_zero_is_a_point_mass_not_nan():
    """v2 = 0 · v1 is a point mass at 0, and so is the node v2 · v1 (fuzz seed 13: VMP
    gave it the natural parameters (0 · ∞, ∞), a NaN mean); v1 learns nothing from it.
    EP has no operators for a node: refused naming the statement."""
    with ff.Model("zero") as model:
        v1 = ff.Gaussian("v1", -1.0, precision=2.0)
        v2 = v1 * 0.0
        ff.Gaussian("v3", v2, precision=2.0, observed=0.0)
        ff.Deterministic("v4", lambda a, b: a * b, a=v2, b=v1)
    result = model.infer("vmp", iterations=10)
    assert not any(np.isnan(e).any() for e in result["v4"].eta)
    assert_close([result["v4"].mean, result["v4"].variance], [0.0, 0.0])
    assert_close([result["v1"].mean, result["v1"].variance], [-1.0, 0.5])
    assert_close(result.log_evidence, 0.5 * np.log(2.0 / (2 * np.pi)))
    with pytest.raises(ff.UnsupportedFactorError, match=r'Deterministic\("v4".*no EP message'):
        model.compile("ep")
