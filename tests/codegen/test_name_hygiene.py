"""No user name can reach a name of the generated code (issue 10, item 1).

Each known failure is a regression test against the same model with harmless names; then
every identifier the generator emits (collected from the sources of several models, the
runtime's helpers and the resolved symbols), and its old-style spellings, is used as the
name of every kind of model element, and the posterior must not move (1e-12).
"""

from __future__ import annotations

import ast
import runpy
from pathlib import Path

import numpy as np
import pytest

import factorflow as ff
from factorflow.codegen.python import GENERATED
from factorflow.runtime.kernels import NAMESPACE
from tests.conftest import assert_close

EXAMPLES = Path(__file__).parent.parent.parent / "examples"
OBS = np.array([0.5, 1.5, 3.0])
DATA = np.array([1.0, 2.0, 4.0])
#: the roles of the probe models, with harmless names
VMP_ROLES = {"mean": "mean", "prec": "prec", "c": "c", "n": "n", "d": "d", "x": "x",
             "y": "y"}
EP_ROLES = {"mean": "mean", "c": "c", "n": "n", "d": "d", "x": "x", "y": "y"}


def learning_gaussian(mean="mean", prec="prec", n="n", x="x", d: str | None = None
                      ) -> ff.Model:
    """mean ~ N(0, 100), prec ~ Gamma(1, 1), x[n] ~ N(mean, 1/prec) observed (5, 7),
    through ``ff.Data(d)`` if ``d`` is given."""
    with ff.Model("learning") as model:
        m = ff.Gaussian(mean, 0.0, variance=100.0)
        p = ff.Gamma(prec, 1.0, rate=1.0)
        r = ff.Range(n, 2)
        observed = [5.0, 7.0] if d is None else ff.Data(d, np.array([5.0, 7.0]))
        with ff.Plate(r):
            ff.Gaussian(x, m, precision=p, observed=observed)
    return model


def probe(algorithm: str, names: dict[str, str]) -> ff.Model:
    """A model with a latent, a gate, a range, a Data and observed children, each named
    by ``names`` (role -> name); under EP the precision is known."""
    with ff.Model("probe") as model:
        mean = ff.Gaussian(names["mean"], 0.0, variance=100.0)
        prec = ff.Gamma(names["prec"], 1.0, rate=1.0) if algorithm == "vmp" else 2.0
        c = ff.Bernoulli(names["c"], 0.3)
        n = ff.Range(names["n"], 3)
        d = ff.Data(names["d"], DATA)
        with ff.Plate(n):
            ff.Gaussian(names["x"], mean, precision=prec, observed=d)
        with ff.If(c):
            with ff.Plate(n):
                ff.Gaussian(names["y"], mean, precision=1.0, observed=OBS)
        with ff.IfNot(c):
            with ff.Plate(n):
                ff.Gaussian(names["y"], 0.0, precision=1.0, observed=OBS)
    return model


def assert_same(result, reference, pairs: dict[str, str]) -> None:
    """The posteriors of ``result`` (by its names) equal ``reference``'s (by harmless
    names), parameter by parameter, and so does the evidence."""
    for name, harmless in pairs.items():
        for got, want in zip(result[name].eta, reference[harmless].eta, strict=True):
            assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert_close(result.log_evidence, reference.log_evidence, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- the known failures
@pytest.mark.parametrize("role, name", [
    ("x", "log_evidence"), ("x", "iteration"), ("n", "iterations"), ("x", "mean_F"),
    ("x", "mean__F"), ("x", "v_mean__F"), ("x", "mean_marginal"), ("x", "data"),
    ("mean", "Gaussian"), ("x", "Gaussian"), ("prec", "Gamma"), ("x", "total"),
    ("mean", "total"), ("n", "data"), ("n", "sizes"), ("x", "np"), ("x", "init"),
    ("n", "range"), ("mean", "infer"), ("x", "on_iteration"),
])
def test_a_name_of_the_generated_code_is_an_ordinary_user_name(role, name):
    reference = learning_gaussian().infer("vmp", iterations=50)
    result = learning_gaussian(**{role: name}).infer("vmp", iterations=50)
    pairs = {"mean": "mean", "prec": "prec"}
    pairs = {(name if role == k else k): v for k, v in pairs.items()}
    assert_same(result, reference, pairs)


def test_a_range_named_iterations_runs_every_sweep():
    sweeps: list[int] = []
    learning_gaussian(n="iterations").compile("vmp").run(
        iterations=50, tolerance=None, on_iteration=lambda k, _: sweeps.append(k))
    assert sweeps == list(range(50))


def test_an_observed_a_F_beside_a_latent_a():
    """``a_F`` (and ``a__F``, ``v_a__F``) named by the user is not the message ``a``'s
    definition sends it."""
    reference = learning_gaussian().infer("vmp", iterations=50)
    for observed in ("a_F", "a__F", "v_a__F", "a_use0_B", "a_marginal"):
        result = learning_gaussian(mean="a", x=observed).infer("vmp", iterations=50)
        assert_same(result, reference, {"a": "mean", "prec": "prec"})


@pytest.mark.parametrize("name", ["data", "Gaussian", "total"])
def test_helper_names_in_every_role_under_ep(name):
    reference = probe("ep", EP_ROLES).infer("ep", iterations=30)
    for role in EP_ROLES:
        names = EP_ROLES | {role: name}
        result = probe("ep", names).infer("ep", iterations=30)
        assert_same(result, reference, {names["mean"]: "mean", names["c"]: "c"})


# ---------------------------------------------------------------- every emitted name
def _sources() -> list:
    from tests.runtime.test_gated_models import mixture
    from tests.runtime.test_indexing import _skill_model

    clinical = runpy.run_path(str(EXAMPLES / "clinical_trial.py"))["build"]()

    @ff.factor(sample="real", mean="real", precision="positive")
    def hygiene_normal(sample, mean, precision):
        return 0.5 * ff.log(precision) - 0.5 * precision * (sample - mean) ** 2

    with ff.Model("nodes") as nodes:
        a = ff.Gaussian("a", 0.0, variance=10.0)
        b = ff.Gaussian("b", 1.0, variance=10.0)
        s = ff.Deterministic("s", lambda a, b: 2.0 * a + b, a=a, b=b)
        n = ff.Range("n", 3)
        with ff.Plate(n):
            hygiene_normal("x", mean=s, precision=2.0, observed=DATA)
    return [probe("vmp", VMP_ROLES).compile("vmp"), probe("ep", EP_ROLES).compile("ep"),
            mixture().compile("vmp", init=("means",)), mixture().compile("ep"),
            clinical.compile("ep"), _skill_model([0.0, 1.0], [0], [1]).compile("ep"),
            nodes.compile("vmp")]


def emitted_names() -> list[str]:
    """Every identifier in the generated sources (and every name of their programs), the
    runtime's helpers, the resolved symbols, the generated program's own names, and the
    old-style spellings of each (``v_mean__F`` -> ``mean__F``, ``mean_F``)."""
    found = set(NAMESPACE) | set(GENERATED)
    for compiled in _sources():
        found |= set(compiled.generated.symbols)
        found |= {d.name for d in compiled.program.decls} | {r for r, _ in
                                                             compiled.program.ranges}
        for node in ast.walk(ast.parse(compiled.source)):
            if isinstance(node, ast.Name):
                found.add(node.id)
            elif isinstance(node, ast.arg):
                found.add(node.arg)
            elif isinstance(node, ast.FunctionDef):
                found.add(node.name)
            elif isinstance(node, ast.keyword) and node.arg:
                found.add(node.arg)
    variants = set()
    for name in found:
        bare = name.removeprefix("v_")
        variants |= {bare, bare.replace("__", "_")}
    return sorted(found | variants)


NAMES = emitted_names()


def test_the_collection_holds_every_kind_of_generated_name():
    expected = {"data", "sizes", "init", "iterations", "on_iteration", "log_evidence",
                "iteration", "infer", "np", "total", "prod_over", "initial", "Gaussian",
                "Gaussian_sample_average_logarithm", "v_mean__F", "mean_F", "mean_marginal",
                "v_mean__use0__B", "mean_use0_B", "c_cases", "mean_cond_c"}
    assert expected <= set(NAMES), sorted(expected - set(NAMES))
    assert len(NAMES) > 150 and not any(n.startswith("filler_") for n in NAMES)


@pytest.mark.parametrize("shift", range(5))
def test_every_emitted_name_in_every_role(shift):
    """The names dealt five at a time to the learning model's latent mean and precision,
    range, Data and observed child, role i taking name (i + shift) of its group: over the
    five shifts each name takes every role."""
    reference = learning_gaussian(d="d").infer("vmp", iterations=3)
    roles = ["mean", "prec", "n", "d", "x"]
    for start in range(0, len(NAMES), len(roles)):
        group = _group(start, len(roles))
        named = {role: group[(i + shift) % len(roles)] for i, role in enumerate(roles)}
        result = learning_gaussian(**named).infer("vmp", iterations=3)
        assert_same(result, reference, {named["mean"]: "mean", named["prec"]: "prec"})


@pytest.mark.parametrize("algorithm", ["vmp", "ep"])
def test_every_emitted_name_in_a_gated_model(algorithm):
    """Each name once in the gated probe (its role turning from group to group), where
    the names of cases arrays and gate clones exist too."""
    roles = VMP_ROLES if algorithm == "vmp" else EP_ROLES
    reference = probe(algorithm, roles).infer(algorithm, iterations=3)
    latent = [r for r in ("mean", "prec", "c") if r in roles]
    for k, start in enumerate(range(0, len(NAMES), len(roles))):
        group = _group(start, len(roles))
        named = {role: group[(i + k) % len(roles)] for i, role in enumerate(roles)}
        result = probe(algorithm, named).infer(algorithm, iterations=3)
        assert_same(result, reference, {named[r]: r for r in latent})


def _group(start: int, size: int) -> list[str]:
    """``size`` names from ``start`` on, padded with fillers that are no emitted name."""
    group = NAMES[start:start + size]
    return group + [f"filler_{j}" for j in range(size - len(group))]


# ---------------------------------------------------------------- what people read
def test_errors_and_labels_use_the_names_the_user_gave():
    """The user prefix is the generated code's business: errors and the schedule's
    descriptions say ``c``, ``n`` and ``z[n]``, never ``v_c`` or ``v_z[v_n]``."""
    with ff.Model() as model:
        c = ff.Bernoulli("c", 0.5)
        n = ff.Range("n", 2)
        with ff.Plate(n):
            with ff.If(c):
                ff.Gaussian("x", 0.0, variance=1.0, observed=[1.0, 2.0])
    # a gate inside a plate its condition does not depend on is lowered outside it
    from scipy import stats
    like = np.prod(stats.norm.pdf([1.0, 2.0]))
    result = model.infer("ep")
    assert abs(float(result["c"].p) - like / (like + 1.0)) < 1e-12
    with ff.Model() as model:
        c = ff.Gaussian("c", 0.0, variance=1.0)
        with ff.Plate(ff.Range("n", 2)), pytest.raises(ff.ModelError, match=r"'c'") as error:
            with ff.If(c):
                ff.Gaussian("x", 0.0, variance=1.0, observed=[1.0, 2.0])
    assert "v_" not in str(error.value)
    with ff.Model() as model:
        k = ff.Range("k", 2)
        with ff.Plate(k):
            m = ff.Gaussian("m", 0.0, variance=1.0)
        with ff.Plate(k):
            z = ff.Discrete("z", [0.5, 0.5])
            with ff.Switch(z):
                ff.Gaussian("y", m[z], variance=1.0, observed=np.ones(2))
    with pytest.raises(ff.ModelError, match=r"ff.Switch\(z\) loops over k .* inside "
                       r"ff.Plate\(k\)") as error:
        model.compile("ep")
    assert "v_" not in str(error.value)
    from tests.runtime.test_gated_models import mixture
    schedule = str(mixture().compile("vmp").schedule)
    assert "posterior of cases of z[n]" in schedule and "v_z[v_n]" not in schedule
