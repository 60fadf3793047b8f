"""The JAX sweep's passes over (N, K) arrays (issue 14): the VMP bound's terms over a
discrete posterior summed as one fused reduction (``jax_bound``), the properness checks
read from what is already reduced with one ``lax.cond`` for the exact verdict
(``jax_overrides.check_proper``, ``jax_loop.Frame.verdicts``), and no copy of the
loop's carry.  Checked against the exact sums (0 · ±inf = 0, as the kernels), on the
program XLA compiled (``benchmarks/bench_backends.passes``), and on the named errors:
an improper row of the responsibilities is still found and named with its iteration.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402

import factorflow as ff  # noqa: E402
from factorflow.runtime.backends import jax_bound  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[3]))
from benchmarks import bench_backends  # noqa: E402
from benchmarks import mixture_reference as mix  # noqa: E402


def _reference(q: np.ndarray, vs: list[np.ndarray], signs: list[float]) -> float:
    """Σ_i sign_i Σ q v_i with 0 · v = 0, in NumPy (``times_finite``'s rule)."""
    out = 0.0
    for v, sign in zip(vs, signs, strict=True):
        with np.errstate(invalid="ignore"):
            out += sign * float(np.sum(np.where(q == 0, 0.0, q * np.broadcast_to(v, q.shape))))
    return out


def _bound(q: np.ndarray, vs: list[np.ndarray], signs: list[float]) -> float:
    """The same through ``jax_bound``: each a ``row_term`` summed by ``total`` into a
    ``Bound`` (the evidence's way), traced and compiled."""
    from factorflow.runtime.backends.jax_namespace import namespace
    namespace()  # (the kernels' copies, loaded before tracing as a run loads them)
    def run(q, *vs):
        acc = 0.0
        for v, sign in zip(vs, signs, strict=True):
            acc += jax_bound.total(jax_bound.row_term(q, v, sign))
        return jax_bound.value(acc)
    with jax.enable_x64(True):
        return float(jax.jit(run)(jnp.asarray(q), *(jnp.asarray(v) for v in vs)))


@pytest.mark.parametrize("case", ["finite", "zeros against -inf", "NaN", "+inf and -inf"])
def test_bound_is_the_exact_sum(case):
    """One fused sum where it is finite, each term the kernels' way where it is not: the
    same number as NumPy's where-sums (to 1e-13 relative: the order of additions)."""
    rng = np.random.default_rng(3)
    n, k = 257, 5
    q = rng.dirichlet(np.ones(k), n)
    ell, elog = rng.normal(size=(n, k)), np.log(rng.dirichlet(np.ones(k)))
    logq = np.log(q)
    if case == "zeros against -inf":  # 0 · (−inf): 0, not NaN
        q[3, 1] = q[10, 4] = 0.0
        ell[3, 1], logq[10, 4] = -np.inf, -np.inf
        elog[2] = -np.inf
        q[:, 2] = 0.0
    elif case == "NaN":
        ell[7, 2] = np.nan
    elif case == "+inf and -inf":
        ell[5, 0] = np.inf
    vs, signs = [ell, elog, logq], [1.0, 1.0, -1.0]
    want, got = _reference(q, vs, signs), _bound(q, vs, signs)
    if np.isnan(want):
        assert np.isnan(got)
    elif np.isinf(want):
        assert got == want
    else:
        assert abs(got - want) <= 1e-13 * (1 + abs(want))
    # a single term, and two over different q, go the same way
    assert abs(_bound(q, [ell], [1.0]) - _reference(q, [ell], [1.0])) <= 1e-13 * (
        1 + abs(_reference(q, [ell], [1.0]))) or case in ("NaN", "+inf and -inf")


@pytest.mark.slow
def test_mixture_loop_passes():
    """The 1-D mixture's loop body in the program XLA compiled: no copy of the carry, no
    boolean (N, K) pass (the checks read the row sums and the clones' K elements), the
    bound one reduction: 10 passes over N-sized arrays (17 before), 4 of them writing an
    (N, K) array (the logits, their exponentials, the responsibilities, the data term)."""
    text = bench_backends.passes("mixture1d", 1009, fuse_switch=True)  # (the default)
    count = int(text.split(": ")[1].split(" passes")[0])
    assert "copy" not in text
    assert count <= 10, text


def _poisoned(backend: str, rows: slice, value: float):
    """The 1-D mixture compiled for ``backend`` with its data term ℓ (the cases'
    message) set to ``value`` on the data ``rows``: an improper row of the
    responsibilities from the start."""
    x = mix.data(3, 60)
    compiled = mix.model(x, 3).compile("vmp", init=["means"], backend=backend,
                                       fuse_switch=False)  # (the gate path's evidence)
    names = (compiled._program if backend == "jax" else compiled._infer).__globals__
    real = names["Gaussian_average_log_factor"]

    def poisoned(*args, **kwargs):
        out = real(*args, **kwargs)
        if backend == "jax":
            return out.at[rows].set(value)
        out = np.array(out)
        out[rows] = value
        return out
    names["Gaussian_average_log_factor"] = poisoned
    return compiled, mix.factorflow_init(x, 3)


@pytest.mark.slow
@pytest.mark.parametrize("value", [np.nan, -np.inf])
def test_improper_responsibilities_are_named(value):
    """A NaN in a datum's log-likelihoods, or no finite one: the witnesses fail, the
    exact verdicts run, and the host names the posterior and the iteration NumPy
    names."""
    messages = []
    for backend in ("numpy", "jax"):
        compiled, init = _poisoned(backend, slice(7, 8), value)
        with pytest.raises(ff.ImproperMessageError) as error:
            compiled.run(init=init, iterations=5)
        messages.append(str(error.value).split(" is improper")[0])
    assert messages[0] == messages[1]
    assert "at iteration 1" in messages[1]


@pytest.mark.parametrize("seed", range(12))
def test_witnessed_checks_agree_with_numpy(seed):
    """``check_proper`` on a Discrete posterior (its witness: the normalisation's row
    sums), on a Bernoulli of normalised logs (a gate's cases: the same sums) and on a
    broadcast clone (its distinct elements), with rows that have a NaN, no finite
    entry, a +inf, or −inf entries beside finite ones, masks and iterations: the verdict
    NumPy's ``check_proper`` gives."""
    from factorflow.runtime import kernels
    from factorflow.runtime.backends.jax_backend import _to_copy
    from factorflow.runtime.backends.jax_namespace import namespace
    from tests.runtime.backends.test_jax_kernels import _numpy_verdict, _verdict
    rng = np.random.default_rng(seed)
    ns = namespace()
    jk = ns["factorflow.runtime.kernels"]
    jbase = ns["factorflow.distributions.base"]
    x = rng.normal(size=(6, 4))
    for bad in rng.choice(5, size=rng.integers(0, 3), replace=False):
        row = rng.integers(6)
        if bad == 0:
            x[row, rng.integers(4)] = np.nan
        elif bad == 1:
            x[row] = -np.inf
        elif bad == 2:
            x[row, rng.integers(4)] = np.inf
        elif bad == 3:
            x[row, rng.choice(4, 2, replace=False)] = -np.inf
    mask = rng.random(6) < 0.6 if rng.random() < 0.5 else None
    discrete = ff.distributions.Discrete.from_natural(x)
    from factorflow.distributions import base
    cases = ff.distributions.Bernoulli.from_natural(base.log_normalize(x))
    clone = ff.distributions.Gaussian.from_natural(
        rng.normal(size=4), rng.choice([-1.0, 1.0], 4, p=[0.2, 0.8])).broadcast_to((6, 4))
    for iteration in (None, 0, 3):
        it = None if iteration is None else jax.numpy.asarray(iteration)
        want = _numpy_verdict(kernels.check_proper, discrete, "z", iteration, where=mask)
        assert want == _verdict(jk.check_proper, _to_copy(ns, discrete), "z", it,
                                where=mask)
        want = _numpy_verdict(kernels.check_proper, clone, "m", iteration, where=mask)
        assert want == _verdict(jk.check_proper, _to_copy(ns, clone), "m", it, where=mask)

        def normalised_cases(it=it):  # the cases as the sweep makes them: normalised logs
            with jax.enable_x64(True):
                made = jbase.log_normalize(jax.numpy.asarray(x))
                jk.check_proper(ns["factorflow.distributions"].Bernoulli.from_natural(made),
                                "cases", it, where=mask)
        with jax.enable_x64(True), jk.CHECKS.frame() as found:
            normalised_cases()
            got = bool(found.verdicts()[0])
        want = _numpy_verdict(kernels.check_proper, cases, "cases", iteration, where=mask)
        assert want == got


@pytest.mark.parametrize("k", [3, 10])
def test_blocked_normalisation_is_numpys(k, monkeypatch):
    """A large (N, K) array under tracing is normalised block by block
    (``base._normalize_traced_blocked``, the last block overlapping the one before):
    the normalised logs and probabilities NumPy's ``log_normalize`` makes (to 1e-15;
    exactly where they are 0, −inf or NaN: rows with a NaN, no finite entry, a +inf,
    −inf entries, entries flushed below e^−700), and the row sums' logarithms, the
    checks' witness, finite only in proper rows and in every row of finite entries."""
    from factorflow.distributions import base
    from factorflow.runtime.backends.jax_namespace import namespace
    jbase = namespace()["factorflow.distributions.base"]
    monkeypatch.setattr(jbase, "_TRACED_BLOCKS_FROM_K", 1)  # (K = 3 goes by rows)
    rng = np.random.default_rng(k)
    step = base._BLOCK_ELEMENTS // k
    n = 2 * step + 123  # (three blocks, the last overlapping)
    x = rng.normal(scale=30.0, size=(n, k))
    x[5, 1] = np.nan
    x[step + 7] = -np.inf
    x[n - 2, 0] = np.inf
    x[n - 1, : k - 1] = -np.inf
    x[step - 1, 0] = x[step - 1, 1] - 800.0  # (flushed to 0)
    want_logs = base.log_normalize(x)
    want_p = base.recall("exp", want_logs)

    def run(a):
        logs = jbase.log_normalize(a)
        return (logs, jbase._recall_traced("exp", logs),
                jbase._recall_traced("row_log_sums", logs))
    with jax.enable_x64(True):
        logs, p, sums = (np.asarray(v) for v in jax.jit(run)(jnp.asarray(x)))
    for got, want in ((logs, want_logs), (p, want_p)):
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        with np.errstate(invalid="ignore"):
            close = np.abs(got - want) <= 1e-15 * (1 + np.abs(want))
        assert np.all(same | (np.isfinite(want) & close))
    # the witness: finite only in proper rows (a NaN, no finite entry), and in every
    # row of finite entries (a +inf says nothing: the exact verdict decides there)
    finite = np.isfinite(sums[:, 0])
    proper = np.any(np.isfinite(x), axis=-1) & ~np.any(np.isnan(x), axis=-1)
    assert np.all(proper[finite])
    assert np.all(finite[~np.any(~np.isfinite(x), axis=-1)])
    assert not finite[5] and not finite[step + 7]
