"""Gates between a gate on a selector and the gate on its exit (gate17; fuzz seed 22).

The family: a latent selector ``z`` (Bernoulli, or Discrete with 2-3 values), an exit
variable ``e`` of the gates on ``z`` (drawn in each of its cases), and, inside a gate on
``e``, one or two gates on other conditions ``w`` around a gate on ``z`` whose branch
holds data (and sometimes a latent variable of its own with an observed child) — all in
a plate of 1-3 elements or none.  Under VMP a statement inside that gate on ``z`` reads
``e`` and ``z`` together outside a gate on ``z`` (``transforms/gate_order.py``): the gate
on ``z`` is moved outside the gate on ``e``, and the gates between go with it.

Where each ``w`` lives decides what can be compiled:

* ``top``: a latent drawn before the gates, or ``obs``: an observed one.  The move is
  made, under EP and VMP; EP is exact (the moved graph is a tree) and so is VMP where
  every latent variable's posterior is in its family (no latent ``w``): log Z and every
  marginal to 1e-9 against enumeration (``tests/oracle/exact.py``).  With a latent
  ``w``, VMP's bound is at most log Z and equal to the ELBO of its own posteriors
  (``test_oracle_nested_gates.direct_elbo``, q(e | z) per case) to 1e-9.
* ``inside``: a latent drawn inside the gate on ``e`` (fuzz seed 22's ``v9``).  No
  reordering of gates keeps it: outside the gate on ``e`` the gate on ``w`` would read
  it where it is not defined.  VMP refused by name (gate17); since exit19 the compiler
  writes the whole gate on ``e`` once per case of ``z`` (:func:`per_case_rewrite` by
  hand, ``gate_order._copies_per_case`` in the compiler) — ``w`` then one variable per
  case of ``z``, each existing only where its copy of ``e`` is in the case — and reports
  the user's ``w`` merged over the cases *given* ``e`` (weights q(z = k) q(e = · | z =
  k): ``Gate.ExitGiven``; ``Gate.Exit`` weighs by q(z = k) alone), under EP and VMP:
  EP exact (a tree), VMP a bound equal to the hand rewrite's, exact with one ``w`` and
  no latent ``u``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import factorflow as ff
from tests.oracle.build import build
from tests.oracle.checks import Check, Run, oracle_settings
from tests.oracle.spec import Const, Draw, Gate, Plate, Spec, declared
from tests.oracle.test_oracle_nested_gates import _per_case, _probs, _top_exits, direct_elbo

SETTINGS = oracle_settings(20)
UNITS = (0.2, 0.35, 0.5, 0.8, 0.95)


def _cases(kind: str, size: int) -> tuple:
    return (True, False) if kind == "if" else tuple(range(size))


@st.composite
def between_models(draw, where: str | None = None) -> Spec:
    """A model of the family (module docstring); ``where``: how the conditions between
    are defined ("top", "obs", "inside"), else drawn."""
    where = where or draw(st.sampled_from(("top", "obs", "inside")))
    plate = draw(st.sampled_from((None, 1, 2, 3)))
    n = plate or 1

    def observed(family: str = "Bernoulli", size: int = 2):
        values = [draw(st.booleans()) if family == "Bernoulli"
                  else draw(st.integers(0, size - 1)) for _ in range(n)]
        return tuple(values) if plate else values[0]

    def bernoulli_or_discrete(name: str, obs=None) -> tuple[Draw, str, int]:
        if draw(st.booleans()):
            return (Draw(name, "Bernoulli", (Const(draw(st.sampled_from(UNITS))),),
                         obs), "if", 2)
        k = draw(st.sampled_from((2, 3)))
        raw = [draw(st.integers(1, 9)) for _ in range(k)]
        probs = tuple(round(r / sum(raw), 6) for r in raw[:-1])
        probs = probs + (round(1.0 - sum(probs), 6),)
        return Draw(name, "Discrete", (Const(probs),), obs), "case", k

    zdraw, zkind, zsize = bernoulli_or_discrete("z")
    zcases = _cases(zkind, zsize)
    # e: drawn in every case of z, with the same family, its parameters per case
    _, ekind, esize = bernoulli_or_discrete("e")
    branches = []
    for _ in zcases:
        if ekind == "if":
            d = Draw("e", "Bernoulli", (Const(draw(st.sampled_from(UNITS))),))
        else:  # the same number of values in every case
            raw = [draw(st.integers(1, 9)) for _ in range(esize)]
            probs = tuple(round(r / sum(raw), 6) for r in raw[:-1])
            d = Draw("e", "Discrete", (Const(probs + (round(1.0 - sum(probs), 6),)),))
        branches.append(d)
    body: list = [zdraw, Gate(zkind, "z", tuple((k, (d,)) for k, d in zip(
        zcases, branches, strict=True)))]
    count = draw(st.integers(1, 2))
    ws = [f"w{i}" for i in range(count)]
    top_ws = []
    if where in ("top", "obs"):
        for w in ws:
            d = Draw(w, "Bernoulli", (Const(draw(st.sampled_from(UNITS))),),
                     observed() if where == "obs" else None)
            top_ws.append(d)
        body[1:1] = top_ws
    # innermost: data in a case of z, maybe a latent local with an observed child
    inner: list = []
    if draw(st.booleans()):
        inner.append(Draw("u", "Bernoulli", (Const(draw(st.sampled_from(UNITS))),)))
        inner.append(Gate("if", "u", ((draw(st.booleans()), (
            Draw("y", "Bernoulli", (Const(draw(st.sampled_from(UNITS))),),
                 observed()),)),)))
    else:
        inner.append(Draw("y", "Bernoulli", (Const(draw(st.sampled_from(UNITS))),),
                          observed()))
    stmt: tuple = (Gate(zkind, "z", ((draw(st.sampled_from(zcases)), tuple(inner)),)),)
    for w in reversed(ws):
        stmt = (Gate("if", w, ((draw(st.booleans()), stmt),)),)
    ecases = _cases(ekind, esize)
    inside: list = []
    if where == "inside":
        inside = [Draw(w, "Bernoulli", (Const(draw(st.sampled_from(UNITS))),)) for w in ws]
    body.append(Gate(ekind, "e", ((draw(st.sampled_from(ecases)), (*inside, *stmt)),)))
    if draw(st.booleans()):  # an observation of e outside, informing z's posterior
        body.append(Gate(ekind, "e", tuple((k, (Draw(f"o{i}", "Bernoulli", (Const(
            draw(st.sampled_from(UNITS))),), observed()),)) for i, k in enumerate(ecases))))
    if plate:
        body = [Plate("r", plate, tuple(body))]
    spec = Spec(f"between-{where}", tuple(body))
    # enumerable by the exact reference (4096 configurations at most)
    assume(np.prod([float(v.categories) ** len(v.slots()) for v in declared(spec).values()
                    if v.latent and v.domain in ("bool", "int")]) <= 4096)
    return spec


def _exact(c: Check, run, atol: float = 1e-9) -> None:
    c.log_z(run, atol=atol)
    c.marginals(run, atol=atol)


@SETTINGS
@given(spec=between_models("top") | between_models("obs"))
def test_ep_with_gates_between_moved_out_is_exact(spec):
    c = Check(spec, "ep")
    run = c.run(iterations=200)
    if run is not None:
        _exact(c, run)
    c.verdict()


@SETTINGS
@given(spec=between_models("top") | between_models("obs"))
def test_vmp_with_gates_between_moved_out(tmp_path_factory, spec):
    """Exact where no latent condition lies between; else a bound, the ELBO of its own
    posteriors (q(e | z) per case), never above log Z."""
    c = Check(spec, "vmp")
    path = tmp_path_factory.mktemp("vmp") / "run.ckpt"
    try:
        result = c._compile().run(iterations=300, progress=False, checkpoint=path)
    except ff.ModelError as e:
        raise AssertionError(f"{e}\n{spec}") from None
    latent_w = any(name.startswith("w") and info.latent
                   for name, info in declared(spec).items())
    if not latent_w:
        _exact(c, Run(result, [], []))
        c.verdict()
        return
    assert result.log_evidence <= c.ref.log_z + 1e-9 * max(1.0, abs(c.ref.log_z)), spec
    exits = _top_exits(spec)
    if exits is None:  # a latent u inside the gates: held per case, not modelled here
        return
    posteriors = {name: _probs(result.posteriors[label])
                  for name, label in c.labels.items() if label in result.posteriors
                  and declared(spec)[name].latent}
    elbo = direct_elbo(spec, posteriors, _per_case(c, exits, path))
    assert abs(result.log_evidence - elbo) <= 1e-9 * max(1.0, abs(elbo)), (
        f"VMP bound {result.log_evidence!r} against the ELBO of its posteriors {elbo!r}"
        f"\n{spec}")


@SETTINGS
@given(spec=between_models("inside"))
def test_vmp_writes_the_exit_gate_once_per_case_of_the_selector(spec):
    """VMP compiles the model as :func:`per_case_rewrite` writes it
    (``gate_order._copies_per_case``), the user's ``w`` reported by ``Gate.ExitGiven``:
    its bound is the hand rewrite's to 1e-9 and at most log Z; where one ``w`` and no
    latent ``u`` lie inside, exact: log Z and every marginal to 1e-9 against
    enumeration, the user's ``w`` being P(w | e = c)
    (:func:`test_the_per_case_rewrite_and_the_exit_given_the_exits_case`).  EP, on the
    same rewrite (a tree), exact: log Z and every marginal, w's too, to 1e-9."""
    c = Check(spec, "vmp")
    try:
        result = c._compile().run(iterations=300, progress=False)
    except ff.ModelError as e:
        raise AssertionError(f"{e}\n{spec}") from None
    tol = 1e-9 * max(1.0, abs(c.ref.log_z))
    assert result.log_evidence <= c.ref.log_z + tol, spec
    by_hand = build(per_case_rewrite(spec))[0].infer("vmp", iterations=300,
                                                     progress=False)
    assert abs(result.log_evidence - by_hand.log_evidence) <= tol, (
        f"{result.log_evidence!r} against the hand rewrite's {by_hand.log_evidence!r}"
        f"\n{spec}")
    inside = [d.name for s in (spec.body[0].body if isinstance(spec.body[0], Plate)
                               else spec.body) if isinstance(s, Gate) and s.cond == "e"
              and len(s.branches) == 1 for d in s.branches[0][1] if isinstance(d, Draw)]
    if len(inside) == 1 and "u" not in declared(spec):
        _exact(c, Run(result, [], []))
        c.verdict()
    ep = Check(spec, "ep")
    run = ep.run(iterations=200)
    if run is not None:
        _exact(ep, run)
    ep.verdict()


# ----- fuzz seed 22 ("if"): the per-case rewrite is exact ------------------------------
def fuzz22(between: bool = True, observed: bool = False, per_case: bool = False,
           datum: bool = False) -> ff.Model:
    """Fuzz seed 22's model, shrunk (the one builder of its regressions): v1 ~
    Bernoulli(0.95); v2 | v1 ~ Bernoulli(0.2 if v1 else 0.8), an exit of the gates on v1;
    under IfNot(v2): v9 ~ Bernoulli(0.5) and, in IfNot(v1) (inside IfNot(v9) when
    ``between``), v11 ~ Bernoulli(0.2), observed true when ``observed``.  ``per_case``
    (with ``between``): written as the compiler rewrites it under VMP, the gates on v1
    outside the gates on v2 and v9 one variable per case of v1, "v9_v1" and
    "v9_not_v1" (``gate_order._copies_per_case``).  ``datum``: d ~ Bernoulli(0.3),
    observed true, drawn beside v9 (a block the compiler does not copy per case)."""
    obs = {"observed": True} if observed else {}
    name = "fuzz22-rewritten" if per_case else "fuzz22-datum" if datum else "fuzz22"
    with ff.Model(name) as model:
        v1 = ff.Bernoulli("v1", 0.95)
        with ff.If(v1):
            v2 = ff.Bernoulli("v2", 0.2)
        with ff.IfNot(v1):
            v2 = ff.Bernoulli("v2", 0.8)
        if per_case:
            assert between
            with ff.If(v1), ff.IfNot(v2):
                ff.Bernoulli("v9_v1", 0.5)
            with ff.IfNot(v1), ff.IfNot(v2):
                v9 = ff.Bernoulli("v9_not_v1", 0.5)
                with ff.IfNot(v9):
                    ff.Bernoulli("v11", 0.2, **obs)
            return model
        with ff.IfNot(v2):
            v9 = ff.Bernoulli("v9", 0.5)
            if datum:
                ff.Bernoulli("d", 0.3, observed=True)
            if between:
                with ff.IfNot(v9), ff.IfNot(v1):
                    ff.Bernoulli("v11", 0.2, **obs)
            else:
                with ff.IfNot(v1):
                    ff.Bernoulli("v11", 0.2, **obs)
    return model


#: fuzz seed 22 with v11 observed true, by enumeration: P(data) = 1 − P(¬v1) P(¬v2 | ¬v1)
#: P(¬v9) 0.8; P(v1 | data); P(v9 | ¬v2, data) = Σ_k P(v1 = k | ¬v2, data) P(v9 | v1 = k,
#: ¬v2, data), the weights ∝ P(v1 = k) P(¬v2, data | v1 = k): 0.5026 (Gate.Exit's weights,
#: q(v1 = k) alone, would give 0.5154: a silent wrong answer)
SEED22_MISS = 0.05 * 0.2 * 0.5 * 0.8
SEED22_LOG_Z = float(np.log(1 - SEED22_MISS))
SEED22_V1 = 0.95 / (1 - SEED22_MISS)
SEED22_V9 = (0.95 * 0.8 * 0.5 + 0.05 * 0.2 * 0.5) / (0.95 * 0.8 + 0.05 * 0.2 * (0.5 + 0.5 * 0.2))


@pytest.mark.parametrize("algorithm", ["ep", "vmp"])
def test_the_refusals_rewrite_of_fuzz_seed_22_is_exact(algorithm):
    """By enumeration: P(v11 observed) = 1 − P(¬v1) P(¬v2 | ¬v1) P(¬v9) 0.8; the posterior
    of v9 in the case ¬v1 given ¬v2 and of v1."""
    result = fuzz22(observed=True, per_case=True).infer(algorithm, iterations=100,
                                                        progress=False)
    assert abs(result.log_evidence - SEED22_LOG_Z) < 1e-12
    assert abs(float(result["v1"].p) - SEED22_V1) < 1e-12
    assert abs(float(result["v9_not_v1"].p) - 0.5 / (0.5 + 0.5 * 0.2)) < 1e-12
    # the user's v9: its copies weighted by P(v1 = k) P(¬v2, data | v1 = k)
    both = np.array([0.95 * 0.8, 0.05 * 0.2 * (0.5 + 0.5 * 0.2)])
    copies = np.array([float(result["v9_v1"].p), float(result["v9_not_v1"].p)])
    assert abs(both @ copies / both.sum() - SEED22_V9) < 1e-12
    q1 = float(result["v1"].p)
    assert abs((q1 * copies[0] + (1 - q1) * copies[1]) - SEED22_V9) > 0.01


# ----- gate18: the exit a lifted refusal needs, derived and checked here ---------------
def test_a_variable_defined_in_a_gate_on_an_exit_is_reported_given_the_case():
    """What factorflow reports today for ``v9`` drawn inside ``ff.IfNot(v2)``, v2 an exit
    of the gates on v1: its posterior given the case, P(v9 | v2 = F, data) (Infer.NET's
    answer for a variable defined in a gate), under EP and VMP alike (by enumeration).
    The per-case rewrite must report the user's ``v9`` so too."""
    with ff.Model("in-a-gate-on-an-exit") as model:
        v1 = ff.Bernoulli("v1", 0.95)
        with ff.If(v1):
            v2 = ff.Bernoulli("v2", 0.2)
        with ff.IfNot(v1):
            v2 = ff.Bernoulli("v2", 0.8)
        with ff.IfNot(v2):
            v9 = ff.Bernoulli("v9", 0.5)
            with ff.IfNot(v9):
                ff.Bernoulli("y", 0.3, observed=True)
    # P(v2 = F) = 0.95·0.8 + 0.05·0.2; given v2 = F, v9 ~ 0.5 [v9] + 0.5·0.3 [¬v9]
    f = 0.95 * 0.8 + 0.05 * 0.2
    z = (1 - f) + f * (0.5 + 0.5 * 0.3)
    for algorithm in ("ep", "vmp"):
        result = model.infer(algorithm, iterations=50, progress=False)
        assert abs(result.log_evidence - np.log(z)) < 1e-12, algorithm
        assert abs(float(result["v9"].p) - 0.5 / (0.5 + 0.5 * 0.3)) < 1e-12, algorithm


def per_case_rewrite(spec: Spec) -> Spec:
    """The rewrite the VMP refusal of a ``between_models("inside")`` model asks for: the
    gate on ``e`` (holding the conditions ``w`` it draws) written once per case k of
    ``z``, inside the gate on z's case k, each ``w`` renamed ``w_k`` there (one variable
    per case, existing where z = k and e's case hold), the gate on z inside reduced to
    its body in its own case and dropped in the others (with the gates left empty)."""
    plate = spec.body[0] if isinstance(spec.body[0], Plate) else None
    body = plate.body if plate else spec.body
    zgate = next(s for s in body if isinstance(s, Gate) and s.cond == "z")
    egate = next(s for s in body if isinstance(s, Gate) and s.cond == "e"
                 and len(s.branches) == 1)
    ws = [d.name for d in egate.branches[0][1] if isinstance(d, Draw)]

    def sub(stmts: tuple, i: int, k) -> tuple:
        out: list = []
        for s in stmts:
            if isinstance(s, Draw):
                out.append(Draw(f"{s.name}_{i}", s.family, s.args, s.observed)
                           if s.name in ws else s)
            elif isinstance(s, Gate) and s.cond == "z":
                out += [x for case, b in s.branches if case == k for x in sub(b, i, k)]
            elif isinstance(s, Gate):
                branches = tuple((case, sub(b, i, k)) for case, b in s.branches)
                branches = tuple((case, b) for case, b in branches if b)
                if branches:
                    out.append(Gate(s.kind, f"{s.cond}_{i}" if s.cond in ws else s.cond,
                                    branches))
        return tuple(out)

    copies = Gate(zgate.kind, "z", tuple(
        (k, (Gate(egate.kind, "e", ((egate.branches[0][0], sub(egate.branches[0][1], i, k)),)),))
        for i, (k, _) in enumerate(zgate.branches)))
    new = tuple(copies if s is egate else s for s in body)
    if plate:
        new = (Plate(plate.range, plate.size, new),)
    return Spec(spec.family + "-per-case", new)


def _case_index(kind: str, k) -> int:
    """The position of case ``k`` on a gate's case axis (a boolean's case 0 is True)."""
    return (0 if k else 1) if kind == "if" else int(k)


def _value_index(k) -> int:
    """The position of value ``k`` in a posterior's probabilities (a Bernoulli's
    [1 − p, p]: True last)."""
    return int(k)


@SETTINGS
@given(spec=between_models("inside"))
def test_the_per_case_rewrite_and_the_exit_given_the_exits_case(tmp_path_factory, spec):
    """The refusal's per-case rewrite (:func:`per_case_rewrite`) of a model with a
    condition ``w`` drawn inside the gate on ``e`` is the same model (the exact log Z's
    agree); EP on it is exact (log Z and every marginal to 1e-9), and so is VMP where
    one ``w`` and no latent ``u`` lie inside (else its bound is at most log Z).

    The user's ``w`` is then the mixture of the copies ``w_k`` weighted by
    q(z = k) · q(e = c | z = k) (c the case of the gate on e), normalised over k:
    P(w | e = c) = Σ_k P(z = k | e = c) P(w | z = k, e = c), the posterior given its
    gate's case that factorflow reports for a variable drawn inside a gate
    (:func:`test_a_variable_defined_in_a_gate_on_an_exit_is_reported_given_the_case`),
    with P(z = k | e = c) ∝ P(z = k) P(e = c | z = k).  Computed from the run's own
    posteriors (q(e | z = k) the gate transform's per-case clone of e), it matches the
    enumeration of the original model to 1e-9 wherever the run is exact: the weights a
    new exit factor must use (``Gate.Exit`` weighs by q(z = k) alone)."""
    rewritten = per_case_rewrite(spec)
    assume(np.prod([float(v.categories) ** len(v.slots()) for v in declared(
        rewritten).values() if v.latent and v.domain in ("bool", "int")]) <= 4096)
    zgate = next(s for s in (spec.body[0].body if isinstance(spec.body[0], Plate)
                             else spec.body) if isinstance(s, Gate) and s.cond == "z")
    egate = next(s for s in (spec.body[0].body if isinstance(spec.body[0], Plate)
                             else spec.body) if isinstance(s, Gate) and s.cond == "e")
    ecase = egate.branches[0][0]
    ws = [d.name for d in egate.branches[0][1] if isinstance(d, Draw)]
    inner_u = "u" in declared(spec)
    for algorithm in ("ep", "vmp"):
        c = Check(rewritten, algorithm)
        original = Check(spec, algorithm).ref
        assert abs(c.ref.log_z - original.log_z) <= 1e-9 * max(1.0, abs(original.log_z))
        path = tmp_path_factory.mktemp(algorithm) / "run.ckpt"
        try:
            result = c._compile().run(iterations=300, progress=False, checkpoint=path)
        except ff.ModelError as e:
            raise AssertionError(f"{algorithm}: {e}\n{rewritten}") from None
        exact = algorithm == "ep" or (len(ws) == 1 and not inner_u)
        if not exact:
            assert result.log_evidence <= original.log_z + 1e-9 * max(
                1.0, abs(original.log_z)), rewritten
            continue
        _exact(c, Run(result, [], []))
        c.verdict()
        qz = _probs(result.posteriors[c.labels["z"]])
        qe = _per_case(c, {"e": zgate}, path)["e"][1]  # [..., case of z, value of e]
        cases = [k for k, _ in zgate.branches]
        weight = np.stack([qz[..., _value_index(k)]
                           * qe[..., _case_index(zgate.kind, k), _value_index(ecase)]
                           for k in cases], axis=-1)
        weight = weight / weight.sum(-1, keepdims=True)
        for w in ws:
            copies = np.stack([np.asarray(result[c.labels[f"{w}_{i}"]].p, float)
                               for i in range(len(cases))], axis=-1)
            mixture = np.sum(weight * copies, axis=-1)
            expected = np.asarray(original.marginals[w].values["p"], float)
            assert np.allclose(mixture, expected, rtol=0, atol=1e-9), (
                f"{algorithm}: {w} {mixture} against P({w} | e = {ecase}) {expected}"
                f"\n{spec}")
