"""The public API's type hints are precise (PEP 561: factorflow ships ``py.typed``): the
entry points a user's type checker follows name their classes, and every hint resolves."""

from __future__ import annotations

import inspect
import typing
from pathlib import Path

import pytest

import factorflow as ff
from factorflow.ir.nodes import Program
from factorflow.runtime.compiled import CompiledModel
from factorflow.samplers.gibbs import GibbsModel
from factorflow.samplers.result import SamplingResult
from factorflow.transforms.scheduling import Schedule


def _names() -> dict:
    """The names the modules import only for type checkers (``if TYPE_CHECKING:``)."""
    import pandas
    import xarray
    from matplotlib.axes import Axes
    return {"CompiledModel": CompiledModel, "GibbsModel": GibbsModel, "Result": ff.Result,
            "SamplingResult": SamplingResult, "Schedule": Schedule, "Program": Program,
            "pandas": pandas, "xarray": xarray, "Axes": Axes}


def _hints(fn) -> dict:
    fn = fn.fget if isinstance(fn, property) else fn
    return typing.get_type_hints(fn, localns=_names())


def test_py_typed_ships_with_the_package():
    assert (Path(ff.__file__).parent / "py.typed").is_file()


def test_compile_and_infer_name_what_they_return_per_algorithm():
    overloads = {fn.__name__: typing.get_overloads(fn) for fn in (ff.Model.compile,
                                                                   ff.Model.infer)}
    assert [_hints(o)["return"] for o in overloads["compile"]] == [
        CompiledModel, GibbsModel, CompiledModel | GibbsModel]
    assert [_hints(o)["return"] for o in overloads["infer"]] == [
        ff.Result, SamplingResult, ff.Result | SamplingResult]
    assert [typing.get_args(_hints(o)["algorithm"])
            for o in overloads["compile"][:2]] == [("ep", "vmp"), ("gibbs",)]


def test_result_and_compiled_model_name_their_types():
    import pandas
    import xarray
    assert _hints(CompiledModel.schedule)["return"] is Schedule
    assert _hints(CompiledModel.program)["return"] is Program
    assert _hints(ff.Result.to_xarray)["return"] is xarray.Dataset
    assert _hints(ff.Result.to_dataframe)["return"] is pandas.DataFrame
    assert _hints(ff.parse)["return"] is ff.Model


@pytest.mark.parametrize("name", [n for n in ff.__all__ if callable(getattr(ff, n))
                                  and not inspect.isclass(getattr(ff, n))])
def test_every_public_function_has_resolvable_hints(name):
    """Every parameter and the return of each public function is annotated, and the
    annotations resolve (no name left to a missing import)."""
    fn = inspect.unwrap(getattr(ff, name))
    hints = typing.get_type_hints(fn)
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    assert "return" in hints and all(p.name in hints for p in params), (name, hints)
