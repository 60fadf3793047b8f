"""The expectation algebra: closed forms, checked exactly against enumeration."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from factorflow.errors import ModelError
from factorflow.rewrite.expectations import (
    deterministic_moments,
    expectation,
    moment_atoms,
    simplify_expectation,
    unclosed_moment,
    variance,
)
from factorflow.rewrite.terms import (
    E,
    Elog,
    Elog1m,
    Eloggamma,
    Term,
    V,
    const,
    data,
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
