"""transforms.linear_sums: under VMP, ``ff.sum`` of a linear combination of several latent
variables is that combination of one-variable sums (sum18).

The rewritten program is the same model (the sums are equal as functions of the
latents), so VMP must reach the mean-field optimum of the original model: checked here
against ``mean_field_fixed_point`` (coordinate ascent on the exact ELBO in NumPy, 1e-9)
on shapes the generator of test_regressions17_sums does not draw: the summed array with
another use, a latent without the plate.  EP and one variable's sums are left as
written; a sum of such sums over an outer plate is refused by name.
"""

from __future__ import annotations

import numpy as np
import pytest

import factorflow as ff
from factorflow.transforms.linear_sums import split_linear_sums
from factorflow.transforms.pipeline import compile_program
from tests.oracle.test_oracle_sums import mean_field_elbo
from tests.oracle.test_regressions17_sums import mean_field_fixed_point


def _plus(other_use: bool = False, n_size: int = 3):
    """x[i] ~ N(mx_i, 1/px_i), z[i] ~ N(mz_i, 1/pz_i), a = x + z, t ~ N(Σ a, 1/4)
    observed, and (``other_use``) y[i] ~ N(a_i, 1/2) observed.  The model and its
    factors N(d·w + k; 0, 1/τ) over w = (x, z)."""
    rng = np.random.default_rng(7)
    mx, px = rng.normal(size=n_size), rng.uniform(0.5, 3.0, size=n_size)
    mz, pz = rng.normal(size=n_size), rng.uniform(0.5, 3.0, size=n_size)
    y = rng.normal(size=n_size)
    with ff.Model() as model:
        n = ff.Range("n", n_size)
        with ff.Plate(n):
            x = ff.Gaussian("x", mx, precision=px)
            z = ff.Gaussian("z", mz, precision=pz)
            a = x + z
            if other_use:
                ff.Gaussian("y", a, precision=2.0, observed=y)
        ff.Gaussian("t", ff.sum(a, n), precision=4.0, observed=1.5)
    unit = np.eye(2 * n_size)
    factors = [(unit[i], -mx[i], px[i]) for i in range(n_size)]
    factors += [(unit[n_size + i], -mz[i], pz[i]) for i in range(n_size)]
    factors.append((np.ones(2 * n_size), -1.5, 4.0))
    if other_use:
        factors += [(unit[i] + unit[n_size + i], -y[i], 2.0) for i in range(n_size)]
    return model, factors


def _split(model: ff.Model, algorithm: str):
    """The program the ``channels`` stage reads: the pass on the ``gates`` stage's."""
    return split_linear_sums(compile_program(model, algorithm).stages["gates"], algorithm)


def _at_the_optimum(model, factors, moments) -> None:
    mean, var = mean_field_fixed_point(factors, len(factors[0][0]))
    result = model.compile("vmp").run(iterations=20_000, tolerance=1e-13)
    assert result.converged
    trace = np.asarray(result.trace)
    assert np.all(np.isfinite(trace))
    falls = np.diff(trace) / np.maximum(1.0, np.abs(trace[:-1]))
    assert np.all(falls >= -1e-12), f"the bound fell by {-falls.min():.3g}"
    got_mean, got_var = moments(result)
    np.testing.assert_allclose(got_mean, mean, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got_var, var, rtol=1e-9, atol=1e-9)
    elbo = mean_field_elbo(factors, mean, var)
    assert abs(result.log_evidence - elbo) <= 1e-9 * max(1.0, abs(elbo))


def _xz(result):
    return (np.r_[result["x"].mean, result["z"].mean],
            np.r_[result["x"].variance, result["z"].variance])


def test_vmp_writes_the_sum_of_x_plus_z_as_the_sum_of_the_sums():
    model, _ = _plus()
    text = str(_split(model, "vmp"))
    assert "v_x__sum_n = PlateSum(array=v_x[v_n])" in text
    assert "v_z__sum_n = PlateSum(array=v_z[v_n])" in text
    assert "v_sum_x_z_n = Plus(a=v_x__sum_n, b=v_z__sum_n)" in text
    assert "PlateSum(array=v_x_z[v_n])" not in text
    assert "v_x_z[v_n] = Plus(a=v_x[v_n], b=v_z[v_n])" in text  # (x + z) keeps its q


def test_ep_and_one_variables_sums_are_left_as_written():
    model, _ = _plus()
    gates = compile_program(model, "ep").stages["gates"]
    assert split_linear_sums(gates, "ep") is gates
    with ff.Model() as one:
        n = ff.Range("n", 3)
        with ff.Plate(n):
            x = ff.Gaussian("x", 0.0, precision=1.0)
            scaled, shifted = np.array([1.0, -2.0, 0.5]) * x, x + 1.0
        for k, array in enumerate((x, scaled, shifted)):
            ff.Gaussian(f"t{k}", ff.sum(array, n), precision=2.0, observed=0.5)
    gates = compile_program(one, "vmp").stages["gates"]
    assert split_linear_sums(gates, "vmp") is gates


@pytest.mark.parametrize("size", [1, 3])
def test_the_summed_array_with_another_use_reaches_the_optimum(size):
    """a = x + z read by y[i] ~ N(a_i, 1/2) and by Σ a: a keeps its use, the sum is
    Σ x + Σ z."""
    _at_the_optimum(*_plus(other_use=True, n_size=size), _xz)


def test_a_sum_of_sums_of_several_variables_is_refused_by_name():
    """s[k] = Σ_n (x[k, n] − 2 z[k, n]) then Σ_k s[k] observed: the inner sum is split,
    the outer one is not (split too, the run went NaN) and is refused by name, not run
    to a wrong answer."""
    with ff.Model() as model:
        k, n = ff.Range("k", 2), ff.Range("n", 3)
        with ff.Plate(k):
            with ff.Plate(n):
                x = ff.Gaussian("x", 0.0, precision=1.0)
                z = ff.Gaussian("z", 1.0, precision=2.0)
                a = x - 2.0 * z
            s = ff.sum(a, n)
        ff.Gaussian("t", ff.sum(s, k), precision=3.0, observed=2.5)
    with pytest.raises(ff.UnsupportedFactorError) as info:
        model.compile("vmp")
    message = str(info.value)
    assert "ff.sum(s, k)" in message and "(x, z)" in message
    assert "coordinate ascent" in message and "precision" in message


def _broadcast(scale):
    """g ~ N(0.5, 1/2), x[i] ~ N(g, 1), t ~ N(Σ_i (x_i + scale · g), 1/4) observed."""
    with ff.Model() as model:
        g = ff.Gaussian("g", 0.5, precision=2.0)
        n = ff.Range("n", 3)
        with ff.Plate(n):
            x = ff.Gaussian("x", g, precision=1.0)
            a = x + scale * g
        ff.Gaussian("t", ff.sum(a, n), precision=4.0, observed=-1.0)
    return model


def test_a_latent_without_the_plate_is_summed_n_times():
    """Σ_i (x_i + 2 g) = Σ x + 3 · (2 g): before, the one-variable update of 2 g's
    broadcast elements took them for independent ones (the variance of g 0.2 in place
    of the optimum's)."""
    model = _broadcast(2.0)
    assert "ScaleBy(a=v_g, scale=3.0)" in str(_split(model, "vmp"))
    unit = np.eye(4)
    factors = [(unit[0], -0.5, 2.0)] + [(unit[1 + i] - unit[0], 0.0, 1.0) for i in range(3)]
    factors.append((np.r_[6.0, np.ones(3)], 1.0, 4.0))
    _at_the_optimum(model, factors, lambda r: (np.r_[r["g"].mean, r["x"].mean],
                                               np.r_[r["g"].variance, r["x"].variance]))


def test_a_latent_without_the_plate_scaled_per_element_is_refused_by_name():
    model = _broadcast(np.array([1.0, 2.0, 3.0]))
    with pytest.raises(ff.UnsupportedFactorError) as info:
        model.compile("vmp")
    message = str(info.value)
    assert "ff.sum(a, n)" in message and "'g'" in message
    assert "lacks that plate" in message and "np.sum(c) * g" in message


# ----- a product by a latent: refused per element, w * ff.sum(x, n) as advised -----------
def _product(size: int, seed: int, advised: bool):
    """x[i] ~ N(mx_i, 1/px_i), w ~ N(mw, 1/pw), t ~ N(Σ_i x_i w, 1/τ) observed, written
    ``ff.sum(x * w, n)`` or (``advised``) ``w * ff.sum(x, n)``."""
    rng = np.random.default_rng(seed)
    mx, px = rng.normal(size=size), rng.uniform(0.5, 3.0, size=size)
    mw, pw, tau, t = 1.0 + rng.normal() * 0.3, rng.uniform(0.5, 3.0), 4.0, rng.normal() * 3
    with ff.Model() as model:
        w = ff.Gaussian("w", mw, precision=pw)
        n = ff.Range("n", size)
        with ff.Plate(n):
            x = ff.Gaussian("x", mx, precision=px)
            product = x * w
        total = w * ff.sum(x, n) if advised else ff.sum(product, n)
        ff.Gaussian("t", total, precision=tau, observed=t)
    return model, (mx, px, mw, pw, tau, t)


def _product_mean_field(mx, px, mw, pw, tau, t, start: tuple[float, float]):
    """The mean-field optimum q(w) Π q(x_i) by coordinate ascent in NumPy, and its ELBO:
    given q(w), q(x) maximises Σ log N(x_i; mx_i, 1/px_i) − τ/2 E[w²] (Σ x)² + τ t E[w] Σ x
    (precision diag(px) + τ E[w²] 1 1ᵀ, variances 1/(px_i + τ E[w²])); given q(x), q(w)
    has precision pw + τ E[S²] and linear term pw mw + τ t E[S] (S = Σ x).  The bound
    has several local optima (the sign of w), so the ascent starts from q(w) = ``start``
    (mean, variance)."""
    ew, ew2 = start[0], start[0] ** 2 + start[1]
    mu = mx.copy()
    for _ in range(100_000):
        before = np.r_[mu, ew]
        a = np.diag(px) + tau * ew2
        mu = np.linalg.solve(a, px * mx + tau * t * ew)
        v = 1 / (px + tau * ew2)
        es, es2 = mu.sum(), mu.sum() ** 2 + v.sum()
        prec = pw + tau * es2
        ew = (pw * mw + tau * t * es) / prec
        ew2 = ew * ew + 1 / prec
        if np.max(np.abs(np.r_[mu, ew] - before)) < 1e-15:
            break
    vw = 1 / prec

    def expected_log_normal(m, v, mean, var_mean, p):  # E log N(y; mean, 1/p)
        return 0.5 * np.log(p / (2 * np.pi)) - 0.5 * p * ((m - mean) ** 2 + v + var_mean)

    elbo = float(np.sum(expected_log_normal(mu, v, mx, 0.0, px))
                 + expected_log_normal(ew, vw, mw, 0.0, pw)
                 + 0.5 * np.log(tau / (2 * np.pi)) - 0.5 * tau * (t * t - 2 * t * ew * es
                                                                    + ew2 * es2)
                 + 0.5 * np.sum(np.log(2 * np.pi * np.e * v)) + 0.5 * np.log(
                     2 * np.pi * np.e * vw))
    return mu, v, ew, vw, elbo


def test_a_sum_of_a_product_by_a_latent_is_refused_by_name():
    """Σ (x · w) with w without the plate is refused as with w per element
    (test_regressions17_sumref), and the refusal says to write w * ff.sum(x, n)."""
    model, _ = _product(3, 0, advised=False)
    with pytest.raises(ff.UnsupportedFactorError, match=r"ff\.sum\(product, n\).*"
                       r"w \* ff\.sum\(x, n\)"):
        model.compile("vmp")


@pytest.mark.parametrize("size", [1, 2, 5])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_advised_product_of_a_sum_reaches_the_mean_field_optimum(size, seed):
    """VMP's q is a fixed point of coordinate ascent on the exact ELBO (NumPy, started
    from VMP's q(w): the bound has a local optimum per sign of w), its bound that ELBO,
    and the bound never falls."""
    model, args = _product(size, seed, advised=True)
    result = model.compile("vmp").run(iterations=20_000, tolerance=1e-13)
    start = (float(result["w"].mean), float(result["w"].variance))
    mu, v, ew, vw, elbo = _product_mean_field(*args, start=start)
    assert result.converged
    trace = np.asarray(result.trace)
    falls = np.diff(trace) / np.maximum(1.0, np.abs(trace[:-1]))
    assert np.all(np.isfinite(trace)) and np.all(falls >= -1e-12)
    np.testing.assert_allclose(result["x"].mean, mu, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(result["x"].variance, v, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose([result["w"].mean, result["w"].variance], [ew, vw],
                               rtol=1e-9, atol=1e-9)
    assert abs(result.log_evidence - elbo) <= 1e-9 * max(1.0, abs(elbo))
