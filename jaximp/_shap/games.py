"""The Shapley values of the per-leaf path games of :class:`TreeEnsemble` models, for one
chunk of leaves of one bucket (see ``jaximp._shap.trees`` for the games, and
``jaximp._shap.paths`` for paths, patterns and buckets).

Two ways for each game: per-leaf tables over the ``2**d`` patterns of a bucket's ``d`` slots,
looked up by the row's pattern (shallow buckets), and quadrature of the game's polynomial
(deep buckets, no ``2**d`` memory).

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
``p - s`` as the path-dependent table is.

Shapes: the legend of :mod:`jaximp._models` (P players, K outputs), and a bucket's leaves as
``[groups, leaves, ...]``: ``groups`` chunks of ``leaves`` leaves each (a row kernel's chunk is
one group), ``d`` the bucket's depth (its slots), ``n`` the rows of a step and ``n_points =
ceil(d / 2)`` the nodes of the quadrature.
"""

from __future__ import annotations

import dataclasses
import functools
import math
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
    (``jaximp._shap.paths.bucket_leaves``). The games take any number of groups; a row kernel's
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


_UNROLLED = 2  # a path table's last slots, in steps of growing shapes (path_table)


def _weights(d: int) -> np.ndarray:
    """``f32[d + 1, d]``: ``w_m(s) = s! (m - s - 1)! / m!`` at ``[m, s]`` (0 for ``s >= m``), for
    paths of ``m`` players."""
    out = np.zeros((d + 1, max(d, 1)))
    for m in range(1, d + 1):
        for s in range(m):
            out[m, s] = math.factorial(s) * math.factorial(m - s - 1) / math.factorial(m)
    return out.astype(np.float32)


def _popcounts(d: int) -> np.ndarray:
    return np.array([bin(u).count("1") for u in range(1 << d)], np.int32)


def path_table(paths: Paths) -> Array:
    """``f32[groups, leaves, 2**d]`` ``Phi_l[U] = sum_{S subset U} w_m(|S|) prod_{j in U \\ S} z_j``
    for ``paths [groups, leaves, d]`` of ``m`` players each.

    Built slot by slot over the subsets ``U``: ``a[U, s] = sum_{S subset U, |S| = s} prod_{j in
    U \\ S} z_j`` gains slot ``j`` as ``a[U + j, s] = a[U, s - 1] + z_j a[U, s]``, and
    ``Phi[U] = sum_s w_m(s) a[U, s]``, a contraction with no gather. All slots but the last
    :data:`_UNROLLED` go through one loop over their subsets' full shape (:func:`_gain`), the
    last (the largest steps) through steps of growing shapes (:func:`_extend`): the same sums,
    at a small part of the compile time of ``d`` steps of growing shapes."""
    t, l, d = paths.z.shape
    k = max(d - _UNROLLED, 0)
    a = jnp.zeros((t, l, 1 << k, k + 1), paths.z.dtype).at[..., 0, 0].set(1.0)  # a[{}, 0] = 1
    a = jax.lax.fori_loop(0, k, functools.partial(_gain, z=paths.z), a)
    for j in range(k, d):
        a = _extend(a, paths.z[:, :, j, None, None])
    m = jnp.sum(paths.player, axis=-1)  # [groups, leaves]
    w = jnp.asarray(_weights(d))[m]  # [groups, leaves, d]: w_m(s), 0 for s >= m
    return jnp.einsum("tlxs,tls->tlx", a[..., :max(d, 1)], w)


def _gain(j: Array, a: Array, z: Array) -> Array:
    """``a f32[groups, leaves, 2**k, k + 1]`` with slot ``j < k`` added: the subsets ``U`` whose
    highest slot is ``j`` (``2**j <= U < 2**(j + 1)``) become ``a[U - j, s - 1] + z_j a[U - j, s]``
    from the subsets of lower slots, already complete (``z f32[groups, leaves, d]``)."""
    below = jnp.roll(a, 1 << j, axis=2)  # a[U - 2**j] at U
    shifted = jnp.pad(below[..., :-1], [(0, 0)] * 3 + [(1, 0)])  # a[U - 2**j, s - 1]
    zj = jax.lax.dynamic_index_in_dim(z, j, axis=2, keepdims=False)[..., None, None]
    subsets = jnp.arange(a.shape[2], dtype=jnp.int32)
    return jnp.where((subsets >> j)[:, None] == 1, zj * below + shifted, a)


def _extend(a: Array, z: Array) -> Array:
    """Add slot ``j`` to the subset axis: ``[..., 2**j, j + 1] -> [..., 2**(j + 1), j + 2]``;
    the subsets with it are ``a[U, s - 1] + z_j a[U, s]``."""
    pad = [(0, 0)] * (a.ndim - 1)
    without = jnp.pad(a, pad + [(0, 1)])
    return jnp.concatenate([without, z * without + jnp.pad(a, pad + [(1, 0)])], axis=-2)


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


def _lookup(table: Array, u: Array) -> tuple[Array, Array]:
    """``(table[u] [groups, leaves, n, ...], table[u - s] [groups, leaves, d, n, ...])`` from
    ``table f32[groups, leaves, 2**d, ...]``."""
    c, l, size = table.shape[:3]
    d = size.bit_length() - 1
    rest = table.shape[3:]
    flat = table.reshape((c * l * size,) + rest)
    base = (jnp.arange(c * l, dtype=jnp.int32) * size).reshape(c, l, 1)
    cleared = u[:, :, None, :] & ~_bits(d)[None, None, :, None]  # U - s for every slot s
    return flat[base + u], flat[base[:, :, None, :] + cleared]


def path_lookup_phi(part: Part, u: Array, n_players: int) -> Array:
    """``f32[P, K, n]`` path-dependent SHAP values of a bucket from its table ``f32[groups, leaves, 2**d]``:
    ``v Z0 (1 - z_s) Phi[U - s]`` on the slots the row takes, ``-v Z0 Phi[U]`` on the others."""
    paths = part.paths
    d = paths.z.shape[-1]
    player_bits = jnp.sum(jnp.where(paths.player, _bits(d), 0), axis=-1)  # [groups, leaves]
    u = u & player_bits[..., None]
    on = ((u[:, :, None, :] >> jnp.arange(d)[None, None, :, None]) & 1) == 1  # [groups, leaves, d, n]
    z = paths.z[..., None]
    z0 = jnp.prod(jnp.where(on, 1.0, z), axis=2)  # [groups, leaves, n]: null slots have z = 1
    g0, gs = _lookup(part.table, u)
    slot = jnp.where(on, (1.0 - z) * gs, -g0[:, :, None, :]) * z0[:, :, None, :]
    slot = jnp.where(paths.player[..., None], slot, 0.0)
    return scatter(slot[:, :, :, None, :] * part.values[:, :, None, :, None], paths.feature, n_players)


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


def quadrature_path_phi(part: Part, taken: Array, n_players: int, pairs: bool) -> Array:
    """``f32[P(, P), K, n]`` path-dependent SHAP (interaction) values of a bucket by quadrature of
    each leaf's path polynomial: ``phi_j = v (o_j - z_j) integral prod_{k != j} f_k``."""
    paths = part.paths
    d = paths.z.shape[-1]
    player = paths.player[..., None, None]
    z = paths.z[..., None, None]
    taken = taken[:, :, :, None]  # [groups, leaves, d, 1, n]
    slope = jnp.where(player, taken - z, 0.0)  # o_j - z_j
    t, w = (jnp.asarray(a, paths.z.dtype) for a in quadrature(min(d, n_players)))  # degree < players
    f = jnp.where(player, z + slope * t[:, None], 1.0)  # [groups, leaves, d, n_points, n]
    # prod_{k != j} f_k = prod_k f_k / f_j, where f_j = 0 only if slope_j = 0 (then phi_j = 0)
    inverse = jnp.where(f != 0, 1.0 / jnp.where(f != 0, f, 1.0), 0.0)
    others = jnp.prod(f, axis=2, keepdims=True) * inverse
    phi = slope[:, :, :, 0] * jnp.einsum("cldqb,q->cldb", others, w)  # [groups, leaves, d, n]
    if not pairs:
        return scatter(phi[:, :, :, None, :] * part.values[:, :, None, :, None], paths.feature, n_players)
    pair = jnp.einsum("cliqb,cljqb,q->clijb", others, inverse, w)  # [groups, leaves, d, d, n]
    off = ~jnp.eye(d, dtype=bool)[:, :, None]
    slope = slope[:, :, :, 0]
    pair = jnp.where(off, 0.5 * slope[:, :, :, None] * slope[:, :, None] * pair, 0.0)
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
