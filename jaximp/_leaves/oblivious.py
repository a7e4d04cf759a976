"""Leaf indices, raw predictions and leaf histograms of oblivious trees: the per-row data path
every explanation of them starts from.

Following CatBoost's fast scorer (its quantized "binarized features"), each feature is quantized
once against its own sorted borders, ``bin(x) = #{border in borders[f] : border < x}``, and a
split ``x > borders[f][j]`` is then the small-integer compare ``bin(x) > j``. Rows are laid out
feature-major (``[E, n]`` for ``n`` rows) so that fetching the bins of a tree's split features
is a gather of whole rows, which XLA turns into contiguous copies, and a block of 1024 rows keeps
all of it in cache on CPU. What the leaves give is read as for general trees
(``jaximp._leaves.tables``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import Array

from jaximp._leaves.tables import leaf_prediction, leaf_weight_sums
from jaximp._models.oblivious import ObliviousEnsemble, nan_fill_values
from jaximp._rows.blocks import fill_blocks, row_blocks, whole_blocks


def bin_dtype(ens: ObliviousEnsemble):
    """The dtype of a feature's bin: ``u8`` up to 254 borders, else ``i32``."""
    return jnp.uint8 if ens.borders.shape[1] < 255 else jnp.int32


def leaf_dtype(ens: ObliviousEnsemble):
    """The dtype of a leaf index: ``u8`` up to depth 8, else ``i32``."""
    return jnp.uint8 if ens.depth <= 8 else jnp.int32


_FENCES = 31  # borders every value is compared with at once before the binary search


def quantize(ens: ObliviousEnsemble, x: Array, *, fused: bool = False, features_first: bool = False) -> Array:
    """``[E, n]`` bin of each value against its feature's borders (NaN per the model's mode).

    Each feature's borders are padded with ``+inf`` to ``size - 1``, ``size`` a power of two. A
    value is first compared with 31 evenly spaced borders at once (a vectorized count, which
    narrows it to one of 32 runs of borders), then binary-searched inside its run:
    ``log2(size) - 5`` gathers instead of ``log2(size)``. Call it on all the rows of a step and consume the result in
    a per-block loop: with no loop between them, XLA fuses the search into every gather of its
    result (pass ``fused=True`` there). The evaluated features of a categorical model after its
    float features (one-hot values, CTRs) arrive as bins already (``ens.n_searched``).

    Args:
        ens: the model.
        x: ``f32[n, E]`` rows, or ``[E, n]`` with ``features_first``.
        fused: the result feeds gathers in the same XLA computation: use a binary search in
            a loop (slower, but never fused into its consumers) instead.
        features_first: ``x`` holds the rows feature-major, ``[E, n]``, as the result does: no
            transpose (a categorical model's featurized rows come so, see :func:`map_leaves`).

    Returns:
        ``u8[E, n]`` (or ``i32`` for more than 254 borders) with ``bin = #{borders < x}``.
    """
    xt = x if features_first else x.T
    if ens.n_searched is None:
        return _search(ens.borders, nan_fill_values(ens), xt, bin_dtype(ens), fused)
    searched = ens.n_searched
    binned = xt[searched:].astype(bin_dtype(ens))
    if not searched:
        return binned
    head = _search(ens.borders[:searched], nan_fill_values(ens)[:searched], xt[:searched],
                   bin_dtype(ens), fused)
    return jnp.concatenate([head, binned])


def _search(borders: Array, nan_fill: Array, xt: Array, dtype: Any, fused: bool) -> Array:
    """``[E, n]`` ``#{borders[f] < xt[f]}`` for the features of ``borders`` and rows ``xt [E, n]``
    (see :func:`quantize`)."""
    x = jnp.where(jnp.isnan(xt), nan_fill[:, None], xt)  # [E, n]
    if fused:
        search = lambda b, col: jnp.searchsorted(b, col, side="left", method="scan")  # noqa: E731
        return jax.vmap(search)(borders, x).astype(dtype)
    n_features, n_borders = borders.shape
    size = 1 << n_borders.bit_length()  # > n_borders, so the last entry is always padding
    table = jnp.pad(borders, ((0, 0), (0, size - n_borders)), constant_values=jnp.inf)
    run = max(1, size // (_FENCES + 1))
    fences = table[:, run - 1 : size - 1 : run]  # [E, min(31, size - 1)]
    bins = run * jnp.sum(x[:, :, None] > fences[:, None, :], axis=-1, dtype=jnp.int32)
    flat = table.reshape(-1)
    offsets = (jnp.arange(n_features, dtype=jnp.int32) * size)[:, None]
    step = run // 2
    while step:
        bins = bins + step * (flat[offsets + bins + (step - 1)] < x)
        step //= 2
    return bins.astype(dtype)


def tree_leaves_from_bins(ens: ObliviousEnsemble, bins: Array) -> Array:
    """``[T, n]`` leaf index of each row in each tree, from ``quantize``'s ``[E, n]`` bins.

    Bit ``d`` of the index is the outcome of the split at depth ``d``; padded depths never set
    their bit. The dtype is ``u8`` for depth <= 8, else ``i32``.
    """
    dtype = leaf_dtype(ens)
    bits = (bins[ens.split_features] > ens.split_bins.astype(bins.dtype)[:, :, None]).astype(dtype)
    shifts = jnp.arange(ens.depth, dtype=dtype)[None, :, None]
    return jnp.sum(bits << shifts, axis=1, dtype=dtype)


def tree_leaves(ens: ObliviousEnsemble, x: Array) -> Array:
    """``[T, n]`` leaf index of each of ``n`` rows ``x: f32[n, E]`` in each tree (no batching)."""
    return tree_leaves_from_bins(ens, quantize(ens, x, fused=True))


def step_bins(ens: ObliviousEnsemble, x: Array, block: int, features_first: bool = False) -> Array:
    """``[E, n_blocks * block]`` the bins of rows ``x f32[n, E]`` (``[E, n]`` with
    ``features_first``) zero-padded to whole blocks, quantized in one pass for a loop over blocks
    to read."""
    x = whole_blocks(x, block, axis=1 if features_first else 0)
    # One block: no loop separates quantizing from its consumers, and XLA would fuse the
    # fence search into every gather of its result; a search loop is never fused.
    n_blocks = x.shape[1 if features_first else 0] // block
    return quantize(ens, x, fused=n_blocks == 1, features_first=features_first)


def map_leaves(fn: Callable, ens: ObliviousEnsemble, x: Array, block: int, *others: Any,
               reduce: bool = False, features_first: bool = False) -> Any:
    """``fn(leaves, *others_block)`` over blocks of ``block`` rows, the rows quantized once.

    The shared data path of every row kernel: all ``n`` rows are quantized in one pass (see
    :func:`quantize`), then each block's ``u8[E, block]`` bins (a slice of the feature-major
    bins: no transpose) give its leaves ``[T, block]`` and ``fn`` turns them into the block's
    result in cache. Rows are zero-padded to whole blocks, so every block runs the same program.

    Args:
        fn: ``fn(leaves [T, block], *others_block)``: a pytree with leading axis ``block``, or
            any pytree when ``reduce``.
        ens: the model.
        x: ``f32[n, E]`` rows, or ``[E, n]`` with ``features_first``.
        block: rows per block.
        *others: pytrees of per-row arrays ``[n, ...]`` that ``fn`` also gets, cut in blocks
            (padding rows are zeros).
        reduce: sum ``fn``'s results over blocks instead of stacking them along rows.
        features_first: ``x`` is feature-major (see :func:`quantize`).

    Returns:
        ``fn``'s results for the ``n`` rows (leading axis ``n``), or their sum when ``reduce``.
    """
    n = x.shape[1 if features_first else 0]
    bins = step_bins(ens, x, block, features_first)
    n_blocks = bins.shape[1] // block
    others = jax.tree_util.tree_map(lambda a: row_blocks(a, block), others)

    def one_block(args):
        b, rest = args
        leaves = tree_leaves_from_bins(ens, jax.lax.dynamic_slice_in_dim(bins, b * block, block, axis=1))
        return fn(leaves, *rest)

    out = jax.lax.map(one_block, (jnp.arange(n_blocks, dtype=jnp.int32), others))
    if reduce:
        return jax.tree_util.tree_map(lambda a: a.sum(0), out)
    return jax.tree_util.tree_map(lambda a: a.reshape(n_blocks * block, *a.shape[2:])[:n], out)


def raw_prediction(ens: ObliviousEnsemble, x: Array) -> Array:
    """``f32[n, K]`` raw prediction of rows ``x: f32[n, E]`` (no batching)."""
    return leaf_prediction(ens, tree_leaves(ens, x))


def leaf_kernel(ens: ObliviousEnsemble, x: Array, *, block: int, features_first: bool = False) -> Array:
    """``[T, n]`` the leaf each row ``x f32[n, E]`` (``[E, n]`` with ``features_first``) reaches
    in each tree, tree-major and narrow (``u8`` up to depth 8): the public function widens it to
    int32 while copying to the host and hands it out rows first without transposing (see
    ``map_rows(rows_last=True)``)."""
    bins = step_bins(ens, x, block, features_first)

    def block_leaves(start):
        return tree_leaves_from_bins(ens, jax.lax.dynamic_slice_in_dim(bins, start, block, axis=1))

    return fill_blocks(block_leaves, x.shape[1 if features_first else 0], block)


def predict_kernel(ens: ObliviousEnsemble, x: Array, *, block: int, features_first: bool = False) -> Array:
    """``f32[n, K]`` raw predictions of rows ``x f32[n, E]`` (``[E, n]`` with ``features_first``)."""
    return map_leaves(lambda leaves: leaf_prediction(ens, leaves), ens, x, block, features_first=features_first)


def histogram_kernel(ens: ObliviousEnsemble, rows: tuple[Array, Array], *, block: int) -> Array:
    """``f32[T, L]`` total weight of the rows ``(x f32[n, E], weight f32[n])`` in each leaf."""
    x, weight = rows
    one_block = lambda leaves, wb: leaf_weight_sums(leaves, wb, ens.n_leaves)  # noqa: E731
    return map_leaves(one_block, ens, x, block, weight, reduce=True).reshape(ens.n_trees, ens.n_leaves)
