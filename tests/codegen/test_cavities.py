"""Identities the emitter writes at compile time (issue 14, small N).

EP, a variable with one use taken as it is, whose posterior is its definition's message
F times the use's message B (``codegen.python._cavities``): the message to the use,
posterior / B, is F, and the message to the definition, posterior / F, is B.  The sweep
then leaves out the posterior's first update, which nothing reads any more (TrueSkill's
pw and pl were updated twice a sweep); not where B comes from an operator that reads its
last message or keeps a state (an extrapolation over sweeps).  A derived variable's backward product of the
uniform factor with one message over its plates is that message
(``variable_nodes.backward``).

Meaning: the posteriors after every sweep and the results agree with the program
without the EP identities to 1e-12 (F·B/B against F: rounding) on TrueSkill and on
every example run under EP; bit for bit where the messages have 4,096 elements or more
(``Gaussian.__truediv__`` gives a remembered product's factor back exactly).  The VMP
identity changes no bit (the examples: ``test_lean.py``, ``test_liveness.py``, which
compare against main's texts).  Text: TrueSkill's sweep.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

from factorflow.codegen import python
from tests.codegen.test_liveness import EXAMPLES, _arrays
from tests.runtime.handwritten import trueskill_games, trueskill_model


def _without_identities(compiled):
    """``compiled`` with every use's message and backward message computed as quotients."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(python, "_cavities", lambda program: {})
        # (the sweep's analyses, remembered for the last program, read the identities)
        mp.setattr(python, "_LAST_DROPPED", (lambda: None, {}))
        mp.setattr(python, "_LAST_STEPS", (lambda: None, {}))
        return dataclasses.replace(compiled, generated=type(compiled)._generate_source(
            compiled.compilation.final))


def _sweeps(compiled, sweeps: int = 15, **options):
    seen = []

    def hook(iteration, posteriors):
        seen.append({n: _arrays(p) for n, p in posteriors.items()})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = compiled.run(iterations=sweeps, tolerance=None, progress=False,
                              on_iteration=hook, **options)
    seen.append({n: _arrays(result[n]) for n in result.posteriors})
    return seen, result


def _worst(a, b) -> float:
    """The largest difference of any posterior parameter, relative to its array's scale."""
    worst = 0.0
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for name in x:
            for p, q in zip(x[name], y[name], strict=True):
                assert p.shape == q.shape
                if p.size and not np.array_equal(p, q, equal_nan=True):
                    worst = max(worst, float(np.max(np.abs(p - q)) / np.max(np.abs(p))))
    return worst


def test_trueskill_updates_each_one_use_posterior_once_a_sweep():
    winner, loser = trueskill_games(5, 12)
    source = trueskill_model(5, winner, loser).compile("ep").source
    loop = source.split("# ---- iterations")[1].split("if on_iteration")[0]
    lines = [line.strip() for line in loop.splitlines() if not line.strip().startswith("#")]
    for v in ("pw", "pl"):
        assert sum(line.startswith(f"v_{v}__marginal = ") for line in lines) == 1
        assert lines.count(f"v_{v}__use0__F = fit_plates(v_{v}__F, (v_game,))") == 1
        assert f"v_{v}__B = fit_plates(v_{v}__use0__B, (v_game,))" in lines
    # skill has two uses: its messages to them stay quotients
    assert "v_skill__use0__F = v_skill__marginal.take(v_skill__index) / v_skill__use0__B" \
        in lines


@pytest.mark.parametrize("games,exact", [(300, False), (5000, True)])
def test_trueskill_posteriors_agree_with_the_quotients(games, exact):
    winner, loser = trueskill_games(40, games)
    compiled = trueskill_model(40, winner, loser).compile("ep")
    got, result = _sweeps(compiled)
    want, whole = _sweeps(_without_identities(compiled))
    worst = _worst(got, want)
    assert worst == 0.0 if exact else worst < 1e-12
    assert abs(result.log_evidence - whole.log_evidence) <= 1e-12 * abs(whole.log_evidence)


def _ep_runs():
    """Every example model the examples run under EP (NumPy backend), with its options."""
    from factorflow.runtime.compiled import CompiledModel
    from tests.codegen.test_liveness import _vmp_runs  # (records VMP runs alone)
    runs = []
    original = CompiledModel.run

    def record(self, *args, **kwargs):
        if self.algorithm == "ep" and self.backend == "numpy":
            runs.append((self, {k: kwargs.get(k) for k in ("init", "data")}))
        return original(self, *args, **kwargs)
    for path in EXAMPLES:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(CompiledModel, "run", record)
            _vmp_runs(path)
    return runs


def test_every_example_under_ep_agrees_with_the_quotients():
    runs = _ep_runs()
    assert len(runs) >= 8
    changed = 0
    for compiled, options in runs:
        plain = _without_identities(compiled)
        changed += plain.source != compiled.source
        got, result = _sweeps(compiled, **options)
        want, whole = _sweeps(plain, **options)
        assert _worst(got, want) < 1e-12
        assert abs(result.log_evidence - whole.log_evidence) <= 1e-11 * max(
            1.0, abs(whole.log_evidence))
    assert changed >= 5


def test_a_use_whose_operator_extrapolates_keeps_its_quotients():
    """The softmax plate's operator reads its last message and keeps a state (its RRE
    extrapolation over sweeps): the messages around it stay quotients, the numbers its
    convergence test saw (135 sweeps; 157 with the identities)."""
    from tests.factors.test_softmax_plate import _EXAMPLE
    source = _EXAMPLE["models"](*_EXAMPLE["data"]())[1].compile("ep").source
    assert "v_W_array__use0__F = v_W_array__marginal / v_W_array__use0__B" in source
    assert "v_W_array__B = v_W_array__marginal / v_W_array__F" in source
