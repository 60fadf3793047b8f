"""Helpers shared by the operators: the fused plate sums (``plate_einsum``)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from factorflow.factors.common import plate_einsum
from tests.conftest import assert_close


@st.composite
def _sums(draw):
    """A plate shape, the axes summed, and 1–3 terms, each with some plate axes of length
    1 or broadcast (stride 0) and an optional event axis of length 2."""
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    axes = tuple(sorted(draw(st.sets(st.integers(0, ndim - 1), min_size=1))))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    terms = []
    for _ in range(draw(st.integers(1, 3))):
        lead = draw(st.integers(0, ndim))  # leading plate axes left out (right-aligned)
        own = []
        for n in shape[lead:]:
            own.append(draw(st.sampled_from(["full", "one", "view"])) if n > 1 else "full")
        event = draw(st.sampled_from(["", "i"]))
        base = rng.normal(size=tuple(1 if o != "full" else n for o, n in
                                     zip(own, shape[lead:], strict=True)) + (2,) * len(event))
        full = tuple(n if o == "view" else m for o, n, m in
                     zip(own, shape[lead:], base.shape, strict=False)) + base.shape[len(own):]
        terms.append((np.broadcast_to(base, full), event))
    return shape, axes, terms


@settings(max_examples=200, deadline=None, derandomize=True)
@given(_sums())
def test_plate_einsum_is_the_sum_of_the_broadcast_product(case):
    """Σ over the summed plate axes of the product of the terms, against the same sum of
    the explicitly broadcast product (every kept axis at its full length)."""
    shape, axes, terms = case
    out_event = "i" if any(e for _, e in terms) else ""
    full = []
    for arr, event in terms:
        a = arr.reshape((1,) * (len(shape) - (arr.ndim - len(event))) + arr.shape)
        if not event and out_event:
            a = a[..., None]
        full.append(np.broadcast_to(a, shape + (2,) * len(out_event)))
    want = np.sum(np.prod(np.stack(full), axis=0), axis=axes)
    got = plate_einsum(out_event, terms, (shape, axes))
    assert got.shape == want.shape
    assert_close(got, want, rtol=1e-12, atol=1e-12)
