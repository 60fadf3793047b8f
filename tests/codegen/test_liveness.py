"""The VMP refresh in ``evidence()`` keeps only what the bound and the next sweep read
(``factorflow.codegen.liveness``, issue 14).

Meaning: on every example model run under VMP, and on the 1-D mixture, the posteriors
after every sweep and the bound after every sweep are bit-identical to the program that
runs the whole refresh and skips nothing in a sweep after it (``python._live`` and
``python._settled`` patched), and a run with ``trace=False`` (which never skips) gives
the same posteriors as one with the bound.  Rules: the
analysis on small hand-made programs (a statement dropped only where the next sweep
overwrites its output first or would read the value it already holds; a sweep after
``evidence()`` skips what holds its value).  Text: the generated ``evidence()`` of the
1-D mixture (golden, comments left out) and the statements its sweep skips.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import runpy
import warnings
from pathlib import Path

import numpy as np
import pytest

import factorflow as ff
from factorflow.codegen import python
from factorflow.codegen.liveness import live_refresh, settled, steps

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.py")
                  if not p.stem.startswith("horseshoe"))  # (Gibbs only)


# ----- the rules -----------------------------------------------------------------------
NAMES = frozenset("abcdpqm") | {"iteration"}


def _stmts(*lines: str) -> list[list]:
    return [steps([line], NAMES) for line in lines]


def test_what_the_bound_reads_is_kept_and_what_the_sweep_overwrites_is_dropped():
    sweep = _stmts("a = f(p)", "m = g(a)", "p = h(m)")
    refresh = _stmts("a = f(p)", "m = g(a)")
    # the bound reads a; m is read by nothing before the sweep writes it again
    assert live_refresh(sweep, refresh, _stmts("e(a)"), frozenset()) == [0]
    # the bound reads m, through a
    assert live_refresh(sweep, refresh, _stmts("e(m)"), frozenset()) == [0, 1]
    # the posteriors returned are kept whatever the state
    assert live_refresh(sweep, refresh, _stmts("e(a)"), frozenset({"m"})) == [0, 1]


def test_a_message_the_next_sweep_reads_is_kept_unless_it_holds_the_same_value():
    # the next sweep reads m before writing it; the refresh recomputes m from p, which
    # moved after the sweep computed m: dropping it would change the next sweep
    sweep = _stmts("b = k(m)", "m = g(p)", "p = h(b)")
    assert live_refresh(sweep, _stmts("m = g(p)"), _stmts("e(p)"), frozenset()) == [0]
    # computed after p moved, the sweep's m is the refresh's: dropped
    sweep = _stmts("b = k(m)", "p = h(b)", "m = g(p)")
    assert live_refresh(sweep, _stmts("m = g(p)"), _stmts("e(p)"), frozenset()) == []


def test_the_next_evidence_reads_what_the_refresh_leaves():
    # evidence() reads q before its refresh writes it (a second call reads the first's)
    sweep = _stmts("p = h(p)")
    refresh = _stmts("c = e(q)", "q = g(p)")
    assert live_refresh(sweep, refresh, _stmts("e(c)"), frozenset()) == [0, 1]


def test_an_inner_loop_is_opaque():
    inner = steps(["for i in range(2):", "    m = g(p)", "    p = h(m)"], NAMES, opaque=True)
    sweep = [inner, *_stmts("a = f(p)")]
    # m: written in the inner loop, so read before (kept); a: the sweep's own
    assert live_refresh(sweep, _stmts("m = g(p)", "a = f(p)"), _stmts("e(p)"),
                        frozenset()) == [0]


def test_a_sweep_after_evidence_skips_what_evidence_computed_from_the_same_values():
    # the sweep computes m from p before p moves; evidence() recomputes m from the new p;
    # the next sweep's m = g(p) is then the value m holds (skipped), its p = h(b) is not
    sweep = _stmts("m = g(p)", "b = k(m)", "p = h(b)")
    refresh = _stmts("m = g(p)")
    assert settled(sweep, refresh, _stmts("e(m)")) == [True, False, False]
    # nothing recomputed by evidence(): every statement of the sweep runs
    assert settled(sweep, [], _stmts("e(p)")) == [False, False, False]
    # the sweep's number is new in every sweep
    assert settled(_stmts("m = g(p, iteration)", "p = h(m)"), _stmts("m = g(p, iteration)"),
                   _stmts("e(m)")) == [False, False]


# ----- the text ------------------------------------------------------------------------
GOLDEN = """\
def evidence():
    nonlocal v_means__B, v_means__k_cond_z_n__F, v_means__k_cond_z_n__marginal, \
v_means__k_cond_z_n__use0__F, v_precs__B, v_weights__B, v_weights__use0__F, v_z__B, \
v_z__n_cases__B, v_z__n_cases__use4__B, v_z__use0__F, refreshed, known_bound
    refreshed = True
    log_evidence = 0.0
    v_weights__use0__F = v_weights__marginal
    v_means__k_cond_z_n__F = Gate_EnterOne_enter_one_average_logarithm(\
cases=v_z__n_cases__use0__F, value=v_means__use0__F, index=arange_v_k)
    v_means__k_cond_z_n__marginal = fit_plates(v_means__k_cond_z_n__F, (v_n, v_k,))
    v_means__k_cond_z_n__use0__F = v_means__k_cond_z_n__marginal
    v_z__n_cases__use4__B = gate_message(Gaussian_average_log_factor(\
sample=laid_x, mean=v_means__k_cond_z_n__use0__F, \
precision=v_precs__k_cond_z_n__use0__F))
    v_z__n_cases__B = fit_plates(v_z__n_cases__use4__B, (v_n, v_k,))
    v_z__use0__F = v_z__marginal
    v_z__B = v_z__marginal
    v_weights__B = v_weights__marginal
    v_means__B = v_means__marginal
    v_precs__B = v_precs__marginal
    log_evidence += total(Dirichlet_average_log_factor(sample=v_weights__B, \
alpha=v_weights__alpha))
    log_evidence += total(vmp_variable_evidence(v_weights__marginal))
    log_evidence += total(Gaussian_average_log_factor(sample=v_means__B, mean=0.0, \
precision=0.01), (v_k,))
    log_evidence += total(vmp_variable_evidence(v_means__marginal), (v_k,))
    log_evidence += total(Gamma_average_log_factor(sample=v_precs__B, shape=1.0, \
rate=1.0), (v_k,))
    log_evidence += total(vmp_variable_evidence(v_precs__marginal), (v_k,))
    log_evidence += total(Discrete_average_log_factor(sample=v_z__B, \
probs=v_weights__use0__F), (v_n,))
    log_evidence += total(vmp_variable_evidence(v_z__marginal), (v_n,))
    log_evidence += total(Gate_Cases_average_log_factor(cases=v_z__n_cases__B, \
selector=v_z__use0__F), (v_n,))
    known_bound = (iteration, log_evidence)
    return log_evidence
"""


def _mixture(k: int = 3, n: int = 40, seed: int = 0) -> tuple[ff.Model, dict]:
    """The 1-D mixture of ``benchmarks/mixture_reference.py`` and its ``init=``."""
    from benchmarks import mixture_reference as mix
    x = mix.data(k, n, seed)
    return mix.model(x, k), mix.factorflow_init(x, k)


def _evidence_function(source: str) -> str:
    """``evidence()`` of a generated source, without comments, one indent less."""
    lines = source.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "def evidence():")
    body = []
    for line in lines[start:]:
        if body and not line.startswith("        "):
            break
        if not line.strip().startswith("#"):
            body.append(line[4:])
    return "\n".join(body) + "\n"


def test_the_mixture_evidence_function_is_the_golden_text():
    model, _ = _mixture()
    # (the gate path: the fused Switch's is in tests/transforms/test_fuse_switch.py)
    assert _evidence_function(model.compile("vmp", init=["means"], fuse_switch=False).source
                              ) == GOLDEN


def test_the_mixture_sweep_skips_the_gate_messages_evidence_computed():
    """After evidence(), the next sweep skips the data's evidence for the cases and the
    gate's messages, which the bound computed from the same posteriors."""
    model, _ = _mixture()
    lines = model.compile("vmp", init=["means"], fuse_switch=False).source.splitlines()
    start = lines.index("        if not refreshed:  # (else evidence() computed these from "
                        "the same values)")
    guarded = []
    for line in lines[start + 1:]:
        if not line.startswith(" " * 12):
            break
        if not line.strip().startswith("#"):
            guarded.append(line.split(" = ")[0].strip())
    # (the gate's uniform messages to the cases are left out: ``test_lean.py``)
    assert guarded == [
        "v_means__k_cond_z_n__F", "v_means__k_cond_z_n__marginal",
        "v_means__k_cond_z_n__use0__F", "v_z__n_cases__use4__B"]
    assert sum("if not refreshed" in line for line in lines) == 1


# ----- the meaning ---------------------------------------------------------------------
def _whole_refresh(compiled):
    """``compiled`` with the program as it was before the analysis: every statement of
    the refresh, and the sweep skipping none after it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(python, "_live", lambda program, loop, refresh, after, lean=False: refresh)
        mp.setattr(python, "_settled", lambda program, loop, refresh, after, lean=False:
                   [False] * len(loop.body))
        return dataclasses.replace(compiled, generated=type(compiled)._generate_source(
            compiled.compilation.final))


def _arrays(post) -> list[np.ndarray]:
    values = (post.value,) if hasattr(post, "value") else post.eta
    return [np.array(np.asarray(v, dtype=float)) for v in values]


def _run(compiled, options: dict, sweeps: int, trace: bool):
    """Posteriors after every sweep (arrays by name), the bound after every sweep, and
    the result."""
    seen: list[dict[str, list[np.ndarray]]] = []

    def hook(iteration, posteriors):
        seen.append({name: _arrays(p) for name, p in posteriors.items()})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = compiled.run(iterations=sweeps, init=options.get("init"),
                              data=options.get("data"), tolerance=None, progress=False,
                              trace=trace, on_iteration=hook)
    return seen, result


def _identical(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(
        x.shape == y.shape and np.array_equal(x, y, equal_nan=True) for x, y in zip(a, b, strict=True))


def _check(compiled, options: dict, sweeps: int) -> None:
    """Pruned against whole refresh (bit for bit, every sweep), and trace on against off."""
    seen, result = _run(compiled, options, sweeps, True)
    whole_seen, whole = _run(_whole_refresh(compiled), options, sweeps, True)
    assert result.trace == whole.trace and result.log_evidence == whole.log_evidence
    assert all(_identical(s[n], w[n]) for s, w in zip(seen, whole_seen, strict=True)
               for n in s)
    off_seen, off = _run(compiled, options, sweeps, False)
    # (a derived variable's posterior is recomputed by evidence() alone: the hook sees
    # it one sweep late with the bound, uniform without; the results agree)
    derived = {n for n in result.posteriors if compiled.model.variable(n).derived}
    assert all(_identical(s[n], o[n]) for s, o in zip(seen, off_seen, strict=True)
               for n in s if n not in derived)
    assert all(_identical(_arrays(result[n]), _arrays(off[n])) for n in result.posteriors)
    assert result.log_evidence == off.log_evidence


def _vmp_runs(path: Path) -> list[tuple[object, dict]]:
    """Every model the example ``path`` runs under VMP (NumPy backend), with its ``init=``
    and ``data=``: its ``main()`` with every run cut to 2 sweeps (its checks of the
    numbers may then fail: the runs before are kept) and its importance sampling
    stubbed; LDA small, plain and with variational EM's inner loop."""
    from factorflow.runtime.compiled import CompiledModel
    runs: list[tuple[object, dict]] = []
    original = CompiledModel.run

    def record(self, *args, **kwargs):
        if self.algorithm == "vmp" and self.backend == "numpy":
            runs.append((self, {k: kwargs.get(k) for k in ("init", "data")}))
        kwargs.update(iterations=2, tolerance=None)
        return original(self, *args, **kwargs)

    main = runpy.run_path(str(path))["main"]
    if "importance_sampling" in main.__globals__:
        main.__globals__["importance_sampling"] = lambda x, y, mean, *a, **k: (mean, 0.0, 1.0)
    calls = [{"n_docs": 10}, {"n_docs": 10, "em_passes": 2}] if path.stem == "lda" else [{}]
    with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mp.setattr(CompiledModel, "run", record)
        for kwargs in calls:
            with contextlib.suppress(Exception), contextlib.redirect_stdout(io.StringIO()):
                main(**kwargs)
    return runs


#: the examples that run a model under VMP
VMP_EXAMPLES = ("bayesian_pca", "gaussian_mixture", "hmm", "lda", "learning_gaussian",
                "linear_regression", "logistic_regression", "multinomial_regression",
                "poisson_regression", "state_space", "state_space_2d")


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_gives_the_same_bits_as_the_whole_refresh(path):
    runs = _vmp_runs(path)
    assert bool(runs) == (path.stem in VMP_EXAMPLES)
    for compiled, options in runs:
        _check(compiled, options, 6)


@pytest.mark.parametrize("k, n", [(2, 10), (3, 40), (10, 200)])
def test_the_mixture_gives_the_same_bits_as_the_whole_refresh(k, n):
    model, init = _mixture(k, n)
    compiled = model.compile("vmp", init=["means"])
    assert len(compiled.source) < len(_whole_refresh(compiled).source)
    _check(compiled, {"init": init}, 30)
