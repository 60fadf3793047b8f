"""ff.max and ff.min (the Max factor) under EP against a 2-D quadrature of the exact
posterior: a ~ N(m_a, v_a), b ~ N(m_b, v_b), y ~ N(max(a, b), v_y) observed.  The Max factor
is the one non-Gaussian site of a tree, so EP's marginals and evidence are exact."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import factorflow as ff
from tests.conftest import assert_close

_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(40)


def _panels(lo: float, hi: float, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Composite Gauss–Legendre nodes and weights on [lo, hi] (``count`` panels)."""
    edges = np.linspace(lo, hi, count + 1)
    half = (edges[1:] - edges[:-1])[:, None] / 2
    mid = (edges[1:] + edges[:-1])[:, None] / 2
    return (mid + half * _NODES).ravel(), (half * _WEIGHTS).ravel()


def exact(ma, va, mb, vb, y, vy, sign=1.0):
    """(log Z, E, Var) of a, b and e = max(a, b) (sign −1: min) given y ~ N(e, vy): each
    half-plane (a > b, b > a), where the integrand is smooth, in coordinates (a, t),
    b = a ∓ t, t > 0, by composite Gauss–Legendre."""
    def normal(x, m, v):
        return np.exp(-0.5 * (x - m) ** 2 / v) / np.sqrt(2 * np.pi * v)

    width = 12 * np.sqrt(max(va, vb, vy)) + abs(ma) + abs(mb) + abs(y)
    xs, wx = _panels(-width, width, 20)
    ts, wt = _panels(0.0, 2 * width, 20)
    x, t = np.meshgrid(xs, ts, indexing="ij")
    w = np.outer(wx, wt)
    z, moments = 0.0, np.zeros((3, 2))
    for first_larger in (True, False):  # the larger one is x; the other is x − t
        a, b = (x, x - t) if first_larger else (x - t, x)
        e = x if sign > 0 else x - t
        dens = w * normal(a, ma, va) * normal(b, mb, vb) * normal(y, e, vy)
        z += dens.sum()
        for k, v in enumerate((a, b, e)):
            moments[k] += [(dens * v).sum(), (dens * v * v).sum()]
    mean = moments[:, 0] / z
    return np.log(z), mean, moments[:, 1] / z - mean**2


_COMPILED: dict[float, tuple] = {}


def compiled(sign: float):
    """The model compiled once per sign, its numbers ff.Data."""
    if sign not in _COMPILED:
        with ff.Model() as model:
            a = ff.Gaussian("a", ff.Data("ma", 0.0), precision=ff.Data("pa", 1.0))
            b = ff.Gaussian("b", ff.Data("mb", 0.0), precision=ff.Data("pb", 1.0))
            e = ff.max(a, b) if sign > 0 else ff.min(a, b)
            ff.Gaussian("y", e, precision=ff.Data("py", 1.0), observed=ff.Data("obs", 0.0))
        _COMPILED[sign] = (model.compile("ep"), e.name)
    return _COMPILED[sign]


@given(st.floats(-2.0, 2.0), st.floats(0.5, 2.0), st.floats(-2.0, 2.0), st.floats(0.5, 2.0),
       st.floats(-3.0, 3.0), st.floats(0.25, 4.0), st.sampled_from([1.0, -1.0]))
@settings(max_examples=15, deadline=None, derandomize=True)
def test_ep_through_max_and_min_is_exact(ma, sa, mb, sb, y, vy, sign):
    program, e_name = compiled(sign)
    result = program.run(data={"ma": ma, "pa": sa**-2, "mb": mb, "pb": sb**-2, "obs": y,
                               "py": 1 / vy}, iterations=100)
    log_z, mean, var = exact(ma, sa * sa, mb, sb * sb, y, vy, sign)
    assert result.converged
    assert_close(result.log_evidence, log_z, rtol=1e-7, atol=1e-7)
    for k, name in enumerate(("a", "b", e_name)):
        assert_close([result[name].mean, result[name].variance], [mean[k], var[k]],
                     rtol=1e-6, atol=1e-7)


def test_forward_moments_are_clarks():
    """No observation: max(a, b) has Clark's (1961) mean and variance, min the mirror."""
    from scipy import special
    ma, va, mb, vb = 0.5, 1.0, -0.3, 2.0
    theta = np.sqrt(va + vb)
    alpha = (ma - mb) / theta
    pdf, cdf, cdf_ = np.exp(-alpha**2 / 2) / np.sqrt(2 * np.pi), special.ndtr(alpha), \
        special.ndtr(-alpha)
    e1 = ma * cdf + mb * cdf_ + theta * pdf
    e2 = (ma**2 + va) * cdf + (mb**2 + vb) * cdf_ + (ma + mb) * theta * pdf
    with ff.Model() as model:
        a, b = ff.Gaussian("a", ma, variance=va), ff.Gaussian("b", mb, variance=vb)
        big, small = ff.max(a, b), ff.min(a, b)
    result = model.infer("ep")
    assert_close([result[big.name].mean, result[big.name].variance], [e1, e2 - e1**2],
                 rtol=1e-12)
    # min(a, b) = a + b − max(a, b): mean m_a + m_b − E[max]
    assert_close(result[small.name].mean, ma + mb - e1, rtol=1e-12)
    assert abs(result.log_evidence) < 1e-12


def test_bad_uses_are_named():
    with ff.Model() as model:
        a = ff.Gaussian("a", 0.0, variance=1.0)
        with pytest.raises(ff.ModelError, match=r"ff.max\(a, a\).*same random variable"):
            ff.max(a, a)
        with pytest.raises(ff.ModelError, match="neither argument is random"):
            ff.min(1.0, 2.0)
        ff.max(a, 0.0)
    with pytest.raises(ff.UnsupportedFactorError, match=r"Max has no VMP message.*use 'ep'"):
        model.compile("vmp")
