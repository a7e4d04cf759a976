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

Paths, players, row patterns and buckets of leaves by path length: ``jaximp._tree_paths``;
the games' Shapley values per bucket, by tables or quadrature: ``jaximp._tree_games``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._batching import map_blocks, map_rows, mean_abs_rows, resolve_devices, sum_rows
from jaximp._model import squeeze_outputs
from jaximp._tree_games import (
    Part,
    count_game_step,
    interaction_path_table,
    interventional_lookup_phi,
    interventional_table,
    pair_lookup_phi,
    path_lookup_phi,
    path_table,
    quadrature_path_phi,
    scatter,
)
from jaximp._tree_importance import subtree_sums
from jaximp._tree_leaves import leaves_of, node_decisions, tree_leaf_histogram
from jaximp._tree_model import TreeEnsemble, check_tree_ensemble, leaf_paths, to_features
from jaximp._tree_paths import (
    Edges,
    Layout,
    by_length,
    bucket,
    length_order,
    interventional_costs,
    path_costs,
    path_lengths,
    patterns,
    plan_layout,
    safe_div,
    taken_slots,
    tree_edges,
    tree_paths,
)

METHODS = ("path_dependent", "approximate", "interventional")
MAX_TABLE_DEPTH = 12  # path and interventional tables hold 2**D_b floats per leaf; deeper: quadrature
MAX_PAIR_DEPTH = 8  # interaction tables cost 4**D_b per leaf; deeper buckets: quadrature
MAX_INTERVENTIONAL_DEPTH = 16  # interventional tables: 3 * 2**D_b floats per leaf, within _TABLE_BYTES
_TABLE_BYTES = 1 << 30  # all of a model's tables together; the deepest table buckets turn to quadrature beyond
_BIT_DEPTH = 30  # row patterns are int32 bit masks of the slots; deeper buckets count missed edges
_BACKGROUND_BLOCK = 256  # background rows per step of the deep interventional kernel
_HISTOGRAM_INTS = 1 << 25  # row patterns per step of the background histograms (128 MiB)
_CHUNK_FLOATS = 1 << 21  # per-step budget of [trees, L, D, rows] intermediates: a CPU cache's share
# Elsewhere steps are bounded by memory, not caches: a larger budget and wider row steps (a bound
# chosen without a GPU to measure on; GPU timings belong in scripts/BENCHMARKS.md)
_ACCELERATOR_CHUNK_FLOATS = 1 << 26
_ACCELERATOR_STEP_ROWS = 4096


# --------------------------------------------------------------------------------------------
# Plans: per-tree arrays cut in chunks of trees, the unit of a row kernel's inner loop


class Plan(NamedTuple):
    """Everything a row kernel reads, per tree, chunked ``[n_chunks, c, ...]`` (a pytree): the
    nodes' splits, the :class:`Edges` of the rows' patterns (leaf entries in order of path
    length) and one :class:`Part` per bucket of the kernel's :data:`Layout`. ``background``:
    the deep interventional buckets' background blocks ``(f32[nB, Bc, E], f32[nB, Bc])``."""

    node_features: Array
    node_borders: Array
    node_nan_right: Array
    node_categorical: Array | None  # None without set-membership splits (TreeEnsemble's fields)
    node_categories: Array | None
    edges: Edges
    parts: tuple[Part, ...]
    background: Any = None


class Kind(NamedTuple):
    """The static description of a plan: ``name`` ("path", "interventional" or "pairs") and the
    buckets' :data:`Layout`."""

    name: str
    layout: Layout


def _chunk_trees(tree: Any, n_trees: int, chunk: int) -> Any:
    n_chunks = -(-n_trees // chunk)
    pad = n_chunks * chunk - n_trees

    def cut(a):
        a = jnp.concatenate([a, jnp.zeros((pad,) + a.shape[1:], a.dtype)])
        return a.reshape((n_chunks, chunk) + a.shape[1:])

    return jax.tree_util.tree_map(cut, tree)


def _table_floats(name: str, n_outputs: int):
    """A bucket's table floats per leaf, as a function of its depth."""
    return {"path": lambda d: 1 << d, "interventional": lambda d: 3 << d,
            "pairs": lambda d: (d * d * n_outputs) << d}[name]


def _width(name: str, tables: bool, d: int, k: int) -> int:
    """Floats per leaf and row that a step of a bucket holds."""
    if name == "pairs":
        return d * d * k + d if tables else d * d * (k + 3) + 6 * d
    if name == "interventional" and not tables:
        return d * k + 3 * min(_BACKGROUND_BLOCK, 64) + 6 * d
    return d * k + (3 if tables else 6) * d


def _layout(ens: TreeEnsemble, name: str, n_background: int = 0) -> tuple[Layout, np.ndarray]:
    """The buckets of ``ens`` for kernel ``name`` and each tree's leaves in order of path length."""
    lengths = path_lengths(ens)
    table_depth = {"pairs": MAX_PAIR_DEPTH, "path": MAX_TABLE_DEPTH,
                   "interventional": MAX_INTERVENTIONAL_DEPTH}[name]
    costs = path_costs if name != "interventional" else lambda d: interventional_costs(d, n_background)
    layout = plan_layout(lengths, ens.n_trees, ens.n_leaves, ens.depth, table_depth=min(table_depth, _BIT_DEPTH),
                         table_floats=_table_floats(name, ens.n_outputs), table_bytes=_TABLE_BYTES, costs=costs)
    layout = tuple(b for b in layout if b[2] > 0)  # leaves without splits: no players
    return layout, length_order(lengths, ens.n_leaves, ens.n_trees)


def _step(ens: TreeEnsemble, kind: Kind, platform: str = "cpu") -> tuple[int, int]:
    """(rows per inner step, trees per chunk) of ``kind`` on ``platform``: the step's
    ``[c, L, D, rows]`` intermediates within a CPU cache's share, elsewhere within memory."""
    per_tree = sum((hi - lo) * _width(kind.name, tables, d, ens.n_outputs) for lo, hi, d, tables in kind.layout)
    per_tree = max(per_tree, 1)
    deep = any(not tables for *_, tables in kind.layout)
    floor = 8 if deep else 64
    rows, budget = (256, _CHUNK_FLOATS) if platform == "cpu" else (_ACCELERATOR_STEP_ROWS, _ACCELERATOR_CHUNK_FLOATS)
    while rows > floor and rows % 2 == 0 and per_tree * rows > budget:
        rows //= 2
    return rows, int(max(1, min(ens.n_trees, budget // (per_tree * rows))))


def _platform(devices: Any, x: Any, fn_name: str) -> str:
    """The platform the rows ``x`` will be explained on (``devices=``, else the rows' device)."""
    if devices is None and isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer):
        devices = list(x.devices())
    return resolve_devices(devices, fn_name)[0].platform


def _decisions(plan_chunk: Plan, xt: Array) -> Array:
    """``bool[c, M, b]`` whether each row of ``xt f32[E, b]`` goes right at each node of a chunk."""
    return node_decisions(plan_chunk, xt)


def _row_patterns(chunk: Plan, decisions: Array, depth: int) -> Array:
    """``i32[c, L, b]`` the rows' patterns over the slots an int32 holds."""
    return patterns(chunk.edges, decisions, min(depth, _BIT_DEPTH))


def _bucket_pattern(u: Array, lo: int, hi: int, d: int) -> Array | None:
    """The patterns of a bucket's leaves over its ``d`` slots; None beyond an int32's bits."""
    return u[:, lo:hi] & ((1 << d) - 1) if d <= _BIT_DEPTH else None


@functools.partial(jax.jit, static_argnames=("chunk", "layout", "table"))
def _plan(ens: TreeEnsemble, weights: Array, order: Array, *, chunk: int, layout: Layout,
          table: str = "") -> Plan:
    """The chunked plan of ``ens`` with covers from ``weights f32[T, L]``; ``table``: "path" or
    "pairs" builds those tables in the buckets that use tables ("": none yet)."""
    paths, edges = by_length(*_paths_and_edges(ens, weights), order)
    values = jnp.take_along_axis(ens.scale * ens.leaf_values, order[:, :, None], axis=1)
    parts = []
    for lo, hi, d, tables in layout:
        part = bucket(paths, lo, hi, d)
        if tables and table == "path":
            data = path_table(part)
        elif tables and table == "pairs":
            data = interaction_path_table(part)[..., None] * values[:, lo:hi, None, None, None, :]
        else:
            data = jnp.zeros((ens.n_trees, 0), jnp.float32)
        parts.append(Part(part, values[:, lo:hi], data))
    tree = Plan(ens.node_features, ens.node_borders, ens.node_nan_right, ens.node_categorical, ens.node_categories,
                edges, tuple(parts))
    return _chunk_trees(tree, ens.n_trees, chunk)


def _paths_and_edges(ens: TreeEnsemble, weights: Array):
    paths = tree_paths(ens, weights)
    return paths, tree_edges(ens, paths)


# --------------------------------------------------------------------------------------------
# The row kernel


def _chunk_phi(ens: TreeEnsemble, kind: Kind, chunk: Plan, background: Any, xt: Array, n_players: int) -> Array:
    """``f32[P(, P), K, b]`` SHAP (interaction) values of one chunk of trees for rows ``xt f32[E, b]``
    (``background``: the plan's background blocks)."""
    decisions = _decisions(chunk, xt)
    u = _row_patterns(chunk, decisions, ens.depth)
    pairs = kind.name == "pairs"
    out, deep = 0.0, []
    for (lo, hi, d, tables), part in zip(kind.layout, chunk.parts):
        ub = _bucket_pattern(u, lo, hi, d)
        if tables:
            lookup = {"path": path_lookup_phi, "pairs": pair_lookup_phi,
                      "interventional": interventional_lookup_phi}[kind.name]
            out = out + lookup(part, ub, n_players)
        elif kind.name == "interventional":
            deep.append((lo, hi, d, part, taken_slots(part.paths, ub, decisions)))
        else:
            out = out + quadrature_path_phi(part, taken_slots(part.paths, ub, decisions), n_players, pairs)
    if deep:
        out = out + _deep_interventional(ens, chunk, background, deep, n_players)
    return out


def _deep_interventional(ens: TreeEnsemble, chunk: Plan, background: tuple[Array, Array], deep: list,
                         n_players: int) -> Array:
    """``f32[P, K, b]`` interventional SHAP values of the deep buckets ``(lo, hi, d, part, taken)``
    over the background blocks, one block at a time."""

    def step(acc, block):
        rows, weight = block
        decisions = _decisions(chunk, rows.T)
        u = _row_patterns(chunk, decisions, ens.depth)
        return tuple(a + count_game_step(part.paths, taken, taken_slots(part.paths, _bucket_pattern(u, lo, hi, d), decisions), weight)
                     for a, (lo, hi, d, part, taken) in zip(acc, deep)), None

    acc, _ = jax.lax.scan(step, tuple(jnp.zeros_like(item[-1]) for item in deep), background)
    return sum(scatter(phi[:, :, :, None, :] * part.values[:, :, None, :, None], part.paths.feature, n_players)
               for phi, (*_, part, _) in zip(acc, deep))


def _shap_kernel(params: tuple, x: Array, *, block: int, kind: Kind, step_rows: int,
                 per_player: bool = False) -> Array:
    """Per-row SHAP (interaction) values ``f32[n, F(, F), K]`` of ``params = (ens, plan)``
    (``f32[n, P, K]`` per player with ``per_player``, for SHAP values: what LossFunctionChange
    removes)."""
    ens, plan = params
    e = ens.n_players
    pairs = kind.name == "pairs"

    def block_fn(xb):
        xt = xb.T  # [E, b]
        shape = (e, e) if pairs else (e,)
        floats = [a for part in plan.parts for a in (part.values, part.paths.z)]
        dtype = jnp.result_type(*floats) if floats else jnp.float32  # float64 models (jax_enable_x64) stay so
        acc = jnp.zeros(shape + (ens.n_outputs, xb.shape[0]), dtype)
        acc, _ = jax.lax.scan(lambda acc, chunk: (acc + _chunk_phi(ens, kind, chunk, plan.background, xt, e), None),
                              acc, plan._replace(background=None))
        out = jnp.moveaxis(acc, -1, 0)  # [b, P(, P), K]
        if per_player:
            return out
        out = to_features(ens, out, axis=1)
        return to_features(ens, out, axis=2) if pairs else out

    return map_blocks(block_fn, x, step_rows)


# --------------------------------------------------------------------------------------------
# Background histograms (interventional tables)


def _pattern_histogram_kernel(params: tuple[TreeEnsemble, Plan], rows: tuple[Array, Array], *,
                              block: int, kind: Kind) -> tuple[Array, ...]:
    """Per table bucket, ``f32[n_chunks, c, L_b, 2**D_b]`` weight of the rows ``(x, weight)`` per
    leaf pattern. The patterns of all the step's rows are built chunk by chunk and counted by one
    scatter after the loop (a scatter inside XLA's loop runs ten times slower on CPU), so steps
    are kept to :data:`_HISTOGRAM_INTS` patterns (:func:`_histogram_batch`)."""
    ens, plan = params
    x, weight = jnp.asarray(rows[0]), jnp.asarray(rows[1])
    u = jax.lax.map(lambda chunk: _row_patterns(chunk, _decisions(chunk, x.T), ens.depth),
                    plan._replace(background=None))  # [n_chunks, c, L, n]
    n_chunks, c = u.shape[:2]
    out = []
    for lo, hi, d, tables in kind.layout:
        if tables:
            ub = _bucket_pattern(u.reshape((n_chunks * c,) + u.shape[2:]), lo, hi, d)  # [n_chunks c, L_b, n]
            n_leaves = ub.shape[0] * ub.shape[1]
            index = (jnp.arange(n_leaves, dtype=jnp.int32).reshape(ub.shape[:2] + (1,)) << d) + ub
            counts = jax.ops.segment_sum(jnp.broadcast_to(weight, ub.shape).reshape(-1), index.reshape(-1),
                                         n_leaves << d)
            out.append(counts.reshape((n_chunks, c, hi - lo, 1 << d)))
    return tuple(out)


def _histogram_batch(ens: TreeEnsemble, batch_size: int | None) -> int:
    """Background rows per step of :func:`_pattern_histogram_kernel`: at most
    :data:`_HISTOGRAM_INTS` patterns (and ``batch_size``)."""
    rows = 1 << max(6, (_HISTOGRAM_INTS // max(ens.n_trees * ens.n_leaves, 1)).bit_length() - 1)
    return rows if batch_size is None else min(rows, batch_size)


@functools.partial(jax.jit, static_argnames=("layout",))
def _interventional_tables(plan: Plan, histograms: tuple[Array, ...], *, layout: Layout) -> Plan:
    parts, tables = list(plan.parts), iter(histograms)
    for i, (lo, hi, d, has_table) in enumerate(layout):
        if has_table:
            histogram = next(tables)
            dist = safe_div(histogram, jnp.sum(histogram, axis=-1, keepdims=True), 0.0)
            n_chunks, c = dist.shape[:2]
            table = interventional_table(dist.reshape((n_chunks * c,) + dist.shape[2:]), d)
            parts[i] = parts[i]._replace(table=table.reshape((n_chunks, c) + table.shape[1:]))
    return plan._replace(parts=tuple(parts))


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



def _background_blocks(background: np.ndarray) -> tuple[Array, Array]:
    """``(f32[nB, Bc, E], f32[nB, Bc])`` background rows in blocks, weights ``1 / B`` (0 on padding)."""
    b = len(background)
    size = min(_BACKGROUND_BLOCK, b)
    n_blocks = -(-b // size)
    rows = jnp.pad(jnp.asarray(background, jnp.float32), ((0, n_blocks * size - b), (0, 0)))  # traced rows too
    weights = jnp.pad(jnp.full(b, 1.0 / b, jnp.float32), (0, n_blocks * size - b))
    return rows.reshape(n_blocks, size, -1), weights.reshape(n_blocks, size)


def _kernel_plan(ens: TreeEnsemble, name: str, weights: Array, platform: str,
                 n_background: int = 0) -> tuple[Plan, Kind, int]:
    """The plan of kernel ``name``, its :class:`Kind` and rows per step, with the tables of the
    path-dependent kinds built."""
    layout, order = _layout(ens, name, n_background)
    kind = Kind(name, layout)
    rows, chunk = _step(ens, kind, platform)
    model = covered(ens, weights) if name != "interventional" else ens
    table = "" if name == "interventional" else name
    return _plan(model, weights, jnp.asarray(order), chunk=chunk, layout=layout, table=table), kind, rows


def tree_shap_plan(ens: TreeEnsemble, method: str = "path_dependent", background: Any = None, *,
                   batch_size: int | None = None, devices: Any = None,
                   fn_name: str = "shap_values", x: Any = None) -> tuple[Any, Any, int]:
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
        weights = _training_weights(ens, fn_name, x, batch_size=batch_size, devices=devices)
        return _kernel_plan(ens, "path", weights, platform)
    if not isinstance(background, jax.Array):  # rows traced under jax.jit stay in JAX
        background = np.asarray(background, np.float32)
    plan, kind, rows = _kernel_plan(ens, "interventional", ens.leaf_weights, platform, len(background))
    if any(not tables for *_, tables in kind.layout):
        plan = plan._replace(background=_background_blocks(background))
    if any(tables for *_, tables in kind.layout):
        histograms = sum_rows(_pattern_histogram_kernel, (ens, plan),
                              (background, np.ones(len(background), np.float32)),
                              batch_size=_histogram_batch(ens, batch_size), devices=devices, fn_name=fn_name,
                              kind=kind)
        plan = _interventional_tables(plan, histograms, layout=kind.layout)
    return plan, kind, rows


def _saabas_table(ens: TreeEnsemble) -> tuple[Array, Array]:
    """``(f32[T, L, D, K] change of the mean value at each edge of each leaf's path, i32[T, L, D]
    the edge's player)``."""
    nodes, _, mask = leaf_paths(ens)
    cover, total = subtree_sums(ens, ens.leaf_weights)
    mean = safe_div(total, cover[..., None], 0.0)  # [T, M, K]
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
    """
    plan = tree_shap_plan(ens, method, background, batch_size=batch_size, devices=devices, x=x)
    return tree_shap_values_from_plan(ens, x, plan, batch_size=batch_size, devices=devices, progress=progress)



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
    mean = jnp.einsum("tl,tlk->k", safe_div(weights, total, 0.0), ens.leaf_values)
    return squeeze_outputs(ens.scale * mean + ens.bias, ens.n_outputs)


def _row_kernel(ens: TreeEnsemble, plan: tuple) -> tuple[Any, Any, dict]:
    """``(kernel, params, static)`` computing a plan's per-row values ``[n, F(, F), K]``."""
    plan, kind, rows = plan
    if kind == "saabas":
        return _saabas_kernel, dataclasses.replace(ens, leaf_weights=plan), {}
    return _shap_kernel, (ens, plan), dict(kind=kind, step_rows=rows)


def tree_shap_values_from_plan(ens: TreeEnsemble, x: Any, plan: tuple, *, batch_size: int | None = None,
                               devices: Any = None, reduce: bool = False, fn_name: str = "shap_values",
                               progress: bool = True) -> Any:
    """:func:`tree_shap_values` with the per-leaf tables of :func:`tree_shap_plan` built once
    (what ``jaximp.Explainer`` keeps), so that explaining more rows costs only the lookups.

    With ``reduce``, the mean over rows of the values' absolute value, ``f32[F(, F)]`` (K == 1)
    or ``f32[F(, F), K]``, summed step by step (``jaximp._batching.mean_abs_rows``)."""
    kernel, params, static = _row_kernel(ens, plan)
    pairs = plan[1] != "saabas" and plan[1].name == "pairs"
    width = ens.n_features * ens.n_outputs * (ens.n_features if pairs else 1)
    run = mean_abs_rows if reduce else map_rows
    out = run(kernel, params, x, batch_size=batch_size, devices=devices, fn_name=fn_name,
              row_floats=width, progress=progress, **static)
    return squeeze_outputs(out, ens.n_outputs)


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
    plan = _kernel_plan(ens, "pairs", weights, _platform(devices, x, fn_name))
    return tree_shap_values_from_plan(ens, x, plan, batch_size=batch_size, devices=devices, reduce=reduce,
                                      fn_name=fn_name, progress=progress)
