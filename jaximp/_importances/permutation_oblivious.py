"""Permuted predictions of oblivious trees, for ``jaximp.permutation_importance``: step
functions of each column's bin, a lookup per group and repeat.

Permuting column ``f`` only moves ``f``'s bin ``b``, and with the row's other columns fixed the
prediction is a step function of ``b``. In a tree whose splits on ``f`` are at depths with
thresholds ``th``, bit ``d`` of the leaf is ``b > th_d``, so as ``b`` grows past each threshold
the leaf moves one bit pattern up and the tree's value changes by an increment ``inc`` that
depends only on the row's other bits (a per-split table over the row's leaf). Sorted by
threshold over all trees that use ``f``, the increments' running sum ``F_f(b)`` is the
prediction at bin ``b`` minus the one at bin 0, so

    raw with f permuted = raw + scale * (F_f(b received) - F_f(b own)).

Per row, one increment per split (``T * D`` gathers, the cost of ``D`` predictions) and one scan
give every running sum; each (group, repeat) is then two lookups instead of ``T`` tree
evaluations (sklearn predicts the whole model again for every (feature, repeat): ``F * R * T``
tree evaluations per row). A feature group permutes several columns at once: a tree that splits
on only one of them is a step function of that column as above; a tree that splits on several
(only with ``feature_groups``) gathers the value of its new leaf in each repeat.

The kernel's arguments and results are those of every permuted-prediction kernel
(``jaximp._importances.permutation_kernel``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._importances.permutation_kernel import KernelSetup
from jaximp._importances.scoring import RowScore, block_sums
from jaximp._leaves.oblivious import leaf_dtype, quantize, tree_leaves_from_bins
from jaximp._leaves.tables import leaf_prediction
from jaximp._models.oblivious import ObliviousEnsemble
from jaximp._rows.batching import map_rows
from jaximp._rows.blocks import power_of_two_rows, row_blocks
from jaximp._rows.tuning import Tuning, rows_tuning

_CHUNK = 32  # slots per chunk of a segment's running sums: the length of the scan over places
_OTHER_CHUNK = 8  # (group, tree) pairs per chunk of the pairs that read several columns
_INCREMENT_TABLE = 1 << 24  # most entries of the per-slot increment table (deeper: computed per row)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class StepPlan:
    """Where each group's permutation can change each tree, laid out for the kernel (host arrays,
    a pytree: the kernel takes it as an argument).

    Slots are the splits of the (group, tree) pairs whose splits on the group read one column
    (every pair, without ``feature_groups``). A segment is a (group, column); its slots are
    sorted by (threshold, depth), so that ``F(b)``, the sum of the increments of the slots with
    threshold ``< b``, is a running sum up to a slot. Slot ``s``'s increment, for the row's
    leaf ``l`` in its tree, is ``v[(l & keep_s) | above_s] - v[(l & keep_s) | below_s]``: its
    tree's value once the bin has passed the split, minus just before (``keep_s``: the tree's
    bits not on the column; ``above_s``/``below_s``: its bits on the column at splits up to /
    before ``s`` in the order). Tied thresholds telescope, so each tree counts once.

    Slot 0 is padding, then all segments one after the other, padded at the end to
    ``n_chunks`` chunks of ``n_places`` slots. Slot ``p`` is place ``p % n_places`` of chunk
    ``p // n_places``, stored ``[n_places, n_chunks]``, so that one scan over the places
    computes every chunk's running sums at once. Segment ``k`` starts after its anchor slot
    ``a_k``; its running sum at slot ``p`` is the chunk's sum up to ``p``, plus the totals of the
    chunks from ``a_k``'s up to ``p``'s, minus the chunk's sum up to ``a_k``.

    Pairs whose splits on the group read several of its columns ("other" pairs, only with
    ``feature_groups``) gather the value of their new leaf in each repeat, in
    ``n_other_chunks`` chunks of ``n_pairs`` pairs of one group (``n_other_chunks`` is 0
    without such pairs).

    Attributes:
        slot_tree: ``i32[n_places, n_chunks]`` the tree of each slot (``T``, an all-zero tree,
            on padding).
        slot_keep, slot_above, slot_below: ``i32[n_places, n_chunks]`` the slot's leaf bits (see
            above).
        seg_feature: ``i32[n_segments]`` the column each segment reads.
        seg_anchor: ``i32[n_segments]`` its anchor slot, as the row ``c * K n_chunks + q`` of the
            running sums ``[n_places, K, n_chunks]`` of output 0 (output ``k``: ``+ k n_chunks``).
        seg_slot: ``i32[n_segments, n_bins]`` for each bin ``b``, the slot (as a row, the same
            way) whose running sum is ``F(b)``: the anchor plus the number of the segment's
            thresholds ``< b``; ``n_bins`` is the most borders of a feature plus one.
        seg_rank: ``i32[n_segments, n_bins]`` ``k * n_spanned +`` that slot's chunk minus the
            anchor's chunk.
        seg_chunks: ``i32[n_segments, n_spanned]`` the chunks from the anchor's on (``n_chunks``,
            all zero, past the segment's last); ``n_spanned`` is the most chunks a segment spans.
        tree: ``i32[n_other_chunks, n_pairs]`` each other pair's tree (``T`` on padding).
        keep: ``[n_other_chunks, n_pairs]`` its tree's bits not on the group (leaf dtype).
        split_feature, split_threshold, split_bit: ``[n_other_chunks, n_pairs, n_group_splits]``
            its splits on the group (padding never true, bit 0).
        groups: ``i32[G, n_entries]`` each group's segments and other chunks among the
            ``n_segments + n_other_chunks`` (that number: nothing).
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


def make_plan(ens: ObliviousEnsemble, groups: list[np.ndarray]) -> StepPlan:
    """The :class:`StepPlan` of G groups of evaluated features: the segments' slots, the other
    pairs, and each group's share of both."""
    g, t, d, f = _splits_on_groups(ens, groups)  # [n_splits] each: every split on a column of a group
    pair = np.cumsum(np.diff(g * ens.n_trees + t, prepend=-1) != 0) - 1  # [n_splits] its (group, tree) pair
    starts = np.searchsorted(pair, np.arange(pair[-1] + 1 if len(pair) else 0))  # [n_pairs] first split
    pair_bits = _per_pair(np.bitwise_or, 1 << d, starts)
    single = _per_pair(np.minimum, f, starts) == _per_pair(np.maximum, f, starts)  # reads one column

    on_one = single[pair]
    slots, key, threshold = _slots(ens, pair[on_one], g[on_one], t[on_one], d[on_one], f[on_one], pair_bits)
    segments, tables = _segment_tables(ens, key, threshold, *slots["slot_tree"].shape)
    other_group, other = _other_pairs(ens, g[starts[~single]], t[starts[~single]], pair_bits[~single])
    owner = np.concatenate([np.where(segments < 0, -1, segments // ens.n_evaluated), other_group])
    return StepPlan(**slots, **tables, **other, groups=_group_index(owner, len(groups)))


def _slots(ens: ObliviousEnsemble, pair, g, t, d, f, pair_bits):
    """The slots of the splits of single-column pairs (``[n_single]`` each): ``([n_places,
    n_chunks] arrays by name, segment key and threshold of each split in slot order)``.

    Slot 0 is padding; the splits follow sorted by (segment, threshold, depth), padded at the
    end to whole chunks.
    """
    threshold = np.asarray(ens.split_bins)[t, d]
    order_key = threshold * ens.depth + d  # ties of threshold pass in depth order
    key = g * ens.n_evaluated + f  # the segment: (group, column)
    # each pair's splits, [n_pairs, D]: their order keys (-1: none) and bits
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

    def places(values, fill):  # by slot -> [n_places, n_chunks]
        return _i32(_scatter(slot, values, n_q * chunk, fill).reshape(n_q, chunk).T)

    slots = dict(slot_tree=places(t[s], ens.n_trees), slot_keep=places(keep, 0),
                 slot_above=places(above, 0), slot_below=places(below, 0))
    return slots, key[s], threshold[s]


def _segment_tables(ens: ObliviousEnsemble, key: np.ndarray, threshold: np.ndarray, chunk: int, n_q: int):
    """``(segment keys [n_segments], seg_* tables by name)`` for slots in ``[n_places, n_chunks]``
    holding the splits of segment ``key`` (sorted, ``[n_single]``) from slot 1 on.

    Segment ``k`` holds slots ``first + 1 .. first + count``; its anchor is slot ``first``, and
    ``F(b)`` the running sum from there to ``first + #{thresholds < b}``.
    """
    segments, first, count = np.unique(key, return_index=True, return_counts=True)
    if not len(segments):  # one segment of no slots, in no group, so that no table is empty
        segments, first, count = np.array([-1]), np.zeros(1, int), np.zeros(1, int)
    n_bins = ens.borders.shape[1] + 1
    # [n_segments, n_bins] the slot of F(b): first + #{thresholds < b}, where the splits sort after (k, b)
    query = np.searchsorted(key * n_bins + threshold, (segments * n_bins)[:, None] + np.arange(n_bins))
    span = (first + count) // chunk - first // chunk + 1  # chunks from the anchor's to the last slot's
    most = int(span.max(initial=1))

    def row(p):  # slot p -> its row c * K n_chunks + q in the [n_places, K, n_chunks] running sums of output 0
        return _i32((p % chunk) * (ens.n_outputs * n_q) + p // chunk)

    rank = query // chunk - first[:, None] // chunk
    return segments, dict(
        seg_feature=_i32(np.maximum(segments, 0) % ens.n_evaluated), seg_anchor=row(first), seg_slot=row(query),
        seg_rank=_i32(np.arange(len(segments))[:, None] * most + rank),
        seg_chunks=_i32(np.where(np.arange(most) < span[:, None], first[:, None] // chunk + np.arange(most), n_q)),
    )


def _other_pairs(ens: ObliviousEnsemble, group: np.ndarray, tree: np.ndarray, bits: np.ndarray):
    """``(group of each chunk [n_other_chunks], arrays by name)``: the pairs that read several
    columns of their group (one entry each, sorted by group), in chunks of one group; no chunk
    without any."""
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
    """``i32[G, n_entries]``: each group's entries among ``owner`` (their groups, -1: none),
    padded with ``len(owner)``."""
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
        ``(key of each chunk [n_chunks], position of each item in the padded [n_chunks * chunk]
        layout)``.
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
    """``(feature i32, threshold i32, bit i64)`` each ``[n_other_chunks, n_pairs,
    n_group_splits]``: the splits of each pair's tree at the depths in ``bits [n_other_chunks,
    n_pairs]`` (the pair's bits on its group), ``n_group_splits`` the most any pair has; padding
    (also for padded pairs, tree == T) is never true and has bit 0."""
    depth_bit = 1 << np.arange(ens.depth)
    on = (bits[..., None] & depth_bit) != 0  # [n_other_chunks, n_pairs, D]
    width = max(1, int(on.sum(-1).max(initial=0)))
    depth = np.argsort(~on, axis=-1, kind="stable")[..., :width]  # the set depths first
    used = np.take_along_axis(on, depth, axis=-1)
    t = np.minimum(tree, ens.n_trees - 1)[..., None]
    feature = np.where(used, np.asarray(ens.split_features)[t, depth], 0).astype(np.int32)
    threshold = np.where(used, np.asarray(ens.split_bins)[t, depth], ens.borders.shape[1]).astype(np.int32)
    return feature, threshold, np.where(used, depth_bit[depth], 0)


def _bins_kernel(ens: ObliviousEnsemble, x: Array, *, block: int, tuning: Tuning) -> Array:
    return quantize(ens, x, tuning=tuning).T  # [n, E]


def _permuted_kernel(params, rows, *, block: int, tuning: Tuning, tabulate: bool,
                     score: RowScore | None = None) -> Any:
    """Per row: the raw prediction and the raw prediction with each group permuted (arguments
    and results as every permuted-prediction kernel's: ``jaximp._importances.permutation_kernel``).

    Args:
        params (tuple): ``(ens, plan, bins u8[n_all, E])``: the model, its :class:`StepPlan` and the bins
            of every row (``n_all`` rows, padded), which ``rows`` index.
        rows (tuple): ``(own, source)`` (and ``(y, weight)`` with ``score``).
        block: rows per fused block (map_rows's choice).
        tuning: the devices' tuning (its ``permutation_block_rows``: cache-sized blocks on CPUs).
        tabulate: look each slot's increment up in a per-leaf table (else: two leaf values).
        score: None, or a score that is a sum over rows, computed block by block.
    """
    ens, plan, all_bins = params
    k, n_leaves = ens.n_outputs, ens.n_leaves
    chunk, n_q = plan.slot_tree.shape
    n_segments, most = plan.seg_chunks.shape
    # leaf values as one flat [K, (T + 1) L] table: tree T, all zeros, serves padding;
    # outputs lead every per-slot array, so that rows are the minor, vectorized axis
    table = jnp.concatenate([ens.leaf_values, jnp.zeros_like(ens.leaf_values[:1])]).reshape(-1, k).T

    # each slot's increment for every leaf of its tree, [K, n_places n_chunks L] (slot c n_chunks + q at
    # row (c n_chunks + q) L);
    # for deep trees, where that table is too large, two leaf values per slot and row instead
    if tabulate:
        kept = plan.slot_keep[..., None] & jnp.arange(n_leaves, dtype=jnp.int32)
        base = plan.slot_tree[..., None] * n_leaves
        increments = (table[:, base + (kept | plan.slot_above[..., None])]
                      - table[:, base + (kept | plan.slot_below[..., None])]).reshape(k, -1)
    places = (jnp.arange(chunk * n_q, dtype=jnp.int32).reshape(chunk, n_q) * n_leaves, plan.slot_tree,
              plan.slot_keep, plan.slot_above, plan.slot_below)  # [n_places, n_chunks] each

    def increment(slots, leaves):  # one place of every chunk, rows' leaves [T + 1, n] -> [K, n_chunks, n]
        start, tree, keep, above, below = (a[:, None] for a in slots)
        leaf = leaves[tree[:, 0]].astype(jnp.int32)  # [n_chunks, n]
        if tabulate:
            return increments[:, start + leaf]
        kept = tree * n_leaves + (leaf & keep)
        return table[:, kept | above] - table[:, kept | below]  # tree * L has no bits below L

    output = jnp.arange(k, dtype=jnp.int32)[:, None, None]
    earlier = jnp.triu(jnp.ones((most, most), table.dtype), 1)  # [j, m]: chunk j comes before chunk m

    def leaves_of(bins):  # [E, n] -> [T + 1, n]; rows minor so that gathers move whole rows
        leaves = tree_leaves_from_bins(ens, bins)
        return jnp.concatenate([leaves, jnp.zeros_like(leaves[:1])])

    def one_block(block_rows):  # own [n], source [n, n_sources] (and y, weight)
        bins = all_bins[block_rows[0]].T  # [E, n]
        permuted = jnp.transpose(all_bins[block_rows[1]], (1, 2, 0))  # [n_sources, E, n]
        leaves = leaves_of(bins)
        n = leaves.shape[1]
        raw = leaf_prediction(ens, leaves[:-1])  # [n, K]

        def place(running, slots):  # one place of every chunk: [K, n_chunks, n] running sums
            running = running + increment(slots, leaves)
            return running, running  # inclusive: the carry is the output, no copy

        total, running = jax.lax.scan(place, jnp.zeros((k, n_q, n)), places)
        running = running.reshape(-1, n)  # [n_places K n_chunks, n]: sums inside each chunk up to each place

        def rows_of(slot):  # slot rows of output 0 -> of every output: [K, ...]
            return slot + output * n_q

        # per segment, the sum of the chunks before each of its chunks, from its anchor on:
        # [K n_segments n_spanned, n]
        totals = jnp.concatenate([total, jnp.zeros_like(total[:, :1])], axis=1)[:, plan.seg_chunks]
        at_anchor = running[rows_of(plan.seg_anchor)[:, 0]]  # [K, n_segments, n]
        before = jnp.einsum("ksjn,jm->ksmn", totals, earlier)  # a small matmul: cumsum is slow on CPU
        offsets = (before - at_anchor[:, :, None]).reshape(-1, n)

        def step_sums(b):  # [n_segments, n] bins of each segment's column -> [K, n_segments, n] F(b)
            # every index is in bounds by construction: no bounds checks in the lookups
            take = functools.partial(jnp.take_along_axis, mode="promise_in_bounds")
            b = b.astype(jnp.int32)
            slot, rank = take(plan.seg_slot, b, axis=1), take(plan.seg_rank, b, axis=1)
            inside = take(running, rows_of(slot).reshape(-1, n), axis=0)
            before = take(offsets, (output * (n_segments * most) + rank).reshape(-1, n), axis=0)
            return (inside + before).reshape(k, n_segments, n)

        own = step_sums(bins[plan.seg_feature])
        if plan.tree.shape[0]:
            old = leaves[plan.tree]  # [n_other_chunks, n_pairs, n]
            old_values = _sum_pairs(table[:, plan.tree[..., None] * n_leaves + old.astype(jnp.int32)])

        def one_repeat(pbins):  # [E, n]: the bins of the rows whose values the block receives
            deltas = [step_sums(pbins[plan.seg_feature]) - own]  # [K, n_segments, n]
            if plan.tree.shape[0]:  # new bits of the other pairs: their splits on the received bins
                hits = pbins[plan.split_feature] > plan.split_threshold[..., None].astype(pbins.dtype)
                moved = jnp.sum(jnp.where(hits, plan.split_bit[..., None], 0), axis=2, dtype=old.dtype)
                new = ((old & plan.keep[..., None]) | moved).astype(jnp.int32)  # [n_other_chunks, n_pairs, n]
                deltas.append(_sum_pairs(table[:, plan.tree[..., None] * n_leaves + new]) - old_values)
            deltas.append(jnp.zeros_like(deltas[0][:, :1]))  # nothing: the padding of groups
            delta = jnp.concatenate(deltas, axis=1)[:, plan.groups]  # [K, G, n_entries, n]
            return raw.T[:, None] + ens.scale * jnp.sum(delta, axis=2)  # [K, G, n]

        out = jax.lax.map(one_repeat, permuted)  # [n_sources, K, G, n]
        if score is None:
            return raw, out
        base = jnp.broadcast_to(raw.T[None, :, None], (out.shape[0], k, 1, n))
        both = jnp.concatenate([base, out], axis=2).transpose(0, 2, 3, 1)  # [n_sources, G + 1, n, K]
        return block_sums(score, block_rows[2], block_rows[3], both)

    # Rows go through in blocks; each block gathers its rows' bins laid out rows-minor ([E, n]):
    # transposed inside a block, every gather of a row of bins would read it with a stride.
    block = min(block, tuning.permutation_block_rows or block)
    n, repeats = rows[1].shape[:2]
    out = jax.lax.map(one_block, jax.tree_util.tree_map(lambda a: row_blocks(a, block), rows))
    if score is not None:
        return out  # [n_blocks, R, G + 1, 1 + n_terms]
    raw, out = out  # [n_blocks, block, K], [n_blocks, n_sources, K, G, block]
    out = out.transpose(0, 4, 1, 3, 2).reshape(-1, repeats, out.shape[3], k)
    return raw.reshape(-1, k)[:n], out[:n]


def _sum_pairs(x: Array) -> Array:
    """``[K, n_other_chunks, n_pairs, n] -> [K, n_other_chunks, n]``: the sum over a chunk's pairs
    as a tree of elementwise adds (``n_pairs`` is a power of two), which XLA fuses with the
    computation of ``x`` into one pass."""
    while x.shape[2] > 1:
        half = x.shape[2] // 2
        x = x[:, :, :half] + x[:, :, half:]
    return x[:, :, 0]


def _default_batch(tuning: Tuning, plan: StepPlan, n_outputs: int, repeats: int) -> int:
    """Rows per step: the tuning's (small on CPU: little padding), else as many as its bound on
    per-row intermediates allows (the running sums, the other pairs, the permuted predictions)."""
    if tuning.permutation_step_rows:
        return tuning.permutation_step_rows
    per_row = plan.slot_tree.size + plan.seg_chunks.size + plan.tree.size + plan.groups.size * repeats
    rows = tuning.permutation_step_bytes // (16 * max(1, per_row) * n_outputs)
    return 1 << int(np.clip(np.log2(max(rows, 1)), 10, 18))


def kernel_setup(ens: ObliviousEnsemble, x: Any, groups: list[np.ndarray], repeats: int, batch_size: int | None,
                 devices: Any, fn_name: str) -> KernelSetup:
    """The step-function kernel of ``ens`` for G groups of evaluated features, with its plan and
    the bins of the checked rows ``x f32[N, E]`` (put on the device once); R repeats."""
    plan = make_plan(ens, groups)
    if batch_size is None:
        batch_size = _default_batch(rows_tuning(devices, x, fn_name), plan, ens.n_outputs, repeats)
    bins = map_rows(_bins_kernel, ens, x, batch_size=batch_size, devices=devices, fn_name=fn_name,
                    progress=False)  # [N, E]
    tabulate = plan.slot_tree.size * ens.n_leaves * ens.n_outputs <= _INCREMENT_TABLE
    params = (ens, plan, power_of_two_rows(bins))
    return KernelSetup(_permuted_kernel, params, batch_size, dict(tabulate=tabulate))
