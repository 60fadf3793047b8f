"""The exceptions and warnings factorflow raises.

Every error names the model element (variable, factor, statement) it is about and
says what to do, so that a user never sees a bare traceback from deep inside NumPy.
"""

from __future__ import annotations


class ModelError(ValueError):
    """A model, its data or a requested algorithm cannot be compiled or run as given."""


class DataError(ModelError):
    """Observed data has the wrong shape, contains NaN/inf, or lies outside its support."""


class ParseError(ModelError):
    """Model text (``ff.parse``) is not in the DSL's grammar; the message shows the line,
    the column and a caret under the offending character."""

    def __init__(self, message: str, line: int = 0, column: int = 0) -> None:
        super().__init__(message)
        self.line, self.column = line, column

    def __reduce__(self) -> tuple:
        return type(self), (self.args[0], self.line, self.column)


class UnsupportedFactorError(ModelError):
    """A factor has no message operator for the requested algorithm."""


class ScheduleError(ModelError):
    """No valid message-passing schedule exists (for example a cycle of Required edges)."""


class CheckpointError(ModelError):
    """A checkpoint cannot be resumed: the file is not one, holds more sweeps than the
    run asks for, or was written by another run (the error names what differs)."""


class ExcludedVariableError(ModelError, KeyError):
    """A result was asked for a variable that is not part of the model for the data it
    ran with: every element is defined inside branches that observed conditions exclude
    (``ff.If(c)`` with ``c`` observed false), as Infer.NET treats a gate whose condition
    is known.  ``result.excluded`` lists such variables with the elements excluded."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class BackendError(ModelError):
    """An array backend (``backend="jax"``) is unknown, not installed (the message names
    the extra to install), or cannot run what was asked of it (such as a checkpoint)."""


class ImproperMessageError(ArithmeticError):
    """A message or posterior became improper (or NaN) during inference."""


class ScheduleWarning(UserWarning):
    """A schedule ignores something the user asked for (such as an initialization)."""


class ConvergenceWarning(UserWarning):
    """Inference stopped before converging (the largest change of a posterior's natural
    parameters, or of the VMP bound, was still above the tolerance), or the VMP bound
    fell from one iteration to the next."""


class RenderError(ModelError):
    """A diagram cannot be rendered: no Graphviz program is installed (the message says
    how to install one), or the one found failed."""
