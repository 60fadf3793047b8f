"""Array backends: where a compiled model's program runs.

``"numpy"`` (the default) runs the generated NumPy program in the calling process;
``"jax"`` traces the same statements over ``jax.numpy`` and runs the whole loop under
``jax.jit`` (``factorflow.runtime.backends.jax_backend``); ``"dask"`` runs the NumPy
program over data chunked along its plate on a ``dask.distributed`` cluster
(``factorflow.runtime.backends.dask_backend``).  ``backend_class(name)``
gives the compiled-model class of a backend, or raises ``ff.BackendError`` naming the
valid backends or the extra to install.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from factorflow.errors import BackendError

#: every backend: name -> (the module that must be importable, the pip extra)
BACKENDS: dict[str, tuple[str, str]] = {"numpy": ("numpy", ""), "jax": ("jax", "jax"),
                                         "dask": ("distributed", "dask")}


def check_backend(backend: Any) -> str:
    """``backend`` as a known, installed backend's name; BackendError otherwise."""
    if not isinstance(backend, str) or backend.lower() not in BACKENDS:
        raise BackendError(f"unknown backend {backend!r}; the backends are "
                           f"{', '.join(repr(b) for b in BACKENDS)}.")
    backend = backend.lower()
    module, extra = BACKENDS[backend]
    if importlib.util.find_spec(module) is None:
        raise BackendError(f"backend={backend!r} needs {module}, which is not installed: "
                           f'pip install "factorflow[{extra}]".')
    return backend


def backend_class(backend: str) -> Any:
    """The CompiledModel class that runs programs on ``backend`` (checked)."""
    backend = check_backend(backend)
    if backend == "jax":
        from factorflow.runtime.backends.jax_backend import JaxCompiledModel
        return JaxCompiledModel
    if backend == "dask":
        from factorflow.runtime.backends.dask_backend import DaskCompiledModel
        return DaskCompiledModel
    from factorflow.runtime.compiled import CompiledModel
    return CompiledModel


__all__ = ["BACKENDS", "check_backend", "backend_class"]
