"""The gate transform (Infer.NET's GateTransform, seed 001): gates become gate factors.

Input: the model IR, whose ``If`` blocks are gates (``ir.nodes.If``: an *if* on a boolean
or its complement, a *case* ``x == literal``, a *switch* ``x == j`` directly in a ``for j``
over the values of ``x``).  For a random condition ``c`` the output has

* ``c__cases[.., c__cases__k] = Gate.Cases(selector=c)`` before the first ``If`` on ``c``
  (before the ``for j`` of a switch, whose range is then the case axis), declared random
  bool with attrs ``derived``, ``do_not_send_evidence`` and ``gate``;
* every statement of the bodies inside ``if c__cases[.., k]`` (consecutive ones share one;
  a ``for`` keeps its place and its body is wrapped);
* each random variable defined outside and read inside (an *enter* variable) read through
  clones (attrs ``clone_of``, ``gate``, ``derived``):
  ``x__cond_c[.., x__cond_c__k] = Gate.EnterPartial(cases=c__cases[..], value=x, indices:
  (k, ..))`` for the cases that read it; in a switch ``Gate.Enter(cases, value)`` for all
  cases, read through ``x__cond_c_j = Copy(value=x__cond_c[.., j])``; for an expression
  indexed by the condition itself (``a[i]`` under ``i == 2`` or ``i == j``)
  ``Gate.EnterOne(cases, value, index: k)``.  A clone sits in the loops its expression
  needs: the body's own ``for`` loops when those are the outer ones, else fresh loops
  before the gate (``enter_whole_arrays``: whole arrays before the gate, the seed's
  alternative method).  The reads of one array entering a gate (EnterPartial, and Enter
  in a switch) are grouped into disjoint index sets first (``gate_analysis``), at every
  level of nested gates: a read whose set is larger than itself (``array[0]`` beside
  ``array[i]``, a gather ``array[idx[n]]``) reads the clone of its set at its own
  indices (a nested gate's clone is of the outer set's clone), a gather, and in a switch
  every read of a set, through a per-case ``Copy`` of the clone's slot (for a gather in a
  switch, the case axis last: ``copy[idx[n], k]``); a gather that some gate cannot read
  so (a gate inside a loop: its clone of the whole array is one per iteration) is
  first copied out, ``x__d[loops] = Copy(value=x[d])`` before the outermost gate it
  enters, and read as any array over those loops;
* each variable defined in every case (an *exit* variable, ``derived`` from then on)
  defined per case in ``x__cond_c[.., k]`` (attrs ``exit_of``, ``gate``; in a switch through
  a local, attr ``local_of``, and ``Copy``, which makes the array ``derived``: under VMP
  it has no posterior of its own) and merged after the last branch by
  ``x = Gate.Exit(cases=c__cases[..], values=x__cond_c[..])``;
* a variable that ``gate_order`` wrote once per case of a selector (drawn in a gate on an
  exit of the selector's gates) defined again after the program, its copies stacked on
  the selector's case axis: ``x = Gate.ExitGiven(cases, given=e__cond_c[..],
  values=..)``, its posterior given the gate's case (``gate_order.exits_given``).

A deterministic (observed or constant) condition keeps its ``If`` around the converted
block: nothing is cloned, no evidence is collected.

Guarantees: no ``If`` on a random variable remains but those on cases-array elements; new
names are ``names.fresh`` names derived from the variable they are about (never a message
tag, see ``factorflow.codegen.names``); new case axes are added to ``program.ranges``; the
input is unchanged.  ModelError, naming the variable and the gate, for a condition neither
boolean nor discrete, a case value out of range, a switch loop whose size is not the
variable's, a random condition inside a loop it does not depend on, or a variable defined
inside a gate but not in all its cases and read outside; under VMP
(``GateOptions.algorithm``), for a statement reading an exit variable beside its
selector (or another exit of it) outside the selector's gates, once gates on selectors
have been moved outside gates on their exits, or written once per case of the selector
(``gate_order``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from factorflow.codegen.names import display, fresh, split_derived, token
from factorflow.errors import ModelError
from factorflow.ir import For, If, Node, Program, Ref, Stmt, VarDecl, walk
from factorflow.ir.printer import format_ref
from factorflow.transforms.gate_analysis import (
    analyze_gates,
    case_of,
    condition_key,
    show_ref,
)
from factorflow.transforms.gate_blocks import (
    Clone,
    Cond,
    ForB,
    Frame,
    Gen,
    IfB,
    flat,
    freeze,
    wrap,
)
from factorflow.transforms.gate_order import exits_given, selectors_outside


@dataclass(frozen=True)
class GateOptions:
    """``enter_whole_arrays``: the seed's "alternative method" (see the module docstring)."""

    name: str = "gates"
    enter_whole_arrays: bool = False
    #: the inference algorithm, when known: under VMP a statement that reads an exit
    #: variable beside its selector outside the selector's gates is refused
    #: (``gate_order.check_joint_reads``)
    algorithm: str | None = None


def gates(program: Program, options: GateOptions = GateOptions()) -> Program:
    """The program with its gates converted (see the module docstring); gates on a
    selector inside gates on its exit variables are moved outside them first
    (``gate_order``)."""
    program = selectors_outside(program, refuse=options.algorithm == "vmp")
    return exits_given(_Gates(program, options).run())


class _Gates:
    """One run of the pass; its mutable state lives only here."""

    def __init__(self, program: Program, options: GateOptions) -> None:
        self.p, self.opt = program, options
        self.a = analyze_gates(program)
        self.decls = {d.name: d for d in program.decls}
        self.sizes = dict(program.ranges)
        self.taken = set(self.decls) | set(self.sizes)
        self.new_decls: list[VarDecl] = []
        self.new_ranges: list[str] = []
        self.conds: dict[tuple, Cond] = {}
        #: id of an observed condition's open branch -> the variables defined inside it
        self.det_defined: dict[int, set[str]] = {}
        #: a switch case's local: the observed-branch frames around each of its definitions
        self.det_paths: dict[tuple, list[tuple[Frame, ...]]] = {}
        self.copy_of: dict[int, tuple] = {}  # id of a case's exit copy -> (clone, case)
        self.levels: list[tuple[Cond, int | str, Frame]] = []
        self.frames: list[Frame] = [Frame("root", [])]
        self.partials: list[Clone] = []
        #: the depth of each random variable's home (``gate_analysis``), and of the
        #: gathers materialised before a gate (``_gathered``: that of the array gathered)
        self.home: dict[str, int] = dict(self.a.home)
        self.gathers: dict[tuple, Ref] = {}

    def run(self) -> Program:
        self._block(self.p.body)
        exiting = {v for v, keys in self.a.exits.items() if keys}
        decls = tuple(replace(d, attrs=d.attrs + (("derived", True),))
                      if d.name in exiting and not d.attr("derived") else d
                      for d in self.p.decls)
        for c in self.partials:
            self.sizes[c.axis] = len(c.used)
        return replace(self.p, ranges=self.p.ranges + tuple((r, self.sizes[r])
                                                             for r in self.new_ranges),
                       decls=decls + tuple(self.new_decls),
                       body=freeze(self.frames[0].items), _by_name={})

    # ----- names, declarations, positions -----------------------------------------------
    def _fresh(self, base: str, *parts: object) -> str:
        """A new name derived from ``base`` with a tag made of ``parts`` (``names.fresh``)."""
        return fresh(base, token(*parts), self.taken)

    def _show(self, ref: Ref) -> str:
        """``ref`` as the user wrote it (labels, ranges without the user prefix)."""
        return show_ref(ref, self.decls)

    def _axis(self, array: str, size: int) -> str:
        name = self._fresh(array, "k")
        self.sizes[name] = size
        self.new_ranges.append(name)
        return name

    def _declare(self, name: str, domain: str | None, plates: tuple[str, ...],
                 event: int | None, label: str, attrs: tuple) -> None:
        self.new_decls.append(VarDecl(name, "random", domain, plates=plates, event=event,
                                      label=label, attrs=attrs))

    def _mark_derived(self, name: str) -> None:
        """Mark the declared variable ``name`` as derived (a deterministic function of
        other variables: under VMP it has no posterior of its own)."""
        self.new_decls = [replace(d, attrs=d.attrs + (("derived", True),))
                          if d.name == name and not d.attr("derived") else d
                          for d in self.new_decls]

    def _loops(self, upto: int | None = None) -> tuple[str, ...]:
        """The ranges of the ``for`` frames up to frame ``upto`` (all if None)."""
        frames = self.frames if upto is None else self.frames[: upto + 1]
        return tuple(f.node.range for f in frames if f.kind == "for")

    def _outside_det(self, i: int, *needs: str) -> int:
        """Frame ``i``, or the nearest frame around it that is not an observed condition's
        branch, short of one that defines a variable in ``needs`` (it exists only there)."""
        while i > 0 and self.frames[i].kind == "det" and not (
                self.det_defined.get(id(self.frames[i]), set()) & set(needs)):
            i -= 1
        return i

    def _inner(self, m: int) -> int:
        """The innermost frame of level ``m``'s body outside any deeper gate (a deeper
        Switch's loop over its cases belongs to that gate)."""
        if m + 1 < len(self.levels):
            deeper = self.levels[m + 1]
            return self.frames.index(deeper[2]) - (2 if self._switch(m + 1) else 1)
        return len(self.frames) - 1

    def _switch(self, m: int) -> str | None:
        """The loop range of level ``m`` if it is a switch's case (``if c == j`` in ``for
        j``), else None.  Per level, not per condition: an ``ff.Case(z, k)`` written in
        ``ff.Switch(z)`` is lowered to ``if z == k`` after the Switch's loop, and shares
        its condition (one cases array, on the Switch's axis) but is no loop over cases:
        its clones are EnterPartial's, placed and read as in any other case."""
        case = self.levels[m][1]
        return case if isinstance(case, str) else None

    # ----- blocks --------------------------------------------------------------------------
    def _block(self, nodes: tuple[Node, ...]) -> None:
        items = self.frames[-1].items
        for node in nodes:
            if isinstance(node, Stmt):
                self._stmt(node)
            elif isinstance(node, For):
                self._for(node)
            elif isinstance(node, If):
                self._if(node)
            else:  # While: gates are converted before iteration loops exist
                items.append(node)

    def _for(self, node: For) -> None:
        b = ForB(node.range)
        self.frames.append(Frame("for", b.items, b))
        self._block(node.body)
        self.frames.pop()
        self.frames[-1].items.append(b)
        for cond in self.conds.values():
            if cond.switch_for is b:
                self._exit(cond, self.frames[-1].items)

    def _if(self, node: If) -> None:
        decl = self.decls[node.condition.var]
        case, count, switch = case_of(node, decl, self._loops(), self.sizes)
        parent = self.frames[-1].items
        if decl.role != "random":
            b = IfB(self._subst(node.condition)[0], value=node.value, negated=node.negated,
                     wraps=False)
            self.frames.append(Frame("det", b.items, b))
            self._block(node.body)
            self.frames.pop()
            parent.append(b)
            return
        key = condition_key(tuple((c.key, k) for c, k, _ in self.levels), node.condition)
        # a condition defined in a branch of an observed condition is that branch's own
        # (another branch defining it too has other cases and clones: each exists only
        # where its branch holds, so one made in the first would be off in the second)
        home = next((f for f in reversed(self.frames) if f.kind == "det" and
                     node.condition.var in self.det_defined.get(id(f), ())), None)
        # and cases made inside an observed branch (a loop there holds them) are that
        # branch's own: another branch gating on the same condition makes its own
        at = self._outside_det(len(self.frames) - (2 if switch else 1), node.condition.var)
        inside = tuple(id(f) for f in self.frames[:at + 1] if f.kind == "det")
        slot = key + ((id(home),) if home is not None else ()) + inside
        cond = self.conds.get(slot)
        if cond is None:
            cond = self._condition(key, node, count, switch, slot)
        else:  # met before (a Switch's cases): this gate too must sit in z's loops only
            self._check_loops(node.condition, self._loops()[:-1] if switch else self._loops())
            if switch:  # a Switch's body again after ff.Case gates on z inside it (its
                # second loop over the cases), or its first after Case gates opening it:
                # what it defines exits after this loop
                cond.switch_for = self.frames[-1].node
                cond.switch = switch
        level, frame = len(self.levels), Frame("if", [])
        self.levels.append((cond, case, frame))
        self.frames.append(frame)
        self._block(node.body)
        frame.items.extend(self._in_loops(self._under_det(copy), copy)
                           for copy in cond.pending)
        cond.pending.clear()
        self.frames.pop()
        self.levels.pop()
        parent.extend(wrap(frame.items, level, cond.ref(case)))
        if switch is None:
            self._exit(cond, parent)

    def _condition(self, key: tuple, node: If, count: int, switch: str | None,
                   slot: tuple) -> Cond:
        """A new condition (``slot``: its entry in ``self.conds``): its cases array,
        declared and defined before the gate."""
        lhs = node.condition
        cond = self.conds[slot] = Cond(key, lhs, count, switch)
        held = [self.frames.pop()] if switch else []  # a switch's cases sit before its loop
        loops = self._loops()
        self._check_loops(lhs, loops)
        selector = self._ref(lhs, False, "", [])
        cond.cases = self._fresh(lhs.var, *flat(lhs, loops)[1:], "cases")
        # a Switch on the condition met later (ff.Case gates opening its body come
        # before its loop): its loop is the axis every gate on the condition shares
        cond.axis = switch or self.a.conditions[key][1] or self._axis(cond.cases, count)
        cond.plates = loops + (cond.axis,)
        self._declare(cond.cases, "bool", cond.plates, None, f"cases of {self._show(lhs)}",
                      (("derived", True), ("do_not_send_evidence", True),
                       ("gate", format_ref(lhs))))
        prov = next((s.provenance for s, _ in walk(node.body) if s.provenance), "")
        # before the gate, and outside the branches of observed conditions around it
        # (each branch may hold this gate; the cases exist wherever one of them holds)
        self.frames[self._outside_det(len(self.frames) - 1, lhs.var)].items.append(
            Stmt("Gate.Cases", (cond.ref(),), (("selector", selector),), (), prov))
        if held:
            cond.switch_for = held[0].node
            self.frames.extend(held)
        return cond

    def _check_loops(self, lhs: Ref, loops: tuple[str, ...]) -> None:
        """ModelError unless every loop around a gate on ``lhs`` is one its condition
        depends on (or a case loop of a gate around): a Switch is not moved out of a plate
        (``lower._gates_outside_loops``), whether or not a gate on the condition came
        before outside it (whose cases it would otherwise share: fuzz seed 15)."""
        known = {i for c, _, _ in self.levels for i in c.lhs.index + (c.switch,)}
        bad = [r for r in loops if r not in set(lhs.index) | known]
        if bad:
            raise ModelError(f"gate on {self._show(lhs)}: the condition does not depend on "
                             f"the loop over {display(bad[0])}; place the gate outside that "
                             "loop.")

    def _exit(self, cond: Cond, items: list) -> None:
        """``x = Gate.Exit(cases, x_cond)`` for each variable now defined in every case."""
        for c in cond.clones.values():
            if c.kind == "exit" and not c.emitted and (cond.switch or len(c.used) == cond.count):
                c.emitted = True
                self._mark_derived(c.src.var)  # a gate's own variable exiting a nested gate
                node: Any = Stmt("Gate.Exit", (c.src,), (("cases", cond.ref()),
                                                        ("values", c.ref(cond.axis))), (),
                                 c.prov)
                # an array defined in loops inside the gate exits in those loops
                here = self._loops()
                inner = [i for i in c.src.index if isinstance(i, str) and i not in here]
                node = self._exit_under_det(c, node, set(here) | set(inner))
                for r in reversed(inner):
                    node = ForB(r, [node])
                items.append(node)

    def _exit_under_det(self, clone: Clone, node: Any, loops: set[str]) -> Any:
        """A switch's exit of a variable that every case defines only inside the same
        observed-condition branches: inside those branches (where they are off the
        variable does not exist, and neither its exit nor its evidence), as far as their
        conditions are indexed by the loops open there."""
        common = _common_branches([p for (name, _), ps in self.det_paths.items()
                                   if name == clone.name for p in ps])
        for b in reversed(common):
            if not all(i in loops for i in b.condition.index if isinstance(i, str)):
                return node
        for b in reversed(common):
            node = IfB(b.condition, [node], value=b.value, negated=b.negated, wraps=False)
        return node

    def _in_loops(self, node: Any, copy: Stmt) -> Any:
        """``node`` (a case's pending ``copy`` into its clone array) inside loops over
        the local's axes that no loop at the case's frame runs over: a local defined under
        a plate opened in the case, inside a deeper gate (``v19`` in ``ff.Switch(v17[r])``
        in ``ff.Plate(r)`` in ``ff.Switch(v14)``), is copied once the case's body ends,
        outside the plate's loop, which must be opened again (fuzz seed 23: without it the
        copy ran over the case axis only, and its messages lost the plate's axis)."""
        here = set(self._loops())
        value = copy.input("value")
        for r in reversed([i for i in value.index if isinstance(i, str) and i not in here]):
            node = ForB(r, [node])
        return node

    def _under_det(self, copy: Stmt) -> Any:
        """A switch case's copy of a local defined in a case's observed-condition branches,
        inside the branches common to all its definitions: where they are off, the
        variable does not exist in that case (nor its clone's evidence); a local defined
        in every branch (``If``/``IfNot``) is copied wherever the case holds."""
        key = self.copy_of.get(id(copy))
        common = _common_branches(self.det_paths.get(key, []) if key is not None else [])
        node: Any = copy
        for b in reversed(common):
            node = IfB(b.condition, [node], value=b.value, negated=b.negated, wraps=False)
        return node

    # ----- statements and their references -----------------------------------------------
    def _stmt(self, s: Stmt) -> None:
        post: list[Stmt] = []
        inputs = tuple((k, self._ref(v, False, s.provenance, post) if isinstance(v, Ref)
                        else v) for k, v in s.inputs)
        outputs = tuple(self._ref(o, True, s.provenance, post) for o in s.outputs)
        self.frames[-1].items.append(replace(s, inputs=inputs, outputs=outputs))
        self.frames[-1].items.extend(post)
        for f in self.frames:  # what each open observed branch defines (see _outside_det)
            if f.kind == "det":
                self.det_defined.setdefault(id(f), set()).update(o.var for o in s.outputs)

    def _subst(self, ref: Ref) -> tuple[Ref, set[int]]:
        """``ref`` with each index equal to an integer condition replaced by its case (a
        literal, or the switch loop), and the levels whose condition indexed it."""
        hit: set[int] = set()
        index: list[Any] = []
        for item in ref.index:
            for m, (cond, case, _) in enumerate(self.levels):
                if item == cond.lhs and self.decls[cond.lhs.var].domain == "int":
                    hit.add(m)
                    item = case
                    break
            index.append(item)
        return Ref(ref.var, tuple(index)), hit

    def _ref(self, ref: Ref, is_def: bool, prov: str, post: list[Stmt]) -> Ref:
        sub, hit = self._subst(ref)
        if not is_def and self._unserved_gather(sub):
            sub = self._gathered(sub, prov)
        return self._lift(sub, sub.var, is_def, len(self.levels), hit, prov, post)

    def _is_gather(self, ref: Ref) -> bool:
        """Whether ``ref`` reads a random array at indices known before inference (an
        index array given as data or a constant: ``x[d]``)."""
        return self.decls[ref.var].role == "random" and any(
            isinstance(i, Ref) and self.decls[i.var].role != "random"
            and all(isinstance(j, str) for j in i.index) for i in ref.index)

    def _unserved_gather(self, ref: Ref) -> bool:
        """Whether ``ref`` is a gather read inside a gate below its array's home that
        some gate cannot serve from the case copy of its whole array (``_index_set``: a
        gate inside a loop, a switch over the array's own range, an array with more
        axes).  The
        gather's shape is that of its index, which the clone of the expression would not
        know; ``_gathered`` makes it an array of its own first.  A variable exiting one
        of those gates is left to ``_clone``'s refusal."""
        var, depth = ref.var, len(self.levels)
        if not self._is_gather(ref) or depth <= self.home.get(var, 0):
            return False
        levels = range(self.home.get(var, 0), depth)
        if any(self.levels[m][0].key in self.a.exits.get(var, ()) for m in levels):
            return False
        return not all(any(isinstance(i, Ref) for i in self._index_set(
            m, ref, ref.index, var, False)[1].values()) for m in levels)

    def _gathered(self, ref: Ref, prov: str) -> Ref:
        """The gather ``ref`` (``x[d]``, read inside gates below x's home) as a derived
        array of its own, ``x__d[loops] = Copy(value=x[d])``, defined before the outermost
        of those gates (outside observed conditions' branches around it) in the loops the
        read sits in but for the case loops of those gates' switches: it is then read as
        any array over those loops (Infer.NET's GetItems before the gate).  Like a case's
        copy it is the gate transform's own (attr ``local_of``: no posterior of its own in
        the results).  One per gather, place and loops."""
        home = self.home.get(ref.var, 0)
        cond, _, frame = self.levels[home]
        at = self._outside_det(self.frames.index(frame) - (2 if self._switch(home) else 1),
                               ref.var, *(i.var for i in ref.index if isinstance(i, Ref)))
        cases = {self._switch(n) for n in range(home, len(self.levels))}
        open_ = self._loops(at)
        plates = open_ + tuple(r for r in self._loops() if r not in open_ and r not in cases)
        key = (format_ref(ref), plates, id(self.frames[at]))
        if key in self.gathers:
            return self.gathers[key]
        d = self.decls[ref.var]
        name = self._fresh(ref.var, *flat(ref, plates)[1:])
        decl = VarDecl(name, "random", d.domain, plates=plates, event=d.event,
                       label=self._show(ref), attrs=(("local_of", ref.var), ("derived", True)))
        self.new_decls.append(decl)
        self.decls[name] = decl
        self.home[name] = home
        out = self.gathers[key] = Ref(name, plates)
        node: Any = Stmt("Copy", (out,), (("value", ref),), (), prov)
        for r in reversed(plates[len(open_):]):
            node = ForB(r, [node])
        self.frames[at].items.append(node)
        return out

    def _lift(self, ref: Ref, var: str, is_def: bool, depth: int, hit: set[int], prov: str,
              post: list[Stmt], read: tuple | None = None) -> Ref:
        """``ref`` as read or defined inside the first ``depth`` gates around it: cloned for
        each gate below the variable's home (``gate_analysis``), outermost first.  At each
        gate the clone is that of the disjoint index set of the original read (``read``,
        ``ref.index`` at first), itself lifted through the gates around, so that the sets of
        a nested gate (a subset of the reads of the gates around it, so never larger than
        their sets) are read from the clones of the outer ones."""
        if self.decls[var].role != "random" or depth <= self.home.get(var, 0):
            return ref
        read = ref.index if read is None else read
        m = depth - 1
        cond, switch = self.levels[m][0], self._switch(m)
        if switch is None:
            one = m in hit
            cover, subst = self._index_set(m, ref, read, var, is_def or one)
            src = self._lift(cover, var, is_def, m, hit, prov, post, read)
        else:  # in a switch an element indexed by the switch's loop enters one case
            src = self._lift(ref, var, is_def, m, hit, prov, post, read)
            one = m in hit or switch in src.index
            cover, subst = self._index_set(m, ref, read, var, is_def or one)
            if cover != ref:
                src = self._lift(cover, var, is_def, m, hit, prov, post, read)
        clone = cond.clones.get(format_ref(src)) or self._clone(m, src, var, one, prov,
                                                                is_def)
        if switch is not None and clone.kind == "enter" and self._shared(m, var, cover):
            # a set's clone in a switch: one copy of the case's slot for all its reads
            gather = any(isinstance(i, Ref) for i in subst.values())
            use = self._case_copy(clone, m, clone.ref(self.levels[m][1]), prov, gather)
        else:
            use = self._use(clone, m, is_def, prov, post)
            if any(isinstance(i, Ref) for i in subst.values()):
                use = self._case_copy(clone, m, use, prov)  # a gather reads a plain array
        return Ref(use.var, tuple(subst.get(i, i) if isinstance(i, str) else i
                                  for i in use.index)) if subst else use

    def _shared(self, m: int, var: str, cover: Ref) -> bool:
        """Whether ``cover`` is the pattern of a disjoint index set of ``var`` at level ``m``
        that other reads share."""
        return cover.var == var and cover.index in self.a.groups.get(
            self.levels[m][0].key, {}).get(var, {}).values()

    def _case_copy(self, clone: Clone, m: int, element: Ref, prov: str,
                   gather: bool = False) -> Ref:
        """The current case's slot of ``clone`` (``element``) as an array of its own,
        copied once per case at the top of the gate's body (the seed's switch rows: "make
        a copy"), so that a gather by known indices, or in a switch every read of a
        disjoint index set, can read it.  In a switch, for a ``gather`` the case axis
        comes last (the copy gathered along its first axis, the whole array the gate
        entered: ``copy[idx[n], k]``), else the copy's axes run in the loops' order."""
        cond, case, frame = self.levels[m]
        switch = self._switch(m)
        here = self._loops(self.frames.index(frame))
        key = ("slot", case) + (("gather",) if gather and switch else ())
        local = clone.locals.get(key)
        if local is None:
            d = self.decls[clone.var]
            plates = clone.plates
            if switch and gather:
                plates = plates + (cond.axis,)
            elif switch:  # a copy per case, its axes in the order of the loops
                plates = tuple(p for p in here if p in plates or p == cond.axis) + tuple(
                    p for p in plates if p not in here)
            local = clone.locals[key] = Ref(
                self._fresh(*split_derived(clone.name), case), plates)
            self._declare(local.var, d.domain, plates, d.event,
                          f"{d.label or clone.var} in case {display(str(case))} of "
                          f"{self._show(self.levels[m][0].lhs)}",
                          (("local_of", clone.var), ("derived", True)))
            node: Any = Stmt("Copy", (local,), (("value", element),), (), prov)
            for r in reversed([p for p in clone.plates if p not in here]):
                node = ForB(r, [node])  # in loops over the clone's whole axes
            frame.items.append(node)
        return local

    def _index_set(self, m: int, ref: Ref, read: tuple, var: str, skip: bool
                   ) -> tuple[Ref, dict]:
        """The expression whose clone ``ref`` is read from at level ``m`` — the pattern of
        the disjoint index set of the original read ``read`` (``gate_analysis``:
        ``array[0]`` beside ``array[i]`` reads the clone of ``array[i]``) — and what
        replaces the set's loops in it.  Only reads entering a gate (EnterPartial, and
        Enter in a switch) are grouped, and only through loops inside the gate (a loop
        around it is another clone per iteration); a gather only of a one-axis array,
        outside loops."""
        cond, _, frame = self.levels[m]
        pattern = None if skip or ref.var != var or var in self.a.exits \
            and cond.key in self.a.exits[var] else \
            self.a.groups.get(cond.key, {}).get(var, {}).get(read)
        if pattern is None:
            return ref, {}
        subst = {c: i for c, i in zip(pattern, ref.index, strict=True) if c != i}
        # a switch's own loop is no loop around the gate for a gather, but a set over it
        # cannot be read there (inside the switch it is the case's element)
        loops = self._loops(self.frames.index(frame))
        around = tuple(r for r in loops if r != cond.switch)
        gather = any(isinstance(i, Ref) for i in subst.values())
        if set(subst) & set(loops) or gather and (around or len(pattern) > 1):
            return ref, {}  # a gather is read as array[index] of a whole array only
        return Ref(var, pattern), subst

    def _clone(self, m: int, src: Ref, var: str, one: bool, prov: str, is_def: bool = True
               ) -> Clone:
        """The clone array of ``src`` for gate level ``m``, declared and placed."""
        cond, case, frame = self.levels[m]
        switch = self._switch(m)
        kind = ("exit" if cond.key in self.a.exits.get(var, ()) else "one" if one
                else "enter" if switch else "partial")
        if kind == "exit" and not is_def:
            # a variable the gate defines, read there through another index than its
            # definition's (a gather v[idx]): it would become a second exit of it
            defined = next((c.src for c in cond.clones.values()
                            if c.kind == "exit" and c.var == var), None)
            shown = f" (defined as {self._show(defined)})" if defined is not None else ""
            raise ModelError(
                f"{prov or 'a statement'}: {self._show(src)} reads "
                f"{self.decls[var].label or var}{shown} inside the gate on "
                f"{self._show(cond.lhs)} that defines it, through other indices than its "
                "definition; read it there as it is defined, or after the gate.")
        gate = self.frames.index(frame)
        # the frame holding the gate (or its loop), outside observed conditions' branches
        top = self._outside_det(gate - (2 if switch else 1), cond.lhs.var, src.var)
        body = [i for i in range(gate + 1, self._inner(m) + 1) if self.frames[i].kind == "for"]
        ranges = [self.frames[i].node.range for i in body]
        need = [] if kind == "exit" or self.opt.enter_whole_arrays else [
            r for r in ranges if r in src.index]
        if kind == "one" and switch and need != ranges:
            # loops inside the switch that the element does not need (a plate opened in
            # the case): the clone sits outside them and their uses broadcast it
            at, fresh = ((body[len(need) - 1] if need else gate), []) \
                if need == ranges[: len(need)] else (gate, need)
        elif kind == "one" and switch:
            at, fresh = self._inner(m), []
        elif not switch and need == ranges[: len(need)]:
            at, fresh = (body[len(need) - 1] if need else top), []
        else:
            at, fresh = top, need
        loops = self._loops(at) + tuple(fresh)
        whole = tuple(dict.fromkeys(i for i in src.index if isinstance(i, str)
                                    and i not in loops))
        name = self._fresh(src.var, *flat(src, loops)[1:], "cond",
                           *flat(cond.lhs, cond.plates[:-1]))
        axis = self._axis(name, 0) if kind == "partial" else "" if kind == "one" else cond.axis
        clone = cond.clones[format_ref(src)] = Clone(kind, name, src, loops + whole, axis,
                                                        var=var, prov=prov)
        d = self.decls[var]
        attrs = (("exit_of", var),) if kind == "exit" else (("clone_of", var), ("derived", True))
        self._declare(name, d.domain, clone.plates + ((axis,) if axis else ()), d.event,
                      f"{d.label or var} in the gate on {self._show(cond.lhs)}",
                      (("gate", cond.cases),) + attrs)
        if kind == "exit":
            return clone  # merged by Gate.Exit after the gate's last branch
        value = (("cases", cond.ref()), ("value", src))
        op = {"partial": "Gate.EnterPartial", "enter": "Gate.Enter", "one": "Gate.EnterOne"}

        def make() -> Stmt:  # made at the end: EnterPartial's indices grow with each case
            params = {"partial": (("indices", tuple(clone.used)),),
                      "one": (("index", case),)}.get(kind, ())
            return Stmt(op[kind], (clone.ref(axis or None),), value, params, prov)

        if kind == "partial":
            self.partials.append(clone)
        node: Any = make() if kind == "one" and switch else Gen(m, make)
        for r in reversed(fresh):
            node = ForB(r, [node])
        self.frames[at].items.append(node)
        return clone

    def _use(self, clone: Clone, m: int, is_def: bool, prov: str, post: list[Stmt]) -> Ref:
        """The reference to ``clone`` in the current case of level ``m``; records the cases
        an EnterPartial reads and those an exit variable is defined in."""
        cond, case, _ = self.levels[m]
        if (clone.kind == "partial" or is_def) and case not in clone.used:
            clone.used.append(case)
        if clone.kind == "partial":
            return clone.ref(clone.used.index(case))
        if clone.kind == "one":
            return clone.ref()
        if self._switch(m) is None:
            return clone.ref(case)
        local = clone.locals.get(case)  # in a switch: a local copy of the case's element
        if is_def and clone.kind != "enter":  # the observed branches it is defined under
            level_frame = self.frames.index(self.levels[m][2])
            self.det_paths.setdefault((clone.name, case), []).append(
                tuple(f for f in self.frames[level_frame + 1:] if f.kind == "det"))
        # an exit variable read, not defined, in a switch's case: defined by ff.Case gates
        # on the condition outside the switch's loop (or opening its body), it is read
        # as an entered value is, from its clone's slot for the case (it was taken for
        # a definition: a second one, a silent wrong answer)
        copied_in = clone.kind == "enter" or clone.kind == "exit" and not is_def
        if local is None:
            d = self.decls[clone.var]
            at = self._inner(m)
            if copied_in:  # an entered value is copied in wherever the case
                # holds, not only in the observed branch that reads it first (oracle: a
                # Switch whose body is ff.Case gates on an observed z6 lost y7 under EP)
                at = self._outside_det(at, clone.var)
            here = self._loops(at)
            # an entered array's axes that no loop here runs over (its own plates, read
            # whole by a deeper Switch): the local copy keeps them, copied in their loops
            whole = tuple(p for p in clone.plates if p not in here) if copied_in else ()
            local = clone.locals[case] = Ref(self._fresh(*split_derived(clone.name), case),
                                             here + whole)
            # derived: a copy of an entered value, or a deterministic variable's own
            # definition in the case (under VMP its message to the factor defining it is
            # its children's, not its posterior: that would count the factor again)
            self._declare(local.var, d.domain, local.index, d.event,
                          f"{d.label or clone.var} in case {display(str(case))} of "
                          f"{self._show(cond.lhs)}",
                          (("local_of", clone.var),) + (
                              (("derived", True),) if copied_in
                              or d.attr("derived") else ()))
            if copied_in:
                node: Any = Stmt("Copy", (local,), (("value", clone.ref(case)),), (), prov)
                for r in reversed(whole):
                    node = ForB(r, [node])
                self.frames[at].items.append(node)
            else:  # defined here: copied into the clone array once defined
                copy = Stmt("Copy", (clone.ref(case),), (("value", local),), (), prov)
                self.copy_of[id(copy)] = (clone.name, case)
                self._mark_derived(clone.name)  # a Copy defines the array: derived (VMP)
                # after the statement; but after the whole case when the definition is
                # inside an observed condition's branches (each branch defines the local:
                # copied once, wherever the condition holds) or a deeper gate
                level_frame = self.frames.index(self.levels[m][2])
                inline = m + 1 == len(self.levels) and not any(
                    f.kind == "det" for f in self.frames[level_frame + 1:])
                (post if inline else cond.pending).append(copy)
        return local


def _common_branches(paths: list[tuple[Frame, ...]]) -> list[IfB]:
    """The observed-condition branches (outermost first) that every path of frames
    opens, in the same frames."""
    common: list[IfB] = []
    for frames in zip(*paths, strict=False):
        if any(f is not frames[0] for f in frames):
            break
        common.append(frames[0].node)
    return common
