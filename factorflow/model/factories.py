"""Variable factories (``ff.Gaussian(name, ...)``) and deterministic operations.

Each factory validates its arguments where they are written, so that an error names the
variable and says what to do before anything is compiled.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np

from factorflow.errors import DataError, ModelError
from factorflow.model.chains import (
    Affine,
    Table,
    affine,
    is_chain_term,
    is_offset_read,
    offset_read_error,
    open_chain,
)
from factorflow.model.chains import define as define_chain
from factorflow.model.checks import (
    broadcasts_to,
    check_data_value,
    check_statement,
    check_support,
    numeric_array,
    read_elements,
)
from factorflow.model.core import (
    Data,
    DataUse,
    FactorCall,
    Indexed,
    Model,
    Variable,
    _provenance,
    current_model,
)
from factorflow.model.gates import check_defined_for, open_switch
from factorflow.model.links import Link, observe_through
from factorflow.model.missing import only_where_seen, split_masked

Operand = Variable | Indexed | Data | np.ndarray


# ----- validation of known values (see model.checks) ---------------------------------
#: the domains whose values have an event shape set by the variable's ``size``
SIZED_DOMAINS = ("simplex", "int", "vector", "posdef")


def event_shape(domain: str, size: int | None) -> tuple[int, ...]:
    if not size:
        return ()
    return {"simplex": (size,), "vector": (size,), "posdef": (size, size)}.get(domain, ())


def _operand(model: Model, value: Any, domain: str, what: str,
             size: int | None = None) -> Operand:
    """Validate one factor argument written inside the current plates."""
    plates = model.plates
    if isinstance(value, Link):
        if value.function != "logistic" or domain != "unit":
            value.refuse(what)
        # σ(x) as the probability of a factor with no fused logistic form (Binomial,
        # NegativeBinomial): the derived variable, which Gibbs samples by Pólya-Gamma
        value = logistic_variable(value.arg)
    if isinstance(value, Variable):
        if value.model is not model:
            raise ModelError(f"{what}: variable {value.name!r} belongs to another model; "
                             "use variables of the model being built.")
        if any(p not in plates for p in value.plates):
            missing = [p.name for p in value.plates if p not in plates]
            raise ModelError(f"{what}: variable {value.name!r} is indexed by {missing} but "
                             "is used outside that plate; index it, or move the statement "
                             "inside `with ff.Plate(...)`.")
        _check_domain(value, domain, what)
        check_defined_for(model, value, what)
        known = _condition_value(model, value)
        return known if known is not None else _in_case(model, value)
    if isinstance(value, Affine) or is_offset_read(value):
        raise offset_read_error(value.previous if isinstance(value, Affine) else value, what)
    if isinstance(value, Indexed) and isinstance(value.base, Table):
        return _table_operand(model, value, domain, what, size)
    if isinstance(value, Indexed) and _case_value(model, value.index) is not None:
        # array[z] under ff.Case(z, k) (and no Switch on z) is array[k]
        k = _case_value(model, value.index)
        return _operand(model, Indexed(value.base, np.full(tuple(p.size for p in plates), k)),
                        domain, what, size)
    if isinstance(value, Indexed):
        base = value.base
        if base.model is not model:
            raise ModelError(f"{what}: variable {base.name!r} belongs to another model.")
        if len(base.plates) != 1:
            raise ModelError(f"{what}: {base.name}[...] needs a variable with one plate axis.")
        _check_domain(base, domain, what)
        index = value.index
        k = _case_value(model, index) if open_switch(model, index) is not None else None
        if k is not None:  # ff.Case(z, k) inside ff.Switch(z): z is k there
            check_defined_for(model, base, what)
            return Indexed(base, np.full(tuple(p.size for p in plates), k, dtype=int))
        if isinstance(index, Variable):
            if open_switch(model, index) is None:
                raise ModelError(f"{what}: indexing {base.name!r} by the random variable "
                                 f"{index.name!r} needs `with ff.Switch({index.name}):`.")
            if base.plates[0].size != index.size:
                raise ModelError(f"{what}: ff.Switch({index.name}) has {index.size} cases "
                                 f"but {base.name!r} has {base.plates[0].size} elements "
                                 f"over range {base.plates[0].name!r}; they must match.")
            check_defined_for(model, base, what)
            return value
        if isinstance(index, Data):
            _use_data(model, index, DataUse(f"the index into {base.name!r}", "int",
                                            tuple(p.size for p in plates), True,
                                            base.plates[0].size))
            return value
        arr = check_support(index, "int", f"index of {base.name}", size=base.plates[0].size)
        shape = tuple(p.size for p in plates)
        if not broadcasts_to(arr.shape, shape):
            raise DataError(f"{what}: the index into {base.name!r} has shape {arr.shape}, "
                            f"which does not broadcast to the shape {shape} of the enclosing "
                            f"plates {[p.name for p in plates]}; give one index per plate "
                            "element or a single index.")
        # one element index per plate element, as the lowering lays it out
        return Indexed(base, np.array(np.broadcast_to(arr.astype(int), shape)))
    if isinstance(value, Data):
        if value.model is not model:
            raise ModelError(f"{what}: Data {value.name!r} belongs to another model.")
        shape = tuple(p.size for p in plates) + event_shape(domain, size)
        _use_data(model, value, DataUse(what, domain, shape, False, size))
        return value
    if domain == "matrix":  # a known M × D matrix, checked by ``vectors.matvec``
        return np.asarray(value, float)
    arr = check_support(value, domain, what, size)
    _check_plate_shape(arr, model, what, event_shape(domain, size))
    return arr


def _case_value(model: Model, index: Any) -> int | None:
    """k if the innermost open gate on ``index`` is ``ff.Case(index, k)`` (1 in
    ``ff.If(b)``, 0 in ``ff.IfNot(b)``); None under a Switch on it (there ``array[z]``
    picks z's element per case).  A Case opened inside a Switch on the same condition
    is innermost: there z is k, and ``array[z]`` is element k."""
    if not isinstance(index, Variable):
        return None
    for frame in reversed(model.gates):
        if frame.condition is not index:
            continue
        if frame.kind == "switch":
            return None
        if frame.kind in ("case", "if"):
            return int(frame.value) if frame.kind == "case" else int(not frame.negated)
    return None


def _condition_value(model: Model, var: Variable) -> np.ndarray | None:
    """A latent gate condition read inside its own gate: its value there over the current
    plates (``c`` inside ``ff.If(c)`` is True); None for any other variable."""
    k = _case_value(model, var)
    if k is None or var.is_observed:
        return None
    return np.full(tuple(p.size for p in model.plates), bool(k) if var.domain == "bool" else k)


#: the deterministic factors ``_in_case`` recomputes where a gate's condition is known
LOGIC = ("Not", "And", "Or")


def _logic_definition(model: Model, var: Any) -> FactorCall | None:
    """The ``Not``/``And``/``Or`` statement defining ``var``, a latent variable defined
    once in the current plates; None otherwise."""
    if (not isinstance(var, Variable) or not var.derived or var.is_observed
            or var.domain != "bool" or var.plates != model.plates
            or len(model.definitions.get(var.name, [])) != 1):
        return None
    call = next((c for c in reversed(model.statements) if c.output is var), None)
    return call if call is not None and call.factor in LOGIC else None


def _fold_logic(factor: str, args: dict[str, Any]) -> Any:
    """``Not``/``And``/``Or`` of known values folded: the value (a boolean array), or the
    other operand where one known operand decides nothing (``True & b`` is ``b``); None
    when the statement must stay (another factor, or no operand known)."""
    known = {k: np.asarray(v, bool) for k, v in args.items()
             if isinstance(v, np.ndarray | np.generic)}
    if factor == "Not" and "a" in known:
        return np.array(~known["a"])
    if factor not in ("And", "Or") or not known:
        return None
    if len(known) == 2:
        a, b = known["a"], known["b"]
        return np.array((a & b) if factor == "And" else (a | b))
    key, value = next(iter(known.items()))
    other = args["b" if key == "a" else "a"]
    if value.size and np.all(value == (factor == "Or")):  # False & b, True | b
        return np.full(value.shape, factor == "Or")
    if value.size and np.all(value == (factor == "And")):  # True & b, False | b
        return other
    return None


def _in_case(model: Model, var: Variable) -> Any:
    """``var`` as read where the gates open now hold: a deterministic function of a gate's
    condition, defined outside the gate (``b = ~c`` before ``ff.If(c)``), is recomputed
    inside it with the condition replaced by its value there (``~True``), as if written
    inside (folded to its value where the condition decides it: ``~True`` is False,
    ``True & b`` is ``b``); any other variable is returned as it is.

    The gate's branch then sees the function's value for the branch's case exactly.  Read
    through the gate from outside, the value would be weighed by the condition's
    posterior, which a point mass on the other case makes uniform: under VMP a constraint
    the branch can never satisfy (``ff.constrain_true(~c)`` in ``ff.If(c)``) then
    vanished when q(c) = 0 and returned when q(c) > 0, so the iterations alternated
    between the posterior and the prior and the bound between log Z and -inf (fuzz seed
    24); EP's answer was wrong (log Z -0.10 for log 0.65)."""
    if not any(f.kind in ("if", "case") for f in model.gates):
        return var
    return _known_in_case(model, var, {})


def _known_in_case(model: Model, var: Variable, memo: dict[int, Any]) -> Any:
    """``_in_case`` below the gates open now; ``memo``: the variables already done."""
    if id(var) in memo:
        return memo[id(var)]
    memo[id(var)] = var
    call = _logic_definition(model, var)
    if call is None:
        return var
    args: dict[str, Any] = {}
    for key, v in call.args.items():
        known = _condition_value(model, v) if isinstance(v, Variable) else None
        if known is not None:  # the condition itself: its value in this branch
            args[key] = known
        else:
            args[key] = _known_in_case(model, v, memo) if isinstance(v, Variable) else v
    folded = _fold_logic(call.factor, args)
    if folded is not None:
        memo[id(var)] = folded
        return folded
    if all(args[k] is v for k, v in call.args.items()):
        return var  # nothing known here that its statement does not already read
    copy = Variable(model.fresh_name(var.name), var.domain, model.plates, model, None,
                    var.size, True, call.provenance)
    model.add_variable(copy)
    new = FactorCall(call.factor, copy, args, model.plates, call.provenance)
    check_statement(new, {})
    model.add_statement(new)
    memo[id(var)] = copy
    return copy


def _table_operand(model: Model, value: Indexed, domain: str, what: str,
                   size: int | None) -> Operand:
    """``ff.Constant(values)[index]``: per case under ``ff.Switch(index)``, the row
    ``values[k]`` under ``ff.Case(index, k)``, gathered by constant integers."""
    table, index = value.base, value.index
    rows = table.values.shape[0]
    if isinstance(index, Variable) and index.model is model:
        k = _case_value(model, index)
        if k is not None:
            return _operand(model, table.values[k], domain, what, size)
        if open_switch(model, index) is None:
            raise ModelError(f"{what}: ff.Constant(...)[{index.name}] picks a row by the "
                             f"random variable {index.name!r}; write it inside "
                             f"`with ff.Switch({index.name}):` or ff.Case({index.name}, k).")
        if index.domain != "int" or index.size != rows:
            raise ModelError(f"{what}: ff.Switch({index.name}) has {index.size} cases but "
                             f"the constant has {rows} rows (shape {table.values.shape}); "
                             "they must match.")
        event = event_shape(domain, size)
        if table.values.shape[1:] != event:
            raise ModelError(f"{what}: each row of the constant indexed by {index.name} "
                             f"must have shape {event} (one {domain} value), got "
                             f"{table.values.shape[1:]}.")
        check_support(table.values, domain, what, size)
        return value
    if isinstance(index, Variable | Data):
        raise ModelError(f"{what}: index ff.Constant(...) with a discrete variable (under "
                         "ff.Switch or ff.Case) or with constant integers.")
    arr = check_support(index, "int", f"{what}: index into the constant", size=rows)
    return _operand(model, table.values[arr], domain, what, size)


def _use_data(model: Model, data: Data, use: DataUse) -> None:
    """Record where ``data`` is used (checked again at every run) and check its value."""
    model.data_uses.setdefault(data.name, []).append(use)
    if data.value is not None:
        check_data_value(model, data.name, data.value)


def _check_domain(var: Variable, domain: str, what: str) -> None:
    if var.domain != domain:
        raise ModelError(f"{what}: variable {var.name!r} is {var.domain}-valued but a "
                         f"{domain} value is needed here.")


def _check_plate_shape(arr: np.ndarray, model: Model, what: str,
                       event: tuple[int, ...] = ()) -> None:
    shape = tuple(p.size for p in model.plates) + event
    if not broadcasts_to(arr.shape, shape):
        names = [p.name for p in model.plates]
        raise DataError(f"{what}: shape {arr.shape} does not match the plates {names} "
                        f"(shape {shape}); give one value per plate element.")


def _observed(model: Model, name: str, observed: Any, domain: str,
              size: int | None) -> Any:
    if isinstance(observed, Data):
        if observed.model is not model:
            raise ModelError(f"variable {name!r}: Data {observed.name!r} belongs to another "
                             "model.")
        shape = tuple(p.size for p in model.plates) + event_shape(domain, size)
        _use_data(model, observed, DataUse(f"the observed value of {name!r}", domain, shape,
                                           True, size))
        return observed
    if observed is None:
        return observed
    arr = check_support(observed, domain, f"observed value of {name!r}", size)
    shape = tuple(p.size for p in model.plates) + event_shape(domain, size)
    if arr.shape != shape:
        raise DataError(f"observed value of {name!r} has shape {arr.shape}, but its plates "
                        f"{[p.name for p in model.plates]} need shape {shape}.")
    return arr


def new_variable(factor: str, name: str, domain: str, args: dict[str, Any],
                 arg_domains: dict[str, str], observed: Any = None, size: int | None = None,
                 derived: bool = False, arg_size: int | None = None) -> Variable:
    """Create ``name = factor(args)`` in the current model and plates; ``size`` is the
    variable's number of categories or dimension, ``arg_size`` that of its vector
    arguments when it differs (an inner product: a scalar of two D-vectors)."""
    model = current_model(f"variable {name!r}")
    chain = open_chain(model)
    if chain is not None:  # a chain's start or step (model.chains)
        return define_chain(model, chain, factor, name, domain, args, observed, size)
    prov = _provenance()
    asize = size if arg_size is None else arg_size
    checked = {k: _operand(model, v, arg_domains[k], f"variable {name!r}, argument {k!r}",
                           asize if arg_domains[k] in SIZED_DOMAINS else None)
               for k, v in args.items()}
    # a masked array: its masked elements are missing (the statement holds where seen)
    observed, seen = split_masked(model, name, observed, len(event_shape(domain, size)))
    var = _redefinition(model, name, domain, observed)
    if var is None:
        var = Variable(name, domain, model.plates, model,
                       _observed(model, name, observed, domain, size), size, derived, prov,
                       seen)
        model.add_variable(var)
    call = FactorCall(factor, var, checked, model.plates, prov)
    check_statement(call, {})
    with only_where_seen(model, name, seen):
        model.add_statement(call)
    return var


def _exclusive(a: tuple, b: tuple) -> bool:
    """Whether two gate stacks select mutually exclusive branches of one condition."""
    for f in a:
        for g in b:
            if f.condition is g.condition and f.kind == g.kind and f is not g and (
                    (f.kind == "if" and f.negated != g.negated)
                    or (f.kind == "case" and f.value != g.value)):
                return True
    return False


def _redefinition(model: Model, name: str, domain: str, observed: Any) -> Variable | None:
    """The existing variable ``name`` if this statement defines it again in another
    branch of a gate (an exit variable); None if the name is new."""
    existing = model.variables.get(name)
    if existing is None:
        return None
    gates = model.gates
    previous = model.definitions.get(name, [])
    if not previous or not all(_exclusive(gates, d) for d in previous):
        return None  # not a branch definition: add_variable reports the clash
    if isinstance(observed, Data) or isinstance(existing.observed, Data):
        same = existing.observed is observed  # one ff.Data observed in every branch
    else:
        same = observed is not None and np.array_equal(np.asarray(existing.observed),
                                                       np.asarray(observed))
    if (existing.is_observed and same and existing.domain == domain
            and existing.plates == model.plates):
        return existing  # an observed child with a different factor in each branch
    if existing.domain != domain or existing.plates != model.plates or observed is not None:
        raise ModelError(f"variable {name!r} is defined in several branches of a gate; "
                         "each definition needs the same type and plates, and no observed "
                         "value (observe it outside the gates).")
    return existing


# ----- distributions ----------------------------------------------------------------
def _one_of(name: str, what: str, **options: Any) -> tuple[str, Any]:
    given = [(k, v) for k, v in options.items() if v is not None]
    if len(given) != 1:
        raise ModelError(f"{name}: give exactly one of {', '.join(k + '=' for k in options)} "
                         f"for the {what}.")
    return given[0]


def _reciprocal(value: Any, name: str, what: str) -> np.ndarray:
    if isinstance(value, Variable | Indexed | Data):
        raise ModelError(f"{name}: a random {what} is not supported; put the prior on the "
                         "precision (or rate) instead.")
    return 1.0 / check_support(value, "positive", f"{name}: {what}")


def Gaussian(name: str, mean: Any = 0.0, *, precision: Any = None, variance: Any = None,
             scale: Any = None, observed: Any = None) -> Variable:
    """A real variable ~ N(mean, 1/precision); ``variance=`` must then be a constant;
    ``scale=`` (the standard deviation) may be a positive random variable (a scale
    mixture such as the horseshoe; Gibbs sampling only).

    >>> with ff.Model() as model:
    ...     x = ff.Gaussian("x", 1.0, variance=4.0)
    ...     y = ff.Gaussian("y", x, precision=1.0, observed=3.0)
    >>> posterior = model.infer("ep")["x"]      # precision 1/4 + 1, mean (1/4 + 3) / 1.25
    >>> round(float(posterior.mean), 12), round(float(posterior.variance), 12)
    (2.6, 0.8)
    """
    key, value = _one_of(name, "spread", precision=precision, variance=variance,
                         scale=scale)
    if key == "scale" and isinstance(value, Variable | Indexed | Data):
        return new_variable("GaussianScale", name, "real", {"mean": mean, "scale": value},
                            {"mean": "real", "scale": "positive"}, observed)
    if key == "scale":
        value = np.asarray(check_support(value, "positive", f"{name}: scale")) ** 2
        key = "variance"
    prec = value if key == "precision" else _reciprocal(value, name, "variance")
    return new_variable("Gaussian", name, "real", {"mean": mean, "precision": prec},
                        {"mean": "real", "precision": "positive"}, observed)


def Gamma(name: str, shape: Any, *, rate: Any = None, scale: Any = None,
          observed: Any = None) -> Variable:
    """A positive variable ~ Gamma(shape, rate); ``scale=`` must be a constant.

    >>> with ff.Model() as model:
    ...     tau = ff.Gamma("tau", 2.0, rate=1.0)
    ...     with ff.Plate(ff.Range("n", 2)):
    ...         y = ff.Gaussian("y", 0.0, precision=tau, observed=[1.0, -1.0])
    >>> posterior = model.infer("vmp")["tau"]   # shape 2 + 2/2, rate 1 + (1 + 1)/2
    >>> float(posterior.shape_param), float(posterior.rate)
    (3.0, 2.0)
    """
    key, value = _one_of(name, "rate", rate=rate, scale=scale)
    r = value if key == "rate" else _reciprocal(value, name, "scale")
    return new_variable("Gamma", name, "positive", {"shape": shape, "rate": r},
                        {"shape": "positive", "rate": "positive"}, observed)


def Beta(name: str, alpha: Any, beta: Any, *, observed: Any = None) -> Variable:
    """A probability ~ Beta(alpha, beta).

    >>> with ff.Model() as model:
    ...     p = ff.Beta("p", 1.0, 1.0)
    ...     with ff.Plate(ff.Range("n", 3)):
    ...         flips = ff.Bernoulli("flips", p, observed=[True, True, False])
    >>> posterior = model.infer("ep")["p"]      # Beta(1 + 2, 1 + 1)
    >>> float(posterior.alpha), float(posterior.beta)
    (3.0, 2.0)
    """
    return new_variable("Beta", name, "unit", {"alpha": alpha, "beta": beta},
                        {"alpha": "positive", "beta": "positive"}, observed)


def Bernoulli(name: str, p: Any, *, observed: Any = None) -> Variable:
    """A boolean variable, true with probability ``p``: a constant, a Beta variable, or
    ``ff.logistic(x)`` / ``ff.probit(x)`` of a real value (logistic or probit regression).

    >>> with ff.Model() as model:
    ...     a, b = ff.Bernoulli("a", 0.5), ff.Bernoulli("b", 0.5)
    ...     ff.constrain_true(a | b)
    >>> round(float(model.infer("ep")["a"].p), 12)  # P(a | a or b) = (1/2) / (3/4)
    0.666666666667
    """
    if isinstance(p, Link):
        return observe_through("Bernoulli", name, p, observed, "bool")
    return new_variable("Bernoulli", name, "bool", {"p": p}, {"p": "unit"}, observed)


def Binomial(name: str, trials: Any, p: Any, *, observed: Any = None) -> Variable:
    """A count of successes in ``trials`` (constant) with success probability ``p``.

    >>> with ff.Model() as model:
    ...     p = ff.Beta("p", 1.0, 1.0)
    ...     k = ff.Binomial("k", 10, p, observed=7)
    >>> posterior = model.infer("ep")["p"]      # Beta(1 + 7, 1 + 3)
    >>> float(posterior.alpha), float(posterior.beta)
    (8.0, 4.0)
    """
    return new_variable("Binomial", name, "count", {"trials": trials, "p": p},
                        {"trials": "count", "p": "unit"}, observed)


def StudentT(name: str, mean: Any = 0.0, nu: Any = 1.0, *, precision: Any = 1.0,
             observed: Any = None) -> Variable:
    """A real variable with Student's t law: location ``mean``, ``nu`` degrees of freedom
    (a constant) and precision ``precision`` (1 / scale²). Gibbs sampling only: it is
    sampled as a Gaussian whose precision is scaled by a Gamma(ν/2, ν/2) auxiliary.

    A location under a N(0, 4) prior from three t₃ points, one an outlier:

    >>> ys = np.array([0.5, 1.0, 6.0])
    >>> with ff.Model() as model:
    ...     mu = ff.Gaussian("mu", 0.0, variance=4.0)
    ...     with ff.Plate(ff.Range("n", 3)):
    ...         y = ff.StudentT("y", mu, 3.0, precision=1.0, observed=ys)
    >>> gibbs = model.infer("gibbs", draws=1000, burn=200, chains=2, seed=0)
    >>> from scipy import stats
    >>> grid = np.linspace(-15.0, 20.0, 35001)    # the exact posterior mean by quadrature
    >>> logp = stats.norm(0, 2).logpdf(grid) + stats.t(3).logpdf(ys[:, None] - grid).sum(0)
    >>> w = np.exp(logp - logp.max())
    >>> exact = float(np.sum(w * grid) / np.sum(w))
    >>> round(exact, 3), abs(float(gibbs["mu"].mean) - exact) < 0.15
    (1.034, True)
    """
    nu = check_support(nu, "positive", f"{name}: nu") if not isinstance(
        nu, Variable | Indexed | Data) else nu
    return new_variable("StudentT", name, "real",
                        {"mean": mean, "nu": nu, "precision": precision},
                        {"mean": "real", "nu": "positive", "precision": "positive"}, observed)


def Laplace(name: str, mean: Any = 0.0, scale: Any = 1.0, *, observed: Any = None) -> Variable:
    """A real variable with density exp(−|x − mean| / scale) / (2 scale). Gibbs sampling
    only: a Gaussian whose variance has an Exponential prior.

    >>> ys = np.array([0.5, 1.0, 6.0])
    >>> with ff.Model() as model:
    ...     mu = ff.Gaussian("mu", 0.0, variance=4.0)
    ...     with ff.Plate(ff.Range("n", 3)):
    ...         y = ff.Laplace("y", mu, 1.0, observed=ys)
    >>> gibbs = model.infer("gibbs", draws=1000, burn=200, chains=2, seed=0)
    >>> from scipy import stats
    >>> grid = np.linspace(-15.0, 20.0, 35001)    # the exact posterior mean by quadrature
    >>> logp = stats.norm(0, 2).logpdf(grid) + stats.laplace.logpdf(ys[:, None] - grid).sum(0)
    >>> w = np.exp(logp - logp.max())
    >>> exact = float(np.sum(w * grid) / np.sum(w))
    >>> round(exact, 3), abs(float(gibbs["mu"].mean) - exact) < 0.15
    (1.129, True)
    """
    return new_variable("Laplace", name, "real", {"mean": mean, "scale": scale},
                        {"mean": "real", "scale": "positive"}, observed)


def HalfCauchy(name: str, scale: Any = 1.0, *, observed: Any = None) -> Variable:
    """A positive variable with density 2 scale / (π (scale² + x²)) (the horseshoe's
    scales). Gibbs sampling only: x² is inverse Gamma given an inverse-Gamma auxiliary.
    Its median is ``scale``:

    >>> with ff.Model() as model:
    ...     s = ff.HalfCauchy("s", 2.0)
    >>> draws = model.infer("gibbs", draws=1000, burn=200, chains=2, seed=0).samples("s")
    >>> draws.shape, bool(np.all(draws > 0)), abs(float(np.median(draws)) - 2.0) < 0.25
    ((2, 1000), True, True)
    """
    return new_variable("HalfCauchy", name, "positive", {"scale": scale},
                        {"scale": "positive"}, observed)


def NegativeBinomial(name: str, dispersion: Any, p: Any, *,
                     observed: Any = None) -> Variable:
    """A count y with P(y) = Γ(y + r) / (Γ(r) y!) p^y (1 − p)^r, r = ``dispersion`` (a
    constant or a positive variable, e.g. Gamma), mean r p / (1 − p). Gibbs sampling only;
    with ``p = ff.logistic(psi)`` it is NumPyro's ``NegativeBinomialLogits(r, psi)``, and
    Gibbs sampling augments it with Pólya-Gamma variables.

    With a Beta(a, b) prior on p it is conjugate: p | y ~ Beta(a + Σy, b + n r), here
    Beta(2 + 12, 2 + 4 · 3), of mean 1/2:

    >>> with ff.Model() as model:
    ...     p = ff.Beta("p", 2.0, 2.0)
    ...     with ff.Plate(ff.Range("n", 4)):
    ...         y = ff.NegativeBinomial("y", 3.0, p, observed=[1, 4, 2, 5])
    >>> gibbs = model.infer("gibbs", draws=1000, burn=200, chains=2, seed=0)
    >>> sd = np.sqrt(14 * 14 / (28**2 * 29))        # the Beta(14, 14)'s
    >>> bool(abs(gibbs["p"].mean - 0.5) < 0.02), bool(abs(gibbs["p"].sd - sd) < 0.01)
    (True, True)
    """
    return new_variable("NegativeBinomial", name, "count", {"dispersion": dispersion, "p": p},
                        {"dispersion": "positive", "p": "unit"}, observed)


def Poisson(name: str, rate: Any, *, observed: Any = None) -> Variable:
    """A count ~ Poisson(rate); ``rate`` may be ``ff.exp(x)`` of a real value (a log link:
    the count must then be observed).

    >>> with ff.Model() as model:
    ...     rate = ff.Gamma("rate", 1.0, rate=1.0)
    ...     with ff.Plate(ff.Range("n", 3)):
    ...         counts = ff.Poisson("counts", rate, observed=[2, 0, 4])
    >>> posterior = model.infer("vmp")["rate"]  # Gamma(1 + 6, 1 + 3)
    >>> float(posterior.shape_param), float(posterior.rate)
    (7.0, 4.0)
    """
    if isinstance(rate, Link):
        return observe_through("Poisson", name, rate, observed, "count")
    return new_variable("Poisson", name, "count", {"rate": rate}, {"rate": "positive"},
                        observed)


def _categories(name: str, value: Any) -> int:
    if isinstance(value, Variable):
        if value.size is None:
            raise ModelError(f"{name}: {value.name!r} is not a probability vector.")
        return value.size
    if isinstance(value, Indexed) and isinstance(value.base, Table):
        if value.base.values.ndim < 2:
            raise ModelError(f"{name}: the constant indexed for the probabilities needs "
                             "one probability vector per row (a matrix).")
        return int(value.base.values.shape[-1])
    if isinstance(value, Indexed):
        if value.base.size is None:
            raise ModelError(f"{name}: {value.base.name!r} is not an array of probability "
                             "vectors; index an array of Dirichlet variables.")
        return value.base.size
    if isinstance(value, Data):
        if value.value is None:
            raise ModelError(f"{name}: ff.Data({value.name!r}) gives the probabilities but "
                             "has no value yet, so the number of categories is unknown; "
                             f"give it a value when it is created (ff.Data({value.name!r}, "
                             "probs)); a run can then change the value (data=).")
        value = value.value
    arr = numeric_array(value, f"variable {name!r}, argument 'probs'")
    if arr.ndim == 0:
        raise ModelError(f"{name}: probabilities must be a vector, got a scalar.")
    return int(arr.shape[-1])


def Discrete(name: str, probs: Any, *, observed: Any = None) -> Variable:
    """An integer in 0..K-1 with probabilities ``probs`` (a K-vector or Dirichlet).

    >>> with ff.Model() as model:
    ...     w = ff.Dirichlet("w", np.ones(3))
    ...     with ff.Plate(ff.Range("n", 4)):
    ...         z = ff.Discrete("z", w, observed=[0, 2, 2, 1])
    >>> model.infer("vmp")["w"].alpha.tolist()   # 1 + the count of each value
    [2.0, 2.0, 3.0]
    """
    if isinstance(probs, Link):
        return observe_through("Discrete", name, probs, observed, "int")
    k = _categories(name, probs)
    return new_variable("Discrete", name, "int", {"probs": probs}, {"probs": "simplex"},
                        observed, size=k)


def Dirichlet(name: str, alpha: Any, *, observed: Any = None) -> Variable:
    """A probability vector ~ Dirichlet(alpha) (alpha a constant K-vector, or one per
    plate element).  Observed categories add their counts to alpha:

    >>> with ff.Model() as model:
    ...     w = ff.Dirichlet("w", [1.0, 1.0, 1.0])
    ...     with ff.Plate(ff.Range("n", 4)):
    ...         z = ff.Discrete("z", w, observed=[0, 2, 2, 1])
    >>> posterior = model.infer("ep")["w"]
    >>> posterior, posterior.mean * 7          # mean (1 + counts) / (3 + 4)
    (Dirichlet(alpha=[2., 2., 3.]), array([2., 2., 3.]))
    """
    arr = numeric_array(alpha, f"variable {name!r}, argument 'alpha'")
    if arr.ndim == 0:
        raise ModelError(f"{name}: alpha must be a vector of K pseudo-counts.")
    model = current_model(f"variable {name!r}")
    alpha = check_support(arr, "positive", f"variable {name!r}, argument 'alpha'")
    _check_plate_shape(alpha, model, f"variable {name!r}, argument 'alpha'", (arr.shape[-1],))
    prov = _provenance()
    size = int(alpha.shape[-1])
    var = Variable(name, "simplex", model.plates, model,
                   _observed(model, name, observed, "simplex", size), size, False, prov)
    model.add_variable(var)
    model.add_statement(FactorCall("Dirichlet", var, {"alpha": alpha}, model.plates, prov))
    return var


# ----- deterministic factors ----------------------------------------------------------
def _derived(factor: str, label: str, domain: str, args: dict[str, Any],
             arg_domains: dict[str, str], arg_size: int | None = None,
             size: int | None = None) -> Variable:
    model = current_model(label)
    name = label if label not in model.variables else model.fresh_name(label)
    return new_variable(factor, name, domain, args, arg_domains, size=size, derived=True,
                        arg_size=arg_size)


def _label(v: Any) -> str:
    if isinstance(v, Variable):
        return v.name
    if isinstance(v, Indexed):
        index = v.index
        if isinstance(index, Variable | Data):
            return f"{v.base.name}[{index.name}]"
        arr = np.asarray(index)
        return f"{v.base.name}[{arr.item()}]" if arr.ndim == 0 else f"{v.base.name}[...]"
    if isinstance(v, Data):
        return v.name
    arr = np.asarray(v)
    return repr(arr.item()) if arr.ndim == 0 else "array"


def _is_random(v: Any) -> bool:
    return isinstance(v, Variable | Indexed) and not (
        isinstance(v, Variable) and v.is_observed)


def _vector_valued(v: Any) -> bool:
    base = v.base if isinstance(v, Indexed) else v
    return isinstance(base, Variable) and base.domain == "vector"


def plus(a: Any, b: Any) -> Variable:
    if is_chain_term(a) or is_chain_term(b):  # a chain's step: a * x[t - 1] + b
        return affine("+", a, b)  # type: ignore[return-value]
    if _vector_valued(a) or _vector_valued(b):
        from factorflow.model import vectors
        return vectors.vector_sum(a, b, 1.0)
    if a is b and _is_random(a):  # x + x is 2x: one edge, not two "independent" ones
        return times(a, 2.0)
    collected = _collect_shared(a, b, 1.0)
    if collected is not None:
        return collected
    return _derived("Plus", f"({_label(a)} + {_label(b)})", "real", {"a": a, "b": b},
                    {"a": "real", "b": "real"})


def minus(a: Any, b: Any) -> Variable:
    if is_chain_term(a) or is_chain_term(b):  # a chain's step: a * x[t - 1] + b
        return affine("-", a, b)  # type: ignore[return-value]
    if _vector_valued(a) or _vector_valued(b):
        from factorflow.model import vectors
        return vectors.vector_sum(a, b, -1.0)
    if a is b and _is_random(a):
        raise ModelError(f"({_label(a)} - {_label(a)}) is the constant 0, not a random "
                         "variable; write 0.0.")
    collected = _collect_shared(a, b, -1.0)
    if collected is not None:
        return collected
    return _derived("Minus", f"({_label(a)} - {_label(b)})", "real", {"a": a, "b": b},
                    {"a": "real", "b": "real"})


def negate(a: Any) -> Variable:
    """``-a``: the real variable ``(-1) · a``."""
    if is_chain_term(a):
        return affine("neg", a)  # type: ignore[return-value]
    return _derived("ScaleBy", f"(-{_label(a)})", "real", {"a": a, "scale": -1.0},
                    {"a": "real", "scale": "real"})


def divide(a: Any, b: Any) -> Variable:
    """``a / b`` for a known, finite, non-zero constant ``b`` (a number or an array over
    the plates): the real variable ``(1 / b) · a``.  A random, observed or ``ff.Data``
    divisor is refused with ModelError (there is no division factor)."""
    if is_chain_term(a) or is_chain_term(b):
        return affine("/", a, b)  # type: ignore[return-value]
    label = f"({_label(a)} / {_label(b)})"
    if isinstance(b, Variable | Indexed | Data):
        what = "ff.Data" if isinstance(b, Data) else "random variable"
        if isinstance(b, Variable) and b.is_observed:
            what = "observed variable"
        raise ModelError(f"{label}: dividing by the {what} {_label(b)!r} is not supported "
                         "(there is no division factor); divide by a constant, or put a "
                         "variable on the reciprocal.")
    divisor = numeric_array(b, f"{label}: divisor").astype(float)
    if not np.all(np.isfinite(divisor)) or np.any(divisor == 0):
        bad = divisor[~np.isfinite(divisor) | (divisor == 0)].flat[0]
        raise DataError(f"{label}: the divisor must be finite and non-zero, got {float(bad)!r}.")
    return _derived("ScaleBy", label, "real", {"a": a, "scale": 1.0 / divisor},
                    {"a": "real", "scale": "real"})


def times(a: Any, b: Any) -> Variable:
    if is_chain_term(a) or is_chain_term(b):  # a chain's step: a * x[t - 1] + b
        return affine("*", a, b)  # type: ignore[return-value]
    if not _is_random(a):
        a, b = b, a
    label = f"({_label(a)} * {_label(b)})"
    if _is_random(b):
        shared = a is not b and _shared_leaves(a, b)  # (x * x: refused below, by name)
        if shared:
            raise ModelError(
                f"{label}: both factors depend on {', '.join(repr(n) for n in shared)}, but "
                "message passing treats the arguments of a product as independent (the "
                "result would be silently wrong). Introduce the product differently, e.g. "
                "multiply by an independent variable.")
        return _derived("Product", label, "real", {"a": a, "b": b},
                        {"a": "real", "b": "real"})
    return _derived("ScaleBy", label, "real", {"a": a, "scale": b},
                    {"a": "real", "scale": "real"})


# ----- sums that meet their own parents -------------------------------------------------
# Message passing treats the arguments of a factor as separate edges. A sum whose two sides
# depend on one random variable through other sums and scalings (``g + (g + g)``, ``a - (a +
# b)``) is therefore rewritten as the linear combination it is (``3 g``, ``-b``) of distinct
# random variables, each entering once: exact under EP and VMP instead of double-counted.
_LINEAR = ("Plus", "Minus", "ScaleBy")


def logistic_variable(x: Any) -> Any:
    """σ(x) = 1 / (1 + exp(−x)): for a random ``x`` the derived probability variable
    ``logistic(x)``, a probability for a factor with no fused logistic form
    (``ff.Binomial(name, n, ff.logistic(x))``, ``ff.NegativeBinomial``: Gibbs sampling by
    Pólya-Gamma augmentation); for a number or array its value."""
    if isinstance(x, Variable | Indexed | Data):
        return _derived("Logistic", f"logistic({_label(x)})", "unit", {"x": x}, {"x": "real"})
    arr = numeric_array(x, "ff.logistic(x)").astype(float)
    return 0.5 * (1.0 + np.tanh(0.5 * arr))


def _definition(var: Variable) -> FactorCall | None:
    """The statement defining the derived variable ``var`` when it can be expanded where the
    current statement is built: one definition, under the gates open now."""
    model = var.model
    if not var.derived or var.is_observed or model.definitions.get(var.name) != [model.gates]:
        return None
    for call in reversed(model.statements):
        if call.output is var:
            return call
    return None


def _linear_form(v: Any, coeff: Any = 1.0) -> tuple[dict[Hashable, list], list[list]]:
    """``coeff · v`` as Σ cᵢ·leafᵢ + Σ dⱼ·constantⱼ: random leaves by ``_leaf_key`` -> [leaf, c],
    and the constant terms [value, d]. Sums, differences and numeric scalings of derived
    variables are expanded; an inner product of a vector variable w with a known vector
    (``w[0]``, ``ff.inner(w, x)``) is the term ("inner", w) -> [w, coeff · x], c a vector
    (per plate element), so that two of one w meet as one inner product; anything else is
    a leaf."""
    if not _is_random(v):
        return {}, [[v, coeff]]
    call = _definition(v) if isinstance(v, Variable) else None
    if call is not None and call.factor == "InnerProduct":
        args = _laid_out(call)
        w = None if args is None else args["a"]
        if (isinstance(w, Variable) and w.domain == "vector" and not w.is_observed
                and _is_numeric(args["b"])):
            vector = np.asarray(coeff, float)[..., None] * np.asarray(args["b"], float)
            return {("inner", id(w)): [w, vector]}, []
    if call is None or call.factor not in _LINEAR or (
            call.factor == "ScaleBy" and not _is_numeric(call.args["scale"])):
        return {_leaf_key(v): [v, coeff]}, []
    args = _laid_out(call)
    if args is None:  # an ff.Data it reads cannot be laid out here: checked by the caller
        return {("laid out", id(v)): [v, coeff]}, []
    if call.factor == "ScaleBy":
        return _linear_form(args["a"], coeff * np.asarray(args["scale"], float))
    sign = 1.0 if call.factor == "Plus" else -1.0
    (ra, ca), (rb, cb) = _linear_form(args["a"], coeff), _linear_form(args["b"], sign * coeff)
    return _merge(ra, rb), ca + cb


def _laid_out(call: FactorCall) -> dict[str, Any] | None:
    """The arguments of a sum's defining statement laid out over the plates open now.

    Known arrays (constants, scales, indices) are laid out over the plates open where they
    were written, aligned at the innermost (NumPy broadcasting); expanded into a statement
    under more plates, they keep that meaning only when those are the innermost there too.
    Otherwise each gets its axes moved to where its plates sit now (``s[i]`` written in
    ``Plate(p)`` and read in ``Plate(p)``, ``Plate(q)`` reads ``s[i[p]]`` at every q).  An
    ``ff.Data`` (its value comes at the run) cannot be moved: None then."""
    plates = call.output.model.plates
    if not call.plates or plates[len(plates) - len(call.plates):] == call.plates:
        return call.args
    inner = tuple(r.size for r in call.plates)
    if not set(call.plates) <= set(plates):
        return None
    order = sorted(range(len(inner)), key=lambda i: plates.index(call.plates[i]))
    shape = [r.size if r in call.plates else 1 for r in plates]
    out: dict[str, Any] = {}
    for name, arg in call.args.items():
        index = arg.index if isinstance(arg, Indexed) else None
        value = index if isinstance(arg, Indexed) else arg
        if isinstance(arg, Data) or isinstance(index, Data):
            return None
        if isinstance(value, Variable) or not np.ndim(value):  # a variable, a number,
            out[name] = arg                                    # a Switch's read
            continue
        if not broadcasts_to(np.shape(value), inner):
            return None
        moved = np.transpose(np.broadcast_to(value, inner), order).reshape(shape)
        out[name] = Indexed(arg.base, moved) if isinstance(arg, Indexed) else moved
    return out


def _bases(v: Any) -> set[int]:
    """The random variables (by id) a sum, difference or scaling depends on through its
    definitions, wherever and under whatever gates they were written."""
    if not _is_random(v):
        return set()
    base = v.base if isinstance(v, Indexed) else v
    for call in reversed(base.model.statements) if base.derived else ():
        if call.output is base and call.factor in _LINEAR:
            return set().union(*(_bases(a) for a in call.args.values()))
    return {id(base)}


def _leaf_key(v: Variable | Indexed) -> Hashable:
    """Equal for two leaves that read the same elements: a variable by identity, an
    indexed element by its array and its index (constant indices laid out over the open
    plates, so ``s[0]`` written twice is one leaf)."""
    if not isinstance(v, Indexed):
        return id(v)
    index = v.index
    if isinstance(index, Variable | Data):
        return (id(v.base), id(index))
    arr = np.asarray(index).astype(int)
    shape = tuple(p.size for p in v.base.model.plates)
    if broadcasts_to(arr.shape, shape):
        arr = np.broadcast_to(arr, shape)
    if arr.size == 0:  # over an empty plate nothing is read: nothing is shared
        return id(v)
    return (id(v.base), arr.shape, arr.tobytes())


def _meeting_reads(ra: dict[Hashable, list], rb: dict[Hashable, list]) -> str | None:
    """Where two different reads of one array (``s[i]`` in one side of a sum, ``s[j]``
    in the other) pick the same element at some plate element: collecting them by leaf
    would miss it, and message passing would treat the two as independent."""
    model_plates = None
    for ka, (la, _) in ra.items():
        for kb, (lb, _) in rb.items():
            base_a = la.base if isinstance(la, Indexed) else la
            base_b = lb.base if isinstance(lb, Indexed) else lb
            if ka == kb or base_a is not base_b or not (
                    isinstance(la, Indexed) or isinstance(lb, Indexed)):
                continue
            model_plates = model_plates or base_a.model.plates
            ea, eb = (read_elements(leaf, model_plates, {}) for leaf in (la, lb))
            if isinstance(ea, np.ndarray) and isinstance(eb, np.ndarray):
                shape = tuple(p.size for p in model_plates)
                ea, eb = np.broadcast_to(ea, shape), np.broadcast_to(eb, shape)
                if (ea == eb).any():
                    at = tuple(int(i) for i in np.argwhere(ea == eb)[0])
                    return (f"{_label(la)} and {_label(lb)} both read {base_a.name}"
                            f"[{int(ea[at])}] at element {at} of the plates "
                            f"{[p.name for p in model_plates]}")
            elif isinstance(ea, tuple) and ea == eb:
                return f"{_label(la)} and {_label(lb)} read the same element"
    return None


def _merge(ra: dict[Hashable, list], rb: dict[Hashable, list]) -> dict[Hashable, list]:
    out = {k: list(v) for k, v in ra.items()}
    for k, (leaf, c) in rb.items():
        if k in out:
            out[k][1] = out[k][1] + c
        else:
            out[k] = [leaf, c]
    return out


def _is_numeric(v: Any) -> bool:
    return not isinstance(v, Variable | Indexed | Data)


def _shared_leaves(a: Any, b: Any) -> list[str]:
    """The random variables that both ``a`` and ``b`` depend on through sums and scalings."""
    ra, rb = _linear_form(a)[0], _linear_form(b)[0]
    for one, other in ((ra, rb), (rb, ra)):
        for key, (leaf, _) in one.items():
            if not (isinstance(key, tuple) and key[:1] == ("laid out",)):
                continue
            if _bases(leaf) & set().union(*(_bases(x) for x, _ in other.values())):
                names = [p.name for p in leaf.model.plates]
                raise ModelError(
                    f"{_label(a)} and {_label(b)} share random variables through "
                    f"{leaf.name!r}, which reads an ff.Data under other innermost plates "
                    f"than {names} (its value cannot be laid out over them here); "
                    "message passing would treat the two as independent.  Write the sum "
                    f"inside the plates {names}.")
    meeting = _meeting_reads(ra, rb)
    if meeting is not None:
        raise ModelError(f"{meeting}; message passing would treat the two as "
                         "independent.  Index distinct elements, or introduce a second "
                         "variable tied to the first.")
    return [_label(ra[k][0]) for k in ra if k in rb]


def _collect_shared(a: Any, b: Any, sign: float) -> Variable | None:
    """``a + sign·b`` as a combination of distinct random variables when its two sides share
    one; None when they do not (the ordinary factor is exact then)."""
    if not _shared_leaves(a, b):
        return None
    ra, ca = _linear_form(a)
    rb, cb = _linear_form(b, sign)
    terms = [(leaf, c) for leaf, c in _merge(ra, rb).values() if np.any(np.asarray(c) != 0)]
    label = f"({_label(a)} {'+' if sign > 0 else '-'} {_label(b)})"
    if not terms:
        raise ModelError(f"{label} is a constant, not a random variable (its random parts "
                         "cancel); write the constant.")
    numeric = [np.asarray(d, float) * np.asarray(v, float) for v, d in ca + cb
               if _is_numeric(v)]
    symbolic = [(v, d) for v, d in ca + cb if not _is_numeric(v)]
    result: Any = None
    for leaf, c in terms:
        if isinstance(leaf, Variable) and leaf.domain == "vector":  # an ("inner", w) term
            from factorflow.model import vectors
            scaled = vectors.inner(leaf, c)
        else:
            scaled = leaf if np.all(np.asarray(c) == 1.0) else times(leaf, c)
        result = scaled if result is None else plus(result, scaled)
    for value, d in symbolic:
        if np.ndim(d) or abs(float(d)) != 1.0:
            raise ModelError(f"{label}: the observed value {_label(value)} enters this sum "
                             f"scaled by {d}; write the sum of distinct variables directly.")
        result = plus(result, value) if float(d) > 0 else minus(result, value)
    offset = sum(numeric, np.zeros(()))
    if np.any(offset != 0):
        result = plus(result, offset)
    if result is a or result is b or not isinstance(result, Variable) or not result.derived:
        result = times(result, 1.0)  # a statement of its own: the sum is a new variable
    return result


def greater(a: Any, b: Any) -> Variable:
    if a is not b and _is_random(a) and _is_random(b) and _shared_leaves(a, b):
        return is_positive(minus(a, b))  # a > b over shared parents: (a - b) > 0, collected
    return _derived("Greater", f"({_label(a)} > {_label(b)})", "bool", {"a": a, "b": b},
                    {"a": "real", "b": "real"})


def is_positive(x: Any) -> Variable:
    """The boolean variable ``x > 0``.

    >>> with ff.Model() as model:
    ...     x = ff.Gaussian("x", 0.0, variance=1.0)
    ...     positive = ff.is_positive(x)
    >>> positive.name, float(model.infer("ep")[positive.name].p)
    ('(x > 0)', 0.5)
    """
    return _derived("IsPositive", f"({_label(x)} > 0)", "bool", {"x": x}, {"x": "real"})


def is_between(x: Any, lower: Any, upper: Any) -> Variable:
    """The boolean variable ``lower < x < upper`` (x and the bounds Gaussian variables or
    constants); ``ff.constrain_true(ff.is_between(x, lower, upper))`` truncates x.  EP's
    messages are exact moment matching with Gaussian bounds (Infer.NET's
    IsBetweenGaussianOp); VMP has the message to the boolean only (as for ``>``: a random
    x is refused under VMP with ``ff.UnsupportedFactorError``).

    >>> with ff.Model() as model:
    ...     x = ff.Gaussian("x", 0.0, variance=1.0)
    ...     ff.constrain_true(ff.is_between(x, -1.0, 1.0))
    >>> round(float(np.exp(model.infer("ep").log_evidence)), 9)   # P(-1 < x < 1)
    0.682689492
    """
    args = {"x": x, "lower": lower, "upper": upper}
    randoms = [(k, v) for k, v in args.items() if _is_random(v)]
    for i, (ka, a) in enumerate(randoms):
        for kb, b in randoms[i + 1:]:
            shared = _shared_leaves(a, b)
            if a is b or shared:
                raise ModelError(f"is_between: {ka} ({_label(a)}) and {kb} ({_label(b)}) "
                                 f"share {', '.join(shared) or _label(a)}; message passing "
                                 "would treat them as independent.  Use two constraints, "
                                 "ff.constrain_true(x > lower) and ff.constrain_true(x < "
                                 "upper), or variables of their own.")
    return _derived("IsBetween", f"({_label(lower)} < {_label(x)} < {_label(upper)})", "bool",
                    args, {"x": "real", "lower": "real", "upper": "real"})


def logic(op: str, a: Any, b: Any = None) -> Variable:
    if op == "Not":
        return _derived("Not", f"~{_label(a)}", "bool", {"a": a}, {"a": "bool"})
    sym = {"And": "&", "Or": "|"}[op]
    return _derived(op, f"({_label(a)} {sym} {_label(b)})", "bool", {"a": a, "b": b},
                    {"a": "bool", "b": "bool"})


def constrain_true(b: Any) -> None:
    """Constrain the boolean variable ``b`` to be true (adds evidence); see ``Bernoulli``.

    >>> with ff.Model() as model:
    ...     x = ff.Gaussian("x", 0.0, variance=1.0)
    ...     ff.constrain_true(x > 0.5)
    >>> round(float(np.exp(model.infer("ep").log_evidence)), 9)   # P(x > 0.5)
    0.308537539
    """
    model = current_model("constrain_true")
    checked = _operand(model, b, "bool", "constrain_true: argument")
    model.add_statement(FactorCall("ConstrainTrue", None, {"value": checked}, model.plates,
                                   _provenance()))
