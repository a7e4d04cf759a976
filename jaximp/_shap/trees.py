"""SHAP values of :class:`TreeEnsemble` models: a path decomposition with per-leaf tables.

A tree's value function is a sum over its leaves of *product games* (the decomposition of
GPUTreeShap, Mitchell et al. 2022). Leaf ``l`` holds value ``v_l`` at the end of a path whose
edges read features; the path's *players* are its distinct features (a feature read at several
edges is one player). For a row ``x``, ``o_j(x) = 1`` when ``x`` takes every edge of player
``j`` (else 0) and ``z_j`` is the product of the edges' cover ratios ``cover(child) /
cover(node)`` (0.5 at a node of zero cover, as in ``jaximp._shap.oblivious_tables``). Then

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

Paths of more players than the tables allow (deep trees reading many features) use the same
games without tables. With
``f_j(t) = z_j + (o_j - z_j) t`` and ``w_m(s) = integral_0^1 t^s (1 - t)^(m-s-1) dt``,

    phi_j = v_l (o_j - z_j) integral_0^1 prod_{k != j} f_k(t) dt

(and ``Phi_ij = v_l (o_i - z_i)(o_j - z_j) / 2 integral prod_{k != i, j} f_k`` for interactions),
a polynomial of degree below ``D`` integrated exactly by Gauss-Legendre quadrature on
``ceil(D / 2)`` nodes: O(L D^2) per row and tree, no ``2**D`` memory. The interventional game
over one background row is the same game with ``z_j = o_j(b)``; its Shapley values depend only
on the counts of slots the row takes and the background row misses (``A``) and conversely
(``B``), so the background is summed by matrix products over slots (O(L D B) per row and tree).

Paths, players, row patterns and buckets of leaves by players per path: ``jaximp._shap.paths``;
the games' Shapley values per bucket, by tables or quadrature: ``jaximp._shap.games``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._leaves.predict import predict_rows, training_leaf_weights
from jaximp._leaves.trees import leaves_of, node_decisions
from jaximp._models.ensemble import squeeze_outputs, to_columns
from jaximp._models.trees import TreeEnsemble, leaf_paths, subtree_sums
from jaximp._rows.batching import map_blocks, map_rows, mean_abs_rows, resolve_devices, sum_rows
from jaximp._shap.games import (
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
from jaximp._shap.paths import (
    Edges,
    Layout,
    bucket,
    bucket_leaves,
    chunk_sizes,
    flat_leaves,
    interventional_costs,
    path_costs,
    path_players,
    patterns,
    plan_layout,
    safe_div,
    taken_slots,
    tree_edges,
    tree_paths,
)

METHODS = ("path_dependent", "approximate", "interventional")  # "exact" is CatBoost's for oblivious trees only
MAX_TABLE_DEPTH = 12  # path and interventional tables hold 2**D_b floats per leaf; deeper: quadrature
MAX_PAIR_DEPTH = 8  # interaction tables cost 4**D_b per leaf; deeper buckets: quadrature
MAX_INTERVENTIONAL_DEPTH = 16  # interventional tables: 3 * 2**D_b floats per leaf, within _TABLE_BYTES
_TABLE_BYTES = 1 << 30  # all of a model's tables together; the deepest table buckets turn to quadrature beyond
_BIT_DEPTH = 30  # row patterns are int32 bit masks of the slots; deeper buckets count missed edges
_BACKGROUND_BLOCK = 256  # background rows per step of the deep interventional kernel
_HISTOGRAM_INTS = 1 << 25  # row patterns per step of the background histograms (128 MiB)
_CHUNK_FLOATS = 1 << 21  # per-step budget of [leaves, D, rows] intermediates: a CPU cache's share
_PATTERN_INTS = 1 << 25  # a step's row patterns at every leaf of the model (128 MiB)
_MIN_STEP_ROWS = 16
# Elsewhere steps are bounded by memory, not caches: a larger budget and wider row steps (a bound
# chosen without a GPU to measure on; GPU timings belong in scripts/BENCHMARKS.md)
_ACCELERATOR_CHUNK_FLOATS = 1 << 26
_ACCELERATOR_STEP_ROWS = 4096


# --------------------------------------------------------------------------------------------
# Plans: per-tree arrays in chunks of trees (the rows' patterns), per-bucket leaves in chunks of
# leaves (the games): the units of a row kernel's loops


class Plan(NamedTuple):
    """Everything a row kernel reads (a pytree): per tree, in chunks of trees
    ``[n_chunks, c, ...]``, the nodes' splits and the :class:`Edges` of the rows' patterns; per
    bucket of the kernel's :data:`Layout`, a :class:`Part` of its leaves, of all trees, in chunks
    of leaves ``[n_b, L_b, ...]``. ``background``: the deep interventional buckets' background
    blocks ``(f32[nB, Bc, E], f32[nB, Bc])``."""

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


def _pad_trees(tree: Any, n_trees: int, chunk: int) -> Any:
    """Per-tree arrays ``[T, ...]`` zero-padded to whole chunks of ``chunk`` trees."""
    pad = -(-n_trees // chunk) * chunk - n_trees
    return jax.tree_util.tree_map(lambda a: jnp.concatenate([a, jnp.zeros((pad,) + a.shape[1:], a.dtype)]), tree)


def _chunk_trees(tree: Any, n_trees: int, chunk: int) -> Any:
    """Per-tree arrays ``[T, ...]`` as ``[n_chunks, chunk, ...]``, zero-padded."""
    return jax.tree_util.tree_map(lambda a: a.reshape((-1, chunk) + a.shape[1:]), _pad_trees(tree, n_trees, chunk))


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


def _layout(ens: TreeEnsemble, name: str, n_background: int = 0,
            n_rows: int | None = None) -> tuple[Layout, np.ndarray | None]:
    """The buckets of ``ens`` for kernel ``name`` and the players on the leaves' paths (None when
    traced); tables are built once for the ``n_rows`` rows to explain (256 when not known)."""
    players = path_players(ens)
    table_depth = {"pairs": MAX_PAIR_DEPTH, "path": MAX_TABLE_DEPTH,
                   "interventional": MAX_INTERVENTIONAL_DEPTH}[name]
    rows = max(n_rows or 256, 1)
    costs = ((lambda d: path_costs(d, rows)) if name != "interventional"
             else lambda d: interventional_costs(d, n_background, rows))
    layout = plan_layout(players, ens.n_trees, ens.n_leaves, ens.depth, table_depth=min(table_depth, _BIT_DEPTH),
                         table_floats=_table_floats(name, ens.n_outputs), table_bytes=_TABLE_BYTES, costs=costs)
    return layout, players


class Step(NamedTuple):
    """How a row kernel walks a plan: ``rows`` per step, ``trees`` per chunk of the patterns'
    loop and, per bucket, ``leaves`` per chunk of its loop."""

    rows: int
    trees: int
    leaves: tuple[int, ...]


def _step(ens: TreeEnsemble, kind: Kind, platform: str = "cpu") -> Step:
    """The :class:`Step` of ``kind`` on ``platform``: the rows' patterns at every leaf within
    :data:`_PATTERN_INTS` (rows halve down to :data:`_MIN_STEP_ROWS`), and each chunk's
    intermediates within a CPU cache's share, elsewhere within memory."""
    cpu = platform == "cpu"
    rows, budget = (256, _CHUNK_FLOATS) if cpu else (_ACCELERATOR_STEP_ROWS, _ACCELERATOR_CHUNK_FLOATS)
    most = _PATTERN_INTS if cpu else _ACCELERATOR_CHUNK_FLOATS
    while rows > _MIN_STEP_ROWS and ens.n_trees * ens.n_leaves * rows > most:
        rows //= 2
    trees = int(max(1, min(ens.n_trees, budget // (4 * ens.n_nodes * rows))))
    widths = tuple(_width(kind.name, b.tables, b.depth, ens.n_outputs) for b in kind.layout)
    return Step(rows, trees, chunk_sizes(tuple(b.count for b in kind.layout), widths, budget / rows))


def _platform(devices: Any, x: Any, fn_name: str) -> str:
    """The platform the rows ``x`` will be explained on (``devices=``, else the rows' device)."""
    if devices is None and isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer):
        devices = list(x.devices())
    return resolve_devices(devices, fn_name)[0].platform


def _decisions(plan_chunk: Plan, xt: Array) -> Array:
    """``bool[c, M, b]`` whether each row of ``xt f32[E, b]`` goes right at each node of a chunk."""
    return node_decisions(plan_chunk, xt)


def _slots(kind: Kind) -> int:
    """The most slots of any bucket of ``kind``."""
    return max((b.depth for b in kind.layout), default=0)


def _row_patterns(kind: Kind, plan: Plan, xt: Array) -> tuple[Array, Array | None]:
    """``(i32[T L + 1, b], bool[T M, b] | None)``: the patterns of rows ``xt f32[E, b]`` over the
    slots an int32 holds at every leaf of the (chunk-padded) trees, tree-major, and 0 at the
    null leaf (``jaximp._shap.paths.flat_leaves``); and, for paths of more players than that,
    the rows' decisions at every node."""
    deep = _slots(kind) > _BIT_DEPTH

    def one(chunk):
        decisions = _decisions(chunk, xt)
        return patterns(chunk.edges, decisions, min(_slots(kind), _BIT_DEPTH)), decisions if deep else None

    u, decisions = jax.lax.map(one, plan._replace(parts=(), background=None))  # [n_chunks, c, L(M), b]
    u = u.reshape((-1,) + u.shape[3:])
    u = jnp.concatenate([u, jnp.zeros_like(u[:1])])
    return u, None if decisions is None else decisions.reshape((-1,) + decisions.shape[3:])


def _group(part: Part) -> Part:
    """One chunk of a bucket ``[L_b, ...]`` as the one group the games take, ``[1, L_b, ...]``."""
    return jax.tree_util.tree_map(lambda a: a[None], part)


def _bucket_pattern(u: Array, part: Part, d: int) -> Array | None:
    """``i32[c, L_b, b]`` the patterns of a bucket's leaves ``part.leaves i32[c, L_b]`` over its
    ``d`` slots, from :func:`_row_patterns`; None beyond an int32's bits."""
    return u[part.leaves] & ((1 << d) - 1) if d <= _BIT_DEPTH else None


def _taken(part: Part, u: Array, decisions: Array | None, d: int) -> Array:
    """``f32[1, L_b, d, b]`` :func:`taken_slots` of a chunk of a bucket (grouped), from
    :func:`_row_patterns`."""
    return taken_slots(part.paths, _bucket_pattern(u, part, d), None if decisions is None else decisions[None])


def _sum_chunks(fn, part: Part) -> Array:
    """``sum_i fn(chunk i of part)``, the chunks of a bucket in a loop."""
    first = jax.tree_util.tree_map(lambda a: a[0], part)
    zero = jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape, a.dtype), jax.eval_shape(fn, first))
    return jax.lax.scan(lambda acc, p: (acc + fn(p), None), zero, part)[0]


@functools.partial(jax.jit, static_argnames=("trees", "layout", "table"))
def _plan(ens: TreeEnsemble, weights: Array, leaves: tuple[Array, ...], *, trees: int, layout: Layout,
          table: str = "") -> Plan:
    """The plan of ``ens`` with covers from ``weights f32[T, L]``, ``trees`` per chunk of trees
    and each bucket's ``leaves i32[n_b, L_b]`` (``jaximp._shap.paths.bucket_leaves``); ``table``:
    "path" or "pairs" builds those tables in the buckets that use tables ("": none yet)."""
    paths, edges = _paths_and_edges(ens, weights)
    paths = flat_leaves(_pad_trees(paths, ens.n_trees, trees), ens.n_nodes)  # [T L + 1, D]
    values = _pad_trees(ens.scale * ens.leaf_values, ens.n_trees, trees)
    values = jnp.concatenate([values.reshape(-1, values.shape[-1]), jnp.zeros_like(values[0, :1])])  # the null leaf's
    parts = []
    for b, index in zip(layout, leaves):
        index = jnp.asarray(index)
        entries = 0 if b.depth <= _BIT_DEPTH else ens.depth  # edges, where bit patterns do not hold the slots
        part, value = bucket(paths, index, b.depth, entries), values[index]  # [n_b, L_b, D_b], [n_b, L_b, K]
        if b.tables and table == "path":
            data = jax.lax.map(lambda p: path_table(_group(p))[0], part)
        elif b.tables and table == "pairs":
            data = jax.lax.map(lambda p: interaction_path_table(_group(p))[0], part)
            data = data[..., None] * value[:, :, None, None, None, :]
        else:
            data = jnp.zeros((index.shape[0], 0), jnp.float32)
        parts.append(Part(part, value, data, index))
    tree = Plan(ens.node_features, ens.node_borders, ens.node_nan_right, ens.node_categorical, ens.node_categories,
                edges, ())
    return _chunk_trees(tree, ens.n_trees, trees)._replace(parts=tuple(parts))


def _paths_and_edges(ens: TreeEnsemble, weights: Array):
    paths = tree_paths(ens, weights)
    return paths, tree_edges(ens, paths)


# --------------------------------------------------------------------------------------------
# The row kernel


def _block_phi(ens: TreeEnsemble, kind: Kind, plan: Plan, xt: Array, n_players: int) -> Array:
    """``f32[P(, P), K, b]`` SHAP (interaction) values of rows ``xt f32[E, b]``: their patterns
    at every leaf, then each bucket's games chunk by chunk."""
    u, decisions = _row_patterns(kind, plan, xt)
    pairs = kind.name == "pairs"
    lookup = {"path": path_lookup_phi, "pairs": pair_lookup_phi, "interventional": interventional_lookup_phi}[kind.name]

    def games(b):
        def chunk_phi(part):
            part = _group(part)
            if b.tables:
                return lookup(part, _bucket_pattern(u, part, b.depth), n_players)
            return quadrature_path_phi(part, _taken(part, u, decisions, b.depth), n_players, pairs)
        return chunk_phi

    out, deep = 0.0, []
    for b, part in zip(kind.layout, plan.parts):
        if kind.name == "interventional" and not b.tables:
            deep.append((b, part))  # every background row meets every row: after the others
        else:
            out = out + _sum_chunks(games(b), part)
    if deep:
        out = out + _deep_interventional(kind, plan, u, decisions, deep, n_players)
    return out


def _deep_interventional(kind: Kind, plan: Plan, u: Array, decisions: Array | None, deep: list,
                         n_players: int) -> Array:
    """``f32[P, K, b]`` interventional SHAP values of the deep buckets ``(bucket, part)`` for rows
    of patterns ``u`` over the plan's background blocks, one block at a time."""
    taken = [jax.lax.map(lambda p, d=b.depth: _taken(_group(p), u, decisions, d)[0], part) for b, part in deep]

    def step(acc, block):
        rows, weight = block
        ub, db = _row_patterns(kind, plan, rows.T)

        def one(args, d):
            part, mine = _group(args[0]), args[1][None]
            return count_game_step(part.paths, mine, _taken(part, ub, db, d), weight)[0]

        return tuple(a + jax.lax.map(functools.partial(one, d=b.depth), (part, t))
                     for a, (b, part), t in zip(acc, deep, taken)), None

    acc, _ = jax.lax.scan(step, tuple(jnp.zeros_like(t) for t in taken), plan.background)
    return sum(scatter(phi[:, :, :, None, :] * part.values[:, :, None, :, None], part.paths.feature, n_players)
               for phi, (_, part) in zip(acc, deep))


def shap_kernel(params: tuple, x: Array, *, block: int, kind: Kind, step_rows: int,
                 per_player: bool = False) -> Array:
    """Per-row SHAP (interaction) values ``f32[n, F(, F), K]`` of ``params = (ens, plan)``
    (``f32[n, P, K]`` per player with ``per_player``, for SHAP values: what LossFunctionChange
    removes)."""
    ens, plan = params
    e = ens.n_players
    pairs = kind.name == "pairs"

    def block_fn(xb):
        shape = (e, e) if pairs else (e,)
        floats = [a for part in plan.parts for a in (part.values, part.paths.z)]
        dtype = jnp.result_type(*floats) if floats else jnp.float32  # float64 models (jax_enable_x64) stay so
        acc = jnp.zeros(shape + (ens.n_outputs, xb.shape[0]), dtype) + _block_phi(ens, kind, plan, xb.T, e)
        out = jnp.moveaxis(acc, -1, 0)  # [b, P(, P), K]
        if per_player:
            return out
        out = to_columns(ens, out, axis=1)
        return to_columns(ens, out, axis=2) if pairs else out

    return map_blocks(block_fn, x, step_rows)


# --------------------------------------------------------------------------------------------
# Background histograms (interventional tables)


def _pattern_histogram_kernel(params: tuple[TreeEnsemble, Plan], rows: tuple[Array, Array], *,
                              block: int, kind: Kind) -> tuple[Array, ...]:
    """Per table bucket, ``f32[n_b, L_b, 2**D_b]`` weight of the rows ``(x, weight)`` per leaf
    pattern. The patterns of all the step's rows are built and counted by one scatter (a scatter
    inside XLA's loop runs ten times slower on CPU), so steps are kept to
    :data:`_HISTOGRAM_INTS` patterns (:func:`_histogram_batch`)."""
    ens, plan = params
    x, weight = jnp.asarray(rows[0]), jnp.asarray(rows[1])
    u, _ = _row_patterns(kind, plan, x.T)  # [T L + 1, n]
    out = []
    for b, part in zip(kind.layout, plan.parts):
        if b.tables:
            ub = _bucket_pattern(u, part, b.depth)  # [n_b, L_b, n]
            n_leaves = ub.shape[0] * ub.shape[1]
            index = (jnp.arange(n_leaves, dtype=jnp.int32).reshape(ub.shape[:2] + (1,)) << b.depth) + ub
            counts = jax.ops.segment_sum(jnp.broadcast_to(weight, ub.shape).reshape(-1), index.reshape(-1),
                                         n_leaves << b.depth)
            out.append(counts.reshape(ub.shape[:2] + (1 << b.depth,)))
    return tuple(out)


def _histogram_batch(ens: TreeEnsemble, batch_size: int | None) -> int:
    """Background rows per step of :func:`_pattern_histogram_kernel`: at most
    :data:`_HISTOGRAM_INTS` patterns (and ``batch_size``)."""
    rows = 1 << max(6, (_HISTOGRAM_INTS // max(ens.n_trees * ens.n_leaves, 1)).bit_length() - 1)
    return rows if batch_size is None else min(rows, batch_size)


@functools.partial(jax.jit, static_argnames=("layout",))
def _interventional_tables(plan: Plan, histograms: tuple[Array, ...], *, layout: Layout) -> Plan:
    parts, tables = list(plan.parts), iter(histograms)
    for i, b in enumerate(layout):
        if b.tables:
            histogram = next(tables)  # [n_chunks, L_b, 2**D_b]
            dist = safe_div(histogram, jnp.sum(histogram, axis=-1, keepdims=True), 0.0)
            table = interventional_table(dist.reshape(-1, dist.shape[-1]), b.depth)
            parts[i] = parts[i]._replace(table=table.reshape(dist.shape[:2] + table.shape[1:]))
    return plan._replace(parts=tuple(parts))


# --------------------------------------------------------------------------------------------
# Public kernels


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



def _background_blocks(background: np.ndarray, n_leaves: int) -> tuple[Array, Array]:
    """``(f32[nB, Bc, E], f32[nB, Bc])`` background rows in blocks, weights ``1 / B`` (0 on
    padding); a block's patterns at the model's ``n_leaves`` leaves within :data:`_PATTERN_INTS`."""
    b = len(background)
    size = min(_BACKGROUND_BLOCK, b, max(_MIN_STEP_ROWS, _PATTERN_INTS // max(n_leaves, 1)))
    n_blocks = -(-b // size)
    rows = jnp.pad(jnp.asarray(background, jnp.float32), ((0, n_blocks * size - b), (0, 0)))  # traced rows too
    weights = jnp.pad(jnp.full(b, 1.0 / b, jnp.float32), (0, n_blocks * size - b))
    return rows.reshape(n_blocks, size, -1), weights.reshape(n_blocks, size)


def _kernel_plan(ens: TreeEnsemble, name: str, weights: Array, platform: str, n_background: int = 0,
                 n_rows: int | None = None) -> ShapPlan:
    """The plan of kernel ``name`` with the tables of the path-dependent kinds built."""
    layout, players = _layout(ens, name, n_background, n_rows)
    kind = Kind(name, layout)
    step = _step(ens, kind, platform)
    n_trees = -(-ens.n_trees // step.trees) * step.trees
    leaves = bucket_leaves(players, layout, n_trees, ens.n_leaves, step.leaves)
    model = covered(ens, weights) if name != "interventional" else ens
    table = "" if name == "interventional" else name
    return ShapPlan(kind, _plan(model, weights, leaves, trees=step.trees, layout=layout, table=table), step.rows)


def _rows_hint(x: Any) -> int | None:
    """The number of rows ``x`` to explain, rounded down to a power of two in ``[64, 2**16]``
    (layouts change only at those steps), or None when not known."""
    n = getattr(x, "shape", (None,))[0]
    return None if n is None else 1 << int(np.clip(int(n), 64, 1 << 16)).bit_length() - 1


@dataclasses.dataclass(frozen=True)
class ShapPlan:
    """What a row kernel of a :class:`TreeEnsemble`'s SHAP values reads, computed once per model
    (and background): what ``jaximp.Explainer`` keeps.

    Attributes:
        kind: the kernel (``kind.name``: "path", "interventional", "pairs", or "saabas") and
            its buckets of leaves.
        arrays: the kernel's per-tree arrays and per-leaf tables (:class:`Plan`), or for
            Saabas the leaf weights ``f32[T, L]`` of its cover-weighted means.
        step_rows: rows per step of the kernel's loop (0 for Saabas).
    """

    kind: Kind
    arrays: Any
    step_rows: int


def plan(ens: TreeEnsemble, method: str = "path_dependent", background: Any = None, *, x: Any = None,
         batch_size: int | None = None, devices: Any = None, fn_name: str = "shap_values") -> ShapPlan:
    """Per-leaf tables of ``ens`` for ``method``, computed once.

    ``background``: checked rows ``f32[B, E]`` for ``method="interventional"``. ``x``: the
    checked rows to be explained, whose leaf counts are the weights of a model file that carries
    none (``jaximp._leaves.predict.training_leaf_weights``), and whose number weighs building
    tables against quadrature (256 rows without ``x``).
    """
    if method == "approximate":  # the plan is the leaf weights of the Saabas means
        weights = training_leaf_weights(ens, x, batch_size=batch_size, devices=devices, fn_name=fn_name)
        return ShapPlan(Kind("saabas", ()), weights, 0)
    platform = _platform(devices, x, fn_name)
    n_rows = _rows_hint(x)
    if method == "path_dependent":
        weights = training_leaf_weights(ens, x, batch_size=batch_size, devices=devices, fn_name=fn_name)
        return _kernel_plan(ens, "path", weights, platform, n_rows=n_rows)
    if not isinstance(background, jax.Array):  # rows traced under jax.jit stay in JAX
        background = np.asarray(background, np.float32)
    shap_plan = _kernel_plan(ens, "interventional", ens.leaf_weights, platform, len(background), n_rows)
    arrays, kind = shap_plan.arrays, shap_plan.kind
    if any(not b.tables for b in kind.layout):
        arrays = arrays._replace(background=_background_blocks(background, ens.n_trees * ens.n_leaves))
    if any(b.tables for b in kind.layout):
        histograms = sum_rows(_pattern_histogram_kernel, (ens, arrays),
                              (background, np.ones(len(background), np.float32)),
                              batch_size=_histogram_batch(ens, batch_size), devices=devices, fn_name=fn_name,
                              kind=kind)
        arrays = _interventional_tables(arrays, histograms, layout=kind.layout)
    return dataclasses.replace(shap_plan, arrays=arrays)


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
        return to_columns(ens, out, axis=1)

    return map_blocks(block_fn, x, min(block, 256))



def expected(ens: TreeEnsemble, method: str, background: Any = None, *, plan: ShapPlan | None = None,
             x: Any = None, batch_size: int | None = None, devices: Any = None,
             fn_name: str = "expected_value") -> Array:
    """The expected raw prediction: ``f32[]`` when K == 1, else ``f32[K]``.

    The training-weighted mean (``path_dependent``, ``approximate``; for a model file without
    leaf weights, the mean over the leaf counts of the explained rows ``x``) or the mean
    prediction over the background rows ``f32[B, E]`` (``interventional``), in raw score space.
    """
    if method == "interventional":
        rows = background if isinstance(background, jax.Array) else np.asarray(background, np.float32)
        predicted = predict_rows(ens, rows, batch_size=batch_size, devices=devices, fn_name=fn_name)
        if isinstance(predicted, jax.core.Tracer):  # under jax.grad, jit or vmap: stays in JAX
            return jnp.mean(predicted, axis=0)
        mean = np.asarray(predicted, np.float64).mean(0)
        return squeeze_outputs(jnp.asarray(np.atleast_1d(mean), jnp.float32), ens.n_outputs)
    weights = training_leaf_weights(ens, x, batch_size=batch_size, devices=devices, fn_name=fn_name)
    total = jnp.sum(weights, axis=1, keepdims=True)
    mean = jnp.einsum("tl,tlk->k", safe_div(weights, total, 0.0), ens.leaf_values)
    return squeeze_outputs(ens.scale * mean + ens.bias, ens.n_outputs)


def _row_kernel(ens: TreeEnsemble, shap_plan: ShapPlan) -> tuple[Any, Any, dict]:
    """``(kernel, params, static)`` computing a plan's per-row values ``[n, F(, F), K]``."""
    if shap_plan.kind.name == "saabas":
        return _saabas_kernel, dataclasses.replace(ens, leaf_weights=shap_plan.arrays), {}
    return shap_kernel, (ens, shap_plan.arrays), dict(kind=shap_plan.kind, step_rows=shap_plan.step_rows)


def values(ens: TreeEnsemble, shap_plan: ShapPlan, x: Any, *, batch_size: int | None = None,
           devices: Any = None, reduce: bool = False, fn_name: str = "shap_values",
           progress: bool = True) -> Any:
    """SHAP (interaction) values ``f32[N, F(, F)]`` (K == 1) or ``f32[N, F(, F), K]`` of checked
    rows ``x`` from a :func:`plan`, so that explaining more rows costs only the lookups.

    With ``reduce``, the mean over rows of the values' absolute value, ``f32[F(, F)]`` (K == 1)
    or ``f32[F(, F), K]``, summed step by step (``jaximp._rows.batching.mean_abs_rows``)."""
    kernel, params, static = _row_kernel(ens, shap_plan)
    pairs = shap_plan.kind.name == "pairs"
    width = ens.n_features * ens.n_outputs * (ens.n_features if pairs else 1)
    run = mean_abs_rows if reduce else map_rows
    out = run(kernel, params, x, batch_size=batch_size, devices=devices, fn_name=fn_name,
              row_floats=width, progress=progress, **static)
    return squeeze_outputs(out, ens.n_outputs)


def interactions(ens: TreeEnsemble, x: Any, *, batch_size: int | None = None, devices: Any = None,
                 reduce: bool = False, fn_name: str = "shap_interaction_values", progress: bool = True) -> Any:
    """Path-dependent SHAP interaction values of checked rows ``x: f32[N, E]``.

    Returns:
        ``f32[N, F, F]`` when K == 1, else ``f32[N, F, F, K]``, symmetric; rows sum to the SHAP
        values (Lundberg et al. 2020, eq. 11-12). With ``reduce``, their mean absolute value over
        rows, ``f32[F, F(, K)]``.
    """
    weights = training_leaf_weights(ens, x, batch_size=batch_size, devices=devices, fn_name=fn_name)
    shap_plan = _kernel_plan(ens, "pairs", weights, _platform(devices, x, fn_name))
    return values(ens, shap_plan, x, batch_size=batch_size, devices=devices, reduce=reduce, fn_name=fn_name,
                  progress=progress)
