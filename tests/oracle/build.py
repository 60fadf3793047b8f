"""A spec to an ``ff.Model``: run exactly the code that ``str(spec)`` prints.

Executing the printed program (rather than a second interpreter) makes the repro in a
failure message the model that was tested, character for character.
"""

from __future__ import annotations

import factorflow as ff
from tests.oracle.spec import Spec, declared, render


def build(spec: Spec) -> tuple[ff.Model, dict[str, str]]:
    """The model, and factorflow's name of every spec variable (a derived variable is
    known by its label, e.g. ``"(a + b)"``)."""
    namespace: dict = {}
    exec(compile(render(spec), "<oracle model>", "exec"), namespace)
    labels = {name: namespace[name].name for name in declared(spec)}
    return namespace["model"], labels


__all__ = ["build"]
