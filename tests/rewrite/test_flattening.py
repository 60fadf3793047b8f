"""Complete associativity: nestings of one sum at any depth are one class, e-graphs stay linear."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from factorflow.rewrite.egraph import Limits, explore
from factorflow.rewrite.flattening import shared_flattenings
from factorflow.rewrite.rules import SEED
from factorflow.rewrite.terms import SUM, Term, add, log, sym
from factorflow.rewrite.termstream import ENode

a, b, c, d = map(sym, "abcd")


def nest_right(xs: list[Term]) -> Term:
    """x1 + (x2 + (... + xn))."""
    t = xs[-1]
    for x in reversed(xs[:-1]):
        t = Term(SUM, (x, t))
    return t


def test_nestings_two_levels_apart_are_one_class():
    deep = nest_right([a, b, c, d])                             # a + (b + (c + d))
    t = Term(SUM, (deep, Term(SUM, (a, b, c, d))))
    lazy = set(explore(t, SEED).stream(max_term_size=t.size))
    eager = set(explore(t, SEED, lazy_associativity=False).stream(max_term_size=t.size))
    assert lazy == eager
    assert "2*(a + b + c + d)" in {str(u) for u in lazy}


def test_two_nestings_with_no_flat_form_in_the_egraph_are_one_class():
    left, right = Term(SUM, (Term(SUM, (a, b)), c)), Term(SUM, (a, Term(SUM, (b, c))))
    ex = explore(Term(SUM, (log(left), log(right))), SEED)
    assert str(ex.best()) == "2*log(a + b + c)"


@st.composite
def bracketings(draw) -> tuple[Term, Term]:
    """Two random binary bracketings of one random list of 2 to 6 symbols."""
    leaves = draw(st.lists(st.sampled_from([a, b, c, d]), min_size=2, max_size=6))

    def bracket(xs: list[Term]) -> Term:
        if len(xs) == 1:
            return xs[0]
        k = draw(st.integers(1, len(xs) - 1))
        return Term(SUM, (bracket(xs[:k]), bracket(xs[k:])))

    return bracket(list(leaves)), bracket(list(reversed(leaves)))


@settings(max_examples=15, deadline=None, derandomize=True)
@given(bracketings())
def test_any_two_bracketings_are_one_class_as_eager_flattening_finds(pair):
    t = Term(SUM, (log(pair[0]), log(pair[1])))
    lazy = explore(t, SEED, Limits(timeout=20.0))
    eager = explore(t, SEED, Limits(max_nodes=5_000, timeout=20.0), lazy_associativity=False)
    assert lazy.complete and eager.complete
    bound = t.size + 1
    streamed = set(lazy.stream(max_term_size=bound))
    assert streamed == set(eager.stream(max_term_size=bound))
    assert any(str(u).startswith("2*log(") for u in streamed)


def chain_beside_flat(n: int) -> Term:
    xs = [sym(f"a{i}") for i in range(n)]
    return Term(SUM, (log(nest_right(xs)), log(add(*xs))))


def test_egraph_stays_linear_on_chains_where_eager_flattening_is_quadratic():
    for n in (10, 50, 100, 200):
        ex = explore(chain_beside_flat(n), SEED)
        assert ex.complete and ex.nodes == 2 * n + 5           # n symbols, n sums, 5 more
        assert str(ex.best()).startswith("2*log(a0 + a1 + ")
        assert ex.best().size == n + 4
    eager = [explore(chain_beside_flat(n), SEED, lazy_associativity=False).nodes
             for n in (10, 20, 40)]
    assert eager[2] > 3 * eager[1] > 9 * eager[0] / 1.5          # about n²/2 flattenings


def test_shared_flattenings_follow_members_recursively_and_stop_at_cycles():
    # class 0 = a, 1 = b, 2 = c; 3 = sum(1, 2); 4 = sum(0, 3); 5 = sum(0, 1, 2)
    classes = {0: (ENode("sym", ("a", ()), ()),), 1: (ENode("sym", ("b", ()), ()),),
               2: (ENode("sym", ("c", ()), ()),), 3: (ENode("sum", None, (1, 2)),),
               4: (ENode("sum", None, (0, 3)),), 5: (ENode("sum", None, (0, 1, 2)),)}
    assert shared_flattenings(classes, frozenset({"sum"})) == [(4, 5)]
    # 6 = {sym x, sum(7, 6)} with 7 = 0: a cycle through sums; 8 = sum(7, 7, 6)
    cyclic = {**classes, 6: (ENode("sym", ("x", ()), ()), ENode("sum", None, (7, 6))),
              7: (ENode("const", 0.0, ()),), 8: (ENode("sum", None, (7, 7, 6)),)}
    assert shared_flattenings(cyclic, frozenset({"sum"})) == [(4, 5)]
    assert shared_flattenings(classes, frozenset({"prod"})) == []
