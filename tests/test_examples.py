"""Every script in examples/ runs end to end and prints what it promises."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import EXAMPLES_DIR, example_run

EXAMPLES = sorted(EXAMPLES_DIR.glob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(path):
    """``main()`` prints and returns what the example promises (its run is shared with
    ``test_jax.test_examples_agree``, which reruns its NumPy runs on JAX)."""
    run = example_run(path.stem)
    module, out = run.module, run.out
    assert run.printed.strip()
    if path.stem == "two_coins":
        assert abs(out["p_both"] - 0.25) < 1e-9 and abs(out["p_first"] - 1 / 3) < 1e-9
    if path.stem == "clinical_trial":
        assert abs(out["p_effective"] - 2772 / 3672) < 1e-6
    if path.stem == "truncated_gaussian":
        assert abs(np.exp(out[0.5]) - 0.308537538725987) < 1e-9
    if path.stem == "horseshoe_gibbs":  # large means kept, the zero ones shrunk
        assert np.all(np.abs(out["median"][:3]) > 3) and np.median(np.abs(out["median"][3:])) < 0.2
    if path.stem == "horseshoe_regression":  # AeMCMC's: within atol 0.1 or rtol 0.5
        truth = module["TRUE"]
        assert np.all(np.isclose(out["median"], truth, atol=0.1, rtol=0)
                      | np.isclose(out["median"], truth, atol=0, rtol=0.5)), out["median"]
    if path.stem == "linear_regression":
        assert out["ep_error"] < 1e-12 and out["vmp_error"] < 1e-12
        assert abs(out["ep_log_evidence"] - out["exact_log_evidence"]) < 1e-9
        assert abs(out["vmp_log_evidence"] - out["exact_log_evidence"]) < 1e-9
    if path.stem == "gaussian_mixture":
        from tests.runtime.test_vector_models import gmm_by_hand
        ref = gmm_by_hand(out["x"], 3, out["init"], np.zeros(2), 0.01 * np.eye(2), 3.0,
                          np.eye(2), 1.0)
        result = out["result"]
        assert np.max(np.abs(result["means"].mean - ref["means"])) < 1e-7
        assert np.max(np.abs(result["precs"].rate - ref["rates"])) < 1e-6
        assert abs(result.log_evidence - ref["elbo"]) < 1e-7
    if path.stem in ("hmm", "state_space"):  # forward-backward / RTS, written there
        assert out["ep_error"] < 1e-10 and out["vmp_error"] < 1e-10
        for algorithm in ("ep", "vmp"):
            assert abs(out[f"{algorithm}_log_evidence"] - out["exact_log_evidence"]) < 1e-8
        assert out["bound_monotone"] == 1.0
    if path.stem == "state_space":
        assert abs(out["r_mean"] - 1.0) < 0.3
    if path.stem == "state_space_2d":  # Kalman filter + RTS smoother, written there
        assert out["ep_error"] < 1e-9 and out["vmp_error"] < 1e-9
        for algorithm in ("ep", "vmp"):
            assert abs(out[f"{algorithm}_log_evidence"] - out["exact_log_evidence"]) < 1e-8
        assert out["rmse_position"] < 0.5 * out["rmse_observed"]
        assert out["rmse_velocity"] < 0.3 * out["sd_velocity"]
    if path.stem == "bayesian_pca":  # the subspace found; the numbers a hand-written VMP's
        from tests.runtime.test_vector_models import bpca_by_hand
        result, start = out["result"], out["init"]
        ref = bpca_by_hand(out["y"], start.mean, start.covariance, result.iterations)
        assert np.max(out["angles"]) < 3.0
        assert np.max(np.abs(result["W"].mean - ref["w_mean"])) < 1e-8
        assert abs(result.log_evidence - ref["elbo"]) < 1e-8
        from tests.model.test_vectors import ard_pca_by_hand  # ARD, K = 4 for 2 dimensions
        ard, wide = out["ard"], out["ard_init"]
        ref = ard_pca_by_hand(out["y"], wide.mean, wide.covariance, ard.iterations, a0=1.0,
                              b0=1.0)
        assert abs(ard.log_evidence - ref["elbo"]) < 1e-8 * abs(ref["elbo"])
        alpha = np.sort(ard["alpha"].mean)
        assert alpha[2] > 100 * alpha[1]
        from tests.model.test_missing import masked_bpca_by_hand  # 30% missing
        masked = out["masked"]
        ref = masked_bpca_by_hand(out["y_full"], ~out["missing"], start.mean, start.covariance,
                                  masked.iterations)
        assert np.max(np.abs(masked["W"].mean - ref["w_mean"])) < 1e-8
        assert abs(masked.log_evidence - ref["elbo"]) < 1e-8 * abs(ref["elbo"])
        assert out["missing_rmse"] < 0.3 * out["baseline_rmse"]
    if path.stem == "logistic_regression":  # against the exact (grid) posterior
        assert out["ep_mean_error"] < 1e-3 and abs(out["ep_log_evidence"] - out["log_z"]) < 0.01
        assert out["vmp_mean_error"] < 0.05 and out["vmp_log_evidence"] < out["log_z"]
        assert np.all(np.diff(out["vmp_trace"]) >= -1e-12 * np.abs(out["vmp_trace"][1:]))
    if path.stem == "multinomial_regression":  # against importance sampling (ESS > 2.5·10⁴)
        ep, vmp = out["ep"], out["vmp"]
        assert out["ess"] > 2.5e4 and out["ep_error"] < 0.01 and out["vmp_error"] < 0.1
        assert abs(ep.log_evidence - out["is_log_z"]) < 0.05
        assert vmp.log_evidence < out["is_log_z"] and vmp.converged
        assert out["plate_vmp"].log_evidence < vmp.log_evidence
        for trace in (vmp.trace, out["plate_vmp"].trace):
            assert np.all(np.diff(trace) >= -1e-12 * np.abs(np.asarray(trace)[1:]))
    if path.stem == "probit_bpm":  # against importance sampling (ESS > 10⁴)
        assert out["ess"] > 1e4 and np.max(np.abs(out["ep_mean"] - out["is_mean"])) < 0.02
        assert np.max(np.abs(out["ep_buy"] - out["is_buy"])) < 0.03
        assert np.max(np.abs(out["ep_buy"] - out["closed_buy"])) < 1e-10
    if path.stem == "poisson_regression":  # against the exact (grid) posterior
        assert out["ep_mean_error"] < 1e-5 and out["vmp_mean_error"] < 1e-5
        assert abs(out["ep_log_evidence"] - out["log_z"]) < 1e-3
        assert out["log_z"] - 1e-3 < out["vmp_log_evidence"] < out["log_z"]
    if path.stem == "lda":  # a mean-field LDA written out in NumPy, the same sweeps
        from tests.runtime.test_lda import lda_by_hand
        result = out["result"]
        gamma, lam, _, elbo = lda_by_hand(out["doc"], out["words"], out["n_docs"],
                                          out["n_words"], out["alpha"], out["eta"],
                                          out["start"], result.iterations)
        assert np.max(np.abs(result["phi"].alpha - lam)) < 1e-10 * np.max(lam)
        assert np.max(np.abs(result["theta"].alpha - gamma)) < 1e-10 * np.max(gamma)
        assert abs(result.log_evidence - elbo) < 1e-10 * abs(elbo)
        assert np.all(np.diff(result.trace) > -1e-9 * np.abs(result.trace[1:]))
        assert np.min(out["cosine"].max(axis=0)) > 0.98  # every true topic found
    if path.stem == "trueskill":  # parallel EP written out in NumPy, the same sweeps
        from tests.runtime import handwritten
        assert (handwritten.PRIOR_MEAN, handwritten.PRIOR_VAR, handwritten.NOISE_VAR) == (
            module["PRIOR_MEAN"], module["PRIOR_VARIANCE"], module["NOISE_VARIANCE"])
        mean, var = handwritten.trueskill_ep(out["players"], out["winner"], out["loser"],
                                             out["sweeps"])[-1]
        assert np.max(np.abs(out["result"]["skill"].mean - mean)) < 1e-10
        assert np.max(np.abs(out["result"]["skill"].variance - var)) < 1e-10
        assert out["rank_correlation"] > 0.9
    if path.stem == "learning_gaussian":
        assert abs(float(out["result"]["mean"].mean) - 5.9603207170807826) < 1e-9


def test_there_are_examples():
    assert {p.stem for p in EXAMPLES} >= {"learning_gaussian", "two_coins", "clinical_trial",
                                          "linear_regression", "gaussian_mixture", "hmm",
                                          "state_space", "state_space_2d", "bayesian_pca",
                                          "logistic_regression", "probit_bpm",
                                          "poisson_regression", "lda", "trueskill"}
