"""The exceptions and warnings factorflow raises.

Every error names the model element (variable, factor, statement) it is about and
says what to do, so that a user never sees a bare traceback from deep inside NumPy.
"""

from __future__ import annotations


class ModelError(ValueError):
    """A model, its data or a requested algorithm cannot be compiled or run as given.
    Every other error here is one (but ``ImproperMessageError``), so ``except
    ff.ModelError`` catches them all; the message names the element and says what to do.

    >>> with ff.Model():
    ...     a = ff.Gaussian("a", 0.0, variance=1.0)
    ...     b = ff.Gaussian("a", 0.0, variance=1.0)
    Traceback (most recent call last):
    ...
    factorflow.errors.ModelError: Variable 'a': the name is already used in this model; ...
    """


class DataError(ModelError):
    """Observed data has the wrong shape, contains NaN/inf, or lies outside its support.

    >>> with ff.Model():
    ...     x = ff.Gaussian("x", 0.0, variance=1.0, observed=np.nan)
    Traceback (most recent call last):
    ...
    factorflow.errors.DataError: observed value of 'x' contains NaN or inf; remove or impute ...
    """


class ParseError(ModelError):
    """Model text (``ff.parse``) is not in the DSL's grammar; the message shows the line,
    the column and a caret under the offending character.

    >>> try:
    ...     ff.parse("m ~ Gaussian(0, 1")
    ... except ff.ParseError as err:
    ...     print(err.line, err.column)
    1 18
    """

    def __init__(self, message: str, line: int = 0, column: int = 0) -> None:
        super().__init__(message)
        self.line, self.column = line, column

    def __reduce__(self) -> tuple:
        return type(self), (self.args[0], self.line, self.column)


class UnsupportedFactorError(ModelError):
    """A factor has no message operator for the requested algorithm (the message names
    the statement, the argument, and an algorithm that has one).

    >>> with ff.Model() as model:
    ...     prec = ff.Gamma("prec", 1.0, rate=1.0)
    ...     x = ff.Gaussian("x", 0.0, precision=prec, observed=1.0)
    >>> model.compile("ep")
    Traceback (most recent call last):
    ...
    factorflow.errors.UnsupportedFactorError: ...'precision'...; use 'vmp'.
    """


class ScheduleError(ModelError):
    """No valid message-passing schedule exists (for example a cycle of Required edges:
    two updates that each need the other first).

    >>> from factorflow.transforms.dependencies import Dep, DependencyGraph, check
    >>> check(DependencyGraph(("a", "b"), {("a", "b"): Dep.REQUIRED,
    ...                                    ("b", "a"): Dep.REQUIRED}))
    Traceback (most recent call last):
    ...
    factorflow.errors.ScheduleError: directed cycle of Required edges: a -> b -> a
    """


class CheckpointError(ModelError):
    """A checkpoint cannot be resumed: the file is not one, holds more sweeps than the
    run asks for, or was written by another run (the error names what differs).

    >>> import os, tempfile
    >>> with ff.Model() as model:
    ...     m = ff.Gaussian("m", 0.0, variance=1.0)
    >>> model.infer("ep", checkpoint=os.path.join(tempfile.mkdtemp(), "run.ckpt"),
    ...             resume=True)
    Traceback (most recent call last):
    ...
    factorflow.errors.CheckpointError: resume=True, but there is no checkpoint at '...run.ckpt'; ...
    """


class ExcludedVariableError(ModelError, KeyError):
    """A result was asked for a variable that is not part of the model for the data it
    ran with: every element is defined inside branches that observed conditions exclude
    (``ff.If(c)`` with ``c`` observed false), as Infer.NET treats a gate whose condition
    is known.  ``result.excluded`` lists such variables with the elements excluded.

    >>> with ff.Model() as model:
    ...     c = ff.Bernoulli("c", 0.5, observed=False)
    ...     with ff.If(c):
    ...         y = ff.Gaussian("y", 0.0, variance=1.0)
    >>> result = model.infer("ep")
    >>> list(result.excluded), "y" in result
    (['y'], False)
    >>> result["y"]
    Traceback (most recent call last):
    ...
    factorflow.errors.ExcludedVariableError: 'y' is not part of the model for the data ...
    """

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class BackendError(ModelError):
    """An array backend (``backend="jax"``) is unknown, not installed (the message names
    the extra to install), or cannot run what was asked of it (such as a checkpoint).

    >>> import factorflow as ff
    >>> with ff.Model() as model:
    ...     m = ff.Gaussian("m", 0.0, variance=1.0)
    ...     y = ff.Gaussian("y", m, variance=1.0, observed=2.0)
    >>> model.compile("ep", backend="cupy")
    Traceback (most recent call last):
    ...
    factorflow.errors.BackendError: ...
    """


class ImproperMessageError(ArithmeticError):
    """A message or posterior became improper (or NaN) during inference (the message
    names it and says what to do).

    >>> ff.distributions.Gaussian(0.0, variance=-1.0).check_proper("posterior of x")
    Traceback (most recent call last):
    ...
    factorflow.errors.ImproperMessageError: posterior of x is improper: ...
    """


class ImproperMessageWarning(UserWarning):
    """EP skipped a message update where its input was improper (a cavity made improper
    by other sites' negative precisions); the message kept its previous value there.

    >>> import warnings
    >>> from factorflow.runtime.kernels import skip_improper
    >>> G = ff.distributions.Gaussian
    >>> cavity = G.from_natural([0.0, 0.0], [1.0, -1.0])     # element 1 improper
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     new = skip_improper(G([5.0, 5.0], variance=1.0),     # the previous message
    ...                         lambda: G([1.0, 1.0], variance=2.0), (cavity,), "m", 0)
    >>> new.mean, caught[0].category.__name__     # element 1 kept its previous mean
    (array([1., 5.]), 'ImproperMessageWarning')
    """


class ScheduleWarning(UserWarning):
    """A schedule ignores something the user asked for (such as an initialization).

    >>> import warnings
    >>> from factorflow.transforms.dependencies import Dep, DependencyGraph
    >>> from factorflow.transforms.scheduling import schedule
    >>> graph = DependencyGraph(("p", "out"), {("p", "out"): Dep.DEPENDENCY},
    ...                         frozenset({"out"}), frozenset({"p"}))    # outputs, inits
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     _ = schedule(graph)
    >>> print(caught[0].category.__name__, caught[0].message)
    ScheduleWarning user initialization of p is overwritten before it is used (too many ...
    """


class ConvergenceWarning(UserWarning):
    """Inference stopped before converging (the largest change of a posterior's natural
    parameters, or of the VMP bound, was still above the tolerance), or the VMP bound
    fell from one iteration to the next.

    >>> import warnings
    >>> with ff.Model() as model:
    ...     mean = ff.Gaussian("mean", 0.0, variance=100.0)
    ...     prec = ff.Gamma("prec", 1.0, rate=1.0)
    ...     with ff.Plate(ff.Range("n", 2)):
    ...         x = ff.Gaussian("x", mean, precision=prec, observed=[5.0, 7.0])
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     result = model.infer("vmp", iterations=2)
    >>> result.converged, caught[0].category.__name__
    (False, 'ConvergenceWarning')
    >>> print(caught[0].message)
    model: not converged after 2 iterations: the posterior of 'prec' still changed by ...
    """


class RenderError(ModelError):
    """A diagram cannot be rendered: no Graphviz program is installed (the message says
    how to install one), or the one found failed.

    >>> from factorflow.viz import Diagram
    >>> Diagram("digraph { a -> }").pipe("svg")
    Traceback (most recent call last):
    ...
    factorflow.errors.RenderError: ...
    """
