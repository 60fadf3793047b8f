"""The fused Switch pass on the D-dimensional mixture (``transforms.fuse_switch`` →
``SwitchVectorGaussian``): a VMP ``Switch(z)`` over a plate whose one case statement is
an observed ``VectorGaussian`` with ``means[z]`` (VectorGaussian, (K, D)) and ``precs[z]``
(Wishart, (K, D, D)) becomes one statement; anything else keeps the gate path unchanged.
Golden text of the fused program and of its generated sweep; each fused program's
numbers equal the gate path's (the same run with ``fuse_switch=False``)."""

from __future__ import annotations

import numpy as np
import pytest

import factorflow as ff
from factorflow.ir.nodes import walk
from factorflow.transforms.fuse_switch import FuseSwitchOptions, fuse_switches
from factorflow.transforms.lower import lower
from tests.conftest import assert_close

FUSED = "SwitchVectorGaussian"
X = np.array([[-0.3, 0.2], [0.1, -0.4], [4.2, 3.8], [3.9, 4.4], [-4.1, 3.7], [-3.6, 4.1]])
START = np.array([[0.0, 0.0], [4.0, 4.0], [-4.0, 4.0]])


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _mixture(observed_z=False, latent_x=False, known_precision=False, extra=None,
             nested=False, second_switch=False, shared_mean=False, shared_precision=False,
             k=3) -> ff.Model:
    """The D = 2 mixture, or one change to it that takes it out of the pattern."""
    n, dim = X.shape
    with ff.Model("vmix") as model:
        weights = ff.Dirichlet("weights", np.ones(k))
        shared = ff.VectorGaussian("shared", np.zeros(dim), precision=np.eye(dim)) \
            if shared_mean else None
        one_prec = ff.Wishart("one_prec", dim + 1.0, rate=np.eye(dim)) \
            if shared_precision else None
        with ff.Plate(ff.Range("k", k)):
            means = ff.VectorGaussian("means", np.zeros(dim), precision=0.01 * np.eye(dim))
            precs = ff.Wishart("precs", dim + 1.0, rate=np.eye(dim))
        with ff.Plate(ff.Range("n", n)):
            z = ff.Discrete("z", weights, observed=np.arange(n) % k if observed_z else None)
            flag = ff.Bernoulli("flag", 0.5) if nested else None
            with (ff.If(flag) if nested else _nothing()), ff.Switch(z):
                precision = (np.eye(dim) if known_precision else one_prec
                             if shared_precision else precs[z])
                x = ff.VectorGaussian("x", shared if shared_mean else means[z],
                                      precision=precision,
                                      observed=None if latent_x else X)
                if extra == "factor":
                    ff.VectorGaussian("y", means[z], precision=precs[z], observed=X + 1.0)
            if latent_x:
                ff.VectorGaussian("y", x, precision=np.eye(dim), observed=X)
            if second_switch:
                with ff.Switch(z):
                    ff.VectorGaussian("y", means[z], precision=precs[z], observed=X - 1.0)
    return model


def _fusion_stage(model: ff.Model, algorithm: str = "vmp", init=frozenset(),
                  options: FuseSwitchOptions | None = None):
    program, bindings = lower(model)
    names = frozenset(bindings.names[n] for n in init)
    return program, fuse_switches(program, algorithm, names, options or FuseSwitchOptions())


def _stmts(program):
    return [s for s, _ in walk(program.body)]


GOLDEN_FUSED = """\
program vmix
ranges v_k=3, v_n=6
random simplex<3> v_weights  # weights
random vector<2> v_means[v_k]  # means
random posdef<2> v_precs[v_k]  # precs
random int<3> v_z[v_n]  # z
observed vector<2> v_x[v_n]  # x
constant ? v_weights__alpha  # alpha of weights
constant ? v_means__mean  # mean of means
constant ? v_means__precision  # precision of means
constant ? v_precs__rate  # rate of precs
v_weights = Dirichlet(alpha=v_weights__alpha)
for v_k:
    v_means[v_k] = VectorGaussian(mean=v_means__mean, precision=v_means__precision)
    v_precs[v_k] = Wishart(dof=3.0, rate=v_precs__rate)
for v_n:
    v_z[v_n] = Discrete(probs=v_weights)
    for v_k:
        v_x[v_n] = SwitchVectorGaussian(selector=v_z[v_n], precision=v_precs[v_k], mean=v_means[v_k], index: v_k)
"""


def test_the_vector_mixture_is_fused_into_one_statement_golden():
    before, after = _fusion_stage(_mixture())
    assert str(after) == GOLDEN_FUSED
    assert [s.op for s in _stmts(after)].count(FUSED) == 1


@pytest.mark.parametrize("change", [
    "ep", "gibbs", "observed_z", "latent_x", "known_precision", "shared_precision",
    "shared_mean", "extra_factor", "nested", "second_switch", "z_initialised", "disabled"])
def test_outside_the_pattern_the_program_is_unchanged(change):
    """EP, Gibbs, an observed z, a child read by another statement (latent), a known
    precision, a random precision or a mean not indexed by z, a second factor in the case, a nested gate, z read by a second switch,
    z initialised by the user, or the option off: the gate path as it is."""
    kwargs = {"observed_z": {"observed_z": True}, "latent_x": {"latent_x": True},
              "known_precision": {"known_precision": True}, "shared_precision": {"shared_precision": True},
              "shared_mean": {"shared_mean": True}, "extra_factor": {"extra": "factor"},
              "nested": {"nested": True}, "second_switch": {"second_switch": True}
              }.get(change, {})
    algorithm = {"ep": "ep", "gibbs": "gibbs"}.get(change, "vmp")
    init = frozenset({"z"}) if change == "z_initialised" else frozenset()
    options = FuseSwitchOptions(enabled=change != "disabled")
    before, after = _fusion_stage(_mixture(**kwargs), algorithm, init, options)
    assert after is before
    assert not any(s.op.startswith("Switch") for s in _stmts(after))


@pytest.mark.parametrize("change", ["known_precision", "shared_mean", "second_switch",
                                    "extra_factor"])
def test_outside_the_pattern_the_compiled_program_keeps_the_gate(change):
    """The same models compiled with the fusion asked for: the gate's statements, no
    fused one (the pass leaves them; the gate transform converts them)."""
    kwargs = {"known_precision": {"known_precision": True},
              "shared_mean": {"shared_mean": True}, "second_switch": {"second_switch": True},
              "extra_factor": {"extra": "factor"}}[change]
    source = _mixture(**kwargs).compile("vmp", fuse_switch=True).source
    assert FUSED not in source
    assert "Gate_Cases_selector_average_logarithm" in source


#: the generated sweep of the fused D-dimensional mixture: the responsibilities' logits
#: in one statement, the components' messages as contractions, no gate clones or cases
GOLDEN_SWEEP = """\
for iteration in range(first_sweep(resume, 1, iterations), iterations):
    # test_fuse_vector_switch.py:47: z = ff.Discrete("z", weights, observed=np.arange(n) % k if observed_z else None)
    v_weights__use0__B = Discrete_probs_average_logarithm(sample=v_z__B, probs=v_weights__use0__F, reduce=((v_n,), (0,)))
    # test_fuse_vector_switch.py:38: weights = ff.Dirichlet("weights", np.ones(k))
    v_weights__marginal = v_weights__F * v_weights__use0__B
    check_proper(v_weights__marginal, 'posterior of weights (test_fuse_vector_switch.py:38: weights = ff.Dirichlet("weights", np.ones(k)))', iteration)
    v_weights__use0__F = v_weights__marginal
    # test_fuse_vector_switch.py:52: x = ff.VectorGaussian("x", shared if shared_mean else means[z],
    # VMP, a fused Switch: E log N(x_n; μ_k, Λ_k⁻¹) as one (N, 1+D+T) × (1+D+T, K) product of [1, x, x xᵀ] with E[log|Λ|], E[Λμ], E[Λ], E[μᵀΛμ]: the responsibilities' logits
    v_z__use0__B = SwitchVectorGaussian_selector_average_logarithm(sample=laid_x, mean=v_means__use0__F, precision=v_precs__use0__F, index=arange_v_k, reduce=((v_n, v_k,), (1,)))
    # test_fuse_vector_switch.py:47: z = ff.Discrete("z", weights, observed=np.arange(n) % k if observed_z else None)
    v_z__F = Discrete_sample_average_logarithm(probs=v_weights__use0__F)
    v_z__marginal = fit_plates(v_z__F * v_z__use0__B, (v_n,))
    check_proper(v_z__marginal, 'posterior of z (test_fuse_vector_switch.py:47: z = ff.Discrete("z", weights, observed=np.arange(n) % k if observed_z else None))', iteration)
    v_z__use0__F = align_plates(v_z__marginal, (0,), 2)
    # test_fuse_vector_switch.py:52: x = ff.VectorGaussian("x", shared if shared_mean else means[z],
    # VMP, a fused Switch: E[Λ_k] Σ_n r_nk [x_n, 1] from the data sums Σ_n r_nk [1, x_n, x_n x_nᵀ], one BLAS product a sweep
    v_means__use0__B = SwitchVectorGaussian_mean_average_logarithm(sample=laid_x, selector=v_z__use0__F, precision=v_precs__use0__F, index=arange_v_k, reduce=((v_n, v_k,), (0,)))
    # test_fuse_vector_switch.py:47: z = ff.Discrete("z", weights, observed=np.arange(n) % k if observed_z else None)
    v_z__B = v_z__marginal
    # test_fuse_vector_switch.py:44: means = ff.VectorGaussian("means", np.zeros(dim), precision=0.01 * np.eye(dim))
    v_means__marginal = fit_plates(v_means__F * v_means__use0__B, (v_k,))
    check_proper(v_means__marginal, 'posterior of means (test_fuse_vector_switch.py:44: means = ff.VectorGaussian("means", np.zeros(dim), precision=0.01 * np.eye(dim)))', iteration)
    v_means__use0__F = v_means__marginal
    # test_fuse_vector_switch.py:52: x = ff.VectorGaussian("x", shared if shared_mean else means[z],
    # VMP, a fused Switch: Σ_n r_nk E[(x_n − μ_k)(x_n − μ_k)ᵀ] from the same data sums
    v_precs__use0__B = SwitchVectorGaussian_precision_average_logarithm(sample=laid_x, selector=v_z__use0__F, mean=v_means__use0__F, index=arange_v_k, reduce=((v_n, v_k,), (0,)))
    # test_fuse_vector_switch.py:45: precs = ff.Wishart("precs", dim + 1.0, rate=np.eye(dim))
    v_precs__marginal = fit_plates(v_precs__F * v_precs__use0__B, (v_k,))
    check_proper(v_precs__marginal, 'posterior of precs (test_fuse_vector_switch.py:45: precs = ff.Wishart("precs", dim + 1.0, rate=np.eye(dim)))', iteration)
    v_precs__use0__F = v_precs__marginal
"""


def test_the_fused_sweep_is_the_golden_text():
    from tests.transforms.test_fuse_switch import _sweep  # (the 1-D golden test's cut)
    source = _mixture().compile("vmp", fuse_switch=True).source
    assert _sweep(source) == GOLDEN_SWEEP
    for gone in ("Gate_", "cases", "cond_z"):
        assert gone not in source


def _init(k: int = 3) -> dict[str, ff.distributions.VectorGaussian]:
    return {"means": ff.distributions.VectorGaussian(
        START[:k], np.broadcast_to(np.eye(2), (k, 2, 2)))}


@pytest.mark.parametrize("sweeps", [0, 1, 2, 5, 30])
@pytest.mark.parametrize("trace", [True, False])
def test_the_fused_program_gives_the_gate_paths_numbers(sweeps, trace):
    """Meaning: the same posteriors and bound as the gate path (1e-10) after 0–30
    sweeps, with and without the bound after each."""
    model = _mixture()
    runs = [model.compile("vmp", init=["means"], fuse_switch=fused).run(
        iterations=sweeps, init=_init(), tolerance=None, progress=False, trace=trace)
        for fused in (True, False)]
    assert (FUSED in model.compile("vmp", init=["means"], fuse_switch=True).source)
    for name in ("weights", "means", "precs", "z"):
        for a, b in zip(runs[0][name].eta, runs[1][name].eta, strict=True):
            assert_close(a, b, rtol=1e-10, atol=1e-10)
    assert_close(runs[0].log_evidence, runs[1].log_evidence, rtol=1e-10, atol=1e-10)
    if trace:
        assert_close(runs[0].trace, runs[1].trace, rtol=1e-10, atol=1e-10)


def _ordered(vector: bool, precs_first: bool) -> ff.Model:
    """The 1-D or D = 2 mixture with the components defined in either order."""
    n, dim = X.shape
    with ff.Model("ordered") as model:
        weights = ff.Dirichlet("weights", np.ones(3))
        with ff.Plate(ff.Range("k", 3)):
            made = {}
            for name in ("precs", "means") if precs_first else ("means", "precs"):
                made[name] = (
                    ff.VectorGaussian(name, np.zeros(dim), precision=0.01 * np.eye(dim))
                    if vector and name == "means" else
                    ff.Wishart(name, dim + 1.0, rate=np.eye(dim)) if vector else
                    ff.Gaussian(name, 0.0, variance=100.0) if name == "means" else
                    ff.Gamma(name, 1.0, rate=1.0))
        with ff.Plate(ff.Range("n", n)):
            z = ff.Discrete("z", weights)
            with ff.Switch(z):
                means, precs = made["means"], made["precs"]
                if vector:
                    ff.VectorGaussian("x", means[z], precision=precs[z], observed=X)
                else:
                    ff.Gaussian("x", means[z], precision=precs[z], observed=X[:, 0])
    return model


def _start(vector: bool) -> dict[str, object]:
    dist = ff.distributions
    if vector:
        return {"means": dist.VectorGaussian(START, np.broadcast_to(np.eye(2), (3, 2, 2))),
                "precs": dist.Wishart(np.array([4.0, 5.0, 6.0]),
                                      np.broadcast_to(2.0 * np.eye(2), (3, 2, 2)))}
    return {"means": dist.Gaussian(START[:, 0], np.ones(3)),
            "precs": dist.Gamma(np.array([2.0, 3.0, 4.0]), np.array([1.0, 2.0, 3.0]))}


@pytest.mark.parametrize("init", [(), ("means",), ("precs",), ("means", "precs")],
                         ids=["none", "means", "precs", "both"])
@pytest.mark.parametrize("precs_first", [False, True], ids=["means-defined-first",
                                                            "precs-defined-first"])
@pytest.mark.parametrize("vector", [False, True], ids=["scalar", "vector"])
def test_the_components_are_updated_in_the_gate_paths_order(vector, precs_first, init):
    """``fuse_switch._gate_order``: the gate path updates the second-defined component
    first exactly when the first-defined one is initialised by the user; the fused
    program's definitions are put in that order, and its posteriors and bound equal the
    gate path's (1e-10) for every initialisation and order of definition."""
    model = _ordered(vector, precs_first)
    program, fused = _fusion_stage(model, init=frozenset(init))
    defined = [s.outputs[0].var for s in _stmts(fused) if s.op in (
        "VectorGaussian", "Wishart", "Gaussian", "Gamma")]
    first = "v_precs" if precs_first else "v_means"
    second = "v_means" if precs_first else "v_precs"
    assert defined == ([second, first] if first[2:] in init else [first, second])
    start = {name: value for name, value in _start(vector).items() if name in init}
    _same_as_gate_path(model, init, start)


def _same_as_gate_path(model: ff.Model, init: tuple[str, ...], start: dict) -> None:
    """12 sweeps fused and on the gate path from ``start``: the same posteriors and
    bound trace (1e-10)."""
    runs = [model.compile("vmp", init=list(init), fuse_switch=f).run(
        iterations=12, init=start, tolerance=None, progress=False) for f in (True, False)]
    for name in ("weights", "means", "precs", "z"):
        for a, b in zip(runs[0][name].eta, runs[1][name].eta, strict=True):
            assert_close(a, b, rtol=1e-10, atol=1e-10)
    assert_close(runs[0].trace, runs[1].trace, rtol=1e-10, atol=1e-10)


def _split(components_first: bool = False) -> ff.Model:
    """The mixture with the means and the precisions defined in two blocks (another
    variable between them: ``_gate_order`` cannot move one definition before the other),
    after the weights, or (``components_first``) before them."""
    n, dim = X.shape
    with ff.Model("split") as model:
        k = ff.Range("k", 3)
        weights = None if components_first else ff.Dirichlet("weights", np.ones(3))
        with ff.Plate(k):
            means = ff.VectorGaussian("means", np.zeros(dim), precision=0.01 * np.eye(dim))
        ff.Gamma("other", 1.0, rate=1.0, observed=2.0)
        with ff.Plate(k):
            precs = ff.Wishart("precs", dim + 1.0, rate=np.eye(dim))
        if components_first:
            weights = ff.Dirichlet("weights", np.ones(3))
        with ff.Plate(ff.Range("n", n)):
            z = ff.Discrete("z", weights)
            with ff.Switch(z):
                ff.VectorGaussian("x", means[z], precision=precs[z], observed=X)
    return model


@pytest.mark.parametrize("init", [(), ("means",), ("precs",), ("means", "precs")],
                         ids=["none", "means", "precs", "both"])
@pytest.mark.parametrize("components_first", [False, True],
                         ids=["weights-first", "components-first"])
def test_a_layout_the_fused_sweep_cannot_follow_keeps_the_gate_path(components_first, init):
    """``fuse_switch._in_gate_order``: defined in two blocks, the components keep program
    order, so they are fused unless the first-defined (the means) is initialised by the
    user (the gate path would update it last); defined before the weights, never (the
    fused sweep would start at the components, the gate path's at the weights).  Either
    way the gate path's numbers (1e-10)."""
    model = _split(components_first)
    program, fused = _fusion_stage(model, init=frozenset(init))
    kept = components_first or "means" in init
    assert (fused is program) == kept
    assert (FUSED in model.compile("vmp", init=list(init), fuse_switch=True).source) != kept
    start = {name: value for name, value in _start(True).items() if name in init}
    _same_as_gate_path(model, init, start)


@pytest.mark.parametrize("init", [(), ("means",)], ids=["none", "means"])
def test_a_precision_reading_a_variable_defined_after_the_means_is_not_moved(init):
    """The precisions' rate a random Wishart defined between the means and the
    precisions in one block: the precisions cannot move before the means, so with the
    means initialised the block keeps the gate path; without, it is fused in program
    order.  Either way the gate path's numbers (1e-10)."""
    n, dim = X.shape
    with ff.Model("rated") as model:
        weights = ff.Dirichlet("weights", np.ones(3))
        with ff.Plate(ff.Range("k", 3)):
            means = ff.VectorGaussian("means", np.zeros(dim), precision=0.01 * np.eye(dim))
            rate = ff.Wishart("rate", dim + 2.0, rate=np.eye(dim))
            precs = ff.Wishart("precs", dim + 1.0, rate=rate)
        with ff.Plate(ff.Range("n", n)):
            z = ff.Discrete("z", weights)
            with ff.Switch(z):
                ff.VectorGaussian("x", means[z], precision=precs[z], observed=X)
    program, fused = _fusion_stage(model, init=frozenset(init))
    assert (fused is program) == bool(init)
    start = {name: value for name, value in _start(True).items() if name in init}
    runs = [model.compile("vmp", init=list(init), fuse_switch=f).run(
        iterations=12, init=start, tolerance=None, progress=False) for f in (True, False)]
    for name in ("weights", "means", "precs", "rate", "z"):
        for a, b in zip(runs[0][name].eta, runs[1][name].eta, strict=True):
            assert_close(a, b, rtol=1e-10, atol=1e-10)
