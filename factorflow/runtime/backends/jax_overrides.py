"""The run-time checks of the generated program, and the kernels' fast paths chosen by
values, as the JAX backend runs them.

The kernels run under JAX as written (``jax_namespace``): their in-place writes and
value-dependent fast paths go through ``distributions.base`` (``add_at``, ``set_at``,
``all_true``, ``any_true``, ``traced``), which take the functional, general path under
tracing.  What cannot be written so is a check that raises ``ImproperMessageError``
in the middle of a sweep: inside ``jit`` it cannot raise, so each function here
(``check_proper``, ``check_proper_input``, ``skip_improper``, ``initial``; ``_proper``
their common part) replaces the one of the same name in the JAX copy of
``runtime.kernels`` and records its verdict in ``jax_loop.CHECKS`` instead (the host
raises after the loop).  The
tests run each override and its NumPy kernel on the same random inputs: the verdicts
agree (``tests/runtime/backends/test_jax.py``), so a change to one that the other
lacks fails there.

The fast paths (the section at the end) are the D-dimensional mixture's sufficient
statistics, which NumPy chooses by values: each makes the same choice on what is known
while tracing and otherwise calls the copy's own function (``REPLACED``);
``tests/runtime/backends/test_jax_fast_paths.py`` compares each with its NumPy kernel.
The other fast paths NumPy chooses by values are chosen by the kernels themselves on
what is known while tracing (``distributions.base``: ``is_arange``, ``log_normalize``).

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
import numpy as host_numpy

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
    replaced = module.__dict__.setdefault("REPLACED", {})  # the copy's own, by name
    for attr, fn in OVERRIDES.get(name, {}).items():
        fn = types.FunctionType(fn.__code__, module.__dict__, fn.__name__, fn.__defaults__,
                                fn.__closure__)
        if "." not in attr and hasattr(module, attr):
            replaced[attr] = getattr(module, attr)
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
    here) an exactly uniform element passes."""
    ok = _proper(d)
    if where is not None:
        ok = ok | ~np.broadcast_to(leading(where, len(d.batch_shape)), ok.shape)
    if iteration is not None:
        ok = ok | ((np.asarray(iteration) == 0) & np.asarray(d.is_uniform(), bool))
    CHECKS.record(what, np.all(ok))


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


# ----- fast paths the kernels choose by values, taken under tracing too -----------------
# The kernels below take a fast path where NumPy can test the values (data that is a
# NumPy array) and the general path under tracing, where it cannot.  Here the same test
# is made on what is known while tracing (known data: a JAX array of the same layout),
# and the fast path runs as written, without the NumPy-only memo and in-place writes;
# otherwise the copy's own function (``REPLACED``).  (A Switch's ``arange(K)`` index and
# a normalised array are known to the kernels themselves: ``base.is_arange``,
# ``base.log_normalize``.)  The results are the fast paths' NumPy ones to
# rounding (the tests compare whole runs with NumPy to 1e-10).
VECTOR = "factorflow.factors.vector_gaussian"


@override(VECTOR, "_switch_data")
def _switch_data(sample: Any) -> Any:
    """``vector_gaussian._switch_data`` for traced data: the (N, 1, D) column of N > 1
    known points as (N, D)."""
    import jax
    if (isinstance(sample, jax.Array) and sample.ndim == 3 and sample.shape[1] == 1
            and sample.shape[0] >= 2):
        return np.asarray(sample[:, 0, :], float)
    return REPLACED["_switch_data"](sample)  # noqa: F821


@override(VECTOR, "_data_stats")
def _data_stats(x: Any, host: Any = host_numpy) -> Any:
    """``vector_gaussian._data_stats`` as one expression: [1, x, x_i x_j (i ≤ j)] per
    point, (N, 1 + D + D(D+1)/2) (the compiler makes it once per run: it reads the data
    alone).  ``host``: NumPy itself (a default: the copy's ``numpy`` is ``jax.numpy``),
    whose index arrays are constants of the trace."""
    n, dim = x.shape
    i, j = host.triu_indices(dim)
    return np.concatenate([np.ones((n, 1)), x, x[:, i] * x[:, j]], axis=1)


@override(VECTOR, "_switch_sums")
def _switch_sums(sample: Any, weights: Any, reduce: Any, host: Any = host_numpy) -> Any:
    """``vector_gaussian._switch_sums`` for traced data: (Σ_n q_nk, Σ_n q_nk x_n,
    Σ_n q_nk x_n x_nᵀ) by one (1+D+T, N) × (N, K) product (not remembered: the
    compiler shares it between the mean's and the precision's messages)."""
    x = None if reduce is None else _switch_data(sample)
    if (x is None or not isinstance(weights, np.ndarray) or len(reduce[0]) != 2
            or tuple(reduce[1]) != (0,) or weights.shape != tuple(reduce[0])
            or weights.shape[0] != len(x)):
        return None
    dim, k = x.shape[1], weights.shape[1]
    sums = _data_stats(x).T @ weights                                  # (1+D+T, K)
    i, j = host.triu_indices(dim)
    s2 = np.zeros((k, dim, dim)).at[:, i, j].set(sums[1 + dim:].T)
    s2 = s2.at[:, j, i].set(sums[1 + dim:].T)
    return sums[0], sums[1:1 + dim].T, s2
