"""factorflow: a Bayesian inference compiler.

Write a model with this module's API; ``model.compile(algorithm)`` turns it into readable,
vectorized Python that runs expectation propagation ("ep") or variational message passing
("vmp"); ``model.infer(...)`` compiles once and runs.
"""

import factorflow.factors  # noqa: F401  (registers every built-in factor)
import factorflow.runtime.compiled  # noqa: F401  (the compiler, loaded once at import)
from factorflow import distributions
from factorflow.errors import (
    BackendError,
    CheckpointError,
    ConvergenceWarning,
    DataError,
    ExcludedVariableError,
    ImproperMessageError,
    ImproperMessageWarning,
    ModelError,
    ParseError,
    RenderError,
    ScheduleError,
    ScheduleWarning,
    UnsupportedFactorError,
)
from factorflow.model.chains import Constant
from factorflow.model.core import Data, Model, Plate, Range, Variable
from factorflow.model.dsl import (
    E,
    Elog,
    V,
    digamma,
    exp,
    factor,
    lgamma,
    log,
    logdet,
    sum_over,
)
from factorflow.model.extremes import maximum, minimum
from factorflow.model.factories import (
    Bernoulli,
    Beta,
    Binomial,
    Dirichlet,
    Discrete,
    Gamma,
    Gaussian,
    HalfCauchy,
    Laplace,
    NegativeBinomial,
    Poisson,
    StudentT,
    constrain_true,
    is_between,
    is_positive,
)
from factorflow.model.gates import Case, If, IfNot, Switch
from factorflow.model.links import logistic, probit, softmax
from factorflow.model.naturals import naturals
from factorflow.model.nodes import Deterministic
from factorflow.model.vectors import VectorGaussian, Wishart, inner, matvec
from factorflow.rewrite.user import function, simplify_rule
from factorflow.runtime.result import Result, load_result
from factorflow.text import parse

#: ff.sum(expr, "k"), the sum over an inner index in a factor formula; left out of
#: __all__ so that a star import keeps the built-in sum
sum = sum_over  # noqa: A001
#: ff.max(a, b), ff.min(a, b): real variables (left out of __all__ like ff.sum)
max = maximum  # noqa: A001
min = minimum  # noqa: A001

__version__ = "0.1.0"

__all__ = [
    "Model", "Range", "Plate", "Data", "Variable", "If", "IfNot", "Case", "Switch",
    "Gaussian", "Gamma", "Beta", "Bernoulli", "Binomial", "Discrete", "Dirichlet", "Poisson",
    "StudentT", "Laplace", "HalfCauchy", "NegativeBinomial", "VectorGaussian", "Wishart",
    "inner", "matvec", "constrain_true", "is_between", "is_positive", "Constant", "logistic",
    "probit", "softmax", "distributions",
    "factor", "log", "exp", "lgamma", "digamma", "logdet", "function", "simplify_rule",
    "Deterministic",
    "naturals", "E", "V", "Elog",
    "ModelError", "DataError", "UnsupportedFactorError", "ScheduleError", "CheckpointError",
    "ExcludedVariableError",
    "ImproperMessageError", "ImproperMessageWarning",
    "ScheduleWarning", "ConvergenceWarning", "RenderError", "Result",
    "load_result", "parse", "ParseError", "BackendError",
]
