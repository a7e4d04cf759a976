"""Permutation importance from per-row step functions: a lookup per feature and repeat.

sklearn's definition (Breiman 2001; ``sklearn.inspection.permutation_importance``):
the importance of a feature in repeat ``r`` is the baseline score minus the score after the
feature's column has been shuffled across rows. sklearn predicts the whole model again for
every (feature, repeat): ``F * R * T`` tree evaluations per row.

Here permuting column ``f`` only moves ``f``'s bin ``b``, and with the row's other columns
fixed the prediction is a step function of ``b``. In a tree whose splits on ``f`` are at
depths with thresholds ``th``, bit ``d`` of the leaf is ``b > th_d``, so as ``b`` grows past
each threshold the leaf moves one bit pattern up and the tree's value changes by an increment
``inc`` that depends only on the row's other bits (a per-split table over the row's leaf).
Sorted by threshold over all trees that use ``f``, the increments' running sum ``F_f(b)`` is
the prediction at bin ``b`` minus the one at bin 0, so

    raw with f permuted = raw + scale * (F_f(b received) - F_f(b own)).

Per row, one increment per split (``T * D`` gathers, the cost of ``D`` predictions) and one scan
give every running sum; each (feature, repeat) is then two lookups instead of ``T`` tree
evaluations. A feature group permutes several columns at once: a tree that splits on only one
of them is a step function of that column as above; a tree that splits on several (only with
``feature_groups``) gathers the value of its new leaf in each repeat.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._importances.metrics import (
    RowScore,
    as_targets,
    block_sums,
    check_scorer_targets,
    resolve_scoring,
    row_score,
    task_of,
)
from jaximp._importances.permutation_groups import check_groups, evaluated_groups, refeaturized_predictions
from jaximp._importances.permutation_trees import _permuted_kernel as _tree_permuted_kernel
from jaximp._importances.permutation_trees import tree_permutation_params
from jaximp._leaves.oblivious import gather_leaf_values, leaf_dtype, quantize, tree_leaves_from_bins
from jaximp._leaves.predict import kernels as leaf_kernels
from jaximp._models.ensemble import check_model, squeeze_outputs
from jaximp._models.oblivious import ObliviousEnsemble
from jaximp._models.trees import TreeEnsemble
from jaximp._rows.batching import (
    like_rows,
    map_rows,
    on_device,
    power_of_two_rows,
    resolve_devices,
    row_blocks,
    sum_blocks,
)
from jaximp._rows.inputs import as_features, as_raw_columns, as_weights, featurize

if TYPE_CHECKING:
    from sklearn.utils import Bunch

_CHUNK = 32  # slots per chunk of a segment's running sums: the length of the scan over places
_OTHER_CHUNK = 8  # (group, tree) pairs per chunk of the pairs that read several columns
_INCREMENT_TABLE = 1 << 24  # most entries of the per-slot increment table (deeper: computed per row)
_CPU_BLOCK = 256  # rows per fused block on CPU: its running sums stay in the last-level cache
_CPU_BATCH = 4096  # rows per device step on CPU: little padding, few compiled shapes
_ACCELERATOR_BYTES = 1 << 31  # rough bound on a step's per-slot intermediates elsewhere


class _Plan(NamedTuple):
    """Where each group's permutation can change each tree, laid out for the kernel.

    Slots are the splits of the (group, tree) pairs whose splits on the group read one column
    (every pair, without ``feature_groups``). A segment is a (group, column); its slots are
    sorted by (threshold, depth), so that ``F(b)``, the sum of the increments of the slots with
    threshold ``< b``, is a running sum up to a slot. Slot ``s``'s increment, for the row's
    leaf ``l`` in its tree, is ``v[(l & keep_s) | above_s] - v[(l & keep_s) | below_s]``: its
    tree's value once the bin has passed the split, minus just before (``keep_s``: the tree's
    bits not on the column; ``above_s``/``below_s``: its bits on the column at splits up to /
    before ``s`` in the order). Tied thresholds telescope, so each tree counts once.

    Slot 0 is padding, then all segments one after the other, padded at the end to ``Q``
    chunks of ``C``. Slot ``p`` is place ``p % C`` of chunk ``p // C``, stored ``[C, Q]``, so
    that one scan over the ``C`` places computes every chunk's running sums at once. Segment
    ``k`` starts after its anchor slot ``a_k``; its running sum at slot ``p`` is the chunk's
    sum up to ``p``, plus the totals of the chunks from ``a_k``'s up to ``p``'s, minus the
    chunk's sum up to ``a_k``.

    slot_tree: ``i32[C, Q]`` the tree of each slot (``T``, an all-zero tree, on padding).
    slot_keep, slot_above, slot_below: ``i32[C, Q]`` the slot's leaf bits (see above).
    seg_feature: ``i32[S]`` the column each segment reads.
    seg_anchor: ``i32[S]`` its anchor slot, as the row ``c * K Q + q`` of the running sums
        ``[C, K, Q]`` of output 0 (output ``k``: ``+ k Q``).
    seg_slot: ``i32[S, B + 1]`` for each bin ``b``, the slot (as a row, the same way) whose
        running sum is ``F(b)``: the anchor plus the number of the segment's thresholds ``< b``.
    seg_rank: ``i32[S, B + 1]`` ``k * Kmax +`` that slot's chunk minus the anchor's chunk.
    seg_chunks: ``i32[S, Kmax]`` the chunks from the anchor's on (``Q``, all zero, past the
        segment's last).

    Pairs whose splits on the group read several of its columns ("other" pairs, only with
    ``feature_groups``) gather the value of their new leaf in each repeat, in chunks of one group:
    tree ``i32[Q2, C2]`` (``T`` on padding), keep ``[Q2, C2]`` the bits not on the group, and
    split_feature, split_threshold, split_bit ``[Q2, C2, M]`` its splits on the group (padding
    never true, bit 0). Q2 is 0 without such pairs.

    groups: ``i32[G, M]`` each group's segments and other chunks among the ``S + Q2`` (``S + Q2``:
        nothing).
    """

    slot_tree: Array
    slot_keep: Array
    slot_above: Array
    slot_below: Array
    seg_feature: Array
    seg_anchor: Array
    seg_slot: Array
    seg_rank: Array
    seg_chunks: Array
    tree: Array
    keep: Array
    split_feature: Array
    split_threshold: Array
    split_bit: Array
    groups: Array


def _make_plan(ens: ObliviousEnsemble, groups: list[np.ndarray]) -> _Plan:
    """The segments' slots, the other pairs, and each group's share of both."""
    g, t, d, f = _splits_on_groups(ens, groups)  # [N] each: every split on a column of a group
    pair = np.cumsum(np.diff(g * ens.n_trees + t, prepend=-1) != 0) - 1  # [N] its (group, tree) pair
    starts = np.searchsorted(pair, np.arange(pair[-1] + 1 if len(pair) else 0))  # [P] first split
    pair_bits = _per_pair(np.bitwise_or, 1 << d, starts)
    single = _per_pair(np.minimum, f, starts) == _per_pair(np.maximum, f, starts)  # reads one column

    on_one = single[pair]
    slots, key, threshold = _slots(ens, pair[on_one], g[on_one], t[on_one], d[on_one], f[on_one], pair_bits)
    segments, tables = _segment_tables(ens, key, threshold, *slots["slot_tree"].shape)
    other_group, other = _other_pairs(ens, g[starts[~single]], t[starts[~single]], pair_bits[~single])
    owner = np.concatenate([np.where(segments < 0, -1, segments // ens.n_evaluated), other_group])
    return _Plan(**slots, **tables, **other, groups=_group_index(owner, len(groups)))


def _slots(ens: ObliviousEnsemble, pair, g, t, d, f, pair_bits):
    """The slots of the splits of single-column pairs (``[N1]`` each): ``([C, Q] arrays by name,
    segment key and threshold of each split in slot order)``.

    Slot 0 is padding; the splits follow sorted by (segment, threshold, depth), padded at the
    end to whole chunks.
    """
    threshold = np.asarray(ens.split_bins)[t, d]
    order_key = threshold * ens.depth + d  # ties of threshold pass in depth order
    key = g * ens.n_evaluated + f  # the segment: (group, column)
    # each pair's splits, [P, D]: their order keys (-1: none) and bits
    first = np.searchsorted(pair, pair)
    pair_keys = np.full((len(pair_bits), ens.depth), -1)
    pair_keys[pair, np.arange(len(pair)) - first] = order_key
    pair_split_bits = np.zeros((len(pair_bits), ens.depth), np.int64)
    pair_split_bits[pair, np.arange(len(pair)) - first] = 1 << d

    s = np.lexsort((t, order_key, key))
    own, others, split_bits = order_key[s, None], pair_keys[pair[s]], pair_split_bits[pair[s]]
    # the tree's bits on the column once the bin has passed the slot's split, and just before
    above = np.sum(np.where((others >= 0) & (others <= own), split_bits, 0), axis=1)
    below = np.sum(np.where((others >= 0) & (others < own), split_bits, 0), axis=1)
    keep = (ens.n_leaves - 1) & ~pair_bits[pair[s]]
    chunk = _chunk_size(len(s) + 1, _CHUNK)
    n_q = -(-(len(s) + 1) // chunk)
    slot = np.arange(1, len(s) + 1)

    def places(values, fill):  # by slot -> [C, Q]
        return _i32(_scatter(slot, values, n_q * chunk, fill).reshape(n_q, chunk).T)

    slots = dict(slot_tree=places(t[s], ens.n_trees), slot_keep=places(keep, 0),
                 slot_above=places(above, 0), slot_below=places(below, 0))
    return slots, key[s], threshold[s]


def _segment_tables(ens: ObliviousEnsemble, key: np.ndarray, threshold: np.ndarray, chunk: int, n_q: int):
    """``(segment keys [S], seg_* tables by name)`` for slots in ``[C, Q]`` holding the splits of
    segment ``key`` (sorted, ``[N1]``) from slot 1 on.

    Segment ``k`` holds slots ``first + 1 .. first + count``; its anchor is slot ``first``, and
    ``F(b)`` the running sum from there to ``first + #{thresholds < b}``.
    """
    segments, first, count = np.unique(key, return_index=True, return_counts=True)
    if not len(segments):  # one segment of no slots, in no group, so that no table is empty
        segments, first, count = np.array([-1]), np.zeros(1, int), np.zeros(1, int)
    n_bins = ens.borders.shape[1] + 1
    # [S, B + 1] the slot of F(b): first + #{thresholds < b}, where the splits sort after (k, b)
    query = np.searchsorted(key * n_bins + threshold, (segments * n_bins)[:, None] + np.arange(n_bins))
    span = (first + count) // chunk - first // chunk + 1  # chunks from the anchor's to the last slot's
    most = int(span.max(initial=1))

    def row(p):  # slot p -> its row c * K Q + q in the [C, K, Q] running sums of output 0
        return _i32((p % chunk) * (ens.n_outputs * n_q) + p // chunk)

    rank = query // chunk - first[:, None] // chunk
    return segments, dict(
        seg_feature=_i32(np.maximum(segments, 0) % ens.n_evaluated), seg_anchor=row(first), seg_slot=row(query),
        seg_rank=_i32(np.arange(len(segments))[:, None] * most + rank),
        seg_chunks=_i32(np.where(np.arange(most) < span[:, None], first[:, None] // chunk + np.arange(most), n_q)),
    )


def _other_pairs(ens: ObliviousEnsemble, group: np.ndarray, tree: np.ndarray, bits: np.ndarray):
    """``(group of each chunk [Q2], arrays by name)``: the pairs that read several columns of
    their group (``[P2]`` each, sorted by group), in chunks of one group; Q2 = 0 without any."""
    chunk = _chunk_size(_run_lengths(group).max(initial=1), _OTHER_CHUNK)
    chunk_group, at = _chunk_layout(group, chunk)
    other = _scatter(at, tree, len(chunk_group) * chunk, ens.n_trees).reshape(-1, chunk)
    keep = _scatter(at, (ens.n_leaves - 1) & ~bits, other.size, ens.n_leaves - 1).reshape(other.shape)
    split_feature, split_threshold, split_bit = _group_splits(ens, other, (ens.n_leaves - 1) & ~keep)
    leaf = leaf_dtype(ens)
    return chunk_group, dict(
        tree=_i32(other), keep=keep.astype(leaf), split_feature=split_feature,
        split_threshold=split_threshold, split_bit=split_bit.astype(leaf),
    )


def _group_index(owner: np.ndarray, n_groups: int) -> np.ndarray:
    """``i32[G, M]``: each group's entries among ``owner`` (their groups, -1: none), padded
    with ``len(owner)``."""
    ids = np.flatnonzero(owner >= 0)
    ids = ids[np.argsort(owner[ids], kind="stable")]
    rank = np.arange(len(ids)) - np.searchsorted(owner[ids], owner[ids])
    index = np.full((n_groups, max(1, int(rank.max(initial=0)) + 1)), len(owner), np.int32)
    index[owner[ids], rank] = ids
    return index


def _i32(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, np.int32)


def _per_pair(op: np.ufunc, a: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """``op`` over each pair's run of ``a`` (runs begin at ``starts``)."""
    return op.reduceat(a, starts) if len(starts) else a[:0]


def _splits_on_groups(ens: ObliviousEnsemble, groups: list[np.ndarray]):
    """``(group, tree, depth, column)`` of every split on a column of a group, sorted by
    (group, tree, depth): ``sum_g splits on g's columns`` entries, never ``G x T x D``."""
    split_tree, split_depth = np.nonzero(np.asarray(ens.split_mask))
    split_feature = np.asarray(ens.split_features)[split_tree, split_depth]
    by_feature = np.argsort(split_feature, kind="stable")
    first = np.searchsorted(split_feature[by_feature], np.arange(ens.n_evaluated + 1))
    member_group = np.repeat(np.arange(len(groups)), [len(c) for c in groups])
    member_feature = np.concatenate(groups).astype(np.int64)
    count = first[member_feature + 1] - first[member_feature]
    at = np.repeat(first[member_feature] - np.r_[0, np.cumsum(count)[:-1]], count) + np.arange(count.sum())
    g, t, d = np.repeat(member_group, count), split_tree[by_feature[at]], split_depth[by_feature[at]]
    order = np.lexsort((d, t, g))
    return g[order], t[order], d[order], split_feature[by_feature[at]][order]


def _chunk_size(longest: int, most: int) -> int:
    """The power of two up to ``most`` that holds ``longest`` items."""
    return min(most, 1 << max(0, int(longest) - 1).bit_length())


def _run_lengths(keys: np.ndarray) -> np.ndarray:
    """Lengths of the runs of equal values in the sorted ``keys``."""
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else np.zeros(0, int)
    return np.diff(np.r_[starts, len(keys)])


def _chunk_layout(keys: np.ndarray, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """Chunks of ``chunk`` items of one key each, for items sorted by key.

    Returns:
        ``(key of each chunk [Q], position of each item in the padded [Q * chunk] layout)``.
    """
    if not len(keys):
        return keys[:0], np.zeros(0, int)
    counts = _run_lengths(keys)
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    n_chunks = -(-counts // chunk)
    first_chunk = np.r_[0, np.cumsum(n_chunks)[:-1]]
    position = np.repeat(first_chunk * chunk - starts, counts) + np.arange(len(keys))
    return np.repeat(keys[starts], n_chunks), position


def _scatter(position: np.ndarray, values: np.ndarray, size: int, fill: int) -> np.ndarray:
    out = np.full(size, fill, np.int64)
    out[position] = values
    return out


def _group_splits(ens: ObliviousEnsemble, tree: np.ndarray, bits: np.ndarray):
    """``(feature i32, threshold i32, bit i64)`` each ``[Q, C, M]``: the splits of each pair's
    tree at the depths in ``bits [Q, C]`` (the pair's bits on its group), M the most any pair
    has; padding (also for padded pairs, tree == T) is never true and has bit 0."""
    depth_bit = 1 << np.arange(ens.depth)
    on = (bits[..., None] & depth_bit) != 0  # [Q, C, D]
    width = max(1, int(on.sum(-1).max(initial=0)))
    depth = np.argsort(~on, axis=-1, kind="stable")[..., :width]  # the set depths first
    used = np.take_along_axis(on, depth, axis=-1)
    t = np.minimum(tree, ens.n_trees - 1)[..., None]
    feature = np.where(used, np.asarray(ens.split_features)[t, depth], 0).astype(np.int32)
    threshold = np.where(used, np.asarray(ens.split_bins)[t, depth], ens.borders.shape[1]).astype(np.int32)
    return feature, threshold, np.where(used, depth_bit[depth], 0)


def _bins_kernel(ens: ObliviousEnsemble, x: Array, *, block: int) -> Array:
    return quantize(ens, x).T  # [n, F]


def _permuted_kernel(params, rows, *, block: int, cpu: bool, tabulate: bool,
                     score: RowScore | None = None) -> Any:
    """Per row: the raw prediction and the raw prediction with each group permuted.

    Args:
        params: ``(ens, plan, bins u8[N', F])``, ``bins`` the bins of every row (padded).
        rows: ``(own i32[n], source i32[n, R'])``: each row's index in ``bins`` and, per
            repeat, the index of the row whose values it receives (R' = R, or 1 when each
            repeat scores its own rows); with ``score`` also ``(y [n], weight f32[n, R])``,
            the targets and each row's weight in each repeat's score.
        block: rows per fused block (map_rows's choice). cpu: use small cache-sized blocks.
        tabulate: look each slot's increment up in a per-leaf table (else: two leaf values).
        score: None, or a score that is a sum over rows, computed block by block.

    Returns:
        Without ``score``: ``(f32[n, K], f32[n, R', G, K])``. With it, the per-block sums
        ``f32[n / b, R, G + 1, S]`` of its row terms (group 0: the baseline).
    """
    ens, plan, all_bins = params
    k, n_leaves = ens.n_outputs, ens.n_leaves
    chunk, n_q = plan.slot_tree.shape
    n_segments, most = plan.seg_chunks.shape
    # leaf values as one flat [K, (T + 1) L] table: tree T, all zeros, serves padding;
    # outputs lead every per-slot array, so that rows are the minor, vectorized axis
    table = jnp.concatenate([ens.leaf_values, jnp.zeros_like(ens.leaf_values[:1])]).reshape(-1, k).T

    # each slot's increment for every leaf of its tree, [K, C Q L] (slot c Q + q at row (c Q + q) L);
    # for deep trees, where that table is too large, two leaf values per slot and row instead
    if tabulate:
        kept = plan.slot_keep[..., None] & jnp.arange(n_leaves, dtype=jnp.int32)
        base = plan.slot_tree[..., None] * n_leaves
        increments = (table[:, base + (kept | plan.slot_above[..., None])]
                      - table[:, base + (kept | plan.slot_below[..., None])]).reshape(k, -1)
    places = (jnp.arange(chunk * n_q, dtype=jnp.int32).reshape(chunk, n_q) * n_leaves, plan.slot_tree,
              plan.slot_keep, plan.slot_above, plan.slot_below)  # [C, Q] each

    def increment(slots, leaves):  # one place of every chunk, rows' leaves [T + 1, n] -> [K, Q, n]
        start, tree, keep, above, below = (a[:, None] for a in slots)
        leaf = leaves[tree[:, 0]].astype(jnp.int32)  # [Q, n]
        if tabulate:
            return increments[:, start + leaf]
        kept = tree * n_leaves + (leaf & keep)
        return table[:, kept | above] - table[:, kept | below]  # tree * L has no bits below L

    output = jnp.arange(k, dtype=jnp.int32)[:, None, None]
    earlier = jnp.triu(jnp.ones((most, most), table.dtype), 1)  # [j, m]: chunk j comes before chunk m

    def leaves_of(bins):  # [F, n] -> [T + 1, n]; rows minor so that gathers move whole rows
        leaves = tree_leaves_from_bins(ens, bins)
        return jnp.concatenate([leaves, jnp.zeros_like(leaves[:1])])

    def one_block(block_rows):  # own [b], source [b, R'] (and y, weight)
        bins = all_bins[block_rows[0]].T  # [F, b]
        permuted = jnp.transpose(all_bins[block_rows[1]], (1, 2, 0))  # [R', F, b]
        leaves = leaves_of(bins)
        n = leaves.shape[1]
        raw = ens.scale * gather_leaf_values(ens.leaf_values, leaves[:-1]) + ens.bias  # [n, K]

        def place(running, slots):  # one place of every chunk: [K, Q, n] running sums
            running = running + increment(slots, leaves)
            return running, running  # inclusive: the carry is the output, no copy

        total, running = jax.lax.scan(place, jnp.zeros((k, n_q, n)), places)
        running = running.reshape(-1, n)  # [C K Q, n]: sums inside each chunk up to each place

        def rows_of(slot):  # slot rows of output 0 -> of every output: [K, ...]
            return slot + output * n_q

        # per segment, the sum of the chunks before each of its chunks, from its anchor on: [K S Kmax, n]
        totals = jnp.concatenate([total, jnp.zeros_like(total[:, :1])], axis=1)[:, plan.seg_chunks]
        at_anchor = running[rows_of(plan.seg_anchor)[:, 0]]  # [K, S, n]
        before = jnp.einsum("ksjn,jm->ksmn", totals, earlier)  # a small matmul: cumsum is slow on CPU
        offsets = (before - at_anchor[:, :, None]).reshape(-1, n)

        def step_sums(b):  # [S, n] bins of each segment's column -> [K, S, n] F(b)
            # every index is in bounds by construction: no bounds checks in the lookups
            take = functools.partial(jnp.take_along_axis, mode="promise_in_bounds")
            b = b.astype(jnp.int32)
            slot, rank = take(plan.seg_slot, b, axis=1), take(plan.seg_rank, b, axis=1)
            inside = take(running, rows_of(slot).reshape(-1, n), axis=0)
            before = take(offsets, (output * (n_segments * most) + rank).reshape(-1, n), axis=0)
            return (inside + before).reshape(k, n_segments, n)

        own = step_sums(bins[plan.seg_feature])
        if plan.tree.shape[0]:
            old = leaves[plan.tree]  # [Q2, C2, n]
            old_values = _sum_pairs(table[:, plan.tree[..., None] * n_leaves + old.astype(jnp.int32)])

        def one_repeat(pbins):  # [F, n]: the bins of the rows whose values the block receives
            deltas = [step_sums(pbins[plan.seg_feature]) - own]  # [K, S, n]
            if plan.tree.shape[0]:  # new bits of the other pairs: their splits on the received bins
                hits = pbins[plan.split_feature] > plan.split_threshold[..., None].astype(pbins.dtype)
                moved = jnp.sum(jnp.where(hits, plan.split_bit[..., None], 0), axis=2, dtype=old.dtype)
                new = ((old & plan.keep[..., None]) | moved).astype(jnp.int32)  # [Q2, C2, n]
                deltas.append(_sum_pairs(table[:, plan.tree[..., None] * n_leaves + new]) - old_values)
            deltas.append(jnp.zeros_like(deltas[0][:, :1]))  # nothing: the padding of groups
            delta = jnp.concatenate(deltas, axis=1)[:, plan.groups]  # [K, G, M, n]
            return raw.T[:, None] + ens.scale * jnp.sum(delta, axis=2)  # [K, G, n]

        out = jax.lax.map(one_repeat, permuted)  # [R', K, G, b]
        if score is None:
            return raw, out
        base = jnp.broadcast_to(raw.T[None, :, None], (out.shape[0], k, 1, n))
        both = jnp.concatenate([base, out], axis=2).transpose(0, 2, 3, 1)  # [R', G + 1, b, K]
        return block_sums(score, block_rows[2], block_rows[3], both)

    # Rows go through in blocks; each block gathers its rows' bins laid out rows-minor ([F, b]):
    # transposed inside a block, every gather of a row of bins would read it with a stride.
    block = min(block, _CPU_BLOCK) if cpu else block
    n, repeats = rows[1].shape[:2]
    out = jax.lax.map(one_block, jax.tree_util.tree_map(lambda a: row_blocks(a, block), rows))
    if score is not None:
        return out  # [B, R, G + 1, S]
    raw, out = out  # [B, b, K], [B, R', K, G, b]
    out = out.transpose(0, 4, 1, 3, 2).reshape(-1, repeats, out.shape[3], k)
    return raw.reshape(-1, k)[:n], out[:n]


def _sum_pairs(x: Array) -> Array:
    """``[K, Q, C, n] -> [K, Q, n]``: the sum over a chunk's pairs as a tree of elementwise adds
    (C is a power of two), which XLA fuses with the computation of ``x`` into one pass."""
    while x.shape[2] > 1:
        half = x.shape[2] // 2
        x = x[:, :, :half] + x[:, :, half:]
    return x[:, :, 0]


def permutation_importance(
    ens: ObliviousEnsemble | TreeEnsemble,
    X: Any,
    y: Any,
    *,
    scoring: Any = None,
    n_repeats: int = 5,
    random_state: Any = None,
    sample_weight: Any = None,
    max_samples: float = 1.0,
    feature_groups: Any = None,
    batch_size: int | None = None,
    devices: Any = None,
    progress: bool = True,
) -> Bunch:
    """Permutation importance: the drop in score when a feature's column is shuffled.

    ``importances[f, r] = score(y, raw(X)) - score(y, raw(X with column f permuted in repeat r))``,
    sklearn's definition (``sklearn.inspection.permutation_importance``, Breiman 2001). With a
    row's other columns fixed, its prediction is a step function of column ``f``'s value (one
    step per split on ``f``), so each (feature, repeat) costs two lookups in that function
    instead of a new prediction of every tree.

    Randomness: repeat ``r`` uses one permutation of the rows for every feature or group (as
    sklearn, whose features share their permutations), drawn from ``fold_in(key, r)``; the
    result depends only on ``random_state``, never on ``batch_size`` or ``devices``. sklearn's
    own random permutations cannot be reproduced, so the two agree within sampling error.

    Args:
        ens: the model.
        X: ``[N, F]`` rows (NumPy/JAX array, pandas/polars DataFrame, catboost.Pool);
            categorical columns hold their raw values, and permuting one re-evaluates the one-hot
            and CTR splits that read it.
        y: ``[N]`` targets, class labels of a classifier (matched to ``ens.class_names``), or
            ``[N, K]`` for multi-regression.
        scoring: None (minus the model's own loss, as CatBoost computes it: ``RMSE``,
            ``Logloss``, ``MultiClass``, ``MultiRMSE``, ...), an sklearn scorer name
            (``"neg_root_mean_squared_error"``, ``"r2"``, ``"accuracy"``, ``"neg_log_loss"``,
            ``"roc_auc"``, ``"f1"``, ..., each equal to the ``sklearn.metrics`` function of the
            same name with ``sample_weight``), or a jit-able JAX function
            ``(y, raw, sample_weight) -> score``, greater is better, with ``raw`` ``f32[n]`` when
            K == 1 else ``f32[n, K]``, ``y`` the targets (class indices for multiclass, 0/1 for
            binary) and ``sample_weight`` ``f32[n]`` (ones when None).
        n_repeats: R >= 1, times each feature is permuted.
        random_state: an int, None (fresh entropy), a ``jax.random`` key or a NumPy
            ``Generator``/``RandomState`` (one int is drawn from it).
        sample_weight: ``[N]`` non-negative row weights for the score, or None.
        max_samples: rows used per repeat, as sklearn: a float in ``(0, 1]`` (a fraction of N)
            or an int in ``[1, N]``. Each repeat draws its own rows without replacement; unlike
            sklearn (baseline on all rows, the same subsample in every repeat), the baseline is
            scored on the same rows as the permuted score, so unused features get exactly 0.
        feature_groups: None (one row per feature), or a list of G lists of column indices or
            feature names: the columns of a group are permuted together (the same row
            permutation), and the result has one row per group, in the given order.
        batch_size: rows per device step; None picks one for the device.
        devices: None (default device), an int or a list of ``jax.Device`` to shard rows over.
        progress: show a progress bar when the call lasts more than a few seconds.

    Where it runs: the rows (raw values, or an oblivious model's bins) go to the device once;
    each step gathers its rows and their permuted copies there, and scores that are sums over
    rows (the model's loss; the MSE, RMSE, MAE, R^2, accuracy, log loss and Brier scorers) are
    summed block by block inside the kernel, so only ``R (G + 1)`` sums per block come back (added
    in float64 on the host: identical for any batch size or device count). Other scores (ROC AUC,
    F1, functions) score the permuted predictions of all rows, ``R G N K`` floats, on the device.

    A ``TreeEnsemble`` (non-symmetric trees) takes the same arguments, draws the same
    permutations for the same ``random_state`` and is scored by the same program; its permuted
    rows are gathered on the device and predicted whole. With
    categorical features, both kinds permute the raw column: every one-hot value and CTR that
    reads it moves with it.

    Returns:
        ``sklearn.utils.Bunch(importances_mean=f64[F], importances_std=f64[F],
        importances=f64[F, R])`` (G in place of F with ``feature_groups``); std has ddof=0.
        NumPy arrays for rows in host memory; ``jax.Array``s on the rows' device (float32
        unless x64 is enabled) for rows given as one.

    Raises:
        TypeError, ValueError: bad X, y, sample_weight, scoring, n_repeats, max_samples,
            feature_groups or random_state (the message names the argument).

    Example:
        >>> r = jaximp.permutation_importance(ens, X, y, n_repeats=5, random_state=0)
        >>> r.importances_mean.shape, r.importances.shape
        ((10,), (10, 5))
        >>> again = jaximp.permutation_importance(ens, X, y, n_repeats=5, random_state=0, batch_size=64)
        >>> np.array_equal(r.importances, again.importances)         # same draws for any batch size
        True
    """
    fn = "permutation_importance"
    check_model(ens, fn)
    raw_columns = as_raw_columns(X, ens, fn) if ens.featurizer is not None else None
    x = as_features(X, ens, fn) if raw_columns is None else featurize(ens, raw_columns)
    n = x.shape[0]
    if devices is None and on_device(x):  # computed where the rows are
        devices = list(x.devices())
    task = task_of(ens, fn)
    targets = as_targets(y, ens, n, fn)
    weights = as_weights(sample_weight, n, fn)
    score_fn = resolve_scoring(scoring, ens, task, fn)
    check_scorer_targets(scoring, targets, task, max(2, ens.n_outputs), fn)
    repeats = _check_repeats(n_repeats, fn)
    n_sub = _check_max_samples(max_samples, n, fn)
    column_groups = check_groups(feature_groups, ens, fn)
    groups, straddled = evaluated_groups(ens, column_groups)
    key = as_key(random_state, fn)

    draws = _row_draws(key, repeats, n, n_sub)
    take = np.stack([rows for rows, _ in draws])  # [R, n_sub] rows scored in each repeat
    source = np.stack([src for _, src in draws])  # [R, n_sub] the rows their values come from
    shared = n_sub == n
    # rows scored [M] and, per repeat, where their group values come from [M, R'] (R' = R or 1)
    own, sources = (take[0], source.T) if shared else (take.reshape(-1), source.reshape(-1)[:, None])
    score = row_score(scoring, ens)
    if score is not None and not straddled:  # scored block by block on the device: [R, G + 1, S] back
        weight = _repeat_weights(weights, take, shared)
        sums = permuted_sums(ens, x, groups, own, sources, targets[own], weight, score, batch_size=batch_size,
                             devices=devices, fn_name=fn, progress=progress)
        scores = np.stack([score.final(sums[r], weights[take[r]].astype(np.float64).sum(), targets[take[r]],
                                       weights[take[r]].astype(np.float64)) for r in range(repeats)])
        importances = (scores[:, :1] - scores[:, 1:]).T  # [G, R]
    else:
        importances = _materialized(ens, x, raw_columns, groups, straddled, column_groups, take, source, own,
                                    sources, targets, weights, score_fn, batch_size=batch_size, devices=devices,
                                    fn_name=fn, progress=progress)
    result = like_rows((importances.mean(axis=1), importances.std(axis=1), importances), x)
    from sklearn.utils import Bunch  # imported here: scikit-learn takes a second to import

    return Bunch(importances_mean=result[0], importances_std=result[1], importances=result[2])


def _repeat_weights(weights: np.ndarray, take: np.ndarray, shared: bool) -> np.ndarray:
    """``f32[M, R]`` each scored row's weight in each repeat's score: its own weight in every
    repeat (all rows scored), or in its repeat only (repeat ``r``'s rows at ``r * n .. r * n + n``)."""
    repeats, n_sub = take.shape
    if shared:
        return np.repeat(weights[:, None], repeats, axis=1).astype(np.float32)
    out = np.zeros((repeats * n_sub, repeats), np.float32)
    out[np.arange(repeats * n_sub), np.repeat(np.arange(repeats), n_sub)] = weights[take.reshape(-1)]
    return out


def _materialized(ens, x, raw_columns, groups, straddled, column_groups, take, source, own, sources, targets,
                  weights, score_fn, *, batch_size, devices, fn_name, progress) -> np.ndarray:
    """``f64[G, R]`` importances from every permuted prediction, for scores that are not sums over
    rows (ROC AUC, F1, functions) and for groups that a categorical combination straddles. The
    predictions stay on the device (``R G N K`` floats) unless a straddled group must be
    featurized again on the host."""
    repeats, n_sub = take.shape
    shared = n_sub == x.shape[0]
    raw, permuted = permuted_predictions(ens, x, groups, own, sources, batch_size=batch_size, devices=devices,
                                         fn_name=fn_name, on_device=not straddled, progress=progress)
    predict_kernel = leaf_kernels(ens, fn_name).predict
    for g in straddled:  # groups that a CTR over a combination straddles: featurize again
        def predict_rows(rows):
            return map_rows(predict_kernel, ens, np.asarray(rows), batch_size=batch_size, devices=devices,
                            fn_name=fn_name, progress=progress)
        for r in range(repeats):
            new = refeaturized_predictions(ens, raw_columns, column_groups[g], take[r], source[r], predict_rows)
            if shared:
                permuted[:, r, g] = new
            else:
                permuted[r * n_sub:(r + 1) * n_sub, 0, g] = new
    if shared:  # raw [N, K], permuted [N, R, G, K]
        y_scored, w_scored = targets, weights
    else:  # raw [R n_sub, K], permuted [R n_sub, 1, G, K]
        y_scored, w_scored = targets[take], weights[take]
        raw = raw.reshape(repeats, n_sub, -1)
        permuted = permuted.reshape(repeats, n_sub, len(groups), -1)
    base, scores = _score_runner(score_fn, ens.n_outputs, shared)(y_scored, w_scored, raw, permuted)
    return np.asarray(base, np.float64)[None, :] - np.asarray(scores, np.float64).T  # [G, R]


def _kernel_setup(ens, x, groups, repeats: int, batch_size, devices, fn_name) -> tuple:
    """``(kernel, params, batch_size, static)`` of the permuted-prediction kernel of either
    ensemble type; the rows (raw values, or an oblivious model's bins) go to the device once."""
    if ens.layout == "trees":
        return _tree_permuted_kernel, tree_permutation_params(ens, x, groups), batch_size, {}
    plan = _make_plan(ens, groups)
    platform = resolve_devices(devices, fn_name)[0].platform
    if batch_size is None:
        batch_size = _default_batch(platform, plan, ens.n_outputs, repeats)
    bins = map_rows(_bins_kernel, ens, x, batch_size=batch_size, devices=devices, fn_name=fn_name,
                    progress=False)  # [N, F]
    tabulate = plan.slot_tree.size * ens.n_leaves * ens.n_outputs <= _INCREMENT_TABLE
    params = (ens, plan, power_of_two_rows(jnp.asarray(bins)))
    return _permuted_kernel, params, batch_size, dict(cpu=platform == "cpu", tabulate=tabulate)


def permuted_sums(ens, x, groups: list[np.ndarray], own: np.ndarray, sources: np.ndarray, y: np.ndarray,
                  weight: np.ndarray, score: RowScore, *, batch_size: int | None, devices: Any,
                  fn_name: str, progress: bool = True) -> np.ndarray:
    """``f64[R, G + 1, S]`` the weighted sums of ``score``'s row terms over the scored rows, with
    each group permuted (group 0: none), computed block by block on the device: only these sums
    come back. Identical for any batch size or device count (``jaximp._rows.batching.sum_blocks``).

    Args:
        ens: the model; x: ``[N, E]`` its checked rows; groups: G arrays of evaluated features.
        own: ``i[M]`` the rows scored; sources: ``i[M, R']`` per repeat (R' = R) or for all
            (R' = 1), the rows their group values come from.
        y: ``[M]`` (or ``[M, K]``) their targets; weight: ``f32[M, R]`` their weight in each repeat.
    """
    kernel, params, batch_size, static = _kernel_setup(ens, x, groups, weight.shape[1], batch_size, devices,
                                                       fn_name)
    rows = (np.asarray(own, np.int32), np.asarray(sources, np.int32), y, np.asarray(weight, np.float32))
    return sum_blocks(kernel, params, rows, batch_size=batch_size, devices=devices, fn_name=fn_name,
                      progress=progress, score=score, **static)


def permuted_predictions(ens, x, groups: list[np.ndarray], own: np.ndarray, sources: np.ndarray, *,
                         batch_size: int | None, devices: Any, fn_name: str, on_device: bool,
                         progress: bool = True) -> tuple:
    """``(raw f32[M, K], permuted f32[M, R', G, K])``: the scored rows' raw predictions and their
    predictions with each group permuted (arguments as :func:`permuted_sums`), on the device
    (``jax.Array``) when ``on_device``, else NumPy."""
    kernel, params, batch_size, static = _kernel_setup(ens, x, groups, sources.shape[1], batch_size, devices,
                                                       fn_name)
    xp = jnp if on_device else np
    rows = (xp.asarray(own, np.int32), xp.asarray(sources, np.int32))
    return map_rows(kernel, params, rows, batch_size=batch_size, devices=devices, fn_name=fn_name,
                    progress=progress, **static)


def _default_batch(platform: str, plan: _Plan, n_outputs: int, repeats: int) -> int:
    """Rows per step: small on CPU (little padding); elsewhere as many as ~2 GiB of per-row
    intermediates allow (the running sums, the other pairs, the permuted predictions)."""
    if platform == "cpu":
        return _CPU_BATCH
    per_row = plan.slot_tree.size + plan.seg_chunks.size + plan.tree.size + plan.groups.size * repeats
    rows = _ACCELERATOR_BYTES // (16 * max(1, per_row) * n_outputs)
    return 1 << int(np.clip(np.log2(max(rows, 1)), 10, 18))


@functools.lru_cache(maxsize=64)
def _score_runner(score_fn, n_outputs: int, shared_rows: bool):
    """A jitted ``(y, w, raw, permuted) -> (f32[R], f32[R, G])`` that scores results in the
    layout the kernel writes them (no host transpose of the ``R G N K`` predictions).

    ``shared_rows``: every repeat scores all N rows: ``y [N]``, ``w [N]``, ``raw [N, K]``,
    ``permuted [N, R, G, K]``; else repeat r scores its own n rows: ``y [R, n]``, ``w [R, n]``,
    ``raw [R, n, K]``, ``permuted [R, n, G, K]``. The baseline is scored as one more group, by
    the same program: an unchanged prediction vector gets a bitwise equal score, so features no
    tree uses get exactly 0.
    """

    def score(y, w, raw):
        return score_fn(y, squeeze_outputs(raw, n_outputs), w)

    def one_repeat(args):  # y [n], w [n], both [G + 1, n, K] -> [G + 1]
        y, w, both = args
        # one scorer call per group in a loop keeps each call a plain vector computation
        # (vmap over the group axis is 10x slower on CPU)
        return jax.lax.map(lambda raw: score(y, w, raw), both)

    @jax.jit
    def run(y, w, raw, permuted):
        if shared_rows:
            n, repeats = permuted.shape[:2]
            base = jnp.broadcast_to(raw[:, None, None], (n, repeats, 1, raw.shape[-1]))
            both = jnp.transpose(jnp.concatenate([base, permuted], axis=2), (1, 2, 0, 3))
            y, w = jnp.broadcast_to(y, (repeats,) + y.shape), jnp.broadcast_to(w, (repeats, n))
        else:
            both = jnp.transpose(jnp.concatenate([raw[:, :, None], permuted], axis=2), (0, 2, 1, 3))
        scores = jax.lax.map(one_repeat, (y, w, both))  # [R, G + 1]
        return scores[:, 0], scores[:, 1:]

    return run


def _row_draws(key: Array, repeats: int, n: int, n_sub: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per repeat: the rows scored and, for each, the row whose values it receives.

    Repeat ``r`` seeds NumPy's PCG64 with ``fold_in(key, r)``: a shuffle of N rows costs a
    fraction of a millisecond there, against a sort of N random keys in XLA.
    """
    seeds = np.asarray(_repeat_seeds(key, np.arange(repeats, dtype=np.uint32))).reshape(repeats, -1)
    draws = []
    for seed in seeds.tolist():  # R draws of index vectors; all row work is vectorized
        rng = np.random.default_rng(seed)
        rows = np.arange(n) if n_sub == n else np.sort(rng.choice(n, n_sub, replace=False))
        draws.append((rows, rows[rng.permutation(n_sub)]))
    return draws


@jax.jit
def _repeat_seeds(key: Array, repeats: Array) -> Array:
    """``u32[R, ...]``: the data of ``fold_in(key, r)`` for each repeat, in one dispatch."""
    return jax.random.key_data(jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, repeats))


def as_key(random_state: Any, fn_name: str) -> Array:
    """A typed ``jax.random`` key from an int, None, a JAX key or a NumPy generator.

    An int ``s < 2**32`` gives ``jax.random.key(s)``; larger ints fold their high word in.
    """
    if random_state is None:
        random_state = int(np.random.default_rng().integers(2**63))
    elif isinstance(random_state, np.random.RandomState):
        random_state = int(random_state.randint(2**31))
    elif isinstance(random_state, np.random.Generator):
        random_state = int(random_state.integers(2**63))
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool):
        if not 0 <= random_state < 2**64:
            raise ValueError(f"{fn_name}: random_state must be an int in [0, 2**64); got {random_state}")
        seed = int(random_state)
        key = jax.random.key(seed & 0xFFFFFFFF)
        return key if seed < 2**32 else jax.random.fold_in(key, seed >> 32)
    if isinstance(random_state, jax.Array):
        if jnp.issubdtype(random_state.dtype, jax.dtypes.prng_key) and random_state.shape == ():
            return random_state
        if random_state.dtype == jnp.uint32 and random_state.ndim == 1:  # a raw (legacy) key
            return jax.random.wrap_key_data(random_state)
    raise TypeError(
        f"{fn_name}: random_state must be an int, None, a jax.random key or a NumPy Generator; "
        f"got {type(random_state).__name__}"
    )


def _check_repeats(n_repeats: Any, fn_name: str) -> int:
    if isinstance(n_repeats, bool) or not isinstance(n_repeats, (int, np.integer)) or n_repeats < 1:
        raise ValueError(f"{fn_name}: n_repeats must be an int >= 1; got {n_repeats!r}")
    return int(n_repeats)


def _check_max_samples(max_samples: Any, n: int, fn_name: str) -> int:
    """Rows per repeat, as sklearn: ``int(max_samples * N)`` for a float, else the int itself."""
    if isinstance(max_samples, (int, np.integer)) and not isinstance(max_samples, bool):
        if not 1 <= max_samples <= n:
            raise ValueError(f"{fn_name}: max_samples must be an int in [1, {n}] (the rows of X); got {max_samples}")
        return int(max_samples)
    if isinstance(max_samples, (float, np.floating)) and 0 < max_samples <= 1:
        if int(max_samples * n) < 1:
            raise ValueError(f"{fn_name}: max_samples * N must be at least 1 row; got {max_samples} * {n}")
        return int(max_samples * n)
    raise ValueError(
        f"{fn_name}: max_samples must be a float in (0, 1] or an int in [1, {n}]; got {max_samples!r}"
    )
