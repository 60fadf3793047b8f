"""Factors, their message operators and the annotations the compiler reads.

A factor is registered once, with its arguments (the first is the one it defines), its
log-density formula and, beside it, one operator per (algorithm, target argument).  The
annotations on an operator (Infer.NET's SkipIfUniform, Proper, Trigger, Fresh, NoInit) are
data: the compiler derives the dependency graph from them and knows nothing else about
any algorithm.

Operator calling convention (the generated code relies on it):

* every operator is called with keyword arguments named after the factor's arguments;
* a known argument (constant or observed) arrives as an array; a random one as a
  ``factorflow.distributions`` object — under EP the message from that variable to this
  factor, under VMP the variable's current marginal (posterior);
* the target argument is passed only if the operator's signature names it (EP operators
  that project a tilted distribution need the incoming message of their target);
* the operator returns the message to its target, a batched distribution;
* an operator with a keyword-only ``previous`` parameter is called with its output's
  current value (the message it sent last time);
* an operator with a keyword-only ``state`` parameter is called with a dict that the
  generated program owns, one per message it computes (its output), empty at the start
  of a run: what the operator keeps from one call to the next (arrays, tuples of them,
  numbers), which ``state()`` returns with the messages, checkpoints save and a resumed
  run gets back (so a resumed run goes on bit-identical); the operator is then not pure
  (the compiler neither repeats nor reorders its calls to refresh a message);
* an operator with keyword-only ``reduce`` and ``weights`` parameters also returns the
  product of its messages raised to ``weights`` (an array over the statement's plates);
* an operator with a keyword-only ``reduce`` parameter is called, under VMP where the
  target's use adds plates, with ``reduce=(plate shape, axes)`` and returns the product
  of its messages over those plate axes (fused: ``factors.common.plate_einsum``);
* an operator may also read a *buffer* of its factor (Infer.NET's ``[Buffers]``): a
  quantity that several operators of one factor share, such as the tilted moments of a
  truncation, computed once per sweep by the buffer's own update (``Factor.buffer``) and
  read ``fresh`` (seed 000: "the message to A can take … B as an argument … the message
  to B must be fresh"), so each operator gets the value it would have computed itself.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from factorflow.errors import UnsupportedFactorError

ALGORITHMS = ("ep", "vmp")

#: the value domains of factor arguments, with the message family each one uses
DOMAIN_FAMILY: Mapping[str, str] = {
    "real": "Gaussian",
    "positive": "Gamma",
    "unit": "Beta",
    "bool": "Bernoulli",
    "int": "Discrete",
    "simplex": "Dirichlet",
    "count": "Poisson",
    "vector": "VectorGaussian",
    "posdef": "Wishart",
}


@dataclass(frozen=True)
class Arg:
    """One argument of a factor: its name and the domain of its values."""

    name: str
    domain: str


@dataclass(frozen=True)
class Operator:
    """A message operator: computes the message from ``factor`` to ``target``.

    ``reads`` are the argument names it takes (from its signature); the annotation sets
    name arguments among ``reads``:

    * ``skip_if_uniform`` — the output is uniform (or useless) while that input is uniform;
    * ``proper`` — the input must be proper, or the operator cannot run;
    * ``trigger`` — whenever that input changes, this message must be recomputed;
    * ``fresh`` — that input must be up to date before this operator runs;
    * ``block`` — under VMP, that input is the message into a block of the mean field that
      this factor spans (a chain's variable: the operator recomputes the block's
      posterior from it), read as it is rather than brought up to date first (Fresh):
      the block's own update reads this operator's target;
    * ``uniform_penalty`` — the output is defined while that input is uniform, but would
      be a poor start (seed 000's third use of SkipIfUniform, as a penalty): the
      initialization schedule computes that input first where it can, and starts from
      its uniform value where it must;
    * ``no_init`` — the message needs no initialisation before the iteration loop: the
      initialization schedule never computes it, and the loop starts from its initial
      (uniform) value, even where another operator requires it.
    """

    factor: str
    algorithm: str
    target: str
    fn: Callable[..., Any]
    reads: tuple[str, ...]
    skip_if_uniform: frozenset[str] = frozenset()
    proper: frozenset[str] = frozenset()
    trigger: frozenset[str] = frozenset()
    fresh: frozenset[str] = frozenset()
    no_init: bool = False
    #: arguments that must be known (constant or observed) for this operator to apply
    known: frozenset[str] = frozenset()
    #: whether ``fn`` takes ``reduce=(plate shape, axes)``: then it returns the product of
    #: its messages over those plate axes, fused (``transforms.messages`` asks for it
    #: under VMP where a variable's use adds plates, instead of a reduction after it)
    reduces: bool = False
    #: see ``block`` above
    block: frozenset[str] = frozenset()
    #: whether ``fn`` takes ``previous=``: the message it sent last time (its output's
    #: current value; not a dependency), so that a VMP operator can divide it out of the
    #: posterior it reads (a block update: ``factors.plate_sum``)
    previous: bool = False
    #: whether ``fn`` takes ``state=``: a dict of its own per message, kept by the
    #: generated program between calls and in checkpoints (see the module docstring)
    state: bool = False
    #: whether its fused form also takes ``weights=`` (per-element exponents, as a gate's
    #: case probabilities): then under VMP its message to a gate clone may be deferred
    #: (``factors.common.Deferred``) and computed by ``Gate.EnterOne`` already weighted
    #: and multiplied over the plate (no per-element messages)
    weights: bool = False
    #: how the message is computed, where that is a choice (a bound, a quadrature): the
    #: generated code shows it in a comment above the call
    method: str = ""
    #: False for a VMP update that is a fixed-point iteration rather than a coordinate
    #: ascent step (non-conjugate VMP): the bound may then fall on the way
    ascent: bool = True
    #: whether ``target`` names a buffer of the factor (a shared intermediate), not an
    #: argument: its update is called like an operator and returns the buffer's value
    buffer: bool = False
    uniform_penalty: frozenset[str] = frozenset()
    #: inputs read only for their shape (a gate clone's cases: which elements, not their
    #: weights): the message's value does not change when they do, so a local loop
    #: (``transforms.local_loop``) computes it once per sweep, not once per pass
    shape_only: frozenset[str] = frozenset()
    #: whether the message holds only where this factor is the only one of its kind on
    #: each element of the target (VMP IsBetween: q(x) is the truncation of x's other
    #: messages); ``transforms.messages`` refuses a second one by name
    sole: bool = False
    #: whether the message is a point mass whatever its inputs (ConstrainTrue's): under
    #: EP the posterior of its target is then that point mass, and the message from the
    #: target to its definition too (``transforms.pruning.fix_certain``)
    certain: bool = False

    @property
    def qualname(self) -> str:
        if self.buffer:
            return f"{self.factor}.{self.target}"
        suffix = {"ep": "average_conditional", "vmp": "average_logarithm"}[self.algorithm]
        return f"{self.factor}.{self.target}_{suffix}"


@dataclass(frozen=True)
class ValueCheck:
    """A check of a factor's known argument values against each other (beyond each
    value's own support), run where the model is written and at every run.

    ``fn`` takes the arguments it names (``reads``) as arrays laid out over the
    statement's plates and returns None, or what is wrong and what to do."""

    fn: Callable[..., str | None]
    reads: tuple[str, ...]

    def run(self, known: Mapping[str, Any]) -> str | None:
        """The problem ``fn`` finds, or None (also when an argument it reads is random)."""
        if any(name not in known for name in self.reads):
            return None
        return self.fn(**{name: known[name] for name in self.reads})


@dataclass
class Factor:
    """A factor type: arguments, log density and operator tables."""

    name: str
    args: tuple[Arg, ...]
    deterministic: bool = False
    log_density: Callable[..., Any] | None = None
    operators: dict[tuple[str, str], Operator] = field(default_factory=dict)
    #: evidence operators by algorithm: ep -> log ∫ f Π m_{v→f}; vmp -> E_q[log f]
    evidence: dict[str, Callable[..., Any]] = field(default_factory=dict)
    #: why an (algorithm, target) has no operator, when that is known (derived factors)
    notes: dict[tuple[str, str], str] = field(default_factory=dict)
    #: how known argument values must relate (a Binomial count within its trials)
    value_check: ValueCheck | None = None
    #: buffers (shared intermediates) by name -> the domain of their values (its message
    #: family holds them); their updates are in ``operators`` with ``buffer=True``
    buffers: dict[str, str] = field(default_factory=dict)

    @property
    def arg_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args)

    def arg(self, name: str) -> Arg:
        for a in self.args:
            if a.name == name:
                return a
        raise KeyError(f"factor {self.name} has no argument {name!r}")

    def _readable(self, name: str) -> None:
        """KeyError unless ``name`` is an argument or a buffer of this factor."""
        if name not in self.buffers:
            self.arg(name)

    def operator(self, algorithm: str, target: str, *, skip_if_uniform: tuple[str, ...] = (),
                 proper: tuple[str, ...] = (), trigger: tuple[str, ...] = (),
                 fresh: tuple[str, ...] = (), no_init: bool = False,
                 known: tuple[str, ...] = (), block: tuple[str, ...] = (),
                 method: str = "", ascent: bool = True,
                 uniform_penalty: tuple[str, ...] = (), sole: bool = False,
                 certain: bool = False, shape_only: tuple[str, ...] = ()
                 ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator registering ``fn`` as the ``algorithm`` message to ``target``;
        ``method`` names how it is computed (shown in the generated code); ``ascent=False``
        marks a VMP update that may lower the bound (see ``Operator.ascent``)."""
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {algorithm!r}")
        self._readable(target)

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            params = inspect.signature(fn).parameters
            # ``*, reduce=None``: the fused form (an argument may still be named reduce)
            fuses, previous, weighs, state = (
                n in params and params[n].kind == params[n].KEYWORD_ONLY
                and params[n].default is None
                for n in ("reduce", "previous", "weights", "state"))
            special = {n for n, flag in (("reduce", fuses), ("previous", previous),
                                         ("weights", weighs), ("state", state)) if flag}
            reads = tuple(n for n in params if n not in special)
            for n in reads:
                self._readable(n)
            self.operators[(algorithm, target)] = Operator(
                self.name, algorithm, target, fn, reads, frozenset(skip_if_uniform),
                frozenset(proper), frozenset(trigger), frozenset(fresh), no_init,
                frozenset(known), fuses, block=frozenset(block), previous=previous,
                state=state, weights=weighs and fuses, method=method, ascent=ascent,
                buffer=target in self.buffers, uniform_penalty=frozenset(uniform_penalty),
                sole=sole, certain=certain, shape_only=frozenset(shape_only))
            return fn

        return register

    def buffer(self, algorithm: str, name: str, domain: str, *,
               skip_if_uniform: tuple[str, ...] = (), proper: tuple[str, ...] = ()
               ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator registering ``fn`` as the ``algorithm`` update of buffer ``name``:
        a value of ``domain``'s message family (over the statement's plates, with any
        trailing batch axes of its own), computed from the factor's arguments (read as
        operators read them), which this factor's operators read by ``name``.
        An operator reading it should declare it ``fresh`` (then the scheduler brings it
        up to date first, and the operator's message is what it would be computed alone).
        """
        if name in self.arg_names:
            raise ValueError(f"buffer {name!r} of {self.name} is named like an argument")
        if domain not in DOMAIN_FAMILY:
            raise ValueError(f"unknown domain {domain!r} for buffer {name!r}")
        self.buffers[name] = domain
        return self.operator(algorithm, name, skip_if_uniform=skip_if_uniform, proper=proper)

    def message(self, algorithm: str, target: str) -> Callable[..., Any]:
        """The operator to ``target`` as a function of the factor's arguments alone: each
        buffer it reads, unless passed, is computed first by the buffer's update (what
        the scheduler's Fresh edges guarantee in a compiled program)."""
        op = self.operators[(algorithm, target)]
        buffers = [b for b in op.reads if b in self.buffers]
        if not buffers:
            return op.fn

        def call(**args: Any) -> Any:
            for b in buffers:
                if b not in args:
                    update = self.operators[(algorithm, b)]
                    args[b] = update.fn(**{r: args[r] for r in update.reads if r in args})
            return op.fn(**args)

        return call

    @contextmanager
    def buffers_inlined(self) -> Iterator[None]:
        """Within the block, each operator of this factor computes the buffers it reads
        itself (no shared work, no Fresh edges): the program as it would be without
        buffers, for comparisons (``benchmarks/bench_scheduling.py``)."""
        saved = dict(self.operators)
        try:
            for key, op in saved.items():
                if op.buffer or not set(op.reads) & set(self.buffers):
                    continue
                reads = tuple(dict.fromkeys(
                    r for b in op.reads for r in (self.operators[(op.algorithm, b)].reads
                                                  if b in self.buffers else (b,))))
                self.operators[key] = replace(op, fn=self.message(op.algorithm, op.target),
                                              reads=reads, fresh=op.fresh - set(self.buffers))
            yield
        finally:
            self.operators.clear()
            self.operators.update(saved)

    def evidence_operator(self, algorithm: str) -> Callable[[Callable[..., Any]],
                                                             Callable[..., Any]]:
        """Decorator registering the evidence term of this factor for ``algorithm``."""

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.evidence[algorithm] = fn
            return fn

        return register

    def check_values(self, fn: Callable[..., str | None]) -> Callable[..., str | None]:
        """Decorator registering ``fn`` as this factor's ``ValueCheck``."""
        reads = tuple(inspect.signature(fn).parameters)
        for n in reads:
            self.arg(n)
        self.value_check = ValueCheck(fn, reads)
        return fn

    def supported_algorithms(self, targets: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(a for a in ALGORITHMS if all((a, t) in self.operators for t in targets))

    def get_operator(self, algorithm: str, target: str, where: str = "") -> Operator:
        """The operator, or UnsupportedFactorError saying which algorithms would work."""
        try:
            return self.operators[(algorithm, target)]
        except KeyError:
            ok = [a for a in ALGORITHMS if (a, target) in self.operators]
            hint = (f"use {' or '.join(repr(a) for a in ok)}" if ok else
                    "no algorithm supports it yet; observe this argument")
            if (algorithm, target) in self.notes:
                hint += f" ({self.notes[(algorithm, target)]})"
            raise UnsupportedFactorError(
                f"{where or self.name}: factor {self.name} has no {algorithm.upper()} message "
                f"to its argument {target!r}; {hint}.") from None


FACTORS: dict[str, Factor] = {}


def define_factor(name: str, *args: tuple[str, str], deterministic: bool = False,
                  log_density: Callable[..., Any] | None = None) -> Factor:
    """Create and register a factor; ``args`` are (name, domain) pairs, output first."""
    if name in FACTORS:
        raise ValueError(f"factor {name!r} is already defined")
    factor = Factor(name, tuple(Arg(n, d) for n, d in args), deterministic, log_density)
    FACTORS[name] = factor
    return factor
