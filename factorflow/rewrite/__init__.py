"""Symbolic terms and the rewrite engines of factorflow.

* :mod:`~factorflow.rewrite.terms` — hash-consed terms (log-densities, expectations),
  printed by :mod:`~factorflow.rewrite.printing`, evaluated by
  :mod:`~factorflow.rewrite.evaluate`;
* :mod:`~factorflow.rewrite.match` and :mod:`~factorflow.rewrite.rules` — rewrite rules
  as data and the normalizing engine;
* :mod:`~factorflow.rewrite.egraph` — equality saturation on egglog: every term the rules
  reach, the cheapest by a cost model, a lazy stream by nondecreasing size
  (:mod:`~factorflow.rewrite.naive` is the clone-per-rewrite baseline);
* :mod:`~factorflow.rewrite.flattening` — complete lazy associativity (classes that share
  a flattening are united);
* :mod:`~factorflow.rewrite.expectations` — VinDsl's expectation algebra;
* :mod:`~factorflow.rewrite.user` — the user's functions and simplify rules (``@simplify``).

The e-graph names are imported on first use, so term-only code does not load egglog.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from factorflow.rewrite.evaluate import evaluate, evaluate_named
from factorflow.rewrite.expectations import (
    deterministic_moments,
    expectation,
    simplify_expectation,
    variance,
)
from factorflow.rewrite.match import Rule, Ruleset, instantiate, match, normalize, rule
from factorflow.rewrite.printing import show
from factorflow.rewrite.rules import ALGEBRA, ALGEBRA_EQUATIONS, EXPECTATION, SEED
from factorflow.rewrite.terms import (
    C,
    E,
    Elog,
    Elog1m,
    Elogdet,
    Eloggamma,
    NameVar,
    Term,
    V,
    add,
    as_term,
    at,
    const,
    data,
    digamma,
    dot,
    exp,
    index_sum,
    lgamma,
    log,
    logdet,
    matmul,
    mul,
    neg,
    power,
    sym,
    transpose,
    var,
)
from factorflow.rewrite.user import function, simplify_rule, user_rules

_LAZY = {
    "explore": "egraph", "Exploration": "egraph", "Limits": "egraph", "CostModel": "egraph",
    "ast_size": "egraph", "term_cost": "egraph", "to_egglog": "egglog_terms",
    "from_egglog": "egglog_terms", "RuleCompileError": "egglog_terms",
    "naive_explore": "naive", "NaiveResult": "naive",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f"factorflow.rewrite.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'factorflow.rewrite' has no attribute {name!r}")


__all__ = [
    "ALGEBRA", "ALGEBRA_EQUATIONS", "EXPECTATION", "SEED", "C", "E", "Elog", "Elog1m",
    "Elogdet", "Eloggamma", "NameVar", "Rule", "Ruleset", "Term", "V", "add", "as_term", "at",
    "const", "data", "deterministic_moments", "digamma", "dot", "evaluate", "evaluate_named",
    "exp", "expectation", "index_sum", "instantiate", "lgamma", "log", "logdet", "match",
    "matmul", "mul", "neg", "normalize", "power", "rule", "show", "simplify_expectation", "sym",
    "transpose", "var", "variance", "function", "simplify_rule", "user_rules", *_LAZY,
]
