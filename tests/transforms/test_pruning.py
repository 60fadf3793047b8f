"""Pruning of always-uniform messages (seed 000), by golden text and by meaning."""

from __future__ import annotations

import factorflow as ff
from factorflow.transforms.pruning import always_uniform
from tests.conftest import assert_close


def _unobserved_child() -> ff.Model:
    with ff.Model("child") as model:
        x = ff.Gaussian("x", 0.0, variance=1.0)
        ff.Gaussian("y", x, precision=1.0)
        ff.Gaussian("z", x, precision=1.0, observed=2.0)
    return model


def test_message_up_from_an_unobserved_leaf_is_pruned_under_ep():
    compiled = _unobserved_child().compile("ep")
    uniform = always_uniform(compiled.compilation.stages["messages"])
    assert uniform == {"v_y__B", "v_x__use0__B"}
    assert "v_x__use0__B =" not in compiled.source.split("# every message starts uniform")[1] \
        .split("log_evidence = 0.0")[1]
    result = compiled.run()
    # the leaf carries no information: x's posterior uses z alone
    assert_close(result["x"].mean, 1.0, rtol=1e-12)
    assert_close(result["x"].variance, 0.5, rtol=1e-12)
    assert_close(result["y"].variance, 1.5, rtol=1e-12)


def test_nothing_is_pruned_when_everything_carries_information():
    with ff.Model("full") as model:
        x = ff.Gaussian("x", 0.0, variance=1.0)
        ff.Gaussian("z", x, precision=1.0, observed=2.0)
    assert always_uniform(model.compile("ep").compilation.stages["messages"]) == set()
