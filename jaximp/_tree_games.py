"""The Shapley values of the per-leaf path games of :class:`TreeEnsemble` models, for one
chunk of leaves of one bucket (see ``jaximp._tree_shap`` for the games, and
``jaximp._tree_paths`` for paths, patterns and buckets).

Two ways for each game: per-leaf tables over the ``2**D`` patterns of a bucket's ``D`` slots,
looked up by the row's pattern (shallow buckets), and quadrature of the game's polynomial
(deep buckets, no ``2**D`` memory).

Interventional tables. For a row pattern ``p`` and a background pattern ``q``, the game's
Shapley values are nonzero only when ``q`` holds every slot ``C = ~p`` the row misses; then
``|A| = |p - q| = D - |q|`` and ``|B| = |q - p| = |C|``. Summing the background distribution
``dist`` over those ``q`` by size, ``H_k[X] = sum_{q >= X, |q| = k} dist[q]`` (a superset sum
per size, O(2**D D**2) per leaf instead of the 4**D of pairing every p with every q), gives

    phi_s = G+[C] - G+'[C + s]   for a slot s the row takes,     phi_s = -G-[C]   for s in C,

with ``G+[X] = sum_k H_k[X] w+(D - k, |X|)``, ``G+'[X] = sum_k H_k[X] w+(D - k, |X| - 1)``,
``G-[X] = sum_k H_k[X] w-(D - k, |X|)`` and ``w+(a, b) = (a-1)! b! / (a+b)!``,
``w-(a, b) = a! (b-1)! / (a+b)!``: three numbers per pattern, read at ``p`` and ``p - s`` as
the path-dependent table is.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._shap_tables import interaction_weights, shapley_weights
from jaximp._tree_paths import Paths


class Part(NamedTuple):
    """One bucket's leaves in groups (a pytree): ``paths [c, L_b, D_b]``, scaled leaf values
    ``f32[c, L_b, K]``, the bucket's table (``f32[c, L_b, 2**D_b, ...]``, or a dummy) and
    ``leaves i32[c, L_b]``, where the leaves are among the chunk's (``jaximp._tree_paths.bucket_leaves``).
    The games take any number ``c`` of groups; a row kernel's chunk of leaves is one."""

    paths: Paths
    values: Array
    table: Array
    leaves: Array


def scatter(values: Array, features: Array, n_segments: int) -> Array:
    """``[c, L, S, ..., b]`` summed into ``[n_segments, ..., b]`` by ``features [c, L, S]``."""
    flat = values.reshape((-1,) + values.shape[3:])
    return jax.ops.segment_sum(flat, features.reshape(-1), n_segments)


def scatter_pairs(values: Array, features: Array, n_segments: int) -> Array:
    """``[c, L, S, S, ..., b]`` summed into ``[n_segments, n_segments, ..., b]`` by the slot pairs'
    ``features [c, L, S]``."""
    c, l, d = features.shape
    pair = features[..., :, None] * n_segments + features[..., None, :]  # [c, L, S, S]
    flat = values.reshape((c, l, d * d) + values.shape[4:])
    out = scatter(flat, pair.reshape(c, l, d * d), n_segments * n_segments)
    return out.reshape((n_segments, n_segments) + out.shape[1:])


# --------------------------------------------------------------------------------------------
# Tables


def _weights(d: int) -> np.ndarray:
    """``f32[D + 1, D]``: ``w_m(s) = s! (m - s - 1)! / m!`` at ``[m, s]`` (0 for ``s >= m``)."""
    out = np.zeros((d + 1, max(d, 1)))
    for m in range(1, d + 1):
        for s in range(m):
            out[m, s] = math.factorial(s) * math.factorial(m - s - 1) / math.factorial(m)
    return out.astype(np.float32)


def _popcounts(d: int) -> np.ndarray:
    return np.array([bin(u).count("1") for u in range(1 << d)], np.int32)


def path_table(paths: Paths) -> Array:
    """``f32[T, L, 2**D]`` ``Phi_l[U] = sum_{S subset U} w_m(|S|) prod_{j in U \\ S} z_j``.

    Built slot by slot over the subsets ``U``: ``a[U, s] = sum_{S subset U, |S| = s} prod_{j in
    U \\ S} z_j`` gains slot ``j`` as ``a[U + j, s] = a[U, s - 1] + z_j a[U, s]``, and
    ``Phi[U] = sum_s w_m(s) a[U, s]``, a contraction with no gather."""
    t, l, d = paths.z.shape
    a = jnp.ones((t, l, 1, 1), paths.z.dtype)
    for j in range(d):
        a = _extend(a, paths.z[:, :, j, None, None])
    m = jnp.sum(paths.player, axis=-1)  # [T, L]
    w = jnp.asarray(_weights(d))[m]  # [T, L, D]: w_m(s), 0 for s >= m
    return jnp.einsum("tlxs,tls->tlx", a[..., :max(d, 1)], w)


def _extend(a: Array, z: Array) -> Array:
    """Add slot ``j`` to the subset axis: ``[.., 2**j, j + 1] -> [.., 2**(j + 1), j + 2]``;
    the subsets with it are ``a[U, s - 1] + z_j a[U, s]``."""
    pad = [(0, 0)] * (a.ndim - 1)
    without = jnp.pad(a, pad + [(0, 1)])
    return jnp.concatenate([without, z * without + jnp.pad(a, pad + [(1, 0)])], axis=-2)


def count_weights(d: int) -> np.ndarray:
    """``f32[2, D + 1, D + 1]``: ``w+(a, b) = (a-1)! b! / (a+b)!`` (index 0, 0 for ``a = 0``) and
    ``w-(a, b) = a! (b-1)! / (a+b)!`` (index 1, 0 for ``b = 0``), the Shapley values of a slot in
    ``A`` and minus that of a slot in ``B`` in the game of a row and one background row."""
    a = np.arange(d + 1)[:, None]
    b = np.arange(d + 1)[None, :]
    lg = lambda n: np.vectorize(math.lgamma)(np.maximum(n, 1) + 0.0)  # noqa: E731
    plus = np.where(a > 0, np.exp(lg(a) + lg(b + 1) - lg(a + b + 1)), 0.0)
    minus = np.where(b > 0, np.exp(lg(a + 1) + lg(b) - lg(a + b + 1)), 0.0)
    return np.stack([plus, minus]).astype(np.float32)


def _superset_sums(h: Array, d: int) -> Array:
    """``[.., 2**D, k]`` summed over supersets: ``out[X] = sum_{q >= X} h[q]`` (one pass per bit,
    on ``[.., high bits, bit, low bits, k]`` views: XLA compiles these far faster than ``D`` axes
    of 2)."""
    lead, k = h.shape[:-2], h.shape[-1]
    for j in range(d):
        h = h.reshape(lead + (1 << (d - 1 - j), 2, 1 << j, k))
        without, with_ = h[..., 0, :, :], h[..., 1, :, :]
        h = jnp.stack([without + with_, with_], axis=-3)
    return h.reshape(lead + (1 << d, k))


def _interventional_weights(d: int) -> np.ndarray:
    """``f32[2**D, D + 1, 3]`` the weights of ``H_k[X]`` in ``G+``, ``G-`` and ``G+'`` (module
    docstring), at ``[X, k]``."""
    size = _popcounts(d)[:, None]  # |X|
    k = np.arange(d + 1)[None, :]
    w = count_weights(d)
    a = np.clip(d - k, 0, d)
    shifted = np.where(size >= 1, w[0][a, np.clip(size - 1, 0, d)], 0.0)
    return np.stack([w[0][a, size], w[1][a, size], shifted], axis=-1).astype(np.float32)


def interventional_table(dist: Array, d: int) -> Array:
    """``f32[n, 3, 2**D]`` per row pattern ``u``: ``(G+[~u], G-[~u], G+'[~u])`` from the
    background's pattern distribution ``dist f32[n, 2**D]`` at ``n`` leaves (module docstring),
    in blocks of leaves whose ``[.., 2**D, D + 1]`` superset sums stay in cache."""
    size = jnp.asarray(_popcounts(d))
    weights = jnp.asarray(_interventional_weights(d))

    def block(dist):
        ranked = jnp.where(size[:, None] == jnp.arange(d + 1), dist[..., None], 0.0)  # [l, 2**D, D+1]
        g = jnp.einsum("lxk,xkg->lgx", _superset_sums(ranked, d), weights)
        return jnp.flip(g, axis=-1)  # index u reads X = full - u = ~u

    n = dist.shape[0]
    per_block = max(1, min(n, (1 << 18) // ((d + 1) << d)))
    n_blocks = -(-n // per_block)
    dist = jnp.pad(dist, ((0, n_blocks * per_block - n), (0, 0))).reshape(n_blocks, per_block, 1 << d)
    return jax.lax.map(block, dist).reshape(n_blocks * per_block, 3, 1 << d)[:n]


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
# Lookups (shallow buckets): the row's pattern u i32[c, L, b] at each leaf of the bucket


def _bits(d: int) -> Array:
    return 1 << jnp.arange(d, dtype=jnp.int32)


def _lookup(table: Array, u: Array) -> tuple[Array, Array]:
    """``(table[u] [c, L, b, ...], table[u - s] [c, L, D, b, ...])`` from ``f32[c, L, 2**D, ...]``."""
    c, l, size = table.shape[:3]
    d = size.bit_length() - 1
    rest = table.shape[3:]
    flat = table.reshape((c * l * size,) + rest)
    base = (jnp.arange(c * l, dtype=jnp.int32) * size).reshape(c, l, 1)
    cleared = u[:, :, None, :] & ~_bits(d)[None, None, :, None]  # U - s for every slot s
    return flat[base + u], flat[base[:, :, None, :] + cleared]


def path_lookup_phi(part: Part, u: Array, n_players: int) -> Array:
    """``f32[P, K, b]`` path-dependent SHAP values of a bucket from its table ``f32[c, L, 2**D]``:
    ``v Z0 (1 - z_s) Phi[U - s]`` on the slots the row takes, ``-v Z0 Phi[U]`` on the others."""
    paths = part.paths
    d = paths.z.shape[-1]
    player_bits = jnp.sum(jnp.where(paths.player, _bits(d), 0), axis=-1)  # [c, L]
    u = u & player_bits[..., None]
    on = ((u[:, :, None, :] >> jnp.arange(d)[None, None, :, None]) & 1) == 1  # [c, L, D, b]
    z = paths.z[..., None]
    z0 = jnp.prod(jnp.where(on, 1.0, z), axis=2)  # [c, L, b]: null slots have z = 1
    g0, gs = _lookup(part.table, u)
    slot = jnp.where(on, (1.0 - z) * gs, -g0[:, :, None, :]) * z0[:, :, None, :]
    slot = jnp.where(paths.player[..., None], slot, 0.0)
    return scatter(slot[:, :, :, None, :] * part.values[:, :, None, :, None], paths.feature, n_players)


def interventional_lookup_phi(part: Part, u: Array, n_players: int) -> Array:
    """``f32[P, K, b]`` interventional SHAP values of a bucket from its table ``f32[c, L, 3, 2**D]``
    (:func:`interventional_table`; the row's pattern keeps its null slots set, as the
    background's did)."""
    paths = part.paths
    d = paths.z.shape[-1]
    on = ((u[:, :, None, :] >> jnp.arange(d)[None, None, :, None]) & 1) == 1  # [c, L, D, b]
    c, l, _, size = part.table.shape
    flat = part.table.reshape(-1)
    base = (jnp.arange(c * l, dtype=jnp.int32) * 3 * size).reshape(c, l, 1)
    plus, minus = flat[base + u], flat[base + size + u]  # [c, L, b]
    cleared = u[:, :, None, :] & ~_bits(d)[None, None, :, None]  # U - s for every slot s
    shifted = flat[base[:, :, None, :] + 2 * size + cleared]  # [c, L, D, b]
    slot = jnp.where(on, plus[:, :, None, :] - shifted, -minus[:, :, None, :])
    slot = jnp.where(paths.player[..., None], slot, 0.0)
    return scatter(slot[:, :, :, None, :] * part.values[:, :, None, :, None], paths.feature, n_players)


def pair_lookup_phi(part: Part, u: Array, n_players: int) -> Array:
    """``f32[P, P, K, b]`` SHAP interaction values of a bucket from ``f32[c, L, 2**D, D, D, K]``."""
    gathered = jnp.take_along_axis(part.table, u.reshape(u.shape + (1,) * (part.table.ndim - 3)), axis=2)
    return scatter_pairs(jnp.moveaxis(gathered, 2, -1), part.paths.feature, n_players)


# --------------------------------------------------------------------------------------------
# Quadrature (deep buckets): the slots a row takes, taken f32[c, L, D, b]


def quadrature(d: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on ``[0, 1]`` (float64, cast by the caller), exact for
    polynomials of degree < ``d``."""
    t, w = np.polynomial.legendre.leggauss(max(1, -(-d // 2)))
    return (t + 1) / 2, w / 2


def quadrature_path_phi(part: Part, taken: Array, n_players: int, pairs: bool) -> Array:
    """``f32[P(, P), K, b]`` path-dependent SHAP (interaction) values of a bucket by quadrature of
    each leaf's path polynomial: ``phi_j = v (o_j - z_j) integral prod_{k != j} f_k``."""
    paths = part.paths
    d = paths.z.shape[-1]
    player = paths.player[..., None, None]
    z = paths.z[..., None, None]
    taken = taken[:, :, :, None]  # [c, L, D, 1, b]
    slope = jnp.where(player, taken - z, 0.0)  # o_j - z_j
    t, w = (jnp.asarray(a, paths.z.dtype) for a in quadrature(min(d, n_players)))  # degree < players
    f = jnp.where(player, z + slope * t[:, None], 1.0)  # [c, L, D, Q, b]
    # prod_{k != j} f_k = prod_k f_k / f_j, where f_j = 0 only if slope_j = 0 (then phi_j = 0)
    inverse = jnp.where(f != 0, 1.0 / jnp.where(f != 0, f, 1.0), 0.0)
    others = jnp.prod(f, axis=2, keepdims=True) * inverse
    phi = slope[:, :, :, 0] * jnp.einsum("cldqb,q->cldb", others, w)  # [c, L, D, b]
    if not pairs:
        return scatter(phi[:, :, :, None, :] * part.values[:, :, None, :, None], paths.feature, n_players)
    pair = jnp.einsum("cliqb,cljqb,q->clijb", others, inverse, w)  # [c, L, D, D, b]
    off = ~jnp.eye(d, dtype=bool)[:, :, None]
    slope = slope[:, :, :, 0]
    pair = jnp.where(off, 0.5 * slope[:, :, :, None] * slope[:, :, None] * pair, 0.0)
    both = jnp.where(off, pair, (phi - jnp.sum(pair, axis=3))[:, :, :, None])  # main effect on the diagonal
    out = both[:, :, :, :, None, :] * part.values[:, :, None, None, :, None]  # [c, L, D, D, K, b]
    return scatter_pairs(out, paths.feature, n_players)


def count_game_step(paths: Paths, taken: Array, other: Array, weight: Array) -> Array:
    """``f32[c, L, D, b]`` interventional slot values (unit leaf value) of rows with ``taken
    f32[c, L, D, b]`` over one block of background rows with ``other f32[c, L, D, B]`` and
    weights ``f32[B]``: the game of a row and a background row depends only on the counts
    ``|A|`` (slots the row takes and the background row misses) and ``|B|`` (conversely), and is
    zero when a player is missed by both."""
    d = paths.z.shape[-1]
    table = jnp.asarray(count_weights(d))
    n_taken = jnp.sum(taken, axis=2)  # [c, L, b]
    players = jnp.sum(paths.player, axis=-1)[..., None, None]  # [c, L, 1, 1]
    both = jnp.einsum("clsb,clsr->clbr", taken, other)
    a = jnp.rint(n_taken[..., None] - both).astype(jnp.int32)  # [c, L, b, B]
    b = jnp.rint(jnp.sum(other, axis=2)[:, :, None, :] - both).astype(jnp.int32)
    alive = (players - a - b - jnp.rint(both).astype(jnp.int32)) == 0  # no slot missed by both
    plus = jnp.where(alive, table[0][a, b], 0.0) * weight
    minus = jnp.where(alive, table[1][a, b], 0.0) * weight
    on_a = jnp.sum(plus, axis=-1)[:, :, None] - jnp.einsum("clbr,clsr->clsb", plus, other)
    on_b = jnp.einsum("clbr,clsr->clsb", minus, other)
    return taken * on_a - (1.0 - taken) * on_b
