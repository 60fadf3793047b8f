"""What a JAX loop carries (``jax_carry``): the decisions on a sweep whose answer is
known, and the loop run with them against the loop that carries everything."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

from factorflow.runtime.backends.jax_carry import Carry, _inputs_read  # noqa: E402
from factorflow.runtime.backends.jax_namespace import namespace  # noqa: E402

N, K = 5, 3
namespace()  # loaded before any trace (its module constants are computed eagerly)


def _sweep(iteration, leaves):
    """One sweep over (clone, fresh, chained, constant, uniform): ``clone`` is the K
    values of ``chained`` broadcast over N (a view); ``fresh`` is made anew from
    ``chained`` before anything reads it; ``chained`` depends on itself and on
    ``constant``, which passes through; ``uniform`` stays a zero view."""
    base = namespace()["factorflow.distributions.base"]
    xnp = namespace().numpy
    clone, fresh, chained, constant, uniform = leaves
    fresh = jnp.sin(chained[:, 0])
    new_chained = 0.5 * chained + constant + clone[0] + 0.1 * fresh[:, None]
    new_clone = xnp.broadcast_to(jnp.cos(new_chained[0]), (N, K))
    return [new_clone, fresh, new_chained, constant, base.zeros_view((N, K))], (
        jnp.sum(uniform) + iteration,)


def _start():
    base = namespace()["factorflow.distributions.base"]
    xnp = namespace().numpy
    rng = np.random.default_rng(0)
    return [xnp.broadcast_to(jnp.asarray(rng.normal(size=K)), (N, K)),
            jnp.asarray(rng.normal(size=N)), jnp.asarray(rng.normal(size=(N, K))),
            jnp.asarray(rng.normal(size=(N, K))), base.zeros_view((N, K))]


def _run(sweeps: int, whole: bool, after=None):
    """The loop run ``sweeps`` times with the carry ``Carry`` decides (or every leaf
    carried as it is); the leaves after it and the decisions."""
    with jax.enable_x64(True):
        def go():
            start = _start()
            if whole:
                out = jax.lax.fori_loop(0, sweeps, lambda i, s: _sweep(i, s)[0], start)
                return out, None
            carry = Carry(start, _sweep, after)
            small = jax.lax.fori_loop(
                0, sweeps, lambda i, s: carry.pack(_sweep(i, carry.unpack(s))[0]),
                carry.pack(start))
            return carry.unpack(small), (carry.carried, carry.layout)
        decisions = []

        def traced():
            out, made = go()
            decisions.append(made)
            return out
        return [np.asarray(v) for v in jax.jit(traced)()], decisions[0]


def test_carry_decisions():
    """``fresh`` is not carried (written before read) unless the code after the loop
    reads it; ``constant`` and ``uniform`` are constants; ``clone`` is carried as its K
    distinct values; ``chained`` whole."""
    _, (carried, layout) = _run(3, whole=False, after=lambda leaves: leaves[2])
    assert carried == [True, False, True, False, False]
    assert layout.shrink[0] == (True, False) and not any(layout.shrink[2])
    assert layout.fixed[3] and layout.zero[4] and not layout.fixed[2]
    _, (carried, _) = _run(3, whole=False, after=lambda leaves: leaves[1])
    assert carried == [True, True, True, False, False]


@pytest.mark.parametrize("sweeps", [0, 1, 4])
def test_carried_loop_computes_the_same(sweeps):
    """The leaves the code after the loop reads come out equal (exactly) to the loop
    that carries everything; ``after=None`` (a later loop may read anything): all."""
    whole, _ = _run(sweeps, whole=True)
    some, _ = _run(sweeps, whole=False, after=lambda leaves: (leaves[0], leaves[2]))
    for k in (0, 2, 3, 4):
        np.testing.assert_array_equal(some[k], whole[k])
    every, _ = _run(sweeps, whole=False)
    for a, b in zip(every, whole, strict=True):
        np.testing.assert_array_equal(a, b)


def test_inputs_read():
    """The inputs an output depends on, through nested calls."""
    def f(a, b, c):
        inner = jax.jit(lambda x, y: x * y)
        return inner(a, b), c + 1.0, 2.0
    closed = jax.make_jaxpr(f)(1.0, 2.0, 3.0)
    assert _inputs_read(closed.jaxpr, [True, False, False]) == [True, True, False]
    assert _inputs_read(closed.jaxpr, [False, True, True]) == [False, False, True]
    assert _inputs_read(closed.jaxpr, [False, False, True]) == [False, False, False]


@pytest.mark.slow
def test_mixture_carries_few_arrays():
    """Issue 14's 1-D mixture (K = 10, here N = 40): the loop carries 12 of its about 120
    arrays, in a few K-sized ones and none of N·K elements (the rest are written before
    they are read, constants, or clones of K values; the (N, K) ones, the gate's
    message to the cases that evidence() computes and the next sweep reads instead of
    computing it again, as NumPy's ``if not refreshed:``, and the responsibilities'
    logits, are products of the data's statistics, carried as their (3, K)
    coefficients), besides the responsibilities' probabilities, which the sweep's
    normalisation made and the next sweep's message to the weights reads (not
    normalised again), and the run equals NumPy's to 1e-10.  (The gate path,
    ``fuse_switch=False``, as the Dask backend runs it; the fused statement's loop:
    ``test_jax_fused_switch.py``.)"""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parents[3]))
    from benchmarks import mixture_reference as mix
    x = mix.data(10, 40)
    init = mix.factorflow_init(x, 10)
    model = mix.model(x, 10)
    compiled = model.compile("vmp", backend="jax", init=list(init), fuse_switch=False)
    b = compiled.run(init=init, iterations=4)
    a = model.compile("vmp", init=list(init), fuse_switch=False).run(init=init, iterations=4)
    (_, info), = compiled._traced.values()
    (carried,) = info["carried"]
    assert carried["leaves"] >= 110 and carried["carried"] == 12
    assert carried["carried elements"] <= 20 * 10
    assert carried["probabilities"] == 1
    for name in ("weights", "means", "precs", "z"):
        for p, q in zip(a[name].eta, b[name].eta, strict=True):
            np.testing.assert_allclose(q, p, rtol=1e-10, atol=1e-10)
