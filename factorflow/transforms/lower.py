"""Lower a ``Model`` to the statement IR (MSL): declarations and factor calls in ``for``s.

Guarantees: one ``Stmt`` per model statement, in model order, nested in ``For`` blocks for
its plates (consecutive statements share blocks); every IR name follows
``factorflow.codegen.names``: each variable, range and ``ff.Data`` gets a unique user name
(``v_mean``), an index or array constant a name derived from the variable it belongs to
(``v_x__mean``, ``v_a__index``), a switch's new range ``v_z__cases``; the user's name is kept
as the declaration's label.  Array constants and observed values are declared (role
constant/observed) and bound by name in the returned ``Bindings``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from factorflow.codegen.names import USER_PREFIX, display, fresh, identifier, sanitize
from factorflow.errors import ModelError
from factorflow.factors.registry import FACTORS
from factorflow.ir import Const, Program, Ref, Stmt, VarDecl, nest
from factorflow.model.chains import Table, check_complete
from factorflow.model.core import Data, FactorCall, GateFrame, Indexed, Model, Range, Variable
from factorflow.model.factories import event_shape
from factorflow.model.gates import never_holds, same_branch


@dataclass
class Bindings:
    """What a lowered program needs at run time: values of constants, observed and Data."""

    names: dict[str, str] = field(default_factory=dict)  # model name -> IR name
    values: dict[str, Any] = field(default_factory=dict)  # IR name -> array (or None)
    data: dict[str, str] = field(default_factory=dict)  # Data name -> IR name
    #: Data IR name -> domains of the factor arguments it is given to
    data_domains: dict[str, set[str]] = field(default_factory=dict)
    variables: dict[str, Variable] = field(default_factory=dict)  # IR name -> variable


def lower(model: Model) -> tuple[Program, Bindings]:
    """The model IR of ``model``, and the bindings of its constants and data."""
    check_complete(model)
    taken: set[str] = set()
    b = Bindings()
    decls: list[VarDecl] = []
    ranges = tuple((identifier(r.name, taken), r.size) for r in model.ranges.values())
    rname = {r.name: ident for r, (ident, _) in zip(model.ranges.values(), ranges,
                                                     strict=True)}
    sizes = dict(ranges)

    for d in model.data.values():
        ident = identifier(d.name, taken)
        b.data[d.name] = ident
        b.values[ident] = None if d.value is None else np.asarray(d.value)
        decls.append(VarDecl(ident, "constant", label=d.name, attrs=(("data", d.name),)))
    # where each variable is defined (a refusal after its statement was dropped, as in a
    # branch that cannot run, still names it)
    where = {id(call.output): call.provenance for call in model.statements
             if call.output is not None and call.provenance}
    for v in model.variables.values():
        ident = identifier(v.name, taken)
        b.names[v.name] = ident
        b.variables[ident] = v
        role = "observed" if v.is_observed else "random"
        attrs: tuple = (("derived", True),) if v.derived else ()
        if id(v) in where:
            attrs += (("where", where[id(v)]),)
        if isinstance(v.observed, Data):
            attrs += (("data", v.observed.name),)
        elif v.is_observed:
            b.values[ident] = v.observed
        decls.append(VarDecl(ident, role, v.domain, plates=tuple(rname[p.name]
                                                                   for p in v.plates),
                             event=v.size, label=v.name, attrs=attrs))

    def innermost(shape: tuple[int, ...], plates: tuple[str, ...], domain: str
                  ) -> tuple[str, ...]:
        """The innermost plates of ``plates`` an array of ``shape`` is over (its batch
        shape is theirs), or ().  Such an array runs over them, so that loops opened
        inside them (a Switch's) align it; any other broadcasts."""
        batch = shape[: len(shape) - len(event_shape(domain, 1))]
        own = plates[len(plates) - len(batch):] if 0 < len(batch) <= len(plates) else ()
        return own if tuple(sizes[p] for p in own) == batch else ()

    def operand(value: Any, plates: tuple[str, ...], domain: str, owner: str, arg: str
                ) -> Const | Ref:
        """The IR operand for argument ``arg`` of a statement about the IR name ``owner``."""
        if isinstance(value, Variable):
            return Ref(b.names[value.name], tuple(rname[p.name] for p in value.plates))
        if isinstance(value, Data):
            b.data_domains.setdefault(b.data[value.name], set()).add(domain)
            # a value over the innermost plates: a use of its own that runs over them,
            # as a constant array's (below), so that a Switch's loops align it; with no
            # value yet, inside a Switch, over all of them (a value over fewer is aligned
            # as NumPy broadcasts it, by align_plates)
            own = (innermost(np.shape(value.value), plates, domain) if value.value is not None
                   else plates if in_switch[0] else ())
            if not own:
                return Ref(b.data[value.name])
            ident = fresh(owner, arg, taken)
            decls.append(VarDecl(ident, "constant", domain if event_shape(domain, 1)
                                 else None, plates=own, label=value.name,
                                 attrs=(("data", value.name),)))
            return Ref(ident, own)
        if isinstance(value, Indexed) and isinstance(value.base, Table):
            # ff.Constant(values)[z] inside ff.Switch(z): a constant over z's cases
            idx = value.index
            ident = fresh(b.names[idx.name], "table", taken)
            b.values[ident] = value.base.values
            decls.append(VarDecl(ident, "constant", domain, plates=(case_range[id(idx)],),
                                 label=f"ff.Constant indexed by {idx.name}"))
            idx_plates = tuple(rname[p.name] for p in idx.plates)
            if isinstance(idx.observed, np.ndarray):  # an observed condition: a gather
                index = fresh(b.names[idx.name], "index", taken)
                b.values[index] = np.asarray(idx.observed, int)
                decls.append(VarDecl(index, "constant", "int", plates=idx_plates,
                                     label=f"{idx.name} as an index"))
                return Ref(ident, (Ref(index, idx_plates),))
            return Ref(ident, (Ref(b.names[idx.name], idx_plates),))
        if isinstance(value, Indexed):
            idx = value.index
            if isinstance(idx, Variable):  # array[z] inside ff.Switch(z): indexed by z
                return Ref(b.names[value.base.name],
                           (Ref(b.names[idx.name], tuple(rname[p.name] for p in idx.plates)),))
            if isinstance(idx, Data):
                index_ref = Ref(b.data[idx.name])
            else:
                ident = fresh(b.names[value.base.name], "index", taken)
                b.values[ident] = np.asarray(idx, int)
                decls.append(VarDecl(ident, "constant", "int", plates=plates,
                                     label=f"index into {value.base.name}"))
                index_ref = Ref(ident, plates)
            return Ref(b.names[value.base.name], (index_ref,))
        arr = np.asarray(value)
        if arr.ndim == 0:
            return Const(arr.item())
        ident = fresh(owner, arg, taken)
        b.values[ident] = arr
        own = innermost(arr.shape, plates, domain)
        # over plates with an event axis (a row of probabilities per element): its
        # domain tells the generated code which trailing axes are the event's
        decls.append(VarDecl(ident, "constant", domain if own and event_shape(domain, 1)
                             else None, plates=own, label=f"{arg} of {_label(owner, decls)}",
                             attrs=(("shape", arr.shape),)))
        return Ref(ident, own)

    switch_range = _switch_ranges(model, rname, b.names, taken)
    case_range = {id(f.condition): switch_range[id(f)][0] for call in model.statements
                  for f in call.frames if isinstance(f, GateFrame) and f.kind == "switch"}
    ranges += tuple((name, size) for name, size in dict(switch_range.values()).items()
                    if name not in dict(ranges))

    stmts: list[tuple[tuple, Stmt]] = []
    in_switch = [False]  # whether the statement operand() builds runs in a Switch's loop
    for call in _live_statements(model):
        plates = tuple(rname[p.name] for p in call.plates)
        frames: list[tuple] = []
        switched: dict[str, GateFrame] = {}  # user range -> the Switch looping over it
        opened: dict[str, Range] = {}  # plates opened around the frame
        for f in call.frames:
            if isinstance(f, Range):
                opened[rname[f.name]] = f
                if rname[f.name] in switched:
                    g = switched[rname[f.name]]
                    raise ModelError(
                        f"{call.provenance or 'a statement'}: ff.Plate({f.name}) is opened "
                        f"inside {g.describe()}, which loops over {f.name} itself (an array "
                        f"over {f.name} is indexed by {g.condition.name} inside it); open "
                        "the plate outside the Switch.")
                frames.append(("for", rname[f.name]))
                continue
            cond = Ref(b.names[f.condition.name], tuple(rname[p.name]
                                                          for p in f.condition.plates))
            if f.kind == "switch" and f.condition.is_observed:
                continue  # each element's case is its observed value: array[z] gathers
            if f.kind == "switch" and _picked(f, call.frames):
                continue  # ff.Case(z, k) inside ff.Switch(z): the statement is case k's
            if f.kind == "switch":
                loop = switch_range[id(f)][0]
                around = (f"ff.Plate({opened[loop].name})" if loop in opened
                          else switched[loop].describe() if loop in switched else None)
                if around is not None:  # one loop variable cannot stand for two indices
                    shown = opened[loop].name if loop in opened else display(loop)
                    raise ModelError(
                        f"{call.provenance or 'a statement'}: {f.describe()} loops over "
                        f"{shown} (an array over {shown} is indexed by "
                        f"{f.condition.name}) inside {around}, which loops over {shown} "
                        f"too; index by {f.condition.name} an array over another ff.Range "
                        "of the same size.")
                switched[loop] = f
                frames.append(("for", loop))
                frames.append(("if", cond, loop, False, id(f)))
            elif not _implied(f, call.frames):
                frames.append(("if", cond, f.value, f.negated, id(f)))
        masks = {id(g) for g in call.frames
                 if isinstance(g, GateFrame) and g.condition.is_observed}
        in_switch[0] = bool(switched)
        stmts.append((_gates_outside_loops(frames, masks),
                      _statement(call, plates, operand, b)))
    return Program(sanitize(model.name), ranges, tuple(decls), nest(stmts)), b


def _implied(frame: GateFrame, frames: tuple) -> bool:
    """Whether an enclosing branch of ``frames`` on the same condition selects the same
    value as ``frame`` (``ff.If(c)`` inside ``ff.If(c)``): the inner one adds nothing."""
    outer = frames[:frames.index(frame)]
    return not frame.condition.is_observed and any(
        isinstance(g, GateFrame) and same_branch(g, frame) for g in outer)


def _picked(switch: GateFrame, frames: tuple) -> bool:
    """Whether an ``ff.Case`` / ``ff.If`` on ``switch``'s condition, inside it or around
    it (``ff.Switch(z)`` inside ``ff.Case(z, k)``), picks one of its cases: the statement
    belongs to that case alone, as if written outside the Switch (``array[z]`` there reads
    the case's element)."""
    return any(isinstance(g, GateFrame) and g.kind != "switch"
               and g.condition is switch.condition for g in frames)


def _live_statements(model: Model) -> list[FactorCall]:
    """The statements that can hold: without those nested in two branches of one latent
    condition that exclude each other (``ff.IfNot(c)`` inside ``ff.If(c)``).  A variable
    defined only there is not part of the model, as one defined only in branches that
    observed conditions exclude (``model.gates.excluded_elements``); on an observed
    condition the gates stay, and do the same."""
    return [call for call in model.statements if not never_holds(call.frames)]


def _switch_ranges(model: Model, rname: dict[str, str], names: dict[str, str],
                   taken: set[str]) -> dict[int, tuple[str, int]]:
    """The loop range of each Switch: one per condition (every Switch on ``z`` loops over
    the same range, so the cases of z have one axis): the range of an array indexed by z
    inside one of them, else a new one."""
    by_condition: dict[int, tuple[str, int]] = {}
    for call in model.statements:
        for f in call.frames:
            if isinstance(f, GateFrame) and f.kind == "switch":
                for v in call.args.values():
                    if isinstance(v, Indexed) and v.index is f.condition and isinstance(
                            v.base, Variable):
                        by_condition.setdefault(id(f.condition), (
                            rname[v.base.plates[0].name], v.base.plates[0].size))
    out: dict[int, tuple[str, int]] = {}
    for call in model.statements:
        for f in call.frames:
            if isinstance(f, GateFrame) and f.kind == "switch" and id(f) not in out:
                if id(f.condition) not in by_condition:
                    by_condition[id(f.condition)] = (
                        fresh(names[f.condition.name], "cases", taken),
                        int(f.condition.size or 0))
                out[id(f)] = by_condition[id(f.condition)]
    return out


#: arguments whose value has an event axis although their domain has none (a Dirichlet's
#: pseudo-counts, one per category): laid out as a vector, so that one given per plate
#: element aligns its plate axes without the event's (fuzz: per-element pseudo-counts
#: inside a Switch in that plate broadcast the categories against the cases)
_EVENT_ARGS = {("Dirichlet", "alpha"): "vector"}


def _statement(call: FactorCall, plates: tuple[str, ...], operand, b: Bindings) -> Stmt:
    outputs = ()
    if call.output is not None:
        outputs = (Ref(b.names[call.output.name], plates),)
    factor = FACTORS[call.factor]
    about = call.output if call.output is not None else next(
        (v for v in call.args.values() if isinstance(v, Variable)), None)
    owner = b.names[about.name] if about is not None else USER_PREFIX + "const"
    inputs = tuple((k, operand(v, plates, _EVENT_ARGS.get((call.factor, k),
                                                          factor.arg(k).domain), owner, k))
                   for k, v in call.args.items())
    return Stmt(call.factor, outputs, inputs, provenance=call.provenance)


def _label(name: str, decls: list[VarDecl]) -> str:
    """The user's label of the declaration ``name`` (the name itself if undeclared)."""
    return next((d.label for d in decls if d.name == name), name)


def _gates_outside_loops(frames: list[tuple], masks: set[int] = frozenset()) -> tuple:
    """The frames with each gate moved outside the plate loops its condition does not
    depend on (``for n: if c: …`` is ``if c: for n: …`` when c has no axis n), so that a
    condition is met where it is defined, as the gate transform requires.  On the way a
    latent condition's gate passes the branches of observed conditions (``masks``: their
    frames' ids) inside such a loop: c, defined outside the loop, is defined outside
    them too, and a mask holds the same inside the gate as around it.  A Switch (its
    loop over the cases, then its ``if``) is kept together and not moved."""
    blocks: list[list[tuple]] = []  # a plate loop, an If/Case, or a Switch's pair
    for f in frames:
        if f[0] == "if" and isinstance(f[2], str) and blocks and blocks[-1][-1][0] == "for" \
                and blocks[-1][-1][1] == f[2]:
            blocks[-1].append(f)
        else:
            blocks.append([f])

    def gate(block: list[tuple]) -> Ref | None:
        return block[-1][1] if block[-1][0] == "if" else None

    for i in range(len(blocks)):
        j = i
        # a Switch stays where it is: moved out of a plate, its clones would be laid out
        # (cases, plate) by its loop and (plate, cases) by the variables it defines; the
        # gate transform then refuses it by name ("place the gate outside that loop")
        while j > 0 and len(blocks[j]) == 1 and gate(blocks[j]) is not None:
            prev, index = blocks[j - 1], gate(blocks[j]).index
            if gate(prev) is None:
                if prev[0][1] in index:
                    break
            elif not (len(prev) == 1 and prev[0][4] in masks
                      and blocks[j][0][4] not in masks and any(
                    gate(b) is None and b[0][1] not in index for b in blocks[:j - 1])):
                break
            blocks[j - 1], blocks[j] = blocks[j], blocks[j - 1]
            j -= 1
    return tuple(f for block in blocks for f in block)


