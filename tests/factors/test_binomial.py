"""Binomial(sample | trials, p) and Poisson(sample | rate) with observed counts: operators
against quadrature over the parameter."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from factorflow.distributions import Beta, Gamma, Poisson
from factorflow.errors import UnsupportedFactorError
from tests.conftest import assert_close
from tests.factors.checks import (
    SETTINGS,
    assert_batched,
    beta_expect,
    beta_mean_logs,
    counts,
    evidence,
    gamma_expect,
    gamma_log_pdf,
    naturals,
    op,
    perturbed,
    rates,
    shapes,
    tilted_expectations,
    vmp_slope,
)

trial_counts = st.integers(0, 30).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n)))


@SETTINGS
@given(trial_counts, counts, counts)
def test_binomial_messages_and_evidence(kn, a, b):
    k, n = kn
    qp = Beta(a, b)

    def expected_log_factor(q):
        elog, elog1m = beta_mean_logs(float(q.alpha), float(q.beta))
        return stats.binom.logpmf(k, n, 0.5) + n * math.log(2) + k * elog + (n - k) * elog1m

    for algorithm in ("vmp", "ep"):
        msg = op("Binomial", algorithm, "p")(sample=np.array(k), trials=np.array(n))
        slope = vmp_slope(expected_log_factor, perturbed(qp, 3, np.random.default_rng(11)))
        assert_close(naturals(msg), slope, rtol=1e-6, atol=1e-7)
    assert_close(evidence("Binomial", "vmp")(sample=np.array(k), trials=np.array(n), p=qp),
                 expected_log_factor(qp), rtol=1e-8, atol=1e-9)
    z, z1, z2 = (beta_expect(lambda p, j=j: p**j * stats.binom.pmf(k, n, p), a, b)
                 for j in (0, 1, 2))
    post = op("Binomial", "ep", "p")(sample=np.array(k), trials=np.array(n)) * qp
    assert_close([post.mean, post.variance], [z1 / z, z2 / z - (z1 / z) ** 2], rtol=1e-7)
    assert_close(evidence("Binomial", "ep")(sample=np.array(k), trials=np.array(n), p=qp),
                 math.log(z), rtol=1e-8, atol=1e-9)
    assert_close(evidence("Binomial", "ep")(sample=np.array(k), trials=np.array(n),
                                            p=np.array(0.3)), stats.binom.logpmf(k, n, 0.3))


@SETTINGS
@given(st.integers(0, 40), shapes, rates)
def test_poisson_messages_and_evidence(k, a, r):
    qr = Gamma(a, r)

    def expected_log_factor(q):
        shape, rate = float(q.shape_param), float(q.rate)
        return (k * gamma_expect(math.log, shape, rate) - gamma_expect(lambda t: t, shape, rate)
                - math.lgamma(k + 1))

    for algorithm in ("vmp", "ep"):
        msg = op("Poisson", algorithm, "rate")(sample=np.array(k))
        slope = vmp_slope(expected_log_factor, perturbed(qr, 3, np.random.default_rng(12)))
        assert_close(naturals(msg), slope, rtol=1e-6, atol=1e-7)
    assert_close(evidence("Poisson", "vmp")(sample=np.array(k), rate=qr),
                 expected_log_factor(qr), rtol=1e-8, atol=1e-9)
    mode, sd = (a + k) / (r + 1), math.sqrt(a + k) / (r + 1)
    log_z, (m1, mlog) = tilted_expectations(
        lambda t: gamma_log_pdf(t, a, r) + k * math.log(t) - t - math.lgamma(k + 1) if t > 0
        else -math.inf, 0.0, mode + 60 * sd, [lambda t: t, math.log],
        [mode + j * sd for j in (-5, -1, 0, 1, 5, 15)])
    post = op("Poisson", "ep", "rate")(sample=np.array(k)) * qr
    assert_close([post.mean, post.mean_log()], [m1, mlog], rtol=1e-7, atol=1e-9)
    assert_close(evidence("Poisson", "ep")(sample=np.array(k), rate=qr), log_z,
                 rtol=1e-8, atol=1e-9)
    assert_close(evidence("Poisson", "ep")(sample=np.array(k), rate=np.array(2.5)),
                 stats.poisson.logpmf(k, 2.5))


def test_latent_counts_are_refused():
    with pytest.raises(UnsupportedFactorError, match="observed"):
        evidence("Poisson", "vmp")(sample=Poisson(2.0), rate=Gamma(2.0, 1.0))
    with pytest.raises(UnsupportedFactorError, match="observed"):
        evidence("Binomial", "ep")(sample=Poisson(2.0), trials=np.array(4), p=Beta(2, 2))


def test_known_and_point_like_arguments_agree():
    # sharp enough to act as a point, not so sharp that A(η) cancels catastrophically
    sharp_p, sharp_r = Beta(0.3e10, 0.7e10), Gamma(1e7, 1e7 / 2.5)
    assert_close(evidence("Binomial", "vmp")(sample=np.array(3), trials=np.array(7), p=sharp_p),
                 evidence("Binomial", "vmp")(sample=np.array(3), trials=np.array(7),
                                             p=np.array(0.3)), rtol=1e-8)
    assert_close(evidence("Poisson", "vmp")(sample=np.array(3), rate=sharp_r),
                 evidence("Poisson", "vmp")(sample=np.array(3), rate=np.array(2.5)), rtol=1e-6)
    assert_close(evidence("Poisson", "ep")(sample=np.array(3), rate=sharp_r),
                 evidence("Poisson", "ep")(sample=np.array(3), rate=np.array(2.5)), rtol=1e-6)


def test_batched_operators_equal_elementwise_calls():
    rng = np.random.default_rng(13)
    shape = (3, 2)
    n = rng.integers(0, 10, shape)
    k = rng.integers(0, 11, shape) % (n + 1)
    qp = Beta(rng.uniform(0.5, 3, shape), rng.uniform(0.5, 3, shape))
    qr = Gamma(rng.uniform(0.5, 3, shape), rng.uniform(0.5, 3, shape))
    for fn, kwargs in [
        (op("Binomial", "ep", "p"), {"sample": k, "trials": n}),
        (evidence("Binomial", "vmp"), {"sample": k, "trials": n, "p": qp}),
        (evidence("Binomial", "ep"), {"sample": k, "trials": n, "p": qp}),
        (op("Poisson", "vmp", "rate"), {"sample": k}),
        (evidence("Poisson", "vmp"), {"sample": k, "rate": qr}),
        (evidence("Poisson", "ep"), {"sample": k, "rate": qr}),
    ]:
        assert_batched(fn, kwargs, shape)
