"""Hard logical constraints on Bernoulli variables under EP, against enumeration.

One constraint is a tree: EP is exact. Several may close loops: EP is approximate, but a
model whose evidence is positive runs to finite numbers, and a model whose constraints
contradict each other (evidence 0) raises ImproperMessageError saying so, never NaN.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import factorflow as ff

OPS = {"or": lambda a, b: a | b, "and-not": lambda a, b: a & ~b, "implies": lambda a, b: ~a | b}
HOLDS = {"or": lambda a, b: a or b, "and-not": lambda a, b: a and not b,
         "implies": lambda a, b: (not a) or b}
SETTINGS = settings(derandomize=True, max_examples=30, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))

constraint = st.tuples(st.sampled_from(sorted(OPS)),
                       st.permutations(range(3)).map(lambda p: p[:2]))
priors = st.lists(st.sampled_from((0.1, 0.3, 0.5, 0.7, 0.9)), min_size=3, max_size=3)


def build(probs, constraints) -> ff.Model:
    with ff.Model("constraints") as model:
        bs = [ff.Bernoulli(f"b{i}", p) for i, p in enumerate(probs)]
        for op, (i, j) in constraints:
            ff.constrain_true(OPS[op](bs[i], bs[j]))
    return model


def exact(probs, constraints):
    """log Z and P(b_i) by enumerating the 8 joint values."""
    z, m = 0.0, np.zeros(3)
    for x in itertools.product((0, 1), repeat=3):
        if all(HOLDS[op](x[i], x[j]) for op, (i, j) in constraints):
            w = np.prod([p if v else 1 - p for p, v in zip(probs, x, strict=True)])
            z, m = z + w, m + w * np.array(x)
    return (np.log(z), m / z) if z > 0 else (-np.inf, None)


@SETTINGS
@given(priors, constraint)
def test_one_constraint_is_exact(probs, c):
    log_z, marginals = exact(probs, [c])
    result = build(probs, [c]).infer("ep")
    assert abs(result.log_evidence - log_z) < 1e-10
    for i in range(3):
        assert abs(result[f"b{i}"].p - marginals[i]) < 1e-10


@SETTINGS
@given(priors, st.lists(constraint, min_size=2, max_size=4))
def test_loopy_constraints_are_finite_or_named_contradictions(probs, constraints):
    log_z, _ = exact(probs, constraints)
    model = build(probs, constraints)
    if np.isfinite(log_z):
        result = model.infer("ep", iterations=200)
        assert np.isfinite(result.log_evidence)
        assert all(0 <= result[f"b{i}"].p <= 1 for i in range(3))
    else:
        with pytest.raises(ff.ImproperMessageError, match="contradict each other"):
            model.infer("ep", iterations=200)
