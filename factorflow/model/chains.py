"""Chains over a plate (``x[t]`` depends on ``x[t - 1]``) and constant tables.

Written as in Infer.NET, inside the chain's plate::

    with ff.Plate(t):
        with ff.If(t == 0):
            x = ff.Discrete("x", pi)                              # the start
        with ff.If(t > 0):
            x = ff.Discrete("x", ff.Constant(A)[x[t - 1]])        # the step

or, linear-Gaussian, ``ff.Gaussian("x", m0, precision=p0)`` then
``ff.Gaussian("x", a * x[t - 1] + b, precision=q)``.  The two definitions become one
statement of a chain factor (``factors.chains``) over the whole plate, whatever its size:
compile time does not depend on T.  ``t - 1`` is an ``Offset``; ``a * x[t - 1] + b`` an
``Affine`` (no statement is made for it); ``ff.Constant(array)`` a ``Table`` that a
discrete variable (a Switch condition, a chain's previous element) or constant integers
index.

A discrete chain's start may be a Dirichlet variable and its step ``rows[x[t - 1]]`` with
``rows`` Dirichlet over a plate of K (learnt under VMP); other parameters are constants.

Guarantees: an offset index anywhere but in a chain's step, a lag other than 1 (it would
read before the plate's start), a chain whose start or step is missing, a random Gaussian
parameter or an ill-shaped one, each raise ModelError naming the variable and what to
write.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from factorflow.errors import ModelError
from factorflow.model.checks import check_support, numeric_array
from factorflow.model.core import (
    Data,
    FactorCall,
    Indexed,
    Model,
    Operators,
    Range,
    Variable,
    _provenance,
)


@dataclass(frozen=True, eq=False)
class Offset:
    """``t - lag`` on a plate index: ``x[t - 1]`` reads the previous element."""

    range: Range
    lag: int

    def __repr__(self) -> str:
        return f"{self.range.name} - {self.lag}"


@dataclass(frozen=True, eq=False)
class RangeCondition:
    """``t == 0`` (``first``) or ``t > 0`` on a plate index, for ``ff.If``."""

    range: Range
    first: bool

    def describe(self) -> str:
        return f"ff.If({self.range.name} {'== 0' if self.first else '> 0'})"


@dataclass(frozen=True, eq=False)
class ChainFrame:
    """An open ``ff.If(t == 0)`` or ``ff.If(t > 0)``: only a chain's start or step may be
    written inside."""

    condition: RangeCondition
    provenance: str = ""

    def describe(self) -> str:
        return self.condition.describe()


def range_offset(rng: Range, lag: Any) -> Offset:
    """``t - lag`` for a positive integer lag."""
    if isinstance(lag, bool) or not isinstance(lag, numbers.Integral) or lag < 1:
        raise ModelError(f"{rng.name} - {lag!r}: an offset index subtracts a positive "
                         f"integer from the plate index (write {rng.name} - 1).")
    return Offset(rng, int(lag))


def range_lead(rng: Range, lead: Any) -> NoReturn:
    """``t + lead``: refused by name (a chain reads earlier elements only)."""
    raise ModelError(f"{rng.name} + {lead!r}: an offset index reads an earlier element of "
                     f"range {rng.name!r} ({rng.name} - 1); {rng.name} + {lead!r} would read "
                     f"past its end at {rng.name} = {rng.size - 1}. Write the chain forwards: "
                     f"x[{rng.name}] from x[{rng.name} - 1].")


def range_condition(rng: Range, op: str, value: Any) -> RangeCondition:
    """``t == 0`` or ``t > 0`` (also ``t >= 1``); anything else is refused by name."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        if op == "==" and value == 0:
            return RangeCondition(rng, True)
        if (op == ">" and value == 0) or (op == ">=" and value == 1):
            return RangeCondition(rng, False)
    raise ModelError(f"{rng.name} {op} {value!r}: a condition on a plate index is "
                     f"{rng.name} == 0 (a chain's start) or {rng.name} > 0 (its step).")


class Table:
    """``ff.Constant(values)``: a known array whose first axis a discrete variable or
    constant integers index: ``ff.Constant(p)[z]`` under ``ff.Switch(z)`` (or
    ``ff.Case(z, k)``), ``ff.Constant(A)[x[t - 1]]`` in a chain's step.

    >>> with ff.Model() as model:             # P(z = 1 | y) = 0.5·0.9 / (0.5·0.2 + 0.5·0.9)
    ...     z = ff.Discrete("z", [0.5, 0.5])
    ...     with ff.Switch(z):
    ...         y = ff.Bernoulli("y", ff.Constant([0.2, 0.9])[z], observed=True)
    >>> round(float(model.infer("ep")["z"].probs[1]), 12)
    0.818181818182
    """

    name = "constant"

    def __init__(self, values: Any) -> None:
        arr = numeric_array(values, "ff.Constant")
        if arr.ndim == 0:
            raise ModelError("ff.Constant needs an array with an axis to index, got a "
                             f"scalar {arr.item()!r}.")
        self.values = arr

    def __getitem__(self, index: Any) -> Indexed:
        return Indexed(self, index)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"ff.Constant(<array {self.values.shape}>)"


def Constant(values: Any) -> Table:
    """A known array to index by a discrete variable (``ff.Constant(p)[z]`` under
    ``ff.Switch(z)``), or by the previous state of a chain; see ``Table``.

    >>> with ff.Model() as model:             # P(z = k | y) ∝ 1/3 · p_k
    ...     z = ff.Discrete("z", [1 / 3, 1 / 3, 1 / 3])
    ...     with ff.Switch(z):
    ...         y = ff.Bernoulli("y", ff.Constant([0.1, 0.3, 0.6])[z], observed=True)
    >>> model.infer("ep")["z"].probs
    array([0.1, 0.3, 0.6])
    >>> ff.Constant(0.5)
    Traceback (most recent call last):
    ...
    factorflow.errors.ModelError: ff.Constant needs an array with an axis to index, got a ...
    """
    return Table(values)


@dataclass(frozen=True, eq=False)
class Affine(Operators):
    """``coefficient · previous + offset``, ``previous`` an offset read ``x[t - 1]``."""

    previous: Indexed
    coefficient: float = 1.0
    offset: float = 0.0


def is_offset_read(value: Any) -> bool:
    return isinstance(value, Indexed) and isinstance(value.index, Offset)


def is_chain_term(value: Any) -> bool:
    return isinstance(value, Affine) or is_offset_read(value)


def _as_affine(value: Any) -> Affine:
    return value if isinstance(value, Affine) else Affine(value)


def _scalar(value: Any, what: str) -> float:
    if isinstance(value, Variable | Indexed | Data | Affine):
        raise ModelError(f"{what}: a chain's step is a known constant times x[t - 1] plus a "
                         "known constant; a random or observed coefficient is not supported.")
    arr = numeric_array(value, what)
    if arr.ndim:
        raise ModelError(f"{what}: a chain's coefficient and offset are scalars, got shape "
                         f"{arr.shape}.")
    if not np.isfinite(arr):
        raise ModelError(f"{what}: a chain's coefficient and offset must be finite.")
    return float(arr)


def affine(op: str, a: Any, b: Any = None) -> Affine:
    """``a op b`` where one side is ``x[t - 1]`` or an ``Affine`` and the other a constant."""
    from factorflow.model import vector_chains
    if vector_chains.is_vector_chain_term(a) or vector_chains.is_vector_chain_term(b):
        return vector_chains.vector_affine(op, a, b)  # type: ignore[return-value]
    label = f"{op} on {_show(a)}" if b is None else f"({_show(a)} {op} {_show(b)})"
    if op == "neg":
        f = _as_affine(a)
        return Affine(f.previous, -f.coefficient, -f.offset)
    if op in ("+", "-") and is_chain_term(a) and is_chain_term(b):
        raise ModelError(f"{label}: a chain's step reads x[t - 1] once; collect it into one "
                         "coefficient.")
    if op == "+":
        f, c = (_as_affine(a), b) if is_chain_term(a) else (_as_affine(b), a)
        return Affine(f.previous, f.coefficient, f.offset + _scalar(c, label))
    if op == "-":
        if is_chain_term(a):
            f = _as_affine(a)
            return Affine(f.previous, f.coefficient, f.offset - _scalar(b, label))
        f = _as_affine(b)
        return Affine(f.previous, -f.coefficient, _scalar(a, label) - f.offset)
    if op == "*":
        if is_chain_term(a) and is_chain_term(b):
            raise ModelError(f"{label}: a chain's step is linear in x[t - 1].")
        f, c = (_as_affine(a), b) if is_chain_term(a) else (_as_affine(b), a)
        k = _scalar(c, label)
        return Affine(f.previous, f.coefficient * k, f.offset * k)
    if op == "/" and is_chain_term(a) and not is_chain_term(b):
        k = _scalar(b, label)
        if k == 0:
            raise ModelError(f"{label}: division by zero.")
        return Affine(_as_affine(a).previous, _as_affine(a).coefficient / k,
                      _as_affine(a).offset / k)
    raise ModelError(f"{label}: only +, -, * and / by constants apply to x[t - 1] in a "
                     "chain's step.")


def _show(v: Any) -> str:
    if is_offset_read(v):
        return f"{v.base.name}[{v.index!r}]"
    if isinstance(v, Affine):
        return f"{v.coefficient!r} * {_show(v.previous)} + {v.offset!r}"
    if isinstance(v, Variable):
        return v.name
    return repr(v)


def offset_read_error(value: Indexed, what: str) -> ModelError:
    """The error for ``x[t - k]`` read anywhere but in a chain's step."""
    off = value.index
    name = value.base.name
    return ModelError(
        f"{what}: {name}[{off!r}] at {off.range.name} = 0 reads {name}[-{off.lag}], before "
        f"the start of range {off.range.name!r}; an offset index is read only in the step "
        f"of a chain, `with ff.If({off.range.name} > 0): {name} = ...({name}"
        f"[{off.range.name} - 1])`, after its start under ff.If({off.range.name} == 0).")


# ----- the chain's two definitions --------------------------------------------------------
@dataclass
class ChainStart:
    """A chain whose start (t == 0) is written and whose step is awaited."""

    factor: str
    variable: Variable
    args: dict[str, Any]
    provenance: str


def open_chain(model: Model) -> ChainFrame | None:
    for frame in reversed(model.frames):
        if isinstance(frame, ChainFrame):
            return frame
    return None


def check_no_chain_frame(model: Model, what: str) -> None:
    """ModelError if ``what`` is written inside ff.If(t == 0) / ff.If(t > 0)."""
    frame = open_chain(model)
    if frame is not None:
        raise ModelError(f"{what}: inside {frame.describe()} only a chain's start or step "
                         "(ff.Discrete or ff.Gaussian defining the chain variable) may be "
                         "written; write other statements in the plate outside it.")


def _known(value: Any, domain: str, what: str, size: int | None = None) -> np.ndarray:
    if isinstance(value, Variable | Indexed | Data | Affine | Table):
        raise ModelError(f"{what}: a chain's parameters must be known constants; a random "
                         "or ff.Data parameter is not supported yet.")
    return check_support(value, domain, what, size)


def define(model: Model, frame: ChainFrame, factor: str, name: str, domain: str,
           args: dict[str, Any], observed: Any, size: int | None) -> Variable:
    """One of a chain's two definitions, written inside ``frame``; the step (the second)
    adds the chain factor's statement."""
    rng = frame.condition.range
    what = f"variable {name!r} ({frame.describe()})"
    if not model.plates or model.plates[-1] is not rng:
        raise ModelError(f"{what}: a chain over {rng.name!r} is written with "
                         f"ff.Plate({rng.name}) as the innermost open plate.")
    if model.gates:
        raise ModelError(f"{what}: a chain cannot be written inside "
                         f"{model.gates[-1].describe()}; write it outside the gate.")
    if factor not in ("Discrete", "Gaussian", "VectorGaussian"):
        raise ModelError(f"{what}: a chain is ff.Discrete (a hidden Markov chain), "
                         f"ff.Gaussian or ff.VectorGaussian (linear-Gaussian); {factor} is "
                         "not supported.")
    if observed is not None:
        raise ModelError(f"{what}: a chain variable is latent; observe its emissions "
                         "instead.")
    if frame.condition.first and name in model.variables:
        raise ModelError(f"{what}: {name!r} is already defined; a chain's start comes "
                         "first, under ff.If(t == 0), then its step.")
    if factor == "VectorGaussian" or getattr(model.chains.get(name), "factor",
                                             None) == "VectorGaussian":
        from factorflow.model import vector_chains
        return vector_chains.define(model, frame, factor, name, args, size)
    chains: dict[str, ChainStart] = model.chains
    prov = _provenance()
    if frame.condition.first:
        if factor == "Discrete":
            probs = args["probs"]
            known = {"init": _dirichlet(model, probs, size, False, f"{what}, probabilities")
                     if isinstance(probs, Variable) else
                     _known(probs, "simplex", f"{what}, probabilities", size)}
        else:
            known = {"init_mean": _known(args["mean"], "real", f"{what}, mean"),
                     "init_precision": _known(args["precision"], "positive",
                                              f"{what}, precision")}
        _check_scalars(known, what, vector="init")
        var = Variable(name, domain, model.plates, model, None, size, True, prov)
        model.add_variable(var)
        chains[name] = ChainStart(factor, var, known, prov)
        return var
    start = chains.get(name)
    if start is None:
        raise ModelError(f"{what}: define the chain's start first: `with ff.If({rng.name} "
                         f"== 0): {name} = ...` before its step under ff.If({rng.name} > 0) "
                         f"(only a chain's step may be written inside ff.If({rng.name} > 0)).")
    if start.factor != factor or start.variable.size != size:
        kind = start.factor + ("" if start.variable.size is None
                               else f" of {start.variable.size} categories")
        raise ModelError(f"{what}: the step must be the same kind of variable as the start "
                         f"({kind}).")
    var = start.variable
    if factor == "Discrete":
        step = _discrete_step(var, rng, args["probs"], what)
    else:
        step = _gaussian_step(var, rng, args["mean"], args["precision"], what)
    del chains[name]
    chain_factor = "DiscreteChain" if factor == "Discrete" else "GaussianChain"
    model.definitions.setdefault(name, []).append(model.gates)
    model.statements.append(chain_statement(model, chain_factor, var,
                                            {**start.args, **step}, prov))
    return var


#: a chain factor's start as an ordinary factor: (factor, {its argument: the chain's})
_START = {"DiscreteChain": ("Discrete", {"probs": "init"}),
          "GaussianChain": ("Gaussian", {"mean": "init_mean", "precision": "init_precision"}),
          "VectorGaussianChain": ("VectorGaussian", {"mean": "init_mean",
                                                     "precision": "init_precision"})}


def chain_statement(model: Model, chain_factor: str, var: Variable, args: dict[str, Any],
                    provenance: str) -> FactorCall:
    """The statement of the chain ``var`` over the open plates: its chain factor, or,
    where a plate is empty (no chain, or chains of no steps), its start's own factor over
    the same plates, which has no element either (the posterior is the empty array and
    the evidence 0; the chain kernels need a step and a chain)."""
    frames = tuple(f for f in model.frames if not isinstance(f, ChainFrame))
    if all(p.size > 0 for p in model.plates):
        return FactorCall(chain_factor, var, args, model.plates, provenance, frames)
    factor, names = _START[chain_factor]
    return FactorCall(factor, var, {k: args[v] for k, v in names.items()}, model.plates,
                      provenance, frames)


def _dirichlet(model: Model, var: Variable, size: int | None, rows: bool, what: str
               ) -> Variable:
    """``var`` if it is a probability vector of ``size`` categories: with no plates (a
    random start), or over one plate of ``size`` elements (``rows``: transition rows).
    VMP learns them."""
    if var.model is not model or var.domain != "simplex" or var.size != size:
        raise ModelError(f"{what}: {var.name!r} must be a probability vector of {size} "
                         "categories (a Dirichlet variable) of this model.")
    shape = tuple(p.size for p in var.plates)
    if shape != ((size,) if rows else ()):
        need = f"one plate of {size} rows" if rows else "no plates"
        raise ModelError(f"{what}: {var.name!r} has plates {[p.name for p in var.plates]}; "
                         f"it needs {need}.")
    return var


def _check_scalars(known: dict[str, Any], what: str, vector: str = "") -> None:
    known = {k: v for k, v in known.items() if not isinstance(v, Variable)}
    for k, arr in known.items():
        if arr.ndim != (1 if k == vector else 0):
            raise ModelError(f"{what}: the chain's {k.replace('_', ' ')} must be "
                             f"{'a probability vector' if k == vector else 'a scalar'}, got "
                             f"shape {arr.shape}.")


def _previous(var: Variable, rng: Range, read: Any, what: str) -> None:
    """Check that ``read`` is ``var[rng - 1]``."""
    if not is_offset_read(read) or read.base is not var:
        raise ModelError(f"{what}: a chain's step reads its own previous element, "
                         f"{var.name}[{rng.name} - 1].")
    off = read.index
    if off.range is not rng:
        raise ModelError(f"{what}: {var.name}[{off!r}] offsets range {off.range.name!r}, "
                         f"but the chain runs over {rng.name!r}.")
    if off.lag != 1:
        raise ModelError(f"{what}: {var.name}[{off!r}] at {rng.name} = 1 reads "
                         f"{var.name}[{1 - off.lag}], before the start of range "
                         f"{rng.name!r}; a chain's step reads {var.name}[{rng.name} - 1].")


def _discrete_step(var: Variable, rng: Range, probs: Any, what: str) -> dict[str, Any]:
    if isinstance(probs, Indexed) and isinstance(probs.base, Variable) and is_offset_read(
            probs.index):  # Dirichlet rows, learnt by VMP
        _previous(var, rng, probs.index, what)
        return {"trans": _dirichlet(var.model, probs.base, var.size, True,
                                    f"{what}, transition rows")}
    if not isinstance(probs, Indexed) or not isinstance(probs.base, Table):
        raise ModelError(f"{what}: a discrete chain's step is "
                         f"ff.Discrete({var.name!r}, ff.Constant(matrix)[{var.name}"
                         f"[{rng.name} - 1]]) or, with Dirichlet rows over a plate, "
                         f"rows[{var.name}[{rng.name} - 1]].")
    _previous(var, rng, probs.index, what)
    trans = check_support(probs.base.values, "simplex", f"{what}, transition matrix",
                          var.size)
    if trans.shape != (var.size, var.size):
        raise ModelError(f"{what}: the transition matrix must be {var.size} x {var.size} "
                         f"(one row per value of {var.name}[{rng.name} - 1]), got shape "
                         f"{trans.shape}.")
    return {"trans": trans}


def _gaussian_step(var: Variable, rng: Range, mean: Any, precision: Any, what: str
                   ) -> dict[str, Any]:
    if not is_chain_term(mean):
        raise ModelError(f"{what}: a linear-Gaussian chain's step has mean a * "
                         f"{var.name}[{rng.name} - 1] + b (known a, b).")
    f = _as_affine(mean)
    _previous(var, rng, f.previous, what)
    known = {"coefficient": np.asarray(f.coefficient), "offset": np.asarray(f.offset),
             "precision": _known(precision, "positive", f"{what}, precision")}
    _check_scalars(known, what)
    return known


def check_complete(model: Model) -> None:
    """ModelError naming a chain whose step (``ff.If(t > 0)``) was never written."""
    for name, start in model.chains.items():
        rng = start.variable.plates[-1].name
        raise ModelError(f"{start.provenance or name}: chain {name!r} has a start "
                         f"(ff.If({rng} == 0)) but no step; define {name} again under "
                         f"`with ff.If({rng} > 0):` from {name}[{rng} - 1].")


def check_gibbs(model: Model) -> None:
    """UnsupportedFactorError naming the first chain or ``ff.Constant`` table of
    ``model``: Gibbs sampling has no sampler for them yet (use EP or VMP)."""
    from factorflow.errors import UnsupportedFactorError
    for call in model.statements:
        if call.factor in ("DiscreteChain", "GaussianChain", "VectorGaussianChain"):
            raise UnsupportedFactorError(
                f"{call.provenance or call.factor}: Gibbs sampling does not support chains "
                f"over a plate ({call.factor} of {call.output.name!r}) yet; use "
                "algorithm 'ep' or 'vmp'.")
        for value in call.args.values():
            if isinstance(value, Indexed) and isinstance(value.base, Table):
                raise UnsupportedFactorError(
                    f"{call.provenance or call.factor}: Gibbs sampling does not support "
                    "ff.Constant(...) indexed by a variable yet; use algorithm 'ep' or "
                    "'vmp'.")
