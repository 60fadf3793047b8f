"""PlateSum(sum | array): the sum of a plate of real variables, ``ff.sum(x, n)``.

log f = log δ(sum − Σ_i x_i), the array's last plate axis summed (Infer.NET's FastSumOp).

EP (exact): forward N(Σ m_i, Σ v_i) from the messages x_i → factor; backward to x_i
N(m_s − Σ_{j≠i} m_j, v_s + Σ_{j≠i} v_j), with (m_s, v_s) the sum's message (uniform where
another element's message is).

VMP: forward, the sum's distribution under q: N(Σ E[x_i], Σ Var[x_i]).  Backward, the
elements are coupled through (Σ x)², so Winn's message to x_i, (h − τ Σ_{j≠i} E[x_j], τ)
from the sum's message (h, τ), updates them as a Jacobi step, which diverges for a large
plate.  The operator instead sends each x_i the message (h − τ Σ_{j≠i} μ_j, τ) at the
optimum μ of the whole block of elements given the rest of the model (each x_i's other
messages (η_i, p_i) = q(x_i) / its previous message): the means of the Gaussian with
precision diag(p) + τ 1 1ᵀ and linear term η + h 1, by Sherman–Morrison in O(n).  That is
coordinate ascent on the block, so the bound never falls, and its fixed point is Winn's.

Several sums of one plate's elements (``PlateSums``, VMP).  With m sums s_k = Σ_i c_ki x_i
of the same elements x (``ff.sum(x, n)``, ``ff.sum(c * x, n)``), each sum's own block
update would take the others' messages into x as part of x's other messages: the
coupling τ_j (Σ c_j x)² of another sum linearised at the old means, whose optimum is
not the bound's (the bound fell by 2.2e-3, test_regressions16).  The exact coordinate
ascent step updates q(x) = Π_i N(μ_i, v_i) over all m sums at once.  Derivation: with
x's other messages (η_i, p_i) (everything but the sums) and each sum's message
(h_k, τ_k), the terms of the bound that depend on q(x) are

    Σ_i [η_i μ_i − p_i (μ_i² + v_i)/2 + ½ log v_i]
      + Σ_k [h_k c_k·μ − τ_k ((c_k·μ)² + Σ_i c_ki² v_i)/2],

since E_q[s_k] = c_k·μ and Var_q[s_k] = Σ_i c_ki² v_i under the mean field.  They
separate: v_i = 1/(p_i + Σ_k τ_k c_ki²), whatever μ, and μ maximises a quadratic with
precision A = diag(p) + C T Cᵀ (C = [c_1 … c_m], n × m; T = diag(τ)) and linear term
b = η + C h, so μ = A⁻¹ b.  By Woodbury, with D = diag(p), W = D⁻¹ C and r = D⁻¹ b,

    μ = r − W (I + T Cᵀ W)⁻¹ T Cᵀ r,

an m × m solve per outer element, O(n m²) in all; written as T^½ (I + T^½ CᵀW T^½)⁻¹
T^½ in place of (I + T CᵀW)⁻¹ T, the system is positive definite (also where some
τ_k = 0) and solved by Cholesky.  The update sends the elements, in one statement, the
product of the sums' messages at that μ, Winn's message of each sum at the new means:

    precision Σ_k τ_k c_ki²,   linear term Σ_k c_ki (h_k − τ_k (c_k·μ − c_ki μ_i));

with x's other messages the posterior is then exactly N(μ_i, v_i) (the linear term
plus η_i is (p_i + Σ_k τ_k c_ki²) μ_i by A μ = b), the block's optimum: coordinate
ascent, with Winn's fixed point.  The statement runs on the first sum's array a = c_1 x
(an unscaled sum's where there is one: ``transforms.messages``), reading q(a) and the
message it sent last (``previous``), so its c_k are the ratios c_k / c_1 (ScaleBy's
scales are non-zero), and the other sums send their arrays nothing (uniform).  With
one sum (m = 1) this is the update above, Sherman–Morrison's; ``PlateSum`` keeps it.
"""

from __future__ import annotations

import inspect

import numpy as np

from factorflow.distributions import Gaussian
from factorflow.distributions.base import traced
from factorflow.distributions.moments import gaussian_moments, is_known
from factorflow.factors.arithmetic import _linear_evidence
from factorflow.factors.common import broadcast_naturals, times_finite, unsupported
from factorflow.factors.registry import define_factor


def _log_density(sum, array):
    return np.where(np.asarray(sum) == np.sum(array, axis=-1), 0.0, -np.inf)


PLATE_SUM = define_factor("PlateSum", ("sum", "real"), ("array", "real"), deterministic=True,
                          log_density=_log_density)


def _gaussian(mean, var) -> Gaussian:
    """N(mean, var), uniform where var is infinite."""
    with np.errstate(divide="ignore"):
        prec = 1.0 / np.asarray(var, float)
    return Gaussian.from_natural(np.where(mean == 0, 0.0, times_finite(prec, mean)), prec)


def _last(axes: int) -> int | tuple[int, ...]:
    """The last ``axes`` axes: the summed plates."""
    return -1 if axes == 1 else tuple(range(-axes, 0))


def _forward_moments(array, axes: int = 1) -> tuple[np.ndarray, np.ndarray]:
    m, v = gaussian_moments(array)
    return (np.sum(m, axis=_last(axes)),
            np.sum(np.broadcast_to(v, np.shape(m)), axis=_last(axes)))


def _forward(array, axes: int = 1) -> Gaussian:
    if is_known(array):
        raise unsupported("PlateSum", "message passing", "cannot send a message to 'sum': "
                          "the known array determines it exactly; observe it.")
    return _gaussian(*_forward_moments(array, axes))


@PLATE_SUM.operator("ep", "sum", skip_if_uniform=("array",))
def _sum_ep(array) -> Gaussian:
    """N(Σ m_i, Σ v_i): exact."""
    return _forward(array)


@PLATE_SUM.operator("ep", "array", skip_if_uniform=("sum",))
def _array_ep(sum, array) -> Gaussian:
    """N(m_s − Σ_{j≠i} m_j, v_s + Σ_{j≠i} v_j): exact; uniform where another element's
    message is uniform."""
    ms, vs = gaussian_moments(sum)
    m, v = gaussian_moments(array)
    v = np.broadcast_to(v, np.shape(m))
    flat = np.isinf(v)
    finite = np.where(flat, 0.0, v)
    others_flat = np.sum(flat, axis=-1, keepdims=True) - flat > 0
    mean = np.asarray(ms)[..., None] - (np.sum(m * ~flat, axis=-1, keepdims=True)
                                        - m * ~flat)
    var = np.where(others_flat, np.inf, np.asarray(vs)[..., None]
                   + np.sum(finite, axis=-1, keepdims=True) - finite)
    return _gaussian(np.where(others_flat, 0.0, mean), var)


@PLATE_SUM.evidence_operator("ep")
def _log_average_factor(sum, array) -> np.ndarray:
    """log ∫ w_sum(Σ x) Π m_i."""
    if is_known(array):
        total = np.sum(np.asarray(array, float), axis=-1)
        return _log_density(sum, array) if is_known(sum) else sum.log_prob(total)
    mean, var = _forward_moments(array)
    return _linear_evidence(sum, mean, var, array)


@PLATE_SUM.operator("vmp", "sum", skip_if_uniform=("array",), trigger=("array",))
def _sum_vmp(array) -> Gaussian:
    """The sum's distribution under q: N(Σ E[x_i], Σ Var[x_i])."""
    return _forward(array)


@PLATE_SUM.operator("vmp", "array", skip_if_uniform=("sum",))
def _array_vmp(sum, array, *, previous: Gaussian | None = None) -> Gaussian:
    """(h − τ Σ_{j≠i} μ_j, τ) with μ the optimum of the block of elements given their
    other messages q(x_i) / ``previous`` (see the module docstring)."""
    return _block_message(sum, array, previous, 1)


def _block_message(sum, array, previous: Gaussian | None, axes: int,
                   weights: Gaussian | None = None) -> Gaussian:
    """``_array_vmp`` for the sum over the last ``axes`` axes of ``array``: the block is
    every element summed (Sherman–Morrison over all of them); with ``weights`` (q of a
    latent w, one per element), for the sum of w · array (``PlateInner``)."""
    if is_known(sum):
        raise unsupported("PlateSum", "vmp", "does not support an observed sum (the "
                          "message to an element would be a point mass); use EP.")
    h, tau = (np.asarray(e)[(...,) + (None,) * axes] for e in sum.eta)
    eta, p = array.eta
    if previous is not None:
        eta, p = eta - previous.eta[0], p - previous.eta[1]
    last = _last(axes)
    with np.errstate(divide="ignore", invalid="ignore"):
        if weights is None:
            b = eta + h
            spread = np.sum(1.0 / p, axis=last, keepdims=True)
            mu = (b - tau * np.sum(b / p, axis=last, keepdims=True) / (1 + tau * spread)) / p
        else:  # precision diag(p + τ Var w) + τ E[w] E[w]ᵀ, linear term η + h E[w]
            e, v = gaussian_moments(weights)
            d = p + tau * v
            b = eta + h * e
            mu = (b - tau * e * np.sum(e * b / d, axis=last, keepdims=True)
                  / (1 + tau * np.sum(e * e / d, axis=last, keepdims=True))) / d
    finite = np.all(np.isfinite(mu))
    if traced():  # (the same choice, made on the device)
        mu = np.where(finite, mu, gaussian_moments(array)[0])
    elif not finite:  # an element with no other proper message: Winn's
        mu = gaussian_moments(array)[0]  # Jacobi step from the current means
    if weights is None:
        total = np.sum(mu, axis=last, keepdims=True)
        return Gaussian.from_natural(*broadcast_naturals(h - tau * (total - mu), tau))
    total = np.sum(e * mu, axis=last, keepdims=True)
    return Gaussian.from_natural(*broadcast_naturals(e * (h - tau * (total - e * mu)),
                                                     tau * (e * e + v)))


# ----- a sum over several plates: Σ_k Σ_n x[k, n] (VMP) -----------------------------------
# ``transforms.linear_sums`` writes a sum over an outer plate of sums (``ff.sum(s, k)``, s
# = ``ff.sum(x + z, n)`` split into Σ_n x + Σ_n z) as sums of each variable over both
# plates at once, ``MultiPlateSum(array=x[k, n], axes=2)``: the block update of the sum
# over n, above, with every element summed in the block.  Nested, the outer sum's update
# of s's elements would read q(s) / its previous message as their other messages, but q
# of a derived sum is its distribution under q, N(Σ E x, Σ Var x), and the quotient has
# precision 1 / Σ_n Var x_n − τ where s's other messages have 1 / Σ_n (1 / p_n) (p_n: the
# elements' other precisions): a step with the wrong curvature (negative for N = 3,
# p = 1, τ = 3), consistent at the fixed point but no coordinate ascent, which diverged
# (NaN) where two variables' sums meet (test_linear_sums).
MULTI_PLATE_SUM = define_factor(
    "MultiPlateSum", ("sum", "real"), ("array", "real"), ("axes", "count"),
    deterministic=True, log_density=lambda sum, array, axes: np.where(
        np.asarray(sum) == np.sum(array, axis=_last(int(axes))), 0.0, -np.inf))


@MULTI_PLATE_SUM.operator("vmp", "sum", skip_if_uniform=("array",), trigger=("array",))
def _multi_sum_vmp(array, axes) -> Gaussian:
    """The sum's distribution under q: N(Σ E[x_i], Σ Var[x_i]) over the last ``axes``
    axes."""
    return _forward(array, int(axes))


@MULTI_PLATE_SUM.operator("vmp", "array", skip_if_uniform=("sum",))
def _multi_array_vmp(sum, array, axes, *, previous: Gaussian | None = None) -> Gaussian:
    """(h − τ Σ_{j≠i} μ_j, τ) with μ the optimum of the block of all the elements summed
    (over the last ``axes`` axes) given their other messages q(x_i) / ``previous``:
    coordinate ascent on that block, with Winn's fixed point."""
    return _block_message(sum, array, previous, int(axes))


# ----- several sums of one plate's elements: one block update (VMP) ---------------------
#: the most sums of one variable's elements that one ``PlateSums`` statement updates
MAX_SUMS = 8

#: ``sum``/``scale`` for the first sum (its array is the statement's target), then
#: ``sum{k}``/``scale{k}`` for the others; a scale left out is 1 (the elements themselves)
_PARTS = ("sum", "scale") + tuple(f"{part}{k}" for k in range(1, MAX_SUMS)
                                  for part in ("sum", "scale"))

PLATE_SUMS = define_factor("PlateSums", ("array", "real"),
                           *((name, "real") for name in _PARTS), deterministic=True)


def _sums_vmp(*, array: Gaussian, previous: Gaussian | None = None,
              **parts: object) -> Gaussian:
    """The product of every sum's message to the elements at the block optimum μ of
    q(x) over all the sums (see the module docstring): the first sum's array a reads
    q(a) / ``previous`` as its other messages; sum k (``sum``, ``sum1``, …) sums
    ``scale{k}`` · x, that is (``scale{k}`` / ``scale``) · a."""
    parts = {name: value for name, value in parts.items() if value is not None}
    eta, p = array.eta
    if previous is not None:
        eta, p = eta - previous.eta[0], p - previous.eta[1]
    shape = np.broadcast_shapes(np.shape(eta), np.shape(p))
    first = gaussian_moments(parts["scale"])[0] if "scale" in parts else 1.0
    sums = [("sum", "scale")] + [(f"sum{k}", f"scale{k}") for k in range(1, MAX_SUMS)
                                 if f"sum{k}" in parts]
    d = np.stack([np.broadcast_to(gaussian_moments(parts[scale])[0] / first
                                  if scale in parts else np.ones(()), shape)
                  for _, scale in sums], axis=-1)  # (..., n, m): the c_k over a
    h, tau = (np.stack([np.asarray(parts[s].eta[j]) for s, _ in sums], axis=-1)
              for j in (0, 1))  # (..., m)
    with np.errstate(divide="ignore", invalid="ignore"):
        b = eta + np.einsum("...nk,...k->...n", d, h)
        w, r = d / p[..., None], b / p  # W = D⁻¹ C, r = D⁻¹ b
        # (I + T CᵀW)⁻¹ T = T^½ (I + T^½ CᵀW T^½)⁻¹ T^½: a positive definite system
        root = np.sqrt(tau)
        system = np.eye(len(sums)) + root[..., :, None] * np.einsum(
            "...nk,...nj->...kj", d, w) * root[..., None, :]
        y = _positive_definite_solve(system, root * np.einsum("...nk,...n->...k", d, r))
        mu = r - np.einsum("...nk,...k->...n", w, root * y)
    finite = np.all(np.isfinite(mu))
    if traced():  # (the same choice, made on the device)
        mu = np.where(finite, mu, gaussian_moments(array)[0])
    elif not finite:  # an element with no other proper message: Winn's
        mu = gaussian_moments(array)[0]  # Jacobi step from the current means
    s = np.einsum("...nk,...n->...k", d, mu)  # each sum's mean c_k·μ
    precision = np.einsum("...k,...nk->...n", tau, d * d)
    linear = np.einsum("...nk,...nk->...n", d,
                       h[..., None, :] - tau[..., None, :] * (s[..., None, :] - d * mu[..., None]))
    return Gaussian.from_natural(*broadcast_naturals(linear, precision))


def _positive_definite_solve(matrix, vector):
    """matrix⁻¹ vector for a stack (leading axes) of small positive definite m × m
    matrices, by Cholesky written out over m: elementwise array operations only, so
    that chunked (Dask) and traced (JAX) arrays take it as NumPy's do."""
    m = np.shape(matrix)[-1]
    low: list[list] = [[None] * m for _ in range(m)]
    for i in range(m):
        for j in range(i + 1):
            rest = matrix[..., i, j] - sum(low[i][k] * low[j][k] for k in range(j))
            low[i][j] = np.sqrt(rest) if i == j else rest / low[j][j]
    forward: list = []
    for i in range(m):
        forward.append((vector[..., i] - sum(low[i][k] * forward[k] for k in range(i)))
                       / low[i][i])
    out: list = [None] * m
    for i in reversed(range(m)):
        out[i] = (forward[i] - sum(low[k][i] * out[k] for k in range(i + 1, m))) / low[i][i]
    return np.stack(out, axis=-1)


# the signature the registry and the generated call read: array, the sums and scales
# by name (each optional past the first sum), then ``previous``
_sums_vmp.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [inspect.Parameter("array", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    + [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                         default=inspect.Parameter.empty if name == "sum" else None)
       for name in _PARTS]
    + [inspect.Parameter("previous", inspect.Parameter.KEYWORD_ONLY, default=None)])
PLATE_SUMS.operator("vmp", "array", skip_if_uniform=_PARTS[::2], method=(
    "one block update of the elements over every sum of them: the mean-field optimum "
    "by Woodbury (rank = the number of sums)"))(_sums_vmp)


# ----- the sum of a product of two latent plates: Σ_n x[n] w[n] (VMP) -------------------
# PlateInner(sum | a, b): ``transforms.linear_sums`` writes ``ff.sum(x * w, n)`` with x and
# w latent per element as this one factor.  Under the mean field the terms of the bound
# in q(x) given q(w) and the sum's message (h, τ) are
#
#     Σ_i [η_i μ_i − p_i (μ_i² + v_i)/2 + ½ log v_i] + h E[w]·μ
#       − τ/2 [μᵀ (E[w] E[w]ᵀ + diag Var w) μ + Σ_i v_i E[w_i²]]
#
# (E[(Σ x w)²] = Σ_i E[x_i²] E[w_i²] + Σ_{i≠j} E[x_i] E[w_i] E[x_j] E[w_j]), with (η_i, p_i)
# x_i's other messages, q(x_i) / this factor's previous one.  So v_i = 1 / (p_i + τ E[w_i²])
# and μ maximises a quadratic with precision diag(p + τ Var w) + τ E[w] E[w]ᵀ and linear
# term η + h E[w]: Sherman–Morrison, the block update of ``_array_vmp`` with the elements
# weighted by E[w] and their precisions raised by τ Var w.  The message that makes q(x)
# that optimum is Winn's at μ: (E[w_i] (h − τ Σ_{j≠i} E[w_j] μ_j), τ E[w_i²]).  The same
# for w given q(x).  Each update is the exact optimum of its block given the rest:
# coordinate ascent, the bound never falls; a parallel update of every x_i with Winn's
# messages (the Product's, then PlateSum's) would be a Jacobi step, which diverged.
# Forward, the sum's distribution under q: N(Σ E[x] E[w], Σ Var[x w]).
PLATE_INNER = define_factor(
    "PlateInner", ("sum", "real"), ("a", "real"), ("b", "real"), deterministic=True,
    log_density=lambda sum, a, b: np.where(
        np.asarray(sum) == np.sum(np.multiply(a, b), axis=-1), 0.0, -np.inf))


@PLATE_INNER.operator("vmp", "sum", skip_if_uniform=("a", "b"), trigger=("a", "b"))
def _inner_sum_vmp(a, b) -> Gaussian:
    """N(Σ E[a] E[b], Σ (E[b]² Var a + E[a]² Var b + Var a Var b))."""
    (ma, va), (mb, vb) = gaussian_moments(a), gaussian_moments(b)
    var = times_finite(mb * mb, va) + times_finite(ma * ma, vb) + times_finite(va, vb)
    mean = ma * mb
    return _gaussian(np.sum(mean, axis=-1),
                     np.sum(np.broadcast_to(var, np.shape(mean)), axis=-1))


@PLATE_INNER.operator("vmp", "a", skip_if_uniform=("sum",), proper=("b",))
def _inner_a_vmp(sum, a, b, *, previous: Gaussian | None = None) -> Gaussian:
    """The block optimum of a's elements given q(b) (see above)."""
    return _block_message(sum, a, previous, 1, weights=b)


@PLATE_INNER.operator("vmp", "b", skip_if_uniform=("sum",), proper=("a",))
def _inner_b_vmp(sum, a, b, *, previous: Gaussian | None = None) -> Gaussian:
    """The block optimum of b's elements given q(a) (see above)."""
    return _block_message(sum, b, previous, 1, weights=a)
