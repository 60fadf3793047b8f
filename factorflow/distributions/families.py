"""The exponential families factorflow passes as messages and reports as posteriors.

Each class documents its sufficient statistics T(x) and natural parameters; all are
batched (see ``base.Distribution``).  Constructors take the parameters people use
(mean and variance, shape and rate, ...); ``from_natural`` takes natural parameters.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from factorflow.distributions.base import (
    COMPACT_ABOVE,
    Distribution,
    _sub_naturals,
    any_true,
    as_index,
    exp_flushed,
    format_values,
    log_normalize,
    memo_of,
    recall,
    remember,
    row_max,
    sample_shape,
    traced,
    zeros_view,
)
from factorflow.errors import ModelError
from factorflow.lazy import special, stats

LOG_2PI = float(np.log(2 * np.pi))


def _entropy_of(a_norm: Any, eta: tuple[np.ndarray, np.ndarray],
                stats_: tuple[Any, Any]) -> Any:
    """A(η) − ⟨η, E[T]⟩ for two scalar natural parameters given A and E[T]: the
    arithmetic of ``Distribution.entropy`` (``_inner``: 0.0 + η₀E₀, then + η₁E₁), in the
    same order, so the same numbers, without its generic loop; None where a product is
    NaN (0 · inf: ``_inner`` mends those, the caller takes the general path)."""
    with np.errstate(invalid="ignore"):
        t0 = np.multiply(eta[0], stats_[0])
        t1 = np.multiply(eta[1], stats_[1])
    if np.isnan(t0).any() or np.isnan(t1).any():
        return None
    total = 0.0 + t0
    total = total + t1
    return a_norm - np.asarray(total)


def _scalar_of(a: Any) -> float:
    """The value of a 0-d NumPy array of floats as a Python float (the same IEEE double:
    its arithmetic rounds as NumPy's), NaN for anything else (an array with axes, a
    traced value), so that a comparison with it is False: a scalar posterior's
    moments and checks take Python's arithmetic, about 0.1 µs an operation, where
    0-d arrays go through the ufunc machinery at 1 to 2 µs."""
    if type(a) is np.ndarray and not a.ndim and a.dtype.kind == "f" and not traced():
        return float(a)
    return _NAN


_NAN = float("nan")


class Gaussian(Distribution):
    """N(x; mean, variance).  T(x) = (x, -x²/2); eta = (mean·precision, precision)."""

    natural_names = ("mean_times_precision", "precision")

    def __init__(self, mean: Any = 0.0, variance: Any = None, *, precision: Any = None):
        if (variance is None) == (precision is None):
            raise TypeError("Gaussian takes exactly one of variance= or precision=")
        prec = 1.0 / np.asarray(variance, float) if precision is None else precision
        # one shape for both parameters, so that indexing and ``take`` see one batch
        # (read-only views: np.broadcast_arrays's are writable-with-a-warning, and prec
        # is kept as a natural parameter, whose later views then warned)
        mean, prec = np.asarray(mean, float), np.asarray(prec, float)
        shape = np.broadcast_shapes(mean.shape, prec.shape)
        if prec.shape != shape:
            prec = np.broadcast_to(prec, shape)
        super().__init__(mean * prec, prec)

    @property
    def mean_times_precision(self) -> np.ndarray:
        """The first natural parameter, mean / variance.

        >>> float(ff.distributions.Gaussian(3.0, variance=2.0).mean_times_precision)
        1.5
        """
        return self.eta[0]

    @property
    def precision(self) -> np.ndarray:
        """1 / variance (the second natural parameter; 0 for a uniform message).

        >>> float(ff.distributions.Gaussian(3.0, variance=4.0).precision)
        0.25
        """
        return self.eta[1]

    @property
    def mean(self) -> np.ndarray:
        h, p = _scalar_of(self.eta[0]), _scalar_of(self.eta[1])
        if p != 0 and p == p and h == h:  # (a scalar posterior: the same division in
            return np.asarray(h / p)      # Python floats, not 0-d arrays)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.eta[1] == 0, 0.0, self.eta[0] / self.eta[1])

    @property
    def variance(self) -> np.ndarray:
        p = _scalar_of(self.eta[1])
        if p != 0 and p == p:
            return np.float64(1.0 / p)
        with np.errstate(divide="ignore"):
            return 1.0 / self.eta[1]

    def __mul__(self, other: Any) -> Any:
        """The product; a large one (``COMPACT_ABOVE`` elements or more) of two Gaussians
        remembers its two factors (weakly: their arrays are not kept alive), so that
        dividing it by either one gives back the other exactly (``__truediv__``)."""
        out = super().__mul__(other)
        if (out is not self and out is not other and type(other) is Gaussian
                and type(self) is Gaussian and type(out) is Gaussian and not traced()):
            h, p = out.eta
            if type(p) is np.ndarray and p.size >= COMPACT_ABOVE:
                try:
                    refs = tuple(weakref.ref(e) for e in (h, *self.eta, *other.eta))
                except TypeError:  # (not weakly referable: nothing remembered)
                    return out
                remember("gaussian_factors", p, refs)
        return out

    def _factor_of(self, other: Gaussian) -> Gaussian | None:
        """The other factor where ``self`` is a product ``__mul__`` remembered and
        ``other`` (its very arrays) one of its two factors, both alive and of the product's
        shape; else None."""
        h, p = self.eta
        refs = recall("gaussian_factors", p)
        if refs is None or refs[0]() is not h:
            return None
        ah, ap, bh, bp = (r() for r in refs[1:])
        oh, op = other.eta
        for (xh, xp), (yh, yp) in (((ah, ap), (bh, bp)), ((bh, bp), (ah, ap))):
            if oh is xh and op is xp and yh is not None and yp is not None \
                    and np.shape(yh) == np.shape(yp) == p.shape:
                return self.from_natural(yh, yp)
        return None

    def __truediv__(self, other: Any) -> Any:
        """The quotient; where its precision is exactly 0 (equal precisions: the divisor
        is all the information the dividend has about x) so is its h.  A nonzero h there
        is rounding left by a tiny message absorbed into a product (p + 1e-18 = p, h +
        1e-17 kept) and would make an improper message of infinite normaliser: the EP
        evidence of an otherwise exact model was NaN (fuzz, issue 10).

        A product of two messages divided by one of them is the other one, exactly (no
        pass over the batch, and no rounding of the sum to take back): EP's message out
        of a variable with one use besides its definition is the message in on the other
        edge (``marginal / use = def``), twice a sweep for each such variable."""
        fast = type(other) is Gaussian and type(self) is Gaussian and not traced()
        if fast:
            factor = self._factor_of(other)
            if factor is not None:
                return factor
            (h1, p1), (h2, p2) = self.eta, other.eta
            fast = (type(p1) is np.ndarray and type(p2) is np.ndarray and p1.size > 0
                    and p1.shape == p2.shape)
        if fast:
            # the same values as ``Distribution.__truediv__`` and the mending below, in
            # as few passes as they can be told: where every precision is positive (one
            # reduction: no NaN, inf − inf or 0 in p), the two differences and the NaN
            # test of h (one more reduction)
            with np.errstate(invalid="ignore", over="ignore"):
                p = p1 - p2
            low = p.min()
            h = _sub_naturals(h1, h2)
            if low > 0:
                return self.from_natural(h, p)
            if np.isnan(low):  # an inf − inf in p, perhaps: mended as there
                p = _sub_naturals(p1, p2)
            out = self.from_natural(h, p)
        else:
            out = super().__truediv__(other)
            if out is NotImplemented:
                return out
            h, p = out.eta
        flat = np.asarray(p) == 0
        if not any_true(flat):
            return out
        return self.from_natural(np.where(flat, 0.0, h), p)

    def log_normalizer(self) -> np.ndarray:
        """A(η) = h²/2p − ½ log p + ½ log 2π; for an improper message (p < 0, as EP's
        messages may be) the real part of its analytic continuation, log |p|, so that
        evidence terms built from such messages still cancel exactly.

        >>> a = ff.distributions.Gaussian(1.0, variance=2.0).log_normalizer()
        >>> bool(np.isclose(a, 1.0 / 4 + 0.5 * np.log(2.0) + 0.5 * np.log(2 * np.pi)))
        True
        """
        h, p = self.eta
        return 0.5 * h * h / p - 0.5 * np.log(np.abs(p)) + 0.5 * LOG_2PI

    def expected_stats(self) -> tuple[np.ndarray, ...]:
        m = self.mean
        return m, -0.5 * (self.variance + m * m)

    def entropy(self) -> np.ndarray:
        """``Distribution.entropy``, the same numbers, in fewer calls (each posterior's
        entropy is a term of the VMP bound, computed after every sweep with the bound).
        N(m, v) has ½ log(2πe v):

        >>> h = ff.distributions.Gaussian(1.0, variance=2.0).entropy()
        >>> bool(np.isclose(h, 0.5 * np.log(2 * np.pi * np.e * 2.0)))
        True
        """
        h, p = self.eta
        hf, pf = _scalar_of(h), _scalar_of(p)
        if pf != 0 and pf == pf and hf == hf:  # a scalar: the same steps on its floats
            m = hf / pf
            a_norm = 0.5 * hf * hf / pf - 0.5 * np.log(abs(pf)) + 0.5 * LOG_2PI
            out = _entropy_of(a_norm, (hf, pf), (m, -0.5 * (1.0 / pf + m * m)))
            if out is not None:
                return out
        if traced() or type(h) is not np.ndarray or type(p) is not np.ndarray:
            return super().entropy()
        # (``expected_stats``: ``mean`` and ``variance`` as those properties compute them
        # on arrays, under one errstate)
        with np.errstate(divide="ignore", invalid="ignore"):
            m, v = np.where(p == 0, 0.0, h / p), 1.0 / p
        out = _entropy_of(self.log_normalizer(), self.eta, (m, -0.5 * (v + m * m)))
        return super().entropy() if out is None else out

    def sufficient_stats(self, x: Any) -> tuple[np.ndarray, ...]:
        x = np.asarray(x, float)
        return x, -0.5 * x * x

    def is_proper(self) -> np.ndarray:
        return self.eta[1] > 0

    def all_proper(self) -> bool:
        # one fused test (two reductions, no temporaries): every precision > 0 and no
        # NaN mean × precision (min propagates NaN); else the elementwise verdict.  A
        # scalar posterior: the same test on its two floats
        h, p = self.eta
        if (not (type(p) is np.ndarray and p.ndim)  # (an array: the reductions below)
                and _scalar_of(p) > 0 and _scalar_of(h) == _scalar_of(h)):
            return True
        if type(h) is np.ndarray and type(p) is np.ndarray and h.size and p.size and (
                p.min() > 0 and not np.isnan(h.min())):
            return True
        return super().all_proper()

    def _draw(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        return self.mean + np.sqrt(self.variance) * rng.standard_normal(shape)

    def to_scipy(self) -> Any:
        return stats.norm(self.mean, np.sqrt(self.variance))

    def describe(self) -> dict[str, np.ndarray]:
        return {"mean": self.mean, "variance": self.variance}


class Gamma(Distribution):
    """Gamma(x; shape, rate).  T(x) = (log x, x); eta = (shape - 1, -rate)."""

    natural_names = ("shape_minus_one", "minus_rate")

    def __init__(self, shape: Any = 1.0, rate: Any = None, *, scale: Any = None):
        if (rate is None) == (scale is None):
            raise TypeError("Gamma takes exactly one of rate= or scale=")
        r = 1.0 / np.asarray(scale, float) if rate is None else np.asarray(rate, float)
        shape, r = np.broadcast_arrays(np.asarray(shape, float), r)  # one batch shape
        super().__init__(shape - 1.0, -r)

    @classmethod
    def _uniform_naturals(cls, batch_shape: tuple[int, ...], *event: int) -> tuple:
        return zeros_view(batch_shape), zeros_view(batch_shape)

    @property
    def shape_param(self) -> np.ndarray:
        """The shape a (``shape`` is the batch shape, as for every distribution).

        >>> float(ff.distributions.Gamma(2.5, rate=1.0).shape_param)
        2.5
        """
        return self.eta[0] + 1.0

    @property
    def rate(self) -> np.ndarray:
        """The rate b (1 / scale).

        >>> float(ff.distributions.Gamma(2.0, scale=0.25).rate)
        4.0
        """
        return -self.eta[1]

    @property
    def mean(self) -> np.ndarray:
        a, rate = _scalar_of(self.eta[0]) + 1.0, -_scalar_of(self.eta[1])
        if rate != 0 and rate == rate and a == a:  # (a scalar posterior: the same
            return np.float64(a / rate)               # arithmetic in Python floats)
        return self.shape_param / self.rate

    @property
    def variance(self) -> np.ndarray:
        return self.shape_param / self.rate**2

    def mean_log(self) -> np.ndarray:
        """E[log x] = ψ(a) − log b (what VMP's messages read).  For Gamma(1, 1), −γ:

        >>> bool(np.isclose(ff.distributions.Gamma(1.0, rate=1.0).mean_log(), -np.euler_gamma))
        True
        """
        a, rate = _scalar_of(self.eta[0]) + 1.0, -_scalar_of(self.eta[1])
        if a == a and rate == rate:  # (a scalar posterior: its floats, no 0-d arrays)
            return special.digamma(a) - np.log(rate)
        return special.digamma(self.shape_param) - np.log(self.rate)

    def log_normalizer(self) -> np.ndarray:
        """A(η) = log Γ(a) − a log b; for an improper message (b < 0 or a < 0, as EP's
        messages may be) log |Γ(a)| − a log |b|, so that evidence terms built from such
        messages still cancel exactly (as Gaussian's).

        >>> a = ff.distributions.Gamma(3.0, rate=2.0).log_normalizer()
        >>> bool(np.isclose(a, np.log(2.0) - 3 * np.log(2.0)))      # log Γ(3) − 3 log 2
        True
        """
        a = self.shape_param
        return special.gammaln(a) - a * np.log(np.abs(self.rate))

    def expected_stats(self) -> tuple[np.ndarray, ...]:
        return self.mean_log(), self.mean

    def entropy(self) -> np.ndarray:
        """``Distribution.entropy``, the same numbers, in fewer calls: the shape a and the
        rate b made once for A(η) = log Γ(a) − a log |b| and E[T] = (ψ(a) − log b, a / b)
        (each posterior's entropy is a term of the VMP bound).  Gamma(1, 1), the
        exponential of rate 1, has entropy 1:

        >>> float(ff.distributions.Gamma(1.0, rate=1.0).entropy())
        1.0
        """
        a1, r1 = self.eta
        a1f, r1f = _scalar_of(a1), _scalar_of(r1)
        af, bf = a1f + 1.0, -r1f
        if bf != 0 and bf == bf and af == af:  # a scalar: the same steps on its floats
            a_norm = special.gammaln(af) - af * np.log(abs(bf))
            out = _entropy_of(a_norm, (a1f, r1f),
                              (special.digamma(af) - np.log(bf), af / bf))
            if out is not None:
                return out
        if traced() or type(a1) is not np.ndarray or type(r1) is not np.ndarray:
            return super().entropy()
        a, b = a1 + 1.0, -r1  # (``shape_param``, ``rate``)
        a_norm = special.gammaln(a) - a * np.log(np.abs(b))
        out = _entropy_of(a_norm, self.eta, (special.digamma(a) - np.log(b), a / b))
        return super().entropy() if out is None else out

    def sufficient_stats(self, x: Any) -> tuple[np.ndarray, ...]:
        x = np.asarray(x, float)
        return np.log(x), x

    def is_proper(self) -> np.ndarray:
        return (self.shape_param > 0) & (self.rate > 0)

    def all_proper(self) -> bool:
        # one fused test: shape − 1 > −1 everywhere (exactly shape > 0: x + 1 > 0 iff
        # x > −1 in floating point) and −rate < 0, NaN failing both; else elementwise
        a, r = self.eta
        if (not (type(a) is np.ndarray and a.ndim)  # (an array: the reductions below)
                and _scalar_of(a) > -1.0 and _scalar_of(r) < 0):  # (a scalar's floats)
            return True
        if type(a) is np.ndarray and type(r) is np.ndarray and a.size and r.size and (
                a.min() > -1.0 and r.max() < 0):
            return True
        return super().all_proper()

    def _draw(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        return rng.gamma(np.broadcast_to(self.shape_param, shape)) / self.rate

    def to_scipy(self) -> Any:
        return stats.gamma(self.shape_param, scale=1.0 / self.rate)

    def describe(self) -> dict[str, np.ndarray]:
        return {"shape": self.shape_param, "rate": self.rate}


class Beta(Distribution):
    """Beta(x; alpha, beta).  T(x) = (log x, log(1-x)); eta = (alpha - 1, beta - 1)."""

    natural_names = ("alpha_minus_one", "beta_minus_one")

    def __init__(self, alpha: Any = 1.0, beta: Any = 1.0):
        alpha, beta = np.broadcast_arrays(np.asarray(alpha, float), np.asarray(beta, float))
        super().__init__(alpha - 1.0, beta - 1.0)

    @property
    def alpha(self) -> np.ndarray:
        """The first shape parameter α (the prior count of ones, plus one).

        >>> float(ff.distributions.Beta(2.0, 5.0).alpha)
        2.0
        """
        return self.eta[0] + 1.0

    @property
    def beta(self) -> np.ndarray:
        """The second shape parameter β.

        >>> float(ff.distributions.Beta(2.0, 5.0).beta)
        5.0
        """
        return self.eta[1] + 1.0

    @property
    def mean(self) -> np.ndarray:
        return self.alpha / (self.alpha + self.beta)

    @property
    def variance(self) -> np.ndarray:
        a, b = self.alpha, self.beta
        return a * b / ((a + b) ** 2 * (a + b + 1))

    def log_normalizer(self) -> np.ndarray:
        return special.betaln(self.alpha, self.beta)

    def expected_stats(self) -> tuple[np.ndarray, ...]:
        a, b = self.alpha, self.beta
        total = special.digamma(a + b)
        return special.digamma(a) - total, special.digamma(b) - total

    def sufficient_stats(self, x: Any) -> tuple[np.ndarray, ...]:
        x = np.asarray(x, float)
        return np.log(x), np.log1p(-x)

    def is_proper(self) -> np.ndarray:
        return (self.alpha > 0) & (self.beta > 0)

    def _draw(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        return rng.beta(np.broadcast_to(self.alpha, shape), np.broadcast_to(self.beta, shape))

    def to_scipy(self) -> Any:
        return stats.beta(self.alpha, self.beta)

    def describe(self) -> dict[str, np.ndarray]:
        return {"alpha": self.alpha, "beta": self.beta}


class Bernoulli(Distribution):
    """Bernoulli(x; p).  T(x) = x in {0, 1}; eta = log(p / (1 - p)), ±inf for certainty."""

    NO_VALUE_HINT = ("Every value has probability 0 here: the constraints and observations "
                     "around it contradict each other (the evidence is 0), or, in a loopy "
                     "model, EP's messages ruled every value out; check the constraints "
                     "(ff.constrain_true, observed values) that meet at this variable.")

    natural_names = ("log_odds",)

    def __init__(self, p: Any = 0.5):
        p = np.asarray(p, float)
        with np.errstate(divide="ignore"):
            super().__init__(np.log(p) - np.log1p(-p))

    @property
    def log_odds(self) -> np.ndarray:
        """log(p / (1 − p)), the natural parameter (±inf for a certain value).

        >>> ff.distributions.Bernoulli([0.5, 1.0]).log_odds
        array([ 0., inf])
        """
        return self.eta[0]

    @property
    def p(self) -> np.ndarray:
        """P(x = True), which is also the mean.

        >>> float(ff.distributions.Bernoulli.from_natural(np.log(3.0)).p)    # odds 3:1
        0.75
        """
        return special.expit(self.eta[0])

    mean = p

    @property
    def variance(self) -> np.ndarray:
        p = self.p
        return p * (1 - p)

    def log_normalizer(self) -> np.ndarray:
        return np.logaddexp(0.0, self.eta[0])

    def expected_stats(self) -> tuple[np.ndarray, ...]:
        return (self.p,)

    def sufficient_stats(self, x: Any) -> tuple[np.ndarray, ...]:
        return (np.asarray(x, float),)

    def is_proper(self) -> np.ndarray:
        return ~np.isnan(self.eta[0])

    def all_proper(self) -> bool:
        # known when the log-odds are a normalisation that had no NaN (a gate's cases:
        # base._remembered); else one reduction, no temporary: the minimum is NaN iff
        # some log-odds is
        if recall("nan_free", self.eta[0]) is not None:
            return True
        return not np.isnan(np.min(self.eta[0])) if self.eta[0].size else True

    def log_prob(self, x: Any) -> np.ndarray:
        x = np.asarray(x, bool)
        return np.where(x, special.log_expit(self.eta[0]), special.log_expit(-self.eta[0]))

    def entropy(self) -> np.ndarray:
        p = self.p
        return -(special.xlogy(p, p) + special.xlogy(1 - p, 1 - p))

    def _draw(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        return rng.random(shape) < self.p

    def to_scipy(self) -> Any:
        return stats.bernoulli(self.p)

    def describe(self) -> dict[str, np.ndarray]:
        return {"p": self.p}


class Discrete(Distribution):
    """Categorical over {0..K-1}.  T(x) = one-hot(x); eta = log-probabilities (unnormalised)."""

    NO_VALUE_HINT = ("Every value has probability 0 here: the constraints and observations "
                     "around it contradict each other (the evidence is 0), or, in a loopy "
                     "model, EP's messages ruled every value out; check the constraints "
                     "(ff.constrain_true, observed values) that meet at this variable.")

    natural_names = ("log_probs",)
    event_ndim = 1

    def __init__(self, probs: Any):
        with np.errstate(divide="ignore"):
            super().__init__(np.log(np.asarray(probs, float)))

    @classmethod
    def uniform(cls, batch_shape: Any = (), *event: int) -> Discrete:
        if not event:
            raise TypeError("Discrete.uniform needs the number of categories")
        return cls.from_natural(zeros_view(tuple(batch_shape) + (event[0],)))

    @property
    def size(self) -> int:
        """K, the number of categories (values 0 … K − 1).

        >>> ff.distributions.Discrete([0.2, 0.3, 0.5]).size
        3
        """
        return self.eta[0].shape[-1]

    @property
    def probs(self) -> np.ndarray:
        """exp(η) normalised over the categories (as SciPy's ``softmax``; computed once
        per natural-parameter array, read-only).

        >>> ff.distributions.Discrete.from_natural(np.log([1.0, 3.0])).probs
        array([0.25, 0.75])
        """
        return memo_of("exp", log_normalize(self.eta[0]), exp_flushed)

    @property
    def mean(self) -> np.ndarray:
        return np.sum(self.probs * np.arange(self.size), axis=-1)

    @property
    def variance(self) -> np.ndarray:
        k = np.arange(self.size)
        return np.sum(self.probs * k * k, axis=-1) - self.mean**2

    def log_normalizer(self) -> np.ndarray:
        return special.logsumexp(self.eta[0], axis=-1)

    def expected_stats(self) -> tuple[np.ndarray, ...]:
        return (self.probs,)

    def sufficient_stats(self, x: Any) -> tuple[np.ndarray, ...]:
        x = np.asarray(x, int)
        return (np.asarray(x[..., None] == np.arange(self.size), float),)

    def log_base_measure(self, x: Any) -> np.ndarray:
        return np.zeros(np.shape(x))  # a category index has no event axis

    def is_proper(self) -> np.ndarray:
        return np.any(np.isfinite(self.eta[0]), axis=-1) & ~np.any(np.isnan(self.eta[0]),
                                                                   axis=-1)

    def all_proper(self) -> bool:
        # one reduction: a finite maximum in every row means a finite entry and no NaN
        # (the maximum propagates NaN); otherwise the elementwise verdict.  A large
        # posterior is normalised here instead (the next messages read its normalised
        # logs): the normalisation finds the row maxima block by block while they are in
        # cache and records whether all were finite (base._remembered's "nan_free"),
        # where a separate row maximum costs a pass over the (N, K) array
        eta = self.eta[0]
        if (eta.size >= COMPACT_ABOVE and not traced()
                and recall("nan_free", log_normalize(eta)) is not None):
            return True
        if eta.size and np.isfinite(row_max(eta)).all():  # (the array's own reduction)
            return True
        return super().all_proper()

    def entropy(self) -> np.ndarray:
        p = self.probs
        if not traced():  # −Σ p log p from the remembered log-probabilities: one pass
            with np.errstate(invalid="ignore"):
                fast = -np.einsum("...k,...k->...", p, log_normalize(self.eta[0]))
            if not np.isnan(fast).any():  # (0 · −inf: the elementwise way below)
                return fast
            return -np.sum(special.xlogy(p, p), axis=-1)
        # traced: the same from the normalised logs (no second logarithm; 0 where p is),
        # as a term the bound sums with the others over p in one pass (``row_term``);
        # the logs read as x − log Σ exp x where the normalisation made that number (the
        # logits as the sweep wrote them and one number a row: no (N, K) array of them)
        from factorflow.distributions.base import _recall_traced  # (the copy's)
        from factorflow.runtime.backends.jax_bound import row_term
        x = self.eta[0]
        logs = log_normalize(x)
        lse = _recall_traced("logsumexp", logs)
        return row_term(p, logs if lse is None else (lambda: x - lse), -1.0)

    def _draw(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        cdf = np.cumsum(self.probs, axis=-1)   # a category index: no event axis
        u = rng.random(shape + (1,))
        return np.minimum(np.sum(u > cdf, axis=-1), self.size - 1)

    def to_scipy(self) -> Any:
        if self.batch_shape:
            raise ModelError(f"to_scipy() of a batch of Discretes (shape {self.batch_shape}):"
                             " SciPy has no batched categorical; convert one element, "
                             "posterior[i].to_scipy().")
        return stats.rv_discrete(values=(np.arange(self.size), self.probs))

    def describe(self) -> dict[str, np.ndarray]:
        return {"probs": self.probs}


class Dirichlet(Distribution):
    """Dirichlet(x; alpha) on the simplex.  T(x) = log x; eta = alpha - 1."""

    natural_names = ("alpha_minus_one",)
    event_ndim = 1
    uniform_is_proper = True

    def __init__(self, alpha: Any):
        super().__init__(np.asarray(alpha, float) - 1.0)

    @classmethod
    def uniform(cls, batch_shape: Any = (), *event: int) -> Dirichlet:
        if not event:
            raise TypeError("Dirichlet.uniform needs the number of categories")
        return cls.from_natural(zeros_view(tuple(batch_shape) + (event[0],)))

    @property
    def alpha(self) -> np.ndarray:
        """The concentration vector α (last axis: the K categories).

        >>> ff.distributions.Dirichlet([1.0, 2.0, 3.0]).alpha
        array([1., 2., 3.])
        """
        return self.eta[0] + 1.0

    @property
    def mean(self) -> np.ndarray:
        a = self.alpha
        return a / np.sum(a, axis=-1, keepdims=True)

    @property
    def variance(self) -> np.ndarray:
        a = self.alpha
        a0 = np.sum(a, axis=-1, keepdims=True)
        return a * (a0 - a) / (a0**2 * (a0 + 1))

    def mean_log(self) -> np.ndarray:
        """E[log x_k] = ψ(α_k) − ψ(Σ α), per category, remembered while the natural
        parameters live (read-only).  For Dirichlet(1, 1), ψ(1) − ψ(2) = −1:

        >>> ff.distributions.Dirichlet([1.0, 1.0]).mean_log()
        array([-1., -1.])
        """
        def compute(eta: np.ndarray) -> np.ndarray:
            a = eta + 1.0  # (the array's own sum: the reduction np.sum calls)
            total = (a.sum(axis=-1, keepdims=True) if type(a) is np.ndarray
                     else np.sum(a, axis=-1, keepdims=True))
            return special.digamma(a) - special.digamma(total)
        return memo_of("dirichlet_mean_log", self.eta[0], compute)

    def take(self, indices: np.ndarray, axis: int = 0) -> Dirichlet:
        """Gather batch elements; when the gather makes more elements than it reads (LDA's
        θ[doc] over the tokens), E[log p] is computed on the rows read and gathered with
        them (the same numbers, bit for bit).

        >>> ff.distributions.Dirichlet([[1.0, 1.0], [2.0, 6.0]]).take([1, 1, 0]).mean
        array([[0.25, 0.75],
               [0.25, 0.75],
               [0.5 , 0.5 ]])
        """
        out = super().take(indices, axis)
        if out.eta[0].size > self.eta[0].size:
            remember("dirichlet_mean_log", out.eta[0],
                     np.take(self.mean_log(), as_index(indices), axis=axis))
        return out

    def log_normalizer(self) -> np.ndarray:
        a = self.alpha
        return np.sum(special.gammaln(a), axis=-1) - special.gammaln(np.sum(a, axis=-1))

    def expected_stats(self) -> tuple[np.ndarray, ...]:
        return (self.mean_log(),)

    def entropy(self) -> np.ndarray:
        """``Distribution.entropy``, the same numbers, in fewer calls (the posterior's
        entropy is a term of the VMP bound, after every sweep with the bound): A(η) =
        Σ log Γ(α) − log Γ(Σ α) and ⟨η, E[log x]⟩ with the arrays' own sums (the
        reductions ``np.sum`` calls), in the same order.  Dirichlet(1, 1) is uniform on
        the segment, of entropy log B(1, 1) = 0:

        >>> float(ff.distributions.Dirichlet([1.0, 1.0]).entropy())
        0.0
        """
        eta = self.eta[0]
        if traced() or type(eta) is not np.ndarray:
            return super().entropy()
        a = eta + 1.0  # (``alpha``)
        a_norm = special.gammaln(a).sum(axis=-1) - special.gammaln(a.sum(axis=-1))
        with np.errstate(invalid="ignore"):
            term = np.multiply(eta, self.mean_log())
        if np.isnan(term).any():  # (0 · inf: ``_inner`` mends those)
            return super().entropy()
        return a_norm - np.asarray(0.0 + term.sum(axis=-1))

    def sufficient_stats(self, x: Any) -> tuple[np.ndarray, ...]:
        return (np.log(np.asarray(x, float)),)

    def is_proper(self) -> np.ndarray:
        return np.all(self.alpha > 0, axis=-1)

    def all_proper(self) -> bool:
        # one reduction: α − 1 > −1 everywhere (exactly α > 0), NaN failing it
        a = self.eta[0]
        if type(a) is np.ndarray and a.size and a.min() > -1.0:
            return True
        return super().all_proper()

    def _draw(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        shape = shape + (self.alpha.shape[-1],)
        g = rng.gamma(np.broadcast_to(self.alpha, shape))
        return g / np.sum(g, axis=-1, keepdims=True)

    def to_scipy(self) -> Any:
        if self.batch_shape:
            raise ModelError(f"to_scipy() of a batch of Dirichlets (shape {self.batch_shape}):"
                             " SciPy has no batched Dirichlet; convert one element, "
                             "posterior[i].to_scipy().")
        return stats.dirichlet(self.alpha)

    def describe(self) -> dict[str, np.ndarray]:
        return {"alpha": self.alpha}


class Poisson(Distribution):
    """Poisson(k; rate).  T(k) = k with base measure 1/k!; eta = log rate."""

    natural_names = ("log_rate",)

    def __init__(self, rate: Any = 1.0):
        with np.errstate(divide="ignore"):
            super().__init__(np.log(np.asarray(rate, float)))

    @property
    def rate(self) -> np.ndarray:
        """The rate λ, which is also the mean and the variance.

        >>> float(ff.distributions.Poisson(2.5).rate)
        2.5
        """
        return np.exp(self.eta[0])

    mean = rate
    variance = rate

    def log_normalizer(self) -> np.ndarray:
        return self.rate

    def log_base_measure(self, x: Any) -> np.ndarray:
        return -special.gammaln(np.asarray(x, float) + 1)

    def expected_stats(self) -> tuple[np.ndarray, ...]:
        return (self.rate,)

    def sufficient_stats(self, x: Any) -> tuple[np.ndarray, ...]:
        return (np.asarray(x, float),)

    def is_proper(self) -> np.ndarray:
        return np.isfinite(self.eta[0])

    def entropy(self) -> np.ndarray:
        # no closed form: sum -p log p over the support up to where the tail is below
        # double precision (rate + 12·sqrt(rate) + 40 terms), one array operation
        rate = np.asarray(self.rate, dtype=float)
        top = float(np.max(rate)) if rate.size else 0.0
        k = np.arange(int(top + 12.0 * np.sqrt(top) + 40.0))
        with np.errstate(divide="ignore", invalid="ignore"):
            logp = (k * np.log(rate)[..., None] - rate[..., None]
                    - special.gammaln(k + 1.0))
            terms = np.where(np.isfinite(logp), np.exp(logp) * logp, 0.0)
        return -np.sum(terms, axis=-1)

    def _draw(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        return rng.poisson(np.broadcast_to(self.rate, shape))

    def to_scipy(self) -> Any:
        return stats.poisson(self.rate)

    def describe(self) -> dict[str, np.ndarray]:
        return {"rate": self.rate}


class Binomial(Distribution):
    """Binomial(k; n, p), n fixed.  T(k) = k with base measure C(n, k); eta = logit p."""

    natural_names = ("log_odds",)
    __slots__ = ("trials",)

    def __init__(self, trials: Any, p: Any = 0.5):
        p = np.asarray(p, float)
        with np.errstate(divide="ignore"):
            super().__init__(np.log(p) - np.log1p(-p))
        object.__setattr__(self, "trials", np.asarray(trials, float))

    @classmethod
    def from_natural(cls, *eta: Any, trials: Any = None) -> Binomial:
        """The Binomial with log-odds ``eta`` and ``trials`` trials.

        >>> ff.distributions.Binomial.from_natural(0.0, trials=10)
        Binomial(trials=10.0, p=0.5)
        """
        obj = super().from_natural(*eta)
        object.__setattr__(obj, "trials", np.asarray(trials, float))
        return obj

    # The trial counts are a per-element parameter: every operation that builds a new
    # batch (indexing, products, reductions) carries them along with the naturals.
    def _with_trials(self, out: Any, trials: Any) -> Any:
        if out is not NotImplemented:
            object.__setattr__(out, "trials", np.asarray(trials, float))
        return out

    def _batch_trials(self) -> np.ndarray:
        return np.broadcast_to(self.trials, self.batch_shape)

    def _map(self, fn):
        return self._with_trials(super()._map(fn), fn(self._batch_trials(), 0))

    def __mul__(self, other: Any) -> Any:
        out = super().__mul__(other)
        return self._with_trials(out, np.broadcast_to(self.trials, getattr(out, "batch_shape",
                                                                            ())))

    def __truediv__(self, other: Any) -> Any:
        out = super().__truediv__(other)
        return self._with_trials(out, np.broadcast_to(self.trials, getattr(out, "batch_shape",
                                                                            ())))

    def __pow__(self, power: float) -> Binomial:
        return self._with_trials(super().__pow__(power), self.trials)

    def _prod_naturals(self, axis: int | tuple[int, ...]) -> Binomial:
        return self._with_trials(super()._prod_naturals(axis),
                                 np.max(self._batch_trials(), axis=axis))

    def scatter_prod(self, indices: np.ndarray, size: int) -> Binomial:
        trials = np.zeros((size,) + self.batch_shape[1:])
        np.maximum.at(trials, indices, self._batch_trials())
        return self._with_trials(super().scatter_prod(indices, size), trials)

    @property
    def p(self) -> np.ndarray:
        """The success probability of each trial.

        >>> round(float(ff.distributions.Binomial(10, 0.3).p), 12)
        0.3
        """
        return special.expit(self.eta[0])

    @property
    def mean(self) -> np.ndarray:
        return self.trials * self.p

    @property
    def variance(self) -> np.ndarray:
        return self.trials * self.p * (1 - self.p)

    def log_normalizer(self) -> np.ndarray:
        return self.trials * np.logaddexp(0.0, self.eta[0])

    def log_base_measure(self, x: Any) -> np.ndarray:
        k = np.asarray(x, float)
        n = self.trials
        return special.gammaln(n + 1) - special.gammaln(k + 1) - special.gammaln(n - k + 1)

    def expected_stats(self) -> tuple[np.ndarray, ...]:
        return (self.mean,)

    def sufficient_stats(self, x: Any) -> tuple[np.ndarray, ...]:
        return (np.asarray(x, float),)

    def is_proper(self) -> np.ndarray:
        return ~np.isnan(self.eta[0])

    def entropy(self) -> np.ndarray:
        return self.to_scipy().entropy()

    def _draw(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        return rng.binomial(np.broadcast_to(self.trials, shape).astype(int),
                            np.broadcast_to(self.p, shape))

    def to_scipy(self) -> Any:
        return stats.binom(self.trials, self.p)

    def describe(self) -> dict[str, np.ndarray]:
        return {"trials": self.trials, "p": self.p}


class PointMass:
    """A batch of known values: the posterior of an observed variable.

    Its moments are the values themselves (variance zero), so message operators can treat
    observed arguments and random ones alike through ``factorflow.distributions.moments``.
    A Dask array is held as it is (a run's data left on its cluster: read when used).
    """

    __slots__ = ("value",)

    def __init__(self, value: Any):
        object.__setattr__(self, "value", value if hasattr(value, "__dask_graph__")
                           else np.asarray(value))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("PointMass is immutable")

    def __getstate__(self) -> dict[str, Any]:
        return {"value": self.value}

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "value", state["value"])

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """The shape of the values.

        >>> ff.distributions.PointMass([1.0, 2.0]).batch_shape
        (2,)
        """
        return self.value.shape

    @property
    def mean(self) -> np.ndarray:
        """The values themselves.

        >>> ff.distributions.PointMass([1.0, 2.0]).mean
        array([1., 2.])
        """
        return self.value

    @property
    def variance(self) -> np.ndarray:
        """Zeros of the values' shape.

        >>> ff.distributions.PointMass([1.0, 2.0]).variance
        array([0., 0.])
        """
        return np.zeros(self.value.shape)

    def log_prob(self, x: Any) -> np.ndarray:
        """0 where ``x`` equals the value, −inf elsewhere.

        >>> ff.distributions.PointMass([1.0, 2.0]).log_prob(2.0)
        array([-inf,   0.])
        """
        return np.where(np.asarray(x) == self.value, 0.0, -np.inf)

    def sample(self, size: int | Sequence[int] | None = None, rng: Any = None
               ) -> np.ndarray:
        """``size`` copies of the values: shape ``size + batch_shape`` (``rng`` unused;
        accepted so that every posterior samples alike).

        >>> ff.distributions.PointMass([1.0, 2.0]).sample(2)
        array([[1., 2.],
               [1., 2.]])
        """
        shape = sample_shape(size) + self.value.shape
        out = np.broadcast_to(self.value, shape).copy()
        return out[()] if out.ndim == 0 else out

    def __getitem__(self, index: Any) -> PointMass:
        return PointMass(self.value[index])

    def __repr__(self) -> str:
        """``PointMass(2.0)``, or a batch's values as NumPy prints them (summarised)."""
        return f"PointMass({format_values(self.value, 'PointMass(')})"
