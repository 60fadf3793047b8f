"""Dead code: liveness over a cyclic loop body, and user initializations overwritten."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from factorflow.transforms.deadcode import (
    eliminate,
    live_on_entry,
    live_positions,
    overwritten_initializations,
    unchanged_recomputations,
)
from factorflow.transforms.dependencies import Dep, DependencyGraph
from factorflow.transforms.scheduling import Schedule

D, T = Dep.DEPENDENCY, Dep.TRIGGER


def reads_of(table: dict[str, str]):
    return lambda x: table.get(x, "")


def test_seed_trailing_update_is_removed() -> None:
    # A invalidates B; the scheduler leaves B valid with a trailing update nobody reads
    g = DependencyGraph(("A", "B"), {("A", "B"): T, ("B", "A"): D})
    assert eliminate(g, ("B", "A", "B"), live_out=["A"]) == ("B", "A")


def test_trailing_update_needed_after_the_loop_is_kept() -> None:
    g = DependencyGraph(("A", "B"), {("A", "B"): T, ("B", "A"): D})
    assert eliminate(g, ("B", "A", "B"), live_out=["A", "B"]) == ("B", "A", "B")


def test_update_read_across_the_loop_boundary_is_kept() -> None:
    # the last b is read by a at the start of the next pass
    reads = reads_of({"a": "b", "b": "a"})
    assert live_positions("abab", reads, ()) == (0, 1, 2, 3)
    assert live_positions("bab", reads_of({"a": "b"}), ()) == (0, 1)


def test_updates_that_only_feed_dead_updates_are_dead() -> None:
    # the first c is read only by the first b, which nobody reads
    assert live_positions("cbcba", reads_of({"a": "b", "b": "c"}), "a") == (2, 3, 4)


def test_every_statement_keeps_one_update() -> None:
    assert live_positions("xyxy", reads_of({}), ()) == (2, 3)
    # forcing y's last update brings x's last to life; x is not forced as well
    assert live_positions("xyxy", reads_of({"y": "x"}), ()) == (2, 3)


def test_straight_line_liveness_keeps_what_the_body_reads_on_entry() -> None:
    entry = live_on_entry("ba", reads_of({"b": "a", "a": "c"}))
    assert entry == {"a", "c"}
    assert live_positions("abab", reads_of({"b": "a"}), {"a", "b"}, cyclic=False) == (2, 3)
    assert live_positions("abab", reads_of({"b": "a"}), entry, cyclic=False) == (2,)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from("abcd"), min_size=1, max_size=12),
       st.dictionaries(st.sampled_from("abcd"), st.text("abcd", max_size=3)),
       st.sets(st.sampled_from("abcd")))
def test_removed_updates_are_never_read(body: list[str], table: dict[str, str],
                                        live_out: set[str]) -> None:
    """Replay the body three times with and without dead code: every kept update reads
    the same values, and the values live at exit agree."""
    reads = reads_of(table)
    kept = live_positions(body, reads, live_out)

    def run(positions: tuple[int, ...]) -> tuple[list[tuple], dict[str, object]]:
        value: dict[str, object] = {x: ("init", x) for x in "abcd"}
        log = []
        for p in range(3):
            for i in positions:
                x = body[i]
                seen = tuple(value[r] for r in reads(x))
                log.append((p, i, seen))
                value[x] = hash((x, seen))
        return log, value

    full_log, full_value = run(tuple(range(len(body))))
    lean_log, lean_value = run(kept)
    full = {(p, i): seen for p, i, seen in full_log}
    assert all(full[p, i] == seen for p, i, seen in lean_log)
    assert all(lean_value[x] == full_value[x] for x in live_out)
    assert {body[i] for i in kept} == set(body)


def test_overwritten_user_initializations_are_found() -> None:
    g = DependencyGraph(("p", "x", "y", "lost"),
                        {("x", "y"): D, ("y", "x"): D, ("p", "x"): D},
                        user_initialized=frozenset({"p", "x", "y", "lost"}))
    s = Schedule(prefix=("p",), init=((),), loop=(("y", "x"),), suffix=((),))
    # y reads x's initial value first; y's own is overwritten before x reads it
    assert overwritten_initializations(g, s) == ("p", "y", "lost")


@pytest.mark.parametrize("self_read, expected", [(True, ()), (False, ("x",))],
                         ids=["reads-itself", "overwritten"])
def test_a_statement_reading_its_own_initial_value_uses_it(self_read: bool,
                                                           expected: tuple[str, ...]) -> None:
    edges = {("z", "x"): D, ("x", "z"): D} | ({("x", "x"): D} if self_read else {})
    g = DependencyGraph(("x", "z"), edges, user_initialized=frozenset({"x"}))
    s = Schedule(prefix=(), init=((),), loop=(("x", "z"),), suffix=((),))
    assert overwritten_initializations(g, s) == expected


# ----- recomputations of unchanged values -------------------------------------------
def _passes(body: str, before: str, table: dict[str, str], start: dict[str, int],
            passes: int) -> list[dict[str, int]]:
    """The value of every statement after each pass: ``before`` runs once, then ``body``
    ``passes`` times; each update is a pure function of its name and what it reads."""
    values = dict(start)

    def run(x: str) -> None:
        values[x] = hash((x, tuple(values[r] for r in sorted(table.get(x, ""))))) % 10**9

    for x in before:
        run(x)
    out = []
    for _ in range(passes):
        for x in body:
            run(x)
        out.append(dict(values))
    return out


def test_seed_like_recomputation_at_the_start_of_the_loop_moves_before_it() -> None:
    # m (a posterior) is updated at the end of each pass and again at the start of the
    # next from the same inputs; u reads m: both first updates are recomputations
    table = {"m": "b", "u": "m", "a": "u", "b": "a"}
    kept, moved = unchanged_recomputations("muabmu", reads_of(table), lambda x: True)
    assert "".join("muabmu"[i] for i in kept) == "abmu" and moved == [0, 1]
    # an impure update (a draw, a damped message) is never dropped
    # (and what reads it is then recomputed from a new value)
    assert unchanged_recomputations("muabmu", reads_of(table), lambda x: x != "m")[0] == [
        0, 1, 2, 3, 4, 5]
    # nor one that reads its own value
    assert unchanged_recomputations("muabmu", reads_of(table | {"m": "bm"}),
                                    lambda x: True)[0] == [0, 1, 2, 3, 4, 5]
    # read before its first update: the first pass would read another value; kept
    assert unchanged_recomputations("amuabmu", reads_of(table | {"a": "um"}),
                                    lambda x: True)[0][:1] == [0]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from("abcd"), min_size=1, max_size=9),
       st.dictionaries(st.sampled_from("abcd"), st.sets(st.sampled_from("abcd"), max_size=3)
                       .map(lambda s: "".join(sorted(s)))),
       st.sets(st.sampled_from("abcd")))
def test_dropping_recomputations_changes_no_value_after_any_pass(body, table, impure):
    """Every pass ends with every statement holding the value it held before the
    recomputations were dropped (the moved ones run once before the loop)."""
    body = "".join(body)
    kept, moved = unchanged_recomputations(body, reads_of(table), lambda x: x not in impure)
    assert set(moved) <= set(range(len(body))) - set(kept)
    start = {x: ord(x) for x in "abcd"}
    lean = "".join(body[i] for i in kept)
    assert set(lean) == set(body)  # every statement keeps an update
    assert _passes(lean, "".join(body[i] for i in moved), table, start, 4) == _passes(
        body, "", table, start, 4)
