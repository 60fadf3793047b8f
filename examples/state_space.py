"""Linear-Gaussian state-space smoothing over a plate: a noisy AR(1) signal.

x[0] ~ N(m₀, 1/p₀), x[t] ~ N(a·x[t − 1] + b, 1/q) for t > 0, y[t] ~ N(x[t], 1/r), written
once over the plate t (the chain is one statement: the generated code is the same for any
T).  With a, b, q known, EP and VMP both give the exact smoothed marginals and log p(y):
this script checks them against a Kalman filter and Rauch–Tung–Striebel smoother written
out below.  Then VMP learns the observation noise r (Gamma) with the states.
"""

from __future__ import annotations

import time

import numpy as np

import factorflow as ff

A, B, Q, R, M0, P0 = 0.95, 0.1, 4.0, 1.0, 0.0, 0.1


def rts(y: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Smoothed means and variances, and log p(y): Kalman filter, then RTS."""
    t_len = len(y)
    mf, vf, mp, vp = (np.empty(t_len) for _ in range(4))
    m, v, log_z = M0, 1.0 / P0, 0.0
    for t in range(t_len):
        mp[t], vp[t] = m, v
        s = v + 1.0 / R
        log_z += -0.5 * np.log(2 * np.pi * s) - 0.5 * (y[t] - m) ** 2 / s
        gain = v / s
        mf[t], vf[t] = m + gain * (y[t] - m), (1 - gain) * v
        m, v = A * mf[t] + B, A * A * vf[t] + 1.0 / Q
    ms, vs = mf.copy(), vf.copy()
    for t in range(t_len - 2, -1, -1):
        j = vf[t] * A / vp[t + 1]
        ms[t] = mf[t] + j * (ms[t + 1] - mp[t + 1])
        vs[t] = vf[t] + j * j * (vs[t + 1] - vp[t + 1])
    return ms, vs, log_z


def main() -> dict[str, float]:
    rng = np.random.default_rng(0)
    t_len = 500
    x = np.empty(t_len)
    x[0] = rng.normal(M0, 1 / np.sqrt(P0))
    for t in range(1, t_len):
        x[t] = A * x[t - 1] + B + rng.normal(0, 1 / np.sqrt(Q))
    y = x + rng.normal(0, 1 / np.sqrt(R), t_len)

    def model(learn_noise: bool) -> ff.Model:
        with ff.Model("state_space") as m:
            noise = ff.Gamma("r", 1.0, rate=1.0) if learn_noise else R
            t = ff.Range("t", t_len)
            with ff.Plate(t):
                with ff.If(t == 0):
                    state = ff.Gaussian("x", M0, precision=P0)
                with ff.If(t > 0):
                    state = ff.Gaussian("x", A * state[t - 1] + B, precision=Q)
                ff.Gaussian("y", state, precision=noise, observed=y)
        return m

    ms, vs, log_z = rts(y)
    out: dict[str, float] = {"exact_log_evidence": log_z}
    known = model(learn_noise=False)
    for algorithm in ("ep", "vmp"):
        start = time.perf_counter()
        result = known.infer(algorithm, progress=False)
        ms_run = 1e3 * (time.perf_counter() - start)
        q = result["x"]
        err = float(max(np.abs(q.mean - ms).max(), np.abs(q.variance - vs).max()))
        out[f"{algorithm}_error"] = err
        out[f"{algorithm}_log_evidence"] = float(result.log_evidence)
        print(f"{algorithm.upper()}: E[x[t] | y] for t = 0..4: {np.round(q.mean[:5], 4)}, "
              f"sd {np.round(np.sqrt(q.variance[:5]), 4)}\n  largest difference from "
              f"the RTS smoother {err:.1e}; log evidence {result.log_evidence:.6f} (exact "
              f"{log_z:.6f}); {result.iterations} sweeps, {ms_run:.0f} ms")
    rmse_obs = np.sqrt(np.mean((y - x) ** 2))
    rmse = np.sqrt(np.mean((ms - x) ** 2))
    print(f"error of the smoothed states {rmse:.3f} against {rmse_obs:.3f} for the raw "
          "observations")

    result = model(learn_noise=True).infer("vmp", iterations=500, progress=False)
    print(f"\nVMP learning the observation precision r ~ Gamma(1, 1) with the states: "
          f"E[r] = {float(result['r'].mean):.3f} (true {R}); bound {result.log_evidence:.4f} "
          f"after {result.iterations} sweeps (never falls: "
          f"{bool(np.all(np.diff(result.trace) > -1e-9))})")
    out["r_mean"] = float(result["r"].mean)
    out["bound_monotone"] = float(np.all(np.diff(result.trace) > -1e-9))
    return out


if __name__ == "__main__":
    main()
