"""The chain factors' recursions (``factors.chains``): both strategies of each agree with
each other and with the references of ``tests/model/test_chains.py``, over outer plates."""

from __future__ import annotations

import numpy as np
import pytest

from factorflow.factors.chains import discrete_forward_backward, gaussian_forward_backward
from tests.conftest import assert_close
from tests.model.test_chains import forward_backward


@pytest.mark.parametrize(("k", "t_len"), [(1, 1), (3, 1), (3, 2), (2, 9), (4, 17), (3, 50),
                                          (3, 300), (2, 4113)])  # 2, 3 levels of chunks
def test_discrete_chunked_and_sequential_equal_the_reference(k, t_len):
    rng = np.random.default_rng(k * 100 + t_len)
    pi, trans = rng.dirichlet(np.ones(k)), rng.dirichlet(np.ones(k), size=k)
    eta = rng.normal(0, 2, (2, t_len, k))
    if k > 1:
        eta[0, 0, 0] = -np.inf  # a value ruled out
    for chunked in (True, False):
        chain = discrete_forward_backward(pi, trans, eta, chunked=chunked)
        log_msg, log_q, log_z = chain.log_msg, chain.log_q, chain.log_z
        for s in range(2):
            q, ref_z = forward_backward(pi, trans, np.exp(eta[s]))
            got = np.exp(log_q[s]) / np.exp(log_q[s]).sum(axis=-1, keepdims=True)
            assert_close(got, q, 1e-10, 1e-12)
            assert_close(log_z[s], ref_z, 1e-10)
            msg = np.exp(log_msg[s] + eta[s])  # the message times the use's: q
            assert_close(msg / msg.sum(axis=-1, keepdims=True), q, 1e-10, 1e-12)


def test_gaussian_paths_agree():
    """Fewer chains than steps run on floats per chain; more, on arrays per step."""
    rng = np.random.default_rng(0)
    h, tau = rng.normal(size=(3, 2)), rng.gamma(1.0, 1.0, (3, 2))
    tau[1, 0] = 0.0  # no observation there
    args = (0.3, 0.5, 0.9, -0.2, 2.0)
    arrays = gaussian_forward_backward(*args, h, tau)  # 3 chains > 2 steps
    for row in range(3):
        floats = gaussian_forward_backward(*args, h[row:row + 1], tau[row:row + 1])
        for got, want in zip(floats[0] + floats[1], arrays[0] + arrays[1], strict=True):
            assert_close(got[0], want[row], 1e-12)
        assert_close(floats[2][0], arrays[2][row], 1e-12)


def test_discrete_unnormalised_parameters_scale_z():
    """VMP passes exp E[log p], whose sums are below 1: Z is Σ_x init[x₀] Π trans Π m_t
    with the parameters as given (2·init and rows scaled by r: Z times 2·Π r along the
    path, here r constant)."""
    rng = np.random.default_rng(1)
    pi, trans = rng.dirichlet(np.ones(3)), rng.dirichlet(np.ones(3), size=3)
    eta = rng.normal(size=(5, 3))
    base = discrete_forward_backward(pi, trans, eta)
    for chunked in (True, False):
        scaled = discrete_forward_backward(2 * pi, 0.5 * trans, eta, chunked=chunked)
        assert_close(scaled.log_z, base.log_z + np.log(2) + 4 * np.log(0.5), 1e-12)
        assert_close(scaled.log_q - scaled.log_q.max(-1, keepdims=True),
                     base.log_q - base.log_q.max(-1, keepdims=True), 1e-12, 1e-12)


@pytest.mark.parametrize("scale", [1.0, 30.0], ids=["moderate", "sharp"])
def test_vmp_transition_counts_equal_enumeration(scale):
    """The expected transition counts ξ_t(i, j) = q(x_{t−1} = i, x_t = j) under the chain
    posterior, against every path enumerated in logs (``scale`` 30: messages of log
    ratios up to about 100, nearly certain states)."""
    import itertools

    from factorflow.distributions import Dirichlet, Discrete
    from factorflow.distributions.moments import Elog
    from factorflow.factors import FACTORS
    from factorflow.factors.common import logsumexp

    rng = np.random.default_rng(7)
    k, t_len = 3, 5
    eta = rng.normal(0, 1, (t_len, k)) * scale
    eta[3, 1] = -np.inf
    rows = Dirichlet(rng.uniform(1, 4, (k, k)))
    log_trans = np.asarray(Elog(rows))  # VMP: the chain under exp E[log A]
    init = np.full(k, 1.0 / k)
    paths = np.array(list(itertools.product(range(k), repeat=t_len)))
    with np.errstate(divide="ignore"):
        log_w = (np.log(init)[paths[:, 0]] + eta[np.arange(t_len), paths].sum(axis=1)
                 + log_trans[paths[:, :-1], paths[:, 1:]].sum(axis=1))
    log_w = log_w - logsumexp(log_w)
    op = FACTORS["DiscreteChain"].operators[("vmp", "trans")].fn
    got = op(sample=Discrete.from_natural(eta), init=init, trans=rows).eta[0]
    assert_close(got[0], np.zeros((k, k)), 0, 0)
    for t in range(1, t_len):
        want = np.zeros((k, k))
        np.add.at(want, (paths[:, t - 1], paths[:, t]), np.exp(log_w))
        assert_close(got[t], want, 1e-9, 1e-12)
