"""VinDsl's gradient fallback: the VMP update of a Gaussian argument of an ``@ff.factor``
whose formula has no conjugate form in it.

The log density, in the rewrite engine's normal form, is a sum of monomials; each splits
into the part that involves the target x and the rest, so (mean field)

    S(m, v) = E_q[log f] = Σ_j E[c_j] · E_{N(m, v)}[g_j(x)] + E[constant],

with the E[c_j] and E[constant] closed in moments of the other arguments by
``rewrite.expectations`` and the g_j (``x``, ``log(1 + exp(x))``, ``x * exp(x)``, …)
integrated by ``GH_NODES``-node Gauss–Hermite.  The derivatives of S are expectations
of the formula's derivatives (Bonnet's and Price's theorems), g_j' and g_j'' written by
``rewrite.derivative``: ∂S/∂m = Σ E[c_j] E[g_j'], ∂S/∂v = ½ Σ E[c_j] E[g_j''].

The update optimises x's Gaussian q = N(m, v) given the rest of the model: with
(h, p) the natural parameters of q divided by this factor's previous message (the other
factors' messages and the prior), it maximises

    F(m, v) = h m − ½ p (m² + v) + Σ_data S(m, v) + ½ log v,

the part of the ELBO that depends on q(x), by Newton's method in m with v at its
stationary point 1/v = p − ∂²S/∂m² (Opper & Archambeau's fixed point), each step
backtracked until F does not fall, from the current q until the step is below 1e-12.
The message sent is N(m*, v*) / (h, p), so the posterior becomes the optimum: a
coordinate ascent step, and the bound never falls.  Where the factor is repeated over
plates that x lacks, the operator sums S over them first (``reduce``): one optimum for
all of x's data.

A derived target (an expression such as ``X @ w``, whose marginal is the distribution of
the expression under the posteriors of its parents, not a posterior of its own) gets
non-conjugate VMP's message instead (``ncvmp_message``): a fixed point, not an ascent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from factorflow.distributions import Gaussian
from factorflow.errors import ModelError
from factorflow.factors.common import Reduce, broadcast_naturals
from factorflow.factors.quadrature import GH_NODES, standard_normal_rule
from factorflow.rewrite.derivative import derivative
from factorflow.rewrite.evaluate import evaluate
from factorflow.rewrite.expectations import simplify_expectation
from factorflow.rewrite.match import normalize
from factorflow.rewrite.rules import ALGEBRA
from factorflow.rewrite.terms import INDEX_SUM, PROD, SUM, E, Term, add
from factorflow.rewrite.user import user_rules

#: Newton steps at most, halvings of a step at most, and the step size that ends it
_STEPS, _HALVINGS, _DONE = 200, 60, 1e-12

METHOD = (f"VMP: gradient fallback (no conjugate form): the Gaussian's mean and variance "
          f"maximise its ELBO terms by Newton's method, derivatives by the rewrite engine, "
          f"expectations by {GH_NODES}-node Gauss-Hermite")
#: the method for a derived target (an expression: its posterior is not its own)
NCVMP_METHOD = (f"VMP: gradient fallback for an expression (no conjugate form): non-conjugate "
                f"VMP (Knowles & Minka 2011), gradients of E[log f] in the mean and variance "
                f"by the rewrite engine's derivatives and {GH_NODES}-node Gauss-Hermite")


@dataclass(frozen=True)
class GaussianFallback:
    """E_q[log f] as a function of a Gaussian target: Σ_j coefficients[j] · E[parts[j]] +
    constant, with ``first``/``second`` the parts' derivatives in the target."""

    target: str
    parts: tuple[Term, ...]
    first: tuple[Term, ...]
    second: tuple[Term, ...]
    coefficients: tuple[Term, ...]
    constant: Term

    @property
    def closed_terms(self) -> tuple[Term, ...]:
        """The terms evaluated from the other arguments' moments."""
        return (*self.coefficients, self.constant)

    @property
    def part_symbols(self) -> frozenset[str]:
        """Arguments other than the target that the parts read (they must be known)."""
        return frozenset().union(*(p.symbols for p in self.parts)) - {self.target}


def gaussian_fallback(density: Term, target: str) -> GaussianFallback:
    """The split of ``density`` by its dependence on ``target``; ModelError naming what
    prevents it (a monomial over an inner index, a part that cannot be differentiated,
    an expectation over the other arguments that does not close)."""
    form = normalize(density, ALGEBRA + user_rules())
    groups: dict[Term, list[Term]] = {}
    constant: list[Term] = []
    for monomial in form.args if form.op == SUM else (form,):
        if target not in monomial.symbols:
            constant.append(monomial)
            continue
        if monomial.op == INDEX_SUM:
            raise ModelError(f"the gradient fallback for {target!r} does not handle a sum "
                             f"over an inner index ({monomial}).")
        factors = monomial.args if monomial.op == PROD else (monomial,)
        part = Term(PROD, tuple(f for f in factors if target in f.symbols))
        groups.setdefault(part, []).append(Term(PROD, tuple(f for f in factors
                                                            if target not in f.symbols)))
    parts = tuple(groups)
    first = tuple(derivative(p, target) for p in parts)
    second = tuple(derivative(d, target) for d in first)
    coefficients = tuple(simplify_expectation(E(add(*rest))) for rest in groups.values())
    return GaussianFallback(target, parts, first, second, coefficients,
                            simplify_expectation(E(add(*constant))))


def _align(arr: Any, shape: tuple[int, ...], reduce: Reduce | None) -> np.ndarray:
    """A target-shaped array laid out over the statement's plate axes ``shape``: with
    ``reduce``, length 1 along the reduced axes (the target's own plates are the others,
    in order)."""
    arr = np.asarray(arr, float)
    if reduce is None or arr.ndim == len(shape):
        return arr
    kept = tuple(n for k, n in enumerate(shape) if k not in reduce[1])
    if arr.shape != kept:
        arr = np.broadcast_to(arr, kept)
    return arr.reshape(tuple(1 if k in reduce[1] else n for k, n in enumerate(shape)))


class _Terms:
    """E[g], E[g'], E[g''] of the parts under N(m, v), weighted by their coefficients and
    summed over the parts (and over ``reduce``'s axes)."""

    def __init__(self, fb: GaussianFallback, coefficients: Sequence[np.ndarray],
                 known: Mapping[str, np.ndarray], shape: tuple[int, ...],
                 reduce: Reduce | None) -> None:
        self.fb, self.coefficients, self.shape, self.reduce = fb, coefficients, shape, reduce
        self.known = {k: np.asarray(v, float)[..., None] for k, v in known.items()}
        self.z, self.w = standard_normal_rule()

    def _sum(self, terms: tuple[Term, ...], x: np.ndarray) -> np.ndarray:
        env = {**self.known, self.fb.target: x}
        total = 0.0
        for c, t in zip(self.coefficients, terms, strict=True):
            value = np.asarray(evaluate(t, env), float)  # a constant in x has no node axis
            value = np.broadcast_to(value, np.broadcast_shapes(value.shape, x.shape))
            total = total + c * (value @ self.w)
        total = np.broadcast_to(total, np.broadcast_shapes(np.shape(total), self.shape))
        return np.sum(total, axis=self.reduce[1], keepdims=True) if self.reduce else total

    def __call__(self, m: np.ndarray, v: np.ndarray, order: int) -> list[np.ndarray]:
        """[S] (order 0), or [S, E[Σ g'], E[Σ g'']] (order 2), at each element's N(m, v)
        (m, v laid out over the statement's plates by ``_align``)."""
        x = m[..., None] + np.sqrt(v)[..., None] * self.z
        out = [self._sum(self.fb.parts, x)]
        if order:
            out += [self._sum(self.fb.first, x), self._sum(self.fb.second, x)]
        return out


def optimize_gaussian(fb: GaussianFallback, coefficients: Sequence[np.ndarray],
                      known: Mapping[str, np.ndarray], q: Gaussian, previous: Any,
                      shape: tuple[int, ...], reduce: Reduce | None) -> Gaussian:
    """The message making q(x) the optimum of F(m, v) (module docstring), starting at
    the current q; ``shape`` is the statement's plate shape."""
    h, p = (np.asarray(e, float) for e in q.eta)
    if previous is not None and not isinstance(previous, Gaussian):
        previous = None
    if previous is not None:
        h, p = h - previous.eta[0], p - previous.eta[1]
    terms = _Terms(fb, coefficients, known, shape, reduce)
    m, v, h, p = (_align(a, shape, reduce) for a in (q.mean, q.variance, h, p))
    layout = np.broadcast_shapes(m.shape, v.shape, h.shape, p.shape,
                                 terms(m, v, 0)[0].shape)
    m, v, h, p = (np.array(np.broadcast_to(a, layout)) for a in (m, v, h, p))

    def objective(m, v, s):
        return h * m - 0.5 * p * (m * m + v) + s + 0.5 * np.log(v)

    for _ in range(_STEPS):
        s, d1, d2 = terms(m, v, 2)
        f = objective(m, v, s)
        curvature = p - d2  # −∂²F/∂m², and 1/v at F's stationary point in v
        grad = h - p * m + d1
        good = curvature > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            v_new = np.where(good, 1 / curvature, 2 * v)
            dm = np.where(good, grad / curvature, v * grad)
        dlv = np.log(v_new) - np.log(v)
        t = np.ones_like(m)
        moving = np.ones(m.shape, bool)
        for _ in range(_HALVINGS):
            mc, vc = m + t * dm, v * np.exp(t * dlv)
            ok = objective(mc, vc, terms(mc, vc, 0)[0]) >= f - 1e-15 * np.abs(f)
            moving &= ~ok
            if not moving.any():
                break
            t = np.where(moving, t / 2, t)
        step = np.where(moving, 0.0, t)
        m, v = m + step * dm, v * np.exp(step * dlv)
        if np.all(np.abs(step * dm) <= _DONE * (1 + np.abs(m))) and \
                np.all(np.abs(step * dlv) <= _DONE):
            break
    return _message(q, reduce, m / v - h, 1 / v - p)


def ncvmp_message(fb: GaussianFallback, coefficients: Sequence[np.ndarray],
                  known: Mapping[str, np.ndarray], q: Gaussian, shape: tuple[int, ...],
                  reduce: Reduce | None) -> Gaussian:
    """Non-conjugate VMP's message (Knowles & Minka 2011) for a derived target (an
    expression such as ``X @ w``, whose posterior is not its own): precision
    −2 ∂S/∂v = −E[Σ g''], precision·mean ∂S/∂m + m · precision, at the current q.  Its
    fixed point is a stationary point of the ELBO; the bound may fall on the way."""
    terms = _Terms(fb, coefficients, known, shape, reduce)
    m, v = _align(q.mean, shape, reduce), _align(q.variance, shape, reduce)
    _, d1, d2 = terms(m, v, 2)
    prec = -d2
    return _message(q, reduce, *broadcast_naturals(d1 + m * prec, prec))


def _message(q: Gaussian, reduce: Reduce | None, *eta: np.ndarray) -> Gaussian:
    """The Gaussian with naturals ``eta`` laid out by ``_align``, on the target's own
    plates again."""
    if reduce is not None:
        eta = tuple(e.reshape(np.shape(q.eta[0])) if e.size == np.size(q.eta[0]) else
                    np.squeeze(e, axis=reduce[1]) for e in eta)
    return Gaussian.from_natural(*eta)


def expected_log_factor(fb: GaussianFallback, coefficients: Sequence[np.ndarray],
                        constant: np.ndarray, known: Mapping[str, np.ndarray], target: Any,
                        shape: tuple[int, ...]) -> np.ndarray:
    """E_q[log f] per plate element: the parts by Gauss–Hermite under the target's
    Gaussian (exactly, at a known target)."""
    if isinstance(target, Gaussian):
        m, v = target.mean, target.variance
    else:
        m, v = np.asarray(target, float), np.zeros(np.shape(target))
    terms = _Terms(fb, coefficients, known, shape, None)
    if not isinstance(target, Gaussian):
        terms.z, terms.w = np.zeros(1), np.ones(1)
    return terms(np.asarray(m, float), np.asarray(v, float), 0)[0] + constant


__all__ = ["GaussianFallback", "gaussian_fallback", "optimize_gaussian", "ncvmp_message",
           "expected_log_factor", "METHOD", "NCVMP_METHOD"]
