"""Posteriors print their values as NumPy does (summarised for large batches)."""

import numpy as np

import factorflow as ff

D = ff.distributions


def test_scalars_print_every_digit() -> None:
    assert repr(D.Gaussian(0.5, 2.0)) == "Gaussian(mean=0.5, variance=2.0)"
    assert repr(D.Gamma(2.0, rate=0.1)) == "Gamma(shape=2.0, rate=0.1)"
    assert repr(D.Beta(1.5, 3.0)) == "Beta(alpha=1.5, beta=3.0)"
    assert repr(D.PointMass(3)) == "PointMass(3)"
    assert repr(D.PointMass(2.5)) == "PointMass(2.5)"


def test_batches_print_their_values() -> None:
    assert repr(D.Gaussian([0.1, 0.2, 0.3], [1.0, 1.0, 1.0])) == \
        "Gaussian(mean=[0.1, 0.2, 0.3], variance=[1., 1., 1.])"
    assert repr(D.Gamma(2.0, rate=[1.0, 4.0])) == "Gamma(shape=[2., 2.], rate=[1., 4.])"
    assert repr(D.PointMass([True, False])) == "PointMass([ True, False])"
    assert repr(D.Discrete([[0.25, 0.75], [0.5, 0.5]])) == """\
Discrete(probs=[[0.25, 0.75],
                [0.5 , 0.5 ]])"""


def test_large_batches_are_summarised() -> None:
    assert repr(D.Gaussian(np.arange(100.0), np.ones(100))) == """\
Gaussian(mean=[ 0.,  1.,  2., ..., 97., 98., 99.],
         variance=[1., 1., 1., ..., 1., 1., 1.])"""
    assert repr(D.PointMass(np.arange(20))) == "PointMass([ 0,  1,  2, ..., 17, 18, 19])"
    assert repr(D.Discrete(np.full((30, 2), 0.5))) == """\
Discrete(probs=[[0.5, 0.5],
                [0.5, 0.5],
                [0.5, 0.5],
                ...,
                [0.5, 0.5],
                [0.5, 0.5],
                [0.5, 0.5]])"""
    # at the threshold (12 elements) nothing is left out
    assert "..." not in repr(D.Gaussian(np.arange(12.0), np.ones(12)))
    assert "..." in repr(D.Gaussian(np.arange(13.0), np.ones(13)))


def test_wrapped_values_stay_aligned_in_posteriors_and_results() -> None:
    """When a value wraps, each parameter gets a line and continues under its own first
    element, in a distribution's repr and in a result's (after the posterior's name)."""
    g = D.Gaussian(np.linspace(0.0, 1.0, 20) + 7.123456789, np.full(20, 0.0519459512))
    assert repr(g) == """\
Gaussian(mean=[7.12345679, 7.17608837, 7.22871995, ..., 8.01819363,
               8.07082521, 8.12345679],
         variance=[0.05194595, 0.05194595, 0.05194595, ..., 0.05194595,
                   0.05194595, 0.05194595])"""
    result = ff.Result({"(a * 2)": g}, 0.0, "ep", 1, 0.0)
    lines = repr(g).splitlines()
    shown = repr(result).splitlines()[1:]
    assert shown[0] == "  (a * 2): " + lines[0]
    assert shown[1:] == [" " * len("  (a * 2): ") + line for line in lines[1:]]


def test_sampling_summaries_and_one_sweep_results_print_plainly() -> None:
    from factorflow.samplers.result import Summary
    assert repr(Summary(np.float64(1.25), np.float64(0.5))) == "Summary(mean=1.25, sd=0.5)"
    assert repr(Summary(np.arange(3.0), np.ones(3))) == \
        "Summary(mean=[0., 1., 2.], sd=[1., 1., 1.])"
    assert repr(ff.Result({}, -1.5, "ep", 1, 0.0)) == "Result(EP, 1 iteration, log_evidence=-1.5)"
