"""The fixes of the two findings of test_regressions15 (sched16), each over a family of
random models against a reference written without factorflow.

* VMP over ``ff.sum`` with a latent common mean: the block update of the sum's elements
  (``factors.plate_sum``) reads q(x_i) / previous, and the schedule now computes q(x_i)
  after the elements' other messages and before that update
  (``dependency_info._refresh_before_block_updates``).  Generator: a hierarchy of
  common means (g, maybe h above it), N = 1-4 elements maybe observed one by one, a
  sum of them (maybe scaled per element, ``ff.sum(c * x, n)``), observed directly or
  through a latent child: a case of ``test_regressions17_sums``'s generator (one
  generator of VMP sum models), checked there (``vmp_sums_check``).  The reference is the
  list of Gaussian factors N(d·z + k; 0, 1/τ) over the latents z (``test_oracle_sums``):
  VMP's fixed point is q_i = N(exact mean_i, 1/J_ii) with the bound the ELBO of that q;
  on the way the bound never falls (coordinate ascent, 1e-12 relative) and no
  ConvergenceWarning is given.  With two sums of one plate each sum's own update took the other's coupling
  linearised at the old means and the bound could fall (2.2e-3, ``TWO_SUMS``); their
  elements now get one block update over both (``PlateSums``, test_regressions17_sums).
* EP: a variable drawn alike in every case of ``Switch(z4)`` and read in
  ``Case(z8, j)``: the first sweep read its exit message before any per-case posterior
  existed and Gate.EnterPartial raised on a uniform message; the initialization now
  brings the priors down to every message an EP operator needs proper
  (``dependency_info._prefer_priors_before_proper_reads``).  Generator: e5's mean a
  latent g1 or a constant, 2-4 cases of z4, 2-3 of z8 with e5 observed once or twice
  in one of them, 0-2 observations of g1 or e5 outside the gates.  Reference: per case
  of z8 the latents are Gaussian (conditioning), so the posterior is a two-part
  mixture; EP has one non-Gaussian site, and its log Z and moments are exact (1e-9).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import factorflow as ff
from tests.oracle.checks import oracle_settings
from tests.oracle.test_oracle_sums import DATA, MEANS, PRECISIONS, gaussian_reference
from tests.oracle.test_regressions17_sums import SumsModel, sums_models, vmp_sums_check

# ----- (a) VMP over sums with latent common means ---------------------------------------
# The model family is a case of test_regressions17_sums's generator (one generator of VMP
# sum models): no second plate variable z, N = 1-4, one sum (or one or two), each of one
# term, its observation's precision among PRECISIONS.
ONE_SUM = sums_models(count=(1, 1), size=4, other=False, sum_precisions=PRECISIONS)
ONE_OR_TWO_SUMS = sums_models(count=(1, 2), size=4, other=False, sum_precisions=PRECISIONS)


@oracle_settings(50)
@given(ONE_SUM)
def test_vmp_sums_with_latent_common_means_are_coordinate_ascent(spec):
    vmp_sums_check(spec)


@oracle_settings(20)
@given(ONE_OR_TWO_SUMS)
def test_vmp_two_sums_of_one_plate_reach_the_mean_field_fixed_point(spec):
    """With two sums of one plate: the fixed point, and a bound that never falls (one
    block update over both sums)."""
    vmp_sums_check(spec)


#: two sums of one plate, one through a latent child (a model of the generator above)
TWO_SUMS = SumsModel(4, None, (0.0, 4.0), 2.0, None, None, None,
                     (((("x", None),), None, (3.2, 2.0)), ((("x", None),), 1.0, (-0.4, 1.0))))


def test_vmp_two_sums_of_one_plate_bound_never_falls():
    vmp_sums_check(TWO_SUMS)


def test_vmp_two_sums_of_one_plate_both_refreshed():
    """Two sums of one variable (``ff.sum(x)`` and ``ff.sum(c * x)``): one block update
    of x over both (the unscaled sum's array carries it, the scaled one's scale read),
    reading q(x) computed after g's message to x (the block's refresh edges)."""
    spec = SumsModel(3, None, (-1.0, 0.5), 0.5, None, None, None,
                     (((("x", None),), None, (-2.1, 1.0)),
                      ((("x", (1.0, -0.5, 2.0)),), None, (1.6, 2.0))))
    vmp_sums_check(spec)
    source = spec.build().compile("vmp").source
    lines = source.split("# ---- iterations")[1].split("if iterations == 0")[0].splitlines()
    first = next(i for i, line in enumerate(lines) if "v_x__F = " in line)
    assert not any("PlateSum_array_average_logarithm(" in line for line in lines)
    reads = [(i, line.split("array=")[1].split(",")[0]) for i, line in enumerate(lines)
             if "PlateSums_array_average_logarithm(" in line]
    assert len(reads) == 1 and "scale1=" in lines[reads[0][0]]
    for at, q in reads:  # q(x), assigned in the pass after x's prior message
        assert max(i for i in range(at) if lines[i].strip().startswith(f"{q} = ")) > first


# ----- (b) EP: a Switch body's variable read in a Case gate ----------------------------
@dataclass(frozen=True)
class SwitchExitModel:
    top: tuple[float, float] | None  # g1 ~ N(mean, 1/precision), e5's mean; else a constant
    mean: float  # e5's mean where g1 is absent
    precision: float  # e5 ~ N(g1, 1/precision) alike in every case of z4
    switch: tuple[float, ...]  # z4's probabilities
    gate: tuple[float, ...]  # z8's probabilities
    case: int  # the case of z8 that reads e5
    inside: tuple[tuple[float, float], ...]  # y ~ N(e5, 1/τ) observed in Case(z8, case)
    outside: tuple[tuple[str, float, float], ...]  # (g1 or e5, value, τ) observed anywhere

    def code(self) -> str:
        lines = ["import numpy as np", "import factorflow as ff", "",
                 "with ff.Model('switch exit in a case') as model:"]
        mean = repr(self.mean)
        if self.top is not None:
            lines.append(f"    g1 = ff.Gaussian('g1', {self.top[0]!r}, "
                         f"precision={self.top[1]!r})")
            mean = "g1"
        lines.append(f"    z4 = ff.Discrete('z4', {list(self.switch)!r})")
        lines.append("    with ff.Switch(z4):")
        lines.append(f"        e5 = ff.Gaussian('e5', {mean}, precision={self.precision!r})")
        lines.append(f"    z8 = ff.Discrete('z8', {list(self.gate)!r})")
        lines.append(f"    with ff.Case(z8, {self.case}):")
        for i, (value, tau) in enumerate(self.inside):
            lines.append(f"        ff.Gaussian('y{i}', e5, precision={tau!r}, "
                         f"observed={value!r})")
        for i, (of, value, tau) in enumerate(self.outside):
            lines.append(f"    ff.Gaussian('w{i}', {of}, precision={tau!r}, "
                         f"observed={value!r})")
        return "\n".join(lines) + "\n"

    __str__ = code

    def build(self) -> ff.Model:
        namespace: dict = {}
        exec(compile(self.code(), "<switch exit model>", "exec"), namespace)
        return namespace["model"]

    def reference(self) -> tuple[float, dict[str, tuple[float, float]], np.ndarray]:
        """log Z, the posterior mean and variance of each latent Gaussian, and z8's
        posterior: per case of z8 the latents are Gaussian (conditioning on the
        observations that case sees, ``gaussian_reference``), so the posterior is a
        two-part mixture, whose moments EP matches exactly (one non-Gaussian site)."""
        names = (["g1"] if self.top else []) + ["e5"]
        at = {name: i for i, name in enumerate(names)}

        def unit(name: str) -> np.ndarray:
            d = np.zeros(len(names))
            d[at[name]] = 1.0
            return d

        base = []
        if self.top is not None:
            base.append((unit("g1"), -self.top[0], self.top[1]))
            base.append((unit("e5") - unit("g1"), 0.0, self.precision))
        else:
            base.append((unit("e5"), -self.mean, self.precision))
        base += [(unit(of), -value, tau) for of, value, tau in self.outside
                 if of in at]
        inside = [(unit("e5"), -value, tau) for value, tau in self.inside]
        parts = []
        for k, p in enumerate(self.gate):
            log_z, mean, cov, _ = gaussian_reference(base + (inside if k == self.case
                                                            else []), len(names))
            parts.append((np.log(p) + log_z, mean, cov))
        logs = np.array([w for w, _, _ in parts])
        log_z = float(np.logaddexp.reduce(logs))
        w = np.exp(logs - log_z)
        moments = {}
        for name, i in at.items():
            m = sum(wk * mk[i] for wk, (_, mk, _) in zip(w, parts, strict=True))
            second = sum(wk * (ck[i, i] + mk[i] ** 2)
                         for wk, (_, mk, ck) in zip(w, parts, strict=True))
            moments[name] = (float(m), float(second - m * m))
        return log_z, moments, w


@st.composite
def switch_exit_models(draw) -> SwitchExitModel:
    def probs(k: int) -> tuple[float, ...]:
        raw = [draw(st.integers(1, 9)) for _ in range(k)]
        return tuple(r / sum(raw) for r in raw)

    top = (draw(st.sampled_from(MEANS)), draw(st.sampled_from(PRECISIONS))) \
        if draw(st.integers(0, 9)) < 7 else None
    gate = probs(draw(st.integers(2, 3)))
    inside = tuple((draw(st.sampled_from(DATA)), draw(st.sampled_from(PRECISIONS)))
                   for _ in range(draw(st.integers(1, 2))))
    targets = ["e5"] + (["g1"] if top else [])
    outside = tuple((draw(st.sampled_from(targets)), draw(st.sampled_from(DATA)),
                     draw(st.sampled_from(PRECISIONS)))
                    for _ in range(draw(st.integers(0, 2))))
    return SwitchExitModel(top, draw(st.sampled_from(MEANS)), draw(st.sampled_from(PRECISIONS)),
                           probs(draw(st.integers(2, 4))), gate,
                           draw(st.integers(0, len(gate) - 1)), inside, outside)


def ep_switch_exit_check(spec: SwitchExitModel) -> None:
    log_z, moments, w = spec.reference()
    result = spec.build().infer("ep")
    assert abs(result.log_evidence - log_z) <= 1e-9 * max(1.0, abs(log_z)), f"log Z\n{spec}"
    for name, (mean, var) in moments.items():
        assert abs(float(result[name].mean) - mean) <= 1e-9 * max(1.0, abs(mean)), \
            f"E[{name}]\n{spec}"
        assert abs(float(result[name].variance) - var) <= 1e-9 * max(1.0, var), \
            f"Var[{name}]\n{spec}"
    assert np.allclose(result["z8"].probs, w, rtol=0, atol=1e-9), f"z8\n{spec}"
    assert np.allclose(result["z4"].probs, spec.switch, rtol=0, atol=1e-9), f"z4\n{spec}"


@oracle_settings(40)
@given(switch_exit_models())
def test_ep_switch_exit_read_in_a_case_gate(spec):
    ep_switch_exit_check(spec)
