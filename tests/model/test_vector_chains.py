"""Linear-Gaussian state-space chains of vectors over a plate (``x[t] ~ VectorGaussian(
A @ x[t - 1] + b, Q)``): smoothed marginals and log evidence against a Kalman filter and
RTS smoother written here, D = 1 against the scalar chain, the block-tridiagonal solver
against dense linear algebra, and the errors of the API."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import factorflow as ff
from factorflow.factors.vector_chains import block_tridiagonal, spd_inverse
from tests.conftest import assert_close


# ----- references, written independently of factorflow ---------------------------------
def kalman_rts(y, a, b, q, c, r, m0, p0):
    """Smoothed means (T, D), covariances (T, D, D) and log p(y) for x₀ ~ N(m0, p0⁻¹),
    x_t ~ N(a x_{t−1} + b, q⁻¹), y_t ~ N(c x_t, r⁻¹) (q, r, p0 precisions): a Kalman
    filter in covariance form, then the Rauch–Tung–Striebel smoother."""
    t_len, d = len(y), len(m0)
    mf, vf = np.zeros((t_len, d)), np.zeros((t_len, d, d))
    mp, vp = np.zeros((t_len, d)), np.zeros((t_len, d, d))
    m, v, ll = m0, np.linalg.inv(p0), 0.0
    noise, obs_noise = np.linalg.inv(q), np.linalg.inv(r)
    for t in range(t_len):
        mp[t], vp[t] = m, v
        s = c @ v @ c.T + obs_noise
        e = y[t] - c @ m
        ll += -0.5 * (len(e) * np.log(2 * np.pi) + np.linalg.slogdet(s)[1]
                      + e @ np.linalg.solve(s, e))
        gain = v @ c.T @ np.linalg.inv(s)
        mf[t], vf[t] = m + gain @ e, v - gain @ s @ gain.T
        m, v = a @ mf[t] + b, a @ vf[t] @ a.T + noise
    ms, vs = mf.copy(), vf.copy()
    for t in range(t_len - 2, -1, -1):
        j = vf[t] @ a.T @ np.linalg.inv(vp[t + 1])
        ms[t] = mf[t] + j @ (ms[t + 1] - mp[t + 1])
        vs[t] = vf[t] + j @ (vs[t + 1] - vp[t + 1]) @ j.T
    return ms, vs, ll


def _spd(rng, d, floor=0.5):
    m = rng.normal(size=(d, d))
    return m @ m.T + floor * np.eye(d)


@st.composite
def vector_ssm_cases(draw):
    d = draw(st.integers(1, 3))
    t_len = draw(st.integers(1, 8))
    n_seq = draw(st.integers(1, 2))
    rows = draw(st.integers(1, d))  # observations of C x, C of shape (rows, d)
    identity = draw(st.booleans())
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    a = rng.normal(size=(d, d))
    a *= rng.uniform(0.3, 0.97) / max(np.max(np.abs(np.linalg.eigvals(a))), 1e-3)  # stable
    c = np.eye(d) if identity else rng.normal(size=(rows, d))
    return dict(y=rng.normal(0, 2, (n_seq, t_len, c.shape[0])), a=a, b=rng.normal(size=d),
                q=_spd(rng, d), c=c, r=_spd(rng, c.shape[0]), m0=rng.normal(0, 2, d),
                p0=_spd(rng, d, 0.2), identity=identity)


def vector_state_space(y, a, b, q, c, r, m0, p0, identity=False) -> ff.Model:
    with ff.Model("vssm") as model:
        s = ff.Range("s", y.shape[0])
        t = ff.Range("t", y.shape[1])
        with ff.Plate(s), ff.Plate(t):
            with ff.If(t == 0):
                x = ff.VectorGaussian("x", m0, precision=p0)
            with ff.If(t > 0):
                x = ff.VectorGaussian("x", a @ x[t - 1] + b, precision=q)
            ff.VectorGaussian("y", x if identity else ff.matvec(c, x), precision=r,
                             observed=y)
    return model


@settings(max_examples=25, deadline=None, derandomize=True)
@given(vector_ssm_cases())
def test_vector_state_space_equals_rts_smoother(case):
    params = {k: v for k, v in case.items() if k not in ("y", "identity")}
    refs = [kalman_rts(row, **params) for row in case["y"]]
    model = vector_state_space(**case)
    for algorithm in ("ep", "vmp"):
        result = model.infer(algorithm, progress=False)
        assert_close(result["x"].mean, np.stack([m for m, _, _ in refs]), 1e-8, 1e-8)
        assert_close(result["x"].covariance, np.stack([v for _, v, _ in refs]), 1e-8, 1e-8)
        assert_close(result.log_evidence, sum(ll for _, _, ll in refs), 1e-8, 1e-8)


def test_one_dimensional_vector_chain_equals_the_scalar_chain():
    rng = np.random.default_rng(7)
    y = rng.normal(0, 2, (2, 9))
    a, b, q, r, m0, p0 = 0.8, -0.3, 1.7, 0.6, 0.4, 0.25
    with ff.Model() as scalar:
        s, t = ff.Range("s", 2), ff.Range("t", 9)
        with ff.Plate(s), ff.Plate(t):
            with ff.If(t == 0):
                x = ff.Gaussian("x", m0, precision=p0)
            with ff.If(t > 0):
                x = ff.Gaussian("x", a * x[t - 1] + b, precision=q)
            ff.Gaussian("y", x, precision=r, observed=y)
    vector = vector_state_space(y[..., None], np.array([[a]]), np.array([b]),
                                np.array([[q]]), np.eye(1), np.array([[r]]),
                                np.array([m0]), np.array([[p0]]), identity=True)
    for algorithm in ("ep", "vmp"):
        one, other = scalar.infer(algorithm, progress=False), vector.infer(
            algorithm, progress=False)
        assert_close(other["x"].mean[..., 0], one["x"].mean, 1e-10, 1e-10)
        assert_close(other["x"].covariance[..., 0, 0], one["x"].variance, 1e-10, 1e-10)
        assert_close(other.log_evidence, one.log_evidence, 1e-10, 1e-10)


def test_affine_step_forms_are_one_chain():
    """b + A @ x[t−1], A2 @ (A1 @ x[t−1]) through another dimension, (2A @ x[t−1] − b)/2,
    −(−A @ x[t−1]) − (−b) and ff.matvec(A, x[t−1]) + b are all A x[t−1] + b."""
    rng = np.random.default_rng(2)
    a, b = np.array([[0.9, 0.2], [-0.1, 0.7]]), np.array([0.3, -0.4])
    a1 = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    a2 = np.linalg.pinv(a1) @ np.vstack([a, [0.0, 0.0]])  # a2 @ a1 == a
    a2 = a @ np.linalg.pinv(a1)
    y = rng.normal(size=(1, 5, 2))
    params = dict(a=a, b=b, q=np.eye(2) * 1.5, c=np.eye(2), r=np.eye(2) * 2.0,
                  m0=np.zeros(2), p0=np.eye(2))
    ms, vs, _ = kalman_rts(y[0], **params)
    steps = [lambda p: b + a @ p, lambda p: a2 @ (a1 @ p) + b,
             lambda p: (2 * a @ p - b) / 2 + 1.5 * b, lambda p: -(-a @ p) - (-b),
             lambda p: b - (-a) @ p, lambda p: ff.matvec(a, p) + b]
    for step in steps:
        with ff.Model() as model:
            t = ff.Range("t", 5)
            with ff.Plate(t):
                with ff.If(t == 0):
                    x = ff.VectorGaussian("x", 0.0, precision=np.eye(2))
                with ff.If(t > 0):
                    x = ff.VectorGaussian("x", step(x[t - 1]), covariance=np.eye(2) / 1.5)
                ff.VectorGaussian("y", x, precision=2.0 * np.eye(2), observed=y[0])
        result = model.infer("ep", progress=False)
        assert_close(result["x"].mean, ms, 1e-10)
        assert_close(result["x"].covariance, vs, 1e-10)


def test_generated_code_does_not_grow_with_the_chain():
    rng = np.random.default_rng(0)
    case = dict(a=0.9 * np.eye(2), b=np.zeros(2), q=np.eye(2), c=np.eye(2), r=np.eye(2),
                m0=np.zeros(2), p0=np.eye(2))
    short = vector_state_space(rng.normal(size=(1, 3, 2)), **case)
    long = vector_state_space(rng.normal(size=(1, 3000, 2)), **case)
    for algorithm in ("ep", "vmp"):
        assert short.compile(algorithm).source == long.compile(algorithm).source
    assert "VectorGaussianChain_sample_average_conditional" in long.compile("ep").source


# ----- the solver -----------------------------------------------------------------------------
@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.integers(1, 13), st.integers(1, 4), st.integers(0, 2**31))
def test_block_tridiagonal_equals_dense_algebra(n, d, seed):
    """Mean, diagonal and first off-diagonal blocks of Λ⁻¹ and log |Λ| of Λ = RᵀR, R
    upper block bidiagonal (so Λ is SPD block tridiagonal), with two systems batched."""
    rng = np.random.default_rng(seed)
    r = np.zeros((2, n * d, n * d))
    for t in range(n):
        r[:, t * d:(t + 1) * d, t * d:(t + 1) * d] = rng.normal(size=(2, d, d)) + 3 * np.eye(d)
        if t + 1 < n:
            r[:, t * d:(t + 1) * d, (t + 1) * d:(t + 2) * d] = rng.normal(size=(2, d, d))
    lam = np.swapaxes(r, 1, 2) @ r
    block = lambda m, i, j: m[:, i * d:(i + 1) * d, j * d:(j + 1) * d]  # noqa: E731
    diag = np.stack([block(lam, t, t) for t in range(n)], axis=1)
    upper = np.stack([block(lam, t, t + 1) for t in range(n - 1)] or [np.zeros((2, d, d))],
                     axis=1)[:, :n - 1]
    rhs = rng.normal(size=(2, n, d))
    out = block_tridiagonal(diag, upper, rhs)
    inv = np.linalg.inv(lam)
    assert_close(out.mean.reshape(2, -1), np.linalg.solve(lam, rhs.reshape(2, -1, 1))[..., 0],
                 1e-9, 1e-9)
    assert_close(out.cov, np.stack([block(inv, t, t) for t in range(n)], axis=1), 1e-9, 1e-9)
    if n > 1:
        assert_close(out.cross, np.stack([block(inv, t, t + 1) for t in range(n - 1)], axis=1),
                     1e-9, 1e-9)
    assert_close(out.log_det, np.linalg.slogdet(lam)[1], 1e-9, 1e-9)


def test_spd_inverse_equals_lapack():
    rng = np.random.default_rng(1)
    for d in (1, 2, 5, 8):
        m = rng.normal(size=(7, d, d))
        m = m @ np.swapaxes(m, 1, 2) + 0.1 * np.eye(d)
        inv, log_det = spd_inverse(m)
        assert_close(inv, np.linalg.inv(m), 1e-9, 1e-9)
        assert_close(log_det, np.linalg.slogdet(m)[1], 1e-10, 1e-10)


# ----- errors ---------------------------------------------------------------------------
def _vector_chain(step=None, start=None, extra=None, precision=None):
    with ff.Model() as model:
        w = ff.VectorGaussian("w", np.zeros(2), precision=np.eye(2))
        t = ff.Range("t", 4)
        with ff.Plate(t):
            with ff.If(t == 0):
                x = start() if start else ff.VectorGaussian("x", np.zeros(2),
                                                            precision=np.eye(2))
            with ff.If(t > 0):
                x = ff.VectorGaussian("x", (step or (lambda p, w: 0.5 * np.eye(2) @ p))(
                    x[t - 1], w), precision=np.eye(2) if precision is None else precision)
            if extra is not None:
                extra(x, t)
    return model


@pytest.mark.parametrize(("build", "match"), [
    (lambda: _vector_chain(lambda p, w: np.ones((3, 2)) @ p),
     r"the step's mean A @ x\[t - 1\] \+ b has shape \(3,\), but 'x' has shape \(2,\) .*"
     r"overall A has shape \(3, 2\)"),
    (lambda: _vector_chain(lambda p, w: np.ones((2, 3)) @ p),
     r"the matrix has shape \(2, 3\) but x\[t - 1\] is a vector of shape \(2,\)"),
    (lambda: _vector_chain(lambda p, w: np.eye(2) @ p + np.ones(3)),
     r"the offset has shape \(3,\) but the step's mean has shape \(2,\)"),
    (lambda: _vector_chain(precision=np.array([[1.0, 2.0], [2.0, 1.0]])),
     r"precision is not positive definite: its smallest eigenvalue is -1"),
    (lambda: _vector_chain(start=lambda: ff.VectorGaussian(
        "x", np.zeros(2), precision=np.diag([1.0, -0.5]))),
     r"'x' \(ff.If\(t == 0\)\), precision is not positive definite: its smallest "
     r"eigenvalue is -0.5"),
    (lambda: _vector_chain(lambda p, w: p @ np.eye(2)),
     r"applies a known matrix on the left"),
    (lambda: _vector_chain(lambda p, w: p + p), r"reads x\[t - 1\] once"),
    (lambda: _vector_chain(lambda p, w: np.eye(2) @ p + w), r"random or ff.Data matrix or "
     "offset"),
    (lambda: _vector_chain(lambda p, w: w @ p), r"\(w @ x\[t - 1\]\).*InnerProduct is not "
     "supported"),
    (lambda: _vector_chain(start=lambda: ff.Gaussian("x", 0.0, precision=1.0)),
     r"must be a vector, but variable 'x' is real-valued"),
    (lambda: _vector_chain(extra=lambda x, t: ff.VectorGaussian(
        "y", np.eye(2) @ x[t - 1], precision=np.eye(2), observed=np.zeros((4, 2)))),
     r"x\[t - 1\] at t = 0 reads x\[-1\], before the start of range 't'"),
])
def test_vector_chain_errors_name_the_problem(build, match):
    with pytest.raises(ff.ModelError, match=match):
        build()


def test_scalar_step_of_a_vector_start_and_gibbs_are_refused():
    with ff.Model():
        t = ff.Range("t", 3)
        with ff.Plate(t):
            with ff.If(t == 0):
                x = ff.VectorGaussian("x", np.zeros(2), precision=np.eye(2))
            with ff.If(t > 0), pytest.raises(ff.ModelError, match=r"the step must be the "
                                             r"same kind of variable as the start"):
                ff.Gaussian("x", 0.5 * x[t - 1], precision=1.0)
    model = _vector_chain(extra=lambda x, t: ff.VectorGaussian(
        "y", x, precision=np.eye(2), observed=np.zeros((4, 2))))
    with pytest.raises(ff.ModelError, match="Gibbs sampling does not support chains"):
        model.infer("gibbs", draws=10)
