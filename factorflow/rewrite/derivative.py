"""The derivative of a term with respect to one symbol, by the rules of calculus.

Used by the gradient fallback of ``@ff.factor`` (``factorflow.factors.gradient``): the
expected log factor's derivatives in a Gaussian's mean and variance are expectations of
the formula's first and second derivatives (Bonnet's and Price's theorems).  The result
is a term built with the canonical constructors (constants folded, sums and products
flattened), not simplified further: it is evaluated numerically.
"""

from __future__ import annotations

from factorflow.errors import ModelError
from factorflow.rewrite.terms import (
    CONST,
    DIGAMMA,
    EXP,
    LGAMMA,
    LOG,
    NEG,
    POW,
    PROD,
    SUM,
    SYM,
    Term,
    add,
    digamma,
    log,
    mul,
    neg,
    power,
)


def derivative(term: Term, name: str) -> Term:
    """d term / d name, for terms built of constants, data, symbols, + − × ÷, powers,
    log, exp and lgamma; ModelError naming the sub-term otherwise (digamma, a user
    function, an indexed vector)."""
    if name not in term.symbols:
        return Term(CONST, (), 0.0)
    op, args = term.op, term.args
    if op == SYM:
        return Term(CONST, (), 1.0)
    if op == SUM:
        return add(*(derivative(a, name) for a in args))
    if op == PROD:
        return add(*(mul(derivative(a, name), *args[:i], *args[i + 1:])
                     for i, a in enumerate(args) if name in a.symbols))
    if op == NEG:
        return neg(derivative(args[0], name))
    if op == POW:
        base, exponent = args
        if name not in exponent.symbols:
            return mul(exponent, power(base, add(exponent, -1.0)), derivative(base, name))
        return mul(term, add(mul(derivative(exponent, name), log(base)),
                             mul(exponent, derivative(base, name), power(base, -1.0))))
    if op == LOG:
        return mul(derivative(args[0], name), power(args[0], -1.0))
    if op == EXP:
        return mul(term, derivative(args[0], name))
    if op == LGAMMA:
        return mul(digamma(args[0]), derivative(args[0], name))
    what = "digamma" if op == DIGAMMA else op
    raise ModelError(f"cannot differentiate {term} in {name!r}: factorflow differentiates "
                     f"+ - * / **, log, exp and lgamma, not {what}.")


__all__ = ["derivative"]
