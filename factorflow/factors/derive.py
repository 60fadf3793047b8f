"""Conjugate VMP messages derived from a factor's log-density formula.

VinDsl's ``@defnaturals`` asks the author of a factor to write, for each node, the
natural-parameter message the factor sends it. Here it is derived: the log density is
brought to the normal form of :data:`~factorflow.rewrite.rules.ALGEBRA` (a sum of
monomials; with the user's rules of :mod:`factorflow.rewrite.user` after the built-in
ones), each monomial is split into the factors that involve the target and those
that do not, and the target part must be one of the target family's sufficient
statistics ``T_i``. Then

    E_q[log f] = sum_i eta_i * E[T_i(target)] + const,   eta_i = E_q[coefficient of T_i],

where the expectation over the other arguments is closed by
:func:`~factorflow.rewrite.expectations.simplify_expectation`. A monomial whose target
part is not a statistic (``x*exp(x)`` for a Gaussian ``x``) blocks conjugacy, and the
error names it. Vector statistics (Dirichlet, Discrete) carry an index: a monomial
``sum[k](z_k * log(theta_k))`` contributes ``E[z_k]`` to the natural parameter of
``log(theta_k)``, a term with the free index ``k``.

Vectors and matrices (VinDsl's two inner indices). A VectorGaussian ``x`` has the
statistics ``x[_row]``, ``x[_row] x[_col]`` and the diagonal ``(x²)[_row]`` (a square
``x[i]²``, which the algebra keeps apart from a product of two indices); a Wishart ``Λ`` has
``log|Λ|`` and ``Λ[_row, _col]``. A monomial under the sums ``sum[i](sum[j](...))`` matches a
statistic when a renaming of its summed indices to the statistic's own ones (``_row``,
``_col``) makes its target part that statistic; the rest, so renamed and still summed over
the indices the statistic does not take, is the coefficient: the monomial
``sum[i](sum[j](-½ Λ[i, j] x[i] x[j]))`` gives ``-½ E[Λ][_row, _col]`` to ``x[_row] x[_col]``,
and ``sum[i](sum[j](½ Λ[i, j] μ[j] x[i]))`` gives ``sum[j](½ E[Λ][_row, j] E[μ][j])`` to
``x[_row]``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from factorflow.errors import ModelError
from factorflow.rewrite.expectations import simplify_expectation
from factorflow.rewrite.match import normalize
from factorflow.rewrite.rules import ALGEBRA
from factorflow.rewrite.terms import (
    INDEX,
    INDEX_SUM,
    PROD,
    SUM,
    SYM,
    E,
    Term,
    add,
    at,
    index_sum,
    log,
    logdet,
)
from factorflow.rewrite.user import user_rules

#: the own indices of a vector's or a matrix's statistics: rows, and columns
ROW, COL = "_row", "_col"

#: Sufficient statistics of each conjugate family, as terms in the variable (and an index).
FAMILIES: dict[str, Callable[[Term, str], tuple[Term, ...]]] = {
    "Gaussian": lambda x, k: (x, x**2),
    "Gamma": lambda x, k: (log(x), x),
    "Beta": lambda x, k: (log(x), log(1 - x)),
    "Dirichlet": lambda x, k: (log(at(x, k)),),
    "Bernoulli": lambda x, k: (x,),
    "Discrete": lambda x, k: (at(x, k),),
    # x_r, x_r x_c, and x_r² (the diagonal of x xᵀ, which a formula writes as a square)
    "VectorGaussian": lambda x, k: (at(x, ROW), at(x, ROW) * at(x, COL), at(x**2, ROW)),
    # log|Λ|, Λ_rc
    "Wishart": lambda x, k: (logdet(x), at(at(x, COL), ROW)),
}


def sufficient_statistics(family: str, x: Term, index: str = "k") -> tuple[Term, ...]:
    """The sufficient statistics ``T(x)`` of ``family`` (vector families use ``index``)."""
    if family not in FAMILIES:
        raise ModelError(f"no conjugate family {family!r}; known: {sorted(FAMILIES)}")
    return FAMILIES[family](x, index)


@dataclass(frozen=True)
class Derivation:
    """The VMP message of one factor to one argument, and the factor's ELBO term.

    ``naturals[i]`` multiplies ``E[statistics[i]]`` in the expected log factor; it is a
    closed term in moments of the other arguments. ``constant`` is the rest of the
    expected log factor, and ``expected_log_factor`` the whole of it (all arguments'
    moments, the factor's contribution to the ELBO).
    """

    target: Term
    statistics: tuple[Term, ...]
    naturals: tuple[Term, ...]
    constant: Term
    expected_log_factor: Term


def derive_naturals(log_density: Term, target: Term, statistics: Sequence[Term] | str, *,
                    index: str = "k", close_rest: bool = True) -> Derivation:
    """Rewrite ``E_q[log_density]`` as ``<naturals, E[statistics(target)]> + constant``.

    ``statistics`` are terms in ``target`` or a family name of :data:`FAMILIES`. Raises
    ModelError naming the term that blocks conjugacy, or when the expectation over the
    other arguments cannot be closed.  With ``close_rest=False`` only the naturals are
    closed: ``constant`` and ``expected_log_factor`` stay the unsimplified expectations
    (for a factor whose ELBO term is computed another way: the gradient fallback's).
    """
    form, stats, coefficients, constant = split_statistics(log_density, target, statistics,
                                                           index=index)
    naturals = tuple(simplify_expectation(E(add(*c))) for c in coefficients)
    if not close_rest:
        return Derivation(target, stats, naturals, E(add(*constant)), E(form))
    return Derivation(target, stats, naturals, simplify_expectation(E(add(*constant))),
                      simplify_expectation(E(form)))


def split_statistics(log_density: Term, target: Term, statistics: Sequence[Term] | str, *,
                     index: str = "k") -> tuple[Term, tuple[Term, ...], list[list[Term]],
                                                list[Term]]:
    """``log_density`` brought to the ``ALGEBRA`` normal form and split by the statistics
    of ``target``: ``(form, statistics, coefficients, constant)`` with ``form = Σ_i
    Σ coefficients[i] · statistics[i] + Σ constant``, no coefficient or constant term
    involving ``target``. Raises ModelError naming the monomial that is no statistic."""
    if target.op != SYM:
        raise ModelError(f"the target of a message must be a random variable, got {target}")
    if isinstance(statistics, str):
        statistics = sufficient_statistics(statistics, target, index)
    name = target.payload[0]
    algebra = ALGEBRA + user_rules()
    form = normalize(log_density, algebra)
    if name not in form.symbols:
        raise ModelError(f"the factor {log_density} does not depend on {target}")
    stats = tuple(normalize(t, algebra) for t in statistics)
    coefficients: list[list[Term]] = [[] for _ in stats]
    constant: list[Term] = []
    for monomial in form.args if form.op == SUM else (form,):
        if name not in monomial.symbols:
            constant.append(monomial)
            continue
        bound: list[str] = []
        body = monomial
        while body.op == INDEX_SUM:
            bound.append(body.payload)
            body = body.args[0]
        factors = body.args if body.op == PROD else (body,)
        part = Term(PROD, tuple(f for f in factors if name in f.symbols))
        rest = Term(PROD, tuple(f for f in factors if name not in f.symbols))
        found = _statistic_of(part, stats, tuple(bound))
        if found is None:
            raise ModelError(
                f"{target} is not conjugate here: the term {part} (in {monomial}) is not one "
                f"of its sufficient statistics {', '.join(map(str, stats))}")
        i, renaming = found
        coefficient = rename_indices(rest, renaming)
        for b in reversed(bound):  # the indices the statistic does not take stay summed
            if b not in renaming:
                coefficient = index_sum(coefficient, b)
        coefficients[i].append(coefficient)
    return form, stats, coefficients, constant


def _own_indices(statistic: Term) -> tuple[str, ...]:
    """The free indices of a statistic, rows before columns (``_row``, ``_col``)."""
    return tuple(sorted(statistic.indices, key=lambda n: (n != ROW, n != COL, n)))


def _statistic_of(part: Term, stats: tuple[Term, ...], bound: tuple[str, ...]
                  ) -> tuple[int, dict[str, str]] | None:
    """The statistic ``part`` is under some renaming of its summed indices ``bound`` to the
    statistic's own ones, and that renaming (summed index -> own index)."""
    for i, stat in enumerate(stats):
        own = _own_indices(stat)
        for chosen in itertools.permutations(bound, len(own)):
            if rename_indices(stat, dict(zip(own, chosen, strict=True))) is part:
                return i, dict(zip(chosen, own, strict=True))
    return None


def rename_index(term: Term, old: str, new: str) -> Term:
    """``term`` with the index name ``old`` replaced by ``new`` wherever it occurs."""
    return rename_indices(term, {old: new})


def rename_indices(term: Term, renaming: Mapping[str, str]) -> Term:
    """``term`` with every index name ``old`` of ``renaming`` replaced by ``renaming[old]``,
    all at once (so ``{i: j, j: i}`` swaps them)."""
    if not renaming or not term.args:
        return term
    payload = term.payload
    if term.op in (INDEX, INDEX_SUM) and isinstance(payload, str):
        payload = renaming.get(payload, payload)
    return Term(term.op, tuple(rename_indices(a, renaming) for a in term.args), payload)


def derive_messages(log_density: Term, families: Mapping[Term, str], *,
                    index: str = "k") -> dict[Term, Derivation]:
    """The derivation for every random argument named in ``families`` (argument -> family)."""
    return {x: derive_naturals(log_density, x, fam, index=index) for x, fam in families.items()}
