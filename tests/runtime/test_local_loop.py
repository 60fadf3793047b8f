"""Local loops (``compile("vmp", local=..., local_iterations=..., local_tolerance=...,
local_restart=...)``, ``factorflow/transforms/local_loop.py``): variational EM's E-step
inside each sweep.  One pass without restart is the plain sweep, bit for bit; on LDA the
result equals variational EM written out here in NumPy (Blei et al. 2003; scikit-learn's
batch E-step: each document's q(θ) from its prior, then θ and z alternately, then φ);
the bound never falls."""

from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special

import factorflow as ff
from tests.conftest import assert_close

EXAMPLE = runpy.run_path(str(Path(__file__).parents[2] / "examples" / "lda.py"))


def _elog(a: np.ndarray) -> np.ndarray:
    return special.digamma(a) - special.digamma(a.sum(axis=1, keepdims=True))


def _counts(index: np.ndarray, size: int, r: np.ndarray) -> np.ndarray:
    out = np.zeros((size, r.shape[1]))
    np.add.at(out, index, r)
    return out


def _change(new: np.ndarray, old: np.ndarray) -> float:
    """max |Δ| / (1 + |old|): the local loop's stopping measure on natural parameters."""
    return float(np.max(np.abs(new - old) / (1.0 + np.abs(old)), initial=0.0))


def variational_em(doc, words, n_docs, n_words, alpha, eta, lam, sweeps, passes,
                   tolerance=None, restart=True, start=None):
    """Batch variational EM for LDA, token by token.  The run starts like factorflow's:
    q(θ) = Dir(α) (or Dir(``start``)), q(z) from it and q(φ) = Dir(lam).  Each sweep:
    (restart) q(θ) back to its prior (or to Dir(``start``)) and q(z) from it; then up to
    ``passes`` passes of q(θ), q(z), stopping once their natural parameters (α − 1 and
    the logits) move by less than ``tolerance``; then q(φ).  Returns the pseudo-counts,
    responsibilities and ELBO."""
    n_topics = lam.shape[0]
    first = np.full((n_docs, n_topics), alpha) if start is None else start

    def logits(gamma):  # q(z)'s natural parameters: the sum of its two messages
        return _elog(gamma)[doc] + _elog(lam)[:, words].T

    def responsibilities(gamma):
        return np.exp(logits(gamma) - special.logsumexp(logits(gamma), axis=1,
                                                        keepdims=True))

    gamma = first
    r = responsibilities(gamma)
    for _ in range(sweeps):
        if restart:
            gamma = first
            r = responsibilities(gamma)
        for _ in range(passes):
            old_gamma = gamma
            gamma = alpha + _counts(doc, n_docs, r)
            r = responsibilities(gamma)
            if tolerance is not None and max(
                    _change(gamma - 1, old_gamma - 1),
                    _change(logits(gamma), logits(old_gamma))) < tolerance:
                break
        lam = eta + _counts(words, n_words, r).T
    return gamma, lam, r, _elbo(doc, words, alpha, eta, gamma, lam, r)


def _elbo(doc, words, alpha, eta, gamma, lam, r) -> float:
    """LDA's ELBO at q(θ) = Dir(gamma), q(φ) = Dir(lam) and responsibilities r."""
    def dirichlet_terms(prior, q):  # E log p(θ) − E log q(θ), summed over the rows
        return np.sum(special.gammaln(prior * q.shape[1]) - q.shape[1] * special.gammaln(prior)
                      - special.gammaln(q.sum(1)) + special.gammaln(q).sum(1)
                      + np.sum((prior - q) * _elog(q), axis=1))

    tokens = np.sum(r * (_elog(gamma)[doc] + _elog(lam)[:, words].T)) - np.sum(
        special.xlogy(r, r))
    return float(tokens + dirichlet_terms(alpha, gamma) + dirichlet_terms(eta, lam))


def _corpus(seed: int, n_docs: int, n_topics: int, n_words: int, n_tokens: int):
    rng = np.random.default_rng(seed)
    doc, words = rng.integers(0, n_docs, n_tokens), rng.integers(0, n_words, n_tokens)
    alpha, eta = rng.uniform(0.1, 2.0, 2)
    lam = rng.gamma(100.0, 0.01, (n_topics, n_words))
    return doc, words, float(alpha), float(eta), lam


def _run_lda(doc, words, n_docs, n_topics, n_words, alpha, eta, lam, sweeps, **local):
    model = EXAMPLE["lda"](doc, words, n_docs, n_topics, n_words, alpha, eta)
    return model.compile("vmp", init=["phi"], **local).run(
        iterations=sweeps, tolerance=None, progress=False,
        init={"phi": ff.distributions.Dirichlet(lam)})


def _mixture(x: np.ndarray, k: int) -> ff.Model:
    """A 1-D Gaussian mixture: weights, means and precisions global, z local."""
    with ff.Model("mixture") as model:
        weights = ff.Dirichlet("weights", np.ones(k))
        with ff.Plate(ff.Range("k", k)):
            means = ff.Gaussian("means", 0.0, variance=100.0)
            precs = ff.Gamma("precs", 1.0, rate=1.0)
        with ff.Plate(ff.Range("n", len(x))):
            z = ff.Discrete("z", weights)
            with ff.Switch(z):
                ff.Gaussian("x", means[z], precision=precs[z], observed=x)
    return model


def _equals_em(result: ff.Result, em: tuple, rtol: float, atol: float,
               elbo_atol: float) -> None:
    """``result``'s q(θ), q(φ), q(z) and bound equal EM's (pseudo-counts, responsibilities,
    ELBO) written out by hand."""
    gamma, lam, r, elbo = em
    assert_close(result["theta"].alpha, gamma, rtol, atol)
    assert_close(result["phi"].alpha, lam, rtol, atol)
    assert_close(result["z"].probs, r, rtol, atol)
    assert_close(result.log_evidence, elbo, rtol, elbo_atol)


def _same(a: ff.Result, b: ff.Result) -> None:
    assert a.log_evidence == b.log_evidence
    assert a.trace == b.trace
    for name in a.posteriors:
        if not hasattr(a[name], "eta"):  # an observed variable's value
            continue
        for x, y in zip(a[name].eta, b[name].eta, strict=True):
            assert np.array_equal(x, y), name


@pytest.mark.parametrize("local", [("theta", "z"), ("z",), ("theta",)])
def test_one_pass_without_restart_is_the_plain_sweep_bit_for_bit(local):
    """LDA with the local statements moved into an inner loop of one pass: the same
    numbers, bit for bit, as the plain sweep (every statement reads the same values)."""
    doc, words, alpha, eta, lam = _corpus(5, 4, 3, 7, 40)
    plain = _run_lda(doc, words, 4, 3, 7, alpha, eta, lam, 6)
    inner = _run_lda(doc, words, 4, 3, 7, alpha, eta, lam, 6, local=local)
    _same(plain, inner)
    source = EXAMPLE["lda"](doc, words, 4, 3, 7, alpha, eta).compile(
        "vmp", init=["phi"], local=local).source
    assert "for local_sweep in range(1):" in source


def test_one_pass_is_the_plain_sweep_on_a_mixture():
    """A Gaussian mixture with z local (the means, precisions and weights after it)."""
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.normal(-3, 1, 20), rng.normal(3, 0.5, 20)])
    init = {"means": ff.distributions.Gaussian(np.array([-1.0, 1.0]), variance=1.0)}
    runs = [_mixture(x, 2).compile("vmp", init=["means"], **opts).run(
        iterations=8, tolerance=None, progress=False, init=init)
        for opts in ({}, {"local": "z"})]
    _same(*runs)
    em = _mixture(x, 2).compile("vmp", init=["means"], local="z", local_iterations=4).run(
        iterations=8, tolerance=None, progress=False, init=init)
    assert np.all(np.diff(em.trace) >= -1e-9 * np.abs(em.trace[1:]))


@settings(max_examples=8, deadline=None, derandomize=True)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 4), st.integers(0, 12),
       st.integers(1, 3), st.integers(1, 4), st.booleans(), st.integers(0, 2**31))
def test_lda_local_loop_equals_variational_em_written_out(
        n_docs, n_topics, n_words, n_tokens, sweeps, passes, restart, seed):
    """Posteriors and bound after a few sweeps of ``passes`` local passes each, with or
    without restart, equal variational EM written out in NumPy (1e-10): small corpora,
    including empty documents and unused words."""
    doc, words, alpha, eta, lam = _corpus(seed, n_docs, n_topics, n_words, n_tokens)
    result = _run_lda(doc, words, n_docs, n_topics, n_words, alpha, eta, lam, sweeps,
                      local=("theta", "z"), local_iterations=passes, local_restart=restart)
    _equals_em(result, variational_em(doc, words, n_docs, n_words, alpha, eta, lam,
                                      sweeps, passes, restart=restart), 1e-10, 1e-12, 1e-10)


@settings(max_examples=6, deadline=None, derandomize=True)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 4), st.integers(0, 12),
       st.integers(1, 3), st.integers(1, 4), st.integers(0, 2**31))
def test_the_restart_goes_back_to_the_users_start_of_theta(
        n_docs, n_topics, n_words, n_tokens, sweeps, passes, seed):
    """With ``init={"theta": Dirichlet(g)}`` (compiled with ``init=["theta", ...]``) each
    restart puts q(θ) back to Dir(g), not to its prior — how scikit-learn's E-step start
    is given to factorflow: the same as variational EM written out from g (1e-10)."""
    doc, words, alpha, eta, lam0 = _corpus(seed, n_docs, n_topics, n_words, n_tokens)
    start = np.random.default_rng(seed).gamma(100.0, 0.01, (n_docs, n_topics))
    result = EXAMPLE["lda"](doc, words, n_docs, n_topics, n_words, alpha, eta).compile(
        "vmp", init=["phi", "theta"], local=("theta", "z"), local_iterations=passes,
        local_restart=True).run(
        iterations=sweeps, tolerance=None, progress=False,
        init={"phi": ff.distributions.Dirichlet(lam0),
              "theta": ff.distributions.Dirichlet(start)})
    _equals_em(result, variational_em(doc, words, n_docs, n_words, alpha, eta, lam0,
                                      sweeps, passes, start=start), 1e-10, 1e-12, 1e-10)


@pytest.mark.parametrize("tolerance", [1e-2, 1e-5])
def test_lda_local_tolerance_stops_the_passes_as_written_out(tolerance):
    """With ``local_tolerance`` the passes stop once θ's and z's natural parameters move
    by less than it (relative): the same posteriors as the EM written out (1e-8), on a
    corpus where the number of passes differs from sweep to sweep."""
    doc, words, alpha, eta, lam0 = _corpus(7, 6, 3, 10, 120)
    result = _run_lda(doc, words, 6, 3, 10, alpha, eta, lam0, 10, local=("theta", "z"),
                      local_iterations=100, local_tolerance=tolerance, local_restart=True)
    gamma, lam, r, elbo = variational_em(doc, words, 6, 10, alpha, eta, lam0, 10, 100,
                                         tolerance=tolerance)
    assert_close(result["theta"].alpha, gamma, 1e-8, 1e-10)
    assert_close(result["phi"].alpha, lam, 1e-8, 1e-10)
    assert_close(result.log_evidence, elbo, 1e-8, 1e-8)
    if tolerance == 1e-2:  # the tolerance cut passes: not the result of 100 each
        fixed = variational_em(doc, words, 6, 10, alpha, eta, lam0, 10, 100)[1]
        assert not np.allclose(fixed, lam, rtol=1e-10, atol=0)


@pytest.mark.parametrize("restart", [True, False])
def test_the_bound_never_falls_with_local_loops(restart):
    """Every local pass and global update is coordinate ascent: the bound after each
    sweep never falls (LDA, 200 tokens, 5 topics, 10 passes a sweep)."""
    rng = np.random.default_rng(4)
    corpus = EXAMPLE["synthetic_corpus"](10, 5, 30, 20, rng)
    lam = rng.gamma(100.0, 0.01, (5, 30))
    result = _run_lda(corpus["doc"], corpus["words"], 10, 5, 30, 0.2, 0.2, lam, 30,
                      local=("theta", "z"), local_iterations=10, local_restart=restart)
    trace = np.asarray(result.trace)
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[1:]))


def test_generated_code_shows_the_local_loop():
    """The inner loop is in the generated code: the restart, the passes, the stop."""
    doc, words, alpha, eta, _ = _corpus(1, 2, 2, 3, 6)
    source = EXAMPLE["lda"](doc, words, 2, 2, 3, alpha, eta).compile(
        "vmp", init=["phi"], local=("theta", "z"), local_iterations=7, local_tolerance=1e-3,
        local_restart=True).source
    assert "# ---- local loop (theta, z)" in source
    assert "for local_sweep in range(7):" in source
    assert "if local_change((v_theta__marginal, v_z__marginal,), local_before) < 0.001:" \
        in source
    loop = source[source.index("for local_sweep"):source.index("if local_change")]
    assert "v_phi__marginal =" not in loop  # φ is updated after the local loop


@pytest.mark.parametrize(("options", "error", "match"), [
    ({"local": ("theta", "psi")}, ff.ModelError, "the model has no variable 'psi'"),
    ({"local": "w"}, ff.ModelError, "local=: 'w' is observed"),
    ({"local": (), "local_iterations": 2}, ff.ModelError, "local= names the variables"),
    ({"local": "z", "local_iterations": 0}, ff.ModelError,
     "local_iterations must be an integer >= 1, got 0"),
    ({"local": "z", "local_tolerance": -1.0}, ff.ModelError,
     "local_tolerance must be a positive number"),
    ({"local": "z", "local_restart": "yes"}, ff.ModelError, "local_restart must be True"),
    ({"local_iterations": 5}, ff.ModelError, "name them with local="),
])
def test_bad_local_options_are_named(options, error, match):
    doc, words, alpha, eta, _ = _corpus(1, 2, 2, 3, 6)
    with pytest.raises(error, match=match):
        EXAMPLE["lda"](doc, words, 2, 2, 3, alpha, eta).compile("vmp", **options)


def test_local_variables_without_a_loop_are_refused():
    """A model whose posteriors are exact after one pass has no loop to iterate in."""
    with ff.Model() as model:
        m = ff.Gaussian("m", 0.0, variance=1.0)
        ff.Gaussian("y", m, variance=1.0, observed=2.0)
    with pytest.raises(ff.ScheduleError, match="local='m': no iteration loop"):
        model.compile("vmp", local="m")


@pytest.mark.parametrize("stop", [{}, {"local_stop": "each", "local_tolerance": 1e-3}])
def test_pickled_compiled_model_keeps_its_local_loop(stop):
    import pickle
    doc, words, alpha, eta, _ = _corpus(1, 2, 2, 3, 6)
    compiled = EXAMPLE["lda"](doc, words, 2, 2, 3, alpha, eta).compile(
        "vmp", local=("theta", "z"), local_iterations=3, local_restart=True, **stop)
    assert pickle.loads(pickle.dumps(compiled)).source == compiled.source


def test_remembered_normalisations_are_forgotten_with_their_arrays():
    """``memo_of``'s table keeps nothing alive: a normalised array remembered as its own
    normalisation used to hold itself (its entry never left; about 8 MB a pass here)."""
    import gc

    from factorflow.distributions import base

    doc, words, alpha, eta, lam = _corpus(3, 20, 4, 30, 2000)
    sizes = []
    for sweeps in (2, 12):
        _run_lda(doc, words, 20, 4, 30, alpha, eta, lam, sweeps, local=("theta", "z"),
                 local_iterations=5, local_restart=True)
        gc.collect()
        sizes.append(len(base._MEMO))
    assert sizes[1] <= sizes[0]
    x = base.log_normalize(np.log(np.full((3, 2), 0.5)))
    assert base.log_normalize(x) is x  # normalising a normalised array: itself, at once


@pytest.mark.parametrize("stop", ["all", "each"])
def test_saved_module_runs_the_local_loop(tmp_path, stop):
    """``save_module``: the standalone module (its own imports, ``local_change`` or
    ``local_stopped`` among them) gives the numbers ``run`` gives."""
    import importlib.util

    doc, words, alpha, eta, lam = _corpus(2, 3, 2, 5, 20)
    compiled = EXAMPLE["lda"](doc, words, 3, 2, 5, alpha, eta).compile(
        "vmp", init=["phi"], local=("theta", "z"), local_iterations=4,
        local_tolerance=1e-6, local_restart=True, local_stop=stop)
    init = {"phi": ff.distributions.Dirichlet(lam)}
    path = compiled.save_module(tmp_path / "lda_em.py", init=init)
    spec = importlib.util.spec_from_file_location("lda_em", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    posteriors, log_evidence = module.run(iterations=6)
    result = compiled.run(iterations=6, tolerance=None, progress=False, init=init)
    assert log_evidence == result.log_evidence
    assert np.array_equal(posteriors["phi"].alpha, result["phi"].alpha)


def test_infer_takes_the_local_options():
    """``model.infer("vmp", local=..., ...)`` compiles with them (as ``compile`` does)."""
    doc, words, alpha, eta, lam = _corpus(6, 3, 2, 5, 20)
    options = {"local": ("theta", "z"), "local_iterations": 3, "local_restart": True}
    model = EXAMPLE["lda"](doc, words, 3, 2, 5, alpha, eta)
    init = {"phi": ff.distributions.Dirichlet(lam)}
    inferred = model.infer("vmp", 5, init=init, tolerance=None, progress=False, **options)
    _same(inferred, _run_lda(doc, words, 3, 2, 5, alpha, eta, lam, 5, **options))


def per_document_em(doc, words, n_docs, n_words, alpha, eta, lam, sweeps, passes, tolerance,
                    start=None):
    """Batch variational EM for LDA as scikit-learn's E-step runs it: a Python loop over
    the documents, each one's passes stopping on their own once its q(θ) moves by less
    than ``tolerance`` (factorflow's measure, max |Δη| / (1 + |η|) over its topics, on
    η = γ − 1).  Each sweep: every document from q(θ) = Dir(α) (or Dir(``start[d]``)),
    q(z) from it; up to ``passes`` passes of q(θ), q(z); then q(φ).  Returns the
    pseudo-counts, responsibilities and ELBO."""
    n_topics = lam.shape[0]
    first = np.full((n_docs, n_topics), alpha) if start is None else start
    gamma, r = first.copy(), np.zeros((len(doc), n_topics))
    for _ in range(sweeps):
        elog_phi = _elog(lam)
        for d in range(n_docs):
            mine = np.flatnonzero(doc == d)
            elog_phi_d = elog_phi[:, words[mine]].T  # (its tokens, topics)

            def responsibilities(g, elog_phi_d=elog_phi_d):
                logits = _elog(g[None])[0] + elog_phi_d
                return np.exp(logits - special.logsumexp(logits, axis=1, keepdims=True))

            g = first[d]
            r_d = responsibilities(g)
            for _ in range(passes):
                old = g
                g = alpha + r_d.sum(axis=0)
                r_d = responsibilities(g)
                if _change(g - 1, old - 1) < tolerance:
                    break
            gamma[d], r[mine] = g, r_d
        lam = eta + _counts(words, n_words, r).T
    return gamma, lam, r, _elbo(doc, words, alpha, eta, gamma, lam, r)


@settings(max_examples=10, deadline=None, derandomize=True)
@given(st.integers(1, 5), st.integers(1, 3), st.integers(1, 6), st.integers(0, 60),
       st.integers(1, 4), st.integers(1, 30), st.sampled_from([1e-1, 1e-2, 1e-4]),
       st.integers(0, 2**31))
def test_each_document_stops_alone_as_written_out(
        n_docs, n_topics, n_words, n_tokens, sweeps, passes, tolerance, seed):
    """``local_stop="each"``: each document's passes stop once its own q(θ) moves by less
    than the tolerance, and its q(θ) and its tokens' q(z) stay put from then on (a mask
    over the documents, no loop over them) — the same posteriors and bound as a Python
    loop over the documents written out (1e-12), small corpora with empty documents."""
    doc, words, alpha, eta, lam = _corpus(seed, n_docs, n_topics, n_words, n_tokens)
    result = _run_lda(doc, words, n_docs, n_topics, n_words, alpha, eta, lam, sweeps,
                      local=("theta", "z"), local_iterations=passes, local_restart=True,
                      local_tolerance=tolerance, local_stop="each")
    _equals_em(result, per_document_em(doc, words, n_docs, n_words, alpha, eta, lam,
                                       sweeps, passes, tolerance), 1e-12, 1e-12, 1e-12)


def test_each_document_stopping_alone_differs_from_all_stopping_together():
    """On a corpus whose documents settle at different passes, stopping each alone gives
    other numbers than stopping all together (the written-out loops agree with each), and
    each document of the larger tolerance stops at or before the smaller's."""
    doc, words, alpha, eta, lam0 = _corpus(7, 6, 3, 10, 120)
    options = {"local": ("theta", "z"), "local_iterations": 100, "local_tolerance": 1e-3,
               "local_restart": True}
    each = _run_lda(doc, words, 6, 3, 10, alpha, eta, lam0, 10, local_stop="each", **options)
    together = _run_lda(doc, words, 6, 3, 10, alpha, eta, lam0, 10, **options)
    assert_close(each["phi"].alpha, per_document_em(doc, words, 6, 10, alpha, eta, lam0, 10,
                                                    100, 1e-3)[1], 1e-12, 1e-12)
    assert_close(together["phi"].alpha, variational_em(doc, words, 6, 10, alpha, eta, lam0,
                                                       10, 100, tolerance=1e-3)[1], 1e-8, 1e-10)
    assert not np.allclose(each["phi"].alpha, together["phi"].alpha, rtol=1e-8, atol=0)


def test_all_stopping_together_is_the_default_and_unchanged():
    """``local_stop="all"`` is the default: the same source as without it, with no mask."""
    doc, words, alpha, eta, _ = _corpus(1, 2, 2, 3, 6)
    model = EXAMPLE["lda"](doc, words, 2, 2, 3, alpha, eta)
    options = {"local": ("theta", "z"), "local_iterations": 7, "local_tolerance": 1e-3,
               "local_restart": True}
    default = model.compile("vmp", init=["phi"], **options).source
    assert model.compile("vmp", init=["phi"], local_stop="all", **options).source == default
    assert "local_done" not in default and "local_change(" in default


def test_generated_code_shows_each_element_stopping():
    """The mask is in the generated code: θ alone is watched (q(z) follows from it), kept
    where it has stopped right after its update, and the loop ends once all have."""
    doc, words, alpha, eta, _ = _corpus(1, 2, 2, 3, 6)
    compiled = EXAMPLE["lda"](doc, words, 2, 2, 3, alpha, eta).compile(
        "vmp", init=["phi"], local=("theta", "z"), local_iterations=7, local_tolerance=1e-3,
        local_restart=True, local_stop="each")
    source = compiled.source
    assert "# each element of theta stops on its own" in source
    assert "local_before = (v_theta__marginal,)" in source
    keep = "v_theta__marginal = local_keep(v_theta__marginal, local_before, local_done, 0)"
    update = source.index("v_theta__marginal = fit_plates", source.index("for local_sweep"))
    assert source.index(keep) > update
    assert source.index(keep) < source.index("v_theta__use0__F = v_theta__marginal.take",
                                             update)
    assert "local_done = local_stopped((v_theta__marginal,), local_before, local_done, " \
           "0.001)" in source
    assert "if local_all_stopped(local_done):" in source
    from factorflow.ir.printer import format_program
    assert "while at most 7 sweeps, tolerance 0.001 for each element of v_theta__marginal:" \
        in format_program(compiled.program)


@pytest.mark.parametrize(("options", "match"), [
    ({"local": "z", "local_stop": "some"}, "local_stop must be 'all' or 'each', got 'some'"),
    ({"local": "z", "local_stop": "each"}, "local_stop='each' .* give local_tolerance"),
    ({"local_stop": "each"}, "name them with local="),
])
def test_bad_local_stop_is_named(options, match):
    doc, words, alpha, eta, _ = _corpus(1, 2, 2, 3, 6)
    with pytest.raises(ff.ModelError, match=match):
        EXAMPLE["lda"](doc, words, 2, 2, 3, alpha, eta).compile("vmp", **options)


def test_local_changes_per_element_and_their_stop():
    """``local_changes`` is ``local_change`` per plate element (its maximum is the whole's);
    an element at NaN never stops; one stopped stays stopped."""
    from factorflow.runtime import kernels

    rng = np.random.default_rng(0)
    old = ff.distributions.Dirichlet(rng.gamma(2.0, 1.0, (6, 3)) + 0.1)
    step = np.zeros((6, 3))
    step[1, 2], step[3, 0], step[4, 1] = 1e-3, 1e-6, np.nan
    new = ff.distributions.Dirichlet(old.alpha + step)
    per = kernels.local_changes(new, old)
    expected = np.max(np.abs(new.eta[0] - old.eta[0]) / (1 + np.abs(old.eta[0])), axis=1)
    assert_close(per[[0, 1, 2, 3, 5]], expected[[0, 1, 2, 3, 5]], 1e-12, 0.0)
    assert np.isnan(per[4])
    assert np.isnan(kernels.local_change((new,), (old,)))  # (it was lost: 0.0)
    finite = ff.distributions.Dirichlet(np.where(np.isnan(new.alpha), old.alpha, new.alpha))
    assert kernels.local_change((finite,), (old,)) == np.max(per[[0, 1, 2, 3, 5]])
    done = kernels.local_stopped((new,), (old,), None, 1e-4)[0]
    assert done.tolist() == [True, False, True, True, False, True]
    again = kernels.local_stopped((old,), (old,), (np.eye(6, dtype=bool)[1],), 1e-4)[0]
    assert again.all()
    kept = kernels.local_keep(new, (old,), (done,), 0)
    assert np.array_equal(kept.alpha[done], old.alpha[done])
    assert np.array_equal(kept.alpha[~done], new.alpha[~done], equal_nan=True)
    gauss = ff.distributions.Gaussian(np.array([0.0, 1.0]), variance=1.0)
    moved = ff.distributions.Gaussian(np.array([0.0, 1.5]), variance=1.0)
    assert kernels.local_changes(moved, gauss)[0] == 0.0 < kernels.local_changes(moved,
                                                                                gauss)[1]


def test_the_bound_never_falls_with_each_document_stopping():
    """Stopping a document keeps its q(θ) and q(z); the others' passes and q(φ) are
    coordinate ascent as before: the bound never falls."""
    rng = np.random.default_rng(4)
    corpus = EXAMPLE["synthetic_corpus"](30, 5, 30, 20, rng)
    lam = rng.gamma(100.0, 0.01, (5, 30))
    result = _run_lda(corpus["doc"], corpus["words"], 30, 5, 30, 0.2, 0.2, lam, 30,
                      local=("theta", "z"), local_iterations=50, local_tolerance=1e-3,
                      local_restart=True, local_stop="each")
    trace = np.asarray(result.trace)
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[1:]))


def test_each_element_stops_alone_on_a_mixture():
    """Not LDA-specific: a Gaussian mixture with ``local="z"`` and ``local_stop="each"``
    stops each datum's q(z) on its own; with a tolerance no datum reaches, it is the run
    with ``local_stop="all"``, bit for bit."""
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.normal(-3, 1, 20), rng.normal(3, 0.5, 20)])
    init = {"means": ff.distributions.Gaussian(np.array([-1.0, 1.0]), variance=1.0)}
    runs = [_mixture(x, 2).compile("vmp", init=["means"], local="z", local_iterations=3,
                                   local_tolerance=1e-300, local_stop=stop).run(
        iterations=8, tolerance=None, progress=False, init=init) for stop in ("all", "each")]
    _same(*runs)
    assert "local_keep(v_z__marginal" in _mixture(x, 2).compile(
        "vmp", init=["means"], local="z", local_iterations=3, local_tolerance=1e-3,
        local_stop="each").source
