"""SHAP values of :class:`TreeEnsemble` models: a path decomposition with per-leaf tables.

A tree's value function is a sum over its leaves of *product games* (the decomposition of
GPUTreeShap, Mitchell et al. 2022). Leaf ``l`` holds value ``v_l`` at the end of a path whose
edges read features; the path's *players* are its distinct features (a feature read at several
edges is one player). For a row ``x``, ``o_j(x) = 1`` when ``x`` takes every edge of player
``j`` (else 0) and ``z_j`` is the product of the edges' cover ratios ``cover(child) /
cover(node)`` (0.5 at a node of zero cover, as in ``jaximp._shap_tables``). Then

* path-dependent (Lundberg et al. 2020, Algorithm 1; CatBoost ``Regular``, shap
  ``tree_path_dependent``): ``v_l(S) = v_l prod_{j in S} o_j(x) prod_{j not in S} z_j``;
* interventional over a background ``b`` (shap ``interventional``):
  ``v_l(S) = mean_b v_l prod_{j in S} o_j(x) prod_{j not in S} o_j(b)``;

and a tree's SHAP values are the sum over its leaves of the Shapley values of these games. With
``U`` the players where ``o_j(x) = 1``, ``m`` the path's players, ``w_m(s) = s! (m-s-1)! / m!``,
``Z0 = prod_{j not in U} z_j`` and ``Phi_l[U] = sum_{S subset U} w_m(|S|) prod_{j in U \\ S} z_j``:

    phi_j = v_l Z0 (1 - z_j) Phi_l[U - j]   if o_j = 1,      phi_j = -v_l Z0 Phi_l[U]   if o_j = 0

(no division, so zero covers are safe). ``Phi_l`` is a per-leaf table over the ``2**D`` subsets of
the path's slots, built once per model; a row costs O(L D) per tree: its pattern ``U`` at every
leaf, ``D + 1`` lookups and a scatter onto features. The interventional game's value depends on
a background row only through its pattern at the leaf, so a per-leaf background histogram gives
a table ``T_l[U, j]`` (``4**D`` work per leaf, small trees only). Saabas (``approximate``) credits
each edge of the row's own path with the change of the cover-weighted mean value.

Deep trees (paths longer than the tables allow) use the same games without tables. With
``f_j(t) = z_j + (o_j - z_j) t`` and ``w_m(s) = integral_0^1 t^s (1 - t)^(m-s-1) dt``,

    phi_j = v_l (o_j - z_j) integral_0^1 prod_{k != j} f_k(t) dt

(and ``Phi_ij = v_l (o_i - z_i)(o_j - z_j) / 2 integral prod_{k != i, j} f_k`` for interactions),
a polynomial of degree below ``D`` integrated exactly by Gauss-Legendre quadrature on
``ceil(D / 2)`` nodes: O(L D^2) per row and tree, no ``2**D`` memory. The interventional game
over one background row is the same game with ``z_j = o_j(b)``; its Shapley values depend only
on the counts of slots the row takes and the background row misses (``A``) and conversely
(``B``), so the background is summed by matrix products over slots (O(L D B) per row and tree).

Slots: entry ``k`` of a leaf's path is its ancestor at depth ``k`` (root first), slot ``k``; a
slot is a player when no shallower entry reads the same feature, else a null player. A node's
slot is thus the same for every leaf below it, so a row's patterns are built once per node, not
per leaf and depth: each edge the row misses sets its player's bit, and every node ORs in the
bits of its ancestors by pointer jumping (``log2 D`` gathers over the nodes instead of ``D`` over
the leaves; :class:`Edges`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._batching import map_blocks, map_rows, mean_abs_rows, resolve_devices, row_blocks, sum_rows
from jaximp._model import squeeze_outputs
from jaximp._shap_tables import interaction_weights, shapley_weights
from jaximp._tree_importance import subtree_sums
from jaximp._tree_leaves import leaves_of, tree_leaf_histogram
from jaximp._tree_model import TreeEnsemble, check_tree_ensemble, leaf_paths, parents, to_features

METHODS = ("path_dependent", "approximate", "interventional")
MAX_TABLE_DEPTH = 12  # path tables hold 2**D floats per leaf; deeper trees use quadrature
MAX_PAIR_DEPTH = 8  # interventional and interaction tables cost 4**D per leaf; deeper: no tables
_BIT_DEPTH = 30  # row patterns are int32 bit masks of the D slots
_BACKGROUND_BLOCK = 256  # background rows per step of the deep interventional kernel
_CHUNK_FLOATS = 1 << 21  # per-step budget of [trees, L, D, rows] intermediates: a CPU cache's share
# Elsewhere steps are bounded by memory, not caches: a larger budget and wider row steps (a bound
# chosen without a GPU to measure on; GPU timings belong in scripts/BENCHMARKS.md)
_ACCELERATOR_CHUNK_FLOATS = 1 << 26
_ACCELERATOR_STEP_ROWS = 4096


class Paths(NamedTuple):
    """Per-leaf path slots of every tree (a pytree; see the module docstring).

    Entry ``k`` is the leaf's ancestor at depth ``k`` (root first).

    Attributes:
        nodes: ``i32[T, L, D]`` internal node of each slot's edge.
        right: ``bool[T, L, D]`` the path goes right there.
        slot: ``i32[T, L, D]`` the slot of the player the edge belongs to.
        player: ``bool[T, L, D]`` slot is a player (a real edge, first of its player).
        feature: ``i32[T, L, D]`` the slot's player (``TreeEnsemble.node_players``: its feature
            for numeric models, its combination class with categorical features; 0 for null slots).
        z: ``f32[T, L, D]`` the player's cover ratio product (1 for null slots).
        ratio: ``f32[T, L, D]`` each edge's cover ratio (1 past the leaf).
        mask: ``bool[T, L, D]`` the entry is a real edge.
    """

    nodes: Array
    right: Array
    slot: Array
    player: Array
    feature: Array
    z: Array
    ratio: Array
    mask: Array


def _safe_div(num: Array, den: Array, fill: float) -> Array:
    ok = den > 0
    return jnp.where(ok, num / jnp.where(ok, den, 1.0), fill)


def tree_paths(ens: TreeEnsemble, leaf_weights: Array) -> Paths:
    """The :class:`Paths` of ``ens`` with covers from ``leaf_weights f32[T, L]``."""
    nodes, right, mask = leaf_paths(ens)
    t, l, d = nodes.shape
    cover, _ = subtree_sums(ens, leaf_weights)  # [T, M]
    rows = jnp.arange(t)[:, None, None]
    node_cover = cover[rows, nodes]
    child_cover = jnp.concatenate([leaf_weights[:, :, None], node_cover[:, :, :-1]], axis=2)
    ratio = jnp.where(mask, _safe_div(child_cover, node_cover, 0.5), 1.0)
    feature = jnp.where(mask, ens.node_players[rows, nodes], -1)  # players: combination classes
    nodes, right, mask, ratio, feature = _root_first(mask, nodes, right, mask, ratio, feature)
    ratio, feature = jnp.where(mask, ratio, 1.0), jnp.where(mask, feature, -1)
    same = (feature[..., :, None] == feature[..., None, :]) & mask[..., :, None]  # [T, L, e, e']
    slot = jnp.argmax(same, axis=-1).astype(jnp.int32)  # first entry with the same feature
    player = mask & (slot == jnp.arange(d))
    z = jnp.prod(jnp.where(same & mask[..., None, :], ratio[..., None, :], 1.0), axis=-1)
    return Paths(nodes, right, slot, player, jnp.where(player, feature, 0), jnp.where(player, z, 1.0),
                 ratio, mask)


def _root_first(mask: Array, *entries: Array) -> tuple[Array, ...]:
    """Reorder ``[T, L, D]`` path entries listed from the leaf up to root first (entry ``k`` at
    depth ``k``); entries past the leaf come out as ``mask``-False copies of the root's."""
    d = mask.shape[-1]
    length = jnp.sum(mask, axis=-1, keepdims=True)  # the leaf's depth
    index = jnp.clip(length - 1 - jnp.arange(d), 0, max(d - 1, 0))
    real = jnp.arange(d) < length
    out = [jnp.take_along_axis(a, index, axis=-1) for a in entries]
    return tuple(jnp.where(real, a, jnp.zeros_like(a)) if a.dtype == bool else a for a in out)


class Edges(NamedTuple):
    """What a row's patterns are built from, per tree (a pytree; see the module docstring).

    Attributes:
        parent: ``i32[T, M]`` the node above each internal node (0 at roots and padding).
        side: ``i32[T, M]`` 1 when the node is its parent's right child.
        bit: ``i32[T, M]`` ``1 << slot`` of the edge into the node (0 at roots and padding).
        jumps: ``i32[T, J, M]`` the ``2**j``-th ancestor of each node (clamped at node 0), with
            ``2**J >= D - 1``: J rounds of pointer jumping cover every internal node's path.
        leaf_parent, leaf_side, leaf_bit: ``i32[T, L]`` the same for the edge into each leaf.
    """

    parent: Array
    side: Array
    bit: Array
    jumps: Array
    leaf_parent: Array
    leaf_side: Array
    leaf_bit: Array


def tree_edges(ens: TreeEnsemble, paths: Paths) -> Edges:
    """The :class:`Edges` of ``ens``, with each node's slot read from ``paths``."""
    t, m = ens.n_trees, ens.n_nodes
    node_parent, node_side, leaf_parent, leaf_side = parents(ens)
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


def _gather_nodes(a: Array, index: Array) -> Array:
    """``a[c, n, b]`` at ``index i32[c, n']`` along axis 1 -> ``[c, n', b]``."""
    return jnp.take_along_axis(a, index[..., None], axis=1)


def patterns(edges: Edges, decisions: Array, depth: int) -> Array:
    """``i32[c, L, b]`` bit ``s`` set when player slot ``s`` has ``o_s = 1`` or is a null slot.

    ``decisions: bool[c, M, b]`` (``node_decisions``) for the same ``c`` trees as ``edges``.
    """
    missed = _gather_nodes(decisions, edges.parent) != (edges.side == 1)[..., None]
    fails = jnp.where(missed, edges.bit[..., None], 0)  # [c, M, b]: the edge into each node
    for j in range(edges.jumps.shape[1]):  # OR in the ancestors' bits, 2**j edges at a time
        fails = fails | _gather_nodes(fails, edges.jumps[:, j])
    missed = _gather_nodes(decisions, edges.leaf_parent) != (edges.leaf_side == 1)[..., None]
    fails = _gather_nodes(fails, edges.leaf_parent) | jnp.where(missed, edges.leaf_bit[..., None], 0)
    return ((1 << depth) - 1) & ~fails


# --------------------------------------------------------------------------------------------
# Tables


def _weights(d: int) -> np.ndarray:
    """``f32[D + 1, D]``: ``w_m(s) = s! (m - s - 1)! / m!`` at ``[m, s]`` (0 for ``s >= m``)."""
    out = np.zeros((d + 1, max(d, 1)))
    for m in range(1, d + 1):
        for s in range(m):
            out[m, s] = math.factorial(s) * math.factorial(m - s - 1) / math.factorial(m)
    return out.astype(np.float32)


def path_table(paths: Paths) -> Array:
    """``f32[T, L, 2**D]`` ``Phi_l[U] = sum_{S subset U} w_m(|S|) prod_{j in U \\ S} z_j``."""
    t, l, d = paths.z.shape
    # elementary symmetric polynomials of z over every subset U: e[U, i] = e_i(z_U)
    e = jnp.ones((t, l, 1, 1), jnp.float32)
    for s in range(d):
        e = _extend(e, paths.z[:, :, s, None, None])
    size = jnp.asarray([bin(u).count("1") for u in range(1 << d)], jnp.int32)  # |U|
    m = jnp.sum(paths.player, axis=-1)  # [T, L]
    w = jnp.asarray(_weights(d))[m]  # [T, L, D]: w_m(s)
    # Phi[U] = sum_s w_m(s) e_{|U| - s}(z_U)
    idx = size[:, None] - jnp.arange(max(d, 1))[None, :]  # [2**D, D]
    gathered = jnp.take_along_axis(e, jnp.clip(idx, 0, d)[None, None], axis=3)
    return jnp.sum(jnp.where(idx >= 0, gathered, 0.0) * w[:, :, None, :], axis=-1)


def _extend(e: Array, z: Array) -> Array:
    """Add one slot to the subset axis: ``[.., 2**s, s + 1] -> [.., 2**(s + 1), s + 2]``;
    subsets with the new slot multiply the polynomial by ``(1 + z t)``."""
    pad = [(0, 0)] * (e.ndim - 1)
    without = jnp.pad(e, pad + [(0, 1)])
    with_ = without + jnp.pad(e, pad + [(1, 0)]) * z
    return jnp.concatenate([without, with_], axis=-2)


def _pair_game_weights(d: int) -> np.ndarray:
    """``f32[2**D, 2**D, D]`` Shapley value of slot ``s`` in the game
    ``v(S) = prod_{j in S} p_j prod_{j not in S} q_j`` for 0/1 patterns ``p`` (row), ``q``
    (background row): with ``A = p - q``, ``B = q - p``, nonzero only when every slot is in p or
    q: ``(|A|-1)! |B|! / (|A|+|B|)!`` on A, ``-|A|! (|B|-1)! / (|A|+|B|)!`` on B."""
    full = (1 << d) - 1
    p = np.arange(1 << d)[:, None]
    q = np.arange(1 << d)[None, :]
    pop = np.vectorize(lambda u: bin(int(u)).count("1"))
    a_set, b_set = p & ~q & full, q & ~p & full
    a, b = pop(a_set), pop(b_set)
    valid = ((~p & ~q & full) == 0) & (a + b > 0)
    fact = np.vectorize(math.factorial)
    n = np.maximum(a + b, 1)
    plus = np.where(valid & (a > 0), fact(np.maximum(a - 1, 0)) * fact(b) / fact(n), 0.0)
    minus = np.where(valid & (b > 0), fact(a) * fact(np.maximum(b - 1, 0)) / fact(n), 0.0)
    bits = 1 << np.arange(d)
    in_a = (a_set[..., None] & bits) > 0
    in_b = (b_set[..., None] & bits) > 0
    return np.where(in_a, plus[..., None], 0.0) - np.where(in_b, minus[..., None], 0.0)


def interaction_path_table(paths: Paths) -> Array:
    """``f32[T, L, 2**D, D, D]`` SHAP interaction values of each leaf's path-dependent game per
    pattern (unit leaf value); the diagonal is the main effect ``phi_i - sum_{j != i} Phi_ij``."""
    t, l, d = paths.z.shape
    subsets = np.arange(1 << d)
    member = jnp.asarray((subsets[:, None] >> np.arange(d)) & 1, bool)  # [2**D, D]
    fixed = member[:, None, :]  # pattern p: [P, 1, D]
    coalition = member[None, :, :]  # S: [1, S, D]
    z = paths.z[:, :, None, None, :]
    v = jnp.prod(jnp.where(coalition, fixed.astype(jnp.float32), z), axis=-1)  # [T, L, P, S]
    coef = np.concatenate([shapley_weights(d)[:, :, None], interaction_weights(d)], axis=2)  # [S, D, 1+D]
    both = jnp.einsum("tlps,sij->tlpij", v, jnp.asarray(coef))
    phi, pairs = both[..., 0], both[..., 1:]
    main = phi - jnp.sum(pairs, axis=-1)
    return jnp.where(jnp.eye(d, dtype=bool), main[..., None], pairs)





# --------------------------------------------------------------------------------------------
# Deep trees: the path games integrated by quadrature (see the module docstring)


def _quadrature(d: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on ``[0, 1]``, exact for polynomials of degree < ``d``."""
    t, w = np.polynomial.legendre.leggauss(max(1, -(-d // 2)))
    return ((t + 1) / 2).astype(np.float32), (w / 2).astype(np.float32)


def slot_taken(chunk: Plan, decisions: Array) -> Array:
    """``f32[c, L, D, b]`` 1 where a row takes every edge of a player slot's feature (0 at null
    slots), from ``decisions: bool[c, M, b]`` (``node_decisions``) for the same ``c`` trees: the
    bits of its :func:`patterns` where they fit an int32, else a count over the path's edges."""
    paths = chunk.paths
    c, l, d = paths.nodes.shape
    if chunk.edges is not None:
        u = patterns(chunk.edges, decisions, d)  # [c, L, b]
        on = (u[:, :, None, :] >> jnp.arange(d, dtype=jnp.int32)[:, None]) & 1
        return jnp.where(paths.player[..., None], on.astype(jnp.float32), 0.0)
    right = _gather_nodes(decisions, paths.nodes.reshape(c, l * d)).reshape(c, l, d, -1)
    missed = (right != paths.right[..., None]) & paths.mask[..., None]  # [c, L, e, b]: leaves the path
    owner = (paths.slot[..., :, None] == jnp.arange(d)) & paths.mask[..., :, None]  # [c, L, e, s]
    misses = jnp.einsum("cleb,cles->clsb", missed.astype(jnp.float32), owner.astype(jnp.float32))
    return jnp.where(paths.player[..., None] & (misses == 0), 1.0, 0.0)


def _leave_one_out(f: Array) -> Array:
    """``prod_{k != j} f[:, :, k]`` at every ``j`` of axis 2 (prefix times suffix products, no
    division; unrolled over the few slots, which XLA fuses)."""
    d = f.shape[2]
    before, after = [jnp.ones_like(f[:, :, 0])], [jnp.ones_like(f[:, :, 0])]
    for k in range(d - 1):
        before.append(before[-1] * f[:, :, k])
        after.append(after[-1] * f[:, :, d - 1 - k])
    return jnp.stack(before, axis=2) * jnp.stack(after[::-1], axis=2)


def _deep_path_phi(chunk: Plan, xt: Array, n_evaluated: int, pairs: bool) -> Array:
    """``f32[E(, E), K, b]`` path-dependent SHAP (interaction) values of a chunk of trees for rows
    ``xt f32[E, b]``, by quadrature of each leaf's path polynomial."""
    paths = chunk.paths
    player = paths.player[..., None, None]
    z = paths.z[..., None, None]
    taken = slot_taken(chunk, _decisions(chunk, xt))[:, :, :, None]  # [c, L, D, 1, b]
    slope = jnp.where(player, taken - z, 0.0)  # o_j - z_j
    t, w = (jnp.asarray(a) for a in _quadrature(min(paths.z.shape[-1], n_evaluated)))  # degree < players
    f = jnp.where(player, z + slope * t[:, None], 1.0)  # [c, L, D, Q, b]
    others = _leave_one_out(f)
    phi = slope[:, :, :, 0] * jnp.einsum("cldqb,q->cldb", others, w)  # [c, L, D, b]
    if not pairs:
        out = phi[:, :, :, None, :] * chunk.values[:, :, None, :, None]  # [c, L, D, K, b]
        return _scatter(out, paths.feature, n_evaluated)
    # prod_{k != i, j} f_k = others_i / f_j; f_j = 0 only where slope_j = 0
    inverse = jnp.where(f != 0, 1.0 / jnp.where(f != 0, f, 1.0), 0.0)
    pair = jnp.einsum("cliqb,cljqb,q->clijb", others, inverse, w)  # [c, L, D, D, b]
    d = paths.z.shape[-1]
    off = ~jnp.eye(d, dtype=bool)[:, :, None]
    slope = slope[:, :, :, 0]
    pair = jnp.where(off, 0.5 * slope[:, :, :, None] * slope[:, :, None] * pair, 0.0)
    both = jnp.where(off, pair, (phi - jnp.sum(pair, axis=3))[:, :, :, None])  # main effect on the diagonal
    out = both[:, :, :, :, None, :] * chunk.values[:, :, None, None, :, None]  # [c, L, D, D, K, b]
    return _scatter_pairs(out, paths.feature, n_evaluated)


def _count_weights(d: int) -> np.ndarray:
    """``f32[2, D + 1, D + 1]`` the Shapley value of a slot in ``A`` (index 0: ``(a-1)! b! /
    (a+b)!``) and minus that of a slot in ``B`` (index 1: ``a! (b-1)! / (a+b)!``), for
    ``|A| = a``, ``|B| = b`` (see :func:`_pair_game_weights`)."""
    a = np.arange(d + 1)[:, None]
    b = np.arange(d + 1)[None, :]
    lg = lambda n: np.vectorize(math.lgamma)(np.maximum(n, 1) + 0.0)  # noqa: E731
    plus = np.where(a > 0, np.exp(lg(a) + lg(b + 1) - lg(a + b + 1)), 0.0)
    minus = np.where(b > 0, np.exp(lg(a + 1) + lg(b) - lg(a + b + 1)), 0.0)
    return np.stack([plus, minus]).astype(np.float32)


def _deep_interventional_phi(chunk: Plan, xt: Array, background: tuple[Array, Array],
                             n_evaluated: int) -> Array:
    """``f32[E, K, b]`` interventional SHAP values of a chunk of trees for rows ``xt f32[E, b]``
    over background blocks ``(f32[nB, Bc, E], weights f32[nB, Bc])`` (weights sum to 1)."""
    paths = chunk.paths
    d = paths.z.shape[-1]
    table = jnp.asarray(_count_weights(d))
    taken = slot_taken(chunk, _decisions(chunk, xt))  # [c, L, D, b]
    n_taken = jnp.sum(taken, axis=2)  # [c, L, b]
    players = jnp.sum(paths.player, axis=-1)[..., None, None]  # [c, L, 1, 1]

    def step(acc, block):
        rows, weight = block
        other = slot_taken(chunk, _decisions(chunk, rows.T))  # [c, L, D, B]
        both = jnp.einsum("clsb,clsr->clbr", taken, other)
        a = jnp.rint(n_taken[..., None] - both).astype(jnp.int32)  # [c, L, b, B]
        b = jnp.rint(jnp.sum(other, axis=2)[:, :, None, :] - both).astype(jnp.int32)
        alive = (players - a - b - jnp.rint(both).astype(jnp.int32)) == 0  # no slot missed by both
        plus = jnp.where(alive, table[0][a, b], 0.0) * weight
        minus = jnp.where(alive, table[1][a, b], 0.0) * weight
        on_a = jnp.sum(plus, axis=-1)[:, :, None] - jnp.einsum("clbr,clsr->clsb", plus, other)
        on_b = jnp.einsum("clbr,clsr->clsb", minus, other)
        return acc + taken * on_a - (1.0 - taken) * on_b, None

    phi, _ = jax.lax.scan(step, jnp.zeros_like(taken), background)  # [c, L, D, b]
    out = phi[:, :, :, None, :] * chunk.values[:, :, None, :, None]
    return _scatter(out, paths.feature, n_evaluated)


# --------------------------------------------------------------------------------------------
# Plans: per-tree arrays cut in chunks of trees, the unit of a row kernel's inner loop


class Plan(NamedTuple):
    """Everything a row kernel reads, per tree, chunked ``[n_chunks, c, ...]`` (a pytree)."""

    node_features: Array
    node_borders: Array
    node_nan_right: Array
    paths: Paths
    edges: Edges
    values: Array  # f32[.., L, K] scaled leaf values
    table: Array  # method-specific per-leaf table


def _chunk_trees(tree: Any, n_trees: int, chunk: int) -> Any:
    n_chunks = -(-n_trees // chunk)
    pad = n_chunks * chunk - n_trees

    def cut(a):
        a = jnp.concatenate([a, jnp.zeros((pad,) + a.shape[1:], a.dtype)])
        return a.reshape((n_chunks, chunk) + a.shape[1:])

    return jax.tree_util.tree_map(cut, tree)


def _rows_per_step(ens: TreeEnsemble, width: int, block: int, floor: int = 64,
                   budget: int = _CHUNK_FLOATS) -> tuple[int, int]:
    """(rows per inner step, trees per chunk) keeping ``c * L * width * rows`` within ``budget``
    floats; rows halve down to ``floor``."""
    rows = block
    while rows > floor and rows % 2 == 0 and ens.n_leaves * width * rows > budget:
        rows //= 2
    return rows, int(max(1, min(ens.n_trees, budget // (ens.n_leaves * width * rows))))


def _make_plan(ens: TreeEnsemble, paths: Paths, table: Array | None, chunk: int) -> Plan:
    """The chunked plan; ``table`` is None for deep trees, and the edges of the rows' bit
    patterns are None for trees deeper than an int32 holds."""
    edges = tree_edges(ens, paths) if ens.depth <= _BIT_DEPTH else None
    tree = Plan(ens.node_features, ens.node_borders, ens.node_nan_right, paths, edges,
                ens.scale * ens.leaf_values, table)
    return _chunk_trees(tree, ens.n_trees, chunk)


def _decisions(plan_chunk: Plan, xt: Array) -> Array:
    values = xt[plan_chunk.node_features]  # [c, M, b]
    right = values > plan_chunk.node_borders[..., None]
    return right | (jnp.isnan(values) & plan_chunk.node_nan_right[..., None])


def _scatter(values: Array, features: Array, n_segments: int) -> Array:
    """``[c, L, S, ..., b]`` summed into ``[n_segments, ..., b]`` by ``features [c, L, S]``."""
    flat = values.reshape((-1,) + values.shape[3:])
    return jax.ops.segment_sum(flat, features.reshape(-1), n_segments)


def _path_phi(chunk: Plan, xt: Array, n_evaluated: int) -> Array:
    """``f32[E, K, b]`` path-dependent SHAP values of a chunk of trees for rows ``xt f32[E, b]``."""
    paths, d = chunk.paths, chunk.paths.z.shape[-1]
    u = patterns(chunk.edges, _decisions(chunk, xt), paths.z.shape[-1])  # [c, L, b]
    bits = 1 << jnp.arange(d, dtype=jnp.int32)
    player_bits = jnp.sum(jnp.where(paths.player, bits, 0), axis=-1)  # [c, L]
    u = u & player_bits[..., None]
    on = ((u[:, :, None, :] >> jnp.arange(d)[None, None, :, None]) & 1) == 1  # [c, L, D, b]
    z = paths.z[..., None]
    z0 = jnp.prod(jnp.where(on, 1.0, z), axis=2)  # [c, L, b]: null slots have z = 1
    c, l, size = chunk.table.shape
    base = (jnp.arange(c * l, dtype=jnp.int32) * size).reshape(c, l, 1)
    flat = chunk.table.reshape(-1)
    g0 = flat[base + u]  # [c, L, b]
    cleared = u[:, :, None, :] & ~bits[None, None, :, None]  # U - s for every slot s
    gs = flat[base[:, :, None, :] + cleared]  # [c, L, D, b]
    slot = jnp.where(on, (1.0 - z) * gs, -g0[:, :, None, :]) * z0[:, :, None, :]
    slot = jnp.where(paths.player[..., None], slot, 0.0)
    phi = slot[:, :, :, None, :] * chunk.values[:, :, None, :, None]  # [c, L, D, K, b]
    return _scatter(phi, paths.feature, n_evaluated)


def _table_phi(chunk: Plan, xt: Array, n_evaluated: int, pairs: bool) -> Array:
    """``f32[E(, E), K, b]`` from a per-pattern table ``[c, L, 2**D, D(, D), K]``."""
    paths = chunk.paths
    u = patterns(chunk.edges, _decisions(chunk, xt), paths.z.shape[-1])  # [c, L, b]
    gathered = jnp.take_along_axis(
        chunk.table, u.reshape(u.shape + (1,) * (chunk.table.ndim - 3)), axis=2)  # [c, L, b, ...]
    gathered = jnp.moveaxis(gathered, 2, -1)  # [c, L, D(, D), K, b]
    if not pairs:
        return _scatter(gathered, paths.feature, n_evaluated)
    return _scatter_pairs(gathered, paths.feature, n_evaluated)


def _scatter_pairs(values: Array, features: Array, n_segments: int) -> Array:
    """``[c, L, S, S, ..., b]`` summed into ``[n_segments, n_segments, ..., b]`` by the slot pairs'
    ``features [c, L, S]``."""
    c, l, d = features.shape
    pair = features[..., :, None] * n_segments + features[..., None, :]  # [c, L, S, S]
    flat = values.reshape((c, l, d * d) + values.shape[4:])
    out = _scatter(flat, pair.reshape(c, l, d * d), n_segments * n_segments)
    return out.reshape((n_segments, n_segments) + out.shape[1:])


KINDS = ("path", "table", "pairs", "deep_path", "deep_pairs", "deep_interventional")


def _shap_kernel(params: tuple, x: Array, *, block: int, kind: str, step_rows: int,
                 per_player: bool = False) -> Array:
    """Per-row SHAP (interaction) values ``f32[n, F(, F), K]`` of ``params = (ens, plan)``, or
    ``(ens, plan, background blocks)`` for ``kind="deep_interventional"`` (``f32[n, P, K]`` per
    player with ``per_player``, for SHAP values: what LossFunctionChange removes)."""
    ens, plan, *background = params
    e = ens.n_players
    pairs = kind in ("pairs", "deep_pairs")

    def block_fn(xb):
        xt = xb.T  # [E, b]

        def step(acc, chunk):
            if kind == "path":
                return acc + _path_phi(chunk, xt, e), None
            if kind in ("deep_path", "deep_pairs"):
                return acc + _deep_path_phi(chunk, xt, e, pairs=pairs), None
            if kind == "deep_interventional":
                return acc + _deep_interventional_phi(chunk, xt, background[0], e), None
            return acc + _table_phi(chunk, xt, e, pairs=pairs), None

        shape = (e, e) if pairs else (e,)
        dtype = jnp.result_type(plan.values, plan.paths.z)  # float64 models (jax_enable_x64) stay so
        acc = jnp.zeros(shape + (ens.n_outputs, xb.shape[0]), dtype)
        acc, _ = jax.lax.scan(step, acc, plan)
        out = jnp.moveaxis(acc, -1, 0)  # [b, P(, P), K]
        if per_player:
            return out
        out = to_features(ens, out, axis=1)
        return to_features(ens, out, axis=2) if pairs else out

    return map_blocks(block_fn, x, step_rows)




# --------------------------------------------------------------------------------------------
# Background histograms (interventional)


def _pattern_histogram_kernel(params: tuple[TreeEnsemble, Plan], rows: tuple[Array, Array], *,
                              block: int) -> Array:
    """``f32[n_chunks, c, L, 2**D]`` weight of the rows ``(x, weight)`` per leaf pattern."""
    ens, plan = params
    x, weight = rows
    size = 1 << ens.depth

    def block_fn(args):
        xb, wb = args

        def chunk_fn(chunk):
            u = patterns(chunk.edges, _decisions(chunk, xb.T), ens.depth)  # [c, L, b]
            c, l, _ = u.shape
            index = (jnp.arange(c * l, dtype=jnp.int32).reshape(c, l, 1) * size + u).reshape(-1)
            counts = jnp.broadcast_to(wb, u.shape).reshape(-1)
            return jax.ops.segment_sum(counts, index, c * l * size).reshape(c, l, size)

        return jax.lax.map(chunk_fn, plan)

    return jax.lax.map(block_fn, (row_blocks(x, block), row_blocks(weight, block))).sum(0)


# --------------------------------------------------------------------------------------------
# Public kernels


def _check(ens: Any, method: Any, background: Any, fn_name: str) -> None:
    check_tree_ensemble(ens, fn_name)
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"{fn_name}: method must be one of {', '.join(map(repr, METHODS))} for a "
                         f"TreeEnsemble; got {method!r}")
    if (method == "interventional") != (background is not None):
        raise ValueError(f"{fn_name}: background must be given exactly with method='interventional'; "
                         f"got method={method!r} and background={'None' if background is None else 'rows'}")


def _training_weights(ens: TreeEnsemble, fn_name: str, x: Any = None, *, batch_size: int | None = None,
                      devices: Any = None) -> Array:
    """``f32[T, L]`` the leaf weights of the path-dependent methods: the model's training leaf
    weights or, for a model file that carries none, the leaf counts of the checked rows ``x``
    being explained, as CatBoost counts them then (``InitLeafWeights`` ->
    ``CollectLeavesStatistics``, catboost/libs/fstr/shap_prepared_trees.cpp, util.cpp).

    Raises:
        ValueError: the model carries no leaf weights and no rows are given.
    """
    if ens.leaf_weights_known:
        return ens.leaf_weights
    if x is None:
        raise ValueError(f"{fn_name}: the model file carries no leaf weights, which CatBoost then counts "
                         "on the rows being explained; pass those rows (jaximp.shap_values(ens, X)) or "
                         "use a model exported with its leaf weights")
    return tree_leaf_histogram(ens, x, np.ones(x.shape[0], np.float32), batch_size=batch_size,
                               devices=devices, fn_name=fn_name)


def covered(ens: TreeEnsemble, weights: Array) -> TreeEnsemble:
    """``ens`` with ``leaf_weights = weights f32[T, L]`` and the values of the leaves of
    negligible weight set to 0.

    CatBoost's path-dependent recursion over non-symmetric trees
    (``CalcNonObliviousInternalShapValuesForLeafRecursive``, catboost/libs/fstr/shap_values.cpp)
    never enters a child whose subtree weight is ``FuzzyEquals(1 + w, 1)``, hot or cold, so such
    leaves take no part in SHAP values or interactions. Trained weights rarely have them (and
    their leaves are 0 then); weights counted on explained rows often do. Zeroing their values
    drops exactly those leaves from the per-leaf tables, whose terms are linear in the value.
    """
    negligible = jnp.abs(weights) <= 1e-13 * jnp.minimum(jnp.abs(1.0 + weights), 1.0)
    values = jnp.where(negligible[..., None], 0.0, ens.leaf_values).astype(ens.leaf_values.dtype)
    weights = jnp.asarray(weights, jnp.result_type(float, weights))  # float64 weights stay float64
    return dataclasses.replace(ens, leaf_weights=weights, leaf_values=values)


@functools.partial(jax.jit, static_argnames=("chunk", "tables"))
def _path_plan(ens: TreeEnsemble, weights: Array, *, chunk: int, tables: bool = True) -> Plan:
    paths = tree_paths(ens, weights)
    return _make_plan(ens, paths, path_table(paths) if tables else None, chunk)


@functools.partial(jax.jit, static_argnames=("chunk",))
def _interventional_plan(ens: TreeEnsemble, plan: Plan, histogram: Array, *, chunk: int) -> Plan:
    d = ens.depth
    # every background row has one pattern at every leaf: each leaf's histogram sums to B
    total = jnp.sum(histogram, axis=-1, keepdims=True)
    dist = _safe_div(histogram, total, 0.0)
    game = jnp.asarray(_pair_game_weights(d), jnp.float32)  # [P, Q, D]
    table = jnp.einsum("nclq,pqs,nclk->nclpsk", dist, game, plan.values)
    return plan._replace(table=table)


@functools.partial(jax.jit, static_argnames=("chunk",))
def _interaction_plan(ens: TreeEnsemble, weights: Array, *, chunk: int) -> Plan:
    paths = tree_paths(ens, weights)
    table = interaction_path_table(paths)[..., None] * (ens.scale * ens.leaf_values)[:, :, None, None, None, :]
    return _make_plan(ens, paths, table, chunk)


def _table_width(ens: TreeEnsemble, kind: str) -> int:
    """Floats per leaf and row that a step of ``kind`` holds."""
    d, k = max(ens.depth, 1), ens.n_outputs
    return {"path": d * k + 2 * d, "table": d * k + d, "pairs": d * d * k + d,
            "deep_path": d * k + 6 * d, "deep_pairs": d * d * (k + 3) + 6 * d,
            "deep_interventional": d * k + 3 * min(_BACKGROUND_BLOCK, 64) + 6 * d}[kind]


def _step(ens: TreeEnsemble, kind: str, platform: str = "cpu") -> tuple[int, int]:
    """(rows per inner step, trees per chunk) of ``kind`` on ``platform``: cache-sized on CPU."""
    floor = 8 if kind.startswith("deep") else 64
    if platform == "cpu":
        return _rows_per_step(ens, _table_width(ens, kind), 256, floor=floor)
    return _rows_per_step(ens, _table_width(ens, kind), _ACCELERATOR_STEP_ROWS, floor=floor,
                          budget=_ACCELERATOR_CHUNK_FLOATS)


def _platform(devices: Any, x: Any, fn_name: str) -> str:
    """The platform the rows ``x`` will be explained on (``devices=``, else the rows' device)."""
    if devices is None and isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer):
        devices = list(x.devices())
    return resolve_devices(devices, fn_name)[0].platform


def _background_blocks(background: np.ndarray) -> tuple[Array, Array]:
    """``(f32[nB, Bc, E], f32[nB, Bc])`` background rows in blocks, weights ``1 / B`` (0 on padding)."""
    b = len(background)
    size = min(_BACKGROUND_BLOCK, b)
    n_blocks = -(-b // size)
    rows = jnp.pad(jnp.asarray(background, jnp.float32), ((0, n_blocks * size - b), (0, 0)))  # traced rows too
    weights = jnp.pad(jnp.full(b, 1.0 / b, jnp.float32), (0, n_blocks * size - b))
    return rows.reshape(n_blocks, size, -1), weights.reshape(n_blocks, size)


def tree_shap_plan(ens: TreeEnsemble, method: str = "path_dependent", background: Any = None, *,
                   batch_size: int | None = None, devices: Any = None,
                   fn_name: str = "shap_values", x: Any = None) -> tuple[Plan, str, int]:
    """Per-leaf tables of ``ens`` for ``method``, computed once: ``(plan, kind, rows per step)``.

    ``background``: checked rows ``f32[B, E]`` for ``method="interventional"``. ``x``: the
    checked rows to be explained, whose leaf counts are the weights of a model file that carries
    none (see :func:`_training_weights`).
    """
    _check(ens, method, background, fn_name)
    if method == "approximate":  # the plan is the leaf weights of the Saabas means
        return _training_weights(ens, fn_name, x, batch_size=batch_size, devices=devices), "saabas", 0
    platform = _platform(devices, x, fn_name)
    if method == "path_dependent":
        kind = "path" if ens.depth <= MAX_TABLE_DEPTH else "deep_path"
        rows, chunk = _step(ens, kind, platform)
        weights = _training_weights(ens, fn_name, x, batch_size=batch_size, devices=devices)
        return _path_plan(covered(ens, weights), weights, chunk=chunk, tables=kind == "path"), kind, rows
    if not isinstance(background, jax.Array):  # rows traced under jax.jit stay in JAX
        background = np.asarray(background, np.float32)
    if ens.depth > MAX_PAIR_DEPTH:
        rows, chunk = _step(ens, "deep_interventional", platform)
        plan = _path_plan(ens, ens.leaf_weights, chunk=chunk, tables=False)
        return (plan, _background_blocks(background)), "deep_interventional", rows
    kind = "table"
    rows, chunk = _step(ens, kind, platform)
    plan = _path_plan(ens, ens.leaf_weights, chunk=chunk)
    histogram = sum_rows(_pattern_histogram_kernel, (ens, plan), (background, np.ones(len(background), np.float32)),
                         batch_size=batch_size, devices=devices, fn_name=fn_name)
    return _interventional_plan(ens, plan, histogram, chunk=chunk), kind, rows


def _saabas_table(ens: TreeEnsemble) -> tuple[Array, Array]:
    """``(f32[T, L, D, K] change of the mean value at each edge of each leaf's path, i32[T, L, D]
    the edge's player)``."""
    nodes, _, mask = leaf_paths(ens)
    cover, total = subtree_sums(ens, ens.leaf_weights)
    mean = _safe_div(total, cover[..., None], 0.0)  # [T, M, K]
    rows = jnp.arange(ens.n_trees)[:, None, None]
    node_mean = mean[rows, nodes]  # [T, L, D, K]
    child_mean = jnp.concatenate([ens.leaf_values[:, :, None], node_mean[:, :, :-1]], axis=2)
    change = jnp.where(mask[..., None], child_mean - node_mean, 0.0) * ens.scale
    return change, jnp.where(mask, ens.node_players[rows, nodes], 0)


def _saabas_kernel(ens: TreeEnsemble, x: Array, *, block: int) -> Array:
    change, features = _saabas_table(ens)

    def block_fn(xb):
        leaves = leaves_of(ens, xb)  # [T, b]
        got = jnp.take_along_axis(change, leaves[:, :, None, None], axis=1)  # [T, b, D, K]
        feat = jnp.take_along_axis(features, leaves[:, :, None], axis=1)  # [T, b, D]
        rows = jnp.broadcast_to(jnp.arange(xb.shape[0])[None, :, None], feat.shape)
        out = jnp.zeros((xb.shape[0], ens.n_players, ens.n_outputs), change.dtype)
        out = out.at[rows.reshape(-1), feat.reshape(-1)].add(got.reshape(-1, ens.n_outputs))
        return to_features(ens, out, axis=1)

    return map_blocks(block_fn, x, min(block, 256))


def tree_shap_values(ens: TreeEnsemble, x: Any, *, method: str = "path_dependent", background: Any = None,
                     batch_size: int | None = None, devices: Any = None, progress: bool = True) -> Any:
    """SHAP values of checked rows ``x: f32[N, E]`` (see the module docstring for the methods).

    Args:
        ens: the model.
        x: ``f32[N, E]`` rows (``jaximp._inputs.as_features``).
        method: ``"path_dependent"`` (CatBoost ``Regular``, shap ``tree_path_dependent``),
            ``"approximate"`` (Saabas, CatBoost ``Approximate``) or ``"interventional"``.
        background: ``f32[B, E]`` checked rows, only with ``method="interventional"``.
        batch_size: rows per device step; None picks one for the device.
        devices: None, an int or a list of ``jax.Device`` to shard rows over.

    Returns:
        ``f32[N, F]`` when K == 1, else ``f32[N, F, K]``; rows sum to the prediction minus
        :func:`tree_expected_value`.

    Raises:
        TypeError, ValueError: a bad model, method, background or a model too deep for tables.

    Example:
        >>> tree_shap_values(ens, x)  # doctest: +SKIP
    """
    plan = tree_shap_plan(ens, method, background, batch_size=batch_size, devices=devices, x=x)
    return tree_shap_values_from_plan(ens, x, plan, batch_size=batch_size, devices=devices, progress=progress)


def _row_kernel(ens: TreeEnsemble, plan: tuple) -> tuple[Any, Any, dict]:
    """``(kernel, params, static)`` computing a plan's per-row values ``[n, F(, F), K]``."""
    plan, kind, rows = plan
    if kind == "saabas":
        return _saabas_kernel, dataclasses.replace(ens, leaf_weights=plan), {}
    params = (ens,) + plan if kind == "deep_interventional" else (ens, plan)
    return _shap_kernel, params, dict(kind=kind, step_rows=rows)


def tree_shap_values_from_plan(ens: TreeEnsemble, x: Any, plan: tuple, *, batch_size: int | None = None,
                               devices: Any = None, reduce: bool = False, fn_name: str = "shap_values",
                               progress: bool = True) -> Any:
    """:func:`tree_shap_values` with the per-leaf tables of :func:`tree_shap_plan` built once
    (what ``jaximp.Explainer`` keeps), so that explaining more rows costs only the lookups.

    With ``reduce``, the mean over rows of the values' absolute value, ``f32[F(, F)]`` (K == 1)
    or ``f32[F(, F), K]``, summed step by step (``jaximp._batching.mean_abs_rows``)."""
    kernel, params, static = _row_kernel(ens, plan)
    width = ens.n_features * ens.n_outputs * (ens.n_features if plan[1].endswith("pairs") else 1)
    run = mean_abs_rows if reduce else map_rows
    out = run(kernel, params, x, batch_size=batch_size, devices=devices, fn_name=fn_name,
              row_floats=width, progress=progress, **static)
    return squeeze_outputs(out, ens.n_outputs)


def tree_expected_value(ens: TreeEnsemble, *, method: str = "path_dependent", background: Any = None,
                        batch_size: int | None = None, devices: Any = None, x: Any = None) -> Array:
    """The expected raw prediction: ``f32[]`` when K == 1, else ``f32[K]``.

    The training-weighted mean (``path_dependent``, ``approximate``; for a model file without
    leaf weights, the mean over the leaf counts of the explained rows ``x``) or the mean
    prediction over the background rows ``f32[B, E]`` (``interventional``), in raw score space.
    """
    _check(ens, method, background, "expected_value")
    if method == "interventional":
        from jaximp._tree_leaves import tree_predict

        rows = background if isinstance(background, jax.Array) else np.asarray(background, np.float32)
        predicted = tree_predict(ens, rows, batch_size=batch_size, devices=devices)
        if isinstance(predicted, jax.core.Tracer):  # under jax.grad, jit or vmap: stays in JAX
            return jnp.mean(predicted, axis=0)
        mean = np.asarray(predicted, np.float64).mean(0)
        return squeeze_outputs(jnp.asarray(np.atleast_1d(mean), jnp.float32), ens.n_outputs)
    weights = _training_weights(ens, "expected_value", x, batch_size=batch_size, devices=devices)
    total = jnp.sum(weights, axis=1, keepdims=True)
    mean = jnp.einsum("tl,tlk->k", _safe_div(weights, total, 0.0), ens.leaf_values)
    return squeeze_outputs(ens.scale * mean + ens.bias, ens.n_outputs)


def tree_shap_interaction_values(ens: TreeEnsemble, x: Any, *, batch_size: int | None = None,
                                 devices: Any = None, reduce: bool = False,
                                 fn_name: str = "shap_interaction_values", progress: bool = True) -> Any:
    """Path-dependent SHAP interaction values of checked rows ``x: f32[N, E]``.

    Returns:
        ``f32[N, F, F]`` when K == 1, else ``f32[N, F, F, K]``, symmetric; rows sum to the SHAP
        values (Lundberg et al. 2020, eq. 11-12). With ``reduce``, their mean absolute value over
        rows, ``f32[F, F(, K)]``.
    """
    check_tree_ensemble(ens, fn_name)
    weights = _training_weights(ens, fn_name, x, batch_size=batch_size, devices=devices)
    kind = "pairs" if ens.depth <= MAX_PAIR_DEPTH else "deep_pairs"
    rows, chunk = _step(ens, kind, _platform(devices, x, fn_name))
    if kind == "pairs":
        plan = _interaction_plan(covered(ens, weights), weights, chunk=chunk)
    else:
        plan = _path_plan(covered(ens, weights), weights, chunk=chunk, tables=False)
    return tree_shap_values_from_plan(ens, x, (plan, kind, rows), batch_size=batch_size,
                                      devices=devices, reduce=reduce, fn_name=fn_name, progress=progress)
