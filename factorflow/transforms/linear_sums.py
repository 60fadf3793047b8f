"""Linear sums (VMP): ``ff.sum(x + z, n)`` becomes ``ff.sum(x, n) + ff.sum(z, n)``; sums of
sums and of products of two latent plates become one block update per variable.

Input and output: the lowered program, at the start of the ``channels`` stage (the pass
list stays as it was).  Under VMP, the update of an
``ff.sum``'s elements (``factors.plate_sum``) is a block update of the one variable whose
elements they are: it reads their posterior q and divides out its own last message to
see their other messages.  Where the summed array is computed from several latent
variables (``x + z``, ``2 * x - z + b``), q of the array is no posterior of any block of
variables and the update is not coordinate ascent (before: 39 of 128 small generated
``x + z`` models ended in NaN posteriors, the bound falling by up to 0.27;
test_regressions17_sumref).

The sum of a linear combination is the linear combination of the sums, so under VMP this
pass writes each such sum as the same deterministic function of its terms' sums: for
``s = PlateSum(array=a)`` with ``a`` a tree of ``Plus``, ``Minus`` and ``ScaleBy`` (by a
known scale constant along the summed plate) over two or more latent variables, ``s``
becomes that tree over ``PlateSum`` of each latent term (a term over the summed plate),
``N · b`` for a term ``b`` without it (N the plate's size) and ``N · c`` for a scalar
constant ``c``.  The model is the same (the two sides are equal as functions of the
latent variables), so its mean-field optimum is the same, and the new program's updates
are coordinate ascent: each sum is of one variable (``PlateSum``, or one ``PlateSums``
block over every sum of it), and the sums meet in deterministic ``Plus``/``Minus``/
``ScaleBy`` statements whose VMP messages are exact (linear in each argument).  The
statements defining ``a`` stay (``a`` keeps its posterior, its distribution under q, and
any other use); nothing reads ``a`` for the sum any more.

A term is a sub-tree over one latent variable (``x``, ``c * x``, ``x + 1.0``): its sum is
the one-variable sum as before.  A term the pass cannot sum (an observed array, a
per-element constant array, a gathered index) leaves the sum as it is; the scheduler
then refuses it by name (``dependency_info._refuse_not_ascent``).  A sum of one latent
variable is never touched (its program is unchanged, bit for bit).

Sums of sums.  A sum over an outer plate of inner sums that nothing else reads (``Σ_k
s[k]``, ``s[k] = Σ_n (x + z)``, or ``Σ_k Σ_n x − Σ_k Σ_n z`` written out) is written as
each variable's sum over both plates at once, ``MultiPlateSum(array=x[k, n], axes=2)``
(``factors.plate_sum``: the block update over every element summed), combined as above;
a scale constant along the plates comes out (Σ_(k, n) 2 z = 2 Σ_(k, n) z).  The inner
sums are not split and no longer read (their updates are pruned; their posteriors stay).
Nested, the outer sum's update took q(s) / its last message for s's other messages, but
q of a derived sum is N(Σ E x, Σ Var x), whose quotient has precision 1 / Σ_n Var x_n − τ
where s's other messages have 1 / Σ_n 1/p_n: a step with the wrong (even negative)
curvature, consistent at the fixed point but no coordinate ascent.  It diverged (NaN
after ~10 sweeps) where two variables' sums met (``Σ_k Σ_n x − Σ_k Σ_n z``; the split
``Σ_k (Σ_n x + Σ_n z)`` was refused as the inner sums' second use, the dead s), and
took up to 367 sweeps for one variable (now ≤ 5; test_linear_sums).  Where an inner sum
(or what lies between it and the outer sum) has another use, the sum stays nested and
is refused by name (``messages._refuse_shared_inner_sums``); where a variable summed
over several plates also has another sum that is used, the pass refuses it by name
(two block updates, each taking the other's message for fixed: no coordinate ascent).

Sums of products.  ``ff.sum(x * w, n)`` with x and w two latent variables' elements
(each over the summed plates) becomes one ``PlateInner(a=x, b=w)`` (``factors.plate_sum``):
a block update of x's elements given q(w), one of w's given q(x), each the exact
optimum of its block (the bound is quadratic in q(x)'s means given q(w)), where the
product's posterior read by a one-variable sum update was no block's and the bound fell
(by up to 5e4, test_regressions17_sumref).  The product keeps its definition.  A
variable whose elements get such a block update (several plates, or a product) and
another sum that is used is refused by name (``sum_trees.check_blocks``).

Under EP the pass does nothing: EP's sum is exact as written, and splitting it would
close a loop where the array has another use.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from factorflow.codegen.names import display, fresh, token
from factorflow.errors import UnsupportedFactorError
from factorflow.ir import Const, For, If, Program, Ref, Stmt, VarDecl
from factorflow.ir.nodes import Node, Operand, walk
from factorflow.transforms.sum_trees import (
    SUMS,
    Tree,
    absorbed_sums,
    check_blocks,
    linear_roots,
    outer_tree,
    sum_tree,
    summed_array,
)


def split_linear_sums(program: Program, algorithm: str) -> Program:
    """``program`` with every VMP ``PlateSum`` of a linear combination of two or more
    latent variables written as that combination of one-variable sums, and every sum
    over an outer plate of sums (of any number of variables) whose inner sums have no
    other use as the combination of each variable's sum over all those plates (see the
    module docstring); ``program`` itself under any other algorithm or where there is
    none.  Raises UnsupportedFactorError, naming the sum, where a latent without the
    summed plate enters its array other than with scales constant along the plate (its
    one-variable update would take the broadcast elements for independent ones), or
    where a variable summed over several plates has another sum that is used."""
    if algorithm != "vmp":
        return program
    decls = {d.name: d for d in program.decls}
    defined: dict[str, Stmt] = {o.var: s for s, _ in walk(program.body) for o in s.outputs}
    taken = set(decls) | {r for r, _ in program.ranges}
    sizes = dict(program.ranges)
    absorbed = absorbed_sums(program, decls, defined, sizes)
    added: dict[str, list[VarDecl]] = {}  # the sum's name -> the decls put before it

    def rewrite(nodes: tuple[Node, ...], masked: bool) -> tuple[Node, ...]:
        out: list[Node] = []
        for node in nodes:
            if isinstance(node, Stmt):
                made = None if masked or (node.outputs and node.outputs[0].var in absorbed) \
                    else _split(node, decls, defined, sizes, absorbed, taken, added)
                out.extend(made or (node,))
            elif isinstance(node, For):
                out.append(replace(node, body=rewrite(node.body, masked)))
            elif isinstance(node, If):
                out.append(replace(node, body=rewrite(node.body, True)))
            else:
                out.append(replace(node, body=rewrite(node.body, masked)))
        return tuple(out)

    body = rewrite(program.body, False)
    if not added:
        return program
    check_blocks(body, decls)
    new_decls = tuple(n for d in program.decls for n in (*added.get(d.name, ()), d))
    return replace(program, decls=new_decls, body=body, _by_name={})


def _split(stmt: Stmt, decls: dict[str, VarDecl], defined: dict[str, Stmt],
           sizes: dict[str, Any], absorbed: frozenset[str], taken: set[str],
           added: dict[str, list[VarDecl]]) -> list[Stmt] | None:
    """The statements replacing the sum ``stmt``, or None where it stays as it is."""
    summed = summed_array(stmt, sizes)
    if summed is None:
        return None
    array, plate, size = summed
    index = array.index
    factors = _latent_factors(array, decls, defined)
    if factors is not None:  # Σ_n x[n] w[n]: one factor, a block update for each
        added.setdefault(stmt.outputs[0].var, [])
        return [Stmt("PlateInner", stmt.outputs, (("a", factors[0]), ("b", factors[1])),
                     (), stmt.provenance)]
    roots = linear_roots(array, decls, defined)
    broadcast = sorted(r for r in roots if decls[r].plates != index)
    flat = outer_tree(stmt, decls, defined, sizes, absorbed)
    if len(roots) < 2 and not broadcast and flat is None:
        return None  # one variable's sum (or one opaque term): as before
    tree = flat or sum_tree(array, index, (plate,), size, sizes, decls, defined, absorbed)
    if tree is None and broadcast:
        raise UnsupportedFactorError(
            f"{stmt.provenance or 'ff.sum'}: VMP cannot sum over {display(plate)} an array "
            f"computed from {decls[broadcast[0]].label!r}, which lacks that plate (its "
            "update would take the array's elements for independent ones), other than "
            "as a linear combination with scales constant along the plate; write that "
            f"term's sum out, e.g. {size} * {decls[broadcast[0]].label} or "
            f"np.sum(c) * {decls[broadcast[0]].label}.")
    if tree is None:
        return None
    (out,) = stmt.outputs
    total = decls[out.var]
    made: list[Stmt] = []
    new: list[VarDecl] = []

    def emit(node: Tree, target: Ref | None) -> tuple[Operand, str]:
        """The operand holding ``node``'s sum (written into ``target`` if given) and its
        label."""
        kind = node[0]
        if kind == "const":
            return Const(node[1]), repr(node[1])
        if kind == "sum":
            label = decls[node[1].var].label
            for p in node[2]:
                label = f"sum({label}, {display(p)})"
            op, inputs = ("PlateSum", (("array", node[1]),)) if len(node[2]) == 1 else (
                "MultiPlateSum", (("array", node[1]), ("axes", Const(len(node[2])))))
        elif kind == "times":
            label = f"({node[2]} * {decls[node[1].var].label})"
            op, inputs = "ScaleBy", (("a", node[1]), ("scale", Const(float(node[2]))))
        elif kind == "ScaleBy":
            a, a_label = emit(node[1], None)
            label = f"({a_label} * {_operand_label(node[2], decls)})"
            op, inputs = "ScaleBy", (("a", a), ("scale", node[2]))
        else:  # Plus, Minus
            a, a_label = emit(node[1], None)
            b, b_label = emit(node[2], None)
            label = f"({a_label} {'+' if kind == 'Plus' else '-'} {b_label})"
            op, inputs = kind, (("a", a), ("b", b))
        if target is None:  # x's sum over n is x__sum_n, the others out's parts
            name = fresh(node[1].var, token("sum", *node[2]), taken) if kind == "sum" else \
                fresh(node[1].var, token("times", node[2]), taken) if kind == "times" else \
                fresh(out.var, "part", taken)
            new.append(VarDecl(name, "random", "real", None, total.plates, None, label,
                               (("derived", True), ("where", stmt.provenance))))
            decls[name] = new[-1]  # (a sum of these sums reads them)
            target = Ref(name, out.index)
        made.append(Stmt(op, (target,), inputs, (), stmt.provenance))
        defined[target.var] = made[-1]
        return target, label

    emit(tree, out)
    added.setdefault(out.var, []).extend(new)
    return made


def _latent_factors(array: Ref, decls: dict[str, VarDecl], defined: dict[str, Stmt]
                    ) -> tuple[Ref, Ref] | None:
    """For an array ``x * w`` (a ``Product``) of two different latent variables' elements
    (each over the array's plates: x, c * x), its factors x and w; else None."""
    stmt = defined.get(array.var)
    if stmt is None or stmt.op != "Product" or stmt.outputs[0].index != array.index:
        return None
    a, b = stmt.input("a"), stmt.input("b")
    found = []
    for ref in (a, b):
        if not isinstance(ref, Ref) or ref.index != array.index \
                or decls[ref.var].role != "random":
            return None
        roots = linear_roots(ref, decls, defined)
        if len(roots) != 1 or decls[next(iter(roots))].plates != array.index \
                or (ref.var in defined and defined[ref.var].op in SUMS + ("PlateInner",)):
            return None
        found.append(next(iter(roots)))
    return (a, b) if found[0] != found[1] else None  # type: ignore[return-value]


def _operand_label(operand: Operand, decls: dict[str, VarDecl]) -> str:
    if isinstance(operand, Const):
        return repr(np.asarray(operand.value).item())
    return decls[operand.var].label


__all__ = ["split_linear_sums"]
