"""ff.parse: DSL models against their Python-API twins (same IR text, same numbers)."""

from __future__ import annotations

import inspect
import runpy
from pathlib import Path

import numpy as np
import pytest

import factorflow as ff
from tests.conftest import assert_close
from tests.text.twins import assert_same_model, ir_text

EXAMPLES = Path(__file__).parent.parent.parent / "examples"


def example(name: str) -> dict:
    return runpy.run_path(str(EXAMPLES / f"{name}.py"))


def test_issue_example_hierarchical_gaussian():
    y = np.random.default_rng(0).normal(size=(4, 3))
    dsl = ff.parse("mu[j] ~ Gaussian(0, 1); tau[j] ~ Gamma(1, 1); "
                   "y[i, j] ~ Gaussian(mu[j], tau[j])", data={"y": y})
    with ff.Model() as python:
        j = ff.Range("j", 3)
        with ff.Plate(j):
            mu = ff.Gaussian("mu", 0, precision=1)
            tau = ff.Gamma("tau", 1, rate=1)
        with ff.Plate(ff.Range("i", 4)), ff.Plate(j):
            ff.Gaussian("y", mu, precision=tau, observed=y)
    assert ir_text(dsl).splitlines()[1] == "ranges v_j=3, v_i=4"
    assert_same_model(dsl, python, algorithms=("vmp",), iterations=30)


def test_example_learning_gaussian():
    data = [5.0, 7.0]
    path = EXAMPLES / "learning_gaussian.ff"
    dsl = ff.parse(path.read_text(), data={"x": data}, name="learning_gaussian",
                   filename=str(path))
    assert_same_model(dsl, example("learning_gaussian")["build"](data), algorithms=("vmp",))
    assert_close(dsl.infer("vmp")["mean"].mean, 5.9603207170807826, rtol=1e-12)


def test_example_clinical_trial():
    ex = example("clinical_trial")
    dsl = ff.parse("""
        effective ~ Bernoulli(0.5)
        if effective:
            p_control ~ Beta(1.0, 1.0)
            p_treated ~ Beta(1.0, 1.0)
            control_if[control] ~ Bernoulli(p_control)
            treated_if[treated] ~ Bernoulli(p_treated)
        else:
            p_all ~ Beta(1.0, 1.0)
            control_ifnot[control] ~ Bernoulli(p_all)
            treated_ifnot[treated] ~ Bernoulli(p_all)
    """, data={"control_if": ex["CONTROL"], "control_ifnot": ex["CONTROL"],
               "treated_if": ex["TREATED"], "treated_ifnot": ex["TREATED"]},
        name="clinical_trial")
    assert_same_model(dsl, ex["build"](), algorithms=("ep",))
    assert_close(dsl.infer("ep")["effective"].p, 2772 / 3672, rtol=1e-6)


def test_example_truncated_gaussian_with_changeable_data():
    dsl = ff.parse("""
        data threshold
        x ~ Gaussian(0.0, variance=1.0)
        constrain_true(x > threshold)
    """, data={"threshold": 0.5}, name="truncated_gaussian")
    python = example("truncated_gaussian")["build"](0.5)
    assert_same_model(dsl, python, algorithms=("ep",))
    compiled = dsl.compile("ep")
    assert_close(np.exp(compiled.run(data={"threshold": 0.5}).log_evidence),
                 0.308537538725987, rtol=1e-9)
    assert_close(np.exp(compiled.run(data={"threshold": 0.0}).log_evidence), 0.5, rtol=1e-9)


def test_example_two_coins():
    build = example("two_coins")["build"]
    dsl = ff.parse("first ~ Bernoulli(0.5); second ~ Bernoulli(0.5); both = first & second",
                   name="two_coins")
    assert_same_model(dsl, build(), algorithms=("ep",))
    assert_close(dsl.infer("ep")["(first & second)"].p, 0.25, rtol=1e-12)
    dsl = ff.parse("first ~ Bernoulli(0.5)\nsecond ~ Bernoulli(0.5)\n"
                   "constrain_true(~(first & second))", name="two_coins_not_both")
    assert_same_model(dsl, build(not_both=True), algorithms=("ep",))
    assert_close(dsl.infer("ep")["first"].p, 1 / 3, rtol=1e-12)


def test_example_trueskill():
    ex = example("trueskill")
    _, winner, loser = ex["games"](6, 20, np.random.default_rng(0))
    dsl = ff.parse("""
        skill[player] ~ Gaussian(25, variance=70)
        pw[game] ~ Gaussian(skill[winner[game]], variance=16)
        pl[game] ~ Gaussian(skill[loser[game]], variance=16)
        constrain_true(pw[game] > pl[game])
    """, data={"winner": winner, "loser": loser, "player": 6}, name="trueskill")
    assert_same_model(dsl, ex["trueskill"](6, winner, loser), algorithms=("ep",))


def test_example_lda():
    build = example("lda")["lda"]
    doc, words = np.array([0, 0, 1, 1, 1]), np.array([0, 2, 1, 1, 3])
    dsl = ff.parse("""
        theta[d] ~ Dirichlet([0.5, 0.5])
        phi[k] ~ Dirichlet([0.1, 0.1, 0.1, 0.1])
        z[n] ~ Discrete(theta[doc[n]])
        switch z[n]:
            w[n] ~ Discrete(phi[z[n]])
    """, data={"doc": doc, "w": words, "d": 2, "k": 2}, name="lda")
    assert_same_model(dsl, build(doc, words, 2, 2, 4, 0.5, 0.1), algorithms=("vmp",),
                      iterations=5)


#: the gallery (examples/*.py): each model the DSL expresses has a twin test above that
#: builds it with the example's own code; the others say what the DSL lacks
DSL_TWINS = {"learning_gaussian": test_example_learning_gaussian,
             "clinical_trial": test_example_clinical_trial,
             "truncated_gaussian": test_example_truncated_gaussian_with_changeable_data,
             "two_coins": test_example_two_coins,
             "trueskill": test_example_trueskill,
             "lda": test_example_lda}
NOT_IN_THE_DSL = {
    "bayesian_pca": "vector variables (VectorGaussian) and inner products",
    "gaussian_mixture": "VectorGaussian and Wishart components",
    "hmm": "chains (x[t - 1]) and ff.Constant tables",
    "horseshoe_regression": "HalfCauchy scales, X @ beta and Gibbs sampling",
    "horseshoe_gibbs": "HalfCauchy and Gibbs sampling",
    "linear_regression": "VectorGaussian weights and X @ w",
    "logistic_regression": "the logistic link and vector weights",
    "multinomial_regression": "ff.softmax and vector weights",
    "poisson_regression": "the log link ff.exp and vector weights",
    "probit_bpm": "VectorGaussian weights and the probit link",
    "state_space": "chains (x[t - 1])",
    "state_space_2d": "chains (x[t - 1])",
}


def test_every_gallery_model_is_twinned_or_says_what_the_dsl_lacks():
    gallery = {p.stem for p in EXAMPLES.glob("*.py")}
    assert gallery == set(DSL_TWINS) | set(NOT_IN_THE_DSL), (
        "classify the new example: a DSL twin test, or what the DSL lacks for it")
    assert not set(DSL_TWINS) & set(NOT_IN_THE_DSL)
    for name, test in DSL_TWINS.items():   # each twin test builds the example's model
        assert f'example("{name}")' in inspect.getsource(test), name


def test_mixture_with_switch():
    data = np.concatenate([np.linspace(-0.5, 0.5, 5), np.linspace(9.5, 10.5, 5)])
    init = {"means": ff.distributions.Gaussian([0.0, 10.0], [1.0, 1.0])}
    dsl = ff.parse("""
        weights ~ Dirichlet([1, 1])
        means[k] ~ Gaussian(0, variance=100)
        z[n] ~ Discrete(weights)
        switch z[n]:
            x[n] ~ Gaussian(means[z[n]], 1.0)
    """, data={"x": data, "k": 2})
    with ff.Model() as python:
        k = ff.Range("k", 2)
        weights = ff.Dirichlet("weights", np.ones(2))
        with ff.Plate(k):
            means = ff.Gaussian("means", 0, variance=100)
        with ff.Plate(ff.Range("n", len(data))):
            z = ff.Discrete("z", weights)
            with ff.Switch(z):
                ff.Gaussian("x", means[z], precision=1.0, observed=data)
    assert_same_model(dsl, python, algorithms=("vmp",), init=init, iterations=20)
    assert_close(dsl.infer("vmp", init=init)["means"].mean, [0.0, 10.0], atol=0.2)


def test_trueskill_indexing_by_observed_integers():
    winner, loser = np.array([0, 1, 0, 2]), np.array([1, 2, 2, 1])
    dsl = ff.parse("""
        skill[p] ~ Gaussian(25, variance=70)
        pw[g] ~ Gaussian(skill[winner[g]], variance=16)
        pl[g] ~ Gaussian(skill[loser[g]], variance=16)
        constrain_true(pw[g] > pl[g])
    """, data={"winner": winner, "loser": loser, "p": 3})
    with ff.Model() as python:
        with ff.Plate(ff.Range("p", 3)):
            skill = ff.Gaussian("skill", 25, variance=70)
        with ff.Plate(ff.Range("g", 4)):
            pw = ff.Gaussian("pw", skill[winner], variance=16)
            pl = ff.Gaussian("pl", skill[loser], variance=16)
            ff.constrain_true(pw > pl)
    assert_same_model(dsl, python, algorithms=("ep",))


def test_every_distribution_and_keyword():
    counts, draws = np.array([3, 0, 5]), np.array([1, 0, 2, 2])
    dsl = ff.parse("""
        a ~ Gaussian(1, variance=4); b ~ Gaussian(a, precision=2)
        s ~ Gamma(2, scale=0.5); r ~ Gamma(3, 2)
        q ~ Beta(2, 3); f[m] ~ Bernoulli(q)
        c[m] ~ Binomial(6, q)
        lam ~ Gamma(1, 1); k[m] ~ Poisson(lam)
        w ~ Dirichlet([1, 2, 3]); d[t] ~ Discrete(w)
        e ~ Discrete([0.2, 0.8])
    """, data={"f": [True, False, True], "c": counts, "k": counts, "d": draws})
    with ff.Model() as python:
        a = ff.Gaussian("a", 1, variance=4)
        ff.Gaussian("b", a, precision=2)
        ff.Gamma("s", 2, scale=0.5)
        ff.Gamma("r", 3, rate=2)
        q = ff.Beta("q", 2, 3)
        m = ff.Range("m", 3)
        with ff.Plate(m):
            ff.Bernoulli("f", q, observed=[True, False, True])
        with ff.Plate(m):
            ff.Binomial("c", 6, q, observed=counts)
        lam = ff.Gamma("lam", 1, rate=1)
        with ff.Plate(m):
            ff.Poisson("k", lam, observed=counts)
        w = ff.Dirichlet("w", np.array([1.0, 2.0, 3.0]))
        with ff.Plate(ff.Range("t", 4)):
            ff.Discrete("d", w, observed=draws)
        ff.Discrete("e", np.array([0.2, 0.8]))
    assert_same_model(dsl, python, algorithms=("vmp",), iterations=10)
    # conjugate: q | f, c is Beta(2 + 2 + 8, 3 + 1 + 10)
    assert_close(dsl.infer("vmp")["q"].mean, 12 / 26, rtol=1e-9)


def test_deterministic_arithmetic_and_comparison():
    dsl = ff.parse("""
        a ~ Gaussian(1, 1); b ~ Gaussian(-2, 0.5)
        s = a + b; t = 2 * a - b; u = -b + 3
        big = s > 0.5; small = 1 < t
        y ~ Gaussian(u, 10); h ~ Bernoulli(0.3); g = big | h
        constrain_true(g & is_positive(t))
    """)
    with ff.Model() as python:
        a = ff.Gaussian("a", 1, precision=1)
        b = ff.Gaussian("b", -2, precision=0.5)
        s = a + b
        t = 2 * a - b
        u = b * -1.0 + 3
        big = s > 0.5
        small = 1 < t
        ff.Gaussian("y", u, precision=10)
        h = ff.Bernoulli("h", 0.3)
        g = big | h
        ff.constrain_true(g & ff.is_positive(t))
    del small
    assert_same_model(dsl, python, algorithms=("ep",))


def test_plated_gates_case_and_constants_from_data():
    m = np.array([0.5, -1.0, 2.0])
    dsl = ff.parse("""
        c[i] ~ Bernoulli(0.4)
        if c[i]:
            x[i] ~ Gaussian(mu[i], 1)
        else:
            x[i] ~ Gaussian(0, 1)
        obs[i] ~ Gaussian(x[i], 4)
        z ~ Discrete([0.5, 0.25, 0.25])
        if z == 2:
            v ~ Gaussian(1, 1)
    """, data={"mu": m, "obs": [1.0, 0.0, 2.5]})
    with ff.Model() as python:
        i = ff.Range("i", 3)
        with ff.Plate(i):
            c = ff.Bernoulli("c", 0.4)
            with ff.If(c):
                x = ff.Gaussian("x", m, precision=1)
            with ff.IfNot(c):
                x = ff.Gaussian("x", 0, precision=1)
            ff.Gaussian("obs", x, precision=4, observed=[1.0, 0.0, 2.5])
        z = ff.Discrete("z", np.array([0.5, 0.25, 0.25]))
        with ff.Case(z, 2):
            ff.Gaussian("v", 1, precision=1)
    assert_same_model(dsl, python, algorithms=("ep",))
    # exact: obs | c ~ N(mu or 0, 1 + 1/4) per element, P(c | obs) by Bayes
    from scipy import stats
    obs = np.array([1.0, 0.0, 2.5])
    on, off = stats.norm.pdf(obs, m, np.sqrt(1.25)), stats.norm.pdf(obs, 0, np.sqrt(1.25))
    assert_close(dsl.infer("ep")["c"].p, 0.4 * on / (0.4 * on + 0.6 * off), rtol=1e-9)


def test_data_arrays_are_laid_out_over_the_plates():
    mean = np.arange(6.0).reshape(2, 3)  # over (j, i)
    dsl = ff.parse("x[i, j] ~ Gaussian(m[j, i], 1); y[i, j] ~ Gaussian(r[i], 1)",
                   data={"m": mean, "r": np.array([1.0, 2.0, 3.0])})
    with ff.Model() as python:
        with ff.Plate(ff.Range("i", 3)), ff.Plate(ff.Range("j", 2)):
            ff.Gaussian("x", mean.T, precision=1)
            ff.Gaussian("y", np.array([1.0, 2.0, 3.0])[:, None], precision=1)
    assert_same_model(dsl, python, algorithms=("ep",))
    assert_close(dsl.infer("ep")["x"].mean, mean.T, rtol=0, atol=0)


def test_provenance_names_the_dsl_line():
    model = ff.parse("a ~ Gaussian(0, 1)\n\nb ~ Gaussian(a, 2); c ~ Gamma(1, 1)",
                     filename="m.ff")
    assert model.statements[1].provenance == "m.ff:3: b ~ Gaussian(a, 2)"
    assert model.statements[2].provenance == "m.ff:3: c ~ Gamma(1, 1)"
    assert model.variables["c"].provenance == "m.ff:3: c ~ Gamma(1, 1)"
    assert "m.ff:3: b ~ Gaussian(a, 2)" in model.compile("ep").source


def test_declared_data_is_changeable_without_recompiling():
    winner, loser = np.array([0, 1]), np.array([1, 2])
    text = """
        data winner, loser, y_obs
        skill[p] ~ Gaussian(0, variance=4)
        pw[g] ~ Gaussian(skill[winner[g]], variance=1)
        pl[g] ~ Gaussian(skill[loser[g]], variance=1)
        y[g] ~ Gaussian(pw[g] - pl[g], 2, observed=y_obs)
    """
    dsl = ff.parse(text, data={"winner": winner, "loser": loser, "y_obs": [1.0, 0.5],
                               "p": 3})
    with ff.Model() as python:
        w, l, y = ff.Data("winner", winner), ff.Data("loser", loser), ff.Data("y_obs", [1.0, 0.5])
        with ff.Plate(ff.Range("p", 3)):
            skill = ff.Gaussian("skill", 0, variance=4)
        with ff.Plate(ff.Range("g", 2)):
            pw = ff.Gaussian("pw", skill[w], variance=1)
            pl = ff.Gaussian("pl", skill[l], variance=1)
            ff.Gaussian("y", pw - pl, precision=2, observed=y)
    assert_same_model(dsl, python, algorithms=("ep",))
    new = {"winner": np.array([2, 0]), "loser": np.array([0, 1]), "y_obs": [3.0, -1.0]}
    rerun = dsl.compile("ep").run(data=new)
    fresh = ff.parse(text, data=dict(new, p=3)).infer("ep")
    np.testing.assert_array_equal(rerun["skill"].eta[0], fresh["skill"].eta[0])
    np.testing.assert_array_equal(rerun["skill"].eta[1], fresh["skill"].eta[1])


def test_twin_check_sees_a_different_model():
    one = ff.parse("a ~ Gaussian(0, 1); b ~ Gaussian(a, 2)")
    other = ff.parse("a ~ Gaussian(0, 1); b ~ Gaussian(a, variance=2)")
    with pytest.raises(AssertionError):
        assert_same_model(one, other, algorithms=())


def test_observed_keyword_takes_a_data_array():
    values = np.array([0.5, 1.5, 2.0])
    dsl = ff.parse("m ~ Gaussian(0, 1)\ny[n] ~ Gaussian(m, 1, observed=ys)", data={"ys": values})
    named = ff.parse("m ~ Gaussian(0, 1)\ny[n] ~ Gaussian(m, 1)", data={"y": values})
    assert_same_model(dsl, named, algorithms=("ep",))
    assert_close(dsl.infer("ep")["m"].mean, values.sum() / 4, rtol=1e-12)  # N(0,1) prior


def test_a_variable_may_be_called_observed():
    dsl = ff.parse("observed ~ Gaussian(0, 1); y ~ Gaussian(observed, 1, observed=v)",
                   data={"v": 2.0})
    with ff.Model() as python:
        observed = ff.Gaussian("observed", 0, precision=1)
        ff.Gaussian("y", observed, precision=1, observed=2.0)
    assert_same_model(dsl, python, algorithms=("ep",))
    assert_close(dsl.infer("ep")["observed"].mean, 1.0, rtol=1e-12)


@pytest.mark.slow
def test_import_factorflow_does_not_load_lark():
    import subprocess
    import sys
    root = Path(__file__).resolve().parent.parent.parent
    code = "import sys, factorflow; sys.exit('lark' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], cwd=root, timeout=60,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0


def test_nested_gates_inside_plates():
    text = """
        means[k] ~ Gaussian([-1, 1], 1)
        z[n] ~ Discrete([0.5, 0.5])
        c[n] ~ Bernoulli(0.3)
        switch z[n]:
            if c[n]:
                x[n] ~ Gaussian(means[z[n]], 1)
            else:
                x[n] ~ Gaussian(0, variance=4)
        obs[n] ~ Gaussian(x[n], 2)
    """
    dsl = ff.parse(text, data={"obs": [0.5, 1.5], "k": 2})
    with ff.Model() as python:
        with ff.Plate(ff.Range("k", 2)):
            means = ff.Gaussian("means", np.array([-1.0, 1.0]), precision=1)
        with ff.Plate(ff.Range("n", 2)):
            z = ff.Discrete("z", np.array([0.5, 0.5]))
            c = ff.Bernoulli("c", 0.3)
            with ff.Switch(z):
                with ff.If(c):
                    x = ff.Gaussian("x", means[z], precision=1)
                with ff.IfNot(c):
                    x = ff.Gaussian("x", 0, variance=4)
            ff.Gaussian("obs", x, precision=2, observed=[0.5, 1.5])
    # the IR only: compiling this model takes ~10 s (the gate passes on an If inside a
    # Switch inside a plate), and the same IR is the same program, numbers included
    assert ir_text(dsl) == ir_text(python)
