"""What is built from a model and kept for its next call, in one cache: the model cache.

A model is frozen and its arrays immutable, so what is derived from them alone holds for as long
as the model object lives: its host structure (descent layouts, the paths of its trees), the SHAP
tables and the plans built from its own leaf weights. A plain ``shap_values`` in a loop finds them
built. They all live in one :class:`ModelCache`, keyed by the model's identity (a weak reference:
a model that is garbage-collected frees its entries) and by what the value depends on besides the
model (``how``), and bounded by the bytes of the arrays its values hold, least recently used
first out. Every call reads the same values whether they were kept or built again (a value is a
pure function of its key): the cache changes times, never results.

The one cache is :func:`model_cache`; :func:`set_cache_budget` sets its bound and
:func:`clear_cache` empties it. Its default budget, :data:`DEFAULT_BUDGET` (1 GiB), holds the
interaction plan of a LightGBM model of 50 trees of 127 leaves (25 deep, 246 MiB) and then some.
Arrays on an accelerator (the plans and tables of a model explained there) count in the same
budget and occupy its memory while kept: lower the budget on a small device, or clear the cache
to free them (once no result or caller still holds them).

Stages use it through :func:`kept_per_model` (a decorator: ``compute(ens)`` once per model) and
:func:`kept` (``build()`` once per model and ``how``, under the JAX settings that change its
arrays).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any

import jax
import numpy as np

DEFAULT_BUDGET = 1 << 30  # bytes of arrays the model cache keeps (1 GiB)


@dataclasses.dataclass(frozen=True)
class CacheInfo:
    """What the model cache holds and has done, as ``functools.lru_cache``'s ``cache_info``.

    Attributes:
        hits: calls that found their value kept.
        builds: calls that built their value (kept or not).
        entries: values kept now.
        nbytes: bytes of the arrays they hold (NumPy and JAX arrays' ``nbytes``).
        budget: the most bytes kept.
    """

    hits: int
    builds: int
    entries: int
    nbytes: int
    budget: int


def value_bytes(value: Any) -> int | None:
    """The bytes of the arrays in the pytree ``value`` (NumPy and JAX arrays, host structures
    made of them), or None when it holds a JAX tracer (a value built inside a caller's
    ``jax.jit``, never kept: it dies with the trace)."""
    total = 0
    for leaf in jax.tree_util.tree_leaves(value):
        if isinstance(leaf, jax.core.Tracer):
            return None
        total += getattr(leaf, "nbytes", 0)
    return total


class ModelCache:
    """Values built from models, keyed by ``(model identity, how)``, within a byte budget.

    Each entry holds its value and its arrays' bytes; entries are ordered from the least
    recently used. A value is kept unless it holds a tracer or alone exceeds the budget; keeping
    one evicts the least recently used entries until the total fits. A model's entries go when it
    is garbage-collected (a weak reference's callback). Builds run outside the lock: a build may
    itself read the cache (a plan reads the model's structure), and two threads building the
    same value both get a correct one.

    Args:
        budget: the most bytes of arrays kept, ``>= 0`` (0 keeps nothing).
    """

    def __init__(self, budget: int = DEFAULT_BUDGET):
        self._lock = threading.Lock()
        self._entries: collections.OrderedDict[tuple[int, Hashable], tuple[Any, int]] = collections.OrderedDict()
        self._models: dict[int, weakref.ref] = {}  # id(ens) -> its weak reference, while it has entries
        self._dead: list[tuple[int, weakref.ref]] = []  # models collected, their entries not yet dropped
        self._budget = _checked_budget(budget)
        self._nbytes = self._hits = self._builds = 0

    def get(self, ens: Any, how: Hashable, build: Callable[[], Any], keep: bool = True) -> Any:
        """The value kept for ``ens`` and ``how``, else ``build()``, kept when ``keep`` (and it
        holds no tracer and fits the budget).

        Args:
            ens: the model (any object that takes weak references), compared by identity: the
                dataclass's own ``__hash__`` would hash arrays.
            how: hashable: what ``build`` depends on besides the model.
            build: computes the value from the model, with no argument.
            keep: False for a value that depends on more than ``ens`` and ``how`` (a
                background's tables): built, returned and never kept.
        """
        key = (id(ens), how)
        if keep:
            with self._lock:
                self._purge()
                ref = self._models.get(key[0])
                if ref is not None and ref() is ens and key in self._entries:
                    self._entries.move_to_end(key)
                    self._hits += 1
                    return self._entries[key][0]
        value = build()
        nbytes = value_bytes(value)
        with self._lock:
            self._purge()
            self._builds += 1
            if keep and nbytes is not None and nbytes <= self._budget and self._budget:
                self._keep(ens, key, value, nbytes)
        return value

    def _keep(self, ens: Any, key: tuple[int, Hashable], value: Any, nbytes: int) -> None:
        self._drop(key)  # a value another thread built meanwhile
        ref = self._models.get(key[0])
        if ref is None or ref() is not ens:  # a new model, or one that took a dead model's id
            self._forget(key[0])
            self._models[key[0]] = weakref.ref(ens, functools.partial(self._collected, key[0]))
        self._entries[key] = (value, nbytes)
        self._nbytes += nbytes
        self._evict()

    def _collected(self, model: int, ref: weakref.ref) -> None:
        """A model's weak reference died: its entries are dropped now, or by the next call that
        takes the lock when it is held (a collection may run inside any locked section)."""
        self._dead.append((model, ref))
        if self._lock.acquire(blocking=False):
            try:
                self._purge()
            finally:
                self._lock.release()

    def _purge(self) -> None:
        while self._dead:
            model, ref = self._dead.pop()
            if self._models.get(model) is ref:  # not a later model that took its id
                self._forget(model)

    def _forget(self, model: int) -> None:
        self._models.pop(model, None)
        for key in [key for key in self._entries if key[0] == model]:
            self._drop(key)

    def _drop(self, key: tuple[int, Hashable]) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._nbytes -= entry[1]
            if not any(other[0] == key[0] for other in self._entries):
                self._models.pop(key[0], None)

    def _evict(self) -> None:
        while self._entries and (self._nbytes > self._budget or not self._budget):
            self._drop(next(iter(self._entries)))

    def entries(self, ens: Any) -> dict[Hashable, Any]:
        """``{how: value}`` kept for ``ens``, from the least recently used (for inspection)."""
        with self._lock:
            self._purge()
            ref = self._models.get(id(ens))
            if ref is None or ref() is not ens:
                return {}
            return {how: value for (model, how), (value, _) in self._entries.items() if model == id(ens)}

    def info(self) -> CacheInfo:
        """The counts and bytes of the cache now (:class:`CacheInfo`)."""
        with self._lock:
            self._purge()
            return CacheInfo(self._hits, self._builds, len(self._entries), self._nbytes, self._budget)

    def set_budget(self, budget: int) -> int:
        """Bound the cache to ``budget`` bytes, evicting down to it now; returns the previous budget.

        Raises:
            ValueError: ``budget`` is not an int ``>= 0``.
        """
        budget = _checked_budget(budget)
        with self._lock:
            self._purge()
            previous, self._budget = self._budget, budget
            self._evict()
        return previous

    def clear(self) -> None:
        """Drop every entry (the counts stay)."""
        with self._lock:
            self._dead.clear()
            self._entries.clear()
            self._models.clear()
            self._nbytes = 0


def _checked_budget(budget: Any) -> int:
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
        raise ValueError(f"set_cache_budget: budget must be an int >= 0 (bytes); got {budget!r}")
    return budget


_CACHE = ModelCache()


def model_cache() -> ModelCache:
    """The model cache: every value a stage keeps for a model's next call."""
    return _CACHE


def set_cache_budget(budget: int) -> int:
    """Bound the model cache to ``budget`` bytes of arrays (default :data:`DEFAULT_BUDGET`);
    entries over it are evicted now, least recently used first. Returns the previous budget.

    Example:
        >>> from jaximp._models.cache import set_cache_budget
        >>> previous = set_cache_budget(256 << 20)  # a small accelerator: 256 MiB
        >>> _ = set_cache_budget(previous)

    Raises:
        ValueError: ``budget`` is not an int ``>= 0``.
    """
    return _CACHE.set_budget(budget)


def clear_cache() -> None:
    """Empty the model cache, freeing the host and device memory its values hold (once nothing
    else refers to them); later calls build what they need again."""
    _CACHE.clear()


def kept_per_model(compute: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``compute(ens)``, computed once per model object and kept in the model cache.

    For what is derived from the model's arrays on the host (a descent layout, the paths of its
    trees): a pure function of the model, the same under any JAX setting. Used as a decorator; the
    entry's ``how`` is the function's qualified name.
    """
    how = f"{compute.__module__}.{compute.__qualname__}"

    @functools.wraps(compute)
    def once(ens: Any) -> Any:
        return _CACHE.get(ens, how, lambda: compute(ens))

    return once


def kept(ens: Any, how: Hashable, build: Callable[[], Any], keep: bool = True) -> Any:
    """``build()``, kept in the model cache for the model's next call that asks for the same
    ``how`` (hashable: what ``build`` depends on besides the model) under the same JAX settings
    that change its arrays (``jax_enable_x64``, ``jax_default_device``).

    Tables a model's calls build from its own leaf weights (a SHAP plan) do not change between
    calls; tables of a background or of weights counted on the explained rows do: those pass
    ``keep=False``. A model keeps one value per ``how``, any number of them within the budget."""
    how = (how, jax.config.jax_enable_x64, jax.config.jax_default_device)
    return _CACHE.get(ens, how, build, keep)


def rows_digest(rows: Any) -> str | None:
    """A key for rows in host memory (their shape, dtype and a digest of their bytes: about 10 ms
    for 100k rows of 12 features), under which what is built from them (a background's tables)
    can be kept; None for rows on a device, which are not read back to be hashed."""
    if not isinstance(rows, np.ndarray):
        return None
    rows = np.ascontiguousarray(rows)
    digest = hashlib.blake2b(rows.view(np.uint8).reshape(-1), digest_size=16).hexdigest()
    return f"{rows.shape}{rows.dtype.str}{digest}"
