"""Dependency information of a message program, read from operator annotations.

Input: the flat message program (``messages.py``).  Output: a ``DependencyGraph`` with a
node per message update (labelled by the message it writes) and, per input, an edge
whose kinds come from the operator's annotations — Required from ``skip_if_uniform`` and
``proper``, Trigger from ``trigger``, Fresh from ``fresh``, Preferred (a penalty) from
``uniform_penalty`` — and, for variable nodes, the
rule of the algorithm: under VMP a message from a factor triggers the variable's
marginal, which triggers every message the variable sends (Infer.NET's VMP: a
variable-to-factor message always reflects the latest factor-to-variable messages).
Nothing here knows an algorithm beyond what the statements and registry say.

Parallel sweeps (EP).  A variable whose messages come from several uses over a plate it
does not have (``skill[winner]`` and ``skill[loser]`` over games) can be swept in two ways:
sequentially (its posterior refreshed after each use's messages come in, so the second
use's factors see the first's update) or in parallel (every message into it computed from
one posterior per sweep, as hand-written vectorised EP does).  Sequentially, the messages
out of one factor are computed from cavities of different ages (the winner's from this
sweep, the loser's from the last), which excites a slowly decaying mode; in parallel they
are consistent.  EP therefore sweeps such a variable (a *hub*) in parallel: every read
inside the hub's loop along the generative direction (posterior -> message out to a use
-> factor operator -> a child's posterior, not the messages back to a definition) is made
Fresh (seed 000: "A must be up to date
before executing B"), so each factor's messages read cavities brought up to date from
the same posteriors, and the scheduler (``greedy``) defers the messages into a hub until
everything reading its current messages has run.  VMP keeps its sequential sweep: it is
coordinate ascent, whose bound never falls.  Where the Fresh reads would close a cycle,
the loop stays sequential.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from factorflow.codegen.names import display, forward, marginal
from factorflow.errors import UnsupportedFactorError
from factorflow.factors.registry import FACTORS, Operator
from factorflow.factors.variable import NODE_ANNOTATIONS
from factorflow.ir import Program, Ref, Stmt, refs_in
from factorflow.transforms.dependencies import (
    READS,
    USES,
    Dep,
    DependencyGraph,
    strong_components,
    topological_order,
)


def _vmp_read(posterior: bool) -> Dep:
    """How a VMP factor reads a message that is not its own target's.

    VMP is coordinate ascent (see factors.variable.NODE_ANNOTATIONS): messages through
    derived variables are brought up to date before they are read (Fresh).  A posterior
    q is always the latest (Trigger) and is read plainly, but must have been computed
    once (Required; the first is its prior's message).  An operator reads its own
    target's message (for a shape, or a selector's own weights) plainly: Fresh or
    Required through it would close a cycle through the target."""
    return Dep.DEPENDENCY | (Dep.REQUIRED if posterior else Dep.FRESH)


def _operator(stmt: Stmt) -> Operator:
    factor, algorithm, target = stmt.param("operator")
    return FACTORS[factor].operators[(algorithm, target)]


def _operator_kind(stmt: Stmt, arg: str, posterior: bool) -> Dep:
    """The kind of the edge by which an operator reads ``arg``; ``posterior``: the value
    is a (non-derived) variable's posterior sent to the factor."""
    algorithm, target = stmt.param("operator")[1:]
    op = _operator(stmt)
    kind = Dep.DEPENDENCY
    if algorithm == "vmp" and arg != target and arg not in op.block:
        kind |= _vmp_read(posterior)
    if arg in op.skip_if_uniform or arg in op.proper:
        kind |= Dep.REQUIRED
    if arg in op.trigger:
        kind |= Dep.TRIGGER
    if arg in op.fresh:
        kind |= Dep.FRESH
    if arg in op.uniform_penalty:
        kind |= Dep.PREFERRED
    return kind


_KIND = {"dependency": Dep.DEPENDENCY, "required": Dep.DEPENDENCY | Dep.REQUIRED,
         "trigger": Dep.DEPENDENCY | Dep.TRIGGER,
         "required trigger": Dep.DEPENDENCY | Dep.REQUIRED | Dep.TRIGGER,
         "fresh": Dep.DEPENDENCY | Dep.FRESH,
         "required fresh trigger": Dep.DEPENDENCY | Dep.REQUIRED | Dep.FRESH | Dep.TRIGGER,
         "required fresh": Dep.DEPENDENCY | Dep.REQUIRED | Dep.FRESH}


def _node_kind(stmt: Stmt, arg: str, derived: bool, posterior: bool) -> Dep:
    if stmt.param("to_gate"):  # an evidence term sent to a gate's case: as a factor
        evidence = stmt.param("evidence")
        vmp = (evidence[1] if evidence else stmt.param("algorithm")) == "vmp"
        # (under VMP it needs every message it reads: an average log factor of a
        # uniform message, a clone not yet entered, is −inf, and the case's weight NaN)
        return _vmp_read(posterior) | Dep.REQUIRED if vmp else Dep.DEPENDENCY
    update = stmt.op.removeprefix("Variable.")
    if update == "use" and arg != "marginal":
        return Dep.DEPENDENCY
    if update == "marginal" and arg == "def":
        update = "marginal.def"
    elif update in ("use", "backward") and derived:
        update += ".derived"
    return _KIND[NODE_ANNOTATIONS[(stmt.param("algorithm"), update)]]


def describe(stmt: Stmt, program: Program) -> str:
    """One line saying which message a statement computes, for schedule listings."""
    out = stmt.outputs[0].var
    label = program.decl(out).label
    if stmt.param("to_gate"):
        return f"{label}: evidence of {stmt.op.split('.')[0]} to its case"
    if stmt.param("operator"):
        factor, algorithm, target = stmt.param("operator")
        return f"{label}: {factor}.{target} ({algorithm.upper()})"
    return f"{label} ({stmt.param('algorithm', '').upper()})"


def dependency_graph(program: Program, user_initialized: frozenset[str] = frozenset(),
                     parallel: bool = True) -> tuple[DependencyGraph, dict[str, Stmt]]:
    """The graph of ``program``'s message updates and the statement behind each node.

    ``outputs`` are the marginals and every message an evidence statement reads;
    ``user_initialized`` (variable names) marks those variables' marginals;
    ``parallel=False`` sweeps every hub sequentially (see the module docstring).
    """
    stmts = [s for s in program.body if isinstance(s, Stmt)]
    derived = {d.name for d in program.decls if d.attr("derived")}
    posteriors = {o.var for s in stmts
                  if s.op in ("Variable.marginal", "Variable.use", "Variable.backward")
                  and s.param("target") not in derived for o in s.outputs}
    writer: dict[str, list[str]] = {}  # a message -> the labels of the statements writing it
    for s in stmts:
        for o in s.outputs:
            writer.setdefault(o.var, []).append(node_label(s))
    nodes = tuple(node_label(s) for s in stmts if s.outputs)
    edges: dict[tuple[str, str], Dep] = {}
    consistent: set[tuple[str, str]] = set()  # EP reads made Fresh in a parallel sweep
    outputs: set[str] = set()
    for s in stmts:
        if not s.outputs:  # evidence: its inputs are outputs of the schedule
            outputs.update(label for _, v in s.inputs if isinstance(v, Ref)
                           for n in refs_in(v) if n in writer for label in writer[n])
            continue
        label = node_label(s)
        if s.op == "Variable.marginal":
            outputs.add(label)
        for arg, value in s.inputs:
            if not isinstance(value, Ref):
                continue
            for name in refs_in(value):
                if name not in writer:
                    continue
                kind = (_operator_kind(s, arg, name in posteriors) if s.param("operator") else
                        _node_kind(s, arg, s.param("target") in derived,
                                   name in posteriors))
                for source in writer[name]:
                    key = (source, label)
                    edges[key] = edges.get(key, Dep(0)) | kind
                    if _generative_read(s, arg):
                        consistent.add(key)
    _prefer_behind_posteriors(stmts, writer, edges)
    _prefer_priors_before_proper_reads(stmts, writer, edges)
    _refresh_before_block_updates(stmts, writer, edges)
    inits = frozenset(marginal(v) for v in user_initialized) & set(nodes)
    descriptions = {node_label(s): describe(s, program) for s in stmts if s.outputs}
    hubs = {node_label(s): (s.param("algorithm"), plates) for s in stmts
            if (plates := _hub_plates(s))}
    gated = {node_label(s) for s in stmts if s.outputs and _gated(s)}
    sweeps = _sweeps(nodes, edges, consistent if parallel else set(), hubs, gated)
    no_init = frozenset(node_label(s) for s in stmts if s.outputs and s.param("operator")
                        and _operator(s).no_init)
    return (DependencyGraph(nodes, edges, frozenset(outputs), inits, descriptions, sweeps,
                            no_init, _unaffected(stmts, writer)),
            {node_label(s): s for s in stmts if s.outputs})


def _prefer_behind_posteriors(stmts: list[Stmt], writer: dict[str, list[str]],
                              edges: dict[tuple[str, str], Dep]) -> None:
    """Under VMP a factor reads a variable's posterior q, which is uniform until the
    messages from the variable's other factors come in (seed 000's second case: VMP
    BernoulliFromBeta, whose message to p from a uniform q of the sample is a poor
    start).  An operator's ``uniform_penalty`` on such an argument therefore prefers
    those messages computed first: Preferred edges (a penalty, not a read) from their
    writers to the operator, in place."""
    by_output = {o.var: s for s in stmts for o in s.outputs}
    for s in stmts:
        if not s.param("operator") or s.param("operator")[1] != "vmp":
            continue
        penalised = _operator(s).uniform_penalty
        for arg, value in s.inputs:
            if arg not in penalised or not isinstance(value, Ref):
                continue
            for name in refs_in(value):
                for message in _posterior_inputs(by_output, name):
                    for source in writer.get(message, ()):
                        key = (source, node_label(s))
                        edges[key] = edges.get(key, Dep(0)) | Dep.PREFERRED


@dataclass(frozen=True)
class _Block:
    """A VMP block update (``_refresh_before_block_updates``) and the edges around it."""

    update: str  # its label
    roots: frozenset[str]  # the posteriors of the non-derived variables its q comes from
    chain: frozenset[tuple[str, str]]  # the reads from the roots to the update
    back: frozenset[str]  # the update and the statements from it back to the roots


def _refresh_before_block_updates(stmts: list[Stmt], writer: dict[str, list[str]],
                                  edges: dict[tuple[str, str], Dep]) -> None:
    """A VMP block update reads its own target's posterior q and divides out the message
    it sent last (``previous``: ``factors.plate_sum``), so it sees the variable's other
    messages as they were when q was last computed.  Coordinate ascent needs them as
    they are now (seed 000: the update needs them Fresh), but a Fresh read of q closes a
    cycle through the update's own message into q.  q / previous does not depend on
    that message, so the edges say it as follows (in place):

    * the *chain* of q: the posterior of each non-derived variable the target is
      computed from (itself, or ``x`` for the target ``c * x``: its *roots*), and the
      reads from them to the update (through derived variables' posteriors and the
      deterministic operators between them).  Each read triggers the next, so the
      update reads q computed after every change to the roots;
    * the update's own way *back* to the roots (through derived variables' messages and
      deterministic operators): Trigger all along, and into the roots Trigger in place
      of Fresh (q is computed again after the update, before anything reads it, and
      may be computed before it from the update's last message);
    * the roots' other messages each trigger their root, and are Fresh for the update
      (brought up to date first: a message from a parent whose posterior has changed),
      except those on another block update's way back (their triggers already bring
      q up to date after that update; Fresh both ways would close a cycle).

    The block updates are taken in program order, each with its edges where the graph
    stays schedulable with them (``_schedulable``), else left with its old schedule
    where its q comes from one variable, and refused by name where it comes from
    several (``_refuse_not_ascent``: no coordinate ascent; a linear combination of
    several variables never gets here, ``transforms.linear_sums`` splits its sum).
    The edges close no cycle of Trigger or of Fresh edges (every VMP operator annotated
    Trigger sends to a derived variable, whose posterior and backward message read
    their messages Fresh, not Trigger, off a chain; a Fresh path from an update runs
    along its way back, whose reads into the roots lose Fresh here, and a root's
    posterior is read by Trigger, not Fresh); but they can close a cycle of reads whose
    statements a Trigger each makes invalid: with ``ff.sum(x * w, n)`` the messages to
    x and to w would trigger their posteriors, and each reads the other's posterior
    (ScheduleError before sum17, a ScheduleWarning before sum18;
    ``test_regressions17_sumref``).  With x and w per element ``transforms.linear_sums``
    writes that sum as one ``PlateInner``, whose block updates of x and of w read each
    other's posterior directly (no derived product on their chains): schedulable."""
    by_label = {node_label(s): s for s in stmts if s.outputs}
    derived = {s.param("target") for s in stmts if s.op == "Variable.marginal"
               and s.param("derived")}

    def writers(value: object) -> list[str]:
        return [w for n in (refs_in(value) if isinstance(value, Ref) else ())
                for w in writer.get(n, ())]

    readers: dict[str, list[str]] = {}  # a statement -> those reading its message
    for t in stmts:
        if t.outputs:
            for _, value in t.inputs:
                for x in writers(value):
                    readers.setdefault(x, []).append(node_label(t))
    kept: list[_Block] = []
    for block in (b for s in stmts if (b := _block(s, by_label, derived, writers, readers))):
        if _schedulable(_block_edges(kept + [block], by_label, writers, edges)):
            kept.append(block)
        elif len(block.roots) > 1:  # (a sum of sums of one variable reaches its optimum)
            _refuse_not_ascent(by_label[block.update], block.roots, by_label)
    edges.update(_block_edges(kept, by_label, writers, edges))


def _refuse_not_ascent(update: Stmt, roots: frozenset[str],
                       by_label: dict[str, Stmt]) -> None:
    """UnsupportedFactorError naming the ``ff.sum`` whose VMP block update ``update``
    cannot be scheduled as coordinate ascent (its refresh edges would leave no
    schedule): its array is computed from several latent variables (``roots``) in a way
    ``transforms.linear_sums`` does not write as one-variable block updates, e.g.
    ``ff.sum(x * w, n)`` with w latent without the plate (per element, it is one
    ``PlateInner``).  Before, a ScheduleWarning, and the run's bound fell and its
    posteriors went NaN (test_regressions17_sumref: 138 of 256 small x * w models, w per
    element, did not converge, the bound falling by up to 5e4)."""
    names = sorted({display(by_label[r].param("target")) for r in roots})
    raise UnsupportedFactorError(
        f"{update.provenance or update.op}: VMP cannot update the elements of this "
        f"ff.sum's array, computed from several latent variables ({', '.join(names)}) "
        "other than as a linear combination of them or a product of two of them per "
        "element, as coordinate ascent (the bound "
        "would fall and the run diverge).  Sum a linear combination (ff.sum(x + z, n), "
        "ff.sum(x, n) + ff.sum(z, n)); for a product by a latent w without the plate, "
        "write w * ff.sum(x, n); else make the summed array a latent with its own "
        "precision, e.g. p = ff.Gaussian('p', x * w, precision=100.0), and sum p.")


def _schedulable(edges: dict[tuple[str, str], Dep]) -> bool:
    """Whether ``edges`` leave a schedule: no cycle of Trigger edges, none of Fresh
    edges, and no cycle of reads joining statements that a Trigger can each make invalid
    (each with a Trigger edge into it): were they all invalid at once, each would wait
    for another to be recomputed first, and the scheduler could run none of them."""
    triggered = {b for (_, b), k in edges.items() if k & Dep.TRIGGER}
    return _acyclic(edges, Dep.TRIGGER) and _acyclic(edges, Dep.FRESH) and _acyclic(
        {key: k for key, k in edges.items() if key[0] in triggered and key[1] in triggered},
        READS)


def _block(s: Stmt, by_label: dict[str, Stmt], derived: set[str],
           writers: Callable[[object], list[str]], readers: dict[str, list[str]]
           ) -> _Block | None:
    """The block update ``s`` with its roots, chain and way back; None where ``s`` is no
    VMP block update or its message does not reach q through derived variables."""
    op = s.param("operator")
    if not op or op[1] != "vmp" or not s.param("previous"):
        return None
    me = node_label(s)

    def deterministic(stmt: Stmt) -> bool:
        op = stmt.param("operator")
        return bool(op) and op[1] == "vmp" and FACTORS[op[0]].deterministic

    roots: set[str] = set()
    chain: set[tuple[str, str]] = set()
    todo = [(w, me) for w in writers(dict(s.inputs).get(op[2]))]
    seen: set[str] = set()
    while todo:  # the chain of q, back from the update to its roots
        label, reader = todo.pop()
        if reader != me:
            chain.add((label, reader))
        if label in seen:
            continue
        seen.add(label)
        w = by_label[label]
        if w.op in ("Variable.use", "Variable.backward"):
            todo += [(x, label) for x in writers(dict(w.inputs).get("marginal"))]
        elif w.op == "Variable.marginal" and w.param("target") in derived:
            todo += [(x, label) for x in writers(dict(w.inputs).get("def"))]
        elif w.op == "Variable.marginal":
            roots.add(label)
        elif deterministic(w):
            todo += [(x, label) for _, v in w.inputs for x in writers(v)
                     if by_label[x].op == "Variable.use"]
        else:
            return None
    targets = derived | {by_label[r].param("target") for r in roots}
    back = {me}  # the update's way back to the roots
    frontier = [me]
    while frontier:
        for y in readers.get(frontier.pop(), ()):
            t = by_label[y]
            if y not in roots and y not in back and (
                    (t.op == "Variable.backward" and t.param("target") in derived)
                    or (deterministic(t) and t.param("target") in targets)):
                back.add(y)
                frontier.append(y)
    if not any(x in back for r in roots for _, v in by_label[r].inputs for x in writers(v)):
        return None  # (its message does not reach q: nothing to refresh)
    return _Block(me, frozenset(roots), frozenset(chain), frozenset(back))


def _block_edges(blocks: list[_Block], by_label: dict[str, Stmt],
                 writers: Callable[[object], list[str]],
                 edges: dict[tuple[str, str], Dep]) -> dict[tuple[str, str], Dep]:
    """``edges`` with the edges of ``blocks`` added (``_refresh_before_block_updates``)."""
    out = dict(edges)

    def add(key: tuple[str, str], kind: Dep) -> None:
        out[key] = out.get(key, Dep(0)) | kind

    backs = set().union(*(b.back for b in blocks))
    for b in blocks:
        for key in b.chain:
            add(key, Dep.TRIGGER)
        for x in b.back:
            for y in b.back:
                if (x, y) in edges and edges[x, y] & READS:
                    add((x, y), Dep.TRIGGER)
        for root in b.roots:
            for x in (w for _, v in by_label[root].inputs for w in writers(v)):
                add((x, root), Dep.TRIGGER)
                if x in b.back:
                    out[x, root] &= ~Dep.FRESH
                elif x not in backs:
                    add((x, b.update), Dep.FRESH)
    return out


def _acyclic(edges: dict[tuple[str, str], Dep], kind: Dep) -> bool:
    """Whether the edges of ``edges`` carrying ``kind`` form no directed cycle."""
    labels = sorted({x for key in edges for x in key})
    pos = {label: i for i, label in enumerate(labels)}
    succ: list[list[int]] = [[] for _ in labels]
    for (a, b), k in edges.items():
        if k & kind:
            succ[pos[a]].append(pos[b])
    return topological_order(succ) is not None


def _prefer_priors_before_proper_reads(stmts: list[Stmt], writer: dict[str, list[str]],
                                       edges: dict[tuple[str, str], Dep]) -> None:
    """An EP operator annotated ``proper`` for an argument cannot run on a uniform
    message there (seed 000: "we don't want the schedule to start by throwing an
    exception").  Its Required edge makes the initialization run that message, but not
    what it is computed from: a message read along the way that has not run yet is
    read uniform, and the uniform passes on (a copy of a uniform message, a Gaussian
    with a uniform mean).  So the reads by which the message descends from the priors
    (a message out of a variable from its posterior, a posterior from its definition's
    message, a definition's message from its parents' messages) are Preferred in
    place: the initialization computes those first where it can, and the proper
    message starts from the priors (a variable drawn in every case of a Switch, read
    in a Case gate: its exit message from the cases' posteriors)."""
    by_output = {o.var: s for s in stmts for o in s.outputs}
    seen: set[str] = set()
    for s in stmts:
        op = s.param("operator")
        if not op or op[1] != "ep" or not _operator(s).proper:
            continue
        todo = [(v, node_label(s)) for arg, v in s.inputs
                if arg in _operator(s).proper and isinstance(v, Ref)]
        while todo:
            value, reader = todo.pop()
            for name in refs_in(value) if isinstance(value, Ref) else ():
                w = by_output.get(name)
                if w is None or name not in writer:
                    continue
                for source in writer[name]:
                    key = (source, reader)
                    if not edges.get(key, Dep(0)) & Dep.REQUIRED:
                        edges[key] = edges.get(key, Dep(0)) | Dep.PREFERRED
                if name in seen:
                    continue
                seen.add(name)
                inputs = dict(w.inputs)
                label = node_label(w)
                if w.op == "Variable.use":
                    todo.append((inputs.get("marginal"), label))
                elif w.op == "Variable.marginal":
                    todo.append((inputs.get("def"), label))
                elif (w.param("operator") and w.param("operator")[1] == "ep"
                      and name == forward(w.param("target"))):
                    todo += [(v, label) for _, v in w.inputs]


def _posterior_inputs(by_output: dict[str, Stmt], name: str) -> list[str]:
    """For a VMP message ``name`` sent by a variable to one of its factors (its posterior
    q), the messages into q from the variable's other factors; else nothing."""
    send = by_output.get(name)
    if send is None or send.op not in ("Variable.backward", "Variable.use"):
        return []
    q = dict(send.inputs).get("marginal")
    post = by_output.get(q.var) if isinstance(q, Ref) else None
    if post is None or post.op != "Variable.marginal":
        return []
    own = "def" if send.op == "Variable.backward" else f"use{send.param('use')}"
    return [n for key, m in post.inputs if key != own and isinstance(m, Ref)
            for n in refs_in(m)]


def _unaffected(stmts: list[Stmt], writer: dict[str, list[str]]) -> frozenset[tuple[str, str]]:
    """Under EP, (message in on an edge, message out on that edge): the message out is
    the posterior divided by the message in, so it does not change when the message in
    does, although the posterior between them does (Infer.NET's EP reads the cavity it
    sent).  A factor's messages therefore invalidate none of the messages it reads, and
    its operators can all run from one state (sharing a Fresh buffer)."""
    pairs: set[tuple[str, str]] = set()
    for s in stmts:
        if s.param("algorithm") != "ep" or s.op not in ("Variable.use", "Variable.backward"):
            continue
        own = dict(s.inputs).get("use" if s.op == "Variable.use" else "def")
        if isinstance(own, Ref):
            pairs.update((w, node_label(s)) for w in writer.get(own.var, ()))
    return frozenset(pairs)


#: the kinds of use whose elements gather or broadcast a variable over a plate it lacks
_SPREAD = ("gather", "broadcast")


def _hub_plates(stmt: Stmt) -> str:
    """For a posterior with two or more uses over plates its variable lacks, those
    plates (``"v_game"``); otherwise the empty string."""
    if stmt.op != "Variable.marginal":
        return ""
    uses = stmt.param("uses", ())
    spread = [i for i, use in enumerate(uses) if use and use[0] in _SPREAD]
    if len(spread) < 2:
        return ""
    own = set(stmt.param("plates", ()))
    use_plates = stmt.param("use_plates", ())
    found = dict.fromkeys(p for i in spread if i < len(use_plates)
                          for p in use_plates[i] if p not in own)
    return ", ".join(found) or "its uses"


def _gated(stmt: Stmt) -> bool:
    """Whether a statement belongs to a gate's machinery (parallel sweeps through gates
    are not attempted)."""
    op = stmt.param("operator")
    return bool(stmt.param("to_gate") or stmt.param("mask")
                or (op and op[0].startswith("Gate")))


def _generative_read(stmt: Stmt, arg: str) -> bool:
    """Whether ``stmt`` reads ``arg`` along the generative direction under EP: an operator
    reading a message into its factor, a message out reading the posterior, a posterior
    reading the message from its definition."""
    if stmt.param("to_gate"):
        return False
    if stmt.param("operator"):
        return stmt.param("operator")[1] == "ep"
    if stmt.param("algorithm") != "ep":
        return False
    update = stmt.op.removeprefix("Variable.")
    return (update, arg) in (("use", "marginal"), ("marginal", "def"))


def _sweeps(nodes: tuple[str, ...], edges: dict[tuple[str, str], Dep],
            consistent: set[tuple[str, str]], hubs: dict[str, tuple[str, str]],
            gated: set[str]) -> dict[str, tuple[str, str]]:
    """How each hub is swept, ``(mode, why)``; adds Fresh to the ``consistent`` reads
    inside the loops of the hubs swept in parallel (in place).  EP sweeps in parallel
    unless the loop holds gates, those Fresh reads would form a cycle, or there are
    none (``consistent`` empty: the caller asks for sequential sweeps); VMP
    sequentially."""
    if not hubs:
        return {}
    pos = {label: i for i, label in enumerate(nodes)}
    succ: list[list[int]] = [[] for _ in nodes]
    for (a, b), kind in edges.items():
        if kind & USES:
            succ[pos[a]].append(pos[b])
    comp = strong_components(succ)
    out: dict[str, tuple[str, str]] = {}
    for h, (algorithm, plates) in hubs.items():
        if algorithm != "ep":
            out[h] = ("sequential", f"over {plates}: coordinate ascent, each posterior "
                      "from the latest of the others")
    for c in dict.fromkeys(int(comp[pos[h]]) for h in hubs if h not in out):
        inside = [key for key in consistent if comp[pos[key[0]]] == c == comp[pos[key[1]]]]
        fresh: list[list[int]] = [[] for _ in nodes]
        for (a, b), kind in edges.items():
            if kind & Dep.FRESH or (a, b) in inside:
                fresh[pos[a]].append(pos[b])
        mine = [h for h in hubs if h not in out and comp[pos[h]] == c]
        why = ("the loop holds gates" if any(comp[pos[g]] == c for g in gated) else
               "parallel sweeps could not be scheduled" if not inside else
               "consistent cavities would need a cycle of Fresh reads"
               if topological_order(fresh) is None else "")
        if why:
            out.update((h, ("sequential", f"over {hubs[h][1]}: {why}")) for h in mine)
            continue
        for key in inside:
            edges[key] |= Dep.FRESH
        out.update((h, ("parallel", f"over {hubs[h][1]}: every message into it computed "
                        "from one posterior per sweep")) for h in mine)
    return out


def node_label(stmt: Stmt) -> str:
    """The message a statement writes, with the slot for a gate clone's element."""
    out = stmt.outputs[0]
    slots = [str(i) for i in out.index if isinstance(i, int) and not isinstance(i, bool)]
    label = f"{out.var}[{', '.join(slots)}]" if slots else out.var
    for cond, value, negated in stmt.param("mask", ()):  # one writer per observed branch
        label += f" if {'not ' if negated else ''}{cond.var}" + (
            f" == {value}" if value is not None else "")
    return label
