"""The oracle on non-conjugate links: ``ff.logistic``, ``ff.probit`` and ``ff.exp`` (Poisson)
observations of a 1-D Gaussian or a 2-D VectorGaussian (random models from
:func:`tests.oracle.links.link_models`), against references written without factorflow.

EP is not exact here (except with one observation), so its answer is checked by the
property that defines an EP fixed point: for every site, the cavity whose tilted
distribution has q's moments (found by 1-D quadrature) yields a site, and the prior times
all the sites is q again (1e-7 relative, the quadrature's documented accuracy; 1.5e-8
the largest seen in 400 models); EP's log evidence is the closed form of those sites (1e-8). With one observation EP is exact (log Z
and moments by 1-D/2-D quadrature, 1e-8; 1e-13 seen). VMP: the bound lies below the exact
ELBO of its own q, which lies below log Z (quadrature), and q with the bound is the fixed
point of each link's update written out in closed form (1e-9; 1e-13 seen).
"""

from __future__ import annotations

import warnings

import numpy as np
from hypothesis import given

import factorflow as ff
from tests.oracle import links
from tests.oracle.checks import oracle_settings

SETTINGS = oracle_settings(40)


def _run(spec: links.LinkModel, algorithm: str):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ff.ConvergenceWarning)
        return links.build(spec).compile(algorithm).run(iterations=2000, tolerance=1e-11)


def _moments(spec, result) -> tuple[np.ndarray, np.ndarray]:
    q = result["w"]
    if spec.dim == 1:
        return np.array([float(q.mean)]), np.array([[float(q.variance)]])
    return np.asarray(q.mean, float), np.asarray(q.covariance, float)


def _close(got, expected, rtol, what, spec):
    got, expected = np.asarray(got, float), np.asarray(expected, float)
    scale = np.maximum(1.0, np.abs(expected))
    assert np.all(np.abs(got - expected) <= rtol * scale), (
        f"{what}: got {got!r}, expected {expected!r} (tolerance {rtol:g})\n{spec}")


def ep_check(spec: links.LinkModel) -> None:
    """EP's fixed point: every site's tilted moments equal q's (and, with one site, the
    exact posterior)."""
    result = _run(spec, "ep")
    mean, cov = _moments(spec, result)
    sites = links.ep_sites(spec, mean, cov)
    lam, h = links.sites_posterior(spec, sites)
    _close(np.linalg.inv(cov), lam, 1e-7, "EP: q's precision against prior × sites", spec)
    _close(np.linalg.solve(cov, mean), h, 1e-7, "EP: q's precision × mean against "
           "prior × sites", spec)
    _close(result.log_evidence, links.ep_log_evidence(spec, sites), 1e-8,
           "EP: log evidence against the sites' closed form", spec)
    if len(sites) == 1:  # one site: EP is exact
        ex = links.exact_one_site(spec)
        _close(result.log_evidence, ex.log_z, 1e-8, "EP (one site): log Z", spec)
        _close(mean, ex.mean, 1e-8, "EP (one site): mean", spec)
        _close(cov, ex.covariance, 1e-8, "EP (one site): covariance", spec)


def vmp_check(spec: links.LinkModel) -> None:
    """VMP: the written-out fixed point, and bound <= ELBO(q) <= log Z."""
    result = _run(spec, "vmp")
    mean, cov = _moments(spec, result)
    lam, h, bound = links.vmp_fixed_point(spec, mean, cov)
    _close(np.linalg.inv(cov), lam, 1e-9, "VMP: q's precision against its update", spec)
    _close(np.linalg.solve(cov, mean), h, 1e-9, "VMP: q's precision × mean against its "
           "update", spec)
    _close(result.log_evidence, bound, 1e-9, "VMP: the bound against its closed form", spec)
    log_z = links.exact(spec).log_z
    elbo = links.elbo(spec, mean, cov)
    assert result.log_evidence <= elbo + 1e-9 * max(1.0, abs(elbo)), (
        f"VMP bound {result.log_evidence!r} above the ELBO of its own q {elbo!r}\n{spec}")
    assert elbo <= log_z + 1e-9 * max(1.0, abs(log_z)), (
        f"ELBO {elbo!r} above log Z {log_z!r}: the reference is wrong\n{spec}")
    if all(g.link == "exp" for g in spec.groups):  # non-conjugate VMP: the exact ELBO
        _close(result.log_evidence, elbo, 1e-9, "VMP (Poisson): bound against the ELBO",
               spec)


@SETTINGS
@given(links.link_models())
def test_ep_fixed_point_of_links(spec):
    ep_check(spec)


@SETTINGS
@given(links.link_models())
def test_vmp_fixed_point_of_links(spec):
    vmp_check(spec)
