"""The progress bar of long runs and result.plot_convergence."""

import io

import matplotlib
import numpy as np
import pytest

import factorflow as ff
import factorflow.runtime.compiled as compiled_module

matplotlib.use("Agg")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def gaussian_model() -> ff.Model:
    with ff.Model("learning") as model:
        mean = ff.Gaussian("mean", 0.0, variance=100.0)
        prec = ff.Gamma("prec", 1.0, rate=1.0)
        with ff.Plate(ff.Range("n", 3)):
            ff.Gaussian("x", mean, precision=prec, observed=[5.0, 7.0, 6.5])
    return model


@pytest.fixture
def bars(monkeypatch):
    """The bars the runs create, shown at once (no 1 s delay) on a fake terminal."""
    made = []
    original = compiled_module.progress_bar

    def recording(enabled, iterations, algorithm):
        bar = original(enabled, iterations, algorithm)
        made.append(bar)
        return bar

    monkeypatch.setattr(compiled_module, "PROGRESS_DELAY", 0.0)
    monkeypatch.setattr(compiled_module, "progress_bar", recording)
    return made


def on_terminal(monkeypatch) -> Terminal:
    """Standard error as a terminal (set in the test itself: pytest's capture sets
    sys.stderr again between a fixture's setup and the test)."""
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    return terminal


def test_bar_shows_sweep_bound_and_change(bars, monkeypatch) -> None:
    made, terminal = bars, on_terminal(monkeypatch)
    result = gaussian_model().infer("vmp", iterations=7, tolerance=None)
    (bar,) = made
    assert bar.n == result.iterations == 7 and bar.total == 7
    assert bar.postfix.startswith(f"bound={result.trace[-1]:.6g}, change=")
    assert bar.postfix.endswith(")") and ("(mean)" in bar.postfix or "(prec)" in bar.postfix)
    assert terminal.getvalue().startswith("\rVMP:   0%")     # drawn on the terminal
    line = str(bar)                                            # the bar as last drawn
    assert "7/7" in line and f"bound={result.trace[-1]:.6g}" in line, line
    assert bar.disable   # closed after the run


def test_ep_bar_shows_log_evidence(bars, monkeypatch) -> None:
    made = bars
    on_terminal(monkeypatch)
    with ff.Model("ep") as model:
        x = ff.Gaussian("x", 0.0, variance=1.0)
        ff.constrain_true(x > 0.5)
    result = model.infer("ep", iterations=3, tolerance=None, trace=True)
    assert made[0].postfix.startswith(f"log_evidence={result.trace[-1]:.6g}, ")


def test_progress_false_and_no_terminal_show_nothing(bars, monkeypatch) -> None:
    made, terminal = bars, on_terminal(monkeypatch)
    gaussian_model().infer("vmp", iterations=3, progress=False)
    assert made == [None] and terminal.getvalue() == ""
    monkeypatch.setattr("sys.stderr", io.StringIO())   # a log file, not a terminal
    gaussian_model().compile("vmp").run(iterations=3)
    assert made == [None, None]


def test_plot_convergence_draws_the_trace() -> None:
    result = gaussian_model().infer("vmp", iterations=6, tolerance=None)
    top, bottom = result.plot_convergence()
    x, y = top.lines[0].get_data()
    np.testing.assert_array_equal(x, np.arange(1, 7))
    np.testing.assert_array_equal(y, result.trace)
    steps = np.abs(np.diff(result.trace))
    np.testing.assert_array_equal(bottom.lines[0].get_data()[1],
                                  np.where(steps > 0, steps, np.nan))
    assert top.get_ylabel() == "ELBO (VMP bound)"
    assert bottom.get_yscale() == "log"
    import matplotlib.pyplot as plt
    plt.close("all")


def test_plot_convergence_without_sweeps_says_so() -> None:
    with ff.Model("flat") as model:
        mean = ff.Gaussian("mean", 0.0, variance=1.0)
        ff.Gaussian("x", mean, precision=1.0, observed=1.0)
    result = model.infer("ep", iterations=0)
    with pytest.raises(ff.ModelError, match="no trace"):
        result.plot_convergence()


def test_progress_must_be_a_boolean() -> None:
    with pytest.raises(ff.ModelError, match="progress must be True or False, got 'yes'"):
        gaussian_model().infer("vmp", progress="yes")


def test_a_run_until_converged_counts_its_sweeps(bars, monkeypatch) -> None:
    """Without ``iterations`` the run has no set length: the bar is a counter."""
    on_terminal(monkeypatch)
    result = gaussian_model().infer("vmp")
    (bar,) = bars
    assert result.converged and bar.total is None and bar.n == result.iterations


def mixture_model() -> ff.Model:
    with ff.Model("mixture") as model:
        with ff.Plate(ff.Range("k", 2)):
            means = ff.Gaussian("means", 0.0, variance=100.0)
        w = ff.Dirichlet("w", np.ones(2))
        with ff.Plate(ff.Range("n", 6)):
            z = ff.Discrete("z", w)
            with ff.Switch(z):
                ff.Gaussian("x", means[z], variance=1.0,
                            observed=[-3.0, -2.5, -2.0, 2.0, 2.5, 3.0])
    means.initialize(ff.distributions.Gaussian(np.array([-1.0, 1.0]), variance=1.0))
    return model


def test_bar_and_warning_name_a_gate_copy_as_people_read_it(bars, monkeypatch) -> None:
    """The gate transform's own posteriors (watched for convergence under EP:
    ``compiled.watched``) are shown by their label, never by a generated identifier such
    as ``v_means__k_cond_z_n``; under VMP only the user's posteriors are watched."""
    made = bars
    on_terminal(monkeypatch)
    model = mixture_model()
    compiled = model.compile("ep")
    labels, owners = compiled._watched_names()
    assert labels["v_means__k_cond_z_n"] == "means in the gate on z[n]"
    assert owners["v_means__k_cond_z_n"] == "means"
    with pytest.warns(ff.ConvergenceWarning) as caught:
        model.infer("vmp", iterations=2)
    assert "the posterior of 'z' still changed" in str(caught[0].message)
    with pytest.warns(ff.ConvergenceWarning) as caught:  # (the copy is new after sweep 1)
        model.infer("ep", iterations=1)
    message = str(caught[0].message)
    assert "the posterior of 'means in the gate on z[n]' still changed" in message
    assert "v_" not in message
    assert "v_" not in made[0].postfix
