"""The drop-in's models, imported once: a CatBoost model is imported with
:func:`~jaximp._importers.catboost.from_catboost` on its first call and kept in a cache keyed by
the model object (dropped with it), checked against a cheap fingerprint of the fitted model (tree
count, a hash of its leaf values, borders, scale and bias, feature names), so that a refitted or
edited model is imported again. Model files are cached by path, size and mtime.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import weakref
from typing import Any

import numpy as np

from jaximp._frontends.dropin_arguments import FN_NAME
from jaximp._importers.catboost import from_catboost


@dataclasses.dataclass(frozen=True)
class _Entry:
    """A CatBoost model's ensemble, valid while the model is alive and has this fingerprint."""

    fingerprint: tuple
    ens: Any
    ref: weakref.ref


_MODELS: dict[int, _Entry] = {}  # id(model) -> entry; removed when the model is collected
_FILES: dict[tuple, Any] = {}  # (path, size, mtime_ns) -> ensemble
_MAX_FILES = 8


def _fingerprint(model: Any) -> tuple:
    """A cheap identity of a fitted CatBoost model's content (about 1 ms for 1000 trees)."""
    digest = hashlib.blake2b(np.ascontiguousarray(model.get_leaf_values()).tobytes(), digest_size=16)
    try:
        digest.update(repr(sorted(model.get_borders().items())).encode())
    except Exception:  # noqa: BLE001 - models without float features raise CatBoost's errors
        pass
    scale, bias = model.get_scale_and_bias()
    return (model.tree_count_, digest.hexdigest(), float(scale), tuple(np.atleast_1d(bias).tolist()),
            tuple(model.feature_names_ or ()))


def ensemble_of(model: Any) -> Any:
    """The jaximp ensemble of ``model``: a fitted CatBoost model or the path of its file (imported
    once, see above), or a jaximp ensemble, returned as it is.

    Raises:
        TypeError: ``model`` is none of these.
        ValueError, OSError: :func:`~jaximp._importers.catboost.from_catboost`'s errors (a model
            not fitted, a missing or unreadable file).
    """
    if hasattr(model, "n_features") and hasattr(model, "feature_names") and hasattr(model, "loss_function"):
        return model  # a jaximp ensemble
    if isinstance(model, (str, os.PathLike)):
        path = os.path.realpath(os.fspath(model))
        try:
            stat = os.stat(path)
        except OSError:
            return from_catboost(model)  # raises its clear error
        key = (path, stat.st_size, stat.st_mtime_ns)
        if key not in _FILES:
            if len(_FILES) >= _MAX_FILES:
                _FILES.pop(next(iter(_FILES)))
            _FILES[key] = from_catboost(path)
        return _FILES[key]
    try:
        import catboost
    except ImportError:  # pragma: no cover - catboost is a core dependency
        catboost = None
    if catboost is None or not isinstance(model, catboost.CatBoost):
        raise TypeError(f"{FN_NAME}: model must be a fitted CatBoost model, a path to a .cbm or .json file "
                        f"or a jaximp ensemble; got {type(model).__name__}")
    if not model.is_fitted():
        return from_catboost(model)  # raises: not fitted
    fingerprint = _fingerprint(model)
    key = id(model)
    entry = _MODELS.get(key)
    if entry is not None and entry.ref() is model and entry.fingerprint == fingerprint:
        return entry.ens
    ens = from_catboost(model)
    ref = weakref.ref(model, lambda _, key=key: _MODELS.pop(key, None))
    _MODELS[key] = _Entry(fingerprint, ens, ref)
    return ens
