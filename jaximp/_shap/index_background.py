"""Interaction indices of any order of the interventional games of :class:`TreeEnsemble` models:
per-leaf tables of the background's pattern distribution, flat in B, and a pairing of rows with
background rows where a leaf's tables would not fit.

A leaf's interventional game over one background row of pattern ``q`` (the slots it takes) is the
product game of ``jaximp._shap.index_games`` with ``z = q``: for a row of pattern ``u``, a slot is
*a* (the row takes it, the background row misses it), *c* (the other way), a dummy (both take it)
or zero (both miss it: then the game is 0). Its index of a subset ``S`` of ``s`` slots of *a*
and *c* is

    I(S | u, q) = v_l (-1)**|S & c| Psi_s(|a| - |S & a|, |c| - |S & c|),
    Psi_s(alpha, gamma) = L_s[y**alpha (1 - y)**gamma],

with the index's functional ``L_s`` (``jaximp._shap.indices``). Over the background, ``c = ~u``
and ``a = ~q`` (the background rows that count hold every slot the row misses), so with ``S_a =
S & u`` and the graded superset sums ``H_k[X] = sum_{q >= X, |~q| = k} dist[q]``, inclusion and
exclusion over ``R <= S_a`` (the background rows must also take no slot of ``S_a``) gives

    I(S | u) = v_l (-1)**|S_c| sum_{R <= S_a} (-1)**|R| T_{|S_a|, |S_c|, |R|}[u - R],
    T_{s_a, s_c, r}[p] = sum_k H_k[~p] Psi_{s_a + s_c}(k - s_a, d - |p| - r - s_c),

one table over the ``2**d`` patterns per *family* ``(s_a, s_c, r)`` and leaf, built once per
background: a row costs ``sum_S 2**|S|`` lookups per leaf, whatever B.

Shapes: those of ``jaximp._shap.index_games``, ``n_families`` the tables per leaf and ``block``
the background rows of a block.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._models.ensemble import safe_div
from jaximp._shap.games import _popcounts, _superset_sums
from jaximp._shap.indices import Rule, local_subsets

MAX_TABLE_DEPTH = 12  # a leaf's tables hold n_families * 2**d floats, built in O(2**d d n_families)


@functools.cache
def families(order: int) -> tuple[tuple[int, int, int], ...]:
    """Every ``(s_a, s_c, r)`` with ``1 <= s_a + s_c <= order`` and ``r <= s_a``."""
    return tuple((s_a, s - s_a, r) for s in range(1, order + 1) for s_a in range(s + 1) for r in range(s_a + 1))


@functools.cache
def _family_index(order: int) -> np.ndarray:
    """``i32[order + 1, order + 1, order + 1]`` at ``[s, s_a, r]`` the family's index (-1 where none)."""
    out = np.full((order + 1,) * 3, -1, np.int32)
    for i, (s_a, s_c, r) in enumerate(families(order)):
        out[s_a + s_c, s_a, r] = i
    return out


def psi(r: Rule, alpha: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """``L_s[y**alpha (1 - y)**gamma]`` (float64; 0 where ``alpha`` or ``gamma`` is negative)."""
    alpha, gamma = np.broadcast_arrays(np.asarray(alpha), np.asarray(gamma))
    ok = (alpha >= 0) & (gamma >= 0)
    a, g = np.maximum(alpha, 0), np.maximum(gamma, 0)
    out = r.point * (a == 0).astype(np.float64)
    for y, w in zip(r.nodes, r.weights):
        out = out + w * y ** a * (1 - y) ** g
    return np.where(ok, out, 0.0)


def _family_weights(rules: tuple[Rule, ...], order: int, d: int) -> np.ndarray:
    """``f32[n_families, 2**d, d + 1]`` at ``[f, p, k]`` the weight of ``H_k[~p]`` in the table
    of family ``f`` at pattern ``p``."""
    size = _popcounts(d)[:, None]  # |p|
    k = np.arange(d + 1)[None, :]
    out = [psi(rules[s_a + s_c - 1], k - s_a, d - size - r - s_c) for s_a, s_c, r in families(order)]
    return np.stack(out).astype(np.float32)


def family_tables(histogram: Array, rules: tuple[Rule, ...], order: int, d: int) -> Array:
    """``f32[..., n_families, 2**d]`` the tables ``T`` (module docstring) of each leaf from its
    background pattern histogram ``f32[..., 2**d]`` (normalized here; a leaf no background row
    reaches, such as padding, gets zeros)."""
    lead = histogram.shape[:-1]
    dist = safe_div(histogram, jnp.sum(histogram, axis=-1, keepdims=True), 0.0).reshape(-1, 1 << d)
    misses = d - _popcounts(d)  # |~q| of each pattern q
    graded = dist[:, :, None] * jnp.asarray(np.eye(d + 1, dtype=np.float32)[misses])  # [leaves, 2**d, d + 1]
    h = jnp.flip(_superset_sums(graded, d), axis=1)  # at p: H_k[~p]
    tables = jnp.einsum("lpk,fpk->lfp", h, jnp.asarray(_family_weights(rules, order, d)))
    return tables.reshape(lead + tables.shape[1:])


def table_values(table: Array, u: Array, d: int, order: int) -> Array:
    """``f32[leaves, n_local, n]`` the index of every local subset (``local_subsets(d, order)``)
    of each leaf (unit leaf value) for rows of patterns ``u i32[leaves, n]`` (null slots set),
    from the leaves' tables ``f32[leaves, n_families, 2**d]``."""
    leaves, n_families = table.shape[:2]
    flat = table.reshape(-1)
    base = (jnp.arange(leaves, dtype=jnp.int32)[:, None] * n_families)  # [leaves, 1]
    fam = jnp.asarray(_family_index(order))
    out = []
    for combos in local_subsets(d, order):
        s = combos.shape[1]
        masks = np.bitwise_or.reduce(1 << combos, axis=1).astype(np.int32)  # [C(d, s)]
        s_a = jax.lax.population_count(u[:, None, :] & masks[None, :, None])  # [leaves, C, n]
        sign = jnp.where((s - s_a) % 2 == 1, -1.0, 1.0)
        value = jnp.zeros(s_a.shape, table.dtype)
        for r_bits in range(1 << s):  # R, a subset of S, by the positions of its slots in S
            positions = [i for i in range(s) if r_bits >> i & 1]
            r_mask = np.bitwise_or.reduce(1 << combos[:, positions], axis=1).astype(np.int32) if positions \
                else np.zeros(len(combos), np.int32)
            inside = (u[:, None, :] & r_mask[None, :, None]) == r_mask[None, :, None]  # R <= u
            f = fam[s, jnp.minimum(s_a, s), len(positions)]
            p = u[:, None, :] & ~r_mask[None, :, None]
            got = flat[((base[:, :, None] + jnp.maximum(f, 0)) << d) + p]
            keep = inside & (f >= 0)
            value = value + jnp.where(keep, (-1.0) ** len(positions) * got, 0.0)
        out.append(sign * value)
    return jnp.concatenate(out, axis=1)


def paired_values(u: Array, q: Array, weight: Array, rules: tuple[Rule, ...], d: int, order: int) -> Array:
    """``f32[leaves, n_local, n]`` the index of every local subset of each leaf (unit leaf value)
    for rows of patterns ``u i32[leaves, n]``, averaged over a block of background rows of
    patterns ``q i32[leaves, block]`` with weights ``f32[block]``, or ``f32[n, block]`` per pair
    (null slots set in both)."""
    full = (1 << d) - 1
    uu, qq = u[:, :, None], q[:, None, :]  # [leaves, n, block]
    alive = (~uu & ~qq & full) == 0  # no slot missed by both
    a, c = uu & ~qq & full, ~uu & qq & full
    n_a, n_c = jax.lax.population_count(a), jax.lax.population_count(c)
    weight = jnp.broadcast_to(weight, alive.shape[1:])  # [n, block]
    out = []
    for combos, r in zip(local_subsets(d, order), rules):
        s = combos.shape[1]
        table = jnp.asarray(psi(r, np.arange(d + 1)[:, None], np.arange(d + 1)[None, :]).astype(np.float32))
        if s == 1:  # a slot of a: +Psi_1(|a| - 1, |c|); of c: -Psi_1(|a|, |c| - 1): two lookups per pair
            gain = jnp.where(alive & (n_a > 0), table[jnp.maximum(n_a - 1, 0), n_c], 0.0) * weight
            loss = jnp.where(alive & (n_c > 0), table[n_a, jnp.maximum(n_c - 1, 0)], 0.0) * weight
            # slot j is in a where the row takes it and the background row misses it, in c the other
            # way: sums over the block of q's bits, one batched product per leaf
            slots = jnp.arange(d, dtype=jnp.int32)
            takes = ((q[:, :, None] >> slots) & 1).astype(gain.dtype)  # [leaves, block, d]
            mine = ((u[:, :, None] >> slots) & 1).astype(gain.dtype)  # [leaves, n, d]
            missed = jnp.sum(gain, axis=-1)[..., None] - _block_products(gain, takes)
            value = mine * missed - (1 - mine) * _block_products(loss, takes)
            out.append(jnp.moveaxis(value, -1, 1))  # [leaves, d, n]
            continue
        masks = np.bitwise_or.reduce(1 << combos, axis=1).astype(np.int32)[None, :, None, None]
        s_c = jax.lax.population_count(c[:, None] & masks)  # [leaves, C, n, block]
        s_a = jax.lax.population_count(a[:, None] & masks)
        inside = (s_a + s_c) == s  # S within a and c
        alpha, gamma = n_a[:, None] - s_a, n_c[:, None] - s_c
        got = table[jnp.clip(alpha, 0, d), jnp.clip(gamma, 0, d)]
        sign = jnp.where(s_c % 2 == 1, -1.0, 1.0)
        value = jnp.where(inside & alive[:, None], sign * got, 0.0)
        out.append(jnp.einsum("lcnb,nb->lcn", value, weight))
    return jnp.concatenate(out, axis=1)


def _block_products(values: Array, takes: Array) -> Array:
    """``f32[leaves, n, d]`` ``values f32[leaves, n, block]`` summed over the block against
    ``takes f32[leaves, block, d]``: one batched product, its rows padded to two (a product of
    one row takes another kernel, whose sums round differently: a row's values would depend on
    how many rows came with it)."""
    n = values.shape[1]
    padded = jnp.pad(values, ((0, 0), (0, 1), (0, 0))) if n == 1 else values
    return jnp.einsum("lnb,lbd->lnd", padded, takes)[:, :n]


# --------------------------------------------------------------------------------------------
# Transformed outputs: each pair's values rescaled (shap's ``dense_independent``)


def rescale_factor(transform: str, a: Array, b: Array, y: Array) -> Array:
    """The divided difference ``(T(a, y) - T(b, y)) / (a - b)`` of the output transform ``T``
    between a row's raw prediction ``a`` and a background row's ``b`` (broadcast), and its limit
    ``T'(a, y)`` where they are equal: the factor by which shap's interventional TreeExplainer
    scales the pair's Shapley values of the raw output so that they add up to the transformed
    output's change. Computed without cancellation:

    * "logistic" (``model_output="probability"``): ``T = sigmoid(a)``;
      ``(sigmoid(a) - sigmoid(b)) / (a - b) = shc(h) / (4 cosh(a / 2) cosh(b / 2))`` with
      ``h = (a - b) / 2`` and ``shc(h) = sinh(h) / h``, in logarithms;
    * "logistic_nlogloss" (``"log_loss"`` of a binary classifier): ``T = log(1 + e**a) - y a``;
      ``softplus(a) - softplus(b) = log1p(sigmoid(b) expm1(a - b))``;
    * "squared_loss" (``"log_loss"`` of a squared-error regression): ``T = (a - y)**2``, whose
      divided difference is ``a + b - 2 y`` exactly.
    """
    if transform == "squared_loss":
        return a + b - 2 * y
    delta = a - b
    small = jnp.abs(delta) < 1.0
    if transform == "logistic":
        h = jnp.abs(delta) / 2
        h_safe = jnp.where(h < 1e-2, 1.0, h)
        log_shc = jnp.where(h < 1e-2, h * h / 6, h + jnp.log1p(-jnp.exp(-2 * h_safe)) - jnp.log(2 * h_safe))
        return jnp.exp(log_shc - _log_cosh(a / 2) - _log_cosh(b / 2) - np.log(4.0))
    if transform == "logistic_nlogloss":
        d_safe = jnp.where(small & (delta != 0), delta, 1.0)
        lo = jnp.minimum(a, b)  # expm1 of a non-negative step from the smaller margin
        step = jnp.abs(d_safe)
        z = jax.nn.sigmoid(lo) * jnp.expm1(step)
        near = jnp.where(delta == 0, jax.nn.sigmoid(a), jnp.log1p(z) / step)
        far = (jax.nn.softplus(a) - jax.nn.softplus(b)) / jnp.where(small, 1.0, delta)
        return jnp.where(small, near, far) - y
    raise ValueError(f"unknown output transform {transform!r}")


def _log_cosh(x: Array) -> Array:
    x = jnp.abs(x)
    return x + jax.nn.softplus(-2 * x) - np.log(2.0)
