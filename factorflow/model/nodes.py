"""Expression nodes (VinDsl's ``@exprnode``): a real variable defined by a formula.

``ff.Deterministic("y", lambda a, b: 2 * a + a * b, a=a, b=b)`` registers one factor per
content (the parents' names and the formula's structure, hashed), so that building the
same model twice gives the same generated source and the factor registry does not grow;
its VMP messages are derived by the rewrite engine (``factorflow.factors.derive``).
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from factorflow.distributions.families import Gaussian
from factorflow.errors import ModelError
from factorflow.factors.arithmetic import gaussian_from_moments
from factorflow.factors.derive import Derivation, derive_naturals
from factorflow.factors.registry import define_factor
from factorflow.model.core import Variable
from factorflow.model.dsl import _environment, _signature
from factorflow.model.factories import new_variable
from factorflow.rewrite.evaluate import evaluate
from factorflow.rewrite.terms import Term, data, sym

#: the factor of each expression node by name -> its content (parents, formula digest)
_NODES: dict[str, tuple[tuple[str, ...], bytes]] = {}
#: the children's message to the node, (η₁, η₂) of exp(η₁·value + η₂·value²): data names
#: that no parent can take (a parent is a formula argument, a Python identifier)
_ETA = ("children.eta1", "children.eta2")


def Deterministic(name: str, formula: Callable[..., Term], **parents: Variable) -> Variable:
    """A real variable defined as a formula of real random variables (VinDsl's
    expression node): ``y = ff.Deterministic("y", lambda a, b: 2 * a + a * b, a=a, b=b)``.

    Under VMP its posterior is the Gaussian with the moments E[formula] and V[formula]
    that the expectation rules derive (parents independent under the mean field), and the
    message to each parent is derived from E[η₁·formula + η₂·formula²], η being the
    message from the node's children.  A formula whose moments the rules cannot close
    raises ModelError naming the sub-expression.

    >>> with ff.Model() as model:             # a(2 + b): mean 1 * 4, variance 2 * 20 - 16
    ...     a = ff.Gaussian("a", 1.0, variance=1.0)
    ...     b = ff.Gaussian("b", 2.0, variance=4.0)
    ...     s = ff.Deterministic("s", lambda a, b: 2.0 * a + a * b, a=a, b=b)
    >>> posterior = model.infer("vmp")["s"]
    >>> float(posterior.mean), float(posterior.variance)
    (4.0, 24.0)

    Guarantees: the node's factor is named from its content (the parents' names and the
    formula's structure), so the same model built twice compiles to the same source and
    registers one factor; any parent name works, ``value`` and ``eta1`` included.
    """
    names = list(parents)
    params = list(inspect.signature(formula).parameters)
    if params != names:
        raise ModelError(f"Deterministic({name!r}): the formula's arguments {params} must be "
                         f"the parents given, {names}, in order.")
    for k, v in parents.items():
        if not isinstance(v, Variable) or v.domain != "real":
            raise ModelError(f"Deterministic({name!r}): parent {k!r} must be a real random "
                             "variable of the model.")
    expr = formula(*(sym(k) for k in names))
    if not isinstance(expr, Term):
        raise ModelError(f"Deterministic({name!r}): the formula must involve its parents.")
    fname = _node_factor(expr, tuple(names))
    return new_variable(fname, name, "real", dict(parents), {k: "real" for k in names},
                        derived=True)


def _node_factor(expr: Term, names: tuple[str, ...]) -> str:
    """The name of the registered factor of the expression node ``expr`` over the parents
    ``names``: ``Deterministic_<digest of the content>``, defined on first use only."""
    content = (names, expr.digest)
    digest = hashlib.blake2b(repr(names).encode() + expr.digest, digest_size=20).hexdigest()
    fname = f"Deterministic_{digest[:10]}"
    if fname in _NODES and _NODES[fname] != content:  # a short-digest collision
        fname = f"Deterministic_{digest}"
    if fname not in _NODES:
        _define_node(fname, expr, names)
        _NODES[fname] = content
    return fname


def _define_node(fname: str, expr: Term, names: tuple[str, ...]) -> None:
    """Register the factor ``fname``: ``value = expr(parents)`` with its VMP messages.
    Everything that can fail (a formula the rules cannot close) runs before registering."""
    from factorflow.rewrite.expectations import deterministic_moments

    mean_t, var_t = deterministic_moments(expr)
    child = data(_ETA[0]) * expr + data(_ETA[1]) * expr ** 2
    derivations = {target: derive_naturals(child, sym(target), "Gaussian") for target in names}
    out = "value"
    while out in names:  # the output argument is named apart from the parents
        out += "_"
    registered = define_factor(fname, (out, "real"), *((k, "real") for k in names),
                               deterministic=True)

    def forward(**args: Any) -> Gaussian:
        env = _environment([mean_t, var_t], args)
        m, v = evaluate(mean_t, env), evaluate(var_t, env)
        shape = np.broadcast_shapes(np.shape(m), np.shape(v))
        # a parent that is exactly 0 (0 · x) makes a point mass (variance 0)
        return gaussian_from_moments(np.broadcast_to(m, shape), np.broadcast_to(v, shape))

    registered.operator("vmp", out, trigger=names)(_signature(forward, names))
    for target, d in derivations.items():
        others = tuple(k for k in names if k != target)
        registered.operator("vmp", target, skip_if_uniform=(out,), proper=others)(
            _backward(d, out, others))
    registered.evidence_operator("vmp")(_signature(lambda **a: np.zeros(()), (out, *names)))


def _backward(d: Derivation, out: str, others: tuple[str, ...]) -> Callable[..., Any]:
    naturals = list(d.naturals)

    def message(**args: Any) -> Gaussian:
        value = args.pop(out)  # the children's message to the node, natural form
        env = _environment(naturals, args)
        env_named = {**env, _ETA[0]: value.eta[0], _ETA[1]: -0.5 * value.eta[1]}
        e1, e2 = (evaluate(n, env_named) for n in naturals)
        shape = np.broadcast_shapes(np.shape(e1), np.shape(e2))
        return Gaussian.from_natural(np.broadcast_to(e1, shape), np.broadcast_to(-2.0 * e2,
                                                                                 shape))

    return _signature(message, (out, *others))
