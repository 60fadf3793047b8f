"""The variable node: how a variable combines the messages on its edges.

A latent variable has one defining edge (message ``def`` from the factor that defines it)
and any number of use edges.  A use may be over more plates than the variable
(``broadcast``: the variable is replicated) or pick elements by observed integers
(``gather``); the matching reductions are a product over the extra plate axes and a
scatter-product.  Each is one array operation over the whole plate.

EP: the marginal is the product of all incoming messages; the message out on an edge is
the marginal divided by the message in on that edge.  VMP: the message out on every edge
is the marginal itself; a derived variable (defined by a deterministic factor) sends its
forward distribution to its uses and the product of its uses' messages back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from factorflow.distributions.base import (
    Distribution,
    add_at,
    as_index,
    log_normalizer_or_zero,
    traced,
)
from factorflow.factors.common import logsumexp, message_log_normalizer
from factorflow.factors.mixtures import log_average, log_weights

# ----- annotations of the variable node's updates, by algorithm ---------------------
#: (algorithm, update) -> annotation of its inputs.  Under VMP a message from a factor
#: triggers the marginal, which triggers every message the variable sends, so a message
#: to a factor always reflects the latest messages from factors (Infer.NET's VMP rule).
#: A message out needs the marginal to have been computed once (Required).  Under EP a
#: message out is the marginal divided by the message in on that edge, so the marginal
#: must reflect the latest messages in, and the messages out the latest marginal
#: (Trigger) — which also lets a user's initial marginal be used before it is recomputed.
#:
#: VMP also asks for Fresh inputs (seed 000: "A must be up-to-date before executing B"):
#: a posterior is computed from messages brought up to date with the latest posteriors of
#: the variables they come from, through any chain of derived variables (a derived
#: variable's messages, both ways, need fresh inputs; ``use.derived``).  With every VMP
#: operator needing fresh inputs too (``dependency_info``), each variable is updated
#: from the latest of the others — coordinate ascent, whose bound never decreases — not
#: from a sweep-old state (which diverges on correlated regression weights).  The chains
#: stop at a non-derived variable's messages out (Trigger only), so Fresh has no cycles.
NODE_ANNOTATIONS: dict[tuple[str, str], str] = {
    ("vmp", "marginal"): "fresh",
    ("vmp", "marginal.def"): "required fresh",
    ("vmp", "use"): "required trigger",
    ("vmp", "use.derived"): "required fresh trigger",
    ("vmp", "backward"): "required trigger",
    ("vmp", "backward.derived"): "fresh",
    ("ep", "marginal"): "trigger",
    ("ep", "marginal.def"): "required trigger",
    ("ep", "use"): "required trigger",
    ("ep", "use.derived"): "required trigger",
    ("ep", "backward"): "required trigger",
    ("ep", "backward.derived"): "required trigger",
}


# ----- evidence terms ---------------------------------------------------------------
def _reduce_array(w: np.ndarray, how: tuple | None, use_shape: tuple[int, ...],
                  var_shape: tuple[int, ...], trailing: int) -> np.ndarray:
    """Sum per-edge arrays (batch axes first, then ``trailing`` axes) onto the variable."""
    tail = w.shape[w.ndim - trailing:] if trailing else ()
    if how is None or how[0] == "same":
        return np.broadcast_to(w, tuple(var_shape) + tail)
    full = np.broadcast_to(w, tuple(use_shape) + tail)
    if how[0] == "broadcast":
        return np.sum(full, axis=tuple(how[2])) if how[2] else full
    acc = np.zeros(tuple(var_shape) + tail)
    if how[0] == "gather":
        return add_at(acc, as_index(how[1]), full, repeats=True)
    if how[0] == "slots":  # clone slot s belongs to case how[1][s] (last plate axis)
        return add_at(acc, (Ellipsis, list(how[1])) + (slice(None),) * trailing, full)
    fixed, axes = how[1], how[2]  # element: sum the extra plates, place the fixed slots
    summed = np.sum(full, axis=tuple(axes)) if axes else full
    return add_at(acc, slot(fixed, len(var_shape)), summed)


def slot(fixed: tuple, ndim: int) -> tuple:
    """The NumPy index of the slot at (axis, value) pairs, whole along other axes."""
    index: list = [slice(None)] * ndim
    for axis, value in fixed:
        index[axis] = value
    return tuple(index)


def ep_variable_evidence(marginal: Distribution, edges: list[tuple], var_shape: tuple[int, ...]
                         ) -> np.ndarray:
    """The variable's EP evidence term at each of its elements:

        log ∫ Π_e m_{e→v}  −  Σ_e log ∫ m_{e→v} m_{v→e}

    ``edges`` are (message in, message out, how, use shape[, mask]): ``how`` None for the
    def edge, otherwise the use's kind (see ``channels``), with a broadcast's axes at
    index 2; ``mask`` (over the use's plates) where the use exists (inside an observed
    condition it is not an edge where the condition fails, and counts nothing there).
    Finite families are summed in log weights so that point masses (certain booleans)
    stay exact.
    """
    total = np.zeros(tuple(var_shape))
    edges = [e if len(e) == 5 else (*e, None) for e in edges]

    def on(mask: Any, values: np.ndarray, use_shape: tuple[int, ...]) -> np.ndarray:
        """``values`` where the edge exists (everywhere without a mask), else 0."""
        if mask is None:
            return values
        full = np.broadcast_shapes(np.shape(values), tuple(use_shape))
        return np.where(np.broadcast_to(np.asarray(mask, bool), full),
                        np.broadcast_to(values, full), 0.0)

    if log_weights(marginal) is None:
        # continuous: the normalisers of the messages in cancel, leaving
        # (1 - d)·A(marginal) + Σ_e A(m_{v→e}), so an improper message in (EP's negative
        # precisions) does no harm
        count = np.zeros(tuple(var_shape))
        for _, out, how, use_shape, mask in edges:
            ones = np.ones(np.broadcast_shapes(out.batch_shape, tuple(use_shape)))
            count = count + _reduce_array(on(mask, ones, use_shape), how, use_shape,
                                          var_shape, 0)
            total = total + _reduce_array(on(mask, message_log_normalizer(out), use_shape),
                                          how, use_shape, var_shape, 0)
        a_marg = log_normalizer_or_zero(marginal)
        with np.errstate(invalid="ignore"):
            term = total + (1.0 - count) * a_marg
        # a point mass (a zero scale: 0 · a) is determined by its parents: no evidence
        return np.where(np.isinf(a_marg), 0.0, term)
    for inc, out, how, use_shape, mask in edges:
        total = total - _reduce_array(on(mask, log_average(inc, out), use_shape), how,
                                      use_shape, var_shape, 0)
    acc = 0.0
    for inc, _, how, use_shape, _mask in edges:  # an absent edge's message is uniform
        w = log_weights(inc)
        assert w is not None
        acc = acc + _reduce_array(w, how, use_shape, var_shape, 1)
    mass = logsumexp(acc, axis=-1)
    # messages in that rule out every value (a point mass meeting a constraint against
    # it, in a gate's branch that cannot hold): the evidence is 0, not -inf - (-inf)
    with np.errstate(invalid="ignore"):
        return np.where(np.isneginf(mass), -np.inf, total + mass)


def vmp_variable_evidence(marginal: Distribution) -> np.ndarray:
    """The entropy of the variable's posterior at each of its elements."""
    return marginal.entropy()


def total(value: Any, plates: tuple[int, ...] = ()) -> float:
    """Sum an evidence term over all plate elements (a Python float; under tracing an
    array of no axes).  ``plates``: the sizes of the statement's plates; where one is 0
    the statement has no instances and adds nothing (its messages may be shared scalars
    standing for the empty plate, which would otherwise count once)."""
    if 0 in plates:
        return 0.0
    if traced():  # a VMP term over a discrete posterior is left to the bound, which sums
        # it with the others over the same probabilities in one pass (``jax_bound``)
        from factorflow.runtime.backends.jax_bound import total as bound_total
        return bound_total(value)
    # (an array's or a NumPy scalar's own sum: the reduction ``np.sum`` calls, without
    # its dispatch; a tuple of classes, not ``|``: a backend's ``np.ndarray`` is a tuple)
    return float(value.sum() if isinstance(value, (np.ndarray, np.generic))
                 else np.sum(value))
