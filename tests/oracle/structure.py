"""What a spec's structure lets each algorithm promise: trees, non-Gaussian sites, classes.

EP is exact when message passing is exact: the factor graph is a tree and at most one
factor is not in the family of its continuous neighbours.  With gates (Minka & Winn;
Infer.NET's Gate.Enter/Exit), a gate group -- one condition's branches -- is one factor:
its scope is the condition, the exit variables it defines, and the latent variables it
reads from outside; inside each branch, the variables it reads and defines are its own
nodes (the branch's clones), and that inner graph must be a tree too.  A variable local to
a branch therefore does not close a loop through the condition (its posterior is the one
conditional on the branch).  Everything is unrolled over plate elements.

Non-Gaussian sites (each unrolled instance counts): a gate group whose scope or inner
variables include a continuous latent variable (one site for the group, or the most sites
any one branch holds: mixing the branches' messages is linear in their moments, so a
mixture of single-site branches is still exact); a comparison ``x > t`` of a continuous
latent; a latent discrete draw whose probabilities are a continuous latent.  Conjugate
observations (Beta-Bernoulli/Binomial, Gamma-Poisson, Gamma precision of an observed
Gaussian with a known mean, Dirichlet-Discrete) and linear-Gaussian factors are not sites.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.oracle.spec import (
    Const,
    Constrain,
    Draw,
    Gate,
    Greater,
    Index,
    PerElement,
    Plate,
    Ref,
    Scale,
    Spec,
    Sum,
    VarInfo,
    declared,
)


@dataclass(frozen=True)
class Traits:
    latent: tuple[str, ...]  # latent variables that are drawn (not derived)
    derived: tuple[str, ...]  # latent deterministic variables (sums, scalings, comparisons)
    continuous: tuple[str, ...]  # the continuous ones among ``latent``
    gates: int  # gate groups, unrolled over plates
    comparisons: bool  # any ``x > t`` / ff.is_positive
    forest: bool  # the contracted factor graph (and every branch's) has no loop
    sites: int  # non-Gaussian sites, unrolled over plates

    @property
    def ep_exact(self) -> bool:
        """A tree with at most one non-Gaussian site: EP's marginals and log Z are exact."""
        return self.forest and self.sites <= 1

    @property
    def linear_gaussian(self) -> bool:
        """Only Gaussians (and sums, scalings of them) are latent, and no gates."""
        return bool(self.latent) and self.gates == 0 and not self.comparisons and \
            len(self.continuous) == len(self.latent) and self._all_gaussian

    _all_gaussian: bool = True

    @property
    def single_latent(self) -> bool:
        """One latent variable (possibly over a plate), nothing derived: the mean-field
        family holds the exact posterior, so VMP is exact."""
        return len(self.latent) == 1 and not self.derived

    @property
    def vmp_supported(self) -> bool:
        """VMP has no message for a comparison (factorflow refuses it by name)."""
        return not self.comparisons


class _Analysis:
    def __init__(self, spec: Spec):
        self.variables: dict[str, VarInfo] = declared(spec)
        self.forest = True
        self.sites = 0
        self.gates = 0
        self.counter = 0
        factors, _, _ = self.level(spec.body, {}, {}, ())
        self.forest &= is_forest(factors)

    # a latent slot read by an argument, or None
    def slot(self, name: str, binding: dict) -> tuple | None:
        info = self.variables[name]
        if not info.latent:
            return None
        return (name, None) if info.range is None else (name, binding[info.range])

    def arg_slot(self, a, binding: dict, switch: dict) -> tuple | None:
        if isinstance(a, Ref):
            return self.slot(a.name, binding)
        if isinstance(a, Index):
            return self.slot(a.array, {self.variables[a.array].range: switch[a.by]})
        assert isinstance(a, Const | PerElement)
        return None

    def continuous(self, slot: tuple) -> bool:
        return self.variables[slot[0]].continuous

    def level(self, stmts, binding, switch, path):
        """Factor scopes at this level (nodes tagged with the branch path), and the latent
        slots defined and read here."""
        factors: list[list] = []
        defs: set = set()
        refs: set = set()

        def tag(slots):
            return [(s, path) for s in slots]

        for s in stmts:
            if isinstance(s, Plate):
                for i in range(s.size):
                    f, d, r = self.level(s.body, binding | {s.range: i}, switch, path)
                    factors += f
                    defs |= d
                    refs |= r
                continue
            if isinstance(s, Gate):
                factors.append(self.gate(s, binding, switch, path, defs, refs))
                continue
            if isinstance(s, Draw | Sum | Scale | Greater):
                out = self.slot(s.name, binding)
                args = s.args if isinstance(s, Draw) else \
                    (s.a, s.b) if isinstance(s, Sum) else (s.a,)
            else:
                assert isinstance(s, Constrain)
                out, args = None, (s.arg,)
            read = [x for x in (self.arg_slot(a, binding, switch) for a in args) if x]
            refs |= set(read)
            if out is not None:
                defs.add(out)
            factors.append(tag(([out] if out else []) + read))
            if isinstance(s, Greater) and any(self.continuous(x) for x in read):
                self.sites += 1
            if isinstance(s, Draw) and out is not None and not self.continuous(out) \
                    and any(self.continuous(x) for x in read):
                self.sites += 1
            if isinstance(s, Draw) and s.family == "Gaussian":
                mean, precision = (self.arg_slot(a, binding, switch) for a in s.args)
                if precision is not None and (out is not None or mean is not None):
                    self.sites += 1  # a random precision beside a random mean or sample
        return factors, defs, refs

    def gate(self, s: Gate, binding, switch, path, defs, refs):
        self.gates += 1
        self.counter += 1
        gid = self.counter
        info = self.variables[s.cond]
        if s.kind == "switch":
            (_, body), = s.branches
            branches = [(k, body, switch | {s.cond: k}) for k in range(info.categories)]
        else:
            branches = [(key, body, switch) for key, body in s.branches]
        inner_defs, inner_refs = [], set()
        before, inner_sites = self.sites, 0
        for key, body, sw in branches:
            self.sites = 0
            f, d, r = self.level(body, binding, sw, path + ((gid, key),))
            inner_sites = max(inner_sites, self.sites)
            self.forest &= is_forest(f)
            inner_defs.append(d)
            inner_refs |= r
        every = set.intersection(*inner_defs) if inner_defs else set()
        if s.kind == "if":
            complete = {k for k, _, _ in branches} == {True, False}
        elif s.kind == "case":
            complete = {k for k, _, _ in branches} == set(range(info.categories))
        else:
            complete = True
        exits = every if complete else set()
        externals = inner_refs - set().union(*inner_defs)
        cond = self.slot(s.cond, binding)
        scope = ({cond} if cond else set()) | exits | externals
        touched = scope | set().union(*inner_defs)
        # the branches' messages are mixed by their weights, which is linear in moments: a
        # group is one site however many branches hold one site each; more in a branch add
        self.sites = before + max(inner_sites,
                                  int(any(self.continuous(x) for x in touched)))
        defs |= exits
        refs |= externals | ({cond} if cond else set())
        return [(x, path) for x in sorted(scope, key=repr)]


def is_forest(factors: list[list]) -> bool:
    """Whether the bipartite graph of factors and the nodes they touch has no cycle (a
    factor touching one node twice is a cycle)."""
    parent: dict = {}

    def find(x):
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for scope in factors:
        roots = [find(x) for x in scope]
        if len(set(roots)) < len(roots):
            return False
        for r in roots[1:]:
            parent[r] = roots[0]
    return True


def analyse(spec: Spec) -> Traits:
    a = _Analysis(spec)
    v = a.variables
    latent = tuple(n for n, i in v.items() if i.latent and not i.derived)
    derived = tuple(n for n, i in v.items() if i.derived)
    continuous = tuple(n for n in latent if v[n].continuous)
    comparisons = any(i.family == "Greater" for i in v.values())
    all_gaussian = all(v[n].family == "Gaussian" for n in latent) and \
        all(v[n].family in ("Sum", "Scale") for n in derived)
    return Traits(latent, derived, continuous, a.gates, comparisons, a.forest, a.sites,
                  all_gaussian)


__all__ = ["Traits", "analyse", "is_forest"]
