"""The factor catalogue: what importing ``factorflow.factors`` registers, and the
consistency of operators, annotations, evidence and log densities."""

from __future__ import annotations

import numpy as np
import pytest

import factorflow.factors as factors
from factorflow.distributions import (
    Bernoulli,
    Beta,
    Dirichlet,
    Discrete,
    Gamma,
    Gaussian,
    VectorGaussian,
    Wishart,
)
from factorflow.factors import FACTORS
from tests.conftest import assert_close

#: name -> (arguments with domains, deterministic)
CATALOGUE = {
    "Gaussian": ((("sample", "real"), ("mean", "real"), ("precision", "positive")), False),
    "Gamma": ((("sample", "positive"), ("shape", "positive"), ("rate", "positive")), False),
    "Beta": ((("sample", "unit"), ("alpha", "positive"), ("beta", "positive")), False),
    "Dirichlet": ((("sample", "simplex"), ("alpha", "positive")), False),
    "Bernoulli": ((("sample", "bool"), ("p", "unit")), False),
    "Discrete": ((("sample", "int"), ("probs", "simplex")), False),
    "Binomial": ((("sample", "count"), ("trials", "count"), ("p", "unit")), False),
    "Poisson": ((("sample", "count"), ("rate", "positive")), False),
    "And": ((("out", "bool"), ("a", "bool"), ("b", "bool")), True),
    "Or": ((("out", "bool"), ("a", "bool"), ("b", "bool")), True),
    "Not": ((("out", "bool"), ("a", "bool")), True),
    "ConstrainTrue": ((("value", "bool"),), False),
    "IsPositive": ((("out", "bool"), ("x", "real")), True),
    "IsBetween": ((("out", "bool"), ("x", "real"), ("lower", "real"), ("upper", "real")), True),
    "Greater": ((("out", "bool"), ("a", "real"), ("b", "real")), True),
    "Plus": ((("sum", "real"), ("a", "real"), ("b", "real")), True),
    "Minus": ((("diff", "real"), ("a", "real"), ("b", "real")), True),
    "ScaleBy": ((("product", "real"), ("a", "real"), ("scale", "real")), True),
    "Product": ((("product", "real"), ("a", "real"), ("b", "real")), True),
    "VectorGaussian": ((("sample", "vector"), ("mean", "vector"), ("precision", "posdef")),
                       False),
    "Wishart": ((("sample", "posdef"), ("dof", "positive"), ("rate", "posdef")), False),
    "InnerProduct": ((("product", "real"), ("a", "vector"), ("b", "vector")), True),
    "MatrixVectorProduct": ((("product", "vector"), ("matrix", "matrix"),
                             ("vector", "vector")), True),
    "VectorPlus": ((("sum", "vector"), ("a", "vector"), ("b", "vector")), True),
}

#: (algorithm, target) pairs deliberately left unregistered, with the reason
UNSUPPORTED = {
    ("Gamma", "vmp", "shape"): "the shape must be known",
    ("Gaussian", "ep", "precision"): "not Gaussian-closed",
    ("IsPositive", "vmp", "x"): "needs the previous message to x",
    ("Greater", "vmp", "a"): "needs the previous message to a",
    ("Product", "ep", "a"): "VMP only",
    ("Binomial", "vmp", "sample"): "counts are observed",
    ("Poisson", "ep", "sample"): "counts are observed",
    ("VectorGaussian", "ep", "precision"): "not Gaussian-closed",
    ("Wishart", "vmp", "dof"): "the degrees of freedom must be known",
    ("InnerProduct", "ep", "b"): "EP needs b known (the factory puts the random vector in a)",
    ("MatrixVectorProduct", "ep", "matrix"): "the matrix is known (rows over a plate: inner)",
}

#: all-known argument values at which each factor's density is positive
POINTS = {
    "Gaussian": {"sample": 0.3, "mean": -0.2, "precision": 2.0},
    "Gamma": {"sample": 0.7, "shape": 2.5, "rate": 1.5},
    "Beta": {"sample": 0.3, "alpha": 2.0, "beta": 3.0},
    "Dirichlet": {"sample": np.array([0.2, 0.3, 0.5]), "alpha": np.array([1.5, 2.0, 0.8])},
    "Bernoulli": {"sample": True, "p": 0.3},
    "Discrete": {"sample": 2, "probs": np.array([0.2, 0.3, 0.5])},
    "Binomial": {"sample": 3, "trials": 7, "p": 0.4},
    "Poisson": {"sample": 4, "rate": 2.5},
    "And": {"out": False, "a": True, "b": False},
    "Or": {"out": True, "a": True, "b": False},
    "Not": {"out": False, "a": True},
    "ConstrainTrue": {"value": True},
    "IsPositive": {"out": True, "x": 0.4},
    "Greater": {"out": False, "a": 0.4, "b": 1.0},
    "IsBetween": {"out": True, "x": 0.4, "lower": -1.0, "upper": 1.0},
    "Plus": {"sum": 1.5, "a": 1.0, "b": 0.5},
    "Minus": {"diff": 0.5, "a": 1.0, "b": 0.5},
    "ScaleBy": {"product": 2.0, "a": 1.0, "scale": 2.0},
    "Product": {"product": 2.0, "a": 1.0, "b": 2.0},
    "VectorGaussian": {"sample": np.array([0.3, -0.1]), "mean": np.array([-0.2, 0.4]),
                       "precision": np.array([[2.0, 0.3], [0.3, 1.0]])},
    "Wishart": {"sample": np.array([[1.5, 0.2], [0.2, 0.7]]), "dof": 3.5,
                "rate": np.array([[2.0, -0.4], [-0.4, 1.0]])},
    "InnerProduct": {"product": 1.0, "a": np.array([1.0, 2.0]), "b": np.array([0.5, 0.25])},
    "MatrixVectorProduct": {"product": np.array([2.0, 1.0]), "matrix": np.array([[1.0, 0.5],
                                                                             [0.0, 0.5]]),
                            "vector": np.array([1.0, 2.0])},
    "VectorPlus": {"sum": np.array([1.5, 2.0]), "a": np.array([1.0, 2.0]),
                   "b": np.array([0.5, 0.0])},
}


def test_importing_the_package_registers_the_catalogue():
    assert set(factors.__all__) == {"FACTORS", "BUILTIN_FACTORS", "Factor", "Operator",
                                    "define_factor"}
    assert set(CATALOGUE) <= factors.BUILTIN_FACTORS <= set(FACTORS)
    for name, (args, deterministic) in CATALOGUE.items():
        factor = FACTORS[name]
        assert tuple((a.name, a.domain) for a in factor.args) == args, name
        assert factor.deterministic is deterministic, name


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_operator_annotations_name_arguments_the_operator_reads(name):
    factor = FACTORS[name]
    assert factor.operators, name
    for (algorithm, target), op in factor.operators.items():
        assert op.target == target and op.algorithm == algorithm
        assert set(op.reads) <= set(factor.arg_names) | set(factor.buffers)
        assert op.buffer == (target in factor.buffers)
        for buffer in set(op.reads) & set(factor.buffers):  # shared work is read Fresh
            assert buffer in op.fresh, (name, target, buffer)
        for annotation in ("skip_if_uniform", "proper", "trigger", "fresh", "known",
                           "uniform_penalty"):
            assert getattr(op, annotation) <= set(op.reads), (name, target, annotation)
        assert target not in op.known, (name, target)
        if algorithm == "ep":
            assert not op.trigger, "EP messages are never triggered (seed 000)"


#: deterministic factors whose VMP message truncates a random argument: their term is the
#: entropy the truncated posterior has beyond its Gaussian projection
TRUNCATIONS = {"IsBetween"}


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_every_algorithm_with_operators_has_its_evidence(name):
    factor = FACTORS[name]
    algorithms = {a for a, _ in factor.operators}
    for algorithm in algorithms:
        if algorithm == "vmp" and factor.deterministic and name not in TRUNCATIONS:
            assert "vmp" not in factor.evidence, "derived variables add no VMP evidence"
        else:
            assert algorithm in factor.evidence, (name, algorithm)


@pytest.mark.parametrize(("name", "algorithm", "target"), sorted(UNSUPPORTED))
def test_unsupported_pairs_are_left_for_the_compiler_to_report(name, algorithm, target):
    assert (algorithm, target) not in FACTORS[name].operators, UNSUPPORTED[name, algorithm,
                                                                           target]


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_evidence_of_known_arguments_is_the_log_density(name):
    factor = FACTORS[name]
    point = {k: np.asarray(v) for k, v in POINTS[name].items()}
    log_f = factor.log_density(**point)
    assert np.isfinite(log_f)
    for algorithm, fn in factor.evidence.items():
        assert_close(fn(**point), log_f, rtol=1e-12, atol=1e-12), (name, algorithm)


@pytest.mark.parametrize("name", ["And", "Or", "Not", "IsPositive", "IsBetween", "Greater",
                                  "Plus", "Minus", "ScaleBy", "Product", "ConstrainTrue",
                                  "InnerProduct", "MatrixVectorProduct", "VectorPlus"])
def test_deterministic_log_densities_reject_inconsistent_values(name):
    point = dict(POINTS[name])
    first = FACTORS[name].args[0].name
    value = point[first]
    point[first] = (not value) if isinstance(value, bool) else value + 1.0
    assert FACTORS[name].log_density(**{k: np.asarray(v) for k, v in point.items()}) == -np.inf


#: every operator with its annotations (Infer.NET's attributes, plus the Trigger that VMP
#: needs on the forward message of a derived variable, which Infer.NET adds itself)
ANNOTATIONS = """
And.a_average_conditional(out, b) skip_if_uniform=out
And.b_average_conditional(out, a) skip_if_uniform=out
And.out_average_conditional(a, b)
And.a_average_logarithm(out, b) skip_if_uniform=out
And.b_average_logarithm(out, a) skip_if_uniform=out
And.out_average_logarithm(a, b) trigger=a,b
Bernoulli.p_average_conditional(sample, p) skip_if_uniform=sample
Bernoulli.sample_average_conditional(p) skip_if_uniform=p
Bernoulli.p_average_logarithm(sample) uniform_penalty=sample
Bernoulli.sample_average_logarithm(p) skip_if_uniform=p
Beta.sample_average_conditional(alpha, beta) known=alpha,beta
Beta.sample_average_logarithm(alpha, beta) known=alpha,beta
Binomial.p_average_conditional(sample, trials) known=sample,trials
Binomial.p_average_logarithm(sample, trials) known=sample,trials
ConstrainTrue.value_average_conditional()
ConstrainTrue.value_average_logarithm()
Dirichlet.sample_average_conditional(alpha) known=alpha
Dirichlet.sample_average_logarithm(alpha) known=alpha
Discrete.probs_average_conditional(sample, probs) skip_if_uniform=sample no_init
Discrete.sample_average_conditional(probs) skip_if_uniform=probs
Discrete.probs_average_logarithm(sample, probs)
Discrete.sample_average_logarithm(probs) skip_if_uniform=probs
Gamma.rate_average_conditional(sample, shape) known=sample,shape
Gamma.sample_average_conditional(shape, rate) known=rate,shape
Gamma.rate_average_logarithm(sample, shape) proper=sample known=shape
Gamma.sample_average_logarithm(shape, rate) proper=rate known=shape
Gaussian.mean_average_conditional(sample, precision) skip_if_uniform=sample known=precision
Gaussian.sample_average_conditional(mean, precision) known=precision
Gaussian.mean_average_logarithm(sample, precision) proper=precision,sample
Gaussian.precision_average_logarithm(sample, mean) proper=mean,sample
Gaussian.sample_average_logarithm(mean, precision) proper=mean,precision
Greater.a_average_conditional(out, a, b, difference) skip_if_uniform=a,b,out fresh=difference
Greater.b_average_conditional(out, a, b, difference) skip_if_uniform=a,b,out fresh=difference
Greater.difference(out, a, b) skip_if_uniform=a,b,out proper=a,b
Greater.out_average_conditional(a, b) skip_if_uniform=a,b proper=a,b
Greater.out_average_logarithm(a, b) skip_if_uniform=a,b trigger=a,b
InnerProduct.a_average_conditional(product, b) skip_if_uniform=product known=b
InnerProduct.product_average_conditional(a, b) skip_if_uniform=a known=b
InnerProduct.a_average_logarithm(product, b) skip_if_uniform=product proper=b
InnerProduct.b_average_logarithm(product, a) skip_if_uniform=product proper=a
InnerProduct.product_average_logarithm(a, b) skip_if_uniform=a,b trigger=a,b
IsBetween.lower_average_conditional(out, x, lower, upper, messages) skip_if_uniform=out,x fresh=messages uniform_penalty=lower,upper
IsBetween.messages(out, x, lower, upper) skip_if_uniform=out,x
IsBetween.out_average_conditional(x, lower, upper) skip_if_uniform=x uniform_penalty=lower,upper
IsBetween.upper_average_conditional(out, x, lower, upper, messages) skip_if_uniform=out,x fresh=messages uniform_penalty=lower,upper
IsBetween.x_average_conditional(out, x, lower, upper, messages) skip_if_uniform=out,x fresh=messages uniform_penalty=lower,upper
IsBetween.out_average_logarithm(x, lower, upper, out) skip_if_uniform=x trigger=lower,upper,x
IsBetween.x_average_logarithm(out, x, lower, upper) skip_if_uniform=out known=lower,upper
IsPositive.out_average_conditional(x) skip_if_uniform=x proper=x
IsPositive.x_average_conditional(out, x) skip_if_uniform=out,x proper=x
IsPositive.out_average_logarithm(x) skip_if_uniform=x trigger=x
MatrixVectorProduct.product_average_conditional(matrix, vector) skip_if_uniform=vector known=matrix
MatrixVectorProduct.vector_average_conditional(product, matrix) skip_if_uniform=product known=matrix
MatrixVectorProduct.product_average_logarithm(matrix, vector) skip_if_uniform=vector trigger=vector known=matrix
MatrixVectorProduct.vector_average_logarithm(product, matrix) skip_if_uniform=product known=matrix
Minus.a_average_conditional(diff, b) skip_if_uniform=b,diff
Minus.b_average_conditional(diff, a) skip_if_uniform=a,diff
Minus.diff_average_conditional(a, b) skip_if_uniform=a,b
Minus.a_average_logarithm(diff, b) skip_if_uniform=diff proper=b,diff
Minus.b_average_logarithm(diff, a) skip_if_uniform=diff proper=a,diff
Minus.diff_average_logarithm(a, b) skip_if_uniform=a,b trigger=a,b
Not.a_average_conditional(out) skip_if_uniform=out
Not.out_average_conditional(a) skip_if_uniform=a
Not.a_average_logarithm(out) skip_if_uniform=out
Not.out_average_logarithm(a) skip_if_uniform=a trigger=a
Or.a_average_conditional(out, b) skip_if_uniform=out
Or.b_average_conditional(out, a) skip_if_uniform=out
Or.out_average_conditional(a, b)
Or.a_average_logarithm(out, b) skip_if_uniform=out
Or.b_average_logarithm(out, a) skip_if_uniform=out
Or.out_average_logarithm(a, b) trigger=a,b
Plus.a_average_conditional(sum, b) skip_if_uniform=b,sum
Plus.b_average_conditional(sum, a) skip_if_uniform=a,sum
Plus.sum_average_conditional(a, b) skip_if_uniform=a,b
Plus.a_average_logarithm(sum, b) skip_if_uniform=sum proper=b,sum
Plus.b_average_logarithm(sum, a) skip_if_uniform=sum proper=a,sum
Plus.sum_average_logarithm(a, b) skip_if_uniform=a,b trigger=a,b
Poisson.rate_average_conditional(sample) known=sample
Poisson.rate_average_logarithm(sample) known=sample
Product.a_average_logarithm(product, b) skip_if_uniform=product proper=b
Product.b_average_logarithm(product, a) skip_if_uniform=product proper=a
Product.product_average_logarithm(a, b) skip_if_uniform=a,b trigger=a,b
ScaleBy.a_average_conditional(product, scale) skip_if_uniform=product known=scale
ScaleBy.product_average_conditional(a, scale) skip_if_uniform=a known=scale
ScaleBy.a_average_logarithm(product, scale) skip_if_uniform=product known=scale
ScaleBy.product_average_logarithm(a, scale) skip_if_uniform=a trigger=a known=scale
VectorGaussian.mean_average_conditional(sample, precision) skip_if_uniform=sample known=precision
VectorGaussian.sample_average_conditional(mean, precision) known=precision
VectorGaussian.mean_average_logarithm(sample, precision) proper=precision,sample
VectorGaussian.precision_average_logarithm(sample, mean) proper=mean,sample
VectorGaussian.sample_average_logarithm(mean, precision) proper=mean,precision
VectorPlus.a_average_conditional(sum, b) skip_if_uniform=b,sum
VectorPlus.b_average_conditional(sum, a) skip_if_uniform=a,sum
VectorPlus.sum_average_conditional(a, b) skip_if_uniform=a,b
VectorPlus.a_average_logarithm(sum, b) skip_if_uniform=sum proper=b
VectorPlus.b_average_logarithm(sum, a) skip_if_uniform=sum proper=a
VectorPlus.sum_average_logarithm(a, b) skip_if_uniform=a,b trigger=a,b
Wishart.rate_average_conditional(sample, dof) known=dof,sample
Wishart.sample_average_conditional(dof, rate) known=dof,rate
Wishart.rate_average_logarithm(sample, dof) proper=sample known=dof
Wishart.sample_average_logarithm(dof, rate) proper=rate known=dof
"""


def _annotation_line(op) -> str:
    notes = [f"{a}={','.join(sorted(getattr(op, a)))}"
             for a in ("skip_if_uniform", "proper", "trigger", "fresh", "known",
                       "uniform_penalty")
             if getattr(op, a)]
    notes += ["no_init"] if op.no_init else []
    return f"{op.qualname}({', '.join(op.reads)}) {' '.join(notes)}".rstrip()


def test_annotation_table():
    lines = [_annotation_line(op) for name in sorted(CATALOGUE)
             for _, op in sorted(FACTORS[name].operators.items())]
    assert "\n".join(lines) == ANNOTATIONS.strip()


def _uniform_like(domain: str, value):
    if domain in ("vector", "posdef"):
        family = VectorGaussian if domain == "vector" else Wishart
        return family.uniform((), np.shape(value)[-1])
    family = {"real": Gaussian, "positive": Gamma, "unit": Beta, "bool": Bernoulli,
              "int": Discrete, "simplex": Dirichlet}[domain]
    if family is Discrete:
        return Discrete.uniform((), 3)
    if family is Dirichlet:
        return Dirichlet.uniform((), np.shape(value)[-1])
    return family.uniform(())


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_ep_evidence_with_a_uniform_message_is_a_number(name):
    """A uniform message is the weight 1: evidence terms stay finite (never NaN) when any
    argument that EP can treat as random sends one."""
    factor = FACTORS[name]
    if "ep" not in factor.evidence:
        return
    for target in {t for a, t in factor.operators if a == "ep" and t in factor.arg_names}:
        point = {k: np.asarray(v) for k, v in POINTS[name].items()}
        point[target] = _uniform_like(factor.arg(target).domain, point[target])
        value = factor.evidence["ep"](**point)
        assert not np.any(np.isnan(value)), (name, target, value)


#: messages that must be point masses (a truncation's boolean, set by ff.constrain_true)
POINT_MASSES = {("IsBetween", "vmp", "x"): ("out",)}


def _typical(domain: str, value):
    """A typical message of the domain's family (the known value where there is none)."""
    spd = np.array([[1.2, 0.3], [0.3, 0.8]])
    return {"real": lambda: Gaussian(0.3, 1.2), "positive": lambda: Gamma(2.0, 1.5),
            "vector": lambda: VectorGaussian(np.array([0.3, -0.5]), spd),
            "posdef": lambda: Wishart(3.5, spd),
            "unit": lambda: Beta(2.0, 3.0), "bool": lambda: Bernoulli(0.3),
            "int": lambda: Discrete(np.array([0.2, 0.3, 0.5])),
            "simplex": lambda: Dirichlet(np.array([1.5, 2.0, 0.8])),
            "count": lambda: value}[domain]()


def _batched(v, shape: tuple[int, ...], event: tuple[int, ...]):
    if hasattr(v, "eta"):
        return v.broadcast_to(shape)
    return np.broadcast_to(v, shape + event)


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_one_batched_argument_batches_the_message(name):
    """Every message and evidence term takes the broadcast plate shape of its arguments,
    with all natural parameters of one shape."""
    factor = FACTORS[name]
    for op in factor.operators.values():
        if op.buffer:  # an intermediate, which may carry axes of its own
            continue
        plain = [r for r in op.reads if r not in factor.buffers]
        for batched_arg in plain:
            args = {}
            for r in plain:
                known = np.asarray(POINTS[name][r])
                args[r] = known if r in op.known else _typical(factor.arg(r).domain, known)
                if r in POINT_MASSES.get((name, op.algorithm, op.target), ()):
                    args[r] = Bernoulli.from_natural(np.inf if known else -np.inf)
            event = np.shape(POINTS[name][batched_arg])   # K for vectors, () for scalars
            args[batched_arg] = _batched(args[batched_arg], (4,), event)
            msg = factor.message(op.algorithm, op.target)(**args)  # buffers computed first
            assert msg.batch_shape == (4,), (op.qualname, batched_arg)
            batches = {e.shape[: e.ndim - msg.event_ndim] for e in msg.eta}
            assert batches == {(4,)}, (op.qualname, batched_arg)


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_evidence_of_one_batched_argument_is_batched(name):
    factor = FACTORS[name]
    for fn in factor.evidence.values():
        for batched_arg in factor.arg_names:
            args = {k: np.asarray(v) for k, v in POINTS[name].items()}
            args[batched_arg] = _batched(args[batched_arg], (4,), np.shape(args[batched_arg]))
            assert np.shape(fn(**args)) == (4,), (name, batched_arg)
