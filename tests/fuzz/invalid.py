"""A hypothesis strategy of random invalid models, as printable ``ModelSpec``s.

``invalid_models()`` writes a small valid model (variables that EP and VMP both run)
and then one fault, of one of these kinds (the rows of the fuzz table):

* ``foreign`` — a variable, range, ``ff.Data`` or condition of another model;
* ``plate-scope`` — a variable used outside its plate, a gate opened outside its
  condition's plate, a plate opened twice, a plate over something not a range;
* ``gate-scope`` — a variable read outside the gate that defines it, a gate on a
  variable of the wrong type (``ff.Switch`` on a real, ``ff.If`` on a discrete), a case
  value out of range, ``array[z]`` outside ``ff.Switch(z)`` or with a size mismatch,
  branch definitions that disagree, an ``ff.Deterministic`` with a non-real parent;
* ``shape`` — observed values, parameters, index arrays, Dirichlet/Discrete vectors of
  the wrong shape; indices and categories out of range;
* ``support`` — values outside the support (Gamma shape ≤ 0, probabilities > 1,
  Bernoulli observed 2, Poisson observed -1 or 1.5, Binomial count > trials ...);
* ``nan-inf`` — NaN or ±inf in observed values, parameters and ``ff.Data``;
* ``names`` — empty names, NUL bytes, non-strings; bad ``ff.Range`` sizes;
* ``dtype`` — complex, object, string and ragged data;
* ``duplicate`` — one name for two variables, ranges or data;
* ``run-data`` — ``run(data=...)`` of the wrong shape or support, for an unknown name,
  or a ``Data.value`` changed after compiling;
* ``run-options`` — ``run`` with bad ``iterations=``, ``tolerance=``, ``damping=`` or
  ``init=``;
* ``user-factor`` — an ``@ff.factor`` called with missing or extra arguments, values
  outside its arguments' supports, a category out of range of its vector argument.

Each spec names its culprit (the element the error message must name) and the error
class it must raise: ``ff.DataError`` for bad values and shapes, ``ff.ModelError`` (any
subclass) for the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

from tests.fuzz.spec import ModelSpec, lit
from tests.fuzz.valid import USER_FACTORS

INVALID_KINDS = ("foreign", "plate-scope", "gate-scope", "shape", "support", "nan-inf",
                 "names", "dtype", "duplicate", "run-data", "run-options", "user-factor")

#: names for the culprit: distinctive words (a message naming them names the culprit),
#: and a few that are not identifiers
CULPRITS = ("y1", "obs", "theta", "x_1", "skill", "mu0", "é", "a b", "w[0]")
BAD_NAMES = ("", "a\x00b", 3, None, b"x", ("x",), 2.5, "\x00")
#: Range sizes as source text: negative, fractional, not numbers, too large
BAD_SIZES = ("-1", "2.5", "'3'", "True", "float('nan')", "10**9", "None", "[2]",
             "float('inf')", "np.float64(2.5)", "2 + 0j", "np.array([2])")


@dataclass
class Fault:
    culprit: tuple[str, ...]
    expected: str = "ModelError"
    note: str = ""
    data: str = ""
    after: tuple[str, ...] = ()
    options: str = ""
    iterations: Any = 5


@dataclass
class FaultWriter:
    """Writes a small valid model, then one fault."""

    draw: Any
    lines: list[str] = field(default_factory=list)
    prelude: list[str] = field(default_factory=list)
    depth: int = 1
    plates: list[tuple[str, int]] = field(default_factory=list)
    counter: int = 0
    #: where the plates and gates the fault sits in begin (see ``before_context``)
    context_at: int | None = None
    #: whether a Switch is open around the fault (gates inside it are Switches too)
    switched: bool = False

    def pick(self, options: Any) -> Any:
        return self.draw(st.sampled_from(tuple(options)))

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def culprit(self) -> str:
        return self.pick(CULPRITS)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(size for _, size in self.plates)

    def reals(self, shape: tuple[int, ...]) -> np.ndarray:
        n = int(np.prod(shape)) if shape else 1
        return np.array([self.pick((0.5, 1.0, -2.0, 3.0)) for _ in range(n)]).reshape(shape)

    # ----- the valid part -------------------------------------------------------------
    def base(self) -> None:
        """0-3 statements that EP and VMP both run."""
        for _ in range(self.draw(st.integers(0, 3))):
            form = self.pick(("gauss", "beta", "dirichlet", "plate"))
            if form == "gauss":
                m = self.fresh()
                self.emit(f"{m} = ff.Gaussian({m!r}, 0.0, precision=1.0)")
                if self.draw(st.booleans()):
                    self.emit(f"ff.Gaussian({self.fresh()!r}, {m}, precision=1.0, "
                              "observed=1.5)")
            elif form == "beta":
                b = self.fresh()
                self.emit(f"{b} = ff.Beta({b!r}, 1.0, 1.0)")
                self.emit(f"ff.Bernoulli({self.fresh()!r}, {b}, observed=True)")
            elif form == "dirichlet":
                w = self.fresh()
                self.emit(f"{w} = ff.Dirichlet({w!r}, np.ones(3))")
                self.emit(f"ff.Discrete({self.fresh()!r}, {w}, observed=1)")
            else:
                size = self.draw(st.integers(0, 3))
                r = self.fresh("r")
                self.emit(f"{r} = ff.Range({r!r}, {size})")
                self.emit(f"with ff.Plate({r}):")
                self.emit(f"    ff.Gaussian({self.fresh()!r}, 0.0, precision=1.0, "
                          f"observed={lit(self.reals((size,)))})")

    def open_plates(self, min_size: int = 1, most: int = 2, gates: bool = True) -> None:
        """Open 0..most plates (sizes min_size..4) and, now and then, gates (on a new
        condition) for the fault to sit in."""
        if self.context_at is None:
            self.context_at = len(self.lines)
        for _ in range(self.draw(st.integers(0, most))):
            if gates and self.draw(st.integers(0, 3)) == 0:
                c = self.fresh("c")
                # inside a Switch only Switches: a variable defined there without its axis
                # must be defined in every case of a gate inside it (refused by design)
                form = "Switch" if self.switched else self.pick(
                    ("If", "IfNot", "Case", "Switch"))
                self.switched = self.switched or form == "Switch"
                if form in ("If", "IfNot"):
                    self.emit(f"{c} = ff.Bernoulli({c!r}, 0.5)")
                    self.emit(f"with ff.{form}({c}):")
                else:
                    self.emit(f"{c} = ff.Discrete({c!r}, np.array([0.5, 0.5]))")
                    self.emit(f"with ff.Case({c}, 1):" if form == "Case" else
                              f"with ff.Switch({c}):")
                self.depth += 1
                continue
            r = self.fresh("r")
            size = self.draw(st.integers(min_size, 4))
            self.emit(f"{r} = ff.Range({r!r}, {size})")
            self.emit(f"with ff.Plate({r}):")
            self.depth += 1
            self.plates.append((r, size))

    def plate_needed(self, min_size: int = 1) -> None:
        if not self.plates:
            if self.context_at is None:
                self.context_at = len(self.lines)
            r = self.fresh("r")
            size = self.draw(st.integers(min_size, 4))
            self.emit(f"{r} = ff.Range({r!r}, {size})")
            self.emit(f"with ff.Plate({r}):")
            self.depth += 1
            self.plates.append((r, size))

    def before_context(self, lines: list[str]) -> None:
        """Write ``lines`` at the model's top level, before the fault's plates and gates
        (an array the fault indexes)."""
        at = len(self.lines) if self.context_at is None else self.context_at
        self.lines[at:at] = lines


# ----- faults by kind -------------------------------------------------------------------
def foreign(w: FaultWriter) -> Fault:
    name = w.culprit()
    form = w.pick(("mean", "arith", "plate", "data", "data-observed", "if", "constrain",
                   "determ", "index", "switch", "compare"))
    other = ['with ff.Model("other"):']
    if form in ("mean", "arith", "determ", "compare"):
        other.append(f"    f = ff.Gaussian({name!r}, 0.0, precision=1.0)")
    elif form == "plate":
        other.append(f"    f = ff.Range({name!r}, 2)")
    elif form in ("data", "data-observed"):
        other.append(f"    f = ff.Data({name!r}, 1.0)")
    elif form in ("if", "constrain"):
        other.append(f"    f = ff.Bernoulli({name!r}, 0.5)")
    elif form == "switch":
        other.append(f"    f = ff.Discrete({name!r}, np.array([0.5, 0.5]))")
    else:
        other += ['    k = ff.Range("k", 2)', "    with ff.Plate(k):",
                  f"        f = ff.Gaussian({name!r}, 0.0, precision=1.0)"]
    w.prelude += [*other, ""]
    w.open_plates()
    y = w.fresh()
    if form == "mean":
        w.emit(f"{y} = ff.Gaussian({y!r}, f, precision=1.0, observed={lit(w.reals(w.shape))})")
    elif form == "arith":
        w.emit("a = ff.Gaussian('a', 0.0, precision=1.0)")
        w.emit(w.pick((f"{y} = f + a", f"{y} = a + f", f"{y} = 2.0 * f", f"{y} = f - 1.0",
                       f"{y} = 1.0 - f", f"{y} = a * f")))
    elif form == "compare":
        w.emit(w.pick((f"{y} = f > 0.0", f"{y} = ff.is_positive(f)", f"{y} = f < 1.0")))
    elif form == "plate":
        w.emit("with ff.Plate(f):")
        w.emit(f"    {y} = ff.Gaussian({y!r}, 0.0, precision=1.0)")
    elif form == "data":
        w.emit(f"{y} = ff.Gaussian({y!r}, f, precision=1.0)")
    elif form == "data-observed":
        w.emit(f"{y} = ff.Gaussian({y!r}, 0.0, precision=1.0, observed=f)")
    elif form == "if":
        w.emit(w.pick(("with ff.If(f):", "with ff.IfNot(f):", "with ff.Case(f, 0):")))
        w.emit(f"    {y} = ff.Gaussian({y!r}, 0.0, precision=1.0)")
    elif form == "constrain":
        w.emit(w.pick(("ff.constrain_true(f)", f"{y} = ~f", f"{y} = f & True")))
    elif form == "switch":
        w.emit("with ff.Switch(f):")
        w.emit(f"    {y} = ff.Gaussian({y!r}, 0.0, precision=1.0)")
    elif form == "determ":
        w.emit(f"{y} = ff.Deterministic({y!r}, lambda a: 2.0 * a, a=f)")
    else:
        w.plate_needed()
        idx = np.zeros(w.shape, int)
        w.emit(f"{y} = ff.Gaussian({y!r}, f[{lit(idx)}], precision=1.0)")
    return Fault((name,), note=f"{form} from another model")


def plate_scope(w: FaultWriter) -> Fault:
    name = w.culprit()
    n, size = w.fresh("r"), w.draw(st.integers(0, 3))
    form = w.pick(("top", "other-plate", "arith", "if", "switch", "twice", "variable",
                   "not-range", "constrain", "compare"))
    if form == "twice":
        w.emit(f"n = ff.Range({name!r}, {size})")
        w.emit("with ff.Plate(n):")
        w.emit(f"    {w.fresh()} = ff.Gaussian({w.fresh()!r}, 0.0, precision=1.0)")
        w.emit("    with ff.Plate(n):")
        w.emit(f"        {w.fresh()} = ff.Gaussian({w.fresh()!r}, 0.0, precision=1.0)")
        return Fault((name,), note="a plate opened inside itself")
    if form == "not-range":
        bad = w.pick(("3", "'n'", "None", "range(3)"))
        w.emit(f"with ff.Plate({bad}):")
        w.emit("    pass")
        return Fault((repr(eval(bad)),), note="ff.Plate of something not a Range")
    w.emit(f"{n} = ff.Range({n!r}, {size})")
    w.emit(f"with ff.Plate({n}):")
    factory = {"if": f"ff.Bernoulli({name!r}, 0.5)", "constrain": f"ff.Bernoulli({name!r}, 0.5)",
               "switch": f"ff.Discrete({name!r}, np.array([0.5, 0.5]))"}.get(
                   form, f"ff.Gaussian({name!r}, 0.0, precision=1.0)")
    w.emit(f"    x = {factory}")
    if form == "variable":
        w.emit("with ff.Plate(x):")
        w.emit("    pass")
        return Fault((name,), note="ff.Plate of a variable")
    if form == "other-plate":
        m = w.fresh("r")
        w.emit(f"{m} = ff.Range({m!r}, {size})")
        w.emit(f"with ff.Plate({m}):")
        w.depth += 1
    y = w.fresh()
    if form in ("top", "other-plate"):
        w.emit(f"{y} = ff.Gaussian({y!r}, x, precision=1.0)")
    elif form == "arith":
        w.emit(w.pick((f"{y} = x + 1.0", f"{y} = 2.0 * x", f"{y} = x * x", f"{y} = 1.0 - x")))
    elif form == "compare":
        w.emit(w.pick((f"{y} = x > 0.0", f"{y} = ff.is_positive(x)")))
    elif form == "if":
        w.emit(w.pick(("with ff.If(x):", "with ff.IfNot(x):", "with ff.Case(x, 1):")))
        w.emit(f"    {y} = ff.Gaussian({y!r}, 0.0, precision=1.0)")
    elif form == "switch":
        w.emit("with ff.Switch(x):")
        w.emit(f"    {y} = ff.Gaussian({y!r}, 0.0, precision=1.0)")
    else:
        w.emit(w.pick(("ff.constrain_true(x)", f"{y} = ~x", f"{y} = x | True")))
    return Fault((name,), note=f"{form}: used outside its plate")


def gate_scope(w: FaultWriter) -> Fault:
    name = w.culprit()
    form = w.pick(("read-outside", "if-on", "switch-on", "case-value", "index-no-switch",
                   "switch-size", "branch-mismatch", "branch-observed", "determ-parent",
                   "determ-args", "index-two-plates", "case-read-outside"))
    w.open_plates(most=1)
    y = w.fresh()
    if form in ("read-outside", "case-read-outside"):
        if form == "read-outside":
            w.emit("c = ff.Bernoulli('c', 0.5)")
            w.emit(w.pick(("with ff.If(c):", "with ff.IfNot(c):")))
        else:
            w.emit("z = ff.Discrete('z', np.array([0.2, 0.3, 0.5]))")
            w.emit(f"with ff.Case(z, {w.pick((0, 1, 2))}):")
        w.emit(f"    x = ff.Gaussian({name!r}, 0.0, precision=1.0)")
        w.emit(w.pick((f"{y} = ff.Gaussian({y!r}, x, precision=1.0)", f"{y} = x + 1.0",
                       f"{y} = x > 0.0")))
        return Fault((name,), note="read outside the gate that defines it")
    if form in ("if-on", "switch-on"):
        factory = w.pick((f"ff.Gaussian({name!r}, 0.0, precision=1.0)",
                          f"ff.Gamma({name!r}, 1.0, rate=1.0)",
                          f"ff.Beta({name!r}, 1.0, 1.0)",
                          f"ff.Dirichlet({name!r}, np.ones(2))",
                          f"ff.Discrete({name!r}, np.array([0.5, 0.5]))",
                          f"ff.Bernoulli({name!r}, 0.5)"))
        gate = w.pick(("If", "IfNot")) if form == "if-on" else "Switch"
        if (gate == "Switch" and "Discrete" in factory) or (
                gate != "Switch" and "Bernoulli" in factory):
            factory = f"ff.Gaussian({name!r}, 0.0, precision=1.0)"
        w.emit(f"x = {factory}")
        w.emit(f"with ff.{gate}(x):")
        w.emit(f"    {y} = ff.Gaussian({y!r}, 0.0, precision=1.0)")
        return Fault((name,), note=f"ff.{gate} on a variable of the wrong type")
    if form == "case-value":
        k = w.pick((2, 3))
        value = w.pick((str(k), "-1", "1.5", "'a'", "True", "None", f"np.int64({k})"))
        w.emit(f"z = ff.Discrete({name!r}, np.ones({k}) / {k})" if k == 2 else
               f"z = ff.Discrete({name!r}, np.array([0.2, 0.3, 0.5]))")
        w.emit(f"with ff.Case(z, {value}):")
        w.emit(f"    {y} = ff.Gaussian({y!r}, 0.0, precision=1.0)")
        return Fault((name,), note="case value outside the range")
    if form in ("index-no-switch", "switch-size"):
        k = w.fresh("r")
        size = w.pick((2, 3))
        zsize = size if form == "index-no-switch" else size + w.pick((1, -1))
        lines = [f"{k} = ff.Range({k!r}, {size})", f"with ff.Plate({k}):",
                 "    means = ff.Gaussian('means', 0.0, precision=1.0)"]
        w.before_context(["    " + line for line in lines])
        probs = lit(np.ones(zsize) / zsize) if zsize != 3 else "np.array([0.2, 0.3, 0.5])"
        w.emit(f"z = ff.Discrete({name!r}, {probs})")
        if form == "switch-size":
            w.emit("with ff.Switch(z):")
            w.emit(f"    {y} = ff.Gaussian({y!r}, means[z], precision=1.0, observed="
                   f"{lit(w.reals(w.shape))})")
            return Fault((name, "means"), note="Switch size differs from the array")
        w.emit(f"{y} = ff.Gaussian({y!r}, means[z], precision=1.0, observed="
               f"{lit(w.reals(w.shape))})")
        return Fault((name,), note="array[z] outside ff.Switch(z)")
    if form in ("branch-mismatch", "branch-observed"):
        w.emit("c = ff.Bernoulli('c', 0.5)")
        w.emit("with ff.If(c):")
        w.emit(f"    x = ff.Gaussian({name!r}, 0.0, precision=1.0)")
        w.emit("with ff.IfNot(c):")
        if form == "branch-mismatch":
            w.emit(w.pick((f"    x = ff.Beta({name!r}, 1.0, 1.0)",
                           f"    x = ff.Gamma({name!r}, 1.0, rate=1.0)",
                           f"    x = ff.Bernoulli({name!r}, 0.5)")))
        elif w.draw(st.booleans()):
            w.emit(f"    x = ff.Gaussian({name!r}, 1.0, precision=1.0, "
                   f"observed={lit(w.reals(w.shape))})")
        else:  # an observed child in both branches, observed differently
            w.lines[-3] = w.lines[-3].replace(
                "0.0, precision=1.0)", f"0.0, precision=1.0, observed={lit(np.full(w.shape, 0.5))})")
            w.emit(f"    x = ff.Gaussian({name!r}, 1.0, precision=1.0, "
                   f"observed={lit(np.full(w.shape, 1.5))})")
        return Fault((name,), note="branch definitions disagree")
    if form == "determ-parent":
        w.emit(w.pick(("b = ff.Bernoulli('b', 0.5)", "b = ff.Gamma('b', 1.0, rate=1.0)",
                       "b = ff.Beta('b', 1.0, 1.0)")))
        w.emit(f"{y} = ff.Deterministic({name!r}, lambda a: 2.0 * a, a=b)")
        return Fault((name,), note="ff.Deterministic with a non-real parent")
    if form == "determ-args":
        w.emit("a = ff.Gaussian('a', 0.0, precision=1.0)")
        w.emit(w.pick((f"{y} = ff.Deterministic({name!r}, lambda a, b: a + b, a=a)",
                       f"{y} = ff.Deterministic({name!r}, lambda b: 2.0 * b, a=a)",
                       f"{y} = ff.Deterministic({name!r}, lambda a: 2.0, a=a)")))
        return Fault((name,), note="ff.Deterministic formula and parents disagree")
    # index-two-plates
    w.before_context([
        "    k1 = ff.Range('k1', 2)", "    k2 = ff.Range('k2', 2)",
        "    with ff.Plate(k1):", "        with ff.Plate(k2):",
        f"            x = ff.Gaussian({name!r}, 0.0, precision=1.0)"])
    w.emit(f"{y} = ff.Gaussian({y!r}, x[{lit(np.zeros(w.shape, int))}], precision=1.0)")
    return Fault((name,), note="indexing a variable with two plate axes")


def shape(w: FaultWriter) -> Fault:
    name = w.culprit()
    w.open_plates()
    form = w.pick(("observed", "param", "index-shape", "index-range", "dirichlet-alpha",
                   "discrete-observed", "dirichlet-observed", "probs", "data-observed",
                   "binomial-observed"))
    good = w.shape

    def wrong(broadcasts: bool = False) -> tuple[int, ...]:
        """A shape other than the plates'; for a parameter (``broadcasts``) one that
        does not broadcast to them either."""
        how = w.pick(("grow", "lead") if broadcasts else ("grow", "shrink", "extra", "drop"))
        if how == "lead":
            return (2,) + good
        if how == "extra" or not good:
            return good + (w.pick((1, 2)),)
        if how == "drop":
            return good[1:]
        i = w.draw(st.integers(0, len(good) - 1))
        bad = list(good)
        bad[i] = bad[i] + 1 if how == "grow" or bad[i] == 0 else bad[i] - 1
        return tuple(bad)
    if form in ("observed", "param", "data-observed", "binomial-observed"):
        bad = wrong(broadcasts=form == "param")
        value = lit(w.reals(bad))
        if form == "observed":
            w.emit(f"x = ff.Gaussian({name!r}, 0.0, precision=1.0, observed={value})")
        elif form == "param":
            w.emit(f"x = ff.Gaussian({name!r}, {value}, precision=1.0)")
        elif form == "binomial-observed":
            counts = lit(np.ones(bad, int)) if bad else "1"
            w.emit(f"x = ff.Binomial({name!r}, 3, 0.5, observed={counts})")
        else:
            w.emit(f"d = ff.Data('d', {value})")
            w.emit(f"x = ff.Gaussian({name!r}, 0.0, precision=1.0, observed=d)")
            return Fault((name, "d"), "DataError", "ff.Data observed with the wrong shape")
        return Fault((name,), "DataError", f"{form} of the wrong shape")
    if form in ("index-shape", "index-range"):
        size = w.pick((2, 3))
        w.before_context([
            f"    k = ff.Range('k', {size})", "    with ff.Plate(k):",
            f"        base = ff.Gaussian({name!r}, 0.0, precision=1.0)"])
        if form == "index-shape":  # an index broadcasts like a parameter
            index = np.zeros(wrong(broadcasts=True), int)
        else:
            index = np.zeros(good, int)
            flat = index.reshape(-1)
            flat[w.draw(st.integers(0, flat.size - 1))] = w.pick((size, -1, size + 3))
        w.emit(f"{w.fresh()} = ff.Gaussian('y', base[{lit(index)}], precision=1.0)")
        return Fault((name, "y"), "DataError", f"{form}: a bad index array")
    if form == "dirichlet-alpha":
        w.plate_needed()
        good = w.shape
        bad = wrong(broadcasts=True) + (3,)
        w.emit(f"x = ff.Dirichlet({name!r}, {lit(np.ones(bad))})")
        return Fault((name,), "DataError", "Dirichlet alpha of the wrong shape")
    if form == "discrete-observed":
        k = w.pick((2, 3))
        value = np.zeros(good, int)
        flat = value.reshape(-1)
        if flat.size:
            flat[w.draw(st.integers(0, flat.size - 1))] = w.pick((k, k + 1))
        else:
            value = np.zeros(wrong(), int)
        w.emit(f"w = ff.Dirichlet('w', np.ones({k}))")
        w.emit(f"x = ff.Discrete({name!r}, w, observed={lit(value)})")
        return Fault((name,), "DataError", "Discrete observed outside 0..K-1")
    if form == "dirichlet-observed":
        value = np.full(good + (w.pick((2, 4)),), 0.5 if True else 0.0)
        value = value / value.shape[-1] * 1.0
        w.emit(f"x = ff.Dirichlet({name!r}, np.ones(3), observed={lit(value)})")
        return Fault((name,), "DataError", "Dirichlet observed with the wrong dimension")
    # probs
    w.plate_needed()
    good = w.shape
    bad = wrong(broadcasts=True) + (2,)
    w.emit(f"x = ff.Discrete({name!r}, {lit(np.full(bad, 0.5))})")
    return Fault((name,), "DataError", "Discrete probs of the wrong shape")


#: (factory call with {name} and {v}, bad values, a good value, what is wrong): a value
#: outside the argument's support, in every factory and argument
SUPPORT = (
    ("ff.Gamma({name!r}, {v}, rate=1.0)", (-1.0, 0.0), 1.0, "Gamma shape <= 0"),
    ("ff.Gamma({name!r}, 1.0, rate={v})", (-2.0, 0.0), 1.0, "Gamma rate <= 0"),
    ("ff.Gamma({name!r}, 1.0, scale={v})", (-2.0, 0.0), 1.0, "Gamma scale <= 0"),
    ("ff.Gaussian({name!r}, 0.0, variance={v})", (-1.0, 0.0), 1.0, "variance <= 0"),
    ("ff.Gaussian({name!r}, 0.0, precision={v})", (-1.0, 0.0), 1.0, "precision <= 0"),
    ("ff.Beta({name!r}, {v}, 1.0)", (-1.0, 0.0), 1.0, "Beta alpha <= 0"),
    ("ff.Beta({name!r}, 1.0, {v})", (-0.5,), 1.0, "Beta beta <= 0"),
    ("ff.Bernoulli({name!r}, {v})", (1.5, -0.1), 0.5, "probability outside [0, 1]"),
    ("ff.Binomial({name!r}, 3, {v}, observed=1)", (1.2, -0.5), 0.5,
     "probability outside [0, 1]"),
    ("ff.Binomial({name!r}, {v}, 0.5, observed=0)", (-1, 2.5), 3, "trials not a count"),
    ("ff.Poisson({name!r}, {v}, observed=1)", (-1.0, 0.0), 1.0, "Poisson rate <= 0"),
    ("ff.Bernoulli({name!r}, 0.5, observed={v})", (2, -1, 0.5), 1, "Bernoulli observed 2"),
    ("ff.Poisson({name!r}, 2.0, observed={v})", (-1, 1.5), 1, "Poisson observed -1 or 1.5"),
    ("ff.Binomial({name!r}, 3, 0.5, observed={v})", (4, 7, -1, 1.5), 1, "count > trials"),
    ("ff.Gamma({name!r}, 1.0, rate=1.0, observed={v})", (-1.0, 0.0), 1.0,
     "Gamma observed <= 0"),
    ("ff.Beta({name!r}, 1.0, 1.0, observed={v})", (1.5, -0.2), 0.5, "Beta observed outside"),
    ("ff.Discrete({name!r}, np.array([0.5, 0.5]), observed={v})", (1.5, -1, 2), 0,
     "Discrete observed outside"),
)
VECTOR_SUPPORT = (
    ("ff.Dirichlet({name!r}, {v})", ((1.0, -1.0, 1.0), (0.0, 1.0)), "Dirichlet alpha <= 0"),
    ("ff.Discrete({name!r}, {v})", ((0.5, 0.6), (0.2, 0.2), (1.5, -0.5)), "probs"),
    ("ff.Dirichlet({name!r}, np.ones(2), observed={v})", ((0.7, 0.7), (1.5, -0.5)),
     "Dirichlet observed not a probability vector"),
)


def support(w: FaultWriter) -> Fault:
    name = w.culprit()
    w.open_plates()
    if w.draw(st.integers(0, 4)) == 0:
        call, bads, what = w.pick(VECTOR_SUPPORT)
        w.emit(f"x = {call.format(name=name, v=lit(np.array(w.pick(bads))))}")
        return Fault((name,), "DataError", what)
    call, bads, good, what = w.pick(SUPPORT)
    bad = w.pick(bads)
    if w.plates and ("observed={v}" in call or w.draw(st.booleans())):
        # one value per plate element (observed values must have one), one of them bad
        kind = float if isinstance(bad, float) or isinstance(good, float) else int
        arr = np.full(w.shape, good, dtype=kind)
        flat = arr.reshape(-1)
        flat[w.draw(st.integers(0, flat.size - 1))] = bad
        value = lit(arr)
    else:
        value = lit(bad)
    w.emit(f"x = {call.format(name=name, v=value)}")
    return Fault((name,), "DataError", what)


def nan_inf(w: FaultWriter) -> Fault:
    name = w.culprit()
    w.open_plates()
    bad = w.pick(("float('nan')", "float('inf')", "-float('inf')", "np.nan"))
    value = eval(bad, {"np": np})
    arr: str
    if w.plates and w.draw(st.booleans()):
        a = np.ones(w.shape)
        a.reshape(-1)[w.draw(st.integers(0, a.size - 1))] = value
        arr = lit(a)
    else:
        arr = bad if not w.plates else lit(np.full(w.shape, value))
    form = w.pick(("observed", "mean", "precision", "rate", "p", "alpha", "poisson",
                   "data-mean", "data-observed", "variance"))
    call = {
        "observed": "ff.Gaussian({n!r}, 0.0, precision=1.0, observed={v})",
        "mean": "ff.Gaussian({n!r}, {v}, precision=1.0)",
        "precision": "ff.Gaussian({n!r}, 0.0, precision={v})",
        "variance": "ff.Gaussian({n!r}, 0.0, variance={v})",
        "rate": "ff.Gamma({n!r}, 1.0, rate={v})",
        "p": "ff.Bernoulli({n!r}, {v})",
        "alpha": "ff.Beta({n!r}, {v}, 1.0)",
        "poisson": "ff.Poisson({n!r}, 1.0, observed={v})",
    }.get(form)
    if call is None:
        w.emit(f"d = ff.Data('d', {arr})")
        if form == "data-mean":
            w.emit(f"x = ff.Gaussian({name!r}, d, precision=1.0)")
        else:
            w.emit(f"x = ff.Gaussian({name!r}, 0.0, precision=1.0, observed=d)")
        return Fault((name, "d"), "DataError", f"{bad} in ff.Data")
    w.emit(f"x = {call.format(n=name, v=arr)}")
    return Fault((name,), "DataError", f"{bad} in {form}")


def names(w: FaultWriter) -> Fault:
    form = w.pick(("variable", "range", "data", "model", "determ", "size", "dirichlet",
                   "bernoulli"))
    if form == "size":
        name = w.culprit()
        size = w.pick(BAD_SIZES)
        w.emit(f"n = ff.Range({name!r}, {size})")
        w.emit("with ff.Plate(n):")
        w.emit(f"    {w.fresh()} = ff.Gaussian('y', 0.0, precision=1.0)")
        return Fault((name,), note=f"Range size {size}")
    bad = w.pick(BAD_NAMES)
    shown = repr(bad)
    if form == "model":
        w.lines.clear()
        return Fault((shown,), note="a bad Model name",
                     after=()), f"with ff.Model({bad!r}) as model:"
    w.open_plates(min_size=0, most=1)
    call = {"variable": "ff.Gaussian({b!r}, 0.0, precision=1.0)",
            "range": "ff.Range({b!r}, 2)", "data": "ff.Data({b!r}, 1.0)",
            "determ": "ff.Deterministic({b!r}, lambda a: 2.0 * a, a=a)",
            "dirichlet": "ff.Dirichlet({b!r}, np.ones(2))",
            "bernoulli": "ff.Bernoulli({b!r}, 0.5, observed=True)"}[form]
    if form == "determ":
        w.emit("a = ff.Gaussian('a', 0.0, precision=1.0)")
    w.emit(f"x = {call.format(b=bad)}")
    return Fault((shown,), note=f"a bad {form} name")


def dtype(w: FaultWriter) -> Fault:
    name = w.culprit()
    w.open_plates()
    shape_ = w.shape
    n = int(np.prod(shape_)) if shape_ else 1
    form = w.pick(("complex", "object", "string", "ragged", "dict", "set", "complex-scalar",
                   "bytes", "bigint", "variable", "range") + (("masked",) if n else ()))
    if form == "complex":
        value = f"np.full({shape_!r}, 1.0 + 2.0j)" if shape_ else "np.array(1.0 + 2.0j)"
    elif form == "complex-scalar":
        value = "(1 + 1j)"
    elif form == "object":
        value = f"np.full({shape_!r}, None, dtype=object)" if shape_ else \
            "np.array(None, dtype=object)"
    elif form == "string":
        value = f"np.full({shape_!r}, 'a')" if shape_ else "'abc'"
    elif form == "ragged":
        value = "[[1.0], [1.0, 2.0]]"
    elif form == "dict":
        value = "{'a': 1.0}"
    elif form == "set":
        value = "{1.0}"
    elif form == "masked":  # every element masked: refused (as a parameter or ff.Data any
        # mask is; an observed value's masked elements are missing data, model.missing)
        # (an empty masked array masks nothing: it is plain data, so never drawn empty)
        value = f"np.ma.masked_array(np.ones({shape_!r}), mask=True)"
    elif form == "bigint":
        value = f"np.full({shape_!r}, 2**70)" if shape_ else "2**70"
    elif form == "variable":
        w.before_context(["    other = ff.Gaussian('other', 0.0, precision=1.0)"])
        value = "other"
    elif form == "range":
        w.before_context(["    k9 = ff.Range('k9', 2)"])
        value = "k9"
    else:
        value = "b'1'"
    where = w.pick(("observed", "mean", "p", "data", "precision", "index"))
    if form == "variable" and where in ("mean", "data"):
        where = "observed"  # a real variable is a fine mean
    #: a variable or range where data belongs: any ModelError will do
    expected = "ModelError" if form in ("variable", "range") else "DataError"
    call = {"observed": f"ff.Gaussian({name!r}, 0.0, precision=1.0, observed={value})",
            "mean": f"ff.Gaussian({name!r}, {value}, precision=1.0)",
            "precision": f"ff.Gaussian({name!r}, 0.0, precision={value})",
            "p": f"ff.Bernoulli({name!r}, {value})"}.get(where)
    if where == "data":
        w.emit(f"d = ff.Data('d', {value})")
        w.emit(f"x = ff.Gaussian({name!r}, d, precision=1.0)")
        return Fault((name, "d"), expected, f"{form} data in ff.Data")
    if where == "index":
        w.before_context([
            "    k = ff.Range('k', 2)", "    with ff.Plate(k):",
            "        base = ff.Gaussian('base', 0.0, precision=1.0)"])
        w.emit(f"x = ff.Gaussian({name!r}, base[{value}], precision=1.0)")
        return Fault((name, "base"), expected, f"{form} index")
    w.emit(f"x = {call}")
    return Fault((name,), expected, f"{form} data as {where}")


def duplicate(w: FaultWriter) -> Fault:
    name = w.culprit()
    first = w.pick(("variable", "range", "data"))
    second = w.pick(("variable", "range", "data", "plate-variable", "if-if", "case-case",
                     "determ"))
    make = {"variable": "ff.Gaussian({n!r}, 0.0, precision=1.0)",
            "range": "ff.Range({n!r}, 2)", "data": "ff.Data({n!r}, 1.0)"}
    if second in ("if-if", "case-case"):
        w.emit("c = ff.Bernoulli('c', 0.5)" if second == "if-if" else
               "c = ff.Discrete('c', np.array([0.5, 0.5]))")
        for _ in range(2):
            w.emit("with ff.If(c):" if second == "if-if" else "with ff.Case(c, 0):")
            w.emit(f"    {w.fresh()} = ff.Gaussian({name!r}, 0.0, precision=1.0)")
        return Fault((name,), note="one name in two gates that are not exclusive")
    w.emit(f"{w.fresh()} = {make[first].format(n=name)}")
    if second == "plate-variable":
        w.open_plates(min_size=0, most=1)
        second = "variable"
    if second == "determ":
        w.emit("a = ff.Gaussian('a_', 0.0, precision=1.0)")
        w.emit(f"{w.fresh()} = ff.Deterministic({name!r}, lambda a: 2.0 * a, a=a)")
    else:
        w.emit(f"{w.fresh()} = {make[second].format(n=name)}")
    return Fault((name,), note=f"a {first} and a {second} named alike")


def run_data(w: FaultWriter) -> Fault:
    name = w.culprit()
    w.open_plates()
    good = w.shape
    use = w.pick(("observed", "mean", "precision", "bernoulli", "index", "discrete", "p"))
    domain = {"observed": "real", "mean": "real", "precision": "positive",
              "bernoulli": "bool", "index": "int", "discrete": "int", "p": "unit"}[use]
    exact = use in ("observed", "bernoulli", "index", "discrete")
    value = {"real": np.full(good, 0.5), "positive": np.full(good, 2.0),
             "bool": np.full(good, True), "int": np.zeros(good, int),
             "unit": np.full(good, 0.5)}[domain]
    if not exact and w.draw(st.booleans()):
        value = np.asarray(value).reshape(-1)[:1].reshape(()) if value.size else value
    init = lit(value) if w.draw(st.integers(0, 3)) else None
    w.emit(f"d = ff.Data({name!r}{', ' + init if init is not None else ''})")
    if use == "index":
        w.before_context([
            "    k = ff.Range('k', 2)", "    with ff.Plate(k):",
            "        base = ff.Gaussian('base', 0.0, precision=1.0)"])
    w.emit({"observed": "x = ff.Gaussian('x', 0.0, precision=1.0, observed=d)",
            "mean": "x = ff.Gaussian('x', d, precision=1.0)",
            "precision": "x = ff.Gaussian('x', 0.0, precision=d)",
            "bernoulli": "x = ff.Bernoulli('x', 0.5, observed=d)",
            "index": "x = ff.Gaussian('x', base[d], precision=1.0, observed="
                     f"{lit(np.full(good, 1.0))})",
            "discrete": "x = ff.Discrete('x', np.array([0.5, 0.5]), observed=d)",
            "p": "x = ff.Bernoulli('x', d)"}[use])
    how = w.pick(("shape", "support", "nan", "complex", "object", "unknown", "after",
                  "missing", "string"))
    if how == "missing" and init is None:
        return Fault((name,), "DataError", "no value for ff.Data at run time")
    if how == "unknown":
        return Fault(("zz",), "ModelError", "data= for an unknown name",
                     data="{" + f"{name!r}: {lit(value)}, 'zz': 1.0" + "}"
                     if init is None else "{'zz': 1.0}")
    if how == "shape":
        bad_shape = good + (2,) if not good or w.draw(st.booleans()) else \
            (good[0] + 1,) + good[1:]
        if not exact and len(bad_shape) > len(good) and bad_shape[-1] == 1:
            bad_shape = bad_shape[:-1] + (2,)
        bad = lit(np.full(bad_shape, value.reshape(-1)[0] if value.size else 0,
                          dtype=value.dtype))
    elif how == "support":
        bad = {"real": None, "positive": "-1.0", "bool": "2", "int": "7",
               "unit": "1.5"}[domain] or "float('inf')"
        if good and domain != "real":
            arr = np.array(value, dtype=float if domain != "int" else int)
            if domain == "bool":
                arr = np.full(good, 1)
            flat = arr.reshape(-1)
            if flat.size:
                flat[-1] = eval(bad)
                bad = lit(arr)
            else:
                bad = lit(np.full(good + (2,), eval(bad)))
    elif how == "nan":
        bad = lit(np.full(good, np.nan)) if good else "float('nan')"
        if good and not np.prod(good):
            bad = "float('nan')"
    elif how == "complex":
        bad = f"np.full({good!r}, 1j)" if good else "1j"
    elif how == "object":
        bad = f"np.full({good!r}, None, dtype=object)" if good else "None"
        if not good:
            bad = "np.array(None, dtype=object)"
    else:
        bad = f"np.full({good!r}, 'a')" if good else "'a'"
    if how == "after" or (how == "missing" and init is not None):
        bad = lit(np.full(good + (3,), 0.5))
        return Fault((name,), "DataError", "Data.value changed after compiling",
                     after=(f"d.value = {bad}",))
    return Fault((name,), "DataError", f"run-time data: {how}",
                 data="{" + f"{name!r}: {bad}" + "}")


def run_options(w: FaultWriter) -> Fault:
    w.open_plates()
    w.emit("m = ff.Gaussian('m', 0.0, precision=1.0)")
    w.emit(f"x = ff.Gaussian('x', m, precision=1.0, observed={lit(w.reals(w.shape))})")
    form = w.pick(("iterations", "tolerance", "damping", "damping-name", "init-name",
                   "init-type"))
    if form == "iterations":
        bad = w.pick(("-1", "2.5", "'5'", "True", "[5]", "float('nan')"))
        return Fault(("iterations",), note="bad iterations=", iterations=bad)
    if form == "tolerance":
        bad = w.pick(("-1.0", "'small'", "float('nan')", "[1e-6]", "1j"))
        return Fault(("tolerance",), note="bad tolerance=", options=f"tolerance={bad}")
    if form == "damping":
        bad = w.pick(("1.0", "-0.5", "2", "'half'", "float('nan')", "True"))
        return Fault(("damping",), note="bad damping=", options=f"damping={bad}")
    if form == "damping-name":
        name = w.culprit()
        return Fault((name, "damping"), note="damping= for an unknown variable",
                     options=f"damping={{{name!r}: 0.5}}")
    if form == "init-name":
        name = w.culprit()
        return Fault((name,), note="init= for an unknown variable",
                     options=f"init={{{name!r}: ff.distributions.Gaussian(0.0, 1.0)}}")
    bad = w.pick(("0.5", "ff.distributions.Gamma(1.0, 1.0)", "'m'", "None"))
    return Fault(("'m'", "m"), note="init= with something not a Gaussian",
                 options=f"init={{'m': {bad}}}")


def user_factor(w: FaultWriter) -> Fault:
    name = w.culprit()
    which = w.pick(tuple(USER_FACTORS))
    w.prelude += [*USER_FACTORS[which], ""]
    w.open_plates()
    form = w.pick(("missing", "extra", "support", "category", "shape"))
    ones = lit(np.ones(w.shape)) if w.shape else "1.0"
    calls = {
        "fuzz_gaussian": {
            "missing": "fuzz_gaussian({n!r}, mean=0.0)",
            "extra": "fuzz_gaussian({n!r}, mean=0.0, precision=1.0, scale=2.0)",
            "support": "fuzz_gaussian({n!r}, mean=0.0, precision=-1.0)",
            "shape": "fuzz_gaussian({n!r}, mean=0.0, precision=1.0, observed={bad})"},
        "fuzz_categorical": {
            "missing": "fuzz_categorical({n!r})",
            "extra": "fuzz_categorical({n!r}, theta=np.ones(3) / 3, z=1)",
            "support": "fuzz_categorical({n!r}, theta=np.array([0.5, 0.6]))",
            "category": "fuzz_categorical({n!r}, theta=w, observed={cat})",
            "shape": "fuzz_categorical({n!r}, theta=w, observed={bad_int})"},
        "fuzz_coin": {
            "missing": "fuzz_coin({n!r})",
            "extra": "fuzz_coin({n!r}, p=0.5, q=0.5)",
            "support": "fuzz_coin({n!r}, p=0.5, observed={two})",
            "shape": "fuzz_coin({n!r}, p=0.5, observed={bad_bool})"},
        "fuzz_poisson": {
            "missing": "fuzz_poisson({n!r}, observed={one})",
            "extra": "fuzz_poisson({n!r}, rate=1.0, k=1, observed={one})",
            "support": "fuzz_poisson({n!r}, rate=1.0, observed={half})",
            "shape": "fuzz_poisson({n!r}, rate=1.0, observed={bad_int})"},
    }[which]
    call = calls.get(form, calls["support"])
    bad_shape = w.shape + (2,)
    if "theta=w" in call:
        w.emit("w = ff.Dirichlet('w', np.ones(3))")
    w.emit("x = " + call.format(
        n=name, bad=lit(np.ones(bad_shape)), bad_int=lit(np.ones(bad_shape, int)),
        bad_bool=lit(np.ones(bad_shape, bool)), cat=lit(np.full(w.shape, 3)),
        two=lit(np.full(w.shape, 2)), half=lit(np.full(w.shape, 1.5)),
        one=lit(np.full(w.shape, 1))).replace("{ones}", ones))
    expected = "ModelError" if form in ("missing", "extra") else "DataError"
    if form == "category" and which != "fuzz_categorical":
        form = "support"
    return Fault((name,), expected, f"@ff.factor {which}: {form}")


FAULTS = {"foreign": foreign, "plate-scope": plate_scope, "gate-scope": gate_scope,
          "shape": shape, "support": support, "nan-inf": nan_inf, "names": names,
          "dtype": dtype, "duplicate": duplicate, "run-data": run_data,
          "run-options": run_options, "user-factor": user_factor}


@st.composite
def invalid_models(draw: Any, kind: str | None = None) -> ModelSpec:
    """A random invalid model (see the module docstring)."""
    if kind is None:
        kind = draw(st.sampled_from(INVALID_KINDS))
    w = FaultWriter(draw)
    w.base()
    fault = FAULTS[kind](w)
    header = 'with ff.Model("fuzz") as model:'
    if isinstance(fault, tuple):  # a bad Model name replaces the header
        fault, header = fault
    body = (*w.prelude, header, *w.lines)
    if len(body) == len(w.prelude) + 1:
        body += ("    pass",)
    return ModelSpec(kind, body, iterations=fault.iterations, data=fault.data,
                     after=fault.after, options=fault.options, valid=False,
                     culprit=fault.culprit, expected=fault.expected, note=fault.note)
