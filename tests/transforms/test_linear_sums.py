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

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import factorflow as ff
from factorflow.transforms.linear_sums import split_linear_sums
from factorflow.transforms.pipeline import compile_program
from tests.oracle.checks import oracle_settings
from tests.oracle.test_oracle_sums import MEANS, PRECISIONS, mean_field_elbo
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
    """VMP on ``model`` against ``mean_field_fixed_point`` on ``factors`` (``moments``:
    q's means and variances from the posteriors, in the factors' order): no warning, the
    bound never falls (1e-12 relative) and is the ELBO of each sweep's q, the fixed
    point (1e-9) and its bound."""
    mean, var = mean_field_fixed_point(factors, len(factors[0][0]))
    elbos = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = model.compile("vmp").run(
            iterations=20_000, tolerance=1e-13,
            on_iteration=lambda _, q: elbos.append(mean_field_elbo(factors, *moments(q))))
    trace = np.asarray(result.trace)
    assert np.all(np.isfinite(trace))
    np.testing.assert_allclose(trace, elbos, rtol=1e-10, atol=1e-10)
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


# ----- sums over an outer plate of sums: each variable's sum over both plates (sums19) ----
#: the inner sum s[k] over n: its array, a linear combination of x and z
INNER = {"x - 2 z": lambda x, z: x - 2.0 * z, "x + z + 1.5": lambda x, z: x + z + 1.5,
         "x": lambda x, z: x}
#: the outer sum from the inner sums (T = Σ_k s[k]); "Σ Σ x - Σ Σ z" sums x's and z's
#: inner sums apart (one variable each)
OUTER = ("Σ s", "Σ Σ x - Σ Σ z")


def _nested(sizes, priors, inner, outer, child, element_data):
    """x[k, n] ~ N(mx, 1/px), z[k, n] ~ N(mz, 1/pz); s[k] = Σ_n INNER[inner](x, z); T by
    ``outer``; t ~ N(T, 1/τ) observed, or (``child``: ν) u ~ N(T, 1/ν) and t ~ N(u, 1/τ);
    ``element_data``: y[k, n] ~ N(x[k, n], 1/2) observed.  Returns the model, its factors
    N(d·w + k; 0, 1/τ) over w = (x, z[, u]) and the latents' names."""
    (kk, nn), (mx, px, mz, pz), (value, tau) = sizes, priors, (1.3, 2.0)
    rng = np.random.default_rng(kk * 10 + nn)
    y = rng.choice((-2.1, -0.4, 0.3, 1.6, 3.2), size=(kk, nn))
    with ff.Model() as model:
        k, n = ff.Range("k", kk), ff.Range("n", nn)
        with ff.Plate(k):
            with ff.Plate(n):
                x = ff.Gaussian("x", mx, precision=px)
                z = ff.Gaussian("z", mz, precision=pz)
                if element_data:
                    ff.Gaussian("y", x, precision=2.0, observed=y)
                a = INNER[inner](x, z)
            if outer == "Σ s":
                s = ff.sum(a, n)
            else:
                sx, sz = ff.sum(x, n), ff.sum(z, n)
        total = ff.sum(s, k) if outer == "Σ s" else ff.sum(sx, k) - ff.sum(sz, k)
        if child is None:
            ff.Gaussian("t", total, precision=tau, observed=value)
        else:
            u = ff.Gaussian("u", total, precision=child)
            ff.Gaussian("t", u, precision=tau, observed=value)
    size = kk * nn
    dim = 2 * size + (child is not None)
    unit = np.eye(dim)
    ones = np.ones(size)
    cx, cz, offset = {"x - 2 z": (1.0, -2.0, 0.0), "x + z + 1.5": (1.0, 1.0, 1.5 * size),
                      "x": (1.0, 0.0, 0.0)}[inner]
    if outer == "Σ Σ x - Σ Σ z":
        cx, cz, offset = 1.0, -1.0, 0.0
    d = np.r_[cx * ones, cz * ones, np.zeros(dim - 2 * size)]  # T = d·w + offset
    factors = [(unit[i], -np.ravel(mx)[i % np.size(mx)], np.ravel(px)[i % np.size(px)])
               for i in range(size)]
    factors += [(unit[size + i], -np.ravel(mz)[i % np.size(mz)],
                 np.ravel(pz)[i % np.size(pz)]) for i in range(size)]
    if element_data:
        factors += [(unit[i], -y.flat[i], 2.0) for i in range(size)]
    if child is None:
        factors.append((d, offset - value, tau))
    else:
        factors += [(unit[-1] - d, -offset, child), (unit[-1], -value, tau)]
    return model, factors, ("x", "z") + (("u",) if child is not None else ())


def _nested_check(model, factors, names) -> None:
    """``_at_the_optimum`` with q's moments of the variables ``names``."""
    _at_the_optimum(model, factors, lambda q: (
        np.concatenate([np.ravel(q[v].mean) for v in names]),
        np.concatenate([np.ravel(q[v].variance) for v in names])))


def _nested_model(**overrides):
    args = dict(sizes=(2, 3), priors=(0.0, 1.0, 1.0, 2.0), inner="x - 2 z", outer="Σ s",
                child=None, element_data=False)
    args.update(overrides)
    return _nested(**args)


def test_a_sum_of_sums_is_each_variables_sum_over_both_plates():
    """Σ_k s[k], s[k] = Σ_n (x − 2 z): Σ_(k, n) x − 2 Σ_(k, n) z, one ``MultiPlateSum``
    per variable (a scale comes out, so that every sum of z over both plates is one);
    s keeps its definition (its posterior), read by nothing."""
    model, _, _ = _nested_model()
    text = str(_split(model, "vmp"))
    assert "v_x__sum_n_k = MultiPlateSum(array=v_x[v_k, v_n], axes=2" in text
    assert "v_z__sum_n_k = MultiPlateSum(array=v_z[v_k, v_n], axes=2" in text
    assert "v_sum_sum_x_z_2_0_n_k__part = ScaleBy(a=v_z__sum_n_k, scale=2.0)" in text
    assert "= Minus(a=v_x__sum_n_k, b=v_sum_sum_x_z_2_0_n_k__part)" in text
    assert "v_sum_x_z_2_0_n[v_k] = PlateSum(array=v_x_z_2_0[v_k, v_n])" in text
    assert "PlateSum(array=v_sum_x_z_2_0_n[v_k])" not in text


@pytest.mark.parametrize("outer", OUTER)
@pytest.mark.parametrize("inner", sorted(INNER))
def test_a_sum_of_sums_reaches_the_mean_field_optimum(inner, outer):
    """K = 2, N = 3.  Before, Σ_k of a split sum was refused, and Σ_k Σ_n x − Σ_k Σ_n z
    (one variable each) ended in NaN (ImproperMessageError after ~10 sweeps): nested,
    the outer sum's update read q(s) / its message as s's other messages, a step with
    the wrong curvature; Σ_k Σ_n x alone took up to 367 sweeps."""
    _nested_check(*_nested_model(inner=inner, outer=outer))


@st.composite
def nested_models(draw):
    """K 1-3, N 1-4, per-element or shared priors, the inner and outer forms, data on
    the total (directly or through a latent child) and maybe on the elements."""
    kk, nn = draw(st.integers(1, 3)), draw(st.integers(1, 4))

    def prior(values):
        if draw(st.booleans()):
            return draw(st.sampled_from(values))
        return np.array([[draw(st.sampled_from(values)) for _ in range(nn)]
                         for _ in range(kk)])

    return dict(sizes=(kk, nn), priors=(prior(MEANS), prior(PRECISIONS), prior(MEANS),
                                        prior(PRECISIONS)),
                inner=draw(st.sampled_from(sorted(INNER))),
                outer=draw(st.sampled_from(OUTER)),
                child=draw(st.sampled_from((None, 0.5, 4.0))),
                element_data=draw(st.booleans()))


@oracle_settings(15)
@given(nested_models())
def test_sums_of_sums_are_coordinate_ascent(spec):
    _nested_check(*_nested(**spec))


#: a sum of sums refused by name: what else uses the inner sum or x, and what the
#: message names.  "y ~ s": s[k] = Σ_n (x − 2 z) read by y[k] ~ N(s[k], 1/2) too (as
#: before, ``messages._refuse_shared_inner_sums``); "y ~ Σ x": r[k] = Σ_n x read by
#: y[k] ~ N(r[k], 1/2), beside Σ_(k, n) x from Σ_k s[k]: two block updates of x's
#: elements, each taking the other's message for fixed (no coordinate ascent: sum17's
#: finding for two sums over one plate)
SECOND_USES = {"y ~ s": ('ff.Gaussian("y", s', "'ep'", "precision"),
               "y ~ Σ x": ("'x'", "r = ff.sum(x, n)", "coordinate ascent", "'ep'")}


@pytest.mark.parametrize("use", sorted(SECOND_USES))
def test_a_sum_of_sums_with_a_second_use_is_refused_by_name(use):
    with ff.Model() as model:
        k, n = ff.Range("k", 2), ff.Range("n", 3)
        with ff.Plate(k):
            with ff.Plate(n):
                x = ff.Gaussian("x", 0.0, precision=1.0)
                z = ff.Gaussian("z", 1.0, precision=2.0)
                a = x - 2.0 * z
            s = ff.sum(a, n)
            r = ff.sum(x, n)
            ff.Gaussian("y", s if use == "y ~ s" else r, precision=2.0,
                        observed=np.array([0.5, -1.0]))
        ff.Gaussian("t", ff.sum(s, k), precision=3.0, observed=2.5)
    with pytest.raises(ff.UnsupportedFactorError) as info:
        model.compile("vmp")
    message = str(info.value)
    assert "ff.sum(s, k)" in message
    for part in SECOND_USES[use]:
        assert part in message


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
