"""SVI steps per second: the NumPy backend beside the JAX backend, paired in one run.

``model.infer("svi", minibatch=B, steps=S, rng=0)`` on N = 10⁶ points (``--n``), for
B = 1,000 and 10,000 (``--batches``), on two models:

- ``mixture1d``: issue 14's 1-D mixture (``benchmarks/mixture_reference.py``: K = 10
  components, Dirichlet weights, Gaussian means, Gamma precisions, ``ff.Switch(z)``;
  the means started at the data's quantiles), the local z re-derived every step;
- ``gaussian``: an unknown mean and precision of 1-D data (``_normal_gamma``).

Each step runs the VMP program twice (the plate empty, then on the minibatch) and takes
the natural-gradient step.  For each (model, B) the two backends run alternately,
``--repeats`` times each, and the table gives the best: wall seconds per step and steps
per second of a whole call (``S`` steps, ``--steps``; the call's own costs — the data
checked, the JAX backend's data sent to the device once — spread over them), the CPU
seconds of every thread per step, the ratio JAX ÷ NumPy of steps per second (wall and
CPU), JAX's compile time (its first call less a timed one: the two sweeps traced and
the chunk of steps compiled, once per model, B and chunk length), and the largest
relative difference of a global's natural parameter between the two backends after the
same steps on the same minibatches (same ``rng``).  "draw CPU ms/step" is the part of
either backend's step spent drawing its minibatch on the host (``svi.minibatches``:
NumPy's ``Generator.choice`` without replacement, sorted), timed alone.  The header
gives the machine's cores, its 1-minute load average and JAX's device.

Run: ``python benchmarks/bench_svi.py [--n N] [--batches B ...] [--steps S]
[--repeats R] [--models mixture1d gaussian]``.  On a machine shared with other jobs the
wall time mostly measures waiting: read the CPU columns and the ratios.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

import factorflow as ff

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import mixture_reference as mix  # noqa: E402
from factorflow.runtime.svi import minibatches  # noqa: E402


def _gaussian(x: np.ndarray) -> ff.Model:
    with ff.Model("normal_gamma") as model:
        mean = ff.Gaussian("mean", 0.0, variance=100.0)
        prec = ff.Gamma("prec", 1.0, rate=1.0)
        with ff.Plate(ff.Range("n", x.size)):
            ff.Gaussian("x", mean, precision=prec, observed=x)
    return model


def build(name: str, n: int) -> tuple[ff.Model, dict]:
    """The model ``name`` on ``n`` points and its SVI ``init``."""
    if name == "mixture1d":
        x = mix.data(10, n)
        return mix.model(x, 10), mix.factorflow_init(x, 10)
    return _gaussian(np.random.default_rng(0).normal(2.0, 1.5, n)), {}


def _call(model: ff.Model, backend: str, **svi) -> tuple[float, float, ff.Result]:
    begin, begin_cpu = time.perf_counter(), time.process_time()
    result = model.infer("svi", **svi, backend=backend)
    return time.perf_counter() - begin, time.process_time() - begin_cpu, result


def _difference(a: ff.Result, b: ff.Result) -> float:
    """The largest |Δη| / (1 + |η|) over the globals' natural parameters."""
    return max(float(np.max(np.abs(np.asarray(e) - f) / (1.0 + np.abs(e))))
               for name in a.posteriors
               for e, f in zip(a[name].eta, b[name].eta, strict=True))


def measure(name: str, n: int, batch: int, steps: int, repeats: int) -> dict:
    """One row: both backends on the same model, B and steps, alternately."""
    model, init = build(name, n)
    svi = {"minibatch": batch, "steps": steps, "rng": 0, "init": init}
    _call(model, "numpy", **(svi | {"steps": 1}))  # the NumPy program compiled
    first = _call(model, "jax", **svi)[0]       # traced and compiled
    best = {"numpy": (np.inf, np.inf), "jax": (np.inf, np.inf)}
    results = {}
    for _ in range(repeats):
        for backend in ("numpy", "jax"):
            wall, cpu, results[backend] = _call(model, backend, **svi)
            best[backend] = (min(best[backend][0], wall), min(best[backend][1], cpu))
    draw = minibatches(np.random.default_rng(0), n, batch)
    begin = time.process_time()
    draw(steps)
    return {"model": name, "B": batch, "numpy": best["numpy"], "jax": best["jax"],
            "draw": time.process_time() - begin,
            "compile": first - best["jax"][0],
            "diff": _difference(results["numpy"], results["jax"])}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=10**6)
    parser.add_argument("--batches", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--models", nargs="+", default=["mixture1d", "gaussian"],
                        choices=["mixture1d", "gaussian"])
    args = parser.parse_args(argv)
    import jax
    print(f"SVI steps, NumPy vs JAX backend: N = {args.n:,}, {args.steps} steps a call, "
          f"best of {args.repeats}; {os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.2f}, JAX on {jax.devices()[0].platform}")
    print()
    head = ("| model | B | NumPy ms/step | JAX ms/step | NumPy steps/s | JAX steps/s | "
            "JAX ÷ NumPy (wall) | NumPy CPU ms/step | JAX CPU ms/step | "
            "JAX ÷ NumPy (CPU) | draw CPU ms/step | JAX compile s | max rel. diff |")
    print(head)
    print("|" + "---|" * head.count(" | ") + "---|")
    for name in args.models:
        for batch in args.batches:
            r = measure(name, args.n, batch, args.steps, args.repeats)
            (nw, nc), (jw, jc) = r["numpy"], r["jax"]
            s = args.steps
            print(f"| {name} | {batch:,} | {1e3 * nw / s:.3f} | {1e3 * jw / s:.3f} | "
                  f"{s / nw:,.0f} | {s / jw:,.0f} | {nw / jw:.2f}× | {1e3 * nc / s:.3f} | "
                  f"{1e3 * jc / s:.3f} | {nc / jc:.2f}× | {1e3 * r['draw'] / s:.3f} | "
                  f"{r['compile']:.2f} | "
                  f"{r['diff']:.1e} |", flush=True)


if __name__ == "__main__":
    main()
