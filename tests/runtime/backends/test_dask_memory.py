"""The Dask backend's memory per task: a chunk's task runs its rows in sub-blocks
(``dask_subblocks``), with the same results as the whole chunk; and the bad input the
backend refuses (issue 14)."""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import factorflow as ff

pytest.importorskip("distributed")
import dask  # noqa: E402
import dask.array as da  # noqa: E402

from factorflow.distributions import base  # noqa: E402
from factorflow.runtime.backends import dask_fusion, dask_subblocks  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[3] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).parent))
from test_jax import _check_same  # noqa: E402  (the JAX tests' comparison, to 1e-10)


@pytest.fixture(scope="module")
def client():
    from factorflow.runtime.backends.dask_backend import default_client
    return default_client()


def _block(block_info=None, source=None):
    """A block of ``source`` read by its place (as a lazily read file's chunk is)."""
    lo, hi = block_info[None]["array-location"][0]
    return np.array(source[lo:hi])


def _pass(x: np.ndarray, w: np.ndarray, lengths: tuple[int, ...], cumulative: bool = False,
          per_datum: bool = True):
    """A pass as the backend makes them, fused one task per chunk and run in this process
    (the data read by place, per-datum work with K values, factorflow's normalisation
    and exponential block by block, a contraction over the plate, sums and a maximum
    over it, a per-datum result); ``cumulative``: with a running sum down the rows (a
    step that is not row-wise); ``per_datum``: with the per-datum result (else the
    reductions only, as the bound's pass)."""
    read = da.map_blocks(_block, source=x, chunks=(lengths,), dtype=float, meta=np.empty(0))
    try:
        dask_fusion.register(read)
        with dask.config.set(scheduler="sync", array_optimize=dask_fusion.optimize):
            logits = read[:, None] * w - 0.5 * read[:, None] ** 2
            if cumulative:
                logits = logits + da.cumsum(read, axis=0)[:, None] * 1e-3
            log_q = logits.map_blocks(base.log_normalize, dtype=float)
            q = log_q.map_blocks(base.exp_flushed, dtype=float)
            stats = np.stack([da.ones_like(read), read, read**2])
            sums = stats @ q                                      # (3, K) over the plate
            bound = (q * logits).sum() - (q * log_q).sum()
            return dask.compute(sums, *([q] if per_datum else []), bound, q.max(axis=0),
                                (q > 0.5).any(axis=0))
    finally:
        dask_fusion.PLATE_KEYS.clear()


def _in_sub_blocks(monkeypatch, first_rows: int, block_bytes: int) -> None:
    monkeypatch.setattr(dask_subblocks, "FIRST_ROWS", first_rows)
    monkeypatch.setattr(dask_subblocks, "SUB_BLOCK_BYTES", block_bytes)


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(lengths=st.lists(st.integers(8, 60), min_size=2, max_size=4).map(tuple),
       k=st.integers(1, 5), first=st.integers(2, 4), block=st.integers(8, 400),
       seed=st.integers(0, 2**16))
def test_sub_blocks_compute_what_the_whole_chunk_does(monkeypatch, lengths, k, first, block,
                                                      seed):
    """Chunks run in sub-blocks of a few rows (the first ``first`` rows, then
    ``block`` bytes of the widest per-datum row) give what the whole chunks give, and
    NumPy, to 1e-12: per-datum results, sums and a contraction over the plate, a maximum
    and an ``any`` over it; every chunk's task was split."""
    rng = np.random.default_rng(seed)
    x, w = rng.normal(size=sum(lengths)), rng.normal(size=k)
    _in_sub_blocks(monkeypatch, 10**9, 1)  # (the whole chunks)
    whole = _pass(x, w, lengths)
    _in_sub_blocks(monkeypatch, first, block)
    before = dict(dask_subblocks.STATS)
    got = _pass(x, w, lengths)
    assert dask_subblocks.STATS["split"] - before["split"] >= len(lengths)
    assert dask_subblocks.STATS["whole"] == before["whole"], dask_subblocks.STATS["why"]
    logits = x[:, None] * w - 0.5 * x[:, None] ** 2
    log_q = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    q = np.exp(log_q)
    want = (np.stack([np.ones_like(x), x, x**2]) @ q, q,
            (q * logits).sum() - (q * log_q).sum(), q.max(axis=0), (q > 0.5).any(axis=0))
    for a, b, c in zip(got, whole, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(a, c, rtol=1e-10, atol=1e-10)


def test_a_step_that_is_not_row_wise_runs_the_chunk_whole(monkeypatch):
    """A running sum down the rows (``np.cumsum`` in the chunk's task) is not row-wise:
    the chunk's task runs whole, named in the statistics, with the same results."""
    _in_sub_blocks(monkeypatch, 4, 64)
    rng = np.random.default_rng(5)
    x, w = rng.normal(size=90), rng.normal(size=3)
    before = dict(dask_subblocks.STATS)
    got = _pass(x, w, (30, 30, 30), cumulative=True)
    assert dask_subblocks.STATS["whole"] - before["whole"] >= 3
    assert "cumsum" in dask_subblocks.STATS["why"]
    _in_sub_blocks(monkeypatch, 10**9, 1)
    for a, b in zip(got, _pass(x, w, (30, 30, 30), cumulative=True), strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("values, why", [
    ((np.ones((40, 40)),), "several axes"),          # rows on two axes: not followed
    (([np.ones(40)],), "container of per-datum"),    # rows inside a list
])
def test_values_whose_rows_cannot_be_followed_are_refused(values, why):
    with pytest.raises(dask_subblocks.Unsplittable, match=why):
        dask_subblocks._Split({}, (), ("a",), values, 40)


def test_a_task_s_peak_is_bounded_by_the_sub_block(monkeypatch):
    """Two chunks of 40,000 rows and K = 10 (3.2 MB per (rows, K) array), a pass of
    reductions only (as the bound's): run whole, a chunk's task holds several such
    arrays at its peak (``tracemalloc`` inside the task); in sub-blocks of
    ``SUB_BLOCK_BYTES`` (256 KiB) less than one (the data chunk, a few sub-blocks: about
    half of one alone, a tenth of the whole chunk's peak)."""
    rng = np.random.default_rng(1)
    x, w = rng.normal(size=80_000), rng.normal(size=10)
    chunk = x.size // 2 * w.size * 8
    peaks: list[int] = []
    real = dask_fusion._run_program

    def measured(*args):
        start = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        out = real(*args)
        peaks.append(tracemalloc.get_traced_memory()[1] - start)
        return out
    monkeypatch.setattr(dask_fusion, "_run_program", measured)

    def peak() -> int:
        del peaks[:]
        tracemalloc.start()
        try:
            _pass(x, w, (x.size // 2,) * 2, per_datum=False)
        finally:
            tracemalloc.stop()
        assert len(peaks) == 2
        return max(peaks)

    with pytest.MonkeyPatch.context() as mp:
        _in_sub_blocks(mp, 10**9, 1)
        whole = peak()
    split = peak()
    assert whole > 3 * chunk, whole
    assert split < chunk and split < whole / 5, (split, whole)


@pytest.mark.slow
def test_mixture_in_sub_blocks_on_the_cluster_same_as_numpy(client):
    """Issue 14's mixture on the backend's LocalCluster, with chunks long enough to be
    split on the workers (K = 3, N = 9,000 in chunks of 4,500): the same posteriors,
    bound and trace as NumPy to 1e-10, and every chunk's task of the run split."""
    import mixture_reference as mr
    x = mr.data(3, 9000)
    model, init = mr.model(x, 3), mr.factorflow_init(x, 3)

    def stats(dask_worker=None):
        return dict(dask_subblocks.STATS)
    before = client.run(stats)
    a = model.compile("vmp", init=["means"]).run(4, init=init, tolerance=None)
    b = model.compile("vmp", init=["means"], backend="dask").run(
        4, init=init, tolerance=None, client=client, chunks=4500)
    _check_same(model, a, b)
    after = client.run(stats)
    assert sum(after[w]["split"] - before[w]["split"] for w in after) >= 8
    assert all(after[w]["whole"] == before[w]["whole"] for w in after), after


# ----- bad input (issue 14): chunks that disagree with the plate, a lossy dtype ----------
def _learning() -> ff.Model:
    with ff.Model("learning") as model:
        mu = ff.Gaussian("mu", 0.0, variance=10.0)
        with ff.Plate(ff.Range("n", 40)):
            ff.Gaussian("x", mu, variance=1.0, observed=ff.Data("xs"))
    return model


@pytest.mark.parametrize("dtype, error, match", [
    (np.longdouble, ff.DataError, "float128.*lose precision.*astype"),
    (np.complex128, ff.DataError, "expected real numbers.*complex"),
])
def test_a_dask_array_of_a_lossy_dtype_is_refused(client, dtype, error, match):
    """A Dask array of extended precision or complex data is refused by name, as a
    NumPy one is (a float128 Dask array's dtype was checked only after its cast to
    float64: it was rounded silently)."""
    if np.dtype(dtype).kind == "f" and np.dtype(dtype).itemsize <= 8:
        pytest.skip("longdouble is float64 on this platform")
    xs = da.from_array(np.arange(40.0).astype(dtype), chunks=20)
    with pytest.raises(error, match=match):
        _learning().compile("vmp", backend="dask").run(data={"xs": xs}, client=client)
