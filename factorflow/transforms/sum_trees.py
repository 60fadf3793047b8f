"""The sums a VMP ``ff.sum`` is made of, read by ``transforms.linear_sums``.

Input: the lowered program's statements (read only).  ``sum_tree`` writes the sum of an
array over its last plates as a tree of one-variable sums joined by ``Plus``, ``Minus``
and ``ScaleBy`` (a scale constant along the plates comes out, a term without the
summed plate is N times itself, a constant N times itself), opening the inner sums
that ``absorbed_sums`` finds only outer sums reading (Σ_k (Σ_n a) is Σ_(k, n) a);
``check_blocks`` refuses, by name, a variable whose elements get a block update over
several plates or of a product and also another sum that is used.  Guarantees: a tree
is equal, as a function of the latent variables, to the sum it was made from; None
where some part of it is not such a sum.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from factorflow.errors import UnsupportedFactorError
from factorflow.ir import Const, If, Program, Ref, Stmt, VarDecl
from factorflow.ir.nodes import Node, Operand, walk

#: the linear statements a sum's array is split through
LINEAR = ("Plus", "Minus", "ScaleBy")

# a tree: ("sum", ref, plates) | ("times", ref, N) | ("const", value) |
# (op, left, right/scale)
Tree = tuple[Any, ...]


def summed_array(stmt: Stmt, sizes: dict[str, Any]) -> tuple[Ref, str, int] | None:
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


def absorbed_sums(program: Program, decls: dict[str, VarDecl], defined: dict[str, Stmt],
              sizes: dict[str, Any]) -> frozenset[str]:
    """The inner sums that only outer sums read (through linear statements, outside
    gates), each outer sum written as sums over all the plates (``sum_tree`` reaches a
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
            if summed_array(r, sizes) is not None and r.input("array").var == var:
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
                  if summed_array(s, sizes) is not None and id(s) not in masked}
    absorbed = {v for v, outer in candidates.items() if outer}
    while True:  # (an outer sum no tree reaches leaves its inner sums as they are)
        flat = {id(s) for v in absorbed for s in candidates[v] or ()
                if outer_tree(s, decls, defined, sizes, frozenset(absorbed)) is not None}
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


def outer_tree(stmt: Stmt, decls: dict[str, VarDecl], defined: dict[str, Stmt],
                sizes: dict[str, Any], absorbed: frozenset[str]) -> Tree | None:
    """The tree of the sum ``stmt`` where it reaches an absorbed inner sum, else None."""
    summed = summed_array(stmt, sizes)
    if summed is None:
        return None
    array, plate, size = summed
    tree = sum_tree(array, array.index, (plate,), size, sizes, decls, defined, absorbed)
    return tree if tree is not None and _reaches(tree) else None


def _reaches(tree: Tree) -> bool:
    """Whether a sum in ``tree`` runs over several plates."""
    if tree[0] == "sum":
        return len(tree[2]) > 1
    if tree[0] == "ScaleBy":
        return _reaches(tree[1])
    return tree[0] in ("Plus", "Minus") and (_reaches(tree[1]) or _reaches(tree[2]))


#: the sums of a plate of elements: one plate (``ff.sum``) or several (a flattened nest)
SUMS = ("PlateSum", "MultiPlateSum")


def is_sum(ref: Ref, defined: dict[str, Stmt]) -> bool:
    """Whether ``ref`` is a sum over plates."""
    return ref.var in defined and defined[ref.var].op in SUMS


def check_blocks(body: tuple[Node, ...], decls: dict[str, VarDecl]) -> None:
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
                and isinstance(value, Ref) for r in linear_roots(value, decls, defined)}

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


def linear_roots(ref: Operand, decls: dict[str, VarDecl], defined: dict[str, Stmt]) -> set[str]:
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
        return linear_roots(stmt.input("a"), decls, defined)
    return (linear_roots(stmt.input("a"), decls, defined)
            | linear_roots(stmt.input("b"), decls, defined))


def sum_tree(ref: Operand, index: tuple[str, ...], plates: tuple[str, ...], size: int,
          sizes: dict[str, Any], decls: dict[str, VarDecl], defined: dict[str, Stmt],
          absorbed: frozenset[str]) -> Tree | None:
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
        array, plate, inner = summed_array(defined[ref.var], sizes)  # type: ignore[misc]
        return sum_tree(array, array.index, (plate,) + plates, size * inner, sizes, decls,
                     defined, absorbed)
    roots = linear_roots(ref, decls, defined)
    if len(roots) == 1 and decls[next(iter(roots))].plates == index:
        if is_sum(ref, defined):
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
            absorbed: frozenset[str]) -> Tree | None:
    """``sum_tree`` of the linear statement ``stmt``'s output."""
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
        inner = sum_tree(stmt.input("a"), index, plates, size, sizes, decls, defined, absorbed)
        return None if inner is None else ("ScaleBy", inner, scale)
    if stmt.op not in ("Plus", "Minus"):
        return None
    a = sum_tree(stmt.input("a"), index, plates, size, sizes, decls, defined, absorbed)
    b = sum_tree(stmt.input("b"), index, plates, size, sizes, decls, defined, absorbed)
    return None if a is None or b is None else (stmt.op, a, b)
