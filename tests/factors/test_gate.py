"""Gate operators against exact computations, and their (N, K) form against per-element calls.

Each exactness test runs, with the real factors of the registry and the real EP variable
evidence, the messages and evidence terms the gate transform's statements call for on a
small tree-shaped model, then compares the evidence, the condition's posterior and the
posterior of the variables with exact enumeration or closed forms (1e-9).  The gate scheme
checked: statements inside ``if cases[k]`` send their evidence terms to ``cases[k]``; the
Enter / Exit factors send log ∫ m̂ m̂ on each case; Cases' evidence averages the result.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special, stats

from factorflow.distributions import Bernoulli, Beta, Dirichlet, Discrete, Gamma, Gaussian
from factorflow.factors import FACTORS
from factorflow.factors.gate import CASES, ENTER, ENTER_ONE, ENTER_PARTIAL, EXIT, EXIT_GIVEN
from factorflow.factors.mixtures import project
from factorflow.factors.variable import ep_variable_evidence
from factorflow.ir import walk
from factorflow.transforms.gates import gates
from tests.conftest import assert_close
from tests.transforms.test_gates import CASES as PROGRAMS


def op(factor, algorithm: str, target: str):
    """The operator as a function of the factor's arguments (its buffers computed first)."""
    return factor.message(algorithm, target)


def evidence(factor, algorithm: str):
    return factor.evidence[algorithm]


def var_ev(inc_def, out_def, *uses) -> float:
    """EP evidence of a variable with a def edge and use edges, each (message in, out)."""
    marginal = inc_def
    for inc, _ in uses:
        marginal = marginal * inc
    edges = [(inc_def, out_def, None, ())] + [(i, o, ("same",), ()) for i, o in uses]
    return ep_variable_evidence(marginal, edges, ())


GAUSS, BERN, DISC = FACTORS["Gaussian"], FACTORS["Bernoulli"], FACTORS["Discrete"]


# ----- EP, an enter variable in both branches of an if -------------------------------
def test_ep_if_else_with_a_gaussian_entering_both_branches_is_exact() -> None:
    """c ~ Bernoulli(π); x ~ N(m0, v0); if c: a_0 ~ N(x, b_0) else a_1 ~ N(x, b_1)."""
    pi, m0, v0 = 0.3, 0.5, 2.0
    a, b = np.array([1.5, -1.0]), np.array([0.5, 3.0])
    z = stats.norm.pdf(a, m0, np.sqrt(v0 + b)) * np.array([pi, 1 - pi])
    post_prec = 1 / v0 + 1 / b
    post_mean = (m0 / v0 + a / b) / post_prec
    w = z / z.sum()
    mean = np.sum(w * post_mean)
    var = np.sum(w * (1 / post_prec + post_mean ** 2)) - mean ** 2

    c_msg, p0, idx = Bernoulli(pi), Gaussian(m0, v0), (0, 1)
    cases_fwd = op(CASES, "ep", "cases")(selector=c_msg)
    clones = op(ENTER_PARTIAL, "ep", "enter_partial")(cases=cases_fwd, value=p0, indices=idx)
    lik = op(GAUSS, "ep", "mean")(sample=a, precision=1 / b)  # body factor -> clone
    body = np.array([evidence(GAUSS, "ep")(sample=a[k], mean=clones[k], precision=1 / b[k])
                     + var_ev(clones[k], lik[k], (lik[k], clones[k])) for k in range(2)])
    enter_cases = op(ENTER_PARTIAL, "ep", "cases")(enter_partial=lik, cases=cases_fwd,
                                                    value=p0, indices=idx)
    marginal = cases_fwd * Bernoulli.from_natural(body) * enter_cases
    x_msg = op(ENTER_PARTIAL, "ep", "value")(enter_partial=lik, cases=marginal / enter_cases,
                                             value=p0, indices=idx)
    to_cases = marginal / cases_fwd
    c_from = op(CASES, "ep", "selector")(cases=to_cases, selector=c_msg)
    log_z = (evidence(CASES, "ep")(cases=to_cases, selector=c_msg)
             + evidence(BERN, "ep")(sample=c_from, p=pi) + var_ev(c_msg, c_from, (c_from, c_msg))
             + evidence(GAUSS, "ep")(sample=x_msg, mean=m0, precision=1 / v0)
             + var_ev(p0, x_msg, (x_msg, p0))
             + evidence(ENTER_PARTIAL, "ep")(enter_partial=lik, cases=cases_fwd, value=p0))
    assert_close(log_z, np.log(z.sum()))
    assert_close((c_msg * c_from).p, w[0])
    assert_close([(p0 * x_msg).mean, (p0 * x_msg).variance], [mean, var])


# ----- EP, a case on a discrete variable: EnterPartial and EnterOne -------------------
def test_ep_cases_of_a_discrete_condition_are_exact() -> None:
    """c ~ Discrete(π); x, y ~ Bernoulli; case 0: x ~ Bernoulli(p0) (x enters, partial);
    case 1: an observed true ~ Bernoulli(p1); case 2: y ~ Bernoulli(p2) (y enters one)."""
    pi, px, py = np.array([0.2, 0.5, 0.3]), 0.6, 0.25
    p = np.array([0.9, 0.4, 0.15])
    joint = np.zeros((3, 2, 2))  # c, x, y
    for c_, x_, y_ in np.ndindex(3, 2, 2):
        f = [p[0] if x_ else 1 - p[0], p[1], p[2] if y_ else 1 - p[2]][c_]
        joint[c_, x_, y_] = pi[c_] * (px if x_ else 1 - px) * (py if y_ else 1 - py) * f

    c_msg, x_prior, y_prior = Discrete(pi), Bernoulli(px), Bernoulli(py)
    fwd = op(CASES, "ep", "cases")(selector=c_msg)
    x_clone = op(ENTER_PARTIAL, "ep", "enter_partial")(cases=fwd, value=x_prior, indices=(0,))
    y_clone = op(ENTER_ONE, "ep", "enter_one")(cases=fwd, value=y_prior, index=2)
    fx = op(BERN, "ep", "sample")(p=p[0])
    fy = op(BERN, "ep", "sample")(p=p[2])
    body = np.array([
        evidence(BERN, "ep")(sample=x_clone[0], p=p[0]) + var_ev(x_clone[0], fx, (fx, x_clone[0])),
        evidence(BERN, "ep")(sample=True, p=p[1]),
        evidence(BERN, "ep")(sample=y_clone, p=p[2]) + var_ev(y_clone, fy, (fy, y_clone))])
    ex = op(ENTER_PARTIAL, "ep", "cases")(enter_partial=fx[None], cases=fwd, value=x_prior,
                                          indices=(0,))
    ey = op(ENTER_ONE, "ep", "cases")(enter_one=fy, cases=fwd, value=y_prior, index=2)
    marginal = fwd * Bernoulli.from_natural(body) * ex * ey
    x_msg = op(ENTER_PARTIAL, "ep", "value")(enter_partial=fx[None], cases=marginal / ex,
                                             value=x_prior, indices=(0,))
    y_msg = op(ENTER_ONE, "ep", "value")(enter_one=fy, cases=marginal / ey, value=y_prior,
                                         index=2)
    to_cases = marginal / fwd
    c_from = op(CASES, "ep", "selector")(cases=to_cases, selector=c_msg)
    log_z = (evidence(CASES, "ep")(cases=to_cases, selector=c_msg)
             + evidence(DISC, "ep")(sample=c_from, probs=pi) + var_ev(c_msg, c_from,
                                                                      (c_from, c_msg))
             + evidence(BERN, "ep")(sample=x_msg, p=px) + var_ev(x_prior, x_msg,
                                                                 (x_msg, x_prior))
             + evidence(BERN, "ep")(sample=y_msg, p=py) + var_ev(y_prior, y_msg,
                                                                 (y_msg, y_prior)))
    assert_close(log_z, np.log(joint.sum()))
    assert_close((c_msg * c_from).probs, joint.sum(axis=(1, 2)) / joint.sum())
    assert_close((x_prior * x_msg).p, joint[:, 1].sum() / joint.sum())
    assert_close((y_prior * y_msg).p, joint[:, :, 1].sum() / joint.sum())


# ----- EP, gates nested two deep -------------------------------------------------------
def test_ep_nested_gates_route_the_inner_gate_evidence_to_the_outer_case() -> None:
    """c ~ Bernoulli(πc); x ~ Bernoulli(px); if c: {d ~ Bernoulli(pd); if d: x ~ Bernoulli(p1)
    else: x ~ Bernoulli(p2)} else: x ~ Bernoulli(p3).  x enters c, its clone enters d; the
    inner gate's terms (d's factor and variable, Cases(d), the clone) go to c's case 0."""
    pc, px, pd, p = 0.35, 0.6, 0.7, np.array([0.9, 0.2, 0.4])
    joint = np.zeros((2, 2, 2))  # c, d, x (index 0 = true)
    for c_, d_, x_ in np.ndindex(2, 2, 2):
        f = p[0 if d_ == 0 else 1] if c_ == 0 else p[2]
        joint[c_, d_, x_] = ([pc, 1 - pc][c_] * ([pd, 1 - pd][d_] if c_ == 0 else 0.5)
                             * [px, 1 - px][x_] * [f, 1 - f][x_])

    def ep_sample(k):  # the factor x ~ Bernoulli(p_k) in a case, as a message to the clone
        return op(BERN, "ep", "sample")(p=p[k])

    c_msg, d_prior, x_prior = Bernoulli(pc), Bernoulli(pd), Bernoulli(px)
    fwd_c = op(CASES, "ep", "cases")(selector=c_msg)
    xc = op(ENTER_PARTIAL, "ep", "enter_partial")(cases=fwd_c, value=x_prior, indices=(0, 1))
    # the inner gate, inside case 0 of c
    fwd_d = op(CASES, "ep", "cases")(selector=d_prior)
    xd = op(ENTER_PARTIAL, "ep", "enter_partial")(cases=fwd_d, value=xc[0], indices=(0, 1))
    t = Bernoulli.from_natural(np.stack([ep_sample(0).log_odds, ep_sample(1).log_odds]))
    body_d = np.array([evidence(BERN, "ep")(sample=xd[j], p=p[j]) + var_ev(xd[j], t[j],
                                                                          (t[j], xd[j]))
                       for j in range(2)])
    e_d = op(ENTER_PARTIAL, "ep", "cases")(enter_partial=t, cases=fwd_d, value=xc[0],
                                           indices=(0, 1))
    marg_d = fwd_d * Bernoulli.from_natural(body_d) * e_d
    v_d = op(ENTER_PARTIAL, "ep", "value")(enter_partial=t, cases=marg_d / e_d, value=xc[0],
                                           indices=(0, 1))
    sel_d = op(CASES, "ep", "selector")(cases=marg_d / fwd_d, selector=d_prior)
    case0 = (evidence(BERN, "ep")(sample=sel_d, p=pd) + var_ev(d_prior, sel_d, (sel_d, d_prior))
             + evidence(CASES, "ep")(cases=marg_d / fwd_d, selector=d_prior)
             + var_ev(xc[0], v_d, (v_d, xc[0])))
    t3 = ep_sample(2)
    case1 = evidence(BERN, "ep")(sample=xc[1], p=p[2]) + var_ev(xc[1], t3, (t3, xc[1]))
    back = Bernoulli.from_natural(np.stack([v_d.log_odds, t3.log_odds]))
    e_c = op(ENTER_PARTIAL, "ep", "cases")(enter_partial=back, cases=fwd_c, value=x_prior,
                                           indices=(0, 1))
    marg_c = fwd_c * Bernoulli.from_natural(np.array([case0, case1])) * e_c
    x_msg = op(ENTER_PARTIAL, "ep", "value")(enter_partial=back, cases=marg_c / e_c,
                                             value=x_prior, indices=(0, 1))
    c_from = op(CASES, "ep", "selector")(cases=marg_c / fwd_c, selector=c_msg)
    log_z = (evidence(CASES, "ep")(cases=marg_c / fwd_c, selector=c_msg)
             + evidence(BERN, "ep")(sample=c_from, p=pc) + var_ev(c_msg, c_from, (c_from, c_msg))
             + evidence(BERN, "ep")(sample=x_msg, p=px) + var_ev(x_prior, x_msg,
                                                                 (x_msg, x_prior)))
    assert_close(log_z, np.log(joint.sum()))
    assert_close((c_msg * c_from).p, joint[0].sum() / joint.sum())
    assert_close((x_prior * x_msg).p, joint[:, :, 0].sum() / joint.sum())
    assert_close((d_prior * sel_d).p, joint[0, 0].sum() / joint[0].sum())


# ----- EP, a switch: each component's mean enters its own case --------------------------
def test_ep_switch_with_enter_one_on_the_switch_loop_is_exact() -> None:
    """z ~ Discrete(π); means[k] ~ N(μ_k, v_k); for k: if z == k: x ~ N(means[k], 1/τ),
    x observed: EnterOne with index = the loop (one (K,) operation per statement).  (The
    values keep EP's messages to the means proper, so every evidence term is finite.)"""
    pi, mu, v = np.array([0.2, 0.5, 0.3]), np.array([-0.5, 0.5, 1.5]), np.array([1.0, .5, 2.])
    x, tau, k = 0.6, 1.0, np.arange(3)
    z = pi * stats.norm.pdf(x, mu, np.sqrt(v + 1 / tau))
    q = z / z.sum()
    prec = 1 / v + tau
    post = (mu / v + x * tau) / prec
    mean = q * post + (1 - q) * mu
    var = q * (1 / prec + post ** 2) + (1 - q) * (v + mu ** 2) - mean ** 2

    c_msg, prior = Discrete(pi), Gaussian(mu, v)
    fwd = op(CASES, "ep", "cases")(selector=c_msg)
    clones = op(ENTER_ONE, "ep", "enter_one")(cases=fwd, value=prior, index=k)
    lik = op(GAUSS, "ep", "mean")(sample=x, precision=tau).broadcast_to((3,))
    body = (evidence(GAUSS, "ep")(sample=x, mean=clones, precision=tau)
            + np.array([var_ev(clones[j], lik[j], (lik[j], clones[j])) for j in k]))
    e = op(ENTER_ONE, "ep", "cases")(enter_one=lik, cases=fwd, value=prior, index=k)
    marginal = fwd * Bernoulli.from_natural(body) * e
    means_msg = op(ENTER_ONE, "ep", "value")(enter_one=lik, cases=marginal / e, value=prior,
                                             index=k)
    to_cases = marginal / fwd
    c_from = op(CASES, "ep", "selector")(cases=to_cases, selector=c_msg)
    log_z = (evidence(CASES, "ep")(cases=to_cases, selector=c_msg)
             + evidence(DISC, "ep")(sample=c_from, probs=pi)
             + var_ev(c_msg, c_from, (c_from, c_msg))
             + sum(evidence(GAUSS, "ep")(sample=means_msg[j], mean=mu[j], precision=1 / v[j])
                   + var_ev(prior[j], means_msg[j], (means_msg[j], prior[j])) for j in k))
    assert_close(log_z, np.log(z.sum()))
    assert_close((c_msg * c_from).probs, q)
    assert_close([(prior * means_msg).mean, (prior * means_msg).variance], [mean, var])


# ----- EP, an exit variable -----------------------------------------------------------
def test_ep_exit_of_a_gaussian_defined_in_every_case_is_exact() -> None:
    """c ~ Discrete(π); case k: x ~ N(m_k, 1/τ_k); then a ~ N(x, b) observed."""
    pi, m, tau = np.array([0.5, 0.3, 0.2]), np.array([-2.0, 0.0, 3.0]), np.array([1.0, 4.0, .5])
    a, b = 1.0, 0.8
    z = pi * stats.norm.pdf(a, m, np.sqrt(1 / tau + b))
    prec = tau + 1 / b
    mu = (m * tau + a / b) / prec
    w = z / z.sum()
    mean = np.sum(w * mu)
    var = np.sum(w * (1 / prec + mu ** 2)) - mean ** 2

    c_msg = Discrete(pi)
    fwd = op(CASES, "ep", "cases")(selector=c_msg)
    prior = op(GAUSS, "ep", "sample")(mean=m, precision=tau)  # the case's factor -> x_k
    lik = op(GAUSS, "ep", "mean")(sample=a, precision=1 / b)  # the use of x -> x
    to_values = op(EXIT, "ep", "values")(exit=lik, cases=fwd)
    body = np.array([evidence(GAUSS, "ep")(sample=to_values[k], mean=m[k], precision=tau[k])
                     + var_ev(prior[k], to_values[k], (to_values[k], prior[k]))
                     for k in range(3)])
    exit_cases = op(EXIT, "ep", "cases")(exit=lik, cases=fwd, values=prior)
    marginal = fwd * Bernoulli.from_natural(body) * exit_cases
    x_msg = op(EXIT, "ep", "exit")(exit=lik, cases=marginal / exit_cases, values=prior)
    to_cases = marginal / fwd
    c_from = op(CASES, "ep", "selector")(cases=to_cases, selector=c_msg)
    log_z = (evidence(CASES, "ep")(cases=to_cases, selector=c_msg)
             + evidence(DISC, "ep")(sample=c_from, probs=pi)
             + var_ev(c_msg, c_from, (c_from, c_msg))
             + var_ev(x_msg, lik, (lik, x_msg))
             + evidence(GAUSS, "ep")(sample=a, mean=x_msg, precision=1 / b)
             + evidence(EXIT, "ep")(exit=lik, cases=fwd, values=prior))
    assert_close(log_z, np.log(z.sum()))
    assert_close((c_msg * c_from).probs, w)
    assert_close([(x_msg * lik).mean, (x_msg * lik).variance], [mean, var])


# ----- VMP ----------------------------------------------------------------------------
def _entropy(q: np.ndarray) -> float:
    return float(-np.sum(special.xlogy(q, q)))


def test_vmp_enter_reaches_the_mean_field_fixed_point_and_its_bound() -> None:
    """c ~ Discrete(π); x ~ Bernoulli(px); case k: x ~ Bernoulli(p_k) (x enters every case).

    Coordinate ascent with the operators equals coordinate ascent on the mean-field bound
    Σ q log p − Σ q log q written out by enumeration, step for step."""
    pi, px, p = np.array([0.5, 0.2, 0.3]), 0.4, np.array([0.9, 0.2, 0.6])
    log_g = np.log(np.stack([1 - p, p], axis=-1))  # [k, x]
    q_c, q_x = pi.copy(), np.array([1 - px, px])
    c_msg, x_msg = Discrete(pi), Bernoulli(px)
    for _ in range(30):
        fwd = op(CASES, "vmp", "cases")(selector=c_msg)
        clones = op(ENTER, "vmp", "enter")(cases=fwd, value=x_msg)
        ell = evidence(BERN, "vmp")(sample=clones, p=p)
        back = Bernoulli.from_natural(ell)
        c_msg = Discrete(pi) * op(CASES, "vmp", "selector")(cases=back, selector=c_msg)
        fwd = op(CASES, "vmp", "cases")(selector=c_msg)
        into_x = op(ENTER, "vmp", "value")(enter=op(BERN, "vmp", "sample")(p=p), cases=fwd)
        x_msg = Bernoulli(px) * into_x

        q_c = pi * np.exp(log_g @ q_x)
        q_c /= q_c.sum()
        q_x = np.array([1 - px, px]) * np.exp(q_c @ log_g)
        q_x /= q_x.sum()
    elbo = (evidence(DISC, "vmp")(sample=c_msg, probs=pi) + _entropy(c_msg.probs)
            + evidence(BERN, "vmp")(sample=x_msg, p=px) + _entropy(np.array([1 - x_msg.p,
                                                                             x_msg.p]))
            + evidence(CASES, "vmp")(cases=back, selector=c_msg))
    exact_elbo = (q_c @ np.log(pi) + q_x @ np.log([1 - px, px]) + q_c @ log_g @ q_x
                  + _entropy(q_c) + _entropy(q_x))
    assert_close(c_msg.probs, q_c)
    assert_close(x_msg.p, q_x[1])
    assert_close(elbo, exact_elbo, rtol=1e-8)
    assert elbo < np.log(np.sum(pi[:, None] * np.array([1 - px, px]) * np.exp(log_g)))


def test_vmp_exit_bound_is_tight_and_exact() -> None:
    """c ~ Discrete(π); case k: x ~ Bernoulli(p_k); then an observed true ~ Bernoulli(r_x)
    (a table on x).  q(c) q(x_k) can hold the posterior, so VMP's bound is log Z."""
    pi, p, r = np.array([0.6, 0.1, 0.3]), np.array([0.8, 0.3, 0.5]), np.array([0.2, 0.7])
    z = pi * ((1 - p) * r[0] + p * r[1])
    lik = Bernoulli.from_natural(np.log(r[1] / r[0]))  # the table, as a message to x
    c_msg = Discrete(pi)
    fwd = op(CASES, "vmp", "cases")(selector=c_msg)
    q_k = op(BERN, "vmp", "sample")(p=p) * op(EXIT, "vmp", "values")(exit=lik, cases=fwd)
    q_kp = np.stack([1 - q_k.p, q_k.p], axis=-1)
    body = (evidence(BERN, "vmp")(sample=q_k, p=p) - np.sum(special.xlogy(q_kp, q_kp), -1))
    back = Bernoulli.from_natural(body) * op(EXIT, "vmp", "cases")(exit=lik, cases=fwd,
                                                                  values=q_k)
    c_msg = Discrete(pi) * op(CASES, "vmp", "selector")(cases=back, selector=c_msg)
    fwd = op(CASES, "vmp", "cases")(selector=c_msg)
    x = op(EXIT, "vmp", "exit")(cases=fwd, values=q_k)
    table = np.sum(np.stack([1 - x.p, x.p]) * np.log(r))  # E_q[log table(x)]
    elbo = (evidence(DISC, "vmp")(sample=c_msg, probs=pi) + _entropy(c_msg.probs)
            + evidence(CASES, "vmp")(cases=back, selector=c_msg) + table
            + evidence(EXIT, "vmp")(exit=lik, cases=fwd, values=q_k))
    assert_close(c_msg.probs, z / z.sum())
    assert_close(elbo, np.log(z.sum()))


# ----- vectorised: whole plates in one call -------------------------------------------
N, K = 5, 3


def _batch(seed: int) -> dict:
    """Random messages on a plate of N points with K cases (plate axis first)."""
    rng = np.random.default_rng(seed)

    def gauss(*shape: int) -> Gaussian:
        return Gaussian(rng.normal(size=shape), rng.uniform(0.3, 3.0, size=shape))

    return {"selector": Discrete(rng.dirichlet(np.ones(K), size=N)),
            "cases": Bernoulli.from_natural(2 * rng.normal(size=(N, K))),
            "value": gauss(N), "enter": gauss(N, K), "enter_partial": gauss(N, 2),
            "enter_one": gauss(N), "exit": gauss(N), "values": gauss(N, K)}


def _same(batched, element) -> None:
    if isinstance(element, Bernoulli | Discrete | Gaussian):
        for x, y in zip(batched.eta, element.eta, strict=True):
            assert_close(x, y, rtol=1e-12, atol=1e-12)
    else:
        assert_close(batched, element, rtol=1e-12, atol=1e-12)


ROW_CALLS = [(f, a, t) for f in (CASES, ENTER, ENTER_PARTIAL, ENTER_ONE, EXIT)
             for (a, t) in f.operators] + [(f, a, None) for f in (CASES, EXIT)
                                           for a in ("ep", "vmp")]
CONSTANTS = {"indices": (0, 2), "index": 1}


@pytest.mark.parametrize("factor, algorithm, target", ROW_CALLS,
                         ids=[f"{f.name}-{a}-{t or 'evidence'}" for f, a, t in ROW_CALLS])
def test_a_plate_in_one_call_equals_each_point(factor, algorithm, target) -> None:
    """Each operator on N points at once equals N calls on one point each."""
    args = _batch(7)
    if target is None:
        fn, reads = factor.evidence[algorithm], factor.arg_names
    else:
        fn = factor.message(algorithm, target)
        reads = [r for r in factor.operators[(algorithm, target)].reads
                 if r not in factor.buffers]
    names = [r for r in reads if r in args or r in CONSTANTS]
    whole = fn(**{r: CONSTANTS.get(r, args.get(r)) for r in names})
    for n in range(N):
        one = fn(**{r: CONSTANTS[r] if r in CONSTANTS else args[r][n] for r in names})
        scalar = isinstance(whole, np.ndarray) and whole.ndim == 0
        _same(whole if scalar else whole[n], one)


def test_a_switch_in_a_plate_is_one_array_operation_of_shape_n_by_k() -> None:
    """EnterOne inside ``for n: for k: if z_cases[n, k]`` (index = the switch loop) gives
    (N, K) messages equal to the call for each point n and component k.  Under EP each
    call's cases message lacks that call's own message: the (N, K) call lacks all of them,
    the call for (n, k) only its own on case k."""
    rng = np.random.default_rng(3)
    marginal = Bernoulli.from_natural(2 * rng.normal(size=(N, K)))
    means = Gaussian(rng.normal(size=K), rng.uniform(0.5, 2.0, size=K))
    clone = Gaussian(rng.normal(size=(N, K)), rng.uniform(0.5, 2.0, size=(N, K)))
    own = ENTER_ONE.message("ep", "cases")(enter_one=clone, cases=marginal,
                                           value=means, index=np.arange(K))
    for algorithm, target in ENTER_ONE.operators:
        operator = ENTER_ONE.operators[(algorithm, target)]
        if operator.buffer:
            continue
        fn = ENTER_ONE.message(algorithm, target)
        reads = [r for r in operator.reads if r not in ENTER_ONE.buffers]
        ep = algorithm == "ep"
        kw = {"cases": marginal / own if ep else marginal, "value": means, "enter_one": clone,
              "index": np.arange(K)}
        whole = fn(**{r: kw[r] for r in reads})
        assert whole.batch_shape == (N, K)
        for n, k in np.ndindex(N, K):
            lacks = Bernoulli.from_natural(np.where(np.arange(K) == k, own.log_odds[n, k], 0))
            kw = {"cases": marginal[n] / lacks if ep else marginal[n], "value": means[k],
                  "enter_one": clone[n, k], "index": k}
            one = fn(**{r: kw[r] for r in reads})
            _same(whole[n, k], one[k] if target == "cases" else one)


def test_enter_one_and_enter_are_enter_partial_with_one_and_all_cases() -> None:
    args = _batch(11)
    cases, value = args["cases"], args["value"]
    one = ENTER_ONE.message("ep", "value")(enter_one=args["enter_one"], cases=cases,
                                           value=value, index=1)
    partial = ENTER_PARTIAL.operators[("ep", "value")].fn(
        enter_partial=args["enter_one"][:, None], cases=cases, value=value, indices=(1,))
    _same(one, partial)
    full = ENTER.operators[("ep", "value")].fn(enter=args["enter"], cases=cases, value=value)
    partial = ENTER_PARTIAL.operators[("ep", "value")].fn(
        enter_partial=args["enter"], cases=cases, value=value, indices=(0, 1, 2))
    _same(full, partial)


# ----- the transform's statements name these factors ------------------------------------
def test_every_gate_statement_the_transform_emits_names_a_factor_and_its_arguments() -> None:

    seen = set()
    for program, _ in PROGRAMS.values():
        out = gates(program)
        for stmt, _ in walk(out.body):
            if stmt.op.startswith("Gate."):
                factor = FACTORS[stmt.op]
                names = [k for k, _ in stmt.inputs] + [k for k, _ in stmt.params]
                assert set(names) <= set(factor.arg_names[1:]), stmt
                seen.add(stmt.op)
    assert seen == {"Gate.Cases", "Gate.Enter", "Gate.EnterPartial", "Gate.EnterOne",
                    "Gate.Exit"}


# ----- projections of mixtures ---------------------------------------------------------
@pytest.mark.parametrize("family", ["Gaussian", "Gamma", "Beta", "Bernoulli", "Discrete",
                                    "Dirichlet"])
def test_projection_keeps_the_mixture_mean_and_variance(family: str) -> None:
    rng = np.random.default_rng(5)
    u = rng.uniform(0.5, 3.0, size=(2, 3))
    comps = {"Gaussian": lambda: Gaussian(rng.normal(size=(2, 3)), u),
             "Gamma": lambda: Gamma(u, rate=rng.uniform(0.5, 2.0, size=(2, 3))),
             "Beta": lambda: Beta(u, rng.uniform(0.5, 3.0, size=(2, 3))),
             "Bernoulli": lambda: Bernoulli(rng.uniform(0.1, 0.9, size=(2, 3))),
             "Discrete": lambda: Discrete(rng.dirichlet(np.ones(4), size=(2, 3))),
             "Dirichlet": lambda: Dirichlet(rng.uniform(0.5, 3.0, size=(2, 3, 4)))}[family]()
    log_w = rng.normal(size=(2, 3))
    w = special.softmax(log_w, axis=-1)
    p = project(comps, log_w)
    if family == "Discrete":  # a mixture of categoricals is categorical
        assert_close(p.probs, np.sum(w[..., None] * comps.probs, axis=-2))
        return
    lead = (...,) + (None,) * comps.event_ndim
    mean = np.sum(w[lead] * comps.mean, axis=-1 - comps.event_ndim)
    square = np.sum(w[lead] * (comps.variance + comps.mean ** 2), axis=-1 - comps.event_ndim)
    assert_close(p.mean, mean)
    if family == "Dirichlet":  # mean and Σ_k E[p_k²]
        assert_close(np.sum(p.variance + p.mean ** 2, -1), np.sum(square, -1))
    else:
        assert_close(p.variance, square - mean ** 2)


# ----- Gate.ExitGiven: a variable drawn in a gate on an exit, once per case ---------------
@pytest.mark.parametrize("algorithm", ["ep", "vmp"])
def test_exit_given_is_the_posterior_given_the_exits_case(algorithm) -> None:
    """Fuzz seed 22 with v11 observed true, written once per case of v1 (the copies
    v9_k of v9, each where v1 = k and v2 is false): Gate.ExitGiven's message to v9 from
    the exact posteriors q(v1), q(v2 | v1 = k) and q(v9_k | v1 = k, ¬v2) is enumeration's
    P(v9 | ¬v2, data) = 0.5026 (1e-12); weighing by q(v1 = k) alone gives 0.5154.  Its
    messages back are uniform and it adds nothing to the evidence (read by nothing)."""
    # P(data | v1 = k): 1 in case true; 0.8 + 0.2 (0.5 + 0.5 · 0.2) = 0.92 in case false
    like = np.array([1.0, 0.8 + 0.2 * (0.5 + 0.5 * 0.2)])
    q1 = np.array([0.95, 0.05]) * like / (np.array([0.95, 0.05]) @ like)
    f = np.array([0.8, 0.2 * 0.6 / like[1]])  # P(¬v2 | v1 = k, data)
    copies = np.array([0.5, 0.5 / (0.5 + 0.5 * 0.2)])  # q(v9_k = true)
    cases = Bernoulli.from_natural(np.log(q1))  # the cases' log weights ℓ_k
    given = Bernoulli.from_natural(np.log(1 - f) - np.log(f))
    values = Bernoulli.from_natural(np.log(copies) - np.log1p(-copies))
    exact = (0.95 * 0.8 * 0.5 + 0.05 * 0.2 * 0.5) / (0.95 * 0.8 + 0.05 * 0.2 * 0.6)
    out = op(EXIT_GIVEN, algorithm, "exit")(cases=cases, given=given, values=values,
                                           case=np.asarray(1.0))
    assert abs(float(out.p) - exact) < 1e-12
    assert abs(float(q1 @ copies) - 0.5154) < 1e-4  # Gate.Exit's weights: not this
    assert abs(float(op(EXIT, "vmp", "exit")(cases=cases, values=values).p)
               - float(q1 @ copies)) < 1e-12
    uniform = Bernoulli.uniform(())
    back = op(EXIT_GIVEN, algorithm, "values")(exit=uniform, cases=cases)
    assert np.all(back.is_uniform()) and back.batch_shape == (2,)
    assert np.all(op(EXIT_GIVEN, algorithm, "cases")(cases=cases, values=values)
                  .is_uniform())
    assert np.all(op(EXIT_GIVEN, algorithm, "given")(given=given).is_uniform())
    assert evidence(EXIT_GIVEN, algorithm)(exit=uniform, cases=cases, given=given,
                                           values=values, case=np.asarray(1.0)) == 0.0


def test_exit_given_a_discrete_exit_in_a_plate_weighs_each_element() -> None:
    """Three cases, a discrete e (3 values) given case 2, a plate of 2: each element's
    mixture Σ_k w_k p_k with w_k ∝ q(k) q(e = 2 | k), against NumPy."""
    rng = np.random.default_rng(19)
    q = rng.dirichlet(np.ones(3), size=2)  # (N, K)
    qe = rng.dirichlet(np.ones(3), size=(2, 3))  # (N, K, values of e)
    p = rng.uniform(0.1, 0.9, size=(2, 3))
    w = q * qe[..., 2]
    expected = np.sum(w * p, -1) / w.sum(-1)
    out = op(EXIT_GIVEN, "vmp", "exit")(
        cases=Bernoulli.from_natural(np.log(q)), given=Discrete.from_natural(np.log(qe)),
        values=Bernoulli.from_natural(np.log(p) - np.log1p(-p)), case=np.asarray(2.0))
    assert_close(out.p, expected, atol=1e-12)
