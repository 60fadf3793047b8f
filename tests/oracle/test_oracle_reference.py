"""The exact references themselves, against hand-computed values and closed forms.

A mismatch in the oracle must mean a compiler bug, not a reference bug: every engine of
``tests.oracle.exact`` (enumeration, Gaussian conditioning, each quadrature rule) is checked
here on cases whose answer is known independently (closed forms, scipy's own quadrature),
and the structural classification on the cases the issue names.
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy import integrate, special, stats

from tests.conftest import assert_close
from tests.oracle.exact import reference
from tests.oracle.spec import (
    Const,
    Constrain,
    Draw,
    Gate,
    Greater,
    Index,
    PerElement,
    Plate,
    Ref,
    Scale,
    Spec,
    Sum,
)
from tests.oracle.structure import analyse

C = Const


def _if(cond, yes=(), no=None):
    branches = ((True, tuple(yes)),) + (((False, tuple(no)),) if no is not None else ())
    return Gate("if", cond, branches)


def exit_variable_with_gaussian_child() -> Spec:
    """Issue 9's first repro."""
    return Spec("t", (Draw("c", "Bernoulli", (C(0.5),)),
                      _if("c", [Draw("y", "Gaussian", (C(3.0), C(1.0)))],
                          [Draw("y", "Gaussian", (C(0.0), C(1.0)))]),
                      Draw("obs", "Gaussian", (Ref("y"), C(4.0)), 1.2)))


def test_exit_variable_with_a_gaussian_child():
    ref = reference(exit_variable_with_gaussian_child())
    assert_close(ref.marginals["c"].values["p"], 0.327393, rtol=0, atol=5e-7)
    on, off = stats.norm.pdf(1.2, 3, np.sqrt(1.25)), stats.norm.pdf(1.2, 0, np.sqrt(1.25))
    assert_close(ref.log_z, np.log(0.5 * on + 0.5 * off), rtol=1e-12)
    # y | c is N((3 + 4*1.2)/5, 1/5) or N(4*1.2/5, 1/5): a two-component mixture
    w = on / (on + off)
    means = np.array([7.8 / 5, 4.8 / 5])
    mean = w * means[0] + (1 - w) * means[1]
    assert_close(ref.marginals["y"].values["mean"], mean, rtol=1e-12)
    assert_close(ref.marginals["y"].values["variance"],
                 0.2 + w * means[0] ** 2 + (1 - w) * means[1] ** 2 - mean ** 2, rtol=1e-12)
    traits = analyse(exit_variable_with_gaussian_child())
    assert traits.forest and traits.sites == 1 and traits.ep_exact


def test_one_categorical_draw_under_a_flat_dirichlet():
    spec = Spec("t", (Draw("w", "Dirichlet", (C((1.0, 1.0, 1.0)),)),
                      Draw("z", "Discrete", (Ref("w"),), 1)))
    ref = reference(spec)
    assert_close(ref.log_z, -np.log(3), rtol=1e-12)
    assert_close(ref.marginals["w"].values["mean"], [0.25, 0.5, 0.25], rtol=1e-12)
    assert analyse(spec).ep_exact and analyse(spec).single_latent


def test_dirichlet_multinomial_closed_form():
    alpha = np.array([0.5, 2.0, 1.5])
    obs = (0, 2, 2, 1, 2)
    spec = Spec("t", (Draw("w", "Dirichlet", (C(tuple(alpha)),)),
                      Plate("n", 5, (Draw("z", "Discrete", (Ref("w"),), obs),))))
    counts = np.bincount(obs, minlength=3)
    post = alpha + counts
    log_z = special.gammaln(alpha.sum()) - special.gammaln(post.sum()) + \
        (special.gammaln(post) - special.gammaln(alpha)).sum()
    ref = reference(spec)
    assert_close(ref.log_z, log_z, rtol=1e-12)
    a0 = post.sum()
    assert_close(ref.marginals["w"].values["mean"], post / a0, rtol=1e-12)
    assert_close(ref.marginals["w"].values["variance"],
                 post * (a0 - post) / (a0 ** 2 * (a0 + 1)), rtol=1e-10)
    # two components: the same with K = 2
    spec2 = Spec("t", (Draw("w", "Dirichlet", (C((0.5, 3.0)),)),
                       Draw("z", "Discrete", (Ref("w"),), 0)))
    assert_close(reference(spec2).log_z, np.log(0.5 / 3.5), rtol=1e-12)


def test_an_observed_condition_masks_its_branch():
    """x ~ N(0, 1); y ~ Bernoulli(0.3) observed False; If(y): constrain_true(x > 1)."""
    spec = Spec("t", (Draw("x", "Gaussian", (C(0.0), C(1.0))),
                      Draw("y", "Bernoulli", (C(0.3),), False),
                      _if("y", [Greater("b", Ref("x"), 1.0), Constrain(Ref("b"))])))
    ref = reference(spec)
    assert_close(ref.log_z, np.log(0.7), rtol=1e-12)
    assert_close(ref.marginals["x"].values["mean"], 0.0, atol=1e-12)
    assert ref.marginals["b"].exists == 0  # b exists only where y holds


def test_truncation_and_its_latent_condition():
    spec = Spec("t", (Draw("x", "Gaussian", (C(0.5), C(4.0))),
                      Greater("b", Ref("x"), 1.0), Constrain(Ref("b"))))
    ref = reference(spec)
    sd = 0.5
    tn = stats.truncnorm((1.0 - 0.5) / sd, np.inf, loc=0.5, scale=sd)
    assert_close(ref.log_z, stats.norm.logsf(1.0, 0.5, sd), rtol=1e-10)
    assert_close(ref.marginals["x"].values["mean"], tn.mean(), rtol=1e-10)
    assert_close(ref.marginals["x"].values["variance"], tn.var(), rtol=1e-9)
    # under a latent condition: Z = 0.4 P(x > 1) + 0.6
    gated = Spec("t", (Draw("x", "Gaussian", (C(0.5), C(4.0))),
                       Draw("c", "Bernoulli", (C(0.4),)),
                       _if("c", [Greater("b", Ref("x"), 1.0), Constrain(Ref("b"))])))
    p = stats.norm.sf(1.0, 0.5, sd)
    ref = reference(gated)
    assert_close(ref.log_z, np.log(0.4 * p + 0.6), rtol=1e-10)
    assert_close(ref.marginals["c"].values["p"], 0.4 * p / (0.4 * p + 0.6), rtol=1e-10)
    assert_close(ref.marginals["x"].values["mean"],
                 (0.4 * p * tn.mean() + 0.6 * 0.5) / (0.4 * p + 0.6), rtol=1e-10)


def test_gaussian_quadrature_against_scipy_quad():
    """x ~ N(1, 0.5); y ~ N(x, 2) = 2.6; If(x > 0.5): o ~ Bern(0.9) = True, else Bern(0.2);
    against scipy.integrate.quad of the hand-written integrand."""
    spec = Spec("t", (Draw("x", "Gaussian", (C(1.0), C(0.5))),
                      Draw("y", "Gaussian", (Ref("x"), C(2.0)), 2.6),
                      Greater("b", Ref("x"), 0.5),
                      _if("b", [Draw("o", "Bernoulli", (C(0.9),), True)],
                          [Draw("o", "Bernoulli", (C(0.2),), True)])))

    def f(x, power=0):
        like = 0.9 if x > 0.5 else 0.2
        return x ** power * stats.norm.pdf(x, 1, np.sqrt(2)) * \
            stats.norm.pdf(2.6, x, np.sqrt(0.5)) * like

    z = sum(integrate.quad(f, a, b, epsabs=0, epsrel=1e-13)[0]
            for a, b in ((-40, 0.5), (0.5, 40)))
    m1 = sum(integrate.quad(f, a, b, args=(1,), epsabs=0, epsrel=1e-13)[0]
             for a, b in ((-40, 0.5), (0.5, 40))) / z
    m2 = sum(integrate.quad(f, a, b, args=(2,), epsabs=0, epsrel=1e-13)[0]
             for a, b in ((-40, 0.5), (0.5, 40))) / z
    ref = reference(spec)
    assert_close(ref.log_z, np.log(z), rtol=1e-10)
    assert_close(ref.marginals["x"].values["mean"], m1, rtol=1e-10)
    assert_close(ref.marginals["x"].values["variance"], m2 - m1 ** 2, rtol=1e-9)
    pb = integrate.quad(f, 0.5, 40, epsabs=0, epsrel=1e-13)[0] / z
    assert_close(ref.marginals["b"].values["p"], pb, rtol=1e-10)


def test_beta_binomial_and_a_gated_bernoulli():
    a, b = 0.5, 2.0
    spec = Spec("t", (Draw("t", "Beta", (C(a), C(b))),
                      Plate("n", 3, (Draw("y", "Binomial", (C(5), Ref("t")), (4, 0, 2)),))))
    s, f = 6, 9
    log_choose = sum(np.log(special.comb(5, k)) for k in (4, 0, 2))
    ref = reference(spec)
    assert_close(ref.log_z, special.betaln(a + s, b + f) - special.betaln(a, b) + log_choose,
                 rtol=1e-11)
    assert_close(ref.marginals["t"].values["mean"], (a + s) / (a + b + s + f), rtol=1e-11)
    # a gated observation: c ~ Bern(0.3); If(c): o ~ Bern(t) = True; else o ~ Bern(0.6)
    gated = Spec("t", (Draw("t", "Beta", (C(a), C(b))), Draw("c", "Bernoulli", (C(0.3),)),
                       _if("c", [Draw("o", "Bernoulli", (Ref("t"),), True)],
                           [Draw("o", "Bernoulli", (C(0.6),), True)])))
    on = a / (a + b)
    ref = reference(gated)
    assert_close(ref.log_z, np.log(0.3 * on + 0.7 * 0.6), rtol=1e-11)
    mean = (0.3 * on * (a + 1) / (a + b + 1) + 0.7 * 0.6 * on) / (0.3 * on + 0.7 * 0.6)
    assert_close(ref.marginals["t"].values["mean"], mean, rtol=1e-11)
    assert analyse(gated).sites == 1 and analyse(gated).ep_exact


def test_gamma_poisson_and_gamma_precision():
    s, r = 2.0, 0.5
    counts = (3, 0, 5)
    spec = Spec("t", (Draw("t", "Gamma", (C(s), C(r))),
                      Plate("n", 3, (Draw("y", "Poisson", (Ref("t"),), counts),))))
    s2, r2 = s + sum(counts), r + 3
    log_z = s * np.log(r) - special.gammaln(s) + special.gammaln(s2) - s2 * np.log(r2) - \
        sum(special.gammaln(k + 1) for k in counts)
    ref = reference(spec)
    assert_close(ref.log_z, log_z, rtol=1e-11)
    assert_close(ref.marginals["t"].values["mean"], s2 / r2, rtol=1e-11)
    assert_close(ref.marginals["t"].values["variance"], s2 / r2 ** 2, rtol=1e-10)
    data = np.array([0.7, -1.1])
    spec = Spec("t", (Draw("t", "Gamma", (C(s), C(r))),
                      Plate("n", 2, (Draw("y", "Gaussian", (C(0.5), Ref("t")),
                                          tuple(data)),))))
    s2, r2 = s + 1.0, r + 0.5 * ((data - 0.5) ** 2).sum()
    log_z = s * np.log(r) - special.gammaln(s) + special.gammaln(s2) - s2 * np.log(r2) - \
        np.log(2 * np.pi)
    ref = reference(spec)
    assert_close(ref.log_z, log_z, rtol=1e-11)
    assert_close(ref.marginals["t"].values["mean"], s2 / r2, rtol=1e-11)


def test_mixture_of_one_datum():
    """means ~ N([0, 2, 4], 1); z ~ Discrete(uniform); Switch(z): x ~ N(means[z], 1) = 1.3."""
    spec = Spec("t", (Plate("k", 3, (Draw("means", "Gaussian", (PerElement((0.0, 2.0, 4.0)),
                                                                    C(1.0))),)),
                      Draw("z", "Discrete", (C((0.25, 0.25, 0.5)),)),
                      Gate("switch", "z", ((None, (Draw("x", "Gaussian", (
                          Index("means", "z"), C(1.0)), 1.3),)),))))
    prior = np.array([0.25, 0.25, 0.5])
    mu = np.array([0.0, 2.0, 4.0])
    joint = prior * stats.norm.pdf(1.3, mu, np.sqrt(2))
    w = joint / joint.sum()
    ref = reference(spec)
    assert_close(ref.log_z, np.log(joint.sum()), rtol=1e-12)
    assert_close(ref.marginals["z"].values["probs"], w, rtol=1e-12)
    post = (mu + 1.3) / 2
    assert_close(ref.marginals["means"].values["mean"], w * post + (1 - w) * mu, rtol=1e-12)
    second = w * (0.5 + post ** 2) + (1 - w) * (1 + mu ** 2)
    assert_close(ref.marginals["means"].values["variance"],
                 second - (w * post + (1 - w) * mu) ** 2, rtol=1e-12)
    assert analyse(spec).sites == 1 and analyse(spec).ep_exact


def test_linear_gaussian_conditioning_against_a_joint_built_by_hand():
    """a ~ N(0, 1); b ~ N(a, prec 2); s = a + b; t = -2 a; y1 ~ N(s, 4) = 1.5;
    y2 ~ N(t, 1) = 0.7; plate of 2: x[n] ~ N(b, 1), observed (0.3, -0.2)."""
    spec = Spec("t", (Draw("a", "Gaussian", (C(0.0), C(1.0))),
                      Draw("b", "Gaussian", (Ref("a"), C(2.0))),
                      Sum("s", Ref("a"), Ref("b")), Scale("t", -2.0, Ref("a")),
                      Draw("y1", "Gaussian", (Ref("s"), C(4.0)), 1.5),
                      Draw("y2", "Gaussian", (Ref("t"), C(1.0)), 0.7),
                      Plate("n", 2, (Draw("x", "Gaussian", (Ref("b"), C(1.0)), (0.3, -0.2)),))))
    # (a, b) ~ N(0, [[1, 1], [1, 1.5]]); observations are linear maps plus noise
    cov_ab = np.array([[1.0, 1.0], [1.0, 1.5]])
    H = np.array([[1, 1], [-2, 0], [0, 1], [0, 1.0]])
    noise = np.diag([0.25, 1.0, 1.0, 1.0])
    y = np.array([1.5, 0.7, 0.3, -0.2])
    S = H @ cov_ab @ H.T + noise
    ref = reference(spec)
    assert_close(ref.log_z, stats.multivariate_normal(np.zeros(4), S).logpdf(y), rtol=1e-12)
    gain = cov_ab @ H.T @ np.linalg.inv(S)
    mean = gain @ y
    cov = cov_ab - gain @ H @ cov_ab
    assert_close(ref.marginals["a"].values["mean"], mean[0], rtol=1e-12)
    assert_close(ref.marginals["b"].values["variance"], cov[1, 1], rtol=1e-12)
    assert_close(ref.marginals["s"].values["mean"], mean.sum(), rtol=1e-12)
    assert_close(ref.marginals["s"].values["variance"], cov.sum(), rtol=1e-12)
    assert_close(ref.marginals["t"].values["variance"], 4 * cov[0, 0], rtol=1e-12)
    traits = analyse(spec)
    assert traits.linear_gaussian and not traits.forest  # b ~ N(a) and s = a + b: a loop


def test_nested_gates_and_a_local_variable():
    """c ~ B(0.4); If(c): d ~ B(0.2) (local); If(d): e ~ B(0.9) = T, IfNot(d): e ~ B(0.3) = T.
    Z = 0.4 (0.2 * 0.9 + 0.8 * 0.3) + 0.6; d's posterior is conditional on c."""
    spec = Spec("t", (Draw("c", "Bernoulli", (C(0.4),)),
                      _if("c", [Draw("d", "Bernoulli", (C(0.2),)),
                                _if("d", [Draw("e", "Bernoulli", (C(0.9),), True)],
                                    [Draw("e", "Bernoulli", (C(0.3),), True)])])))
    ref = reference(spec)
    assert_close(ref.log_z, np.log(0.768), rtol=1e-12)
    assert_close(ref.marginals["c"].values["p"], 0.168 / 0.768, rtol=1e-12)
    assert_close(ref.marginals["d"].values["p"], 0.18 / 0.42, rtol=1e-12)
    assert_close(ref.marginals["d"].exists, 0.168 / 0.768, rtol=1e-12)
    assert analyse(spec).ep_exact


def test_enumeration_of_a_plate_and_a_case_group():
    """z ~ Discrete(p); plate of 3: c[n] ~ B(q[z]) via Case(z, k) (exit), o[n] | c[n]."""
    p, q = (0.2, 0.5, 0.3), (0.1, 0.6, 0.8)
    obs = (True, False, True)
    spec = Spec("t", (Draw("z", "Discrete", (C(p),)),
                      Plate("n", 3, (Gate("case", "z", tuple(
                          (k, (Draw("c", "Bernoulli", (C(q[k]),)),)) for k in range(3))),
                          _if("c", [Draw("o", "Bernoulli", (C(0.9),), obs)],
                              [Draw("o", "Bernoulli", (C(0.25),), obs)])))))
    total, pz, pc = 0.0, np.zeros(3), np.zeros(3)
    for z in range(3):
        for cs in itertools.product((0, 1), repeat=3):
            w = p[z]
            for i, c in enumerate(cs):
                w *= (q[z] if c else 1 - q[z]) * ((0.9 if c else 0.25) if obs[i] else
                                                  (0.1 if c else 0.75))
            total += w
            pz[z] += w
            pc += w * np.array(cs)
    ref = reference(spec)
    assert_close(ref.log_z, np.log(total), rtol=1e-12)
    assert_close(ref.marginals["z"].values["probs"], pz / total, rtol=1e-12)
    assert_close(ref.marginals["c"].values["p"], pc / total, rtol=1e-12)
    assert analyse(spec).ep_exact  # each element's Case group joins z to c[n]: a star


def test_structure_of_loops():
    # a + a reads one variable twice: a loop
    spec = Spec("t", (Draw("a", "Gaussian", (C(0.0), C(1.0))), Sum("s", Ref("a"), Ref("a")),
                      Draw("y", "Gaussian", (Ref("s"), C(1.0)), 0.3)))
    assert not analyse(spec).forest
    # b ~ N(a); s = a + b: a loop through a
    spec = Spec("t", (Draw("a", "Gaussian", (C(0.0), C(1.0))),
                      Draw("b", "Gaussian", (Ref("a"), C(1.0))), Sum("s", Ref("a"), Ref("b")),
                      Draw("y", "Gaussian", (Ref("s"), C(1.0)), 0.3)))
    assert not analyse(spec).forest and analyse(spec).linear_gaussian
    # two observations of a mixture: two sites
    spec = Spec("t", (Draw("x", "Gaussian", (C(0.0), C(1.0))),
                      Plate("n", 2, (Draw("c", "Bernoulli", (C(0.5),)),
                                     _if("c", [Draw("y", "Gaussian", (Ref("x"), C(1.0)),
                                                    (0.1, 0.2))],
                                         [Draw("y", "Gaussian", (C(3.0), C(1.0)),
                                               (0.1, 0.2))])))))
    assert analyse(spec).forest and analyse(spec).sites == 2 and not analyse(spec).ep_exact


def test_bayesian_linear_regression():
    """w0, w1 ~ N(0, 1), b ~ N(0, 4); y[n] ~ N(x0[n] w0 + x1[n] w1 + b, precision 2):
    the closed-form posterior of a linear regression."""
    x0, x1 = (1.0, 0.3, -0.5, 2.0), (1.2, 0.0, -0.5, 1.5)
    y = (0.7, -0.4, 0.0, 2.6)
    spec = Spec("t", (Draw("w0", "Gaussian", (C(0.0), C(1.0))),
                      Draw("w1", "Gaussian", (C(0.0), C(1.0))),
                      Draw("b", "Gaussian", (C(0.0), C(0.25))),
                      Plate("n", 4, (Scale("t0", PerElement(x0), Ref("w0")),
                                     Scale("t1", PerElement(x1), Ref("w1")),
                                     Sum("s0", Ref("t0"), Ref("t1")), Sum("s1", Ref("s0"), Ref("b")),
                                     Draw("y", "Gaussian", (Ref("s1"), C(2.0)), y)))))
    X = np.column_stack([x0, x1, np.ones(4)])
    prior = np.diag([1.0, 1.0, 4.0])
    S = X @ prior @ X.T + np.eye(4) / 2
    ref = reference(spec)
    assert_close(ref.log_z, stats.multivariate_normal(np.zeros(4), S).logpdf(y), rtol=1e-12)
    post_prec = np.linalg.inv(prior) + 2 * X.T @ X
    mean = np.linalg.solve(post_prec, 2 * X.T @ np.array(y))
    assert_close([ref.marginals[k].values["mean"] for k in ("w0", "w1", "b")], mean, rtol=1e-12)
    assert_close([ref.marginals[k].values["variance"] for k in ("w0", "w1", "b")],
                 np.diag(np.linalg.inv(post_prec)), rtol=1e-12)
    assert analyse(spec).linear_gaussian and not analyse(spec).forest  # w0, w1, b share y[n]
