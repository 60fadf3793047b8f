"""Fused Switch pass (VMP): a Gaussian or VectorGaussian child in every case of a
``Switch`` over a plate becomes one ``SwitchGaussian`` (``factors.fused_switch``) or
``SwitchVectorGaussian`` (``factors.fused_vector_switch``) statement.

Lowered, ``with ff.Switch(z): ff.Gaussian("x", means[z], precision=precs[z],
observed=x)`` inside a plate n is ::

    for n:
        z[n] = Discrete(probs=w)
        for k:
            if z[n] == k:
                x[n] = Gaussian(mean=means[z[n]], precision=precs[z[n]])

and the gate transform makes of it Gate.Cases (an (N, K) Bernoulli), two Gate.EnterOne
clones (an (N, K) Gaussian and an (N, K) Gamma, with their posteriors) and the
Gaussian's evidence to each case: four (N, K) messages a sweep and their normalisations.
Under VMP every message those send is a sum over the data of the responsibilities times
the data's sufficient statistics, so the block is rewritten as ::

    for n:
        z[n] = Discrete(probs=w)
        for k:
            x[n] = SwitchGaussian(selector=z[n], mean=means[k], precision=precs[k], index: k)

whose messages are one (N, K) array of logits to z and (K,)-sized contractions to the
parameters (the same numbers to rounding; see ``factors.fused_switch``).  The
D-dimensional case, ``ff.VectorGaussian("x", means[z], precision=precs[z], observed=x)``
with VectorGaussian means and Wishart precisions (``examples/gaussian_mixture.py``), is
rewritten the same way into ``SwitchVectorGaussian``: its logits are one product of the
data's statistics [1, x, x xᵀ] with the components' expected natural parameters, its
messages to the components (K, D) and (K, D, D) contractions of them with the
responsibilities (``FUSED_OPS``).

A block is fused only when all of these hold, and is left as it is otherwise (the gate
transform then converts it, and reports any error in it):

* the algorithm is VMP (EP's messages through a gate are not these sums);
* the switch is on a random discrete variable ``z[loops]`` indexed by exactly the loops
  around it, not initialised by the user, read by nothing but this one switch (its
  condition and the two indices below); its
  number of values is the size of the switch's range;
* the switch's only statement is a ``Gaussian`` or a ``VectorGaussian`` (``FUSED_OPS``)
  defining an observed x at the same loops (no other factor in the case, no nested
  gate: the block is not inside another ``If``);
* its mean and precision are ``a[z[loops]]`` of random variables over the switch's
  range alone (``means[k]``, ``precs[k]``), other than z and x;
* the fused program can update the posteriors in the gate path's order
  (``_in_gate_order``): the variables z's definition reads are defined before both
  components, and the first-defined component is not initialised by the user, or the
  second can be moved before it (``_gate_order``: one block, nothing between read).

Guarantees: the program is unchanged where nothing is fused; each fused statement keeps
the provenance (the model line) of the statement it replaces.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from factorflow.ir import Program
from factorflow.ir.nodes import For, If, Node, Ref, Stmt, refs_in, walk

#: the statement a fused switch becomes
FUSED_OP = "SwitchGaussian"

#: the case statement each fused statement replaces → the fused statement
#: (``factors.fused_switch``, ``factors.fused_vector_switch``)
FUSED_OPS = {"Gaussian": FUSED_OP, "VectorGaussian": "SwitchVectorGaussian"}


#: the backends the fused statement is on; Dask keeps the gate path (its chunked
#: reductions, task counts and stores are tested on the gate path's statements; the
#: fused operators' ``.base`` read failed on chunks).  JAX runs both: the scalar one in one
#: blocked pass over the data (``tests/runtime/backends/test_jax_fused_switch.py``), the
#: D-dimensional one through the kernels' traced paths (``test_fused_vector_switch.py``)
FUSED_BACKENDS = frozenset({"numpy", "jax"})


@dataclass(frozen=True)
class FuseSwitchOptions:
    """``enabled``: whether the pass fuses at all (False: today's gate path, for
    comparisons and for the backends that do not run the fused statement)."""

    name: str = "fuse_switch"
    enabled: bool = True


def _reads(program: Program) -> Counter[str]:
    """How many operands and conditions read each variable."""
    count: Counter[str] = Counter()
    for stmt, _ in walk(program.body):
        for _, operand in stmt.inputs:
            count.update(refs_in(operand))
    _conditions(program.body, count)
    return count


def _conditions(body: tuple[Node, ...], count: Counter[str]) -> None:
    """Add the variables each ``If`` condition reads to ``count``."""
    for node in body:
        if isinstance(node, If):
            count.update(refs_in(node.condition))
            _conditions(node.body, count)
        elif isinstance(node, For):
            _conditions(node.body, count)


#: a variable's definition: the identity of the block holding it, its place in program
#: order, the statement
Where = dict[str, tuple[int, int, Stmt]]


def _definitions(body: tuple[Node, ...], out: Where | None = None) -> Where:
    """Each variable defined by a single-output statement → its ``Where``."""
    out = {} if out is None else out
    for node in body:
        if isinstance(node, Stmt) and len(node.outputs) == 1:
            out.setdefault(node.outputs[0].var, (id(body), len(out), node))
        elif isinstance(node, (For, If)):
            _definitions(node.body, out)
    return out


def _in_gate_order(z: str, mean: str, precision: str, where: Where,
                   initialized: frozenset[str]) -> bool:
    """Whether the fused program can update z and the two components in the gate
    path's order: the variables z's definition reads (the weights) are defined before
    both components (the scheduler starts the fused sweep at whichever comes first in
    program order, the gate path's at the weights wherever they are defined: 1e-5 apart
    after 12 sweeps with the components first, ``tests/transforms/
    test_fuse_vector_switch.py``), and ``_gate_order`` can order the components as the
    gate path does (the first-defined is not initialised by the user, or they are defined
    in one block and the second's definition reads nothing defined after the first's:
    it can move before it)."""
    if not {z, mean, precision} <= where.keys():
        return False
    first, second = sorted((mean, precision), key=lambda v: where[v][1])

    def before_first(var: str) -> bool:
        """Whether everything ``var``'s definition reads is defined before ``first``."""
        return all(where[v][1] < where[first][1] for _, operand in where[var][2].inputs
                   for v in refs_in(operand) if v in where)
    return before_first(z) and (first not in initialized or (
        where[first][0] == where[second][0] and before_first(second)))


def _indexed_by(operand: object, z: Ref, k: str, program: Program) -> bool:
    """Whether ``operand`` is ``a[z]`` of a random ``a`` over the switch's range alone."""
    return (isinstance(operand, Ref) and operand.index == (z,)
            and program.decl(operand.var).role == "random"
            and program.decl(operand.var).plates == (k,) and operand.var != z.var)


def _fused(program: Program, node: Node, loops: tuple[str, ...], reads: Counter[str],
           initialized: frozenset[str], where: Where) -> For | None:
    """``node`` (a ``for k: if z[loops] == k: x = Gaussian(...)``, or a VectorGaussian) as
    its fused statement in the same ``for k``, or None where the pattern does not hold."""
    if not (isinstance(node, For) and len(node.body) == 1 and isinstance(node.body[0], If)):
        return None
    k, gate = node.range, node.body[0]
    if gate.kind != "switch" or gate.value != k or gate.negated or len(gate.body) != 1:
        return None
    child, z = gate.body[0], gate.condition
    if not (isinstance(child, Stmt) and child.op in FUSED_OPS and len(child.outputs) == 1):
        return None
    zdecl, (x,) = program.decl(z.var), child.outputs
    if (zdecl.role != "random" or zdecl.domain != "int" or z.index != loops
            or zdecl.event != program.range_size(k) or z.var in initialized
            or reads[z.var] != 3 or program.decl(x.var).role != "observed"
            or x.index != loops or x.var == z.var):
        return None
    mean, precision = (dict(child.inputs).get(key) for key in ("mean", "precision"))
    if not (_indexed_by(mean, z, k, program) and _indexed_by(precision, z, k, program)):
        return None  # (so z's three reads, above, are the condition and these two)
    assert isinstance(mean, Ref) and isinstance(precision, Ref)
    if (mean.var == precision.var or x.var in (mean.var, precision.var)
            or not _in_gate_order(z.var, mean.var, precision.var, where, initialized)):
        return None
    stmt = Stmt(FUSED_OPS[child.op], child.outputs,
                # (the inputs in one order: the order of the components' updates in the
                # sweep follows that of their definitions, ``_gate_order``)
                (("selector", z), ("precision", Ref(precision.var, (k,))),
                 ("mean", Ref(mean.var, (k,)))),
                (("index", k),), child.provenance)
    return replace(node, body=(stmt,))


def _rewrite(program: Program, body: tuple[Node, ...], loops: tuple[str, ...],
             reads: Counter[str], initialized: frozenset[str],
             where: Where) -> tuple[Node, ...]:
    """``body`` with every fusable switch block fused, in ``For`` blocks at any depth
    but never inside an ``If`` (a nested gate keeps today's path)."""
    out: list[Node] = []
    for node in body:
        fused = _fused(program, node, loops, reads, initialized, where)
        if fused is not None:
            out.append(fused)
        elif isinstance(node, For):
            out.append(replace(node, body=_rewrite(program, node.body, loops + (node.range,),
                                                   reads, initialized, where)))
        else:
            out.append(node)
    return tuple(out)


def _gate_order(body: tuple[Node, ...], pairs: set[tuple[str, str]],
                initialized: frozenset[str]) -> tuple[Node, ...]:
    """``body`` with the definitions of each fused switch's two components (the (mean,
    precision) names in ``pairs``, where both are defined in one block) in the order in
    which the gate path updates their posteriors, so that the fused program's are the
    same numbers: the scheduler breaks the fused program's tie between the two by
    program order (``greedy._Greedy._score``'s last key), and the gate path updates the
    second-defined component first exactly when the first-defined one is initialised by
    the user (``initialized``), else in program order.

    Why the gate path differs there: the greedy scheduler puts off overwriting a user's
    initial value that nothing has read yet in the pass (the penalty of
    ``greedy._Greedy._apply`` on a PRISTINE message).  In the gate path's pass, z's
    message reads the cases' evidence as the last pass left it (not Fresh), and the
    first-defined component's message to its clone, computed first, reads the other
    component's initial value (through that one's clone): when the two posteriors
    compete, only the first-defined one's initial value is still unread, so it is updated
    last when initialised.  In the fused program z's message reads both posteriors Fresh
    at the start of the pass, so neither initial value is unread then, the penalty never
    applies and program order alone decides.  No tie-break rule in the scheduler can tell
    the two apart (the fused graph has no clones), so the order is set here, where the
    gate path's structure is known (``tests/transforms/test_fuse_vector_switch.py``:
    fused and gate path agree for each initialisation and order of definition)."""
    out = list(body)
    for mean, prec in pairs:
        at = {s.outputs[0].var: i for i, s in enumerate(out)
              if isinstance(s, Stmt) and len(s.outputs) == 1}
        if mean not in at or prec not in at:
            continue
        first, second = sorted((mean, prec), key=at.__getitem__)
        if first in initialized:
            out.insert(at[first], out.pop(at[second]))
    return tuple(replace(n, body=_gate_order(n.body, pairs, initialized))
                 if isinstance(n, For) else n for n in out)


def fuse_switches(program: Program, algorithm: str,
                  initialized: frozenset[str] = frozenset(),
                  options: FuseSwitchOptions = FuseSwitchOptions()) -> Program:
    """``program`` with every fusable Switch block one ``SwitchGaussian`` or
    ``SwitchVectorGaussian`` statement (VMP only; see the module's docstring);
    ``initialized``: program names of the variables the user initialises."""
    if algorithm != "vmp" or not options.enabled:
        return program
    body = _rewrite(program, program.body, (), _reads(program), initialized,
                    _definitions(program.body))
    if body == program.body:
        return program
    pairs = {(s.input("mean").var, s.input("precision").var)  # type: ignore[union-attr]
             for s, _ in walk(body) if s.op in FUSED_OPS.values()}
    return replace(program, body=_gate_order(body, pairs, initialized))
