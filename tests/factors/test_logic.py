"""And, Or, Not, ConstrainTrue: operators against exact enumeration of the truth tables."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from factorflow.distributions import Bernoulli
from factorflow.errors import UnsupportedFactorError
from tests.conftest import assert_close
from tests.factors.checks import SETTINGS, assert_batched, evidence, naturals, op, vmp_slope

GATES = {"And": lambda a, b: a and b, "Or": lambda a, b: a or b}
probabilities = st.one_of(st.floats(0.01, 0.99), st.sampled_from([0.0, 1.0, 0.5]))


def _pmf(p: float) -> dict[int, float]:
    return {1: p, 0: 1 - p}


def _weight(p: float) -> dict[int, float]:
    """The evidence weight of a message with P(true) = p: 1 for a uniform one."""
    return {1: 1.0, 0: 1.0} if p == 0.5 else _pmf(p)


@SETTINGS
@given(st.sampled_from(sorted(GATES)), probabilities, probabilities, probabilities)
def test_gate_ep_messages_and_evidence(name, po, pa, pb):
    g = GATES[name]
    mo, ma, mb = Bernoulli(po), Bernoulli(pa), Bernoulli(pb)
    forward = sum(_pmf(pa)[a] * _pmf(pb)[b] for a, b in itertools.product((0, 1), repeat=2)
                  if g(a, b))
    assert_close(op(name, "ep", "out")(a=ma, b=mb).p, forward, atol=1e-12)
    assert_close(op(name, "vmp", "out")(a=ma, b=mb).p, forward, atol=1e-12)
    # tilted over a: m_a(a) Σ_b m_out(g(a, b)) m_b(b)
    tilted = {a: _pmf(pa)[a] * sum(_pmf(po)[int(g(a, b))] * _pmf(pb)[b] for b in (0, 1))
              for a in (0, 1)}
    if tilted[0] + tilted[1] > 0:
        # the gates are symmetric: the message to b with m_a = mb equals that to a
        for target, other, incoming in (("a", {"b": mb}, ma), ("b", {"a": mb}, ma)):
            post = op(name, "ep", target)(out=mo, **other) * incoming
            assert_close(post.p, tilted[1] / (tilted[0] + tilted[1]), atol=1e-12)
    total = sum(_weight(po)[int(g(a, b))] * _weight(pa)[a] * _weight(pb)[b]
                for a, b in itertools.product((0, 1), repeat=2))
    with np.errstate(divide="ignore"):
        assert_close(evidence(name, "ep")(out=mo, a=ma, b=mb), np.log(total), atol=1e-12)


@SETTINGS
@given(st.sampled_from(sorted(GATES)), st.floats(0.01, 0.99), probabilities)
def test_gate_vmp_input_message_is_gradient_of_expected_log_output_message(name, po, pb):
    g = GATES[name]
    log_out = {1: math.log(po), 0: math.log1p(-po)}

    def expected(s):  # E_{q_a q_b}[log m_out(g(a, b))] for q_a(true) = s[0]
        return sum(_pmf(float(s[0]))[a] * _pmf(pb)[b] * log_out[int(g(a, b))]
                   for a, b in itertools.product((0, 1), repeat=2))

    slope = vmp_slope(expected, [np.array([0.25]), np.array([0.75])])
    msg = op(name, "vmp", "a")(out=Bernoulli(po), b=Bernoulli(pb))
    assert_close(naturals(msg), slope, rtol=1e-9, atol=1e-12)
    msg = op(name, "vmp", "b")(out=Bernoulli(po), a=Bernoulli(pb))
    assert_close(naturals(msg), slope, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", sorted(GATES))
def test_gate_vmp_with_observed_output(name):
    with pytest.raises(UnsupportedFactorError, match="observed output"):
        op(name, "vmp", "a")(out=np.array(True), b=Bernoulli(0.3))
    for out, b in itertools.product((True, False), repeat=2):
        if GATES[name](1, b) == out or GATES[name](0, b) == out:
            assert_close(naturals(op(name, "vmp", "a")(out=np.array(out), b=np.array(b))),
                         naturals(op(name, "ep", "a")(out=np.array(out), b=np.array(b))))


@SETTINGS
@given(probabilities, probabilities)
def test_not(po, pa):
    mo, ma = Bernoulli(po), Bernoulli(pa)
    for algorithm in ("ep", "vmp"):
        assert_close(op("Not", algorithm, "out")(a=ma).p, 1 - pa, atol=1e-12)
        assert_close(op("Not", algorithm, "a")(out=mo).p, 1 - po, atol=1e-12)
    total = sum(_weight(po)[1 - a] * _weight(pa)[a] for a in (0, 1))
    with np.errstate(divide="ignore"):
        assert_close(evidence("Not", "ep")(out=mo, a=ma), np.log(total), atol=1e-12)


@SETTINGS
@given(probabilities)
def test_constrain_true(p):
    for algorithm in ("ep", "vmp"):
        msg = op("ConstrainTrue", algorithm, "value")()
        assert msg.log_odds == np.inf
        if p > 0:   # (a point mass on false times one on true is no distribution)
            assert_close((msg * Bernoulli(p)).p, 1.0)
    with np.errstate(divide="ignore"):
        assert_close(evidence("ConstrainTrue", "ep")(value=Bernoulli(p)),
                     0.0 if p == 0.5 else np.log(p))
    assert_close(evidence("ConstrainTrue", "vmp")(value=Bernoulli(p)),
                 0.0 if p == 1.0 else -np.inf)


def test_known_and_point_like_arguments_agree():
    gates = dict(GATES, Not=lambda a, b: not a)
    cases = [("And", "out", ("a", "b")), ("And", "a", ("out", "b")), ("Or", "out", ("a", "b")),
             ("Or", "b", ("out", "a")), ("Not", "out", ("a",)), ("Not", "a", ("out",))]
    for (name, target, reads), algorithm in itertools.product(cases, ("ep", "vmp")):
        for values in itertools.product((True, False), repeat=len(reads)):
            if target != "out" and not any(gates[name](t, values[-1]) == values[0]
                                           for t in (0, 1)):
                continue   # an impossible observation: no message exists
            known = {k: np.array(v) for k, v in zip(reads, values, strict=True)}
            point = {k: Bernoulli.from_natural(np.inf if v else -np.inf)
                     for k, v in zip(reads, values, strict=True)}
            a, b = op(name, algorithm, target)(**known), op(name, algorithm, target)(**point)
            np.testing.assert_array_equal(naturals(a), naturals(b))


def test_batched_operators_equal_elementwise_calls():
    rng = np.random.default_rng(14)
    shape = (3, 2)
    mo, ma, mb = (Bernoulli(rng.uniform(0.05, 0.95, shape)) for _ in range(3))
    bits = rng.random(shape) < 0.5
    for name in ("And", "Or"):
        for fn, kwargs in [(op(name, "ep", "out"), {"a": ma, "b": mb}),
                           (op(name, "ep", "a"), {"out": mo, "b": mb}),
                           (op(name, "ep", "b"), {"out": mo, "a": bits}),
                           (op(name, "vmp", "a"), {"out": mo, "b": mb}),
                           (evidence(name, "ep"), {"out": mo, "a": ma, "b": bits})]:
            assert_batched(fn, kwargs, shape)
    assert_batched(op("Not", "ep", "a"), {"out": mo}, shape)
    assert_batched(evidence("Not", "ep"), {"out": mo, "a": ma}, shape)
    assert_batched(evidence("ConstrainTrue", "ep"), {"value": ma}, shape)
