"""The one comparison of a D-dimensional mixture run with the hand-written NumPy updates
of ``benchmarks/vmixture_reference.py`` (the tests of the fused Switch and of the
sufficient-statistic paths read it): every posterior's parameters and the bound."""

from __future__ import annotations

import numpy as np

from benchmarks import vmixture_reference as vref
from tests.conftest import assert_close


def assert_hand_written(got, x: np.ndarray, start: np.ndarray, sweeps: int,
                        priors: vref.Priors | None = None, tol: float = 1e-10) -> None:
    """``got`` (a run of ``vmixture_reference.model(x, K, priors)`` from ``start`` for
    ``sweeps`` sweeps) equals ``vmixture_reference.hand_written`` of the same: the
    weights' α, the means' mean and covariance, the precisions' ν and rate, the
    responsibilities and the bound (``vmixture_reference.bound``), each to ``tol``
    relative and absolute (the covariances, of order 1/N, to ``tol``/100 absolute; the
    responsibilities absolute; the bound, of order N, to 10 ``tol`` absolute)."""
    priors = vref.Priors() if priors is None else priors  # (the example's own)
    ref = vref.hand_written(x, start, sweeps, priors=priors)
    assert_close(got["weights"].alpha, ref.alpha, rtol=tol, atol=tol)
    assert_close(got["means"].mean, ref.mean, rtol=tol, atol=tol)
    assert_close(got["means"].covariance, ref.cov, rtol=tol, atol=tol / 100)
    assert_close(got["precs"].dof, ref.dof, rtol=tol, atol=tol)
    assert_close(got["precs"].rate, ref.rate, rtol=tol, atol=tol)
    assert_close(got["z"].probs, ref.r, rtol=0, atol=tol)
    assert_close(got.log_evidence, vref.bound(x, ref, priors), rtol=tol, atol=10 * tol)
