"""Factors and their message operators; importing this package registers every factor.

``FACTORS`` maps a factor's name to its ``Factor`` (arguments, log density, operator
tables, evidence operators); see ``factorflow.factors.registry`` for the calling
convention the generated code relies on.
"""

from factorflow.factors import (  # noqa: F401 - imported to register their factors
    arithmetic,
    bernoulli,
    beta,
    between,
    binomial,
    chains,
    compare,
    copy,
    dirichlet,
    discrete,
    extremes,
    fused_switch,
    fused_vector_switch,
    gamma,
    gate,
    gaussian,
    inner_product,
    linear_gaussian,
    linear_vector,
    links,
    logic,
    logistic,
    plate_sum,
    poisson,
    polya_gamma,
    scale_mixtures,
    softmax,
    vector_chains,
    vector_gaussian,
    wishart,
)
from factorflow.factors.registry import FACTORS, Factor, Operator, define_factor

#: the factors every process has once factorflow is imported (not @ff.factor or
#: ff.Deterministic ones, which exist only in the process that defined them)
BUILTIN_FACTORS = frozenset(FACTORS)

__all__ = ["FACTORS", "BUILTIN_FACTORS", "Factor", "Operator", "define_factor"]
