"""Leaf indices, raw predictions and leaf histograms of :class:`TreeEnsemble` models.

All trees descend in lockstep, one level per step, for a block of ``n`` rows laid out
feature-major (``[E, n]``: each block transposed, or sliced from rows that come so): D steps
of gathers (node feature, border, NaN direction, child; a category bitset word at
set-membership splits) over ``[T, n]`` pointers, a pointer staying put once it names a leaf.
Every node decides by ``jaximp._models.trees.goes_right``. Cost per row: ``O(T D)``. What the
leaves give is read as for oblivious trees (``jaximp._leaves.tables``).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import Array

from jaximp._leaves.tables import leaf_prediction, leaf_weight_sums
from jaximp._models.trees import TreeEnsemble, goes_right
from jaximp._rows.blocks import fill_blocks, map_feature_blocks, row_blocks, whole_blocks


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
        read = _take(reads, node)
        value = _take(xt, (read ^ (read >> 31)) + columns)
        if categorical is None:
            right = goes_right(value, _take(borders, node), read < 0)
        else:
            right = goes_right(value, _take(borders, node), read < 0, _take(categorical, node), words, node)
        pointer = jnp.where(pointer >= 0, _take(children, 2 * node + right.astype(jnp.int32)), pointer)
    return ~pointer


_GATHER = jax.lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,))


def _take(table: Array, index: Array) -> Array:
    """``table[index]`` of a 1-D table at indices known to be in bounds: one gather, with no
    clamping, and none of ``jnp`` indexing's parsing, whose Python cost on every level of a deep
    walk made most of a first call's tracing."""
    return jax.lax.gather(table, index[..., None], _GATHER, (1,), mode=jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS)


def leaf_kernel(ens: TreeEnsemble, x: Array, *, block: int, features_first: bool = False) -> Array:
    """``i32[T, n]`` the leaf each row ``x f32[n, E]`` (``[E, n]`` with ``features_first``)
    reaches in each tree, tree-major (see ``map_rows(rows_last=True)``), numbered as its library
    numbers them (``leaf_ids``) where it does not count depth-first."""
    n = x.shape[1 if features_first else 0]
    x = whole_blocks(x, block, axis=1 if features_first else 0)

    def block_leaves(start):
        xt = (jax.lax.dynamic_slice_in_dim(x, start, block, axis=1) if features_first
              else jax.lax.dynamic_slice_in_dim(x, start, block).T)
        leaves = leaves_of(ens, xt)  # [T, block]
        if ens.leaf_ids is not None:  # the library's own numbers
            leaves = jnp.take_along_axis(ens.leaf_ids, leaves, axis=1)
        return leaves

    return fill_blocks(block_leaves, n, block)


def predict_kernel(ens: TreeEnsemble, x: Array, *, block: int, features_first: bool = False) -> Array:
    """``f32[n, K]`` raw predictions of rows ``x f32[n, E]`` (``[E, n]`` with ``features_first``)."""
    return map_feature_blocks(lambda xt: leaf_prediction(ens, leaves_of(ens, xt)), x, block, features_first)


def histogram_kernel(ens: TreeEnsemble, rows: tuple[Array, Array], *, block: int) -> Array:
    """``f32[T, L]`` total weight of the rows ``(x f32[n, E], weight f32[n])`` in each leaf."""
    x, weight = rows

    def one_block(args):
        xb, wb = args
        return leaf_weight_sums(leaves_of(ens, xb.T), wb, ens.n_leaves)

    out = jax.lax.map(one_block, (row_blocks(x, block), row_blocks(weight, block)))
    return out.sum(0).reshape(ens.n_trees, ens.n_leaves)
