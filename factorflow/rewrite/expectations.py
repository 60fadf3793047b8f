"""Expectations under a mean-field posterior, simplified to moments of single variables.

VinDsl writes a factor's value with ``E``, ``V``, ``C``, ``Elog``, ``Eloggamma`` and
``Elogdet`` of its nodes, and its ``@simplify`` pushes ``E`` through sums and products
of independent nodes. Here the same algebra is the rule data ``ALGEBRA + EXPECTATION``
of :mod:`factorflow.rewrite.rules`, applied to a normal form by
:func:`~factorflow.rewrite.match.normalize`:

* linearity ``E[a + b] = E[a] + E[b]``, ``E[c] = c`` for anything not random (constants,
  ``data(...)``, moments), and likewise through indexing and sums over indices;
* ``E[a b] = E[a] E[b]`` when ``a`` and ``b`` share no random variable (distinct
  variables are independent under the mean-field posterior), hence
  ``E[a + B z] = E[a] + E[B] E[z]``;
* ``E[x²] = V[x] + E[x]²``, ``E[log x] = Elog(x)``, ``E[log(1 - x)] = Elog1m(x)``,
  ``E[lgamma x] = Eloggamma(x)``, ``E[logdet X] = Elogdet(X)`` for a variable ``x``;
* ``V[c a + b] = c² V[a] + V[b]`` for independent parts, and ``V[a] = E[a²] - E[a]²``
  otherwise;
* covariance matrices ``C`` (over the last axis) of linear forms of random vectors:
  ``C[a + B z] = B C[z] Bᵀ`` for nonrandom ``a``, ``B``; ``C[c z] = c² C[z]`` for a
  constant ``c``; ``C[x + y] = C[x] + C[y]`` for independent ``x``, ``y``; ``C[a] = 0``
  (the constant 0, broadcasting to the matrix);
* variances and squares of linear forms: ``V[B z] = diag(B C[z] Bᵀ)``,
  ``V[b·z] = b·C[z] b``, ``E[(b·z)²] = V[b·z] + E[b·z]²`` (so a regression's expected
  squared error closes);
* second moments and quadratic forms of a random vector ``y`` (a variable or any form the
  rules above close): ``E[y·y] = Σ_i V[y]_i + E[y]·E[y]`` and
  ``E[y·B y] = tr(E[B] C[y]) + E[y]·E[B] E[y]`` for ``B`` independent of ``y`` — VinDsl's
  multivariate Gaussian factor ``tr(Λ̄ (C(x) + C(μ) + δδᵀ))`` with ``y = x - μ``.

The full list, one rule per line, is ``EXPECTATION`` in :mod:`factorflow.rewrite.rules`.
Matrix products are read as matrix @ vector (terms carry no shapes).

The result is *closed* when every moment applies to a single random variable; such a
term evaluates (:func:`~factorflow.rewrite.evaluate.evaluate`) from the moments each
variable's posterior provides (:mod:`factorflow.distributions.moments`). What the rules
cannot close — ``E[x exp(x)]``, ``E[x³]`` without a distribution, ``C[z²]`` of an
elementwise square, ``C[W z]`` with ``W`` random — raises
:class:`~factorflow.errors.ModelError` naming the sub-expression.
"""

from __future__ import annotations

from factorflow.errors import ModelError
from factorflow.rewrite.match import Ruleset, normalize
from factorflow.rewrite.rules import ALGEBRA, EXPECTATION
from factorflow.rewrite.terms import MOMENTS, SYM, E, Term, V
from factorflow.rewrite.user import user_rules


def expectation_rules() -> Ruleset:
    """The rules :func:`simplify_expectation` applies, in priority order: the algebra, the
    user's rules (:mod:`factorflow.rewrite.user`), the expectation rules."""
    return Ruleset("expectation_algebra", ALGEBRA.rules + user_rules().rules + EXPECTATION.rules)


def simplify_expectation(term: Term) -> Term:
    """``term`` with every moment pushed inside until it applies to single variables.

    Guarantees: the result equals ``term`` under the mean-field posterior, no rule of
    :func:`expectation_rules` applies anywhere in it, and every moment operator in it
    (``E``, ``V``, ``C``, ``Elog``, ...) applies to a random symbol. Raises ModelError
    naming the first sub-expression whose moment the rules cannot express that way.
    """
    out = normalize(term, expectation_rules())
    blocker = unclosed_moment(out)
    if blocker is not None:
        inner = blocker.args[0]
        raise ModelError(
            f"cannot express {blocker.op}[{inner}] through moments of single variables: "
            f"the sub-expression {inner} is not a sum, product or linear form of independent "
            "factors with known moments (E, V, C, Elog, Elog1m, Eloggamma, Elogdet of one "
            "variable)")
    return out


def unclosed_moment(term: Term) -> Term | None:
    """The first moment in ``term`` (depth first) whose argument is not a random symbol."""
    stack = [term]
    seen: set[Term] = set()
    while stack:
        t = stack.pop()
        if t in seen:
            continue
        seen.add(t)
        if t.op in MOMENTS and t.args[0].op != SYM:
            return t
        stack.extend(reversed(t.args))
    return None


def expectation(term: Term) -> Term:
    """The closed form of ``E[term]`` (see :func:`simplify_expectation`)."""
    return simplify_expectation(E(term))


def variance(term: Term) -> Term:
    """The closed form of ``V[term]`` (see :func:`simplify_expectation`)."""
    return simplify_expectation(V(term))


def deterministic_moments(expr: Term) -> tuple[Term, Term]:
    """``(E[expr], V[expr])`` of a deterministic node ``expr`` (VinDsl's expression nodes),
    in moments of the variables it is built from. Raises ModelError when not closed."""
    return expectation(expr), variance(expr)


def moment_atoms(term: Term) -> frozenset[Term]:
    """The moments (``E(x)``, ``V(x)``, ``Elog(x)``, ...) a closed term needs values for."""
    found: set[Term] = set()
    stack = [term]
    while stack:
        t = stack.pop()
        if t.op in MOMENTS:
            found.add(t)
        else:
            stack.extend(t.args)
    return frozenset(found)
