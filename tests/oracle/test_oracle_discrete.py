"""The oracle on random discrete models: EP and VMP against enumeration of the joint.

Each model is a random tree or loopy graph of Bernoulli/Discrete variables with gates
(If/IfNot/Case/Switch, nested, exit variables, observed and latent conditions) and a plate
of size 0-4; ``tests.oracle.exact`` enumerates every configuration of its latent variables.
"""

from __future__ import annotations

from hypothesis import given

from tests.oracle import models
from tests.oracle.checks import Check, oracle_settings

SETTINGS = oracle_settings(150)


def ep_checks(spec) -> Check:
    c = Check(spec, "ep")
    run = c.run(iterations=200)  # stopped early at a fixed point
    if run is None:
        return c
    c.finite(run)  # never NaN or inf
    if c.traits.ep_exact:  # a tree (gate groups contracted): belief propagation is exact
        c.log_z(run, atol=1e-6)
        c.marginals(run, atol=1e-6)
    else:  # loopy: it must converge, or say that it did not
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
    if c.traits.single_latent:  # one latent variable: mean field is exact
        c.log_z(run, atol=1e-6)
        c.marginals(run, atol=1e-6)
    return c


@SETTINGS
@given(models.discrete())
def test_ep_on_discrete_models(spec):
    ep_checks(spec).verdict()


@SETTINGS
@given(models.discrete())
def test_vmp_on_discrete_models(spec):
    vmp_checks(spec).verdict()
