"""The expectation algebra: closed forms, checked exactly against enumeration."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from factorflow.distributions import Bernoulli, Discrete, moments
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


# ----- covariance matrices, second moments and quadratic forms of vectors ---------------
m, w, L = sym("m"), sym("w"), sym("L")                  # vectors, and L a random matrix
A, Bd, ad, bd, t = data("A"), data("B"), data("a"), data("b"), data("t")

VECTOR_FORMS = [
    (C(ad + 2.5 * matmul(Bd, z)), "6.25*((data(B) @ C(z)) @ transpose(data(B)))"),
    (C(2 * z + ad), "4*C(z)"),                                      # C[c z + a] = c² C[z]
    (C(x + y + ad), "C(x) + C(y)"),                                 # independent x, y
    (C(matmul(Bd, x) - y), "C(y) + (data(B) @ C(x)) @ transpose(data(B))"),
    (C(matmul(Bd, matmul(A, z))),
     "(data(B) @ ((data(A) @ C(z)) @ transpose(data(A)))) @ transpose(data(B))"),
    (V(matmul(Bd, z) + ad), "dot(data(B) @ C(z), data(B))"),       # diag(B C[z] Bᵀ)
    (V(dot(bd, z)), "dot(data(b), C(z) @ data(b))"),
    (V(dot(z, bd)), "dot(data(b), C(z) @ data(b))"),
    (E((t - dot(bd, z)) ** 2),                                      # a regression's error
     "dot(data(b), C(z) @ data(b)) + data(t)**2 + dot(data(b), E(z))**2"
     " - 2*data(t)*dot(data(b), E(z))"),
    (E((ad - matmul(Bd, z)) ** 2),
     "dot(data(B) @ C(z), data(B)) + data(a)**2 + (data(B) @ E(z))**2"
     " - 2*data(a)*(data(B) @ E(z))"),
    (E(dot(z, z)), "dot(E(z), E(z)) + sum[_i](at(V(z), _i))"),
    (E(dot(matmul(Bd, z) + ad, matmul(Bd, z) + ad)),
     "dot(data(a) + data(B) @ E(z), data(a) + data(B) @ E(z))"
     " + sum[_i](at(dot(data(B) @ C(z), data(B)), _i))"),
    (E(dot(z * w, z * w)),
     "dot(E(w)*E(z), E(w)*E(z)) + sum[_i](at(V(z)*E(w)**2 + V(w)*V(z) + V(w)*E(z)**2, _i))"),
    (E(dot(z, matmul(A, z))),
     "dot(E(z), data(A) @ E(z)) + sum[_i](at(dot(data(A), C(z)), _i))"),
    (E(dot(matmul(A, z), z)),
     "dot(E(z), data(A) @ E(z)) + sum[_i](at(dot(data(A), C(z)), _i))"),
    (E(dot(x - m, matmul(L, x - m))),                               # VinDsl's MvNormal factor
     "sum[_i](at(dot(E(L), C(m) + C(x)), _i)) + dot(E(x) - E(m), E(L) @ (E(x) - E(m)))"),
]


@pytest.mark.parametrize(("term", "closed"), VECTOR_FORMS, ids=lambda v: str(v)[:40])
def test_vector_closed_forms_are_golden(term, closed):
    assert str(simplify_expectation(term)) == closed


@pytest.mark.parametrize("term", [f for f, _ in VECTOR_FORMS], ids=lambda v: str(v)[:40])
def test_vector_closed_forms_equal_exact_enumeration(term):
    """Each symbol a discrete posterior over 3 whole vectors (correlated components) or, for
    L, 3 symmetric positive definite matrices; every moment summed over the joint support."""
    rng = np.random.default_rng(11)
    posteriors = {n: random_posterior(rng, (3, 3) if n == "L" else (3,))
                  for n in sorted(term.args[0].random_symbols)}
    env = {"A": rng.normal(size=(3, 3)), "B": rng.normal(size=(3, 3)),
           "a": rng.normal(size=3), "b": rng.normal(size=3), "t": rng.normal()}
    closed = simplify_expectation(term)
    assert unclosed_moment(closed) is None
    assert_close(exact_value(closed, posteriors, env), exact_value(term, posteriors, env),
                 rtol=1e-12, atol=1e-13)


def _bernoulli_states(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every 0/1 vector of len(p) independent Bernoulli components and its probability."""
    states = np.array(list(itertools.product([0.0, 1.0], repeat=p.size)))
    return states, np.prod(np.where(states == 1.0, p, 1.0 - p), axis=1)


def _covariance(values: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Σ_s p_s (y_s - E y)(y_s - E y)ᵀ over the states s."""
    centred = values - probs @ values
    return (probs[:, None] * centred).T @ centred


def _moments_of(name: str, q: Bernoulli) -> dict[Term, np.ndarray]:
    """The atoms of ``name`` from its posterior, as the compiled factors get them."""
    v = sym(name)
    return {E(v): moments.E(q), V(v): moments.V(q), C(v): moments.C(q)}


def test_covariance_of_a_linear_form_of_bernoulli_vectors_equals_enumeration():
    rng = np.random.default_rng(3)
    p, b, a = rng.uniform(0.1, 0.9, 4), rng.normal(size=(2, 4)), rng.normal(size=2)
    closed = simplify_expectation(C(ad + 2.5 * matmul(Bd, z)))
    states, prob = _bernoulli_states(p)
    env = {"a": a, "B": b, **_moments_of("z", Bernoulli(p))}
    assert_close(evaluate(closed, env), _covariance(a + 2.5 * states @ b.T, prob),
                 rtol=1e-12, atol=1e-14)


def test_covariance_of_independent_bernoulli_vectors_equals_enumeration():
    """C[c x + a] and C[x - 2 y + a] over all 2^4 · 2^4 joint states of x and y."""
    rng = np.random.default_rng(5)
    px, py, a = rng.uniform(0.1, 0.9, 4), rng.uniform(0.1, 0.9, 4), rng.normal(size=4)
    sx, wx = _bernoulli_states(px)
    sy, wy = _bernoulli_states(py)
    joint_x, joint_y = np.repeat(sx, len(sy), axis=0), np.tile(sy, (len(sx), 1))
    joint_w = np.outer(wx, wy).ravel()
    env = {"a": a, **_moments_of("x", Bernoulli(px)), **_moments_of("y", Bernoulli(py))}
    scaled = simplify_expectation(C(-1.5 * x + ad))
    assert_close(evaluate(scaled, env), _covariance(a - 1.5 * sx, wx), rtol=1e-12, atol=1e-15)
    summed = simplify_expectation(C(x - 2 * y + ad))
    assert str(summed) == "C(x) + 4*C(y)"
    assert_close(evaluate(summed, env), _covariance(a + joint_x - 2 * joint_y, joint_w),
                 rtol=1e-12, atol=1e-15)


def test_quadratic_forms_of_bernoulli_vectors_equal_enumeration():
    rng = np.random.default_rng(4)
    p, a = rng.uniform(0.1, 0.9, 4), rng.normal(size=(4, 4))
    states, prob = _bernoulli_states(p)
    env = {"A": a, **_moments_of("z", Bernoulli(p))}
    quadratic = simplify_expectation(E(dot(z, matmul(A, z))))
    assert_close(evaluate(quadratic, env), prob @ np.einsum("si,ij,sj->s", states, a, states),
                 rtol=1e-12)
    square = simplify_expectation(E(dot(z, z)))
    assert_close(evaluate(square, env), prob @ (states**2).sum(axis=1), rtol=1e-12)


def test_quadratic_form_of_a_one_hot_vector_equals_enumeration():
    """z one-hot with Discrete probabilities p: E[zᵀ A z] = Σ_k p_k A_kk over the K outcomes."""
    rng = np.random.default_rng(6)
    q, a = Discrete(np.array([0.1, 0.2, 0.3, 0.4])), rng.normal(size=(4, 4))
    env = {"A": a, E(z): moments.Eonehot(q, 4), C(z): moments.C(q)}
    closed = simplify_expectation(E(dot(matmul(A, z), z)))
    exact = sum(pk * e @ a @ e for pk, e in zip(q.probs, np.eye(4), strict=True))
    assert_close(evaluate(closed, env), exact, rtol=1e-12)


def test_covariances_of_a_plate_of_vectors_keep_the_plate_axis():
    """C[a + B z[i]] for a plate of two Bernoulli vectors: one matrix per plate element."""
    rng = np.random.default_rng(8)
    p, b, a = rng.uniform(0.1, 0.9, (2, 4)), rng.normal(size=(3, 4)), rng.normal(size=3)
    zi = sym("z", "i")
    closed = simplify_expectation(C(ad + matmul(Bd, zi)))
    assert str(closed) == "(data(B) @ C(z[i])) @ transpose(data(B))"
    value = evaluate(closed, {"a": a, "B": b, C(zi): moments.C(Bernoulli(p))})
    assert value.shape == (2, 3, 3)
    for row, cov in zip(p, value, strict=True):
        states, prob = _bernoulli_states(row)
        assert_close(cov, _covariance(a + states @ b.T, prob), rtol=1e-12, atol=1e-14)


def test_the_covariance_of_a_constant_is_a_zero_that_broadcasts():
    assert simplify_expectation(C(ad + matmul(Bd, ad))) == const(0)
    assert str(simplify_expectation(C(ad) + C(z))) == "C(z)"
    assert_close(evaluate(C(z) + simplify_expectation(C(ad)), {C(z): np.eye(3)}), np.eye(3),
                 atol=0)


@pytest.mark.parametrize(("term", "named"), [
    (C(z * z), "C[z**2]"),                                      # an elementwise square
    (C(matmul(sym("W"), z)), "C[W @ z]"),                       # a random matrix
    (C(z + z * w), "C[z + w*z]"),                               # parts sharing z
    (C(data("d") * z), "C[data(d)*z]"),                         # elementwise scaling
    (E(dot(z, matmul(sym("W") * z, z))), "E[dot(z, (W*z) @ z)]"),  # B shares z
])
def test_vector_moments_that_cannot_be_closed_are_named(term, named):
    with pytest.raises(ModelError, match=re.escape(f"cannot express {named}")):
        simplify_expectation(term)
