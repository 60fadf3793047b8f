"""Full conditionals of a model's variables, derived from its log-density terms.

For a continuous variable ``x`` the conditional is found, not looked up: every site that
reads ``x`` (:mod:`factorflow.samplers.sites`) gives its log density as a term with ``x``
the only random symbol, and the rewrite engine (``normalize`` under the ``ALGEBRA`` rules,
through :func:`factorflow.factors.derive.derive_naturals`) must bring it to
``Σ_i η_i T_i(x) + const`` with the statistics ``T_i`` of a candidate family
(:data:`factorflow.samplers.families.CANDIDATES`). That relation is the conjugacy
relation: the Gaussian mean of a Gaussian (``x`` and ``x²``, an affine mean included),
the Gamma precision of a Gaussian or rate of a Poisson (``log x`` and ``x``), the Beta
probability of a Bernoulli or Binomial, the Dirichlet probabilities of a Discrete. The
natural parameters ``η_i`` are terms in the other variables, evaluated at their latest
samples and summed over the sites (and plates) at each draw.

A finite discrete variable (boolean, category) has its conditional by enumeration: the
log density of every site that reads it, gates and ``ff.Switch`` indexing included, at
each of its values. A scalar continuous variable with no conjugate family falls back to
slice sampling (:mod:`.slice`) of the same summed log density. A count (unbounded)
variable has neither and is refused, as is a non-conjugate simplex.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from factorflow.errors import ModelError, UnsupportedFactorError
from factorflow.factors.derive import split_statistics
from factorflow.model.core import FactorCall, Variable
from factorflow.rewrite.match import normalize
from factorflow.rewrite.rules import ALGEBRA
from factorflow.rewrite.terms import Term, add, const, sym
from factorflow.samplers.densities import K
from factorflow.samplers.families import CANDIDATES, FAMILIES
from factorflow.samplers.numpy_terms import compile_term
from factorflow.samplers.sites import Access, Site, read_site
from factorflow.samplers.slice import SLICE_DOMAINS, slice_step


@dataclass(frozen=True)
class Piece:
    """One site's share of a conjugate conditional: the natural parameters (terms in the
    site's other accesses) multiplying the family's statistics of ``access``."""

    site: Site
    access: Access
    naturals: tuple[Term, ...]
    functions: tuple[Callable[[dict[str, np.ndarray]], np.ndarray], ...] = ()


@dataclass(eq=False)
class Conditional:
    """How one variable is drawn given all the others.

    ``kind`` is "conjugate" (``family`` and its ``pieces``), "enumerate", "slice" (over
    the ``sites`` that read the variable) or "block" (drawn jointly with others by
    ``block``); ``rewrites`` says how it was found, for
    ``compiled.samplers``; ``then`` names the auxiliaries to draw right after this
    variable (those a collapsed conditional marginalizes)."""

    variable: Variable
    kind: str
    sites: list[Site]
    family: str | None = None
    pieces: list[Piece] = field(default_factory=list)
    rewrites: tuple[str, ...] = ()
    then: tuple[str, ...] = ()
    #: conjugate children integrated out of a slice-sampled variable's conditional
    marginals: list[Marginal] = field(default_factory=list)
    #: kind "block": the :class:`~factorflow.samplers.linear.GaussianBlock` drawing it
    block: Any = None

    @property
    def event(self) -> tuple[int, ...]:
        v = self.variable
        return (v.size,) if v.domain == "simplex" else ()

    def draw(self, rng: np.random.Generator, values: dict[str, np.ndarray],
             known: dict[str, Any], chains: int) -> np.ndarray:
        """A draw from the conditional given ``values`` (every other variable's latest
        sample), laid out ``(chains, *plates, *event)``."""
        if self.kind == "conjugate":
            return self._draw_conjugate(rng, values, known, chains)
        if self.kind == "slice":
            return slice_step(self.log_density(values, known, chains),
                              values[self.variable.name], self.variable.domain, rng)
        return self._draw_enumerated(rng, values, known, chains)

    def _draw_conjugate(self, rng: np.random.Generator, values: dict[str, np.ndarray],
                        known: dict[str, Any], chains: int) -> np.ndarray:
        eta = self.naturals(self.pieces, values, known, chains)
        return FAMILIES[self.family].draw(rng, eta, self.variable.name)

    def naturals(self, pieces: list[Piece], values: dict[str, np.ndarray],
                 known: dict[str, Any], chains: int) -> list[np.ndarray]:
        """The natural parameters of a conjugate conditional summed over ``pieces`` (all
        of them: the conditional; some: a part of it), on the variable's layout."""
        eta: list[np.ndarray] | None = None
        for piece in pieces:
            env = piece.site.environment(values, known, skip=(piece.access.name,))
            mask = piece.site.mask(values, known)
            parts = []
            for fn in piece.functions:
                value = np.asarray(fn(env), dtype=float)
                if mask is not None:
                    value = value * (mask[..., None] if self.event else mask)
                parts.append(piece.access.gather(value, values, known, chains, self.event))
            eta = parts if eta is None else [a + b for a, b in zip(eta, parts, strict=True)]
        assert eta is not None
        return eta

    def log_density(self, values: dict[str, np.ndarray], known: dict[str, Any],
                    chains: int) -> Callable[[np.ndarray], np.ndarray]:
        """The log conditional of the variable, up to a constant, as a function of its
        value (its layout), elementwise: the sum of the sites that read it, masked by
        their gates (and the marginalized children's evidence). Everything but the
        variable's own reads is read once, here."""
        name = self.variable.name
        density = joint_density([self.variable], self.sites, self.marginals, values, known,
                                chains)
        return lambda value: density({name: value})

    def log_weights(self, values: dict[str, np.ndarray], known: dict[str, Any],
                    chains: int) -> np.ndarray:
        """The unnormalised log conditional of each value of a finite discrete variable,
        ``(chains, *plates, values)``."""
        var = self.variable
        count = 2 if var.domain == "bool" else int(var.size)
        shape = (chains, *var.shape)
        density = self.log_density(values, known, chains)
        return np.stack([density(np.full(shape, value, dtype=np.int64))
                         for value in range(count)], axis=-1)

    def _draw_enumerated(self, rng: np.random.Generator, values: dict[str, np.ndarray],
                         known: dict[str, Any], chains: int) -> np.ndarray:
        logits = self.log_weights(values, known, chains)
        logits = np.where(np.isnan(logits), -np.inf, logits)
        if np.any(np.all(np.isneginf(logits), axis=-1)):
            raise ModelError(f"every value of {self.variable.name!r} has probability zero "
                             "given the other variables (contradictory evidence).")
        return np.argmax(logits + rng.gumbel(size=logits.shape), axis=-1)


def joint_density(variables: list[Variable], sites: list[Site], marginals: list[Marginal],
                  values: dict[str, np.ndarray], known: dict[str, Any], chains: int
                  ) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
    """The log density of ``sites`` and ``marginals`` as a function of the values of
    ``variables`` (a dict by name; the rest at ``values``), summed onto the layout of
    ``variables[0]`` — elementwise for one variable; for several, scalar variables only."""
    mine = {id(v) for v in variables}
    parts = []
    for site in sites:
        own = [a for a in site.accesses.values()
               if id(a.source) in mine or id(a.index) in mine]
        env = site.environment(values, known, skip={a.name for a in own})
        indexed = [a for a in own if a.source is variables[0] and a.index is not None]
        gather = indexed[0] if indexed else Access("", variables[0], None, site.plates)
        gated = any(id(g.condition) in mine for g in site.gates)
        parts.append((site, own, env, gather, gated))
    evidence = [(m, m.log_evidence(mine, values, known, chains)) for m in marginals]
    shape = (chains, *variables[0].shape)

    def density(trial_values: dict[str, np.ndarray]) -> np.ndarray:
        trial = {**values, **trial_values}
        total = np.zeros(shape)
        for site, own, env, gather, gated in parts:
            for a in own:
                env[a.name] = a.read(trial, known)
            with np.errstate(divide="ignore", invalid="ignore"):
                lp = site.log_density(env)
            mask = site.mask(trial, known) if gated or site.gates else None
            if mask is not None:
                lp = np.where(mask > 0, lp, 0.0)
            total += gather.gather(lp, trial, known, chains)
        for m, fn in evidence:
            total += m.access.gather(fn(trial), trial, known, chains)
        return total

    return density


@dataclass(eq=False)
class Marginal:
    """A conjugate child integrated out of a parent's conditional: ``child`` (its
    conditional), its ``prior`` piece (which reads the parent through ``access``) and the
    ``others`` (which do not read the parent)."""

    child: Conditional
    prior: Piece
    others: list[Piece]
    access: Access

    def log_evidence(self, mine: set[int], values: dict[str, np.ndarray],
                     known: dict[str, Any], chains: int
                     ) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
        """log ∫ prior(x) Π others(x) dx over the child x, up to terms free of the parents
        (the variables whose ids are ``mine``): log Z(η_prior + η_others) − log Z(η_prior),
        as a function of the parents' trial values, on the child's layout. The others'
        naturals and everything the prior reads but the parents are read once, here."""
        log_z = FAMILIES[self.child.family].log_normalizer
        assert log_z is not None
        child, site = self.child, self.prior.site
        likelihood = child.naturals(self.others, values, known, chains) if self.others \
            else None
        own = [a for a in site.accesses.values() if id(a.source) in mine]
        env = site.environment(values, known, skip={self.prior.access.name,
                                                    *(a.name for a in own)})

        def evidence(trial: dict[str, np.ndarray]) -> np.ndarray:
            # the prior's site is the child's layout (size-1 axes where η_prior is the same
            # for every element: log Z(η_prior) is computed once for them)
            for a in own:
                env[a.name] = a.read(trial, known)
            prior = [np.asarray(fn(env), dtype=float) for fn in self.prior.functions]
            post = prior if likelihood is None else [
                a + b for a, b in zip(prior, likelihood, strict=True)]
            with np.errstate(divide="ignore", invalid="ignore"):
                return log_z(post) - log_z(prior)

        return evidence


def marginalize(c: Conditional, conditionals: list[Conditional]) -> Conditional:
    """``c`` (a slice-sampled variable v) with its conjugate children integrated out: a
    child x whose prior reads v, whose other sites do not, and whose family has a log
    normalizer Z contributes log Z(η_prior(v) + η_others) − log Z(η_prior(v)) instead of
    its prior's log density (the Beta–Binomial hyperparameters: the marginal likelihood of
    a and b, the 71 p's integrated out). v is then drawn from p(v | rest, x integrated
    out) and x right after it from p(x | v, rest): a valid block update, that mixes as
    fast as the marginal posterior of v allows instead of being pinned by x."""
    var, sites, marginals, notes = c.variable, list(c.sites), [], []
    for child in conditionals:
        if child.kind != "conjugate" or FAMILIES[child.family].log_normalizer is None:
            continue
        prior = [p for p in child.pieces if p.site.statement.output is child.variable]
        others = [p for p in child.pieces if p.site.statement.output is not child.variable]
        if (len(prior) != 1 or not prior[0].site.reads(var) or prior[0].site.gates
                or any(p.site.reads(var) or p.site.gates for p in others)):
            continue
        reads = [a for a in prior[0].site.accesses.values() if a.source is var]
        if len(reads) != 1 or any(a.index is var for a in prior[0].site.accesses.values()):
            continue
        sites = [s for s in sites if s is not prior[0].site]
        marginals.append(Marginal(child, prior[0], others, reads[0]))
        notes.append(f"{child.variable.name} integrated out ({child.family}: log Z(η_prior "
                     f"+ η_data) − log Z(η_prior)), then drawn given {var.name}")
    if not marginals:
        return c
    return Conditional(var, "slice", sites, rewrites=(*c.rewrites, *notes),
                       then=tuple(m.child.variable.name for m in marginals),
                       marginals=marginals)


def conditional(var: Variable, sites: list[Site]) -> Conditional:
    """The conditional of ``var`` given the other variables, from the ``sites`` that read
    it. Raises ModelError naming ``var`` when no conjugate family fits (with the term
    that blocks each family) or for a latent count."""
    mine = [s for s in sites if s.reads(var)]
    if var.domain in ("bool", "int"):
        indexed = [s for s in mine for a in s.accesses_of(var) if a.index is not None]
        if indexed:
            raise UnsupportedFactorError(
                f"{var.name!r} is read through an index ({indexed[0].label}); Gibbs sampling "
                "enumerates a category only where it is read directly.")
        return Conditional(var, "enumerate", mine,
                           rewrites=(f"enumerate {2 if var.domain == 'bool' else var.size} "
                                     "values",))
    coupled = [s for s in mine if len(s.accesses_of(var)) > 1
               and any(a.index is not None for a in s.accesses_of(var))]
    if coupled:
        raise UnsupportedFactorError(
            f"{coupled[0].label} reads several elements of {var.name!r} through indices "
            f"({', '.join(a.label for a in coupled[0].accesses_of(var))}): they are coupled, "
            "and Gibbs sampling draws the elements of a variable together; give each read "
            "its own variable (e.g. a Gaussian performance per player).")
    summed = [(s, a) for s in mine for a in s.accesses_of(var) if set(a.inner) & set(var.plates)]
    if summed:
        site, access = summed[0]
        raise UnsupportedFactorError(
            f"no sampler for {var.name!r}: {site.label} sums its elements (ff.sum over "
            f"{access.inner[0].name!r}), so they are coupled and no joint Gaussian "
            "conditional was found for them; fallbacks refused: one element at a time "
            "(they are not conditionally independent), slice sampling (univariate only). "
            f"Give {var.name!r} a Gaussian prior and enter it linearly, or use 'ep' or 'vmp'.")
    if var.domain == "count":
        raise UnsupportedFactorError(
            f"no sampler for {var.name!r}: it is a latent count, whose support is unbounded "
            "(or set by another variable), with no conjugate conditional; fallbacks refused: "
            "enumeration (finite categories only), slice sampling (continuous variables "
            f"only). Observe {var.name!r}, or make it an ff.Discrete over its values.")
    if var.domain not in CANDIDATES:
        raise UnsupportedFactorError(
            f"no sampler for {var.name!r}: Gibbs sampling has no conditional for a latent "
            f"{var.domain} variable; fallbacks refused: enumeration (finite categories "
            "only), slice sampling (univariate only). Use 'ep' or 'vmp'.")
    reasons = []
    for family in CANDIDATES[var.domain]:
        pieces, reason = [], None
        for site in mine:
            try:
                pieces.append(_piece(site, var, family))
            except ModelError as exc:
                reason = f"{family}: in {site.label}, {site.describe(str(exc))}"
                break
        if reason is not None:
            reasons.append(reason)
            continue
        found = tuple(_found(p, var, family) for p in pieces)
        return Conditional(var, "conjugate", mine, family, pieces, found)
    if var.domain in SLICE_DOMAINS:
        return Conditional(var, "slice", mine, rewrites=(
            f"no conjugate family: {', '.join(CANDIDATES[var.domain])} refused",
            f"slice sampling in {SLICE_DOMAINS[var.domain]}"))
    raise UnsupportedFactorError(
        f"no sampler for {var.name!r}: its conditional is in no conjugate family "
        f"({'; '.join(reasons)}); fallbacks refused: slice sampling (univariate only, and "
        f"{var.name!r} is a {var.domain} vector). Use 'ep' or 'vmp', or change its prior.")


def collapse(c: Conditional, expanded: list[tuple[FactorCall, Any]],
             statements: list[FactorCall], definitions: dict[str, int]) -> Conditional:
    """``c`` (a slice-sampled variable) with the auxiliaries of an expansion marginalized
    when their prior reads the variable (the dispersion r of a negative binomial, in the
    Pólya-Gamma shape y + r): conditioned on ω, r would be pinned by PG(ω | y + r, 0) and
    mix slowly. The collapsed conditional reads the statement as written instead of its
    expansion; drawing r from p(r | rest, ω marginalized) and then ω from p(ω | r, rest)
    draws the pair (r, ω) from its joint conditional, a valid block update."""
    var, sites, then, notes = c.variable, list(c.sites), [], []
    for original, expansion in expanded:
        mixing = [s for s in sites if s.statement in expansion.statements
                  and s.statement.output in expansion.auxiliaries and s.reads(var)]
        if not mixing:
            continue
        sites = [s for s in sites if s.statement not in expansion.statements]
        sites.append(read_site(original, statements, definitions))
        then += [a.name for a in expansion.auxiliaries]
        notes.append(f"{', '.join(a.name for a in expansion.auxiliaries)} marginalized: reads "
                     f"{original.factor}({original.output.name}) as written, then draws "
                     f"{', '.join(a.name for a in expansion.auxiliaries)} given {var.name}")
    if not then:
        return c
    return Conditional(var, "slice", sites, rewrites=(*c.rewrites, *notes), then=tuple(then))


def _stats(family: str) -> str:
    x = sym("x")
    return "(" + ", ".join(map(str, FAMILIES[family].statistics(x, K))) + ")"


def _found(piece: Piece, var: Variable, family: str) -> str:
    base = FAMILIES[family].base
    if base is not None and piece.site.statement.output is var:
        params = piece.naturals[-len(base[1]):]
        return (f"{piece.site.label}: the base law {family}"
                f"({', '.join(piece.site.describe(str(n)) for n in params)})")
    coefficients = piece.naturals[:len(piece.naturals) - (len(base[1]) if base else 0)]
    return (f"{piece.site.label}: log density linear in {_stats(family)}, coefficients "
            f"({', '.join(piece.site.describe(str(n)) for n in coefficients)})")


def _piece(site: Site, var: Variable, family: str) -> Piece:
    """One site's natural parameters for ``family`` (a base family's defining site gives
    the base law's parameters, the others zeros for them); ModelError saying why not."""
    accesses = site.accesses_of(var)
    if len(accesses) != 1 and any(a.index is not None for a in accesses):
        raise ModelError(f"{site.label} reads {var.name!r} {len(accesses)} times")
    access = accesses[0]  # direct reads of one variable read one element: one symbol
    target = sym(access.name)
    fam = FAMILIES[family]
    stats = fam.statistics(target, K)
    extra: tuple[Term, ...] = ()
    if fam.base is not None:
        factor, params = fam.base
        if site.statement.output is var:
            if site.statement.factor != factor:
                raise ModelError(f"{var.name!r} is defined by {site.statement.factor}; the "
                                 f"{family} family tilts a {factor} prior")
            naturals = (const(0.0),) * len(stats) + tuple(site.arguments[p] for p in params)
            if any(access.name in n.symbols for n in naturals):
                raise ModelError(f"the parameters of {site.label} read {var.name!r}")
            return Piece(site, access, naturals, tuple(compile_term(n)[0] for n in naturals))
        extra = (const(0.0),) * len(params)
    _, _, coefficients, _ = split_statistics(site.term_for(access), target, stats, index=K)
    naturals = tuple(normalize(add(*c), ALGEBRA) for c in coefficients) + extra
    return Piece(site, access, naturals, tuple(compile_term(n)[0] for n in naturals))
