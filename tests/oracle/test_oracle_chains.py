"""Random chains over a plate against enumeration and Gaussian conditioning.

A fresh generator (the fixed-structure tests of ``tests/model/test_chains.py`` have one
emission of one family, every datum seen): hidden Markov models with 1-3 states, 0-2
sequences, 0-5 steps, one or two emissions per step drawn from Discrete, Bernoulli and
Gaussian (a precision shared or one per state), each possibly with missing data
(``np.ma.masked_array``), read through ``ff.Switch(x)`` or ``ff.Case(x, k)``, maybe all
under ``ff.If(g)`` of an observed Bernoulli g[s, t], maybe given as ``ff.Data`` and run
again with new observations; and scalar linear-Gaussian chains ``x[t] ~ N(a x[t-1] + b, 1/q)``
with one or two emissions ``y[t] ~ N(c x[t] + d, 1/r)``, possibly masked.

References, written independently of factorflow: the HMM's state marginals and log Z by
enumerating every path (at most 3^5 per sequence); the chain's by conditioning the joint
Gaussian of states and observations (built ancestrally).  With known parameters both
algorithms are exact: marginals and log evidence to 1e-9.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import factorflow as ff

SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


def _mask(draw, s_len, t_len):
    """A missing-data mask (S, T), or None; never every element (refused by design: a
    fully masked observation is a DataError)."""
    if draw(st.integers(0, 9)) >= 4:
        return None
    mask = tuple(tuple(draw(st.booleans()) for _ in range(t_len)) for _ in range(s_len))
    return None if all(all(row) for row in mask) else mask


def _size(spec) -> tuple[int, int]:
    if spec.size is not None:
        return spec.size
    return np.shape(spec.emissions[0][2 if isinstance(spec, HMM) else 3])


def _masked(values, mask, size, dtype=None):
    values = np.asarray(values, dtype).reshape(size)
    if mask is None:
        return values
    return np.ma.masked_array(values, mask=np.asarray(mask, bool).reshape(size))


# ----- hidden Markov models ------------------------------------------------------------------
@dataclass
class HMM:
    pi: tuple
    trans: tuple
    #: (family, parameters, observed (S, T), mask (S, T) or None); Gaussian parameters are
    #: (means, precisions or one precision)
    emissions: tuple
    #: how the emissions read the state: "switch" (``ff.Switch(x)``, ``table[x]``) or
    #: "case" (``ff.Case(x, k)`` for every k, ``table[k]`` in each)
    form: str = "switch"
    #: an observed Bernoulli g[s, t] ~ Bernoulli(p) gating every emission (``ff.If(g)``):
    #: (p, values (S, T)), or None
    gate: tuple | None = None
    #: the observations as ``ff.Data``, run again with these (one (S, T) per emission)
    again: tuple | None = None
    #: (S, T), where S = 0 leaves the observations' tuples without their T
    size: tuple | None = None

    def __str__(self):
        return repr(self)


def _emit(name, family, params, observed, state):
    """One emission reading row ``state`` (the Switch variable, or a case's k)."""
    def row(table):
        return ff.Constant(np.asarray(table))[state] if not isinstance(state, int) else \
            np.asarray(table)[state]
    if family == "Discrete":
        ff.Discrete(name, row(params), observed=observed)
    elif family == "Bernoulli":
        ff.Bernoulli(name, row(params), observed=observed)
    else:
        means, prec = params
        ff.Gaussian(name, row(means), precision=row(prec) if isinstance(prec, tuple)
                    else prec, observed=observed)


def build_hmm(spec: HMM) -> ff.Model:
    s_len, t_len = _size(spec)
    k = len(spec.pi)
    with ff.Model("hmm_oracle") as model:
        s = ff.Range("s", s_len)
        t = ff.Range("t", t_len)
        with ff.Plate(s), ff.Plate(t):
            with ff.If(t == 0):
                x = ff.Discrete("x", np.asarray(spec.pi))
            with ff.If(t > 0):
                x = ff.Discrete("x", ff.Constant(np.asarray(spec.trans))[x[t - 1]])
            gate = None
            if spec.gate is not None:
                g = ff.Bernoulli("g", spec.gate[0], observed=_masked(spec.gate[1], None,
                                                                     (s_len, t_len), bool))
                gate = ff.If(g)
                gate.__enter__()
            observed = []
            for j, (family, _, obs, mask) in enumerate(spec.emissions):
                value = _masked(obs, mask, (s_len, t_len),
                                bool if family == "Bernoulli" else None)
                observed.append(ff.Data(f"d{j}", value) if spec.again is not None else value)
            if spec.form == "switch":
                with ff.Switch(x):
                    for j, (family, params, _, _) in enumerate(spec.emissions):
                        _emit(f"y{j}", family, params, observed[j], x)
            else:
                for state in range(k):
                    with ff.Case(x, state):
                        for j, (family, params, _, _) in enumerate(spec.emissions):
                            _emit(f"y{j}", family, params, observed[j], state)
            if gate is not None:
                gate.__exit__(None, None, None)
    return model


def _likelihood(family, params, value, state):
    if family == "Discrete":
        return params[state][value]
    if family == "Bernoulli":
        return params[state] if value else 1.0 - params[state]
    means, prec = params
    p = prec[state] if isinstance(prec, tuple) else prec
    return np.sqrt(p / (2 * np.pi)) * np.exp(-0.5 * p * (value - means[state]) ** 2)


def enumerate_hmm(spec: HMM, values=None):
    """State marginals (S, T, K) and log Z, by summing over every path (``values``: other
    observations, one (S, T) per emission)."""
    pi, trans = np.asarray(spec.pi), np.asarray(spec.trans)
    k = len(pi)
    s_len, t_len = _size(spec)
    marginals = np.zeros((s_len, t_len, k))
    log_z = 0.0
    emissions = spec.emissions if values is None else [
        (family, params, obs, mask) for (family, params, _, mask), obs
        in zip(spec.emissions, values, strict=True)]
    if t_len == 0:  # no chain elements: nothing observed either
        return marginals, log_z
    for s in range(s_len):
        z = 0.0
        if spec.gate is not None:
            p_g = spec.gate[0]
            log_z += sum(np.log(p_g if v else 1 - p_g) for v in spec.gate[1][s])
        for path in itertools.product(range(k), repeat=t_len):
            p = pi[path[0]] * np.prod([trans[path[t - 1], path[t]] for t in range(1, t_len)])
            for family, params, obs, mask in emissions:
                for t in range(t_len):
                    if spec.gate is not None and not spec.gate[1][s][t]:
                        continue
                    if mask is None or not mask[s][t]:
                        p *= _likelihood(family, params, obs[s][t], path[t])
            z += p
            marginals[s, np.arange(t_len), path] += p
        marginals[s] /= z
        log_z += np.log(z)
    return marginals, log_z


def _probs(draw, k):
    w = np.array([draw(st.integers(1, 6)) for _ in range(k)], float)
    return tuple(np.round(w / w.sum(), 4)[:-1]) + (round(1 - np.round(w / w.sum(), 4)[:-1]
                                                         .sum(), 4),)


def _observations(draw, family, params, s_len, t_len):
    if family == "Discrete":
        one = st.integers(0, len(params[0]) - 1)
    elif family == "Bernoulli":
        one = st.booleans()
    else:
        one = st.sampled_from((-1.7, -0.2, 0.4, 1.1, 2.9))
    return tuple(tuple(draw(one) for _ in range(t_len)) for _ in range(s_len))


@st.composite
def hmm_models(draw):
    k = draw(st.integers(1, 3))
    t_len = draw(st.integers(0, 5))
    s_len = draw(st.integers(0, 2))
    pi = _probs(draw, k)
    trans = tuple(_probs(draw, k) for _ in range(k))
    emissions = []
    for _ in range(draw(st.integers(1, 2))):
        family = draw(st.sampled_from(("Discrete", "Bernoulli", "Gaussian")))
        if family == "Discrete":
            v = draw(st.integers(2, 3))
            params = tuple(_probs(draw, v) for _ in range(k))
        elif family == "Bernoulli":
            params = tuple(draw(st.sampled_from((0.1, 0.3, 0.5, 0.8, 0.9))) for _ in range(k))
        else:
            means = tuple(draw(st.sampled_from((-2.0, -0.5, 0.0, 1.0, 2.5))) for _ in range(k))
            prec = tuple(draw(st.sampled_from((0.5, 1.0, 3.0))) for _ in range(k)) \
                if draw(st.booleans()) else draw(st.sampled_from((0.5, 1.0, 3.0)))
            params = (means, prec)
        obs = _observations(draw, family, params, s_len, t_len)
        emissions.append((family, params, obs, _mask(draw, s_len, t_len)))
    form = draw(st.sampled_from(("switch", "case")))
    gate = None
    if draw(st.integers(0, 9)) < 3:
        gate = (draw(st.sampled_from((0.3, 0.8))),
                tuple(tuple(draw(st.booleans()) for _ in range(t_len)) for _ in range(s_len)))
    again = None
    # (ff.Data refuses a masked array by name: missing data is for observed= values only)
    if all(mask is None for _, _, _, mask in emissions) and draw(st.integers(0, 9)) < 4:
        again = tuple(_observations(draw, family, params, s_len, t_len)
                      for family, params, _, _ in emissions)
    return HMM(pi, trans, tuple(emissions), form, gate, again, (s_len, t_len))


def check_hmm(spec: HMM, algorithm: str) -> list[str]:
    compiled = build_hmm(spec).compile(algorithm)
    out = _compare_hmm(compiled.run(progress=False), *enumerate_hmm(spec), "")
    if spec.again is not None:
        data = {f"d{j}": _masked(obs, mask, _size(spec),
                                 bool if family == "Bernoulli" else None)
                for j, ((family, _, _, mask), obs) in enumerate(zip(spec.emissions,
                                                                    spec.again, strict=True))}
        out += _compare_hmm(compiled.run(data=data, progress=False),
                            *enumerate_hmm(spec, spec.again), "run again: ")
    return out


def _compare_hmm(result, marginals, log_z, label):
    out = []
    probs = np.asarray(result["x"].probs)
    if probs.shape != marginals.shape or not np.allclose(probs, marginals, rtol=1e-9,
                                                          atol=1e-9):
        out.append(f"{label}x: marginals {probs.tolist()} != {marginals.tolist()}")
    if not np.isclose(result.log_evidence, log_z, rtol=1e-9, atol=1e-9):
        out.append(f"{label}log evidence {result.log_evidence} != log Z {log_z}")
    return out


# ----- linear-Gaussian chains ------------------------------------------------------------
@dataclass
class Chain:
    m0: float
    p0: float
    a: float
    b: float
    q: float
    #: (c, d, r, observed (S, T), mask or None): y[t] ~ N(c x[t] + d, 1/r)
    emissions: tuple
    #: (S, T), where S = 0 leaves the observations' tuples without their T
    size: tuple | None = None
    #: a latent w ~ N(mean, 1/precision) shared by every chain, added to the first
    #: emission's mean as u[t] w: (mean, precision, u (T,)), or None
    shared: tuple | None = None

    def __str__(self):
        return repr(self)


def build_chain(spec: Chain) -> ff.Model:
    s_len, t_len = _size(spec)
    with ff.Model("chain_oracle") as model:
        s = ff.Range("s", s_len)
        t = ff.Range("t", t_len)
        if spec.shared is not None:
            w = ff.Gaussian("w", spec.shared[0], precision=spec.shared[1])
        with ff.Plate(s), ff.Plate(t):
            with ff.If(t == 0):
                x = ff.Gaussian("x", spec.m0, precision=spec.p0)
            with ff.If(t > 0):
                x = ff.Gaussian("x", spec.a * x[t - 1] + spec.b, precision=spec.q)
            for j, (c, d, r, obs, mask) in enumerate(spec.emissions):
                mean = x if c == 1.0 else c * x
                if d:
                    mean = mean + d
                if spec.shared is not None and j == 0:
                    mean = mean + np.asarray(spec.shared[2], float) * w
                ff.Gaussian(f"y{j}", mean, precision=r,
                            observed=_masked(obs, mask, (s_len, t_len)))
    return model


def condition_chain(spec: Chain):
    """Posterior means and variances (S, T) of x, those of the shared w (or None) and
    log Z: the joint Gaussian of w, the states and the seen observations, built
    ancestrally as L ε + m over one noise vector ε ~ N(0, I), conditioned."""
    s_len, t_len = _size(spec)
    rows: list[np.ndarray] = []  # every quantity as row·ε + const
    consts: list[float] = []

    def new(row_of, const, var):
        row = np.zeros(len(rows) + 1)
        row[:len(row_of)] = row_of
        row[-1] = np.sqrt(var)
        rows.append(row)
        consts.append(const)
        return len(rows) - 1

    w = None
    if spec.shared is not None:
        w = new(np.zeros(0), spec.shared[0], 1 / spec.shared[1])
    states = np.zeros((s_len, t_len), int)
    seen = []  # (index, value)
    for s in range(s_len):
        for t in range(t_len):
            if t == 0:
                states[s, t] = new(np.zeros(0), spec.m0, 1 / spec.p0)
            else:
                prev = states[s, t - 1]
                states[s, t] = new(spec.a * rows[prev], spec.a * consts[prev] + spec.b,
                                   1 / spec.q)
            for j, (c, d, r, obs, mask) in enumerate(spec.emissions):
                if mask is not None and mask[s][t]:
                    continue
                row, const = c * rows[states[s, t]], c * consts[states[s, t]] + d
                if w is not None and j == 0:  # + u[t] w
                    u = spec.shared[2][t]
                    row = np.pad(row, (0, max(0, len(rows[w]) - len(row))))
                    row[:len(rows[w])] += u * rows[w]
                    const += u * consts[w]
                seen.append((new(row, const, 1 / r), obs[s][t]))
    width = len(rows)
    big = np.array([np.pad(r, (0, width - len(r))) for r in rows]).reshape(width, width)
    mean = np.array(consts)
    cov = big @ big.T
    latent = list(states.ravel()) + ([w] if w is not None else [])
    if seen:
        obs_idx = [i for i, _ in seen]
        values = np.array([v for _, v in seen])
        s_oo = cov[np.ix_(obs_idx, obs_idx)]
        s_lo = cov[np.ix_(latent, obs_idx)]
        gain = np.linalg.solve(s_oo, s_lo.T).T
        resid = values - mean[obs_idx]
        post_mean = mean[latent] + gain @ resid
        post_var = np.diag(cov[np.ix_(latent, latent)] - gain @ s_lo.T)
        log_z = -0.5 * np.linalg.slogdet(2 * np.pi * s_oo)[1] \
            - 0.5 * resid @ np.linalg.solve(s_oo, resid)
    else:
        post_mean, post_var, log_z = mean[latent], np.diag(cov)[latent], 0.0
    n = s_len * t_len
    shared = (post_mean[n], post_var[n]) if w is not None else None
    return (post_mean[:n].reshape(s_len, t_len), post_var[:n].reshape(s_len, t_len),
            float(log_z), shared)


@st.composite
def chain_models(draw):
    t_len = draw(st.integers(0, 6))
    s_len = draw(st.integers(0, 2))
    pick = lambda xs: draw(st.sampled_from(xs))  # noqa: E731
    emissions = []
    for _ in range(draw(st.integers(1, 2))):
        obs = tuple(tuple(pick((-2.2, -0.6, 0.0, 0.8, 1.5, 3.1)) for _ in range(t_len))
                    for _ in range(s_len))
        mask = _mask(draw, s_len, t_len)
        emissions.append((pick((1.0, 1.0, 2.0, -0.5)), pick((0.0, 0.0, 1.0, -2.0)),
                          pick((0.5, 1.0, 4.0)), obs, mask))
    shared = None
    if draw(st.integers(0, 9)) < 4:
        shared = (pick((0.0, 1.0)), pick((0.5, 2.0)),
                  tuple(pick((1.0, 1.0, -0.5, 2.0)) for _ in range(t_len)))
    return Chain(pick((-1.0, 0.0, 2.0)), pick((0.25, 1.0, 2.0)), pick((-0.9, 0.5, 1.0, 1.2)),
                 pick((0.0, 0.0, 0.7, -1.0)), pick((0.5, 1.0, 3.0)), tuple(emissions),
                 (s_len, t_len), shared)


def check_chain(spec: Chain, algorithm: str) -> list[str]:
    """Exact marginals and evidence; with a shared w (a loop through every chain) the
    means only (the fixed point of Gaussian belief propagation and of mean field both
    has the exact means), and VMP's bound below log Z."""
    means, variances, log_z, shared = condition_chain(spec)
    exact = spec.shared is None
    options = {} if exact else {"iterations": 5000, "tolerance": 1e-14}
    result = build_chain(spec).infer(algorithm, progress=False, **options)
    out = []
    q = result["x"]
    if not np.allclose(q.mean, means, rtol=1e-8, atol=1e-8):
        out.append(f"x: means {np.asarray(q.mean).tolist()} != {means.tolist()}")
    if shared is not None and not np.isclose(result["w"].mean, shared[0], rtol=1e-8,
                                             atol=1e-8):
        out.append(f"w: mean {float(result['w'].mean)} != {shared[0]}")
    if exact and not np.allclose(q.variance, variances, rtol=1e-8, atol=1e-8):
        out.append(f"x: variances {np.asarray(q.variance).tolist()} != {variances.tolist()}")
    if exact and not np.isclose(result.log_evidence, log_z, rtol=1e-8, atol=1e-8):
        out.append(f"log evidence {result.log_evidence} != log Z {log_z}")
    if not exact and algorithm == "vmp" and result.log_evidence > log_z + 1e-8:
        out.append(f"VMP bound {result.log_evidence} above log Z {log_z}")
    return out


def check(spec, algorithm):
    return (check_hmm if isinstance(spec, HMM) else check_chain)(spec, algorithm)


def chains():
    return st.one_of(hmm_models(), chain_models())


# ----- the references themselves ----------------------------------------------------------
def test_enumeration_is_forward_backward():
    from tests.model.test_chains import forward_backward
    spec = HMM((0.2, 0.5, 0.3), ((0.1, 0.6, 0.3), (0.5, 0.25, 0.25), (0.3, 0.3, 0.4)),
               (("Discrete", ((0.7, 0.3), (0.2, 0.8), (0.5, 0.5)), ((0, 1, 1, 0),), None),))
    lik = np.array([[[0.7, 0.2, 0.5][k] if v == 0 else [0.3, 0.8, 0.5][k] for k in range(3)]
                    for v in (0, 1, 1, 0)])
    marg, log_z = forward_backward(np.array(spec.pi), np.array(spec.trans), lik)
    got, got_z = enumerate_hmm(spec)
    np.testing.assert_allclose(got[0], marg, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got_z, log_z, rtol=1e-12)


def test_conditioning_is_the_rts_smoother():
    from tests.model.test_chains import rts_smoother
    y = (0.3, -1.2, 2.0, 0.7, 1.1)
    spec = Chain(0.5, 2.0, 0.8, -0.4, 1.5, ((1.0, 0.0, 2.0, (y,), None),))
    ms, vs, ll = rts_smoother(np.array(y), 0.8, -0.4, 1.5, 2.0, 0.5, 2.0)
    means, variances, log_z, _ = condition_chain(spec)
    np.testing.assert_allclose(means[0], ms, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(variances[0], vs, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(log_z, ll, rtol=1e-12)


@pytest.mark.parametrize("algorithm", ["ep", "vmp"])
@settings(max_examples=25, **SETTINGS)
@given(spec=hmm_models())
def test_random_hmms_against_enumeration(spec, algorithm):
    failures = check_hmm(spec, algorithm)
    assert not failures, f"{spec}\n{failures}"


@pytest.mark.parametrize("algorithm", ["ep", "vmp"])
@settings(max_examples=25, **SETTINGS)
@given(spec=chain_models())
def test_random_linear_gaussian_chains_against_conditioning(spec, algorithm):
    failures = check_chain(spec, algorithm)
    assert not failures, f"{spec}\n{failures}"
