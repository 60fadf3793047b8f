"""The text DSL's grammar and parser: source text -> a ``lark`` tree with positions.

The language is VinDsl's ``x[i] ~ Normal(...)`` notation with Python's block structure:

    # comments run to the end of the line; statements end at a newline or ";"
    data threshold                    # these data entries become ff.Data (changeable)
    mu[j] ~ Gaussian(0, variance=100) # a random variable over the plate j
    y[i, j] ~ Gaussian(mu[j], tau[j]) # observed when `data` has "y"
    d[j] = mu[j] + 1                  # a deterministic node (+ - * > < & | ~)
    constrain_true(x > threshold)     # evidence
    if c: ... else: ...               # ff.If / ff.IfNot (indented blocks)
    if z == 2: ...                    # ff.Case
    switch z[n]: ...                  # ff.Switch; inside it means[z[n]] picks z's component

Guarantees: ``parse_tree`` either returns a tree whose nodes carry ``meta.line`` and
``meta.column`` (1-based, in the text as given) or raises ``ParseError`` with the line,
the column and a caret line under the offending character.
"""

from __future__ import annotations

import textwrap
from functools import cache

from lark import Lark, Tree, UnexpectedCharacters, UnexpectedEOF, UnexpectedInput
from lark.indenter import DedentError, Indenter

from factorflow.errors import ParseError

GRAMMAR = r"""
start: _NL? _stmt*

_stmt: _simple | _compound
_simple: _small (";" _small)* ";"? _NL
_small: tilde | assign | call_stmt | data_decl

tilde: target "~" NAME "(" [_arguments] ")"
assign: target "=" expr
call_stmt: NAME "(" [_arguments] ")"
data_decl: "data" NAME ("," NAME)*
target: NAME ("[" NAME ("," NAME)* "]")?

_compound: if_block | switch_block
if_block: "if" expr ":" suite ("else" ":" suite)?
switch_block: "switch" ref ":" suite
suite: _simple | _NL _INDENT _stmt+ _DEDENT

_arguments: argument ("," argument)* ","?
?argument: expr
         | NAME "=" expr -> keyword

?expr: or_expr
?or_expr: and_expr | or_expr "|" and_expr -> or_
?and_expr: not_expr | and_expr "&" not_expr -> and_
?not_expr: comparison | "~" not_expr -> not_ | "not" not_expr -> not_
?comparison: arith
           | arith ">" arith -> gt
           | arith "<" arith -> lt
           | arith "==" arith -> eq
?arith: term | arith "+" term -> add | arith "-" term -> sub
?term: unary | term "*" unary -> mul
?unary: atom | "-" unary -> neg
?atom: NUMBER -> number
     | ref
     | NAME "(" [_arguments] ")" -> call
     | "[" expr ("," expr)* ","? "]" -> array
     | "(" expr ")"

ref: NAME ("[" ref ("," ref)* "]")?

NAME: /(?!(if|else|switch|data|not)\b)[A-Za-z_][A-Za-z_0-9]*/
NUMBER: /(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?/
COMMENT: /#[^\n]*/
_NL: (/\r?\n[\t ]*/ | COMMENT)+

%ignore /[\t \f]+/
%ignore /\\[\t \f]*\r?\n/
%ignore COMMENT
%declare _INDENT _DEDENT
"""


class _Indenter(Indenter):
    NL_type = "_NL"
    OPEN_PAREN_types = ["LPAR", "LSQB"]
    CLOSE_PAREN_types = ["RPAR", "RSQB"]
    INDENT_type = "_INDENT"
    DEDENT_type = "_DEDENT"
    tab_len = 8

    def handle_NL(self, token):  # noqa: N802 (lark's name)
        try:
            yield from super().handle_NL(token)
        except DedentError:
            # the line after this newline is indented to no level of an outer block
            raise _BadDedent(token.end_line, len(token.rsplit("\n", 1)[1]) + 1) from None


class _BadDedent(Exception):
    def __init__(self, line: int, column: int) -> None:
        super().__init__(line, column)
        self.line, self.column = line, column


@cache
def _parser() -> Lark:
    return Lark(GRAMMAR, parser="lalr", postlex=_Indenter(), propagate_positions=True,
                maybe_placeholders=False)


#: what a token's type means to a reader of an error message
_READABLE = {"_NL": "end of line", "$END": "end of text", "_INDENT": "an indented block",
             "_DEDENT": "end of block", "NAME": "a name", "NUMBER": "a number"}


def _readable(types: set[str]) -> str:
    names = []
    for t in sorted(types):
        if t in _READABLE:
            names.append(_READABLE[t])
        else:
            pattern = _parser().get_terminal(t).pattern
            names.append(repr(pattern.value) if pattern.type == "str" else t)
    return ", ".join(sorted(set(names)))


def _inside_brackets(text: str, pos: int | None) -> bool:
    """Whether position ``pos`` of ``text`` is inside parentheses or brackets (where a
    line break is not the end of a statement)."""
    before = text[:pos or 0]
    return sum(before.count(c) for c in "([") > sum(before.count(c) for c in ")]")


def caret(lines: list[str], line: int, column: int) -> str:
    """The source line ``line`` (1-based) and a caret under ``column`` (1-based)."""
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    return f"    {text}\n    {' ' * max(column - 1, 0)}^"


def parse_tree(text: str, filename: str = "<text>") -> tuple[Tree, int]:
    """The parse tree of ``text`` and the margin (common indentation) removed from every
    line before parsing: a node's column in ``text`` is its ``meta.column + margin``.
    ``ParseError`` (line, column, caret) if ``text`` is not in the language."""
    lines = text.splitlines()
    body = textwrap.dedent(text)
    margin = next((len(a) - len(b) for a, b in zip(lines, body.splitlines(), strict=False)
                   if b.strip()), 0)
    try:
        return _parser().parse(body + "\n"), margin
    except UnexpectedInput as e:
        line, column = e.line, e.column
        end = getattr(getattr(e, "token", None), "type", None) == "$END"
        if isinstance(e, UnexpectedEOF) or line < 1 or end:
            line = len(lines)
            column = len(lines[-1]) + 1 - margin if lines else 1
        if isinstance(e, UnexpectedCharacters):
            found = f"unexpected character {body.splitlines()[line - 1][column - 1]!r}"
            expected = _readable(set(e.allowed or ()))
        else:
            token = getattr(e, "token", None)
            found = ("unexpected end of text" if token is None or token.type == "$END"
                     else "unexpected end of line" if token.type == "_NL"
                     else f"unexpected {token.value!r}")
            expected = _readable(set(getattr(e, "expected", ()) or ())
                                 - ({"_NL"} if _inside_brackets(body, e.pos_in_stream) else set()))
            if token is not None and token.type == "_INDENT":
                line, column = token.end_line, token.end_column
                found, expected = "unexpected indentation", ""
            previous = body.splitlines()[:line - 1]
            while previous and not previous[-1].strip():
                previous.pop()
            if previous and previous[-1].rstrip().endswith(":") and column == 1 + len(
                    body.splitlines()[line - 1]) - len(body.splitlines()[line - 1].lstrip()):
                found = f"expected an indented block after line {len(previous)}"
                expected = ""
        column += margin
        message = f"{filename}, line {line}, column {column}: {found}"
        if expected:
            message += f"; expected {expected}"
        error = ParseError(f"{message}\n{caret(lines, line, column)}", line, column)
    except _BadDedent as e:
        column = e.column + margin
        error = ParseError(f"{filename}, line {e.line}, column {column}: this line's "
                           "indentation matches no enclosing block; indent the statements of "
                           f"a block by the same amount.\n{caret(lines, e.line, column)}",
                           e.line, column)
    # raised outside the handlers: the error keeps no link (``__context__``) to lark's
    # exception, whose parser state cannot be pickled (tblib, as dask.distributed installs
    # it, pickles an exception's context) and would stay alive with the error
    raise error
