"""The JAX backend's fused normalisation of a mixture's responsibilities
(``distributions.base._normalize_traced_product``): each block of rows made from the
data's statistics, normalised and contracted inside one loop body, nothing (N, K)
written out.  Tested against the whole-array steps on random statistics (hypothesis),
against the NumPy backend on both mixtures at sizes that take the blocked path (the
posteriors and the bound to 1e-10; the passes over N-sized arrays in the program XLA
compiled, one, the blocks' loop, are ``test_jax_fused_switch.py``'s)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

jax = pytest.importorskip("jax")
jnp = jax.numpy

from factorflow.runtime.backends.jax_namespace import namespace  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[3]))
namespace()  # loaded before any trace (its module constants are computed eagerly)


def _base():
    return namespace()["factorflow.distributions.base"]


def _fused_and_whole(stats: np.ndarray, coef: np.ndarray, step: int) -> tuple:
    """(fused, whole): the blocked loop's (max, log sums, probabilities, Sᵀ q, Σ lse) and
    the same from the whole-array steps, both under ``jit``, float64."""
    base = _base()

    def both(s, c):
        fused = base._normalize_traced_product((s, c, 0), step)
        top, log_total, p = base._normalize_traced_rows(s @ c)
        whole = (top, log_total, p, s.T @ p, jnp.sum(top + log_total))
        return fused, whole
    with jax.enable_x64(True):
        fused, whole = jax.jit(both)(jnp.asarray(stats), jnp.asarray(coef))
    return [np.asarray(a) for a in fused], [np.asarray(a) for a in whole]


@settings(max_examples=12, deadline=None)
@given(n=st.integers(4, 40), k=st.integers(1, 6), j=st.integers(1, 4),
       step=st.integers(2, 9), seed=st.integers(0, 2**32 - 1),
       scale=st.sampled_from([1.0, 30.0, 800.0]))
def test_blocks_equal_the_whole_array(n, k, j, step, seed, scale):
    """Any N, block size (a last block that overlaps the one before), K and J: the same
    maxima, log sums and probabilities, and the accumulated Sᵀ q and Σ_n lse_n equal
    the whole array's to 1e-12 (relative; logits spread up to ±800, where rows'
    smallest probabilities flush to 0 below e^−700)."""
    step = min(step, n)
    rng = np.random.default_rng(seed)
    stats = np.concatenate([np.ones((n, 1)), rng.normal(size=(n, j - 1))], axis=1)
    coef = scale * rng.normal(size=(j, k))
    fused, whole = _fused_and_whole(stats, coef, step)
    for a, b in zip(fused, whole, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * (1 + np.abs(b).max()))


def test_blocks_keep_infinities_and_nan():
    """A −inf coefficient (a component of weight 0) gives probability 0 there, as the
    whole-array steps do; a NaN statistic gives a NaN row, which the sums carry."""
    rng = np.random.default_rng(3)
    stats = np.concatenate([np.ones((11, 1)), rng.normal(size=(11, 2))], axis=1)
    coef = rng.normal(size=(3, 4))
    coef[0, 2] = -np.inf
    fused, whole = _fused_and_whole(stats, coef, 4)
    assert np.all(fused[2][:, 2] == 0.0)
    for a, b in zip(fused, whole, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-13)
    stats[5, 1] = np.nan
    fused, whole = _fused_and_whole(stats, coef, 4)
    assert np.isnan(fused[2][5]).all() and not np.isnan(np.delete(fused[2], 5, 0)).any()
    assert np.isnan(fused[3]).any() and np.isnan(fused[4])


def _compare(model, init, names, iterations=4, **compile_options):
    """The JAX run equals the NumPy run: the posteriors' natural parameters to 1e-10
    (|Δη| / (1 + |η|), as ``test_jax``), the bound to 1e-10 relative."""
    options = ({"init": list(init)} if init else {}) | compile_options
    a = model.compile("vmp", **options).run(init=init, iterations=iterations,
                                            tolerance=None, progress=False)
    compiled = model.compile("vmp", backend="jax", **options)
    b = compiled.run(init=init, iterations=iterations, tolerance=None, progress=False)
    for name in names:
        for p, q in zip(a[name].eta, b[name].eta, strict=True):
            diff = np.abs(np.asarray(q) - p) / (1.0 + np.abs(p))
            assert np.max(diff, initial=0.0) < 1e-10, (name, np.max(diff))
    assert b.log_evidence == pytest.approx(a.log_evidence, rel=1e-10)
    return compiled


@pytest.mark.slow
def test_mixture1d_fused_equals_numpy():
    """Issue 14's 1-D mixture (K = 10) at N = 7,001, two blocks and an overlapping
    third, on the gate path (``fuse_switch=False``; the fused Switch, the default, is
    ``test_jax_fused_switch.py``'s, at this size too, with its one pass over the data):
    the loop carries the evidence and the logits as their (3, K) coefficients and the
    responsibilities as their column sums (no N-sized array), and the run equals
    NumPy's."""
    from benchmarks import mixture_reference as mix
    x = mix.data(10, 7001)
    init = mix.factorflow_init(x, 10)
    compiled = _compare(mix.model(x, 10), init, ("weights", "means", "precs", "z"),
                        fuse_switch=False)
    assert "SwitchGaussian" not in compiled.source
    (_, info), = compiled._traced.values()
    (carried,) = info["carried"]
    assert carried["carried elements"] < 7001


@pytest.mark.slow
def test_vector_mixture_fused_equals_numpy():
    """The 2-D mixture (K = 3, VectorGaussian means, Wishart precisions) at N = 22,001
    (the blocked path from 2 · 32768 / K rows): the same as NumPy after 2 sweeps (after
    4 the means' and precisions' small entries differ by 2e-10 relative on main's code
    too: they are differences of sums over the data, which the sweeps amplify)."""
    sys.path.insert(0, str(Path(__file__).parents[3] / "examples"))
    import gaussian_mixture as gm

    import factorflow as ff
    init = {"means": ff.distributions.VectorGaussian(
        gm.CENTERS + 0.5, np.broadcast_to(np.eye(2), (3, 2, 2)))}
    compiled = _compare(gm.mixture(gm.data(22001), 3), init,
                        ("weights", "means", "precs", "z"), iterations=2)
    (_, info), = compiled._traced.values()
    (carried,) = info["carried"]
    assert carried["carried elements"] < 22001
