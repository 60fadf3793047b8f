"""A model's log density as a list of sites: one term per factor statement.

A :class:`Site` is one factor statement of the model: its log density as a term whose
atoms are *accesses* (``data("a3")``), and the gates that mask it. An :class:`Access` is
one place a value is read: a variable (directly, or one element chosen per plate element
by an index: ``means[z]``, ``skill[winner]``), an ``ff.Data``, or a constant. Deterministic
statements are not sites: wherever their output is used, the expression of their inputs
is used instead (``mean = a + c * x`` enters its Gaussian as that sum), so a sample of
their inputs is always read fresh.

Array layout (the same everywhere in ``factorflow.samplers``): the value of a variable
is an array ``(chains, *plate sizes, *event)`` (event ``(K,)`` for a simplex; a category is
stored as its integer); a site's arrays are ``(chains, *site plate sizes, *event)``, with
axes of size 1 where a value does not vary. :meth:`Access.read` brings a value to the
site's layout and :meth:`Access.gather` sums a site's array back onto the variable (over
the plates the variable lacks, or scattered by the index), each one array operation over
the whole plate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from factorflow.errors import ModelError, UnsupportedFactorError
from factorflow.model.core import Data, FactorCall, GateFrame, Indexed, Model, Range, Variable
from factorflow.rewrite.terms import Term, at, const, data, index_sum, sym
from factorflow.samplers.densities import EXPRESSION, K, log_density_term, substitute
from factorflow.samplers.numpy_terms import compile_term

#: an access in a printed term: ``data(a3)`` or ``a3``
_ACCESS = re.compile(r"data\((a\d+)\)|\b(a\d+)\b")


#: the event dimensions of a variable's value, by domain
EVENT_DIMS = {"simplex": 1, "vector": 1, "posdef": 2}


def align(value: np.ndarray, have: tuple[Range, ...], want: tuple[Range, ...],
          event_ndim: int = 0) -> np.ndarray:
    """``value`` laid out ``(chains, *have, *event)`` as ``(chains, *want, *event)`` with
    size-1 axes for the plates of ``want`` it lacks (``have`` must be among ``want``)."""
    lead = value.shape[0]
    order = [have.index(p) for p in want if p in have]
    ev = list(range(1 + len(have), value.ndim))
    arr = value.transpose(0, *(1 + i for i in order), *ev)
    shape = (lead, *(p.size if p in have else 1 for p in want), *value.shape[value.ndim
                                                                            - event_ndim:])
    return arr.reshape(shape)


@dataclass(frozen=True, eq=False)
class Access:
    """One value a site reads: ``source`` (a Variable, a Data or a constant array), at the
    element ``index`` chooses per plate element (None, an int array, a Data, or a random
    category under ``ff.Switch``), inside the plates ``plates``."""

    name: str
    source: Any
    index: Any
    plates: tuple[Range, ...]
    #: the plates the index is laid out over (the statement that indexes)
    index_plates: tuple[Range, ...] = ()
    #: the plate summed inside the site (``ff.sum(x, k)``): its axis comes last, after
    #: the site's plates, and the term reads the access as ``at(data(a), index)``
    inner: tuple[Range, ...] = ()
    #: the event dimensions of a known value (1: a vector, 2: a matrix), after its plates
    event: int = 0

    @property
    def variable(self) -> Variable | None:
        return self.source if isinstance(self.source, Variable) else None

    @property
    def label(self) -> str:
        src = self.source
        if isinstance(src, Variable | Data):
            name = src.name
        else:
            arr = np.asarray(src)
            name = repr(float(arr)) if arr.ndim == 0 else "<array>"
        if self.index is None:
            return name
        index = self.index.name if isinstance(self.index, Variable | Data) else "<index>"
        return f"{name}[{index}]"

    @property
    def domain(self) -> str:
        return self.source.domain if isinstance(self.source, Variable) else "real"

    def index_value(self, values: dict[str, np.ndarray], known: dict[str, Any]) -> np.ndarray:
        """The index laid out over the site's plates (chains first), as integers."""
        idx = self.index
        if isinstance(idx, Variable):
            arr = values[idx.name] if not idx.is_observed else _known(idx.observed, known)[None]
            return align(np.asarray(arr), idx.plates, self.plates).astype(np.intp)
        arr = _known(idx, known).astype(np.intp)
        return align(arr[None], self.index_plates, self.plates)

    def read(self, values: dict[str, np.ndarray], known: dict[str, Any]) -> np.ndarray:
        """The value at the site, ``(chains|1, *site plates|1, *event)``; a category as its
        one-hot vector (for the formulas), a boolean as 0.0 / 1.0."""
        src = self.source
        want = self.plates + self.inner
        if not isinstance(src, Variable):
            arr = _known(src, known)
            if self.event:  # plates right-aligned to the expression's, then the event
                ctx, ev = self.index_plates, arr.shape[arr.ndim - self.event:]
                arr = arr.reshape((1,) * (len(ctx) + self.event - arr.ndim) + arr.shape)
                arr = np.broadcast_to(arr, (*(p.size for p in ctx), *ev))
                return align(arr[None], ctx, want, self.event)
            if self.index_plates == want:  # laid out over the site's plates
                return arr.reshape((1, *arr.shape))
            # inside an expression's plates (scalar arguments): right-aligned to them
            ctx = self.index_plates
            arr = arr.reshape((1,) * (len(ctx) - arr.ndim) + arr.shape)
            return align(np.broadcast_to(arr, tuple(p.size for p in ctx))[None], ctx, want)
        base = values[src.name] if src.name in values else _known(src.observed, known)[None]
        event = EVENT_DIMS.get(src.domain, 0)
        if self.index is None:
            out = align(np.asarray(base), src.plates, want, event)
        else:
            idx = self.index_value(values, known)
            chains = np.arange(base.shape[0]).reshape((-1,) + (1,) * (idx.ndim - 1))
            out = base[chains, idx]
        if src.domain == "int":
            return (out[..., None] == np.arange(src.size)).astype(float)
        return out.astype(float) if src.domain == "bool" else out

    def gather(self, contribution: np.ndarray, values: dict[str, np.ndarray],
               known: dict[str, Any], chains: int, event: tuple[int, ...] = ()) -> np.ndarray:
        """Sum a site array ``(chains|1, *site plates|1, *event)`` onto the variable's
        layout ``(chains, *its plates, *event)``: over the plates it lacks, or scattered
        by the index."""
        var = self.variable
        assert var is not None and not self.inner
        plates = (chains, *(p.size for p in self.plates))
        if self.index is None:
            full = (chains, *var.shape, *event)
            if self.plates == var.plates and np.shape(contribution) == full:
                return contribution  # already the variable's layout
            out = _sum_onto(np.asarray(contribution), chains, self.plates, var.plates,
                            len(event))
            return out if out.shape == full else np.broadcast_to(out, full)
        full = (*plates, *event)
        contribution = np.broadcast_to(contribution, full)
        idx = np.broadcast_to(self.index_value(values, known), plates)
        out = np.zeros((chains, var.plates[0].size, *event))
        lead = np.broadcast_to(np.arange(chains).reshape((-1,) + (1,) * len(self.plates)),
                               idx.shape)
        np.add.at(out, (lead, idx), contribution)
        return out

    @property
    def is_random(self) -> bool:
        """Whether the value read changes between sweeps (a latent variable or index)."""
        return any(isinstance(v, Variable) and not v.is_observed
                   for v in (self.source, self.index))


def _sum_onto(c: np.ndarray, chains: int, site: tuple[Range, ...], var: tuple[Range, ...],
              event_ndim: int) -> np.ndarray:
    """Sum ``c`` (laid out over ``site`` plates + event, broadcastable) over the plates
    ``var`` lacks (an axis of size 1 counts its plate size times, never broadcast),
    then lay the rest out in ``var``'s order (axes of size 1 stay: broadcast it)."""
    ndim = 1 + len(site) + event_ndim
    c = c.reshape((1,) * (ndim - c.ndim) + c.shape)
    real, factor = [], 1
    for axis, p in enumerate(site, start=1):
        if p not in var:
            if c.shape[axis] == 1:
                factor *= p.size
            else:
                real.append(axis)
    if real:
        c = c.sum(axis=tuple(real), keepdims=True)
    if factor != 1:
        c = c * factor
    kept = [p for p in site if p in var]
    c = c.reshape((c.shape[0], *(c.shape[1 + i] for i, p in enumerate(site) if p in var),
                   *c.shape[1 + len(site):]))
    if kept != list(var):
        perm = [kept.index(p) for p in var]
        c = c.transpose(0, *(1 + i for i in perm), *range(1 + len(var), c.ndim))
    return c


def _known(value: Any, known: dict[str, Any]) -> np.ndarray:
    if isinstance(value, Data):
        v = known.get(value.name)
        if v is None:
            raise ModelError(f"Data {value.name!r} has no value; give it with "
                             f"data={{{value.name!r}: ...}}.")
        return np.asarray(v, dtype=float)
    return np.asarray(value, dtype=float)


@dataclass(eq=False)
class Site:
    """One factor statement of the log density: ``term`` over its accesses' names (all
    as ``data``), its plates and the gates that mask it."""

    statement: FactorCall
    term: Term
    accesses: dict[str, Access]
    plates: tuple[Range, ...]
    gates: tuple[GateFrame, ...]
    #: the term of each argument of the factor (over the accesses' names)
    arguments: dict[str, Term] = field(default_factory=dict)
    #: a factor read natively, not through its term (a VectorGaussian prior, see
    #: :mod:`.linear`): its term is 0 and only its own output may be random
    native: bool = False
    #: a native VectorGaussian's sample and mean as affine forms, and its precision's
    #: access (see ``_Builder.vector_gaussian``)
    vectors: dict[str, Any] = field(default_factory=dict)
    _terms: dict[str, Term] = field(default_factory=dict, repr=False)
    _static: Any = field(default=None, repr=False)

    @property
    def label(self) -> str:
        out = self.statement.output
        name = out.name if out is not None else "constraint"
        return f"{self.statement.factor}({name})"

    def describe(self, text: str) -> str:
        """``text`` (a term, an error) with each access name replaced by what it reads:
        ``data(a3)`` and ``a3`` become ``mu``, ``means[z]`` or a constant's value."""
        def label(match: re.Match[str]) -> str:
            a = self.accesses.get(match.group(1) or match.group(2))
            return match.group(0) if a is None else a.label

        return _ACCESS.sub(label, text)

    def accesses_of(self, var: Variable) -> list[Access]:
        return [a for a in self.accesses.values() if a.source is var]

    def reads(self, var: Variable) -> bool:
        """Whether ``var`` enters this site: as a value, an index or a gate condition."""
        return (any(a.source is var or a.index is var for a in self.accesses.values())
                or any(g.condition is var for g in self.gates))

    def log_density(self, env: dict[str, np.ndarray]) -> np.ndarray:
        """The site's log density over its layout, from its accesses' values ``env``."""
        if "density" not in self._terms:
            self._compiled = compile_term(self.term)[0]
            self._terms["density"] = self.term
        return self._compiled(env)

    def term_for(self, access: Access) -> Term:
        """The site's term with ``access`` as the random symbol and the rest as data; the
        other direct reads of the same variable (``x + 2 * x``) are that symbol too."""
        if access.name not in self._terms:
            same = {a.name: sym(access.name) for a in self.accesses.values()
                    if a.source is access.source and a.index is None and access.index is None}
            self._terms[access.name] = substitute(self.term, {**same,
                                                              access.name: sym(access.name)})
        return self._terms[access.name]

    def environment(self, values: dict[str, np.ndarray], known: dict[str, Any],
                    skip: Any = ()) -> dict[str, np.ndarray]:
        """Every access's value at the site (but those named in ``skip``): the random ones
        read from
        ``values``, the known ones read once per run (``known`` is the run's data)."""
        cached = self._static
        if cached is None or cached[0] is not known:
            cached = self._static = (known, {name: a.read(values, known)
                                             for name, a in self.accesses.items()
                                             if not a.is_random},
                                     [(name, a) for name, a in self.accesses.items()
                                      if a.is_random])
        env = dict(cached[1])
        for name, a in cached[2]:
            if name not in skip:
                env[name] = a.read(values, known)
        return env

    def mask(self, values: dict[str, np.ndarray], known: dict[str, Any]) -> np.ndarray | None:
        """1.0 where every gate around the site is on, else 0.0 (None: no gate)."""
        out = None
        for g in self.gates:
            c = g.condition
            arr = values[c.name] if c.name in values else _known(c.observed, known)[None]
            arr = align(np.asarray(arr), c.plates, self.plates)
            on = ((arr == 0) if g.negated else (arr != 0)) if g.kind == "if" else arr == g.value
            out = on if out is None else out & on
        return None if out is None else out.astype(float)


def read_sites(statements: list[FactorCall], definitions: dict[str, int]) -> list[Site]:
    """Every factor statement that is not deterministic, as a Site; ``definitions``
    counts the statements defining each variable (several: an exit variable of a gate).

    Raises UnsupportedFactorError naming the statement for a factor with no log-density
    formula, a deterministic factor that is not an expression (``>``, logic), or a
    constraint."""
    builder = _Builder(statements, definitions)
    return [builder.site(call) for call in statements if not _is_expression(call)]


def read_site(call: FactorCall, statements: list[FactorCall],
              definitions: dict[str, int]) -> Site:
    """The site of ``call`` (which need not be among ``statements``), its deterministic
    arguments expanded by their definitions in ``statements``."""
    return _Builder(statements, definitions).site(call)


def model_statements(model: Model) -> tuple[list[FactorCall], dict[str, int]]:
    """The statements of ``model`` and the number of definitions of each variable."""
    return list(model.statements), {k: len(v) for k, v in model.definitions.items()}


def _is_expression(call: FactorCall) -> bool:
    return call.output is not None and call.output.derived


class _Builder:
    def __init__(self, statements: list[FactorCall], definitions: dict[str, int]) -> None:
        self.definitions = definitions
        self.count = 0
        self.defining = {c.output.name: c for c in statements
                         if c.output is not None and c.output.derived}

    def site(self, call: FactorCall) -> Site:
        if call.factor == "VectorGaussian" and call.output is not None:
            return self.vector_gaussian(call)
        formula = log_density_term(call.factor)
        if formula is None or call.output is None:
            raise UnsupportedFactorError(
                f"{call.provenance or call.factor}: factor {call.factor}"
                f"{f' (defining {call.output.name!r})' if call.output is not None else ''} "
                "has no log-density formula, so Gibbs sampling cannot use it; use 'ep' or "
                "'vmp'.")
        accesses: dict[str, Access] = {}
        args = {name: self.term(value, call.plates, accesses, call)
                for name, value in call.args.items()}
        first = next(iter(_factor_args(call.factor)))
        args[first] = self.term(call.output, call.plates, accesses, call)
        gates = tuple(f for f in call.frames if isinstance(f, GateFrame) and f.kind != "switch")
        out = call.output
        if not out.is_observed and self.definitions.get(out.name, 0) == 1:
            gates = ()  # the prior of a variable local to its gates applies in every case
        return Site(call, formula(**args), accesses, call.plates, gates, args)

    def vector_gaussian(self, call: FactorCall) -> Site:
        """A VectorGaussian statement, read natively by the joint Gaussian draw of the
        vector variables in it (:mod:`.linear`): its sample and mean are affine in them
        (a variable, a known vector, ``B @ z``, ``a + b``), its precision known. Its
        ``vectors`` hold each as a form: ``("read", access name)``, ``("matvec", matrix
        access name, form)`` or ``("plus", form, form)``."""
        precision = call.args["precision"]
        if isinstance(precision, Indexed) or (isinstance(precision, Variable)
                                              and not precision.is_observed):
            raise UnsupportedFactorError(
                f"{call.provenance or call.factor}: Gibbs sampling reads a VectorGaussian "
                f"({call.output.name!r}) only with a known precision; use 'ep' or 'vmp'.")
        accesses: dict[str, Access] = {}
        forms = {arg: self.vector_form(call.output if arg == "sample" else call.args[arg],
                                       accesses, call)
                 for arg in ("sample", "mean")}
        value = precision.observed if isinstance(precision, Variable) else precision
        forms["precision"] = self.access(value, None, call.plates, accesses, call,
                                         event=2).payload[0]
        return Site(call, const(0.0), accesses, call.plates, (), native=True, vectors=forms)

    def vector_form(self, value: Any, accesses: dict[str, Access], call: FactorCall) -> Any:
        if isinstance(value, Variable) and value.derived:
            definition = self.defining[value.name]
            args = definition.args
            if definition.factor == "MatrixVectorProduct":
                matrix = self.access(args["matrix"], None, call.plates, accesses, call,
                                     event=2)
                return ("matvec", matrix.payload[0], self.vector_form(args["vector"],
                                                                      accesses, call))
            if definition.factor == "VectorPlus":
                return ("plus", self.vector_form(args["a"], accesses, call),
                        self.vector_form(args["b"], accesses, call))
            raise UnsupportedFactorError(
                f"{definition.provenance or call.provenance}: Gibbs sampling reads the "
                f"vector {value.name!r} ({definition.factor}) only as B @ z or a + b.")
        if isinstance(value, Indexed):
            raise UnsupportedFactorError(
                f"{call.provenance}: Gibbs sampling does not read {value.base.name}[...] in a "
                "VectorGaussian.")
        event = 0 if isinstance(value, Variable) else 1
        return ("read", self.access(value, None, call.plates, accesses, call,
                                    event=event).payload[0])

    def access(self, source: Any, index: Any, ctx: tuple[Range, ...],
               accesses: dict[str, Access], call: FactorCall,
               inner: tuple[Range, ...] = (), event: int = 0) -> Term:
        self.count += 1
        name = f"a{self.count}"
        accesses[name] = Access(name, source, index, call.plates, ctx, inner, event)
        return at(data(name), plate_index(inner[0])) if inner else data(name)

    def term(self, value: Any, ctx: tuple[Range, ...], accesses: dict[str, Access],
             call: FactorCall, inner: tuple[Range, ...] = ()) -> Term:
        """The term of the argument ``value`` written inside the plates ``ctx`` (inside
        ``ff.sum`` over the plate ``inner``: the access carries that plate's index)."""
        if isinstance(value, Indexed):
            if value.base.derived:
                raise UnsupportedFactorError(
                    f"{call.provenance}: Gibbs sampling reads {value.base.name}[...] only "
                    "for a sampled or observed variable, not a deterministic one.")
            if inner:
                raise UnsupportedFactorError(
                    f"{call.provenance}: Gibbs sampling does not read {value.base.name}[...] "
                    f"inside ff.sum over {inner[0].name!r}; sum a plate variable instead.")
            return self.access(value.base, value.index, ctx, accesses, call)
        if isinstance(value, Variable) and value.derived:
            definition = self.defining[value.name]
            if definition.factor == "PlateSum":
                return self.plate_sum(definition, accesses, call, inner)
            if definition.factor == "InnerProduct":
                return self.inner_product(definition, accesses, call, inner)
            if definition.factor not in EXPRESSION:
                raise UnsupportedFactorError(
                    f"{definition.provenance or value.name}: the deterministic variable "
                    f"{value.name!r} ({definition.factor}) is not an expression Gibbs "
                    "sampling can read; use 'ep' or 'vmp'.")
            if self.definitions.get(value.name, 0) > 1:
                raise UnsupportedFactorError(
                    f"{value.name!r} is defined in several branches of a gate; Gibbs sampling "
                    "reads only deterministic variables with one definition.")
            parts = {k: self.term(v, definition.plates, accesses, call, inner)
                     for k, v in definition.args.items()}
            return EXPRESSION[definition.factor](**parts)
        return self.access(value, None, ctx, accesses, call, inner)

    def plate_sum(self, definition: FactorCall, accesses: dict[str, Access],
                  call: FactorCall, inner: tuple[Range, ...]) -> Term:
        """``ff.sum(x, k)`` as ``Σ_k`` over the term of ``x``, whose accesses carry the
        plate ``k`` as their last axis (one summed plate per site)."""
        array = definition.args["array"]
        summed = array.plates[-1]
        if inner or any(a.inner for a in accesses.values()):
            raise UnsupportedFactorError(
                f"{definition.provenance or call.provenance}: Gibbs sampling reads one "
                f"ff.sum per statement ({call.factor} of {call.output.name!r}); give the "
                "other sum its own variable.")
        body = self.term(array, array.plates, accesses, call, (summed,))
        return index_sum(body, plate_index(summed))


    def inner_product(self, definition: FactorCall, accesses: dict[str, Access],
                      call: FactorCall, inner: tuple[Range, ...]) -> Term:
        """``ff.inner(a, b)`` as ``Σ_k a_k b_k`` over the vectors' last axis (a vector
        variable, or a known vector per plate element: a design-matrix row)."""
        if inner:
            raise UnsupportedFactorError(
                f"{definition.provenance or call.provenance}: Gibbs sampling does not read "
                f"an inner product inside ff.sum over {inner[0].name!r}.")
        parts = []
        for value in definition.args.values():
            if isinstance(value, Indexed) or (isinstance(value, Variable) and value.derived):
                raise UnsupportedFactorError(
                    f"{definition.provenance or call.provenance}: Gibbs sampling reads an "
                    "inner product of a vector variable and a known vector only.")
            known = not isinstance(value, Variable)
            term = self.access(value, None, definition.plates, accesses, call,
                               event=1 if known else 0)
            parts.append(at(term, K))
        return index_sum(parts[0] * parts[1], K)


def plate_index(plate: Range) -> str:
    """The term index of the plate summed by ``ff.sum`` (the last axis of its accesses)."""
    return f"sum_{plate.name}"


def _factor_args(factor: str) -> tuple[str, ...]:
    from factorflow.factors.registry import FACTORS

    return FACTORS[factor].arg_names
