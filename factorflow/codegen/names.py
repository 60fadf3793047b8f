"""The names of generated code: user names in their own namespace, derived names apart.

No user string reaches generated source except through ``identifier`` (names) or
``comment`` (provenance text), so a variable called ``"x; import os"`` cannot inject code.

The scheme.  ``sanitize(text)`` is the *body* of a name: ASCII letters, digits and single
underscores, neither starting nor ending with ``_`` (so it never contains ``__``).

* **User names** (model variables, ranges, ``ff.Data``; made by ``identifier``) are
  ``USER_PREFIX + body``: ``mean`` -> ``v_mean``.  Lowering keeps them unique with a
  ``taken`` set (``a b`` and ``a_b`` -> ``v_a_b``, ``v_a_b_2``).  They never contain ``__``.
* **Derived names** (messages, uses, gate clones, case arrays, constants; made by
  ``derived`` or ``fresh``) are ``base + SEPARATOR + tag`` with ``SEPARATOR = "__"`` and a
  ``tag`` in the token grammar ``[A-Za-z0-9]+(_[A-Za-z0-9]+)*``: ``v_mean__F``,
  ``v_mean__use0__B``, ``v_x__cond_c``.  ``base`` is a user or derived name.
* **Generated names** (the program's parameters, locals, helpers and resolved symbols)
  never start with ``USER_PREFIX`` (the emitter checks its own and allocates symbols so).

The guarantee: in a program lowered from a model, no two distinct things share a name.

1. User and derived names start with ``USER_PREFIX``; generated names do not (``symbol``
   prefixes ``op_`` to any symbol whose name or numbering would).
2. A user name has no ``__``; a derived name has one: they never meet.
3. ``derived`` is injective: no name ends with ``_`` and a tag holds no ``__`` and starts
   with no ``_``, so the separator is the *last* ``__`` of ``base__tag`` and
   ``split_derived`` inverts it.
4. Names derived by plain concatenation (``forward``, ``backward``, ``marginal``, ``use``)
   use only the tags of ``is_message_tag`` on distinct bases, so by 3 they are distinct;
   every other derived name comes from ``fresh``, which refuses those tags and numbers
   the tag until the name is not taken.  So a fresh name never equals a later
   concatenation either.
5. Symbols are allocated by ``symbol`` against everything already named (the program's
   names, the generated program's own, the runtime's helpers, earlier symbols).

The verifier (``ir.check``) and the emitter also refuse a program that names one thing
twice (a range and a variable included) or uses a name of the generated code.
"""

from __future__ import annotations

import keyword
import re
import unicodedata

#: the prefix of every user-derived name; no generated name starts with it
USER_PREFIX = "v_"
#: the separator of a derived name's tag; no user name (and no tag) contains it
SEPARATOR = "__"

_TOKEN = re.compile(r"[A-Za-z0-9]+(?:_[A-Za-z0-9]+)*")
_MESSAGE_TAG = re.compile(r"F|B|marginal|use[0-9]+")


def sanitize(text: str) -> str:
    """The body of a name for ``text``: a non-empty string of the token grammar (ASCII
    letters, digits, single inner underscores), ``"unnamed"`` if nothing of ``text`` is
    left."""
    ascii_text = unicodedata.normalize("NFKD", str(text)).encode("ascii", "ignore").decode()
    return re.sub(r"[^A-Za-z0-9]+", "_", ascii_text).strip("_") or "unnamed"


def identifier(text: str, taken: set[str] | None = None) -> str:
    """The user name for ``text``: ``USER_PREFIX + sanitize(text)``, unique within ``taken``.

    Guarantees: a valid ASCII Python identifier, not a keyword, starting with
    ``USER_PREFIX``, without ``__``; if ``taken`` is given, it was not in ``taken`` and is
    added to it (a number is appended: ``v_a_2``).
    """
    name = base = USER_PREFIX + sanitize(text)
    k = 1
    while taken is not None and name in taken:
        k += 1
        name = f"{base}_{k}"
    if taken is not None:
        taken.add(name)
    return name


def display(name: str) -> str:
    """``name`` for people: a user name without ``USER_PREFIX`` (``v_n`` -> ``n``), any
    other name as it is."""
    if name.startswith(USER_PREFIX) and SEPARATOR not in name:
        return name[len(USER_PREFIX):]
    return name


def token(*parts: object) -> str:
    """A tag made of readable parts (names, indices): each part without ``USER_PREFIX``,
    joined by ``_`` and put in the token grammar.  ``token("v_x", 2)`` is ``"x_2"``."""
    words = [str(p)[len(USER_PREFIX):] if str(p).startswith(USER_PREFIX) else str(p)
             for p in parts]
    return sanitize("_".join(words))


def is_message_tag(tag: str) -> bool:
    """True for the tags that passes add by concatenation: F, B, marginal, use<k>."""
    return _MESSAGE_TAG.fullmatch(tag) is not None


def derived(base: str, tag: str) -> str:
    """``base + SEPARATOR + tag``; ValueError unless ``tag`` is in the token grammar.
    Injective in (base, tag) for bases that do not end with ``_``."""
    if not _TOKEN.fullmatch(tag):
        raise ValueError(f"name tag {tag!r} is not in the token grammar")
    return f"{base}{SEPARATOR}{tag}"


def split_derived(name: str) -> tuple[str, str]:
    """(base, tag) of a derived name: the inverse of ``derived``."""
    base, sep, tag = name.rpartition(SEPARATOR)
    if not sep or not _TOKEN.fullmatch(tag):
        raise ValueError(f"{name!r} is not a derived name")
    return base, tag


def fresh(base: str, tag: str, taken: set[str]) -> str:
    """A derived name of ``base`` whose tag is ``tag`` (``tag_2``, ``tag_3``... if taken),
    never a message tag; added to ``taken``."""
    tag = sanitize(tag)
    candidate, k = tag, 1
    while is_message_tag(candidate) or derived(base, candidate) in taken:
        k += 1
        candidate = f"{tag}_{k}"
    name = derived(base, candidate)
    taken.add(name)
    return name


def forward(var: str) -> str:
    """The message to ``var`` from its definition (or to a use from its variable)."""
    return derived(var, "F")


def backward(var: str) -> str:
    """The message from ``var`` to its definition (or from a use's factor to it)."""
    return derived(var, "B")


def marginal(var: str) -> str:
    """The posterior of ``var``."""
    return derived(var, "marginal")


def use(var: str, k: int) -> str:
    """The ``k``-th use of ``var`` (its own edge to one reading factor)."""
    return derived(var, f"use{k}")


def symbol(text: str, taken: set[str]) -> str:
    """A generated name for a resolved symbol (an operator, a family): ``text`` sanitized,
    never starting with ``USER_PREFIX``, not a keyword, not in ``taken``; added to it."""
    base = sanitize(text)
    numbered = base + "_"  # the numbered candidates are base_2, base_3, ...
    if numbered.startswith(USER_PREFIX) or base[0].isdigit() or keyword.iskeyword(base) \
            or keyword.issoftkeyword(base):
        base = "op_" + base
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


def comment(text: str) -> str:
    """``text`` as a single-line comment body: no newlines, no control characters."""
    flat = " ".join(str(text).split())
    return "".join(ch for ch in flat if ch.isprintable())
