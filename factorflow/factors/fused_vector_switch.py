"""SwitchVectorGaussian(sample | selector, mean, precision, index): a D-dimensional
Gaussian child in every case of a ``Switch`` over a plate, as one factor (VMP only).

``transforms.fuse_switch`` makes it from ::

    for n:                                   # (the plate of the data)
        for k:                               # (the switch's cases)
            if z[n] == k:
                x[n] = VectorGaussian(mean=means[z[n]], precision=precs[z[n]])

under VMP, with the means VectorGaussian (K, D) and the precisions Wishart (K, D, D), as
``x[n] = SwitchVectorGaussian(selector=z[n], precision=precs[k], mean=means[k],
index: k)`` over the plates (n, k).  On element (n, k) its log density is the case's,
[z_n = k] log N(x_n; μ_k, Λ_k⁻¹); the product over k is the mixture's likelihood.  Its
VMP messages (Winn & Bishop 2005, §4; the gate's messages, Minka & Winn 2008, with the
clones' messages folded in; Bishop §10.2), with r = q(z) (N, K) and the data's
statistics s_n = [1, x_n, x_n x_nᵀ] (x xᵀ's upper triangle: T = D(D+1)/2 entries):

* to z (fused over k): log q̂(z_n = k) = E log N(x_n; μ_k, Λ_k⁻¹) =
  ½ E log|Λ_k| − (D/2) log 2π − ½ (E[μ_k]ᵀ E[Λ_k] E[μ_k] + tr(E[Λ_k] Cov μ_k))
  + x_nᵀ E[Λ_k] E[μ_k] − ½ x_nᵀ E[Λ_k] x_n: one (N, 1+D+T) × (1+D+T, K) product of the
  statistics with the components' expected natural parameters, computed once per
  component (``vector_gaussian._switch_evidence``): no (N, K, D) or (N, K, D, D) array;
* to μ (fused over n): naturals (E[Λ_k] Σ_n r_nk x_n, E[Λ_k] Σ_n r_nk);
* to Λ (fused over n): Wishart naturals (½ Σ_n r_nk, −½ Σ_n r_nk E[(x_n − μ_k)(x_n −
  μ_k)ᵀ]) = −½ (Σ r x xᵀ − E μ_k (Σ r x)ᵀ − (Σ r x) E μ_kᵀ + Σ r (E μ E μᵀ + Cov μ));
  both from the sums Σ_n r_nk s_n, one (1+D+T, N) × (N, K) product a sweep that both
  messages share (``vector_gaussian._switch_sums``, remembered while r lives);
* evidence: Σ_k r_nk E log N(x_n; μ_k, Λ_k⁻¹) per datum, from the logits above.

These are the messages the gate machinery sends through its clones in the same schedule
(``Gate.Cases``, ``Gate.EnterOne``, the VectorGaussian's evidence to its case), so the
posteriors and the bound are the same to rounding: no (N, K) VectorGaussian or Wishart
message of a clone, no Bernoulli cases, no copies.  One datum (N = 1), where the data's
statistics are not used, takes the VectorGaussian's elementwise formulas (the same
numbers).  The data must be known (observed): the fusion applies only then.
"""

from __future__ import annotations

import numpy as np

from factorflow.distributions import Discrete, VectorGaussian, Wishart
from factorflow.distributions.base import recall, remember, traced
from factorflow.factors import vector_gaussian
from factorflow.factors.common import Reduce, unsupported
from factorflow.factors.fused_switch import _responsibilities, known_data, over_cases
from factorflow.factors.registry import define_factor

#: the factor's name (``transforms.fuse_switch`` emits it)
NAME = "SwitchVectorGaussian"


def _log_density(sample, selector, mean, precision, index):
    """[selector = index] log N(sample; mean, precision⁻¹) (0 in the other cases)."""
    out = vector_gaussian._log_density(sample, mean, precision)
    return np.where(np.asarray(selector) == np.asarray(index), out, 0.0)


SWITCH_VECTOR_GAUSSIAN = define_factor(
    NAME, ("sample", "vector"), ("selector", "int"), ("mean", "vector"),
    ("precision", "posdef"), ("index", "int"), log_density=_log_density)


def _known(sample) -> None:
    """``fused_switch.known_data`` for the D-dimensional fused Switch."""
    known_data(NAME, VectorGaussian, sample)


def _case_log_likelihood(sample, mean, precision, keep: bool) -> np.ndarray:
    """E log N(x_n; μ_k, Λ_k⁻¹) on the (N, K) grid (the data (N, 1, D), the components
    (K,) with their events): one BLAS product of the data's statistics with the
    components' coefficients where N > 1 (``vector_gaussian._switch_evidence``), the
    VectorGaussian's elementwise evidence otherwise.  ``keep`` (the bound's term, in
    ``evidence()``): remembered while the mean's posterior lives, for the same
    precision's posterior and data, until the next sweep's message to z, which reads it
    from the same posteriors (messages are immutable) and takes it from the record, so
    that the (N, K) array is not held through the sweep (80 MB at K = 10, N = 10⁶: the
    peak memory of a sweep was 798 MB with it held, 720 without, the gate path's 722)."""
    if traced():
        return vector_gaussian._average_log_factor(sample, mean, precision)
    hit = recall("vector_switch_case_log_likelihood", mean)
    if hit is not None and hit[0] is precision and hit[1] is sample and hit[2] is not None:
        ell = hit[2]
        if not keep:
            hit[2] = None
        return ell
    ell = vector_gaussian._average_log_factor(sample, mean, precision)
    if keep:  # (a list: its last item is taken by the message to z)
        remember("vector_switch_case_log_likelihood", mean, [precision, sample, ell])
    return ell


def _over_data(reduce: Reduce | None) -> Reduce:
    """``reduce`` when it sums the statement's (N, K) grid over the data axis (as the
    fusion always asks), else UnsupportedFactorError."""
    if reduce is None or len(reduce[0]) != 2 or tuple(reduce[1]) != (0,):
        raise unsupported(NAME, "vmp", "sends the components their messages summed over "
                          "the data axis only (a fused Switch).")
    return reduce


@SWITCH_VECTOR_GAUSSIAN.operator(
    "vmp", "selector", fresh=("mean", "precision"),
    method="VMP, a fused Switch: E log N(x_n; μ_k, Λ_k⁻¹) as one (N, 1+D+T) × (1+D+T, K) "
           "product of [1, x, x xᵀ] with E[log|Λ|], E[Λμ], E[Λ], E[μᵀΛμ]: the "
           "responsibilities' logits")
def _selector_vmp(sample, mean, precision, index, *, reduce: Reduce | None = None
                  ) -> Discrete:
    """The (N, K) logits of z: each case's expected log-likelihood (with ``reduce`` over
    the cases' axis, as the fusion always asks)."""
    _known(sample)
    over_cases(NAME, reduce)
    return Discrete.from_natural(_case_log_likelihood(sample, mean, precision, keep=False))


@SWITCH_VECTOR_GAUSSIAN.operator(
    "vmp", "mean", fresh=("selector", "precision"), no_init=True,
    method="VMP, a fused Switch: E[Λ_k] Σ_n r_nk [x_n, 1] from the data sums "
           "Σ_n r_nk [1, x_n, x_n x_nᵀ], one BLAS product a sweep")
def _mean_vmp(sample, selector, precision, index, *, reduce: Reduce | None = None
              ) -> VectorGaussian:
    """(E[Λ_k] Σ_n r_nk x_n, E[Λ_k] Σ_n r_nk): the VectorGaussian's message weighted by
    the responsibilities and summed over the data."""
    _known(sample)
    return vector_gaussian._mean_vmp(sample, precision, reduce=_over_data(reduce),
                                     weights=_responsibilities(selector))


@SWITCH_VECTOR_GAUSSIAN.operator(
    "vmp", "precision", fresh=("selector",), no_init=True,
    method="VMP, a fused Switch: Σ_n r_nk E[(x_n − μ_k)(x_n − μ_k)ᵀ] from the same data "
           "sums")
def _precision_vmp(sample, selector, mean, index, *, reduce: Reduce | None = None
                   ) -> Wishart:
    """Wishart naturals (½ Σ_n r_nk, −½ Σ_n r_nk E[(x_n − μ_k)(x_n − μ_k)ᵀ]), from the
    same sums."""
    _known(sample)
    return vector_gaussian._precision_vmp(sample, mean, reduce=_over_data(reduce),
                                          weights=_responsibilities(selector))


@SWITCH_VECTOR_GAUSSIAN.evidence_operator("vmp")
def _average_log_factor(sample, selector, mean, precision, index) -> np.ndarray:
    """Σ_k r_nk E log N(x_n; μ_k, Λ_k⁻¹) per datum (a term of responsibility 0 adds 0)."""
    q = _responsibilities(selector)
    ell = np.asarray(_case_log_likelihood(sample, mean, precision, keep=True))
    if traced():
        return np.sum(q * ell, axis=-1)
    # (arrays of one shape, the fused Switch's (N, K), are read as they are: the views
    # ``broadcast_arrays`` would make of them are the same numbers, at a cost)
    fast = np.einsum("...k,...k->...", *((q, ell) if q.shape == ell.shape
                                          else np.broadcast_arrays(q, ell)))
    if np.logical_and.reduce(np.isfinite(fast), None):  # (``.all``'s, without its wrapper)
        return fast
    with np.errstate(invalid="ignore"):
        return np.sum(np.where(q == 0, 0.0, q * ell), axis=-1)
