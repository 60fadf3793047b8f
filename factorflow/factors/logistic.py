"""Logistic(logistic | x): the probability σ(x) = 1 / (1 + exp(−x)) of a real ``x``
(``ff.logistic(x)``), as in Bernoulli-logistic regression ``ff.Bernoulli(y, ff.logistic(ψ))``.

log f = log δ(logistic − σ(x)).

No EP or VMP operators yet: Gibbs sampling reads σ(x) as an expression and finds the
Pólya-Gamma augmentation of a Bernoulli, Binomial or negative binomial of it by
exploring rewrites (:mod:`factorflow.samplers.expansions`).
"""

from __future__ import annotations

import numpy as np

from factorflow.factors.registry import define_factor
from factorflow.lazy import special


def _logistic_log_density(logistic, x):
    return np.where(np.asarray(logistic) == special.expit(x), 0.0, -np.inf)


LOGISTIC = define_factor("Logistic", ("logistic", "unit"), ("x", "real"), deterministic=True,
                         log_density=_logistic_log_density)
for _algorithm in ("ep", "vmp"):
    for _arg in LOGISTIC.arg_names:
        LOGISTIC.notes[(_algorithm, _arg)] = (
            "sample the model with 'gibbs', which augments it with Pólya-Gamma variables")
