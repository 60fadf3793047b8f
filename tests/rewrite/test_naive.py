"""The naive breadth-first baseline: whole-graph clones, replace-all-uses, budgets."""

from __future__ import annotations

from factorflow.rewrite.match import Ruleset, rule
from factorflow.rewrite.naive import naive_explore, subterms
from factorflow.rewrite.rules import SEED
from factorflow.rewrite.terms import SUM, Term, exp, log, sym, var

x, y = sym("x"), sym("y")


def test_subterms_are_the_graph_nodes_children_first():
    t = log(exp(x + x)) + x
    nodes = subterms(t)
    assert len(nodes) == len(set(nodes)) == 5          # x, x + x, exp, log, root
    assert all(nodes.index(a) < nodes.index(n) for n in nodes for a in n.args)


def test_every_applied_rewrite_clones_the_whole_graph():
    t = log(exp(x + x)) + x + x
    result = naive_explore(t, SEED)
    assert result.complete and result.terms[0] is t
    smallest_graph = min(len(subterms(g)) for g in result.terms)
    assert result.allocations >= result.applications * smallest_graph
    assert result.applications > len(result.terms)     # many rewrites rediscover graphs


def test_a_replaced_node_is_replaced_in_all_its_uses():
    shared = log(exp(y))
    t = Term(SUM, (shared, shared, x))                  # one node used twice
    found = {str(g) for g in naive_explore(t, Ruleset("le", (SEED["log_exp"],))).terms}
    assert found == {"x + log(exp(y)) + log(exp(y))", "x + y + y"}


def test_budgets_stop_the_search_and_mark_it_incomplete():
    a = var("a")
    grow = Ruleset("grow", (rule("wrap", log(a), log(log(a))),))
    by_graphs = naive_explore(log(x), grow, max_graphs=5)
    assert not by_graphs.complete and len(by_graphs.terms) == 5
    by_allocations = naive_explore(log(x), grow, max_allocations=50)
    assert not by_allocations.complete and by_allocations.allocations >= 50
    by_time = naive_explore(log(x), grow, timeout=0.0)
    assert not by_time.complete
