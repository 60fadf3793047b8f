"""The fused Switch pass (``transforms.fuse_switch``): a VMP ``Switch(z)`` over a plate
whose one case statement is an observed Gaussian with ``means[z]`` and ``precs[z]``
becomes one ``SwitchGaussian`` statement; anything else keeps the gate path unchanged.
Golden text of the fused program and of its generated sweep; each fused program's
numbers equal the gate path's (the same run with ``fuse_switch=False``)."""

from __future__ import annotations

import numpy as np
import pytest

import factorflow as ff
from factorflow.transforms.fuse_switch import FUSED_OP, FuseSwitchOptions, fuse_switches
from factorflow.transforms.lower import lower
from tests.conftest import assert_close

X = np.array([-0.3, 0.1, 4.2, 3.9, 8.1])


def _mixture(observed_z=False, latent_x=False, shared_precision=False, extra=None,
             nested=False, second_switch=False, k=3) -> ff.Model:
    """The 1-D mixture, or one change to it that takes it out of the pattern."""
    with ff.Model("mix") as model:
        weights = ff.Dirichlet("weights", np.ones(k))
        with ff.Plate(ff.Range("k", k)):
            means = ff.Gaussian("means", 0.0, variance=100.0)
            precs = ff.Gamma("precs", 1.0, rate=1.0)
        with ff.Plate(ff.Range("n", X.size)):
            z = ff.Discrete("z", weights, observed=np.arange(X.size) % k if observed_z
                            else None)
            flag = ff.Bernoulli("flag", 0.5) if nested else None
            with (ff.If(flag) if nested else _nothing()), ff.Switch(z):
                x = ff.Gaussian("x", means[z], precision=1.0 if shared_precision
                                else precs[z], observed=None if latent_x else X)
                if extra == "factor":
                    ff.Gaussian("y", means[z], precision=precs[z], observed=X + 1.0)
            if latent_x:
                ff.Gaussian("y", x, precision=1.0, observed=X)
            if second_switch:
                with ff.Switch(z):
                    ff.Gaussian("y", means[z], precision=precs[z], observed=X - 1.0)
    return model


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _fusion_stage(model: ff.Model, algorithm: str = "vmp", init=frozenset(),
                  options: FuseSwitchOptions | None = None):
    program, bindings = lower(model)
    names = frozenset(bindings.names[n] for n in init)
    return program, fuse_switches(program, algorithm, names, options or FuseSwitchOptions())


GOLDEN_FUSED = """\
program mix
ranges v_k=3, v_n=5
random simplex<3> v_weights  # weights
random real v_means[v_k]  # means
random positive v_precs[v_k]  # precs
random int<3> v_z[v_n]  # z
observed real v_x[v_n]  # x
constant ? v_weights__alpha  # alpha of weights
v_weights = Dirichlet(alpha=v_weights__alpha)
for v_k:
    v_means[v_k] = Gaussian(mean=0.0, precision=0.01)
    v_precs[v_k] = Gamma(shape=1.0, rate=1.0)
for v_n:
    v_z[v_n] = Discrete(probs=v_weights)
    for v_k:
        v_x[v_n] = SwitchGaussian(selector=v_z[v_n], precision=v_precs[v_k], mean=v_means[v_k], index: v_k)
"""


def test_the_mixture_is_fused_into_one_statement_golden():
    before, after = _fusion_stage(_mixture())
    assert str(after) == GOLDEN_FUSED
    assert sum(s.op == FUSED_OP for s in _stmts(after)) == 1


def _stmts(program):
    from factorflow.ir.nodes import walk
    return [s for s, _ in walk(program.body)]


@pytest.mark.parametrize("change", [
    "ep", "observed_z", "latent_x", "shared_precision", "extra_factor", "nested",
    "second_switch", "z_initialised", "disabled", "gibbs"])
def test_outside_the_pattern_the_program_is_unchanged(change):
    """EP, Gibbs, an observed z, a child read by another statement (latent), a known
    precision, a second factor in the case, a nested gate, z read by a second switch,
    z initialised by the user, or the option off: the gate path as it is."""
    kwargs = {"observed_z": {"observed_z": True}, "latent_x": {"latent_x": True},
              "shared_precision": {"shared_precision": True},
              "extra_factor": {"extra": "factor"}, "nested": {"nested": True},
              "second_switch": {"second_switch": True}}.get(change, {})
    algorithm = {"ep": "ep", "gibbs": "gibbs"}.get(change, "vmp")
    init = frozenset({"z"}) if change == "z_initialised" else frozenset()
    options = FuseSwitchOptions(enabled=change != "disabled")
    before, after = _fusion_stage(_mixture(**kwargs), algorithm, init, options)
    assert after is before
    assert not any(s.op == FUSED_OP for s in _stmts(after))


#: the generated sweep of the fused mixture: the responsibilities' logits in one
#: statement, the parameters' messages as contractions, no gate clones or cases
GOLDEN_SWEEP = """\
for iteration in range(first_sweep(resume, 1, iterations), iterations):
    # test_fuse_switch.py:29: z = ff.Discrete("z", weights, observed=np.arange(X.size) % k if observed_z
    v_weights__use0__B = Discrete_probs_average_logarithm(sample=v_z__B, probs=v_weights__use0__F, reduce=((v_n,), (0,)))
    # test_fuse_switch.py:24: weights = ff.Dirichlet("weights", np.ones(k))
    v_weights__marginal = v_weights__F * v_weights__use0__B
    check_proper(v_weights__marginal, 'posterior of weights (test_fuse_switch.py:24: weights = ff.Dirichlet("weights", np.ones(k)))', iteration)
    v_weights__use0__F = v_weights__marginal
    # test_fuse_switch.py:33: x = ff.Gaussian("x", means[z], precision=1.0 if shared_precision
    # VMP, a fused Switch: E log N(x_n; μ_k, 1/τ_k) as one (N, 3) × (3, K) product, the responsibilities' logits
    v_z__use0__B = SwitchGaussian_selector_average_logarithm(sample=laid_x, mean=v_means__use0__F, precision=v_precs__use0__F, index=arange_v_k, reduce=((v_n, v_k,), (1,)))
    # test_fuse_switch.py:29: z = ff.Discrete("z", weights, observed=np.arange(X.size) % k if observed_z
    v_z__F = Discrete_sample_average_logarithm(probs=v_weights__use0__F)
    v_z__marginal = fit_plates(v_z__F * v_z__use0__B, (v_n,))
    check_proper(v_z__marginal, 'posterior of z (test_fuse_switch.py:29: z = ff.Discrete("z", weights, observed=np.arange(X.size) % k if observed_z)', iteration)
    v_z__use0__F = align_plates(v_z__marginal, (0,), 2)
    # test_fuse_switch.py:33: x = ff.Gaussian("x", means[z], precision=1.0 if shared_precision
    # VMP, a fused Switch: τ_k Σ_n r_nk [x_n, 1] from the data sums Σ_n r_nk [1, x_n, x_n²], one BLAS product a sweep
    v_means__use0__B = SwitchGaussian_mean_average_logarithm(sample=laid_x, selector=v_z__use0__F, precision=v_precs__use0__F, index=arange_v_k, reduce=((v_n, v_k,), (0,)))
    # test_fuse_switch.py:29: z = ff.Discrete("z", weights, observed=np.arange(X.size) % k if observed_z
    v_z__B = v_z__marginal
    # test_fuse_switch.py:26: means = ff.Gaussian("means", 0.0, variance=100.0)
    v_means__marginal = fit_plates(v_means__F * v_means__use0__B, (v_k,))
    check_proper(v_means__marginal, 'posterior of means (test_fuse_switch.py:26: means = ff.Gaussian("means", 0.0, variance=100.0))', iteration)
    v_means__use0__F = v_means__marginal
    # test_fuse_switch.py:33: x = ff.Gaussian("x", means[z], precision=1.0 if shared_precision
    # VMP, a fused Switch: Σ_n r_nk E[(x_n − μ_k)²] from the same data sums
    v_precs__use0__B = SwitchGaussian_precision_average_logarithm(sample=laid_x, selector=v_z__use0__F, mean=v_means__use0__F, index=arange_v_k, reduce=((v_n, v_k,), (0,)))
    # test_fuse_switch.py:27: precs = ff.Gamma("precs", 1.0, rate=1.0)
    v_precs__marginal = fit_plates(v_precs__F * v_precs__use0__B, (v_k,))
    check_proper(v_precs__marginal, 'posterior of precs (test_fuse_switch.py:27: precs = ff.Gamma("precs", 1.0, rate=1.0))', iteration)
    v_precs__use0__F = v_precs__marginal
"""


def _sweep(source: str) -> str:
    """The generated sweep: from ``for iteration`` to the hook, one indent less."""
    lines = source.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("for iteration"))
    end = next(i for i, line in enumerate(lines)
               if i > start and line.strip().startswith("if on_iteration"))
    return "\n".join(line[4:] for line in lines[start:end]) + "\n"


def test_the_fused_sweep_is_the_golden_text():
    source = _mixture().compile("vmp", fuse_switch=True).source
    assert _sweep(source) == GOLDEN_SWEEP
    for gone in ("Gate_", "cases", "cond_z"):
        assert gone not in source


@pytest.mark.parametrize("sweeps", [0, 1, 3, 8])
@pytest.mark.parametrize("trace", [True, False])
def test_the_fused_program_gives_the_gate_paths_numbers(sweeps, trace):
    """Meaning: the same posteriors and bound as the gate path (1e-10)."""
    model = _mixture()
    init = {"means": ff.distributions.Gaussian(np.array([0.0, 4.0, 8.0]), np.ones(3))}
    runs = [model.compile("vmp", init=["means"], fuse_switch=fused).run(
        iterations=sweeps, init=init, tolerance=None, progress=False, trace=trace)
        for fused in (True, False)]
    for name in ("weights", "means", "precs", "z"):
        for a, b in zip(runs[0][name].eta, runs[1][name].eta, strict=True):
            assert_close(a, b, rtol=1e-10, atol=1e-10)
    assert_close(runs[0].log_evidence, runs[1].log_evidence, rtol=1e-10, atol=1e-10)
    if trace:
        assert_close(runs[0].trace, runs[1].trace, rtol=1e-10, atol=1e-10)
