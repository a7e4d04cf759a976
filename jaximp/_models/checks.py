"""Validation of both layouts at construction (``__post_init__``): a model built by hand or
read from a damaged file is refused with a ``TypeError``/``ValueError`` that names the field and
the fix, instead of failing deep inside a kernel or computing a wrong number.

The checks run at the border: when a model is built or imported, and when ``dataclasses.replace``
builds a modified one. JAX rebuilding a model from its leaves (``jax.jit`` and ``vmap`` tracing,
``grad``, ``tree_map``) runs none of them (``jaximp._models.ensemble.register_model``). A model is
still built in traced code (``dataclasses.replace`` under ``jax.grad``) and with batch axes (stacked
models), so the checks are in three tiers:

* dtypes and shapes, on whatever has a ``shape`` and a ``dtype`` (concrete arrays, tracers,
  ``jax.ShapeDtypeStruct``): each field's trailing axes, leading axes free (batch axes);
* static fields (names, NaN modes, players, featurizer), plain Python;
* values (index ranges, tree structure, finite leaf values), in NumPy on concrete arrays only,
  once per set of ``jax.Array`` objects (a rebuilt model reads nothing back from the device).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaximp._models.categories import CategoryCodes
from jaximp._models.featurizer import Featurizer

NAN_MODES = ("Min", "Max", "AsIs")


@dataclasses.dataclass(frozen=True)
class ArraySpec:
    """The layout of one array field: its trailing axes and the kind of its dtype.

    Attributes:
        name: the field.
        axes: the trailing axes, letters of the shape legend (or words: ``n_borders``,
            ``n_words``) that every field agrees on, or fixed sizes.
        kind: ``"int"``, ``"float"``, ``"bool"`` or ``"uint32"``.
    """

    name: str
    axes: tuple[str | int, ...]
    kind: str


_KINDS = {"int": ("i32", "integers", "np.int32"), "float": ("f32", "floats", "np.float32"),
          "bool": ("bool", "booleans", "bool"), "uint32": ("u32", "32-bit unsigned words", "np.uint32")}
_FLOAT0 = np.dtype(jax.dtypes.float0)


def _kind_ok(dtype: Any, kind: str) -> bool:
    if dtype == _FLOAT0:  # the tangent of an integer or boolean field under jax.grad
        return True
    if kind == "int":
        return dtype.kind in "iu"
    if kind == "float":
        return dtype.kind == "f" or jnp.issubdtype(dtype, jnp.floating)  # bfloat16 is no NumPy kind "f"
    return dtype == (np.bool_ if kind == "bool" else np.uint32)


def check_arrays(owner: str, ens: Any, specs: tuple[ArraySpec, ...]) -> dict[str, int]:
    """Check the dtype and trailing axes of every array field, and that the fields agree on
    each size; returns the sizes found (``{"T": ..., "L": ...}``).

    Only fields with a ``shape`` and a ``dtype`` are checked: concrete arrays, tracers (under
    ``jax.jit``, ``vmap``, ``grad``), ``jax.ShapeDtypeStruct``; None, the ints of a ``vmap``
    ``in_axes`` tree and other objects are skipped. Leading axes beyond a field's own are batch
    axes (a stacked batch of ensembles), free.

    Raises:
        TypeError: a field's dtype is of the wrong kind.
        ValueError: a field has fewer axes than its layout, or disagrees with another on a size.
    """
    sizes: dict[str, tuple[int, str]] = {}
    for spec in specs:
        value = getattr(ens, spec.name)
        shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
        if shape is None or dtype is None:
            continue
        if not _kind_ok(dtype, spec.kind):
            _, words, cast = _KINDS[spec.kind]
            raise TypeError(f"{owner}: {spec.name} must be {_layout(spec)}, an array of {words}; got dtype {dtype} "
                            f"(cast it: np.asarray({spec.name}, {cast}))")
        n_axes = len(spec.axes)
        if len(shape) < n_axes:
            raise ValueError(f"{owner}: {spec.name} must be {_layout(spec)} ({n_axes} axes); got shape "
                             f"{tuple(shape)}")
        for axis, n in zip(spec.axes, tuple(shape)[len(shape) - n_axes:]):
            known = (axis, "") if isinstance(axis, int) else sizes.setdefault(axis, (n, spec.name))
            if n != known[0]:
                source = f" as in {known[1]}" if known[1] else ""
                raise ValueError(f"{owner}: {spec.name} must be {_layout(spec)} with {axis} = {known[0]}{source}; "
                                 f"got shape {tuple(shape)} (every array of the ensemble agrees on the sizes of "
                                 "the shape legend in jaximp._models)")
    return {axis: n for axis, (n, _) in sizes.items()}


def _layout(spec: ArraySpec) -> str:
    return f"{_KINDS[spec.kind][0]}[{', '.join(str(a) for a in spec.axes)}]"


def concrete(value: Any) -> bool:
    """Whether ``value`` is an array whose values can be read on the host: a NumPy array, or a
    ``jax.Array`` that is no tracer, not deleted and held in this process (never ``float0``)."""
    if isinstance(value, np.ndarray):
        return value.dtype != _FLOAT0
    return (isinstance(value, jax.Array) and not isinstance(value, jax.core.Tracer)
            and value.dtype != _FLOAT0 and not value.is_deleted() and value.is_fully_addressable)


# Checks passed by jax arrays: key -> (weak references to the arrays, result). Not model state of
# the model cache (jaximp._models.cache): keyed by the arrays, which models rebuilt from them share.
# An entry goes when one of its arrays is collected, all of them when there are _PASSED_SIZE; a
# result is small beside its arrays (True, or a flag per node and leaf of a model's trees).
_PASSED: dict[tuple, tuple] = {}
_PASSED_SIZE = 512
_TRUSTED = contextvars.ContextVar("jaximp_models_trusted", default=False)
TRUSTED = "trusted"  # the result of a check recorded as passed without running (see ``trusted``)


@contextlib.contextmanager
def trusted() -> Iterator[None]:
    """Build models whose values are valid by construction (derived in jaximp from a checked
    model, such as ``from_oblivious``): the value checks record their ``jax.Array`` objects as
    passed (result :data:`TRUSTED`) without reading them back. Dtypes, shapes and static fields
    are still checked."""
    token = _TRUSTED.set(True)
    try:
        yield
    finally:
        _TRUSTED.reset(token)


def check_values(check: Callable[..., Any], arrays: tuple[Any, ...], *static: Any) -> Any:
    """``check(*arrays as NumPy, *static)`` when every array is concrete (else None, skipped),
    run once per set of ``jax.Array`` objects: a model rebuilt from the same arrays
    (``dataclasses.replace`` of another field, a pytree round trip) reads nothing back from the
    device. NumPy arrays, which can change in place, are checked every time (no transfer).
    ``check`` raises on a bad value; its result (not None) is cached with it (:data:`TRUSTED`
    for arrays of a model built under :func:`trusted`)."""
    key = (check, *[id(a) for a in arrays], *static)
    hit = _PASSED.get(key)
    if hit is not None:
        refs, result = hit
        if all(ref() is a for ref, a in zip(refs, arrays)):  # the very arrays that passed (immutable)
            return result
    for a in arrays:
        if not concrete(a):
            return None
    immutable = all(isinstance(a, jax.Array) for a in arrays)
    result = TRUSTED if immutable and _TRUSTED.get() else check(*[np.asarray(a) for a in arrays], *static)
    if immutable:
        if len(_PASSED) >= _PASSED_SIZE:
            _PASSED.clear()
        _PASSED[key] = (tuple(weakref.ref(a, functools.partial(_collected, key)) for a in arrays), result)
    return result


def _collected(key: tuple, ref: weakref.ref) -> None:
    """One of the arrays of ``_PASSED[key]`` was collected: drop the entry (unless it is a later
    one under the same ids, whose references are others)."""
    entry = _PASSED.get(key)
    if entry is not None and any(r is ref for r in entry[0]):
        _PASSED.pop(key, None)


def first_bad(values: np.ndarray, bad: np.ndarray) -> str:
    """``"{value} at {index}"``: the first entry of ``values`` where ``bad`` (a boolean mask of
    its shape, or one it broadcasts to) is True, batch axes included, for messages."""
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    value = np.broadcast_to(values, bad.shape)[index]
    return f"{value} at {index[0] if len(index) == 1 else index}"


def _check_finite(owner: str, name: str, values: np.ndarray, allow_inf: bool = False) -> None:
    bad = np.isnan(values) if allow_inf else ~np.isfinite(values)
    if bad.any():
        what = "NaN" if allow_inf else "NaN or infinity"
        hint = "" if allow_inf else (" (a number past float32's range, 3.4e38, becomes inf: rescale the model, or "
                                     "build it from float64 arrays under jax_enable_x64)")
        raise ValueError(f"{owner}: {name} must not hold {what}; got {first_bad(values, bad)}{hint}")


def check_numbers(owner: str, ens: Any, finite: tuple[str, ...], not_nan: tuple[str, ...]) -> None:
    """The float fields of ``finite`` (leaf values, weights, scale, bias) hold finite numbers,
    those of ``not_nan`` (borders, where ``+inf`` pads) no NaN.

    Raises:
        ValueError: naming the field and the first bad entry.
    """
    for name in finite + not_nan:
        value = getattr(ens, name)
        if getattr(value, "dtype", None) is not None and jnp.issubdtype(value.dtype, jnp.floating):
            check_values(_finite_check, (value,), owner, name, name in not_nan)


def _finite_check(values: np.ndarray, owner: str, name: str, allow_inf: bool) -> bool:
    _check_finite(owner, name, values, allow_inf)
    return True


def _length(value: Any) -> int | str:
    return len(value) if hasattr(value, "__len__") else "?"


def _columns(owner: str, name: str, sets: Any, n_columns: int, count: int | None, of: str) -> None:
    if not isinstance(sets, tuple) or (count is not None and len(sets) != count):
        raise ValueError(f"{owner}: {name} must be a tuple of {'' if count is None else count} tuples of input "
                         f"columns{of}; got {type(sets).__name__} of {_length(sets)}")
    for i, cols in enumerate(sets):
        if (not isinstance(cols, tuple) or not cols
                or not all(isinstance(c, (int, np.integer)) and 0 <= c < n_columns for c in cols)):
            raise ValueError(f"{owner}: {name}[{i}] must be a non-empty tuple of input columns in [0, {n_columns}); "
                             f"got {cols!r}")


_STATIC_FIELDS = ("n_features", "feature_names", "nan_modes", "loss_function", "class_names", "leaf_weights_known",
                  "featurizer", "players", "player_of", "reads", "n_searched", "category_codes")


def check_static(owner: str, ens: Any, n_evaluated: int | None) -> None:
    """Check the static fields: F, the names, the NaN modes (E of them when E is known), the
    loss, the classes and the categorical description (featurizer, players, category codes),
    and that each is hashable (``jax.jit`` compares them). Python checks of the fields, about
    40 microseconds for 300 features, run at every build.

    Raises:
        TypeError, ValueError: naming the field and what it must be.
    """
    _check_static(owner, ens, n_evaluated)
    for name in _STATIC_FIELDS:
        value = getattr(ens, name, None)
        try:
            hash(value)
        except TypeError:
            raise TypeError(f"{owner}: {name} must be hashable (a static field of the pytree, compared by "
                            f"jax.jit: tuples, not lists or arrays); got {value!r:.200}") from None


def _check_static(owner: str, ens: Any, n_evaluated: int | None) -> None:
    f = ens.n_features
    if not isinstance(f, (int, np.integer)) or isinstance(f, bool) or f < 0:
        raise TypeError(f"{owner}: n_features must be a non-negative int (F); got {f!r}")
    names = ens.feature_names
    if not isinstance(names, tuple) or len(names) != f or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{owner}: feature_names must be a tuple of n_features = {f} strings; got "
                         f"{type(names).__name__} of {_length(names)} "
                         "(pass tuple(str(name) for name in names))")
    modes = ens.nan_modes
    if not isinstance(modes, tuple) or not all(isinstance(m, str) and m in NAN_MODES for m in modes):
        raise ValueError(f"{owner}: nan_modes must be a tuple of {NAN_MODES} (one per evaluated feature); "
                         f"got {modes!r:.200}")
    if n_evaluated is not None and len(modes) != n_evaluated:
        raise ValueError(f"{owner}: nan_modes must have one entry per evaluated feature (E = {n_evaluated}); "
                         f"got {len(modes)}")
    e = len(modes)
    for name, kind in (("loss_function", str), ("class_names", tuple), ("leaf_weights_known", bool)):
        if not isinstance(getattr(ens, name), kind):
            raise TypeError(f"{owner}: {name} must be a {kind.__name__}; got {getattr(ens, name)!r:.200}")
    featurizer = ens.featurizer
    if featurizer is None:
        if e != f:
            raise ValueError(f"{owner}: the splits of a model without a featurizer read its n_features = {f} input "
                             f"columns, so E (nan_modes, the evaluated features) must be {f}; got {e}")
    elif not isinstance(featurizer, Featurizer):
        raise TypeError(f"{owner}: featurizer must be None or a CatBoost Featurizer; got {type(featurizer).__name__}")
    elif (featurizer.n_evaluated, featurizer.n_columns) != (e, f):
        raise ValueError(f"{owner}: the featurizer makes {featurizer.n_evaluated} evaluated features of "
                         f"{featurizer.n_columns} columns; the model has E = {e} (nan_modes) and F = {f}")
    if ens.players is None:
        if ens.player_of is not None or ens.reads is not None:
            raise ValueError(f"{owner}: player_of and reads go with players; got players=None")
    else:
        if featurizer is None and ens.reads != tuple((c,) for c in range(f)):
            raise ValueError(f"{owner}: a numeric model's players are groups of its columns, each split feature "
                             f"reading its own column: reads must be ((0,), (1,), ..., ({f - 1},)); got "
                             f"{ens.reads!r:.200} (leave players, player_of and reads None for a numeric model)")
        _columns(owner, "players", ens.players, f, None, "")
        _columns(owner, "reads", ens.reads, f, e, ", one per evaluated feature")
        p, of = len(ens.players), ens.player_of
        if (not isinstance(of, tuple) or len(of) != e
                or not all(isinstance(i, (int, np.integer)) and 0 <= i < p for i in of)):
            raise ValueError(f"{owner}: player_of must be a tuple of E = {e} players in [0, {p}); got {of!r:.200}")
    searched = ens.n_searched
    if searched is not None and (not isinstance(searched, (int, np.integer)) or not 0 <= searched <= e):
        raise ValueError(f"{owner}: n_searched must be None or an int in [0, E = {e}]; got {searched!r}")
    codes = getattr(ens, "category_codes", None)
    if codes is not None and (not isinstance(codes, CategoryCodes) or len(codes.columns) != f):
        raise ValueError(f"{owner}: category_codes must be None or a CategoryCodes of n_features = {f} columns; "
                         f"got {codes!r:.200}")
