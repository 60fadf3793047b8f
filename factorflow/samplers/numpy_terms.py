"""Terms compiled to NumPy expressions, for the inner loop of a sampler.

:func:`factorflow.rewrite.evaluate.evaluate` interprets a term, aligning named axes at
every node; a Gibbs sweep evaluates the same few terms thousands of times on arrays
whose layout is fixed (``(chains, *plates, *event)``, see :mod:`.sites`), so each term is
compiled once to a Python expression over those arrays instead: ``data("a3")`` reads
``env["a3"]``, ``at(x, "k")`` is ``x`` itself (the inner index is the last axis),
``sum[k](t)`` is ``t.sum(axis=-1)``, and a term without the index meets one with it
through ``[..., None]``. :func:`compile_term` returns the function and its source (shown
by ``compiled.samplers``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy import special

from factorflow.errors import ModelError
from factorflow.rewrite.evaluate import FUNCTION_IMPLEMENTATIONS
from factorflow.rewrite.terms import (
    CALL,
    CONST,
    DATA,
    DIGAMMA,
    EXP,
    INDEX,
    INDEX_SUM,
    LGAMMA,
    LOG,
    NEG,
    POW,
    PROD,
    SUM,
    Term,
)

_FUNCTIONS = {LOG: "np.log", EXP: "np.exp", LGAMMA: "special.gammaln",
              DIGAMMA: "special.digamma"}
_NAMESPACE = {"np": np, "special": special, "functions": FUNCTION_IMPLEMENTATIONS}


def to_source(term: Term) -> str:
    """A Python expression computing ``term`` over ``env`` (see the module docstring)."""
    return _source(term)[0]


def _source(t: Term) -> tuple[str, bool]:
    """(expression, whether its value carries the inner index as its last axis)."""
    op = t.op
    if op == CONST:
        return repr(t.payload), False
    if op == DATA:
        return f"env[{t.payload[0]!r}]", False
    if op == INDEX:
        inner, _ = _source(t.args[0])
        return inner, True
    if op == INDEX_SUM:
        inner, indexed = _source(t.args[0])
        return (f"({inner}).sum(axis=-1)" if indexed else inner), False
    parts = [_source(a) for a in t.args]
    indexed = any(i for _, i in parts)
    args = [f"({s})[..., None]" if indexed and not i and not _is_number(a) else s
            for a, (s, i) in zip(t.args, parts, strict=True)]
    if op == SUM:
        return "(" + " + ".join(args) + ")", indexed
    if op == PROD:
        return "(" + " * ".join(args) + ")", indexed
    if op == POW:
        return f"({args[0]}) ** ({args[1]})", indexed
    if op == NEG:
        return f"(-{args[0]})", indexed
    if op in _FUNCTIONS:
        return f"{_FUNCTIONS[op]}({args[0]})", indexed
    if op == CALL and t.payload in FUNCTION_IMPLEMENTATIONS:
        return f"functions[{t.payload!r}]({', '.join(args)})", indexed
    raise ModelError(f"a sampler cannot compute {t} (operation {op!r}).")


def _is_number(t: Term) -> bool:
    return t.op == CONST


def compile_term(term: Term) -> tuple[Callable[[dict[str, np.ndarray]], np.ndarray], str]:
    """``(fn, source)``: ``fn(env)`` computes ``term`` as :func:`to_source` writes it."""
    source = to_source(term)
    fn = eval(compile(f"lambda env: {source}", "<factorflow sampler term>", "eval"),
              dict(_NAMESPACE))
    return fn, source
