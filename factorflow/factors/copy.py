"""Copy(copy | value): a deterministic copy, so that each use of a gate clone is its own
edge (the gate transform's ``Factor.Copy`` in a switch).

EP and VMP both pass the message through unchanged; the EP evidence is the edge term
log ∫ m̂_copy m̂_value (zero under VMP, where the copy is a derived variable).
"""

from __future__ import annotations

import numpy as np

from factorflow.factors.mixtures import log_average
from factorflow.factors.registry import define_factor

COPY = define_factor("Copy", ("copy", "any"), ("value", "any"), deterministic=True)


@COPY.operator("ep", "copy")
@COPY.operator("vmp", "copy", trigger=("value",), skip_if_uniform=("value",))
def _copy(value):
    return value


@COPY.operator("ep", "value")
@COPY.operator("vmp", "value")
def _value(copy):
    return copy


@COPY.evidence_operator("ep")
def _log_average_factor(copy, value):
    return log_average(copy, value)


@COPY.evidence_operator("vmp")
def _average_log_factor(copy, value):
    return np.zeros(())
