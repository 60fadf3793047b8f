"""Checkpoint and resume: the whole state of a run, saved atomically every k sweeps.

``compiled.run(..., checkpoint=path, every=k)`` saves, after every k-th sweep and after
the last one, what the generated program's ``state()`` returns (every message and
posterior, what each stateful operator keeps between calls — ``Operator.state``, as the
softmax's extrapolation history — and where the run is: loop and sweeps done) together
with the convergence
monitor's own state (previous posteriors, trace, count, ...).  Passed back as the
program's ``resume=``, that state replaces the initialisation, and the run goes on
with the next sweep; so a run killed at any moment and started again with the same
arguments ends bit-identical to one that was never interrupted (every message,
posterior, the log evidence, the trace, the iteration count and ``converged``).

The file (whatever its suffix) is a NumPy ``.npz`` archive read with
``allow_pickle=False``, so loading one runs no code: ``header``, a JSON text (format
and version, the fingerprint of the run, the position, and the state as a tree whose
leaves are arrays named ``a0``, ``a1``, ...), and the arrays.  Each array keeps its
memory layout (strides, broadcast axes) as well as its values, since
NumPy's reductions add in an order that depends on the layout (``prod_over`` scales a
broadcast axis instead of summing it), and bit-identical needs the same order.

Writing is atomic: the archive goes to a temporary file in the same directory, which is
flushed and ``os.fsync``-ed, then ``os.replace``-d onto ``path``, and the directory is
fsync-ed too, so ``path`` always holds one complete checkpoint, the old one or the new
one, whenever the process dies.  A temporary file left by a killed writer is removed by
the next run that uses the same checkpoint.

The fingerprint names what makes two runs the same run: the algorithm, the generated
program (its source with provenance — comments and messages quoting the model's lines —
left out, so editing the script around the model does not matter), the plate sizes,
every data value (observed and ``ff.Data``), the initial posteriors, the damping and the
tolerance.  A checkpoint of another run is refused with ``ff.CheckpointError`` naming
what differs; ``iterations`` may differ (a finished run can be continued for more).
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

import factorflow.distributions as dist
from factorflow.codegen.names import display
from factorflow.codegen.python import generate
from factorflow.distributions.base import Distribution
from factorflow.errors import CheckpointError, ModelError
from factorflow.factors.common import Deferred
from factorflow.ir import Stmt
from factorflow.runtime.kernels import NAMESPACE

#: what the header's "format" says, and the version of the layout this module writes
FORMAT, VERSION = "factorflow checkpoint", 1


# ----- the fingerprint of a run ----------------------------------------------------------
def _digest_value(value: Any) -> str:
    """A digest of a data value, an initial posterior or a plain setting: its type,
    dtype, shape and bytes (never ``repr`` of an array, which abbreviates)."""
    h = hashlib.sha256()

    def feed(v: Any) -> None:
        if isinstance(v, Distribution | dist.PointMass):
            h.update(f"<{type(v).__name__}>".encode())
            feed(v.__getstate__())
        elif isinstance(v, dict):
            h.update(b"{")
            for key in sorted(v, key=str):
                h.update(f"{key!r}:".encode())
                feed(v[key])
            h.update(b"}")
        elif isinstance(v, list | tuple):
            h.update(f"<{type(v).__name__} {len(v)}>".encode())
            for item in v:
                feed(item)
        elif isinstance(v, np.ndarray | np.generic | int | float) and (
                a := np.asarray(v)).dtype.kind != "O":
            h.update(f"{a.dtype.str}{a.shape}".encode())
            h.update(np.ascontiguousarray(a).tobytes())
        else:
            h.update(repr(v).encode())
    feed(value)
    return h.hexdigest()


def _without_provenance(nodes: tuple[Any, ...]) -> tuple[Any, ...]:
    """``nodes`` with every statement's provenance (the model line it quotes) blank."""
    out = []
    for node in nodes:
        if isinstance(node, Stmt):
            node = dataclasses.replace(node, provenance="")
        else:  # a loop or block: its statement lists, blanked too
            node = dataclasses.replace(node, **{
                f.name: _without_provenance(getattr(node, f.name))
                for f in dataclasses.fields(node) if f.name in ("body", "init")})
        out.append(node)
    return tuple(out)


def fingerprint(compiled: Any, values: dict[str, Any], sizes: dict[str, int],
                init: dict[str, Any], damping: dict[str | None, float] | None,
                tolerance: float | None) -> dict[str, Any]:
    """What makes a run the same run (see the module docstring), by part: plain
    settings as text, the program and every value as a digest (data by label)."""
    program = compiled.compilation.final
    bare = dataclasses.replace(program, body=_without_provenance(program.body),
                               _by_name={})
    source = generate(bare, frozenset(NAMESPACE)).source
    labels = {d.name: d.label for d in program.decls if d.label}

    def named(idents: dict[str, Any]) -> dict[str, Any]:
        """By the user's label where it names one ident only, else by the ident."""
        items = sorted(idents.items())
        shown = [labels.get(k, display(k)) for k, _ in items]
        return {(s if shown.count(s) == 1 else display(k)): v
                for (k, v), s in zip(items, shown, strict=True)}
    return {
        "algorithm": compiled.algorithm,
        "program": hashlib.sha256(source.encode()).hexdigest(),
        "sizes": named({k: int(v) for k, v in sizes.items()}),
        "data": named({k: _digest_value(v) for k, v in values.items()}),
        "init": {k: _digest_value(v) for k, v in sorted(init.items())},
        "damping": None if damping is None else
        {("*" if k is None else k): v for k, v in sorted(damping.items(), key=str)},
        "tolerance": tolerance,
    }


def _differences(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What differs between two fingerprints, in words naming the part (and the data
    or variable) that differs."""
    out = []
    for part in ("algorithm", "program", "sizes", "data", "init", "damping", "tolerance"):
        a, b = saved.get(part), now.get(part)
        if a == b:
            continue
        if part == "program":
            out.append("the generated program (the model changed)")
        elif part in ("data", "init", "sizes") and isinstance(a, dict) and isinstance(b, dict):
            names = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            what = {"data": "the data of", "init": "the initial posterior of",
                    "sizes": "the size of plate"}[part]
            detail = [f"{k!r}" + (f" ({a.get(k)} then, {b.get(k)} now)"
                                  if part == "sizes" else "") for k in names]
            out.append(f"{what} {', '.join(detail)}")
        else:
            out.append(f"the {part} ({a!r} then, {b!r} now)")
    return out


# ----- encoding a state: a JSON tree whose leaves are layout-keeping arrays ---------------
class _Encoder:
    """Turns a state (dicts, tuples, lists, distributions, arrays, numbers, strings)
    into a JSON tree and a dict of arrays; the arrays' layouts go in the tree."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}

    def array(self, a: np.ndarray) -> dict[str, Any]:
        key = f"a{len(self.arrays)}"
        broadcast = [i for i, (n, s) in enumerate(zip(a.shape, a.strides, strict=True))
                     if s == 0 and n > 1]
        # a broadcast axis is saved once (its one value), and broadcast again on loading
        compact = a[tuple(slice(0, 1) if i in broadcast else slice(None)
                          for i in range(a.ndim))]
        self.arrays[key] = np.ascontiguousarray(compact)
        return {"array": key, "shape": list(a.shape), "strides": list(a.strides)}

    def encode(self, v: Any) -> Any:
        if isinstance(v, Deferred):  # a message kept as its call: saved as its value
            v = v.value()
        if isinstance(v, Distribution | dist.PointMass):
            return {"family": type(v).__name__, "slots": self.encode(v.__getstate__())}
        if isinstance(v, np.ndarray):
            return self.array(v)
        if isinstance(v, np.generic):
            return {"scalar": self.array(np.asarray(v))}
        if isinstance(v, tuple):
            return {"tuple": [self.encode(x) for x in v]}
        if isinstance(v, list):
            return [self.encode(x) for x in v]
        if isinstance(v, dict):
            return {"dict": [[k, self.encode(x)] for k, x in v.items()]}
        if v is None or isinstance(v, bool | int | float | str):
            return v
        raise CheckpointError(f"cannot save a value of type {type(v).__name__} in a "
                              "checkpoint (report this model).")


def _families() -> dict[str, type]:
    """The classes a checkpoint may name: the distributions, nothing else."""
    return {name: cls for name in dir(dist) if isinstance(cls := getattr(dist, name), type)
            and issubclass(cls, Distribution | dist.PointMass)}


def _rebuild(meta: dict[str, Any], values: np.ndarray) -> np.ndarray:
    """An array with the saved shape and strides holding ``values`` (broadcast along
    the axes that were broadcast, and then read-only)."""
    shape, strides = tuple(meta["shape"]), tuple(meta["strides"])
    item = values.dtype.itemsize
    low = sum((n - 1) * s for n, s in zip(shape, strides, strict=True) if s < 0)
    high = sum((n - 1) * s for n, s in zip(shape, strides, strict=True) if s > 0) + item
    if 0 in shape:
        return np.empty(shape, values.dtype)
    buffer = np.empty(-(-(high - low) // item), values.dtype)
    base = buffer[-low // item:] if low else buffer
    out = as_strided(base, shape=shape, strides=strides)
    np.copyto(out, values)
    if 0 in strides:  # a broadcast view, read-only as np.broadcast_to makes it
        out.flags.writeable = False
    return out


def _decode(tree: Any, arrays: Any, families: dict[str, type]) -> Any:
    if isinstance(tree, list):
        return [_decode(x, arrays, families) for x in tree]
    if not isinstance(tree, dict):
        return tree
    if "array" in tree:
        return _rebuild(tree, arrays[tree["array"]])
    if "scalar" in tree:
        return _decode(tree["scalar"], arrays, families)[()]
    if "tuple" in tree:
        return tuple(_decode(x, arrays, families) for x in tree["tuple"])
    if "dict" in tree:
        return {k: _decode(x, arrays, families) for k, x in tree["dict"]}
    cls = families.get(tree.get("family", ""))
    if cls is None:
        raise CheckpointError(f"the checkpoint names an unknown family {tree.get('family')!r}.")
    obj = cls.__new__(cls)
    obj.__setstate__(_decode(tree["slots"], arrays, families))
    return obj


# ----- the file ----------------------------------------------------------------------------
def write_atomically(path: Path, header: dict[str, Any], arrays: dict[str, np.ndarray]
                     ) -> None:
    """Write the archive to a temporary file beside ``path`` (flush, fsync), rename it
    onto ``path`` (``os.replace``, atomic), then fsync the directory: ``path`` holds the
    old checkpoint or the new one, complete, whenever the process dies."""
    directory = path.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, header=np.array(json.dumps(header)), **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if hasattr(os, "O_DIRECTORY"):  # POSIX: make the rename itself durable
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def read(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(header, state tree decoded) of the checkpoint at ``path``; CheckpointError for
    a file that is not one (no code runs: ``allow_pickle=False``)."""
    try:
        with np.load(path, allow_pickle=False) as f:
            header = json.loads(str(f["header"][()]))
            if not isinstance(header, dict) or header.get("format") != FORMAT:
                raise CheckpointError(f"{path} is not a factorflow checkpoint.")
            if header.get("version") != VERSION:
                raise CheckpointError(f"{path} is a checkpoint of layout version "
                                      f"{header.get('version')}; this factorflow reads "
                                      f"version {VERSION}.")
            state = _decode(header["state"], f, _families())
    except CheckpointError:
        raise
    except Exception as exc:  # not an npz, no header, bad JSON, missing arrays
        raise CheckpointError(f"{path} is not a factorflow checkpoint ({exc}).") from None
    return header, state


# ----- a checkpointed run --------------------------------------------------------------------
class Checkpointer:
    """The hook a checkpointed run passes to the generated loop: calls the monitor,
    then saves the state after every ``every``-th sweep, the last one, and the one the
    monitor stops at.  ``resume`` is the saved state to pass to the program (or None)."""

    def __init__(self, path: Path, every: int, monitor: Any, iterations: int,
                 fingerprint: dict[str, Any], resume: dict[str, Any] | None) -> None:
        self.path, self.every, self.monitor = path, every, monitor
        self.iterations, self.fingerprint, self.resume = iterations, fingerprint, resume

    def __call__(self, iteration: int, posteriors: dict[str, Any], evidence: Any,
                 state: Any = None, internal: dict[str, Any] | None = None) -> bool:
        stop = self.monitor(iteration, posteriors, evidence, state, internal)
        sweeps = iteration + 1
        if state is not None and (stop or sweeps % self.every == 0
                                  or sweeps == self.iterations):
            self.save(state(), stop)
        return stop

    def save(self, state: dict[str, Any], stopped: bool) -> None:
        encoder = _Encoder()
        monitor = {name: getattr(self.monitor, name) for name in self.monitor.STATE}
        header = {"format": FORMAT, "version": VERSION, "fingerprint": self.fingerprint,
                  "loop": state["loop"], "sweeps": state["sweeps"], "stopped": stopped,
                  "state": encoder.encode({"messages": state["messages"],
                                           "operators": state.get("operators", {}),
                                           "monitor": monitor})}
        write_atomically(self.path, header, encoder.arrays)


def _check_every(every: Any) -> int:
    if isinstance(every, bool) or not isinstance(every, int | np.integer) or every < 1:
        raise ModelError(f"every must be a positive integer (save after every k-th "
                         f"sweep), got {every!r}.")
    return int(every)


def open_checkpoint(checkpoint: Any, every: Any, resume: Any, monitor: Any,
                    iterations: int, fingerprint: dict[str, Any]) -> Checkpointer:
    """The hook of a run checkpointed at ``checkpoint`` (see ``CompiledModel.run``).

    ``resume``: None resumes from the file if it exists, True requires it, False
    starts afresh (the file is overwritten at the first save).  Resuming restores the
    monitor's state into ``monitor`` and sets ``Checkpointer.resume`` to the program's
    state.  CheckpointError when the file is not a checkpoint, was written by another
    run (naming what differs), or holds more sweeps than ``iterations``."""
    if not isinstance(checkpoint, str | os.PathLike):
        raise ModelError(f"checkpoint must be a file path, got {checkpoint!r}.")
    if resume is not None and not isinstance(resume, bool):
        raise ModelError(f"resume must be True, False or None, got {resume!r}.")
    path = Path(os.fspath(checkpoint)).absolute()
    if path.is_dir() or not path.parent.is_dir():
        raise ModelError(f"checkpoint {str(path)!r} must be a file in an existing "
                         "directory.")
    every = _check_every(1 if every is None else every)
    for stale in glob.glob(glob.escape(str(path.parent / f".{path.name}.")) + "*.tmp"):
        with contextlib.suppress(FileNotFoundError):  # left by a writer that was killed
            os.unlink(stale)
    saved: dict[str, Any] | None = None
    if resume is not False and path.exists():
        header, state = read(path)
        differ = _differences(header["fingerprint"], fingerprint)
        if differ:
            raise CheckpointError(
                f"checkpoint {str(path)!r} was written by another run; what differs: "
                f"{'; '.join(differ)}.  Pass resume=False to start afresh (the file is "
                "then overwritten), or another path.")
        if header["sweeps"] > iterations:
            raise CheckpointError(
                f"checkpoint {str(path)!r} holds {header['sweeps']} sweeps, more than "
                f"iterations={iterations}; run with iterations >= {header['sweeps']}, or "
                "resume=False to start afresh.")
        for name in monitor.STATE:  # (a checkpoint from before a field existed: as new)
            setattr(monitor, name, state["monitor"].get(name, getattr(monitor, name)))
        saved = {"loop": header["loop"], "sweeps": header["sweeps"],
                 "stopped": header["stopped"], "messages": state["messages"],
                 "operators": state.get("operators", {})}
    elif resume is True:
        raise CheckpointError(f"resume=True, but there is no checkpoint at "
                              f"{str(path)!r}; leave resume out to start afresh.")
    return Checkpointer(path, every, monitor, iterations, fingerprint, saved)
