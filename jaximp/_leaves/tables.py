"""Per-leaf tables read at the leaves rows reach, the same for both layouts: raw predictions
from leaves, the weight of rows per leaf, and the expected raw prediction over per-tree leaf
distributions.

Shapes: the legend of :mod:`jaximp._models` (T trees, L leaves, K outputs), and ``n`` the rows
of a block.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import Array

from jaximp._models.ensemble import Ensemble, safe_div

_GATHER = jax.lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,))


def take(table: Array, index: Array) -> Array:
    """``table[index]`` of a 1-D table at indices known to be in bounds: one gather, with no
    clamping, and none of ``jnp`` indexing's parsing, whose Python cost on every level of a deep
    walk made most of a first call's tracing."""
    return jax.lax.gather(table, index[..., None], _GATHER, (1,), mode=jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS)


def gather_leaf_values(table: Array, leaves: Array) -> Array:
    """Sum over trees of ``table[t, leaves[t, i]]``.

    Args:
        table: ``[T, L, ...]`` a per-tree, per-leaf table (leaf values, SHAP tables, ...).
        leaves: ``[T, n]`` leaf indices (any integer type).

    Returns:
        ``[n, ...]`` the per-row sum over trees.
    """
    idx = leaves.astype(jnp.int32).reshape(*leaves.shape, *([1] * (table.ndim - 2)))
    return jnp.take_along_axis(table, idx, axis=1).sum(axis=0)


def leaf_prediction(ens: Ensemble, leaves: Array) -> Array:
    """``f32[n, K]`` raw prediction ``scale * sum_t leaf_values[t, leaf] + bias`` from leaves ``[T, n]``."""
    return ens.scale * gather_leaf_values(ens.leaf_values, leaves) + ens.bias


def weight_sums(index: Array, weight: Array, size: int) -> Array:
    """``f32[size]`` the total ``weight f32[n]`` of the rows at each entry of ``index i32[..., n]``
    (a row's leaf, or its pattern at a leaf, in one flat numbering): one scatter for all."""
    return jax.ops.segment_sum(jnp.broadcast_to(weight, index.shape).reshape(-1), index.reshape(-1), size)


def leaf_weight_sums(leaves: Array, weight: Array, n_leaves: int) -> Array:
    """``f32[T L]`` the total ``weight f32[n]`` of the rows reaching each leaf, from their leaves
    ``[T, n]`` (any integer type), tree-major."""
    offsets = (jnp.arange(leaves.shape[0], dtype=jnp.int32) * n_leaves)[:, None]
    return weight_sums(leaves.astype(jnp.int32) + offsets, weight, leaves.shape[0] * n_leaves)


@jax.jit
def mean_prediction(ens: Ensemble, weights: Array) -> Array:
    """``f32[K]`` the expected raw prediction ``scale * sum_t E_{leaf ~ weights_t}[leaf_values_t]
    + bias``, each tree's leaf drawn by its ``weights f32[T, L]`` (normalised; a tree whose
    weights sum to 0 adds nothing). Jitted: on device arrays it sends nothing from the host."""
    total = jnp.sum(weights, axis=1, keepdims=True)
    mean = jnp.einsum("tl,tlk->k", safe_div(weights, total, 0.0), ens.leaf_values)
    return ens.scale * mean + ens.bias
