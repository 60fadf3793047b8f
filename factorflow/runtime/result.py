"""Inference results: posteriors by variable name, evidence, timing.

A result survives ``pickle`` and ``copy.deepcopy``, and saves to netCDF through xarray
(``result.to_netcdf(path)``, ``ff.load_result(path)``): the posteriors' parameters are
written as they are held (natural parameters, float64), so loading gives back the same
bits.  The file is netCDF-3 (SciPy's writer, no extra library); each array is a
variable ``p<k>_<field>`` with attributes naming its posterior, family and parameter.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

import factorflow.distributions as dist
from factorflow.distributions.base import Distribution
from factorflow.errors import ExcludedVariableError, ModelError

if TYPE_CHECKING:
    import pandas
    import xarray
    from matplotlib.axes import Axes

#: the version of the layout ``to_xarray`` writes
FORMAT = 1
#: integers up to this size are held exactly by float64 (netCDF-3 has no int64)
_EXACT_INT = 2**53


@dataclass(frozen=True)
class Result:
    """Posteriors (``result["name"]``), batched over plates, and the log evidence.

    ``log_evidence`` is EP's approximate log Z, or VMP's evidence lower bound (ELBO).
    ``excluded``: the variables with elements that are not part of the model for the data
    it ran with (defined only inside branches that observed conditions exclude), each
    with a boolean mask over its plates, True where excluded.  A variable excluded
    everywhere has no posterior (``result[name]`` raises ``ff.ExcludedVariableError``);
    one excluded in part keeps its posterior, uniform at the excluded elements.

    >>> with ff.Model() as model:
    ...     m = ff.Gaussian("m", 0.0, variance=1.0)
    ...     y = ff.Gaussian("y", m, variance=1.0, observed=2.0)
    >>> result = model.infer("ep")
    >>> result["m"], round(result.log_evidence, 6), result.converged
    (Gaussian(mean=1.0, variance=0.5), -2.265512, True)
    """

    posteriors: dict[str, Any]
    log_evidence: float
    algorithm: str
    iterations: int
    seconds: float
    #: whether the run met its tolerance (True when run without one)
    converged: bool = True
    #: the log evidence (EP) or bound (VMP) after each sweep
    trace: tuple[float, ...] = ()
    #: each posterior's plate names, one per batch axis (the model's ``ff.Range`` names)
    dims: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    #: variables with elements outside the model: name -> mask, True where excluded
    excluded: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        try:
            return self.posteriors[name]
        except KeyError:
            if name in self.excluded:
                raise ExcludedVariableError(
                    f"{name!r} is not part of the model for the data this result ran "
                    "with: it is defined only inside branches whose observed conditions "
                    "exclude it (as Infer.NET treats a gate on a known condition), so it "
                    "has no posterior; see result.excluded.") from None
            raise ModelError(f"no posterior for {name!r}; the model has "
                             f"{', '.join(self.posteriors)}.") from None

    def __contains__(self, name: object) -> bool:
        return name in self.posteriors

    def __iter__(self):
        return iter(self.posteriors)

    def __repr__(self) -> str:
        lines = [f"Result({self.algorithm.upper()}, {self.iterations} iteration"
                 f"{'' if self.iterations == 1 else 's'}"
                 f"{'' if self.converged else ' (not converged)'}, "
                 f"log_evidence={self.log_evidence:.6g})"]
        for k, v in self.posteriors.items():
            head = f"  {k}: "   # a posterior that wraps stays aligned after its name
            lines.append(head + repr(v).replace("\n", "\n" + " " * len(head)))
        return "\n".join(lines)

    def plot_convergence(self, axes: Any = None) -> tuple[Axes, Axes]:
        """Draw ``trace`` with matplotlib: the log evidence (EP) or bound (VMP) after
        each sweep, and below it the size of each sweep's step |Δ| on a log scale (a
        straight fall is geometric convergence).  ``axes``: two matplotlib Axes to draw
        in (default: a new figure).  Returns the two Axes.  Needs matplotlib
        (``pip install "factorflow[plot]"``).

        >>> import matplotlib
        >>> matplotlib.use("Agg")
        >>> with ff.Model() as model:
        ...     mean = ff.Gaussian("mean", 0.0, variance=100.0)
        ...     prec = ff.Gamma("prec", 1.0, rate=1.0)
        ...     with ff.Plate(ff.Range("n", 2)):
        ...         x = ff.Gaussian("x", mean, precision=prec, observed=[5.0, 7.0])
        >>> result = model.infer("vmp")
        >>> top, bottom = result.plot_convergence()
        >>> line = top.get_lines()[0].get_ydata()
        >>> len(line) == result.iterations, bool(np.all(np.diff(line) >= -1e-9))  # VMP rises
        (True, True)
        """
        if not self.trace:
            raise ModelError("plot_convergence: the result has no trace (it ran 0 sweeps, "
                             "or ran EP without trace=True); run at least one iteration "
                             "with run(..., trace=True).")
        try:
            import matplotlib.pyplot as plt
        except ImportError:
            raise ModelError("plot_convergence needs matplotlib: "
                             'pip install "factorflow[plot]".') from None
        if axes is None:
            _, axes = plt.subplots(2, 1, sharex=True, figsize=(6, 5))
        top, bottom = axes
        sweeps = np.arange(1, len(self.trace) + 1)
        trace = np.asarray(self.trace)
        what = "ELBO (VMP bound)" if self.algorithm == "vmp" else "log evidence (EP)"
        top.plot(sweeps, trace, marker=".")
        top.set_ylabel(what)
        top.set_title(f"{self.algorithm.upper()}: {self.iterations} sweeps, "
                      f"{'converged' if self.converged else 'not converged'}")
        steps = np.abs(np.diff(trace))
        bottom.plot(sweeps[1:], np.where(steps > 0, steps, np.nan), marker=".")
        if np.any(steps > 0):
            bottom.set_yscale("log")
        bottom.set_ylabel("|change| per sweep")
        bottom.set_xlabel("sweep")
        return axes

    # ----- tables: xarray and pandas ------------------------------------------------------
    def quantities(self, name: str) -> dict[str, np.ndarray]:
        """What a person reads of the posterior of ``name``: ``mean`` and ``variance``,
        then the parameters its family is written with (``shape``/``rate``, ``probs``,
        ...); an observed variable's ``value``.  Arrays of shape batch (+ event).

        >>> with ff.Model() as model:
        ...     with ff.Plate(ff.Range("k", 2)):
        ...         mu = ff.Gaussian("mu", 0.0, variance=1.0)
        ...         y = ff.Gaussian("y", mu, variance=1.0, observed=[2.0, 4.0])
        >>> result = model.infer("ep")   # exact: mu[k] ~ N(y[k] / 2, 1/2)
        >>> result.quantities("mu")
        {'mean': array([1., 2.]), 'variance': array([0.5, 0.5])}
        >>> result.quantities("y")
        {'value': array([2., 4.])}
        """
        posterior = self[name]
        if isinstance(posterior, dist.PointMass):
            return {"value": np.asarray(posterior.value)}
        out = {"mean": np.asarray(posterior.mean), "variance": np.asarray(posterior.variance)}
        out.update((k, np.asarray(v)) for k, v in posterior.describe().items())
        return out

    def _axes(self, name: str, ndim: int) -> tuple[str, ...]:
        """Names of the first ``ndim`` axes of an array about ``name``: its plates (from
        ``dims``), then ``<name>_category`` for an event axis (a Discrete's or
        Dirichlet's K)."""
        plates = self.dims.get(name, ())
        batch = len(self[name].batch_shape)
        if len(plates) != batch:   # a result without plate names (or from elsewhere)
            plates = tuple(f"{name}_axis{j}" for j in range(batch))
        extra = ndim - batch
        events = ((f"{name}_category",) if extra == 1
                  else tuple(f"{name}_event{j}" for j in range(extra)))
        return (plates + events)[:ndim]

    def _readable(self) -> dict[str, Any]:
        """``<name>_<quantity>`` variables of ``quantities``, plate names as dimensions
        (empty posteriors left out: netCDF-3 holds one zero-length dimension at most)."""
        import xarray as xr

        out = {}
        for name, posterior in self.posteriors.items():
            for quantity, arr in self.quantities(name).items():
                if arr.size == 0:
                    continue
                attrs = {"posterior": name, "family": type(posterior).__name__,
                         "quantity": quantity}
                if arr.dtype.kind == "b":
                    arr = arr.astype(np.int8)
                elif arr.dtype.kind in "iu":
                    arr = arr.astype(np.float64)  # netCDF-3 has no int64
                out[f"{name}_{quantity}"] = xr.Variable(self._axes(name, arr.ndim), arr, attrs)
        return out

    def to_dataframe(self, observed: bool = False) -> pandas.DataFrame:
        """The posteriors as a ``pandas.DataFrame``: one row per plate element of each
        posterior, indexed by (``variable``, ``element``) where ``element`` names the
        plate indices (``"k=1"``, ``"n=3, j=0"``; ``""`` for an unbatched variable);
        columns ``family`` then ``quantities`` (an event-valued one, such as a
        Discrete's ``probs``, as ``probs[0]``, ``probs[1]``, ...).  Observed variables
        (their ``value``) only with ``observed=True``.

        >>> with ff.Model() as model:
        ...     with ff.Plate(ff.Range("k", 2)):
        ...         mu = ff.Gaussian("mu", 0.0, variance=1.0)
        ...         y = ff.Gaussian("y", mu, variance=1.0, observed=[2.0, 4.0])
        >>> result = model.infer("ep")   # exact: mu[k] ~ N(y[k] / 2, 1/2)
        >>> result.to_dataframe()
                           family  mean  variance
        variable element
        mu       k=0      Gaussian   1.0       0.5
                 k=1      Gaussian   2.0       0.5
        """
        import pandas as pd

        rows: list[dict[str, Any]] = []
        index: list[tuple[str, str]] = []
        for name, posterior in self.posteriors.items():
            if isinstance(posterior, dist.PointMass) and not observed:
                continue
            batch = tuple(posterior.batch_shape)
            plates = self._axes(name, len(batch))
            columns: dict[str, np.ndarray] = {}
            for quantity, arr in self.quantities(name).items():
                arr = np.broadcast_to(arr, batch + arr.shape[len(batch):])
                flat = arr.reshape((math.prod(batch), math.prod(arr.shape[len(batch):])))
                if arr.ndim == len(batch):
                    columns[quantity] = flat[:, 0]
                else:
                    columns.update((f"{quantity}[{j}]", flat[:, j])
                                   for j in range(flat.shape[1]))
            for i, element in enumerate(np.ndindex(*batch)):
                index.append((name, ", ".join(f"{p}={e}" for p, e in zip(plates, element,
                                                                          strict=True))))
                rows.append({"family": type(posterior).__name__}
                            | {c: v[i].item() for c, v in columns.items()})
        return pd.DataFrame(rows, index=pd.MultiIndex.from_tuples(
            index, names=["variable", "element"]))

    # ----- saving and loading -----------------------------------------------------------
    def to_xarray(self) -> xarray.Dataset:
        """The result as an ``xarray.Dataset`` (the layout ``to_netcdf`` writes).

        For reading: ``<name>_<quantity>`` for each of ``quantities`` (``means_mean``,
        ``means_variance``, ``prec_shape``, ``z_probs``, ``x_value``), with the model's
        plate names as dimensions (``<name>_category`` for an event axis).  For loading
        back bit for bit: ``p<k>_<field>``, the parameters as held (natural parameters),
        described by the ``factorflow`` attribute.

        >>> with ff.Model() as model:
        ...     with ff.Plate(ff.Range("k", 2)):
        ...         mu = ff.Gaussian("mu", 0.0, variance=1.0)
        ...         y = ff.Gaussian("y", mu, variance=1.0, observed=[2.0, 4.0])
        >>> result = model.infer("ep")   # exact: mu[k] ~ N(y[k] / 2, 1/2)
        >>> ds = result.to_xarray()
        >>> ds["mu_mean"].dims, ds["mu_mean"].values, ds["y_value"].values
        (('k',), array([1., 2.]), array([2., 4.]))
        """
        import xarray as xr

        variables: dict[str, Any] = {}
        entries = []
        for k, (name, posterior) in enumerate(self.posteriors.items()):
            family = type(posterior).__name__
            if getattr(dist, family, None) is not type(posterior):
                raise ModelError(f"to_netcdf: the posterior of {name!r} is a {family}, "
                                 "which is not a factorflow distribution.")
            fields: dict[str, list[str] | str] = {}
            for field, value in posterior.__getstate__().items():
                arrays = value if isinstance(value, tuple) else (value,)
                labels = (getattr(posterior, "natural_names", ()) if field == "eta"
                          else (field,))
                keys = []
                for i, (array, label) in enumerate(zip(arrays, labels, strict=True)):
                    key = f"p{k}_{field}{i}" if isinstance(value, tuple) else f"p{k}_{field}"
                    variables[key] = _encode(array, key, name, family, label)
                    keys.append(key)
                fields[field] = keys if isinstance(value, tuple) else keys[0]
            entries.append({"name": name, "family": family, "fields": fields})
        scalars = {f.name: _jsonable(getattr(self, f.name))
                   for f in dataclasses.fields(self) if f.name != "posteriors"}
        header = {"format": FORMAT, "posteriors": entries, "fields": scalars}
        variables = self._readable() | variables    # readable first, once all are known
        try:
            return xr.Dataset(variables, attrs={"title": "factorflow inference result",
                                                "factorflow": json.dumps(header)})
        except ValueError as err:  # a plate named like another's derived dimension
            raise ModelError(f"to_xarray: the posteriors' dimensions conflict ({err}); "
                             "rename the plate or variable involved.") from None

    def to_netcdf(self, path: str | os.PathLike[str]) -> None:
        """Write the result to ``path`` (netCDF-3 through xarray's SciPy engine); every
        float64 parameter is written bit for bit.  ``ff.load_result(path)`` reads it;
        see there for an example.

        >>> import os, tempfile
        >>> with ff.Model() as model:
        ...     m = ff.Gaussian("m", 0.0, variance=1.0)
        >>> path = os.path.join(tempfile.mkdtemp(), "prior.nc")
        >>> model.infer("ep").to_netcdf(path)
        >>> ff.Result.from_netcdf(path)["m"]
        Gaussian(mean=0.0, variance=1.0)
        """
        ds = self.to_xarray()
        encoding = {k: {"_FillValue": None} for k, v in ds.data_vars.items()
                    if v.dtype.kind == "f"}
        ds.to_netcdf(path, engine="scipy", encoding=encoding)

    @classmethod
    def from_xarray(cls, ds: xarray.Dataset) -> Result:
        """The result a ``to_xarray`` dataset holds (ModelError if it holds none): the same
        posteriors, bit for bit.

        >>> with ff.Model() as model:
        ...     with ff.Plate(ff.Range("k", 2)):
        ...         mu = ff.Gaussian("mu", 0.0, variance=1.0)
        ...         y = ff.Gaussian("y", mu, variance=1.0, observed=[2.0, 4.0])
        >>> result = model.infer("ep")   # exact: mu[k] ~ N(y[k] / 2, 1/2)
        >>> again = ff.Result.from_xarray(result.to_xarray())
        >>> again["mu"], again["mu"] == result["mu"], again.dims
        (Gaussian(mean=[1., 2.], variance=[0.5, 0.5]), True, {'mu': ('k',), 'y': ('k',)})
        """
        try:
            header = json.loads(ds.attrs["factorflow"])
        except (KeyError, TypeError, ValueError):
            raise ModelError("the dataset is not a factorflow result (it has no "
                             "'factorflow' attribute); write it with result.to_netcdf."
                             ) from None
        if header.get("format") != FORMAT:
            raise ModelError(f"the result was written in layout {header.get('format')!r}; "
                             f"this factorflow reads layout {FORMAT}.")
        posteriors: dict[str, Any] = {}
        for entry in header["posteriors"]:
            family = getattr(dist, entry["family"], None)
            if not (isinstance(family, type) and (issubclass(family, Distribution)
                                                   or family is dist.PointMass)):
                raise ModelError(f"the result holds an unknown family {entry['family']!r} "
                                 f"for {entry['name']!r}.")
            state = {field: tuple(_decode(ds[k]) for k in keys) if isinstance(keys, list)
                     else _decode(ds[keys]) for field, keys in entry["fields"].items()}
            posterior = family.__new__(family)
            posterior.__setstate__(state)
            posteriors[entry["name"]] = posterior
        known = {f.name for f in dataclasses.fields(cls)}
        scalars = {k: v for k, v in header["fields"].items() if k in known}
        if "dims" in scalars:
            scalars["dims"] = {k: tuple(v) for k, v in scalars["dims"].items()}
        if "trace" in scalars:
            scalars["trace"] = tuple(scalars["trace"])
        if "excluded" in scalars:
            scalars["excluded"] = {k: np.asarray(v, bool)
                                   for k, v in scalars["excluded"].items()}
        return cls(posteriors=posteriors, **scalars)

    @classmethod
    def from_netcdf(cls, path: str | os.PathLike[str]) -> Result:
        """The result ``to_netcdf`` wrote to ``path`` (the same as ``ff.load_result``).

        >>> import os, tempfile
        >>> with ff.Model() as model:
        ...     g = ff.Gamma("g", 2.0, rate=3.0)
        >>> path = os.path.join(tempfile.mkdtemp(), "g.nc")
        >>> model.infer("vmp").to_netcdf(path)
        >>> ff.Result.from_netcdf(path)["g"]
        Gamma(shape=2.0, rate=3.0)
        """
        import xarray as xr

        return cls.from_xarray(xr.load_dataset(path, engine="scipy", mask_and_scale=False))


def load_result(path: str | os.PathLike[str]) -> Result:
    """Read a result written by ``result.to_netcdf(path)``: the same posteriors (bit for
    bit), log evidence, algorithm, iterations and timing.

    >>> import os, tempfile
    >>> with ff.Model() as model:
    ...     m = ff.Gaussian("m", 0.0, variance=1.0)
    ...     y = ff.Gaussian("y", m, variance=1.0, observed=2.0)
    >>> result = model.infer("ep")
    >>> path = os.path.join(tempfile.mkdtemp(), "result.nc")
    >>> result.to_netcdf(path)
    >>> ff.load_result(path)["m"] == result["m"]
    True
    """
    return Result.from_netcdf(path)


def _encode(array: Any, key: str, name: str, family: str, label: str) -> Any:
    """One parameter array as an xarray variable that netCDF-3 holds exactly."""
    import xarray as xr

    arr = np.asarray(array)
    attrs = {"posterior": name, "family": family, "parameter": label}
    if arr.dtype.kind in "iu":  # netCDF-3 has no 64-bit integers: float64 is exact here
        if arr.size and np.max(np.abs(arr.astype(float))) > _EXACT_INT:
            raise ModelError(f"to_netcdf: the {label} of {name!r} holds integers above "
                             "2**53, which netCDF-3 cannot store exactly.")
        attrs["factorflow_dtype"] = str(arr.dtype)
        arr = arr.astype(np.float64)
    elif arr.dtype.kind not in "bf":
        raise ModelError(f"to_netcdf: the {label} of {name!r} has dtype {arr.dtype}, "
                         "which is not numeric.")
    if arr.size == 0 and arr.ndim != 1:  # netCDF-3 takes a 0-length axis as its one
        attrs["factorflow_shape"] = json.dumps(arr.shape)   # record axis, first only
        arr = arr.reshape(0)
    dims = tuple(f"{key}_{j}" for j in range(arr.ndim))
    return xr.Variable(dims, arr, attrs)


def _decode(variable: Any) -> np.ndarray:
    arr = np.asarray(variable.values)
    dtype = variable.attrs.get("factorflow_dtype")
    shape = variable.attrs.get("factorflow_shape")
    if shape is not None:
        arr = arr.reshape(tuple(json.loads(shape)))
    return arr.astype(dtype) if dtype else arr


def _jsonable(value: Any) -> Any:
    """``value`` as JSON can hold it exactly (NumPy scalars and arrays as Python ones)."""
    if isinstance(value, np.generic | np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value
