"""Shrink a failing spec to a small one that fails the same way (delta debugging).

Greedy: try every one-step simplification -- drop a statement, drop a gate's branch, inline
a branch in place of its gate, drop a plate element -- and keep the first one for which
``still_fails`` holds, until none does.  A candidate that is not a valid model fails in
another way (or makes the reference raise), so it is rejected by ``still_fails`` itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

from tests.oracle.spec import Draw, Gate, PerElement, Plate, Scale, Spec


def _bodies(stmts: tuple) -> Iterator[tuple]:
    """Every simplification of a statement list (one step each)."""
    for i, s in enumerate(stmts):
        before, after = stmts[:i], stmts[i + 1:]
        yield before + after  # drop the statement
        if isinstance(s, Gate):
            for j, (_, body) in enumerate(s.branches):
                if len(s.branches) > 1:
                    yield before + (replace(s, branches=s.branches[:j] + s.branches[j + 1:]),
                                    ) + after
                yield before + body + after  # the branch's statements, ungated
                for smaller in _bodies(body):
                    branches = s.branches[:j] + ((s.branches[j][0], smaller),) + \
                        s.branches[j + 1:]
                    yield before + (replace(s, branches=branches),) + after
        elif isinstance(s, Plate):
            if s.size > 0:
                yield before + (_fewer(s),) + after
            for smaller in _bodies(s.body):
                yield before + (replace(s, body=smaller),) + after


def _fewer(plate: Plate) -> Plate:
    """The plate with its last element dropped (observed values and constants too)."""
    def cut(stmts: tuple) -> tuple:
        out = []
        for s in stmts:
            if isinstance(s, Draw):
                args = tuple(PerElement(a.values[:-1]) if isinstance(a, PerElement) else a
                             for a in s.args)
                obs = s.observed[:-1] if isinstance(s.observed, tuple) else s.observed
                out.append(replace(s, args=args, observed=obs))
            elif isinstance(s, Gate):
                out.append(replace(s, branches=tuple((k, cut(b)) for k, b in s.branches)))
            elif isinstance(s, Scale) and isinstance(s.c, PerElement):
                out.append(replace(s, c=PerElement(s.c.values[:-1])))
            else:
                out.append(s)
        return tuple(out)
    return replace(plate, size=plate.size - 1, body=cut(plate.body))


def shrink(spec: Spec, still_fails: Callable[[Spec], bool], budget: int = 2000) -> Spec:
    """A spec no one-step simplification of which still fails (within ``budget`` tries)."""
    tries = 0
    improved = True
    while improved and tries < budget:
        improved = False
        for body in _bodies(spec.body):
            tries += 1
            candidate = replace(spec, body=body)
            try:
                ok = still_fails(candidate)
            except Exception:  # noqa: BLE001  (not a valid model: the reference refused it)
                ok = False
            if ok:
                spec, improved = candidate, True
                break
            if tries >= budget:
                break
    return spec


__all__ = ["shrink"]
