"""Leaf indices, raw predictions and leaf histograms of :class:`TreeEnsemble` models.

All trees descend in lockstep, one level per step, for a block of ``n`` rows laid out
feature-major (``[E, n]``). Trees of bounded depth descend as heaps over quantized rows
(``jaximp._leaves.heap``: two gathers a level); deeper trees of at most 32 leaves read their
leaves as masks, every node at once, over quantized rows (``jaximp._leaves.masks``); the others
descend by pointers (:func:`leaves_of`): D steps of gathers (node feature, border, NaN
direction, child; a category bitset word at set-membership splits) over ``[T, n]`` pointers, a
pointer staying put once it names a leaf, every node deciding by
``jaximp._models.trees.goes_right``. Cost per row: ``O(T D)``. What the leaves give is read as
for oblivious trees (``jaximp._leaves.tables``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
from jax import Array

from jaximp._leaves import bins as binned
from jaximp._leaves import heap, masks
from jaximp._leaves.heap import Heap, heap_of
from jaximp._leaves.masks import Masks, masks_of
from jaximp._leaves.tables import leaf_prediction, leaf_weight_sums, take
from jaximp._models.trees import TreeEnsemble, goes_right
from jaximp._rows.tuning import Tuning


def node_decisions(nodes: Any, xt: Array) -> Array:
    """``bool[T, M, n]`` whether each row goes right at every internal node (``xt: f32[E, n]``).

    ``nodes``: a :class:`TreeEnsemble`, or anything with its ``node_*`` arrays (features,
    borders, NaN directions, set-membership splits or None) for some of its trees.
    """
    values = xt[nodes.node_features]  # [T, M, n]
    if nodes.node_categorical is None:
        return goes_right(values, nodes.node_borders[..., None], nodes.node_nan_right[..., None])
    t, m, w = nodes.node_categories.shape
    node = jnp.arange(t * m, dtype=jnp.int32).reshape(t, m, 1)
    return goes_right(values, nodes.node_borders[..., None], nodes.node_nan_right[..., None],
                      nodes.node_categorical[..., None], nodes.node_categories.reshape(t * m, w), node)


def leaves_of(ens: TreeEnsemble, xt: Array) -> Array:
    """``i32[T, n]`` the leaf each row of ``xt: f32[E, n]`` (rows feature-major) reaches in each
    tree (no batching).

    Gathers index flattened arrays (``tree * M + node``), which XLA runs far faster on CPU than
    per-row ``take_along_axis``.
    """
    n = xt.shape[1]
    xt = xt.reshape(-1)  # value of row i, feature f at f * n + i
    offsets = (jnp.arange(ens.n_trees, dtype=jnp.int32) * ens.n_nodes)[:, None]
    features = ens.node_features.reshape(-1)
    borders = ens.node_borders.reshape(-1)
    nan_right = ens.node_nan_right.reshape(-1)
    children = ens.node_children.reshape(-1)
    categorical = None if ens.node_categorical is None else ens.node_categorical.reshape(-1)
    words = None if ens.node_categories is None else ens.node_categories.reshape(categorical.size, -1)
    columns = jnp.arange(n, dtype=jnp.int32)[None, :]
    pointer = jnp.broadcast_to(ens.roots[:, None], (ens.n_trees, n))
    # Each node's first value in xt (feature * n), bit-inverted where NaN goes right: one gather
    # reads both (a gather of bools is among XLA's slowest on CPU).
    reads = jnp.where(nan_right, ~(features * n), features * n)
    for _ in range(ens.depth):
        node = jnp.maximum(pointer, 0) + offsets
        read = take(reads, node)
        value = take(xt, (read ^ (read >> 31)) + columns)
        if categorical is None:
            right = goes_right(value, take(borders, node), read < 0)
        else:
            right = goes_right(value, take(borders, node), read < 0, take(categorical, node), words, node)
        pointer = jnp.where(pointer >= 0, take(children, 2 * node + right.astype(jnp.int32)), pointer)
    return ~pointer


Layout = Masks | Heap | None


def prepare(ens: TreeEnsemble) -> tuple[TreeEnsemble, Layout]:
    """The parameters of this module's kernels: the model, and the layout its rows descend by,
    built on the host once per model: a heap (``jaximp._leaves.heap``) for trees of bounded
    depth, else leaf masks (``jaximp._leaves.masks``) for trees of at most 32 leaves, else None:
    the rows descend by pointers. (Where both fit, the heap reads its D levels faster than masks
    read every node: 200 CatBoost Lossguide trees of 31 leaves and depth 8, 0.28 s against 0.35 s
    for 100,000 rows; LightGBM's trees of 31 leaves and depth 23 read as masks in 0.34 s where
    pointers take 1.8 s.)"""
    layout = heap_of(ens)
    return ens, masks_of(ens) if layout is None else layout


def descent(params: tuple[TreeEnsemble, Layout]) -> tuple[Callable, Callable]:
    """``(quantize, leaves)`` of the rows' descent (see ``jaximp._leaves.bins.map_binned``): bins
    read by leaf masks or the heap, or values (the rows feature-major) read by :func:`leaves_of`."""
    ens, layout = params
    if isinstance(layout, Masks):
        return functools.partial(heap.quantize, layout), functools.partial(masks.leaves, layout)
    if layout is not None:
        return functools.partial(heap.quantize, layout), functools.partial(heap.leaves, layout)
    return (lambda x, *, fused=False, features_first=False, tuning=None: x if features_first else x.T), \
        functools.partial(leaves_of, ens)


def leaf_kernel(params: tuple[TreeEnsemble, Layout], x: Array, *, block: int, tuning: Tuning,
                features_first: bool = False) -> Array:
    """``i32[T, n]`` the leaf each row ``x f32[n, E]`` (``[E, n]`` with ``features_first``)
    reaches in each tree, tree-major (see ``map_rows(rows_last=True)``), numbered as its library
    numbers them (``leaf_ids``) where it does not count depth-first; ``params`` from :func:`prepare`."""
    ens = params[0]

    def numbered(leaves):  # [T, block]
        if ens.leaf_ids is None:
            return leaves
        return jnp.take_along_axis(ens.leaf_ids, leaves, axis=1)  # the library's own numbers

    return binned.fill_binned(numbered, *descent(params), x, block, features_first, tuning=tuning)


def predict_kernel(params: tuple[TreeEnsemble, Layout], x: Array, *, block: int, tuning: Tuning,
                   features_first: bool = False) -> Array:
    """``f32[n, K]`` raw predictions of rows ``x f32[n, E]`` (``[E, n]`` with ``features_first``);
    ``params`` from :func:`prepare`."""
    ens = params[0]
    return binned.map_binned(lambda leaves: leaf_prediction(ens, leaves), *descent(params), x, block,
                             features_first=features_first, tuning=tuning)


def histogram_kernel(params: tuple[TreeEnsemble, Layout], rows: tuple[Array, Array], *,
                     block: int, tuning: Tuning) -> Array:
    """``f32[T, L]`` total weight of the rows ``(x f32[n, E], weight f32[n])`` in each leaf;
    ``params`` from :func:`prepare`."""
    ens = params[0]
    x, weight = rows
    one_block = lambda leaves, wb: leaf_weight_sums(leaves, wb, ens.n_leaves)  # noqa: E731
    out = binned.map_binned(one_block, *descent(params), x, block, weight, reduce=True, tuning=tuning)
    return out.reshape(ens.n_trees, ens.n_leaves)
