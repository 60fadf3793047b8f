"""Beta(sample | alpha, beta) and Dirichlet(sample | alpha): priors against quadrature."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from scipy import special, stats

from factorflow.distributions import Beta, Dirichlet
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
    vmp_slope,
)


@SETTINGS
@given(counts, counts, counts, counts)
def test_beta_messages_and_evidence(a, b, qa, qb):
    q = Beta(qa, qb)
    rng = np.random.default_rng(4)

    def expected_log_factor(q):
        elog, elog1m = beta_mean_logs(float(q.alpha), float(q.beta))
        return (a - 1) * elog + (b - 1) * elog1m - special.betaln(a, b)

    for algorithm in ("vmp", "ep"):
        msg = op("Beta", algorithm, "sample")(alpha=a, beta=b)
        slope = vmp_slope(expected_log_factor, perturbed(q, 3, rng))
        assert_close(naturals(msg), slope, rtol=1e-6, atol=1e-8)
    assert_close(evidence("Beta", "vmp")(sample=q, alpha=a, beta=b), expected_log_factor(q),
                 rtol=1e-8, atol=1e-9)
    # tilted moments ∫ x^k f(x) q(x) dx / ∫ f q, with the singular powers as QAWS weights
    z, z1, z2 = (beta_expect(lambda x, k=k: x**k, a + qa - 1, b + qb - 1) for k in (0, 1, 2))
    log_z = (math.log(z) + special.betaln(a + qa - 1, b + qb - 1) - special.betaln(a, b)
             - special.betaln(qa, qb))
    m1, m2 = z1 / z, z2 / z
    post = op("Beta", "ep", "sample")(alpha=a, beta=b) * q
    assert_close([post.mean, post.variance], [m1, m2 - m1 * m1], rtol=1e-7, atol=1e-10)
    assert_close(evidence("Beta", "ep")(sample=q, alpha=a, beta=b), log_z, rtol=1e-8,
                 atol=1e-9)
    assert_close(evidence("Beta", "ep")(sample=np.array(0.3), alpha=a, beta=b),
                 stats.beta.logpdf(0.3, a, b))
    assert_close(evidence("Beta", "ep")(sample=Beta.uniform(()), alpha=a, beta=b), 0.0,
                 atol=1e-12)


@SETTINGS
@given(st.lists(counts, min_size=3, max_size=3), st.lists(counts, min_size=3, max_size=3))
def test_dirichlet_messages_and_evidence(alpha, q_alpha):
    alpha, q = np.array(alpha), Dirichlet(np.array(q_alpha))
    rng = np.random.default_rng(5)
    log_b = np.sum([math.lgamma(x) for x in alpha]) - math.lgamma(alpha.sum())

    def expected_log_factor(q):
        s = float(np.sum(q.alpha))
        elog = [beta_mean_logs(float(ak), s - float(ak))[0] for ak in q.alpha]
        return float(np.dot(alpha - 1, elog) - log_b)

    for algorithm in ("vmp", "ep"):
        msg = op("Dirichlet", algorithm, "sample")(alpha=alpha)
        slope = vmp_slope(expected_log_factor, perturbed(q, 4, rng))
        assert_close(naturals(msg), slope, rtol=1e-6, atol=1e-8)
    assert_close(evidence("Dirichlet", "vmp")(sample=q, alpha=alpha), expected_log_factor(q),
                 rtol=1e-8, atol=1e-9)
    # ∫ Π x_k^(c_k − 1) over the simplex, with x2 = (1 − x1) t: two 1-D Beta integrals
    c = alpha + q.alpha - 1
    z = (beta_expect(lambda t: 1.0, float(c[1]), float(c[2]))
         * beta_expect(lambda x1: 1.0, float(c[0]), float(c[1] + c[2])))
    log_z = math.log(z) + sum(math.lgamma(x) for x in (c[1], c[2], c[0], c[1] + c[2])) \
        - math.lgamma(c[1] + c[2]) - math.lgamma(c.sum())
    log_q = float(np.sum([math.lgamma(x) for x in q.alpha]) - math.lgamma(np.sum(q.alpha)))
    if np.all(q.alpha == 1):   # a uniform message is the weight 1, not the density 2
        log_q = 0.0
    assert_close(evidence("Dirichlet", "ep")(sample=q, alpha=alpha), log_z - log_b - log_q,
                 rtol=1e-7, atol=1e-8)
    x = np.array([0.2, 0.3, 0.5])
    assert_close(evidence("Dirichlet", "ep")(sample=x, alpha=alpha),
                 stats.dirichlet.logpdf(x, alpha))


def test_batched_operators_equal_elementwise_calls():
    rng = np.random.default_rng(6)
    a, b = rng.uniform(0.5, 3, (3, 2)), rng.uniform(0.5, 3, (3, 2))
    q = Beta(rng.uniform(0.5, 3, (3, 2)), rng.uniform(0.5, 3, (3, 2)))
    for fn, kwargs in [(op("Beta", "ep", "sample"), {"alpha": a, "beta": b}),
                       (evidence("Beta", "vmp"), {"sample": q, "alpha": a, "beta": b}),
                       (evidence("Beta", "ep"), {"sample": q, "alpha": a, "beta": b})]:
        assert_batched(fn, kwargs, (3, 2))
    alpha = rng.uniform(0.5, 3, (4, 3))
    qd = Dirichlet(rng.uniform(0.5, 3, (4, 3)))
    for fn, kwargs in [(op("Dirichlet", "vmp", "sample"), {"alpha": alpha}),
                       (evidence("Dirichlet", "vmp"), {"sample": qd, "alpha": alpha}),
                       (evidence("Dirichlet", "ep"), {"sample": qd, "alpha": alpha})]:
        assert_batched(fn, kwargs, (4,))


def test_a_uniform_dirichlet_message_is_the_flat_dirichlet():
    """The all-zero Dirichlet message is Dir(1, 1, 1), a proper density (Γ(3) = 2 on the
    simplex) that the Discrete operators average over (E[p_k] = 1/3), so
    ∫ Dir(x; 1, 1, 1) · Dir(x; 1, 1, 1) dx = Γ(3) = 2 — the convention that makes one
    categorical draw under a flat Dirichlet have evidence 1/3.  Beta(1, 1) has density 1,
    so there both readings agree."""
    flat = np.ones(3)
    assert_close(evidence("Dirichlet", "ep")(sample=Dirichlet.uniform((), 3), alpha=flat),
                 np.log(2.0), atol=1e-12)
    assert_close(evidence("Beta", "ep")(sample=Beta.uniform(()), alpha=1.0, beta=1.0), 0.0,
                 atol=1e-12)
