"""MkDocs hook: the API page (docs/api.md) is written from the docstrings at build time,
so the reference and the tested examples (tests/test_docstrings.py) are one text.

``docs/api.md`` holds the marker ``<!-- api -->``; ``on_page_markdown`` replaces it with
``reference()``: every name of ``ff.__all__``, then the public methods of ``Model``,
``CompiledModel`` and ``Result``, each with its signature and docstring (examples fenced
as ``pycon``).
"""

from __future__ import annotations

import inspect
import re
from typing import Any

MARKER = "<!-- api -->"


def _markdown(doc: str) -> str:
    """A docstring as Markdown: ``code`` as `code` (also across a line break), doctest
    runs fenced as pycon."""
    out: list[str] = []
    text: list[str] = []     # the prose since the last fence
    fenced = False

    def prose() -> None:
        out.append(re.sub(r"``(.+?)``", r"`\1`", "\n".join(text), flags=re.S))
        text.clear()

    for line in doc.splitlines():
        if line.startswith(">>> ") and not fenced:
            prose()
            out.append("```pycon")
            fenced = True
        elif fenced and not line.strip():
            out.append("```")
            fenced = False
        (out if fenced else text).append(line)
    prose()
    if fenced:
        out.append("```")
    return "\n".join(out)


def _signature(target: Any) -> str:
    """The signature as written (annotations evaluated where they resolve at run time;
    as strings where they name what only a type checker imports)."""
    for evaluate in (True, False):
        try:
            return str(inspect.signature(target, eval_str=evaluate))
        except (NameError, TypeError, ValueError):
            continue
    return ""


def _entry(title: str, obj: Any) -> str:
    target = obj.fget if isinstance(obj, property) else obj
    signature = _signature(target) if callable(target) else ""
    head = f"### `{title}{signature if not isinstance(obj, property) else ''}`"
    return f"{head}\n\n{_markdown(inspect.getdoc(obj) or '')}\n"


def reference() -> str:
    """The API reference in Markdown, from the docstrings."""
    import factorflow as ff
    from factorflow.runtime.compiled import CompiledModel

    parts = ["## The `ff` namespace\n"]
    parts += [_entry(f"ff.{name}", getattr(ff, name)) for name in ff.__all__]
    for cls in (ff.Model, CompiledModel, ff.Result):
        parts.append(f"## {cls.__name__}\n")
        for name in sorted(vars(cls)):
            attr = inspect.getattr_static(cls, name)
            if name.startswith("_") or not (isinstance(attr, property | classmethod)
                                            or inspect.isfunction(attr)):
                continue
            parts.append(_entry(f"{cls.__name__}.{name}", getattr(cls, name)
                                if not isinstance(attr, property) else attr))
    return "\n".join(parts)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    return markdown.replace(MARKER, reference()) if MARKER in markdown else markdown
