"""Golden tests of the gate transform against every example of the seed.

``../shared/seeds/001_170d93331567c1ef.txt`` gives input / output pairs (the If statement
rows, the exit variable, the alternative method, the Case statement and the Switch
statement rows); each is built here as IR, converted, and compared as printer text with
the seed's right column up to naming and layout (the case axis is an array's last axis;
``x_cond_c[0]`` of a whole array reads ``x__cond_c[i, 0]``; the seed's switch rows leave out
the definition of ``b``).  Every output also passes the IR verifier, and means what its
input means: the same factors apply to the same values for every assignment of the
conditions (``gate_semantics``).  Beyond the seed: both branches reading a variable, gates
nested two deep (enter and exit), a deterministic condition, a mixture (a switch in a
plate), and the bad inputs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from factorflow.errors import ModelError
from factorflow.ir import Const, For, If, Program, Ref, Stmt, VarDecl, check, format_program
from factorflow.ir.printer import format_decl
from factorflow.transforms.gate_analysis import index_sets
from factorflow.transforms.gates import GateOptions, gates
from tests.transforms.gate_semantics import same_meaning


def rv(name: str, domain: str = "bool", plates: tuple[str, ...] = (), event: int | None = None
       ) -> VarDecl:
    return VarDecl(name, "random", domain, plates=plates, event=event)


def known(name: str, *plates: str, role: str = "constant", domain: str | None = None
          ) -> VarDecl:
    return VarDecl(name, role, domain, plates=plates)


def call(op: str, out: Ref | None = None, **args: Any) -> Stmt:
    return Stmt(op, (out,) if out else (), tuple(
        (k, v if isinstance(v, Ref | Const) else Const(v)) for k, v in args.items()))


R = Ref
c, i, x, b = R("c"), R("i"), R("x"), R("b")
DIST = R("constDist")


def equal_random(value: Ref, dist: Ref = DIST) -> Stmt:
    return call("ConstrainEqualRandom", value=value, dist=dist)


def bernoulli_true(p: Any = 0.1, out: Ref = b) -> tuple[Stmt, Stmt]:
    return call("Bernoulli", out, p=p), call("ConstrainTrue", value=out)


#: name -> (input program, its condition variables); the seed's tables, in order
SEED: dict[str, tuple[Program, list[str]]] = {
    "if_local": (Program("if_local", (), (rv("c"), rv("b")), (
        If(c, bernoulli_true()),)), ["c"]),
    "if_enter": (Program("if_enter", (), (rv("c"), rv("x"), known("constDist")), (
        If(c, (equal_random(x),)),)), ["c"]),
    "if_enter_array": (Program("if_enter_array", (("i", 3),), (
        rv("c"), rv("array", plates=("i",)), rv("sum", "real")), (
        If(c, (call("Sum", R("sum"), array=R("array", ("i",))),)),)), ["c"]),
    "if_in_loop": (Program("if_in_loop", (("i", 3),), (
        rv("c", plates=("i",)), rv("b", plates=("i",))), (
        For("i", (If(R("c", ("i",)), bernoulli_true(out=R("b", ("i",)))),)),)), ["c"]),
    "if_in_loop_enter": (Program("if_in_loop_enter", (("i", 3),), (
        rv("c", plates=("i",)), rv("array", plates=("i",)), known("constDist")), (
        For("i", (If(R("c", ("i",)), (equal_random(R("array", ("i",))),)),)),)), ["c"]),
    "if_around_loop": (Program("if_around_loop", (("i", 3),), (
        rv("c"), rv("array", plates=("i",)), known("constDist")), (
        If(c, (For("i", (equal_random(R("array", ("i",))),)),)),)), ["c"]),
    "if_around_loops": (Program("if_around_loops", (("k", 2), ("i", 3)), (
        rv("c"), rv("array", plates=("i",)), known("constDist")), (
        If(c, (For("k", (For("i", (equal_random(R("array", ("i",))),)),)),)),)), ["c"]),
    "if_in_loop_around_loop": (Program("if_in_loop_around_loop", (("j", 2), ("i", 3)), (
        rv("c", plates=("j",)), rv("array", plates=("i", "j")), known("constDist")), (
        For("j", (If(R("c", ("j",)), (For("i", (equal_random(R("array", ("i", "j"))),)),)),)),
    )), ["c"]),
    "exit": (Program("exit", (), (
        rv("x"), rv("c"), known("p"), known("q"), known("constDist")), (
        If(c, (call("Bernoulli", x, p=R("p")), equal_random(x))),
        If(c, (call("Bernoulli", x, p=R("q")),), negated=True))), ["c"]),
    "case": (Program("case", (("n", 3),), (
        rv("i", "int", event=3), rv("b"), rv("x"), rv("array", plates=("n",)),
        known("constDist")), (
        If(i, bernoulli_true(), 0),
        If(i, (equal_random(x),), 1),
        If(i, (equal_random(R("array", (i,))),), 2))), ["i"]),
    "switch_local": (Program("switch_local", (("j", 3),), (
        rv("i", "int", event=3), rv("b", plates=("j",))), (
        For("j", (If(i, bernoulli_true(out=R("b", ("j",))), "j"),)),)), ["i"]),
    "switch_enter": (Program("switch_enter", (("j", 3),), (rv("i", "int", event=3), rv("b")), (
        call("Bernoulli", b, p=0.1),
        For("j", (If(i, (call("ConstrainTrue", value=b),), "j"),)))), ["i"]),
    "switch_enter_one": (Program("switch_enter_one", (("j", 3),), (
        rv("i", "int", event=3), rv("x", plates=("j",)), known("constDist")), (
        For("j", (If(i, (equal_random(R("x", (i,))),), "j"),)),)), ["i"]),
    "switch_exit": (Program("switch_exit", (("j", 3),), (
        rv("x"), rv("i", "int", event=3), known("const", "j"), known("constDist", "j")), (
        For("j", (If(i, (call("Bernoulli", x, p=R("const", (i,))),
                         equal_random(x, R("constDist", (i,)))), "j"),)),)), ["i"]),
}


d = R("d")
#: beyond the seed
MORE: dict[str, tuple[Program, list[str]]] = {
    "if_else_enter": (Program("if_else_enter", (), (rv("c"), rv("x"), known("constDist")), (
        If(c, (equal_random(x),)), If(c, (equal_random(x),), negated=True))), ["c"]),
    "nested_enter": (Program("nested_enter", (), (
        rv("c"), rv("d"), rv("x"), known("constDist")), (
        If(c, (If(d, (equal_random(x),)), call("ConstrainTrue", value=d))),)), ["c", "d"]),
    "nested_exit": (Program("nested_exit", (), (
        rv("c"), rv("d"), rv("x"), known("constDist")), (
        If(c, (If(d, (call("Bernoulli", x, p=0.1),)),
               If(d, (call("Bernoulli", x, p=0.2),), negated=True))),
        If(c, (call("Bernoulli", x, p=0.3),), negated=True),
        equal_random(x))), ["c", "d"]),
    "observed_condition": (Program("observed_condition", (), (
        known("c", role="observed", domain="bool"), rv("d"), rv("x"), known("constDist")), (
        If(c, (If(d, (equal_random(x),)), equal_random(x))),)), ["c", "d"]),
    "mixture": (Program("mixture", (("n", 2), ("k", 3)), (
        rv("z", "int", ("n",), 3), rv("means", "real", ("k",)), rv("prec", "positive"),
        known("x", "n", role="observed", domain="real"), known("w")), (
        For("k", (call("Gaussian", R("means", ("k",)), mean=0.0, precision=0.01),)),
        call("Gamma", R("prec"), shape=1.0, rate=1.0),
        For("n", (call("Discrete", R("z", ("n",)), probs=R("w")),
                  For("k", (If(R("z", ("n",)), (call(
                      "Gaussian", R("x", ("n",)), mean=R("means", (R("z", ("n",)),)),
                      precision=R("prec")),), "k"),)))))), ["z"]),
    # issue 15 item 5: uses of an array grouped into disjoint index sets (one clone each)
    "index_set_overlap": (Program("index_set_overlap", (("i", 3),), (
        rv("c"), rv("array", plates=("i",)), known("constDist")), (
        If(c, (equal_random(R("array", (0,))), For("i", (equal_random(R("array", ("i",))),)))),
    )), ["c"]),
    "index_set_two_cases": (Program("index_set_two_cases", (("i", 3),), (
        rv("c"), rv("array", plates=("i",)), known("constDist")), (
        If(c, (For("i", (equal_random(R("array", ("i",))),)),)),
        If(c, (equal_random(R("array", (1,))),), negated=True))), ["c"]),
    "index_set_disjoint": (Program("index_set_disjoint", (("i", 3),), (
        rv("c"), rv("array", plates=("i",)), known("constDist")), (
        If(c, (equal_random(R("array", (0,))), equal_random(R("array", (2,))))),)), ["c"]),
    "index_set_nested": (Program("index_set_nested", (("i", 3),), (
        rv("c"), rv("d"), rv("array", plates=("i",)), known("constDist")), (
        If(c, (If(d, (equal_random(R("array", (0,))),
                      For("i", (equal_random(R("array", ("i",))),)))),)),)), ["c", "d"]),
    "index_set_switch": (Program("index_set_switch", (("i", 3), ("k", 2)), (
        rv("s", "int", (), 2), rv("array", plates=("i",)), known("constDist")), (
        For("k", (If(R("s"), (equal_random(R("array", (0,))),
                              For("i", (equal_random(R("array", ("i",))),))), "k"),)),)),
        ["s"]),
    "index_set_gather": (Program("index_set_gather", (("i", 3), ("n", 2)), (
        rv("c"), rv("array", plates=("i",)), known("idx", "n", domain="int"),
        known("constDist")), (
        If(c, (For("n", (equal_random(R("array", (R("idx", ("n",)),))),)),)),)), ["c"]),
    # a gather over a plate opened inside a switch: the whole array enters, each case's
    # copy has the case axis last and is gathered along its first
    "gather_switch": (Program("gather_switch", (("i", 3), ("n", 2), ("k", 2)), (
        rv("s", "int", (), 2), rv("array", plates=("i",)), known("idx", "n", domain="int"),
        known("constDist")), (
        For("k", (If(R("s"), (For("n", (equal_random(R("array", (R("idx", ("n",)),))),)),),
                     "k"),)),)), ["s"]),
    # a gather inside a gate inside a loop: copied out before the gate, over the loops
    "gather_in_loop": (Program("gather_in_loop", (("i", 3), ("m", 2), ("n", 2)), (
        rv("c", plates=("m",)), rv("array", plates=("i",)),
        known("idx", "m", "n", domain="int"), known("constDist")), (
        For("m", (If(R("c", ("m",)), (For("n", (equal_random(
            R("array", (R("idx", ("m", "n")),))),)),)),)),)), ["c"]),
}

#: the expected output of each example: new ranges and declarations, then the body
EXPECTED = {
    "if_local": """\
ranges c__cases__k=2
random bool c__cases[c__cases__k]  # cases of c
c__cases[c__cases__k] = Gate.Cases(selector=c)
if c__cases[0]:
    b = Bernoulli(p=0.1)
    ConstrainTrue(value=b)
""",
    "if_enter": """\
ranges c__cases__k=2, x__cond_c__k=1
random bool c__cases[c__cases__k]  # cases of c
random bool x__cond_c[x__cond_c__k]  # x in the gate on c
c__cases[c__cases__k] = Gate.Cases(selector=c)
x__cond_c[x__cond_c__k] = Gate.EnterPartial(cases=c__cases[c__cases__k], value=x, indices: (0))
if c__cases[0]:
    ConstrainEqualRandom(value=x__cond_c[0], dist=constDist)
""",
    "if_enter_array": """\
ranges i=3, c__cases__k=2, array__cond_c__k=1
random bool c__cases[c__cases__k]  # cases of c
random bool array__cond_c[i][array__cond_c__k]  # array in the gate on c
c__cases[c__cases__k] = Gate.Cases(selector=c)
array__cond_c[i, array__cond_c__k] = Gate.EnterPartial(cases=c__cases[c__cases__k], \
value=array[i], indices: (0))
if c__cases[0]:
    sum = Sum(array=array__cond_c[i, 0])
""",
    "if_in_loop": """\
ranges i=3, c__i_cases__k=2
random bool c__i_cases[i][c__i_cases__k]  # cases of c[i]
for i:
    c__i_cases[i, c__i_cases__k] = Gate.Cases(selector=c[i])
    if c__i_cases[i, 0]:
        b[i] = Bernoulli(p=0.1)
        ConstrainTrue(value=b[i])
""",
    "if_in_loop_enter": """\
ranges i=3, c__i_cases__k=2, array__i_cond_c_i__k=1
random bool c__i_cases[i][c__i_cases__k]  # cases of c[i]
random bool array__i_cond_c_i[i][array__i_cond_c_i__k]  # array in the gate on c[i]
for i:
    c__i_cases[i, c__i_cases__k] = Gate.Cases(selector=c[i])
    array__i_cond_c_i[i, array__i_cond_c_i__k] = Gate.EnterPartial(cases=c__i_cases[i, \
c__i_cases__k], value=array[i], indices: (0))
    if c__i_cases[i, 0]:
        ConstrainEqualRandom(value=array__i_cond_c_i[i, 0], dist=constDist)
""",
    "if_around_loop": """\
ranges i=3, c__cases__k=2, array__i_cond_c__k=1
random bool c__cases[c__cases__k]  # cases of c
random bool array__i_cond_c[i][array__i_cond_c__k]  # array in the gate on c
c__cases[c__cases__k] = Gate.Cases(selector=c)
for i:
    array__i_cond_c[i, array__i_cond_c__k] = Gate.EnterPartial(cases=c__cases[c__cases__k], \
value=array[i], indices: (0))
    if c__cases[0]:
        ConstrainEqualRandom(value=array__i_cond_c[i, 0], dist=constDist)
""",
    "alternative": """\
ranges i=3, c__cases__k=2, array__cond_c__k=1
random bool c__cases[c__cases__k]  # cases of c
random bool array__cond_c[i][array__cond_c__k]  # array in the gate on c
c__cases[c__cases__k] = Gate.Cases(selector=c)
array__cond_c[i, array__cond_c__k] = Gate.EnterPartial(cases=c__cases[c__cases__k], \
value=array[i], indices: (0))
for i:
    if c__cases[0]:
        ConstrainEqualRandom(value=array__cond_c[i, 0], dist=constDist)
""",
    "if_around_loops": """\
ranges k=2, i=3, c__cases__k=2, array__i_cond_c__k=1
random bool c__cases[c__cases__k]  # cases of c
random bool array__i_cond_c[i][array__i_cond_c__k]  # array in the gate on c
c__cases[c__cases__k] = Gate.Cases(selector=c)
for i:
    array__i_cond_c[i, array__i_cond_c__k] = Gate.EnterPartial(cases=c__cases[c__cases__k], \
value=array[i], indices: (0))
for k:
    for i:
        if c__cases[0]:
            ConstrainEqualRandom(value=array__i_cond_c[i, 0], dist=constDist)
""",
    "if_in_loop_around_loop": """\
ranges j=2, i=3, c__j_cases__k=2, array__i_j_cond_c_j__k=1
random bool c__j_cases[j][c__j_cases__k]  # cases of c[j]
random bool array__i_j_cond_c_j[j][i][array__i_j_cond_c_j__k]  # array in the gate on c[j]
for j:
    c__j_cases[j, c__j_cases__k] = Gate.Cases(selector=c[j])
    for i:
        array__i_j_cond_c_j[j, i, array__i_j_cond_c_j__k] = Gate.EnterPartial(cases=c__j_cases[j, \
c__j_cases__k], value=array[i, j], indices: (0))
        if c__j_cases[j, 0]:
            ConstrainEqualRandom(value=array__i_j_cond_c_j[j, i, 0], dist=constDist)
""",
    "exit": """\
ranges c__cases__k=2
random bool c__cases[c__cases__k]  # cases of c
random bool x__cond_c[c__cases__k]  # x in the gate on c
c__cases[c__cases__k] = Gate.Cases(selector=c)
if c__cases[0]:
    x__cond_c[0] = Bernoulli(p=p)
    ConstrainEqualRandom(value=x__cond_c[0], dist=constDist)
if c__cases[1]:
    x__cond_c[1] = Bernoulli(p=q)
x = Gate.Exit(cases=c__cases[c__cases__k], values=x__cond_c[c__cases__k])
""",
    "case": """\
ranges n=3, i__cases__k=3, x__cond_i__k=1
random bool i__cases[i__cases__k]  # cases of i
random bool x__cond_i[x__cond_i__k]  # x in the gate on i
random bool array__2_cond_i  # array in the gate on i
i__cases[i__cases__k] = Gate.Cases(selector=i)
if i__cases[0]:
    b = Bernoulli(p=0.1)
    ConstrainTrue(value=b)
x__cond_i[x__cond_i__k] = Gate.EnterPartial(cases=i__cases[i__cases__k], value=x, indices: (1))
if i__cases[1]:
    ConstrainEqualRandom(value=x__cond_i[0], dist=constDist)
array__2_cond_i = Gate.EnterOne(cases=i__cases[i__cases__k], value=array[2], index: 2)
if i__cases[2]:
    ConstrainEqualRandom(value=array__2_cond_i, dist=constDist)
""",
    "switch_local": """\
ranges j=3
random bool i__cases[j]  # cases of i
i__cases[j] = Gate.Cases(selector=i)
for j:
    if i__cases[j]:
        b[j] = Bernoulli(p=0.1)
        ConstrainTrue(value=b[j])
""",
    "switch_enter": """\
ranges j=3
random bool i__cases[j]  # cases of i
random bool b__cond_i[j]  # b in the gate on i
random bool b__cond_i_j[j]  # b in case j of i
b = Bernoulli(p=0.1)
i__cases[j] = Gate.Cases(selector=i)
b__cond_i[j] = Gate.Enter(cases=i__cases[j], value=b)
for j:
    if i__cases[j]:
        b__cond_i_j[j] = Copy(value=b__cond_i[j])
        ConstrainTrue(value=b__cond_i_j[j])
""",
    "switch_enter_one": """\
ranges j=3
random bool i__cases[j]  # cases of i
random bool x__j_cond_i[j]  # x in the gate on i
i__cases[j] = Gate.Cases(selector=i)
for j:
    if i__cases[j]:
        x__j_cond_i[j] = Gate.EnterOne(cases=i__cases[j], value=x[j], index: j)
        ConstrainEqualRandom(value=x__j_cond_i[j], dist=constDist)
""",
    "switch_exit": """\
ranges j=3
random bool i__cases[j]  # cases of i
random bool x__cond_i[j]  # x in the gate on i
random bool x__cond_i_j[j]  # x in case j of i
i__cases[j] = Gate.Cases(selector=i)
for j:
    if i__cases[j]:
        x__cond_i_j[j] = Bernoulli(p=const[j])
        x__cond_i[j] = Copy(value=x__cond_i_j[j])
        ConstrainEqualRandom(value=x__cond_i_j[j], dist=constDist[j])
x = Gate.Exit(cases=i__cases[j], values=x__cond_i[j])
""",
    "if_else_enter": """\
ranges c__cases__k=2, x__cond_c__k=2
random bool c__cases[c__cases__k]  # cases of c
random bool x__cond_c[x__cond_c__k]  # x in the gate on c
c__cases[c__cases__k] = Gate.Cases(selector=c)
x__cond_c[x__cond_c__k] = Gate.EnterPartial(cases=c__cases[c__cases__k], value=x, indices: (0, 1))
if c__cases[0]:
    ConstrainEqualRandom(value=x__cond_c[0], dist=constDist)
if c__cases[1]:
    ConstrainEqualRandom(value=x__cond_c[1], dist=constDist)
""",
    "nested_enter": """\
ranges c__cases__k=2, d__cond_c__k=1, d__cases__k=2, x__cond_c__k=1, x__cond_c__0_cond_d__k=1
random bool c__cases[c__cases__k]  # cases of c
random bool d__cond_c[d__cond_c__k]  # d in the gate on c
random bool d__cases[d__cases__k]  # cases of d
random bool x__cond_c[x__cond_c__k]  # x in the gate on c
random bool x__cond_c__0_cond_d[x__cond_c__0_cond_d__k]  # x in the gate on d
c__cases[c__cases__k] = Gate.Cases(selector=c)
d__cond_c[d__cond_c__k] = Gate.EnterPartial(cases=c__cases[c__cases__k], value=d, indices: (0))
x__cond_c[x__cond_c__k] = Gate.EnterPartial(cases=c__cases[c__cases__k], value=x, indices: (0))
if c__cases[0]:
    d__cases[d__cases__k] = Gate.Cases(selector=d__cond_c[0])
    x__cond_c__0_cond_d[x__cond_c__0_cond_d__k] = Gate.EnterPartial(cases=d__cases[d__cases__k], \
value=x__cond_c[0], indices: (0))
    if d__cases[0]:
        ConstrainEqualRandom(value=x__cond_c__0_cond_d[0], dist=constDist)
    ConstrainTrue(value=d__cond_c[0])
""",
    "nested_exit": """\
ranges c__cases__k=2, d__cond_c__k=1, d__cases__k=2
random bool c__cases[c__cases__k]  # cases of c
random bool d__cond_c[d__cond_c__k]  # d in the gate on c
random bool d__cases[d__cases__k]  # cases of d
random bool x__cond_c[c__cases__k]  # x in the gate on c
random bool x__cond_c__0_cond_d[d__cases__k]  # x in the gate on d
c__cases[c__cases__k] = Gate.Cases(selector=c)
d__cond_c[d__cond_c__k] = Gate.EnterPartial(cases=c__cases[c__cases__k], value=d, indices: (0))
if c__cases[0]:
    d__cases[d__cases__k] = Gate.Cases(selector=d__cond_c[0])
    if d__cases[0]:
        x__cond_c__0_cond_d[0] = Bernoulli(p=0.1)
    if d__cases[1]:
        x__cond_c__0_cond_d[1] = Bernoulli(p=0.2)
    x__cond_c[0] = Gate.Exit(cases=d__cases[d__cases__k], values=x__cond_c__0_cond_d[d__cases__k])
if c__cases[1]:
    x__cond_c[1] = Bernoulli(p=0.3)
x = Gate.Exit(cases=c__cases[c__cases__k], values=x__cond_c[c__cases__k])
ConstrainEqualRandom(value=x, dist=constDist)
""",
    "observed_condition": """\
ranges d__cases__k=2, x__cond_d__k=1
random bool d__cases[d__cases__k]  # cases of d
random bool x__cond_d[x__cond_d__k]  # x in the gate on d
d__cases[d__cases__k] = Gate.Cases(selector=d)
x__cond_d[x__cond_d__k] = Gate.EnterPartial(cases=d__cases[d__cases__k], value=x, indices: (0))
if c:
    if d__cases[0]:
        ConstrainEqualRandom(value=x__cond_d[0], dist=constDist)
    ConstrainEqualRandom(value=x, dist=constDist)
""",
    "mixture": """\
ranges n=2, k=3
random bool z__n_cases[n][k]  # cases of z[n]
random real means__k_cond_z_n[n][k]  # means in the gate on z[n]
random positive prec__cond_z_n[n][k]  # prec in the gate on z[n]
random positive prec__cond_z_n_k[n][k]  # prec in case k of z[n]
for k:
    means[k] = Gaussian(mean=0.0, precision=0.01)
prec = Gamma(shape=1.0, rate=1.0)
for n:
    z[n] = Discrete(probs=w)
    z__n_cases[n, k] = Gate.Cases(selector=z[n])
    prec__cond_z_n[n, k] = Gate.Enter(cases=z__n_cases[n, k], value=prec)
    for k:
        if z__n_cases[n, k]:
            means__k_cond_z_n[n, k] = Gate.EnterOne(cases=z__n_cases[n, k], value=means[k], \
index: k)
            prec__cond_z_n_k[n, k] = Copy(value=prec__cond_z_n[n, k])
            x[n] = Gaussian(mean=means__k_cond_z_n[n, k], precision=prec__cond_z_n_k[n, k])
""",
    "index_set_overlap": """\
ranges i=3, c__cases__k=2, array__cond_c__k=1
random bool c__cases[c__cases__k]  # cases of c
random bool array__cond_c[i][array__cond_c__k]  # array in the gate on c
c__cases[c__cases__k] = Gate.Cases(selector=c)
array__cond_c[i, array__cond_c__k] = Gate.EnterPartial(cases=c__cases[c__cases__k], value=array[i], \
indices: (0))
if c__cases[0]:
    ConstrainEqualRandom(value=array__cond_c[0, 0], dist=constDist)
for i:
    if c__cases[0]:
        ConstrainEqualRandom(value=array__cond_c[i, 0], dist=constDist)
""",
    "index_set_two_cases": """\
ranges i=3, c__cases__k=2, array__i_cond_c__k=2
random bool c__cases[c__cases__k]  # cases of c
random bool array__i_cond_c[i][array__i_cond_c__k]  # array in the gate on c
c__cases[c__cases__k] = Gate.Cases(selector=c)
for i:
    array__i_cond_c[i, array__i_cond_c__k] = Gate.EnterPartial(cases=c__cases[c__cases__k], \
value=array[i], indices: (0, 1))
    if c__cases[0]:
        ConstrainEqualRandom(value=array__i_cond_c[i, 0], dist=constDist)
if c__cases[1]:
    ConstrainEqualRandom(value=array__i_cond_c[1, 1], dist=constDist)
""",
    "index_set_disjoint": """\
ranges i=3, c__cases__k=2, array__0_cond_c__k=1, array__2_cond_c__k=1
random bool c__cases[c__cases__k]  # cases of c
random bool array__0_cond_c[array__0_cond_c__k]  # array in the gate on c
random bool array__2_cond_c[array__2_cond_c__k]  # array in the gate on c
c__cases[c__cases__k] = Gate.Cases(selector=c)
array__0_cond_c[array__0_cond_c__k] = Gate.EnterPartial(cases=c__cases[c__cases__k], \
value=array[0], indices: (0))
array__2_cond_c[array__2_cond_c__k] = Gate.EnterPartial(cases=c__cases[c__cases__k], \
value=array[2], indices: (0))
if c__cases[0]:
    ConstrainEqualRandom(value=array__0_cond_c[0], dist=constDist)
    ConstrainEqualRandom(value=array__2_cond_c[0], dist=constDist)
""",
    "index_set_nested": """\
ranges i=3, c__cases__k=2, d__cond_c__k=1, d__cases__k=2, array__cond_c__k=1, \
array__cond_c__0_cond_d__k=1
random bool c__cases[c__cases__k]  # cases of c
random bool d__cond_c[d__cond_c__k]  # d in the gate on c
random bool d__cases[d__cases__k]  # cases of d
random bool array__cond_c[i][array__cond_c__k]  # array in the gate on c
random bool array__cond_c__0_cond_d[i][array__cond_c__0_cond_d__k]  # array in the gate on d
c__cases[c__cases__k] = Gate.Cases(selector=c)
d__cond_c[d__cond_c__k] = Gate.EnterPartial(cases=c__cases[c__cases__k], value=d, indices: (0))
array__cond_c[i, array__cond_c__k] = Gate.EnterPartial(cases=c__cases[c__cases__k], \
value=array[i], indices: (0))
if c__cases[0]:
    d__cases[d__cases__k] = Gate.Cases(selector=d__cond_c[0])
    array__cond_c__0_cond_d[i, \
array__cond_c__0_cond_d__k] = Gate.EnterPartial(cases=d__cases[d__cases__k], \
value=array__cond_c[i, 0], indices: (0))
    if d__cases[0]:
        ConstrainEqualRandom(value=array__cond_c__0_cond_d[0, 0], dist=constDist)
for i:
    if c__cases[0]:
        if d__cases[0]:
            ConstrainEqualRandom(value=array__cond_c__0_cond_d[i, 0], dist=constDist)
""",
    "index_set_switch": """\
ranges i=3, k=2
random bool s__cases[k]  # cases of s
random bool array__cond_s[i][k]  # array in the gate on s
random bool array__cond_s_k[k][i]  # array in case k of s
s__cases[k] = Gate.Cases(selector=s)
array__cond_s[i, k] = Gate.Enter(cases=s__cases[k], value=array[i])
for k:
    for i:
        if s__cases[k]:
            array__cond_s_k[k, i] = Copy(value=array__cond_s[i, k])
    if s__cases[k]:
        ConstrainEqualRandom(value=array__cond_s_k[k, 0], dist=constDist)
    for i:
        if s__cases[k]:
            ConstrainEqualRandom(value=array__cond_s_k[k, i], dist=constDist)
""",
    "index_set_gather": """\
ranges i=3, n=2, c__cases__k=2, array__cond_c__k=1
random bool c__cases[c__cases__k]  # cases of c
random bool array__cond_c[i][array__cond_c__k]  # array in the gate on c
random bool array__cond_c_0[i]  # array in case 0 of c
c__cases[c__cases__k] = Gate.Cases(selector=c)
array__cond_c[i, array__cond_c__k] = Gate.EnterPartial(cases=c__cases[c__cases__k], value=array[i], \
indices: (0))
for i:
    if c__cases[0]:
        array__cond_c_0[i] = Copy(value=array__cond_c[i, 0])
for n:
    if c__cases[0]:
        ConstrainEqualRandom(value=array__cond_c_0[idx[n]], dist=constDist)
""",
    "gather_switch": """\
ranges i=3, n=2, k=2
random bool s__cases[k]  # cases of s
random bool array__cond_s[i][k]  # array in the gate on s
random bool array__cond_s_k[i][k]  # array in case k of s
s__cases[k] = Gate.Cases(selector=s)
array__cond_s[i, k] = Gate.Enter(cases=s__cases[k], value=array[i])
for k:
    for i:
        if s__cases[k]:
            array__cond_s_k[i, k] = Copy(value=array__cond_s[i, k])
    for n:
        if s__cases[k]:
            ConstrainEqualRandom(value=array__cond_s_k[idx[n], k], dist=constDist)
""",
    "gather_in_loop": """\
ranges i=3, m=2, n=2, c__m_cases__k=2, array__idx_m_n__m_n_cond_c_m__k=1
random bool c__m_cases[m][c__m_cases__k]  # cases of c[m]
random bool array__idx_m_n[m][n]  # array[idx[m, n]]
random bool array__idx_m_n__m_n_cond_c_m[m][n][array__idx_m_n__m_n_cond_c_m__k]  \
# array[idx[m, n]] in the gate on c[m]
for m:
    c__m_cases[m, c__m_cases__k] = Gate.Cases(selector=c[m])
    for n:
        array__idx_m_n[m, n] = Copy(value=array[idx[m, n]])
    for n:
        array__idx_m_n__m_n_cond_c_m[m, n, array__idx_m_n__m_n_cond_c_m__k] = \
Gate.EnterPartial(cases=c__m_cases[m, c__m_cases__k], value=array__idx_m_n[m, n], indices: (0))
        if c__m_cases[m, 0]:
            ConstrainEqualRandom(value=array__idx_m_n__m_n_cond_c_m[m, n, 0], dist=constDist)
""",
}

CASES = {**SEED, **MORE, "alternative": SEED["if_around_loop"]}


def gated(program: Program, **options: Any) -> tuple[Program, str]:
    """The converted program (verified) and its text less the input's declarations."""
    out = check(gates(program, GateOptions(**options)))
    old = {format_decl(d) for d in program.decls}
    text = "\n".join(line for line in format_program(out).splitlines()[1:] if line not in old)
    return out, text + "\n"


def options(name: str) -> dict[str, Any]:
    return {"enter_whole_arrays": True} if name == "alternative" else {}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_golden(name: str) -> None:
    program, _ = CASES[name]
    assert gated(program, **options(name))[1] == EXPECTED[name]


@pytest.mark.parametrize("name", list(EXPECTED))
def test_meaning(name: str) -> None:
    program, conditions = CASES[name]
    out, _ = gated(program, **options(name))
    assert same_meaning(program, out, conditions) >= 2


def test_meaning_check_fails_on_a_wrong_gate() -> None:
    """The trace comparison notices a statement moved to the wrong case."""
    program, conditions = SEED["exit"]
    out, _ = gated(program)
    first, *rest = out.body[1:]
    assert isinstance(first, If)
    wrong = If(Ref("c__cases", (1,)), first.body)
    with pytest.raises(AssertionError, match="traces differ"):
        same_meaning(program, Program(out.name, out.ranges, out.decls,
                                      (out.body[0], wrong, *rest)), conditions)


def test_declarations() -> None:
    """Cases arrays do not send evidence; clones say what they clone; exits are derived."""
    out, _ = gated(SEED["exit"][0])
    decls = {d.name: d for d in out.decls}
    assert decls["c__cases"].attr("do_not_send_evidence") and decls["c__cases"].attr("derived")
    assert decls["x__cond_c"].attr("exit_of") == "x" and decls["x"].attr("derived")
    out, _ = gated(SEED["if_enter"][0])
    clone = {d.name: d for d in out.decls}["x__cond_c"]
    assert clone.attr("clone_of") == "x" and clone.attr("gate") == "c__cases"


def test_pure() -> None:
    """The input program is not changed, and converting twice gives the same text."""
    program = SEED["case"][0]
    before = format_program(program)
    assert gated(program)[1] == gated(program)[1]
    assert format_program(program) == before


BAD = {
    "real condition": (Program("bad", (), (rv("r", "real"), rv("b")), (
        If(R("r"), (call("ConstrainTrue", value=b),)),)), "r is real-valued"),
    "case outside range": (Program("bad", (), (rv("i", "int", event=3), rv("b")), (
        If(i, (call("ConstrainTrue", value=b),), 3),)), "case 3 is outside the values of i"),
    "switch range mismatch": (Program("bad", (("j", 2),), (rv("i", "int", event=3), rv("b")), (
        For("j", (If(i, (call("ConstrainTrue", value=b),), "j"),)),)),
        "switch range j has 2 values but i has 3"),
    "read outside, defined in one case": (Program("bad", (), (rv("c"), rv("x")), (
        If(c, (call("Bernoulli", x, p=0.3),)), call("ConstrainTrue", value=x))),
        r"x is defined inside the gate on c but not in its case\(s\) \[1\]"),
    "condition inside an unrelated loop": (Program("bad", (("n", 3),), (
        rv("c"), rv("x", plates=("n",))), (
        For("n", (If(c, (call("Bernoulli", R("x", ("n",)), p=0.3),)),)),)),
        "gate on c: the condition does not depend on the loop over n"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input(name: str) -> None:
    program, message = BAD[name]
    with pytest.raises(ModelError, match=message):
        gates(program)


# ----- random nested gates ------------------------------------------------------------
@st.composite
def nested_programs(draw, depth: int = 2) -> Program:
    """Gates on c0, c1 (bool) and i (three values) nested up to ``depth`` deep, reading
    variables defined outside (enter) and defining some in every branch (exit)."""
    decls = [rv("c0"), rv("c1"), rv("i", "int", event=3)] + [rv(f"x{k}") for k in range(3)]
    body: list = [call("Bernoulli", R("c0"), p=0.3), call("Bernoulli", R("c1"), p=0.6),
                  call("Discrete", i, probs=R("w"))]
    body += [call("Bernoulli", R(f"x{k}"), p=0.5) for k in range(3)]
    decls.append(known("w"))

    def block(level: int) -> list:
        out: list = []
        for _ in range(draw(st.integers(1, 3))):
            kind = draw(st.sampled_from(["use", "if", "exit", "case"] if level < depth
                                        else ["use"]))
            if kind == "use":
                out.append(call("ConstrainTrue", value=R(f"x{draw(st.integers(0, 2))}")))
            elif kind == "if":
                out.append(If(R(draw(st.sampled_from(["c0", "c1"]))), tuple(block(level + 1)),
                              negated=draw(st.booleans())))
            elif kind == "exit":
                y = R(f"y{len(decls)}")
                decls.append(rv(y.var))
                c_ = R(draw(st.sampled_from(["c0", "c1"])))
                out += [If(c_, (call("Bernoulli", y, p=0.2), *block(level + 1))),
                        If(c_, (call("Bernoulli", y, p=0.7),), negated=True),
                        call("ConstrainTrue", value=y)]
            else:
                for v in sorted(draw(st.sets(st.integers(0, 2), min_size=1))):
                    out.append(If(i, tuple(block(level + 1)), v))
        return out

    body += block(0)
    return Program("random", (), tuple(decls), tuple(body))


@settings(max_examples=60, deadline=None)
@given(nested_programs())
def test_random_nested_gates_keep_their_meaning(program: Program) -> None:
    """Any nesting of ifs and cases, with enter and exit variables, converts to a verified
    program with the same factor traces for every value of the conditions."""
    out, _ = gated(program)
    assert same_meaning(program, out, ["c0", "c1", "i"]) == 12
    assert not any(n.value is not None for n in _ifs(out.body))


def _ifs(nodes) -> list[If]:
    found: list[If] = []
    for n in nodes:
        if isinstance(n, If):
            found += [n] + _ifs(n.body)
        elif isinstance(n, For):
            found += _ifs(n.body)
    return found


@st.composite
def plated_programs(draw, depth: int = 2) -> Program:
    """Gates in and around a plate ``n``: ifs on ``c`` (outside it) and ``d[n]``, switches
    ``for k: if s[n] == k`` reading ``m[s[n]]``, ``m[k]`` and outer variables, loops inside
    gates, and exit variables."""
    decls = [rv("c"), rv("d", plates=("n",)), rv("s", "int", ("n",), 3), rv("x"),
             rv("xn", plates=("n",)), rv("m", plates=("k",)), known("w")]
    body: list = [call("Bernoulli", R("c"), p=0.3), call("Bernoulli", R("x"), p=0.5),
                  For("k", (call("Bernoulli", R("m", ("k",)), p=0.5),)),
                  For("n", (call("Bernoulli", R("d", ("n",)), p=0.4),
                            call("Discrete", R("s", ("n",)), probs=R("w")),
                            call("Bernoulli", R("xn", ("n",)), p=0.5)))]

    def block(level: int, in_n: bool, in_k: bool) -> list:
        reads = [R("x")] + ([R("xn", ("n",))] if in_n else []) + (
            [R("m", (R("s", ("n",)),)), R("m", ("k",))] if in_k else [])
        kinds = ["use", "whole"] + (["loop"] if not in_n else []) + (
            (["if c"] if not in_n else ["if d", "exit"] if not in_k else []) +
            (["switch"] if in_n and not in_k else []) if level < depth else [])
        out: list = []
        for _ in range(draw(st.integers(1, 3))):
            kind = draw(st.sampled_from(kinds))
            if kind == "use":
                out.append(call("ConstrainTrue", value=draw(st.sampled_from(reads))))
            elif kind == "whole":
                out.append(call("Sum", None, array=R("xn", ("n",))))
            elif kind == "loop":
                out.append(For("n", tuple(block(level, True, in_k))))
            elif kind == "if c":
                out.append(If(R("c"), tuple(block(level + 1, in_n, in_k)),
                              negated=draw(st.booleans())))
            elif kind == "if d":
                out.append(If(R("d", ("n",)), tuple(block(level + 1, in_n, in_k)),
                              negated=draw(st.booleans())))
            elif kind == "exit":
                y = R(f"y{len(decls)}", ("n",))
                decls.append(rv(y.var, plates=("n",)))
                out += [If(R("d", ("n",)), (call("Bernoulli", y, p=0.2),
                                            *block(level + 1, in_n, in_k))),
                        If(R("d", ("n",)), (call("Bernoulli", y, p=0.7),), negated=True),
                        call("ConstrainTrue", value=y)]
            else:
                out.append(For("k", (If(R("s", ("n",)), tuple(block(level + 1, True, True)),
                                        "k"),)))
        return out

    body += block(0, False, False)
    return Program("plated", (("n", 2), ("k", 3)), tuple(decls), tuple(body))


@settings(max_examples=60, deadline=None)
@given(plated_programs())
def test_random_gates_in_and_around_plates_keep_their_meaning(program: Program) -> None:
    out, _ = gated(program)
    assert same_meaning(program, out, ["c", "d", "s"]) == 2 * 4 * 9


def test_index_sets_group_overlapping_patterns() -> None:
    """``index_sets``: overlapping patterns (transitively) share the pattern of their set;
    disjoint literals stay apart; a gather covers its whole axis."""
    plates = ("i", "j")
    assert index_sets([(0, "j"), ("i", 0), (2, 0), (2, 1)], plates) == {
        (0, "j"): ("i", "j"), ("i", 0): ("i", "j"), (2, 0): ("i", "j")}  # (2, 1): apart
    assert index_sets([(0, 1), (0, 2), (1, 1)], plates) == {}   # pairwise disjoint
    assert index_sets([(0, "j"), (0, 1)], plates) == {(0, 1): (0, "j")}
    assert index_sets([("k", 1)], plates) == {}   # another range: not grouped
    gather = R("idx", ("n",))
    assert index_sets([(gather, 1)], plates, lambda r: r.var == "idx") == {
        (gather, 1): ("i", 1)}


@pytest.mark.parametrize(("name", "enter"), [("index_set_nested", "Gate.EnterPartial"),
                                             ("index_set_switch", "Gate.Enter(")])
def test_grouping_at_every_gate_level_and_in_a_switch(name: str, enter: str,
                                                      monkeypatch) -> None:
    """``array[0]`` beside ``array[i]`` in a gate nested in another, and in a switch: one
    clone per gate (ungrouped: one per expression, at the inner gate and in the switch),
    and the same meaning both ways (every assignment of the conditions)."""
    program, conditions = MORE[name]
    out, text = gated(program)
    assert text.count(enter) == (3 if name == "index_set_nested" else 1)  # (d enters c)
    assert same_meaning(program, out, conditions) >= 2
    import factorflow.transforms.gates as gate_pass
    analysis = gate_pass.analyze_gates
    monkeypatch.setattr(gate_pass, "analyze_gates",
                        lambda p: replace(analysis(p), groups={}))
    plain, plain_text = gated(program)
    assert plain_text.count(enter) == (5 if name == "index_set_nested" else 2)
    assert same_meaning(program, plain, conditions) >= 2


def test_overlapping_uses_share_one_clone_and_meaning() -> None:
    """Without the grouping ``array[0]`` beside ``array[i]`` entered element 0 twice (two
    EnterPartial clones of one element); with it, one clone, and the same meaning."""
    program, conditions = MORE["index_set_overlap"]
    out, text = gated(program)
    assert text.count("Gate.EnterPartial") == 1 and "array__0_cond_c" not in text
    assert same_meaning(program, out, conditions) >= 2
