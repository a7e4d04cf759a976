"""Interaction indices of any order of the per-leaf games of :class:`TreeEnsemble` models, and
their row kernel.

A leaf's path-dependent game is a product game over its path's players (``jaximp._shap.trees``):
``v(S) = v_l prod_{j in S} o_j prod_{j not in S} z_j``. Its Möbius transform is
``m(T) = v_l prod_{j in T} (o_j - z_j) prod_{j not in T} z_j``, and every cardinal index is a
functional of it (``jaximp._shap.indices``):

    I(S) = v_l prod_{j in S} (o_j - z_j) (point prod_{j not in S} z_j
                                          + sum_i w_i prod_{j not in S} f_j(y_i)),

with ``f_j(y) = z_j + (o_j - z_j) y`` and the index's :class:`~jaximp._shap.indices.Rule` for
``|S|`` (nodes ``y_i`` inside ``(0, 1)``). As in ``jaximp._shap.games``, ``prod_{j in S} (o_j -
z_j) prod_{j not in S} f_j = G c_S`` with ``G = prod_j f_j`` and the slopes ``c_j = (o_j - z_j) /
f_j``, which are ``(1 - z_j) / f_j`` where the row takes slot ``j`` and ``-1 / (1 - y)`` where it
misses it: no division by a zero cover. A leaf of ``d`` slots gives the values of its
``sum_{s <= order} C(d, s)`` subsets of slots in ``O(nodes C(d, <= order))`` per row; the row
kernel adds them onto the model's subsets by the plan's subset ids.

Shapes: the legend of :mod:`jaximp._models` (K outputs), and in words ``leaves`` (a bucket's
leaves in a chunk), ``d`` its slots, ``n`` the rows of a step, ``n_local`` a leaf's subsets of
slots and ``n_subsets`` the model's (M in ``jaximp.Interactions``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._rows.blocks import map_blocks, map_feature_blocks
from jaximp._shap.games import one_group
from jaximp._shap.index_background import family_tables, paired_values, rescale_factor, table_values
from jaximp._shap.indices import Rule, encode, local_subsets, rule
from jaximp._shap.paths import Paths, taken_slots
from jaximp._shap.tree_plans import Kind, bucket_pattern, row_patterns, taken


@dataclasses.dataclass(frozen=True)
class IndexSpec:
    """The static description of an index kernel (hashable): the ``game`` ("path" or
    "interventional"), ``order``, ``n_subsets`` (the model's), per bucket of the plan's layout,
    per subset size ``s = 1..min(order, d)``, the :class:`~jaximp._shap.indices.Rule` of ``L_s``,
    and per bucket what its leaves' values are read from (``reads``): "values", their
    :func:`value_tables` (one lookup per subset); "formula", :func:`leaf_index_values` (the
    path-dependent game); "families", the interventional family tables
    (``jaximp._shap.index_background``); "paired", the rows paired with the background's blocks;
    and the ``transform`` of the output whose interventional values each pair rescales ("": none;
    see ``jaximp._shap.index_background.rescale_factor``)."""

    game: str
    order: int
    n_subsets: int
    rules: tuple[tuple[Rule, ...], ...]
    reads: tuple[str, ...]
    transform: str = ""


def index_spec(index: str, order: int, kind: Kind, n_subsets: int, reads: tuple[str, ...],
               transform: str = "") -> IndexSpec:
    """The :class:`IndexSpec` of ``index`` at ``order`` over a plan of ``kind`` ("path" or
    "interventional"), each bucket read as ``reads`` says: each bucket's rules exact for its
    leaves' polynomials (degree ``d - s``)."""
    rules = tuple(tuple(rule(index, order, s, b.depth - s) for s in range(1, min(order, b.depth) + 1))
                  for b in kind.layout)
    game = "path" if kind.name == "path" else "interventional"
    return IndexSpec(game, order, n_subsets, rules, reads, transform)


def table_reads(kind: Kind, parts: tuple, order: int, tuning: Any, otherwise: tuple[str, ...]) -> tuple[str, ...]:
    """Per bucket of a plan (its ``parts``), "values" where the bucket's leaves get
    :func:`value_tables`, else its entry of ``otherwise``: buckets of at most the tuning's
    ``index_table_entries`` floats per leaf (``2**d`` patterns times the local subsets),
    shallowest first while the tables' total stays within its ``index_table_bytes``."""
    per_leaf = [(1 << b.depth) * sum(len(c) for c in local_subsets(b.depth, order)) if b.depth <= 24 else None
                for b in kind.layout]
    reads, total = list(otherwise), 0
    for i in sorted(range(len(per_leaf)), key=lambda i: kind.layout[i].depth):
        size = None if per_leaf[i] is None else 4 * per_leaf[i] * int(np.prod(parts[i].leaves.shape))
        if otherwise[i] != "paired" and size is not None and per_leaf[i] <= tuning.index_table_entries \
                and total + size <= tuning.index_table_bytes:
            reads[i], total = "values", total + size
    return tuple(reads)


def leaf_index_values(paths: Paths, taken: Array, rules: tuple[Rule, ...], order: int) -> Array:
    """``f32[leaves, n_local, n]`` the index of every subset of slots (sizes ``1..order``, in
    the order of ``jaximp._shap.indices.local_subsets``) of each leaf's path-dependent game
    (unit leaf value; module docstring) for rows that take the slots ``taken f32[leaves, d,
    n]`` (1 or 0) of ``paths [leaves, d]``."""
    d = paths.z.shape[-1]
    z, player = paths.z[..., None], paths.player[..., None]  # [leaves, d, 1]
    takes = taken > 0
    delta = jnp.where(player, jnp.where(takes, 1 - z, -z), 0.0)  # o_j - z_j; 0 at null slots
    out = []
    for combos, r in zip(local_subsets(d, order), rules):
        value = jnp.zeros((z.shape[0], len(combos), taken.shape[-1]), taken.dtype)
        if r.point:
            inside = np.zeros((len(combos), d), bool)
            np.put_along_axis(inside, combos, True, axis=1)
            rest = jnp.prod(jnp.where(inside[None, :, :, None], 1.0, jnp.where(player, z, 1.0)[:, None]), axis=2)
            value = value + r.point * jnp.prod(delta[:, combos], axis=2) * rest
        for y, w in zip(r.nodes, r.weights):
            f = jnp.where(player, jnp.where(takes, z + (1 - z) * y, z * (1 - y)), 1.0)
            c = jnp.where(player, jnp.where(takes, (1 - z) / f, -1.0 / (1 - y)), 0.0)
            g = jnp.prod(f, axis=1, keepdims=True)  # [leaves, 1, n]
            value = value + w * g * jnp.prod(c[:, combos], axis=2)
        out.append(value)
    return jnp.concatenate(out, axis=1)


def _scattered(values: Array, part: Any, ids: Array, n_subsets: int) -> Array:
    """``f32[n_subsets + 1, K, n]`` unit-value leaf indices ``f32[leaves, n_local, n]`` times the
    leaves' values, added onto the model's subsets by ``ids i32[leaves, n_local]``
    (``n_subsets`` where a local subset holds a null slot)."""
    scaled = values[:, :, None, :] * part.values[:, None, :, None]  # [leaves, n_local, K, n]
    return jax.ops.segment_sum(scaled.reshape((-1,) + scaled.shape[2:]), ids.reshape(-1), n_subsets + 1)


def _path_chunk(part: Any, u: Array, decisions: Array | None, d: int, rules: tuple[Rule, ...], order: int) -> Array:
    paths = jax.tree_util.tree_map(lambda a: a[0], one_group(part).paths)
    return leaf_index_values(paths, taken(one_group(part), u, decisions, d)[0], rules, order)


def value_tables(values_of: Any, leaves: int, d: int) -> Array:
    """``f32[leaves, n_local, 2**d]`` ``values_of(patterns i32[leaves, 2**d])`` (a leaf's values
    ``[leaves, n_local, n]`` for rows of those patterns: :func:`leaf_index_values` of the
    path-dependent game, or ``jaximp._shap.index_background.table_values``) over every pattern
    of ``d`` slots: a row then reads each value by one lookup, with the same bits as computed."""
    return values_of(jnp.broadcast_to(jnp.arange(1 << d, dtype=jnp.int32), (leaves, 1 << d)))


def path_value_tables(part: Any, d: int, rules: tuple[Rule, ...], order: int) -> Array:
    """The :func:`value_tables` of a chunk of a bucket's leaves ``part`` (a ``Part`` ``[leaves,
    ...]``) in the path-dependent game (unit leaf value)."""
    paths = one_group(part.paths)

    def values_of(p):
        return leaf_index_values(jax.tree_util.tree_map(lambda a: a[0], paths), taken_slots(paths, p[None], None)[0],
                                 rules, order)

    return value_tables(values_of, part.leaves.shape[0], d)


def _looked_up(table: Array, pattern: Array) -> Array:
    """``f32[leaves, n_local, n]`` the values of rows of patterns ``pattern i32[leaves, n]`` in
    the leaves' :func:`value_tables` ``f32[leaves, n_local, 2**d]``."""
    return jnp.take_along_axis(table, jnp.broadcast_to(pattern[:, None, :], table.shape[:2] + pattern.shape[1:]),
                               axis=2)


def index_kernel(params: tuple, x: Array, *, block: int, kind: Kind, step_rows: int, spec: IndexSpec,
                 features_first: bool = False) -> Array:
    """``f32[n, n_subsets, K]`` the index values of rows ``x f32[n, E]`` (``[E, n]`` with
    ``features_first``) over the model's subsets, from ``params = (ens, plan, ids, tables)``: a
    "path" or "interventional" plan (``jaximp._shap.tree_plans.kernel_plan``), per bucket the
    subset ids of its leaves' local subsets ``i32[n_chunks, leaves, n_local]``, and per bucket
    the tables ``spec.reads`` names, ``f32[n_chunks, leaves, ...]``: value tables ``[n_local,
    2**d]``, family tables ``[n_families, 2**d]``, or a dummy ``[0]``. Blocks of at most
    ``step_rows`` rows: a call's small step is not padded further."""
    n_rows = x.shape[1] if features_first else x.shape[0]
    return map_feature_blocks(lambda xt: index_block(params, xt, kind, spec), x, min(step_rows, n_rows),
                              features_first)


def rescaled_kernel(params: tuple, rows: tuple, *, block: int, kind: Kind, step_rows: int,
                    spec: IndexSpec) -> Array:
    """:func:`index_kernel` of an interventional game of a transformed output (``spec.transform``)
    for ``rows = (x f32[n, E], margin f32[n], y f32[n])``, the rows' raw predictions and
    targets, each pair of a row and a background row rescaled
    (``jaximp._shap.index_background.rescale_factor``)."""
    n_rows = rows[0].shape[0]
    return map_blocks(lambda r: index_block(params, r[0].T, kind, spec, (r[1], r[2])), rows,
                      min(step_rows, n_rows))


def index_block(params: tuple, xt: Array, kind: Kind, spec: IndexSpec, rescale: tuple | None = None) -> Array:
    """``f32[n, n_subsets, K]`` the index values of one block of rows ``xt f32[E, n]`` (see
    :func:`index_kernel`; ``rescale``: the rows' margins and targets, see :func:`rescaled_kernel`)."""
    ens, plan, ids, tables = params
    u, decisions = row_patterns(kind, plan, xt)
    floats = [a for part in plan.parts for a in (part.values, part.paths.z)]
    dtype = jnp.result_type(*floats) if floats else jnp.float32
    out = jnp.zeros((spec.n_subsets + 1, ens.n_outputs, xt.shape[1]), dtype)
    paired = []
    for i, (b, part, bucket_ids, rules) in enumerate(zip(kind.layout, plan.parts, ids, spec.rules)):
        if spec.reads[i] == "paired":
            paired.append(i)
            continue

        def chunk(acc, args, b=b, rules=rules, reads=spec.reads[i]):
            p, i, table = args
            if reads == "formula":
                values = _path_chunk(p, u, decisions, b.depth, rules, spec.order)
            elif reads == "values":
                values = _looked_up(table, bucket_pattern(u, one_group(p), b.depth)[0])
            else:
                values = table_values(table, bucket_pattern(u, one_group(p), b.depth)[0], b.depth, spec.order)
            return acc + _scattered(values, p, i, spec.n_subsets), None

        out = jax.lax.scan(chunk, out, (part, bucket_ids, tables[i]))[0]
    if paired:
        out = out + _paired(kind, plan, ids, spec, u, paired, out.shape, rescale)
    return jnp.moveaxis(out[:-1], -1, 0)  # [n, n_subsets, K]


def _paired(kind: Kind, plan: Any, ids: tuple, spec: IndexSpec, u: Array, buckets: list[int], shape: tuple,
            rescale: tuple | None) -> Array:
    """``f32[n_subsets + 1, K, n]`` the interventional indices of the ``buckets`` that pair rows
    of patterns ``u`` with the plan's background blocks, one block at a time; with ``rescale``
    (the rows' margins and targets) each pair weighted by its rescale factor too."""
    def step(acc, block):
        rows, weight = block[:2]
        if rescale is not None:  # [n, block]: the background's margins are the block's third part
            weight = weight[None, :] * rescale_factor(spec.transform, rescale[0][:, None], block[2][None, :],
                                                      rescale[1][:, None])
        ub, _ = row_patterns(kind, plan, rows.T)
        for i in buckets:
            b, part, rules = kind.layout[i], plan.parts[i], spec.rules[i]

            def chunk(total, args, b=b, rules=rules):
                p, bucket_ids = args
                mine = bucket_pattern(u, one_group(p), b.depth)[0]
                theirs = bucket_pattern(ub, one_group(p), b.depth)[0]
                values = paired_values(mine, theirs, weight, rules, b.depth, spec.order)
                return total + _scattered(values, p, bucket_ids, spec.n_subsets), None

            acc = jax.lax.scan(chunk, acc, (part, ids[i]))[0]
        return acc, None

    return jax.lax.scan(step, jnp.zeros(shape, plan.parts[buckets[0]].values.dtype), plan.background)[0]


@functools.partial(jax.jit, static_argnames=("kind", "spec"))
def path_tables(parts: tuple, *, kind: Kind, spec: IndexSpec) -> tuple[Array, ...]:
    """Per bucket of a "path" plan's ``parts``, its :func:`value_tables` ``f32[n_chunks, leaves,
    n_local, 2**d]`` where ``spec.reads`` says "values", else a dummy ``f32[n_chunks, leaves, 0]``."""
    return tuple(jax.lax.map(lambda p, d=b.depth, rules=rules: path_value_tables(p, d, rules, spec.order), part)
                 if reads == "values" else jnp.zeros(part.leaves.shape + (0,), jnp.float32)
                 for b, part, rules, reads in zip(kind.layout, parts, spec.rules, spec.reads))


@functools.partial(jax.jit, static_argnames=("rules", "order", "d", "values"))
def interventional_tables(histogram: Array, *, rules: tuple[Rule, ...], order: int, d: int, values: bool) -> Array:
    """A bucket's tables from its leaves' background pattern histograms ``f32[n_chunks, leaves,
    2**d]``: the family tables (``jaximp._shap.index_background.family_tables``), or with
    ``values`` the :func:`value_tables` read from them."""
    tables = family_tables(histogram, rules, order, d)
    if not values:
        return tables
    return jax.lax.map(lambda t: value_tables(lambda p: table_values(t, p, d, order), t.shape[0], d), tables)


# --------------------------------------------------------------------------------------------
# The model's subsets


@dataclasses.dataclass(frozen=True)
class Subsets:
    """The model's subsets for a plan: per size ``s = 1..order``, ``i32[M_s, s]`` (player
    indices, sorted tuples in lexicographic order), and per bucket the subset id of each leaf's
    local subsets ``i32[n_chunks, leaves, n_local]`` (M where a local subset holds a null slot)."""

    by_size: tuple[np.ndarray, ...]
    ids: tuple[np.ndarray, ...]

    @property
    def count(self) -> int:
        return sum(len(rows) for rows in self.by_size)


def model_subsets(plan: Any, order: int, n_players: int) -> Subsets:
    """The :class:`Subsets` of a "path" plan's leaves (on the host: the plan's integer paths)."""
    local = []  # per bucket, per size: (players i32[n_chunks, leaves, C(d, s), s], valid)
    for b, part in zip(plan.kind.layout, plan.arrays.parts):
        feature, player = np.asarray(part.paths.feature), np.asarray(part.paths.player)
        local.append([(np.sort(feature[..., combos], axis=-1), player[..., combos].all(-1))
                      for combos in local_subsets(b.depth, order)])
    by_size, keys = [], []
    for s in range(1, order + 1):
        found = [rows[valid] for sizes in local if s <= len(sizes) for rows, valid in [sizes[s - 1]]]
        rows = np.unique(np.concatenate(found), axis=0) if found else np.zeros((0, s), np.int32)
        by_size.append(rows.astype(np.int32))
        keys.append(encode(rows, n_players))
    offsets = np.cumsum([0] + [len(rows) for rows in by_size])
    total = int(offsets[-1])
    ids = []
    for sizes in local:
        parts = []
        for s, (rows, valid) in enumerate(sizes, start=1):
            found = np.searchsorted(keys[s - 1], encode(rows.reshape(-1, s), n_players)).reshape(valid.shape)
            parts.append(np.where(valid, offsets[s - 1] + found, total))
        ids.append(np.concatenate(parts, axis=-1).astype(np.int32))
    return Subsets(tuple(by_size), tuple(ids))


def local_width(d: int, order: int, n_outputs: int) -> float:
    """Floats per leaf and row that :func:`index_kernel` holds for a bucket of depth ``d``."""
    n_local = sum(len(c) for c in local_subsets(d, order))
    return n_local * (n_outputs + order + 2) + 6 * d
