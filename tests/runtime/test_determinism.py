"""Same model and data, same bits (issue 10, item 4): the generated source and every float
of the results are identical across runs and across processes, whatever the string-hash
seed of each process."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from factorflow.distributions import Gaussian

ROOT = Path(__file__).resolve().parent.parent.parent


def _models() -> list[tuple[str, object, str, dict]]:
    """(label, model, algorithm, run options): plates, gates, a switch with a user
    initialisation, a gather, a user factor and an expression node."""
    import runpy

    from tests.model.test_nodes import build
    from tests.runtime.test_gated_models import mixture
    from tests.runtime.test_indexing import _skill_model

    clinical = runpy.run_path(str(ROOT / "examples" / "clinical_trial.py"))["build"]()
    init = {"means": Gaussian(np.array([0.0, 5.0, 10.0]), np.ones(3))}
    return [
        ("clinical ep", clinical, "ep", {}),
        ("mixture vmp", mixture(), "vmp", {"init": init}),
        ("mixture ep", mixture(), "ep", {"init": init}),
        ("skills ep", _skill_model([1.0, 0.0, 0.5], [0, 2, 1], [1, 0, 2]), "ep", {}),
        ("nodes vmp", build(), "vmp", {}),
    ]


def fingerprint() -> dict[str, list[str]]:
    """Per model: the SHA-256 of its source, ``repr`` of the log evidence and the SHA-256
    of the bytes of every natural-parameter array of every posterior."""
    out: dict[str, list[str]] = {}
    for label, model, algorithm, options in _models():
        init = options.get("init", {})
        compiled = model.compile(algorithm, init=tuple(init))
        result = compiled.run(iterations=20, init=init)
        prints = [hashlib.sha256(compiled.source.encode()).hexdigest(),
                  repr(result.log_evidence)]
        for name in sorted(result.posteriors):
            post = result[name]
            for eta in (post.value,) if hasattr(post, "value") else post.eta:
                arr = np.ascontiguousarray(np.asarray(eta, dtype=float))
                prints.append(f"{name} {arr.shape} {hashlib.sha256(arr.tobytes()).hexdigest()}")
        out[label] = prints
    return out


def test_results_are_bit_identical_across_processes():
    code = ("import json; from tests.runtime.test_determinism import fingerprint; "
            "print(json.dumps(fingerprint()))")
    runs = []
    for seed in ("0", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(ROOT))
        runs.append(subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True))
    outputs = []
    for proc in runs:
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        outputs.append(json.loads(stdout))
    here = fingerprint()  # and this process, where the models were built once already
    assert outputs[0] == outputs[1] == here
    assert len(here) == 5 and all(len(v) > 2 for v in here.values())

