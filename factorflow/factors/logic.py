"""Boolean logic: And(out | a, b), Or(out | a, b), Not(out | a), ConstrainTrue(value).

log f = log [out = g(a, b)] for the deterministic gates (g the truth table below) and
log [value] for the constraint.  Messages are exact sums over the truth tables, in log
space so that certainties (log-odds ±inf) pass through unchanged (Infer.NET's
BooleanAndOp, BooleanOrOp, BooleanNotOp, ConstrainTrueOp).

VMP treats a gate's output as a derived variable: the message to the output is the
forward distribution of g(a, b) (Winn's rule, the same as EP), and the message to an
input is exp E_other[log m_out(g(a, b))], where m_out is the output's incoming message.
A gate with an observed output and a random other input is not supported under VMP
(as in Infer.NET).  Deterministic gates have no VMP evidence term (Infer.NET's [Skip]
AverageLogFactor = 0: a derived variable adds neither a factor term nor an entropy).
"""

from __future__ import annotations

import itertools

import numpy as np

from factorflow.distributions import Bernoulli
from factorflow.distributions.moments import Eprob, is_known
from factorflow.factors.common import (
    bernoulli_from_log_probs,
    bool_log_probs,
    bool_log_weights,
    times_finite,
    unsupported,
)
from factorflow.factors.registry import Factor, define_factor

#: truth tables: output for each (a, b)
AND_TABLE = {(0, 0): 0, (0, 1): 0, (1, 0): 0, (1, 1): 1}
OR_TABLE = {(0, 0): 0, (0, 1): 1, (1, 0): 1, (1, 1): 1}


def _table_log_density(table):
    grid = np.array([[table[(0, 0)], table[(0, 1)]], [table[(1, 0)], table[(1, 1)]]], bool)

    def log_density(out, a, b):
        g = grid[np.asarray(a, int), np.asarray(b, int)]
        return np.where(np.asarray(out, bool) == g, 0.0, -np.inf)
    return log_density


def _not_log_density(out, a):
    return np.where(np.asarray(out, bool) != np.asarray(a, bool), 0.0, -np.inf)


def _constrain_log_density(value):
    return np.where(np.asarray(value, bool), 0.0, -np.inf)


AND = define_factor("And", ("out", "bool"), ("a", "bool"), ("b", "bool"), deterministic=True,
                    log_density=_table_log_density(AND_TABLE))
OR = define_factor("Or", ("out", "bool"), ("a", "bool"), ("b", "bool"), deterministic=True,
                   log_density=_table_log_density(OR_TABLE))
NOT = define_factor("Not", ("out", "bool"), ("a", "bool"), deterministic=True,
                    log_density=_not_log_density)
CONSTRAIN_TRUE = define_factor("ConstrainTrue", ("value", "bool"),
                               log_density=_constrain_log_density)


def _logsumexp(terms: list[np.ndarray]) -> np.ndarray:
    return np.logaddexp.reduce(np.stack(np.broadcast_arrays(*terms)), axis=0)


def _forward(table, a, b) -> Bernoulli:
    """P(out = o) = Σ_{a,b: g(a,b)=o} q_a(a) q_b(b)."""
    la, lb = bool_log_probs(a), bool_log_probs(b)
    terms: dict[int, list[np.ndarray]] = {0: [], 1: []}
    for x, y in itertools.product((0, 1), repeat=2):
        terms[table[(x, y)]].append(la[1 - x] + lb[1 - y])  # bool_log_probs is (T, F)
    return bernoulli_from_log_probs(_logsumexp(terms[1]), _logsumexp(terms[0]))


def _backward(table, out, other) -> Bernoulli:
    """m(a) ∝ Σ_b m_out(g(a, b)) q_b(b): the EP message to the first input."""
    lo, lb = bool_log_probs(out), bool_log_probs(other)
    side = [_logsumexp([lo[1 - table[(x, y)]] + lb[1 - y] for y in (0, 1)]) for x in (0, 1)]
    return bernoulli_from_log_probs(side[1], side[0])


def _backward_vmp(name: str, table, out, other) -> Bernoulli:
    """Log-odds lo_out · Σ_b q_b(b) [g(1, b) − g(0, b)] (Infer.NET's AAverageLogarithm)."""
    if is_known(out):
        if not is_known(other):
            raise unsupported(name, "vmp", "does not support an observed output with a "
                              "random input; use EP.")
        return _backward(table, out, other)
    pb = Eprob(other)
    slope = pb * (table[(1, 1)] - table[(0, 1)]) + (1 - pb) * (table[(1, 0)] - table[(0, 0)])
    return Bernoulli.from_natural(times_finite(slope, out.log_odds))


def _evidence(table, out, a, b) -> np.ndarray:
    """log Σ_{a,b} w_out(g(a,b)) w_a(a) w_b(b), each w the normalised message or 1."""
    wo, wa, wb = bool_log_weights(out), bool_log_weights(a), bool_log_weights(b)
    return _logsumexp([wo[1 - table[(x, y)]] + wa[1 - x] + wb[1 - y]
                       for x, y in itertools.product((0, 1), repeat=2)])


def _register_gate(factor: Factor, table) -> None:
    """The EP and VMP operators and EP evidence of a symmetric two-input gate."""
    name = factor.name

    @factor.operator("ep", "out")  # one certain input decides the output: no SkipIfUniform
    def out_ep(a, b) -> Bernoulli:
        return _forward(table, a, b)

    @factor.operator("ep", "a", skip_if_uniform=("out",))
    def a_ep(out, b) -> Bernoulli:
        return _backward(table, out, b)

    @factor.operator("ep", "b", skip_if_uniform=("out",))
    def b_ep(out, a) -> Bernoulli:
        return _backward(table, out, a)

    @factor.operator("vmp", "out", trigger=("a", "b"))
    def out_vmp(a, b) -> Bernoulli:
        return _forward(table, a, b)

    @factor.operator("vmp", "a", skip_if_uniform=("out",))
    def a_vmp(out, b) -> Bernoulli:
        return _backward_vmp(name, table, out, b)

    @factor.operator("vmp", "b", skip_if_uniform=("out",))
    def b_vmp(out, a) -> Bernoulli:
        return _backward_vmp(name, table, out, a)

    @factor.evidence_operator("ep")
    def log_average_factor(out, a, b) -> np.ndarray:
        return _evidence(table, out, a, b)


_register_gate(AND, AND_TABLE)
_register_gate(OR, OR_TABLE)


# ----- Not --------------------------------------------------------------------------
def _flip(v) -> Bernoulli:
    lt, lf = bool_log_probs(v)
    return bernoulli_from_log_probs(lf, lt)


@NOT.operator("ep", "out", skip_if_uniform=("a",))
def _not_out_ep(a) -> Bernoulli:
    """The negated message: log-odds −lo_a."""
    return _flip(a)


@NOT.operator("ep", "a", skip_if_uniform=("out",))
def _not_a_ep(out) -> Bernoulli:
    """The negated message: log-odds −lo_out."""
    return _flip(out)


@NOT.operator("vmp", "out", skip_if_uniform=("a",), trigger=("a",))
def _not_out_vmp(a) -> Bernoulli:
    """The forward distribution of ¬a (the same as EP)."""
    return _flip(a)


@NOT.operator("vmp", "a", skip_if_uniform=("out",))
def _not_a_vmp(out) -> Bernoulli:
    """exp E[log m_out(¬a)]: log-odds −lo_out (a known output fixes a exactly)."""
    return _flip(out)


@NOT.evidence_operator("ep")
def _not_log_average_factor(out, a) -> np.ndarray:
    """log Σ_a w_out(¬a) w_a(a)."""
    wo, wa = bool_log_weights(out), bool_log_weights(a)
    return np.logaddexp(wo[1] + wa[0], wo[0] + wa[1])


# ----- ConstrainTrue ----------------------------------------------------------------
@CONSTRAIN_TRUE.operator("ep", "value", certain=True)
def _constrain_ep() -> Bernoulli:
    """The point mass on true (log-odds +inf), one scalar that broadcasts over plates."""
    return Bernoulli.from_natural(np.inf)


@CONSTRAIN_TRUE.operator("vmp", "value")
def _constrain_vmp() -> Bernoulli:
    """The point mass on true (log-odds +inf), one scalar that broadcasts over plates."""
    return Bernoulli.from_natural(np.inf)


@CONSTRAIN_TRUE.evidence_operator("ep")
def _constrain_log_average_factor(value) -> np.ndarray:
    """log P(value = true) under the normalised incoming message (0 if it is uniform)."""
    return bool_log_weights(value)[0]


@CONSTRAIN_TRUE.evidence_operator("vmp")
def _constrain_average_log_factor(value) -> np.ndarray:
    """E_q[log [value]]: 0 when q is certain of true, else −inf."""
    return np.where(bool_log_probs(value)[0] == 0, 0.0, -np.inf)
