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

from factorflow.codegen.names import marginal
from factorflow.factors.registry import FACTORS, Operator
from factorflow.factors.variable import NODE_ANNOTATIONS
from factorflow.ir import Program, Ref, Stmt, refs_in
from factorflow.transforms.dependencies import (
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
