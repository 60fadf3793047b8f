"""The foundation issue's acceptance numbers, end to end through the compiler."""

from __future__ import annotations

import ast

import numpy as np
from scipy import stats

import factorflow as ff
from tests.conftest import assert_close


def test_two_coins_ep():
    with ff.Model("two_coins") as model:
        first = ff.Bernoulli("first", 0.5)
        second = ff.Bernoulli("second", 0.5)
        both = first & second
    assert_close(model.infer("ep")[both.name].p, 0.25, rtol=0, atol=1e-9)

    with ff.Model("two_coins_conditioned") as model:
        first = ff.Bernoulli("first", 0.5)
        second = ff.Bernoulli("second", 0.5)
        ff.constrain_true(~(first & second))
    result = model.infer("ep")
    assert_close(result["first"].p, 1 / 3, rtol=0, atol=1e-9)
    assert_close(result["second"].p, 1 / 3, rtol=0, atol=1e-9)
    assert_close(np.exp(result.log_evidence), 0.75, rtol=0, atol=1e-9)


def test_learning_a_gaussian_vmp_matches_infer_net():
    with ff.Model("learning_gaussian") as model:
        mean = ff.Gaussian("mean", 0.0, variance=100.0)
        prec = ff.Gamma("prec", 1.0, rate=1.0)
        n = ff.Range("n", 2)
        with ff.Plate(n):
            ff.Gaussian("x", mean, precision=prec, observed=[5.0, 7.0])
    result = model.infer("vmp", iterations=50)
    assert_close(result["mean"].mean, 5.9603207170807826, rtol=0, atol=1e-9)
    assert_close(result["mean"].variance, 0.66132138200164436, rtol=0, atol=1e-9)
    assert_close(result["prec"].shape_param, 2.0, rtol=0, atol=1e-9)
    assert_close(result["prec"].rate, 2.6628958274937107, rtol=0, atol=1e-9)


def _loops(source: str) -> list[ast.For]:
    return [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.For | ast.While)]


def test_million_points_compile_once_no_python_loop_closed_form():
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 1.0, size=1_000_000)
    with ff.Model("big") as model:
        mean = ff.Gaussian("mean", 0.0, variance=100.0)
        n = ff.Range("n", x.size)
        with ff.Plate(n):
            ff.Gaussian("x", mean, precision=1.0, observed=x)
    compiled = model.compile("vmp")
    assert len(_loops(compiled.source)) == 1  # the iteration loop, none over points
    result = compiled.run(iterations=5)
    post_prec = 0.01 + x.size
    assert_close(result["mean"].mean, x.sum() / post_prec, rtol=1e-9)
    assert_close(result["mean"].variance, 1.0 / post_prec, rtol=1e-9)
    assert model.compile("vmp") is compiled  # compiled once, cached


def test_truncated_gaussian_evidence_ep():
    with ff.Model("truncated") as model:
        x = ff.Gaussian("x", 0.0, variance=1.0)
        ff.constrain_true(x > 0.5)
    result = model.infer("ep")
    assert_close(np.exp(result.log_evidence), 0.308537538725987, rtol=0, atol=1e-6)
    assert_close(np.exp(result.log_evidence), stats.norm.sf(0.5), rtol=1e-9)
    assert_close(result["x"].mean, 1.141078, rtol=0, atol=1e-6)
    assert_close(result["x"].variance, 0.268480, rtol=0, atol=1e-6)


def test_data_changes_without_recompiling():
    with ff.Model("truncated_data") as model:
        t = ff.Data("threshold", 0.5)
        x = ff.Gaussian("x", 0.0, variance=1.0)
        ff.constrain_true(x > t)
    compiled = model.compile("ep")
    for threshold in (-1.0, 0.0, 1.5):
        result = compiled.run(data={"threshold": threshold})
        assert_close(np.exp(result.log_evidence), stats.norm.sf(threshold), rtol=1e-9)


def test_generated_source_is_readable_python_with_provenance():
    with ff.Model("learning_gaussian") as model:
        mean = ff.Gaussian("mean", 0.0, variance=100.0)
        prec = ff.Gamma("prec", 1.0, rate=1.0)
        n = ff.Range("n", 2)
        with ff.Plate(n):
            ff.Gaussian("x", mean, precision=prec, observed=[5.0, 7.0])
    for algorithm in ("vmp",):
        source = model.compile(algorithm).source
        ast.parse(source)
        assert 'ff.Gaussian("x", mean, precision=prec, observed=[5.0, 7.0])' in source
        assert 'ff.Gamma("prec", 1.0, rate=1.0)' in source
        assert max(len(line) for line in source.splitlines()) < 160
