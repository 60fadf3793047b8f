"""Linear sums (VMP): ``ff.sum(x + z, n)`` becomes ``ff.sum(x, n) + ff.sum(z, n)``.

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
variable is never touched (its program is unchanged, bit for bit), nor a sum over an
outer plate of sums of several variables (``Σ_k s[k]``, ``s[k] = Σ_n (x + z)``): split
too, its inner sums each had a second use, the dead ``s``, and the run went NaN; it is
refused by name as before.  Under EP the pass
does nothing: EP's sum is exact as written, and splitting it would close a loop where
the array has another use.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from factorflow.codegen.names import display, fresh, token
from factorflow.errors import UnsupportedFactorError
from factorflow.ir import Const, For, If, Program, Ref, Stmt, VarDecl
from factorflow.ir.nodes import Node, Operand, walk

#: the linear statements a sum's array is split through
LINEAR = ("Plus", "Minus", "ScaleBy")

# a tree: ("sum", ref) | ("times", ref, N) | ("const", value) | (op, left, right/scale)
_Tree = tuple[Any, ...]


def split_linear_sums(program: Program, algorithm: str) -> Program:
    """``program`` with every VMP ``PlateSum`` of a linear combination of two or more
    latent variables written as that combination of one-variable sums (see the module
    docstring); ``program`` itself under any other algorithm or where there is none.
    Raises UnsupportedFactorError, naming the sum, where a latent without the summed
    plate enters its array other than with scales constant along the plate (its
    one-variable update would take the broadcast elements for independent ones)."""
    if algorithm != "vmp":
        return program
    decls = {d.name: d for d in program.decls}
    defined: dict[str, Stmt] = {o.var: s for s, _ in walk(program.body) for o in s.outputs}
    taken = set(decls) | {r for r, _ in program.ranges}
    sizes = dict(program.ranges)
    added: dict[str, list[VarDecl]] = {}  # the sum's name -> the decls put before it

    def rewrite(nodes: tuple[Node, ...], masked: bool) -> tuple[Node, ...]:
        out: list[Node] = []
        for node in nodes:
            if isinstance(node, Stmt):
                made = None if masked else _split(node, decls, defined, sizes, taken, added)
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
    new_decls = tuple(n for d in program.decls for n in (*added.get(d.name, ()), d))
    return replace(program, decls=new_decls, body=body, _by_name={})


def _split(stmt: Stmt, decls: dict[str, VarDecl], defined: dict[str, Stmt],
           sizes: dict[str, Any], taken: set[str], added: dict[str, list[VarDecl]]
           ) -> list[Stmt] | None:
    """The statements replacing the sum ``stmt``, or None where it stays as it is."""
    array = dict(stmt.inputs).get("array")
    if stmt.op != "PlateSum" or not isinstance(array, Ref) or len(stmt.outputs) != 1 \
            or not array.index:
        return None
    index, plate = array.index, array.index[-1]
    size = sizes.get(plate)
    if not isinstance(size, int | np.integer) or isinstance(size, bool):
        return None
    roots = _roots(array, decls, defined)
    broadcast = sorted(r for r in roots if decls[r].plates != index)
    if len(roots) < 2 and not broadcast:
        return None  # one variable's sum (or one opaque term): as before
    if any(r in defined and defined[r].op == "PlateSum" for r in roots):
        return None  # a sum of such sums (Σ_k (Σ_n x + Σ_n z)): split, it diverged
    tree = _tree(array, index, int(size), decls, defined)
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

    def emit(node: _Tree, target: Ref | None) -> tuple[Operand, str]:
        """The operand holding ``node``'s sum (written into ``target`` if given) and its
        label."""
        kind = node[0]
        if kind == "const":
            return Const(node[1]), repr(node[1])
        if kind == "sum":
            label = f"sum({decls[node[1].var].label}, {display(plate)})"
            op, inputs = "PlateSum", (("array", node[1]),)
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
            name = fresh(node[1].var, token("sum", plate), taken) if kind == "sum" else \
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


def _roots(ref: Operand, decls: dict[str, VarDecl], defined: dict[str, Stmt]) -> set[str]:
    """The latent variables ``ref`` is a linear function of (a derived variable defined
    otherwise, e.g. a product or a sum, counts as one): empty for a known value."""
    if not isinstance(ref, Ref):
        return set()
    decl = decls[ref.var]
    if decl.role != "random":
        return set()
    stmt = defined.get(ref.var)
    if not decl.attr("derived") or stmt is None or stmt.op not in LINEAR:
        return {ref.var}
    if stmt.op == "ScaleBy":
        return _roots(stmt.input("a"), decls, defined)
    return _roots(stmt.input("a"), decls, defined) | _roots(stmt.input("b"), decls, defined)


def _tree(ref: Operand, index: tuple[str, ...], size: int, decls: dict[str, VarDecl],
          defined: dict[str, Stmt]) -> _Tree | None:
    """The sum over the last axis of ``index`` of the operand ``ref`` (read at
    ``index``, or broadcast over its last axis) as a tree of one-variable sums; None
    where a part of it cannot be summed so."""
    outer = index[:-1]
    if isinstance(ref, Const):
        value = np.asarray(ref.value)
        return ("const", float(value) * size) if value.ndim == 0 and isinstance(
            value.item(), float | int) and not isinstance(value.item(), bool) else None
    if decls[ref.var].role != "random":
        return None  # an observed or constant array: summed by NumPy, not here
    if ref.index == outer:  # a term without the summed plate: N times it
        return ("times", ref, size)
    if ref.index != index:
        return None
    roots = _roots(ref, decls, defined)
    if len(roots) == 1 and decls[next(iter(roots))].plates == index:
        return ("sum", ref)  # one variable's elements (x, c * x, x + 1.0): as before
    stmt = defined[ref.var]
    if stmt.outputs[0].index != index:
        return None
    if stmt.op == "ScaleBy":  # a scale constant along the summed plate comes out
        scale = stmt.input("scale")
        if isinstance(scale, Ref) and (decls[scale.var].role not in ("observed", "constant")
                                       or any(p not in outer for p in scale.index)):
            return None
        if isinstance(scale, Const) and np.ndim(scale.value) != 0:
            return None
        inner = _tree(stmt.input("a"), index, size, decls, defined)
        return None if inner is None else ("ScaleBy", inner, scale)
    a = _tree(stmt.input("a"), index, size, decls, defined)
    b = _tree(stmt.input("b"), index, size, decls, defined)
    return None if a is None or b is None else (stmt.op, a, b)


def _operand_label(operand: Operand, decls: dict[str, VarDecl]) -> str:
    if isinstance(operand, Const):
        return repr(np.asarray(operand.value).item())
    return decls[operand.var].label


__all__ = ["split_linear_sums"]
