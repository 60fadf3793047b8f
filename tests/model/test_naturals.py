"""User-written natural-parameter updates (@ff.naturals): checked, then used; the seed's
LogNormalFactor with its @defnaturals end to end."""

from __future__ import annotations

import numpy as np
import pytest

import factorflow as ff
from factorflow.distributions import Gamma as GammaD
from factorflow.distributions import Gaussian as GaussianD
from factorflow.factors.registry import FACTORS
from tests.conftest import assert_close

LOG_2PI = float(np.log(2 * np.pi))
CALLS: list[int] = []
counted = ff.function("counted", lambda v: (CALLS.append(1), v)[1])


@ff.factor(x="real", mu="real", tau="positive")
def log_normal_factor(x, mu, tau):
    """VinDsl's LogNormalFactor: -(1/2)(τ (x - μ)² + log 2π - log τ)."""
    return -0.5 * (tau * (x - mu) ** 2 + LOG_2PI - ff.log(tau))


@ff.naturals(log_normal_factor, "mu", "Gaussian")
def mu_update(x, tau):                       # the seed's: (E(x) E(τ), -E(τ)/2)
    return ff.E(x) * ff.E(tau), -ff.E(tau) / 2


@ff.naturals(log_normal_factor, "tau", "Gamma")
def tau_update(x, mu):                       # coefficients of log τ and τ
    return 0.5, counted(-0.5 * (ff.V(x) + ff.V(mu) + (ff.E(x) - ff.E(mu)) ** 2))


def test_the_updates_are_checked_registered_and_equal_the_builtin_messages():
    assert log_normal_factor.custom == {"mu", "tau"}
    assert str(log_normal_factor.derivations["mu"].naturals[1]) == "0.5*(-E(tau))"
    rng = np.random.default_rng(0)
    args = {"x": GaussianD(rng.normal(size=4), rng.uniform(0.5, 2, 4)),
            "mu": GaussianD(rng.normal(size=4), rng.uniform(0.5, 2, 4)),
            "tau": GammaD(rng.uniform(1, 3, 4), rate=rng.uniform(0.5, 2, 4))}
    ours, builtin = FACTORS["log_normal_factor"], FACTORS["Gaussian"]
    names = {"x": "sample", "mu": "mean", "tau": "precision"}
    for target in ("mu", "tau"):
        got = ours.operators[("vmp", target)].fn(**{k: v for k, v in args.items() if k != target})
        want = builtin.operators[("vmp", names[target])].fn(
            **{names[k]: v for k, v in args.items() if k != target})
        for e1, e2 in zip(got.eta, want.eta, strict=True):
            assert_close(e1, e2, rtol=1e-12)


def test_the_seed_lognormal_factor_end_to_end_equals_the_builtin_gaussian():
    data = [4.2, 5.9, 7.1, 5.0]
    with ff.Model("seed_lognormal") as user:
        mu = ff.Gaussian("mu", 0.0, variance=100.0)
        tau = ff.Gamma("tau", 1.0, rate=1.0)
        with ff.Plate(ff.Range("n", len(data))):
            log_normal_factor("x", mu=mu, tau=tau, observed=data)
    with ff.Model("builtin_gaussian") as builtin:
        mu = ff.Gaussian("mu", 0.0, variance=100.0)
        tau = ff.Gamma("tau", 1.0, rate=1.0)
        with ff.Plate(ff.Range("n", len(data))):
            ff.Gaussian("x", mu, precision=tau, observed=data)
    before = len(CALLS)
    a, b = user.infer("vmp"), builtin.infer("vmp")
    assert len(CALLS) > before                 # the user's τ update ran, not the derived one
    for name in ("mu", "tau"):
        for e1, e2 in zip(a[name].eta, b[name].eta, strict=True):
            assert_close(e1, e2, rtol=1e-10)
    assert_close(a.log_evidence, b.log_evidence, rtol=1e-10)


def test_a_wrong_update_is_a_model_error_naming_factor_and_argument():
    with pytest.raises(ff.ModelError, match=r"naturals\(log_normal_factor, 'mu'\): natural "
                                            r"parameter 2 is -E\(tau\), which differs"):
        @ff.naturals(log_normal_factor, "mu", "Gaussian")
        def forgot_the_half(x, tau):
            return ff.E(x) * ff.E(tau), -ff.E(tau)
    assert str(log_normal_factor.derivations["mu"].naturals[1]) == "0.5*(-E(tau))"


def test_bad_declarations_are_model_errors():
    with pytest.raises(ff.ModelError, match="whose conjugate family is Gaussian, not Gamma"):
        ff.naturals(log_normal_factor, "mu", "Gamma")
    with pytest.raises(ff.ModelError, match="has no argument 'sigma'"):
        ff.naturals(log_normal_factor, "sigma", "Gaussian")
    with pytest.raises(ff.ModelError, match="returns 1 natural parameters; Gaussian has 2"):
        ff.naturals(log_normal_factor, "mu", "Gaussian")(lambda x, tau: ff.E(x))
    with pytest.raises(ff.ModelError, match="may take only the other arguments"):
        ff.naturals(log_normal_factor, "mu", "Gaussian")(lambda mu, tau: (ff.E(tau), 1.0))

    @ff.factor(x="real", s="real")
    def exp_scaled(x, s):
        return -x * ff.exp(s)

    with pytest.raises(ff.ModelError, match="no conjugate update to write"):
        ff.naturals(exp_scaled, "s", "Gaussian")
