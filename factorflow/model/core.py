"""The modelling API: models, ranges (plates), random variables and factor statements.

A ``Model`` records, in order, the factor statements written inside its ``with`` block.
Nothing is computed here: the compiler lowers the recorded statements to the statement
IR (``factorflow.ir``).  Every statement remembers the source line that wrote it, so that
errors and generated code point back at the model.
"""

from __future__ import annotations

import contextvars
import linecache
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from factorflow.errors import ModelError

_MODEL: contextvars.ContextVar[Model | None] = contextvars.ContextVar("ff_model", default=None)


def current_model(what: str) -> Model:
    """The model whose ``with`` block is open, or ModelError naming ``what``."""
    model = _MODEL.get()
    if model is None:
        raise ModelError(f"{what} must be created inside a `with ff.Model():` block.")
    return model


def _provenance() -> str:
    """'file:line: source' of the first frame outside factorflow."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("factorflow"):
        frame = frame.f_back
    if frame is None:
        return ""
    code = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    name = frame.f_code.co_filename.rsplit("/", 1)[-1]
    return f"{name}:{frame.f_lineno}: {code}" if code else f"{name}:{frame.f_lineno}"


@dataclass(frozen=True, eq=False)
class Range:
    """A named index range; inside ``with ff.Plate(range)`` variables get an array axis."""

    name: str
    size: int

    def __post_init__(self) -> None:
        if not isinstance(self.size, int | np.integer) or self.size < 0:
            raise ModelError(f"Range {self.name!r}: size must be a non-negative integer, "
                             f"got {self.size!r}.")
        model = current_model(f"Range {self.name!r}")
        model._add_range(self)

    def __repr__(self) -> str:
        return f"Range({self.name!r}, {self.size})"


@dataclass(eq=False)
class Data:
    """An observed value (or constant) given when the model runs, not when it compiles.

    Changing its value between runs needs no recompilation: ``model.infer(...,
    data={"name": value})`` or ``compiled.run(data=...)``.
    """

    name: str
    value: Any = None
    model: Model | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.model = current_model(f"Data {self.name!r}")
        self.model._add_data(self)


@dataclass(eq=False)
class Variable:
    """A random variable of a model (possibly observed), batched over its plates."""

    name: str
    domain: str
    plates: tuple[Range, ...]
    model: Model
    observed: Any = None  # an array, a Data, or None for a latent variable
    size: int | None = None  # number of categories (int) or dimension (simplex)
    derived: bool = False  # defined by a deterministic factor
    provenance: str = ""

    @property
    def is_observed(self) -> bool:
        return self.observed is not None

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(r.size for r in self.plates)

    def __repr__(self) -> str:
        plates = "".join(f"[{r.name}]" for r in self.plates)
        return f"<{self.domain} variable {self.name}{plates}>"

    def __hash__(self) -> int:
        return id(self)

    # ----- operators build deterministic factors (see model.factories) --------------
    def __add__(self, other: Any) -> Variable:
        from factorflow.model import factories
        return factories.plus(self, other)

    __radd__ = __add__

    def __sub__(self, other: Any) -> Variable:
        from factorflow.model import factories
        return factories.minus(self, other)

    def __rsub__(self, other: Any) -> Variable:
        from factorflow.model import factories
        return factories.minus(other, self)

    def __mul__(self, other: Any) -> Variable:
        from factorflow.model import factories
        return factories.times(self, other)

    __rmul__ = __mul__

    def __gt__(self, other: Any) -> Variable:  # type: ignore[override]
        from factorflow.model import factories
        return factories.greater(self, other)

    def __lt__(self, other: Any) -> Variable:  # type: ignore[override]
        from factorflow.model import factories
        return factories.greater(other, self)

    def __and__(self, other: Any) -> Variable:
        from factorflow.model import factories
        return factories.logic("And", self, other)

    __rand__ = __and__

    def __or__(self, other: Any) -> Variable:
        from factorflow.model import factories
        return factories.logic("Or", self, other)

    __ror__ = __or__

    def __invert__(self) -> Variable:
        from factorflow.model import factories
        return factories.logic("Not", self)

    def __bool__(self) -> bool:
        raise ModelError(f"variable {self.name!r} is random: it has no truth value in Python. "
                         "Use ff.If(...) for conditions and &, |, ~ for logic.")

    def __getitem__(self, index: Any) -> Indexed:
        return Indexed(self, index)

    def initialize(self, distribution: Any) -> None:
        """Start inference from ``distribution`` for this variable (breaks symmetries)."""
        self.model.initial[self.name] = distribution


@dataclass(frozen=True, eq=False)
class Indexed:
    """``array_variable[index]``: an element chosen by observed integers, per plate element."""

    base: Variable
    index: Any  # an integer array (or Data) over the current plates


@dataclass(eq=False)
class FactorCall:
    """One statement ``output = Factor(args...)`` inside the given plates."""

    factor: str
    output: Variable | None
    args: dict[str, Any]  # argument name -> Variable | Indexed | Data | array constant
    plates: tuple[Range, ...]
    provenance: str = ""
    #: the plates and gates open around the statement, outermost first
    frames: tuple[Any, ...] = ()


@dataclass(frozen=True, eq=False)
class GateFrame:
    """An open gate: ``kind`` is "if" (``negated`` for IfNot), "case" (``value``) or
    "switch"; ``condition`` is the boolean or integer variable it branches on."""

    kind: str
    condition: Variable
    value: Any = None
    negated: bool = False
    provenance: str = ""

    def describe(self) -> str:
        name = self.condition.name
        if self.kind == "if":
            return f"ff.{'IfNot' if self.negated else 'If'}({name})"
        if self.kind == "case":
            return f"ff.Case({name}, {self.value})"
        return f"ff.Switch({name})"


class Model:
    """A probabilistic model: ``with ff.Model() as model: ...``.

    Guarantees: statements are kept in the order they were written; names are unique.
    """

    def __init__(self, name: str = "model") -> None:
        self.name = name
        self.ranges: dict[str, Range] = {}
        self.variables: dict[str, Variable] = {}
        self.data: dict[str, Data] = {}
        self.statements: list[FactorCall] = []
        self.initial: dict[str, Any] = {}
        self._frames: list[Any] = []  # plates and gates, in the order they were opened
        #: variable name -> the gate frames around each statement that defines it
        self.definitions: dict[str, list[tuple[Any, ...]]] = {}
        self._tokens: list[contextvars.Token] = []
        self._compiled: dict[str, Any] = {}
        self._counter = 0

    # ----- context --------------------------------------------------------------
    def __enter__(self) -> Model:
        self._tokens.append(_MODEL.set(self))
        return self

    def __exit__(self, *exc: Any) -> None:
        _MODEL.reset(self._tokens.pop())

    @contextmanager
    def _plate(self, rng: Range) -> Iterator[Range]:
        if rng.name not in self.ranges or self.ranges[rng.name] is not rng:
            raise ModelError(f"Plate({rng.name!r}): the range belongs to another model.")
        if rng in self._frames:
            raise ModelError(f"Plate({rng.name!r}) is already open.")
        self._frames.append(rng)
        try:
            yield rng
        finally:
            self._frames.remove(rng)

    @contextmanager
    def _gate(self, frame: GateFrame) -> Iterator[GateFrame]:
        self._frames.append(frame)
        try:
            yield frame
        finally:
            self._frames.remove(frame)

    @property
    def frames(self) -> tuple[Any, ...]:
        return tuple(self._frames)

    @property
    def gates(self) -> tuple[GateFrame, ...]:
        return tuple(f for f in self._frames if isinstance(f, GateFrame))

    @property
    def plates(self) -> tuple[Range, ...]:
        return tuple(f for f in self._frames if isinstance(f, Range))

    # ----- registration ----------------------------------------------------------
    def _check_name(self, name: str, what: str) -> None:
        if not isinstance(name, str) or not name:
            raise ModelError(f"{what} needs a non-empty string name, got {name!r}.")
        if name in self.variables or name in self.data or name in self.ranges:
            raise ModelError(f"{what} {name!r}: the name is already used in this model; "
                             "choose another.")

    def _add_range(self, rng: Range) -> None:
        self._check_name(rng.name, "Range")
        self.ranges[rng.name] = rng

    def _add_data(self, data: Data) -> None:
        self._check_name(data.name, "Data")
        self.data[data.name] = data

    def fresh_name(self, label: str) -> str:
        self._counter += 1
        name = f"{label}#{self._counter}"
        while name in self.variables:
            self._counter += 1
            name = f"{label}#{self._counter}"
        return name

    def add_variable(self, var: Variable) -> Variable:
        self._check_name(var.name, "Variable")
        self.variables[var.name] = var
        return var

    def add_statement(self, call: FactorCall) -> None:
        call.frames = self.frames
        if call.output is not None:
            self.definitions.setdefault(call.output.name, []).append(self.gates)
        self.statements.append(call)

    def variable(self, name: str) -> Variable:
        try:
            return self.variables[name]
        except KeyError:
            raise ModelError(f"the model has no variable {name!r}; it has "
                             f"{', '.join(self.variables) or 'none'}.") from None

    # ----- inference entry points (see factorflow.runtime) ------------------------
    def compile(self, algorithm: str = "ep", **options: Any) -> Any:
        """Compile for ``algorithm`` ("ep" or "vmp"); cached per algorithm and options."""
        from factorflow.runtime.compiled import compile_model
        key = (algorithm, tuple(sorted(options.items())), len(self.statements))
        if key not in self._compiled:
            self._compiled[key] = compile_model(self, algorithm, **options)
        return self._compiled[key]

    def infer(self, algorithm: str = "ep", iterations: int | None = None,
              init: dict | None = None, data: dict | None = None, *,
              tolerance: Any = "default", on_iteration: Any = None, **options: Any) -> Any:
        """Compile (once) and run inference; returns a ``factorflow.runtime.Result``.

        Runs until converged (``tolerance``, 1e-6 by default) or ``iterations`` sweeps
        (50 by default), warning with ``ff.ConvergenceWarning`` if not converged; see
        ``CompiledModel.run``."""
        if init:
            options["init"] = tuple(sorted(set(options.get("init", ())) | set(init)))
        run: dict[str, Any] = {} if tolerance == "default" else {"tolerance": tolerance}
        return self.compile(algorithm, **options).run(iterations=iterations, init=init,
                                                       data=data, on_iteration=on_iteration,
                                                       **run)


@contextmanager
def Plate(rng: Range) -> Iterator[Range]:
    """Open a plate: variables created inside get an array axis over ``rng``."""
    model = current_model(f"Plate({getattr(rng, 'name', rng)!r})")
    if not isinstance(rng, Range):
        raise ModelError(f"Plate takes an ff.Range, got {rng!r}.")
    with model._plate(rng):
        yield rng


__all__ = ["Model", "Range", "Plate", "Data", "Variable", "Indexed", "FactorCall", "GateFrame",
           "current_model", "_provenance"]
