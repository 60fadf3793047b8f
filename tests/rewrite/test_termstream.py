"""The lazy term stream: every term of a class once, by nondecreasing size, built on demand."""

from __future__ import annotations

from collections import defaultdict
from itertools import islice

from hypothesis import given, settings
from hypothesis import strategies as st

from factorflow.rewrite.egraph import Limits, explore
from factorflow.rewrite.match import Ruleset
from factorflow.rewrite.naive import naive_explore
from factorflow.rewrite.rules import SEED
from factorflow.rewrite.terms import SUM, Term, add, exp, interned_count, log, sym
from factorflow.rewrite.termstream import Language, compositions, read_egraph
from tests.rewrite.test_egraph import MIXED, random_terms


def reference_terms(language: Language, root, max_size: int) -> set[Term]:
    """Every term of ``root``'s class with at most ``max_size`` nodes, by dynamic
    programming over sizes: all terms of size n of every class, from all terms of the
    smaller sizes (what the stream yields, built eagerly and independently of it)."""
    by_size: dict[tuple, set[Term]] = defaultdict(set)      # (class, n) -> terms

    def pieces(c, op: str, n: int) -> list[tuple[Term, ...]]:
        out = [(t,) for t in by_size[c, n]]
        if op in language.associative:
            out += [t.args for t in by_size[c, n + 1] if t.op == op]
        return out

    memo: dict[tuple, list[tuple[Term, ...]]] = {}   # sizes below the one being built

    def arguments(op: str, children: tuple, total: int) -> list[tuple[Term, ...]]:
        if not children:
            return [()] if total == 0 else []
        key = (op, children, total)
        if key not in memo:
            memo[key] = [head + tail for k in range(1, total + 1)
                         for tail in arguments(op, children[1:], total - k)
                         for head in pieces(children[0], op, k)]
        return memo[key]

    for n in range(1, max_size + 1):
        for c, nodes in language.classes.items():
            for node in nodes:
                for args in arguments(node.op, node.children, n - 1):
                    by_size[c, n].add(Term(node.op, args, node.payload))
    return set().union(*(by_size[root, n] for n in range(1, max_size + 1)))


def check_stream(ex, bound: int) -> list[Term]:
    """The stream up to ``bound`` nodes: each term once, nondecreasing sizes, and exactly
    the reference enumeration's terms."""
    streamed = list(ex.stream(max_term_size=bound, max_terms=20_000))
    assert len(streamed) == len(set(streamed))
    assert [t.size for t in streamed] == sorted(t.size for t in streamed)
    classes, root = read_egraph(ex.egraph)
    assert set(streamed) == reference_terms(Language(classes, ex.associative), root, bound)
    return streamed


@settings(max_examples=12, deadline=None, derandomize=True)
@given(random_terms(), st.sampled_from([SEED, MIXED]))
def test_stream_is_the_reference_enumeration_each_term_once_smallest_first(t, rules):
    ex = explore(t, rules, Limits(max_nodes=300, timeout=5.0))
    bound = min(t.size + 1, 8)
    streamed = check_stream(ex, bound)
    if rules is SEED and ex.complete:
        naive = naive_explore(t, rules, max_graphs=500, timeout=2.0)
        small = {g for g in naive.terms if g.size <= bound}
        assert small <= set(streamed)      # the graphs the rules reach left to right


def test_seed_stream_matches_the_reference_through_its_cycle_in_a_fixed_order():
    x = sym("x")
    ex = explore(log(exp(x + x)) + x + x, SEED)
    first = check_stream(ex, 13)
    ex._cache.clear()                       # a fresh read of the same e-graph
    assert list(ex.stream(max_term_size=13)) == first


def test_first_terms_are_built_on_demand_not_a_whole_size_at_a_time():
    """200 blocks log(exp(x_i)): the class has 20,100 terms two nodes above its smallest
    (two blocks expanded, or one twice); the first 1,000 terms build about that many."""
    blocks = [log(exp(sym(f"x{i}"))) for i in range(200)]
    ex = explore(Term(SUM, tuple(blocks)), Ruleset("le", (SEED["log_exp"],)))
    assert ex.complete
    before = interned_count()
    first = list(islice(ex.stream(), 1_000))
    built = interned_count() - before
    assert [t.size for t in first[:202]] == [201] + [203] * 200 + [205]
    assert len(set(first)) == 1_000 and built < 2_000      # eager: 20,100 at size 205
    assert str(first[0]) == str(add(*(sym(f"x{i}") for i in range(200))))


def test_compositions_are_every_bounded_split_in_order():
    got = list(compositions([1, 0, 2], [3, 1, float("inf")], 5, lambda i, k: True))
    want = [(a, b, c) for a in range(1, 4) for b in range(0, 2) for c in range(2, 6)
            if a + b + c == 5]
    assert got == want
    odd = list(compositions([1, 1], [9, 9], 6, lambda i, k: k % 2 == 1))
    assert odd == [(1, 5), (3, 3), (5, 1)]
    assert list(compositions([], [], 0, lambda i, k: True)) == [()]
    assert list(compositions([2], [3], 1, lambda i, k: True)) == []
