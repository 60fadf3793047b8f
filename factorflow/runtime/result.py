"""Inference results: posteriors by variable name, evidence, timing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from factorflow.errors import ModelError


@dataclass(frozen=True)
class Result:
    """Posteriors (``result["name"]``), batched over plates, and the log evidence.

    ``log_evidence`` is EP's approximate log Z, or VMP's evidence lower bound (ELBO).
    """

    posteriors: dict[str, Any]
    log_evidence: float
    algorithm: str
    iterations: int
    seconds: float
    #: whether the run met its tolerance (True when run without one)
    converged: bool = True
    #: the log evidence (EP) or bound (VMP) after each sweep
    trace: tuple[float, ...] = ()

    def __getitem__(self, name: str) -> Any:
        try:
            return self.posteriors[name]
        except KeyError:
            raise ModelError(f"no posterior for {name!r}; the model has "
                             f"{', '.join(self.posteriors)}.") from None

    def __contains__(self, name: object) -> bool:
        return name in self.posteriors

    def __iter__(self):
        return iter(self.posteriors)

    def __repr__(self) -> str:
        lines = [f"Result({self.algorithm.upper()}, {self.iterations} iterations"
                 f"{'' if self.converged else ' (not converged)'}, "
                 f"log_evidence={self.log_evidence:.6g})"]
        lines += [f"  {k}: {v!r}" for k, v in self.posteriors.items()]
        return "\n".join(lines)
