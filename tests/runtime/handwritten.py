"""Hand-written vectorised NumPy message passing, the references of the schedule tests
and of ``benchmarks/convergence.py``: written without factorflow (only its truncated
normal moments, tested against SciPy in ``tests/factors/test_compare.py``).

* EP TrueSkill: ``skill[winner]``, ``skill[loser]`` (prior N(25, 70)), performance noise of
  variance 16, ``constrain_true(pw > pl)``; a parallel sweep gathers the skills, divides
  out each game's messages (cavities), computes the truncated-Gaussian moments of every
  game at once and scatters the new messages back with ``np.bincount``.
* VMP Gaussian mixture (3 components, unit precision, Dirichlet(1) weights, means
  N(0, 100)): coordinate ascent, weights -> responsibilities -> means.
* Chains: a 3-state HMM with known transitions and emissions (scaled forward–backward,
  one t at a time) and a 1-D linear-Gaussian state-space model (Kalman filter and RTS
  smoother): exact in one pass.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
from scipy import special

import factorflow as ff
from factorflow.factors.compare import truncated_normal_moments

PRIOR_MEAN, PRIOR_VAR, NOISE_VAR = 25.0, 70.0, 16.0

Trace = list[tuple[np.ndarray, np.ndarray]]  # (means, variances) after each sweep


# ----- TrueSkill ------------------------------------------------------------------
def trueskill_games(players: int, games: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(winner, loser) of ``games`` random pairings, outcomes drawn from true skills."""
    rng = np.random.default_rng(seed)
    true = rng.normal(PRIOR_MEAN, 5.0, players)
    a, b = rng.integers(0, players, games), rng.integers(0, players, games)
    keep = a != b
    a, b = a[keep], b[keep]
    a_wins = true[a] + rng.normal(0, 4, a.size) > true[b] + rng.normal(0, 4, b.size)
    return np.where(a_wins, a, b), np.where(a_wins, b, a)


def trueskill_model(players: int, winner: np.ndarray, loser: np.ndarray) -> ff.Model:
    with ff.Model("trueskill") as model:
        with ff.Plate(ff.Range("player", players)):
            skill = ff.Gaussian("skill", PRIOR_MEAN, variance=PRIOR_VAR)
        with ff.Plate(ff.Range("game", winner.size)):
            pw = ff.Gaussian("pw", skill[winner], variance=NOISE_VAR)
            pl = ff.Gaussian("pl", skill[loser], variance=NOISE_VAR)
            ff.constrain_true(pw > pl)
    return model


def trueskill_ep(players: int, winner: np.ndarray, loser: np.ndarray, sweeps: int,
                 stop: float | None = None) -> Trace:
    """Parallel EP by hand, ``sweeps`` sweeps, or fewer once ``settled(trace, stop)``."""
    n = winner.size
    tau0, h0 = 1 / PRIOR_VAR, PRIOR_MEAN / PRIOR_VAR
    tw, hw, tl, hl = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    trace: Trace = []
    tau, h = np.full(players, tau0), np.full(players, h0)
    for _ in range(sweeps):
        cw_t, cl_t = tau[winner] - tw, tau[loser] - tl        # cavities (natural)
        cw_v, cl_v = 1 / cw_t, 1 / cl_t
        cw_m, cl_m = (h[winner] - hw) * cw_v, (h[loser] - hl) * cl_v
        v = cw_v + cl_v + 2 * NOISE_VAR                        # d = pw - pl > 0
        s = np.sqrt(v)
        z = (cw_m - cl_m) / s
        excess, var_x = truncated_normal_moments(-z)           # X > -z, X ~ N(0, 1)
        step, shrink = excess - z, 1 - var_x                   # d's tilted moments
        mw, vw = cw_m + cw_v / s * step, cw_v - cw_v**2 / v * shrink
        ml, vl = cl_m - cl_v / s * step, cl_v - cl_v**2 / v * shrink
        tw, hw = 1 / vw - cw_t, mw / vw - cw_m * cw_t
        tl, hl = 1 / vl - cl_t, ml / vl - cl_m * cl_t
        tau = tau0 + np.bincount(winner, tw, players) + np.bincount(loser, tl, players)
        h = h0 + np.bincount(winner, hw, players) + np.bincount(loser, hl, players)
        trace.append((h / tau, 1 / tau))
        if stop is not None and settled(trace, stop):
            break
    return trace


# ----- Gaussian mixture (VMP) -----------------------------------------------------
MIX_K, MIX_PRIOR_VAR = 3, 100.0
MIX_INIT = np.array([0.0, 5.0, 10.0])


def mixture_data(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(rng.choice([1.0, 4.0, 9.0], n), 1.0)


def mixture_model(x: np.ndarray) -> ff.Model:
    with ff.Model("mixture") as model:
        k = ff.Range("k", MIX_K)
        weights = ff.Dirichlet("weights", np.ones(MIX_K))
        with ff.Plate(k):
            means = ff.Gaussian("means", 0.0, variance=MIX_PRIOR_VAR)
        with ff.Plate(ff.Range("n", x.size)):
            z = ff.Discrete("z", weights)
            with ff.Switch(z):
                ff.Gaussian("x", means[z], precision=1.0, observed=x)
    return model


def mixture_vmp(x: np.ndarray, sweeps: int, stop: float | None = None) -> Trace:
    """Coordinate ascent by hand, in factorflow's order: responsibilities from the
    initial means and the prior weights, then per sweep weights, responsibilities, means;
    stops early as ``trueskill_ep``."""
    m, v = MIX_INIT.copy(), np.ones(MIX_K)

    def responsibilities(elog_w: np.ndarray) -> np.ndarray:
        logr = elog_w - 0.5 * ((x[:, None] - m) ** 2 + v)
        return np.exp(logr - special.logsumexp(logr, axis=1, keepdims=True))

    r = responsibilities(special.digamma(np.ones(MIX_K)) - special.digamma(MIX_K))
    trace: Trace = []
    for _ in range(sweeps):
        alpha = 1.0 + r.sum(0)
        r = responsibilities(special.digamma(alpha) - special.digamma(alpha.sum()))
        prec = 1 / MIX_PRIOR_VAR + r.sum(0)
        m, v = (r * x[:, None]).sum(0) / prec, 1 / prec
        trace.append((m.copy(), v.copy()))
        if stop is not None and settled(trace, stop):
            break
    return trace


# ----- the sprinkler network (loopy EP = loopy belief propagation) -----------------
#: P(sprinkler | cloudy), P(rain | cloudy) for cloudy true, false; P(wet | sprinkler, rain)
SPRINKLER_CPT = {"sprinkler": (0.1, 0.5), "rain": (0.8, 0.2),
                 "wet": {(1, 1): 0.99, (1, 0): 0.9, (0, 1): 0.9, (0, 0): 0.0}}


def sprinkler_model(cloudy_observed: bool | None = None) -> ff.Model:
    """cloudy -> sprinkler, rain -> wet grass (observed wet), written with gates."""
    cpt = SPRINKLER_CPT
    with ff.Model("sprinkler") as model:
        cloudy = ff.Bernoulli("cloudy", 0.5, observed=cloudy_observed)
        with ff.If(cloudy):
            sprinkler = ff.Bernoulli("sprinkler", cpt["sprinkler"][0])
            rain = ff.Bernoulli("rain", cpt["rain"][0])
        with ff.IfNot(cloudy):
            sprinkler = ff.Bernoulli("sprinkler", cpt["sprinkler"][1])
            rain = ff.Bernoulli("rain", cpt["rain"][1])
        for s_gate, s in ((ff.If, 1), (ff.IfNot, 0)):
            with s_gate(sprinkler):
                for r_gate, r in ((ff.If, 1), (ff.IfNot, 0)):
                    with r_gate(rain):
                        ff.Bernoulli("wet", cpt["wet"][(s, r)], observed=True)
    return model


def sprinkler_bp(sweeps: int, stop: float | None = None) -> Trace:
    """Loopy belief propagation on the factor graph p(c) p(s|c) p(r|c) p(w=1|s,r), by hand:
    each sweep updates the factors' messages in turn (p(s|c), p(r|c), p(w|s,r)), each
    factor from the current messages into it.  The trace holds P(true) and its
    Bernoulli variance for (cloudy, sprinkler, rain)."""
    cpt = SPRINKLER_CPT
    prior_c = np.array([0.5, 0.5])  # index 0: true, 1: false
    ps = np.array([[cpt["sprinkler"][0], 1 - cpt["sprinkler"][0]],
                   [cpt["sprinkler"][1], 1 - cpt["sprinkler"][1]]])  # [c, s]
    pr = np.array([[cpt["rain"][0], 1 - cpt["rain"][0]],
                   [cpt["rain"][1], 1 - cpt["rain"][1]]])  # [c, r]
    pw = np.array([[cpt["wet"][(1, 1)], cpt["wet"][(1, 0)]],
                   [cpt["wet"][(0, 1)], cpt["wet"][(0, 0)]]])  # [s, r]
    one = np.ones(2)
    s_to_c, s_to_s, r_to_c, r_to_r, w_to_s, w_to_r = (one.copy() for _ in range(6))

    def norm(v: np.ndarray) -> np.ndarray:
        return v / v.sum()

    trace: Trace = []
    for _ in range(sweeps):
        s_to_c = norm(ps @ w_to_s)                       # sum_s p(s|c) m_{s->S}(s)
        s_to_s = norm((prior_c * r_to_c) @ ps)           # sum_c m_{c->S}(c) p(s|c)
        r_to_c = norm(pr @ w_to_r)
        r_to_r = norm((prior_c * s_to_c) @ pr)
        w_to_s = norm(pw @ r_to_r)
        w_to_r = norm(s_to_s @ pw)
        beliefs = [norm(prior_c * s_to_c * r_to_c), norm(s_to_s * w_to_s),
                   norm(r_to_r * w_to_r)]
        p = np.array([b[0] for b in beliefs])
        trace.append((p, p * (1 - p)))
        if stop is not None and settled(trace, stop):
            break
    return trace


# ----- chains: a 3-state HMM and a 1-D linear-Gaussian state-space model --------------
HMM_K, HMM_V = 3, 4
HMM_TRANS = 0.8 * np.eye(HMM_K) + 0.1 * (1 - np.eye(HMM_K))
SSM_P0, SSM_Q, SSM_R = 0.01, 1.0, 1.0  # start precision, step precision, noise precision


def hmm_data(t_len: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(emission matrix (K, V), observations (T,)) of a chain drawn from the HMM."""
    rng = np.random.default_rng(seed)
    emission = rng.dirichlet(np.ones(HMM_V), size=HMM_K)
    x = np.empty(t_len, int)
    x[0] = rng.integers(HMM_K)
    for t in range(1, t_len):
        x[t] = rng.choice(HMM_K, p=HMM_TRANS[x[t - 1]])
    obs = np.array([rng.choice(HMM_V, p=emission[k]) for k in x])
    return emission, obs


def hmm_model(emission: np.ndarray, obs: np.ndarray) -> ff.Model:
    """x[0] ~ uniform, x[t] ~ HMM_TRANS[x[t − 1]], y[t] ~ emission[x[t]] (observed)."""
    with ff.Model("hmm") as model:
        t = ff.Range("t", obs.size)
        with ff.Plate(t):
            with ff.If(t == 0):
                x = ff.Discrete("x", np.full(HMM_K, 1.0 / HMM_K))
            with ff.If(t > 0):
                x = ff.Discrete("x", ff.Constant(HMM_TRANS)[x[t - 1]])
            with ff.Switch(x):
                ff.Discrete("y", ff.Constant(emission)[x], observed=obs)
    return model


def forward_backward_by_hand(pi: np.ndarray, trans: np.ndarray, lik: np.ndarray
                             ) -> np.ndarray:
    """One scaled forward–backward pass (Rabiner), one t at a time: q(x[t]) (T, K) of the
    chain with start ``pi``, transitions ``trans`` and likelihoods ``lik`` (T, K)."""
    t_len, k = lik.shape
    alpha, beta = np.empty((t_len, k)), np.ones((t_len, k))
    a = pi * lik[0]
    alpha[0] = a / a.sum()
    for t in range(1, t_len):
        a = (alpha[t - 1] @ trans) * lik[t]
        alpha[t] = a / a.sum()
    for t in range(t_len - 2, -1, -1):
        b = trans @ (lik[t + 1] * beta[t + 1])
        beta[t] = b / b.sum()
    q = alpha * beta
    return q / q.sum(axis=1, keepdims=True)


def hmm_forward_backward(emission: np.ndarray, obs: np.ndarray, sweeps: int) -> Trace:
    """``forward_backward_by_hand`` on the HMM: the exact marginals in one pass, repeated
    ``sweeps`` times; the trace holds the mean and variance of the state's index under
    q(x[t]) (what factorflow's Discrete posterior reports)."""
    index = np.arange(HMM_K)
    trace: Trace = []
    for _ in range(sweeps):
        q = forward_backward_by_hand(np.full(HMM_K, 1.0 / HMM_K), HMM_TRANS,
                                     emission[:, obs].T)
        mean = q @ index
        trace.append((mean, q @ index**2 - mean**2))
    return trace


def ssm_data(t_len: int, seed: int = 0) -> np.ndarray:
    """Observations y[t] = x[t] + noise of a Gaussian random walk x."""
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.normal(size=t_len)) + rng.normal(size=t_len)


def ssm_model(y: np.ndarray) -> ff.Model:
    """x[0] ~ N(0, 1/SSM_P0), x[t] ~ N(x[t − 1], 1/SSM_Q), y[t] ~ N(x[t], 1/SSM_R)."""
    with ff.Model("ssm") as model:
        t = ff.Range("t", y.size)
        with ff.Plate(t):
            with ff.If(t == 0):
                x = ff.Gaussian("x", 0.0, precision=SSM_P0)
            with ff.If(t > 0):
                x = ff.Gaussian("x", x[t - 1], precision=SSM_Q)
            ff.Gaussian("y", x, precision=SSM_R, observed=y)
    return model


def rts_by_hand(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Kalman filter and Rauch–Tung–Striebel smoother by hand, one t at a time: the
    posterior means and variances of x[t] in the state-space model of ``ssm_model``."""
    t_len = y.size
    mf, vf, mp, vp = (np.empty(t_len) for _ in range(4))
    m, v = 0.0, 1.0 / SSM_P0
    for t in range(t_len):
        mp[t], vp[t] = m, v
        gain = v / (v + 1.0 / SSM_R)
        mf[t], vf[t] = m + gain * (y[t] - m), (1 - gain) * v
        m, v = mf[t], vf[t] + 1.0 / SSM_Q
    ms, vs = mf.copy(), vf.copy()
    for t in range(t_len - 2, -1, -1):
        g = vf[t] / vp[t + 1]
        ms[t] = mf[t] + g * (ms[t + 1] - mp[t + 1])
        vs[t] = vf[t] + g * g * (vs[t + 1] - vp[t + 1])
    return ms, vs


def ssm_rts(y: np.ndarray, sweeps: int) -> Trace:
    """``rts_by_hand``: the exact posteriors in one pass, repeated ``sweeps`` times."""
    return [rts_by_hand(y) for _ in range(sweeps)]


# ----- measuring ---------------------------------------------------------------------
def settled(trace: Trace, stop: float) -> bool:
    """Whether the last step, divided by 1 - r (r: the ratio of the last two steps, the
    rate of a geometric approach), puts the fixed point within ``stop``."""
    if len(trace) < 3:
        return False
    step, before = distance(trace[-1], trace[-2]), distance(trace[-2], trace[-3])
    return step == 0 or (step < before and step / (1 - step / before) < stop)


def distance(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
    return float(max(np.max(np.abs(a[0] - b[0])), np.max(np.abs(a[1] - b[1]))))


def sweeps_within(trace: Trace, ref: tuple[np.ndarray, np.ndarray], tol: float) -> int | None:
    """The first sweep (1-based) after which every later sweep stays within ``tol``."""
    inside = [distance(t, ref) < tol for t in trace]
    if not inside or not inside[-1]:
        return None
    last_out = max((i for i, ok in enumerate(inside) if not ok), default=-1)
    return last_out + 2


def factorflow_trace(model: ff.Model, algorithm: str, name: str | tuple[str, ...],
                     sweeps: int, init: dict | None = None) -> tuple[Trace, float]:
    """The posterior of ``name`` (or of several names, side by side) after each of
    ``sweeps`` sweeps, and seconds per sweep."""
    compiled = model.compile(algorithm, init=list(init or ()))
    trace: Trace = []
    names = (name,) if isinstance(name, str) else name

    def record(i, posteriors, *_):
        qs = [posteriors[n] for n in names]
        trace.append((np.concatenate([np.ravel(np.array(q.mean, float)) for q in qs]),
                      np.concatenate([np.ravel(np.array(q.variance, float)) for q in qs])))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ff.ConvergenceWarning)
        start = time.perf_counter()
        compiled.run(iterations=sweeps, init=init, on_iteration=record, tolerance=None)
        seconds = (time.perf_counter() - start) / sweeps
    return trace, seconds
