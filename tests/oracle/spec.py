"""Random-model specifications: plain, frozen data that prints as factorflow code.

A :class:`Spec` is a small statement tree (draws, deterministic sums and scalings,
comparisons, constraints, gate groups, plates).  ``str(spec)`` is the equivalent
factorflow program, so a failing case is a copy-pasteable repro; ``tests.oracle.build``
runs exactly that text.  Nothing here imports factorflow: the exact references
(``tests.oracle.exact``) read the same data independently of the compiler.

Conventions (what the printed code means, and what the references assume):

* a name is the Python variable and the factorflow name of a drawn variable; a derived
  variable (``s = a + b``) is known to factorflow by its label (``"(a + b)"``);
* a plate block ``Plate(range, size, body)`` gives every variable drawn in ``body`` one
  element per index; constants there are scalars (broadcast) or :class:`PerElement`;
* a gate group ``Gate(kind, cond, branches)`` is one condition's set of branches, printed
  as consecutive ``with ff.If(c):`` / ``with ff.IfNot(c):`` (kind "if", keys True and
  False), ``with ff.Case(z, k):`` (kind "case", keys k) or one ``with ff.Switch(z):``
  (kind "switch", key None); inside a Switch, :class:`Index` reads ``array[z]``;
* a variable drawn in every branch of a group is an exit variable, readable after it; a
  variable drawn in one branch only is local to it (its posterior is conditional on the
  branch holding, as in Infer.NET).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


# ----- arguments -------------------------------------------------------------------------
@dataclass(frozen=True)
class Const:
    """A constant: a number, a bool, or a tuple (a probability vector / pseudo-counts)."""

    value: Any


@dataclass(frozen=True)
class PerElement:
    """One constant per element of the enclosing plate."""

    values: tuple


@dataclass(frozen=True)
class Ref:
    """The variable ``name`` (the element of the enclosing plate if it has one)."""

    name: str


@dataclass(frozen=True)
class Index:
    """``array[by]`` inside ``ff.Switch(by)``: the element of ``array`` that ``by`` picks."""

    array: str
    by: str


Arg = Const | PerElement | Ref | Index

FAMILY_ARGS = {
    "Bernoulli": ("p",), "Discrete": ("probs",), "Gaussian": ("mean", "precision"),
    "Beta": ("alpha", "beta"), "Gamma": ("shape", "rate"), "Dirichlet": ("alpha",),
    "Poisson": ("rate",), "Binomial": ("trials", "p"),
}
DOMAIN = {"Bernoulli": "bool", "Discrete": "int", "Gaussian": "real", "Beta": "unit",
          "Gamma": "positive", "Dirichlet": "simplex", "Poisson": "count",
          "Binomial": "count"}
CONTINUOUS = ("Gaussian", "Beta", "Gamma", "Dirichlet")


# ----- statements ------------------------------------------------------------------------
@dataclass(frozen=True)
class Draw:
    """``name = ff.<family>("name", *args, observed=...)``; observed None is latent; in a
    plate, observed is a tuple with one value per element."""

    name: str
    family: str
    args: tuple[Arg, ...]
    observed: Any = None


@dataclass(frozen=True)
class Sum:
    """``name = a + b`` (a deterministic real variable)."""

    name: str
    a: Arg
    b: Arg


@dataclass(frozen=True)
class Scale:
    """``name = c * a``; ``c`` a number, or :class:`PerElement` (printed ``a * [...]``)."""

    name: str
    c: float | PerElement
    a: Arg


@dataclass(frozen=True)
class Greater:
    """``name = a > t``, or ``name = ff.is_positive(a)`` when ``t`` is None."""

    name: str
    a: Arg
    t: float | None


@dataclass(frozen=True)
class Constrain:
    """``ff.constrain_true(arg)``."""

    arg: Ref


@dataclass(frozen=True)
class Gate:
    """One condition's branches: kind "if" (keys True/False), "case" (keys k) or
    "switch" (one branch, key None)."""

    kind: str
    cond: str
    branches: tuple[tuple[Any, tuple], ...]


@dataclass(frozen=True)
class Plate:
    """``with ff.Plate(ff.Range(range, size)):`` around ``body``."""

    range: str
    size: int
    body: tuple


Stmt = Draw | Sum | Scale | Greater | Constrain | Gate | Plate


@dataclass(frozen=True)
class Spec:
    """A whole model: its family label (for reports) and its statements."""

    family: str
    body: tuple = field(default=())

    def __str__(self) -> str:
        return render(self)

    def _repr_pretty_(self, printer, cycle) -> None:  # hypothesis prints the code
        printer.text("\n" + render(self))

    def size(self) -> int:
        """A size for choosing the smallest repro: statements plus plate elements."""
        return sum(_size(s) for s in self.body)


def _size(s: Stmt) -> int:
    if isinstance(s, Gate):
        return 1 + sum(_size(t) for _, body in s.branches for t in body)
    if isinstance(s, Plate):
        return 1 + s.size + sum(_size(t) for t in s.body)
    return 1


# ----- printing as factorflow code ---------------------------------------------------------
def _num(v: Any) -> str:
    if isinstance(v, bool | int):
        return repr(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, tuple | list):
        return "[" + ", ".join(_num(x) for x in v) + "]"
    return repr(v)


def _arg(a: Arg) -> str:
    if isinstance(a, Const):
        return _num(a.value)
    if isinstance(a, PerElement):
        return _num(a.values)
    if isinstance(a, Ref):
        return a.name
    if isinstance(a, Index):
        return f"{a.array}[{a.by}]"
    raise TypeError(a)


def _draw(s: Draw) -> str:
    args = [_arg(a) for a in s.args]
    if s.family == "Gaussian":
        text = f'{s.name} = ff.Gaussian("{s.name}", {args[0]}, precision={args[1]}'
    elif s.family == "Gamma":
        text = f'{s.name} = ff.Gamma("{s.name}", {args[0]}, rate={args[1]}'
    else:
        text = f'{s.name} = ff.{s.family}("{s.name}", {", ".join(args)}'
    if s.observed is not None:
        text += f", observed={_num(s.observed)}"
    return text + ")"


def _lines(stmts: tuple, depth: int, out: list[str]) -> None:
    pad = "    " * depth
    for s in stmts:
        if isinstance(s, Draw):
            out.append(pad + _draw(s))
        elif isinstance(s, Sum):
            out.append(f"{pad}{s.name} = {_arg(s.a)} + {_arg(s.b)}")
        elif isinstance(s, Scale) and isinstance(s.c, PerElement):
            out.append(f"{pad}{s.name} = {_arg(s.a)} * {_arg(s.c)}")
        elif isinstance(s, Scale):
            out.append(f"{pad}{s.name} = {_num(s.c)} * {_arg(s.a)}")
        elif isinstance(s, Greater):
            if s.t is None:
                out.append(f"{pad}{s.name} = ff.is_positive({_arg(s.a)})")
            else:
                out.append(f"{pad}{s.name} = {_arg(s.a)} > {_num(s.t)}")
        elif isinstance(s, Constrain):
            out.append(f"{pad}ff.constrain_true({_arg(s.arg)})")
        elif isinstance(s, Plate):
            out.append(f'{pad}{s.range} = ff.Range("{s.range}", {s.size})')
            out.append(f"{pad}with ff.Plate({s.range}):")
            _lines(s.body, depth + 1, out) if s.body else out.append(pad + "    pass")
        elif isinstance(s, Gate):
            for key, body in s.branches:
                if s.kind == "if":
                    head = f"ff.If({s.cond})" if key else f"ff.IfNot({s.cond})"
                elif s.kind == "case":
                    head = f"ff.Case({s.cond}, {key})"
                else:
                    head = f"ff.Switch({s.cond})"
                out.append(f"{pad}with {head}:")
                _lines(body, depth + 1, out) if body else out.append(pad + "    pass")
        else:
            raise TypeError(s)


def render(spec: Spec) -> str:
    """The factorflow program of ``spec`` (it binds ``model``)."""
    out = ["import factorflow as ff", "", f'with ff.Model("{spec.family}") as model:']
    _lines(spec.body, 1, out)
    if not spec.body:
        out.append("    pass")
    return "\n".join(out) + "\n"


# ----- what the spec declares ------------------------------------------------------------
@dataclass
class VarInfo:
    """A variable of a spec: its family (or "Sum"/"Scale"/"Greater"), plate, observed."""

    name: str
    family: str
    domain: str
    range: str | None
    size: int  # elements of its plate (1 without one)
    observed: Any
    categories: int | None  # Discrete: K; Dirichlet: K; Bernoulli: 2
    derived: bool

    @property
    def latent(self) -> bool:
        return self.observed is None

    @property
    def continuous(self) -> bool:
        return self.domain in ("real", "unit", "positive", "simplex")

    def slots(self) -> list[tuple[str, int | None]]:
        return [(self.name, None)] if self.range is None else \
            [(self.name, i) for i in range(self.size)]


def categories(s: Draw, variables: dict[str, VarInfo] | None = None) -> int | None:
    if s.family == "Bernoulli":
        return 2
    if s.family in ("Discrete", "Dirichlet"):
        a = s.args[0]
        if isinstance(a, Const):
            return len(a.value)
        if isinstance(a, Ref) and variables is not None:
            return variables[a.name].categories
        if isinstance(a, Index) and variables is not None:
            return variables[a.array].categories
    return None


def declared(spec: Spec) -> dict[str, VarInfo]:
    """Every variable of ``spec`` by name (a branch redefinition keeps the first entry)."""
    out: dict[str, VarInfo] = {}

    def visit(stmts: tuple, rng: str | None, size: int) -> None:
        for s in stmts:
            if isinstance(s, Draw) and s.name not in out:
                out[s.name] = VarInfo(s.name, s.family, DOMAIN[s.family], rng, size,
                                      s.observed, categories(s, out), False)
            elif isinstance(s, Sum | Scale):
                out[s.name] = VarInfo(s.name, type(s).__name__, "real", rng, size, None,
                                      None, True)
            elif isinstance(s, Greater):
                out[s.name] = VarInfo(s.name, "Greater", "bool", rng, size, None, 2, True)
            elif isinstance(s, Gate):
                for _, body in s.branches:
                    visit(body, rng, size)
            elif isinstance(s, Plate):
                visit(s.body, s.range, s.size)

    visit(spec.body, None, 1)
    return out


__all__ = ["Arg", "CONTINUOUS", "Const", "Constrain", "DOMAIN", "Draw", "FAMILY_ARGS",
           "Gate", "Greater", "Index", "PerElement", "Plate", "Ref", "Scale", "Spec", "Sum",
           "VarInfo", "declared", "render"]
