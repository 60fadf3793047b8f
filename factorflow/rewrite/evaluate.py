"""Numerical evaluation of terms over NumPy arrays with named axes.

``evaluate(term, env)`` maps every atom of ``term`` (a symbol, a pattern variable, or a
moment such as ``E(x)``) to the array ``env`` gives for it, and computes the rest with
vectorized NumPy/SciPy operations, sharing work between repeated subterms.

Axes. A value is an array whose *leading* axes are named (the plate indices of a
symbol, or indices introduced by ``at``) and whose *trailing* axes are positional
(vector or matrix components, or batch axes for vectorized evaluation). Elementwise
operations align named axes by name and broadcast positional axes as NumPy does;
``at(t, k)`` names the last positional axis ``k``; ``sum[k](t)`` sums the named axis
``k``; ``dot`` contracts the last positional axis; ``a @ b`` is ``numpy.matmul``. A moment
such as ``E(t)`` is an atom carrying the free indices of ``t``.
The result of :func:`evaluate` has the free named axes first, in sorted order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from factorflow.errors import ModelError
from factorflow.lazy import special
from factorflow.rewrite.terms import (
    CALC,
    CALL,
    CONST,
    DATA,
    DIGAMMA,
    DOT,
    EXP,
    INDEX,
    INDEX_SUM,
    LGAMMA,
    LOG,
    LOGDET,
    MATMUL,
    MOMENTS,
    NEG,
    POW,
    PROD,
    SUM,
    SYM,
    TRANSPOSE,
    VAR,
    Term,
)

Named = tuple[np.ndarray, tuple[str, ...]]

_ELEMENTWISE: dict[str, Any] = {
    NEG: np.negative, LOG: np.log, EXP: np.exp,
    LGAMMA: lambda x: special.gammaln(x),    # looked up at the call: SciPy loads lazily
    DIGAMMA: lambda x: special.digamma(x),
}
_CALC = {"add": np.add, "mul": np.multiply, "pow": np.power}
#: user functions by name: vectorized NumPy implementations (:mod:`factorflow.rewrite.user`)
FUNCTION_IMPLEMENTATIONS: dict[str, Any] = {}


def evaluate(term: Term, env: Mapping[Term | str, ArrayLike]) -> np.ndarray:
    """Evaluate ``term``; ``env`` maps atoms (terms, or symbol names) to arrays.

    Raises ModelError when an atom has no value, or when an index is summed that the
    summand does not carry.
    """
    data, names = evaluate_named(term, env)
    order = sorted(names)
    return np.moveaxis(data, [names.index(n) for n in order], list(range(len(order))))


def evaluate_named(term: Term, env: Mapping[Term | str, ArrayLike]) -> Named:
    """Like :func:`evaluate` but returns ``(array, names of its leading axes)``."""
    memo: dict[Term, Named] = {}
    return _eval(term, env, memo)


def _eval(t: Term, env: Mapping[Term | str, ArrayLike], memo: dict[Term, Named]) -> Named:
    hit = memo.get(t)
    if hit is not None:
        return hit
    op = t.op
    if op == CONST:
        out: Named = (np.asarray(t.payload), ())
    elif op in (SYM, DATA, VAR) or op in MOMENTS:
        out = _atom(t, env)
    else:
        vals = [_eval(a, env, memo) for a in t.args]
        out = _apply(t, vals)
    memo[t] = out
    return out


def _atom(t: Term, env: Mapping[Term | str, ArrayLike]) -> Named:
    if t in env:
        value = env[t]
    elif t.op in (SYM, DATA) and t.payload[0] in env:
        value = env[t.payload[0]]
    else:
        raise ModelError(f"no value given for {t} (give it in the evaluation environment)")
    names = t.payload[1] if t.op in (SYM, DATA) else _moment_names(t)
    arr = np.asarray(value, dtype=float)
    if arr.ndim < len(names):
        raise ModelError(f"{t} has indices {names} but its value has shape {arr.shape}")
    return arr, tuple(names)


def _moment_names(t: Term) -> tuple[str, ...]:
    """A moment carries its argument's indices: a symbol's in its own order, else sorted."""
    if not t.args:
        return ()
    inner = t.args[0]
    return inner.payload[1] if inner.op in (SYM, DATA) else tuple(sorted(inner.indices))


def _align(vals: list[Named]) -> tuple[list[np.ndarray], tuple[str, ...]]:
    """Put the values on one set of named leading axes and pad positional axes."""
    names = tuple(sorted({n for _, ns in vals for n in ns}))
    sizes: dict[str, int] = {}
    for a, ns in vals:
        for axis, n in enumerate(ns):
            if a.shape[axis] != 1 and sizes.setdefault(n, a.shape[axis]) != a.shape[axis]:
                raise ModelError(f"index {n} has size {sizes[n]} in one operand and "
                                 f"{a.shape[axis]} in another; the arrays named by {n} "
                                 "must have the same length.")
    npos = max(a.ndim - len(ns) for a, ns in vals)
    out = []
    for a, ns in vals:
        perm = [ns.index(n) for n in sorted(ns)] + list(range(len(ns), a.ndim))
        a = a.transpose(perm)
        for i, n in enumerate(names):
            if n not in ns:
                a = np.expand_dims(a, i)
        pad = npos - (a.ndim - len(names))
        out.append(a.reshape(a.shape[: len(names)] + (1,) * pad + a.shape[len(names):]))
    return out, names


def _apply(t: Term, vals: list[Named]) -> Named:
    op = t.op
    if op == INDEX:
        a, names = vals[0]
        if t.payload in names:
            raise ModelError(f"index {t.payload} is already used in {t.args[0]}")
        if a.ndim == len(names):
            raise ModelError(f"{t.args[0]} has no positional axis to name {t.payload}")
        return np.moveaxis(a, -1, len(names)), (*names, t.payload)
    if op == INDEX_SUM:
        a, names = vals[0]
        if t.payload not in names:
            raise ModelError(f"sum over {t.payload}, but {t.args[0]} does not carry it")
        return a.sum(axis=names.index(t.payload)), tuple(n for n in names if n != t.payload)
    arrays, names = _align(vals)
    if op == SUM:
        result = sum(arrays[1:], start=arrays[0])
    elif op == PROD:
        result = arrays[0]
        for a in arrays[1:]:
            result = result * a
    elif op == POW:
        result = np.power(arrays[0], arrays[1])
    elif op in _ELEMENTWISE:
        result = _ELEMENTWISE[op](arrays[0])
    elif op == LOGDET:
        result = np.linalg.slogdet(arrays[0])[1]
    elif op == DOT:
        result = (arrays[0] * arrays[1]).sum(axis=-1)
    elif op == MATMUL:
        vector = vals[1][0].ndim - len(vals[1][1]) == 1
        result = (arrays[0] * arrays[1]).sum(-1) if vector else arrays[0] @ arrays[1]
    elif op == TRANSPOSE:
        result = np.swapaxes(arrays[0], -1, -2)
    elif op == CALC:
        result = _CALC[t.payload](*arrays)
    elif op == CALL:
        if t.payload not in FUNCTION_IMPLEMENTATIONS:
            raise ModelError(f"cannot evaluate {t}: no function {t.payload!r} is defined "
                             "(define it with ff.function)")
        result = FUNCTION_IMPLEMENTATIONS[t.payload](*arrays)
    else:
        raise ModelError(f"cannot evaluate {t}")
    return np.asarray(result), names
