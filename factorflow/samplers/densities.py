"""Log densities of the built-in factors as terms, for the rewrite engine.

The built-in factors carry numeric log densities (``factors/*.py``); Gibbs sampling needs
them as terms, so that the conditional of each variable can be *derived*: the rewrite
engine brings a factor's log density to a sum of monomials and reads off the coefficient
of each sufficient statistic of the variable (:mod:`factorflow.samplers.conditionals`).
Each formula below is the numeric one of its factor, written over symbols (checked
against it in ``tests/samplers/test_densities.py``). A categorical argument ("int") is
its one-hot vector, indexed by ``k`` as in ``@ff.factor`` formulas.

Deterministic factors are expressions: their output is replaced, wherever it is used,
by the expression of their inputs (``mean = a + c * x`` enters a Gaussian as itself).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from factorflow.factors.polya_gamma import log_polya_gamma
from factorflow.rewrite.evaluate import FUNCTION_IMPLEMENTATIONS
from factorflow.rewrite.terms import DATA, SYM, Term, at, call, exp, index_sum, lgamma, log

LOG_2PI = math.log(2 * math.pi)
LOG_PI, LOG_2 = math.log(math.pi), math.log(2.0)
K = "k"  # the inner index of vector arguments
#: the function term of the Pólya-Gamma log density (evaluated by the polyagamma package)
LOG_POLYA_GAMMA = "log_polya_gamma"
FUNCTION_IMPLEMENTATIONS[LOG_POLYA_GAMMA] = log_polya_gamma

#: factor name -> log density over its arguments' terms (keyword arguments by name)
LOG_DENSITY: dict[str, Callable[..., Term]] = {
    # ½ log τ − ½ log 2π − ½ τ (x − μ)²
    "Gaussian": lambda sample, mean, precision: (
        0.5 * log(precision) - 0.5 * LOG_2PI - 0.5 * precision * (sample - mean) ** 2),
    # a log b − log Γ(a) + (a − 1) log x − b x
    "Gamma": lambda sample, shape, rate: (
        shape * log(rate) - lgamma(shape) + (shape - 1) * log(sample) - rate * sample),
    # (α − 1) log x + (β − 1) log(1 − x) − log B(α, β)
    "Beta": lambda sample, alpha, beta: (
        (alpha - 1) * log(sample) + (beta - 1) * log(1 - sample)
        + lgamma(alpha + beta) - lgamma(alpha) - lgamma(beta)),
    # x log p + (1 − x) log(1 − p)
    "Bernoulli": lambda sample, p: sample * log(p) + (1 - sample) * log(1 - p),
    # log C(n, x) + x log p + (n − x) log(1 − p)
    "Binomial": lambda sample, trials, p: (
        lgamma(trials + 1) - lgamma(sample + 1) - lgamma(trials - sample + 1)
        + sample * log(p) + (trials - sample) * log(1 - p)),
    # x log λ − λ − log x!
    "Poisson": lambda sample, rate: sample * log(rate) - rate - lgamma(sample + 1),
    # y x − log(1 + eˣ)   (ff.Bernoulli(name, ff.logistic(x)))
    "BernoulliFromLogOdds": lambda sample, logodds: sample * logodds - log(1 + exp(logodds)),
    # y x − eˣ − log y!   (ff.Poisson(name, ff.exp(x)))
    "PoissonFromLogRate": lambda sample, lograte: (
        sample * lograte - exp(lograte) - lgamma(sample + 1)),
    # Σ_k x_k log p_k  (x one-hot)
    "Discrete": lambda sample, probs: index_sum(at(sample, K) * log(at(probs, K)), K),
    # Σ_k (α_k − 1) log x_k + log Γ(Σ_k α_k) − Σ_k log Γ(α_k)
    "Dirichlet": lambda sample, alpha: (
        index_sum((at(alpha, K) - 1) * log(at(sample, K)), K)
        + lgamma(index_sum(at(alpha, K), K)) - index_sum(lgamma(at(alpha, K)), K)),
    # log Γ((ν+1)/2) − log Γ(ν/2) − ½ log ν − ½ log π + ½ log τ − (ν+1)/2 log(1 + τ(x−μ)²/ν)
    "StudentT": lambda sample, mean, nu, precision: (
        lgamma((nu + 1) * 0.5) - lgamma(nu * 0.5) - 0.5 * log(nu) - 0.5 * LOG_PI
        + 0.5 * log(precision)
        - (nu + 1) * 0.5 * log(1 + precision * (sample - mean) ** 2 * nu**-1)),
    # −log 2 − log b − ((x − μ)²)^½ / b
    "Laplace": lambda sample, mean, scale: (
        -LOG_2 - log(scale) - ((sample - mean) ** 2) ** 0.5 * scale**-1),
    # log 2 − log π + log s − log(s² + x²)
    "HalfCauchy": lambda sample, scale: (
        LOG_2 - LOG_PI + log(scale) - log(scale**2 + sample**2)),
    # −log s − ½ log 2π − ½ (x − μ)² / s²
    "GaussianScale": lambda sample, mean, scale: (
        -log(scale) - 0.5 * LOG_2PI - 0.5 * (sample - mean) ** 2 * scale**-2),
    # a log b − log Γ(a) − (a + 1) log x − b / x
    "InverseGamma": lambda sample, shape, scale: (
        shape * log(scale) - lgamma(shape) - (shape + 1) * log(sample) - scale * sample**-1),
    # log 2 + a log b − log Γ(a) − (2a + 1) log x − b / x²   (x² ~ InverseGamma(a, b))
    "RootInverseGamma": lambda sample, shape, scale: (
        LOG_2 + shape * log(scale) - lgamma(shape) - (2 * shape + 1) * log(sample)
        - scale * sample**-2),
    # log Γ(y + r) − log Γ(r) − log y! + y log p + r log(1 − p)
    "NegativeBinomial": lambda sample, dispersion, p: (
        lgamma(sample + dispersion) - lgamma(dispersion) - lgamma(sample + 1)
        + sample * log(p) + dispersion * log(1 - p)),
    # log PG(x | b, 0): a series, no closed form (the polyagamma package evaluates it)
    "PolyaGamma": lambda sample, shape: call(LOG_POLYA_GAMMA, sample, shape),
    # log C(n, y) − n log 2 + (y − n/2) ψ − ω ψ² / 2
    "PolyaGammaBinomial": lambda sample, trials, logit, omega: (
        lgamma(trials + 1) - lgamma(sample + 1) - lgamma(trials - sample + 1)
        - LOG_2 * trials + (sample - 0.5 * trials) * logit - 0.5 * omega * logit**2),
    # log Γ(y + r) − log Γ(r) − log y! − (y + r) log 2 + (y − r)/2 ψ − ω ψ² / 2
    "PolyaGammaNegativeBinomial": lambda sample, dispersion, logit, omega: (
        lgamma(sample + dispersion) - lgamma(dispersion) - lgamma(sample + 1)
        - LOG_2 * (sample + dispersion) + 0.5 * (sample - dispersion) * logit
        - 0.5 * omega * logit**2),
}

#: deterministic factor name -> the expression of its output over its inputs
EXPRESSION: dict[str, Callable[..., Term]] = {
    "Plus": lambda a, b: a + b,
    "Minus": lambda a, b: a - b,
    "ScaleBy": lambda a, scale: a * scale,
    "Product": lambda a, b: a * b,
    "Reciprocal": lambda a: a**-1,   # the samplers' own: scale-mixture parameters
    "Square": lambda a: a**2,
    "Logistic": lambda x: (1 + exp(-x)) ** -1,
}


def log_density_term(factor: str) -> Callable[..., Term] | None:
    """The log density of ``factor`` as a function of its arguments' terms: a built-in's
    formula above, a ``@ff.factor``'s own formula, or None when factorflow has none."""
    if factor in LOG_DENSITY:
        return LOG_DENSITY[factor]
    from factorflow.model.dsl import _USER_FACTORS

    user = _USER_FACTORS.get(factor)
    if user is None:
        return None
    density = user.log_density

    def formula(**args: Term) -> Term:
        return substitute(density, args)

    return formula


def substitute(term: Term, values: dict[str, Term]) -> Term:
    """``term`` with each symbol or data named in ``values`` replaced by its term."""
    memo: dict[Term, Term] = {}

    def go(t: Term) -> Term:
        if t in memo:
            return memo[t]
        if t.op in (SYM, DATA) and t.payload[0] in values:
            out = values[t.payload[0]]
        elif t.args:
            out = Term(t.op, tuple(go(a) for a in t.args), t.payload)
        else:
            out = t
        memo[t] = out
        return out

    return go(term)
