"""Where a small-N sweep's time goes: µs per call of each operator of the generated
program, timed in the running sweep, for the programs of the README's small-N
paragraph, side by side with another factorflow checkout.

Each callable the generated program calls (the factors' operators, ``check_proper`` by
posterior, the kernels) and each product of two messages is wrapped with a CPU-time
clock (``time.thread_time``: a loaded machine's waits are not counted); a call made
inside another wrapped one is not counted again.  Over ``--sweeps`` sweeps the table
prints, per callable, its calls a sweep and the median µs per call (the median: a
machine shared with other work puts a few calls far out), for this checkout and, with
``--baseline``, the other one (each in its own interpreter), and their ratio.

Programs (``--model``): ``mixture`` — the 1-D mixture of ``benchmarks/bench_mixture.py``
at K = 10, N = 200 (``--fused``: compiled with ``fuse_switch=True``); ``gaussian`` —
learning a Gaussian from N = 1,000 points (mean ~ N(0, 100), precision ~ Gamma(1, 1));
``vectors`` — the D = 2 mixture of
``benchmarks/vmixture_reference.py`` at K = 10, N = 200.

With ``--lines`` the table is per statement of the generated program instead: each
top-level statement of the sweep (and of ``evidence()``, which ``--trace`` runs after
every sweep) is timed where it stands (``time.perf_counter``, the median over the
sweeps), by its text; the statements a sweep right after ``evidence()`` skips are
timed where they run.

With ``--cprofile N`` the table is the N functions (the factors' operators and the
``Distribution`` operations under them, NumPy's Python wrappers) that take the most
time of their own under ``cProfile`` over the sweeps, µs a sweep (cProfile's own cost
included: the ranking, not the figures, is what it tells).

``--size K,N`` sets K and N of the two mixtures (``--size 10,1000000 --sweeps 5``:
the per-statement table at N = 10⁶).

Run: ``python benchmarks/profile_sweep.py [--model M] [--trace] [--lines | --cprofile N]
[--size K,N] [--baseline PATH]``.
"""

from __future__ import annotations

import argparse
import ast
import collections
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SIZE = ["10,200"]  # (``--size``: the workers read it as FF_PROFILE_SIZE)
FUSED = [False]  # (``--fused``: FF_PROFILE_FUSED)


def program(model: str, trace: bool) -> Any:
    """``run(sweeps)`` of ``model``'s compiled program, and the compiled program (K, N
    from ``FF_PROFILE_SIZE``, "K,N", where set: ``--size``)."""
    import numpy as np

    sys.path.append(str(ROOT))  # (for ``benchmarks``: PYTHONPATH's factorflow comes first)
    import factorflow as ff
    from benchmarks import mixture_reference as mix
    from benchmarks import vmixture_reference as vref
    warnings.simplefilter("ignore", ff.ConvergenceWarning)
    options = dict(tolerance=None, progress=False, trace=trace)
    fuse = {"fuse_switch": True} if os.environ.get("FF_PROFILE_FUSED") == "1" else {}
    k, n = map(int, os.environ.get("FF_PROFILE_SIZE", "10,200").split(","))
    if model == "mixture":
        x = mix.data(k, n)
        compiled = mix.model(x, k).compile("vmp", init=["means"], **fuse)
        init = mix.factorflow_init(x, k)
    elif model == "vectors":
        x, start = vref.data(k, n, 2)
        compiled = vref.model(x, k).compile("vmp", init=["means"])
        init = vref.factorflow_init(start)
    else:
        sys.path.append(str(ROOT / "examples"))
        import learning_gaussian
        x = np.random.default_rng(1).normal(3.0, 2.0, 1000)
        compiled, init = learning_gaussian.build(x).compile("vmp"), None
    return (lambda s: compiled.run(iterations=s, init=init, **options)), compiled


def worker(model: str, trace: bool, sweeps: int) -> dict[str, Any]:
    """{callable: [calls a sweep, median µs per call]} of ``sweeps`` sweeps."""
    from factorflow.distributions.base import Distribution
    run, compiled = program(model, trace)
    names = compiled._infer.__globals__
    times: dict[str, list[float]] = collections.defaultdict(list)
    inside = [False]
    clock = time.thread_time

    def timed(label: Any, fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if inside[0]:
                return fn(*args, **kwargs)
            name = (f"check_proper: {args[1].split(' (')[0]}"
                    if label == "check_proper" and len(args) > 1 else label)
            inside[0] = True
            start = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                times[name].append(clock() - start)
                inside[0] = False
        return call

    for name, value in list(names.items()):
        if callable(value) and not isinstance(value, type) and not name.startswith("_") \
                and name not in ("np", "first_sweep"):
            names[name] = timed(name, value)
    Distribution.__mul__ = timed("product of two messages", Distribution.__mul__)
    run(3)
    times.clear()
    run(sweeps)
    return {name: [len(ts) / sweeps, sorted(ts)[len(ts) // 2] * 1e6]
            for name, ts in times.items() if len(ts) >= sweeps // 2}


class _Clocked(ast.NodeTransformer):
    """Each statement of the sweep's loop and of ``evidence()`` (an ``if`` whose test is
    ``not refreshed``: each statement under it) between two reads of a clock, its time
    appended to ``_times[i]``; ``labels[i]`` its text."""

    def __init__(self) -> None:
        self.labels: list[str] = []

    def clocked(self, body: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for stmt in body:
            if isinstance(stmt, ast.If) and ast.unparse(stmt.test) == "not refreshed":
                stmt.body = self.clocked(stmt.body)
                out.append(stmt)
                continue
            i = len(self.labels)
            self.labels.append(" ".join(ast.unparse(stmt).split()))
            wrapped = ast.parse(f"_t{i} = _clock()\ntry:\n    pass\nfinally:\n"
                                f"    _times[{i}].append(_clock() - _t{i})").body
            wrapped[1].body = [stmt]
            out.extend(wrapped)
        return out

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        self.generic_visit(node)
        if node.name == "evidence":
            node.body = self.clocked(node.body)
        return node

    def visit_For(self, node: ast.For) -> ast.For:
        if isinstance(node.target, ast.Name) and node.target.id == "iteration":
            node.body = self.clocked(node.body)
        return node


def lines_worker(model: str, trace: bool, sweeps: int) -> dict[str, Any]:
    """{statement: [runs a sweep, median µs per run]} of ``sweeps`` sweeps (``--lines``),
    and the program's own sweep time (uninstrumented, µs)."""
    from factorflow.runtime.compiled import NAMESPACE, _resolve
    run, compiled = program(model, trace)
    run(3)
    start = time.process_time()  # (CPU: a loaded machine's waits are not counted)
    run(sweeps)
    plain = (time.process_time() - start) / sweeps * 1e6
    clock = _Clocked()
    tree = clock.visit(ast.parse(compiled.source))
    ast.fix_missing_locations(tree)
    namespace = dict(NAMESPACE, _clock=time.perf_counter)
    for ident, (kind, key) in compiled.generated.symbols.items():
        namespace[ident] = _resolve(kind, key)
    times: list[list[float]] = [[] for _ in clock.labels]
    namespace["_times"] = times
    exec(compile(tree, "<clocked>", "exec"), namespace)
    compiled._infer = namespace["infer"]
    run(3)
    for t in times:
        t.clear()
    run(sweeps)
    out: dict[str, Any] = {}
    for label, ts in zip(clock.labels, times, strict=True):
        if len(ts) >= sweeps // 2:
            key = label if label not in out else f"{label} (again)"
            out[key] = [len(ts) / sweeps, sorted(ts)[len(ts) // 2] * 1e6]
    out[" sweep (uninstrumented, µs)"] = [0, plain]
    return out


def cprofile_worker(model: str, trace: bool, sweeps: int) -> dict[str, Any]:
    """{function: [calls a sweep, µs a sweep of its own time]} under ``cProfile``."""
    import cProfile
    import pstats
    run, _ = program(model, trace)
    run(3)
    profiler = cProfile.Profile(time.process_time)
    profiler.runcall(run, sweeps)
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    out = {}
    for (path, line, name), (_, calls, own, _, _) in stats.items():
        where = f"{Path(path).parent.name}/{Path(path).name}:{line}" if line else path
        out[f"{name} ({where})"] = [calls / sweeps, own / sweeps * 1e6]
    return out


def measure(path: Path, model: str, trace: bool, sweeps: int, lines: bool | str = False
            ) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(path), OMP_NUM_THREADS="1", FF_PROFILE_SIZE=SIZE[0],
               OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               FF_PROFILE_FUSED=str(int(FUSED[0])))
    out = subprocess.run([sys.executable, __file__, "--worker", model, str(int(trace)),
                          str(sweeps), str(lines if isinstance(lines, str) else int(lines))],
                         env=env, capture_output=True, text=True, check=True, cwd=str(ROOT))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=("mixture", "gaussian", "vectors"),
                        default="mixture")
    parser.add_argument("--trace", action="store_true", help="the bound after every sweep")
    parser.add_argument("--sweeps", type=int, default=300)
    parser.add_argument("--lines", action="store_true",
                        help="µs per statement of the generated program instead")
    parser.add_argument("--cprofile", type=int, metavar="N",
                        help="the N functions of most time of their own under cProfile")
    parser.add_argument("--baseline", type=Path, help="another factorflow checkout")
    parser.add_argument("--size", default="10,200", metavar="K,N",
                        help="K, N of the mixtures (default 10,200)")
    parser.add_argument("--fused", action="store_true",
                        help="the 1-D mixture with compile(fuse_switch=True)")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    SIZE[0] = args.size
    FUSED[0] = args.fused
    if args.worker:
        model, trace, sweeps, lines = args.worker
        work = {"1": lines_worker, "cprofile": cprofile_worker}.get(lines, worker)
        print(json.dumps(work(model, trace == "1", int(sweeps))))
        return
    if args.lines:
        return print_lines(args)
    if args.cprofile:
        return print_cprofile(args)
    now = measure(ROOT, args.model, args.trace, args.sweeps)
    before = measure(args.baseline, args.model, args.trace, args.sweeps) \
        if args.baseline else {}
    print(f"{args.model}, trace={args.trace}: median µs per call in the running sweep")
    print(f"{'callable':<58} {'calls':>6} {'µs':>8} {'before':>8} {'× before':>9}")
    for name in sorted(now, key=lambda n: -now[n][0] * now[n][1]):
        calls, us = now[name]
        old = before.get(name)
        tail = f" {old[1]:8.1f} {us / old[1]:9.2f}" if old else ""
        print(f"{name[:58]:<58} {calls:6.1f} {us:8.1f}{tail}")
    total = sum(c * us for c, us in now.values())
    old_total = sum(c * us for c, us in before.values())
    print(f"{'total of the above, µs a sweep':<58} {'':6} {total:8.1f}"
          + (f" {old_total:8.1f} {total / old_total:9.2f}" if before else ""))


def print_cprofile(args: argparse.Namespace) -> None:
    """The ``--cprofile`` table: the functions of most own time, calls and µs a sweep, with
    ``--baseline`` the other checkout's beside them (by the same name and place)."""
    now = measure(ROOT, args.model, args.trace, args.sweeps, "cprofile")
    before = measure(args.baseline, args.model, args.trace, args.sweeps, "cprofile") \
        if args.baseline else {}
    print(f"{args.model}, trace={args.trace}: own time under cProfile, µs a sweep")
    print(f"{'function':<78} {'calls':>6} {'µs':>8} {'before':>8}")
    for name in sorted(now, key=lambda n: -now[n][1])[: args.cprofile]:
        calls, us = now[name]
        old = before.get(name)
        print(f"{name[:78]:<78} {calls:6.1f} {us:8.1f}" + (f" {old[1]:8.1f}" if old else ""))
    print(f"{'total':<78} {'':6} {sum(us for _, us in now.values()):8.1f}"
          + (f" {sum(us for _, us in before.values()):8.1f}" if before else ""))


def print_lines(args: argparse.Namespace) -> None:
    """The ``--lines`` table: each statement in the order it runs, runs a sweep and median
    µs; with ``--baseline`` the other checkout's table after it, and both totals."""
    tables = [("this checkout", measure(ROOT, args.model, args.trace, args.sweeps, True))]
    if args.baseline:
        tables.append(("baseline", measure(args.baseline, args.model, args.trace,
                                           args.sweeps, True)))
    for title, table in tables:
        plain = table.pop(" sweep (uninstrumented, µs)")[1]
        print(f"{args.model}, trace={args.trace}, {title}: {len(table)} statements, "
              f"median µs per run")
        for label, (runs, us) in table.items():
            print(f"  {runs:4.1f} {us:8.1f}  {label[:110]}")
        # (the hook runs evidence() with the bound: its statements are counted apart)
        total = sum(r * us for label, (r, us) in table.items()
                    if not (args.trace and label.startswith("if on_iteration")))
        print(f"  total of the medians {total:.1f} µs; the sweep uninstrumented "
              f"{plain:.1f} µs of CPU (with the run's set-up and final bound)\n")


if __name__ == "__main__":
    main()
