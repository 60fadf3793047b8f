"""factorflow's kernels over ``jax.numpy``: the same source, another array namespace.

The message operators, the distributions they pass and the generated program's helpers
(``factorflow.distributions``, ``factorflow.factors``, ``factorflow.runtime.kernels``)
are written over NumPy as ``np`` and SciPy's ``special``.  This module loads a second
copy of those modules whose ``import numpy as np`` binds ``jax.numpy`` (through
``XNP`` below) and whose ``special`` binds ``jax.scipy.special``: the code is the same
text, so the JAX backend computes the same updates as the NumPy one, statement for
statement.  The copies live apart from the real modules (their own classes and their
own ``FACTORS``); nothing here changes the NumPy backend.

The kernels write their in-place updates and their fast paths chosen by values
through ``distributions.base`` (``add_at``, ``set_at``, ``all_true``, ``is_arange``,
``traced``), which take the functional path, or the choice known while tracing, under
JAX.  Only the run-time checks that raise cannot be traced as written:
``factorflow.runtime.backends.jax_overrides`` gives each a version that records its
verdict, installed over the copy when its module is loaded; every other function runs
unchanged.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import sys
import types
from collections.abc import Callable
from typing import Any

#: the modules copied, in an order where each one's factorflow imports come first
COPIED = (
    "factorflow.distributions.base",
    "factorflow.distributions.families",
    "factorflow.distributions.multivariate",
    "factorflow.distributions",
    "factorflow.distributions.moments",
    "factorflow.factors.registry",
    "factorflow.factors",
    "factorflow.runtime.kernels",
)
#: the prefix of the copies' module names (in ``sys.modules``, as dataclasses and pickle
#: need; ``factorflow._jax`` is no package of its own)
PREFIX = "factorflow._jax."


class _XNumPy(types.ModuleType):
    """``numpy`` as the copied modules see it: ``jax.numpy``, with NumPy's own for what
    only describes types (``np.random``, ``np.integer``, ``np.finfo``) and a no-op
    ``errstate`` (JAX never warns on floating-point exceptions)."""

    NUMPY_ONLY = ("random", "integer", "floating", "bool_", "number", "generic", "dtype",
                  "intp", "int64", "float64", "iinfo", "finfo", "array2string", "inf", "nan",
                  "pi", "e", "newaxis", "ndindex", "printoptions", "polynomial")

    #: functions NumPy lets take a list of arrays, which ``jax.numpy``'s do not
    LISTS = ("all", "any", "sum", "max", "min", "prod")

    def __init__(self) -> None:
        super().__init__("numpy")
        import jax.numpy as jnp
        import numpy as np
        self._jnp, self._np = jnp, np

    def __getattr__(self, name: str) -> Any:
        if name in self.NUMPY_ONLY:
            value = getattr(self._np, name)
        elif name == "errstate":
            value = _errstate
        elif name == "broadcast_to":
            value = self._broadcast_to
        elif name == "broadcast_arrays":
            value = self._broadcast_arrays
        elif name == "arange":
            value = self._arange
        elif name == "ndarray":
            import jax
            value = (self._np.ndarray, jax.Array)
        else:
            value = getattr(self._jnp, name)
            if isinstance(getattr(self._np, name, None), self._np.ufunc):
                value = _functional(value)
            elif name in self.LISTS:
                value = _of_arrays(value)
        setattr(self, name, value)
        return value


    def _broadcast_to(self, a: Any, shape: Any) -> Any:
        """``jnp.broadcast_to``, its result recorded as a broadcast view of ``a`` (the
        copied ``distributions.base.strides`` reads which axes only repeat values)."""
        a = self._jnp.asarray(a)
        view = self._jnp.broadcast_to(a, shape)
        if view is not a:
            self.note_view(view, a.shape)
        return view

    def _arange(self, *args: Any, **kwargs: Any) -> Any:
        """``jnp.arange``; ``arange(n)`` of an int ``n`` is recorded as the copied
        ``distributions.base``'s ``"arange"`` note (``base.is_arange``): a traced array's
        values are unknown, and a Switch's clones index their cases by ``arange(K)``
        (element k on case k), which the kernels take without a gather."""
        out = self._jnp.arange(*args, **kwargs)
        if not kwargs and len(args) == 1 and isinstance(args[0], int):
            self.note_traced("arange", out, args[0])
        return out

    def _broadcast_arrays(self, *arrays: Any) -> list[Any]:
        shape = self._jnp.broadcast_shapes(*(self._jnp.shape(a) for a in arrays))
        return [self._broadcast_to(a, shape) for a in arrays]


def _functional(ufunc: Any) -> Any:
    """A ``jax.numpy`` ufunc that accepts NumPy's ``out=`` and returns the result (a
    JAX array cannot be written in place; code that reads only the returned value, as
    ``x = np.multiply(x, c, out=x)``, computes the same; code that relies on the write
    asks ``distributions.base.traced()`` first)."""
    class Functional:
        def __call__(self, *args: Any, out: Any = None, **kwargs: Any) -> Any:
            return ufunc(*args, **kwargs)

        def __getattr__(self, name: str) -> Any:  # reduce, accumulate, outer
            return getattr(ufunc, name)
    return Functional()


def _of_arrays(fn: Any) -> Any:
    """``fn`` taking a list (or tuple) of arrays as its first argument, as NumPy does."""
    def call(a: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(a, list | tuple):
            import jax.numpy as jnp
            a = jnp.stack([jnp.asarray(x) for x in a])
        return fn(a, *args, **kwargs)
    call.__name__ = fn.__name__
    call.__doc__ = fn.__doc__
    return call


class _XSpecial(types.ModuleType):
    """``scipy.special`` as the copied modules see it: ``jax.scipy.special``, with
    ``log_expit`` (absent there) and ``betaln`` from ``gammaln`` (JAX's ``betaln`` is
    accurate to about 1e-7 only; the sum of three ``gammaln`` is within 1e-11 of SciPy's
    over (0.01, 2000)²)."""

    def __init__(self) -> None:
        super().__init__("scipy.special")
        import jax.numpy as jnp
        import jax.scipy.special as special
        self._special = special
        self.log_expit = lambda x: -jnp.logaddexp(0.0, -x)
        self.betaln = lambda a, b: special.gammaln(a) + special.gammaln(b) - special.gammaln(
            a + b)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._special, name)


def _errstate(**_: Any) -> contextlib.AbstractContextManager:
    return contextlib.nullcontext()


class _XLazy(types.ModuleType):
    """``factorflow.lazy`` for the copies: ``special`` is ``jax.scipy.special``
    (``stats`` stays SciPy's: only sampling and ``to_scipy`` use it, outside the loop)."""

    def __init__(self) -> None:
        super().__init__("factorflow.lazy")
        from factorflow import lazy
        self.special = _XSpecial()
        self.stats = lazy.stats
        self.lazy_module = lazy.lazy_module


class Namespace:
    """The copied modules, loaded once per process (``namespace()``).  Another backend
    subclasses it with its own ``prefix``, ``numpy``, ``lazy`` and ``_install``
    (``dask_namespace``)."""

    #: the prefix of the copies' names in ``sys.modules``
    prefix = PREFIX

    def __init__(self) -> None:
        self.modules: dict[str, types.ModuleType] = {}
        self.numpy, self.lazy = self._shims()
        names = dict(builtins.__dict__)
        names["__import__"] = self._import
        self.builtins = names
        for name in COPIED:
            self._load(name)

    def _shims(self) -> tuple[Any, types.ModuleType]:
        """What the copies import as ``numpy`` and as ``factorflow.lazy``."""
        return _XNumPy(), _XLazy()

    def _copied(self, name: str) -> bool:
        return name in COPIED or name.startswith("factorflow.factors.") or (
            name.startswith("factorflow.distributions."))

    def _load(self, name: str) -> types.ModuleType:
        if name in self.modules:
            return self.modules[name]
        real = importlib.import_module(name)
        path = real.__file__
        assert path is not None
        with open(path, encoding="utf-8") as f:
            source = f.read()
        module = types.ModuleType(self.prefix + name.removeprefix("factorflow."), real.__doc__)
        module.__file__ = path
        module.__dict__["__builtins__"] = self.builtins
        if hasattr(real, "__path__"):
            module.__path__ = []  # a package: its submodules are loaded by _import
        module.__dict__["__package__"] = real.__package__
        self.modules[name] = sys.modules[module.__name__] = module
        exec(compile(source, path, "exec"), module.__dict__)
        self._install(name, module)
        return module

    def _install(self, name: str, module: types.ModuleType) -> None:
        """Adapt the fresh copy ``module`` of ``name`` to the backend: traced values,
        the JAX overrides."""
        if name == "factorflow.distributions.base":  # values unknown while traced
            module.__dict__["TRACED"] = True
            self.numpy.note_view = module.note_view  # type: ignore[attr-defined]
            self.numpy.note_traced = module.note_traced  # type: ignore[attr-defined]
            from jax.extend.core import get_opaque_trace_state
            module.__dict__["trace_state"] = get_opaque_trace_state
        from factorflow.runtime.backends import jax_overrides
        jax_overrides.install(name, module, self)

    def _import(self, name: str, globals: Any = None, locals: Any = None,
                fromlist: Any = (), level: int = 0) -> Any:
        if level:
            raise ImportError(f"relative import {name!r} in a copied module")
        if name == "numpy":
            return self.numpy
        if name == "factorflow.lazy":
            return self.lazy
        if self._copied(name):
            module = self._load(name)
            for item in fromlist or ():
                sub = f"{name}.{item}"
                if not hasattr(module, item) and self._copied(sub):
                    setattr(module, item, self._load(sub))
            if not fromlist:
                raise ImportError(f"copied modules use 'from {name} import ...' only")
            return module
        return builtins.__import__(name, globals, locals, fromlist, level)

    def __getitem__(self, name: str) -> types.ModuleType:
        return self.modules[name]


_NAMESPACE: Namespace | None = None


def namespace() -> Namespace:
    """The JAX copies of factorflow's kernel modules (loaded at the first call)."""
    global _NAMESPACE
    if _NAMESPACE is None:
        import jax
        with jax.enable_x64(True):  # module-level constants (LOG_2PI) in float64
            _NAMESPACE = Namespace()
    return _NAMESPACE


def load_program(ns: Namespace, compiled: Any, backend: str,
                 refuse: Callable[[str], str | None] = lambda factor: None) -> Any:
    """The ``infer`` function of ``compiled``'s generated source executed over the
    copied modules ``ns``: families and operators are the copies' own.  Raises
    ``BackendError`` for a factor defined in this process (it has no copy) and for one
    for which ``refuse(factor)`` gives a reason (that reason is the message)."""
    from factorflow.errors import BackendError

    names = dict(ns["factorflow.runtime.kernels"].NAMESPACE)
    factors = ns["factorflow.factors"].FACTORS
    for ident, (kind, key) in compiled.generated.symbols.items():
        if kind == "family":
            names[ident] = getattr(ns["factorflow.distributions"], key)
            continue
        if key[0] not in factors:
            raise BackendError(f"the factor {key[0]!r} is defined in this process "
                               f"(@ff.factor, ff.Deterministic); the {backend} backend "
                               "runs factorflow's built-in factors only: use "
                               "backend='numpy'.")
        why = refuse(key[0])
        if why is not None:
            raise BackendError(why)
        if kind == "operator":
            factor, algorithm, target = key
            names[ident] = factors[factor].operators[(algorithm, target)].fn
        else:
            names[ident] = factors[key[0]].evidence[key[1]]
    code = compile(compiled.source,
                   f"<factorflow {compiled.algorithm} {backend.lower()}: "
                   f"{compiled.model.name}>", "exec")
    exec(code, names)
    return names["infer"]


__all__ = ["namespace", "Namespace", "COPIED", "load_program"]
