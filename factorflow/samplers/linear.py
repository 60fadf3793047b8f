"""Joint Gaussian draws of coupled real and vector variables: regression coefficients.

Real variables that meet in one site (``a + b1 * x1 + b2 * x2``) or whose elements are
summed together (``ff.sum(X * beta, k)``, a plate of coefficients) are not conditionally
independent: drawn one at a time they mix as slowly as they are correlated, and the
elements of a summed plate cannot be drawn elementwise at all. When every site that
reads them is a polynomial of degree two in them jointly, their joint conditional is
Gaussian, ``exp(bᵀθ − ½ θᵀ Q θ)``, and one draw from ``N(Q⁻¹ b, Q⁻¹)`` by a Cholesky
factor of ``Q`` updates them all (batched over chains).

``Q`` and ``b`` are derived like the one-variable conditionals
(:mod:`.conditionals`): the rewrite engine brings each site's log density, the block's
reads as symbols, to a sum of monomials; each monomial must be a coefficient (a term in
the other variables) times at most two *affine forms* in the block — a read of one
variable, or ``Σ_k c_k θ_k`` of a summed plate. The coefficients are evaluated at the
latest samples over whole plates, so the precisions may themselves be sampled (a
scale mixture's auxiliaries, a horseshoe's local scales) and a Pólya-Gamma likelihood
(``(y − n/2) ψ − ω ψ²/2``, ψ affine) is quadratic like a Gaussian one.

A VectorGaussian statement has no term (two indices): it is read natively. With its
sample minus its mean affine in the block, ``s − μ = A θ + c`` (a vector variable ``w``,
``B @ z + c``, a VectorGaussian mean), and a known precision Λ, it adds ``AᵀΛA`` to Q and
``−AᵀΛc`` to b. ``X @ w`` (``ff.inner``) is ``Σ_k X_k w_k`` like a summed plate.

θ stacks the members' elements, ``(chains, D)``; a monomial ``r · ℓ₁ᵀθ · ℓ₂ᵀθ`` takes
``Σ_sites r (ℓ₁ℓ₂ᵀ + ℓ₂ℓ₁ᵀ)`` from Q, where ``ℓ`` is the form's coefficient vector over
θ per site element (one array operation per monomial, never a loop per datum).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from factorflow.errors import ModelError, UnsupportedFactorError
from factorflow.model.core import Variable
from factorflow.rewrite.match import normalize
from factorflow.rewrite.rules import ALGEBRA
from factorflow.rewrite.terms import (
    CONST,
    INDEX,
    INDEX_SUM,
    POW,
    PROD,
    SUM,
    SYM,
    Term,
    index_sum,
    sym,
)
from factorflow.rewrite.user import user_rules
from factorflow.samplers.densities import substitute
from factorflow.samplers.numpy_terms import compile_term
from factorflow.samplers.sites import Access, Site, align

#: coupled variables that could also be drawn one at a time are drawn jointly up to
#: this many coordinates (the Cholesky factor costs D³ per sweep)
MAX_OPTIONAL = 64
#: the most coordinates of a block that must be drawn jointly (a summed plate)
MAX_JOINT = 2048

Evaluate = Callable[[dict[str, np.ndarray]], np.ndarray]


@dataclass(frozen=True)
class _Affine:
    """An affine form in the block: ``Σ constants + Σ_j coefficient_j · read_j`` (inside
    ``Σ_k`` over the last axis when ``summed``)."""

    constants: tuple[Evaluate, ...]
    linear: tuple[tuple[Evaluate | None, Access], ...]
    summed: bool


@dataclass(frozen=True)
class _Monomial:
    rest: Evaluate
    forms: tuple[_Affine, ...]
    #: whether it reads only known values (its share of Q and b is computed once a run)
    static: bool = False


def _ones(env: dict[str, np.ndarray]) -> np.ndarray:
    return np.ones(())


class GaussianBlock:
    """One joint draw of ``variables`` from their Gaussian conditional (module docstring).

    Raises ModelError, naming the site and the term, when a site is not quadratic in
    them."""

    def __init__(self, variables: list[Variable], sites: list[Site]) -> None:
        self.variables = variables
        self.offsets, self.sizes, offset = {}, {}, 0
        for v in variables:
            self.offsets[v.name], self.sizes[v.name] = offset, coordinates(v)
            offset += self.sizes[v.name]
        self.size = offset
        mine = {id(v) for v in variables}
        self.sites = [s for s in sites if any(id(a.source) in mine for a in s.accesses.values())]
        self.parts = [(s, _monomials(s, mine, variables)) for s in self.sites if not s.native]
        self.native = [s for s in self.sites if s.native]
        self._basis: dict[str, np.ndarray] = {}
        self._own = {a.name for s in self.sites for a in s.accesses.values()
                     if id(a.source) in mine}
        self._static: tuple[Any, tuple[np.ndarray, np.ndarray]] | None = None

    @property
    def names(self) -> list[str]:
        return [v.name for v in self.variables]

    def precision(self, values: dict[str, np.ndarray], known: dict[str, Any], chains: int
                  ) -> tuple[np.ndarray, np.ndarray]:
        """``(Q, b)`` of the joint conditional at ``values``: ``(chains, D, D)``,
        ``(chains, D)``."""
        if self._static is None or self._static[0] is not known:
            self._static = (known, self._sum(True, values, known, 1))
        q, b = self._sum(False, values, known, chains)
        return q + self._static[1][0], b + self._static[1][1]

    def _sum(self, static: bool, values: dict[str, np.ndarray], known: dict[str, Any],
             chains: int) -> tuple[np.ndarray, np.ndarray]:
        """The shares of Q and b of the monomials that are ``static`` (or not)."""
        q = np.zeros((chains, self.size, self.size))
        b = np.zeros((chains, self.size))
        for site in self.native if static else ():
            self._vector_gaussian(site, values, known, q, b)
        for site, monomials in self.parts:
            chosen = [m for m in monomials if m.static == static]
            if not chosen:
                continue
            env = site.environment(values, known, skip=self._own)
            mask = site.mask(values, known)
            shape = (chains, *(p.size for p in site.plates))
            for m in chosen:
                r = np.asarray(m.rest(env), dtype=float)
                if mask is not None:
                    r = r * mask
                r = _flat(r, shape, ())
                forms = [self._evaluate(f, env, shape) for f in m.forms]
                if len(forms) == 1:
                    b += np.einsum("cs,csi->ci", r, forms[0][1])
                    continue
                (c1, l1), (c2, l2) = forms
                b += np.einsum("cs,csi->ci", r * c1, l2) + np.einsum("cs,csi->ci", r * c2, l1)
                outer = np.einsum("cs,csi,csj->cij", r, l1, l2)
                q -= outer + outer.transpose(0, 2, 1)
        return q, b

    def _vector_gaussian(self, site: Site, values: dict[str, np.ndarray],
                         known: dict[str, Any], q: np.ndarray, b: np.ndarray) -> None:
        """A VectorGaussian N(s; μ, Λ⁻¹) with s − μ = A θ + c affine in the block and Λ
        known: Q += Σ Aᵀ Λ A and b −= Σ Aᵀ Λ c over the plate elements."""
        a_s, c_s = self._vector_affine(site, site.vectors["sample"], values, known)
        a_m, c_m = self._vector_affine(site, site.vectors["mean"], values, known)
        lam = site.accesses[site.vectors["precision"]].read(values, known)
        a, c = a_s - a_m, c_s - c_m
        lead = np.broadcast_shapes(a.shape[:-2], c.shape[:-1], lam.shape[:-2])
        d = lam.shape[-1]
        a = np.broadcast_to(a, (*lead, d, self.size)).reshape(-1, d, self.size)
        c = np.broadcast_to(c, (*lead, d)).reshape(-1, d)
        lam = np.broadcast_to(lam, (*lead, d, d)).reshape(-1, d, d)
        q += np.einsum("sdn,sde,sem->nm", a, lam, a)
        b -= np.einsum("sdn,sde,se->n", a, lam, c)

    def _vector_affine(self, site: Site, form: Any, values: dict[str, np.ndarray],
                       known: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        """A vector form of ``site`` as ``(A, c)``: ``(..., D, n)`` and ``(..., D)``."""
        if form[0] == "plus":
            (a1, c1), (a2, c2) = (self._vector_affine(site, f, values, known)
                                  for f in form[1:])
            return a1 + a2, c1 + c2
        if form[0] == "matvec":
            matrix = site.accesses[form[1]].read(values, known)
            a, c = self._vector_affine(site, form[2], values, known)
            return matrix @ a, (matrix @ c[..., None])[..., 0]
        access = site.accesses[form[1]]
        if access.variable in self.variables:
            basis = self._basis_of(access)
            return basis, np.zeros(basis.shape[:-1])
        value = access.read(values, known)
        return np.zeros((*value.shape, self.size)), value

    def _evaluate(self, form: _Affine, env: dict[str, np.ndarray],
                  shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """(constant ``(chains, S)``, coefficient vector ``ℓ`` ``(chains, S, D)``)."""
        const = sum((np.asarray(fn(env), dtype=float) for fn in form.constants),
                    np.zeros(()))
        ell = np.zeros(())
        for coefficient, access in form.linear:
            basis = self._basis_of(access)
            if coefficient is not None:
                c = np.asarray(coefficient(env), dtype=float)
                part = c[..., None] * basis if c.ndim else c * basis
            else:
                part = basis
            if form.summed:
                part = part.sum(axis=-2)
            ell = ell + part
        return _flat(const, shape, ()), _flat(ell, shape, (self.size,))

    def _basis_of(self, access: Access) -> np.ndarray:
        """The coordinates of what ``access`` reads, one-hot over θ, laid out
        ``(1, *site plates|1, [summed plate,] D)``."""
        if access.name not in self._basis:
            v = access.variable
            n = coordinates(v)
            event = (v.size,) if v.domain == "vector" else ()
            eye = np.eye(n).reshape((1, *v.shape, *event, n))
            placed = align(eye, v.plates, access.plates + access.inner,
                           event_ndim=1 + len(event))
            full = np.zeros((*placed.shape[:-1], self.size))
            start = self.offsets[v.name]
            full[..., start:start + n] = placed
            self._basis[access.name] = full
        return self._basis[access.name]

    def update(self, rng: np.random.Generator, values: dict[str, np.ndarray],
               known: dict[str, Any], chains: int) -> None:
        """Draw the block from ``N(Q⁻¹ b, Q⁻¹)``; writes its variables into ``values``."""
        q, b = self.precision(values, known, chains)
        q = 0.5 * (q + q.transpose(0, 2, 1))
        try:
            chol = np.linalg.cholesky(q)
        except np.linalg.LinAlgError:
            raise ModelError(
                f"the joint conditional of {', '.join(map(repr, self.names))} is an improper "
                "Gaussian (its precision matrix is not positive definite); give them proper "
                "Gaussian priors.") from None
        # θ = L⁻ᵀ (L⁻¹ b + z): mean Q⁻¹ b, covariance L⁻ᵀ L⁻¹ = Q⁻¹
        z = rng.standard_normal((chains, self.size, 1))
        theta = np.linalg.solve(chol.transpose(0, 2, 1),
                                np.linalg.solve(chol, b[..., None]) + z)[..., 0]
        for v in self.variables:
            start = self.offsets[v.name]
            event = (v.size,) if v.domain == "vector" else ()
            values[v.name] = theta[:, start:start + self.sizes[v.name]].reshape(
                (chains, *v.shape, *event))


def coordinates(v: Variable) -> int:
    """How many coordinates of θ the variable ``v`` holds: one per plate element (times
    D for a D-vector)."""
    return int(np.prod(v.shape, dtype=int)) * (int(v.size) if v.domain == "vector" else 1)


def _flat(x: np.ndarray, shape: tuple[int, ...], trailing: tuple[int, ...]) -> np.ndarray:
    """``x`` (broadcastable to ``shape + trailing``) as ``(chains, S, *trailing)``."""
    x = np.broadcast_to(x, (*shape, *trailing))
    return x.reshape((shape[0], -1, *trailing))


def _monomials(site: Site, mine: set[int], variables: list[Variable]) -> list[_Monomial]:
    """The monomials of ``site``'s log density that read the block (see the module
    docstring); ModelError naming the term that is not quadratic in the block."""
    own = {a.name for a in site.accesses.values() if id(a.source) in mine}
    term = substitute(site.term, {name: sym(name) for name in own})
    form = normalize(term, ALGEBRA + user_rules())
    names = ", ".join(repr(v.name) for v in variables)

    def refuse(part: Term) -> ModelError:
        return ModelError(f"in {site.label}, {site.describe(str(part))} is not affine in "
                          f"{names}, so their joint conditional is not Gaussian")

    def reads(t: Term) -> bool:
        return bool(t.symbols & own)

    def compiled(t: Term) -> Evaluate:
        return compile_term(t)[0]

    def direct(t: Term) -> _Affine:
        if t.op != SYM or t.payload[0] not in own or site.accesses[t.payload[0]].inner:
            raise refuse(t)
        return _Affine((), ((None, site.accesses[t.payload[0]]),), False)

    def summed(t: Term) -> _Affine:
        index, body = t.payload, t.args[0]
        constants, linear = [], []
        for mono in body.args if body.op == SUM else (body,):
            factors = mono.args if mono.op == PROD else (mono,)
            read = [f for f in factors if reads(f)]
            if not read:
                constants.append(compiled(index_sum(mono, index)))
                continue
            f = read[0]
            if (len(read) > 1 or f.op != INDEX or f.payload != index or f.args[0].op != SYM):
                raise refuse(mono)
            rest = Term(PROD, tuple(g for g in factors if g is not f))
            coefficient = compiled(rest) if rest.indices else _broadcast(compiled(rest))
            linear.append((coefficient, site.accesses[f.args[0].payload[0]]))
        return _Affine(tuple(constants), tuple(linear), True)

    def factor_forms(f: Term) -> list[_Affine]:
        if f.op == POW and f.args[1].op == CONST and f.args[1].payload == 2.0:
            return factor_forms(f.args[0]) * 2
        if f.op == INDEX_SUM:
            return [summed(f)]
        return [direct(f)]

    out = []
    for mono in form.args if form.op == SUM else (form,):
        if not reads(mono):
            continue
        if mono.op == INDEX_SUM and reads(mono.args[0]):
            index, body = mono.payload, mono.args[0]
            factors = body.args if body.op == PROD else (body,)
            outside = [f for f in factors if reads(f) and index not in f.indices]
            inside = Term(PROD, tuple(f for f in factors if not any(f is g for g in outside)))
            forms = [g for f in outside for g in factor_forms(f)]
            if reads(inside):
                forms.append(summed(index_sum(inside, index)))
                rest = _ones
            else:
                rest = compiled(index_sum(inside, index))
        else:
            factors = mono.args if mono.op == PROD else (mono,)
            forms = [g for f in factors if reads(f) for g in factor_forms(f)]
            rest_term = Term(PROD, tuple(f for f in factors if not reads(f)))
            rest = compiled(rest_term)
        if len(forms) > 2:
            raise ModelError(f"in {site.label}, {site.describe(str(mono))} is of degree "
                             f"{len(forms)} in {names}, so their joint conditional is not "
                             "Gaussian")
        random = {n for n, a in site.accesses.items() if a.is_random} - own
        static = not site.gates and not (mono.symbols & random)
        out.append(_Monomial(rest, tuple(forms), static))
    return out


def _broadcast(fn: Evaluate) -> Evaluate:
    """``fn`` whose value does not carry the summed axis, given a size-1 one."""
    return lambda env: np.asarray(fn(env), dtype=float)[..., None]


def gaussian_blocks(latent: list[Variable], sites: list[Site]) -> list[GaussianBlock]:
    """The blocks of coupled real variables of ``latent`` to draw jointly: those whose
    elements a site sums (they must be drawn jointly: UnsupportedFactorError naming them
    and the fallbacks refused when no Gaussian conditional is found), and those that
    meet in a site, when their joint conditional is Gaussian and has at most
    :data:`MAX_OPTIONAL` coordinates (else they stay one at a time)."""
    candidates = {id(v): v for v in latent
                  if v.domain in ("real", "vector") and not v.derived}
    for site in sites:  # read through an index or as a condition: drawn one at a time
        for a in site.accesses.values():
            if a.index is not None:
                candidates.pop(id(a.source), None)
                candidates.pop(id(a.index), None)
    parent = {k: k for k in candidates}

    def find(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    required: set[int] = set()
    coupled: set[int] = set()
    for site in sites:
        read = list(dict.fromkeys(id(a.source) for a in site.accesses.values()
                                  if id(a.source) in candidates))
        for a in site.accesses.values():
            if id(a.source) in candidates and (set(a.inner) & set(a.source.plates)
                                               or a.source.domain == "vector"):
                required.add(id(a.source))
        for k in read[1:]:
            parent[find(k)] = find(read[0])
        if len(read) > 1:
            coupled.update(read)
    groups: dict[int, list[Variable]] = {}
    for k, v in candidates.items():
        groups.setdefault(find(k), []).append(v)
    blocks = []
    for members in groups.values():
        ids = {id(v) for v in members}
        must = bool(ids & required)
        if not must and not ids & coupled:
            continue
        size = sum(coordinates(v) for v in members)
        names = ", ".join(repr(v.name) for v in members)
        if not must and size > MAX_OPTIONAL:
            continue
        try:
            if size > MAX_JOINT:
                raise ModelError(f"they have {size} coordinates, more than {MAX_JOINT}")
            blocks.append(GaussianBlock(members, sites))
        except ModelError as exc:
            if must:
                raise UnsupportedFactorError(
                    f"no sampler for {names}: a site sums the elements of a plate or vector "
                    f"of them (ff.sum, ff.inner), so they must be drawn jointly, but {exc}; "
                    "fallbacks refused: "
                    "one element at a time (they are not conditionally independent), slice "
                    "sampling (univariate only). Give them Gaussian priors and enter them "
                    "linearly, or use 'ep' or 'vmp'.") from None
    return blocks


def describe(block: GaussianBlock) -> str:
    """How the block was found, for ``compiled.samplers``."""
    return (f"jointly with {', '.join(block.names)}: every site reading them is quadratic "
            f"in them ({', '.join(s.label for s in block.sites)}); one draw from "
            f"N(Q⁻¹b, Q⁻¹) by a Cholesky factor of Q ({block.size} coordinates)")
