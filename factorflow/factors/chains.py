"""Chains over a plate: ``x[t]`` depends on ``x[t - 1]`` (hidden Markov models and
linear-Gaussian state-space models), as one factor over the whole chain.

* ``DiscreteChain(sample | init, trans)``: x[0] ~ Discrete(init), x[t] ~ Discrete(trans[x[t−1]]),
  log f = log init[x₀] + Σ_t log trans[x_{t−1}, x_t];
* ``GaussianChain(sample | init_mean, init_precision, coefficient, offset, precision)``:
  x[0] ~ N(init_mean, 1/init_precision), x[t] ~ N(coefficient·x[t−1] + offset, 1/precision).

The parameters are known, except that under VMP the discrete chain's ``init`` and
``trans`` may be Dirichlet (a start, and rows one per state): their messages are the
expected start and transition counts.  The chain's plate is the last plate axis of
``sample`` (earlier axes are independent chains, one per element of the outer plates).
Each operator runs one forward–backward pass, forward over t and then backward (Rabiner's
scaled recursions, on √T chunks at once; Kalman filtering then the backward information
filter), on every chain at once; equal inputs reuse the last pass.

The chain is a tree, so its messages are exact:

* EP: the message to x[t] is what the rest of the chain says about it, α_t·β_t, given the
  messages ``sample`` from x's uses (an emission per t);
* VMP: x is one block of the mean field (structured VMP, as BayesPy's
  ``CategoricalMarkovChain``): its posterior is the exact chain posterior given the
  uses' messages, which is this factor's forward message (x is a *derived* variable under
  VMP, so its uses read that posterior and its backward message is the product of the
  uses' messages); the evidence term E_q[log f] + H[q] = log Z − Σ_t E_q[log m_t] makes the
  bound exact where the chain's neighbours are known.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from factorflow.distributions import Dirichlet, Discrete, Gaussian
from factorflow.distributions.base import log_normalizer_or_zero, set_at, traced
from factorflow.distributions.moments import E, Elog, is_known
from factorflow.factors.common import logsumexp, times_finite
from factorflow.factors.registry import define_factor

DISCRETE_CHAIN = define_factor("DiscreteChain", ("sample", "int"), ("init", "simplex"),
                               ("trans", "simplex"))
GAUSSIAN_CHAIN = define_factor(
    "GaussianChain", ("sample", "real"), ("init_mean", "real"),
    ("init_precision", "positive"), ("coefficient", "real"), ("offset", "real"),
    ("precision", "positive"))


# ----- the last pass, reused -----------------------------------------------------------------
class _LastPass:
    """The result of a factor's last forward–backward pass and the inputs it ran on: VMP's
    evidence brings a sweep's messages up to date again, calling the chain's operators
    on messages equal to those of the last call (new objects, same values), and EP's
    evidence reads the messages its operator has just read.  Equal inputs (compared by
    value: O(T·K), against the pass's O(T·K²)) return the stored result."""

    def __init__(self) -> None:
        self.inputs: tuple[np.ndarray, ...] = ()
        self.result: Any = None

    def get(self, inputs: tuple[np.ndarray, ...], compute: Any) -> Any:
        if traced():  # values unknown: computed again (the compiler merges repeats)
            return compute()
        if not (len(inputs) == len(self.inputs) and all(
                a.shape == b.shape and np.array_equal(a, b)
                for a, b in zip(inputs, self.inputs, strict=True))):
            self.inputs, self.result = tuple(np.array(a) for a in inputs), compute()
            _freeze(self.result)  # (a caller may not change the stored pass)
        return self.result


def _freeze(value: Any) -> None:
    """Make every array in ``value`` (nested tuples) read-only, in place."""
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
    elif isinstance(value, tuple):
        for item in value:
            _freeze(item)


_DISCRETE_PASS = _LastPass()
_GAUSSIAN_PASS = _LastPass()


# ----- discrete: scaled forward–backward --------------------------------------------------
def _discrete_eta(sample: Any, size: int) -> np.ndarray:
    """log m_t(k) on (..., T, K): an observed chain as a point mass (0 or −inf)."""
    if is_known(sample):
        x = np.asarray(E(sample), int)
        with np.errstate(divide="ignore"):
            return np.log(np.asarray(x[..., None] == np.arange(size), float))
    return np.asarray(sample.eta[0], float)


#: the largest T·K² (times the outer plates) for which the recursions run on chunks of
#: the chain at once (matrix products within √T chunks); above it, one t at a time
CHUNK_LIMIT = 2**22


class ChainPass(NamedTuple):
    """One forward–backward pass: the past's and the future's messages to each x_t
    (normalised, in logs), the posterior marginals (log, unnormalised) and log Z."""

    log_alpha: np.ndarray
    log_beta: np.ndarray
    log_q: np.ndarray
    log_z: np.ndarray

    @property
    def log_msg(self) -> np.ndarray:
        """log α_t·β_t: the chain's message to x_t."""
        return self.log_alpha + self.log_beta


def discrete_forward_backward(init: np.ndarray, trans: np.ndarray, eta: np.ndarray,
                              chunked: bool | None = None) -> ChainPass:
    """The pass for the chain with incoming log-messages ``eta`` (..., T, K).

    α_t (the past's message to x_t) and β_t (the future's) are normalised (Rabiner's
    scaling); q_t ∝ α_t β_t m_t is the posterior and
    Z = Σ_x init[x₀] Π trans[x_{t−1}, x_t] Π_t m_t(x_t) its normaliser (``init`` and the
    rows of ``trans`` need not sum to 1: VMP passes exp E[log p]).  The backward
    recursion β_t = trans·(m_{t+1} ⊙ β_{t+1}) is the forward one run on the reversed chain
    with trans transposed; the forward one runs on trans's rows normalised, their sums r
    moved into the messages (diag(m_t)·trans = diag(m_t ⊙ r)·P), so that its scale
    factors multiply to Z."""
    init = np.asarray(init, float)
    trans = np.asarray(trans, float)
    shape = eta.shape
    size = shape[-1]
    top = _max_last(eta)
    top = np.where(np.isfinite(top), top, 0.0)
    if chunked is None:
        chunked = float(math.prod(shape)) * size <= CHUNK_LIMIT
    forward = _forward_chunked if chunked else _forward_sequential
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        m = np.exp(eta - top)  # m̃_t = m_t / exp(top_t), in [0, 1]
        rows = np.sum(trans, axis=-1)
        m_rows = np.concatenate([m[..., :-1, :] * rows, m[..., -1:, :]], axis=-2)
        a0 = np.broadcast_to(init / np.sum(init), shape[:-2] + (size,))
        alpha, log_scale = forward(a0, trans / rows[:, None], m_rows)
        b0 = np.full(shape[:-2] + (size,), 1.0 / size)
        beta = forward(b0, trans.T, m[..., ::-1, :])[0][..., ::-1, :]
        log_alpha, log_beta = np.log(alpha), np.log(beta)
        log_z = log_scale + np.sum(top[..., 0], axis=-1) + np.log(np.sum(init))
        log_q = log_alpha + log_beta + eta
        peak = _max_last(np.where(np.isfinite(log_q), log_q, -np.inf))
        log_q = log_q - np.where(np.isfinite(peak), peak, 0.0)
    return ChainPass(log_alpha, log_beta, log_q, log_z)


def _sum_last(v: np.ndarray, n: int = 1) -> np.ndarray:
    """Σ over the last ``n`` axes as a matrix-vector product with ones: NumPy's reduction
    over a short last axis (K = 3 states) is tens of times slower than BLAS."""
    flat = v.reshape(v.shape[: v.ndim - n] + (-1,))
    return flat @ np.ones(flat.shape[-1])


def _max_last(v: np.ndarray) -> np.ndarray:
    """max over the last axis, keeping it: one elementwise pass per state for a few
    states (NumPy's reduction over a short last axis is slow, as for ``_sum_last``)."""
    if v.shape[-1] > 8 or v.shape[-1] == 0:
        return np.max(v, axis=-1, keepdims=True)
    top = v[..., 0]
    for k in range(1, v.shape[-1]):
        top = np.maximum(top, v[..., k])
    return top[..., None]


def _normalized(v: np.ndarray, axes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """``v`` divided by its sum over the trailing ``axes``, and the log of that sum."""
    s = _sum_last(v, len(axes))
    return v / s.reshape(s.shape + (1,) * len(axes)), np.log(s)


def _forward_sequential(a0: np.ndarray, trans: np.ndarray, m: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray]:
    """α_t (normalised) for α_{t+1} ∝ (α_t ⊙ m̃_t)·trans, one t at a time, and
    log Σ α_0·diag(m̃_0)·trans⋯diag(m̃_{T−1})·trans·1 (log Z where trans's rows sum to 1)."""
    alpha = []
    log_z = np.zeros(m.shape[:-2])
    a = a0
    for t in range(m.shape[-2]):
        alpha.append(np.broadcast_to(a, m.shape[:-2] + m.shape[-1:]))
        a, s = _normalized((a * m[..., t, :]) @ trans, (-1,))
        log_z = log_z + s
    return np.stack(alpha, axis=-2), log_z


#: the chunk length of ``_forward_chunked``'s levels; chains at most this long (and the
#: top level) run one step at a time
CHUNK = 16


def _forward_chunked(a0: np.ndarray, trans: np.ndarray, m: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The same as ``_forward_sequential`` in O(CHUNK · log T) array steps: the chain is
    cut into C chunks of L = CHUNK steps; the products P_{c,l} = M_{c,0}⋯M_{c,l} of
    M = diag(m̃)·trans are formed within every chunk at once (a loop over l), the messages
    at the chunks' starts v_c ∝ a0·P_{0,L−1}⋯P_{c−1,L−1} by the same method on the
    chain of chunk products (a level up), and α_{c,l} ∝ v_c·P_{c,l−1} at once."""
    mats = m[..., :, :, None] * trans
    return _forward_products(a0, mats)


def _forward_products(a0: np.ndarray, mats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(α_t normalised, log a0·M_0⋯M_{T−1}·1) for the matrices ``mats`` (..., T, K, K)."""
    *batch, t_len, size, _ = mats.shape
    if t_len <= CHUNK:
        alpha = []  # (stacked at the end: no in-place writes, traced-safe)
        log_z = np.zeros(tuple(batch))
        v = a0
        for t in range(t_len):
            alpha.append(np.broadcast_to(v, (*batch, size)))
            v, s = _normalized((v[..., None, :] @ mats[..., t, :, :])[..., 0, :], (-1,))
            log_z = log_z + s
        return np.stack(alpha, axis=-2), log_z
    length = CHUNK
    count = -(-t_len // length)
    pad = count * length - t_len
    if pad:  # identities after the end
        eye = np.broadcast_to(np.eye(size), (*batch, pad, size, size))
        mats = np.concatenate([mats, eye], axis=-3)
    mats = mats.reshape((*batch, count, length, size, size))
    p, log_p = _normalized(mats[..., 0, :, :], (-2, -1))
    prods = [p]
    for step in range(1, length):
        p, s = _normalized(p @ mats[..., step, :, :], (-2, -1))
        prods.append(p)
        log_p = log_p + s
    prods = np.stack(prods, axis=-3)
    # the chunks' starts: the same recursion on the chain of chunk products, a level up
    starts, log_z = _forward_products(a0, prods[..., -1, :, :])
    log_z = log_z + np.sum(log_p, axis=-1)
    # α_{c,l} = v_c·P_{c,l−1}: per chunk one row vector times the chunk's products laid
    # side by side, (1, K)·(K, (L−1)·K)
    side = np.swapaxes(prods[..., :, :-1, :, :], -3, -2).reshape(
        (*batch, count, size, (length - 1) * size))
    rest = (starts[..., :, None, :] @ side).reshape((*batch, count, length - 1, size))
    alpha = np.concatenate([starts[..., :, None, :], rest], axis=-2)
    alpha = alpha.reshape((*batch, count * length, size))[..., :t_len, :]
    return _normalized(alpha, (-1,))[0], log_z


def _discrete_pass(sample: Any, init: Any, trans: Any) -> tuple[np.ndarray, ChainPass]:
    """(η, the pass) given the uses' messages ``sample``; a Dirichlet ``init`` or
    ``trans`` (VMP: their posteriors) enters as exp E[log p]."""
    init, trans = _parameter(init, 1), _parameter(trans, 2)
    eta = _discrete_eta(sample, init.shape[-1])
    return _DISCRETE_PASS.get((eta, init, trans), lambda: (
        eta, discrete_forward_backward(init, trans, eta)))


def _parameter(value: Any, ndim: int) -> np.ndarray:
    """A known start (``ndim`` 1) or transition matrix (2), or exp E[log p] of a Dirichlet
    one: the same for every t and chain, so one copy of what the use laid out over them."""
    if is_known(value):
        return np.asarray(value, float)
    e = np.exp(Elog(value))
    return e.reshape((-1,) + e.shape[e.ndim - ndim:])[0]


@DISCRETE_CHAIN.operator("ep", "sample", known=("init", "trans"))
def _discrete_sample_ep(sample, init, trans) -> Discrete:
    """α_t·β_t: the chain's message to x[t] given the messages from the other t."""
    return Discrete.from_natural(_discrete_pass(sample, init, trans)[1].log_msg)


@DISCRETE_CHAIN.operator("vmp", "sample", uniform_penalty=("sample",))
def _discrete_sample_vmp(sample, init, trans) -> Discrete:
    """The chain posterior's marginals q_t ∝ α_t β_t m_t (``sample``: the uses' messages;
    a uniform one is a poor start, so the initialisation sends them first where it can
    and the first sweep's pass already sees the emissions)."""
    return Discrete.from_natural(_discrete_pass(sample, init, trans)[1].log_q)


@DISCRETE_CHAIN.operator("vmp", "init", skip_if_uniform=("sample",), block=("sample",))
def _discrete_init_vmp(sample, init, trans) -> Dirichlet:
    """Dirichlet(1 + q(x₀)) on t = 0 (uniform on the other t): E[one-hot(x₀)]."""
    q = _probs(_discrete_pass(sample, init, trans)[1].log_q)
    return Dirichlet.from_natural(set_at(np.zeros(q.shape), (..., 0, slice(None)),
                                         q[..., 0, :]))


@DISCRETE_CHAIN.operator("vmp", "trans", skip_if_uniform=("sample",), block=("sample",))
def _discrete_trans_vmp(sample, init, trans) -> Dirichlet:
    """Row i of t: Dirichlet(1 + ξ_t(i, ·)), ξ_t(i, j) = q(x_{t−1} = i, x_t = j) ∝
    α_{t−1}(i) m_{t−1}(i) trans(i, j) m_t(j) β_t(j) (expected transition counts; none on
    t = 0); their product over t is Dirichlet(1 + the expected counts).  The counts of
    the last pass are kept with it: VMP's evidence after a sweep and the next sweep ask
    for them from the same pass."""
    eta, chain = _discrete_pass(sample, init, trans)
    if traced():  # values unknown: computed again (the compiler merges repeats)
        return Dirichlet.from_natural(_transition_counts(eta, chain, trans))
    if _TRANS_COUNTS[0] is not chain:  # (held: a new pass is a new object)
        _TRANS_COUNTS[:] = [chain, _transition_counts(eta, chain, trans)]
        _freeze(_TRANS_COUNTS[1])
    return Dirichlet.from_natural(_TRANS_COUNTS[1])


#: the pass whose expected transition counts were computed last, and those counts
_TRANS_COUNTS: list[Any] = [None, None]


def _transition_counts(eta: np.ndarray, chain: ChainPass, trans: Any) -> np.ndarray:
    """ξ_t(i, j) on (..., T, K, K), zero on t = 0 (``_discrete_trans_vmp``)."""
    with np.errstate(invalid="ignore", divide="ignore", under="ignore"):
        # in probabilities, each side scaled per t by its largest state (as the pass
        # itself runs): one product per pair, normalised by a BLAS sum
        pair = (_scaled_exp(chain.log_alpha + eta)[..., :-1, :, None] * _parameter(trans, 2)
                * _scaled_exp(eta + chain.log_beta)[..., 1:, None, :])
        total = _sum_last(pair, 2)
        pair = pair / np.where(total > 0, total, 1.0)[..., None, None]
    return set_at(np.zeros(eta.shape + eta.shape[-1:]),
                  (..., slice(1, None), slice(None), slice(None)), pair)


def _scaled_exp(log_p: np.ndarray) -> np.ndarray:
    """exp(log_p) over the last axis scaled so that its largest entry is 1 (0 where every
    entry is −inf)."""
    top = _max_last(log_p)
    with np.errstate(invalid="ignore"):
        return np.exp(log_p - np.where(np.isfinite(top), top, 0.0))


def _probs(log_p: np.ndarray) -> np.ndarray:
    """exp(log_p) normalised over the last axis (0 where every entry is −inf)."""
    p = _scaled_exp(log_p)
    with np.errstate(invalid="ignore", divide="ignore"):
        total = _sum_last(p)[..., None]
        return np.where(total > 0, p / np.where(total > 0, total, 1.0), 0.0)


@DISCRETE_CHAIN.evidence_operator("ep")
def _discrete_log_average_factor(sample, init, trans) -> np.ndarray:
    """log Σ_x f(x) Π_t m̂_t(x_t), the messages m̂ normalised (weight 1 where uniform):
    log Z less Σ_t log Σ_k m_t(k) over the t whose message is not uniform."""
    eta, chain = _discrete_pass(sample, init, trans)
    if is_known(sample):
        return chain.log_z
    with np.errstate(invalid="ignore"):  # (log_weights's convention for a uniform one)
        norms = np.where(np.all(eta == 0, axis=-1), 0.0, logsumexp(eta, axis=-1))
    return chain.log_z - np.sum(norms, axis=-1)


@DISCRETE_CHAIN.evidence_operator("vmp")
def _discrete_average_log_factor(sample, init, trans) -> np.ndarray:
    """E_q[log f] + H[q] = log Z − Σ_t E_{q_t}[log m_t], q the chain posterior and f's
    parameters at exp E[log p]: E_q[log f] is linear in them."""
    eta, chain = _discrete_pass(sample, init, trans)
    if is_known(sample):
        return chain.log_z
    return chain.log_z - np.sum(times_finite(_probs(chain.log_q), eta), axis=(-2, -1))


# ----- linear-Gaussian: Kalman filter and backward information filter ----------------------
def _gaussian_eta(sample: Any) -> tuple[np.ndarray, np.ndarray]:
    """(h_t, τ_t) of m_t(x) = exp(h x − τ x²/2) on (..., T); an observed chain as a very
    sharp message is not needed: observed chains are evaluated directly."""
    h, tau = sample.eta
    shape = np.broadcast_shapes(np.shape(h), np.shape(tau))
    return np.broadcast_to(np.asarray(h, float), shape), np.broadcast_to(
        np.asarray(tau, float), shape)


def gaussian_forward_backward(m0: Any, p0: Any, a: Any, b: Any, q: Any, h: np.ndarray,
                              tau: np.ndarray) -> tuple[tuple, tuple, np.ndarray]:
    """((h_msg, τ_msg), (h_post, τ_post), log Z) for the chain with incoming messages
    exp(h_t x − τ_t x²/2) on (..., T).

    Forward: the predictive N(μ_t, v_t) of x_t given the past (a Kalman filter); backward:
    the future's message (H_t, S_t) in information form, S_t = a²qG/(q + G),
    H_t = aq(g − bG)/(q + G) with (g, G) the message into x_{t+1} from the future and its
    own use.  The message to x_t is their product; log Z = log ∫ f Π_t m_t.  The
    recursions run on Python floats, one chain at a time, when there are fewer chains
    than steps (and not traced), else on arrays over the chains, one t at a time."""
    m0, p0, a, b, q = (np.asarray(v, float) if traced() else float(np.asarray(v, float))
                       for v in (m0, p0, a, b, q))
    batch, t_len = h.shape[:-1], h.shape[-1]
    count = math.prod(batch)
    if traced():  # one scan over t (the trace, and its compilation, do not grow with T)
        mu, var, big_h, big_s, log_z = _scanned(m0, p0, a, b, q, h, tau)
    elif count <= t_len:
        rows = [_recursions(m0, p0, a, b, q, hr, tr, math.log1p)
                for hr, tr in zip(h.reshape(count, t_len).tolist(),
                                  tau.reshape(count, t_len).tolist(), strict=True)]
        mu, var, big_h, big_s = (np.reshape(np.array([r[i] for r in rows], float),
                                             h.shape) for i in range(4))
        log_z = np.reshape(np.array([r[4] for r in rows], float), batch)
    else:
        out = _recursions(m0, p0, a, b, q, list(np.moveaxis(h, -1, 0)),
                          list(np.moveaxis(tau, -1, 0)), np.log1p)
        mu, var, big_h, big_s = (np.stack([np.broadcast_to(x, batch) for x in out[i]],
                                          axis=-1) for i in range(4))
        log_z = np.broadcast_to(np.asarray(out[4], float), batch)
    msg = (mu / var + big_h, 1.0 / var + big_s)
    return msg, (msg[0] + h, msg[1] + tau), log_z


def _scanned(m0: Any, p0: Any, a: Any, b: Any, q: Any, h: np.ndarray, tau: np.ndarray
             ) -> tuple:
    """``_recursions``'s formulas as two ``jax.lax.scan``s over t (the JAX backend):
    (μ, v, H, S) on (..., T) and log Z on (...)."""
    from jax import lax
    steps = (np.moveaxis(h, -1, 0), np.moveaxis(tau, -1, 0))
    zero = np.zeros(h.shape[:-1])

    def forward(carry: tuple, step: tuple) -> tuple:
        mean, v, log_z = carry
        ht, tt = step
        prec = 1.0 / v + tt
        lin = mean / v + ht
        log_z = log_z - 0.5 * np.log1p(tt * v) + 0.5 * lin * lin / prec \
            - 0.5 * mean * mean / v
        return (a * lin / prec + b, a * a / prec + 1.0 / q, log_z), (mean, v)

    def backward(carry: tuple, step: tuple) -> tuple:
        g, gg = carry
        ht, tt = step
        g2, gg2 = g + ht, gg + tt
        return (a * q * (g2 - b * gg2) / (q + gg2), a * a * q * gg2 / (q + gg2)), (g, gg)

    (_, _, log_z), (mu, var) = lax.scan(forward, (zero + m0, zero + 1.0 / p0, zero), steps)
    _, (big_h, big_s) = lax.scan(backward, (zero, zero), steps, reverse=True)
    return (*(np.moveaxis(x, 0, -1) for x in (mu, var, big_h, big_s)), log_z)


def _recursions(m0: float, p0: float, a: float, b: float, q: float, h: list, tau: list,
                log1p: Any) -> tuple[list, list, list, list, Any]:
    """The forward and backward recursions over the per-t values ``h``, ``tau`` (floats,
    or arrays over the chains): (μ, v, H, S) per t and log Z."""
    t_len = len(h)
    mu, var, big_h, big_s = [0.0] * t_len, [0.0] * t_len, [0.0] * t_len, [0.0] * t_len
    log_z: Any = 0.0
    mean: Any = m0
    v: Any = 1.0 / p0
    for t in range(t_len):
        mu[t], var[t] = mean, v
        prec = 1.0 / v + tau[t]
        lin = mean / v + h[t]
        log_z = log_z - 0.5 * log1p(tau[t] * v) + 0.5 * lin * lin / prec \
            - 0.5 * mean * mean / v
        mean, v = a * lin / prec + b, a * a / prec + 1.0 / q
    g: Any = 0.0
    gg: Any = 0.0
    for t in range(t_len - 1, -1, -1):
        big_h[t], big_s[t] = g, gg
        g, gg = g + h[t], gg + tau[t]
        g, gg = a * q * (g - b * gg) / (q + gg), a * a * q * gg / (q + gg)
    return mu, var, big_h, big_s, log_z


def _gaussian_args(sample, init_mean, init_precision, coefficient, offset, precision
                   ) -> tuple:
    h, tau = _gaussian_eta(sample)
    params = tuple(np.asarray(v, float) for v in (init_mean, init_precision, coefficient,
                                                   offset, precision))
    return _GAUSSIAN_PASS.get((h, tau) + params,
                              lambda: gaussian_forward_backward(*params, h, tau))


_GAUSSIAN_KNOWN = ("init_mean", "init_precision", "coefficient", "offset", "precision")


@GAUSSIAN_CHAIN.operator("ep", "sample", known=_GAUSSIAN_KNOWN)
def _gaussian_sample_ep(sample, init_mean, init_precision, coefficient, offset,
                        precision) -> Gaussian:
    """The chain's message to x[t]: the Kalman predictive times the backward message."""
    msg, _, _ = _gaussian_args(sample, init_mean, init_precision, coefficient, offset,
                               precision)
    return Gaussian.from_natural(*msg)


@GAUSSIAN_CHAIN.operator("vmp", "sample", known=_GAUSSIAN_KNOWN)
def _gaussian_sample_vmp(sample, init_mean, init_precision, coefficient, offset,
                         precision) -> Gaussian:
    """The smoothed marginals (Rauch–Tung–Striebel) given the uses' messages."""
    _, post, _ = _gaussian_args(sample, init_mean, init_precision, coefficient, offset,
                                precision)
    return Gaussian.from_natural(*post)


def _observed_gaussian_log_density(x, m0, p0, a, b, q) -> np.ndarray:
    x = np.asarray(E(x), float)
    first = 0.5 * np.log(p0 / (2 * np.pi)) - 0.5 * p0 * (x[..., 0] - m0) ** 2
    rest = 0.5 * np.log(q / (2 * np.pi)) - 0.5 * q * (x[..., 1:] - a * x[..., :-1] - b) ** 2
    return first + np.sum(rest, axis=-1)


@GAUSSIAN_CHAIN.evidence_operator("ep")
def _gaussian_log_average_factor(sample, init_mean, init_precision, coefficient, offset,
                                 precision) -> np.ndarray:
    """log ∫ f Π_t m̂_t, the messages normalised (integrated out where uniform)."""
    if is_known(sample):
        return _observed_gaussian_log_density(sample, init_mean, init_precision,
                                              coefficient, offset, precision)
    _, _, log_z = _gaussian_args(sample, init_mean, init_precision, coefficient, offset,
                                 precision)
    return log_z - np.sum(np.broadcast_to(log_normalizer_or_zero(sample),
                                          np.shape(log_z) + sample.batch_shape[-1:]),
                          axis=-1)


@GAUSSIAN_CHAIN.evidence_operator("vmp")
def _gaussian_average_log_factor(sample, init_mean, init_precision, coefficient, offset,
                                 precision) -> np.ndarray:
    """log Z − Σ_t E_q[h_t x_t − τ_t x_t²/2], q the smoothed chain posterior."""
    if is_known(sample):
        return _observed_gaussian_log_density(sample, init_mean, init_precision,
                                              coefficient, offset, precision)
    h, tau = _gaussian_eta(sample)
    _, (hp, tp), log_z = _gaussian_args(sample, init_mean, init_precision, coefficient,
                                        offset, precision)
    mean, second = hp / tp, 1.0 / tp + (hp / tp) ** 2
    return log_z - np.sum(h * mean - 0.5 * tau * second, axis=-1)
