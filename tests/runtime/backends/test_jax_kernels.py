"""The JAX copies of the kernels against the NumPy kernels, on random inputs.

The JAX backend runs factorflow's own kernel source over ``jax.numpy``; where a kernel
has a fast path chosen by values or writes in place, the copy takes the general,
functional path (``distributions.base.traced``).  These tests run both on the same random
inputs (fast paths hit and missed) and compare the numbers; and each of the few
overrides (``jax_overrides``: the checks that raise) against its NumPy kernel's verdict,
so that a change to one that the other lacks fails here (the overrides of fast paths
chosen by values: ``test_jax_fast_paths``).
"""

from __future__ import annotations

import numpy as np
import pytest

import factorflow as ff
import factorflow.distributions as dist

jax = pytest.importorskip("jax")

from factorflow.runtime import kernels  # noqa: E402
from factorflow.runtime.backends.jax_backend import _to_copy  # noqa: E402
from factorflow.runtime.backends.jax_loop import CHECKS  # noqa: E402
from factorflow.runtime.backends.jax_namespace import namespace  # noqa: E402
from factorflow.runtime.backends.jax_overrides import OVERRIDES  # noqa: E402


def _copy(module: str):
    return namespace()[module]


def _close(a, b, tol=1e-12):
    a, b = np.asarray(a, float), np.asarray(b, float)
    assert a.shape == b.shape
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    with np.errstate(invalid="ignore"):
        diff = np.where(same, 0.0, np.abs(a - b) / (1.0 + np.abs(a)))
    assert np.max(diff, initial=0.0) <= tol, (a, b)


def _gaussians(rng, n, bad=0.0):
    """n Gaussian messages; a share ``bad`` improper (negative precision), one NaN."""
    prec = rng.gamma(2.0, 1.0, n)
    prec[rng.random(n) < bad] *= -1
    mtp = rng.normal(size=n) * prec
    return dist.Gaussian.from_natural(mtp, prec)


@pytest.mark.parametrize("seed", range(4))
def test_truncated_normal_moments_general_path(seed):
    """Tail (t > 4, the continued fraction) and body elements mixed, and all-body."""
    from factorflow.factors import compare
    rng = np.random.default_rng(seed)
    for t in (rng.normal(0, 6, 50), rng.uniform(-3, 3, 20), np.array([4.5, 30.0])):
        with jax.enable_x64(True):
            got = _copy("factorflow.factors.compare").truncated_normal_moments(t)
        for a, b in zip(compare.truncated_normal_moments(t), got, strict=True):
            _close(a, b)


@pytest.mark.parametrize("seed", range(4))
def test_is_positive_x_message_general_path(seed):
    """The EP message to x of IsPositive: certain outs (one half), mixed, uniform."""
    from factorflow.factors import compare
    rng = np.random.default_rng(seed)
    n = 30
    mean, var = rng.normal(0, 3, n), rng.gamma(1.0, 2.0, n)
    var[:3] = np.inf  # uniform incoming messages
    for lo in (np.full(n, np.inf), np.full(n, -np.inf), rng.normal(0, 2, n),
               np.where(rng.random(n) < 0.5, np.inf, rng.normal(0, 2, n))):
        out = dist.Bernoulli.from_natural(lo)
        want = compare._x_message(out, mean, var)
        with jax.enable_x64(True):
            ns = namespace()
            got = _copy("factorflow.factors.compare")._x_message(_to_copy(ns, out), mean, var)
        for a, b in zip(want.eta, got.eta, strict=True):
            _close(a, b, 1e-10)


@pytest.mark.parametrize("seed", range(3))
def test_quadrature_general_path(seed):
    """Narrow (Gauss-Hermite) and wide (Laguerre) cavities mixed in one batch."""
    from factorflow.factors import quadrature
    rng = np.random.default_rng(seed)
    m = np.concatenate([rng.normal(0, 2, 10), rng.normal(0, 5, 5)])
    v = np.concatenate([rng.gamma(2.0, 0.5, 10), rng.uniform(200, 2000, 5)])
    for step in ("LOGISTIC", "EXP_NEG_EXP"):
        want = quadrature.tilted_moments(m, v, getattr(quadrature, step))
        q = _copy("factorflow.factors.quadrature")
        with jax.enable_x64(True):
            got = q.tilted_moments(m, v, getattr(q, step))
        for a, b in zip(want, got, strict=True):
            _close(a, b, 1e-10)


def test_in_place_helpers_are_functional_when_traced():
    """``with_element``, ``place_element``, ``place_slots`` and a scatter product: the
    same messages from the copies (``.at[]``) as from NumPy's in-place writes."""
    rng = np.random.default_rng(0)
    whole = dist.Gaussian.from_natural(rng.normal(size=(3, 4)), rng.gamma(2.0, 1.0, (3, 4)))
    part = dist.Gaussian.from_natural(rng.normal(size=3), rng.gamma(2.0, 1.0, 3))
    ns = namespace()
    jk = _copy("factorflow.runtime.kernels")
    with jax.enable_x64(True):
        cases = [
            (kernels.with_element(whole, ((1, 2),), part),
             jk.with_element(_to_copy(ns, whole), ((1, 2),), _to_copy(ns, part))),
            (kernels.place_element(whole, ((0, 1),), (3, 4), (0,), (5, 4)),
             jk.place_element(_to_copy(ns, whole), ((0, 1),), (3, 4), (0,), (5, 4))),
            (kernels.place_slots(whole, (0, 2, 3, 5), (3, 6)),
             jk.place_slots(_to_copy(ns, whole), (0, 2, 3, 5), (3, 6))),
            (whole.scatter_prod(np.array([0, 2, 0]), 3),
             _to_copy(ns, whole).scatter_prod(np.array([0, 2, 0]), 3)),
            (kernels.prod_over(whole.broadcast_to((2, 3, 4)), (2, 3, 4), (0,)),
             jk.prod_over(_to_copy(ns, whole).broadcast_to((2, 3, 4)), (2, 3, 4), (0,))),
        ]
    for want, got in cases:
        for a, b in zip(want.eta, got.eta, strict=True):
            _close(a, b)


# ----- the overrides: the checks, recorded on the device --------------------------------
def _verdict(fn, *args, **kwargs) -> bool:
    """Whether the JAX override passed (its one recorded check: its witness, or where
    that fails its exact verdict, ``Frame.verdicts``)."""
    with jax.enable_x64(True), CHECKS.frame() as found:
        fn(*args, **kwargs)
        assert len(found) == 1
        return bool(found.verdicts()[0])


def _numpy_verdict(fn, *args, **kwargs) -> bool:
    try:
        fn(*args, **kwargs)
    except ff.ImproperMessageError:
        return False
    return True


def test_the_overrides_are_the_checks():
    """Only the checks that raise are overridden, with the witness they read
    (``_proper_witness``, ``_remade``); everything else runs as written: the gate's
    ``arange`` test, the normalisation, the VMP bound's terms, a mixture's data sums and
    the D-dimensional mixture's sufficient statistics choose under tracing themselves;
    each fast path is compared with its NumPy kernel in ``test_jax_fast_paths`` and
    ``test_jax_fused``, and the kernels that read what the fused normalisation of a
    mixture's responsibilities accumulated (``discrete._column_sums``,
    ``gaussian._traced_data_sums``, ``vector_gaussian._sample_stats``) choose too
    (``test_jax_blocks``, ``test_jax_fused_switch``)."""
    assert {m: set(f) for m, f in OVERRIDES.items()} == {
        "factorflow.runtime.kernels": {
            "check_proper", "_proper_witness", "_remade", "_proper", "check_proper_input",
            "skip_improper", "initial"}}


@pytest.mark.parametrize("seed", range(20))
def test_check_overrides_agree_with_numpy(seed):
    """``check_proper`` and ``check_proper_input`` on random messages (some improper,
    some NaN, some uniform), masks and iterations: the same verdict on both backends."""
    rng = np.random.default_rng(seed)
    ns = namespace()
    jk = _copy("factorflow.runtime.kernels")
    d = _gaussians(rng, 6, bad=rng.choice([0.0, 0.2]))
    eta = [np.array(e) for e in d.eta]
    if rng.random() < 0.3:
        eta[0][rng.integers(6)] = np.nan
    if rng.random() < 0.4:  # exactly uniform elements
        k = rng.integers(6)
        eta[0][k] = eta[1][k] = 0.0
    d = dist.Gaussian.from_natural(*eta)
    mask = rng.random(6) < 0.6 if rng.random() < 0.5 else None
    for iteration in (None, 0, 3):
        want = _numpy_verdict(kernels.check_proper, d, "x", iteration, where=mask)
        got = _verdict(jk.check_proper, _to_copy(ns, d), "x",
                       None if iteration is None else jax.numpy.asarray(iteration),
                       where=mask)
        assert want == got, (iteration, mask, d)
    want = _numpy_verdict(kernels.check_proper_input, d, "x", 1, mask=mask)
    assert want == _verdict(jk.check_proper_input, _to_copy(ns, d), "x", 1, mask=mask)


@pytest.mark.parametrize("seed", range(20))
def test_skip_improper_override_agrees_with_numpy(seed):
    """``skip_improper`` on random inputs (some strictly improper, some NaN, some
    uniform; a second message over fewer axes, proper everywhere or not), masks and
    iterations: NumPy raises where the override's verdict fails, and elsewhere both keep
    the old message exactly where an input is strictly improper, take the new one
    everywhere else, and count the same skipped elements (NumPy's ``SKIPPED``)."""
    import warnings

    rng = np.random.default_rng(seed)
    ns = namespace()
    jk = _copy("factorflow.runtime.kernels")
    d = _gaussians(rng, 6, bad=rng.choice([0.0, 0.3]))
    eta = [np.array(e) for e in d.eta]
    if rng.random() < 0.25:
        eta[0][rng.integers(6)] = np.nan
    if rng.random() < 0.25:  # an exactly uniform element
        k = rng.integers(6)
        eta[0][k] = eta[1][k] = 0.0
    d = dist.Gaussian.from_natural(*(e[:, None] for e in eta))
    # over (6, 3): a message per element of the plate (above), and one per column
    rows = _gaussians(rng, 3, bad=rng.choice([0.0, 0.5]))
    rows = dist.Gaussian.from_natural(*(e[None, :] for e in rows.eta))
    old, new = (dist.Gaussian.from_natural(*(e.reshape(6, 3) for e in g.eta))
                for g in (_gaussians(rng, 18), _gaussians(rng, 18)))
    mask = rng.random(6) < 0.6 if rng.random() < 0.5 else None
    for iteration in (None, 0, 3):
        token = kernels.SKIPPED.set({})
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ff.ImproperMessageWarning)
                want = kernels.skip_improper(old, lambda: new, (d, 2.0, rows), "x",
                                             iteration, mask)
            counted = kernels.SKIPPED.get().get("x", (None, 0))[1]
        except ff.ImproperMessageError:
            want = None
        finally:
            kernels.SKIPPED.reset(token)
        with jax.enable_x64(True), CHECKS.frame() as found:
            jnew = _to_copy(ns, new)
            got = jk.skip_improper(
                _to_copy(ns, old), lambda jnew=jnew: jnew,
                (_to_copy(ns, d), 2.0, _to_copy(ns, rows)), "x",
                None if iteration is None else jax.numpy.asarray(iteration), mask)
        assert len(found) == 2
        assert (want is not None) == all(bool(ok) for _, ok in found), (iteration, mask, d)
        if want is not None:
            for a, b in zip(want.eta, got.eta, strict=True):
                _close(np.broadcast_to(a, np.shape(b)), b, 0.0)
            recorded = int(found.skips[0][1]) if found.skips else 0
            assert recorded == counted, (iteration, mask, d, rows)


def test_initial_override_agrees_with_numpy():
    """``initial``: the same broadcast message, the same ModelError for a wrong family or
    shape (the JAX backend checks properness on the host, before the run)."""
    ns = namespace()
    jk = _copy("factorflow.runtime.kernels")
    jfam = _copy("factorflow.distributions")
    start = dist.Gaussian(np.array([0.5, 1.5]), 2.0)
    want = kernels.initial({"m": start}, "m", dist.Gaussian, (3, 2))
    with jax.enable_x64(True):
        got = jk.initial({"m": _to_copy(ns, start)}, "m", jfam.Gaussian, (3, 2))
    for a, b in zip(want.eta, got.eta, strict=True):
        _close(a, b, 0.0)
    for family, shape, match in ((dist.Gamma, (3, 2), "must be a Gamma"),
                                 (dist.Gaussian, (3, 4), "batch shape")):
        with pytest.raises(ff.ModelError, match=match):
            kernels.initial({"m": start}, "m", family, shape)
        with pytest.raises(ff.ModelError, match=match):
            jk.initial({"m": _to_copy(ns, start)}, "m", getattr(jfam, family.__name__),
                       shape)


def test_quad_form_over_repeated_matrices():
    """xᵀ M x where K matrices are seen by N vectors (the D-dim mixture's bound): the JAX
    copy takes the same K products of N × D blocks, equal to NumPy's."""
    from factorflow.distributions import multivariate
    rng = np.random.default_rng(0)
    a = rng.normal(size=(4, 3, 3))
    for matrix, x in ((np.broadcast_to(a, (5, 4, 3, 3)), rng.normal(size=(5, 4, 3))),
                      (a[:, None], rng.normal(size=(4, 6, 3))), (a[0], rng.normal(size=(2, 3)))):
        with jax.enable_x64(True):
            got = _copy("factorflow.distributions.multivariate").quad_form(matrix, x)
        _close(multivariate.quad_form(matrix, x), got)


def _block_tridiagonal_system(rng, batch, t_len, d):
    """A random SPD block-tridiagonal Λ = B Bᵀ + I (B block lower bidiagonal), as its
    diagonal and upper blocks, a right-hand side, and the dense (T·D)² matrices."""
    n = t_len * d
    band = np.zeros(batch + (n, n))
    for t in range(t_len):
        band[..., t * d:(t + 1) * d, t * d:(t + 1) * d] = rng.normal(size=batch + (d, d))
        if t:
            band[..., t * d:(t + 1) * d, (t - 1) * d:t * d] = rng.normal(size=batch + (d, d))
    dense = band @ np.swapaxes(band, -1, -2) + np.eye(n)
    blocks = dense.reshape(batch + (t_len, d, t_len, d))
    diag = np.stack([blocks[..., t, :, t, :] for t in range(t_len)], axis=-3)
    upper = np.stack([blocks[..., t, :, t + 1, :] for t in range(t_len - 1)], axis=-3)
    return diag, upper, rng.normal(size=batch + (t_len, d)), dense


@pytest.mark.parametrize("d", [4, 7])
def test_chain_solver_traced_path(d):
    """``vector_chains.block_tridiagonal`` jitted (each level's blocks inverted by one
    batched Cholesky factorisation and triangular solve) against NumPy's path (Gauss–
    Jordan written entry by entry up to D = 6, LAPACK above) and against the dense system
    (Λ⁻¹, log |Λ|): means, covariances, lag-one covariances and log-determinant to 1e-10
    over a batch of three chains of T = 10 (the reduction's levels 10, 5, 2, 1: even, odd
    and single lengths; one XLA compile per D).  A block that is not positive definite
    gives NaN (NumPy's elimination up to D = 6 too; LAPACK's path above gives a number)."""
    from factorflow.factors import vector_chains
    solve = jax.jit(_copy("factorflow.factors.vector_chains").block_tridiagonal)
    rng = np.random.default_rng(d)
    t_len = 10
    diag, upper, rhs, dense = _block_tridiagonal_system(rng, (3,), t_len, d)
    want = vector_chains.block_tridiagonal(diag, upper, rhs)
    with jax.enable_x64(True):
        got = solve(diag, upper, rhs)
    for a, b in zip(want, got, strict=True):
        _close(a, b, 1e-10)
    cov = np.linalg.inv(dense).reshape((3, t_len, d, t_len, d))
    mean = np.linalg.solve(dense, rhs.reshape(3, -1, 1))
    _close(want.mean, mean.reshape(rhs.shape), 1e-10)
    _close(want.cov, np.stack([cov[:, t, :, t] for t in range(t_len)], axis=1), 1e-10)
    _close(want.cross, np.stack([cov[:, t, :, t + 1] for t in range(t_len - 1)], axis=1),
           1e-10)
    _close(want.log_det, np.linalg.slogdet(dense)[1], 1e-10)
    diag[1, 2] = -np.eye(d)  # not positive definite: NaN, not a number that looks right
    with jax.enable_x64(True):
        got_log_det = np.asarray(solve(diag, upper, rhs).log_det)  # (the same program)
    with np.errstate(invalid="ignore", divide="ignore"):
        want = vector_chains.block_tridiagonal(diag, upper, rhs)
    assert np.isnan(got_log_det[1]) and np.all(np.isfinite(got_log_det[[0, 2]]))
    assert np.isnan(want.log_det[1]) or d > 6
    _close(want.log_det[[0, 2]], got_log_det[[0, 2]], 1e-10)
