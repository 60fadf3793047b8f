"""Block Gibbs sampling: ``model.compile("gibbs")`` and ``model.infer("gibbs", ...)``.

Compiling reads the model's sites (:mod:`.sites`), derives each latent variable's full
conditional (:mod:`.conditionals`) and orders the updates with the message scheduler
(:func:`gibbs_schedule`): each sample triggers the conditionals that read it — the
Trigger semantics of seed 000's Gibbs row: a conditional is recomputed from the latest
samples, never from stale ones. Ties go to the finite discrete variables first (a
mixture's indicators), then model order. Every update draws a whole variable (all plate
elements, all chains) with a few array operations; elements of one variable are
conditionally independent given the rest, because every site reads one element of it.

Chains are a leading array axis: ``chains`` chains run in the same array operations.
A run is reproducible: the same ``seed`` gives the same draws, bit for bit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from factorflow.errors import ModelError
from factorflow.model.chains import check_gibbs
from factorflow.model.checks import run_data
from factorflow.model.core import Model, Variable
from factorflow.samplers.block import JointBlock, joint_blocks
from factorflow.samplers.conditionals import Conditional, collapse, conditional, marginalize
from factorflow.samplers.linear import GaussianBlock, gaussian_blocks
from factorflow.samplers.linear import describe as describe_block
from factorflow.samplers.plan import choose_plan
from factorflow.samplers.result import SamplingResult
from factorflow.samplers.sites import Site, read_sites
from factorflow.transforms.dependencies import Dep, DependencyGraph
from factorflow.transforms.scheduling import Schedule, schedule

#: where a slice-sampled variable starts, and the slice steps on its prior from there
SLICE_START = {"real": 0.0, "positive": 1.0, "unit": 0.5}
SLICE_WARMUP = 10


@dataclass(frozen=True)
class SamplerChoice:
    """The sampler chosen for one variable and how the compiler found it."""

    variable: str
    sampler: str
    rewrites: tuple[str, ...]

    def __str__(self) -> str:
        steps = "".join(f"\n    {r}" for r in self.rewrites)
        return f"{self.variable}: {self.sampler}{steps}"


class SamplerTable(tuple):
    """``compiled.samplers``: one :class:`SamplerChoice` per sampled variable, in update
    order; prints one block per variable."""

    def __str__(self) -> str:
        return "\n".join(map(str, self))

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        if isinstance(key, str):
            for choice in self:
                if choice.variable == key:
                    return choice
            raise KeyError(key)
        return super().__getitem__(key)


class GibbsModel:
    """A model compiled for Gibbs sampling.

    ``samplers`` lists the conditional of every latent variable and the derivation that
    found it; ``run`` draws samples.

    >>> with ff.Model("coin") as model:       # the posterior is Beta(1 + 4, 1 + 1)
    ...     p = ff.Beta("p", 1.0, 1.0)
    ...     with ff.Plate(ff.Range("n", 5)):
    ...         flips = ff.Bernoulli("flip", p, observed=[True, True, False, True, True])
    >>> gibbs = model.compile("gibbs")
    >>> gibbs.run(draws=2000, seed=0)
    SamplingResult(p: 4 chains x 2000 draws, burn 1000, thin 1)
    """

    algorithm = "gibbs"

    def __init__(self, model: Model) -> None:
        start = time.perf_counter()
        self.model = model
        self.plan = choose_plan(model)
        sites = read_sites(self.plan.statements, self.plan.definitions)
        joint = {v.name: b for b in gaussian_blocks(self.plan.latent, sites)
                 for v in b.variables}
        self.conditionals = [
            collapse(c, self.plan.expanded, self.plan.statements, self.plan.definitions)
            if c.kind == "slice" else c
            for c in (_joint(v, joint[v.name], sites) if v.name in joint
                      else conditional(v, sites) for v in self.plan.latent)]
        self.conditionals = [marginalize(c, self.conditionals) if c.kind == "slice" else c
                             for c in self.conditionals]
        discrete = [c for c in self.conditionals if c.kind == "enumerate"]
        ordered = discrete + [c for c in self.conditionals if c.kind != "enumerate"]
        self.schedule = gibbs_schedule(ordered)
        by_label = {_sample(c): c for c in ordered}
        # every sample once per sweep, in schedule order (a sample nothing reads, such as
        # children integrated out by their parents, may come after the loop)
        order = dict.fromkeys(label for part in (self.schedule.prefix, *self.schedule.loop,
                                                 *self.schedule.suffix)
                              for label in part if label in by_label)
        self.updates: list[Conditional] = [by_label[label] for label in order]
        self.updates = _blocks(self.updates)
        self.steps = _gaussian_steps(joint_blocks(self.updates))
        for block in self.steps:
            if isinstance(block, JointBlock):
                others = [v.name for v in block.variables]
                for c in block.members:
                    c.rewrites = (*c.rewrites, f"jointly with {', '.join(others)}: "
                                  "independence Metropolis-Hastings from a Student-t fitted "
                                  "to the warm-up draws (log/logit scale)")
        first = {}
        for i, call in enumerate(self.plan.statements):
            if call.output is not None:
                first.setdefault(call.output.name, i)
        ancestral = sorted(self.plan.latent, key=lambda v: first[v.name])
        self.priors = {v.name: _prior(v, sites) for v in ancestral}
        self.compile_seconds = time.perf_counter() - start

    @property
    def samplers(self) -> SamplerTable:
        """Each latent variable's sampler, and the rewrites that found it (printed one
        variable a block; indexed by name).

        >>> with ff.Model("coin") as model:       # the posterior is Beta(1 + 4, 1 + 1)
        ...     p = ff.Beta("p", 1.0, 1.0)
        ...     with ff.Plate(ff.Range("n", 5)):
        ...         flips = ff.Bernoulli("flip", p, observed=[True, True, False, True, True])
        >>> print(model.compile("gibbs").samplers)
        p: Beta (conjugate)
            Beta(p): log density linear in (log(x), log(1 - x)), coefficients (-1 + 1.0, ...
            Bernoulli(flip): log density linear in (log(x), log(1 - x)), coefficients ...
        """
        return SamplerTable(
            SamplerChoice(c.variable.name, _describe(c),
                          self.plan.rewrites.get(c.variable.name, ()) + c.rewrites)
            for c in self.updates)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return GibbsModel, (self.model,)

    def run(self, draws: int = 1000, *, burn: int | None = None, thin: int = 1,
            chains: int = 4, seed: Any = None, data: dict[str, Any] | None = None,
            init: dict[str, Any] | None = None) -> SamplingResult:
        """Run ``chains`` chains for ``burn`` sweeps (default ``draws // 2``) then
        ``draws * thin`` sweeps, keeping every ``thin``-th; ``init`` gives starting values
        by name (else each variable starts from a draw of its prior). Same ``seed``, same
        samples.

        >>> with ff.Model("coin") as model:       # the posterior is Beta(1 + 4, 1 + 1)
        ...     p = ff.Beta("p", 1.0, 1.0)
        ...     with ff.Plate(ff.Range("n", 5)):
        ...         flips = ff.Bernoulli("flip", p, observed=[True, True, False, True, True])
        >>> gibbs = model.compile("gibbs")
        >>> result = gibbs.run(draws=2000, seed=0)
        >>> bool(result["p"].mean == gibbs.run(draws=2000, seed=0)["p"].mean)  # same seed
        True
        >>> abs(float(result["p"].mean) - 5 / 7) < 0.01      # Beta(5, 2)'s mean
        True
        """
        draws, thin, chains = (_count(draws, "draws", 1), _count(thin, "thin", 1),
                               _count(chains, "chains", 1))
        burn = draws // 2 if burn is None else _count(burn, "burn", 0)
        rng = np.random.default_rng(seed)
        known = run_data(self.model, data or {})
        values = self._initial(rng, known, chains, init or {})
        kept = {c.variable.name: np.empty((chains, draws, *values[c.variable.name].shape[1:]),
                                          dtype=values[c.variable.name].dtype)
                for c in self.updates if c.variable.name in self.model.variables}
        blocks = [s for s in self.steps if isinstance(s, JointBlock)]
        for block in blocks:
            block.reset()
        start = time.perf_counter()
        for sweep in range(burn + draws * thin):
            for step in self.steps:
                if isinstance(step, JointBlock | GaussianBlock):
                    step.update(rng, values, known, chains)
                else:
                    values[step.variable.name] = step.draw(rng, values, known, chains)
            if sweep < burn:
                for block in blocks:
                    block.observe(values)
                    if sweep in (burn // 2, burn - 1):
                        block.adapt()
            kept_at, offset = divmod(sweep - burn, thin)
            if sweep >= burn and offset == thin - 1:
                for name, arr in kept.items():
                    arr[:, kept_at] = values[name]
        seconds = time.perf_counter() - start
        plates = {name: tuple(r.name for r in self.model.variables[name].plates)
                  for name in kept}
        return SamplingResult(kept, plates, burn=burn, thin=thin, seed=seed, seconds=seconds)

    def _initial(self, rng: np.random.Generator, known: dict[str, Any], chains: int,
                 init: dict[str, Any]) -> dict[str, np.ndarray]:
        unknown = set(init) - set(self.priors)
        if unknown:
            raise ModelError(f"init names {sorted(unknown)}, which are not sampled variables "
                             f"of the model; sampled: {sorted(self.priors)}.")
        values: dict[str, np.ndarray] = {}
        for name, prior in self.priors.items():
            if name in init:
                values[name] = _given(self.plan.variables[name], init[name], chains)
            elif prior.kind == "slice":  # no exact prior draw: slice steps from a start
                values[name] = np.full((chains, *prior.variable.shape),
                                       SLICE_START[prior.variable.domain])
                for _ in range(SLICE_WARMUP):
                    values[name] = prior.draw(rng, values, known, chains)
            else:
                values[name] = prior.draw(rng, values, known, chains)
        return values


#: the options of a sampling run (``GibbsModel.run``'s keywords)
RUN_OPTIONS = ("draws", "burn", "thin", "chains", "seed")


def infer_gibbs(model: Model, init: dict[str, Any] | None, data: dict[str, Any] | None,
                message_passing: dict[str, Any], options: dict[str, Any]) -> SamplingResult:
    """``model.infer("gibbs", ...)``: ModelError for message-passing options given a
    value (``iterations=``, ``damping=`` ...) or unknown ones, else ``run``'s result."""
    given = sorted(k for k, v in message_passing.items() if v is not None)
    if given:
        raise ModelError(f"{', '.join(k + '=' for k in given)} belong to message passing; "
                         f"Gibbs sampling takes {', '.join(k + '=' for k in RUN_OPTIONS)}.")
    unknown = sorted(set(options) - set(RUN_OPTIONS))
    if unknown:
        raise ModelError(f"unknown option {', '.join(k + '=' for k in unknown)} for Gibbs "
                         f"sampling; it takes {', '.join(k + '=' for k in RUN_OPTIONS)}.")
    return compile_gibbs(model).run(init=init, data=data, **options)


def compile_gibbs(model: Model) -> GibbsModel:
    """``model`` compiled for Gibbs sampling, cached on the model (until it changes)."""
    key = ("gibbs", len(model.statements))
    check_gibbs(model)
    if key not in model._compiled:
        model._compiled[key] = GibbsModel(model)
    return model._compiled[key]


def _blocks(updates: list[Conditional]) -> list[Conditional]:
    """``updates`` with each variable that others integrate out drawn right after the
    last of them, and those moved next to each other: nothing in between reads a stale
    value of it (a partially collapsed Gibbs sweep stays valid)."""
    out = list(updates)
    for name in dict.fromkeys(n for c in updates for n in c.then):
        group = [c for c in out if name in c.then]
        inner = next(c for c in out if c.variable.name == name)
        at = out.index(group[0])
        for c in (*group, inner):
            out.remove(c)
        out[at:at] = [*group, inner]
    return out


def _joint(var: Variable, block: GaussianBlock, sites: list[Site]) -> Conditional:
    """The conditional of ``var``, a member of ``block`` (drawn with it)."""
    return Conditional(var, "block", [s for s in sites if s.reads(var)], "Gaussian",
                       rewrites=(describe_block(block),), block=block)


def _gaussian_steps(steps: list[Conditional | JointBlock]
                    ) -> list[Conditional | JointBlock | GaussianBlock]:
    """``steps`` with the members of each Gaussian block replaced by the block, where
    the first of them was."""
    out: list[Conditional | JointBlock | GaussianBlock] = []
    for step in steps:
        block = step.block if isinstance(step, Conditional) else None
        if block is None:
            out.append(step)
        elif block not in out:
            out.append(block)
    return out


def _prior(var: Variable, sites: list[Site]) -> Conditional | _VectorPrior:
    """The conditional of ``var`` given only its own definitions (its prior), to start
    the chains from."""
    own = [s for s in sites if s.statement.output is var]
    if var.domain == "vector":
        return _VectorPrior(var, GaussianBlock([var], own))
    return conditional(var, own)


@dataclass
class _VectorPrior:
    """A vector variable's prior draw, by the joint Gaussian draw over its own site."""

    variable: Variable
    block: GaussianBlock
    kind: str = "block"

    def draw(self, rng: np.random.Generator, values: dict[str, np.ndarray],
             known: dict[str, Any], chains: int) -> np.ndarray:
        trial = dict(values)
        self.block.update(rng, trial, known, chains)
        return trial[self.variable.name]


def _given(var: Variable, value: Any, chains: int) -> np.ndarray:
    event = (var.size,) if var.domain in ("simplex", "vector") else ()
    shape = (*var.shape, *event)
    arr = np.asarray(value, dtype=np.int64 if var.domain in ("int", "bool") else float)
    try:
        full = np.broadcast_to(arr, shape) if arr.shape != (chains, *shape) else arr
        return np.array(np.broadcast_to(full, (chains, *shape)))
    except ValueError:
        raise ModelError(f"init[{var.name!r}] has shape {arr.shape}; give {shape} (one "
                         f"value per plate element) or {(chains, *shape)} (per chain)."
                         ) from None


def _count(value: Any, what: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < least:
        raise ModelError(f"{what} must be an integer >= {least}, got {value!r}.")
    return int(value)


def _describe(c: Conditional) -> str:
    if c.kind == "conjugate":
        return f"{c.family} (conjugate)"
    if c.kind == "slice":
        return "slice sampling (no conjugate conditional)"
    if c.kind == "block":
        return "Gaussian, jointly (conjugate)"
    return "Discrete by enumeration" if c.variable.domain == "int" else \
        "Bernoulli by enumeration"


def _sample(c: Conditional) -> str:
    return f"sample {c.variable.name}"


def gibbs_schedule(conditionals: list[Conditional]) -> Schedule:
    """The sweep, from the message scheduler (seed 000's Gibbs row): per variable a node
    computing its conditional and a node drawing its sample (which requires the
    conditional); each sample *triggers* the conditionals that read it, so a conditional
    is recomputed from the latest samples before its variable is drawn. The sample nodes
    are the outputs; ties go to the order given (indicators first). Every sample is drawn
    once per sweep, in the order of the schedule's sample nodes (then each variable that
    others integrate out moves right after them, see ``_blocks``: ``compiled.samplers``
    lists the order used; a sample nothing reads prints "after loop" but is drawn every
    sweep); the chains start from prior draws (the scheduler's initial values)."""
    nodes: list[str] = []
    edges: dict[tuple[str, str], Dep] = {}
    describe: dict[str, str] = {}
    for c in conditionals:
        name = c.variable.name
        cond, sample = f"conditional of {name}", _sample(c)
        nodes += [cond, sample]
        describe[sample] = f"draw {name} ~ {_describe(c)}"
        edges[(cond, sample)] = Dep.DEPENDENCY | Dep.REQUIRED
        sites = [*c.sites, *(p.site for m in c.marginals for p in (m.prior, *m.others))]
        reads = {v.name for s in sites for v in _random_reads(s)} - {name, *c.then}
        for v in sorted(reads):
            edges[(f"sample {v}", cond)] = Dep.TRIGGER
    graph = DependencyGraph(tuple(nodes), edges,
                            outputs=frozenset(_sample(c) for c in conditionals),
                            describe=describe)
    return schedule(graph)


def _random_reads(site: Site) -> set[Variable]:
    out = set()
    for a in site.accesses.values():
        for v in (a.source, a.index):
            if isinstance(v, Variable) and not v.is_observed:
                out.add(v)
    out |= {g.condition for g in site.gates if not g.condition.is_observed}
    return out
