"""Deterministic printer for terms.

``show(t)`` depends only on the structure of ``t`` (arguments of sums and products are
already in canonical order), so equal terms print identically in every run: the text
is fit for golden tests. The syntax is Python-like: ``a + b``, ``a - b``, ``2*x``,
``x**2``, ``log(x)``, ``E(x)``, ``a @ b``; a symbol with plate indices prints ``x[i,j]``,
observed data ``data(y)``, naming an inner axis ``at(t, k)``, a sum over an index
``sum[k](t)``, a pattern variable ``?a`` (``?r...`` for a rest variable). Nested sums and
products keep their parentheses, so ``(x + x) + x`` and ``x + x + x`` print differently.
"""

from __future__ import annotations

from factorflow.rewrite.terms import (
    CALC,
    CALL,
    CONST,
    DATA,
    DOT,
    INDEX,
    INDEX_SUM,
    MATMUL,
    NEG,
    POW,
    PROD,
    SUM,
    SYM,
    VAR,
    NameVar,
    Term,
)

_SUM, _PROD, _NEG, _POW, _ATOM = 1, 2, 3, 4, 5


def show(t: Term) -> str:
    """The canonical text of ``t``."""
    text, _ = _show(t)
    return text


def format_number(v: float) -> str:
    """Integers without a decimal point, other floats by ``repr``."""
    if v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(v)


def _name(payload: str | NameVar) -> str:
    return f"?{payload.name}" if isinstance(payload, NameVar) else payload


def _wrap(t: Term, min_prec: int) -> str:
    text, prec = _show(t)
    return f"({text})" if prec < min_prec else text


def _show(t: Term) -> tuple[str, int]:
    op, args = t.op, t.args
    if op == CONST:
        text = format_number(t.payload)
        return text, _NEG if text.startswith("-") else _ATOM
    if op in (SYM, DATA):
        name, indices = t.payload
        text = f"{name}[{','.join(indices)}]" if indices else name
        return (text if op == SYM else f"data({text})"), _ATOM
    if op == VAR:
        name, kind = t.payload
        return (f"?{name}..." if kind == "rest" else f"?{name}"), _ATOM
    if op == SUM:
        parts = [_wrap(args[0], _PROD)]
        for a in args[1:]:
            negated = _negated(a)
            parts.append(f" - {negated}" if negated is not None else f" + {_wrap(a, _PROD)}")
        return "".join(parts), _SUM
    if op == PROD:
        if args[0].op == CONST and args[0].payload == -1.0:
            return "-" + "*".join(_wrap(a, _NEG + 1) for a in args[1:]), _NEG
        return "*".join(_wrap(a, _NEG if i == 0 else _NEG + 1) for i, a in enumerate(args)), _PROD
    if op == NEG:
        return "-" + _wrap(args[0], _NEG + 1), _NEG
    if op == POW:
        return f"{_wrap(args[0], _ATOM)}**{_wrap(args[1], _NEG)}", _POW
    if op == MATMUL:
        return f"{_wrap(args[0], _ATOM)} @ {_wrap(args[1], _ATOM)}", _PROD
    if op == INDEX:
        return f"at({show(args[0])}, {_name(t.payload)})", _ATOM
    if op == INDEX_SUM:
        return f"sum[{_name(t.payload)}]({show(args[0])})", _ATOM
    if op == CALC:
        return f"[{t.payload}]({', '.join(map(show, args))})", _ATOM
    if op == CALL:
        return f"{t.payload}({', '.join(map(show, args))})", _ATOM
    if op == DOT:
        return f"dot({show(args[0])}, {show(args[1])})", _ATOM
    return f"{op}({', '.join(map(show, args))})", _ATOM


def _negated(t: Term) -> str | None:
    """The text of ``-t`` when ``t`` prints naturally as a subtraction, else None."""
    if t.op == NEG:
        return _wrap(t.args[0], _PROD)
    if t.op == CONST and t.payload < 0:
        return format_number(-t.payload)
    if t.op == PROD and t.args[0].op == CONST and t.args[0].payload < 0:
        c = -t.args[0].payload
        rest = "*".join(_wrap(a, _NEG + 1) for a in t.args[1:])
        return rest if c == 1.0 else f"{format_number(c)}*{rest}"
    return None
