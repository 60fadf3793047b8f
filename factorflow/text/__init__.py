"""The text DSL: ``ff.parse(text, data)`` builds a model from VinDsl-style statements.

    mu[j] ~ Gaussian(0, 1); tau[j] ~ Gamma(1, 1)
    y[i, j] ~ Gaussian(mu[j], tau[j])

``syntax`` holds the grammar (parsed with ``lark``), ``build`` turns the tree into the
Python API calls a person would write, so both give the same model and the same IR.
"""

from factorflow.text.build import parse
from factorflow.text.vocabulary import DISTRIBUTIONS

__all__ = ["parse", "DISTRIBUTIONS"]
