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
another sum that is used is refused by name (``_check_flattened``).

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

#: the linear statements a sum's array is split through
LINEAR = ("Plus", "Minus", "ScaleBy")

# a tree: ("sum", ref) | ("times", ref, N) | ("const", value) | (op, left, right/scale)
_Tree = tuple[Any, ...]


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
    absorbed = _absorbed(program, decls, defined, sizes)
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
    _check_flattened(body, decls)
    new_decls = tuple(n for d in program.decls for n in (*added.get(d.name, ()), d))
    return replace(program, decls=new_decls, body=body, _by_name={})


def _summed(stmt: Stmt, sizes: dict[str, Any]) -> tuple[Ref, str, int] | None:
    """For a sum statement ``ff.sum(a, n)``: its array ``a``, the plate ``n`` and its
    size; None for any other statement."""
    array = dict(stmt.inputs).get("array")
    if stmt.op != "PlateSum" or not isinstance(array, Ref) or len(stmt.outputs) != 1 \
            or not array.index or array.index[:-1] != stmt.outputs[0].index:
        return None
    size = sizes.get(array.index[-1])
    if not isinstance(size, int | np.integer) or isinstance(size, bool):
        return None
    return array, array.index[-1], int(size)


def _absorbed(program: Program, decls: dict[str, VarDecl], defined: dict[str, Stmt],
              sizes: dict[str, Any]) -> frozenset[str]:
    """The inner sums that only outer sums read (through linear statements, outside
    gates), each outer sum written as sums over all the plates (``_tree`` reaches a
    tree through them): these are not split, and the outer sums no longer read them
    (with no use left, their updates are pruned; their posteriors stay)."""
    readers: dict[str, list[Stmt]] = {}
    for node, _ in walk(program.body):
        for _, value in node.inputs:
            if isinstance(value, Ref):
                readers.setdefault(value.var, []).append(node)
    masked = {id(s) for s in _masked(program.body, False)}

    def feeds(var: str) -> list[Stmt] | None:
        """The sums that ``var`` reaches through linear statements; None where it has
        another use."""
        out: list[Stmt] = []
        for r in readers.get(var, ()):
            if id(r) in masked:
                return None
            if _summed(r, sizes) is not None and r.input("array").var == var:
                out.append(r)
            elif r.op in LINEAR and all(decls[o.var].attr("derived") for o in r.outputs):
                more = [feeds(o.var) for o in r.outputs]
                if any(m is None for m in more):
                    return None
                out += [t for m in more for t in m or ()]
            else:
                return None
        return out

    candidates = {s.outputs[0].var: feeds(s.outputs[0].var) for s, _ in walk(program.body)
                  if _summed(s, sizes) is not None and id(s) not in masked}
    absorbed = {v for v, outer in candidates.items() if outer}
    while True:  # (an outer sum no tree reaches leaves its inner sums as they are)
        flat = {id(s) for v in absorbed for s in candidates[v] or ()
                if _outer_tree(s, decls, defined, sizes, frozenset(absorbed)) is not None}
        kept = {v for v in absorbed if all(id(s) in flat for s in candidates[v] or ())}
        if kept == absorbed:
            return frozenset(absorbed)
        absorbed = kept


def _masked(nodes: tuple[Node, ...], masked: bool) -> list[Stmt]:
    """The statements of ``nodes`` under an ``If``."""
    out: list[Stmt] = []
    for node in nodes:
        if isinstance(node, Stmt):
            out += [node] if masked else []
        else:
            out += _masked(node.body, masked or isinstance(node, If))
    return out


def _outer_tree(stmt: Stmt, decls: dict[str, VarDecl], defined: dict[str, Stmt],
                sizes: dict[str, Any], absorbed: frozenset[str]) -> _Tree | None:
    """The tree of the sum ``stmt`` where it reaches an absorbed inner sum, else None."""
    summed = _summed(stmt, sizes)
    if summed is None:
        return None
    array, plate, size = summed
    tree = _tree(array, array.index, (plate,), size, sizes, decls, defined, absorbed)
    return tree if tree is not None and _reaches(tree) else None


def _reaches(tree: _Tree) -> bool:
    """Whether a sum in ``tree`` runs over several plates."""
    if tree[0] == "sum":
        return len(tree[2]) > 1
    if tree[0] == "ScaleBy":
        return _reaches(tree[1])
    return tree[0] in ("Plus", "Minus") and (_reaches(tree[1]) or _reaches(tree[2]))


def _split(stmt: Stmt, decls: dict[str, VarDecl], defined: dict[str, Stmt],
           sizes: dict[str, Any], absorbed: frozenset[str], taken: set[str],
           added: dict[str, list[VarDecl]]) -> list[Stmt] | None:
    """The statements replacing the sum ``stmt``, or None where it stays as it is."""
    summed = _summed(stmt, sizes)
    if summed is None:
        return None
    array, plate, size = summed
    index = array.index
    factors = _latent_factors(array, decls, defined)
    if factors is not None:  # Σ_n x[n] w[n]: one factor, a block update for each
        added.setdefault(stmt.outputs[0].var, [])
        return [Stmt("PlateInner", stmt.outputs, (("a", factors[0]), ("b", factors[1])),
                     (), stmt.provenance)]
    roots = _roots(array, decls, defined)
    broadcast = sorted(r for r in roots if decls[r].plates != index)
    flat = _outer_tree(stmt, decls, defined, sizes, absorbed)
    if len(roots) < 2 and not broadcast and flat is None:
        return None  # one variable's sum (or one opaque term): as before
    tree = flat or _tree(array, index, (plate,), size, sizes, decls, defined, absorbed)
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


#: the sums of a plate of elements: one plate (``ff.sum``) or several (a flattened nest)
SUMS = ("PlateSum", "MultiPlateSum")


def _is_sum(ref: Ref, defined: dict[str, Stmt]) -> bool:
    """Whether ``ref`` is a sum over plates."""
    return ref.var in defined and defined[ref.var].op in SUMS


def _check_flattened(body: tuple[Node, ...], decls: dict[str, VarDecl]) -> None:
    """UnsupportedFactorError where a variable summed over several plates at once (a
    ``MultiPlateSum`` this pass wrote) has another sum of its elements that is used:
    each sum's block update would take the other's message for a fixed one, no
    coordinate ascent.  Those the flattening left dead (the inner sums, read only by
    what the outer sum no longer reads) send nothing."""
    stmts = [s for s, _ in walk(body)]
    defined = {o.var: s for s in stmts for o in s.outputs}
    readers: dict[str, list[Stmt]] = {}
    for s in stmts:
        for _, value in s.inputs:
            if isinstance(value, Ref):
                readers.setdefault(value.var, []).append(s)
    dead: dict[str, bool] = {}

    def is_dead(var: str) -> bool:
        """Whether nothing but dead derived variables reads ``var``."""
        if var not in dead:
            dead[var] = all(
                r.op in LINEAR + SUMS and all(
                    decls[o.var].role == "random" and decls[o.var].attr("derived")
                    and is_dead(o.var) for o in r.outputs)
                for r in readers.get(var, ()))
        return dead[var]

    def summed(stmt: Stmt) -> set[str]:
        """The latent variables whose elements ``stmt`` sums."""
        return {r for arg, value in stmt.inputs if arg in ("array", "a", "b")
                and isinstance(value, Ref) for r in _roots(value, decls, defined)}

    sums = [s for s in stmts if s.op in SUMS + ("PlateInner",)]
    for flat in (s for s in sums if s.op in ("MultiPlateSum", "PlateInner")):
        roots = summed(flat)
        for other in sums:
            if other is flat or not roots & summed(other) or is_dead(other.outputs[0].var):
                continue
            root = decls[sorted(roots & summed(other))[0]]
            users = [r.provenance or r.op for r in _live_readers(other.outputs[0].var,
                                                                   readers, is_dead)]
            nested = flat.op == "MultiPlateSum"
            raise UnsupportedFactorError(
                f"{flat.provenance or 'ff.sum'}: VMP updates the elements of "
                f"{root.label!r} as one block for this sum ("
                + ("over several plates: a sum of sums" if nested else
                   "of a product of two latent plates") + "), and another sum of its "
                f"elements ({decls[other.outputs[0].var].label!r}, "
                f"{other.provenance or other.op}) is used "
                f"({', '.join(dict.fromkeys(users))}): the two sums' updates would not be "
                "coordinate ascent.  Use 'ep' (exact here), or "
                + ("make the inner sum a latent with its own precision, e.g. s = "
                   "ff.Gaussian('s', ff.sum(x + z, n), precision=10.0), and sum that."
                   if nested else "make the product a latent with its own precision, "
                   "e.g. p = ff.Gaussian('p', x * w, precision=100.0), and sum that."))


def _live_readers(var: str, readers: dict[str, list[Stmt]], is_dead: Any) -> list[Stmt]:
    """The statements through which ``var`` is used: its readers that are not linear
    statements or sums, and theirs, down the live derived variables."""
    out: list[Stmt] = []
    for r in readers.get(var, ()):
        if r.op in LINEAR + SUMS:
            out += [t for o in r.outputs if not is_dead(o.var)
                    for t in _live_readers(o.var, readers, is_dead)]
        else:
            out.append(r)
    return out


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
        roots = _roots(ref, decls, defined)
        if len(roots) != 1 or decls[next(iter(roots))].plates != array.index \
                or (ref.var in defined and defined[ref.var].op in SUMS + ("PlateInner",)):
            return None
        found.append(next(iter(roots)))
    return (a, b) if found[0] != found[1] else None  # type: ignore[return-value]


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


def _tree(ref: Operand, index: tuple[str, ...], plates: tuple[str, ...], size: int,
          sizes: dict[str, Any], decls: dict[str, VarDecl], defined: dict[str, Stmt],
          absorbed: frozenset[str]) -> _Tree | None:
    """The sum over the last axes of ``index`` (``plates``, innermost first, ``size``
    elements in all) of the operand ``ref`` (read at ``index``, or broadcast over its
    last axis) as a tree of one-variable sums; None where a part of it cannot be summed
    so.  An absorbed inner sum is opened: Σ_k (Σ_n a) is Σ_(k, n) a."""
    if isinstance(ref, Const):
        value = np.asarray(ref.value)
        return ("const", float(value) * size) if value.ndim == 0 and isinstance(
            value.item(), float | int) and not isinstance(value.item(), bool) else None
    if decls[ref.var].role != "random":
        return None  # an observed or constant array: summed by NumPy, not here
    if ref.index == index[:-1] and len(plates) == 1:  # a term without the summed plate
        return ("times", ref, size)  # N times it
    if ref.index != index:
        return None
    if ref.var in absorbed:  # Σ_k s[k], s[k] = Σ_n a[k, n]: Σ over (k, n) of a
        array, plate, inner = _summed(defined[ref.var], sizes)  # type: ignore[misc]
        return _tree(array, array.index, (plate,) + plates, size * inner, sizes, decls,
                     defined, absorbed)
    roots = _roots(ref, decls, defined)
    if len(roots) == 1 and decls[next(iter(roots))].plates == index:
        if _is_sum(ref, defined):
            return None  # a sum of a sum with another use: as it is (refused by name)
        if len(plates) > 1 and ref.var in defined and defined[ref.var].op in LINEAR:
            # over several plates, Σ 2 z is 2 Σ z: one sum of z, however it is scaled
            opened = _linear(defined[ref.var], index, plates, size, sizes, decls, defined,
                             absorbed)
            if opened is not None:
                return opened
        return ("sum", ref, plates)  # one variable's elements (x, c * x, x + 1.0)
    if ref.var not in defined:
        return None
    return _linear(defined[ref.var], index, plates, size, sizes, decls, defined, absorbed)


def _linear(stmt: Stmt, index: tuple[str, ...], plates: tuple[str, ...], size: int,
            sizes: dict[str, Any], decls: dict[str, VarDecl], defined: dict[str, Stmt],
            absorbed: frozenset[str]) -> _Tree | None:
    """``_tree`` of the linear statement ``stmt``'s output."""
    outer = index[:-len(plates)]
    if stmt.outputs[0].index != index:
        return None
    if stmt.op == "ScaleBy":  # a scale constant along the summed plates comes out
        scale = stmt.input("scale")
        if isinstance(scale, Ref) and (decls[scale.var].role not in ("observed", "constant")
                                       or any(p not in outer for p in scale.index)):
            return None
        if isinstance(scale, Const) and np.ndim(scale.value) != 0:
            return None
        inner = _tree(stmt.input("a"), index, plates, size, sizes, decls, defined, absorbed)
        return None if inner is None else ("ScaleBy", inner, scale)
    if stmt.op not in ("Plus", "Minus"):
        return None
    a = _tree(stmt.input("a"), index, plates, size, sizes, decls, defined, absorbed)
    b = _tree(stmt.input("b"), index, plates, size, sizes, decls, defined, absorbed)
    return None if a is None or b is None else (stmt.op, a, b)


def _operand_label(operand: Operand, decls: dict[str, VarDecl]) -> str:
    if isinstance(operand, Const):
        return repr(np.asarray(operand.value).item())
    return decls[operand.var].label


__all__ = ["split_linear_sums"]
