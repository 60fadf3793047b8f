"""The ``factorflow`` command line: run a model, show each compiler stage, run the demos.

    factorflow run MODEL.py|MODEL.ff [--algorithm ep|vmp|gibbs] [--data FILE] [--iterations N]
                   [--draws N --seed S]    (Gibbs: the sample mean and sd per element)
    factorflow compile MODEL [--emit source|schedule|ir|graph] [--after PASS] [--data FILE]
    factorflow demo [NAME] [--list]

A ``MODEL.py`` defines a module-level ``model`` (an ``ff.Model``); its ``ff.Data`` values
come from ``--data``.  A ``MODEL.ff`` is DSL text (``ff.parse``); ``--data`` gives its
observed values, constants and plate sizes.  Data files: ``.csv`` (a header row naming
the columns; each column one 1-D array), ``.npz`` (NumPy) or ``.nc`` (netCDF, each data
variable an array).  Errors are printed as one message (exit status 1), never a traceback.
"""

from __future__ import annotations

import argparse
import csv
import os
import runpy
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from factorflow.errors import DataError, ModelError, ParseError
from factorflow.factors.registry import ALGORITHMS
from factorflow.model.core import Model

#: the examples `factorflow demo` runs (a checkout's examples/ folder)
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


# ----- data files ---------------------------------------------------------------------
def _column(name: str, cells: list[str], path: Path) -> np.ndarray:
    """A CSV column as booleans, integers or floats (the narrowest that reads every cell);
    DataError naming the column and row of a cell that is none of them."""
    cells = [c.strip() for c in cells]
    logical = [c.lower() in ("true", "false") for c in cells]
    if cells and all(logical):
        return np.array([c.lower() == "true" for c in cells])
    for row, (cell, is_logical) in enumerate(zip(cells, logical, strict=True), start=2):
        if is_logical or not _is_float(cell):
            what = ("true/false among numbers" if is_logical
                    else "an empty cell" if not cell else repr(cell))
            raise DataError(f"{path}: column {name!r}, row {row} holds {what}; a column is "
                            "all numbers or all true/false.")
    try:
        return np.array([int(c) for c in cells])
    except ValueError:
        return np.array([float(c) for c in cells])


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def load_data(path: str | Path) -> dict[str, Any]:
    """The named arrays in a ``.csv``, ``.npz`` or ``.nc`` file (see the module
    docstring); DataError naming the file for an unreadable or unknown one."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"data file {str(path)!r} does not exist.")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        with path.open(newline="") as f:
            rows = list(csv.reader(f))
        if not rows or not any(h.strip() for h in rows[0]):
            raise DataError(f"{path}: a CSV data file needs a header row naming its columns.")
        header = [h.strip() for h in rows[0]]
        body = [r for r in rows[1:] if any(c.strip() for c in r)]
        for line, row in enumerate(body, start=2):
            if len(row) != len(header):
                raise DataError(f"{path}, row {line}: {len(row)} cells, but the header names "
                                f"{len(header)} columns.")
        return {h: _column(h, [r[i] for r in body], path) for i, h in enumerate(header)}
    if suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as f:
                return {k: f[k] for k in f.files}
        except (OSError, ValueError) as e:
            raise DataError(f"{path}: not a readable .npz file ({e}).") from None
    if suffix == ".nc":
        import xarray as xr
        try:
            with xr.open_dataset(path, engine="scipy") as ds:
                return {str(k): np.asarray(v.values) for k, v in ds.data_vars.items()}
        except (OSError, ValueError, TypeError) as e:
            raise DataError(f"{path}: not a readable netCDF file ({e}).") from None
    raise DataError(f"{path}: unknown data file type {suffix!r}; use .csv, .npz or .nc.")


# ----- models -------------------------------------------------------------------------
def load_model(path: str | Path, data: dict[str, Any], data_file: str | None = None
               ) -> tuple[Model, dict[str, Any]]:
    """The model in ``path`` and the data to run it with: a ``.ff`` file is parsed with
    ``data`` (which it consumes: the run needs none; an error in it says what
    ``data_file`` holds), a ``.py`` file's module-level ``model`` is run with ``data`` as
    its ``ff.Data`` values."""
    from factorflow.text import parse
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"model file {str(path)!r} does not exist.")
    if path.suffix == ".ff":
        try:
            return parse(path.read_text(), data, name=path.stem, filename=str(path)), {}
        except ParseError:
            raise
        except ModelError as e:
            holds = f"the data file {data_file} holds {sorted(data) or 'nothing'}" \
                if data_file else "no --data file was given"
            raise type(e)(f"{e}\n({holds})") from e
    if path.suffix != ".py":
        raise ModelError(f"{path}: a model is a .py file (defining `model`) or a .ff file "
                         "(DSL text).")
    namespace = runpy.run_path(str(path), run_name="factorflow_model")
    model = namespace.get("model")
    if not isinstance(model, Model):
        found = "nothing" if model is None else type(model).__name__
        raise ModelError(f"{path} must define a module-level `model` (an ff.Model); "
                         f"`model` is {found}.")
    return model, data


# ----- output -------------------------------------------------------------------------
def _format(value: Any) -> str:
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        return f"{float(arr):.6g}"
    return "[" + ", ".join(f"{float(v):.4g}" for v in arr.ravel()) + "]"


def posterior_table(result: Any, rows: int = 10) -> str:
    """The posteriors as a text table: one row per plate element (the first ``rows`` of
    each variable), observed variables left out.  A Gibbs ``SamplingResult`` gives the
    sample mean and sd of each element (posterior "samples")."""
    lines: list[list[str]] = [["variable", "posterior", "mean", "sd", "parameters"]]
    sampled = getattr(result, "algorithm", None) == "gibbs"
    for name in result:
        posterior = result[name]
        if not sampled and not hasattr(posterior, "describe"):
            continue  # an observed variable (a point mass)
        shape = (np.shape(posterior.mean)[:len(result.plates[name])] if sampled
                 else posterior.batch_shape)
        elements = list(np.ndindex(*shape))
        for index in elements[:rows]:
            label = name + (f"[{', '.join(map(str, index))}]" if shape else "")
            if sampled:
                lines.append([label, "samples", _format(posterior.mean[index]),
                              _format(posterior.sd[index]), ""])
                continue
            element = posterior[index] if shape else posterior
            mean = getattr(element, "mean", getattr(element, "p", None))
            variance = getattr(element, "variance", None)
            params = ", ".join(f"{k}={_format(v)}" for k, v in element.describe().items())
            lines.append([label, type(element).__name__,
                          "" if mean is None else _format(mean),
                          "" if variance is None else _format(np.sqrt(variance)), params])
        if len(elements) > rows:
            lines.append([f"  ... {len(elements) - rows} more of {name}", "", "", "", ""])
    widths = [max(len(row[i]) for row in lines) for i in range(4)]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths, strict=True))
           + "  " + row[4] for row in lines]
    out.insert(1, "-" * len(out[0]))
    return "\n".join(line.rstrip() for line in out)


def stage_names(algorithm: str) -> list[str]:
    """The names ``--after`` accepts: the lowered model, then each pass of the pipeline."""
    from factorflow.transforms.pipeline import pipeline
    return ["model"] + [stage.name for stage in pipeline(algorithm)]


# ----- commands -----------------------------------------------------------------------
def _run(args: argparse.Namespace) -> None:
    data = load_data(args.data) if args.data else {}
    model, run_data = load_model(args.model, data, args.data)
    missing = [n for n, d in model.data.items() if d.value is None and n not in run_data]
    if missing:
        source = f"the data file {args.data}" if args.data else "no --data file"
        raise DataError(f"the model needs values for {missing} (ff.Data), and {source} "
                        f"gives {'none' if not args.data else sorted(run_data) or 'nothing'}"
                        "; add them to the data file.")
    gibbs = args.algorithm == "gibbs"
    if gibbs and args.iterations is not None:
        raise ModelError("--iterations counts message-passing sweeps; Gibbs sampling "
                         "takes --draws (and --seed).")
    if not gibbs and (args.draws is not None or args.seed is not None):
        raise ModelError("--draws and --seed are for --algorithm gibbs.")
    try:
        if gibbs:
            sampled = model.infer("gibbs", data=run_data or None, draws=args.draws or 1000,
                                  seed=0 if args.seed is None else args.seed)
            print(f"{model.name}: Gibbs sampling, {sampled.chains} chains x "
                  f"{sampled.draws} draws (burn {sampled.burn}, seed {sampled.seed})")
            print(posterior_table(sampled, args.rows))
            return
        result = model.compile(args.algorithm).run(iterations=args.iterations,
                                                   data=run_data or None)
    except DataError as e:
        raise DataError(f"{args.data}: {e}" if args.data else str(e)) from e
    state = "converged" if result.converged else "not converged"
    evidence = "evidence lower bound" if args.algorithm == "vmp" else "log evidence"
    print(f"{model.name}: {args.algorithm.upper()}, {result.iterations} sweeps ({state}), "
          f"{evidence} = {result.log_evidence:.6f}")
    print(posterior_table(result, args.rows))


def _compile(args: argparse.Namespace) -> None:
    known = stage_names(args.algorithm)
    if args.after is not None and args.after not in known:
        raise ModelError(f"unknown pass {args.after!r}; the passes are {', '.join(known)}.")
    if args.after is not None and args.emit != "ir":
        raise ModelError("--after selects the IR after a pass; use it with --emit ir.")
    data = load_data(args.data) if args.data else {}
    model, _ = load_model(args.model, data, args.data)
    compiled = model.compile(args.algorithm)
    if args.emit == "source":
        print(compiled.source, end="")
    elif args.emit == "schedule":
        print(compiled.schedule)
    elif args.emit == "graph":
        print(compiled.schedule.to_graphviz())
    else:
        print(compiled.compilation.text(args.after or known[-1]), end="")


def _demo(args: argparse.Namespace) -> None:
    scripts = sorted(EXAMPLES.glob("*.py")) if EXAMPLES.is_dir() else []
    if not scripts:
        raise ModelError(f"no examples at {EXAMPLES}; `factorflow demo` runs the examples/ "
                         "of a source checkout (git clone, then pip install -e .).")
    names = [p.stem for p in scripts]
    if args.list:
        print("\n".join(names))
        return
    if args.name is not None:
        if args.name not in names:
            raise ModelError(f"no example {args.name!r}; the examples are {', '.join(names)}.")
        scripts = [EXAMPLES / f"{args.name}.py"]
    for path in scripts:
        print(f"=== {path.stem} ({path.name}) ===")
        runpy.run_path(str(path), run_name="__main__")
        print()


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="factorflow", description=(
        "Compile Bayesian models to message-passing programs (EP, VMP) and run them."))
    commands = top.add_subparsers(dest="command", required=True)

    def model_command(name: str, helptext: str,
                      algorithms: Sequence[str] = ALGORITHMS) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=helptext, description=helptext)
        sub.add_argument("model", help="a .py file defining `model`, or a .ff DSL file")
        sub.add_argument("--algorithm", "-a", choices=algorithms, default="ep")
        sub.add_argument("--data", "-d", help="a .csv, .npz or .nc file of named arrays")
        return sub

    run = model_command("run", "run inference and print the posteriors as a table",
                        (*ALGORITHMS, "gibbs"))
    run.add_argument("--iterations", "-n", type=int, default=None,
                     help="at most this many sweeps (default: until converged)")
    run.add_argument("--draws", type=int, default=None,
                     help="Gibbs: draws per chain (default 1000)")
    run.add_argument("--seed", type=int, default=None, help="Gibbs: the seed (default 0)")
    run.add_argument("--rows", type=int, default=10,
                     help="plate elements shown per variable (default 10)")
    run.set_defaults(handler=_run)
    comp = model_command("compile", "show a stage of the compiler")
    comp.add_argument("--emit", choices=["source", "schedule", "ir", "graph"],
                      default="source", help="generated Python, the schedule with the "
                      "reason for each update, the statement IR, or the schedule's "
                      "dependency graph (Graphviz DOT)")
    comp.add_argument("--after", metavar="PASS", help="with --emit ir: the IR after this "
                      "pass (model = lowered, before any pass; default: the last)")
    comp.set_defaults(handler=_compile)
    demo = commands.add_parser("demo", help="run the examples", description="run the "
                               "examples in the checkout's examples/ folder")
    demo.add_argument("name", nargs="?", help="run only this example")
    demo.add_argument("--list", action="store_true", help="list the examples")
    demo.set_defaults(handler=_demo)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0, or 1 after printing an error)."""
    args = parser().parse_args(argv)
    try:
        args.handler(args)
        sys.stdout.flush()   # inside the try: a reader that left is a BrokenPipeError here
    except ModelError as e:
        print(f"factorflow {args.command}: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:   # the reader left (`factorflow compile ... | head`): no trace
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())   # Python's own recipe: no second error
        return 0
    return 0
