"""The posterior predictive: new data drawn as the model would draw it, given a result.

``result`` is anything that maps variable names to posteriors with ``sample(n, rng)``
(a ``factorflow.Result``; this module needs nothing from the runtime).

``model.predictive(result, n)`` draws ``n`` joint samples.  In each, every latent
variable takes a value drawn from its posterior in ``result`` — independently of the
others, as the approximation q that EP and VMP compute factorises over variables — and
then every observed variable is drawn from the factor statements that define it, given
those values: its plates are array axes (one draw per element, no Python loop per
datum), ``means[z]`` picks each element's component, and a statement inside
``ff.If``/``ff.IfNot``/``ff.Case`` applies where its condition holds in that draw
(``ff.Switch`` selects through the indexing).  Known values (constants, ``ff.Data``,
other observed variables) are used as they are.

The predictive of an observed variable x is therefore ∫ p(x | θ) q(θ) dθ, with θ the
arguments of the statements defining x; for a conjugate model, where q is the exact
posterior, it is the exact posterior predictive.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

import factorflow.distributions as dist
from factorflow.distributions.base import generator
from factorflow.errors import ModelError, UnsupportedFactorError
from factorflow.lazy import special
from factorflow.model.chains import Table
from factorflow.model.core import Data, FactorCall, GateFrame, Indexed, Range, Variable
from factorflow.model.missing import is_missing_gate

if TYPE_CHECKING:
    from factorflow.model.core import Model

#: each stochastic built-in factor as the distribution it draws from, given its arguments
#: (the family's own sampler draws: one source of truth for sampling)
FAMILIES: dict[str, Any] = {
    "Gaussian": lambda a: dist.Gaussian(a["mean"], precision=a["precision"]),
    "Gamma": lambda a: dist.Gamma(a["shape"], rate=a["rate"]),
    "Beta": lambda a: dist.Beta(a["alpha"], a["beta"]),
    "Bernoulli": lambda a: dist.Bernoulli(a["p"]),
    "Binomial": lambda a: dist.Binomial(a["trials"], a["p"]),
    "Poisson": lambda a: dist.Poisson(a["rate"]),
    "Discrete": lambda a: dist.Discrete(a["probs"]),
    "Dirichlet": lambda a: dist.Dirichlet(a["alpha"]),
    # the fused links (factors.links): ff.logistic, ff.probit, ff.exp
    "BernoulliFromLogOdds": lambda a: dist.Bernoulli.from_natural(np.asarray(a["logodds"], float)),
    "BernoulliFromProbit": lambda a: dist.Bernoulli(special.ndtr(a["x"])),
    "PoissonFromLogRate": lambda a: dist.Poisson(np.exp(a["lograte"])),
}


def _event(var: Variable) -> tuple[int, ...]:
    return (var.size,) if var.domain == "simplex" and var.size is not None else ()


def _align(arr: np.ndarray, have: tuple[Range, ...], want: tuple[Range, ...], n_event: int,
           what: str) -> np.ndarray:
    """``arr`` of shape (n,) + ``have``'s sizes + event laid out over ``want``: axes
    reordered, size-1 axes for plates it lacks (so it broadcasts)."""
    extra = [r.name for r in have if r not in want]
    if extra:
        raise ModelError(f"predictive: {what} is indexed by the plates {extra}, which are "
                         "not open where it is used.")
    arr = np.moveaxis(arr, [1 + have.index(r) for r in want if r in have],
                      list(range(1, 1 + sum(r in have for r in want))))
    event = arr.shape[arr.ndim - n_event:] if n_event else ()
    return arr.reshape((arr.shape[0],) + tuple(r.size if r in have else 1 for r in want)
                       + event)


class _Draws:
    """The values of one set of ``n`` joint draws, computed on demand."""

    def __init__(self, model: Model, result: Any, n: int, rng: np.random.Generator):
        self.model, self.result, self.n, self.rng = model, result, n, rng
        self.values: dict[str, np.ndarray] = {}

    def of(self, var: Variable) -> np.ndarray:
        """Shape (n or 1,) + the variable's plate sizes + its event."""
        if var.name not in self.values:
            if var.is_observed:
                value = var.observed.value if isinstance(var.observed, Data) else var.observed
                arr = np.asarray(value)[None]
            else:
                if var.name not in self.result:
                    raise ModelError(f"predictive: the result has no posterior for "
                                     f"{var.name!r}; pass the result of this model's "
                                     "infer or run.")
                arr = np.asarray(self.result[var.name].sample(self.n, rng=self.rng))
            self.values[var.name] = arr
        return self.values[var.name]

    def argument(self, value: Any, plates: tuple[Range, ...], what: str) -> Any:
        """An argument of a statement over ``plates``, with a leading draw axis when it
        is random."""
        if isinstance(value, Variable):
            return _align(self.of(value), value.plates, plates, len(_event(value)), what)
        if isinstance(value, Data):
            return np.asarray(value.value)
        if isinstance(value, Indexed):
            return self._gather(value, plates, what)
        return np.asarray(value)

    def _gather(self, value: Indexed, plates: tuple[Range, ...], what: str) -> np.ndarray:
        base = value.base
        if isinstance(base, Table):  # ff.Constant(values)[index]: one row per element
            index = np.asarray(self.argument(value.index, plates, what), dtype=np.intp)
            return base.values[index]
        if len(base.plates) != 1:
            raise ModelError(f"predictive: {what} indexes {base.name!r}, which has "
                             f"{len(base.plates)} plates; predictive draws support "
                             "indexing a variable over one plate.")
        index = self.argument(value.index, plates, what)
        index = np.asarray(index, dtype=np.intp)
        if index.ndim < 1 + len(plates):   # a known index has no draw axis
            index = index[None]
        values = self.of(base)             # (n or 1, K) + event
        draws = np.arange(values.shape[0]).reshape((-1,) + (1,) * len(plates))
        return values[draws, index]

    def mask(self, call: FactorCall) -> np.ndarray | bool:
        """Where the gates around ``call`` hold, over its plates (True: everywhere); the
        gate of missing observations is not one: a missing element is drawn as a seen
        one (its posterior predictive, PyMC's imputation)."""
        mask: np.ndarray | bool = True
        for frame in call.frames:
            if (not isinstance(frame, GateFrame) or frame.kind == "switch"
                    or is_missing_gate(frame, call.output)):
                continue
            c = self.argument(frame.condition, call.plates, f"the condition of "
                              f"{frame.describe()}")
            holds = (c.astype(bool) != frame.negated) if frame.kind == "if" else (
                c == frame.value)
            mask = mask & holds
        return mask

    def observed(self, var: Variable) -> np.ndarray:
        """n draws of the observed variable ``var``: shape (n,) + plates + event."""
        out = np.zeros((self.n,) + var.shape + _event(var))
        calls = [c for c in self.model.statements if c.output is var]
        for call in calls:
            family = FAMILIES.get(call.factor)
            if family is None:
                raise UnsupportedFactorError(
                    f"predictive: {var.name!r} is defined by the factor {call.factor}, "
                    "which has no sampler; predictive draws support the built-in "
                    f"families ({', '.join(FAMILIES)}).")
            args = {k: self.argument(v, call.plates, f"argument {k!r} of {var.name!r}")
                    for k, v in call.args.items()}
            draw = family(args)._draw(self.rng, (self.n,) + var.shape)
            mask = np.asarray(self.mask(call))
            mask = mask.reshape(mask.shape + (1,) * (draw.ndim - mask.ndim))
            out = np.where(mask, draw, out)
        if var.domain in ("bool", "int", "count"):
            return out.astype(bool if var.domain == "bool" else np.int64)
        return out


def predictive(model: Model, result: Any, n: int = 1000, rng: Any = None,
               variables: Any = None) -> dict[str, np.ndarray]:
    """``n`` draws from the posterior predictive of each observed variable of ``model``
    (or of the names in ``variables``): name -> array of shape ``(n,) + plate sizes``
    (+ K for a simplex).  ``rng`` is a Generator, a seed or None; the same seed gives
    the same draws.  See the module docstring for what is drawn."""
    if isinstance(n, bool | np.bool_) or not isinstance(n, int | np.integer) or n < 0:
        raise ModelError(f"predictive: n must be a non-negative integer (the number of "
                         f"draws), got {n!r}.")
    names = ([v.name for v in model.variables.values() if v.is_observed]
             if variables is None else [variables] if isinstance(variables, str)
             else list(variables))
    chosen = [model.variable(name) for name in names]
    latent = [v.name for v in chosen if not v.is_observed]
    if latent:
        raise ModelError(f"predictive: {latent} are latent; their draws are "
                         f"result[name].sample(n). Name observed variables.")
    draws = _Draws(model, result, int(n), generator(rng))
    return {var.name: draws.observed(var) for var in chosen}
