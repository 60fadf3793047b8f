"""Functional versions of the kernel functions JAX cannot trace as written.

Each function here replaces the one of the same name in the JAX copy of its module
(``jax_namespace``), and computes the same thing without what tracing forbids: an
in-place update (``acc[i] += x``, ``np.add.at``), a branch on array values (``if
np.any(x):`` fast paths, which here always take the general path) or a conversion to a
Python number.  Run-time checks that raise become records of their verdict in
``jax_loop.CHECKS`` (raised on the host after the loop).  Each override says which
function it replaces and what differs; the tests compare both backends' posteriors.

An override is written as if it stood in its module: it is installed with the copied
module's globals, so ``np`` is ``jax.numpy`` there and every other name (``E``,
``Gaussian``, ``slot``) is the copy's.  The imports below give those names to linters
and readers only.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import jax.numpy as np

from factorflow.distributions import Bernoulli, Gaussian
from factorflow.distributions.base import as_index
from factorflow.distributions.moments import E
from factorflow.factors.common import bool_log_weights, logsumexp
from factorflow.factors.compare import _CF_TERMS, _SQRT_2_OVER_PI, _TAIL
from factorflow.factors.gate import _slots
from factorflow.factors.gaussian import _spread
from factorflow.factors.mixtures import concat, expand, log_mass, project
from factorflow.factors.variable import log_average, slot
from factorflow.lazy import special
from factorflow.runtime.backends.jax_loop import CHECKS

#: module name -> {function or "Class.method" name -> its replacement}
OVERRIDES: dict[str, dict[str, Callable[..., Any]]] = {}


def override(module: str, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        OVERRIDES.setdefault(module, {})[name] = fn
        return fn
    return register


def install(name: str, module: Any, ns: Any) -> None:
    """Put the overrides of module ``name`` into its JAX copy ``module`` (and into the
    copy's ``NAMESPACE``, the generated program's globals, where it has one)."""
    module.__dict__["CHECKS"] = CHECKS
    for attr, fn in OVERRIDES.get(name, {}).items():
        fn = types.FunctionType(fn.__code__, module.__dict__, fn.__name__, fn.__defaults__,
                                fn.__closure__)
        if "." in attr:
            cls, method = attr.split(".")
            setattr(getattr(module, cls), method, fn)
            continue
        setattr(module, attr, fn)
        table = getattr(module, "NAMESPACE", None)
        if table is not None and attr in table:
            table[attr] = fn


KERNELS = "factorflow.runtime.kernels"


@override(KERNELS, "prod_over")
def prod_over(msg: Any, shape: tuple[int, ...], axis: tuple[int, ...]) -> Any:
    """``kernels.prod_over`` without its stride test: a traced array has no strides, so a
    broadcast axis (length 1 in the array) is scaled by its length and any other summed
    (a broadcast view of full length is summed: the same product, to rounding)."""
    nd = msg.event_ndim
    out = []
    for e in msg._product_form():
        full_nd = len(shape) + nd
        if e.ndim < full_nd:
            e = e.reshape((1,) * (full_nd - e.ndim) + e.shape)
        scale = 1.0
        sum_axes = []
        for ax in axis:
            if e.shape[ax] == 1 and shape[ax] != 0:
                scale *= shape[ax]
            else:
                sum_axes.append(ax)
        red = np.sum(e, axis=tuple(sum_axes), keepdims=True) if sum_axes else e
        red = red[tuple(0 if i in axis else slice(None) for i in range(red.ndim))]
        out.append(red * scale if scale != 1.0 else red)
    return msg.from_natural(*out)


@override(KERNELS, "check_proper")
def check_proper(d: Any, what: str, iteration: Any = None, where: Any = None) -> None:
    """``kernels.check_proper`` as a record: every element (where ``where`` holds) proper
    and no parameter NaN."""
    ok = _proper(d)
    if where is not None:
        ok = ok | ~np.broadcast_to(np.asarray(where, bool), ok.shape)
    CHECKS.record(what, np.all(ok))


@override(KERNELS, "_proper")
def _proper(d: Any) -> Any:
    """Per batch element: proper, with no NaN parameter."""
    ok = np.asarray(d.is_proper(), bool)
    for e in d.eta:
        nan = np.isnan(e)
        ok = ok & ~(nan.any(axis=tuple(range(ok.ndim, nan.ndim))) if nan.ndim > ok.ndim
                    else nan)
    return ok


@override(KERNELS, "check_proper_input")
def check_proper_input(value: Any, what: str, iteration: Any = None, mask: Any = None
                       ) -> Any:
    """``kernels.check_proper_input`` as a record (known values pass)."""
    if not hasattr(value, "eta"):
        return value
    ok = _proper(value)
    if mask is not None:
        ok, applies = np.broadcast_arrays(ok, np.asarray(mask, bool))
        ok = ok | ~applies
    CHECKS.record(what, np.all(ok))
    return value


GAUSSIAN = "factorflow.factors.gaussian"


@override(GAUSSIAN, "_expected_square_diff")
def _expected_square_diff(a: Any, b: Any) -> Any:
    """``gaussian._expected_square_diff`` without its in-place square."""
    d = E(a) - E(b)
    return d * d + (_spread(a) + _spread(b))


BASE = "factorflow.distributions.base"


@override(BASE, "_sub_naturals")
def _sub_naturals(a: Any, b: Any) -> Any:
    """``base._sub_naturals`` always masking (no ``if np.any`` fast path)."""
    same_inf = np.isinf(a) & np.isinf(b) & (np.sign(a) == np.sign(b))
    return np.where(same_inf, 0.0, np.subtract(a, b))


@override(BASE, "log_normalizer_or_zero")
def log_normalizer_or_zero(d: Any) -> Any:
    """``base.log_normalizer_or_zero`` always masking (no ``if np.any`` fast path)."""
    if d.uniform_is_proper:
        return d.log_normalizer()
    return np.where(d.is_uniform(), 0.0, d.log_normalizer())


@override(BASE, "Distribution.scatter_prod")
def scatter_prod(self: Any, indices: Any, size: int) -> Any:
    """``Distribution.scatter_prod`` by ``.at[].add`` (a scatter-add) for ``np.add.at``."""
    indices = as_index(indices)
    out = []
    for e in self._product_form():
        acc = np.zeros((size,) + e.shape[indices.ndim:])
        out.append(acc.at[indices].add(e))
    return self.from_natural(*out)


VARIABLE = "factorflow.factors.variable"


@override(VARIABLE, "total")
def total(value: Any) -> Any:
    """``variable.total`` as a device scalar (no ``float``)."""
    return np.sum(value)


@override(VARIABLE, "_reduce_array")
def _reduce_array(w: Any, how: Any, use_shape: tuple[int, ...], var_shape: tuple[int, ...],
                  trailing: int) -> Any:
    """``variable._reduce_array`` with scatter-adds (``.at[].add``) for its in-place
    sums."""
    tail = w.shape[w.ndim - trailing:] if trailing else ()
    if how is None or how[0] == "same":
        return np.broadcast_to(w, tuple(var_shape) + tail)
    full = np.broadcast_to(w, tuple(use_shape) + tail)
    if how[0] == "broadcast":
        return np.sum(full, axis=tuple(how[2])) if how[2] else full
    acc = np.zeros(tuple(var_shape) + tail)
    if how[0] == "gather":
        return acc.at[as_index(how[1])].add(full)
    if how[0] == "slots":
        return acc.at[(Ellipsis, list(how[1])) + (slice(None),) * trailing].add(full)
    fixed, axes = how[1], how[2]
    summed = np.sum(full, axis=tuple(axes)) if axes else full
    return acc.at[slot(fixed, len(var_shape))].add(summed)


@override(KERNELS, "with_element")
def with_element(whole: Any, fixed: tuple[tuple[int, int], ...], part: Any) -> Any:
    """``kernels.with_element`` by ``.at[].set``."""
    where = slot(fixed, len(whole.batch_shape))
    return whole.from_natural(*(np.asarray(w, float).at[where].set(p)
                                for w, p in zip(whole.eta, part.eta, strict=True)))


@override(KERNELS, "place_element")
def place_element(msg: Any, fixed: tuple[tuple[int, int], ...], use_shape: tuple[int, ...],
                  axes: tuple[int, ...], var_shape: tuple[int, ...]) -> Any:
    """``kernels.place_element`` by ``.at[].add``."""
    reduced = prod_over(msg, use_shape, axes) if axes else (
        msg if msg.batch_shape == tuple(use_shape) else msg.broadcast_to(use_shape))
    out = []
    for e in reduced._product_form():
        acc = np.zeros(tuple(var_shape) + e.shape[e.ndim - msg.event_ndim:])
        out.append(acc.at[slot(fixed, len(var_shape))].add(e))
    return msg.from_natural(*out)


@override(KERNELS, "place_slots")
def place_slots(msg: Any, slots: tuple[int, ...], var_shape: tuple[int, ...]) -> Any:
    """``kernels.place_slots`` by ``.at[].add``."""
    out = []
    extra = tuple(range(len(msg.batch_shape) - len(var_shape)))
    for e in msg._product_form():
        e = np.sum(e, axis=extra) if extra else e
        acc = np.zeros(tuple(var_shape) + e.shape[len(msg.batch_shape) - len(extra):])
        out.append(acc.at[(Ellipsis, list(slots)) + (slice(None),) * msg.event_ndim].add(e))
    return msg.from_natural(*out)


@override(KERNELS, "initial")
def initial(init: dict[str, Any], label: str, family: type, shape: tuple[int, ...]) -> Any:
    """``kernels.initial`` without the properness check (the host checked the user's
    initialisations before the run; see ``jax_backend``)."""
    value = init[label]
    if not isinstance(value, family):
        from factorflow.errors import ModelError
        raise ModelError(f"init[{label!r}] must be a {family.__name__} distribution, got "
                         f"{type(value).__name__}.")
    try:
        return value.broadcast_to(shape) if value.batch_shape != tuple(shape) else value
    except ValueError:
        from factorflow.errors import ModelError
        raise ModelError(f"init[{label!r}] has batch shape {value.batch_shape}, but the "
                         f"variable has shape {tuple(shape)}.") from None


COMPARE = "factorflow.factors.compare"


@override(COMPARE, "truncated_normal_moments")
def truncated_normal_moments(t: Any) -> tuple[Any, Any]:
    """``compare.truncated_normal_moments`` with the continued fraction computed on every
    element and selected where t > 4 (for ``t[tail]`` and the in-place writes)."""
    t = np.asarray(t, float)
    lam = _SQRT_2_OVER_PI / special.erfcx(t / np.sqrt(2))
    excess = lam - t
    var = 1 - lam * excess
    tail = t > _TAIL
    tt = np.where(tail, t, 2 * _TAIL)  # a harmless point where the fraction is not used
    d = tt
    for k in range(_CF_TERMS, 1, -1):
        d = tt + (k + 1) / d
    d1 = tt + 2 / d
    return np.where(tail, 1 / d1, excess), np.where(tail, (2 / d - 1 / d1) / d1, var)


@override(COMPARE, "_truncated_mixture")
def _truncated_mixture(lw_true: Any, lw_false: Any, s: Any, v: Any, z: Any
                       ) -> tuple[Any, Any]:
    """The tilted moments of ``compare._x_message`` per element: one half where the other
    weighs nothing, else the mixture (the NumPy code picks one branch for the whole
    array when every element allows it; per element the formulas are the same)."""
    excess1, var1 = truncated_normal_moments(-z)
    excess0, var0 = truncated_normal_moments(z)
    log_true = lw_true + special.log_ndtr(z)
    log_false = lw_false + special.log_ndtr(-z)
    total = np.logaddexp(log_true, log_false)
    w1, w0 = np.exp(log_true - total), np.exp(log_false - total)
    mean1, mean0 = s * excess1, -s * excess0
    mix_mean = w1 * mean1 + w0 * mean0
    mix_var = v * (w1 * var1 + w0 * var0) + w1 * w0 * (mean1 - mean0) ** 2
    only_true, only_false = lw_false == -np.inf, lw_true == -np.inf
    t_mean = np.where(only_true, mean1, np.where(only_false, mean0, mix_mean))
    t_var = np.where(only_true, v * var1, np.where(only_false, v * var0, mix_var))
    return t_mean, t_var


@override(COMPARE, "_x_message")
def _x_message(out: Any, mean: Any, var: Any) -> Any:
    """``compare._x_message`` with its tilted moments per element
    (``_truncated_mixture``)."""
    lw_true, lw_false = bool_log_weights(out)
    uniform = np.isinf(var)
    v = np.where(uniform, 1.0, var)
    m = np.where(uniform, 0.0, mean)
    s = np.sqrt(v)
    t_mean, t_var = _truncated_mixture(lw_true, lw_false, s, v, m / s)
    prec = 1 / t_var - 1 / v
    mtp = t_mean / t_var - m / v
    return Gaussian.from_natural(np.where(uniform, 0.0, mtp), np.where(uniform, 0.0, prec))


GATE = "factorflow.factors.gate"


@override(GATE, "_enter_cases")
def _enter_cases(cases: Any, value: Any, clones: Any, indices: Any) -> Any:
    """``gate._enter_cases`` by ``.at[].set`` for its in-place write."""
    lw, v, m = _slots(cases, value, clones, indices)
    out = np.broadcast_to(np.expand_dims(log_mass(value), -1), lw.shape)
    return Bernoulli.from_natural(out.at[..., list(indices)].set(log_average(v, m)))


@override(GATE, "_enter_value")
def _enter_value(clones: Any, cases: Any, value: Any, indices: Any) -> Any:
    """``gate._enter_value`` always masking the silent elements (no ``if np.any``)."""
    lw, v, m = _slots(cases, value, clones, indices)
    lw = lw + _enter_cases(cases, value, clones, indices).log_odds
    log_w = lw[..., list(indices)]
    comps = v * m
    rest = [k for k in range(lw.shape[-1]) if k not in indices]
    if rest:
        log_w = np.concatenate([log_w, logsumexp(lw[..., rest], axis=-1, keepdims=True)],
                               axis=-1)
        comps = concat(comps, expand(value, v.batch_shape[:-1] + (1,)))
    message = project(comps, log_w) / value
    silent = np.all(m.is_uniform(), axis=-1)
    return type(message).from_natural(*(
        np.where(np.reshape(silent, silent.shape + (1,) * (np.ndim(e) - silent.ndim)), 0.0, e)
        for e in message.eta))
