"""The JAX program takes the NumPy program's shortcuts (issue 14): the sweep after
``evidence()`` skips what it computed (NumPy's ``if not refreshed:``), and the kernels'
fast paths that NumPy chooses by values fire under tracing too (``distributions.base``:
a Switch's ``arange(K)`` index, ``is_arange``, and a normalised array normalised again,
with its probabilities made once, ``log_normalize``; ``factors.vector_gaussian``:
the D-dimensional mixture's sufficient statistics).  Checked on the jaxpr of the run's loop (what it no
longer contains) and against NumPy (the same posteriors and bounds to 1e-10).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from jax._src.interpreters import partial_eval as pe  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[3]))
from benchmarks import mixture_reference as mix  # noqa: E402
from benchmarks import vmixture_reference as vref  # noqa: E402
from factorflow.runtime.backends.jax_backend import _register, _to_copy  # noqa: E402
from factorflow.runtime.backends.jax_loop import Sweeps  # noqa: E402
from factorflow.runtime.backends.jax_namespace import namespace  # noqa: E402

NAMES = ("weights", "means", "precs", "z")


def _same(a, b, tol: float = 1e-10) -> None:
    """Posteriors and bounds of two runs equal to ``tol`` (relative to 1 + |value|)."""
    for name in NAMES:
        for p, q in zip(a[name].eta, b[name].eta, strict=True):
            assert np.max(np.abs(p - q) / (1 + np.abs(p))) <= tol, name
    assert abs(a.log_evidence - b.log_evidence) <= tol * (1 + abs(a.log_evidence))
    assert len(a.trace) == len(b.trace)
    np.testing.assert_allclose(b.trace, a.trace, rtol=tol, atol=tol)


class _Traced(Exception):
    """Raised by ``_loop_body``'s stand-in for the jitted run once it has its arguments."""


def _loop_body(compiled, init: dict, **options):
    """The jaxpr of the last ``lax.while_loop`` body of the run ``compiled.run(init=init,
    **options)``: the run's own function (``compiled._trace``'s), traced with the
    arguments the run passes it (the run stops there: nothing is compiled by XLA)."""
    seen = {}
    real_trace = compiled._trace

    def capture(*args):
        fn, info = real_trace(*args)

        def spy(*args):  # (the data, the start, the sweeps' limit, the tolerance)
            seen["fn"], seen["args"] = fn, args
            raise _Traced
        return spy, info
    compiled._traced.clear()
    compiled._trace = capture
    try:
        with pytest.raises(_Traced):
            compiled.run(init=init, **options)
    finally:
        del compiled._trace
        compiled._traced.clear()
    with jax.enable_x64(True):
        closed = jax.make_jaxpr(seen["fn"])(*seen["args"])
    bodies = [e.params["body_jaxpr"].jaxpr for e in _equations(closed.jaxpr, loops=False)
              if e.primitive.name == "while"]
    # what the loop keeps (a message the carry drops is not computed: the compiler
    # removes it, as this does)
    return pe.dce_jaxpr(bodies[-1], True)[0]


def _equations(jaxpr, loops: bool = True):
    """Every equation of ``jaxpr``, into the calls nested in it (and into loops'
    bodies where ``loops``)."""
    for eqn in jaxpr.eqns:
        yield eqn
        if eqn.primitive.name == "while" and not loops:
            continue
        for value in eqn.params.values():
            for sub in value if isinstance(value, tuple | list) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _equations(inner, loops)


def _on_grid(jaxpr, n: int) -> list[str]:
    """The primitives of the equations that make an array with ``n`` along an axis."""
    return [e.primitive.name for e in _equations(jaxpr)
            if any(n in getattr(v.aval, "shape", ()) for v in e.outvars)]


def _mixture_1d(n: int):
    x = mix.data(10, n)
    model, init = mix.model(x, 10), mix.factorflow_init(x, 10)
    return model, init


@pytest.mark.slow
def test_sweep_after_evidence_skips_what_it_computed(monkeypatch):
    """Issue 14's 1-D mixture: the loop's sweep follows evidence() and skips the
    statements NumPy's ``if not refreshed:`` skips (the gate's messages to the cases,
    the (N, K) Gaussian evidence), so the loop body makes fewer (N, K) arrays than with
    every statement run (as without the bound, trace=False, where no sweep follows
    evidence()); both equal NumPy's, and so do a run of 1 sweep (no loop left after the
    first) and one stopped by the convergence test.  (The gate path,
    ``fuse_switch=False``: the fused statement has no gate messages to skip.)"""
    n = 37
    model, init = _mixture_1d(n)
    options = {"init": list(init), "fuse_switch": False}
    numpy_model = model.compile("vmp", **options)
    runs = ({"iterations": 5, "tolerance": None}, {"iterations": 1, "tolerance": None},
            {"iterations": 200, "tolerance": 1e-6})
    counts = {}
    for skip in (True, False):
        monkeypatch.setattr(Sweeps, "skip_refreshed", skip)
        compiled = model.compile("vmp", backend="jax", **options)
        assert "if not refreshed:" in compiled.source
        for run in runs if skip else runs[:1]:
            _same(numpy_model.run(init=init, **run), compiled.run(init=init, **run))
        counts[skip] = len(_on_grid(_loop_body(compiled, init, iterations=3,
                                               tolerance=None), n))
    assert counts[True] < counts[False], counts  # (311 against 328 when written)


@pytest.mark.slow
def test_switch_clones_take_no_gather():
    """The 1-D mixture's loop: a Switch's clones read the cases' probabilities through
    ``arange(K)`` without a gather (NumPy's ``_one_probs`` fast path), and the cases,
    normalised once, are not normalised again (one ``reduce_max`` per normalisation),
    as NumPy remembers them."""
    n = 29
    model, init = _mixture_1d(n)
    compiled = model.compile("vmp", backend="jax", init=list(init))
    body = _on_grid(_loop_body(compiled, init, iterations=3, tolerance=None), n)
    assert "gather" not in body
    # (6 when written, 8 with every normalisation of a normalised array made again; the
    # compiler merges the repeats of one array's down to 2)
    assert body.count("reduce_max") <= 6, body.count("reduce_max")
    numpy_model = model.compile("vmp", init=list(init))
    _same(numpy_model.run(init=init, iterations=6, tolerance=None),
          compiled.run(init=init, iterations=6, tolerance=None))


@pytest.mark.slow
@pytest.mark.parametrize("dim", [3])
def test_vector_mixture_sufficient_statistics_under_tracing(dim):
    """The D-dimensional mixture's loop computes no (N, K, D) or (N, K, D, D) array: its
    evidence and its messages to the components are products of the data's sufficient
    statistics [1, x, x xᵀ] with (K,)-sized coefficients and the responsibilities, as in
    NumPy (``vector_gaussian._switch_evidence``, ``_switch_sums``); the same run as
    NumPy's to 1e-10, the fused Switch (JAX's default too: ``FUSED_BACKENDS``) and the
    gate path's (``fuse_switch=False``) alike.  (``test_fused_vector_switch.py``'s
    NumPy checks hold the fused statement to the gate path; this is their JAX twin.)"""
    k, n = 3, 41
    x, start = vref.data(k, n, dim)
    model, init = vref.model(x, k), vref.factorflow_init(start)
    compiled = model.compile("vmp", backend="jax", init=["means"])
    assert "SwitchVectorGaussian" in compiled.source  # (the fused statement)
    body = _loop_body(compiled, init, iterations=3, tolerance=None)
    # (broadcast views of K components, and the checks' NaN tests on them, which the
    # compiler fuses into their reductions, aside)
    big = [e for e in _equations(body) for v in e.outvars
           if getattr(v.aval, "shape", ())[:2] == (n, k) and len(v.aval.shape) > 2
           and e.primitive.name not in ("broadcast_in_dim", "ne", "reshape")]
    assert not big, sorted({e.primitive.name for e in big})
    got = compiled.run(init=init, iterations=5, tolerance=None)
    for fused in (True, False):
        numpy_model = model.compile("vmp", init=["means"], fuse_switch=fused)
        assert ("SwitchVectorGaussian" in numpy_model.source) == fused
        _same(numpy_model.run(init=init, iterations=5, tolerance=None), got)


def test_overridden_fast_paths_equal_numpy():
    """Each value-chosen fast path under tracing against the NumPy kernel on random
    inputs: ``_one_probs`` with ``arange(K)`` (recorded while traced: ``base.is_arange``)
    and another index, ``log_normalize`` of a normalised array (and the probabilities
    made with it: ``Discrete.probs`` reads them, no second exponential), and the
    overrides ``_switch_sums`` and ``_switch_evidence`` on a Switch's (N, 1, D) data
    column (1e-12)."""
    from factorflow.distributions import Bernoulli, VectorGaussian, Wishart
    from factorflow.distributions import base as np_base
    from factorflow.factors import gate, vector_gaussian
    ns = namespace()
    xnp = ns.numpy
    rng = np.random.default_rng(3)
    n, k, dim = 23, 4, 3
    logits = rng.normal(size=(n, k))
    x = rng.normal(size=(n, 1, dim))
    weights = rng.dirichlet(np.ones(k), size=n)
    means = rng.normal(size=(k, dim))
    rate = np.stack([np.eye(dim) * (1 + i) for i in range(k)])
    mean = VectorGaussian(means, np.broadcast_to(np.eye(dim), (k, dim, dim)))
    prec = Wishart(np.full(k, dim + 2.0), rate)
    with jax.enable_x64(True):
        _register(ns)
        jgate = ns["factorflow.factors.gate"]
        jvec = ns["factorflow.factors.vector_gaussian"]
        jbase = ns["factorflow.distributions.base"]
        jdist = ns["factorflow.distributions"]
        found = {}

        def traced(lg, w, xs, jmean, jprec):
            cases = jdist.Bernoulli.from_natural(lg)
            normal = jbase.log_normalize(lg)
            found["same"] = jbase.log_normalize(normal) is normal  # known while traced
            found["probs"] = (jdist.Discrete.from_natural(lg).probs
                              is jbase.traced_probs(lg) is not None)
            return (jgate._one_probs(cases, xnp.arange(k)),
                    jgate._one_probs(cases, xnp.asarray([1, 0, 3, 2])), normal,
                    jvec._switch_sums(xs, w, ((n, k), (0,))),
                    jvec._switch_evidence(xs, jmean.broadcast_to((n, k)),
                                          jprec.broadcast_to((n, k))))

        probs, other, normal, sums, evidence = jax.jit(traced)(
            logits, weights, x, _to_copy(ns, mean), _to_copy(ns, prec))
    assert found["same"] and found["probs"]
    cases = Bernoulli.from_natural(logits)
    np.testing.assert_allclose(probs, gate._one_probs(cases, np.arange(k)), rtol=1e-12)
    np.testing.assert_allclose(other, gate._one_probs(cases, np.array([1, 0, 3, 2])),
                               rtol=1e-12)
    np.testing.assert_allclose(normal, np_base.log_normalize(logits), rtol=1e-12,
                               atol=1e-14)
    expected = vector_gaussian._switch_sums(x, weights, ((n, k), (0,)))
    assert expected is not None
    for a, b in zip(expected, sums, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)
    want = vector_gaussian._switch_evidence(x, mean.broadcast_to((n, k)),
                                            prec.broadcast_to((n, k)))
    assert want is not None and evidence is not None
    np.testing.assert_allclose(evidence, want, rtol=1e-12, atol=1e-12)



def test_traced_memo_is_recalled_in_its_own_trace_only():
    """What ``base.memo_of`` remembers under tracing (a normalisation's probabilities) is
    read again in the trace that made it, never inside another (a loop's body closing
    over the array: a value of the outer trace there would be a leaked tracer), where it
    is computed afresh; the results equal NumPy's (1e-12)."""
    from factorflow.distributions import base as np_base
    ns = namespace()
    jbase = ns["factorflow.distributions.base"]
    logits = np.random.default_rng(5).normal(size=(7, 4))
    seen = {}
    with jax.enable_x64(True):
        def run(x):
            logs = jbase.log_normalize(x)
            probs = jbase.traced_probs(x)
            seen["outer"] = probs is not None

            def body(i, acc):
                seen["inner"] = jbase.traced_probs(x)
                return acc + jbase.memo_of("exp", logs, jbase.exp_flushed)
            inner = jax.lax.fori_loop(0, 2, body, np.zeros((7, 4)))
            seen["again"] = jbase.traced_probs(x) is probs
            return probs, inner
        probs, inner = jax.jit(run)(logits)
    assert seen["outer"] and seen["inner"] is None and seen["again"]
    want = np.exp(np_base.log_normalize(logits))
    np.testing.assert_allclose(probs, want, rtol=1e-12)
    np.testing.assert_allclose(inner, 2 * want, rtol=1e-12)
