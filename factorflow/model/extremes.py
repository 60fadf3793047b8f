"""``ff.max(a, b)`` and ``ff.min(a, b)``: the larger and the smaller of two real values.

Both are real variables defined by the Max factor (``factors.extremes``): ``ff.min(a, b)``
is written −max(−a, −b), which is exact under EP since negation is linear.  EP only.
"""

from __future__ import annotations

from typing import Any

from factorflow.errors import ModelError
from factorflow.model.core import Variable
from factorflow.model.factories import _derived, _is_random, _label, _shared_leaves, negate


def _check(name: str, a: Any, b: Any) -> None:
    if not (_is_random(a) or _is_random(b)):
        raise ModelError(f"ff.{name}({_label(a)}, {_label(b)}): neither argument is random; "
                         "compute it with NumPy.")
    if a is b or (_is_random(a) and _is_random(b) and _shared_leaves(a, b)):
        raise ModelError(f"ff.{name}({_label(a)}, {_label(b)}): both arguments depend on the "
                         "same random variable, but message passing treats them as "
                         "independent (the result would be silently wrong).")


def maximum(a: Any, b: Any) -> Variable:
    """The real variable max(a, b) of two real values (variables, expressions, constants;
    at least one random).  EP in closed form; VMP has no message through it.

    >>> with ff.Model() as model:
    ...     a, b = ff.Gaussian("a", 0.0, variance=1.0), ff.Gaussian("b", 0.0, variance=1.0)
    ...     big = ff.max(a, b)
    >>> round(float(model.infer("ep")[big.name].mean), 12)   # E[max] = 1/√π
    0.564189583548
    """
    _check("max", a, b)
    return _derived("Max", f"max({_label(a)}, {_label(b)})", "real", {"a": a, "b": b},
                    {"a": "real", "b": "real"})


def minimum(a: Any, b: Any) -> Variable:
    """The real variable min(a, b) = −max(−a, −b); see ``maximum`` for an example."""
    _check("min", a, b)
    neg_a = negate(a) if _is_random(a) else -a
    neg_b = negate(b) if _is_random(b) else -b
    return negate(maximum(neg_a, neg_b))


__all__ = ["maximum", "minimum"]
