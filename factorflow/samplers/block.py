"""Joint updates of correlated scalar hyperparameters, learnt during the warm-up.

Scalar variables that are slice-sampled with the same conjugate children integrated out
(the a and b of a Beta–Binomial hierarchy, :func:`.conditionals.marginalize`) share one
marginal posterior, often strongly correlated (a/(a + b) is well determined, a + b much
less): one coordinate at a time, a slice sampler crawls along the ridge. A
:class:`JointBlock` updates them together in their free space (log of a positive value,
logit of a probability). During the first half of the warm-up it takes one slice step
along each axis; from the middle of the warm-up (and again at its end) it fits a
multivariate Student-t (ν = 5; the mean and covariance of the free values seen so far,
pooled over chains) and then draws by independence Metropolis–Hastings from it: one
proposal and two evaluations of the joint log density per sweep, accepted with the
exact Metropolis–Hastings ratio, so the joint conditional stays invariant whatever the
fit. The proposal is fixed after the warm-up, so the kept draws come from one kernel.
If the fit fails (too few warm-up sweeps, a degenerate covariance) the block keeps its
slice steps.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from factorflow.samplers.conditionals import Conditional, joint_density
from factorflow.samplers.slice import SLICE_DOMAINS, from_free, slice_step, to_free

#: the degrees of freedom of the fitted proposal (heavier tails than the posterior's)
NU = 5.0
#: the warm-up sweeps needed before the proposal is fitted
MIN_WARMUP = 20


class JointBlock:
    """One update of several scalar slice-sampled variables (see the module docstring)."""

    def __init__(self, members: list[Conditional]) -> None:
        self.members = members
        self.variables = [c.variable for c in members]
        self.sites = list({id(s): s for c in members for s in c.sites}.values())
        self.marginals = list({id(m.child): m for c in members for m in c.marginals}.values())
        self.reset()

    def reset(self) -> None:
        """Forget the fitted proposal (each run learns its own)."""
        self.proposal: tuple[np.ndarray, np.ndarray] | None = None
        self._trace: list[np.ndarray] = []

    def observe(self, values: dict[str, np.ndarray]) -> None:
        """Record the free values of a warm-up sweep."""
        self._trace.append(self._free(values))

    def adapt(self) -> None:
        """Fit the proposal (mean, Cholesky factor of the covariance) to the warm-up
        draws so far, all chains pooled; kept as it is when they are too few or their
        covariance is degenerate."""
        if len(self._trace) < MIN_WARMUP:
            return
        flat = np.concatenate(self._trace[len(self._trace) // 2:], axis=0)
        flat = flat.reshape(-1, flat.shape[-1])
        cov = np.cov(flat, rowvar=False).reshape(flat.shape[-1], flat.shape[-1])
        try:
            chol = np.linalg.cholesky(cov)
        except np.linalg.LinAlgError:
            return
        if np.all(np.isfinite(chol)) and np.all(np.diag(chol) > 1e-9):
            self.proposal = (flat.mean(axis=0), chol)

    def _free(self, values: dict[str, np.ndarray]) -> np.ndarray:
        return np.stack([to_free(np.asarray(values[v.name], float), v.domain)
                         for v in self.variables], axis=-1)

    def update(self, rng: np.random.Generator, values: dict[str, np.ndarray],
               known: dict[str, Any], chains: int) -> None:
        """One joint update (see the module docstring); writes the variables into
        ``values``."""
        density = joint_density(self.variables, self.sites, self.marginals, values, known,
                                chains)
        names = [v.name for v in self.variables]
        domains = [v.domain for v in self.variables]

        def free_density(u: np.ndarray) -> np.ndarray:
            trial, jacobian = {}, 0.0
            for i, (name, domain) in enumerate(zip(names, domains, strict=True)):
                trial[name], jac = from_free(u[..., i], domain)
                jacobian = jacobian + jac
            with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
                out = density(trial) + jacobian
            return np.where(np.isnan(out), -np.inf, out)

        u = self._free(values)
        if self.proposal is None:
            for d in np.eye(len(names)):
                def along(t: np.ndarray, u: np.ndarray = u, d: np.ndarray = d) -> np.ndarray:
                    return free_density(u + t[..., None] * d)

                u = u + slice_step(along, np.zeros(u.shape[:-1]), "real", rng)[..., None] * d
        else:
            mean, chol = self.proposal
            z = rng.standard_normal(u.shape)
            scale = np.sqrt(NU / rng.chisquare(NU, u.shape[:-1]))[..., None]
            new = mean + scale * (z @ chol.T)
            log_ratio = (free_density(new) - free_density(u)
                         + self._log_t(u) - self._log_t(new))
            accept = np.log(rng.uniform(size=log_ratio.shape)) < log_ratio
            u = np.where(accept[..., None], new, u)
        for i, (name, domain) in enumerate(zip(names, domains, strict=True)):
            values[name] = from_free(u[..., i], domain)[0]

    def _log_t(self, u: np.ndarray) -> np.ndarray:
        """The proposal's log density at ``u``, up to a constant."""
        assert self.proposal is not None
        mean, chol = self.proposal
        z = np.linalg.solve(chol, (u - mean).T).T if u.ndim > 1 else np.linalg.solve(
            chol, u - mean)
        return -0.5 * (NU + len(mean)) * np.log1p((z**2).sum(axis=-1) / NU)


def joint_blocks(updates: list[Conditional]) -> list[Conditional | JointBlock]:
    """``updates`` with each run of two or more consecutive scalar slice-sampled variables
    that integrate out the same children replaced by one :class:`JointBlock`."""
    out: list[Conditional | JointBlock] = []
    i = 0
    while i < len(updates):
        c = updates[i]
        j = i + 1
        if _joinable(c):
            while j < len(updates) and _joinable(updates[j]) and updates[j].then == c.then:
                j += 1
        if j - i >= 2:
            out.append(JointBlock(updates[i:j]))
        else:
            out.append(c)
            j = i + 1
        i = j
    return out


def _joinable(c: Conditional) -> bool:
    return (c.kind == "slice" and bool(c.marginals) and not c.variable.plates
            and c.variable.domain in SLICE_DOMAINS)
