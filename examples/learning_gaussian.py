"""Learning a Gaussian (Infer.NET's tutorial) with VMP: the main demo.

Prints the posteriors, the evidence lower bound, and the size and timing of the
generated inference code.
"""

from __future__ import annotations

import time

import numpy as np

import factorflow as ff


def build(data: np.ndarray | list[float]) -> ff.Model:
    with ff.Model("learning_gaussian") as model:
        mean = ff.Gaussian("mean", 0.0, variance=100.0)
        prec = ff.Gamma("prec", 1.0, rate=1.0)
        n = ff.Range("n", len(data))
        with ff.Plate(n):
            ff.Gaussian("x", mean, precision=prec, observed=data)
    return model


def main() -> dict[str, object]:
    model = build([5.0, 7.0])
    start = time.perf_counter()
    compiled = model.compile("vmp")
    compile_ms = (time.perf_counter() - start) * 1e3
    result = compiled.run(iterations=50)
    state = "converged" if result.converged else "not converged"
    print(f"Learning a Gaussian, VMP, data {{5, 7}}: {result.iterations} of at most 50 "
          f"iterations ({state})")
    print(f"  mean ~ {result['mean']}")
    print(f"  prec ~ {result['prec']}")
    print(f"  evidence lower bound = {result.log_evidence:.6f}")
    lines = compiled.source.count("\n")
    print(f"  generated code: {lines} lines, compiled in {compile_ms:.1f} ms, "
          f"inference in {result.seconds * 1e3:.2f} ms")

    big = np.random.default_rng(0).normal(6.0, 1.5, size=1_000_000)
    start = time.perf_counter()
    result_big = build(big).infer("vmp", iterations=50)
    print(f"  10^6 points: mean ~ {result_big['mean']}, prec ~ {result_big['prec']} "
          f"({(time.perf_counter() - start):.2f} s including compilation)")
    print()
    print(compiled.source)
    return {"result": result, "compiled": compiled}


if __name__ == "__main__":
    main()
