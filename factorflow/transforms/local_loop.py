"""Local loops: variational EM's E-step inside each sweep of message passing.

``model.compile("vmp", local=("theta", "z"), local_iterations=100, local_tolerance=1e-3,
local_restart=True)``: each sweep of the iteration loop first iterates the updates of the
*local* variables named (those of one document or datum: LDA's θ and z) with every other
posterior held fixed, then updates the others once (LDA's topics φ): the batch
variational EM of Blei, Ng & Jordan (2003) and scikit-learn's batch
``LatentDirichletAllocation``, where plain VMP updates each variable once per sweep.

The loop's statements are split three ways, by the dependencies between them (an input
that an operator reads for its shape alone, ``Operator.shape_only``, is not one):

* **local**: those on a path from a local variable's posterior back to one, through
  messages and the gate transform's own variables but not through the posterior of
  another model variable (LDA: θ's and z's updates and the messages between them);
* **after**: what reads a local statement's value from the same sweep, and what reads
  that, in their order (LDA: the topic-word counts and φ).  A local statement among them
  (a gate's copy of a global variable that the sweep recomputes once that variable has
  moved, as a mixture's precisions before its means) runs in the inner loop and again
  after it;
* **before**: the rest that the inner loop reads from the same sweep (held fixed while
  it runs: LDA's E[log φ[k, w_n]] for every token, once per sweep), in their order; what
  is in none of the three goes after, in its order.

The sweep becomes ``before``, then the inner loop (a ``While`` nested in the loop's body:
at most ``local_iterations`` passes over the local statements, stopping early once the
local posteriors change by less than ``local_tolerance``, relative: |Δη| / (1 + |η|)),
then ``after``.  With ``local_stop="each"`` each element of the local posteriors a
pass starts from (LDA: each document's θ; ``_stopping_alone``) stops on its own once its
change is below ``local_tolerance``: from then on it keeps its posterior (a mask over the
plate, not a loop over its elements), and the inner loop ends once every element has
stopped or after ``local_iterations`` passes — each document's E-step stopping alone,
as in scikit-learn's batch LDA.  With ``local_restart`` each sweep first puts the local
messages back to where the run starts them and runs their initialisation again (each
document's q(θ) from its prior, q(z) from that and the current φ), as variational EM's
E-step does; without it the local loop goes on from where the last sweep left it.

Guarantees: the new sweep with one pass and no restart leaves every message with the
same value as the original sweep, sweep after sweep — checked by running both orders on
symbols (each statement's result a symbol of the statement and the symbols it reads; the
operators are pure), a ``ScheduleError`` where no such split exists — so
``local_iterations=1`` gives bit-identical results; under VMP every update of the inner
loop is the same coordinate-ascent step as before, so the bound never falls where it
did not before (with ``local_stop="each"`` too: an element that has stopped keeps its
posterior, the others take the same steps).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from factorflow.codegen.names import marginal
from factorflow.errors import ScheduleError
from factorflow.factors.registry import FACTORS
from factorflow.ir import Program, Stmt, While, refs_in


@dataclass(frozen=True)
class LocalOptions:
    """The local loop's options: the program names of the local variables, the most
    passes per sweep, the tolerance (None: always ``iterations`` passes) and restart."""

    variables: tuple[str, ...]
    iterations: int = 1
    tolerance: float | None = None
    restart: bool = False
    #: "all": the loop stops once no local posterior moves; "each": each element stops
    #: on its own (``_stopping_alone``)
    stop: str = "all"
    #: the model's names, for messages
    labels: tuple[str, ...] = ()


def local_loops(program: Program, options: LocalOptions | None) -> Program:
    """``program`` (scheduled) with each iteration loop's local statements in an inner
    loop (see the module docstring); unchanged when ``options`` is None."""
    if options is None:
        return program
    body = tuple(_split(node, program, options) if isinstance(node, While) else node
                 for node in program.body)
    if body == program.body:
        names = ", ".join(repr(n) for n in options.labels or options.variables)
        raise ScheduleError(f"local={names}: no iteration loop updates these variables "
                            "(their posteriors are exact after one pass), so there is "
                            "nothing to iterate locally; leave local= out.")
    return replace(program, body=body, _by_name={})


def _internal(program: Program, var: str) -> bool:
    """Whether ``var`` is the gate transform's own (a clone, exit or case variable)."""
    d = program.decl(var)
    return any(d.attr(a) is not None for a in ("gate", "clone_of", "exit_of", "local_of"))


def _split(loop: While, program: Program, options: LocalOptions) -> While:
    """``loop`` as before + inner loop + after (module docstring); unchanged where it
    updates none of the local variables."""
    body = loop.body
    if not all(isinstance(s, Stmt) for s in body):
        return loop
    stmts: list[Stmt] = [s for s in body if isinstance(s, Stmt)]
    local_marginals = {marginal(v) for v in options.variables}
    targets = [s.param("target") if s.op == "Variable.marginal" else None for s in stmts]
    is_local = [s.op == "Variable.marginal" and s.outputs[0].var in local_marginals
                for s in stmts]
    if not any(is_local):
        return loop
    blocks = [t is not None and not is_local[i] and not _internal(program, t)
              for i, t in enumerate(targets)]
    writers: dict[str, list[int]] = {}
    for i, s in enumerate(stmts):
        for o in s.outputs:
            writers.setdefault(o.var, []).append(i)
    reads = [sorted({j for x in _reads(s) for j in writers.get(x, ())}) for s in stmts]
    readers: list[list[int]] = [[] for _ in stmts]
    for i, js in enumerate(reads):
        for j in js:
            readers[j].append(i)

    def closure(edges: list[list[int]]) -> set[int]:
        seen = {i for i, loc in enumerate(is_local) if loc}
        todo = list(seen)
        while todo:
            for j in edges[todo.pop()]:
                if j not in seen and not blocks[j]:
                    seen.add(j)
                    todo.append(j)
        return seen

    local = closure(readers) & closure(reads)
    same_sweep: list[set[int]] = [set() for _ in stmts]  # what i reads from this sweep
    for (i, _), (j, now) in _sources(stmts, list(range(len(stmts)))).items():
        if now:
            same_sweep[i].add(j)
    # after: what reads the local posteriors in the same sweep, and what reads that; a
    # local statement among them (a gate's copy of a global variable, recomputed once
    # that variable has moved) runs in the inner loop and again after it
    after: set[int] = set()
    for i in range(len(stmts)):
        if same_sweep[i] & (after if i in local else local | after):
            after.add(i)
    # before: the rest that the inner loop reads from earlier in the same sweep
    before: set[int] = set()
    todo = [i for i in local if i not in after]
    while todo:
        for j in same_sweep[todo.pop()]:
            if j not in local and j not in after and j not in before:
                before.add(j)
                todo.append(j)
    rest = [i for i in range(len(stmts)) if i not in before and (i not in local or i in after)]
    inner_order = sorted(local)
    _check_same_values(stmts, sorted(before), inner_order, rest, options)
    init_local = tuple(s for s in loop.init if isinstance(s, Stmt) and
                       any(o.var in {x for i in local for x in _writes(stmts[i])}
                           for o in s.outputs)) if options.restart else ()
    restart = _restarted(init_local, stmts, local) if options.restart else ()
    each = _stopping_alone(stmts, inner_order, local_marginals) if options.stop == "each" \
        else ()
    inner = While(tuple(stmts[i] for i in inner_order), init_local, options.iterations,
                  options.tolerance, restart, each)
    return replace(loop, body=tuple(stmts[i] for i in sorted(before)) + (inner,)
                   + tuple(stmts[i] for i in rest))


def _stopping_alone(stmts: list[Stmt], order: list[int], local_marginals: set[str]
                    ) -> tuple[str, ...]:
    """``local_stop="each"``: the local posteriors whose elements stop one by one — those
    a pass computes without reading another local posterior from the same pass (LDA's
    θ, from the last pass's q(z)), in the pass's order.  The others are computed from
    them within the pass and are neither frozen nor watched: one that reads only stopped
    elements and fixed posteriors is recomputed unchanged (LDA's q(z), from θ and the
    topics: a document whose θ has stopped keeps its tokens' q(z), as each document
    stops alone in scikit-learn's E-step); one that also reads another follower from the
    last pass (a mixture's means and precisions, both after z) may still move when the
    loop ends."""
    same_sweep: dict[int, set[int]] = {i: set() for i in order}
    for (i, _), (j, now) in _sources(stmts, order).items():
        if now:
            same_sweep[i].add(j)
    out: list[str] = []
    for i in order:
        s = stmts[i]
        if not (s.op == "Variable.marginal" and s.outputs[0].var in local_marginals):
            continue
        seen, todo = set(), list(same_sweep[i])
        while todo:
            j = todo.pop()
            if j not in seen:
                seen.add(j)
                todo.extend(same_sweep[j])
        if not any(_writes(stmts[j]) & local_marginals for j in seen):
            out.append(s.outputs[0].var)
    return tuple(out)


def _reads(s: Stmt) -> set[str]:
    """The names whose values ``s`` reads (an operator reading the message it sent last:
    its own; not the inputs its operator reads for their shape alone)."""
    key = s.param("operator")
    op = FACTORS[key[0]].operators.get((key[1], key[2])) if isinstance(key, tuple) and \
        len(key) == 3 and key[0] in FACTORS else None
    shape_only = op.shape_only if op is not None else frozenset()
    return {x for name, value in s.inputs if name not in shape_only
            for x in refs_in(value)} | (_writes(s) if s.param("previous") else set())


def _writes(s: Stmt) -> set[str]:
    return {o.var for o in s.outputs}


def _restarted(init: tuple[Stmt, ...], stmts: list[Stmt], local: set[int]
               ) -> tuple[str, ...]:
    """The local messages that the restart's initialisation reads before it writes them:
    they go back to their starting values (uniform, or the user's initialisation)."""
    assigned = {x for i in local for x in _writes(stmts[i])}
    written: set[str] = set()
    out: list[str] = []
    for s in init:
        for x in sorted(_reads(s)):
            if x in assigned and x not in written and x not in out:
                out.append(x)
        written |= _writes(s)
    return tuple(out)


def _sources(stmts: list[Stmt], order: list[int]) -> dict[tuple[int, str], tuple[int, bool]]:
    """For each statement and name it reads: the statement whose value it reads in a sweep
    run in ``order``, and whether that one ran earlier in the same sweep (else the last
    sweep's value)."""
    last: dict[str, int] = {}
    for i in order:
        for x in _writes(stmts[i]):
            last[x] = i
    out: dict[tuple[int, str], tuple[int, bool]] = {}
    current: dict[str, int] = {}
    for i in order:
        for x in _reads(stmts[i]):
            if x in current:
                out[(i, x)] = (current[x], True)
            elif x in last:
                out[(i, x)] = (last[x], False)
        for x in _writes(stmts[i]):
            current[x] = i
    return out


def _check_same_values(stmts: list[Stmt], before: list[int], inner: list[int],
                       after: list[int], options: LocalOptions) -> None:
    """ScheduleError unless ``before + inner + after`` (the inner loop run once) leaves
    every message with the same value as the original sweep, sweep after sweep: each
    statement's run is a symbol made of the statement and the symbols it reads (the
    operators are pure), and three sweeps of each order must give the same symbols."""
    ids: dict[tuple[int, tuple[int, ...]], int] = {}

    def sweeps(order: list[int]) -> list[dict[str, int]]:
        state: dict[str, int] = {}
        out = []
        for _ in range(3):
            for i in order:
                key = (i, tuple(state.get(x, -1) for x in sorted(_reads(stmts[i]))))
                value = ids.setdefault(key, len(ids))
                for x in _writes(stmts[i]):
                    state[x] = value
            out.append(dict(state))
        return out

    for old, new in zip(sweeps(list(range(len(stmts)))), sweeps(before + inner + after),
                        strict=True):
        moved = sorted(x for x in old if old[x] != new.get(x))
        if moved:
            names = ", ".join(repr(n) for n in options.labels or options.variables)
            raise ScheduleError(
                f"local={names}: the sweep cannot be split into the local updates and the "
                f"others without changing what they compute ({moved[0]} would differ); "
                "name a set of variables whose updates the others do not interleave with.")
