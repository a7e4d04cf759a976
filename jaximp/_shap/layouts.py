"""Layouts of the SHAP row kernels of general trees: the leaves of all trees in buckets of players
per path, chosen by a cost model, and in chunks of leaves.

Trees of LightGBM and of Lossguide growth are deep (20 to 30 edges) while most of their
leaves have few players (90% at most 13 on that model): padding every leaf to the most would
cost every leaf what the deepest costs. A :data:`Layout` cuts the numbers of players into
buckets, each with its own depth (its most players), and each bucket holds those leaves of all
trees, in chunks of leaves (:func:`bucket_leaves`, ``jaximp._shap.paths.flat_leaves``): a leaf
pads only to its bucket's depth, whatever the shapes of the other trees. A bucket reads as many
slots of its leaves as its depth (and all their entries where the rows' bit patterns do not hold
the slots).

Shapes: the legend of :mod:`jaximp._models` (T, L, D).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import numpy as np


@dataclasses.dataclass(frozen=True)
class Bucket:
    """The leaves of every tree whose paths hold ``shallowest < players <= depth`` players: each
    takes ``depth`` slots, and per-leaf ``tables`` or not; ``count`` of them in the model;
    without tables, quadrature nodes ``looped`` or unrolled (``jaximp._shap.games``) (hashable:
    layouts are static arguments of compiled kernels)."""

    shallowest: int
    depth: int
    tables: bool
    count: int
    looped: bool = False


Layout = tuple[Bucket, ...]


def plan_layout(players: np.ndarray | None, n_trees: int, n_leaves: int, depth: int, *, table_depth: int,
                table_floats: Callable[[int], int], table_bytes: int,
                costs: Callable[[int], tuple[float, float]] | None = None, overhead: float = 400.0,
                compile_cost: float = 0.0, node_compile_cost: float = 0.0, max_buckets: int = 6) -> Layout:
    """At most ``max_buckets`` buckets of players per path minimising a cost model of the row kernels
    (each bucket is code of its own: more buckets pad less but compile longer).

    Args:
        players: ``i32[T, L]`` players per path (``jaximp._shap.paths.path_players``), or None:
            one bucket of ``depth`` holding every leaf.
        n_trees: T, the model's trees.
        n_leaves: L, the leaves of each tree's table.
        depth: D, the model's depth.
        table_depth: the deepest bucket that may use per-leaf tables.
        table_floats: a table's floats per leaf, as a function of the bucket's depth.
        table_bytes: the budget of all tables together; deeper buckets use quadrature beyond it.
        costs: ``(table, no table)`` cost per leaf and row of a bucket, as a function of its
            depth, in ns (default :func:`path_costs`).
        overhead: a bucket's fixed cost per tree and row, in ns (its own ops at every step).
        compile_cost: a bucket's one-off cost per row, in ns: the time its code takes to compile,
            spread over the rows explained (a first call on few rows pays for every bucket).
        node_compile_cost: the same for each unrolled quadrature node of a bucket without
            tables; 0: nodes always unrolled. Else a bucket's nodes are looped where the loop's
            slower passes (:func:`loop_slowdown`) cost the rows less than compiling the nodes.

    Returns:
        :data:`Layout`, buckets from the shortest paths to the longest; leaves without splits
        (no players, no SHAP values) are in none.
    """
    if players is None:
        only = Bucket(-1, depth, depth <= table_depth, n_trees * n_leaves)
        return _fit_tables((only,), table_floats, table_bytes)
    depths, counts = np.unique(players[players > 0], return_counts=True)
    start = np.concatenate([[0], np.cumsum(counts)])

    @functools.cache
    def bucket(i: int, j: int) -> tuple[float, Bucket]:  # the leaves of depths[i:j], for any number of buckets
        d, count = int(depths[j - 1]), int(start[j] - start[i])
        table, quad = (costs or path_costs)(d)
        fits = d <= table_depth and count * table_floats(d) * 4 <= table_bytes
        tables = fits and table < quad
        shallowest = int(depths[i - 1]) if i else 0
        nodes = -(-d // 2)
        slowdown = loop_slowdown(nodes)
        looped = not tables and node_compile_cost > 0 and \
            count * quad * (slowdown - 1) < (nodes - 1) * node_compile_cost
        work = table if tables else quad * slowdown if looped else quad
        code = compile_cost + (0 if tables else node_compile_cost * (1 if looped else nodes))
        return code + overhead * n_trees + count * work, Bucket(shallowest, d, tables, count, looped)

    n = len(depths)
    best = {(0, 0): (0.0, ())}  # cheapest layout of depths[:j] in k buckets
    for k in range(1, max_buckets + 1):
        for j in range(k, n + 1):
            options = [(best[i, k - 1][0] + cost, best[i, k - 1][1] + (b,))
                       for i in range(k - 1, j) if (i, k - 1) in best for cost, b in [bucket(i, j)]]
            best[j, k] = min(options, key=lambda o: o[0])
    layout = min((best[n, k] for k in range(1, max_buckets + 1) if (n, k) in best), key=lambda o: o[0],
                 default=(0.0, ()))[1]
    return _fit_tables(layout, table_floats, table_bytes)


def loop_slowdown(nodes: int) -> float:
    """The cost of a bucket's ``nodes`` quadrature nodes looped over unrolled ones, measured on CPU
    (2,000 rows): about 1.15 up to 10 nodes (1.1 to 1.6 across buckets of LightGBM trees), and up
    to 3.3 from 11 nodes (1.3 to 3.3 for buckets of 22 to 26 slots; 3.3 for the 63,500 leaves of
    500 trees of 127 leaves, where a layout priced at 1.15 took 4.3 s a call against 2.4 s)."""
    return 1.15 if nodes <= 10 else 3.0


def path_costs(d: int, rows: int = 256, pairs: bool = False) -> tuple[float, float]:
    """``(table, quadrature)`` cost of the path-dependent games per leaf and row of a bucket of
    depth ``d``, in ns measured on CPU: ``2 (d + 2)`` per lookup plus the table's build
    (``(d + 1) 2**d`` per leaf) spread over the ``rows`` explained; quadrature
    ``4 + 0.15 d ceil(d / 2)`` for SHAP values (cheaper than a lookup at every depth a table
    holds, so their buckets have none), ``20 + 2 d ceil(d / 2)`` for interactions."""
    nodes = -(-d // 2)
    quadrature = 20.0 + 2.0 * d * nodes if pairs else 4.0 + 0.15 * d * nodes
    return 2.0 * (d + 2) + (d + 1) * (1 << d) / rows, quadrature


def interventional_costs(d: int, n_background: int, rows: int = 256) -> tuple[float, float]:
    """``(table, no table)`` cost of the interventional games per leaf and row, as
    :func:`path_costs` (measured on CPU with 2 cores): the table's build is ``ceil(d / 2)``
    superset sums of ``d 2**d`` adds at 0.5 ns per leaf, and 9 ns per leaf and background row for
    the histogram, spread over the ``rows`` explained; without a table, every row meets every
    background row at every slot, 0.5 ns each."""
    build = (0.5 * (-(-d // 2)) * d * (1 << d) + 9.0 * n_background) / rows
    return 2.0 * (d + 3) + build, 20.0 + 0.5 * d * n_background


def _fit_tables(layout: Layout, table_floats: Callable[[int], int], table_bytes: int) -> Layout:
    """Turn the deepest table buckets to quadrature until all tables fit ``table_bytes``."""
    layout = list(layout)
    size = lambda b: b.count * table_floats(b.depth) * 4  # noqa: E731
    while sum(size(b) for b in layout if b.tables) > table_bytes:
        i = max((i for i, b in enumerate(layout) if b.tables), key=lambda i: layout[i].depth)
        layout[i] = dataclasses.replace(layout[i], tables=False)
    return tuple(layout)


def bucket_leaves(players: np.ndarray | None, layout: Layout, n_trees: int, n_leaves: int,
                  sizes: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """Per bucket and its ``size`` in ``sizes``, ``i32[n_chunks, size]`` its leaves, as indices
    ``tree * L + leaf`` into the model's leaves (``jaximp._shap.paths.flat_leaves``), in chunks
    of ``size``; the last chunk ends in copies of ``n_trees * L``, the null leaf. ``n_trees``: the trees of
    ``players`` and more, all leaves of the extra trees unused (their index range pads the
    patterns of trees in chunks)."""
    null = n_trees * n_leaves
    if players is None:
        every = np.arange(null, dtype=np.int32)
        return tuple(_chunked(every, size, null) for size in sizes)
    players = np.pad(players, ((0, n_trees - len(players)), (0, 0))).reshape(-1)
    return tuple(_chunked(np.flatnonzero((players > b.shallowest) & (players <= b.depth)).astype(np.int32), size,
                          null) for b, size in zip(layout, sizes))


def _chunked(index: np.ndarray, size: int, fill: int) -> np.ndarray:
    n = max(-(-len(index) // size), 1)
    return np.pad(index, (0, n * size - len(index)), constant_values=fill).reshape(n, size)


def chunk_sizes(counts: tuple[int, ...], widths: tuple[float, ...], budget: float) -> tuple[int, ...]:
    """Leaves per chunk of each bucket of ``counts`` leaves and ``widths`` floats per leaf: within
    ``budget`` floats, split evenly (the last chunk pads the least)."""
    out = []
    for count, width in zip(counts, widths):
        most = max(1, int(budget // max(width, 1.0)))
        n = max(-(-count // most), 1)
        out.append(max(-(-count // n), 1))
    return tuple(out)
