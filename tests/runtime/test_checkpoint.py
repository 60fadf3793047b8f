"""Checkpoint and resume (issue 10, item 6): ``run(..., checkpoint=path, every=k)``.

A run stopped at any sweep — by an exception, or by SIGKILL in a subprocess — and run
again with the same arguments ends bit-identical to a run never interrupted: every
natural parameter (``np.array_equal``), the log evidence, the trace, the number of
sweeps and ``converged``.  Checkpoints of other runs are refused, naming what differs.
"""

from __future__ import annotations

import os
import pickle
import runpy
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import factorflow as ff
from factorflow.runtime import checkpoint as ckpt
from factorflow.runtime.compiled import CompiledModel
from factorflow.runtime.kernels import prod_over

ROOT = Path(__file__).resolve().parents[2]


# ----- models ---------------------------------------------------------------------------
def gaussian(n: int = 50, seed: int = 0) -> ff.Model:
    """Learning a Gaussian (VMP): mean and precision from ``n`` points."""
    data = np.random.default_rng(seed).normal(3.0, 2.0, n)
    with ff.Model("gaussian") as model:
        mean = ff.Gaussian("mean", 0.0, variance=100.0)
        prec = ff.Gamma("prec", 1.0, rate=1.0)
        with ff.Plate(ff.Range("n", n)):
            ff.Gaussian("x", mean, precision=prec, observed=ff.Data("xs", data))
    return model


def mixture() -> ff.Model:
    """A Gaussian mixture (VMP, Switch gate, Dirichlet, Discrete; broadcast messages)."""
    data = np.array([0.1, -0.3, 5.2, 4.8, 10.1, 9.7, 4.0, 6.5])
    with ff.Model("mixture") as model:
        k = ff.Range("k", 3)
        weights = ff.Dirichlet("weights", np.ones(3))
        with ff.Plate(k):
            means = ff.Gaussian("means", 0.0, variance=100.0)
        with ff.Plate(ff.Range("n", data.size)):
            z = ff.Discrete("z", weights)
            with ff.Switch(z):
                ff.Gaussian("x", means[z], precision=1.0, observed=data)
    return model


MIXTURE_INIT = {"means": ff.distributions.Gaussian([0.0, 5.0, 10.0], [1.0, 1.0, 1.0])}


def mixture_gamma() -> ff.Model:
    """The mixture with Gamma precisions (``benchmarks/mixture_reference.py``): the mean's
    and the precision's messages share one product of the data sums per sweep, and the
    responsibilities are remembered with their normalisation."""
    data = np.array([0.1, -0.3, 5.2, 4.8, 10.1, 9.7, 4.0, 6.5, 0.7, 11.2])
    with ff.Model("mixture_gamma") as model:
        weights = ff.Dirichlet("weights", np.ones(3))
        with ff.Plate(ff.Range("k", 3)):
            means = ff.Gaussian("means", 0.0, variance=100.0)
            precs = ff.Gamma("precs", 1.0, rate=1.0)
        with ff.Plate(ff.Range("n", data.size)):
            z = ff.Discrete("z", weights)
            with ff.Switch(z):
                ff.Gaussian("x", means[z], precision=precs[z], observed=data)
    return model


def skills() -> ff.Model:
    """Skills from games (EP: gathers, scatter products, a constraint)."""
    winners, losers = np.array([0, 1, 2, 3, 0, 2]), np.array([1, 2, 3, 0, 2, 1])
    with ff.Model("skills") as model:
        with ff.Plate(ff.Range("players", 4)):
            skill = ff.Gaussian("skill", 0.0, variance=1.0)
        with ff.Plate(ff.Range("games", winners.size)):
            perf_w = ff.Gaussian("perf_w", skill[winners], variance=1.0)
            perf_l = ff.Gaussian("perf_l", skill[losers], variance=1.0)
            ff.constrain_true(perf_w > perf_l)
    return model


def softmax_plate() -> ff.Model:
    """Softmax regression over a plate of classes (EP): its message extrapolates in
    cycles of 12 sweeps from the cycle's earlier messages, the operator's state."""
    rng = np.random.default_rng(5)
    X, y = rng.normal(size=(18, 1)) * 1.5, rng.integers(0, 3, size=18)
    with ff.Model("softmax_plate") as model:
        classes = ff.Range("k", 3)
        with ff.Plate(classes):
            W = ff.VectorGaussian("W", np.array([0.3]), covariance=1.5 * np.eye(1))
        with ff.Plate(ff.Range("n", 18)):
            with ff.Plate(classes):
                eta = ff.inner(W, X[:, None, :])
            ff.Discrete("y", ff.softmax(eta, classes), observed=y)
    return model


def clinical_trial() -> ff.Model:
    """Examples' clinical trial (EP, If/IfNot gates): its program has four loops."""
    return runpy.run_path(str(ROOT / "examples" / "clinical_trial.py"))["build"]()


#: name -> (model, algorithm, run options); every run below uses these
CASES = {
    "gaussian-vmp": (gaussian, "vmp", {}),
    "mixture-vmp": (mixture, "vmp", {"init": MIXTURE_INIT}),
    "mixture-gamma-vmp": (mixture_gamma, "vmp", {"init": MIXTURE_INIT}),
    "skills-ep-damped": (skills, "ep", {"damping": 0.3}),
    "clinical-trial-ep-4-loops": (clinical_trial, "ep", {}),
    "softmax-plate-ep-stateful": (softmax_plate, "ep", {}),
}


def compiled(case: str) -> CompiledModel:
    build, algorithm, options = CASES[case]
    return build().compile(algorithm, init=list(options.get("init", {})))


def assert_identical(a: ff.Result, b: ff.Result) -> None:
    """Bit for bit: every slot of every posterior, the log evidence, trace, count."""
    assert list(a.posteriors) == list(b.posteriors)
    for name in a.posteriors:
        pa, pb = a[name], b[name]
        assert type(pa) is type(pb), name
        slots_a, slots_b = pa.__getstate__(), pb.__getstate__()
        assert slots_a.keys() == slots_b.keys()
        for slot in slots_a:
            for x, y in zip(np.atleast_1d(slots_a[slot]) if slot != "eta" else slots_a[slot],
                            np.atleast_1d(slots_b[slot]) if slot != "eta" else slots_b[slot],
                            strict=True):
                assert np.array_equal(x, y, equal_nan=True), (name, slot)
    assert a.log_evidence == b.log_evidence
    assert a.trace == b.trace
    assert (a.iterations, a.converged) == (b.iterations, b.converged)


class Crash(Exception):
    """What the callback raises to stop a run in the middle (a crash)."""


def crash_after(calls: int):
    """A callback that raises ``Crash`` at its ``calls``-th call (one per sweep)."""
    count = [0]

    def callback(iteration: int, posteriors: dict) -> None:
        count[0] += 1
        if count[0] == calls:
            raise Crash
    return callback


def sweeps_in(path: Path) -> int:
    header, _ = ckpt.read(path)
    return header["sweeps"]


# ----- resuming is bit-identical --------------------------------------------------------
@pytest.mark.parametrize("crash_at", [1, 9, 23])
@pytest.mark.parametrize("case", list(CASES))
def test_a_run_crashed_and_resumed_is_bit_identical(case, crash_at, tmp_path):
    """Crash at the given sweep (the 6 sweeps of each of clinical trial's 4 loops
    count on), every=2; run again: the same numbers as never crashing."""
    c, options = compiled(case), CASES[case][2]
    run = dict(iterations=6 if case.startswith("clinical") else 25, tolerance=None,
               **options)
    expected = c.run(**run)
    path = tmp_path / "run.ckpt"
    with pytest.raises(Crash):
        c.run(**run, checkpoint=path, every=2, on_iteration=crash_after(crash_at))
    assert path.exists() == (crash_at >= 2)
    assert_identical(c.run(**run, checkpoint=path, every=2), expected)


@pytest.mark.parametrize("case", ["gaussian-vmp", "mixture-vmp", "clinical-trial-ep-4-loops",
                                  "softmax-plate-ep-stateful"])
def test_a_converging_run_resumed_converges_at_the_same_sweep(case, tmp_path):
    """The default tolerance: the monitor's state (previous posteriors, trace, rates)
    is in the checkpoint, so the resumed run stops where the first would have (in
    clinical trial's third loop, after two loops stopped by convergence)."""
    c, options = compiled(case), CASES[case][2]
    calls: list[int] = []
    expected = c.run(iterations=200, **options, on_iteration=lambda i, p: calls.append(i))
    assert expected.converged and expected.iterations < 200
    path = tmp_path / "run.ckpt"
    with pytest.raises(Crash):
        c.run(iterations=200, **options, checkpoint=path,
              on_iteration=crash_after(len(calls) // 2 + 1))
    assert_identical(c.run(iterations=200, **options, checkpoint=path), expected)


def test_a_finished_checkpoint_gives_the_result_again_or_continues(tmp_path):
    c, path = compiled("gaussian-vmp"), tmp_path / "run.ckpt"
    first = c.run(iterations=10, tolerance=None, checkpoint=path, every=3)
    assert sweeps_in(path) == 10  # the last sweep is saved, though not a multiple of 3
    calls: list[int] = []
    again = c.run(iterations=10, tolerance=None, checkpoint=path,
                  on_iteration=lambda i, p: calls.append(i))
    assert calls == [] and again.iterations == 10
    assert_identical(again, first)
    more = c.run(iterations=25, tolerance=None, checkpoint=path,
                 on_iteration=lambda i, p: calls.append(i))
    assert calls == list(range(10, 25))
    assert_identical(more, c.run(iterations=25, tolerance=None))


def test_a_checkpoint_is_written_every_k_sweeps(tmp_path):
    """At the callback of sweep s, the file holds the last multiple of every < s."""
    c, path = compiled("gaussian-vmp"), tmp_path / "run.ckpt"
    seen: list[int | None] = []
    c.run(iterations=10, tolerance=None, checkpoint=path, every=3,
          on_iteration=lambda i, p: seen.append(sweeps_in(path) if path.exists() else None))
    assert seen == [None, None, None, 3, 3, 3, 6, 6, 6, 9]
    assert sweeps_in(path) == 10


def test_model_infer_takes_checkpoint_every_and_resume(tmp_path):
    model, path = gaussian(), tmp_path / "run.ckpt"
    expected = model.infer("vmp", iterations=20, tolerance=None)
    with pytest.raises(Crash):
        model.infer("vmp", iterations=20, tolerance=None, checkpoint=path, every=4,
                    on_iteration=crash_after(11))
    assert sweeps_in(path) == 8
    assert_identical(model.infer("vmp", iterations=20, tolerance=None, checkpoint=str(path),
                                 every=4, resume=True), expected)


def test_the_layout_of_broadcast_messages_is_kept(tmp_path):
    """A broadcast axis is restored as a broadcast view: ``prod_over`` then scales it
    by the plate size as it did before saving, where summing a plain copy gives other
    bits (10 · 0.1 = 1.0, but 0.1 added ten times is 0.9999999999999999)."""
    message = ff.distributions.Gaussian.from_natural(
        np.broadcast_to(0.1, (10, 3)), np.broadcast_to(-0.5, (10, 3)))
    encoder = ckpt._Encoder()
    tree = encoder.encode({"m": message, "t": np.arange(6.0).reshape(2, 3).T})
    assert all(a.size <= 6 for a in encoder.arrays.values())  # broadcast saved once
    ckpt.write_atomically(tmp_path / "c", {"format": ckpt.FORMAT, "version": ckpt.VERSION,
                                           "state": tree}, encoder.arrays)
    _, back = ckpt.read(tmp_path / "c")
    restored, transposed = back["m"], back["t"]
    assert restored.eta[0].strides == message.eta[0].strides == (0, 0)
    assert transposed.strides == np.arange(6.0).reshape(2, 3).T.strides
    assert np.array_equal(transposed, np.arange(6.0).reshape(2, 3).T)
    scaled = prod_over(message, (10, 3), axis=(0,)).eta[0]
    assert np.array_equal(prod_over(restored, (10, 3), axis=(0,)).eta[0], scaled)
    plain = ff.distributions.Gaussian.from_natural(*(np.array(e) for e in message.eta))
    assert not np.array_equal(prod_over(plain, (10, 3), axis=(0,)).eta[0], scaled)


# ----- refusals -------------------------------------------------------------------------
def _changed(what: str):
    """(compiled model, run options) of a run that differs from the reference one in
    ``what``; the reference is ``gaussian()`` under VMP, no options."""
    if what == "algorithm":
        return gaussian().compile("vmp"), {}  # the reference is then EP, see below
    if what == "program":
        with ff.Model("gaussian") as model:  # the same but for the prior's variance
            mean = ff.Gaussian("mean", 0.0, variance=10.0)
            prec = ff.Gamma("prec", 1.0, rate=1.0)
            with ff.Plate(ff.Range("n", 50)):
                ff.Gaussian("x", mean, precision=prec, observed=ff.Data(
                    "xs", np.random.default_rng(0).normal(3.0, 2.0, 50)))
        return model.compile("vmp"), {}
    if what == "n":
        return gaussian(n=51).compile("vmp"), {}
    if what == "x":
        return gaussian().compile("vmp"), {"data": {"xs": np.zeros(50)}}
    if what == "mean":
        return gaussian().compile("vmp", init=["mean"]), {
            "init": {"mean": ff.distributions.Gaussian(1.0, 1.0)}}
    assert what == "tolerance"
    return gaussian().compile("vmp"), {"tolerance": 1e-3}


DIFFERS = {
    "algorithm": r"the algorithm \('ep' then, 'vmp' now\)",
    "program": r"the generated program \(the model changed\)",
    "n": r"the size of plate 'n' \(50 then, 51 now\)",
    "x": r"the data of 'x'",
    "mean": r"the initial posterior of 'mean'",
    "tolerance": r"the tolerance \(1e-10 then, 0.001 now\)",
}


@pytest.mark.parametrize("what", list(DIFFERS))
def test_a_checkpoint_of_another_run_is_refused_naming_what_differs(what, tmp_path):
    path = tmp_path / "run.ckpt"
    if what == "algorithm":
        with ff.Model("gaussian") as model:  # known precision: both EP and VMP apply
            mean = ff.Gaussian("mean", 0.0, variance=100.0)
            with ff.Plate(ff.Range("n", 3)):
                ff.Gaussian("x", mean, precision=1.0, observed=[1.0, 2.0, 3.0])
        model.compile("ep").run(iterations=3, checkpoint=path)
        other, options = model.compile("vmp"), {}
    else:
        gaussian().compile("vmp").run(iterations=3, checkpoint=path)
        other, options = _changed(what)
    with pytest.raises(ff.CheckpointError, match=f"another run; what differs: .*{DIFFERS[what]}") as info:
        other.run(iterations=5, checkpoint=path, **options)
    assert isinstance(info.value, ff.ModelError) and "resume=False" in str(info.value)
    fresh = other.run(iterations=5, checkpoint=path, resume=False, **options)  # overwrites
    assert_identical(other.run(iterations=5, checkpoint=path, **options), fresh)


def test_a_checkpoint_with_other_damping_is_refused(tmp_path):
    c, path = compiled("skills-ep-damped"), tmp_path / "run.ckpt"
    c.run(iterations=3, damping=0.3, checkpoint=path)
    with pytest.raises(ff.CheckpointError, match=r"the damping \(\{'\*': 0.3\} then, "
                                                 r"\{'\*': 0.5\} now\)"):
        c.run(iterations=5, damping=0.5, checkpoint=path)


def test_a_checkpoint_past_iterations_or_missing_is_refused(tmp_path):
    c, path = compiled("gaussian-vmp"), tmp_path / "run.ckpt"
    with pytest.raises(ff.CheckpointError, match="resume=True, but there is no checkpoint"):
        c.run(iterations=5, checkpoint=path, resume=True)
    c.run(iterations=8, tolerance=None, checkpoint=path)
    with pytest.raises(ff.CheckpointError, match="holds 8 sweeps, more than iterations=5"):
        c.run(iterations=5, tolerance=None, checkpoint=path)


@pytest.mark.parametrize("content", [b"", b"not a checkpoint",
                                     pickle.dumps({"format": "factorflow checkpoint"})],
                         ids=["empty", "text", "a-pickle"])
def test_a_file_that_is_not_a_checkpoint_is_refused(content, tmp_path):
    path = tmp_path / "run.ckpt"
    path.write_bytes(content)
    with pytest.raises(ff.CheckpointError, match="is not a factorflow checkpoint"):
        compiled("gaussian-vmp").run(iterations=3, checkpoint=path)
    assert path.read_bytes() == content  # left as it was


@pytest.mark.parametrize("options, message", [
    ({"every": 2}, "pass checkpoint=path too"),
    ({"resume": True}, "pass checkpoint=path too"),
    ({"checkpoint": "CK", "every": 0}, "every must be a positive integer"),
    ({"checkpoint": "CK", "every": 1.5}, "every must be a positive integer"),
    ({"checkpoint": "CK", "resume": "yes"}, "resume must be True, False or None"),
    ({"checkpoint": 3}, "checkpoint must be a file path"),
    ({"checkpoint": "DIR"}, "must be a file in an existing directory"),
], ids=["every-alone", "resume-alone", "every-0", "every-float", "resume-str", "path-int",
        "path-dir"])
def test_bad_checkpoint_options_are_refused(options, message, tmp_path):
    paths = {"CK": str(tmp_path / "c"), "DIR": str(tmp_path)}
    options = {k: paths.get(v, v) if isinstance(v, str) else v for k, v in options.items()}
    with pytest.raises(ff.ModelError, match=message):
        compiled("gaussian-vmp").run(iterations=3, **options)


# ----- atomic writing -------------------------------------------------------------------
def test_saving_writes_a_temporary_file_fsyncs_it_and_the_directory_then_renames(
        tmp_path, monkeypatch):
    steps: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        steps.append("fsync-dir" if os.path.isdir(f"/proc/self/fd/{fd}")
                     or Path(os.readlink(f"/proc/self/fd/{fd}")).is_dir() else "fsync-file")
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        assert Path(src).parent == Path(dst).parent and Path(src).name.endswith(".tmp")
        steps.append("replace")
        real_replace(src, dst)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    compiled("gaussian-vmp").run(iterations=2, tolerance=None, checkpoint=tmp_path / "c")
    assert steps == ["fsync-file", "replace", "fsync-dir"] * 2
    assert [p.name for p in tmp_path.iterdir()] == ["c"]


def test_a_failed_save_keeps_the_last_checkpoint_and_no_temporary_file(tmp_path, monkeypatch):
    c, path = compiled("gaussian-vmp"), tmp_path / "c"
    c.run(iterations=4, tolerance=None, checkpoint=path)
    before = path.read_bytes()

    def broken(src: str, dst: str) -> None:
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        c.run(iterations=6, tolerance=None, checkpoint=path)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["c"]


def test_a_temporary_file_left_by_a_killed_writer_is_removed(tmp_path):
    stale = tmp_path / ".c.k3j2_x.tmp"
    stale.write_bytes(b"half a checkpoint")
    other = tmp_path / ".other.k3j2_x.tmp"  # another checkpoint's: left alone
    other.write_bytes(b"")
    compiled("gaussian-vmp").run(iterations=2, checkpoint=tmp_path / "c")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.k3j2_x.tmp", "c"]


# ----- killed with SIGKILL --------------------------------------------------------------
CHILD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from tests.runtime.test_checkpoint import {build}
    compiled = {build}({args}).compile({algorithm!r})
    compiled.run(iterations={iterations}, tolerance=None, checkpoint={path!r}, every=1,
                 on_iteration=lambda i, p: time.sleep({sleep}))
    print("finished")
""")


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="SIGKILL is POSIX")
@pytest.mark.parametrize("n, sleep, kill_at", [(50, 0.05, 5), (2000, 0.0, 40), (None, 0.05, 9)],
                         ids=["slow-sweeps", "saving-all-the-time", "softmax-mid-cycle"])
def test_a_run_killed_with_sigkill_resumes_bit_identical(n, sleep, kill_at, tmp_path):
    """The child saves after every sweep; it is killed once the file holds ``kill_at``
    sweeps or more.  Slow sweeps (60, 0.05 s each): killed between saves, resumed here
    with the child's own arguments, it equals the 60 sweeps of a run never killed.
    Busy (10,000 sweeps of 2,000 points, saving all the time; killed mostly while
    writing): resumed to ``k + 6`` sweeps, it equals a run of ``k + 6`` never killed.
    Softmax over a plate (EP; ``n`` None): killed in the extrapolation's first cycle of
    12 sweeps (at 9 or a little after), the operator's state in the file lets the
    resumed run go on with that cycle, and end equal to a run never killed."""
    path = tmp_path / "run.ckpt"
    iterations = 10_000 if sleep == 0 else 60
    build, args, algorithm = ("gaussian", f"n={n}", "vmp") if n else ("softmax_plate", "", "ep")
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(
        root=str(ROOT), build=build, args=args, algorithm=algorithm, iterations=iterations,
        path=str(path), sleep=sleep)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not (path.exists() and sweeps_in(path) >= kill_at):
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "the child saved no checkpoint in 60 s"
            time.sleep(0.005)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        out, err = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL and b"finished" not in out, err
    killed_at = sweeps_in(path)  # the file is whole: the last checkpoint or the one before
    assert kill_at <= killed_at < iterations
    c = (gaussian(n=n) if n else softmax_plate()).compile(algorithm)
    total = iterations if sleep else killed_at + 6
    calls: list[int] = []
    resumed = c.run(iterations=total, tolerance=None, checkpoint=path, every=1,
                    on_iteration=lambda i, p: calls.append(i))
    assert calls == list(range(killed_at, total))  # only the sweeps left
    assert resumed.iterations == total  # (and a VMP run's trace, of the bound)
    assert len(resumed.trace) == (total if algorithm == "vmp" else 0)
    assert_identical(resumed, c.run(iterations=total, tolerance=None))
    assert [p.name for p in tmp_path.iterdir()] == ["run.ckpt"]  # no temporary file left
