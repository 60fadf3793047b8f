"""The oracle on random linear-Gaussian models, plain and gated by discrete conditions:
EP and VMP against exact Gaussian conditioning, mixed over the discrete configurations.

Plain models: Gaussians with known precisions, sums ``a + b``, scalings ``c * a``, observed
children, a plate of size 0-4.  Gated models add a Bernoulli/Discrete condition (latent or
observed) selecting the mean or precision of an observed Gaussian, a Gaussian exit
variable, a Gaussian drawn identically in every case of a Switch, or a mixture
``Switch(z): y ~ N(means[z], .)`` of one datum or a plate of them.
"""

from __future__ import annotations

from hypothesis import given

from tests.oracle import models
from tests.oracle.checks import Check, oracle_settings

SETTINGS = oracle_settings(100)


def ep_checks(spec) -> Check:
    c = Check(spec, "ep")
    run = c.run(iterations=200)  # stopped early at a fixed point
    if run is None:
        return c
    c.finite(run)  # never NaN or inf
    if c.traits.ep_exact:
        # a tree with at most one non-Gaussian site (a gated observation, a mixture of one
        # datum, a Gaussian exit variable): exact log Z, exact means and variances
        c.log_z(run, atol=1e-6)
        c.marginals(run, atol=1e-6, rtol=1e-6)
    elif c.traits.linear_gaussian:
        # loopy Gaussian belief propagation: where it converges, the means are exact
        if c.converged_or_warned(run, tol=1e-9):
            c.marginals(run, atol=1e-6, rtol=1e-6, statistics=("mean",))
    else:  # several mixture sites: an approximation, which must converge or warn
        c.converged_or_warned(run, tol=1e-6)
    return c


def vmp_checks(spec) -> Check:
    c = Check(spec, "vmp")
    ks = list(range(1, 11)) + [200]
    bounds, run = c.bounds(ks)  # one run for each number of iterations; the last: 200
    if run is None:
        return c
    c.finite(run)
    c.bound_below(run, tol=1e-9)  # the ELBO is a lower bound on log Z
    c.monotone(bounds, ks, tol=1e-9)  # coordinate ascent never lowers it
    if c.traits.linear_gaussian:
        # mean field on a Gaussian: at its fixed point, the exact means (it must get there
        # in 200 iterations, or say that it did not; factorflow stops at a relative change
        # of 1e-10 in natural parameters, so a mean may still move by ~1e-9)
        if c.converged_or_warned(run, tol=1e-8):
            c.marginals(run, atol=1e-6, rtol=1e-6, names=c.traits.latent,
                        statistics=("mean",))
    if c.traits.single_latent:  # one latent variable: mean field is exact
        c.log_z(run, atol=1e-6)
        c.marginals(run, atol=1e-6, rtol=1e-6)
    return c


@SETTINGS
@given(models.linear_gaussian())
def test_ep_on_linear_gaussian_models(spec):
    ep_checks(spec).verdict()


@SETTINGS
@given(models.linear_gaussian())
def test_vmp_on_linear_gaussian_models(spec):
    vmp_checks(spec).verdict()


@SETTINGS
@given(models.linear_gaussian(gated=True))
def test_ep_on_gated_linear_gaussian_models(spec):
    ep_checks(spec).verdict()


@SETTINGS
@given(models.linear_gaussian(gated=True))
def test_vmp_on_gated_linear_gaussian_models(spec):
    vmp_checks(spec).verdict()
