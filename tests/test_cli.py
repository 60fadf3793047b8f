"""The `factorflow` command line: end to end in subprocesses, and each command in-process."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import factorflow as ff
from factorflow import cli
from tests.conftest import assert_close

ROOT = Path(__file__).resolve().parent.parent
LEARNING = """\
mean ~ Gaussian(0, variance=100)
prec ~ Gamma(1, rate=1)
x[n] ~ Gaussian(mean, prec)
"""
PY_MODEL = """\
import factorflow as ff

with ff.Model("coin") as model:
    p = ff.Beta("p", 1.0, 1.0)
    with ff.Plate(ff.Range("n", 5)):
        ff.Bernoulli("flips", p, observed=ff.Data("coin_flips"))
"""


def factorflow(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "factorflow", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    status = cli.main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "learning.ff").write_text(LEARNING)
    (tmp_path / "x.csv").write_text("x\n5.0\n7.0\n")
    (tmp_path / "coin.py").write_text(PY_MODEL)
    np.savez(tmp_path / "flips.npz", coin_flips=np.array([True, True, False, True, True]))
    return tmp_path


def test_entry_point_is_declared():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, function = scripts["factorflow"].split(":")
    assert module == "factorflow.cli" and function == "main"


@pytest.mark.slow
def test_run_in_a_subprocess_prints_the_posterior_table(files):
    done = factorflow("run", "learning.ff", "--algorithm", "vmp", "--data", "x.csv",
                      cwd=files)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("learning: VMP, 23 sweeps (converged), evidence lower bound")
    assert lines[1].split() == ["variable", "posterior", "mean", "sd", "parameters"]
    row = lines[3].split()
    assert row[:2] == ["mean", "Gaussian"]
    assert_close(float(row[2]), 5.9603207170807826, rtol=1e-5)   # README / example value
    assert lines[4].split()[:2] == ["prec", "Gamma"]


@pytest.mark.slow
def test_bad_pass_in_a_subprocess_exits_1_with_one_line(files):
    done = factorflow("compile", "learning.ff", "--emit", "ir", "--after", "gate",
                      cwd=files)
    assert done.returncode == 1 and done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.strip() == ("factorflow compile: error: unknown pass 'gate'; the "
                                   "passes are model, fusion, gates, channels, messages, "
                                   "pruning, schedule.")


@pytest.mark.slow
def test_gibbs_run_in_a_subprocess_prints_sample_means(files):
    """Beta(1, 1) and 4 heads in 5 flips: the posterior is Beta(5, 2), mean 5/7 and sd
    √(10 / (49 · 8)); the sample mean and sd of 4 × 2000 draws are within 0.02."""
    done = factorflow("run", "coin.py", "--algorithm", "gibbs", "--data", "flips.npz",
                      "--draws", "2000", "--seed", "1", cwd=files)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "coin: Gibbs sampling, 4 chains x 2000 draws (burn 1000, seed 1)"
    name, kind, mean, sd = lines[3].split()
    assert (name, kind) == ("p", "samples")
    assert abs(float(mean) - 5 / 7) < 0.02 and abs(float(sd) - np.sqrt(10 / 392)) < 0.02
    done = factorflow("run", "coin.py", "-a", "vmp", "--draws", "10", "--data", "flips.npz",
                      cwd=files)
    assert done.returncode == 1
    assert done.stderr.strip().endswith("--draws and --seed are for --algorithm gibbs.")


@pytest.mark.slow
def test_compile_into_a_pipe_that_closes_early_ends_quietly(files):
    """`factorflow compile ... | head -n 1`: the first line, status 0, no traceback."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        ["bash", "-c", f"'{sys.executable}' -m factorflow compile learning.ff -a vmp "
         "--emit graph --data x.csv | head -n 1; exit ${PIPESTATUS[0]}"],
        cwd=files, env=env, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (0, "digraph schedule {\n", "")


@pytest.mark.slow
def test_demo_in_a_subprocess():
    done = factorflow("demo", "two_coins", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "P(both heads) = 0.250000" in done.stdout
    assert "P(first heads | not both heads) = 0.333333" in done.stdout


def test_demo_lists_and_runs_every_example(capsys):
    status, out, _ = run_cli(capsys, "demo", "--list")
    assert status == 0
    assert out.split() == sorted(p.stem for p in (ROOT / "examples").glob("*.py"))
    status, _, err = run_cli(capsys, "demo", "two_coin")
    assert status == 1 and "no example 'two_coin'; the examples are" in err


def test_demo_runs_every_example(capsys, monkeypatch):
    """``demo`` runs every script of examples/ as ``__main__``, in order, each under its
    header (the scripts themselves run in tests/test_examples.py: recorded here, not
    run again); ``demo NAME`` runs one for real."""
    ran = []
    monkeypatch.setattr(cli.runpy, "run_path", lambda path, run_name: ran.append(
        (Path(path).name, run_name)))
    status, out, _ = run_cli(capsys, "demo")
    assert status == 0
    scripts = sorted(p.name for p in cli.EXAMPLES.glob("*.py"))
    assert ran == [(name, "__main__") for name in scripts] and len(scripts) > 10
    for name in scripts:
        assert f"=== {name[:-3]} ({name}) ===" in out
    monkeypatch.undo()
    status, out, _ = run_cli(capsys, "demo", "clinical_trial")
    assert status == 0 and "P(effective) = 0.75490196" in out


def test_run_a_python_model_with_npz_data(files, capsys):
    status, out, err = run_cli(capsys, "run", str(files / "coin.py"), "--data",
                               str(files / "flips.npz"))
    assert status == 0, err
    row = out.splitlines()[3].split()
    assert row[:2] == ["p", "Beta"]
    assert_close(float(row[2]), 5 / 7, rtol=1e-5)          # Beta(1 + 4, 1 + 1)
    assert row[4:] == ["alpha=5,", "beta=2"]


def test_run_with_netcdf_data_and_plate_rows(tmp_path, capsys):
    y = np.random.default_rng(1).normal(size=(4, 3))
    (tmp_path / "hier.ff").write_text("mu[j] ~ Gaussian(0, 1); tau[j] ~ Gamma(1, 1)\n"
                                      "y[i, j] ~ Gaussian(mu[j], tau[j])\n")
    xr.Dataset({"y": (("i", "j"), y)}).to_netcdf(tmp_path / "y.nc", engine="scipy")
    status, out, err = run_cli(capsys, "run", str(tmp_path / "hier.ff"), "-a", "vmp",
                               "--data", str(tmp_path / "y.nc"), "--rows", "2")
    assert status == 0, err
    expected = ff.parse((tmp_path / "hier.ff").read_text(), {"y": y}).infer("vmp")
    rows = out.splitlines()[3:]
    assert [r.split()[0] for r in rows] == ["mu[0]", "mu[1]", "...", "tau[0]", "tau[1]",
                                            "..."]
    assert rows[2].strip() == "... 1 more of mu"
    assert_close(float(rows[1].split()[2]), expected["mu"].mean[1], rtol=1e-5)
    assert_close(float(rows[4].split()[2]), expected["tau"].mean[1], rtol=1e-5)


def test_compile_emits_source_schedule_and_graph(files, capsys):
    model = ff.parse(LEARNING, {"x": [5.0, 7.0]}, name="learning",
                     filename=str(files / "learning.ff"))
    compiled = model.compile("vmp")
    common = (str(files / "learning.ff"), "-a", "vmp", "-d", str(files / "x.csv"))
    assert run_cli(capsys, "compile", *common)[1] == compiled.source
    assert run_cli(capsys, "compile", *common, "--emit", "schedule")[1] == \
        f"{compiled.schedule}\n"
    assert run_cli(capsys, "compile", *common, "--emit", "graph")[1].startswith(
        "digraph schedule {")
    for stage in cli.stage_names("vmp"):
        out = run_cli(capsys, "compile", *common, "--emit", "ir", "--after", stage)[1]
        assert out == compiled.compilation.text(stage)
    status, _, err = run_cli(capsys, "compile", *common, "--after", "gates")
    assert status == 1 and "use it with --emit ir" in err


@pytest.mark.parametrize("data, expected", [
    ("z\n5.0\n7.0\n", "If 'x' is observed, data has no 'x'; otherwise give the size, e.g. "
     "data={'n': 3}.\n    x[n] ~ Gaussian(mean, prec)\n    ^\n(the data file "),
    ("x,y\n5.0,1\n7.0\n", "x.csv, row 3: 1 cells, but the header names 2 columns."),
    ("x\n5.0\nseven\n", "column 'x', row 3 holds 'seven'; a column is all numbers or all "
     "true/false."),
    ("x\n5.0\ntrue\n", "column 'x', row 3 holds true/false among numbers"),
    ("x,y\n5.0,1\n,2\n", "column 'x', row 3 holds an empty cell"),
], ids=["missing", "ragged", "not-a-number", "mixed", "empty"])
def test_bad_csv_data_is_named(files, capsys, data, expected):
    (files / "x.csv").write_text(data)
    status, out, err = run_cli(capsys, "run", str(files / "learning.ff"), "-a", "vmp",
                               "-d", str(files / "x.csv"))
    assert status == 1 and out == ""
    assert expected in err
    if "(the data file" in expected:
        assert err.rstrip().endswith("x.csv holds ['z'])")


def test_csv_columns_read_as_the_narrowest_type(tmp_path):
    (tmp_path / "d.csv").write_text("b, i ,f\nTrue,1,1\nfalse,-2,2.5\n")
    data = cli.load_data(tmp_path / "d.csv")
    assert data["b"].dtype == bool and data["b"].tolist() == [True, False]
    assert data["i"].dtype.kind == "i" and data["i"].tolist() == [1, -2]
    assert data["f"].dtype.kind == "f" and data["f"].tolist() == [1.0, 2.5]


def test_python_model_data_missing_or_misshapen(files, capsys):
    np.savez(files / "other.npz", coins=np.ones(5, bool))
    status, _, err = run_cli(capsys, "run", str(files / "coin.py"), "-d",
                             str(files / "other.npz"))
    assert status == 1
    assert "the model needs values for ['coin_flips'] (ff.Data)" in err and "['coins']" in err
    np.savez(files / "short.npz", coin_flips=np.ones(3, bool))
    status, _, err = run_cli(capsys, "run", str(files / "coin.py"), "-d",
                             str(files / "short.npz"))
    assert status == 1 and "short.npz" in err and "'coin_flips'" in err and "(3,)" in err


@pytest.mark.parametrize("args, expected", [
    (("run", "nowhere.ff"), "model file 'nowhere.ff' does not exist"),
    (("run", "{dir}/x.csv"), "a model is a .py file (defining `model`) or a .ff file"),
    (("run", "{dir}/learning.ff", "-d", "{dir}/data.json"), "unknown data file type '.json'"),
    (("run", "{dir}/empty.py"), "must define a module-level `model` (an ff.Model); `model` "
     "is nothing"),
], ids=["no-model", "not-a-model", "json", "no-model-variable"])
def test_bad_files_are_named(files, capsys, args, expected):
    (files / "empty.py").write_text("x = 1\n")
    (files / "data.json").write_text("{}")
    status, _, err = run_cli(capsys, *(a.format(dir=files) for a in args))
    assert status == 1 and expected in err
