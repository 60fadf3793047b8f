"""VectorGaussian, Wishart, InnerProduct and InnerProductGaussian operators against
independent computations (InnerProductGaussian: the unfused pair it replaces).

* VMP: E_q[log f] by Gauss–Hermite cubature over the vector arguments (exact for the
  polynomials involved) with SciPy's log densities, for several q of the target,
  regressed on E_q[T(target)]: the slope is exactly the message's natural parameters.
* EP: the messages and evidence of linear-Gaussian factors in covariance form
  (N(m, S + Λ⁻¹), bᵀ S b), written here from the definitions.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special, stats

from factorflow.distributions import Gamma, Gaussian, VectorGaussian, Wishart
from factorflow.factors import FACTORS
from tests.conftest import assert_close

DIM = 2


def op(factor, algorithm, target):
    return FACTORS[factor].operators[(algorithm, target)].fn


def spd(rng, d=DIM):
    a = rng.normal(size=(d, d))
    return a @ a.T + 0.5 * np.eye(d)


def random_vg(rng, d=DIM):
    return VectorGaussian(rng.normal(size=d), spd(rng, d))


def random_wishart(rng, d=DIM):
    return Wishart(d + rng.uniform(0.5, 3), spd(rng, d))


def cubature(q: VectorGaussian, degree: int = 3):
    """Nodes and weights with Σ w f(x) = E_q[f] exactly for polynomials of degree < 2·degree."""
    z, w = np.polynomial.hermite_e.hermegauss(degree)
    w = w / w.sum()
    chol = np.linalg.cholesky(q.covariance)
    nodes = np.array([q.mean + chol @ np.array(p) for p in itertools.product(z, repeat=q.dim)])
    weights = np.array([np.prod(p) for p in itertools.product(w, repeat=q.dim)])
    return nodes, weights


def wishart_moments(q: Wishart) -> tuple[np.ndarray, float]:
    """(E[Λ], E[log |Λ|]) from SciPy's wishart and the digamma formula."""
    scale = np.linalg.inv(q.rate)
    d = q.dim
    elog = (np.sum(special.digamma((q.dof - np.arange(d)) / 2)) + d * np.log(2)
            + np.linalg.slogdet(scale)[1])
    return stats.wishart(df=q.dof, scale=scale).mean(), elog


def vg_stats(q) -> np.ndarray:
    """E[T(x)] with each symmetric pair once: (x_i, −x_i x_j / 2 for i ≤ j)."""
    m, s = q.mean, q.covariance
    second = s + np.outer(m, m)
    iu = np.triu_indices(q.dim)
    return np.concatenate([m, -0.5 * second[iu]])


def vg_naturals(msg: VectorGaussian) -> np.ndarray:
    """The naturals in the order of ``vg_stats``: (h, P_ii, 2 P_ij for i < j)."""
    p = msg.precision * (2 - np.eye(msg.dim))
    return np.concatenate([msg.mean_times_precision, p[np.triu_indices(msg.dim)]])


def wishart_stats(q: Wishart) -> np.ndarray:
    mean, elog = wishart_moments(q)
    return np.concatenate([[elog], mean[np.triu_indices(q.dim)]])


def wishart_naturals(msg: Wishart) -> np.ndarray:
    e0, e1 = msg.eta
    return np.concatenate([[e0[0, 0]], (e1 * (2 - np.eye(msg.dim)))[np.triu_indices(msg.dim)]])


def slope(values, rows) -> np.ndarray:
    design = np.array([np.append(r, 1.0) for r in rows])
    return np.linalg.lstsq(design, np.asarray(values), rcond=None)[0][:-1]


def expected_log_vg_factor(qx, qm, lam, elog_lam):
    """E[log N(x; μ, Λ⁻¹)] by cubature over x and μ, Λ through its moments (log f is
    linear in log |Λ| and Λ)."""
    xs, wx = cubature(qx) if isinstance(qx, VectorGaussian) else (qx[None], np.ones(1))
    ms, wm = cubature(qm) if isinstance(qm, VectorGaussian) else (qm[None], np.ones(1))
    total = 0.0
    for x, a in zip(xs, wx, strict=True):
        for m, b in zip(ms, wm, strict=True):
            d = x - m
            total += a * b * (0.5 * elog_lam - 0.5 * DIM * np.log(2 * np.pi)
                              - 0.5 * d @ lam @ d)
    return total


@pytest.mark.parametrize("seed", range(4))
def test_vector_gaussian_vmp_messages_are_slopes_of_the_expected_log_factor(seed):
    rng = np.random.default_rng(seed)
    qx, qm, ql = random_vg(rng), random_vg(rng), random_wishart(rng)
    lam, elog = wishart_moments(ql)
    many = 8
    qs = [random_vg(rng) for _ in range(many)]
    to_x = op("VectorGaussian", "vmp", "sample")(mean=qm, precision=ql)
    values = [expected_log_vg_factor(q, qm, lam, elog) for q in qs]
    assert_close(vg_naturals(to_x), slope(values, [vg_stats(q) for q in qs]), rtol=1e-8,
                 atol=1e-9)
    to_m = op("VectorGaussian", "vmp", "mean")(sample=qx, precision=ql)
    values = [expected_log_vg_factor(qx, q, lam, elog) for q in qs]
    assert_close(vg_naturals(to_m), slope(values, [vg_stats(q) for q in qs]), rtol=1e-8,
                 atol=1e-9)
    wis = [random_wishart(rng) for _ in range(many)]
    to_l = op("VectorGaussian", "vmp", "precision")(sample=qx, mean=qm)
    values = [expected_log_vg_factor(qx, qm, *wishart_moments(q)) for q in wis]
    assert_close(wishart_naturals(to_l), slope(values, [wishart_stats(q) for q in wis]),
                 rtol=1e-8, atol=1e-9)
    value = FACTORS["VectorGaussian"].evidence["vmp"](sample=qx, mean=qm, precision=ql)
    assert_close(value, expected_log_vg_factor(qx, qm, lam, elog), rtol=1e-10)


@pytest.mark.parametrize("seed", range(4))
def test_wishart_vmp_messages_are_slopes_of_the_expected_log_factor(seed):
    rng = np.random.default_rng(seed)
    nu = DIM + 1.5
    qx, qr = random_wishart(rng), random_wishart(rng)

    def expected(qx, qr):
        (ex, elx), (er, elr) = wishart_moments(qx), wishart_moments(qr)
        return (0.5 * (nu - DIM - 1) * elx - 0.5 * np.trace(er @ ex) + 0.5 * nu * elr
                - 0.5 * nu * DIM * np.log(2) - special.multigammaln(nu / 2, DIM))

    wis = [random_wishart(rng) for _ in range(8)]
    to_x = op("Wishart", "vmp", "sample")(dof=nu, rate=qr)
    assert_close(wishart_naturals(to_x), slope([expected(q, qr) for q in wis],
                                               [wishart_stats(q) for q in wis]), rtol=1e-8)
    to_r = op("Wishart", "vmp", "rate")(sample=qx, dof=nu)
    assert_close(wishart_naturals(to_r), slope([expected(qx, q) for q in wis],
                                               [wishart_stats(q) for q in wis]), rtol=1e-8)
    assert_close(FACTORS["Wishart"].evidence["vmp"](sample=qx, dof=nu, rate=qr),
                 expected(qx, qr), rtol=1e-10)
    # all known: the log density is SciPy's
    x, r = spd(rng), spd(rng)
    ref = stats.wishart(df=nu, scale=np.linalg.inv(r)).logpdf(x)
    for algorithm in ("ep", "vmp"):
        assert_close(FACTORS["Wishart"].evidence[algorithm](sample=x, dof=nu, rate=r), ref,
                     rtol=1e-10)


def test_wishart_ep_evidence_is_the_marginal_density():
    """log ∫ W(X; ν, R) m_R(R) dR with X known, m_R a Wishart: by Monte Carlo over m_R."""
    rng = np.random.default_rng(3)
    nu, x, m_r = 3.5, spd(rng), random_wishart(rng)
    value = FACTORS["Wishart"].evidence["ep"](sample=x, dof=nu, rate=m_r)
    rs = m_r.sample(100_000, rng=rng)
    dens = np.exp(FACTORS["Wishart"].log_density(x, nu, rs))
    assert abs(np.exp(value) - dens.mean()) < 5 * dens.std() / np.sqrt(len(dens))
    # and with the rate known and the sample random: ∫ W(X; ν, R) m_X(X) dX
    m_x, r = random_wishart(rng), spd(rng)
    value = FACTORS["Wishart"].evidence["ep"](sample=m_x, dof=nu, rate=r)
    xs = m_x.sample(100_000, rng=rng)
    dens = np.exp(FACTORS["Wishart"].log_density(xs, nu, r))
    assert abs(np.exp(value) - dens.mean()) < 5 * dens.std() / np.sqrt(len(dens))


def test_vector_gaussian_ep_messages_and_evidence_in_covariance_form():
    rng = np.random.default_rng(5)
    mx, mm, lam = random_vg(rng), random_vg(rng), spd(rng)
    to_x = op("VectorGaussian", "ep", "sample")(mean=mm, precision=lam)
    assert_close(to_x.mean, mm.mean, rtol=1e-10)
    assert_close(to_x.covariance, mm.covariance + np.linalg.inv(lam), rtol=1e-10)
    to_m = op("VectorGaussian", "ep", "mean")(sample=mx, precision=lam)
    assert_close(to_m.covariance, mx.covariance + np.linalg.inv(lam), rtol=1e-10)
    ref = stats.multivariate_normal(mm.mean, mx.covariance + mm.covariance
                                    + np.linalg.inv(lam)).logpdf(mx.mean)
    ev = FACTORS["VectorGaussian"].evidence["ep"]
    assert_close(ev(sample=mx, mean=mm, precision=lam), ref, rtol=1e-10)
    x = rng.normal(size=DIM)
    ref = stats.multivariate_normal(mm.mean, mm.covariance + np.linalg.inv(lam)).logpdf(x)
    assert_close(ev(sample=x, mean=mm, precision=lam), ref, rtol=1e-10)
    assert_close(ev(sample=mx, mean=x, precision=lam), stats.multivariate_normal(
        x, mx.covariance + np.linalg.inv(lam)).logpdf(mx.mean), rtol=1e-10)
    ref = stats.multivariate_normal(x, np.linalg.inv(lam)).logpdf(mx.mean * 0 + 1.0)
    assert_close(ev(sample=np.ones(DIM), mean=x, precision=lam), ref, rtol=1e-10)
    # a uniform message stays uniform, and weighs 1 in the evidence
    u = VectorGaussian.uniform((), DIM)
    assert np.all(op("VectorGaussian", "ep", "sample")(mean=u, precision=lam).is_uniform())
    assert_close(ev(sample=u, mean=mm, precision=lam), 0.0, atol=1e-12)


def test_inner_product_messages():
    rng = np.random.default_rng(6)
    qa, qb, b = random_vg(rng), random_vg(rng), rng.normal(size=DIM)
    fwd = op("InnerProduct", "ep", "product")(a=qa, b=b)
    assert_close(fwd.mean, b @ qa.mean, rtol=1e-12)
    assert_close(fwd.variance, b @ qa.covariance @ b, rtol=1e-12)
    # VMP forward: the mean and variance of aᵀb under q(a) q(b), by cubature
    xs, wx = cubature(qa)
    ys, wy = cubature(qb)
    values = np.einsum("id,jd->ij", xs, ys)
    weights = np.outer(wx, wy)
    mean = np.sum(weights * values)
    var = np.sum(weights * values**2) - mean**2
    fwd = op("InnerProduct", "vmp", "product")(a=qa, b=qb)
    assert_close(fwd.mean, mean, rtol=1e-10)
    assert_close(fwd.variance, var, rtol=1e-10)
    # backward: exp E_b[log m(aᵀb)] as a function of a, by cubature over b
    m_out = Gaussian(0.7, 2.5)
    to_a = op("InnerProduct", "vmp", "a")(product=m_out, b=qb)
    a0, a1 = rng.normal(size=DIM), rng.normal(size=DIM)
    diff = np.sum(wy * (m_out.log_prob(ys @ a1) - m_out.log_prob(ys @ a0)))
    assert_close(to_a.log_prob(a1) - to_a.log_prob(a0), diff, rtol=1e-10)
    to_a = op("InnerProduct", "ep", "a")(product=m_out, b=b)
    assert_close(to_a.log_prob(a1) - to_a.log_prob(a0),
                 m_out.log_prob(b @ a1) - m_out.log_prob(b @ a0), rtol=1e-10)
    ev = FACTORS["InnerProduct"].evidence["ep"](product=m_out, a=qa, b=b)
    ref = stats.norm(b @ qa.mean, np.sqrt(b @ qa.covariance @ b + 2.5)).logpdf(0.7)
    assert_close(ev, ref, rtol=1e-10)


def test_vector_operators_broadcast_over_plates():
    """A batch of messages gives the batch of the single messages (one einsum each)."""
    rng = np.random.default_rng(7)
    xs = rng.normal(size=(5, DIM))
    qm = random_vg(rng)
    ql = random_wishart(rng)
    batched = op("VectorGaussian", "vmp", "precision")(sample=xs, mean=qm)
    assert batched.batch_shape == (5,)
    for i in range(5):
        one = op("VectorGaussian", "vmp", "precision")(sample=xs[i], mean=qm)
        assert_close(batched[i].eta[1], one.eta[1], rtol=1e-12)
    ev = FACTORS["VectorGaussian"].evidence["vmp"](sample=xs, mean=qm, precision=ql)
    assert ev.shape == (5,)
    assert_close(ev[3], FACTORS["VectorGaussian"].evidence["vmp"](sample=xs[3], mean=qm,
                                                                  precision=ql), rtol=1e-12)
    m_out = Gaussian(rng.normal(size=5), np.full(5, 2.0))
    to_a = op("InnerProduct", "vmp", "a")(product=m_out, b=xs)
    assert to_a.batch_shape == (5,)
    assert_close(to_a[2].eta[1], op("InnerProduct", "vmp", "a")(product=m_out[2],
                                                                b=xs[2]).eta[1], rtol=1e-12)


# ----- InnerProductGaussian: y ~ N(aᵀb, 1/τ), a and b random (the fused pair) --------------
def _plate_vg(rng, shape, d, shared):
    """A VectorGaussian message of batch ``shape``: random means, and one random precision
    for all elements (``shared``) or one each."""
    count = int(np.prod(shape))
    prec = (np.broadcast_to(spd(rng, d), (count, d, d)).copy() if shared
            else np.stack([spd(rng, d) for _ in range(count)]))
    return VectorGaussian(rng.normal(size=shape + (d,)), precision=prec.reshape(shape + (d, d)))


@settings(max_examples=60, deadline=None)
@given(p=st.integers(1, 5), q=st.integers(1, 5), d=st.integers(1, 4),
       a_axis=st.sampled_from([0, 1]), shared=st.booleans(),
       tau_kind=st.sampled_from(["one", "per column", "known"]), latent=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_inner_product_gaussian_messages_are_the_unfused_pair(p, q, d, a_axis, shared,
                                                              tau_kind, latent, seed):
    """Over a (P, Q) plate with a varying along one axis and b along the other, the fused
    factor's VMP messages to a, b, τ and y and its evidence equal the unfused pair's
    (InnerProduct's messages to the vectors from the Gaussian's message to its mean, the
    Gaussian's messages to τ and y and its evidence from InnerProduct's forward
    distribution), summed over the same plate axes, to 1e-10: on a grid (one τ: the
    matrix-product path) and off it (τ per column, per element: the general path);
    precisions shared by all elements or not; y data or a latent Gaussian."""
    rng = np.random.default_rng(seed)
    shape = (p, q)
    b_axis = 1 - a_axis
    a_shape = (1, q) if a_axis == 1 else (p, 1)
    b_shape = (p, 1) if b_axis == 0 else (1, q)
    qa, qb = _plate_vg(rng, a_shape, d, shared), _plate_vg(rng, b_shape, d, not shared)
    y = rng.normal(size=shape)
    if latent:
        y = Gaussian(y, rng.uniform(0.5, 2.0, size=shape))
    tau_axes = (0, 1)
    if tau_kind == "one":
        tau = Gamma(np.array(rng.uniform(1, 5)), rate=np.array(rng.uniform(1, 5)))
    elif tau_kind == "known":
        tau = rng.uniform(0.5, 3.0)
    else:
        tau = Gamma(rng.uniform(1, 5, size=(1, q)), rate=rng.uniform(1, 5, size=(1, q)))
        tau_axes = (0,)
    fused = FACTORS["InnerProductGaussian"]
    to_mean = op("Gaussian", "vmp", "mean")(sample=y, precision=tau)
    forward = op("InnerProduct", "vmp", "product")(a=qa, b=qb)
    # the forward distribution (on this grid: matrix products) against each element's
    # E aᵀE b and tr(Σ_a E[b bᵀ]) + E aᵀ Σ_b E a written out
    (ma, ca), (mb, cb) = qa.mean_and_covariance(), qb.mean_and_covariance()
    ebb = cb + mb[..., :, None] * mb[..., None, :]
    assert_close(forward.mean, np.einsum("...i,...i->...", ma, mb), rtol=1e-10, atol=1e-12)
    assert_close(forward.variance, np.einsum("...ij,...ij->...", ca, ebb)
                 + np.einsum("...i,...ij,...j->...", ma, cb, ma), rtol=1e-10)

    def same(x, ref):
        for e, r in zip(x.eta, ref.eta, strict=True):
            assert_close(e, r, rtol=1e-10, atol=1e-10 * (1 + np.max(np.abs(r))))

    for reduce in (None, (shape, (b_axis,))):  # to a: summed over the axis b varies along
        same(op("InnerProductGaussian", "vmp", "a")(sample=y, b=qb, precision=tau,
                                                    **({"reduce": reduce} if reduce else {})),
             op("InnerProduct", "vmp", "a")(product=to_mean, b=qb,
                                            **({"reduce": reduce} if reduce else {})))
    same(op("InnerProductGaussian", "vmp", "b")(sample=y, a=qa, precision=tau,
                                                reduce=(shape, (a_axis,))),
         op("InnerProduct", "vmp", "b")(product=to_mean, a=qa, reduce=(shape, (a_axis,))))
    if tau_kind != "known":
        same(op("InnerProductGaussian", "vmp", "precision")(sample=y, a=qa, b=qb,
                                                            reduce=(shape, tau_axes)),
             op("Gaussian", "vmp", "precision")(sample=y, mean=forward,
                                                reduce=(shape, tau_axes)))
        same(op("InnerProductGaussian", "vmp", "precision")(sample=y, a=qa, b=qb),
             op("Gaussian", "vmp", "precision")(sample=y, mean=forward))
    same(op("InnerProductGaussian", "vmp", "sample")(a=qa, b=qb, precision=tau),
         op("Gaussian", "vmp", "sample")(mean=forward, precision=tau))
    evidence = fused.evidence["vmp"](sample=y, a=qa, b=qb, precision=tau)
    ref = FACTORS["Gaussian"].evidence["vmp"](sample=y, mean=forward, precision=tau)
    assert np.shape(evidence) == np.shape(ref) == shape
    assert_close(evidence, ref, rtol=1e-10, atol=1e-10)


def test_inner_product_gaussian_over_three_plates_takes_the_general_path():
    """a over (Q, R), b over P, y over (P, Q, R): no grid; the messages are the unfused
    pair's (1e-10)."""
    rng = np.random.default_rng(8)
    shape, d = (3, 2, 4), 3
    qa, qb = _plate_vg(rng, (1, 2, 4), d, False), _plate_vg(rng, (3, 1, 1), d, True)
    y, tau = rng.normal(size=shape), Gamma(np.array(2.0), rate=np.array(1.5))
    to_mean = op("Gaussian", "vmp", "mean")(sample=y, precision=tau)
    forward = op("InnerProduct", "vmp", "product")(a=qa, b=qb)
    pairs = [
        (op("InnerProductGaussian", "vmp", "a")(sample=y, b=qb, precision=tau,
                                                reduce=(shape, (0,))),
         op("InnerProduct", "vmp", "a")(product=to_mean, b=qb, reduce=(shape, (0,)))),
        (op("InnerProductGaussian", "vmp", "b")(sample=y, a=qa, precision=tau,
                                                reduce=(shape, (1, 2))),
         op("InnerProduct", "vmp", "b")(product=to_mean, a=qa, reduce=(shape, (1, 2)))),
        (op("InnerProductGaussian", "vmp", "precision")(sample=y, a=qa, b=qb,
                                                        reduce=(shape, (0, 1, 2))),
         op("Gaussian", "vmp", "precision")(sample=y, mean=forward, reduce=(shape, (0, 1, 2)))),
    ]
    for fused, ref in pairs:
        for e, r in zip(fused.eta, ref.eta, strict=True):
            assert_close(e, r, rtol=1e-10, atol=1e-12)
    assert_close(FACTORS["InnerProductGaussian"].evidence["vmp"](sample=y, a=qa, b=qb,
                                                                 precision=tau),
                 FACTORS["Gaussian"].evidence["vmp"](sample=y, mean=forward, precision=tau),
                 rtol=1e-10)


def test_shared_moments_are_remembered_by_the_memory_of_the_message():
    """``inner_product.shared_moments`` keeps its results by ``multivariate.remembered``
    (the posteriors' own mechanism): read again through a new object over the same
    memory (a posterior laid out anew for a statement) it is not computed again; other
    memory is, to the same values; the remembered arrays are read-only and forgotten
    with the memory.  Shared precisions keep length 1 along their axis."""
    import gc

    from factorflow.distributions.base import _MEMO
    from factorflow.factors.inner_product import shared_moments

    rng = np.random.default_rng(3)
    a = rng.normal(size=(3, 3))
    spd = a @ a.T + 3 * np.eye(3)
    v = VectorGaussian(rng.normal(size=(5, 3)), np.broadcast_to(spd, (5, 3, 3)).copy())
    mean, cov = shared_moments(v)
    assert cov.shape == (1, 3, 3)  # one inversion for the five equal precisions
    assert_close(cov[0], spd, rtol=1e-12, atol=1e-12)  # (the second argument: the covariance)
    again = shared_moments(VectorGaussian.from_natural(*v.eta))
    assert again[0] is mean and again[1] is cov
    assert not mean.flags.writeable and not cov.flags.writeable
    other = VectorGaussian.from_natural(*(np.array(e) for e in v.eta))
    fresh = shared_moments(other)
    assert fresh[1] is not cov
    assert_close(fresh[0], mean, rtol=0, atol=0)
    before = len(_MEMO)
    del v, again, other, fresh
    gc.collect()
    assert len(_MEMO) < before
