"""Missing observations: ``observed=np.ma.masked_array(values, mask=missing)``.

As in PyMC (and BayesPy's ``Y.observe(data, mask=observed)``, whose mask is the
complement), an observed variable over plates may have elements that were not seen: the
elements of a NumPy masked array whose mask is True.  A missing element contributes
nothing: no message to the variable's parents, no term in the evidence or the bound,
exactly as if the element were not in the plate.  It is written as an observed gate:
the statement defining the variable is placed inside ``ff.If(present)``, with
``present`` a hidden observed boolean over the same plates (True where the element was
seen), so every factor under EP and VMP masks it as any observed condition does
(``model.gates``), and the fused inner-product Gaussian reads the mask directly
(``transforms.fusion``).  The values under the mask are never read (they are replaced
by an observed value, to lie in the support).

Masks on an event axis must cover whole events (a vector seen entirely or not at all).
Plain arrays with NaN stay refused (``model.checks``): mark them missing explicitly
with ``np.ma.masked_invalid``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from factorflow.errors import DataError
from factorflow.model.core import GateFrame, Model, Variable

#: the hidden condition's name: ``f"{name}{SEEN}"`` (``#k`` added if that is taken); it
#: is an observed variable of the model, shown with the others (``y seen[n, m]``)
SEEN = " seen"


def is_masked(observed: Any) -> bool:
    """Whether ``observed`` is a masked array with at least one masked element."""
    return isinstance(observed, np.ma.MaskedArray) and bool(np.ma.getmaskarray(observed).any())


def split_masked(model: Model, name: str, observed: Any, event_ndim: int
          ) -> tuple[Any, np.ndarray | None]:
    """(the observed values, the mask of the elements seen over the plates) for a masked
    array with masked elements; (``observed``, None) for anything else.  The masked
    values are replaced by the first value seen (so that they lie in the support; they
    are never read).  DataError naming ``name`` where every element is masked, where
    the array's shape is not the plates' (then the mask is not over them), or where a
    mask on an event axis covers part of an event."""
    if not is_masked(observed):
        return observed, None
    what = f"observed value of {name!r} (a masked array: masked elements are missing)"
    missing = np.ma.getmaskarray(observed)
    data = np.asarray(np.ma.getdata(observed))
    plates = tuple(p.size for p in model.plates)
    if data.ndim < event_ndim or data.shape[: data.ndim - event_ndim] != plates:
        raise DataError(f"{what} has shape {data.shape}; a mask needs the full shape "
                        f"{plates} of the plates {[p.name for p in model.plates]} "
                        "(plus the event's axes), one element per plate element.")
    axes = tuple(range(data.ndim - event_ndim, data.ndim))
    seen = ~missing.any(axis=axes) if axes else ~missing
    if axes and not np.array_equal(missing.all(axis=axes), ~seen):
        first = tuple(int(i) for i in np.argwhere(missing.any(axis=axes) & ~missing.all(
            axis=axes))[0])
        raise DataError(f"{what}: the element at {first} is partly masked; a missing "
                        "observation is a whole vector (mask all of its entries or none).")
    if not seen.any():
        raise DataError(f"{what}: every element is masked, so nothing is observed; leave "
                        "the statement out, or observe at least one element.")
    first = tuple(int(i) for i in np.argwhere(seen)[0])
    filled = np.array(data, copy=True)
    filled[~seen] = data[first]
    return filled, seen


def shown(var: Variable, value: Any) -> Any:
    """An observed variable's values as a result shows them: NaN where missing (the
    values there were never read), as they are where ``var.seen`` is None."""
    if var.seen is None:
        return value
    seen = np.reshape(var.seen, np.shape(var.seen) + (1,) * (np.ndim(value) - var.seen.ndim))
    return np.where(seen, value, np.nan)


def is_missing_gate(frame: Any, output: Variable | None) -> bool:
    """Whether ``frame`` is the gate ``only_where_seen`` put around the statement
    defining ``output`` (its condition holds ``output.seen`` itself)."""
    return (isinstance(frame, GateFrame) and output is not None and output.seen is not None
            and frame.kind == "if" and frame.condition.observed is output.seen)


@contextmanager
def only_where_seen(model: Model, name: str, seen: np.ndarray | None
                    ) -> Iterator[None]:
    """Statements added inside apply where ``seen`` (over the open plates) is True: an
    ``ff.If`` on a hidden observed boolean; nothing when ``seen`` is None."""
    if seen is None:
        yield
        return
    label = name + SEEN
    present = model.add_variable(Variable(
        label if label not in model.variables else model.fresh_name(label), "bool",
        model.plates, model, seen))
    with model._gate(GateFrame("if", present)):
        yield
