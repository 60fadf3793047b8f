"""Shared fixtures: small models used across the test suite."""

from __future__ import annotations

import contextlib
import functools
import io
import runpy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import factorflow as ff

EXAMPLES_DIR = Path(__file__).parent.parent / "examples"


def assert_close(actual, expected, rtol: float = 1e-9, atol: float = 1e-12) -> None:
    """The one closeness check of the suite (tolerances are the caller's claim)."""
    np.testing.assert_allclose(np.asarray(actual, float), np.asarray(expected, float),
                               rtol=rtol, atol=atol)


@pytest.fixture
def known_precision_model():
    """mean ~ N(0, 100); x[n] ~ N(mean, 1), x = (5, 7): conjugate, closed form."""
    with ff.Model("known_precision") as model:
        mean = ff.Gaussian("mean", 0.0, variance=100.0)
        n = ff.Range("n", 2)
        with ff.Plate(n):
            ff.Gaussian("x", mean, precision=1.0, observed=[5.0, 7.0])
    return model


def gaussian_mixture(data, components: int = 2, learn_precision: bool = False) -> ff.Model:
    """The mixture of the README: weights ~ Dirichlet(1, …, 1); means[k] ~ N(0, 100);
    (prec ~ Gamma(1, 1) when ``learn_precision``, else 1); z[n] ~ Discrete(weights);
    x[n] ~ N(means[z], prec) inside ff.Switch(z), observed ``data``."""
    with ff.Model("mixture") as model:
        weights = ff.Dirichlet("weights", np.ones(components))
        with ff.Plate(ff.Range("k", components)):
            means = ff.Gaussian("means", 0.0, variance=100.0)
        prec = ff.Gamma("prec", 1.0, rate=1.0) if learn_precision else 1.0
        with ff.Plate(ff.Range("n", len(data))):
            z = ff.Discrete("z", weights)
            with ff.Switch(z):
                ff.Gaussian("x", means[z], precision=prec, observed=np.asarray(data, float))
    return model


@pytest.fixture
def uncertain_constraints(monkeypatch):
    """ConstrainTrue's EP message not marked ``certain``: the constrained variable's
    posterior is then computed from its definition's message every sweep (as before
    ``transforms.pruning.fix_certain``), for the tests that study how that message is
    scheduled."""
    import dataclasses

    from factorflow.factors.registry import FACTORS
    ops = FACTORS["ConstrainTrue"].operators
    monkeypatch.setitem(ops, ("ep", "value"),
                        dataclasses.replace(ops[("ep", "value")], certain=False))


@dataclass(frozen=True)
class ExampleRun:
    """What an example's ``main()`` did: its module's globals, what it returned and
    printed, and each ``CompiledModel.run`` it made, in order, as (the compiled model,
    the call's positional and keyword arguments, the result)."""

    module: dict[str, Any]
    out: Any
    printed: str
    runs: tuple[tuple[Any, tuple, dict, Any], ...]


@functools.cache
def example_run(stem: str) -> ExampleRun:
    """``examples/<stem>.py``'s ``main()``, run once per test session (``runpy``, a fresh
    module): ``tests/test_examples.py`` checks what it returns and prints, and the JAX
    backend's test runs its NumPy runs again on JAX (``test_examples_agree``), from the
    same record whichever of them asks first.  The results are shared: read them, never
    change them."""
    from factorflow.runtime.compiled import CompiledModel
    real_run = CompiledModel.run
    runs = []

    def recorded(self, *args, **kwargs):
        result = real_run(self, *args, **kwargs)
        runs.append((self, args, kwargs, result))
        return result

    module = runpy.run_path(str(EXAMPLES_DIR / f"{stem}.py"))
    printed = io.StringIO()
    CompiledModel.run = recorded
    try:
        with contextlib.redirect_stdout(printed):
            out = module["main"]()
    finally:
        CompiledModel.run = real_run
    return ExampleRun(module, out, printed.getvalue(), tuple(runs))
