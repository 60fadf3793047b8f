"""Shared fixtures: small models used across the test suite."""

from __future__ import annotations

import numpy as np
import pytest

import factorflow as ff


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
