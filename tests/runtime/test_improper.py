"""Improper messages raise ff.ImproperMessageError naming the message: never a silent NaN."""

from __future__ import annotations

import pytest

import factorflow as ff
from factorflow.distributions import Gamma, Gaussian


def _model():
    with ff.Model("learning") as model:
        mean = ff.Gaussian("mean", 0.0, variance=100.0)
        prec = ff.Gamma("prec", 1.0, rate=1.0)
        n = ff.Range("n", 2)
        with ff.Plate(n):
            ff.Gaussian("x", mean, precision=prec, observed=[5.0, 7.0])
    return model


def test_improper_initialisation_is_named():
    with pytest.raises(ff.ImproperMessageError, match=r"init\['mean'\] is improper"):
        _model().infer("vmp", init={"mean": Gaussian.from_natural(0.0, -1.0)})


def test_improper_posterior_during_inference_is_named():
    """A proper but absurd start (huge negative second moment is impossible, so use a
    Gamma posterior with negative mean through its natural parameters) is caught where
    it first makes a posterior improper."""
    bad = Gamma.from_natural(-3.0, -1.0)  # shape -2: improper
    with pytest.raises(ff.ImproperMessageError, match=r"prec"):
        _model().infer("vmp", init={"prec": bad})


def test_init_of_wrong_family():
    with pytest.raises(ff.ModelError, match=r"init\['mean'\] must be a Gaussian"):
        _model().infer("vmp", init={"mean": Gamma(1.0, rate=1.0)})


def test_init_names_unknown_variable():
    with pytest.raises(ff.ModelError, match="no variable 'nope'"):
        _model().infer("vmp", init={"nope": Gaussian(0.0, 1.0)})
