"""Plus, Minus, ScaleBy and Product: Gaussian operators against quadrature on grids and
Gauss–Hermite rules."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from factorflow.distributions import Gaussian
from factorflow.errors import UnsupportedFactorError
from tests.conftest import assert_close
from tests.factors.checks import (
    SETTINGS,
    assert_batched,
    evidence,
    gauss_hermite,
    grid,
    grid_moments,
    means,
    naturals,
    op,
    perturbed,
    sds,
    vmp_slope,
)

LINEAR = {"Plus": (np.add, "sum"), "Minus": (np.subtract, "diff")}
scales = st.one_of(st.floats(-3.0, -0.3), st.floats(0.3, 3.0))


def _log_normal(x, m, s):
    return -0.5 * np.log(2 * np.pi * s * s) - 0.5 * ((x - m) / s) ** 2


def _moments(d: Gaussian) -> list[float]:
    return [float(d.mean), float(d.variance)]


@SETTINGS
@given(st.sampled_from(sorted(LINEAR)), means, sds, means, sds, means, sds)
def test_linear_ep_messages_match_tilted_moments(name, ma, sa, mb, sb, ms, ss):
    g, out = LINEAR[name]
    qa, qb, qs = Gaussian(ma, sa**2), Gaussian(mb, sb**2), Gaussian(ms, ss**2)
    axis = grid(-30.0, 30.0, 0.1)

    def joint(a, b):
        return _log_normal(a, ma, sa) + _log_normal(b, mb, sb) + _log_normal(g(a, b), ms, ss)

    log_z, (ma_t, mb_t, mo_t) = grid_moments(joint, [axis, axis], (0, 1, g))
    assert_close(_moments(op(name, "ep", "a")(**{out: qs}, b=qb) * qa), ma_t, rtol=1e-7,
                 atol=1e-10)
    assert_close(_moments(op(name, "ep", "b")(**{out: qs}, a=qa) * qb), mb_t, rtol=1e-7,
                 atol=1e-10)
    assert_close(_moments(op(name, "ep", out)(a=qa, b=qb) * qs), mo_t, rtol=1e-7, atol=1e-10)
    assert_close(evidence(name, "ep")(**{out: qs}, a=qa, b=qb), log_z, rtol=1e-8, atol=1e-10)
    # an observed output: the tilted distribution of a is m_a(a) m_b(b(a)) on a line
    y = ms
    b_of_a = (lambda a: y - a) if name == "Plus" else (lambda a: a - y)
    log_z, [moments] = grid_moments(lambda a: _log_normal(a, ma, sa)
                                    + _log_normal(b_of_a(a), mb, sb), [axis])
    assert_close(_moments(op(name, "ep", "a")(**{out: np.array(y)}, b=qb) * qa), moments,
                 rtol=1e-7, atol=1e-10)
    assert_close(evidence(name, "ep")(**{out: np.array(y)}, a=qa, b=qb), log_z, rtol=1e-8)


@SETTINGS
@given(scales, means, sds, means, sds)
def test_scale_by_ep_messages_match_tilted_moments(c, ma, sa, mp, sp):
    qa, qp = Gaussian(ma, sa**2), Gaussian(mp, sp**2)
    axis = grid(-40.0, 40.0, 0.3 / 6)

    def tilted(a):
        return _log_normal(a, ma, sa) + _log_normal(c * a, mp, sp)

    log_z, (to_a, to_p) = grid_moments(tilted, [axis], (0, lambda a: c * a))
    assert_close(_moments(op("ScaleBy", "ep", "a")(product=qp, scale=c) * qa), to_a,
                 rtol=1e-7, atol=1e-10)
    assert_close(_moments(op("ScaleBy", "ep", "product")(a=qa, scale=c) * qp), to_p,
                 rtol=1e-7, atol=1e-10)
    # ∫∫ δ(p − c a) m_p(p) m_a(a) dp da = ∫ m_p(c a) m_a(a) da
    assert_close(evidence("ScaleBy", "ep")(product=qp, a=qa, scale=c), log_z, rtol=1e-8,
                 atol=1e-10)
    for algorithm in ("ep", "vmp"):
        assert_close(naturals(op("ScaleBy", algorithm, "a")(product=qp, scale=c)),
                     naturals(op("ScaleBy", "ep", "a")(product=qp, scale=c)))


def _expected_log_output(out: Gaussian, g, qa: Gaussian, qb: Gaussian) -> float:
    """E_{q_a q_b}[log m_out(g(a, b))]: a polynomial of degree ≤ 4, so Gauss–Hermite is
    exact."""
    return gauss_hermite(lambda a, b: _log_normal(g(a, b), float(out.mean),
                                                  float(np.sqrt(out.variance))),
                         [_moments(qa), _moments(qb)])


GAUSSIAN_VMP = {"Plus": (np.add, "sum"), "Minus": (np.subtract, "diff"),
                "Product": (np.multiply, "product")}


@SETTINGS
@given(st.sampled_from(sorted(GAUSSIAN_VMP)), means, sds, means, sds, means, sds)
def test_vmp_messages(name, ma, sa, mb, sb, mo, so):
    g, out = GAUSSIAN_VMP[name]
    qa, qb, qo = Gaussian(ma, sa**2), Gaussian(mb, sb**2), Gaussian(mo, so**2)
    rng = np.random.default_rng(16)
    # to the output: the forward distribution (moments of g(a, b), exact by Gauss–Hermite)
    m1 = gauss_hermite(g, [_moments(qa), _moments(qb)])
    m2 = gauss_hermite(lambda a, b: g(a, b) ** 2, [_moments(qa), _moments(qb)])
    assert_close(_moments(op(name, "vmp", out)(a=qa, b=qb)), [m1, m2 - m1 * m1], rtol=1e-9)
    # to the inputs: the gradient of E[log m_out(g(a, b))]
    slope = vmp_slope(lambda q: _expected_log_output(qo, g, q, qb), perturbed(qa, 3, rng))
    assert_close(naturals(op(name, "vmp", "a")(**{out: qo}, b=qb)), slope, rtol=1e-7,
                 atol=1e-9)
    slope = vmp_slope(lambda q: _expected_log_output(qo, g, qa, q), perturbed(qb, 3, rng))
    assert_close(naturals(op(name, "vmp", "b")(**{out: qo}, a=qa)), slope, rtol=1e-7,
                 atol=1e-9)


@SETTINGS
@given(scales, means, sds, means, sds)
def test_scale_by_vmp_messages(c, ma, sa, mo, so):
    qa, qo = Gaussian(ma, sa**2), Gaussian(mo, so**2)
    assert_close(_moments(op("ScaleBy", "vmp", "product")(a=qa, scale=c)),
                 [c * ma, c * c * sa * sa], rtol=1e-12)
    slope = vmp_slope(lambda q: _expected_log_output(qo, lambda a, b: c * a, q, qa),
                      perturbed(qa, 3, np.random.default_rng(17)))
    assert_close(naturals(op("ScaleBy", "vmp", "a")(product=qo, scale=c)), slope, rtol=1e-7,
                 atol=1e-9)


@pytest.mark.parametrize("name", sorted(GAUSSIAN_VMP))
def test_vmp_refuses_an_observed_output(name):
    out = GAUSSIAN_VMP[name][1]
    with pytest.raises(UnsupportedFactorError, match="observed output"):
        op(name, "vmp", "a")(**{out: np.array(1.0)}, b=Gaussian(0.0, 1.0))


def test_messages_that_would_be_point_masses_are_refused():
    with pytest.raises(UnsupportedFactorError, match="determine"):
        op("Plus", "ep", "a")(sum=np.array(1.0), b=np.array(2.0))
    with pytest.raises(UnsupportedFactorError, match="determine"):
        op("ScaleBy", "ep", "a")(product=np.array(1.0), scale=np.array(2.0))


def test_known_and_point_like_arguments_agree():
    qa, qs = Gaussian(0.3, 1.7), Gaussian(-1.0, 0.6)
    point = Gaussian(0.8, 1e-14)
    for name, out in (("Plus", "sum"), ("Minus", "diff")):
        for algorithm in ("ep", "vmp"):
            assert_close(naturals(op(name, algorithm, "a")(**{out: qs}, b=point)),
                         naturals(op(name, algorithm, "a")(**{out: qs}, b=np.array(0.8))),
                         rtol=1e-9, atol=1e-12)
            assert_close(naturals(op(name, algorithm, out)(a=qa, b=point)),
                         naturals(op(name, algorithm, out)(a=qa, b=np.array(0.8))),
                         rtol=1e-9, atol=1e-12)
        assert_close(evidence(name, "ep")(**{out: qs}, a=qa, b=point),
                     evidence(name, "ep")(**{out: qs}, a=qa, b=np.array(0.8)), rtol=1e-9)
    assert_close(naturals(op("Product", "vmp", "a")(product=qs, b=point)),
                 naturals(op("Product", "vmp", "a")(product=qs, b=np.array(0.8))), rtol=1e-9)
    assert_close(naturals(op("Product", "vmp", "product")(a=qa, b=point)),
                 naturals(op("Product", "vmp", "product")(a=qa, b=np.array(0.8))), rtol=1e-9)


def test_uniform_inputs_give_uniform_messages_and_zero_evidence():
    uniform, q = Gaussian.uniform(()), Gaussian(1.0, 2.0)
    assert_close(naturals(op("Plus", "ep", "sum")(a=uniform, b=q)), [0.0, 0.0])
    assert_close(naturals(op("Plus", "ep", "a")(sum=uniform, b=q)), [0.0, 0.0])
    assert_close(evidence("Plus", "ep")(sum=uniform, a=q, b=q), 0.0)
    assert_close(evidence("Minus", "ep")(diff=q, a=uniform, b=q), 0.0)


def test_batched_operators_equal_elementwise_calls():
    rng = np.random.default_rng(18)
    shape = (3, 2)
    qa, qb, qo = (Gaussian(rng.normal(size=shape), rng.uniform(0.3, 2, shape))
                  for _ in range(3))
    known, c = rng.normal(size=shape), rng.uniform(0.5, 2, shape)
    calls = [(op("ScaleBy", "ep", "product"), {"a": qa, "scale": c}),
             (op("ScaleBy", "vmp", "a"), {"product": qo, "scale": c}),
             (evidence("ScaleBy", "ep"), {"product": known, "a": qa, "scale": c}),
             (op("Product", "vmp", "product"), {"a": qa, "b": known}),
             (op("Product", "vmp", "b"), {"product": qo, "a": qa})]
    for name, out in (("Plus", "sum"), ("Minus", "diff")):
        calls += [(op(name, "ep", out), {"a": qa, "b": known}),
                  (op(name, "ep", "b"), {out: qo, "a": qa}),
                  (op(name, "vmp", "a"), {out: qo, "b": qb}),
                  (evidence(name, "ep"), {out: qo, "a": qa, "b": qb})]
    for fn, kwargs in calls:
        assert_batched(fn, kwargs, shape)
