"""What a JAX loop carries from one sweep to the next: the fewest arrays that do.

A loop's *state* is every message and posterior its sweep assigns (the generated
program's tuple; ``codegen.jax``).  Carrying all of it through ``lax.while_loop`` makes
XLA write every leaf to memory after every sweep: for a mixture of K components over N
points, dozens of (N, K) arrays, most of them messages the next sweep computes afresh
before reading them, or broadcast views of K values.  ``Carry`` decides, while the
program is traced, which leaves the loop carries and how:

- **read before written** (liveness): a leaf is carried only if some value the loop
  keeps depends on it: the next sweep's carried leaves, the convergence test's
  posteriors and bound, the checks, the skip counts, or what the code after the loop
  reads (``after``; for a loop followed by another, everything).  The dependencies are
  read from the jaxpr of one sweep (an equation's inputs count when any of its outputs
  does).
- **unchanged**: a leaf the sweep passes through as it is (a message computed before the
  loop) is a constant of the loop, closed over rather than carried.
- **distinct elements**: a leaf that is a broadcast view both before the loop and after a
  sweep (``distributions.base.strides`` under tracing: a gate's clone of K components
  over N data) is carried along its other axes only and laid out again at the start of
  each sweep as a recorded view, so the kernels keep the fast paths they take on views;
  an all-zero view (a uniform message made by ``zeros_view``) at both ends is constant.
- **products**: a leaf that is a ``rows_product`` S C of the data's statistics S
  (``distributions.base``, under tracing: a mixture's data evidence, (N, K), and the
  responsibilities' logits with E[log w] folded into C) both before the loop and after a
  sweep, of the same S (the program's: a constant of the loop), is carried as its (J, K)
  coefficients C and made again as the product at the start of each sweep, recorded as
  one, so that its normalisation makes its rows block by block
  (``base._normalize_traced_product``) and nothing writes the (N, K) array out.
- **probabilities**: where a sweep normalised a carried leaf (a mixture's responsibilities,
  ``distributions.base.log_normalize``) and the next sweep reads that leaf's
  probabilities before making it anew (the weights' message, Σ_n q_nk), the loop
  carries the probabilities too, and the next sweep reads them (``base.traced_probs``,
  ``note_traced_probs``) instead of normalising the leaf again (a max, an exponential,
  a sum and a division over (N, K)), as the NumPy program remembers them.  Where the
  leaf is carried as a product and what its fused normalisation accumulated includes
  the probabilities' column sums, the loop carries those sums (K,) instead, which is
  what the next sweep reads of them (the weights' message), and the probabilities are
  made again from the product where anything reads more of them (the compiler drops
  that normalisation where nothing does).

Guarantee: each sweep computes the same numbers from the same values as with the whole
state carried (but for carried column sums: those the normalisation accumulated block
by block, equal to the probabilities' sums to rounding); a leaf that is not carried
comes out of the loop as it went in, and nothing after the loop reads it.  The
decisions are a fixed point: the views a sweep makes can depend on the views it is
given, so the layout is narrowed until the sweep gives back at least what it was given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from jax.extend.core import Literal

from factorflow.runtime.backends.jax_namespace import namespace

#: rounds of narrowing the views before giving up on them (each round traces a sweep)
ROUNDS = 4


@dataclass(frozen=True)
class Layout:
    """Per leaf of the state: the axes carried at length 1 (a broadcast view along
    them), whether it is an all-zero view, whether the sweep passes it through, and
    whether it is carried as the coefficients of a ``rows_product`` of the loop's
    statistics (``product``)."""

    shrink: tuple[tuple[bool, ...], ...]
    zero: tuple[bool, ...]
    fixed: tuple[bool, ...]
    product: tuple[bool, ...]

    def meet(self, other: Layout) -> Layout:
        """What both layouts allow."""
        return Layout(tuple(tuple(a and b for a, b in zip(s, t, strict=True))
                            for s, t in zip(self.shrink, other.shrink, strict=True)),
                      tuple(a and b for a, b in zip(self.zero, other.zero, strict=True)),
                      tuple(a and b for a, b in zip(self.fixed, other.fixed, strict=True)),
                      tuple(a and b for a, b in zip(self.product, other.product,
                                                    strict=True)))


def _products(leaves: list[Any], start: list[Any | None]) -> tuple[bool, ...]:
    """Per leaf: whether it is a ``rows_product`` (``distributions.base``: a mixture's
    data evidence S C, (N, K), under tracing) of the same statistics S, the same array,
    as the leaf ``start`` holds there (made before the loop, so a constant of it: the
    kernels' memo gives the loop's body the program's statistics, ``base.memo_of``)."""
    base = namespace()["factorflow.distributions.base"]
    out = []
    for leaf, first in zip(leaves, start, strict=True):
        hit = base._recall_traced("rows_product", leaf) if jnp.ndim(leaf) == 2 else None
        out.append(hit is not None and first is not None and hit[0] is first[0]
                   and hit[2] == first[2] and jnp.shape(hit[1]) == jnp.shape(first[1]))
    return tuple(out)


def _views(leaves: list[Any]) -> tuple[tuple[tuple[bool, ...], ...], tuple[bool, ...]]:
    """Per leaf: the axes along which it is a known broadcast view, and whether it is a
    known all-zero view (read from the JAX namespace's records, during a trace)."""
    base = namespace()["factorflow.distributions.base"]
    shrink, zero = [], []
    for leaf in leaves:
        shape = jnp.shape(leaf)
        st = base.strides(leaf) if shape else ()
        shrink.append(tuple(s == 0 and n > 1 for s, n in zip(st, shape, strict=True)))
        zero.append(bool(shape) and base.is_zeros_view((leaf,)))
    return tuple(shrink), tuple(zero)


def _column_sums(leaf: Any) -> Any:
    """Σ_n q_nk of the probabilities the sweep made of ``leaf`` where a fused
    normalisation accumulated them (``base._normalize_traced_product``), else None."""
    base = namespace()["factorflow.distributions.base"]
    probs = base.traced_probs(leaf)
    return None if probs is None else base._recall_traced("column_sums", probs)


def _small(leaf: Any, shrink: tuple[bool, ...]) -> Any:
    """``leaf`` along its carried axes only (length 1 on the others)."""
    if not any(shrink):
        return leaf
    return leaf[tuple(slice(0, 1) if s else slice(None) for s in shrink)]


def _full(small: Any, shape: tuple[int, ...], shrink: tuple[bool, ...], zero: bool) -> Any:
    """A carried leaf laid out at ``shape`` again, recorded as the broadcast view it is
    (an all-zero view made anew: its value is known)."""
    if zero:
        return namespace()["factorflow.distributions.base"].zeros_view(shape)
    if not any(shrink):
        return small
    return namespace().numpy.broadcast_to(small, shape)


def _inputs_read(jaxpr: Any, wanted: list[bool]) -> list[bool]:
    """Per input of ``jaxpr``: whether an output in ``wanted`` depends on it (an
    equation's inputs are read when any of its outputs is: conservative for the loops
    and calls nested in it)."""
    live = {v for v, w in zip(jaxpr.outvars, wanted, strict=True)
            if w and not isinstance(v, Literal)}
    for eqn in reversed(jaxpr.eqns):
        if eqn.effects or any(o in live for o in eqn.outvars):
            live.update(v for v in eqn.invars if not isinstance(v, Literal))
    return [v in live for v in jaxpr.invars]


class Carry:
    """The carry of one loop (see the module docstring).

    ``sweep(iteration, leaves) -> (new leaves, kept)``: one sweep over the state's
    leaves, laid out as ``leaves`` are; ``kept``, a pytree, is what the loop keeps
    besides the state (the monitor's inputs, the checks).  ``after(leaves)``: what the
    code after the loop computes from the state (None: it may read every leaf)."""

    def __init__(self, leaves: list[Any], sweep: Callable[[Any, list[Any]], tuple],
                 after: Callable[[list[Any]], Any] | None) -> None:
        self.start = leaves
        self.shapes = [jnp.shape(leaf) for leaf in leaves]
        shrink, zero = _views(leaves)
        base = namespace()["factorflow.distributions.base"]
        #: per leaf: its rows_product (statistics, coefficients, ones) before the loop
        self.products = [base._recall_traced("rows_product", leaf)
                         if jnp.ndim(leaf) == 2 else None for leaf in leaves]
        layout = Layout(shrink, zero, (True,) * len(leaves),
                        _products(leaves, self.products))
        found: list[Layout] = []  # the layout a sweep gives back, per trace
        base = namespace()["factorflow.distributions.base"]
        normalised: list[bool] = []  # per leaf: the sweep ends with its probabilities
        summed: list[bool] = []  # per leaf: ... and their sums over the rows

        def probe(iteration: Any, small: list[Any]) -> tuple:
            full = self.unpack(small)
            new, kept = sweep(iteration, full)
            shrink, zero = _views(new)
            found.append(Layout(shrink, zero, tuple(
                a is b for a, b in zip(new, full, strict=True)),
                _products(new, self.products)))
            normalised[:] = [base.traced_probs(a) is not None for a in new]
            summed[:] = [_column_sums(a) is not None for a in new]
            return self.pack(new), kept

        self.carried = [True] * len(leaves)  # while the layout is decided
        self.extra: list[int] = []  # the leaves whose probabilities are carried too
        self.sums: list[int] = []  # of those, the leaves whose sums are carried instead
        for _ in range(ROUNDS):
            self.layout = layout
            closed = jax.make_jaxpr(probe)(jnp.asarray(0), self.pack(leaves))
            layout = layout.meet(found[-1])
            if layout == self.layout:
                break
        else:  # no fixed point of the views: carry every leaf whole
            self.layout = Layout(tuple((False,) * len(s) for s in self.shapes),
                                 (False,) * len(leaves), (False,) * len(leaves),
                                 (False,) * len(leaves))
            closed = jax.make_jaxpr(probe)(jnp.asarray(0), self.pack(leaves))
        self.carried = self._live(closed.jaxpr, len(jax.tree_util.tree_leaves(
            closed.out_avals)) - len(leaves), after)
        self.extra = self._probabilities(probe, leaves, normalised)
        #: the leaves of ``extra`` laid out as products whose probabilities' sums over
        #: the rows are carried instead of the probabilities (see ``pack``)
        self.sums = [i for i in self.extra if self.layout.product[i] and summed[i]]

    def _live(self, jaxpr: Any, n_kept: int, after: Callable | None) -> list[bool]:
        """Per leaf: whether the loop must carry it (read before written)."""
        n = len(self.start)
        constant = [f or z for f, z in zip(self.layout.fixed, self.layout.zero, strict=True)]
        if after is None:
            needed = [True] * n
        else:
            closed = jax.make_jaxpr(after)(self.start)
            needed = _inputs_read(closed.jaxpr, [True] * len(closed.jaxpr.outvars))
        needed = [w and not c for w, c in zip(needed, constant, strict=True)]
        while True:  # the inputs read by what is kept, until nothing is added
            read = _inputs_read(jaxpr, needed + [True] * n_kept)[1:]
            more = [(w or r) and not c for w, r, c in zip(needed, read, constant, strict=True)]
            if more == needed:
                return needed
            needed = more

    def _probabilities(self, probe: Callable, leaves: list[Any], normalised: list[bool]
                       ) -> list[int]:
        """The carried leaves whose probabilities the loop carries too: a sweep ends
        with them known (``normalised``, per leaf, from the last ``probe``;
        ``base.traced_probs``) and the next one reads them."""
        self.extra = [i for i, leaf in enumerate(leaves) if self.carried[i]
                      and normalised[i] and not any(self.layout.shrink[i])
                      and not self.layout.zero[i] and jnp.ndim(leaf) >= 1]
        if not self.extra:
            return []
        closed = jax.make_jaxpr(probe)(jnp.asarray(0), self.pack(leaves))
        read = _inputs_read(closed.jaxpr, [True] * len(closed.jaxpr.outvars))
        return [i for i, r in zip(self.extra, read[len(read) - len(self.extra):],
                                  strict=True) if r]

    def pack(self, full: list[Any]) -> list[Any]:
        """The carried values of the leaves ``full`` (None where a leaf is not carried),
        then the probabilities of the leaves ``extra`` (those the sweep that made
        ``full`` made, else made here)."""
        small = [self._coefficients(leaf) if c and product else
                 _small(leaf, shrink) if c else None for leaf, shrink, c, product in
                 zip(full, self.layout.shrink, self.carried, self.layout.product,
                     strict=True)]
        if not self.extra:
            return small
        base = namespace()["factorflow.distributions.base"]
        for i in self.extra:
            probs = base.traced_probs(full[i])
            if probs is None:
                probs = base.memo_of("exp", base.log_normalize(full[i]), base.exp_flushed)
            if i in self.sums:  # (what the next sweep reads of them: Σ_n q_nk, (K,))
                sums = _column_sums(full[i])
                probs = jnp.sum(probs, axis=0) if sums is None else sums
            small.append(probs)
        return small

    def unpack(self, small: list[Any]) -> list[Any]:
        """The state's leaves from the carried values (the others as they went in), the
        probabilities carried noted as those of their leaves."""
        base = namespace()["factorflow.distributions.base"]
        full = [base.rows_product(made[0], s, made[2]) if c and product and not zero else
                _full(s, shape, shrink, zero) if c or zero else start
                for s, shape, shrink, zero, c, start, product, made in
                zip(small[:len(self.start)], self.shapes, self.layout.shrink,
                    self.layout.zero, self.carried, self.start, self.layout.product,
                    self.products, strict=True)]
        for i, probs in zip(self.extra, small[len(self.start):], strict=True):
            if i in self.sums:
                # the probabilities of the product laid out again, made by its fused
                # normalisation, which the compiler drops where nothing reads more of
                # them than the sums carried (the next sweep's message to the weights)
                probs = base.memo_of("exp", base.log_normalize(full[i]), base.exp_flushed)
                base._remember_traced("column_sums", probs, small[len(self.start)
                                                                  + self.extra.index(i)])
                continue
            base.note_traced_probs(full[i], probs)
        return full

    def _coefficients(self, leaf: Any) -> Any:
        """The coefficients of ``leaf``, a ``rows_product`` of the loop's statistics
        (``Layout.product``: the sweep makes it one, as the probes found)."""
        hit = namespace()["factorflow.distributions.base"]._recall_traced(
            "rows_product", leaf)
        # (none only in a probe whose sweep did not make one: the layout is then
        # narrowed, and that probe's pack is no loop's carry)
        return leaf if hit is None else hit[1]

    def summary(self) -> dict[str, int]:
        """How many leaves are carried, and in how many elements (against all)."""
        size = [int(jnp.size(leaf)) for leaf in self.start]
        small = [int(jnp.size(made[1])) if product else int(jnp.size(_small(leaf, s)))
                 for leaf, s, product, made in zip(self.start, self.layout.shrink,
                                                  self.layout.product, self.products,
                                                  strict=True)]
        return {"leaves": len(size), "carried": sum(self.carried),
                "elements": sum(size),
                "carried elements": sum(n for n, c in zip(small, self.carried, strict=True)
                                        if c),
                "probabilities": len(self.extra)}


__all__ = ["Carry", "Layout"]
