"""IsBetween(out | x, lower, upper): EP moment matching against quadrature (each tilted
moment a one-dimensional integral over x, the bounds integrated in closed form), the
bivariate normal distribution function against SciPy's, and single-site models, where
EP is exact."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

import factorflow as ff
from factorflow.distributions import Bernoulli, Gaussian
from factorflow.factors import FACTORS
from factorflow.factors.between import bivariate_cdf
from tests.conftest import assert_close
from tests.factors.checks import SETTINGS, means, sds

BETWEEN = FACTORS["IsBetween"]
out_probs = st.one_of(st.floats(0.05, 0.95), st.just(1.0))
bound_sds = st.one_of(sds, st.just(0.0))  # 0: a known bound


def _phi(z: float) -> float:
    return math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


def _cdf(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2))


def _legendre(lo: float, hi: float, cuts: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of composite 40-point Gauss–Legendre rules on [lo, hi], split at
    ``cuts`` (the integrands' steps) and into 64 pieces (smooth in between: 1e-13)."""
    t, w = np.polynomial.legendre.leggauss(40)
    edges = np.unique(np.concatenate([np.linspace(lo, hi, 65),
                                      [c for c in cuts if lo < c < hi]]))
    a, b = edges[:-1, None], edges[1:, None]
    return ((a + b) / 2 + (b - a) / 2 * t).ravel(), ((b - a) / 2 * w).ravel()


def tilted(p, mx, sx, ml, sl, mu, su) -> dict[str, tuple[float, float, float]]:
    """(Z, mean, variance) of the tilted distribution N(x) N(l) N(u) (p·in + (1−p)·out),
    in = [l < x < u], for x, l and u: integrals over x of closed forms in l and u
    (∫_{−∞}^{x} l^k N(l) dl and ∫_{x}^{∞} u^k N(u) du)."""
    x, w = _legendre(mx - 14 * sx, mx + 14 * sx, [ml, mu])
    w = w * stats.norm.pdf(x, mx, sx)
    if sl > 0:
        a = (x - ml) / sl
        pl = (stats.norm.cdf(a), ml * stats.norm.cdf(a) - sl * stats.norm.pdf(a),
              (ml * ml + sl * sl) * stats.norm.cdf(a) - sl * stats.norm.pdf(a) * (ml + x))
    else:
        below = (ml < x) * 1.0
        pl = (below, ml * below, ml * ml * below)
    if su > 0:
        b = (x - mu) / su
        pu = (stats.norm.sf(b), mu * stats.norm.sf(b) + su * stats.norm.pdf(b),
              (mu * mu + su * su) * stats.norm.sf(b) + su * stats.norm.pdf(b) * (mu + x))
    else:
        above = (mu > x) * 1.0
        pu = (above, mu * above, mu * mu * above)
    inside = {"x": [np.sum(w * x ** k * pl[0] * pu[0]) for k in range(3)],
              "lower": [np.sum(w * pl[k] * pu[0]) for k in range(3)],
              "upper": [np.sum(w * pl[0] * pu[k]) for k in range(3)]}
    prior = {"x": (1.0, mx, mx * mx + sx * sx), "lower": (1.0, ml, ml * ml + sl * sl),
             "upper": (1.0, mu, mu * mu + su * su)}
    result = {}
    for arg in ("x", "lower", "upper"):
        raw = [(1 - p) * prior[arg][k] + (2 * p - 1) * inside[arg][k] for k in range(3)]
        mean = raw[1] / raw[0]
        result[arg] = (raw[0], mean, raw[2] / raw[0] - mean * mean)
    return result


def _arg(m: float, s: float):
    return Gaussian(m, s * s) if s > 0 else np.array(m)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(out_probs, means, sds, means, bound_sds, means, bound_sds)
def test_ep_messages_are_exact_moment_matching(p, mx, sx, ml, sl, mu, su):
    mu = ml + abs(mu) + 0.1  # the interval is not empty in expectation
    ref = tilted(p, mx, sx, ml, sl, mu, su)
    out = Bernoulli(p) if p < 1 else np.array(True)
    args = {"out": out, "x": _arg(mx, sx), "lower": _arg(ml, sl), "upper": _arg(mu, su)}
    for target, s in (("x", sx), ("lower", sl), ("upper", su)):
        if s == 0:
            continue
        post = BETWEEN.message("ep", target)(**args) * args[target]
        z, mean, var = ref[target]
        assert_close([post.mean, post.variance], [mean, var], rtol=1e-6, atol=1e-9)
    weight_one = math.log(2.0) if p == 0.5 else 0.0
    assert_close(BETWEEN.evidence["ep"](**args), math.log(ref["x"][0]) + weight_one,
                 rtol=1e-6, atol=1e-9)
    forward = BETWEEN.message("ep", "out")(x=args["x"], lower=args["lower"],
                                           upper=args["upper"])
    assert_close(forward.p, tilted(1.0, mx, sx, ml, sl, mu, su)["x"][0], rtol=1e-6)
    assert_close(BETWEEN.message("vmp", "out")(x=args["x"], lower=args["lower"],
                                               upper=args["upper"]).p, forward.p, rtol=1e-12)


@SETTINGS
@given(st.floats(-4, 4), st.floats(-4, 4), st.floats(-0.99, 0.0))
def test_bivariate_cdf_equals_scipy(h, k, rho):
    s = math.sqrt(1 - rho * rho)
    want = stats.multivariate_normal([0, 0], [[1, rho], [rho, 1]]).cdf([h, k])
    assert_close(bivariate_cdf(h, k, rho, s), want, rtol=1e-6, atol=1e-9)


def test_bivariate_cdf_limits():
    assert_close(bivariate_cdf(np.inf, 0.3, -0.5, math.sqrt(0.75)), _cdf(0.3), rtol=1e-15)
    assert bivariate_cdf(-np.inf, 0.3, -0.5, math.sqrt(0.75)) == 0.0
    assert_close(bivariate_cdf(0.0, 0.0, 0.0, 1.0), 0.25, rtol=1e-14)
    assert_close(bivariate_cdf(1.0, 0.5, -1.0, 0.0), _cdf(1.0) - _cdf(-0.5), rtol=1e-14)


def test_a_uniform_bound_is_no_bound_and_gets_a_uniform_message():
    """With the upper bound's message uniform the factor is x > lower (Greater's), and the
    message to the upper bound is uniform."""
    x, lower = Gaussian(0.2, 1.5), Gaussian(-0.4, 0.6)
    args = {"out": np.array(True), "x": x, "lower": lower, "upper": Gaussian.uniform(())}
    one_sided = FACTORS["Greater"].message("ep", "a")(out=np.array(True), a=x, b=lower)
    assert_close(np.array(BETWEEN.message("ep", "x")(**args).eta), np.array(one_sided.eta),
                 rtol=1e-10)
    assert np.all(BETWEEN.message("ep", "upper")(**args).is_uniform())
    assert np.all(BETWEEN.message("ep", "lower")(**args).is_proper())


def _site(ml: float, vl: float, mu: float, vu: float) -> ff.Model:
    with ff.Model("site") as model:
        x = ff.Gaussian("x", 0.3, variance=1.2)
        lower = ff.Gaussian("lower", ml, variance=vl) if vl > 0 else ml
        upper = ff.Gaussian("upper", mu, variance=vu) if vu > 0 else mu
        ff.constrain_true(ff.is_between(x, lower, upper))
    return model


def test_single_site_model_is_exact_under_ep():
    """One IsBetween site on Gaussian priors: EP's posteriors and evidence are the tilted
    moments and log Z, to 1e-6 (quadrature)."""
    for ml, vl, mu, vu in [(-1.0, 0.5, 1.0, 0.8), (-0.5, 0.0, 1.5, 0.0), (-2.0, 0.3, 0.8, 0.0)]:
        result = _site(ml, vl, mu, vu).infer("ep")
        assert result.converged
        ref = tilted(1.0, 0.3, math.sqrt(1.2), ml, math.sqrt(vl), mu, math.sqrt(vu))
        assert_close(result.log_evidence, math.log(ref["x"][0]), rtol=1e-6, atol=1e-9)
        for name, v in (("x", 1.0), ("lower", vl), ("upper", vu)):
            if v > 0:
                _, mean, var = ref[name]
                assert_close([result[name].mean, result[name].variance], [mean, var],
                             rtol=1e-6, atol=1e-9)


def test_truncation_over_a_plate_matches_scipy():
    """Known bounds over a plate: the posterior is SciPy's truncated normal."""
    lo, hi = np.array([-1.0, 0.0, 0.5]), np.array([1.0, 3.0, 0.7])
    with ff.Model("plate") as model:
        with ff.Plate(ff.Range("n", 3)):
            x = ff.Gaussian("x", 0.2, variance=2.0)
            ff.constrain_true(ff.is_between(x, lo, hi))
    result = model.infer("ep")
    sd = math.sqrt(2.0)
    ref = stats.truncnorm((lo - 0.2) / sd, (hi - 0.2) / sd, loc=0.2, scale=sd)
    assert_close(result["x"].mean, ref.mean(), rtol=1e-9)
    assert_close(result["x"].variance, ref.var(), rtol=1e-9)
    z = stats.norm.cdf(hi, 0.2, sd) - stats.norm.cdf(lo, 0.2, sd)
    assert_close(result.log_evidence, float(np.sum(np.log(z))), rtol=1e-9)


def test_shared_arguments_are_refused():
    with ff.Model():
        x = ff.Gaussian("x", 0.0, variance=1.0)
        try:
            ff.is_between(x, x - 1.0, 2.0)
        except ff.ModelError as err:
            assert "share x" in str(err)
        else:
            raise AssertionError("expected ModelError")


def test_the_text_dsl_builds_the_same_model():
    dsl = ff.parse("x ~ Gaussian(0.2, variance=2.0); constrain_true(is_between(x, -1, 1))",
                   data={})
    with ff.Model() as api:
        x = ff.Gaussian("x", 0.2, variance=2.0)
        ff.constrain_true(ff.is_between(x, -1.0, 1.0))
    a, b = dsl.infer("ep"), api.infer("ep")
    assert_close(a["x"].mean, b["x"].mean, rtol=1e-14)
    assert_close(a.log_evidence, b.log_evidence, rtol=1e-14)


YS = (0.3, 1.4, 2.0)


def _truncated(lo: float, hi: float, hierarchical: bool) -> ff.Model:
    """x (under mu ~ N(0, 1), or directly N(0, 1.5)) truncated to (lo, hi), three data."""
    with ff.Model("truncated") as model:
        if hierarchical:
            x = ff.Gaussian("x", ff.Gaussian("mu", 0.0, variance=1.0), variance=0.5)
        else:
            x = ff.Gaussian("x", 0.0, variance=1.5)
        ff.constrain_true(ff.is_between(x, lo, hi))
        with ff.Plate(ff.Range("n", len(YS))):
            ff.Gaussian("y", x, variance=1.0, observed=list(YS))
    return model


def _log_z(lo: float, hi: float) -> float:
    """log ∫_lo^hi N(x; 0, 1.5) Π N(y; x, 1) dx by quadrature (mu integrated out)."""
    def f(x):
        return stats.norm.pdf(x, 0, math.sqrt(1.5)) * np.prod(stats.norm.pdf(YS, x, 1.0))
    return math.log(integrate.quad(f, lo, hi, epsabs=0, epsrel=1e-13)[0])


def _prior_truncation(prec: float, h: float, lo: float, hi: float):
    """SciPy's truncation of N(h/prec, 1/prec) to (lo, hi)."""
    m, s = h / prec, 1 / math.sqrt(prec)
    return stats.truncnorm((lo - m) / s, (hi - m) / s, loc=m, scale=s)


def _mean_field(lo: float, hi: float) -> tuple[float, float, float, float]:
    """q(mu) q(x) for the hierarchical model by coordinate ascent written out: q(mu)
    Gaussian, q(x) the truncation of exp E[log N(x; mu, ½)] Π N(y; x, 1); returns
    (E x, Var x, E mu, bound)."""
    ex, vx = 0.0, 1.0
    for _ in range(60):  # contracts by about 0.3 per step
        prec_mu = 1 + 2
        m_mu, v_mu = 2 * ex / prec_mu, 1 / prec_mu
        q_x = _prior_truncation(2 + len(YS), 2 * m_mu + sum(YS), lo, hi)
        ex, vx = float(q_x.mean()), float(q_x.var())
    ex2 = vx + ex * ex
    bound = (stats.norm.logpdf(0, 0, 1) - 0.5 * (v_mu + m_mu ** 2)                 # mu
             + stats.norm.logpdf(0, 0, math.sqrt(0.5)) - (ex2 - 2 * ex * m_mu
                                                          + v_mu + m_mu ** 2)      # x | mu
             + sum(stats.norm.logpdf(0, 0, 1) - 0.5 * (y * y - 2 * y * ex + ex2) for y in YS)
             + 0.5 * math.log(2 * math.pi * math.e * v_mu) + float(q_x.entropy()))
    return ex, vx, m_mu, bound


@pytest.mark.parametrize("lo, hi", [(-0.5, 1.0), (-8.0, 0.2), (1.5, 6.0)])
def test_vmp_truncating_the_only_latent_is_exact(lo, hi):
    """x the only latent: q(x) is the truncated posterior (SciPy's moments) and the bound
    is log Z (quadrature), from the first sweep on."""
    result = _truncated(lo, hi, hierarchical=False).infer("vmp", iterations=50)
    exact = _prior_truncation(1 / 1.5 + len(YS), sum(YS), lo, hi)
    assert_close([result["x"].mean, result["x"].variance], [exact.mean(), exact.var()],
                 rtol=1e-9, atol=1e-12)
    assert_close(result.log_evidence, _log_z(lo, hi), rtol=1e-9)
    assert_close(np.asarray(result.trace), _log_z(lo, hi), rtol=1e-9)


@pytest.mark.parametrize("lo, hi", [(-0.5, 1.0), (1.5, 6.0)])
def test_vmp_truncation_under_a_random_mean_is_the_mean_field_optimum(lo, hi):
    """mu -> x, x truncated: the fixed point is the mean-field optimum written out above
    (q(x) truncated), and its bound is below log Z (quadrature)."""
    result = _truncated(lo, hi, hierarchical=True).infer("vmp", iterations=300)
    ex, vx, m_mu, bound = _mean_field(lo, hi)
    assert_close([result["x"].mean, result["x"].variance, result["mu"].mean],
                 [ex, vx, m_mu], rtol=1e-8, atol=1e-12)
    assert_close(result.log_evidence, bound, rtol=1e-9)
    assert result.log_evidence < _log_z(lo, hi)


def test_vmp_refuses_random_bounds_and_a_random_boolean_by_name():
    with ff.Model("bounds") as model:
        x = ff.Gaussian("x", 0.0, variance=1.0)
        ff.constrain_true(ff.is_between(x, ff.Gaussian("w", -1.0, variance=1.0), 1.0))
    with pytest.raises(ff.UnsupportedFactorError, match=r"ff.is_between\(x, ff.Gaussian.*"
                       r"VMP needs IsBetween argument 'lower' to be known.*use 'ep'"):
        model.infer("vmp")
    with ff.Model("latent") as model:
        x = ff.Gaussian("x", 0.0, variance=1.0)
        with ff.If(ff.is_between(x, -1.0, 1.0)):
            ff.Gaussian("y", 0.0, variance=1.0, observed=0.5)
    with pytest.raises(ff.UnsupportedFactorError, match=r"IsBetween under VMP: the message "
                       r"to x needs the boolean .* known.*use 'ep'"):
        model.infer("vmp")


def test_vmp_refuses_a_second_truncation_of_one_variable_by_name():
    """Two intervals on one x (or one repeated over a plate x lacks): q(x) would be the
    truncation to their intersection, which one message per factor does not give (it
    gave a "bound" above log Z), so VMP refuses and names both."""
    with ff.Model("twice") as model:
        x = ff.Gaussian("x", 0.0, variance=1.0)
        ff.constrain_true(ff.is_between(x, -1.0, 2.0))
        ff.constrain_true(ff.is_between(x, 0.0, 3.0))
    with pytest.raises(ff.UnsupportedFactorError, match=r"is_between\(x, 0.0, 3.0\).*one "
                       r"IsBetween on each element of x, and x has one already \(.*"
                       r"is_between\(x, -1.0, 2.0\).*use 'ep'"):
        model.infer("vmp")
    with ff.Model("plate") as model:
        x = ff.Gaussian("x", 0.0, variance=1.0)
        with ff.Plate(ff.Range("n", 2)):
            ff.constrain_true(ff.is_between(x, -1.0, 2.0))
    with pytest.raises(ff.UnsupportedFactorError, match="repeated over n, which x lacks"):
        model.infer("vmp")


def test_vmp_truncates_each_element_of_a_plate_once():
    """x[n] ~ N(0, 1) each truncated to its own interval: SciPy's truncated moments and
    log Z = Σ log P(lo_n < x < hi_n)."""
    lo, hi = np.array([-1.0, 0.5, -3.0]), np.array([0.5, 2.0, -0.5])
    with ff.Model("plated") as model:
        with ff.Plate(ff.Range("n", 3)):
            x = ff.Gaussian("x", 0.0, variance=1.0)
            ff.constrain_true(ff.is_between(x, lo, hi))
    result = model.infer("vmp", iterations=20)
    exact = stats.truncnorm(lo, hi)
    assert_close(result["x"].mean, exact.mean(), rtol=1e-9, atol=1e-12)
    assert_close(result["x"].variance, exact.var(), rtol=1e-9)
    assert_close(result.log_evidence, np.sum(np.log(stats.norm.cdf(hi) - stats.norm.cdf(lo))),
                 rtol=1e-9)
