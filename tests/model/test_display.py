"""Golden text: repr(Model), repr(CompiledModel), repr(Result), and model.to_graphviz."""

import numpy as np

import factorflow as ff
from tests.conftest import gaussian_mixture

D = ff.distributions


def sprinkler() -> ff.Model:
    with ff.Model("sprinkler") as model:
        cloudy = ff.Bernoulli("cloudy", 0.5)
        with ff.If(cloudy):
            rain = ff.Bernoulli("rain", 0.8)
        with ff.IfNot(cloudy):
            rain = ff.Bernoulli("rain", 0.2)
        with ff.Plate(ff.Range("day", 3)):
            with ff.If(rain):
                ff.Bernoulli("wet", 0.9, observed=[True, True, False])
            with ff.IfNot(rain):
                ff.Bernoulli("wet", 0.1, observed=[True, True, False])
    return model


def mixture() -> ff.Model:
    return gaussian_mixture([-1.0, 0.5, 5.0, 6.0])


def test_model_repr() -> None:
    assert repr(sprinkler()) == """\
Model('sprinkler'): 1 plate, 3 variables, 5 factors
  plates:    day (3)
  variables: cloudy (bool), rain (bool), wet[day] (bool, observed)
  factors:
    cloudy ~ Bernoulli(p=0.5)
    rain ~ Bernoulli(p=0.8)  in ff.If(cloudy)
    rain ~ Bernoulli(p=0.2)  in ff.IfNot(cloudy)
    wet[day] ~ Bernoulli(p=0.9)  in ff.If(rain)
    wet[day] ~ Bernoulli(p=0.1)  in ff.IfNot(rain)"""
    assert repr(mixture()) == """\
Model('mixture'): 2 plates, 4 variables, 4 factors
  plates:    k (2), n (4)
  variables: weights (simplex, 2), means[k] (real), z[n] (int, 2), x[n] (real, observed)
  factors:
    weights ~ Dirichlet(alpha=[1., 1.])
    means[k] ~ Gaussian(mean=0.0, precision=0.01)
    z[n] ~ Discrete(probs=weights)
    x[n] ~ Gaussian(mean=means[z], precision=1.0)  in ff.Switch(z)"""


def test_model_repr_of_expressions_data_and_long_models() -> None:
    with ff.Model("sum") as model:
        a = ff.Gaussian("a", 0.0, variance=1.0)
        b = ff.Gaussian("b", 0.0, variance=1.0)
        t = ff.Data("t", 0.5)
        with ff.Plate(ff.Range("n", 3)):
            ff.Gaussian("c", a + b, precision=t, observed=np.arange(3.0))
        ff.constrain_true(a > 0.0)
    assert repr(model) == """\
Model('sum'): 1 plate, 5 variables, 6 factors
  plates:    n (3)
  variables: a (real), b (real), (a + b)[n] (real), c[n] (real, observed), (a > 0.0) (bool)
  factors:
    a ~ Gaussian(mean=0.0, precision=1.0)
    b ~ Gaussian(mean=0.0, precision=1.0)
    (a + b)[n] = Plus(a=a, b=b)
    c[n] ~ Gaussian(mean=(a + b), precision=Data(t))
    (a > 0.0) = Greater(a=a, b=0.0)
    ConstrainTrue(value=(a > 0.0))"""
    with ff.Model("long") as model:
        for i in range(14):
            ff.Gaussian(f"x{i}", 0.0, variance=np.ones(5)[0])
    text = repr(model).splitlines()
    assert text[0] == "Model('long'): 0 plates, 14 variables, 14 factors"
    assert text[1].endswith("x10 (real), x11 (real), ... (2 more)")
    assert text[-2:] == ["    x11 ~ Gaussian(mean=0.0, precision=1.0)", "    ... (2 more)"]
    with ff.Model("empty") as model:
        pass
    assert repr(model) == "Model('empty'): 0 plates, 0 variables, 0 factors"


def test_compiled_model_repr_is_a_summary() -> None:
    compiled = mixture().compile("vmp", init=["means"])
    statements = sum(1 for _ in ff.ir.nodes.walk(compiled.program.body))
    assert repr(compiled) == (
        f"CompiledModel('mixture', VMP: 4 variables, {statements} statements; "
        "print .source for the program, .schedule for its schedule)")
    assert statements > 20 and "\n" not in repr(compiled)


def test_result_repr() -> None:
    result = ff.Result({"means": D.Gaussian([1.0, 2.0], [0.5, 0.25]),
                        "prec": D.Gamma(3.0, rate=1.5), "x": D.PointMass([1.0, 2.0])},
                       -3.25, "vmp", 4, 0.01, converged=False)
    assert repr(result) == """\
Result(VMP, 4 iterations (not converged), log_evidence=-3.25)
  means: Gaussian(mean=[1., 2.], variance=[0.5 , 0.25])
  prec: Gamma(shape=3.0, rate=1.5)
  x: PointMass([1., 2.])"""


def test_results_name_expressions_as_written() -> None:
    with ff.Model("sum") as model:
        a = ff.Gaussian("a", 0.0, variance=1.0)
        b = ff.Gaussian("b", 0.0, variance=1.0)
        with ff.Plate(ff.Range("n", 2)):
            ff.Gaussian("c", a + b, precision=1.0, observed=[1.0, 2.0])
            ff.Gaussian("d", a + b, precision=1.0, observed=[1.0, 2.0])
    result = model.infer("ep")
    # an expression is named as written; a second one like it gets a counter
    assert sorted(result) == ["(a + b)", "(a + b)#1", "a", "b", "c", "d"]
    assert "v_" not in repr(result) and "__" not in repr(result)


def test_factor_graph_dot() -> None:
    assert sprinkler().to_graphviz() == """\
digraph "sprinkler" {
  compound=true;
  node [fontsize=11];
  edge [fontsize=9, color=gray30];
  v0 [shape=circle, label="cloudy"];
  v1 [shape=circle, label="rain"];
  f0 [shape=square, style=filled, fillcolor=black, width=0.15, height=0.15, fixedsize=true, label="", xlabel="Bernoulli", tooltip="cloudy ~ Bernoulli(p=0.5)"];
  subgraph cluster_0 {
    label="day (3)"; style=solid;
    v2 [shape=circle, label="wet", style=filled, fillcolor="gray80"];
    subgraph cluster_1 {
      label="If(rain)"; style=dashed;
      f3 [shape=square, style=filled, fillcolor=black, width=0.15, height=0.15, fixedsize=true, label="", xlabel="Bernoulli", tooltip="wet[day] ~ Bernoulli(p=0.9)  in ff.If(rain)"];
    }
    subgraph cluster_2 {
      label="IfNot(rain)"; style=dashed;
      f4 [shape=square, style=filled, fillcolor=black, width=0.15, height=0.15, fixedsize=true, label="", xlabel="Bernoulli", tooltip="wet[day] ~ Bernoulli(p=0.1)  in ff.IfNot(rain)"];
    }
  }
  subgraph cluster_3 {
    label="If(cloudy)"; style=dashed;
    f1 [shape=square, style=filled, fillcolor=black, width=0.15, height=0.15, fixedsize=true, label="", xlabel="Bernoulli", tooltip="rain ~ Bernoulli(p=0.8)  in ff.If(cloudy)"];
  }
  subgraph cluster_4 {
    label="IfNot(cloudy)"; style=dashed;
    f2 [shape=square, style=filled, fillcolor=black, width=0.15, height=0.15, fixedsize=true, label="", xlabel="Bernoulli", tooltip="rain ~ Bernoulli(p=0.2)  in ff.IfNot(cloudy)"];
  }
  f0 -> v0;
  f1 -> v1;
  f2 -> v1;
  f3 -> v2;
  f4 -> v2;
  v1 -> f3 [lhead=cluster_1, style=dashed, arrowhead=none];
  v1 -> f4 [lhead=cluster_2, style=dashed, arrowhead=none];
  v0 -> f1 [lhead=cluster_3, style=dashed, arrowhead=none];
  v0 -> f2 [lhead=cluster_4, style=dashed, arrowhead=none];
}"""


def test_factor_graph_of_a_mixture_and_expressions() -> None:
    dot = mixture().to_graphviz()
    assert '  subgraph cluster_0 {\n    label="k (2)"; style=solid;\n    v1 [shape=circle, label="means"];' in dot
    assert '    subgraph cluster_2 {\n      label="Switch(z)"; style=dashed;\n      v3 [shape=circle, label="x", style=filled, fillcolor="gray80"];' in dot
    assert '  v1 -> f3 [arrowhead=none, label="mean"];' in dot
    assert '  v2 -> f3 [arrowhead=none, label="mean index"];' in dot
    assert '  v0 -> f2 [arrowhead=none, label="probs"];' in dot
    assert '  v2 -> f3 [lhead=cluster_2, style=dashed, arrowhead=none];' in dot
    with ff.Model('quoted "name"') as model:
        a = ff.Gaussian("a", 0.0, variance=1.0)
        ff.Gaussian("y", a * 2.0, precision=1.0, observed=1.0)
    dot = model.to_graphviz()
    assert dot.startswith('digraph "quoted \\"name\\"" {')
    assert 'v1 [shape=circle, label="(a * 2.0)", style=dashed];' in dot   # deterministic
