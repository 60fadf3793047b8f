"""The negative binomial and the Pólya-Gamma factors of logistic likelihoods.

    NegativeBinomial(y | r, p):   log Γ(y + r) − log Γ(r) − log y! + y log p + r log(1 − p)
                                  (mean r p / (1 − p); with p = σ(ψ), NumPyro's
                                  NegativeBinomialLogits(r, ψ))
    PolyaGamma(ω | b):            the Pólya-Gamma law PG(b, 0) (Polson, Scott & Windle 2013)
    PolyaGammaBinomial(y | n, ψ, ω):
                                  log C(n, y) − n log 2 + (y − n/2) ψ − ω ψ² / 2
    PolyaGammaNegativeBinomial(y | r, ψ, ω):
                                  log Γ(y + r) − log Γ(r) − log y! − (y + r) log 2
                                  + (y − r)/2 ψ − ω ψ² / 2

The last two are the kernels of the Pólya-Gamma identity: with b = n (Binomial) or
b = y + r (negative binomial), ∫ exp(kernel) PG(ω | b, 0) dω is the Binomial(n, σ(ψ)) or
NegativeBinomial(r, σ(ψ)) probability of y (checked by quadrature in
``tests/samplers/test_polya_gamma.py``). Gibbs sampling finds the identity by exploring
rewrites (:mod:`factorflow.samplers.expansions`); none of these factors has EP or VMP
messages.
"""

from __future__ import annotations

import numpy as np

from factorflow.errors import ModelError
from factorflow.factors.registry import define_factor
from factorflow.lazy import special

LOG_2 = float(np.log(2.0))


def log_polya_gamma(sample, shape):
    """log PG(sample | shape, 0), elementwise (the ``polyagamma`` package's series)."""
    try:
        from polyagamma import polyagamma_pdf
    except ImportError:  # pragma: no cover - polyagamma is in the mcmc and test extras
        raise ModelError("Pólya-Gamma densities need the polyagamma package: pip install "
                         "'factorflow[mcmc]'.") from None
    x, shape = np.broadcast_arrays(np.asarray(sample, float), np.asarray(shape, float))
    return np.asarray(polyagamma_pdf(x, h=shape, z=0.0, return_log=True), dtype=float)


def _negative_binomial(sample, dispersion, p):
    return (special.gammaln(sample + dispersion) - special.gammaln(dispersion)
            - special.gammaln(sample + 1) + sample * np.log(p) + dispersion * np.log1p(-p))


def _pg_binomial(sample, trials, logit, omega):
    return (special.gammaln(trials + 1) - special.gammaln(sample + 1)
            - special.gammaln(trials - sample + 1) - trials * LOG_2
            + (sample - trials / 2) * logit - omega * logit**2 / 2)


def _pg_negative_binomial(sample, dispersion, logit, omega):
    return (special.gammaln(sample + dispersion) - special.gammaln(dispersion)
            - special.gammaln(sample + 1) - (sample + dispersion) * LOG_2
            + (sample - dispersion) / 2 * logit - omega * logit**2 / 2)


POLYA_GAMMA_FACTORS = (
    define_factor("NegativeBinomial", ("sample", "count"), ("dispersion", "positive"),
                  ("p", "unit"), log_density=_negative_binomial),
    define_factor("PolyaGamma", ("sample", "positive"), ("shape", "positive"),
                  log_density=log_polya_gamma),
    define_factor("PolyaGammaBinomial", ("sample", "count"), ("trials", "count"),
                  ("logit", "real"), ("omega", "positive"), log_density=_pg_binomial),
    define_factor("PolyaGammaNegativeBinomial", ("sample", "count"),
                  ("dispersion", "positive"), ("logit", "real"), ("omega", "positive"),
                  log_density=_pg_negative_binomial),
)
for _factor in POLYA_GAMMA_FACTORS:
    for _arg in _factor.arg_names:
        for _algorithm in ("ep", "vmp"):
            _factor.notes[(_algorithm, _arg)] = (
                "sample the model with 'gibbs', which augments it with Pólya-Gamma variables")
