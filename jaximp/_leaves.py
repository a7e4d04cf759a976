"""Leaf indices and raw predictions: the per-row data path every explanation starts from.

Following CatBoost's fast scorer (seed 002), each feature is quantized once against its own
sorted borders, ``bin(x) = #{b in borders[f] : b < x}``, and a split ``x > borders[f][j]`` is
then the small-integer compare ``bin(x) > j``. Rows are laid out feature-major (``[F, n]``) so
that fetching the bins of a tree's split features is a gather of whole rows, which XLA turns
into contiguous copies, and a block of 1024 rows keeps all of it in cache on CPU.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._batching import map_blocks, map_rows, sum_rows
from jaximp._inputs import as_features
from jaximp._model import ObliviousEnsemble, check_ensemble, nan_fill_values, squeeze_outputs


def _bin_dtype(ens: ObliviousEnsemble):
    return jnp.uint8 if ens.borders.shape[1] < 255 else jnp.int32


def quantize(ens: ObliviousEnsemble, x: Array) -> Array:
    """``[F, n]`` bin of each value against its feature's borders (NaN per the model's mode).

    Args:
        ens: the model.
        x: ``f32[n, F]`` rows.

    Returns:
        ``u8[F, n]`` (or ``i32`` for more than 254 borders) with ``bin = #{borders < x}``.
    """
    x = jnp.where(jnp.isnan(x), nan_fill_values(ens), x)
    bins = jax.vmap(lambda b, col: jnp.searchsorted(b, col, side="left", method="scan"))(ens.borders, x.T)
    return bins.astype(_bin_dtype(ens))


def tree_leaves_from_bins(ens: ObliviousEnsemble, bins: Array) -> Array:
    """``[T, n]`` leaf index of each row in each tree, from ``quantize``'s ``[F, n]`` bins.

    Bit ``d`` of the index is the outcome of the split at depth ``d``; padded depths never set
    their bit. The dtype is ``u8`` for depth <= 8, else ``i32``.
    """
    dtype = jnp.uint8 if ens.depth <= 8 else jnp.int32
    bits = (bins[ens.split_features] > ens.split_bins.astype(bins.dtype)[:, :, None]).astype(dtype)
    shifts = jnp.arange(ens.depth, dtype=dtype)[None, :, None]
    return jnp.sum(bits << shifts, axis=1, dtype=dtype)


def tree_leaves(ens: ObliviousEnsemble, x: Array) -> Array:
    """``[T, n]`` leaf index of each of ``n`` rows ``x: f32[n, F]`` in each tree (no batching)."""
    return tree_leaves_from_bins(ens, quantize(ens, x))


def gather_leaf_values(table: Array, leaves: Array) -> Array:
    """Sum over trees of ``table[t, leaves[t, i]]``.

    Args:
        table: ``[T, L, ...]`` a per-tree, per-leaf table (leaf values, SHAP tables, ...).
        leaves: ``[T, n]`` leaf indices.

    Returns:
        ``[n, ...]`` the per-row sum over trees.
    """
    idx = leaves.astype(jnp.int32).reshape(*leaves.shape, *([1] * (table.ndim - 2)))
    return jnp.take_along_axis(table, idx, axis=1).sum(axis=0)


def raw_prediction(ens: ObliviousEnsemble, x: Array) -> Array:
    """``f32[n, K]`` raw prediction ``scale * sum_t leaf_values[t, leaf] + bias`` (no batching)."""
    return ens.scale * gather_leaf_values(ens.leaf_values, tree_leaves(ens, x)) + ens.bias


_LEAF_BLOCK = 512  # the [T, block] -> [block, T] transpose is cheapest on blocks this small


def _rows_major(leaves: Array) -> Array:
    """``u8[T, n]`` to ``u8[n, T]``, transposing words of 4 trees instead of single bytes.

    A byte transpose runs at a fraction of memory speed on CPU; packing trees ``4i..4i+3`` of
    a row into one ``u32`` (byte ``j`` = tree ``4i+j``, little-endian) is elementwise, the
    ``u32`` transpose moves 4 bytes at a time, and the bitcast back is free.
    """
    n_trees, n = leaves.shape
    padded = -(-n_trees // 4) * 4
    words = jnp.pad(leaves, ((0, padded - n_trees), (0, 0))).reshape(padded // 4, 4, n).astype(jnp.uint32)
    words = jnp.sum(words << (8 * jnp.arange(4, dtype=jnp.uint32))[None, :, None], axis=1, dtype=jnp.uint32)
    return jax.lax.bitcast_convert_type(words.T, jnp.uint8).reshape(n, padded)[:, :n_trees]


def _leaf_kernel(ens: ObliviousEnsemble, x: Array, *, block: int) -> Array:
    # Narrow [n, T]; the public function widens to int32 while copying to the host.
    if ens.depth <= 8:
        row_fn = lambda xb: _rows_major(tree_leaves(ens, xb))  # noqa: E731
    else:
        row_fn = lambda xb: tree_leaves(ens, xb).T  # noqa: E731
    return map_blocks(row_fn, x, min(block, _LEAF_BLOCK))


def _predict_kernel(ens: ObliviousEnsemble, x: Array, *, block: int) -> Array:
    return map_blocks(lambda xb: raw_prediction(ens, xb), x, block)


def leaf_indices(ens: ObliviousEnsemble, X: Any, *, batch_size: int | None = None, devices: Any = None):
    """Leaf index of every row in every tree, equal to CatBoost's ``calc_leaf_indexes``.

    Args:
        ens: the model.
        X: ``[N, F]`` rows (NumPy/JAX array, pandas/polars DataFrame, numeric catboost.Pool).
        batch_size: rows per device step; None picks one for the device.
        devices: None (default device), an int or a list of ``jax.Device`` to shard rows over.

    Returns:
        ``i32[N, T]``; bit ``d`` of ``[n, t]`` is the outcome of tree ``t``'s split at depth ``d``.

    Raises:
        TypeError, ValueError: ``X`` is not numeric ``[N, F]`` data (see ``as_features``).

    Example:
        >>> jaximp.leaf_indices(ens, X)  # doctest: +SKIP
    """
    check_ensemble(ens, "leaf_indices")
    x = as_features(X, ens, "leaf_indices")
    return map_rows(
        _leaf_kernel, ens, x, batch_size=batch_size, devices=devices, fn_name="leaf_indices",
        host_dtype=np.int32,
    )


def predict(ens: ObliviousEnsemble, X: Any, *, batch_size: int | None = None, devices: Any = None):
    """Raw predictions, CatBoost's ``RawFormulaVal``: ``f32[N]`` if K == 1 else ``f32[N, K]``.

    See :meth:`ObliviousEnsemble.predict`.
    """
    check_ensemble(ens, "predict")
    x = as_features(X, ens, "predict")
    out = map_rows(_predict_kernel, ens, x, batch_size=batch_size, devices=devices, fn_name="predict")
    return squeeze_outputs(out, ens.n_outputs)


def _histogram_kernel(ens: ObliviousEnsemble, rows: tuple[Array, Array], *, block: int) -> Array:
    """``f32[T, L]`` total weight of the rows ``(x f32[n, F], weight f32[n])`` in each leaf."""
    x, weight = rows
    n_blocks = -(-x.shape[0] // block)
    pad = n_blocks * block - x.shape[0]
    x = jnp.pad(x, ((0, pad), (0, 0))).reshape(n_blocks, block, -1)
    weight = jnp.pad(weight, (0, pad)).reshape(n_blocks, block)
    offsets = (jnp.arange(ens.n_trees, dtype=jnp.int32) * ens.n_leaves)[:, None]

    def one_block(args):
        xb, wb = args
        flat = tree_leaves(ens, xb).astype(jnp.int32) + offsets  # [T, block]
        counts = jnp.broadcast_to(wb, flat.shape)
        return jax.ops.segment_sum(counts.ravel(), flat.ravel(), ens.n_trees * ens.n_leaves)

    return jax.lax.map(one_block, (x, weight)).sum(0).reshape(ens.n_trees, ens.n_leaves)


def leaf_histogram(ens: ObliviousEnsemble, x: Any, weight: Any, *, batch_size: int | None,
                   devices: Any, fn_name: str) -> Array:
    """``f32[T, L]`` total ``weight f32[N]`` of the checked rows ``x f32[N, F]`` reaching each leaf.

    The per-tree leaf distribution of a dataset: CatBoost's leaf weights recounted from data
    (PredictionValuesChange with a Pool) and the background of interventional SHAP. Counted in
    float32, exact for integer weights up to 2**24 rows per leaf.
    """
    return sum_rows(_histogram_kernel, ens, (x, weight), batch_size=batch_size, devices=devices,
                    fn_name=fn_name)
