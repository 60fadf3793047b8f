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

from factorflow.distributions.base import Distribution, log_normalizer_or_zero


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


def use_counts(hows: tuple[tuple, ...], use_shapes: tuple[tuple[int, ...], ...],
               var_shape: tuple[int, ...], use_plates: tuple[tuple[str, ...], ...],
               sizes: dict[str, int]) -> np.ndarray:
    """Number of edges at each element of the variable (its def edge included)."""
    count = np.ones(var_shape)
    for how, shape, plates in zip(hows, use_shapes, use_plates, strict=True):
        if how[0] == "same":
            count = count + 1
        elif how[0] == "broadcast":
            count = count + int(np.prod([sizes[p] for p in how[1]]))
        else:
            count = count + np.bincount(np.ravel(how[1]), minlength=var_shape[0])[
                : var_shape[0]].reshape(var_shape)
    return count


# ----- evidence terms ---------------------------------------------------------------
def ep_variable_evidence(marginal: Distribution, edges_out: list[Distribution],
                         count: np.ndarray) -> float:
    """Σ over elements of (1 − d)·A(marginal) + Σ over edges of A(message to the factor)."""
    total = float(np.sum((1.0 - count) * log_normalizer_or_zero(marginal)))
    for m in edges_out:
        total += float(np.sum(log_normalizer_or_zero(m)))
    return total


def vmp_variable_evidence(marginal: Distribution) -> float:
    """The entropy of the variable's posterior, summed over its plates."""
    return float(np.sum(marginal.entropy()))


def total(value: Any) -> float:
    """Sum an evidence term over all plate elements."""
    return float(np.sum(value))
