"""Turning user strings into safe, readable Python identifiers.

No user string reaches generated source except through ``identifier`` (names) or
``comment`` (provenance text), so a variable called ``"x; import os"`` cannot inject code.
"""

from __future__ import annotations

import keyword
import re
import unicodedata


def identifier(text: str, taken: set[str] | None = None) -> str:
    """A valid, non-keyword ASCII identifier resembling ``text``, unique within ``taken``.

    Guarantees: the result matches ``[A-Za-z_][A-Za-z0-9_]*``, is not a Python keyword or
    a dunder name, and (if ``taken`` is given) is added to ``taken`` and was not in it.
    """
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    name = re.sub(r"[^A-Za-z0-9_]+", "_", ascii_text).strip("_") or "v"
    name = re.sub(r"_+", "_", name)
    if name[0].isdigit() or keyword.iskeyword(name) or keyword.issoftkeyword(name):
        name = "v_" + name
    if name.startswith("__"):
        name = "v" + name
    if taken is not None:
        base, k = name, 1
        while name in taken:
            k += 1
            name = f"{base}_{k}"
        taken.add(name)
    return name


def comment(text: str) -> str:
    """``text`` as a single-line comment body: no newlines, no control characters."""
    flat = " ".join(str(text).split())
    return "".join(ch for ch in flat if ch.isprintable())
