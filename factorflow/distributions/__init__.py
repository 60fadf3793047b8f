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

__all__ = ["Distribution", "Gaussian", "Gamma", "Beta", "Bernoulli", "Binomial", "Discrete",
           "Dirichlet", "Poisson", "PointMass"]
