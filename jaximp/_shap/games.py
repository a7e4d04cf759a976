"""The Shapley values of the per-leaf path games of :class:`TreeEnsemble` models, for one
chunk of leaves of one bucket (see ``jaximp._shap.trees`` for the games, and
``jaximp._shap.paths`` for paths, patterns and buckets).

Two ways for a game: per-leaf tables over the ``2**d`` patterns of a bucket's ``d`` slots,
looked up by the row's pattern (shallow buckets of interactions and interventional values), and
quadrature of the game's polynomial (SHAP values of every depth, and deep buckets; no ``2**d``
memory).

Interventional tables. For a row pattern ``p`` and a background pattern ``q``, the game's
Shapley values are nonzero only when ``q`` holds every slot ``C = ~p`` the row misses; then the
row takes ``n_a = |p - q| = d - |q|`` slots the background row misses, and misses
``n_b = |q - p| = |C|`` slots the background row takes. Summing the background distribution
``dist`` over those ``q`` by size, ``H_k[X] = sum_{q >= X, |q| = k} dist[q]`` (superset sums,
O(2**d d**2) per leaf instead of the 4**d of pairing every p with every q; built by quadrature
in :func:`interventional_table`), gives

    phi_s = G+[C] - G+'[C + s]   for a slot s the row takes,     phi_s = -G-[C]   for s in C,

with ``G+[X] = sum_k H_k[X] w+(d - k, |X|)``, ``G+'[X] = sum_k H_k[X] w+(d - k, |X| - 1)``,
``G-[X] = sum_k H_k[X] w-(d - k, |X|)`` and ``w+(n_a, n_b) = (n_a-1)! n_b! / (n_a+n_b)!``,
``w-(n_a, n_b) = n_a! (n_b-1)! / (n_a+n_b)!``: three numbers per pattern, read at ``p`` and
``p - s``.

Shapes: the legend of :mod:`jaximp._models` (P players, K outputs), and a bucket's leaves as
``[groups, leaves, ...]``: ``groups`` chunks of ``leaves`` leaves each (a row kernel's chunk is
one group), ``d`` the bucket's depth (its slots), ``n`` the rows of a step and ``n_points =
ceil(d / 2)`` the nodes of the quadrature.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._shap.oblivious_tables import interaction_weights, shapley_weights
from jaximp._shap.paths import Paths


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Part:
    """One bucket's leaves in groups (a pytree): ``paths [groups, leaves, d]``, scaled leaf
    values ``f32[groups, leaves, K]``, the bucket's table (``f32[groups, leaves, 2**d, ...]``, or
    a dummy) and ``leaves i32[groups, leaves]``, where the leaves are among the model's
    (``jaximp._shap.layouts.bucket_leaves``). The games take any number of groups; a row kernel's
    chunk of leaves is one."""

    paths: Paths
    values: Array
    table: Array
    leaves: Array


def one_group(tree: Any) -> Any:
    """A chunk of a bucket's leaves ``[leaves, ...]`` (a :class:`Part`, or its ``Paths``) as the
    one group the games take, ``[1, leaves, ...]``."""
    return jax.tree_util.tree_map(lambda a: a[None], tree)


def scatter(values: Array, features: Array, n_segments: int) -> Array:
    """``[groups, leaves, slots, ..., n]`` summed into ``[n_segments, ..., n]`` by
    ``features i32[groups, leaves, slots]``."""
    flat = values.reshape((-1,) + values.shape[3:])
    return jax.ops.segment_sum(flat, features.reshape(-1), n_segments)


def scatter_pairs(values: Array, features: Array, n_segments: int) -> Array:
    """``[groups, leaves, slots, slots, ..., n]`` summed into ``[n_segments, n_segments, ..., n]``
    by the slot pairs' ``features i32[groups, leaves, slots]``."""
    c, l, d = features.shape
    pair = features[..., :, None] * n_segments + features[..., None, :]  # [groups, leaves, slots, slots]
    flat = values.reshape((c, l, d * d) + values.shape[4:])
    out = scatter(flat, pair.reshape(c, l, d * d), n_segments * n_segments)
    return out.reshape((n_segments, n_segments) + out.shape[1:])


# --------------------------------------------------------------------------------------------
# Tables


def _popcounts(d: int) -> np.ndarray:
    return np.array([bin(u).count("1") for u in range(1 << d)], np.int32)


def _superset_sums(h: Array, d: int) -> Array:
    """``[..., 2**d, width]`` summed over supersets: ``out[X] = sum_{q >= X} h[q]`` (one pass per
    bit, on ``[..., high bits, bit, low bits, width]`` views: XLA compiles these far faster than
    ``d`` axes of 2)."""
    lead, k = h.shape[:-2], h.shape[-1]
    for j in range(d):
        h = h.reshape(lead + (1 << (d - 1 - j), 2, 1 << j, k))
        without, with_ = h[..., 0, :, :], h[..., 1, :, :]
        h = jnp.stack([without + with_, with_], axis=-3)
    return h.reshape(lead + (1 << d, k))


def _interventional_weights(d: int) -> tuple[np.ndarray, np.ndarray]:
    """``(f32[2**d, n_points], f32[n_points + 1, 2**d, 3])``: at ``[q, i]`` the power
    ``t_i**(d - |q| - 1)`` that weighs ``dist[q]`` in ``S_i`` (0 at the full pattern), for the
    nodes ``t_i`` of :func:`quadrature`; at ``[i, X]`` the weights of ``S_i[X]`` in ``G+``, ``G-`` and ``G+'``
    (:func:`interventional_table`), and last, at ``[n_points, X]``, those of the full pattern's
    ``dist[full]``: ``integral (1-t)**(|X|-1) dt = 1 / |X|`` in ``G-`` (0 for the empty ``X``)."""
    t, w = quadrature(d)
    size = _popcounts(d)[:, None].astype(np.float64)  # |q|, |X|
    power = np.where(size < d, t ** np.maximum(d - size - 1, 0), 0.0)
    some = size >= 1
    fewer = np.where(some, (1 - t) ** np.maximum(size - 1, 0), 0.0)  # (1 - t)**(|X| - 1)
    weights = np.stack([(1 - t) ** size, fewer * t, fewer], axis=-1) * w[:, None]  # [2**d, n_points, 3]
    reached = np.where(some, 1.0 / np.maximum(size, 1), 0.0)
    full = np.stack([np.zeros_like(reached), reached, np.zeros_like(reached)], axis=-1)  # [2**d, 1, 3]
    weights = np.concatenate([weights, full], axis=1)
    return power.astype(np.float32), np.moveaxis(weights, 1, 0).astype(np.float32)


def interventional_table(dist: Array, d: int) -> Array:
    """``f32[leaves, 2**d, 3]`` per row pattern ``u``: ``(G+[~u], G-[~u], G+'[~u])`` from the
    background's pattern distribution ``dist f32[leaves, 2**d]`` at each leaf (module
    docstring), in blocks of leaves whose ``[..., 2**d, n_points]`` superset sums stay in cache.

    With ``w+(n_a, n_b) = integral t**(n_a-1) (1-t)**n_b dt`` and ``w-(n_a, n_b) = integral
    t**n_a (1-t)**(n_b-1) dt`` (Beta integrals), every ``G`` is an integral over ``t`` of one
    superset sum ``S_t[X] = sum_{q >= X, q != full} dist[q] t**(d - |q| - 1)``, a polynomial of
    degree below ``d`` that Gauss-Legendre quadrature on ``n_points = ceil(d / 2)`` nodes
    integrates exactly: ``G+[X] = integral (1-t)**|X| S_t[X]``, ``G+'[X] = integral
    (1-t)**(|X|-1) S_t[X]`` and ``G-[X] = integral (1-t)**(|X|-1) (t S_t[X] + dist[full])``. That
    is ``n_points`` superset sums per leaf, ``O(2**d d**2 / 2)``, half the sums per size ``H_k``."""
    power, weights = (jnp.asarray(a) for a in _interventional_weights(d))

    def block(dist):
        sums = _superset_sums(dist[..., None] * power, d)  # [leaves, 2**d, n_points]
        sums = jnp.concatenate([sums, jnp.broadcast_to(dist[:, -1:, None], sums.shape[:2] + (1,))], axis=-1)
        # sum over the nodes unrolled: XLA CPU runs this contraction ten times slower as a dot at some l
        g = sum(sums[:, :, i, None] * weights[i] for i in range(weights.shape[0]))  # [leaves, 2**d, 3]
        return jnp.flip(g, axis=1)  # index u reads X = full - u = ~u

    n = dist.shape[0]
    per_block = max(1, min(n, (1 << 18) // (power.shape[1] << d)))
    n_blocks = -(-n // per_block)
    dist = jnp.pad(dist, ((0, n_blocks * per_block - n), (0, 0))).reshape(n_blocks, per_block, 1 << d)
    return jax.lax.map(block, dist).reshape(n_blocks * per_block, 1 << d, 3)[:n]


def interaction_path_table(paths: Paths) -> Array:
    """``f32[groups, leaves, 2**d, d, d]`` SHAP interaction values of each leaf's path-dependent
    game per pattern (unit leaf value) of ``paths [groups, leaves, d]``; the diagonal is the main
    effect ``phi_i - sum_{j != i} Phi_ij``."""
    t, l, d = paths.z.shape
    subsets = np.arange(1 << d)
    member = jnp.asarray((subsets[:, None] >> np.arange(d)) & 1, bool)  # [2**d, d]
    fixed = member[:, None, :]  # pattern p: [patterns, 1, d]
    coalition = member[None, :, :]  # S: [1, coalitions, d]
    z = paths.z[:, :, None, None, :]
    v = jnp.prod(jnp.where(coalition, fixed.astype(jnp.float32), z), axis=-1)  # [groups, leaves, patterns, coalitions]
    coef = np.concatenate([shapley_weights(d)[:, :, None], interaction_weights(d)], axis=2)  # [coalitions, d, 1+d]
    both = jnp.einsum("tlps,sij->tlpij", v, jnp.asarray(coef))
    phi, pairs = both[..., 0], both[..., 1:]
    main = phi - jnp.sum(pairs, axis=-1)
    return jnp.where(jnp.eye(d, dtype=bool), main[..., None], pairs)


# --------------------------------------------------------------------------------------------
# Lookups (shallow buckets): the row's pattern u i32[groups, leaves, n] at each leaf of the bucket


def _bits(d: int) -> Array:
    return 1 << jnp.arange(d, dtype=jnp.int32)


def interventional_lookup_phi(part: Part, u: Array, n_players: int) -> Array:
    """``f32[P, K, n]`` interventional SHAP values of a bucket from its table
    ``f32[groups, leaves, 2**d, 3]``
    (:func:`interventional_table`; the row's pattern keeps its null slots set, as the
    background's did)."""
    paths = part.paths
    d = paths.z.shape[-1]
    on = ((u[:, :, None, :] >> jnp.arange(d)[None, None, :, None]) & 1) == 1  # [groups, leaves, d, n]
    c, l, size, _ = part.table.shape
    flat = part.table.reshape(-1)
    base = (jnp.arange(c * l, dtype=jnp.int32) * 3 * size).reshape(c, l, 1)
    plus, minus = flat[base + 3 * u], flat[base + 3 * u + 1]  # [groups, leaves, n]
    cleared = u[:, :, None, :] & ~_bits(d)[None, None, :, None]  # U - s for every slot s
    shifted = flat[base[:, :, None, :] + 3 * cleared + 2]  # [groups, leaves, d, n]
    slot = jnp.where(on, plus[:, :, None, :] - shifted, -minus[:, :, None, :])
    slot = jnp.where(paths.player[..., None], slot, 0.0)
    return scatter(slot[:, :, :, None, :] * part.values[:, :, None, :, None], paths.feature, n_players)


def pair_lookup_phi(part: Part, u: Array, n_players: int) -> Array:
    """``f32[P, P, K, n]`` SHAP interaction values of a bucket from its table
    ``f32[groups, leaves, 2**d, d, d, K]``."""
    gathered = jnp.take_along_axis(part.table, u.reshape(u.shape + (1,) * (part.table.ndim - 3)), axis=2)
    return scatter_pairs(jnp.moveaxis(gathered, 2, -1), part.paths.feature, n_players)


# --------------------------------------------------------------------------------------------
# Quadrature (deep buckets): the slots a row takes, taken f32[groups, leaves, d, n]


def quadrature(d: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on ``[0, 1]`` (float64, cast by the caller), exact for
    polynomials of degree < ``d``."""
    t, w = np.polynomial.legendre.leggauss(max(1, -(-d // 2)))
    return (t + 1) / 2, w / 2


def quadrature_path_phi(part: Part, taken: Array, n_players: int, pairs: bool, looped: bool = False) -> Array:
    """``f32[P(, P), K, n]`` path-dependent SHAP (interaction) values of a bucket by quadrature of
    each leaf's path polynomial: ``phi_j = v (o_j - z_j) integral prod_{k != j} f_k``, with
    ``f_k(t) = z_k + (o_k - z_k) t``.

    At a node ``t``, ``f_k`` is one of two numbers of the leaf, ``z_k + (1 - z_k) t`` (the row
    takes slot ``k``) or ``z_k (1 - t)`` (it misses it), and so is the slope over it,
    ``c_k = (o_k - z_k) / f_k``. A row's integrand is ``w prod_k f_k`` times ``c_j``
    (times ``c_i c_j / 2`` for a pair): selects and products, no division per row. Each node is
    an elementwise pass over ``[groups, leaves, d, n]`` that XLA fuses (about 5x faster on CPU
    than contracting a node axis). Unrolled, the nodes are one fused pass; ``looped``, a loop
    over them, whose code compiles once for every node (half of a 9-node bucket's compile time)
    and which reads and writes the sums at each node (about 15% slower). A missed slot with
    ``z_k = 0`` makes every product 0, as its zero slope makes its own terms.
    """
    paths = part.paths
    d = paths.z.shape[-1]
    t, w = quadrature(min(d, n_players))  # degree < players
    z, player = paths.z[..., None], paths.player[..., None]  # [groups, leaves, d, 1]
    takes = taken > 0  # [groups, leaves, d, n]

    def node(t_q: Any, w_q: Any, sums: tuple[Array, Array]) -> tuple[Array, Array]:
        phi, pair = sums
        on, off = z + (1 - z) * t_q, z * (1 - t_q)  # f_k where the row takes / misses slot k
        f = jnp.where(takes, jnp.where(player, on, 1.0), jnp.where(player, off, 1.0))
        c = jnp.where(player, jnp.where(takes, (1 - z) / on, -1.0 / (1 - t_q)), 0.0)  # (o_k - z_k) / f_k
        g = w_q * jnp.prod(f, axis=2, keepdims=True)  # [groups, leaves, 1, n]
        if pairs:
            pair = pair + c[:, :, :, None] * (c * g)[:, :, None]
        return phi + c * g, pair

    shape = takes.shape
    sums = (jnp.zeros(shape, z.dtype), jnp.zeros(shape[:3] + shape[2:], z.dtype) if pairs else jnp.zeros((), z.dtype))
    if looped:
        nodes = jnp.asarray(t, z.dtype), jnp.asarray(w, z.dtype)
        phi, pair = jax.lax.fori_loop(0, len(t), lambda i, sums: node(nodes[0][i], nodes[1][i], sums), sums)
    else:
        for t_q, w_q in zip(t.tolist(), w.tolist()):
            sums = node(t_q, w_q, sums)
        phi, pair = sums
    if not pairs:
        return scatter(phi[:, :, :, None, :] * part.values[:, :, None, :, None], paths.feature, n_players)
    off = ~jnp.eye(d, dtype=bool)[:, :, None]
    pair = jnp.where(off, 0.5 * pair, 0.0)  # [groups, leaves, d, d, n]
    both = jnp.where(off, pair, (phi - jnp.sum(pair, axis=3))[:, :, :, None])  # main effect on the diagonal
    out = both[:, :, :, :, None, :] * part.values[:, :, None, None, :, None]  # [groups, leaves, d, d, K, n]
    return scatter_pairs(out, paths.feature, n_players)


def count_game_step(paths: Paths, taken: Array, other: Array, weight: Array) -> Array:
    """``f32[groups, leaves, d, n]`` interventional slot values (unit leaf value) of rows with
    ``taken f32[groups, leaves, d, n]`` over one block of background rows with ``other
    f32[groups, leaves, d, block]`` and weights ``f32[block]``.

    The game of a row and a background row is zero when a player is missed by both; otherwise
    the row takes every slot the background row misses (``n_a`` of them) and the background row
    takes every slot the row misses (``n_b``), so its Shapley values ``w+(n_a, n_b)`` and
    ``-w-(n_a, n_b)`` depend on each row's own count of misses. Their Beta integrals
    (:func:`interventional_table`) by quadrature make each a sum of ``n_points`` products of a
    row's and a background row's factors: the pairs cost matrix products over slots and nodes,
    and no gather."""
    d = paths.z.shape[-1]
    t, w = (jnp.asarray(a, taken.dtype) for a in quadrature(d))
    player = paths.player[..., None].astype(taken.dtype)
    missed, missed_other = player - taken, player - other  # [groups, leaves, d, n], [..., block]
    alive = jnp.einsum("clsb,clsr->clbr", missed, missed_other) == 0  # no slot missed by both
    n_b = jnp.sum(missed, axis=2)[..., None]  # [groups, leaves, n, 1]
    n_a = jnp.sum(missed_other, axis=2)[..., None]  # [groups, leaves, block, 1]
    plus = jnp.einsum("clbq,clrq->clbr", w * (1 - t) ** n_b, jnp.where(n_a > 0, t ** (n_a - 1), 0.0))
    minus = jnp.einsum("clbq,clrq->clbr", jnp.where(n_b > 0, w * (1 - t) ** (n_b - 1), 0.0), t ** n_a)
    plus, minus = (jnp.where(alive, a * weight, 0.0) for a in (plus, minus))
    on_a = jnp.einsum("clbr,clsr->clsb", plus, missed_other)  # background rows missing each slot
    return taken * on_a - missed * jnp.sum(minus, axis=-1)[:, :, None, :]
