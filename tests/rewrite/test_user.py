"""User functions and @simplify rules: checked on random values, used by the derivation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special

import factorflow as ff
from factorflow.distributions import Bernoulli as BernoulliD
from factorflow.distributions import Beta as BetaD
from factorflow.factors.registry import FACTORS
from factorflow.rewrite.evaluate import evaluate
from factorflow.rewrite.expectations import expectation
from factorflow.rewrite.terms import sym
from factorflow.rewrite.user import user_rules
from tests.conftest import assert_close

logit = ff.function("logit", special.logit)
log1pexp = ff.function("log1pexp", lambda x: np.logaddexp(0.0, x))


@ff.simplify_rule(a="unit")
def logit_as_logs(a):                      # logit(a) -> log(a) - log(1 - a)
    return logit(a), ff.log(a) - ff.log(1 - a)


@ff.factor(sample="bool", p="unit")
def coin_by_logit(sample, p):
    return sample * logit(p) + ff.log(1 - p)


def test_a_rule_is_data_registered_once_and_printed():
    r = user_rules()["logit_as_logs"]
    assert str(r) == "logit_as_logs: logit(?a) -> log(?a) - log(1 - ?a)"
    count = len(user_rules().rules)

    def logit_as_logs(a):                  # the same rule again (a module imported twice)
        return logit(a), ff.log(a) - ff.log(1 - a)

    assert ff.simplify_rule(a="unit")(logit_as_logs) == r
    assert len(user_rules().rules) == count

    def logit_as_logs(a):                  # noqa: F811 - another rule under the same name
        return logit(a), -ff.log(1 / a - 1)

    with pytest.raises(ff.ModelError, match="named 'logit_as_logs' already exists"):
        ff.simplify_rule(a="unit")(logit_as_logs)


def test_a_wrong_rule_is_rejected_naming_it():
    with pytest.raises(ff.ModelError, match=r"simplify rule sign_slip is wrong: at a=0\.\d+, logit\(\?a\)"):
        @ff.simplify_rule(a="unit")
        def sign_slip(a):                  # log(a) + log(1 - a) is not logit(a)
            return logit(a), ff.log(a) + ff.log(1 - a)
    assert "sign_slip" not in {r.name for r in user_rules()}


def test_a_rule_wrong_only_outside_small_values_is_still_caught():
    with pytest.raises(ff.ModelError, match="simplify rule softplus_as_exp is wrong"):
        @ff.simplify_rule(x="real")
        def softplus_as_exp(x):            # log(1 + e^x) is not e^x (true only as x -> -inf)
            return log1pexp(x), ff.exp(x)


def test_rules_must_be_about_user_functions_and_bind_their_variables():
    with pytest.raises(ff.ModelError, match="applies no user function"):
        @ff.simplify_rule(a="positive")
        def log_square(a):
            return ff.log(a * a), 2 * ff.log(a)
    with pytest.raises(ff.ModelError, match=r"uses \['b'\]"):
        @ff.simplify_rule(a="unit", b="unit")
        def unbound(a, b):
            return logit(a), logit(b)
    with pytest.raises(ff.ModelError, match="domain 'complex'"):
        ff.simplify_rule(a="complex")


def test_the_expectation_algebra_uses_the_rule():
    p = sym("p")
    assert str(expectation(logit(p))) == "Elog(p) - Elog1m(p)"
    q = BetaD(np.array([2.0, 0.5]), np.array([3.0, 4.0]))
    value = evaluate(expectation(logit(p)), {ff.rewrite.Elog(p): q.expected_stats()[0],
                                             ff.rewrite.Elog1m(p): q.expected_stats()[1]})
    assert_close(value, special.digamma(q.alpha) - special.digamma(q.beta), rtol=1e-12)


def test_a_factor_whose_derivation_needs_the_rule_equals_the_builtin():
    """Bernoulli written with logit(p): p's message exists only through the user's rule
    and equals the built-in Bernoulli-from-Beta message, as does the sample's."""
    assert coin_by_logit.blocked == {}
    p = BetaD(np.array([2.0, 3.0]), np.array([5.0, 1.5]))
    s = BernoulliD(np.array([0.3, 0.9]))
    ours, theirs = FACTORS["coin_by_logit"], FACTORS["Bernoulli"]
    to_p = ours.operators[("vmp", "p")].fn(sample=s)
    want = theirs.operators[("vmp", "p")].fn(sample=s)
    for e1, e2 in zip(to_p.eta, want.eta, strict=True):
        assert_close(e1, e2, rtol=1e-12)
    to_sample = ours.operators[("vmp", "sample")].fn(p=p)
    assert_close(to_sample.eta[0], theirs.operators[("vmp", "sample")].fn(p=p).eta[0],
                 rtol=1e-12)


def test_without_a_rule_the_same_factor_is_blocked_by_name():
    logit_raw = ff.function("logit_raw", special.logit)

    @ff.factor(sample="bool", p="unit")
    def coin_by_unruled_logit(sample, p):
        return sample * logit_raw(p) + ff.log(1 - p)

    assert "logit_raw(p)" in coin_by_unruled_logit.blocked["p"]
