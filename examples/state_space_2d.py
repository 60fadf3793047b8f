"""Tracking an object in the plane: a 4-D linear-Gaussian state-space model over a plate.

The state x[t] = (position, velocity) in 2-D moves with constant velocity plus white-noise
acceleration, and a sensor sees the position with noise:

    x[0] ~ N(m₀, P₀⁻¹),  x[t] ~ N(A x[t − 1], Q⁻¹),  y[t] ~ N(C x[t], R⁻¹),
    A = [[I, dt·I], [0, I]],  C = [I 0]  (2 × 4: the velocity is never observed).

Written once over the plate t (the chain is one ``VectorGaussianChain`` statement: the
generated code is the same for any T).  With the parameters known, EP and VMP both give
the exact smoothed marginals and log p(y): this script checks them against a Kalman filter
and Rauch–Tung–Striebel smoother written out below, and reports how much the smoothed
positions and the (never observed) velocities improve on the raw measurements.
"""

from __future__ import annotations

import time

import numpy as np

import factorflow as ff

DT, ACCEL, SENSOR = 0.1, 0.5, 0.3  # time step, acceleration noise sd, sensor noise sd
A = np.block([[np.eye(2), DT * np.eye(2)], [np.zeros((2, 2)), np.eye(2)]])
C = np.hstack([np.eye(2), np.zeros((2, 2))])
NOISE = ACCEL**2 * np.block([[DT**3 / 3 * np.eye(2), DT**2 / 2 * np.eye(2)],
                             [DT**2 / 2 * np.eye(2), DT * np.eye(2)]])  # covariance of Q⁻¹
R = np.eye(2) / SENSOR**2
M0, P0 = np.array([0.0, 0.0, 0.5, -0.2]), np.eye(4)


def kalman_rts(y: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Smoothed means (T, 4), covariances (T, 4, 4) and log p(y)."""
    t_len = len(y)
    mf, vf = np.empty((t_len, 4)), np.empty((t_len, 4, 4))
    mp, vp = np.empty((t_len, 4)), np.empty((t_len, 4, 4))
    m, v, log_z = M0, np.linalg.inv(P0), 0.0
    for t in range(t_len):
        mp[t], vp[t] = m, v
        s = C @ v @ C.T + np.linalg.inv(R)
        e = y[t] - C @ m
        log_z -= 0.5 * (2 * np.log(2 * np.pi) + np.linalg.slogdet(s)[1]
                        + e @ np.linalg.solve(s, e))
        gain = v @ C.T @ np.linalg.inv(s)
        mf[t], vf[t] = m + gain @ e, v - gain @ s @ gain.T
        m, v = A @ mf[t], A @ vf[t] @ A.T + NOISE
    ms, vs = mf.copy(), vf.copy()
    for t in range(t_len - 2, -1, -1):
        j = vf[t] @ A.T @ np.linalg.inv(vp[t + 1])
        ms[t] = mf[t] + j @ (ms[t + 1] - mp[t + 1])
        vs[t] = vf[t] + j @ (vs[t + 1] - vp[t + 1]) @ j.T
    return ms, vs, log_z


def main() -> dict[str, float]:
    rng = np.random.default_rng(0)
    t_len = 200
    x = np.empty((t_len, 4))
    x[0] = rng.multivariate_normal(M0, np.linalg.inv(P0))
    for t in range(1, t_len):
        x[t] = A @ x[t - 1] + rng.multivariate_normal(np.zeros(4), NOISE)
    y = x[:, :2] + rng.normal(0, SENSOR, (t_len, 2))

    with ff.Model("tracking") as model:
        t = ff.Range("t", t_len)
        with ff.Plate(t):
            with ff.If(t == 0):
                state = ff.VectorGaussian("x", M0, precision=P0)
            with ff.If(t > 0):
                state = ff.VectorGaussian("x", A @ state[t - 1], covariance=NOISE)
            ff.VectorGaussian("y", ff.matvec(C, state), precision=R, observed=y)

    ms, vs, log_z = kalman_rts(y)
    out: dict[str, float] = {"exact_log_evidence": log_z}
    for algorithm in ("ep", "vmp"):
        start = time.perf_counter()
        result = model.infer(algorithm, progress=False)
        ms_run = 1e3 * (time.perf_counter() - start)
        q = result["x"]
        err = float(max(np.abs(q.mean - ms).max(), np.abs(q.covariance - vs).max()))
        out[f"{algorithm}_error"] = err
        out[f"{algorithm}_log_evidence"] = float(result.log_evidence)
        sd = np.sqrt(np.diag(q.covariance[-1])[:2])
        print(f"{algorithm.upper()}: position at t = {t_len - 1}: "
              f"{np.round(q.mean[-1, :2], 3)} ± {np.round(sd, 3)}"
              f" (true {np.round(x[-1, :2], 3)})\n  largest difference from the RTS "
              f"smoother {err:.1e}; log evidence {result.log_evidence:.6f} (exact "
              f"{log_z:.6f}); {result.iterations} sweeps, {ms_run:.0f} ms")
    out["rmse_observed"] = float(np.sqrt(np.mean((y - x[:, :2]) ** 2)))
    out["rmse_position"] = float(np.sqrt(np.mean((ms[:, :2] - x[:, :2]) ** 2)))
    out["rmse_velocity"] = float(np.sqrt(np.mean((ms[:, 2:] - x[:, 2:]) ** 2)))
    out["sd_velocity"] = float(np.std(x[:, 2:]))
    print(f"position error of the smoothed track {out['rmse_position']:.3f} against "
          f"{out['rmse_observed']:.3f} for the raw measurements; the velocity, never "
          f"measured, is recovered to {out['rmse_velocity']:.3f} (it varies with sd "
          f"{out['sd_velocity']:.3f})")
    return out


if __name__ == "__main__":
    main()
