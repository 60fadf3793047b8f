"""The D-dimensional Gaussian mixture (VectorGaussian means, Wishart precisions,
``ff.Switch(z)``) under VMP: the generated program against the hand-written NumPy updates
of ``benchmarks/vmixture_reference.py`` (the reference ``benchmarks/bench_vectors.py``
times), after every number of sweeps, to 1e-10."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.vmixture_reference import bound, data, factorflow_init, hand_written, model
from tests.conftest import assert_close


@pytest.mark.parametrize("k,n,dim", [(2, 9, 1), (3, 40, 2), (4, 60, 5), (5, 80, 10)],
                         ids=["k2-n9-d1", "k3-n40-d2", "k4-n60-d5", "k5-n80-d10"])
def test_generated_vector_mixture_equals_the_hand_written_updates(k, n, dim):
    x, start = data(k, n, dim, seed=k)
    compiled = model(x, k).compile("vmp", init=["means"])
    for sweeps in (1, 2, 7, 20):
        got = compiled.run(iterations=sweeps, init=factorflow_init(start), tolerance=None,
                           progress=False)
        ref = hand_written(x, start, sweeps)
        assert_close(got["weights"].alpha, ref.alpha, rtol=1e-10, atol=1e-10)
        assert_close(got["means"].mean, ref.mean, rtol=1e-10, atol=1e-10)
        assert_close(got["means"].covariance, ref.cov, rtol=1e-10, atol=1e-12)
        assert_close(got["precs"].dof, ref.dof, rtol=1e-10, atol=1e-10)
        assert_close(got["precs"].rate, ref.rate, rtol=1e-10, atol=1e-10)
        assert_close(got["z"].probs, ref.r, rtol=0, atol=1e-10)
        assert_close(got.log_evidence, bound(x, ref), rtol=1e-10, atol=1e-9)
