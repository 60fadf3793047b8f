"""The JAX backend against the NumPy backend: same posteriors, evidence, sweeps."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import factorflow as ff

pytest.importorskip("jax")

EXAMPLES = Path(__file__).parents[3] / "examples"
sys.path.insert(0, str(EXAMPLES))

TOL = 1e-10


def assert_same(model: ff.Model, algorithm: str, compile_options: dict | None = None,
                **run) -> tuple:
    """Both backends on ``model``: posteriors (natural parameters), log evidence, trace,
    sweeps and convergence agree; returns the two results."""
    options = compile_options or {}
    a = model.compile(algorithm, **options).run(**run)
    b = model.compile(algorithm, backend="jax", **options).run(**run)
    assert a.iterations == b.iterations and a.converged == b.converged
    assert set(a.posteriors) == set(b.posteriors) if hasattr(a, "posteriors") else True
    for name in model.variables:
        pa, pb = a[name], b[name]
        if not hasattr(pa, "eta"):
            continue
        assert type(pa) is type(pb)
        for x, y in zip(pa.eta, pb.eta, strict=True):
            x, y = np.asarray(x), np.asarray(y)
            same_inf = np.isinf(x) & (x == y)
            diff = np.where(same_inf, 0.0, np.abs(x - y) / (1.0 + np.abs(x)))
            assert np.max(diff, initial=0.0) < TOL, (name, x, y)
    assert abs(a.log_evidence - b.log_evidence) <= TOL * (1 + abs(a.log_evidence))
    np.testing.assert_allclose(b.trace, a.trace, rtol=TOL, atol=TOL)
    return a, b


def test_learning_gaussian_vmp():
    import learning_gaussian
    model = learning_gaussian.build(np.random.default_rng(0).normal(3, 2, 50))
    assert_same(model, "vmp")
    assert_same(model, "vmp", iterations=0)
    assert_same(model, "vmp", iterations=3, tolerance=None)


def test_gaussian_mixture_vmp():
    import gaussian_mixture as gm
    x = gm.data(120)
    model = gm.mixture(x, 3)
    start = ff.distributions.VectorGaussian(gm.CENTERS + 0.5,
                                            np.broadcast_to(np.eye(2), (3, 2, 2)))
    assert_same(model, "vmp", {"init": ["means"]}, init={"means": start}, iterations=500)


def test_linear_regression_ep_vmp():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + rng.normal(size=40) / 2
    with ff.Model("linear_regression") as model:
        design = ff.Data("X", X)
        w = ff.VectorGaussian("w", 0.0, precision=np.eye(3))
        with ff.Plate(ff.Range("n", 40)):
            ff.Gaussian("y", design @ w, precision=4.0, observed=y)
    assert_same(model, "ep")
    assert_same(model, "vmp")
    with ff.Model("linear_regression_noise") as noisy:
        w = ff.VectorGaussian("w", 0.0, precision=np.eye(3))
        noise = ff.Gamma("tau", 1.0, rate=1.0)
        with ff.Plate(ff.Range("n", 40)):
            ff.Gaussian("y", X @ w, precision=noise, observed=y)
    assert_same(noisy, "vmp", iterations=200)


def test_truncated_gaussian_ep():
    with ff.Model("truncated_gaussian") as model:
        ff.Data("threshold", 0.5)
        x = ff.Gaussian("x", 0.0, variance=1.0)
        ff.constrain_true(x > model.data["threshold"] if hasattr(model, "data") else x > 0.5)
    for t in (0.0, 0.5, 5.0):
        assert_same(model, "ep", data={"threshold": t})


def test_two_coins_ep():
    with ff.Model("two_coins") as model:
        first = ff.Bernoulli("first", 0.5)
        second = ff.Bernoulli("second", 0.5)
        _ = first & second
    assert_same(model, "ep")
    with ff.Model("two_coins_not_both") as conditioned:
        first = ff.Bernoulli("first", 0.5)
        second = ff.Bernoulli("second", 0.5)
        ff.constrain_true(~(first & second))
    assert_same(conditioned, "ep")


def test_clinical_trial_ep_vmp():
    import clinical_trial
    assert_same(clinical_trial.build(), "ep")
    assert_same(clinical_trial.build(), "vmp")
