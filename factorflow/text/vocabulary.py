"""What the text DSL's names mean: its distributions, functions and operators, each the
Python API call a person would write (one table per kind, no name handled elsewhere)."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from factorflow.model import factories
from factorflow.model.core import Variable

#: distribution name -> (factory, its positional parameters in the DSL)
DISTRIBUTIONS: dict[str, tuple[Callable[..., Variable], tuple[str, ...]]] = {
    "Gaussian": (factories.Gaussian, ("mean", "precision")),
    "Gamma": (factories.Gamma, ("shape", "rate")),
    "Beta": (factories.Beta, ("alpha", "beta")),
    "Bernoulli": (factories.Bernoulli, ("p",)),
    "Binomial": (factories.Binomial, ("trials", "p")),
    "Discrete": (factories.Discrete, ("probs",)),
    "Dirichlet": (factories.Dirichlet, ("alpha",)),
    "Poisson": (factories.Poisson, ("rate",)),
}
#: other libraries' names for the distributions, suggested when used
OTHER_NAMES = {"Normal": "Gaussian", "Categorical": "Discrete", "Multinomial": "Discrete",
               "Bern": "Bernoulli", "Gauss": "Gaussian"}
#: functions usable inside expressions, and as statements
FUNCTIONS: dict[str, Callable[..., Any]] = {"is_positive": factories.is_positive,
                                             "is_between": factories.is_between}
STATEMENTS: dict[str, Callable[..., Any]] = {"constrain_true": factories.constrain_true}


def keywords(factory: Callable[..., Any]) -> tuple[str, ...]:
    """The parameters a distribution takes by keyword (all but the name and observed=)."""
    return tuple(p for p in inspect.signature(factory).parameters
                 if p not in ("name", "observed"))


def suggest(name: str, known: Any) -> str:
    """The hint "; did you mean 'x'?" naming the known name nearest ``name`` (difflib),
    or "" when none is near."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _flip(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``a op b`` as Python evaluates it: the left operand's method if it is a variable,
    else the right one's reflected method (so a DSL expression and its Python twin build
    the same factor, with the same argument order)."""
    def call(a: Any, b: Any) -> Any:
        return fn(b, a) if not isinstance(a, Variable) and isinstance(b, Variable) else fn(a, b)
    return call


#: tree node -> the factory Python's operator calls (some operand random) ...
RANDOM_OPERATORS: dict[str, Callable[..., Any]] = {
    "add": _flip(factories.plus),
    "sub": factories.minus,
    "mul": _flip(factories.times),
    "gt": factories.greater,
    "lt": lambda a, b: factories.greater(b, a),
    "and_": _flip(lambda a, b: factories.logic("And", a, b)),
    "or_": _flip(lambda a, b: factories.logic("Or", a, b)),
    "not_": lambda a: factories.logic("Not", a),
    "neg": lambda a: factories.times(a, -1.0),
}
#: ... and the NumPy function (every operand known)
CONSTANT_OPERATORS: dict[str, Callable[..., Any]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "gt": np.greater,
    "lt": np.less, "and_": np.logical_and, "or_": np.logical_or, "not_": np.logical_not,
    "neg": np.negative,
}
