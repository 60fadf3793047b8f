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


def test_nan_message_during_inference_is_named(monkeypatch):
    """Whatever goes wrong inside an operator, the posterior guard names the variable."""
    from factorflow.factors.registry import FACTORS

    op = FACTORS["Gaussian"].operators[("vmp", "mean")]
    real = op.fn

    def poisoned(sample, precision, **fused):
        msg = real(sample, precision, **fused)
        return Gaussian.from_natural(msg.eta[0] * float("nan"), msg.eta[1])

    model = _model()
    compiled = model.compile("vmp")
    monkeypatch.setitem(compiled._infer.__globals__, "Gaussian_mean_average_logarithm",
                        poisoned)
    with pytest.raises(ff.ImproperMessageError, match="posterior of mean"):
        compiled.run()


def test_zero_precision_given_as_data_is_rejected():
    with ff.Model(), pytest.raises(ff.DataError, match=r"'p'.*values > 0"):
        p = ff.Data("p", 0.0)
        ff.Gaussian("mean", 0.0, precision=p)   # refused where it is written
    with ff.Model() as model:
        p = ff.Data("p", 1.0)
        ff.Gaussian("mean", 0.0, precision=p)
    with pytest.raises(ff.DataError, match=r"'p'.*values > 0"):
        model.infer("ep", data={"p": 0.0})      # and at run time


def test_init_of_wrong_family():
    with pytest.raises(ff.ModelError, match=r"init\['mean'\] must be a Gaussian"):
        _model().infer("vmp", init={"mean": Gamma(1.0, rate=1.0)})


def test_init_names_unknown_variable():
    with pytest.raises(ff.ModelError, match="no variable 'nope'"):
        _model().infer("vmp", init={"nope": Gaussian(0.0, 1.0)})
