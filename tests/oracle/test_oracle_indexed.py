"""Random data-indexed models against conjugate closed forms.

A fresh generator (the oracle's families index only by a latent Switch; the fuzzer runs
``ff.Data`` indices for finiteness, not exactness): K latent components ``theta[k]`` --
Gaussian means (known precision), Beta, Gamma or Dirichlet -- and N observations, each
reading the component its index selects, written four ways:

* ``theta[idx]`` with ``idx`` a constant integer array;
* ``theta[idx]`` with ``idx`` an ``ff.Data`` (then run again with a new index and new
  data, without recompiling);
* ``ff.Switch(z)`` with ``z`` an observed Discrete and ``theta[z]``;
* ``ff.Case(z, k)`` for every k, with ``z`` observed, and ``theta[k]`` in each case;

the observations optionally inside an outer plate of R groups (``idx[r, n]``, the
components shared).

The reference, written independently of factorflow with SciPy: each component's conjugate
posterior from the observations assigned to it, and log Z as the sum of each component's
marginal likelihood (plus log p(z) for an observed z).  Each observation reads one
component, so the factor graph is a forest: EP and VMP are both exact (1e-9).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import special, stats

import factorflow as ff

SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
FAMILIES = ("Gaussian", "Beta", "Gamma", "Dirichlet")
FORMS = ("constant", "data", "switch", "case")


@dataclass
class Indexed:
    family: str
    form: str
    groups: int | None  # R, or None for no outer plate
    prior: tuple  # Gaussian (means (K,), precision); Beta (a, b); Gamma (shape, rate);
    # Dirichlet (alpha,)
    likelihood: float | None  # the Gaussian observations' precision
    idx: tuple  # (N,) or (R, N)
    y: tuple  # the observations, same shape (Dirichlet: categories)
    z_probs: tuple | None  # switch/case: z ~ Discrete(z_probs)
    k: int
    #: a second index and data for the "data" form (run again without recompiling)
    again: tuple | None = None

    def __str__(self):
        return repr(self)


def _theta(spec: Indexed, name="theta"):
    if spec.family == "Gaussian":
        means, prec = spec.prior
        return ff.Gaussian(name, np.asarray(means), precision=prec)
    if spec.family == "Beta":
        return ff.Beta(name, *spec.prior)
    if spec.family == "Gamma":
        return ff.Gamma(name, spec.prior[0], rate=spec.prior[1])
    return ff.Dirichlet(name, np.asarray(spec.prior[0]))


def _observe(spec: Indexed, param, observed):
    if spec.family == "Gaussian":
        return ff.Gaussian("y", param, precision=spec.likelihood, observed=observed)
    if spec.family == "Beta":
        return ff.Bernoulli("y", param, observed=observed)
    if spec.family == "Gamma":
        return ff.Poisson("y", param, observed=observed)
    return ff.Discrete("y", param, observed=observed)


def build(spec: Indexed) -> ff.Model:
    idx = np.asarray(spec.idx)
    y = np.asarray(spec.y)
    if spec.family == "Beta":
        y = y.astype(bool)
    n_len = idx.shape[-1]
    with ff.Model("indexed_oracle") as model:
        k = ff.Range("k", spec.k)
        n = ff.Range("n", n_len)
        with ff.Plate(k):
            theta = _theta(spec)
        # (a variable over two plates cannot be indexed: ModelError "needs a variable
        # with one plate axis"; groups share the components)
        outer = [ff.Plate(ff.Range("r", spec.groups))] if spec.groups else []
        for p in outer:
            p.__enter__()
        with ff.Plate(n):
            if spec.form in ("constant", "data"):
                index = idx if spec.form == "constant" else ff.Data("idx", idx)
                observed = y if spec.form == "constant" else ff.Data("y_data", y)
                _observe(spec, theta[index], observed)
            else:
                z = ff.Discrete("z", np.asarray(spec.z_probs), observed=idx)
                if spec.form == "switch":
                    with ff.Switch(z):
                        _observe(spec, theta[z], y)
                else:
                    for j in range(spec.k):
                        with ff.Case(z, j):
                            _observe(spec, theta[j], y)
        for p in reversed(outer):
            p.__exit__(None, None, None)
    return model


# ----- the reference ---------------------------------------------------------------------------
def _component(spec: Indexed, j: int, values: np.ndarray):
    """Posterior parameters of component j from its observations, and their log marginal
    likelihood."""
    if spec.family == "Gaussian":
        means, prec0 = spec.prior
        m0, lam = means[j], spec.likelihood
        n = len(values)
        post_prec = prec0 + n * lam
        post_mean = (prec0 * m0 + lam * values.sum()) / post_prec
        cov = np.full((n, n), 1.0 / prec0) + np.eye(n) / lam
        log_ml = stats.multivariate_normal(np.full(n, m0), cov).logpdf(values) if n else 0.0
        return {"mean": post_mean, "variance": 1.0 / post_prec}, float(log_ml)
    if spec.family == "Beta":
        a, b = spec.prior
        s = int(values.sum())
        f = len(values) - s
        log_ml = special.betaln(a + s, b + f) - special.betaln(a, b)
        return {"mean": (a + s) / (a + b + s + f)}, float(log_ml)
    if spec.family == "Gamma":
        shape, rate = spec.prior
        s, n = values.sum(), len(values)
        log_ml = (shape * np.log(rate) - special.gammaln(shape)
                  + special.gammaln(shape + s) - (shape + s) * np.log(rate + n)
                  - special.gammaln(values + 1).sum())
        return {"mean": (shape + s) / (rate + n)}, float(log_ml)
    alpha = np.asarray(spec.prior[0], float)
    counts = np.bincount(values.astype(int), minlength=len(alpha))
    post = alpha + counts
    log_ml = (special.gammaln(alpha.sum()) - special.gammaln(post.sum())
              + np.sum(special.gammaln(post) - special.gammaln(alpha)))
    return {"mean": post / post.sum()}, float(log_ml)


def reference(spec: Indexed, idx=None, y=None):
    """Per-component posterior moments (arrays over K) and log Z."""
    idx = np.asarray(spec.idx if idx is None else idx, int).ravel()
    y = np.asarray(spec.y if y is None else y, float).ravel()
    moments: dict[str, list] = {}
    log_z = 0.0
    for j in range(spec.k):
        post, log_ml = _component(spec, j, y[idx == j])
        log_z += log_ml
        for key, value in post.items():
            moments.setdefault(key, []).append(value)
    if spec.z_probs is not None:
        log_z += float(np.sum(np.log(np.asarray(spec.z_probs)[idx])))
    return {key: np.asarray(v) for key, v in moments.items()}, log_z


# ----- the generator -----------------------------------------------------------------------------
@st.composite
def indexed_models(draw):
    family = draw(st.sampled_from(FAMILIES))
    form = draw(st.sampled_from(FORMS))
    k = draw(st.integers(1, 3))
    n = draw(st.integers(0, 5))
    groups = draw(st.sampled_from((None, None, 1, 2)))
    shape = (n,) if groups is None else (groups, n)
    cats = draw(st.integers(2, 3))
    if family == "Gaussian":
        prior = (tuple(draw(st.sampled_from((-2.0, 0.0, 1.0, 3.0))) for _ in range(k)),
                 draw(st.sampled_from((0.25, 1.0, 2.0))))
    elif family == "Beta":
        prior = (draw(st.sampled_from((0.5, 1.0, 2.0))), draw(st.sampled_from((0.5, 1.0, 3.0))))
    elif family == "Gamma":
        prior = (draw(st.sampled_from((0.5, 1.0, 2.0))), draw(st.sampled_from((0.5, 1.0, 2.0))))
    else:
        prior = (tuple(draw(st.sampled_from((0.5, 1.0, 2.0))) for _ in range(cats)),)

    def values(size):
        flat = []
        for _ in range(int(np.prod(size))):
            if family == "Gaussian":
                flat.append(draw(st.sampled_from((-1.9, -0.4, 0.3, 1.2, 2.7))))
            elif family == "Beta":
                flat.append(int(draw(st.booleans())))
            elif family == "Gamma":
                flat.append(draw(st.integers(0, 5)))
            else:
                flat.append(draw(st.integers(0, cats - 1)))
        return np.array(flat).reshape(size).tolist()

    def index(size):
        return np.array([draw(st.integers(0, k - 1)) for _ in range(int(np.prod(size)))],
                        int).reshape(size).tolist()

    def tup(x):
        return tuple(tup(v) for v in x) if isinstance(x, list) else x

    z_probs = None
    if form in ("switch", "case"):
        w = np.array([draw(st.integers(1, 5)) for _ in range(k)], float)
        z_probs = tuple(np.round(w / w.sum(), 3)[:-1]) + (
            round(1 - float(np.round(w / w.sum(), 3)[:-1].sum()), 3),)
    again = (tup(index(shape)), tup(values(shape))) if form == "data" else None
    return Indexed(family, form, groups, prior,
                   draw(st.sampled_from((0.5, 1.0, 4.0))) if family == "Gaussian" else None,
                   tup(index(shape)), tup(values(shape)), z_probs, k, again)


# ----- checks ----------------------------------------------------------------------------------
def _compare(spec, result, moments, log_z, label):
    out = []
    q = result["theta"]
    for key, want in moments.items():
        got = np.asarray(getattr(q, key))
        if got.shape != np.shape(want) or not np.allclose(got, want, rtol=1e-9, atol=1e-9):
            out.append(f"{label}theta.{key} {got.tolist()} != {np.asarray(want).tolist()}")
    if not np.isclose(result.log_evidence, log_z, rtol=1e-9, atol=1e-9):
        out.append(f"{label}log evidence {result.log_evidence} != log Z {log_z}")
    return out


def check(spec: Indexed, algorithm: str) -> list[str]:
    compiled = build(spec).compile(algorithm)
    moments, log_z = reference(spec)
    out = _compare(spec, compiled.run(progress=False), moments, log_z, "")
    if spec.again is not None:
        idx, y = spec.again
        new_y = np.asarray(y).astype(bool) if spec.family == "Beta" else np.asarray(y)
        result = compiled.run(data={"idx": np.asarray(idx), "y_data": new_y}, progress=False)
        moments, log_z = reference(spec, idx, y)
        out += _compare(spec, result, moments, log_z, "run again: ")
    return out


def test_reference_gaussian_component_is_the_closed_form():
    spec = Indexed("Gaussian", "constant", None, ((0.0, 2.0), 1.0), 2.0, (0, 1, 1),
                   (0.5, 1.0, 3.0), None, 2)
    moments, log_z = reference(spec)
    # component 1: prior N(2, 1), two observations with precision 2
    np.testing.assert_allclose(moments["mean"], [(0 + 2 * 0.5) / 3, (2 + 2 * 4.0) / 5],
                               rtol=1e-12)
    np.testing.assert_allclose(moments["variance"], [1 / 3, 1 / 5], rtol=1e-12)
    expected = stats.norm(0, np.sqrt(1.5)).logpdf(0.5) + stats.multivariate_normal(
        [2, 2], [[1.5, 1], [1, 1.5]]).logpdf([1.0, 3.0])
    np.testing.assert_allclose(log_z, expected, rtol=1e-12)


@pytest.mark.parametrize("algorithm", ["ep", "vmp"])
@settings(max_examples=40, **SETTINGS)
@given(spec=indexed_models())
def test_random_indexed_models_against_conjugate_closed_forms(spec, algorithm):
    failures = check(spec, algorithm)
    assert not failures, f"{spec}\n{failures}"
