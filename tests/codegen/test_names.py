"""User strings never reach generated source unsanitised, and the naming scheme of
``factorflow.codegen.names`` keeps user, derived and generated names apart."""

from __future__ import annotations

import ast
import keyword

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import factorflow as ff
from factorflow.codegen.names import (
    SEPARATOR,
    USER_PREFIX,
    comment,
    derived,
    display,
    fresh,
    identifier,
    is_message_tag,
    split_derived,
    symbol,
    token,
)
from factorflow.codegen.python import GENERATED, generate
from factorflow.ir import IRError, Program, VarDecl
from factorflow.runtime.kernels import NAMESPACE
from tests.conftest import assert_close

TAGS = st.sampled_from(["F", "B", "marginal", "use0", "use12", "cases", "k", "cond_c_n",
                        "index", "alpha", "0_cond_d", "cases_2"])


@given(st.text())
def test_identifier_is_always_safe(text):
    name = identifier(text)
    assert name.isidentifier() and name.isascii()
    assert not keyword.iskeyword(name) and not name.startswith("__")
    assert name.startswith(USER_PREFIX) and SEPARATOR not in name and not name.endswith("_")


@given(st.text(), st.lists(TAGS, min_size=1, max_size=4))
def test_a_derived_name_is_no_user_name_and_splits_back(text, tags):
    """Guarantees 2 and 3: a derived name holds the separator no user name holds, and
    ``split_derived`` recovers each (base, tag) of a chain of derivations."""
    name = identifier(text)
    chain = [name]
    for tag in tags:
        chain.append(derived(chain[-1], tag))
    for base, tag, made in zip(chain[:-1], tags, chain[1:], strict=True):
        assert SEPARATOR in made and made.isidentifier()
        assert split_derived(made) == (base, tag)
    user_names = {identifier(t) for t in (text, text + "_F", text + "__F", chain[-1])}
    assert not user_names & set(chain[1:])


@given(st.lists(st.text(min_size=1), min_size=2, max_size=6, unique=True),
       st.lists(TAGS, min_size=1, max_size=3, unique=True))
def test_derived_names_of_distinct_bases_are_distinct(texts, tags):
    taken: set[str] = set()
    bases = [identifier(t, taken) for t in texts]
    made = [derived(b, t) for b in bases for t in tags]
    assert len(set(made)) == len(made) and not set(made) & set(bases)


@given(st.text(), st.sampled_from(["F", "B", "marginal", "use3", "cases", "k"]))
def test_fresh_never_makes_a_message_tag_and_never_reuses(text, tag):
    """Guarantee 4: a fresh name can never equal a later concatenation."""
    taken: set[str] = set()
    base = identifier(text, taken)
    names = [fresh(base, tag, taken) for _ in range(4)]
    assert len(set(names)) == 4 and set(names) <= taken
    assert not any(is_message_tag(split_derived(n)[1]) for n in names)


def test_token_reads_as_the_user_wrote_it():
    assert token("v_x", 2, "cond", "v_c", "v_n") == "x_2_cond_c_n"
    assert token("v_a__cond_c", "j") == "a_cond_c_j"
    assert display("v_mean") == "mean" and display("v_mean__F") == "v_mean__F"


@given(st.text(), st.sets(st.text(min_size=1, max_size=6)))
@example("v", {"v"})  # numbering "v" must not make "v_2"
@example("v_thing", set())
def test_symbols_are_apart_from_user_names_and_from_each_other(text, others):
    taken = set(GENERATED) | set(NAMESPACE) | set(others)
    before = set(taken)
    name = symbol(text, taken)
    assert name.isidentifier() and not keyword.iskeyword(name)
    assert not name.startswith(USER_PREFIX) and name not in before and name in taken


def test_no_generated_name_starts_with_the_user_prefix():
    """Guarantee 1 for the names the runtime and the emitter bring themselves."""
    assert not any(n.startswith(USER_PREFIX) for n in set(GENERATED) | set(NAMESPACE))


@pytest.mark.parametrize("name", ["data", "total", "iteration", "range"])
def test_the_emitter_refuses_a_program_that_uses_a_generated_name(name):
    program = Program("p", (), (VarDecl(name, "observed", "real"),), ())
    with pytest.raises(IRError, match=name):
        generate(program, frozenset(NAMESPACE))


def test_the_emitter_refuses_a_range_named_like_a_variable():
    program = Program("p", (("v_n", 2),), (VarDecl("v_n", "observed", "real"),), ())
    with pytest.raises(IRError, match="v_n"):
        generate(program)


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
