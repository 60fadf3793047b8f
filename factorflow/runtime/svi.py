"""Stochastic variational inference over a plate (Hoffman, Blei, Wang & Paisley 2013).

``model.infer("svi", minibatch=B, steps=T, learning_rate=(tau, kappa), rng=seed)``
runs the model's VMP program on minibatches of its *data plate* (the largest plate that
leads an observed variable's axes, of size N).  The *global* variables are those
outside that plate; the local ones (inside it) are re-derived at every step.  Step t:

1. draw B distinct indices of the plate (uniformly, without replacement);
2. run one VMP sweep of the compiled program (the same statements, with the plate's
   size set to B and the data taken at those indices: no recompilation) from the
   current global posteriors λ; each global's result is λ_B = λ₀ + Σ_{i in batch} m_i,
   its messages from outside the plate λ₀ (the same sweep with the plate empty) plus the
   batch's messages m_i;
3. the intermediate λ̂ = λ₀ + (N / B)(λ_B − λ₀) (the batch's messages rescaled to the
   whole plate), and the natural-gradient step λ ← (1 − ρ_t) λ + ρ_t λ̂ with
   ρ_t = (t + τ)^(−κ), t = 0, 1, … (κ in (0.5, 1] for the Robbins–Monro conditions;
   τ = 1, κ = 0 gives ρ = 1).

Guarantees (tested in ``tests/runtime/test_svi.py``): with B = N and ρ = 1 each step is
the VMP program's sweep from λ, so T steps give the posteriors of T such sweeps (1e-10
against a hand-written coordinate ascent); with minibatches on a conjugate model the
iterate converges to the VMP posterior (within a tolerance computed from the sampling
variance of λ̂ and the step weights).  The posteriors returned are the globals'; the
locals are those of the last minibatch's sweep, and are left out.

On ``backend="dask"`` the data over the plate lies on a Dask cluster, chunked along it,
and each step brings only its minibatch here (``run_svi``); the steps are the NumPy
backend's, on the same minibatches for the same ``rng`` (tested to 1e-10).

On ``backend="jax"`` the data lies on the device and the steps run under ``jax.jit``
(``factorflow.runtime.backends.jax_svi``: the program's two sweeps compiled once for
JAX, the minibatch gathered and the natural-gradient step taken on the device, the
steps a ``lax.scan``); the minibatch indices are drawn here by ``minibatches``, as for
NumPy, so the same ``rng`` gives NumPy's steps (tested to 1e-10).
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np

from factorflow.errors import ModelError, ScheduleWarning


def data_plate(compiled: Any) -> str | None:
    """The identifier of the compiled program's data plate: the largest plate that leads
    an observed variable's axes (None where no observed variable has a plate)."""
    sizes = dict(compiled.compilation.final.ranges)
    leading = {d.plates[0] for d in compiled.compilation.final.decls
               if d.role == "observed" and d.plates}
    return max(sorted(leading), key=lambda p: sizes[p], default=None)


def learning_rates(steps: int, learning_rate: Any) -> np.ndarray:
    """ρ_t = (t + τ)^(−κ) for t < ``steps`` from ``learning_rate = (τ, κ)``; ModelError
    unless τ ≥ 1 and 0 ≤ κ ≤ 1 (so every ρ_t is in (0, 1])."""
    try:
        tau, kappa = (float(v) for v in learning_rate)
    except (TypeError, ValueError):
        raise ModelError(f"learning_rate must be a pair (tau, kappa), got "
                         f"{learning_rate!r}.") from None
    if not (tau >= 1.0 and 0.0 <= kappa <= 1.0):
        raise ModelError(f"learning_rate (tau, kappa) = ({tau}, {kappa}): SVI needs tau >= 1 "
                         "and 0 <= kappa <= 1 (kappa in (0.5, 1] to converge), so that "
                         "every step size (t + tau)^-kappa is in (0, 1].")
    return (np.arange(steps) + tau) ** -kappa


def minibatches(generator: np.random.Generator, n: int, size: int) -> Any:
    """The minibatches of SVI's steps: a function giving the next ``count`` steps'
    indices as a (count, size) array, each row ``size`` distinct indices of ``range(n)``
    drawn uniformly (``generator.choice`` without replacement), sorted.  Every backend
    draws through it, so the same ``rng`` gives the same minibatches on each."""
    def draw(count: int) -> np.ndarray:
        out = np.empty((count, size), np.intp)
        for row in out:
            row[:] = np.sort(generator.choice(n, size=size, replace=False))
        return out
    return draw


def _take(values: dict[str, Any], compiled: Any, plate: str, index: np.ndarray,
          gather: Any = None) -> dict[str, Any]:
    """The program's data at ``index`` along ``plate`` (every array over it).  An array
    that is not NumPy's (a Dask array) is indexed where it lies and the minibatch
    brought here by ``gather`` (all of them in one call: arrays in, NumPy arrays out)."""
    out, far = dict(values), {}
    for d in compiled.compilation.final.decls:
        if d.role in ("observed", "constant") and plate in d.plates and \
                values.get(d.name) is not None:
            value, axis = values[d.name], d.plates.index(plate)
            if index.size == 0 and not isinstance(value, np.ndarray):  # (no round trip)
                shape = list(np.shape(value))
                shape[axis] = 0
                out[d.name] = np.zeros(shape, value.dtype)
            elif gather is not None and not isinstance(value, np.ndarray):
                far[d.name] = np.take(value, index, axis=axis)  # (NEP 18: Dask's take)
            else:
                out[d.name] = np.take(np.asarray(value), index, axis=axis)
    if far:
        out.update(zip(far, gather(*far.values()), strict=True))
    return out


def run_svi(model: Any, *, minibatch: int, steps: int, learning_rate: Any = (1.0, 0.7),
            rng: Any = None, init: dict[str, Any] | None = None,
            data: dict[str, Any] | None = None, backend: str = "numpy",
            client: Any = None, chunks: Any = None) -> Any:
    """SVI on ``model`` (see the module docstring): ``steps`` natural-gradient steps on
    minibatches of ``minibatch`` elements of the data plate; ``init``: starting
    posteriors of global variables (the others start at their priors); returns an
    ``ff.Result`` of the global posteriors (``iterations`` = steps, ``log_evidence``
    NaN: the bound of a minibatch is not the model's; ``converged`` False: SVI runs
    its steps with no convergence test).

    ``backend="jax"``: the steps under ``jax.jit`` on the device, float64, the same
    steps as ``backend="numpy"`` for the same ``rng``, to rounding.
    ``backend="dask"``: the data over the plate stays on a ``dask.distributed`` cluster
    (``client``, as the Dask backend's ``run``: None for its local cluster), chunked
    along the plate (``chunks``; a Dask array in ``data`` as it is, so data read lazily
    from files is never held whole); each step gathers only its minibatch, and runs the
    same NumPy sweeps on it here: the same steps as ``backend="numpy"`` for the same
    ``rng`` (the same minibatches), to rounding."""
    from factorflow.runtime.backends import check_backend
    from factorflow.runtime.result import Result
    backend = check_backend(backend)
    if backend != "dask" and (client is not None or chunks is not None):
        raise ModelError("client= and chunks= are the Dask backend's; pass backend='dask'.")
    if isinstance(steps, bool) or not isinstance(steps, int | np.integer) or steps < 0:
        raise ModelError(f"steps must be a non-negative integer, got {steps!r}.")
    rates = learning_rates(int(steps), learning_rate)
    probe = model.compile("vmp")
    plate = data_plate(probe)
    if plate is None:
        raise ModelError("SVI draws minibatches of a plate of observed data; this model "
                         "observes no variable over a plate: use model.infer('vmp').")
    sizes = dict(probe.compilation.final.ranges)
    n = sizes[plate]
    if isinstance(minibatch, bool) or not isinstance(minibatch, int | np.integer) or not (
            1 <= minibatch <= n):
        raise ModelError(f"minibatch must be an integer from 1 to the data plate's size "
                         f"{n}, got {minibatch!r}.")
    outside = [d.label for d in probe.compilation.final.decls
               if d.role == "random" and d.label in model.variables and plate not in d.plates]
    unknown = set(init or {}) - set(outside)
    if unknown:
        raise ModelError(f"init names {sorted(unknown)}: SVI starts only the global "
                         f"variables ({sorted(outside)}) from given posteriors.")
    gather = None
    if backend == "dask":  # the data over the plate as Dask arrays on the cluster
        from factorflow.runtime.backends.dask_backend import cluster_data
        values, gather = cluster_data(model, data, client, chunks)
    else:
        values = probe._data(data)
    draw = minibatches(np.random.default_rng(rng), n, int(minibatch))
    with warnings.catch_warnings():  # every global is initialised, whether the schedule
        warnings.simplefilter("ignore", ScheduleWarning)  # reads it or not
        compiled = model.compile("vmp", init=outside,
                                 **({"backend": "jax"} if backend == "jax" else {}))

    def sweep(index: np.ndarray, start: dict[str, Any], program: Any) -> dict[str, Any]:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            posteriors, _ = program._infer(_take(values, program, plate, index, gather),
                                           sizes | {plate: index.size}, start, 1, None,
                                           None, None)
        return posteriors

    begin = time.perf_counter()
    empty = np.zeros(0, np.intp)
    priors = sweep(empty, {}, probe)
    state = {name: priors[name] for name in outside} | dict(init or {})
    if backend == "jax":  # the steps under jax.jit, the data on the device
        from factorflow.runtime.backends.jax_svi import JaxSteps
        state = JaxSteps(compiled, values, sizes, plate, outside).run(
            state, draw, rates, int(minibatch))
    else:
        for rho in rates:
            index = draw(1)[0]
            base, batch = sweep(empty, state, compiled), sweep(index, state, compiled)
            scale = n / index.size
            new = {}
            for name in outside:  # λ ← (1 − ρ) λ + ρ (λ₀ + (N/B)(λ_B − λ₀))
                lam0, lam_b, lam = base[name].eta, batch[name].eta, state[name].eta
                new[name] = type(state[name]).from_natural(*(
                    (1 - rho) * old + rho * (e0 + scale * (eb - e0))
                    for old, e0, eb in zip(lam, lam0, lam_b, strict=True)))
            state = new
    dims = {name: tuple(r.name for r in model.variables[name].plates) for name in outside}
    return Result(state, float("nan"), "svi", int(steps), time.perf_counter() - begin,
                  converged=False, dims=dims)


__all__ = ["run_svi", "learning_rates", "data_plate", "minibatches"]
