"""The text DSL: ``ff.parse(text, data)`` builds a model from VinDsl-style statements.

    mu[j] ~ Gaussian(0, 1); tau[j] ~ Gamma(1, 1)
    y[i, j] ~ Gaussian(mu[j], tau[j])

``syntax`` holds the grammar (parsed with ``lark``), ``build`` turns the tree into the
Python API calls a person would write, so both give the same model and the same IR;
``vocabulary`` is what the DSL's names mean.  ``syntax`` and ``build`` load on the first
``parse``, so that ``import factorflow`` does not pay for importing ``lark``.
"""

from __future__ import annotations

from typing import Any

from factorflow.errors import ModelError
from factorflow.model.core import Model
from factorflow.text.vocabulary import DISTRIBUTIONS


def parse(text: str, data: dict[str, Any] | None = None, *, name: str = "model",
          filename: str = "<text>") -> Model:
    """The model written in DSL ``text``, with ``data`` giving observed values, constant
    arrays, index arrays and plate sizes by name (see ``factorflow.text``).

    Guarantees: the model is the one the equivalent Python API calls build (same IR);
    a syntax error raises ``ff.ParseError`` with line, column and a caret; other bad
    input raises ``ff.ModelError`` (or a subclass) naming the line and column.

    >>> model = ff.parse("mean ~ Gaussian(0, variance=100); x[n] ~ Gaussian(mean, 1)",
    ...                  data={"x": [5.0, 7.0]})   # x observed; n is its length
    >>> round(float(model.infer("ep")["mean"].mean), 12)   # 12 / (1/100 + 2)
    5.970149253731
    """
    from factorflow.text.build import Builder  # loads lark

    if not isinstance(text, str):
        raise ModelError(f"ff.parse needs the model as a string, got {type(text).__name__}.")
    if data is not None and not isinstance(data, dict):
        raise ModelError(f"ff.parse: data must be a dict of name -> value, got "
                         f"{type(data).__name__}.")
    return Builder(text, data or {}, name, filename).build()


__all__ = ["parse", "DISTRIBUTIONS"]
