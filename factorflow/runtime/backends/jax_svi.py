"""Stochastic variational inference on the JAX backend: the steps under ``jax.jit``.

``run_svi(..., backend="jax")`` (``factorflow.runtime.svi``) hands its steps here.  The
model's VMP program is compiled once for JAX (``model.compile("vmp", backend="jax")``)
and traced twice through the compiled model's own trace (``JaxCompiledModel._trace``,
one sweep, no tolerance, no bound per sweep): once with the data plate of size B (the
minibatch) and once with it empty (λ₀, the messages from outside the plate).  A chunk
of steps is one ``jax.jit`` function, a ``lax.scan`` over the steps: each step gathers
its minibatch from the data on the device (``jnp.take`` along the plate axis), runs both
sweeps from the current global posteriors λ and takes the natural-gradient step
λ ← (1 − ρ) λ + ρ (λ₀ + (N/B)(λ_B − λ₀)) there, so that the loop never returns to
Python within a chunk; the globals stay on the device from chunk to chunk.

Minibatches: the indices are NumPy's, drawn on the host by ``svi.minibatches`` from
the same generator as the NumPy backend's steps (so the same ``rng`` gives the same
minibatches, hence the same steps to rounding), one chunk at a time, and passed as a
(steps, B) index array.  A chunk holds at most ``INDEX_LIMIT`` indices (so the index
array stays small beside the data: the steps are split evenly into as few chunks as
that allows), and every chunk has the same length, the last one padded with steps that
are skipped (``lax.cond``): the function is compiled once per (B, chunk length, plate
size) and reused by every chunk and by later runs of the same model.

Checks: the program's properness checks cannot raise inside ``jit``; each sweep returns
its verdicts (``jax_loop``), the scan keeps the first step at which each check failed,
and the host raises the JAX backend's ``ImproperMessageError`` (``raise_failures``: the
check's name) with the SVI step appended.  Data that float64 cannot hold raises the JAX
backend's ``BackendError`` (``jax_backend._device_value``).  Everything runs in float64
(``jax.enable_x64`` for the call only).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from factorflow.errors import ImproperMessageError
from factorflow.runtime.backends.jax_backend import _device_value, _to_copy, _to_numpy
from factorflow.runtime.backends.jax_loop import raise_failures
from factorflow.runtime.backends.jax_namespace import namespace

#: the most minibatch indices one chunk of steps takes (its (steps, B) index array)
INDEX_LIMIT = 1 << 20


def chunk_length(steps: int, minibatch: int) -> int:
    """The steps one jitted chunk runs: all of them where their indices fit in
    ``INDEX_LIMIT``, else the steps split evenly into as few chunks as keep within it
    (at least one step a chunk; fewer padded steps than chunks)."""
    most = max(1, INDEX_LIMIT // minibatch)
    chunks = -(-steps // most)
    return max(1, -(-steps // max(chunks, 1)))


def _plate_axes(compiled: Any, plate: str, data: dict[str, Any]) -> dict[str, int]:
    """The data arrays over ``plate`` (observed or constant) and the axis it is."""
    return {d.name: d.plates.index(plate) for d in compiled.compilation.final.decls
            if d.role in ("observed", "constant") and plate in d.plates and d.name in data}


class JaxSteps:
    """The SVI steps of one compiled JAX program on one data set (see the module
    docstring): ``run(state, draw, rates, minibatch)`` from NumPy posteriors to NumPy
    ones; ``compiled``: the model's VMP program compiled for JAX with the globals
    ``outside`` initialised, ``values`` its data (NumPy arrays, checked), ``sizes`` its
    plates' sizes, ``plate`` the data plate."""

    def __init__(self, compiled: Any, values: dict[str, Any], sizes: dict[str, int],
                 plate: str, outside: list[str]) -> None:
        self.compiled, self.sizes, self.plate, self.outside = compiled, sizes, plate, outside
        self.n = sizes[plate]
        with jax.enable_x64(True):
            self.data = {k: _device_value(k, v) for k, v in values.items() if v is not None}
            self.axes = _plate_axes(compiled, plate, self.data)
            self.empty = dict(self.data)
            for name, axis in self.axes.items():  # the data with the plate empty
                shape = list(self.data[name].shape)
                shape[axis] = 0
                self.empty[name] = jnp.zeros(shape, self.data[name].dtype)

    def _sweep(self, size: int) -> tuple[Any, dict[str, Any]]:
        """One sweep of the program with the plate of ``size``: the compiled model's
        traced function and what its trace learns (the checks' names)."""
        monitor = SimpleNamespace(tolerance=None, tracing=False, stall=False)
        return self.compiled._trace(self.sizes | {self.plate: size}, 1, monitor, None)

    def _chunk(self, length: int, batch: int) -> tuple[Any, tuple, tuple]:
        """The jitted scan of ``length`` steps on minibatches of ``batch``, cached on the
        compiled model per (length, batch, plate size); with each sweep's traced
        function and what its trace learns."""
        cache = vars(self.compiled).setdefault("_svi_chunks", {})
        key = (length, batch, tuple(sorted(self.sizes.items())))
        if key in cache:
            return cache[key]
        base_fn, base_info = self._sweep(0)
        batch_fn, batch_info = self._sweep(batch)
        scale = self.n / batch
        axes, outside = self.axes, self.outside

        def chunk(data: dict[str, Any], empty: dict[str, Any], state: dict[str, Any],
                  bad: tuple, rates: Any, index: Any, live: Any, t: Any) -> tuple:
            """``len(rates)`` steps from ``state``; the failure record after them."""
            def advance(carry: tuple, rho: Any, index: Any, t: Any) -> tuple:
                """One natural-gradient step from ``carry`` (λ, the failure record)."""
                state, bad = carry
                taken = dict(data)
                for name, axis in axes.items():  # the minibatch, gathered on the device
                    taken[name] = jnp.take(data[name], index, axis=axis)
                base, _, base_out, base_passed = base_fn(empty, state)
                got, _, batch_out, batch_passed = batch_fn(taken, state)
                new = {}
                for name in outside:  # λ ← (1 − ρ) λ + ρ (λ₀ + (N/B)(λ_B − λ₀))
                    new[name] = type(state[name]).from_natural(*(
                        (1 - rho) * old + rho * (e0 + scale * (eb - e0))
                        for old, e0, eb in zip(state[name].eta, base[name].eta,
                                               got[name].eta, strict=True)))
                verdicts = (~base_passed, base_out["failures"], ~batch_passed,
                            batch_out["failures"])
                bad = jax.tree_util.tree_map(
                    lambda first, now: jnp.where((first < 0) & _failed(now), t, first),
                    bad, verdicts)
                return new, bad

            def step(carry: tuple, xs: tuple) -> tuple[tuple, None]:
                """A step, or none where ``live`` is False (the padding of the last
                chunk: λ kept, nothing computed)."""
                rho, index, live, t = xs
                return jax.lax.cond(live, advance, lambda c, *_: c, carry, rho, index,
                                    t), None

            return jax.lax.scan(step, (state, bad), (rates, index, live, t))[0]

        entry = (jax.jit(chunk), (base_fn, base_info), (batch_fn, batch_info))
        cache[key] = entry
        return entry

    def _start(self, state: dict[str, Any], minibatch: int, base_fn: Any,
               batch_fn: Any) -> tuple[dict[str, Any], tuple]:
        """``state`` laid out as the steps keep it (``_laid_out``) and the failure record
        before any step (``_no_failures``), both read from the sweeps' traces (their
        output shapes), cached on the compiled model per minibatch and start's shapes."""
        cache = vars(self.compiled).setdefault("_svi_starts", {})
        key = (minibatch, tuple(sorted(self.sizes.items())),
               tuple((k, tuple(np.shape(e) for e in v.eta)) for k, v in sorted(state.items())))
        if key not in cache:
            taken = {k: jax.ShapeDtypeStruct(
                tuple(minibatch if a == self.axes[k] else d for a, d in enumerate(v.shape))
                if k in self.axes else v.shape, v.dtype) for k, v in self.data.items()}
            laid = _laid_out(state, ((base_fn, self.empty), (batch_fn, taken)))
            cache[key] = ({k: tuple(np.shape(e) for e in v.eta) for k, v in laid.items()},
                          _no_failures(base_fn, self.empty, laid)
                          + _no_failures(batch_fn, taken, laid))
        shapes, bad = cache[key]
        return {k: type(v).from_natural(*(jnp.broadcast_to(e, shape) for e, shape in zip(
            v.eta, shapes[k], strict=True))) for k, v in state.items()}, bad

    def run(self, state: dict[str, Any], batches: Any, rates: np.ndarray,
            minibatch: int) -> dict[str, Any]:
        """The globals after the steps of ``rates`` from ``state`` (NumPy posteriors),
        step t on the t-th row of minibatch indices that ``batches(count)`` gives (the
        next ``count`` steps' (count, B) sorted indices, called once per chunk);
        ImproperMessageError naming the check and the step where a sweep's check
        failed."""
        steps = len(rates)
        if steps == 0:
            return dict(state)
        ns = namespace()
        length = chunk_length(steps, minibatch)
        with jax.enable_x64(True):
            fn, (base_fn, base_info), (batch_fn, batch_info) = self._chunk(length, minibatch)
            current = {k: _to_copy(ns, v) for k, v in state.items()}
            current, bad = self._start(current, minibatch, base_fn, batch_fn)
            for begin in range(0, steps, length):
                count = min(length, steps - begin)
                index = np.asarray(batches(count), np.int64)
                live = np.arange(length) < count
                rho = np.ones(length)
                rho[:count] = rates[begin:begin + count]
                if count < length:  # padded steps: not run (``live`` False)
                    index = np.concatenate([index, np.zeros((length - count, minibatch),
                                                            np.int64)])
                t = np.arange(begin, begin + length)
                current, bad = fn(self.data, self.empty, current, bad, rho, index, live, t)
            current, bad = jax.device_get((current, bad))
        _raise(bad, base_info, batch_info)
        return {k: _to_numpy(v) for k, v in current.items()}


def _failed(verdict: Any) -> Any:
    """Whether a check's verdict is a failure: a ``True`` (a check before the loop that
    did not pass) or a sweep number (a check in the loop, ≥ 0 where it failed)."""
    return verdict if verdict.dtype == bool else verdict >= 0


def _laid_out(state: dict[str, Any], sweeps: tuple) -> dict[str, Any]:
    """``state`` with each natural parameter broadcast to the shape a step gives it (a
    start that is one number for a whole plate, as NumPy's steps broadcast it), so that
    the scan's carry keeps one shape; ``sweeps``: (traced sweep, its data) pairs."""
    for _ in range(3):  # (each round can only add axes)
        outs = [jax.eval_shape(fn, data, state)[0] for fn, data in sweeps]
        shapes = {name: [jnp.broadcast_shapes(jnp.shape(e), *(o[name].eta[i].shape
                                                              for o in outs))
                         for i, e in enumerate(value.eta)] for name, value in state.items()}
        if all(jnp.shape(e) == shape for name, value in state.items()
               for e, shape in zip(value.eta, shapes[name], strict=True)):
            return state
        state = {name: type(value).from_natural(*(
            jnp.broadcast_to(e, shape) for e, shape in zip(value.eta, shapes[name],
                                                           strict=True)))
                 for name, value in state.items()}
    return state


def _no_failures(fn: Any, data: Any, state: Any) -> tuple:
    """A sweep's failure record before any step: −1 per check before its loop and per
    check in each loop (their numbers from the traced sweep's output shapes)."""
    _, _, outputs, passed = jax.eval_shape(fn, data, state)
    return (-np.ones(passed.shape, np.int64),
            tuple(-np.ones(f.shape, np.int64) for f in outputs["failures"]))


def _raise(bad: Any, base_info: dict[str, Any], batch_info: dict[str, Any]) -> None:
    """ImproperMessageError for the first step at which a check failed (the JAX
    backend's message, naming the check, with the SVI step)."""
    before0, loops0, before_b, loops_b = bad
    first = [int(np.min(b[b >= 0])) for b in jax.tree_util.tree_leaves(bad) if np.any(b >= 0)]
    if not first:
        return
    step = min(first)
    at = lambda a: np.asarray(a) == step  # noqa: E731 (the checks that failed at step)
    for info, before, loops in ((base_info, before0, loops0), (batch_info, before_b, loops_b)):
        try:
            raise_failures(info["loops"], tuple(np.where(at(b), 0, -1) for b in loops),
                           info["before"], ~at(before))
        except ImproperMessageError as e:
            which = "with the plate empty" if info is base_info else "on the minibatch"
            raise ImproperMessageError(f"{e} (SVI step {step + 1}: the sweep {which})"
                                       ) from None


__all__ = ["JaxSteps", "chunk_length", "INDEX_LIMIT"]
