"""Fuzz seed 23 (crash16): a latent variable defined in a Switch nested in a plate
opened inside an outer Switch (``v19`` in ``ff.Switch(v17[r])`` in ``ff.Plate(r)`` in
``ff.Switch(v14)``) crashed EP at run time with a raw NumPy error ("input operand has
more dimensions than allowed by the axis remapping").

Cause (``transforms/gates.py``): the copy of the variable's per-case local into the
outer gate's clone array waits until the outer case's body ends (it is defined inside a
deeper gate), and was placed there outside the plate's loop; the Copy then ran over the
case axis only and its messages lost the plate's axis (nor were the clone's axes
permuted to the loops' order).  The copy is now placed in loops over the local's axes
(``_Gates._in_loops``).

Reference: the model is discrete and tree-shaped, so EP is exact; its posteriors and
log evidence are checked against enumeration of every joint state (1e-9).  The
unshrunk fuzz model's shape (a gather ``v2[v17]`` of a Gamma array beside the latent)
is checked to run with finite posteriors and evidence.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import factorflow as ff

P14 = np.array([0.7, 0.3])
P17 = np.array([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]])  # v17's prior per case of v14
P19 = np.array([0.2, 0.6, 0.9, 0.4])  # v19's p per case of v17
Q = np.array([0.8, 0.3, 0.5, 0.1])  # w's p per case of v17


def build(data: np.ndarray) -> ff.Model:
    """The shrunk fuzz model (v19 latent in the nested switch), w observed beside it."""
    with ff.Model("crash16") as model:
        v14 = ff.Discrete("v14", P14)
        with ff.Switch(v14):
            r = ff.Range("r", len(data))
            with ff.Plate(r):
                v17 = ff.Discrete("v17", ff.Constant(P17)[v14])
                with ff.Switch(v17):
                    ff.Bernoulli("v19", ff.Constant(P19)[v17])
                    ff.Bernoulli("w", ff.Constant(Q)[v17], observed=data)
    return model


def enumerate_posterior(data: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """p(v14 | w), p(v17[r] | w), p(v19[r] = 1 | w) and log p(w), summing every joint
    state (v14, v17[0..n), v19[0..n))."""
    n = len(data)
    post14, post17, post19, total = np.zeros(2), np.zeros((n, 4)), np.zeros(n), 0.0
    for a in range(2):
        for ks in itertools.product(range(4), repeat=n):
            for bs in itertools.product(range(2), repeat=n):
                p = P14[a]
                for k, b, w in zip(ks, bs, data, strict=True):
                    p *= P17[a, k] * (P19[k] if b else 1 - P19[k]) * (Q[k] if w else 1 - Q[k])
                total += p
                post14[a] += p
                for i, (k, b) in enumerate(zip(ks, bs, strict=True)):
                    post17[i, k] += p
                    post19[i] += p * b
    return post14 / total, post17 / total, post19 / total, float(np.log(total))


@pytest.mark.parametrize("data", [[1, 0, 1], [0], [1, 1], [0, 1, 1, 0, 1]])
def test_nested_switch_latent_is_exact(data: list[int]) -> None:
    """EP on the shrunk model runs (it crashed) and equals enumeration to 1e-9; the
    plate's size differs from, or (two elements) equals, the outer switch's cases."""
    w = np.array(data)
    result = build(w).compile("ep").run(iterations=50)
    p14, p17, p19, log_z = enumerate_posterior(w)
    np.testing.assert_allclose(result["v14"].probs, p14, rtol=0, atol=1e-9)
    np.testing.assert_allclose(result["v17"].probs, p17, rtol=0, atol=1e-9)
    np.testing.assert_allclose(result["v19"].p, p19, rtol=0, atol=1e-9)
    assert result.log_evidence == pytest.approx(log_z, abs=1e-9)


def test_fuzz_seed_23_shape_runs() -> None:
    """The fuzz model's core: a gather v2[v17] of a Gamma array beside a latent v19
    in the nested switch runs with finite posteriors and evidence (EP is not exact
    there: no reference)."""
    with ff.Model("fuzz") as model:
        r1 = ff.Range("r1", 4)
        with ff.Plate(r1):
            v2 = ff.Gamma("v2", 1.0, rate=0.2)
        v14 = ff.Discrete("v14", np.array([0.9, 0.1]))
        with ff.Switch(v14):
            r16 = ff.Range("r16", 2)
            with ff.Plate(r16):
                v17 = ff.Discrete("v17", np.array([[0.1, 0.2, 0.3, 0.4],
                                                   [0.25, 0.25, 0.25, 0.25]]))
                with ff.Switch(v17):
                    ff.Poisson("v18", v2[v17], observed=np.array([3, 4]))
                    ff.Bernoulli("v19", 0.5)
    result = model.compile("ep").run(iterations=200)
    assert np.isfinite(result.log_evidence)
    assert np.all(np.isfinite(result["v2"].shape)) and np.all(np.isfinite(result["v2"].rate))
    assert np.all(np.isfinite(result["v17"].probs))
    # v19 is drawn alike in every case with nothing observed: its prior
    np.testing.assert_allclose(result["v19"].p, 0.5, rtol=0, atol=1e-12)
