"""Link functions of real values: ``ff.logistic(x)``, ``ff.probit(x)``, ``ff.exp(x)``,
``ff.softmax(eta)``.

A link is not a variable: it is the parameter of an observation model, fused with it into
one non-conjugate factor (``factorflow.factors.links``), as Infer.NET's
``BernoulliFromLogOdds`` is one factor rather than a Bernoulli of a Logistic:

=================================  ===================================
``ff.Bernoulli(name, ff.logistic(x))``  BernoulliFromLogOdds(sample | x)
``ff.Bernoulli(name, ff.probit(x))``    BernoulliFromProbit(sample | x)
``ff.Poisson(name, ff.exp(x))``         PoissonFromLogRate(sample | x)
``ff.Discrete(name, ff.softmax(eta))``  DiscreteFromSoftmax(sample | eta)
``ff.Discrete(name, ff.softmax(e, k))`` DiscreteFromSoftmaxPlate(sample | e)
=================================  ===================================

``x`` is any real value a factory accepts: a variable, an expression such as
``w0 * x0 + w1 * x1`` or ``X @ w``, an indexed element, or a constant.  A link anywhere
else (another factory's parameter, arithmetic) raises ModelError saying where it fits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from factorflow.errors import ModelError

#: (family, link) -> (fused factor, the name of its real argument)
FUSED: dict[tuple[str, str], tuple[str, str]] = {
    ("Bernoulli", "logistic"): ("BernoulliFromLogOdds", "logodds"),
    ("Bernoulli", "probit"): ("BernoulliFromProbit", "x"),
    ("Poisson", "exp"): ("PoissonFromLogRate", "lograte"),
    ("Discrete", "softmax"): ("DiscreteFromSoftmax", "logits"),
}
_WHERE = {link: family for family, link in FUSED}


@dataclass(frozen=True, eq=False)
class Link:
    """``function(arg)``, a link awaiting the factory that observes through it."""

    function: str
    arg: Any
    #: the plate of K real values that ``ff.softmax(eta, over)`` normalises over, or None
    over: Any = None
    __array_ufunc__ = None  # a NumPy array on the left defers to the refusal below

    def __repr__(self) -> str:
        from factorflow.model.factories import _label
        over = f", {getattr(self.over, 'name', self.over)}" if self.over is not None else ""
        return f"ff.{self.function}({_label(self.arg)}{over})"

    def refuse(self, what: str) -> NoReturn:
        family = _WHERE[self.function]
        raise ModelError(
            f"{what}: {self!r} can only be the parameter of ff.{family} "
            f"(ff.{family}(name, {self!r}), a fused non-conjugate factor); it is not a "
            "variable, so it takes no part in arithmetic or other factors.")

    def _arith(self, *_: Any) -> NoReturn:
        self.refuse("arithmetic")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _arith
    __truediv__ = __rtruediv__ = __neg__ = __gt__ = __lt__ = __matmul__ = _arith
    __rmatmul__ = __and__ = __or__ = __invert__ = __pow__ = _arith


def logistic(x: Any) -> Link:
    """σ(x) = 1/(1 + e⁻ˣ) of a real value, for ``ff.Bernoulli(name, ff.logistic(x))``
    (logistic regression; EP by quadrature, VMP by the Jaakkola–Jordan bound).

    >>> with ff.Model() as model:
    ...     x = ff.Gaussian("x", 0.0, variance=1.0)
    ...     y = ff.Bernoulli("y", ff.logistic(x), observed=True)
    >>> round(model.infer("ep").log_evidence, 12)    # log E[σ(x)] = log 1/2 (symmetry)
    -0.69314718056
    """
    return Link("logistic", x)


def probit(x: Any) -> Link:
    """Φ(x), the standard normal CDF of a real value, for ``ff.Bernoulli(name,
    ff.probit(x))``: sample = (x + ε > 0), ε ~ N(0, 1) (EP in closed form; VMP by the
    probit augmentation).

    >>> with ff.Model() as model:
    ...     x = ff.Gaussian("x", 1.0, variance=3.0)
    ...     y = ff.Bernoulli("y", ff.probit(x))
    >>> round(float(model.infer("ep")["y"].p), 12)   # Φ(1 / √(1 + 3))
    0.691462461274
    """
    return Link("probit", x)


def exp(x: Any) -> Link:
    """eˣ of a real value, for ``ff.Poisson(name, ff.exp(x))`` (Poisson regression with a
    log link; EP by quadrature, VMP by non-conjugate VMP); ``ff.exp`` of a model value.

    >>> with ff.Model() as model:
    ...     x = ff.Gaussian("x", 0.0, variance=1.0)
    ...     y = ff.Poisson("y", ff.exp(x), observed=3)
    >>> round(model.infer("vmp").log_evidence, 6)    # max over N(m, v) of the exact ELBO
    -2.528147
    """
    return Link("exp", x)


def softmax(eta: Any, over: Any = None) -> Link:
    """softmax(η)_k = e^η_k / Σ_j e^η_j of K real values, for ``ff.Discrete(name,
    ff.softmax(eta))`` (multinomial regression; EP by quadrature for K ≤ 3, VMP by
    Böhning's bound): ``eta`` a K-vector (a VectorGaussian, ``B @ w``, a constant), or
    with ``over`` a real variable whose innermost plate is the ff.Range ``over`` of K
    categories, written where its other plates are open (its elements independent under
    both algorithms).

    >>> with ff.Model() as model:
    ...     eta = ff.VectorGaussian("eta", np.zeros(2), precision=np.eye(2))
    ...     y = ff.Discrete("y", ff.softmax(eta), observed=1)
    >>> round(model.infer("ep").log_evidence, 12)    # log E[softmax_1] = log 1/2 (symmetry)
    -0.69314718056
    """
    return Link("softmax", eta, over)


def _softmax_variable(name: str, link: Link, observed: Any) -> Any:
    """``ff.Discrete(name, ff.softmax(eta[, over]))``: the fused factor's statement."""
    from factorflow.model.checks import check_statement
    from factorflow.model.core import FactorCall, Range, Variable, _provenance, current_model
    from factorflow.model.factories import _observed, new_variable
    eta, over = link.arg, link.over
    what = f"variable {name!r}: {link!r}"
    if over is None:
        size = _vector_size(eta, what)
        return new_variable("DiscreteFromSoftmax", name, "int", {"logits": eta},
                            {"logits": "vector"}, observed, size=size)
    model = current_model(f"variable {name!r}")
    if not isinstance(over, Range):
        raise ModelError(f"{what}: the second argument must be the ff.Range of the K "
                         "categories (the innermost plate of the logits).")
    if not isinstance(eta, Variable) or eta.domain != "real" or eta.model is not model:
        raise ModelError(f"{what}: with a plate, the logits must be a real variable of this "
                         "model over that plate (write ff.softmax(eta) for a vector).")
    if not eta.plates or eta.plates[-1] is not over or model.plates != eta.plates[:-1]:
        raise ModelError(f"{what}: {over.name!r} must be the innermost plate of "
                         f"{eta.name!r} (plates {[p.name for p in eta.plates]}), and the "
                         "statement written where its other plates are open (open now: "
                         f"{[p.name for p in model.plates]}).")
    if model.gates:
        raise ModelError(f"{what}: a softmax over a plate inside a gate is not supported; "
                         "write it outside the gate.")
    if over.size < 2:
        raise ModelError(f"{what}: a softmax needs at least 2 categories; "
                         f"{over.name!r} has {over.size}.")
    prov = _provenance()
    var = model.add_variable(Variable(name, "int", model.plates, model,
                                      _observed(model, name, observed, "int", over.size),
                                      over.size, False, prov))
    call = FactorCall("DiscreteFromSoftmaxPlate", var, {"logits": eta}, model.plates, prov)
    check_statement(call, {})
    model.add_statement(call)
    return var


def _vector_size(eta: Any, what: str) -> int:
    """K of a vector of logits: a vector variable's dimension or a constant's last axis."""
    from factorflow.model.core import Variable
    if isinstance(eta, Variable):
        if eta.domain != "vector":
            raise ModelError(f"{what}: the logits must be a K-vector (ff.VectorGaussian, "
                             f"B @ w), but {eta.name!r} is {eta.domain}-valued; for a plate "
                             "of K real variables write ff.softmax(eta, k).")
        size = eta.size
    else:
        arr = np.asarray(eta, float) if not hasattr(eta, "model") else None
        if arr is None or arr.ndim == 0:
            raise ModelError(f"{what}: the logits must be a K-vector (ff.VectorGaussian, "
                             "B @ w, or a constant array with K last).")
        size = int(arr.shape[-1])
    if size < 2:
        raise ModelError(f"{what}: a softmax needs at least 2 categories, got {size}.")
    return size


def observe_through(family: str, name: str, link: Link, observed: Any, domain: str) -> Any:
    """The variable ``name`` of ``family`` whose parameter is ``link``: the fused factor's
    statement, its real argument being the link's argument."""
    from factorflow.model.factories import new_variable
    if (family, link.function) not in FUSED:
        link.refuse(f"variable {name!r}")
    if link.function == "softmax":
        return _softmax_variable(name, link, observed)
    factor, arg = FUSED[(family, link.function)]
    return new_variable(factor, name, domain, {arg: link.arg}, {arg: "real"}, observed)


__all__ = ["Link", "logistic", "probit", "exp", "softmax", "observe_through"]
