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
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._rows.blocks import map_feature_blocks
from jaximp._shap.games import one_group
from jaximp._shap.index_background import paired_values, table_values
from jaximp._shap.indices import Rule, local_subsets, rule
from jaximp._shap.paths import Paths
from jaximp._shap.tree_plans import Kind, bucket_pattern, row_patterns, taken


@dataclasses.dataclass(frozen=True)
class IndexSpec:
    """The static description of an index kernel (hashable): the ``game`` ("path" or
    "interventional"), ``order``, ``n_subsets`` (the model's), per bucket of the plan's layout,
    per subset size ``s = 1..min(order, d)``, the :class:`~jaximp._shap.indices.Rule` of ``L_s``,
    and for an interventional game whether each bucket reads tables (else it pairs the rows with
    the background's blocks, ``jaximp._shap.index_background``)."""

    game: str
    order: int
    n_subsets: int
    rules: tuple[tuple[Rule, ...], ...]
    tabled: tuple[bool, ...] = ()


def index_spec(index: str, order: int, kind: Kind, n_subsets: int, tabled: tuple[bool, ...] = ()) -> IndexSpec:
    """The :class:`IndexSpec` of ``index`` at ``order`` over a plan of ``kind`` ("path", or
    "interventional" with each bucket's ``tabled``): each bucket's rules exact for its leaves'
    polynomials (degree ``d - s``)."""
    rules = tuple(tuple(rule(index, order, s, b.depth - s) for s in range(1, min(order, b.depth) + 1))
                  for b in kind.layout)
    game = "path" if kind.name == "path" else "interventional"
    return IndexSpec(game, order, n_subsets, rules, tabled)


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


def index_kernel(params: tuple, x: Array, *, block: int, kind: Kind, step_rows: int, spec: IndexSpec,
                 features_first: bool = False) -> Array:
    """``f32[n, n_subsets, K]`` the index values of rows ``x f32[n, E]`` (``[E, n]`` with
    ``features_first``) over the model's subsets, from ``params = (ens, plan, ids, tables)``: a
    "path" or "interventional" plan (``jaximp._shap.tree_plans.kernel_plan``), per bucket the
    subset ids of its leaves' local subsets ``i32[n_chunks, leaves, n_local]``, and for an
    interventional game per bucket its family tables ``f32[n_chunks, leaves, n_families, 2**d]``
    (a dummy where it pairs rows with the plan's background blocks)."""
    ens, plan, ids, tables = params

    def block_fn(xt):
        u, decisions = row_patterns(kind, plan, xt)
        floats = [a for part in plan.parts for a in (part.values, part.paths.z)]
        dtype = jnp.result_type(*floats) if floats else jnp.float32
        out = jnp.zeros((spec.n_subsets + 1, ens.n_outputs, xt.shape[1]), dtype)
        paired = []
        for i, (b, part, bucket_ids, rules) in enumerate(zip(kind.layout, plan.parts, ids, spec.rules)):
            if spec.game == "interventional" and not spec.tabled[i]:
                paired.append(i)
                continue

            def chunk(acc, args, b=b, rules=rules):
                p, i, table = args
                if spec.game == "path":
                    values = _path_chunk(p, u, decisions, b.depth, rules, spec.order)
                else:
                    values = table_values(table, bucket_pattern(u, one_group(p), b.depth)[0], b.depth, spec.order)
                return acc + _scattered(values, p, i, spec.n_subsets), None

            out = jax.lax.scan(chunk, out, (part, bucket_ids, tables[i]))[0]
        if paired:
            out = out + _paired(kind, plan, ids, spec, u, paired, out.shape)
        return jnp.moveaxis(out[:-1], -1, 0)  # [n, n_subsets, K]

    return map_feature_blocks(block_fn, x, step_rows, features_first)


def _paired(kind: Kind, plan: Any, ids: tuple, spec: IndexSpec, u: Array, buckets: list[int], shape: tuple) -> Array:
    """``f32[n_subsets + 1, K, n]`` the interventional indices of the ``buckets`` that pair rows
    of patterns ``u`` with the plan's background blocks, one block at a time."""
    def step(acc, block):
        rows, weight = block
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


def local_width(d: int, order: int, n_outputs: int) -> float:
    """Floats per leaf and row that :func:`index_kernel` holds for a bucket of depth ``d``."""
    n_local = sum(len(c) for c in local_subsets(d, order))
    return n_local * (n_outputs + order + 2) + 6 * d
