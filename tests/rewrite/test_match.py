"""Matching modulo commutativity, instantiation, and the normalizing engine."""

from __future__ import annotations

import pytest

from factorflow.errors import ModelError
from factorflow.rewrite.match import Ruleset, instantiate, match, normalize, rule
from factorflow.rewrite.terms import (
    PROD,
    SUM,
    NameVar,
    Term,
    at,
    const,
    exp,
    index_sum,
    log,
    sym,
    var,
)

x, y, z = sym("x"), sym("y"), sym("z")
a, b = var("a"), var("b")
atom, c = var("u", "atom"), var("c", "const")
r, s = var("r", "rest"), var("s", "rest")


def S(*args):  # noqa: N802
    return Term(SUM, args)


def P(*args):  # noqa: N802
    return Term(PROD, args)


def test_plain_and_nonlinear_patterns():
    assert list(match(log(exp(a)), log(exp(x + y)))) == [{"a": x + y}]
    assert list(match(S(a, a), S(x, x))) == [{"a": x}]
    assert list(match(S(a, a), S(x, y))) == []
    assert list(match(log(a), exp(x))) == []


def test_variable_kinds():
    assert list(match(log(atom), log(x))) == [{"u": x}]
    assert list(match(log(atom), log(x + 1))) == []
    assert list(match(P(c, a), P(const(3), x))) == [{"c": const(3), "a": x}]
    assert list(match(at(a, NameVar("k")), at(x, "j"))) == [{"a": x, "k": "j"}]
    assert list(match(index_sum(a, NameVar("k")), index_sum(x, "j"))) == [{"a": x, "k": "j"}]


def test_commutative_matches_each_way_once():
    found = list(match(S(a, r), S(x, y, z)))
    assert [(m["a"], m["r"]) for m in found] == [(x, (y, z)), (y, (x, z)), (z, (x, y))]
    assert len(list(match(S(a, r), S(x, x, y)))) == 2   # x twice is one choice
    assert list(match(S(a, a, r), S(x, y, x, z))) == [{"a": x, "r": (y, z)}]
    assert list(match(S(a, b), S(x, y, z))) == []      # no rest: all arguments matched
    nested = list(match(S(S(s), r), S(S(x, y), z)))
    assert nested == [{"s": (x, y), "r": (z,)}]


def test_instantiate_splices_rest_and_collapses_singletons():
    b1 = {"a": x, "r": (y,)}
    assert instantiate(S(P(const(2), a), r), b1) is S(P(const(2), x), y)
    assert instantiate(S(r), b1) is y
    assert instantiate(S(r), {"r": ()}) is const(0)
    assert instantiate(at(a, NameVar("k")), {"a": x, "k": "i"}) is at(x, "i")


def test_normalize_reaches_a_fixed_point_and_respects_guards():
    rules = Ruleset("t", (
        rule("log_exp", log(exp(a)), a),
        rule("double", S(a, a, r), S(P(const(2), a), r)),
        rule("assoc", S(S(s), r), S(s, r)),
        rule("guarded", exp(a), a, when=lambda bs: bs["a"] is z),
    ))
    t = log(exp(x + x)) + x + x
    assert normalize(t, rules) is P(const(2), P(const(2), x))
    assert normalize(exp(x), rules) is exp(x)
    assert normalize(exp(z), rules) is z


def test_nonterminating_rules_raise_instead_of_hanging():
    grow = Ruleset("grow", (rule("wrap", log(a), log(log(a))),))
    with pytest.raises(ModelError, match="did not reach a normal form"):
        normalize(log(x), grow, max_steps=50)
    with pytest.raises(ModelError, match="did not reach a normal form"):
        normalize(log(x), grow)


def test_rest_variable_outside_a_sum_is_an_error():
    with pytest.raises(ValueError, match="outside a sum"):
        list(match(log(r), log(x)))
