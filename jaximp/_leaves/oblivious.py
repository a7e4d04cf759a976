"""Leaf indices, raw predictions and leaf histograms of oblivious trees: the per-row data path
every explanation of them starts from.

Each feature is quantized once against its own sorted borders (``jaximp._leaves.bins``, after
CatBoost's binarized features), and a tree's leaf is the bits of its D compares ``bin > j``.
Fetching the bins of a tree's split features is a gather of whole rows of the feature-major bins,
which XLA turns into contiguous copies. What the leaves give is read as for general trees
(``jaximp._leaves.tables``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
from jax import Array

from jaximp._leaves import bins as binned
from jaximp._leaves.tables import leaf_prediction, leaf_weight_sums
from jaximp._models.oblivious import ObliviousEnsemble, nan_fill_values
from jaximp._rows.tuning import Tuning


def bin_dtype(ens: ObliviousEnsemble):
    """The dtype of a feature's bin: ``u8`` up to 254 borders, else ``i32``."""
    return jnp.uint8 if ens.borders.shape[1] < 255 else jnp.int32


def leaf_dtype(ens: ObliviousEnsemble):
    """The dtype of a leaf index: ``u8`` up to depth 8, else ``i32``."""
    return jnp.uint8 if ens.depth <= 8 else jnp.int32


def quantize(ens: ObliviousEnsemble, x: Array, *, fused: bool = False, features_first: bool = False,
             tuning: Tuning) -> Array:
    """``[E, n]`` bin of each value against its feature's borders (NaN per the model's mode).

    ``jaximp._leaves.bins.search``'s count, NaN first replaced by the model's ``nan_modes``
    (``-inf`` or ``+inf``). The evaluated features of a categorical model after its float
    features (one-hot values, CTRs) arrive as bins already (``ens.n_searched``).

    Args:
        ens: the model.
        x: ``f32[n, E]`` rows, or ``[E, n]`` with ``features_first``.
        fused: the result feeds gathers in the same XLA computation: use a binary search in
            a loop (slower, but never fused into its consumers) instead.
        features_first: ``x`` holds the rows feature-major, ``[E, n]``, as the result does: no
            transpose (a categorical model's featurized rows come so, see :func:`map_leaves`).
        tuning: the platform's (``jaximp._rows.tuning``): the search's fences and runs.

    Returns:
        ``u8[E, n]`` (or ``i32`` for more than 254 borders) with ``bin = #{borders < x}``.
    """
    xt = x if features_first else x.T
    searched = xt.shape[0] if ens.n_searched is None else ens.n_searched
    given = xt[searched:].astype(bin_dtype(ens))
    if not searched:
        return given
    head = jnp.where(jnp.isnan(xt[:searched]), nan_fill_values(ens)[:searched, None], xt[:searched])
    head = binned.search(ens.borders[:searched], head, bin_dtype(ens), fused, tuning)
    return head if ens.n_searched is None else jnp.concatenate([head, given])


def tree_leaves_from_bins(ens: ObliviousEnsemble, bins: Array) -> Array:
    """``[T, n]`` leaf index of each row in each tree, from ``quantize``'s ``[E, n]`` bins.

    Bit ``d`` of the index is the outcome of the split at depth ``d``; padded depths never set
    their bit. The dtype is ``u8`` for depth <= 8, else ``i32``.
    """
    dtype = leaf_dtype(ens)
    bits = (bins[ens.split_features] > ens.split_bins.astype(bins.dtype)[:, :, None]).astype(dtype)
    shifts = jnp.arange(ens.depth, dtype=dtype)[None, :, None]
    return jnp.sum(bits << shifts, axis=1, dtype=dtype)


def tree_leaves(ens: ObliviousEnsemble, x: Array, *, tuning: Tuning) -> Array:
    """``[T, n]`` leaf index of each of ``n`` rows ``x: f32[n, E]`` in each tree (no batching)."""
    return tree_leaves_from_bins(ens, quantize(ens, x, fused=True, tuning=tuning))


def map_leaves(fn: Callable, ens: ObliviousEnsemble, x: Array, block: int, *others: Any,
               reduce: bool = False, features_first: bool = False, tuning: Tuning) -> Any:
    """``fn(leaves [T, block], *others_block)`` over blocks of ``block`` rows of ``x f32[n, E]``
    (``[E, n]`` with ``features_first``), the rows quantized once: the shared data path of every
    row kernel of oblivious trees (``jaximp._leaves.bins.map_binned``, whose arguments it takes)."""
    return binned.map_binned(fn, functools.partial(quantize, ens), functools.partial(tree_leaves_from_bins, ens),
                             x, block, *others, reduce=reduce, features_first=features_first, tuning=tuning)


def raw_prediction(ens: ObliviousEnsemble, x: Array, *, tuning: Tuning) -> Array:
    """``f32[n, K]`` raw prediction of rows ``x: f32[n, E]`` (no batching)."""
    return leaf_prediction(ens, tree_leaves(ens, x, tuning=tuning))


def leaf_kernel(ens: ObliviousEnsemble, x: Array, *, block: int, tuning: Tuning,
                features_first: bool = False) -> Array:
    """``[T, n]`` the leaf each row ``x f32[n, E]`` (``[E, n]`` with ``features_first``) reaches
    in each tree, tree-major and narrow (``u8`` up to depth 8): the public function widens it to
    int32 while copying to the host and hands it out rows first without transposing (see
    ``map_rows(rows_last=True)``)."""
    return binned.fill_binned(lambda leaves: leaves, functools.partial(quantize, ens),
                              functools.partial(tree_leaves_from_bins, ens), x, block, features_first, tuning=tuning)


def predict_kernel(ens: ObliviousEnsemble, x: Array, *, block: int, tuning: Tuning,
                   features_first: bool = False) -> Array:
    """``f32[n, K]`` raw predictions of rows ``x f32[n, E]`` (``[E, n]`` with ``features_first``)."""
    return map_leaves(lambda leaves: leaf_prediction(ens, leaves), ens, x, block, features_first=features_first,
                      tuning=tuning)


def histogram_kernel(ens: ObliviousEnsemble, rows: tuple[Array, Array], *, block: int,
                     tuning: Tuning) -> Array:
    """``f32[T, L]`` total weight of the rows ``(x f32[n, E], weight f32[n])`` in each leaf."""
    x, weight = rows
    one_block = lambda leaves, wb: leaf_weight_sums(leaves, wb, ens.n_leaves)  # noqa: E731
    return map_leaves(one_block, ens, x, block, weight, reduce=True, tuning=tuning).reshape(ens.n_trees, ens.n_leaves)
