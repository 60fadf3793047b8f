"""Gamma(sample | shape, rate): operators against quadrature."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given

from factorflow.distributions import Gamma
from tests.conftest import assert_close
from tests.factors.checks import (
    SETTINGS,
    assert_batched,
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


def _expected_log_factor(qx: Gamma, a: float, qr: Gamma) -> float:
    """E[log f] for independent x ~ qx, r ~ qr, each expectation by quadrature."""
    (ax, rx), (ar, rr) = (float(qx.shape_param), float(qx.rate)), (float(qr.shape_param),
                                                                   float(qr.rate))
    return (a * gamma_expect(math.log, ar, rr) - math.lgamma(a)
            + (a - 1) * gamma_expect(math.log, ax, rx)
            - gamma_expect(lambda r: r, ar, rr) * gamma_expect(lambda x: x, ax, rx))


@SETTINGS
@given(shapes, rates, shapes, shapes, rates)
def test_vmp_messages_and_evidence(ax, rx, a, ar, rr):
    qx, qr = Gamma(ax, rx), Gamma(ar, rr)
    rng = np.random.default_rng(2)
    to_x = op("Gamma", "vmp", "sample")(shape=a, rate=qr)
    slope = vmp_slope(lambda q: _expected_log_factor(q, a, qr), perturbed(qx, 3, rng))
    assert_close(naturals(to_x), slope, rtol=1e-6, atol=1e-8)
    to_r = op("Gamma", "vmp", "rate")(sample=qx, shape=a)
    slope = vmp_slope(lambda q: _expected_log_factor(qx, a, q), perturbed(qr, 3, rng))
    assert_close(naturals(to_r), slope, rtol=1e-6, atol=1e-8)
    value = evidence("Gamma", "vmp")(sample=qx, shape=a, rate=qr)
    assert_close(value, _expected_log_factor(qx, a, qr), rtol=1e-8, atol=1e-9)


def _tilted(log_density, mode: float):
    return tilted_expectations(log_density, 0.0, mode + 200.0, [lambda t: t, math.log],
                               [mode + 1e-3])


@SETTINGS
@given(shapes, rates, shapes, rates)
def test_ep_messages_match_tilted_moments(ax, rx, a, r):
    incoming = Gamma(ax, rx)
    log_z, (m1, mlog) = _tilted(lambda x: gamma_log_pdf(x, ax, rx) + gamma_log_pdf(x, a, r),
                                (ax + a) / (rx + r))
    post = op("Gamma", "ep", "sample")(shape=a, rate=r) * incoming
    assert_close([post.mean, post.mean_log()], [m1, mlog], rtol=1e-7, atol=1e-9)
    value = evidence("Gamma", "ep")(sample=incoming, shape=a, rate=r)
    assert_close(value, log_z, rtol=1e-8, atol=1e-9)
    # to the rate, from an observed sample x = ax / rx
    x = ax / rx
    log_z, (m1, mlog) = _tilted(lambda t: gamma_log_pdf(t, ax, rx) + gamma_log_pdf(x, a, t),
                                (ax + a) / (rx + x))
    post = op("Gamma", "ep", "rate")(sample=x, shape=a) * incoming
    assert_close([post.mean, post.mean_log()], [m1, mlog], rtol=1e-7, atol=1e-9)
    value = evidence("Gamma", "ep")(sample=np.array(x), shape=a, rate=incoming)
    assert_close(value, log_z, rtol=1e-8, atol=1e-9)


def test_ep_evidence_edge_cases():
    ev = evidence("Gamma", "ep")
    assert_close(ev(sample=Gamma.uniform(()), shape=2.0, rate=3.0), 0.0)
    assert_close(ev(sample=np.array(0.7), shape=2.0, rate=np.array(3.0)),
                 gamma_log_pdf(0.7, 2.0, 3.0))
    # a uniform rate message is the weight 1: ∫ f dr = a / x² for the Gamma density in r
    assert_close(ev(sample=np.array(0.7), shape=2.0, rate=Gamma.uniform(())),
                 math.log(2.0 / 0.7**2))


def test_known_and_point_like_arguments_agree():
    point = Gamma(1e12, 1e12 / 1.7)   # mean 1.7, sd 1.7e-6
    assert_close(naturals(op("Gamma", "vmp", "sample")(shape=2.0, rate=point)),
                 naturals(op("Gamma", "vmp", "sample")(shape=2.0, rate=1.7)))
    assert_close(naturals(op("Gamma", "vmp", "rate")(sample=point, shape=2.0)),
                 naturals(op("Gamma", "vmp", "rate")(sample=1.7, shape=2.0)))
    assert_close(evidence("Gamma", "vmp")(sample=point, shape=2.0, rate=point),
                 evidence("Gamma", "vmp")(sample=1.7, shape=2.0, rate=1.7), rtol=1e-9)


def test_batched_operators_equal_elementwise_calls():
    rng = np.random.default_rng(3)
    shape = (3, 2)
    qx = Gamma(rng.uniform(1, 3, shape), rng.uniform(1, 3, shape))
    qr = Gamma(rng.uniform(1, 3, shape), rng.uniform(1, 3, shape))
    a, x, r = (rng.uniform(1, 3, shape) for _ in range(3))
    for fn, kwargs in [
        (op("Gamma", "vmp", "sample"), {"shape": a, "rate": qr}),
        (op("Gamma", "vmp", "rate"), {"sample": qx, "shape": a}),
        (op("Gamma", "ep", "sample"), {"shape": a, "rate": r}),
        (op("Gamma", "ep", "rate"), {"sample": x, "shape": a}),
        (evidence("Gamma", "vmp"), {"sample": qx, "shape": a, "rate": qr}),
        (evidence("Gamma", "ep"), {"sample": qx, "shape": a, "rate": r}),
        (evidence("Gamma", "ep"), {"sample": x, "shape": a, "rate": qr}),
    ]:
        assert_batched(fn, kwargs, shape)
