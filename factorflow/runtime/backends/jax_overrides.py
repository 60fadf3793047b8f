"""The run-time checks of the generated program as the JAX backend runs them.

The kernels run under JAX as written (``jax_namespace``): their in-place writes and
value-dependent fast paths go through ``distributions.base`` (``add_at``, ``set_at``,
``all_true``, ``any_true``, ``traced``), which take the functional, general path under
tracing.  What cannot be written so is a check that raises ``ImproperMessageError``
in the middle of a sweep: inside ``jit`` it cannot raise, so each function here
(``check_proper``, ``check_proper_input``, ``skip_improper``, ``initial``; ``_proper``
their common part) replaces the one of the same name in the JAX copy of
``runtime.kernels`` and records its verdict in ``jax_loop.CHECKS`` instead (the host
raises after the loop).  ``check_proper`` records a witness read from what is
already reduced (a broadcast clone's distinct elements; a normalisation's row sums,
which ``base._normalize_traced`` keeps) and its exact verdict as a function the loop
calls, for all the checks of a sweep in one ``lax.cond``, only where a witness fails.
The tests run each override and its NumPy kernel on the same random inputs: the
verdicts agree (``tests/runtime/backends/test_jax_kernels.py``, ``test_jax_fused.py``),
so a change to one that the other lacks fails there.

The kernels' fast paths chosen by values are chosen by the kernels themselves on what
is known while tracing (``distributions.base``: ``is_arange``, ``log_normalize``;
``factors.vector_gaussian``'s sufficient statistics); ``tests/runtime/backends/
test_jax_fast_paths.py`` compares each with its NumPy kernel.  So do the kernels that
read what the fused normalisation of a mixture's responsibilities accumulated
(``base._normalize_traced_product``): ``discrete._column_sums``,
``gaussian._traced_data_sums``, ``vector_gaussian._sample_stats`` and the fused
Switch's operators (``factors.fused_switch``) take their traced paths in their own
modules; ``tests/runtime/backends/test_jax_blocks.py`` and ``test_jax_fused_switch.py``
compare the runs with NumPy's.  Nothing here but the checks (``test_jax_kernels``
pins the list).

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

from factorflow.runtime.backends.jax_loop import CHECKS
from factorflow.runtime.kernels import leading, where_mask

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


@override(KERNELS, "check_proper")
def check_proper(d: Any, what: str, iteration: Any = None, where: Any = None) -> None:
    """``kernels.check_proper`` as a record: every element where ``where`` holds proper,
    with no NaN parameter; in the first sweep (``iteration == 0``, a traced number
    here) an exactly uniform element passes.  As in NumPy, the common verdict is read
    first on what is already reduced (``_proper_witness``: a broadcast clone's distinct
    elements, a normalisation's row sums), the elementwise verdict with its exemptions
    only where that fails (``CHECKS.record``'s ``slow``: one ``lax.cond`` for all the
    checks of a sweep, ``jax_loop.Frame.verdicts``)."""
    small = d.compact(always=True)  # (a gate's clone: its K distinct elements)
    remade = _remade(small)

    def slow() -> Any:
        small_ = remade()
        ok = _proper(small_)
        if iteration is not None:
            ok = ok | ((np.asarray(iteration) == 0) & np.asarray(small_.is_uniform(), bool))
        if where is not None:
            ok, applies = np.broadcast_arrays(ok, leading(where, len(d.batch_shape)))
            ok = ok | ~applies
        return np.all(ok)
    CHECKS.record(what, _proper_witness(small), slow)


@override(KERNELS, "_proper_witness")
def _proper_witness(d: Any) -> Any:
    """A boolean of no axes, True only where every element of ``d`` is proper with no
    NaN parameter (False says nothing): for a Discrete, or a Bernoulli of normalised
    log-odds (a gate's cases), whether the normalisation's log row sums add up to a
    finite number (``base._normalize_traced``, shared with the normalisation the sweep
    makes anyway: no pass over the (N, K) array); else the elementwise verdict."""
    eta = d.eta[0]
    kind = type(d).__name__
    if getattr(eta, "ndim", 0) >= 1 and kind in ("Discrete", "Bernoulli"):
        from factorflow.distributions.base import _recall_traced, log_normalize  # (copies)
        if kind == "Discrete":
            log_normalize(eta)  # (remembered: the sweep's own normalisation)
        total = _recall_traced("row_log_sum", eta)  # (a fused normalisation's: a number)
        if total is not None:
            return np.isfinite(total)
        sums = _recall_traced("row_log_sums", eta)
        if sums is not None:
            return np.isfinite(np.sum(sums))
    return np.all(_proper(d))


@override(KERNELS, "_remade")
def _remade(d: Any) -> Any:
    """A function of no arguments giving ``d`` again: where its parameter is a
    ``rows_product`` or a fused normalisation's logs, made again from the statistics
    and coefficients (``base.remade``); where it is another normalisation's logs (a
    gate's cases), made again from the logits and row numbers
    the normalisation read and made (``base._normalize_traced``: the same operations,
    the same numbers), so that a ``lax.cond`` that reads it reads those, not an (N, K)
    array written out for it; else ``d`` itself."""
    from factorflow.distributions.base import _recall_traced, remade  # (the copy's)
    if len(d.eta) == 1:  # made again from the statistics (a fused normalisation's)
        again = remade(d.eta[0])
        if again is not None:
            return lambda: type(d).from_natural(again())
    made = _recall_traced("normalized_from", d.eta[0]) if len(d.eta) == 1 else None
    if made is None:
        return lambda: d
    x, top, log_total = made
    return lambda: type(d).from_natural((x - top) - log_total)


@override(KERNELS, "_proper")
def _proper(d: Any) -> Any:
    """Per batch element: proper, with no NaN parameter (the checks' common part)."""
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
        ok, applies = np.broadcast_arrays(ok, leading(mask, ok.ndim))
        ok = ok | ~applies
    CHECKS.record(what, np.all(ok))
    return value


@override(KERNELS, "skip_improper")
def skip_improper(old: Any, compute: Any, inputs: tuple, what: str, iteration: Any = None,
                  mask: Any = None) -> Any:
    """``kernels.skip_improper`` on the device: the new message where every input is
    proper, the old one where some input is strictly improper (the skipped EP update),
    selected elementwise; the verdict recorded is ``check_proper_input``'s where NumPy
    raises (a uniform or NaN input, or an improper one before the loops:
    ``iteration is None``).  In a sweep, the number of elements skipped is recorded
    (``CHECKS.skipped``) as NumPy counts it: over the broadcast shape of the inputs that
    are not proper everywhere; the host warns and gives the verdict from those counts
    (``jax_loop.report_skips``)."""
    parts = []  # per input: (strictly improper elements, proper everywhere)
    for value in inputs:
        if not hasattr(value, "eta"):
            continue
        proper = np.asarray(value.is_proper(), bool)
        number = np.ones_like(proper)
        for e in value.eta:  # a NaN parameter is no message either
            nan = np.isnan(e)
            number = number & ~(nan.any(axis=tuple(range(proper.ndim, nan.ndim)))
                                if nan.ndim > proper.ndim else nan)
        improper = ~proper & number & ~np.asarray(value.is_uniform(), bool)
        proper = proper & number
        if mask is not None:
            proper, applies = np.broadcast_arrays(proper, leading(mask, proper.ndim))
            proper, improper = proper | ~applies, improper & applies
        if iteration is None:  # before the loops nothing is skipped: improper is an error
            CHECKS.record(what, np.all(proper))
            continue
        CHECKS.record(what, np.all(proper | improper))
        parts.append((improper, np.all(proper)))
    new = compute()
    if not parts:
        return new
    skip = parts[0][0]
    for improper, _ in parts[1:]:
        skip = skip | improper
    # NumPy ORs only the inputs not proper everywhere: one proper everywhere adds no axes
    # to its count.  ``skip`` spans every input's axes, so each element NumPy counts is
    # counted ``whole / spanned`` times; ``spanned`` is chosen on the device among the
    # static subsets of inputs.
    import itertools
    import math
    shapes = [np.shape(improper) for improper, _ in parts]
    whole = math.prod(np.broadcast_shapes(*shapes))
    repeats = np.asarray(1, int)
    for chosen in itertools.product((False, True), repeat=len(parts)):
        spanned = [s for s, c in zip(shapes, chosen, strict=True) if c]
        if spanned and math.prod(np.broadcast_shapes(*spanned)) != whole:
            these = np.all(np.stack([p != c for (_, p), c in zip(parts, chosen, strict=True)]))
            repeats = np.where(these, whole // math.prod(np.broadcast_shapes(*spanned)),
                               repeats)
    CHECKS.skipped(what, np.sum(skip) // repeats)
    return where_mask(~skip, new, old)


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
