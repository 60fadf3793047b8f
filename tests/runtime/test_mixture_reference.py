"""The generated VMP program of the 1-D Gaussian mixture (Dirichlet weights, Gaussian
means, Gamma precisions, ``ff.Switch(z)``) against the hand-written NumPy updates of
``benchmarks/mixture_reference.py`` (the reference ``benchmarks/run.py`` times): the same
posteriors after every number of sweeps, so the benchmark compares the same work."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.mixture_reference import (
    Posteriors,
    Priors,
    bound,
    data,
    factorflow_init,
    hand_written,
    model,
)
from tests.conftest import assert_close


def assert_hand_written(got, ref: Posteriors, x: np.ndarray, priors: Priors | None = None,
                        tol: float = 1e-10) -> None:
    """factorflow's run ``got`` (posteriors and bound) against the hand-written run
    ``ref`` of the same sweeps on the data ``x`` (under ``priors``, the default
    ``Priors()``): each posterior's parameters and the
    bound (``mixture_reference.bound`` of ``ref``) to relative ``tol``, the
    responsibilities to absolute ``tol`` (the one assertion of every test that checks
    the 1-D mixture against ``benchmarks/mixture_reference.py``)."""
    assert_close(got["weights"].alpha, ref.alpha, rtol=tol, atol=1e-10)
    assert_close(got["means"].mean, ref.mean, rtol=tol, atol=1e-10)
    assert_close(got["means"].variance, ref.var, rtol=tol, atol=1e-12)
    assert_close(got["precs"].shape_param, ref.shape, rtol=tol, atol=1e-10)
    assert_close(got["precs"].rate, ref.rate, rtol=tol, atol=1e-10)
    assert_close(got["z"].probs, ref.r, rtol=0, atol=tol)
    assert_close(got.log_evidence, bound(x, ref, priors or Priors()), rtol=tol, atol=1e-9)


@pytest.mark.parametrize("k,n", [(2, 7), (3, 40), (5, 60)], ids=["k2-n7", "k3-n40", "k5-n60"])
def test_generated_mixture_equals_the_hand_written_updates(k, n):
    x = data(k, n, seed=k)
    compiled = model(x, k).compile("vmp", init=["means"])
    for sweeps in (1, 2, 7, 25):
        got = compiled.run(iterations=sweeps, init=factorflow_init(x, k), tolerance=None)
        assert_hand_written(got, hand_written(x, k, sweeps), x)


def test_hand_written_reference_is_coordinate_ascent_to_a_fixed_point():
    """The reference itself: its fixed point satisfies the VMP equations (a sweep more
    changes nothing), and the responsibilities are distributions."""
    x = data(3, 300)
    a, b = hand_written(x, 3, 400), hand_written(x, 3, 401)
    assert_close(b.mean, a.mean, rtol=0, atol=1e-9)
    assert_close(a.r.sum(axis=1), np.ones(x.size), rtol=0, atol=1e-12)
    assert_close(a.alpha.sum(), 3 + x.size, rtol=1e-12)
