"""Minimal models of what session 13's fresh seeds and generators found, each against an
exact reference."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import factorflow as ff
from tests.conftest import assert_close


@pytest.mark.parametrize("algorithm", ["ep", "vmp"])
def test_one_data_observed_with_a_factor_per_branch(algorithm):
    """An observed child with a different factor in each branch of a gate may be an
    ``ff.Data`` (the same one in every branch), as a constant array may; it was refused
    ("no observed value (observe it outside the gates)").  Found by the HMM generator
    (``ff.Case(x, k)`` emissions given as ``ff.Data``).  Exact mixture posterior and
    evidence, and again with new data without recompiling."""
    y = np.array([0.3, 1.5, -0.7])
    with ff.Model() as model:
        with ff.Plate(ff.Range("n", 3)):
            c = ff.Bernoulli("c", 0.3)
            data = ff.Data("y_data", y)
            with ff.If(c):
                ff.Gaussian("y", 1.0, precision=2.0, observed=data)
            with ff.IfNot(c):
                ff.Gaussian("y", -1.0, precision=0.5, observed=data)
    compiled = model.compile(algorithm)
    for values in (y, np.array([2.0, -2.0, 0.0])):
        on = 0.3 * stats.norm.pdf(values, 1.0, np.sqrt(0.5))
        off = 0.7 * stats.norm.pdf(values, -1.0, np.sqrt(2.0))
        result = compiled.run(data={"y_data": values}, progress=False)
        assert_close(result["c"].p, on / (on + off), rtol=1e-12)
        assert_close(result.log_evidence, np.sum(np.log(on + off)), rtol=1e-12)


def test_two_different_data_in_two_branches_are_refused_by_name():
    with ff.Model():
        c = ff.Bernoulli("c", 0.3)
        with ff.If(c):
            ff.Gaussian("y", 1.0, precision=2.0, observed=ff.Data("a", 1.0))
        with ff.IfNot(c), pytest.raises(ff.ModelError, match="'y' is defined in several"):
            ff.Gaussian("y", -1.0, precision=0.5, observed=ff.Data("b", 1.0))
