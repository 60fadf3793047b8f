"""The JAX backend against the NumPy backend: same posteriors, evidence, sweeps."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import factorflow as ff

pytest.importorskip("jax")

EXAMPLES_DIR = Path(__file__).parents[3] / "examples"
sys.path.insert(0, str(EXAMPLES_DIR))

TOL = 1e-10


def assert_same(model: ff.Model, algorithm: str, compile_options: dict | None = None,
                **run) -> tuple:
    """Both backends on ``model``: posteriors (natural parameters), log evidence, trace,
    sweeps and convergence agree; returns the two results."""
    options = compile_options or {}
    return runs_same(model.compile(algorithm, **options),
                     model.compile(algorithm, backend="jax", **options), **run)


def runs_same(numpy_model, jax_model, **run) -> tuple:
    """``assert_same`` on models compiled already (a JAX model run again with new data
    reuses its traced program)."""
    a, b = numpy_model.run(**run), jax_model.run(**run)
    _check_same(numpy_model.model, a, b)
    return a, b


def _check_same(model: ff.Model, a: ff.Result, b: ff.Result) -> None:
    assert a.iterations == b.iterations and a.converged == b.converged
    for name in model.variables:
        pa, pb = a[name], b[name]
        if not hasattr(pa, "eta"):
            continue
        assert type(pa) is type(pb)
        for x, y in zip(pa.eta, pb.eta, strict=True):
            x, y = np.asarray(x), np.asarray(y)
            same_inf = np.isinf(x) & (x == y)
            with np.errstate(invalid="ignore"):
                diff = np.where(same_inf, 0.0, np.abs(x - y) / (1.0 + np.abs(x)))
            assert np.max(diff, initial=0.0) < TOL, (name, x, y)
    assert abs(a.log_evidence - b.log_evidence) <= TOL * (1 + abs(a.log_evidence))
    np.testing.assert_allclose(b.trace, a.trace, rtol=TOL, atol=TOL)


@pytest.mark.slow
def test_learning_gaussian_vmp():
    """Runs with other numbers of sweeps or another tolerance reuse the traced program
    (the limit and the tolerance are its arguments, within the trace's capacity: 16
    sweeps here), and agree with NumPy's; no sweep at all is a program of its own."""
    import learning_gaussian
    model = learning_gaussian.build(np.random.default_rng(0).normal(3, 2, 50))
    compiled = model.compile("vmp"), model.compile("vmp", backend="jax")
    runs_same(*compiled)
    runs_same(*compiled, tolerance=1e-3)
    runs_same(*compiled, iterations=0)
    a, _ = runs_same(*compiled, iterations=3, tolerance=None)
    b, _ = runs_same(*compiled, iterations=16, tolerance=None)
    assert (a.iterations, b.iterations) == (3, 16)
    assert len(compiled[1]._traced) == 3


@pytest.mark.slow
def test_truncated_gaussian_ep():
    with ff.Model("truncated_gaussian") as model:
        threshold = ff.Data("threshold", 0.5)
        x = ff.Gaussian("x", 0.0, variance=1.0)
        ff.constrain_true(x > threshold)
    compiled = model.compile("ep"), model.compile("ep", backend="jax")
    for t in (0.0, 0.5, 5.0):  # (one JAX program: the threshold is data)
        runs_same(*compiled, data={"threshold": t})


@pytest.mark.slow
def test_clinical_trial_vmp():
    """(Its EP run, ``build().infer("ep")``, is the example's own: compared in
    ``test_examples_agree[clinical_trial]``.)"""
    import clinical_trial
    assert_same(clinical_trial.build(), "vmp")


# ----- every EP/VMP run of every example, on both backends ------------------------------
#: examples that run Gibbs sampling only (nothing for the JAX backend to run)
GIBBS_ONLY = {"horseshoe_regression"}
EXAMPLES = sorted(p.stem for p in EXAMPLES_DIR.glob("*.py")
                  if "gibbs" not in p.stem and p.stem not in GIBBS_ONLY)
RUNS = 2


@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLES)
def test_examples_agree(example):
    """Each example's ``main()`` as written (its NumPy runs: ``tests.conftest.example_run``,
    shared with ``tests/test_examples.py``, which checks the rest); its first ``RUNS``
    EP/VMP runs are run again on JAX (the same model, algorithm, initialised names and
    run arguments) and the two agree to 1e-10 (``assert_same``'s checks).  (Each JAX run
    compiles its program, seconds to tens of seconds: the later runs of an example are
    left out for time; the runs of one compiled model share its twin, as a user's second
    run with other data reuses the traced program.)"""
    from factorflow.runtime.compiled import CompiledModel, compile_model
    from tests.conftest import example_run
    compared = []
    twins = {}  # per compiled model: its JAX twin, compiled once
    for compiled, args, kwargs, result in example_run(example).runs:
        if len(compared) == RUNS:
            break
        if type(compiled) is not CompiledModel or compiled.algorithm not in ("ep", "vmp"):
            continue
        try:
            if id(compiled) not in twins:
                twins[id(compiled)] = compile_model(
                    compiled.model, compiled.algorithm, compiled.user_initialized,
                    enter_whole_arrays=compiled.enter_whole_arrays, backend="jax")
        except ff.BackendError as e:  # softmax's EP: refused (NOT_TRACEABLE_EP)
            assert "cannot be traced" in str(e)
            continue
        _check_same(compiled.model, result, twins[id(compiled)].run(*args, **kwargs))
        compared.append(compiled.model.name)
    assert compared, f"{example}.main() ran no EP or VMP inference"


# ----- what the JAX backend refuses or reports -------------------------------------------
def _learning():
    with ff.Model("learning") as model:
        mean = ff.Gaussian("mean", 0.0, variance=100.0)
        prec = ff.Gamma("prec", 1.0, rate=1.0)
        with ff.Plate(ff.Range("n", 2)):
            ff.Gaussian("x", mean, precision=prec, observed=[5.0, 7.0])
    return model


def test_unknown_backend_lists_the_valid_ones():
    with pytest.raises(ff.BackendError, match=r"unknown backend 'torch'.*'numpy', 'jax'"):
        _learning().compile("vmp", backend="torch")
    with pytest.raises(ff.BackendError, match="unknown backend"):
        _learning().infer("gibbs", backend="torch")
    with pytest.raises(ff.BackendError, match="Gibbs sampling runs on NumPy only"):
        _learning().infer("gibbs", backend="jax")


def test_backend_not_installed_names_the_extra(monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "jax" else real(name, *a))
    with pytest.raises(ff.BackendError, match=r'pip install "factorflow\[jax\]"'):
        _learning().compile("vmp", backend="jax")
    assert isinstance(ff.BackendError("x"), ff.ModelError)


def test_what_needs_python_between_sweeps_is_refused():
    compiled = _learning().compile("vmp", backend="jax")
    with pytest.raises(ff.BackendError, match="on_iteration"):
        compiled.run(on_iteration=lambda i, p: False)
    with pytest.raises(ff.BackendError, match="checkpoint"):
        compiled.run(checkpoint="run.ckpt")
    with pytest.raises(ff.BackendError, match="save_module"):
        compiled.save_module("x.py")


def test_data_that_float64_would_round_is_refused():
    from factorflow.runtime.backends.jax_backend import _device_value
    with pytest.raises(ff.BackendError, match="v_x: data of dtype float128.*astype"):
        _device_value("v_x", np.array([1.0, 2.0], dtype=np.longdouble))
    with pytest.raises(ff.BackendError, match="complex"):
        _device_value("v_x", np.array([1.0 + 2.0j]))
    # float32 data is widened to float64 (exactly), as the NumPy backend reads it, even
    # with JAX's global x64 switch off (the default)
    import jax
    assert not jax.config.jax_enable_x64
    out = _device_value("v_x", np.float32([0.1]))
    assert out.dtype == np.float64 and float(out[0]) == float(np.float32(0.1))


@pytest.mark.slow
def test_float64_without_touching_the_global_config():
    import jax
    before = jax.config.jax_enable_x64
    a, b = assert_same(_learning(), "vmp")
    assert jax.config.jax_enable_x64 == before
    assert b["mean"].eta[0].dtype == np.float64


@pytest.mark.slow
def test_improper_posterior_is_named_after_the_loop(monkeypatch):
    """A NaN inside an operator: the device check stops the loop at that sweep and the
    host raises ImproperMessageError naming the posterior and the iteration."""
    compiled = _learning().compile("vmp", backend="jax")
    real = compiled._program.__globals__["Gaussian_mean_average_logarithm"]

    def poisoned(sample, precision, **fused):  # (reduce=, weights=: perf16's fused form)
        msg = real(sample, precision, **fused)
        return type(msg).from_natural(msg.eta[0] * float("nan"), msg.eta[1])

    monkeypatch.setitem(compiled._program.__globals__, "Gaussian_mean_average_logarithm",
                        poisoned)
    with pytest.raises(ff.ImproperMessageError, match="posterior of mean.*iteration 1 "):
        compiled.run()


@pytest.mark.slow
def test_convergence_warning_is_the_numpy_one():
    import clinical_trial
    model = clinical_trial.build()
    with pytest.warns(ff.ConvergenceWarning) as numpy_warning:
        model.infer("ep", iterations=2)
    with pytest.warns(ff.ConvergenceWarning) as jax_warning:
        model.infer("ep", iterations=2, backend="jax")
    assert str(numpy_warning[0].message) == str(jax_warning[0].message)


# ----- generated models (the oracle's families) ----------------------------------------
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

FAMILY = settings(derandomize=True, max_examples=2, deadline=None, database=None,
                  phases=(Phase.generate,), suppress_health_check=list(HealthCheck))


def _same_or_same_error(model: ff.Model, algorithm: str) -> None:
    """The backends agree, or raise the same kind of error."""
    try:
        model.compile(algorithm).run(iterations=100)
    except (ff.ModelError, ff.ImproperMessageError) as error:
        with pytest.raises(type(error)):
            model.compile(algorithm, backend="jax").run(iterations=100)
        return
    assert_same(model, algorithm, iterations=100)


@pytest.mark.slow
@FAMILY
@given(st.data())
def test_generated_models_agree(data):
    """Random discrete models with nested gates and random gated linear-Gaussian models
    (``tests.oracle.models``): EP and VMP, both backends, to 1e-10."""
    from tests.oracle import models
    from tests.oracle.build import build
    # small models: the NumPy compile of a large generated model takes minutes
    spec = data.draw(st.one_of(models.discrete(max_configurations=16),
                               models.linear_gaussian(gated=True, max_configurations=8)))
    model, _ = build(spec)
    for algorithm in ("ep", "vmp"):
        _same_or_same_error(model, algorithm)


def test_factors_defined_in_the_process_are_refused():
    @ff.factor(sample="real", mean="real")
    def unit_gaussian(sample, mean):
        return -0.5 * (sample - mean) ** 2

    with ff.Model("user_factor") as model:
        mean = ff.Gaussian("mean", 0.0, variance=100.0)
        unit_gaussian("x", mean=mean, observed=1.5)
    with pytest.raises(ff.BackendError, match="unit_gaussian.*backend='numpy'"):
        model.compile("vmp", backend="jax")


def test_softmax_ep_is_refused():
    """Softmax's EP sizes its quadrature grid by the values: refused, naming the factor."""
    with ff.Model("softmax") as model:
        w = ff.VectorGaussian("w", np.zeros(3), precision=np.eye(3))
        ff.Discrete("y", ff.softmax(w), observed=1)
    with pytest.raises(ff.BackendError, match="DiscreteFromSoftmax.*cannot be traced"):
        model.compile("ep", backend="jax")


@pytest.mark.slow
def test_skipped_ep_updates_agree_with_numpy():
    """Damped EP on a mixture whose cavities go improper (``test_wrong_answers``): the
    device's ``skip_improper`` keeps the old messages where NumPy's does and counts the
    skips, so both backends give the same posteriors (1e-10), the same single
    ImproperMessageWarning (update, elements, iteration) and the same verdict: not an EP
    fixed point (``converged`` False, the same ConvergenceWarning)."""
    import warnings
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from test_wrong_answers import _three_point_mixture
    model = _three_point_mixture()
    said = []
    for backend in ("numpy", "jax"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            said.append(model.compile("ep", backend=backend).run(iterations=300,
                                                                damping=0.5))
        said.append([(w.category, str(w.message)) for w in caught
                     if w.category in (ff.ImproperMessageWarning, ff.ConvergenceWarning)])
    a, numpy_warnings, b, jax_warnings = said
    assert [c for c, _ in numpy_warnings] == [ff.ImproperMessageWarning,
                                              ff.ConvergenceWarning]
    assert "not an EP fixed point" in numpy_warnings[1][1]
    assert jax_warnings == numpy_warnings
    assert not a.converged and not b.converged
    _check_same(model, a, b)
