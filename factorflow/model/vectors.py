"""Factories of vector and matrix variables: ``ff.VectorGaussian``, ``ff.Wishart`` and the
inner product ``ff.inner(a, b)`` (``a @ b``).

A vector variable has an event of D components (``Variable.size`` = D) on top of its
plates; a matrix variable D × D.  Known vectors and matrices are arrays whose last axes
are the event (one per plate element, or one for all).  Every factory checks that the
dimensions of its arguments agree, naming both shapes and the variables, and refuses a
matrix parameter that is not positive definite with its smallest eigenvalue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from factorflow.distributions.multivariate import check_positive_definite, inverse
from factorflow.errors import ModelError
from factorflow.model.checks import broadcasts_to, numeric_array
from factorflow.model.core import Data, Indexed, Variable, current_model
from factorflow.model.factories import _derived, _label, _one_of, new_variable
from factorflow.model.links import Link


@dataclass(frozen=True, eq=False)
class LinearMean(Link):
    """``B @ z + a`` with a known M × D matrix B whose product B z has no proper Gaussian
    (M > D, or dependent rows): not a variable, but the mean of ``ff.VectorGaussian``,
    fused with it into one LinearVectorGaussian factor (``factors.linear_gaussian``).
    ``arg`` is z; ``offset`` the known a (None for 0)."""

    matrix: Any = None
    offset: Any = None
    label: str = ""

    def __repr__(self) -> str:
        return self.label

    def refuse(self, what: str) -> NoReturn:
        rows, dim = np.shape(self.matrix)[-2:]
        raise ModelError(
            f"{what}: {self.label} has a matrix of shape {np.shape(self.matrix)} (M = {rows} "
            f"rows, D = {dim} columns, {'M > D' if rows > dim else 'dependent rows'}), so "
            "B z is a degenerate Gaussian and not a variable; it can only be the mean of "
            f"ff.VectorGaussian (ff.VectorGaussian(name, {self.label} [+ a known vector], "
            "precision=...)), or be written row by row: inside ff.Plate over the M rows, "
            "B @ z is one inner product per row.")

    def _shifted(self, other: Any, sign: float, first: bool) -> LinearMean:
        """``self ± other`` (``first``) or ``other ± self`` with ``other`` known."""
        rows = np.shape(self.matrix)[-2]
        op = "+" if sign > 0 else "-"
        label = f"({self.label} {op} {_label(other)})" if first else \
            f"({_label(other)} {op} {self.label})"
        if isinstance(other, Variable | Indexed | Data):
            raise ModelError(f"{label}: {self.label} (a matrix of shape "
                             f"{np.shape(self.matrix)}, M > D or dependent rows) can only "
                             "be shifted by a known vector; give the random vector its own "
                             "factor, or write B @ z row by row.")
        a = numeric_array(other, f"{label}: offset").astype(float)
        if a.ndim and a.shape[-1] not in (1, rows):
            raise ModelError(f"{label}: dimension mismatch: {self.label} is an M-vector "
                             f"(M = {rows}) but the offset has shape {a.shape}.")
        old = 0.0 if self.offset is None else self.offset
        matrix = self.matrix if first or sign > 0 else -self.matrix
        offset = old + sign * a if first else a + (old if sign > 0 else -old)
        return LinearMean("linear", self.arg, None, matrix, offset, label)

    def __add__(self, other: Any) -> LinearMean:
        return self._shifted(other, 1.0, True)

    def __radd__(self, other: Any) -> LinearMean:
        return self._shifted(other, 1.0, False)

    def __sub__(self, other: Any) -> LinearMean:
        return self._shifted(other, -1.0, True)

    def __rsub__(self, other: Any) -> LinearMean:
        return self._shifted(other, -1.0, False)


def _describe(value: Any, dim: int, domain: str) -> str:
    """How an argument is named in an error: the variable or Data with its shape (per
    plate element), or the constant's shape."""
    event = (dim,) if domain == "vector" else (dim, dim)
    if isinstance(value, Variable):
        return f"variable {value.name!r} of shape {event}"
    if isinstance(value, Indexed):
        return f"{value.base.name}[...] of shape {event}"
    if isinstance(value, Data):
        return f"ff.Data({value.name!r}) of shape {np.shape(value.value)}"
    return f"a constant of shape {np.shape(value)}"


def _dimension(name: str, arg: str, value: Any, domain: str) -> int | None:
    """D of a vector (``domain`` "vector") or matrix ("posdef") argument; None for a scalar
    constant (it broadcasts) or an ff.Data without a value yet."""
    base = value.base if isinstance(value, Indexed) else value
    if isinstance(base, Variable):
        if base.domain != domain:
            kind = "vector" if domain == "vector" else "positive-definite matrix"
            raise ModelError(f"{name}: argument {arg!r} must be a {kind}, but variable "
                             f"{base.name!r} is {base.domain}-valued.")
        return base.size
    if isinstance(base, Data):
        if base.value is None:
            return None
        value = base.value
    arr = numeric_array(value, f"variable {name!r}, argument {arg!r}")
    if arr.ndim == 0:
        return None
    if domain == "posdef" and (arr.ndim < 2 or arr.shape[-1] != arr.shape[-2]):
        raise ModelError(f"{name}: argument {arg!r} must be a square D × D matrix (one per "
                         f"plate element, or one for all), got shape {arr.shape}.")
    return int(arr.shape[-1])


def _common_dimension(name: str, args: dict[str, tuple[Any, str]]) -> int:
    """The D that all ``args`` (arg name -> (value, domain)) share; ModelError naming the
    two that disagree, with their shapes, or asking for one that fixes D."""
    seen: list[tuple[str, str, int]] = []
    for arg, (value, domain) in args.items():
        d = _dimension(name, arg, value, domain)
        if d is None:
            continue
        for other, other_text, other_d in seen:
            if other_d != d:
                raise ModelError(
                    f"{name}: dimension mismatch: {other!r} is {other_text} (D = {other_d}), "
                    f"but {arg!r} is {_describe(value, d, domain)} (D = {d}); give "
                    "arguments of one dimension D.")
        seen.append((arg, _describe(value, d, domain), d))
    if not seen:
        raise ModelError(f"{name}: cannot tell the dimension D; give a vector or matrix "
                         "argument (not only scalars).")
    return seen[0][2]


def _vector_constant(value: Any, dim: int) -> Any:
    """A scalar constant as a D-vector (``VectorGaussian(name, 0.0, ...)``); other
    arguments as they are."""
    if isinstance(value, Variable | Indexed | Data):
        return value
    arr = np.asarray(value)
    return np.full(dim, float(arr)) if arr.ndim == 0 and arr.dtype.kind in "biuf" else value


def _constant_matrix(name: str, what: str, value: Any) -> np.ndarray:
    if isinstance(value, Variable | Indexed | Data):
        raise ModelError(f"{name}: a random {what} is not supported; give the precision "
                         "(or rate) a Wishart prior instead.")
    return check_positive_definite(numeric_array(value, f"{name}: {what}"), f"{name}: {what}")


def VectorGaussian(name: str, mean: Any = 0.0, *, precision: Any = None,
                   covariance: Any = None, observed: Any = None) -> Variable:
    """A D-vector variable ~ N(mean, precision⁻¹).

    ``mean``: a D-vector (constant, per plate element, or a VectorGaussian variable) or a
    scalar constant (the same in every component); ``precision``: a positive-definite
    D × D matrix (constant or a Wishart variable), or ``covariance=`` (a constant).

    ``precision`` may also be a plate of D positive variables (Gamma) over an ``ff.Range``
    that is not open here: the diagonal precision diag(alpha), alpha's plate the vector's
    D components (automatic relevance determination, BayesPy's ``GaussianARD(mean,
    alpha, shape=(D,))``; VMP only): ``with ff.Plate(k): alpha = ff.Gamma(...)`` then
    ``ff.VectorGaussian("W", 0.0, precision=alpha)`` inside other plates.

    One observation x ~ N(w, I) of a w ~ N(0, I): the posterior is N(x / 2, I / 2):

    >>> with ff.Model() as model:
    ...     w = ff.VectorGaussian("w", 0.0, precision=np.eye(2))
    ...     x = ff.VectorGaussian("x", w, precision=np.eye(2), observed=[2.0, -4.0])
    >>> posterior = model.infer("ep")["w"]
    >>> posterior.mean, posterior.covariance
    (array([ 1., -2.]), array([[0.5, 0. ],
           [0. , 0.5]]))
    """
    key, value = _one_of(name, "spread", precision=precision, covariance=covariance)
    if key == "precision" and _is_ard(value):
        return _ard_vector_gaussian(name, mean, value, observed)
    prec = inverse(_constant_matrix(name, "covariance", value)) if key == "covariance" \
        else value
    if isinstance(mean, LinearMean):
        return _linear_vector_gaussian(name, mean, key, value, prec, observed)
    dim = _common_dimension(name, {"mean": (mean, "vector"), key: (value, "posdef")})
    return new_variable("VectorGaussian", name, "vector",
                        {"mean": _vector_constant(mean, dim), "precision": prec},
                        {"mean": "vector", "precision": "posdef"}, observed, size=dim)


def _is_ard(value: Any) -> bool:
    """Whether a precision is a plate of positive variables (ARD), not a matrix."""
    return isinstance(value, Variable) and value.domain == "positive"


def _ard_vector_gaussian(name: str, mean: Any, alpha: Variable, observed: Any) -> Variable:
    """``ff.VectorGaussian(name, mean, precision=alpha)`` with alpha a plate of D positive
    variables: one VectorGaussianARD statement reading alpha's plate as the event axis
    (``factors.vector_gaussian``).  ModelError naming alpha, its plates and the mean
    where they do not fit."""
    from factorflow.model.checks import check_statement
    from factorflow.model.core import FactorCall, _provenance
    from factorflow.model.factories import _observed, _operand
    model = current_model(f"variable {name!r}")
    what = f"variable {name!r}: precision={alpha.name!r} (a diagonal precision, ARD)"
    if alpha.model is not model:
        raise ModelError(f"{what}: variable {alpha.name!r} belongs to another model.")
    open_now = model.plates
    if not alpha.plates or alpha.plates[-1] in open_now or any(
            p not in open_now for p in alpha.plates[:-1]):
        raise ModelError(
            f"{what}: a positive variable as the precision of a vector is its diagonal, one "
            "element per component, so it must be over a plate of D elements that is not "
            f"open here (its innermost), its other plates open; {alpha.name!r} has plates "
            f"{[p.name for p in alpha.plates]} and the plates open here are "
            f"{[p.name for p in open_now]}.")
    if model.gates:
        raise ModelError(f"{what}: a diagonal precision from a plate inside a gate is not "
                         "supported; write it outside the gate.")
    dim = alpha.plates[-1].size
    given = _dimension(name, "mean", mean, "vector")
    if given is not None and given != dim:
        shown = _describe(mean, given, "vector")
        raise ModelError(f"{name}: dimension mismatch: 'mean' is {shown} "
                         f"(D = {given}), but the precision {alpha.name!r} is over plate "
                         f"{alpha.plates[-1].name!r} of {dim} elements (D = {dim}).")
    if dim < 1:
        raise ModelError(f"{what}: plate {alpha.plates[-1].name!r} is empty; a vector needs "
                         "at least one component.")
    mean = _operand(model, _vector_constant(mean, dim), "vector",
                    f"variable {name!r}, argument 'mean'", dim)
    prov = _provenance()
    var = model.add_variable(Variable(name, "vector", open_now, model,
                                      _observed(model, name, observed, "vector", dim), dim,
                                      False, prov))
    call = FactorCall("VectorGaussianARD", var, {"mean": mean, "precision": alpha},
                      open_now, prov)
    check_statement(call, {})
    model.add_statement(call)
    return var


def _linear_vector_gaussian(name: str, mean: LinearMean, key: str, value: Any, prec: Any,
                            observed: Any) -> Variable:
    """``ff.VectorGaussian(name, B @ z + a, precision=Λ)`` as one LinearVectorGaussian."""
    rows = int(np.shape(mean.matrix)[-2])
    spread = _dimension(name, key, value, "posdef")
    if spread is not None and spread != rows:
        raise ModelError(f"{name}: dimension mismatch: the mean {mean.label} is an M-vector "
                         f"(matrix of shape {np.shape(mean.matrix)}, M = {rows}), but "
                         f"{key!r} is {_describe(value, spread, 'posdef')} (D = {spread}); "
                         f"give an M × M {key}.")
    offset = np.zeros(rows) if mean.offset is None else np.asarray(mean.offset, float)
    if offset.ndim == 0 or offset.shape[-1] != rows:
        offset = np.broadcast_to(offset, offset.shape[:-1] + (rows,) if offset.ndim
                                 else (rows,))
    return new_variable("LinearVectorGaussian", name, "vector",
                        {"matrix": mean.matrix, "vector": mean.arg, "offset": offset,
                         "precision": prec},
                        {"matrix": "matrix", "vector": "vector", "offset": "vector",
                         "precision": "posdef"}, observed, size=rows)


def Wishart(name: str, dof: Any, *, rate: Any = None, scale: Any = None,
            observed: Any = None) -> Variable:
    """A D × D positive-definite variable ~ Wishart(dof, rate):
    p(Λ) ∝ |Λ|^((dof − D − 1)/2) exp(−tr(rate Λ)/2), E[Λ] = dof · rate⁻¹.

    ``dof``: a constant above D − 1; ``rate``: a positive-definite matrix (constant or a
    Wishart variable), or ``scale=`` its inverse (a constant, SciPy's ``scale``).

    The precision of zero-mean vectors: conjugate, the posterior is Wishart(dof + N,
    rate + Σ x xᵀ):

    >>> xs = np.array([[1.0, 0.5], [-0.5, 2.0], [0.0, -1.0]])
    >>> with ff.Model() as model:
    ...     prec = ff.Wishart("prec", 3.0, rate=np.eye(2))
    ...     with ff.Plate(ff.Range("n", 3)):
    ...         x = ff.VectorGaussian("x", 0.0, precision=prec, observed=xs)
    >>> posterior = model.infer("vmp")["prec"]
    >>> float(posterior.dof), bool(np.allclose(posterior.rate, np.eye(2) + xs.T @ xs))
    (6.0, True)
    """
    key, value = _one_of(name, "rate", rate=rate, scale=scale)
    r = inverse(_constant_matrix(name, "scale", value)) if key == "scale" else value
    dim = _common_dimension(name, {key: (value, "posdef")})
    if isinstance(dof, Variable | Indexed | Data):
        raise ModelError(f"{name}: the degrees of freedom must be a constant.")
    nu = numeric_array(dof, f"variable {name!r}, argument 'dof'")
    if np.any(nu <= dim - 1):
        raise ModelError(f"{name}: the degrees of freedom must exceed D − 1 = {dim - 1}, "
                         f"got {float(np.min(nu))!r}.")
    return new_variable("Wishart", name, "posdef", {"dof": nu.astype(float), "rate": r},
                        {"dof": "positive", "rate": "posdef"}, observed, size=dim)


def _is_random(v: Any) -> bool:
    return isinstance(v, Variable | Indexed) and not (isinstance(v, Variable)
                                                      and v.is_observed)


def inner(a: Any, b: Any) -> Variable:
    """The real variable aᵀ b of two D-vectors (``a @ b``): a vector variable with a
    constant vector, a known vector per plate element (a design-matrix row), or — under
    VMP — another vector variable.

    Bayesian linear regression, y ~ N(w·x, 1) with w ~ N(0, I): the posterior of w has
    precision I + XᵀX and mean (I + XᵀX)⁻¹ Xᵀ y:

    >>> X = np.array([[1.0, 0.0], [1.0, 1.0], [1.0, 2.0]])
    >>> y = np.array([1.0, 2.0, 2.5])
    >>> with ff.Model() as model:
    ...     w = ff.VectorGaussian("w", 0.0, precision=np.eye(2))
    ...     with ff.Plate(ff.Range("n", 3)):
    ...         obs = ff.Gaussian("y", ff.inner(w, X), variance=1.0, observed=y)
    >>> posterior = model.infer("ep")["w"]
    >>> exact = np.linalg.solve(np.eye(2) + X.T @ X, X.T @ y)
    >>> bool(np.allclose(posterior.mean, exact)), bool(np.allclose(posterior.precision,
    ...                                                            np.eye(2) + X.T @ X))
    (True, True)
    """
    current_model("ff.inner")
    if not _is_random(a):
        a, b = b, a
    if not _is_random(a):
        raise ModelError(f"ff.inner({_label(a)}, {_label(b)}): neither argument is random; "
                         "compute the inner product with NumPy.")
    if a is b:
        raise ModelError(f"ff.inner: the random variable {_label(a)!r} is both arguments "
                         "(a squared norm is not an inner product of independent vectors).")
    label = f"({_label(a)} @ {_label(b)})"
    dim = _common_dimension(label, {"a": (a, "vector"), "b": (b, "vector")})
    return _derived("InnerProduct", label, "real", {"a": a, "b": b},
                    {"a": "vector", "b": "vector"}, arg_size=dim)


def component(v: Variable, index: int) -> Variable:
    """The real variable ``v[index]``: component ``index`` of the vector variable ``v``
    (one without plates), the inner product of v with the unit vector e_index, so it
    has every operator ``inner`` has (EP and VMP).  A negative index counts from the end,
    as in NumPy; one outside the vector is refused by name.

    >>> with ff.Model() as model:
    ...     w = ff.VectorGaussian("w", np.array([1.0, 2.0]), precision=np.eye(2))
    ...     intercept = w[0]
    >>> intercept.name, model.infer("ep")["w[0]"]
    ('w[0]', Gaussian(mean=1.0, variance=1.0))
    """
    dim = int(v.size)
    if not -dim <= index < dim:
        raise ModelError(f"{v.name}[{index}]: {v.name!r} is a vector of {dim} components "
                         f"(0 to {dim - 1}); index {index} is outside it.")
    index %= dim
    unit = np.zeros(dim)
    unit[index] = 1.0
    return _derived("InnerProduct", f"{v.name}[{index}]", "real", {"a": v, "b": unit},
                    {"a": "vector", "b": "vector"}, arg_size=dim)


def _known_matrix(v: Any, plates: tuple[int, ...], dim: int | None) -> bool:
    """Whether ``v`` is a known matrix of ``B @ z``: an array whose last axis is D and whose
    other axes are not one row per plate element (that is ``inner``'s design matrix)."""
    if isinstance(v, Variable | Indexed | Data) or dim is None:
        return False
    arr = np.asarray(v)
    return (arr.ndim >= 2 and arr.dtype.kind in "biuf" and arr.shape[-1] == dim
            and not broadcasts_to(arr.shape, plates + (dim,)))


def _vector_dim(v: Any) -> int | None:
    base = v.base if isinstance(v, Indexed) else v
    return base.size if isinstance(base, Variable) and base.domain == "vector" else None


def matmul(left: Any, right: Any) -> Variable | LinearMean:
    """``left @ right`` on model values: ``B @ z`` (a known matrix and a vector variable,
    ``matvec``), ``z @ B`` (= Bᵀ z), otherwise the inner product ``inner``."""
    plates = tuple(r.size for r in current_model("@").plates)
    if _known_matrix(left, plates, _vector_dim(right)):
        return matvec(left, right)
    if (not isinstance(right, Variable | Indexed | Data) and np.ndim(right) >= 2
            and _known_matrix(np.swapaxes(right, -1, -2), plates, _vector_dim(left))):
        return matvec(np.swapaxes(np.asarray(right), -1, -2), left)
    return inner(left, right)


def matvec(matrix: Any, vector: Any) -> Variable | LinearMean:
    """The M-vector variable ``B @ z`` of a known M × D matrix B (one for all, or one per
    plate element: shape plates + (M, D)) and a D-vector variable z.

    With full row rank and M ≤ D the product is a variable (its distribution a proper
    VectorGaussian).  Otherwise (M > D, or dependent rows) B z has no proper Gaussian and
    the result is a ``LinearMean``: it can be shifted by a known vector and be the mean of
    ``ff.VectorGaussian(name, B @ z + a, precision=Λ)``, which becomes one fused
    LinearVectorGaussian factor (exact under EP and VMP); any other use is refused by
    name.  A random matrix is written as its rows, a VectorGaussian over a plate, with
    ``W @ z`` inside that plate (one inner product per row).

    One observation y ~ N(B z, I) of z ~ N(0, I): the posterior of z has precision
    I + BᵀB and mean (I + BᵀB)⁻¹ Bᵀ y:

    >>> B = np.array([[1.0, 2.0, 0.0], [0.0, 1.0, -1.0]])
    >>> with ff.Model() as model:
    ...     z = ff.VectorGaussian("z", 0.0, precision=np.eye(3))
    ...     y = ff.VectorGaussian("y", ff.matvec(B, z), precision=np.eye(2),
    ...                           observed=[1.0, 3.0])
    >>> posterior = model.infer("ep")["z"]
    >>> exact = np.linalg.solve(np.eye(3) + B.T @ B, B.T @ [1.0, 3.0])
    >>> bool(np.allclose(posterior.mean, exact))
    True
    """
    model = current_model("B @ z")
    from factorflow.model import vector_chains
    if vector_chains.is_vector_chain_term(vector):  # A @ x[t - 1] in a chain's step
        return vector_chains.matmul(matrix, vector)
    label = f"({_label(matrix)} @ {_label(vector)})"
    if isinstance(matrix, Variable | Indexed | Data):
        raise ModelError(f"{label}: the matrix must be a known array; write a random matrix "
                         "as its rows, a VectorGaussian over a plate of rows, and use W @ z "
                         "inside that plate (one inner product per row).")
    dim = _vector_dim(vector)
    if dim is None:
        raise ModelError(f"{label}: B @ z needs a vector variable z on the right, got "
                         f"{_label(vector)!r}.")
    b = numeric_array(matrix, f"{label}: matrix").astype(float)
    if not np.all(np.isfinite(b)):
        raise ModelError(f"{label}: the matrix contains NaN or inf; give a finite matrix.")
    shape = tuple(r.size for r in model.plates)
    if b.ndim < 2 or b.shape[-1] != dim:
        raise ModelError(f"{label}: dimension mismatch: the matrix has shape {b.shape} but "
                         f"{_label(vector)!r} is a vector of shape ({dim},); B needs shape "
                         f"(M, {dim}).")
    if not broadcasts_to(b.shape[:-2], shape):
        raise ModelError(f"{label}: the matrix has shape {b.shape}, whose leading axes "
                         f"{b.shape[:-2]} do not match the plates "
                         f"{[r.name for r in model.plates]} (shape {shape}); give one "
                         "M × D matrix, or one per plate element.")
    rows = b.shape[-2]
    rank = np.min(np.linalg.matrix_rank(b)) if b.size else rows
    if rows > dim or rank < rows:  # B z has no proper Gaussian: the fused factor's mean
        return LinearMean("linear", vector, None, b, None, label)
    return _derived("MatrixVectorProduct", label, "vector", {"matrix": b, "vector": vector},
                    {"matrix": "matrix", "vector": "vector"}, arg_size=dim, size=rows)


def vector_sum(a: Any, b: Any, sign: float) -> Variable:
    """``a + b`` (``sign`` 1) or ``a − b`` (−1) of D-vectors, one of them a vector
    variable; the other a vector variable, a known D-vector (or one per plate element)
    or a scalar constant (the same in every component).  A random subtrahend is
    ``(−I) @ b``."""
    current_model("vector +")
    if isinstance(b, LinearMean):
        return b._shifted(a, sign, False)  # type: ignore[return-value]
    if isinstance(a, LinearMean):
        return a._shifted(b, sign, True)  # type: ignore[return-value]
    op = "+" if sign > 0 else "-"
    label = f"({_label(a)} {op} {_label(b)})"
    dim = _common_dimension(label, {"a": (a, "vector"), "b": (b, "vector")})
    a, b = _vector_constant(a, dim), _vector_constant(b, dim)
    if sign < 0:
        if _is_random(a) and a is b:
            raise ModelError(f"{label} is the constant 0, not a random variable.")
        b = matvec(-np.eye(dim), b) if _is_random(b) else -numeric_array(b, label)
    elif _is_random(a) and a is b:
        return matvec(2.0 * np.eye(dim), a)
    if not _is_random(a) and not _is_random(b):
        raise ModelError(f"{label}: neither side is random; compute it with NumPy.")
    return _derived("VectorPlus", label, "vector", {"a": a, "b": b},
                    {"a": "vector", "b": "vector"}, size=dim)


__all__ = ["VectorGaussian", "Wishart", "inner", "matmul", "matvec", "vector_sum"]
