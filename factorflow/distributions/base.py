"""Batched exponential-family distributions: the messages and posteriors of factorflow.

A distribution object holds a whole plate: its natural parameters are arrays whose
leading axes are the batch (plate) axes and whose trailing ``event_ndim`` axes are the
event (for example the K categories of a Discrete).  Every family is written with base
measure 1 in its sufficient statistics T(x), so that

    p(x) = exp(<eta, T(x)> - A(eta)),

and therefore products and ratios of messages add and subtract natural parameters,
``log ∫ prod_i p_i = A(sum eta_i) - sum A(eta_i)``, the entropy is ``A - <eta, E[T]>``
and ``KL(q || p) = A(eta_p) - A(eta_q) - <eta_p - eta_q, E_q[T]>``.  (Poisson and
Binomial carry a base measure; they override what depends on it.)
"""

from __future__ import annotations

import functools
import numbers
import weakref
from abc import ABCMeta, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np

from factorflow.errors import ImproperMessageError, ModelError

D = TypeVar("D", bound="Distribution")


def sample_shape(size: Any) -> tuple[int, ...]:
    """``size`` of ``sample(size)`` as a shape: None -> (), n -> (n,), a tuple as is.
    ModelError for anything but non-negative integers."""
    if size is None:
        return ()
    dims = (size,) if isinstance(size, numbers.Integral) else size
    try:
        dims = tuple(dims)
    except TypeError:
        dims = (size,)
    if not all(isinstance(d, numbers.Integral) and not isinstance(d, bool | np.bool_)
               and d >= 0 for d in dims):
        raise ModelError(f"sample: size must be a non-negative integer or a tuple of them, "
                         f"got {size!r}.")
    return tuple(int(d) for d in dims)


def generator(rng: Any) -> np.random.Generator:
    """``rng`` as a NumPy Generator: a Generator itself, or one seeded by ``rng`` (an int,
    a SeedSequence, a BitGenerator, or None for fresh entropy).  ModelError otherwise."""
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, bool | np.bool_ | float):
        raise ModelError(f"sample: rng must be a numpy.random.Generator, an integer seed or "
                         f"None, got {rng!r}.")
    try:
        return np.random.default_rng(rng)
    except (TypeError, ValueError):
        raise ModelError(f"sample: rng must be a numpy.random.Generator, an integer seed or "
                         f"None, got {rng!r}.") from None


#: True in the JAX backend's copy of the kernel modules (``runtime.backends.jax_namespace``
#: sets it): there arrays are traced, their values unknown while the program is built, so
#: a fast path chosen by values (``all_true``, ``any_true``) gives way to the general
#: path, which computes the same result on every element.
TRACED = False


def traced() -> bool:
    """Whether these modules run traced (``TRACED``): no in-place writes, no boolean
    indexing, no branch on values."""
    return TRACED


def all_true(cond: Any) -> bool:
    """``np.all(cond)`` as a Python bool: whether a fast path for "every element" may be
    taken; False under tracing (``TRACED``), where the general path runs."""
    return not TRACED and bool(np.all(cond))


def any_true(cond: Any) -> bool:
    """``np.any(cond)`` as a Python bool: whether the general path must run for some
    element; True under tracing (``TRACED``)."""
    return TRACED or bool(np.any(cond))


def add_at(acc: np.ndarray, index: Any, values: Any, repeats: bool = False) -> np.ndarray:
    """``acc[index] += values``, returning ``acc``: written in place, or under tracing a
    new array (``.at[index].add``).  ``repeats``: ``index`` may name an element twice,
    whose values then all add up (``np.add.at``)."""
    if TRACED:
        return acc.at[index].add(values)
    if repeats:
        np.add.at(acc, index, values)
    else:
        acc[index] += values
    return acc


def set_at(arr: np.ndarray, index: Any, values: Any) -> np.ndarray:
    """A copy of ``arr`` (float) with ``values`` at ``index`` (under tracing
    ``.at[index].set``)."""
    if TRACED:
        return np.asarray(arr, float).at[index].set(values)
    out = np.array(arr, dtype=float)
    out[index] = values
    return out


def _sub_naturals(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a - b, where (±inf) - (same inf) is 0: a point mass divided by itself is uniform."""
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.subtract(a, b)
        # inf − inf is NaN: none here, nothing to mend (one reduction, no mask: the sum
        # is NaN where any element is, and seldom otherwise — then the mask decides)
        if not TRACED and not np.isnan(np.sum(diff)):
            return diff
    if not any_true(np.isnan(diff)):
        return diff
    same_inf = np.isinf(a) & np.isinf(b) & (np.sign(a) == np.sign(b))
    return np.where(same_inf, 0.0, diff) if any_true(same_inf) else diff


def rows_product(stats: np.ndarray, coef: np.ndarray, ones: int) -> np.ndarray:
    """``stats @ coef``, an (N, J) × (J, K) BLAS product whose column ``ones`` of
    ``stats`` is all ones (a constant term: a mixture's data evidence for its cases is
    [1, x, x²] × (3, K) coefficients), remembered as such while the result lives, so
    that adding a row to it (``_add_naturals``: a Discrete posterior's product of that
    evidence and E[log w]) is the same product with the row added into the
    coefficients, not a pass over the (N, K) result."""
    out = stats @ coef
    if TRACED:  # (a normalisation makes its rows block by block: _normalize_traced)
        _remember_traced("rows_product", out, (stats, coef, ones))
    elif isinstance(out, np.ndarray):
        remember("rows_product", out, (stats, coef, ones))
    return out


def _add_naturals(a: Any, b: Any) -> Any:
    """a + b, the natural parameters of a product of two messages.  Where one is an
    (N, K) ``rows_product`` and the other repeats one finite K-row (or one value) along
    its rows — E[log w] of a Dirichlet beside the cases' evidence of a gate, whatever
    the family and the factors behind them — the sum is one BLAS product, the row added
    into the coefficients of the column of ones: (1 · (c + r) + Σ_j s_j c_j, equal to
    a + b to rounding, 1e-16 of the largest term), and is remembered as a
    ``rows_product`` itself.  The general sum otherwise, and below ``COMPACT_ABOVE``
    elements (where the sum costs less than the product's call).  Under tracing the sum
    is the general one, with the product that has the row folded in recorded for it
    (``_add_naturals_traced``)."""
    if TRACED:
        return _add_naturals_traced(a, b)
    if not TRACED and (getattr(a, "size", 0) >= COMPACT_ABOVE
                       or getattr(b, "size", 0) >= COMPACT_ABOVE):
        for prod, row in ((a, b), (b, a)):
            hit = (recall("rows_product", prod) if getattr(prod, "ndim", 0) == 2
                   and prod.size >= COMPACT_ABOVE else None)
            if hit is None:
                continue
            r = distinct(np.asarray(row, float))
            if (np.ndim(r) > 2 or any(n != 1 for n in np.shape(r)[:-1])
                    or np.broadcast_shapes(prod.shape, np.shape(row)) != prod.shape
                    or not np.all(np.isfinite(r))):
                break
            stats, coef, ones = hit
            coef = np.array(coef, dtype=float)  # (a fresh copy: the memo's stays as it is)
            coef[ones] += np.reshape(r, -1)
            if prod.size < 2 * _BLOCK_ELEMENTS:  # (the whole-array path: one threshold)
                out = rows_product(stats, coef, ones)
                remember("rows_added", out, np.reshape(r, -1))
                return out
            return _product_normalized(stats, coef, ones, np.reshape(r, -1))
    return a + b


def _add_naturals_traced(a: Any, b: Any) -> Any:
    """``_add_naturals`` under tracing: ``a + b``, and where one is an (N, K)
    ``rows_product`` and the other repeats one K-row (or one value) along its rows, the
    sum is recorded as the ``rows_product`` with the row added into the coefficients of
    the column of ones (NumPy's product, ``_add_naturals``), and the row as its
    ``"rows_added"``: a normalisation of the sum then makes each block of rows from the
    statistics inside its loop (``_normalize_traced``), and where nothing else reads
    the (N, K) sum the compiler never writes it out.  (The row's finiteness is not
    tested, its value unknown here: an infinite entry gives the same infinity in the
    product as in the sum.)"""
    out = a + b
    for prod, row in ((a, b), (b, a)):
        hit = (_recall_traced("rows_product", prod) if getattr(prod, "ndim", 0) == 2
               else None)
        if hit is None:
            continue
        r = distinct(np.asarray(row, float))
        if (np.ndim(r) > 2 or any(n != 1 for n in np.shape(r)[:-1])
                or np.broadcast_shapes(prod.shape, np.shape(row)) != prod.shape):
            break
        stats, coef, ones = hit
        r = np.reshape(r, -1)
        _remember_traced("rows_product", out, (stats, coef.at[ones].add(r), ones))
        _remember_traced("rows_added", out, r)
        break
    return out


def _product_normalized(stats: np.ndarray, coef: np.ndarray, ones: int, row: np.ndarray
                        ) -> np.ndarray:
    """``rows_product(stats, coef, ones)`` of a large (N, K) result, made block by block
    together with its normalisation (``log_normalize``'s, remembered as such): each
    block's product is normalised while it is in cache, where a product made whole is
    read back from memory by its normalisation.  ``row`` is what was added into the
    coefficients (E[log w] of a Discrete posterior beside its data's evidence: the sum
    is that posterior's naturals, normalised next in every sweep by its properness
    check and its cases), remembered as ``"rows_added"``.  The same numbers as the
    product and normalisation made apart (each block's BLAS product is the whole
    one's rows)."""
    out = np.empty((stats.shape[0], coef.shape[1]))
    remember("rows_product", out, (stats, coef, ones))
    remember("rows_added", out, row)

    def fill(rows: slice) -> None:
        np.matmul(stats[rows], coef, out=out[rows])
    memo_of("log_normalize", out, lambda x: _normalize_blocked(x, fill))
    return out


def weighted_rows(stats: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``stats.T @ weights``: Σ_n stats_nj w_nk, (J, K), for the (N, J) statistics of
    a ``rows_product`` and (N, K) weights (a mixture's data sums Σ_n q_nk [1, x, …]).
    Where the weights are the probabilities of a blocked normalisation of a
    ``rows_product`` over these same ``stats`` (a mixture's responsibilities, from its
    data's evidence), they are the sums that normalisation accumulated block by block
    while each block was in cache (``_normalize_blocked``; equal to the product to
    rounding, 1e-15 relative).  Asking marks ``stats``: from then on their blocked
    normalisations accumulate the sums (none is made where nothing reads them)."""
    if TRACED:  # the sums a fused normalisation accumulated (_normalize_traced)
        hit = _recall_traced("rows_sums", weights)
        if hit is not None and hit[0] is stats:
            return hit[1]
    elif isinstance(weights, np.ndarray):
        hit = recall("rows_sums", weights)
        if hit is not None and hit[0] is stats:
            return hit[1]
        remember("weighted_rows", stats, stats)
    return stats.T @ weights


#: batches of fewer elements are not compacted (``Distribution.compact``): below this
#: size Python's overhead outweighs the array passes saved
COMPACT_ABOVE = 4096


class _Family(ABCMeta):
    """``ABCMeta`` with ``type``'s own ``isinstance`` (a C call, half the time of ABCMeta's
    Python-level check): every operator asks whether an argument is a message or a known
    value, dozens of times a sweep.  Families are real subclasses; none is registered as
    a virtual one."""

    __instancecheck__ = type.__instancecheck__


class Distribution(metaclass=_Family):
    """A batch of distributions of one exponential family, stored by natural parameters.

    Guarantees: instances are immutable; ``a * b`` and ``a / b`` broadcast their batch
    shapes like NumPy; every reduction over plate axes (``prod``) is one array operation.
    """

    __slots__ = ("eta",)
    #: number of trailing axes of each natural parameter that belong to one event
    event_ndim: ClassVar[int] = 0
    #: human-readable names of the natural parameters, for printing
    natural_names: ClassVar[tuple[str, ...]] = ()

    eta: tuple[np.ndarray, ...]

    #: whether the all-zero natural parameters are a proper, normalised distribution
    #: that operators average over (see ``log_normalizer_or_zero``)
    uniform_is_proper: bool = False

    def __init__(self, *eta: Any) -> None:
        object.__setattr__(self, "eta", tuple(np.asarray(e, dtype=float) for e in eta))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    # ----- pickle and copy: the slots are the whole state ------------------------------
    def __getstate__(self) -> dict[str, Any]:
        """Every slot of the class hierarchy (``eta``, and e.g. a Binomial's ``trials``)."""
        return {name: getattr(self, name) for cls in type(self).__mro__
                for name in getattr(cls, "__slots__", ())}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)

    # ----- construction ------------------------------------------------------------
    @classmethod
    def from_natural(cls: type[D], *eta: Any) -> D:
        """The distribution with natural parameters ``eta`` (in the order of
        ``natural_names``), taken as they are: no check that they are proper.

        >>> g = ff.distributions.Gaussian.from_natural(6.0, 2.0)  # eta = (m/v, 1/v)
        >>> g
        Gaussian(mean=3.0, variance=0.5)
        """
        obj = cls.__new__(cls)
        object.__setattr__(obj, "eta", tuple([np.asarray(e, dtype=float) for e in eta]))
        return obj

    @classmethod
    def uniform(cls: type[D], batch_shape: Sequence[int] = (), *event: int) -> D:
        """The (possibly improper) uniform distribution: all natural parameters zero, of
        batch shape ``batch_shape`` (and ``event``: the K of a Discrete or Dirichlet).

        >>> u = ff.distributions.Gaussian.uniform((2,))
        >>> u.precision, bool(u.is_uniform().all()), bool(u.is_proper().any())
        (array([0., 0.]), True, False)
        """
        return cls.from_natural(*cls._uniform_naturals(tuple(batch_shape), *event))

    @classmethod
    def _uniform_naturals(cls, batch_shape: tuple[int, ...], *event: int) -> tuple:
        return tuple(zeros_view(batch_shape + tuple(event)) for _ in cls.natural_names)

    # ----- shape and plates --------------------------------------------------------
    @property
    def batch_shape(self) -> tuple[int, ...]:
        """The plate axes: the shape of the natural parameters without the event axes.

        >>> ff.distributions.Dirichlet(np.ones((4, 3))).batch_shape   # 4 Dirichlets, K = 3
        (4,)
        """
        shape = self.eta[0].shape
        return shape[: len(shape) - self.event_ndim]

    @property
    def shape(self) -> tuple[int, ...]:
        """Same as ``batch_shape`` (as a NumPy array's ``shape``).

        >>> ff.distributions.Gamma(np.ones((2, 3)), rate=1.0).shape
        (2, 3)
        """
        return self.batch_shape

    def _map(self: D, fn) -> D:
        nd = self.event_ndim
        return self.from_natural(*[fn(e, nd) for e in self.eta])

    def __getitem__(self: D, index: Any) -> D:
        return self._map(lambda e, nd: e[index])  # batch axes lead, so NumPy indexing fits

    def take(self: D, indices: np.ndarray, axis: int = 0) -> D:
        """Gather batch elements: ``result[i] = self[indices[i]]`` along ``axis``.

        >>> g = ff.distributions.Gaussian([0.0, 1.0, 2.0], variance=1.0)
        >>> g.take([2, 0, 2]).mean
        array([2., 0., 2.])
        """
        indices = as_index(indices)
        return self._map(lambda e, nd: np.take(e, indices, axis=axis))

    def broadcast_to(self: D, batch_shape: Sequence[int]) -> D:
        """The same distributions repeated to ``batch_shape`` (NumPy broadcasting rules; a
        view: no copy).

        >>> ff.distributions.Beta(2.0, 3.0).broadcast_to((2,))
        Beta(alpha=[2., 2.], beta=[3., 3.])
        """
        batch = tuple(batch_shape)
        if type(self)._map is not Distribution._map:  # (a family mapping more than eta)
            return self._map(lambda e, nd: broadcast_view(e, batch + e.shape[e.ndim - nd:]))
        nd = self.event_ndim  # (a list, not ``_map``'s closure: a gate's clone a call)
        return self.from_natural(*[broadcast_view(e, batch + e.shape[e.ndim - nd:])
                                   for e in self.eta])

    def compact(self: D, always: bool = False) -> D:
        """The same messages with every batch axis that all natural parameters merely
        broadcast (a stride-0 view, as ``broadcast_to`` makes) shrunk to length 1: an
        elementwise moment of the result, broadcast back to ``batch_shape``, equals the
        moment of ``self`` at the cost of the distinct elements only (a gate's clone of a
        K-vector over an (N, K) plate is K distinct messages, not N·K).  Returns ``self``
        when no axis is broadcast, or when ``self`` is small enough (under
        ``COMPACT_ABOVE`` elements) that looking costs more than it saves, unless
        ``always`` (a caller whose fast path needs the distinct elements).

        >>> big = ff.distributions.Gaussian(np.arange(3.0), variance=1.0).broadcast_to(
        ...     (5000, 3))
        >>> big.compact().batch_shape, bool((big.compact().mean == [0.0, 1.0, 2.0]).all())
        ((1, 3), True)
        """
        first = self.eta[0]
        if first.size < COMPACT_ABOVE and not always:
            return self
        nb = first.ndim - self.event_ndim
        if nb <= 0:  # (no batch axis to shrink: a scalar posterior)
            return self
        if not TRACED and all(type(e) is np.ndarray for e in self.eta):
            # (NumPy's own strides: each axis is shrunk where every parameter repeats)
            shrink = [i for i in range(nb) if all(e.shape[i] > 1 and not e.strides[i]
                                                  for e in self.eta)]
        else:
            every = [(e.shape, strides(e)) for e in self.eta]  # (read once per parameter)
            shrink = [i for i in range(nb)
                      if all(st[i] == 0 and sh[i] > 1 for sh, st in every)]
        if not shrink:
            return self
        index = tuple(slice(0, 1) if i in shrink else slice(None) for i in range(nb))
        return self._map(lambda e, nd: e[index])

    def prod(self: D, axis: int | tuple[int, ...] | None = None) -> D:
        """The product of the messages along batch ``axis`` (all batch axes if None):
        natural parameters add.  Two unit-variance Gaussians at 1 and 3 multiply to
        N(2, 1/2):

        >>> ff.distributions.Gaussian([1.0, 3.0], variance=1.0).prod()
        Gaussian(mean=2.0, variance=0.5)
        """
        if axis is None:
            axis = tuple(range(len(self.batch_shape)))
        return self._prod_naturals(axis)

    def _prod_naturals(self: D, axis: int | tuple[int, ...]) -> D:
        return self.from_natural(*(np.sum(e, axis=axis) for e in self._product_form()))

    def _product_form(self) -> tuple[np.ndarray, ...]:
        """Natural parameters as they add under products (overridden with base measures)."""
        return self.eta

    def scatter_prod(self: D, indices: np.ndarray, size: int) -> D:
        """``out[j] = prod of self[i] over i with indices[i] == j``, for j < size: the
        batch axes that ``indices`` spans (its shape leads the batch shape) become one axis
        of length ``size``.

        >>> g = ff.distributions.Gaussian([1.0, 3.0, 5.0], variance=1.0)
        >>> g.scatter_prod(np.array([0, 0, 1]), 2)   # out[0] = g[0]·g[1], out[1] = g[2]
        Gaussian(mean=[2., 5.], variance=[0.5, 1. ])
        """
        out = []
        indices = as_index(indices)
        for e in self._product_form():
            if not TRACED and indices.ndim == 1 and e.shape[:1] == indices.shape \
                    and e.size >= COMPACT_ABOVE:
                out.append(_scatter_matrix(indices, size) @ np.reshape(e, (e.shape[0], -1)))
                out[-1] = out[-1].reshape((size,) + e.shape[1:])
                continue
            if not TRACED and indices.ndim == 1 and e.shape[:1] == indices.shape:
                rest = e.shape[1:]  # one bincount pass
                width = int(np.prod(rest, dtype=int))
                flat = (indices[:, None] * width + np.arange(width)).ravel()
                out.append(np.bincount(flat, weights=np.reshape(e, -1), minlength=size * width
                                       ).reshape((size,) + rest))
                continue
            out.append(add_at(np.zeros((size,) + e.shape[indices.ndim:]), indices, e,
                              repeats=True))
        return self.from_natural(*out)

    # ----- message algebra ----------------------------------------------------------
    def __mul__(self: D, other: D) -> D:
        if type(other) is not type(self):
            return NotImplemented
        # a uniform factor made by ``uniform`` (a broadcast view of 0) changes nothing
        # but the shape: no array pass over the plate for it
        for keep, zero in ((self, other), (other, self)):
            if is_zeros_view(zero.eta):
                shape = keep.eta[0].shape
                if shape == zero.eta[0].shape or shape == broadcast_shapes(
                        shape, zero.eta[0].shape):
                    return keep
        return self.from_natural(*[
            a + b if type(a) is np.ndarray and type(b) is np.ndarray
            and a.size < COMPACT_ABOVE and b.size < COMPACT_ABOVE  # (_add_naturals's
            else _add_naturals(a, b)                                # own sum, inline)
            for a, b in zip(self.eta, other.eta, strict=True)])

    def __truediv__(self: D, other: D) -> D:
        if type(other) is not type(self):
            return NotImplemented
        return self.from_natural(*(_sub_naturals(a, b)
                                   for a, b in zip(self.eta, other.eta, strict=True)))

    def __pow__(self: D, power: float) -> D:
        return self.from_natural(*(e * power for e in self.eta))

    # ----- family-specific ---------------------------------------------------------
    @abstractmethod
    def log_normalizer(self) -> np.ndarray:
        """A(eta), one value per batch element: log ∫ exp(<eta, T(x)>) dx.  For
        N(0, 1), A = ½ log 2π:

        >>> a = ff.distributions.Gaussian(0.0, variance=1.0).log_normalizer()
        >>> bool(np.isclose(a, 0.5 * np.log(2 * np.pi)))
        True
        """
        ...

    @abstractmethod
    def expected_stats(self) -> tuple[np.ndarray, ...]:
        """E[T(x)], in the order of the natural parameters.  A Gaussian's T(x) is
        (x, −x²/2): E = (m, −(v + m²)/2):

        >>> [float(e) for e in ff.distributions.Gaussian(2.0, variance=3.0).expected_stats()]
        [2.0, -3.5]
        """
        ...

    @abstractmethod
    def sufficient_stats(self, x: Any) -> tuple[np.ndarray, ...]:
        """T(x), in the order of the natural parameters (so that log p(x) =
        <eta, T(x)> + log h(x) − A(eta)).  A Gamma's T(x) is (log x, x):

        >>> [float(t) for t in ff.distributions.Gamma(2.0, rate=1.0).sufficient_stats(np.e)]
        [1.0, 2.718281828459045]
        """
        ...

    @abstractmethod
    def is_proper(self) -> np.ndarray:
        """Whether each batch element is a normalisable distribution (a Gaussian's
        precision > 0, a Gamma's shape and rate > 0, ...).  EP's messages may be improper;
        posteriors are checked proper.

        >>> ff.distributions.Gaussian.from_natural([0.0, 0.0], [1.0, -1.0]).is_proper()
        array([ True, False])
        """
        ...

    @property
    @abstractmethod
    def mean(self) -> np.ndarray:
        """E[x] per batch element (a vector per element for a Dirichlet or
        VectorGaussian, a matrix for a Wishart).

        >>> float(ff.distributions.Beta(2.0, 6.0).mean)      # alpha / (alpha + beta)
        0.25
        """

    @property
    @abstractmethod
    def variance(self) -> np.ndarray:
        """Var[x] per batch element (elementwise for vector- and matrix-valued families).

        >>> float(ff.distributions.Gamma(3.0, rate=2.0).variance)   # shape / rate²
        0.75
        """

    @abstractmethod
    def to_scipy(self) -> Any:
        """The same distribution as a frozen ``scipy.stats`` object (batched where SciPy
        takes array parameters; a Discrete or Dirichlet one element at a time).

        >>> frozen = ff.distributions.Gaussian([0.0, 1.0], variance=4.0).to_scipy()
        >>> frozen.mean(), frozen.std()
        (array([0., 1.]), array([2., 2.]))
        """

    @abstractmethod
    def _draw(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        """Independent draws of shape ``shape`` (= size + batch shape) + event shape."""
        ...

    def sample(self, size: int | Sequence[int] | None = None, rng: Any = None
               ) -> np.ndarray:
        """Independent draws, as NumPy's ``Generator`` methods and SciPy's ``rvs`` do.

        ``size`` (an int or a tuple; None for one draw per batch element) leads the
        shape of the result, ``size + batch_shape + event_shape`` (a Discrete's event is
        the category index, so it adds no axis; a Dirichlet's adds K); a result of shape
        () is a NumPy scalar.  ``rng`` is a ``numpy.random.Generator``, a seed (int or
        SeedSequence), or None for fresh entropy; the same seed gives the same draws.

        >>> draws = ff.distributions.Gamma(3.0, rate=2.0).sample(200_000, rng=0)
        >>> draws.shape, round(float(draws.mean()), 2)    # the mean is 3 / 2
        ((200000,), 1.5)
        """
        x = np.asarray(self._draw(generator(rng), sample_shape(size) + self.batch_shape))
        return x[()] if x.ndim == 0 else x

    def log_base_measure(self, x: Any) -> np.ndarray:
        """log h(x) in p(x) = h(x) exp(<eta, T(x)> − A(eta)): 0 for most families; a
        Poisson's −log k!, a Binomial's log C(n, k).

        >>> bool(np.isclose(ff.distributions.Poisson(1.0).log_base_measure(3), -np.log(6.0)))
        True
        """
        return np.zeros(np.shape(x)[: np.ndim(x) - self.event_ndim])

    # ----- generic consequences -----------------------------------------------------
    def is_uniform(self) -> np.ndarray:
        """Whether each batch element is the uniform message (all natural parameters as
        ``uniform`` makes them): one that carries no information.  Computed on the
        distinct elements of a broadcast message (``compact``).

        >>> ff.distributions.Beta([1.0, 2.0], 1.0).is_uniform()    # Beta(1, 1) is uniform
        array([ True, False])
        """
        small = self.compact()
        if small is not self:
            return np.broadcast_to(small.is_uniform(), self.batch_shape)
        u = self._uniform_naturals(self.batch_shape, *self.eta[0].shape[len(self.batch_shape):])
        return np.all([np.all(np.equal(e, ue), axis=tuple(range(e.ndim - self.event_ndim,
                                                                  e.ndim)))
                       for e, ue in zip(self.eta, u, strict=True)], axis=0)

    def _inner(self, a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> np.ndarray:
        total = 0.0
        for x, y in zip(a, b, strict=True):
            with np.errstate(invalid="ignore"):
                term = np.multiply(x, y)
                # 0 * inf = 0 here: only where the product is NaN does it matter (a zero
                # product's sign washes out in the sum below, which starts at +0)
                if any_true(np.isnan(term)):
                    term = np.where((x == 0) | (y == 0), 0.0, term)
            if self.event_ndim:
                term = np.sum(term, axis=tuple(range(-self.event_ndim, 0)))
            total = total + term
        return np.asarray(total)

    def log_prob(self, x: Any) -> np.ndarray:
        """log p(x) per batch element (``x`` broadcasts against the batch), equal to
        SciPy's ``logpdf``/``logpmf`` of ``to_scipy()``.

        >>> g = ff.distributions.Gaussian(1.0, variance=4.0)
        >>> bool(np.isclose(g.log_prob(2.0), -0.5 * np.log(8 * np.pi) - 1 / 8))
        True
        """
        x = np.asarray(x)
        return (self._inner(self.eta, self.sufficient_stats(x)) + self.log_base_measure(x)
                - self.log_normalizer())

    def entropy(self) -> np.ndarray:
        """The differential (or discrete) entropy −E[log p(x)], per batch element.
        N(m, v) has ½ log(2πe v):

        >>> h = ff.distributions.Gaussian(0.0, variance=2.0).entropy()
        >>> bool(np.isclose(h, 0.5 * np.log(2 * np.pi * np.e * 2.0)))
        True
        """
        return self.log_normalizer() - self._inner(self.eta, self.expected_stats())

    def kl(self, other: Distribution) -> np.ndarray:
        """KL(self || other), per batch element.  For Gaussians of variance 1 it is half
        the squared distance of the means:

        >>> G = ff.distributions.Gaussian
        >>> float(G(0.0, variance=1.0).kl(G(3.0, variance=1.0)))
        4.5
        """
        diff = [o - s for o, s in zip(other.eta, self.eta, strict=True)]
        return other.log_normalizer() - self.log_normalizer() - self._inner(
            diff, self.expected_stats())

    def log_average_of(self, other: Distribution) -> np.ndarray:
        """log ∫ p_self(x) p_other(x) dx: the evidence of two messages meeting on an edge.
        For N(0, 1) and N(1, 1) it is the density of N(0, 2) at 1:

        >>> G = ff.distributions.Gaussian
        >>> z = G(0.0, variance=1.0).log_average_of(G(1.0, variance=1.0))
        >>> bool(np.isclose(z, -0.5 * np.log(4 * np.pi) - 1 / 4))
        True
        """
        return (self * other).log_normalizer() - self.log_normalizer() - other.log_normalizer()

    def all_proper(self) -> bool:
        """Whether every element is proper and no parameter is NaN (``check_proper``'s
        verdict, as a bool; families override it with a cheaper pass where one exists).

        >>> ff.distributions.Gamma([1.0, -1.0], rate=1.0).all_proper()
        False
        """
        return bool(np.all(self.is_proper())) and not any(np.isnan(e).any() for e in self.eta)

    def check_proper(self, what: str) -> None:
        """Raise ImproperMessageError naming ``what`` unless every element is proper
        (and no parameter is NaN); return None otherwise.

        >>> ff.distributions.Gamma(-1.0, rate=1.0).check_proper("prec")
        Traceback (most recent call last):
        ...
        factorflow.errors.ImproperMessageError: prec is improper: Gamma(shape=-1.0, ...
        """
        proper = np.asarray(self.is_proper())
        finite = not any(np.isnan(e).any() for e in self.eta)
        if not finite or not np.all(proper):
            bad = np.argwhere(~proper) if proper.ndim else []
            where = f" at index {tuple(int(i) for i in bad[0])}" if len(bad) else ""
            hint = (self.NO_VALUE_HINT if not finite and self.NO_VALUE_HINT else
                    "Give the variable a proper prior, observe more data, or initialise "
                    "its messages (init=...).")
            raise ImproperMessageError(f"{what} is improper{where}: {self!r}. {hint}")

    #: what a NaN parameter means for a family of finitely many values (every value was
    #: given probability 0); None: the generic advice
    NO_VALUE_HINT: str | None = None

    def _params(self) -> dict[str, np.ndarray]:
        return dict(zip(self.natural_names, self.eta, strict=True))

    def __repr__(self) -> str:
        """``Gaussian(mean=0.5, variance=2.0)``; a batch shows its values as NumPy does
        (``mean=[0.1, 0.2, 0.3]``), summarised with ``...`` above 12 elements; when a
        value wraps, each parameter gets a line and continues under its first element."""
        name = type(self).__name__
        items = self.describe().items()
        text = f"{name}("
        for i, (k, v) in enumerate(items):
            text += f"{', ' if i else ''}{k}="
            text += format_values(v, " " * len(text))
        if "\n" not in text:
            return text + ")"
        # a value wraps: one parameter a line, each continuing under its first element
        indent = " " * (len(name) + 1)
        return f"{name}(" + f",\n{indent}".join(
            f"{k}={format_values(v, indent + ' ' * (len(k) + 1))}" for k, v in items) + ")"

    def describe(self) -> dict[str, np.ndarray]:
        """The parameters a person reads (mean and variance, shape and rate, ...), by
        name, as the repr prints them.

        >>> {k: float(v) for k, v in ff.distributions.Gamma(2.0, rate=4.0).describe().items()}
        {'shape': 2.0, 'rate': 4.0}
        """
        return self._params()

    def __eq__(self, other: object) -> bool:
        return (type(other) is type(self) and all(
            np.array_equal(a, b) for a, b in zip(self.eta, other.eta, strict=True)))

    __hash__ = None  # type: ignore[assignment]


#: arrays with more elements than this print summarised (first and last 3 per axis)
REPR_THRESHOLD = 12


def format_values(value: Any, prefix: str = "") -> str:
    """``value`` as a repr shows it: a scalar as Python's ``repr`` (every digit), an
    array as NumPy prints it (current precision; summarised above REPR_THRESHOLD
    elements), continuation lines aligned after ``prefix``."""
    arr = np.asarray(value)
    if arr.ndim == 0:
        item = arr.item()
        return repr(float(item)) if isinstance(item, float) else repr(item)
    return np.array2string(arr, separator=", ", prefix=prefix, threshold=REPR_THRESHOLD,
                           edgeitems=3)


def logsumexp(x: np.ndarray, axis: int = -1, keepdims: bool = False) -> np.ndarray:
    """log Σ exp(x) along ``axis``, exact for -inf entries.

    Same result as ``scipy.special.logsumexp``; written out because SciPy's array-API
    dispatch makes it several times slower on the (N, K) arrays of mixtures, where it is
    the hot path of every gate message.
    """
    x = np.asarray(x, dtype=float)
    top = last_axis_max(x) if axis in (-1, x.ndim - 1) else np.max(x, axis=axis, keepdims=True)
    if not all_true(np.isfinite(top)):
        top = np.where(np.isfinite(top), top, 0.0)
    shifted = np.subtract(x, top)          # one fresh array, exponentiated in place
    shifted = exp_flushed(shifted, out=shifted)  # (the largest term is 1: exact)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(shifted, axis=axis, keepdims=True))
    out += top
    return out if keepdims else np.squeeze(out, axis=axis)


#: exp_flushed's cut: e^-700 ≈ 1e-304 (NumPy's vectorised exp leaves its fast path for
#: results near and below the smallest normal double, e^-708.4)
_LOG_CUT = -700.0


def exp_flushed(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """exp(x), with results below e^-700 (≈ 1e-304) flushed to 0.

    NumPy's exp leaves its vectorised path for every result near or below the smallest
    normal double (and for −inf): a mixture's responsibilities far out in a component's
    tail are mostly such once the components separate, and exp then costs several times
    more.  Beside a term of order 1 — a normalised row, whose largest entry is 1 — they
    add nothing to any sum.  NaN and +inf pass through."""
    x = np.asarray(x, dtype=float)
    if not TRACED and x.size and x.min() >= _LOG_CUT:  # nothing to flush (no NaN):
        return np.exp(x, out=out)                        # one pass, not four
    keep = x >= _LOG_CUT
    y = np.maximum(x, _LOG_CUT, out=out)
    y = np.exp(y, out=y)  # (the returned value: traced, out= writes nothing)
    y *= keep
    return y


#: (what, id(array)) -> (weak reference to the array, what of it): see ``memo_of``
_MEMO: dict[tuple[str, int], tuple[Any, np.ndarray]] = {}
#: the same under tracing: (what, id(array)) -> (weak reference, [(the trace that computed
#: it, what of it)]), see ``_remember_traced``
_TRACED_MEMO: dict[tuple[str, int], tuple[Any, list[tuple[Any, Any]]]] = {}


def trace_state() -> Any:
    """The trace in progress (the tracing backend sets this: the JAX copy's is
    ``jax.extend.core.get_opaque_trace_state``): a traced value is recalled only in
    the trace that made it."""
    return None


def memo_of(what: str, arr: np.ndarray, compute: Any) -> np.ndarray:
    """``compute(arr)``, remembered while ``arr`` lives (keyed by its identity; natural
    parameters are never written in place) and returned read-only.  One sweep reads the
    same posterior's normalised probabilities in several messages (every clone of a
    gate reads its cases): they are computed once.  Under tracing (``TRACED``) the
    traced result is remembered for the rest of the same trace (``remember``): what is
    computed with it (a normalisation's probabilities) is not computed again another
    way (an exponential of the normalised logs)."""
    if TRACED:
        hit = _recall_traced(what, arr)
        if hit is None:  # (made by the program around a loop: valid in its body too)
            hit = _recall_traced(what, arr, PROGRAM_TRACE)
        if hit is not None:
            return hit
        value = compute(arr)
        _remember_traced(what, arr, value)
        return value
    hit = recall(what, arr)
    if hit is not None:
        return hit
    value = np.asarray(compute(arr))
    if value is arr:
        return value
    value.flags.writeable = False
    remember(what, arr, value)
    return value


def recall(what: str, arr: Any) -> Any:
    """``what`` of ``arr`` as ``remember`` recorded it while ``arr`` lives, else None."""
    hit = None if TRACED else _MEMO.get((what, id(arr)))
    if hit is None or hit[0]() is not arr:
        return None
    return arr if hit[1] is None else hit[1]


def remember(what: str, arr: np.ndarray, value: np.ndarray) -> None:
    """Record ``value`` as ``what`` of ``arr`` for ``memo_of`` (forgotten with ``arr``;
    nothing under tracing, where ``memo_of`` keeps its own record).  ``value`` may be
    ``arr`` itself (a normalised array is its own normalisation): the table then holds
    no reference to it, which would keep the array, and its entry, alive for ever (two
    (N, K) arrays a sweep, before)."""
    if TRACED:
        return
    key = (what, id(arr))
    # (the table would keep arr alive; a tuple of values, most memos, has no base)
    if value is not arr and type(value) is not tuple and _based_on(value, arr):
        return
    try:
        # (the table bound here: the callback may run as the interpreter shuts down)
        ref = weakref.ref(arr, lambda _, key=key, memo=_MEMO: memo.pop(key, None))
    except TypeError:  # not weakly referable: not remembered
        return
    _MEMO[key] = (ref, None if value is arr else value)


#: the trace of the whole program (the JAX backend sets it while it traces its jit
#: function): what ``memo_of`` made there of an array is valid in every trace nested in
#: it, a loop's body or a branch, which may read the array (a closed-over value) and
#: then reads the same value of it (the statistics of the data: one array, made once,
#: a constant of every loop, where each loop's body made its own)
PROGRAM_TRACE: Any = None


def _recall_traced(what: str, arr: Any, state: Any = None) -> Any:
    """``what`` of the traced ``arr`` as ``_remember_traced`` recorded it in the trace in
    progress (or in ``state``, where given), else None."""
    got = _TRACED_MEMO.get((what, id(arr)))
    if got is None or got[0]() is not arr:
        return None
    if state is None:
        state = trace_state()
    for made_in, value in got[1]:
        if made_in == state:
            return arr if value is None else value
    return None


def _remember_traced(what: str, arr: Any, value: Any) -> None:
    """Record ``value`` as ``what`` of ``arr`` under tracing, while ``arr`` lives and for
    the trace in progress only (``trace_state``): a traced array of one trace is no
    value in another (a loop's body is traced apart from the program around it, and
    may make its own)."""
    key = (what, id(arr))
    got = _TRACED_MEMO.get(key)
    if got is None or got[0]() is not arr:
        try:
            ref = weakref.ref(arr, lambda _, key=key, memo=_TRACED_MEMO: memo.pop(key, None))
        except TypeError:  # not weakly referable: not remembered
            return
        got = _TRACED_MEMO[key] = (ref, [])
    state = trace_state()
    got[1][:] = [(made_in, v) for made_in, v in got[1] if made_in != state]
    got[1].append((state, None if value is arr else value))


def row_max(x: np.ndarray) -> np.ndarray:
    """The maximum over the last axis (kept, length 1), remembered per array: the
    properness check of a Discrete posterior and its normalisation read the same one
    (a reduction along a short last axis costs about three passes over the array)."""
    if TRACED or not isinstance(x, np.ndarray):
        return np.max(x, axis=-1, keepdims=True)
    return memo_of("row_max", x, last_axis_max)


#: along a last axis at most this long, ``last_axis_max`` compares whole columns
_COLUMNS_UP_TO = 16
#: up to this many elements it compares them as the rows of one transposed copy
_TRANSPOSED_UP_TO = 4096


def last_axis_max(x: np.ndarray) -> np.ndarray:
    """``np.max(x, axis=-1, keepdims=True)``, the same numbers (NaN propagates; max is
    exact).  NumPy's reduction along a short last axis is slow (K = 3: ~50× an
    elementwise pass; K = 10: ~6×), so for K ≤ 16 the columns are compared pairwise
    instead, K − 1 elementwise passes over (N,) arrays."""
    k = x.shape[-1] if x.ndim else 0
    # (from 8 rows a column: the pairwise passes cost less than the reduction's set-up
    # along a short axis, at K = 10 from about 80 rows)
    if TRACED or not 1 < k <= _COLUMNS_UP_TO or x.size < 8 * k * k:
        return np.max(x, axis=-1, keepdims=True)
    if k > 3 and x.size <= _TRANSPOSED_UP_TO and type(x).__module__ == "numpy":
        # a small NumPy array (a mixture's (N, K) at N = 200): its columns as rows of one
        # contiguous copy, compared in one call, in the same order (2.5x at K = 10; a
        # backend's lazy array keeps the pairwise passes)
        columns = x.T if x.ndim == 2 else x.transpose((x.ndim - 1, *range(x.ndim - 1)))
        return np.maximum.reduce(np.ascontiguousarray(columns), axis=0)[..., None]
    out = x[..., 0].copy()
    for j in range(1, k):
        np.maximum(out, x[..., j], out=out)
    return out[..., None]


def _normalize_with_probs(x: np.ndarray) -> np.ndarray:
    """``x`` normalised over its last axis, with its probabilities remembered as its
    ``"exp"`` (what ``Discrete.probs`` and a gate's case weights read): one exponential
    of x − max, summed (``einsum``, a fraction of ``np.sum``'s time along a short axis)
    and divided, instead of a second exponential of the normalised array.  Equal to
    ``x - logsumexp(x)`` and its ``exp_flushed`` to rounding (the probabilities are
    flushed to 0 where x − max < −700, not where the normalised value is).  A large
    C-ordered array goes through in blocks of rows (``_normalize_blocked``)."""
    if (not TRACED and x.ndim >= 2 and x.size >= 2 * _BLOCK_ELEMENTS
            and x.flags.c_contiguous):
        return _normalize_blocked(x)
    top = row_max(x)
    finite = _finite(top)
    return _remembered(*_normalize_rows(x, top, finite=finite), finite)


def _normalize_rows(x: np.ndarray, top: np.ndarray, out: np.ndarray | None = None,
                    probs: np.ndarray | None = None, finite: bool = False
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The normalised logs of ``x`` over its last axis and their probabilities, given
    the row maxima ``top``: one exponential of x − max, summed (``einsum``, a fraction of
    ``np.sum``'s time along a short axis) and divided.  Written into ``out`` and
    ``probs`` where given (a block of ``_normalize_blocked``), else two fresh arrays.
    ``finite``: every row maximum is known to be finite (``_finite``), not tested again."""
    if not finite and not all_true(np.isfinite(top)):
        top = np.where(np.isfinite(top), top, 0.0)
    logs = np.subtract(x, top, out=out)
    p = exp_flushed(logs, out=probs)       # the probabilities (largest 1)
    total = np.einsum("...k->...", p)[..., None]
    if finite:  # (every row holds its maximum's term 1: each total is at least 1, no
        logs -= np.log(total)  # row has a NaN, so neither step can warn)
        p /= total
        return logs, p
    with np.errstate(divide="ignore", invalid="ignore"):
        logs -= np.log(total)
        p /= total
    return logs, p


def _finite(top: np.ndarray) -> bool:
    """Whether every row maximum is finite: then the row had no NaN (the maximum
    propagates NaN) and no +inf, and its normalised logs x − max − log Σ exp(x − max)
    have none either (the sum is at least 1, the maximum's own term)."""
    return bool(np.isfinite(top).all())  # (the array's own reduction: no dispatch)


def _remembered(out: np.ndarray, probs: np.ndarray, nan_free: bool = False) -> np.ndarray:
    """``out``, normalised logs, frozen and remembered as their own normalisation with
    ``probs`` as their ``"exp"``; ``nan_free`` (every row maximum was finite, see
    ``_finite``) is remembered too, as ``"nan_free"``: a properness check of a message
    with these log-odds (a gate's cases) then reads it instead of a pass over them."""
    out.flags.writeable = False
    probs.flags.writeable = False
    remember("log_normalize", out, out)
    remember("exp", out, probs)
    if nan_free:
        remember("nan_free", out, out)
    return out


#: elements per block of ``_normalize_blocked``: the block of x, of the logs and of the
#: probabilities (3 × 256 KB) stay in cache between the steps.  The one threshold of the
#: blocked path: an array of at least two blocks' elements (N·K ≥ 65,536) is normalised
#: block by block (``_normalize_with_probs``), and a Discrete posterior's product of
#: that size made with its normalisation (``_product_normalized``); below, the
#: whole-array steps, one call each, cost less than a loop over blocks
_BLOCK_ELEMENTS = 32768


def _normalize_blocked(x: np.ndarray, fill: Any = None) -> np.ndarray:
    """``_normalize_with_probs`` of a large C-ordered ``x``, a block of rows at a time:
    the same steps on each element, so the same numbers bit for bit, but each block
    passes through max, subtraction, exponential, sum and division while it is in
    cache (one pass over memory for the seven: on LDA's 10⁵ tokens × 10 topics about
    twice as fast).  The row maxima are remembered as x's ``row_max``, as there.

    Where ``x`` is an (N, K) ``rows_product`` of statistics S (N, J) — a mixture's
    responsibilities from its data's evidence — what the next messages and the bound
    read of the probabilities q is accumulated from each block while it is in cache,
    and remembered with q: Σ_n q_nk (``"column_sums"``, the Dirichlet's counts), Sᵀ q
    (``"rows_sums"``, the components' data sums, read by ``weighted_rows`` once it has
    been asked for them over S) and, where E[log w] was added into the product
    (``"rows_added"``), Σ_k q_nk E[log w_k] per datum (``"rows_dot"``, the Discrete's
    term of the bound).  Each is a small BLAS product of the block, equal to the
    product over the whole array to rounding.  ``fill(rows)``, where given, writes
    those rows of ``x`` first (``_product_normalized``: x made block by block)."""
    k = x.shape[-1]
    flat = x.reshape(-1, k)
    n = flat.shape[0]
    known = recall("row_max", x)
    tops = np.empty((n, 1)) if known is None else known.reshape(-1, 1)
    out, probs = np.empty_like(flat, dtype=float), np.empty_like(flat, dtype=float)
    step = max(1, _BLOCK_ELEMENTS // k)
    product = recall("rows_product", x) if x.ndim == 2 else None
    stats = sums = columns = dots = added = ones = None
    if product is not None:
        stats, ones = product[0], np.ones(min(step, n))
        columns = np.zeros(k)
        if recall("weighted_rows", stats) is not None:
            sums = np.zeros((stats.shape[1], k))
        added = recall("rows_added", x)
        dots = None if added is None else np.empty(n)
    for i in range(0, n, step):
        rows = slice(i, i + step)
        if fill is not None:
            fill(rows)
        if known is None:
            tops[rows] = last_axis_max(flat[rows])
        _, p = _normalize_rows(flat[rows], tops[rows], out=out[rows], probs=probs[rows])
        if stats is None:
            continue
        if sums is not None:  # (its first column, of ones: Σ_n q_nk)
            sums += stats[rows].T @ p
        else:
            columns += ones[:len(p)] @ p
        if dots is not None:
            np.matmul(p, added, out=dots[rows])
    if known is None:
        tops = tops.reshape(x.shape[:-1] + (1,))
        tops.flags.writeable = False
        remember("row_max", x, tops)
    out, probs = out.reshape(x.shape), probs.reshape(x.shape)  # (the objects remembered)
    for made in (sums, columns, dots):  # (read-only: each reader gets the same arrays)
        if made is not None:
            made.flags.writeable = False
    if stats is not None:
        if sums is not None:
            columns = sums[product[2]]
            remember("rows_sums", probs, (stats, sums))
        remember("column_sums", probs, columns)
        if dots is not None:
            remember("rows_dot", probs, (added, dots))
    return _remembered(out, probs, _finite(tops))


def _scatter_matrix(indices: np.ndarray, size: int) -> Any:
    """The (size, len(indices)) 0/1 matrix that sums row i of an array into row
    ``indices[i]`` (SciPy CSR, its columns in order), remembered while ``indices`` lives:
    LDA's θ sums each pass's (tokens, K) messages into documents with it.  Each output
    element adds its inputs in the order of i starting from 0, as ``np.bincount`` does,
    so the sums are the same bit for bit, in a fraction of bincount's time over a
    (tokens × K) flat index."""
    from scipy import sparse

    key = f"scatter_matrix_{size}"
    hit = recall(key, indices)
    if hit is not None:
        return hit
    n = indices.shape[0]
    matrix = sparse.csc_matrix((np.ones(n), indices, np.arange(n + 1)),
                               shape=(size, n)).tocsr()
    remember(key, indices, matrix)
    return matrix


def _based_on(value: Any, arr: np.ndarray) -> bool:
    """Whether ``value`` is a view whose chain of bases reaches ``arr``."""
    base = getattr(value, "base", None)
    while base is not None:
        if base is arr:
            return True
        base = getattr(base, "base", None)
    return False


def log_normalize(log_w: np.ndarray) -> np.ndarray:
    """log weights normalised over the last axis (remembered per array, and a result
    is known to be normalised: normalising it again costs nothing); its probabilities
    are computed with it (``_normalize_with_probs``).  Under tracing the result is
    noted as normalised (``note_traced``) while it lives, so that normalising it again
    returns it there too (a mixture's cases are the responsibilities' normalised logs,
    which each clone of the gate normalises again)."""
    if TRACED:
        if known_traced("normalized", log_w):
            return log_w
        out = memo_of("log_normalize", np.asarray(log_w, dtype=float), _normalize_traced)
        note_traced("normalized", out)
        return out
    return memo_of("log_normalize", np.asarray(log_w, dtype=float), _log_normalize_new)


def _log_normalize_new(x: np.ndarray) -> np.ndarray:
    """``log_normalize`` of an array not normalised before (NumPy: the memo missed)."""
    if x.ndim and x.shape[-1] and x.size:
        return _normalize_with_probs(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = x - logsumexp(x, axis=-1, keepdims=True)
    out.flags.writeable = False
    remember("log_normalize", out, out)
    return out


def _normalize_traced(x: Any) -> Any:
    """``_normalize_with_probs`` under tracing, the same steps (``_normalize_rows``'s:
    one exponential of x − max, flushed to 0 below e^−700, summed and divided): the
    normalised logs, their probabilities remembered as their ``"exp"`` for the rest of
    the trace (not a second exponential of the normalised logs).  The flush is a select
    here (``exp_flushed``'s product with its mask is one in XLA, which made NaN · 0 = 0
    and a NaN row normalised to finite values), so a NaN stays where NumPy keeps it.
    Also remembered, for the properness checks and the bound: the logarithms of the row
    sums as the ``"row_log_sums"`` of ``x`` and of the logs (finite in a row exactly
    where it has a finite entry, no NaN and no +inf: the maximum is moved to 0 where it
    is not finite, and then the sum is 0, NaN or inf; XLA's maximum over a row on the
    CPU may pass a NaN over, the sum does not), the logs' ``"logsumexp"`` and what they
    were made from (``"normalized_from"``: x, its row maxima and log sums), so that a
    reader may make them again inside a fused expression instead of reading an (N, K)
    array written out for it."""
    if not x.ndim or not x.shape[-1] or not x.size:
        with np.errstate(divide="ignore", invalid="ignore"):
            return x - logsumexp(x, axis=-1, keepdims=True)
    step = max(1, _BLOCK_ELEMENTS // x.shape[-1])
    big = x.ndim == 2 and x.shape[0] >= 2 * step
    product = _recall_traced("rows_product", x) if big else None
    if product is not None:
        top, log_total, probs, sums, log_sum = _normalize_traced_product(
            product, max(1, _TRACED_PRODUCT_BLOCK // x.shape[-1]))
    elif big and x.shape[-1] >= _TRACED_BLOCKS_FROM_K:
        top, log_total, probs = _normalize_traced_blocked(x, step)
    else:
        top, log_total, probs = _normalize_traced_rows(x)
    logs = (x - top) - log_total
    _remember_traced("exp", logs, probs)
    if product is not None:  # what the readers read instead of the (N, K) arrays: the
        # sums (the data's weighted sums, the Dirichlet's counts, the bound's terms:
        # runtime.backends.jax_bound), and the product again (``remade``)
        stats, coef, ones = product
        _remember_traced("rows_sums", probs, (stats, sums))
        _remember_traced("column_sums", probs, sums[ones])
        _remember_traced("normalized_product", logs, (product, log_sum))
        _remember_traced("probs_product", probs, product)
        _remember_traced("row_log_sum", logs, log_sum)
        _remember_traced("row_log_sum", x, log_sum)
        return logs
    _remember_traced("row_log_sums", x, log_total)
    _remember_traced("row_log_sums", logs, log_total)
    _remember_traced("logsumexp", logs, top + log_total)
    _remember_traced("normalized_from", logs, (x, top, log_total))
    return logs


#: under tracing, rows of at least this many entries are normalised block by block
#: (``_normalize_traced_blocked``): at K = 10 (the 1-D mixture, 10⁶ rows) the blocks
#: took a quarter off JAX's sweep, at K = 3 (the 2-D mixture) they cost a tenth more
_TRACED_BLOCKS_FROM_K = 8


def _normalize_traced_rows(x: Any) -> tuple[Any, Any, Any]:
    """``_normalize_traced``'s steps on rows of ``x``: the row maxima (0 where not
    finite), the logarithms of the row sums of exp(x − max) flushed to 0 below e^−700
    (a select: NaN stays NaN), and the probabilities."""
    top = np.max(x, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    shifted = x - top
    p = np.where(shifted < _LOG_CUT, 0.0, np.exp(np.maximum(shifted, _LOG_CUT)))
    total = np.einsum("...k->...", p)[..., None]
    return top, np.log(total), p / total


def _normalize_traced_blocked(x: Any, step: int) -> tuple[Any, Any, Any]:
    """``_normalize_traced_rows`` of a large (N, K) ``x``, ``step`` rows at a time in a
    ``lax.fori_loop`` (as ``_normalize_blocked`` in NumPy, the same threshold): each
    block passes through max, exponential, sum and division while it is in cache, where
    XLA wrote the exponentials of the whole array out and read them back twice (1-D
    mixture at 10⁶: JAX's CPU ms a sweep 226–230 → 170–182).  The last block starts at
    N − ``step`` and computes again rows the one before it did (the same numbers: rows
    are independent), so that every block has one static shape."""
    from jax import lax
    n = x.shape[0]

    def block(i: Any, made: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
        start = np.minimum(i * step, n - step)
        got = _normalize_traced_rows(lax.dynamic_slice_in_dim(x, start, step, 0))
        return tuple(lax.dynamic_update_slice_in_dim(m, g, start, 0)
                     for m, g in zip(made, got, strict=True))
    return lax.fori_loop(0, -(-n // step), block,
                         (np.zeros((n, 1)), np.zeros((n, 1)), np.zeros_like(x)))


#: elements per block of ``_normalize_traced_product`` (its rows: this over K), a
#: quarter of NumPy's blocks: at 10⁶ rows (load 4–7, CPU ms a sweep) the 1-D mixture's
#: (K = 10) took 84 at 32768, 60 at 16384 and 8192, 67 at 4096 and 2048; the 2-D
#: mixture's (K = 3) 55 at 32768, 35 at 8192, 32 at 4096, 36 at 2048
_TRACED_PRODUCT_BLOCK = 8192


def _normalize_traced_product(product: tuple[Any, Any, int], step: int
                               ) -> tuple[Any, Any, Any, Any, Any]:
    """``_normalize_traced_blocked`` of an (N, K) ``rows_product`` S C (a mixture's
    responsibilities from its data's evidence, ``_add_naturals_traced``), each block of
    rows made from its statistics inside the loop (one (step, J) × (J, K) product), so
    that no (N, K) array of logits is written out, and with each block's contributions
    accumulated while it is in cache, as ``_normalize_blocked`` does in NumPy: Sᵀ q
    (J, K), whose row ``ones`` is Σ_n q_nk, and Σ_n (max_n + log Σ_k exp(x_nk − max_n))
    (the log normalisers' sum: the entropy's term of the bound, and finite exactly when
    every row's is).  The last block, which starts at N − ``step``, adds only the rows
    the blocks before it did not.  Returns the row maxima, the log row sums, the
    probabilities (as ``_normalize_traced_rows``), Sᵀ q and that sum."""
    from jax import lax
    stats, coef, _ = product
    n, j = stats.shape
    k = coef.shape[-1]

    def block(i: Any, made: tuple) -> tuple:
        start = np.minimum(i * step, n - step)
        rows = lax.dynamic_slice_in_dim(stats, start, step, 0)
        top, log_total, p = _normalize_traced_rows(rows @ coef)
        new = (start + np.arange(step))[:, None] >= i * step  # (the last block's overlap)
        sums = made[3] + np.where(new, rows, 0.0).T @ p
        log_sum = made[4] + np.sum(np.where(new, top + log_total, 0.0))
        return tuple(lax.dynamic_update_slice_in_dim(m, g, start, 0)
                     for m, g in zip(made[:3], (top, log_total, p), strict=True)) + (
            sums, log_sum)
    return lax.fori_loop(0, -(-n // step), block,
                         (np.zeros((n, 1)), np.zeros((n, 1)), np.zeros((n, k)),
                          np.zeros((j, k)), np.zeros(())))


def remade(a: Any) -> Any:
    """Under tracing: a function of no arguments that makes the traced (N, K) ``a`` again
    from the statistics and coefficients it was made of, where it is a ``rows_product``,
    the normalised logs of one or their probabilities (``_normalize_traced_product``);
    else None.  A ``lax.cond`` branch that calls it reads those (the statistics, a
    constant of the loop, and (J, K) numbers), not an (N, K) array written out for it
    (an operand of a branch is).  The same operations on the same numbers as the
    whole-array path (``_normalize_traced_rows``), equal to the blocked ones to
    rounding."""
    product = _recall_traced("rows_product", a)
    if product is not None:
        stats, coef, _ = product
        return lambda: stats @ coef
    got = _recall_traced("normalized_product", a)
    if got is not None:
        stats, coef, _ = got[0]

        def logs() -> Any:
            x = stats @ coef
            top, log_total, _ = _normalize_traced_rows(x)
            return (x - top) - log_total
        return logs
    product = _recall_traced("probs_product", a)
    if product is not None:
        stats, coef, _ = product
        return lambda: _normalize_traced_rows(stats @ coef)[2]
    return None


def traced_probs(log_w: Any) -> Any:
    """Under tracing: the probabilities that ``log_normalize(log_w)`` made with the
    normalised logs in the trace in progress, else None."""
    logs = log_w if known_traced("normalized", log_w) else _recall_traced(
        "log_normalize", log_w)
    return None if logs is None else _recall_traced("exp", logs)


def note_traced_probs(log_w: Any, probs: Any) -> None:
    """Under tracing: ``probs`` are the probabilities of ``log_normalize(log_w)`` for the
    rest of the trace in progress (a JAX loop carries them from the sweep that made
    them to the next: ``jax_carry``).  The normalisation made here is then read by
    nothing that reads the probabilities, and the compiler drops what nothing reads."""
    _remember_traced("exp", log_normalize(log_w), probs)


@functools.lru_cache(maxsize=256)
def _arange(k: int) -> np.ndarray:
    """``np.arange(k)``, read-only, made once per k."""
    out = np.arange(k)
    out.flags.writeable = False
    return out


def is_arange(index: Any, k: int) -> bool:
    """Whether ``index`` is ``arange(k)`` (a Switch's clones, element k on case k).  In
    NumPy by its values (one comparison with a remembered ``arange``: ``np.array_equal``
    converts both sides and costs several times the test at small K); under tracing,
    where values are unknown, whether the backend's ``np.arange(k)`` made it (its
    ``"arange"`` note, ``note_traced``; anything else answers False, and the kernels
    take their general path, which gives the same result)."""
    if TRACED:
        return known_traced("arange", index) == k
    index = np.asarray(index)
    return index.shape == (k,) and bool((index == _arange(k)).all())


#: (what, id(array)) -> (weak reference to the array, value): facts about arrays that
#: are known while tracing although their values are not (``note_traced``)
_TRACED_FACTS: dict[tuple[str, int], tuple[Any, Any]] = {}


def note_traced(what: str, a: Any, value: Any = True) -> None:
    """Record ``value`` as ``what`` of the traced array ``a`` while it lives: ``"arange"``
    (n: the JAX namespace's ``np.arange(n)`` made it), ``"normalized"`` (True:
    ``log_normalize`` made it).  ``value`` must not be an array of the trace (the table
    outlives it).  Nothing is recorded for what cannot be weakly referenced (a Python
    scalar): ``known_traced`` then gives None and the kernels take their general path."""
    key = (what, id(a))
    try:
        ref = weakref.ref(a, lambda _, key=key, table=_TRACED_FACTS: table.pop(key, None))
    except TypeError:
        return
    _TRACED_FACTS[key] = (ref, value)


def known_traced(what: str, a: Any) -> Any:
    """``what`` of ``a`` as ``note_traced`` recorded it, else None."""
    hit = _TRACED_FACTS.get((what, id(a)))
    return hit[1] if hit is not None and hit[0]() is a else None


def distinct(a: Any) -> Any:
    """``a`` with every axis along which it is a broadcast view (stride 0) shrunk to
    length 1: the same values under NumPy broadcasting, without a pass over copies."""
    if type(a) is np.ndarray:  # (its own attributes: no dispatch)
        if not a.ndim or all(a.strides):
            return a
    elif not np.ndim(a) or not hasattr(a, "shape"):
        return a
    st = strides(a)
    if all(st):
        return a
    return a[tuple(slice(0, 1) if s == 0 and n > 1 else slice(None)
                   for s, n in zip(st, a.shape, strict=True))]


#: id -> (weak reference, strides) of the broadcast views made under tracing: a traced
#: array has no strides to show which axes only repeat its values; this table says
#: (``strides``), while the array lives.  The JAX backend's ``broadcast_to`` fills it.
_TRACED_VIEWS: dict[int, tuple[Any, tuple[int, ...]]] = {}
#: the ids of the traced views that ``zeros_view`` made (all-zero by construction)
_TRACED_ZEROS: set[int] = set()


def note_view(view: Any, source_shape: tuple[int, ...]) -> None:
    """Record, under tracing, that ``view`` is ``np.broadcast_to`` of an array of
    ``source_shape``: stride 0 on each axis the source lacks or holds once."""
    lead = len(view.shape) - len(source_shape)
    st = tuple(0 if k < lead or (source_shape[k - lead] == 1 and n != 1) else 1
               for k, n in enumerate(view.shape))
    key = id(view)

    def forget(_: Any, key: int = key, table: dict = _TRACED_VIEWS,
               zeros: set = _TRACED_ZEROS) -> None:
        table.pop(key, None)
        zeros.discard(key)
    _TRACED_VIEWS[key] = (weakref.ref(view, forget), st)


def _traced_view(a: Any) -> tuple[int, ...] | None:
    hit = _TRACED_VIEWS.get(id(a))
    return hit[1] if hit is not None and hit[0]() is a else None


@functools.lru_cache(maxsize=4096)
def _shapes_broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    return np.broadcast_shapes(*shapes)


def broadcast_shapes(*shapes: Any) -> tuple[int, ...]:
    """``np.broadcast_shapes(*shapes)``, remembered per tuple of shapes (a shape, not
    a value: the same under tracing).  Operators broadcast the same plate shapes every
    sweep; NumPy's function costs more than the messages' arithmetic at small N."""
    try:
        return _shapes_broadcast(*shapes)
    except TypeError:  # (a shape given as a list: not hashable)
        return np.broadcast_shapes(*shapes)


def broadcast_view(a: Any, shape: tuple[int, ...]) -> Any:
    """``np.broadcast_to(a, shape)``: the same read-only view (the same shape, strides
    and values), made directly from ``a``'s memory when ``a`` is a C-contiguous NumPy
    array of numbers (the natural parameters of a posterior seen by every datum), where
    ``np.broadcast_to``'s own set-up costs twice the view's.  ValueError, as there,
    when the shapes do not broadcast."""
    if type(a) is np.ndarray and 1 not in a.shape and 0 not in shape:
        lead = len(shape) - a.ndim  # the common case, no axis of length 1 to look at:
        if lead >= 0 and shape[lead:] == a.shape and a.flags.c_contiguous and \
                a.dtype.kind in "fbiu":  # (a's strides behind ``lead`` zeros)
            view = np.ndarray(shape, a.dtype, a, 0, (0,) * lead + a.strides)
            view.flags.writeable = False
            return view
    if (type(a) is not np.ndarray or not a.flags.c_contiguous or not a.size
            or a.dtype.kind not in "fbiu" or 0 in shape):
        return np.broadcast_to(a, shape)
    lead = len(shape) - a.ndim
    if lead < 0:
        return np.broadcast_to(a, shape)  # (its error)
    st = [0] * len(shape)
    for i, (n, s) in enumerate(zip(a.shape, a.strides, strict=True)):
        if n == 1:  # (stride 0, as NumPy's, even where the target's axis is 1 too)
            continue
        if n != shape[lead + i]:
            return np.broadcast_to(a, shape)  # (its error)
        st[lead + i] = s
    view = np.ndarray(shape, a.dtype, a, 0, tuple(st))
    view.flags.writeable = False
    return view


def zeros_view(shape: tuple[int, ...]) -> np.ndarray:
    """An all-zero array of ``shape`` that holds one element (a read-only broadcast view):
    the natural parameters of a uniform message, which products then skip."""
    view = broadcast_view(np.zeros(()), shape)
    if TRACED and _traced_view(view) is not None:
        _TRACED_ZEROS.add(id(view))
    return view


def strides(a: Any) -> tuple[int, ...]:
    """``a.strides``; under tracing, 0 on the axes along which ``a`` is known to be a
    broadcast view (``note_view``) and 1 elsewhere."""
    got = getattr(a, "strides", None)
    if got is not None:
        return tuple(got)
    return _traced_view(a) or (1,) * np.ndim(a)


def is_zeros_view(eta: tuple[np.ndarray, ...]) -> bool:
    """Whether every array is a non-empty broadcast view of one zero (``zeros_view``),
    read in O(1): a uniform message made by ``uniform``.  Under tracing, whether each
    array is one that ``zeros_view`` made (a structural fact, known while tracing)."""
    if TRACED:
        return all(e.size and id(e) in _TRACED_ZEROS and _traced_view(e) is not None
                   for e in eta)
    for e in eta:  # (a loop, not a generator: this runs on every product of messages)
        if not e.size or any(e.strides) or not e.flat[0] == 0.0:
            return False
    return True


def as_index(indices: Any) -> np.ndarray:
    """Observed categories as array indices (observed values may be stored as floats;
    they were checked to be integers in range when given)."""
    indices = np.asarray(indices)
    return indices if indices.dtype.kind in "iu" else indices.astype(np.intp)


def log_normalizer_or_zero(d: Distribution) -> np.ndarray:
    """A(eta), or 0 where the message is uniform (a uniform message is the weight 1).

    This is the convention of the evidence formulas: a message that carries no
    information integrates its variable out instead of normalising it.  A family whose
    all-zero natural parameters are a proper distribution (``uniform_is_proper``: the
    Dirichlet(1, …, 1), density Γ(K) on the simplex) keeps its normaliser, since the
    operators read such a message as that distribution (E[p_k] = 1/K).
    """
    if d.uniform_is_proper:
        return d.log_normalizer()
    uniform = d.is_uniform()
    if not any_true(uniform):
        return d.log_normalizer()
    with np.errstate(all="ignore"):
        return np.where(uniform, 0.0, d.log_normalizer())
