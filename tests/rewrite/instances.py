"""Instances of a rule's left side on which the rule fires (shared by rule and e-graph tests)."""

from __future__ import annotations

import itertools

from factorflow.rewrite.match import Rule, apply_at_root, instantiate
from factorflow.rewrite.terms import VAR, NameVar, Term, at, const, sym

INDEXED = {"isum_sum": {"a": at(sym("a_"), "k"), "r": (at(sym("r1"), "k"), sym("r2"))},
           "isum_absorb": {"a": at(sym("a_"), "k")},
           "e_isum": {"a": at(sym("a_"), "k")},
           "e_outer": {"l": "l"}}  # two distinct index names


def _variables(t: Term, found: dict[str, str]) -> dict[str, str]:
    if t.op == VAR:
        found.setdefault(t.payload[0], t.payload[1])
    if isinstance(t.payload, NameVar):
        found.setdefault(t.payload.name, "name")
    for a in t.args:
        _variables(a, found)
    return found


def _skeleton(r: Rule) -> dict[str, object]:
    """Bindings for the variables that have one natural choice (constants, rests, names)."""
    out: dict[str, object] = {}
    consts = iter((2.0, 3.0))
    for name, kind in _variables(r.lhs, {}).items():
        if kind == "const":
            out[name] = const(next(consts))
        elif kind == "rest":
            out[name] = (sym(f"{name}1"), sym(f"{name}2"))
        elif kind == "name":
            out[name] = "k"
        elif kind == "atom":
            out[name] = sym(f"{name}_")
    out.update(INDEXED.get(r.name, {}))
    return out


def firing_instance(r: Rule, candidates: dict[str, list[Term]]) -> tuple[Term, list[Term]]:
    """An instance of ``r.lhs`` (trying ``candidates`` for its free variables) and the
    results of applying ``r`` at its root; fails the test when ``r`` never fires."""
    base = _skeleton(r)
    free = [n for n, kind in _variables(r.lhs, {}).items() if kind == "any" and n not in base]
    for choice in itertools.product(*(candidates[n] for n in free)):
        lhs = instantiate(r.lhs, {**base, **dict(zip(free, choice, strict=True))})
        results = list(apply_at_root(r, lhs))
        if results:
            return lhs, results
    raise AssertionError(f"rule {r} never fires on an instance of its left side")


