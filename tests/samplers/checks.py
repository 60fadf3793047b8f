"""Monte Carlo checks of sampling results against exact posterior means."""

from __future__ import annotations

import numpy as np


def mcse(draws: np.ndarray) -> np.ndarray:
    """The Monte Carlo standard error of the mean of ``draws`` (chain, draw, ...), from
    ArviZ's effective sample size of the mean (per element)."""
    import arviz as az

    draws = np.asarray(draws, float)
    ess = az.ess(az.convert_to_dataset({"x": draws}), method="mean")["x"].values
    flat = draws.reshape((-1, *draws.shape[2:]))
    return flat.std(axis=0, ddof=1) / np.sqrt(ess)


def assert_mean_within(draws: np.ndarray, exact, k: float = 4.0) -> None:
    """The posterior mean estimated from ``draws`` is within ``k`` Monte Carlo standard
    errors of ``exact`` (elementwise)."""
    draws = np.asarray(draws, float)
    mean = draws.reshape((-1, *draws.shape[2:])).mean(axis=0)
    err = mcse(draws)
    gap = np.abs(mean - np.asarray(exact, float))
    assert np.all(gap <= k * err), f"mean {mean} vs exact {exact}: gap {gap} > {k} x {err}"
