"""Link functions of real values: ``ff.logistic(x)``, ``ff.probit(x)``, ``ff.exp(x)``.

A link is not a variable: it is the parameter of an observation model, fused with it into
one non-conjugate factor (``factorflow.factors.links``), as Infer.NET's
``BernoulliFromLogOdds`` is one factor rather than a Bernoulli of a Logistic:

=================================  ===================================
``ff.Bernoulli(name, ff.logistic(x))``  BernoulliFromLogOdds(sample | x)
``ff.Bernoulli(name, ff.probit(x))``    BernoulliFromProbit(sample | x)
``ff.Poisson(name, ff.exp(x))``         PoissonFromLogRate(sample | x)
=================================  ===================================

``x`` is any real value a factory accepts: a variable, an expression such as
``w0 * x0 + w1 * x1`` or ``X @ w``, an indexed element, or a constant.  A link anywhere
else (another factory's parameter, arithmetic) raises ModelError saying where it fits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NoReturn

from factorflow.errors import ModelError

#: (family, link) -> (fused factor, the name of its real argument)
FUSED: dict[tuple[str, str], tuple[str, str]] = {
    ("Bernoulli", "logistic"): ("BernoulliFromLogOdds", "logodds"),
    ("Bernoulli", "probit"): ("BernoulliFromProbit", "x"),
    ("Poisson", "exp"): ("PoissonFromLogRate", "lograte"),
}
_WHERE = {link: family for family, link in FUSED}


@dataclass(frozen=True, eq=False)
class Link:
    """``function(arg)``, a link awaiting the factory that observes through it."""

    function: str
    arg: Any
    __array_ufunc__ = None  # a NumPy array on the left defers to the refusal below

    def __repr__(self) -> str:
        from factorflow.model.factories import _label
        return f"ff.{self.function}({_label(self.arg)})"

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


def observe_through(family: str, name: str, link: Link, observed: Any, domain: str) -> Any:
    """The variable ``name`` of ``family`` whose parameter is ``link``: the fused factor's
    statement, its real argument being the link's argument."""
    from factorflow.model.factories import new_variable
    if (family, link.function) not in FUSED:
        link.refuse(f"variable {name!r}")
    factor, arg = FUSED[(family, link.function)]
    return new_variable(factor, name, domain, {arg: link.arg}, {arg: "real"}, observed)


__all__ = ["Link", "logistic", "probit", "exp", "observe_through"]
