"""Chains over a plate (``x[t]`` from ``x[t - 1]``): hidden Markov models against a
forward–backward written here, linear-Gaussian state-space models against an RTS smoother
written here, a learnt emission against enumeration, and the errors of the chain API."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import gammaln, logsumexp

import factorflow as ff
from tests.conftest import assert_close


# ----- references, written independently of factorflow ---------------------------------
def forward_backward(pi, trans, lik):
    """Posterior marginals (T, K) and log p(y) of one HMM: unscaled recursions in logs."""
    t_len = len(lik)
    with np.errstate(divide="ignore"):
        log_pi, log_a, log_l = np.log(pi), np.log(trans), np.log(lik)
    fwd = np.zeros_like(log_l)
    bwd = np.zeros_like(log_l)
    fwd[0] = log_pi + log_l[0]
    for t in range(1, t_len):
        fwd[t] = logsumexp(fwd[t - 1][:, None] + log_a, axis=0) + log_l[t]
    for t in range(t_len - 2, -1, -1):
        bwd[t] = logsumexp(log_a + (log_l[t + 1] + bwd[t + 1])[None, :], axis=1)
    log_z = logsumexp(fwd[-1])
    return np.exp(fwd + bwd - log_z), log_z


def rts_smoother(y, a, b, q, r, m0, p0):
    """Kalman filter, Rauch–Tung–Striebel smoother and log p(y) for
    x₀ ~ N(m0, 1/p0), x_t ~ N(a x_{t−1} + b, 1/q), y_t ~ N(x_t, 1/r)."""
    t_len = len(y)
    mf, vf, mp, vp = (np.zeros(t_len) for _ in range(4))
    m, v, ll = m0, 1.0 / p0, 0.0
    for t in range(t_len):
        mp[t], vp[t] = m, v
        s = v + 1.0 / r
        ll += -0.5 * np.log(2 * np.pi * s) - 0.5 * (y[t] - m) ** 2 / s
        gain = v / s
        mf[t], vf[t] = m + gain * (y[t] - m), (1 - gain) * v
        m, v = a * mf[t] + b, a * a * vf[t] + 1.0 / q
    ms, vs = mf.copy(), vf.copy()
    for t in range(t_len - 2, -1, -1):
        j = vf[t] * a / vp[t + 1]
        ms[t] = mf[t] + j * (ms[t + 1] - mp[t + 1])
        vs[t] = vf[t] + j * j * (vs[t + 1] - vp[t + 1])
    return ms, vs, ll


def test_forward_backward_reference_is_enumeration():
    rng = np.random.default_rng(3)
    pi, trans = rng.dirichlet(np.ones(3)), rng.dirichlet(np.ones(3), size=3)
    lik = rng.random((4, 3))
    joint = {}
    for path in itertools.product(range(3), repeat=4):
        p = pi[path[0]] * np.prod([trans[path[t - 1], path[t]] for t in range(1, 4)])
        joint[path] = p * np.prod([lik[t, path[t]] for t in range(4)])
    z = sum(joint.values())
    marg = np.zeros((4, 3))
    for path, p in joint.items():
        marg[np.arange(4), path] += p / z
    q, log_z = forward_backward(pi, trans, lik)
    assert_close(q, marg, 1e-12)
    assert_close(log_z, np.log(z), 1e-12)


# ----- models -------------------------------------------------------------------------
def hmm(pi, trans, emission, obs, gaussian: bool = False) -> ff.Model:
    """x[s, t] a chain over t (one per sequence s); y[s, t] | x ~ Discrete(emission[x]), or
    N(emission[x], 1) with ``gaussian``, observed ``obs`` (S, T)."""
    with ff.Model("hmm") as model:
        s = ff.Range("s", obs.shape[0])
        t = ff.Range("t", obs.shape[1])
        with ff.Plate(s), ff.Plate(t):
            with ff.If(t == 0):
                x = ff.Discrete("x", pi)
            with ff.If(t > 0):
                x = ff.Discrete("x", ff.Constant(trans)[x[t - 1]])
            with ff.Switch(x):
                if gaussian:
                    ff.Gaussian("y", ff.Constant(emission)[x], precision=1.0, observed=obs)
                else:
                    ff.Discrete("y", ff.Constant(emission)[x], observed=obs)
    return model


@st.composite
def hmm_cases(draw):
    k = draw(st.integers(1, 4))
    t_len = draw(st.integers(1, 8))
    n_seq = draw(st.integers(1, 2))
    seed = draw(st.integers(0, 2**31))
    gaussian = draw(st.booleans())
    rng = np.random.default_rng(seed)
    pi = rng.dirichlet(np.ones(k))
    trans = rng.dirichlet(np.ones(k), size=k)
    if gaussian:
        emission = rng.normal(0, 2, k)
        obs = rng.normal(0, 2, (n_seq, t_len))
    else:
        v = draw(st.integers(1, 4))
        emission = rng.dirichlet(np.ones(v), size=k)
        obs = rng.integers(0, v, (n_seq, t_len))
    return pi, trans, emission, obs, gaussian


def _likelihoods(emission, obs, gaussian):
    if gaussian:
        return np.exp(-0.5 * (obs[..., None] - emission) ** 2) / np.sqrt(2 * np.pi)
    return emission[:, obs].transpose(1, 2, 0)


@settings(max_examples=10, deadline=None, derandomize=True)
@given(hmm_cases())
def test_hmm_marginals_equal_forward_backward(case):
    pi, trans, emission, obs, gaussian = case
    lik = _likelihoods(emission, obs, gaussian)
    refs = [forward_backward(pi, trans, row) for row in lik]
    expected = np.stack([q for q, _ in refs])
    log_z = sum(z for _, z in refs)
    model = hmm(pi, trans, emission, obs, gaussian)
    for algorithm in ("ep", "vmp"):  # known parameters: both exact
        result = model.infer(algorithm, progress=False)
        assert_close(result["x"].probs, expected, 1e-10, 1e-10)
        assert_close(result.log_evidence, log_z, 1e-10, 1e-10)


@settings(max_examples=10, deadline=None, derandomize=True)
@given(hmm_cases())
def test_vmp_hmm_is_exact_after_one_sweep_of_one_pass(case):
    """Known parameters under VMP: the initialisation sends the emissions' message to the
    chain first (``uniform_penalty`` on the chain's incoming message), so the loop's one
    forward–backward pass per sweep is exact from the first sweep (it ran on uniform
    emissions before: two sweeps)."""
    from factorflow.factors import chains
    pi, trans, emission, obs, gaussian = case
    lik = _likelihoods(emission, obs, gaussian)
    expected = np.stack([forward_backward(pi, trans, row)[0] for row in lik])
    compiled = hmm(pi, trans, emission, obs, gaussian).compile("vmp")
    loop, init = compiled.schedule.loop[0], compiled.schedule.init[0]
    assert loop.count("v_x__F") == 1 and "v_x__B" in init
    passes, original = [], chains.discrete_forward_backward
    chains.discrete_forward_backward = lambda *a: passes.append(1) or original(*a)
    try:
        result = compiled.run(iterations=1, tolerance=None, progress=False)
    finally:
        chains.discrete_forward_backward = original
    assert_close(result["x"].probs, expected, 1e-10, 1e-10)
    assert len(passes) == 1  # the evidence reuses the sweep's pass


@st.composite
def ssm_cases(draw):
    t_len = draw(st.integers(1, 10))
    n_seq = draw(st.integers(1, 2))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    a, b = rng.normal(0, 1), rng.normal(0, 1)
    q, r, p0 = rng.gamma(2.0, 1.0, 3) + 0.05
    m0 = rng.normal(0, 3)
    y = rng.normal(0, 3, (n_seq, t_len))
    return y, float(a), float(b), float(q), float(r), float(m0), float(p0)


def state_space(y, a, b, q, r, m0, p0) -> ff.Model:
    with ff.Model("ssm") as model:
        s = ff.Range("s", y.shape[0])
        t = ff.Range("t", y.shape[1])
        with ff.Plate(s), ff.Plate(t):
            with ff.If(t == 0):
                x = ff.Gaussian("x", m0, precision=p0)
            with ff.If(t > 0):
                x = ff.Gaussian("x", a * x[t - 1] + b, precision=q)
            ff.Gaussian("y", x, precision=r, observed=y)
    return model


@settings(max_examples=15, deadline=None, derandomize=True)
@given(ssm_cases())
def test_state_space_equals_rts_smoother(case):
    y, a, b, q, r, m0, p0 = case
    refs = [rts_smoother(row, a, b, q, r, m0, p0) for row in y]
    model = state_space(*case)
    for algorithm in ("ep", "vmp"):
        result = model.infer(algorithm, progress=False)
        assert_close(result["x"].mean, np.stack([m for m, _, _ in refs]), 1e-8, 1e-8)
        assert_close(result["x"].variance, np.stack([v for _, v, _ in refs]), 1e-8, 1e-8)
        assert_close(result.log_evidence, sum(ll for _, _, ll in refs), 1e-8, 1e-8)


def test_affine_step_forms_are_one_chain():
    """b + a·x[t−1], x[t−1]·a − (−b), (a·x[t−1] + 2b) / 1 − b and −(−a·x[t−1]) − (−b) are
    all a·x[t−1] + b."""
    y = np.array([[0.3, -1.2, 2.0, 0.7]])
    a, b = 0.8, -0.4
    ms, vs, _ = rts_smoother(y[0], a, b, 1.5, 2.0, 0.0, 1.0)
    steps = [lambda p: b + a * p, lambda p: p * a - (-b), lambda p: (a * p + 2 * b) / 1 - b,
             lambda p: -(-a * p) - (-b)]
    for step in steps:
        with ff.Model() as model:
            t = ff.Range("t", 4)
            with ff.Plate(t):
                with ff.If(t == 0):
                    x = ff.Gaussian("x", 0.0, precision=1.0)
                with ff.If(t > 0):
                    x = ff.Gaussian("x", step(x[t - 1]), precision=1.5)
                ff.Gaussian("y", x, precision=2.0, observed=y[0])
        result = model.infer("ep", progress=False)
        assert_close(result["x"].mean, ms, 1e-10)
        assert_close(result["x"].variance, vs, 1e-10)


def test_learnt_emissions_vmp_bound_below_log_z_and_monotone():
    """Dirichlet emission rows learnt by VMP: the bound never falls and stays below the
    exact log evidence (enumeration of paths, Dirichlet-multinomial per state)."""
    rng = np.random.default_rng(5)
    k, v, t_len = 2, 3, 5
    pi, trans = rng.dirichlet(np.ones(k)), rng.dirichlet(np.ones(k), size=k)
    obs = rng.integers(0, v, t_len)
    alpha = np.full((k, v), 0.7)
    with ff.Model() as model:
        with ff.Plate(ff.Range("k", k)):
            rows = ff.Dirichlet("rows", alpha)
        t = ff.Range("t", t_len)
        with ff.Plate(t):
            with ff.If(t == 0):
                x = ff.Discrete("x", pi)
            with ff.If(t > 0):
                x = ff.Discrete("x", ff.Constant(trans)[x[t - 1]])
            with ff.Switch(x):
                ff.Discrete("y", rows[x], observed=obs)
    terms = []
    for path in itertools.product(range(k), repeat=t_len):
        lp = np.log(pi[path[0]]) + sum(np.log(trans[path[i - 1], path[i]])
                                       for i in range(1, t_len))
        for j in range(k):
            c = np.bincount(obs[np.array(path) == j], minlength=v)
            lp += gammaln(alpha[j].sum()) - gammaln(alpha[j].sum() + c.sum()) + np.sum(
                gammaln(alpha[j] + c) - gammaln(alpha[j]))
        terms.append(lp)
    log_z = logsumexp(terms)
    result = model.infer("vmp", iterations=200, progress=False)
    trace = np.asarray(result.trace)
    assert np.all(np.diff(trace) > -1e-10)
    assert result.log_evidence < log_z
    assert result.log_evidence > log_z - 1.0  # a real bound, not a degenerate one


def test_generated_code_does_not_grow_with_the_chain():
    """Written over a plate, not unrolled: T = 3 and T = 3,000 compile to the same code."""
    rng = np.random.default_rng(0)
    pi, trans = np.ones(3) / 3, rng.dirichlet(np.ones(3), size=3)
    emission = rng.dirichlet(np.ones(2), size=3)
    short = hmm(pi, trans, emission, rng.integers(0, 2, (1, 3)))
    long = hmm(pi, trans, emission, rng.integers(0, 2, (1, 3000)))
    for algorithm in ("ep", "vmp"):
        assert short.compile(algorithm).source == long.compile(algorithm).source
    assert "DiscreteChain_sample_average_conditional" in long.compile("ep").source


# ----- errors ---------------------------------------------------------------------------
def _chain_model(step=None, start=True, extra=None):
    with ff.Model() as model:
        t = ff.Range("t", 4)
        with ff.Plate(t):
            x = None
            if start:
                with ff.If(t == 0):
                    x = ff.Gaussian("x", 0.0, precision=1.0)
            if step is not None:
                with ff.If(t > 0):
                    x = ff.Gaussian("x", step(x, t), precision=1.0)
            if extra is not None:
                extra(x, t)
    return model


@pytest.mark.parametrize(("build", "match"), [
    (lambda: _chain_model(extra=lambda x, t: ff.Gaussian("y", x[t - 1], precision=1.0,
                                                         observed=np.zeros(4))),
     r"x\[t - 1\] at t = 0 reads x\[-1\], before the start of range 't'"),
    (lambda: _chain_model(lambda x, t: 0.5 * x[t - 2]),
     r"x\[t - 2\] at t = 1 reads x\[-1\], before the start of range 't'"),
    (lambda: _chain_model(start=False, step=lambda x, t: 1.0),
     r"define the chain's start first"),
    (lambda: _chain_model(extra=lambda x, t: ff.Gaussian("y", x[t + 1], precision=1.0,
                                                         observed=np.zeros(4))),
     r"t \+ 1: an offset index reads an earlier element of range 't' \(t - 1\); t \+ 1 "
     r"would read past its end at t = 3"),
    (lambda: _chain_model(lambda x, t: 0.5 * x[1 + t]), r"t \+ 1: .*past its end"),
    (lambda: _chain_model(lambda x, t: x[t - 1] * x[t - 1]), r"linear in x\[t - 1\]"),
    (lambda: _chain_model(lambda x, t: 0.5 * x[t - 1] + ff.Gaussian("w", 0.0,
                                                                    precision=1.0)),
     r"define the chain's start first"),
    (lambda: _chain_model(lambda x, t: x[t - 1] if t == 3 else None),
     r"t == 0 \(a chain's start\) or t > 0"),
])
def test_chain_errors_name_the_problem(build, match):
    with pytest.raises(ff.ModelError, match=match):
        build()


def test_chain_without_step_is_refused_at_compile():
    model = _chain_model()
    with pytest.raises(ff.ModelError, match=r"chain 'x' has a start .* but no step"):
        model.compile("ep")


def test_chain_plate_must_be_innermost_and_rows_one_per_state():
    with ff.Model():
        with ff.Plate(ff.Range("k", 3)):
            rows = ff.Dirichlet("rows", np.ones((3, 2)))
        t = ff.Range("t", 3)
        with ff.Plate(t):
            with ff.If(t == 0):
                x = ff.Discrete("x", [0.5, 0.5])
            with ff.If(t > 0), pytest.raises(ff.ModelError, match="one plate of 2 rows"):
                ff.Discrete("x", rows[x[t - 1]])
    with ff.Model():
        t, n = ff.Range("t", 3), ff.Range("n", 2)
        with ff.Plate(t), ff.Plate(n), ff.If(t == 0), pytest.raises(
                ff.ModelError, match="innermost open plate"):
            ff.Gaussian("x", 0.0, precision=1.0)


def vb_hmm(a_pi, a_trans, lik, sweeps=3000, a_emit=None, obs=None, q_emit=None):
    """Structured VMP for an HMM with Dirichlet start and transition rows, written out:
    q(x) by forward–backward on exp E[log π], exp E[log A]; q(π), q(A) from the expected
    start and transition counts; returns q(x), the posteriors' parameters and, at the
    fixed point, the bound log Z̃ − KL(q(π) ‖ p(π)) − Σ_i KL(q(A_i) ‖ p(A_i)).  With
    ``a_emit`` (prior) and ``q_emit`` (start) the emission rows B are Dirichlet too: the
    likelihoods are exp E[log B], q(B) comes from the expected counts of each observed
    value per state, and its KL enters the bound."""
    from scipy.special import digamma

    def elog(a):
        return digamma(a) - digamma(a.sum(-1, keepdims=True))

    def kl(a, b):
        return (gammaln(a.sum(-1)) - gammaln(a).sum(-1) - gammaln(b.sum(-1))
                + gammaln(b).sum(-1) + ((a - b) * elog(a)).sum(-1))

    t_len, k = lik.shape
    q_pi, q_trans = a_pi.copy(), a_trans.copy()
    bound = -np.inf
    for _ in range(sweeps):
        if q_emit is not None:
            lik = np.exp(elog(q_emit))[:, obs].T
        pi, trans = np.exp(elog(q_pi)), np.exp(elog(q_trans))
        fwd, bwd, scale = np.zeros((t_len, k)), np.ones((t_len, k)), np.zeros(t_len)
        f = pi * lik[0]
        for t in range(t_len):
            if t:
                f = (fwd[t - 1] @ trans) * lik[t]
            scale[t] = f.sum()
            fwd[t] = f / f.sum()
        for t in range(t_len - 2, -1, -1):
            bwd[t] = trans @ (lik[t + 1] * bwd[t + 1]) / scale[t + 1]
        q = fwd * bwd
        pair = (fwd[:-1, :, None] * trans[None] * (lik[1:] * bwd[1:])[:, None, :]
                / scale[1:, None, None])
        bound = np.log(scale).sum() - kl(q_pi, a_pi) - kl(q_trans, a_trans).sum()
        old = np.concatenate([q_pi.ravel(), q_trans.ravel()])
        q_pi, q_trans = a_pi + q[0], a_trans + pair.sum(0)
        change = np.abs(np.concatenate([q_pi.ravel(), q_trans.ravel()]) - old).max()
        if q_emit is not None:
            bound -= kl(q_emit, a_emit).sum()
            new_emit = a_emit + q.T @ (obs[:, None] == np.arange(a_emit.shape[1]))
            change = max(change, np.abs(new_emit - q_emit).max())
            q_emit = new_emit
        if change < 1e-13:  # the parameters, not the bound (flat at its optimum)
            break
    return q, q_pi, q_trans, bound, q_emit


def dirichlet_hmm(obs, a_pi, a_trans, emission=None, a_emit=None) -> ff.Model:
    """π ~ Dir(a_pi), rows A[k] ~ Dir(a_trans[k]), x a chain over t, y | x ~
    Discrete(emission[x]) (known) or Discrete(B[x]) with rows B[k] ~ Dir(a_emit[k])."""
    with ff.Model() as model:
        pi = ff.Dirichlet("pi", a_pi)
        with ff.Plate(ff.Range("k", len(a_pi))):
            rows = ff.Dirichlet("A", a_trans)
            emit = None if a_emit is None else ff.Dirichlet("B", a_emit)
        t = ff.Range("t", len(obs))
        with ff.Plate(t):
            with ff.If(t == 0):
                x = ff.Discrete("x", pi)
            with ff.If(t > 0):
                x = ff.Discrete("x", rows[x[t - 1]])
            with ff.Switch(x):
                ff.Discrete("y", ff.Constant(emission)[x] if emit is None else emit[x],
                            observed=obs)
    return model


def test_learnt_start_and_transitions_equal_structured_vmp_by_hand():
    """π ~ Dirichlet, rows A[k] ~ Dirichlet, x a chain, y | x ~ Discrete(B[x]): VMP's
    fixed point (posteriors and bound) equals the structured VMP written out above (1e-8),
    and its bound stays below the exact log evidence (enumerated paths, Dirichlet-
    multinomial counts)."""
    rng = np.random.default_rng(11)
    k, v, t_len = 2, 3, 7
    emission = rng.dirichlet(np.ones(v), size=k)
    obs = rng.integers(0, v, t_len)
    a_pi, a_trans = np.array([1.0, 2.0]), np.array([[3.0, 1.0], [1.0, 2.0]])
    model = dirichlet_hmm(obs, a_pi, a_trans, emission)
    q, q_pi, q_trans, bound, _ = vb_hmm(a_pi, a_trans, emission[:, obs].T)
    result = model.infer("vmp", iterations=2000, tolerance=1e-14, progress=False)
    assert_close(result["x"].probs, q, 1e-8, 1e-10)
    assert_close(result["pi"].alpha, q_pi, 1e-8)
    assert_close(result["A"].alpha, q_trans, 1e-8)
    assert_close(result.log_evidence, bound, 1e-8)
    assert np.all(np.diff(result.trace) > -1e-10)
    terms = []
    for path in itertools.product(range(k), repeat=t_len):
        p = np.array(path)
        lp = np.sum(np.log(emission[p, obs]))
        for alpha, counts in [(a_pi, np.bincount(p[:1], minlength=k))] + [
                (a_trans[i], np.bincount(p[1:][p[:-1] == i], minlength=k)) for i in range(k)]:
            lp += gammaln(alpha.sum()) - gammaln(alpha.sum() + counts.sum()) + np.sum(
                gammaln(alpha + counts) - gammaln(alpha))
        terms.append(lp)
    assert result.log_evidence < logsumexp(terms)
    with pytest.raises(ff.UnsupportedFactorError, match="EP needs DiscreteChain argument"):
        model.infer("ep")


def test_learnt_transitions_and_emissions_equal_structured_vmp_by_hand():
    """A, B and π all Dirichlet (RxInfer's HMM benchmark): the chain's messages to A read
    the chain's incoming messages as they are (``block``), so the loop schedules; the
    fixed point equals the structured VMP written out above and the bound never falls."""
    rng = np.random.default_rng(12)
    k, v, t_len = 2, 3, 8
    obs = rng.integers(0, v, t_len)
    a_pi, a_trans, a_emit = np.ones(k), np.ones((k, k)), np.ones((k, v))
    start = np.array([[3.0, 1.5, 1.0], [1.0, 1.2, 2.5]])
    model = dirichlet_hmm(obs, a_pi, a_trans, a_emit=a_emit)
    init = {"B": ff.distributions.Dirichlet(start)}
    result = model.infer("vmp", iterations=3000, tolerance=1e-14, init=init, progress=False)
    q, q_pi, q_trans, bound, q_emit = vb_hmm(a_pi, a_trans, np.ones((t_len, k)),
                                             a_emit=a_emit, obs=obs, q_emit=start)
    assert np.all(np.diff(result.trace) > -1e-10)
    assert_close(result["x"].probs, q, 1e-7, 1e-9)
    assert_close(result["A"].alpha, q_trans, 1e-7)
    assert_close(result["B"].alpha, q_emit, 1e-7)
    assert_close(result.log_evidence, bound, 1e-8)


def test_learnt_hmm_equals_structured_vmp_sweep_for_sweep_with_one_pass_each(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A, B and π learnt: each sweep runs the chain's forward–backward once (its messages
    to x and to A read the same inputs: one pass, reused) and then updates π, A and B
    from that posterior of x, as the structured VMP written out above does: after n
    sweeps the rows' posteriors equal its n sweeps to 1e-12 (the reported q(x) is the
    one of the posteriors reported with it: its next sweep), and the bound never falls.
    The schedule used to run the pass three times a sweep from three different inputs."""
    from factorflow.factors import chains

    rng = np.random.default_rng(12)
    k, v, t_len = 2, 3, 8
    obs = rng.integers(0, v, t_len)
    a_pi, a_trans, a_emit = np.ones(k), np.ones((k, k)), np.ones((k, v))
    start = np.array([[3.0, 1.5, 1.0], [1.0, 1.2, 2.5]])
    init = {"B": ff.distributions.Dirichlet(start)}
    compiled = dirichlet_hmm(obs, a_pi, a_trans, a_emit=a_emit).compile("vmp", init=init)
    passes = 0
    kernel = chains.discrete_forward_backward

    def counted(*args):
        nonlocal passes
        passes += 1
        return kernel(*args)

    monkeypatch.setattr(chains, "discrete_forward_backward", counted)
    for n in (1, 2, 5):
        passes = 0
        result = compiled.run(iterations=n, tolerance=None, init=init, progress=False)
        _, _, q_trans, _, q_emit = vb_hmm(a_pi, a_trans, np.ones((t_len, k)), sweeps=n,
                                          a_emit=a_emit, obs=obs, q_emit=start)
        assert_close(result["A"].alpha, q_trans, 1e-12)
        assert_close(result["B"].alpha, q_emit, 1e-12)
        q_next = vb_hmm(a_pi, a_trans, np.ones((t_len, k)), sweeps=n + 1,
                        a_emit=a_emit, obs=obs, q_emit=start)[0]
        assert_close(result["x"].probs, q_next, 1e-12, 1e-14)
        # one pass a sweep, one for the initialisation, one for the evidence's
        # posteriors after the last sweep
        assert passes == n + 2
        assert np.all(np.diff(result.trace) > -1e-12)
