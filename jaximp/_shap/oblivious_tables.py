"""Per-tree SHAP tables of oblivious trees: a row's explanation is a lookup by its leaf.

A row reaches leaf ``a`` (D bits) of an oblivious tree, and every SHAP variant of the tree
depends on the row only through ``a``. So each tree's attributions form a table over its L
leaves, built once per model (and background) by enumerating coalitions; a row's SHAP values
are then T gathers and a scatter-add onto features (``jaximp._shap.values``).

Players. The players of a tree are the distinct features among its real depths: a feature split
at two depths is one player, whose membership fixes both bits. Player slots are indexed by
depth: slot ``p`` is a player when depth ``p`` is real and no earlier depth splits on the same
feature, and its mask is the OR of the bits of the depths splitting on that feature. The other
slots are null players (mask 0), which leave Shapley values unchanged, so every tree uses D slots
and the ``2**D`` coalitions S of slots, ``mask(S) = OR of the masks of the slots in S``.

Value functions as tables over ``{0, 1, *}**D``. A coalition fixes the bits in ``mask(S)`` to the
row's bits and frees the others, so ``v(a, S) = Q[s]`` with ``s_d = bit d of a`` if ``d`` is in
``mask(S)``, else ``*``; ``Q`` has ``3**D`` entries, indexed by ``sum_d 3**d s_d`` (``* = 2``).

* hybrid expectation (``exact``, ``interventional``): with a distribution ``h`` over leaves,
  ``Q[s] = sum_b h[b] V[s, free bits taken from b] / sum_b h[b]``, computed on the pair tensor
  ``V[x] h[y]`` (``4**D`` entries) by contracting each bit pair ``(x_d, y_d)`` into ``s_d``:
  ``0 -> x_d = 0``, ``1 -> x_d = 1`` (``y_d`` summed) and ``* -> x_d = y_d``.
* path expectation (``path_dependent``, ``approximate``): Lundberg's TreeSHAP value function.
  From the root (CatBoost's last depth) down, a fixed bit follows the row and a free bit averages
  the two children by their training weight (cover). Computed bit by bit from the leaves up.

A node of zero cover takes the plain mean of its children (the limit of adding a vanishing
weight to every leaf); CatBoost drops such nodes, which gives the same numbers whenever
zero-weight leaves hold zero values, as in every trained model.

Shapes: the legend of :mod:`jaximp._models` (T, D, L = 2**D, K), and in words ``chunk`` (the
trees of a chunk of trees), ``d`` (the slots of a table of coefficients) and ``n_masks``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._models.ensemble import safe_div
from jaximp._models.oblivious import ObliviousEnsemble
from jaximp._rows.tuning import Tuning

MAX_DEPTH = 12  # tables cost O(D 4**D) per tree and output


def shapley_weights(d: int) -> np.ndarray:
    """``f32[2**d, d]`` Shapley coefficients of a game of ``d`` slots: ``phi_p = sum_S C[S, p] v(S)``.

    ``C[S, p] = (|S| - 1)! (d - |S|)! / d!`` when ``p`` is in ``S`` and ``-|S|! (d - |S| - 1)! / d!``
    otherwise, i.e. ``phi_p = sum_{S not p} w(|S|) (v(S + p) - v(S))``.
    """
    sizes = np.array([bin(s).count("1") for s in range(1 << d)])
    member = (np.arange(1 << d)[:, None] >> np.arange(d)) & 1

    def w(k):
        return math.factorial(k) * math.factorial(d - k - 1) / math.factorial(d)

    plus = np.array([w(k - 1) if k > 0 else 0.0 for k in sizes])
    minus = np.array([w(k) if k < d else 0.0 for k in sizes])
    return np.where(member == 1, plus[:, None], -minus[:, None]).astype(np.float32)


def interaction_weights(d: int) -> np.ndarray:
    """``f32[2**d, d, d]`` Shapley interaction coefficients of a game of ``d`` slots (zero diagonal).

    ``Phi_ij = sum_{S without i, j} |S|! (d - |S| - 2)! / (2 (d - 1)!) * (v(S+i+j) - v(S+i) -
    v(S+j) + v(S))`` (Lundberg et al. 2020, eq. 11: half the Shapley interaction index, so that
    ``Phi_ij + Phi_ji`` is the whole interaction), written as ``sum_S C[S, i, j] v(S)``.
    """
    if d < 2:
        return np.zeros((1 << d, d, d), np.float32)
    subsets = np.arange(1 << d)
    member = (subsets[:, None] >> np.arange(d)) & 1
    sizes = member.sum(1)
    coef = np.zeros((1 << d, d, d))
    for i in range(d):
        for j in range(d):
            if i == j:
                continue
            both = member[:, i] + member[:, j]
            rest = sizes - both  # |S| of the coalition without i and j
            w = np.array([math.factorial(k) * math.factorial(d - k - 2) for k in rest])
            w = w / (2 * math.factorial(d - 1))
            sign = np.where(both == 1, -1.0, 1.0)
            coef[:, i, j] = w * sign
    return coef.astype(np.float32)


def tree_players(features: Array, mask: Array, depth: int) -> tuple[Array, Array, Array]:
    """Players of one tree from its ``i32[D]`` split features and ``bool[D]`` split mask.

    Returns:
        ``(player_masks i32[D], player_features i32[D], depth_players i32[D])``: each slot's
        mask of depth bits (0 for a null slot), its feature (0 for a null slot), and the slot of
        each depth's feature.
    """
    same = (features[:, None] == features[None, :]) & mask[:, None] & mask[None, :]  # [slot p, depth q]
    earlier = jnp.tril(jnp.ones((depth, depth), bool), -1)  # [slot p, depth q]: q < p
    is_player = mask & ~jnp.any(same & earlier, axis=1)
    bits = 1 << jnp.arange(depth, dtype=jnp.int32)
    player_masks = jnp.where(is_player, jnp.sum(jnp.where(same, bits, 0), axis=1), 0)
    player_features = jnp.where(is_player, features, 0)
    return player_masks, player_features, jnp.argmax(same, axis=0).astype(jnp.int32)


def ternary_index(masks: Array, depth: int) -> Array:
    """``i32[L, n_masks]`` index into ``Q`` of every leaf ``a`` with the bits of each of
    ``masks i32[n_masks]`` fixed."""
    d = jnp.arange(depth, dtype=jnp.int32)
    leaf_bits = (jnp.arange(1 << depth, dtype=jnp.int32)[:, None] >> d) & 1  # [L, D]
    fixed = (masks[:, None] >> d) & 1  # [n_masks, D]
    digits = jnp.where(fixed[None] == 1, leaf_bits[:, None], 2)
    return jnp.sum(digits * 3**d, axis=-1)


def hybrid_expectations(values: Array, dist: Array, depth: int) -> Array:
    """``f32[chunk, 3**D, K]`` expected leaf value with the free bits drawn from a leaf distribution.

    ``Q[s] = sum_b dist[b] V[(a & m) | (b & ~m)] / sum_b dist[b]`` for every pattern ``s`` (bits
    ``m`` fixed to ``a``, the other bits from a leaf ``b``), for ``chunk`` trees at once:
    ``values: f32[chunk, L, K]``, ``dist: f32[chunk, L]`` (non-negative, positive sum).
    """
    c, _, k = values.shape
    dist = dist / jnp.sum(dist, axis=1, keepdims=True)
    pairs = (jnp.transpose(values, (1, 2, 0)).reshape((2, 1) * depth + (k, c))
             * dist.T.reshape((1, 2) * depth + (1, c)))
    # Contract the bit pairs from the most significant down: after i steps the axes are
    # (s_{D-1}, ..., s_{D-i}, pair_{D-i-1}, ..., pair_0, K, chunk), and each step writes the three
    # sums of its pair (0: x = 0, 1: x = 1, *: x = y) as contiguous slabs.
    q = pairs
    for i in range(depth):
        p = q.reshape(3**i, 2, 2, -1)
        q = jnp.stack([p[:, 0, 0] + p[:, 0, 1], p[:, 1, 0] + p[:, 1, 1], p[:, 0, 0] + p[:, 1, 1]], axis=1)
    return jnp.transpose(q.reshape(-1, k, c), (2, 0, 1))


def path_expectations(values: Array, weights: Array, depth: int) -> Array:
    """``f32[3**D, K]`` Lundberg's path-dependent expectation for every fixed-bit pattern.

    Bit ``d`` is a split of depth ``d``; the root is the last depth. A free bit at a node
    averages its children by cover; a node of zero cover averages them equally.
    ``values: f32[L, K]``, ``weights: f32[L]`` (training leaf weights).
    """
    k = values.shape[-1]
    q = values.T.reshape((k,) + (2,) * depth)  # axis 1 + i holds bit D - 1 - i
    w = weights.reshape((2,) * depth)
    for d in range(depth):  # from the leaves up
        axis = depth - 1 - d
        cover = jnp.sum(w, axis=tuple(range(depth - d, depth)), keepdims=True)
        c0 = jax.lax.slice_in_dim(cover, 0, 1, axis=axis)
        c1 = jax.lax.slice_in_dim(cover, 1, 2, axis=axis)
        total = c0 + c1
        r0 = safe_div(c0, total, 0.5)[None]
        r1 = safe_div(c1, total, 0.5)[None]
        q0 = jax.lax.slice_in_dim(q, 0, 1, axis=axis + 1)
        q1 = jax.lax.slice_in_dim(q, 1, 2, axis=axis + 1)
        q = jnp.concatenate([q0, q1, r0 * q0 + r1 * q1], axis=axis + 1)
    return q.reshape(k, -1).T


def coalition_values(q: Array, player_masks: Array, depth: int) -> Array:
    """``f32[L, 2**D, K]`` ``v(a, S) - v(a, {})`` for every leaf and coalition of slots."""
    member = (jnp.arange(1 << depth, dtype=jnp.int32)[:, None] >> jnp.arange(depth)) & 1
    masks = member @ player_masks  # player masks are disjoint: sum = OR
    return q[ternary_index(masks, depth)] - q[-1]


def per_leaf(v: Array, coef: np.ndarray) -> Array:
    """``f32[chunk, slots..., K, L]`` ``sum_S coef[S, slots...] v[chunk, L, S, K]`` for
    ``v f32[chunk, L, 2**D, K]`` and ``coef f32[2**D, slots...]``: one matmul for ``chunk`` trees."""
    c, n_leaves, n_subsets, k = v.shape
    flat = jnp.transpose(v, (0, 1, 3, 2)).reshape(-1, n_subsets) @ jnp.asarray(coef.reshape(n_subsets, -1))
    out = flat.reshape((c, n_leaves, k) + coef.shape[1:])
    return jnp.moveaxis(out, (1, 2), (-1, -2))


def interaction_table(v: Array, depth: int) -> Array:
    """``f32[chunk, D, D, K, L]`` SHAP interaction values of slot pairs from ``v: f32[chunk, L, 2**D, K]``;
    the diagonal is the main effect ``phi_i - sum_{j != i} Phi_ij`` (Lundberg et al. 2020)."""
    coef = np.concatenate([shapley_weights(depth)[:, :, None], interaction_weights(depth)], axis=2)
    both = per_leaf(v, coef)  # [chunk, D, 1 + D, K, L]
    phi, pairs = both[:, :, 0], both[:, :, 1:]
    main = phi - jnp.sum(pairs, axis=2)
    eye = jnp.eye(depth, dtype=bool)[:, :, None, None]
    return jnp.where(eye, main[:, :, None], pairs)


def saabas_table(q: Array, depth_players: Array, depth: int) -> Array:
    """``f32[D, K, L]`` Saabas attributions: the change of the (cover-weighted) node value at
    each split of the root-to-leaf path, credited to the split's player slot."""
    full = (1 << depth) - 1
    below = jnp.asarray([full & ~((1 << d) - 1) for d in range(depth + 1)], jnp.int32)
    node = q[ternary_index(below, depth)]  # [L, D + 1, K]: node values below depth d's split
    per_depth = node[:, :-1] - node[:, 1:]
    slots = depth_players[:, None] == jnp.arange(depth)[None, :]
    return jnp.einsum("ldk,dp->pkl", per_depth, slots.astype(per_depth.dtype))


@jax.jit  # one program, not a dozen op-by-op compiles on a first call
def effective_weights(ens: ObliviousEnsemble, weights: Array | None = None) -> Array:
    """``f32[T, L]`` the leaf weights (``ens.leaf_weights`` unless given), or uniform over a
    tree's real leaves where they sum to 0."""
    weights = ens.leaf_weights if weights is None else weights
    bits = 1 << jnp.arange(ens.depth, dtype=jnp.int32)
    real_bits = jnp.sum(jnp.where(ens.split_mask, bits, 0), axis=1)  # [T]
    real = (jnp.arange(ens.n_leaves, dtype=jnp.int32)[None, :] & ~real_bits[:, None]) == 0
    positive = jnp.sum(weights, axis=1, keepdims=True) > 0
    return jnp.where(positive, weights, real.astype(jnp.float32))


def tables(ens: ObliviousEnsemble, dist: Array, *, kind: str, tuning: Tuning) -> tuple[Array, Array]:
    """Per-tree tables of every tree, scaled by the model's scale.

    Args:
        ens: the model.
        dist: ``f32[T, L]`` per-tree leaf distribution: the training leaf weights (path
            expectations and ``exact``) or the background leaf histogram (``interventional``).
        kind: ``"shapley_path"``, ``"shapley_hybrid"``, ``"saabas"`` or ``"interaction_path"``.
        tuning: the platform's: trees go in chunks whose largest intermediate takes at most
            ``tuning.table_floats`` values.

    Returns:
        ``(table, slot_players)``: ``f32[T, D, K, L]`` (``f32[T, D, D, K, L]`` for
        interactions) and ``i32[T, D]`` the player of each slot (its input column for numeric
        models; see ``ObliviousEnsemble.players``).
    """
    depth = ens.depth
    players = jax.vmap(tree_players, (0, 0, None))
    path = jax.vmap(path_expectations, (0, 0, None))
    coalitions = jax.vmap(coalition_values, (0, 0, None))

    def chunk_tables(args):  # a chunk of trees
        values, weights, features, mask = args
        player_masks, player_features, depth_players = players(features, mask, depth)
        if kind == "shapley_hybrid":
            q = hybrid_expectations(values, weights, depth)
        else:
            q = path(values, weights, depth)
        if kind == "saabas":
            table = jax.vmap(saabas_table, (0, 0, None))(q, depth_players, depth)
        elif kind == "interaction_path":
            table = interaction_table(coalitions(q, player_masks, depth), depth)
        else:
            table = per_leaf(coalitions(q, player_masks, depth), shapley_weights(depth))
        return table, player_features

    pattern = 4**depth if kind == "shapley_hybrid" else 3**depth
    coalition_size = (1 << 2 * depth) * (1 + depth if kind == "interaction_path" else 1)
    chunk = int(min(ens.n_trees, max(1, tuning.table_floats // (ens.n_outputs * (pattern + coalition_size)))))
    n_chunks = -(-ens.n_trees // chunk)
    pad = n_chunks * chunk - ens.n_trees

    def chunked(a, fill):
        a = jnp.concatenate([a, jnp.full((pad,) + a.shape[1:], fill, a.dtype)])
        return a.reshape((n_chunks, chunk) + a.shape[1:])

    args = (chunked(ens.leaf_values, 0), chunked(dist, 1), chunked(ens.split_players, 0),
            chunked(ens.split_mask, False))
    table, slot_features = jax.lax.map(chunk_tables, args)
    table = table.reshape((-1,) + table.shape[2:])[: ens.n_trees]
    return ens.scale * table, slot_features.reshape(-1, depth)[: ens.n_trees]
