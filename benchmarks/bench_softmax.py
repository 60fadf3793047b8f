"""Multinomial (softmax) regression: factorflow's EP and VMP against a long NumPyro NUTS run.

The model and data of ``examples/multinomial_regression.py`` (K = 3 classes, D = 2
features, W ~ N(0, I), N data): the weights as one VectorGaussian of K·D (``ff.softmax(B
@ w)``) and as a plate of K VectorGaussians (``ff.softmax(eta, k)``), under EP and VMP,
and for the plate form also plain EP ("EP, plain": without the extrapolation of its
messages, ``factors.softmax._extrapolated``).
For each: the largest difference of the posterior means from NUTS's (4 chains,
``--draws`` each after as many warm-up; the Monte Carlo standard error printed beside),
the sweeps and the time of a compiled run (compilation apart), and the sweeps until the
posterior means stay within 1e-6 of the fixed point (the end of ``--fixed`` sweeps).  Run
``python benchmarks/bench_softmax.py [--n 120] [--draws 20000] [--fixed 1500]``; NumPyro
is needed.  ``--exact`` (no NumPyro) measures instead the errors against the exact
posterior (``against_exact``), ``--cause`` why the plate form's plain EP is slow
(``slow_mode``).

Output on the development machine (2 CPU cores shared with other jobs, load about 10;
NumPyro 0.22 on JAX CPU), ``--draws 2000 --fixed 1200``::

    N = 120, K = 3, D = 2; NUTS: 4 chains x 2000 draws (+ 2000 warm-up), 35.6 s,
    largest mcse 0.0107
               weights | algorithm | |Δmean| vs NUTS | sweeps |       ms | ms/sweep | sweeps to 1e-6
    -------------------------------------------------------------------------------------------------
    one VectorGaussian |        EP |          0.0087 |     41 |   2132.1 |    52.00 |             18
    one VectorGaussian |       VMP |          0.0464 |     97 |    702.7 |     7.24 |             51
          a plate of K | EP, plain |          0.0143 |   1215 |  44828.7 |    36.90 |            542
          a plate of K |        EP |          0.0143 |    135 |   5268.5 |    39.03 |             60
          a plate of K |       VMP |          0.0464 |     97 |    469.5 |     4.84 |             51

(With ``--draws 20000`` NUTS's mcse is 0.0033 and EP's vector form is 0.0015 from it.)

Against the exact posterior (``--exact --fixed 1200``, same machine; the quadrature
agrees with a second implementation and with 26 nodes to 1e-9)::

    N = 120, K = 3, D = 2; exact posterior by quadrature (14.7 s)
               weights | algorithm |  |Δmean| | Δvar/var | sweeps |       ms | sweeps to 1e-6
    ------------------------------------------------------------------------------------------
    one VectorGaussian |        EP |   0.0003 |    0.004 |     41 |   1918.7 |             18
    one VectorGaussian |       VMP |   0.0398 |    0.083 |     97 |    431.2 |             51
          a plate of K | EP, plain |   0.0096 |    0.895 |   1215 |  35885.3 |            542
          a plate of K |        EP |   0.0096 |    0.895 |    135 |   4220.4 |             60
          a plate of K |       VMP |   0.0398 |    0.955 |     97 |    516.1 |             51

(Δvar/var: the largest relative error of a weight's marginal variance.)  The
extrapolation leaves the fixed point where it was (the same errors) and cuts the sweeps
9-fold; the plate form's variances are 10% to 23% of the exact ones either way (below).

Why (``--cause``, same machine)::

    plate form, EP: distance of the means from the fixed point (sweep 400)
     sweep   common shift       rest
        10         0.1343     0.0973
        50         0.0572     0.0019
       100         0.0187     0.0006
       200         0.0020     0.0001
    per sweep from 100 to 200: common shift 0.9778, rest 0.9778
    posterior precision along the common shift of the K weight vectors:
      vector form (messages of rank K - 1)   [1. 1.]
      plate form (K independent Gaussians)   [15.97 23.1 ]

    messages moved along the shift to a fixed gauge (each datum's sum over k of
    precision x mean = 0):
      posterior means 0.2523 from EP's fixed point

The likelihood depends on a datum's K logits only through their differences: it says
nothing about their common shift.  The vector form's messages have no precision along
it (the weights' posterior keeps the prior's 1 there, as the exact posterior does); the
plate form projects each tilted distribution on K independent Gaussians, whose product
cannot leave the shift alone: the messages put a precision of 16 and 23 on it that
echoes the cavity each was computed from (they are neutral along the shift at the tilted
mean), and the posterior creeps along it (the error there is 30 times the rest after
100 sweeps; the rest follows it at the same rate).  A stateless message cannot avoid
that: one that follows its cavity along the shift inherits the creep, one that does not
moves the fixed point (the gauge above: 0.25).  The rate per sweep, 0.978, is the
square root of the map's 0.956: the compiled schedule computes each cavity before the
sweep's update of the weights, so each message answers the one sent two sweeps before
and the sweeps form two interleaved sequences; the Jacobian of one update at the fixed
point (finite differences, 720 message parameters) has eigenvalues 0.956 and 0.937 (the
shift, D = 2 directions), −0.79 and −0.76 (the differences, oscillating), the rest below
0.34.  Hence the remedy: in cycles of 12 sweeps, the last two send the RRE limit of the
cycle's six messages of their parity.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from bench_nonconj import run_nuts

import factorflow as ff
from factorflow.factors import softmax
from factorflow.runtime.compiled import CompiledModel

_spec = importlib.util.spec_from_file_location(
    "multinomial_regression",
    Path(__file__).resolve().parent.parent / "examples" / "multinomial_regression.py")
example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(example)  # type: ignore[union-attr]


def nuts(X: np.ndarray, y: np.ndarray, draws: int, seed: int = 0):
    """Posterior means of vec W by NumPyro NUTS (4 chains) and their Monte Carlo errors."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as nd

    k, d = example.K, example.D

    def fn(X, y):
        w = numpyro.sample("w", nd.Normal(jnp.zeros(k * d), 1.0).to_event(1))
        numpyro.sample("y", nd.Categorical(logits=X @ w.reshape(k, d).T), obs=y)

    return run_nuts(fn, (jnp.asarray(X), jnp.asarray(y)), draws, seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=example.N)
    parser.add_argument("--draws", type=int, default=20000)
    parser.add_argument("--fixed", type=int, default=1500,
                        help="sweeps whose end is taken as the fixed point")
    parser.add_argument("--cause", action="store_true",
                        help="why the plate form's plain EP is slow (no NUTS)")
    parser.add_argument("--exact", action="store_true",
                        help="errors against the exact posterior (quadrature; no NUTS)")
    args = parser.parse_args()
    if args.cause:
        slow_mode()
        return
    if args.exact:
        against_exact(args.fixed)
        return
    example.N = args.n
    X, y = example.data()
    start = time.perf_counter()
    ref, mcse = nuts(X, y, args.draws)
    nuts_s = time.perf_counter() - start
    print(f"N = {args.n}, K = {example.K}, D = {example.D}; NUTS: 4 chains x {args.draws} "
          f"draws (+ {args.draws} warm-up), {nuts_s:.1f} s,\nlargest mcse {np.max(mcse):.4f}")
    print(f"{'weights':>18} | {'algorithm':>9} | {'|Δmean| vs NUTS':>15} | {'sweeps':>6} | "
          f"{'ms':>8} | {'ms/sweep':>8} | {'sweeps to 1e-6':>14}")
    print("-" * 97)
    for label, algorithm, compiled, name, plain in runs(X, y):
        with plain_plate_ep(plain):
            result, ms = timed_run(compiled)
            gap = np.max(np.abs(np.ravel(result[name].mean) - ref))
            print(f"{label:>18} | {algorithm:>9} | {gap:15.4f} | "
                  f"{result.iterations:6d} | {ms:8.1f} | {ms / result.iterations:8.2f} | "
                  f"{sweeps_to_fixed_point(compiled, name, args.fixed):>14}")


def runs(X: np.ndarray, y: np.ndarray) -> Iterator[tuple[str, str, CompiledModel, str, bool]]:
    """(weights, algorithm, compiled model, posterior's name, plain EP?) of each run."""
    vector, plate = example.models(X, y)
    for label, model, name in (("one VectorGaussian", vector, "w"), ("a plate of K", plate, "W")):
        for algorithm in ("ep", "vmp"):
            compiled = model.compile(algorithm)
            if model is plate and algorithm == "ep":
                yield label, "EP, plain", compiled, name, True
            yield label, algorithm.upper(), compiled, name, False


@contextlib.contextmanager
def plain_plate_ep(plain: bool = True) -> Iterator[None]:
    """The plate form's EP without its extrapolation (cycles longer than any run)."""
    cycle = softmax.EXTRAPOLATION_CYCLE
    softmax.EXTRAPOLATION_CYCLE = 10**9 if plain else cycle
    try:
        yield
    finally:
        softmax.EXTRAPOLATION_CYCLE = cycle


def timed_run(compiled: CompiledModel):
    """The run until converged (at most 2000 sweeps) and its time in ms."""
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ff.ConvergenceWarning)
        result = compiled.run(iterations=2000, progress=False)
    return result, (time.perf_counter() - start) * 1e3


def against_exact(fixed: int) -> None:
    """Each run's largest errors against the exact posterior (``example.exact_posterior``:
    Gauss–Hermite over the 4 weight differences, 20 nodes each, 1e-9): of the means, and
    of the marginal variances relative to the exact ones."""
    X, y = example.data()
    k, d = example.K, example.D
    start = time.perf_counter()
    mean, cov = example.exact_posterior(X, y, k, np.zeros(k * d), np.eye(k * d), nodes=20)
    print(f"N = {len(y)}, K = {k}, D = {d}; exact posterior by quadrature "
          f"({time.perf_counter() - start:.1f} s)")
    print(f"{'weights':>18} | {'algorithm':>9} | {'|Δmean|':>8} | {'Δvar/var':>8} | "
          f"{'sweeps':>6} | {'ms':>8} | {'sweeps to 1e-6':>14}")
    print("-" * 90)
    for label, algorithm, compiled, name, plain in runs(X, y):
        with plain_plate_ep(plain):
            result, ms = timed_run(compiled)
            q = result[name]
            var = np.ravel(np.diagonal(q.covariance, 0, -2, -1))
            print(f"{label:>18} | {algorithm:>9} | "
                  f"{np.max(np.abs(np.ravel(q.mean) - mean)):8.4f} | "
                  f"{np.max(np.abs(var / np.diag(cov) - 1)):8.3f} | {result.iterations:6d} | "
                  f"{ms:8.1f} | {sweeps_to_fixed_point(compiled, name, fixed):>14}")


def slow_mode(sweeps: int = 400) -> None:
    """The plate form's EP: the distance of W's posterior means from where ``sweeps``
    sweeps leave them, split into the common shift of the K weight vectors (their mean
    over k) and the rest; and the posterior precision along that shift, beside the
    vector form's."""
    X, y = example.data()
    vector, plate = example.models(X, y)
    means: list[np.ndarray] = []
    with warnings.catch_warnings(), plain_plate_ep():
        warnings.simplefilter("ignore", ff.ConvergenceWarning)
        result = plate.compile("ep").run(
            iterations=sweeps, tolerance=None, progress=False,
            on_iteration=lambda i, r: means.append(np.array(r["W"].mean, float).copy()))
        exact = vector.compile("ep").run(iterations=60, tolerance=None, progress=False)
    err = np.array(means) - means[-1]
    common = err.mean(axis=1, keepdims=True)
    rest = err - common
    print(f"plate form, EP: distance of the means from the fixed point (sweep {sweeps})")
    print(f"{'sweep':>6} {'common shift':>14} {'rest':>10}")
    for s in (10, 50, 100, 200):
        print(f"{s:6d} {np.abs(common[s - 1]).max():14.4f} {np.abs(rest[s - 1]).max():10.4f}")
    norm_c = np.linalg.norm(common.reshape(sweeps, -1), axis=1)
    norm_r = np.linalg.norm(rest.reshape(sweeps, -1), axis=1)
    print(f"per sweep from 100 to 200: common shift {(norm_c[199] / norm_c[99]) ** 0.01:.4f}, "
          f"rest {(norm_r[199] / norm_r[99]) ** 0.01:.4f}")
    k, d = example.K, example.D
    shift = np.kron(np.ones((k, 1)) / np.sqrt(k), np.eye(d))  # (1/√K) Σ_k e_k ⊗ e_d
    vector_prec = shift.T @ np.linalg.inv(np.array(exact["w"].covariance)) @ shift
    plate_prec = np.linalg.inv(np.array(result["W"].covariance)).mean(axis=0)
    print("posterior precision along the common shift of the K weight vectors:")
    for label, prec in (("vector form (messages of rank K - 1)", vector_prec),
                        ("plate form (K independent Gaussians)", plate_prec)):
        print(f"  {label}   {np.round(np.linalg.eigvalsh(prec), 2)}")
    with warnings.catch_warnings(), plain_plate_ep(), centred_messages():
        warnings.simplefilter("ignore", ff.ConvergenceWarning)
        gauged = plate.compile("ep").run(iterations=sweeps, tolerance=None, progress=False)
    print("messages moved along the shift to a fixed gauge (each datum's sum over k of\n"
          "precision x mean = 0):\n  posterior means "
          f"{np.max(np.abs(np.array(gauged['W'].mean) - means[-1])):.4f} from EP's fixed point")


@contextlib.contextmanager
def centred_messages() -> Iterator[None]:
    """The plate form's EP messages, each datum's moved along the common shift of its K
    logits (h_k + τ_k c) so that Σ_k h_k = 0: neutral along the shift at 0 (EP's own
    are neutral at the tilted mean, Σ_k (h_k − τ_k E[η_k]) = 0)."""
    ep_logits = softmax._ep_logits

    def centred(sample, logits, plate):
        msg = ep_logits(sample, logits, plate)
        if not plate:
            return msg
        h, tau = (np.asarray(e, float) for e in msg.eta)
        shift = -h.sum(-1, keepdims=True) / tau.sum(-1, keepdims=True)
        return type(msg).from_natural(h + tau * shift, tau)

    softmax._ep_logits = centred
    try:
        yield
    finally:
        softmax._ep_logits = ep_logits


def sweeps_to_fixed_point(compiled: CompiledModel, name: str, sweeps: int) -> str:
    """The first sweep after which ``name``'s posterior mean stays within 1e-6 (largest
    element) of where ``sweeps`` sweeps leave it, or '> sweeps / 2'."""
    means: list[np.ndarray] = []
    compiled.run(iterations=sweeps, tolerance=None, progress=False,
                 on_iteration=lambda i, r: means.append(np.ravel(r[name].mean).copy()))
    gaps = np.max(np.abs(np.array(means) - means[-1]), axis=1)
    outside = np.flatnonzero(gaps[: sweeps // 2] >= 1e-6)  # index i: after sweep i + 1
    if outside.size and outside[-1] == sweeps // 2 - 1:
        return f"> {sweeps // 2}"
    return str(outside[-1] + 2 if outside.size else 1)

if __name__ == "__main__":
    main()
