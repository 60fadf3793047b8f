"""Minimal models of the findings of fuzz15's new oracle generators (links, Wishart, sums and
nodes, Gibbs), each against a reference written without factorflow.

The two strict xfails of last session pass (sched16; families of each in
test_regressions16).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import factorflow as ff
from tests.oracle.test_oracle_sums import SumModel, gaussian_reference, mean_field_elbo

#: the shrunk model: two elements with a latent common mean g, their sum observed
PLATE_SUM_G = SumModel(size=2, common=(-1.0, 0.5), means=(-1.0, -1.0), precision=0.5,
                       coefficients=None, element_data=None, via_child=None,
                       total=(-2.1, 1.0))
#: the first one seen (g, data on the elements, the sum observed through a latent child)
PLATE_SUM_G_FIRST = SumModel(size=2, common=(-1.0, 0.5), means=(-1.0, -1.0), precision=0.5,
                             coefficients=None, element_data=((-2.1, -2.1), 0.5),
                             via_child=0.5, total=(-2.1, 1.0))


def _mean_field(spec: SumModel, posteriors) -> tuple[np.ndarray, np.ndarray]:
    m = [float(posteriors["g"].mean)] + list(np.ravel(posteriors["x"].mean))
    v = [float(posteriors["g"].variance)] + list(np.ravel(posteriors["x"].variance))
    if spec.via_child is not None:
        m.append(float(posteriors["u"].mean))
        v.append(float(posteriors["u"].variance))
    return np.array(m), np.array(v)


@pytest.mark.parametrize("spec", [PLATE_SUM_G, PLATE_SUM_G_FIRST], ids=["shrunk", "first"])
def test_vmp_sum_with_a_common_mean_reaches_the_exact_fixed_point(spec):
    """The fixed point is right: exact means, variances 1/J_ii, bound = ELBO of q (1e-10);
    and each sweep's reported bound is the ELBO of that sweep's posteriors (1e-12)."""
    factors = spec.factors()
    log_z, mean, _, jmat = gaussian_reference(factors, len(spec.latents()))
    elbos = []

    def hook(_iteration, posteriors):
        elbos.append(mean_field_elbo(factors, *_mean_field(spec, posteriors)))

    with warnings.catch_warnings():
        warnings.simplefilter("error", ff.ConvergenceWarning)  # (the bound never falls)
        result = spec.build().compile("vmp").run(iterations=400, tolerance=1e-13,
                                                 on_iteration=hook)
    got_mean, got_var = _mean_field(spec, result.posteriors)
    assert np.allclose(got_mean, mean, rtol=0, atol=1e-10)
    assert np.allclose(got_var, 1 / np.diag(jmat), rtol=0, atol=1e-10)
    assert abs(result.log_evidence - mean_field_elbo(factors, mean, 1 / np.diag(jmat))) < 1e-10
    assert result.log_evidence <= log_z
    assert np.allclose(result.trace, elbos, rtol=0, atol=1e-12)


@pytest.mark.parametrize("size", [2, 3])
def test_vmp_bound_of_a_sum_with_a_common_mean_never_falls(size):
    """PlateSum's VMP block update reads the elements' other messages as q(x_i) /
    previous; the bound fell (7.7e-4 at sweep 2 for N = 3) because q(x_i) there was the
    posterior of the sweep before (g's message v_x__F recomputed first, q refreshed only
    after the PlateSum message).  The schedule now refreshes q between them
    (``dependency_info._refresh_before_block_updates``): coordinate ascent, and the
    mean-field fixed point (exact means, variances 1/J_ii, bound = its ELBO)."""
    spec = SumModel(size=size, common=(-1.0, 0.5), means=(-1.0,) * size, precision=0.5,
                    coefficients=None, element_data=None, via_child=None, total=(-2.1, 1.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ff.ConvergenceWarning)
        result = spec.build().compile("vmp").run(iterations=400, tolerance=1e-13)
    trace = np.asarray(result.trace)
    assert np.all(np.diff(trace) >= -1e-12 * np.maximum(1.0, np.abs(trace[:-1])))
    factors = spec.factors()
    _, mean, _, jmat = gaussian_reference(factors, len(spec.latents()))
    got_mean, got_var = _mean_field(spec, result.posteriors)
    assert np.allclose(got_mean, mean, rtol=0, atol=1e-10)
    assert np.allclose(got_var, 1 / np.diag(jmat), rtol=0, atol=1e-10)
    assert abs(result.log_evidence - mean_field_elbo(factors, mean, 1 / np.diag(jmat))) < 1e-10


def _switch_exit_in_case() -> ff.Model:
    with ff.Model("switch exit read in a case") as model:
        g1 = ff.Gaussian("g1", -2.0, precision=2.0)
        z4 = ff.Discrete("z4", [0.364, 0.455, 0.181])
        with ff.Switch(z4):
            e5 = ff.Gaussian("e5", g1, precision=1.0)
        z8 = ff.Discrete("z8", [0.429, 0.571])
        with ff.Case(z8, 0):
            ff.Gaussian("y9", e5, precision=1.0, observed=-0.4)
    return model


def test_ep_switch_exit_variable_read_in_a_case_gate():
    """Exact: e5 ~ N(-2, 1/2 + 1) whatever z4; y9 ~ N(e5, 1) only where z8 = 0; one
    non-Gaussian site (the gate), so EP's log Z and moments are exact.  (Oracle seed 10:
    the first sweep computed e5's exit message before any per-case posterior of e5
    existed, and Gate.EnterPartial raised on its uniform message; the initialization
    now brings the priors down to the proper message first,
    ``dependency_info._prefer_priors_before_proper_reads``.)"""
    v0, m0 = 1.5, -2.0
    like0 = np.exp(-0.5 * (-0.4 - m0) ** 2 / (v0 + 1)) / np.sqrt(2 * np.pi * (v0 + 1))
    z = 0.429 * like0 + 0.571
    w0 = 0.429 * like0 / z
    m_post = m0 + v0 / (v0 + 1) * (-0.4 - m0)
    v_post = v0 - v0 ** 2 / (v0 + 1)
    mean = w0 * m_post + (1 - w0) * m0
    var = w0 * (v_post + m_post ** 2) + (1 - w0) * (v0 + m0 ** 2) - mean ** 2
    result = _switch_exit_in_case().infer("ep")
    assert abs(result.log_evidence - np.log(z)) < 1e-10
    assert abs(float(result["e5"].mean) - mean) < 1e-10
    assert abs(float(result["e5"].variance) - var) < 1e-10
    assert np.allclose(result["z8"].probs, [w0, 1 - w0], atol=1e-10)


def _comparison_under_a_constraint() -> ff.Model:
    with ff.Model("fuzz") as model:
        v1 = ff.Gaussian("data", 0.0, precision=0.2)
        v2 = v1 < 0.0
        ff.constrain_true(v2)
        with ff.If(v2):
            ff.Poisson("v4", 1.0, observed=1)
            v5 = v1 < -3.0
            with ff.IfNot(v5):
                with ff.Plate(ff.Range("r6", 3)):
                    ff.Dirichlet("v7", np.array([0.5, 0.5, 0.5]),
                                 observed=np.array([[0.1, 0.1, 0.8]] * 3))
                    ff.Gaussian("v8", v1, variance=0.5, observed=np.array([0.5, 0.5, 2.5]))
            ff.Gamma("v3", 1.0, rate=1.0)
        with ff.IfNot(v2):
            ff.Gamma("v3", 1.0, scale=1.0)
    return model


def test_ep_improper_comparison_message_names_the_variable():
    """Fuzz seed 21 (4 EP runs, 'improper-unnamed'): EP has no proper fixed point here and
    says so by statement ('v2 = v1 < 0.0'); the improper message was described by the
    factor's parameter names alone ("from argument 'a' or 'b'"), constants too.  It now
    names the argument that reads a variable with that variable's message ('b', the
    message from data to its use 0)."""
    with pytest.raises(ff.ImproperMessageError,
                       match=r"from argument 'b' \(message from data to its use 0\)"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _comparison_under_a_constraint().compile("ep").run(iterations=10)


def test_ep_divergence_on_a_loopy_sum_advises_damping():
    """New sum generator, seed 21 (2 of 250 EP runs): loopy EP (g - x[i] - sum - x[j] - g)
    diverges undamped (E[g] = 4.9e8 after 300 sweeps; the exact -0.363 with damping=0.5).
    The ConvergenceWarning advised 'raise iterations=': the monitor knew oscillation, not
    growth.  Changes grown past twice their least, 10 sweeps or more after it, now advise
    damping, with the variable to damp, in a run of fixed sweeps and in the default run."""
    with ff.Model("sums") as model:
        g = ff.Gaussian("g", 0.5, precision=1.0)
        n = ff.Range("n", 4)
        with ff.Plate(n):
            x = ff.Gaussian("x", g, precision=4.0)
        ff.Gaussian("t", ff.sum(x, n), precision=0.5, observed=-2.1)
    exact = SumModel(4, (0.5, 1.0), (0.5,) * 4, 4.0, None, None, None, (-2.1, 0.5))
    _, mean, _, _ = gaussian_reference(exact.factors(), 5)
    damped = model.compile("ep").run(iterations=300, damping=0.5)
    assert abs(float(damped["g"].mean) - mean[0]) < 1e-10
    with pytest.warns(ff.ConvergenceWarning, match=r"grew from .* use damping=0\.5 \(or "
                      r"damping=\{'g': 0\.5\}\)"):
        model.compile("ep").run(iterations=300)
    with pytest.warns(ff.ConvergenceWarning, match=r"not shrunk .* use damping=0\.5"):
        model.compile("ep").run()  # the default run stops when the changes stall
