"""Discrete(sample | probs): operators against enumeration over x and quadrature over the
simplex (K = 3)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from scipy import integrate, special

from factorflow.distributions import Dirichlet, Discrete
from tests.conftest import assert_close
from tests.factors.checks import (
    QUAD,
    SETTINGS,
    assert_batched,
    beta_mean_logs,
    counts,
    evidence,
    naturals,
    op,
    perturbed,
    vmp_slope,
)

triples = st.lists(counts, min_size=3, max_size=3).map(np.array)
simplex = st.lists(st.floats(0.05, 1.0), min_size=3, max_size=3).map(
    lambda w: np.array(w) / np.sum(w))


def dirichlet3_expect(g, alpha) -> float:
    """E[g(p1, p2, p3)] under Dirichlet(alpha), K = 3: p2 = (1 − p1) t, p3 = (1 − p1)(1 − t),
    both one-dimensional integrals by QAWS with the Dirichlet's singular powers as weights."""
    a1, a2, a3 = (float(a) for a in alpha)

    def inner(p1):
        return integrate.quad(lambda t: g(p1, (1 - p1) * t, (1 - p1) * (1 - t)), 0.0, 1.0,
                              weight="alg", wvar=(a2 - 1, a3 - 1), **QUAD)[0]

    outer = integrate.quad(inner, 0.0, 1.0, weight="alg", wvar=(a1 - 1, a2 + a3 - 1), **QUAD)[0]
    log_b = sum(math.lgamma(a) for a in (a1, a2, a3)) - math.lgamma(a1 + a2 + a3)
    return outer * math.exp(-log_b)


def _mean_logs(alpha) -> np.ndarray:
    s = float(np.sum(alpha))
    return np.array([beta_mean_logs(float(a), s - float(a))[0] for a in alpha])


@SETTINGS
@given(simplex, triples)
def test_vmp_messages_and_evidence(q, alpha):
    qx, qp = Discrete(q), Dirichlet(alpha)
    elog = _mean_logs(alpha)
    to_x = op("Discrete", "vmp", "sample")(probs=qp)
    slope = vmp_slope(lambda s: float(np.dot(s, elog)), list(np.eye(3)), constant=False)
    assert_close(to_x.probs, special.softmax(slope), rtol=1e-8)
    to_p = op("Discrete", "vmp", "probs")(sample=qx, probs=qp)
    slope = vmp_slope(lambda d: float(np.dot(q, _mean_logs(d.alpha))),
                      perturbed(qp, 4, np.random.default_rng(9)))
    assert_close(naturals(to_p), slope, rtol=1e-6, atol=1e-8)
    assert_close(evidence("Discrete", "vmp")(sample=qx, probs=qp), np.dot(q, elog), rtol=1e-8)


@SETTINGS
@given(simplex, triples)
def test_ep_messages_match_tilted_moments(q, alpha):
    qx, qp = Discrete(q), Dirichlet(alpha)
    # over x: q_k E[p_k]
    mean_p = np.array([dirichlet3_expect(lambda *p, k=k: p[k], alpha) for k in range(3)])
    post = op("Discrete", "ep", "sample")(probs=qp) * qx
    assert_close(post.probs, q * mean_p / np.dot(q, mean_p), rtol=1e-8)
    assert_close(evidence("Discrete", "ep")(sample=qx, probs=qp), math.log(np.dot(q, mean_p)),
                 rtol=1e-8)

    # over p: m_p(p) Σ_k q_k p_k, matched in mean and Σ_k E[p_k²]
    def tilt(*p):
        return float(np.dot(q, p))

    z = dirichlet3_expect(tilt, alpha)
    mean = np.array([dirichlet3_expect(lambda *p, k=k: p[k] * tilt(*p), alpha)
                     for k in range(3)]) / z
    sum_sq = dirichlet3_expect(lambda *p: float(np.dot(p, p)) * tilt(*p), alpha) / z
    post = op("Discrete", "ep", "probs")(sample=qx, probs=qp) * qp
    a, s = post.alpha, np.sum(post.alpha)
    assert_close(post.mean, mean, rtol=1e-7)
    assert_close(np.sum(a * (a + 1)) / (s * (s + 1)), sum_sq, rtol=1e-7)


@SETTINGS
@given(st.integers(0, 2), triples, simplex)
def test_observed_sample_and_known_probs(x, alpha, p):
    qp = Dirichlet(alpha)
    post = op("Discrete", "ep", "probs")(sample=np.array(x), probs=qp) * qp
    moments = [dirichlet3_expect(lambda *v, k=k: v[k] * v[x], alpha) for k in range(3)]
    assert_close(post.mean, np.array(moments) / np.sum(moments), rtol=1e-7)
    assert_close(evidence("Discrete", "ep")(sample=np.array(x), probs=qp),
                 math.log(np.sum(moments)), rtol=1e-8)
    assert_close(evidence("Discrete", "ep")(sample=np.array(x), probs=p), math.log(p[x]))
    assert_close(evidence("Discrete", "vmp")(sample=np.array(x), probs=p), math.log(p[x]))
    assert_close(op("Discrete", "ep", "sample")(probs=p).probs, p)
    assert_close(naturals(op("Discrete", "vmp", "probs")(sample=np.array(x), probs=qp)),
                 np.eye(3)[x])


def test_known_and_point_like_arguments_agree():
    alpha = np.array([1.5, 0.7, 2.0])
    point = Discrete.from_natural(np.array([-np.inf, 0.0, -np.inf]))
    for algorithm in ("ep", "vmp"):
        assert_close(
            naturals(op("Discrete", algorithm, "probs")(sample=point, probs=Dirichlet(alpha))),
            naturals(op("Discrete", algorithm, "probs")(sample=np.array(1),
                                                        probs=Dirichlet(alpha))),
            rtol=1e-9, atol=1e-9)
    p = np.array([0.2, 0.5, 0.3])
    sharp = Dirichlet(p * 1e10)
    for algorithm in ("ep", "vmp"):
        assert_close(op("Discrete", algorithm, "sample")(probs=sharp).probs,
                     op("Discrete", algorithm, "sample")(probs=p).probs, rtol=1e-8)


def test_uniform_sample_message_has_weight_one():
    qp = Dirichlet(np.array([1.5, 0.7, 2.0]))
    assert_close(evidence("Discrete", "ep")(sample=Discrete.uniform((), 3), probs=qp), 0.0,
                 atol=1e-12)


def test_batched_operators_equal_elementwise_calls():
    rng = np.random.default_rng(10)
    qx = Discrete(rng.dirichlet(np.ones(3), 4))
    qp = Dirichlet(rng.uniform(0.5, 3, (4, 3)))
    x, p = rng.integers(0, 3, 4), rng.dirichlet(np.ones(3), 4)
    for fn, kwargs in [
        (op("Discrete", "vmp", "sample"), {"probs": qp}),
        (op("Discrete", "vmp", "probs"), {"sample": qx, "probs": qp}),
        (op("Discrete", "vmp", "probs"), {"sample": x, "probs": qp}),
        (op("Discrete", "ep", "sample"), {"probs": qp}),
        (op("Discrete", "ep", "probs"), {"sample": qx, "probs": qp}),
        (evidence("Discrete", "vmp"), {"sample": qx, "probs": qp}),
        (evidence("Discrete", "ep"), {"sample": qx, "probs": qp}),
        (evidence("Discrete", "ep"), {"sample": x, "probs": p}),
    ]:
        assert_batched(fn, kwargs, (4,))
