"""The oracle on learnt precision matrices: ``ff.Wishart`` precisions of ``ff.VectorGaussian``
observations (D = 1-3), random models against references written here without factorflow.

* Known means (one or two groups of observations with their own known mean, N = 0-4
  each): conjugate, so VMP is exact: the posterior is Wishart(ν + N, R + Σ (x − m)(x − m)ᵀ)
  and log Z = −ND/2 log 2π + log Z_W(ν + N, R + S) − log Z_W(ν, R), Z_W(ν, R) = 2^(νD/2)
  |R|^(−ν/2) Γ_D(ν/2) (1e-10).  EP has no Wishart messages: it must refuse by name.
* A latent mean μ ~ N(μ0, P0⁻¹) too (mean field q(μ) q(Λ)): the VMP fixed point is
  coordinate ascent written out here (q(μ) precision P0 + N E[Λ], q(Λ) = Wishart(ν + N,
  R + Σ (x − E μ)(x − E μ)ᵀ + N Cov μ), iterated to 1e-14), and the bound is the ELBO
  computed from those posteriors (E[log |Λ|] = ψ_D(ν/2) + D log 2 − log |R|, E[Λ] = ν R⁻¹,
  the Wishart entropy) (1e-10; 2e-12 the largest seen in 150 models).  For D = 1 the
  bound is below log Z (λ integrated out in closed form, μ by the trapezoid rule).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import special

import factorflow as ff
from tests.oracle.checks import oracle_settings

SETTINGS = oracle_settings(40)
VALUES = (-1.5, -0.7, 0.0, 0.4, 1.1, 2.0)


@dataclass(frozen=True)
class WishartModel:
    dof: float
    rate: tuple[tuple[float, ...], ...]
    groups: tuple[tuple[tuple[float, ...], tuple[tuple[float, ...], ...]], ...]  # (mean, xs)
    prior_mean: tuple[float, ...] | None  # a latent mean μ ~ N(prior_mean, prior_precision⁻¹)
    prior_precision: tuple[tuple[float, ...], ...] | None

    @property
    def dim(self) -> int:
        return len(self.rate)

    def code(self) -> str:
        lines = ["import numpy as np", "import factorflow as ff", "",
                 "with ff.Model('wishart') as model:",
                 f"    lam = ff.Wishart('lam', {self.dof!r}, "
                 f"rate=np.array({[list(r) for r in self.rate]!r}))"]
        if self.prior_mean is not None:
            lines.append(f"    mu = ff.VectorGaussian('mu', np.array({list(self.prior_mean)!r}), "
                         f"precision=np.array({[list(r) for r in self.prior_precision]!r}))")
        for i, (mean, xs) in enumerate(self.groups):
            mean_code = "mu" if self.prior_mean is not None else f"np.array({list(mean)!r})"
            lines.append(f"    with ff.Plate(ff.Range('n{i}', {len(xs)})):")
            lines.append(f"        ff.VectorGaussian('x{i}', {mean_code}, precision=lam, "
                         f"observed=np.array({[list(x) for x in xs]!r}).reshape("
                         f"{len(xs)}, {self.dim}))")
        return "\n".join(lines) + "\n"

    __str__ = code

    def build(self) -> ff.Model:
        namespace: dict = {}
        exec(compile(self.code(), "<wishart model>", "exec"), namespace)
        return namespace["model"]


def _spd(draw, dim: int, scales=(0.5, 1.0, 2.0)) -> tuple[tuple[float, ...], ...]:
    """A random positive-definite matrix L Lᵀ + diag, L with entries from a small set."""
    low = np.array([[draw(st.sampled_from((-0.5, 0.0, 0.3, 0.8))) if j < i else 0.0
                     for j in range(dim)] for i in range(dim)])
    diag = np.diag([draw(st.sampled_from(scales)) for _ in range(dim)])
    m = low @ low.T + diag
    return tuple(tuple(round(float(v), 6) for v in row) for row in m)


@st.composite
def wishart_models(draw, latent_mean: bool = False) -> WishartModel:
    dim = draw(st.integers(1, 3))
    dof = float(dim - 1) + draw(st.sampled_from((0.5, 1.0, 2.0, 4.0)))
    rate = _spd(draw, dim)
    groups = []
    for _ in range(1 if latent_mean else draw(st.integers(1, 2))):
        mean = tuple(draw(st.sampled_from((-1.0, 0.0, 0.5))) for _ in range(dim))
        n = draw(st.integers(1 if latent_mean else 0, 4))
        xs = tuple(tuple(draw(st.sampled_from(VALUES)) for _ in range(dim)) for _ in range(n))
        groups.append((mean, xs))
    if latent_mean:
        return WishartModel(dof, rate, tuple(groups),
                            tuple(draw(st.sampled_from((-1.0, 0.0, 0.5))) for _ in range(dim)),
                            _spd(draw, dim, (0.25, 1.0, 4.0)))
    return WishartModel(dof, rate, tuple(groups), None, None)


# ----- the references ---------------------------------------------------------------------
def log_wishart_normaliser(dof: float, rate: np.ndarray) -> float:
    """log ∫ |Λ|^((ν − D − 1)/2) exp(−tr(R Λ)/2) dΛ = νD/2 log 2 − ν/2 log |R| + log Γ_D(ν/2)."""
    d = rate.shape[0]
    return float(dof * d / 2 * np.log(2) - dof / 2 * np.linalg.slogdet(rate)[1]
                 + special.multigammaln(dof / 2, d))


def conjugate(spec: WishartModel) -> tuple[float, np.ndarray, float]:
    """Known means: the posterior's dof and rate, and log Z."""
    rate = np.array(spec.rate)
    scatter, n = np.zeros_like(rate), 0
    for mean, xs in spec.groups:
        for x in xs:
            d = np.array(x) - np.array(mean)
            scatter += np.outer(d, d)
            n += 1
    dof_n, rate_n = spec.dof + n, rate + scatter
    log_z = (-n * spec.dim / 2 * np.log(2 * np.pi) + log_wishart_normaliser(dof_n, rate_n)
             - log_wishart_normaliser(spec.dof, rate))
    return dof_n, rate_n, float(log_z)


def _mean_log_det(dof: float, rate: np.ndarray) -> float:
    d = rate.shape[0]
    return float(special.digamma((dof - np.arange(d)) / 2).sum() + d * np.log(2)
                 - np.linalg.slogdet(rate)[1])


def coordinate_ascent(spec: WishartModel, sweeps: int = 100_000):
    """Latent mean: mean-field VMP by hand, from q(Λ) = the prior; returns
    (E μ, Cov μ, dof, rate, ELBO)."""
    (_, xs), = spec.groups
    x = np.array(xs, float).reshape(len(xs), spec.dim)
    n = len(x)
    mu0, p0 = np.array(spec.prior_mean), np.array(spec.prior_precision)
    r0 = np.array(spec.rate)
    dof = spec.dof + n
    rate = r0.copy()
    e_lam = spec.dof * np.linalg.inv(r0)
    m = mu0
    for _ in range(sweeps):
        prec = p0 + n * e_lam
        cov = np.linalg.inv(prec)
        m_new = cov @ (p0 @ mu0 + e_lam @ x.sum(0))
        d = x - m_new
        rate_new = r0 + d.T @ d + n * cov
        e_lam = dof * np.linalg.inv(rate_new)
        done = np.max(np.abs(rate_new - rate)) < 1e-15 * (1 + np.max(np.abs(rate))) and \
            np.max(np.abs(m_new - m)) < 1e-15 * (1 + np.max(np.abs(m)))
        m, rate = m_new, rate_new
        if done:
            break
    prec = p0 + n * e_lam
    cov = np.linalg.inv(prec)
    dim = spec.dim
    elog = _mean_log_det(dof, rate)
    # E log p(μ) + H[q(μ)]
    dm = m - mu0
    elbo = 0.5 * (np.linalg.slogdet(p0)[1] - dim * np.log(2 * np.pi)) - 0.5 * (
        dm @ p0 @ dm + np.trace(p0 @ cov))
    elbo += 0.5 * (np.linalg.slogdet(cov)[1] + dim * (1 + np.log(2 * np.pi)))
    # E log p(Λ) + H[q(Λ)]
    elbo += (spec.dof - dim - 1) / 2 * elog - 0.5 * np.trace(r0 @ e_lam) - \
        log_wishart_normaliser(spec.dof, r0)
    elbo -= (dof - dim - 1) / 2 * elog - 0.5 * np.trace(rate @ e_lam) - \
        log_wishart_normaliser(dof, rate)
    # Σ E log N(x | μ, Λ)
    d = x - m
    elbo += n / 2 * (elog - dim * np.log(2 * np.pi)) - 0.5 * np.trace(
        e_lam @ (d.T @ d + n * cov))
    return m, cov, dof, rate, float(elbo)


def log_z_1d(spec: WishartModel) -> float:
    """D = 1, latent mean: log Z by integrating λ out in closed form (a Gamma integral) and
    μ by the trapezoid rule."""
    (_, xs), = spec.groups
    x = np.array(xs, float).ravel()
    n = len(x)
    a0, b0 = spec.dof / 2, spec.rate[0][0] / 2  # Wishart(ν, r) in 1-D: Gamma(ν/2, r/2)
    m0, p0 = spec.prior_mean[0], spec.prior_precision[0][0]
    mu = m0 + np.linspace(-40, 40, 400_001) / np.sqrt(p0)
    ss = ((x[None, :] - mu[:, None]) ** 2).sum(1)
    a, b = a0 + n / 2, b0 + ss / 2
    log_f = (0.5 * np.log(p0 / (2 * np.pi)) - 0.5 * p0 * (mu - m0) ** 2
             - n / 2 * np.log(2 * np.pi) + a0 * np.log(b0) - special.gammaln(a0)
             + special.gammaln(a) - a * np.log(b))
    top = log_f.max()
    return float(np.log(np.exp(log_f - top).sum() * (mu[1] - mu[0])) + top)


# ----- the tests --------------------------------------------------------------------------
def _close(got, expected, tol, what, spec):
    got, expected = np.asarray(got, float), np.asarray(expected, float)
    assert np.all(np.abs(got - expected) <= tol * np.maximum(1.0, np.abs(expected))), (
        f"{what}: got {got!r}, expected {expected!r} (tolerance {tol:g})\n{spec}")


def known_mean_check(spec: WishartModel) -> None:
    dof, rate, log_z = conjugate(spec)
    result = spec.build().infer("vmp")
    q = result["lam"]
    _close(q.dof, dof, 1e-12, "VMP: posterior dof", spec)
    _close(q.rate, rate, 1e-10, "VMP: posterior rate", spec)
    _close(result.log_evidence, log_z, 1e-10, "VMP: bound (exact here: log Z)", spec)
    with pytest.raises(ff.UnsupportedFactorError, match=r"<wishart model>:\d+: .*'precision'.*"
                       r"use 'vmp'"):
        spec.build().infer("ep")


def latent_mean_check(spec: WishartModel) -> None:
    m, cov, dof, rate, elbo = coordinate_ascent(spec)
    result = spec.build().compile("vmp").run(iterations=5000, tolerance=1e-13)
    _close(result["mu"].mean, m, 1e-10, "VMP: E[mu]", spec)
    _close(result["mu"].covariance, cov, 1e-10, "VMP: Cov[mu]", spec)
    _close(result["lam"].dof, dof, 1e-12, "VMP: dof of lam", spec)
    _close(result["lam"].rate, rate, 1e-10, "VMP: rate of lam", spec)
    _close(result.log_evidence, elbo, 1e-10, "VMP: bound against the ELBO", spec)
    if spec.dim == 1:
        log_z = log_z_1d(spec)
        assert result.log_evidence <= log_z + 1e-9 * max(1.0, abs(log_z)), (
            f"VMP bound {result.log_evidence!r} above log Z {log_z!r}\n{spec}")


def test_references_on_a_worked_case():
    """The closed form against the 1-D quadrature (D = 1, μ known: an N(μ, 1/λ) sample
    with a Gamma(ν/2, r/2) precision; the Student-t evidence)."""
    spec = WishartModel(3.0, ((2.0,),), (((0.5,), ((1.1,), (-0.7,))),), None, None)
    dof, rate, log_z = conjugate(spec)
    x = np.array([1.1, -0.7]) - 0.5
    a, b = 1.5, 1.0
    expected = (-np.log(2 * np.pi) + a * np.log(b) - special.gammaln(a)
                + special.gammaln(a + 1) - (a + 1) * np.log(b + (x ** 2).sum() / 2))
    assert dof == 5.0 and abs(rate[0, 0] - (2 + (x ** 2).sum())) < 1e-15
    assert abs(log_z - expected) < 1e-12


@SETTINGS
@given(wishart_models())
def test_wishart_precision_with_known_means(spec):
    known_mean_check(spec)


@SETTINGS
@given(wishart_models(latent_mean=True))
def test_wishart_precision_with_a_latent_mean(spec):
    latent_mean_check(spec)
