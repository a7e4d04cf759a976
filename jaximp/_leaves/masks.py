"""General trees of at most 32 leaves read as leaf masks, from quantized rows, at any depth.

After QuickScorer (Lucchese et al., "QuickScorer: a fast algorithm to rank documents with
additive ensembles of regression trees", SIGIR 2015): number a tree's leaves left to right. A
row that goes right at a node can reach none of the leaves of its left subtree, and the leaf it
reaches is the leftmost leaf that no such node rules out (at the lowest common ancestor of the
leaf it reaches and any leaf left of it, the row went right). So a tree's leaf is the lowest set
bit of the AND, over its nodes where the row goes right, of a 32-bit mask clearing the node's
left subtree, whatever the path lengths. Every node of every tree decides at once (its feature's
bins, a compare and a select) and one AND over the nodes gives the leaf: M node reads per tree
and row, none waiting on another, where a descent by pointers takes four dependent gathers per
level of paths up to M deep. Trees of bounded depth descend faster as heaps
(``jaximp._leaves.trees.prepare``).

Rows are quantized as for heaps (``jaximp._leaves.heap``): a node is one 32-bit word, its feature,
its NaN direction and its border's rank ``j``, and sends a row right when its bin exceeds ``j``.
The layout is built once per model object on the host (:func:`masks_of`), from its concrete node
arrays; a model it does not fit (more than 32 leaves, nodes that are traced, set-membership
splits, more distinct borders on one feature than 16-bit bins hold) descends otherwise.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._leaves.heap import node_words, readable_from_bins
from jaximp._leaves.tables import take
from jaximp._models.cache import kept_per_model
from jaximp._models.trees import TreeEnsemble

MAX_LEAVES = 32  # the bits of a mask


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Masks:
    """The leaf-mask layout of a :class:`TreeEnsemble` (see the module docstring).

    Attributes:
        words: ``i32[T, M]`` each node as ``jaximp._leaves.heap.Heap``'s words; nodes no row
            reaches send every row left.
        keep: ``u32[T, M]`` the leaves (bit ``r`` the ``r``-th from the left) that a row going
            right at the node can still reach: all but those of its left subtree; all ones at
            nodes no row reaches.
        leaf_of: ``i32[T, 32]`` the leaf (depth-first number) ``r``-th from the left.
        borders: ``f32[E, n_borders]`` each feature's distinct borders, sorted, padded with
            ``+inf``; ``[0, 1]`` when the rows hold bins already (a featurized model).
        bits: 8 (``u8`` bins) or 16 (``u16``).
    """

    words: Array
    keep: Array
    leaf_of: Array
    borders: Array
    bits: int = dataclasses.field(metadata=dict(static=True))

    @property
    def bin_dtype(self) -> Any:
        return jnp.uint8 if self.bits == 8 else jnp.uint16


def masks_of(ens: TreeEnsemble) -> Masks | None:
    """The :class:`Masks` layout of ``ens``, kept while the model lives; None when it does not fit
    (see the module docstring)."""
    if not readable_from_bins(ens) or not 0 < ens.depth or ens.n_leaves > MAX_LEAVES:
        return None
    return _masks(ens)


@kept_per_model
def _masks(ens: TreeEnsemble) -> Masks | None:
    """:func:`masks_of`, computed in NumPy from the model's checked trees (every node but the root
    under one parent: ``jaximp._models.checks_trees``): the leaves under each node by D rounds
    over all nodes bottom up, then the rank of each node's leftmost leaf by D rounds top down."""
    children = np.asarray(ens.node_children).astype(np.int64)  # [T, M, 2]
    roots = np.asarray(ens.roots).astype(np.int64)
    n_trees, n_nodes = children.shape[:2]
    inner = children >= 0
    child = np.where(inner, children, 0)
    trees = np.arange(n_trees)[:, None, None]
    under = np.ones((n_trees, n_nodes), np.int64)  # leaves under each node, exact after D rounds
    for _ in range(ens.depth):
        under = np.where(inner, under[trees, child], 1).sum(-1)
    sizes = np.where(inner, under[trees, child], 1)  # [T, M, 2] leaves under each child
    first = np.zeros((n_trees, n_nodes), np.int64)  # rank of each node's leftmost leaf
    reached = np.zeros((n_trees, n_nodes), bool)
    reached[roots >= 0, roots[roots >= 0]] = True
    for _ in range(ens.depth):
        t, m, side = np.nonzero(reached[..., None] & inner)
        first[t, child[t, m, side]] = first[t, m] + side * sizes[t, m, 0]
        reached[t, child[t, m, side]] = True
    t, m, side = np.nonzero(reached[..., None] & ~inner)  # the leaves, under their parents
    leaf_of = np.zeros((n_trees, MAX_LEAVES), np.int64)
    leaf_of[roots < 0, 0] = ~roots[roots < 0]
    leaf_of[t, first[t, m] + side * sizes[t, m, 0]] = ~children[t, m, side]
    keep = np.where(reached, ~(((np.int64(1) << sizes[..., 0]) - 1) << first), -1) & 0xFFFFFFFF
    quantized = node_words(ens, reached, np.asarray(ens.node_features), np.asarray(ens.node_borders),
                           np.asarray(ens.node_nan_right))
    if quantized is None:
        return None
    words, table, bits = quantized
    # device_put: a conversion by jnp.asarray outside a trace compiles a program per shape
    return Masks(words=jax.device_put(words), keep=jax.device_put(keep.astype(np.uint32)),
                 leaf_of=jax.device_put(leaf_of.astype(np.int32)), borders=jax.device_put(table), bits=bits)


def leaves(masks: Masks, bins: Array) -> Array:
    """``i32[T, n]`` the leaf (depth-first number) each row of ``bins [E, n]`` reaches in each tree."""
    ones = (1 << masks.bits) - 1  # a word's rank bits, and the bin of NaN
    words = masks.words[..., None]
    values = jnp.take(bins, masks.words >> (masks.bits + 1), axis=0).astype(jnp.int32)  # [T, M, n]
    right = (values > (words & ones)) & ((values != ones) | ((words >> masks.bits) & 1 == 1))
    every = jnp.uint32(0xFFFFFFFF)
    kept = jnp.where(right, masks.keep[..., None], every)
    reachable = jax.lax.reduce(kept, every, jax.lax.bitwise_and, (1,))  # [T, n]
    lowest = reachable & (~reachable + jnp.uint32(1))
    rank = jax.lax.population_count(lowest - jnp.uint32(1)).astype(jnp.int32)  # its trailing zeros
    offsets = (jnp.arange(masks.leaf_of.shape[0], dtype=jnp.int32) * MAX_LEAVES)[:, None]
    return take(masks.leaf_of.reshape(-1), rank + offsets)
