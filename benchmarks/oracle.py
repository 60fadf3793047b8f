"""The differential-testing oracle at length: thousands of random models, EP and VMP each
checked against exact inference (the checks of ``tests/oracle/test_oracle_*.py``).

Prints a table of models tried, passed and failed by family and algorithm, with the
failures by kind (an exception and its type, a wrong marginal, a wrong log Z, a VMP bound
above log Z or decreasing, a NaN, a run that neither converged nor warned), and writes the
first and the smallest repro of each distinct failure (its kind and, for an exception, its
normalised message) to a Markdown file; ``--shrink`` also shrinks each of those statement
by statement while it fails the same way (``tests.oracle.shrink``).

``--families new`` runs fuzz15's generators instead (non-conjugate links, Wishart
precisions, ``ff.sum`` over a plate, deterministic nodes: ``tests/oracle/test_oracle_{links,
wishart,sums}.py``, whose checks assert; a failed assertion counts as a wrong number),
``all`` both; their repros are the smallest seen (the shrinker knows the classic specs).

Run: ``python benchmarks/oracle.py [--n 5000] [--seed 0] [--jobs 2] [--repros FILE]
[--shrink BUDGET] [--families classic|new|all]``.
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import re
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

from tests.oracle import links, models  # noqa: E402
from tests.oracle import test_oracle_discrete as discrete_plan  # noqa: E402
from tests.oracle import test_oracle_gaussian as gaussian_plan  # noqa: E402
from tests.oracle import test_oracle_links as links_plan  # noqa: E402
from tests.oracle import test_oracle_quadrature as quadrature_plan  # noqa: E402
from tests.oracle import test_oracle_sums as sums_plan  # noqa: E402
from tests.oracle import test_oracle_wishart as wishart_plan  # noqa: E402
from tests.oracle.checks import KINDS, Failure, describe  # noqa: E402
from tests.oracle.shrink import shrink  # noqa: E402
from tests.oracle.spec import Spec  # noqa: E402

FAMILIES = {  # name: (strategy, module holding ep_checks / vmp_checks, share of --n)
    "discrete": (lambda: models.discrete(max_configurations=1024), discrete_plan, 0.3),
    "linear-Gaussian": (lambda: models.linear_gaussian(), gaussian_plan, 0.2),
    "gated linear-Gaussian": (lambda: models.linear_gaussian(gated=True), gaussian_plan,
                              0.25),
    "one continuous": (lambda: models.one_continuous(), quadrature_plan, 0.25),
}
ALGORITHMS = ("ep", "vmp")


class _AssertPlan:
    """A plan from fuzz15's generators, whose checks assert (``tests/oracle/test_oracle_
    {links,wishart,sums}.py``): each failed assertion or exception becomes a Failure."""

    def __init__(self, **checks):
        self.checks = checks
        self.algorithms = tuple(a for a in ALGORITHMS if a in checks)

    def _run(self, algorithm: str, spec) -> SimpleNamespace:
        out = SimpleNamespace(failures=[])
        check = self.checks.get(algorithm)
        if check is None:
            return out
        try:
            check(spec)
        except AssertionError as e:
            what = str(e).split("\n")[0]
            kind = "bound above logZ" if "above" in what else \
                "wrong logZ" if ("log Z" in what or "log evidence" in what
                                 or "bound" in what) else "wrong marginal"
            out.failures.append(Failure(kind, algorithm, what))
        except Exception as e:  # noqa: BLE001  (every exception is a finding)
            out.failures.append(Failure("exception", algorithm,
                                        f"{type(e).__name__}: {str(e)[:300]}"))
        return out

    def ep_checks(self, spec):
        return self._run("ep", spec)

    def vmp_checks(self, spec):
        return self._run("vmp", spec)


#: fuzz15's generators (``--families all``): references without factorflow; the share of
#: --n each gets when chosen
NEW_FAMILIES = {
    "links": (lambda: links.link_models(),
              _AssertPlan(ep=links_plan.ep_check, vmp=links_plan.vmp_check), 0.1),
    "Wishart": (lambda: wishart_plan.wishart_models(latent_mean=False),
                _AssertPlan(vmp=wishart_plan.known_mean_check), 0.05),
    "Wishart, latent mean": (lambda: wishart_plan.wishart_models(latent_mean=True),
                             _AssertPlan(vmp=wishart_plan.latent_mean_check), 0.05),
    "sum over a plate": (lambda: sums_plan.sum_models(),
                         _AssertPlan(ep=lambda s: sums_plan.sum_check(s, "ep"),
                                     vmp=lambda s: sums_plan.sum_check(s, "vmp")), 0.05),
    "deterministic node": (lambda: sums_plan.node_models(),
                           _AssertPlan(vmp=sums_plan.node_check), 0.05),
}


def _size(spec) -> int:
    """A spec's size for picking the smallest repro (the new families: its code's length)."""
    return spec.size() if isinstance(spec, Spec) else len(str(spec))


def _family(name: str) -> tuple:
    """(strategy, plan, share) of a family, classic or new (looked up by name, so that a
    worker process finds it)."""
    return FAMILIES[name] if name in FAMILIES else NEW_FAMILIES[name]


def signature(failure) -> str:
    """What makes two failures the same finding: algorithm, kind, and for an exception its
    type and message with names and numbers blanked out."""
    if failure.kind != "exception":
        return f"{failure.algorithm}: {failure.kind}"
    message = re.sub(r"<oracle model>:\d+: ", "", failure.what)
    message = re.sub(r"'[^']*'|\"[^\"]*\"|\(\d+(, ?\d+)*,?\)|\b\d+(\.\d+)?\b|"
                     r"\b[a-z]{1,2}\d+\w*", "_", message)
    return f"{failure.algorithm}: exception {message[:140]}"


def specs_of(family: str, count: int, seed_value: int) -> list:
    strategy, _, _ = _family(family)
    out: list = []

    @seed(seed_value)
    @settings(max_examples=count, deadline=None, database=None,
              phases=(Phase.generate,), suppress_health_check=list(HealthCheck))
    @given(strategy())
    def collect(spec):
        out.append(spec)

    collect()
    return out


def run_family(job: tuple[str, int, int]) -> list[tuple]:
    """Every model of one family through both plans: (algorithm, spec, [failures])."""
    family, count, seed_value = job
    _, plan, _ = _family(family)
    records = []
    for spec in specs_of(family, count, seed_value):
        for algorithm in getattr(plan, "algorithms", ALGORITHMS):
            check = getattr(plan, f"{algorithm}_checks")(spec)
            records.append((algorithm, spec, [(signature(f), f.kind, str(f))
                                              for f in check.failures]))
    return records


def table(results: dict[str, list[tuple]]) -> str:
    short = {"exception": "exception", "not finite": "NaN/inf", "wrong logZ": "wrong logZ",
             "wrong marginal": "wrong marg.", "bound above logZ": "bound>logZ",
             "bound decreased": "bound decr.", "not converged": "no conv."}
    head = f"{'family':23s} {'alg':4s} {'tried':>6s} {'passed':>6s} {'failed':>6s} " + \
        " ".join(f"{short[k]:>11s}" for k in KINDS)
    lines = [head, "-" * len(head)]
    totals = collections.Counter()
    for family, records in results.items():
        for algorithm in ALGORITHMS:
            rows = [r for r in records if r[0] == algorithm]
            if not rows:  # a family checked under the other algorithm only
                continue
            kinds = collections.Counter(k for _, _, fs in rows for k in {f[1] for f in fs})
            failed = sum(1 for _, _, fs in rows if fs)
            totals.update({"tried": len(rows), "failed": failed} | kinds)
            lines.append(f"{family:23s} {algorithm:4s} {len(rows):6d} {len(rows) - failed:6d} "
                         f"{failed:6d} " + " ".join(f"{kinds[k]:11d}" for k in KINDS))
    lines.append("-" * len(head))
    lines.append(f"{'all':23s} {'':4s} {totals['tried']:6d} "
                 f"{totals['tried'] - totals['failed']:6d} {totals['failed']:6d} "
                 + " ".join(f"{totals[k]:11d}" for k in KINDS))
    return "\n".join(lines)


def exceptions_table(results: dict[str, list[tuple]]) -> str:
    counts = collections.Counter()
    for family, records in results.items():
        for _, _, fs in records:
            for sig, kind, _ in {f[0]: f for f in fs}.values():
                if kind == "exception":
                    counts[(family, sig)] += 1
    lines = ["models  family                  failure"]
    for (family, sig), n in counts.most_common():
        lines.append(f"{n:6d}  {family:23s} {sig}")
    return "\n".join(lines)


def findings(results: dict[str, list[tuple]]) -> dict[str, dict]:
    """Per distinct failure (an exception's normalised message; a wrong number by family):
    how many models, the first repro and the smallest."""
    out: dict[str, dict] = {}
    for family, records in results.items():
        for _, spec, fs in records:
            firsts = {}  # one failure per distinct finding and model
            for sig, kind, text in fs:
                firsts.setdefault(sig if kind == "exception" else f"{sig} [{family}]",
                                  (sig, text))
            for key, (sig, text) in firsts.items():
                entry = out.setdefault(key, {"count": 0, "first": None, "smallest": None,
                                             "family": family, "signature": sig})
                entry["count"] += 1
                if entry["first"] is None:
                    entry["first"] = (spec, text)
                if entry["smallest"] is None or _size(spec) < _size(entry["smallest"][0]):
                    entry["smallest"] = (spec, text, family)
    return out


def minimal(sig: str, family: str, spec, budget: int) -> tuple:
    """The smallest seen model of this failure, shrunk statement by statement while it
    still fails the same way (``tests.oracle.shrink``)."""
    _, plan, _ = _family(family)
    checks = getattr(plan, f"{sig.split(':')[0]}_checks")

    def fails(candidate) -> bool:
        return any(signature(f) == sig for f in checks(candidate).failures)

    small = shrink(spec, fails, budget)
    text = [str(f) for f in checks(small).failures if signature(f) == sig]
    return small, text[0]


def _minimal_job(job: tuple) -> tuple:
    return job[0], minimal(*job[1:])


def _describe(spec) -> str:
    try:
        return describe(spec)
    except Exception as e:  # noqa: BLE001  (a report must not stop at one model)
        return f"(not described: {type(e).__name__}: {e})"


def write_repros(path: Path, found: dict[str, dict], minimal: dict[str, tuple]) -> None:
    lines = ["# Oracle failures: one repro per distinct failure", ""]
    for sig, entry in sorted(found.items(), key=lambda kv: -kv[1]["count"]):
        lines += [f"## {sig}", "", f"{entry['count']} models ({entry['family']} first).", ""]
        chosen = minimal.get(sig) or entry["smallest"][:2]
        spec, text = chosen
        label = "shrunk" if sig in minimal else "smallest seen"
        lines += [f"{label}:", "", "```python", str(spec).rstrip(), "```", "", "```",
                  text, "```", "", "exact answer and factorflow's (200 iterations):", "",
                  "```", _describe(spec), "```", ""]
        if entry["first"][0] != spec:
            lines += ["first seen:", "", "```python", str(entry["first"][0]).rstrip(), "```",
                      "", "```", entry["first"][1], "```", ""]
    path.write_text("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=5000, help="models in all (default 5000)")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed (default 0)")
    parser.add_argument("--jobs", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--repros", default="oracle_repros.md",
                        help="where to write the repros (default oracle_repros.md)")
    parser.add_argument("--families", default="classic", choices=("classic", "new", "all"),
                        help="'classic' (the four families, default: seeds stay comparable), "
                        "'new' (fuzz15's: links, Wishart, sums, nodes) or 'all'")
    parser.add_argument("--shrink", type=int, default=0, metavar="BUDGET",
                        help="also shrink the smallest model of each distinct failure, "
                        "trying up to BUDGET simplifications each (default 0: no)")
    args = parser.parse_args()
    chosen = {"classic": FAMILIES, "new": NEW_FAMILIES,
              "all": {**FAMILIES, **NEW_FAMILIES}}[args.families]
    start = time.perf_counter()
    shares = sum(share for _, _, share in chosen.values())
    jobs = [(family, max(1, round(args.n * share / shares)), args.seed + i)
            for i, (family, (_, _, share)) in enumerate(chosen.items())]
    with multiprocessing.Pool(args.jobs) as pool:
        results = dict(zip(chosen, pool.map(run_family, jobs), strict=True))
    seconds = time.perf_counter() - start
    models_run = sum(count for _, count, _ in jobs)
    print(f"Oracle: {models_run} random models (seed {args.seed}), each with EP and VMP "
          f"(where the family has both), in {seconds:.0f} s\n")
    print(table(results))
    print("\nExceptions by family (models):")
    print(exceptions_table(results))
    found = findings(results)
    shrunk = {}
    if args.shrink:
        jobs = [(key, e["signature"], e["smallest"][2], e["smallest"][0], args.shrink)
                for key, e in found.items() if isinstance(e["smallest"][0], Spec)]
        with multiprocessing.Pool(args.jobs) as pool:
            shrunk = dict(pool.map(_minimal_job, jobs))
    write_repros(Path(args.repros), found, shrunk)
    print(f"\n{len(found)} distinct failures; repros in {args.repros}")


if __name__ == "__main__":
    main()
