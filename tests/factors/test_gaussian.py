"""Gaussian(sample | mean, precision): operators against quadrature."""

from __future__ import annotations

import numpy as np
from hypothesis import given

from factorflow.distributions import Gamma, Gaussian
from tests.conftest import assert_close
from tests.factors.checks import (
    SETTINGS,
    assert_batched,
    evidence,
    gamma_expect,
    gauss_hermite,
    grid,
    grid_moments,
    means,
    naturals,
    normal_pdf,
    op,
    perturbed,
    quad,
    rates,
    sds,
    shapes,
    vmp_slope,
)


def _log_normal(x, m, v):
    return -0.5 * np.log(2 * np.pi * v) - 0.5 * (x - m) ** 2 / v


def _expected_log_factor(qx, qm, qt):
    """E[log f] by quadrature: Gauss–Hermite over x and mean, Gamma quadrature over τ."""
    d2 = gauss_hermite(lambda x, m: (x - m) ** 2, [(float(qx.mean), float(qx.variance)),
                                                   (float(qm.mean), float(qm.variance))])
    a, r = float(qt.shape_param), float(qt.rate)
    return gamma_expect(lambda t: 0.5 * np.log(t) - 0.5 * np.log(2 * np.pi) - 0.5 * t * d2,
                        a, r)


@SETTINGS
@given(means, sds, means, sds, shapes, rates)
def test_vmp_messages_are_gradients_of_expected_log_factor(mx, sx, mm, sm, a, r):
    qx, qm, qt = Gaussian(mx, sx**2), Gaussian(mm, sm**2), Gamma(a, r)
    rng = np.random.default_rng(0)
    to_x = op("Gaussian", "vmp", "sample")(mean=qm, precision=qt)
    slope = vmp_slope(lambda q: _expected_log_factor(q, qm, qt), perturbed(qx, 3, rng))
    assert_close(naturals(to_x), slope, rtol=1e-6, atol=1e-8)
    to_m = op("Gaussian", "vmp", "mean")(sample=qx, precision=qt)
    slope = vmp_slope(lambda q: _expected_log_factor(qx, q, qt), perturbed(qm, 3, rng))
    assert_close(naturals(to_m), slope, rtol=1e-6, atol=1e-8)
    to_t = op("Gaussian", "vmp", "precision")(sample=qx, mean=qm)
    slope = vmp_slope(lambda q: _expected_log_factor(qx, qm, q), perturbed(qt, 3, rng))
    assert_close(naturals(to_t), slope, rtol=1e-6, atol=1e-8)


@SETTINGS
@given(means, sds, means, sds, shapes, rates)
def test_vmp_evidence_is_expected_log_factor(mx, sx, mm, sm, a, r):
    qx, qm, qt = Gaussian(mx, sx**2), Gaussian(mm, sm**2), Gamma(a, r)
    value = evidence("Gaussian", "vmp")(sample=qx, mean=qm, precision=qt)
    assert_close(value, _expected_log_factor(qx, qm, qt), rtol=1e-8, atol=1e-9)


@SETTINGS
@given(means, sds, means, sds, sds)
def test_ep_messages_match_tilted_moments(mx, sx, mm, sm, s_tau):
    tau = 1 / s_tau**2
    mx_msg, mm_msg = Gaussian(mx, sx**2), Gaussian(mm, sm**2)
    scale = max(sx, sm, s_tau)
    xs = grid(min(mx, mm) - 14 * scale, max(mx, mm) + 14 * scale, 0.5 / 6)

    def joint(x, m):
        return (_log_normal(x, mx, sx**2) + _log_normal(x, m, 1 / tau)
                + _log_normal(m, mm, sm**2))

    log_z, ((mean_x, var_x), (mean_m, var_m)) = grid_moments(joint, [xs, xs], (0, 1))
    post = op("Gaussian", "ep", "sample")(mean=mm_msg, precision=tau) * mx_msg
    assert_close([post.mean, post.variance], [mean_x, var_x], rtol=1e-6, atol=1e-9)
    post = op("Gaussian", "ep", "mean")(sample=mx_msg, precision=tau) * mm_msg
    assert_close([post.mean, post.variance], [mean_m, var_m], rtol=1e-6, atol=1e-9)
    value = evidence("Gaussian", "ep")(sample=mx_msg, mean=mm_msg, precision=tau)
    assert_close(value, log_z, rtol=1e-7, atol=1e-9)


@SETTINGS
@given(means, means, sds, sds)
def test_ep_evidence_with_an_observed_sample(x, mm, sm, s_tau):
    tau = 1 / s_tau**2
    value = evidence("Gaussian", "ep")(sample=np.array(x), mean=Gaussian(mm, sm**2),
                                       precision=tau)
    direct = quad(lambda m: normal_pdf(x, m, s_tau) * normal_pdf(m, mm, sm),
                  mm - 40 * sm, mm + 40 * sm, [x])
    assert_close(value, np.log(direct), rtol=1e-8)


def test_ep_evidence_is_zero_when_the_random_side_is_uniform():
    """A uniform message is the weight 1, and ∫ N(x; μ, 1/τ) dx = 1 whatever the other side."""
    uniform = Gaussian.uniform((2,))
    for other in (Gaussian(1.0, 2.0), np.array(1.0)):
        assert_close(evidence("Gaussian", "ep")(sample=uniform, mean=other, precision=3.0), 0.0)
        assert_close(evidence("Gaussian", "ep")(sample=other, mean=uniform, precision=3.0), 0.0)


def test_known_and_point_like_arguments_agree():
    point = Gaussian(1.3, 1e-14)
    for target, kwargs in (("sample", {"mean": 1.3}), ("mean", {"sample": 1.3})):
        known = op("Gaussian", "vmp", target)(**kwargs, precision=Gamma(2.0, 3.0))
        fuzzy = op("Gaussian", "vmp", target)(**{k: point for k in kwargs},
                                               precision=Gamma(2.0, 3.0))
        assert_close(naturals(fuzzy), naturals(known), rtol=1e-9)
    known = op("Gaussian", "vmp", "precision")(sample=np.array(0.4), mean=np.array(1.3))
    fuzzy = op("Gaussian", "vmp", "precision")(sample=Gaussian(0.4, 1e-14), mean=point)
    assert_close(naturals(fuzzy), naturals(known), rtol=1e-9)


def test_batched_operators_equal_elementwise_calls():
    rng = np.random.default_rng(1)
    shape = (3, 2)
    qx = Gaussian(rng.normal(size=shape), rng.uniform(0.5, 2, shape))
    qm = Gaussian(rng.normal(size=shape), rng.uniform(0.5, 2, shape))
    qt = Gamma(rng.uniform(1, 3, shape), rng.uniform(1, 3, shape))
    tau = rng.uniform(0.5, 2, shape)
    calls = [
        (op("Gaussian", "vmp", "sample"), {"mean": qm, "precision": qt}),
        (op("Gaussian", "vmp", "mean"), {"sample": qx, "precision": qt}),
        (op("Gaussian", "vmp", "precision"), {"sample": qx, "mean": qm}),
        (op("Gaussian", "ep", "sample"), {"mean": qm, "precision": tau}),
        (op("Gaussian", "ep", "mean"), {"sample": qx, "precision": tau}),
        (evidence("Gaussian", "vmp"), {"sample": qx, "mean": qm, "precision": qt}),
        (evidence("Gaussian", "ep"), {"sample": qx, "mean": qm, "precision": tau}),
    ]
    for fn, kwargs in calls:
        assert_batched(fn, kwargs, shape)
