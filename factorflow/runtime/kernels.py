"""The helpers generated code calls besides message operators (its runtime library)."""

from __future__ import annotations

import warnings
from contextvars import ContextVar
from typing import Any

import numpy as np

from factorflow.distributions import Bernoulli
from factorflow.distributions.base import (
    Distribution,
    _remember_traced,
    add_at,
    memo_of,
    set_at,
    strides,
    traced,
)
from factorflow.errors import ImproperMessageError, ImproperMessageWarning, ModelError
from factorflow.factors.common import Deferred
from factorflow.factors.variable import (
    ep_variable_evidence,
    slot,
    total,
    vmp_variable_evidence,
)


def prod_over(msg: Distribution, shape: tuple[int, ...], axis: tuple[int, ...]
              ) -> Distribution:
    """Product of a use's messages over the plate axes the variable does not have.

    A natural parameter that is constant along an axis (a broadcast view, or a message of
    fewer axes) is multiplied by the axis length instead of being summed element by
    element.
    """
    nd = msg.event_ndim
    out = []
    for e in msg._product_form():
        full_nd = len(shape) + nd
        if e.ndim < full_nd:
            e = e.reshape((1,) * (full_nd - e.ndim) + e.shape)
        scale = 1.0
        sum_axes = []
        for ax in axis:
            if e.shape[ax] == 0:  # an empty plate: the product of no messages, summed
                sum_axes.append(ax)
            elif e.shape[ax] == 1 or strides(e)[ax] == 0:
                scale *= shape[ax]
            else:
                sum_axes.append(ax)
        red = np.sum(e, axis=tuple(sum_axes), keepdims=True) if sum_axes else e
        red = red[tuple(0 if i in axis else slice(None) for i in range(red.ndim))]
        if scale == 0.0:  # a broadcast message over an empty plate: uniform (0 · ∞ is
            red = np.zeros_like(red)  # NaN for a point mass's natural parameter)
        out.append(red * scale if scale != 1.0 else red)
    return msg.from_natural(*out)


def scatter_prod(msg: Distribution, index: np.ndarray, use_shape: tuple[int, ...],
                 size: int) -> Distribution:
    """``out[j]`` = product of ``msg[i]`` over i with ``index[i] == j`` (gathers' inverse)."""
    full = msg if msg.batch_shape == tuple(use_shape) else msg.broadcast_to(use_shape)
    return full.scatter_prod(np.asarray(index), size)


def align_plates(value: Any, positions: tuple[int, ...], ndim: int, event_ndim: int = 0
                 ) -> Any:
    """Lay out ``value``'s plate axes at ``positions`` among ``ndim`` plate axes (a known
    array's last ``event_ndim`` axes are its event: a vector's one, a matrix's two).  A
    value over fewer plate axes (an ff.Data given over the innermost plates only) takes
    the last of ``positions``, as NumPy broadcasting aligns it."""
    def lay(e: np.ndarray, nd: int) -> np.ndarray:
        new = [1] * ndim
        batch = e.shape[: e.ndim - nd]
        for pos, size in zip(positions[max(len(positions) - len(batch), 0):], batch,
                             strict=True):
            new[pos] = size
        return e.reshape(tuple(new) + e.shape[e.ndim - nd:])
    if isinstance(value, Distribution):
        eta = value.eta
        if len(eta) == 1 and type(eta[0]) is np.ndarray:  # (a Discrete posterior, each
            # sweep: one reshape, without ``_map``'s closure and checks; never traced)
            return value.from_natural(lay(eta[0], value.event_ndim))
        out = value._map(lay)
        if traced():  # (what each parameter was laid out from, for the readers that
            # find a normalisation made of it: NumPy's ``.base``, ``fused_switch``)
            for new, own in zip(out.eta, value.eta, strict=True):
                _remember_traced("laid_out_from", new, own)
        return out
    if traced():  # one layout a trace while the array lives: the statements that read
        # the same data read one array, and what is made of it is made once (by_data)
        return memo_of(f"align_plates {positions} {ndim} {event_ndim}", value,
                       lambda v: lay(np.asarray(v), event_ndim))
    return lay(np.asarray(value), event_ndim)


def permute_plates(value: Any, order: tuple[int, ...]) -> Any:
    """``value`` with its leading plate axes permuted: result axis i is ``value``'s axis
    ``order[i]`` (a statement whose loops run in another order than an array's plates;
    event axes stay last).  A message over fewer plates (broadcast along the leading
    loops: NumPy's alignment from the right) gets those axes, of length 1, first."""
    def perm(e: np.ndarray, nd: int) -> np.ndarray:
        if e.ndim - nd == 0:  # a broadcast scalar message: nothing to permute
            return e
        if e.ndim - nd < len(order):
            e = e.reshape((1,) * (len(order) - e.ndim + nd) + e.shape)
        return np.transpose(e, tuple(order) + tuple(range(len(order), e.ndim)))
    if isinstance(value, Distribution):
        return value._map(perm)
    return perm(np.asarray(value), 0)


def check_proper(d: Distribution, what: str, iteration: int | None = None,
                 where: Any = None) -> None:
    """ImproperMessageError naming ``what`` (a posterior and its model statement) and the
    iteration (counted from 1) unless every element of ``d`` is proper; with ``where`` (a
    boolean mask over the elements), only the elements where it holds are checked (the
    variable exists only there: a branch of an observed condition).  In the first sweep
    (``iteration == 0``) an exactly uniform element passes: the loop may read a posterior
    before the messages into it have all been sent once (a gate case whose clone comes
    later in the sweep); from the second sweep on it is an error like any other."""
    if d.compact().all_proper():  # (the common verdict, in one cheap pass over the
        return  # distinct elements: no mask or first-sweep exemption can change it)
    if iteration == 0:
        fresh = ~np.asarray(d.is_uniform(), bool)
        where = fresh if where is None else leading(where, len(d.batch_shape)) & fresh
    if where is not None:
        where = np.broadcast_to(leading(where, len(d.batch_shape)), d.batch_shape)
        if not np.any(where):
            return
        if not np.all(where):  # the elements where it exists, as one flat batch
            keep = np.flatnonzero(where.ravel())
            d = d._map(lambda e, nd: np.reshape(e, (-1,) + e.shape[e.ndim - nd:])[keep])
    if d.all_proper():  # (one cheap pass over an (N, K) posterior where it is proper)
        return
    d.check_proper(what if iteration is None else f"{what}, at iteration {iteration + 1}")


def _proper_elements(value: Distribution, mask: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Per element of ``value``: (proper, strictly improper).  A NaN parameter is neither;
    an exactly uniform message is not proper; ``mask`` (over the statement's plates) makes
    every element where the statement does not apply proper."""
    proper = np.asarray(value.is_proper())
    if np.all(proper) and not any(np.isnan(e).any() for e in value.eta):
        return proper, ~proper  # (the common case, in as few passes as it can be told)
    number = np.ones_like(proper)
    for e in value.eta:  # a NaN parameter is no message either
        nan = np.isnan(e)
        number = number & ~(nan.any(axis=tuple(range(proper.ndim, nan.ndim)))
                            if nan.ndim > proper.ndim else nan)
    improper = ~proper & number & ~np.asarray(value.is_uniform())
    proper = proper & number
    if mask is not None:
        proper, where_applies = np.broadcast_arrays(proper, leading(mask, proper.ndim))
        proper = proper | ~where_applies
        improper = improper & where_applies
    return proper, improper


def check_proper_input(value: Any, what: str, iteration: int | None = None, mask: Any = None
                       ) -> Any:
    """An operator annotated ``proper`` for an argument cannot run on an improper or
    uniform message there: ImproperMessageError naming ``what`` (the factor, the message
    it computes and the argument) and the iteration (counted from 1).  Known values pass;
    ``mask`` (over the statement's plates) limits the check to where the statement
    applies.  Returns ``value``."""
    if not isinstance(value, Distribution):
        return value
    if value.compact().all_proper():  # (the common verdict, as ``check_proper`` reads
        return value  # it: a mask can only make more elements proper)
    proper, _ = _proper_elements(value, mask)
    if np.all(proper):
        return value
    bad = np.argwhere(~proper)
    where = f" at index {tuple(int(i) for i in bad[0])}" if proper.ndim else ""
    when = "before the first iteration" if iteration is None else \
        f"at iteration {iteration + 1}"
    raise ImproperMessageError(
        f"{what} needs a proper message, got an improper or uniform one{where} {when}: "
        f"{value!r}. Give the variables around it proper priors, or initialise them "
        "(init=...).")


#: during a run, the EP updates ``skip_improper`` skipped: what -> (last sweep, elements)
SKIPPED: ContextVar[dict[str, tuple[int, int]] | None] = ContextVar("skipped", default=None)


def skip_improper(old: Distribution, compute: Any, inputs: tuple, what: str,
                  iteration: int | None, mask: Any = None) -> Distribution:
    """EP: the message of an operator annotated ``proper`` for ``inputs``, computed by
    ``compute()``.  Where an input is strictly improper (in a sweep, a cavity that other
    sites' negative precisions made improper, as parallel EP on a mixture does), that
    element keeps its previous message ``old``: the site update is skipped there (Minka
    2001), and an ``ImproperMessageWarning`` names the factor, the argument, the iteration
    and how many elements.  A uniform or NaN input, or an improper one before the first
    sweep, raises ``ImproperMessageError`` as ``check_proper_input`` does."""
    skip = None
    for value in inputs:
        if not isinstance(value, Distribution):
            continue
        proper, improper = _proper_elements(value, mask)
        if np.all(proper):
            continue
        if iteration is None or np.any(~proper & ~improper):
            check_proper_input(value, what, iteration, mask)
        skip = improper if skip is None else skip | improper
    if skip is None:
        return compute()
    with np.errstate(all="ignore"):
        new = compute()
    skip = leading(skip, len(new.batch_shape))
    count, skipped = int(np.sum(skip)), SKIPPED.get()
    if skipped is None or what not in skipped:  # once per run and message
        warnings.warn(skipped_warning(what, count, iteration), stacklevel=2)
    if skipped is not None:
        skipped[what] = (iteration, count)
    return where_mask(~skip, new, old)


def skipped_warning(what: str, count: int, iteration: int) -> ImproperMessageWarning:
    """The warning of an EP update ``what`` skipped at ``count`` elements in sweep
    ``iteration`` (0-based): the first skip of a run (``skip_improper``)."""
    return ImproperMessageWarning(
        f"{what}: its input was improper at {count} element(s) at iteration "
        f"{iteration + 1}; the message kept its previous value there (EP skipped those "
        "updates; a run that still skips them in its last sweep is not at an EP fixed "
        "point and says so)")


def initial(init: dict[str, Any], label: str, family: type, shape: tuple[int, ...]
            ) -> Distribution:
    """The user's initial posterior for ``label``, broadcast to the variable's plates."""
    value = init[label]
    if not isinstance(value, family):
        raise ModelError(f"init[{label!r}] must be a {family.__name__} distribution, got "
                         f"{type(value).__name__}.")
    value.check_proper(f"init[{label!r}]")
    try:
        return value.broadcast_to(shape) if value.batch_shape != tuple(shape) else value
    except ValueError:
        raise ModelError(f"init[{label!r}] has batch shape {value.batch_shape}, but the "
                         f"variable has shape {tuple(shape)}.") from None


def first_sweep(resume: dict[str, Any] | None, loop: int, iterations: int) -> int:
    """The first sweep loop ``loop`` runs: 0 on a fresh run (or a resumed one not yet
    at this loop), the saved sweep count in the loop the state was saved in, and
    ``iterations`` (none) in a loop the saved run had finished or stopped."""
    if resume is None or resume["loop"] < loop:
        return 0
    if resume["loop"] > loop or resume.get("stopped"):
        return iterations
    return int(resume["sweeps"])


NAMESPACE = {
    "np": np,
    "first_sweep": first_sweep,
    "prod_over": prod_over,
    "scatter_prod": scatter_prod,
    "align_plates": align_plates,
    "permute_plates": permute_plates,
    "check_proper": check_proper,
    "check_proper_input": check_proper_input,
    "skip_improper": skip_improper,
    "initial": initial,
    "total": total,
    "ep_variable_evidence": ep_variable_evidence,
    "vmp_variable_evidence": vmp_variable_evidence,
}


# ----- gate clones: one slot of an array variable ------------------------------------
def take_element(value: Any, fixed: tuple[tuple[int, int], ...]) -> Any:
    """``value`` at the given (axis, index) pairs of its plate axes."""
    if isinstance(value, Distribution):
        nd = len(value.batch_shape)
        return value._map(lambda e, _: e[slot(fixed, nd)])
    arr = np.asarray(value)
    return arr[slot(fixed, arr.ndim)]


def with_element(whole: Distribution, fixed: tuple[tuple[int, int], ...],
                 part: Distribution) -> Distribution:
    """``whole`` with its slot at ``fixed`` replaced by ``part`` (a new object)."""
    where = slot(fixed, len(whole.batch_shape))
    return whole.from_natural(*(set_at(w, where, p)
                                for w, p in zip(whole.eta, part.eta, strict=True)))


def place_element(msg: Distribution, fixed: tuple[tuple[int, int], ...],
                  use_shape: tuple[int, ...], axes: tuple[int, ...],
                  var_shape: tuple[int, ...]) -> Distribution:
    """A message over the whole variable: the use's messages (multiplied over the plates
    the variable lacks) at the slot, uniform elsewhere."""
    reduced = prod_over(msg, use_shape, axes) if axes else (
        msg if msg.batch_shape == tuple(use_shape) else msg.broadcast_to(use_shape))
    nd = len(var_shape)
    out = []
    for e in reduced._product_form():
        acc = np.zeros(tuple(var_shape) + e.shape[e.ndim - msg.event_ndim:])
        out.append(add_at(acc, slot(fixed, nd), e))
    return msg.from_natural(*out)


def place_slots(msg: Distribution, slots: tuple[int, ...], var_shape: tuple[int, ...]
                ) -> Distribution:
    """Slot s of the last plate axis goes to case ``slots[s]``; other cases uniform.  Plate
    axes of ``msg`` before the variable's (a gate inside a plate, on a condition outside
    it) are multiplied out: the variable receives the product over them."""
    out = []
    extra = tuple(range(len(msg.batch_shape) - len(var_shape)))
    for e in msg._product_form():
        e = np.sum(e, axis=extra) if extra else e
        acc = np.zeros(tuple(var_shape) + e.shape[len(msg.batch_shape) - len(extra):])
        out.append(add_at(acc, (Ellipsis, list(slots)) + (slice(None),) * msg.event_ndim, e))
    return msg.from_natural(*out)


def take_slots(value: Distribution, slots: tuple[int, ...]) -> Distribution:
    """The cases ``slots`` of the last plate axis, in slot order."""
    nd = value.event_ndim
    return value._map(lambda e, _: np.take(e, list(slots), axis=e.ndim - nd - 1))


def gate_message(term: Any) -> Bernoulli:
    """An evidence term sent to a gate's case: a Bernoulli whose log-odds is the term."""
    return Bernoulli.from_natural(np.asarray(term, dtype=float))


def fit_plates(d: Distribution, shape: tuple[int, ...]) -> Distribution:
    """``d`` over exactly the variable's plates (a broadcast view when it has fewer)."""
    return d if d.batch_shape == tuple(shape) else d.broadcast_to(shape)


def as_bool(value: Any) -> np.ndarray:
    return np.asarray(value).astype(bool)


def leading(mask: Any, ndim: int) -> np.ndarray:
    """A boolean mask over a statement's plates laid over the leading axes of a target
    with ``ndim`` batch axes (the axes after the plates, such as a gate's cases, see the
    mask broadcast along them)."""
    mask = np.asarray(mask, bool)
    return mask.reshape(mask.shape + (1,) * (ndim - mask.ndim)) if mask.ndim < ndim else mask


def where_mask(mask: np.ndarray, new: Distribution, old: Distribution) -> Distribution:
    """``new`` where the observed condition holds, ``old`` elsewhere."""
    mask = leading(mask, max(len(new.batch_shape), len(old.batch_shape)))
    shape = np.broadcast_shapes(np.shape(mask), new.batch_shape, old.batch_shape)
    m = np.broadcast_to(mask, shape)
    out = []
    for a, b in zip(new.eta, old.eta, strict=True):
        tail = a.shape[a.ndim - new.event_ndim:] if new.event_ndim else ()
        mm = m.reshape(m.shape + (1,) * len(tail))
        out.append(np.where(mm, np.broadcast_to(a, shape + tail),
                            np.broadcast_to(b, shape + tail)))
    return new.from_natural(*out)


def mask_term(mask: np.ndarray, term: Any) -> np.ndarray:
    """An evidence term that counts only where the observed condition holds."""
    return np.where(leading(mask, np.ndim(term)), term, 0.0)


def damp(old: Distribution, new: Distribution, damping: dict[str, float] | None,
         label: str) -> Distribution:
    """EP damping: natural parameters d·η_old + (1 − d)·η_new, with d the damping of the
    variable ``label`` (``damping[label]``, else ``damping[None]``, else none).  A
    uniform old message (nothing sent yet) is not mixed in."""
    if not damping:
        return new
    d = damping.get(label, damping.get(None, 0.0))
    if not d:
        return new
    fresh = np.asarray(old.is_uniform())  # per element: nothing sent there yet
    out = []
    for a, b in zip(old.eta, new.eta, strict=True):
        keep = np.where(fresh, 0.0, d).reshape(fresh.shape + (1,) * (np.ndim(a) - fresh.ndim))
        out.append(keep * np.asarray(a) + (1.0 - keep) * np.asarray(b))
    return new.from_natural(*out)


def _relative_step(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """|x − y| / (1 + |y|) elementwise, 0 where x and y are the same infinity."""
    with np.errstate(invalid="ignore"):
        step = np.abs(np.subtract(x, y))
    step = np.where(np.equal(x, y), 0.0, step) if np.isnan(step).any() else step
    return step / (1.0 + np.abs(y))


def local_changes(new: Distribution, old: Distribution) -> np.ndarray:
    """Per element of the plates (``batch_shape``): the largest relative change
    |Δη| / (1 + |η_old|) of its natural parameters from ``old`` to ``new``, as
    ``local_change`` measures the whole; a point mass that stays put has not moved; NaN
    propagates."""
    batch = np.broadcast_shapes(new.batch_shape, old.batch_shape)
    change = np.zeros(batch)
    for x, y in zip(new.eta, old.eta, strict=True):
        step = _relative_step(x, y)
        event = np.ndim(x) - len(new.batch_shape)  # this parameter's event axes
        if event > 0:
            step = np.max(step, axis=tuple(range(-event, 0)), initial=0.0)
        change = np.maximum(change, step)  # (NaN propagates)
    return change


def local_stopped(new: tuple[Distribution, ...], old: tuple[Distribution, ...],
                  stopped: tuple[np.ndarray, ...] | None, tolerance: float
                  ) -> tuple[np.ndarray, ...]:
    """``local_stop="each"``: per posterior, the elements that have stopped — those
    ``stopped`` already (None: none) and those whose change from ``old`` to ``new``
    (``local_changes``) is below ``tolerance``; an element at NaN never stops."""
    return tuple((local_changes(a, b) < tolerance) | (False if done is None else done)
                 for a, b, done in zip(new, old, stopped or (None,) * len(new),
                                       strict=True))


def local_keep(new: Distribution, before: tuple[Distribution, ...],
               stopped: tuple[np.ndarray, ...] | None, k: int) -> Distribution:
    """``new``, the k-th posterior of ``local_stopped`` just updated, except where its
    elements have stopped: there, ``before[k]`` (its value before the pass)."""
    return new if stopped is None else where_mask(stopped[k], before[k], new)


def local_all_stopped(stopped: tuple[np.ndarray, ...]) -> bool:
    """Whether every element of every posterior of ``local_stopped`` has stopped."""
    return all(bool(np.all(done)) for done in stopped)


def local_change(new: tuple[Distribution, ...], old: tuple[Distribution, ...]) -> float:
    """The largest relative change |Δη| / (1 + |η_old|) of the natural parameters from
    ``old`` to ``new`` (an inner loop's posteriors, ``transforms/local_loop.py``): the
    largest of ``local_changes``, without its per-element reduction; a point mass that
    stays put (the same infinity) has not moved; NaN propagates (so a loop gone to NaN
    never counts as settled; Python's ``max(0.0, nan)`` would be 0.0)."""
    changes = [0.0]
    for a, b in zip(new, old, strict=True):
        for x, y in zip(a.eta, b.eta, strict=True):
            changes.append(float(np.max(_relative_step(x, y), initial=0.0)))
    return float(np.max(changes))


NAMESPACE.update({
    "local_change": local_change,
    "local_stopped": local_stopped,
    "local_all_stopped": local_all_stopped,
    "local_keep": local_keep,
    "Deferred": Deferred,
    "damp": damp,
    "as_bool": as_bool,
    "where_mask": where_mask,
    "mask_term": mask_term,
    "fit_plates": fit_plates,
    "take_element": take_element,
    "with_element": with_element,
    "place_element": place_element,
    "place_slots": place_slots,
    "take_slots": take_slots,
    "gate_message": gate_message,
})
