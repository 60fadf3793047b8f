"""Evaluation of terms: vectorized arithmetic, named axes, atoms from the environment."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special

from factorflow.errors import ModelError
from factorflow.rewrite.evaluate import evaluate, evaluate_named
from factorflow.rewrite.terms import (
    SUM,
    C,
    E,
    Elog,
    Term,
    V,
    at,
    const,
    data,
    digamma,
    dot,
    exp,
    index_sum,
    lgamma,
    log,
    logdet,
    matmul,
    sym,
    transpose,
    var,
)
from tests.conftest import assert_close

rng = np.random.default_rng(0)
x, y, tau = sym("x"), sym("y"), sym("tau")


def test_scalar_formulas_vectorize_over_arrays():
    xs, ys, ts = rng.normal(size=50), rng.normal(size=50), rng.uniform(0.5, 2, size=50)
    g = -0.5 * tau * (x - y) ** 2 + 0.5 * log(tau) - 0.5 * log(2 * np.pi)
    expected = -0.5 * ts * (xs - ys) ** 2 + 0.5 * np.log(ts) - 0.5 * np.log(2 * np.pi)
    assert_close(evaluate(g, {"x": xs, "y": ys, "tau": ts}), expected)
    h = lgamma(tau) + digamma(tau) + exp(x) / (1 + y**2) - (-x)
    assert_close(evaluate(h, {x: xs, y: ys, tau: ts}),
                 special.gammaln(ts) + special.digamma(ts) + np.exp(xs) / (1 + ys**2) + xs)


def test_named_plate_indices_align_by_name():
    a = rng.normal(size=(3, 4))          # x[i, j]
    b = rng.normal(size=(4, 3))          # w[j, i]
    c = rng.normal(size=4)               # v[j]
    t = sym("x", "i", "j") * sym("w", "j", "i") + sym("v", "j")
    out, names = evaluate_named(t, {"x": a, "w": b, "v": c})
    assert names == ("i", "j")
    assert_close(out, a * b.T + c[None, :])
    summed = index_sum(t, "j")
    assert_close(evaluate(summed, {"x": a, "w": b, "v": c}), (a * b.T + c).sum(axis=1))


def test_inner_axes_are_named_by_at_and_contracted_by_dot_and_matmul():
    z, theta = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
    t = index_sum(at(sym("z"), "k") * log(at(sym("theta"), "k")), "k")
    assert_close(evaluate(t, {"z": z, "theta": theta}), z @ np.log(theta))
    assert_close(evaluate(dot(sym("z"), log(sym("theta"))), {"z": z, "theta": theta}),
                 z @ np.log(theta))
    big_b, v = rng.normal(size=(3, 5)), rng.normal(size=5)
    assert_close(evaluate(matmul(sym("B"), sym("v")), {"B": big_b, "v": v}), big_b @ v)
    m = rng.normal(size=(5, 5))
    assert_close(evaluate(matmul(sym("B"), sym("M")), {"B": big_b, "M": m}), big_b @ m)
    spd = m @ m.T + 5 * np.eye(5)
    assert_close(evaluate(logdet(sym("L")), {"L": spd}), np.linalg.slogdet(spd)[1])


def test_covariance_atoms_are_matrices_over_the_plate_axes():
    """The shapes the covariance rules produce: B C Bᵀ per plate element, its diagonal as
    dot(B C, B), and tr(A C) as sum[_i](at(dot(A, C), _i)) for a symmetric C."""
    g = rng.normal(size=(2, 4, 4))
    cov = g @ np.swapaxes(g, 1, 2)                               # C(z[i]): two 4×4 matrices
    big_b, a = rng.normal(size=(3, 4)), rng.normal(size=(4, 4))
    env = {C(sym("z", "i")): cov, "B": big_b, "A": a}
    czi, b = C(sym("z", "i")), data("B")
    assert_close(evaluate(matmul(matmul(b, czi), transpose(b)), env), big_b @ cov @ big_b.T)
    assert_close(evaluate(dot(matmul(b, czi), b), env),
                 np.diagonal(big_b @ cov @ big_b.T, axis1=1, axis2=2))
    trace = index_sum(at(dot(data("A"), czi), "_i"), "_i")
    assert_close(evaluate(trace, env), np.trace(a @ cov, axis1=1, axis2=2))
    zero_plus = Term(SUM, (czi, const(0)))                       # C of a constant broadcasts
    assert_close(evaluate(zero_plus, env), cov, atol=0)


def test_moments_and_pattern_variables_are_atoms():
    env = {E(x): 2.0, V(x): 0.5, Elog(tau): -0.1, var("a"): 3.0, data("n"): 4.0}
    t = V(x) + E(x) ** 2 + Elog(tau) * var("a") + data("n")
    assert_close(evaluate(t, env), 0.5 + 4.0 - 0.3 + 4.0)


def test_constants_and_shared_subterms():
    s = log(x + 1)
    t = s * s + const(3)
    assert_close(evaluate(t, {"x": np.array([0.0, 1.0])}), np.log([1.0, 2.0]) ** 2 + 3)


def test_missing_atoms_and_bad_indices_are_model_errors():
    with pytest.raises(ModelError, match="no value given for E"):
        evaluate(E(x) + 1, {"x": 1.0})
    with pytest.raises(ModelError, match="does not carry"):
        evaluate(index_sum(x, "k"), {"x": np.ones(3)})
    with pytest.raises(ModelError, match="no positional axis"):
        evaluate(at(sym("x", "i"), "k"), {"x": np.ones(3)})
    with pytest.raises(ModelError, match="index k has size 3 in one operand and 4 in another"):
        evaluate(index_sum(at(x, "k") * at(sym("y"), "k"), "k"),
                 {"x": np.ones(3), "y": np.ones(4)})
