"""Per-leaf root-to-leaf paths of :class:`TreeEnsemble` models, the players on them, a row's
pattern at every leaf, and the paths of a bucket of leaves.

Entries and slots: entry ``k`` of a leaf's path is its ancestor's edge at depth ``k`` (root
first). The path's players are its distinct features; slot ``s`` is the ``s``-th of them in the
order they first appear, and every entry belongs to the slot of its feature. A path has thus
at most as many slots as edges, and the games cost ``2**slots``, not ``2**edges`` (on a LightGBM
model of 500 trees of 127 leaves, paths of up to 31 edges read at most 22 features). A node's
slot is the same for every leaf below it (it depends only on the edges above), so a row's
patterns are built once per node, not per leaf and depth: each edge the row misses sets its
slot's bit, and every node ORs in the bits of its ancestors by pointer jumping (``log2 D``
gathers over the nodes instead of ``D`` over the leaves; :class:`Edges`).

The leaves' buckets of players per path: :mod:`jaximp._shap.layouts`.

Shapes: the legend of :mod:`jaximp._models` (T, L, D, M), and in words ``entries`` and
``slots`` (a path's edges and players, each axis D long in a model's paths, ``slots`` cut to a
bucket's depth in a bucket), ``chunk`` (the trees of a chunk of trees, or the leaves of a chunk
of a bucket), ``groups`` and ``leaves`` (a bucket's leaves as its games take them: ``groups``
chunks of ``leaves`` each, one chunk in a row kernel) and ``n`` (the rows of a step).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._models.cache import kept_per_model
from jaximp._models.ensemble import namespace, safe_div
from jaximp._models.trees import TreeEnsemble, leaf_paths, parents, subtree_sums


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Paths:
    """Per-leaf path slots of every tree (a pytree; see the module docstring).

    Per entry ``k`` (the leaf's ancestor's edge at depth ``k``, root first) ``[T, L, entries]``,
    and per slot ``s`` (the path's ``s``-th player) ``[T, L, slots]``; both axes are D long, and
    a bucket may cut the slots (and entries) shorter (:func:`bucket`).

    Attributes:
        nodes: ``i32[T, L, entries]`` internal node of each entry's edge.
        right: ``bool[T, L, entries]`` the path goes right there.
        slot: ``i32[T, L, entries]`` the slot of the player the edge reads (0 past the leaf).
        player: ``bool[T, L, slots]`` the slot holds a player (else a null slot, past the path's
            players).
        feature: ``i32[T, L, slots]`` the slot's player (``TreeEnsemble.node_players``: its feature
            for numeric models, its combination class with categorical features; 0 for null slots).
        z: ``f32[T, L, slots]`` the player's cover ratio product (1 for null slots).
        ratio: ``f32[T, L, entries]`` each edge's cover ratio (1 past the leaf).
        mask: ``bool[T, L, entries]`` the entry is a real edge.
    """

    nodes: Array
    right: Array
    slot: Array
    player: Array
    feature: Array
    z: Array
    ratio: Array
    mask: Array


# the null leaf's entries and slots (no edges, no players), field by field
_NULL_LEAF = dict(nodes=0, right=False, slot=0, player=False, feature=0, z=1.0, ratio=1.0, mask=False)
_SLOT_FIELDS = ("player", "feature", "z")  # the fields along the slots; the others along the entries


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Structure:
    """The integer structure of a model's trees, computed on the host (:func:`host_structure`) so
    that the programs building a plan take it as arrays instead of compiling its gathers (a
    pytree).

    Attributes:
        nodes: ``i32[T, L, D]`` as ``jaximp._models.trees.leaf_paths``.
        right: ``bool[T, L, D]`` as ``leaf_paths``.
        mask: ``bool[T, L, D]`` as ``leaf_paths``.
        node_parent: ``i32[T, M]`` as ``jaximp._models.trees.parents``.
        node_side: ``i32[T, M]`` as ``parents``.
        leaf_parent: ``i32[T, L]`` as ``parents``.
        leaf_side: ``i32[T, L]`` as ``parents``.
        order: ``i32[T, L, D]`` the entries of ``nodes`` (listed from the leaf up) in root-first
            order (:func:`_root_first`).
        paths: the integer fields of the model's :class:`Paths` (``z`` and ``ratio`` are None).
    """

    nodes: Array
    right: Array
    mask: Array
    node_parent: Array
    node_side: Array
    leaf_parent: Array
    leaf_side: Array
    order: Array
    paths: Paths


def host_structure(ens: TreeEnsemble) -> Structure | None:
    """The :class:`Structure` of ``ens`` in NumPy, equal to what ``leaf_paths``, ``parents`` and
    :func:`tree_paths` compute in JAX; None when the model's structure is traced (under
    ``jax.jit`` / ``jax.grad`` of the model).

    Kept while ``ens`` lives (a model is frozen, its arrays immutable), so that every call of a
    SHAP function on the same model reads it once."""
    if any(isinstance(a, jax.core.Tracer) for a in (ens.node_children, ens.roots, ens.node_features)):
        return None
    return _structure(ens)


@kept_per_model
def _structure(ens: TreeEnsemble) -> Structure:
    """The :class:`Structure` of ``ens``, computed (see :func:`host_structure`)."""
    t, m, l, depth = ens.n_trees, ens.n_nodes, ens.n_leaves, ens.depth
    children = np.asarray(ens.node_children, np.int32).reshape(t, 2 * m)
    rows = np.broadcast_to(np.arange(t)[:, None], children.shape)
    node = np.broadcast_to(np.repeat(np.arange(m, dtype=np.int32), 2), children.shape)
    side = np.broadcast_to(np.tile(np.arange(2, dtype=np.int32), m), children.shape)

    def above(size: int, keep: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        parent, sides = np.full((t, size), -1, np.int32), np.zeros((t, size), np.int32)
        parent[rows[keep], at[keep]], sides[rows[keep], at[keep]] = node[keep], side[keep]
        return parent, sides

    node_parent, node_side = above(m, (children >= 0) & (children < m), children)
    leaf_parent, leaf_side = above(l, (children < 0) & (~children < l), ~children)  # out of range: dropped
    nodes, right = [leaf_parent], [leaf_side]
    for _ in range(depth - 1):
        up = np.maximum(nodes[-1], 0)
        nodes.append(np.where(nodes[-1] >= 0, np.take_along_axis(node_parent, up, axis=1), -1))
        right.append(np.take_along_axis(node_side, up, axis=1))
    nodes = np.stack(nodes, axis=-1) if depth else np.zeros((t, l, 0), np.int32)
    right = np.stack(right, axis=-1) if depth else np.zeros((t, l, 0), np.int32)
    mask = nodes >= 0
    nodes, right = np.maximum(nodes, 0).astype(np.int32), (right == 1) & mask
    # tree_paths' integer fields, in O(T L D) where the JAX program compares every pair of entries
    length = np.sum(mask, axis=-1, keepdims=True, dtype=np.int32)
    order = np.maximum(length - 1 - np.arange(depth, dtype=np.int32), 0)  # root first
    real = np.arange(depth) < length
    path_nodes, path_right, path_mask = (_take_last(a, order) for a in (nodes, right, mask))
    path_right, path_mask = path_right & real, path_mask & real
    players, rows = np.asarray(ens.node_players, np.int32), np.arange(t)[:, None, None]
    feature = np.where(path_mask, players[rows, path_nodes], -1)
    first = np.where(path_mask, _first_same(players, node_parent, depth)[rows, path_nodes], 0)  # entry of the first
    leads = path_mask & (first == np.arange(depth))
    rank = np.cumsum(leads, axis=-1, dtype=np.int32) - 1
    slot = np.where(path_mask, _take_last(rank, first), 0).astype(np.int32)
    player = np.arange(depth) < np.sum(leads, axis=-1, keepdims=True)  # slots 0 to players - 1
    held = np.zeros((t, l, depth + 1), np.int32)  # each slot's player; entries that lead none: last column
    np.put_along_axis(held, np.where(leads, rank, depth), feature, axis=-1)
    paths = Paths(path_nodes, path_right, slot, player, held[..., :depth], None, None, path_mask)
    return Structure(nodes, right, mask, node_parent, node_side, leaf_parent, leaf_side, order, paths)


def tree_paths(ens: TreeEnsemble, leaf_weights: Array, structure: Structure | None = None) -> Paths:
    """The :class:`Paths` of ``ens`` with covers from ``leaf_weights f32[T, L]``; a node of zero
    cover splits it 0.5 / 0.5 (the limit of a vanishing weight on every leaf). ``structure``:
    the trees' :class:`Structure` (None: computed here). With the structure and NumPy weights,
    the paths are NumPy arrays computed on the host (``jaximp._models.ensemble.namespace``)."""
    if structure is None:
        nodes, right, mask = leaf_paths(ens)
        cover, _ = subtree_sums(ens, leaf_weights)  # [T, M]
    else:  # subtree_sums' covers from the given paths
        nodes, right, mask = structure.nodes, structure.right, structure.mask
        xp = namespace(leaf_weights)
        flat = (nodes + ens.n_nodes * xp.arange(ens.n_trees, dtype=xp.int32)[:, None, None]).reshape(-1)
        weight = xp.where(mask, leaf_weights[:, :, None], 0.0)
        cover = _segment_sum(weight.reshape(-1), flat, ens.n_trees * ens.n_nodes).reshape(ens.n_trees, -1)
    xp = namespace(cover, leaf_weights)
    t, l, d = nodes.shape
    rows = xp.arange(t)[:, None, None]
    node_cover = cover[rows, nodes]
    child_cover = xp.concatenate([leaf_weights[:, :, None], node_cover[:, :, :-1]], axis=2)
    ratio = xp.where(mask, safe_div(child_cover, node_cover, 0.5), 1.0).astype(leaf_weights.dtype)
    if structure is not None:  # the integer fields from the host, the same floats as below
        paths = structure.paths
        ratio = xp.where(paths.mask, xp.take_along_axis(ratio, structure.order, axis=-1), 1.0)
        return dataclasses.replace(paths, z=_slot_products(ratio, paths), ratio=ratio)
    feature = jnp.where(mask, ens.node_players[rows, nodes], -1)  # players: combination classes
    nodes, right, mask, ratio, feature = _root_first(mask, nodes, right, mask, ratio, feature)
    ratio, feature = jnp.where(mask, ratio, 1.0), jnp.where(mask, feature, -1)
    same, first, leads = _players(feature, mask)
    rank = jnp.cumsum(leads, axis=-1, dtype=jnp.int32) - 1  # a leading entry's slot
    slot = jnp.where(mask, jnp.take_along_axis(rank, first, axis=-1), 0)
    z = jnp.prod(jnp.where(same & mask[..., None, :], ratio[..., None, :], 1.0), axis=-1)  # per entry
    holds = leads[..., :, None] & (rank[..., :, None] == jnp.arange(d))  # [T, L, entries, slots]: leads the slot
    player = jnp.any(holds, axis=-2)
    feature = jnp.sum(jnp.where(holds, feature[..., :, None], 0), axis=-2)
    z = jnp.where(player, jnp.sum(jnp.where(holds, z[..., :, None], 0.0), axis=-2), 1.0).astype(ratio.dtype)
    return Paths(nodes, right, slot, player, feature, z, ratio, mask)


def _segment_sum(values: Array, segments: Array, n: int) -> Array:
    """``[n]`` the sums of ``values`` by ``segments`` (in range), NumPy's for NumPy arrays."""
    if namespace(values, segments) is np:
        return np.bincount(segments, values, minlength=n).astype(values.dtype)
    return jax.ops.segment_sum(values, segments, n)


def _players(feature: Array, mask: Array) -> tuple[Array, Array, Array]:
    """``(bool[..., entries, entries], i32[..., entries], bool[..., entries])`` of path entries
    ``feature i32[..., entries]`` (root first, ``mask``: real edges): whether two entries read the
    same player, the first entry reading each entry's player, and whether an entry is that first
    one (it leads a slot)."""
    same = (feature[..., :, None] == feature[..., None, :]) & mask[..., :, None]
    first = jnp.argmax(same, axis=-1).astype(jnp.int32)
    return same, first, mask & (first == jnp.arange(feature.shape[-1]))


def _row_starts(shape: tuple[int, ...], width: int) -> np.ndarray:
    """``intp[*shape, 1]`` where each row of ``width`` elements starts in a flat array of rows ``shape``."""
    return (np.arange(math.prod(shape), dtype=np.intp) * width).reshape(shape + (1,))


def _take_last(a: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``np.take_along_axis(a, index, axis=-1)`` for ``index`` of ``a``'s shape, as one flat take."""
    return np.take(a.reshape(-1), index + _row_starts(a.shape[:-1], a.shape[-1]))


def _first_same(players: np.ndarray, parent: np.ndarray, depth: int) -> np.ndarray:
    """``i32[T, M]`` per node, the depth of its shallowest ancestor (itself included) that reads
    its player (``players i32[T, M]``; ``parent i32[T, M]``, -1 at roots): on a path listed root
    first, the first entry reading each entry's player. Node by node, walking up the ``depth - 1``
    ancestors at most, where comparing the entries of every leaf's path would take O(T L D**2)."""
    rows = np.arange(parent.shape[0])[:, None]
    ancestors, up = [], parent
    for _ in range(max(depth - 1, 0)):  # parent, grandparent, ...: -1 above the root
        ancestors.append(up)
        up = np.where(up >= 0, parent[rows, np.maximum(up, 0)], -1)
    node_depth = np.zeros(parent.shape, np.int32)
    for a in ancestors:
        node_depth += a >= 0
    first = node_depth
    for a in ancestors:  # nearest first: a shallower match overwrites a deeper one
        at = np.maximum(a, 0)
        first = np.where((a >= 0) & (players[rows, at] == players), node_depth[rows, at], first)
    return first


def _slot_products(ratio: np.ndarray, paths: Paths) -> np.ndarray:
    """``f[..., slots]`` the product of the root-first entries' ``ratio f[..., entries]`` over
    the entries of each slot's player (1 for null slots): the ``z`` of :func:`tree_paths`. In
    NumPy one entry at a time (a loop over the depth, O(T L D)); in JAX over every pair of entry
    and slot, which XLA fuses and differentiates."""
    d = ratio.shape[-1]
    if namespace(ratio, paths.slot) is not np:
        owner = (paths.slot[..., :, None] == jnp.arange(d)) & paths.mask[..., :, None]  # [..., entries, slots]
        return jnp.prod(jnp.where(owner, ratio[..., :, None], 1.0), axis=-2)
    z = np.ones(ratio.shape[:-1] + (d + 1,), ratio.dtype).reshape(-1)  # column d: padding's
    at = np.where(paths.mask, paths.slot, d) + _row_starts(ratio.shape[:-1], d + 1)
    for k in range(d):  # the k-th entries of distinct leaves: no position twice in one step
        z[at[..., k]] *= ratio[..., k]
    return z.reshape(ratio.shape[:-1] + (d + 1,))[..., :d]


def _root_first(mask: Array, *entries: Array) -> tuple[Array, ...]:
    """Reorder ``[T, L, D]`` path entries listed from the leaf up to root first (entry ``k`` at
    depth ``k``); entries past the leaf come out as ``mask``-False copies of the root's."""
    d = mask.shape[-1]
    length = jnp.sum(mask, axis=-1, keepdims=True)  # the leaf's depth
    index = jnp.clip(length - 1 - jnp.arange(d), 0, max(d - 1, 0))
    real = jnp.arange(d) < length
    out = [jnp.take_along_axis(a, index, axis=-1) for a in entries]
    return tuple(jnp.where(real, a, jnp.zeros_like(a)) if a.dtype == bool else a for a in out)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Edges:
    """What a row's patterns are built from, per tree (a pytree; see the module docstring).

    Attributes:
        parent: ``i32[T, M]`` the node above each internal node (0 at roots and padding).
        side: ``i32[T, M]`` 1 when the node is its parent's right child.
        bit: ``i32[T, M]`` ``1 << slot`` of the edge into the node (0 at roots and padding).
        jumps: ``i32[T, n_jumps, M]`` the ``2**j``-th ancestor of each node (clamped at node 0),
            with ``2**n_jumps >= D - 1``: as many rounds of pointer jumping cover every internal
            node's path.
        leaf_parent, leaf_side, leaf_bit: ``i32[T, L]`` the same for the edge into each leaf.
    """

    parent: Array
    side: Array
    bit: Array
    jumps: Array
    leaf_parent: Array
    leaf_side: Array
    leaf_bit: Array


def tree_edges(ens: TreeEnsemble, paths: Paths, structure: Structure | None = None) -> Edges:
    """The :class:`Edges` of ``ens``, with each node's slot read from ``paths`` (``structure``:
    as :func:`tree_paths`; NumPy arrays from NumPy ones)."""
    t, m = ens.n_trees, ens.n_nodes
    if structure is None:
        node_parent, node_side, leaf_parent, leaf_side = parents(ens)
    else:
        node_parent, node_side = structure.node_parent, structure.node_side
        leaf_parent, leaf_side = structure.leaf_parent, structure.leaf_side
    xp = namespace(paths.slot, node_parent)
    rows = xp.arange(t)[:, None, None]
    at = xp.where(paths.mask, paths.nodes, m)  # padded entries dropped
    if xp is np:  # every entry of a node holds its slot: any one may land
        node_slot = np.zeros((t, m + 1), np.int32)
        node_slot[np.broadcast_to(rows, at.shape), at] = paths.slot
        node_slot = node_slot[:, :m]
    else:
        node_slot = jnp.zeros((t, m), jnp.int32).at[rows, at].set(paths.slot, mode="drop")
    parent, leaf_up = xp.maximum(node_parent, 0), xp.maximum(leaf_parent, 0)
    bit = xp.where(node_parent >= 0, 1 << xp.take_along_axis(node_slot, parent, axis=1), 0).astype(xp.int32)
    leaf_bit = xp.where(leaf_parent >= 0, 1 << xp.take_along_axis(node_slot, leaf_up, axis=1), 0).astype(xp.int32)
    jumps = [parent]
    for _ in range(max(0, ens.depth - 2).bit_length() - 1):
        jumps.append(xp.take_along_axis(jumps[-1], jumps[-1], axis=1))
    return Edges(parent, node_side, bit, xp.stack(jumps, axis=1), leaf_up, leaf_side, leaf_bit)


def gather_nodes(a: Array, index: Array) -> Array:
    """``a [chunk, nodes, n]`` at ``index i32[chunk, picked]`` along axis 1 -> ``[chunk, picked, n]``."""
    return jnp.take_along_axis(a, index[..., None], axis=1)


def patterns(edges: Edges, decisions: Array, depth: int) -> Array:
    """``i32[chunk, L, n]`` bit ``s`` set when player slot ``s`` has ``o_s = 1`` or is a null slot,
    for the first ``depth`` slots.

    ``decisions: bool[chunk, M, n]`` (``jaximp._leaves.trees.node_decisions``) for the same
    ``chunk`` trees as ``edges``.
    """
    missed = gather_nodes(decisions, edges.parent) != (edges.side == 1)[..., None]
    fails = jnp.where(missed, edges.bit[..., None], 0)  # [chunk, M, n]: the edge into each node

    def jump(j, fails):  # OR in the ancestors' bits, 2**j edges at a time
        return fails | gather_nodes(fails, jax.lax.dynamic_index_in_dim(edges.jumps, j, axis=1, keepdims=False))

    # A loop, so that each step's bits are computed once: XLA fuses unrolled steps into one pass
    # that gathers the first step's bits 2**steps times over (5x slower on LightGBM's trees).
    fails = jax.lax.fori_loop(0, edges.jumps.shape[1], jump, fails)
    missed = gather_nodes(decisions, edges.leaf_parent) != (edges.leaf_side == 1)[..., None]
    fails = gather_nodes(fails, edges.leaf_parent) | jnp.where(missed, edges.leaf_bit[..., None], 0)
    return ((1 << depth) - 1) & ~fails


def taken_slots(paths: Paths, pattern: Array | None, decisions: Array) -> Array:
    """``f32[groups, leaves, slots, n]`` 1 where a row takes every edge of a player slot's feature
    (0 at null slots) at the leaves ``paths [groups, leaves, slots]`` of a bucket: the bits of its
    :func:`patterns` ``i32[groups, leaves, n]`` where they fit an int32, else (``pattern`` None) a
    count of the edges it misses, from ``decisions bool[1, T M, n]`` at every node of the
    (chunk-padded) trees, indexed as ``paths.nodes`` (:func:`flat_leaves`)."""
    (c, l, d), e = paths.z.shape, paths.nodes.shape[-1]
    if pattern is not None:
        on = (pattern[:, :, None, :] >> jnp.arange(d, dtype=jnp.int32)[:, None]) & 1
        return jnp.where(paths.player[..., None], on.astype(jnp.float32), 0.0)
    right = gather_nodes(decisions, paths.nodes.reshape(c, l * e)).reshape(c, l, e, -1)
    missed = (right != paths.right[..., None]) & paths.mask[..., None]  # [..., entries, n]: leaves the path
    owner = (paths.slot[..., :, None] == jnp.arange(d)) & paths.mask[..., :, None]  # [..., entries, slots]
    misses = jnp.einsum("cleb,cles->clsb", missed.astype(jnp.float32), owner.astype(jnp.float32))
    return jnp.where(paths.player[..., None] & (misses == 0), 1.0, 0.0)


# --------------------------------------------------------------------------------------------
# Players per path, and a bucket's paths


def path_players(ens: TreeEnsemble, structure: Structure | None = None) -> np.ndarray | None:
    """``i32[T, L]`` the players on each leaf's path, the slots it takes (0 for padded leaves and
    leaves without splits), or None when the model's structure is traced (under ``jax.jit`` /
    ``jax.grad`` of the model: then one bucket of D slots); from its :class:`Structure` when given."""
    structure = host_structure(ens) if structure is None else structure  # on the host: no program compiled
    return None if structure is None else np.sum(structure.paths.player, axis=-1).astype(np.int32)


def flat_leaves(paths: Paths, n_nodes: int) -> Paths:
    """``paths [T, L, D]`` as ``[T L + 1, D]``: every leaf of the model, tree-major, with
    ``nodes`` indexing the model's ``T M`` nodes (``tree * M + node``), and a null leaf (no
    edges, no players) last, which pads the buckets' chunks (``jaximp._shap.layouts.bucket_leaves``)."""
    xp = namespace(paths.nodes, paths.z)
    t, l, d = paths.nodes.shape
    paths = dataclasses.replace(paths, nodes=paths.nodes + (n_nodes * xp.arange(t, dtype=xp.int32))[:, None, None])
    flat = lambda a, fill: xp.concatenate([a.reshape(t * l, d), xp.full((1, d), fill, a.dtype)])  # noqa: E731
    return Paths(**{name: flat(getattr(paths, name), fill) for name, fill in _NULL_LEAF.items()})


def bucket(paths: Paths, leaves: Array, depth: int, entries: int) -> Paths:
    """``paths [T L + 1, D]`` (:func:`flat_leaves`) at a bucket's ``leaves i32[n_chunks, chunk]``:
    their first ``depth`` slots ``[n_chunks, chunk, depth]`` and first ``entries`` entries
    ``[n_chunks, chunk, entries]`` (0 when the rows' bit patterns stand for them)."""
    return Paths(**{f.name: getattr(paths, f.name)[:, :depth if f.name in _SLOT_FIELDS else entries][leaves]
                    for f in dataclasses.fields(Paths)})
