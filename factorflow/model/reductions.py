"""``ff.sum(x, n)``: the sum of a plate of real variables, as one real variable outside
that plate (the factor ``PlateSum``, see ``factorflow.factors.plate_sum``).

``x`` is defined inside plates (…, n) with ``n`` its innermost plate; ``ff.sum(x, n)`` is
written where the plates (…) are open (the same, in order), and is one real variable per
element of them.  Its messages are exact under EP and VMP's means are exact on
linear-Gaussian models.
"""

from __future__ import annotations

from typing import Any

from factorflow.errors import ModelError
from factorflow.model.checks import check_statement
from factorflow.model.core import FactorCall, Range, Variable, _provenance, current_model


def plate_sum(x: Any, over: Any) -> Variable:
    """The real variable Σ_i x[..., i] over the plate ``over`` (x's innermost plate),
    written with x's other plates open.  ModelError naming x and the plates otherwise."""
    label = f"ff.sum({getattr(x, 'name', x)!r}, {getattr(over, 'name', over)!r})"
    model = current_model(label)
    if not isinstance(over, Range):
        raise ModelError(f"{label}: the second argument must be the ff.Range to sum over.")
    if not isinstance(x, Variable) or x.domain != "real":
        what = f"a {x.domain}-valued variable" if isinstance(x, Variable) else repr(x)
        raise ModelError(f"{label}: sums a plate of real variables, got {what}.")
    if x.model is not model:
        raise ModelError(f"{label}: variable {x.name!r} belongs to another model.")
    if x.is_observed:
        raise ModelError(f"{label}: {x.name!r} is observed, so its sum is known; compute "
                         "it with NumPy.")
    if not x.plates or x.plates[-1] is not over:
        raise ModelError(f"{label}: {over.name!r} must be the innermost plate of "
                         f"{x.name!r}, whose plates are {[p.name for p in x.plates]}.")
    if model.plates != x.plates[:-1]:
        raise ModelError(f"{label}: write it where the plates "
                         f"{[p.name for p in x.plates[:-1]]} of {x.name!r} other than "
                         f"{over.name!r} are open (open now: "
                         f"{[p.name for p in model.plates]}).")
    if model.gates:
        raise ModelError(f"{label}: a sum over a plate inside a gate is not supported; "
                         "write it outside the gate.")
    name = f"sum({x.name}, {over.name})"
    name = name if name not in model.variables else model.fresh_name(name)
    prov = _provenance()
    var = model.add_variable(Variable(name, "real", model.plates, model, None, None, True,
                                      prov))
    call = FactorCall("PlateSum", var, {"array": x}, model.plates, prov)
    check_statement(call, {})
    model.add_statement(call)
    return var


__all__ = ["plate_sum"]
