"""Bernoulli(sample | p): a boolean drawn with probability p (known, or Beta-distributed).

log f = x log p + (1 − x) log(1 − p).

As a function of p the factor is p^x (1 − p)^{1−x}: a Beta message with pseudo-counts
(1 + x, 2 − x).  Under EP with an uncertain sample it is the mixture q(T) p + q(F) (1 − p),
which is projected onto a Beta by matching mean and variance (Infer.NET's
BernoulliFromBetaOp with ``Beta.AllowImproperSum``).
"""

from __future__ import annotations

import numpy as np

from factorflow.distributions import Bernoulli, Beta
from factorflow.distributions.moments import E, Elog, Elog1m, Eprob, is_known
from factorflow.factors.common import (
    bool_log_probs,
    bool_log_weights,
    broadcast_batch,
    full,
    project_dirichlet_mixture,
    times_finite,
)
from factorflow.factors.registry import define_factor
from factorflow.lazy import special


def _log_density(sample, p):
    return special.xlogy(sample, p) + special.xlog1py(1 - np.asarray(sample, float), -p)


BERNOULLI = define_factor("Bernoulli", ("sample", "bool"), ("p", "unit"),
                          log_density=_log_density)


def _log_mean_p(p) -> tuple[np.ndarray, np.ndarray]:
    """(log E[p], log E[1 − p]) for a known probability or a Beta message."""
    if is_known(p):
        v = E(p)
        with np.errstate(divide="ignore"):
            return np.log(v), np.log1p(-v)
    total = np.log(p.alpha + p.beta)
    return np.log(p.alpha) - total, np.log(p.beta) - total


# ----- VMP --------------------------------------------------------------------------
@BERNOULLI.operator("vmp", "sample", skip_if_uniform=("p",))
def _sample_vmp(p) -> Bernoulli:
    """Log-odds E[log p] − E[log(1 − p)] (Infer.NET: digamma(α) − digamma(β))."""
    with np.errstate(invalid="ignore"):
        return Bernoulli.from_natural(np.asarray(Elog(p) - Elog1m(p), float))


@BERNOULLI.operator("vmp", "p", uniform_penalty=("sample",))
def _p_vmp(sample) -> Beta:
    """Beta(1 + E[x], 2 − E[x]): exp E_x[log f] as a function of p."""
    q = Eprob(sample)
    return Beta.from_natural(q, 1.0 - q)


@BERNOULLI.evidence_operator("vmp")
def _average_log_factor(sample, p) -> np.ndarray:
    """E_q[log f] = E[x] E[log p] + (1 − E[x]) E[log(1 − p)]."""
    q = Eprob(sample)
    return times_finite(q, Elog(p)) + times_finite(1 - q, Elog1m(p))


# ----- EP ---------------------------------------------------------------------------
@BERNOULLI.operator("ep", "sample", skip_if_uniform=("p",))
def _sample_ep(p) -> Bernoulli:
    """Bernoulli(E[p]) (for a Beta, log-odds log α − log β)."""
    lt, lf = _log_mean_p(p)
    with np.errstate(invalid="ignore"):
        return Bernoulli.from_natural(np.asarray(lt - lf, float))


@BERNOULLI.operator("ep", "p", skip_if_uniform=("sample",))
def _p_ep(sample, p) -> Beta:
    """proj[m_p · (q(T) p + q(F)(1 − p))] / m_p, projected by mean and variance.

    The tilted distribution is the mixture of Beta(α + 1, β) and Beta(α, β + 1) with
    weights ∝ q(T) α and q(F) β; an observed sample gives the exact Beta(1 + x, 2 − x).
    """
    lt, lf = bool_log_probs(sample)
    if is_known(sample):
        x = Eprob(sample)
        return Beta.from_natural(x, 1.0 - x)
    shape = broadcast_batch(sample, p)
    alpha = np.stack([full(shape, p.alpha), full(shape, p.beta)], axis=-1)
    with np.errstate(divide="ignore"):
        log_w = np.stack([full(shape, lt) + np.log(alpha[..., 0]),
                          full(shape, lf) + np.log(alpha[..., 1])], axis=-1)
    counts = project_dirichlet_mixture(alpha, log_w)
    hard = np.isinf(full(shape, sample.log_odds))
    q = full(shape, np.exp(lt))
    return Beta.from_natural(np.where(hard, q, counts[..., 0] - alpha[..., 0]),
                             np.where(hard, 1.0 - q, counts[..., 1] - alpha[..., 1]))


@BERNOULLI.evidence_operator("ep")
def _log_average_factor(sample, p) -> np.ndarray:
    """log Σ_x ∫ f(x, p) w_x(x) m_p(p) dp = log(w(T) E[p] + w(F) E[1 − p]), where w is the
    normalised sample message (the weight 1 on both values if it is uniform)."""
    wt, wf = bool_log_weights(sample)
    mt, mf = _log_mean_p(p)  # a uniform Beta is proper (A = 0): its mean is the weight
    return np.logaddexp(wt + mt, wf + mf)
