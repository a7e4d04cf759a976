"""Plans of the SHAP row kernels of :class:`TreeEnsemble` models: what a kernel reads, computed
once per model (and background), and how its loops walk it.

A :class:`Plan` holds, per tree in chunks of trees, the nodes' splits and the
:class:`~jaximp._shap.paths.Edges` from which a row's patterns at every leaf are built
(:func:`row_patterns`), and per bucket of leaves by players per path (a
:data:`~jaximp._shap.layouts.Layout` chosen by a cost model, :func:`_layout`) a
:class:`~jaximp._shap.games.Part`: the bucket's leaves of all trees in chunks of leaves, with
their per-leaf tables where the bucket uses tables. A :class:`Step` sizes the kernel's loops
(rows per step, trees per chunk of the patterns' loop, leaves per chunk of each bucket's loop)
for a CPU cache's share on CPUs, for memory elsewhere (the platform's ``jaximp._rows.tuning``).
An interventional plan adds the background (:func:`interventional_plan`): the table buckets'
tables from the background's pattern histograms, and the background rows in blocks for the deep
buckets.

Shapes: the legend of :mod:`jaximp._models` (T, L, D, M, K, E, B), and in words ``chunk`` (the
trees of a chunk of trees), ``n_chunks``, a bucket's ``leaves`` per chunk and ``d`` its depth,
``n`` the rows of a step and ``block`` the background rows of a block.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._leaves.tables import weight_sums
from jaximp._leaves.trees import node_decisions
from jaximp._models.cache import kept
from jaximp._models.ensemble import namespace, safe_div
from jaximp._models.trees import TreeEnsemble
from jaximp._rows.batching import gc_paused, is_traced, sum_rows, unit_weights
from jaximp._rows.blocks import row_blocks
from jaximp._rows.tuning import Tuning, rows_tuning
from jaximp._shap.games import Part, interaction_path_table, interventional_table, one_group
from jaximp._shap.layouts import Layout, bucket_leaves, chunk_sizes, interventional_costs, path_costs, plan_layout
from jaximp._shap.paths import (
    Edges,
    Structure,
    bucket,
    flat_leaves,
    host_structure,
    path_players,
    patterns,
    taken_slots,
    tree_edges,
    tree_paths,
)

MAX_PAIR_DEPTH = 8  # interaction tables cost 4**d per leaf; deeper buckets: quadrature
MAX_INTERVENTIONAL_DEPTH = 16  # interventional tables: 3 * 2**d floats per leaf, within table_bytes
_BIT_DEPTH = 30  # row patterns are int32 bit masks of the slots; deeper buckets count missed edges
# The background's blocks are part of a row's arithmetic (the order of its sums over the background),
# so they are the same on every platform: not tuning
_BACKGROUND_BLOCK = 256  # background rows per step of the deep interventional kernel
_BACKGROUND_PATTERN_INTS = 1 << 25  # a block's patterns at every leaf of the model (128 MiB)
_MIN_BACKGROUND_BLOCK = 16


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Plan:
    """Everything a row kernel reads (a pytree).

    Attributes:
        node_features, node_borders, node_nan_right, node_categorical, node_categories: the
            nodes' splits (``TreeEnsemble``'s fields), per tree in chunks of trees
            ``[n_chunks, chunk, M, ...]``; the last two None without set-membership splits.
        edges: the :class:`~jaximp._shap.paths.Edges` of the rows' patterns, in chunks of trees.
        parts: per bucket of the kernel's :data:`~jaximp._shap.layouts.Layout`, a
            :class:`~jaximp._shap.games.Part` of its leaves of all trees in chunks of leaves
            ``[n_chunks, leaves, ...]``.
        background: the deep interventional buckets' background rows in blocks
            ``(f32[n_blocks, block, E], f32[n_blocks, block])`` (:func:`_background_blocks`), or None.
    """

    node_features: Array
    node_borders: Array
    node_nan_right: Array
    node_categorical: Array | None
    node_categories: Array | None
    edges: Edges
    parts: tuple[Part, ...]
    background: Any = None


@dataclasses.dataclass(frozen=True)
class Kind:
    """The static description of a plan (hashable: a static argument of the compiled kernels):
    ``name`` ("path", "interventional" or "pairs"; "saabas" for a Saabas plan) and the buckets'
    :data:`~jaximp._shap.layouts.Layout`."""

    name: str
    layout: Layout


@dataclasses.dataclass(frozen=True)
class Step:
    """How a row kernel walks a plan: ``rows`` per step, ``trees`` per chunk of the patterns'
    loop and, per bucket, ``leaves`` per chunk of its loop."""

    rows: int
    trees: int
    leaves: tuple[int, ...]


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


# --------------------------------------------------------------------------------------------
# Layouts and steps


def _table_floats(name: str, n_outputs: int):
    """A bucket's table floats per leaf, as a function of its depth."""
    return {"path": lambda d: 0, "interventional": lambda d: 3 << d,  # SHAP values: no tables
            "pairs": lambda d: (d * d * n_outputs) << d}[name]


def _width(name: str, tables: bool, d: int, k: int) -> int:
    """Floats per leaf and row that a step of a bucket of depth ``d`` holds (``k`` outputs)."""
    if name == "pairs":
        return d * d * k + d if tables else d * d * (k + 3) + 6 * d
    if name == "interventional" and not tables:
        return d * k + 3 * min(_BACKGROUND_BLOCK, 64) + 6 * d
    return d * k + (3 if tables else 6) * d


def _layout(ens: TreeEnsemble, name: str, tuning: Tuning, n_background: int = 0,
            structure: Structure | None = None) -> tuple[Layout, np.ndarray | None]:
    """The buckets of ``ens`` for kernel ``name`` and the players on the leaves' paths (None when
    traced).

    The layout is the model's, whatever the rows: a row's values never depend on how many rows
    come with it, nor on whether the compilation cache is on (buckets and looped quadrature nodes
    each round differently). It is planned for the tuning's ``layout_rows``, over which a bucket's
    compile time is spread: the layout that explains many rows fastest, and no slower to compile
    than those once chosen for a first call on few rows (100 LightGBM trees of 63 leaves, 1,000
    rows: 1.6 s to a first call's result against 2.0 s, then 0.10 s a call against 0.35 s)."""
    players = path_players(ens, structure)
    table_depth = {"pairs": MAX_PAIR_DEPTH, "path": 0, "interventional": MAX_INTERVENTIONAL_DEPTH}[name]
    rows = tuning.layout_rows
    costs = ((lambda d: path_costs(d, rows, pairs=name == "pairs")) if name != "interventional"
             else lambda d: interventional_costs(d, n_background, rows))
    layout = plan_layout(players, ens.n_trees, ens.n_leaves, ens.depth, table_depth=min(table_depth, _BIT_DEPTH),
                         table_floats=_table_floats(name, ens.n_outputs), table_bytes=tuning.table_bytes,
                         costs=costs, compile_cost=tuning.bucket_compile_ns / rows,
                         node_compile_cost=tuning.node_compile_ns / rows if name == "path" else 0.0)
    return layout, players


def _step(ens: TreeEnsemble, kind: Kind, tuning: Tuning, width: Callable[[int], float] | None = None) -> Step:
    """The :class:`Step` of ``kind`` with ``tuning``: the tuning's ``tree_step_rows``, halved
    while the rows' patterns at every leaf exceed ``tree_pattern_ints`` (down to
    ``tree_min_step_rows``), and each chunk's intermediates within ``tree_chunk_floats`` (a CPU
    cache's share on CPUs, a memory bound elsewhere); ``width(d)``: the floats per leaf and row
    of a bucket of depth ``d``, where the kernel is not the kind's own (:func:`_width`)."""
    rows, budget = tuning.tree_step_rows, tuning.tree_chunk_floats
    while rows > tuning.tree_min_step_rows and ens.n_trees * ens.n_leaves * rows > tuning.tree_pattern_ints:
        rows //= 2
    trees = int(max(1, min(ens.n_trees, budget // (4 * ens.n_nodes * rows))))
    widths = tuple(_width(kind.name, b.tables, b.depth, ens.n_outputs) if width is None else width(b.depth)
                   for b in kind.layout)
    return Step(rows, trees, chunk_sizes(tuple(b.count for b in kind.layout), widths, budget / rows))


# --------------------------------------------------------------------------------------------
# Reading a plan: the rows' patterns at its leaves


def _slots(kind: Kind) -> int:
    """The most slots of any bucket of ``kind``."""
    return max((b.depth for b in kind.layout), default=0)


def row_patterns(kind: Kind, plan: Plan, xt: Array) -> tuple[Array, Array | None]:
    """``(i32[T L + 1, n], bool[T M, n] | None)``: the patterns of rows ``xt f32[E, n]`` over the
    slots an int32 holds at every leaf of the (chunk-padded) trees, tree-major, and 0 at the
    null leaf (``jaximp._shap.paths.flat_leaves``); and, for paths of more players than that,
    the rows' decisions at every node."""
    deep = _slots(kind) > _BIT_DEPTH

    def one(chunk):
        decisions = node_decisions(chunk, xt)
        return patterns(chunk.edges, decisions, min(_slots(kind), _BIT_DEPTH)), decisions if deep else None

    u, decisions = jax.lax.map(one, dataclasses.replace(plan, parts=(), background=None))  # [n_chunks, chunk, L(M), n]
    u = u.reshape((-1,) + u.shape[3:])
    u = jnp.concatenate([u, jnp.zeros_like(u[:1])])
    return u, None if decisions is None else decisions.reshape((-1,) + decisions.shape[3:])


def bucket_pattern(u: Array, part: Part, d: int) -> Array | None:
    """``i32[groups, leaves, n]`` the patterns of a bucket's leaves ``part.leaves i32[groups,
    leaves]`` over its ``d`` slots, from :func:`row_patterns`; None beyond an int32's bits."""
    return u[part.leaves] & ((1 << d) - 1) if d <= _BIT_DEPTH else None


def taken(part: Part, u: Array, decisions: Array | None, d: int) -> Array:
    """``f32[1, leaves, d, n]`` ``jaximp._shap.paths.taken_slots`` of a chunk of a bucket
    (grouped), from :func:`row_patterns`."""
    return taken_slots(part.paths, bucket_pattern(u, part, d), None if decisions is None else decisions[None])


# --------------------------------------------------------------------------------------------
# Building a plan


def _pad_trees(tree: Any, chunk: int) -> Any:
    """Per-tree arrays ``[T, ...]`` zero-padded to whole chunks of ``chunk`` trees."""
    return jax.tree_util.tree_map(lambda a: row_blocks(a, chunk).reshape((-1,) + a.shape[1:]), tree)


def covered(weights: Array, values: Array) -> tuple[Array, Array]:
    """The leaf weights ``weights f32[T, L]`` as floats, and the leaf values ``values f32[T, L, K]``
    with those of leaves of negligible weight set to 0.

    CatBoost's path-dependent recursion over non-symmetric trees
    (``CalcNonObliviousInternalShapValuesForLeafRecursive``, catboost/libs/fstr/shap_values.cpp)
    never enters a child whose subtree weight is ``FuzzyEquals(1 + w, 1)``, hot or cold, so such
    leaves take no part in SHAP values or interactions. Trained weights rarely have them (and
    their leaves are 0 then); weights counted on explained rows often do. Zeroing their values
    drops exactly those leaves from the games (tables and quadrature), whose terms are linear in
    the value.
    """
    xp = namespace(weights, values)
    negligible = xp.abs(weights) <= 1e-13 * xp.minimum(xp.abs(1.0 + weights), 1.0)
    values = xp.where(negligible[..., None], 0.0, values).astype(values.dtype)
    if not xp.issubdtype(weights.dtype, xp.floating):  # float64 weights stay float64
        weights = weights.astype(xp.float32)
    return weights, values


def _plan(ens: TreeEnsemble, weights: Array, leaves: tuple[Array, ...], structure: Structure | None, *, trees: int,
          layout: Layout, table: str = "") -> Plan:
    """The plan of ``ens`` with covers from ``weights f32[T, L]``, ``trees`` per chunk of trees
    and each bucket's ``leaves i32[n_chunks, leaves]`` (``jaximp._shap.layouts.bucket_leaves``);
    ``table``: the path-dependent kinds, "path" or "pairs" (:func:`covered` leaves, and the
    tables of the buckets that use tables), or "" (interventional: no tables yet);
    ``structure``: the trees' :class:`jaximp._shap.paths.Structure` (None when traced).

    NumPy ``weights`` (with the structure) build the plan in NumPy, from the model's arrays
    copied to the host (:func:`_on_host`); else it is traced as a JAX program."""
    host = namespace(weights) is np
    xp, field = (np, lambda a: None if a is None else np.asarray(a)) if host else (jnp, lambda a: a)
    values = field(ens.leaf_values)
    if table:
        weights, values = covered(weights, values)
    paths = tree_paths(ens, weights, structure)
    edges = tree_edges(ens, paths, structure)
    paths = flat_leaves(_pad_trees(paths, trees), ens.n_nodes)  # [T L + 1, D]
    values = _pad_trees(field(ens.scale) * values, trees)
    values = xp.concatenate([values.reshape(-1, values.shape[-1]), xp.zeros_like(values[0, :1])])  # the null leaf's
    parts = []
    for b, index in zip(layout, leaves):
        index = xp.asarray(index)
        entries = 0 if b.depth <= _BIT_DEPTH else ens.depth  # edges, where bit patterns do not hold the slots
        part, value = bucket(paths, index, b.depth, entries), values[index]  # [n_chunks, leaves, d], [..., K]
        if b.tables and table == "pairs":
            data = jax.lax.map(lambda p: interaction_path_table(one_group(p))[0], part)
            data = data[..., None] * value[:, :, None, None, None, :]
        else:
            data = xp.zeros((index.shape[0], 0), xp.float32)
        parts.append(Part(part, value, data, index))
    nodes = Plan(*(field(a) for a in (ens.node_features, ens.node_borders, ens.node_nan_right, ens.node_categorical,
                                      ens.node_categories)), edges, ())
    chunked = jax.tree_util.tree_map(lambda a: row_blocks(a, trees), nodes)  # [n_chunks, chunk, ...]
    return dataclasses.replace(chunked, parts=tuple(parts))


_PLAN = jax.jit(_plan, static_argnames=("trees", "layout", "table"))

# A plan is built once per call. In NumPy it takes a few hundredths of a second, where compiling it
# as a JAX program took 0.4 s (100 LightGBM trees of 63 leaves, 28 deep; with LLVM's optimizations
# 0.9 s) for a first call; both hold O(T L D) entries (400 LightGBM trees of 127 leaves, 35 deep:
# 0.26 s in NumPy, 1.5 s for the program's first call and 0.24 s for its next). Models of more path
# entries than the tuning's host_plan_entries, the interaction tables' products (table "pairs") and
# a plan traced inside another program (under jax.jit or jax.grad) take the JAX program.


def _on_host(ens: TreeEnsemble, weights: Array, table: str, tuning: Tuning, x: Any = None) -> bool:
    """Whether the plan of ``ens`` and ``weights`` for the rows ``x`` is built in NumPy (up to
    the tuning's ``host_plan_entries``): not when any of them is traced."""
    small = ens.n_trees * ens.n_leaves * ens.depth <= tuning.host_plan_entries
    return table != "pairs" and small and not is_traced((ens, weights, x))


def kernel_plan(ens: TreeEnsemble, name: str, weights: Array, *, x: Any, devices: Any, fn_name: str,
                n_background: int = 0, width: Callable[[int], float] | None = None) -> ShapPlan:
    """The plan of kernel ``name`` ("path", "pairs" or "interventional") with covers from
    ``weights f32[T, L]``, for the rows ``x`` on ``devices`` (their tuning sizes the steps),
    with the tables of the path-dependent kinds built; ``width``: as for :func:`_step`, for
    another kernel over the same plan (the interaction indices' over a "path" plan)."""
    tuning = rows_tuning(devices, x, fn_name)
    structure = host_structure(ens)  # once: the layout and the plan read it
    layout, players = _layout(ens, name, tuning, n_background, structure)
    kind = Kind(name, layout)
    step = _step(ens, kind, tuning, width)
    n_trees = -(-ens.n_trees // step.trees) * step.trees
    leaves = bucket_leaves(players, layout, n_trees, ens.n_leaves, step.leaves)
    table = "" if name == "interventional" else name
    built = dict(trees=step.trees, layout=layout, table=table)

    def build() -> Plan:
        if _on_host(ens, weights, table, tuning, x):  # on the default device, as the program's would be
            return jax.device_put(_plan(ens, np.asarray(weights), leaves, structure, **built))
        with gc_paused():  # a first call traces and lowers the plan's program here
            return _PLAN(ens, weights, leaves, structure, **built)

    keep = weights is ens.leaf_weights and not is_traced((ens, weights, x))  # kept for the model's next call
    arrays = kept(ens, ("plan", table, layout, step.trees, tuple(a.shape for a in leaves)), build, keep=keep)
    return ShapPlan(kind, arrays, step.rows)


# --------------------------------------------------------------------------------------------
# The background of an interventional plan


def _background_blocks(background: np.ndarray, n_leaves: int) -> tuple[Array, Array]:
    """``(f32[n_blocks, block, E], f32[n_blocks, block])`` background rows in blocks, weights
    ``1 / B`` (0 on padding); a block's patterns at the model's ``n_leaves`` leaves within
    :data:`_BACKGROUND_PATTERN_INTS`."""
    b = len(background)
    size = min(_BACKGROUND_BLOCK, b, max(_MIN_BACKGROUND_BLOCK, _BACKGROUND_PATTERN_INTS // max(n_leaves, 1)))
    rows = jnp.asarray(background, jnp.float32)  # traced rows too
    return row_blocks(rows, size), row_blocks(jnp.full(b, 1.0 / b, jnp.float32), size)


def _pattern_histogram_kernel(params: tuple[TreeEnsemble, Plan], rows: tuple[Array, Array], *,
                              block: int, kind: Kind) -> tuple[Array, ...]:
    """Per table bucket, ``f32[n_chunks, leaves, 2**d]`` weight of the rows ``(x, weight)`` per
    leaf pattern. The patterns of all the step's rows are built and counted by one scatter (a
    scatter inside XLA's loop runs ten times slower on CPU), so steps are kept to the tuning's
    ``histogram_ints`` patterns (:func:`_histogram_batch`)."""
    ens, plan = params
    x, weight = jnp.asarray(rows[0]), jnp.asarray(rows[1])
    u, _ = row_patterns(kind, plan, x.T)  # [T L + 1, n]
    out = []
    for b, part in zip(kind.layout, plan.parts):
        if b.tables:
            ub = bucket_pattern(u, part, b.depth)  # [n_chunks, leaves, n]
            n_leaves = ub.shape[0] * ub.shape[1]
            index = (jnp.arange(n_leaves, dtype=jnp.int32).reshape(ub.shape[:2] + (1,)) << b.depth) + ub
            counts = weight_sums(index, weight, n_leaves << b.depth)
            out.append(counts.reshape(ub.shape[:2] + (1 << b.depth,)))
    return tuple(out)


def _histogram_batch(ens: TreeEnsemble, batch_size: int | None, tuning: Tuning) -> int:
    """Background rows per step of :func:`_pattern_histogram_kernel`: at most the tuning's
    ``histogram_ints`` patterns (and ``batch_size``)."""
    rows = 1 << max(6, (tuning.histogram_ints // max(ens.n_trees * ens.n_leaves, 1)).bit_length() - 1)
    return rows if batch_size is None else min(rows, batch_size)


@functools.partial(jax.jit, static_argnames=("layout",))
def _interventional_tables(plan: Plan, histograms: tuple[Array, ...], *, layout: Layout) -> Plan:
    """``plan`` with the table buckets' tables built from their background pattern histograms
    ``f32[n_chunks, leaves, 2**d]`` (``jaximp._shap.games.interventional_table``)."""
    parts, tables = list(plan.parts), iter(histograms)
    for i, b in enumerate(layout):
        if b.tables:
            histogram = next(tables)  # [n_chunks, leaves, 2**d]
            dist = safe_div(histogram, jnp.sum(histogram, axis=-1, keepdims=True), 0.0)
            table = interventional_table(dist.reshape(-1, dist.shape[-1]), b.depth)
            parts[i] = dataclasses.replace(parts[i], table=table.reshape(dist.shape[:2] + table.shape[1:]))
    return dataclasses.replace(plan, parts=tuple(parts))


def interventional_plan(ens: TreeEnsemble, background: Any, *, x: Any, batch_size: int | None, devices: Any,
                        fn_name: str) -> ShapPlan:
    """The interventional plan of ``ens`` over checked background rows ``f32[B, E]``, for the
    rows ``x`` (:func:`kernel_plan`): per-leaf
    tables of the background's pattern distribution in the table buckets, the background rows in
    blocks for the others."""
    if not isinstance(background, jax.Array):  # rows traced under jax.jit stay in JAX
        background = np.asarray(background, np.float32)
    shap_plan = kernel_plan(ens, "interventional", ens.leaf_weights, x=x, devices=devices, fn_name=fn_name,
                            n_background=len(background))
    arrays, kind = shap_plan.arrays, shap_plan.kind
    if any(not b.tables for b in kind.layout):
        arrays = dataclasses.replace(arrays, background=_background_blocks(background, ens.n_trees * ens.n_leaves))
    if any(b.tables for b in kind.layout):
        histograms = background_histograms(ens, dataclasses.replace(shap_plan, arrays=arrays), background,
                                           batch_size=batch_size, devices=devices, fn_name=fn_name)
        arrays = _interventional_tables(arrays, histograms, layout=kind.layout)
    return dataclasses.replace(shap_plan, arrays=arrays)


def background_histograms(ens: TreeEnsemble, shap_plan: ShapPlan, background: Any, *, batch_size: int | None,
                          devices: Any, fn_name: str) -> tuple[Array, ...]:
    """Per table bucket of an "interventional" plan, ``f32[n_chunks, leaves, 2**d]`` how many
    of the background rows ``f32[B, E]`` have each pattern at each leaf, counted on the devices."""
    return sum_rows(_pattern_histogram_kernel, (ens, shap_plan.arrays), (background, unit_weights(background)),
                    batch_size=_histogram_batch(ens, batch_size, rows_tuning(devices, background, fn_name)),
                    devices=devices, fn_name=fn_name, kind=shap_plan.kind)
