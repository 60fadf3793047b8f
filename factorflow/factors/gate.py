"""Gate factors (Infer.NET's Gate; Minka & Winn, "Gates", NIPS 2008), as the gate
transform emits them (``factorflow.transforms.gates``):

* ``cases = Gate.Cases(selector)``: the one-hot cases of a boolean (K = 2; case 0 is true)
  or discrete selector;
* ``Gate.Enter(cases, value)``, ``Gate.EnterPartial(cases, value, indices)``,
  ``Gate.EnterOne(cases, value, index)``: clones of ``value`` for all K cases, for the
  listed ``indices``, or for case ``index`` alone; a clone equals ``value`` where its case
  holds and is unconstrained elsewhere;
* ``exit = Gate.Exit(cases, values)``: ``values[k]`` for the case k that holds;
* ``exit = Gate.ExitGiven(cases, given, values, case)``: ``values[k]`` for the case k
  that holds, reported given that ``given[k]`` (a variable defined in every case, one
  clone per case) is in case ``case`` (a gate's case number: 0 true, 1 false for a
  boolean, the value for a discrete): the mixture of ``values`` weighted by
  q(k) q(given[k] = case), normalised over k (``gate_order``'s per-case copies of a
  variable drawn inside a gate on an exit of the gates on the selector).

The case axis is the last batch axis (a Switch of K components in a plate of N points is
an (N, K) batch, and every operator is one array operation on it).  A factor's ``cases``
always carries all K cases: under EP the message from the cases array (its marginal less
this statement's message to it), under VMP the Cases factor's message.  ``indices`` (a
tuple) and ``index`` are constants; an array ``index`` (``arange(K)`` over a switch loop)
is aligned with the batch, whose last axis is then the case axis: EnterOne then sends
each element's message to its own case.

A message on ``cases[k]`` is a weight: its log-odds ℓ_k is the log of the factor's value
when case k holds relative to when it does not.  Cases sends log p(selector = k); each
statement inside ``if cases[k]`` sends its evidence terms there instead of to the total;
Enter* and Exit send log ∫ m̂_value m̂_clone (log ∫ m̂_exit m̂_values[k]), the term of the
edge between case k's body and the outside, and add 0 to the evidence themselves.  Cases's
EP evidence is then log Σ_k m̂_selector(k) exp(ℓ_k), exact on trees; under VMP it is
Σ_k q(k) ℓ_k, and Exit adds −E_{to_exit}[log m̂_exit] for the children's term its message
to the cases counts twice.  Enter's EP message to ``value`` is proj[Σ_k w_k m_value·m_k]
/ m_value with w_k ∝ p(case k) (this factor's own message to the case added back), Exit's
to ``exit`` likewise; under VMP, Π_k m_k^{q_k} and proj[Σ_k q_k m_k].
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from factorflow.distributions import Bernoulli, Discrete
from factorflow.distributions.base import (
    Distribution,
    any_true,
    broadcast_shapes,
    exp_flushed,
    is_arange,
    memo_of,
    recall,
    remember,
    set_at,
    traced,
)
from factorflow.distributions.moments import E, is_known
from factorflow.factors.common import (
    Deferred,
    Reduce,
    logsumexp,
    plate_einsum,
    times_finite,
    uniform_message,
)
from factorflow.factors.mixtures import (
    average_log,
    concat,
    expand,
    log1mexp,
    log_average,
    log_mass,
    log_probs,
    log_weights,
    normalized,
    power_each,
    power_product,
    project,
)
from factorflow.factors.registry import define_factor

CASES = define_factor("Gate.Cases", ("cases", "bool"), ("selector", "int"), deterministic=True)
ENTER = define_factor("Gate.Enter", ("enter", "any"), ("cases", "bool"), ("value", "any"),
                      deterministic=True)
ENTER_PARTIAL = define_factor("Gate.EnterPartial", ("enter_partial", "any"), ("cases", "bool"),
                              ("value", "any"), ("indices", "int"), deterministic=True)
ENTER_ONE = define_factor("Gate.EnterOne", ("enter_one", "any"), ("cases", "bool"),
                          ("value", "any"), ("index", "int"), deterministic=True)
EXIT = define_factor("Gate.Exit", ("exit", "any"), ("cases", "bool"), ("values", "any"),
                     deterministic=True)
EXIT_GIVEN = define_factor("Gate.ExitGiven", ("exit", "any"), ("cases", "bool"),
                           ("given", "any"), ("values", "any"), ("case", "int"),
                           deterministic=True)


# ----- helpers ------------------------------------------------------------------------
def _logits(cases: Any) -> np.ndarray:
    """ℓ: the log weights of the cases (last axis); a known cases array gives 0 / −inf."""
    if is_known(cases):
        with np.errstate(divide="ignore"):
            return np.log(np.asarray(E(cases), float))
    return np.asarray(cases.log_odds, float)


# ----- Gate.Cases ---------------------------------------------------------------------
@CASES.operator("ep", "cases", skip_if_uniform=("selector",))
@CASES.operator("vmp", "cases", skip_if_uniform=("selector",), trigger=("selector",))
def _cases(selector) -> Bernoulli:
    """log p(selector = k) on each case (VMP: the selector's posterior)."""
    return Bernoulli.from_natural(log_probs(selector))


@CASES.operator("ep", "selector", skip_if_uniform=("cases",))
@CASES.operator("vmp", "selector", skip_if_uniform=("cases",))
def _selector(cases, selector) -> Distribution:
    """The cases' weights as a message: Discrete(ℓ), or Bernoulli(ℓ_0 − ℓ_1)."""
    lw = _logits(cases)
    if isinstance(selector, Discrete):
        return Discrete.from_natural(lw)
    with np.errstate(invalid="ignore"):
        return Bernoulli.from_natural(np.where(lw[..., 0] == lw[..., 1], 0.0,
                                               lw[..., 0] - lw[..., 1]))


@CASES.evidence_operator("ep")
def _cases_log_average_factor(cases, selector) -> np.ndarray:
    """log Σ_k m̂_selector(k) exp(ℓ_k): the gate's evidence, averaged over its cases."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return logsumexp(log_weights(selector) + _logits(cases), axis=-1)


@CASES.evidence_operator("vmp")
def _cases_average_log_factor(cases, selector) -> np.ndarray:
    """Σ_k q(k) ℓ_k (a term of probability 0 adds 0, whatever its ℓ)."""
    lp = log_probs(selector)
    q = memo_of("exp", lp, exp_flushed)  # (normalising kept it)
    lw = _logits(cases)
    if traced():  # the same sum, a term the bound adds up with the others over q in one
        from factorflow.runtime.backends.jax_bound import row_term  # pass (``row_term``)
        return row_term(q, lw)
    if not traced():  # one fused pass; 0 · (−inf) and the like fall back below
        with np.errstate(invalid="ignore"):
            fast = np.einsum("...k,...k->...", *np.broadcast_arrays(q, lw))
        if not np.isnan(fast).any():
            return fast
    return np.sum(times_finite(q, lw), axis=-1)


# ----- Gate.Enter, EnterPartial, EnterOne -----------------------------------------------
# Under VMP a clone is a derived variable: its forward message is triggered by the value
# and the cases, so it always reflects their latest posteriors (seed 000).
# A message out of the gate to the shared value weighs the cases: it is skipped while the
# cases are uniform, so the initialisation schedule computes them first (from a user's
# initialisation of the selector, which breaks the symmetry between components).
def _slots(cases: Any, value: Distribution, clones: Distribution, indices: tuple[int, ...]
           ) -> tuple[np.ndarray, Distribution, Distribution]:
    """ℓ, value and clones broadcast to (batch, K), (batch, S), (batch, S)."""
    lw = _logits(cases)
    batch = np.broadcast_shapes(value.batch_shape, lw.shape[:-1], clones.batch_shape[:-1])
    shape = batch + (len(indices),)
    return (np.broadcast_to(lw, batch + lw.shape[-1:]), expand(value, shape),
            clones.broadcast_to(shape))


def _enter_cases(cases, value, clones, indices) -> Bernoulli:
    """EP: log ∫ m̂_value m̂_clone on each entered case, log ∫ m̂_value on the others
    (0 for a normalised message; log K for a uniform finite one, whose weight 1 on every
    value the value's own evidence terms, outside the gate, count in every case)."""
    lw, v, m = _slots(cases, value, clones, indices)
    out = np.broadcast_to(np.expand_dims(log_mass(value), -1), lw.shape)
    return Bernoulli.from_natural(set_at(out, (..., list(indices)), log_average(v, m)))


def _enter_value(clones, cases, value, indices) -> Distribution:
    """EP: proj[Σ_k w_k m_value·m_k + w_rest m_value] / m_value."""
    lw, v, m = _slots(cases, value, clones, indices)
    lw = lw + _enter_cases(cases, value, clones, indices).log_odds
    log_w = lw[..., list(indices)]
    comps = v * m
    rest = [k for k in range(lw.shape[-1]) if k not in indices]
    if rest:
        with np.errstate(divide="ignore"):
            log_w = np.concatenate([log_w, logsumexp(lw[..., rest], axis=-1,
                                                             keepdims=True)], axis=-1)
        comps = concat(comps, expand(value, v.batch_shape[:-1] + (1,)))
    message = project(comps, log_w) / value
    # where every clone's message is uniform the mixture is the value itself: the message
    # is exactly uniform (the projection's rounding would leave an improper residue)
    silent = np.all(m.is_uniform(), axis=-1)
    if not any_true(silent):
        return message
    return type(message).from_natural(*(
        np.where(np.reshape(silent, silent.shape + (1,) * (np.ndim(e) - silent.ndim)), 0.0, e)
        for e in message.eta))


def _all(cases: Any) -> tuple[int, ...]:
    return tuple(range(np.shape(_logits(cases))[-1]))


@ENTER.operator("ep", "enter")
@ENTER.operator("vmp", "enter", trigger=("value", "cases"), skip_if_uniform=("value",))
def _enter(cases, value) -> Distribution:
    """``value`` in every case."""
    return expand(value, np.broadcast_shapes(value.batch_shape + (1,), np.shape(_logits(cases))))


@ENTER.operator("ep", "value", skip_if_uniform=("enter", "cases"), proper=("value",))
def _enter_value_ep(enter, cases, value) -> Distribution:
    return _enter_value(enter, cases, value, _all(cases))


@ENTER.operator("vmp", "value", skip_if_uniform=("enter", "cases"))
def _enter_value_vmp(enter, cases) -> Distribution:
    """Π_k m_k^{q_k}."""
    return power_product(enter, np.exp(normalized(_logits(cases))))


@ENTER.operator("ep", "cases")  # uniform clone and value still weigh log K
def _enter_cases_ep(enter, cases, value) -> Bernoulli:
    return _enter_cases(cases, value, enter, _all(cases))


@ENTER_PARTIAL.operator("ep", "enter_partial")
@ENTER_PARTIAL.operator("vmp", "enter_partial", trigger=("value", "cases"),
                        skip_if_uniform=("value",))
def _enter_partial(cases, value, indices) -> Distribution:
    """``value`` in each listed case."""
    batch = np.broadcast_shapes(value.batch_shape, np.shape(_logits(cases))[:-1])
    return expand(value, batch + (len(indices),))


@ENTER_PARTIAL.operator("ep", "value", skip_if_uniform=("enter_partial", "cases"),
                        proper=("value",))
def _enter_partial_value_ep(enter_partial, cases, value, indices) -> Distribution:
    return _enter_value(enter_partial, cases, value, tuple(indices))


@ENTER_PARTIAL.operator("vmp", "value", skip_if_uniform=("enter_partial", "cases"))
def _enter_partial_value_vmp(enter_partial, cases, indices) -> Distribution:
    return power_product(enter_partial, np.exp(normalized(_logits(cases)))[..., list(indices)])


@ENTER_PARTIAL.operator("ep", "cases")  # (see Gate.Exit's)
def _enter_partial_cases_ep(enter_partial, cases, value, indices) -> Bernoulli:
    return _enter_cases(cases, value, enter_partial, tuple(indices))


def _one_posterior(cases, value, clone, index, own: np.ndarray
                   ) -> tuple[np.ndarray, Distribution, Distribution]:
    """log q(case index), value and clone on the element batch, given ``own``, this
    factor's EP message to the cases (as ``_one`` computes it)."""
    lw = _logits(cases)
    index = np.asarray(index)
    aligned = index.ndim > 0
    batch = np.broadcast_shapes(value.batch_shape, clone.batch_shape, index.shape,
                                lw.shape if aligned else lw.shape[:-1])
    full = normalized(lw + own)
    if aligned:
        lp = np.take_along_axis(np.broadcast_to(full, batch), np.broadcast_to(index, batch), -1)
    else:
        lp = full[..., int(index)]
    return lp, value.broadcast_to(batch), clone.broadcast_to(batch)


def _one(cases, value, clone, index, ep: bool = True
         ) -> tuple[np.ndarray, Distribution, Distribution, np.ndarray]:
    """log q(case index), value and clone on the element batch, and the EP message to the
    cases (log ∫ m̂_value m̂_clone on the case; with an aligned index, on each element).

    Under EP ``cases`` is the message from the cases array, which lacks this factor's own
    message: it is added back (for an aligned index, every element's) before normalising.
    """
    lw = _logits(cases)
    index = np.asarray(index)
    aligned = index.ndim > 0
    batch = np.broadcast_shapes(value.batch_shape, clone.batch_shape, index.shape,
                                lw.shape if aligned else lw.shape[:-1])
    v, m = value.broadcast_to(batch), clone.broadcast_to(batch)
    e = log_average(v, m) if ep else np.zeros(batch)
    rest = log_mass(v) if ep else np.zeros(batch)  # the cases that do not read the value
    own = e if aligned else np.where(np.arange(lw.shape[-1]) == index, e[..., None],
                                     rest[..., None])
    return (*_one_posterior(cases, value, clone, index, own), own)


@ENTER_ONE.operator("ep", "enter_one")
@ENTER_ONE.operator("vmp", "enter_one", trigger=("value", "cases"), skip_if_uniform=("value",),
                    shape_only=("cases",))
def _enter_one(cases, value, index) -> Distribution:
    """``value`` itself, on the element batch."""
    shape = _cases_shape(cases)
    index_shape = np.shape(index)
    return _clone(value, broadcast_shapes(value.batch_shape, index_shape,
                                          shape if index_shape else shape[:-1]))


def _cases_shape(cases: Any) -> tuple[int, ...]:
    """The shape of ``_logits(cases)`` (batch, K), read without making the array where
    ``cases`` is a Bernoulli message (a clone reads the cases for their shape alone)."""
    if type(cases) is Bernoulli:
        return cases.eta[0].shape
    return np.shape(_logits(cases))


def _clone(value: Distribution, batch: tuple[int, ...]) -> Distribution:
    """``value.broadcast_to(batch)``: the same (immutable) message object for the same
    value and batch, remembered while the value lives, so that what is remembered of a
    clone (``gaussian._rows``, its moments) is found again when a sweep enters the same
    posterior twice (a Switch's means, for the cases' evidence and for the precisions'
    message).  A fresh view under tracing and for arrays that are not NumPy's."""
    if traced() or type(value.eta[0]) is not np.ndarray:
        return value.broadcast_to(batch)
    hit = recall("gate_clone", value)
    if hit is not None and hit[0] == batch:
        return hit[1]
    out = value.broadcast_to(batch)
    remember("gate_clone", value, (batch, out))
    return out


@ENTER_ONE.buffer("ep", "weight", "bool")
def _enter_one_weight_ep(enter_one, cases, value, index) -> Bernoulli:
    """The EP message to the cases (log ∫ m̂_value m̂_clone on the case), which the message
    to ``value`` needs too: computed once, read Fresh by both (seed 000's shared work)."""
    return Bernoulli.from_natural(_one(cases, value, enter_one, index)[3])


@ENTER_ONE.operator("ep", "value", skip_if_uniform=("enter_one", "cases"), proper=("value",),
                    fresh=("weight",))
def _enter_one_value_ep(enter_one, cases, value, index, weight) -> Distribution:
    """proj[q m_value·m_clone + (1 − q) m_value] / m_value, q the posterior of the case
    (from the cases' message and this factor's own, ``weight``)."""
    lp, v, m = _one_posterior(cases, value, enter_one, index, weight.log_odds)
    comps = concat(expand(v * m, v.batch_shape + (1,)), expand(v, v.batch_shape + (1,)))
    return project(comps, np.stack([lp, log1mexp(lp)], axis=-1)) / value


@ENTER_ONE.operator("vmp", "value", skip_if_uniform=("enter_one", "cases"))
def _enter_one_value_vmp(enter_one, cases, value, index, *,
                         reduce: Reduce | None = None) -> Distribution:
    """m_clone^{q(case index)}; with ``reduce`` (the value repeated over a plate, as a
    mixture's components over the data) its product over those plate axes, Σ q η in one
    einsum per natural parameter, or computed by the clone's own deferred operator with
    the weights q (``common.Deferred``: no per-element message is ever made)."""
    if reduce is None:
        if isinstance(enter_one, Deferred):
            enter_one = enter_one.value()
        if np.ndim(index) and _is_switch(index, np.shape(_logits(cases))[-1]):
            # a Switch's clones, element k on case k: q(case k) is the (N, K) array of
            # the cases' probabilities itself (no gather), shared by every clone of the gate
            batch = np.broadcast_shapes(value.batch_shape, enter_one.batch_shape,
                                        np.shape(_logits(cases)))
            q = np.broadcast_to(_case_probs(cases), batch)
            return power_each(enter_one.broadcast_to(batch), q)
        lp, _, m, _ = _one(cases, value, enter_one, index, ep=False)
        return power_product(expand(m, m.batch_shape + (1,)), np.exp(lp)[..., None])
    q = _one_probs(cases, index)
    if isinstance(enter_one, Deferred):
        return enter_one.reduced(reduce, q)
    letters = "ij"[: enter_one.event_ndim]
    return enter_one.from_natural(*(plate_einsum(letters, [(q, ""), (e, letters)], reduce)
                                    for e in enter_one.eta))


def _one_probs(cases: Any, index: Any) -> np.ndarray:
    """q(case ``index``) on the element batch: for a Switch's clones (element k on case
    k) the shared (N, K) case probabilities themselves (``_case_probs``, no gather)."""
    if np.ndim(index) and _is_switch(index, _cases_shape(cases)[-1]):
        return _case_probs(cases)
    index = np.asarray(index)
    full = normalized(_logits(cases))
    if index.ndim:
        batch = np.broadcast_shapes(full.shape, index.shape)
        return np.exp(np.take_along_axis(np.broadcast_to(full, batch),
                                         np.broadcast_to(index, batch), -1))
    return np.exp(full[..., int(index)])


def _is_switch(index: Any, k: int) -> bool:
    """Whether ``index`` is ``arange(k)``: a Switch's clones, element k on case k
    (``base.is_arange``: by value in NumPy, by how the array was made under tracing)."""
    return is_arange(index, k)


def _case_probs(cases: Any) -> np.ndarray:
    """q(case k) = exp(ℓ_k) normalised over the last axis, computed once per cases message
    (every clone of a gate's variables reads the same one in a sweep)."""
    return memo_of("exp", normalized(_logits(cases)), exp_flushed)


@ENTER_ONE.operator("ep", "cases", fresh=("weight",))  # (see Gate.Exit's)
def _enter_one_cases_ep(enter_one, cases, value, index, weight) -> Bernoulli:
    """``weight``, the buffer: log ∫ m̂_value m̂_clone."""
    return weight


@uniform_message
def _uniform_cases(cases, value, index=None) -> Bernoulli:
    """VMP: the clones send no evidence (a uniform message on the cases they touch; the
    same immutable message for every call with the same shapes, ``_uniform_bernoulli``)."""
    lw = _logits(cases)
    if index is not None and np.ndim(index):
        return _uniform_bernoulli(broadcast_shapes(value.batch_shape, np.shape(index),
                                                   lw.shape))
    return _uniform_bernoulli(broadcast_shapes(value.batch_shape + (1,), lw.shape))


def _uniform_bernoulli(shape: tuple[int, ...]) -> Bernoulli:
    """``Bernoulli.uniform(shape)``, made once per shape (a read-only view of one zero:
    immutable); made afresh under tracing, where the uniform views are recorded."""
    return Bernoulli.uniform(shape) if traced() else _uniform_bernoulli_of(shape)


@functools.lru_cache(maxsize=256)
def _uniform_bernoulli_of(shape: tuple[int, ...]) -> Bernoulli:
    return Bernoulli.uniform(shape)


@ENTER.operator("vmp", "cases")
@ENTER_PARTIAL.operator("vmp", "cases")
@uniform_message
def _enter_cases_vmp(cases, value) -> Bernoulli:
    return _uniform_cases(cases, value)


ENTER_ONE.operator("vmp", "cases", shape_only=("cases", "value", "index"))(_uniform_cases)


# ----- Gate.Exit ----------------------------------------------------------------------
def _exits(exit, cases, values) -> tuple[np.ndarray, Distribution, Distribution]:
    """ℓ, exit and values broadcast to (batch, K)."""
    lw = _logits(cases)
    shape = np.broadcast_shapes(exit.batch_shape + (1,), values.batch_shape, lw.shape)
    return np.broadcast_to(lw, shape), expand(exit, shape), values.broadcast_to(shape)


@EXIT.operator("ep", "exit", skip_if_uniform=("values", "cases"))
def _exit_ep(exit, cases, values) -> Distribution:
    """proj[Σ_k w_k m_exit·m_k] / m_exit, w_k ∝ exp(ℓ_k) ∫ m̂_exit m̂_k."""
    lw, x, m = _exits(exit, cases, values)
    return project(x * m, lw + log_average(x, m)) / exit


@EXIT.operator("vmp", "exit", skip_if_uniform=("values", "cases"), proper=("values",),
               trigger=("values", "cases"))
def _exit_vmp(cases, values) -> Distribution:
    """proj[Σ_k q_k m_k]."""
    lw = _logits(cases)
    shape = np.broadcast_shapes(values.batch_shape, lw.shape)
    return project(values.broadcast_to(shape), np.broadcast_to(lw, shape))


@EXIT.operator("ep", "values", skip_if_uniform=("exit",))
@EXIT.operator("vmp", "values", skip_if_uniform=("exit",))
def _exit_values(exit, cases) -> Distribution:
    """``exit``'s message, to every case."""
    return expand(exit, np.broadcast_shapes(exit.batch_shape + (1,), np.shape(_logits(cases))))


@EXIT.operator("ep", "cases")  # a uniform exit still weighs a uniform clone (log K)
def _exit_cases_ep(exit, cases, values) -> Bernoulli:
    """log ∫ m̂_exit m̂_k."""
    _, x, m = _exits(exit, cases, values)
    return Bernoulli.from_natural(log_average(x, m))


@EXIT.operator("vmp", "cases", skip_if_uniform=("exit",), proper=("values",),
               trigger=("values",))
def _exit_cases_vmp(exit, cases, values) -> Bernoulli:
    """E_{m_k}[log m̂_exit]."""
    _, x, m = _exits(exit, cases, values)
    return Bernoulli.from_natural(average_log(m, x))


@EXIT.evidence_operator("vmp")
def _exit_average_log_factor(exit, cases, values) -> np.ndarray:
    """−E_{to_exit}[log m̂_exit]: the children's term its message to cases counted again;
    0 where m̂_exit is uniform (no children: that message skips it, and a uniform
    Dirichlet's normaliser, log Γ(K), must not be taken away)."""
    term = -average_log(_exit_vmp(cases, values), exit)
    return np.where(exit.is_uniform(), 0.0, term)


# ----- Gate.ExitGiven --------------------------------------------------------------------
# The user's variable w drawn inside a gate ``if e == case`` that the compiler wrote once
# per case k of a selector z (e an exit of the gates on z: ``gate_order``), each copy
# ``values[k]`` existing where z = k and e's case hold.  factorflow reports a variable
# drawn in a gate by its posterior given the gate's case, here P(w | e = case) =
# Σ_k P(z = k | e = case) P(w | z = k, e = case), with P(z = k | e = case) ∝ q(z = k)
# q(e = case | z = k): the cases' posterior and the per-case clone of e, ``given``.  The
# exit is read by nothing (the copies are what the model reads), so its messages back are
# uniform and it adds nothing to the evidence, under EP and VMP alike.
def _given_weights(cases, given, case) -> np.ndarray:
    """log q(k) + log q(given[k] = case) on (batch, K): the unnormalised log weights."""
    lw = normalized(_logits(cases))
    lg = log_probs(given)  # a boolean's values (true, false), a discrete's 0..K−1
    at = np.broadcast_to(np.asarray(case, int)[..., None, None], lg.shape[:-1] + (1,))
    with np.errstate(invalid="ignore"):
        return lw + np.take_along_axis(lg, at, axis=-1)[..., 0]


@EXIT_GIVEN.operator("ep", "exit", skip_if_uniform=("values", "cases"))
@EXIT_GIVEN.operator("vmp", "exit", skip_if_uniform=("values", "cases"), proper=("values",),
                     trigger=("values", "cases", "given"))
def _exit_given(cases, given, values, case) -> Distribution:
    """proj[Σ_k w_k m_k], w_k ∝ q(k) q(given[k] = case) (exact for Bernoulli and
    Discrete values): the posterior of the user's variable given ``given``'s case."""
    lw = _given_weights(cases, given, case)
    shape = np.broadcast_shapes(values.batch_shape, lw.shape)
    return project(values.broadcast_to(shape), np.broadcast_to(lw, shape))


@EXIT_GIVEN.operator("ep", "values", skip_if_uniform=("exit",))
@EXIT_GIVEN.operator("vmp", "values", skip_if_uniform=("exit",))
def _exit_given_values(exit, cases) -> Distribution:
    """``exit``'s message (uniform: the exit is read by nothing), to every case."""
    return _exit_values(exit, cases)


@EXIT_GIVEN.operator("ep", "cases")
@EXIT_GIVEN.operator("vmp", "cases")
@uniform_message
def _exit_given_cases(cases, values) -> Bernoulli:
    """Uniform: the exit, read by nothing, weighs no case."""
    return _uniform_cases(cases, values)


@EXIT_GIVEN.operator("ep", "given")
@EXIT_GIVEN.operator("vmp", "given")
@uniform_message
def _exit_given_given(given) -> Distribution:
    """Uniform: the exit, read by nothing, says nothing of ``given``."""
    return type(given).from_natural(*(np.zeros(np.shape(e)) for e in given.eta))


@uniform_message
def _zero(**args: Any) -> np.ndarray:
    """Gate factors that only move values add nothing to the evidence themselves."""
    return np.zeros(())


for _factor in (ENTER, ENTER_PARTIAL, ENTER_ONE, EXIT, EXIT_GIVEN):
    for _algorithm in ("ep", "vmp"):
        if _algorithm not in _factor.evidence:
            _factor.evidence_operator(_algorithm)(_zero)
