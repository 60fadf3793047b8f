"""Observations through a link from a real variable: the non-conjugate factors.

* BernoulliFromLogOdds(sample | logodds): P(sample) = σ(logodds), log f = y x − log(1 + eˣ)
  (``ff.Bernoulli(name, ff.logistic(x))``, Infer.NET's BernoulliFromLogOddsOp).
* BernoulliFromProbit(sample | x): P(sample) = Φ(x), i.e. sample = (x + ε > 0) with
  ε ~ N(0, 1) (``ff.Bernoulli(name, ff.probit(x))``; noise of variance s² is
  ``ff.probit(x / s)``).
* PoissonFromLogRate(sample | lograte): a count with rate e^lograte, log f = y x − eˣ −
  log y! (``ff.Poisson(name, ff.exp(x))``); the count must be observed.

EP (moment matching: the message to the real argument is proj[cavity · f] / cavity):

* probit: closed form — the truncated-Gaussian moments of IsPositive on x + ε, passed back
  through the unit noise (``factors.compare``, precise in the far tails);
* logistic and Poisson-log: no closed form; the tilted moments come from
  ``factors.quadrature`` (Gauss–Hermite at the tilted mode, or a step plus Gauss–Laguerre
  split where the tilted distribution is wide; 64 nodes each).  The Poisson likelihood is
  e^(y x) · exp(−eˣ), and N(x; m, v) e^(y x) is a Gaussian shifted to m + y v, so every count
  is the one quadrature of exp(−eˣ).

A random sample's message is a mixture of the two observed cases (weights P(sample) ·
Z(sample)), as Infer.NET does; it may be improper (the mixture can be wider than the
cavity).  For an observed sample the log-concave likelihoods make the tilted variance at
most the cavity's, so the message is proper (rounding is clipped at precision 0).

VMP (the method is named in a comment beside each call in the generated code):

* logistic: the Jaakkola–Jordan bound log σ(x) ≥ log σ(ξ) + (x − ξ)/2 − λ(ξ)(x² − ξ²),
  λ(ξ) = tanh(ξ/2)/(4ξ), with its variational parameter updated to its optimum
  ξ = √E[x²] from the current posterior each time the message is computed (coordinate
  ascent in (q, ξ): the bound never falls).  Message to x: N with precision 2λ(ξ) and
  precision·mean E[y] − ½; to y: log-odds E[x] (exact).  The reported term is the bound at
  that ξ: (E[y] − ½) E[x] + log σ(ξ) − ξ/2, tight for a known x.
* probit: the augmentation y = (z > 0), z ~ N(x, 1), with q(z) folded into the operator
  (Albert & Chib's variational form): message to x N(E[z], 1), E[z] = m + Σ_y q(y) s φ(m) /
  Φ(s m); to y log-odds log Φ(m) − log Φ(−m); term Σ_y q(y) log Φ(s m) − Var[x]/2.
* Poisson-log: non-conjugate VMP (Knowles & Minka 2011): S(m, v) = E_q[log f] =
  y m − exp(m + v/2) − log y! in closed form; the message has precision −2 ∂S/∂v = e^(m+v/2)
  and precision·mean ∂S/∂m + m · precision.  A fixed-point iteration, not a coordinate
  ascent: its bound is the exact ELBO but may rise non-monotonically on the way.
"""

from __future__ import annotations

import numpy as np

from factorflow.distributions import Bernoulli, Gaussian
from factorflow.distributions.moments import E, Eprob, gaussian_moments, is_known
from factorflow.factors.common import (
    bool_log_probs,
    bool_log_weights,
    broadcast_batch,
    full,
    times_finite,
    unsupported,
)
from factorflow.factors.compare import _log_average, _out_message, _through_difference, _x_message
from factorflow.factors.quadrature import EXP_NEG_EXP, LOGISTIC, tilted_moments
from factorflow.factors.registry import define_factor
from factorflow.lazy import special


def _logit_log_density(sample, logodds):
    s = np.where(np.asarray(sample, bool), 1.0, -1.0)
    return special.log_expit(s * np.asarray(logodds, float))


def _probit_log_density(sample, x):
    s = np.where(np.asarray(sample, bool), 1.0, -1.0)
    return special.log_ndtr(s * np.asarray(x, float))


def _poisson_log_density(sample, lograte):
    k, x = np.asarray(sample, float), np.asarray(lograte, float)
    return k * x - np.exp(x) - special.gammaln(k + 1)


LOGIT = define_factor("BernoulliFromLogOdds", ("sample", "bool"), ("logodds", "real"),
                      log_density=_logit_log_density)
PROBIT = define_factor("BernoulliFromProbit", ("sample", "bool"), ("x", "real"),
                       log_density=_probit_log_density)
POISSON_LOG = define_factor("PoissonFromLogRate", ("sample", "count"), ("lograte", "real"),
                            log_density=_poisson_log_density)

_MOMENT_MATCHING = "EP: moment matching of the tilted distribution, by quadrature " \
    "(Gauss-Hermite at its mode, or step + Gauss-Laguerre where it is wide; 64 nodes)"


def _cavity(sample, x) -> tuple[np.ndarray, np.ndarray]:
    """The cavity's mean and variance over the broadcast plates of both arguments."""
    shape = broadcast_batch(sample, x)
    m, v = gaussian_moments(x)
    return full(shape, m), full(shape, v)


def _tilted_message(m, v, mean, var, log_concave: bool = True) -> Gaussian:
    """N(mean, var) / N(m, v).  A log-concave likelihood shrinks the variance, so there
    the precision is clipped at 0 (only rounding can make it negative); a mixture over a
    random sample may widen it, and its message is then improper, as EP's may be."""
    with np.errstate(divide="ignore", invalid="ignore"):
        prec = 1 / var - 1 / v
        if log_concave:
            prec = np.maximum(prec, 0.0)
        return Gaussian.from_natural(np.where(prec == 0, 0.0, mean / var - m / v), prec)


def _mixture(lw_true, lw_false, true, false) -> tuple[np.ndarray, ...]:
    """(log Z, mean, variance) of the mixture of two tilted distributions, each given as
    (log Z, mean, variance), with log weights ``lw_true``, ``lw_false``."""
    a, b = lw_true + true[0], lw_false + false[0]
    with np.errstate(invalid="ignore"):
        total = np.logaddexp(a, b)
        w1, w0 = np.exp(a - total), np.exp(b - total)
    mean = w1 * true[1] + w0 * false[1]
    var = w1 * true[2] + w0 * false[2] + w1 * w0 * (true[1] - false[1]) ** 2
    return total, mean, var


# ----- BernoulliFromLogOdds ----------------------------------------------------------
def _logistic_tilted(m, v, sign) -> tuple[np.ndarray, ...]:
    """(log E[σ(sign·x)], mean, variance) of N(x; m, v) σ(sign·x)."""
    log_z, mean, var = tilted_moments(sign * m, v, LOGISTIC)
    return log_z, sign * mean, var


@LOGIT.operator("ep", "sample", skip_if_uniform=("logodds",), proper=("logodds",),
                method="EP: log-odds log E[σ(x)] − log E[σ(−x)] under the cavity, by quadrature")
def _logit_sample_ep(logodds) -> Bernoulli:
    """Bernoulli(E[σ(x)]) under the cavity: log-odds log E[σ(x)] − log E[σ(−x)]."""
    m, v = gaussian_moments(logodds)
    if is_known(logodds):
        return Bernoulli.from_natural(np.asarray(m, float))
    return Bernoulli.from_natural(_logistic_tilted(m, v, 1.0)[0] - _logistic_tilted(m, v, -1.0)[0])


@LOGIT.operator("ep", "logodds", skip_if_uniform=("sample", "logodds"), proper=("logodds",),
                method=_MOMENT_MATCHING)
def _logit_logodds_ep(sample, logodds) -> Gaussian:
    """proj[N(x; m, v) (w(T) σ(x) + w(F) σ(−x))] / N(x; m, v)."""
    m, v = _cavity(sample, logodds)
    if is_known(sample):
        s = np.where(np.asarray(E(sample)) > 0.5, 1.0, -1.0) * np.ones_like(m)
        _, mean, var = _logistic_tilted(m, v, s)
        return _tilted_message(m, v, mean, var)
    lt, lf = bool_log_probs(sample)
    _, mean, var = _mixture(lt, lf, _logistic_tilted(m, v, 1.0), _logistic_tilted(m, v, -1.0))
    return _tilted_message(m, v, mean, var, log_concave=False)


@LOGIT.evidence_operator("ep")
def _logit_log_average_factor(sample, logodds) -> np.ndarray:
    """log Σ_y w(y) E_cavity[σ(s_y x)] (s = ±1; w the sample's evidence weights)."""
    lw_true, lw_false = bool_log_weights(sample)
    m, v = _cavity(sample, logodds)
    if is_known(logodds):
        return np.logaddexp(lw_true + special.log_expit(m), lw_false + special.log_expit(-m))
    return np.logaddexp(lw_true + _logistic_tilted(m, v, 1.0)[0],
                        lw_false + _logistic_tilted(m, v, -1.0)[0])


def _jj_xi(logodds) -> np.ndarray:
    """ξ = √E[x²], the Jaakkola–Jordan parameter at its optimum for the current q(x)."""
    m, v = gaussian_moments(logodds)
    return np.sqrt(m * m + v)


@LOGIT.operator("vmp", "sample", skip_if_uniform=("logodds",),
                method="VMP: log-odds E[x] (exact: log f is linear in the sample)")
def _logit_sample_vmp(logodds) -> Bernoulli:
    """Log-odds E[x]: E_x[log f(T, x) − log f(F, x)] = E[x]."""
    return Bernoulli.from_natural(np.asarray(E(logodds), float))


@LOGIT.operator("vmp", "logodds", skip_if_uniform=("sample",), proper=("logodds",),
                method="VMP: Jaakkola-Jordan bound, xi = sqrt(E[x^2]) from the current "
                       "posterior (Jaakkola & Jordan 2000)")
def _logit_logodds_vmp(sample, logodds) -> Gaussian:
    """N with precision 2λ(ξ), precision·mean E[y] − ½; λ(ξ) = tanh(ξ/2)/(4ξ) (1/8 at 0)."""
    xi = full(broadcast_batch(sample, logodds), _jj_xi(logodds))
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = np.where(xi < 1e-8, 0.125, np.tanh(xi / 2) / (4 * xi))
    q = full(xi.shape, Eprob(sample))
    return Gaussian.from_natural(q - 0.5, 2 * lam)


@LOGIT.evidence_operator("vmp")
def _logit_average_log_factor(sample, logodds) -> np.ndarray:
    """The Jaakkola–Jordan bound on E_q[log f] at ξ = √E[x²]:
    (E[y] − ½) E[x] + log σ(ξ) − ξ/2 (equal to log σ(±x) for a known x)."""
    xi = _jj_xi(logodds)
    return (Eprob(sample) - 0.5) * E(logodds) + special.log_expit(xi) - xi / 2


# ----- BernoulliFromProbit -------------------------------------------------------------
def _noisy(x) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance of d = x + ε, ε ~ N(0, 1)."""
    m, v = gaussian_moments(x)
    return m, v + 1.0


@PROBIT.operator("ep", "sample", skip_if_uniform=("x",), proper=("x",),
                 method="EP: closed form, P(sample) = Phi(m / sqrt(1 + v))")
def _probit_sample_ep(x) -> Bernoulli:
    """Bernoulli(Φ(m/√(1 + v)))."""
    return _out_message(*_noisy(x), False)


@PROBIT.operator("ep", "x", skip_if_uniform=("sample", "x"), proper=("x",),
                 method="EP: closed form, truncated-Gaussian moments of x + noise")
def _probit_x_ep(sample, x) -> Gaussian:
    """IsPositive's message to d = x + ε (truncated-Gaussian moments), widened by ε's unit
    variance on the way back to x: exact moment matching."""
    shape = broadcast_batch(sample, x)
    m, v = _noisy(x)
    msg_d = _x_message(sample, full(shape, m), full(shape, v))
    return _through_difference(msg_d, np.zeros(shape), np.ones(shape), 1.0)


@PROBIT.evidence_operator("ep")
def _probit_log_average_factor(sample, x) -> np.ndarray:
    """log(w(T) Φ(z) + w(F) Φ(−z)), z = m/√(1 + v)."""
    return _log_average(sample, *_noisy(x), False)


def _probit_ratios(m) -> tuple[np.ndarray, np.ndarray]:
    """φ(m)/Φ(m) and φ(m)/Φ(−m), from logs (precise in both tails)."""
    log_phi = -0.5 * m * m - 0.5 * np.log(2 * np.pi)
    return np.exp(log_phi - special.log_ndtr(m)), np.exp(log_phi - special.log_ndtr(-m))


@PROBIT.operator("vmp", "sample", skip_if_uniform=("x",),
                 method="VMP: probit augmentation z ~ N(x, 1), sample = (z > 0)")
def _probit_sample_vmp(x) -> Bernoulli:
    """Log-odds log Φ(E[x]) − log Φ(−E[x])."""
    m = np.asarray(E(x), float)
    return Bernoulli.from_natural(special.log_ndtr(m) - special.log_ndtr(-m))


@PROBIT.operator("vmp", "x", skip_if_uniform=("sample",), proper=("x",),
                 method="VMP: probit augmentation z ~ N(x, 1), sample = (z > 0), q(z) "
                        "truncated Gaussian (Albert & Chib)")
def _probit_x_vmp(sample, x) -> Gaussian:
    """N(E[z], 1): E[z] = m + q(T) φ(m)/Φ(m) − q(F) φ(m)/Φ(−m), m = E[x]."""
    shape = broadcast_batch(sample, x)
    m = full(shape, E(x))
    up, down = _probit_ratios(m)
    q = full(shape, Eprob(sample))
    ez = m + times_finite(q, up) - times_finite(1 - q, down)
    return Gaussian.from_natural(ez, np.ones(shape))


@PROBIT.evidence_operator("vmp")
def _probit_average_log_factor(sample, x) -> np.ndarray:
    """The augmented bound q(T) log Φ(m) + q(F) log Φ(−m) − Var[x]/2 (exact for a known x)."""
    m, v = gaussian_moments(x)
    q = Eprob(sample)
    return (times_finite(q, special.log_ndtr(m)) + times_finite(1 - q, special.log_ndtr(-m))
            - 0.5 * v)


# ----- PoissonFromLogRate ---------------------------------------------------------------
def _observed_count(sample) -> np.ndarray:
    if not is_known(sample):
        raise unsupported("PoissonFromLogRate", "message passing",
                          "needs the count 'sample' to be observed.")
    return np.asarray(E(sample), float)


def _poisson_tilted(k, m, v) -> tuple[np.ndarray, ...]:
    """(log ∫ N(x; m, v) f(k | x) dx, mean, variance): f(k | x) = e^(k x) exp(−eˣ) / k!, the
    quadrature of exp(−eˣ) tilted by e^(k x) (under the cavity shifted by k v)."""
    log_z, mean, var = tilted_moments(m, v, EXP_NEG_EXP, tilt=k)
    return log_z - special.gammaln(k + 1), mean, var


@POISSON_LOG.operator("ep", "lograte", skip_if_uniform=("lograte",), proper=("lograte",),
                      known=("sample",), method=_MOMENT_MATCHING)
def _poisson_lograte_ep(sample, lograte) -> Gaussian:
    """proj[N(x; m, v) Poisson(k | eˣ)] / N(x; m, v)."""
    k = _observed_count(sample)
    m, v = _cavity(sample, lograte)
    _, mean, var = _poisson_tilted(full(m.shape, k), m, v)
    return _tilted_message(m, v, mean, var)


@POISSON_LOG.evidence_operator("ep")
def _poisson_log_average_factor(sample, lograte) -> np.ndarray:
    """log E_cavity[Poisson(k | eˣ)]."""
    k = _observed_count(sample)
    if is_known(lograte):
        return _poisson_log_density(k, E(lograte))
    m, v = _cavity(sample, lograte)
    return _poisson_tilted(full(m.shape, k), m, v)[0]


@POISSON_LOG.operator("vmp", "lograte", known=("sample",), proper=("lograte",), ascent=False,
                      method="VMP: non-conjugate VMP (Knowles & Minka 2011), "
                             "E[exp x] = exp(m + v/2)")
def _poisson_lograte_vmp(sample, lograte) -> Gaussian:
    """Precision e^(m + v/2), precision·mean k + e^(m + v/2) (m − 1): the gradients of
    S(m, v) = k m − e^(m + v/2) − log k! matched by a Gaussian message."""
    k = _observed_count(sample)
    shape = broadcast_batch(sample, lograte)
    m, v = (full(shape, a) for a in gaussian_moments(lograte))
    rate = np.exp(m + v / 2)
    return Gaussian.from_natural(k + rate * (m - 1), rate)


@POISSON_LOG.evidence_operator("vmp")
def _poisson_average_log_factor(sample, lograte) -> np.ndarray:
    """E_q[log f] = k E[x] − exp(E[x] + Var[x]/2) − log k! (exact)."""
    k = _observed_count(sample)
    m, v = gaussian_moments(lograte)
    return k * m - np.exp(m + v / 2) - special.gammaln(k + 1)
