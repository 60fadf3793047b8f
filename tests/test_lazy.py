"""``import factorflow`` leaves SciPy's heavy modules, egglog and xarray unloaded
(structural, not timed: ``benchmarks/bench_import.py`` prints the time)."""

import json
import os
import subprocess
import sys

import scipy.special

import factorflow.lazy as lazy

HEAVY = ("scipy.stats", "scipy.special", "scipy.sparse", "egglog", "xarray", "graphviz",
         "pandas", "matplotlib", "tqdm")


def test_import_factorflow_loads_no_heavy_module() -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    code = ("import sys, json, factorflow as ff; "
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True)
    assert json.loads(out.stdout) == []


def test_lazy_module_is_the_module_once_used() -> None:
    special = lazy.lazy_module("scipy.special")
    assert "gammaln" not in vars(special)
    assert special.gammaln is scipy.special.gammaln
    assert vars(special)["gammaln"] is scipy.special.gammaln   # kept: no second lookup
    assert special.digamma(1.0) == scipy.special.digamma(1.0)
    assert "digamma" in dir(special)
