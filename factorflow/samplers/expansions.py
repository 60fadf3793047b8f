"""Scale-mixture expansions discovered by exploring rewrites (seed 003, AeMCMC #46).

A heavy-tailed law has no conjugate conditional, but it is a *mixture* of laws that
have one: a Student-t is a Gaussian whose precision is scaled by a Gamma variable, a
Laplace a Gaussian whose variance is Exponential, a half-Cauchy the root of an inverse
Gamma whose scale is itself inverse Gamma. Sampling the mixing variable as an extra
(auxiliary) variable makes every conditional conjugate — but only some expansions help,
and AeMCMC commits to the first it matches. Here every statement's law goes into one
e-graph (:class:`Law` terms over :class:`Param` terms), the rules :data:`SCALE_MIXTURES`
saturate it, and every form each statement can take is read back
(:func:`explore_statements`): the expansions stay ephemeral until the compiler has
counted, for each combination of forms, how many variables get a conjugate conditional
(:func:`choose`). The combination with the most conjugate variables, then the fewest
auxiliaries, wins; ``compiled.samplers`` shows the rewrites that produced it.

A mixture ``Law.mixture(kind, mixing, kernel)`` is ∫ kernel(x | a) mixing(a) da, the
auxiliary ``a`` being ``Param.aux(kind)`` inside ``kernel``; it becomes the variable
``<x>__<kind>`` over the plates of ``x``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from egglog import EGraph, Expr, StringLike, f64Like, rewrite, ruleset, vars_

from factorflow.model.core import FactorCall, Variable


class Param(Expr):
    """A parameter of a law: an argument of the statement (by name), a number, the
    auxiliary variable of a mixture, or a product, reciprocal or square of those."""

    def __init__(self, slot: StringLike) -> None: ...

    @classmethod
    def number(cls, value: f64Like) -> Param: ...

    @classmethod
    def aux(cls, kind: StringLike) -> Param: ...

    @classmethod
    def output(cls) -> Param: ...

    def __mul__(self, other: Param) -> Param: ...

    def __add__(self, other: Param) -> Param: ...

    def logistic(self) -> Param: ...

    def reciprocal(self) -> Param: ...

    def square(self) -> Param: ...


class Law(Expr):
    """The law of a statement's output (one constructor per family or parameterization)."""

    @classmethod
    def gaussian(cls, mean: Param, precision: Param) -> Law: ...

    @classmethod
    def gaussian_variance(cls, mean: Param, variance: Param) -> Law: ...

    @classmethod
    def gaussian_scale(cls, mean: Param, scale: Param) -> Law: ...

    @classmethod
    def gamma(cls, shape: Param, rate: Param) -> Law: ...

    @classmethod
    def exponential(cls, rate: Param) -> Law: ...

    @classmethod
    def inverse_gamma(cls, shape: Param, scale: Param) -> Law: ...

    @classmethod
    def root_inverse_gamma(cls, shape: Param, scale: Param) -> Law: ...

    @classmethod
    def student_t(cls, mean: Param, nu: Param, precision: Param) -> Law: ...

    @classmethod
    def laplace(cls, mean: Param, scale: Param) -> Law: ...

    @classmethod
    def half_cauchy(cls, scale: Param) -> Law: ...

    @classmethod
    def bernoulli(cls, p: Param) -> Law: ...

    @classmethod
    def binomial(cls, trials: Param, p: Param) -> Law: ...

    @classmethod
    def negative_binomial(cls, dispersion: Param, p: Param) -> Law: ...

    @classmethod
    def polya_gamma(cls, shape: Param) -> Law: ...

    @classmethod
    def pg_binomial(cls, trials: Param, logit: Param, omega: Param) -> Law: ...

    @classmethod
    def pg_negative_binomial(cls, dispersion: Param, logit: Param, omega: Param) -> Law: ...

    @classmethod
    def mixture(cls, kind: StringLike, mixing: Law, kernel: Law) -> Law: ...


_m, _s, _nu, _p, _r, _v, _n, _psi = vars_("m s nu p r v n psi", Param)
_HALF, _ONE, _TWO = Param.number(0.5), Param.number(1.0), Param.number(2.0)

#: the rules, one relation per line (read as equalities by the e-graph)
SCALE_MIXTURES_RULES = {
    # StudentT(μ, ν, τ) = ∫ N(μ, τλ) Gamma(λ; ν/2, ν/2) dλ
    "student_t_gamma_precision": rewrite(Law.student_t(_m, _nu, _p)).to(Law.mixture(
        "precision", Law.gamma(_nu * _HALF, _nu * _HALF),
        Law.gaussian(_m, _p * Param.aux("precision")))),
    # Laplace(μ, b) = ∫ N(μ, variance v) Exponential(v; 1/(2b²)) dv
    "laplace_exponential_variance": rewrite(Law.laplace(_m, _s)).to(Law.mixture(
        "variance", Law.exponential((_s.square() * _TWO).reciprocal()),
        Law.gaussian_variance(_m, Param.aux("variance")))),
    # Exponential(r) = Gamma(1, r)
    "exponential_gamma": rewrite(Law.exponential(_r)).to(Law.gamma(_ONE, _r)),
    # N(μ, variance v) = N(μ, precision 1/v)
    "variance_precision": rewrite(Law.gaussian_variance(_m, _v)).to(
        Law.gaussian(_m, _v.reciprocal())),
    # HalfCauchy(s): x² ~ InvGamma(½, 1/a), a ~ InvGamma(½, 1/s²)
    "half_cauchy_inverse_gamma": rewrite(Law.half_cauchy(_s)).to(Law.mixture(
        "mixing", Law.inverse_gamma(_HALF, _s.square().reciprocal()),
        Law.root_inverse_gamma(_HALF, Param.aux("mixing").reciprocal()))),
}
#: Pólya-Gamma augmentation (Polson, Scott & Windle 2013): for b > 0,
#: (e^ψ)^a / (1 + e^ψ)^b = 2^−b e^((a − b/2) ψ) ∫ e^(−ω ψ²/2) PG(ω | b, 0) dω
POLYA_GAMMA_RULES = {
    # Bernoulli(σ(ψ)) = Binomial(1, σ(ψ))
    "bernoulli_binomial": rewrite(Law.bernoulli(_psi.logistic())).to(
        Law.binomial(_ONE, _psi.logistic())),
    # Binomial(y | n, σ(ψ)) = ∫ C(n, y) 2^−n e^((y − n/2) ψ − ω ψ²/2) PG(ω | n, 0) dω
    "binomial_polya_gamma": rewrite(Law.binomial(_n, _psi.logistic())).to(Law.mixture(
        "pg", Law.polya_gamma(_n), Law.pg_binomial(_n, _psi, Param.aux("pg")))),
    # NB(y | r, σ(ψ)) = ∫ Γ(y+r)/(Γ(r) y!) 2^−(y+r) e^((y − r)/2 ψ − ω ψ²/2) PG(ω | y + r, 0) dω
    "negative_binomial_polya_gamma": rewrite(Law.negative_binomial(_r, _psi.logistic())).to(
        Law.mixture("pg", Law.polya_gamma(Param.output() + _r),
                    Law.pg_negative_binomial(_r, _psi, Param.aux("pg")))),
}
SCALE_MIXTURES_RULES.update(POLYA_GAMMA_RULES)
SCALE_MIXTURES = ruleset(*SCALE_MIXTURES_RULES.values(), name="scale_mixtures")

#: every constructor a rule's right side holds (to report the rules behind a chosen form)
_PRODUCES = {"student_t_gamma_precision": {"mixture", "gamma", "gaussian"},
             "laplace_exponential_variance": {"mixture", "exponential", "gaussian_variance"},
             "exponential_gamma": {"gamma"}, "variance_precision": {"gaussian"},
             "half_cauchy_inverse_gamma": {"mixture", "inverse_gamma", "root_inverse_gamma"},
             "bernoulli_binomial": {"binomial"},
             "binomial_polya_gamma": {"mixture", "polya_gamma", "pg_binomial"},
             "negative_binomial_polya_gamma": {"mixture", "polya_gamma",
                                               "pg_negative_binomial"}}
_ELIMINATES = {"student_t_gamma_precision": "student_t", "laplace_exponential_variance":
               "laplace", "exponential_gamma": "exponential", "variance_precision":
               "gaussian_variance", "half_cauchy_inverse_gamma": "half_cauchy",
               "bernoulli_binomial": "bernoulli", "binomial_polya_gamma": "binomial",
               "negative_binomial_polya_gamma": "negative_binomial"}

#: factor -> (law constructor, argument slots); the laws a statement can be read as
ENCODE: dict[str, tuple[str, tuple[str, ...]]] = {
    "Gaussian": ("gaussian", ("mean", "precision")),
    "GaussianScale": ("gaussian_scale", ("mean", "scale")),
    "Gamma": ("gamma", ("shape", "rate")),
    "InverseGamma": ("inverse_gamma", ("shape", "scale")),
    "RootInverseGamma": ("root_inverse_gamma", ("shape", "scale")),
    "StudentT": ("student_t", ("mean", "nu", "precision")),
    "Laplace": ("laplace", ("mean", "scale")),
    "HalfCauchy": ("half_cauchy", ("scale",)),
    "Bernoulli": ("bernoulli", ("p",)),
    "Binomial": ("binomial", ("trials", "p")),
    "NegativeBinomial": ("negative_binomial", ("dispersion", "p")),
    "PolyaGamma": ("polya_gamma", ("shape",)),
    "PolyaGammaBinomial": ("pg_binomial", ("trials", "logit", "omega")),
    "PolyaGammaNegativeBinomial": ("pg_negative_binomial", ("dispersion", "logit", "omega")),
}
#: the factors whose probability ``p`` the Pólya-Gamma rules rewrite when it is σ(ψ)
LOGISTIC_LIKELIHOODS = frozenset({"Bernoulli", "Binomial", "NegativeBinomial"})
#: a family and σ(ψ) fused into one factor (Infer.NET's BernoulliFromLogOdds): factor ->
#: (law, its slots, each holding ψ of a probability σ(ψ))
FUSED_LOGISTIC: dict[str, tuple[str, tuple[str, ...]]] = {
    "BernoulliFromLogOdds": ("bernoulli", ("logodds",)),
}
#: law constructor -> (factor, its parameter names); laws with no factor stay symbolic
DECODE = {law: (factor, slots) for factor, (law, slots) in ENCODE.items()}

#: a law or parameter read back from the e-graph: (constructor, *children or literals)
Form = tuple


def definitions(statements: list[FactorCall]) -> dict[str, FactorCall]:
    """The statement defining each deterministic variable, by name."""
    return {c.output.name: c for c in statements if c.output is not None and c.output.derived}


def _is_logistic(value: Any, defining: dict[str, FactorCall]) -> bool:
    return (isinstance(value, Variable) and value.name in defining
            and defining[value.name].factor == "Logistic")


def expandable(call: FactorCall, defining: dict[str, FactorCall]) -> bool:
    """Whether a rule rewrites ``call``'s law: a heavy-tailed law, or a Bernoulli, Binomial
    or negative binomial of a probability σ(ψ) (``ff.logistic``)."""
    if call.output is not None and call.factor in FUSED_LOGISTIC:
        return True
    if call.output is None or call.factor not in ENCODE:
        return False
    if call.factor in LOGISTIC_LIKELIHOODS:
        return _is_logistic(call.args.get("p"), defining)
    return ENCODE[call.factor][0] in _ELIMINATES.values()


def _own_form(call: FactorCall, defining: dict[str, FactorCall]) -> Form:
    """The law of ``call`` as written: its arguments as slots, a probability σ(ψ) as
    ``logistic`` of the slot ``<arg>.logit`` (ψ) — of its own slot in a fused factor."""
    if call.factor in FUSED_LOGISTIC:
        head, slots = FUSED_LOGISTIC[call.factor]
        return (head, *(("logistic", ("slot", s)) for s in slots))
    head, slots = ENCODE[call.factor]
    return (head, *((("logistic", ("slot", f"{s}.logit")) if _is_logistic(call.args[s],
                                                                          defining)
                     else ("slot", s)) for s in slots))


def _to_law(form: Form) -> Any:
    head = form[0]
    if head == "slot":
        return Param(form[1])
    if head == "logistic":
        return _to_law(form[1]).logistic()
    return getattr(Law, head)(*(_to_law(c) for c in form[1:]))


def explore_statements(statements: list[FactorCall], max_forms: int = 16
                       ) -> dict[int, list[Form]]:
    """Every form (up to ``max_forms``) of each expandable statement's law, the
    statement's own form first, from one e-graph saturated under ``SCALE_MIXTURES``.
    Statements with one form are left out."""
    egraph = EGraph()
    roots = {}
    defining = definitions(statements)
    for i, call in enumerate(statements):
        if expandable(call, defining):
            roots[i] = egraph.let(f"statement{i}", _to_law(_own_form(call, defining)))
    if not roots:
        return {}
    egraph.run(SCALE_MIXTURES.saturate())
    classes, bound = _read(egraph)
    out = {}
    for i in roots:
        forms = _forms(classes, bound[f"statement{i}"], max_forms)
        own = _own_form(statements[i], defining)
        forms = [own] + [f for f in forms if f != own]
        if len(forms) > 1:
            out[i] = forms
    return out


def _read(egraph: EGraph) -> tuple[dict[Any, list[Form]], dict[str, Any]]:
    """The e-graph's classes: class -> e-nodes ``(constructor, *child classes or
    literals)``, and the class of each ``let`` binding."""
    core = egraph._egraph
    frozen = core.freeze()
    classes: dict[Any, list[Form]] = {}
    bound: dict[str, Any] = {}
    for name, function in frozen.functions.items():
        if name.startswith("$"):
            bound[name[1:]] = function.rows[0].output
            continue
        for row in function.rows:
            node = _node(core, name, row.inputs)
            if node is not None:
                classes.setdefault(row.output, []).append(node)
    return classes, bound


def _node(core: Any, name: str, inputs: list[Any]) -> Form | None:
    for head in _LAW_HEADS:
        if name.endswith(f"Law_{head}"):
            if head == "mixture":
                return ("mixture", ("kind", core.value_to_string(inputs[0])), inputs[1],
                        inputs[2])
            return (head, *inputs)
    if name.endswith("Param___init__"):
        return ("slot", core.value_to_string(inputs[0]))
    if name.endswith("Param_number"):
        return ("number", core.value_to_f64(inputs[0]))
    if name.endswith("Param_aux"):
        return ("aux", core.value_to_string(inputs[0]))
    if name.endswith("Param_output"):
        return ("output",)
    for head, label in (("Param___mul__", "mul"), ("Param_reciprocal", "reciprocal"),
                        ("Param_square", "square"), ("Param___add__", "add"),
                        ("Param_logistic", "logistic")):
        if name.endswith(head):
            return (label, *inputs)
    return None


_LAW_HEADS = ("gaussian_variance", "gaussian_scale", "root_inverse_gamma", "inverse_gamma",
              "student_t", "half_cauchy", "exponential", "gaussian", "gamma", "laplace",
              "pg_negative_binomial", "pg_binomial", "negative_binomial", "binomial",
              "bernoulli", "polya_gamma", "mixture")


def _forms(classes: dict[Any, list[Form]], root: Any, limit: int) -> list[Form]:
    """The terms of the class ``root``: every choice of e-node in every class below."""
    memo: dict[Any, list[Form]] = {}

    def terms(c: Any, depth: int) -> list[Form]:
        if c in memo:
            return memo[c]
        if depth > 12:
            return []
        out: list[Form] = []
        for node in classes.get(c, ()):
            if node[0] in ("slot", "number", "aux", "output"):
                out.append(node)
                continue
            options = [[child] if isinstance(child, tuple) else terms(child, depth + 1)
                       for child in node[1:]]
            for combo in itertools.islice(itertools.product(*options), limit):
                out.append((node[0], *combo))
        memo[c] = out[:limit * 4]
        return memo[c]

    return terms(root, 0)[:limit]


def rules_behind(form: Form, own: Form) -> tuple[str, ...]:
    """The shortest chain of rules that turns the laws of ``own`` into those of ``form``:
    each rule rewrites a law present (in ``own`` or produced by an earlier rule) into the
    laws it produces; heads of laws are compared as sets (breadth-first search)."""
    laws = set(_LAW_HEADS)
    start = frozenset(set(_heads(own)) & laws)
    goal = frozenset(set(_heads(form)) & laws)
    frontier: list[tuple[frozenset[str], tuple[str, ...]]] = [(start, ())]
    seen = {start}
    while frontier:
        later = []
        for heads, chain in frontier:
            if heads == goal:
                return chain
            for name, eliminated in _ELIMINATES.items():
                if eliminated in heads:
                    after = frozenset((heads - {eliminated}) | (_PRODUCES[name] & laws))
                    if after not in seen:
                        seen.add(after)
                        later.append((after, (*chain, name)))
        frontier = later
    return ()


def _heads(form: Any) -> list[str]:
    if not isinstance(form, tuple) or not form or not isinstance(form[0], str):
        return []
    out = [form[0]]
    for child in form[1:]:
        out += _heads(child)
    return out


def show(form: Any) -> str:
    """A form as text: ``mixture[precision](Gamma(nu*0.5, nu*0.5), Gaussian(...))``."""
    head = form[0]
    if head == "slot":
        return form[1]
    if head == "number":
        return repr(form[1])
    if head == "aux":
        return f"aux[{form[1]}]"
    if head == "output":
        return "output"
    if head == "add":
        return f"{show(form[1])} + {show(form[2])}"
    if head == "logistic":
        return f"logistic({show(form[1])})"
    if head == "mul":
        return f"{show(form[1])}*{show(form[2])}"
    if head == "reciprocal":
        return f"1/({show(form[1])})"
    if head == "square":
        return f"({show(form[1])})**2"
    if head == "mixture":
        return f"mixture[{form[1][1]}]({show(form[2])}, {show(form[3])})"
    return f"{head}({', '.join(show(c) for c in form[1:])})"


# ----- a chosen form as factor statements ----------------------------------------------
@dataclass
class Expansion:
    """The statements replacing one statement, and the auxiliaries they introduce."""

    statements: list[FactorCall]
    auxiliaries: list[Variable]
    derived: list[Variable]


def materialize(call: FactorCall, form: Form, taken: set[str],
                defining: dict[str, FactorCall] | None = None) -> Expansion | None:
    """``call`` rewritten to ``form``, or None when a law in it has no factor (a form
    on the way to another, such as a Gaussian by its variance). ``taken`` holds the
    variable names in use (new names are added to it); ``defining`` the statements of
    the deterministic variables (to read ψ of an argument σ(ψ))."""
    out = Expansion([], [], [])
    if not _materializable(form):
        return None
    _emit(call, form, call.output, {}, out, taken, defining or {})
    return out


def _materializable(form: Form) -> bool:
    head = form[0]
    if head == "mixture":
        return _materializable(form[2]) and _materializable(form[3])
    return head in DECODE


def _emit(call: FactorCall, form: Form, output: Variable, aux: dict[str, Variable],
          out: Expansion, taken: set[str], defining: dict[str, FactorCall]) -> None:
    if form[0] == "mixture":
        kind = form[1][1]
        variable = Variable(_fresh(f"{output.name}__{kind}", taken), "positive", call.plates,
                            output.model, provenance=call.provenance)
        out.auxiliaries.append(variable)
        _emit(call, form[2], variable, aux, out, taken, defining)
        _emit(call, form[3], output, {**aux, kind: variable}, out, taken, defining)
        return
    factor, slots = DECODE[form[0]]
    args = {slot: _value(call, p, aux, out, taken, defining)
            for slot, p in zip(slots, form[1:], strict=True)}
    out.statements.append(FactorCall(factor, output, args, call.plates, call.provenance,
                                     call.frames))


_ARITHMETIC: dict[str, tuple[str, Callable[..., Any]]] = {
    "mul": ("Product", np.multiply), "reciprocal": ("Reciprocal", np.reciprocal),
    "square": ("Square", np.square), "add": ("Plus", np.add),
    "logistic": ("Logistic", lambda x: 0.5 * (1.0 + np.tanh(0.5 * x))),
}


def _value(call: FactorCall, p: Form, aux: dict[str, Variable], out: Expansion,
           taken: set[str], defining: dict[str, FactorCall]) -> Any:
    head = p[0]
    if head == "slot":
        arg, _, part = p[1].partition(".")
        value = call.args[arg]
        return defining[value.name].args["x"] if part == "logit" else value
    if head == "number":
        return np.asarray(p[1])
    if head == "aux":
        return aux[p[1]]
    if head == "output":
        return call.output
    parts = [_value(call, c, aux, out, taken, defining) for c in p[1:]]
    factor, fn = _ARITHMETIC[head]
    if all(isinstance(x, np.ndarray) for x in parts):
        return fn(*parts)
    variable = Variable(_fresh(f"{call.output.name}__{head}", taken), "real", call.plates,
                        call.output.model, derived=True, provenance=call.provenance)
    names = ("a", "b") if head in ("mul", "add") else ("x",) if head == "logistic" else ("a",)
    out.derived.append(variable)
    out.statements.append(FactorCall(factor, variable, dict(zip(names, parts, strict=True)),
                                     call.plates, call.provenance, call.frames))
    return variable


def _fresh(name: str, taken: set[str]) -> str:
    out, i = name, 1
    while out in taken:
        i += 1
        out = f"{name}{i}"
    taken.add(out)
    return out

