"""SVI steps per second: the NumPy backend beside the JAX backend, paired in one run.

``model.infer("svi", minibatch=B, steps=S, rng=0)`` on N = 10⁶ points (``--n``), for
B = 1,000 and 10,000 (``--batches``), on two models:

- ``mixture1d``: issue 14's 1-D mixture (``benchmarks/mixture_reference.py``: K = 10
  components, Dirichlet weights, Gaussian means, Gamma precisions, ``ff.Switch(z)``;
  the means started at the data's quantiles), the local z re-derived every step;
- ``gaussian``: an unknown mean and precision of 1-D data (``_normal_gamma``).

Each step runs the VMP program twice (the plate empty, then on the minibatch) and takes
the natural-gradient step.  For each (model, B) the two backends run alternately,
``--repeats`` times each, calls of 1 step and of 1 + S steps (``--steps``), and the
table gives from the best of each: wall milliseconds per step (the difference of the
two calls over the S extra steps) and steps per second, the CPU milliseconds of every
thread per step, the ratios JAX ÷ NumPy of steps per second (wall and CPU), "draw CPU
ms/step", the part of either backend's step spent drawing its minibatch on the host
(``svi.minibatches``: NumPy's ``Generator.choice`` without replacement, sorted; timed
alone), "per call", what a call costs besides its steps (the data checked, the sweep
that gives the priors, and on JAX the data sent to the device), JAX's compile time (its
first call of 1 + S steps less a timed one: the two sweeps traced and the chunk of
steps compiled, once per model, B and chunk length), and the largest relative
difference of a global's natural parameter between the two backends after the same
steps on the same minibatches (same ``rng``).  The header gives the machine's cores,
its 1-minute load average and JAX's device.

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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import learning_gaussian as lg  # noqa: E402


def build(name: str, n: int) -> tuple[ff.Model, dict]:
    """The model ``name`` on ``n`` points and its SVI ``init``."""
    if name == "mixture1d":
        x = mix.data(10, n)
        return mix.model(x, 10), mix.factorflow_init(x, 10)
    return lg.build(np.random.default_rng(0).normal(2.0, 1.5, n)), {}


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
    """One row: both backends on the same model and B, alternately, calls of 1 and of
    1 + ``steps`` steps; per step the difference over the extra steps."""
    model, init = build(name, n)
    svi = {"minibatch": batch, "rng": 0, "init": init}
    for backend in ("numpy", "jax"):  # compiled (JAX: both chunk lengths traced)
        _call(model, backend, **svi, steps=1)
    first = _call(model, "jax", **svi, steps=1 + steps)[0]
    best = {(b, s): (np.inf, np.inf) for b in ("numpy", "jax") for s in (1, 1 + steps)}
    results = {}
    for _ in range(repeats):
        for backend in ("numpy", "jax"):
            for count in (1, 1 + steps):
                wall, cpu, results[backend] = _call(model, backend, **svi, steps=count)
                old = best[backend, count]
                best[backend, count] = (min(old[0], wall), min(old[1], cpu))
    row = {"model": name, "B": batch, "compile": first - best["jax", 1 + steps][0],
           "diff": _difference(results["numpy"], results["jax"])}
    for backend in ("numpy", "jax"):
        one, more = best[backend, 1], best[backend, 1 + steps]
        per = ((more[0] - one[0]) / steps, (more[1] - one[1]) / steps)
        row[backend] = per + (one[0] - per[0],)  # wall, CPU a step; wall a call besides
    draw = minibatches(np.random.default_rng(0), n, batch)
    begin = time.process_time()
    draw(steps)
    row["draw"] = (time.process_time() - begin) / steps
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=10**6)
    parser.add_argument("--batches", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", nargs="+", default=["mixture1d", "gaussian"],
                        choices=["mixture1d", "gaussian"])
    args = parser.parse_args(argv)
    import jax
    print(f"SVI steps, NumPy vs JAX backend: N = {args.n:,}, {args.steps} steps a call, "
          f"best of {args.repeats}; {os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.2f}, JAX on {jax.devices()[0].platform}")
    print()
    head = ("| model | B | NumPy ms/step | JAX ms/step | NumPy steps/s | JAX steps/s | "
            "JAX ÷ NumPy (wall) | CPU ms/step NumPy / JAX | JAX ÷ NumPy (CPU) | "
            "draw CPU ms/step | per call ms NumPy / JAX | JAX compile s | max rel. diff |")
    print(head)
    print("|" + "---|" * head.count(" | ") + "---|")
    for name in args.models:
        for batch in args.batches:
            r = measure(name, args.n, batch, args.steps, args.repeats)
            (nw, nc, ncall), (jw, jc, jcall) = r["numpy"], r["jax"]
            print(f"| {name} | {batch:,} | {1e3 * nw:.3f} | {1e3 * jw:.3f} | {1 / nw:,.0f} | "
                  f"{1 / jw:,.0f} | {nw / jw:.2f}× | {1e3 * nc:.3f} / {1e3 * jc:.3f} | "
                  f"{nc / jc:.2f}× | {1e3 * r['draw']:.3f} | {1e3 * ncall:.0f} / "
                  f"{1e3 * jcall:.0f} | {r['compile']:.2f} | {r['diff']:.1e} |", flush=True)


if __name__ == "__main__":
    main()
