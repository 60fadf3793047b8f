"""``strong_components`` (pure-Python Tarjan) against SciPy's, on random directed graphs:
the same partition of the nodes (labels may differ)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse import csr_array
from scipy.sparse.csgraph import connected_components

from factorflow.transforms.dependencies import strong_components


@st.composite
def graphs(draw):
    n = draw(st.integers(1, 30))
    edges = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)),
                          max_size=4 * n))
    succ = [[] for _ in range(n)]
    for a, b in edges:
        succ[a].append(b)
    return succ


def _partition(labels) -> set[frozenset[int]]:
    groups: dict[int, set[int]] = {}
    for node, label in enumerate(labels):
        groups.setdefault(int(label), set()).add(node)
    return {frozenset(g) for g in groups.values()}


@settings(max_examples=150, deadline=None)
@given(graphs())
def test_strong_components_partition_equals_scipys(succ):
    n = len(succ)
    rows = [a for a in range(n) for _ in succ[a]]
    cols = [b for a in range(n) for b in succ[a]]
    matrix = csr_array((np.ones(len(rows)), (rows, cols)), shape=(n, n))
    expected = connected_components(matrix, directed=True, connection="strong")[1]
    assert _partition(strong_components(succ)) == _partition(expected)


def test_a_long_chain_does_not_recurse():
    succ = [[i + 1] for i in range(5000)] + [[0]]   # one cycle of 5001 nodes
    assert len(set(strong_components(succ).tolist())) == 1
