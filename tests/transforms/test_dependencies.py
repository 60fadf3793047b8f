"""Dependency graphs: normalization, adjacency by kind, closures, forbidden cycles."""

from __future__ import annotations

import pytest

from factorflow.errors import ScheduleError
from factorflow.transforms.dependencies import (
    Dep,
    DependencyGraph,
    check,
    fresh_closure,
    needed,
    sources,
    targets,
    topological_order,
    trigger_closure,
)

D, R, T, F = Dep.DEPENDENCY, Dep.REQUIRED, Dep.TRIGGER, Dep.FRESH
DECL, INIT = Dep.DECLARATION, Dep.INITIALIZER


def graph(nodes: str, edges: dict[str, Dep], outputs: str = "") -> DependencyGraph:
    return DependencyGraph(tuple(nodes.split()),
                           {tuple(pair.split()): kind for pair, kind in edges.items()},
                           frozenset(outputs.split()))


def test_required_trigger_fresh_imply_dependency() -> None:
    g = graph("a b c d e", {"a b": R, "b c": T, "c d": F, "d e": DECL})
    assert g.edges["a", "b"] == R | D and g.edges["b", "c"] == T | D
    assert g.edges["c", "d"] == F | D and g.edges["d", "e"] == DECL


@pytest.mark.parametrize("edges, message", [
    ({"a z": D}, "names a statement not in the graph"),
    ({"a b": Dep(0)}, "carries no dependency kind"),
], ids=["unknown-node", "empty-kind"])
def test_malformed_graphs_are_rejected(edges: dict[str, Dep], message: str) -> None:
    with pytest.raises(ScheduleError, match=message):
        graph("a b", edges)


def test_duplicate_labels_and_unknown_outputs_are_rejected() -> None:
    with pytest.raises(ScheduleError, match="duplicate"):
        DependencyGraph(("a", "a"), {})
    with pytest.raises(ScheduleError, match="outputs names unknown"):
        DependencyGraph(("a",), {}, frozenset({"b"}))


def test_sources_and_targets_by_kind_in_program_order() -> None:
    g = graph("a b c x", {"c x": T, "a x": D, "b x": R | F, "x a": DECL})
    assert sources(g, "x") == ("a", "b", "c")
    assert sources(g, "x", R) == ("b",)
    assert sources(g, "x", T | F) == ("b", "c")
    assert targets(g, "x", DECL) == ("a",) and targets(g, "x") == ()


def test_trigger_and_fresh_apply_transitively() -> None:
    g = graph("a b c d", {"a b": T | F, "b c": T, "c d": D, "b d": F})
    assert trigger_closure(g) == {"a": {"b", "c"}, "b": {"c"}, "c": set(), "d": set()}
    assert fresh_closure(g) == {"a": set(), "b": {"a"}, "c": set(), "d": {"a", "b"}}


def test_fresh_closure_lists_deepest_source_first() -> None:
    g = graph("a b c", {"a b": F, "b c": F})
    ix = g.index
    assert [ix.labels[i] for i in ix.needs_fresh[ix.pos["c"]]] == ["a", "b"]


@pytest.mark.parametrize("kind, word", [(R, "Required"), (T, "Trigger"), (F, "Fresh")],
                         ids=["required", "trigger", "fresh"])
def test_cycles_of_one_kind_are_errors_naming_statements(kind: Dep, word: str) -> None:
    g = graph("p a b c", {"a b": kind, "b c": kind, "c a": kind, "p a": D})
    with pytest.raises(ScheduleError, match=f"cycle of {word} edges: a -> b -> c -> a$"):
        check(g)


def test_self_loop_of_trigger_is_a_cycle() -> None:
    with pytest.raises(ScheduleError, match="cycle of Trigger edges: a -> a"):
        check(graph("a", {"a a": T}))


def test_every_forbidden_cycle_is_named() -> None:
    g = graph("a b c d", {"a b": R, "b a": R, "c d": F, "d c": F})
    with pytest.raises(ScheduleError) as info:
        check(g)
    assert "Required edges: a -> b -> a" in str(info.value)
    assert "Fresh edges: c -> d -> c" in str(info.value)


def test_mixed_kind_cycles_are_allowed() -> None:
    check(graph("a b c", {"a b": R, "b c": T, "c a": F}))
    check(graph("a b", {"a b": D, "b a": D}))


def test_closures_raise_on_forbidden_cycles() -> None:
    g = graph("a b", {"a b": T, "b a": T})
    with pytest.raises(ScheduleError, match="Trigger"):
        trigger_closure(g)


def test_needed_follows_every_edge_kind_back_from_outputs() -> None:
    g = graph("d a b c out lone", {"d a": DECL, "a b": R, "b out": D, "c out": INIT,
                                   "out lone": D}, outputs="out")
    assert needed(g) == {"d", "a", "b", "c", "out"}
    assert needed(graph("a", {})) == frozenset()


def test_topological_order_breaks_ties_by_number() -> None:
    assert topological_order([(2,), (2,), (), ()]) == [0, 1, 2, 3]
    assert topological_order([(1,), (0,)]) is None
