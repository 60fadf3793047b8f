"""Modules loaded on first use, so that ``import factorflow`` stays fast.

SciPy's ``special`` and ``stats`` take most of a second to import (``scipy.stats`` alone
loads much of SciPy); factorflow needs them only once a model runs or a posterior is
converted.  ``special = lazy_module("scipy.special")`` gives an object that imports the
module at its first attribute access and then keeps each attribute it has looked up, so
later calls cost what a module attribute does.
"""

from __future__ import annotations

import importlib
import types
from typing import Any


class LazyModule(types.ModuleType):
    """Stands for the module ``name``; imports it when an attribute is first read."""

    def __getattr__(self, attribute: str) -> Any:
        value = getattr(importlib.import_module(self.__name__), attribute)
        setattr(self, attribute, value)   # found in __dict__ from now on
        return value

    def __dir__(self) -> list[str]:
        return dir(importlib.import_module(self.__name__))


def lazy_module(name: str) -> Any:
    """A stand-in for the module ``name`` (e.g. "scipy.special") that imports it on
    first use; typed Any so that callers read it as the module."""
    return LazyModule(name)


#: ``scipy.special`` and ``scipy.stats``, imported where first used
special = lazy_module("scipy.special")
stats = lazy_module("scipy.stats")
