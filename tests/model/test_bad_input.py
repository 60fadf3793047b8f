"""Bad input raises ff.ModelError (or a subclass) naming the variable, before inference."""

from __future__ import annotations

import numpy as np
import pytest

import factorflow as ff


def test_observed_shape_must_match_plate():
    with ff.Model():
        n = ff.Range("n", 3)
        with ff.Plate(n), pytest.raises(ff.DataError, match=r"'x'.*shape \(2,\)"):
            ff.Gaussian("x", 0.0, precision=1.0, observed=[1.0, 2.0])


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_inf_data(bad):
    with ff.Model():
        n = ff.Range("n", 2)
        with ff.Plate(n), pytest.raises(ff.DataError, match="'x'.*NaN or inf"):
            ff.Gaussian("x", 0.0, precision=1.0, observed=[1.0, bad])


@pytest.mark.parametrize(("make", "match"), [
    (lambda: ff.Bernoulli("b", 0.5, observed=2), r"'b'.*True/False or 0/1"),
    (lambda: ff.Gamma("g", 1.0, rate=1.0, observed=-1.0), r"'g'.*values > 0"),
    (lambda: ff.Poisson("k", 2.0, observed=-3), r"'k'.*non-negative integers"),
    (lambda: ff.Discrete("d", [0.5, 0.6]), r"'d'.*sum to 1"),
    (lambda: ff.Bernoulli("p", 1.5), r"'p'.*probabilities in \[0, 1\]"),
    (lambda: ff.Gamma("g2", -1.0, rate=1.0), r"'g2'.*values > 0"),
], ids=["bernoulli-2", "gamma-negative", "negative-count", "probs-not-summing",
        "probability-above-one", "negative-shape"])
def test_values_outside_support(make, match):
    with ff.Model(), pytest.raises(ff.DataError, match=match):
        make()


def test_variable_outside_its_model():
    with ff.Model():
        a = ff.Gaussian("a", 0.0, precision=1.0)
    with ff.Model(), pytest.raises(ff.ModelError, match="'a' belongs to another model"):
        ff.Gaussian("b", a, precision=1.0)


def test_variable_outside_its_plate():
    with ff.Model():
        n = ff.Range("n", 2)
        with ff.Plate(n):
            z = ff.Gaussian("z", 0.0, precision=1.0)
        with pytest.raises(ff.ModelError, match=r"'z' is indexed by \['n'\]"):
            ff.Gaussian("w", z, precision=1.0)


def test_factory_outside_a_model():
    with pytest.raises(ff.ModelError, match="inside a `with ff.Model"):
        ff.Gaussian("x", 0.0, precision=1.0)


def test_duplicate_name():
    with ff.Model():
        ff.Gaussian("x", 0.0, precision=1.0)
        with pytest.raises(ff.ModelError, match="'x': the name is already used"):
            ff.Gaussian("x", 0.0, precision=1.0)


def test_random_variable_has_no_truth_value():
    with ff.Model():
        b = ff.Bernoulli("b", 0.5)
        with pytest.raises(ff.ModelError, match="ff.If"):
            bool(b)


def test_unknown_algorithm(known_precision_model):
    with pytest.raises(ff.ModelError, match="unknown algorithm 'gibbsish'"):
        known_precision_model.compile("gibbsish")


def test_random_precision_has_no_ep_operator():
    with ff.Model() as model:
        prec = ff.Gamma("prec", 1.0, rate=1.0)
        ff.Gaussian("x", 0.0, precision=prec, observed=1.0)
    with pytest.raises(ff.UnsupportedFactorError, match=r"argument 'precision'.*use 'vmp'"):
        model.compile("ep")


def test_missing_data_value():
    with ff.Model() as model:
        m = ff.Data("m")
        ff.Gaussian("x", m, precision=1.0)
    with pytest.raises(ff.DataError, match=r"no value for ff.Data\('m'\)"):
        model.infer("ep")


def test_unknown_data_name(known_precision_model):
    with pytest.raises(ff.ModelError, match=r"data given for \['y'\]"):
        known_precision_model.infer("ep", data={"y": 1.0})
