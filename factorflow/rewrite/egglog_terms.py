# mypy: disable-error-code="empty-body"
"""Terms in egglog: the sort ``Tm``, conversion both ways, and rules compiled to egglog.

Every term op is an egglog constructor ``tm_<op>``. Sums and products hold their
arguments in an egglog ``MultiSet[Tm]`` (a container that egglog keeps canonical as
e-classes merge), so commutativity costs nothing and matching is modulo AC without
enumerating permutations; see :mod:`factorflow.rewrite.egraph` for why.

A sum or product pattern compiles to a query that binds the container ``xs`` (of at
least two elements, as a Python sum has: one- and zero-element containers are
artifacts of right-hand sides and never match), binds
each fixed argument through the index table ``tm_member(xs, e)`` (filled by egglog's
``unstable-multiset-fill-index`` from the built-in ``CONTAINERS`` ruleset), removes it
with ``multiset-remove`` after checking ``multiset-contains``, and binds what is left
to the rest variable (or requires it empty). Right-hand sides rebuild containers with
``multiset-insert``/``multiset-sum``; a sum of one argument is unioned with that
argument and an empty one with 0 (products: 1), matching the Python constructor.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Any

from egglog import (
    Expr,
    MultiSet,
    RewriteOrRule,
    Ruleset,
    String,
    StringLike,
    eq,
    f64,
    f64Like,
    function,
    i64,
    relation,
    rewrite,
    rule,
    ruleset,
    union,
    var,
)
from egglog.deconstruct import get_callable_args, get_callable_fn, get_literal_value, get_var_name
from egglog.runtime import resolve_callable

from factorflow.rewrite.match import Rule
from factorflow.rewrite.terms import (
    CALC,
    COMMUTATIVE,
    CONST,
    DATA,
    INDEX,
    INDEX_SUM,
    PROD,
    SUM,
    SYM,
    VAR,
    NameVar,
    Term,
)


class Tm(Expr):
    """The egglog sort of factorflow terms."""


@function
def tm_const(value: f64Like) -> Tm: ...
@function
def tm_sym(name: StringLike, indices: StringLike) -> Tm: ...
@function
def tm_data(name: StringLike, indices: StringLike) -> Tm: ...
@function
def tm_sum(xs: MultiSet[Tm]) -> Tm: ...
@function
def tm_prod(xs: MultiSet[Tm]) -> Tm: ...
@function
def tm_pow(a: Tm, b: Tm) -> Tm: ...
@function
def tm_dot(a: Tm, b: Tm) -> Tm: ...
@function
def tm_matmul(a: Tm, b: Tm) -> Tm: ...
@function
def tm_transpose(a: Tm) -> Tm: ...
@function
def tm_index(a: Tm, name: StringLike) -> Tm: ...
@function
def tm_index_sum(a: Tm, name: StringLike) -> Tm: ...
@function
def tm_neg(a: Tm) -> Tm: ...
@function
def tm_log(a: Tm) -> Tm: ...
@function
def tm_exp(a: Tm) -> Tm: ...
@function
def tm_lgamma(a: Tm) -> Tm: ...
@function
def tm_digamma(a: Tm) -> Tm: ...
@function
def tm_logdet(a: Tm) -> Tm: ...
@function
def tm_E(a: Tm) -> Tm: ...  # noqa: N802
@function
def tm_V(a: Tm) -> Tm: ...  # noqa: N802
@function
def tm_C(a: Tm) -> Tm: ...  # noqa: N802
@function
def tm_Elog(a: Tm) -> Tm: ...  # noqa: N802
@function
def tm_Elog1m(a: Tm) -> Tm: ...  # noqa: N802
@function
def tm_Eloggamma(a: Tm) -> Tm: ...  # noqa: N802
@function
def tm_Elogdet(a: Tm) -> Tm: ...  # noqa: N802
@function(merge=lambda old, new: old.max(new))
def tm_member(xs: MultiSet[Tm], element: Tm) -> i64: ...


CONSTRUCTORS: dict[str, Any] = {
    name[3:]: fn for name, fn in globals().items() if name.startswith("tm_") and name != "tm_member"
}
OP_OF_NAME = {resolve_callable(fn)[0].ident.name: op for op, fn in CONSTRUCTORS.items()}


def _containers() -> Ruleset:
    s, xs = var("s", Tm), var("xs", MultiSet[Tm])
    rules: list[RewriteOrRule] = []
    for fn, unit in ((tm_sum, 0.0), (tm_prod, 1.0)):
        rules += [
            rule(eq(s).to(fn(xs))).then(xs.fill_index(tm_member)),
            rule(eq(s).to(fn(xs)), eq(xs.length()).to(i64(1))).then(union(s).with_(xs.pick())),
            rewrite(fn(MultiSet[Tm]())).to(tm_const(unit)),
        ]
    return ruleset(*rules, name="factorflow_containers")


#: Built-in rules every exploration runs first: member index, one- and zero-element containers.
CONTAINERS = _containers()

#: ``tm_nested_<op>(u, e, ys)``: the e-class ``u`` has the ``op`` e-node over the multiset
#: ``ys``, and ``e`` is an argument of the term obtained by flattening that e-node (an
#: element of ``ys``, or, recursively, of an ``op`` e-node of an element of ``ys``).
NESTED: dict[str, Any] = {
    SUM: relation("tm_nested_sum", Tm, Tm, MultiSet[Tm]),
    PROD: relation("tm_nested_prod", Tm, Tm, MultiSet[Tm]),
}


def _nesting(op: str) -> Ruleset:
    u, w, e = (var(n, Tm) for n in "uwe")
    ys, zs = var("ys", MultiSet[Tm]), var("zs", MultiSet[Tm])
    node, nested = CONSTRUCTORS[op], NESTED[op]
    return ruleset(
        rule(eq(u).to(node(ys)), ys.length() > i64(1), eq(var("i", i64)).to(tm_member(ys, e))
             ).then(nested(u, e, ys)),
        rule(eq(u).to(node(ys)), ys.length() > i64(1), eq(var("i", i64)).to(tm_member(ys, w)),
             nested(w, e, zs)).then(nested(u, e, ys)),
        name=f"factorflow_nesting_{op}")


#: Per associative op, the rules that fill its ``NESTED`` relation (run with ``CONTAINERS``).
NESTING = {op: _nesting(op) for op in NESTED}


def associative_op(r: Rule) -> str | None:
    """The op whose associativity ``r`` states as ``op(op(s...), r...) -> op(s..., r...)``
    (``sum_assoc``, ``prod_assoc``), or None for any other rule."""
    lhs, rhs = r.lhs, r.rhs
    if lhs.op not in NESTED or rhs.op != lhs.op or r.guard is not None:
        return None
    inner = [a for a in lhs.args if a.op == lhs.op]
    rests = [a for a in lhs.args if _is_rest(a)]
    if (len(lhs.args) != 2 or len(inner) != 1 or len(rests) != 1
            or len(inner[0].args) != 1 or not _is_rest(inner[0].args[0])):
        return None
    return lhs.op if sorted(rhs.args, key=str) == sorted((inner[0].args[0], rests[0]),
                                                         key=str) else None


def _is_rest(t: Term) -> bool:
    return t.op == VAR and t.payload[1] == "rest"


def to_egglog(term: Term) -> Tm:
    """The egglog expression of a (pattern-free) term; shared subterms are converted once."""
    memo: dict[Term, Tm] = {}
    stack = [term]
    while stack:
        t = stack[-1]
        todo = [a for a in t.args if a not in memo]
        if todo:
            stack.extend(todo)
            continue
        stack.pop()
        if t not in memo:
            memo[t] = _node(t, [memo[a] for a in t.args])
    return memo[term]


def _node(t: Term, args: list[Any]) -> Tm:
    if t.op == CONST:
        return tm_const(t.payload)
    if t.op in (SYM, DATA):
        return CONSTRUCTORS[t.op](t.payload[0], ",".join(t.payload[1]))
    if t.op in (VAR, CALC) or isinstance(t.payload, NameVar):
        raise ValueError(f"pattern {t} cannot be loaded into an e-graph")
    if t.op in COMMUTATIVE:
        return CONSTRUCTORS[t.op](MultiSet(*args))
    if t.op in (INDEX, INDEX_SUM):
        return CONSTRUCTORS[t.op](args[0], t.payload)
    return CONSTRUCTORS[t.op](*args)


def from_egglog(expr: Any) -> Term:
    """The term of an egglog ``Tm`` expression (as returned by extraction)."""
    fn = get_callable_fn(expr)
    op = OP_OF_NAME[resolve_callable(fn)[0].ident.name]
    args = get_callable_args(expr)
    if op == CONST:
        return Term(CONST, (), float(get_literal_value(args[0])) + 0.0)
    if op in (SYM, DATA):
        name, indices = (get_literal_value(a) for a in args)
        return Term(op, (), (name, tuple(indices.split(",")) if indices else ()))
    if op in COMMUTATIVE:
        return Term(op, tuple(from_egglog(a) for a in args[0].value))
    if op in (INDEX, INDEX_SUM):
        return Term(op, (from_egglog(args[0]),), get_literal_value(args[1]))
    return Term(op, tuple(from_egglog(a) for a in args))


class RuleCompileError(ValueError):
    """A rule cannot run in the e-graph (it has a Python guard or a computation egglog lacks)."""


def compile_rule(r: Rule) -> RewriteOrRule:
    """The egglog rule for ``r``: query the left side, union its root with the right side."""
    if r.guard is not None:
        raise RuleCompileError(f"rule {r.name} has a Python guard; use normalize() for it")
    if r.lhs.op == VAR:
        raise RuleCompileError(f"rule {r.name}: an e-graph rule's left side needs an operator")
    c = _Compiler(r.name)
    root = c.lhs(r.lhs)
    if not get_var_name(root) is not None:
        bound = c.fresh(Tm)
        c.facts.append(eq(bound).to(root))
        root = bound
    return rule(*c.facts, name=r.name).then(union(root).with_(c.rhs(r.rhs)))


@dataclass(frozen=True)
class _Bridge:
    """Match the sum/product pattern ``node`` with its fixed arguments ``nested`` taken from
    inside nested e-nodes of its op (and, unless ``alone``, the other ones directly)."""

    node: Term
    nested: tuple[int, ...]
    alone: bool


def compile_bridges(r: Rule, associative: frozenset[str]) -> list[RewriteOrRule]:
    """The egglog rules that flatten a nested sum (product) into its parent exactly where
    ``r`` matches across the nesting, for the associative ops ``associative``.

    With associativity applied lazily (see :mod:`factorflow.rewrite.egraph`), a pattern
    ``op(p1, ..., pk, rest...)`` must still match the flattened forms of a nested term.
    For each way some ``p_i`` can match an argument of a nested ``op`` e-node ``u``, the
    bridge unions the parent with the parent whose member ``u`` is flattened one level;
    repeated, the match becomes direct and ``r`` fires. No bridge is needed where the
    flattened match gives nothing that flattening at read-out does not: a pattern without
    a rest variable (a flattened form has more arguments than it matches), and a pattern
    at the root of ``r`` whose right side is ``op(..., rest...)`` when all its matched
    arguments lie inside one member (``r`` fires in that member already).
    """
    if r.guard is not None:
        raise RuleCompileError(f"rule {r.name} has a Python guard; use normalize() for it")
    out: list[RewriteOrRule] = []
    for node in _walk(r.lhs):
        fixed = [a for a in node.args if not _is_rest(a)]
        rests = [a for a in node.args if _is_rest(a)]
        if node.op not in associative or not fixed or not rests:
            continue
        at_root = node is r.lhs and r.rhs.op == node.op and rests[0] in r.rhs.args
        if at_root and len(fixed) == 1:
            continue
        choices = ([d for n in range(1, len(fixed) + 1) for d in combinations(range(len(fixed)), n)]
                   if at_root else [(i,) for i in range(len(fixed))])
        for nested in choices:
            name = f"{r.name}_bridge_{len(out)}"
            c = _Compiler(name, _Bridge(node, nested, alone=not at_root))
            root = c.lhs(r.lhs)
            if get_var_name(root) is None:
                c.facts.append(eq(c.fresh(Tm)).to(root))
            s, xs, u, ys = c.splice
            flat = CONSTRUCTORS[node.op](xs.remove(u) + ys)
            out.append(rule(*c.facts, name=name).then(union(s).with_(flat)))
    return out


def _walk(t: Term) -> list[Term]:
    out, stack = [], [t]
    while stack:
        x = stack.pop()
        out.append(x)
        stack.extend(x.args)
    return out


class _Compiler:
    def __init__(self, name: str, bridge: _Bridge | None = None) -> None:
        self.name, self.facts, self.n = name, [], 0
        self.terms: dict[str, Any] = {}
        self.values: dict[str, Any] = {}
        self.rests: dict[str, Any] = {}
        self.bridge = bridge
        self.splice: tuple[Any, ...] = ()

    def fresh(self, tp: Any) -> Any:
        self.n += 1
        return var(f"_{self.name}_{self.n}", tp)

    def pattern_var(self, t: Term) -> Any:
        name, kind = t.payload
        if name not in self.terms:
            v = self.terms[name] = var(name, Tm)
            if kind == "atom":
                self.facts.append(eq(v).to(tm_sym(self.fresh(String), self.fresh(String))))
            elif kind == "const":
                self.values[name] = self.fresh(f64)
                self.facts.append(eq(v).to(tm_const(self.values[name])))
            elif kind == "rest":
                raise RuleCompileError(f"rest variable ?{name} outside a sum or product")
        return self.terms[name]

    def payload(self, t: Term) -> Any:
        if isinstance(t.payload, NameVar):
            return self.terms.setdefault("$" + t.payload.name, var(t.payload.name, String))
        return t.payload

    def lhs(self, t: Term) -> Any:
        if t.op == VAR:
            return self.pattern_var(t)
        if t.op == CALC:
            raise RuleCompileError(f"computed constant {t} on the left of rule {self.name}")
        if t.op in COMMUTATIVE:
            return self.lhs_ac(t)
        if t.op in (CONST, SYM, DATA):
            return _node(t, [])
        if t.op in (INDEX, INDEX_SUM):
            return CONSTRUCTORS[t.op](self.lhs(t.args[0]), self.payload(t))
        return CONSTRUCTORS[t.op](*(self.lhs(a) for a in t.args))

    def lhs_ac(self, t: Term) -> Any:
        s, xs = self.fresh(Tm), self.fresh(MultiSet[Tm])
        self.facts += [eq(s).to(CONSTRUCTORS[t.op](xs)), xs.length() > i64(1)]
        rest = [a for a in t.args if a.op == VAR and a.payload[1] == "rest"]
        bridge = self.bridge if self.bridge is not None and self.bridge.node is t else None
        current = xs
        for i, a in enumerate(a for a in t.args if a not in rest):
            deep = bridge is not None and i in bridge.nested
            if bridge is not None and bridge.alone and not deep:
                continue
            element = self.lhs(a)
            if not get_var_name(element) is not None:
                bound = self.fresh(Tm)
                self.facts.append(eq(bound).to(element))
                element = bound
            member = self.fresh(Tm) if deep else element
            left = self.fresh(MultiSet[Tm])
            self.facts += [eq(self.fresh(i64)).to(tm_member(xs, member)),
                           current.contains(member), eq(left).to(current.remove(member))]
            if deep:
                ys = self.fresh(MultiSet[Tm])
                self.facts.append(NESTED[t.op](member, element, ys))
                self.splice = self.splice or (s, xs, member, ys)
            current = left
        if bridge is not None:   # the rest is whatever the flattened match leaves
            return s
        if not rest:
            self.facts.append(eq(current.length()).to(i64(0)))
        elif rest[0].payload[0] in self.rests:
            self.facts.append(eq(current).to(self.rests[rest[0].payload[0]]))
        else:
            self.rests[rest[0].payload[0]] = current
        return s

    def rhs(self, t: Term) -> Any:
        if t.op == VAR:
            return self.terms[t.payload[0]]
        if t.op == CALC:
            return tm_const(self.value(t))
        if t.op in COMMUTATIVE:
            fixed = [self.rhs(a) for a in t.args if not (a.op == VAR and a.payload[1] == "rest")]
            xs = MultiSet(*fixed) if fixed else MultiSet[Tm]()
            for a in t.args:
                if a.op == VAR and a.payload[1] == "rest":
                    xs = xs + self.rests[a.payload[0]]
            return CONSTRUCTORS[t.op](xs)
        if t.op in (CONST, SYM, DATA):
            return _node(t, [])
        if t.op in (INDEX, INDEX_SUM):
            return CONSTRUCTORS[t.op](self.rhs(t.args[0]), self.payload(t))
        return CONSTRUCTORS[t.op](*(self.rhs(a) for a in t.args))

    def value(self, t: Term) -> Any:
        if t.op == CONST:
            return f64(t.payload)
        if t.op == VAR and t.payload[0] in self.values:
            return self.values[t.payload[0]]
        if t.op == CALC and t.payload in ("add", "mul"):
            x, y = (self.value(a) for a in t.args)
            return x + y if t.payload == "add" else x * y
        raise RuleCompileError(f"egglog cannot compute {t} in rule {self.name}")
