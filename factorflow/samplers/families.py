"""Conjugate families for Gibbs conditionals: sufficient statistics and exact draws.

A family is conjugate for a variable when, summed over every site that reads the
variable, the log density is ``Σ_i η_i T_i(x) + const`` with the family's statistics
``T_i`` (the relation :mod:`factorflow.samplers.conditionals` asks the rewrite engine to
satisfy). The draw turns the summed natural parameters ``η`` into a sample, over whole
arrays. Families are tried in the order of :data:`CANDIDATES` for a variable's domain:
the first whose statistics cover every monomial wins (a Gamma before the generalized
inverse Gaussian that contains it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

from factorflow.errors import ModelError
from factorflow.rewrite.terms import Term, at, log


@dataclass(frozen=True)
class Family:
    """A conjugate family: ``statistics(x, k)`` as terms, and ``draw(rng, naturals,
    what)`` sampling from exp(Σ η_i T_i(x)) (``what`` names the variable in errors).

    A family with a ``base`` ``(factor, parameters)`` is a tilted base law that is no
    exponential family in its parameters (Pólya-Gamma): the variable must be defined by
    that factor, whose ``parameters`` follow the summed ``η`` in ``draw``'s naturals; the
    other sites must be linear in the statistics."""

    name: str
    statistics: Callable[[Term, str], tuple[Term, ...]]
    draw: Callable[[np.random.Generator, list[np.ndarray], str], np.ndarray]
    base: tuple[str, tuple[str, ...]] | None = None
    #: log ∫ exp(Σ η_i T_i(x)) dx over the support (elementwise; over the event for a
    #: simplex), so that a parent of the variable can be sampled with it integrated out
    log_normalizer: Callable[[list[np.ndarray]], np.ndarray] | None = None


def _improper(what: str, family: str, detail: str) -> ModelError:
    return ModelError(f"the conditional of {what!r} is an improper {family} ({detail}); give "
                      f"{what!r} a proper prior.")


def _positive(value: np.ndarray, what: str, family: str, name: str) -> np.ndarray:
    if not np.all(value > 0):
        raise _improper(what, family, f"{name} {np.min(value):.3g} <= 0")
    return value


def _gaussian(rng: np.random.Generator, eta: list[np.ndarray], what: str) -> np.ndarray:
    prec = _positive(-2.0 * eta[1], what, "Gaussian", "precision")
    return eta[0] / prec + rng.standard_normal(prec.shape) / np.sqrt(prec)


def _gamma(rng: np.random.Generator, eta: list[np.ndarray], what: str) -> np.ndarray:
    shape = _positive(eta[0] + 1.0, what, "Gamma", "shape")
    rate = _positive(-eta[1], what, "Gamma", "rate")
    return rng.standard_gamma(shape) / rate


def _inverse_gamma(rng: np.random.Generator, eta: list[np.ndarray], what: str) -> np.ndarray:
    shape = _positive(-eta[0] - 1.0, what, "inverse Gamma", "shape")
    scale = _positive(-eta[1], what, "inverse Gamma", "scale")
    return scale / rng.standard_gamma(shape)


def _root_inverse_gamma(rng: np.random.Generator, eta: list[np.ndarray], what: str
                        ) -> np.ndarray:
    """x^η₁ exp(η₂ / x²): x² is inverse Gamma with shape −(η₁ + 1)/2 and scale −η₂."""
    shape = _positive(-(eta[0] + 1.0) / 2, what, "inverse Gamma (of the square)", "shape")
    scale = _positive(-eta[1], what, "inverse Gamma (of the square)", "scale")
    return np.sqrt(scale / rng.standard_gamma(shape))


def _gig(rng: np.random.Generator, eta: list[np.ndarray], what: str) -> np.ndarray:
    """x^(p−1) exp(−(a x + b / x) / 2): p = η₁ + 1, a = −2η₂, b = −2η₃ (a, b > 0)."""
    p, a, b = np.broadcast_arrays(eta[0] + 1.0, -2.0 * eta[1], -2.0 * eta[2])
    a = _positive(a, what, "generalized inverse Gaussian", "a")
    b = _positive(b, what, "generalized inverse Gaussian", "b")
    if np.all(p == 0.5):  # 1/x is inverse Gaussian (Wald) with mean √(a/b), shape a
        return 1.0 / rng.wald(np.sqrt(a / b), a)
    if np.all(p == -0.5):  # x is inverse Gaussian with mean √(b/a), shape b
        return rng.wald(np.sqrt(b / a), b)
    return np.sqrt(b / a) * stats.geninvgauss.rvs(p, np.sqrt(a * b), random_state=rng)


def _polya_gamma(rng: np.random.Generator, eta: list[np.ndarray], what: str) -> np.ndarray:
    """PG(b, 0) tilted by exp(η x): PG(b, z) with z = √(−2η) (Polson, Scott & Windle)."""
    try:
        from polyagamma import random_polyagamma
    except ImportError:  # pragma: no cover - polyagamma is in the mcmc and test extras
        raise ModelError(f"sampling {what!r} needs the polyagamma package: pip install "
                         "'factorflow[mcmc]'.") from None
    tilt, shape = np.broadcast_arrays(np.asarray(eta[0], float), np.asarray(eta[1], float))
    if np.any(tilt > 0):
        raise _improper(what, "Pólya-Gamma", f"tilt {np.max(tilt):.3g} > 0")
    shape = _positive(shape, what, "Pólya-Gamma", "shape")
    out = np.empty(shape.shape)
    random_polyagamma(shape, np.sqrt(-2.0 * tilt), out=out, random_state=rng)
    return out


def _beta(rng: np.random.Generator, eta: list[np.ndarray], what: str) -> np.ndarray:
    a = _positive(eta[0] + 1.0, what, "Beta", "alpha")
    b = _positive(eta[1] + 1.0, what, "Beta", "beta")
    return rng.beta(a, b)


def _dirichlet(rng: np.random.Generator, eta: list[np.ndarray], what: str) -> np.ndarray:
    g = rng.standard_gamma(_positive(eta[0] + 1.0, what, "Dirichlet", "alpha"))
    return g / g.sum(axis=-1, keepdims=True)


def _gaussian_log_normalizer(eta: list[np.ndarray]) -> np.ndarray:
    return eta[0] ** 2 / (-4.0 * eta[1]) + 0.5 * np.log(np.pi / -eta[1])


def _gamma_log_normalizer(eta: list[np.ndarray]) -> np.ndarray:
    return special.gammaln(eta[0] + 1.0) - (eta[0] + 1.0) * np.log(-eta[1])


def _beta_log_normalizer(eta: list[np.ndarray]) -> np.ndarray:
    return special.betaln(eta[0] + 1.0, eta[1] + 1.0)


def _dirichlet_log_normalizer(eta: list[np.ndarray]) -> np.ndarray:
    alpha = eta[0] + 1.0
    return special.gammaln(alpha).sum(axis=-1) - special.gammaln(alpha.sum(axis=-1))


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("Gaussian", lambda x, k: (x, x**2), _gaussian,
           log_normalizer=_gaussian_log_normalizer),
    Family("Gamma", lambda x, k: (log(x), x), _gamma, log_normalizer=_gamma_log_normalizer),
    Family("InverseGamma", lambda x, k: (log(x), x**-1), _inverse_gamma),
    Family("RootInverseGamma", lambda x, k: (log(x), x**-2), _root_inverse_gamma),
    Family("GIG", lambda x, k: (log(x), x, x**-1), _gig),
    Family("PolyaGamma", lambda x, k: (x,), _polya_gamma, base=("PolyaGamma", ("shape",))),
    Family("Beta", lambda x, k: (log(x), log(1 - x)), _beta,
           log_normalizer=_beta_log_normalizer),
    Family("Dirichlet", lambda x, k: (log(at(x, k)),), _dirichlet,
           log_normalizer=_dirichlet_log_normalizer),
)}

#: the conjugate families tried for a variable of each domain, most specific first
CANDIDATES: dict[str, tuple[str, ...]] = {
    "real": ("Gaussian",),
    "positive": ("Gamma", "InverseGamma", "RootInverseGamma", "GIG", "PolyaGamma"),
    "unit": ("Beta",),
    "simplex": ("Dirichlet",),
}
