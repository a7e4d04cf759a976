"""Targets from the user, checked once, in the layout the metrics (``jaximp._importances.scoring``)
and the loss's SHAP values read: regression values ``f32[N]`` or ``f32[N, K]``, binary 0/1 or
probabilities ``f32[N]``, multiclass class indices ``i32[N]``; class labels are matched to the
model's class names.

Targets in host memory are checked and mapped with NumPy. Targets given as a ``jax.Array`` stay
on their device: their checks read back a few numbers (finite or not, the range, whether every
value is whole, which classes occur), explicitly, never the targets themselves, and numeric
class labels are mapped there.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._models.ensemble import Ensemble
from jaximp._models.tasks import CLASSES, REGRESSION, Task, task_of


def as_targets(y: Any, ens: Ensemble, n_rows: int, fn_name: str) -> np.ndarray:
    """The targets in the layout the metrics expect (see the module docstring).

    Args:
        y: labels or values; class labels are matched to ``ens.class_names`` when it has them.
        ens: the model.
        n_rows: N, the number of rows of X.
        fn_name: the public function, for error messages.

    Returns:
        ``f32[N]`` (regression, binary), ``f32[N, K]`` (multi-regression) or ``i32[N]``
        (multiclass class indices); for a model without a loss, ``f32[N]`` or ``f32[N, K]`` as
        given.

    Raises:
        TypeError: non-numeric targets for a regression.
        ValueError: wrong length or shape, NaN, or labels that are not the model's classes.
    """
    task = task_of(ens, fn_name)
    if isinstance(y, jax.core.Tracer):
        return _traced_targets(y, ens, task, n_rows, fn_name)
    if hasattr(y, "to_numpy"):  # pandas / polars Series or DataFrame
        y = y.to_numpy()
    if targets_on_device(y):
        return _device_targets(_shaped(y, ens, task, n_rows, fn_name), ens, task, fn_name)
    y = _shaped(np.asarray(y), ens, task, n_rows, fn_name)
    if task in CLASSES and ens.class_names:
        return _class_indices(y, ens.class_names, task, fn_name)
    if not (np.issubdtype(y.dtype, np.number) or y.dtype == bool):
        names = "" if task in REGRESSION else " (the model has no class names)"
        raise TypeError(f"{fn_name}: y must hold numbers for a {task} model{names}; got dtype {y.dtype}")
    y = y.astype(np.float64)
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{fn_name}: y must be finite; got {int(np.sum(~np.isfinite(y)))} NaN/inf values")
    if task == "binary" and not np.all((y >= 0) & (y <= 1)):
        raise ValueError(f"{fn_name}: y must be 0/1 labels or probabilities in [0, 1]; got values in "
                         f"[{y.min()}, {y.max()}]")
    if task == "multiclass":
        if not np.all((y == np.round(y)) & (y >= 0) & (y < ens.n_outputs)):
            raise ValueError(f"{fn_name}: y must hold class indices 0..{ens.n_outputs - 1}")
        return y.astype(np.int32)
    return y.astype(np.float32)


def _traced_targets(y: Array, ens: Ensemble, task: Task, n_rows: int, fn_name: str) -> Array:
    """Targets traced by ``jax.jit``, ``grad`` or ``vmap``, taken as the metrics' layout (see the
    module docstring: values, the second class's 0/1 or probability, class indices), never as
    class labels; only their shape can be checked."""
    y = _shaped(y, ens, task, n_rows, fn_name)
    if task == "multiclass":
        return y.astype(jnp.int32)
    return y.astype(jnp.result_type(float, y))


def _shaped(y: Any, ens: Ensemble, task: Task, n_rows: int, fn_name: str) -> Any:
    """``y`` as ``[N]`` (a ``[N, 1]`` column squeezed) or ``[N, K]`` for multi-regression, else a
    ValueError."""
    if y.ndim == 2 and y.shape[1] == 1 and task != "multiregression":
        y = y.reshape(-1)
    want = (n_rows, ens.n_outputs) if task == "multiregression" else (n_rows,)
    if task == "unknown" and y.shape == (n_rows, ens.n_outputs):  # a scoring function reads y as given
        want = y.shape
    if y.shape != want:
        raise ValueError(f"{fn_name}: y must have shape {want}, one target per row of X; got {y.shape}")
    return y


def _class_indices(y: np.ndarray, class_names: tuple, task: Task, fn_name: str) -> np.ndarray:
    """Map labels to their position in ``class_names`` (numbers by value, others by string)."""
    labels, inverse = np.unique(y, return_inverse=True)
    index = []
    for label in labels.tolist():  # a loop over the distinct labels, not over rows
        found = [i for i, name in enumerate(class_names) if _same_label(label, name)]
        index.append(found[0] if found else -1)
    index = np.asarray(index)
    if np.any(index < 0):
        bad = labels[np.flatnonzero(index < 0)[:5]].tolist()
        raise ValueError(f"{fn_name}: y must hold the model's class labels {list(class_names)}; got {bad}")
    out = index[inverse.reshape(-1)]
    return out.astype(np.float32) if task == "binary" else out.astype(np.int32)


def _same_label(label: Any, name: Any) -> bool:
    numbers = (int, float, np.number)
    if isinstance(label, numbers) and not isinstance(label, bool) and isinstance(name, numbers):
        return float(label) == float(name)
    return str(label) == str(name)


def targets_on_device(y: Any) -> bool:
    return isinstance(y, jax.Array) and not isinstance(y, jax.core.Tracer)


@jax.jit(static_argnames="n_classes")
def target_summary(y: Array, n_classes: int = 0) -> dict:
    """What the checks read of device targets: a few numbers, never the targets."""
    finite = jnp.isfinite(y)
    shown = jnp.where(finite, y, 0)
    out = dict(finite=jnp.all(finite), bad=jnp.sum(~finite), low=jnp.min(shown), high=jnp.max(shown),
               whole=jnp.all(shown == jnp.round(shown)))
    if n_classes:
        index = jnp.clip(shown.astype(jnp.int32), 0, n_classes - 1)
        out["present"] = jnp.zeros(n_classes, bool).at[index].set(True)
    return out


def _numeric_names(class_names: tuple, fn_name: str) -> np.ndarray:
    """The class names as numbers, which labels on a device are matched to, else a ValueError."""
    try:
        return np.asarray([float(name) for name in class_names], np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{fn_name}: y on a device must hold numbers, and the model's class names "
                         f"{list(class_names)} are not numbers: pass y as a NumPy array or pandas Series "
                         "of the class labels, or as class indices 0..K-1 in a jax.Array") from None


@jax.jit
def _device_class_indices(y: Array, names: Array) -> tuple[Array, Array]:
    """``(index i32[N], every label is a class)`` of labels ``y`` among the numbers ``names``."""
    same = y.astype(names.dtype)[:, None] == names[None, :]
    return jnp.argmax(same, axis=1).astype(jnp.int32), jnp.all(jnp.any(same, axis=1))


def _device_targets(y: Array, ens: Ensemble, task: Task, fn_name: str) -> Array:
    """:func:`as_targets` of targets held in a ``jax.Array`` (already shaped), left on its device."""
    if not (jnp.issubdtype(y.dtype, jnp.number) or y.dtype == bool):
        raise TypeError(f"{fn_name}: y must hold numbers; got dtype {y.dtype}")
    y = y.astype(jnp.result_type(float, y))
    if task in CLASSES and ens.class_names:
        names = _numeric_names(ens.class_names, fn_name)
        index, known = _device_class_indices(y, jax.device_put(names.astype(y.dtype), list(y.devices())[0]))
        if not jax.device_get(known):
            raise ValueError(f"{fn_name}: y must hold the model's class labels {list(ens.class_names)}")
        return index.astype(jnp.float32) if task == "binary" else index
    summary = jax.device_get(target_summary(y))
    if not summary["finite"]:
        raise ValueError(f"{fn_name}: y must be finite; got {int(summary['bad'])} NaN/inf values")
    if task == "binary" and not (summary["low"] >= 0 and summary["high"] <= 1):
        raise ValueError(f"{fn_name}: y must be 0/1 labels or probabilities in [0, 1]; got values in "
                         f"[{summary['low']}, {summary['high']}]")
    if task == "multiclass":
        if not (summary["whole"] and summary["low"] >= 0 and summary["high"] < ens.n_outputs):
            raise ValueError(f"{fn_name}: y must hold class indices 0..{ens.n_outputs - 1}")
        return y.astype(jnp.int32)
    return y.astype(jnp.float32)
