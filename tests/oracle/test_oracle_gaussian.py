"""The oracle on random linear-Gaussian models, plain and gated by discrete conditions:
EP and VMP against exact Gaussian conditioning, mixed over the discrete configurations.

Plain models: Gaussians with known precisions, sums ``a + b``, scalings ``c * a``, observed
children, a plate of size 0-4.  Gated models add a Bernoulli/Discrete condition (latent or
observed) selecting the mean or precision of an observed Gaussian, a Gaussian exit
variable, a Gaussian drawn identically in every case of a Switch, or a mixture
``Switch(z): y ~ N(means[z], .)`` of one datum or a plate of them.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from scipy import stats

import factorflow as ff
from tests.conftest import assert_close
from tests.oracle import models
from tests.oracle.build import build
from tests.oracle.checks import Check, oracle_settings
from tests.oracle.exact import reference
from tests.oracle.spec import Const, Draw, Gate, Index, PerElement, Plate, Spec

SETTINGS = oracle_settings(100)


def first_sweep(spec) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """For each mixture ``Switch(z): y ~ N(m[z], 1/τ)`` (z latent, m_k ~ N(μ_k, 1/λ) used
    by nothing else): m's (mean, variance) after EP's first parallel sweep, where every
    datum's site is computed from the same cavity, the prior (one array operation over
    the plate), and damping does not shorten that step (a message not sent yet is not
    mixed in).  A datum between the hypotheses has a bimodal tilted distribution wider
    than the prior: a site of negative precision; several can outweigh λ, and the
    posterior is improper although the exact posterior (and EP's fixed point, which
    sequential EP reaches) is proper.  Factorflow then raises ImproperMessageError naming
    m at iteration 1, damped restart included: EP's documented failure, not a wrong
    message (``test_ep_on_a_mixture_whose_first_parallel_sweep_overshoots``)."""
    draws: dict[str, Draw] = {}
    data: list[tuple[Draw, Draw]] = []  # (z, y) per mixture

    def walk(body: tuple) -> None:
        for st in body:
            if isinstance(st, Plate):
                walk(st.body)
            elif isinstance(st, Draw):
                draws[st.name] = st
            elif isinstance(st, Gate) and st.kind == "switch":
                for inner in st.branches[0][1]:
                    if (isinstance(inner, Draw) and inner.family == "Gaussian"
                            and isinstance(inner.args[0], Index)
                            and inner.observed is not None):
                        data.append((draws[st.cond], inner))
    walk(spec.body)
    out = {}
    for z, y in data:
        m = draws[y.args[0].array]
        if z.observed is not None or z.family != "Discrete" or m.observed is not None:
            continue
        mu = np.asarray(m.args[0].values if isinstance(m.args[0], PerElement)
                        else m.args[0].value, float)
        lam, tau = float(m.args[1].value), float(y.args[1].value)
        pi = np.asarray(z.args[0].value, float)
        prec, h = np.full(len(pi), lam), mu * lam
        for datum in np.atleast_1d(np.asarray(y.observed, float)):
            r = pi * stats.norm.pdf(datum, mu, np.sqrt(1 / lam + 1 / tau))
            r /= r.sum()
            post_v = 1 / (lam + tau)
            post_m = post_v * (mu * lam + tau * datum)
            mean = r * post_m + (1 - r) * mu
            var = r * (post_v + post_m ** 2) + (1 - r) * (1 / lam + mu ** 2) - mean ** 2
            prec, h = prec + 1 / var - lam, h + mean / var - mu * lam
        out[m.name] = (h / prec, 1 / prec)
    return out


def ep_checks(spec) -> Check:
    c = Check(spec, "ep")
    run = c.run(iterations=200)  # stopped early at a fixed point
    if run is None:
        # EP's first parallel sweep overshooting to an improper posterior, predicted and
        # named: accepted (see ``first_sweep``)
        improper = [name for name, (_, var) in first_sweep(spec).items() if np.any(var <= 0)]
        if c.failures and any(f"ImproperMessageError: posterior of {name} " in
                              c.failures[-1].what and "at iteration 1 " in
                              c.failures[-1].what for name in improper):
            c.failures.pop()
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


# ----- a mixture whose first parallel EP sweep overshoots (oracle seed 5) --------------------
#: three data between the two components' (equal) prior means: each datum's site for each
#: mean has a negative precision (its tilted distribution, bimodal, is wider than the
#: cavity), and parallel EP's first sweep, every site from the prior, sums three of them
MIXTURE = Spec("linear-Gaussian gated", (
    Plate("k", 2, (Draw("m", "Gaussian", (PerElement((-2.0, -2.0)), Const(2.0))),)),
    Plate("n", 3, (Draw("z", "Discrete", (Const((0.75, 0.25)),)),
                   Gate("switch", "z", ((None, (Draw("y", "Gaussian", (
                       Index("m", "z"), Const(4.0)), (0.0, 1.9, 0.7)),)),)))),))


def _sequential_ep(y, pi, tau, m0, v0, sweeps=200):
    """EP for y[n] ~ Σ_k π_k N(m_k, 1/τ), m_k ~ N(m0, v0), one datum's site at a time
    (as Infer.NET's loops over a plate do): the (means, variances) of its fixed point."""
    sites = np.zeros((len(y), len(pi), 2))  # per datum and component: (precision, h)
    for _ in range(sweeps):
        for i, yi in enumerate(y):
            prec = 1 / v0 + sites[:, :, 0].sum(0) - sites[i, :, 0]
            h = m0 / v0 + sites[:, :, 1].sum(0) - sites[i, :, 1]
            cm, cv = h / prec, 1 / prec
            r = pi * stats.norm.pdf(yi, cm, np.sqrt(cv + 1 / tau))
            r /= r.sum()
            pv = 1 / (1 / cv + tau)
            pm = pv * (cm / cv + tau * yi)
            mean = r * pm + (1 - r) * cm
            var = r * (pv + pm ** 2) + (1 - r) * (cv + cm ** 2) - mean ** 2
            sites[i] = np.stack([1 / var - prec, mean / var - h], axis=-1)
    prec = 1 / v0 + sites[:, :, 0].sum(0)
    return (m0 / v0 + sites[:, :, 1].sum(0)) / prec, 1 / prec


def test_ep_on_a_mixture_whose_first_parallel_sweep_overshoots():
    """Oracle seed 5 (5 runs): EP's first sweep from the priors makes m's posterior
    improper, undamped and damped, and the run raises ImproperMessageError naming m.  The
    posterior it reports is the one an independent parallel update computes (to 1e-6): no
    message is wrong.  The exact posterior (enumeration × Gaussian conditioning) is
    proper, and so is EP's fixed point, which sequential EP reaches: the improper step is
    parallel EP's own (``first_sweep``), which the oracle predicts and accepts."""
    mean, var = first_sweep(MIXTURE)["m"]
    assert np.all(var < 0)
    model, _ = build(MIXTURE)
    with pytest.warns(ff.ConvergenceWarning, match="undamped EP failed"), \
            pytest.raises(ff.ImproperMessageError, match=r"posterior of m .* at iteration 1 "
                          r"(.|\n)* \(EP damped with 0.5") as raised:
        model.infer("ep", iterations=200)
    numbers = re.search(r"mean=\[([^\]]*)\],\s*variance=\[([^\]]*)\]", str(raised.value))
    for text, expected in zip(numbers.groups(), (mean, var), strict=True):
        assert_close(np.array(text.replace(",", " ").split(), float), expected, rtol=1e-6)
    exact = reference(MIXTURE)
    assert np.all(exact.marginals["m"].values["variance"] > 0) and np.isfinite(exact.log_z)
    ep_mean, ep_var = _sequential_ep(np.array([0.0, 1.9, 0.7]), np.array([0.75, 0.25]),
                                     4.0, -2.0, 0.5)
    assert np.all(ep_var > 0)
    assert_close(ep_mean, exact.marginals["m"].values["mean"], atol=0.1)
    assert ep_checks(MIXTURE).failures == []
