"""Fusion pass (VMP): ``y = Gaussian(mean=aᵀb, precision=τ)`` with both vectors random
becomes one ``InnerProductGaussian(a, b, precision=τ)`` statement.

Lowered, ``ff.Gaussian("y", W @ z, precision=tau)`` inside plates (n, m) is two
statements: ``p[n, m] = InnerProduct(a=W[m], b=z[n])`` (a derived real variable) and
``y[n, m] = Gaussian(mean=p[n, m], precision=tau)``.  Under VMP the pair sends the same
messages to W, z and τ as the single factor (``factors.inner_product``, BayesPy's
``GaussianARD(Dot(W, z), τ)``), but through N × M Gaussians of p: forward moments, a
posterior, a propriety check and backward messages per element.  Fused, the messages
are sums of the data's sufficient statistics (matrix products over the plates).

A pair is fused only when all of these hold, and is left as it is otherwise:

* the algorithm is VMP (under EP the inner product needs one vector known, and its
  messages are exact as they are);
* both vectors are random (a known vector is linear regression, already fused);
* p is used by that Gaussian alone, as its mean, at the same plate elements (the
  indices are the loops around both, the same loops), outside any gate, and p is not
  initialised by the user.

Missing observations (``observed=np.ma.masked_array(...)``, ``model.missing``) put the
Gaussian alone inside ``if present[n, m]``, an observed condition over the same loops:
an observed y in such a gate is fused too, the gate dropped and its condition read by
the fused statement as its ``mask`` (True where y was seen): the messages are then
masked sums (``factors.inner_product``), still matrix products on a grid.

The statement defining p stays: p keeps its posterior (its forward distribution under
q(a) q(b), as before), but nothing reads p any more, so no message from it is sent back
and the loop never computes it (only the bound, and the end of the run, bring it up to
date).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from factorflow.ir import Program
from factorflow.ir.nodes import For, If, Node, Ref, Stmt, refs_in, walk

#: the statement a fused pair becomes
FUSED_OP = "InnerProductGaussian"


def _uses(program: Program) -> Counter[str]:
    """How many operands of all statements read each variable."""
    count: Counter[str] = Counter()
    for stmt, _ in walk(program.body):
        for _, operand in stmt.inputs:
            count.update(refs_in(operand))
    return count


def _fusable(program: Program, product: Stmt, loops: tuple[str, ...],
             uses: Counter[str], initialized: frozenset[str]) -> bool:
    """Whether ``product`` (an InnerProduct) may be fused with the Gaussian reading it."""
    (out,) = product.outputs
    decl = program.decl(out.var)
    if (out.var in initialized or uses[out.var] != 1 or out.index != loops
            or decl.role != "random"):
        return False
    for key in ("a", "b"):
        operand = product.input(key)
        if not isinstance(operand, Ref) or program.decl(operand.var).role != "random":
            return False
    return True


def _rewrite(program: Program, body: tuple[Node, ...], loops: tuple[str, ...],
             uses: Counter[str], initialized: frozenset[str], fused: set[str]
             ) -> tuple[Node, ...]:
    """``body`` with the Gaussian of each fusable pair in one block replaced by the fused
    statement, in ``For`` blocks at any depth but not inside gates (``If``); the names of
    the fused products go into ``fused``."""
    products = {s.outputs[0].var: s for s in body if isinstance(s, Stmt)
                and s.op == "InnerProduct"
                and _fusable(program, s, loops, uses, initialized)}
    out: list[Node] = []
    taken: set[str] = set()
    for node in body:
        if isinstance(node, For):
            out.append(replace(node, body=_rewrite(program, node.body, loops + (node.range,),
                                                   uses, initialized, fused)))
            continue
        mask = _mask(program, node, loops)
        gaussian = node.body[0] if mask is not None else node
        if not (isinstance(gaussian, Stmt) and gaussian.op == "Gaussian"):
            out.append(node)
            continue
        mean = gaussian.input("mean")
        product = products.get(mean.var) if isinstance(mean, Ref) else None
        if (product is None or mean.index != loops or gaussian.outputs[0].var == mean.var
                or mean.var in taken):
            out.append(node)
            continue
        taken.add(mean.var)
        masked = (("mask", mask),) if mask is not None else ()
        out.append(Stmt(FUSED_OP, gaussian.outputs,
                        (("a", product.input("a")), ("b", product.input("b")),
                         ("precision", gaussian.input("precision"))) + masked,
                        gaussian.params, gaussian.provenance))
    fused.update(taken)
    return tuple(out)


def _mask(program: Program, node: Node, loops: tuple[str, ...]) -> Ref | None:
    """The condition of ``node`` where it is the gate of missing observations around
    one Gaussian statement (``if present[loops]: y[loops] = Gaussian(...)``, y and
    present observed, present indexed by exactly the loops around); None otherwise."""
    if not (isinstance(node, If) and node.kind == "if" and not node.negated
            and len(node.body) == 1 and isinstance(node.body[0], Stmt)
            and node.body[0].op == "Gaussian"):
        return None
    cond, (y,) = node.condition, node.body[0].outputs
    if (program.decl(cond.var).role != "observed" or cond.index != loops
            or program.decl(y.var).role != "observed" or y.index != loops):
        return None
    return cond


def fuse(program: Program, algorithm: str,
         initialized: frozenset[str] = frozenset()) -> Program:
    """``program`` with every fusable (InnerProduct, Gaussian) pair one
    ``InnerProductGaussian`` statement (VMP only; see the module's docstring);
    ``initialized``: program names of the variables the user initialises."""
    if algorithm != "vmp" or not any(s.op == "InnerProduct" for s, _ in walk(program.body)):
        return program
    uses = _uses(program)
    fused: set[str] = set()
    body = _rewrite(program, program.body, (), uses, initialized, fused)
    return replace(program, body=body) if fused else program
