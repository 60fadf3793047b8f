"""Heavy-tailed and scale factors that Gibbs sampling handles through scale mixtures.

    StudentT(x | μ, ν, τ):  log Γ((ν+1)/2) − log Γ(ν/2) − ½ log(νπ/τ) − (ν+1)/2 log(1 + τ(x−μ)²/ν)
    Laplace(x | μ, b):      −log 2b − |x − μ| / b
    HalfCauchy(x | s):      log 2 − log π + log s − log(s² + x²)          (x > 0)
    GaussianScale(x | μ, s): the Gaussian of standard deviation s (a random scale allowed)
    InverseGamma(x | a, b):  a log b − log Γ(a) − (a + 1) log x − b / x
    RootInverseGamma(x | a, b): the law of x when x² ~ InverseGamma(a, b)
                            log 2 + a log b − log Γ(a) − (2a + 1) log x − b / x²

None has EP or VMP messages: their densities are not conjugate to anything. Gibbs
sampling (:mod:`factorflow.samplers`) finds, by exploring rewrites, the scale-mixture
expansions that make them conditionally conjugate (``samplers/expansions.py``).
"""

from __future__ import annotations

import numpy as np

from factorflow.factors.registry import define_factor
from factorflow.lazy import special

_SAMPLE_IT = "sample the model with 'gibbs', which expands it as a scale mixture"


def _student_t(sample, mean, nu, precision):
    z2 = precision * (sample - mean) ** 2
    return (special.gammaln((nu + 1) / 2) - special.gammaln(nu / 2)
            - 0.5 * np.log(nu * np.pi / precision) - (nu + 1) / 2 * np.log1p(z2 / nu))


def _laplace(sample, mean, scale):
    return -np.log(2 * scale) - np.abs(sample - mean) / scale


def _half_cauchy(sample, scale):
    return np.log(2 / np.pi) + np.log(scale) - np.log(scale**2 + sample**2)


def _gaussian_scale(sample, mean, scale):
    return -np.log(scale) - 0.5 * np.log(2 * np.pi) - 0.5 * ((sample - mean) / scale) ** 2


def _inverse_gamma(sample, shape, scale):
    return shape * np.log(scale) - special.gammaln(shape) - (shape + 1) * np.log(sample) \
        - scale / sample


def _root_inverse_gamma(sample, shape, scale):
    return (np.log(2.0) + shape * np.log(scale) - special.gammaln(shape)
            - (2 * shape + 1) * np.log(sample) - scale / sample**2)


SCALE_FACTORS = (
    define_factor("StudentT", ("sample", "real"), ("mean", "real"), ("nu", "positive"),
                  ("precision", "positive"), log_density=_student_t),
    define_factor("Laplace", ("sample", "real"), ("mean", "real"), ("scale", "positive"),
                  log_density=_laplace),
    define_factor("HalfCauchy", ("sample", "positive"), ("scale", "positive"),
                  log_density=_half_cauchy),
    define_factor("GaussianScale", ("sample", "real"), ("mean", "real"),
                  ("scale", "positive"), log_density=_gaussian_scale),
    define_factor("InverseGamma", ("sample", "positive"), ("shape", "positive"),
                  ("scale", "positive"), log_density=_inverse_gamma),
    define_factor("RootInverseGamma", ("sample", "positive"), ("shape", "positive"),
                  ("scale", "positive"), log_density=_root_inverse_gamma),
)
for _factor in SCALE_FACTORS:
    for _arg in _factor.arg_names:
        for _algorithm in ("ep", "vmp"):
            _factor.notes[(_algorithm, _arg)] = _SAMPLE_IT
