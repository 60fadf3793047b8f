"""Random vector linear-Gaussian models against Gaussian conditioning.

A fresh generator (the oracle's families are scalar): one or two VectorGaussian roots
(precision or covariance), then random statements on them -- a VectorGaussian child with
mean ``w``, ``B @ w`` or ``w + a`` (latent or observed), a sum ``u + B @ v`` observed as a
vector, a scalar ``Gaussian(c @ w)`` latent or observed, a regression plate
``y[n] ~ N(X[n] @ w, .)`` with X constant or ``ff.Data``, a plate of vector observations
``y[n] ~ N(w, Λ⁻¹)``, and K vector components ``mu[k]`` with observations
``y[n] ~ N(mu[idx[n]], Λ⁻¹)``, the index a constant, an ``ff.Data`` or an observed
``ff.Switch`` variable (each component's posterior is exact under both algorithms).

The reference (``conditioning``) is written independently of factorflow: every random
quantity is an affine function ``M ε + c`` of independent standard normal noise (each
draw adds its own), so the joint of latents and observations is one Gaussian, conditioned
on the data in closed form; log Z is the observations' marginal density.

Checks, at convergence: EP's and VMP's posterior means are the exact means (Gaussian
belief propagation and mean field both have them as fixed point); VMP's precision of each
drawn vector (or scalar, or plate element) is the joint posterior precision's block for it;
where the model's factor graph is a tree, EP's covariances and log evidence are exact;
VMP's bound is below log Z.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import factorflow as ff
from tests.conftest import assert_close

SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


# ----- the model as data -----------------------------------------------------------------
@dataclass
class VecModel:
    """Statements as tuples (see ``build``); ``dims`` the dimension of each vector name."""
    stmts: list = field(default_factory=list)
    dims: dict = field(default_factory=dict)
    #: whether the factor graph over the latent variables is a tree (EP exact)
    tree: bool = False

    def __str__(self) -> str:  # a readable repro
        return "\n".join(repr(s) for s in self.stmts)


def _arr(x):
    return np.asarray(x, dtype=float)


def build(spec: VecModel) -> ff.Model:
    """The factorflow model of ``spec``."""
    env: dict = {}
    with ff.Model("vec_oracle") as model:
        for s in spec.stmts:
            kind = s[0]
            if kind == "root":
                _, name, mean, key, matrix = s
                env[name] = ff.VectorGaussian(name, _arr(mean), **{key: _arr(matrix)})
            elif kind == "child":  # mean = B @ parent + a, or parent + a
                _, name, parent, b, a, prec, observed = s
                w = env[parent]
                if b is None:
                    mean = w if a is None else w + _arr(a)
                else:
                    mean = ff.matvec(_arr(b), w) + (_arr(a) if a is not None else 0.0)
                env[name] = ff.VectorGaussian(name, mean, precision=_arr(prec),
                                              observed=None if observed is None
                                              else _arr(observed))
            elif kind == "sum":  # u + B @ v, observed
                _, name, u, b, v, prec, observed = s
                mean = env[u] + ff.matvec(_arr(b), env[v]) if b is not None \
                    else env[u] + env[v]
                ff.VectorGaussian(name, mean, precision=_arr(prec), observed=_arr(observed))
            elif kind == "scalar":  # Gaussian(c @ w + offset)
                _, name, c, w, offset, prec, observed = s
                mean = ff.inner(env[w], _arr(c))
                if offset:
                    mean = mean + offset
                env[name] = ff.Gaussian(name, mean, precision=prec, observed=observed)
            elif kind == "scalar-child":
                _, name, parent, prec, observed = s
                ff.Gaussian(name, env[parent], precision=prec, observed=observed)
            elif kind == "regression":
                _, name, w, x, data, prec, y = s
                with ff.Plate(ff.Range(f"n_{name}", len(y))):
                    design = ff.Data(f"X_{name}", _arr(x)) if data else _arr(x)
                    ff.Gaussian(name, ff.inner(env[w], design), precision=prec,
                                observed=_arr(y))
            elif kind == "observations":
                _, name, w, prec, y = s
                with ff.Plate(ff.Range(f"n_{name}", len(y))):
                    ff.VectorGaussian(name, env[w], precision=_arr(prec), observed=_arr(y))
            elif kind == "components":  # mu[k] ~ N(means[k], P0); y[n] ~ N(mu[idx[n]], Λ⁻¹)
                _, name, means, p0, form, idx, prec, y = s
                y = _arr(y).reshape(len(y), len(means[0]))  # (0, D) when empty
                with ff.Plate(ff.Range(f"k_{name}", len(means))):
                    mu = ff.VectorGaussian(name, _arr(means), precision=_arr(p0))
                with ff.Plate(ff.Range(f"n_{name}", len(y))):
                    if form == "switch":
                        z = ff.Discrete(f"z_{name}", np.full(len(means), 1.0 / len(means)),
                                        observed=np.asarray(idx, int))
                        with ff.Switch(z):
                            ff.VectorGaussian(f"y_{name}", mu[z], precision=_arr(prec),
                                              observed=y)
                    else:
                        index = np.asarray(idx, int) if form == "constant" else \
                            ff.Data(f"idx_{name}", np.asarray(idx, int))
                        ff.VectorGaussian(f"y_{name}", mu[index], precision=_arr(prec),
                                          observed=y)
            else:
                raise ValueError(kind)
    return model


# ----- the reference -----------------------------------------------------------------------
class _Affine:
    """Random quantities as M ε + c over a growing noise vector ε ~ N(0, I)."""

    def __init__(self):
        self.width = 0
        self.rows: list[np.ndarray] = []  # M's rows, padded as ε grows
        self.consts: list[float] = []

    def noise(self, cov: np.ndarray, mean: np.ndarray, base: list[int] | None = None,
              b: np.ndarray | None = None) -> list[int]:
        """New coordinates: ``b @ (coordinates base) + mean + chol(cov) ε_new``."""
        d = len(mean)
        chol = np.linalg.cholesky(cov)
        start = self.width
        self.width += d
        self._pad()
        out = []
        for i in range(d):
            row = np.zeros(self.width)
            row[start:start + d] = chol[i]
            c = mean[i]
            if base is not None:
                for j, k in enumerate(base):
                    row[:len(self.rows[k])] += b[i, j] * self.rows[k]
                    c += b[i, j] * self.consts[k]
            self.rows.append(row)
            self.consts.append(c)
            out.append(len(self.rows) - 1)
        return out

    def _pad(self):
        self.rows = [np.pad(r, (0, self.width - len(r))) for r in self.rows]


def conditioning(spec: VecModel):
    """Posterior mean and covariance of every latent coordinate, their names, the
    observed values, and log Z, by conditioning the joint Gaussian."""
    aff = _Affine()
    coords: dict[str, list[int]] = {}
    observed: list[tuple[int, float]] = []
    extra_log_z: list[float] = []

    def draw(mean, cov, base=None, b=None, value=None):
        idx = aff.noise(np.atleast_2d(cov), np.atleast_1d(mean), base, b)
        if value is not None:
            observed.extend(zip(idx, np.atleast_1d(value), strict=True))
        return idx

    for s in spec.stmts:
        kind = s[0]
        if kind == "root":
            _, name, mean, key, matrix = s
            m = _arr(matrix)
            coords[name] = draw(_arr(mean), m if key == "covariance" else np.linalg.inv(m))
        elif kind == "child":
            _, name, parent, b, a, prec, obs = s
            d = len(_arr(prec))
            bb = np.eye(d) if b is None else _arr(b)
            idx = draw(np.zeros(d) if a is None else _arr(a), np.linalg.inv(_arr(prec)),
                       coords[parent], bb, obs)
            if obs is None:
                coords[name] = idx
        elif kind == "sum":
            _, name, u, b, v, prec, obs = s
            du = len(coords[u])
            bb = np.hstack([np.eye(du), np.eye(du) if b is None else _arr(b)])
            draw(np.zeros(du), np.linalg.inv(_arr(prec)), coords[u] + coords[v], bb, obs)
        elif kind == "scalar":
            _, name, c, w, offset, prec, obs = s
            idx = draw([offset], [[1.0 / prec]], coords[w], _arr(c)[None, :], obs)
            if obs is None:
                coords[name] = idx
        elif kind == "scalar-child":
            _, name, parent, prec, obs = s
            draw([0.0], [[1.0 / prec]], coords[parent], np.ones((1, 1)), obs)
        elif kind == "regression":
            _, name, w, x, _, prec, y = s
            for row, value in zip(_arr(x), y, strict=True):
                draw([0.0], [[1.0 / prec]], coords[w], row[None, :], value)
        elif kind == "observations":
            _, name, w, prec, y = s
            d = len(coords[w])
            for value in _arr(y):
                draw(np.zeros(d), np.linalg.inv(_arr(prec)), coords[w], np.eye(d), value)
        elif kind == "components":
            _, name, means, p0, form, idx, prec, y = s
            parts = [draw(_arr(m), np.linalg.inv(_arr(p0))) for m in means]
            coords[name] = [i for part in parts for i in part]
            d = len(means[0])
            for j, value in zip(idx, _arr(y), strict=True):
                draw(np.zeros(d), np.linalg.inv(_arr(prec)), parts[j], np.eye(d), value)
            if form == "switch":  # log p(z) of the observed z: uniform
                extra_log_z.append(-len(idx) * np.log(len(means)))
    aff._pad()
    m = np.array(aff.rows)
    c = np.array(aff.consts)
    cov = m @ m.T
    obs_idx = np.array([i for i, _ in observed], dtype=int)
    values = np.array([v for _, v in observed])
    latent_idx = np.array([i for idx in coords.values() for i in idx], dtype=int)
    s_oo = cov[np.ix_(obs_idx, obs_idx)]
    s_lo = cov[np.ix_(latent_idx, obs_idx)]
    s_ll = cov[np.ix_(latent_idx, latent_idx)]
    gain = np.linalg.solve(s_oo, s_lo.T).T
    resid = values - c[obs_idx]
    post_mean = c[latent_idx] + gain @ resid
    post_cov = s_ll - gain @ s_lo.T
    sign, logdet = np.linalg.slogdet(2 * np.pi * s_oo)
    log_z = -0.5 * logdet - 0.5 * resid @ np.linalg.solve(s_oo, resid) + sum(extra_log_z)
    where, at = {}, 0
    for name, idx in coords.items():
        where[name] = slice(at, at + len(idx))
        at += len(idx)
    return post_mean, post_cov, where, log_z


# ----- the generator -------------------------------------------------------------------------
def _spd(draw, d):
    raw = draw(st.lists(st.integers(-3, 3), min_size=d * d, max_size=d * d))
    a = np.array(raw, dtype=float).reshape(d, d) / 2
    m = np.round(a @ a.T + np.eye(d) * draw(st.sampled_from((0.5, 1.0, 2.0))), 6)
    return tuple(tuple(float(v) for v in row) for row in m)


def _vec(draw, d, values=(-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0)):
    return tuple(draw(st.sampled_from(values)) for _ in range(d))


def _matrix(draw, rows, cols):
    """A known matrix with full row rank, singular values in [0.5, 2]-ish."""
    raw = draw(st.lists(st.integers(-2, 2), min_size=rows * cols, max_size=rows * cols))
    b = np.array(raw, dtype=float).reshape(rows, cols) / 2
    if np.linalg.matrix_rank(b) < rows:
        b = b + np.eye(rows, cols)
    if np.linalg.matrix_rank(b) < rows:
        b = np.eye(rows, cols)
    return tuple(tuple(float(v) for v in row) for row in b)


class _Forest:
    """Union-find over latent nodes: whether the factor graph stays a tree."""

    def __init__(self):
        self.parent: dict[str, str] = {}
        self.tree = True

    def find(self, x):
        while self.parent.setdefault(x, x) != x:
            x = self.parent[x]
        return x

    def factor(self, nodes):
        roots = [self.find(n) for n in nodes]
        if len(set(roots)) < len(roots):
            self.tree = False
        for r in roots[1:]:
            self.parent[self.find(r)] = self.find(roots[0])


@st.composite
def vector_models(draw):
    """A random vector linear-Gaussian model (the module docstring); ``.tree`` set."""
    spec = VecModel()
    forest = _Forest()
    vectors: list[str] = []
    scalars: list[str] = []
    count = [0]

    def fresh(prefix):
        count[0] += 1
        return f"{prefix}{count[0]}"

    for _ in range(draw(st.integers(1, 2))):
        d = draw(st.integers(1, 3))
        name = fresh("w")
        key = draw(st.sampled_from(("precision", "covariance")))
        spec.stmts.append(("root", name, _vec(draw, d), key, _spd(draw, d)))
        spec.dims[name] = d
        vectors.append(name)
        forest.factor([name])
    observed_any = False
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(("child", "child", "sum", "scalar", "regression",
                                     "observations", "scalar-child", "components")))
        w = draw(st.sampled_from(vectors))
        d = spec.dims[w]
        if kind == "child":
            form = draw(st.sampled_from(("w", "w + a", "B @ w", "B @ w + a")))
            m = d if form.startswith("w") else draw(st.integers(1, d))
            b = _matrix(draw, m, d) if form.startswith("B") else None
            a = _vec(draw, m) if form.endswith("a") else None
            latent = draw(st.booleans())
            name = fresh("v" if latent else "o")
            obs = None if latent else _vec(draw, m, (-2.1, -0.7, 0.0, 0.4, 1.3, 2.6))
            spec.stmts.append(("child", name, w, b, a, _spd(draw, m), obs))
            if latent:
                spec.dims[name] = m
                vectors.append(name)
                forest.factor([w, name])
            else:
                observed_any = True
                forest.factor([w])
        elif kind == "sum":
            # (B with more rows than columns makes B @ v a LinearMean, which may only be
            # shifted by a known vector: a ModelError by design)
            others = [v for v in vectors if v != w and spec.dims[v] >= d]
            if not others:
                continue
            v = draw(st.sampled_from(others))
            b = _matrix(draw, d, spec.dims[v]) if spec.dims[v] != d or draw(
                st.booleans()) else None
            name = fresh("o")
            spec.stmts.append(("sum", name, w, b, v, _spd(draw, d),
                               _vec(draw, d, (-1.9, -0.3, 0.6, 1.7))))
            observed_any = True
            forest.factor([w, v])
        elif kind == "scalar":
            latent = draw(st.booleans())
            name = fresh("g" if latent else "y")
            c = _vec(draw, d, (-1.5, -0.5, 0.5, 1.0, 2.0))
            offset = draw(st.sampled_from((0.0, 0.0, 1.5, -0.5)))
            prec = draw(st.sampled_from((0.5, 1.0, 2.0, 4.0)))
            obs = None if latent else draw(st.sampled_from((-1.2, 0.3, 0.9, 2.2)))
            spec.stmts.append(("scalar", name, c, w, offset, prec, obs))
            if latent:
                scalars.append(name)
                forest.factor([w, name])
            else:
                observed_any = True
                forest.factor([w])
        elif kind == "scalar-child":
            if not scalars:
                continue
            g = draw(st.sampled_from(scalars))
            spec.stmts.append(("scalar-child", fresh("y"), g,
                               draw(st.sampled_from((0.5, 1.0, 3.0))),
                               draw(st.sampled_from((-0.8, 0.1, 1.4)))))
            observed_any = True
            forest.factor([g])
        elif kind == "components":  # its own latent vectors, one per component
            k, n, dc = draw(st.integers(1, 3)), draw(st.integers(0, 4)), draw(st.integers(1, 2))
            name = fresh("m")
            idx = tuple(draw(st.integers(0, k - 1)) for _ in range(n))
            y = tuple(_vec(draw, dc, (-1.6, -0.2, 0.5, 1.8)) for _ in range(n))
            spec.stmts.append(("components", name, tuple(_vec(draw, dc) for _ in range(k)),
                               _spd(draw, dc),
                               draw(st.sampled_from(("constant", "data", "switch"))), idx,
                               _spd(draw, dc), y))
            observed_any = observed_any or n > 0
            forest.factor([name])
        elif kind == "regression":
            n = draw(st.integers(1, 4))
            x = tuple(_vec(draw, d, (-1.5, -0.5, 0.0, 0.3, 1.0, 2.0)) for _ in range(n))
            y = _vec(draw, n, (-2.3, -1.1, -0.4, 0.7, 1.2, 2.6))
            spec.stmts.append(("regression", fresh("y"), w, x, draw(st.booleans()),
                               draw(st.sampled_from((0.5, 1.0, 4.0))), y))
            observed_any = True
            forest.factor([w])
        else:
            n = draw(st.integers(1, 3))
            y = tuple(_vec(draw, d, (-1.6, -0.2, 0.5, 1.8)) for _ in range(n))
            spec.stmts.append(("observations", fresh("y"), w, _spd(draw, d), y))
            observed_any = True
            forest.factor([w])
    if not observed_any:
        w = vectors[-1]
        spec.stmts.append(("observations", fresh("y"), w, _spd(draw, spec.dims[w]),
                           (_vec(draw, spec.dims[w], (-1.6, 0.5, 1.8)),)))
    spec.tree = forest.tree
    return spec


# ----- checks --------------------------------------------------------------------------------
def _latent_names(spec: VecModel) -> list[str]:
    out = []
    for s in spec.stmts:
        if s[0] in ("root", "components") or (s[0] in ("child", "scalar") and s[-1] is None):
            out.append(s[1])
    return out


def check(spec: VecModel, algorithm: str) -> list[str]:
    """The failures of ``algorithm`` on ``spec``: an empty list if it passes."""
    mean, cov, where, log_z = conditioning(spec)
    precision = np.linalg.inv(cov)
    result = build(spec).infer(algorithm, iterations=2000, tolerance=1e-13, progress=False)
    out = []
    if not result.converged:
        out.append("not converged")
    for name in _latent_names(spec):
        q = result[name]
        at = where[name]
        if name.startswith("m"):  # K components: compare them one by one
            d = np.shape(q.mean)[-1]
            for j in range(np.shape(q.mean)[0]):
                sub = slice(at.start + j * d, at.start + (j + 1) * d)
                got_mean, got_var = np.asarray(q.mean)[j], np.asarray(q.covariance)[j]
                if not np.allclose(got_mean, mean[sub], rtol=1e-7, atol=1e-7):
                    out.append(f"{name}[{j}]: mean {got_mean} != {mean[sub]}")
                if not np.allclose(got_var, cov[sub, sub], rtol=1e-7, atol=1e-8):
                    out.append(f"{name}[{j}]: covariance {got_var.tolist()} != "
                               f"{cov[sub, sub].tolist()}")
            continue
        if np.ndim(q.mean) == 0 or name.startswith("g"):
            got_mean = np.atleast_1d(q.mean)
            got_var = np.atleast_2d(q.variance)
        else:
            got_mean, got_var = np.asarray(q.mean), np.asarray(q.covariance)
        if not np.allclose(got_mean, mean[at], rtol=1e-7, atol=1e-7):
            out.append(f"{name}: mean {got_mean} != {mean[at]}")
        if algorithm == "vmp":
            want = np.linalg.inv(precision[at, at])
            if not np.allclose(got_var, want, rtol=1e-7, atol=1e-8):
                out.append(f"{name}: VMP covariance {got_var.tolist()} != {want.tolist()}")
        elif spec.tree and not np.allclose(got_var, cov[at, at], rtol=1e-7, atol=1e-8):
            out.append(f"{name}: EP covariance {got_var.tolist()} != {cov[at, at].tolist()}")
    if algorithm == "ep" and spec.tree and not np.isclose(result.log_evidence, log_z,
                                                          rtol=1e-7, atol=1e-7):
        out.append(f"EP log evidence {result.log_evidence} != log Z {log_z}")
    if algorithm == "vmp" and result.log_evidence > log_z + 1e-7 * (1 + abs(log_z)):
        out.append(f"VMP bound {result.log_evidence} above log Z {log_z}")
    return out


# ----- the reference itself, on a closed form ------------------------------------------------
def test_conditioning_is_the_linear_regression_closed_form():
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(5, 3)), rng.normal(size=5)
    p0 = np.array([[2.0, 0.3, 0.0], [0.3, 1.0, 0.1], [0.0, 0.1, 1.5]])
    m0 = np.array([0.5, -1.0, 0.0])
    spec = VecModel([("root", "w", tuple(m0), "precision", tuple(map(tuple, p0))),
                     ("regression", "y", "w", tuple(map(tuple, x)), False, 2.0, tuple(y))])
    mean, cov, where, log_z = conditioning(spec)
    p = p0 + 2.0 * x.T @ x
    assert_close(cov, np.linalg.inv(p), rtol=1e-12, atol=1e-14)
    assert_close(mean, np.linalg.solve(p, p0 @ m0 + 2.0 * x.T @ y), rtol=1e-12)
    marg = x @ np.linalg.inv(p0) @ x.T + np.eye(5) / 2.0
    r = y - x @ m0
    expected = -0.5 * np.linalg.slogdet(2 * np.pi * marg)[1] - 0.5 * r @ np.linalg.solve(marg, r)
    assert_close(log_z, expected, rtol=1e-12)


@pytest.mark.parametrize("algorithm", ["ep", "vmp"])
@settings(max_examples=40, **SETTINGS)
@given(spec=vector_models())
def test_random_vector_models_against_gaussian_conditioning(spec, algorithm):
    failures = check(spec, algorithm)
    assert not failures, f"{spec}\n{failures}"
