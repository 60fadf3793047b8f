"""Binomial(sample | trials, p): a count of successes in ``trials`` known trials.

log f = log C(n, k) + k log p + (n − k) log(1 − p),   k = sample, n = trials.

The count is observed (factorflow has no latent count variables), so the factor is a
Beta message with pseudo-counts (k + 1, n − k + 1) to p — conjugate and exact under both
EP and VMP (Infer.NET's BinomialOp).
"""

from __future__ import annotations

import numpy as np

from factorflow.distributions import Beta
from factorflow.distributions.base import log_normalizer_or_zero
from factorflow.distributions.moments import E, Elog, Elog1m, is_known
from factorflow.factors.common import broadcast_batch, full, times_finite, unsupported
from factorflow.factors.registry import define_factor
from factorflow.lazy import special


def _log_choose(n, k):
    return special.gammaln(n + 1) - special.gammaln(k + 1) - special.gammaln(n - k + 1)


def _log_density(sample, trials, p):
    k = np.asarray(sample, float)
    return _log_choose(trials, k) + special.xlogy(k, p) + special.xlog1py(trials - k, -p)


BINOMIAL = define_factor("Binomial", ("sample", "count"), ("trials", "count"), ("p", "unit"),
                         log_density=_log_density)


@BINOMIAL.check_values
def _count_within_trials(sample, trials) -> str | None:
    """A count above its number of trials has probability zero (no posterior exists)."""
    k, n = np.broadcast_arrays(np.asarray(sample, float), np.asarray(trials, float))
    above = k > n
    if not np.any(above):
        return None
    where = tuple(int(i) for i in np.argwhere(above)[0])
    at = f" at index {where}" if where else ""
    return (f"the count {k[above].flat[0]:g} is above its number of trials "
            f"{n[above].flat[0]:g}{at}; a Binomial count lies in 0..trials.")


def _p_message(sample, trials) -> Beta:
    """The factor as a function of p: Beta natural parameters (k, n − k)."""
    s = broadcast_batch(sample, trials)
    k = full(s, E(sample))
    return Beta.from_natural(k, full(s, E(trials)) - k)


def _observed(sample) -> None:
    if not is_known(sample):
        raise unsupported("Binomial", "message passing",
                          "needs the count 'sample' to be observed.")


@BINOMIAL.operator("vmp", "p", known=("sample", "trials"))
def _p_vmp(sample, trials) -> Beta:
    """Beta(k + 1, n − k + 1): log f is linear in (log p, log(1 − p))."""
    return _p_message(sample, trials)


@BINOMIAL.operator("ep", "p", known=("sample", "trials"))
def _p_ep(sample, trials) -> Beta:
    """Beta(k + 1, n − k + 1): the exact message for an observed count."""
    return _p_message(sample, trials)


@BINOMIAL.evidence_operator("vmp")
def _average_log_factor(sample, trials, p) -> np.ndarray:
    """E_q[log f] = log C(n, k) + k E[log p] + (n − k) E[log(1 − p)]."""
    _observed(sample)
    k, n = E(sample), E(trials)
    return _log_choose(n, k) + times_finite(k, Elog(p)) + times_finite(n - k, Elog1m(p))


@BINOMIAL.evidence_operator("ep")
def _log_average_factor(sample, trials, p) -> np.ndarray:
    """log ∫ f m_p = log C(n, k) + A(m_p · Beta(k + 1, n − k + 1)) − A(m_p), exact."""
    _observed(sample)
    k, n = E(sample), E(trials)
    if is_known(p):
        return _log_density(k, n, E(p))
    with np.errstate(divide="ignore", invalid="ignore"):
        return (_log_choose(n, k) + (_p_message(sample, trials) * p).log_normalizer()
                - log_normalizer_or_zero(p))
