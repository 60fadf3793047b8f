"""Equality saturation: the seed's example, the stream, extraction, AC, limits, conversion."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from factorflow.rewrite.egglog_terms import (
    RuleCompileError,
    associative_op,
    compile_rule,
    from_egglog,
    to_egglog,
)
from factorflow.rewrite.egraph import Limits, explore, term_cost
from factorflow.rewrite.evaluate import evaluate
from factorflow.rewrite.match import Ruleset, normalize, rule
from factorflow.rewrite.naive import naive_explore
from factorflow.rewrite.rules import ALGEBRA, ALGEBRA_EQUATIONS, SEED, S
from factorflow.rewrite.terms import (
    PROD,
    SUM,
    C,
    E,
    Elog,
    Term,
    V,
    add,
    at,
    calc,
    const,
    data,
    digamma,
    dot,
    exp,
    index_sum,
    lgamma,
    log,
    logdet,
    matmul,
    sym,
    var,
)
from tests.conftest import assert_close
from tests.rewrite.instances import firing_instance

x = sym("x")
SEED_TERM = log(exp(x + x)) + x + x

#: Every term equal to log(exp(x + x)) + x + x under SEED with at most 9 nodes.
SEED_STREAM_UP_TO_9 = [
    "2*(2*x)", "2*(x + x)", "x + x + x + x",                                       # 5 nodes
    "x + x + (x + x)", "x + x + 2*x",                                              # 6
    "2*log(exp(x + x))", "2*log(exp(2*x))", "2*x + (x + x)", "2*x + 2*x",
    "(x + x) + (x + x)",                                                           # 7
    "x + x + log(exp(2*x))", "x + x + log(exp(x + x))",                            # 8
    "2*log(exp(log(exp(2*x))))", "2*log(exp(log(exp(x + x))))",
    "log(exp(x + x)) + 2*x", "log(exp(2*x)) + 2*x", "log(exp(2*x)) + (x + x)",
    "log(exp(x + x)) + (x + x)",                                                   # 9
]

#: The graphs the rules reach from it read left to right (seed 003's anticipated graphs).
SEED_REACHABLE = {
    "x + x + log(exp(x + x))", "x + x + (x + x)", "x + x + log(exp(2*x))",
    "log(exp(x + x)) + 2*x", "x + x + x + x", "x + x + 2*x", "log(exp(2*x)) + 2*x",
    "2*x + (x + x)", "2*x + 2*x", "2*(2*x)",
}


def canonical(terms) -> list[Term]:
    """``terms`` by size, then in canonical order (the stream's order within a size is the
    e-graph's)."""
    return sorted(terms, key=lambda t: (t.size, t.order_key))


def test_seed_example_streams_exactly_the_expected_graphs_smallest_first():
    ex = explore(SEED_TERM, SEED)
    assert ex.complete and ex.stop_reason == "saturated"
    streamed = list(ex.stream(max_term_size=9))
    assert [t.size for t in streamed] == sorted(t.size for t in streamed)
    assert [str(t) for t in canonical(streamed)] == SEED_STREAM_UP_TO_9


def test_seed_example_contains_every_graph_the_naive_search_reaches():
    naive = naive_explore(SEED_TERM, SEED)
    assert naive.complete
    assert {str(t) for t in naive.terms} == SEED_REACHABLE
    assert set(naive.terms) <= set(explore(SEED_TERM, SEED).stream(max_term_size=9))
    assert normalize(SEED_TERM, SEED) in naive.terms


def test_stream_terms_are_distinct_sorted_and_equal_in_value():
    ex = explore(SEED_TERM, SEED)
    terms = list(ex.stream(max_term_size=13))
    assert len(terms) == len(set(terms))
    assert [t.size for t in terms] == sorted(t.size for t in terms)
    xs = np.random.default_rng(1).normal(size=20)
    for t in terms:
        assert_close(evaluate(t, {"x": xs}), 4 * xs)
    assert list(ex.stream(max_terms=4)) == terms[:4]


def test_best_is_the_cheapest_term_of_the_class():
    ex = explore(SEED_TERM, SEED)
    best = ex.best()
    assert best.size == 5
    heavy_products = {"prod": 10.0}

    def cost(op, payload):
        return heavy_products.get(op, 1.0)

    cheapest = ex.best(cost)
    assert str(cheapest) == "x + x + x + x"
    bound = int(term_cost(cheapest, cost))
    assert term_cost(cheapest, cost) == min(term_cost(t, cost)
                                            for t in ex.stream(max_term_size=bound))


def test_multiset_sums_do_not_explode():
    n = 12
    flat = explore(add(*(sym(f"x{i}") for i in range(n))), SEED)
    assert flat.complete and flat.nodes == n + 1
    copies = explore(add(*[x] * 16), SEED)
    assert copies.complete and copies.nodes < 60


def test_binary_associativity_would_explode_where_flattening_does_not():
    a, b, c = var("a"), var("b"), var("c")
    binary = Ruleset("binary_assoc", (rule("assoc", S(S(a, b), c), S(a, S(b, c))),))
    n = 8
    nested = sym("x0")
    for i in range(1, n):
        nested = Term(SUM, (nested, sym(f"x{i}")))
    bracketings = explore(nested, binary)
    flattened = explore(nested, SEED)
    assert bracketings.complete and flattened.complete
    assert bracketings.nodes > 2 ** (n - 1)       # every sub-multiset gets an e-class
    assert flattened.nodes <= n * n               # one flat e-node per nesting level and prefix


def balanced(blocks: int) -> Term:
    """A balanced binary sum of ``log(exp(x_i + x_i)) + (x_i + x_i)`` blocks (nothing flat)."""
    parts = []
    for i in range(blocks):
        pair = Term(SUM, (sym(f"x{i}"), sym(f"x{i}")))
        parts.append(Term(SUM, (log(exp(pair)), pair)))
    while len(parts) > 1:
        parts = [Term(SUM, tuple(parts[j:j + 2])) for j in range(0, len(parts), 2)]
    return parts[0]


def test_associativity_is_lazy_so_balanced_trees_of_rewritable_sums_stay_linear():
    t = balanced(128)                                   # 1,535 nodes, 2^128+ distinct graphs
    ex = explore(t, SEED)
    assert ex.complete and ex.stop_reason == "saturated"
    assert ex.nodes <= 1.25 * t.size                    # one e-node per node, plus 2*x_i
    eager = explore(balanced(8), SEED, Limits(max_nodes=3_000, timeout=5.0),
                    lazy_associativity=False)
    assert not eager.complete                           # flat forms multiply when eager
    assert ex.best().size == 4 * 128 + 1                # x_i four times each, one flat sum
    assert str(explore(balanced(2), SEED).best()) == "x0 + x0 + x0 + x0 + x1 + x1 + x1 + x1"


def test_flattened_forms_are_streamed_and_cross_nesting_matches_fire():
    x_, y_, z_ = sym("x"), sym("y"), sym("z")
    t = Term(SUM, (Term(SUM, (x_, y_)), Term(SUM, (x_, z_))))   # (x + y) + (x + z)
    terms = {str(u) for u in explore(t, SEED).stream()}
    assert terms == {"x + y + (x + z)", "x + z + (x + y)", "x + x + y + z",
                     "y + z + 2*x", "(x + z) + (x + y)"}


def test_associativity_rules_are_recognised_by_shape():
    assert associative_op(SEED["sum_assoc"]) == SUM
    assert associative_op(ALGEBRA_EQUATIONS["prod_assoc"]) == PROD
    assert associative_op(SEED["double"]) is None
    assert associative_op(rule("odd", S(S(var("s", "rest")), var("r", "rest")),
                               S(var("s", "rest")))) is None


def _random_term(draw, depth: int) -> Term:
    leaves = st.sampled_from([sym("x"), sym("y"), const(0), const(2)])
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(leaves)
    kind = draw(st.sampled_from(["sum", "prod", "sum3", "logexp", "log"]))
    if kind == "sum3":
        return Term(SUM, tuple(_random_term(draw, depth - 1) for _ in range(3)))
    if kind in ("sum", "prod"):
        return Term(SUM if kind == "sum" else PROD,
                    (_random_term(draw, depth - 1), _random_term(draw, depth - 1)))
    inner = _random_term(draw, depth - 1)
    return log(exp(inner)) if kind == "logexp" else log(inner)


MIXED = Ruleset("mixed", tuple(ALGEBRA_EQUATIONS[n] for n in (
    "sum_assoc", "prod_assoc", "sum_consts", "prod_consts", "sum_zero", "prod_one", "prod_zero",
    "double", "square", "log_exp", "collect_one", "log_prod", "pow_mul")))


@st.composite
def random_terms(draw) -> Term:
    """Nested binary and ternary sums and products of x, y, 0, 2 under log and log(exp)."""
    return _random_term(draw, 4)


_ZERO = const(0)
#: two nestings of one sum, x + (0 + y) and 0 + x + y: equal classes only once flattened
_TWO_NESTINGS = Term(SUM, (Term(SUM, (x, Term(SUM, (_ZERO, sym("y"))))),
                           Term(SUM, (_ZERO, x, sym("y")))))


@settings(max_examples=25, deadline=None, derandomize=True)
@given(random_terms(), st.sampled_from([SEED, MIXED]))
@example(_TWO_NESTINGS, SEED)
def test_lazy_associativity_streams_exactly_what_eager_flattening_does(t, rules):
    eager = explore(t, rules, Limits(max_nodes=3_000, timeout=3.0), lazy_associativity=False)
    if not eager.complete:       # eager flattening may explode; nothing to compare then
        return
    lazy = explore(t, rules, Limits(max_nodes=3_000, timeout=30.0))
    assert lazy.complete and lazy.nodes <= eager.nodes
    bound = t.size + 1
    assert (set(lazy.stream(max_term_size=bound, max_terms=50_000))
            == set(eager.stream(max_term_size=bound, max_terms=50_000)))
    assert lazy.best().size == eager.best().size


def test_rules_that_never_terminate_give_an_incomplete_exploration():
    a = var("a")
    grow = Ruleset("grow", (rule("pad", log(a), log(Term(SUM, (a, const(0))))),))
    by_iterations = explore(log(x), grow, Limits(max_iterations=6))
    assert not by_iterations.complete and by_iterations.stop_reason == "iterations"
    by_nodes = explore(log(x), grow, Limits(max_nodes=8))
    assert not by_nodes.complete and by_nodes.stop_reason == "nodes"
    by_time = explore(log(x), grow, Limits(timeout=0.0))
    assert not by_time.complete and by_time.stop_reason == "time"
    first = [str(t) for t in by_iterations.stream(max_terms=3)]
    assert first == ["log(x)", "log(0 + x)", "log(0 + (0 + x))"]


def test_exploding_rules_stop_at_a_bounded_egraph():
    # a node limit, not a clock: the same e-graph on a loaded machine as on a quiet one
    ex = explore(x * (x + 1), ALGEBRA_EQUATIONS, Limits(max_nodes=300, timeout=600.0))
    assert not ex.complete and ex.stop_reason == "nodes"
    assert ex.nodes <= 300
    assert normalize(x * (x + 1), ALGEBRA) in set(ex.stream(max_term_size=5))


@pytest.mark.parametrize("r", [*SEED, *ALGEBRA_EQUATIONS], ids=lambda r: r.name)
def test_each_equation_holds_in_the_egraph(r):
    lhs, results = firing_instance(r, {n: [sym(f"{n}_")] for n in "ab"})
    ex = explore(lhs, Ruleset(r.name, (r,)), Limits(max_iterations=3))
    for rhs in results:
        assert rhs in set(ex.stream(max_term_size=max(rhs.size, lhs.size)))


def test_algebra_equations_and_normal_form_agree_on_a_polynomial():
    mu, tau = sym("mu"), sym("tau")
    t = tau * (x - mu) * (x + mu)
    # reached at the 8th iteration; an iteration count, not a clock, so load cannot stop it early
    ex = explore(t, ALGEBRA_EQUATIONS, Limits(max_iterations=10, timeout=600.0))
    normal = normalize(t, ALGEBRA)
    assert str(normal) == "tau*x**2 - tau*mu**2"
    assert normal in set(ex.stream(max_term_size=normal.size))


def test_guards_and_unsupported_computations_do_not_compile():
    with pytest.raises(RuleCompileError, match="Python guard"):
        compile_rule(ALGEBRA["pow_consts"])
    with pytest.raises(RuleCompileError, match="cannot compute"):
        compile_rule(rule("log_const", log(var("c", "const")), calc("log", var("c", "const"))))
    with pytest.raises(RuleCompileError, match="needs an operator"):
        compile_rule(rule("wrap", var("a"), exp(log(var("a")))))


def test_conversion_to_egglog_and_back_is_identity():
    t = add(const(-1.5), sym("x", "i"), data("n"), E(x) * V(x) + C(x), Elog(sym("p")) ** 2,
            lgamma(x) - digamma(x), logdet(sym("L")), dot(sym("u"), sym("w")),
            matmul(sym("B"), sym("z")), index_sum(at(sym("z"), "k"), "k"), -x)
    assert from_egglog(to_egglog(t)) is t
    with pytest.raises(ValueError, match="cannot be loaded"):
        to_egglog(var("a") + x)
