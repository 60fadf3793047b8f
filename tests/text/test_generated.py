"""Hypothesis: random small DSL programs lower to the same IR as their Python-API twins."""

from __future__ import annotations

import operator

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

import factorflow as ff
from tests.text.twins import ir_text

OPERATORS = {"plus": "add", "minus": "sub", "times": "mul", "greater": "gt"}
CONSTANTS = st.sampled_from([0.5, 1, 2.0, 3])


def _program(draw) -> tuple[str, dict, list]:
    """DSL lines, data, and the same statements as (kind, name, args) for the twin."""
    lines, data, ops = [], {}, []
    real, positive, unit, booleans, plated = [], [], [], [], []
    size = draw(st.integers(1, 3))
    for k in range(draw(st.integers(2, 6))):
        name = f"v{k}"
        kind = "bernoulli" if k == 0 and draw(st.booleans()) else draw(st.sampled_from([
                                     "gaussian", "gamma", "beta", "bernoulli", "bernoulli",
                                     "observed", "plus", "minus", "times", "greater",
                                     "gate", "gate", "gate", "plated_gate", "plated_gate"]))
        if kind == "gaussian":
            mean = draw(st.sampled_from(real + [0.0, 1]))
            prec = draw(st.sampled_from(positive + [1.0, 2]))
            spread = draw(st.sampled_from(["precision", "variance", "positional"]))
            if spread == "variance":
                prec = draw(CONSTANTS)
            arg = f"{spread}={prec}" if spread != "positional" else f"{prec}"
            lines.append(f"{name} ~ Gaussian({mean}, {arg})")
            key = "variance" if spread == "variance" else "precision"
            ops.append(("Gaussian", name, (mean,), {key: prec}))
            real.append(name)
        elif kind == "gamma":
            shape, rate = draw(CONSTANTS), draw(st.sampled_from(positive + [1.0]))
            lines.append(f"{name} ~ Gamma({shape}, {rate})")
            ops.append(("Gamma", name, (shape,), {"rate": rate}))
            positive.append(name)
        elif kind == "beta":
            a, b = draw(CONSTANTS), draw(CONSTANTS)
            lines.append(f"{name} ~ Beta({a}, {b})")
            ops.append(("Beta", name, (a, b), {}))
            unit.append(name)
        elif kind == "bernoulli":
            p = draw(st.sampled_from(unit + [0.25]))
            lines.append(f"{name} ~ Bernoulli({p})")
            ops.append(("Bernoulli", name, (p,), {}))
            booleans.append(name)
        elif kind == "gate" and booleans:
            # an exit variable: defined in both branches of `if c:` / `else:`
            c, negated = draw(st.sampled_from(booleans)), draw(st.booleans())
            first, second = draw(CONSTANTS), draw(st.sampled_from(real + [-1.0]))
            head = f"if not {c}:" if negated else f"if {c}:"
            if draw(st.booleans()):
                block = (f"{head} {name} ~ Gaussian({first}, 1)\n"
                         f"else: {name} ~ Gaussian({second}, 2)")
            else:
                block = (f"{head}\n    {name} ~ Gaussian({first}, 1)\n"
                         f"else:\n    {name} ~ Gaussian({second}, 2)")
            lines.append(block)
            ops.append(("gate", name, (c, first, second), {"negated": negated}))
            real.append(name)
        elif kind == "plated_gate":
            # a condition and an exit variable per element of the plate n
            first, second = draw(st.sampled_from(real + [1.0])), draw(CONSTANTS)
            lines.append(f"{name}c[n] ~ Bernoulli(0.3)\nif {name}c[n]:\n"
                         f"    {name}[n] ~ Gaussian({first}, 1)\nelse:\n"
                         f"    {name}[n] ~ Gaussian({second}, 2)")
            data["n"] = size
            ops.append(("plated_gate", name, (first, second), {"size": size}))
            plated.append(name)
        elif kind == "observed":
            mean = draw(st.sampled_from(real + plated + [0.5]))
            values = draw(st.lists(st.sampled_from([-1.5, 0.0, 2.0]), min_size=size, max_size=size))
            data[name] = np.array(values)
            lines.append(f"{name}[n] ~ Gaussian({mean}{'[n]' if mean in plated else ''}, 2)")
            ops.append(("observed", name, (mean,), {"precision": 2}))
        elif kind in OPERATORS and real:
            a = draw(st.sampled_from(real))
            b = draw(st.sampled_from([x for x in real if x != a] + [1.5]))
            symbol = {"plus": "+", "minus": "-", "times": "*", "greater": ">"}[kind]
            lines.append(f"{name} = {a} {symbol} {b}")
            ops.append((kind, name, (a, b), {}))
            if kind != "greater":
                real.append(name)
    return lines, data, ops


def _python_twin(ops, data) -> ff.Model:
    env: dict = {}

    def value(v):
        return env[v] if isinstance(v, str) else v

    with ff.Model() as model:
        n = None
        for kind, name, args, kwargs in ops:
            args = tuple(value(a) for a in args)
            kwargs = {k: value(v) for k, v in kwargs.items()}
            if kind == "plated_gate":
                n = n or ff.Range("n", kwargs["size"])
                first, second = args
                with ff.Plate(n):
                    c = ff.Bernoulli(f"{name}c", 0.3)
                    with ff.If(c):
                        env[name] = ff.Gaussian(name, first, precision=1)
                    with ff.IfNot(c):
                        ff.Gaussian(name, second, precision=2)
            elif kind == "observed":
                n = n or ff.Range("n", len(data[name]))
                with ff.Plate(n):
                    env[name] = ff.Gaussian(name, *args, observed=data[name], **kwargs)
            elif kind == "gate":
                c, first, second = args
                gates = (ff.IfNot, ff.If) if kwargs["negated"] else (ff.If, ff.IfNot)
                with gates[0](c):
                    env[name] = ff.Gaussian(name, first, precision=1)
                with gates[1](c):
                    ff.Gaussian(name, second, precision=2)
            elif kind in ("plus", "minus", "times", "greater"):
                env[name] = getattr(operator, OPERATORS[kind])(*args)
            else:
                env[name] = getattr(ff, kind)(name, *args, **kwargs)
    return model


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_generated_programs_match_their_python_twins(data):
    lines, values, ops = _program(data.draw)
    assume(lines)
    separator = data.draw(st.sampled_from(["\n", "; "]))
    text = lines[0]
    for before, line in zip(lines, lines[1:], strict=False):
        text += ("\n" if "\n" in before + line else separator) + line
    event("gate" if "if " in text else "no gate")
    try:
        python = _python_twin(ops, values)
    except ff.ModelError as error:  # e.g. x * (x + 1): refused by both, with one message
        event("refused")
        with pytest.raises(type(error)) as refused:
            ff.parse(text, data=values)
        assert str(error) in str(refused.value)
        return
    assert ir_text(ff.parse(text, data=values)) == ir_text(python)
