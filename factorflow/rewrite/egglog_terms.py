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


class _Compiler:
    def __init__(self, name: str) -> None:
        self.name, self.facts, self.n = name, [], 0
        self.terms: dict[str, Any] = {}
        self.values: dict[str, Any] = {}
        self.rests: dict[str, Any] = {}

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
        current = xs
        for a in (a for a in t.args if a not in rest):
            element = self.lhs(a)
            if not get_var_name(element) is not None:
                bound = self.fresh(Tm)
                self.facts.append(eq(bound).to(element))
                element = bound
            left = self.fresh(MultiSet[Tm])
            self.facts += [eq(self.fresh(i64)).to(tm_member(xs, element)),
                           current.contains(element), eq(left).to(current.remove(element))]
            current = left
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
