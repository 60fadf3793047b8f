"""``benchmarks/run.py``, the README's benchmark table, at ``--quick`` sizes: it runs, and
each model's factorflow rows reach the bound of its hand-written NumPy reference (the
table's claim that the systems it times compute the same thing)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def test_the_benchmark_table_runs_and_its_systems_agree(capsys):
    sys.path.insert(0, str(ROOT))
    from benchmarks import run

    rows = run.main(["--quick"])
    printed = capsys.readouterr().out
    by_model: dict[str, dict[str, tuple]] = {}
    for label, system, _, seconds, _, value, _ in rows:
        assert seconds > 0, (label, system)
        assert label in printed and system in printed
        by_model.setdefault(label, {})[system] = value
    mixtures = [label for label in by_model if label.startswith("VMP mixture")]
    assert len(mixtures) == 2, by_model
    for label in mixtures:
        systems = by_model[label]
        hand = systems["hand-written NumPy"]
        for system in ("factorflow numpy", "factorflow numpy, trace=False"):
            assert abs(systems[system] - hand) <= 1e-9 * abs(hand), (label, system)
    assert all(np.isfinite(v) for s in by_model.values() for v in s.values() if v is not None)
