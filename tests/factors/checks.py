"""Independent numerics for checking message operators: quadrature, enumeration, regression.

Every check computes what an operator claims from the factor's definition alone:

* EP: the moments of the tilted distribution m_target · ∫ f Π m_others, by quadrature or
  exact enumeration, against the moments of (message × incoming message);
* VMP: E_q[log f] by quadrature for several q of the target, regressed on E_q[T(target)]:
  log f is linear in T(target), so the slope is exactly the natural parameters the VMP
  message must have (d E_q[log f] / d E[T]);
* evidence: log ∫ f Π m (EP) or E_q[log f] (VMP) by quadrature or enumeration.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from scipy import integrate, special

from factorflow.distributions import Beta, Dirichlet, Gamma, Gaussian

#: hypothesis settings of the operator checks: few examples, each exact to 1e-6
SETTINGS = settings(max_examples=25, deadline=None, derandomize=True)
_SQRT_2PI = math.sqrt(2 * math.pi)
QUAD = {"epsabs": 1e-14, "epsrel": 1e-10, "limit": 400}

means = st.floats(-3.0, 3.0)
sds = st.floats(0.5, 2.0)
shapes = st.floats(0.6, 6.0)
rates = st.floats(0.3, 4.0)
counts = st.floats(0.6, 6.0)
probs = st.floats(0.02, 0.98)


def normal_pdf(x: float, mean: float, sd: float) -> float:
    """The normal density, in plain floats (fast inside scipy's quad)."""
    u = (x - mean) / sd
    return math.exp(-0.5 * u * u) / (_SQRT_2PI * sd)


def quad(fn: Callable[[float], float], lo: float, hi: float,
         points: Sequence[float] = ()) -> float:
    """∫_lo^hi fn, splitting at interior ``points`` (kinks and steps of the integrand)."""
    cuts = [lo] + sorted(p for p in points if lo < p < hi) + [hi]
    return sum(integrate.quad(fn, a, b, **QUAD)[0] for a, b in zip(cuts[:-1], cuts[1:],
                                                                    strict=True))


# ----- expectations under one distribution (quadrature) ------------------------------
def gaussian_expect(fn: Callable[[np.ndarray], np.ndarray], mean: float, var: float,
                    points: Sequence[float] = ()) -> float:
    """E[fn(x)] for x ~ N(mean, var), integrated in standard units over ±40 sd."""
    sd = math.sqrt(var)
    return quad(lambda u: math.exp(-0.5 * u * u) / _SQRT_2PI * fn(mean + sd * u), -40.0,
                40.0, [(p - mean) / sd for p in points])


def gauss_hermite(fn: Callable[..., np.ndarray], moments: Sequence[tuple[float, float]],
                  n: int = 12) -> float:
    """E[fn(x_1, ..., x_d)] for independent x_i ~ N(m_i, v_i) by a product Gauss–Hermite
    rule: exact for polynomials of degree < 2n in each variable."""
    nodes, weights = special.roots_hermitenorm(n)
    weights = weights / weights.sum()
    grids = np.meshgrid(*[m + np.sqrt(v) * nodes for m, v in moments], indexing="ij")
    w = np.ones(())
    for _ in moments:
        w = np.multiply.outer(w, weights)
    return float(np.sum(w * fn(*grids)))


def gamma_expect(fn: Callable[[float], float], shape: float, rate: float) -> float:
    """E[fn(x)] for x ~ Gamma(shape, rate), integrated in y = rate · x; on (0, 1) the
    substitution y = v^(1/shape) removes the y^(shape−1) singularity."""
    log_norm = math.lgamma(shape)

    def body(y):  # the density without y^(shape-1)
        return math.exp(-y - log_norm) * fn(y / rate)

    head = quad(lambda v: body(v ** (1 / shape)) / shape if v > 0 else 0.0, 0.0, 1.0)
    tail = quad(lambda y: math.exp((shape - 1) * math.log(y)) * body(y), 1.0,
                shape + 40 * math.sqrt(shape) + 60, [max(shape, 1.0)])
    return head + tail


def beta_expect(fn: Callable[[float], float], a: float, b: float, log: str = "") -> float:
    """E[fn(x)], or E[fn(x) log x] (``log="x"``) or E[fn(x) log(1 − x)] (``log="1-x"``),
    for x ~ Beta(a, b): QUADPACK's QAWS rule integrates the x^(a−1) (1 − x)^(b−1) (and
    logarithmic) endpoint singularities exactly."""
    weight = {"": "alg", "x": "alg-loga", "1-x": "alg-logb"}[log]
    value = integrate.quad(fn, 0.0, 1.0, weight=weight, wvar=(a - 1, b - 1), **QUAD)[0]
    return value * math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b))


def beta_mean_logs(a: float, b: float) -> tuple[float, float]:
    """(E[log x], E[log(1 − x)]) for x ~ Beta(a, b), by quadrature."""
    return (beta_expect(lambda x: 1.0, a, b, log="x"),
            beta_expect(lambda x: 1.0, a, b, log="1-x"))


def expected_stats_by_quad(q) -> np.ndarray:
    """E_q[T(x)] of a Gaussian, Gamma, Beta or Dirichlet, by quadrature, flattened."""
    if isinstance(q, Gaussian):
        m, v = float(q.mean), float(q.variance)
        return np.array([m, -0.5 * gaussian_expect(lambda x: x * x, m, v)])
    if isinstance(q, Gamma):
        a, r = float(q.shape_param), float(q.rate)
        return np.array([gamma_expect(np.log, a, r), gamma_expect(lambda x: x, a, r)])
    if isinstance(q, Beta):
        return np.array(beta_mean_logs(float(q.alpha), float(q.beta)))
    if isinstance(q, Dirichlet):
        alpha = np.asarray(q.alpha, float)
        s = alpha.sum()
        return np.array([beta_mean_logs(ak, s - ak)[0] for ak in alpha])
    raise TypeError(type(q).__name__)


def vmp_slope(expected_log_factor: Callable[[object], float], qs: Sequence[object],
              constant: bool = True) -> np.ndarray:
    """Solve E_{q_i}[log f] = <g, E_{q_i}[T]> (+ c) for g over the distributions ``qs``.

    With ``constant`` False the statistics must already span the constant (one-hot
    statistics sum to one, so the constant is absorbed into g).
    """
    rows = [expected_stats_by_quad(q) if not isinstance(q, np.ndarray) else q for q in qs]
    design = np.array([np.append(r, 1.0) if constant else r for r in rows])
    values = np.array([expected_log_factor(q) for q in qs])
    solution = np.linalg.solve(design, values)
    return solution[:-1] if constant else solution


def perturbed(q, count: int, rng: np.random.Generator):
    """``count`` distributions of q's family near q (for the VMP regression)."""
    out = []
    for _ in range(count):
        eta = [e * rng.uniform(0.6, 1.4, size=np.shape(e)) + rng.normal(0, 0.2, np.shape(e))
               * (np.abs(e) + 0.5) * 0.3 for e in q.eta]
        if isinstance(q, Gaussian):
            eta[1] = np.abs(eta[1]) + 0.05
        elif isinstance(q, Gamma):
            eta[0] = np.maximum(eta[0], -0.5)
            eta[1] = -np.abs(eta[1]) - 0.05
        else:
            eta = [np.maximum(e, -0.5) for e in eta]
        out.append(type(q).from_natural(*eta))
    return out


# ----- Gaussian tilted moments ---------------------------------------------------------
def tilted_gaussian(mean: float, var: float, weight: Callable[[np.ndarray], np.ndarray],
                    points: Sequence[float] = ()) -> tuple[float, float, float]:
    """(log Z, mean, variance) of N(x; mean, var) · weight(x), by quadrature."""
    z = gaussian_expect(weight, mean, var, points)
    m1 = gaussian_expect(lambda x: (x - mean) * weight(x), mean, var, points) / z
    m2 = gaussian_expect(lambda x: (x - mean) ** 2 * weight(x), mean, var, points) / z
    return float(np.log(z)), mean + m1, m2 - m1 * m1


def truncated_by_quad(t: float) -> tuple[float, float]:
    """(E[X] − t, Var[X]) for X ~ N(0, 1) | X > t, integrating the excess y = X − t with
    density ∝ exp(−t y − y²/2), scaled so that no tail underflows."""
    peak = max(-t, 0.0)
    top = -t * peak - peak * peak / 2

    def dens(y):
        return np.exp(-t * y - y * y / 2 - top)

    hi = peak + 60.0 / max(abs(t), 1.0) + 40.0 * (t < 1)
    pts = [peak] if peak > 0 else [min(1.0 / max(t, 1e-300), hi / 2)]
    z = quad(dens, 0.0, hi, pts)
    m1 = quad(lambda y: y * dens(y), 0.0, hi, pts) / z
    m2 = quad(lambda y: (y - m1) ** 2 * dens(y), 0.0, hi, pts) / z
    return m1, m2


def grid(lo: float, hi: float, step: float) -> np.ndarray:
    """A uniform grid for the trapezoid rule, which converges exponentially fast for the
    smooth, rapidly decaying integrands of Gaussian factors."""
    return np.linspace(lo, hi, int(np.ceil((hi - lo) / step)) + 1)


def grid_moments(log_density: Callable[..., np.ndarray], axes: Sequence[np.ndarray],
                 targets: Sequence[int | Callable[..., np.ndarray]] = (0,)
                 ) -> tuple[float, list[tuple[float, float]]]:
    """(log Z, [(mean, variance) of each target]) under the unnormalised density
    exp(log_density(*coords)) on the product grid ``axes``, by the trapezoid rule; a target
    is a coordinate's index or a function of the coordinates."""
    coords = np.meshgrid(*axes, indexing="ij")
    ld = log_density(*coords)
    shift = np.max(ld)
    dens = np.exp(ld - shift)

    def integral(values):
        for ax in reversed(axes):
            values = np.trapezoid(values, ax, axis=-1)
        return float(values)

    z = integral(dens)
    out = []
    for target in targets:
        x = target(*coords) if callable(target) else coords[target]
        mean = integral(x * dens) / z
        out.append((mean, integral((x - mean) ** 2 * dens) / z))
    return float(np.log(z) + shift), out


# ----- strategies and calling ----------------------------------------------------------
def op(factor: str, algorithm: str, target: str) -> Callable[..., object]:
    """The registered operator function (computing the buffers it reads first)."""
    from factorflow.factors import FACTORS

    return FACTORS[factor].message(algorithm, target)


def evidence(factor: str, algorithm: str) -> Callable[..., np.ndarray]:
    from factorflow.factors import FACTORS

    return FACTORS[factor].evidence[algorithm]


def naturals(d) -> np.ndarray:
    """All natural parameters of a message, flattened (for comparing messages)."""
    return np.concatenate([np.ravel(e) for e in d.eta])


def tilted_expectations(log_density: Callable[[float], float], lo: float, hi: float,
                        fns: Sequence[Callable[[float], float]],
                        points: Sequence[float] = ()) -> tuple[float, list[float]]:
    """(log Z, [E fn]) of the unnormalised density exp(log_density) on (lo, hi)."""
    def dens(x):
        return math.exp(log_density(x))

    z = quad(dens, lo, hi, points)
    return math.log(z), [quad(lambda x, f=f: dens(x) * f(x), lo, hi, points) / z for f in fns]


def gamma_log_pdf(x: float, shape: float, rate: float) -> float:
    if x <= 0:
        return -math.inf
    return shape * math.log(rate) - math.lgamma(shape) + (shape - 1) * math.log(x) - rate * x


def beta_log_pdf(x: float, a: float, b: float) -> float:
    if not 0 < x < 1:
        return -math.inf
    return ((a - 1) * math.log(x) + (b - 1) * math.log1p(-x) - math.lgamma(a) - math.lgamma(b)
            + math.lgamma(a + b))


def assert_batched(fn: Callable[..., object], kwargs: dict, shape: tuple[int, ...]) -> None:
    """fn on whole batches equals fn on each element (messages compared by naturals)."""
    from tests.conftest import assert_close

    batched = fn(**kwargs)
    for i in np.ndindex(shape):
        single = fn(**{k: v[i] for k, v in kwargs.items()})
        if hasattr(single, "eta"):
            assert_close(naturals(batched.broadcast_to(shape)[i]), naturals(single))
        else:
            assert_close(np.broadcast_to(batched, shape)[i], single)
