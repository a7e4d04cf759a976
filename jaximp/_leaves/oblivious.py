"""Leaf indices of oblivious trees: the per-row data path every explanation of them starts from.

Following CatBoost's fast scorer (its quantized "binarized features"), each feature is quantized once against its own
sorted borders, ``bin(x) = #{b in borders[f] : b < x}``, and a split ``x > borders[f][j]`` is
then the small-integer compare ``bin(x) > j``. Rows are laid out feature-major (``[F, n]``) so
that fetching the bins of a tree's split features is a gather of whole rows, which XLA turns
into contiguous copies, and a block of 1024 rows keeps all of it in cache on CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import Array

from jaximp._models.oblivious import ObliviousEnsemble, nan_fill_values
from jaximp._rows.batching import row_blocks


def bin_dtype(ens: ObliviousEnsemble):
    """The dtype of a feature's bin: ``u8`` up to 254 borders, else ``i32``."""
    return jnp.uint8 if ens.borders.shape[1] < 255 else jnp.int32


def leaf_dtype(ens: ObliviousEnsemble):
    """The dtype of a leaf index: ``u8`` up to depth 8, else ``i32``."""
    return jnp.uint8 if ens.depth <= 8 else jnp.int32


_FENCES = 31  # borders every value is compared with at once before the binary search


def quantize(ens: ObliviousEnsemble, x: Array, *, fused: bool = False) -> Array:
    """``[E, n]`` bin of each value against its feature's borders (NaN per the model's mode).

    Each feature's borders are padded with ``+inf`` to ``P - 1``, ``P`` a power of two. A value
    is first compared with 31 evenly spaced borders at once (a vectorized count, which narrows
    it to one of 32 runs of borders), then binary-searched inside its run: ``log2(P) - 5``
    gathers instead of ``log2(P)``. Call it on all the rows of a step and consume the result in
    a per-block loop: with no loop between them, XLA fuses the search into every gather of its
    result (pass ``fused=True`` there). The evaluated features of a categorical model after its
    float features (one-hot values, CTRs) arrive as bins already (``ens.n_searched``).

    Args:
        ens: the model.
        x: ``f32[n, E]`` rows.
        fused: the result feeds gathers in the same XLA computation: use a binary search in
            a loop (slower, but never fused into its consumers) instead.

    Returns:
        ``u8[E, n]`` (or ``i32`` for more than 254 borders) with ``bin = #{borders < x}``.
    """
    if ens.n_searched is None:
        return _search(ens.borders, nan_fill_values(ens), x, bin_dtype(ens), fused)
    searched = ens.n_searched
    binned = x[:, searched:].T.astype(bin_dtype(ens))
    if not searched:
        return binned
    head = _search(ens.borders[:searched], nan_fill_values(ens)[:searched], x[:, :searched],
                   bin_dtype(ens), fused)
    return jnp.concatenate([head, binned])


def _search(borders: Array, nan_fill: Array, x: Array, dtype: Any, fused: bool) -> Array:
    """``[F, n]`` ``#{borders[f] < x[:, f]}`` (see :func:`quantize`)."""
    x = jnp.where(jnp.isnan(x), nan_fill, x).T  # [F, n]
    if fused:
        search = lambda b, col: jnp.searchsorted(b, col, side="left", method="scan")  # noqa: E731
        return jax.vmap(search)(borders, x).astype(dtype)
    n_features, n_borders = borders.shape
    size = 1 << n_borders.bit_length()  # > n_borders, so the last entry is always padding
    table = jnp.pad(borders, ((0, 0), (0, size - n_borders)), constant_values=jnp.inf)
    run = max(1, size // (_FENCES + 1))
    fences = table[:, run - 1 : size - 1 : run]  # [F, min(31, size - 1)]
    bins = run * jnp.sum(x[:, :, None] > fences[:, None, :], axis=-1, dtype=jnp.int32)
    flat = table.reshape(-1)
    offsets = (jnp.arange(n_features, dtype=jnp.int32) * size)[:, None]
    step = run // 2
    while step:
        bins = bins + step * (flat[offsets + bins + (step - 1)] < x)
        step //= 2
    return bins.astype(dtype)


def tree_leaves_from_bins(ens: ObliviousEnsemble, bins: Array) -> Array:
    """``[T, n]`` leaf index of each row in each tree, from ``quantize``'s ``[F, n]`` bins.

    Bit ``d`` of the index is the outcome of the split at depth ``d``; padded depths never set
    their bit. The dtype is ``u8`` for depth <= 8, else ``i32``.
    """
    dtype = leaf_dtype(ens)
    bits = (bins[ens.split_features] > ens.split_bins.astype(bins.dtype)[:, :, None]).astype(dtype)
    shifts = jnp.arange(ens.depth, dtype=dtype)[None, :, None]
    return jnp.sum(bits << shifts, axis=1, dtype=dtype)


def tree_leaves(ens: ObliviousEnsemble, x: Array) -> Array:
    """``[T, n]`` leaf index of each of ``n`` rows ``x: f32[n, F]`` in each tree (no batching)."""
    return tree_leaves_from_bins(ens, quantize(ens, x, fused=True))


def map_leaves(fn: Callable, ens: ObliviousEnsemble, x: Array, block: int, *others: Any,
               reduce: bool = False) -> Any:
    """``fn(leaves, *others_block)`` over blocks of ``block`` rows, the rows quantized once.

    The shared data path of every row kernel: all ``n`` rows are quantized in one pass (see
    :func:`quantize`), then each block's ``u8[F, block]`` bins give its leaves ``[T, block]``
    and ``fn`` turns them into the block's result in cache. Rows are zero-padded to whole
    blocks, so every block runs the same program.

    Args:
        fn: ``fn(leaves [T, b], *others_block)``: a pytree with leading axis ``b``, or any
            pytree when ``reduce``.
        ens: the model.
        x: ``f32[n, F]`` rows.
        block: rows per block.
        *others: pytrees of per-row arrays ``[n, ...]`` that ``fn`` also gets, cut in blocks
            (padding rows are zeros).
        reduce: sum ``fn``'s results over blocks instead of stacking them along rows.

    Returns:
        ``fn``'s results for the ``n`` rows (leading axis ``n``), or their sum when ``reduce``.
    """
    n = x.shape[0]
    x = row_blocks(x, block)
    n_blocks = x.shape[0]
    # One block: no loop separates quantizing from its consumers, and XLA would fuse the
    # fence search into every gather of its result; a search loop is never fused.
    bins = quantize(ens, x.reshape(n_blocks * block, -1), fused=n_blocks == 1)  # [F, n_blocks * block]
    bins = bins.reshape(-1, n_blocks, block).transpose(1, 0, 2)  # [n_blocks, F, block]
    others = jax.tree_util.tree_map(lambda a: row_blocks(a, block), others)
    out = jax.lax.map(lambda args: fn(tree_leaves_from_bins(ens, args[0]), *args[1]), (bins, others))
    if reduce:
        return jax.tree_util.tree_map(lambda a: a.sum(0), out)
    return jax.tree_util.tree_map(lambda a: a.reshape(n_blocks * block, *a.shape[2:])[:n], out)


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


def leaf_prediction(ens: ObliviousEnsemble, leaves: Array) -> Array:
    """``f32[n, K]`` raw prediction ``scale * sum_t leaf_values[t, leaf] + bias`` from leaves ``[T, n]``."""
    return ens.scale * gather_leaf_values(ens.leaf_values, leaves) + ens.bias


def raw_prediction(ens: ObliviousEnsemble, x: Array) -> Array:
    """``f32[n, K]`` raw prediction of rows ``x: f32[n, F]`` (no batching)."""
    return leaf_prediction(ens, tree_leaves(ens, x))


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


def leaf_kernel(ens: ObliviousEnsemble, x: Array, *, block: int) -> Array:
    # Narrow [n, T]; the public function widens to int32 while copying to the host.
    rows_major = _rows_major if ens.depth <= 8 else jnp.transpose
    return map_leaves(rows_major, ens, x, min(block, _LEAF_BLOCK))


def predict_kernel(ens: ObliviousEnsemble, x: Array, *, block: int) -> Array:
    return map_leaves(lambda leaves: leaf_prediction(ens, leaves), ens, x, block)


def histogram_kernel(ens: ObliviousEnsemble, rows: tuple[Array, Array], *, block: int) -> Array:
    """``f32[T, L]`` total weight of the rows ``(x f32[n, F], weight f32[n])`` in each leaf."""
    x, weight = rows
    offsets = (jnp.arange(ens.n_trees, dtype=jnp.int32) * ens.n_leaves)[:, None]

    def one_block(leaves, wb):
        flat = leaves.astype(jnp.int32) + offsets  # [T, block]
        counts = jnp.broadcast_to(wb, flat.shape)
        return jax.ops.segment_sum(counts.ravel(), flat.ravel(), ens.n_trees * ens.n_leaves)

    return map_leaves(one_block, ens, x, block, weight, reduce=True).reshape(ens.n_trees, ens.n_leaves)
