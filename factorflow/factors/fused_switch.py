"""SwitchGaussian(sample | selector, mean, precision, index): a Gaussian child in every
case of a ``Switch`` over a plate, as one factor (VMP only).

``transforms.fuse_switch`` makes it from ::

    for n:                                   # (the plate of the data)
        for k:                               # (the switch's cases)
            if z[n] == k:
                x[n] = Gaussian(mean=means[z[n]], precision=precs[z[n]])

under VMP, as ``x[n] = SwitchGaussian(selector=z[n], mean=means[k], precision=precs[k],
index: k)`` over the plates (n, k).  On element (n, k) its log density is the case's,
[z_n = k] log N(x_n; μ_k, 1/τ_k); the product over k is the mixture's likelihood.  Its
VMP messages (Winn & Bishop 2005, §4; the gate's messages, Minka & Winn 2008, with the
clones' messages folded in):

* to z (fused over k): log q̂(z_n = k) = E[log N(x_n; μ_k, 1/τ_k)] =
  ½ E log τ_k − ½ log 2π − ½ E τ_k (x_n² − 2 x_n E μ_k + E μ_k²): one (N, 3) × (3, K)
  product of the data's sufficient statistics [1, x, x²] with the components' expected
  natural parameters (``gaussian._data_evidence_by_blas``), the (N, K) logits of the
  responsibilities;
* to μ (fused over n): naturals (E τ_k Σ_n r_nk x_n, E τ_k Σ_n r_nk), r = q(z);
* to τ (fused over n): (½ Σ_n r_nk, −½ Σ_n r_nk E[(x_n − μ_k)²]) from the same sums
  Σ_n r_nk [1, x_n, x_n²] (one (3, N) × (N, K) product a sweep: ``gaussian._data_sums``);
* evidence: Σ_k r_nk E[log N(x_n; μ_k, 1/τ_k)] per datum.

On the plain mixture (the data a known (N, 1) NumPy column, the components K-vector
posteriors of their families: ``_plain_rows``) the logits are ``gaussian.evidence_product``
of the components' moments, read through ``gaussian._row_moments`` (computed once per
posterior and remembered: the logits, the precision's message and the mean's read the same
arrays), and the data sums of a sweep are found through the data's [1, x, x²] columns
remembered on the laid-out array itself (``gaussian._data_sums``): the general path's
numbers bit for bit, with none of its checks of shapes and layouts
(``tests/runtime/test_small_sweep.py``).

These are the messages the gate machinery sends through its clones in the same schedule
(``Gate.Cases``, ``Gate.EnterOne``, the Gaussian's evidence to its case), so the
posteriors and the bound are the same to rounding: no (N, K) Gaussian or Gamma message
of a clone, no Bernoulli cases, no copies.  The data must be known (observed): the
fusion applies only then.

Under JAX (the same operators, traced) the logits are a ``rows_product`` S C of the
data's statistics S = [1, x, x²]; the posterior of z folds E[log w] into C, and its
normalisation is one loop over blocks of rows (``base._normalize_traced_product``)
that also accumulates Sᵀ r.  The operators read that normalisation's probabilities
(``_traced_responsibilities``), so the parameters' messages read Sᵀ r
(``gaussian._traced_data_sums``) and the bound's term is Σ_jk C_jk (Sᵀ r)_jk
(``runtime.backends.jax_bound``): the sweep makes one pass over the data
(``tests/runtime/backends/test_jax_fused_switch.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from factorflow.distributions import Discrete, Gamma, Gaussian
from factorflow.distributions.base import _recall_traced, recall, remember, traced
from factorflow.distributions.moments import distinct_vector
from factorflow.factors import gaussian
from factorflow.factors.common import Reduce, unsupported
from factorflow.factors.registry import define_factor


def _log_density(sample, selector, mean, precision, index):
    """[selector = index] log N(sample; mean, 1/precision) (0 in the other cases)."""
    out = gaussian._log_density(sample, mean, precision)
    return np.where(np.asarray(selector) == np.asarray(index), out, 0.0)


SWITCH_GAUSSIAN = define_factor(
    "SwitchGaussian", ("sample", "real"), ("selector", "int"), ("mean", "real"),
    ("precision", "positive"), ("index", "int"), log_density=_log_density)


def known_data(name: str, family: type, sample: Any) -> None:
    """UnsupportedFactorError naming the fused statement ``name`` unless the data is known
    (the fusion's condition: not a ``family`` message); both fused Switches' check."""
    if isinstance(sample, family):
        raise unsupported(name, "vmp", "needs its sample observed; "
                          "transforms.fuse_switch fuses only observed children.")


def over_cases(name: str, reduce: Reduce | None) -> None:
    """UnsupportedFactorError naming ``name`` unless ``reduce`` sums over the cases' axis
    (as the fusion always asks of the message to z); both fused Switches' check."""
    if reduce is None or tuple(reduce[1]) != (len(reduce[0]) - 1,):
        raise unsupported(name, "vmp", "sends z its message over the cases' axis only "
                          "(a fused Switch).")


def _known(sample) -> None:
    """``known_data`` for the scalar Gaussian's fused Switch."""
    known_data("SwitchGaussian", Gaussian, sample)


def _plain_rows(sample, mean, precision) -> np.ndarray | None:
    """The data's [1, x, x²] rows (N, 3) where the statement is the plain mixture — the
    data a known (N, 1) NumPy column whose rows ``gaussian._data_evidence_by_blas`` made
    (and remembered on this very array: the laid-out data, the same object every sweep),
    the components K-vector posteriors of their families (``distinct_vector``) — so
    that the logits are ``gaussian.evidence_product`` of the components' moments with
    none of the general path's checks; None otherwise (that path)."""
    if (type(sample) is not np.ndarray or type(mean) is not Gaussian
            or type(precision) is not Gamma):
        return None
    rows = recall("gaussian_rows_of", sample)
    if rows is None or not (distinct_vector(mean) and distinct_vector(precision)):
        return None
    return rows


def _case_log_likelihood(sample, mean, precision) -> np.ndarray:
    """E[log N(x_n; μ_k, 1/τ_k)] on the (N, K) grid (the data (N, 1), the components
    (K,)): one BLAS product where it applies, the Gaussian's elementwise evidence
    otherwise (the same numbers to rounding of x²).  Remembered while the mean's message
    lives, for the same precision's message and data: ``evidence()`` and the next
    sweep's message to z read it from the same posteriors (messages are immutable)."""
    if traced():
        return gaussian._average_log_factor(sample, mean, precision)
    hit = recall("switch_case_log_likelihood", mean)
    if hit is not None and hit[0] is precision and hit[1] is sample:
        return hit[2]
    rows = _plain_rows(sample, mean, precision)
    if rows is not None:  # (the moments remembered: the components' messages read them)
        m, v = gaussian._row_moments(mean, "mean")
        tau, elog = gaussian._row_moments(precision, "precision")
        ell = gaussian.evidence_product(rows, m, v, tau, elog)
    else:
        ell = gaussian._average_log_factor(sample, mean, precision)
    # (the bound's term and the next sweep's message to z read the same posteriors)
    remember("switch_case_log_likelihood", mean, (precision, sample, ell))
    return ell


def _responsibilities(selector) -> np.ndarray:
    """q(z_n = k) as an (N, K) array: the selector's posterior, laid out over the
    statement's plates (N, 1) with its K values on the event axis, normalised, seen
    without the case axis of length 1.  Remembered while the message lives, so that the
    mean's and the precision's messages read one array (and ``gaussian._data_sums``
    finds the sums it made for it)."""
    if traced():
        return _traced_responsibilities(selector)
    hit = recall("switch_responsibilities", selector)
    if hit is not None:
        return hit
    probs = None
    eta = selector.eta[0]
    if eta.ndim >= 2 and eta.shape[-2] == 1:
        # the posterior itself (the array ``align_plates`` viewed): its probabilities as
        # its own normalisation made them (remembered), not normalised again for the view
        own = getattr(eta, "base", None)
        if type(own) is np.ndarray and own.shape == eta.shape[:-2] + eta.shape[-1:]:
            probs = Discrete.from_natural(own).probs
    if probs is None:
        probs = selector.probs
        if probs.ndim >= 2 and probs.shape[-2] == 1:
            probs = probs[..., 0, :]
    remember("switch_responsibilities", selector, probs)
    return probs


def _traced_responsibilities(selector) -> np.ndarray:
    """``_responsibilities`` under tracing: the probabilities of the posterior the
    selector was laid out from (``kernels.align_plates``' ``"laid_out_from"``, NumPy's
    ``.base``) as its normalisation made them — a mixture's: the fused one, one blocked
    pass that also accumulated the data sums Sᵀ q and Σ_n q_nk
    (``base._normalize_traced_product``), which ``gaussian._traced_data_sums``,
    ``discrete._column_sums`` and the bound (``runtime.backends.jax_bound``) read, so
    that no (N, K) array is read again; else the view's own probabilities."""
    eta = selector.eta[0]
    own = (_recall_traced("laid_out_from", eta) if eta.ndim >= 2 and eta.shape[-2] == 1
           else None)
    if own is not None and own.shape == eta.shape[:-2] + eta.shape[-1:]:
        return Discrete.from_natural(own).probs
    probs = selector.probs
    return probs[..., 0, :] if probs.ndim >= 2 and probs.shape[-2] == 1 else probs


def _component_sums(sample, weights, reduce: Reduce | None, component, family: type
                    ) -> tuple[np.ndarray, ...] | None:
    """(Σ_n r_nk, Σ_n r_nk x_n, Σ_n r_nk x_n²) where the statement is the plain (N, K)
    grid — the data a column, the component's posterior a K-vector of ``family`` — so
    that its message is a few K-vector operations on them (the formulas of the
    Gaussian's weighted paths, ``gaussian._mean_vmp`` / ``_reduced_square_diff``, the
    same numbers; under tracing the sums the responsibilities' fused normalisation
    accumulated, ``gaussian._traced_data_sums``); None otherwise (the caller takes
    those paths)."""
    if (reduce is None or type(component) is not family
            or component.batch_shape != (reduce[0][-1],) or tuple(reduce[1]) != (0,)):
        return None
    return gaussian._data_sums(sample, weights, reduce)


@SWITCH_GAUSSIAN.operator("vmp", "selector", fresh=("mean", "precision"),
                          method="VMP, a fused Switch: E log N(x_n; μ_k, 1/τ_k) as one "
                                 "(N, 3) × (3, K) product, the responsibilities' logits")
def _selector_vmp(sample, mean, precision, index, *, reduce: Reduce | None = None
                  ) -> Discrete:
    """The (N, K) logits of z: each case's expected log-likelihood (with ``reduce`` over
    the cases' axis, as the fusion always asks)."""
    _known(sample)
    over_cases("SwitchGaussian", reduce)
    return Discrete.from_natural(_case_log_likelihood(sample, mean, precision))


@SWITCH_GAUSSIAN.operator("vmp", "mean", fresh=("selector", "precision"), no_init=True,
                          method="VMP, a fused Switch: τ_k Σ_n r_nk [x_n, 1] from the data "
                                 "sums Σ_n r_nk [1, x_n, x_n²], one BLAS product a sweep")
def _mean_vmp(sample, selector, precision, index, *, reduce: Reduce | None = None
              ) -> Gaussian:
    """(E τ_k Σ_n r_nk x_n, E τ_k Σ_n r_nk): the Gaussian's message weighted by the
    responsibilities and summed over the data."""
    _known(sample)
    weights = _responsibilities(selector)
    sums = _component_sums(sample, weights, reduce, precision, Gamma)
    if sums is not None:  # E τ_k (Σ r x, Σ r): the gate path's numbers, without its steps
        # (E τ with E log τ, remembered: the next sweep's logits read both)
        (s0, s1, _), tau = sums, gaussian._row_moments(precision, "precision")[0]
        return Gaussian.from_natural(tau * s1, tau * s0)
    return gaussian._mean_vmp(sample, precision, reduce=reduce, weights=weights)


@SWITCH_GAUSSIAN.operator("vmp", "precision", fresh=("selector",), no_init=True,
                          method="VMP, a fused Switch: Σ_n r_nk E[(x_n − μ_k)²] from the "
                                 "same data sums")
def _precision_vmp(sample, selector, mean, index, *, reduce: Reduce | None = None
                   ) -> Gamma:
    """(½ Σ_n r_nk, −½ Σ_n r_nk E[(x_n − μ_k)²]), from the same sums."""
    _known(sample)
    weights = _responsibilities(selector)
    sums = _component_sums(sample, weights, reduce, mean, Gaussian)
    if sums is not None:  # Σ r E[(x − μ)²] = Σ r x² − 2 E μ Σ r x + E μ² Σ r
        # (E μ and Var μ as the logits read them, remembered with this message)
        em, vm = gaussian._row_moments(mean, "mean")
        s0, square_diff = gaussian.square_diff_from_sums(sums, em, vm)
        return Gamma.from_natural(0.5 * s0, -0.5 * square_diff)
    return gaussian._precision_vmp(sample, mean, reduce=reduce, weights=weights)


@SWITCH_GAUSSIAN.evidence_operator("vmp")
def _average_log_factor(sample, selector, mean, precision, index) -> np.ndarray:
    """Σ_k r_nk E[log N(x_n; μ_k, 1/τ_k)] per datum (a term of responsibility 0 adds 0)."""
    q = _responsibilities(selector)
    ell = np.asarray(_case_log_likelihood(sample, mean, precision))
    if traced():  # (summed by the bound from the data sums the responsibilities'
        # normalisation accumulated, Σ_jk C_jk (Sᵀ q)_jk, no (N, K) pass: jax_bound)
        from factorflow.runtime.backends.jax_bound import row_term
        return row_term(q, ell)
    fast = np.einsum("...k,...k->...", *np.broadcast_arrays(q, ell))
    if np.isfinite(fast).all():
        return fast
    with np.errstate(invalid="ignore"):
        return np.sum(np.where(q == 0, 0.0, q * ell), axis=-1)

