"""ff.sum(x, n): the sum of a plate of real variables.

* EP on linear-Gaussian models is Gaussian conditioning: every marginal and log p(y)
  (hypothesis-generated priors, plate sizes 1..6, an outer plate, a Gamma-free chain
  through scaled elements).
* VMP: the means are the exact posterior means, each variance the mean-field 1/(1/v0 + τ),
  and the bound is the ELBO computed directly; the block update converges where Winn's
  parallel (Jacobi) message diverges, with a bound that never falls.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import factorflow as ff
from tests.conftest import assert_close


def _conditioned(m0, v0, a, noise_var, y):
    """x ~ N(m0, diag v0), y ~ N(a·x, noise_var): posterior mean, covariance, log p(y)."""
    s = np.diag(v0)
    gain = s @ a / (a @ s @ a + noise_var)
    mean = m0 + gain * (y - a @ m0)
    cov = s - np.outer(gain, a @ s)
    return mean, cov, stats.norm(a @ m0, np.sqrt(a @ s @ a + noise_var)).logpdf(y)


@settings(max_examples=25, deadline=None)
@given(size=st.integers(1, 6), seed=st.integers(0, 2**32 - 1))
def test_ep_is_gaussian_conditioning(size, seed):
    rng = np.random.default_rng(seed)
    m0, v0 = rng.normal(size=size), rng.uniform(0.2, 3.0, size=size)
    tau, y = float(rng.uniform(0.3, 4.0)), float(rng.normal() * 3)
    with ff.Model() as model:
        n = ff.Range("n", size)
        with ff.Plate(n):
            x = ff.Gaussian("x", m0, variance=v0)
        ff.Gaussian("y", ff.sum(x, n), precision=tau, observed=y)
    mean, cov, log_z = _conditioned(m0, v0, np.ones(size), 1 / tau, y)
    result = model.infer("ep")
    assert result.converged
    assert_close(result["x"].mean, mean, rtol=1e-10, atol=1e-10)
    assert_close(result["x"].variance, np.diag(cov), rtol=1e-10, atol=1e-10)
    assert_close(result.log_evidence, log_z, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("algorithm", ["ep", "vmp"])
def test_sums_over_an_inner_plate_of_scaled_elements(algorithm):
    """y[m] ~ N(Σ_n c[m, n] x[m, n] + b[m], 1/τ) in a plate over m: EP equals conditioning
    for each m; VMP's means equal the exact means."""
    rng = np.random.default_rng(3)
    rows, size = 3, 4
    m0, v0 = rng.normal(size=(rows, size)), rng.uniform(0.3, 2.0, size=(rows, size))
    c, b = rng.normal(size=(rows, size)), rng.normal(size=rows)
    tau, y = 1.7, rng.normal(size=rows) * 2
    with ff.Model() as model:
        m, n = ff.Range("m", rows), ff.Range("n", size)
        with ff.Plate(m):
            with ff.Plate(n):
                x = ff.Gaussian("x", m0, variance=v0)
                scaled = c * x
            ff.Gaussian("y", ff.sum(scaled, n) + b, precision=tau, observed=y)
    result = model.infer(algorithm, iterations=300, tolerance=1e-13)
    log_z = 0.0
    for k in range(rows):
        mean, cov, lz = _conditioned(m0[k], v0[k], c[k], 1 / tau, y[k] - b[k])
        assert_close(result["x"].mean[k], mean, rtol=1e-9, atol=1e-9)
        if algorithm == "ep":
            assert_close(result["x"].variance[k], np.diag(cov), rtol=1e-10, atol=1e-10)
        log_z += lz
    if algorithm == "ep":
        assert_close(result.log_evidence, log_z, rtol=1e-10, atol=1e-10)


def _mean_field_elbo(m0, v0, tau, y, q_mean, q_var):
    """E_q[log p(x, y)] + H[q] for x_i ~ N(m0, v0), y ~ N(Σ x, 1/τ), q = Π N(q_mean, q_var)."""
    prior = -0.5 * np.log(2 * np.pi * v0) - ((q_mean - m0) ** 2 + q_var) / (2 * v0)
    like = 0.5 * np.log(tau / (2 * np.pi)) - 0.5 * tau * ((y - q_mean.sum()) ** 2
                                                          + q_var.sum())
    entropy = 0.5 * np.log(2 * np.pi * np.e * q_var)
    return prior.sum() + like + entropy.sum()


@pytest.mark.parametrize(("size", "tau"), [(3, 0.5), (50, 20.0)])
def test_vmp_block_update_reaches_the_mean_field_optimum(size, tau):
    """At (50, 20) Winn's parallel message has a Jacobi factor τ (n − 1)/(1/v0 + τ) ≈ 45:
    it diverges; the block update converges, the bound never falling."""
    rng = np.random.default_rng(size)
    m0, v0 = rng.normal(size=size), rng.uniform(0.5, 2.0, size=size)
    y = float(rng.normal() * 3)
    with ff.Model() as model:
        n = ff.Range("n", size)
        with ff.Plate(n):
            x = ff.Gaussian("x", m0, variance=v0)
        ff.Gaussian("y", ff.sum(x, n), precision=tau, observed=y)
    compiled = model.compile("vmp")
    result = compiled.run(iterations=100)
    assert result.converged and len(result.trace) < 10
    assert np.all(np.diff(result.trace) > -1e-9 * abs(result.trace[-1]))
    mean, _, log_z = _conditioned(m0, v0, np.ones(size), 1 / tau, y)
    q = result["x"]
    assert_close(q.mean, mean, rtol=1e-9, atol=1e-9)
    assert_close(q.variance, 1 / (1 / v0 + tau), rtol=1e-12)
    assert_close(result.log_evidence, _mean_field_elbo(m0, v0, tau, y, q.mean, q.variance),
                 rtol=1e-10, atol=1e-10)
    assert result.log_evidence <= log_z + 1e-12
    for sweeps in (1, 2):  # the bound after each sweep is that sweep's ELBO
        partial = compiled.run(iterations=sweeps, tolerance=None)
        p = partial["x"]
        assert_close(partial.log_evidence,
                     _mean_field_elbo(m0, v0, tau, y, p.mean, p.variance), rtol=1e-10)


@pytest.mark.parametrize(("build", "message"), [
    (lambda n, x, k: ff.sum(x, k), r"'k' must be the innermost plate of 'x'"),
    (lambda n, x, k: ff.sum(x, "n"), "must be the ff.Range to sum over"),
    (lambda n, x, k: ff.sum(ff.Bernoulli("b", 0.5), n), "sums a plate of real variables, "
     "got a bool-valued variable"),
], ids=["not-innermost", "not-a-range", "not-real"])
def test_bad_sums_are_refused_by_name(build, message):
    with ff.Model():
        n, k = ff.Range("n", 3), ff.Range("k", 2)
        with ff.Plate(n):
            x = ff.Gaussian("x", 0.0, variance=1.0)
        with pytest.raises(ff.ModelError, match=message):
            build(n, x, k)


def test_a_sum_is_written_where_the_other_plates_are_open():
    with ff.Model():
        n, k = ff.Range("n", 3), ff.Range("k", 2)
        with ff.Plate(k), ff.Plate(n):
            x = ff.Gaussian("x", 0.0, variance=1.0)
        with pytest.raises(ff.ModelError, match=r"write it where the plates \['k'\] of 'x'"):
            ff.sum(x, n)
