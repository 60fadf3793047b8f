"""transforms.sum_trees: the sum of an array as a tree of one-variable sums (read by
``transforms.linear_sums``).

Each tree is checked two ways: its shape (golden), and its meaning: evaluated on random
values of the latent variables, it equals the sum it was made from computed by NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest

import factorflow as ff
from factorflow.ir import Const, Ref
from factorflow.ir.nodes import walk
from factorflow.transforms.pipeline import compile_program
from factorflow.transforms.sum_trees import absorbed_sums, outer_tree

K, N = 2, 3


def _program(inner: str):
    """s[k] = Σ_n a[k, n] (a from ``inner``), t ~ N(Σ_k s[k], 1/3)."""
    with ff.Model() as model:
        k, n = ff.Range("k", K), ff.Range("n", N)
        with ff.Plate(k):
            with ff.Plate(n):
                x = ff.Gaussian("x", 0.0, precision=1.0)
                z = ff.Gaussian("z", 1.0, precision=2.0)
                a = {"x - 2 z": lambda: x - 2.0 * z, "x + 1.5": lambda: x + 1.5,
                     "3 (x + z)": lambda: 3.0 * (x + z)}[inner]()
            s = ff.sum(a, n)
        ff.Gaussian("t", ff.sum(s, k), precision=3.0, observed=2.5)
    return compile_program(model, "vmp").stages["gates"]


def _value(tree, values: dict[str, np.ndarray]) -> float:
    """The tree's value for the latent variables' ``values``."""
    kind = tree[0]
    if kind == "const":
        return tree[1]
    if kind == "sum":
        return float(np.sum(values[tree[1].var]))
    if kind == "ScaleBy":
        scale = tree[2]
        assert isinstance(scale, Const)
        return float(np.asarray(scale.value)) * _value(tree[1], values)
    a, b = _value(tree[1], values), _value(tree[2], values)
    return a + b if kind == "Plus" else a - b


#: the tree of Σ_k s[k] for each inner array, and its value from x's and z's
CASES = {"x - 2 z": (("Minus", ("sum", "v_x"), ("ScaleBy", ("sum", "v_z"), 2.0)),
                     lambda x, z: np.sum(x - 2.0 * z)),
         "x + 1.5": (("Plus", ("sum", "v_x"), ("const", 1.5 * K * N)),
                     lambda x, z: np.sum(x + 1.5)),
         "3 (x + z)": (("Plus", ("sum", "v_x"), ("sum", "v_z")),
                       lambda x, z: np.sum(3.0 * (x + z)))}


def _shape(tree):
    """The tree with references by name, sums without their plates, scales as numbers."""
    if tree[0] == "sum":
        return ("sum", tree[1].var)
    if tree[0] == "const":
        return tree
    if tree[0] == "ScaleBy":
        return ("ScaleBy", _shape(tree[1]), float(np.asarray(tree[2].value)))
    return (tree[0], _shape(tree[1]), _shape(tree[2]))


@pytest.mark.parametrize("inner", sorted(CASES))
def test_the_outer_sum_opens_its_inner_sum(inner):
    program = _program(inner)
    decls = {d.name: d for d in program.decls}
    defined = {o.var: s for s, _ in walk(program.body) for o in s.outputs}
    sizes = dict(program.ranges)
    absorbed = absorbed_sums(program, decls, defined, sizes)
    outer = [s for s, _ in walk(program.body) if s.op == "PlateSum"
             and not s.outputs[0].index]
    (inner_sum,) = [s for s, _ in walk(program.body) if s.op == "PlateSum"
                    and s.outputs[0].index]
    assert absorbed == {inner_sum.outputs[0].var}
    tree = outer_tree(outer[0], decls, defined, sizes, absorbed)
    assert tree is not None
    assert all(t[2] == ("v_n", "v_k") for t in _leaves(tree))
    expected, value = CASES[inner]
    if inner == "3 (x + z)":  # the scale comes out of the sum of x + z
        assert _shape(tree) == ("ScaleBy", expected, 3.0)
    else:
        assert _shape(tree) == expected
    rng = np.random.default_rng(0)
    values = {"v_x": rng.normal(size=(K, N)), "v_z": rng.normal(size=(K, N))}
    assert abs(_value(tree, values) - value(values["v_x"], values["v_z"])) < 1e-12


def _leaves(tree):
    if tree[0] == "sum":
        return [tree]
    return [t for part in tree[1:] if isinstance(part, tuple) and not isinstance(part, Ref)
            for t in _leaves(part)]


def test_an_inner_sum_with_another_use_is_not_opened():
    """s read by y[k] too: no outer tree opens it (the sum stays nested, refused)."""
    with ff.Model() as model:
        k, n = ff.Range("k", K), ff.Range("n", N)
        with ff.Plate(k):
            with ff.Plate(n):
                x = ff.Gaussian("x", 0.0, precision=1.0)
            s = ff.sum(x, n)
            ff.Gaussian("y", s, precision=1.0, observed=np.zeros(K))
        ff.Gaussian("t", ff.sum(s, k), precision=3.0, observed=2.5)
    program = compile_program(model, "ep").stages["gates"]
    decls = {d.name: d for d in program.decls}
    defined = {o.var: s for s, _ in walk(program.body) for o in s.outputs}
    assert absorbed_sums(program, decls, defined, dict(program.ranges)) == frozenset()
