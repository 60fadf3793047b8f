"""The compiler pipeline: one explicit list of named passes, read top to bottom."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from factorflow.ir import Program, check, format_program
from factorflow.model.core import Model
from factorflow.transforms.channels import channels
from factorflow.transforms.fuse_switch import FuseSwitchOptions, fuse_switches
from factorflow.transforms.fusion import fuse
from factorflow.transforms.gates import GateOptions, gates
from factorflow.transforms.linear_sums import split_linear_sums
from factorflow.transforms.local_loop import LocalOptions, local_loops
from factorflow.transforms.lower import Bindings, lower
from factorflow.transforms.messages import messages
from factorflow.transforms.pruning import prune
from factorflow.transforms.schedule_pass import schedule_program
from factorflow.transforms.scheduling import Schedule


@dataclass(frozen=True)
class Stage:
    """One pass: a name and a pure function Program -> Program."""

    name: str
    run: Callable[[Program], Program]


@dataclass
class Compilation:
    """Every intermediate program, by stage name, and the bindings of the model."""

    stages: dict[str, Program] = field(default_factory=dict)
    bindings: Bindings | None = None
    schedule: Schedule | None = None

    def text(self, stage: str) -> str:
        return format_program(self.stages[stage])

    @property
    def final(self) -> Program:
        return list(self.stages.values())[-1]


def pipeline(algorithm: str, user_initialized: frozenset[str] = frozenset(),
             result: Compilation | None = None, gate_options: GateOptions | None = None,
             local: LocalOptions | None = None,
             fuse_switch: FuseSwitchOptions | None = None) -> list[Stage]:
    """The passes after lowering, in order (the schedule is kept on ``result``; with
    ``local``, the local variables' updates become an inner loop of each sweep)."""

    def scheduled(program: Program) -> Program:
        out = schedule_program(program, user_initialized)
        if result is not None:
            result.schedule = out.schedule
        return out.program

    return [
        Stage("fusion", lambda p: fuse_switches(fuse(p, algorithm, user_initialized),
                                                algorithm, user_initialized,
                                                fuse_switch or FuseSwitchOptions())),
        Stage("gates", lambda p: gates(p, replace(gate_options or GateOptions(),
                                                  algorithm=algorithm))),
        # (under VMP a sum of several latents first becomes a combination of their sums)
        Stage("channels", lambda p: channels(split_linear_sums(p, algorithm))),
        Stage("messages", lambda p: messages(p, algorithm)),
        Stage("pruning", prune),
        Stage("schedule", scheduled),
    ] + ([Stage("local", lambda p: local_loops(p, local))] if local is not None else [])


def compile_program(model: Model, algorithm: str, user_initialized: frozenset[str] = frozenset(),
                    debug: bool = False, gate_options: GateOptions | None = None,
                    local: LocalOptions | None = None,
                    fuse_switch: FuseSwitchOptions | None = None) -> Compilation:
    """Lower ``model`` and run every pass; with ``debug`` the verifier runs after each.

    ``user_initialized`` names (model names) the variables whose posteriors the user
    initialises; ``local.variables`` (model names) the variables iterated locally."""
    program, bindings = lower(model)
    user_initialized = frozenset(bindings.names[n] for n in user_initialized)
    if local is not None:
        local = replace(local, variables=tuple(bindings.names[n] for n in local.variables),
                        labels=local.variables)
    result = Compilation({"model": program}, bindings)
    if debug:
        check(program)
    for stage in pipeline(algorithm, user_initialized, result, gate_options, local,
                          fuse_switch):
        program = stage.run(program)
        if debug:
            check(program)
        result.stages[stage.name] = program
    return result
