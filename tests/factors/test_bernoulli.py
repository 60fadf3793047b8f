"""Bernoulli(sample | p): operators against quadrature over p and enumeration over x."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from factorflow.distributions import Bernoulli, Beta
from tests.conftest import assert_close
from tests.factors.checks import (
    SETTINGS,
    assert_batched,
    beta_expect,
    beta_mean_logs,
    counts,
    evidence,
    naturals,
    op,
    perturbed,
    probs,
    vmp_slope,
)


def _expected_log_factor(pi: float, qp: Beta) -> float:
    elog, elog1m = beta_mean_logs(float(qp.alpha), float(qp.beta))
    return pi * elog + (1 - pi) * elog1m


@SETTINGS
@given(probs, counts, counts)
def test_vmp_messages_and_evidence(pi, a, b):
    qx, qp = Bernoulli(pi), Beta(a, b)
    to_x = op("Bernoulli", "vmp", "sample")(p=qp)
    slope = vmp_slope(lambda s: _expected_log_factor(float(s[0]), qp),
                      [np.array([0.2]), np.array([0.7])])
    assert_close(naturals(to_x), slope, rtol=1e-7, atol=1e-9)
    to_p = op("Bernoulli", "vmp", "p")(sample=qx)
    slope = vmp_slope(lambda q: _expected_log_factor(pi, q),
                      perturbed(qp, 3, np.random.default_rng(7)))
    assert_close(naturals(to_p), slope, rtol=1e-6, atol=1e-8)
    assert_close(evidence("Bernoulli", "vmp")(sample=qx, p=qp), _expected_log_factor(pi, qp),
                 rtol=1e-8, atol=1e-10)


def _p_weight(x: int):
    return (lambda p: p) if x else (lambda p: 1 - p)


@SETTINGS
@given(st.one_of(probs, st.sampled_from([0.0, 1.0, 0.5])), counts, counts)
def test_ep_messages_match_tilted_moments(pi, a, b):
    qx = Bernoulli(pi)
    qp = Beta(a, b)
    # tilted over x: q(x) E_p[f(x, p)], by quadrature over p
    ep = [beta_expect(_p_weight(x), a, b) for x in (0, 1)]
    tilted_true = pi * ep[1] / (pi * ep[1] + (1 - pi) * ep[0])
    post = op("Bernoulli", "ep", "sample")(p=qp) * qx
    assert_close(post.p, tilted_true, rtol=1e-8, atol=1e-12)
    # tilted over p: m_p(p) (π p + (1 − π)(1 − p)), mean and variance by quadrature
    z, z1, z2 = (beta_expect(lambda p, k=k: p**k * (pi * p + (1 - pi) * (1 - p)), a, b)
                 for k in (0, 1, 2))
    post = op("Bernoulli", "ep", "p")(sample=qx, p=qp) * qp
    assert_close([post.mean, post.variance], [z1 / z, z2 / z - (z1 / z) ** 2], rtol=1e-7,
                 atol=1e-10)
    expected = 0.0 if pi == 0.5 else math.log(z)   # a uniform sample message weighs 1
    assert_close(evidence("Bernoulli", "ep")(sample=qx, p=qp), expected, rtol=1e-8,
                 atol=1e-10)


@SETTINGS
@given(st.booleans(), counts, counts, probs)
def test_observed_sample_and_known_p(x, a, b, p):
    qp = Beta(a, b)
    z, z1, z2 = (beta_expect(lambda t, k=k: t**k * _p_weight(x)(t), a, b) for k in (0, 1, 2))
    post = op("Bernoulli", "ep", "p")(sample=np.array(x), p=qp) * qp
    assert_close([post.mean, post.variance], [z1 / z, z2 / z - (z1 / z) ** 2], rtol=1e-7)
    assert_close(evidence("Bernoulli", "ep")(sample=np.array(x), p=qp), math.log(z),
                 rtol=1e-8)
    assert_close(evidence("Bernoulli", "ep")(sample=np.array(x), p=np.array(p)),
                 math.log(p if x else 1 - p))
    assert_close(op("Bernoulli", "ep", "sample")(p=np.array(p)).p, p)
    assert_close(evidence("Bernoulli", "vmp")(sample=np.array(x), p=np.array(p)),
                 math.log(p if x else 1 - p))


def test_known_and_point_like_arguments_agree():
    for x in (True, False):
        point = Bernoulli.from_natural(np.inf if x else -np.inf)
        assert_close(naturals(op("Bernoulli", "ep", "p")(sample=point, p=Beta(2, 3))),
                     naturals(op("Bernoulli", "ep", "p")(sample=np.array(x), p=Beta(2, 3))))
        assert_close(naturals(op("Bernoulli", "vmp", "p")(sample=point)),
                     naturals(op("Bernoulli", "vmp", "p")(sample=np.array(x))))
    sharp = Beta(0.3e10, 0.7e10)
    for algorithm in ("ep", "vmp"):
        assert_close(naturals(op("Bernoulli", algorithm, "sample")(p=sharp)),
                     naturals(op("Bernoulli", algorithm, "sample")(p=np.array(0.3))),
                     rtol=1e-8)


def test_batched_operators_equal_elementwise_calls():
    rng = np.random.default_rng(8)
    shape = (3, 2)
    qx = Bernoulli(rng.uniform(0.05, 0.95, shape))
    qp = Beta(rng.uniform(0.5, 3, shape), rng.uniform(0.5, 3, shape))
    x, p = rng.random(shape) < 0.5, rng.uniform(0.05, 0.95, shape)
    for fn, kwargs in [
        (op("Bernoulli", "vmp", "sample"), {"p": qp}),
        (op("Bernoulli", "vmp", "p"), {"sample": qx}),
        (op("Bernoulli", "ep", "sample"), {"p": qp}),
        (op("Bernoulli", "ep", "p"), {"sample": qx, "p": qp}),
        (op("Bernoulli", "ep", "p"), {"sample": x, "p": qp}),
        (evidence("Bernoulli", "vmp"), {"sample": qx, "p": qp}),
        (evidence("Bernoulli", "ep"), {"sample": qx, "p": qp}),
        (evidence("Bernoulli", "ep"), {"sample": x, "p": p}),
    ]:
        assert_batched(fn, kwargs, shape)
