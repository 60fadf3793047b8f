"""Models with gates (seed 001), end to end, against closed forms and enumeration."""

from __future__ import annotations

import itertools
import runpy
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special

import factorflow as ff
from factorflow.distributions import Gaussian
from tests.conftest import assert_close
from tests.runtime.handwritten import SPRINKLER_CPT, sprinkler_model

EXAMPLES = Path(__file__).parent.parent.parent / "examples"


def clinical_trial() -> ff.Model:
    """The clinical-trial model of examples/clinical_trial.py (one source of truth)."""
    return runpy.run_path(str(EXAMPLES / "clinical_trial.py"))["build"]()


def test_clinical_trial_ep():
    result = clinical_trial().infer("ep")
    assert_close(result["effective"].p, 2772 / 3672, rtol=0, atol=1e-6)
    assert_close(result["p_treated"].mean, 0.7142857, rtol=0, atol=1e-6)
    assert_close(result["p_control"].mean, 0.2857143, rtol=0, atol=1e-6)
    exact = 0.5 * np.exp(special.betaln(2, 5) + special.betaln(5, 2)) + 0.5 * np.exp(
        special.betaln(6, 6))
    assert_close(result.log_evidence, np.log(exact), rtol=1e-9)


CPT = SPRINKLER_CPT
sprinkler = sprinkler_model


def _sprinkler_exact(cloudy_values=(1, 0)):
    weights = {}
    for c, s, r in itertools.product(cloudy_values, (1, 0), (1, 0)):
        ps = CPT["sprinkler"][1 - c] if s else 1 - CPT["sprinkler"][1 - c]
        pr = CPT["rain"][1 - c] if r else 1 - CPT["rain"][1 - c]
        weights[c, s, r] = 0.5 * ps * pr * CPT["wet"][(s, r)]
    total = sum(weights.values())
    marg = {name: sum(w for k, w in weights.items() if k[i]) / total
            for i, name in enumerate(("cloudy", "sprinkler", "rain"))}
    return marg, np.log(total)


def test_sprinkler_loopy_ep_converges():
    model = sprinkler()
    history = []
    result = model.compile("ep").run(
        iterations=400, on_iteration=lambda i, post: history.append(float(post["rain"].p)))
    assert abs(history[-1] - history[-2]) < 1e-10  # a fixed point
    exact, _ = _sprinkler_exact()
    # loopy EP is an approximation: close to, not equal to, the exact marginals
    for name in ("cloudy", "sprinkler", "rain"):
        assert abs(float(result[name].p) - exact[name]) < 0.1


def test_sprinkler_with_observed_cloudy_is_exact():
    result = sprinkler(True).infer("ep")
    exact, log_z = _sprinkler_exact(cloudy_values=(1,))
    assert_close(result["sprinkler"].p, exact["sprinkler"], rtol=1e-9)
    assert_close(result["rain"].p, exact["rain"], rtol=1e-9)
    assert_close(result.log_evidence, log_z, rtol=1e-9)


DATA = np.array([0, 1, 2, 5, 6, 7, 10, 11, 12.0])


def mixture(data: np.ndarray = DATA, prior_mean: float = 6.0) -> ff.Model:
    """Three Gaussian components with unit precision, N(prior_mean, 100) means and
    Dirichlet(1, 1, 1) weights, ``data`` observed."""
    with ff.Model("mixture") as model:
        k = ff.Range("k", 3)
        weights = ff.Dirichlet("weights", np.ones(3))
        with ff.Plate(k):
            means = ff.Gaussian("means", prior_mean, variance=100.0)
        n = ff.Range("n", data.size)
        with ff.Plate(n):
            z = ff.Discrete("z", weights)
            with ff.Switch(z):
                ff.Gaussian("x", means[z], precision=1.0, observed=data)
    return model


@pytest.mark.parametrize("algorithm", ["ep", "vmp"])
def test_gaussian_mixture_separates_clusters(algorithm):
    init = {"means": Gaussian(np.array([0.0, 5.0, 10.0]), np.ones(3))}
    result = mixture().infer(algorithm, iterations=50, init=init)
    assert_close(result["means"].mean, [1.0, 6.0, 11.0], rtol=0, atol=0.2)
    assert np.all(result["z"].probs[np.arange(9), np.repeat([0, 1, 2], 3)] > 0.95)


def test_mixture_switch_is_one_array_operation_over_points_and_components():
    source = mixture().compile("vmp", init=("means",)).source
    assert "Gate_EnterOne_value_average_logarithm(" in source
    assert "for n" not in source and "for k" not in source


@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.lists(st.floats(0.05, 0.95), min_size=7, max_size=7),
       st.booleans(), st.booleans())
def test_nested_gate_evidence_equals_enumeration(p, e1, e2):
    """c → (If c: d ~ p1; If d: observe e ~ p2 else e ~ p3) (IfNot c: d ~ p4, e ~ p5),
    and f observed under If(d) / IfNot(d): a tree, so EP's evidence is exact."""
    with ff.Model("nested") as model:
        c = ff.Bernoulli("c", p[0])
        with ff.If(c):
            d = ff.Bernoulli("d", p[1])
            with ff.If(d):
                ff.Bernoulli("e", p[2], observed=e1)
            with ff.IfNot(d):
                ff.Bernoulli("e", p[3], observed=e1)
        with ff.IfNot(c):
            d = ff.Bernoulli("d", p[4])
            ff.Bernoulli("e", p[5], observed=e1)
        with ff.If(d):
            ff.Bernoulli("f", p[6], observed=e2)
    result = model.infer("ep")

    def bern(q, v):
        return q if v else 1 - q
    total, pc = 0.0, 0.0
    for cv, dv in itertools.product((1, 0), (1, 0)):
        w = bern(p[0], cv)
        if cv:
            w *= bern(p[1], dv) * bern(p[2] if dv else p[3], e1)
        else:
            w *= bern(p[4], dv) * bern(p[5], e1)
        w *= bern(p[6], e2) if dv else 1.0
        total += w
        pc += w * cv
    assert_close(result.log_evidence, np.log(total), rtol=1e-9)
    assert_close(result["c"].p, pc / total, rtol=1e-9)


# ----- bad input -------------------------------------------------------------------------
def test_gate_on_a_real_variable():
    with ff.Model():
        x = ff.Gaussian("x", 0.0, precision=1.0)
        with pytest.raises(ff.ModelError, match="'x' is real-valued; a gate needs a boolean"):
            with ff.If(x):
                pass  # opening the gate is what raises


def test_case_value_outside_range():
    with ff.Model():
        z = ff.Discrete("z", [0.5, 0.5])
        with pytest.raises(ff.ModelError, match=r"ff.Case\(z, 2\).*values 0..1"):
            with ff.Case(z, 2):
                pass  # opening the gate is what raises


def test_switch_size_must_match_the_indexed_array():
    with ff.Model():
        k = ff.Range("k", 3)
        with ff.Plate(k):
            means = ff.Gaussian("means", 0.0, precision=1.0)
        z = ff.Discrete("z", [0.5, 0.5])
        with ff.Switch(z), pytest.raises(ff.ModelError,
                                         match=r"Switch\(z\) has 2 cases but 'means' has 3"):
            ff.Gaussian("x", means[z], precision=1.0, observed=0.0)


def test_variable_read_outside_the_gate_that_defines_it():
    with ff.Model():
        c = ff.Bernoulli("c", 0.5)
        with ff.If(c):
            y = ff.Gaussian("y", 0.0, precision=1.0)
        with pytest.raises(ff.ModelError, match=r"'y' is defined only inside ff.If\(c\)"):
            ff.Gaussian("w", y, precision=1.0)


@pytest.mark.parametrize("algorithm", ["ep", "vmp"])
def test_case_gates_give_the_exact_posterior_of_the_selector(algorithm):
    """z picks which Gaussian generated x = 1.3: the posterior of z and the evidence are
    exact (EP: a tree; VMP: the bound is tight since every factor is conjugate)."""
    prior, centres, observed = np.array([0.2, 0.3, 0.5]), (0.0, 2.0, 4.0), 1.3
    with ff.Model("cases") as model:
        z = ff.Discrete("z", prior)
        for k, centre in enumerate(centres):
            with ff.Case(z, k):
                ff.Gaussian("x", centre, precision=1.0, observed=observed)
    result = model.infer(algorithm)
    joint = prior * np.exp(-0.5 * (observed - np.array(centres)) ** 2) / np.sqrt(2 * np.pi)
    assert_close(result["z"].probs, joint / joint.sum(), rtol=1e-9)
    assert_close(result.log_evidence, np.log(joint.sum()), rtol=1e-9)
