"""Exact references for a :class:`~tests.oracle.spec.Spec`, independent of factorflow.

Plain NumPy/SciPy only; nothing of factorflow is imported.  One interpreter walks the
spec for every assignment of the latent discrete variables at once (an axis of
configurations, C), and the continuous part is handled by one of two engines:

* **linear-Gaussian** (no continuous latent other than Gaussians, no comparisons): every
  latent Gaussian is an affine form in independent standard normal noises; the observed
  Gaussians are affine forms plus their own noise; per configuration, log p(observed) and
  the posterior means/variances come from exact Gaussian conditioning (Cholesky), and the
  configurations are mixed by their weights (log Z is a log-sum-exp).  With no Gaussian at
  all this is plain enumeration of the joint.
* **quadrature** (exactly one continuous latent variable, any family, plus discrete
  latents): the log joint is evaluated on quadrature nodes of that variable (an extra
  axis): Gauss-Jacobi for a Beta and on the (Duffy-mapped) simplex for a Dirichlet (exact:
  their likelihoods here are polynomials), the trapezoid rule on a log grid for a Gamma
  (exponentially accurate for this smooth, fast-decaying integrand), and piecewise
  Gauss-Legendre with breakpoints at the thresholds for a Gaussian.

Semantics (the meaning factorflow documents): a statement inside gates applies only where
every enclosing condition holds; a variable drawn in every branch of a group (an exit
variable) takes its value from the branch that holds; a latent variable drawn in no branch
that holds does not exist (its assignment is pinned to 0 so it is not counted twice), and
its posterior is conditional on it existing; an observed condition just masks branches.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
from scipy import special

from tests.oracle.spec import (
    CONTINUOUS,
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

LOG_2PI = np.log(2 * np.pi)


class Unsupported(Exception):
    """The spec is outside what these references compute."""


# ----- affine forms in standard normal noises ------------------------------------------
class Affine:
    """``const + sum_j coef[j] * eps_j`` with eps_j iid N(0, 1); arrays over configurations."""

    __slots__ = ("const", "coef")

    def __init__(self, const, coef: dict[int, np.ndarray] | None = None):
        self.const = np.asarray(const, float)
        self.coef = dict(coef or {})

    def __add__(self, other):
        if isinstance(other, Affine):
            coef = dict(self.coef)
            for j, c in other.coef.items():
                coef[j] = coef[j] + c if j in coef else c
            return Affine(self.const + other.const, coef)
        return Affine(self.const + other, self.coef)

    __radd__ = __add__

    def scaled(self, c: float) -> Affine:
        return Affine(c * self.const, {j: c * v for j, v in self.coef.items()})

    @staticmethod
    def where(mask, a, b) -> Affine:
        a = a if isinstance(a, Affine) else Affine(a)
        b = b if isinstance(b, Affine) else Affine(b)
        coef = {j: np.where(mask, a.coef.get(j, 0.0), b.coef.get(j, 0.0))
                for j in set(a.coef) | set(b.coef)}
        return Affine(np.where(mask, a.const, b.const), coef)


# ----- log densities (plain formulas) ----------------------------------------------------
def _log_bernoulli(x, p):
    p = np.asarray(p, float)
    with np.errstate(divide="ignore"):
        return np.where(np.asarray(x, bool), np.log(p), np.log1p(-p))


def _log_discrete(x, probs):
    probs = np.asarray(probs, float)
    with np.errstate(divide="ignore"):
        logp = np.log(probs)
    x = np.asarray(x)
    if probs.ndim == 1:
        return logp[x.astype(int)]
    shape = np.broadcast_shapes(x.shape, probs.shape[:-1])
    idx = np.broadcast_to(x.astype(int), shape)[..., None]
    return np.take_along_axis(np.broadcast_to(logp, shape + probs.shape[-1:]), idx, -1)[..., 0]


def _log_gaussian(x, mean, precision):
    return 0.5 * (np.log(precision) - LOG_2PI) - 0.5 * precision * (x - mean) ** 2


def _log_gamma(x, shape, rate):
    return shape * np.log(rate) - special.gammaln(shape) + (shape - 1) * np.log(x) - rate * x


def _log_beta(x, a, b):
    return (a - 1) * np.log(x) + (b - 1) * np.log1p(-x) - special.betaln(a, b)


def _log_dirichlet(x, alpha):
    alpha = np.asarray(alpha, float)
    return (np.sum((alpha - 1) * np.log(x), -1) + special.gammaln(alpha.sum())
            - special.gammaln(alpha).sum())


def _log_poisson(x, rate):
    return x * np.log(rate) - rate - special.gammaln(x + 1)


def _log_binomial(x, n, p):
    with np.errstate(divide="ignore", invalid="ignore"):
        log_choose = special.gammaln(n + 1) - special.gammaln(x + 1) - special.gammaln(n - x + 1)
        return log_choose + special.xlogy(x, p) + special.xlog1py(n - x, -np.asarray(p))


def log_density(family: str, x, args):
    """log p(x | args) of one draw (x and args broadcast)."""
    if family == "Bernoulli":
        return _log_bernoulli(x, args[0])
    if family == "Discrete":
        return _log_discrete(x, args[0])
    if family == "Gaussian":
        return _log_gaussian(x, args[0], args[1])
    if family == "Gamma":
        return _log_gamma(x, args[0], args[1])
    if family == "Beta":
        return _log_beta(x, args[0], args[1])
    if family == "Dirichlet":
        return _log_dirichlet(x, args[0])
    if family == "Poisson":
        return _log_poisson(x, args[0])
    if family == "Binomial":
        return _log_binomial(x, args[0], args[1])
    raise Unsupported(family)


# ----- quadrature rules over the one continuous latent --------------------------------------
def _gauss_jacobi01(n: int, a: float, b: float):
    """Nodes p in (0, 1) and weights w with sum w g(p) = integral p^(a-1) (1-p)^(b-1) g."""
    x, w = special.roots_jacobi(n, b - 1, a - 1)
    return (1 + x) / 2, w / 2 ** (a + b - 1)


def quadrature_rule(draw: Draw, constants: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """Nodes (shape (Nn,) or (Nn, K)) and Lebesgue log-weights for the latent ``draw``;
    ``constants`` are the numbers around which a Gaussian's posterior may lie (observed
    values, thresholds) and the precisions that may narrow it."""
    args = [a.value for a in draw.args]
    if draw.family == "Beta":
        a, b = args
        p, w = _gauss_jacobi01(100, a, b)
        return p, np.log(w) - (a - 1) * np.log(p) - (b - 1) * np.log1p(-p)
    if draw.family == "Gamma":
        u = np.arange(-90.0, 9.0, 0.02)
        return np.exp(u), np.log(0.02) + u
    if draw.family == "Gaussian":
        mean, precision = args
        centres, thresholds, precisions = constants
        sd0 = 1 / np.sqrt(precision)
        lo = min([mean] + centres + thresholds) - 14 * sd0
        hi = max([mean] + centres + thresholds) + 14 * sd0
        narrow = 1 / np.sqrt(precision + sum(precisions))
        cuts = sorted({lo, hi} | {t for t in thresholds if lo < t < hi})
        edges = []
        for a, b in itertools.pairwise(cuts):
            k = max(1, int(np.ceil((b - a) / (narrow / 3))))
            edges.append(np.linspace(a, b, k + 1)[:-1])
        edges = np.concatenate(edges + [np.array([hi])])
        x, w = np.polynomial.legendre.leggauss(16)
        left, width = edges[:-1, None], np.diff(edges)[:, None]
        nodes = (left + width * (x + 1) / 2).ravel()
        return nodes, np.log((width * w / 2).ravel())
    if draw.family == "Dirichlet":
        alpha = np.asarray(args[0], float)
        if alpha.size == 2:
            p, w = _gauss_jacobi01(60, alpha[0], alpha[1])
            logw = np.log(w) - (alpha[0] - 1) * np.log(p) - (alpha[1] - 1) * np.log1p(-p)
            return np.stack([p, 1 - p], -1), logw
        if alpha.size == 3:
            a1, a2, a3 = alpha
            u, wu = _gauss_jacobi01(48, a1, a2 + a3)
            v, wv = _gauss_jacobi01(48, a2, a3)
            U, V = np.meshgrid(u, v, indexing="ij")
            W = np.outer(wu, wv)
            logW = ((a1 - 1) * np.log(U) + (a2 + a3 - 1) * np.log1p(-U)
                    + (a2 - 1) * np.log(V) + (a3 - 1) * np.log1p(-V))
            logw = np.log(W) + np.log1p(-U) - logW
            theta = np.stack([U, (1 - U) * V, (1 - U) * (1 - V)], -1)
            return theta.reshape(-1, 3), logw.ravel()
    raise Unsupported(f"no quadrature rule for {draw.family}{args}")


# ----- the interpreter ------------------------------------------------------------------
@dataclass
class _Ctx:
    mask: np.ndarray
    binding: dict[str, int] = field(default_factory=dict)
    switch: dict[str, int] = field(default_factory=dict)

    def with_(self, mask=None, binding=None, switch=None) -> _Ctx:
        return _Ctx(self.mask if mask is None else mask,
                    self.binding if binding is None else binding,
                    self.switch if switch is None else switch)


class _Walk:
    """One pass over the spec for every configuration at once."""

    def __init__(self, spec: Spec, variables: dict[str, VarInfo],
                 assignment: dict[tuple, np.ndarray], theta: tuple[str, np.ndarray] | None):
        self.variables = variables
        self.assignment = assignment
        self.theta = theta
        self.logw = np.zeros((1, 1))
        self.env: dict[tuple, object] = {}
        self.defined: dict[tuple, np.ndarray] = {}
        self.rows: list[tuple] = []  # observed Gaussians with a random mean
        self.noises = 0
        self.block(spec.body, _Ctx(np.ones((1, 1), bool)))

    # -- values
    def slot(self, name: str, ctx: _Ctx) -> tuple:
        info = self.variables[name]
        return (name, None) if info.range is None else (name, ctx.binding[info.range])

    def value(self, a, ctx: _Ctx):
        if isinstance(a, Const):
            return np.asarray(a.value, float) if isinstance(a.value, tuple) else a.value
        if isinstance(a, PerElement):
            (index,) = ctx.binding.values() if len(ctx.binding) == 1 else (None,)
            if index is None:
                raise Unsupported("PerElement needs exactly one enclosing plate")
            return a.values[index]
        if isinstance(a, Ref):
            return self.env[self.slot(a.name, ctx)]
        if isinstance(a, Index):
            return self.env[(a.array, ctx.switch[a.by])]
        raise TypeError(a)

    def add(self, mask, logp) -> None:
        self.logw = self.logw + np.where(mask, logp, 0.0)

    def define(self, slot: tuple, x, mask) -> None:
        if slot in self.env:
            old = self.env[slot]
            if isinstance(x, Affine) or isinstance(old, Affine):
                x = Affine.where(mask, x, old)
            else:
                x = np.where(mask, x, old)
        self.env[slot] = x
        self.defined[slot] = self.defined.get(slot, np.zeros((1, 1), bool)) | mask

    def new_noise(self) -> int:
        self.noises += 1
        return self.noises - 1

    # -- statements
    def block(self, stmts: tuple, ctx: _Ctx) -> None:
        for s in stmts:
            getattr(self, type(s).__name__.lower())(s, ctx)

    def plate(self, s: Plate, ctx: _Ctx) -> None:
        for i in range(s.size):
            self.block(s.body, ctx.with_(binding=ctx.binding | {s.range: i}))

    def draw(self, s: Draw, ctx: _Ctx) -> None:
        info = self.variables[s.name]
        slot = self.slot(s.name, ctx)
        args = [self.value(a, ctx) for a in s.args]
        if s.observed is not None:
            x = s.observed if info.range is None else s.observed[slot[1]]
            if s.family == "Gaussian" and isinstance(args[0], Affine):
                if isinstance(args[1], Affine):
                    raise Unsupported("a random precision with a random mean")
                self.rows.append((float(x), args[0], 1 / np.sqrt(args[1]), ctx.mask))
            else:
                if any(isinstance(a, Affine) for a in args):
                    raise Unsupported(f"{s.name}: a Gaussian argument outside a Gaussian mean")
                self.add(ctx.mask, log_density(s.family, x, args))
            self.env[slot] = x
            return
        if slot in self.assignment:
            x = self.assignment[slot]
            self.add(ctx.mask, log_density(s.family, x, args))
        elif self.theta is not None and s.name == self.theta[0]:
            if ctx.mask.shape != (1, 1) or not ctx.mask.all() or info.range is not None:
                raise Unsupported("the quadrature variable must be global and ungated")
            x = self.theta[1]
            self.add(ctx.mask, log_density(s.family, x, args))
        elif s.family == "Gaussian":
            mean, precision = args
            if isinstance(precision, Affine) or np.ndim(precision) > 1:
                raise Unsupported("a random precision of a latent Gaussian")
            j = self.new_noise()
            sd = np.broadcast_to(1 / np.sqrt(precision), (1, 1)).copy()
            x = (mean if isinstance(mean, Affine) else Affine(np.full((1, 1), mean))) + \
                Affine(0.0, {j: sd})
        else:
            raise Unsupported(f"latent {s.family} {s.name!r} beside the quadrature variable")
        if ctx.mask.ndim == 2 and ctx.mask.shape[1] > 1:
            raise Unsupported("a latent variable under a condition on the continuous one")
        self.define(slot, x, ctx.mask)

    def sum(self, s: Sum, ctx: _Ctx) -> None:
        a, b = self.value(s.a, ctx), self.value(s.b, ctx)
        x = a + b if isinstance(a, Affine) else b + a if isinstance(b, Affine) else \
            np.asarray(a) + b
        self.define(self.slot(s.name, ctx), x, ctx.mask)

    def scale(self, s: Scale, ctx: _Ctx) -> None:
        a = self.value(s.a, ctx)
        c = float(self.value(s.c, ctx)) if isinstance(s.c, PerElement) else s.c
        x = a.scaled(c) if isinstance(a, Affine) else c * np.asarray(a)
        self.define(self.slot(s.name, ctx), x, ctx.mask)

    def greater(self, s: Greater, ctx: _Ctx) -> None:
        a = self.value(s.a, ctx)
        if isinstance(a, Affine):
            raise Unsupported("a comparison of a Gaussian in the linear-Gaussian engine")
        self.define(self.slot(s.name, ctx), np.asarray(a) > (0.0 if s.t is None else s.t),
                    ctx.mask)

    def constrain(self, s: Constrain, ctx: _Ctx) -> None:
        v = np.asarray(self.value(s.arg, ctx), bool)
        self.add(ctx.mask, np.where(v, 0.0, -np.inf))

    def gate(self, s: Gate, ctx: _Ctx) -> None:
        cond = self.value(Ref(s.cond), ctx)
        if isinstance(cond, Affine):
            raise Unsupported("a gate on a Gaussian")
        cond = np.asarray(cond)
        for key, body in s.branches:
            if s.kind == "if":
                m = cond.astype(bool) if key else ~cond.astype(bool)
                self.block(body, ctx.with_(mask=ctx.mask & m))
            elif s.kind == "case":
                self.block(body, ctx.with_(mask=ctx.mask & (cond == key)))
            else:
                count = self.variables[s.cond].categories
                for k in range(count):
                    self.block(body, ctx.with_(mask=ctx.mask & (cond == k),
                                               switch=ctx.switch | {s.cond: k}))


# ----- the references ---------------------------------------------------------------------
@dataclass
class Marginal:
    """The exact posterior of one variable: ``values`` by statistic ("p", "probs", "mean",
    "variance"), one entry per plate element; ``exists`` is P(the element exists), the
    elements with exists > 1e-9 are the ones to compare."""

    kind: str  # "bool" | "int" | "moments" | "simplex" (a Dirichlet's mean and variances)
    values: dict[str, np.ndarray]
    exists: np.ndarray


@dataclass
class Reference:
    log_z: float
    marginals: dict[str, Marginal]
    configurations: int


def latent_discrete_slots(variables: dict[str, VarInfo]) -> list[tuple]:
    return [slot for v in variables.values() if v.latent and not v.derived
            and v.domain in ("bool", "int") for slot in v.slots()]


def _assignment(variables, slots, limit):
    cards = [variables[name].categories for name, _ in slots]
    total = int(np.prod(cards)) if cards else 1
    if total > limit:
        raise Unsupported(f"{total} configurations (more than {limit})")
    grid = np.array(list(itertools.product(*[range(c) for c in cards])), int).reshape(total, -1)
    out = {}
    for j, (name, i) in enumerate(slots):
        col = grid[:, j:j + 1]
        out[(name, i)] = col.astype(bool) if variables[name].domain == "bool" else col
    return out, total


def _continuous_latents(variables: dict[str, VarInfo]) -> list[VarInfo]:
    return [v for v in variables.values() if v.latent and not v.derived and v.continuous]


def _quadrature_constants(spec: Spec, theta: str):
    """Observed values of theta's Gaussian children, thresholds, and their precisions."""
    centres, thresholds, precisions = [], [], []

    def visit(stmts):
        for s in stmts:
            if isinstance(s, Draw) and s.observed is not None and s.family == "Gaussian":
                obs = s.observed if isinstance(s.observed, tuple) else (s.observed,)
                centres.extend(float(o) for o in obs)
                if isinstance(s.args[1], Const):
                    precisions.extend([float(s.args[1].value)] * len(obs))
            elif isinstance(s, Greater):
                thresholds.append(0.0 if s.t is None else float(s.t))
            elif isinstance(s, Gate):
                for _, body in s.branches:
                    visit(body)
            elif isinstance(s, Plate):
                visit(s.body)

    visit(spec.body)
    return centres, thresholds, precisions


def _find_draw(spec: Spec, name: str) -> Draw:
    for s in spec.body:
        if isinstance(s, Draw) and s.name == name:
            return s
    raise Unsupported(f"{name!r} is not a global, ungated draw")


def reference(spec: Spec, limit: int = 4096) -> Reference:
    """log Z and every latent variable's exact posterior (see the module docstring)."""
    variables = declared(spec)
    slots = latent_discrete_slots(variables)
    assignment, count = _assignment(variables, slots, limit)
    continuous = _continuous_latents(variables)
    quadrature = any(v.family in CONTINUOUS and v.family != "Gaussian" for v in continuous) \
        or any(v.family == "Greater" for v in variables.values())
    theta = None
    if quadrature:
        if len(continuous) != 1:
            raise Unsupported("quadrature needs exactly one continuous latent variable")
        draw = _find_draw(spec, continuous[0].name)
        nodes, logq = quadrature_rule(draw, list(_quadrature_constants(spec, draw.name)))
        theta = (draw.name, nodes[None] if nodes.ndim == 1 else nodes[None])
    walk = _Walk(spec, variables, assignment, theta)
    valid = np.ones((count, 1), bool)
    for slot in slots:
        d = np.broadcast_to(walk.defined.get(slot, np.zeros((1, 1), bool)), (count, 1))
        valid &= d | (assignment[slot] == 0)
    logw = np.where(valid, walk.logw, -np.inf)
    if quadrature:
        return _finish_quadrature(variables, walk, logw, logq, count)
    return _finish_gaussian(variables, walk, logw, count)


def _normalise(logw: np.ndarray) -> tuple[float, np.ndarray]:
    log_z = special.logsumexp(logw)
    return float(log_z), (np.exp(logw - log_z) if np.isfinite(log_z) else np.zeros_like(logw))


def _discrete_marginal(info: VarInfo, walk: _Walk, post: np.ndarray, count: int) -> Marginal:
    """post: (C, Nn) posterior weights of configurations (and nodes)."""
    k = info.categories
    probs, exists = [], []
    for slot in info.slots():
        d = np.broadcast_to(walk.defined.get(slot, np.zeros((1, 1), bool)), post.shape)
        x = np.broadcast_to(walk.env[slot] if slot in walk.env else
                            np.zeros((1, 1)), post.shape).astype(int)
        mass = np.where(d, post, 0.0)
        total = mass.sum()
        exists.append(total)
        row = np.array([mass[x == j].sum() for j in range(k)])
        probs.append(row / total if total > 0 else np.full(k, np.nan))
    probs = np.array(probs).reshape(len(info.slots()), k)
    exists = np.array(exists)
    if info.range is None:
        probs, exists = probs[0], exists[0]
    if info.domain == "bool":
        return Marginal("bool", {"p": probs[..., 1]}, exists)
    return Marginal("int", {"probs": probs}, exists)


def _finish_gaussian(variables, walk: _Walk, logw: np.ndarray, count: int) -> Reference:
    logw = np.broadcast_to(logw, (count, 1))[:, 0]
    latent = [slot for slot, x in walk.env.items() if isinstance(x, Affine)]
    m = walk.noises + len(walk.rows)
    ny, nx = len(walk.rows), len(latent)

    def dense(form: Affine) -> tuple[np.ndarray, np.ndarray]:
        a = np.zeros((count, m))
        for j, c in form.coef.items():
            a[:, j] = np.broadcast_to(c, (count, 1))[:, 0]
        return np.broadcast_to(form.const, (count, 1))[:, 0], a

    Ax, mx = np.zeros((count, nx, m)), np.zeros((count, nx))
    for i, slot in enumerate(latent):
        mx[:, i], Ax[:, i] = dense(walk.env[slot])
    Ay, my = np.zeros((count, ny, m)), np.zeros((count, ny))
    y = np.array([r[0] for r in walk.rows])
    for r, (value, mean, sd, mask) in enumerate(walk.rows):
        active = np.broadcast_to(mask, (count, 1))[:, 0]
        mu, a = dense(mean)
        Ay[:, r] = np.where(active[:, None], a, 0.0)
        Ay[:, r, walk.noises + r] = np.where(active, np.broadcast_to(sd, (count, 1))[:, 0], 1.0)
        my[:, r] = np.where(active, mu, value)
        logw = logw + np.where(active, 0.0, 0.5 * LOG_2PI)  # an inactive row: N(0; 0, 1)
    if ny:
        S = Ay @ Ay.transpose(0, 2, 1)
        L = np.linalg.cholesky(S)
        resid = y[None] - my
        z = np.linalg.solve(L, resid[..., None])[..., 0]
        logdet = 2 * np.log(np.diagonal(L, axis1=1, axis2=2)).sum(-1)
        logw = logw - 0.5 * (ny * LOG_2PI + logdet + (z ** 2).sum(-1))
        Cxy = Ax @ Ay.transpose(0, 2, 1)
        gain = np.linalg.solve(S, Cxy.transpose(0, 2, 1)).transpose(0, 2, 1)  # Cxy S^-1
        post_mean = mx + (gain @ resid[..., None])[..., 0]
        post_var = (Ax ** 2).sum(-1) - (gain * Cxy).sum(-1)
    else:
        post_mean, post_var = mx, (Ax ** 2).sum(-1)
    log_z, post = _normalise(logw)
    marginals: dict[str, Marginal] = {}
    for info in variables.values():
        if not info.latent:
            continue
        if info.domain in ("bool", "int"):
            marginals[info.name] = _discrete_marginal(info, walk, post[:, None], count)
            continue
        means, variances, exists = [], [], []
        for slot in info.slots():
            i = latent.index(slot)
            d = np.broadcast_to(walk.defined[slot], (count, 1))[:, 0]
            w = np.where(d, post, 0.0)
            total = w.sum()
            mean = (w * post_mean[:, i]).sum() / total if total > 0 else np.nan
            second = (w * (post_var[:, i] + post_mean[:, i] ** 2)).sum() / total \
                if total > 0 else np.nan
            means.append(mean)
            variances.append(second - mean ** 2)
            exists.append(total)
        shape = () if info.range is None else (len(means),)
        marginals[info.name] = Marginal("moments", {
            "mean": np.array(means).reshape(shape), "variance": np.array(variances).reshape(
                shape)}, np.array(exists).reshape(shape))
    return Reference(log_z, marginals, count)


def _finish_quadrature(variables, walk: _Walk, logw, logq, count) -> Reference:
    name, nodes = walk.theta
    logw = np.broadcast_to(logw, (count, logq.size)) + logq[None]
    log_z, post = _normalise(logw)
    marginals: dict[str, Marginal] = {}
    for info in variables.values():
        if not info.latent:
            continue
        if info.domain in ("bool", "int"):
            marginals[info.name] = _discrete_marginal(info, walk, post, count)
        elif info.name == name:
            p = post.sum(0)
            x = nodes[0]
            if x.ndim == 1:
                mean = (p * x).sum()
                var = (p * x ** 2).sum() - mean ** 2
            else:
                mean = (p[:, None] * x).sum(0)
                var = (p[:, None] * x ** 2).sum(0) - mean ** 2
            kind = "simplex" if x.ndim > 1 else "moments"
            marginals[name] = Marginal(kind, {"mean": mean, "variance": var}, np.float64(1.0))
    return Reference(log_z, marginals, count)


__all__ = ["Marginal", "Reference", "Unsupported", "log_density", "quadrature_rule",
           "reference"]
