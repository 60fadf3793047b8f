"""Run a spec through factorflow and compare with its exact reference, check by check.

A :class:`Check` holds one spec, one algorithm, the exact reference and the structural
traits; each method is one claim with the tolerance its caller states, and records a
:class:`Failure` (never raises) so that the long benchmark can count every kind.  In the
tests, ``verdict()`` raises with the failures and the spec printed as factorflow code.
"""

from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import HealthCheck, Phase, settings

from tests.oracle.build import build
from tests.oracle.exact import Reference, reference
from tests.oracle.spec import Spec
from tests.oracle.structure import Traits, analyse

KINDS = ("exception", "not finite", "wrong logZ", "wrong marginal", "bound above logZ",
         "bound decreased", "not converged")

#: sweeps without a move of any posterior statistic that end a run early: g1 in oracle
#: seed 9's model stood still for three sweeps (1-3) while a Switch's exit variable
#: passed its message on, and moved at the fourth (two quiet sweeps stopped it there)
QUIET = 4


def oracle_settings(max_examples: int) -> settings:
    """Hypothesis settings of every oracle test: derandomized (the same models on every
    run, no example database), no deadline, and the first failure reported alone."""
    return settings(derandomize=True, max_examples=max_examples, deadline=None,
                    database=None, report_multiple_bugs=False,
                    phases=tuple(set(Phase) - {Phase.explain}),
                    suppress_health_check=list(HealthCheck))


def is_vmp_refusal(error: Exception) -> bool:
    """Whether ``error`` is ``gate_order.check_joint_reads``'s refusal (VMP: an exit
    variable read beside its selector, or another exit of it, outside its gates)."""
    import factorflow as ff
    return isinstance(error, ff.ModelError) and str(error).startswith("VMP: ") \
        and "would not give a bound on the evidence" in str(error)


@dataclass
class Failure:
    kind: str  # one of KINDS
    algorithm: str
    what: str
    expected: Any = None
    got: Any = None

    @property
    def key(self) -> str:
        """What makes two failures the same kind in the reports."""
        return f"{self.algorithm}: {self.kind}" + (
            f" ({self.what.split(':')[0]})" if self.kind == "exception" else "")

    def __str__(self) -> str:
        text = f"[{self.algorithm}] {self.kind}: {self.what}"
        if self.expected is not None or self.got is not None:
            text += f"\n    expected {_fmt(self.expected)}\n    got      {_fmt(self.got)}"
        return text


def _fmt(v: Any) -> str:
    if isinstance(v, str):
        return v
    with np.printoptions(precision=10, suppress=False):
        return repr(np.asarray(v)) if np.ndim(v) else repr(float(v)) if v is not None \
            else "None"


@dataclass
class Run:
    result: Any
    history: list  # per iteration: {name: flat array of posterior statistics}
    warnings: list

    @property
    def log_evidence(self) -> float:
        return float(self.result.log_evidence)


def _statistics(dist: Any) -> np.ndarray:
    for attr in ("probs", "p"):
        if hasattr(dist, attr):
            return np.array(getattr(dist, attr), float).ravel()
    return np.concatenate([np.array(dist.mean, float).ravel(),
                           np.array(dist.variance, float).ravel()])


def _change(history: list) -> float:
    """The largest move of any posterior statistic in the last sweep (NaN: infinite)."""
    last, before = history[-1], history[-2]
    with np.errstate(invalid="ignore"):  # an unchanged inf (a uniform message) is no move
        change = max((float(np.max(np.where(last[k] == before[k], 0.0,
                                            np.abs(last[k] - before[k])), initial=0.0))
                      for k in last if k in before and last[k].shape == before[k].shape),
                     default=0.0)
    return change if change == change else np.inf


@dataclass
class Check:
    spec: Spec
    algorithm: str
    ref: Reference = field(init=False)
    traits: Traits = field(init=False)
    failures: list[Failure] = field(default_factory=list)
    #: VMP's refusal of an exit variable read beside its selector (or another exit of
    #: it) outside the selector's gates: no failure, the model is not run
    refused: str | None = None

    def __post_init__(self) -> None:
        self.ref = reference(self.spec)
        self.traits = analyse(self.spec)
        self._compiled = None

    # ----- running ---------------------------------------------------------------------
    def fail(self, kind: str, what: str, expected: Any = None, got: Any = None) -> None:
        self.failures.append(Failure(kind, self.algorithm, what, expected, got))

    def _compile(self):
        if self._compiled is None:
            model, self.labels = build(self.spec)
            self._compiled = model.compile(self.algorithm)
        return self._compiled

    def run(self, iterations: int, stop_at_fixed_point: bool = True,
            watched: bool = True) -> Run | None:
        """One run of at most ``iterations`` sweeps, stopped early (through
        ``on_iteration``) once no posterior statistic moves by more than 1e-13 in
        ``QUIET`` sweeps; an exception is a failure (None returned).  ``watched=False``:
        exactly ``iterations`` sweeps, unobserved (no hook, no history, no convergence
        test, no per-sweep bound: ``tolerance=None, trace=False``), for a run read only
        for its final log evidence."""
        history: list = []
        changes: list[float] = []  # the move of each sweep but the first (``_change``)

        def record(_iteration, posteriors):
            history.append({k: _statistics(v) for k, v in posteriors.items()})
            if stop_at_fixed_point and len(history) > 1:
                changes.append(_change(history))
            # several sweeps in a row without a move: a posterior may stand still while
            # messages still travel through a gate's own variables (which the hook does
            # not see; factorflow's own monitor does)
            return (stop_at_fixed_point and len(history) > QUIET
                    and all(c <= 1e-13 for c in changes[-QUIET:]))

        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                result = self._compile().run(iterations=iterations, on_iteration=record) \
                    if watched else self._compile().run(iterations=iterations,
                                                        tolerance=None, trace=False)
        except Exception as e:  # noqa: BLE001  (every exception is a finding)
            if self.algorithm == "vmp" and is_vmp_refusal(e):
                self.refused = str(e)  # documented (``transforms.gate_order``)
                return None
            self.fail("exception", f"{type(e).__name__}: {str(e)[:300]}")
            return None
        return Run(result, history, [w for w in caught])

    def bounds(self, iterations) -> tuple[list[float], Run] | tuple[None, None]:
        """The VMP bound after each number of iterations (one fresh, full run each), and
        the last run.  Every run but the last is read for its bound alone: exactly k
        sweeps, unwatched (``run(watched=False)``: a bound computed once, at the end, as
        a user's run computes it; the per-sweep bound and convergence test of factorflow's
        monitor cost about as much as the sweeps); the last is watched, stopped by
        factorflow's convergence test as a user's run is."""
        out = []
        for i, k in enumerate(iterations):
            run = self.run(k, stop_at_fixed_point=False, watched=i == len(iterations) - 1)
            if run is None:
                return None, None
            out.append(run.log_evidence)
        return out, run

    # ----- claims ----------------------------------------------------------------------
    def _posterior(self, run: Run, name: str):
        label = self.labels[name]
        return run.result.posteriors.get(label)

    def finite(self, run: Run) -> None:
        """The log evidence and every existing element's posterior are finite numbers."""
        if not np.isfinite(run.log_evidence):
            self.fail("not finite", "log evidence", self.ref.log_z, run.log_evidence)
        for name, m in self.ref.marginals.items():
            post = self._posterior(run, name)
            if post is None:
                continue
            for stat in m.values:
                got = np.asarray(getattr(post, stat), float)
                exists = np.broadcast_to(m.exists > 1e-9, np.shape(m.values[stat])[
                    :np.ndim(m.exists)])
                if got.shape[:exists.ndim] == exists.shape and \
                        not np.all(np.isfinite(got[exists])):
                    self.fail("not finite", f"{stat} of {name}", m.values[stat], got)

    def log_z(self, run: Run, atol: float) -> None:
        """|log evidence - log Z| <= atol."""
        if not abs(run.log_evidence - self.ref.log_z) <= atol:
            self.fail("wrong logZ", f"log evidence (tolerance {atol:g})", self.ref.log_z,
                      run.log_evidence)

    def marginals(self, run: Run, atol: float, rtol: float = 0.0, names=None,
                  statistics=("p", "probs", "mean", "variance")) -> None:
        """Every existing element's posterior statistics within atol + rtol * |exact|
        (``names``: which variables; default every latent one, derived included).  For a
        Dirichlet the variances are compared through their sum: the family has one number
        beside its mean, so no projection can match each variance."""
        for name, m in self.ref.marginals.items():
            if names is not None and name not in names:
                continue
            post = self._posterior(run, name)
            if post is None and not np.any(m.exists > 1e-9) \
                    and self.labels[name] in run.result.excluded:
                continue  # in no element part of the model: no posterior, as it says
            if post is None:
                self.fail("wrong marginal", f"no posterior for {name!r} "
                          f"({self.labels[name]!r})")
                continue
            exists = m.exists > 1e-9
            for stat, expected in m.values.items():
                if stat not in statistics:
                    continue
                got = np.asarray(getattr(post, stat), float)
                if m.kind == "simplex" and stat == "variance":
                    # a Dirichlet holds a mean and one more number: a projection matches
                    # the mean and the sum of the variances (Infer.NET's, and Minka's)
                    got, expected = got.sum(-1, keepdims=True), np.sum(expected, -1,
                                                                       keepdims=True)
                    stat = "sum of the variances"
                if got.shape != np.shape(expected):
                    self.fail("wrong marginal", f"{stat} of {name}: shape {got.shape}",
                              expected, got)
                    continue
                e = np.asarray(expected)
                mask = np.broadcast_to(np.asarray(exists).reshape(
                    np.shape(exists) + (1,) * (e.ndim - np.ndim(exists))), e.shape)
                bad = mask & ~(np.abs(got - e) <= atol + rtol * np.abs(e))
                if np.any(bad):
                    self.fail("wrong marginal", f"{stat} of {name} (tolerance {atol:g}"
                              + (f" + {rtol:g}|x|" if rtol else "") + ")",
                              np.where(mask, e, np.nan), got)

    def bound_below(self, run: Run, tol: float) -> None:
        """VMP: bound <= log Z + tol * max(1, |log Z|)."""
        if run.log_evidence > self.ref.log_z + tol * max(1.0, abs(self.ref.log_z)):
            self.fail("bound above logZ", f"bound - log Z = "
                      f"{run.log_evidence - self.ref.log_z:.3g} (tolerance {tol:g})",
                      f"<= {self.ref.log_z!r}", run.log_evidence)

    def monotone(self, bounds: list[float], iterations: list[int], tol: float) -> None:
        """VMP: bound(k') >= bound(k) - tol * max(1, |bound(k)|) for k < k'."""
        pairs = list(zip(iterations, bounds, strict=True))
        for (k0, b0), (k1, b1) in itertools.pairwise(pairs):
            if b1 < b0 - tol * max(1.0, abs(b0)):
                self.fail("bound decreased", f"from {k0} to {k1} iterations by {b0 - b1:.3g}"
                          f" (tolerance {tol:g})", b0, b1)
                return

    def converged_or_warned(self, run: Run, tol: float) -> bool:
        """The posteriors moved by at most tol in the last iteration, or a warning said
        that the run did not converge.  Returns whether it converged."""
        h = run.history
        if len(h) < 2:
            return True
        change = _change(h)
        if not change <= tol:
            if not any("Convergence" in type(w.message).__name__ or
                       "converge" in str(w.message) for w in run.warnings):
                self.fail("not converged", f"posteriors still move by {change:.3g} after "
                          f"{len(h)} iterations, and no warning says so")
            return False
        return True

    # ----- verdict ---------------------------------------------------------------------
    def report(self) -> str:
        lines = [f"{len(self.failures)} failed check(s) on this model:", "",
                 str(self.spec).rstrip(), ""]
        lines += [str(f) for f in self.failures]
        return "\n".join(lines)

    def verdict(self) -> None:
        assert not self.failures, self.report()


def _summary(stats: dict[str, Any]) -> str:
    with np.printoptions(precision=6, suppress=True):
        return ", ".join(f"{k}={np.round(np.asarray(v, float), 6)}" for k, v in stats.items())


def describe(spec: Spec, iterations: int = 200) -> str:
    """The exact answer and what EP and VMP return, side by side, for a report."""
    ref = reference(spec)
    lines = [f"exact:  log Z = {ref.log_z:.10g}"]
    for name, m in ref.marginals.items():
        if np.all(np.asarray(m.exists) <= 1e-9):
            continue
        lines.append(f"        {name}: {_summary(m.values)}")
    for algorithm in ("ep", "vmp"):
        check = Check(spec, algorithm)
        run = check.run(iterations, stop_at_fixed_point=False)
        if run is None:
            lines.append(f"{algorithm + ':':7s} {check.failures[0].what}")
            continue
        label = "bound" if algorithm == "vmp" else "log Z"
        lines.append(f"{algorithm + ':':7s} {label} = {run.log_evidence:.10g}")
        for name in ref.marginals:
            post = check._posterior(run, name)
            stats = {k: getattr(post, k) for k in ref.marginals[name].values
                     if post is not None and hasattr(post, k)}
            if stats:
                lines.append(f"        {name}: {_summary(stats)}")
    return "\n".join(lines)


__all__ = ["Check", "Failure", "KINDS", "Run", "describe"]
