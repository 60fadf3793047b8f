"""Helpers: a DSL model and its Python-API twin must agree in IR text and in numbers."""

from __future__ import annotations

import numpy as np

from factorflow.ir import format_program
from factorflow.transforms.lower import lower


def ir_text(model) -> str:
    return format_program(lower(model)[0])


def assert_same_model(dsl_model, python_model, algorithms=("ep", "vmp"), **infer) -> None:
    """Same lowered IR, same bound values, and bit-identical posteriors and evidence."""
    assert ir_text(dsl_model) == ir_text(python_model)
    a, b = lower(dsl_model)[1].values, lower(python_model)[1].values
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    for algorithm in algorithms:
        ra, rb = dsl_model.infer(algorithm, **infer), python_model.infer(algorithm, **infer)
        assert list(ra) == list(rb)
        for name in ra:
            sa, sb = ra[name].__getstate__(), rb[name].__getstate__()
            assert type(ra[name]) is type(rb[name]) and sa.keys() == sb.keys()
            for key in sa:
                np.testing.assert_array_equal(sa[key], sb[key])
        assert ra.log_evidence == rb.log_evidence or (
            np.isnan(ra.log_evidence) and np.isnan(rb.log_evidence))
