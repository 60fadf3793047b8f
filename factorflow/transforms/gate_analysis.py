"""Gate analysis (Infer.NET's GateAnalysisTransform): where each random variable lives.

The IR declares every variable at the top, so whether a variable is *local* to a gate, an
*enter* variable or an *exit* variable is read off where it is defined and read.  A
position is a ``Path``: the stochastic gates around a statement, outermost first, each as
(condition key, case); the condition key is (the path of the ``If``, the condition's text),
so the ``If`` blocks on one condition in one context share it (and one cases array).

A variable's *home* is the longest common prefix of the paths of all its definitions and
reads, cut before a switch case whose range is not among its plates (a variable assigned
inside ``for j: if i == j`` without a ``j`` axis is one value chosen by the switch).  It is
cloned to enter every gate below its home that reads it, and it *exits* every gate below
its home that defines it; those gates must define it in all their cases.

Uses of an array inside a gate are grouped into *disjoint index sets* (the seed: "group
uses of an array into disjoint sets of indices, so that each use is covered by one of the
sets").  An index pattern is the tuple of a read's indices, each a literal or a loop over
the array's own axis (all of it); two patterns overlap when at every axis they agree or
one covers all of it.  Overlapping patterns (transitively) form one set, whose pattern
keeps a literal where all agree and loops over the axis elsewhere; each use is read from
the clone of its set, so ``array[0]`` and ``array[i]`` in one gate share one clone instead
of entering element 0 twice.  A gather by known indices (``array[idx[n]]``, which may
name one element twice) covers its whole axis.  Patterns with other indices (a random
index, another range) are not grouped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from factorflow.codegen.names import display
from factorflow.errors import ModelError
from factorflow.ir import For, If, Node, Program, Ref, Stmt, VarDecl, While, refs_in
from factorflow.ir.printer import format_ref

#: the stochastic gates around a statement: ((condition key, case), ...) from the outside
Path = tuple[tuple[tuple, int | str], ...]


@dataclass(frozen=True)
class GateAnalysis:
    """``home``: depth (number of gates) at which each random variable is declared;
    ``exits``: the condition keys each variable exits; ``conditions``: for each stochastic
    condition key, (number of cases, switch range or None)."""

    home: Mapping[str, int]
    exits: Mapping[str, frozenset[tuple]]
    conditions: Mapping[tuple, tuple[int, str | None]]
    #: condition key -> variable -> index pattern read inside -> the pattern of its set,
    #: for the patterns whose set is larger than themselves
    groups: Mapping[tuple, Mapping[str, Mapping[tuple, tuple]]] = field(default_factory=dict)


def show_ref(ref: Ref, decls: Mapping[str, VarDecl]) -> str:
    """``ref`` as the user wrote it, for messages and labels: each variable by its label,
    each range by its name without the user prefix (``v_z[v_n]`` -> ``z[n]``)."""
    d = decls.get(ref.var)
    name = d.label if d is not None and d.label else display(ref.var)
    if not ref.index:
        return name
    items = ", ".join(show_ref(i, decls) if isinstance(i, Ref) else display(str(i))
                      for i in ref.index)
    return f"{name}[{items}]"


def condition_key(path: Path, condition: Ref) -> tuple:
    """The key of the condition ``condition`` met at ``path``."""
    return (path, format_ref(condition))


def case_of(node: If, decl: VarDecl, loops: tuple[str, ...], sizes: Mapping[str, int]
            ) -> tuple[int | str, int, str | None]:
    """(case number, number of cases, switch range or None) of a gate, validated.

    A boolean condition has cases 0 (true) and 1 (false); an integer one has its values
    (``decl.event``), and a switch's case number is its loop range."""
    v, name = node.value, decl.label or decl.name
    what = f"gate on {name}"
    if decl.domain == "bool":
        if not (v is None or isinstance(v, bool)):
            raise ModelError(f"{what}: a boolean condition compares to True or False, "
                             f"not {v!r}.")
        return (0 if (v is not False) != node.negated else 1), 2, None
    if decl.domain != "int" or v is None or node.negated:
        raise ModelError(f"{what}: {name} is {decl.domain}-valued; a gate needs a boolean "
                         "condition, or a discrete (int) one compared to a value or a loop.")
    count = decl.event
    if isinstance(v, str):
        if not loops or loops[-1] != v:
            raise ModelError(f"{what}: a switch must sit directly in a for over {display(v)}.")
        if count is not None and count != sizes[v]:
            raise ModelError(f"{what}: the switch range {display(v)} has {sizes[v]} values but "
                             f"{name} has {count}.")
        return v, sizes[v], v
    if count is None or not 0 <= int(v) < count:
        raise ModelError(f"{what}: case {v} is outside the values of {name} "
                         f"(0..{(count or 0) - 1}).")
    return int(v), count, None


def analyze_gates(program: Program) -> GateAnalysis:
    """Homes and exits of the random variables of a model IR; ModelError when a variable
    defined inside a gate is read outside it without being defined in all its cases."""
    decls = {d.name: d for d in program.decls}
    sizes = dict(program.ranges)
    defs: dict[str, list[Path]] = {}
    uses: dict[str, list[Path]] = {}
    conditions: dict[tuple, tuple[int, str | None]] = {}
    shown: dict[tuple, str] = {}  # each condition as the user wrote it
    reads: dict[tuple, dict[str, set[tuple]]] = {}  # condition key -> var -> patterns

    def visit(nodes: tuple[Node, ...], path: Path, loops: tuple[str, ...]) -> None:
        for node in nodes:
            if isinstance(node, Stmt):
                for o in node.outputs:
                    defs.setdefault(o.var, []).append(path)
                for _, v in node.inputs:
                    for n in refs_in(v) if isinstance(v, Ref) else ():
                        uses.setdefault(n, []).append(path)
                    if isinstance(v, Ref) and v.index and path:
                        for key, _ in path:
                            reads.setdefault(key, {}).setdefault(v.var, set()).add(v.index)
            elif isinstance(node, For):
                visit(node.body, path, loops + (node.range,))
            elif isinstance(node, If):
                for n in refs_in(node.condition):
                    uses.setdefault(n, []).append(path)
                case, count, switch = case_of(node, decls[node.condition.var], loops, sizes)
                inner = path
                if decls[node.condition.var].role == "random":
                    key = condition_key(path, node.condition)
                    # (ff.Case gates met before an ff.Switch on the same condition —
                    # lowered before its loop when they open the Switch's body — share
                    # the Switch's loop as their case axis: the gate transform reads it
                    # here)
                    before = conditions.get(key, (0, None))[1]
                    conditions[key] = (count, switch or before)
                    shown[key] = show_ref(node.condition, decls)
                    inner = path + ((key, case),)
                visit(node.body, inner, loops)
            elif isinstance(node, While):
                visit(node.init + node.body, path, loops)

    visit(program.body, (), ())
    home: dict[str, int] = {}
    exits: dict[str, frozenset[tuple]] = {}
    for v, where in defs.items():
        if decls[v].role != "random":
            continue
        prefix = _common_prefix(where + uses.get(v, []))
        for i, (_, case) in enumerate(prefix):
            if isinstance(case, str) and case not in decls[v].plates:
                prefix = prefix[:i]
                break
        home[v] = len(prefix)
        exits[v] = frozenset(p[k][0] for p in where for k in range(len(prefix), len(p)))
        _check_exit(decls[v], where, len(prefix), conditions, shown,
                    reads=uses.get(v, []))
    def known(ref: Ref) -> bool:  # an index array given as data: a gather
        return decls[ref.var].role != "random" and all(isinstance(i, str) for i in ref.index)

    groups = {key: {v: g for v, patterns in by_var.items()
                    if decls[v].role == "random"
                    and (g := index_sets(sorted(patterns, key=repr), decls[v].plates, known))}
              for key, by_var in reads.items()}
    return GateAnalysis(home, exits, conditions, groups)


def index_sets(patterns: list[tuple], plates: tuple[str, ...],
               gather: Callable[[Ref], bool] = lambda ref: False) -> dict[tuple, tuple]:
    """Each index pattern of an array with ``plates`` mapped to the pattern of its set (see
    the module docstring), for the patterns whose set is larger than themselves.  An index
    ``gather`` accepts (an array of known indices) may name any element of its axis, some
    twice: it covers the whole axis, and its set is at least that."""
    def full(item: object, axis: int) -> bool:
        return axis < len(plates) and (item == plates[axis] or isinstance(item, Ref)
                                       and gather(item))

    def simple(p: tuple) -> bool:
        return len(p) == len(plates) and all(
            isinstance(i, int) and not isinstance(i, bool) or full(i, a)
            for a, i in enumerate(p))

    def overlap(p: tuple, q: tuple) -> bool:
        return all(a == b or full(a, k) or full(b, k) for k, (a, b) in enumerate(zip(
            p, q, strict=True)))

    sets: list[list[tuple]] = []
    for p in filter(simple, patterns):
        joined = [s for s in sets if any(overlap(p, q) for q in s)]
        merged = [p] + [q for s in joined for q in s]
        sets = [s for s in sets if s not in joined] + [merged]
    out: dict[tuple, tuple] = {}
    for members in sets:
        cover = tuple(members[0][a] if all(m[a] == members[0][a] for m in members)
                      and not isinstance(members[0][a], Ref) else plates[a]
                      for a in range(len(plates)))
        out.update({m: cover for m in members if m != cover})
    return out


def _common_prefix(paths: list[Path]) -> Path:
    first = paths[0]
    n = min(len(p) for p in paths)
    while any(p[:n] != first[:n] for p in paths):
        n -= 1
    return first[:n]


def _check_exit(decl: VarDecl, paths: list[Path], depth: int,
                conditions: Mapping[tuple, tuple[int, str | None]],
                shown: Mapping[tuple, str], outer: str | None = None,
                reads: list[Path] = ()) -> None:
    """A variable exiting the gate at ``depth`` is defined in all of its cases, below
    (``outer``: the condition of an ``ff.Switch`` above, which it leaves because it is
    defined inside it without the Switch's axis; ``reads``: the paths of its reads, for
    the message)."""
    deeper = [p for p in paths if len(p) > depth]
    if not deeper:
        return
    name = decl.label or decl.name
    keys = {p[depth][0] for p in deeper}
    gate = " / ".join(sorted(shown[k] for k in keys))
    if len(deeper) < len(paths) or len(keys) > 1:
        raise ModelError(f"{name} is defined both inside and outside the gate on {gate}.")
    key = keys.pop()
    count, switch = conditions[key]
    cases = {p[depth][1] for p in deeper}
    if any(isinstance(c, str) for c in cases):  # a Switch's body is in every case: the
        # variable, without the Switch's axis, is the same in each, so it leaves the Switch
        # and must leave every gate inside it too
        _check_exit(decl, deeper, depth + 1, conditions, shown, outer=shown[key],
                    reads=reads)
        return
    if switch is None and cases != set(range(count)):
        missing = sorted(set(range(count)) - cases)
        if outer is not None:
            raise ModelError(
                f"{name} is defined inside ff.Switch({outer}), without its axis, and there "
                f"inside the gate on {gate} but not in all of its cases: one {name} "
                f"for every case of {outer} must be defined in every case of {gate}. "
                f"Define {name} in every case of {gate}, or outside the Switch.")
        _refuse_another_gate(name, key, cases, deeper, depth, reads, shown)
        raise ModelError(f"{name} is defined inside the gate on {gate} but not in its "
                         f"case(s) {missing}, and is read outside it: define {name} in every "
                         "case, or read it only inside.")
    for case in cases:
        _check_exit(decl, [p for p in deeper if p[depth][1] == case], depth + 1, conditions,
                    shown, outer, reads)


def _refuse_another_gate(name: str, key: tuple, cases: set, defs: list[Path], depth: int,
                         reads: list[Path], shown: Mapping[tuple, str]) -> None:
    """ModelError, where every read of the variable ``name`` outside the gate ``key`` that
    defines it (in ``cases``, at ``depth`` of its definitions' paths ``defs``) sits in
    another gate on the same condition and case, inside gates that the defining one is
    not in (``ff.IfNot(v2)`` defining v9, read in ``ff.IfNot(v1)`` around another
    ``ff.IfNot(v2)``: the model API accepts the read, as that branch holds there too):
    the gates' clones are per gate, so say so and what to write; nothing otherwise."""
    inside = {p[:depth + 1] for p in defs}
    outside = [r for r in reads if r[:depth + 1] not in inside]
    around: list[str] = []
    for r in outside:
        at = next((i for i, (k, c) in enumerate(r) if k != key and k[1] == key[1]
                   and c in cases), None)
        if at is None:
            return
        around += [shown[k] for k, _ in r[:at] if shown.get(k) and (k, _) not in
                   defs[0][:depth]]
    if not outside or not around:
        return
    gate, others = shown[key], ", ".join(dict.fromkeys(around))
    raise ModelError(
        f"{name} is defined inside a gate on {gate} and read inside another gate on "
        f"{gate}, in the gate(s) on {others}: a variable of a gate's case is read only "
        f"inside the gate block that defines it (each gate on {gate} inside the gates on "
        f"{others} is another block, with its own clones).  Read {name} in the block "
        f"that defines it (the gates on {others} inside it), or define it in the block "
        f"that reads it (one variable per case of {others}).")
