"""The gate transform's two methods (seed 001) give the same posteriors.

``model.compile(algorithm, enter_whole_arrays=True)`` is the seed's alternative method: an
array used inside a gate enters it whole instead of the elements each case uses. On random
gated models from the oracle's generators, both methods compile and run to the same
posteriors and evidence, and the option changes the program where the seed says it should.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings

import factorflow as ff
from tests.oracle import models
from tests.oracle.build import build

SETTINGS = settings(derandomize=True, max_examples=25, deadline=None, database=None,
                    phases=tuple(set(Phase) - {Phase.explain}),
                    suppress_health_check=list(HealthCheck))


def _flat(d) -> np.ndarray:
    eta = getattr(d, "eta", None)
    parts = eta if eta is not None else (np.asarray(d.mean, float),)
    return np.concatenate([np.ravel(np.asarray(e, float)) for e in parts])


def _same(spec, algorithm: str) -> None:
    model, _ = build(spec)
    try:
        a = model.infer(algorithm, iterations=100)
    except (ff.ImproperMessageError, ff.UnsupportedFactorError):
        return  # the default method's own limits (the oracle tests them)
    b = model.infer(algorithm, iterations=100, enter_whole_arrays=True)
    assert abs(a.log_evidence - b.log_evidence) < 1e-9
    for name in a.posteriors:
        np.testing.assert_allclose(_flat(b[name]), _flat(a[name]), atol=1e-9, rtol=1e-9)


@SETTINGS
@given(models.discrete())
def test_same_posteriors_on_discrete_models(spec):
    for algorithm in ("ep", "vmp"):
        _same(spec, algorithm)


@SETTINGS
@given(models.linear_gaussian(gated=True))
def test_same_posteriors_on_gated_linear_gaussian_models(spec):
    for algorithm in ("ep", "vmp"):
        _same(spec, algorithm)


def test_an_array_used_inside_a_gate_enters_whole():
    with ff.Model("whole") as model:
        c = ff.Bernoulli("c", 0.3)
        n = ff.Range("n", 3)
        with ff.Plate(n):
            x = ff.Gaussian("x", 0.0, precision=1.0)
        with ff.If(c):
            with ff.Plate(n):
                ff.Gaussian("y", x, precision=2.0, observed=[0.5, -1.0, 2.0])
        with ff.IfNot(c):
            with ff.Plate(n):
                ff.Gaussian("y", 0.0, precision=2.0, observed=[0.5, -1.0, 2.0])
    default = model.compile("ep").compilation.text("gates")
    whole = model.compile("ep", enter_whole_arrays=True).compilation.text("gates")
    assert default != whole
    a, b = model.infer("ep"), model.infer("ep", enter_whole_arrays=True)
    assert abs(a.log_evidence - b.log_evidence) < 1e-12
    np.testing.assert_allclose(b["x"].mean, a["x"].mean, atol=1e-12)
    np.testing.assert_allclose(b["c"].p, a["c"].p, atol=1e-12)
    with np.testing.assert_raises(ff.ModelError):
        model.compile("ep", enter_whole_arrays="yes")
