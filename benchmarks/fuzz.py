"""Fuzzing benchmark (issue 10 item 5): thousands of random valid and invalid models.

Every valid model (``tests/fuzz/valid.py``) is compiled and run for EP and VMP; every
invalid one (``tests/fuzz/invalid.py``) must raise an ``ff.ModelError`` subclass naming
its culprit.  The run is derandomized (``--seed``): the same arguments give the same
models.  It prints one table per family, rows by profile (valid) or kind of fault
(invalid) and algorithm, then each kind of failure with its count and its smallest
example; ``--shrink`` asks hypothesis for the minimal model of each kind of failure.

Columns, valid models: tried; compiled (reached running); finite (ran, every posterior's
natural parameters free of NaN and proper, log evidence finite); skipped (finite, and EP
warned that it kept an old message where an input was improper, naming the variable and
the statement: EP's documented behaviour, ``converged`` False if it still skips at the
end); unsupported
(UnsupportedFactorError naming the statement: expected for factor/algorithm pairs without
operators); improper (ImproperMessageError naming the variable and the statement);
refused (a construct refused by design, which the generator wrote knowingly: the
ModelError it predicted, naming what it predicted, under the algorithms it predicted it
for: VMP alone refuses two reads of one case outside its gate); then the failures: nonfinite,
improper-unnamed, unsupported-unnamed, unsupported-unexpected (raised although the
registry has every operator the model needs), model-error (a ModelError for a valid
model), unrefused (a predicted refusal that did not come, or named something else),
crash (any other exception), warning, timeout.
Invalid models: tried; right (the ModelError subclass expected, naming the culprit);
something else: unnamed (the right class, not naming the culprit), wrong-class (another
ModelError subclass), other (not a ModelError); none (nothing raised); timeout.

Run: ``python benchmarks/fuzz.py [--n 10000] [--seed 0] [--jobs 2] [--shrink]
[--out results.json]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.fuzz.invalid import INVALID_KINDS, invalid_models  # noqa: E402
from tests.fuzz.spec import ALGORITHMS, ModelSpec, failure_report, run  # noqa: E402
from tests.fuzz.valid import PROFILES, valid_models  # noqa: E402

VALID_COLUMNS = ("tried", "compiled", "finite", "skipped", "unsupported", "improper", "refused",
                 "failed", "nonfinite", "improper-unnamed", "unsupported-unnamed",
                 "unsupported-unexpected", "model-error", "unrefused", "crash", "warning",
                 "timeout")
INVALID_COLUMNS = ("tried", "right", "failed", "unnamed", "wrong-class", "other", "none",
                   "timeout")
#: column headings (the module docstring says what each counts)
SHORT = {"unsupported": "unsupp", "improper": "improp", "nonfinite": "nonfin",
         "improper-unnamed": "improp-unn", "unsupported-unnamed": "unsupp-unn",
         "unsupported-unexpected": "unsupp-unexp", "model-error": "model-err",
         "wrong-class": "wrong-cls", "compiled": "compiled", "refused": "refusd",
         "unrefused": "unrefusd"}
#: seconds one model may take for one algorithm
TIMEOUT = 30.0


def _strategy(family: str, row: str | None) -> st.SearchStrategy[ModelSpec]:
    return valid_models(row) if family == "valid" else invalid_models(row)


def _run_family(family: str, n: int, seed_value: int, row: str | None = None
                ) -> dict[str, Any]:
    """Run ``n`` models of ``family``; counts per (row, algorithm, outcome) and, per
    failure signature, its count and smallest example."""
    counts: Counter[tuple[str, str, str]] = Counter()
    failures: dict[str, dict[str, Any]] = {}

    @seed(seed_value)
    @settings(max_examples=n, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(_strategy(family, row))
    def one(spec: ModelSpec) -> None:
        for algorithm in ALGORITHMS:
            outcome = run(spec, algorithm, TIMEOUT)
            counts[(spec.kind, algorithm, "tried")] += 1
            counts[(spec.kind, algorithm, outcome.kind)] += 1
            if spec.valid and outcome.stage == "run":
                counts[(spec.kind, algorithm, "compiled")] += 1
            if outcome.failed:
                counts[(spec.kind, algorithm, "failed")] += 1
                key = outcome.signature()
                entry = failures.setdefault(key, {"count": 0, "row": spec.kind,
                                                  "algorithm": algorithm})
                entry["count"] += 1
                report = failure_report(spec, algorithm, outcome)
                if "example" not in entry or len(report) < len(entry["example"]):
                    entry.update(example=report, row=spec.kind, algorithm=algorithm)
    one()
    return {"counts": [[*k, v] for k, v in counts.items()], "failures": failures}


def _job(args: tuple[str, str, int, int]) -> dict[str, Any]:
    family, row, n, seed_value = args
    return _run_family(family, n, seed_value, row)


def _merge(parts: list[dict[str, Any]]) -> tuple[Counter, dict[str, dict[str, Any]]]:
    counts: Counter = Counter()
    failures: dict[str, dict[str, Any]] = {}
    for part in parts:
        for row, algorithm, column, value in part["counts"]:
            counts[(row, algorithm, column)] += value
        for key, entry in part["failures"].items():
            if key not in failures:
                failures[key] = dict(entry)
                continue
            failures[key]["count"] += entry["count"]
            if len(entry["example"]) < len(failures[key]["example"]):
                failures[key].update(example=entry["example"], row=entry["row"],
                                     algorithm=entry["algorithm"])
    return counts, failures


def table(counts: Counter, rows: tuple[str, ...], columns: tuple[str, ...]) -> str:
    """The counts as a text table: one line per (row, algorithm), then totals."""
    w = 1 + max(len(SHORT.get(c, c)) for c in columns)
    head = f"{'':<15}{'alg':<5}" + "".join(f"{SHORT.get(c, c):>{w}}" for c in columns)
    lines = [head, "-" * len(head)]
    totals: Counter = Counter()
    for row in rows:
        for algorithm in ALGORITHMS:
            values = [counts[(row, algorithm, c)] for c in columns]
            if not values[0]:
                continue
            for c, v in zip(columns, values, strict=True):
                totals[(algorithm, c)] += v
            lines.append(f"{row:<15}{algorithm:<5}" + "".join(f"{v:>{w}}" for v in values))
    lines.append("-" * len(head))
    for algorithm in ALGORITHMS:
        lines.append(f"{'total':<15}{algorithm:<5}"
                     + "".join(f"{totals[(algorithm, c)]:>{w}}" for c in columns))
    return "\n".join(lines)


def shrink(family: str, key: str, entry: dict[str, Any], n: int, seed_value: int
           ) -> str | None:
    """The minimal model whose failure has signature ``key``: hypothesis searches the
    failure's row with the run's seed and shrinks the first example it meets."""
    found: list[tuple[ModelSpec, str, Any]] = []

    @seed(seed_value)
    @settings(max_examples=n, deadline=None, database=None,
              phases=[Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck),
              report_multiple_bugs=False)
    @given(_strategy(family, entry["row"]))
    def probe(spec: ModelSpec) -> None:
        outcome = run(spec, entry["algorithm"], TIMEOUT)
        if outcome.failed and outcome.signature() == key:
            found.append((spec, entry["algorithm"], outcome))
            raise AssertionError(key)
    try:
        probe()
    except AssertionError:
        spec, algorithm, outcome = found[-1]
        return failure_report(spec, algorithm, outcome)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10000,
                        help="models of each family (valid, invalid)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1, help="processes")
    parser.add_argument("--shrink", action="store_true",
                        help="print the minimal model of each kind of failure")
    parser.add_argument("--out", type=Path, help="write counts and failures as JSON")
    args = parser.parse_args()

    report: dict[str, Any] = {}
    for family, rows, columns in (("valid", PROFILES, VALID_COLUMNS),
                                  ("invalid", INVALID_KINDS, INVALID_COLUMNS)):
        start = time.perf_counter()
        # each row (profile or kind of fault) gets its share of the models
        jobs = [(family, row, args.n // len(rows) + (j < args.n % len(rows)),
                 args.seed * 1000 + j) for j, row in enumerate(rows)]
        if args.jobs > 1:
            with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
                parts = pool.map(_job, jobs)
        else:
            parts = [_job(job) for job in jobs]
        counts, failures = _merge(parts)
        seconds = time.perf_counter() - start
        models = sum(counts[(r, ALGORITHMS[0], "tried")] for r in rows)
        print(f"\n{family} models: {models} ({seconds:.0f} s, seed {args.seed}, "
              f"{args.jobs} jobs)\n")
        print(table(counts, rows, columns))
        print(f"\n{family}: {len(failures)} kinds of failure "
              f"({sum(e['count'] for e in failures.values())} failed runs)")
        for key, entry in sorted(failures.items(), key=lambda kv: -kv[1]["count"]):
            print(f"\n[{entry['count']}x, {entry['row']}, {entry['algorithm']}] {key}")
            if args.shrink:
                minimal = shrink(family, key, entry, 2000, args.seed)
                if minimal is not None:
                    entry["minimal"] = minimal
            print(entry.get("minimal", entry["example"]))
        report[family] = {"counts": [[*k, v] for k, v in counts.items()],
                          "failures": failures, "seconds": seconds}
        sys.stdout.flush()
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
