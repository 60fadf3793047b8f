"""Which form of the model to sample: the scale-mixture expansions that pay.

:func:`choose_plan` explores every form of the model's expandable statements
(:func:`factorflow.samplers.expansions.explore_statements`), and for each combination of
forms (at most :data:`MAX_COMBINATIONS`, else one statement at a time) derives the
conditional of every latent variable, the auxiliaries included. The plan kept has the
fewest variables without a sampler, then the fewest left to slice sampling (the most
conjugate conditionals), then the fewest auxiliaries; a statement keeps its own form
unless an expansion does better — never the first match, the best found.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from factorflow.errors import ModelError
from factorflow.model.core import FactorCall, Model, Variable
from factorflow.samplers.conditionals import conditional
from factorflow.samplers.linear import gaussian_blocks
from factorflow.samplers.sites import model_statements, read_sites

MAX_COMBINATIONS = 64
#: the factors the rules rewrite (the last three when their probability is σ(ψ)): only a
#: model with one of them loads the e-graph engine (``tests/samplers/test_expansions.py``
#: checks this against the rules)
EXPANDABLE = frozenset({"StudentT", "Laplace", "HalfCauchy", "Bernoulli", "Binomial",
                        "NegativeBinomial", "BernoulliFromLogOdds"})


@dataclass
class Plan:
    """The statements to sample (the model's, some expanded), the latent variables
    (auxiliaries included) and, per variable, the rewrites that produced its statement."""

    statements: list[FactorCall]
    definitions: dict[str, int]
    latent: list[Variable]
    rewrites: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: how many forms the exploration found, over all expandable statements
    forms: int = 0
    #: each expanded statement as written, with its expansion
    expanded: list[tuple[FactorCall, Any]] = field(default_factory=list)

    @property
    def variables(self) -> dict[str, Variable]:
        return {v.name: v for v in self.latent}


def choose_plan(model: Model) -> Plan:
    """The best plan for ``model`` (see the module docstring)."""
    statements, definitions = model_statements(model)
    latent = [v for v in model.variables.values() if not v.is_observed and not v.derived]
    if not any(call.factor in EXPANDABLE for call in statements):
        return Plan(statements, definitions, latent)
    from factorflow.samplers.expansions import (
        definitions as defining_statements,
    )
    from factorflow.samplers.expansions import (
        expandable,
        explore_statements,
        materialize,
    )

    defining = defining_statements(statements)
    if not any(expandable(call, defining) for call in statements):
        return Plan(statements, definitions, latent)

    forms = explore_statements(statements)
    base = Plan(statements, definitions, latent, forms=sum(len(f) for f in forms.values()))
    if not forms:
        return base
    taken = set(model.variables) | set(model.data) | set(model.ranges)
    options: dict[int, list[tuple[Any, Any]]] = {}
    for i, fs in forms.items():
        options[i] = [(fs[0], None)] + [
            (f, e) for f in fs[1:]
            if (e := materialize(statements[i], f, taken, defining)) is not None]
    keys = sorted(options)
    combos = list(itertools.islice(itertools.product(*(range(len(options[i])) for i in keys)),
                                   MAX_COMBINATIONS + 1))
    if len(combos) > MAX_COMBINATIONS:  # one statement at a time, the others as they are
        choice = {i: 0 for i in keys}
        for i in keys:
            choice[i] = min(range(len(options[i])), key=lambda j, i=i: _score(
                _build(base, options, {**choice, i: j}))[:3])
        return _build(base, options, choice)
    plans = [_build(base, options, dict(zip(keys, c, strict=True))) for c in combos]
    return min(plans, key=lambda p: _score(p)[:3])


def _build(base: Plan, options: dict[int, list[tuple[Any, Any]]],
           choice: dict[int, int]) -> Plan:
    """``base`` with statement ``i`` replaced by its option ``choice[i]`` (a form and its
    expansion, or None for the statement as written)."""
    from factorflow.samplers.expansions import rules_behind, show

    statements: list[FactorCall] = []
    definitions = dict(base.definitions)
    latent = list(base.latent)
    rewrites: dict[str, tuple[str, ...]] = {}
    expanded = []
    for i, call in enumerate(base.statements):
        form, expansion = options[i][choice[i]] if i in options else (None, None)
        if expansion is None:
            statements.append(call)
            continue
        statements += expansion.statements
        expanded.append((call, expansion))
        own = options[i][0][0]
        chain = rules_behind(form, own)
        line = (f"{call.factor}({call.output.name}) = {show(form)}  [rules: "
                f"{', '.join(chain)}; one of {len(options[i])} forms explored]")
        for v in (call.output, *expansion.auxiliaries):
            rewrites[v.name] = (line,)
        for v in (*expansion.auxiliaries, *expansion.derived):
            definitions[v.name] = 1
        latent += expansion.auxiliaries
    return Plan(statements, definitions, latent, rewrites, base.forms, expanded)


def _score(plan: Plan) -> tuple[int, int, int, list[str]]:
    """(variables without a sampler, variables left to slice sampling, variables, the
    names of the first two kinds) of ``plan``: the lower the better."""
    try:
        sites = read_sites(plan.statements, plan.definitions)
    except ModelError:
        return (len(plan.latent) + 1, 0, 0, ["<unreadable>"])
    try:
        joint = {v.name for b in gaussian_blocks(plan.latent, sites) for v in b.variables}
    except ModelError:
        return (len(plan.latent) + 1, 0, 0, ["<no joint draw>"])
    failed, sliced = [], []
    for v in plan.latent:
        if v.name in joint:
            continue
        try:
            if conditional(v, sites).kind == "slice":
                sliced.append(v.name)
        except ModelError:
            failed.append(v.name)
    return len(failed), len(sliced), len(plan.latent), failed + sliced
