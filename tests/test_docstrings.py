"""The examples in the public API's docstrings run and print what they show."""

from __future__ import annotations

import doctest
import importlib
import re

import numpy as np
import pytest

import factorflow as ff

#: modules whose public functions carry examples
MODULES = ["factorflow.model.factories", "factorflow.model.gates", "factorflow.model.nodes",
           "factorflow.text", "factorflow.model.core", "factorflow.runtime.result"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    failures, tried = doctest.testmod(module, extraglobs={"ff": ff, "np": np},
                                      optionflags=doctest.ELLIPSIS, verbose=False)
    assert tried > 0 and failures == 0


@pytest.mark.parametrize("name", ["Gaussian", "Gamma", "Beta", "Bernoulli", "Binomial",
                                  "Discrete", "Dirichlet", "Poisson", "is_positive",
                                  "constrain_true", "If", "IfNot", "Case", "Switch",
                                  "Deterministic", "parse", "Model", "Range", "Plate",
                                  "Data", "Result", "load_result"])
def test_public_function_has_an_example(name):
    """Its docstring has an example, or names (``see ``Other``) one that has one."""
    doc = getattr(ff, name).__doc__
    other = re.search(r"see\s+``(\w+)``", doc)
    assert ">>> " in doc or ">>> " in getattr(ff, other.group(1)).__doc__
