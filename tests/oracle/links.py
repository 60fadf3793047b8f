"""Random models with non-conjugate links, and their exact references (no factorflow).

A :class:`LinkModel` is a Gaussian weight vector w (D = 1: ``ff.Gaussian``; D = 2:
``ff.VectorGaussian`` with a full prior precision) observed through one to three groups,
each a plate of 1-3 observations of one family through its link of η = a·w + b:
``ff.Bernoulli(y, ff.logistic(η))``, ``ff.Bernoulli(y, ff.probit(η))`` or
``ff.Poisson(y, ff.exp(η))``.

The references, each written here with NumPy/SciPy only:

* :func:`exact` -- log Z and the posterior mean and covariance of w by quadrature (the
  trapezoid rule on a grid around the mode, 1-D or 2-D: spectrally accurate for these
  smooth, Gaussian-tailed integrands);
* :func:`ep_sites` -- EP's defining property read back from a returned Gaussian q: for each
  site (a rank-one factor f(a·w + b)) the 1-D cavity N(m_c, v_c) whose tilted distribution
  N(η; m_c, v_c) f(η) has q's moments along a, found by Newton's method on 1-D quadrature;
  the sites q / cavity must multiply with the prior back into q, and EP's log evidence
  is then a closed form of the sites (:func:`ep_log_evidence`);
* :func:`vmp_fixed_point` -- the fixed-point equations of each link's VMP update, written
  out in closed form (Jaakkola-Jordan for the logistic, the augmentation z ~ N(η, 1) for
  the probit, the Gaussian ELBO's stationarity for ``ff.exp``), and the bound they imply.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st
from scipy import special

LINKS = ("logistic", "probit", "exp")
FEATURES = (-1.5, -1.0, -0.5, 0.3, 0.8, 1.0, 1.7)
OFFSETS = (0.0, 0.0, -1.0, 0.5, 1.5)
PRIOR_MEANS = (-1.0, -0.3, 0.0, 0.4, 1.0)
PRIOR_PRECISIONS = (0.5, 1.0, 2.0, 4.0)


@dataclass(frozen=True)
class Group:
    link: str
    rows: tuple[tuple[float, ...], ...]  # one feature row a per observation
    offset: float  # b (D = 1 only; 0 for D = 2)
    observed: tuple[int, ...]


@dataclass(frozen=True)
class LinkModel:
    mean: tuple[float, ...]
    precision: tuple[tuple[float, ...], ...]
    groups: tuple[Group, ...]

    @property
    def dim(self) -> int:
        return len(self.mean)

    def sites(self) -> list[tuple[str, np.ndarray, float, int]]:
        """Every observation as (link, a, b, y)."""
        return [(g.link, np.array(row), g.offset, y) for g in self.groups
                for row, y in zip(g.rows, g.observed, strict=True)]

    def code(self) -> str:
        """The model as factorflow code (what :func:`build` runs)."""
        lines = ["import numpy as np", "import factorflow as ff", "",
                 "with ff.Model('links') as model:"]
        if self.dim == 1:
            lines.append(f"    w = ff.Gaussian('w', {self.mean[0]!r}, "
                         f"precision={self.precision[0][0]!r})")
        else:
            lines.append(f"    w = ff.VectorGaussian('w', np.array({list(self.mean)!r}), "
                         f"precision=np.array({[list(r) for r in self.precision]!r}))")
        for i, g in enumerate(self.groups):
            n = len(g.rows)
            lines.append(f"    with ff.Plate(ff.Range('n{i}', {n})):")
            if self.dim == 1:
                eta = f"np.array({[r[0] for r in g.rows]!r}) * w"
                if g.offset:
                    eta += f" + {g.offset!r}"
            else:
                eta = f"np.array({[list(r) for r in g.rows]!r}) @ w"
            family = "Poisson" if g.link == "exp" else "Bernoulli"
            obs = list(g.observed) if g.link == "exp" else [bool(v) for v in g.observed]
            lines.append(f"        ff.{family}('y{i}', ff.{g.link}({eta}), "
                         f"observed=np.array({obs!r}))")
        return "\n".join(lines) + "\n"

    def __str__(self) -> str:
        return self.code()


def build(spec: LinkModel):
    """The factorflow model that ``spec.code()`` prints."""
    namespace: dict = {}
    exec(compile(spec.code(), "<link model>", "exec"), namespace)
    return namespace["model"]


@st.composite
def link_models(draw, links=LINKS, max_dim: int = 2, max_groups: int = 3,
                precisions=PRIOR_PRECISIONS, features=FEATURES) -> LinkModel:
    """A random :class:`LinkModel` (see the module docstring); ``precisions`` and
    ``features`` the choices of prior precisions and of features."""
    dim = draw(st.integers(1, max_dim))
    mean = tuple(draw(st.sampled_from(PRIOR_MEANS)) for _ in range(dim))
    if dim == 1:
        precision = ((draw(st.sampled_from(precisions)),),)
    else:
        p1, p2 = (draw(st.sampled_from(precisions)) for _ in range(2))
        rho = draw(st.sampled_from((0.0, 0.3, -0.6)))
        off = round(rho * float(np.sqrt(p1 * p2)), 6)
        precision = ((p1, off), (off, p2))
    groups = []
    for _ in range(draw(st.integers(1, max_groups))):
        link = draw(st.sampled_from(links))
        n = draw(st.integers(1, 3))
        rows = tuple(tuple(draw(st.sampled_from(features)) for _ in range(dim))
                     for _ in range(n))
        offset = draw(st.sampled_from(OFFSETS)) if dim == 1 else 0.0
        if link == "exp":
            observed = tuple(draw(st.integers(0, 4)) for _ in range(n))
        else:
            observed = tuple(draw(st.integers(0, 1)) for _ in range(n))
        groups.append(Group(link, rows, offset, observed))
    return LinkModel(mean, precision, tuple(groups))


# ----- the likelihoods ---------------------------------------------------------------------
def log_likelihood(link: str, y: int, eta: np.ndarray) -> np.ndarray:
    """log p(y | η) of one observation."""
    if link == "logistic":
        return special.log_expit(eta if y else -eta)
    if link == "probit":
        return special.log_ndtr(eta if y else -eta)
    return y * eta - np.exp(eta) - special.gammaln(y + 1.0)


# ----- exact posterior by quadrature -------------------------------------------------------
def _log_joint(spec: LinkModel, w: np.ndarray) -> np.ndarray:
    """log p(w) p(y | w) at points w of shape (..., D)."""
    mu, lam = np.array(spec.mean), np.array(spec.precision)
    d = w - mu
    out = -0.5 * np.einsum("...i,ij,...j->...", d, lam, d) + 0.5 * (
        np.linalg.slogdet(lam)[1] - spec.dim * np.log(2 * np.pi))
    for link, a, b, y in spec.sites():
        out = out + log_likelihood(link, y, w @ a + b)
    return out


def _mode(spec: LinkModel) -> tuple[np.ndarray, np.ndarray]:
    """The posterior mode and the inverse Hessian there (Newton's method on the
    log-concave joint), which place the quadrature grid."""
    from scipy import optimize
    res = optimize.minimize(lambda w: -_log_joint(spec, w), np.array(spec.mean),
                            method="BFGS", options={"gtol": 1e-10})
    w = res.x
    h = 1e-4
    hess = np.empty((spec.dim, spec.dim))
    for i in range(spec.dim):
        for j in range(spec.dim):
            ei, ej = np.eye(spec.dim)[i] * h, np.eye(spec.dim)[j] * h
            hess[i, j] = -(_log_joint(spec, w + ei + ej) - _log_joint(spec, w + ei - ej)
                           - _log_joint(spec, w - ei + ej) + _log_joint(spec, w - ei - ej)
                           ) / (4 * h * h)
    return w, np.linalg.inv(hess)


@dataclass
class Exact:
    log_z: float
    mean: np.ndarray
    covariance: np.ndarray


def exact(spec: LinkModel, width: float = 12.0, points: int | None = None) -> Exact:
    """log Z, E[w] and Cov[w] by the trapezoid rule on a grid of ±``width`` Laplace
    standard deviations around the mode (an affine grid along the Laplace axes in 2-D)."""
    mode, cov = _mode(spec)
    chol = np.linalg.cholesky(cov + 1e-300 * np.eye(spec.dim))
    points = points or (2001 if spec.dim == 1 else 401)
    u = np.linspace(-width, width, points)
    du = u[1] - u[0]
    if spec.dim == 1:
        grid = u[:, None]
    else:
        grid = np.stack(np.meshgrid(u, u, indexing="ij"), -1).reshape(-1, 2)
    w = mode + grid @ chol.T
    log_p = _log_joint(spec, w)
    top = log_p.max()
    p = np.exp(log_p - top)
    jac = abs(np.linalg.det(chol)) * du ** spec.dim
    total = p.sum()
    mean = (p[:, None] * w).sum(0) / total
    d = w - mean
    covariance = np.einsum("n,ni,nj->ij", p, d, d) / total
    return Exact(float(np.log(total * jac) + top), mean, covariance)


# ----- EP's defining property ----------------------------------------------------------------
def _tilted_mode(link: str, y: int, m: float, v: float) -> float:
    """The mode of the (log-concave) tilted density N(η; m, v) p(y | η)."""
    from scipy import optimize

    def neg(eta):
        return 0.5 * (eta - m) ** 2 / v - float(log_likelihood(link, y, np.array(eta)))
    s = np.sqrt(v)
    return float(optimize.minimize_scalar(neg, bracket=(m - s, m + s)).x)


def tilted_moments(link: str, y: int, m: float, v: float) -> tuple[float, float, float]:
    """log Z, mean and variance of N(η; m, v) p(y | η), by the trapezoid rule around the
    tilted density's mode: ±25 cavity standard deviations (a log-concave likelihood
    leaves the tilted density narrower than the cavity) at a spacing of a tenth of the
    smallest of the cavity's and the tilted curvature's standard deviations and of the
    likelihood's own scale, 1 (at most 200,001 nodes): the integrands are analytic in a
    strip (σ's nearest poles are ±iπ away), so the rule converges geometrically."""
    s = np.sqrt(v)
    mode = _tilted_mode(link, y, m, v)
    h = 1e-4
    curv = (2 * (0.5 * (mode - m) ** 2 / v - log_likelihood(link, y, np.array(mode)))
            - (0.5 * (mode + h - m) ** 2 / v - log_likelihood(link, y, np.array(mode + h)))
            - (0.5 * (mode - h - m) ** 2 / v - log_likelihood(link, y, np.array(mode - h)))
            ) / (h * h)
    local = 1.0 / np.sqrt(max(-curv, 1.0 / v))
    step = max(min(s, local, 1.0) / 10.0, 25.0 * s / 100_000)
    half = int(np.ceil(25.0 * s / step))
    eta = mode + step * np.arange(-half, half + 1)
    log_f = -0.5 * ((eta - m) / s) ** 2 - 0.5 * np.log(2 * np.pi * v) + \
        log_likelihood(link, y, eta)
    top = log_f.max()
    f = np.exp(log_f - top)
    total = f.sum()
    mean = float((f * eta).sum() / total)
    var = float((f * (eta - mean) ** 2).sum() / total)
    return float(np.log(total * (eta[1] - eta[0])) + top), mean, var


def cavity_for(link: str, y: int, m: float, v: float,
               starts: tuple[tuple[float, float], ...] = ()) -> tuple[float, float]:
    """The cavity N(m_c, v_c) whose tilted distribution with p(y | η) has mean m and
    variance v (Powell's hybrid method in (m_c, log v_c), from q itself with its variance
    doubled and then from each of ``starts``)."""
    from scipy import optimize

    def gap(x):
        _, mt, vt = tilted_moments(link, y, x[0], np.exp(x[1]))
        return [(mt - m) / np.sqrt(v), np.log(vt) - np.log(v)]

    for start in ((m, v * 2.0),) + tuple(starts):
        with np.errstate(all="ignore"):
            sol = optimize.root(gap, [start[0], np.log(start[1])], method="hybr", tol=1e-14)
        if np.all(np.abs(gap(sol.x)) < 1e-11):
            return float(sol.x[0]), float(np.exp(sol.x[1]))
    raise ArithmeticError(f"no cavity found for {link} y={y} at m={m}, v={v}")


def exact_one_site(spec: LinkModel) -> Exact:
    """The exact posterior with a single observation, through its 1-D projection: η = a·w + b
    is N(m0, v0) under the prior, and w given η is Gaussian, so E[w] and Cov[w] follow from
    the tilted moments of η (:func:`tilted_moments`)."""
    (link, a, b, y), = spec.sites()
    mu0, cov0 = np.array(spec.mean), np.linalg.inv(np.array(spec.precision, float))
    m0, v0 = float(a @ mu0 + b), float(a @ cov0 @ a)
    log_z, mt, vt = tilted_moments(link, y, m0, v0)
    gain = cov0 @ a / v0
    return Exact(log_z, mu0 + gain * (mt - m0), cov0 - np.outer(gain, gain) * (v0 - vt))


@dataclass
class Site:
    a: np.ndarray
    b: float
    tau: float  # the site exp(-tau/2 η² + nu η) in η = a·w + b
    nu: float
    cavity: tuple[float, float]
    log_z: float  # log ∫ cavity · p(y | η)


def ep_sites(spec: LinkModel, mean: np.ndarray, covariance: np.ndarray) -> list[Site]:
    """The site of each observation implied by EP's moment matching at q = N(mean, cov)."""
    out = []
    mu0, cov0 = np.array(spec.mean), np.linalg.inv(np.array(spec.precision, float))
    for link, a, b, y in spec.sites():
        m = float(a @ mean + b)
        v = float(a @ covariance @ a)
        prior = (float(a @ mu0 + b), float(a @ cov0 @ a))  # the widest cavity possible
        mc, vc = cavity_for(link, y, m, v, starts=(prior,))
        log_z, _, _ = tilted_moments(link, y, mc, vc)
        out.append(Site(a, b, 1.0 / v - 1.0 / vc, m / v - mc / vc, (mc, vc), log_z))
    return out


def sites_posterior(spec: LinkModel, sites: list[Site]) -> tuple[np.ndarray, np.ndarray]:
    """Prior times sites: the precision matrix and precision-times-mean of w."""
    lam = np.array(spec.precision, float)
    h = lam @ np.array(spec.mean)
    for s in sites:
        lam = lam + s.tau * np.outer(s.a, s.a)
        h = h + (s.nu - s.tau * s.b) * s.a
    return lam, h


def _log_gauss_integral(lam: np.ndarray, h: np.ndarray, c: float) -> float:
    """log ∫ exp(-½ wᵀ Λ w + hᵀ w + c) dw."""
    lam = np.atleast_2d(lam)
    return float(c + 0.5 * h @ np.linalg.solve(lam, h) + 0.5 * (
        len(h) * np.log(2 * np.pi) - np.linalg.slogdet(lam)[1]))


def ep_log_evidence(spec: LinkModel, sites: list[Site]) -> float:
    """EP's log evidence of these sites: log ∫ p(w) Π s_i t_i(a_i·w + b_i) dw with each
    site t_i scaled by s_i = Z_i / ∫ cavity_i t_i (Minka 2001, eq. 3.40 in Gaussian form)."""
    mu, lam0 = np.array(spec.mean), np.array(spec.precision, float)
    lam, h = lam0.copy(), lam0 @ mu
    c = -0.5 * mu @ lam0 @ mu + 0.5 * (np.linalg.slogdet(lam0)[1]
                                       - spec.dim * np.log(2 * np.pi))
    for s in sites:
        lam = lam + s.tau * np.outer(s.a, s.a)
        h = h + (s.nu - s.tau * s.b) * s.a
        c += -0.5 * s.tau * s.b ** 2 + s.nu * s.b
        mc, vc = s.cavity
        log_ct = _log_gauss_integral(np.array([[1 / vc + s.tau]]), np.array([mc / vc + s.nu]),
                                     -0.5 * mc ** 2 / vc - 0.5 * np.log(2 * np.pi * vc))
        c += s.log_z - log_ct
    return _log_gauss_integral(lam, h, c)


# ----- VMP's fixed points ---------------------------------------------------------------------
def _jj_lambda(xi: float) -> float:
    """λ(ξ) = tanh(ξ/2) / (4ξ) (1/8 at ξ = 0)."""
    return 0.125 if abs(xi) < 1e-8 else float(np.tanh(xi / 2) / (4 * xi))


def vmp_fixed_point(spec: LinkModel, mean: np.ndarray, covariance: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, float]:
    """The precision and precision-times-mean of w that each link's VMP update sends from
    q = N(mean, cov) (at a fixed point: q's own), and the bound at q with each link's
    auxiliary quantities at their optimum given q."""
    mu0, lam0 = np.array(spec.mean), np.array(spec.precision, float)
    lam, h = lam0.copy(), lam0 @ mu0
    d = mean - mu0
    bound = -0.5 * (d @ lam0 @ d + np.trace(lam0 @ covariance)) + 0.5 * (
        np.linalg.slogdet(lam0)[1] - spec.dim * np.log(2 * np.pi))
    bound += 0.5 * (np.linalg.slogdet(covariance)[1] + spec.dim * (1 + np.log(2 * np.pi)))
    for link, a, b, y in spec.sites():
        m = float(a @ mean + b)
        v = float(a @ covariance @ a)
        if link == "logistic":  # σ(s η) >= σ(ξ) exp((sη - ξ)/2 - λ(ξ)(η² - ξ²))
            xi = float(np.sqrt(m * m + v))
            lj = _jj_lambda(xi)
            sign = 1.0 if y else -1.0
            lam = lam + 2 * lj * np.outer(a, a)
            h = h + (0.5 * sign - 2 * lj * b) * a
            bound += special.log_expit(xi) + 0.5 * (sign * m - xi) - lj * (m * m + v - xi * xi)
        elif link == "probit":  # z ~ N(η, 1) truncated to z's sign: E[z] moves η
            sign = 1.0 if y else -1.0
            ez = m + sign * np.exp(-0.5 * m * m - 0.5 * np.log(2 * np.pi)
                                   - special.log_ndtr(sign * m))
            lam = lam + np.outer(a, a)
            h = h + (ez - b) * a
            bound += special.log_ndtr(sign * m) - 0.5 * v
        else:  # the Gaussian ELBO's stationary point: E[e^η] = e^(m + v/2)
            e = np.exp(m + 0.5 * v)
            lam = lam + e * np.outer(a, a)
            h = h + (y - e + e * (m - b)) * a
            bound += y * m - e - special.gammaln(y + 1.0)
    return lam, h, float(bound)


def elbo(spec: LinkModel, mean: np.ndarray, covariance: np.ndarray) -> float:
    """The exact ELBO of q = N(mean, cov): E_q[log p(w, y)] + H[q] (each site's
    expectation by 1-D quadrature along its a)."""
    mu0, lam0 = np.array(spec.mean), np.array(spec.precision, float)
    d = mean - mu0
    out = -0.5 * (d @ lam0 @ d + np.trace(lam0 @ covariance)) + 0.5 * (
        np.linalg.slogdet(lam0)[1] - spec.dim * np.log(2 * np.pi))
    out += 0.5 * (np.linalg.slogdet(covariance)[1] + spec.dim * (1 + np.log(2 * np.pi)))
    u = np.linspace(-20.0, 20.0, 4001)
    weight = np.exp(-0.5 * u * u)
    weight /= weight.sum()
    for link, a, b, y in spec.sites():
        m = float(a @ mean + b)
        v = float(a @ covariance @ a)
        out += float((weight * log_likelihood(link, y, m + np.sqrt(v) * u)).sum())
    return float(out)


__all__ = ["Exact", "Group", "LinkModel", "Site", "build", "cavity_for", "elbo",
           "ep_log_evidence", "ep_sites", "exact", "exact_one_site", "link_models", "sites_posterior",
           "tilted_moments", "vmp_fixed_point"]
