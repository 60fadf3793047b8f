"""Printable model specs and the harness that runs them.

A ``ModelSpec`` is the source text of a model written with factorflow's Python API plus
what to do with it: ``str(spec)`` is a script that can be pasted into a file and run
as it is, and the harness runs exactly that text (``exec``, with the lines registered in
``linecache`` so that factorflow's provenance quotes them).  A fuzz finding is therefore
its own repro.

``run_valid`` classifies what happens to a model that should work, ``run_invalid`` what
happens to one that should be refused; both return one ``Outcome`` per algorithm.
"""

from __future__ import annotations

import linecache
import re
import signal
import threading
import traceback
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import factorflow as ff
from factorflow.distributions import PointMass
from factorflow.factors.registry import FACTORS
from factorflow.model.core import Indexed, Variable

ALGORITHMS = ("ep", "vmp")
HEADER = ("import numpy as np", "import factorflow as ff", "")

#: outcomes of a valid model that are not failures
VALID_OK = ("finite", "skipped", "unsupported", "improper", "refused")
#: outcome of an invalid model that is not a failure
INVALID_OK = "right"


# ----- literals ---------------------------------------------------------------------------
def lit(value: Any) -> str:
    """Python source that evaluates to ``value`` (a number, bool or NumPy array)."""
    a = np.asarray(value)
    if a.ndim == 0:
        return _item(a.item())
    if a.size == 0:
        dtype = {"b": ", dtype=bool", "i": ", dtype=int"}.get(a.dtype.kind, "")
        return f"np.zeros({a.shape!r}{dtype})"
    return f"np.array({_nested(a.tolist())})"


def _item(x: Any) -> str:
    if isinstance(x, float) and not np.isfinite(x):
        return f"float({str(x)!r})"
    return repr(x)


def _nested(x: Any) -> str:
    if isinstance(x, list):
        return "[" + ", ".join(_nested(v) for v in x) + "]"
    return _item(x)


# ----- specs ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelSpec:
    """A model as the source text that builds it, and how to run it.

    ``body`` builds ``model`` (it may define other things first: another model, a
    ``@ff.factor``); ``after`` runs between compiling and running (``compiled`` is the
    compiled model); ``data`` is the run's ``data=`` and ``options`` its other keyword
    arguments, as source text; ``iterations`` is written as it is given.  For an invalid
    spec, ``culprit`` lists texts one of which the error must contain and ``expected``
    the ``ff`` error class it must be an instance of.  A valid spec with a ``refusal``
    is one factorflow refuses by design (a construct its API documents as refused, which
    the generator wrote knowingly): it must raise ``expected`` naming every text in
    ``refusal``, under the algorithms in ``refused_by`` (every algorithm where empty:
    a construct VMP alone refuses, as two reads of one case outside its gate, runs under
    EP)."""

    kind: str
    body: tuple[str, ...]
    iterations: Any = 10
    data: str = ""
    after: tuple[str, ...] = ()
    options: str = ""
    valid: bool = True
    culprit: tuple[str, ...] = ()
    expected: str = "ModelError"
    note: str = ""
    refusal: tuple[str, ...] = ()
    refused_by: tuple[str, ...] = ()

    def refusal_for(self, algorithm: str) -> tuple[str, ...]:
        """The texts ``algorithm``'s ModelError must name; () where it is not refused."""
        return self.refusal if not self.refused_by or algorithm in self.refused_by else ()

    def source(self) -> str:
        """The lines that build the model (imports included)."""
        return "\n".join((*HEADER, *self.body)) + "\n"

    def run_lines(self, algorithm: str) -> tuple[str, ...]:
        data = f", data={self.data}" if self.data else ""
        options = f", {self.options}" if self.options else ""
        return (f"compiled = model.compile({algorithm!r})", *self.after,
                f"result = compiled.run(iterations={self.iterations}{data}{options})")

    def script(self, algorithm: str) -> str:
        """The whole repro for one algorithm: build, compile, run."""
        return self.source() + "\n".join(self.run_lines(algorithm)) + "\n"

    def __str__(self) -> str:
        head = f"# {'valid' if self.valid else 'invalid'} model: {self.kind}"
        if self.note:
            head += f" ({self.note})"
        if not self.valid:
            head += (f"\n# expected: ff.{self.expected} naming one of "
                     f"{', '.join(self.culprit)}")
        elif self.refusal:
            under = f" under {', '.join(self.refused_by)}" if self.refused_by else ""
            head += (f"\n# expected (refused by design{under}): ff.{self.expected} naming "
                     f"{' and '.join(self.refusal)}")
        runs = "\n".join(self.run_lines("ep"))
        return (f"{head}\n{self.source()}{runs}\n"
                f"# (the same with 'vmp' in place of 'ep')\n")

    def statement_texts(self) -> tuple[str, ...]:
        """The stripped source lines that write model statements (for naming checks)."""
        return tuple(s for s in (line.strip() for line in self.body)
                     if s and not s.startswith(("with ", "#", "@", "def ", "return ")))


# ----- outcomes -----------------------------------------------------------------------
@dataclass
class Outcome:
    """What one run of a spec under one algorithm gave.

    Valid specs: ``refused`` (a spec with a ``refusal`` raised it, naming it),
    ``finite``, ``skipped`` (finite, and EP warned with an
    ImproperMessageWarning naming the variable and the statement: it kept an old message
    where an update's input was improper, as documented), ``unsupported``
    (UnsupportedFactorError naming the statement), ``improper`` (ImproperMessageError
    naming the variable and statement) are fine; failures are ``nonfinite``, ``unsupported-unnamed``,
    ``unsupported-unexpected`` (every factor has its operators), ``improper-unnamed``,
    ``model-error`` (a ModelError for a valid model), ``crash`` (any other exception),
    ``warning`` (a warning other than ConvergenceWarning/ScheduleWarning), ``timeout``,
    ``unrefused`` (a spec with a ``refusal`` raised nothing, or not naming it).  Invalid specs: ``right``; failures ``unnamed`` (right class, culprit not named),
    ``wrong-class`` (another ModelError subclass), ``other`` (not a ModelError),
    ``none`` (nothing raised), ``timeout``."""

    kind: str
    stage: str = ""
    error: str = ""
    detail: str = ""
    trace: str = field(default="", repr=False)

    @property
    def failed(self) -> bool:
        return self.kind not in VALID_OK and self.kind != INVALID_OK

    def signature(self) -> str:
        """The failure with names and numbers blanked: equal for the same bug."""
        msg = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", self.detail)
        msg = re.sub(r"<fuzz>:\d+: [^)]*", "<stmt>", msg)
        msg = re.sub(r"\b\w*\d\w*\b", "N", msg)          # names and numbers
        msg = re.sub(r"\((N,? ?)+\)|array\(shape=[^)]*\)\)?", "(…)", msg)  # shapes
        msg = re.sub(r"\b(EP|VMP)\b", "ALG", msg)
        return f"{self.kind}/{self.stage}/{self.error}: {msg[:110]}"


class FuzzTimeout(Exception):
    """A spec ran past the harness's time limit."""


@contextmanager
def _time_limit(seconds: float | None) -> Iterator[None]:
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise FuzzTimeout(f"ran past {seconds} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


_COUNTER = iter(range(1, 1 << 62))


def build(spec: ModelSpec) -> dict[str, Any]:
    """Execute ``spec.source()``; returns its namespace (``model`` among it).  The text is
    registered in ``linecache`` under ``<fuzz>`` so provenance quotes its lines."""
    filename = "<fuzz>"
    text = spec.source()
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    namespace: dict[str, Any] = {"__name__": f"fuzz_model_{next(_COUNTER)}"}
    exec(compile(text, filename, "exec"), namespace)
    return namespace


def _stages(spec: ModelSpec, algorithm: str) -> Iterator[tuple[str, Any]]:
    """Build, compile and run ``spec``, yielding (stage, value) as each finishes."""
    namespace = build(spec)
    yield "build", namespace
    compiled = namespace["model"].compile(algorithm)
    namespace["compiled"] = compiled
    yield "compile", compiled
    for line in spec.after:
        exec(compile(line, "<fuzz-after>", "exec"), namespace)
    call = spec.run_lines(algorithm)[-1].removeprefix("result = ")
    yield "run", eval(call, namespace)


def _execute(spec: ModelSpec, algorithm: str, timeout: float | None
             ) -> tuple[str, Any, BaseException | None, list[warnings.WarningMessage]]:
    """(last stage reached, its value, the exception raised or None, warnings)."""
    done, value = "", None
    # every floating-point fault warns, except underflow: NumPy ignores it by default,
    # and a result rounded to 0 (exp of -800, logaddexp of two such) is the right one
    with warnings.catch_warnings(record=True) as caught, _time_limit(timeout), \
            np.errstate(all="warn", under="ignore"):
        warnings.simplefilter("always")
        try:
            for step in _stages(spec, algorithm):
                done, value = step
            return done, value, None, list(caught)
        except Exception as exc:  # noqa: BLE001 (classified by the caller)
            failed = {"": "build", "build": "compile", "compile": "run"}[done]
            return failed, value, exc, list(caught)


def names(message: str, text: str) -> bool:
    """Whether ``message`` contains ``text`` as a whole word (or at all, when ``text``
    does not begin and end with word characters)."""
    if re.fullmatch(r"\w(.*\w)?", text, re.S):
        return re.search(rf"(?<![\w.]){re.escape(text)}(?!\w)", message) is not None
    return text in message


def _names_statement(message: str, spec: ModelSpec) -> bool:
    return any(s in message for s in spec.statement_texts())


def _names_variable(message: str, model: Any) -> bool:
    return model is not None and any(names(message, n) for n in model.variables)


def predicted_unsupported(model: Any, algorithm: str) -> str | None:
    """The first statement whose factor lacks an operator ``algorithm`` needs (to a
    random argument, or for evidence), by the registry; None if every one has them."""
    for call in model.statements:
        factor = FACTORS.get(call.factor)
        if factor is None:
            return f"unknown factor {call.factor}"
        operands = dict(call.args)
        if call.output is not None:
            operands[factor.args[0].name] = call.output
        random = set()
        for arg, op in operands.items():
            var = op.base if isinstance(op, Indexed) else op
            if isinstance(var, Variable) and not var.is_observed:
                random.add(arg)
        if (call.factor in ("Plus", "Minus", "ScaleBy", "Product") and call.output is not None
                and random == {factor.args[0].name}):
            return f"{call.factor} of known values"   # a constant: refused by name
        for arg in random:
            op = factor.operators.get((algorithm, arg))
            if op is None or op.known & random:
                return f"{call.factor} -> {arg}"
        if algorithm not in factor.evidence and (not factor.deterministic or algorithm == "ep"):
            return f"{call.factor} evidence"
    return None


def _posterior_problem(name: str, posterior: Any, excluded: Any = None) -> str | None:
    """What is wrong with a posterior, or None.  ``excluded``: the mask of the elements
    that are not part of the model (``result.excluded``): they are uniform by design."""
    if isinstance(posterior, PointMass):
        value = np.asarray(posterior.value)
        if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
            return f"observed {name!r} has a non-finite value"
        return None
    if any(np.isnan(np.asarray(e, float)).any() for e in posterior.eta):
        return f"posterior of {name!r} has NaN natural parameters: {posterior!r}"
    proper = np.asarray(posterior.is_proper())
    if excluded is not None:
        proper = proper | np.asarray(excluded).reshape(
            np.shape(excluded) + (1,) * (proper.ndim - np.ndim(excluded)))
    if not np.all(proper):
        return f"posterior of {name!r} is improper: {posterior!r}"
    return None


_ALLOWED_WARNINGS = (ff.ConvergenceWarning, ff.ScheduleWarning)


def run_valid(spec: ModelSpec, algorithm: str, timeout: float | None = None) -> Outcome:
    """Run a valid spec under ``algorithm`` and classify the result (see ``Outcome``)."""
    stage, value, exc, caught = _execute(spec, algorithm, timeout)
    model = None
    try:
        model = build(spec)["model"]
    except Exception:  # noqa: BLE001 (the build failure is reported through exc)
        pass
    refusal = spec.refusal_for(algorithm)
    if refusal:
        if isinstance(exc, getattr(ff, spec.expected)) and all(
                names(str(exc), text) for text in refusal):
            return Outcome("refused", stage, type(exc).__name__, str(exc))
        # (an operator missing, or an improper message, may be met first: as below)
        if exc is None or isinstance(exc, ff.ModelError) and not isinstance(
                exc, ff.UnsupportedFactorError | ff.ImproperMessageError):
            what = "nothing raised" if exc is None else f"{type(exc).__name__}: {exc}"
            return Outcome("unrefused", stage, "", f"expected ff.{spec.expected} naming "
                           f"{' and '.join(refusal)}; {what}")
    if exc is None:
        bad = [w for w in caught if not issubclass(w.category, _ALLOWED_WARNINGS)]
        named = [w for w in bad if issubclass(w.category, ff.ImproperMessageWarning)
                 and _names_statement(str(w.message), spec)
                 and _names_variable(str(w.message), model)]
        bad = [w for w in bad if w not in named]
        if bad:
            w = bad[0]
            return Outcome("warning", "run", w.category.__name__,
                           f"{w.message} ({w.filename}:{w.lineno})")
        result = value
        for name, posterior in result.posteriors.items():
            problem = _posterior_problem(name, posterior, result.excluded.get(name))
            if problem:
                return Outcome("nonfinite", "run", "", problem)
        if not np.isfinite(result.log_evidence):
            return Outcome("nonfinite", "run", "", f"log evidence {result.log_evidence}")
        if named:
            return Outcome("skipped", "run", "ImproperMessageWarning", str(named[0].message))
        return Outcome("finite", "run")
    message = str(exc)
    err = type(exc).__name__
    tb = "".join(traceback.format_exception(exc))
    if isinstance(exc, FuzzTimeout):
        return Outcome("timeout", stage, err, message)
    if isinstance(exc, ff.UnsupportedFactorError):
        if not _names_statement(message, spec):
            return Outcome("unsupported-unnamed", stage, err, message, tb)
        if model is not None and predicted_unsupported(model, algorithm) is None:
            return Outcome("unsupported-unexpected", stage, err, message, tb)
        return Outcome("unsupported", stage, err, message)
    if isinstance(exc, ff.ImproperMessageError):
        if _names_statement(message, spec) and _names_variable(message, model):
            return Outcome("improper", stage, err, message)
        return Outcome("improper-unnamed", stage, err, message, tb)
    if isinstance(exc, ff.ModelError):
        return Outcome("model-error", stage, err, message, tb)
    return Outcome("crash", stage, err, message, tb)


def run_invalid(spec: ModelSpec, algorithm: str, timeout: float | None = None) -> Outcome:
    """Run an invalid spec under ``algorithm``: it must raise ``spec.expected`` (an
    ``ff.ModelError`` subclass) with a message naming one of ``spec.culprit``."""
    stage, value, exc, caught = _execute(spec, algorithm, timeout)
    if exc is None:
        return Outcome("none", stage, "", "nothing raised")
    message, err = str(exc), type(exc).__name__
    tb = "".join(traceback.format_exception(exc))
    if isinstance(exc, FuzzTimeout):
        return Outcome("timeout", stage, err, message)
    if not isinstance(exc, ff.ModelError):
        return Outcome("other", stage, err, message, tb)
    if not isinstance(exc, getattr(ff, spec.expected)):
        return Outcome("wrong-class", stage, err, message, tb)
    if not any(names(message, c) for c in spec.culprit):
        return Outcome("unnamed", stage, err, message, tb)
    stray = [w for w in caught if issubclass(w.category, (np.exceptions.ComplexWarning,))]
    if stray:
        return Outcome("other", stage, stray[0].category.__name__, str(stray[0].message))
    return Outcome("right", stage, err, message)


def run(spec: ModelSpec, algorithm: str, timeout: float | None = None) -> Outcome:
    return (run_valid if spec.valid else run_invalid)(spec, algorithm, timeout)


def failure_report(spec: ModelSpec, algorithm: str, outcome: Outcome) -> str:
    """A finding as text: the repro, what was expected and what happened."""
    expected = ("compiles and runs with finite posteriors and evidence (or "
                "UnsupportedFactorError/ImproperMessageError naming the statement)"
                if spec.valid else f"ff.{spec.expected} naming one of {spec.culprit}")
    if spec.valid and spec.refusal_for(algorithm):
        expected = f"ff.{spec.expected} naming {' and '.join(spec.refusal)} (by design)"
    return (f"{spec.script(algorithm)}\n# expected: {expected}\n"
            f"# actual ({algorithm}, {outcome.stage}): {outcome.kind}: {outcome.error}: "
            f"{outcome.detail}\n")
