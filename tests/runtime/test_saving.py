"""Saving and loading: pickle and deepcopy of results, models and compiled models; results
to and from netCDF (bit for bit); compiled models as standalone Python modules run by a
fresh interpreter."""

from __future__ import annotations

import copy
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import factorflow as ff
from factorflow.distributions import Binomial, Gaussian, PointMass
from factorflow.factors import FACTORS
from tests.conftest import assert_close

REPO = Path(__file__).resolve().parents[2]


# ----- models covering each kind of generated code ---------------------------------------
def _learning_gaussian():
    with ff.Model("learning a Gaussian") as model:
        mean = ff.Gaussian("mean", 0.0, variance=100.0)
        prec = ff.Gamma("prec", 1.0, rate=1.0)
        with ff.Plate(ff.Range("n", 4)):
            ff.Gaussian("x", mean, precision=prec, observed=[5.0, 7.0, 6.5, 4.0])
    return model, "vmp", {}


def _mixture():
    data = np.array([0.1, -0.3, 5.2, 4.8, 10.1, 9.7])
    with ff.Model("mixture") as model:
        k = ff.Range("k", 3)
        weights = ff.Dirichlet("weights", np.ones(3))
        with ff.Plate(k):
            means = ff.Gaussian("means", 0.0, variance=100.0)
        x = ff.Data("x", data)
        with ff.Plate(ff.Range("n", data.size)):
            z = ff.Discrete("z", weights)
            with ff.Switch(z):
                ff.Gaussian("obs", means[z], precision=1.0, observed=x)
    return model, "vmp", {"means": Gaussian([0.0, 5.0, 10.0], [1.0, 1.0, 1.0])}


def _skills():
    with ff.Model("skills") as model:
        with ff.Plate(ff.Range("players", 3)):
            skill = ff.Gaussian("skill", np.array([1.0, 0.0, -0.5]), variance=1.0)
        with ff.Plate(ff.Range("games", 3)):
            perf_w = ff.Gaussian("perf_w", skill[np.array([0, 1, 0])], variance=1.0)
            perf_l = ff.Gaussian("perf_l", skill[np.array([1, 2, 2])], variance=1.0)
            ff.constrain_true(perf_w > perf_l)
    return model, "ep", {}


def _logic():
    """And / Or / Not: their operators are closures, read from the factor registry."""
    with ff.Model("logic") as model:
        a, b, c = ff.Bernoulli("a", 0.3), ff.Bernoulli("b", 0.6), ff.Bernoulli("c", 0.5)
        ff.constrain_true(a | b)
        ff.constrain_true(~(a & c))
    return model, "ep", {}


def _cases():
    with ff.Model("cases") as model:
        p = ff.Beta("p", 2.0, 2.0)
        z = ff.Discrete("z", [0.2, 0.5, 0.3])
        with ff.Case(z, 0):
            ff.Binomial("k", 10, p, observed=3)
        with ff.Case(z, 1):
            ff.Gaussian("y", 1.0, precision=1.0, observed=0.5)
        with ff.Case(z, 2):
            ff.Gaussian("y", -1.0, precision=1.0, observed=0.5)
    return model, "ep", {}


MODELS = {"learning-gaussian": _learning_gaussian, "mixture": _mixture, "skills": _skills,
          "logic": _logic, "cases": _cases}


def _compiled(key):
    model, algorithm, init = MODELS[key]()
    return model.compile(algorithm, init=list(init)), init


def _naturals(posteriors) -> dict[str, list[np.ndarray]]:
    return {name: [np.asarray(e) for e in d.eta] for name, d in posteriors.items()
            if hasattr(d, "eta")}


def _assert_same_bits(a, b) -> None:
    assert list(a.posteriors) == list(b.posteriors)
    for name in a.posteriors:
        state_a, state_b = a[name].__getstate__(), b[name].__getstate__()
        assert list(state_a) == list(state_b), name
        for field in state_a:
            xs = state_a[field] if isinstance(state_a[field], tuple) else (state_a[field],)
            ys = state_b[field] if isinstance(state_b[field], tuple) else (state_b[field],)
            for x, y in zip(xs, ys, strict=True):
                x, y = np.asarray(x), np.asarray(y)
                assert x.dtype == y.dtype and x.shape == y.shape, (name, field)
                assert x.tobytes() == y.tobytes(), (name, field)


# ----- pickle and deepcopy ----------------------------------------------------------------
@pytest.mark.parametrize("key", list(MODELS))
def test_compiled_model_pickles_and_gives_identical_numbers(key):
    compiled, init = _compiled(key)
    expected = compiled.run(init=init)
    for clone in (pickle.loads(pickle.dumps(compiled)), copy.deepcopy(compiled)):
        assert clone is not compiled and clone.source == compiled.source
        assert clone.user_initialized == compiled.user_initialized
        result = clone.run(init=init)
        assert result.log_evidence == expected.log_evidence
        _assert_same_bits(result, expected)


@pytest.mark.parametrize("key", list(MODELS))
def test_model_pickles_after_compiling(key):
    model, algorithm, init = MODELS[key]()
    expected = model.infer(algorithm, init=init)   # fills the compiled cache
    for clone in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        assert list(clone.variables) == list(model.variables)
        assert clone.variable(next(iter(clone.variables))).model is clone
        result = clone.infer(algorithm, init=init)
        assert result.log_evidence == expected.log_evidence
        _assert_same_bits(result, expected)


def test_result_pickles_and_deepcopies():
    result = _mixture()[0].infer("vmp", init=_mixture()[2])
    for clone in (pickle.loads(pickle.dumps(result)), copy.deepcopy(result)):
        assert clone.log_evidence == result.log_evidence
        assert clone.iterations == result.iterations and clone.algorithm == "vmp"
        _assert_same_bits(clone, result)


def test_model_cannot_be_pickled_inside_its_block():
    with ff.Model("open") as model:
        ff.Gaussian("x", 0.0, precision=1.0)
        with pytest.raises(ff.ModelError, match=r"'open' cannot be saved while its `with`"):
            pickle.dumps(model)


def test_loading_a_model_whose_factor_is_not_defined(monkeypatch):
    @ff.factor(sample="real", mean="real")
    def saving_test_factor(sample, mean):
        return -0.5 * (sample - mean) ** 2

    with ff.Model("user factor") as model:
        mean = ff.Gaussian("mean", 0.0, variance=10.0)
        saving_test_factor("x", mean=mean, observed=1.0)
    data = pickle.dumps(model.compile("vmp"))
    assert pickle.loads(data).run().log_evidence == model.infer("vmp").log_evidence
    monkeypatch.delitem(FACTORS, "saving_test_factor")   # as in a fresh process
    with pytest.raises(ff.ModelError, match=r"\['saving_test_factor'\].*not defined in this "
                                            r"process"):
        pickle.loads(data)


# ----- netCDF ---------------------------------------------------------------------------
@pytest.mark.parametrize("key", list(MODELS))
def test_result_netcdf_round_trip_is_bit_for_bit(key, tmp_path):
    compiled, init = _compiled(key)
    result = compiled.run(init=init)
    path = tmp_path / "result.nc"
    result.to_netcdf(path)
    back = ff.load_result(path)
    assert back.log_evidence == result.log_evidence and back.seconds == result.seconds
    assert (back.algorithm, back.iterations) == (result.algorithm, result.iterations)
    _assert_same_bits(back, result)
    assert repr(back) == repr(result)


def test_netcdf_holds_awkward_names_shapes_and_values(tmp_path):
    """Unicode and punctuation in names, size-0 and 0-d arrays, ±inf, NaN and -0.0
    naturals, booleans and integers, a Binomial's per-element trials."""
    eta0 = np.array([[np.inf, -np.inf, -0.0], [np.nan, 5e-324, 1.0]])
    posteriors = {
        "déjà vu (a + 1.0)": Gaussian.from_natural(eta0, np.ones((2, 3))),
        "empty": Gaussian.from_natural(np.zeros((4, 0)), np.zeros((4, 0))),
        "counts": Binomial.from_natural(np.array([0.3, -1.2]), trials=np.array([3.0, 9.0])),
        "flags": PointMass(np.array([True, False, True])),
        "ints": PointMass(np.array([1, 2**40], dtype=np.int64)),
        "scalar": PointMass(2.5),
    }
    result = ff.Result(posteriors, -np.inf, "ep", 0, 1e-3)
    result.to_netcdf(tmp_path / "odd.nc")
    back = ff.Result.from_netcdf(tmp_path / "odd.nc")
    _assert_same_bits(back, result)
    assert back.log_evidence == -np.inf
    assert back["ints"].value.dtype == np.int64 and back["flags"].value.dtype == bool
    assert_close(back["counts"].mean, [3.0 * 0.574442516811659, 9.0 * 0.231475216500982],
                 rtol=1e-12)


def test_netcdf_file_reads_as_a_plain_dataset(tmp_path):
    result = _learning_gaussian()[0].infer("vmp")
    result.to_netcdf(tmp_path / "r.nc")
    ds = xr.load_dataset(tmp_path / "r.nc", engine="scipy")
    header = json.loads(ds.attrs["factorflow"])
    assert [p["name"] for p in header["posteriors"]] == list(result.posteriors)
    assert ds["p0_eta1"].attrs == {"posterior": "mean", "family": "Gaussian",
                                   "parameter": "precision"}
    assert_close(float(ds["p0_eta1"]), result["mean"].precision, rtol=0, atol=0)


def test_loading_a_netcdf_file_that_is_not_a_result(tmp_path):
    xr.Dataset({"a": ("x", np.zeros(2))}).to_netcdf(tmp_path / "other.nc", engine="scipy")
    with pytest.raises(ff.ModelError, match="not a factorflow result"):
        ff.load_result(tmp_path / "other.nc")


def test_unsavable_posterior_is_named():
    result = ff.Result({"weird": object()}, 0.0, "ep", 1, 0.0)
    with pytest.raises(ff.ModelError, match=r"posterior of 'weird' is a object"):
        result.to_xarray()


# ----- standalone modules -----------------------------------------------------------------
RUNNER = """
import json, runpy, sys
import numpy as np
out = {}
for path in sys.argv[1:]:
    module = runpy.run_path(path)
    posteriors, log_evidence = module["run"](50)
    arrays = {f"{name}:{i}": np.asarray(e) for name, d in posteriors.items()
              for i, e in enumerate(d.eta)}
    np.savez(path + ".out.npz", **arrays)
    out[path] = {"log_evidence": float(log_evidence), "names": list(posteriors)}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def standalone_runs(tmp_path_factory):
    """Every model saved as a module, then run by one fresh interpreter (the test's own
    process never imports those modules)."""
    folder = tmp_path_factory.mktemp("modules")
    expected, paths = {}, []
    for key in MODELS:
        compiled, init = _compiled(key)
        path = compiled.save_module(folder / f"{key.replace('-', '_')}.py", init=init)
        assert path.with_suffix(".npz").exists()
        expected[str(path)] = compiled.run(iterations=50, init=init, tolerance=None)
        paths.append(str(path))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", RUNNER, *paths], capture_output=True,
                          text=True, env=env, cwd=folder, timeout=120)
    assert done.returncode == 0, done.stderr
    return expected, json.loads(done.stdout)


@pytest.mark.parametrize("key", list(MODELS))
def test_standalone_module_matches_compiled_run(key, standalone_runs, tmp_path):
    expected_by_path, runs = standalone_runs
    path = next(p for p in expected_by_path if Path(p).stem == key.replace("-", "_"))
    expected, run = expected_by_path[path], runs[path]
    assert_close(run["log_evidence"], expected.log_evidence, rtol=1e-12, atol=1e-12)
    random = _naturals(expected.posteriors)
    assert run["names"] == list(random)
    with np.load(path + ".out.npz") as saved:
        for name, etas in random.items():
            for i, eta in enumerate(etas):
                assert_close(saved[f"{name}:{i}"], eta, rtol=1e-12, atol=1e-12)


def test_standalone_module_imports_every_name_it_uses(standalone_runs):
    """The written module holds the generated function unchanged, and a static check
    finds every free name of that function among the module's own definitions."""
    import ast
    import builtins

    for path in standalone_runs[0]:
        text = Path(path).read_text()
        tree = ast.parse(text)
        defined = set(dir(builtins)) | {"__file__"}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom | ast.Import):
                defined |= {a.asname or a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.FunctionDef):
                defined |= {node.name} | {a.arg for a in node.args.args + node.args.kwonlyargs}
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            elif isinstance(node, ast.comprehension):
                defined |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
        loads = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
                 and isinstance(n.ctx, ast.Load)}
        assert loads <= defined, (path, loads - defined)


def test_standalone_module_of_a_user_factor_is_refused(tmp_path):
    @ff.factor(sample="real", mean="real")
    def standalone_test_factor(sample, mean):
        return -0.5 * (sample - mean) ** 2

    with ff.Model() as model:
        mean = ff.Gaussian("mean", 0.0, variance=10.0)
        standalone_test_factor("x", mean=mean, observed=1.0)
    with pytest.raises(ff.ModelError, match=r"'standalone_test_factor' was defined in this "
                                            r"process.*pickle"):
        model.compile("vmp").save_module(tmp_path / "user.py")


def test_standalone_module_path_must_be_python(tmp_path):
    with pytest.raises(ff.ModelError, match=r"must end in .py"):
        _compiled("skills")[0].save_module(tmp_path / "skills.txt")
