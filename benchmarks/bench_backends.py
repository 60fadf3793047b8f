"""Backends side by side: time per sweep of the NumPy backend and the JAX backend (CPU).

The model is ``examples/gaussian_mixture.py``'s: K = 3 components in D = 2 dimensions
with Dirichlet weights, VectorGaussian means and Wishart precisions, ``ff.Switch(z)``,
under VMP, on that example's data generator at N = 10⁴, 10⁵, 10⁶ (``--big`` adds 10⁷).
Each backend runs ``compiled.run(iterations=S, tolerance=None)`` (the same sweeps, each
followed by the bound, as every run computes it) for S = 1 and S = 1 + ``--sweeps``; the
time per sweep is the difference over the extra sweeps (4, or 4·10⁵/N where that is
more), the best of ``--repeats`` runs each (wall time, and the CPU time of every thread:
on a machine shared with other jobs the wall time mostly measures waiting), and "per
run" is what a run costs besides its sweeps (the initialisation, the final bound, the
data in and the posteriors out).
JAX's first call traces and compiles the program (the "compile" column: that call's time
less a run's); the timed runs reuse it.  The last column checks that the two backends'
posteriors agree (largest relative difference of a natural parameter).  The header
gives the machine's cores, its load (the 1-minute load average before the table) and
``XLA_FLAGS``.

``--model mixture1d`` times issue 14's 1-D mixture instead
(``benchmarks/mixture_reference.py``: K = 10 components, Dirichlet weights, Gaussian
means, Gamma precisions, ``ff.Switch(z)``); ``--model gaussian``
``examples/learning_gaussian.py``'s model (an unknown mean and precision of 1-D data).

``--passes`` prints instead the JAX loop body's passes over arrays of N elements in
the program XLA compiled (fusions, copies, library calls and loops of one sweep and
its bound, at N = 1009, or at each N of ``--sizes``: from 2 · 32768 / K rows a mixture's
responsibilities are normalised in one loop over blocks of rows,
``base._normalize_traced_product``) and the ``exp``/``log`` inside them.

``--bayespy`` prints instead the D-dimensional mixture with Wishart precisions
(``benchmarks/vmixture_reference.py``, the model of ``bench_vectors.py``) at issue 11's
configurations (K = 10, N = 200, D = 2; K = 40, N = 2,000, D = 10; K = 10, N = 10⁶,
D = 2) on both backends and in BayesPy (``bench_vectors._bayespy_mixture``: the same
model, priors, start and update order, the bound every iteration), side by side: ms per
iteration (JAX and NumPy as above; BayesPy the mean over a run of 1 + S iterations, the
best of the same repeats), CPU ms per iteration, BayesPy / JAX in both, and the final
bounds of JAX and BayesPy after the same 1 + S iterations.

Run: ``python benchmarks/bench_backends.py [--sweeps S] [--big] [--sizes N ...]
[--model mixture|mixture1d|gaussian] [--bayespy] [--passes]``.  Timings on a shared
machine are noisy: read the ratios.  Devices: JAX runs on its default device (the CPU
where no GPU is visible; the table says which).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import factorflow as ff

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import gaussian_mixture as gm  # noqa: E402
import learning_gaussian as lg  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import bench_vectors  # noqa: E402
from benchmarks import mixture_reference as mix  # noqa: E402
from benchmarks import vmixture_reference as vref  # noqa: E402


def _time(compiled, sweeps: int, init: dict, repeats: int) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds of every thread) of a run of ``sweeps`` sweeps, the
    best of ``repeats`` runs, and the last result."""
    best, cpu, result = np.inf, np.inf, None
    for _ in range(repeats):
        begin, begin_cpu = time.perf_counter(), time.process_time()
        result = compiled.run(init=init, iterations=sweeps, tolerance=None, progress=False)
        best = min(best, time.perf_counter() - begin)
        cpu = min(cpu, time.process_time() - begin_cpu)
    return best, cpu, result


def _per_sweep(compiled, sweeps: int, init: dict, repeats: int) -> tuple:
    """(wall, CPU) seconds per sweep (the difference of runs of 1 + ``sweeps`` and of 1
    sweep, over ``sweeps``), wall seconds per run besides its sweeps, the longer run's
    result."""
    one, one_cpu, _ = _time(compiled, 1, init, repeats)
    more, more_cpu, result = _time(compiled, 1 + sweeps, init, repeats)
    wall, cpu = (more - one) / sweeps, (more_cpu - one_cpu) / sweeps
    return wall, cpu, one - wall, result


def _difference(a, b, names: tuple[str, ...]) -> float:
    worst = 0.0
    for name in names:
        for x, y in zip(a[name].eta, b[name].eta, strict=True):
            worst = max(worst, float(np.max(np.abs(x - y) / (1 + np.abs(x)), initial=0.0)))
    return worst


def _setup(model_name: str, n: int) -> tuple:
    """The model of ``--model`` on N = ``n`` points, its posteriors' names, its init."""
    if model_name == "mixture":
        model, names = gm.mixture(gm.data(n), 3), ("weights", "means", "precs", "z")
        init = {"means": ff.distributions.VectorGaussian(
            gm.CENTERS + 0.5, np.broadcast_to(np.eye(2), (3, 2, 2)))}
    elif model_name == "mixture1d":
        x = mix.data(10, n)
        model, names = mix.model(x, 10), ("weights", "means", "precs", "z")
        init = mix.factorflow_init(x, 10)
    else:
        model, names = lg.build(np.random.default_rng(0).normal(3.0, 2.0, n)), ("mean", "prec")
        init = {}
    return model, names, init


@functools.cache
def passes(model_name: str, n: int = 1009, **options: Any) -> str:
    """The loop body's passes over arrays with N = ``n`` along an axis in the program XLA
    compiled (``jax.jit(...).lower(...).compile().as_text()``: its fusions, copies and
    library calls, one sweep and its bound), and the ``exp``/``log`` inside them;
    ``options`` go to ``compile`` (``fuse_switch``).  XLA compiles the program once: the
    run is stopped at the jitted function's call, whose arguments it is lowered with
    (cached per arguments: the tests that read the same program share it)."""
    import re

    import jax
    model, _, init = _setup(model_name, n)
    compiled = model.compile("vmp", backend="jax", **({"init": list(init)} if init else {}),
                             **options)
    seen = {}
    real_trace = compiled._trace

    class Stopped(Exception):
        """Raised by the stand-in for the jitted run once it has its arguments."""

    def capture(*args: Any) -> tuple:
        fn, info = real_trace(*args)

        def spy(*args: Any) -> Any:  # the arguments of the run, to lower with
            seen["fn"], seen["args"] = fn, args
            raise Stopped
        return spy, info
    compiled._trace = capture
    try:
        compiled.run(init=init, iterations=3, tolerance=None, progress=False)
    except Stopped:  # (the run ends at the jitted call on purpose: its arguments are seen)
        pass
    finally:
        del compiled._trace
        compiled._traced.clear()
    with jax.enable_x64(True):
        text = seen["fn"].lower(*seen["args"]).compile().as_text()
    comps: dict[str, list[str]] = {}
    for line in text.splitlines():
        head = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
        if head:
            comps[head.group(1)] = []
        elif comps and line.strip() not in ("", "}"):
            comps[list(comps)[-1]].append(line.strip())
    loops = [m.group(1) for lines in comps.values() for line in lines
             for m in [re.search(r"while\(.*body=%?([\w.\-]+)", line)] if m]
    body = [b for b in loops if b.startswith("wide")][-1]  # (the sweeps' loop)

    # (an instruction's shape is one word, or a tuple in parentheses: a loop's)
    shape_op = r"(?:\S+|\(.*?\)) ([\w\-]+)\("
    called = r"(?:calls|body)=%?([\w.\-]+)"

    def ops(comp: str) -> list[str]:
        out = []
        for line in comps.get(comp, []):
            op = re.search(rf"= {shape_op}", line)
            out += [op.group(1)] if op else []
            for inner in re.findall(called, line):
                out += ops(inner)
        return out
    kinds: dict[str, int] = {}
    exp = log = 0
    for line in comps[body]:
        op = re.match(rf"%?[\w.\-]+ = {shape_op}", line)
        if (op is None or op.group(1) in ("get-tuple-element", "tuple", "parameter",
                                          "bitcast", "constant")
                or not re.search(rf"[\[,]{n}[\],]", line)):
            continue
        kinds[op.group(1)] = kinds.get(op.group(1), 0) + 1
        inside = [o for c in re.findall(called, line) for o in ops(c)]
        exp, log = exp + inside.count("exponential"), log + inside.count("log")
    return (f"loop body, N = {n}: {sum(kinds.values())} passes over N-sized arrays "
            f"({', '.join(f'{v} {k}' for k, v in sorted(kinds.items()))}); "
            f"exp {exp}, log {log}")


def row(model_name: str, n: int, sweeps: int, repeats: int) -> str:
    model, names, init = _setup(model_name, n)
    options = {"init": list(init)} if init else {}
    numpy_model = model.compile("vmp", **options)
    jax_model = model.compile("vmp", backend="jax", **options)
    per_numpy, cpu_numpy, run_numpy, a = _per_sweep(numpy_model, sweeps, init, repeats)
    begin = time.perf_counter()
    jax_model.run(init=init, iterations=1, tolerance=None, progress=False)
    first = time.perf_counter() - begin
    per_jax, cpu_jax, run_jax, b = _per_sweep(jax_model, sweeps, init, repeats)
    compile_s = first - (run_jax + per_jax)  # the first call less a run's time
    return (f"| {n:>10,} | {per_numpy * 1e3:8.1f} | {per_jax * 1e3:8.1f} | "
            f"{per_numpy / per_jax:5.1f}× | {cpu_numpy * 1e3:8.1f} | {cpu_jax * 1e3:8.1f} | "
            f"{cpu_numpy / cpu_jax:5.1f}× | {run_numpy * 1e3:7.0f} / {run_jax * 1e3:<7.0f} | "
            f"{compile_s:6.1f} | {_difference(a, b, names):9.1e} |")


def bayespy_row(k: int, n: int, dim: int, sweeps: int, repeats: int) -> str:
    """One line of the ``--bayespy`` table (see the module docstring)."""
    x, start = vref.data(k, n, dim)
    model, init = vref.model(x, k), vref.factorflow_init(start)
    numpy_model = model.compile("vmp", init=["means"])
    jax_model = model.compile("vmp", init=["means"], backend="jax")
    per_numpy, cpu_numpy, _, a = _per_sweep(numpy_model, sweeps, init, repeats)
    begin = time.perf_counter()
    jax_model.run(init=init, iterations=1, tolerance=None, progress=False)
    first = time.perf_counter() - begin
    per_jax, cpu_jax, run_jax, b = _per_sweep(jax_model, sweeps, init, repeats)
    compile_s = first - (run_jax + per_jax)
    bp = bench_vectors._bayespy_mixture(x, start, 1 + sweeps, repeats if n < 10**5 else 1)
    diff = _difference(a, b, ("weights", "means", "precs", "z"))
    head = (f"| {k} | {n:,} | {dim} | {per_numpy * 1e3:.2f} | {per_jax * 1e3:.2f} | ")
    if bp is None:
        return head + f"— | — | — | — | {compile_s:.1f} | {b.log_evidence:.6f} | — | {diff:.1e} |"
    bp_ms, bp_bound, bp_cpu = bp
    return head + (f"{bp_ms:.2f} | {bp_ms / (per_jax * 1e3):.1f}× | "
                   f"{cpu_jax * 1e3:.2f} / {bp_cpu:.2f} | {bp_cpu / (cpu_jax * 1e3):.1f}× | "
                   f"{compile_s:.1f} | {b.log_evidence:.6f} | {bp_bound:.6f} | "
                   f"{abs(b.log_evidence - bp_bound):.1e} | {diff:.1e} |")


def bayespy_table(sweeps: int | None, repeats: int) -> None:
    """The ``--bayespy`` table: issue 11's configurations (``bench_vectors``'s)."""
    print("| K | N | D | NumPy ms/iter | JAX ms/iter | BayesPy ms/iter | BayesPy / JAX "
          "| CPU ms JAX / BayesPy | CPU ratio | JAX compile s | JAX bound | BayesPy bound "
          "| bound diff | NumPy–JAX rel. diff |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for k, n, dim, default in bench_vectors.MIXTURE_SIZES:
        print(bayespy_row(k, n, dim, sweeps or default, repeats), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=None,
                        help="the sweeps the longer timed run adds (default: 4, and "
                             "4·10⁵/N where that is more)")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs (best kept)")
    parser.add_argument("--big", action="store_true", help="add N = 10^7")
    parser.add_argument("--sizes", type=int, nargs="*", help="N values instead")
    parser.add_argument("--model", choices=("mixture", "mixture1d", "gaussian"),
                        default="mixture")
    parser.add_argument("--bayespy", action="store_true",
                        help="the D-dimensional mixture on both backends and in BayesPy "
                             "at issue 11's configurations")
    parser.add_argument("--passes", action="store_true",
                        help="print the JAX loop body's passes over N-sized arrays "
                             "(XLA's compiled program, N = 1009 or --sizes) instead of "
                             "timing")
    args = parser.parse_args()
    import jax
    if args.passes:
        for n in args.sizes or [1009]:
            print(f"{args.model}: {passes(args.model, n)}", flush=True)
        return
    if args.bayespy:
        print(f"D-dimensional Gaussian mixture (Wishart precisions), VMP, the bound every "
              f"iteration; JAX {jax.__version__} on {jax.devices()[0].platform.upper()}; "
              f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; "
              f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}", flush=True)
        bayespy_table(args.sweeps, args.repeats)
        return
    sizes = args.sizes or [10**4, 10**5, 10**6] + ([10**7] if args.big else [])
    title = {"mixture": "Gaussian mixture (K = 3, D = 2)",
             "mixture1d": "1-D Gaussian mixture (K = 10, issue 14's)",
             "gaussian": "Learning a Gaussian (mean and precision)"}[args.model]
    print(f"{title}, VMP; JAX {jax.__version__} on {jax.devices()[0].platform.upper()}; "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; "
          f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}", flush=True)
    print("| N | NumPy ms/sweep | JAX ms/sweep | wall ratio | NumPy CPU ms | JAX CPU ms "
          "| CPU ratio | per run ms NumPy / JAX | JAX compile s | max rel. diff |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in sizes:
        sweeps = args.sweeps or max(4, 400_000 // n)  # small N: enough to time
        print(row(args.model, n, sweeps, args.repeats), flush=True)


if __name__ == "__main__":
    main()
