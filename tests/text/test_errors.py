"""ff.parse on bad input: each error names the line and column, with a caret."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import factorflow as ff


def error(text, data=None, kind=ff.ModelError) -> str:
    with pytest.raises(kind) as info:
        ff.parse(text, data=data)
    return str(info.value)


def test_syntax_error_has_line_column_and_caret():
    with pytest.raises(ff.ParseError) as info:
        ff.parse("a ~ Gaussian(0, 1)\ny[i j] ~ Gaussian(a, 1)")
    e = info.value
    assert (e.line, e.column) == (2, 5)
    assert str(e) == ("<text>, line 2, column 5: unexpected 'j'; expected ',', ']'\n"
                      "    y[i j] ~ Gaussian(a, 1)\n"
                      "        ^")
    assert pickle.loads(pickle.dumps(e)).line == 2
    # no link to lark's exception (its parser state does not pickle where tblib pickles
    # an exception's context, as dask.distributed installs it)
    assert e.__context__ is None and e.__cause__ is None


def test_columns_count_in_the_text_as_written():
    text = "\n        a ~ Gaussian(0, 1)\n        b ~ Gaussian(a, 1) $\n"
    msg = error(text, kind=ff.ParseError)
    assert msg.startswith("<text>, line 3, column 28: unexpected character '$'")
    assert msg.splitlines()[-1] == " " * 4 + " " * 27 + "^"


@pytest.mark.parametrize("text, expected", [
    ("a ~ Gaussian(0, 1)\n  b ~ Gaussian(a, 1)", "line 2, column 3: unexpected indentation"),
    ("c ~ Bernoulli(0.5)\nif c:\nx ~ Gaussian(0, 1)",
     "line 3, column 1: expected an indented block after line 2"),
    ("c ~ Bernoulli(0.5)\nif c:\n    x ~ Gaussian(0, 1)\n  y ~ Gaussian(0, 1)",
     "line 4, column 3: this line's indentation matches no enclosing block"),
    ("x ~ Gaussian(0,", "line 1, column 16: unexpected end of text"),
], ids=["indent", "missing-block", "dedent", "eof"])
def test_layout_errors(text, expected):
    assert expected in error(text, kind=ff.ParseError)


def test_unknown_distribution_suggests_the_nearest():
    msg = error("mu[j] ~ Gausian(0, 1)", {"j": 2})
    assert msg.splitlines()[0] == ("<text>, line 1, column 9: unknown distribution "
                                   "'Gausian'; did you mean 'Gaussian'?")
    assert msg.splitlines()[2] == "            ^"
    assert "did you mean 'Dirichlet'" in error("w ~ Dirichlt([1, 1])")
    assert "unknown distribution 'Normal'; factorflow calls it 'Gaussian'" in error(
        "x ~ Normal(0, 1)")
    assert "the distributions are Gaussian, Gamma" in error("x ~ Cauchy(0, 1)")


def test_inconsistent_index_sizes_name_both():
    msg = error("x[i] ~ Gaussian(m[i], 1)\ny[i] ~ Gaussian(x[i], 1)",
                {"m": np.zeros(3), "y": np.zeros(4)}, ff.DataError)
    assert msg == ("index 'i' has size 3 from data['m'] (axis 0, used at line 1, column 17) "
                   "but size 4 from data['y'] (axis 0, used at line 2, column 1); the sizes "
                   "must match.")
    assert "from data['i']" in error("y[i] ~ Gaussian(0, 1)", {"y": np.zeros(4), "i": 3},
                                     ff.DataError)


@pytest.mark.parametrize("text, data, expected", [
    ("x[i] ~ Gaussian(0, 1)", {}, "the size of index 'i' is unknown"),
    ("x ~ Gaussian(mean, 1)", {"means": 1.0}, "'mean' is not defined (by a statement before "
     "this one, or in data); did you mean 'means'?"),
    ("x ~ Gaussian(0, 1)", {"z": 1.0}, "data given for ['z'], but the model text never "
     "uses it"),
    ("mu[j] ~ Gaussian(0, 1)\ny[j] ~ Gaussian(mu, 1)", {"y": np.zeros(2)},
     "line 2, column 17: 'mu' is indexed by its plates ['j']; write mu[j]."),
    ("x ~ Gaussian(0, 1)\ny[i] ~ Gaussian(x[i], 1)", {"y": np.zeros(2)},
     "'x' has no plates"),
    ("y[i] ~ Gaussian(m[j], 1)", {"y": np.zeros(2), "m": np.zeros(2)},
     "index 'j' is not a plate of this statement"),
    ("x ~ Gaussian(0, 1, 2)", {}, "Gaussian takes 2 positional argument(s) (mean, precision)"),
    ("x ~ Gaussian(0, varience=1)", {}, "no parameter 'varience'; did you mean 'variance'?"),
    ("x ~ Gaussian(0, precision=1, precision=2)", {}, "'precision' is given twice"),
    ("x ~ Gamma()", {}, "line 1, column 1: Gamma needs shape: write Gamma(shape, rate)."),
    ("constrain_true(y + w)", {"y": np.ones(3), "w": np.ones(2)}, "line 1, column 16: the "
     "known values here cannot be combined (operands could not be broadcast together"),
    ("constrain_true()", {}, "constrain_true needs b: write constrain_true(b)."),
    ("x ~ Gaussian(0, 1)\ny ~ Gaussian(x, variance=x)", {}, "line 2, column 1: y: a random "
     "variance is not supported"),
    ("x ~ Gaussian(0, 1)\nx ~ Gamma(1, 1)", {}, "line 2, column 1: Variable 'x': the name is "
     "already used"),
    ("x ~ Gaussian(0, 1)\nconstrain(x > 0)", {}, "unknown statement 'constrain'; did you "
     "mean 'constrain_true'?"),
    ("x ~ Gaussian(Gaussian(0, 1), 1)", {}, "distributions are used with ~"),
    ("z ~ Discrete([0.5, 0.5])\nif z == 1:\n  a ~ Gaussian(0, 1)\nelse:\n  a ~ Gaussian(1, 1)",
     {}, "`else` after `if z == k:` is not supported"),
    ("z[n] ~ Discrete([0.5, 0.5])\nswitch z[n]:\n  x[m, n] ~ Gaussian(0, 1)", {"n": 2, "m": 2},
     "a statement's indices must start with ['n']"),
    ("y[i, j] ~ Gaussian(0, 1)", {"y": np.zeros(2)}, "y[i, j] has 2 indices but data['y'] "
     "has shape (2,)"),
    ("y[i] ~ Gaussian(0, 1)", {"y": [1.0, float("nan")]}, "observed value of 'y' contains NaN"),
    # (a number read by an index: NumPy's "axes don't match array" before; hypothesis)
    ("y[x, y] = j[x] + x", {"y": np.array([[1.0], [2.0]]), "j": 2},
     "j[x] has 1 indices but data['j'] has shape ()"),
    ("x ~ Gaussian(0, 1)\ny = x == 1", {}, "`==` is a gate condition only"),
    ("data y\ny ~ Gaussian(0, 1)", {"y": 1.0}, "'y' is a variable of the model; an ff.Data "
     "needs a name of its own: `data y_obs`"),
    ("y ~ Gaussian(0, 1, observed=v)", {"y": 1.0, "v": 2.0}, "'y' is observed twice"),
    ("a ~ Gaussian(0, 1)\ny ~ Gaussian(0, 1, observed=a)", {}, "observed= takes data"),
], ids=lambda v: v if isinstance(v, str) and len(v) < 30 else None)
def test_bad_models_are_named(text, data, expected):
    assert expected in error(text, data)


def test_non_string_and_non_dict_input():
    assert "needs the model as a string" in error(42)
    with pytest.raises(ff.ModelError, match="data must be a dict"):
        ff.parse("x ~ Gaussian(0, 1)", data=[1, 2])


TOKENS = ["x", "y", "z", "i", "j", "[", "]", "(", ")", ",", ";", ":", "=", "==", "~", "+",
          "-", "*", "<", ">", "&", "|", "not", "#", " ", "\n", "\n    ", "0", "1.5", "[1, 2]",
          "Gaussian", "Gamma", "Bernoulli", "Discrete", "Dirichlet", "if", "else", "switch",
          "data", "constrain_true", "is_positive", "variance=", "observed=", "y[i]", "z[i]"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=25))
def test_any_text_gives_a_model_or_a_model_error(tokens):
    """Whatever the text, ff.parse builds a model or raises ff.ModelError (never another
    exception from lark, NumPy or the builder)."""
    try:
        ff.parse("".join(tokens), data={"y": np.array([0.5, 1.0, 2.0])})
    except ff.ModelError:
        pass  # the one allowed failure: any other exception propagates and fails the test


NAMES = st.sampled_from(["x", "y", "z", "w", "i", "j"])
REFS = st.one_of(NAMES, st.builds("{}[{}]".format, NAMES, NAMES),
                 st.builds("{}[{}, {}]".format, NAMES, NAMES, NAMES),
                 st.builds("{}[{}[{}]]".format, NAMES, NAMES, NAMES),
                 st.sampled_from(["0", "1.5", "-2", "[0.5, 0.5]", "[1, 2, 3]"]))
TARGETS = st.one_of(NAMES, st.builds("{}[{}]".format, NAMES, NAMES),
                    st.builds("{}[{}, {}]".format, NAMES, NAMES, NAMES))
EXPRS = st.one_of(REFS, st.builds("{} {} {}".format, REFS, st.sampled_from(
    ["+", "-", "*", ">", "<", "&", "|", "=="]), REFS), st.builds("~{}".format, REFS))
ARGS = st.lists(st.one_of(EXPRS, st.builds("{}={}".format, st.sampled_from(
    ["variance", "precision", "rate", "scale", "observed"]), EXPRS)), max_size=3)
STATEMENTS = st.one_of(
    st.builds("{} ~ {}({})".format, TARGETS, st.sampled_from(list(ff.text.DISTRIBUTIONS)),
              ARGS.map(", ".join)),
    st.builds("{} = {}".format, TARGETS, EXPRS),
    st.builds("constrain_true({})".format, EXPRS),
    st.builds("data {}".format, NAMES),
    st.builds("if {}:\n    {} ~ Gaussian(0, 1)\nelse:\n    {} ~ Gaussian(1, 1)".format,
              EXPRS, TARGETS, TARGETS),
    st.builds("switch {}:\n    {} ~ Gaussian({}, 1)".format, REFS, TARGETS, EXPRS))
DATA = st.fixed_dictionaries({}, optional={
    "y": st.sampled_from([np.array([0.5, 1.0, 2.0]), np.array([[1.0], [2.0]]), 1.0]),
    "w": st.sampled_from([np.array([0, 1, 1]), np.array([True, False]), np.array([3, 0])]),
    "j": st.sampled_from([2, 3, 0, -1, 2.5])})


@settings(max_examples=300, deadline=None)
@given(st.lists(STATEMENTS, min_size=1, max_size=5), DATA)
def test_any_well_formed_program_gives_a_model_or_a_model_error(statements, data):
    """Programs in the grammar, with arbitrary names, indices and data, build a model or
    raise ff.ModelError: the builder never fails with another exception."""
    try:
        ff.parse("\n".join(statements), data=data)
        event("built")
    except ff.ModelError as error:
        event(type(error).__name__)
