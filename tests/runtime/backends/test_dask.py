"""The Dask backend against the NumPy backend: same posteriors, bound, sweeps, on a
2-worker ``LocalCluster`` with the data in several chunks."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import factorflow as ff

pytest.importorskip("distributed")
import dask  # noqa: E402
import dask.array as da  # noqa: E402

ROOT = Path(__file__).parents[3]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(Path(__file__).parent))
from test_jax import _check_same  # noqa: E402  (the JAX tests' comparison, to 1e-10)


@pytest.fixture(scope="module")
def client():
    from factorflow.runtime.backends.dask_backend import default_client
    return default_client()


def assert_same(model: ff.Model, algorithm: str, chunks: int, client, init_names=(),
                **run) -> tuple:
    a = model.compile(algorithm, init=list(init_names)).run(**run)
    b = model.compile(algorithm, init=list(init_names), backend="dask").run(
        client=client, chunks=chunks, **run)
    _check_same(model, a, b)
    return a, b


@pytest.mark.slow
def test_mixture_1d_same_as_numpy_and_never_gathered(client):
    """Issue 14's mixture (K = 3, N = 600 in 4 chunks): the same posteriors, bound and
    trace as NumPy to 1e-10; during the run q(z) (per datum) is a lazy Dask array of 4
    chunks whose graph does not grow with the sweeps, q(means) (K-sized) a NumPy array
    here, and the workers store nothing but the data's 4 chunks (no per-datum message)."""
    import mixture_reference as mr
    x = mr.data(3, 600)
    model, init = mr.model(x, 3), mr.factorflow_init(x, 3)
    assert_same(model, "vmp", 150, client, ["means"], init=init, iterations=4,
                tolerance=None)
    seen, stored = [], []

    def look(iteration, posteriors):
        seen.append((posteriors["z"].eta[0], posteriors["means"].eta[0]))
        stored.append(_steady_store(client, lambda held: [s for s in held if s > 3]
                                    == [150] * 4))

    model.compile("vmp", init=["means"], backend="dask").run(
        4, init=init, client=client, chunks=150, on_iteration=look, tolerance=None)
    for z, means in seen[1:]:  # (the first sweep reads the initialisation)
        assert isinstance(z, da.Array) and z.npartitions == 4 and z.shape == (600, 3)
        assert len(z.dask) == len(seen[-1][0].dask)  # the same size, sweep after sweep
        assert type(means) is np.ndarray
    for held in stored:  # the data's chunks, sent once (and at most a K-sized result
        assert [s for s in held if s > 3] == [150] * 4, held  # not yet released)


@pytest.mark.slow
def test_mixture_past_the_blocked_product_same_as_numpy(client):
    """Issue 14's mixture with N·K past twice ``base._BLOCK_ELEMENTS`` (K = 10,
    N = 7,000 in 4 chunks), where NumPy makes q(z)'s product with E[log w] block by
    block in place (``_product_normalized``, ``out=``, which Dask arrays lack): on Dask
    the lazy product instead, the same posteriors, bound and trace to 1e-10 (every Dask
    run of the benchmark's sizes failed with a BackendError before)."""
    import mixture_reference as mr

    from factorflow.distributions import base
    x = mr.data(10, 7000)
    assert x.size * 10 >= 2 * base._BLOCK_ELEMENTS
    model, init = mr.model(x, 10), mr.factorflow_init(x, 10)
    assert_same(model, "vmp", 2000, client, ["means"], init=init, iterations=3,
                tolerance=None)


def _stored_sizes(dask_worker) -> list[int]:
    """The number of elements of each value a worker stores (a tuple: all of its own)."""
    return [sum(map(np.size, v)) if isinstance(v, tuple) else int(np.size(v))
            for v in list(dask_worker.data.values())]


def _steady_store(client, settled, timeout: float = 30.0) -> list[int]:
    """The sizes of the values the workers store once the cluster is at rest: read until
    ``settled(sizes)`` holds or ``timeout`` seconds have passed (the last reading then).
    A worker keeps what it has just computed until the scheduler's release reaches it,
    and a data chunk it fetched to run a task (when the scheduler moved the task there to
    balance the load) until distributed's active memory manager drops the replica (every
    2 s; run here at once): a snapshot taken just after a computation can see either."""
    import time
    deadline = time.monotonic() + timeout
    while True:
        held = sorted(s for each in client.run(_stored_sizes).values() for s in each)
        if settled(held) or time.monotonic() > deadline:
            return held
        client.amm.run_once()
        time.sleep(0.05)


def test_learning_gaussian_same_as_numpy(client):
    import learning_gaussian
    model = learning_gaussian.build(np.random.default_rng(0).normal(3, 2, 500))
    assert_same(model, "vmp", 128, client, iterations=30)
    assert_same(model, "vmp", 128, client, iterations=0)


def test_a_bound_without_dask_arrays_is_each_sweeps_own(client):
    """A model with no observed plate (every message NumPy, the bound a float, not a Dask
    scalar with a name): the trace is NumPy's sweep by sweep, each sweep's bound its own
    (not the first one's, kept under no name)."""
    with ff.Model("no_plate") as model:
        mu = ff.Gaussian("mu", 0.0, variance=10.0)
        tau = ff.Gamma("tau", 1.0, rate=1.0)
        ff.Gaussian("y", mu, precision=tau, observed=1.5)
    a, b = assert_same(model, "vmp", 1, client, iterations=5, tolerance=None)
    assert len(set(b.trace)) == 5


@pytest.mark.parametrize("example", ["clinical_trial", "two_coins"])
def test_ep_examples_same_as_numpy(example, client):
    module = __import__(example)
    model = module.build()
    assert_same(model, "ep", 2, client)


def test_what_dask_cannot_run_is_refused_by_name(client):
    """Per-datum vector Gaussians: their operators need array operations that chunked Dask
    arrays lack (a batched Cholesky, writes in place with ``out=``): refused with
    ff.BackendError naming the operation, not Dask's own exception.
    Linear regression (its one vector Gaussian global: the K-sized reductions are NumPy
    arrays by the time its operators run) agrees with NumPy."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 2))
    y = x @ [1.0, -2.0] + rng.normal(size=60) / 2
    with ff.Model("per_datum_vectors") as model:
        w = ff.VectorGaussian("w", 0.0, precision=np.eye(2))
        with ff.Plate(ff.Range("n", 60)):
            u = ff.VectorGaussian("u", w, precision=np.eye(2))
            ff.Gaussian("y", ff.Data("X", x) @ u, precision=4.0, observed=y)
    with pytest.raises(ff.BackendError, match="per_datum_vectors: .*Dask arrays do not support.*backend='numpy'"):
        model.compile("vmp", backend="dask").run(client=client, chunks=20)
    with ff.Model("linear_regression") as model:
        w = ff.VectorGaussian("w", 0.0, precision=np.eye(2))
        with ff.Plate(ff.Range("n", 60)):
            ff.Gaussian("y", ff.Data("X", x) @ w, precision=4.0, observed=y)
    assert_same(model, "vmp", 20, client)


# ----- options and bad input ---------------------------------------------------------
def _learning(n: int = 40):
    with ff.Model("learning") as model:
        mean = ff.Gaussian("mean", 0.0, variance=100.0)
        prec = ff.Gamma("prec", 1.0, rate=1.0)
        with ff.Plate(ff.Range("n", n)):
            ff.Gaussian("x", mean, precision=prec, observed=ff.Data("xs"))
    return model


def test_a_run_never_reads_its_dask_data_whole(client, monkeypatch):
    """A run on a Dask array (data that need not fit in this process): with
    ``da.Array.__array__`` refusing to be called, its checks, sweeps and result are made
    (the observed variable's point mass holds the Dask array itself), and the posteriors
    and bound equal NumPy's to 1e-10."""
    x = np.random.default_rng(1).normal(2.0, 1.5, 40)
    model = _learning()
    run = {"iterations": 6, "tolerance": None, "progress": False}
    ref = model.compile("vmp").run(data={"xs": x}, **run)

    def read_whole(self, *args, **kwargs):
        raise AssertionError("a Dask array read whole into the client")
    monkeypatch.setattr(da.Array, "__array__", read_whole)
    xs = da.from_array(x, chunks=13)
    result = model.compile("vmp", backend="dask").run(data={"xs": xs}, client=client, **run)
    assert result["x"].value is xs
    monkeypatch.undo()
    _check_same(model, ref, result)


@pytest.mark.slow
def test_infer_takes_client_and_chunks_and_a_scheduler_address(client):
    x = np.random.default_rng(1).normal(2.0, 1.5, 40)
    run = {"iterations": 6, "tolerance": None, "data": {"xs": x}}
    a = _learning().infer("vmp", **run)
    b = _learning().infer("vmp", **run, backend="dask", client=client, chunks=7)
    c = _learning().infer("vmp", **run, backend="dask", client=client.scheduler.address,
                          chunks=(10, 30))
    run["data"] = {"xs": da.from_array(x, chunks=13)}
    d = _learning().infer("vmp", **run, backend="dask", client=client)
    for r in (b, c, d):
        _check_same(_learning(), a, r)


def test_missing_dask_names_the_extra(monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "distributed" else real(name, *a))
    with pytest.raises(ff.BackendError, match=r'pip install "factorflow\[dask\]"'):
        _learning().compile("vmp", backend="dask")


def test_chunks_that_disagree_with_the_plate(client):
    compiled = _learning().compile("vmp", backend="dask")
    x = np.arange(40.0)
    with pytest.raises(ff.DataError, match=r"chunks \(10, 10\) do not tile the plate 'n' "):
        compiled.run(data={"xs": x}, client=client, chunks=(10, 10))
    with pytest.raises(ff.DataError, match="positive number of rows"):
        compiled.run(data={"xs": x}, client=client, chunks=0)
    with ff.Model("grid") as model:
        mu = ff.Gaussian("mu", 0.0, variance=10.0)
        with ff.Plate(ff.Range("n", 6)), ff.Plate(ff.Range("d", 4)):
            ff.Gaussian("y", mu, variance=1.0, observed=ff.Data("ys"))
    y = da.from_array(np.ones((6, 4)), chunks=(3, 2))  # chunked along d, not the plate
    with pytest.raises(ff.DataError, match=r"chunked as .*along its plate 'n' .*rechunk"):
        model.compile("vmp", backend="dask").run(data={"ys": y}, client=client)
    with pytest.raises(ff.BackendError, match="client must be"):
        compiled.run(data={"xs": x}, client=3)


def test_dtype_that_would_lose_precision(client):
    compiled = _learning().compile("vmp", backend="dask")
    with pytest.raises(ff.DataError, match=r"ff.Data\('xs'\).*float128.*lose precision.*astype"):
        compiled.run(data={"xs": np.arange(40.0, dtype=np.longdouble)}, client=client)
    x32 = np.float32(np.random.default_rng(2).normal(size=40))
    a = _learning().infer("vmp", 6, data={"xs": x32.astype(float)}, tolerance=None)
    b = compiled.run(6, data={"xs": x32}, client=client, chunks=16, tolerance=None)
    _check_same(_learning(), a, b)


def test_dask_data_is_checked_where_it_lives(client, monkeypatch):
    """A Dask array given as data is checked chunk by chunk on the cluster, never read
    whole here (issue 14: data larger than this process's memory): within
    ``checks.lazy_data()`` (as a run checks its data) its value checks run with
    ``da.Array.__array__`` refusing to be called, and come back the Dask array itself;
    NaN, inf and values outside the support are refused naming the ff.Data and the
    variable, by the NumPy check's own message (the failing chunk alone is read).  A run
    with such data is refused the same way."""
    from factorflow.model import checks
    x = np.random.default_rng(3).normal(size=40)
    model = _learning()
    with ff.Model("counts") as counts:
        rate = ff.Gamma("rate", 1.0, rate=1.0)
        with ff.Plate(ff.Range("n", 40)):
            ff.Poisson("k", rate, observed=ff.Data("ks"))

    def read_whole(self, *args, **kwargs):
        raise AssertionError("a Dask array read whole into the client")
    with monkeypatch.context() as patched, dask.config.set(scheduler=client):
        patched.setattr(da.Array, "__array__", read_whole)
        with checks.lazy_data():
            xs = da.from_array(x, chunks=13)
            assert checks.run_data(model, {"xs": xs})["xs"] is xs
            ks = da.from_array(np.arange(40.0) % 5, chunks=13)
            assert checks.run_data(counts, {"ks": ks})["ks"].name == ks.name
        for value, match in [(np.nan, "NaN or inf"), (np.inf, "NaN or inf")]:
            bad = x.copy()
            bad[30] = value
            with checks.lazy_data(), pytest.raises(
                    ff.DataError, match=rf"ff.Data\('xs'\) as the observed value of 'x' "
                    rf"contains {match}"):
                checks.run_data(model, {"xs": da.from_array(bad, chunks=13)})
        for value in (2.5, -1.0):
            bad = np.arange(40.0) % 5
            bad[17] = value
            with checks.lazy_data(), pytest.raises(
                    ff.DataError, match=rf"ff.Data\('ks'\) as the observed value of 'k': "
                    rf"{value!r} is outside the support \(non-negative integers\)"):
                checks.run_data(counts, {"ks": da.from_array(bad, chunks=13)})
        bad = x.copy()
        bad[5] = np.nan
        with pytest.raises(ff.DataError, match=r"ff.Data\('xs'\).*'x' contains NaN"):
            model.compile("vmp", backend="dask").run(
                data={"xs": da.from_array(bad, chunks=13)}, client=client)


def test_chunks_given_rechunk_a_dask_array(client, monkeypatch):
    """``chunks=`` with data already a Dask array: the array is rechunked along the plate
    as asked (it was ignored), and the run equals NumPy's; without ``chunks=`` its own
    chunks are kept."""
    from factorflow.runtime.backends import dask_backend
    seen = []
    real = dask_backend.dask_fusion.register
    monkeypatch.setattr(dask_backend.dask_fusion, "register",
                        lambda v: (seen.append(v.chunks[0]), real(v))[1])
    x = np.random.default_rng(4).normal(size=40)
    run = {"iterations": 4, "tolerance": None}
    a = _learning().infer("vmp", data={"xs": x}, **run)
    compiled = _learning().compile("vmp", backend="dask")
    b = compiled.run(data={"xs": da.from_array(x, chunks=13)}, client=client, chunks=10,
                     **run)
    assert seen[0] == (10, 10, 10, 10)
    _check_same(_learning(), a, b)
    seen.clear()
    compiled.run(data={"xs": da.from_array(x, chunks=13)}, client=client, **run)
    assert seen[0] == (13, 13, 13, 1)


def test_checkpoints_and_save_module_are_refused():
    compiled = _learning().compile("vmp", backend="dask")
    with pytest.raises(ff.BackendError, match="checkpoint"):
        compiled.run(data={"xs": np.zeros(40)}, checkpoint="run.ckpt")
    with pytest.raises(ff.BackendError, match="save_module"):
        compiled.save_module("x.py")


def test_errors_still_pickle_after_distributed_is_imported(client):
    """``import distributed`` installs tblib's pickling of every exception (with its
    traceback and context); a ParseError keeps no context (lark's exception, whose
    parser state does not pickle), so it still pickles."""
    import pickle
    with pytest.raises(ff.ParseError) as info:
        ff.parse("a ~ Gaussian(0, 1)\ny[i j] ~ Gaussian(a, 1)")
    assert pickle.loads(pickle.dumps(info.value)).line == 2


# ----- every example: the same results, or refused by name ----------------------------
from test_jax import EXAMPLES  # noqa: E402  (the examples that run EP or VMP)

#: the examples whose first EP/VMP run Dask cannot run, and the refusal's reason (every
#: other example must agree with NumPy; one of these that agrees must leave the set)
REFUSED = {
    # the vector Gaussian operators write in place (``np.subtract(..., out=)``, ``&=``)
    # over per-datum vector Gaussians: Dask arrays are immutable
    "bayesian_pca": "out parameter is not fully supported",
    "state_space_2d": "out parameter is not fully supported",
}


@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLES)
@pytest.mark.filterwarnings("error:The .* is not implemented by Dask array:FutureWarning")
def test_every_example_agrees_or_is_refused_by_name(example, client):
    """Each example's first EP/VMP run (its ``main()`` as written, run once a session:
    ``tests.conftest.example_run``, shared with ``tests/test_examples.py``, which checks
    the rest) is run again on Dask (2 chunks where a plate allows): it agrees with NumPy
    to 1e-10, or, for the examples of ``REFUSED`` only, the backend refuses it with
    ``ff.BackendError`` naming that reason and the backend that runs it.  Any other
    refusal or exception is a fault of factorflow's own, and fails (lda, logistic and
    Poisson regression were refused by faults of factorflow's, counted as Dask's limits).
    So does a NumPy function Dask lacks: Dask warns and computes its arguments whole into
    this process (``np.take_along_axis`` read LDA's per-datum arrays so)."""
    from factorflow.runtime.compiled import CompiledModel, compile_model
    from tests.conftest import example_run
    first = next(((compiled, args, kwargs, result)
                  for compiled, args, kwargs, result in example_run(example).runs
                  if type(compiled) is CompiledModel and compiled.algorithm in ("ep", "vmp")),
                 None)
    assert first is not None, f"{example}.main() ran no EP or VMP inference"
    compiled, args, kwargs, a = first
    twin = compile_model(compiled.model, compiled.algorithm, compiled.user_initialized,
                         enter_whole_arrays=compiled.enter_whole_arrays, backend="dask")
    if example in REFUSED:
        with pytest.raises(ff.BackendError, match="backend='numpy'") as info:
            twin.run(*args, client=client, **kwargs)
        assert REFUSED[example] in str(info.value), str(info.value)
        return
    _check_same(compiled.model, a, twin.run(*args, client=client, **kwargs))


# ----- SVI with the data on the cluster ------------------------------------------------
def test_svi_on_dask_takes_the_same_steps_as_numpy(client):
    """SVI with ``backend="dask"``: the data stays on the cluster (NumPy data sent once
    in 3 chunks, or a Dask array as given) and each step gathers its minibatch; for the
    same rng the steps are the NumPy backend's, to 1e-10 (they are the same sweeps on the
    same minibatches)."""
    x = np.random.default_rng(4).normal(2.0, 1.5, 90)
    svi = {"minibatch": 20, "steps": 12, "learning_rate": (1.0, 0.7), "rng": 5}
    a = _learning(90).infer("svi", **svi, data={"xs": x})
    b = _learning(90).infer("svi", **svi, data={"xs": x}, backend="dask", client=client,
                            chunks=30)
    c = _learning(90).infer("svi", **svi, data={"xs": da.from_array(x, chunks=25)},
                            backend="dask", client=client)
    for r in (b, c):
        assert r.iterations == 12 and r.algorithm == "svi"
        for name in ("mean", "prec"):
            for e, f in zip(a[name].eta, r[name].eta, strict=True):
                np.testing.assert_allclose(f, e, rtol=1e-10, atol=1e-12)


def test_svi_on_dask_mixture_gathers_only_minibatches(client, monkeypatch):
    """Issue 14's mixture under SVI on Dask (the points a Dask array of 4 chunks): the
    same global posteriors as NumPy's SVI (1e-10), and every round trip brings back one
    minibatch of the points, never more."""
    import mixture_reference as mr

    from factorflow.runtime.backends import dask_backend
    x = mr.data(3, 400)
    with ff.Model("mixture_1d") as model:
        weights = ff.Dirichlet("weights", np.ones(3))
        with ff.Plate(ff.Range("k", 3)):
            means = ff.Gaussian("means", 0.0, variance=100.0)
            precs = ff.Gamma("precs", 1.0, rate=1.0)
        with ff.Plate(ff.Range("n", 400)):
            z = ff.Discrete("z", weights)
            with ff.Switch(z):
                ff.Gaussian("x", means[z], precision=precs[z], observed=ff.Data("xs"))
    init = mr.factorflow_init(x, 3)
    svi = {"minibatch": 50, "steps": 6, "rng": 2, "init": init}
    a = model.infer("svi", **svi, data={"xs": x})
    seen = []
    real = dask_backend.cluster_data

    def spy(*args):
        values, gather = real(*args)

        def counted(*arrays):
            got = gather(*arrays)
            seen.extend(np.size(g) for g in got)
            return got
        return values, counted
    monkeypatch.setattr(dask_backend, "cluster_data", spy)
    b = model.infer("svi", **svi, data={"xs": da.from_array(x, chunks=100)},
                    backend="dask", client=client)
    assert seen == [50] * 6
    for name in ("weights", "means", "precs"):
        for e, f in zip(a[name].eta, b[name].eta, strict=True):
            np.testing.assert_allclose(f, e, rtol=1e-10, atol=1e-12)


def test_a_per_datum_message_that_reads_the_last_sweep_is_persisted():
    """``_cut_chains`` leaves a per-datum message lazy unless its graph reaches two
    sweeps back (it reads a message the last sweep left lazy, which read one from the
    sweep before): each sweep would then add to the next one's graph, so that one is
    persisted; the others stay lazy."""
    from types import SimpleNamespace

    from factorflow.runtime.backends.dask_backend import _cut_chains
    data = da.from_array(np.arange(12.0), chunks=4)
    first = SimpleNamespace(eta=(data * 2.0,))
    small = SimpleNamespace(eta=(np.ones(3),))
    lazy = _cut_chains([first, small], {})
    assert lazy == {first.eta[0].name: 0}
    second = SimpleNamespace(eta=(first.eta[0] - 1.0,))  # reads the last sweep's message
    fresh = SimpleNamespace(eta=(data + 1.0,))
    lazy = _cut_chains([second, fresh, small], lazy)
    assert lazy == {second.eta[0].name: 1, fresh.eta[0].name: 0}
    third = SimpleNamespace(eta=(second.eta[0] * 3.0,))  # two sweeps back: persisted
    with dask.config.set(scheduler="sync"):
        lazy = _cut_chains([third, fresh, small], lazy)
    assert lazy == {fresh.eta[0].name: 0}
    assert len(third.eta[0].dask) == 3  # its 3 stored chunks
    np.testing.assert_array_equal(third.eta[0].compute(), (np.arange(12.0) * 2 - 1) * 3)
    assert len(fresh.eta[0].dask) > 3  # lazy: the data's tasks and its own


def test_gather_chunks_copies_each_chunk_in(client):
    """The per-datum posteriors come back chunk by chunk (``gather_chunks``), through
    the run's client whether or not it is the process's default one."""
    from factorflow.runtime.backends.dask_backend import gather_chunks
    x = np.arange(40.0).reshape(20, 2)
    a = da.from_array(x, chunks=(6, 1))  # (chunked along the second axis too: rechunked)
    with dask.config.set(scheduler=client):
        np.testing.assert_array_equal(gather_chunks(a + 1.0, client), x + 1.0)
    np.testing.assert_array_equal(gather_chunks(a * 2.0), x * 2.0)  # no client: in turn


# ----- one task per chunk (dask_fusion) ------------------------------------------------
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def _plate_run(lengths: tuple[int, ...]):
    """The fusion's setting during a run: the plate keys of an (N, K) array in chunks of
    ``lengths`` registered, ``dask_fusion.optimize`` as Dask's array optimisation."""
    from factorflow.runtime.backends import dask_fusion
    return dask_fusion, dask.config.set(scheduler="sync",
                                        array_optimize=dask_fusion.optimize)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lengths=st.lists(st.integers(1, 7), min_size=1, max_size=6).map(tuple),
       k=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_fused_chunks_compute_what_numpy_does(lengths, k, seed):
    """A pass as the backend makes them (per-datum work on the data and K values, a
    reduction over the plate, a per-datum result, a reduction over K): with the plate
    keys registered the graph has one task per chunk (those reading one chunk fused),
    and the results equal NumPy's to 1e-12."""
    rng = np.random.default_rng(seed)
    n = sum(lengths)
    x, w = rng.normal(size=(n, 1)), rng.normal(size=k)
    fusion, config = _plate_run(lengths)
    data = da.from_array(x, chunks=(lengths, 1))
    try:
        fusion.register(data)
        with config:
            logits = data * w - 0.5 * data**2            # (N, K): per datum
            q = da.exp(logits - logits.max(axis=1, keepdims=True))
            q = q / q.sum(axis=1, keepdims=True)
            stats = np.stack([da.ones_like(data[:, 0]), data[:, 0], data[:, 0] ** 2])
            sums = stats @ q                              # (3, K): reduced over the plate
            total = (q * logits).sum()
            graph = sums.__dask_optimize__(dict(sums.__dask_graph__()),
                                           list(dask.core.flatten(sums.__dask_keys__())))
            got = dask.compute(sums, q, total)
    finally:
        fusion.PLATE_KEYS.clear()
    passes = [key for key in graph if isinstance(key, tuple) and key[0].startswith("chunkpass")]
    assert sorted(key[1] for key in passes) == list(range(len(lengths))) or len(lengths) == 1
    logits = x * w - 0.5 * x**2
    q = np.exp(logits - logits.max(axis=1, keepdims=True))
    q /= q.sum(axis=1, keepdims=True)
    want = (np.stack([np.ones(n), x[:, 0], x[:, 0] ** 2]) @ q, q, (q * logits).sum())
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_a_numpy_array_over_the_plate_enters_the_graph_by_chunks():
    """During a run a NumPy array over the plate meeting the data (a stride-0 broadcast
    of one value, or per-datum values, through ``np.stack`` as through a ufunc) enters
    the graph as its distinct values chunk by chunk: no task carries more than a chunk
    (Dask's own conversion would put the whole (N,) array, pickled at full size, into one
    task of every computation)."""
    import pickle

    from factorflow.runtime.backends import dask_backend
    n, lengths = 4000, (1000,) * 4
    x = da.from_array(np.arange(float(n)), chunks=lengths)
    per_datum = np.linspace(0.0, 1.0, n)
    dask_backend._PLATE[:] = [(n, lengths)]
    try:
        with dask_backend._repeats_stay_small():
            stacked = np.stack([np.broadcast_to(1.0, (n,)), x, per_datum])
            plus = np.broadcast_to(np.arange(3.0), (n, 3)) + x[:, None]
    finally:
        del dask_backend._PLATE[:]
        dask_backend.dask_fusion.PLATE_KEYS.clear()
    for arr in (stacked, plus):
        biggest = max(len(pickle.dumps(task)) for task in dict(arr.__dask_graph__()).values())
        assert biggest < 1000 * 8 + 2000, biggest
    with dask.config.set(scheduler="sync"):
        np.testing.assert_array_equal(stacked.compute(),
                                      np.stack([np.ones(n), np.arange(float(n)), per_datum]))
        np.testing.assert_array_equal(plus.compute(), np.arange(3.0) + np.arange(float(n))[:, None])


def test_the_kernels_stack_dask_arrays_along_one_chunk():
    """``np.stack`` in the Dask copies of the kernels: the new axis one chunk (so that
    a product contracting it is one product per chunk), the values NumPy's."""
    from factorflow.runtime.backends.dask_namespace import namespace
    shim = namespace()["factorflow.factors.gaussian"].np
    x = da.from_array(np.arange(12.0), chunks=4)
    stacked = shim.stack([x, x * x, shim.ones_like(x)], axis=1)
    assert stacked.chunks == ((4, 4, 4), (3,))
    with dask.config.set(scheduler="sync"):
        np.testing.assert_array_equal(stacked.compute(), np.stack(
            [np.arange(12.0), np.arange(12.0) ** 2, np.ones(12)], axis=1))
    assert type(shim.stack([np.ones(2), np.zeros(2)])) is np.ndarray


def _refuse(*args, **kwargs):
    raise AssertionError("computed while the graph was built")


def test_the_kernels_normalise_and_exponentiate_dask_arrays_block_by_block():
    """``exp_flushed`` and ``log_normalize`` of a chunked Dask array in the Dask copies:
    NumPy's own functions on each block, so that nothing is computed while the graph is
    built (NumPy's test for its fast path, a Python bool of the whole array, was a pass
    over the data of its own) and the values are NumPy's exactly, extremes included
    (−inf, NaN, below the flush cut, a row of −inf)."""
    from factorflow.distributions import base as numpy_base
    from factorflow.runtime.backends.dask_namespace import namespace
    base = namespace()["factorflow.distributions.base"]
    x = np.random.default_rng(0).normal(0.0, 300.0, (40, 5))
    x[3, 1], x[7], x[9, 2], x[11] = -np.inf, np.nan, -800.0, -np.inf
    chunked = da.from_array(x, chunks=(10, 5))
    with dask.config.set(scheduler=_refuse):
        flushed, normalised = base.exp_flushed(chunked), base.log_normalize(chunked)
    assert flushed.npartitions == normalised.npartitions == 4
    assert len(dask.optimize(flushed)[0].dask) <= 2 * 4  # (the blocks and one step each)
    with dask.config.set(scheduler="sync"), np.errstate(all="ignore"):
        np.testing.assert_array_equal(flushed.compute(), numpy_base.exp_flushed(x.copy()))
        np.testing.assert_array_equal(normalised.compute(), numpy_base.log_normalize(x))


def test_the_kernels_numpy_runs_chunk_by_chunk_equal_numpy():
    """The kernels Dask arrays could not run as written, in the Dask copies: NumPy's own
    code chunk by chunk, nothing computed while the graph is built, the values NumPy's.
    ``tilted_moments`` (boolean indexing, writes in place: EP's logistic and Poisson
    links) over elements on both of its rules (wide and narrow cavities), to 1e-13 (the
    elements a NumPy block holds change the vectorised sums' rounding: 3e-15 seen);
    ``_scatter_counts`` (a weighted ``bincount``) over the chunked axis (summed) and
    along it (kept), to 1e-12; ``np.take_along_axis`` (Dask has none, and computed its
    arguments whole), exactly."""
    from factorflow.factors import discrete as numpy_discrete
    from factorflow.factors import quadrature as numpy_quadrature
    from factorflow.runtime.backends.dask_namespace import namespace
    ns = namespace()
    quadrature, discrete = ns["factorflow.factors.quadrature"], ns["factorflow.factors.discrete"]
    rng = np.random.default_rng(5)
    m, v = rng.normal(0.0, 4.0, 30), np.exp(rng.normal(1.0, 2.0, 30))  # (some v > 4: wide)
    k = rng.integers(0, 4, 30).astype(float)
    x, w = rng.integers(0, 4, (30, 3)), rng.random((30, 3))
    table, picks = rng.normal(size=(30, 5)), rng.integers(0, 5, (30, 1))
    with dask.config.set(scheduler=_refuse):
        tilted = [quadrature.tilted_moments(da.from_array(m, chunks=10), v, step, tilt)
                  for step, tilt in ((quadrature.LOGISTIC, 0.0), (quadrature.EXP_NEG_EXP, k))]
        summed = discrete._scatter_counts(da.from_array(x, chunks=(10, 3)), w, 4,
                                          ((30, 3), (0, 1)))
        kept = discrete._scatter_counts(x, da.from_array(w, chunks=(7, 3)), 4, ((30, 3), (1,)))
        taken = ns["factorflow.factors.gaussian"].np.take_along_axis(
            da.from_array(table, chunks=(10, 5)), picks, -1)
    assert kept.chunks[0] == (7, 7, 7, 7, 2) and taken.chunks[0] == (10, 10, 10)
    with dask.config.set(scheduler="sync"):
        for got, (step, tilt) in zip(tilted, (("LOGISTIC", 0.0), ("EXP_NEG_EXP", k)),
                                     strict=True):
            want = numpy_quadrature.tilted_moments(m, v, getattr(numpy_quadrature, step), tilt)
            for a, b in zip(dask.compute(*got), want, strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(summed.compute(), numpy_discrete._scatter_counts(
            x, w, 4, ((30, 3), (0, 1))), rtol=1e-12)
        np.testing.assert_allclose(kept.compute(), numpy_discrete._scatter_counts(
            x, w, 4, ((30, 3), (1,))), rtol=1e-12)
        np.testing.assert_array_equal(taken.compute(), np.take_along_axis(table, picks, -1))


def test_column_sums_of_dask_probabilities_bring_no_array_over_the_plate():
    """Σ_n q_nk of (N, K) Dask probabilities (a Dirichlet's message from a per-datum
    Discrete) in the Dask copy: Dask's sum over the plate axis, whose graph holds nothing
    larger than a chunk (NumPy's 1ᵀ q put an (N,) array of ones into the graph, sent
    whole with the computation); the sums NumPy's to 1e-12."""
    import pickle

    from factorflow.runtime.backends.dask_namespace import namespace
    discrete = namespace()["factorflow.factors.discrete"]
    q = np.random.default_rng(2).dirichlet(np.ones(3), size=400)
    sums = discrete._column_sums(da.from_array(q, chunks=(100, 3)), ((400,), (0,)))
    biggest = max(len(pickle.dumps(task)) for task in dict(sums.__dask_graph__()).values())
    assert biggest < 100 * 3 * 8 + 500, biggest  # (a chunk of q; the ones: 400 · 8 B)
    with dask.config.set(scheduler="sync"):
        np.testing.assert_allclose(sums.compute(), q.sum(axis=0), rtol=1e-12)


def test_a_pass_of_partial_sums_is_one_task_per_chunk():
    """A pass whose result is reduced over the plate (the partial sums of each chunk read
    by a tree reduction): with the plate keys registered, one task per chunk in the
    scheduler's graph, each chunk's partial sums taken from its task's result inside the
    reduction's steps (no task per partial sum); the sums NumPy's to 1e-12."""
    x = np.random.default_rng(1).normal(size=(60, 1))
    fusion, config = _plate_run((15,) * 4)
    data = da.from_array(x, chunks=((15,) * 4, 1))
    try:
        fusion.register(data)
        with config:
            q = da.exp(data * np.arange(3.0))
            sums = (q * data).sum(axis=0) + q.max()
            graph = sums.__dask_optimize__(dict(sums.__dask_graph__()),
                                           list(dask.core.flatten(sums.__dask_keys__())))
            got = sums.compute()
    finally:
        fusion.PLATE_KEYS.clear()
    import operator
    passes = [key[1] for key in graph if isinstance(key, tuple) and key[0].startswith("chunkpass")]
    assert sorted(passes) == [0, 1, 2, 3]
    alone = [key for key, node in graph.items() if getattr(node, "func", None) is operator.getitem]
    assert alone == [], alone
    want = np.exp(x * np.arange(3.0))
    np.testing.assert_allclose(got, (want * x).sum(axis=0) + want.max(), rtol=1e-12)


@pytest.mark.slow
def test_mixture_passes_are_one_task_per_chunk(client, monkeypatch):
    """On the mixture in 4 chunks every computation that passes over the data is, after
    the fusion, one task per chunk (the rest: K-sized steps; the per-datum posterior
    gathered a chunk at a time), and the chunk size is by default 2**18 // K rows (one
    chunk here)."""
    import mixture_reference as mr

    from factorflow.runtime.backends import dask_fusion
    x = mr.data(3, 600)
    model, init = mr.model(x, 3), mr.factorflow_init(x, 3)
    real, passes = dask_fusion.fuse_chunks, []

    def spy(dsk, outputs, plate_keys):
        out = real(dsk, outputs, plate_keys)
        passes.append(sorted(k[1] for k in out if isinstance(k, tuple)
                             and str(k[0]).startswith("chunkpass")))
        return out
    monkeypatch.setattr(dask_fusion, "fuse_chunks", spy)
    compiled = model.compile("vmp", init=["means"], backend="dask")
    compiled.run(3, init=init, client=client, chunks=150, tolerance=None)
    # ([]: a computation with nothing to fuse, such as one sending the data)
    assert all(p in ([0, 1, 2, 3], [0], [1], [2], [3], []) for p in passes), passes
    # two passes a sweep: the data sums (q(precs) and q(means) read the same ones) and
    # the bound (with the per-datum checks and the next q(weights)'s column sums), and
    # two more: the first q(weights) (from the initialisation) and q(z) gathered
    assert sum(p == [0, 1, 2, 3] for p in passes) == 2 * 3 + 2, passes
    # without the bound after each sweep: one pass a sweep (the data sums: the checks and
    # the column sums ride along), the first q(weights), the final bound, q(z) gathered
    del passes[:]
    traceless = compiled.run(3, init=init, client=client, chunks=150, tolerance=None,
                             trace=False)
    assert sum(p == [0, 1, 2, 3] for p in passes) == 3 + 3, passes
    numpy = model.compile("vmp", init=["means"]).run(3, init=init, tolerance=None,
                                                     trace=False)
    _check_same(model, numpy, traceless)
    assert compiled.row_width() == 3
    compiled.run(1, init=init, client=client, tolerance=None)
    assert compiled._chunks == 2**18 // 3, compiled._chunks


# ----- the convergence test on the workers (dask_monitor) --------------------------------
@pytest.mark.slow
def test_convergence_test_reduces_on_the_workers(client, monkeypatch):
    """With a tolerance (the default run) the monitor's changes of the per-datum q(z) are
    reduced on the workers: no per-datum array comes to this process before the end of
    the run (q(z) gathered once, chunk by chunk), and the monitor's numbers are NumPy's
    sweep by sweep (the change to 1e-10, the variable that moved most, the turns), as
    are the sweeps, the verdict, the posteriors and the trace."""
    import mixture_reference as mr

    from factorflow.runtime import compiled as compiled_module
    x = mr.data(3, 300)
    model, init = mr.model(x, 3), mr.factorflow_init(x, 3)
    seen: dict[str, list] = {"numpy": [], "dask": []}
    real_call = compiled_module._Monitor.__call__
    backend = ["numpy"]

    def spy(self, *args, **kwargs):
        stop = real_call(self, *args, **kwargs)
        seen[backend[0]].append((self.change, self.moved,
                                 {k: list(v) for k, v in self.turns.items()}))
        return stop
    monkeypatch.setattr(compiled_module._Monitor, "__call__", spy)
    gathered = []
    real_array = da.Array.__array__

    def array(self, *args, **kwargs):
        gathered.append(self.shape)
        return real_array(self, *args, **kwargs)
    monkeypatch.setattr(da.Array, "__array__", array)
    a = model.compile("vmp", init=["means"]).run(40, init=init, tolerance=1e-4)
    backend[0] = "dask"
    b = model.compile("vmp", init=["means"], backend="dask").run(
        40, init=init, client=client, chunks=75, tolerance=1e-4)
    _check_same(model, a, b)
    assert 3 < a.iterations < 40 and a.converged
    assert [s for s in gathered if s and s[0] == 300] == [], gathered
    assert len(seen["dask"]) == len(seen["numpy"]) == a.iterations
    for (c1, m1, t1), (c2, m2, t2) in zip(seen["numpy"], seen["dask"], strict=True):
        assert (c1 == c2 == np.inf) or abs(c1 - c2) <= 1e-10 * (1 + abs(c1)), (c1, c2)
        assert t1 == t2
        assert m1 == m2 or c1 == np.inf, (m1, m2)


def _block(block_info=None, source=None):
    """A block of ``source`` read by its place (as a lazily read file's chunk is)."""
    lo, hi = block_info[None]["array-location"][0]
    return source[lo:hi]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunks=st.integers(2, 6), rows=st.integers(1, 9), rest=st.integers(0, 8),
       seed=st.integers(0, 2**16))
def test_chunks_share_one_program(chunks, rows, rest, seed):
    """Chunks doing the same work on their own blocks (read by place, as from a file, or
    a NumPy array's pieces) share one program in the fused graph, a data node sent to
    each worker once: a chunk's task carries its blocks and the program's key, not its
    tasks.  Equal chunks give one program, a shorter last chunk a second, and a chunk
    left alone by a step of a tree reduction (combined with no other: its step joins its
    task) a third; the values are NumPy's to 1e-12."""
    import pickle

    rest = min(rest, rows - 1)
    lengths = (rows,) * chunks + ((rest,) if rest else ())
    rng = np.random.default_rng(seed)
    x = rng.normal(size=sum(lengths))
    w = rng.normal(size=(1, 3))
    fusion, config = _plate_run(lengths)
    read = da.map_blocks(_block, source=x, chunks=(lengths,), dtype=float,
                         meta=np.empty(0))
    pieces = da.from_array(x * 2.0, chunks=(lengths,))
    try:
        fusion.register(read)
        fusion.register(pieces)
        with config:
            q = da.exp(read[:, None] * w - pieces[:, None] ** 2 / 8.0)
            sums = (q / q.sum(axis=1, keepdims=True)).sum(axis=0) + (q * read[:, None]).max()
            graph = sums.__dask_optimize__(sums.__dask_graph__(),
                                           list(dask.core.flatten(sums.__dask_keys__())))
            got = sums.compute()
    finally:
        fusion.PLATE_KEYS.clear()
    programs = [k for k in graph if isinstance(k, tuple) and str(k[0]).startswith("chunkprogram")]
    passes = [k for k in graph if isinstance(k, tuple) and str(k[0]).startswith("chunkpass")]
    assert len(passes) == len(lengths)
    assert len(programs) <= 2 + bool(rest), programs
    if len(lengths) >= 5:  # (with 3 or 4, each may be its own)
        assert len(programs) < len(lengths)
    assert max(len(pickle.dumps(graph[k])) for k in passes) < 1500
    q = np.exp(x[:, None] * w - (2.0 * x[:, None]) ** 2 / 8.0)
    want = (q / q.sum(axis=1, keepdims=True)).sum(axis=0) + (q * x[:, None]).max()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


# ----- a scheduler in another process ----------------------------------------------------
@pytest.fixture(scope="module")
def remote_address():
    """The address of a ``LocalCluster`` (2 worker processes) whose scheduler runs in a
    process of its own, as a production scheduler does: it sees none of this process's
    Dask config or state; closed at the end of the module."""
    import os
    import subprocess

    from factorflow.runtime.backends import dask_backend
    code = ("import sys, distributed\n"
            "cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1,"
            " processes=True, dashboard_address=':0')\n"
            "print(cluster.scheduler_address, flush=True)\n"
            "sys.stdin.read()\n"
            "cluster.close()\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)
    address = proc.stdout.readline().strip()
    assert address.startswith("tcp://"), address
    yield address
    held = dask_backend._CLIENTS.pop(address, None)
    if held is not None:
        held.close()
    proc.stdin.close()
    proc.wait(timeout=60)


@pytest.mark.slow
def test_a_remote_scheduler_runs_the_fused_passes(client, remote_address):
    """``client`` given as the address of a scheduler in another process: the run's
    graphs are fused here before they are sent (that scheduler has neither the run's
    Dask config nor its plate keys), so its fused passes are the in-process scheduler's,
    task for task: each pass over the data one task per chunk; the posteriors equal
    NumPy's to 1e-10."""
    import mixture_reference as mr
    from distributed import get_task_stream

    from factorflow.runtime.backends.dask_backend import resolve_client
    # data of this test alone: the shared cluster may still hold the chunks of data another
    # test sent (Dask names them by content), and would then run fewer tasks than the fresh one
    x = mr.data(3, 600, seed=7)
    model, init = mr.model(x, 3), mr.factorflow_init(x, 3)
    run = {"init": init, "iterations": 3, "tolerance": None}
    a = model.compile("vmp", init=["means"]).run(**run)
    streams = []
    for where in (client, remote_address):
        with get_task_stream(resolve_client(where)) as stream:
            b = model.compile("vmp", init=["means"], backend="dask").run(
                **run, client=where, chunks=150)
        _check_same(model, a, b)
        streams.append(sorted(str(t["key"][0] if isinstance(t["key"], tuple) else t["key"])
                              .split("-")[0] for t in stream.data))
    # the fused passes, task for task; not the tasks Dask names by their input's content
    # (data chunks, their reductions, an elementwise `~` of a mask): the shared cluster may
    # still hold results computed earlier from the same inputs and run fewer of those than
    # the fresh remote one (CI saw 'array', 'sum' and 'invert' differ, one a time)
    local, remote = ([name for name in stream if name == "chunkpass"] for stream in streams)
    assert remote == local
    assert remote.count("chunkpass") == 4 * (2 * 3 + 2), remote  # 4 chunks a pass


# ----- gather=: per-datum posteriors left on the cluster --------------------------------
@pytest.mark.slow
def test_posteriors_not_gathered_stay_lazy_and_fused(client, monkeypatch):
    """``gather=False``: no per-datum posterior is brought to this process (the run
    never calls ``gather_chunks``); q(z)'s natural parameters are a lazy Dask array of
    the run's 4 chunks whose graph is the fused one (one task per chunk), and computed on
    the cluster after the run (the data it reads still held there) they equal NumPy's to
    1e-10, as does its ``probs`` read under the client; the K-sized posteriors are NumPy.
    ``gather=["z"]`` gathers q(z); a name that is no variable is refused by name."""
    import mixture_reference as mr

    from factorflow.runtime.backends import dask_backend
    x = mr.data(3, 600)
    model, init = mr.model(x, 3), mr.factorflow_init(x, 3)
    run = {"init": init, "iterations": 4, "tolerance": None}
    a = model.compile("vmp", init=["means"]).run(**run)
    gathered = []
    real = dask_backend.gather_chunks
    monkeypatch.setattr(dask_backend, "gather_chunks",
                        lambda arr, *rest: gathered.append(arr.shape) or real(arr, *rest))
    compiled = model.compile("vmp", init=["means"], backend="dask")
    b = compiled.run(**run, client=client, chunks=150, gather=False)
    assert gathered == []
    z = b["z"].eta[0]
    assert isinstance(z, da.Array) and z.npartitions == 4
    assert sum(str(k[0]).startswith("chunkpass") for k in z.dask if isinstance(k, tuple)) == 4
    for name in ("weights", "means", "precs"):
        assert all(type(e) is np.ndarray for e in b[name].eta)
        for e, f in zip(a[name].eta, b[name].eta, strict=True):
            np.testing.assert_allclose(f, e, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(client.compute(z).result(), a["z"].eta[0], rtol=1e-10,
                               atol=1e-12)
    with dask.config.set(scheduler=client):
        np.testing.assert_allclose(b["z"].probs, a["z"].probs, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(b.log_evidence, a.log_evidence, rtol=1e-10)
    c = model.infer("vmp", **run, backend="dask", client=client, chunks=150, gather=["z"])
    assert gathered == [(600, 3)]
    _check_same(model, a, c)
    with pytest.raises(ff.ModelError, match="gather names 'q', which is no variable"):
        compiled.run(**run, client=client, chunks=150, gather=["q"])


# ----- a worker's memory across sweeps (the backend's own cluster) -----------------------
def _traced(dask_worker, start: bool = False, stop: bool = False) -> tuple[int, int]:
    """Run in each worker: the bytes of its live Python allocations after a collection
    (``tracemalloc``, started with ``start``, stopped after the reading with ``stop``)
    and the number of modules it has imported."""
    import gc
    import sys
    import tracemalloc
    if start:
        tracemalloc.start(1)
    gc.collect()
    live = tracemalloc.get_traced_memory()[0]
    if stop:
        tracemalloc.stop()
    return live, len(sys.modules)


def _typical_growth(readings: list[tuple[int, int]]) -> float:
    """The median of what a worker's live memory grew from one sweep to the next over
    ``readings`` (``_traced``'s, one a sweep), MB: robust to a one-time cost (a module
    imported, a buffer received once and kept) and to the drop where a cache is
    emptied, where the total over the sweeps is not."""
    import statistics
    steps = zip(readings, readings[1:], strict=False)
    return statistics.median(b[0] - a[0] for a, b in steps) / 1e6


def _diagnostics(dask_worker) -> dict:
    """Run in each worker: its configuration and the lengths of what Dask keeps per task
    or per second."""
    from dask.utils import key_split
    return {"profiler": dask.config.get("distributed.worker.profile.enabled"),
            "plugins": sorted(dask_worker.plugins),
            "stimuli": len(dask_worker.state.stimulus_log),
            "transitions": len(dask_worker.state.log),
            "messages": len(dask_worker.batched_stream.recent_message_log),
            "profiles": len(dask_worker.profile_history) + len(dask_worker.profile_keys_history),
            "keys": key_split.cache_info().currsize}


@pytest.mark.slow
def test_own_cluster_workers_keep_no_more_after_each_sweep(client):
    """On the backend's own cluster a worker's live memory stops growing once its logs
    are full: after 10 sweeps of the mixture in 20 chunks (about 40 chunk tasks a
    sweep), by a median of less than 0.15 MB a sweep from the third on (60 KB seen,
    and a drop where ``key_split``'s cache is emptied; with Dask's own configuration
    0.25 MB, 0.16-0.42, 3 MB by the tenth sweep: the profiler's history, 1,000-entry
    logs, ``key_split``'s cache); its logs hold at most 100 entries, the profiler keeps
    nothing, ``key_split``'s cache is emptied past 1,000 keys; and after the run the
    workers store nothing and the scheduler holds no task of the run (no key left behind;
    keys held by other tests' futures on the shared cluster are not the run's)."""
    import time

    import mixture_reference as mr

    from factorflow.runtime.backends import dask_backend
    from factorflow.runtime.backends.dask_workers import BoundedKeyCache
    assert client is dask_backend.default_client()
    x = mr.data(3, 1000)
    model, init = mr.model(x, 3), mr.factorflow_init(x, 3)
    compiled = model.compile("vmp", init=["means"], backend="dask")
    run = {"init": init, "client": client, "chunks": 50, "tolerance": None}
    compiled.run(2, **run)  # (the workers import what the run's tasks use)
    before = set(client.cluster.scheduler.tasks)  # other tests' futures may still hold keys
    client.run(_traced, start=True)
    live = []
    try:
        compiled.run(10, **run, on_iteration=lambda i, posteriors: live.append(
            client.run(_traced)))
        seen = client.run(_diagnostics)
    finally:
        client.run(_traced, stop=True)
    for worker, info in seen.items():
        readings = [sweep[worker] for sweep in live[2:]]
        assert _typical_growth(readings) < 0.15, (worker, readings)
        assert info["profiler"] is False and BoundedKeyCache.name in info["plugins"], info
        assert max(info["stimuli"], info["transitions"], info["messages"]) <= 100, info
        assert info["profiles"] == 0, info
        assert info["keys"] <= 1000 + 500, info  # (trimmed each second)
    assert _steady_store(client, lambda held: held == []) == []
    deadline = time.monotonic() + 30
    while set(client.cluster.scheduler.tasks) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    left = set(client.cluster.scheduler.tasks) - before
    assert not left, sorted(map(str, left))[:5]


def test_key_cache_is_emptied_past_its_limit(client):
    """``BoundedKeyCache`` on the own cluster's workers: 3,000 keys split on a worker
    (6,000 entries: a tuple key's name is split too) are gone within seconds; the
    plugin's check leaves a cache at its limit as it is."""
    import time

    from factorflow.runtime.backends.dask_workers import BoundedKeyCache

    def fill(dask_worker) -> int:
        from dask.utils import key_split
        for i in range(3000):
            key_split((f"filler-{i}", i))
        return key_split.cache_info().currsize

    def size(dask_worker) -> int:
        from dask.utils import key_split
        return key_split.cache_info().currsize
    assert all(n > 3000 for n in client.run(fill).values())
    deadline = time.monotonic() + 30
    while max(client.run(size).values()) > 1000 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert max(client.run(size).values()) <= 1000
    from dask.utils import key_split  # (here: the check itself, on this process's cache)
    key_split.cache_clear()
    for i in range(10):
        key_split(f"kept-{i}")
    BoundedKeyCache(limit=10).trim()
    assert key_split.cache_info().currsize == 10
    BoundedKeyCache(limit=9).trim()
    assert key_split.cache_info().currsize == 0
