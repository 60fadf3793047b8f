"""Fuzz seed 24 (fz24): VMP's log evidence was -inf on a valid model, EP's wrong.

Minimal model (shrunk from the fuzz repro by hand; every other statement was unrelated)::

    c = ff.Bernoulli("c", 0.35)
    f = ~c
    with ff.Case(c, 1):          # = ff.If(c)
        ff.constrain_true(f)

The branch can never hold (there c is True, so f is False): log Z = log 0.65 and the
posterior of c is a point mass on False, which mean-field VMP represents exactly.

Cause: f, a deterministic function of the gate's condition defined *outside* the gate,
entered the gate as any variable does (``Gate.EnterPartial``), its message weighed by
the condition's posterior.  Under VMP a point mass q(c = True) = 0 makes that message
uniform (m^0), so the constraint vanished and q(c) went back to its prior, after which
the constraint returned with weight 0.35 and log 0 made q(c = True) = 0 again: the
iterations alternated between the answer (bound log 0.65) and the prior (bound -inf),
and an odd number of sweeps ended on -inf.  EP, on the loop c -> f -> gate on c, gave
log Z = -0.10.

Fix (``model/factories._in_case``): such a function is recomputed inside the gate with
the condition replaced by its value there (``~True``), exactly as if written inside
(where the condition itself already reads as its branch's value).  With that, a
branch whose evidence is exactly 0 reached EP's variable evidence term as
-inf - (-inf) = nan (a point mass meeting a constraint against it); that term is now
-inf there (``factors/variable.ep_variable_evidence``).  And ``Not``/``And``/``Or`` of
values the gate decides are folded (``~True`` is False, ``True & b`` is ``b``), written
outside the gate or inside it: a chain written inside such a branch (``~~c`` in
``ff.IfNot(c)``) left a variable local to the branch whose messages in contradict each
other, and EP stopped with an improper posterior (before this change too).

References: enumeration of every joint state of the latent variables (1e-9) for EP's
log evidence and marginals (every model here is a tree once f is inside); for VMP, the
bound equals the ELBO of its own posteriors computed here in NumPy (mean field over the
latent variables, the deterministic functions evaluated per joint state) to 1e-9, is
finite, and is at most log Z.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pytest

import factorflow as ff

PB = 0.6  # prior of b, a second latent boolean some functions read
PZ = np.array([0.2, 0.3, 0.5])  # prior of z, a Discrete selector
TABLE = (True, False, True)  # ff.Constant(TABLE)[z]: a deterministic function of z

#: functions of the boolean selector c (and b), written before the gate
FUNCTIONS = {
    "not": (lambda c, b: ~c, lambda c, b: not c),
    "notnot": (lambda c, b: ~~c, lambda c, b: c),
    "and": (lambda c, b: c & b, lambda c, b: c and b),
    "or": (lambda c, b: c | b, lambda c, b: c or b),
    "nand": (lambda c, b: ~(c & b), lambda c, b: not (c and b)),
    "ornot": (lambda c, b: (~c) | b, lambda c, b: (not c) or b),
}

#: gates on c: how it is opened, and the value of c where it holds
GATES = {
    "if": (lambda c: ff.If(c), True),
    "ifnot": (lambda c: ff.IfNot(c), False),
    "case0": (lambda c: ff.Case(c, 0), False),
    "case1": (lambda c: ff.Case(c, 1), True),
}


@dataclass(frozen=True)
class Family:
    """One model of the family: c ~ Bernoulli(pc), b ~ Bernoulli(PB), f = function(c, b)
    before the gate; inside ``gate`` on c (inside ``ff.Case(z, zcase)`` when zcase is not
    None, z ~ Discrete(PZ)) ``constrain_true(f)``, or ``constrain_true(~f)`` when
    ``negate``; f written inside the gate when ``inside``."""

    function: str
    gate: str
    negate: bool
    pc: float
    zcase: int | None = None
    inside: bool = False  # f written inside the gate instead

    def build(self) -> ff.Model:
        with ff.Model("fz24") as model:
            c = ff.Bernoulli("c", self.pc)
            b = ff.Bernoulli("b", PB)
            f = None if self.inside else FUNCTIONS[self.function][0](c, b)
            z = ff.Discrete("z", PZ) if self.zcase is not None else None
            outer = ff.Case(z, self.zcase) if z is not None else None
            if outer is not None:
                outer.__enter__()
            with GATES[self.gate][0](c):
                if self.inside:
                    f = FUNCTIONS[self.function][0](c, b)
                ff.constrain_true(~f if self.negate else f)
            if outer is not None:
                outer.__exit__(None, None, None)
        return model

    def log_weight(self, c: bool, b: bool, z: int) -> float:
        """log p(c, b, z, constraints) at one joint state."""
        lw = np.log(self.pc if c else 1 - self.pc) + np.log(PB if b else 1 - PB)
        if self.zcase is not None:
            lw += np.log(PZ[z])
        holds = c == GATES[self.gate][1] and (self.zcase is None or z == self.zcase)
        if holds and FUNCTIONS[self.function][1](c, b) == self.negate:
            return -np.inf
        return lw

    def states(self) -> list[tuple[bool, bool, int]]:
        zs = range(len(PZ)) if self.zcase is not None else (0,)
        return list(itertools.product((False, True), (False, True), zs))


def exact(fam: Family) -> tuple[float, dict[str, np.ndarray]]:
    """log Z and the marginals of c, b (P(True)) and z (probabilities) by enumeration."""
    states = fam.states()
    lw = np.array([fam.log_weight(*s) for s in states])
    log_z = float(np.logaddexp.reduce(lw))
    w = np.exp(lw - log_z)
    marg = {"c": sum(wi for wi, s in zip(w, states, strict=True) if s[0]),
            "b": sum(wi for wi, s in zip(w, states, strict=True) if s[1])}
    if fam.zcase is not None:
        marg["z"] = np.array([sum(wi for wi, s in zip(w, states, strict=True) if s[2] == k)
                              for k in range(len(PZ))])
    return log_z, marg


def elbo(fam: Family, qc: float, qb: float, qz: np.ndarray | None) -> float:
    """E_q[log p(c, b, z, constraints)] + H[q] for q = q(c) q(b) q(z) (mean field), a state
    of probability 0 under q contributing nothing (0 log 0 = 0)."""
    total = 0.0
    for c, b, z in fam.states():
        q = (qc if c else 1 - qc) * (qb if b else 1 - qb)
        if qz is not None:
            q *= qz[z]
        if q > 0:
            total += q * (fam.log_weight(c, b, z) - np.log(q))
    return total


def _p(d) -> float:
    return float(np.asarray(d.p, float))


FAMILY = [Family(fn, g, neg, pc) for fn, g, neg, pc in itertools.product(
    FUNCTIONS, GATES, (False, True), (0.35,))]
FAMILY += [Family(fn, g, neg, 0.8) for fn, g, neg in itertools.product(
    ("not", "and", "ornot"), ("if", "case0"), (False, True))]
FAMILY += [Family(fn, "if", neg, 0.35, k) for fn, neg, k in itertools.product(
    ("not", "or"), (False, True), (0, 2))]
FAMILY += [Family(fn, g, neg, 0.35, inside=True) for fn, g, neg in itertools.product(
    ("notnot", "and", "ornot"), ("ifnot", "case1"), (False, True))]
MINIMAL = Family("not", "case1", False, 0.35)


def _ids(f: Family) -> str:
    where = "inside" if f.inside else "outside"
    return f"{f.function}-{f.gate}-{'false' if f.negate else 'true'}-{f.pc}-z{f.zcase}-{where}"


def test_minimal_model_is_exact_under_both():
    """The shrunk fuzz model: log Z = log 0.65, q(c) a point mass on False, under VMP
    after any number of sweeps (it alternated: -inf after an odd number) and EP."""
    model = MINIMAL.build()
    for iterations in (1, 2, 19, 20):
        r = model.infer("vmp", iterations=iterations)
        assert abs(r.log_evidence - np.log(0.65)) < 1e-12
        assert _p(r["c"]) == 0.0
    r = model.infer("ep", iterations=20)
    assert abs(r.log_evidence - np.log(0.65)) < 1e-12
    assert _p(r["c"]) == 0.0


@pytest.mark.parametrize("fam", FAMILY, ids=_ids)
def test_ep_against_enumeration(fam: Family):
    log_z, marg = exact(fam)
    r = fam.build().infer("ep", iterations=30)
    assert abs(r.log_evidence - log_z) < 1e-9, (r.log_evidence, log_z)
    assert abs(_p(r["c"]) - marg["c"]) < 1e-9
    assert abs(_p(r["b"]) - marg["b"]) < 1e-9
    if "z" in marg:
        np.testing.assert_allclose(np.asarray(r["z"].probs, float), marg["z"], atol=1e-9)


@pytest.mark.parametrize("fam", FAMILY, ids=_ids)
def test_vmp_bound_is_the_elbo_of_its_posteriors(fam: Family):
    log_z, _ = exact(fam)
    r = fam.build().infer("vmp", iterations=50)
    qz = np.asarray(r["z"].probs, float) if fam.zcase is not None else None
    direct = elbo(fam, _p(r["c"]), _p(r["b"]), qz)
    assert np.isfinite(r.log_evidence)
    assert abs(r.log_evidence - direct) < 1e-9, (r.log_evidence, direct)
    assert r.log_evidence <= log_z + 1e-9


def test_unshrunk_fuzz_model_closed_form():
    """Fuzz seed 24's model as found: the impossible branch beside a Gaussian branch and
    unrelated statements.  log Z in closed form: Gamma(2; 3.5, 1) · P(v3 = False) ·
    N(2.5; 0, 4 · 3.5 + 2) (v7 = 2 v5 + noise in the branch that holds) · 0.1."""
    from scipy import stats

    with ff.Model("fuzz") as model:
        d2 = ff.Data("d2", 2.0)
        v1 = ff.Gamma("v1", 3.5, rate=1.0, observed=d2)
        v3 = ff.Bernoulli("v3", 0.35)
        v4 = ~v3
        with ff.Case(v3, 0):
            v5 = ff.Gaussian("v5", 0.0, variance=3.5)
            v6 = v5 + v5
            ff.Gaussian("v7", v6, precision=0.5, observed=2.5)
        with ff.Case(v3, 1):
            ff.constrain_true(v4)
        v8 = ff.Gaussian("v8", 0.5, precision=v1)
        _ = 0.0 - v8
        ff.Discrete("v12", ff.Data("d10", np.array([0.1, 0.1, 0.8])), observed=ff.Data("d11", 1))
    log_z = (stats.gamma.logpdf(2.0, 3.5) + np.log(0.65) + stats.norm.logpdf(2.5, 0.0, 4.0)
             + np.log(0.1))
    for algorithm in ("vmp", "ep"):
        for iterations in (19, 20):
            r = model.infer(algorithm, iterations=iterations)
            assert abs(r.log_evidence - log_z) < 1e-9, (algorithm, iterations, r.log_evidence)
            assert _p(r["v3"]) == 0.0
