"""Stochastic variational inference (``model.infer("svi", ...)``) against closed forms."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import factorflow as ff
from factorflow.runtime.svi import learning_rates


def _normal_gamma(x: np.ndarray) -> ff.Model:
    with ff.Model("normal_gamma") as model:
        mean = ff.Gaussian("mean", 0.0, variance=100.0)
        prec = ff.Gamma("prec", 1.0, rate=1.0)
        with ff.Plate(ff.Range("n", x.size)):
            ff.Gaussian("x", mean, precision=prec, observed=x)
    return model


def _known_precision(x: np.ndarray, tau: float) -> ff.Model:
    with ff.Model("known_precision") as model:
        mean = ff.Gaussian("mean", 0.0, variance=100.0)
        with ff.Plate(ff.Range("n", x.size)):
            ff.Gaussian("x", mean, precision=tau, observed=x)
    return model


def _coordinate_ascent(x: np.ndarray, shape: float, rate: float) -> tuple:
    """One VMP sweep of the Normal-Gamma model by hand, in the schedule's order: q(mean)
    from q(prec), then q(prec) from the new q(mean)."""
    e_prec = shape / rate
    precision = 1 / 100 + x.size * e_prec
    m = e_prec * x.sum() / precision
    return m, 1 / precision, 1 + x.size / 2, 1 + 0.5 * np.sum((x - m) ** 2 + 1 / precision)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(2, 30), steps=st.integers(1, 4), seed=st.integers(0, 10**6))
def test_full_batch_unit_steps_are_vmp_sweeps(n, steps, seed):
    """B = N and ρ = 1 (kappa = 0): each step is one VMP sweep, to 1e-10."""
    x = np.random.default_rng(seed).normal(2.0, 1.5, n)
    result = _normal_gamma(x).infer("svi", minibatch=n, steps=steps, learning_rate=(1, 0),
                                    rng=seed)
    shape, rate = 1.0, 1.0
    for _ in range(steps):
        m, v, shape, rate = _coordinate_ascent(x, shape, rate)
    np.testing.assert_allclose(result["mean"].mean, m, rtol=1e-10)
    np.testing.assert_allclose(result["mean"].variance, v, rtol=1e-10)
    np.testing.assert_allclose(result["prec"].shape, shape, rtol=1e-10)
    np.testing.assert_allclose(result["prec"].rate, rate, rtol=1e-10)
    assert result.iterations == steps and result.algorithm == "svi"


def test_minibatches_converge_to_the_vmp_posterior():
    """Known precision: λ̂ is unbiased for the exact posterior's natural parameters, so
    after T steps the posterior mean is off by Σ_t w_t (λ̂_t − λ*) / P, whose standard
    deviation follows from the sampling variance of a minibatch sum (without
    replacement) and the step weights w_t = ρ_t Π_{s>t} (1 − ρ_s).  The error must be
    within 4 of those; the posterior precision is exact."""
    n, batch, steps, tau = 2_000, 200, 400, 0.25
    x = np.random.default_rng(3).normal(3.0, 2.0, n)
    model = _known_precision(x, tau)
    exact = model.infer("vmp")["mean"]
    result = model.infer("svi", minibatch=batch, steps=steps, learning_rate=(1.0, 0.7),
                         rng=1)["mean"]
    rho = learning_rates(steps, (1.0, 0.7))
    weights = rho * np.append(np.cumprod((1 - rho)[::-1])[::-1][1:], 1.0)
    var_hat = (n / batch) ** 2 * tau**2 * batch * x.var() * (n - batch) / (n - 1)
    precision = 1 / 100 + n * tau
    sd = np.sqrt(np.sum(weights**2) * var_hat) / precision
    np.testing.assert_allclose(result.variance, exact.variance, rtol=1e-12)
    assert abs(result.mean - exact.mean) <= 4 * sd, (result.mean, exact.mean, sd)
    assert sd < 0.3 * np.sqrt(exact.variance)  # tight beside the posterior's spread
    # a single minibatch step, by contrast, is off by far more than that
    one = model.infer("svi", minibatch=batch, steps=1, rng=1)["mean"]
    assert abs(one.mean - exact.mean) > 4 * sd


def test_local_variables_are_rederived_each_step():
    """A mixture's z (per datum) is local: the result holds the globals only, and with
    B = N, ρ = 1 each step is the NumPy backend's VMP sweep from the globals of the step
    before (z re-derived from them by the program's initialisation)."""
    import sys
    import warnings
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
    import mixture_reference as mr
    x = mr.data(3, 90)
    model = mr.model(x, 3)
    start = {"weights": ff.distributions.Dirichlet(np.ones(3)),
             "precs": ff.distributions.Gamma(np.ones(3), np.ones(3)),
             **mr.factorflow_init(x, 3)}
    result = model.infer("svi", minibatch=90, steps=2, learning_rate=(1, 0),
                         init={"means": start["means"]})
    assert set(result.posteriors) == {"weights", "means", "precs"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ff.ScheduleWarning)
        compiled = model.compile("vmp", init=list(start))
    for _ in range(2):
        run = compiled.run(1, init=start, tolerance=None)
        start = {name: run[name] for name in ("weights", "means", "precs")}
    for name in ("weights", "means", "precs"):
        for a, b in zip(result[name].eta, start[name].eta, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-10)


def test_bad_svi_options():
    x = np.arange(10.0)
    model = _normal_gamma(x)
    with pytest.raises(ff.ModelError, match="minibatch must be an integer from 1 to .* 10"):
        model.infer("svi", minibatch=11, steps=3)
    with pytest.raises(ff.ModelError, match="minibatch"):
        model.infer("svi", minibatch=0, steps=3)
    with pytest.raises(ff.ModelError, match="tau >= 1 and 0 <= kappa <= 1"):
        model.infer("svi", minibatch=5, steps=3, learning_rate=(0.5, 0.7))
    with pytest.raises(ff.ModelError, match="pair"):
        model.infer("svi", minibatch=5, steps=3, learning_rate=0.1)
    with pytest.raises(ff.ModelError, match="steps must be"):
        model.infer("svi", minibatch=5, steps=-1)
    with ff.Model() as flat:
        ff.Gaussian("y", ff.Gaussian("m", 0.0, variance=1.0), variance=1.0, observed=1.0)
    with pytest.raises(ff.ModelError, match="no variable over a plate"):
        flat.infer("svi", minibatch=1, steps=1)
