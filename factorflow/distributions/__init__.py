"""Batched exponential-family distributions used as messages and posteriors."""

from factorflow.distributions.base import Distribution
from factorflow.distributions.families import (
    Bernoulli,
    Beta,
    Binomial,
    Dirichlet,
    Discrete,
    Gamma,
    Gaussian,
    PointMass,
    Poisson,
)
from factorflow.distributions.multivariate import VectorGaussian, Wishart

__all__ = ["Distribution", "Gaussian", "Gamma", "Beta", "Bernoulli", "Binomial", "Discrete",
           "Dirichlet", "Poisson", "PointMass", "VectorGaussian", "Wishart"]
