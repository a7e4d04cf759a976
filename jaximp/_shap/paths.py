"""Per-leaf root-to-leaf paths of :class:`TreeEnsemble` models, the players on them, a row's
pattern at every leaf, and the layout of leaves in buckets of players per path.

Entries and slots: entry ``k`` of a leaf's path is its ancestor's edge at depth ``k`` (root
first). The path's players are its distinct features; slot ``s`` is the ``s``-th of them in the
order they first appear, and every entry belongs to the slot of its feature. A path has thus
at most as many slots as edges, and the games cost ``2**slots``, not ``2**edges`` (on a LightGBM
model of 500 trees of 127 leaves, paths of up to 31 edges read at most 22 features). A node's
slot is the same for every leaf below it (it depends only on the edges above), so a row's
patterns are built once per node, not per leaf and depth: each edge the row misses sets its
slot's bit, and every node ORs in the bits of its ancestors by pointer jumping (``log2 D``
gathers over the nodes instead of ``D`` over the leaves; :class:`Edges`).

Buckets. Trees of LightGBM and of Lossguide growth are deep (20 to 30 edges) while most of their
leaves have few players (90% at most 13 on that model): padding every leaf to the most would
cost every leaf what the deepest costs. A :data:`Layout` cuts the numbers of players into
buckets, each with its own depth (its most players), and each bucket holds those leaves of all
trees, in chunks of leaves (:func:`bucket_leaves`, :func:`flat_leaves`): a leaf pads only to its
bucket's depth, whatever the shapes of the other trees. A bucket reads as many slots of its
leaves as its depth (and all their entries where the rows' bit patterns do not hold the slots).

Shapes: the legend of :mod:`jaximp._models` (T, L, D, M), and in words ``entries`` and
``slots`` (a path's edges and players, each axis D long in a model's paths, ``slots`` cut to a
bucket's depth in a bucket), ``chunk`` (the trees of a chunk of trees, or the leaves of a chunk
of a bucket), ``groups`` and ``leaves`` (a bucket's leaves as its games take them: ``groups``
chunks of ``leaves`` each, one chunk in a row kernel) and ``n`` (the rows of a step).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._models.ensemble import kept_per_model, safe_div
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
        feature: ``i32[T, L, D]`` the player of each root-first entry (-1 past the leaf).
        lead: ``i32[T, L, slots]`` the root-first entry that first reads each slot's player (0
            for null slots).
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
    feature: Array
    lead: Array


def host_structure(ens: TreeEnsemble) -> Structure | None:
    """The :class:`Structure` of ``ens`` in NumPy, equal to what ``leaf_paths``, ``parents`` and
    :func:`tree_paths` compute in JAX; None when the model's structure is traced (under
    ``jax.jit`` / ``jax.grad`` of the model).

    Kept while ``ens`` lives (a model is frozen, its arrays immutable), so that every call of a
    SHAP function on the same model reads it once."""
    if any(isinstance(a, jax.core.Tracer) for a in (ens.node_children, ens.roots, ens.node_players)):
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
    # tree_paths' integer fields, the same operations in NumPy
    length = np.sum(mask, axis=-1, keepdims=True)
    order = np.clip(length - 1 - np.arange(depth), 0, max(depth - 1, 0)).astype(np.int32)
    real = np.arange(depth) < length
    feature = np.where(mask, np.asarray(ens.node_players)[np.arange(t)[:, None, None], nodes], -1)
    path_nodes, path_right, path_mask, feature = (np.take_along_axis(a, order, axis=-1)
                                                  for a in (nodes, right, mask, feature))
    path_right, path_mask = path_right & real, path_mask & real
    feature = entry = np.where(path_mask, feature, -1)
    same = (feature[..., :, None] == feature[..., None, :]) & path_mask[..., :, None]
    first = np.argmax(same, axis=-1).astype(np.int32) if depth else np.zeros((t, l, 0), np.int32)
    leads = path_mask & (first == np.arange(depth))
    rank = np.cumsum(leads, axis=-1, dtype=np.int32) - 1
    slot = np.where(path_mask, np.take_along_axis(rank, first, axis=-1), 0).astype(np.int32)
    player = np.arange(depth) < np.sum(leads, axis=-1, keepdims=True)  # slots 0 to players - 1
    lead = np.zeros((t, l, depth + 1), np.int32)  # the entries that lead no slot go to the last column
    entries = np.broadcast_to(np.arange(depth, dtype=np.int32), leads.shape)
    np.put_along_axis(lead, np.where(leads, rank, depth), entries, axis=-1)
    lead = np.where(player, lead[..., :depth], 0)
    feature = np.where(player, np.take_along_axis(entry, lead, axis=-1), 0).astype(np.int32)
    paths = Paths(path_nodes, path_right, slot, player, feature, None, None, path_mask)
    return Structure(nodes, right, mask, node_parent, node_side, leaf_parent, leaf_side, order, paths, entry, lead)


def tree_paths(ens: TreeEnsemble, leaf_weights: Array, structure: Structure | None = None) -> Paths:
    """The :class:`Paths` of ``ens`` with covers from ``leaf_weights f32[T, L]``; a node of zero
    cover splits it 0.5 / 0.5 (the limit of a vanishing weight on every leaf). ``structure``:
    the trees' :class:`Structure` (None: computed here)."""
    if structure is None:
        nodes, right, mask = leaf_paths(ens)
        cover, _ = subtree_sums(ens, leaf_weights)  # [T, M]
    else:  # subtree_sums' covers from the given paths
        nodes, right, mask = structure.nodes, structure.right, structure.mask
        flat = (nodes + ens.n_nodes * jnp.arange(ens.n_trees, dtype=jnp.int32)[:, None, None]).reshape(-1)
        weight = jnp.where(mask, leaf_weights[:, :, None], 0.0)
        cover = jax.ops.segment_sum(weight.reshape(-1), flat, ens.n_trees * ens.n_nodes).reshape(ens.n_trees, -1)
    t, l, d = nodes.shape
    rows = jnp.arange(t)[:, None, None]
    node_cover = cover[rows, nodes]
    child_cover = jnp.concatenate([leaf_weights[:, :, None], node_cover[:, :, :-1]], axis=2)
    ratio = jnp.where(mask, safe_div(child_cover, node_cover, 0.5), 1.0)
    if structure is not None:  # the integer fields from the host, the same floats as below
        paths = structure.paths
        ratio = jnp.where(paths.mask, jnp.take_along_axis(ratio, structure.order, axis=-1), 1.0)
        same = _players(structure.feature, paths.mask)[0]
        z = jnp.prod(jnp.where(same & paths.mask[..., None, :], ratio[..., None, :], 1.0), axis=-1)
        z = jnp.where(paths.player, jnp.take_along_axis(z, structure.lead, axis=-1), 1.0)  # the sum below
        return dataclasses.replace(paths, z=z.astype(ratio.dtype), ratio=ratio)
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


def _players(feature: Array, mask: Array) -> tuple[Array, Array, Array]:
    """``(bool[..., entries, entries], i32[..., entries], bool[..., entries])`` of path entries
    ``feature i32[..., entries]`` (root first, ``mask``: real edges): whether two entries read the
    same player, the first entry reading each entry's player, and whether an entry is that first
    one (it leads a slot)."""
    d = feature.shape[-1]
    same = (feature[..., :, None] == feature[..., None, :]) & mask[..., :, None]  # [..., entries, entries]
    first = jnp.argmax(same, axis=-1).astype(jnp.int32)
    return same, first, mask & (first == jnp.arange(d))


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
    as :func:`tree_paths`)."""
    t, m = ens.n_trees, ens.n_nodes
    if structure is None:
        node_parent, node_side, leaf_parent, leaf_side = parents(ens)
    else:
        node_parent, node_side = structure.node_parent, structure.node_side
        leaf_parent, leaf_side = structure.leaf_parent, structure.leaf_side
    rows = jnp.arange(t)[:, None, None]
    at = jnp.where(paths.mask, paths.nodes, m)  # padded entries dropped
    node_slot = jnp.zeros((t, m), jnp.int32).at[rows, at].set(paths.slot, mode="drop")
    parent, leaf_up = jnp.maximum(node_parent, 0), jnp.maximum(leaf_parent, 0)
    bit = jnp.where(node_parent >= 0, 1 << jnp.take_along_axis(node_slot, parent, axis=1), 0)
    leaf_bit = jnp.where(leaf_parent >= 0, 1 << jnp.take_along_axis(node_slot, leaf_up, axis=1), 0)
    jumps = [parent]
    for _ in range(max(0, ens.depth - 2).bit_length() - 1):
        jumps.append(jnp.take_along_axis(jumps[-1], jumps[-1], axis=1))
    return Edges(parent, node_side, bit, jnp.stack(jumps, axis=1), leaf_up, leaf_side, leaf_bit)


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
# Buckets of players per path


@dataclasses.dataclass(frozen=True)
class Bucket:
    """The leaves of every tree whose paths hold ``shallowest < players <= depth`` players: each
    takes ``depth`` slots, and per-leaf ``tables`` or not; ``count`` of them in the model;
    without tables, quadrature nodes ``looped`` or unrolled (``jaximp._shap.games``) (hashable:
    layouts are static arguments of compiled kernels)."""

    shallowest: int
    depth: int
    tables: bool
    count: int
    looped: bool = False


Layout = tuple[Bucket, ...]


def path_players(ens: TreeEnsemble, structure: Structure | None = None) -> np.ndarray | None:
    """``i32[T, L]`` the players on each leaf's path, the slots it takes (0 for padded leaves and
    leaves without splits), or None when the model's structure is traced (under ``jax.jit`` /
    ``jax.grad`` of the model: then one bucket of D slots); from its :class:`Structure` when given."""
    structure = host_structure(ens) if structure is None else structure  # on the host: no program compiled
    return None if structure is None else np.sum(structure.paths.player, axis=-1).astype(np.int32)


def plan_layout(players: np.ndarray | None, n_trees: int, n_leaves: int, depth: int, *, table_depth: int,
                table_floats: Callable[[int], int], table_bytes: int,
                costs: Callable[[int], tuple[float, float]] | None = None, overhead: float = 400.0,
                compile_cost: float = 0.0, node_compile_cost: float = 0.0, max_buckets: int = 6) -> Layout:
    """At most ``max_buckets`` buckets of players per path minimising a cost model of the row kernels
    (each bucket is code of its own: more buckets pad less but compile longer).

    Args:
        players: ``i32[T, L]`` players per path (:func:`path_players`), or None: one bucket of ``depth``
            holding every leaf.
        n_trees: T, the model's trees.
        n_leaves: L, the leaves of each tree's table.
        depth: D, the model's depth.
        table_depth: the deepest bucket that may use per-leaf tables.
        table_floats: a table's floats per leaf, as a function of the bucket's depth.
        table_bytes: the budget of all tables together; deeper buckets use quadrature beyond it.
        costs: ``(table, no table)`` cost per leaf and row of a bucket, as a function of its
            depth, in ns (default :func:`path_costs`).
        overhead: a bucket's fixed cost per tree and row, in ns (its own ops at every step).
        compile_cost: a bucket's one-off cost per row, in ns: the time its code takes to compile,
            spread over the rows explained (a first call on few rows pays for every bucket).
        node_compile_cost: the same for each unrolled quadrature node of a bucket without
            tables; 0: nodes always unrolled. Else a bucket's nodes are looped where the loop's
            slower passes (:data:`LOOP_SLOWDOWN`) cost the rows less than compiling the nodes.

    Returns:
        :data:`Layout`, buckets from the shortest paths to the longest; leaves without splits
        (no players, no SHAP values) are in none.
    """
    if players is None:
        only = Bucket(-1, depth, depth <= table_depth, n_trees * n_leaves)
        return _fit_tables((only,), table_floats, table_bytes)
    depths, counts = np.unique(players[players > 0], return_counts=True)
    start = np.concatenate([[0], np.cumsum(counts)])

    def bucket(i: int, j: int) -> tuple[float, Bucket]:  # the leaves of depths[i:j]
        d, count = int(depths[j - 1]), int(start[j] - start[i])
        table, quad = (costs or path_costs)(d)
        fits = d <= table_depth and count * table_floats(d) * 4 <= table_bytes
        tables = fits and table < quad
        shallowest = int(depths[i - 1]) if i else 0
        nodes = -(-d // 2)
        looped = not tables and node_compile_cost > 0 and \
            count * quad * (LOOP_SLOWDOWN - 1) < (nodes - 1) * node_compile_cost
        work = table if tables else quad * LOOP_SLOWDOWN if looped else quad
        code = compile_cost + (0 if tables else node_compile_cost * (1 if looped else nodes))
        return code + overhead * n_trees + count * work, Bucket(shallowest, d, tables, count, looped)

    n = len(depths)
    best = {(0, 0): (0.0, ())}  # cheapest layout of depths[:j] in k buckets
    for k in range(1, max_buckets + 1):
        for j in range(k, n + 1):
            options = [(best[i, k - 1][0] + cost, best[i, k - 1][1] + (b,))
                       for i in range(k - 1, j) if (i, k - 1) in best for cost, b in [bucket(i, j)]]
            best[j, k] = min(options, key=lambda o: o[0])
    layout = min((best[n, k] for k in range(1, max_buckets + 1) if (n, k) in best), key=lambda o: o[0],
                 default=(0.0, ()))[1]
    return _fit_tables(layout, table_floats, table_bytes)


LOOP_SLOWDOWN = 1.15  # looped quadrature nodes over unrolled ones (measured on CPU, 9 nodes)


def path_costs(d: int, rows: int = 256, pairs: bool = False) -> tuple[float, float]:
    """``(table, quadrature)`` cost of the path-dependent games per leaf and row of a bucket of
    depth ``d``, in ns measured on CPU: ``2 (d + 2)`` per lookup plus the table's build
    (``(d + 1) 2**d`` per leaf) spread over the ``rows`` explained; quadrature
    ``4 + 0.15 d ceil(d / 2)`` for SHAP values (cheaper than a lookup at every depth a table
    holds, so their buckets have none), ``20 + 2 d ceil(d / 2)`` for interactions."""
    nodes = -(-d // 2)
    quadrature = 20.0 + 2.0 * d * nodes if pairs else 4.0 + 0.15 * d * nodes
    return 2.0 * (d + 2) + (d + 1) * (1 << d) / rows, quadrature


def interventional_costs(d: int, n_background: int, rows: int = 256) -> tuple[float, float]:
    """``(table, no table)`` cost of the interventional games per leaf and row, as
    :func:`path_costs` (measured on CPU with 2 cores): the table's build is ``ceil(d / 2)``
    superset sums of ``d 2**d`` adds at 0.5 ns per leaf, and 9 ns per leaf and background row for
    the histogram, spread over the ``rows`` explained; without a table, every row meets every
    background row at every slot, 0.5 ns each."""
    build = (0.5 * (-(-d // 2)) * d * (1 << d) + 9.0 * n_background) / rows
    return 2.0 * (d + 3) + build, 20.0 + 0.5 * d * n_background


def _fit_tables(layout: Layout, table_floats: Callable[[int], int], table_bytes: int) -> Layout:
    """Turn the deepest table buckets to quadrature until all tables fit ``table_bytes``."""
    layout = list(layout)
    size = lambda b: b.count * table_floats(b.depth) * 4  # noqa: E731
    while sum(size(b) for b in layout if b.tables) > table_bytes:
        i = max((i for i, b in enumerate(layout) if b.tables), key=lambda i: layout[i].depth)
        layout[i] = dataclasses.replace(layout[i], tables=False)
    return tuple(layout)


def bucket_leaves(players: np.ndarray | None, layout: Layout, n_trees: int, n_leaves: int,
                  sizes: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """Per bucket and its ``size`` in ``sizes``, ``i32[n_chunks, size]`` its leaves, as indices
    ``tree * L + leaf`` into the model's leaves (:func:`flat_leaves`), in chunks of ``size``; the
    last chunk ends in copies of ``n_trees * L``, the null leaf. ``n_trees``: the trees of
    ``players`` and more, all leaves of the extra trees unused (their index range pads the
    patterns of trees in chunks)."""
    null = n_trees * n_leaves
    if players is None:
        every = np.arange(null, dtype=np.int32)
        return tuple(_chunked(every, size, null) for size in sizes)
    players = np.pad(players, ((0, n_trees - len(players)), (0, 0))).reshape(-1)
    return tuple(_chunked(np.flatnonzero((players > b.shallowest) & (players <= b.depth)).astype(np.int32), size,
                          null) for b, size in zip(layout, sizes))


def _chunked(index: np.ndarray, size: int, fill: int) -> np.ndarray:
    n = max(-(-len(index) // size), 1)
    return np.pad(index, (0, n * size - len(index)), constant_values=fill).reshape(n, size)


def chunk_sizes(counts: tuple[int, ...], widths: tuple[float, ...], budget: float) -> tuple[int, ...]:
    """Leaves per chunk of each bucket of ``counts`` leaves and ``widths`` floats per leaf: within
    ``budget`` floats, split evenly (the last chunk pads the least)."""
    out = []
    for count, width in zip(counts, widths):
        most = max(1, int(budget // max(width, 1.0)))
        n = max(-(-count // most), 1)
        out.append(max(-(-count // n), 1))
    return tuple(out)


def flat_leaves(paths: Paths, n_nodes: int) -> Paths:
    """``paths [T, L, D]`` as ``[T L + 1, D]``: every leaf of the model, tree-major, with
    ``nodes`` indexing the model's ``T M`` nodes (``tree * M + node``), and a null leaf (no
    edges, no players) last, which pads the buckets' chunks (:func:`bucket_leaves`)."""
    t, l, d = paths.nodes.shape
    paths = dataclasses.replace(paths, nodes=paths.nodes + (n_nodes * jnp.arange(t, dtype=jnp.int32))[:, None, None])
    flat = lambda a, fill: jnp.concatenate([a.reshape(t * l, d), jnp.full((1, d), fill, a.dtype)])  # noqa: E731
    return Paths(**{name: flat(getattr(paths, name), fill) for name, fill in _NULL_LEAF.items()})


def bucket(paths: Paths, leaves: Array, depth: int, entries: int) -> Paths:
    """``paths [T L + 1, D]`` (:func:`flat_leaves`) at a bucket's ``leaves i32[n_chunks, chunk]``:
    their first ``depth`` slots ``[n_chunks, chunk, depth]`` and first ``entries`` entries
    ``[n_chunks, chunk, entries]`` (0 when the rows' bit patterns stand for them)."""
    return Paths(**{f.name: getattr(paths, f.name)[:, :depth if f.name in _SLOT_FIELDS else entries][leaves]
                    for f in dataclasses.fields(Paths)})
