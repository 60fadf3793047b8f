"""Build a ``Model`` from DSL text by calling the Python API, statement by statement.

Each DSL statement becomes the Python API call a person would write (``x[i] ~ Gaussian(m,
tau)`` is ``with ff.Plate(i): ff.Gaussian("x", m, precision=tau)``), so a DSL model and
its Python twin lower to the same IR.  Index letters become ranges, created where first
opened, with sizes read from the ``data`` arrays indexed by them (or ``data[letter]``),
all checked against each other before anything is built.

Guarantees: every error is a ``ModelError`` (or subclass) that names the line and column
of the statement and shows it with a caret; an unknown distribution or name suggests the
nearest known one; data entries the text never uses are refused (they are typos).
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import numpy as np
from lark import Token, Tree

from factorflow.errors import DataError, ModelError
from factorflow.model.core import Data, Indexed, Model, Plate, Range, Variable, plate_size
from factorflow.model.gates import Case, If, IfNot, Switch
from factorflow.text.syntax import caret, parse_tree
from factorflow.text.vocabulary import (
    CONSTANT_OPERATORS,
    DISTRIBUTIONS,
    FUNCTIONS,
    OTHER_NAMES,
    RANDOM_OPERATORS,
    STATEMENTS,
    keywords,
    suggest,
)


class Builder:
    """Walks a parse tree and builds the model (see the module docstring)."""

    def __init__(self, text: str, data: dict[str, Any], name: str, filename: str) -> None:
        self.lines = text.splitlines()
        self.data = dict(data)
        self.filename = filename
        self.model = Model(name)
        self.tree, self.margin = parse_tree(text, filename)
        self.body = textwrap.dedent(text)  # the text parsed: meta.start_pos indexes it
        self.env: dict[str, Any] = {}  # DSL name -> Variable (or a constant)
        self.changeable: dict[str, Data] = {}  # names declared with `data`
        self.used: set[str] = set()
        self.defined = {str(t.children[0]) for t in self.tree.find_data("target")}
        self.sizes: dict[str, tuple[int, str]] = {}

    # ----- locations ------------------------------------------------------------------
    def position(self, node: Tree | Token) -> tuple[int, int]:
        """``node``'s line and column (1-based) in the text as written."""
        if isinstance(node, Token):
            return int(node.line or 0), int(node.column or 0) + self.margin
        return node.meta.line, node.meta.column + self.margin

    def where(self, node: Tree | Token) -> str:
        line, column = self.position(node)
        return f"{self.filename}, line {line}, column {column}"

    def fail(self, node: Tree | Token, message: str, kind: type = ModelError) -> ModelError:
        """A ``kind`` error naming ``node``'s line and column, with a caret under it."""
        error = kind(f"{self.where(node)}: {message}\n{caret(self.lines, *self.position(node))}")
        error.located = True
        return error

    @contextmanager
    def statement(self, node: Tree) -> Iterator[None]:
        """Run the building of one statement: errors raised inside get its line, column
        and caret; what it adds to the model gets it as provenance."""
        first, known = len(self.model.statements), set(self.model.variables)
        text = self.body[node.meta.start_pos:node.meta.end_pos].splitlines()[0].strip()
        try:
            yield
        except ModelError as e:
            if getattr(e, "located", False):
                raise
            raise self.fail(node, str(e), type(e)) from e
        provenance = f"{self.filename}:{node.meta.line}: {text}"
        for call in self.model.statements[first:]:
            call.provenance = provenance
        for name in set(self.model.variables) - known:
            self.model.variables[name].provenance = provenance

    # ----- index letters and their sizes ----------------------------------------------
    def is_data_array(self, name: str) -> bool:
        return name in self.data and np.ndim(self.data[name]) >= 1

    def is_letter(self, ref: Tree) -> bool:
        """Whether the index ``ref`` names a plate (not a variable or an index array)."""
        name = str(ref.children[0])
        return (len(ref.children) == 1 and name not in self.defined
                and name not in self.changeable and not self.is_data_array(name))

    def infer_sizes(self) -> None:
        """Each index letter's size from the data arrays it indexes (``y[i, j]``, or
        ``x[i] ~ ...(observed=values)``) and from ``data[letter]``; DataError naming both
        places where two disagree."""
        for node in self.tree.iter_subtrees_topdown():
            if node.data not in ("ref", "target"):
                continue
            name, *index = node.children
            if index and all(isinstance(i, Token) or self.is_letter(i) for i in index):
                letters = [str(i) if isinstance(i, Token) else str(i.children[0])
                           for i in index]
                self.sizes_from(str(name), letters, node, exact=True)
        for node in self.tree.find_data("tilde"):
            letters = [str(t) for t in node.children[0].children[1:]]
            for arg in node.children[2:]:
                if arg.data == "keyword" and str(arg.children[0]) == "observed":
                    value = arg.children[1]
                    if value.data == "ref" and len(value.children) == 1:
                        self.sizes_from(str(value.children[0]), letters, node, exact=False)
        for letter in self.letters_in(self.tree):
            if letter in self.data and np.ndim(self.data[letter]) == 0:
                self.size(letter, plate_size(self.data[letter], f"data[{letter!r}]"),
                          f"data[{letter!r}]")

    def sizes_from(self, name: str, letters: list[str], node: Tree, exact: bool) -> None:
        """The sizes of ``letters`` from the leading axes of the data array ``name`` (if
        it is one); with ``exact``, DataError if it has fewer axes than letters."""
        if not self.is_data_array(name):
            return
        shape = np.shape(self.data[name])
        if exact and len(shape) < len(letters):
            raise self.fail(node, f"{name}[{', '.join(letters)}] has {len(letters)} "
                            f"indices but data[{name!r}] has shape {shape}.", DataError)
        line, column = self.position(node)
        for axis, letter in enumerate(letters[:len(shape)]):
            self.size(letter, shape[axis], f"data[{name!r}] (axis {axis}, used at line "
                      f"{line}, column {column})")

    def size(self, letter: str, size: int, source: str) -> None:
        if letter in self.sizes and self.sizes[letter][0] != size:
            known, where = self.sizes[letter]
            raise DataError(f"index {letter!r} has size {known} from {where} but size "
                            f"{size} from {source}; the sizes must match.")
        self.sizes.setdefault(letter, (size, source))

    def letters_in(self, tree: Tree) -> list[str]:
        """The index letters written in ``tree``, in order of first appearance."""
        out: list[str] = []
        for node in tree.iter_subtrees_topdown():
            if node.data == "target":
                candidates = [str(t) for t in node.children[1:]]
            elif node.data == "ref":
                candidates = [str(r.children[0]) for r in node.children[1:]
                              if self.is_letter(r)]
            else:
                continue
            out += [c for c in candidates if c not in out]
        return out

    def range(self, letter: str) -> Range:
        if letter in self.model.ranges:
            return self.model.ranges[letter]
        if letter not in self.sizes:
            raise ModelError(f"the size of index {letter!r} is unknown: no data array is "
                             f"indexed by it; give it in data, e.g. data={{{letter!r}: 3}}.")
        if letter in self.data:
            self.used.add(letter)
        return Range(letter, self.sizes[letter][0])

    def open_plates(self, stack: ExitStack, letters: list[str]) -> None:
        """Open the plates ``letters`` (the open ones must come first, in order)."""
        open_now = [p.name for p in self.model.plates]
        if letters[:len(open_now)] != open_now:
            raise ModelError(f"inside a block over {open_now}, a statement's indices must "
                             f"start with {open_now}, got {letters}.")
        for letter in letters[len(open_now):]:
            stack.enter_context(Plate(self.range(letter)))

    def open_plates_of(self, stack: ExitStack, tree: Tree) -> list[Range]:
        """Open, after those open now, the plates of the letters ``tree`` uses (in order
        of appearance); returns the ranges it opened."""
        open_now = [p.name for p in self.model.plates]
        self.open_plates(stack, open_now + [x for x in self.letters_in(tree)
                                            if x not in open_now])
        return list(self.model.plates[len(open_now):])

    # ----- statements -----------------------------------------------------------------
    def build(self) -> Model:
        with self.model:
            self.infer_sizes()
            for node in self.tree.children:
                self.run(node)
        unused = sorted(set(self.data) - self.used)
        if unused:
            raise ModelError(f"data given for {unused}, but the model text never uses "
                             f"{'it' if len(unused) == 1 else 'them'}; check the names.")
        return self.model

    def run(self, node: Tree) -> None:
        if node.data in ("if_block", "switch_block"):
            self.gate(node)
            return
        with self.statement(node), ExitStack() as stack:
            getattr(self, node.data)(node, stack)

    def suite(self, node: Tree) -> None:
        for child in node.children:
            self.run(child)

    def data_decl(self, node: Tree, stack: ExitStack) -> None:
        for token in node.children:
            name = str(token)
            if name in self.defined:
                raise self.fail(token, f"{name!r} is a variable of the model; an ff.Data "
                                f"needs a name of its own: `data {name}_obs` and "
                                f"`{name}[...] ~ ...(..., observed={name}_obs)`.")
            self.used.add(name)
            self.changeable[name] = Data(name, self.data.get(name))

    def tilde(self, node: Tree, stack: ExitStack) -> None:
        target, dist, *args = node.children
        name, letters = str(target.children[0]), [str(t) for t in target.children[1:]]
        if str(dist) not in DISTRIBUTIONS:
            hint = (f"; factorflow calls it {OTHER_NAMES[str(dist)]!r}"
                    if str(dist) in OTHER_NAMES else suggest(str(dist), DISTRIBUTIONS)
                    or f"; the distributions are {', '.join(DISTRIBUTIONS)}")
            raise self.fail(dist, f"unknown distribution {str(dist)!r}{hint}")
        factory, positional = DISTRIBUTIONS[str(dist)]
        unknown = [x for x in letters if x not in self.sizes]
        if unknown and name not in self.data and name not in self.changeable:
            raise ModelError(f"the size of index {unknown[0]!r} is unknown: no data array is "
                             f"indexed by it.  If {name!r} is observed, data has no "
                             f"{name!r}; otherwise give the size, e.g. data="
                             f"{{{unknown[0]!r}: 3}}.")
        self.open_plates(stack, letters)
        kwargs = self.arguments(str(dist), factory, args, positional,
                                keywords(factory) + ("observed",))
        observed = kwargs.pop("observed", None)
        if name in self.data:
            if observed is not None:
                raise ModelError(f"{name!r} is observed twice: by data[{name!r}] and by "
                                 "observed=; give one.")
            self.used.add(name)
            observed = self.data[name]
        elif isinstance(observed, Variable | Indexed):
            raise ModelError(f"observed= takes data (an array or a `data` name), not the "
                             f"random {getattr(observed, 'name', 'expression')!r}.")
        self.env[name] = factory(name, **kwargs, observed=observed)

    def assign(self, node: Tree, stack: ExitStack) -> None:
        target, expr = node.children
        name = str(target.children[0])
        self.open_plates(stack, [str(t) for t in target.children[1:]])
        self.env[name] = self.expr(expr)

    def call_stmt(self, node: Tree, stack: ExitStack) -> None:
        function, *args = node.children
        if str(function) not in STATEMENTS:
            hint = suggest(str(function), STATEMENTS) or (
                f"; the statements that are calls are {', '.join(STATEMENTS)}")
            raise self.fail(function, f"unknown statement {str(function)!r}{hint}")
        self.open_plates_of(stack, node)
        callee = STATEMENTS[str(function)]
        callee(**self.arguments(str(function), callee, args))

    def arguments(self, callee: str, fn: Callable[..., Any], args: list[Tree],
                  positional: tuple[str, ...] | None = None, keywords: tuple[str, ...] = ()
                  ) -> dict[str, Any]:
        """The keyword arguments of ``fn`` that ``args`` give (``positional`` names the
        positional ones: by default all of ``fn``'s), each evaluated; ModelError for an
        unknown, repeated or missing one."""
        parameters = inspect.signature(fn).parameters
        if positional is None:
            positional = tuple(parameters)
        out: dict[str, Any] = {}
        for i, arg in enumerate(args):
            if isinstance(arg, Tree) and arg.data == "keyword":
                key, value = str(arg.children[0]), arg.children[1]
                allowed = set(positional) | set(keywords)
                if key not in allowed:
                    raise self.fail(arg, f"{callee} has no parameter {key!r}"
                                    f"{suggest(key, allowed)} (it takes "
                                    f"{', '.join(sorted(allowed))}).")
            else:
                if i >= len(positional):
                    raise self.fail(arg, f"{callee} takes {len(positional)} positional "
                                    f"argument(s) ({', '.join(positional)}).")
                key, value = positional[i], arg
            if key in out:
                raise self.fail(arg, f"{callee}: {key!r} is given twice.")
            out[key] = self.expr(value)
        missing = [k for k, p in parameters.items() if k != "name" and k not in out
                   and p.default is inspect.Parameter.empty]
        if missing:
            raise ModelError(f"{callee} needs {', '.join(missing)}: write "
                             f"{callee}({', '.join(positional)}).")
        return out

    # ----- gates ----------------------------------------------------------------------
    def gate(self, node: Tree) -> None:
        head, *suites = node.children
        with ExitStack() as stack:
            with self.statement(node):
                opened = self.open_plates_of(stack, head)
                gates: list[Callable[[Any], Any]]
                if node.data == "switch_block":
                    condition, gates = self.expr(head), [Switch]
                elif head.data == "eq":
                    condition, value = self.expr(head.children[0]), self.expr(head.children[1])
                    if len(suites) > 1:
                        raise ModelError("`else` after `if z == k:` is not supported; write "
                                         "one `if z == k:` block for each value.")
                    gates = [lambda c: Case(c, value)]
                elif head.data == "not_":
                    condition, gates = self.expr(head.children[0]), [IfNot, If]
                else:
                    condition, gates = self.expr(head), [If, IfNot]
                stack.enter_context(gates[0](condition))
            self.suite(suites[0])
        if len(suites) > 1:
            with ExitStack() as stack:
                for rng in opened:
                    stack.enter_context(Plate(rng))
                stack.enter_context(gates[1](condition))
                self.suite(suites[1])

    # ----- expressions ----------------------------------------------------------------
    def expr(self, node: Tree) -> Any:
        kind = node.data
        if kind == "number":
            text = str(node.children[0])
            return float(text) if any(c in text for c in ".eE") else int(text)
        if kind == "ref":
            return self.ref(node)
        if kind == "array":
            values = [self.expr(c) for c in node.children]
            if any(isinstance(v, Variable | Indexed | Data) for v in values):
                raise self.fail(node, "an array [...] holds numbers only.")
            return np.array(values, dtype=float)
        if kind == "call":
            function, *args = node.children
            if str(function) not in FUNCTIONS:
                hint = (" (distributions are used with ~: `name ~ "
                        f"{function}(...)`)" if str(function) in DISTRIBUTIONS
                        else suggest(str(function), FUNCTIONS))
                raise self.fail(function, f"unknown function {str(function)!r}{hint}")
            callee = FUNCTIONS[str(function)]
            return callee(**self.arguments(str(function), callee, args))
        if kind == "eq":
            raise self.fail(node, "`==` is a gate condition only (`if z == 2:`).")
        values = [self.expr(c) for c in node.children]
        if not any(isinstance(v, Variable | Indexed | Data) for v in values):
            try:  # known values: computed now, as Python would
                with np.errstate(all="raise"):
                    return CONSTANT_OPERATORS[kind](*values)
            except (ValueError, TypeError, FloatingPointError) as e:
                raise self.fail(node, f"the known values here cannot be combined ({e}).",
                                DataError) from None
        return RANDOM_OPERATORS[kind](*values)

    def ref(self, node: Tree) -> Any:
        name, *index = node.children
        name = str(name)
        if name in self.env:
            value = self.env[name]
            if isinstance(value, Variable):
                return self.indexed(node, value, index)
            if index:
                raise self.fail(node, f"{name!r} is a constant; it takes no index.")
            return value
        if name in self.changeable:
            data = self.changeable[name]
            letters = self.plate_letters(node, index)
            open_now = [p.name for p in self.model.plates]
            if letters and letters != open_now:
                raise self.fail(node, f"the data {name!r} is indexed by {letters}; as "
                                f"ff.Data it must be indexed by every open plate {open_now}, "
                                "in order (or by none).")
            return data
        if name in self.data:
            self.used.add(name)
            if not index:
                return self.data[name]
            letters, value = self.plate_letters(node, index), np.asarray(self.data[name])
            if value.ndim < len(letters):  # (a number read by an index: j[x] with j = 2)
                raise self.fail(node, f"{name}[{', '.join(letters)}] has {len(letters)} "
                                f"indices but data[{name!r}] has shape {value.shape}.",
                                DataError)
            return self.aligned(value, letters)
        known = set(self.env) | set(self.data) | set(self.changeable)
        raise self.fail(node, f"{name!r} is not defined (by a statement before this one, "
                        f"or in data){suggest(name, known)}")

    def plate_letters(self, node: Tree, index: list[Tree]) -> list[str]:
        letters = []
        for ref in index:
            if not self.is_letter(ref):
                raise self.fail(ref, "only a variable can be indexed by an index array "
                                "or a random index.")
            letter = str(ref.children[0])
            if letter not in [p.name for p in self.model.plates]:
                raise self.fail(ref, f"index {letter!r} is not a plate of this statement "
                                f"(open: {[p.name for p in self.model.plates]}); index the "
                                f"statement's left-hand side by {letter!r}.")
            letters.append(letter)
        return letters

    def indexed(self, node: Tree, var: Variable, index: list[Tree]) -> Variable | Indexed:
        plates = [p.name for p in var.plates]
        if len(index) == 1 and not self.is_letter(index[0]):
            return Indexed(var, self.expr(index[0]))  # skill[winner[g]], means[z[n]]
        letters = [str(r.children[0]) for r in index]
        if letters != plates:
            if not plates:
                raise self.fail(node, f"{var.name!r} has no plates; write {var.name} "
                                "without an index.")
            written = f"{var.name}[{', '.join(plates)}]" if plates else var.name
            raise self.fail(node, f"{var.name!r} is indexed by its plates {plates}; "
                            f"write {written}.")
        self.plate_letters(node, index)
        return var

    def aligned(self, value: np.ndarray, letters: list[str]) -> np.ndarray:
        """A data array whose leading axes are ``letters``, laid out over the open plates
        (axes reordered, size-1 axes for the plates it does not have)."""
        plates = [p.name for p in self.model.plates]
        inner = list(range(len(letters), value.ndim))
        if letters == plates:
            return value
        order = [letters.index(p) for p in plates if p in letters]
        value = np.transpose(value, order + inner)
        shape = [self.sizes[p][0] if p in letters else 1 for p in plates]
        return value.reshape(shape + [value.shape[i] for i in inner])
