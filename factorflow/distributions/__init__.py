"""Batched exponential-family distributions used as messages and posteriors.

One object holds a whole plate (``batch_shape``); each is stored by its natural
parameters, so products of messages add them; ``to_scipy()`` gives SciPy's frozen
distribution.  Posteriors in a ``Result`` are these:

>>> g = ff.distributions.Gaussian([1.0, 3.0], variance=[1.0, 1.0])
>>> g.batch_shape, g[1], g.prod()         # the product of N(1, 1) and N(3, 1)
((2,), Gaussian(mean=3.0, variance=1.0), Gaussian(mean=2.0, variance=0.5))
>>> float(g[0].to_scipy().cdf(1.0))
0.5
"""

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
