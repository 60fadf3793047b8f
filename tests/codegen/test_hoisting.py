"""Loop invariants made once per run (``_Emitter.hoist``): the generated NumPy program
defines them as locals before the statements, no sweep makes them again, and a run
computes what the program without them computes, bit for bit (the oracle: the same
program generated with hoisting off)."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from factorflow.codegen import python


def _mixture(k: int, n: int, seed: int):
    from benchmarks import mixture_reference as mix
    x = mix.data(k, n, seed)
    return mix.model(x, k).compile("vmp", init=["means"], fuse_switch=False), mix.factorflow_init(x, k)


def _unhoisted(compiled):
    """``compiled`` with its program generated as before: every expression in place."""
    init = python._Emitter.__init__

    def plain(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.uniform = set()  # (no message is left out of a product)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(python._Emitter, "hoist", lambda self, expr, name: expr)
        mp.setattr(python._Emitter, "__init__", plain)
        generated = type(compiled)._generate_source(compiled.compilation.final)
    assert "arange_v_k" not in generated.source
    assert "* v_z__n_cases__use5__B" in generated.source
    return dataclasses.replace(compiled, generated=generated)


def _run(compiled, init, trace: bool):
    seen = []

    def hook(iteration, posteriors):
        seen.append({n: [np.array(e) for e in p.eta] for n, p in posteriors.items()})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = compiled.run(iterations=12, init=init, tolerance=None, progress=False,
                              trace=trace, on_iteration=hook)
    return seen, result.trace, result.log_evidence


def test_the_invariants_are_made_once_before_the_statements():
    compiled, _ = _mixture(3, 40, 0)
    lines = compiled.source.splitlines()
    loop = next(i for i, line in enumerate(lines) if line.strip().startswith("for iteration"))
    made = {line.split(" = ")[0].strip(): i for i, line in enumerate(lines)
            if line.startswith("    ") and not line.startswith("     ")
            and line.split(" = ")[0].strip() in ("arange_v_k", "laid_x", "uniform_Gamma",
                                                  "uniform_Bernoulli", "uniform_Gaussian")}
    assert len(made) == 2 and all(i < loop for i in made.values())
    assert not any("np.arange(" in line or "align_plates(v_x" in line or ".uniform(" in line
                   for line in lines[loop:])
    # the cases' messages that stay uniform all run long are left out of their product,
    # and the derived variables' products of the uniform factor with one message are
    # that message (no uniform factor made at all)
    assert not any("use5__B" in line for line in lines[loop:])
    assert not any(f"uniform_{fam}" in line for line in lines
                   for fam in ("Gamma", "Bernoulli", "Gaussian"))
    sweep = [line.strip() for line in lines[loop:]]
    assert "v_z__n_cases__B = fit_plates(v_z__n_cases__use4__B, (v_n, v_k,))" in sweep
    assert "v_means__k_cond_z_n__B = v_means__k_cond_z_n__use0__B" in sweep


@settings(max_examples=8, deadline=None)
@given(st.integers(2, 4), st.integers(5, 40), st.integers(0, 3), st.booleans())
def test_a_run_is_the_run_without_hoisting_bit_for_bit(k, n, seed, trace):
    compiled, init = _mixture(k, n, seed)
    got = _run(compiled, init, trace)
    want = _run(_unhoisted(compiled), init, trace)
    assert got[1] == want[1] and got[2] == want[2]
    assert len(got[0]) == len(want[0])
    for a, b in zip(got[0], want[0], strict=True):
        assert a.keys() == b.keys()
        assert all(np.array_equal(x, y) for name in a for x, y in zip(a[name], b[name],
                                                                        strict=True))
