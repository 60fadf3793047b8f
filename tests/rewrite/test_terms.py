"""Terms: interning, canonical forms, builders, derived fields and the printer."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from factorflow.rewrite.printing import show
from factorflow.rewrite.terms import (
    PROD,
    SUM,
    E,
    Elog,
    NameVar,
    Term,
    V,
    at,
    const,
    data,
    dot,
    exp,
    index_sum,
    interned_count,
    lgamma,
    log,
    matmul,
    sym,
    var,
)

x, y, mu, tau = sym("x"), sym("y"), sym("mu"), sym("tau")


def test_structurally_equal_terms_are_identical():
    assert log(x + y) is log(y + x)
    assert sym("x", "i") is sym("x", "i")
    assert sym("x", "i") is not sym("x")
    assert const(2) is const(2.0)
    assert const(-0.0) is const(0.0)
    assert hash(log(x)) == hash(log(x))


def test_interning_cache_is_weak():
    t = log(exp(sym("ephemeral") * 3.5))
    ref = weakref.ref(t)
    gc.collect()
    before = interned_count()
    del t
    gc.collect()
    assert ref() is None
    assert interned_count() == before - 5   # log, exp, prod, the symbol, 3.5
    assert log(exp(sym("ephemeral") * 3.5)).size == 5


def test_sums_and_products_are_commutative_not_associative():
    assert Term(SUM, (x, y)) is Term(SUM, (y, x))
    nested = Term(SUM, (Term(SUM, (x, x)), x))
    assert nested is not Term(SUM, (x, x, x))
    assert Term(SUM, (x,)) is x
    assert Term(SUM, ()) is const(0)
    assert Term(PROD, ()) is const(1)


def test_operators_flatten_and_fold_constants():
    assert (x + y) + (mu + 2) + 3 is Term(SUM, (x, y, mu, const(5)))
    assert 2 * x * 3 * y is Term(PROD, (const(6), x, y))
    assert x * 1 is x
    assert const(2) + 3 is const(5)
    assert -const(2) is const(-2)
    assert x / 2 is Term(PROD, (const(0.5), x))


def test_derived_fields():
    t = E(x) * tau + log(at(sym("theta"), "k")) + index_sum(at(data("z", "i"), "k"), "k")
    assert t.symbols == {"x", "tau", "theta", "z"}
    assert t.random_symbols == {"tau", "theta"}
    assert t.indices == {"k", "i"}
    assert (x + x).size == 3
    assert log(exp(x + x)).size == 5


@pytest.mark.parametrize(("term", "text"), [
    (log(exp(x + x)) + x + x, "x + x + log(exp(x + x))"),
    (Term(SUM, (Term(SUM, (x, x)), x, x)), "x + x + (x + x)"),
    (-0.5 * tau * (x - mu) ** 2, "-0.5*tau*(x - mu)**2"),
    (x - 2 * y, "x - 2*y"),
    (1 - x, "1 - x"),
    (-(x * tau), "-(tau*x)"),
    (x ** -1.0, "x**-1"),
    (x ** (y + 1), "x**(1 + y)"),
    (E(x) ** 2 + V(x), "V(x) + E(x)**2"),
    (Elog(sym("theta", "i", "j")), "Elog(theta[i,j])"),
    (index_sum(at(sym("z"), "k") * at(sym("w"), "k"), "k"), "sum[k](at(w, k)*at(z, k))"),
    (matmul(sym("B"), sym("z")) + dot(x, y), "B @ z + dot(x, y)"),
    (lgamma(data("n") + 1), "lgamma(1 + data(n))"),
    (var("a") + var("r", "rest"), "?a + ?r..."),
    (at(var("a"), NameVar("k")), "at(?a, ?k)"),
    (const(0.1), "0.1"),
])
def test_printer_is_golden(term, text):
    assert show(term) == text == str(term)


def test_bad_terms_are_rejected():
    with pytest.raises(ValueError, match="unknown term op"):
        Term("sine", (x,))
    with pytest.raises(ValueError, match="takes 2 arguments"):
        Term("pow", (x,))
    with pytest.raises(ValueError, match="finite"):
        const(np.inf)
    with pytest.raises(TypeError):
        Term("log", ("x",))
    with pytest.raises(TypeError, match="cannot make a term"):
        x + "y"  # noqa: B018
