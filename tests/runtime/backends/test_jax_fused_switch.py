"""The fused Switch on the JAX backend (issue 14; ``factors.fused_switch``): the fused
statement's traced path reads the responsibilities as the posterior's normalisation made
them (``kernels.align_plates``' ``"laid_out_from"``), so that a mixture's logits,
their normalisation, the data sums Σ_n r_nk [1, x_n, x_n²] and the bound's term
Σ_jk C_jk (Sᵀ r)_jk come from the one blocked loop of ``base._normalize_traced_product``.
Checked against the NumPy backend's fused run (the posteriors' natural parameters and
the bound, each sweep's bound with ``trace``, to 1e-10) at sizes below, at and past
the blocked path's threshold (N = 1, N below a block, N not a multiple of the block),
by the passes over N-sized arrays in the program XLA compiled (one: the blocks'
loop), and on a poisoned datum: the run still names the improper posterior and the
iteration NumPy names."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import factorflow as ff  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[3]))
from benchmarks import mixture_reference as mix  # noqa: E402

NAMES = ("weights", "means", "precs", "z")


def _run(x: np.ndarray, k: int, backend: str, sweeps: int, trace: bool):
    compiled = mix.model(x, k).compile("vmp", init=["means"], backend=backend,
                                       fuse_switch=True)
    assert "SwitchGaussian" in compiled.source  # (the fused statement, on both backends)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ff.ConvergenceWarning)
        return compiled, compiled.run(iterations=sweeps, init=mix.factorflow_init(x, k),
                                      tolerance=None, progress=False, trace=trace)


# (K, N): K = 10 normalises block by block from 2 · 32768 / K = 6,554 rows, in blocks of
# 8192 / K = 819 rows (7,001 = 8 blocks and an overlapping ninth); K = 25 from 2,622 rows,
# blocks of 327 (3,001); K = 3 and 10 below the threshold (whole-array rows); N = 1
@pytest.mark.parametrize(("k", "n"), [(3, 1), (10, 1), (3, 60), (10, 500),
                                      pytest.param(10, 7001, marks=pytest.mark.slow),
                                      pytest.param(25, 3001, marks=pytest.mark.slow)])
@pytest.mark.parametrize("trace", [False, True])
def test_jax_fused_equals_numpy_fused(k, n, trace):
    """The JAX backend's fused run equals NumPy's: every posterior's natural parameters
    (|Δη| / (1 + |η|), as ``test_jax``) and the bound to 1e-10, each sweep's bound
    too where traced; past the threshold the loop carries no N-sized array."""
    x = mix.data(k, n, 5)
    sweeps = 6
    _, want = _run(x, k, "numpy", sweeps, trace)
    compiled, got = _run(x, k, "jax", sweeps, trace)
    for name in NAMES:
        for p, q in zip(want[name].eta, got[name].eta, strict=True):
            diff = np.abs(np.asarray(q) - p) / (1.0 + np.abs(p))
            assert np.max(diff, initial=0.0) < 1e-10, (name, np.max(diff))
    assert float(got.log_evidence) == pytest.approx(want.log_evidence, rel=1e-10, abs=1e-9)
    assert len(got.trace) == len(want.trace) == (sweeps if trace else 0)
    if trace:
        np.testing.assert_allclose(np.asarray(got.trace), want.trace, rtol=1e-10, atol=1e-9)
    if n >= 2 * 32768 // k:
        (_, info), = compiled._traced.values()
        (carried,) = info["carried"]
        assert carried["carried elements"] < n


@pytest.mark.slow
def test_one_pass_over_the_data():
    """In the program XLA compiled for the 1-D mixture (K = 10) at N = 7,001, the fused
    sweep's loop body (a sweep and its bound) makes one pass over N-sized arrays, the
    blocks' loop, as the gate path's (6 before the traced path read the normalisation's
    sums); below the blocks' threshold (N = 1,009) no more than the gate path's 10."""
    from benchmarks.bench_backends import passes
    assert passes("mixture1d", 7001, fuse_switch=True).startswith(
        "loop body, N = 7001: 1 passes over N-sized arrays (1 while)")
    text = passes("mixture1d", 1009, fuse_switch=True)
    assert int(text.split(": ")[1].split(" passes")[0]) <= 10, text


def _poisoned(backend: str, value: float):
    """The 1-D mixture's fused program for ``backend`` with the logits of datum 7 (the
    fused statement's message to z) set to ``value``: an improper responsibility."""
    x = mix.data(3, 60)
    compiled = mix.model(x, 3).compile("vmp", init=["means"], backend=backend,
                                       fuse_switch=True)
    names = (compiled._program if backend == "jax" else compiled._infer).__globals__
    real = names["SwitchGaussian_selector_average_logarithm"]

    def poisoned(*args, **kwargs):
        out = real(*args, **kwargs)
        eta = out.eta[0]
        eta = eta.at[7].set(value) if backend == "jax" else np.where(
            np.arange(len(eta))[:, None] == 7, value, eta)
        return type(out).from_natural(eta)
    names["SwitchGaussian_selector_average_logarithm"] = poisoned
    return compiled, mix.factorflow_init(x, 3)


@pytest.mark.parametrize("value", [np.nan, -np.inf])
def test_improper_responsibilities_are_named(value):
    """A NaN in a datum's logits, or no finite one: the JAX run stops with the
    ImproperMessageError NumPy's fused run raises, naming the same posterior and
    iteration (never a silent NaN)."""
    messages = []
    for backend in ("numpy", "jax"):
        compiled, init = _poisoned(backend, value)
        with pytest.raises(ff.ImproperMessageError) as error:
            compiled.run(init=init, iterations=5)
        messages.append(str(error.value).split(" is improper")[0])
    assert messages[0] == messages[1]
    assert "at iteration 1" in messages[1]
