"""Gibbs sampling benchmark: effective samples per second, factorflow against NumPyro NUTS.

Models (the same priors and data for both samplers):

* ``rats``: a hierarchical Beta–Binomial with 71 groups (sizes and counts drawn like
  Gelman's rat tumour data, seed 0): a, b ~ Gamma(1, rate 0.1); p[j] ~ Beta(a, b);
  y[j] ~ Binomial(n[j], p[j]). factorflow: a and b with the 71 p's integrated out, jointly
  (slice steps, then independence Metropolis–Hastings from a Student-t fitted in the
  warm-up, on the log scale), then the p's in one conjugate Beta draw.
* ``horseshoe``: horseshoe normal means, 50 coefficients (5 non-zero): tau ~ C+(0, 1);
  lam[j] ~ C+(0, tau); beta[j] ~ N(0, lam[j]²); y[j] ~ N(beta[j], 1). factorflow: all
  conjugate after the half-Cauchy expansion its explorer finds.
* ``hs_linreg``: the horseshoe linear regression of examples/horseshoe_regression.py
  (AeMCMC's acceptance model: N = 50, p = 10, β = (1, 1.5, 0, …, 0), σ = 1):
  tau ~ C+(0, 1); lam[k] ~ C+(0, tau); beta[k] ~ N(0, lam[k]²);
  y[i] ~ N(Σ_k X[i, k] beta[k], 1). factorflow: the half-Cauchy expansion, the ten
  coefficients in one joint Gaussian draw.
* ``student_t``: a location with Student-t (ν = 3) errors, 200 points. factorflow: the
  Gamma-precision expansion.
* ``logistic``: Bernoulli-logistic regression, 500 points, intercept and two slopes
  (``ff.Bernoulli(y, ff.logistic(a + b1 * x1 + b2 * x2))``), N(0, 5²) priors. factorflow:
  the Pólya-Gamma augmentation its explorer finds; the three coefficients in one joint
  Gaussian draw.

ESS is ArviZ's bulk ESS, the smallest over the model's parameters (the slowest-mixing
one decides), per second of sampling (warm-up included; NumPyro's compilation is timed
apart: its first run, minus a second identical run). "max z" checks that the two samplers
agree: the largest gap between their posterior means over every parameter element, in
Monte Carlo standard errors of the difference. Run ``python
benchmarks/bench_gibbs.py [--draws 2000]``; NumPyro is used only when installed.

Output on the development machine (2 CPU cores shared with other jobs, load about 12;
NumPyro 0.22 on JAX 0.10 CPU, chains vectorized), ``--draws 1000``::

    4 chains x 1000 draws (+ 500 warm-up); ESS: smallest bulk ESS over the parameters; ...
         model |        factorflow Gibbs         |          NumPyro NUTS           | ratio  | max z
               | min ESS sample s  ESS/s compile | min ESS sample s  ESS/s   jit s |
    -----------------------------------------------------------------------------------------------
          rats |    3169     6.89    460    6.00 |    1078    74.85     14   13.65 |  31.9x |   2.7
     horseshoe |      75     2.88     26    0.69 |     188    83.03      2   20.45 |  11.5x |   2.6
     hs_linreg |     168     3.12     54    0.57 |      16    44.36      0    9.53 | 146.5x |   3.8
     student_t |    2197     0.76   2909    0.17 |    1368    15.28     90    8.21 |  32.5x |   0.3
      logistic |     812     3.45    235    0.34 |    2712    18.89    144    0.77 |   1.6x |   1.5

On ``rats`` the hyperparameters mix almost independently (ESS 3169 of 4000 draws; one
coordinate at a time, without integrating the p's out, it was 91: 0.8x). On
``hs_linreg`` NUTS's smallest ESS (τ's) was 16 in this run; with ``--draws 2000`` it
was 222 against factorflow's 247 (4.9 s): 11.0x. On ``logistic`` the joint draw of the
three correlated coefficients took the ratio from 1.1x (one at a time) to 1.6x; the
Pólya-Gamma chain's autocorrelation (ESS 812 of 4000) is what is left. The ratios move
with the load (NumPyro's seconds above all: 227 s for ``horseshoe`` in an earlier run).
"""

from __future__ import annotations

import argparse
import runpy
import time
import warnings
from pathlib import Path

import numpy as np

import factorflow as ff

warnings.filterwarnings("ignore", category=FutureWarning)
#: the horseshoe regression of examples/horseshoe_regression.py (its data, seed 0)
HORSESHOE = runpy.run_path(str(Path(__file__).parents[1] / "examples"
                                / "horseshoe_regression.py"))


def rats_data():
    rng = np.random.default_rng(0)
    n = rng.integers(14, 52, 71)
    p = rng.beta(2.4, 14.0, 71)
    return n, rng.binomial(n, p)


def horseshoe_data():
    rng = np.random.default_rng(0)
    beta = np.zeros(50)
    beta[:5] = [4.0, -3.0, 5.0, 2.5, -4.0]
    return beta + rng.normal(size=50)


def student_t_data():
    rng = np.random.default_rng(0)
    return 1.5 + rng.standard_t(3, 200)


def logistic_data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 500))
    psi = -0.5 + 1.0 * x[0] - 2.0 * x[1]
    return x, (rng.random(500) < 1 / (1 + np.exp(-psi))).astype(int)


def factorflow_model(name: str) -> ff.Model:
    if name == "hs_linreg":
        return HORSESHOE["build"](*HORSESHOE["data"](0))
    with ff.Model(name) as model:
        if name == "rats":
            n, y = rats_data()
            a = ff.Gamma("a", 1.0, rate=0.1)
            b = ff.Gamma("b", 1.0, rate=0.1)
            with ff.Plate(ff.Range("j", len(n))):
                p = ff.Beta("p", a, b)
                ff.Binomial("y", n, p, observed=y)
        elif name == "horseshoe":
            y = horseshoe_data()
            tau = ff.HalfCauchy("tau", 1.0)
            with ff.Plate(ff.Range("j", len(y))):
                lam = ff.HalfCauchy("lam", tau)
                beta = ff.Gaussian("beta", 0.0, scale=lam)
                ff.Gaussian("y", beta, precision=1.0, observed=y)
        elif name == "logistic":
            x, y = logistic_data()
            a = ff.Gaussian("a", 0.0, variance=25.0)
            b1 = ff.Gaussian("b1", 0.0, variance=25.0)
            b2 = ff.Gaussian("b2", 0.0, variance=25.0)
            with ff.Plate(ff.Range("n", len(y))):
                ff.Bernoulli("y", ff.logistic(a + b1 * x[0] + b2 * x[1]), observed=y)
        else:
            y = student_t_data()
            mu = ff.Gaussian("mu", 0.0, variance=100.0)
            with ff.Plate(ff.Range("n", len(y))):
                ff.StudentT("y", mu, 3.0, precision=1.0, observed=y)
    return model


PARAMETERS = {"rats": ("a", "b", "p"), "horseshoe": ("tau", "lam", "beta"),
              "hs_linreg": ("tau", "lam", "beta"),
              "student_t": ("mu",), "logistic": ("a", "b1", "b2")}


def min_ess(draws: dict[str, np.ndarray]) -> float:
    import arviz as az

    ess = az.ess(az.convert_to_dataset(draws), method="bulk")
    return float(min(float(ess[k].min()) for k in draws))


def largest_gap(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    """The largest |mean_a − mean_b| over the parameters' elements, in Monte Carlo
    standard errors of the difference (ArviZ's MCSE of each mean): about 3 or less when
    the two samplers agree."""
    import arviz as az

    mcse_a = az.mcse(az.convert_to_dataset(a), method="mean")
    mcse_b = az.mcse(az.convert_to_dataset(b), method="mean")
    gaps = []
    for k in a:
        diff = a[k].mean(axis=(0, 1)) - b[k].mean(axis=(0, 1))
        gaps.append(np.max(np.abs(diff) / np.hypot(mcse_a[k].values, mcse_b[k].values)))
    return float(max(gaps))


def run_factorflow(name: str, draws: int, chains: int
                   ) -> tuple[float, float, float, dict[str, np.ndarray]]:
    """(min ESS, seconds sampling, seconds compiling, draws)."""
    start = time.perf_counter()
    compiled = factorflow_model(name).compile("gibbs")
    compile_s = time.perf_counter() - start
    result = compiled.run(draws=draws, burn=draws // 2, chains=chains, seed=0)
    kept = {k: result.samples(k) for k in PARAMETERS[name]}
    return min_ess(kept), result.seconds, compile_s, kept


def numpyro_model(name: str):
    import numpyro
    import numpyro.distributions as dist

    def rats(n, y):
        a = numpyro.sample("a", dist.Gamma(1.0, 0.1))
        b = numpyro.sample("b", dist.Gamma(1.0, 0.1))
        with numpyro.plate("j", len(n)):
            p = numpyro.sample("p", dist.Beta(a, b))
            numpyro.sample("y", dist.Binomial(n, p), obs=y)

    def horseshoe(y):
        tau = numpyro.sample("tau", dist.HalfCauchy(1.0))
        with numpyro.plate("j", len(y)):
            lam = numpyro.sample("lam", dist.HalfCauchy(tau))
            beta = numpyro.sample("beta", dist.Normal(0.0, lam))
            numpyro.sample("y", dist.Normal(beta, 1.0), obs=y)

    def hs_linreg(x, y):
        tau = numpyro.sample("tau", dist.HalfCauchy(1.0))
        with numpyro.plate("k", x.shape[1]):
            lam = numpyro.sample("lam", dist.HalfCauchy(tau))
            beta = numpyro.sample("beta", dist.Normal(0.0, lam))
        numpyro.sample("y", dist.Normal(x @ beta, 1.0), obs=y)

    def student_t(y):
        mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
        with numpyro.plate("n", len(y)):
            numpyro.sample("y", dist.StudentT(3.0, mu, 1.0), obs=y)

    def logistic(x, y):
        a = numpyro.sample("a", dist.Normal(0.0, 5.0))
        b1 = numpyro.sample("b1", dist.Normal(0.0, 5.0))
        b2 = numpyro.sample("b2", dist.Normal(0.0, 5.0))
        with numpyro.plate("n", len(y)):
            numpyro.sample("y", dist.Bernoulli(logits=a + b1 * x[0] + b2 * x[1]), obs=y)

    data = {"rats": rats_data(), "horseshoe": (horseshoe_data(),),
            "hs_linreg": HORSESHOE["data"](0),
            "student_t": (student_t_data(),), "logistic": logistic_data()}[name]
    return {"rats": rats, "horseshoe": horseshoe, "hs_linreg": hs_linreg,
            "student_t": student_t, "logistic": logistic}[name], data


def run_numpyro(name: str, draws: int, chains: int
                ) -> tuple[float, float, float, dict[str, np.ndarray]]:
    """(min ESS, seconds sampling, seconds compiling, draws) of NUTS, ``draws // 2``
    warm-up."""
    import jax
    from numpyro.infer import MCMC, NUTS

    model, data = numpyro_model(name)

    def sample(seed: int) -> tuple[dict[str, np.ndarray], float]:
        mcmc = MCMC(NUTS(model), num_warmup=draws // 2, num_samples=draws, num_chains=chains,
                    chain_method="vectorized", progress_bar=False)
        start = time.perf_counter()
        mcmc.run(jax.random.PRNGKey(seed), *data)
        samples = mcmc.get_samples(group_by_chain=True)
        jax.block_until_ready(samples)
        return {k: np.asarray(v) for k, v in samples.items()}, time.perf_counter() - start

    _, first = sample(0)
    samples, seconds = sample(1)
    kept = {k: samples[k] for k in PARAMETERS[name]}
    return min_ess(kept), seconds, first - seconds, kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--models", nargs="+", default=list(PARAMETERS), choices=list(PARAMETERS))
    args = parser.parse_args()
    try:
        import numpyro  # noqa: F401
        have_numpyro = True
    except ImportError:
        have_numpyro = False
    header = (f"{'model':>10} | {'factorflow Gibbs':^31} | "
              + (f"{'NumPyro NUTS':^31} | ratio  | max z" if have_numpyro else ""))
    print(f"{args.chains} chains x {args.draws} draws (+ {args.draws // 2} warm-up); "
          "ESS: smallest bulk ESS over the parameters; max z: the largest gap between the "
          "two posterior means, in Monte Carlo standard errors")
    print(header)
    sub = f"{'':>10} | {'min ESS':>7} {'sample s':>8} {'ESS/s':>6} {'compile':>7}"
    print(sub + (f" | {'min ESS':>7} {'sample s':>8} {'ESS/s':>6} {'jit s':>7} |"
                 if have_numpyro else ""))
    print("-" * len(header))
    for name in args.models:
        ess, seconds, compile_s, kept = run_factorflow(name, args.draws, args.chains)
        line = (f"{name:>10} | {ess:7.0f} {seconds:8.2f} {ess / seconds:6.0f} "
                f"{compile_s:7.2f}")
        if have_numpyro:
            n_ess, n_seconds, jit, n_kept = run_numpyro(name, args.draws, args.chains)
            line += (f" | {n_ess:7.0f} {n_seconds:8.2f} {n_ess / n_seconds:6.0f} {jit:7.2f} |"
                     f" {(ess / seconds) / (n_ess / n_seconds):5.1f}x |"
                     f" {largest_gap(kept, n_kept):5.1f}")
        print(line)


if __name__ == "__main__":
    main()
