"""rewrite.derivative against central finite differences on random points, and its
refusals."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import factorflow as ff
from factorflow.rewrite.derivative import derivative
from factorflow.rewrite.evaluate import evaluate
from factorflow.rewrite.terms import digamma, exp, lgamma, log, sym

x, y = sym("x"), sym("y")
TERMS = {
    "polynomial": 3.0 * x**3 - 2.0 * x * y + y**2,
    "log1p_exp": y * x - log(1 + exp(x)),
    "quotient": x**3 / (1 + x**2),
    "x_exp_x": x * exp(-0.5 * x) + exp(x * y),
    "power_of_x": (1.5 + x**2) ** (0.5 * y),
}


@pytest.mark.parametrize("name", sorted(TERMS))
@given(st.floats(-2.0, 2.0), st.floats(0.2, 2.0))
@settings(max_examples=20, deadline=None, derandomize=True)
def test_first_and_second_derivatives_match_finite_differences(name, at, other):
    term = TERMS[name]
    first = derivative(term, "x")
    second = derivative(first, "x")

    def value(t, point):
        return float(evaluate(t, {"x": np.array(point), "y": np.array(other)}))

    h = 1e-4
    fd1 = (value(term, at + h) - value(term, at - h)) / (2 * h)
    fd2 = (value(first, at + h) - value(first, at - h)) / (2 * h)
    assert abs(value(first, at) - fd1) < 1e-6 * (1 + abs(fd1))
    assert abs(value(second, at) - fd2) < 1e-6 * (1 + abs(fd2))


def test_lgamma_has_the_digamma_derivative():
    first = derivative(lgamma(2.0 + x**2), "x")
    point = {"x": np.array(0.7)}
    h = 1e-5
    fd = (float(evaluate(lgamma(2.0 + x**2), {"x": np.array(0.7 + h)}))
          - float(evaluate(lgamma(2.0 + x**2), {"x": np.array(0.7 - h)}))) / (2 * h)
    assert abs(float(evaluate(first, point)) - fd) < 1e-8


def test_a_term_without_the_symbol_has_derivative_zero():
    assert float(evaluate(derivative(y * exp(y), "x"), {"y": np.array(1.0)})) == 0.0


def test_digamma_is_refused_by_name():
    with pytest.raises(ff.ModelError, match=r"cannot differentiate digamma\(x\).*not digamma"):
        derivative(digamma(x) * y, "x")
