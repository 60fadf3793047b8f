"""The softmax factor (factors.softmax, ``ff.Discrete(name, ff.softmax(eta))``) against
numbers computed without it.

* EP with one softmax site on a Gaussian prior is exact in its moments and evidence, so the
  posterior must equal the tilted distribution's moments, here by a product Gauss–Hermite
  rule in the prior's Cholesky coordinates (48 nodes per axis, within 2e-13 of 100: a rule of another kind
  than the factor's nested logistic-in-trapezoid quadrature), or for a wide prior by SciPy's
  adaptive ``nquad``;
* VMP's fixed point must maximise Böhning's bound, found here by SciPy's optimiser on the
  bound written out; its bound must stay below log Z and never fall.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, optimize, special

import factorflow as ff
from tests.conftest import assert_close
from tests.factors.checks import SETTINGS

NODES = 48


def tilted_by_hermite(m: np.ndarray, cov: np.ndarray, y: int | None,
                      nodes: int = NODES) -> tuple[float, np.ndarray, np.ndarray]:
    """(log E[softmax_y(η)], tilted mean, tilted covariance) for η ~ N(m, cov) by a
    product Gauss–Hermite rule (y None: the whole prior, Z = 1)."""
    k = len(m)
    x, w = np.polynomial.hermite_e.hermegauss(nodes)
    w = w / math.sqrt(2 * math.pi)
    grids = np.meshgrid(*([x] * k), indexing="ij")
    weights = np.prod(np.meshgrid(*([w] * k), indexing="ij"), axis=0).ravel()
    eta = m + np.stack([g.ravel() for g in grids], -1) @ np.linalg.cholesky(cov).T
    f = weights if y is None else weights * np.exp(eta[:, y] - special.logsumexp(eta, axis=1))
    z = f.sum()
    mean = f @ eta / z
    c = eta - mean
    return math.log(z), mean, (f[:, None] * c).T @ c / z


def covariances(k: int):
    """Random covariance matrices with variances about 0.1 to 3."""
    return st.lists(st.floats(-0.6, 0.6), min_size=k * k, max_size=k * k).flatmap(
        lambda a: st.floats(0.3, 1.5).map(
            lambda s: s * (np.eye(k) + 0.5 * np.reshape(a, (k, k)) @ np.reshape(a, (k, k)).T)))


def single_site(m, cov, y, plate: bool = False):
    with ff.Model() as model:
        if plate:
            k = ff.Range("k", len(m))
            with ff.Plate(k):
                eta = ff.Gaussian("eta", m, variance=np.diag(cov))
            ff.Discrete("y", ff.softmax(eta, k), observed=y)
        else:
            eta = ff.VectorGaussian("eta", m, covariance=cov)
            ff.Discrete("y", ff.softmax(eta), observed=y)
    return model


# ----- EP: exact on one site ---------------------------------------------------------------
@pytest.mark.parametrize("k", [2, 3])
@given(data=st.data())
@settings(SETTINGS, max_examples=12)
def test_ep_single_site_equals_quadrature(k, data):
    m = np.array(data.draw(st.lists(st.floats(-3.0, 3.0), min_size=k, max_size=k)))
    cov = data.draw(covariances(k))
    y = data.draw(st.integers(0, k - 1))
    result = single_site(m, cov, y).infer("ep")
    log_z, mean, c = tilted_by_hermite(m, cov, y)
    q = result["eta"]
    assert_close(result.log_evidence, log_z, rtol=0, atol=1e-6)
    assert_close(q.mean, mean, rtol=0, atol=1e-6)
    assert_close(q.covariance, c, rtol=0, atol=1e-6)


@pytest.mark.parametrize("k", [2, 3])
def test_ep_plate_form_matches_the_tilted_marginals(k):
    """Independent scalars (a plate of K): EP's posterior marginals are the tilted ones."""
    m, v = np.array([0.4, -1.2, 0.9])[:k], np.array([0.7, 2.0, 1.3])[:k]
    result = single_site(m, np.diag(v), 0, plate=True).infer("ep")
    log_z, mean, c = tilted_by_hermite(m, np.diag(v), 0)
    assert_close(result.log_evidence, log_z, rtol=0, atol=1e-6)
    assert_close(result["eta"].mean, mean, rtol=0, atol=1e-6)
    assert_close(result["eta"].variance, np.diag(c), rtol=0, atol=1e-6)


def test_ep_wide_prior_k3_equals_adaptive_quadrature():
    """A prior of variance 25 (where Hermite nodes on the prior miss the step): the
    evidence and mean of the differences d = (η₁ − η₀, η₂ − η₀) by SciPy's nquad."""
    m, cov = np.array([1.0, -2.0, 3.0]), 25.0 * np.eye(3) + 5.0
    result = single_site(m, cov, 0).infer("ep")
    b = np.array([[-1.0, 1.0, 0.0], [-1.0, 0.0, 1.0]])
    md, cd = b @ m, b @ cov @ b.T
    ci = np.linalg.inv(cd)
    norm = 1 / (2 * math.pi * math.sqrt(np.linalg.det(cd)))

    def dens(d1, d2, power=(0, 0)):
        u = np.array([d1, d2]) - md
        return (norm * math.exp(-0.5 * u @ ci @ u - math.log1p(math.exp(d1) + math.exp(d2)))
                * d1 ** power[0] * d2 ** power[1])

    box = [[md[0] - 60, md[0] + 40], [md[1] - 60, md[1] + 40]]
    opts = {"epsabs": 1e-12, "epsrel": 1e-10, "limit": 200}
    z = integrate.nquad(dens, box, opts=[opts, opts])[0]
    e1 = integrate.nquad(lambda a, c: dens(a, c, (1, 0)), box, opts=[opts, opts])[0] / z
    e2 = integrate.nquad(lambda a, c: dens(a, c, (0, 1)), box, opts=[opts, opts])[0] / z
    assert_close(result.log_evidence, math.log(z), rtol=0, atol=1e-6)
    assert_close(b @ result["eta"].mean, [e1, e2], rtol=0, atol=1e-6)


def test_ep_unobserved_sample_gets_the_prior_predictive():
    """y unobserved: P(y = k) = E[softmax_k(η)] and the evidence is 1 (log 0)."""
    m, cov = np.array([0.5, -0.3, 1.1]), np.array([[1.0, 0.2, 0.0], [0.2, 0.5, 0.1],
                                                   [0.0, 0.1, 2.0]])
    result = single_site(m, cov, None).infer("ep")
    probs = [math.exp(tilted_by_hermite(m, cov, y)[0]) for y in range(3)]
    assert_close(result["y"].probs, probs, rtol=0, atol=1e-8)
    assert_close(result["eta"].mean, m, rtol=0, atol=1e-8)
    assert abs(result.log_evidence) < 1e-8


@pytest.mark.parametrize("k", [2, 3])
def test_ep_message_from_an_uncertain_sample_matches_the_mixture(k):
    """A random sample with message w: the tilted distribution is the cavity times
    Σ_y w_y softmax_y(η); the message times the cavity has its moments (in the differences
    η_j − η_0: the message is flat along η + c·1, which the likelihood cannot see)."""
    from factorflow.distributions import Discrete, VectorGaussian
    from factorflow.factors.softmax import SOFTMAX
    m = np.array([0.4, -0.8, 1.0])[:k]
    cov = np.array([[1.0, 0.3, 0.1], [0.3, 0.6, -0.2], [0.1, -0.2, 1.4]])[:k, :k]
    w = np.array([0.5, 0.2, 0.3])[:k] / np.array([0.5, 0.2, 0.3])[:k].sum()
    cavity = VectorGaussian(m, cov)
    msg = SOFTMAX.operators[("ep", "logits")].fn(sample=Discrete(w), logits=cavity)
    post = VectorGaussian.from_natural(cavity.eta[0] + msg.eta[0], cavity.eta[1] + msg.eta[1])
    parts = [tilted_by_hermite(m, cov, y) for y in range(k)]
    z = np.array([math.exp(p[0]) for p in parts]) * w
    p = z / z.sum()
    mean = sum(p[y] * parts[y][1] for y in range(k))
    second = sum(p[y] * (parts[y][2] + np.outer(parts[y][1], parts[y][1])) for y in range(k))
    b = np.hstack([-np.ones((k - 1, 1)), np.eye(k - 1)])
    assert_close(b @ post.mean, b @ mean, rtol=0, atol=1e-7)
    assert_close(b @ post.covariance @ b.T, b @ (second - np.outer(mean, mean)) @ b.T,
                 rtol=0, atol=1e-7)
    evidence = SOFTMAX.evidence["ep"](sample=Discrete(w), logits=cavity)
    assert_close(evidence, math.log(z.sum()), rtol=0, atol=1e-8)


@pytest.mark.parametrize("name", ["DiscreteFromSoftmax", "DiscreteFromSoftmaxPlate"])
def test_evidence_of_known_arguments_is_the_log_density(name):
    from factorflow.factors import FACTORS
    factor = FACTORS[name]
    point = {"sample": np.array([2, 0]), "logits": np.array([[0.3, -1.0, 2.0], [0.0, 0.5, 0.1]])}
    log_f = factor.log_density(**point)
    assert_close(log_f, [2.0 - special.logsumexp([0.3, -1.0, 2.0]),
                         -special.logsumexp([0.0, 0.5, 0.1])], rtol=1e-12)
    for algorithm in ("ep", "vmp"):
        assert_close(factor.evidence[algorithm](**point), log_f, rtol=1e-12)


def test_ep_refuses_more_than_three_categories_by_name():
    model = single_site(np.zeros(4), np.eye(4), 2)
    with pytest.raises(ff.UnsupportedFactorError, match=r"K = 4.*use 'vmp'"):
        model.infer("ep")
    assert model.infer("vmp").converged


# ----- VMP: Böhning's bound -------------------------------------------------------------------
def bohning_bound(m, cov, m0, cov0, y, a):
    """E_q[log prior] + H[q] + E_q[Böhning's bound on log softmax_y] at ψ = m."""
    k = len(m)
    p0 = np.linalg.inv(cov0)
    kl = 0.5 * (np.trace(p0 @ cov) + (m - m0) @ p0 @ (m - m0) - k
                + np.linalg.slogdet(cov0)[1] - np.linalg.slogdet(cov)[1])
    return m[y] - special.logsumexp(m) - 0.5 * np.trace(a @ cov) - kl


@pytest.mark.parametrize("plate", [False, True], ids=["vector", "plate"])
@pytest.mark.parametrize("k", [2, 3, 5])
def test_vmp_fixed_point_maximises_bohning_bound(k, plate):
    rng = np.random.default_rng(k)
    m0 = rng.normal(size=k)
    cov0 = np.diag(rng.uniform(0.3, 2.0, size=k)) if plate else \
        (lambda g: g @ g.T + 0.3 * np.eye(k))(rng.normal(size=(k, k)))
    y = k - 1
    result = single_site(m0, cov0, y, plate=plate).infer("vmp")
    a = 0.5 * np.eye(k) if plate else 0.5 * (np.eye(k) - 1.0 / k)
    # the optimum over (m, S): S = (S0⁻¹ + A)⁻¹ (diagonal in the plate form), m by BFGS
    p0 = np.linalg.inv(cov0)
    cov = np.linalg.inv(p0 + a)
    if plate:
        cov = np.diag(1 / np.diag(p0 + a))
    best = optimize.minimize(lambda mm: -bohning_bound(mm, cov, m0, cov0, y, a), m0,
                             method="BFGS", options={"gtol": 1e-12})
    q = result["eta"]
    assert_close(q.mean, best.x, rtol=0, atol=1e-6)
    assert_close(q.covariance if not plate else np.diag(q.variance), cov, rtol=0, atol=1e-9)
    assert_close(result.log_evidence, -best.fun, rtol=0, atol=1e-9)
    trace = np.asarray(result.trace)
    assert np.all(np.diff(trace) >= -1e-12 * np.abs(trace[1:]))
    if k <= 3:
        assert result.log_evidence < tilted_by_hermite(m0, cov0, y)[0]


def test_vmp_unobserved_sample_reads_the_mean_logits():
    result = single_site(np.array([0.2, 1.0, -0.5]), np.eye(3), None).infer("vmp")
    assert_close(result["y"].probs, special.softmax([0.2, 1.0, -0.5]), rtol=1e-12)


def test_generated_code_names_each_method():
    model = single_site(np.zeros(3), np.eye(3), 1)
    assert "Bohning's quadratic bound on log-sum-exp" in model.compile("vmp").source
    assert "logistic quadrature inside a trapezoid rule" in model.compile("ep").source


# ----- bad input ------------------------------------------------------------------------------
def test_bad_input_is_refused_by_name():
    with ff.Model():
        x = ff.Gaussian("x", 0.0, variance=1.0)
        with pytest.raises(ff.ModelError, match="'y'.*must be a K-vector.*ff.softmax\\(eta, k\\)"):
            ff.Discrete("y", ff.softmax(x))
        with pytest.raises(ff.ModelError, match="arithmetic.*ff.Discrete"):
            ff.softmax(x) + 1.0
        with pytest.raises(ff.ModelError, match="ff.Discrete"):
            ff.Bernoulli("b", ff.softmax(x))
        with pytest.raises(ff.ModelError, match="at least 2 categories"):
            ff.Discrete("c", ff.softmax(np.array([0.3])))
    with ff.Model():
        k, n = ff.Range("k", 3), ff.Range("n", 2)
        with ff.Plate(k):
            with ff.Plate(n):
                e = ff.Gaussian("e", 0.0, variance=1.0)
        with pytest.raises(ff.ModelError, match="'k' must be the innermost plate of 'e'"):
            ff.Discrete("y", ff.softmax(e, k))
        with pytest.raises(ff.ModelError, match="the ff.Range of the K categories"):
            ff.Discrete("y", ff.softmax(e, 3))
