"""Checks of known values (constants, observed values, ``ff.Data``) against the model.

Every check raises ``DataError`` naming the variable, argument or ``ff.Data`` it is about
and saying what to do.  The same checks run where a value is written into the model and,
for ``ff.Data`` (whose value may change between runs), again at every run:

* ``numeric_array`` — real numbers only: complex, object, string and date arrays are
  refused rather than cast (NumPy would drop an imaginary part with a warning);
* ``check_support`` — the values lie in the domain of the argument (positive, [0, 1],
  counts, categories ...);
* ``check_data_value`` — an ``ff.Data`` value fits every place it is used (``DataUse``:
  support and shape);
* ``check_statement`` — the known arguments of one factor statement fit together, by
  the factor's own ``value_check`` (for example a Binomial count within its trials), and
  no random element fills two of its arguments (``check_distinct_arguments``).

A Dask array (an object with ``__dask_graph__`` and ``chunks``) is read into this process
by these checks (``np.asarray``), except inside ``lazy_data()``, which the Dask backend
enters for a run's data: there it is never read whole.  Its dtype and shape are checked from its
metadata, and the value checks run chunk by chunk where the array lives (each chunk
checked by the NumPy check itself, ``_lazy_verdict``), one small computation of a
boolean per chunk for each (array, domain), remembered for the rest of the context.
Where a chunk fails, that chunk alone is read here and checked again, which raises
the NumPy check's own error.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping
from itertools import combinations
from typing import Any

import numpy as np

from factorflow.errors import DataError, ModelError
from factorflow.factors.registry import FACTORS
from factorflow.model.core import Data, FactorCall, Indexed, Model, Variable

#: NumPy kinds of real numbers: booleans, signed and unsigned integers, floats
_REAL_KINDS = "biuf"
_KIND_NAMES = {"c": "complex", "O": "Python object", "U": "string", "S": "byte string",
               "M": "date", "m": "time interval", "V": "structured"}


#: the Dask arrays checked in each ``lazy_data()`` context in progress (innermost last),
#: by (array name, domain, size); empty outside one (Dask arrays are read whole there)
_LAZY: list[dict[tuple[Any, ...], None]] = []


@contextlib.contextmanager
def lazy_data() -> Iterator[None]:
    """Within it, a Dask array given to these checks stays a Dask array: checked from its
    metadata and chunk by chunk on whatever scheduler Dask is set to (the module doc),
    never read whole into this process.  Each (array, domain) is checked once in it (a
    Dask array's name stands for its values)."""
    _LAZY.append({})
    try:
        yield
    finally:
        _LAZY.pop()


def is_lazy(value: Any) -> bool:
    """Whether ``value`` is a Dask array (a Dask collection with ``dtype``, ``shape`` and
    ``chunks``) inside ``lazy_data()``, which keeps it lazy."""
    return bool(_LAZY) and all(hasattr(value, a) for a in ("__dask_graph__", "dtype",
                                                           "shape", "chunks"))


def _lazy_verdict(value: Any, key: tuple[Any, ...], check: Callable[[np.ndarray], Any]
                  ) -> None:
    """Run ``check`` (a NumPy check raising DataError) on every chunk of the Dask array
    ``value`` where the chunks are (one boolean per chunk, computed at once; every axis
    but the first made whole, so a row is checked in one piece), once per ``key`` within
    the ``lazy_data()`` context; where a chunk fails, that chunk is read here and
    ``check`` raises its error on it."""
    import dask
    done = _LAZY[-1]
    if key in done:
        return
    if value.ndim > 1:
        value = value.rechunk({axis: -1 for axis in range(1, value.ndim)})
    passes = value.map_blocks(functools.partial(_passes, check), dtype=bool,
                              chunks=tuple((1,) * len(c) for c in value.chunks))
    verdicts = np.asarray(dask.compute(passes)[0], bool)
    if not verdicts.all():
        at = tuple(int(i) for i in np.argwhere(~verdicts)[0])
        check(np.asarray(dask.compute(value.blocks[at])[0]))
    done[key] = None


def _passes(check: Callable[[np.ndarray], Any], block: np.ndarray) -> np.ndarray:
    """Whether ``check`` accepts ``block``, as one boolean of ``block``'s dimensions (run
    on the workers)."""
    try:
        check(block)
    except DataError:
        return np.zeros((1,) * block.ndim, bool)
    return np.ones((1,) * block.ndim, bool)


def numeric_array(value: Any, what: str) -> np.ndarray:
    """``value`` as an array of real numbers (its own dtype kept), or DataError naming
    ``what``: complex, object, string, date and structured data are refused, never cast;
    so is a masked array with a masked element (masked elements are missing observations
    only in the observed value of a variable, ``model.missing``, which splits them off
    before this check; unmasking would silently use the values under the mask).  A
    masked array with no element masked is its data."""
    if isinstance(value, np.ma.MaskedArray):
        masked = np.ma.getmaskarray(value)
        if masked.any():
            first = tuple(int(i) for i in np.argwhere(masked)[0])
            raise DataError(f"{what}: a masked array with {int(masked.sum())} masked "
                            f"element(s) (the first at {first}); factorflow reads masked "
                            "values as missing observations only in the observed value of "
                            "a variable (observed=np.ma.masked_array(...) in ff.Gaussian and "
                            "the other factories), not here.  Give the observed elements "
                            "only (over a plate of their size), or fill the masked ones "
                            "(np.ma.filled) if they are real values.")
        value = np.ma.getdata(value)
    try:
        arr = value if is_lazy(value) else np.asarray(value)
    except (TypeError, ValueError) as exc:  # ragged nested lists
        raise DataError(f"{what}: expected an array of numbers, got {value!r} ({exc}).") \
            from None
    check_dtype(arr.dtype, what)
    return arr


def check_dtype(dtype: np.dtype, what: str) -> None:
    """DataError naming ``what`` unless ``dtype`` holds real numbers that float64, in
    which factorflow computes on every backend, holds exactly: complex, object, string,
    date and structured data are refused, and so is extended precision
    (``np.longdouble``: ``.astype(float)`` would round it silently)."""
    dtype = np.dtype(dtype)
    if dtype.kind not in _REAL_KINDS:
        kind = _KIND_NAMES.get(dtype.kind, str(dtype))
        hint = ("keep the real part (np.real) or model the parts separately"
                if dtype.kind == "c" else "convert it to an array of numbers first "
                "(for example np.asarray(x, dtype=float))")
        raise DataError(f"{what}: expected real numbers, got {kind} data (dtype "
                        f"{dtype}); {hint}.")
    if dtype.kind == "f" and dtype.itemsize > 8:
        raise DataError(f"{what}: data of dtype {dtype} would lose precision: factorflow "
                        "computes in float64; convert it with .astype(float) first.")


def check_support(value: Any, domain: str, what: str, size: int | None = None) -> np.ndarray:
    """``value`` as an array if it lies in ``domain``; DataError naming ``what`` otherwise.
    A Dask array within ``lazy_data()`` stays one (cast lazily), checked chunk by chunk
    (its shape for vectors and matrices from its metadata)."""
    raw = numeric_array(value, what)
    if is_lazy(raw):
        if domain in ("vector", "posdef"):
            _vector_shape(raw.shape, domain, what, size)
        key = (raw.name, domain, size if domain in ("int", "vector", "posdef") else None)
        _lazy_verdict(raw, key, functools.partial(
            check_support, domain=domain, what=what, size=size))
        return raw.astype(bool if domain == "bool" else float)
    if domain in ("vector", "posdef"):
        return _check_vectors(raw, domain, what, size)
    arr = raw.astype(bool if domain == "bool" else float)
    if arr.dtype != bool and not np.all(np.isfinite(arr)):
        raise DataError(f"{what} contains NaN or inf; remove or impute those values.")
    bad = {
        "real": lambda a: np.zeros(a.shape, bool),
        "positive": lambda a: a <= 0,
        "unit": lambda a: (a < 0) | (a > 1),
        "bool": lambda a: np.zeros(a.shape, bool),
        "count": lambda a: (a < 0) | (a != np.round(a)),
        "int": lambda a: (a < 0) | (a != np.round(a)) | (a >= (size if size else np.inf)),
        "simplex": lambda a: (a < 0),
    }[domain](arr)
    if np.any(bad):
        first = arr[bad].flat[0].item()
        need = {"positive": "values > 0", "unit": "probabilities in [0, 1]",
                "count": "non-negative integers",
                "int": f"integers in 0..{(size or 0) - 1}", "simplex": "non-negative weights",
                }[domain]
        raise DataError(f"{what}: {first!r} is outside the support ({need}).")
    if domain == "bool" and raw.dtype != bool:
        real = raw.astype(float)
        if np.any((real != 0) & (real != 1)):
            raise DataError(f"{what}: boolean values must be True/False or 0/1, got "
                            f"{real[(real != 0) & (real != 1)].flat[0].item()!r}.")
    if domain == "simplex":
        if arr.ndim == 0:
            raise DataError(f"{what}: a probability vector needs at least one axis.")
        sums = arr.sum(axis=-1)
        if not np.allclose(sums, 1.0, rtol=0, atol=1e-9):
            raise DataError(f"{what}: probabilities must sum to 1 (got a sum of "
                            f"{float(np.ravel(sums)[0])!r}); normalise them.")
    return arr


def _check_vectors(raw: np.ndarray, domain: str, what: str, size: int | None) -> np.ndarray:
    """A vector (last axis D) or a symmetric positive-definite matrix (last two axes
    D × D, refused with its smallest eigenvalue), D = ``size`` when given."""
    arr = raw.astype(float)
    _vector_shape(arr.shape, domain, what, size)
    if domain == "posdef":
        from factorflow.distributions.multivariate import check_positive_definite
        return check_positive_definite(arr, what)
    if not np.all(np.isfinite(arr)):
        raise DataError(f"{what} contains NaN or inf; remove or impute those values.")
    return arr


def _vector_shape(shape: tuple[int, ...], domain: str, what: str, size: int | None) -> None:
    """DataError naming ``what`` unless ``shape`` ends in a vector (``domain`` "vector")
    or a square matrix ("posdef"), of ``size`` when given."""
    event = 1 if domain == "vector" else 2
    if len(shape) < event:
        need = "a vector" if domain == "vector" else "a square matrix"
        raise DataError(f"{what}: expected {need} (one per plate element), got shape "
                        f"{shape}.")
    if size is not None and shape[-event:] != (size,) * event:
        need = f"({size},)" if domain == "vector" else f"({size}, {size})"
        raise DataError(f"{what} has shape {shape}, but its last axes must be {need} "
                        f"(D = {size}).")


def check_data_value(model: Model, name: str, value: Any) -> np.ndarray:
    """The value of ``ff.Data(name)`` as an array, checked against every place the model
    uses it (support and shape); DataError naming the Data and the use otherwise.  A
    value used as an index or a category (integers, checked) is returned as integers,
    whatever its dtype (``ff.Data("d", 0.0)`` indexes a known array as NumPy needs)."""
    arr = numeric_array(value, f"ff.Data({name!r})")
    for use in model.data_uses.get(name, ()):
        what = f"ff.Data({name!r}) as {use.what}"
        checked = check_support(arr, use.domain, what, use.size)
        if use.exact:
            if checked.shape != use.shape:
                raise DataError(f"{what} has shape {checked.shape}, but needs shape "
                                f"{use.shape}; give one value per plate element.")
        elif use.domain == "simplex" and checked.shape[-1:] != use.shape[-1:]:
            raise DataError(f"{what} has {checked.shape[-1]} categories (its last axis), "
                            f"but needs {use.shape[-1]}, the number fixed when the model was "
                            "built.")
        elif not broadcasts_to(checked.shape, use.shape):
            raise DataError(f"{what} has shape {checked.shape}, which does not broadcast "
                            f"to the plates' shape {use.shape}; give one value per plate "
                            "element or a single value.")
    uses = model.data_uses.get(name, ())
    if is_lazy(arr):  # (NaN and inf: refused by every use's check but a boolean one's)
        if arr.dtype.kind != "b" and all(use.domain == "bool" for use in uses):
            check_support(arr, "real", f"ff.Data({name!r})")
    elif arr.dtype.kind != "b" and not np.all(np.isfinite(arr)):
        raise DataError(f"ff.Data({name!r}): the value contains NaN or inf; remove or impute "
                        "those values.")
    if arr.dtype.kind == "f" and any(u.domain == "int" for u in uses):
        return arr.astype(np.intp)  # integral values (checked above): the same numbers
    return arr


def broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether an array of ``shape`` broadcasts to exactly ``target`` (no more axes)."""
    if len(shape) > len(target):
        return False
    try:
        return np.broadcast_shapes(shape, target) == target
    except ValueError:
        return False


def check_statement(call: FactorCall, data: Mapping[str, Any]) -> None:
    """Run the factor's ``value_check`` on the known arguments of ``call`` (constants,
    observed values, ``ff.Data`` values from ``data``, by name); a statement with an
    unknown argument the check needs is skipped.  DataError naming the variable.  Then
    ``check_distinct_arguments``."""
    check_distinct_arguments(call, data)
    factor = FACTORS.get(call.factor)
    if factor is None or factor.value_check is None:
        return
    known: dict[str, np.ndarray] = {}
    operands = dict(call.args)
    if call.output is not None:
        operands[factor.args[0].name] = call.output
    for arg, operand in operands.items():
        value = _known_value(operand, call.plates, data)
        if value is not None:
            known[arg] = value
    problem = factor.value_check.run(known)
    if problem is not None:
        label = call.output.name if call.output is not None else call.factor
        where = f" ({call.provenance})" if call.provenance else ""
        raise DataError(f"variable {label!r}{where}: {problem}")


def check_distinct_arguments(call: FactorCall, data: Mapping[str, Any]) -> None:
    """ModelError if one random element fills two arguments of ``call`` at some plate
    element: ``x * x``, ``N(x, precision=x)``, ``s[i] - s[j]`` where ``i`` and ``j`` pick
    the same element of ``s`` somewhere, ``s[i] - s`` where ``i`` picks an element's own
    position.  Message passing treats a factor's arguments as separate edges, so the two
    would be computed as if independent (silently wrong).  An index held by an ``ff.Data``
    is read from ``data`` (by name) or its current value, and a clash it causes is a
    DataError; an index not known yet is not checked."""
    uses = [(k, v) for k, v in call.args.items() if _random_base(v) is not None]
    shape = tuple(p.size for p in call.plates)
    for (k1, v1), (k2, v2) in combinations(uses, 2):
        base = _random_base(v1)
        if _random_base(v2) is not base:
            continue
        where = ""
        if not (isinstance(v1, Variable) and isinstance(v2, Variable)):
            e1, e2 = (read_elements(v, call.plates, data) for v in (v1, v2))
            if isinstance(e1, np.ndarray) and isinstance(e2, np.ndarray):
                e1, e2 = np.broadcast_to(e1, shape), np.broadcast_to(e2, shape)
                if not (e1 == e2).any():
                    continue
                at = tuple(int(i) for i in np.argwhere(e1 == e2)[0])
                where = (f" at element {at} of the plates {[p.name for p in call.plates]}"
                         f" (both are {base.name}[{int(e1[at])}])")
            elif not (isinstance(e1, tuple) and e1 == e2):
                continue  # not known yet, or a switch's element against a fixed one
        label = call.output.name if call.output is not None else call.factor
        error = DataError if any(isinstance(v, Indexed) and isinstance(v.index, Data)
                                 for v in (v1, v2)) else ModelError
        raise error(
            f"{label}: the random variable {base.name!r} is both argument {k1!r} and "
            f"argument {k2!r} of {call.factor}{where}; message passing would treat the two "
            "as independent.  Write x + x as 2 * x; otherwise index distinct elements, or "
            "introduce a second variable tied to the first.")


def _random_base(operand: Any) -> Variable | None:
    """The latent variable an argument reads (itself, or the array it indexes)."""
    var = operand.base if isinstance(operand, Indexed) else operand
    return var if isinstance(var, Variable) and not var.is_observed else None


def read_elements(operand: Variable | Indexed, plates: tuple, data: Mapping[str, Any]) -> Any:
    """Which element of its one-plate base an argument reads at each plate element: an
    integer array broadcasting over ``plates``, a token (equal for equal reads) for an
    index by a switch's variable, None where not known (yet) or not laid out over
    ``plates``."""
    if isinstance(operand, Variable):
        if len(operand.plates) != 1 or operand.plates[0] not in plates:
            return None
        shape = [1] * len(plates)
        shape[plates.index(operand.plates[0])] = operand.plates[0].size
        return np.arange(operand.plates[0].size).reshape(shape)
    index = operand.index
    if isinstance(index, Variable):
        return ("switch", id(index))
    if isinstance(index, Data):
        index = data.get(index.name, index.value)
        if index is None:
            return None
    arr = np.asarray(index, float).astype(int)
    return arr if broadcasts_to(arr.shape, tuple(p.size for p in plates)) else None


def _known_value(operand: Any, plates: tuple, data: Mapping[str, Any]) -> np.ndarray | None:
    """The array an operand holds before inference, laid out over ``plates``; None if it
    is random or its ff.Data has no value."""
    if isinstance(operand, Variable):
        if not operand.is_observed:
            return None
        value = _known_value(operand.observed, plates, data)
        if value is None:
            return None
        n = len(operand.plates)  # move its plate axes to where they sit among ``plates``
        axes = [plates.index(p) for p in operand.plates]
        order = sorted(range(n), key=lambda i: axes[i])
        value = np.transpose(value, order + list(range(n, value.ndim)))
        shape = [1] * len(plates)
        for i in order:
            shape[axes[i]] = operand.plates[i].size
        return value.reshape(tuple(shape) + value.shape[n:])
    if isinstance(operand, Data):
        value = data.get(operand.name, operand.value)
        return None if value is None else np.asarray(value, float)
    if isinstance(operand, np.ndarray):
        return operand
    return None


def run_data(model: Model, given: Mapping[str, Any]) -> dict[str, np.ndarray | None]:
    """The value of every ``ff.Data`` of ``model`` for one run: ``given[name]`` where given,
    else the Data's current ``value`` (so a value changed after compiling is used), each
    checked against its uses; None for a Data with no value.  Statements whose factor
    relates known values (``value_check``) are checked again when they read a Data."""
    values = {}
    for name, d in model.data.items():
        value = given[name] if name in given else d.value
        values[name] = None if value is None else check_data_value(model, name, value)
    if values:
        for call in model.statements:
            if any(isinstance(v, Data) or (isinstance(v, Variable)
                                           and isinstance(v.observed, Data))
                   or (isinstance(v, Indexed) and isinstance(v.index, Data))
                   for v in (*call.args.values(), call.output)):
                check_statement(call, values)
    return values
