"""The VMP bound under JAX: its terms over (N, K) arrays summed as one fused reduction.

A VMP bound has terms Σ_k q_k v_k over a discrete posterior's probabilities q, one per
element of a plate: a Discrete factor's E_q[log p] (v = E[log p_k]), a gate's cases'
Σ_k q_k ℓ_k and the posterior's entropy −Σ_k q_k log q_k.  The kernels compute each
with 0 · ±inf = 0 (``factors.common.times_finite``: a ``where``), which XLA on the CPU
does not fuse into the sum: every term wrote an (N, K) array and read it back.  Here
those kernels' traced paths (``Discrete.entropy``, the gate's and the Discrete
factor's VMP evidence operators) give the same per-row values through ``row_term``,
which notes the pieces they came from; ``variable.total``'s traced path hands a noted
term on unsummed (``total`` here: a ``Term``) and the evidence accumulates its terms
in a ``Bound``, whose ``value`` sums every term over the same q as one elementwise
expression reduced once, Σ q (v₁ + v₂ − v₃), that XLA fuses into the reduction (one
read of q and the vs, no (N, K) write).  Where that sum is not finite (a zero
probability against an infinite v, 0 · ∞ = NaN, or a bound that is ±∞) a
``lax.cond`` computes each term the kernels' way instead, as NumPy does after its
one-pass sum gave NaN: the same value whatever the inputs, to rounding (the order of
the additions differs, ~1e-16 relative per term).
"""

from __future__ import annotations

import weakref
from typing import Any

import jax
import jax.numpy as jnp

#: id(per-row result) -> (weak reference to it, (q, v, sign)), see ``row_term``
_PIECES: dict[int, tuple[Any, tuple[Any, Any, float]]] = {}


def _exact(q: Any, v: Any, sign: float) -> Any:
    """sign · Σ q v over every element with 0 · v = 0 (``times_finite``'s rule); ``q``
    and ``v`` may be functions making them (see ``row_term``, ``_remade``)."""
    q = _made(q)
    return sign * jnp.sum(jnp.where(q == 0, 0.0, q * _made(v)))


def _made(v: Any) -> Any:
    """``v``, or what it makes where it is a function (see ``row_term``)."""
    return v() if callable(v) else v


def row_term(q: Any, v: Any, sign: float = 1.0) -> Any:
    """sign · Σ_k q_k v_k per row (the last axis), 0 · ±inf = 0, as the kernels compute
    it under tracing; the pieces are noted for ``total`` while the result lives.  ``v``
    may be a function of no arguments that makes it from arrays the sweep writes anyway
    (the normalised logs as x − log Σ exp x): the bound's sum, and its exact path in a
    ``lax.cond``, each make it inside themselves, so that it is never written out as an
    (N, K) array of its own (an operand of a ``lax.cond`` is)."""
    out = sign * jnp.sum(jnp.where(q == 0, 0.0, q * _made(v)), axis=-1)
    key = id(out)
    try:
        ref = weakref.ref(out, lambda _, key=key, table=_PIECES: table.pop(key, None))
    except TypeError:  # (not weakly referable: summed as it is)
        return out
    _PIECES[key] = (ref, (q, v, sign))
    return out


def pieces(value: Any) -> tuple[Any, Any, float] | None:
    """The (q, v, sign) ``row_term`` noted for ``value``, else None."""
    hit = _PIECES.get(id(value))
    return hit[1] if hit is not None and hit[0]() is value else None


def _fused(terms: list[Term]) -> Any:
    """Σ q (Σ_i sign_i v_i) over every element, the terms sharing q: one elementwise
    expression reduced once.  A v that is a broadcast view along q's leading axes (a
    K-vector seen by every datum, E[log w]) enters through q's sums along those axes
    instead, Σ_k (Σ_n q_nk) v_k (XLA would lay the vector out over (N, K) first)."""
    from factorflow.runtime.backends.jax_namespace import namespace
    base = namespace()["factorflow.distributions.base"]
    distinct = base.distinct
    q = terms[0].q
    inner: Any = None
    out: Any = 0.0
    for t in terms:
        closed = _closed(q, t.v)
        if closed is not None:
            out = out + t.sign * closed
            continue
        v = _made(t.v)
        small = distinct(v)
        lead = [i for i in range(jnp.ndim(q) - 1)
                if i >= jnp.ndim(q) - jnp.ndim(small) and jnp.shape(small)[i - (
                    jnp.ndim(q) - jnp.ndim(small))] == 1] + list(
            range(jnp.ndim(q) - jnp.ndim(small)))
        if small is not v or jnp.ndim(v) < jnp.ndim(q):
            if len(lead) == jnp.ndim(q) - 1:  # one row: through q's column sums
                row = jnp.reshape(small, jnp.shape(small)[-1:])
                # (a mixture's data sums made them: gaussian._data_sums)
                sums = base._recall_traced("column_sums", q) if jnp.ndim(q) == 2 else None
                if sums is None:
                    sums = jnp.sum(q, axis=tuple(lead))
                out = out + t.sign * jnp.sum(sums * row)
                continue
        inner = t.sign * v if inner is None else inner + t.sign * v
    if inner is not None:
        out = out + jnp.sum(q * inner)
    return out


def _closed(q: Any, v: Any) -> Any:
    """Σ q v over every element without an (N, K) pass, where q are the probabilities of
    a fused normalisation (``base._normalize_traced_product``: it accumulated Sᵀ q over
    the statistics S of the product it normalised) and v is a ``rows_product`` S C of
    the same statistics (a gate's cases' evidence: Σ_jk C_jk (Sᵀ q)_jk) or the
    normalised logs of one, x − lse (the entropy's: Σ C·Sᵀq − Σ_n lse_n, each row of q
    summing to 1); else None.  Equal to the elementwise sum to rounding."""
    if callable(v) or jnp.ndim(q) != 2:
        return None
    from factorflow.runtime.backends.jax_namespace import namespace
    base = namespace()["factorflow.distributions.base"]
    fused = base._recall_traced("rows_sums", q)
    if fused is None:
        return None
    stats, sums = fused
    product = base._recall_traced("rows_product", v)
    if product is not None and product[0] is stats:
        return jnp.sum(product[1] * sums)
    logs = base._recall_traced("normalized_product", v)
    if logs is not None and logs[0][0] is stats:
        return jnp.sum(logs[0][1] * sums) - logs[1]
    return None


def _remade(a: Any) -> Any:
    """``a``, or a function of no arguments making it again from the statistics it was
    made of (``base.remade``): the exact path's ``lax.cond`` then reads those, not an
    (N, K) array written out for it."""
    if callable(a):
        return a
    from factorflow.runtime.backends.jax_namespace import namespace
    again = namespace()["factorflow.distributions.base"].remade(a)
    return a if again is None else again


class Term:
    """A term of the bound not summed yet: ``total`` of a ``row_term``."""

    __slots__ = ("q", "v", "sign")

    def __init__(self, q: Any, v: Any, sign: float) -> None:
        self.q, self.v, self.sign = q, v, sign

    def __add__(self, other: Any) -> Bound:
        return Bound([self, other])

    def __radd__(self, other: Any) -> Bound:
        return Bound([other, self])


class Bound:
    """The evidence's sum of terms (numbers, arrays of no axes and ``Term``s), in the
    order added; ``value()`` is their sum (see the module docstring)."""

    __slots__ = ("parts",)

    def __init__(self, parts: list[Any]) -> None:
        self.parts = parts

    def __add__(self, other: Any) -> Bound:
        return Bound(self.parts + (other.parts if isinstance(other, Bound) else [other]))

    def __radd__(self, other: Any) -> Bound:
        return Bound([other, *self.parts])

    def value(self) -> Any:
        """The sum: the plain terms in order, then per q (by identity) its terms as one
        fused reduction, or each the kernels' way where that is not finite."""
        out: Any = 0.0
        groups: dict[int, list[Term]] = {}
        for part in self.parts:
            if isinstance(part, Term):
                groups.setdefault(id(part.q), []).append(part)
            else:
                out = out + part
        for terms in groups.values():
            fast = _fused(terms)

            # (the pieces made again inside the branch where they can be: its
            # operands are written out, the statistics and coefficients already are)
            made = [(_remade(t.q), _remade(t.v), t.sign) for t in terms]

            def exact(made: list[tuple] = made) -> Any:
                total = _exact(*made[0])
                for q, v, sign in made[1:]:
                    total = total + _exact(q, v, sign)
                return total
            out = out + jax.lax.cond(jnp.isfinite(fast), lambda fast=fast: fast, exact)
        return out


def total(value: Any) -> Any:
    """``factors.variable.total``'s traced path: a ``row_term``'s sum left to the
    ``Bound`` (a ``Term``), anything else summed."""
    got = pieces(value)
    if got is not None:
        return Term(*got)
    return jnp.sum(value)


def value(log_evidence: Any) -> Any:
    """The evidence's value as an array of no axes (a ``Bound``'s or a ``Term``'s sum)."""
    if isinstance(log_evidence, Term):
        log_evidence = Bound([log_evidence])
    if isinstance(log_evidence, Bound):
        log_evidence = log_evidence.value()
    return jnp.asarray(log_evidence, float)


__all__ = ["Bound", "Term", "row_term", "pieces", "total", "value"]
