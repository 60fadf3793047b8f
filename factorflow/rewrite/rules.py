"""Rewrite rules as data, one per line with its algebra in a comment, in named rulesets.

Notation: ``a, b`` match any term, ``x`` a symbol (random variable), ``c, d`` numeric
constants, ``r..., s...`` the remaining arguments of a sum or product, ``k`` an index
name; ``[c + d]`` is a constant computed when the rule fires. ``S`` and ``P`` build raw
(unflattened) sums and products, so patterns say exactly what they match.

* ``SEED`` — the example of seed 003: ``log(exp(a)) -> a``, ``a + a -> 2a`` and the
  associativity of ``+``.
* ``ALGEBRA`` — a terminating normal form for polynomial-like expressions: flatten,
  fold constants, expand products of sums and integer powers, merge powers, commute
  elementwise functions with indexing. Read left to right by ``normalize``.
* ``EXPECTATION`` — VinDsl's expectation algebra under the mean-field posterior:
  linearity, independence of distinct variables, ``E[x²] = V[x] + E[x]²``, the moments
  ``Elog``, ``Elog1m``, ``Eloggamma``, ``Elogdet``, and variances of linear forms. For a
  random vector ``y`` (``C`` is its covariance over the last axis; ``B``, ``b``, ``c`` are
  not random, ``c`` a scalar constant):

  - ``C[b] = 0`` (the constant 0, which broadcasts to any matrix shape),
    ``C[b + y] = C[y]``, ``C[y + z] = C[y] + C[z]`` for ``y, z`` sharing no random
    symbol, ``C[c y] = c² C[y]``, ``C[B y] = B C[y] Bᵀ``;
  - variances of linear forms: ``V[B y] = diag(B C[y] Bᵀ)`` (written ``dot(B C[y], B)``),
    ``V[b·y] = b·C[y] b``, and ``E[f²] = V[f] + E[f]²`` for those forms ``f``;
  - products of two components of one random vector ``x`` (a symbol):
    ``E[x_k x_l] = C[x]_kl + E[x]_k E[x]_l`` for two index names ``k ≠ l``;
  - second moments: ``E[y·y] = Σ_i V[y]_i + E[y]·E[y]`` and, for ``B`` nonrandom or
    random but independent of ``y``, ``E[y·By] = E[By·y] = tr(E[B] C[y]) + E[y]·E[B]E[y]``
    (VinDsl's Gaussian factor ``tr(Λ̄ (C(x) + C(μ) + δδᵀ))``), the trace written
    ``Σ_ij E[B]_ij C[y]_ij`` as ``sum[_i](at(dot(E[B], C[y]), _i))``, C[y] being symmetric.

  ``B @ y`` is a matrix times a vector: terms carry no shapes, so a rule on ``@`` assumes
  its right operand has one positional axis (plates are named axes and map over it).

Rules with a ``when=`` guard are for :func:`~factorflow.rewrite.match.normalize` only; the
e-graph engine takes guard-free rules (``SEED``, ``ALGEBRA_EQUATIONS``).
"""

from __future__ import annotations

from factorflow.rewrite.match import Bindings, Rule, Ruleset, rule
from factorflow.rewrite.terms import (
    DIGAMMA,
    EXP,
    INDEX,
    INDEX_SUM,
    NEG,
    POW,
    PROD,
    SUM,
    C,
    E,
    Elog,
    Elog1m,
    Elogdet,
    Eloggamma,
    NameVar,
    Term,
    V,
    calc,
    const,
    dot,
    lgamma,
    log,
    logdet,
    matmul,
    transpose,
    var,
)

a, b = var("a"), var("b")
x = var("x", "atom")
c, d = var("c", "const"), var("d", "const")
r, s = var("r", "rest"), var("s", "rest")
k, l_ = NameVar("k"), NameVar("l")


def S(*args: Term) -> Term:  # noqa: N802 - a raw sum, as in the notation above
    return Term(SUM, args)


def P(*args: Term) -> Term:  # noqa: N802 - a raw product
    return Term(PROD, args)


def Pow(base: Term, exponent: Term | float) -> Term:  # noqa: N802
    return Term(POW, (base, const(exponent) if isinstance(exponent, float | int) else exponent))


def fn(op: str, arg: Term) -> Term:
    return Term(op, (arg,))


def at(t: Term, index: NameVar = k) -> Term:
    return Term(INDEX, (t,), index)


def isum(t: Term, index: NameVar = k) -> Term:
    return Term(INDEX_SUM, (t,), index)


def _rest(bs: Bindings, name: str = "r") -> frozenset[str]:
    return frozenset().union(*(t.random_symbols for t in bs[name]))


def _independent(bs: Bindings) -> bool:
    return not (bs["a"].random_symbols & _rest(bs))


def _independent2(bs: Bindings) -> bool:
    return not (bs["a"].random_symbols & bs["b"].random_symbols)


def _nonrandom(bs: Bindings) -> bool:
    return not bs["a"].random_symbols


def _random(bs: Bindings) -> bool:
    return bool(bs["a"].random_symbols)


def _quadratic(bs: Bindings) -> bool:
    return _random(bs) and not bs["a"].random_symbols & bs["b"].random_symbols


#: the index name the quadratic-form rules sum over (bound at once, so it never clashes)
_I = "_i"


def _integer(name: str):
    return lambda bs: float(bs[name].payload).is_integer()


def _real_power(bs: Bindings) -> bool:
    return bs["c"].payload > 0 or float(bs["d"].payload).is_integer()


def _positive(bs: Bindings) -> bool:
    return bs["c"].payload > 0


def _carries_k(bs: Bindings) -> bool:
    return bs["k"] in bs["a"].indices and any(bs["k"] in t.indices for t in bs["r"])


def _two_indices(bs: Bindings) -> bool:
    return bs["k"] != bs["l"]


def _outside_k(bs: Bindings) -> bool:
    return not any(bs["k"] in t.indices for t in bs["r"])


SEED = Ruleset("seed", (
    rule("log_exp", log(fn(EXP, a)), a),                         # log(exp(a)) -> a
    rule("double", S(a, a, r), S(P(const(2), a), r)),            # a + a -> 2*a
    rule("sum_assoc", S(S(s), r), S(s, r)),                      # (a + b) + c -> a + b + c
))

ALGEBRA_EQUATIONS = Ruleset("algebra_equations", (
    rule("neg", fn(NEG, a), P(const(-1), a)),                    # -a -> (-1)*a
    rule("sum_assoc", S(S(s), r), S(s, r)),                      # (a + b) + c -> a + b + c
    rule("prod_assoc", P(P(s), r), P(s, r)),                     # (a*b)*c -> a*b*c
    rule("sum_consts", S(c, d, r), S(calc("add", c, d), r)),     # c + d -> [c + d]
    rule("prod_consts", P(c, d, r), P(calc("mul", c, d), r)),    # c*d -> [c*d]
    rule("sum_zero", S(const(0), r), S(r)),                      # 0 + a -> a
    rule("prod_one", P(const(1), r), P(r)),                      # 1*a -> a
    rule("prod_zero", P(const(0), r), const(0)),                 # 0*a -> 0
    rule("pow_one", Pow(a, 1), a),                               # a**1 -> a
    rule("pow_zero", Pow(a, 0), const(1)),                       # a**0 -> 1
    rule("double", S(a, a, r), S(P(const(2), a), r)),            # a + a -> 2*a
    rule("collect", S(P(c, s), P(d, s), r),
         S(P(calc("add", c, d), s), r)),                         # c*m + d*m -> (c+d)*m
    rule("collect_one", S(a, P(c, a), r),
         S(P(calc("add", c, const(1)), a), r)),                  # a + c*a -> (c+1)*a
    rule("collect_prod", S(P(s), P(c, s), r),
         S(P(calc("add", c, const(1)), s), r)),                  # m + c*m -> (c+1)*m
    rule("distribute", P(S(a, s), r), S(P(a, r), P(S(s), r))),  # (a + b)*c -> a*c + b*c
    rule("square", P(a, a, r), P(Pow(a, 2), r)),                 # a*a -> a**2
    rule("pow_mul", P(a, Pow(a, c), r),
         P(Pow(a, calc("add", c, const(1))), r)),                # a * a**c -> a**(c+1)
    rule("pow_pow_mul", P(Pow(a, c), Pow(a, d), r),
         P(Pow(a, calc("add", c, d)), r)),                       # a**c * a**d -> a**(c+d)
    rule("expand_square", Pow(S(s), 2), P(S(s), S(s))),          # (a + b)**2 -> (a + b)*(a + b)
    rule("expand_cube", Pow(S(s), 3), P(S(s), S(s), S(s))),      # (a + b)**3 -> (a+b)*(a+b)*(a+b)
    rule("log_exp", log(fn(EXP, a)), a),                         # log(exp(a)) -> a
    rule("log_pow", log(Pow(a, c)), P(c, log(a)), positive="a"),  # log(a**c) -> c*log(a)
    rule("log_prod", log(P(a, r)), S(log(a), log(P(r))),
         positive="a r"),                                        # log(a*b) -> log(a) + log(b)
    rule("log_index", log(at(a)), at(log(a))),                   # log(a_k) -> log(a)_k
    rule("exp_index", fn(EXP, at(a)), at(fn(EXP, a))),           # exp(a_k) -> exp(a)_k
    rule("lgamma_index", lgamma(at(a)), at(lgamma(a))),          # lgamma(a_k) -> lgamma(a)_k
    rule("digamma_index", fn(DIGAMMA, at(a)), at(fn(DIGAMMA, a))),  # digamma(a_k) -> digamma(a)_k
    rule("pow_index", Pow(at(a), c), at(Pow(a, c))),             # (a_k)**c -> (a**c)_k
))

ALGEBRA = ALGEBRA_EQUATIONS + Ruleset("algebra_guarded", (
    rule("pow_consts", Pow(c, d), calc("pow", c, d), when=_real_power),  # c**d -> [c**d]
    rule("pow_prod", Pow(P(a, r), c), P(Pow(a, c), Pow(P(r), c)),
         when=_integer("c")),                                    # (a*b)**n -> a**n * b**n
    rule("pow_pow", Pow(Pow(a, c), d), Pow(a, calc("mul", c, d)),
         when=_integer("d")),                                    # (a**c)**n -> a**(c*n)
    rule("log_const", log(c), calc("log", c), when=_positive),   # log(c) -> [log c]
    rule("log_const_prod", log(P(c, r)), S(calc("log", c), log(P(r))),
         when=_positive),                                        # log(c*a) -> [log c] + log(a)
    rule("exp_const", fn(EXP, c), calc("exp", c)),               # exp(c) -> [exp c]
    rule("lgamma_const", lgamma(c), calc("lgamma", c)),          # lgamma(c) -> [lgamma c]
    rule("digamma_const", fn(DIGAMMA, c), calc("digamma", c)),   # digamma(c) -> [digamma c]
    rule("isum_sum", isum(S(a, r)), S(isum(a), isum(S(r))),
         when=_carries_k),                                       # Σ_k (a + b) -> Σ_k a + Σ_k b
    rule("isum_absorb", P(isum(a), r), isum(P(a, r)), when=_outside_k),  # (Σ_k a_k) b -> Σ_k a_k b
))
ALGEBRA = Ruleset("algebra", ALGEBRA.rules)

#: E[y·B y] for random y and B independent of y: trace(E[B] C[y]) + E[y]·E[B] E[y], the trace
#: written Σ_ij E[B]_ij C[y]_ij (C[y] is symmetric; ``dot`` contracts j, ``sum[_i]`` sums i)
_QUADRATIC = S(isum(at(dot(E(b), C(a)), _I), _I), dot(E(a), matmul(E(b), E(a))))

EXPECTATION = Ruleset("expectation", (
    rule("e_const", E(a), a, when=_nonrandom),                   # E[c] -> c
    rule("e_sum", E(S(a, r)), S(E(a), E(S(r)))),                 # E[a + b] -> E[a] + E[b]
    rule("e_indep", E(P(a, r)), P(E(a), E(P(r))), when=_independent),  # E[a*b] -> E[a]*E[b]
    rule("e_square", E(Pow(x, 2)), S(V(x), Pow(E(x), 2))),       # E[x**2] -> V[x] + E[x]**2
    rule("e_square_matmul", E(Pow(matmul(a, b), 2)), S(V(matmul(a, b)), Pow(E(matmul(a, b)), 2)),
         when=_nonrandom),                                       # E[(B y)**2] -> V[B y] + E[B y]**2
    rule("e_square_dot", E(Pow(dot(a, b), 2)), S(V(dot(a, b)), Pow(E(dot(a, b)), 2)),
         when=_nonrandom),                                       # E[(b·y)**2] -> V[b·y] + E[b·y]**2
    rule("e_square_dot_right", E(Pow(dot(b, a), 2)), S(V(dot(b, a)), Pow(E(dot(b, a)), 2)),
         when=_nonrandom),                                       # E[(y·b)**2] -> V[y·b] + E[y·b]**2
    rule("e_log", E(log(x)), Elog(x)),                           # E[log x] -> Elog(x)
    rule("e_log1m", E(log(S(const(1), P(const(-1), x)))), Elog1m(x)),  # E[log(1-x)] -> Elog1m(x)
    rule("e_lgamma", E(lgamma(x)), Eloggamma(x)),                # E[lgamma x] -> Eloggamma(x)
    rule("e_logdet", E(logdet(x)), Elogdet(x)),                  # E[logdet x] -> Elogdet(x)
    rule("e_index", E(at(a)), at(E(a))),                         # E[a_k] -> E[a]_k
    # E[x_k x_l] -> C[x]_kl + E[x]_k E[x]_l (k ≠ l)
    rule("e_outer", E(P(at(x), at(x, l_))), S(at(at(C(x), l_)), P(at(E(x)), at(E(x), l_))),
         when=_two_indices),
    rule("e_isum", E(isum(a)), isum(E(a))),                      # E[Σ_k a] -> Σ_k E[a]
    rule("e_dot", E(dot(a, b)), dot(E(a), E(b)), when=_independent2),  # E[a·b] -> E[a]·E[b]
    rule("e_matmul", E(matmul(a, b)), matmul(E(a), E(b)),
         when=_independent2),                                    # E[A z] -> E[A] E[z]
    # variances (elementwise)
    rule("v_const", V(a), const(0), when=_nonrandom),            # V[c] -> 0
    rule("v_index", V(at(a)), at(V(a))),                         # V[a_k] -> V[a]_k
    rule("v_sum", V(S(a, r)), S(V(a), V(S(r))), when=_independent),  # V[a + b] -> V[a] + V[b]
    rule("v_scale", V(P(a, r)), P(Pow(a, 2), V(P(r))), when=_nonrandom),  # V[c*b] -> c**2 V[b]
    rule("v_matmul", V(matmul(a, b)), dot(matmul(a, C(b)), a),
         when=_nonrandom),                                       # V[B y] -> diag(B C[y] Bᵀ)
    rule("v_dot", V(dot(a, b)), dot(a, matmul(C(b), a)), when=_nonrandom),  # V[b·y] -> b·C[y]b
    rule("v_dot_right", V(dot(b, a)), dot(a, matmul(C(b), a)),
         when=_nonrandom),                                       # V[y·b] -> b·C[y]b
    rule("v_moment", V(a), S(E(Pow(a, 2)), P(const(-1), Pow(E(a), 2))),
         when=lambda bs: bs["a"].op != "sym"),                   # V[a] -> E[a**2] - E[a]**2
    # vectors y (one positional axis, plates as named axes): covariance C over the last axis
    rule("c_const", C(a), const(0), when=_nonrandom),            # C[a] -> 0 (broadcasts)
    rule("c_sum", C(S(a, r)), S(C(a), C(S(r))), when=_independent),  # C[a + b] -> C[a] + C[b]
    rule("c_scale", C(P(c, r)), P(Pow(c, 2), C(P(r)))),          # C[c*b] -> c**2 C[b]
    rule("c_matmul", C(matmul(a, b)), matmul(matmul(a, C(b)), transpose(a)),
         when=_nonrandom),                                       # C[B y] -> B C[y] Bᵀ
    # second moments of vectors: E[y·y] = tr C[y] + E[y]·E[y], quadratic forms
    rule("e_dot_self", E(dot(a, a)), S(isum(at(V(a), _I), _I), dot(E(a), E(a))),
         when=_random),                                          # E[y·y] -> Σ_i V[y]_i + E[y]·E[y]
    rule("e_quadratic", E(dot(a, matmul(b, a))), _QUADRATIC,
         when=_quadratic),                                       # E[y·By] -> tr(E[B]C[y]) + ...
    rule("e_quadratic_left", E(dot(matmul(b, a), a)), _QUADRATIC,
         when=_quadratic),                                       # E[By·y] -> tr(E[B]C[y]) + ...
))

__all__ = ["ALGEBRA", "ALGEBRA_EQUATIONS", "EXPECTATION", "SEED", "Rule"]
