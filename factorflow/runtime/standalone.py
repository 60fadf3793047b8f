"""A compiled model written out as a Python module that runs on its own.

``write_module(compiled, path)`` writes ``path`` (a ``.py`` file) and, beside it, the
model's constants and observed values as ``path.with_suffix(".npz")``.  The module holds
the generated inference function unchanged, imports every name it calls by its
importable path (message operators from ``factorflow.factors``, helpers from
``factorflow.runtime.kernels``, distribution families), and defines

    run(iterations=50, init=None) -> (posteriors, log_evidence)
    result(iterations=50, init=None) -> ff.Result
    excluded() -> result.excluded

which run exactly the computation ``compiled.run`` runs (same operations, same data),
so the numbers are the same; a variable that the saved data exclude from the model
(``result.excluded``) has no posterior, and ``result(...)[name]`` raises
``ff.ExcludedVariableError``, as in the process that compiled it.  It needs NumPy,
SciPy and factorflow installed, but not the code that built the model, nor a compile.
"""

from __future__ import annotations

import ast
import importlib
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

import factorflow.distributions as dist
from factorflow.codegen.names import comment
from factorflow.distributions.base import Distribution
from factorflow.errors import ModelError
from factorflow.factors import BUILTIN_FACTORS
from factorflow.runtime.kernels import NAMESPACE


def _importable(obj: Any) -> tuple[str, str] | None:
    """(module, name) from which ``from module import name`` gives ``obj``, or None."""
    module, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    if not module or not name or "." in name:
        return None
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    return (module, name) if found is obj else None


def _symbol_line(ident: str, kind: str, key: Any, obj: Any) -> tuple[str, str] | str:
    """How the module gets ``ident``: a (module, 'name as ident') import, or an
    assignment line reading a built-in factor's operator from the registry."""
    where = _importable(obj)
    if where is not None:
        module, name = where
        return module, name if name == ident else f"{name} as {ident}"
    factor = key[0]
    if factor not in BUILTIN_FACTORS:
        raise ModelError(f"save_module: factor {factor!r} was defined in this process "
                         "(@ff.factor or ff.Deterministic), so a standalone module cannot "
                         "import its messages; save the model with pickle instead, and "
                         "define the factor again before loading it.")
    if kind == "operator":
        factor, algorithm, target = key
        return (f"{ident} = FACTORS[{factor!r}].operators[({algorithm!r}, "
                f"{target!r})].fn")
    factor, algorithm = key
    return f"{ident} = FACTORS[{factor!r}].evidence[{algorithm!r}]"


def _used_names(source: str) -> set[str]:
    return {node.id for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Name)}


def module_text(compiled: Any, data_file: str, init: dict[str, Distribution],
                excluded: list[str] = ()) -> str:
    """The source of the standalone module (see the module docstring); ``excluded``
    names the variables with excluded elements (their masks are in the data file)."""
    from factorflow.runtime.compiled import _resolve

    generated = compiled.generated
    used = _used_names(generated.source)
    imports: dict[str, list[str]] = defaultdict(list)
    lookups: list[str] = []
    for ident, (kind, key) in sorted(generated.symbols.items()):
        line = _symbol_line(ident, kind, key, _resolve(kind, key))
        if isinstance(line, str):
            lookups.append(line)
        else:
            imports[line[0]].append(line[1])
    for name in sorted(used & set(NAMESPACE) - set(generated.symbols) - {"np"}):
        where = _importable(NAMESPACE[name])
        assert where is not None, name  # every kernel helper is a module-level function
        imports[where[0]].append(where[1] if where[1] == name else f"{where[1]} as {name}")
    init_families = {label: type(d).__name__ for label, d in init.items()}
    for family in sorted(set(init_families.values())):
        if family not in generated.symbols:
            imports["factorflow.distributions"].append(family)
    sizes = {name: int(size) for name, size in compiled.compilation.final.ranges}
    dims = {name: tuple(r.name for r in v.plates)
            for name, v in compiled.model.variables.items() if not v.is_observed}
    lines = [
        '"""Standalone message passing, written by factorflow\'s save_module.',
        "",
        "run(iterations=50, init=None) returns (posteriors, log_evidence), the numbers",
        "compiled.run gives; the model's data lie in the .npz file beside this module.",
        '"""',
        f"# model: {comment(compiled.model.name)}; algorithm: {compiled.algorithm.upper()}",
        "",
        "from pathlib import Path",
        "",
        "import numpy as np",
        "",
    ]
    if lookups:
        imports["factorflow.factors"].append("FACTORS")
    for module in sorted(imports):
        names = sorted(set(imports[module]))
        lines.append(f"from {module} import (")
        lines += [f"    {n}," for n in names]
        lines.append(")")
    lines += lookups
    lines += [
        "",
        f"DATA_FILE = Path(__file__).with_name({data_file!r})",
        f"SIZES = {sizes!r}",
        "#: each latent variable's plate names (result dims)",
        f"DIMS = {dims!r}",
        "#: variables with elements outside the model for the saved data (npz key",
        "#: prefix excluded<k>): result.excluded's masks, True where excluded",
        "EXCLUDED = {" + ", ".join(f"{name!r}: 'excluded{k}'"
                                   for k, name in enumerate(excluded)) + "}",
        "#: initial posteriors saved with the module: label -> (family, npz key prefix)",
        "INIT = {" + ", ".join(f"{label!r}: ({family}, 'init{k}_')" for k, (label, family)
                              in enumerate(init_families.items())) + "}",
        "",
        "",
        generated.source.rstrip("\n"),
        "",
        "",
        "def load():",
        '    """The data (by the names the inference function reads) and the saved',
        '    initial posteriors."""',
        "    with np.load(DATA_FILE, allow_pickle=False) as f:",
        "        data = {k[len('data_'):]: f[k] for k in f.files if k.startswith('data_')}",
        "        init = {label: family.from_natural(*(f[f'{prefix}{i}'] for i in range(",
        "                len([k for k in f.files if k.startswith(prefix)]))))",
        "                for label, (family, prefix) in INIT.items()}",
        "    return data, init",
        "",
        "",
        "def excluded():",
        '    """result.excluded for the saved data: name -> mask over its plates, True',
        '    where the element is not part of the model."""',
        "    with np.load(DATA_FILE, allow_pickle=False) as f:",
        "        return {name: f[key] for name, key in EXCLUDED.items()}",
        "",
        "",
        "def run(iterations=50, init=None):",
        '    """Run ``iterations`` sweeps; returns (posteriors by name, log evidence).',
        '    ``init`` replaces saved initial posteriors by name.  A variable excluded',
        '    everywhere (see ``excluded``) has no posterior, as in compiled.run."""',
        "    data, saved = load()",
        "    with np.errstate(divide='ignore', invalid='ignore', over='ignore'):",
        "        posteriors, log_evidence = infer(data, dict(SIZES),",
        "                                         {**saved, **(init or {})}, int(iterations))",
        "    for name, mask in excluded().items():",
        "        if mask.all():",
        "            posteriors.pop(name, None)",
        "    return posteriors, log_evidence",
        "",
        "",
        "def result(iterations=50, init=None):",
        '    """``run`` as an ff.Result: result[name] raises ff.ExcludedVariableError for',
        '    a variable excluded everywhere, and result.excluded holds the masks."""',
        "    from factorflow import Result",
        "",
        "    posteriors, log_evidence = run(iterations, init)",
        f"    return Result(posteriors, float(log_evidence), {compiled.algorithm!r}, "
        "int(iterations), 0.0,",
        "                  dims={k: DIMS[k] for k in posteriors if k in DIMS},",
        "                  excluded=excluded())",
        "",
        "",
        'if __name__ == "__main__":',
        "    posteriors, log_evidence = run()",
        "    for name, posterior in posteriors.items():",
        "        print(f'{name}: {posterior!r}')",
        "    print(f'log evidence: {log_evidence!r}')",
        "",
    ]
    return "\n".join(lines)


def write_module(compiled: Any, path: str | Path, data: dict[str, Any] | None = None,
                 init: dict[str, Any] | None = None) -> Path:
    """Write ``compiled`` as a standalone module at ``path`` and its data beside it as
    ``path`` with suffix ``.npz`` (both overwritten).  ``data`` gives ff.Data values as in
    ``compiled.run``; ``init`` (with the model's own initialisations) the initial
    posteriors saved with it.  Returns the module's path."""
    path = Path(path)
    if path.suffix != ".py":
        raise ModelError(f"save_module: {str(path)!r} must end in .py (it is imported as a "
                         "Python module).")
    values = compiled._data(data)
    init = dict(compiled.model.initial) | dict(init or {})
    for label, d in init.items():
        if not isinstance(d, Distribution) or type(d) is dist.Binomial:
            raise ModelError(f"save_module: init[{label!r}] must be a distribution of the "
                             f"variable's family, got {type(d).__name__}.")
    arrays: dict[str, np.ndarray] = {f"data_{ident}": np.asarray(value)
                                     for ident, value in values.items() if value is not None}
    for k, d in enumerate(init.values()):
        arrays.update({f"init{k}_{i}": eta for i, eta in enumerate(d.eta)})
    excluded = compiled._excluded(values)
    arrays.update({f"excluded{k}": mask for k, mask in enumerate(excluded.values())})
    data_path = path.with_suffix(".npz")
    text = module_text(compiled, data_path.name, init, list(excluded))
    np.savez(data_path, **arrays)
    path.write_text(text, encoding="utf-8")
    return path
