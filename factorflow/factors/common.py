"""Helpers shared by the message operators: shapes, boolean weights, projections.

Everything here works on whole batched arrays and on arguments that are either known
(arrays) or messages (``factorflow.distributions`` objects), like the moments in
``factorflow.distributions.moments``.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from factorflow.distributions import Bernoulli, Distribution
from factorflow.distributions.base import (  # noqa: F401  (logsumexp: re-exported)
    all_true,
    any_true,
    is_zeros_view,
    log_normalizer_or_zero,
    logsumexp,
    strides,
)
from factorflow.distributions.moments import E, is_known
from factorflow.errors import UnsupportedFactorError
from factorflow.lazy import special


def batch_shape(v: Any, event_ndim: int = 0) -> tuple[int, ...]:
    """The plate shape of an argument: a message's batch shape, or a known array's shape
    without its ``event_ndim`` trailing event axes."""
    if isinstance(v, Distribution):
        return v.batch_shape
    shape = np.shape(E(v))
    return shape[: len(shape) - event_ndim]


def broadcast_batch(*args: Any) -> tuple[int, ...]:
    """The broadcast plate shape of several scalar-event arguments."""
    return np.broadcast_shapes(*(batch_shape(a) for a in args))


def broadcast_naturals(*arrays: Any) -> list[Any]:
    """``np.broadcast_arrays(*arrays)`` for a message's natural parameters, each one that
    is broadcast a read-only view (``np.broadcast_to``; one of the full shape as it is).
    NumPy's ``broadcast_arrays`` marks its views writable-with-a-warning, and a later view
    of one that takes its buffer (``base.broadcast_view``: a plate of one, a leading axis
    of one) raised NumPy's DeprecationWarning "writing to an array with overlapping
    memory from np.broadcast_arrays" (fuzz seeds 19/20), although nothing is written."""
    shapes = [np.shape(a) for a in arrays]
    if all(s == shapes[0] for s in shapes):
        return list(arrays)
    shape = np.broadcast_shapes(*shapes)
    return [a if s == shape else np.broadcast_to(a, shape) for a, s in zip(arrays, shapes,
                                                                          strict=True)]


def full(shape: tuple[int, ...], value: Any) -> np.ndarray:
    """``value`` broadcast to ``shape`` as a fresh float array."""
    return np.array(np.broadcast_to(np.asarray(value, float), shape))


def unsupported(factor: str, algorithm: str, message: str) -> UnsupportedFactorError:
    """The error for an argument pattern an operator cannot handle (as Infer.NET's
    NotSupported operators), naming the factor and saying what to do."""
    return UnsupportedFactorError(f"factor {factor}: {algorithm.upper()} {message}")


# ----- booleans ---------------------------------------------------------------------
def bool_log_probs(v: Any) -> tuple[np.ndarray, np.ndarray]:
    """(log P(true), log P(false)) of a known boolean or a Bernoulli message, normalised;
    certainties give exactly 0 and -inf."""
    if is_known(v):
        x = np.asarray(E(v)) > 0.5
        return np.where(x, 0.0, -np.inf), np.where(x, -np.inf, 0.0)
    lo = v.log_odds
    if all_true(lo == np.inf):  # certainly true everywhere (a constraint): no logs needed
        return np.zeros(np.shape(lo)), np.full(np.shape(lo), -np.inf)
    return special.log_expit(lo), special.log_expit(-lo)


def bool_log_weights(v: Any) -> tuple[np.ndarray, np.ndarray]:
    """The evidence weights of a boolean argument, in logs: the normalised message, except
    that a uniform message is the weight 1 on both values (log 0, log 0)."""
    lt, lf = bool_log_probs(v)
    if is_known(v):
        return lt, lf
    uniform = v.log_odds == 0
    return np.where(uniform, 0.0, lt), np.where(uniform, 0.0, lf)


def bernoulli_from_log_probs(lt: np.ndarray, lf: np.ndarray) -> Bernoulli:
    """The Bernoulli message with unnormalised log-probabilities ``lt`` (true), ``lf``."""
    with np.errstate(invalid="ignore"):
        return Bernoulli.from_natural(np.asarray(lt) - np.asarray(lf))


def times_finite(weight: np.ndarray, value: np.ndarray) -> np.ndarray:
    """``weight * value`` with 0 · ±inf = 0 (a zero-probability term contributes nothing)."""
    with np.errstate(invalid="ignore"):
        return np.where(weight == 0, 0.0, weight * value)


def message_log_normalizer(msg: Distribution) -> np.ndarray:
    """A(η) of a message as EP's evidence formulas count it: ``log_normalizer_or_zero``
    (0 where the message is uniform), and 0 also where the message is improper with an
    infinite normaliser (a Gamma message of rate exactly 0, x^(a − 1): a mixture's
    projection whose rate equals the prior's).  Such a message counts as the unnormalised
    weight exp⟨η, T(x)⟩, as a uniform one does.  EP's log evidence does not depend on the
    scale of any message (a message's normaliser enters once in its variable's term and
    once, negated, in its factor's), so one finite value per message, the same in both
    places, gives the same evidence; A = +∞ gave ∞ − ∞ = NaN (fuzz seed 13, issue 10).
    The variable's term (``ep_variable_evidence``) and the evidence operators that read
    such messages use this."""
    a = log_normalizer_or_zero(msg)
    if all_true(np.isfinite(a)):
        return a
    return np.where(~np.isfinite(a) & ~msg.is_proper(), 0.0, a)


def evidence_log_weight(msg: Distribution, x: Any) -> np.ndarray:
    """log of the evidence weight of value(s) ``x`` under ``msg``: the normalised density,
    or 0 where the message is uniform (``message_log_normalizer``)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return (msg._inner(msg.eta, msg.sufficient_stats(x)) + msg.log_base_measure(x)
                - message_log_normalizer(msg))


# ----- Dirichlet / Beta projections -------------------------------------------------
def project_dirichlet_mixture(alpha: np.ndarray, log_w: np.ndarray) -> np.ndarray:
    """The pseudo-counts of the Dirichlet matching the mixture Σ_j w_j Dir(alpha + e_j).

    ``log_w`` are unnormalised log mixture weights over the last axis.  The projection
    has the mixture's mean and the mixture's Σ_k E[p_k²] (Minka & Lafferty 2002, as
    Infer.NET's ``Dirichlet.SetMeanAndMeanSquare``); the variance is summed from
    non-negative terms so that concentrated mixtures keep their precision.
    """
    w = np.exp(log_w - logsumexp(log_w, axis=-1, keepdims=True))
    s = np.sum(alpha, axis=-1, keepdims=True)
    mean = (alpha + w) / (s + 1)
    within = (w * (alpha + 1) * (s - alpha) + (1 - w) * alpha * (s + 1 - alpha)) / (
        (s + 1) ** 2 * (s + 2))
    between = w * (1 - w) / (s + 1) ** 2
    total_var = np.sum(within + between, axis=-1, keepdims=True)
    total_count = np.sum(mean * (1 - mean), axis=-1, keepdims=True) / total_var - 1
    return mean * total_count


# ----- reductions over plates fused into operators -------------------------------------
#: einsum subscripts of plate axes (event axes are written with i, j)
_PLATE_LETTERS = "abcdefghklmnopqrstuvwxyz"

#: ``reduce=`` of an operator: (the statement's plate shape, the plate axes to multiply
#: the messages over); see ``Factor.operator`` and ``transforms.messages``
Reduce = tuple[tuple[int, ...], tuple[int, ...]]


def plate_einsum(out_event: str, terms: list[tuple[Any, str]], reduce: Reduce) -> np.ndarray:
    """Σ over the plate axes ``reduce[1]`` of the product of ``terms``, each (array, its
    event subscripts), whose leading plate axes broadcast (right-aligned) to the plate
    shape ``reduce[0]``: one ``np.einsum`` (optimize=True), so the per-element products
    (an (N, D, D) array of outer products, say) are never formed.  The result has the
    kept plate axes, then ``out_event``; an axis along which every term is constant is
    multiplied by its length instead of summed."""
    shape, axes = reduce
    plates = _PLATE_LETTERS[: len(shape)]
    subs, arrays = [], []
    constant = set(axes)
    # a broadcast view (stride 0 along a plate axis: a component's matrix seen by every
    # datum) is read along that axis once, as a length-1 axis that einsum broadcasts
    terms = [(collapsed(np.asarray(a, float), len(event)), event) for a, event in terms]
    scalars = [a for a, event in terms if not event]
    terms = [(a, event) for a, event in terms if event]
    if scalars and not terms:
        # scalar events only (Σ_n q_nk η_nk): each an operand, multiplied in einsum's loop
        terms = [(a, "") for a in scalars]
    elif scalars:
        weight = functools.reduce(np.multiply, scalars)
        # fold the per-element weights into a vector term that already has all their
        # axes, so that einsum contracts two operands (a matrix product), never
        # enlarging a term; otherwise the weights are an operand of their own
        home = next((k for k, (a, ev) in enumerate(terms)
                     if _covers(a.shape[:a.ndim - len(ev)], weight.shape)), None)
        if home is not None:
            first, event = terms[home]
            terms[home] = (weight[(...,) + (None,) * len(event)] * first, event)
        else:
            terms.insert(0, (weight, ""))
    varies: set[int] = set()  # the plate axes some term varies along
    for arr, event in terms:
        nb = arr.ndim - len(event)
        arr = arr.reshape((1,) * (len(shape) - nb) + arr.shape)
        # a length-1 plate axis is left out of the term's subscripts (squeezed), so that
        # einsum sees Σ_n w_nk x_n as the matrix-vector product it is (BLAS)
        own = [k for k in range(len(shape)) if arr.shape[k] != 1]
        varies.update(own)
        subs.append("".join(plates[k] for k in own) + event)
        arrays.append(arr.reshape(tuple(arr.shape[k] for k in own) + arr.shape[len(shape):]))
    constant -= varies
    kept = [k for k in range(len(shape)) if k not in axes]
    # two terms over the same axes are one fused multiply-and-sum loop; einsum's
    # optimizer would route them through a matrix product and take its diagonal
    # (Σ_n q_nk η_nk: about 50 times slower at N = 20,000, K = 40)
    # (one operand: no path to choose, and choosing one costs more than a small sum)
    optimize = len(subs) > 2 or (len(subs) == 2 and set(subs[0]) != set(subs[1]))
    out = np.einsum(",".join(subs) + "->" + "".join(plates[k] for k in kept if k in varies)
                    + out_event, *arrays, optimize=optimize)
    event_shape = out.shape[out.ndim - len(out_event):]
    count = math.prod(shape[ax] for ax in constant)  # (a Python int: static when traced)
    if count != 1:
        out = out * count
    if all(k in varies for k in kept):
        return out
    # the kept axes no term varies along: the same sums, seen along them (a view)
    return np.broadcast_to(out.reshape(tuple(shape[k] if k in varies else 1 for k in kept)
                                       + event_shape),
                           tuple(shape[k] for k in kept) + event_shape)


def collapsed(arr: np.ndarray, event_ndim: int = 0) -> np.ndarray:
    """``arr`` with each plate axis it only broadcasts along (stride 0) cut to length 1:
    a view, never a copy."""
    index = tuple(slice(0, 1) if arr.shape[k] > 1 and strides(arr)[k] == 0 else slice(None)
                  for k in range(arr.ndim - event_ndim))
    return arr[index] if any(i != slice(None) for i in index) else arr


def _covers(shape: tuple[int, ...], other: tuple[int, ...]) -> bool:
    """Whether an array of ``shape`` already has every non-unit axis of ``other``
    (right-aligned), so that multiplying them makes nothing larger."""
    if len(other) > len(shape):
        return all(n == 1 for n in other[: len(other) - len(shape)]) and _covers(
            shape, other[len(other) - len(shape):])
    return all(o == 1 or s == o for s, o in zip(shape[len(shape) - len(other):], other,
                                                 strict=True))


def reduced_shape(reduce: Reduce) -> tuple[int, ...]:
    """The plate shape left after ``reduce``."""
    shape, axes = reduce
    return tuple(n for k, n in enumerate(shape) if k not in axes)


def uniform_message(fn: Any) -> Any:
    """Mark ``fn``, an operator or an evidence function, as one whose result is uniform
    whatever its inputs (a message of all-zero natural parameters, or the evidence term
    0): the generated program does not call it where every statement that assigns its
    message is such a call — the message keeps its uniform start all run long, and a
    product leaves it out (``codegen.python``; an evidence term of 0 adds nothing).
    Returns ``fn``."""
    fn.uniform_message = True
    return fn


class Deferred:
    """A VMP message not computed yet: ``fn(**args)``, kept as the call.

    Under VMP a gate clone's message is only ever raised to the power of its case's
    probability and multiplied over the plate the gate repeats the value on
    (``Gate.EnterOne``'s message to the value, fused).  Deferred, the factor's own
    operator computes that weighted product in one einsum (``reduced``) and the
    per-element messages (an (N, K, D, D) array for a mixture's precisions) are never
    made.  Multiplying by a uniform message (a derived variable's backward product)
    keeps it deferred; anything else computes it."""

    __slots__ = ("fn", "args")

    def __init__(self, fn: Any, args: dict[str, Any]) -> None:
        self.fn, self.args = fn, args

    def reduced(self, reduce: Reduce, weights: np.ndarray) -> Distribution:
        """Π over the plate axes of ``reduce`` of the messages raised to ``weights``."""
        return self.fn(**self.args, reduce=reduce, weights=weights)

    def value(self) -> Distribution:
        return self.fn(**self.args)

    def __mul__(self, other: Any) -> Any:
        if isinstance(other, Distribution) and (is_zeros_view(other.eta)
                                                or all_true(other.is_uniform())):
            return self
        return self.value() * other

    __rmul__ = __mul__
