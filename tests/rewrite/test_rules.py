"""Every rule fires on an instance of its left side, and both sides agree numerically.

Algebra rules are checked on random values; expectation rules by exact enumeration over
independent discrete posteriors (tests/rewrite/exact.py). A rule that does not fire on
its own left side, or changes the value, fails here.
"""

from __future__ import annotations

import numpy as np
import pytest

from factorflow.rewrite.evaluate import evaluate
from factorflow.rewrite.match import Rule
from factorflow.rewrite.rules import ALGEBRA, EXPECTATION, SEED
from factorflow.rewrite.terms import DIGAMMA, LGAMMA, LOG, data, sym
from tests.conftest import assert_close
from tests.rewrite.exact import exact_value, random_posterior
from tests.rewrite.instances import firing_instance

SHAPES = {"e_index": {"a": (3,)}, "v_index": {"a": (3,)}, "e_dot": {"a": (3,), "b": (3,)},
          "e_matmul": {"a": (3, 3), "b": (3,)}, "e_logdet": {"x": (3, 3)}, "e_isum": {"a": (3,)},
          "e_outer": {"x": (3,)}}
#: rules on vectors: every symbol and datum is a 3-vector, except these 3×3 matrices
VECTOR_RULES = {"c_const", "c_sum", "c_scale", "c_matmul", "v_matmul", "v_dot", "v_dot_right",
                "e_square_matmul", "e_square_dot", "e_square_dot_right", "e_dot_self",
                "e_quadratic", "e_quadratic_left"}
MATRICES = {("c_matmul", "a_d"), ("v_matmul", "a_d"), ("e_square_matmul", "a_d"),
            ("e_quadratic", "b_"), ("e_quadratic_left", "b_")}


def _shape(rule_name: str, name: str) -> tuple[int, ...]:
    if (rule_name, name) in MATRICES:
        return (3, 3)
    if rule_name in VECTOR_RULES:
        return (3,)
    return SHAPES.get(rule_name, {}).get(name.rstrip("_"), ())


def _uses_logs(r: Rule) -> bool:
    text = f"{r.lhs} {r.rhs}"
    return bool(r.positive) or any(f"{op}(" in text for op in (LOG, LGAMMA, DIGAMMA))


@pytest.mark.parametrize("r", [*SEED, *ALGEBRA], ids=lambda r: r.name)
def test_algebra_rule_preserves_values(r: Rule):
    lhs, results = firing_instance(r, {n: [sym(f"{n}_")] for n in "ab"})
    rng = np.random.default_rng(abs(hash(r.name)) % 2**32)
    domains = [(0.1, 0.9)] if _uses_logs(r) else [(0.1, 0.9), (-2.0, 2.0)]
    for low, high in domains:
        env = {name: rng.uniform(low, high, size=6) for name in lhs.symbols}
        for rhs in results:
            assert_close(evaluate(rhs, env), evaluate(lhs, env), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("r", list(EXPECTATION), ids=lambda r: r.name)
def test_expectation_rule_is_exact_under_independent_posteriors(r: Rule):
    rng = np.random.default_rng(abs(hash(r.name)) % 2**32)
    candidates = {n: [sym(f"{n}_"), sym(f"{n}_") * sym(f"{n}2"), data(f"{n}_d")] for n in "ab"}
    lhs, results = firing_instance(r, candidates)
    posteriors = {}
    for name in lhs.symbols:
        shape = _shape(r.name, name)
        posteriors[name] = random_posterior(rng, shape, points=2 if shape else 3)
    env = {name: rng.uniform(0.1, 0.9, size=_shape(r.name, name)) for name in lhs.symbols
           if name.endswith("_d")}
    expected = exact_value(lhs, posteriors, env)
    for rhs in results:
        assert_close(exact_value(rhs, posteriors, env), expected, rtol=1e-12, atol=1e-12)


def test_every_ruleset_has_unique_names_and_printable_rules():
    for ruleset in (SEED, ALGEBRA, EXPECTATION):
        names = [r.name for r in ruleset]
        assert len(names) == len(set(names))
        assert all(" -> " in str(r) for r in ruleset)
    assert str(SEED["log_exp"]) == "log_exp: log(exp(?a)) -> ?a"
