"""A hypothesis strategy of random valid models, as printable ``ModelSpec``s.

``valid_models()`` draws a *profile* (the row of the fuzz table: what the model is
about) and writes a model statement by statement.  Every construct it writes is allowed
by factorflow's API as documented in README.md:

* every factory (Gaussian with precision= or variance=, Gamma with rate= or scale=, Beta,
  Bernoulli, Binomial, Discrete, Dirichlet, Poisson), latent or observed, with
  constant, per-plate-element, random, indexed or ``ff.Data`` parameters;
* ``a + b``, ``a - b``, ``c * a`` (constant or array ``c``, either side), ``a * b``,
  ``a > b``, ``a < b``, ``ff.is_positive``, ``&``, ``|``, ``~``, ``ff.constrain_true``;
* ``base[index]`` with ``index`` an observed integer array (or ``ff.Data``) over the
  open plates;
* ``ff.Data`` as a parameter, an observed value and an index, with new values at run time;
* plates of size 0 to 4, nested up to three deep, ranges reused by several plates;
* gates ``ff.If``/``ff.IfNot`` (one branch, or both with exit variables and observed
  children with a factor per branch), ``ff.Case`` (some values, or all with exit
  variables), ``ff.Switch`` with ``array[z]``, nested in each other and in plates;
* ``@ff.factor`` factors with simple conjugate formulas, ``ff.Deterministic``.

Names are ``v<k>`` (ranges ``r<k>``, data ``d<k>``), now and then a name that the
generated program uses for itself (``data``, ``log_evidence``, ``total`` ...).

Two constructs factorflow refuses by design are written knowingly, the refusal predicted
(``ModelSpec.refusal``: the model ends there, and the harness checks that the ModelError
names what was predicted): a difference whose expanded sides read one element of an array
through different indices (``Writer.meeting``, which lays every index out over the plates
itself), ``ff.Switch(z)`` inside a plate the latent z is not over
(``Writer.switch_refusal``), and one element of an array in two arguments of a Gamma
(``Writer.same_element``).  Under VMP alone, a statement that reads two variables whose
posteriors depend on one latent condition's case outside its gates is refused
(``joint_read_refusal``, mirroring ``transforms/gate_order.py``; the model runs on).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

from tests.fuzz.spec import ModelSpec, lit

# ----- values -----------------------------------------------------------------------------
#: constants and observed values by domain, simplest first (hypothesis shrinks to index 0)
REALS = (0.0, 1.0, -1.0, 0.5, 2.5, -3.0)
POSITIVES = (1.0, 0.5, 2.0, 3.5, 0.2)
UNITS = (0.5, 0.2, 0.8, 0.35, 0.95, 0.05)
SIMPLEX = {2: ((0.5, 0.5), (0.3, 0.7), (0.9, 0.1)),
           3: ((0.2, 0.3, 0.5), (0.6, 0.2, 0.2), (0.1, 0.1, 0.8)),
           4: ((0.25, 0.25, 0.25, 0.25), (0.1, 0.2, 0.3, 0.4))}
ALPHAS = {k: (tuple([1.0] * k), tuple(float(i + 1) for i in range(k)),
              tuple([0.5] * k)) for k in SIMPLEX}

#: names the generated program uses for itself (issue 10 item 1): valid user names too
HOSTILE = ("data", "iterations", "log_evidence", "total", "Gaussian", "np", "value", "eta1",
           "sizes", "init", "monitor", "mean_F", "x__B", "v_v0", "a b", "é", "x[0]")

PROFILES = ("factories", "plates", "arithmetic", "logic", "indexing", "data", "if", "case",
            "switch", "user-factor", "deterministic", "mixed")

#: statement kinds each profile may write (beyond plain factories); its first is required
KINDS: dict[str, tuple[str, ...]] = {
    "factories": ("factory",),
    "plates": ("plate", "factory"),
    "arithmetic": ("arith", "factory", "plate"),
    "logic": ("logic", "compare", "constrain", "factory", "plate"),
    "indexing": ("index", "factory", "arith", "plate"),
    "data": ("data", "factory", "plate"),
    "if": ("if", "factory", "plate", "compare"),
    "case": ("case", "factory", "plate", "if"),
    "switch": ("switch", "factory", "plate"),
    "user-factor": ("user", "factory", "plate"),
    "deterministic": ("determ", "factory", "arith", "plate"),
    "mixed": ("factory", "plate", "arith", "logic", "compare", "constrain", "index", "data",
              "if", "case", "switch", "user", "determ"),
}

USER_FACTORS = {
    "fuzz_gaussian": (
        '@ff.factor(sample="real", mean="real", precision="positive")',
        "def fuzz_gaussian(sample, mean, precision):",
        "    return 0.5 * ff.log(3.0 * precision) - 0.5 * np.log(2 * np.pi) \\",
        "        - 1.5 * precision * (sample - mean) ** 2",
    ),
    "fuzz_categorical": (
        '@ff.factor(z="int", theta="simplex")',
        "def fuzz_categorical(z, theta):",
        '    return ff.sum(z["k"] * ff.log(theta["k"]), "k")',
    ),
    "fuzz_coin": (
        '@ff.factor(b="bool", p="unit")',
        "def fuzz_coin(b, p):",
        "    return b * ff.log(p) + (1 - b) * ff.log(1 - p)",
    ),
    "fuzz_poisson": (
        '@ff.factor(k="count", rate="positive")',
        "def fuzz_poisson(k, rate):",
        "    return k * ff.log(rate) - rate - ff.lgamma(k + 1)",
    ),
}

FORMULAS = (
    ("lambda a: 2.0 * a + 1.0", 1),
    ("lambda a, b: a + b", 2),
    ("lambda a, b: 2.0 * a - b", 2),
    ("lambda a, b: a * b", 2),
    ("lambda a, b: 0.5 * a + a * b", 2),
)


@dataclass
class Rng:
    ident: str
    size: int


@dataclass
class Var:
    ident: str                  # its Python name in the printed code
    name: str                   # its name in the model
    domain: str                 # real, positive, unit, bool, count, int, simplex
    plates: tuple[Rng, ...]
    size: int | None = None     # categories (int) or dimension (simplex)
    observed: bool = False
    #: the latent stochastic variables it is a deterministic function of (itself, for a
    #: stochastic one); None where a constraint on it might have probability zero
    roots: frozenset[str] | None = None
    #: a sum, difference or numeric scaling: the random leaves factorflow expands it into
    #: where it is read under the gates it was defined under (``gate_path``); None: a leaf
    linear: tuple[Read, ...] | None = None
    gate_path: tuple[int, ...] = ()


@dataclass(frozen=True, eq=False)
class Read:
    """A random leaf of a linear form, as factorflow's ``_linear_form`` sees it: a latent
    variable (``index`` None, ``switch`` None), ``base[z]`` in a Switch (``switch`` z's
    ident), or ``base[index]`` by known indices laid out over ``plates`` (the plates open
    where it was written), through the ``ff.Data`` named ``data`` if given.  ``label`` is
    how factorflow names it in a message."""

    base: Var
    label: str
    index: np.ndarray | None = None
    plates: tuple[Rng, ...] = ()
    data: str | None = None
    switch: str | None = None

    def over(self, plates: tuple[Rng, ...]) -> np.ndarray:
        """The element of ``base`` it reads at each element of ``plates`` (which hold
        its own), broadcast over them: its index's axes moved to where they sit there."""
        assert self.index is not None
        order = sorted(range(len(self.plates)), key=lambda i: plates.index(self.plates[i]))
        laid = np.transpose(np.broadcast_to(self.index, tuple(r.size for r in self.plates)),
                            order).reshape([r.size if r in self.plates else 1 for r in plates])
        return np.broadcast_to(laid.astype(int), tuple(r.size for r in plates))


@dataclass(frozen=True)
class Written:
    """A model statement as ``joint_read_refusal`` reads it: its source line, the open
    gates on latent conditions around it (``Writer.cases``), the latent variables it
    reads, its output's ident (None: observed, or none), and whether that output is a
    deterministic (derived) variable."""

    line: str
    cases: tuple[tuple[str, Any], ...]
    inputs: tuple[str, ...]
    output: str | None
    derived: bool
    #: every open gate, outermost first (``Writer.frames``), and the plates open here
    frames: tuple[tuple[int, str, str | None, int], ...] = ()
    plates: int = 0


@dataclass
class Writer:
    """Writes one model; ``draw`` is hypothesis's."""

    draw: Any
    profile: str
    lines: list[str] = field(default_factory=list)
    depth: int = 1
    scope: list[Var] = field(default_factory=list)
    ranges: list[Rng] = field(default_factory=list)
    plates: list[Rng] = field(default_factory=list)
    switches: list[Var] = field(default_factory=list)
    #: the ranges open Switches loop over (an array over one is indexed by the condition):
    #: a plate over one of them inside that Switch is refused by factorflow, by name
    switch_loops: list[Rng] = field(default_factory=list)
    #: the range each condition's Switches loop over (that of the first array it indexes:
    #: every array it indexes is over that range, and no loop around a Switch is over it)
    switch_range: dict[str, Rng] = field(default_factory=dict)
    #: len(scope) when each open gate opened (what it defines lies after its mark)
    gate_marks: list[int] = field(default_factory=list)
    gates: int = 0
    #: the open gates, each by a serial number (factorflow expands a sum only under the
    #: very gates it was defined under: ``Var.gate_path``)
    gate_ids: list[int] = field(default_factory=list)
    gate_serial: int = 0
    counter: int = 0
    budget: int = 8
    used: set[str] = field(default_factory=set)
    defs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    run_data: list[str] = field(default_factory=list)
    names: set[str] = field(default_factory=set)
    #: roots of operand texts written so far (see ``Var.roots``); constants: empty
    roots_of: dict[str, frozenset[str] | None] = field(default_factory=dict)
    #: indexed operand texts -> (the array they index, the index)
    index_of: dict[str, tuple[Var, np.ndarray]] = field(default_factory=dict)
    #: roots some ff.constrain_true already constrains (each at most once, so that the
    #: constraints of a model can hold together: its evidence is never zero)
    constrained: set[str] = field(default_factory=set)
    #: operand texts -> the random leaves factorflow expands them into (``Read``s)
    reads_of: dict[str, tuple[Read, ...]] = field(default_factory=dict)
    #: texts a ModelError must name: the model is refused by design (``ModelSpec.refusal``)
    refusal: tuple[str, ...] = ()
    #: the open gates on latent conditions, outermost first: (condition ident, case)
    cases: list[tuple[str, Any]] = field(default_factory=list)
    #: each statement written, in order, as ``joint_read_refusal`` reads it
    written: list[Written] = field(default_factory=list)
    #: exit variables: ident -> (the cases open around its gate, its condition's ident)
    exit_of: dict[str, list[tuple[tuple, str]]] = field(default_factory=dict)
    #: every variable a statement or gate has read, by ident
    known: dict[str, Var] = field(default_factory=dict)
    #: the open gates on latent conditions (``cases``) where each variable is defined
    #: (an exit variable: around its gates)
    home: dict[str, tuple] = field(default_factory=dict)
    #: each ``~``/``&``/``|`` variable: ident -> (form, its operands' texts, its line)
    logic_of: dict[str, tuple[str, tuple[str, ...], str]] = field(default_factory=dict)
    #: the kind of each open gate (If, IfNot, Case, Switch), latent or observed condition
    gate_kinds: list[str] = field(default_factory=list)
    #: each open gate: (serial, kind, its condition's ident if latent else None, the
    #: number of plates open around it)
    frames: list[tuple[int, str, str | None, int]] = field(default_factory=list)

    # ----- small helpers --------------------------------------------------------------
    def pick(self, options: Any) -> Any:
        return self.draw(st.sampled_from(tuple(options)))

    def flip(self, p_true: float = 0.5) -> bool:
        """True with probability about ``p_true`` (shrinks to False)."""
        return self.draw(st.integers(0, 99)) >= 100 - int(p_true * 100)

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)
        self.record(line)

    def record(self, line: str) -> None:
        """Note a model statement (``Written``) for ``joint_read_refusal``: its output (a
        derived or latent one, by its ident), the latent variables it reads, in order of
        writing, and the latent conditions of the gates around it."""
        text = re.sub(r"'[^']*'|\"[^\"]*\"", "''", line)
        if text.startswith(("with ", "pass", "def ", "@", "return ")) or re.match(
                r"[rd]\d+ = ff\.(Range|Data)\(", text):
            return
        lhs = re.match(r"(v\d+) = ", text)
        rhs = text[lhs.end():] if lhs else text
        scope = {v.ident: v for v in self.scope}
        self.known.update(scope)
        inputs = tuple(u for u in re.findall(r"\bv\d+\b", rhs)
                       if u in scope and not scope[u].observed)
        if any(k != "Switch" for k in self.gate_kinds):  # a ~/&/| the gates decide
            memo: dict[str, tuple[str, Any]] = {}
            inputs = tuple(r for u in inputs for r in (
                self.latent_reads(self.in_case(u, memo)) if u in self.logic_of else (u,)))
        output = lhs.group(1) if lhs and "observed=" not in rhs else None
        if lhs:
            self.home[lhs.group(1)] = tuple(self.cases)
        self.written.append(Written(line.strip(), tuple(self.cases), inputs, output,
                                    output is not None and not rhs.startswith("ff."),
                                    tuple(self.frames), len(self.plates)))

    def in_case(self, text: str, memo: dict[str, tuple[str, Any]]) -> tuple[str, Any]:
        """How factorflow reads the operand ``text`` where the gates open now hold
        (``model/factories._in_case``, fuzz seed 24; written apart from it): ("value",
        its value) where they decide it, a latent gate condition inside its own gate (its
        case's value over the plates) or a ``~``/``&``/``|`` of values (``~True`` is
        False, ``True & b`` is ``b``, ``False & b`` is False); else ("text", what is
        read): ``text`` itself, or, where some operand of a ``~``/``&``/``|`` (a latent
        one, defined over exactly the plates open here) is decided, a copy of it with the
        values put in, written here (``Written``, named as its definition) before the
        statement that reads it.  Only under a gate on a condition (not a Switch alone)."""
        if text in memo:
            return memo[text]
        memo[text] = ("text", text)
        shape = tuple(r.size for r in self.plates)
        if not re.search(r"\b[vdr]\d+\b", text):  # a constant
            return "value", np.asarray(eval(text, {"np": np, "float": float}), bool)
        var = next((v for v in reversed(self.scope) if v.ident == text), None)
        case = next((c for z, c in reversed(self.cases) if z == text), None)
        if var is not None and not var.observed and case not in (None, "switch"):
            memo[text] = ("value", np.full(shape, bool(case)))
            return memo[text]
        if (var is None or var.observed or text not in self.logic_of
                or var.plates != tuple(self.plates)):
            return memo[text]
        form, operands, line = self.logic_of[text]
        args = [self.in_case(a, memo) for a in operands]
        known = [a[1] for a in args if a[0] == "value"]
        folded = None
        if form == "~" and known:
            folded = ("value", ~known[0])
        elif len(known) == 2:
            folded = ("value", known[0] & known[1] if form == "&" else known[0] | known[1])
        elif known and known[0].size:
            other = next(a for a in args if a[0] != "value")
            if np.all(known[0] == (form == "|")):  # True | b, False & b
                folded = ("value", np.full(known[0].shape, form == "|"))
            elif np.all(known[0] == (form == "&")):  # True & b, False | b
                folded = other
        if folded is not None:
            memo[text] = folded
            return folded
        if all(a == ("text", o) for a, o in zip(args, operands, strict=True)):
            return memo[text]  # nothing decided here
        copy = f"{text}@{len(self.written)}"
        self.known[copy] = Var(copy, var.name, "bool", var.plates)
        self.home[copy] = tuple(self.cases)
        self.written.append(Written(line, tuple(self.cases), tuple(
            r for a in args for r in self.latent_reads(a)), copy, True,
            tuple(self.frames), len(self.plates)))
        memo[text] = ("text", copy)
        return memo[text]

    def latent_reads(self, read: tuple[str, Any]) -> tuple[str, ...]:
        """The latent variables (and copies, ``in_case``) an ``in_case`` result reads."""
        if read[0] == "value":
            return ()
        scope = {v.ident: v for v in self.scope}
        return tuple(u for u in re.findall(r"\bv\d+(?:@\d+)?", read[1])
                     if u in self.known and "@" in u or u in scope and not scope[u].observed)

    def allowed(self, kind: str) -> bool:
        return kind in KINDS[self.profile]

    def fresh(self, prefix: str = "v") -> tuple[str, str]:
        """(Python identifier, model name) for a new element."""
        self.counter += 1
        ident = f"{prefix}{self.counter}"
        name = ident
        if prefix == "v" and self.flip(0.06):
            candidate = self.pick(HOSTILE)
            if candidate not in self.names:
                name = candidate
        self.names.add(name)
        return ident, name

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(r.size for r in self.plates)

    def visible(self, domain: str, size: int | None = None, observed: bool | None = None
                ) -> list[Var]:
        """Variables usable here: in scope, their plates open, of ``domain``."""
        return [v for v in self.scope if v.domain == domain
                and all(p in self.plates for p in v.plates)
                and (size is None or v.size == size)
                and (observed is None or v.observed == observed)]

    # ----- values -------------------------------------------------------------------
    def values(self, domain: str, shape: tuple[int, ...], size: int | None = None,
               trials: int | None = None) -> np.ndarray:
        n = int(np.prod(shape)) if shape else 1

        def many(pool: Any) -> list[Any]:
            return [self.pick(pool) for _ in range(n)]
        if domain == "real":
            out = np.array(many(REALS), float)
        elif domain == "positive":
            out = np.array(many(POSITIVES), float)
        elif domain == "unit":
            out = np.array(many(UNITS), float)
        elif domain == "bool":
            out = np.array(many((True, False)), bool)
        elif domain == "count":
            top = 5 if trials is None else trials
            out = np.array([self.draw(st.integers(0, top)) for _ in range(n)], int)
        elif domain == "int":
            out = np.array([self.draw(st.integers(0, (size or 2) - 1)) for _ in range(n)], int)
            if self.flip(0.1):  # categories written as whole floats (accepted by the checks)
                out = out.astype(float)
        else:  # simplex
            assert size is not None
            rows = [self.pick(SIMPLEX[size]) for _ in range(n)]
            return np.array(rows, float).reshape(shape + (size,))
        return out.reshape(shape)

    def constant(self, domain: str, size: int | None = None) -> str:
        """A constant operand: one value, or one per plate element."""
        if domain == "simplex":
            if self.plates and self.flip(0.3):
                return lit(self.values("simplex", self.shape, size))
            return lit(np.array(self.pick(SIMPLEX[size]), float))
        if domain == "count":
            return str(self.draw(st.integers(1, 5)))
        if self.plates and self.flip(0.3):
            return lit(self.values(domain, self.shape))
        return lit(self.values(domain, ()))

    # ----- operands -----------------------------------------------------------------
    def operand(self, domain: str, size: int | None = None, random_ok: bool = True) -> str:
        """Source text of an argument of ``domain`` here (a constant, a variable, an
        indexed variable, an ``ff.Data``, or ``array[z]`` inside a switch)."""
        options = ["const"]
        if random_ok and self.visible(domain, size):
            options += ["var", "var"]
        if random_ok and (self.allowed("index") or self.flip(0.05)) and \
                self.index_bases(domain, size):
            options.append("index")
        if ((self.allowed("data") and self.flip(0.4)) or self.flip(0.03)) and \
                domain != "count":
            options.append("data")
        if random_ok and self.switch_bases(domain, size):
            options += ["switch", "switch"]
        choice = self.pick(options)
        if choice == "var":
            var = self.pick(self.visible(domain, size))
            self.roots_of[var.ident] = var.roots
            self.reads_of[var.ident] = self.expand(var)
            return var.ident
        if choice == "index":
            return self.indexed(self.pick(self.index_bases(domain, size)))
        if choice == "data":
            return self.data_value(domain, size)
        if choice == "switch":
            base, z = self.pick(self.switch_bases(domain, size))
            text = f"{base.ident}[{z.ident}]"
            self.roots_of[text] = self.join(base.roots, z.roots)
            self.reads_of[text] = (Read(base, f"{base.name}[{z.name}]", switch=z.ident),)
            return text
        return self.constant(domain, size)

    def second_operand(self, domain: str, first: Var) -> str:
        """An operand for a factor whose other argument is ``first``: never ``first``
        itself (a random variable filling two arguments of one factor is refused)."""
        b = self.operand(domain)
        return self.constant(domain) if b == first.ident else b

    def roots(self, text: str) -> frozenset[str] | None:
        """The roots of an operand text (constants and data have none)."""
        return self.roots_of.get(text, frozenset())

    @staticmethod
    def shares(a: frozenset[str] | None, b: frozenset[str] | None) -> bool:
        """Whether two operands may depend on a common latent variable (sums and
        products over shared parents are collected or refused by the API).  Unknown
        roots (None: a derived value that may be constant, as ``x * 0.0`` or ``x - x``)
        may share with anything that has a root."""
        if a is None or b is None:
            return a != frozenset() and b != frozenset()
        return bool(a and b and a & b)

    def expand(self, var: Var) -> tuple[Read, ...]:
        """The random leaves factorflow expands ``var`` into when it is read here: a sum,
        difference or numeric scaling read under the gates it was defined under is its
        terms; any other latent variable is itself; an observed one has none."""
        if var.observed:
            return ()
        if var.linear is not None and var.gate_path == tuple(self.gate_ids):
            return var.linear
        return (Read(var, var.name),)

    def reads(self, text: str) -> tuple[Read, ...]:
        """The random leaves of an operand text (constants and data have none)."""
        return self.reads_of.get(text, ())

    def _key(self, read: Read) -> Any:
        """Equal for two leaves factorflow collects as one (``_leaf_key``): one variable,
        one Switch read, or one array read by equal indices over the open plates."""
        if read.index is None or read.data is not None:
            return (id(read.base), read.switch, read.data)
        laid = read.over(tuple(self.plates))
        return (id(read.base), laid.tobytes()) if laid.size else id(read)

    def collects(self, ra: tuple[Read, ...], rb: tuple[Read, ...]) -> bool:
        """Whether the two sides of a sum share a leaf (factorflow collects them then)."""
        keys = {self._key(r) for r in ra}
        return any(self._key(r) in keys for r in rb)

    def meeting(self, ra: tuple[Read, ...], rb: tuple[Read, ...]) -> tuple[Read, Read] | None:
        """The first two reads, one on each side of a sum or difference, that pick one
        element of one array through different indices at some element of the open plates:
        factorflow refuses that with a ModelError naming both (message passing would treat
        the two as independent).  Reads by a Switch's variable never meet so (one read is
        one leaf), and an array is never read whole where it is also indexed here."""
        plates = tuple(self.plates)
        for a in ra:
            for b in rb:
                if (a.base is b.base and a.index is not None and b.index is not None
                        and self._key(a) != self._key(b)
                        and bool((a.over(plates) == b.over(plates)).any())):
                    return a, b
        return None

    def same_element(self, label: str, factor: str, *args: tuple[str, str]
                     ) -> tuple[str, ...]:
        """What factorflow's ``checks.check_distinct_arguments`` refuses naming, by design,
        where two arguments of one factor (``(argument, operand text)`` pairs, written
        here) read one latent array by known indices that pick the same element at some
        element of the open plates: ``Gamma(v[[3, 0]], rate=v[[0, 0]])`` (fuzz seed 23).
        () where they never do (then it is one factor of two inputs)."""
        plates = tuple(self.plates)
        for i, (k1, t1) in enumerate(args):
            for k2, t2 in args[i + 1:]:
                r1, r2 = self.reads(t1), self.reads(t2)
                if len(r1) != 1 or len(r2) != 1:
                    continue
                a, b = r1[0], r2[0]
                if (a.base is b.base and a.index is not None and b.index is not None
                        and not a.base.observed
                        and bool((a.over(plates) == b.over(plates)).any())):
                    return (f"{label}: the random variable {a.base.name!r} is both "
                            f"argument {k1!r} and argument {k2!r} of {factor}",)
        return ()

    def relaid(self, var: Var) -> bool:
        """Whether ``var`` expands into a read through an ``ff.Data`` here under plates its
        own are not the innermost of (factorflow cannot lay the Data's value out again)."""
        open_ = tuple(self.plates)
        suffix = open_[len(open_) - len(var.plates):] == var.plates if var.plates else True
        return not suffix and any(r.data is not None for r in self.expand(var))

    @staticmethod
    def join(*parts: frozenset[str] | None) -> frozenset[str] | None:
        """The roots of a deterministic function of ``parts``: None unless they are
        known and pairwise disjoint (``x - x`` or ``x & ~x`` may be constant)."""
        out: frozenset[str] = frozenset()
        for part in parts:
            if part is None or part & out:
                return None
            out |= part
        return out

    def outside_gates(self) -> list[Var]:
        """The variables in scope defined outside every open gate."""
        return self.scope[: self.gate_marks[0]] if self.gate_marks else self.scope

    def index_bases(self, domain: str, size: int | None = None) -> list[Var]:
        """Arrays to index by known indices: not one an open gate defines (a gate's own
        variable read there by other indices than its definition is refused by name)."""
        return [v for v in self.outside_gates() if v.domain == domain and len(v.plates) == 1
                and v.plates[0] not in self.plates and (size is None or v.size == size)
                and (v.plates[0].size > 0 or 0 in self.shape)]

    def switch_bases(self, domain: str, size: int | None = None) -> list[tuple[Var, Var]]:
        return [(v, z) for z in self.switches for v in self.outside_gates()
                if v.domain == domain and v.plates == (self.switch_range[z.ident],)
                and (size is None or v.size == size)]

    def indexed(self, base: Var, avoid: np.ndarray | None = None) -> str:
        """``base[index]`` with a random index per plate element; one that differs from
        ``avoid`` at every element where given (two reads of one element by one factor
        are refused), so then ``base`` needs two elements."""
        self.used.add("index")
        size = base.plates[0].size
        index = self.values("int", self.shape, size)
        if avoid is not None:
            index = np.where(index == avoid, (avoid + 1) % size, index).astype(index.dtype)
        if self.flip(0.1):  # whole numbers as floats: the checks accept them as indices
            index = index.astype(float)
        if self.flip(0.2):
            ident, name = self.fresh("d")
            self.emit(f"{ident} = ff.Data({name!r}, {lit(index)})")
            self.used.add("data")
            text, label, data = f"{base.ident}[{ident}]", f"{base.name}[{name}]", name
        else:
            text, data = f"{base.ident}[{lit(index)}]", None
            label = f"{base.name}[{index.item() if index.ndim == 0 else '...'}]"
        self.roots_of[text] = base.roots
        self.reads_of[text] = (Read(base, label, index, tuple(self.plates), data),)
        self.index_of[text] = (base, index)
        return text

    def data_value(self, domain: str, size: int | None = None, observed: bool = False) -> str:
        """An ``ff.Data`` holding a value of ``domain`` here; sometimes given anew at run
        time (``data=``)."""
        self.used.add("data")
        ident, name = self.fresh("d")
        if domain == "simplex":
            shape = self.shape if observed or self.flip(0.3) else ()
            value, again = (self.values("simplex", shape, size) for _ in range(2))
        elif observed or (self.plates and self.flip(0.5)):
            value, again = (self.values(domain, self.shape) for _ in range(2))
        else:
            value, again = (self.values(domain, ()) for _ in range(2))
        if domain != "simplex" and self.flip(0.2):  # no value when compiling: only at
            # run time (probabilities need one: it fixes the number of categories)
            self.emit(f"{ident} = ff.Data({name!r})")
            self.run_data.append(f"{name!r}: {lit(again)}")
        else:
            self.emit(f"{ident} = ff.Data({name!r}, {lit(value)})")
            if self.flip(0.3):
                self.run_data.append(f"{name!r}: {lit(again)}")
        return ident

    def observed(self, domain: str, size: int | None = None, trials: int | None = None
                 ) -> str:
        if (self.allowed("data") and self.flip(0.4)) or self.flip(0.03):
            if domain != "count":
                return self.data_value(domain, size, observed=True)
        return lit(self.values(domain, self.shape, size, trials))

    # ----- statements ---------------------------------------------------------------
    def define(self, domain: str, observe: bool | None = None, name: tuple[str, str] |
               None = None, size: int | None = None) -> Var:
        """Write a factory statement defining a variable of ``domain``."""
        ident, vname = name or self.fresh()
        if observe is None:
            observe = self.flip(0.8 if domain == "count" else 0.35)
        obs = ""
        if domain == "real":
            mean = self.operand("real")
            if self.flip(0.3):
                spread = f"variance={self.constant('positive')}"
            else:
                spread = f"precision={self.operand('positive')}"
            call = f"ff.Gaussian({vname!r}, {mean}, {spread}"
        elif domain == "positive":
            shape = self.constant("positive") if self.flip(0.9) else self.operand("positive")
            if self.flip(0.2):
                rate = f"scale={self.constant('positive')}"
            else:
                rate = self.operand("positive")
                if rate == shape and rate in self.roots_of:  # one variable (or element)
                    rate = self.constant("positive")  # in both arguments is refused
                elif not self.refusal:  # one element read by both: refused by design
                    self.refusal = self.same_element(vname, "Gamma", ("shape", shape),
                                                     ("rate", rate))
                    if self.refusal:  # the model ends here
                        self.budget = 0
                rate = f"rate={rate}"
            call = f"ff.Gamma({vname!r}, {shape}, {rate}"
        elif domain == "unit":
            a = self.constant("positive") if self.flip(0.85) else self.operand("positive")
            call = f"ff.Beta({vname!r}, {a}, {self.constant('positive')}"
        elif domain == "bool":
            call = f"ff.Bernoulli({vname!r}, {self.operand('unit')}"
        elif domain == "count":
            if self.flip(0.5):
                trials = self.draw(st.integers(1, 5))
                call = f"ff.Binomial({vname!r}, {trials}, {self.operand('unit')}"
                if observe:
                    obs = lit(self.values("count", self.shape, trials=trials))
            else:
                call = f"ff.Poisson({vname!r}, {self.operand('positive')}"
        elif domain == "int":
            size = size or self.pick((2, 3, 4))
            call = f"ff.Discrete({vname!r}, {self.operand('simplex', size)}"
        else:  # simplex
            size = size or self.pick((2, 3, 4))
            if self.plates and self.flip(0.3):
                alpha = lit(np.array([self.pick(ALPHAS[size]) for _ in
                                      range(int(np.prod(self.shape)))]
                                     ).reshape(self.shape + (size,)))
            else:
                alpha = lit(np.array(self.pick(ALPHAS[size])))
            call = f"ff.Dirichlet({vname!r}, {alpha}"
        if observe and not obs:
            obs = self.observed(domain, size)
        call += f", observed={obs})" if observe else ")"
        self.emit(f"{ident} = {call}")
        var = Var(ident, vname, domain, tuple(self.plates), size, observe,
                  None if observe else frozenset({ident}))
        self.scope.append(var)
        return var

    def random_var(self, domain: str, size: int | None = None) -> Var:
        """A latent variable of ``domain`` visible here, written first if there is none."""
        found = self.visible(domain, size, observed=False)
        if found and self.flip(0.8):
            return self.pick(found)
        return self.define(domain, observe=False, size=size)

    def child(self, call: str) -> None:
        """Write ``call`` (a format string with ``{name}``) as a new statement."""
        ident, name = self.fresh()
        self.emit(f"{ident} = {call.format(name=repr(name))}")

    def derived(self, expr: str, domain: str, roots: frozenset[str] | None = None,
                linear: tuple[Read, ...] | None = None) -> Var:
        """A variable defined by ``expr``; ``linear``: its leaves, for a sum, difference
        or numeric scaling (see ``Var.linear``)."""
        ident, _ = self.fresh()
        self.emit(f"{ident} = {expr}")
        var = Var(ident, expr, domain, tuple(self.plates), roots=roots, linear=linear,
                  gate_path=tuple(self.gate_ids))
        self.scope.append(var)
        return var

    def constrain_true(self, var: Var) -> None:
        """``ff.constrain_true(var)`` if it cannot contradict the model (see roots)."""
        if var.roots and not var.roots & self.constrained:
            self.constrained |= var.roots
            self.emit(f"ff.constrain_true({var.ident})")

    def factory(self) -> None:
        domain = self.pick(("real", "bool", "positive", "unit", "int", "simplex", "count"))
        self.define(domain)

    def arith(self) -> None:
        self.used.add("arith")
        a = self.random_var("real")
        op = self.pick(("+", "-", "c*", "*c", "*", "r-", "neg", "/c"))
        if op == "*":
            b = self.random_var("real")
            if self.shares(a.roots, b.roots):  # a product of shared parents is refused
                b = self.define("real", observe=False)
            expr, roots = f"{a.ident} * {b.ident}", self.join(a.roots, b.roots)
            linear = None  # a product is a leaf
        elif op in ("c*", "*c"):  # c* with an array c: an array on the left of *
            c = self.constant("real")
            expr = f"{c} * {a.ident}" if op == "c*" else f"{a.ident} * {c}"
            roots = a.roots if np.all(eval(c, {"np": np, "float": float}) != 0) else None
            linear = self.expand(a)
        elif op == "neg":
            expr, roots, linear = f"-{a.ident}", a.roots, self.expand(a)
        elif op == "/c":
            c = self.constant("positive")
            expr, roots = f"{a.ident} / {c if self.flip() else '-' + c}", a.roots
            linear = self.expand(a)
        else:
            b = self.operand("real") if op == "+" else self.second_operand("real", a)
            if b != a.ident and self.shares(a.roots, self.roots(b)):  # may cancel to a
                b = self.constant("real")  # constant, which is refused (x + x is 2 x)
            expr = f"{b} - {a.ident}" if op == "r-" else f"{a.ident} {op} {b}"
            roots = self.join(a.roots, self.roots(b))
            linear = self.expand(a) + self.reads(b)
        var = self.derived(expr, "real", roots, linear)
        if self.flip(0.6):  # give it an observed child
            self.child(f"ff.Gaussian({{name}}, {var.ident}, "
                       f"precision={self.constant('positive')}, "
                       f"observed={lit(self.values('real', self.shape))})")

    def compare(self) -> None:
        self.used.add("compare")
        a = self.random_var("real")
        form = self.pick(("gt", "lt", "pos"))
        if form == "pos":
            expr, roots = f"ff.is_positive({a.ident})", a.roots
        else:
            b = self.second_operand("real", a)
            if self.shares(a.roots, self.roots(b)):  # a - b may cancel to a constant
                b = self.constant("real")
            expr = f"{a.ident} {'>' if form == 'gt' else '<'} {b}"
            roots = self.join(a.roots, self.roots(b))
        var = self.derived(expr, "bool", roots)
        if self.flip(0.5):
            self.constrain_true(var)

    def logic(self) -> None:
        self.used.add("logic")
        a = self.random_var("bool")
        form = self.pick(("&", "|", "~"))
        if form == "~":
            var = self.derived(f"~{a.ident}", "bool", a.roots)
            self.logic_of[var.ident] = (form, (a.ident,), self.written[-1].line)
        else:
            b = self.second_operand("bool", a)
            roots = self.join(a.roots, self.roots(b))
            if form == "&" and b not in self.roots_of and not (
                    b.startswith(("True", "np.")) and np.all(eval(b, {"np": np}))):
                roots = None  # a & False, or a & an ff.Data that may hold False
            if form == "|" and b not in self.roots_of and not (
                    b.startswith(("False", "np.")) and not np.any(eval(b, {"np": np}))):
                roots = None  # a | True (always true: ~ of it cannot be constrained)
            var = self.derived(f"{a.ident} {form} {b}", "bool", roots)
            self.logic_of[var.ident] = (form, (a.ident, b), self.written[-1].line)
        if self.flip(0.4):
            self.constrain_true(var)

    def constrain(self) -> None:
        self.used.add("logic")
        candidates = [v for v in self.visible("bool") if v.roots
                      and not v.roots & self.constrained]
        var = self.pick(candidates) if candidates else self.define("bool", observe=False)
        self.constrain_true(var)

    def index(self) -> None:
        """A statement reading ``base[index]``; at the top level, writes the base (an
        array over a new range) and a plate to index it in if needed."""
        domain = self.pick(("real", "unit", "positive"))
        if self.plates:
            self.use_index(domain)
            return
        bases = self.index_bases(domain)
        if not bases or self.flip(0.3):
            r = self.new_range(min_size=1)
            with self.plate(r):
                self.define(domain, observe=False)
            bases = self.index_bases(domain)
        if not bases:  # inside a gate, which owns what it defines
            self.use_index(domain)
            return
        if self.flip(0.8):
            r = self.new_range(exclude=bases[0].plates[0])
            with self.plate(r):
                self.use_index(domain)
        else:
            self.use_index(domain)

    def use_index(self, domain: str) -> None:
        bases = self.index_bases(domain)
        if not bases:
            self.define(domain)
            return
        target = self.indexed(self.pick(bases))
        if domain == "real" and self.flip(0.5):
            base, index = self.index_of[target]
            other = [v for v in self.index_bases("real")
                     if v is not base or v.plates[0].size > 1]
            if other:
                pick = self.pick(other)
                b = self.indexed(pick, index if pick is base else None)
            else:
                b = self.random_operand(target)
            expr = f"{target} - {b}" if self.flip(0.5) else f"{b} - {target}"
            if self.refusal:  # refused by design where it is written: the model ends here
                self.emit(f"{self.fresh()[0]} = {expr}")
                self.budget = 0
                return
            target = self.derived(expr, "real", self.join(self.roots(target), self.roots(b)),
                                  self.reads(target) + self.reads(b)).ident
        out = {"real": "real", "unit": "bool", "positive": "count"}[domain]
        call = {"real": "ff.Gaussian({name}, {t}, precision=1.0",
                "unit": "ff.Bernoulli({name}, {t}",
                "positive": "ff.Poisson({name}, {t}"}[domain]
        self.child(call.replace("{t}", target)
                   + f", observed={lit(self.values(out, self.shape))})")

    def random_operand(self, target: str) -> str:
        """A latent real variable to subtract from (or from) the read ``target``.  Where
        its expansion reads ``target``'s element through other indices, factorflow
        refuses the difference by design: noted in ``refusal`` (the model is then valid
        and expected refused, the refusal tested).  Where it reads the same element by
        the same indices (collected) or lays out an ``ff.Data`` again, a fresh variable."""
        var = self.random_var("real")
        ra, rb = self.reads(target), self.expand(var)
        if self.collects(ra, rb) or self.relaid(var):
            var = self.define("real", observe=False)
            rb = self.expand(var)
        meeting = self.meeting(ra, rb)
        if meeting is not None:
            self.refusal = tuple(r.label for r in meeting)
        self.roots_of[var.ident] = var.roots
        self.reads_of[var.ident] = rb
        return var.ident

    def data(self) -> None:
        self.used.add("data")
        domain = self.pick(("real", "bool", "unit", "positive", "int"))
        if domain == "int":
            size = self.pick((2, 3))
            d = self.data_value("simplex", size)
            self.child(f"ff.Discrete({{name}}, {d}, observed={self.observed('int', size)})")
        elif domain == "real":
            d = self.data_value("real")
            self.child(f"ff.Gaussian({{name}}, {d}, precision={self.operand('positive')}, "
                       f"observed={self.data_value('real', observed=True)})")
        elif domain == "bool":
            self.child(f"ff.Bernoulli({{name}}, {self.operand('unit')}, "
                       f"observed={self.data_value('bool', observed=True)})")
        else:
            self.define(domain, observe=True)

    def user(self) -> None:
        self.used.add("user")
        which = self.pick(tuple(USER_FACTORS))
        self.defs[which] = USER_FACTORS[which]
        ident, name = self.fresh()
        if which == "fuzz_gaussian":
            observe = self.flip(0.6)
            obs = f", observed={self.observed('real')}" if observe else ""
            self.emit(f"{ident} = fuzz_gaussian({name!r}, mean={self.operand('real')}, "
                      f"precision={self.operand('positive')}{obs})")
            self.scope.append(Var(ident, name, "real", tuple(self.plates), None, observe,
                                  None if observe else frozenset({ident})))
        elif which == "fuzz_categorical":
            size = self.pick((2, 3))
            theta = self.operand("simplex", size)
            observe = self.flip(0.5)
            obs = f", observed={self.observed('int', size)}" if observe else ""
            self.emit(f"{ident} = fuzz_categorical({name!r}, theta={theta}{obs})")
            self.scope.append(Var(ident, name, "int", tuple(self.plates), size, observe,
                                  None if observe else frozenset({ident})))
        elif which == "fuzz_coin":
            observe = self.flip(0.6)
            obs = f", observed={self.observed('bool')}" if observe else ""
            self.emit(f"{ident} = fuzz_coin({name!r}, p={self.operand('unit')}{obs})")
            self.scope.append(Var(ident, name, "bool", tuple(self.plates), None, observe,
                                  None if observe else frozenset({ident})))
        else:
            self.emit(f"{ident} = fuzz_poisson({name!r}, rate={self.operand('positive')}, "
                      f"observed={lit(self.values('count', self.shape))})")

    def determ(self) -> None:
        self.used.add("determ")
        formula, arity = self.pick(FORMULAS)
        parents = [self.random_var("real")]
        if arity == 2:  # two distinct parents: one variable in two arguments is refused
            second = self.random_var("real")
            parents.append(second if second is not parents[0]
                           else self.define("real", observe=False))
        ident, name = self.fresh()
        args = ", ".join(f"{k}={p.ident}" for k, p in zip("ab", parents, strict=False))
        self.emit(f"{ident} = ff.Deterministic({name!r}, {formula}, {args})")
        var = Var(ident, name, "real", tuple(self.plates),
                  roots=self.join(*(p.roots for p in parents)))
        self.scope.append(var)
        if self.flip(0.6):
            self.child(f"ff.Gaussian({{name}}, {ident}, precision=1.0, "
                       f"observed={lit(self.values('real', self.shape))})")

    # ----- blocks ------------------------------------------------------------------
    def new_range(self, min_size: int = 0, exclude: Rng | None = None) -> Rng:
        reuse = [r for r in self.ranges if r not in self.plates and r is not exclude
                 and r.size >= min_size and r not in self.switch_loops]
        if reuse and self.flip(0.3):
            return self.pick(reuse)
        ident, name = self.fresh("r")
        size = self.draw(st.integers(min_size, 4))
        self.emit(f"{ident} = ff.Range({name!r}, {size})")
        r = Rng(ident, size)
        self.ranges.append(r)
        return r

    class _Block:
        def __init__(self, w: Writer, header: str, on_exit: Any = None) -> None:
            self.w, self.header, self.on_exit = w, header, on_exit

        def __enter__(self) -> None:
            self.w.emit(self.header)
            self.w.depth += 1
            self.start = len(self.w.lines)

        def __exit__(self, *exc: Any) -> None:
            if len(self.w.lines) == self.start:
                self.w.emit("pass")
            self.w.depth -= 1
            if self.on_exit is not None:
                self.on_exit()

    def plate(self, r: Rng) -> Any:
        self.plates.append(r)
        return self._Block(self, f"with ff.Plate({r.ident}):", lambda: self.plates.remove(r))

    def gate(self, header: str) -> Any:
        """A gate block: what is written inside goes out of scope when it closes."""
        mark = len(self.scope)
        frame = re.match(r"with ff\.(If|IfNot|Case|Switch)\((v\d+)(?:, (.*))?\):$", header)
        assert frame is not None, header
        z = next(v for v in reversed(self.scope) if v.ident == frame.group(2))
        self.known[z.ident] = z
        latent = not z.observed
        if latent:  # the case, as gate_analysis.case_of tells cases apart
            value = frame.group(3)
            case = {"If": True, "IfNot": False, "Switch": "switch"}.get(
                frame.group(1), value and int(re.findall(r"\d+", value)[-1]))
            if z.domain == "bool" and frame.group(1) == "Case":
                case = bool(case)
            self.cases.append((z.ident, case))
        self.gate_kinds.append(frame.group(1))
        self.gates += 1
        self.gate_marks.append(mark)
        self.gate_serial += 1
        self.gate_ids.append(self.gate_serial)
        self.frames.append((self.gate_serial, frame.group(1), z.ident if latent else None,
                            len(self.plates)))

        def close() -> None:
            del self.scope[mark:]
            if latent:
                self.cases.pop()
            self.gates -= 1
            self.gate_kinds.pop()
            self.gate_marks.pop()
            self.gate_ids.pop()
            self.frames.pop()
        return self._Block(self, header, close)

    def block_plate(self) -> None:
        self.used.add("plate")
        r = self.new_range()
        with self.plate(r):
            self.statements(self.draw(st.integers(1, 3)))

    def exits(self) -> list[tuple[str, str, str, int | None]]:
        """Exit variables to define in every branch: (ident, name, domain, size)."""
        out = []
        for _ in range(self.draw(st.integers(0, 2))):
            ident, name = self.fresh()
            domain = self.pick(("real", "bool", "unit", "positive", "int"))
            out.append((ident, name, domain, self.pick((2, 3)) if domain == "int" else None))
        return out

    def branch(self, header: str, exits: list[tuple[str, str, str, int | None]],
               children: list[tuple[str, str, str]]) -> None:
        with self.gate(header):
            self.statements(self.draw(st.integers(0, 2)))
            for ident, name, domain, size in exits:
                self.define(domain, observe=False, name=(ident, name), size=size)
            for ident, name, observed in children:  # an observed child, one factor each
                self.emit(f"{ident} = ff.Bernoulli({name!r}, {self.operand('unit')}, "
                          f"observed={observed})")

    def condition(self, domain: str) -> Var:
        found = self.visible(domain)
        if domain == "bool" and self.allowed("compare") and self.flip(0.2):
            self.compare()
            return self.scope[-1]
        if found and self.flip(0.75):
            return self.pick(found)
        return self.define(domain, observe=self.flip(0.2))

    def block_if(self) -> None:
        self.used.add("if")
        c = self.condition("bool")
        form = self.pick(("both", "if", "ifnot"))
        if form != "both":
            with self.gate(f"with ff.{'If' if form == 'if' else 'IfNot'}({c.ident}):"):
                self.statements(self.draw(st.integers(1, 3)))
            return
        exits = self.exits()
        children = []
        if self.flip(0.4):
            ident, name = self.fresh()
            children.append((ident, name, lit(self.values("bool", self.shape))))
        self.branch(f"with ff.If({c.ident}):", exits, children)
        self.branch(f"with ff.IfNot({c.ident}):", exits, children)
        self.add_exits(exits, c)

    def add_exits(self, exits: list[tuple[str, str, str, int | None]], z: Var) -> None:
        """Bring the exit variables of gates on ``z`` (defined in every case) into scope."""
        for ident, name, domain, size in exits:
            self.exit_of.setdefault(ident, []).append((tuple(self.cases), z.ident))
            self.home[ident] = tuple(self.cases)
            self.scope.append(Var(ident, name, domain, tuple(self.plates), size,
                                  roots=frozenset({ident})))

    def block_case(self) -> None:
        self.used.add("case")
        z = (self.pick(self.switches) if self.switches
             else self.condition(self.pick(("int", "bool"))))
        k = z.size if z.domain == "int" else 2
        every = self.flip(0.6)
        values = range(k) if every else sorted(set(
            self.draw(st.lists(st.integers(0, k - 1), min_size=1, max_size=k))))
        exits = self.exits() if every else []
        for v in values:
            value = f"np.int64({v})" if self.flip(0.15) else str(v)
            self.branch(f"with ff.Case({z.ident}, {value}):", exits, [])
        self.add_exits(exits, z)

    def block_switch(self) -> None:
        """``with ff.Switch(z):`` reading ``array[z]``.  At the top level it writes what it
        needs (the array over a range of z's size, z in a plate); inside plates it uses
        an array already written, or writes a plain factory statement."""
        self.used.add("switch")
        domain = self.pick(("real", "unit", "positive"))
        ready = [z for z in self.visible("int") if z not in self.switches
                 and self.switch_bases_for(z, domain)]
        if ready and self.flip(0.5):
            z = self.pick(ready)
            refusal = self.switch_refusal(z)
            if not refusal:
                self.write_switch(z, domain)
                return
            if not self.gate_marks:  # (inside gates, their conditions' plates count too)
                self.refusal = refusal
                self.write_switch(z, domain)
                self.budget = 0
                return
        if self.plates:
            arrays = [v for v in self.outside_gates() if v.domain == domain
                      and len(v.plates) == 1
                      and v.plates[0] not in self.plates + self.switch_loops
                      and v.plates[0].size >= 2]
            if not arrays:
                self.factory()
                return
            size = self.pick(arrays).plates[0].size
            self.write_switch(self.define("int", size=size, observe=self.flip(0.15)), domain)
            return
        size = self.pick((2, 3, 4))
        k = next((r for r in self.ranges if r.size == size and r not in self.switch_loops),
                 None)
        if k is None:
            ident, name = self.fresh("r")
            self.emit(f"{ident} = ff.Range({name!r}, {size})")
            k = Rng(ident, size)
            self.ranges.append(k)
        have = [v for v in self.outside_gates() if v.domain == domain and v.plates == (k,)]
        if self.gate_marks and not have:  # an array defined in a gate is its own there
            self.factory()
            return
        if not self.gate_marks and (not have or self.flip(0.3)):
            with self.plate(k):
                self.define(domain, observe=False)
        if self.flip(0.8):
            with self.plate(self.new_range(exclude=k)):
                self.write_switch(self.define("int", size=size, observe=self.flip(0.15)),
                                  domain)
        else:
            self.write_switch(self.define("int", size=size, observe=self.flip(0.15)), domain)

    def switch_refusal(self, z: Var) -> tuple[str, ...]:
        """What ``ff.Switch(z)`` here is refused naming, by design: a latent z inside a
        plate z is not over (a Switch is not moved out of a plate: transforms/lower.py);
        () where it is not refused (outside gates).  The gate is named by its condition
        as read there, ``z[r, ...]`` over z's own plates (``gate_analysis.show_ref``)."""
        outside = [r for r in self.plates if r not in z.plates]
        if z.observed or not outside:
            return ()
        read = f"{z.name}[{', '.join(r.ident for r in z.plates)}]" if z.plates else z.name
        return (f"gate on {read}:", f"the loop over {outside[0].ident};")

    def write_switch(self, z: Var, domain: str) -> None:
        with self.gate(f"with ff.Switch({z.ident}):"):
            self.switches.append(z)
            base = self.pick(self.switch_bases_for(z, domain))
            self.switch_range.setdefault(z.ident, base.plates[0])
            self.switch_loops.append(base.plates[0])
            out = {"real": "real", "unit": "bool", "positive": "count"}[domain]
            call = {"real": f"ff.Gaussian({{name}}, {{t}}, precision={self.constant('positive')}",
                    "unit": "ff.Bernoulli({name}, {t}",
                    "positive": "ff.Poisson({name}, {t}"}[domain]
            self.child(call.replace("{t}", f"{base.ident}[{z.ident}]")
                       + f", observed={lit(self.values(out, self.shape))})")
            mark = len(self.scope)
            self.statements(self.draw(st.integers(0, 2)))
            self.switches.remove(z)
            self.switch_loops.remove(base.plates[0])
            defined = self.scope[mark:]
        # what a switch defines is defined for every value of z: readable after it
        self.scope += [v for v in defined if v.plates == tuple(self.plates)]
        for v in defined:
            if v.plates == tuple(self.plates):
                self.exit_of.setdefault(v.ident, []).append((tuple(self.cases), z.ident))
                self.home[v.ident] = tuple(self.cases)

    def switch_bases_for(self, z: Var, domain: str) -> list[Var]:
        """Arrays ``z`` may index in a new Switch: over the range of z's Switches (any of
        z's size for its first), never one a plate or Switch around loops over."""
        loop = self.switch_range.get(z.ident)
        return [v for v in self.outside_gates() if v.domain == domain and len(v.plates) == 1
                and v.plates[0].size == z.size and loop in (None, v.plates[0])
                and v.plates[0] not in self.plates + self.switch_loops]

    # ----- driver -------------------------------------------------------------------
    def statement(self, kind: str) -> None:
        self.budget -= 1
        nested = len(self.plates) + self.gates
        if kind in ("plate", "if", "case", "switch") and nested >= 3:
            kind = "factory"
        if kind in ("if", "case") and self.switches:
            # inside ff.Switch(z) a gate is a Case of z: a variable defined there without
            # z's axis leaves the Switch, so a gate on another condition must define it in
            # every case (refused by design, as in Infer.NET: tests/fuzz/invalid.py)
            kind = "case"
        if kind == "plate" and len(self.ranges) >= 4 and not [
                r for r in self.ranges if r not in self.plates]:
            kind = "factory"
        getattr(self, {"plate": "block_plate", "if": "block_if", "case": "block_case",
                       "switch": "block_switch"}.get(kind, kind))()

    def statements(self, count: int) -> None:
        for _ in range(count):
            if self.budget <= 0:
                return
            self.statement(self.pick(KINDS[self.profile]))


def joint_read_refusal(w: Writer) -> tuple[str, ...]:
    """What VMP refuses in the model ``w`` wrote, naming it, by design: the first
    statement that reads, outside the gates on a latent condition ``z``, two variables
    whose posteriors both depend on ``z``'s case (``transforms/gate_order.py``,
    ``_conflicts``: ``z`` itself, as a value or a gate's condition, or a variable defined
    in every case of gates on ``z``, transitively, and a derived variable through its
    inputs).  The compiler rewrites two kinds first:

    * a gate on ``z`` inside gates on its exits moves outside them (every such gate of
      the model, or none where one move would read a variable outside the gate that
      defines it);
    * an observed statement is written once per case of ``z``, ``ff.Case(z, k)``
      inserted where the gates on ``z`` that define the exit sit (:func:`per_case_copy`).
      All copies are made, or none: where one copy would read a latent variable outside
      the gate that defines it (one defined inside a gate the copy now opens inside
      ``ff.Case(z, k)``, as ``v9`` in ``Case(v2, 0) { v9 = ...; Case(v9, 1) { observed
      reads v3 } }``, v2 and v3 exits of v1: fuzz seed 22, kind "case"), none is, and
      the first statement that reads such a pair is refused, observed or not; where all
      are made, the first that no copy removes (a latent one, or one with no place).

    A statement whose gate moves, an observed one on a condition over plates (where its
    loops sit is not recorded here) or one that reads pairs of two conditions is not
    told: where it comes first, or a statement before it is observed (whether its copy
    is made may depend on it), the outcome is not predicted (()), as it is where there
    is no such statement."""
    selector: dict[tuple, str] = {}  # a gate's key (the cases around it, z) -> z
    for stmt in w.written:
        for i, (z, _) in enumerate(stmt.cases):
            selector[(stmt.cases[:i], z)] = z
    selectors = set(selector.values())
    # (a gate on a condition inside a gate on it has no exits: its other cases are empty)
    exits = {v: [k for k in keys if k in selector and k[1] not in dict(k[0])]
             for v, keys in w.exit_of.items()}
    derived: dict[str, dict[str, tuple]] = {}

    def depends(v: str, open_keys: set) -> dict[str, tuple]:
        out: dict[str, tuple] = dict(derived.get(v, {}))
        for key in exits.get(v, ()):
            if key in open_keys:
                continue
            z = selector[key]
            out.setdefault(z, key)
            for y in depends(z, open_keys):
                out.setdefault(y, key)
        return out

    def moves(stmt: Written) -> list[tuple[int, int]]:
        """(h, i): the gate i on a selector whose exit is gate h's condition, around it
        (``gate_order._reorder`` moves gate i before gate h)."""
        return [(h, i) for i, (z, _) in enumerate(stmt.cases)
                for h, (e, _) in enumerate(stmt.cases[:i])
                if (stmt.cases[:h], z) in exits.get(e, ())]

    def movable(stmt: Written, h: int, i: int) -> bool | None:
        """Whether moving gate i before gate h keeps every variable the statement reads
        inside the gates that define it (``gate_order._checked``: else no move is made);
        None where it is not told here (a condition over plates, whose loops may sit
        between the gates; an output defined in every case of gates)."""
        z = w.known[stmt.cases[i][0]]
        if z.plates or stmt.output in w.exit_of:
            return None
        inside = stmt.cases[:h + 1]
        return not any(w.home.get(v, ())[:h + 1] == inside
                       for v in (*(c for c, _ in stmt.cases[h + 1:]), *stmt.inputs))

    # VMP writes a gate on an exit once per case of its selector where a condition
    # defined inside it keeps a gate on the selector inside it (:func:`per_case_block`):
    # the serials of those gates (their statements then read no pair), or not told
    copied: set[int] = set()
    for stmt in w.written:
        for h, i in moves(stmt):
            block = per_case_block(w, stmt, h, i)
            if block is None:
                return ()
            if block:
                copied.add(block)

    def in_copied(stmt: Written) -> bool:
        return bool(stmt.frames) and stmt.frames[0][0] in copied

    # every move made (True), none (False: one cannot be), or not told (None)
    every_move: bool | None = True
    for stmt in w.written:
        for h, i in moves(stmt) if not in_copied(stmt) else ():
            ok = movable(stmt, h, i)
            every_move = False if ok is False or every_move is False else (
                every_move and ok)

    # each statement reading a pair: (statement, (exit, other, z), the exit's key on z)
    conflicts: list[tuple[Written, tuple[str, str, str], tuple]] = []
    for stmt in w.written:
        reads: list[tuple[str, dict[str, tuple]]] = []
        open_keys: set = set()
        for i, (z, _) in enumerate(stmt.cases):
            reads.append((z, depends(z, open_keys)))
            open_keys.add((stmt.cases[:i], z))
        opened = {z for z, _ in stmt.cases}
        inputs = [(v, depends(v, open_keys)) for v in stmt.inputs if v not in opened]
        reads += inputs
        if stmt.derived and stmt.output is not None:
            deps = derived.setdefault(stmt.output, {})
            for u, du in inputs:
                deps.update(du)
                if u in selectors:
                    deps.setdefault(u, ())
        found, pairs = None, set()
        for i, (u, du) in enumerate(reads):
            for v, dv in reads[:i]:
                shared = (set(du) & set(dv)) | ({u} & set(dv)) | ({v} & set(du))
                if u != v and shared:
                    pairs |= shared
                if u != v and shared and found is None:
                    z = sorted(shared)[0]  # (names sort as factorflow's do: one prefix)
                    found = ((v, u, z), dv[z]) if z in dv else ((u, v, z), du[z])
        if found is None or in_copied(stmt):
            continue
        # not told: a gate on a selector inside gates on its exits moves out; copies per
        # case of one condition leave another's pairs, or need loops not recorded here
        if moves(stmt) and every_move is not False or stmt.output is None and (
                len(pairs) > 1 or w.known[found[0][2]].plates):
            unknown = True
            break
        conflicts.append((stmt, *found))
    else:
        unknown = False
    if not conflicts:
        return ()
    copies = {id(stmt): per_case_copy(w, stmt, key) for stmt, _, key in conflicts
              if stmt.output is None}
    made = [c for c in copies.values() if c is not None]
    if unknown:  # later statements may decide whether copies are made: the first
        # statement is told only if it is refused either way (no copy of its own)
        if copies.get(id(conflicts[0][0])) is not None:
            return ()
    elif made and all(made):  # every copy made: the first statement none removes
        conflicts = [c for c in conflicts if copies.get(id(c[0])) is None]
        if not conflicts:
            return ()
    stmt, names, _ = conflicts[0]
    e, other, z = (w.known[x] for x in names)
    show = f"{z.name}[{', '.join(r.ident for r in z.plates)}]" if z.plates else z.name
    # a derived variable is named by factorflow's label of its expression ("(v1 > 1.0)",
    # its operands by their names), not written here: the text stops before it
    derived_vars = {s.output for s in w.written if s.derived}
    parts = (f"{stmt.line} reads ", e, " and ", other, " together outside a gate on ", z)
    text = ""
    for i, part in enumerate(parts):
        if isinstance(part, str):
            text += part
        elif part.ident in derived_vars:
            break
        else:
            text += f"{show}:" if i == len(parts) - 1 else part.name
    return (text,)


def per_case_block(w: Writer, stmt: Written, h: int, i: int) -> int | None:
    """Whether VMP writes the gate h around ``stmt`` (on e, an exit of the gates on z,
    the condition of the gate i inside it) once per case of z
    (``gate_order._copies_per_case``, exit19): the gate's serial where it does, 0 where
    it does not, None where it is not told here.  It does where a condition of a gate
    between them is defined inside the gate on e (the gate on z cannot move out: fuzz
    seed 22, kind "if"), that gate is the outermost gate, outside plates, e and z have
    no plates, every gate on z is outside every gate or inside this one, none a Switch,
    and what the gate on e defines outside gates on z is latent (each variable once,
    outside plates); not told where a variable defined inside a gate on z there is read
    there outside them, or a statement there is a copy of a logic expression (those
    may make the rewritten gates fail the gate analysis)."""
    inside = stmt.cases[:h + 1]
    if not any(w.home.get(c, ())[:h + 1] == inside for c, _ in stmt.cases[h + 1:i]):
        return 0
    z, e = stmt.cases[i][0], stmt.cases[h][0]
    if w.known[z].plates or w.known[e].plates:
        return None
    at = next(j for j, f in enumerate(stmt.frames) if f[2] == e)
    serial = stmt.frames[at][0]
    if at or stmt.frames[at][3]:
        return 0
    block = [s for s in w.written if s.frames[:1] == stmt.frames[:1]]
    ids = {id(s) for s in block}
    for s in w.written:
        for j, f in enumerate(s.frames):
            if f[2] == z and (f[1] == "Switch" or j and id(s) not in ids):
                return 0
    drawn: list[str] = []
    in_z: set[str] = set()
    for s in block:
        if any(f[2] == z for f in s.frames[1:]):
            if s.output is not None:
                in_z.add(s.output)
            continue
        if s.output is None or s.plates or s.output in drawn:
            return 0
        if "@" in s.output or (set(s.inputs) | {c for c, _ in s.cases}) & in_z:
            return None
        drawn.append(s.output)
    return serial


def per_case_copy(w: Writer, stmt: Written, key: tuple) -> bool | None:
    """Whether the observed ``stmt``, read as a pair depending on the case of the
    condition of ``key`` (the gates on z that define the exit: the cases around them,
    z), can be written once per case of z, ``ff.Case(z, k)`` inserted just inside the
    gates of ``key``'s cases (``gate_order._per_case``): None where there is no such
    place (the statement is not inside those gates: the key of a derived variable's
    own selector input, or other gates); False where a copy would read a latent
    variable — a condition of the gates after that place, or an input — defined inside
    one of those gates (its definition is not inside ``ff.Case(z, k)``: the rewritten
    model is refused by the gate analysis, and the compiler keeps the original)."""
    if not key or key[0] != stmt.cases[:len(key[0])]:
        return None
    at = len(key[0])
    inside = stmt.cases[:at]
    reads = (*(c for c, _ in stmt.cases[at:]), *stmt.inputs)
    return not any(len(home := w.home.get(v, ())) > at and home[:at] == inside
                   for v in reads)


@st.composite
def valid_models(draw: Any, profile: str | None = None) -> ModelSpec:
    """A random valid model (see the module docstring)."""
    if profile is None:
        profile = draw(st.sampled_from(PROFILES))
    w = Writer(draw, profile)
    w.budget = draw(st.integers(2, 8))
    required = KINDS[profile][0]
    if draw(st.booleans()):
        w.statement(required)
    w.statements(draw(st.integers(1, 5)))
    if required != "factory" and required not in w.used and not w.refusal:
        w.budget = 3
        w.statement(required)
    defs: list[str] = []
    for lines in w.defs.values():
        defs += [*lines, ""]
    body = (*defs, 'with ff.Model("fuzz") as model:', *w.lines)
    data = "{" + ", ".join(w.run_data) + "}" if w.run_data else ""
    iterations = draw(st.sampled_from((10, 5, 20)))
    refusal, refused_by = w.refusal, ()
    if not refusal:
        refusal = joint_read_refusal(w)
        refused_by = ("vmp",) if refusal else ()
    return ModelSpec(profile, body, iterations=iterations, data=data, refusal=refusal,
                     refused_by=refused_by)
