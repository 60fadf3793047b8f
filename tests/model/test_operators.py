"""Arithmetic that works like NumPy (issue 11 item 2; fuzz findings V5, V7, V17 of issue
10): ``-a``, ``a / c``, arrays on either side of ``*``, arithmetic on indexed elements
(``s[i] - s[j]``, ``w[0] * X``, ``c * x[prev]``), scalar constants broadcast over plates.

Every model here is linear-Gaussian, so its exact posterior is Gaussian conditioning:
``Affine`` below tracks each expression as (coefficients over the latent elements,
offset) per plate element, with NumPy only, and ``exact`` conditions the prior on the
observations.  EP is exact (means and variances) on trees and its means are exact on
loops; VMP's means are exact at its fixed point.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import factorflow as ff
from tests.conftest import assert_close

K, N = 3, 4  # elements of the indexed array x; elements of the observation plate n


# ----- the exact reference ------------------------------------------------------------
class Affine:
    """A linear function of the latent elements: ``coef @ z + offset`` per plate element
    (``coef``: plate shape + (L,)).  The operators mirror the model's, on plain NumPy."""

    __array_ufunc__ = None

    def __init__(self, coef: np.ndarray, offset: np.ndarray) -> None:
        self.coef, self.offset = np.asarray(coef, float), np.asarray(offset, float)

    @staticmethod
    def of(value) -> Affine:
        if isinstance(value, Affine):
            return value
        arr = np.asarray(value, float)
        return Affine(np.zeros(arr.shape + (0,)), arr)

    def _combine(self, other, sign: float) -> Affine:
        o = Affine.of(other)
        width = max(self.coef.shape[-1], o.coef.shape[-1])
        pad = lambda c: np.concatenate(  # noqa: E731
            [c, np.zeros(c.shape[:-1] + (width - c.shape[-1],))], axis=-1)
        return Affine(pad(self.coef) + sign * pad(o.coef), self.offset + sign * o.offset)

    def __add__(self, other):
        return self._combine(other, 1.0)

    __radd__ = __add__

    def __sub__(self, other):
        return self._combine(other, -1.0)

    def __rsub__(self, other):
        return Affine.of(other)._combine(self, -1.0)

    def __mul__(self, c):
        c = np.asarray(c, float)
        return Affine(self.coef * c[..., None], self.offset * c)

    __rmul__ = __mul__

    def __neg__(self):
        return self * -1.0

    def __truediv__(self, c):
        return self * (1.0 / np.asarray(c, float))

    def __getitem__(self, index):
        return Affine(self.coef[np.asarray(index)], self.offset[np.asarray(index)])


def latent(start: int, prior_shape: tuple[int, ...], width: int) -> Affine:
    """The latent elements ``start ..`` laid out over ``prior_shape``, as an Affine."""
    n = int(np.prod(prior_shape, dtype=int))
    coef = np.eye(width)[start:start + n].reshape(prior_shape + (width,))
    return Affine(coef, np.zeros(prior_shape))


def exact(prior_mean, prior_var, rows, offsets, observed, noise_prec):
    """Posterior (mean, covariance) of z ~ N(prior_mean, diag(prior_var)) given
    observed ~ N(rows @ z + offsets, diag(1 / noise_prec))."""
    precision = np.diag(1.0 / prior_var) + rows.T @ (noise_prec[:, None] * rows)
    cov = np.linalg.inv(precision)
    mean = cov @ (prior_mean / prior_var + rows.T @ (noise_prec * (observed - offsets)))
    return mean, cov


def run(model: ff.Model, algorithm: str) -> ff.Result:
    """Inference run to convergence (VMP's coordinate ascent is slow on strongly coupled
    Gaussians: thousands of sweeps at most)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ff.ConvergenceWarning)
        result = model.infer(algorithm, iterations=5000, tolerance=1e-12)
    assert result.converged, f"{algorithm} did not converge"
    return result


# ----- a latent scalar a and a latent array x[k]; observations of expressions ------------
PRIOR_MEAN = np.array([0.5, -1.0, 2.0, 0.3])  # a, x[0], x[1], x[2]
PRIOR_VAR = np.array([2.0, 1.5, 0.7, 3.0])


def is_forest(rows: np.ndarray) -> bool:
    """Whether the graph of latent elements and the observations reading them has no
    cycle (then EP's variances are exact too)."""
    parent = list(range(sum(rows.shape)))

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i
    for obs, z in zip(*np.nonzero(rows), strict=True):
        u, v = root(rows.shape[1] + obs), root(z)
        if u == v:
            return False
        parent[u] = v
    return True


def check(expressions, loopy_ep: bool = True):
    """Build the model whose observations are ``expressions`` (each a function of
    (a, x) returning the value observed, inside plate n or at the top level) and compare
    its posteriors with exact conditioning: means always, EP's variances on a forest.
    On a graph with loops EP may diverge (loopy Gaussian belief propagation needs a
    walk-summable model); ``loopy_ep=False`` runs it only on forests."""
    rng = np.random.default_rng(len(expressions))
    rows, offsets, observed, noise = [], [], [], []
    with ff.Model("operators") as model:
        a = ff.Gaussian("a", PRIOR_MEAN[0], variance=PRIOR_VAR[0])
        k = ff.Range("k", K)
        with ff.Plate(k):
            x = ff.Gaussian("x", PRIOR_MEAN[1:], variance=PRIOR_VAR[1:])
        n = ff.Range("n", N)
        for i, (in_plate, expression) in enumerate(expressions):
            y = rng.normal(size=(N,) if in_plate else ())
            prec = rng.uniform(0.5, 3.0)
            if in_plate:
                with ff.Plate(n):
                    ff.Gaussian(f"y{i}", expression(a, x), precision=prec, observed=y)
            else:
                ff.Gaussian(f"y{i}", expression(a, x), precision=prec, observed=y)
            form = expression(latent(0, (), 4), latent(1, (K,), 4))
            form = form + np.zeros(np.shape(y))  # broadcast over the plate
            rows.append(form.coef.reshape(-1, 4))
            offsets.append(np.ravel(form.offset))
            observed.append(np.ravel(y))
            noise.append(np.full(np.size(y), prec))
    rows = np.concatenate(rows)
    mean, cov = exact(PRIOR_MEAN, PRIOR_VAR, rows, np.concatenate(offsets),
                      np.concatenate(observed), np.concatenate(noise))
    for algorithm in ("ep", "vmp") if loopy_ep or is_forest(rows) else ("vmp",):
        result = run(model, algorithm)
        got = np.concatenate([[result["a"].mean], result["x"].mean])
        assert_close(got, mean, rtol=1e-8, atol=1e-9)
        if algorithm == "ep" and is_forest(rows):
            got = np.concatenate([[result["a"].variance], result["x"].variance])
            assert_close(got, np.diag(cov), rtol=1e-8, atol=1e-10)
    return model


X = np.array([[1.0, -2.0], [0.5, 3.0], [-1.5, 0.25], [2.0, 1.0]])  # N x 2 features
I = np.array([0, 2, 1, 0])
J = np.array([1, 0, 2, 2])  # never equal to I


@pytest.mark.parametrize("expression", [
    lambda a, x: -a,
    lambda a, x: a / 2,
    lambda a, x: a / np.array([2.0, -4.0, 0.5, 1.0]),
    lambda a, x: 1.5 - a,
    lambda a, x: a + 1.5,
    lambda a, x: X[:, 0] * a,                      # an array on the left of *
    lambda a, x: a * X[:, 1],
    lambda a, x: x[0] * X[:, 0],                   # w[0] * X: a scalar index over a plate
    lambda a, x: X[:, 1] * x[2] + 0.5,
    lambda a, x: x[I] - x[J],                      # s[i] - s[j]
    lambda a, x: 0.8 * x[I],                       # c * x[prev]
    lambda a, x: -(x[J] / 4.0) + 2.0,
], ids=["neg", "div", "div-array", "rsub-const", "add-const", "array-left", "array-right",
        "index0-times-X", "X-times-index-plus", "index-minus-index", "const-times-index",
        "neg-index-div"])
def test_one_operation_in_a_plate_is_exact(expression):
    check([(True, expression)])


@pytest.mark.parametrize("expression", [
    lambda a, x: -a,
    lambda a, x: a / 4.0,
    lambda a, x: x[1] - x[0],
    lambda a, x: 3.0 * x[2] - a,
], ids=["neg", "div", "index-minus-index", "mixed"])
def test_one_operation_at_the_top_level_is_exact(expression):
    check([(False, expression)])


def test_a_tree_of_operations_on_indexed_elements_is_exact():
    """Regression and chains: every operator in one model (it has loops: EP's means are
    exact, its variances approximate)."""
    check([(True, lambda a, x: X[:, 0] * x[0] + X[:, 1] * x[1] - a / 2),
           (True, lambda a, x: 0.8 * x[I] - x[J] + 1.0),
           (False, lambda a, x: -(x[2] / 3.0))])


# ----- random expressions --------------------------------------------------------------
CONSTS = st.sampled_from([0.5, -2.0, 3.0, 1.25])
ARRAYS = st.sampled_from([X[:, 0], X[:, 1], np.array([1.0, 2.0, -1.0, 0.5])])


def apply(op: str, v, c: float, arr: np.ndarray):
    """One NumPy-style operation on a model value (or an Affine)."""
    if op == "neg":
        return -v
    if op == "mul":
        return v * c
    if op == "rmul":
        return c * v
    if op == "div":
        return v / c
    if op == "add":
        return v + c
    if op == "rsub":
        return c - v
    return arr * v  # an array on the left


@st.composite
def expressions(draw):
    """An expression tree over a, x[I] and x[J] (each read at most once: a factor never
    sees one element twice) with +, -, unary -, * and / by constants (scalars or arrays
    over the plate, on either side)."""
    leaves = draw(st.lists(st.sampled_from(["a", "xi", "xj"]), min_size=1, max_size=3,
                           unique=True))
    steps = []
    for _ in range(len(leaves) - 1 + draw(st.integers(0, 3))):
        steps.append((draw(st.sampled_from(["neg", "mul", "rmul", "div", "add", "rsub",
                                            "arr-mul"])),
                      draw(CONSTS), draw(ARRAYS)))
    joins = [draw(st.sampled_from(["+", "-"])) for _ in leaves[1:]]

    def build(a, x):
        values = {"a": a, "xi": x[I], "xj": x[J]}
        terms = [values[leaf] for leaf in leaves]
        for t, (op, c, arr) in enumerate(steps):
            i = t % len(terms)
            terms[i] = apply(op, terms[i], c, arr)
        out = terms[0]
        for term, join in zip(terms[1:], joins, strict=True):
            out = out + term if join == "+" else out - term
        return out
    return build


@pytest.mark.slow
@settings(max_examples=12, deadline=None, derandomize=True)
@given(st.lists(expressions(), min_size=1, max_size=2))
def test_random_linear_expressions_are_exact(exprs):
    check([(True, e) for e in exprs], loopy_ep=False)


def test_a_fixed_point_reached_to_round_off_counts_as_converged():
    """Changes at the round-off floor wander up and down; they are not movement (the run
    used to spin to its sweep limit and warn)."""
    with ff.Model("floor") as model:
        a = ff.Gaussian("a", 0.5, variance=2.0)
        n = ff.Range("n", N)
        with ff.Plate(n):
            ff.Gaussian("y", a / np.array([2.0, -4.0, 0.5, 1.0]), precision=1.0,
                        observed=np.arange(4.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ff.ConvergenceWarning)
        result = model.infer("vmp", iterations=200)
    assert result.converged and result.iterations < 20


# ----- 2-D indices (V17) -------------------------------------------------------------------
def test_an_index_over_two_plates_is_exact():
    """y[p, q] ~ N(s[idx[p, q]], 1): s[k]'s posterior counts the cells that pick it."""
    idx = np.array([[0, 1, 2, 0], [2, 2, 1, 0]])
    y = np.arange(8.0).reshape(2, 4)
    with ff.Model("grid") as model:
        k = ff.Range("k", 3)
        with ff.Plate(k):
            s = ff.Gaussian("s", 0.0, precision=1.0)
        p, q = ff.Range("p", 2), ff.Range("q", 4)
        with ff.Plate(p), ff.Plate(q):
            ff.Gaussian("y", s[idx], precision=1.0, observed=y)
    count = np.bincount(idx.ravel(), minlength=3)
    total = np.bincount(idx.ravel(), y.ravel(), minlength=3)
    for algorithm in ("ep", "vmp"):
        post = model.infer(algorithm)["s"]
        assert_close(post.mean, total / (1 + count))
        assert_close(post.variance, 1 / (1 + count))


# ----- arrays on the left, NumPy scalars, labels -----------------------------------------
def test_numpy_values_on_the_left_build_one_factor():
    with ff.Model("left") as model:
        a = ff.Gaussian("a", 0.0, precision=1.0)
        n = ff.Range("n", N)
        with ff.Plate(n):
            b = X[:, 0] * a
            c = np.float64(2.0) * a
            d = np.array(3.0) - a
    assert [type(v) for v in (b, c, d)] == [ff.Variable] * 3
    assert [s.factor for s in model.statements[1:]] == ["ScaleBy", "ScaleBy", "Minus"]
    assert_close(model.statements[1].args["scale"], X[:, 0])


def test_negation_and_division_are_labelled_as_written():
    with ff.Model("labels"):
        a = ff.Gaussian("a", 0.0, precision=1.0)
        assert (-a).name == "(-a)"
        assert (a / 2).name == "(a / 2)"
        assert +a is a


# ----- refused ---------------------------------------------------------------------------
def _array_model():
    model = ff.Model("refused")
    with model:
        k = ff.Range("k", K)
        with ff.Plate(k):
            s = ff.Gaussian("s", 0.0, precision=1.0)
        n = ff.Range("n", N)
    return model, s, k, n


def test_two_reads_of_one_element_by_one_factor_are_refused_naming_it():
    model, s, k, n = _array_model()
    with model:
        with ff.Plate(k):
            r = ff.Gamma("r", 1.0, rate=1.0)
    with model, ff.Plate(n):
        s[I] - s[J]  # never the same element: fine
        with pytest.raises(ff.ModelError, match=r"s\[...\] and s\[...\] both read s\[0\] "
                           r"at element \(3,\) of the plates \['n'\]"):
            s[I] - s[np.array([1, 0, 2, 0])]
        with pytest.raises(ff.ModelError, match=r"both read s\[1\] at element \(0,\)"):
            (s[J] + 1.0) * 2.0 - s[np.ones(N, int)]  # through a sum and a scaling
        with pytest.raises(ff.ModelError, match=r"'r' is both argument 'shape' and argument "
                           r"'rate' of Gamma at element \(3,\) .* \(both are r\[0\]\)"):
            ff.Gamma("g", r[I], rate=r[np.array([1, 0, 2, 0])])  # not arithmetic
        with pytest.raises(ff.ModelError, match="constant"):
            s[I] - s[I]  # the same reads: collected, they cancel
    with model, ff.Plate(k):
        s[np.array([1, 2, 0])] - s  # s[k] against s[k+1]: fine
        with pytest.raises(ff.ModelError, match=r"s\[...\] and s both read s\[1\] at element "
                           r"\(1,\) of the plates \['k'\]"):
            s[np.array([2, 1, 0])] - s


def test_the_same_reads_twice_are_collected():
    """s[0] + s[0] is 2 s[0] (one edge), as x + x is 2 x: exact."""
    check([(True, lambda a, x: x[0] + x[0]), (False, lambda a, x: x[I[0]] * 3.0 - x[0])])


def _laid_out_model(inner, data: bool = False):
    """v = a - s[[0, 1]] written in Plate(p) (v[p] reads s[p]), then v - s[inner] with
    y ~ N(·, 1) inside Plate(p), Plate(q)."""
    y = np.array([[1.0, -0.5], [2.0, 0.25]])
    with ff.Model("laid_out") as model:
        with ff.Plate(ff.Range("r", 2)):
            s = ff.Gaussian("s", 0.0, precision=1.0)
        with ff.Plate(ff.Range("p", 2)):
            a = ff.Gaussian("a", 0.0, precision=1.0)
            v = a - s[ff.Data("i", np.array([0, 1])) if data else np.array([0, 1])]
            with ff.Plate(ff.Range("q", 2)):
                ff.Gaussian("y", v - s[np.array(inner)], precision=1.0, observed=y)
    return model, y


def test_a_sum_read_under_more_plates_reads_the_elements_it_was_written_for():
    """A sum written in Plate(p) and expanded inside Plate(p), Plate(q) keeps its index's
    axis p (NumPy broadcasting would align it with q): its reads are collected with reads
    of the same elements, refused with other reads of one element, and left apart
    elsewhere.  Each of the four was wrong before (fuzz, issue 10): collected by the
    q-aligned index (a silent wrong answer), refused though apart, or passed though
    meeting."""
    model, y = _laid_out_model([[0, 0], [1, 1]])  # v[p] - s[p] at every q: -2 s[p]
    rows = np.zeros((4, 4))  # (a0, a1, s0, s1) per observation y[p, q]
    for p_ in range(2):
        rows[2 * p_:2 * p_ + 2, p_] = 1.0
        rows[2 * p_:2 * p_ + 2, 2 + p_] = -2.0
    mean, cov = exact(np.zeros(4), np.ones(4), rows, np.zeros(4), y.ravel(), np.ones(4))
    for algorithm in ("ep", "vmp"):
        result = run(model, algorithm)
        assert_close(result["a"].mean, mean[:2], atol=1e-6)
        assert_close(result["s"].mean, mean[2:], atol=1e-6)
    with pytest.raises(ff.ModelError, match=r"both read s\[0\] at element \(0, 0\)"):
        _laid_out_model([[0, 1], [0, 1]])  # at (p, q) = (0, 0) both read s[0]
    with pytest.raises(ff.ModelError, match=r"both read s\[0\] at element \(0, 1\)"):
        _laid_out_model([[1, 0], [1, 0]])
    _laid_out_model([[1, 1], [0, 0]])  # v[p] reads s[p], the other s[1 - p]: apart
    with pytest.raises(ff.ModelError, match=r"through '\(a - s\[i\]\)', which reads an "
                       r"ff.Data .* Write the sum inside the plates \['p', 'q'\]"):
        _laid_out_model([[0, 0], [1, 1]], data=True)  # a Data's value is not moved


def test_two_reads_of_one_element_through_data_are_refused_at_run_time():
    model, s, k, n = _array_model()
    with model, ff.Plate(n):
        i, j = ff.Data("i", I), ff.Data("j", J)
        ff.Gaussian("y", s[i] - s[j], precision=1.0, observed=np.zeros(N))
    compiled = model.compile("ep")
    compiled.run(iterations=2)
    with pytest.raises(ff.DataError, match=r"'s' is both argument .*both are s\[2\]"):
        compiled.run(iterations=2, data={"j": np.array([1, 0, 2, 2]), "i": np.full(N, 2)})


@pytest.mark.parametrize("make, error, match", [
    (lambda a, s: a / s[0], ff.ModelError, r"\(a / s\[0\]\): dividing by the random"),
    (lambda a, s: a / a, ff.ModelError, "dividing by the random variable 'a'"),
    (lambda a, s: 2.0 / a, ff.ModelError, r"\(2.0 / a\): dividing by the random variable 'a'"),
    (lambda a, s: a / 0.0, ff.DataError, r"\(a / 0.0\): the divisor must be finite and "
     "non-zero, got 0.0"),
    (lambda a, s: a / np.array([1.0, np.inf, 1.0, 1.0]), ff.DataError, "got inf"),
    (lambda a, s: a / ff.Data("c", 2.0), ff.ModelError, "dividing by the ff.Data 'c'"),
    (lambda a, s: a / "2", ff.DataError, "expected real numbers"),
    (lambda a, s: X * a, ff.DataError, r"shape \(4, 2\) does not match the plates"),
    (lambda a, s: bool(s[0]), ff.ModelError, r"s\[...\] is random"),
    (lambda a, s: -s[0] > s[0], ff.ModelError, None),  # fine: two variables
], ids=["by-indexed", "by-itself", "const-by-var", "by-zero", "by-inf", "by-data",
        "by-string", "array-shape", "bool", "compare-indexed"])
def test_bad_arithmetic_is_refused_by_name(make, error, match):
    model, s, k, n = _array_model()
    with model, ff.Plate(n):
        a = ff.Gaussian("a", 0.0, precision=1.0)
        if match is None:
            assert isinstance(make(a, s), ff.Variable)
            return
        with pytest.raises(error, match=match):
            make(a, s)
