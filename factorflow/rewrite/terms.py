"""Hash-consed symbolic terms: expressions, log-densities and expectations.

A :class:`Term` is an immutable node ``(op, args, payload)``. Terms are interned
through a weak-value cache (as funsor's ``FunsorMeta`` or tinygrad's ``UOp``), so two
structurally equal terms are the same object: ``==`` is ``is``, hashing is by
identity, and memoizing on terms is free.

Guarantees of the canonical constructor ``Term(op, args, payload)``:

* arguments of the commutative n-ary ops ``sum`` and ``prod`` are sorted by a
  deterministic structural key, so ``x + y`` and ``y + x`` are one term;
* a ``sum`` or ``prod`` of one argument *is* that argument, of none is 0 or 1;
* nothing else is rewritten: nesting ``(x + y) + z`` stays nested (associativity is a
  rule, see :mod:`factorflow.rewrite.rules`); the operator overloads and the helper
  builders (:func:`add`, :func:`mul`) flatten and fold numeric constants for
  convenience.

Patterns (rules) add ``var`` (a pattern variable), ``calc`` (a constant computed from
matched constants) and :class:`NameVar` index names. Printing: :mod:`.printing`.
"""

from __future__ import annotations

import hashlib
import math
import weakref
from dataclasses import dataclass, field
from typing import Any

CONST, SYM, DATA, VAR, CALC = "const", "sym", "data", "var", "calc"
SUM, PROD, POW, NEG = "sum", "prod", "pow", "neg"
LOG, EXP, LGAMMA, DIGAMMA, LOGDET = "log", "exp", "lgamma", "digamma", "logdet"
DOT, MATMUL, TRANSPOSE, INDEX, INDEX_SUM = "dot", "matmul", "transpose", "index", "index_sum"
#: a user function (its name is the payload; see :mod:`factorflow.rewrite.user`)
CALL = "call"
EXPECT, VARIANCE, COVARIANCE = "E", "V", "C"
ELOG, ELOG1M, ELOGGAMMA, ELOGDET = "Elog", "Elog1m", "Eloggamma", "Elogdet"

#: Moments under the mean-field posterior (VinDsl's E, V, C, Elog, ...).
MOMENTS = frozenset({EXPECT, VARIANCE, COVARIANCE, ELOG, ELOG1M, ELOGGAMMA, ELOGDET})
FUNCTIONS = frozenset({NEG, LOG, EXP, LGAMMA, DIGAMMA, LOGDET})
COMMUTATIVE = frozenset({SUM, PROD})
#: op -> number of arguments (None: any number).
ARITY: dict[str, int | None] = {
    CONST: 0, SYM: 0, DATA: 0, VAR: 0, CALC: None, SUM: None, PROD: None, POW: 2, DOT: 2, MATMUL: 2,
    TRANSPOSE: 1, INDEX: 1, INDEX_SUM: 1, **{op: 1 for op in FUNCTIONS | MOMENTS}, CALL: None,
}
VAR_KINDS = frozenset({"any", "atom", "const", "rest"})
_RANK = {CONST: 0, SYM: 1, DATA: 1, VAR: 2, **{m: 3 for m in MOMENTS}, **{f: 4 for f in FUNCTIONS},
         CALC: 4, CALL: 4, TRANSPOSE: 5, INDEX: 5, INDEX_SUM: 5, DOT: 5, MATMUL: 5, POW: 6,
         PROD: 7, SUM: 8}


@dataclass(frozen=True)
class NameVar:
    """A pattern variable standing for an index name (the payload of ``index``/``index_sum``)."""

    name: str


_CACHE: weakref.WeakValueDictionary[tuple[Any, ...], Term] = weakref.WeakValueDictionary()


class _Interning(type):
    """Metaclass that canonicalizes arguments and returns the unique interned term."""

    def __call__(cls, op: str, args: tuple[Term, ...] = (), payload: Any = None) -> Term:
        args = tuple(args)
        if op in COMMUTATIVE:
            if len(args) < 2 and not (args and _is_rest(args[0])):
                return args[0] if args else const(0.0 if op == SUM else 1.0)
            args = tuple(sorted(args, key=_order))
        key = (op, args, payload)
        term = _CACHE.get(key)
        if term is None:
            _validate(op, args, payload)
            term = super().__call__(op, args, payload)
            _CACHE[key] = term
        return term


def _is_rest(t: Term) -> bool:
    return t.op == VAR and t.payload[1] == "rest"


def _order(t: Term) -> tuple[int, str, bytes]:
    return t.order_key


def _validate(op: str, args: tuple[Any, ...], payload: Any) -> None:
    if op not in ARITY:
        raise ValueError(f"unknown term op {op!r}")
    arity = ARITY[op]
    if arity is not None and len(args) != arity:
        raise ValueError(f"{op} takes {arity} arguments, got {len(args)}")
    if not all(isinstance(a, Term) for a in args):
        raise TypeError(f"arguments of {op} must be terms, got {args!r}")
    if op == CONST and not (isinstance(payload, float) and math.isfinite(payload)):
        raise ValueError(f"a constant must be a finite float, got {payload!r}")
    if op in (SYM, DATA) and not (isinstance(payload, tuple) and len(payload) == 2):
        raise ValueError(f"a symbol payload is (name, indices), got {payload!r}")
    if op == VAR and payload[1] not in VAR_KINDS:
        raise ValueError(f"unknown pattern variable kind {payload[1]!r}")
    if op in (INDEX, INDEX_SUM) and not isinstance(payload, str | NameVar):
        raise ValueError(f"{op} needs an index name, got {payload!r}")
    if op == CALL and not (isinstance(payload, str) and payload.isidentifier() and args):
        raise ValueError(f"a function call needs a name and arguments, got {payload!r}")


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class Term(metaclass=_Interning):
    """An interned term. Build with the helpers below or the arithmetic operators.

    Derived fields: ``size`` (nodes of the tree), ``symbols`` (names of the symbols and
    data in it), ``random_symbols`` (random symbols not under a moment such as ``E``),
    ``indices`` (free named indices), ``order_key`` (the canonical argument order).
    """

    op: str
    args: tuple[Term, ...]
    payload: Any
    size: int = field(init=False, repr=False)
    digest: bytes = field(init=False, repr=False)
    order_key: tuple[int, str, bytes] = field(init=False, repr=False)
    symbols: frozenset[str] = field(init=False, repr=False)
    random_symbols: frozenset[str] = field(init=False, repr=False)
    indices: frozenset[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        h = hashlib.blake2b(f"{self.op}|{self.payload!r}".encode(), digest_size=12)
        for a in self.args:
            h.update(a.digest)
        syms = frozenset().union(*(a.symbols for a in self.args))
        rnd = frozenset() if self.op in MOMENTS else frozenset().union(
            *(a.random_symbols for a in self.args))
        idx = frozenset().union(*(a.indices for a in self.args))
        if self.op in (SYM, DATA):
            syms = frozenset({self.payload[0]})
            rnd = syms if self.op == SYM else frozenset()
            idx = frozenset(self.payload[1])
        elif self.op == INDEX and isinstance(self.payload, str):
            idx = idx | {self.payload}
        elif self.op == INDEX_SUM:
            idx = idx - {self.payload}
        label = self.payload[0] if self.op in (SYM, DATA, VAR) else ""
        label = self.payload if self.op == CALL else label
        label = f"{self.payload:+.17e}" if self.op == CONST else label
        if self.op in MOMENTS and self.args[0].op in (SYM, DATA):
            label = f"{self.args[0].payload[0]}|{self.op}"
        put = object.__setattr__
        put(self, "size", 1 + sum(a.size for a in self.args))
        put(self, "digest", h.digest())
        put(self, "order_key", (_RANK[self.op], label, h.digest()))
        put(self, "symbols", syms)
        put(self, "random_symbols", rnd)
        put(self, "indices", idx)

    def __repr__(self) -> str:
        from factorflow.rewrite.printing import show

        return show(self)

    __str__ = __repr__

    def __add__(self, other: TermLike) -> Term:
        return add(self, other)

    def __radd__(self, other: TermLike) -> Term:
        return add(other, self)

    def __sub__(self, other: TermLike) -> Term:
        return add(self, neg(as_term(other)))

    def __rsub__(self, other: TermLike) -> Term:
        return add(other, neg(self))

    def __mul__(self, other: TermLike) -> Term:
        return mul(self, other)

    def __rmul__(self, other: TermLike) -> Term:
        return mul(other, self)

    def __truediv__(self, other: TermLike) -> Term:
        return mul(self, power(other, -1.0))

    def __rtruediv__(self, other: TermLike) -> Term:
        return mul(other, power(self, -1.0))

    def __pow__(self, other: TermLike) -> Term:
        return power(self, other)

    def __neg__(self) -> Term:
        return neg(self)

    def __matmul__(self, other: Term) -> Term:
        return matmul(self, other)

    def __getitem__(self, index: str | tuple[str, ...]) -> Term:
        """``x["k"]`` is ``at(x, "k")``; ``lam["i", "j"]`` (a matrix: VinDsl's two inner
        indices) is ``at(at(lam, "j"), "i")``, its rows named ``i`` and its columns ``j``.
        An index that is not a name (a number, a slice) raises TypeError."""
        names = index if isinstance(index, tuple) else (index,)
        if not names or not all(isinstance(n, str | NameVar) for n in names):
            raise TypeError(f"{self}[{index!r}]: inner indices are written as names, "
                            "x['i'] or lam['i', 'j']")
        out = self
        for name in reversed(names):
            out = at(out, name)
        return out


TermLike = Term | float | int


def as_term(x: TermLike) -> Term:
    """A term for ``x``: terms pass through, numbers become constants."""
    if isinstance(x, Term):
        return x
    if isinstance(x, int | float):
        return const(x)
    raise TypeError(f"cannot make a term from {type(x).__name__} {x!r}")


def const(value: float) -> Term:
    """The numeric constant ``value`` (stored as a float; -0.0 becomes 0.0)."""
    return Term(CONST, (), float(value) + 0.0)


def sym(name: str, *indices: str) -> Term:
    """A random variable (or data) symbol, optionally carrying named plate indices."""
    return Term(SYM, (), (name, tuple(indices)))


def data(name: str, *indices: str) -> Term:
    """An observed quantity: a named array that is not random (``E[data] = data``)."""
    return Term(DATA, (), (name, tuple(indices)))


def var(name: str, kind: str = "any") -> Term:
    """A pattern variable; kind ``atom`` matches symbols, ``const`` constants, ``rest`` the
    remaining arguments of a sum or product."""
    return Term(VAR, (), (name, kind))


def add(*xs: TermLike) -> Term:
    """n-ary sum, flattening nested sums and folding numeric constants."""
    return _fold(SUM, xs, 0.0, lambda a, b: a + b)


def mul(*xs: TermLike) -> Term:
    """n-ary product, flattening nested products and folding numeric constants."""
    return _fold(PROD, xs, 1.0, lambda a, b: a * b)


def _fold(op: str, xs: tuple[TermLike, ...], unit: float, combine: Any) -> Term:
    args: list[Term] = []
    total, seen_const = unit, False
    for x in map(as_term, xs):
        for a in x.args if x.op == op else (x,):
            if a.op == CONST:
                total, seen_const = combine(total, a.payload), True
            else:
                args.append(a)
    if total != unit or (seen_const and not args):
        args.insert(0, const(total))
    return Term(op, tuple(args))


def neg(x: TermLike) -> Term:
    """``-x`` (a constant is negated directly)."""
    x = as_term(x)
    return const(-x.payload) if x.op == CONST else Term(NEG, (x,))


def power(base: TermLike, exponent: TermLike) -> Term:
    """``base ** exponent`` (folded when both are constants with a real power)."""
    base, exponent = as_term(base), as_term(exponent)
    if base.op == CONST and exponent.op == CONST and (
            base.payload > 0 or exponent.payload.is_integer()) and base.payload != 0:
        return const(base.payload**exponent.payload)
    return Term(POW, (base, exponent))


def _unary(op: str) -> Any:
    def build(x: TermLike) -> Term:
        return Term(op, (as_term(x),))

    build.__name__, build.__doc__ = op, f"The term ``{op}(x)``."
    return build


log, exp, lgamma, digamma, logdet = map(_unary, (LOG, EXP, LGAMMA, DIGAMMA, LOGDET))
E, V, C = map(_unary, (EXPECT, VARIANCE, COVARIANCE))
Elog, Elog1m, Eloggamma, Elogdet = map(_unary, (ELOG, ELOG1M, ELOGGAMMA, ELOGDET))


def dot(a: Term, b: Term) -> Term:
    """Inner product over the last positional axis."""
    return Term(DOT, (a, b))


def matmul(a: Term, b: Term) -> Term:
    """Matrix product (matrix @ matrix or matrix @ vector)."""
    return Term(MATMUL, (a, b))


def transpose(a: Term) -> Term:
    """The matrix transpose of ``a`` (its last two positional axes swapped)."""
    return Term(TRANSPOSE, (a,))


def at(x: Term, index: str | NameVar) -> Term:
    """Name the last positional axis of ``x`` with the index ``index`` (``x[k]``)."""
    return Term(INDEX, (x,), index)


def index_sum(x: Term, index: str | NameVar) -> Term:
    """Sum of ``x`` over the named index ``index``."""
    return Term(INDEX_SUM, (x,), index)


def call(name: str, *xs: TermLike) -> Term:
    """The user function ``name`` applied to ``xs`` (see :mod:`factorflow.rewrite.user`)."""
    return Term(CALL, tuple(map(as_term, xs)), name)


def calc(fn: str, *xs: Term) -> Term:
    """Pattern-only: the constant ``fn(*xs)`` computed from matched constants."""
    return Term(CALC, tuple(xs), fn)


def interned_count() -> int:
    """Number of live interned terms (for tests and benchmarks)."""
    return len(_CACHE)
