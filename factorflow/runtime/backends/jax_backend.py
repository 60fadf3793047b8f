"""The JAX backend: the compiled program traced once and run under ``jax.jit``.

``model.compile(algorithm, backend="jax")`` gives a ``JaxCompiledModel``: its source
is ``factorflow.codegen.jax``'s (the NumPy program's statements, each loop a
``sweep`` function), bound to the JAX copies of the kernels
(``factorflow.runtime.backends.jax_namespace``).  ``run`` traces the whole program —
initialisation, every loop as a ``lax.while_loop`` with its convergence test, the
evidence — into one ``jax.jit`` function, compiled once per plate sizes, number of
whether it sweeps, the length of its trace (``iterations`` rounded up to a power of two)
and damping, and called again with new data, another number of sweeps or another
tolerance without retracing.

Precision: the program is traced and run inside ``jax.enable_x64(True)``, a context
that leaves the user's global JAX configuration as it was, so every array is float64
as in the NumPy backend.  Data that float64 cannot hold exactly (``np.longdouble``,
complex) is refused with ``ff.BackendError``.

Devices: ``jax.jit`` places the program on JAX's default device, a GPU when one is
installed and visible to JAX; the posteriors come back as NumPy arrays.

What runs on the host, after the loop: the checks that raise ``ImproperMessageError``
(each check's verdict is computed on the device; see ``jax_loop``), EP's
``ImproperMessageWarning`` for updates ``skip_improper`` skipped (counted on the device)
and the "not an EP fixed point" verdict, the convergence warnings and the result (from
the device monitor's numbers, through the NumPy backend's ``_Monitor.finish``).  Not
supported (``ff.BackendError``): ``on_iteration`` callbacks, checkpoints and
``save_module`` (they need the host between sweeps).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import factorflow.distributions as dist
from factorflow.codegen.jax import generate_jax
from factorflow.codegen.python import Generated
from factorflow.errors import BackendError
from factorflow.ir import Program
from factorflow.runtime.backends.jax_bound import value as bound_value
from factorflow.runtime.backends.jax_loop import (
    CHECKS,
    Sweeps,
    raise_failures,
    report_skips,
    to_monitor,
)
from factorflow.runtime.backends.jax_namespace import Namespace, load_program, namespace
from factorflow.runtime.compiled import CompiledModel, compile_model
from factorflow.runtime.kernels import SKIPPED

_REGISTERED: set[type] = set()


#: built-in factors whose EP operators choose an array's length by the values (the
#: trapezoid's node count of softmax's tilted moments, K >= 3): refused under JAX
NOT_TRACEABLE_EP = {
    name: "sizes its quadrature grid by the messages' values (softmax's tilted moments)"
    for name in ("DiscreteFromSoftmax", "DiscreteFromSoftmaxPlate")}


def _register(ns: Namespace) -> None:
    """Make every copied distribution class a JAX pytree: its slots (``eta``, a
    Binomial's ``trials``) are the leaves, the class the static part."""
    base = ns["factorflow.distributions.base"].Distribution
    todo = [base]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls in _REGISTERED or getattr(cls, "__abstractmethods__", None):
            continue
        slots = tuple(name for c in cls.__mro__ for name in getattr(c, "__slots__", ()))

        def flatten(d: Any, slots: tuple[str, ...] = slots) -> tuple[tuple, None]:
            return tuple(getattr(d, s) for s in slots), None

        def unflatten(_: None, children: tuple, cls: type = cls,
                      slots: tuple[str, ...] = slots) -> Any:
            obj = cls.__new__(cls)
            for s, v in zip(slots, children, strict=True):
                object.__setattr__(obj, s, v)
            return obj
        jax.tree_util.register_pytree_node(cls, flatten, unflatten)
        _REGISTERED.add(cls)


def _to_copy(ns: Namespace, value: Any) -> Any:
    """A NumPy distribution as the JAX copy of its class (same slots, device arrays)."""
    cls = getattr(ns["factorflow.distributions"], type(value).__name__)
    obj = cls.__new__(cls)
    for name, v in value.__getstate__().items():
        object.__setattr__(obj, name, jax.tree_util.tree_map(jnp.asarray, v))
    return obj


def _to_numpy(value: Any) -> Any:
    """A JAX-copy distribution as factorflow's own class, with NumPy arrays."""
    cls = getattr(dist, type(value).__name__)
    obj = cls.__new__(cls)
    for name, v in value.__getstate__().items():
        dtype = float if name == "eta" else None
        object.__setattr__(obj, name, jax.tree_util.tree_map(
            lambda a, dtype=dtype: np.asarray(a, dtype=dtype), v))
    return obj


def _device_value(name: str, value: Any) -> Any:
    """Data as a device array, float64 for floats (under ``jax.enable_x64`` whatever the
    global setting); BackendError for a dtype that float64 would round (extended
    precision, complex), or where the device gives no float64."""
    arr = np.asarray(value)
    if arr.dtype.kind == "c" or (arr.dtype.kind == "f" and arr.dtype.itemsize > 8):
        raise BackendError(f"{name}: data of dtype {arr.dtype} would lose precision in the "
                           "JAX backend, which computes in float64; convert it with "
                           ".astype(float) first, or use backend='numpy'.")
    if arr.dtype.kind == "f":
        arr = arr.astype(np.float64)
    with jax.enable_x64(True):
        out = jnp.asarray(arr)
    if arr.dtype.kind == "f" and out.dtype != np.float64:
        raise BackendError(f"{name}: JAX stores this data as {out.dtype} on "
                           f"{jax.default_backend()}, which would lose precision; use "
                           "backend='numpy'.")
    return out


@dataclass(repr=False)
class JaxCompiledModel(CompiledModel):
    """A model compiled for one algorithm, run by JAX (see the module docstring)."""

    backend = "jax"
    _traced: dict[Any, Any] = field(default_factory=dict, init=False, compare=False)

    @classmethod
    def _generate_source(cls, program: Program) -> Generated:
        ns = namespace()
        return generate_jax(program, frozenset(ns["factorflow.runtime.kernels"].NAMESPACE))

    def __post_init__(self) -> None:
        ns = namespace()
        _register(ns)

        def refuse(factor: str) -> str | None:
            if self.algorithm == "ep" and factor in NOT_TRACEABLE_EP:
                return (f"the factor {factor!r} under EP {NOT_TRACEABLE_EP[factor]}: its "
                        "JAX program cannot be traced; use backend='numpy' (or VMP).")
            return None

        self._program = load_program(ns, self, "JAX", refuse)
        self._infer = self._run_device

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _recompile_jax, (self.model, self.algorithm,
                                tuple(sorted(self.user_initialized)), self.enter_whole_arrays)

    def __repr__(self) -> str:
        return super().__repr__().replace("CompiledModel(", "JaxCompiledModel(", 1)

    def save_module(self, path: Any, data: Any = None, init: Any = None) -> Any:
        raise BackendError("save_module writes the NumPy program; compile with "
                           "backend='numpy' to save a standalone module.")

    def run(self, iterations: int | None = None, data: dict[str, Any] | None = None,
            init: dict[str, Any] | None = None, on_iteration: Any = None,
            **options: Any) -> Any:
        """As ``CompiledModel.run``, with the whole run under ``jax.jit`` (float64,
        through ``jax.enable_x64`` for this call only).  ``on_iteration`` and
        checkpoints raise ``ff.BackendError``: the sweeps run on the device without
        returning to Python between them."""
        if on_iteration is not None:
            raise BackendError("on_iteration= needs Python between sweeps; the JAX backend "
                               "runs every sweep on the device: use backend='numpy'.")
        for name in ("checkpoint", "every", "resume"):
            if options.get(name) is not None:
                raise BackendError(f"{name}= (checkpoints) needs Python between sweeps; "
                                   "the JAX backend runs every sweep on the device: use "
                                   "backend='numpy'.")
        with jax.enable_x64(True):
            return super().run(iterations, data, init, None, **options)

    def _run_device(self, values: dict[str, Any], sizes: dict[str, int],
                    init: dict[str, Any], iterations: int, monitor: Any, damping: Any,
                    saved: Any) -> tuple[dict[str, Any], float]:
        """The generated NumPy program's ``infer``, run on the device: traced once per
        (sizes, whether it sweeps at all, the trace's capacity, whether it has a
        tolerance, damping, initialised names), then reused with the run's number of
        sweeps and tolerance as arguments."""
        assert saved is None
        ns = namespace()
        for label, value in init.items():
            value.check_proper(f"init[{label!r}]")
        data = {k: _device_value(k, v) for k, v in values.items() if v is not None}
        start = {k: _to_copy(ns, v) for k, v in init.items()}
        # the number of sweeps and the tolerance are arguments of the traced run: a run
        # with other ones reuses it, within the trace's capacity (``_capacity``)
        capacity = _capacity(iterations)
        key = (tuple(sorted(sizes.items())), iterations > 0, capacity,
               monitor.tolerance is None, monitor.tracing, monitor.stall,
               tuple(sorted((str(k), v) for k, v in (damping or {}).items())),
               tuple(sorted(start)), tuple(sorted(data)))
        if key not in self._traced:
            self._traced[key] = self._trace(sizes, min(iterations, 1), monitor, damping,
                                            capacity)
        fn, info = self._traced[key]
        limit = jnp.asarray(iterations)
        tolerance = jnp.asarray(0.0 if monitor.tolerance is None else monitor.tolerance)
        posteriors, log_evidence, outputs, passed = jax.device_get(
            fn(data, start, limit, tolerance))
        skipped = SKIPPED.get()  # EP's skipped updates: warned, and the verdict's table
        (skipped if skipped is not None else {}).update(
            report_skips(info["skips"], outputs["skips"]))
        raise_failures(info["loops"], outputs["failures"], info["before"], passed)
        if outputs["monitor"] is not None:
            to_monitor(monitor, info["names"], outputs["monitor"])
        return {k: _to_numpy(v) for k, v in posteriors.items()}, float(log_evidence)

    def _trace(self, sizes: dict[str, int], iterations: int, monitor: Any,
               damping: Any, capacity: int | None = None) -> tuple[Any, dict[str, Any]]:
        """The jitted run ``whole(data, init[, limit, tolerance])`` and what its trace
        learns (``info``).  Without ``limit`` the run makes at most ``iterations`` sweeps
        and tests ``monitor.tolerance``; with ``limit`` and ``tolerance`` (device scalars)
        it makes at most ``limit`` sweeps, ``capacity`` (default ``iterations``) or
        fewer, and tests ``tolerance`` where ``monitor.tolerance`` is not None:
        ``iterations`` then only tells whether it sweeps at all (the program's
        ``iterations == 0``, decided when traced)."""
        info: dict[str, Any] = {}
        program = self._program

        def whole(data: dict[str, Any], init: dict[str, Any], limit: Any = None,
                  tolerance: Any = None) -> tuple:
            with _program_trace():
                return traced_whole(data, init, limit, tolerance)

        def traced_whole(data: dict[str, Any], init: dict[str, Any], limit: Any,
                         tolerance: Any) -> tuple:
            tol = monitor.tolerance if monitor.tolerance is None or tolerance is None \
                else tolerance
            sweeps = Sweeps(self.algorithm, tol, capacity or max(iterations, 1),
                            monitor.tracing, monitor.stall, limit)
            with CHECKS.frame() as before:
                posteriors, log_evidence = program(data, sizes, init, iterations, sweeps,
                                                   damping)
            info["before"] = [what for what, _ in before]
            info["loops"] = [names for names, _ in sweeps.failures]
            info["skips"] = [names for names, _ in sweeps.skips]
            info["names"] = list(sweeps.names)
            info["carried"] = list(sweeps.carried)  # per loop: what its carry holds
            passed = before.verdicts()
            return posteriors, bound_value(log_evidence), sweeps.outputs(), passed

        return jax.jit(whole), info


@contextlib.contextmanager
def _program_trace() -> Iterator[None]:
    """While the program is traced: its trace is ``base.PROGRAM_TRACE`` (what the
    kernels' memo made in it is valid in the loops' bodies, see ``base.memo_of``)."""
    base = namespace()["factorflow.distributions.base"]
    before = base.PROGRAM_TRACE
    base.PROGRAM_TRACE = base.trace_state()
    try:
        yield
    finally:
        base.PROGRAM_TRACE = before


def _capacity(iterations: int) -> int:
    """The length of a traced run's trace (the bound after each sweep): ``iterations``
    rounded up to a power of two, at least 16, so that runs of a few more or fewer
    sweeps share one traced program."""
    return max(16, 1 << max(iterations - 1, 0).bit_length())


def _recompile_jax(model: Any, algorithm: str, init: tuple[str, ...],
                   enter_whole_arrays: bool = False) -> CompiledModel:
    """The compiled model ``pickle`` loads: compiled again for JAX."""
    return compile_model(model, algorithm, init, enter_whole_arrays=enter_whole_arrays,
                         backend="jax")


__all__ = ["JaxCompiledModel"]
