"""The expectation algebra: closed forms, checked exactly against enumeration."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from factorflow.errors import ModelError
from factorflow.rewrite.evaluate import evaluate
from factorflow.rewrite.expectations import (
    deterministic_moments,
    expectation,
    moment_atoms,
    simplify_expectation,
    unclosed_moment,
    variance,
)
from factorflow.rewrite.terms import (
    C,
    E,
    Elog,
    Elog1m,
    Eloggamma,
    Term,
    V,
    const,
    data,
    dot,
    exp,
    lgamma,
    log,
    matmul,
    sym,
)
from tests.conftest import assert_close
from tests.rewrite.exact import exact_value, random_posterior

x, y, z, a, p, tau = map(sym, ("x", "y", "z", "a", "p", "tau"))
B = sym("B")


@pytest.mark.parametrize(("term", "closed"), [
    (E(2 * x + 3 * y * z + 1), "1 + 3*E(y)*E(z) + 2*E(x)"),              # linearity, independence
    (E(x**2), "V(x) + E(x)**2"),
    (E(x * x), "V(x) + E(x)**2"),
    (E(3 * data("n")), "3*data(n)"),                                      # E[c] = c
    (E(E(x) * y), "E(x)*E(y)"),
    (E(a + matmul(B, z)), "E(a) + E(B) @ E(z)"),                          # E[a + B z]
    (E(log(p) + 2 * log(1 - p) + lgamma(a)), "Eloggamma(a) + Elog(p) + 2*Elog1m(p)"),
    (V(2 * x + 3 * y - 1), "9*V(y) + 4*V(x)"),                            # V of a linear form
    (V(data("n") * x), "V(x)*data(n)**2"),
    (V(tau * x), "V(tau)*V(x) + V(x)*E(tau)**2 + V(tau)*E(x)**2"),
])
def test_closed_forms_are_golden(term, closed):
    assert str(simplify_expectation(term)) == closed


@pytest.mark.parametrize("term", [
    E(-0.5 * tau * (x - y) ** 2 + 0.5 * log(tau)),
    E((x - y) ** 2 * (z + 1)),
    V(2 * x - y + z * 3 + 1),
    V(x * y + z),
    E(log(p) * x + log(1 - p) * (1 - x) + lgamma(tau + 0) * y),
])
def test_closed_forms_equal_exact_enumeration(term):
    rng = np.random.default_rng(7)
    posteriors = {n: random_posterior(rng) for n in term.symbols}
    closed = simplify_expectation(term)
    assert unclosed_moment(closed) is None
    assert_close(exact_value(closed, posteriors), exact_value(term, posteriors), rtol=1e-12)


def _polynomials() -> st.SearchStrategy[Term]:
    leaves = st.sampled_from([x, y, z]) | st.floats(-3, 3).map(lambda v: const(round(v, 2)))
    return st.recursive(leaves, lambda inner: st.one_of(
        st.tuples(inner, inner).map(lambda ab: ab[0] + ab[1]),
        st.tuples(inner, inner).map(lambda ab: ab[0] - ab[1]),
        st.tuples(inner, inner).map(lambda ab: ab[0] * ab[1]),
    ), max_leaves=6)


@settings(max_examples=40, deadline=None)
@given(_polynomials())
def test_expectation_of_a_random_polynomial_is_exact(poly):
    rng = np.random.default_rng(3)
    posteriors = {n: random_posterior(rng) for n in "xyz"}
    try:
        closed = expectation(poly)
    except ModelError as err:                   # a cube of one variable has no closed form
        assert "**3" in str(err) or "**4" in str(err) or "**5" in str(err)
        return
    assert_close(exact_value(closed, posteriors), exact_value(E(poly), posteriors),
                 rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(("term", "named"), [
    (x * exp(x), "x*exp(x)"),
    (x**3, "x**3"),
    (log(x + y), "log(x + y)"),
    (exp(tau), "exp(tau)"),
])
def test_what_cannot_be_closed_is_named(term, named):
    with pytest.raises(ModelError, match=re.escape(f"cannot express E[{named}]")):
        expectation(term)


def test_deterministic_nodes_get_their_moments_from_the_rules():
    mean, var = deterministic_moments(a + 2 * z)
    assert (str(mean), str(var)) == ("E(a) + 2*E(z)", "V(a) + 4*V(z)")
    assert moment_atoms(var) == {V(a), V(z)}
    assert variance(x) is V(x)
    assert moment_atoms(Elog(p) + Elog1m(p) * Eloggamma(a)) == {Elog(p), Elog1m(p), Eloggamma(a)}


# ----- covariance matrices of linear forms (VinDsl's C) -----------------------------------
def _bernoulli_states(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every 0/1 vector of len(p) independent Bernoulli components and its probability."""
    states = np.array(list(itertools.product([0.0, 1.0], repeat=p.size)))
    return states, np.prod(np.where(states == 1.0, p, 1.0 - p), axis=1)


def test_covariance_of_a_linear_form_equals_exact_enumeration():
    rng = np.random.default_rng(3)
    p, b, a = rng.uniform(0.1, 0.9, 4), rng.normal(size=(2, 4)), rng.normal(size=2)
    z = sym("z")
    closed = simplify_expectation(C(data("a") + 2.5 * matmul(data("B"), z)))
    assert str(closed) == "6.25*((data(B) @ C(z)) @ transpose(data(B)))"
    states, w = _bernoulli_states(p)
    y = a + 2.5 * states @ b.T
    centred = y - w @ y
    exact = (w[:, None] * centred).T @ centred
    env = {"a": a, "B": b, C(z): np.diag(p * (1 - p))}
    assert_close(evaluate(closed, env), exact, rtol=1e-12, atol=1e-14)


def test_quadratic_forms_equal_exact_enumeration():
    rng = np.random.default_rng(4)
    p, a = rng.uniform(0.1, 0.9, 4), rng.normal(size=(4, 4))
    z = sym("z")
    states, w = _bernoulli_states(p)
    env = {"A": a, E(z): p, V(z): p * (1 - p), C(z): np.diag(p * (1 - p))}
    quadratic = simplify_expectation(E(dot(z, matmul(data("A"), z))))
    assert_close(evaluate(quadratic, env), w @ np.einsum("si,ij,sj->s", states, a, states),
                 rtol=1e-12)
    square = simplify_expectation(E(dot(z, z)))
    assert str(square) == "dot(E(z), E(z)) + sum[_i](at(V(z), _i))"
    assert_close(evaluate(square, env), w @ (states**2).sum(axis=1), rtol=1e-12)


def test_covariance_of_independent_sums_and_scalings():
    x, y = sym("x"), sym("y")
    assert str(simplify_expectation(C(x + y + data("a")))) == "C(x) + C(y)"
    assert str(simplify_expectation(C(3.0 * x))) == "9*C(x)"
    assert simplify_expectation(C(data("a"))) == const(0)


@pytest.mark.parametrize(("term", "named"), [
    (C(sym("z") * sym("z")), "C[z**2]"),
    (C(matmul(sym("W"), sym("z"))), "C[W @ z]"),
    (C(sym("z") + sym("z") * sym("w")), "C[z + w*z]"),
])
def test_covariances_that_cannot_be_closed_are_named(term, named):
    with pytest.raises(ModelError, match=re.escape(named)):
        simplify_expectation(term)
