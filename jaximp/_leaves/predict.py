"""Leaf indices, raw predictions and leaf histograms of either layout: the stage's public
functions, with the one dispatch of its kernels by layout (:data:`KERNELS`).

Each layout brings three kernels of checked rows ``x f32[n, E]`` (``jaximp._rows.batching``
runs them in padded steps): the leaf of every row in every tree, the raw prediction, and the
weight of the rows reaching each leaf. Oblivious trees quantize each feature once and read a
leaf's bits (``jaximp._leaves.oblivious``); general trees descend level by level, as heaps over
quantized rows where they fit (``jaximp._leaves.trees``, ``jaximp._leaves.heap``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax import Array

from jaximp._leaves import oblivious, trees
from jaximp._models.ensemble import Ensemble, check_model, register_predict, squeeze_outputs
from jaximp._rows.batching import is_traced, map_rows, on_device, sum_rows, unit_weights
from jaximp._rows.frames import first_row, one_row
from jaximp._rows.inputs import as_features


@dataclasses.dataclass(frozen=True)
class LeafKernels:
    """The row kernels of one layout, each ``kernel(params(ens), rows, *, block)``.

    Attributes:
        leaves: rows ``f32[n, E]`` -> ``[T, n]`` each row's leaf in each tree, tree-major (the
            library's numbering; a narrow integer type that the host copy widens to int32).
        predict: rows ``f32[n, E]`` -> ``f32[n, K]`` raw predictions.
        histogram: ``(rows f32[n, E], weight f32[n])`` -> ``f32[T, L]`` the weight reaching
            each leaf.
        params: the model -> the kernels' first argument, built on the host once per model
            (the general trees' heap layout); the model itself for oblivious trees.

    The raw prediction from leaves is the same for both layouts
    (``jaximp._leaves.tables.leaf_prediction``).
    """

    leaves: Callable
    predict: Callable
    histogram: Callable
    params: Callable


KERNELS = {
    "oblivious": LeafKernels(oblivious.leaf_kernel, oblivious.predict_kernel, oblivious.histogram_kernel,
                             lambda ens: ens),
    "trees": LeafKernels(trees.leaf_kernel, trees.predict_kernel, trees.histogram_kernel, trees.prepare),
}


def kernels(ens: Any, fn_name: str) -> LeafKernels:
    """The leaf kernels of ``ens``'s layout (a ``TypeError`` naming ``fn_name`` for a non-ensemble)."""
    return KERNELS[check_model(ens, fn_name)]


def leaf_indices(ens: Ensemble, X: Any, *, dtype: Any = np.int32, batch_size: int | None = None,
                 devices: Any = None, progress: bool = True) -> Any:
    """The leaf each row reaches in each tree.

    Equal to the library's own leaf numbers: CatBoost's ``calc_leaf_indexes``, scikit-learn's
    ``apply``, XGBoost's ``predict(X, pred_leaf=True)`` and LightGBM's
    ``predict(X, pred_leaf=True)``. For CatBoost's symmetric trees, bit ``d`` of a leaf index
    is the outcome of the tree's split at depth ``d``.

    Args:
        ens: the model (from ``jaximp.from_catboost``, ``from_xgboost``, ``from_lightgbm`` or
            ``from_sklearn``).
        X: ``[N, F]`` rows (NumPy/JAX array, pandas/polars DataFrame, ``catboost.Pool``), or
            one row given 1-D (``[F]`` array or list, a pandas Series such as ``X.iloc[0]``).
        dtype: the integer type of the result: ``np.int32`` (the default), or any other that
            holds every leaf number of the model, such as ``np.uint8`` for trees of at most 256
            leaves (a quarter of the memory, and faster: the result is written 4 times fewer
            bytes) or CatBoost's own ``np.uint32``.
        batch_size: rows per device step; None picks one for the device.
        devices: None (default device), an int or a list of ``jax.Device`` to shard rows over.
        progress: a progress bar (tqdm) when the call lasts over 2 seconds; False silences it.

    Returns:
        np.ndarray | jax.Array: ``i32[N, T]`` (``i32[T]`` for one row given 1-D; of ``dtype`` when
            given): NumPy for rows in host memory, a ``jax.Array`` on the rows' device for rows
            given as one. Integers, so piecewise constant in everything
            (``jaximp.soft_leaf_probabilities`` is a smooth version).
            The NumPy result is tree-major in memory (Fortran order: each tree's column
            ``leaves[:, t]`` is contiguous), as the leaves are computed; indexing and NumPy
            functions do not depend on it, and ``np.ascontiguousarray(leaves)`` gives row-major
            memory when a consumer needs it (a transpose as costly as the call).

    Raises:
        TypeError: ``ens`` is not a jaximp ensemble, ``X`` is not rows, or ``dtype`` is not an
            integer type.
        ValueError: ``X`` does not hold the model's features (a column count or names that
            differ, no rows, a missing value where the model forbids it), or ``dtype`` cannot
            hold the model's leaf numbers (or, for rows on a device, is 64-bit while JAX runs
            without ``jax_enable_x64``, or not in the machine's byte order).

    Examples:
        >>> leaves = jaximp.leaf_indices(ens, X)
        >>> leaves.shape, leaves.dtype
        ((442, 20), dtype('int32'))
        >>> np.array_equal(leaves, model.calc_leaf_indexes(X))
        True
        >>> jaximp.leaf_indices(ens, X, dtype=np.uint8).dtype  # trees of depth <= 8
        dtype('uint8')
    """
    layout = kernels(ens, "leaf_indices")
    X, single = one_row(X, ens, "leaf_indices")
    x = as_features(X, ens, "leaf_indices")
    dtype = leaf_number_dtype(ens, dtype, on_device(x))
    return first_row(map_rows(layout.leaves, layout.params(ens), x, batch_size=batch_size, devices=devices,
                              fn_name="leaf_indices", host_dtype=dtype, progress=progress, rows_last=True),
                     single)


def leaf_number_dtype(ens: Ensemble, dtype: Any, device: bool) -> np.dtype:
    """``dtype`` as a NumPy integer type that holds every leaf number of ``ens`` (the library's
    numbering: up to ``2**depth - 1`` for oblivious trees, the largest ``leaf_ids`` where a
    library numbers leaves by node), or a ``TypeError``/``ValueError`` saying what fits."""
    try:
        kind = np.dtype(dtype).kind
    except TypeError:
        kind = None
    if kind not in ("i", "u"):
        raise TypeError(f"leaf_indices: dtype must be an integer type such as np.int32 or np.uint8; got {dtype!r}")
    dtype = np.dtype(dtype)
    if np.iinfo(dtype).max < np.iinfo(np.int32).max:  # leaf numbers are int32: wider types hold them all
        ids = getattr(ens, "leaf_ids", None)
        if ids is not None and is_traced(ids):
            raise ValueError(f"leaf_indices: the leaf numbers of a traced model are not known, so a {dtype} result "
                             "cannot be checked to hold them; use np.int32")
        largest = ens.n_leaves - 1 if ids is None else int(np.max(np.asarray(ids), initial=0))
        if np.iinfo(dtype).max < largest:
            fits = next(np.dtype(t) for t in (np.uint8, np.uint16, np.int32) if np.iinfo(t).max >= largest)
            raise ValueError(f"leaf_indices: dtype {dtype} cannot hold this model's leaf numbers (up to {largest}); "
                             f"use {fits} or a wider integer type")
    if device and not dtype.isnative:
        raise ValueError(f"leaf_indices: a result on the device has the machine's byte order; got dtype {dtype.str}: "
                         f"pass {dtype.newbyteorder('=')}, or rows in host memory (NumPy)")
    if device and jax.dtypes.canonicalize_dtype(dtype) != dtype:
        raise ValueError(f"leaf_indices: a 64-bit result ({dtype}) on the device needs "
                         "jax.config.update('jax_enable_x64', True); pass rows in host memory (NumPy) or a "
                         "32-bit dtype")
    return dtype


@register_predict
def predict(ens: Ensemble, X: Any, *, batch_size: int | None = None, devices: Any = None,
            progress: bool = True) -> Any:
    """Raw predictions of the model, before any link function.

    Equal to CatBoost's ``predict(X, prediction_type="RawFormulaVal")``, XGBoost's
    ``predict(X, output_margin=True)``, LightGBM's ``predict(X, raw_score=True)`` and
    scikit-learn's ``predict`` (regressors), ``predict_proba`` (tree and forest classifiers) or
    ``decision_function`` (boosting classifiers). The same as ``ens.predict(X)``.

    Args:
        ens: the model (from ``jaximp.from_catboost``, ``from_xgboost``, ``from_lightgbm`` or
            ``from_sklearn``).
        X: ``[N, F]`` rows (NumPy/JAX array, pandas/polars DataFrame, ``catboost.Pool``), or
            one row given 1-D (``[F]`` array or list, a pandas Series such as ``X.iloc[0]``).
        batch_size: rows per device step; None picks one for the device.
        devices: None (default device), an int or a list of ``jax.Device`` to shard rows over.
        progress: a progress bar (tqdm) when the call lasts over 2 seconds; False silences it.

    Returns:
        np.ndarray | jax.Array: ``f32[N]`` when K == 1, else ``f32[N, K]``; one row given 1-D gives
            ``f32[]`` or ``f32[K]``, as CatBoost's ``predict`` does. NumPy for rows in host memory,
            a ``jax.Array`` on the rows' device for rows given as one; float64 for a float64 model
            under ``jax_enable_x64``.

    Raises:
        TypeError: ``ens`` is not a jaximp ensemble, or ``X`` is not rows.
        ValueError: ``X`` does not hold the model's features (a column count or names that
            differ, no rows, a missing value where the model forbids it).

    Differentiable in: ``ens.leaf_values``, ``ens.scale``, ``ens.bias``; piecewise constant in
    ``X`` and the borders (``jaximp.soft_predict`` is a smooth relaxation).

    Examples:
        >>> jaximp.predict(ens, X).shape
        (442,)
        >>> bool(np.isclose(jaximp.predict(ens, X.iloc[0]), model.predict(X.iloc[0]), rtol=1e-5, atol=1e-3))
        True
        >>> import jax
        >>> isinstance(jaximp.predict(ens, jax.numpy.asarray(X.to_numpy())), jax.Array)
        True
    """
    kernels(ens, "predict")
    X, single = one_row(X, ens, "predict")
    return first_row(predict_rows(ens, as_features(X, ens, "predict"), batch_size=batch_size, devices=devices,
                                  progress=progress), single)


def predict_rows(ens: Ensemble, x: Any, *, batch_size: int | None = None, devices: Any = None,
                 progress: bool = True, fn_name: str = "predict") -> Any:
    """Raw predictions of checked rows ``x f32[N, E]`` (``jaximp._rows.inputs.as_features``):
    ``f32[N]`` when K == 1, else ``f32[N, K]``."""
    layout = kernels(ens, fn_name)
    out = map_rows(layout.predict, layout.params(ens), x, batch_size=batch_size, devices=devices,
                   fn_name=fn_name, progress=progress)
    return squeeze_outputs(out, ens.n_outputs)


def leaf_histogram(ens: Ensemble, x: Any, weight: Any, *, batch_size: int | None = None, devices: Any = None,
                   fn_name: str = "leaf_histogram") -> Array:
    """``f32[T, L]`` total ``weight f32[N]`` of the checked rows ``x f32[N, E]`` reaching each leaf.

    The per-tree leaf distribution of a dataset: CatBoost's leaf weights recounted from data
    (PredictionValuesChange with a Pool, a model file without leaf weights) and the background
    of interventional SHAP. Counted in float32, exact for integer weights up to 2**24 rows per
    leaf.
    """
    layout = kernels(ens, fn_name)
    return sum_rows(layout.histogram, layout.params(ens), (x, weight), batch_size=batch_size, devices=devices,
                    fn_name=fn_name)


def training_leaf_weights(ens: Ensemble, x: Any = None, *, batch_size: int | None = None, devices: Any = None,
                          fn_name: str) -> Array:
    """``f32[T, L]`` the leaf weights that the path-dependent methods and importances read: the
    model's training leaf weights or, for a model file that carries none, the leaf counts of the
    checked rows ``x`` being explained, as CatBoost counts them then (``InitLeafWeights`` ->
    ``CollectLeavesStatistics``, catboost/libs/fstr/shap_prepared_trees.cpp, util.cpp).

    Raises:
        ValueError: the model carries no leaf weights and no rows are given.
    """
    if ens.leaf_weights_known:
        return ens.leaf_weights
    if x is None:
        raise ValueError(
            f"{fn_name}: the model file carries no leaf weights, which CatBoost then counts on the "
            "rows being explained; pass rows (jaximp.shap_values(ens, X), "
            "jaximp.prediction_values_change(ens, X)) or use a model exported with its leaf weights"
        )
    return leaf_histogram(ens, x, unit_weights(x), batch_size=batch_size, devices=devices,
                          fn_name=fn_name)
