"""The examples in the public API's docstrings run and print what they show, and every
public name has one."""

from __future__ import annotations

import doctest
import importlib
import inspect

import numpy as np
import pytest

import factorflow as ff
import factorflow.distributions as dist
from factorflow.runtime.compiled import CompiledModel
from factorflow.samplers.gibbs import GibbsModel
from factorflow.samplers.result import SamplingResult

#: modules whose public functions carry examples (every module that defines a name of
#: ``ff.__all__`` or a public method below is here: see ``test_examples_are_run``)
MODULES = ["factorflow.model.factories", "factorflow.model.gates", "factorflow.model.nodes",
           "factorflow.text", "factorflow.model.core", "factorflow.runtime.result",
           "factorflow.runtime.compiled", "factorflow.model.vectors", "factorflow.model.chains",
           "factorflow.model.dsl", "factorflow.model.naturals", "factorflow.model.links",
           "factorflow.model.extremes", "factorflow.rewrite.user", "factorflow.errors",
           "factorflow.distributions", "factorflow.distributions.base",
           "factorflow.distributions.families", "factorflow.distributions.multivariate",
           "factorflow.samplers.gibbs", "factorflow.samplers.result"]

#: classes whose public methods and properties each carry an example
CLASSES = [ff.Model, CompiledModel, ff.Result, GibbsModel, SamplingResult] + [
    getattr(dist, name) for name in dist.__all__]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    failures, tried = doctest.testmod(
        module, extraglobs={"ff": ff, "np": np}, verbose=False,
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert tried > 0 and failures == 0


@pytest.mark.parametrize("name", ff.__all__)
def test_every_public_name_has_an_example(name):
    """Its own docstring holds a doctest example (a reference to another's is not one)."""
    doc = inspect.getdoc(getattr(ff, name)) or ""
    assert ">>> " in doc, f"ff.{name} has no example in its docstring"


def _public_members(cls: type) -> list[tuple[str, object]]:
    """The public methods, class methods and properties of ``cls`` (inherited ones too),
    as the objects ``inspect.getdoc`` reads (it finds a docstring an override inherits)."""
    out = []
    for name in dir(cls):
        if name.startswith("_"):
            continue
        attr = inspect.getattr_static(cls, name)
        if isinstance(attr, property):
            out.append((name, attr))
        elif isinstance(attr, classmethod | staticmethod) or inspect.isfunction(attr):
            out.append((name, getattr(cls, name)))
    return out


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_public_method_has_an_example(cls):
    members = _public_members(cls)
    missing = [name for name, member in members if ">>> " not in (inspect.getdoc(member) or "")]
    assert members and not missing, f"{cls.__name__} methods without an example: {missing}"


def _module_of_example(cls: type, name: str) -> str:
    """The module of the class in ``cls``'s MRO whose own ``name`` holds the example
    (an override without a docstring shows its base's)."""
    for base in inspect.getmro(cls):
        attr = vars(base).get(name)
        if attr is not None and ">>> " in (inspect.getdoc(attr) or ""):
            return base.__module__
    return "(none)"


def test_examples_are_run():
    """Every example counted above is in a module that ``test_docstring_examples`` runs
    (so it is checked, not only present)."""
    where = {obj.__name__ if inspect.ismodule(obj) else inspect.unwrap(obj).__module__
             for obj in (getattr(ff, n) for n in ff.__all__)}
    where |= {_module_of_example(cls, name) for cls in CLASSES
              for name, _ in _public_members(cls)}
    assert where <= set(MODULES), sorted(where - set(MODULES))
