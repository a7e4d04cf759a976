"""General trees of bounded depth laid out as heaps and read from quantized rows: the fast
descent of :class:`~jaximp._models.trees.TreeEnsemble` models.

Each tree becomes a complete binary tree of depth D (the model's), numbered as a heap: node
``p``'s children are ``2p + 1`` and ``2p + 2``, so a descent needs no child pointers. A leaf
above the last level becomes a chain of pass-through nodes that send every row left, and the
``2**D`` positions of the last level map back to the tree's leaves (``leaf_of``). As for
oblivious trees, rows are quantized once against the distinct borders each feature's nodes use
(``jaximp._leaves.bins``), so that a node's split ``x > border`` is ``bin(x) > j`` for the
border's rank ``j``, and a node is one 32-bit word: its feature, its NaN direction and ``j``.
A level of the descent is two gathers (the node's word, then the row's bin) where the pointer
descent (``jaximp._leaves.trees.leaves_of``) does four, and the bins are a quarter of the bytes
of the values.

The layout is built once per model object on the host (:func:`heap_of`), from its concrete
node arrays. A model it does not fit descends by pointers instead: nodes that are traced (a
``jax.vmap`` over ensembles), set-membership splits, depth over :data:`MAX_DEPTH`, or more
distinct borders on one feature than 16-bit bins hold.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._leaves import bins as binned
from jaximp._leaves.tables import take
from jaximp._models.cache import kept_per_model
from jaximp._models.checks import concrete
from jaximp._models.trees import TreeEnsemble
from jaximp._rows.tuning import Tuning

MAX_DEPTH = 10  # deeper trees descend by pointers: 2**D positions per tree would outgrow the cache
_MAX_POSITIONS = 1 << 23  # T * 2**D: the words and leaf map stay under 64 MB
_BIN_BITS = (8, 16)  # u8, then u16 bins; a bin of all ones is NaN


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Heap:
    """The heap layout of a :class:`TreeEnsemble` (see the module docstring).

    Attributes:
        words: ``i32[T, 2**D - 1]`` each heap node as ``feature << (bits + 1) | nan_right << bits
            | j``: the node sends a row right when its feature's bin exceeds ``j``, a NaN (the
            bin of all ones) right when ``nan_right``. Pass-through nodes read feature 0 with
            ``j`` the largest bin and NaN left: every row goes left.
        leaf_of: ``i32[T, 2**D]`` the leaf (depth-first number) at each position of the last
            level.
        borders: ``f32[E, n_borders]`` each feature's distinct borders, sorted, padded with
            ``+inf``; ``[0, 1]`` when the rows hold bins already (a featurized model).
        depth: D.
        bits: 8 (``u8`` bins) or 16 (``u16``).
    """

    words: Array
    leaf_of: Array
    borders: Array
    depth: int = dataclasses.field(metadata=dict(static=True))
    bits: int = dataclasses.field(metadata=dict(static=True))

    @property
    def bin_dtype(self) -> Any:
        return jnp.uint8 if self.bits == 8 else jnp.uint16


def heap_of(ens: TreeEnsemble) -> Heap | None:
    """The :class:`Heap` layout of ``ens``, kept while the model lives; None when it does not fit
    (see the module docstring): the model then descends by pointers."""
    if not readable_from_bins(ens) or not 0 < ens.depth <= MAX_DEPTH or ens.n_trees << ens.depth > _MAX_POSITIONS:
        return None
    return _heap(ens)


def readable_from_bins(ens: TreeEnsemble) -> bool:
    """Whether the nodes of ``ens`` can be words read from quantized rows (:func:`node_words`): no
    set-membership splits, nodes concrete (not traced: a layout is built on the host), and a
    featurized model's bins in ``u8``."""
    arrays = (ens.roots, ens.node_features, ens.node_borders, ens.node_nan_right, ens.node_children)
    return (ens.node_categorical is None and all(concrete(a) for a in arrays) and ens.node_features.ndim == 2
            and (ens.featurizer is None or np.dtype(ens.featurizer.bin_dtype) == np.uint8))


@kept_per_model
def _heap(ens: TreeEnsemble) -> Heap | None:
    """:func:`heap_of`, computed in NumPy."""
    n_trees, depth = ens.n_trees, ens.depth
    features, borders = np.asarray(ens.node_features), np.asarray(ens.node_borders, np.float32)
    nan_right, children = np.asarray(ens.node_nan_right), np.asarray(ens.node_children)
    trees = np.arange(n_trees)[:, None]
    pointer = np.asarray(ens.roots)[:, None]  # [T, 2**d]: the node or leaf at each position
    levels = []
    for _ in range(depth):
        levels.append(pointer)
        inner = pointer >= 0
        node = np.maximum(pointer, 0)
        left = np.where(inner, children[trees, node, 0], pointer)
        right = np.where(inner, children[trees, node, 1], pointer)
        pointer = np.stack([left, right], axis=-1).reshape(n_trees, -1)
    node = np.concatenate(levels, axis=1) if levels else np.zeros((n_trees, 0), np.int64)
    inner = node >= 0
    node = np.maximum(node, 0)
    quantized = node_words(ens, inner, np.where(inner, features[trees, node], 0), borders[trees, node],
                           np.where(inner, nan_right[trees, node], False))
    if quantized is None:
        return None
    words, table, bits = quantized
    # device_put: a conversion by jnp.asarray outside a trace compiles a program per shape
    return Heap(words=jax.device_put(words), leaf_of=jax.device_put((~pointer).astype(np.int32)),
                borders=jax.device_put(table), depth=depth, bits=bits)


def node_words(ens: TreeEnsemble, used: np.ndarray, feature: np.ndarray, border: np.ndarray,
               nan_right: np.ndarray) -> tuple[np.ndarray, np.ndarray, int] | None:
    """``(words i32[...], borders f32[E, n_borders], bits)``: nodes as words read from quantized
    rows (see :class:`Heap`), or None when the bins would not fit (see the module docstring).

    Args:
        ens: the model (its featurized rows hold bins already).
        used: ``bool[...]`` the nodes that split; the others send every row left (a pass-through
            word: feature 0, no bin but NaN's above its rank, NaN left).
        feature, border, nan_right: each node's split.
    """
    border = border.astype(np.float32) + np.float32(0.0)  # -0.0 and 0.0 are one border
    if ens.featurizer is None:
        table, rank = _ranks(feature[used], border[used], ens.n_evaluated)
    else:  # the rows hold each feature's bin: a border is its rank already
        table, rank = np.zeros((0, 1), np.float32), border[used].astype(np.int64)
        if rank.size and (rank.min() < 0 or not np.array_equal(rank, border[used])):
            return None
    top = int(rank.max(initial=0))  # bins reach table.shape[1]; pass-through j and NaN sit above
    bits = next((b for b in _BIN_BITS if table.shape[1] < (1 << b) - 1 and top < (1 << b) - 2), None)
    if bits is None or ens.n_evaluated >= 1 << (30 - bits):
        return None
    j = np.full(feature.shape, (1 << bits) - 2, np.int64)  # pass-through: no bin but NaN exceeds it
    j[used] = rank
    nan = np.where(used, nan_right, False)
    words = (np.where(used, feature, 0).astype(np.int64) << (bits + 1)) | (nan.astype(np.int64) << bits) | j
    return words.astype(np.int32), table, bits


def _ranks(feature: np.ndarray, border: np.ndarray, n_features: int) -> tuple[np.ndarray, np.ndarray]:
    """``(table f32[E, n_borders], rank)``: each feature's distinct borders sorted and padded with
    ``+inf``, and each node's border's rank among its feature's (``x > border`` exactly when
    ``#{borders < x} > rank``)."""
    order = np.lexsort((border, feature))
    f, b = feature[order], border[order]
    new = np.ones(f.size, bool)
    new[1:] = (f[1:] != f[:-1]) | (b[1:] != b[:-1])
    distinct = np.cumsum(new) - 1  # each sorted node's distinct (feature, border)
    first = np.searchsorted(f[new], np.arange(n_features))  # each feature's first distinct border
    counts = np.bincount(f[new], minlength=n_features)
    table = np.full((n_features, max(1, int(counts.max(initial=0)))), np.inf, np.float32)
    table[f[new], distinct[new] - first[f[new]]] = b[new]
    rank = np.empty(f.size, np.int64)
    rank[order] = distinct - first[f]
    return table, rank


def quantize(heap: Any, x: Array, *, fused: bool = False, features_first: bool = False,
             tuning: Tuning) -> Array:
    """``[E, n]`` the bin of each value of rows ``x f32[n, E]`` (``[E, n]`` with
    ``features_first``): ``#{borders < x}``, NaN the bin of all ones (``u8`` or ``u16``).
    ``heap``: a :class:`Heap`, or any layout with its ``borders``, ``bits`` and ``bin_dtype``
    (``jaximp._leaves.masks.Masks``); ``tuning``: the platform's (the search's fences and runs)."""
    xt = x if features_first else x.T
    if heap.borders.shape[0] == 0:  # a featurized model's rows: bins already
        return xt.astype(heap.bin_dtype)
    bins = binned.search(heap.borders, xt, heap.bin_dtype, fused, tuning)
    return jnp.where(jnp.isnan(xt), jnp.asarray((1 << heap.bits) - 1, heap.bin_dtype), bins)


def leaves(heap: Heap, bins: Array) -> Array:
    """``i32[T, n]`` the leaf (depth-first number) each row of ``bins [E, n]`` reaches in each tree.

    The levels below the root run in a loop, which XLA keeps as one fused gather-and-compare
    per level: unrolled, it fuses each level's position into the next and recomputes all
    earlier levels. The root's word is the tree's first (no gather: 10-15% of the descent of
    depth 8).
    """
    n = bins.shape[1]
    flat = bins.reshape(-1)  # bin of row i, feature f at f * n + i
    n_trees, positions = heap.words.shape
    words = heap.words.reshape(-1)
    offsets = (jnp.arange(n_trees, dtype=jnp.int32) * positions)[:, None]
    columns = jnp.arange(n, dtype=jnp.int32)[None, :]
    ones = (1 << heap.bits) - 1  # a word's rank bits, and the bin of NaN

    def level(word, position):
        value = take(flat, (word >> (heap.bits + 1)) * n + columns).astype(jnp.int32)
        right = (value > (word & ones)) & ((value != ones) | ((word >> heap.bits) & 1 == 1))
        return 2 * position + 1 + right.astype(jnp.int32)

    position = level(heap.words[:, :1], jnp.zeros((n_trees, n), jnp.int32))
    position = jax.lax.fori_loop(1, heap.depth, lambda _, p: level(take(words, p + offsets), p), position)
    last = (jnp.arange(n_trees, dtype=jnp.int32) << heap.depth)[:, None] - positions
    return take(heap.leaf_of.reshape(-1), position + last)
