"""ff.Case(z, k) gates before an ff.Switch(z) loop (issue 10/11, gatebound15 item 2).

Inside ``ff.Switch(z)``, ``ff.Case(z, k)`` is the k-th branch only; a Switch body that
*starts* with such gates was refused ("ff.Case gates on it come before an ff.Switch on it;
write the Switch first"), although the user had written the Switch first: the lowering
puts a Case-picked statement before the Switch's loop.  Those gates now share the
Switch's loop as their case axis, as any Case gate after the loop does.  Exact answers
by enumeration of z (every other variable is conjugate given z).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import factorflow as ff
from tests.conftest import assert_close


def _shape(plate: bool) -> tuple[int, ...]:
    return (3,) if plate else ()


@pytest.mark.parametrize("algorithm", ["ep", "vmp"])
@pytest.mark.parametrize("plate", [False, True])
def test_a_switch_body_that_starts_with_case_gates_on_its_condition(plate, algorithm):
    """Switch(z): Case(z, 0) observes a ~ N(0, 1), Case(z, 1) a ~ N(2, 1); then x is
    drawn identically in every case.  z's posterior and the evidence are closed forms."""
    shape = _shape(plate)
    with ff.Model() as model:
        outer = ff.Plate(ff.Range("n", 3)) if plate else None
        if outer is not None:
            outer.__enter__()
        z = ff.Discrete("z", [0.4, 0.6])
        with ff.Switch(z):
            with ff.Case(z, 0):
                ff.Gaussian("a", 0.0, precision=1.0, observed=np.full(shape, 0.5))
            with ff.Case(z, 1):
                ff.Gaussian("a", 2.0, precision=1.0, observed=np.full(shape, 0.5))
            x = ff.Gaussian("x", 0.0, precision=0.5)
            ff.Gaussian("o", x, precision=1.0, observed=np.full(shape, 1.0))
        if outer is not None:
            outer.__exit__(None, None, None)
    result = model.infer(algorithm, progress=False)
    w = np.array([0.4 * stats.norm.pdf(0.5, 0.0, 1.0), 0.6 * stats.norm.pdf(0.5, 2.0, 1.0)])
    assert_close(result["z"].probs, np.broadcast_to(w / w.sum(), shape + (2,)), rtol=1e-12)
    assert_close(result["x"].mean, np.full(shape, 1.0 / 1.5), rtol=1e-12)
    assert_close(result["x"].variance, np.full(shape, 1.0 / 1.5), rtol=1e-12)
    log_z = (np.log(w.sum()) + stats.norm.logpdf(1.0, 0.0, np.sqrt(3.0))) * (3 if plate else 1)
    assert_close(result.log_evidence, log_z, rtol=1e-12)


@pytest.mark.parametrize("algorithm", ["ep", "vmp"])
@pytest.mark.parametrize("where", ["before the switch", "opening its body",
                                   "after a statement"])
def test_an_exit_of_case_gates_read_in_a_switch_on_their_condition(where, algorithm):
    """w defined in ff.Case(z, 0) and ff.Case(z, 1) (before ff.Switch(z), opening its
    body, or after a first statement in it), then o ~ Bernoulli(p[z, w]) observed in the
    Switch's body through ff.Case(w, j): in case k, w is w's definition in case k.  The
    read of w in the Switch's case was taken for a second definition of w there (a Copy
    into w's clone from a fresh local): EP's log Z was -1.19 against the exact -1.77 with
    a statement first (main before this), and the Case gates before the Switch, now
    accepted, did the same.  p(z, w, o) enumerated; a tree, so EP and VMP are exact."""
    pw = np.array([[0.3, 0.7], [0.5, 0.5]])  # p(w | z)
    po = np.array([[0.2, 0.9], [0.6, 0.1]])  # p(o = True | z, w)
    first = where == "after a statement"
    with ff.Model() as model:
        z = ff.Discrete("z", [0.4, 0.6])
        if where == "before the switch":
            with ff.Case(z, 0):
                w = ff.Discrete("w", pw[0])
            with ff.Case(z, 1):
                w = ff.Discrete("w", pw[1])
        with ff.Switch(z):
            if first:
                ff.Gaussian("a", 0.0, precision=1.0, observed=0.5)
            if where != "before the switch":
                with ff.Case(z, 0):
                    w = ff.Discrete("w", pw[0])
                with ff.Case(z, 1):
                    w = ff.Discrete("w", pw[1])
            for j in range(2):
                with ff.Case(w, j):
                    ff.Bernoulli("o", ff.Constant(po[:, j])[z], observed=True)
    joint = np.array([0.4, 0.6])[:, None] * pw * po
    result = model.infer(algorithm, iterations=200, progress=False)
    assert_close(result["z"].probs, joint.sum(1) / joint.sum(), rtol=1e-12)
    assert_close(result["w"].probs, joint.sum(0) / joint.sum(), rtol=1e-12)
    log_z = np.log(joint.sum()) + (stats.norm.logpdf(0.5) if first else 0.0)
    assert_close(result.log_evidence, log_z, rtol=1e-12)
