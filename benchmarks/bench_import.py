"""Import time: ``import factorflow`` against the modules it stands on, side by side.

Each row is the median over ``--repeats`` fresh interpreters of the time the import
statement takes (``time.perf_counter`` around it, interpreter start-up excluded), so the
rows compare in one run on one (noisy) machine.  factorflow loads ``scipy.special``,
``scipy.stats``, ``scipy.sparse``, ``egglog``, ``xarray`` and ``graphviz`` where first
used (``factorflow.lazy``); the last column lists which of those an import left loaded.
The target is ``import factorflow`` under 0.3 s.

Run: ``python benchmarks/bench_import.py [--repeats 7]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

HEAVY = ("scipy.special", "scipy.stats", "scipy.sparse", "egglog", "xarray", "graphviz",
         "pandas", "matplotlib", "tqdm")

PROBE = """
import json, sys, time
t = time.perf_counter()
import {module}
seconds = time.perf_counter() - t
print(json.dumps([seconds, [m for m in {heavy!r} if m in sys.modules]]))
"""


def time_import(module: str, repeats: int) -> tuple[float, list[str]]:
    """The median seconds ``import module`` takes in a fresh interpreter, and the heavy
    modules it left loaded."""
    times, loaded = [], []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", PROBE.format(module=module, heavy=HEAVY)],
                             capture_output=True, text=True, check=True)
        seconds, loaded = json.loads(out.stdout)
        times.append(seconds)
    return statistics.median(times), loaded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    rows = ["numpy", "scipy.special", "scipy.stats", "egglog", "factorflow"]
    results = {m: time_import(m, args.repeats) for m in rows}
    base = results["factorflow"][0]
    print(f"median of {args.repeats} fresh interpreters")
    print(f"{'import':<16}{'seconds':>9}{'/ factorflow':>14}  heavy modules loaded")
    for module in rows:
        seconds, loaded = results[module]
        print(f"{module:<16}{seconds:>9.3f}{seconds / base:>14.2f}  "
              f"{', '.join(loaded) or '-'}")
    verdict = "under" if base < 0.3 else "OVER"
    print(f"import factorflow: {base:.3f} s ({verdict} the 0.3 s target)")


if __name__ == "__main__":
    main()
