"""Import time: ``import factorflow`` against the modules it stands on, side by side.

Each row is the median over ``--repeats`` fresh interpreters of the time the import
statement takes (``time.perf_counter`` around it, interpreter start-up excluded), so the
rows compare in one run on one (noisy) machine.  Bytecode is cached as for an installed
package (in a temporary ``PYTHONPYCACHEPREFIX``, after one warm-up import, even where
``PYTHONDONTWRITEBYTECODE`` is set): otherwise every run would compile factorflow's
sources again, which is not what a user's import costs.  factorflow loads ``scipy.special``,
``scipy.stats``, ``scipy.sparse``, ``egglog``, ``xarray`` and ``graphviz`` where first
used (``factorflow.lazy``); the last column lists which of those an import left loaded.
The target is ``import factorflow`` under 0.3 s.

Run: ``python benchmarks/bench_import.py [--repeats 7]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HEAVY = ("scipy.special", "scipy.stats", "scipy.sparse", "egglog", "xarray", "graphviz",
         "pandas", "matplotlib", "tqdm")

PROBE = """
import json, sys, time
t = time.perf_counter()
import {module}
seconds = time.perf_counter() - t
print(json.dumps([seconds, [m for m in {heavy!r} if m in sys.modules]]))
"""


def time_import(module: str, repeats: int, env: dict[str, str]) -> tuple[float, list[str]]:
    """The median seconds ``import module`` takes in a fresh interpreter (after one
    warm-up that writes its bytecode), and the heavy modules it left loaded."""
    times, loaded = [], []
    for _ in range(repeats + 1):
        out = subprocess.run([sys.executable, "-c", PROBE.format(module=module, heavy=HEAVY)],
                             capture_output=True, text=True, check=True, env=env)
        seconds, loaded = json.loads(out.stdout)
        times.append(seconds)
    return statistics.median(times[1:]), loaded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    # the last row is what ``import factorflow`` loaded before SciPy was made lazy
    rows = ["numpy", "scipy.special", "scipy.stats", "egglog", "factorflow",
            "factorflow, scipy.stats"]
    with tempfile.TemporaryDirectory() as cache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = cache
        results = {m: time_import(m, args.repeats, env) for m in rows}
    base = results["factorflow"][0]
    print(f"median of {args.repeats} fresh interpreters")
    print(f"{'import':<24}{'seconds':>9}{'/ factorflow':>14}  heavy modules loaded")
    for module in rows:
        seconds, loaded = results[module]
        print(f"{module:<24}{seconds:>9.3f}{seconds / base:>14.2f}  "
              f"{', '.join(loaded) or '-'}")
    verdict = "under" if base < 0.3 else "OVER"
    print(f"import factorflow: {base:.3f} s ({verdict} the 0.3 s target)")


if __name__ == "__main__":
    main()
