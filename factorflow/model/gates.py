"""Gates in models: ``ff.If``, ``ff.IfNot``, ``ff.Case`` and ``ff.Switch`` (seed 001).

Statements written inside a gate apply only where its condition holds.  A variable may
be defined in every branch of a condition (an *exit* variable: ``If(c)`` and ``IfNot(c)``
each define ``sprinkler``; each ``Case(z, k)`` defines ``x``) and is then used outside
like any other; a variable defined in only some branches can be read only inside them.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from factorflow.errors import ModelError
from factorflow.model.core import GateFrame, Model, Variable, _provenance, current_model


def _condition(model: Model, c: Any, what: str, domains: tuple[str, ...]) -> Variable:
    if not isinstance(c, Variable):
        raise ModelError(f"{what}: the condition must be a variable of the model, got {c!r}.")
    if c.model is not model:
        raise ModelError(f"{what}: variable {c.name!r} belongs to another model.")
    if c.domain not in domains:
        kinds = " or ".join("boolean" if d == "bool" else "discrete" for d in domains)
        raise ModelError(f"{what}: the condition {c.name!r} is {c.domain}-valued; a gate "
                         f"needs a {kinds} variable.")
    missing = [p.name for p in c.plates if p not in model.plates]
    if missing:
        raise ModelError(f"{what}: the condition {c.name!r} is indexed by {missing}; open "
                         "those plates around the gate.")
    return c


@contextmanager
def If(condition: Any) -> Iterator[GateFrame]:
    """Statements inside apply where the boolean ``condition`` is true.

    >>> with ff.Model() as model:             # P(cloudy | rain) = 0.4 / (0.4 + 0.1)
    ...     cloudy = ff.Bernoulli("cloudy", 0.5)
    ...     with ff.If(cloudy):
    ...         rain = ff.Bernoulli("rain", 0.8, observed=True)
    ...     with ff.IfNot(cloudy):
    ...         rain = ff.Bernoulli("rain", 0.2, observed=True)
    >>> round(float(model.infer("ep")["cloudy"].p), 12)
    0.8
    """
    model = current_model("ff.If")
    from factorflow.model.chains import ChainFrame, RangeCondition
    if isinstance(condition, RangeCondition):  # a chain's start or step (model.chains)
        if condition.range not in model.plates:
            raise ModelError(f"{condition.describe()}: open ff.Plate({condition.range.name}) "
                             "around it.")
        with model._gate(ChainFrame(condition, _provenance())) as chain:
            yield chain
        return
    c = _condition(model, condition, "ff.If", ("bool",))
    with model._gate(GateFrame("if", c, provenance=_provenance())) as frame:
        yield frame


@contextmanager
def IfNot(condition: Any) -> Iterator[GateFrame]:
    """Statements inside apply where the boolean ``condition`` is false (``ff.If``'s other
    branch).  A coin that is fair unless it is loaded, after 3 heads: P(loaded | 3 heads)
    = 0.5 · 0.9³ / (0.5 · 0.9³ + 0.5 · 0.5³):

    >>> with ff.Model() as model:
    ...     loaded = ff.Bernoulli("loaded", 0.5)
    ...     with ff.Plate(ff.Range("n", 3)):
    ...         with ff.If(loaded):
    ...             heads = ff.Bernoulli("heads", 0.9, observed=[True, True, True])
    ...         with ff.IfNot(loaded):
    ...             heads = ff.Bernoulli("heads", 0.5, observed=[True, True, True])
    >>> bool(np.isclose(model.infer("ep")["loaded"].p, 0.9**3 / (0.9**3 + 0.5**3)))
    True
    """
    model = current_model("ff.IfNot")
    c = _condition(model, condition, "ff.IfNot", ("bool",))
    with model._gate(GateFrame("if", c, negated=True, provenance=_provenance())) as frame:
        yield frame


@contextmanager
def Case(condition: Any, value: int) -> Iterator[GateFrame]:
    """Statements inside apply where the discrete ``condition`` equals ``value`` (for a
    Bernoulli, 1 is True and 0 is False).

    >>> with ff.Model() as model:             # x's prior mean is 0, 10 or 20 by z
    ...     z = ff.Discrete("z", [0.2, 0.3, 0.5])
    ...     for k in range(3):
    ...         with ff.Case(z, k):
    ...             x = ff.Gaussian("x", 10.0 * k, variance=1.0)
    >>> round(float(model.infer("ep")["x"].mean), 12)   # 0.3 * 10 + 0.5 * 20
    13.0
    """
    model = current_model("ff.Case")
    c = _condition(model, condition, f"ff.Case({getattr(condition, 'name', condition)}, "
                   f"{value})", ("int", "bool"))
    size = 2 if c.domain == "bool" else c.size
    if isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_):
        value = int(value)  # NumPy integers (np.int64(1)) name the same case as 1
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < (size or 0):
        raise ModelError(f"ff.Case({c.name}, {value!r}): {c.name!r} takes values 0.."
                         f"{(size or 0) - 1}; the case value is outside that range.")
    if c.domain == "bool":  # Case(b, 1) is If(b), Case(b, 0) is IfNot(b)
        value = bool(value)
    with model._gate(GateFrame("case", c, value=value, provenance=_provenance())) as frame:
        yield frame


@contextmanager
def Switch(condition: Any) -> Iterator[GateFrame]:
    """Statements inside apply for the value the discrete ``condition`` takes; inside,
    ``array[condition]`` picks that value's element of an array variable.

    >>> with ff.Model() as model:             # one observation picks its component
    ...     z = ff.Discrete("z", [0.5, 0.5])
    ...     with ff.Plate(ff.Range("k", 2)):
    ...         means = ff.Gaussian("means", np.array([0.0, 10.0]), variance=1.0)
    ...     with ff.Switch(z):
    ...         x = ff.Gaussian("x", means[z], variance=1.0, observed=9.0)
    >>> model.infer("ep")["z"].probs.round(6).tolist()
    [0.0, 1.0]
    """
    model = current_model("ff.Switch")
    c = _condition(model, condition, "ff.Switch", ("int",))
    with model._gate(GateFrame("switch", c, provenance=_provenance())) as frame:
        yield frame


def open_switch(model: Model, condition: Variable) -> GateFrame | None:
    """The innermost open Switch on ``condition``, if any."""
    for frame in reversed(model.gates):
        if frame.kind == "switch" and frame.condition is condition:
            return frame
    return None


def check_defined_for(model: Model, var: Variable, what: str) -> None:
    """ModelError unless ``var`` can be read under the gates open now: every statement
    that defines it is inside the open gates, or it is defined in every branch of each
    gate that is not open."""
    open_gates = model.gates
    # a definition in another branch of a gate open here is not read here (inside
    # ff.IfNot(c) the variable is the one defined in that branch, not in ff.If(c))
    definitions = [d for d in model.definitions.get(var.name, [])
                   if not any(exclusive(g, o) for g in d for o in open_gates)]
    outside = [d for d in definitions if not set(d) <= set(open_gates)]
    if not outside:
        return
    # a gate nested in an open one on the same condition and value holds wherever the
    # open one does (ff.If(c) inside ff.If(c), ff.Case(c, 0) inside ff.IfNot(c))
    closed = {f for d in outside for f in d if f not in open_gates
              and not any(same_branch(f, o) for o in open_gates)}
    for frame in closed:
        siblings = [g for d in outside for g in d if g.condition is frame.condition]
        if frame.kind == "switch":
            continue
        if frame.kind == "if":
            covered = {g.negated for g in siblings if g.kind == "if"} == {False, True}
        else:
            size = 2 if frame.condition.domain == "bool" else frame.condition.size
            covered = {g.value for g in siblings if g.kind == "case"} == set(range(size or 0))
        if not covered:
            raise ModelError(f"{what}: variable {var.name!r} is defined only inside "
                             f"{frame.describe()} (on {frame.condition.name!r}) but is read "
                             "outside it; define it in every branch or read it inside the "
                             "gate.")


def exclusive(a: GateFrame, b: GateFrame) -> bool:
    """Whether branches ``a`` and ``b`` can never hold together (If and IfNot on one
    condition, or two Cases of one condition with different values)."""
    if a is b or a.condition is not b.condition or "switch" in (a.kind, b.kind):
        return False
    if a.kind == "if" and b.kind == "if":
        return a.negated != b.negated
    return _case_value(a) != _case_value(b)


def never_holds(frames: tuple) -> bool:
    """Whether a statement inside ``frames`` sits in two branches of one latent condition
    that exclude each other (``ff.IfNot(c)`` inside ``ff.If(c)``): it is never part of
    the model."""
    gates = [f for f in frames if isinstance(f, GateFrame) and not f.condition.is_observed]
    return any(exclusive(g, f) for i, f in enumerate(gates) for g in gates[:i])


def same_branch(a: GateFrame, b: GateFrame) -> bool:
    """Whether branches ``a`` and ``b`` hold together (If/Case on one condition selecting one
    value; not a Switch)."""
    return (a.condition is b.condition and "switch" not in (a.kind, b.kind)
            and _case_value(a) == _case_value(b))


def _case_value(frame: GateFrame) -> Any:
    """The value a branch selects: Case's value, If's True, IfNot's False."""
    return (not frame.negated) if frame.kind == "if" else frame.value


def excluded_elements(model: Model, observed: dict[str, Any]) -> dict[str, np.ndarray]:
    """The elements of each latent variable that are not part of the model for the given
    observed values: a boolean mask over the variable's plates, True where every
    statement defining the element sits inside a branch whose observed condition excludes
    it (``ff.If(c)`` where ``c`` is observed false, ``ff.Case(z, k)`` where ``z`` is
    observed ≠ k, at any depth of nesting).  As in Infer.NET, whose gate on a known
    condition runs the branch only where the condition holds, such an element has no
    prior, no likelihood and no posterior.  ``observed``: the observed values by
    variable name (the run's values for ``ff.Data``).  Variables with nothing excluded
    are left out of the result."""
    out: dict[str, np.ndarray] = {}
    for name, definitions in model.definitions.items():
        var = model.variables[name]
        if var.is_observed or not any(definitions):
            continue
        live = np.zeros(var.shape, bool)
        for gates in definitions:
            if never_holds(gates):
                continue
            here = np.ones(var.shape, bool)
            for gate in gates:
                here &= _gate_holds(gate, observed, var)
            live |= here
        if not live.all():
            out[name] = ~live
    return out


def _gate_holds(gate: GateFrame, observed: dict[str, Any], var: Variable) -> np.ndarray:
    """Where ``gate`` may hold, over ``var``'s plates: the observed condition's values
    aligned to them (a latent condition, or a Switch, may always hold)."""
    c = gate.condition
    if gate.kind == "switch" or c.name not in observed:
        return np.ones(var.shape, bool)
    value = np.asarray(observed[c.name])
    if gate.kind == "if":
        holds = value.astype(bool) != gate.negated
    else:
        holds = value.astype(int) == int(gate.value)
    axes = [var.plates.index(r) for r in c.plates]  # the gate sits inside c's plates
    order = np.argsort(axes)
    holds = np.transpose(np.broadcast_to(holds, c.shape), order)
    shape = [1] * len(var.plates)
    for axis in axes:
        shape[axis] = var.plates[axis].size
    return np.broadcast_to(holds.reshape(shape), var.shape)
