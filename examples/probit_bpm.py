"""The Bayes point machine (Herbrich et al. 2001; Infer.NET's tutorial), a probit
classifier under EP.

Will a customer buy, given income and age?  w ~ N(0, I) over (income, age, bias); a
purchase is (X[n] @ w + ε > 0), ε ~ N(0, 0.1): ``ff.Bernoulli("will_buy",
ff.probit(X @ w / √0.1), observed=...)``, whose EP messages are closed forms (the
truncated-Gaussian moments of IsPositive).  Test customers are latent Bernoulli variables
of the same model: their posteriors are the predictions (E_q[Φ] under EP's posterior, which
differs from the exact predictive by EP's approximation: 0.023 for the first customer).
The reference is importance sampling from N(EP mean, 4 · EP covariance), 400,000 draws.
"""

from __future__ import annotations

import numpy as np
from scipy import special

import factorflow as ff

NOISE = 0.1
INCOMES = np.array([63.0, 16.0, 28.0, 55.0, 22.0, 20.0])
AGES = np.array([38.0, 23.0, 40.0, 27.0, 18.0, 40.0])
WILL_BUY = np.array([True, False, True, True, False, False])
TEST_INCOMES, TEST_AGES = np.array([58.0, 18.0, 22.0]), np.array([36.0, 24.0, 37.0])


def features(incomes: np.ndarray, ages: np.ndarray) -> np.ndarray:
    return np.column_stack([incomes, ages, np.ones(len(incomes))])


def importance_sampling(X, y, X_test, mean, cov, n=400_000, seed=0):
    """Self-normalised importance sampling of the exact posterior: E[w] and P(buy) for
    the test customers, with the effective sample size."""
    rng = np.random.default_rng(seed)
    proposal_cov = 4.0 * cov
    draws = rng.multivariate_normal(mean, proposal_cov, size=n)
    diff = draws - mean
    log_q = -0.5 * np.einsum("ni,ij,nj->n", diff, np.linalg.inv(proposal_cov), diff)
    log_prior = -0.5 * np.sum(draws**2, axis=1)
    eta = draws @ X.T / np.sqrt(NOISE)
    log_lik = special.log_ndtr(np.where(y, eta, -eta)).sum(axis=1)
    log_w = log_prior + log_lik - log_q
    w = np.exp(log_w - log_w.max())
    w /= w.sum()
    p_test = special.ndtr(draws @ X_test.T / np.sqrt(NOISE))
    return w @ draws, w @ p_test, 1.0 / np.sum(w**2)


def main() -> dict[str, np.ndarray]:
    X, X_test = features(INCOMES, AGES), features(TEST_INCOMES, TEST_AGES)
    with ff.Model("bayes_point_machine") as model:
        w = ff.VectorGaussian("w", 0.0, precision=np.eye(3))
        with ff.Plate(ff.Range("customer", len(X))):
            ff.Bernoulli("will_buy", ff.probit(X @ w / np.sqrt(NOISE)), observed=WILL_BUY)
        with ff.Plate(ff.Range("test_customer", len(X_test))):
            ff.Bernoulli("will_buy_test", ff.probit(X_test @ w / np.sqrt(NOISE)))

    result = model.infer("ep", iterations=200)
    q, buy = result["w"], result["will_buy_test"].p
    mean_is, buy_is, ess = importance_sampling(X, WILL_BUY, X_test, q.mean, q.covariance)
    print(f"EP ({result.iterations} sweeps): E[w] = {np.round(q.mean, 4)}, "
          f"sd = {np.round(np.sqrt(np.diag(q.covariance)), 4)}")
    print(f"importance sampling (ESS {ess:,.0f}): E[w] = {np.round(mean_is, 4)}")
    for k, (income, age) in enumerate(zip(TEST_INCOMES, TEST_AGES, strict=True)):
        print(f"  income {income:.0f}, age {age:.0f}: P(buy) = {buy[k]:.4f} (EP), "
              f"{buy_is[k]:.4f} (importance sampling)")
    print(f"log evidence {result.log_evidence:.4f}")
    # EP's prediction is E_q[Φ(x·w/√0.1)] under its own posterior, in closed form
    mean_t, var_t = X_test @ q.mean, np.einsum("ni,ij,nj->n", X_test, q.covariance, X_test)
    closed = special.ndtr(mean_t / np.sqrt(NOISE + var_t))
    return {"ep_mean": q.mean, "closed_buy": closed, "is_mean": mean_is,
            "ep_buy": np.asarray(buy), "is_buy": buy_is, "ess": ess}


if __name__ == "__main__":
    main()
