"""SVI on the JAX backend (``model.infer("svi", ..., backend="jax")``) against NumPy's.

The JAX steps are the NumPy backend's steps on the same minibatches (the same ``rng``),
so the two must agree to rounding: 1e-10 relative on every natural parameter."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import factorflow as ff
from factorflow.runtime.svi import minibatches

pytest.importorskip("jax")

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
import mixture_reference as mr  # noqa: E402

from tests.runtime.test_svi import _coordinate_ascent, _normal_gamma  # noqa: E402

TOL = 1e-10
GLOBALS = {"normal_gamma": ("mean", "prec"), "mixture_1d": ("weights", "means", "precs")}


def _same(a: ff.Result, b: ff.Result, names: tuple[str, ...]) -> None:
    """Same global posteriors (natural parameters, 1e-10 relative), both SVI results."""
    assert set(a.posteriors) == set(b.posteriors) == set(names)
    assert a.iterations == b.iterations and b.algorithm == "svi" and not b.converged
    for name in names:
        assert type(a[name]) is type(b[name])
        for x, y in zip(a[name].eta, b[name].eta, strict=True):
            assert np.asarray(y).dtype == np.float64
            np.testing.assert_allclose(y, x, rtol=TOL, atol=TOL)


def _both(model: ff.Model, **svi) -> tuple[ff.Result, ff.Result]:
    return model.infer("svi", **svi), model.infer("svi", **svi, backend="jax")


def _mixture(x: np.ndarray, k: int) -> ff.Model:
    with ff.Model("mixture_1d") as model:
        weights = ff.Dirichlet("weights", np.ones(k))
        with ff.Plate(ff.Range("k", k)):
            means = ff.Gaussian("means", 0.0, variance=100.0)
            precs = ff.Gamma("precs", 1.0, rate=1.0)
        with ff.Plate(ff.Range("n", x.size)):
            z = ff.Discrete("z", weights)
            with ff.Switch(z):
                ff.Gaussian("x", means[z], precision=precs[z], observed=ff.Data("xs"))
    return model


@pytest.mark.slow
@settings(max_examples=6, deadline=None)
@given(n=st.integers(2, 60), data=st.data(), steps=st.integers(0, 7),
       kappa=st.sampled_from([0.0, 0.55, 0.7, 1.0]), seed=st.integers(0, 10**6))
def test_gaussian_steps_equal_numpy(n, data, steps, kappa, seed):
    """Learning a Gaussian (mean and precision): the JAX steps are NumPy's, 1e-10."""
    batch = data.draw(st.integers(1, n), label="minibatch")
    x = np.random.default_rng(seed).normal(2.0, 1.5, n)
    a, b = _both(_normal_gamma(x), minibatch=batch, steps=steps,
                 learning_rate=(1.0 + seed % 3, kappa), rng=seed)
    _same(a, b, GLOBALS["normal_gamma"])


@pytest.mark.slow
@settings(max_examples=3, deadline=None)
@given(n=st.integers(20, 150), k=st.integers(2, 4), data=st.data(), steps=st.integers(1, 5),
       seed=st.integers(0, 10**6))
def test_mixture_steps_equal_numpy(n, k, data, steps, seed):
    """The 1-D mixture (Dirichlet weights, Gaussian means, Gamma precisions, a Switch
    over the plate): the local z re-derived each step, the globals NumPy's, 1e-10."""
    batch = data.draw(st.integers(1, n), label="minibatch")
    x = mr.data(k, n, seed=seed % 1000)
    a, b = _both(_mixture(x, k), minibatch=batch, steps=steps, rng=seed,
                 data={"xs": x}, init=mr.factorflow_init(x, k))
    _same(a, b, GLOBALS["mixture_1d"])


@pytest.mark.slow
def test_full_batch_unit_steps_are_vmp_sweeps():
    """B = N and ρ = 1: each JAX step is one VMP sweep, against the hand-written
    Normal-Gamma coordinate ascent (1e-10) and, on the mixture, against the JAX
    backend's own program run one sweep at a time from the last step's globals."""
    x = np.random.default_rng(8).normal(2.0, 1.5, 25)
    result = _normal_gamma(x).infer("svi", minibatch=25, steps=3, learning_rate=(1, 0),
                                    rng=0, backend="jax")
    shape, rate = 1.0, 1.0
    for _ in range(3):
        m, v, shape, rate = _coordinate_ascent(x, shape, rate)
    np.testing.assert_allclose(result["mean"].mean, m, rtol=TOL)
    np.testing.assert_allclose(result["mean"].variance, v, rtol=TOL)
    np.testing.assert_allclose(result["prec"].shape, shape, rtol=TOL)
    np.testing.assert_allclose(result["prec"].rate, rate, rtol=TOL)

    x = mr.data(3, 90)
    model = mr.model(x, 3)
    start = {"weights": ff.distributions.Dirichlet(np.ones(3)),
             "precs": ff.distributions.Gamma(np.ones(3), np.ones(3)),
             **mr.factorflow_init(x, 3)}
    result = model.infer("svi", minibatch=90, steps=2, learning_rate=(1, 0),
                         init={"means": start["means"]}, backend="jax")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ff.ScheduleWarning)
        compiled = model.compile("vmp", init=list(start), backend="jax")
    for _ in range(2):
        run = compiled.run(1, init=start, tolerance=None)
        start = {name: run[name] for name in GLOBALS["mixture_1d"]}
    for name in GLOBALS["mixture_1d"]:
        for a, b in zip(result[name].eta, start[name].eta, strict=True):
            np.testing.assert_allclose(a, b, rtol=TOL)


@settings(deadline=None)
@given(steps=st.integers(1, 10**6), batch=st.integers(1, 10**7))
def test_chunk_lengths(steps, batch):
    """A chunk's indices stay within INDEX_LIMIT (one step at least), the chunks are as
    few as that allows, and fewer steps are padded than there are chunks."""
    from factorflow.runtime.backends.jax_svi import INDEX_LIMIT, chunk_length
    length = chunk_length(steps, batch)
    chunks = -(-steps // length)
    assert 1 <= length <= steps and (length * batch <= INDEX_LIMIT or length == 1)
    assert chunks == -(-steps // max(1, INDEX_LIMIT // batch))
    assert 0 <= chunks * length - steps < chunks


@pytest.mark.slow
def test_chunks_and_padding_take_the_same_steps(monkeypatch):
    """Steps split into jitted chunks (the last one padded with skipped steps): the same
    result as NumPy's, in float64 whatever JAX's global setting (left as it was); a
    second run of the model reuses the compiled chunk."""
    from factorflow.runtime.backends import jax_svi
    monkeypatch.setattr(jax_svi, "INDEX_LIMIT", 4 * 6)  # 4 steps of B = 6 a chunk
    assert jax_svi.chunk_length(11, 6) == 4
    import jax
    x = np.random.default_rng(2).normal(-1.0, 0.5, 40)
    model = _normal_gamma(x)
    before = jax.config.jax_enable_x64
    a, b = _both(model, minibatch=6, steps=11, rng=4)
    assert jax.config.jax_enable_x64 == before  # (float64 for the call only)
    _same(a, b, GLOBALS["normal_gamma"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ff.ScheduleWarning)
        compiled = model.compile("vmp", init=["mean", "prec"], backend="jax")
    cached = dict(vars(compiled)["_svi_chunks"])
    assert jax_svi.chunk_length(10, 6) == 4  # 3 chunks of 4 steps, 2 of them padding
    _same(model.infer("svi", minibatch=6, steps=10, rng=4), model.infer(
        "svi", minibatch=6, steps=10, rng=4, backend="jax"), GLOBALS["normal_gamma"])
    assert vars(compiled)["_svi_chunks"] == cached  # (4, 6, sizes): compiled once


@pytest.mark.slow
def test_bad_input_raises_the_numpy_errors():
    """Options and models SVI refuses: the same named errors on JAX as on NumPy."""
    x = np.arange(10.0)
    model = _normal_gamma(x)
    for options, error, match in [
            ({"minibatch": 11}, ff.ModelError, "minibatch must be an integer from 1 to .* 10"),
            ({"minibatch": 0}, ff.ModelError, "minibatch"),
            ({"minibatch": 5, "learning_rate": (0.5, 0.7)}, ff.ModelError, "tau >= 1"),
            ({"minibatch": 5, "steps": -1}, ff.ModelError, "steps must be"),
            ({"minibatch": 5, "chunks": 3}, ff.ModelError, "Dask backend's"),
            ({"minibatch": 5, "init": {"x": None}}, ff.ModelError, "init names")]:
        options = {"steps": 3} | options
        for backend in ("numpy", "jax"):
            with pytest.raises(error, match=match):
                model.infer("svi", **options, backend=backend)
    with ff.Model() as flat:
        ff.Gaussian("y", ff.Gaussian("m", 0.0, variance=1.0), variance=1.0, observed=1.0)
    for backend in ("numpy", "jax"):
        with pytest.raises(ff.ModelError, match="no variable over a plate"):
            flat.infer("svi", minibatch=1, steps=1, backend=backend)


@pytest.mark.slow
def test_the_jax_backends_errors_are_still_named(monkeypatch):
    """NaN data: the NumPy backend's DataError naming the data; data float64 cannot
    hold: the JAX backend's BackendError; an improper message in a step's sweep (a NaN
    planted in an operator): ImproperMessageError naming the posterior and the step."""
    x = np.random.default_rng(1).normal(2.0, 1.5, 20)
    model = _mixture(x, 2)
    bad = x.copy()
    bad[3] = np.nan
    with pytest.raises(ff.DataError, match=r"ff.Data\('xs'\).*NaN"):
        model.infer("svi", minibatch=5, steps=2, data={"xs": bad}, backend="jax")
    with pytest.raises(ff.DataError, match=r"ff.Data\('xs'\).*would lose precision"):
        model.infer("svi", minibatch=5, steps=2, data={"xs": x.astype(np.longdouble)},
                    backend="jax")

    model = _normal_gamma(x)
    model.infer("svi", minibatch=5, steps=2, backend="jax")  # (compiled: the program)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ff.ScheduleWarning)
        compiled = model.compile("vmp", init=["mean", "prec"], backend="jax")
    vars(compiled).pop("_svi_chunks")  # traced again with the planted NaN
    program = compiled._program.__globals__
    real = program["Gaussian_mean_average_logarithm"]

    def poisoned(sample, precision, **fused):  # NaN where the minibatch holds x[7]
        import jax.numpy as jnp
        msg = real(sample, precision, **fused)
        hit = jnp.any(jnp.asarray(sample) == x[7])
        return type(msg).from_natural(msg.eta[0] * jnp.where(hit, jnp.nan, 1.0), msg.eta[1])

    monkeypatch.setitem(program, "Gaussian_mean_average_logarithm", poisoned)
    draw = minibatches(np.random.default_rng(5), x.size, 5)
    step = next(t for t in range(50) if 7 in draw(1)[0])  # the first minibatch with x[7]
    assert step > 0
    with pytest.raises(ff.ImproperMessageError,
                       match=rf"posterior of mean.*iteration 1 is improper.*\(SVI step "
                             rf"{step + 1}: the sweep on the minibatch\)"):
        model.infer("svi", minibatch=5, steps=step + 3, backend="jax", rng=5)


@pytest.mark.slow
def test_zero_steps_and_init():
    """No steps: the globals' starting posteriors (init where given, else the sweep
    with the plate empty), as NumPy gives them; a start that is one number for a whole
    plate (q(precs) over k) is laid out over it by the first step, as NumPy's is."""
    x = np.random.default_rng(5).normal(0.0, 1.0, 12)
    start = {"mean": ff.distributions.Gaussian(1.0, 2.0)}
    for steps in (0, 2):
        a, b = _both(_normal_gamma(x), minibatch=4, steps=steps, init=start, rng=1)
        _same(a, b, GLOBALS["normal_gamma"])
    x = mr.data(3, 60)
    start = {"means": ff.distributions.Gaussian(np.array([0.0, 4.0, 8.0]), 1.0),
             "precs": ff.distributions.Gamma(2.0, 1.0)}
    a, b = _both(_mixture(x, 3), minibatch=15, steps=3, init=start, rng=2, data={"xs": x})
    assert np.shape(b["precs"].eta[0]) == (3,)
    _same(a, b, GLOBALS["mixture_1d"])
