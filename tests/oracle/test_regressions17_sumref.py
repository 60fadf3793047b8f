"""VMP sum of sums whose inner sum has a second use (sumref, after sum17).

``s[k] = ff.sum(x[k, n], n)`` read by ``ff.sum(s, k)`` and also by ``y[k] ~ N(s[k], 1/τ)``:
the inner sum's update (``PlateSum``) takes its elements' posterior to be the product of
their messages, which a derived sum's is not when two factors send to it, so VMP
diverged (NaN posteriors after 200-1700 sweeps; on main the scheduler refused it).  It
is now refused at compile time by name (``transforms.messages._refuse_shared_inner_sums``);
the alternatives it names are checked here: EP is Gaussian conditioning, and the inner
sum made a latent with its own precision reaches the mean-field optimum of coordinate
ascent on the exact ELBO (``mean_field_fixed_point``, NumPy) with a bound that never falls.
The same shape without the second use is not refused and reaches that optimum too.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import factorflow as ff
from tests.oracle.checks import oracle_settings
from tests.oracle.test_oracle_sums import (
    DATA,
    MEANS,
    PRECISIONS,
    gaussian_reference,
    mean_field_elbo,
)
from tests.oracle.test_regressions17_sums import mean_field_fixed_point

K, N = 3, 4


def _data(seed: int):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(K, N)), rng.uniform(0.3, 3.0, size=(K, N)),
            rng.normal(size=K) * 2, float(rng.normal() * 3))


#: the outer sum's array from the inner sum s: itself, c * s, s + c (c known)
VIA = {"s": lambda s, c: s, "c * s": lambda s, c: c * s, "s + c": lambda s, c: s + c}


def _nested(seed: int, second_use: bool = True, latent: float | None = None,
            via: str = "s"):
    """x[k, n] ~ N(m0, v0); s[k] = Σ_n x[k, n] (or s[k] ~ N(Σ_n x[k, n], 1/latent));
    y[k] ~ N(s[k], 1/2) observed when ``second_use``; z ~ N(Σ_k VIA[via](s[k], c[k]), 1)
    observed.  Returns the model and its factor list N(d·w + c; 0, 1/τ) over
    w = (x, s if latent)."""
    m0, v0, y, z = _data(seed)
    c = np.random.default_rng(seed + 100).uniform(0.5, 2.0, size=K)
    with ff.Model() as model:
        k, n = ff.Range("k", K), ff.Range("n", N)
        with ff.Plate(k):
            with ff.Plate(n):
                x = ff.Gaussian("x", m0, variance=v0)
            s = ff.sum(x, n)
            if latent is not None:
                s = ff.Gaussian("s", s, precision=latent)
            if second_use:
                ff.Gaussian("y", s, precision=2.0, observed=y)
            t = VIA[via](s, c)
        ff.Gaussian("z", ff.sum(t, k), precision=1.0, observed=z)
    dim = K * N + (K if latent is not None else 0)
    unit = np.eye(dim)
    rows = [unit[i * N:(i + 1) * N].sum(0) for i in range(K)]  # d of Σ_n x[i, n]
    factors = [(unit[j], -m0.flat[j], 1 / v0.flat[j]) for j in range(K * N)]
    if latent is not None:  # s[i] - Σ_n x[i, n] ~ N(0, 1/latent)
        factors += [(unit[K * N + i] - rows[i], 0.0, latent) for i in range(K)]
        rows = [unit[K * N + i] for i in range(K)]
    if second_use:
        factors += [(rows[i], -y[i], 2.0) for i in range(K)]
    scale = c if via == "c * s" else np.ones(K)
    offset = c.sum() if via == "s + c" else 0.0
    factors.append((sum(a * r for a, r in zip(scale, rows, strict=True)), offset - z, 1.0))
    return model, factors, dim


@pytest.mark.parametrize("via", sorted(VIA))
def test_vmp_refuses_a_sum_of_sums_whose_inner_sum_has_a_second_use(via):
    """Before, it compiled and for most data diverged: NaN posteriors after 200-1700
    sweeps (s: seeds 0-3 of this family; c * s: seed 2, seeds 0-1 converged; s + c:
    seeds 0-2)."""
    model, _, _ = _nested(1, via=via)
    with pytest.raises(ff.UnsupportedFactorError) as info:
        model.compile("vmp")
    message = str(info.value)
    assert "ff.sum(t, k)" in message  # the outer sum, by its line
    assert "s = ff.sum(x, n)" in message  # the inner sum
    assert 'ff.Gaussian("y", s' in message  # its second use
    assert "'ep'" in message and "precision" in message  # what to write instead


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ep_conditions_exactly_on_the_refused_shape(seed):
    model, factors, dim = _nested(seed)
    log_z, mean, cov, _ = gaussian_reference(factors, dim)
    result = model.infer("ep", iterations=200, tolerance=1e-13)
    assert result.converged
    np.testing.assert_allclose(result["x"].mean.ravel(), mean, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(result["x"].variance.ravel(), np.diag(cov), rtol=1e-10,
                               atol=1e-10)
    assert abs(result.log_evidence - log_z) <= 1e-10 * max(1.0, abs(log_z))


def _vmp_at_the_optimum(model, factors, dim, names):
    mean, var = mean_field_fixed_point(factors, dim)
    result = model.compile("vmp").run(iterations=5000, tolerance=1e-13)
    assert result.converged
    trace = np.asarray(result.trace)
    falls = np.diff(trace) / np.maximum(1.0, np.abs(trace[:-1]))
    assert np.all(falls >= -1e-12), f"the bound fell by {-falls.min():.3g}"
    got_mean = np.concatenate([np.ravel(result[v].mean) for v in names])
    got_var = np.concatenate([np.ravel(result[v].variance) for v in names])
    np.testing.assert_allclose(got_mean, mean, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got_var, var, rtol=1e-9, atol=1e-9)
    elbo = mean_field_elbo(factors, mean, var)
    assert abs(result.log_evidence - elbo) <= 1e-9 * max(1.0, abs(elbo))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_inner_sum_as_a_latent_reaches_the_mean_field_optimum(seed):
    """The refusal's advice: s[k] ~ N(Σ_n x[k, n], 1/10) then both uses of s."""
    _vmp_at_the_optimum(*_nested(seed, latent=10.0), ("x", "s"))


@pytest.mark.parametrize("via", sorted(VIA))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_sum_of_sums_with_no_second_use_is_kept(seed, via):
    _vmp_at_the_optimum(*_nested(seed, second_use=False, via=via), ("x",))


# ----- ff.sum of an array computed from several latents ------------------------------
def _two_variables(size: int, tau: float, seed: int, form: str):
    """x[i], z[i] (or w) ~ N(m, 1/p) and an observed t ~ N(total, 1/τ), where total is
    Σ (x + z), Σ x + Σ z, or Σ (x · w) with w latent per element.  Returns the model and
    the factor list over (x, z) (linear forms only)."""
    rng = np.random.default_rng(seed)
    mx, px = rng.normal(size=size), rng.uniform(0.5, 3.0, size=size)
    mz, pz = rng.normal(size=size), rng.uniform(0.5, 3.0, size=size)
    observed = float(rng.normal() * 3)
    with ff.Model() as model:
        n = ff.Range("n", size)
        with ff.Plate(n):
            x = ff.Gaussian("x", mx, precision=px)
            z = ff.Gaussian("z", mz + (form == "x * w"), precision=pz)
            array = x * z if form == "x * w" else x + z
        total = ff.sum(x, n) + ff.sum(z, n) if form == "Σ x + Σ z" else ff.sum(array, n)
        ff.Gaussian("t", total, precision=tau, observed=observed)
    unit = np.eye(2 * size)
    factors = [(unit[i], -mx[i], px[i]) for i in range(size)]
    factors += [(unit[size + i], -mz[i], pz[i]) for i in range(size)]
    factors.append((np.ones(2 * size), -observed, tau))
    return model, factors


# ----- Σ_n x[n] w[n], x and w latent per element (sums19) ------------------------------
@dataclass(frozen=True)
class InnerModel:
    """x[k, n] ~ N(mx, 1/px), w[k, n] ~ N(mw, 1/pw); S[k] = ff.sum(x * w, n); t[k] ~
    N(S[k], 1/τ) observed, or (``child``: ν) u[k] ~ N(S[k], 1/ν) and t[k] ~ N(u[k], 1/τ);
    ``element_data``: y[k, n] ~ N(x[k, n], 1/2) observed; ``product_data``: r[k, n] ~
    N(x[k, n] w[k, n], 1/2) observed (the product with a use of its own)."""

    mx: np.ndarray
    px: np.ndarray
    mw: np.ndarray
    pw: np.ndarray
    t: np.ndarray
    tau: float
    child: float | None
    y: np.ndarray | None
    r: np.ndarray | None = None

    def build(self) -> ff.Model:
        kk, nn = self.mx.shape
        with ff.Model() as model:
            k, n = ff.Range("k", kk), ff.Range("n", nn)
            with ff.Plate(k):
                with ff.Plate(n):
                    x = ff.Gaussian("x", self.mx, precision=self.px)
                    w = ff.Gaussian("w", self.mw, precision=self.pw)
                    if self.y is not None:
                        ff.Gaussian("y", x, precision=2.0, observed=self.y)
                    product = x * w
                    if self.r is not None:
                        ff.Gaussian("r", product, precision=2.0, observed=self.r)
                total = ff.sum(product, n)
                if self.child is not None:
                    total = ff.Gaussian("u", total, precision=self.child)
                ff.Gaussian("t", total, precision=self.tau, observed=self.t)
        return model

    def sweep(self, q: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One sweep of coordinate ascent on the exact ELBO (NumPy): q(x[k]) given q(w),
        q(u), then q(w[k]) given q(x), q(u), then q(u): each the exact optimum of its
        block, a Gaussian whose precision is 1/var on the diagonal and
        diag(p + τ_S Var v) + τ_S E[v] E[v]ᵀ in all (E[(Σ x w)²] = xᵀ (E w E wᵀ +
        diag Var w) x), solved densely (np.linalg.solve); (h_S, τ_S) the data on S."""
        q = dict(q)
        h_s, tau_s = ((self.child * q["mu"], self.child) if self.child is not None
                      else (self.tau * self.t, self.tau))
        for me, other, prior_m, prior_p in (("x", "w", self.mx, self.px),
                                            ("w", "x", self.mw, self.pw)):
            e, v = q["m" + other], q["v" + other]
            data = 2.0 if me == "x" and self.y is not None else 0.0
            linear = prior_p * prior_m + (2.0 * self.y if data else 0.0)
            if self.r is not None:  # E[(r − x w)²] given q(w): 2 E[w²] x² − 4 r E[w] x
                data = data + 2.0 * (e * e + v)
                linear = linear + 2.0 * self.r * e
            for k in range(self.mx.shape[0]):
                a = np.diag((prior_p + data)[k] + tau_s * v[k]) + tau_s * np.outer(e[k], e[k])
                q["m" + me][k] = np.linalg.solve(a, linear[k] + np.atleast_1d(h_s)[k] * e[k])
            q["v" + me] = 1.0 / (prior_p + data + tau_s * (e * e + v))
        if self.child is not None:
            es = np.sum(q["mx"] * q["mw"], axis=1)
            q["vu"] = np.full(es.shape, 1.0 / (self.child + self.tau))
            q["mu"] = (self.child * es + self.tau * self.t) * q["vu"]
        return q

    def elbo(self, q: dict[str, np.ndarray]) -> float:
        """E_q[log p] + H[q], in closed form."""
        def expected_log_normal(m, v, mean, var_mean, p):  # E log N(a; b, 1/p)
            return np.sum(0.5 * np.log(p / (2 * np.pi))
                          - 0.5 * p * ((m - mean) ** 2 + v + var_mean))

        es = np.sum(q["mx"] * q["mw"], axis=1)
        vs = np.sum((q["mx"] ** 2 + q["vx"]) * (q["mw"] ** 2 + q["vw"])
                    - q["mx"] ** 2 * q["mw"] ** 2, axis=1)
        out = expected_log_normal(q["mx"], q["vx"], self.mx, 0.0, self.px)
        out += expected_log_normal(q["mw"], q["vw"], self.mw, 0.0, self.pw)
        if self.y is not None:
            out += expected_log_normal(q["mx"], q["vx"], self.y, 0.0, 2.0)
        if self.r is not None:
            second = (q["mx"] ** 2 + q["vx"]) * (q["mw"] ** 2 + q["vw"])
            mean = q["mx"] * q["mw"]
            out += expected_log_normal(mean, second - mean ** 2, self.r, 0.0, 2.0)
        entropy = [q["vx"], q["vw"]]
        if self.child is None:
            out += expected_log_normal(es, vs, self.t, 0.0, self.tau)
        else:
            out += expected_log_normal(q["mu"], q["vu"], es, vs, self.child)
            out += expected_log_normal(q["mu"], q["vu"], self.t, 0.0, self.tau)
            entropy.append(q["vu"])
        return float(out + sum(0.5 * np.sum(np.log(2 * np.pi * np.e * v)) for v in entropy))

    def q(self, posteriors) -> dict[str, np.ndarray]:
        names = ("x", "w") + (("u",) if self.child is not None else ())
        out = {}
        for v in names:
            out["m" + v] = np.array(np.broadcast_to(posteriors[v].mean, self.shape(v)), float)
            out["v" + v] = np.array(np.broadcast_to(posteriors[v].variance, self.shape(v)),
                                    float)
        return out

    def shape(self, name: str) -> tuple[int, ...]:
        return self.mx.shape if name in ("x", "w") else self.mx.shape[:1]


@st.composite
def inner_models(draw) -> InnerModel:
    """K 1-3, N 1-4; priors, data and precisions from the oracle lists; w's means away
    from 0 or not."""
    kk, nn = draw(st.integers(1, 3)), draw(st.integers(1, 4))

    def array(values, shape=(kk, nn)):
        return np.array([draw(st.sampled_from(values)) for _ in range(int(np.prod(shape)))]
                        ).reshape(shape)

    return InnerModel(array(MEANS), array(PRECISIONS), array(MEANS + (1.5, -2.5)),
                      array(PRECISIONS), array(DATA, (kk,)),
                      draw(st.sampled_from((0.5, 2.0, 8.0, 32.0))),
                      draw(st.sampled_from((None, 0.5, 4.0))),
                      array(DATA) if draw(st.booleans()) else None,
                      array(DATA) if draw(st.integers(0, 3)) == 0 else None)


def inner_check(spec: InnerModel) -> None:
    """VMP on Σ x · w against the NumPy coordinate ascent: the bound is the exact ELBO of
    each sweep's q (1e-10) and never falls (1e-12 relative); q at the end is a fixed
    point of the ascent (1e-9: the bound has several local optima, one per sign
    pattern of the means, so the ascent starts from VMP's q), with no NaN."""
    elbos = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = spec.build().compile("vmp").run(
            iterations=20_000, tolerance=1e-13,
            on_iteration=lambda _, post: elbos.append(spec.elbo(spec.q(post))))
    trace = np.asarray(result.trace)
    assert result.converged and np.all(np.isfinite(trace)), spec
    np.testing.assert_allclose(trace, elbos, rtol=1e-10, atol=1e-10)
    falls = np.diff(trace) / np.maximum(1.0, np.abs(trace[:-1]))
    assert np.all(falls >= -1e-12), f"the bound fell by {-falls.min():.3g}\n{spec}"
    q = spec.q(result)
    again = spec.sweep(q)
    for key in q:
        np.testing.assert_allclose(again[key], q[key], rtol=1e-9, atol=1e-9, err_msg=key)
    assert abs(result.log_evidence - spec.elbo(q)) <= 1e-10 * max(1.0, abs(spec.elbo(q)))


@oracle_settings(20)
@given(inner_models())
def test_vmp_sum_of_a_product_of_latent_plates_is_coordinate_ascent(spec):
    """Σ_n x[n] w[n] with x and w latent per element (``factors.plate_sum``,
    ``PlateInner``: a block update of x given q(w), one of w given q(x)).  Before, it
    was refused (sumref), and with sum17's fallback 138 of 256 such models had not
    converged, the bound falling by up to 5e4."""
    inner_check(spec)


def test_the_sum_of_a_product_is_one_factor_with_a_block_update_each():
    """``ff.sum(x * w, n)`` compiles to one ``PlateInner`` (the product x * w keeps its
    definition, read by nothing), whose updates of x and w each read the other's
    posterior and the message they sent last."""
    from factorflow.transforms.linear_sums import split_linear_sums
    from factorflow.transforms.pipeline import compile_program

    spec = InnerModel(np.zeros((1, 3)), np.ones((1, 3)), np.ones((1, 3)), np.ones((1, 3)),
                      np.array([1.0]), 2.0, None, None)
    model = spec.build()
    text = str(split_linear_sums(compile_program(model, "vmp").stages["gates"], "vmp"))
    assert "v_sum_x_w_n[v_k] = PlateInner(a=v_x[v_k, v_n], b=v_w[v_k, v_n])" in text
    loop = model.compile("vmp").source.split("# ---- iterations")[1]
    assert "PlateInner_a_average_logarithm(sum=" in loop
    assert "PlateInner_b_average_logarithm(sum=" in loop
    assert "previous=" in loop.split("PlateInner_a_average_logarithm(")[1].split("\n")[0]


def test_a_product_sum_beside_another_sum_of_its_elements_is_refused_by_name():
    """Σ x · w and Σ x, both observed: x would get two block updates, each taking the
    other's message for fixed (no coordinate ascent), so it is refused by name."""
    with ff.Model() as model:
        n = ff.Range("n", 3)
        with ff.Plate(n):
            x = ff.Gaussian("x", 0.0, precision=1.0)
            w = ff.Gaussian("w", 1.0, precision=2.0)
            product = x * w
        ff.Gaussian("t", ff.sum(product, n), precision=3.0, observed=2.5)
        ff.Gaussian("t2", ff.sum(x, n), precision=3.0, observed=-1.0)
    with pytest.raises(ff.UnsupportedFactorError) as info:
        model.compile("vmp")
    message = str(info.value)
    assert "ff.sum(product, n)" in message and "'x'" in message
    assert "product of two latent plates" in message and 'ff.Gaussian("t2"' in message
    assert "coordinate ascent" in message and "'ep'" in message
    assert "p = ff.Gaussian('p', x * w, precision=100.0)" in message


@pytest.mark.parametrize("form", ["x + z", "Σ x + Σ z"])
@pytest.mark.parametrize("size", [1, 2, 3, 5])
@pytest.mark.parametrize("tau", [0.5, 8.0, 32.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_sum_of_several_variables_is_coordinate_ascent(size, tau, seed, form):
    """Σ (x + z) (written as Σ x + Σ z by ``transforms.linear_sums``) and Σ x + Σ z on
    the same family: no warning, the bound never falls (1e-12 relative), the mean-field
    optimum (1e-9); Σ (x + z) with N = 2, τ = 8, seed 1 fell by 0.27 and did not
    converge in 3000 sweeps with sum17's fallback schedule (and 39 of 128 such models
    ended in NaN)."""
    import warnings

    model, factors = _two_variables(size, tau, seed, form)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ff.ScheduleWarning)
        compiled = model.compile("vmp")
    mean, var = mean_field_fixed_point(factors, 2 * size)
    result = compiled.run(iterations=5000, tolerance=1e-13)
    assert result.converged
    trace = np.asarray(result.trace)
    assert np.all(np.isfinite(trace))
    falls = np.diff(trace) / np.maximum(1.0, np.abs(trace[:-1]))
    assert np.all(falls >= -1e-12), f"the bound fell by {-falls.min():.3g}"
    np.testing.assert_allclose(np.r_[result["x"].mean, result["z"].mean], mean, rtol=1e-9,
                               atol=1e-9)
    np.testing.assert_allclose(np.r_[result["x"].variance, result["z"].variance], var,
                               rtol=1e-9, atol=1e-9)
    elbo = mean_field_elbo(factors, mean, var)
    assert abs(result.log_evidence - elbo) <= 1e-9 * max(1.0, abs(elbo))
