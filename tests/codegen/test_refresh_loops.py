"""Under VMP, ``evidence()`` brings every loop's messages up to date, not only the last
loop's (found by oracle seed 7).

Meaning: a model with two independent parts is scheduled as two loops; adding an
independent part whose plate is empty changes neither the posteriors nor the bound.  So
the bound reported after ``k`` sweeps of the two-loop model equals, to 1e-10, the bound
after ``k`` sweeps of the model without that part (one loop: its refresh was already
right) — before the fix the first loop's gate messages were read as a sweep left them,
and the bound after 2 sweeps was -2.1295 instead of -2.3745 (after 3, above the
converged value).  Bound traces never decrease.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import factorflow as ff


def _model(independent_part: bool) -> ff.Model:
    """g4 ~ N(0, 1); s5 = -2 g4; a Case on z8 and a Switch on z10 holding an If on c11;
    with ``independent_part``, g2 ~ N(0, 1) and an empty plate that reads it."""
    with ff.Model("refresh-loops") as model:
        g4 = ff.Gaussian("g4", 0.0, variance=1.0)
        s5 = -2.0 * g4
        z8 = ff.Discrete("z8", [0.3, 0.7])
        with ff.Case(z8, 0):
            ff.Gaussian("y9", g4, variance=0.25, observed=-0.4)
        c11 = ff.Bernoulli("c11", 0.9)
        z10 = ff.Discrete("z10", [1 / 3, 1 / 3, 1 / 3])
        with ff.Switch(z10), ff.If(c11):
            ff.Gaussian("y12", s5, variance=0.25, observed=1.2)
        if independent_part:
            g2 = ff.Gaussian("g2", 0.0, variance=1.0)
            with ff.Plate(ff.Range("r", 0)):
                g13 = ff.Gaussian("g13", g2, variance=4.0)
                ff.Gaussian("y14", g13, variance=2.0, observed=np.zeros(0))
    return model


def _run(compiled, sweeps: int):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return compiled.run(iterations=sweeps, tolerance=None, progress=False, trace=True)


@pytest.fixture(scope="module")
def compiled():
    return _model(False).compile("vmp"), _model(True).compile("vmp")


def test_the_independent_part_makes_a_second_loop(compiled):
    one, two = compiled
    assert one.source.count("for iteration in range(") == 1
    assert two.source.count("for iteration in range(") == 2


@pytest.mark.parametrize("sweeps", [1, 2, 3, 4, 6, 10])
def test_the_bound_after_every_sweep_reads_every_loop_up_to_date(compiled, sweeps):
    one, two = compiled
    alone, both = _run(one, sweeps), _run(two, sweeps)
    for name in ("g4", "z8", "c11", "z10"):
        for a, b in zip(alone[name].eta, both[name].eta, strict=True):
            np.testing.assert_allclose(b, a, rtol=0, atol=1e-12)
    # the one-loop model: the bound after sweep k is its trace's entry k
    assert len(alone.trace) == sweeps and alone.trace[-1] == alone.log_evidence
    assert abs(both.log_evidence - alone.log_evidence) <= 1e-10
    # the second loop moves nothing: every bound it reports is the first loop's
    assert all(abs(t - alone.log_evidence) <= 1e-10 for t in both.trace)


def test_bound_traces_never_decrease(compiled):
    one, two = compiled
    full = _run(one, 30).trace
    assert all(b >= a - 1e-12 for a, b in zip(full[:-1], full[1:], strict=True))
    # and the k-sweep runs of the two-loop model trace out the same sequence
    bounds = [_run(two, k).log_evidence for k in range(1, 11)]
    np.testing.assert_allclose(bounds, full[:10], rtol=0, atol=1e-10)
    assert all(b >= a - 1e-12 for a, b in zip(bounds[:-1], bounds[1:], strict=True))


def test_the_pruned_refresh_of_two_loops_gives_the_bits_of_the_whole_refresh(compiled):
    """codegen.liveness keeps its savings across loops: fewer statements than the whole
    refresh, the same bits every sweep, and the same posteriors with the bound or not."""
    from tests.codegen.test_liveness import _check, _whole_refresh
    two = compiled[1]
    assert len(two.source) < len(_whole_refresh(two).source)
    _check(two, {}, 6)
