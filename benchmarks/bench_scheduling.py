"""Scheduling time and peak memory on generated VMP-shaped dependency graphs.

The graph is what VMP compiles a chain model into: variables x_0 .. x_{T-1}, each with
an observation factor (a constant message, outside the loop) and a pairwise factor
to the next variable. Per factor edge there are two messages: factor -> variable reads
the other variables' messages into the factor (and requires the first of them), and
variable -> factor is triggered by every message into the variable (VMP: it is the
variable's current marginal). The message from a pairwise factor to its second
variable also needs the message to its first variable fresh (shared work). A marginal
per variable reads the messages into it and is an output.

Run: ``python benchmarks/bench_scheduling.py`` (``--sizes 500 5000``, ``--repeat 3``).
Prints one row per size (best time of the repeats; peak memory traced with tracemalloc
in a separate run) and the exponent of a power law fitted to the times.
"""

from __future__ import annotations

import argparse
import gc
import math
import time
import tracemalloc

from factorflow.transforms.dependencies import Dep, DependencyGraph
from factorflow.transforms.scheduling import schedule

D, R, T, F = Dep.DEPENDENCY, Dep.REQUIRED, Dep.TRIGGER, Dep.FRESH


def vmp_chain(statements: int) -> DependencyGraph:
    """A VMP chain model with ``statements`` updates (6 per variable, less 4), at least 8."""
    length = max(2, (statements + 4) // 6)
    nodes: list[str] = []
    edges: dict[tuple[str, str], Dep] = {}
    into: dict[int, list[str]] = {t: [] for t in range(length)}  # messages into x_t
    out_of: dict[int, list[str]] = {t: [] for t in range(length)}  # messages out of x_t
    for t in range(length):
        nodes.append(f"obs{t}>x{t}")
        into[t].append(f"obs{t}>x{t}")
    for t in range(length - 1):
        to_first, to_second = f"f{t}>x{t}", f"f{t}>x{t + 1}"
        from_first, from_second = f"x{t}>f{t}", f"x{t + 1}>f{t}"
        nodes += [from_first, from_second, to_first, to_second]
        edges[from_second, to_first] = R
        edges[from_first, to_second] = R
        edges[to_first, to_second] = F
        into[t].append(to_first)
        into[t + 1].append(to_second)
        out_of[t].append(from_first)
        out_of[t + 1].append(from_second)
    for t in range(length):
        for message in into[t]:
            for outgoing in out_of[t]:
                edges[message, outgoing] = T
        nodes.append(f"q(x{t})")
        for message in into[t]:
            edges[message, f"q(x{t})"] = D
    outputs = frozenset(f"q(x{t})" for t in range(length))
    return DependencyGraph(tuple(nodes), edges, outputs)


def measure(statements: int, repeat: int) -> tuple[int, float, float, int]:
    """(statements, best seconds to schedule of ``repeat`` runs on fresh graphs, peak MiB
    while scheduling, scheduled updates). Graph construction is not timed; building its
    index (adjacency, closures) is, as part of scheduling."""
    seconds = math.inf
    for _ in range(repeat):
        graph = vmp_chain(statements)
        gc.collect()
        start = time.perf_counter()
        result = schedule(graph)
        seconds = min(seconds, time.perf_counter() - start)
    graph = vmp_chain(statements)  # fresh graph: its cached index counts again
    gc.collect()
    tracemalloc.start()
    schedule(graph)
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    updates = sum(map(len, result.init)) + sum(map(len, result.loop)) + len(result.prefix)
    updates += sum(map(len, result.suffix))
    return len(graph.nodes), seconds, peak, updates


def fitted_exponent(rows: list[tuple[int, float, float, int]]) -> float:
    """Least-squares slope of log(time) against log(statements)."""
    xs = [math.log(n) for n, *_ in rows]
    ys = [math.log(s) for _, s, *_ in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 5000, 50000])
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    args = parser.parse_args()
    rows = [measure(n, args.repeat) for n in args.sizes]
    print(f"{'statements':>10}  {'seconds':>8}  {'peak MiB':>8}  {'updates':>8}  {'us/stmt':>7}")
    for n, seconds, peak, updates in rows:
        print(f"{n:>10}  {seconds:>8.3f}  {peak:>8.1f}  {updates:>8}  {1e6 * seconds / n:>7.1f}")
    if len(rows) > 1:
        print(f"fitted exponent (time ~ statements^k): k = {fitted_exponent(rows):.2f}")


if __name__ == "__main__":
    main()
