"""Compiled models: generated source, bound to operators, run on data."""

from __future__ import annotations

import math
import os
import sys
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

import factorflow.distributions as dist
from factorflow.codegen.python import Generated, generate
from factorflow.errors import ConvergenceWarning, DataError, ImproperMessageError, ModelError
from factorflow.factors.common import collapsed
from factorflow.factors.registry import FACTORS
from factorflow.ir.nodes import walk
from factorflow.model.checks import is_lazy, run_data
from factorflow.model.core import Model
from factorflow.model.factories import check_support, event_shape
from factorflow.model.gates import excluded_elements
from factorflow.model.missing import shown
from factorflow.runtime.checkpoint import fingerprint, open_checkpoint
from factorflow.runtime.kernels import NAMESPACE, SKIPPED
from factorflow.runtime.result import Result
from factorflow.transforms.fuse_switch import FUSED_BACKENDS, FuseSwitchOptions
from factorflow.transforms.gates import GateOptions
from factorflow.transforms.local_loop import LocalOptions
from factorflow.transforms.pipeline import Compilation, compile_program

if TYPE_CHECKING:
    from factorflow.ir.nodes import Program
    from factorflow.transforms.scheduling import Schedule


def _resolve(kind: str, key: Any) -> Any:
    if kind == "family":
        return getattr(dist, key)
    if kind == "operator":
        factor, algorithm, target = key
        return FACTORS[factor].operators[(algorithm, target)].fn
    if kind == "evidence":
        factor, algorithm = key
        return FACTORS[factor].evidence[algorithm]
    raise KeyError(kind)


def _check_damping(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating) or not (
            0.0 <= float(value) < 1.0):
        raise ModelError(f"{what} must be a number in [0, 1) (the share of the old message "
                         f"kept), got {value!r}.")
    return float(value)


#: the default convergence tolerance; without ``iterations`` a run goes on until it
#: converges, at most MAX_ITERATIONS sweeps, or until its changes have stopped shrinking
#: for STALL_SWEEPS sweeps (Infer.NET runs a fixed 50 sweeps, converged or not: EP on
#: TrueSkill at 10⁵ games needs about 3,000 to meet the default tolerance, 700 to come
#: within 1e-3 of its fixed point)
DEFAULT_TOLERANCE = 1e-10
MAX_ITERATIONS = 10_000
STALL_SWEEPS = 100
#: seconds a run goes before its progress bar appears (shorter runs show none)
PROGRESS_DELAY = 1.0


def progress_bar(enabled: bool, iterations: int | None, algorithm: str) -> Any:
    """A ``tqdm`` bar over ``iterations`` sweeps (a counter for a run until converged,
    None) on standard error, shown once the run has gone PROGRESS_DELAY seconds; None
    when ``enabled`` is False or standard error is not a terminal (a log file or a pipe
    gets no bar)."""
    stream = sys.stderr
    if not enabled or stream is None or not getattr(stream, "isatty", lambda: False)():
        return None
    from tqdm import tqdm  # imported only when a bar is shown

    return tqdm(total=iterations, desc=f"{algorithm.upper()}", unit="sweep", file=stream,
                delay=PROGRESS_DELAY, leave=False, dynamic_ncols=True)


@dataclass(repr=False)
class CompiledModel:
    """A model compiled for one algorithm (``model.compile``): ``source`` is the generated
    program, ``schedule`` its schedule explained, ``run`` runs it (as often as wanted,
    with new ``ff.Data`` values each time, without compiling again).

    >>> with ff.Model() as model:
    ...     m = ff.Gaussian("m", 0.0, variance=1.0)
    ...     y = ff.Gaussian("y", m, variance=1.0, observed=ff.Data("y_obs"))
    >>> compiled = model.compile("ep")
    >>> import textwrap
    >>> print(textwrap.fill(repr(compiled), 80))
    CompiledModel('model', EP: 2 variables, 8 statements; print .source for the
    program, .schedule for its schedule)
    >>> [compiled.run(data={"y_obs": v})["m"].mean for v in (2.0, 4.0)]  # N(y/2, 1/2)
    [array(1.), array(2.)]
    """

    model: Model
    algorithm: str
    compilation: Compilation
    generated: Generated
    compile_seconds: float
    user_initialized: frozenset[str]
    #: the gate transform's "alternative method": whole arrays enter gates (seed 001)
    enter_whole_arrays: bool = False
    #: the local loop's options (``compile_model``'s ``local=``), None without one
    local: LocalOptions | None = None
    #: ``compile_model``'s ``fuse_switch=`` (what a pickle compiles again with)
    fuse_switch: bool = True

    #: where the program runs (``factorflow.runtime.backends``)
    backend = "numpy"

    @classmethod
    def _generate_source(cls, program: Any) -> Generated:
        """The program's source for this class's backend."""
        return generate(program, frozenset(NAMESPACE))

    @property
    def source(self) -> str:
        """The generated Python program (readable: one array operation per statement over
        a whole plate, each commented with the model line it comes from).

        >>> with ff.Model() as model:
        ...     m = ff.Gaussian("m", 0.0, variance=1.0)
        ...     y = ff.Gaussian("y", m, variance=1.0, observed=2.0)
        >>> source = model.compile("ep").source
        >>> print(source.splitlines()[0])
        # Generated by factorflow: EP message passing for model model.
        >>> print([line.strip() for line in source.splitlines() if "mean_average" in line][0])
        v_m__use0__B = damp(v_m__use0__B, Gaussian_mean_average_conditional(sample=v_y, ...
        """
        return self.generated.source

    def __repr__(self) -> str:
        """One line: the model, the algorithm, its size; the program is ``.source``."""
        statements = sum(1 for _ in walk(self.compilation.final.body))
        n = len(self.model.variables)
        return (f"CompiledModel({self.model.name!r}, {self.algorithm.upper()}: {n} "
                f"variable{'' if n == 1 else 's'}, {statements} statements; "
                "print .source for the program, .schedule for its schedule)")

    @property
    def program(self) -> Program:
        """The final statement IR (an ``ir.Program``) that ``source`` was generated from;
        ``print`` shows it as text, one statement a line.

        >>> with ff.Model() as model:
        ...     m = ff.Gaussian("m", 0.0, variance=1.0)
        ...     y = ff.Gaussian("y", m, variance=1.0, observed=2.0)
        >>> print(str(model.compile("vmp").program).splitlines()[0])
        program model (vmp)
        """
        return self.compilation.final

    def fixed_point_updates(self) -> list[str]:
        """The program's VMP operators that are fixed-point iterations, not coordinate
        ascent (``Operator.ascent``): with them the bound may fall on the way.  Empty for
        a conjugate model, where every VMP update is coordinate ascent:

        >>> with ff.Model() as model:
        ...     prec = ff.Gamma("prec", 1.0, rate=1.0)
        ...     y = ff.Gaussian("y", 0.0, precision=prec, observed=2.0)
        >>> model.compile("vmp").fixed_point_updates()
        []
        """
        names = set()
        for stmt, _ in walk(self.compilation.final.body):
            key = stmt.param("operator")
            if key is not None and not FACTORS[key[0]].operators[(key[1], key[2])].ascent:
                names.add(FACTORS[key[0]].operators[(key[1], key[2])].qualname)
        return sorted(names)

    @property
    def schedule(self) -> Schedule:
        """The schedule: ``print(compiled.schedule)`` lists each update and why it is
        there; ``compiled.schedule.to_graphviz()`` draws the dependency graph (a
        ``factorflow.viz.Diagram``: DOT text that renders to SVG/PNG).

        >>> with ff.Model() as model:
        ...     m = ff.Gaussian("m", 0.0, variance=1.0)
        ...     y = ff.Gaussian("y", m, variance=1.0, observed=2.0)
        >>> print(model.compile("ep").schedule)
        prefix:
          v_m__F         read by v_m__marginal  # message to m from its definition: ...
          v_m__use0__B   read by v_m__marginal  # message to m from its use 0: Gaussian.mean (EP)
          v_m__marginal  output  # posterior of m (EP)
          v_m__use0__F   output  # message from m to its use 0 (EP)
          v_m__B         output  # message from m to its definition (EP)
        """
        schedule = self.compilation.schedule
        if schedule is None:  # every compile runs the scheduling stage; a guard for types
            raise ModelError(f"{self.model.name!r} was compiled without a schedule.")
        return schedule

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickle (and deepcopy) as the model, the algorithm and the initialised names;
        loading compiles again, which gives the same program and the same numbers."""
        return _recompile, (self.model, self.algorithm, tuple(sorted(self.user_initialized)),
                            self.enter_whole_arrays, self.local,
                            self.fuse_switch)

    def save_module(self, path: Any, data: dict[str, Any] | None = None,
                    init: dict[str, Any] | None = None) -> Any:
        """Write this program as a standalone Python module at ``path`` (a .py file),
        with the model's data beside it (same name, .npz).  The module's
        ``run(iterations=50, init=None)`` returns ``(posteriors, log_evidence)``, the
        numbers ``run`` gives.  ``data`` and ``init`` are as for ``run``; they are saved
        with the module.  Returns the module's path (see ``runtime.standalone``).

        >>> import importlib.util, os, tempfile
        >>> with ff.Model() as model:
        ...     m = ff.Gaussian("m", 0.0, variance=1.0)
        ...     y = ff.Gaussian("y", m, variance=1.0, observed=2.0)
        >>> path = model.compile("ep").save_module(os.path.join(tempfile.mkdtemp(), "m.py"))
        >>> spec = importlib.util.spec_from_file_location("m", path)
        >>> module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
        >>> posteriors, log_evidence = module.run()
        >>> posteriors["m"], log_evidence == model.infer("ep").log_evidence
        (Gaussian(mean=1.0, variance=0.5), True)
        """
        from factorflow.runtime.standalone import write_module
        return write_module(self, path, data, init)

    def __post_init__(self) -> None:
        namespace = dict(NAMESPACE)
        for ident, (kind, key) in self.generated.symbols.items():
            namespace[ident] = _resolve(kind, key)
        code = compile(self.source, f"<factorflow {self.algorithm}: {self.model.name}>", "exec")
        exec(code, namespace)
        self._infer = namespace["infer"]

    def _watched_names(self) -> tuple[dict[str, str], dict[str, str]]:
        """For the gate transform's own posteriors, which the monitor watches beside the
        user's: identifier -> what people read (``means in the gate on z[n]``), and
        identifier -> the model variable it copies (the name ``damping=`` takes)."""
        decls = {d.name: d for d in self.compilation.final.decls if d.role == "random"}
        labels = {name: d.label for name, d in decls.items() if d.label != name}
        owners = {}
        for name, d in decls.items():
            of = next((d.attr(a) for a in ("clone_of", "exit_of", "local_of")
                       if d.attr(a) is not None), None)
            if isinstance(of, str) and of in decls:
                owners[name] = decls[of].label
        return labels, owners

    def _watching(self) -> tuple[list[str], dict[str, str], dict[str, str]]:
        """What the monitor of every run is told of the program (``fixed_point_updates``
        and ``_watched_names``), read from it once: the program does not change."""
        known = self.__dict__.get("_watching_known")
        if known is None:
            known = self.__dict__["_watching_known"] = (self.fixed_point_updates(),
                                                        *self._watched_names())
        return known

    def _damping(self, damping: Any) -> dict[str | None, float] | None:
        """``damping`` as the generated code reads it: label -> d, None -> default."""
        if damping is None:
            return None
        if self.algorithm != "ep":
            raise ModelError(f"damping= applies to EP (VMP is coordinate ascent and needs "
                             f"none); this model is compiled for {self.algorithm.upper()}.")
        if not isinstance(damping, dict):
            return {None: _check_damping(damping, "damping")}
        out: dict[str | None, float] = {}
        for name, d in damping.items():
            label = self.model.variable(name).name
            out[label] = _check_damping(d, f"damping[{name!r}]")
        return out

    def _excluded(self, values: dict[str, Any]) -> dict[str, np.ndarray]:
        """``result.excluded`` for a run on ``values`` (by IR name, as ``_data`` gives
        them): the masks of the elements outside the model (see ``Result``)."""
        b = self.compilation.bindings
        assert b is not None
        return excluded_elements(self.model, {v.name: values[ident] for ident, v
                                              in b.variables.items() if v.is_observed})

    def _data(self, data: dict[str, Any] | None) -> dict[str, Any]:
        data = dict(data or {})
        b = self.compilation.bindings
        assert b is not None
        unknown = set(data) - set(b.data)
        if unknown:
            raise ModelError(f"data given for {sorted(unknown)}, but the model declares "
                             f"ff.Data only for {sorted(b.data) or 'nothing'}.")
        values = dict(b.values)
        current = run_data(self.model, data)  # given, or each Data's value now; checked
        for name, ident in b.data.items():
            values[ident] = current[name]
        program = self.compilation.final
        for d in program.decls:
            if d.role not in ("observed", "constant"):
                continue
            source = d.attr("data")
            if source is not None:
                value = values.get(b.data[source])
                if value is None:
                    raise DataError(f"no value for ff.Data({source!r}); pass "
                                    f"data={{{source!r}: ...}}.")
                values[d.name] = value
            if d.role == "observed":
                var = b.variables[d.name]
                arr = check_support(values[d.name], d.domain or "real",
                                    f"observed value of {var.name!r}", var.size)
                expected = var.shape + event_shape(d.domain or "real", var.size)
                if arr.shape != expected:
                    raise DataError(f"observed value of {var.name!r} has shape {arr.shape}, "
                                    f"but its plates need {expected}.")
                # categories as integers: an observed z indexes arrays (x[z] in a Switch)
                values[d.name] = arr.astype(int) if d.domain == "int" else arr
            elif values.get(d.name) is not None:
                for domain in sorted(b.data_domains.get(d.name, ())):
                    check_support(values[d.name], domain, f"ff.Data({d.label!r})")
                if is_lazy(values[d.name]):  # (checked on its workers: ``run_data``)
                    continue
                arr = np.asarray(values[d.name])
                if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
                    raise DataError(f"{d.label}: the value contains NaN or inf.")
        return values

    def _checkpoint(self, checkpoint: Any, every: Any, resume: Any, monitor: _Monitor,
                    iterations: int, values: dict[str, Any], sizes: dict[str, int],
                    init: dict[str, Any], damping: Any, tolerance: float | None
                    ) -> tuple[Any, dict[str, Any] | None]:
        """The loop's hook and the saved state to resume from (see ``run``): the monitor
        and None without ``checkpoint``."""
        if checkpoint is None:
            if every is not None or resume is not None:
                raise ModelError("every= and resume= apply to checkpoints; pass "
                                 "checkpoint=path too.")
            return monitor, None
        saver = open_checkpoint(checkpoint, every, resume, monitor, iterations,
                                fingerprint(self, values, sizes, init, damping, tolerance))
        return saver, saver.resume

    def run(self, iterations: int | None = None, data: dict[str, Any] | None = None,
            init: dict[str, Any] | None = None, on_iteration: Any = None, *,
            tolerance: float | None = DEFAULT_TOLERANCE,
            damping: float | dict[str, float] | None = None,
            checkpoint: str | os.PathLike[str] | None = None, every: int | None = None,
            resume: bool | None = None, progress: bool = True,
            trace: bool | None = None) -> Result:
        """Run message passing until it converges, at most ``iterations`` sweeps; returns
        the posteriors.  Without ``iterations`` the run goes on until it converges (at
        most MAX_ITERATIONS = 10,000 sweeps), and stops early, unconverged, when its
        changes have not shrunk for STALL_SWEEPS = 100 sweeps (an oscillating or stuck
        run).

        Converged means: the largest change of any posterior's natural parameters in
        the last sweep (relative: |Δη| / (1 + |η|)), and (VMP) of the bound (relative
        to 1 + |bound|), divided by 1 − r where r is its rate of decrease over the last
        two sweeps (an estimate of the distance to the fixed point), is at most
        ``tolerance`` in two sweeps in a row (None: run all ``iterations``); changes of
        at most ``tolerance`` that no longer shrink (rounding) count as converged.
        A run that ends unconverged warns (``ff.ConvergenceWarning``, naming the
        variable that moved most), and so does a VMP bound that falls.
        ``on_iteration(iteration, posteriors)`` is called after every sweep; returning
        True stops the run.  ``damping`` (EP): a number d in [0, 1) for every variable,
        or ``{name: d}`` per variable; each new message to a variable is mixed with the
        old one, η = d·η_old + (1 − d)·η_new — the fixed points are the same, and
        oscillating EP settles.  ``result.iterations`` is the number
        of sweeps run, ``result.trace`` the log evidence (EP) or bound (VMP) after each.

        ``trace``: whether the log evidence (EP) or bound (VMP) is computed after every
        sweep for ``result.trace`` (it costs about a sweep).  None, the default: under VMP
        yes (the bound's change is part of the convergence test, and a bound that falls
        warns), under EP no (nothing but the trace reads it; ``result.trace`` is then
        empty).  ``trace=False`` under VMP judges convergence by the posteriors alone.
        ``result.log_evidence`` is computed once, after the last sweep, either way.

        Checkpoints: with ``checkpoint=path`` the whole state of the run (every message
        and posterior, the sweeps done, the convergence monitor's state) is written to
        ``path`` after every ``every``-th sweep (1 by default), after the last sweep and
        when the run stops, atomically (a temporary file beside it, fsync, rename), so
        ``path`` always holds a complete checkpoint.  If ``path`` already holds one, the
        run resumes from it (``resume=None``, the default; ``resume=True`` requires it,
        ``resume=False`` starts afresh and overwrites it): run again with the same
        arguments after a crash or a kill, and the result is bit-identical to a run never
        interrupted — posteriors, log evidence, trace, ``iterations`` and ``converged``.
        A finished run's checkpoint gives its result again at once, or continues it with
        a larger ``iterations``.  A checkpoint of another run (algorithm, model, plate
        sizes, data, init, damping or tolerance differ) raises ``ff.CheckpointError``
        naming what differs; see ``factorflow.runtime.checkpoint``.

        Progress: a run that goes on for more than a second shows a ``tqdm`` bar on
        standard error — the sweep, the log evidence (EP) or bound (VMP), and the largest
        relative change with the variable it moved — when standard error is a terminal;
        ``progress=False`` turns it off.  ``result.plot_convergence()`` draws the trace.

        >>> with ff.Model() as model:
        ...     mean = ff.Gaussian("mean", 0.0, variance=100.0)
        ...     prec = ff.Gamma("prec", 1.0, rate=1.0)
        ...     with ff.Plate(ff.Range("n", 2)):
        ...         x = ff.Gaussian("x", mean, precision=prec, observed=[5.0, 7.0])
        >>> result = model.compile("vmp").run(iterations=200)
        >>> result.converged, result.iterations < 200, len(result.trace) == result.iterations
        (True, True, True)
        >>> round(float(result["mean"].mean), 6), round(result.log_evidence, 6)
        (5.960321, -5.986982)
        """
        arguments = dict(iterations=iterations, data=data, init=init,
                         on_iteration=on_iteration, tolerance=tolerance, checkpoint=checkpoint,
                         every=every, resume=resume, progress=progress, trace=trace)
        until_converged = iterations is None
        if until_converged:
            iterations = MAX_ITERATIONS
        if isinstance(iterations, bool) or not isinstance(iterations, int | np.integer) \
                or iterations < 0:
            raise ModelError(f"iterations must be a non-negative integer, got {iterations!r}.")
        if tolerance is not None and not (isinstance(tolerance, int | float)
                                          and np.isfinite(tolerance) and tolerance >= 0):
            raise ModelError(f"tolerance must be a non-negative number or None, got "
                             f"{tolerance!r}.")
        if not isinstance(progress, bool | np.bool_):
            raise ModelError(f"progress must be True or False, got {progress!r}.")
        if trace is None:
            trace = self.algorithm == "vmp"
        if not isinstance(trace, bool | np.bool_):
            raise ModelError(f"trace must be True, False or None, got {trace!r}.")
        if init is not None and not isinstance(init, Mapping):
            raise ModelError(
                f"init must be a dict from variable names to initial posteriors (say "
                f"init={{'mu': ff.Gaussian(0.0, variance=1.0)}}), got a "
                f"{type(init).__name__}; the names of the variables to initialise go to "
                "model.compile(algorithm, init=[names]).")
        init = dict(self.model.initial) | dict(init or {})
        given = {self.model.variable(k).name for k in init}
        missing = given - set(self.user_initialized)
        if missing:
            raise ModelError(f"init names {sorted(missing)}, which this compiled model was "
                             "not compiled to use; call model.infer(..., init=...) or "
                             "model.compile(algorithm, init=[names]).")
        absent = sorted(set(self.user_initialized) - given)
        if absent:
            raise ModelError(
                f"this model was compiled with init={sorted(self.user_initialized)}, so "
                f"run() needs an initial posterior for {absent}: pass "
                f"init={{{absent[0]!r}: <a distribution of its family>}}, or compile "
                "without init= to start from the model's own initialisation.")
        values = self._data(data)
        sizes = {ident: size for ident, size in self.compilation.final.ranges}
        damp = self._damping(damping)
        monitor = _Monitor(self.algorithm, tolerance, on_iteration, bool(trace),
                           stall=until_converged and tolerance is not None)
        fixed_point, labels, owners = self._watching()
        monitor.fixed_point, monitor.labels, monitor.owners = (list(fixed_point), dict(labels),
                                                               dict(owners))
        hook, saved = self._checkpoint(checkpoint, every, resume, monitor, int(iterations),
                                       values, sizes, init, damp, tolerance)
        start = time.perf_counter()
        monitor.bar = progress_bar(progress, None if until_converged else int(iterations),
                                   self.algorithm)
        skipped, failed = SKIPPED.set({}), None
        try:
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                posteriors, log_evidence = self._infer(values, sizes, init, int(iterations),
                                                       hook, damp, saved)
        except ImproperMessageError as e:
            if self.algorithm != "ep" or damp is not None or "iteration" not in str(e):
                raise
            if checkpoint is not None:  # a checkpoint belongs to one damping: no restart
                raise ImproperMessageError(
                    f"{e} Under EP, sites whose updates overshoot (a mixture, a loopy "
                    "model) can make it improper in a sweep: try damping=0.5, or VMP."
                    ) from None
            failed = e
        finally:
            monitor.skipped = SKIPPED.get() or {}
            SKIPPED.reset(skipped)
            if monitor.bar is not None:
                monitor.bar.close()
        if failed is not None:  # EP's own failure mode: overshooting sites (a mixture, a
            # loopy model).  Damping keeps the fixed points and shortens the steps.
            warnings.warn(f"{self.model.name}: undamped EP failed ({failed}); running it "
                          f"again with damping={RESTART_DAMPING}.", ConvergenceWarning,
                          stacklevel=2)
            try:
                return self.run(**arguments, damping=RESTART_DAMPING)
            except ImproperMessageError as e:
                raise ImproperMessageError(
                    f"{e} (EP damped with {RESTART_DAMPING}, after the undamped run "
                    "failed too): EP has no proper fixed point within reach here; use "
                    "VMP, or more informative priors.") from None
        seconds = time.perf_counter() - start
        if iterations == 0:
            _check_initialised(posteriors)
        if not np.isfinite(log_evidence) and not np.isneginf(log_evidence):
            bad = next((k for k, v in posteriors.items() if not np.all(np.isfinite(
                np.concatenate([np.ravel(e) for e in v.eta])))), None)
            var = self.model.variables.get(bad) if bad else None
            where = f" ({var.provenance})" if var is not None and var.provenance else ""
            raise ImproperMessageError(
                f"{self.model.name}: the log evidence is {log_evidence}"
                + (f"; the posterior of {bad!r}{where} is not finite" if bad else "")
                + "; some message became improper.")
        b = self.compilation.bindings
        assert b is not None
        for ident, var in b.variables.items():
            if var.is_observed:  # (NaN where missing: model.missing)
                posteriors[var.name] = dist.PointMass(shown(var, values[ident]))  # (a Dask
                # array stays where it is: the point mass holds it lazily)
        converged = monitor.finish(self.model.name, int(iterations), float(log_evidence))
        excluded = self._excluded(values)
        for name, mask in excluded.items():  # not in the model: no posterior, not uniform
            if mask.all():
                posteriors.pop(name, None)
        dims = {name: tuple(r.name for r in self.model.variables[name].plates)
                for name in posteriors if name in self.model.variables}
        return Result(posteriors, float(log_evidence), self.algorithm, monitor.count,
                      seconds, converged=converged, trace=tuple(monitor.trace), dims=dims,
                      excluded=excluded)


def _step(new: np.ndarray, old: np.ndarray) -> np.ndarray:
    """new − old, 0 where both are the same infinity (a point mass has not moved)."""
    with np.errstate(invalid="ignore"):
        step = np.subtract(new, old)
    if np.isnan(step).any():
        step = np.where(new == old, 0.0, step)
    return step


def _relative(step: np.ndarray, old: np.ndarray) -> float:
    """max |step| / (1 + |old|) (0 for no elements; NaN if any is NaN)."""
    rel = np.abs(step)
    with np.errstate(invalid="ignore"):
        rel /= 1.0 + np.abs(old)
    return float(np.max(rel, initial=0.0))


#: the damping EP runs again with when its undamped run went improper
RESTART_DAMPING = 0.5

#: relative changes this small (a thousand units of rounding) are rounding, not progress
ROUNDING = 1e3 * float(np.finfo(float).eps)


def watched(algorithm: str, posteriors: dict[str, Any],
            internal: dict[str, Any] | None) -> dict[str, Any]:
    """What the convergence test watches after a sweep: the user's ``posteriors`` (and,
    by the monitors, the VMP bound) -- under EP also the gate transform's own variables
    (``internal``: clones, per-case values, locals).  The same rule in every monitor
    (``_Monitor``; JAX's ``jax_loop``, on device; Dask's ``dask_monitor``), so that the
    sweep a run stops at does not depend on how the program was compiled (a fused
    Switch has no clones) nor on the backend.

    Why EP keeps the internal ones: an EP message is a quotient of the messages before
    it, and a schedule may pass a message through a gate's per-case values over several
    sweeps before any user posterior moves: in a Switch nested in a Switch (identical
    cases, y[n] ~ N(N(N(g1, 1), 1), 1)) the user's posteriors stand still in sweeps 6-7
    while the per-case values move by 0.3, and watching the user's alone stops there with
    g1 at its prior N(2, 1), not the exact N(1.35, 0.625)
    (``tests/runtime/test_convergence_user.py``).  Why VMP does not: every internal
    posterior under VMP is recomputed in each sweep from the user's posteriors (a clone's
    is its variable's posterior entered into the gate; a per-case value's, the clone's
    and the exit's backward message, both of user posteriors; a local is a copy), so it
    lags them by at most one sweep and cannot move once they stood still for the two
    sweeps in a row the test asks (checked on random gated models of the oracle, same
    file)."""
    if algorithm == "vmp" or not internal:
        return posteriors
    return posteriors | internal


class _Monitor:
    """The generated loop's hook: after each sweep, the change of every posterior's
    natural parameters, the log evidence or bound, and the user's callback (the loop's
    ``state`` is for ``runtime.checkpoint.Checkpointer``, which wraps the monitor)."""

    #: the attributes that change from sweep to sweep: what a checkpoint saves
    STATE = ("previous", "trace", "count", "change", "moved", "distance", "steps", "turns",
             "fell", "settled", "least", "stalled")

    def __init__(self, algorithm: str, tolerance: float | None, user: Any,
                 trace: bool = True, stall: bool = False) -> None:
        self.algorithm, self.tolerance, self.user = algorithm, tolerance, user
        self.tracing = trace  # compute the log evidence / bound after every sweep
        self.stall = stall  # stop when the changes stop shrinking (the default run)
        self.least: tuple[float, int] = (np.inf, 0)  # the smallest change and its sweep
        self.stalled = False
        # ``previous`` and ``steps`` (properties): as dicts, or flat over ``_layout``
        self._previous: dict[str, tuple[np.ndarray, ...]] | None = {}
        self._flat: np.ndarray | None = None
        self._steps: dict[str, np.ndarray] | None = {}
        self._steps_flat: np.ndarray | None = None
        #: whether ``previous`` / ``steps`` handed out views of ``_flat`` / ``_steps_flat``
        #: (such an array is not written again: see ``_spare``)
        self._flat_lent = self._steps_lent = False
        self._plan_for([])  # (``_layout``, ``_plan``: where each posterior lies in them)
        self.trace: list[float] = []
        self.count = 0
        self.change, self.moved, self.distance = np.inf, "", np.inf
        self.settled = 0  # sweeps in a row that met the tolerance
        self.turns: dict[str, list[bool]] = {}  # whether each step reversed the one before
        self.fell: tuple[int, float] | None = None
        self.bar: Any = None  # the progress bar (see progress_bar), or None
        #: the updates that are not coordinate ascent (a fall of the bound is then theirs)
        self.fixed_point: list[str] = []
        #: internal identifier -> readable label, and -> the model variable it copies
        self.labels: dict[str, str] = {}
        self.owners: dict[str, str] = {}
        #: EP updates skipped where their inputs were improper: what -> (sweep, elements)
        self.skipped: dict[str, tuple[int, int]] = {}

    def __call__(self, iteration: int, posteriors: dict[str, Any], evidence: Any,
                 state: Any = None, internal: dict[str, Any] | None = None) -> bool:
        """After sweep ``iteration``: ``posteriors`` the user's, ``internal`` those of the
        gate transform's own variables (watched too under EP only: ``watched``); True
        stops the run."""
        self.count = iteration + 1
        change, moved = 0.0, ""
        # the changes are read by the convergence test and the progress bar: without
        # either (tolerance=None, no bar) they are not computed (a pass over every
        # posterior, as long as a sweep of a mixture's (N, K) responsibilities)
        seen = watched(self.algorithm, posteriors, internal) if (
            self.tolerance is not None or self.bar is not None) else {}
        if seen:
            change, moved = self._changes(seen)
        if evidence is not None and self.tracing:
            value = float(evidence())
            if self.trace and self.algorithm == "vmp":
                step = value - self.trace[-1]
                change = max(change, abs(step) / (1.0 + abs(value)))
                if step < -1e-9 * max(1.0, abs(value)) and self.fell is None:
                    self.fell = (self.count, step)
            self.trace.append(value)
        # the distance to the fixed point, from the last change and the contraction
        # rate r of the last two: change · 1/(1 − r) (geometric convergence)
        rate = change / self.change if 0 < self.change < np.inf else 1.0
        self.distance = change / (1.0 - rate) if rate < 1.0 else (0.0 if change == 0
                                                                   else np.inf)
        self.change, self.moved = change, moved
        if change < 0.999 * self.least[0] or not math.isfinite(self.least[0]):
            self.least = (float(change), self.count)
        # the default run stops when the changes have not shrunk for STALL_SWEEPS sweeps
        # (a geometric approach at any rate below 0.99999 keeps shrinking them)
        self.stalled = self.stall and self.count - self.least[1] >= STALL_SWEEPS
        if self.bar is not None:
            self.show()
        stop = bool(self.user(iteration, posteriors)) if self.user is not None else False
        # a change within ROUNDING is floating-point noise (matrix inversions cycle
        # there): no distance to a fixed point can be read from it
        settled = self.tolerance is not None and (self.distance <= self.tolerance
                                                  or change <= ROUNDING)
        self.settled = self.settled + 1 if settled else 0
        if self.stalled and change <= (self.tolerance or 0.0):  # the noise floor, below
            self.settled, self.stalled = 2, False  # the tolerance: nothing more to gain
        # two sweeps in a row: a posterior may stand still for one sweep while a message
        # it has not yet been recomputed from moved
        return stop or self.settled >= 2 or self.stalled

    # ----- the changes of the posteriors, flat ----------------------------------------
    # ``previous`` (each posterior's natural parameters after the last sweep) and
    # ``steps`` (each one's last change) are what a checkpoint saves; between sweeps
    # they are kept as one flat array each over ``_layout`` (the posteriors' names and
    # the shapes of their distinct elements), and made into dicts only when read.
    @property
    def previous(self) -> dict[str, tuple[np.ndarray, ...]]:
        if self._previous is None:
            self._previous = {name: tuple(self._flat[a: b].reshape(shape)
                                          for (a, b), shape in zip(cuts, shapes, strict=True))
                              for name, shapes, cuts, _ in self._plan}
            self._flat_lent = True
        return self._previous

    @previous.setter
    def previous(self, value: dict[str, tuple[np.ndarray, ...]]) -> None:
        self._previous, self._flat = value, None

    @property
    def steps(self) -> dict[str, np.ndarray]:
        if self._steps is None:
            self._steps = {name: self._steps_flat[span[0]: span[1]]
                           for name, _, _, span in self._plan}
            self._steps_lent = True
        return self._steps

    @steps.setter
    def steps(self, value: dict[str, np.ndarray]) -> None:
        self._steps, self._steps_flat = value, None

    def _changes(self, watched: dict[str, Any]) -> tuple[float, str]:
        """The largest relative change |Δη| / (1 + |η_old|) of a natural parameter of the
        ``watched`` posteriors since the last sweep, and the posterior that made it (the
        first of the largest; NaN counts as the largest, infinity where a posterior is
        new); updates ``previous``, ``steps`` and ``turns``.

        Every posterior's distinct elements (a broadcast view, such as a gate's clone
        of K components over N data, is cut along its stride-0 axes) are copied into one
        flat array, and the steps, the relative changes and each step's dot product with
        the last (``turns``) are a few passes over it, once per sweep (``_flat_changes``).
        Where the posteriors' shapes are not those of the last sweep, or ``previous`` was
        set (a resumed checkpoint), each posterior is compared on its own (``_change``):
        the same numbers, element by element (the dot products' signs up to rounding)."""
        parts, layout = [], []
        for name, post in watched.items():
            shapes = []
            for e in post.eta:
                e = np.asarray(e, dtype=float)
                if 0 in e.strides:  # (``collapsed`` cuts only stride-0 axes)
                    e = collapsed(e)
                parts.append(e.ravel())
                shapes.append(e.shape)
            layout.append((name, tuple(shapes)))
        old = self._flat
        if old is not None and layout == self._layout:
            flat = self._spare.pop("flat", None)
            if flat is None:
                flat = np.empty(old.size)
            if len(parts) > 1:
                np.concatenate(parts, out=flat)
            elif parts:
                np.copyto(flat, parts[0])
            change, moved = self._flat_changes(flat)
            if not self._flat_lent:  # (written again two sweeps on)
                self._spare["flat"] = old
        else:  # (the dicts read from the flat arrays as laid out before)
            flat = np.concatenate(parts) if len(parts) > 1 else np.array(parts[0]) \
                if parts else np.zeros(0)
            self._previous, self._steps = self.previous, self.steps
            self._flat = self._steps_flat = None
            self._plan_for(layout)
            change, moved = 0.0, ""
            steps_now = {}
            for name, shapes, cuts, _ in self._plan:
                eta = tuple(flat[a: b].reshape(shape)
                            for (a, b), shape in zip(cuts, shapes, strict=True))
                d = self._change(name, eta, steps_now)
                if d is None:  # a posterior not seen before
                    change, moved = np.inf, name
                elif not d <= change:
                    change, moved = d, name
            self._steps = {name: step for name, step in self.steps.items()
                           if name not in steps_now} | steps_now
            self._steps_flat = None
        self._flat, self._previous, self._flat_lent = flat, None, False
        return change, moved

    def _scratch(self, role: str, size: int) -> np.ndarray:
        """The monitor's own array of ``size`` floats for ``role``, kept from sweep to
        sweep: a new array of a few hundred kB each sweep costs as much in page faults
        as the passes over it (TrueSkill's 40,000 natural parameters: 3x)."""
        out = self._spare.get(role)
        if out is None or out.size != size:
            out = self._spare[role] = np.empty(size)
        return out

    def _flat_changes(self, flat: np.ndarray) -> tuple[float, str]:
        """``_changes`` where ``flat`` is laid out as the last sweep's ``_flat``: the
        steps, each posterior's largest relative change (one ``np.maximum.reduceat``
        over the posteriors' spans: the maximum of its natural parameters' maxima) and
        the turns, in a few passes over the flat arrays and no Python loop over the
        elements.  Where a posterior's change is NaN (a step of the same infinity twice,
        or a NaN parameter), ``_nan_peaks`` applies the per-posterior rules to it."""
        old = self._flat
        assert old is not None
        steps = self._spare.pop("steps", None)
        if steps is None:
            steps = np.empty(flat.size)
        rel, scale = self._scratch("rel", flat.size), self._scratch("scale", flat.size)
        with np.errstate(invalid="ignore", over="ignore"):
            np.subtract(flat, old, out=steps)
            np.abs(steps, out=rel)
            np.abs(old, out=scale)
            scale += 1.0
            rel /= scale
            # (NaN propagates through the maxima: a NaN step shows in its posterior's)
            peaks = np.maximum.reduceat(rel, self._starts_by_posterior) \
                if self._filled.size else rel[:0]
            tops = peaks.tolist()
            changes = self._nan_peaks(flat, old, steps, rel, peaks) \
                if any(p != p for p in tops) else None
            dots = None if self._steps_flat is None else self._dots(np.multiply(
                steps, self._steps_flat, out=self._scratch("products", flat.size)))
        if dots is not None:  # each step's dot product with the last
            for name, turned in zip(self._names, (dots < 0).tolist(), strict=True):
                self.turns.setdefault(name, []).append(turned)
        elif self._steps is not None:  # the steps as a checkpoint gave them
            for name, _, _, (a, b) in self._plan:
                self._turn(name, steps[a: b])
        if self._steps_flat is not None and not self._steps_lent:
            self._spare["steps"] = self._steps_flat  # (written again two sweeps on)
        self._steps_flat, self._steps, self._steps_lent = steps, None, False
        if changes is not None:
            change, moved = 0.0, ""
            for name, d in zip(self._names, changes, strict=True):
                if not d <= change:  # NaN counts as the largest change
                    change, moved = d, name
            return change, moved
        change = max(tops, default=0.0)
        if not change > 0.0:
            return 0.0, ""
        return change, self._names[self._filled_list[tops.index(change)]]  # (the first)

    def _nan_peaks(self, flat: np.ndarray, old: np.ndarray, steps: np.ndarray,
                   rel: np.ndarray, peaks: np.ndarray) -> list[float]:
        """Each posterior's change (in ``_plan``'s order) where a peak is NaN, as the
        per-posterior computation (``_change``) gives it: in a posterior whose steps
        are NaN, 0 where both are the same infinity (a point mass has not moved;
        ``steps`` and ``rel`` are mended in place), and its change the first of its
        natural parameters' largest that is not below the others (``max``: NaN, where
        it comes first, counts as the largest)."""
        out = [0.0] * len(self._plan)
        for j, v in zip(self._filled.tolist(), peaks.tolist(), strict=True):
            out[j] = v
        for j in np.flatnonzero(np.isnan(peaks)).tolist():
            i = int(self._filled[j])
            _, _, cuts, (a, b) = self._plan[i]
            if np.isnan(steps[a: b]).any():  # the same infinity twice: not moved
                steps[a: b] = np.where(flat[a: b] == old[a: b], 0.0, steps[a: b])
                rel[a: b] = np.abs(steps[a: b]) / (1.0 + np.abs(old[a: b]))
            out[i] = max((float(np.max(rel[c: d])) if d > c else 0.0 for c, d in cuts),
                         default=0.0)
        return out

    def _plan_for(self, layout: list[tuple[str, tuple[tuple[int, ...], ...]]]) -> None:
        """Where each posterior and natural parameter lies in the flat arrays (lists
        made into arrays once: a run's monitor is planned afresh, before each run)."""
        self._layout: list[tuple[str, tuple[tuple[int, ...], ...]]] = layout
        #: arrays of this layout's size that nothing else reads, written again in the
        #: next sweep: "flat" and "steps" (the ones before the last, where not lent
        #: out), the scratch arrays (``_scratch``)
        self._spare: dict[str, np.ndarray] = {}
        self._names = [name for name, _ in layout]
        self._sizes = [math.prod(shape) for _, shapes in layout for shape in shapes]
        full, starts, at = [], [], 0
        for k, size in enumerate(self._sizes):
            if size:
                full.append(k)
                starts.append(at)
            at += size
        self._full = np.asarray(full, dtype=np.intp)
        self._starts = np.asarray(starts, dtype=np.intp)  # (maximum.reduceat: no empties)
        self._plan: list[tuple[str, tuple, tuple, tuple[int, int]]] = []
        at = 0
        for name, shapes in layout:
            cuts = []
            for shape in shapes:
                cuts.append((at, at + math.prod(shape)))
                at = cuts[-1][1]
            self._plan.append((name, shapes, tuple(cuts),
                               (cuts[0][0] if cuts else at, at)))
        #: the posteriors with elements, and where each starts (their spans tile ``flat``)
        self._filled_list = [i for i, (*_, (a, b)) in enumerate(self._plan) if b > a]
        self._filled = np.asarray(self._filled_list, dtype=np.intp)
        self._starts_by_posterior = np.asarray([self._plan[i][3][0] for i in self._filled_list],
                                               dtype=np.intp)

    def _dots(self, products: np.ndarray) -> np.ndarray:
        """Each posterior's sum of ``products`` (0 for none; NaN terms count as 0)."""
        if len(self._filled_list) == len(self._plan):
            out = np.add.reduceat(products, self._starts_by_posterior) if self._plan \
                else np.zeros(0)
        else:
            out = np.zeros(len(self._plan))
            if self._filled_list:
                out[self._filled] = np.add.reduceat(products, self._starts_by_posterior)
        if np.isnan(out).any():
            for i in np.flatnonzero(np.isnan(out)).tolist():
                a, b = self._plan[i][3]
                out[i] = np.nansum(products[a: b])
        return out

    def _turn(self, name: str, step: np.ndarray) -> None:
        """Record whether ``step`` (a posterior's changes, flat) reverses its last one."""
        last = self.steps.get(name)
        if last is not None and last.shape == step.shape:
            with np.errstate(invalid="ignore", over="ignore"):
                dot = np.dot(step, last)
                if np.isnan(dot):  # NaN or 0 · inf terms: those count as 0
                    dot = np.nansum(step * last)
            self.turns.setdefault(name, []).append(bool(dot < 0))

    def _change(self, name: str, eta: tuple[np.ndarray, ...],
                steps: dict[str, np.ndarray]) -> float | None:
        """A posterior's relative change against its arrays in ``previous`` (None if it
        has none); its step goes to ``steps``."""
        old = self.previous.get(name)
        if old is None:
            return None
        diffs = [_step(a, b) for a, b in zip(eta, old, strict=True)]
        step = np.concatenate([np.ravel(s) for s in diffs]) if len(diffs) > 1 \
            else np.ravel(diffs[0])
        self._turn(name, step)
        steps[name] = step
        return max((_relative(s, b) for s, b in zip(diffs, old, strict=True)), default=0.0)

    def show(self) -> None:
        """Bring the progress bar to this sweep: the sweeps done, the log evidence or
        bound, and the largest change with the variable that made it."""
        self.bar.update(self.count - self.bar.n)
        what = "bound" if self.algorithm == "vmp" else "log_evidence"
        value = f"{what}={self.trace[-1]:.6g}, " if self.trace else ""
        moved = self.labels.get(self.moved, self.moved)
        self.bar.set_postfix_str(f"{value}change={self.change:.2e} ({moved})",
                                 refresh=False)

    def finish(self, model: str, iterations: int, log_evidence: float) -> bool:
        """Whether the run converged; warns when it did not, or when the bound fell."""
        if self.fell is not None and not self.fixed_point:
            warnings.warn(f"{model}: the VMP bound fell by {-self.fell[1]:.3g} at iteration "
                          f"{self.fell[0]}; a message update is not coordinate ascent "
                          "(report this model).", ConvergenceWarning, stacklevel=3)
        last = [f"{what} at {count} element(s)" for what, (sweep, count)
                in self.skipped.items() if sweep == self.count - 1]
        if last:  # EP kept old messages where their inputs were improper (skip_improper)
            warnings.warn(f"{model}: not an EP fixed point after {self.count} iterations: "
                          f"the last sweep still skipped the updates of {'; '.join(last)} "
                          "(improper inputs; the messages kept their previous values); "
                          "try damping=0.5, more informative priors, or VMP.",
                          ConvergenceWarning, stacklevel=3)
            return False
        if self.tolerance is None or iterations == 0:
            return self.tolerance is None or iterations == 0
        converged = self.settled >= 2 or (self.settled == 1 and self.count < iterations
                                          and not self.stalled)
        if not converged and (self.count >= iterations or self.stalled):
            turns = self.turns.get(self.moved, [])[-10:]
            oscillates = len(turns) >= 6 and sum(turns) >= 0.7 * len(turns)
            # EP running away: the changes grew well past their least, 10 sweeps or more
            # after it (loopy EP diverging undamped; a geometric approach shrinks them)
            grows = (self.algorithm == "ep" and not oscillates and np.isfinite(self.change)
                     and self.count - self.least[1] >= 10
                     and self.change > 2.0 * self.least[0])
            owner = repr(self.owners.get(self.moved, self.moved))
            if grows:
                hint = (f"its changes grew from {self.least[0]:.3g} (iteration "
                        f"{self.least[1]}) to {self.change:.3g}, so its messages run away "
                        f"(EP diverging): use damping=0.5 (or damping={{{owner}: 0.5}}), "
                        "or VMP")
            elif oscillates and self.algorithm == "vmp":  # VMP has no damping= to offer
                hint = (f"it oscillates (its last {len(turns)} steps reversed direction "
                        f"{sum(turns)} times)" + (
                            f", through {', '.join(self.fixed_point)}, a fixed-point "
                            "iteration (not coordinate ascent): use EP, or a more "
                            "informative prior" if self.fixed_point else
                            ": raise iterations="))
            else:
                hint = (f"it oscillates (its last {len(turns)} steps reversed direction "
                        f"{sum(turns)} times): use damping=0.5 (or damping={{{owner}: "
                        "0.5}), or raise iterations=" if oscillates else "raise iterations=")
            if self.stalled:  # the default run: more sweeps would not help
                hint = (f"its changes have not shrunk for {STALL_SWEEPS} sweeps, so the "
                        "run stopped" + (f"; {hint.removesuffix(', or raise iterations=')}"
                                         if oscillates or grows else ""))
            warnings.warn(f"{model}: not converged after {self.count} iterations: the "
                          f"posterior of {self.labels.get(self.moved, self.moved)!r} still "
                          f"changed by {self.change:.3g} "
                          f"(relative; tolerance {self.tolerance:g}); {hint}.",
                          ConvergenceWarning, stacklevel=3)
        return converged


def _check_initialised(posteriors: dict[str, Any]) -> None:
    """ModelError naming a posterior that the initialisation leaves uniform (improper):
    with ``iterations=0`` nothing but the initialisation informs it."""
    for name, posterior in posteriors.items():
        if not np.all(posterior.is_proper()):
            raise ModelError(f"iterations=0 returns the posteriors as initialised, but no "
                             f"message reaches {name!r} before the first sweep (its posterior "
                             f"is uniform); run at least one iteration, or initialise it "
                             f"with init={{{name!r}: ...}}.")


def _recompile(model: Model, algorithm: str, init: tuple[str, ...],
               enter_whole_arrays: bool = False, local: LocalOptions | None = None,
               fuse_switch: bool = True) -> CompiledModel:
    """The compiled model ``pickle`` loads: ``model`` compiled again for ``algorithm``."""
    missing = sorted({call.factor for call in model.statements} - set(FACTORS))
    if missing:
        raise ModelError(f"model {model.name!r} uses the factors {missing}, which are not "
                         "defined in this process; run the code that defines them "
                         "(@ff.factor, ff.Deterministic) before loading the model.")
    options = {} if local is None else {
        "local": local.variables, "local_iterations": local.iterations,
        "local_tolerance": local.tolerance, "local_restart": local.restart,
        "local_stop": local.stop}
    return compile_model(model, algorithm, init, enter_whole_arrays=enter_whole_arrays,
                         fuse_switch=fuse_switch, **options)


def compile_model(model: Model, algorithm: str = "ep", init: Any = (),
                  debug: bool = False, enter_whole_arrays: bool = False,
                  backend: str = "numpy", local: Any = None, local_iterations: int = 1,
                  local_tolerance: float | None = None, local_restart: bool = False,
                  local_stop: str = "all", fuse_switch: bool = True
                  ) -> CompiledModel:
    """Compile ``model`` for ``algorithm``; ``init`` names variables the user initialises.

    ``enter_whole_arrays``: the gate transform's alternative method (seed 001): an array
    used inside a gate enters it whole, before the gate, instead of the elements each
    case uses (``Gate.EnterPartial``/``EnterOne``); the posteriors are the same.
    ``backend``: "numpy", "jax" or "dask" (``factorflow.runtime.backends``;
    ff.BackendError for another name, or one not installed).
    ``local`` (names; NumPy backend): each sweep iterates these variables' updates, the
    others held fixed, at most ``local_iterations`` times, stopping once their posteriors
    change by less than ``local_tolerance`` (relative, |Δη| / (1 + |η|); None: all
    passes), after putting them back to their initialisation when ``local_restart``:
    variational EM (``factorflow.transforms.local_loop``).  ``local_stop="each"``: each
    element (LDA: each document's θ) stops on its own once its change is below
    ``local_tolerance`` and keeps its posterior, as scikit-learn's E-step stops each
    document; "all" (the default): the loop stops once no element moves.
    ``fuse_switch``: whether a VMP Switch over a plate with a Gaussian or VectorGaussian
    child becomes one fused statement (``transforms.fuse_switch``, on the backends in
    ``FUSED_BACKENDS``).  True (the default): fused wherever the pattern holds and the
    fused sweep can update the components in the gate path's order (elsewhere the gate
    path), so that each sweep's numbers are the gate path's; False: the gate path.  The
    convergence test watches the user's posteriors and the bound (``watched``), so a
    default run stopped by ``tolerance`` stops at the gate path's sweep, and at every
    backend's, with the same posteriors (``tests/runtime/test_convergence_user.py``).
    """
    from factorflow.runtime.backends import backend_class
    cls = backend_class(backend)
    options = _local_options(model, local, local_iterations, local_tolerance, local_restart,
                             backend, local_stop)
    algorithm = algorithm.lower()
    if not isinstance(enter_whole_arrays, bool):
        raise ModelError(f"enter_whole_arrays must be True or False, got "
                         f"{enter_whole_arrays!r}.")
    names = frozenset(model.variable(n).name for n in (tuple(init) + tuple(model.initial)))
    start = time.perf_counter()
    if not isinstance(fuse_switch, bool):
        raise ModelError(f"fuse_switch must be True or False, got {fuse_switch!r}.")
    fused = fuse_switch and cls.backend in FUSED_BACKENDS
    compilation = compile_program(model, algorithm, names, debug,
                                  GateOptions(enter_whole_arrays=enter_whole_arrays), options,
                                  FuseSwitchOptions(enabled=fused))
    generated = cls._generate_source(compilation.final)
    seconds = time.perf_counter() - start
    compiled = cls(model, algorithm, compilation, generated, seconds, names,
                   enter_whole_arrays, options)
    compiled.fuse_switch = fuse_switch  # (a pickle compiles it again with the same)
    return compiled


def _local_options(model: Model, local: Any, iterations: Any, tolerance: Any, restart: Any,
                   backend: str, stop: Any = "all") -> LocalOptions | None:
    """``compile_model``'s local-loop options checked (ModelError naming the culprit);
    None without ``local``."""
    if local is None:
        if (iterations, tolerance, restart, stop) != (1, None, False, "all"):
            raise ModelError("local_iterations, local_tolerance, local_restart and "
                             "local_stop apply to the local variables: name them with "
                             "local=(...).")
        return None
    names = (local,) if isinstance(local, str) else tuple(local)
    if not names or not all(isinstance(n, str) for n in names):
        raise ModelError(f"local= names the variables iterated inside each sweep, got "
                         f"{local!r}.")
    for n in names:
        if model.variable(n).observed is not None:
            raise ModelError(f"local=: {n!r} is observed; name latent variables.")
    if isinstance(iterations, bool) or not isinstance(iterations, int | np.integer) or \
            iterations < 1:
        raise ModelError(f"local_iterations must be an integer >= 1, got {iterations!r}.")
    if tolerance is not None and not (isinstance(tolerance, int | float) and tolerance > 0):
        raise ModelError(f"local_tolerance must be a positive number or None, got "
                         f"{tolerance!r}.")
    if not isinstance(restart, bool):
        raise ModelError(f"local_restart must be True or False, got {restart!r}.")
    if not isinstance(stop, str) or stop not in ("all", "each"):
        raise ModelError(f"local_stop must be 'all' or 'each', got {stop!r}.")
    if stop == "each" and tolerance is None:
        raise ModelError("local_stop='each' stops each element once its change is below "
                         "local_tolerance: give local_tolerance.")
    if backend != "numpy":
        raise ModelError(f"local= runs on the NumPy backend only, not {backend!r}.")
    return LocalOptions(tuple(sorted(set(names))), int(iterations),
                        None if tolerance is None else float(tolerance), restart, stop)

