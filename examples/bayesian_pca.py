"""Bayesian PCA under VMP: a random matrix as its rows over a plate.

W[d] ~ N(0, I_K) (the D rows of the loading matrix), z[n] ~ N(0, I_K) (the latent
coordinates), τ ~ Gamma(1, 1), y[n, d] ~ N(W[d] @ z[n], 1/τ): the product of two random
vectors per (n, d), one inner product per observation (Tipping & Bishop's model, Bishop
§12.2.4).  Under VMP the compiler fuses ``ff.Gaussian(W @ z, precision=tau)`` into one
InnerProductGaussian factor (BayesPy's ``GaussianARD(Dot(W, z), τ)``): its messages are
matrix products of the N × D data with the posterior means, no Gaussian per (n, d).
With ``ard=True`` the rows of W have the diagonal precision of a plate of K Gammas
(automatic relevance determination, BayesPy's PCA demo): ``precision=alpha``.  The
latent coordinates are initialised at random to break the rotational symmetry.  The
script prints the angle between the recovered and the true principal subspaces and the
learnt noise, then fits K = 4 with ARD to the same 2-dimensional data; the test suite
checks that the posteriors and the bound are those of a hand-written VMP
(BayesPy-style updates, the ELBO computed by hand).

Missing values, as in BayesPy's PCA demo (``Y.observe(data, mask=seen)``): the data are
given as a NumPy masked array, ``observed=np.ma.masked_array(y, mask=missing)`` (as in
PyMC; masked = missing).  The missing entries contribute nothing to the posteriors or
the bound (the fused factor's sums run over the seen entries: masked matrix products),
and E[W] E[z] predicts them: the script hides 30% of the entries and compares the
prediction there with the noise-free values.
"""

from __future__ import annotations

import time

import numpy as np
from scipy.linalg import subspace_angles

import factorflow as ff

SWEEPS = 100


def data(n: int = 100, dim: int = 5, k: int = 2, noise: float = 0.3, seed: int = 0,
         clean: bool = False) -> tuple[np.ndarray, ...]:
    """y = z Wᵀ + noise (N × D), and the true loadings W (D × K); ``clean``: also the
    noise-free values z Wᵀ (centred as y)."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(dim, k)) * np.array([3.0, 2.0])[:k]
    f = rng.normal(size=(n, k)) @ w.T
    y = f + noise * rng.normal(size=(n, dim))
    centre = y.mean(axis=0)
    return (y - centre, w, f - centre) if clean else (y - centre, w)


def pca(y: np.ndarray, k: int, ard: bool = False) -> ff.Model:
    """The model of ``k`` latent dimensions for the data ``y`` (N × D; a masked array:
    the masked entries are missing); ``ard``: W's rows ~ N(0, diag(alpha)⁻¹) with
    alpha[k] ~ Gamma(10⁻², 10⁻²) (BayesPy's PCA demo)."""
    n, dim = y.shape
    with ff.Model("bayesian_pca") as model:
        rows, points = ff.Range("d", dim), ff.Range("n", n)
        tau = ff.Gamma("tau", 1.0, rate=1.0)
        if ard:
            with ff.Plate(ff.Range("k", k)):
                alpha = ff.Gamma("alpha", 1e-2, rate=1e-2)
        with ff.Plate(rows):
            w = ff.VectorGaussian("W", np.zeros(k), precision=alpha if ard else np.eye(k))
        with ff.Plate(points):
            z = ff.VectorGaussian("z", np.zeros(k), precision=np.eye(k))
            with ff.Plate(rows):
                ff.Gaussian("y", w @ z, precision=tau, observed=y)
    return model


def main() -> dict[str, object]:
    k = 2
    y, w_true = data()
    model = pca(y, k)
    rng = np.random.default_rng(1)
    start = ff.distributions.VectorGaussian(rng.normal(size=(len(y), k)),
                                            np.broadcast_to(np.eye(k), (len(y), k, k)))
    compiled = model.compile("vmp", init=["z"])
    begin = time.perf_counter()
    # the rotation of W and z is only weakly identified, so the posteriors drift slowly
    # for long after the subspace and the noise are found: a fixed number of sweeps
    result = compiled.run(init={"z": start}, iterations=SWEEPS, tolerance=None)
    ms = (time.perf_counter() - begin) * 1e3
    angles = np.degrees(subspace_angles(result["W"].mean, w_true))
    print(f"VMP: {SWEEPS} sweeps ({ms:.0f} ms); "
          f"bound {result.log_evidence:.6f}, never falling: "
          f"{bool(np.all(np.diff(result.trace) > -1e-9 * abs(result.trace[-1])))}")
    print(f"noise sd {1 / np.sqrt(result['tau'].mean):.4f} (true 0.3); largest angle to the "
          f"true subspace {angles.max():.3f}°")
    # ARD: K = 4 latent dimensions for data of 2; two columns of W are switched off
    wide = ff.distributions.VectorGaussian(rng.normal(size=(len(y), 4)),
                                           np.broadcast_to(np.eye(4), (len(y), 4, 4)))
    ard = pca(y, 4, ard=True).compile("vmp", init=["z"]).run(
        init={"z": wide}, iterations=4 * SWEEPS, tolerance=None)
    alpha = np.sort(ard["alpha"].mean)
    print(f"ARD with K = 4: E[alpha] = {np.array2string(alpha, precision=3)} (two large: "
          f"those columns of W switched off); bound {ard.log_evidence:.6f}")
    # missing values: 30% of the entries hidden, then predicted by E[W] E[z]
    y_full, _, clean = data(clean=True)
    missing = np.random.default_rng(2).random(y_full.shape) < 0.3
    masked = pca(np.ma.masked_array(y_full, mask=missing), k).compile("vmp", init=["z"]).run(
        init={"z": start}, iterations=SWEEPS, tolerance=None)
    predicted = masked["z"].mean @ masked["W"].mean.T
    rmse = float(np.sqrt(np.mean((predicted - clean)[missing] ** 2)))
    means = np.ma.masked_array(y_full, mask=missing).mean(axis=0).filled()  # the seen ones'
    baseline = float(np.sqrt(np.mean((np.broadcast_to(means, clean.shape) - clean)[missing]
                                     ** 2)))
    print(f"{missing.mean():.0%} of the entries missing: RMSE of E[W] E[z] there against "
          f"the noise-free values {rmse:.4f} (the seen entries' column means: "
          f"{baseline:.4f}); noise sd learnt {1 / np.sqrt(masked['tau'].mean):.4f} (0.3)")
    return {"result": result, "y": y, "angles": angles, "init": start, "ard": ard,
            "ard_init": wide, "masked": masked, "missing": missing, "y_full": y_full,
            "missing_rmse": rmse, "baseline_rmse": baseline}


if __name__ == "__main__":
    main()
