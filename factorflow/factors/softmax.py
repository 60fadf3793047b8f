"""DiscreteFromSoftmax(sample | logits): a category drawn with probabilities softmax(η).

P(sample = y) = exp(η_y) / Σ_k exp(η_k), log f = η_y − lse(η)  (``ff.Discrete(name,
ff.softmax(eta))``, multinomial regression; Infer.NET's SoftmaxOp with a Discrete).

Two factors share the operators below:

* ``DiscreteFromSoftmax``: η a K-vector (a VectorGaussian, ``B @ w``, a constant);
* ``DiscreteFromSoftmaxPlate``: η a plate of K real variables, the statement's plates
  plus one (``ff.softmax(eta, k)``), its messages one scalar Gaussian per element (the
  fully factorised approximation: EP projects the tilted distribution on independent
  Gaussians, VMP's bound is separable).

EP (moment matching).  The likelihood depends on η only through the K − 1 differences
D_j = η_j − η_0, so the tilted distribution is the cavity's with its D-marginal replaced:
the message is a Gaussian in D (exact in closed form from the tilted D-moments, with a
precision of rank K − 1 in η).  The tilted D-moments are a (K − 1)-dimensional integral:

* K = 2: softmax_1 = σ(D), the logistic quadrature of ``factors.quadrature`` (1e-7 or
  better for cavity variances 10⁻³ to 10³);
* K = 3: for class y with d = the two differences η_j − η_y, 1/(1 + e^d₁ + e^d₂) =
  c⁻¹ σ(log c − d₂), c = 1 + e^d₁: the integral over d₂ given d₁ is the logistic
  quadrature again (vectorised over the outer nodes), the one over d₁ a trapezoid rule
  over ±10 standard deviations (spectrally accurate: the integrand is analytic in a
  strip of half-width π, so a step h errs by about e^(−2π²/h); h = 0.7 min(sd, 1), at
  most 4,000 nodes: full accuracy up to cavity variances of about 1,000);
* K ≥ 4: refused (UnsupportedFactorError: use VMP).

A random sample's message is log E_cavity[softmax_k(η)] per class; the message to η is
then the moment match of the mixture of the K tilted distributions.

The plate form's EP converges slowly when its weights are shared by many data (the
logits' common shift, on which K independent messages cannot help putting precision,
creeps: 540 sweeps to 1e-6 in ``examples/multinomial_regression.py``), so its message
ends each cycle of 12 sweeps with the reduced-rank extrapolation of the cycle's messages
(``_extrapolated``): EP's fixed points, in tens of sweeps (60 there).  The fixed point
itself is EP's with independent classes: near the exact means, but with variances far
below the exact ones (the common shift keeps the prior's width in the exact posterior;
``tests/factors/test_softmax_plate.py``); the vector form has both right.

VMP: Böhning's bound (Böhning 1992; Infer.NET's SoftmaxOp_Bohning): with A = ½(I − 11ᵀ/K),
which bounds the Hessian of lse everywhere, lse(η) ≤ lse(ψ) + (η − ψ)ᵀ softmax(ψ) +
½ (η − ψ)ᵀ A (η − ψ).  The bound is quadratic in η, so the message to η is Gaussian:
precision A, precision·mean E[one-hot(y)] − softmax(ψ) + A ψ, with ψ = E[η] from the
current posterior at each update (its optimum: the bound touches lse at ψ), which makes
each update a coordinate ascent step in (q, ψ): the bound never falls, and it is a lower
bound of log Z.  The plate form uses ½ I in place of A (A ⪯ ½ I), which separates the
elements so that their parallel update is still coordinate ascent.  The reported term is
Σ_k q_k E[η_k] − lse(E[η]) − ½ tr(A Cov η).  To the sample: log-probabilities E[η].
"""

from __future__ import annotations

from typing import Any

import numpy as np

from factorflow.distributions import Discrete, Gaussian
from factorflow.distributions.base import log_normalizer_or_zero
from factorflow.distributions.moments import Eonehot, gaussian_moments, is_known
from factorflow.distributions.multivariate import inverse, trace_product
from factorflow.factors.common import logsumexp, times_finite, unsupported
from factorflow.factors.quadrature import LOGISTIC, tilted_moments
from factorflow.factors.registry import define_factor
from factorflow.factors.vector_gaussian import mean_cov, vector_gaussian


def _log_density(sample, logits):
    eta = np.asarray(logits, float)
    y = np.asarray(sample, int)
    shape = np.broadcast_shapes(y.shape, eta.shape[:-1])
    eta = np.broadcast_to(eta, shape + eta.shape[-1:])
    picked = np.take_along_axis(eta, np.broadcast_to(y, shape)[..., None], -1)[..., 0]
    return picked - logsumexp(eta, axis=-1)


SOFTMAX = define_factor("DiscreteFromSoftmax", ("sample", "int"), ("logits", "vector"),
                        log_density=_log_density)
SOFTMAX_PLATE = define_factor("DiscreteFromSoftmaxPlate", ("sample", "int"),
                              ("logits", "real"), log_density=_log_density)

#: the largest number of categories EP integrates (a (K − 1)-dimensional quadrature)
EP_MAX_CATEGORIES = 3
#: the reach of the outer integral (K = 3), in standard deviations of its cavity
_TRAPEZOID_SPAN = 10.0
#: the trapezoid's step, in units of min(sd, 1): errors about e^(−2π²/0.7) ≈ 6e-13
_TRAPEZOID_STEP = 0.7

_EP_METHOD = ("EP: moment matching of the tilted distribution in the K-1 logit "
              "differences, by quadrature (K = 2: the logistic's; K = 3: logistic "
              "quadrature inside a trapezoid rule)")
#: the plate form's EP: a cycle's length in sweeps; its last two extrapolate, each from
#: the cycle's messages of its parity (6 terms: RRE with 5 differences)
EXTRAPOLATION_CYCLE = 12
#: the most message elements (data × K) extrapolated: a cycle keeps 11 copies of the
#: messages (176 MB at this size); larger plates run plain EP
EXTRAPOLATION_MAX_ELEMENTS = 10**6
_PLATE_EP_METHOD = (_EP_METHOD + f"; in cycles of {EXTRAPOLATION_CYCLE} sweeps, the last "
                    "two send the reduced-rank extrapolation (RRE) of the cycle's messages "
                    "of their parity: the limit of their sequence (the same fixed point, "
                    "reached in tens of sweeps)")
_VMP_METHOD = ("VMP: Bohning's quadratic bound on log-sum-exp (Bohning 1992), "
               "psi = E[eta] from the current posterior")


# ----- moments of the logits, vector or plate -----------------------------------------
def _moments(logits, plate: bool) -> tuple[np.ndarray, np.ndarray]:
    """(E[η], Cov[η]) with K last: a plate's Gaussians give a diagonal covariance."""
    if not plate:
        m, cov = mean_cov(logits)
        m = np.asarray(m, float)
        return m, np.broadcast_to(cov, m.shape + m.shape[-1:]) if np.ndim(cov) == 0 else cov
    m, v = (np.asarray(a, float) for a in gaussian_moments(logits))
    v = np.broadcast_to(v, m.shape)
    return m, v[..., :, None] * np.eye(m.shape[-1])


def _categories(logits) -> int:
    if is_known(logits):
        return int(np.shape(logits)[-1])
    return int(logits.eta[0].shape[-1] if isinstance(logits, Gaussian) else logits.dim)


def _sample_weights(sample, size: int, shape: tuple[int, ...]) -> np.ndarray:
    """E[one-hot(y)] over the statement's plates ``shape`` (K last)."""
    return np.broadcast_to(Eonehot(sample, size), shape + (size,))


# ----- EP: the tilted moments -------------------------------------------------------------
def _differences(size: int) -> np.ndarray:
    """B, (K − 1) × K: D = B η, D_j = η_{j+1} − η_0."""
    return np.hstack([-np.ones((size - 1, 1)), np.eye(size - 1)])


def _class_map(size: int, k: int) -> np.ndarray:
    """M_k with d = M_k D: the differences η_j − η_k (j ≠ k, in order) from D."""
    b = _differences(size)
    rows = [j for j in range(size) if j != k]
    a = np.eye(size)[np.array(rows, int)] - np.eye(size)[k]  # (an array index: JAX too)
    return a @ np.linalg.pinv(b)  # exact: the rows of a lie in the row space of b


def _tilted_one(mu, var) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """log Z, mean, variance of N(d; mu, var) / (1 + e^d)."""
    lz, mean, v = tilted_moments(-mu, var, LOGISTIC)
    return lz, -mean, v


def _tilted_two(mu, cov) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """log Z, mean (…, 2), covariance (…, 2, 2) of N(d; mu, cov) / (1 + e^d₁ + e^d₂):
    the inner integral by the logistic quadrature, the outer by the trapezoid rule."""
    m1, m2 = mu[..., 0], mu[..., 1]
    s11, s12, s22 = cov[..., 0, 0], cov[..., 0, 1], cov[..., 1, 1]
    sd1 = np.sqrt(s11)
    lo = np.minimum(m1, m1 - s11) - _TRAPEZOID_SPAN * sd1
    hi = m1 + _TRAPEZOID_SPAN * sd1
    step = _TRAPEZOID_STEP * np.minimum(sd1, 1.0)
    n = int(np.clip(np.max(np.ceil((hi - lo) / step)), 16, 4000)) + 1
    t = np.linspace(0.0, 1.0, n)
    d1 = lo[..., None] + (hi - lo)[..., None] * t  # (…, n)
    h = (hi - lo) / (n - 1)
    slope = (s12 / s11)[..., None]
    cvar = np.maximum(s22 - s12 * s12 / s11, 1e-14 * s22)[..., None]
    cmean = m2[..., None] + slope * (d1 - m1[..., None])
    log_c = np.logaddexp(0.0, d1)
    lz_u, mu_u, var_u = tilted_moments(log_c - cmean, np.broadcast_to(cvar, d1.shape), LOGISTIC)
    e2 = log_c - mu_u  # E[d₂ | d₁] under the tilted distribution
    log_w = (-0.5 * (d1 - m1[..., None]) ** 2 / s11[..., None] - log_c + lz_u)
    top = np.max(log_w, axis=-1, keepdims=True)
    w = np.exp(log_w - top)
    total = np.sum(w, axis=-1)
    p = w / total[..., None]
    mean1, mean2 = np.sum(p * d1, axis=-1), np.sum(p * e2, axis=-1)
    c1, c2 = d1 - mean1[..., None], e2 - mean2[..., None]
    cov_t = np.stack([np.stack([np.sum(p * c1 * c1, -1), np.sum(p * c1 * c2, -1)], -1),
                      np.stack([np.sum(p * c1 * c2, -1), np.sum(p * (var_u + c2 * c2), -1)],
                               -1)], -2)
    log_z = np.log(total) + top[..., 0] + np.log(h) - 0.5 * np.log(2 * np.pi * s11)
    return log_z, np.stack([mean1, mean2], -1), cov_t


def _tilted_class(mk: np.ndarray, mu_d, cov_d) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """log E[softmax_k(η)], and the tilted mean and covariance of D = B η, under
    D ~ N(mu_d, cov_d), for the class k whose map d = M_k D is ``mk`` (one for all, or
    one per plate element)."""
    size = mu_d.shape[-1] + 1
    mu = np.einsum("...ij,...j->...i", mk, mu_d)
    cov = np.einsum("...ij,...jl,...kl->...ik", mk, cov_d, mk)
    if size == 2:
        lz, mean, var = _tilted_one(mu[..., 0], cov[..., 0, 0])
        mean, cov_t = mean[..., None], var[..., None, None]
    else:
        lz, mean, cov_t = _tilted_two(mu, cov)
    back = np.linalg.inv(mk)
    return (lz, np.einsum("...ij,...j->...i", back, mean),
            np.einsum("...ij,...jl,...kl->...ik", back, cov_t, back))


def _ep_size(logits) -> int:
    size = _categories(logits)
    if size > EP_MAX_CATEGORIES:
        raise unsupported("DiscreteFromSoftmax", "ep", f"integrates softmax over at most "
                          f"{EP_MAX_CATEGORIES} categories (a quadrature in K - 1 "
                          f"dimensions), and these logits have K = {size}; use 'vmp' "
                          "(Bohning's bound), or fewer categories.")
    return size


def _cavity_d(logits, plate: bool, shape: tuple[int, ...]):
    """The cavity's moments of η and of D = B η over the statement's plates."""
    m, cov = _moments(logits, plate)
    size = m.shape[-1]
    m = np.broadcast_to(m, shape + (size,))
    cov = np.broadcast_to(cov, shape + (size, size))
    b = _differences(size)
    return m, cov, b, b @ m[..., None], np.einsum("ij,...jl,kl->...ik", b, cov, b)


def _log_weights(sample, size: int, shape: tuple[int, ...]) -> np.ndarray:
    """log q(y = k), K last; a uniform message weighs every class 1 (evidence weights)."""
    if is_known(sample):
        y = np.asarray(sample, int)[..., None]
        return np.broadcast_to(np.where(y == np.arange(size), 0.0, -np.inf), shape + (size,))
    with np.errstate(divide="ignore", invalid="ignore"):
        lw = sample.eta[0] - log_normalizer_or_zero(sample)[..., None]
    return np.broadcast_to(lw, shape + (size,))


def _tilted(sample, logits, plate: bool):
    """log Σ_k w_k E[softmax_k], the cavity's η moments, and the tilted (mixture) moments
    of D."""
    size = _ep_size(logits)
    shape = _statement_shape(sample, logits, plate)
    m, cov, b, mu_d, cov_d = _cavity_d(logits, plate, shape)
    mu_d = mu_d[..., 0]
    if is_known(sample):  # one class per element: its map picked per element
        maps = np.stack([_class_map(size, k) for k in range(size)])
        y = np.broadcast_to(np.asarray(sample, int), shape)
        lz, mean, cov_t = _tilted_class(maps[y], mu_d, cov_d)
        return lz, (m, cov, b, mu_d, cov_d), (mean, cov_t)
    log_w = _log_weights(sample, size, shape)
    parts = [_tilted_class(_class_map(size, k), mu_d, cov_d) for k in range(size)]
    a = np.stack([log_w[..., k] + parts[k][0] for k in range(size)], -1)
    with np.errstate(invalid="ignore"):
        total = logsumexp(a, axis=-1)
        p = np.exp(a - total[..., None])
    p = np.where(np.isfinite(p), p, 0.0)
    mean = sum(p[..., k, None] * parts[k][1] for k in range(size))
    second = sum(p[..., k, None, None] * (parts[k][2] + parts[k][1][..., :, None]
                                           * parts[k][1][..., None, :]) for k in range(size))
    cov_t = second - mean[..., :, None] * mean[..., None, :]
    return total, (m, cov, b, mu_d, cov_d), (mean, cov_t)


def _statement_shape(sample, logits, plate: bool) -> tuple[int, ...]:
    ys = np.shape(sample) if is_known(sample) else sample.batch_shape
    if is_known(logits):
        ls = np.shape(logits)[:-1]
    else:
        ls = logits.batch_shape[:-1] if plate else logits.batch_shape
    return np.broadcast_shapes(ys, ls)


def _ep_logits(sample, logits, plate: bool):
    """The EP message to η: proj[cavity · f] / cavity, taken in D (precision of rank
    K − 1 in η; for an observed sample its D-precision clipped at 0 where rounding leaves
    it negative, which a log-concave likelihood cannot; a random sample's mixture may be
    wider than the cavity, and its message improper, as EP's may be); for the plate form
    the projection on independent Gaussians of the tilted η-marginals."""
    _, (m, cov, b, mu_d, cov_d), (mean_t, cov_t) = _tilted(sample, logits, plate)
    if plate:
        gain = np.einsum("...ij,kj,...kl->...il", cov, b, inverse(cov_d))
        mean_eta = m + np.einsum("...ij,...j->...i", gain, mean_t - mu_d)
        cov_eta = cov + np.einsum("...ij,...jk,...lk->...il", gain, cov_t - cov_d, gain)
        v_eta, v = np.diagonal(cov_eta, 0, -2, -1), np.diagonal(cov, 0, -2, -1)
        with np.errstate(divide="ignore", invalid="ignore"):
            prec = 1 / v_eta - 1 / v
            prec = np.maximum(prec, 0.0) if is_known(sample) else prec
            return Gaussian.from_natural(np.where(prec == 0, 0.0, mean_eta / v_eta - m / v),
                                         prec)
    pt, pc = inverse(cov_t), inverse(cov_d)
    prec_d = pt - pc
    if is_known(sample):  # log-concave: only rounding can make an eigenvalue negative
        w, vecs = np.linalg.eigh(0.5 * (prec_d + np.swapaxes(prec_d, -1, -2)))
        prec_d = np.einsum("...ij,...j,...kj->...ik", vecs, np.maximum(w, 0.0), vecs)
    h_d = np.einsum("...ij,...j->...i", pt, mean_t) - np.einsum("...ij,...j->...i", pc, mu_d)
    return vector_gaussian(h_d @ b, np.einsum("ji,...jk,kl->...il", b, prec_d, b))


def _ep_sample(logits, plate: bool) -> Discrete:
    """log E_cavity[softmax_k(η)] per class."""
    size = _ep_size(logits)
    if is_known(logits):
        eta = np.asarray(logits, float)
        return Discrete.from_natural(eta - logsumexp(eta, axis=-1, keepdims=True))
    shape = _statement_shape(np.zeros(()), logits, plate)
    _, _, _, mu_d, cov_d = _cavity_d(logits, plate, shape)
    return Discrete.from_natural(
        np.stack([_tilted_class(_class_map(size, k), mu_d[..., 0], cov_d)[0]
                  for k in range(size)], -1))


def _ep_evidence(sample, logits, plate: bool) -> np.ndarray:
    """log Σ_k w_k E_cavity[softmax_k(η)] (the log density for known logits)."""
    if is_known(logits):
        eta = np.asarray(logits, float)
        log_p = eta - logsumexp(eta, axis=-1, keepdims=True)
        return logsumexp(_log_weights(sample, eta.shape[-1], log_p.shape[:-1]) + log_p,
                         axis=-1)
    return _tilted(sample, logits, plate)[0]


# ----- the plate form's EP: extrapolation of the message sequence -------------------------
def _natural_vector(message: Gaussian) -> np.ndarray:
    """A message's natural parameters (h, then τ) as one flat vector."""
    return np.concatenate([np.ravel(np.asarray(e, float)) for e in message.eta])


def _rre(iterates: np.ndarray) -> np.ndarray | None:
    """Reduced-rank extrapolation (Eddy 1979; Sidi, *Vector Extrapolation Methods*,
    2017) of iterates x_0 … x_{k+1} (rows): s = Σ_j γ_j x_j (j ≤ k), with γ minimising
    ‖Σ_j γ_j (x_{j+1} − x_j)‖ subject to Σ_j γ_j = 1.  Exact in one step for a linear
    iteration whose error lies in k + 1 eigendirections; None where the differences
    vanish (converged) or the system is singular."""
    steps = np.diff(iterates, axis=0)
    gram = steps @ steps.T
    scale = np.trace(gram)
    if not np.isfinite(scale) or scale == 0.0:
        return None
    try:
        w = np.linalg.solve(gram + 1e-13 * scale * np.eye(len(gram)), np.ones(len(gram)))
    except np.linalg.LinAlgError:
        return None
    if not np.isfinite(w.sum()) or w.sum() == 0.0:
        return None
    return (w / w.sum()) @ iterates[:-1]


#: a chain's last step longer than this many times the one before answers an
#: extrapolation (measured: 7 to 11 where it does; 0.76 to 1.13 where it does not)
_JUMP_RATIO = 3.0


def _smooth(chain: np.ndarray) -> bool:
    """Whether a chain's last step is not much longer than the one before it: it goes on
    converging, rather than answering an extrapolation."""
    last, before = (np.linalg.norm(chain[i] - chain[i - 1]) for i in (-1, -2))
    return bool(last <= _JUMP_RATIO * before)


def _extrapolated(message: Gaussian, previous: Gaussian | None,
                  state: dict[str, Any] | None) -> Gaussian:
    """The plate form's message, in cycles of ``EXTRAPOLATION_CYCLE`` sweeps: the EP
    message itself, and at a cycle's last two sweeps the RRE limit of the cycle's
    messages of the same parity (natural parameters) instead.

    ``state`` is the operator's own (``Operator.state``: the generated program keeps
    it between sweeps, and checkpoints save it): ``"cycle"``, the EP messages computed
    so far in the cycle (flat natural parameters), and ``"sent"``, the message returned
    last.  The cycle goes on only where ``previous`` (the message the program holds) is
    the one sent; None (the operator called alone) gives the plain EP message.

    Why: the likelihood says nothing about the common shift of a datum's K logits, but
    K independent Gaussian messages cannot leave it alone: each puts a precision on it
    that echoes its cavity, and parallel EP creeps along the shift at 1 − (prior's
    precision there) / (posterior's) per update (0.956 in ``examples/
    multinomial_regression.py``), while a pair of modes in the differences oscillates
    (about −0.8).  A stateless message cannot do better: one that follows its cavity
    along the shift (as EP's must, to keep its fixed point) inherits the creep, and one
    that does not moves the fixed point (moving the messages to a fixed gauge moves the
    posterior means by 0.25: ``benchmarks/bench_softmax.py --cause``).  The sequence of
    messages converges linearly, dominated by those few modes, so its limit is well
    extrapolated from a few terms.
    Every other term: the compiled schedule computes the cavity at the start of a
    sweep, before this sweep's update of the weights, so each message answers the one
    sent two sweeps before, and the sequence is two interleaved ones (each converging at
    the rate above; together at its square root, 0.978 per sweep), each extrapolated in
    turn.  (The lag is the seed's schedule semantics: no EP operator is triggered (seed
    000), so ``InnerProduct``'s message to the logits is computed once a sweep where
    the greedy iteration schedule puts it, first, before the weights' update; a Trigger
    on it removes the lag and halves plain EP's sweeps, 1,215 to 551 on the example.)
    Under a schedule without that lag the last sweep's message answers the
    extrapolation sent just before it, a step several times its chain's last: then it
    is sent as it is (each cycle extrapolates once, from every other message).  At a
    fixed point the cycle's messages are equal and the extrapolation is the message
    itself: the fixed points are EP's.

    An extrapolation that is not finite, or makes a precision negative where the
    cycle's were not, is not sent (the plain message is); damping, or a message kept by
    ``skip_improper``, starts a new cycle (``previous`` then is not the message sent),
    so a damped run is plain EP; so is a plate of more than
    ``EXTRAPOLATION_MAX_ELEMENTS`` elements."""
    h, tau = (np.asarray(e, float) for e in message.eta)
    if state is None or h.size > EXTRAPOLATION_MAX_ELEMENTS:
        return message
    vector = _natural_vector(message)
    sent_before = state.get("sent")
    going_on = (previous is not None and sent_before is not None
                and np.array_equal(_natural_vector(previous), sent_before, equal_nan=True))
    cycle = (tuple(state.get("cycle", ())) if going_on else ()) + (vector,)
    sent = message
    if len(cycle) >= EXTRAPOLATION_CYCLE - 1:
        chain = np.stack(cycle[(len(cycle) - 1) % 2::2])  # this message's parity
        # at the last sweep: unless it answered the extrapolation sent just before
        if len(cycle) < EXTRAPOLATION_CYCLE or _smooth(chain):
            limit = _rre(chain)
            if limit is not None and np.all(np.isfinite(limit)):
                h_x = limit[: h.size].reshape(h.shape)
                tau_x = limit[h.size:].reshape(tau.shape)
                nonnegative = np.all(chain[:, h.size:] >= 0, axis=0).reshape(tau.shape)
                if not np.any(nonnegative & (tau_x < 0)):
                    sent = Gaussian.from_natural(np.where(tau_x == 0, 0.0, h_x), tau_x)
    # the cycle's second-to-last sweep keeps it for the last; the last ends it
    state["cycle"] = cycle if len(cycle) < EXTRAPOLATION_CYCLE else ()
    state["sent"] = vector if sent is message else _natural_vector(sent)
    return sent


# ----- VMP: Böhning's bound -----------------------------------------------------------------
def _curvature(size: int, plate: bool) -> np.ndarray:
    """A = ½(I − 11ᵀ/K) (vector), or its separable majorant ½ I (plate)."""
    if plate:
        return 0.5 * np.eye(size)
    return 0.5 * (np.eye(size) - np.ones((size, size)) / size)


def _vmp_logits(sample, logits, plate: bool):
    """Precision A, precision·mean E[one-hot(y)] − softmax(ψ) + A ψ at ψ = E[η]."""
    m, _ = _moments(logits, plate)
    size = m.shape[-1]
    shape = _statement_shape(sample, logits, plate)
    m = np.broadcast_to(m, shape + (size,))
    g = np.exp(m - logsumexp(m, axis=-1, keepdims=True))
    a = _curvature(size, plate)
    h = _sample_weights(sample, size, shape) - g + m @ a
    if plate:
        return Gaussian.from_natural(h, np.broadcast_to(np.diagonal(a), h.shape))
    return vector_gaussian(h, np.broadcast_to(a, shape + (size, size)))


def _vmp_sample(logits, plate: bool) -> Discrete:
    """Log-probabilities E[η_k] (the bound's lse term does not depend on the sample)."""
    return Discrete.from_natural(_moments(logits, plate)[0])


def _vmp_evidence(sample, logits, plate: bool) -> np.ndarray:
    """Σ_k q_k E[η_k] − lse(E[η]) − ½ tr(A Cov η) (the log density for known logits)."""
    m, cov = _moments(logits, plate)
    size = m.shape[-1]
    q = Eonehot(sample, size)
    bound = logsumexp(m, axis=-1) + 0.5 * trace_product(_curvature(size, plate), cov)
    return np.sum(times_finite(q, m), axis=-1) - bound


# ----- registration: both factors ------------------------------------------------------------
def _register(factor, plate: bool) -> None:
    """The operators and evidence of ``factor`` (the vector form, or the plate form)."""

    @factor.operator("ep", "sample", skip_if_uniform=("logits",), proper=("logits",),
                     method=_EP_METHOD)
    def sample_ep(logits) -> Discrete:
        return _ep_sample(logits, plate)

    if plate:
        @factor.operator("ep", "logits", skip_if_uniform=("sample", "logits"),
                         proper=("logits",), method=_PLATE_EP_METHOD)
        def logits_ep_plate(sample, logits, *, previous=None, state=None) -> Any:
            return _extrapolated(_ep_logits(sample, logits, plate), previous, state)
    else:
        @factor.operator("ep", "logits", skip_if_uniform=("sample", "logits"),
                         proper=("logits",), method=_EP_METHOD)
        def logits_ep(sample, logits) -> Any:
            return _ep_logits(sample, logits, plate)

    @factor.evidence_operator("ep")
    def log_average_factor(sample, logits) -> np.ndarray:
        return _ep_evidence(sample, logits, plate)

    @factor.operator("vmp", "sample", skip_if_uniform=("logits",),
                     method="VMP: log-probabilities E[eta] (Bohning's bound)")
    def sample_vmp(logits) -> Discrete:
        return _vmp_sample(logits, plate)

    @factor.operator("vmp", "logits", skip_if_uniform=("sample",), proper=("logits",),
                     method=_VMP_METHOD + (" (separable: 1/2 I)" if plate else ""))
    def logits_vmp(sample, logits) -> Any:
        return _vmp_logits(sample, logits, plate)

    @factor.evidence_operator("vmp")
    def average_log_factor(sample, logits) -> np.ndarray:
        return _vmp_evidence(sample, logits, plate)


_register(SOFTMAX, plate=False)
_register(SOFTMAX_PLATE, plate=True)
