"""Gaussian(sample | mean, precision): operators against quadrature."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from factorflow.distributions import Bernoulli, Gamma, Gaussian
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


@pytest.mark.parametrize("deferred", [False, True], ids=["called", "deferred"])
def test_fused_vmp_messages_equal_the_weighted_product_of_per_element_messages(deferred):
    """With ``reduce`` (and ``weights``) the messages to the mean and the precision are
    the per-(n, k) messages raised to the weights and multiplied over n: a mixture's
    components read from N data through a Switch (Gate.EnterOne reduces them)."""
    from factorflow.factors import FACTORS
    from factorflow.factors.common import Deferred
    from factorflow.factors.mixtures import expand, power_product
    from factorflow.runtime.kernels import prod_over

    rng = np.random.default_rng(5)
    n, k = 9, 4
    x = rng.normal(size=(n, 1)) * 3
    resp = rng.dirichlet(np.ones(k), size=n)
    q_mu = Gaussian(rng.normal(size=k), rng.uniform(0.5, 2.0, k))
    q_tau = Gamma(rng.uniform(1.0, 3.0, k), rng.uniform(0.5, 2.0, k))
    clones = {"mean": q_mu.broadcast_to((n, k)), "precision": q_tau.broadcast_to((n, k))}
    enter = FACTORS["Gate.EnterOne"].operators[("vmp", "value")].fn
    cases = Bernoulli.from_natural(np.log(resp))
    for target, other, value in (("precision", "mean", q_tau), ("mean", "precision", q_mu)):
        fn = FACTORS["Gaussian"].operators[("vmp", target)].fn
        args = {"sample": x, other: clones[other]}
        per_element = fn(**args)
        # independently: each element's natural parameters times its weight, summed over n
        want = [np.sum(resp * np.broadcast_to(e, (n, k)), axis=0) for e in per_element.eta]
        plain = prod_over(power_product(expand(per_element, (n, k, 1)), resp[..., None]),
                          (n, k), (0,))
        msg = Deferred(fn, args) if deferred else per_element
        fused = enter(enter_one=msg, cases=cases, value=value, index=np.arange(k),
                      reduce=((n, k), (0,)))
        assert fused.batch_shape == (k,)
        for got, e_plain, e_want in zip(fused.eta, plain.eta, want, strict=True):
            assert_close(got, e_want, rtol=1e-12, atol=1e-12)
            assert_close(e_plain, e_want, rtol=1e-12, atol=1e-12)
        # unweighted: the product over the plate of the plain messages
        unweighted = fn(**args, reduce=((n, k), (0,)))
        for got, e in zip(unweighted.eta, per_element.eta, strict=True):
            assert_close(got, np.sum(np.broadcast_to(e, (n, k)), axis=0), rtol=1e-12)


@SETTINGS
@given(st.integers(2, 30), st.integers(2, 6), st.floats(0.1, 200.0), st.integers(0, 2**16))
def test_mixture_data_evidence_and_fused_messages_equal_the_elementwise_formulas(
        n, k, scale, seed):
    """The Switch shapes (N known points (N, 1) against K components (1, K)) take the
    sufficient-statistic paths: E[log f] as one (N, 3) × (3, K) product and the fused
    messages to the mean and precision as (C, N) × (N, K) products.  Each equals the
    elementwise formula computed here (to the rounding of x², data up to ``scale``); a
    mean that varies along the data falls back to the elementwise path, same formula."""
    from scipy import special as sp

    from factorflow.factors import FACTORS
    from factorflow.factors.gaussian import _data_evidence_by_blas, _reduced_square_diff

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 1)) * scale
    m, v = rng.normal(size=k) * scale, rng.uniform(0.1, 3.0, k)
    a, b = rng.uniform(0.5, 4.0, k), rng.uniform(0.2, 3.0, k)
    w = rng.dirichlet(np.ones(k), size=n)
    q_mu, q_tau = Gaussian(m, v), Gamma(a, rate=b)
    e_tau, e_log_tau = a / b, sp.digamma(a) - np.log(b)
    d2 = (x - m) ** 2 + v                                                   # (N, K)
    want = 0.5 * e_log_tau - 0.5 * np.log(2 * np.pi) - 0.5 * e_tau * d2
    tol = 1e-15 * (scale ** 2 + 1) * 40
    got = evidence("Gaussian", "vmp")(sample=x, mean=q_mu.broadcast_to((n, k)),
                                      precision=q_tau.broadcast_to((n, k)))
    assert_close(got, want, rtol=1e-12, atol=tol * e_tau.max())
    red = ((n, k), (0,))
    # (the fast paths are the ones taken for these shapes)
    row_mu = Gaussian(m[None], v[None])                            # (1, K) components
    assert _data_evidence_by_blas(x, row_mu, q_tau) is not None
    assert_close(_data_evidence_by_blas(x, row_mu, q_tau), want, rtol=1e-12,
                 atol=tol * e_tau.max())
    assert _reduced_square_diff(x, row_mu, w, red) is not None
    assert_close(_reduced_square_diff(x, row_mu, w, red)[1], np.sum(w * d2, axis=0),
                 rtol=1e-12, atol=tol * n)
    prec = FACTORS["Gaussian"].operators[("vmp", "precision")].fn(
        sample=x, mean=q_mu.broadcast_to((n, k)), reduce=red, weights=w)
    assert_close(prec.eta[0], 0.5 * w.sum(0), rtol=1e-13)
    assert_close(prec.eta[1], -0.5 * np.sum(w * d2, axis=0), rtol=1e-12, atol=tol * n)
    mean = FACTORS["Gaussian"].operators[("vmp", "mean")].fn(
        sample=x, precision=q_tau.broadcast_to((n, k)), reduce=red, weights=w)
    assert_close(mean.eta[0], e_tau * np.sum(w * x, axis=0), rtol=1e-12, atol=1e-12 * scale)
    assert_close(mean.eta[1], e_tau * w.sum(0), rtol=1e-13)
    # a mean per datum (varies along the reduced axis): the elementwise path
    m_n = rng.normal(size=(n, k)) * scale
    prec_n = FACTORS["Gaussian"].operators[("vmp", "precision")].fn(
        sample=x, mean=Gaussian(m_n, np.broadcast_to(v, (n, k))), reduce=red, weights=w)
    assert_close(prec_n.eta[1], -0.5 * np.sum(w * ((x - m_n) ** 2 + v), axis=0), rtol=1e-12)


def test_ep_convolution_in_natural_form_equals_the_moments_form():
    """A batch of positive precisions through one finite τ takes (h, p)/(1 + p/τ); the
    moments' form 1/(1/p + 1/τ) (each element alone: a single message) agrees to 4 units
    in the last place, and a p/τ that would overflow, a τ of 0 or ∞ take the moments'
    form for the whole batch."""
    from factorflow.factors.gaussian import _convolve

    rng = np.random.default_rng(6)
    n = 300
    for span in (200, 300):  # (10^300 / τ overflows: the moments' form for the batch)
        h = rng.normal(size=n) * 10 ** rng.uniform(-3, 3, n)
        msg = Gaussian.from_natural(h, 10 ** rng.uniform(-span, span, n))
        for tau in (0.0625, 1e-200, 3e250, 0.0, np.inf):
            batch = _convolve(msg, tau)
            for i in range(0, n, 7):
                one = _convolve(msg[i], tau)
                for got, want in zip(batch.eta, one.eta, strict=True):
                    assert abs(got[i] - want) <= 1e-15 * abs(want) or got[i] == want
