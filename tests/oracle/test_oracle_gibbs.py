"""The oracle on Gibbs sampling: ``model.infer("gibbs")`` on the random models of
:mod:`tests.oracle.models` (discrete models with gates; one Beta, Gamma, Dirichlet or
Gaussian variable with conjugate and gated observations; linear-Gaussian models, gated
too) against their exact references (enumeration, quadrature, Gaussian conditioning:
``tests.oracle.exact``), and through ``ff.logistic`` and ``ff.exp`` links
(:mod:`tests.oracle.links`) against quadrature.  Named refusals (``constrain_true`` has no
density; a vector w under a non-affine link has no joint sampler) pass.

A sampler's estimate is a Monte Carlo average, so the tolerance is computed from the
draws: for each compared statistic f (an indicator of a category, or a real value), the
effective sample size of f's draws over all chains (:func:`ess`, Geyer's initial monotone
sequence as Stan and ArviZ compute it, written out here) and the exact posterior variance
of f give the Monte Carlo standard error sqrt(Var f / ESS), and the estimate must lie
within Z = 5 of them of the exact posterior mean (a chance failure: about 6e-7 per
statistic; the runs are seeded, so a pass is repeatable).  Only elements that exist in
every configuration are compared (a variable in one branch of a gate is sampled where it
does not exist, with no defined posterior).  An ESS below ``MIN_ESS`` is a finding of its
own: the chains do not mix, and their average can be silently wrong.
"""

from __future__ import annotations

import warnings

import numpy as np
from hypothesis import given

import factorflow as ff
from tests.oracle import links, models
from tests.oracle.build import build
from tests.oracle.checks import oracle_settings
from tests.oracle.exact import reference

Z = 5.0
MIN_ESS = 50.0
DRAWS, BURN, CHAINS = 1000, 300, 4
SETTINGS = oracle_settings(20)
#: the gated linear-Gaussian models and the links cost the most draws per model
FEW = oracle_settings(10)


def ess(x: np.ndarray) -> float:
    """The effective sample size of draws ``x`` (chain, draw): the chains' pooled
    autocorrelations summed in pairs while the pairs stay positive and decrease (Geyer
    1992; Gelman et al., BDA3 §11.5, with the split-chain variance estimate omitted)."""
    chains, n = x.shape
    centred = x - x.mean(axis=1, keepdims=True)
    f = np.fft.rfft(centred, 2 * n, axis=1)
    acov = np.fft.irfft(f * np.conj(f), axis=1)[:, :n] / n  # per chain, lag 0..n-1
    within = acov[:, 0].mean() * n / (n - 1)
    between = n * x.mean(axis=1).var(ddof=1) if chains > 1 else 0.0
    var_plus = (n - 1) / n * within + between / n
    if var_plus <= 0:
        return float(chains * n)  # constant draws: no autocorrelation to measure
    rho = 1.0 - (within - acov.mean(axis=0)) / var_plus
    total, prev = 0.0, np.inf
    for t in range(0, n - 1, 2):
        pair = rho[t] + rho[t + 1]
        if pair <= 0:
            break
        pair = min(pair, prev)
        total += pair
        prev = pair
    tau = -1.0 + 2.0 * total
    return float(chains * n / max(tau, 1.0 / np.log10(chains * n)))


def _statistics(kind: str, draws: np.ndarray, values: dict, categories: int | None):
    """(name, per-element draws of f (chain, draw, *elements), exact E f, exact Var f)."""
    if kind == "bool":
        p = np.asarray(values["p"], float)
        yield "p", draws.astype(float), p, p * (1 - p)
    elif kind == "int":
        probs = np.asarray(values["probs"], float)
        for k in range(probs.shape[-1]):
            pk = probs[..., k]
            yield f"probs[{k}]", (draws == k).astype(float), pk, pk * (1 - pk)
    else:
        yield "mean", np.asarray(draws, float), np.asarray(values["mean"], float), \
            np.asarray(values["variance"], float)


def gibbs_check(spec) -> list[str]:
    """Every Monte Carlo estimate against its exact value; the failures as text."""
    ref = reference(spec)
    model, labels = build(spec)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = model.infer("gibbs", draws=DRAWS, burn=BURN, chains=CHAINS, seed=0)
    except ff.UnsupportedFactorError as e:  # a named refusal (constrain_true: no density)
        if "use 'ep' or 'vmp'" in str(e):
            return []
        raise
    failures = []
    for name, m in ref.marginals.items():
        label = labels[name]
        if label not in result.names:
            continue  # a derived variable is not sampled
        draws = np.asarray(result.samples(label))
        always = np.asarray(m.exists) > 1 - 1e-9
        for stat, f, mean, var in _statistics(m.kind, draws, m.values, None):
            f = f.reshape(f.shape[:2] + (-1,))
            mean, var = np.broadcast_to(mean, f.shape[2:]), np.broadcast_to(var, f.shape[2:])
            exists = np.broadcast_to(always, np.shape(m.exists)).reshape(-1)
            if exists.size != f.shape[2]:  # a Dirichlet: one flag per vector
                exists = np.repeat(exists, f.shape[2] // max(exists.size, 1))
            for i in np.flatnonzero(exists):
                n_eff = ess(f[:, :, i])
                estimate = float(f[:, :, i].mean())
                tol = Z * np.sqrt(var[i] / n_eff) + 1e-12
                where = f"{stat} of {name}" + (f" [{i}]" if f.shape[2] > 1 else "")
                if n_eff < MIN_ESS and var[i] > 1e-6:
                    failures.append(f"{where}: ESS {n_eff:.1f} of {f[:, :, i].size} draws "
                                    f"(the chains do not mix); estimate {estimate:.6g}, "
                                    f"exact {mean[i]:.6g}")
                elif abs(estimate - mean[i]) > tol:
                    failures.append(f"{where}: estimate {estimate:.6g}, exact {mean[i]:.6g}"
                                    f" (|diff| {abs(estimate - mean[i]):.3g} > {Z:g} Monte "
                                    f"Carlo s.e. {tol / Z:.3g}, ESS {n_eff:.0f})")
    return failures


def _verdict(spec) -> None:
    failures = gibbs_check(spec)
    assert not failures, "\n".join([str(spec)] + failures)


def test_ess_of_independent_and_correlated_draws():
    """The ESS estimator itself: about n for independent draws, about n (1 - φ)/(1 + φ)
    for an AR(1) chain with coefficient φ."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 5000))
    assert 0.9 < ess(x) / x.size < 1.1
    phi = 0.9
    y = np.zeros((4, 20000))
    for t in range(1, y.shape[1]):
        y[:, t] = phi * y[:, t - 1] + rng.normal(size=4)
    assert 0.8 < ess(y) / (y.size * (1 - phi) / (1 + phi)) < 1.2


@SETTINGS
@given(models.discrete(max_configurations=256))
def test_gibbs_on_discrete_models(spec):
    _verdict(spec)


@SETTINGS
@given(models.one_continuous())
def test_gibbs_with_one_continuous_variable(spec):
    _verdict(spec)


@SETTINGS
@given(models.linear_gaussian())
def test_gibbs_on_linear_gaussian_models(spec):
    _verdict(spec)


def gibbs_links_check(spec: links.LinkModel) -> list[str]:
    """Gibbs through ``ff.logistic`` (Pólya-Gamma) and ``ff.exp`` (slice sampling) against
    the exact posterior mean of w by quadrature (``tests.oracle.links.exact``)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = links.build(spec).infer("gibbs", draws=DRAWS, burn=BURN,
                                             chains=CHAINS, seed=0)
    except ff.UnsupportedFactorError as e:  # named: no joint sampler for a vector w
        if "no sampler for 'w'" in str(e):
            return []
        raise
    ex = links.exact(spec)
    draws = np.asarray(result.samples("w"), float).reshape(CHAINS, DRAWS, -1)
    failures = []
    for d in range(spec.dim):
        n_eff = ess(draws[:, :, d])
        estimate = float(draws[:, :, d].mean())
        se = float(np.sqrt(ex.covariance[d, d] / n_eff))
        if n_eff < MIN_ESS or abs(estimate - ex.mean[d]) > Z * se:
            failures.append(f"mean of w[{d}]: estimate {estimate:.6g}, exact {ex.mean[d]:.6g}"
                            f" (Monte Carlo s.e. {se:.3g}, ESS {n_eff:.0f})")
    return failures


@FEW
@given(models.linear_gaussian(gated=True))
def test_gibbs_on_gated_linear_gaussian_models(spec):
    _verdict(spec)


@FEW
@given(links.link_models(links=("logistic", "exp")))
def test_gibbs_through_links(spec):
    failures = gibbs_links_check(spec)
    assert not failures, "\n".join([str(spec)] + failures)
