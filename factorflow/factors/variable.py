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
from scipy import special

from factorflow.distributions import Bernoulli, Discrete
from factorflow.distributions.base import Distribution, log_normalizer_or_zero
from factorflow.factors.common import bool_log_weights

# ----- annotations of the variable node's updates, by algorithm ---------------------
#: (algorithm, update) -> annotation of its inputs.  Under VMP a message from a factor
#: triggers the marginal, which triggers every message the variable sends, so a message
#: to a factor always reflects the latest messages from factors (Infer.NET's VMP rule).
#: Under EP a message out needs the marginal to have been computed once (Required).
NODE_ANNOTATIONS: dict[tuple[str, str], str] = {
    ("vmp", "marginal"): "trigger",
    ("vmp", "use"): "trigger",
    ("vmp", "backward"): "trigger",
    ("ep", "marginal"): "dependency",
    ("ep", "use"): "required",
    ("ep", "backward"): "dependency",
}


# ----- plate operations -------------------------------------------------------------
def reduce_use(msg: Distribution, how: tuple, use_shape: tuple[int, ...],
               var_size: int | None = None) -> Distribution:
    """The product of a use's messages, as one message per element of the variable."""
    kind = how[0]
    if kind == "same":
        return msg
    if kind == "broadcast":
        axes = how[1]
        if not axes:
            return msg
        full = msg if msg.batch_shape == use_shape else msg.broadcast_to(use_shape)
        return full.prod(axis=axes)
    if kind == "gather":
        index = how[1]
        full = msg if msg.batch_shape == use_shape else msg.broadcast_to(use_shape)
        return full.scatter_prod(np.asarray(index), var_size)
    raise ValueError(f"unknown use kind {kind!r}")


def expand_use(marginal: Distribution, how: tuple, var_plates: tuple[str, ...],
               use_plates: tuple[str, ...]) -> Distribution:
    """The variable's message laid out over the use's plates (a view where possible)."""
    kind = how[0]
    if kind == "gather":
        return marginal.take(np.asarray(how[1]), axis=0)
    if kind == "broadcast" and var_plates and use_plates[-len(var_plates):] != var_plates:
        # insert unit axes where the use has plates the variable lacks
        shape_axes = [use_plates.index(p) for p in var_plates]
        def align(e: np.ndarray, nd: int) -> np.ndarray:
            batch = e.shape[: e.ndim - nd]
            new = [1] * len(use_plates)
            for ax, size in zip(shape_axes, batch, strict=True):
                new[ax] = size
            return e.reshape(tuple(new) + e.shape[e.ndim - nd:])
        return marginal._map(align)
    return marginal


# ----- evidence terms ---------------------------------------------------------------
def _log_weights(d: Distribution) -> np.ndarray | None:
    """log evidence weights of each support point (last axis) for finite families, with a
    uniform message weighing 1 everywhere; None for continuous families."""
    if isinstance(d, Bernoulli):
        lt, lf = bool_log_weights(d)
        return np.stack(np.broadcast_arrays(lt, lf), axis=-1)
    if isinstance(d, Discrete):
        eta = d.eta[0]
        uniform = np.all(eta == 0, axis=-1, keepdims=True)
        with np.errstate(invalid="ignore"):
            lp = eta - special.logsumexp(eta, axis=-1, keepdims=True)
        return np.where(uniform, 0.0, lp)
    return None


def _pair_log_average(a: Distribution, b: Distribution) -> np.ndarray:
    """log ∫ p_a p_b with the evidence convention (a uniform message weighs 1)."""
    wa, wb = _log_weights(a), _log_weights(b)
    if wa is not None and wb is not None:
        return special.logsumexp(wa + wb, axis=-1)
    return log_normalizer_or_zero(a * b) - log_normalizer_or_zero(a) - log_normalizer_or_zero(b)


def _reduce_array(w: np.ndarray, how: tuple | None, use_shape: tuple[int, ...],
                  var_shape: tuple[int, ...]) -> np.ndarray:
    """Sum per-edge arrays (batch axes first, one trailing axis) onto the variable."""
    if how is None or how[0] == "same":
        return w
    full = np.broadcast_to(w, tuple(use_shape) + w.shape[-1:])
    if how[0] == "broadcast":
        return np.sum(full, axis=tuple(how[2])) if how[2] else full
    acc = np.zeros(tuple(var_shape) + w.shape[-1:])
    np.add.at(acc, np.asarray(how[1]), full)
    return acc


def ep_variable_evidence(marginal: Distribution, edges: list[tuple], var_shape: tuple[int, ...]
                         ) -> float:
    """The variable's EP evidence term, summed over its plates:

        log ∫ Π_e m_{e→v}  −  Σ_e log ∫ m_{e→v} m_{v→e}

    ``edges`` are (message in, message out, how, use shape), ``how`` None for the def edge
    and otherwise the use's kind with, for broadcasts, the axes to reduce at index 2.
    Finite families are summed in log weights so that point masses (certain booleans)
    stay exact.
    """
    total = 0.0
    for inc, out, _, _ in edges:
        total -= float(np.sum(_pair_log_average(inc, out)))
    if _log_weights(marginal) is None:
        total += float(np.sum(log_normalizer_or_zero(marginal)))
        for inc, _, _, _ in edges:
            total -= float(np.sum(log_normalizer_or_zero(inc)))
        return total
    acc = 0.0
    for inc, _, how, use_shape in edges:
        w = _log_weights(inc)
        assert w is not None
        acc = acc + _reduce_array(w, how, use_shape, var_shape)
    return total + float(np.sum(special.logsumexp(acc, axis=-1)))


def vmp_variable_evidence(marginal: Distribution) -> float:
    """The entropy of the variable's posterior, summed over its plates."""
    return float(np.sum(marginal.entropy()))


def total(value: Any) -> float:
    """Sum an evidence term over all plate elements."""
    return float(np.sum(value))
