"""Rules as data, and the term-level rewriting engine (matching, instantiation, normal forms).

A :class:`Rule` is ``lhs -> rhs`` between pattern terms, with an optional side condition
(``guard``) on the bindings. Pattern variables (:func:`~factorflow.rewrite.terms.var`)
match any term (kind ``any``), a symbol (``atom``), a numeric constant (``const``), or the
remaining arguments of a sum or product (``rest``); :class:`NameVar` payloads match index
names. Sums and products match modulo associativity-free commutativity: the fixed
argument patterns are matched against distinct arguments in every way, and a rest
variable takes the multiset of arguments left over (without one, none may be left).

The same rule data feeds two engines: :func:`normalize` here (deterministic innermost
rewriting to a normal form, used by the expectation algebra and message derivation, with
guards evaluated in Python) and the e-graph in :mod:`factorflow.rewrite.egraph`
(equality saturation; guards must be absent there).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from factorflow.errors import ModelError
from factorflow.lazy import special
from factorflow.rewrite.terms import CALC, COMMUTATIVE, CONST, SYM, VAR, NameVar, Term, const

Bindings = Mapping[str, Any]
_CALC: dict[str, Callable[..., float]] = {
    "add": lambda a, b: a + b, "mul": lambda a, b: a * b, "pow": lambda a, b: a**b,
    "log": math.log, "exp": math.exp,
    "lgamma": lambda x: special.gammaln(x),    # looked up at the call: SciPy loads lazily
    "digamma": lambda x: special.digamma(x),
}


@dataclass(frozen=True)
class Rule:
    """``lhs -> rhs`` (read left to right by :func:`normalize`, as an equation by e-graphs).

    ``guard``, when given, must hold of the bindings for the rule to apply; ``positive``
    names the variables the identity needs positive (documentation and numeric tests).
    """

    name: str
    lhs: Term
    rhs: Term
    guard: Callable[[Bindings], bool] | None = field(default=None, compare=False)
    positive: frozenset[str] = frozenset()

    def __str__(self) -> str:
        return f"{self.name}: {self.lhs} -> {self.rhs}"


def rule(name: str, lhs: Term, rhs: Term, *, when: Callable[[Bindings], bool] | None = None,
         positive: str = "") -> Rule:
    """A :class:`Rule`; ``positive`` lists variable names separated by spaces."""
    return Rule(name, lhs, rhs, when, frozenset(positive.split()))


@dataclass(frozen=True)
class Ruleset:
    """A named, ordered group of rules. ``a + b`` concatenates rulesets."""

    name: str
    rules: tuple[Rule, ...]

    def __add__(self, other: Ruleset) -> Ruleset:
        return Ruleset(f"{self.name}+{other.name}", self.rules + other.rules)

    def __iter__(self) -> Iterator[Rule]:
        return iter(self.rules)

    def __getitem__(self, name: str) -> Rule:
        for r in self.rules:
            if r.name == name:
                return r
        raise KeyError(name)


def match(pattern: Term, term: Term, bindings: Bindings | None = None) -> Iterator[dict[str, Any]]:
    """Every way ``pattern`` matches ``term`` extending ``bindings`` (each way once)."""
    yield from _match(pattern, term, dict(bindings or {}))


def _bind(b: dict[str, Any], name: str, value: Any) -> dict[str, Any] | None:
    if name in b:
        return b if b[name] == value else None
    return {**b, name: value}


def _match(p: Term, t: Term, b: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if p.op == VAR:
        name, kind = p.payload
        if kind == "rest":
            raise ValueError(f"rest variable ?{name} outside a sum or product pattern")
        ok = kind == "any" or t.op == {"atom": SYM, "const": CONST}[kind]
        nb = _bind(b, name, t) if ok else None
        if nb is not None:
            yield nb
        return
    if p.op != t.op:
        return
    if p.op in COMMUTATIVE:
        yield from _match_ac(p, t, b)
        return
    if isinstance(p.payload, NameVar):
        nb = _bind(b, p.payload.name, t.payload)
        if nb is None:
            return
        b = nb
    elif p.payload != t.payload:
        return
    yield from _match_seq(p.args, t.args, b)


def _match_seq(ps: tuple[Term, ...], ts: tuple[Term, ...], b: dict[str, Any]) -> Iterator[dict]:
    if not ps:
        yield b
        return
    for nb in _match(ps[0], ts[0], b):
        yield from _match_seq(ps[1:], ts[1:], nb)


def _match_ac(p: Term, t: Term, b: dict[str, Any]) -> Iterator[dict[str, Any]]:
    rests = [a for a in p.args if a.op == VAR and a.payload[1] == "rest"]
    fixed = sorted((a for a in p.args if a not in rests), key=lambda a: a.op == VAR)
    if len(rests) > 1:
        raise ValueError(f"a pattern may have one rest variable per sum or product: {p}")
    if len(fixed) > len(t.args) or (not rests and len(fixed) != len(t.args)):
        return
    for nb, left in _assign(fixed, list(t.args), b):
        if rests:
            out = _bind(nb, rests[0].payload[0], tuple(left))
            if out is not None:
                yield out
        elif not left:
            yield nb


def _assign(ps: list[Term], ts: list[Term], b: dict[str, Any]) -> Iterator[tuple[dict, list]]:
    if not ps:
        yield b, ts
        return
    tried: set[Term] = set()
    for j, tj in enumerate(ts):
        if tj in tried:
            continue
        tried.add(tj)
        for nb in _match(ps[0], tj, b):
            yield from _assign(ps[1:], ts[:j] + ts[j + 1:], nb)


def instantiate(pattern: Term, bindings: Bindings) -> Term:
    """The term ``pattern`` denotes under ``bindings`` (rest variables are spliced)."""
    if pattern.op == VAR:
        return bindings[pattern.payload[0]]
    if pattern.op == CALC:
        args = [instantiate(a, bindings) for a in pattern.args]
        return const(float(_CALC[pattern.payload](*(a.payload for a in args))))
    if not pattern.args:
        return pattern
    args: list[Term] = []
    for a in pattern.args:
        if a.op == VAR and a.payload[1] == "rest":
            args.extend(bindings[a.payload[0]])
        else:
            args.append(instantiate(a, bindings))
    payload = pattern.payload
    if isinstance(payload, NameVar):
        payload = bindings[payload.name]
    return Term(pattern.op, tuple(args), payload)


def apply_at_root(rule_: Rule, term: Term) -> Iterator[Term]:
    """Every result of applying ``rule_`` at the root of ``term``."""
    for b in match(rule_.lhs, term):
        if rule_.guard is None or rule_.guard(b):
            yield instantiate(rule_.rhs, b)


def normalize(term: Term, rules: Ruleset | tuple[Rule, ...], *, max_steps: int = 200_000) -> Term:
    """Innermost rewriting to a normal form: arguments first, then the first rule (in
    order) that applies at the root, repeated until none applies.

    Guarantees: the result is reachable from ``term`` by the rules read left to right and
    no rule applies anywhere in it. Raises ModelError after ``max_steps`` rewrites (a
    rule set that does not terminate), never hangs.
    """
    by_op: dict[str, list[Rule]] = {}
    for r in rules:
        by_op.setdefault(r.lhs.op, []).append(r)
    wild = by_op.pop(VAR, [])
    memo: dict[Term, Term] = {}
    steps = 0

    def go(t: Term) -> Term:
        nonlocal steps
        start = t
        if (hit := memo.get(t)) is not None:
            return hit
        while True:
            if t.args:
                t = Term(t.op, tuple(go(a) for a in t.args), t.payload)
            out = next((o for r in (*by_op.get(t.op, ()), *wild) for o in apply_at_root(r, t)),
                       None)
            if out is None:
                break
            steps += 1
            if steps > max_steps:
                raise ModelError(f"rewriting {term} did not reach a normal form in {max_steps} "
                                 "steps (the rules may not terminate)")
            t = out
        memo[start] = memo[t] = t
        return t

    try:
        return go(term)
    except RecursionError:
        raise ModelError(f"rewriting {term} did not reach a normal form (the rewrites nest too "
                         "deeply; the rules may not terminate)") from None


def is_number(t: Term, value: float | None = None) -> bool:
    """Whether ``t`` is a numeric constant (equal to ``value`` when given)."""
    return t.op == CONST and (value is None or t.payload == value)
