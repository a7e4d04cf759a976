"""Rows quantized once against the model's borders, then read block by block: the data path of
every layout that compares bins instead of values.

Following CatBoost's fast scorer (its quantized "binarized features"), each feature is quantized
once against its own sorted borders, ``bin(x) = #{border in borders[f] : border < x}``, and a
split ``x > borders[f][j]`` is then the small-integer compare ``bin(x) > j``. Bins are laid out
feature-major (``[E, n]`` for ``n`` rows), and a block of rows (the tuning's ``block_rows``:
1024 on CPU) keeps a block's bins and its leaves in cache on CPU. Oblivious trees
(``jaximp._leaves.oblivious``) and general trees in heap order (``jaximp._leaves.heap``) each
bring their ``quantize`` and ``leaves``; the loop over blocks is this module's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import Array

from jaximp._rows.blocks import fill_blocks, row_blocks, whole_blocks
from jaximp._rows.tuning import Tuning


def search(borders: Array, xt: Array, dtype: Any, fused: bool, tuning: Tuning) -> Array:
    """``[E, n]`` ``#{borders[f] < xt[f]}`` for the features of ``borders f32[E, n_borders]``
    (each sorted, padded with ``+inf``) and rows ``xt f32[E, n]``; a NaN value gets bin 0.

    Each feature's borders are padded with ``+inf`` to ``size - 1``, ``size`` a power of two. A
    value is first compared with ``tuning.bin_fences`` (31) evenly spaced borders at once (a
    vectorized count, which narrows it to one of 32 runs of borders); runs longer than
    ``tuning.bin_run`` are halved by a binary
    search, and the borders of the value's run are then fetched in one gather and counted at
    once (a gather of a run costs about what a gather of one border does, and XLA vectorizes
    the count). Call it on all the rows of a step and consume the result in a per-block loop:
    with no loop between them, XLA fuses the search into every gather of its result (pass
    ``fused=True`` there: a binary search in a loop, slower, but never fused into its consumers).
    """
    if fused:
        one = lambda b, col: jnp.searchsorted(b, col, side="left", method="scan")  # noqa: E731
        return jax.vmap(one)(borders, xt).astype(dtype)
    n_features, n_borders = borders.shape
    size = 1 << n_borders.bit_length()  # > n_borders, so the last entry is always padding
    table = jnp.pad(borders, ((0, 0), (0, size - n_borders)), constant_values=jnp.inf)
    run = max(1, size // (tuning.bin_fences + 1))
    fences = table[:, run - 1 : size - 1 : run]  # [E, min(31, size - 1)]
    bins = run * jnp.sum(xt[:, :, None] > fences[:, None, :], axis=-1, dtype=jnp.int32)
    flat = table.reshape(-1)
    offsets = (jnp.arange(n_features, dtype=jnp.int32) * size)[:, None]
    while run > tuning.bin_run:  # the value's run: its first half, or its second
        run //= 2
        bins = bins + run * (flat[offsets + bins + (run - 1)] < xt)
    if run > 1:  # the run's first run - 1 borders (its last is the next run's fence, or padding)
        runs = table.reshape(n_features, size // run, run)[:, :, : run - 1]
        window = jax.vmap(lambda feature_runs, r: feature_runs[r])(runs, bins // run)  # [E, n, run - 1]
        bins = bins + jnp.sum(window < xt[:, :, None], axis=-1, dtype=jnp.int32)
    return bins.astype(dtype)


def step_bins(quantize: Callable, x: Array, block: int, features_first: bool, tuning: Tuning) -> Array:
    """``[E, n_blocks * block]`` the bins of rows ``x f32[n, E]`` (``[E, n]`` with
    ``features_first``) zero-padded to whole blocks, quantized in one pass for a loop over blocks
    to read; ``quantize(x, *, fused, features_first, tuning)`` is the layout's."""
    axis = 1 if features_first else 0
    x = whole_blocks(x, block, axis=axis)
    # One block: no loop separates quantizing from its consumers, and XLA would fuse the
    # fence search into every gather of its result; a search loop is never fused.
    n_blocks = x.shape[axis] // block
    if n_blocks > 1:  # rows past the last block (unread) skew each feature's bins off a power of two
        x = jnp.pad(x, [(0, tuning.bin_skew_rows if a == axis else 0) for a in range(2)])
    return quantize(x, fused=n_blocks == 1, features_first=features_first, tuning=tuning)


def map_binned(fn: Callable, quantize: Callable, leaves: Callable, x: Array, block: int, *others: Any,
               reduce: bool = False, features_first: bool = False, tuning: Tuning) -> Any:
    """``fn(leaves, *others_block)`` over blocks of ``block`` rows, the rows quantized once.

    All ``n`` rows are quantized in one pass, then each block's ``[E, block]`` bins (a slice of
    the feature-major bins: no transpose) give its leaves ``[T, block]`` and ``fn`` turns them
    into the block's result in cache. Rows are zero-padded to whole blocks, so every block runs
    the same program.

    Args:
        fn: ``fn(leaves [T, block], *others_block)``: a pytree with leading axis ``block``, or
            any pytree when ``reduce``.
        quantize: the layout's ``quantize(x, *, fused, features_first, tuning) -> [E, n]`` bins.
        leaves: the layout's ``leaves(bins [E, block]) -> [T, block]``.
        x: ``f32[n, E]`` rows, or ``[E, n]`` with ``features_first``.
        block: rows per block.
        *others: pytrees of per-row arrays ``[n, ...]`` that ``fn`` also gets, cut in blocks
            (padding rows are zeros).
        reduce: sum ``fn``'s results over blocks instead of stacking them along rows.
        features_first: ``x`` is feature-major (a categorical model's featurized rows come so).
        tuning: the platform's (``jaximp._rows.tuning``).

    Returns:
        ``fn``'s results for the ``n`` rows (leading axis ``n``), or their sum when ``reduce``.
    """
    n = x.shape[1 if features_first else 0]
    bins = step_bins(quantize, x, block, features_first, tuning)
    n_blocks = bins.shape[1] // block
    others = jax.tree_util.tree_map(lambda a: row_blocks(a, block), others)

    def one_block(args):
        b, rest = args
        return fn(leaves(jax.lax.dynamic_slice_in_dim(bins, b * block, block, axis=1)), *rest)

    out = jax.lax.map(one_block, (jnp.arange(n_blocks, dtype=jnp.int32), others))
    if reduce:
        return jax.tree_util.tree_map(lambda a: a.sum(0), out)
    return jax.tree_util.tree_map(lambda a: a.reshape(n_blocks * block, *a.shape[2:])[:n], out)


def fill_binned(fn: Callable, quantize: Callable, leaves: Callable, x: Array, block: int,
                features_first: bool = False, *, tuning: Tuning) -> Array:
    """``[..., n]``: ``fn(leaves [T, block])`` of every block, rows last (tree-major leaf tables),
    the rows quantized once (as :func:`map_binned`) and the blocks written in place
    (``jaximp._rows.blocks.fill_blocks``)."""
    bins = step_bins(quantize, x, block, features_first, tuning)

    def block_leaves(start):
        return fn(leaves(jax.lax.dynamic_slice_in_dim(bins, start, block, axis=1)))

    return fill_blocks(block_leaves, x.shape[1 if features_first else 0], block)
