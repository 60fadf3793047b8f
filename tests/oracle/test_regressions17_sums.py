"""VMP over several ``ff.sum`` of one plate (issue 11, sum17): one block update of the
elements over every sum that reads them (``factors.plate_sum``, ``PlateSums``).

Generator: a plate of N = 1-5 elements x[i] ~ N(g, 1/p) (g latent, maybe under a latent
h), maybe a second plate variable z[i] ~ N(g or x[i], 1/p_z) in the same plate (connected:
one loop of sweeps),
data on the elements (y[i] ~ N(x[i], 1/τ), maybe on z too), and 2-3 sums, each of x or
of z (shared or different elements), maybe weighted per element (``ff.sum(c * x, n)``),
observed directly or through a latent child.  The model is linear-Gaussian: the
reference is its list of Gaussian factors N(d·w + k; 0, 1/τ) over the latents w, from
which ``mean_field_fixed_point`` finds the mean-field optimum by coordinate ascent on
the exact ELBO written here in NumPy (Gauss-Seidel over the latents, each q(w_j) the
exact optimum given the others), checked against the closed form (means the exact
posterior means, variances 1/J_jj).  VMP must reach it (1e-9), with a bound that never
falls (1e-12 relative) and that is, after every sweep, the ELBO of that sweep's q.
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
    COEFFICIENTS,
    DATA,
    MEANS,
    PRECISIONS,
    gaussian_reference,
    mean_field_elbo,
)

#: the precisions of the sums' observations: strong ones too, where each sum's own update
#: (the others' couplings linearised) let the bound fall by up to 0.17 and diverge
SUM_PRECISIONS = (0.5, 2.0, 8.0, 32.0)


#: one term of a sum's array: (``x`` or ``z``, per-element coefficients or None), or
#: (``g``, a scale or None: g broadcast over the plate), or (``1``, a constant)
Term = tuple[str, "tuple[float, ...] | float | None"]


@dataclass(frozen=True)
class SumsModel:
    size: int
    top: tuple[float, float] | None  # h ~ N(mean, 1/precision), g's mean when given
    common: tuple[float, float]  # g ~ N(mean or h, 1/precision)
    precision: float  # of each x[i] ~ N(g, 1/precision)
    other: tuple[str, float] | None  # z[i] ~ N(g or x[i], 1/precision)
    element_data: tuple[tuple[float, ...], float] | None  # y[i] ~ N(x[i], 1/τ)
    other_data: tuple[tuple[float, ...], float] | None  # w[i] ~ N(z[i], 1/τ)
    #: each sum: (its array's terms, added: ``ff.sum(x + c * z + g + 1.5, n)``; via a
    #: latent child's precision or None; (observed value, precision))
    sums: tuple[tuple[tuple[Term, ...], float | None, tuple[float, float]], ...]

    def code(self) -> str:
        lines = ["import numpy as np", "import factorflow as ff", "",
                 "with ff.Model('sums17') as model:"]
        mean = repr(self.common[0])
        if self.top is not None:
            lines.append(f"    h = ff.Gaussian('h', {self.top[0]!r}, "
                         f"precision={self.top[1]!r})")
            mean = "h"
        lines.append(f"    g = ff.Gaussian('g', {mean}, precision={self.common[1]!r})")
        lines.append(f"    n = ff.Range('n', {self.size})")
        lines.append("    with ff.Plate(n):")
        lines.append(f"        x = ff.Gaussian('x', g, precision={self.precision!r})")
        if self.other is not None:
            lines.append(f"        z = ff.Gaussian('z', {self.other[0]}, "
                         f"precision={self.other[1]!r})")
        for name, of, data in (("y", "x", self.element_data), ("w", "z", self.other_data)):
            if data is not None:
                lines.append(f"        ff.Gaussian('{name}', {of}, precision={data[1]!r}, "
                             f"observed=np.array({list(data[0])!r}))")
        summed = []
        for k, (terms, _, _) in enumerate(self.sums):
            parts = []
            for j, (of, c) in enumerate(terms):
                if of == "1":
                    parts.append(repr(c))
                elif c is None:
                    parts.append(of)
                elif of == "g":
                    parts.append(f"{c!r} * g")
                else:
                    name = f"c{k}" if len(terms) == 1 else f"c{k}_{j}"
                    lines.append(f"        {name} = np.array({list(c)!r}) * {of}")
                    parts.append(name)
            if len(parts) > 1:
                lines.append(f"        a{k} = {' + '.join(parts)}")
            summed.append(parts[0] if len(parts) == 1 else f"a{k}")
        for k, (_, via, (value, tau)) in enumerate(self.sums):
            if via is None:
                lines.append(f"    ff.Gaussian('t{k}', ff.sum({summed[k]}, n), "
                             f"precision={tau!r}, observed={value!r})")
            else:
                lines.append(f"    u{k} = ff.Gaussian('u{k}', ff.sum({summed[k]}, n), "
                             f"precision={via!r})")
                lines.append(f"    ff.Gaussian('t{k}', u{k}, precision={tau!r}, "
                             f"observed={value!r})")
        return "\n".join(lines) + "\n"

    __str__ = code

    def build(self) -> ff.Model:
        namespace: dict = {}
        exec(compile(self.code(), "<sums17 model>", "exec"), namespace)
        return namespace["model"]

    def latents(self) -> list[str]:
        return (["h"] if self.top else []) + ["g"] + [
            f"x[{i}]" for i in range(self.size)] + (
            [f"z[{i}]" for i in range(self.size)] if self.other else []) + [
            f"u{k}" for k, (_, via, _) in enumerate(self.sums) if via is not None]

    def factors(self) -> list[tuple[np.ndarray, float, float]]:
        """Every factor as (d, k, τ): N(d·w + k; 0, 1/τ) over the latents w."""
        at = {name: i for i, name in enumerate(self.latents())}

        def unit(*terms: tuple[str, float]) -> np.ndarray:
            d = np.zeros(len(at))
            for name, c in terms:
                d[at[name]] += c
            return d

        out = []
        if self.top is not None:
            out.append((unit(("h", 1.0)), -self.top[0], self.top[1]))
            out.append((unit(("g", 1.0), ("h", -1.0)), 0.0, self.common[1]))
        else:
            out.append((unit(("g", 1.0)), -self.common[0], self.common[1]))
        for i in range(self.size):
            out.append((unit((f"x[{i}]", 1.0), ("g", -1.0)), 0.0, self.precision))
            if self.other is not None:
                mean = "g" if self.other[0] == "g" else f"x[{i}]"
                out.append((unit((f"z[{i}]", 1.0), (mean, -1.0)), 0.0, self.other[1]))
            for of, data in (("x", self.element_data), ("z", self.other_data)):
                if data is not None:
                    out.append((unit((f"{of}[{i}]", 1.0)), -data[0][i], data[1]))
        for k, (terms, via, (value, tau)) in enumerate(self.sums):
            s, offset = np.zeros(len(at)), 0.0  # the sum is s·w + offset
            for of, c in terms:
                if of == "1":
                    offset += self.size * c
                elif of == "g":
                    s += unit(("g", self.size * (1.0 if c is None else c)))
                else:
                    c = [1.0] * self.size if c is None else c
                    s += unit(*((f"{of}[{i}]", c[i]) for i in range(self.size)))
            if via is None:
                out.append((-s, value - offset, tau))
            else:
                out.append((unit((f"u{k}", 1.0)) - s, -offset, via))
                out.append((unit((f"u{k}", 1.0)), -value, tau))
        return out

    def mean_field(self, posteriors) -> tuple[np.ndarray, np.ndarray]:
        """q's means and variances in the order of ``latents``."""
        names = (["h"] if self.top else []) + ["g"]
        m = [float(posteriors[v].mean) for v in names]
        v = [float(posteriors[v].variance) for v in names]
        for plate in ("x", "z") if self.other else ("x",):
            m += list(np.ravel(posteriors[plate].mean))
            v += list(np.ravel(posteriors[plate].variance))
        for k, (_, via, _) in enumerate(self.sums):
            if via is not None:
                m.append(float(posteriors[f"u{k}"].mean))
                v.append(float(posteriors[f"u{k}"].variance))
        return np.array(m), np.array(v)


@st.composite
def sums_models(draw, count: tuple[int, int] = (2, 3), size: int = 5, terms: int = 1,
                other: bool = True, sum_precisions: tuple[float, ...] = SUM_PRECISIONS
                ) -> SumsModel:
    """The one generator of VMP sum models (sums16's and sums17's, and sums18's sums of
    several variables): N = 1-``size`` elements, ``count`` sums, each of 1-``terms``
    terms of distinct variables (the first a plate variable, x or z; then x or z, maybe
    weighted per element, g maybe scaled, or a constant), ``other``: z maybe present."""
    n = draw(st.integers(1, size))

    def maybe(p: int, make):
        return make() if draw(st.integers(0, 9)) < p else None

    def prior() -> tuple[float, float]:
        return draw(st.sampled_from(MEANS)), draw(st.sampled_from(PRECISIONS))

    def data() -> tuple[tuple[float, ...], float]:
        return (tuple(draw(st.sampled_from(DATA)) for _ in range(n)),
                draw(st.sampled_from(PRECISIONS)))

    z = maybe(4, lambda: (draw(st.sampled_from(("g", "x"))),
                          draw(st.sampled_from(PRECISIONS)))) if other else None
    sums = []
    for _ in range(draw(st.integers(*count))):
        parts: list[Term] = []
        for j in range(draw(st.integers(1, terms))):
            plate = ("x", "z") if z else ("x",)  # (each term of another variable)
            left = [v for v in (plate if j == 0 else plate + ("g", "1"))
                    if v not in {t for t, _ in parts}]
            if not left:
                break
            of = draw(st.sampled_from(left))
            if of == "1":
                parts.append((of, draw(st.sampled_from(DATA))))
            elif of == "g":
                parts.append((of, draw(st.sampled_from((None,) + COEFFICIENTS))))
            else:
                parts.append((of, tuple(draw(st.sampled_from(COEFFICIENTS)) for _ in range(n))
                              if draw(st.booleans()) else None))
        via = maybe(3, lambda: draw(st.sampled_from(PRECISIONS)))
        sums.append((tuple(parts), via, (draw(st.sampled_from(DATA)),
                                         draw(st.sampled_from(sum_precisions)))))
    return SumsModel(n, maybe(3, prior), prior(), draw(st.sampled_from(PRECISIONS)), z,
                     maybe(3, data), maybe(3, data) if z else None, tuple(sums))


def mean_field_fixed_point(factors, dim: int, sweeps: int = 100_000
                           ) -> tuple[np.ndarray, np.ndarray]:
    """The mean-field optimum Π_j N(μ_j, v_j) of the linear-Gaussian model ``factors`` by
    coordinate ascent on its exact ELBO: the ELBO is E_q[-½ wᵀJw + bᵀw] + H[q] + const,
    so the optimum of q(w_j) given the others is N((b_j − Σ_{l≠j} J_jl μ_l) / J_jj,
    1/J_jj); sweeps over j until the means move by less than 1e-15."""
    jmat, b = np.zeros((dim, dim)), np.zeros(dim)
    for d, k, tau in factors:
        jmat += tau * np.outer(d, d)
        b -= tau * k * d
    mu = np.zeros(dim)
    for _ in range(sweeps):
        before = mu.copy()
        for j in range(dim):
            mu[j] = (b[j] - jmat[j] @ mu + jmat[j, j] * mu[j]) / jmat[j, j]
        if np.max(np.abs(mu - before)) < 1e-15 * max(1.0, np.max(np.abs(mu))):
            break
    return mu, 1.0 / np.diag(jmat)


def vmp_sums_check(spec: SumsModel, iterations: int = 5000) -> None:
    """VMP on ``spec`` against ``mean_field_fixed_point`` (converged within
    ``iterations`` sweeps to 1e-13): the fixed point (1e-9), the bound (the ELBO of
    each sweep's q, never falling by more than 1e-12 relative) and no NaN."""
    factors = spec.factors()
    dim = len(spec.latents())
    mean, var = mean_field_fixed_point(factors, dim)
    log_z, exact, _, jmat = gaussian_reference(factors, dim)  # the closed form agrees
    assert np.allclose(mean, exact, rtol=1e-10, atol=1e-10), f"reference\n{spec}"
    assert np.allclose(var, 1 / np.diag(jmat), rtol=1e-14), f"reference\n{spec}"
    elbos = []

    def hook(_iteration, posteriors):
        elbos.append(mean_field_elbo(factors, *spec.mean_field(posteriors)))

    with warnings.catch_warnings():
        warnings.simplefilter("error", ff.ConvergenceWarning)
        result = spec.build().compile("vmp").run(iterations=iterations, tolerance=1e-13,
                                                 on_iteration=hook)
    trace = np.asarray(result.trace)  # each sweep's bound is the ELBO of its q
    assert np.all(np.isfinite(trace)), f"NaN\n{spec}"
    assert np.allclose(trace, elbos, rtol=1e-10, atol=1e-10), f"trace\n{spec}"
    falls = np.diff(trace) / np.maximum(1.0, np.abs(trace[:-1]))
    assert np.all(falls >= -1e-12), f"the bound fell by {-falls.min():.3g}\n{spec}"
    got_mean, got_var = spec.mean_field(result)
    assert np.allclose(got_mean, mean, rtol=1e-9, atol=1e-9), f"means\n{spec}"
    assert np.allclose(got_var, var, rtol=1e-9, atol=1e-9), f"variances\n{spec}"
    elbo = mean_field_elbo(factors, mean, var)
    assert abs(result.log_evidence - elbo) <= 1e-9 * max(1.0, abs(elbo)), f"bound\n{spec}"
    assert elbo <= log_z + 1e-12 * max(1.0, abs(log_z))


@oracle_settings(60)
@given(sums_models())
def test_vmp_several_sums_of_one_plate_are_coordinate_ascent(spec):
    vmp_sums_check(spec)


def test_three_weighted_sums_of_one_variable_one_update():
    """Three sums of x (one plain, two weighted, one through a latent child): one
    ``PlateSums`` statement per sweep, reading every sum's message and both scales."""
    spec = SumsModel(5, None, (0.5, 1.0), 2.0, None, ((-0.4, 0.3, 1.6, 3.2, -2.1), 1.0),
                     None, (((("x", (2.0, -1.5, 0.7, 1.0, -0.5)),), None, (3.2, 4.0)),
                            ((("x", None),), 0.5, (-2.1, 1.0)),
                            ((("x", (-0.5, 0.7, 0.7, 2.0, 1.0)),), None, (0.3, 2.0))))
    vmp_sums_check(spec)
    source = spec.build().compile("vmp").source
    loop = source.split("# ---- iterations")[1].split("if iterations == 0")[0]
    calls = [line for line in loop.splitlines() if "PlateSums_array_average_logarithm(" in line]
    assert len(calls) == 1 and "PlateSum_array_average_logarithm(" not in loop
    for read in ("array=v_x__", "sum=", "sum1=", "scale1=", "sum2=", "scale2="):
        assert read in calls[0]
    assert "scale=" not in calls[0]  # the plain sum's array carries the update


# ----- sums of arrays of several variables (transforms.linear_sums) ---------------------
def _plus_sums(second: str):
    """x[i], z[i] ~ N(0, 1); Σ (x + z) observed, and Σ z or Σ (x − z)."""
    with ff.Model() as model:
        n = ff.Range("n", 3)
        with ff.Plate(n):
            x = ff.Gaussian("x", 0.0, precision=1.0)
            z = ff.Gaussian("z", 0.5, precision=2.0)
            both = x + z
            other = z if second == "z" else x - z
        ff.Gaussian("t0", ff.sum(both, n), precision=2.0, observed=1.0)
        ff.Gaussian("t1", ff.sum(other, n), precision=4.0, observed=-0.4)
    unit = np.eye(6)
    factors = [(unit[i], 0.0, 1.0) for i in range(3)] + [(unit[i], -0.5, 2.0)
                                                         for i in range(3, 6)]
    factors.append((-np.r_[np.ones(3), np.ones(3)], 1.0, 2.0))
    factors.append((-np.r_[np.zeros(3) if second == "z" else np.ones(3), (1, -1)[second == "z"]
                           * -np.ones(3)], -0.4, 4.0))
    return model, factors, lambda r: (np.r_[r["x"].mean, r["z"].mean],
                                      np.r_[r["x"].variance, r["z"].variance])


MODELS = {"x + z, z": lambda: _plus_sums("z"), "x + z, x - z": lambda: _plus_sums("x - z")}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_sums_of_arrays_of_several_variables_compile_and_reach_the_fixed_point(name):
    """VMP sums whose array is computed from two variables (x + z): their block updates'
    refresh edges would leave the scheduler nothing to run (each message
    into x or z, now triggering its posterior, reads the other's posterior: a cycle of
    reads of messages all made invalid at once; ScheduleError before, then sum17's
    fallback).  Each is now the sum of one-variable sums (``transforms.linear_sums``),
    and reaches the mean-field optimum (1e-9)."""
    model, factors, moments = MODELS[name]()
    mean, var = mean_field_fixed_point(factors, 6)
    result = model.compile("vmp").run(iterations=3000, tolerance=1e-13)
    assert result.converged
    got_mean, got_var = moments(result)
    assert np.allclose(got_mean, mean, rtol=1e-9, atol=1e-9)
    assert np.allclose(got_var, var, rtol=1e-9, atol=1e-9)
    assert abs(result.log_evidence - mean_field_elbo(factors, mean, var)) < 1e-9


def _refresh_edges(model: ff.Model) -> set[tuple[str, str]]:
    """The Fresh edges from a variable's prior message into a block update."""
    from factorflow.transforms.dependency_info import dependency_graph

    program = model.compile("vmp").compilation.stages["pruning"]
    graph, stmts = dependency_graph(program)
    return {(a, b) for (a, b), kind in graph.edges.items() if kind & ff.transforms.dependencies
            .Dep.FRESH and stmts[b].param("previous") and a.endswith("__F")}


def test_every_sum_of_one_variable_gets_its_refresh():
    """``ff.sum(x + z)`` is ``ff.sum(x) + ff.sum(z)`` under VMP (``transforms.linear_sums``;
    sum17's fallback kept its update's old schedule, with no Fresh reads of the priors'
    messages): each sum of one variable gets its refresh, x's own and z's one block over
    its two sums (of x + z and of z); ``ff.sum(x)`` alone, as before."""
    model, _, _ = _plus_sums("z")
    assert _refresh_edges(model) == {("v_x__F", "v_x__use1__B"), ("v_z__F", "v_z__use1__B")}
    with ff.Model() as alone:
        n = ff.Range("n", 3)
        with ff.Plate(n):
            x = ff.Gaussian("x", 0.0, precision=1.0)
        ff.Gaussian("t", ff.sum(x, n), precision=2.0, observed=1.0)
    assert _refresh_edges(alone) == {("v_x__F", "v_x__use0__B")}


# ----- sums of linear combinations of several variables (sum18) -------------------------
@oracle_settings(60)
@given(sums_models(count=(1, 2), terms=3))
def test_vmp_sums_of_linear_combinations_are_coordinate_ascent(spec):
    """1-2 sums, each of 1-3 terms (x, z weighted per element, g scaled, a constant:
    ``ff.sum(x + c * z + 2.0 * g + 1.6, n)``), observed directly or through a latent
    child, N = 1-5: written as combinations of one-variable sums
    (``transforms.linear_sums``), VMP reaches the mean-field optimum of coordinate
    ascent on the exact ELBO (1e-9) with a bound that never falls and no NaN.  With
    sum17's fallback, ``ff.sum(x + z, n)`` ended in NaN on 39 of 128 models of
    test_regressions17_sumref's family.  (Mean-field coordinate ascent is slow where a
    strong sum couples x, z and g: up to 8670 sweeps to 1e-13 here.)"""
    vmp_sums_check(spec, iterations=50_000)
