"""Linear-Gaussian state-space chains of vectors over a plate (``factors.vector_chains``).

Written as the scalar chain (``model.chains``), inside the chain's plate::

    with ff.Plate(t):
        with ff.If(t == 0):
            x = ff.VectorGaussian("x", m0, precision=P0)                  # the start
        with ff.If(t > 0):
            x = ff.VectorGaussian("x", A @ x[t - 1] + b, precision=Q)     # the step
        ff.VectorGaussian("y", C @ x, precision=R, observed=y)            # emissions

``A @ x[t - 1] + b`` is a ``VectorAffine`` (no statement is made for it): known matrices
applied on the left and known vectors added, in any order (``A2 @ (A1 @ x[t - 1])``; the
products may pass through other dimensions, but the step's mean must have the state's
dimension D).  m0, P0, A, b and Q (or ``covariance=``) are known constants.  The two
definitions become one ``VectorGaussianChain`` statement over the whole plate.

Guarantees: a random or ill-shaped parameter, a step whose mean changes the state's
dimension, a matrix parameter that is not positive definite (with its smallest
eigenvalue), or a step of another kind than the start each raise ModelError (DataError
for bad constants) naming the variable, the shapes and what to write.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from factorflow.errors import ModelError
from factorflow.model.chains import (
    ChainFrame,
    ChainStart,
    _known,
    _previous,
    chain_statement,
    is_offset_read,
)
from factorflow.model.checks import numeric_array
from factorflow.model.core import Data, Indexed, Model, Variable, _provenance


@dataclass(frozen=True, eq=False)
class VectorAffine(Indexed):
    """``transition @ x[t − 1] + offset`` for a vector chain's step: an offset read
    (``base``, ``index``) with a known matrix applied on the left and a known vector
    added."""

    transition: np.ndarray = None  # type: ignore[assignment]  # (M, D)
    offset: np.ndarray = None  # type: ignore[assignment]  # (M,)

    def __rmatmul__(self, other: Any) -> VectorAffine:
        return matmul(other, self)

    def __matmul__(self, other: Any) -> VectorAffine:
        return matmul(self, other)

    def __repr__(self) -> str:
        return (f"<{self.transition.shape} matrix @ {self.base.name}[{self.index!r}] + "
                "a vector>")


def is_vector_chain_term(value: Any) -> bool:
    """Whether ``value`` is ``x[t − 1]`` of a vector variable or an affine map of it."""
    return is_offset_read(value) and (isinstance(value, VectorAffine) or (
        isinstance(value.base, Variable) and value.base.domain == "vector"))


def _as_vector_affine(value: Any) -> VectorAffine:
    if isinstance(value, VectorAffine):
        return value
    dim = value.base.size
    return VectorAffine(value.base, value.index, np.eye(dim), np.zeros(dim))


def _label(value: Any) -> str:
    if is_offset_read(value):
        return f"{value.base.name}[{value.index!r}]" if not isinstance(
            value, VectorAffine) else f"(... @ {value.base.name}[{value.index!r}])"
    if isinstance(value, Variable):
        return value.name
    return f"an array of shape {np.shape(value)}"


def _constant(value: Any, label: str) -> np.ndarray:
    if isinstance(value, Variable | Indexed | Data):
        raise ModelError(f"{label}: a vector chain's step is a known matrix times "
                         "x[t - 1] plus a known vector; a random or ff.Data matrix or "
                         "offset is not supported.")
    arr = numeric_array(value, label).astype(float)
    if not np.all(np.isfinite(arr)):
        raise ModelError(f"{label}: the chain's matrices and offsets must be finite.")
    return arr


def matmul(left: Any, right: Any) -> Any:
    """``left @ right`` where ``right`` is ``x[t − 1]`` (or an affine map of it) and
    ``left`` a known matrix; other uses of ``@`` on an element go to ``vectors.matmul``."""
    if not is_vector_chain_term(right):
        if is_vector_chain_term(left):
            raise ModelError(f"({_label(left)} @ {_label(right)}): a vector chain's step "
                             f"applies a known matrix on the left, A @ "
                             f"{left.base.name}[{left.index!r}].")
        from factorflow.model import vectors
        return vectors.matmul(left, right)
    label = f"({_label(left)} @ {_label(right)})"
    f = _as_vector_affine(right)
    a = _constant(left, label)
    rows = f.transition.shape[0]
    if a.ndim != 2 or a.shape[1] != rows:
        raise ModelError(f"{label}: dimension mismatch: the matrix has shape {a.shape} but "
                         f"{_label(right)} is a vector of shape ({rows},); it needs shape "
                         f"(M, {rows}), one matrix for every t.")
    return VectorAffine(f.base, f.index, a @ f.transition, a @ f.offset)


def vector_affine(op: str, a: Any, b: Any = None) -> VectorAffine:
    """``a op b`` for a vector chain's step: + or − a known vector (or scalar), unary −,
    * or / by a known scalar; ``a`` or ``b`` is the chain term."""
    label = f"({_label(a)} {op} {_label(b)})" if b is not None else f"{op} {_label(a)}"
    if op == "neg":
        f = _as_vector_affine(a)
        return VectorAffine(f.base, f.index, -f.transition, -f.offset)
    if is_vector_chain_term(a) and is_vector_chain_term(b):
        raise ModelError(f"{label}: a chain's step reads x[t - 1] once; collect it into "
                         "one matrix.")
    term, other = (a, b) if is_vector_chain_term(a) else (b, a)
    f = _as_vector_affine(term)
    if not is_vector_chain_term(term):  # the scalar chain's term beside a vector one
        raise ModelError(f"{label}: only + and - of a known vector, and * and / by a known "
                         "scalar, apply to x[t - 1] in a vector chain's step.")
    c = _constant(other, label)
    rows = f.transition.shape[0]
    if op in ("+", "-"):
        if c.shape not in ((), (rows,)):
            raise ModelError(f"{label}: dimension mismatch: the offset has shape {c.shape} "
                             f"but the step's mean has shape ({rows},); give a vector of "
                             "that shape (or a scalar).")
        sign = -1.0 if op == "-" and term is b else 1.0
        added = -c if op == "-" and term is a else c
        return VectorAffine(f.base, f.index, sign * f.transition, sign * f.offset + added)
    if op in ("*", "/") and c.ndim == 0 and not (op == "/" and term is b):
        if op == "/" and c == 0:
            raise ModelError(f"{label}: division by zero.")
        k = float(c) if op == "*" else 1.0 / float(c)
        return VectorAffine(f.base, f.index, k * f.transition, k * f.offset)
    raise ModelError(f"{label}: only A @ x[t - 1], + and - of a known vector, and * and / "
                     "by a known scalar apply to x[t - 1] in a vector chain's step.")


def define(model: Model, frame: ChainFrame, factor: str, name: str, args: dict[str, Any],
           size: int | None) -> Variable:
    """A vector chain's start (under ``ff.If(t == 0)``) or step (``ff.If(t > 0)``); the
    step adds the ``VectorGaussianChain`` statement (``model.chains.define`` has checked
    the plate, gates, that the chain is latent and that a start's name is new)."""
    rng = frame.condition.range
    what = f"variable {name!r} ({frame.describe()})"
    chains: dict[str, ChainStart] = model.chains
    prov = _provenance()
    if frame.condition.first:  # (``model.chains.define`` refused a name defined before)
        mean = args["mean"]
        if is_offset_read(mean):
            raise ModelError(f"{what}: the chain's start cannot read {mean.base.name}"
                             f"[{mean.index!r}]; give it a known mean.")
        known = {"init_mean": _known(mean, "vector", f"{what}, mean", size),
                 "init_precision": _known(args["precision"], "posdef", f"{what}, precision",
                                          size)}
        _check_shapes(known, size, what)
        var = Variable(name, "vector", model.plates, model, None, size, True, prov)
        model.add_variable(var)
        chains[name] = ChainStart("VectorGaussian", var, known, prov)
        return var
    start = chains.get(name)
    if start is None:
        raise ModelError(f"{what}: define the chain's start first: `with ff.If({rng.name} "
                         f"== 0): {name} = ff.VectorGaussian(...)` before its step under "
                         f"ff.If({rng.name} > 0).")
    var = start.variable
    if start.factor != factor:
        raise ModelError(f"{what}: the step must be the same kind of variable as the start "
                         f"({start.factor}).")
    mean = args["mean"]
    if not is_vector_chain_term(mean):
        raise ModelError(f"{what}: a linear-Gaussian vector chain's step has mean A @ "
                         f"{name}[{rng.name} - 1] + b (known A, b).")
    _previous(var, rng, mean, what)
    f = _as_vector_affine(mean)
    dim = var.size
    if f.transition.shape != (dim, dim):
        raise ModelError(f"{what}: the step's mean A @ {name}[{rng.name} - 1] + b has "
                         f"shape ({f.transition.shape[0]},), but {name!r} has shape "
                         f"({dim},) at t = 0 (overall A has shape {f.transition.shape}); "
                         f"the state's dimension must stay {dim}: A maps R^{dim} to "
                         f"R^{dim}.")
    step = {"transition": f.transition, "offset": f.offset,
            "precision": _known(args["precision"], "posdef", f"{what}, precision", dim)}
    _check_shapes(step, dim, what)
    del chains[name]
    model.definitions.setdefault(name, []).append(model.gates)
    model.statements.append(chain_statement(model, "VectorGaussianChain", var,
                                            {**start.args, **step}, prov))
    return var


def _check_shapes(known: dict[str, np.ndarray], dim: int | None, what: str) -> None:
    """Each parameter one D-vector or D × D matrix (not one per plate element)."""
    for key, arr in known.items():
        shape = (dim,) if key in ("init_mean", "offset") else (dim, dim)
        if arr.shape != shape:
            raise ModelError(f"{what}: the chain's {key.replace('_', ' ')} must have shape "
                             f"{shape} (one for every t), got shape {arr.shape}.")
