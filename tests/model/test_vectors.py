"""ff.VectorGaussian, ff.Wishart, ff.inner and @: what they build, and bad input refused
where it is written (dimension mismatches naming both shapes and variables, matrices
that are not positive definite with their smallest eigenvalue)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import factorflow as ff
from tests.conftest import assert_close
from tests.runtime.test_vector_models import bpca_by_hand

NOT_PD = np.array([[1.0, 2.0], [2.0, 1.0]])  # eigenvalues 3 and -1


def test_vector_and_matrix_variables_carry_their_dimension():
    with ff.Model():
        w = ff.VectorGaussian("w", 0.0, precision=np.eye(3))
        lam = ff.Wishart("lam", 4.0, scale=np.eye(3))
        x = ff.VectorGaussian("x", w, precision=lam)
        s = w @ np.ones(3)
    assert (w.domain, w.size, lam.domain, lam.size, x.size) == ("vector", 3, "posdef", 3, 3)
    assert s.domain == "real" and s.derived and s.size is None


def test_covariance_and_scale_are_inverted():
    cov = np.array([[2.0, 0.5], [0.5, 1.0]])
    with ff.Model() as model:
        ff.VectorGaussian("w", np.array([1.0, -1.0]), covariance=cov)
        ff.Wishart("lam", 3.0, scale=cov)
    result = model.infer("vmp")
    assert_close(result["w"].covariance, cov, rtol=1e-12)
    assert_close(result["w"].mean, [1.0, -1.0], rtol=1e-12)
    assert_close(result["lam"].mean, 3.0 * cov, rtol=1e-12)


@pytest.mark.parametrize(("build", "message"), [
    (lambda: ff.VectorGaussian("x", ff.VectorGaussian("mu", np.zeros(3), precision=np.eye(3)),
                               precision=ff.Wishart("lam", 4.0, rate=np.eye(2))),
     r"x: dimension mismatch: 'mean' is variable 'mu' of shape \(3,\) \(D = 3\), but "
     r"'precision' is variable 'lam' of shape \(2, 2\) \(D = 2\)"),
    (lambda: ff.VectorGaussian("w", np.zeros(3), covariance=np.eye(2)),
     r"'mean' is a constant of shape \(3,\).*'covariance' is a constant of shape \(2, 2\)"),
    (lambda: ff.inner(ff.VectorGaussian("w", 0.0, precision=np.eye(3)), np.ones((4, 2))),
     r"\(w @ array\): dimension mismatch: 'a' is variable 'w' of shape \(3,\).*'b' is a "
     r"constant of shape \(4, 2\)"),
    (lambda: ff.VectorGaussian("w", np.zeros(2), precision=NOT_PD),
     r"variable 'w', argument 'precision' is not positive definite: its smallest "
     r"eigenvalue is -1\b"),
    (lambda: ff.Wishart("lam", 3.0, scale=NOT_PD), r"lam: scale is not positive definite: "
     r"its smallest eigenvalue is -1\b"),
    (lambda: ff.Wishart("lam", 3.0, rate=NOT_PD), r"variable 'lam', argument 'rate' is not "
     r"positive definite: its smallest eigenvalue is -1\b"),
    (lambda: ff.Wishart("lam", 3.0, rate=np.eye(2), observed=NOT_PD),
     r"observed value of 'lam' is not positive definite: its smallest eigenvalue is -1\b"),
    (lambda: ff.VectorGaussian("w", 0.0, precision=np.array([[1.0, 0.2], [0.0, 1.0]])),
     "not symmetric"),
    (lambda: ff.Wishart("lam", 0.5, rate=np.eye(2)), r"must exceed D − 1 = 1, got 0.5"),
    (lambda: ff.inner(np.ones(2), np.ones(2)), "neither argument is random"),
    (lambda: ff.VectorGaussian("w", ff.Gaussian("g", 0.0, precision=1.0),
                               precision=np.eye(2)),
     "argument 'mean' must be a vector, but variable 'g' is real-valued"),
    (lambda: ff.Gaussian("y", ff.VectorGaussian("w", 0.0, precision=np.eye(2)), precision=1.0),
     "variable 'w' is vector-valued but a real value is needed"),
    (lambda: ff.VectorGaussian("w", 0.0), "give exactly one of precision=, covariance="),
    (lambda: ff.VectorGaussian("w", 0.0, precision=np.ones(3)), "square D × D matrix"),
    (lambda: ff.matvec(np.ones((2, 4)), ff.VectorGaussian("z", 0.0, precision=np.eye(3))),
     r"\(array @ z\): dimension mismatch: the matrix has shape \(2, 4\) but 'z' is a "
     r"vector of shape \(3,\); B needs shape \(M, 3\)"),
    (lambda: ff.Gaussian("g", np.ones((3, 2)) @ ff.VectorGaussian("z", 0.0,
                                                                  precision=np.eye(2)),
                         precision=1.0),
     r"variable 'g', argument 'mean': \(array @ z\) has a matrix of shape \(3, 2\) "
     r"\(M = 3 rows, D = 2 columns, M > D\).*only be the mean of ff.VectorGaussian.*"
     r"row by row"),
    (lambda: ff.VectorGaussian("u", 0.0, precision=np.eye(2))
     + np.ones((2, 2)) @ ff.VectorGaussian("z", 0.0, precision=np.eye(2)),
     r"\(u \+ \(array @ z\)\): \(array @ z\) \(a matrix of shape \(2, 2\), M > D or "
     r"dependent rows\) can only be shifted by a known vector"),
    (lambda: ff.VectorGaussian("y", np.ones((3, 2)) @ ff.VectorGaussian(
        "z", 0.0, precision=np.eye(2)), precision=np.eye(2)),
     r"y: dimension mismatch: the mean \(array @ z\) is an M-vector \(matrix of shape "
     r"\(3, 2\), M = 3\), but 'precision' is a constant of shape \(2, 2\) \(D = 2\); "
     r"give an M × M precision"),
    (lambda: np.ones((3, 2)) @ ff.VectorGaussian("z", 0.0, precision=np.eye(2))
     + np.ones(2), r"\(\(array @ z\) \+ array\): dimension mismatch: \(array @ z\) is an "
     r"M-vector \(M = 3\) but the offset has shape \(2,\)"),
    (lambda: ff.matvec(ff.Wishart("lam", 3.0, rate=np.eye(2)),
                       ff.VectorGaussian("z", 0.0, precision=np.eye(2))),
     "the matrix must be a known array; write a random matrix as its rows"),
    (lambda: ff.VectorGaussian("z", 0.0, precision=np.eye(2)) + np.ones(3),
     r"\(z \+ array\): dimension mismatch: 'a' is variable 'z' of shape \(2,\) \(D = 2\), "
     r"but 'b' is a constant of shape \(3,\) \(D = 3\)"),
    (lambda: ff.VectorGaussian("z", 0.0, precision=np.eye(2))
     - ff.VectorGaussian("u", 0.0, precision=np.eye(3)),
     r"'a' is variable 'z' of shape \(2,\).*'b' is variable 'u' of shape \(3,\)"),
    (lambda: np.array([[1.0, np.nan]]) @ ff.VectorGaussian("z", 0.0, precision=np.eye(2)),
     "contains NaN or inf"),
], ids=["mean-vs-precision", "mean-vs-covariance", "inner", "not-pd-precision",
        "not-pd-scale", "not-pd-rate", "not-pd-observed", "not-symmetric", "dof", "inner-of-constants",
        "scalar-mean", "vector-as-scalar", "no-spread", "precision-not-square",
        "matvec-dimension", "tall-product-elsewhere", "tall-product-plus-random",
        "tall-product-precision", "tall-product-offset", "matvec-random-matrix",
        "vector-sum-dimension", "vector-difference-dimension", "matvec-nan"])
def test_bad_input_is_refused_where_it_is_written(build, message):
    with ff.Model(), pytest.raises(ff.ModelError, match=message):
        build()


def test_observed_vectors_need_their_plates_and_dimension():
    with ff.Model(), ff.Plate(ff.Range("n", 4)), pytest.raises(
            ff.DataError, match=r"observed value of 'x' has shape \(4, 3\), but its last axes "
                                r"must be \(2,\) \(D = 2\)"):
        ff.VectorGaussian("x", np.zeros(2), precision=np.eye(2), observed=np.zeros((4, 3)))
    with ff.Model(), ff.Plate(ff.Range("n", 4)), pytest.raises(
            ff.DataError, match=r"shape \(3, 2\) does not match the plates \['n'\]"):
        ff.VectorGaussian("w", np.zeros((3, 2)), precision=np.eye(2))


def test_a_design_matrix_given_as_data_changes_without_recompiling():
    rng = np.random.default_rng(0)
    y = rng.normal(size=4)
    with ff.Model() as model:
        X = ff.Data("X", np.ones((4, 3)))
        w = ff.VectorGaussian("w", np.zeros(3), precision=np.eye(3))
        with ff.Plate(ff.Range("n", 4)):
            ff.Gaussian("y", X @ w, precision=1.0, observed=y)
    compiled = model.compile("ep")
    for _ in range(2):
        X2 = rng.normal(size=(4, 3))
        q = compiled.run(data={"X": X2})["w"]
        p = np.eye(3) + X2.T @ X2
        assert_close(q.mean, np.linalg.solve(p, X2.T @ y), rtol=1e-10, atol=1e-12)
    with pytest.raises(ff.DataError, match=r"ff.Data\('X'\).*last axes must be \(3,\)"):
        compiled.run(data={"X": np.ones((4, 2))})


def test_init_takes_a_vector_gaussian_and_ep_refuses_a_random_precision():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(5, 2))
    with ff.Model() as model:
        mu = ff.VectorGaussian("mu", 0.0, precision=np.eye(2))
        lam = ff.Wishart("lam", 3.0, rate=np.eye(2))
        with ff.Plate(ff.Range("n", 5)):
            ff.VectorGaussian("x", mu, precision=lam, observed=x)
    with pytest.raises(ff.UnsupportedFactorError, match="VectorGaussian.*'precision'.*'vmp'"):
        model.infer("ep")
    start = ff.distributions.VectorGaussian(np.array([0.5, 0.5]), np.eye(2))
    a = model.infer("vmp", init={"mu": start}, iterations=300)
    b = model.infer("vmp", iterations=300)
    assert a.converged and b.converged
    assert_close(a["mu"].mean, b["mu"].mean, rtol=1e-8)
    with pytest.raises(ff.ModelError, match=r"init\['mu'\] must be a VectorGaussian"):
        model.infer("vmp", init={"mu": ff.distributions.Gaussian(0.0, 1.0)})


def test_at_reads_a_matrix_as_b_at_z_and_rows_per_plate_element_as_inner_products():
    with ff.Model():
        z = ff.VectorGaussian("z", 0.0, precision=np.eye(3))
        y = np.array([[1.0, 0, 0], [0, 1, 1]]) @ z              # B z: a 2-vector
        t = z @ np.array([[1.0, 0], [0, 1], [1, 1]])          # zᵀ B = Bᵀ z
        with ff.Plate(ff.Range("n", 4)):
            s = np.ones((4, 3)) @ z                              # a design matrix: rows
            r = np.eye(3)[:2] @ z                                # one B for all n
            q = np.ones((4, 2, 3)) * np.eye(3)[:2] @ z           # one B per n
    assert (y.domain, y.size, t.domain, t.size) == ("vector", 2, "vector", 2)
    assert s.domain == "real"
    assert (r.domain, r.size, q.size, [p.name for p in q.plates]) == ("vector", 2, 2, ["n"])


def test_a_matrix_per_plate_element_that_is_not_positive_definite_is_named():
    """One matrix of a plate of precisions is refused with its element and its smallest
    eigenvalue; a ff.Data precision is checked at each run, naming the Data."""
    with ff.Model(), ff.Plate(ff.Range("n", 3)), pytest.raises(
            ff.DataError, match=r"variable 'w', argument 'precision' is not positive definite "
                                r"at plate element \(2,\): its smallest eigenvalue is -1\b"):
        ff.VectorGaussian("w", np.zeros(2), precision=np.stack([np.eye(2), np.eye(2), NOT_PD]))
    with ff.Model() as model:
        ff.VectorGaussian("w", np.zeros(2), precision=ff.Data("P", np.eye(2)))
    assert_close(model.infer("vmp", progress=False)["w"].covariance, np.eye(2), 1e-12)
    with pytest.raises(ff.DataError, match=r"ff.Data\('P'\) as variable 'w', argument "
                                           r"'precision' is not positive definite: its "
                                           r"smallest eigenvalue is -1\b"):
        model.infer("vmp", data={"P": NOT_PD}, progress=False)


# ----- ff.Gaussian(W @ z, precision=tau), both random: the fused factor (VMP) -------------
def _pca(y, k, *, twice=False, ep_known=False):
    """Bayesian PCA over plates (n, m): W[m], z[n] ~ N(0, I), τ ~ Gamma(1, 1),
    y[n, m] ~ N(W[m] · z[n], 1/τ); ``twice``: the product read by a second Gaussian."""
    n, m = y.shape
    with ff.Model("pca") as model:
        rows, points = ff.Range("m", m), ff.Range("n", n)
        tau = ff.Gamma("tau", 1.0, rate=1.0)
        with ff.Plate(rows):
            w = ff.VectorGaussian("W", np.zeros(k), precision=np.eye(k))
        with ff.Plate(points):
            z = ff.VectorGaussian("z", np.zeros(k), precision=np.eye(k))
            with ff.Plate(rows):
                product = w @ z
                ff.Gaussian("y", product, precision=tau, observed=y)
                if twice:
                    ff.Gaussian("y2", product, precision=1.0, observed=y)
    return model


def _without_fusion(monkeypatch):
    """Compile as before the fusion pass existed (the stage passes programs through)."""
    import factorflow.transforms.pipeline as pipeline
    monkeypatch.setattr(pipeline, "fuse", lambda program, algorithm, initialized: program)


def _pca_data(rng, n, m, k):
    y = rng.normal(size=(n, k)) @ rng.normal(size=(k, m)) + 0.5 * rng.normal(size=(n, m))
    start = ff.distributions.VectorGaussian(rng.normal(size=(n, k)),
                                            np.broadcast_to(np.eye(k), (n, k, k)))
    return y, start


def test_gaussian_of_two_random_vectors_is_one_fused_factor_under_vmp_only():
    """The pair (InnerProduct, Gaussian) becomes one InnerProductGaussian statement under
    VMP; the product keeps its posterior (its forward distribution under q(W) q(z), read
    by nothing in the loop).  A product read twice, or EP, or a user initialisation of
    the product, leaves the pair as it was."""
    rng = np.random.default_rng(0)
    y, start = _pca_data(rng, 6, 3, 2)
    fused = _pca(y, 2).compile("vmp", init=["z"])
    assert "InnerProductGaussian_a_average_logarithm" in fused.source
    assert "InnerProduct_a_average_logarithm" not in fused.source
    assert "InnerProduct_b_average_logarithm" not in fused.source
    result = fused.run(init={"z": start}, iterations=2, tolerance=None)
    w, z = result["W"], result["z"]
    assert_close(result["(W @ z)"].mean, z.mean @ w.mean.T, rtol=1e-10, atol=1e-12)
    spread = (np.einsum("mij,nij->nm", w.covariance, z.covariance
                        + z.mean[:, :, None] * z.mean[:, None, :])
              + np.einsum("mi,nij,mj->nm", w.mean, z.covariance, w.mean))
    assert_close(result["(W @ z)"].variance, spread, rtol=1e-10)
    twice = _pca(y, 2, twice=True).compile("vmp", init=["z"])
    assert "InnerProductGaussian" not in twice.source
    assert "InnerProduct_a_average_logarithm" in twice.source
    kept = _pca(y, 2).compile("vmp", init=["z", "(W @ z)"])
    assert "InnerProductGaussian" not in kept.source
    with ff.Model() as regression:  # a known vector: linear regression, as before
        w = ff.VectorGaussian("w", 0.0, precision=np.eye(2))
        with ff.Plate(ff.Range("n", 3)):
            ff.Gaussian("y", w @ rng.normal(size=(3, 2)), precision=1.0, observed=[1., 2., 3.])
    assert "InnerProductGaussian" not in regression.compile("vmp").source


def _greedy_order(monkeypatch) -> None:
    """The unfused program scheduled by the greedy plan alone, which updates W, τ, z in
    turn as the fused program does.  (Its own plan updates W, z, τ: the messages of the
    product W·z are then computed once a sweep, not twice.)"""
    from factorflow.transforms import scheduling

    monkeypatch.setattr(scheduling, "_choose", lambda lp: scheduling._iterate(lp))


def test_fused_pca_equals_the_unfused_program_sweep_by_sweep(monkeypatch):
    """With z and τ initialised, and both programs updating W, τ, z in turn, the fused
    program's posteriors and bound equal the unfused program's after 1, 2, 7 and 25
    sweeps (1e-10) (``_greedy_order``)."""
    rng = np.random.default_rng(4)
    n, m, k = 40, 6, 3
    y, start = _pca_data(rng, n, m, k)
    tau0 = ff.distributions.Gamma(2.0, rate=3.0)
    init = {"z": start, "tau": tau0}
    fused = _pca(y, k).compile("vmp", init=["z", "tau"])
    _without_fusion(monkeypatch)
    _greedy_order(monkeypatch)
    plain = _pca(y, k).compile("vmp", init=["z", "tau"])
    assert "InnerProductGaussian" in fused.source and "InnerProductGaussian" not in plain.source
    _same_pca_runs(fused, plain, init, (1, 2, 7, 25))


def _same_pca_runs(fused, plain, init: dict, sweeps: tuple[int, ...]) -> None:
    """Two compiled PCA programs give the same W, z, τ, bound and trace (1e-10) after
    each number of ``sweeps`` from ``init``."""
    for count in sweeps:
        a = fused.run(init=init, iterations=count, tolerance=None)
        b = plain.run(init=init, iterations=count, tolerance=None)
        for name in ("W", "z"):
            assert_close(a[name].mean, b[name].mean, rtol=1e-10, atol=1e-12)
            assert_close(a[name].covariance, b[name].covariance, rtol=1e-10, atol=1e-12)
        assert_close([a["tau"].shape_param, a["tau"].rate],
                     [b["tau"].shape_param, b["tau"].rate], rtol=1e-10)
        assert_close(a.log_evidence, b.log_evidence, rtol=1e-10)
        assert_close(a.trace, b.trace, rtol=1e-10)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 7), m=st.integers(1, 5), k=st.integers(1, 3),
       sweeps=st.integers(1, 8), seed=st.integers(0, 2**32 - 1))
def test_fused_pca_is_the_hand_written_vmp_and_its_bound_never_falls(n, m, k, sweeps, seed):
    """Generated N, M, K (M above, at or below K; N = 1): after ``sweeps`` sweeps the
    fused program's posteriors of W, z and τ and its bound equal a hand-written VMP
    (BayesPy's updates in the same order, its ELBO computed directly) to 1e-10, and the
    bound never falls from sweep to sweep."""
    rng = np.random.default_rng(seed)
    y, start = _pca_data(rng, n, m, k)
    compiled = _pca(y, k).compile("vmp", init=["z"])
    assert "InnerProductGaussian" in compiled.source
    result = compiled.run(init={"z": start}, iterations=sweeps, tolerance=None)
    ref = bpca_by_hand(y, start.mean, start.covariance, sweeps)
    assert_close(result["W"].mean, ref["w_mean"], rtol=1e-10, atol=1e-10)
    assert_close(result["W"].covariance, ref["w_cov"], rtol=1e-10, atol=1e-10)
    assert_close(result["z"].mean, ref["z_mean"], rtol=1e-10, atol=1e-10)
    assert_close(result["z"].covariance, ref["z_cov"], rtol=1e-10, atol=1e-10)
    assert_close([result["tau"].shape_param, result["tau"].rate], ref["tau"], rtol=1e-10)
    assert_close(result.log_evidence, ref["elbo"], rtol=1e-10)
    assert np.all(np.diff(result.trace) >= -1e-10 * np.abs(result.trace[1:]))


# ----- ARD: W[m] ~ N(0, diag(alpha)⁻¹), alpha[k] ~ Gamma (BayesPy's PCA demo) --------------
def _ard_pca(y, k, c0=1e-2, d0=1e-2, a0=1e-2, b0=1e-2):
    n, m = y.shape
    with ff.Model("ard_pca") as model:
        latent, rows, points = ff.Range("k", k), ff.Range("m", m), ff.Range("n", n)
        tau = ff.Gamma("tau", a0, rate=b0)
        with ff.Plate(latent):
            alpha = ff.Gamma("alpha", c0, rate=d0)
        with ff.Plate(rows):
            w = ff.VectorGaussian("W", 0.0, precision=alpha)
        with ff.Plate(points):
            z = ff.VectorGaussian("z", np.zeros(k), precision=np.eye(k))
            with ff.Plate(rows):
                ff.Gaussian("y", w @ z, precision=tau, observed=y)
    return model


def _gamma_entropy_and_prior(a, b, a0, b0):
    """E_q[log Gamma(x; a0, b0)] + H[Gamma(a, b)] for q = Gamma(a, b), elementwise."""
    from scipy import special
    elog, mean = special.digamma(a) - np.log(b), a / b
    prior = a0 * np.log(b0) - special.gammaln(a0) + (a0 - 1) * elog - b0 * mean
    entropy = a - np.log(b) + special.gammaln(a) + (1 - a) * special.digamma(a)
    return prior + entropy


def ard_pca_by_hand(y, z_mean, z_cov, sweeps, c0=1e-2, d0=1e-2, a0=1e-2, b0=1e-2):
    """Mean-field VMP for y[n, m] ~ N(W[m]·z[n], 1/τ), W[m] ~ N(0, diag(α)⁻¹),
    α[k] ~ Gamma(c0, d0), z[n] ~ N(0, I), τ ~ Gamma(a0, b0), in factorflow's order: α and
    τ from their priors, then per sweep W, α, τ, z; the ELBO computed directly."""
    from scipy import special
    n, m = y.shape
    k = z_mean.shape[1]
    a, b, c, d = a0, b0, np.full(k, c0), np.full(k, d0)
    for _ in range(sweeps + 1):
        ezz = np.sum(z_cov + z_mean[:, :, None] * z_mean[:, None, :], axis=0)
        if _ == sweeps:
            break
        w_cov = np.linalg.inv(np.diag(c / d) + (a / b) * ezz)
        w_mean = (a / b) * (y.T @ z_mean) @ w_cov
        w_cov = np.broadcast_to(w_cov, (m, k, k))
        eww2 = w_mean**2 + np.diagonal(w_cov, axis1=1, axis2=2)
        c, d = c0 + m / 2, d0 + 0.5 * np.sum(eww2, axis=0)
        eww = np.sum(w_cov + w_mean[:, :, None] * w_mean[:, None, :], axis=0)
        resid = np.sum(y**2) - 2 * np.sum(y * (z_mean @ w_mean.T)) + np.sum(eww * ezz)
        a, b = a0 + n * m / 2, b0 + 0.5 * resid
        z_cov = np.broadcast_to(np.linalg.inv(np.eye(k) + (a / b) * eww), (n, k, k))
        z_mean = (a / b) * (y @ w_mean) @ z_cov[0]
    eww = np.sum(w_cov + w_mean[:, :, None] * w_mean[:, None, :], axis=0)
    resid = np.sum(y**2) - 2 * np.sum(y * (z_mean @ w_mean.T)) + np.sum(eww * ezz)
    eww2 = w_mean**2 + np.diagonal(w_cov, axis1=1, axis2=2)
    e_log_tau, e_log_alpha = special.digamma(a) - np.log(b), special.digamma(c) - np.log(d)
    logdet = lambda cov: np.sum(np.linalg.slogdet(cov)[1])  # noqa: E731
    elbo = (0.5 * n * m * (e_log_tau - np.log(2 * np.pi)) - 0.5 * (a / b) * resid
            + np.sum(0.5 * m * (e_log_alpha - np.log(2 * np.pi)) - 0.5 * (c / d) * eww2.sum(0))
            + 0.5 * logdet(w_cov) + 0.5 * m * k * (1 + np.log(2 * np.pi))
            - 0.5 * np.sum(np.trace(z_cov, axis1=1, axis2=2) + np.sum(z_mean**2, axis=1))
            + 0.5 * logdet(z_cov) + 0.5 * n * k
            + np.sum(_gamma_entropy_and_prior(c, d, c0, d0))
            + _gamma_entropy_and_prior(a, b, a0, b0))
    return {"w_mean": w_mean, "w_cov": w_cov, "z_mean": z_mean, "z_cov": z_cov,
            "tau": (a, b), "alpha": (c, d), "elbo": elbo}


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 7), m=st.integers(1, 5), k=st.integers(1, 4),
       sweeps=st.integers(1, 8), seed=st.integers(0, 2**32 - 1))
def test_ard_pca_is_the_hand_written_vmp_and_its_bound_never_falls(n, m, k, sweeps, seed):
    """W's rows with the diagonal precision diag(α) of a plate of K Gammas (ARD, as
    BayesPy's PCA demo): after ``sweeps`` sweeps the posteriors of W, z, α and τ and the
    bound equal a hand-written VMP in the same order (1e-10), and the bound never falls."""
    rng = np.random.default_rng(seed)
    y, start = _pca_data(rng, n, m, k)
    compiled = _ard_pca(y, k).compile("vmp", init=["z"])
    assert "VectorGaussianARD_sample_average_logarithm" in compiled.source
    assert "InnerProductGaussian_a_average_logarithm" in compiled.source
    result = compiled.run(init={"z": start}, iterations=sweeps, tolerance=None)
    ref = ard_pca_by_hand(y, start.mean, start.covariance, sweeps)
    assert_close(result["W"].mean, ref["w_mean"], rtol=1e-10, atol=1e-10)
    assert_close(result["W"].covariance, ref["w_cov"], rtol=1e-10, atol=1e-10)
    assert_close(result["z"].mean, ref["z_mean"], rtol=1e-10, atol=1e-10)
    assert_close(result["z"].covariance, ref["z_cov"], rtol=1e-10, atol=1e-10)
    assert_close([result["tau"].shape_param, result["tau"].rate], ref["tau"], rtol=1e-10)
    assert_close(result["alpha"].shape_param, ref["alpha"][0], rtol=1e-10)
    assert_close(result["alpha"].rate, ref["alpha"][1], rtol=1e-10)
    assert_close(result.log_evidence, ref["elbo"], rtol=1e-10)
    assert np.all(np.diff(result.trace) >= -1e-10 * np.abs(result.trace[1:]))


def test_ard_prunes_the_latent_dimensions_the_data_lack():
    """Data of 2 latent dimensions fitted with K = 4 under ARD: two α's posterior means
    grow by orders of magnitude over the other two (their columns of W switched off)."""
    rng = np.random.default_rng(3)
    n, m, k = 100, 8, 4
    y = rng.normal(size=(n, 2)) @ (3 * rng.normal(size=(2, m))) + 0.1 * rng.normal(size=(n, m))
    start = ff.distributions.VectorGaussian(rng.normal(size=(n, k)),
                                            np.broadcast_to(np.eye(k), (n, k, k)))
    result = _ard_pca(y, k).compile("vmp", init=["z"]).run(init={"z": start},
                                                           iterations=100, tolerance=None)
    alpha = np.sort(result["alpha"].mean)
    assert alpha[2] > 100 * alpha[1]


@pytest.mark.parametrize(("build", "message"), [
    (lambda a, k, m: ff.VectorGaussian("W", 0.0, precision=a),  # alpha's plate open
     r"variable 'W': precision='alpha' \(a diagonal precision, ARD\): .* must be over a "
     r"plate of D "
     r"elements that is not open here"),
    (lambda a, k, m: ff.VectorGaussian("W", np.zeros(3), precision=a),
     r"W: dimension mismatch: 'mean' is a constant of shape \(3,\) \(D = 3\), but the "
     r"precision 'alpha' is over plate 'k' of 2 elements"),
])
def test_a_diagonal_precision_that_does_not_fit_is_named(build, message):
    with ff.Model():
        k, m = ff.Range("k", 2), ff.Range("m", 3)
        with ff.Plate(k):
            alpha = ff.Gamma("alpha", 1.0, rate=1.0)
            if "open" in message:
                with pytest.raises(ff.ModelError, match=message):
                    build(alpha, k, m)
                return
        with ff.Plate(m), pytest.raises(ff.ModelError, match=message):
            build(alpha, k, m)


def _layout(name):
    """Models with ff.Gaussian(a @ b) for the fusion's other layouts, their variables to
    initialise and the initial posteriors (fixed data)."""
    rng = np.random.default_rng(5)
    n, m, k = 12, 4, 3
    start = ff.distributions.VectorGaussian(rng.normal(size=(n, k)),
                                            np.broadcast_to(np.eye(k), (n, k, k)))
    with ff.Model(name.replace(" ", "_")) as model:
        rows, points = ff.Range("m", m), ff.Range("n", n)
        if name == "one shared vector":  # y[n] ~ N(w · x[n], 1/τ): one plate, no grid
            tau = ff.Gamma("tau", 2.0, rate=1.0)
            w = ff.VectorGaussian("w", np.zeros(k), precision=np.eye(k))
            with ff.Plate(points):
                x = ff.VectorGaussian("x", np.zeros(k), precision=np.eye(k))
                ff.Gaussian("y", w @ x, precision=tau, observed=rng.normal(size=n))
            return model, {"x": start, "tau": ff.distributions.Gamma(2.0, rate=3.0)}
        if name == "a precision per row":  # τ[m]: the general path
            with ff.Plate(rows):
                tau = ff.Gamma("tau", 2.0, rate=1.0)
            tau0 = ff.distributions.Gamma(np.full(m, 2.0), rate=np.full(m, 3.0))
        else:
            tau = ff.Gamma("tau", 2.0, rate=1.0)
            tau0 = ff.distributions.Gamma(2.0, rate=3.0)
        with ff.Plate(rows):
            w = ff.VectorGaussian("W", np.zeros(k), precision=np.eye(k))
        with ff.Plate(points):
            z = ff.VectorGaussian("z", np.zeros(k), precision=np.eye(k))
            with ff.Plate(rows):
                ff.Gaussian("y", w @ z, precision=tau, observed=rng.normal(size=(n, m)))
    return model, {"z": start, "tau": tau0}


@pytest.mark.parametrize("name", ["one shared vector", "a precision per row"])
def test_fused_layouts_off_the_grid_equal_the_unfused_program(name, monkeypatch):
    """One plate (w shared by every datum) and a precision per row (no single τ) take
    the fused factor's general path (one einsum per sum): posteriors and bound equal the
    unfused program's after 1 and 6 sweeps (1e-10), both in the same order
    (``_greedy_order``)."""
    model, init = _layout(name)
    fused = model.compile("vmp", init=list(init))
    assert "InnerProductGaussian" in fused.source
    _without_fusion(monkeypatch)
    _greedy_order(monkeypatch)
    plain = _layout(name)[0].compile("vmp", init=list(init))
    for sweeps in (1, 6):
        a = fused.run(init=init, iterations=sweeps, tolerance=None)
        b = plain.run(init=init, iterations=sweeps, tolerance=None)
        for var in a.posteriors:
            if var == "y":  # observed: a point mass
                continue
            for e, r in zip(a[var].eta, b[var].eta, strict=True):
                assert_close(e, r, rtol=1e-10, atol=1e-12)
        assert_close(a.log_evidence, b.log_evidence, rtol=1e-10)


def test_a_latent_gaussian_of_the_product_reaches_the_unfused_fixed_point(monkeypatch):
    """y[n, m] ~ N(W[m] · z[n], 1/τ) latent, observed through x ~ N(y, 1/4): the fused
    program (its message to y: N(E W · E z, 1/E τ)) runs another coordinate order than
    the unfused one, and both reach the same fixed point: bound, E[y], τ and W Wᵀ (the
    rotation-free part of W) to 1e-9."""
    def build():
        rng = np.random.default_rng(5)
        n, m, k = 12, 4, 2
        with ff.Model("latent") as model:
            rows, points = ff.Range("m", m), ff.Range("n", n)
            tau = ff.Gamma("tau", 2.0, rate=1.0)
            with ff.Plate(rows):
                w = ff.VectorGaussian("W", np.zeros(k), precision=np.eye(k))
            with ff.Plate(points):
                z = ff.VectorGaussian("z", np.zeros(k), precision=np.eye(k))
                with ff.Plate(rows):
                    y = ff.Gaussian("y", w @ z, precision=tau)
                    ff.Gaussian("x", y, precision=4.0, observed=rng.normal(size=(n, k))
                                @ rng.normal(size=(k, m)))
        start = ff.distributions.VectorGaussian(rng.normal(size=(n, k)),
                                                np.broadcast_to(np.eye(k), (n, k, k)))
        return model, {"z": start, "tau": ff.distributions.Gamma(2.0, rate=3.0)}

    model, init = build()
    fused = model.compile("vmp", init=["z", "tau"])
    assert "InnerProductGaussian_sample_average_logarithm" in fused.source
    a = fused.run(init=init, iterations=5000, tolerance=1e-13)
    _without_fusion(monkeypatch)
    model, init = build()
    b = model.compile("vmp", init=["z", "tau"]).run(init=init, iterations=5000,
                                                    tolerance=1e-13)
    assert a.converged and b.converged
    assert_close(a.log_evidence, b.log_evidence, rtol=1e-9)
    assert_close(a["y"].mean, b["y"].mean, rtol=1e-9, atol=1e-9)
    assert_close(a["tau"].mean, b["tau"].mean, rtol=1e-9)
    wa, wb = a["W"].mean, b["W"].mean
    assert_close(wa @ wa.T, wb @ wb.T, rtol=1e-9, atol=1e-9)


# ----- components of a vector variable: w[i], and sums of them as one inner product -----
@st.composite
def component_sums(draw):
    """y[n] ~ N(Σ_terms c · w[i] + b, σ²) with w ~ N(m0, P0⁻¹) of D = 1–3: each term's
    coefficient c a number or a known value per datum (x[:, j], on either side), as a
    user writes a regression with the weights in one vector; its design matrix A."""
    dim, n = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = rng.normal(size=(n, 2))
    terms = []
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, dim - 1))
        kind = draw(st.sampled_from(("number", "column", "column-left", "negated")))
        coef = draw(st.sampled_from((0.5, 2.0, -1.5))) if kind == "number" else None
        terms.append((i, kind, coef, draw(st.integers(0, 1))))
    offset = draw(st.sampled_from((0.0, 1.0)))
    lower = rng.normal(size=(dim, dim))
    return dim, n, x, terms, offset, rng.normal(size=dim), lower @ lower.T + np.eye(dim)


@settings(max_examples=25, deadline=None)
@given(spec=component_sums())
def test_a_sum_of_components_is_one_inner_product_and_exact(spec):
    """``w[i]`` is component i of a vector variable; a sum of components (scaled by
    numbers or per-datum values) is collected into one inner product with the design
    matrix, so EP and VMP are exact: the posterior of w and log Z equal the Gaussian
    conditioning of y = A w + b + noise (1e-9), correlations included (written as
    separate inner products, EP's covariance was 0.2 off on a 2-weight regression)."""
    dim, n, x, terms, offset, m0, p0 = spec
    ff_y = np.random.default_rng(dim * 7 + n).normal(size=n)
    a = np.zeros((n, dim))  # the design matrix so far
    with ff.Model() as model:
        w = ff.VectorGaussian("w", m0, precision=p0)
        with ff.Plate(ff.Range("n", n)):
            mean = None
            for i, kind, coef, column in terms:
                if kind == "number":
                    term, a[:, i] = coef * w[i], a[:, i] + coef
                elif kind == "negated":
                    term, a[:, i] = -w[i], a[:, i] - 1.0
                elif kind == "column":
                    term, a[:, i] = w[i] * x[:, column], a[:, i] + x[:, column]
                else:
                    term, a[:, i] = x[:, column] * w[i], a[:, i] + x[:, column]
                try:
                    mean = term if mean is None else mean + term
                except ff.ModelError as error:  # the terms so far cancel: refused so
                    assert "is a constant" in str(error) and not np.any(a), error
                    return
            if offset:
                mean = mean + offset
            ff.Gaussian("y", mean, variance=0.5, observed=ff_y)
    precision = p0 + a.T @ a / 0.5
    cov = np.linalg.inv(precision)
    exact_mean = cov @ (p0 @ m0 + a.T @ (ff_y - offset) / 0.5)
    marginal = 0.5 * np.eye(n) + a @ np.linalg.solve(p0, a.T)
    resid = ff_y - offset - a @ m0
    log_z = -0.5 * (n * np.log(2 * np.pi) + np.linalg.slogdet(marginal)[1]
                    + resid @ np.linalg.solve(marginal, resid))
    for algorithm in ("ep", "vmp"):
        result = model.infer(algorithm, iterations=20, progress=False)
        assert_close(result["w"].mean, exact_mean, atol=1e-9)
        assert_close(np.linalg.inv(result["w"].precision), cov, atol=1e-9)
        assert abs(result.log_evidence - log_z) < 1e-9 * max(1.0, abs(log_z)), algorithm


def test_components_are_read_refused_past_the_end_and_not_multiplied():
    """``w[i]`` reads component i (a negative i from the end, as NumPy); past the end,
    and a product of two components of one w (message passing would treat them as
    independent), are refused by name."""
    with ff.Model() as model:
        w = ff.VectorGaussian("w", np.array([1.0, -2.0, 3.0]), covariance=np.diag([1.0, 2.0, 3.0]))
        last = w[-1]
        with pytest.raises(ff.ModelError, match=r"w\[3\]: 'w' is a vector of 3 components"):
            w[3]
        with pytest.raises(ff.ModelError, match="both factors depend on 'w'"):
            w[0] * w[1]
        with pytest.raises(ff.ModelError, match="is a constant"):
            w[1] - w[1]
    result = model.infer("ep", progress=False)
    assert last.name == "w[2]"
    assert_close(result["w[2]"].mean, 3.0, atol=1e-12)
    assert_close(result["w[2]"].variance, 3.0, atol=1e-12)
