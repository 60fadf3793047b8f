"""The oracle on models with one continuous variable: EP and VMP against quadrature.

The variable is a Beta (Bernoulli and Binomial observations), a Gamma (Poisson
observations, or the precision of observed Gaussians), a Dirichlet with 2-3 components
(Discrete observations) or a Gaussian (Gaussian observations, truncations
``constrain_true(x > t)`` and ``ff.is_positive``, gates on a comparison), with gated
observations on latent or observed conditions, latent discrete children, plates of size
0-4.  The reference integrates the joint over the variable for every configuration of the
discrete latents (``tests.oracle.exact``).
"""

from __future__ import annotations

import pytest
from hypothesis import given

import factorflow as ff
from tests.oracle import models
from tests.oracle.build import build
from tests.oracle.checks import Check, oracle_settings
from tests.oracle.spec import Draw, Gate, Plate, Ref

SETTINGS = oracle_settings(120)


def _random_precision(body) -> bool:
    """Whether a Gaussian in ``body`` has a random (Gamma) precision."""
    for stmt in body:
        if isinstance(stmt, Draw) and stmt.family == "Gaussian" and \
                isinstance(stmt.args[1], Ref):
            return True
        if isinstance(stmt, Plate) and _random_precision(stmt.body):
            return True
        if isinstance(stmt, Gate) and any(_random_precision(b) for _, b in stmt.branches):
            return True
    return False


def ep_checks(spec) -> Check:
    c = Check(spec, "ep")
    if _random_precision(spec.body):
        # factorflow's EP has no message to a Gaussian's random precision and says so
        # (UnsupportedFactorError naming the statement and suggesting VMP): checked here
        with pytest.raises(ff.UnsupportedFactorError, match=r"precision.*use 'vmp'"):
            build(spec)[0].compile("ep")
        return c
    run = c.run(iterations=200)  # stopped early at a fixed point
    if run is None:
        return c
    c.finite(run)  # never NaN or inf
    if c.traits.ep_exact:
        # conjugate observations only, or a single non-Gaussian site (a gated observation,
        # a truncation, a latent discrete child): EP's log Z and moments are exact
        c.log_z(run, atol=1e-6)
        c.marginals(run, atol=1e-6, rtol=1e-6)
    else:  # several sites: an approximation, which must converge or warn
        c.converged_or_warned(run, tol=1e-6)
    return c


def vmp_checks(spec) -> Check:
    c = Check(spec, "vmp")
    if not c.traits.vmp_supported:
        return c  # a comparison has no VMP message (factorflow refuses it by name)
    ks = list(range(1, 11)) + [200]
    bounds, run = c.bounds(ks)  # one run for each number of iterations; the last: 200
    if run is None:
        return c
    c.finite(run)
    c.bound_below(run, tol=1e-9)  # the ELBO is a lower bound on log Z
    c.monotone(bounds, ks, tol=1e-9)  # coordinate ascent never lowers it
    if c.traits.single_latent:  # the variable alone, conjugate observations: exact
        c.log_z(run, atol=1e-6)
        c.marginals(run, atol=1e-6, rtol=1e-6)
    return c


@SETTINGS
@given(models.one_continuous())
def test_ep_with_one_continuous_variable(spec):
    ep_checks(spec).verdict()


@SETTINGS
@given(models.one_continuous())
def test_vmp_with_one_continuous_variable(spec):
    vmp_checks(spec).verdict()
