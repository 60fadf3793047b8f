"""Regression tests for the wrong answers of issue 9, each against its exact value.

Every model here once gave a wrong number, NaN or a schedule error; the expected values
are computed independently of the compiler (closed forms, enumeration, Gaussian
conditioning).
"""

from __future__ import annotations

import numpy as np
from scipy import special, stats

import factorflow as ff
from tests.conftest import assert_close


def test_observed_condition_drops_the_inactive_branch_evidence():
    """x ~ N(0, 1), y ~ Bernoulli(0.3) observed False, If(y): x > 1: Z = P(y = False)."""
    with ff.Model() as model:
        x = ff.Gaussian("x", 0.0, variance=1.0)
        y = ff.Bernoulli("y", 0.3, observed=False)
        with ff.If(y):
            ff.constrain_true(x > 1.0)
    result = model.infer("ep")
    assert_close(result.log_evidence, np.log(0.7), atol=1e-10)
    assert_close(result["x"].mean, 0.0, atol=1e-10)


def test_observed_condition_per_plate_element():
    """The same, with y observed per element: only the True elements are truncated."""
    ys = [True, False, True]
    with ff.Model() as model:
        with ff.Plate(ff.Range("n", 3)):
            x = ff.Gaussian("x", 0.0, variance=1.0)
            y = ff.Bernoulli("y", 0.3, observed=ys)
            with ff.If(y):
                ff.constrain_true(x > 1.0)
    result = model.infer("ep")
    tail = stats.norm.sf(1.0)
    expected = 2 * np.log(0.3 * tail) + np.log(0.7)
    assert_close(result.log_evidence, expected, atol=1e-9)
    truncated_mean = stats.norm.pdf(1.0) / tail
    assert_close(result["x"].mean, [truncated_mean, 0.0, truncated_mean], atol=1e-9)


def test_categorical_draw_under_a_flat_dirichlet():
    """EP evidence of one draw z = 1 under w ~ Dirichlet(1, 1, 1) is E[w_1] = 1/3."""
    for k in (2, 3, 5):
        with ff.Model() as model:
            w = ff.Dirichlet("w", np.ones(k))
            ff.Discrete("z", w, observed=1)
        result = model.infer("ep")
        assert_close(result.log_evidence, -np.log(k), atol=1e-10)
        assert_close(result["w"].alpha, 1.0 + np.eye(k)[1], atol=1e-12)


def test_categorical_draws_under_a_dirichlet_against_the_closed_form():
    """Observed draws under Dirichlet(α): Z = B(α + counts) / B(α) (Dirichlet-multinomial
    of the sequence)."""
    alpha = np.array([0.5, 2.0, 1.5, 3.0])
    draws = [0, 3, 3, 1, 2, 3]
    with ff.Model() as model:
        w = ff.Dirichlet("w", alpha)
        with ff.Plate(ff.Range("n", len(draws))):
            ff.Discrete("z", w, observed=draws)
    counts = np.bincount(draws, minlength=4)

    def log_b(a):
        return np.sum(special.gammaln(a)) - special.gammaln(np.sum(a))

    expected = log_b(alpha + counts) - log_b(alpha)
    for algorithm in ("ep",):
        result = model.infer(algorithm)
        assert_close(result.log_evidence, expected, atol=1e-9)
        assert_close(result["w"].alpha, alpha + counts, atol=1e-9)
