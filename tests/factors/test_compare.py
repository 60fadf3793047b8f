"""IsPositive(out | x) and Greater(out | a, b): truncated-Gaussian moment matching against
quadrature, including constraints far in the tails."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import factorflow as ff
from factorflow.distributions import Bernoulli, Gaussian
from factorflow.distributions.moments import E
from factorflow.factors.compare import (
    _greater_a_ep,
    _greater_b_ep,
    _greater_difference_ep,
    truncated_normal_moments,
)
from tests.conftest import assert_close
from tests.factors.checks import (
    SETTINGS,
    assert_batched,
    evidence,
    gaussian_expect,
    means,
    naturals,
    op,
    quad,
    sds,
    truncated_by_quad,
)

out_probs = st.one_of(st.floats(0.01, 0.99), st.sampled_from([0.0, 1.0]))


def _phi(u: float) -> float:
    return 0.5 * math.erfc(-u / math.sqrt(2))


def _tilted(mean: float, var: float, weight) -> tuple[float, float, float]:
    """(Z, mean, variance) of N(mean, var) · weight by quadrature in standard units, split
    at 0 and at the integrand's peak, scaled by the peak so that a tiny Z keeps its
    relative accuracy."""
    sd = math.sqrt(var)
    us = np.linspace(-40.0, 40.0, 8001)
    values = [math.exp(-0.5 * u * u) * weight(mean + sd * u) for u in us]
    peak = int(np.argmax(values))
    scale = values[peak]

    def dens(u):
        return math.exp(-0.5 * u * u) * weight(mean + sd * u) / scale

    points = [-mean / sd, float(us[peak])]
    z = quad(dens, -40.0, 40.0, points)
    m1 = quad(lambda u: u * dens(u), -40.0, 40.0, points) / z
    m2 = quad(lambda u: (u - m1) ** 2 * dens(u), -40.0, 40.0, points) / z
    return z * scale / math.sqrt(2 * math.pi), mean + sd * m1, var * m2


@given(st.one_of(st.floats(-30.0, 30.0), st.floats(30.0, 1e8)))
@SETTINGS
def test_truncated_normal_moments_to_full_precision(t):
    excess, var = truncated_normal_moments(np.array(t))
    ref_excess, ref_var = truncated_by_quad(t)
    assert_close([excess, var], [ref_excess, ref_var], rtol=1e-9)


@SETTINGS
@given(out_probs, means, sds)
def test_is_positive_ep_matches_tilted_moments(p, m, s):
    x = Gaussian(m, s * s)
    z, mean, var = _tilted(m, s * s, lambda v: p if v > 0 else 1 - p)
    post = op("IsPositive", "ep", "x")(out=Bernoulli(p), x=x) * x
    assert_close([post.mean, post.variance], [mean, var], rtol=1e-7, atol=1e-10)
    weight_one = math.log(2.0) if p == 0.5 else 0.0   # a uniform out message weighs 1
    assert_close(evidence("IsPositive", "ep")(out=Bernoulli(p), x=x),
                 math.log(z) + weight_one, rtol=1e-8, atol=1e-10)
    forward = gaussian_expect(lambda v: float(v > 0), m, s * s, [0.0])
    for algorithm in ("ep", "vmp"):
        assert_close(op("IsPositive", algorithm, "out")(x=x).p, forward, rtol=1e-8)


@SETTINGS
@given(st.floats(-1e4, -4.0), st.floats(1e-3, 1e3), st.booleans())
def test_is_positive_ep_far_in_the_tail(z, s, flip):
    """A constraint |z| standard deviations away: the tilted distribution is a truncated
    Gaussian hugging 0, whose moments come from quadrature in the excess over 0."""
    m = z * s
    x, out = Gaussian(-m if flip else m, s * s), np.array(not flip)
    excess, var = truncated_by_quad(-z)
    post = op("IsPositive", "ep", "x")(out=out, x=x) * x
    sign = -1.0 if flip else 1.0
    assert_close([post.mean, post.variance], [sign * s * excess, s * s * var], rtol=1e-7)
    assert_close(evidence("IsPositive", "ep")(out=out, x=x), _log_phi_tail(z), rtol=1e-9)


def _log_phi_tail(z: float) -> float:
    """log Φ(z) for z < 0 from the excess integral: Φ(z) = φ(z) ∫_0^∞ e^{zy − y²/2} dy."""
    integral = quad(lambda y: math.exp(z * y - y * y / 2), 0.0, 60.0 / abs(z), [1.0 / abs(z)])
    return -0.5 * z * z - 0.5 * math.log(2 * math.pi) + math.log(integral)


@SETTINGS
@given(out_probs, means, sds, means, st.one_of(sds, st.just(0.0)))
def test_greater_ep_matches_tilted_moments(p, ma, sa, mb, sb):
    a = Gaussian(ma, sa * sa)
    b = Gaussian(mb, sb * sb) if sb > 0 else np.array(mb)
    out = Bernoulli(p)

    def soft_step(d_over_sd):  # E_b[w(a > b)] as a function of the standardised a − m_b
        return p * _phi(d_over_sd) + (1 - p) * _phi(-d_over_sd)

    if sb > 0:
        za, mean_a, var_a = _tilted(ma, sa * sa, lambda v: soft_step((v - mb) / sb))
        _, mean_b, var_b = _tilted(mb, sb * sb, lambda v: soft_step((ma - v) / sa))
        post = op("Greater", "ep", "b")(out=out, a=a, b=b) * b
        assert_close([post.mean, post.variance], [mean_b, var_b], rtol=1e-7, atol=1e-10)
    else:
        za, mean_a, var_a = _tilted(ma - mb, sa * sa, lambda v: p if v > 0 else 1 - p)
        mean_a += mb
    post = op("Greater", "ep", "a")(out=out, a=a, b=b) * a
    assert_close([post.mean, post.variance], [mean_a, var_a], rtol=1e-7, atol=1e-10)
    weight_one = math.log(2.0) if p == 0.5 else 0.0
    assert_close(evidence("Greater", "ep")(out=out, a=a, b=b), math.log(za) + weight_one,
                 rtol=1e-8, atol=1e-10)
    # P(a > b) = E_a[Φ((a − m_b)/s_b)], or E_a[a > b] for a known b
    forward = gaussian_expect(lambda v: _phi((v - mb) / sb) if sb > 0 else float(v > mb),
                              ma, sa * sa, [] if sb > 0 else [mb])
    for algorithm in ("ep", "vmp"):
        assert_close(op("Greater", algorithm, "out")(a=a, b=b).p, forward, rtol=1e-8)


def test_acceptance_truncated_gaussian():
    """x ~ N(0, 1), constrain x > 0.5: evidence Φ(−0.5) and the posterior of the issue."""
    x = Gaussian(0.0, 1.0)
    post = op("Greater", "ep", "a")(out=np.array(True), a=x, b=np.array(0.5)) * x
    assert_close([post.mean, post.variance], [1.141078, 0.268480], rtol=0, atol=1e-6)
    assert_close(np.exp(evidence("Greater", "ep")(out=np.array(True), a=x, b=np.array(0.5))),
                 0.308537538725987, rtol=1e-12)


def test_known_and_point_like_arguments_agree():
    for v in (0.3, -0.3):
        known = op("IsPositive", "ep", "out")(x=np.array(v))
        point = op("IsPositive", "ep", "out")(x=Gaussian(v, 1e-14))
        assert_close(point.p, known.p, atol=1e-12)
        known = op("Greater", "ep", "out")(a=np.array(v), b=np.array(0.1))
        point = op("Greater", "ep", "out")(a=Gaussian(v, 1e-14), b=Gaussian(0.1, 1e-14))
        assert_close(point.p, known.p, atol=1e-12)
    a = Gaussian(0.2, 1.5)
    for out in (True, False):
        known = op("Greater", "ep", "a")(out=np.array(out), a=a, b=np.array(0.4))
        point = op("Greater", "ep", "a")(out=np.array(out), a=a, b=Gaussian(0.4, 1e-14))
        assert_close(naturals(point), naturals(known), rtol=1e-9)
        fuzzy = op("Greater", "ep", "a")(out=Bernoulli.from_natural(np.inf if out else -np.inf),
                                         a=a, b=np.array(0.4))
        assert_close(naturals(fuzzy), naturals(known))


def test_uniform_incoming_messages():
    uniform = Gaussian.uniform(())
    assert_close(op("IsPositive", "ep", "out")(x=uniform).p, 0.5)
    assert_close(naturals(op("IsPositive", "ep", "x")(out=np.array(True), x=uniform)), [0, 0])
    assert_close(naturals(op("Greater", "ep", "a")(out=np.array(True), a=Gaussian(0, 1),
                                                   b=uniform)), [0, 0])


def test_batched_operators_equal_elementwise_calls():
    rng = np.random.default_rng(15)
    shape = (3, 2)
    x = Gaussian(rng.normal(size=shape) * 3, rng.uniform(0.2, 2, shape))
    y = Gaussian(rng.normal(size=shape), rng.uniform(0.2, 2, shape))
    out, bits = Bernoulli(rng.uniform(0.05, 0.95, shape)), rng.random(shape) < 0.5
    known = rng.normal(size=shape)
    for fn, kwargs in [
        (op("IsPositive", "ep", "out"), {"x": x}),
        (op("IsPositive", "ep", "x"), {"out": out, "x": x}),
        (op("IsPositive", "ep", "x"), {"out": bits, "x": x}),
        (evidence("IsPositive", "ep"), {"out": out, "x": x}),
        (op("Greater", "ep", "out"), {"a": x, "b": known}),
        (op("Greater", "ep", "a"), {"out": out, "a": x, "b": y}),
        (op("Greater", "ep", "b"), {"out": bits, "a": known, "b": y}),
        (evidence("Greater", "ep"), {"out": out, "a": x, "b": y}),
    ]:
        assert_batched(fn, kwargs, shape)


def _message_by_quadrature(lo: float, m: float, s: float) -> tuple[float, float]:
    """(τμ, τ) of IsPositive's EP message to x ~ N(m, s²) from out = Bernoulli(log-odds
    lo), from the truncated integrals a = ∫_{−z}^∞ Xφ(X) dX, b = ∫_{−z}^∞ (X² − 1)φ(X) dX
    (quadrature; z = m/s).  With d = w(T) − w(F) and Z = w(F) + d Φ(z), the tilted
    distribution in standard units has mean u = d a/Z and variance 1 − k, k = u² − d b/Z:
    both proportional to d, so a nearly uniform out keeps its relative precision."""
    z = m / s
    phi = lambda u: math.exp(-0.5 * u * u) / math.sqrt(2 * math.pi)  # noqa: E731
    a = quad(lambda u: u * phi(u), -z, 40.0)
    b = quad(lambda u: (u * u - 1) * phi(u), -z, 40.0)
    w_true = 0.5 if lo == 0 else 1 / (1 + math.exp(-lo))
    d = math.tanh(lo / 2)
    big_z = (1 - w_true) + d * quad(phi, -z, 40.0)
    if lo == 0:  # the uniform message weighs 1 on both values: Z = 1
        big_z = 1.0
    u = d * a / big_z
    k = u * u - d * b / big_z
    return (u + z * k) / (s * (1 - k)), k / (s * s * (1 - k))


@pytest.mark.parametrize("lo", [0.0, 1e-300, 1e-12, -3e-9, 2e-5, 0.7])
@pytest.mark.parametrize(("m", "s"), [(-3.0, 5 ** 0.5), (0.5, 0.53), (2.5, 0.53), (0.0, 1.0)])
def test_is_positive_ep_nearly_uniform_out_by_quadrature(lo, m, s):
    """Fuzz V9: an out message within rounding of uniform gave 1/Var_tilted − 1/Var, pure
    rounding noise of either sign (an improper message, then a NaN evidence).  The message
    is proportional to w(T) − w(F): exactly uniform for a uniform out, and to full
    relative precision for a nearly uniform one."""
    msg = op("IsPositive", "ep", "x")(out=Bernoulli.from_natural(lo), x=Gaussian(m, s * s))
    ref = _message_by_quadrature(lo, m, s)
    assert_close(naturals(msg), ref, rtol=1e-8, atol=1e-8 * abs(math.tanh(lo / 2)) / s)
    if lo == 0:
        assert np.all(np.asarray(naturals(msg)) == 0) and msg.is_uniform()
    # Greater with a known b is IsPositive of a − b
    shifted = op("Greater", "ep", "a")(out=Bernoulli.from_natural(lo),
                                       a=Gaussian(m + 1.25, s * s), b=np.array(1.25))
    assert_close(naturals(shifted)[1], ref[1], rtol=1e-8, atol=1e-8 * abs(lo) / s ** 2)


def test_nearly_uniform_boolean_evidence_is_exact():
    """Fuzz V9 end to end: x[i] ~ N(m_i, v_i), c ~ Bernoulli(1 − 1e-6), (x[i] > 0) | c
    constrained true, so the messages from the Ors to x > 0 are within 1e-6 of uniform.
    EP is exact on this tree: Z = p + (1 − p) Π_i Φ(z_i), P(c | data) = p/Z, and x[i]'s
    posterior is the projection of N(m_i, v_i) (p + (1 − p) Π_{j≠i} Φ(z_j) [x > 0]) (its
    moments by quadrature).  The evidence was NaN before the fix."""
    p, mean, var = 1 - 1e-6, np.array([-3.0, 0.5, 2.5, 0.0]), np.array([5.0, 0.3, 0.3, 1.0])
    with ff.Model("nearly_uniform") as model:
        c = ff.Bernoulli("c", p)
        with ff.Plate(ff.Range("i", 4)):
            x = ff.Gaussian("x", mean, variance=var)
            ff.constrain_true((x > 0) | c)
    result = model.infer("ep", iterations=5)
    cdf = np.array([_phi(t) for t in mean / np.sqrt(var)])
    z = p + (1 - p) * np.prod(cdf)
    assert_close(result.log_evidence, math.log(z), rtol=1e-9)
    assert_close(result["c"].p, p / z, rtol=1e-12)
    post = result["x"]
    for i in range(4):
        others = (1 - p) * np.prod(np.delete(cdf, i))
        _, t_mean, t_var = _tilted(mean[i], var[i], lambda v, o=others: p + o * (v > 0))
        assert_close([post.mean[i], post.variance[i]], [t_mean, t_var], rtol=1e-9)


@pytest.mark.parametrize("compare", ["is_positive", "greater"])
def test_unconstrained_comparison_evidence_is_exact(compare):
    """Fuzz V9 as found: c | (x[i] > 0) with nothing observed, so the message to x > 0 is
    exactly uniform; the message to x was rounding noise of either sign and the evidence
    NaN.  Exact: log Z = 0, x keeps its prior, P(x > y) = Φ((m − m_y)/√(v + v_y)) and
    P(c | (x > y)) = 1 − (1 − p)(1 − P(x > y))."""
    p, mean, var = 0.95, np.array([-3.0, 0.5, 2.5, 0.0]), np.array([5.0, 2 / 7, 2 / 7, 1.0])
    with ff.Model("uniform_out") as model:
        c = ff.Bernoulli("c", p)
        with ff.Plate(ff.Range("i", 4)):
            x = ff.Gaussian("x", mean, variance=var)
            if compare == "greater":
                y = ff.Gaussian("y", 0.25, variance=0.5)
                above, prob = x > y, [_phi(t) for t in (mean - 0.25) / np.sqrt(var + 0.5)]
            else:
                above, prob = ff.is_positive(x), [_phi(t) for t in mean / np.sqrt(var)]
            c | above
    name = "(x > y)" if compare == "greater" else "(x > 0)"
    result = model.infer("ep", iterations=5)
    assert_close(result.log_evidence, 0.0, atol=1e-14)
    assert_close([result["x"].mean, result["x"].variance], [mean, var], rtol=1e-14)
    assert_close(result[name].p, prob, rtol=1e-12)
    assert_close(result[f"(c | {name})"].p, 1 - (1 - p) * (1 - np.array(prob)), rtol=1e-12)


@pytest.mark.parametrize("value", [True, False])
def test_a_certain_bernoulli_out_is_the_known_value(value):
    """out as a Bernoulli of log-odds ±inf (a constraint's message) gives the messages of
    the known value, to the last bit."""
    rng = np.random.default_rng(3)
    a = Gaussian(rng.normal(0, 2, 50), rng.uniform(0.5, 3, 50))
    b = Gaussian(rng.normal(0, 2, 50), rng.uniform(0.5, 3, 50))
    certain = Bernoulli.from_natural(np.full(50, np.inf if value else -np.inf))
    for target in ("a", "b"):
        d_known = op("Greater", "ep", "difference")(out=np.array(value), a=a, b=b)
        d_certain = op("Greater", "ep", "difference")(out=certain, a=a, b=b)
        for x, y in zip(d_known.eta, d_certain.eta, strict=True):
            np.testing.assert_array_equal(x, y)
        known = op("Greater", "ep", target)(out=np.array(value), a=a, b=b,
                                            difference=d_known)
        msg = op("Greater", "ep", target)(out=certain, a=a, b=b, difference=d_certain)
        for x, y in zip(known.eta, msg.eta, strict=True):
            np.testing.assert_array_equal(x, y)


def _constraint_batch(n: int, seed: int) -> tuple[Gaussian, Gaussian]:
    """Messages to a and b whose difference d = a − b spans weak truncations (m_d/s_d up
    to 8), strong ones and the continued fraction's tail (m_d/s_d below −4)."""
    rng = np.random.default_rng(seed)
    va, vb = 10 ** rng.uniform(-2, 2, (2, n))
    z = np.concatenate([rng.uniform(-9, 8, n - 4), [-4.0001, -3.9999, 0.0, 40.0]])
    mb = rng.normal(size=n) * 10
    ma = mb + z * np.sqrt(va + vb)
    return Gaussian(ma, va), Gaussian(mb, vb)


@pytest.mark.parametrize("truth", [True, False])
def test_certain_constraint_batch_equals_the_general_formulas(truth):
    """A certain out over a batch takes the mask-free path (``_certain_naturals``); each
    element alone takes the general one (three ``np.where``).  The precisions are the
    same bits (1 − k is t_var, and where t_var < 0.5, 1 − t_var = k exactly); τμ differs
    only where the truncation is strong, by rounding (u + z k instead of t_excess − z t_var
    off the tail)."""
    n = 400
    a, b = _constraint_batch(n, 7 + truth)
    out = np.full(n, truth)
    d = _greater_difference_ep(out, a, b)
    msg_a, msg_b = _greater_a_ep(out, a, b, d), _greater_b_ep(out, a, b, d)
    x = op("IsPositive", "ep", "x")(out=out, x=a)
    for i in range(n):
        ai, bi = a[i], b[i]
        di = _greater_difference_ep(out[i], ai, bi)
        assert di.eta[1] == d.eta[1][i]
        assert_close(d.eta[0][i], di.eta[0], rtol=1e-13, atol=0)
        for got, want in ((msg_a, _greater_a_ep(out[i], ai, bi, di)),
                          (msg_b, _greater_b_ep(out[i], ai, bi, di))):
            assert_close(got.eta[1][i], want.eta[1], rtol=1e-15, atol=0)
            # (h + τ m)/(1 + τ v): d's rounding, scaled by the cancellation in the sum
            scale = abs(got.eta[1][i] * E(bi if got is msg_a else ai)) + abs(got.eta[0][i])
            assert abs(got.eta[0][i] - want.eta[0]) <= 1e-13 * scale
        xi = op("IsPositive", "ep", "x")(out=out[i], x=ai)
        assert x.eta[1][i] == xi.eta[1]
        assert_close(x.eta[0][i], xi.eta[0], rtol=1e-13, atol=0)


def test_greater_remembers_moments_only_of_the_same_message():
    """The messages to a and b read the moments the message to d remembered for their
    arrays; a message sharing the precision array but not h gets its own moments."""
    n = 50
    a, b = _constraint_batch(n, 3)
    out = np.ones(n, bool)
    d = _greater_difference_ep(out, a, b)
    shifted = Gaussian.from_natural(a.eta[0] + 1.0, a.eta[1])  # same precision array
    fresh = Gaussian.from_natural(a.eta[0] + 1.0, a.eta[1].copy())
    assert np.array_equal(_greater_b_ep(out, shifted, b, d).eta[0],
                          _greater_b_ep(out, fresh, b, d).eta[0])
    copy_b = Gaussian.from_natural(b.eta[0].copy(), b.eta[1].copy())
    for e, f in zip(_greater_a_ep(out, a, b, d).eta, _greater_a_ep(out, a, copy_b, d).eta,
                    strict=True):
        assert np.array_equal(e, f)
