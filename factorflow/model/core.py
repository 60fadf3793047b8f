"""The modelling API: models, ranges (plates), random variables and factor statements.

A ``Model`` records, in order, the factor statements written inside its ``with`` block.
Nothing is computed here: the compiler lowers the recorded statements to the statement
IR (``factorflow.ir``).  Every statement remembers the source line that wrote it, so that
errors and generated code point back at the model.
"""

from __future__ import annotations

import contextvars
import linecache
import math
import numbers
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast, overload

import numpy as np

from factorflow.errors import ModelError
from factorflow.model.links import Link

if TYPE_CHECKING:
    from factorflow.runtime.compiled import CompiledModel
    from factorflow.runtime.result import Result
    from factorflow.samplers.gibbs import GibbsModel
    from factorflow.samplers.result import SamplingResult
    from factorflow.viz import Diagram

_MODEL: contextvars.ContextVar[Model | None] = contextvars.ContextVar("ff_model", default=None)

#: the most elements a plate (or a nest of open plates) may have: every message over it
#: is held in memory as arrays of this many elements, several per variable
MAX_PLATE_ELEMENTS = 10**8


def check_label(name: Any, what: str) -> str:
    """``name`` if it can name a model element: a non-empty ``str`` without NUL bytes
    (NUL ends C strings, so file formats and tools would cut the name short).
    ModelError naming ``what`` otherwise."""
    if not isinstance(name, str) or not name:
        raise ModelError(f"{what} needs a non-empty string name, got {name!r}.")
    if "\0" in name:
        raise ModelError(f"{what} name {name!r} contains a NUL byte ('\\x00'); remove it.")
    return name


def plate_size(size: Any, what: str) -> int:
    """``size`` as a Python int if it is a whole number of elements: a non-negative
    integer (an integral float such as 3.0 is accepted) of at most MAX_PLATE_ELEMENTS.
    Booleans, fractions, NaN, strings and arrays are refused with ModelError naming
    ``what``."""
    if isinstance(size, bool | np.bool_):
        raise ModelError(f"{what}: size must be a non-negative integer, got the boolean "
                         f"{size!r}; give a number of elements.")
    if isinstance(size, numbers.Integral):
        n = int(size)
    elif isinstance(size, numbers.Real) and math.isfinite(size) and float(size).is_integer():
        n = int(size)
    else:
        raise ModelError(f"{what}: size must be a non-negative integer, got {size!r}.")
    if n < 0:
        raise ModelError(f"{what}: size must be a non-negative integer, got {size!r}.")
    if n > MAX_PLATE_ELEMENTS:
        raise ModelError(f"{what}: size {n:,} is above the limit of "
                         f"{MAX_PLATE_ELEMENTS:,} elements that factorflow holds in memory "
                         "per plate; split the data into batches.")
    return n


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
    """A named index range; inside ``with ff.Plate(range)`` variables get an array axis.

    >>> with ff.Model() as model:
    ...     n = ff.Range("n", 3)
    ...     with ff.Plate(n):
    ...         x = ff.Gaussian("x", 0.0, variance=1.0)
    >>> n, model.infer("ep")["x"].mean.shape
    (Range('n', 3), (3,))
    """

    name: str
    size: int

    def __post_init__(self) -> None:
        check_label(self.name, "Range")
        object.__setattr__(self, "size", plate_size(self.size, f"Range {self.name!r}"))
        model = current_model(f"Range {self.name!r}")
        model._add_range(self)

    def __repr__(self) -> str:
        return f"Range({self.name!r}, {self.size})"

    # the plate index in a chain (see model.chains): ``x[t - 1]``, ``ff.If(t == 0)``,
    # ``ff.If(t > 0)``; ranges otherwise compare and hash by identity
    __hash__ = object.__hash__

    def __sub__(self, lag: Any) -> Any:
        from factorflow.model.chains import range_offset
        return range_offset(self, lag)

    def __add__(self, lead: Any) -> Any:
        from factorflow.model.chains import range_lead
        return range_lead(self, lead)

    __radd__ = __add__

    def __eq__(self, other: Any) -> Any:
        if isinstance(other, numbers.Integral) and not isinstance(other, bool):
            from factorflow.model.chains import range_condition
            return range_condition(self, "==", other)
        return self is other

    def __gt__(self, other: Any) -> Any:
        from factorflow.model.chains import range_condition
        return range_condition(self, ">", other)

    def __ge__(self, other: Any) -> Any:
        from factorflow.model.chains import range_condition
        return range_condition(self, ">=", other)


@dataclass(eq=False)
class Data:
    """An observed value (or constant) given when the model runs, not when it compiles.

    Changing its value between runs needs no recompilation: ``model.infer(...,
    data={"name": value})`` or ``compiled.run(data=...)``.

    >>> with ff.Model() as model:
    ...     m = ff.Gaussian("m", 0.0, variance=1.0)
    ...     y = ff.Gaussian("y", m, variance=1.0, observed=ff.Data("y_data"))
    >>> compiled = model.compile("ep")
    >>> [round(float(compiled.run(data={"y_data": y})["m"].mean), 6) for y in (1.0, 3.0)]
    [0.5, 1.5]
    """

    name: str
    value: Any = None
    model: Model | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        check_label(self.name, "Data")
        self.model = current_model(f"Data {self.name!r}")
        self.model._add_data(self)


class Operators:
    """Python operators on model values (``Variable`` and ``Indexed``): each builds a
    deterministic factor statement (see ``model.factories``) and returns its variable.

    ``+ - *`` with a constant or another real value, unary ``-`` and ``+``, ``/`` by a known
    non-zero constant, ``> <`` on reals, ``& | ~`` on booleans.  A NumPy array on the left
    (``X[:, 0] * w``) defers to these operators (``__array_ufunc__ = None``) instead of
    building an object array elementwise.
    """

    __slots__ = ()
    __array_ufunc__ = None

    def __add__(self, other: Any) -> Variable:
        from factorflow.model import factories
        return factories.plus(self, other)

    def __radd__(self, other: Any) -> Variable:
        from factorflow.model import factories
        return factories.plus(other, self)

    def __sub__(self, other: Any) -> Variable:
        from factorflow.model import factories
        return factories.minus(self, other)

    def __rsub__(self, other: Any) -> Variable:
        from factorflow.model import factories
        return factories.minus(other, self)

    def __mul__(self, other: Any) -> Variable:
        from factorflow.model import factories
        return factories.times(self, other)

    def __rmul__(self, other: Any) -> Variable:
        from factorflow.model import factories
        return factories.times(other, self)

    def __neg__(self) -> Variable:
        from factorflow.model import factories
        return factories.negate(self)

    def __pos__(self) -> Operators:
        return self

    def __truediv__(self, other: Any) -> Variable:
        from factorflow.model import factories
        return factories.divide(self, other)

    def __rtruediv__(self, other: Any) -> Variable:
        from factorflow.model import factories
        return factories.divide(other, self)

    def __gt__(self, other: Any) -> Variable:
        from factorflow.model import factories
        return factories.greater(self, other)

    def __lt__(self, other: Any) -> Variable:
        from factorflow.model import factories
        return factories.greater(other, self)

    def __and__(self, other: Any) -> Variable:
        from factorflow.model import factories
        return factories.logic("And", self, other)

    def __rand__(self, other: Any) -> Variable:
        from factorflow.model import factories
        return factories.logic("And", other, self)

    def __or__(self, other: Any) -> Variable:
        from factorflow.model import factories
        return factories.logic("Or", self, other)

    def __ror__(self, other: Any) -> Variable:
        from factorflow.model import factories
        return factories.logic("Or", other, self)

    def __invert__(self) -> Variable:
        from factorflow.model import factories
        return factories.logic("Not", self)


@dataclass(eq=False)
class Variable(Operators):
    """A random variable of a model (possibly observed), batched over its plates: what
    the factories (``ff.Gaussian(name, ...)``) return.  It takes part in arithmetic
    (``a + b``, ``2 * a``), comparisons (``a > b``) and logic (``c & d``), each a new
    variable; ``x.initialize(distribution)`` sets where inference starts.

    >>> with ff.Model() as model:
    ...     with ff.Plate(ff.Range("n", 3)):
    ...         x = ff.Gaussian("x", 0.0, variance=1.0)
    ...     total = x[0] + x[1]
    >>> x, x.shape, x.is_observed, total.name
    (<real variable x[n]>, (3,), False, '(x[0] + x[1])')
    >>> model.infer("ep")[total.name]                 # N(0, 1) + N(0, 1) = N(0, 2)
    Gaussian(mean=0.0, variance=2.0)
    """

    name: str
    domain: str
    plates: tuple[Range, ...]
    model: Model
    observed: Any = None  # an array, a Data, or None for a latent variable
    size: int | None = None  # number of categories (int) or dimension (simplex)
    derived: bool = False  # defined by a deterministic factor
    provenance: str = ""
    #: observed with missing elements (``model.missing``): True where an element was seen
    seen: np.ndarray | None = None

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

    #: above NumPy's arrays, so that ``X @ w`` with an array X calls ``w.__rmatmul__``
    __array_priority__ = 1000

    def __matmul__(self, other: Any) -> Variable | Link:
        """``self @ other``: an inner product, or ``z @ B`` (``vectors.matmul``); a
        ``LinearMean`` (a Link) where Bᵀ z is a degenerate Gaussian."""
        from factorflow.model import vectors
        return vectors.matmul(self, other)

    def __rmatmul__(self, other: Any) -> Variable | Link:
        """``other @ self``: ``B @ z`` or an inner product (``vectors.matmul``)."""
        from factorflow.model import vectors
        return vectors.matmul(other, self)

    def __bool__(self) -> bool:
        raise ModelError(f"variable {self.name!r} is random: it has no truth value in Python. "
                         "Use ff.If(...) for conditions and &, |, ~ for logic.")

    def __getitem__(self, index: Any) -> Indexed | Variable:
        """``x[index]``: the elements of x chosen by ``index`` along its plate (an
        ``Indexed``); for a vector variable without plates and an integer index, its
        component (``vectors.component``: a real variable)."""
        if (self.domain == "vector" and not self.plates and isinstance(index, int | np.integer)
                and not isinstance(index, bool)):
            from factorflow.model import vectors
            return vectors.component(self, int(index))
        return Indexed(self, index)

    def initialize(self, distribution: Any) -> None:
        """Start inference from ``distribution`` for this variable (breaks symmetries)."""
        self.model.initial[self.name] = distribution


@dataclass(frozen=True, eq=False)
class Indexed(Operators):
    """``array_variable[index]``: an element chosen by observed integers, per plate element
    (or by a discrete variable inside ``ff.Switch`` / ``ff.Case``; ``x[t - 1]`` in a chain's
    step; ``base`` an ``ff.Constant`` table: see ``model.chains``).

    It takes part in arithmetic, comparisons and logic like a variable (``s[i] - s[j]``)."""

    base: Variable  # or a model.chains.Table (ff.Constant)
    index: Any  # integers (or Data) over the current plates, a Variable, or an Offset

    def __matmul__(self, other: Any) -> Any:
        from factorflow.model import vector_chains
        return vector_chains.matmul(self, other)

    def __rmatmul__(self, other: Any) -> Any:
        """``A @ x[t - 1]`` in a vector chain's step (``model.vector_chains``), otherwise
        as for a variable (``vectors.matmul``)."""
        from factorflow.model import vector_chains
        return vector_chains.matmul(other, self)

    def __bool__(self) -> bool:
        raise ModelError(f"{self.base.name}[...] is random: it has no truth value in Python. "
                         "Use ff.If(...) for conditions and &, |, ~ for logic.")


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


@dataclass(frozen=True)
class DataUse:
    """One place an ``ff.Data`` value is used: what the value must be there.

    ``shape`` is the shape it must have (``exact``: observed values and indices) or
    broadcast to (parameters); ``domain`` is the support it must lie in; ``size`` the
    number of categories of an index or category."""

    what: str
    domain: str
    shape: tuple[int, ...]
    exact: bool
    size: int | None = None


class Model:
    """A probabilistic model: ``with ff.Model() as model: ...``.

    Guarantees: statements are kept in the order they were written; names are unique;
    a model survives ``pickle`` and ``copy.deepcopy`` (its compiled cache is dropped and
    rebuilt on demand).

    >>> with ff.Model("coin") as model:
    ...     p = ff.Beta("p", 1.0, 1.0)
    ...     with ff.Plate(ff.Range("n", 4)):
    ...         flips = ff.Bernoulli("flip", p, observed=[True, True, True, False])
    >>> model.infer("ep")["p"]
    Beta(alpha=4.0, beta=2.0)
    """

    def __init__(self, name: str = "model") -> None:
        self.name = check_label(name, "Model")
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
        #: Data name -> every place its value is used (checked again at each run)
        self.data_uses: dict[str, list[DataUse]] = {}
        #: chains whose start is written and whose step is awaited (``model.chains``)
        self.chains: dict[str, Any] = {}

    # ----- pickle and copy ----------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        """The model's statements, variables and data; not its compiled programs (they
        hold generated functions) nor an open ``with`` block."""
        if self._tokens or self._frames:
            raise ModelError(f"model {self.name!r} cannot be saved while its `with` block "
                             "(or a plate or gate in it) is open; save it after the block.")
        state = dict(self.__dict__)
        state["_compiled"] = {}
        state["_tokens"] = []
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state.setdefault("data_uses", {})
        state.setdefault("chains", {})
        self.__dict__.update(state)

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
        elements = math.prod(r.size for r in self.plates) * rng.size
        if elements > MAX_PLATE_ELEMENTS:
            names = [r.name for r in self.plates] + [rng.name]
            raise ModelError(f"Plate({rng.name!r}): the open plates {names} have "
                             f"{elements:,} elements together, above the limit of "
                             f"{MAX_PLATE_ELEMENTS:,} that factorflow holds in memory; "
                             "split the data into batches.")
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
        """The plates (``Range``) and gates (``GateFrame``) open now, outermost first;
        empty outside every ``with`` block.

        >>> with ff.Model() as model:
        ...     c = ff.Bernoulli("c", 0.5)
        ...     with ff.Plate(ff.Range("n", 2)), ff.If(c):
        ...         print([getattr(f, "name", None) or f.describe() for f in model.frames])
        ['n', 'ff.If(c)']
        >>> model.frames
        ()
        """
        return tuple(self._frames)

    @property
    def gates(self) -> tuple[GateFrame, ...]:
        """The gates (``ff.If``, ``ff.Case``, ``ff.Switch``) open now, outermost first.

        >>> with ff.Model() as model:
        ...     c = ff.Bernoulli("c", 0.5)
        ...     with ff.IfNot(c):
        ...         print([g.describe() for g in model.gates])
        ['ff.IfNot(c)']
        """
        return tuple(f for f in self._frames if isinstance(f, GateFrame))

    @property
    def plates(self) -> tuple[Range, ...]:
        """The plates open now, outermost first: the array axes a variable created here
        gets.

        >>> with ff.Model() as model:
        ...     with ff.Plate(ff.Range("i", 3)), ff.Plate(ff.Range("j", 2)):
        ...         x = ff.Gaussian("x", 0.0, variance=1.0)
        ...         print(model.plates)
        (Range('i', 3), Range('j', 2))
        >>> x.shape
        (3, 2)
        """
        return tuple(f for f in self._frames if isinstance(f, Range))

    # ----- registration ----------------------------------------------------------
    def _check_name(self, name: str, what: str) -> None:
        check_label(name, what)
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
        """A name no variable of the model has, ``label#k`` (k counts up): the name of an
        intermediate expression such as ``a + b`` (results hide such names).

        >>> model = ff.Model()
        >>> model.fresh_name("sum"), model.fresh_name("sum")
        ('sum#1', 'sum#2')
        """
        self._counter += 1
        name = f"{label}#{self._counter}"
        while name in self.variables:
            self._counter += 1
            name = f"{label}#{self._counter}"
        return name

    def add_variable(self, var: Variable) -> Variable:
        """Register ``var`` (made by a factory such as ``ff.Gaussian``) under its name and
        return it; ModelError if the name is taken by a variable, a Data or a Range.

        >>> with ff.Model() as model:
        ...     x = ff.Gaussian("x", 0.0, variance=1.0)
        >>> model.add_variable(ff.Variable("x", "real", (), model))
        Traceback (most recent call last):
        ...
        factorflow.errors.ModelError: Variable 'x': the name is already used in this model; ...
        """
        self._check_name(var.name, "Variable")
        self.variables[var.name] = var
        return var

    def add_statement(self, call: FactorCall) -> None:
        """Append the factor statement ``call`` (the factories call this), recording the
        plates and gates open around it; statements keep the order they were written in.

        >>> with ff.Model() as model:
        ...     m = ff.Gaussian("m", 0.0, variance=1.0)
        ...     with ff.Plate(ff.Range("n", 2)):
        ...         y = ff.Gaussian("y", m, variance=1.0, observed=[1.0, 2.0])
        >>> [(c.factor, c.output.name, len(c.frames)) for c in model.statements]
        [('Gaussian', 'm', 0), ('Gaussian', 'y', 1)]
        """
        from factorflow.model.chains import check_no_chain_frame
        check_no_chain_frame(self, call.provenance or f"{call.factor} statement")
        call.frames = self.frames
        if call.output is not None:
            self.definitions.setdefault(call.output.name, []).append(self.gates)
        self.statements.append(call)

    def variable(self, name: str) -> Variable:
        """The variable called ``name``; ModelError listing the names there are otherwise.

        >>> with ff.Model() as model:
        ...     m = ff.Gaussian("m", 0.0, variance=1.0)
        >>> model.variable("m") is m
        True
        >>> model.variable("mu")
        Traceback (most recent call last):
        ...
        factorflow.errors.ModelError: the model has no variable 'mu'; it has m.
        """
        try:
            return self.variables[name]
        except KeyError:
            raise ModelError(f"the model has no variable {name!r}; it has "
                             f"{', '.join(self.variables) or 'none'}.") from None

    # ----- seeing the model (see model.display) ------------------------------------
    def __repr__(self) -> str:
        """A few lines: plates, variables and one line per factor statement."""
        from factorflow.model.display import summary
        return summary(self)

    def to_graphviz(self) -> Diagram:
        """The factor graph as a ``factorflow.viz.Diagram``: DOT source (a ``str``) that
        renders to SVG or PNG where Graphviz is installed (``.pipe("svg")``,
        ``.render("model.svg")``, shown inline in Jupyter).  Variables are circles
        (observed ones shaded), factors small squares, plates boxes and gates dashed
        boxes; see ``model.display.factor_graph``.

        >>> with ff.Model() as model:
        ...     m = ff.Gaussian("m", 0.0, variance=1.0)
        ...     y = ff.Gaussian("y", m, variance=1.0, observed=2.0)
        >>> dot = model.to_graphviz()
        >>> dot.splitlines()[0], "m" in dot.source and "filled" in dot.source
        ('digraph "model" {', True)
        """
        from factorflow.model.display import factor_graph
        return factor_graph(self)

    # ----- inference entry points (see factorflow.runtime) ------------------------
    @overload
    def compile(self, algorithm: Literal["ep", "vmp"] = "ep", **options: Any
                ) -> CompiledModel: ...

    @overload
    def compile(self, algorithm: Literal["gibbs"], **options: Any) -> GibbsModel: ...

    @overload
    def compile(self, algorithm: str, **options: Any) -> CompiledModel | GibbsModel: ...

    def compile(self, algorithm: str = "ep", **options: Any) -> CompiledModel | GibbsModel:
        """Compile for ``algorithm`` ("ep", "vmp" or "gibbs"); cached per algorithm and
        options.  ``backend="jax"`` (EP and VMP) runs the program under ``jax.jit``,
        ``backend="dask"`` over data chunked along its plate on a ``dask.distributed``
        cluster (``run(client=..., chunks=...)``; ``factorflow.runtime.backends``); the
        default is ``"numpy"``.

        ``init`` names the variables whose posteriors ``run(init=...)`` will start from:
        any iterable of names (a list, tuple or set; a dict's keys), or one name.

        >>> with ff.Model() as model:
        ...     m = ff.Gaussian("m", 0.0, variance=1.0)
        ...     y = ff.Gaussian("y", m, variance=1.0, observed=2.0)
        >>> compiled = model.compile("vmp")
        >>> compiled is model.compile("vmp"), compiled.run()["m"]  # exact: N(1, 1/2)
        (True, Gaussian(mean=1.0, variance=0.5))
        """
        from factorflow.runtime.compiled import compile_model
        if algorithm == "gibbs":
            _numpy_only(options)
            from factorflow.samplers.gibbs import compile_gibbs
            return compile_gibbs(self, **options)
        if "init" in options:
            options["init"] = init_names(options["init"])
        key = (algorithm, tuple(sorted(options.items())), len(self.statements))
        if key not in self._compiled:
            self._compiled[key] = compile_model(self, algorithm, **options)
        return self._compiled[key]

    @overload
    def infer(self, algorithm: Literal["ep", "vmp"] = "ep", iterations: int | None = None,
              init: dict | None = None, data: dict | None = None, *,
              tolerance: Any = "default", on_iteration: Any = None, damping: Any = None,
              checkpoint: Any = None, every: int | None = None, resume: bool | None = None,
              progress: bool = True, trace: bool | None = None, **options: Any
              ) -> Result: ...

    @overload
    def infer(self, algorithm: Literal["gibbs"], iterations: int | None = None,
              init: dict | None = None, data: dict | None = None, *,
              tolerance: Any = "default", on_iteration: Any = None, damping: Any = None,
              checkpoint: Any = None, every: int | None = None, resume: bool | None = None,
              progress: bool = True, trace: bool | None = None, **options: Any
              ) -> SamplingResult: ...

    @overload
    def infer(self, algorithm: str, iterations: int | None = None,
              init: dict | None = None, data: dict | None = None, *,
              tolerance: Any = "default", on_iteration: Any = None, damping: Any = None,
              checkpoint: Any = None, every: int | None = None, resume: bool | None = None,
              progress: bool = True, trace: bool | None = None, **options: Any
              ) -> Result | SamplingResult: ...

    def infer(self, algorithm: str = "ep", iterations: int | None = None,
              init: dict | None = None, data: dict | None = None, *,
              tolerance: Any = "default", on_iteration: Any = None, damping: Any = None,
              checkpoint: Any = None, every: int | None = None, resume: bool | None = None,
              progress: bool = True, trace: bool | None = None, **options: Any
              ) -> Result | SamplingResult:
        """Compile (once) and run inference; returns a ``factorflow.runtime.Result``.

        Runs until converged (``tolerance``, 1e-10 by default), at most ``iterations``
        sweeps (by default until converged, at most 10,000, stopping early when the
        changes stop shrinking), warning with ``ff.ConvergenceWarning`` if not converged;
        ``checkpoint=path, every=k`` saves the run every k sweeps and resumes it from
        ``path`` when run again (bit-identical to an uninterrupted run); a run longer
        than a second shows a progress bar on a terminal (``progress=False``: never);
        ``trace`` (VMP: on, EP: off by default) computes the bound or log evidence after
        every sweep for ``result.trace``; see ``CompiledModel.run``.

        ``algorithm="svi"``: stochastic variational inference on minibatches of the data
        plate, ``model.infer("svi", minibatch=100, steps=500, learning_rate=(1.0, 0.7),
        rng=0)`` (see ``factorflow.runtime.svi``).

        ``algorithm="gibbs"`` samples instead: ``model.infer("gibbs", draws=1000,
        burn=500, thin=1, chains=4, seed=0)`` returns a ``SamplingResult`` (see
        ``factorflow.samplers.gibbs.GibbsModel.run``).

        A Gaussian's mean from 2 points of variance 1 under a N(0, 100) prior: the exact
        posterior has precision 2 + 1/100 and mean (5 + 7) / (2 + 1/100):

        >>> with ff.Model() as model:
        ...     mean = ff.Gaussian("mean", 0.0, variance=100.0)
        ...     with ff.Plate(ff.Range("n", 2)):
        ...         x = ff.Gaussian("x", mean, variance=1.0, observed=[5.0, 7.0])
        >>> result = model.infer("ep")
        >>> result["mean"]
        Gaussian(mean=5.970149253731344, variance=0.49751243781094534)
        >>> bool(np.isclose(result["mean"].mean, 12 / 2.01)), result.converged
        (True, True)
        """
        if algorithm == "svi":  # minibatches of the data plate: factorflow.runtime.svi
            from factorflow.runtime.svi import run_svi
            return run_svi(self, init=init, data=data, **options)
        if algorithm == "gibbs":
            _numpy_only(options)
            from factorflow.samplers.gibbs import infer_gibbs
            passing = {"iterations": iterations, "tolerance": None if tolerance == "default"
                       else tolerance, "on_iteration": on_iteration, "damping": damping,
                       "checkpoint": checkpoint, "every": every, "resume": resume}
            return infer_gibbs(self, init, data, passing, options)
        if init:
            options["init"] = tuple(sorted(set(init_names(options.get("init", ())))
                                           | set(init)))
        run: dict[str, Any] = {} if tolerance == "default" else {"tolerance": tolerance}
        if trace is not None:
            run["trace"] = trace
        if damping is not None:
            run["damping"] = damping
        if checkpoint is not None or every is not None or resume is not None:
            run.update(checkpoint=checkpoint, every=every, resume=resume)
        for name in ("client", "chunks", "gather"):  # the Dask backend's run options
            if name in options:
                run[name] = options.pop(name)
        compiled = cast("CompiledModel", self.compile(algorithm, **options))  # not Gibbs
        return compiled.run(iterations=iterations, init=init, data=data,
                            on_iteration=on_iteration, progress=progress, **run)


    def predictive(self, result: Result, n: int = 1000, rng: Any = None,
                   variables: Any = None) -> dict[str, np.ndarray]:
        """``n`` draws from the posterior predictive of the observed variables (or of the
        observed names in ``variables``): each latent variable drawn from its posterior
        in ``result``, then each observed one from the statements defining it.  Returns
        name -> array of shape ``(n,) + plate sizes``; see ``model.predictive``.

        >>> with ff.Model() as model:
        ...     m = ff.Gaussian("m", 0.0, variance=1.0)
        ...     with ff.Plate(ff.Range("n", 2)):
        ...         y = ff.Gaussian("y", m, variance=1.0, observed=[2.0, 2.0])
        >>> draws = model.predictive(model.infer("ep"), n=200_000, rng=0)["y"]
        >>> draws.shape, np.round(draws.mean(axis=0), 1), np.round(draws.var(axis=0), 1)
        ((200000, 2), array([1.3, 1.3]), array([1.3, 1.3]))

        (m's posterior is N(4/3, 1/3): each new y ~ N(4/3, 1 + 1/3).)
        """
        from factorflow.model.predictive import predictive
        return predictive(self, result, n, rng, variables)


def _numpy_only(options: dict[str, Any], what: str = "Gibbs sampling") -> None:
    """``what`` (Gibbs sampling, SVI) runs on NumPy: ``backend`` (removed from
    ``options``) must be "numpy" or absent; ff.BackendError otherwise (an unknown name
    lists the backends)."""
    from factorflow.runtime.backends import check_backend
    if check_backend(options.pop("backend", "numpy")) != "numpy":
        from factorflow.errors import BackendError
        raise BackendError(f"{what} runs on NumPy only; leave backend= out.")


def init_names(init: Any) -> tuple[str, ...]:
    """The variable names ``init`` lists, sorted and without repeats: an iterable of
    names or a single name.  ModelError for anything that is not names."""
    names = (init,) if isinstance(init, str) else init
    try:
        names = tuple(names)
    except TypeError:
        raise ModelError(f"init must list variable names (e.g. init=['mean']), got "
                         f"{init!r}.") from None
    bad = [n for n in names if not isinstance(n, str)]
    if bad:
        raise ModelError(f"init must list variable names (strings), got {bad[0]!r}.")
    return tuple(sorted(set(names)))


@contextmanager
def Plate(rng: Range) -> Iterator[Range]:
    """Open a plate: variables created inside get an array axis over ``rng``.

    >>> with ff.Model() as model:
    ...     with ff.Plate(ff.Range("group", 2)):
    ...         rate = ff.Gamma("rate", 1.0, rate=1.0)
    ...         counts = ff.Poisson("count", rate, observed=[0, 3])
    >>> model.infer("ep")["rate"].mean
    array([0.5, 2. ])
    """
    model = current_model(f"Plate({getattr(rng, 'name', rng)!r})")
    if not isinstance(rng, Range):
        raise ModelError(f"Plate takes an ff.Range, got {rng!r}.")
    with model._plate(rng):
        yield rng


__all__ = ["Model", "Range", "Plate", "Data", "DataUse", "Variable", "Indexed", "FactorCall",
           "GateFrame", "MAX_PLATE_ELEMENTS", "current_model", "check_label", "plate_size",
           "init_names", "_provenance"]
