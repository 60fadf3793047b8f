"""User strings never reach generated source unsanitised."""

from __future__ import annotations

import ast
import keyword

import pytest
from hypothesis import given
from hypothesis import strategies as st

import factorflow as ff
from factorflow.codegen.names import comment, identifier
from tests.conftest import assert_close


@given(st.text())
def test_identifier_is_always_safe(text):
    name = identifier(text)
    assert name.isidentifier() and name.isascii()
    assert not keyword.iskeyword(name) and not name.startswith("__")


def test_identifier_is_unique_within_taken():
    taken: set[str] = set()
    names = [identifier(t, taken) for t in ["a b", "a-b", "a_b", "a.b"]]
    assert len(set(names)) == 4


@given(st.text())
def test_comment_is_one_line(text):
    assert "\n" not in comment(text) and "\r" not in comment(text)


@pytest.mark.parametrize("name", ["x; import os", "déjà vu", "class", "__import__('os')",
                                  "a\nb = 1", "0x"])
def test_hostile_variable_names_compile_and_run(name):
    with ff.Model(name) as model:
        mean = ff.Gaussian(name, 0.0, variance=100.0)
        n = ff.Range("n", 2)
        with ff.Plate(n):
            ff.Gaussian(name + " obs", mean, precision=1.0, observed=[5.0, 7.0])
    compiled = model.compile("ep")
    tree = ast.parse(compiled.source)
    # the user's name appears only inside string literals (keys of the result dict)
    idents = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    assert all(i.isidentifier() and i.isascii() for i in idents)
    assert "import os" not in "".join(
        line for line in compiled.source.splitlines() if not line.lstrip().startswith("#")
        and "'" not in line and '"' not in line)
    assert not any(isinstance(node, ast.Import | ast.ImportFrom) for node in ast.walk(tree))
    result = compiled.run()
    assert_close(result[name].mean, 12.0 / 2.01)
