"""The result of a sampling run: draws per variable, summaries, ArviZ.

``result.samples(name)`` is the array of draws, ``(chain, draw, *plate shape, *event)``;
``result[name]`` a :class:`Summary` (posterior mean and standard deviation over all
chains and draws, per plate element); ``result.to_arviz()`` an ``arviz.InferenceData``
whose posterior group holds every variable with its plates as named dimensions, so
``az.summary``, ``az.rhat`` and ``az.ess`` apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from factorflow.distributions.base import format_values
from factorflow.errors import ModelError


@dataclass(frozen=True)
class Summary:
    """Posterior mean and standard deviation of one variable, per plate element (over
    every chain and draw): ``result[name]`` of a ``SamplingResult``.

    >>> with ff.Model("coin") as model:       # the posterior is Beta(1 + 4, 1 + 1)
    ...     p = ff.Beta("p", 1.0, 1.0)
    ...     with ff.Plate(ff.Range("n", 5)):
    ...         flips = ff.Bernoulli("flip", p, observed=[True, True, False, True, True])
    >>> summary = model.infer("gibbs", draws=2000, seed=0)["p"]
    >>> bool(abs(summary.mean - 5 / 7) < 0.01), bool(abs(summary.sd - (10 / 392) ** 0.5) < 0.01)
    (True, True)
    """

    mean: np.ndarray
    sd: np.ndarray

    def __repr__(self) -> str:
        """``Summary(mean=1.18, sd=0.78)``: numbers as a posterior's repr shows them."""
        mean = format_values(self.mean, "Summary(mean=")
        prefix = f"Summary(mean={mean}, sd=".rsplit("\n", 1)[-1]
        return f"Summary(mean={mean}, sd={format_values(self.sd, ' ' * len(prefix))})"


class SamplingResult:
    """Draws of every sampled variable of a run (see the module docstring).

    >>> with ff.Model("coin") as model:       # the posterior is Beta(1 + 4, 1 + 1)
    ...     p = ff.Beta("p", 1.0, 1.0)
    ...     with ff.Plate(ff.Range("n", 5)):
    ...         flips = ff.Bernoulli("flip", p, observed=[True, True, False, True, True])
    >>> result = model.infer("gibbs", draws=2000, seed=0)
    >>> result, result.names, result.chains, result.draws
    (SamplingResult(p: 4 chains x 2000 draws, burn 1000, thin 1), ('p',), 4, 2000)
    """

    algorithm = "gibbs"

    def __init__(self, draws: dict[str, np.ndarray], plates: dict[str, tuple[str, ...]], *,
                 burn: int, thin: int, seed: Any, seconds: float) -> None:
        self._draws = draws
        self.plates = plates
        self.burn, self.thin, self.seed, self.seconds = burn, thin, seed, seconds

    @property
    def names(self) -> tuple[str, ...]:
        """The sampled variables, in the model's order (observed ones are not sampled).

        >>> with ff.Model("coin") as model:       # the posterior is Beta(1 + 4, 1 + 1)
        ...     p = ff.Beta("p", 1.0, 1.0)
        ...     with ff.Plate(ff.Range("n", 5)):
        ...         flips = ff.Bernoulli("flip", p, observed=[True, True, False, True, True])
        >>> model.infer("gibbs", draws=10, seed=0).names
        ('p',)
        """
        return tuple(self._draws)

    @property
    def chains(self) -> int:
        """The number of chains (``chains=`` of the run; 4 by default).

        >>> with ff.Model("coin") as model:       # the posterior is Beta(1 + 4, 1 + 1)
        ...     p = ff.Beta("p", 1.0, 1.0)
        ...     with ff.Plate(ff.Range("n", 5)):
        ...         flips = ff.Bernoulli("flip", p, observed=[True, True, False, True, True])
        >>> model.infer("gibbs", draws=10, chains=2, seed=0).chains
        2
        """
        return next(iter(self._draws.values())).shape[0] if self._draws else 0

    @property
    def draws(self) -> int:
        """The draws kept per chain (after burn-in and thinning).

        >>> with ff.Model("coin") as model:       # the posterior is Beta(1 + 4, 1 + 1)
        ...     p = ff.Beta("p", 1.0, 1.0)
        ...     with ff.Plate(ff.Range("n", 5)):
        ...         flips = ff.Bernoulli("flip", p, observed=[True, True, False, True, True])
        >>> model.infer("gibbs", draws=10, thin=3, seed=0).draws
        10
        """
        return next(iter(self._draws.values())).shape[1] if self._draws else 0

    def samples(self, name: str) -> np.ndarray:
        """The draws of ``name``: ``(chain, draw, *plate shape, *event)`` (read-only).

        >>> with ff.Model("coin") as model:       # the posterior is Beta(1 + 4, 1 + 1)
        ...     p = ff.Beta("p", 1.0, 1.0)
        ...     with ff.Plate(ff.Range("n", 5)):
        ...         flips = ff.Bernoulli("flip", p, observed=[True, True, False, True, True])
        >>> draws = model.infer("gibbs", draws=2000, seed=0).samples("p")
        >>> draws.shape, bool(draws.flags.writeable), bool(np.all((0 < draws) & (draws < 1)))
        ((4, 2000), False, True)
        """
        arr = self._draws[self._check(name)].view()
        arr.flags.writeable = False
        return arr

    def __getitem__(self, name: str) -> Summary:
        x = self._draws[self._check(name)].astype(float)
        flat = x.reshape((-1, *x.shape[2:]))
        return Summary(flat.mean(axis=0), flat.std(axis=0, ddof=1) if len(flat) > 1
                       else np.zeros(flat.shape[1:]))

    def __contains__(self, name: object) -> bool:
        return name in self._draws

    def __iter__(self):
        return iter(self._draws)

    def __repr__(self) -> str:
        return (f"SamplingResult({', '.join(self.names)}: {self.chains} chains x "
                f"{self.draws} draws, burn {self.burn}, thin {self.thin})")

    def _check(self, name: str) -> str:
        if name not in self._draws:
            raise ModelError(f"no samples of {name!r}; sampled variables: "
                             f"{', '.join(self._draws) or 'none'}.")
        return name

    def to_arviz(self) -> Any:
        """An ``arviz.InferenceData`` with a posterior group: one variable per sampled
        variable, dimensions ``chain``, ``draw``, then its plates by name (and
        ``<name>_dim`` for a simplex's components).

        >>> with ff.Model("coin") as model:       # the posterior is Beta(1 + 4, 1 + 1)
        ...     p = ff.Beta("p", 1.0, 1.0)
        ...     with ff.Plate(ff.Range("n", 5)):
        ...         flips = ff.Bernoulli("flip", p, observed=[True, True, False, True, True])
        >>> import arviz as az
        >>> table = az.summary(model.infer("gibbs", draws=2000, seed=0).to_arviz())
        >>> list(table.index), bool(abs(table.loc["p", "mean"] - 5 / 7) < 0.01)
        (['p'], True)
        """
        try:
            import arviz as az
        except ImportError:  # pragma: no cover - arviz is in the test and mcmc extras
            raise ModelError("to_arviz() needs ArviZ: pip install 'factorflow[mcmc]'.") \
                from None
        posterior, dims = {}, {}
        for name, arr in self._draws.items():
            posterior[name] = arr
            extra = arr.ndim - 2 - len(self.plates[name])
            dims[name] = [*self.plates[name], *([f"{name}_dim"] if extra else [])]
        return az.from_dict(posterior=posterior, dims=dims)
