"""Permutation importance, re-evaluating only the trees that split on the permuted feature.

sklearn's definition (Breiman 2001; ``sklearn.inspection.permutation_importance``, seed 004):
the importance of a feature in repeat ``r`` is the baseline score minus the score after the
feature's column has been shuffled across rows. sklearn predicts the whole model again for
every (feature, repeat). Here each row's leaves are computed once, and so are the leaves of the
row whose values it receives in repeat ``r`` (one row permutation per repeat, shared by all
features as in sklearn). Permuting feature ``f`` only changes the bits of the depths that split
on ``f``, so for a tree ``t`` that uses ``f``, with ``mask_f[t]`` those depths' bits,

    new_leaf[t] = (leaf[t] & ~mask_f[t]) | (moved_leaf[t] & mask_f[t])

and the prediction changes only through those trees:
``raw_f = raw + scale * sum_{t uses f} (leaf_values[t, new_leaf[t]] - leaf_values[t, leaf[t]])``.
The work is ``sum_f #trees(f)`` (group, tree) pairs per row and repeat instead of ``F * T`` tree
evaluations. Pairs are laid out in fixed-size chunks of one group each, so all groups and
repeats run as one vectorized kernel; a pair whose tree splits on ``f`` at one depth only (most
of them) can only keep its leaf or flip one bit, so its change of value on a flip is gathered
once per row (from a per-tree [leaf, depth] table) and a repeat only selects it.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from sklearn.utils import Bunch

from jaximp._batching import map_rows, resolve_devices, row_blocks
from jaximp._inputs import as_features, as_weights
from jaximp._leaves import (
    bin_dtype,
    gather_leaf_values,
    leaf_dtype,
    quantize,
    tree_leaves_from_bins,
)
from jaximp._metrics import (
    as_targets,
    check_scorer_targets,
    resolve_scoring,
    task_of,
)
from jaximp._model import ObliviousEnsemble, check_ensemble, squeeze_outputs

_CHUNK = 32  # flip (group, tree) pairs summed together before the per-group sum
_OTHER_CHUNK = 8  # the same for other pairs, fewer per group: less padding
_CPU_BLOCK = 256  # rows per fused block on CPU: the per-pair tables of one block stay in cache
_CPU_BATCH = 4096  # rows per device step on CPU: little padding, few compiled shapes
_ACCELERATOR_BYTES = 1 << 31  # rough bound on a step's per-pair intermediates elsewhere


class _Plan(NamedTuple):
    """The (group, tree) pairs, in chunks of ``C`` pairs of one group each.

    A "flip" pair's tree splits on the group at a single depth (most pairs): permuting can
    only keep its leaf or flip that bit, and the bit flips exactly when the split's threshold
    lies between the row's own bin and the bin it receives, ``low <= threshold < high``. Flip
    pairs are chunked per (group, feature), so a repeat fetches one row of received bins per
    chunk; each pair's change of value on a flip is gathered once per row, and a repeat sums
    the flipped ones. The "other" pairs (several depths on the group) gather the value of
    their new leaf in each repeat. Other pairs come in smaller chunks (fewer per group).

    flip_split: ``i32[Q1, C]`` the split ``tree * D + depth`` of each flip pair (``T * D``,
        in an all-zero tree, on padding).
    flip_feature: ``i32[Q1]`` the column every split of the chunk reads.
    flip_threshold: ``[Q1, C]`` each flip pair's split ``bin(x[feature]) > threshold`` (the
        number of borders, never between two bins, on padding), in the bins' dtype.
    tree: ``i32[Q2, C2]`` tree of each other pair. keep: ``[Q2, C2]`` its bits not on the group.
    split_feature, split_threshold, split_bit: ``[Q2, C2, M]`` the other pair's splits on the
        group (M the most any pair has; padding never true, bit 0).
    chunks: ``i32[G, M]`` each group's chunks among the ``Q1 + Q2`` (``Q1 + Q2`` = a zero chunk).
    """

    flip_split: Array
    flip_feature: Array
    flip_threshold: Array
    tree: Array
    keep: Array
    split_feature: Array
    split_threshold: Array
    split_bit: Array
    chunks: Array


def _make_plan(ens: ObliviousEnsemble, groups: list[np.ndarray]) -> _Plan:
    """The (group, tree) pairs of every tree that splits on a group, chunk-padded per group."""
    n_groups, n_features = len(groups), ens.n_features
    features, bins = np.asarray(ens.split_features), np.asarray(ens.split_bins)
    member = np.zeros((n_groups, n_features), bool)
    for g, columns in enumerate(groups):
        member[g, columns] = True
    on = member[:, features] & np.asarray(ens.split_mask)  # [G, T, D]: the splits on each group
    count = on.sum(axis=2)

    flip_group, flip_tree = np.nonzero(count == 1)
    depth = np.argmax(on[flip_group, flip_tree], axis=1)
    flip_feature = features[flip_tree, depth]
    order = np.lexsort((flip_feature, flip_group))  # slots (group, feature), trees ascending
    flip_group, flip_tree, depth, flip_feature = flip_group[order], flip_tree[order], depth[order], flip_feature[order]
    other_group, other_tree = np.nonzero(count > 1)
    slots, other_slots = flip_group * n_features + flip_feature, other_group
    chunk = _chunk_size(slots, _CHUNK)

    flip_slot, at = _chunk_layout(slots, chunk)  # [Q1] slot of each chunk (-1: padding), [P1]
    split = _scatter(at, flip_tree * ens.depth + depth, len(flip_slot) * chunk, ens.n_trees * ens.depth)
    split = split.reshape(-1, chunk)
    threshold = _scatter(at, bins[flip_tree, depth], split.size, ens.borders.shape[1]).reshape(split.shape)
    chunk = _chunk_size(other_slots, _OTHER_CHUNK)
    chunk_group, at = _chunk_layout(other_slots, chunk)
    other = _scatter(at, other_tree, len(chunk_group) * chunk, ens.n_trees).reshape(-1, chunk)
    mask = np.sum(on[other_group, other_tree] << np.arange(ens.depth), axis=1)
    keep = _scatter(at, (ens.n_leaves - 1) & ~mask, other.size, ens.n_leaves - 1).reshape(other.shape)

    # each group's chunks, flip then other, padded with the index of an all-zero chunk
    group_of = np.concatenate([np.where(flip_slot < 0, -1, flip_slot // n_features), chunk_group])
    ids = np.flatnonzero(group_of >= 0)
    ids = ids[np.argsort(group_of[ids], kind="stable")]
    rank = np.arange(len(ids)) - np.searchsorted(group_of[ids], group_of[ids])
    index = np.full((n_groups, max(1, int(rank.max(initial=0)) + 1)), len(group_of), np.int32)
    index[group_of[ids], rank] = ids

    split_feature, split_threshold, split_bit = _group_splits(ens, other, (ens.n_leaves - 1) & ~keep)
    return _Plan(
        flip_split=jnp.asarray(split, jnp.int32),
        flip_feature=jnp.asarray(np.maximum(flip_slot, 0) % n_features, jnp.int32),
        flip_threshold=jnp.asarray(threshold.astype(bin_dtype(ens))),
        tree=jnp.asarray(other, jnp.int32), keep=jnp.asarray(keep.astype(leaf_dtype(ens))),
        split_feature=jnp.asarray(split_feature), split_threshold=jnp.asarray(split_threshold),
        split_bit=jnp.asarray(split_bit.astype(leaf_dtype(ens))), chunks=jnp.asarray(index),
    )


def _chunk_size(keys: np.ndarray, most: int) -> int:
    """The power of two up to ``most`` that holds the longest run of ``keys``."""
    longest = int(_run_lengths(keys).max(initial=1))
    return min(most, 1 << max(0, longest - 1).bit_length())


def _run_lengths(keys: np.ndarray) -> np.ndarray:
    """Lengths of the runs of equal values in the sorted ``keys``."""
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else np.zeros(0, int)
    return np.diff(np.r_[starts, len(keys)])


def _chunk_layout(keys: np.ndarray, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """Chunks of ``chunk`` items of one key each, for items sorted by key.

    Returns:
        ``(key of each chunk [Q], position of each item in the padded [Q * chunk] layout)``;
        with no items, one chunk of padding (key -1), so that no table is empty.
    """
    if not len(keys):
        return np.full(1, -1), np.zeros(0, int)
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
    return quantize(ens, x).T


def _permuted_kernel(params, rows, *, block: int, cpu: bool) -> tuple[Array, Array]:
    """Per row: the raw prediction and the raw prediction with each group permuted.

    Args:
        params: ``(ens, plan)``.
        rows: ``(bins [n, F], permuted_bins [n, R, F])``: the bins of the row, and in each
            repeat the bins of the row whose values it receives.
        block: rows per fused block (map_rows's choice). cpu: use small cache-sized blocks.

    Returns:
        ``(f32[n, K], f32[n, R, G, K])``.
    """
    ens, plan = params
    k, n_leaves = ens.n_outputs, ens.n_leaves
    # leaf values as one flat [K, (T + 1) L] table: tree T, all zeros, serves padded pairs;
    # outputs lead every per-pair array, so that rows are the minor, vectorized axis
    table = jnp.concatenate([ens.leaf_values, jnp.zeros_like(ens.leaf_values[:1])]).reshape(-1, k).T

    def values(tree, leaves):  # [Q, C], [Q, C, n] -> [K, Q, C, n]
        return table[:, tree[..., None] * n_leaves + leaves.astype(jnp.int32)]

    def leaves_of(bins):  # [F, n] -> [T + 1, n]; rows minor so that gathers move whole rows
        leaves = tree_leaves_from_bins(ens, bins)
        return jnp.concatenate([leaves, jnp.zeros_like(leaves[:1])])

    # per tree, leaf and depth, the change of value when the depth's bit flips: [(T + 1) L, D, K];
    # a row's changes in a tree are one contiguous [D, K] slice
    leaf_values = table.T.reshape(-1, n_leaves, k)
    neighbour = jnp.arange(n_leaves)[:, None] ^ (1 << jnp.arange(ens.depth))[None, :]  # [L, D]
    flip_table = (leaf_values[:, neighbour] - leaf_values[:, :, None]).reshape(-1, ens.depth, k)
    tree_offset = (jnp.arange(ens.n_trees + 1, dtype=jnp.int32) * n_leaves)[:, None]
    threshold = plan.flip_threshold[..., None]  # [Q1, C, 1]
    keep = plan.keep[..., None]

    def one_block(block_rows):  # bins [F, b], permuted [R, F, b]
        bins, permuted = block_rows
        leaves = leaves_of(bins)
        raw = ens.scale * gather_leaf_values(ens.leaf_values, leaves[:-1]) + ens.bias  # [n, K]
        changes = flip_table[tree_offset + leaves.astype(jnp.int32)]  # [T + 1, n, D, K]
        changes = changes.transpose(3, 0, 2, 1).reshape(k, -1, leaves.shape[1])  # [K, (T + 1) D, n]
        flipped = changes[:, plan.flip_split]  # [K, Q1, C, n]
        own = bins[plan.flip_feature][:, None]  # [Q1, 1, n]
        old = leaves[plan.tree]  # [Q2, C, n]
        base = _sum_pairs(values(plan.tree, old))  # [K, Q2, n]

        def one_repeat(pbins):  # [F, n]: the bins of the rows whose values the block receives
            # A pair's new bits are its tree's splits on the group evaluated on those bins: one
            # compare for a flip pair, M for the others; no tree's leaf is recomputed.
            received = pbins[plan.flip_feature][:, None]  # [Q1, 1, n]
            low, high = jnp.minimum(own, received), jnp.maximum(own, received)
            flips = (threshold >= low) & (threshold < high)  # [Q1, C, n]
            flip_delta = _sum_pairs(jnp.where(flips, flipped, 0.0))  # [K, Q1, n]
            hits = pbins[plan.split_feature] > plan.split_threshold[..., None].astype(pbins.dtype)
            moved = jnp.sum(jnp.where(hits, plan.split_bit[..., None], 0), axis=2, dtype=old.dtype)
            new = (old & keep) | moved  # [Q2, C, n]
            other_delta = _sum_pairs(values(plan.tree, new)) - base  # [K, Q2, n]
            zero = jnp.zeros_like(flip_delta[:, :1])  # the chunk of padded chunk indices
            delta = jnp.concatenate([flip_delta, other_delta, zero], axis=1)[:, plan.chunks]  # [K, G, M, n]
            return raw.T[:, None] + ens.scale * jnp.sum(delta, axis=2)  # [K, G, n]

        return raw, jax.lax.map(one_repeat, permuted)  # [b, K], [R, K, G, b]

    # Rows go through in blocks laid out rows-minor ([F, b]) once per step: transposed inside
    # a block, every gather of a row of bins would read it with a stride.
    bins, permuted = rows
    block = min(block, _CPU_BLOCK) if cpu else block
    n, repeats = permuted.shape[:2]
    bins = row_blocks(bins, block).transpose(0, 2, 1)  # [B, F, b]
    permuted = row_blocks(permuted, block).transpose(0, 2, 3, 1)  # [B, R, F, b]
    raw, out = jax.lax.map(one_block, (bins, permuted))  # [B, b, K], [B, R, K, G, b]
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
    ens: ObliviousEnsemble,
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
) -> Bunch:
    """Permutation importance: the drop in score when a feature's column is shuffled.

    ``importances[f, r] = score(y, raw(X)) - score(y, raw(X with column f permuted in repeat r))``,
    sklearn's definition (``sklearn.inspection.permutation_importance``, Breiman 2001), computed
    by re-evaluating only the trees that split on ``f`` (see the module docstring).

    Randomness: repeat ``r`` uses one permutation of the rows for every feature or group (as
    sklearn, whose features share their permutations), drawn from ``fold_in(key, r)``; the
    result depends only on ``random_state``, never on ``batch_size`` or ``devices``. sklearn's
    own random permutations cannot be reproduced, so the two agree within sampling error.

    Args:
        ens: the model.
        X: ``[N, F]`` rows (NumPy/JAX array, pandas/polars DataFrame, numeric catboost.Pool).
        y: ``[N]`` targets, class labels of a classifier (matched to ``ens.class_names``), or
            ``[N, K]`` for multi-regression.
        scoring: None (minus the model's own loss, as CatBoost computes it: ``RMSE``,
            ``Logloss``, ``MultiClass``, ``MultiRMSE``, ...), an sklearn scorer name
            (``"neg_root_mean_squared_error"``, ``"r2"``, ``"accuracy"``, ``"neg_log_loss"``,
            ``"roc_auc"``, ... see ``jaximp._metrics.SCORERS``), or a jit-able JAX function
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

    Memory: the permuted predictions of all rows, ``R * G * N * K`` floats, are assembled on the
    host and scored on the default device (so that scores do not depend on the batching).

    Returns:
        ``sklearn.utils.Bunch(importances_mean=f64[F], importances_std=f64[F],
        importances=f64[F, R])`` (G in place of F with ``feature_groups``); std has ddof=0.

    Raises:
        TypeError, ValueError: bad X, y, sample_weight, scoring, n_repeats, max_samples,
            feature_groups or random_state (the message names the argument).

    Example:
        >>> r = jaximp.permutation_importance(ens, X, y, n_repeats=10, random_state=0)  # doctest: +SKIP
        >>> r.importances_mean                                                           # doctest: +SKIP
    """
    fn = "permutation_importance"
    check_ensemble(ens, fn)
    x = np.asarray(as_features(X, ens, fn))
    n = x.shape[0]
    task = task_of(ens)
    targets = as_targets(y, ens, n, fn)
    weights = as_weights(sample_weight, n, fn)
    score_fn = resolve_scoring(scoring, ens, task, fn)
    check_scorer_targets(scoring, targets, task, max(2, ens.n_outputs), fn)
    repeats = _check_repeats(n_repeats, fn)
    n_sub = _check_max_samples(max_samples, n, fn)
    groups = _check_groups(feature_groups, ens, fn)
    key = as_key(random_state, fn)

    plan = _make_plan(ens, groups)
    platform = resolve_devices(devices, fn)[0].platform
    if batch_size is None:
        batch_size = _default_batch(platform, plan, ens.n_outputs, repeats)
    bins = map_rows(_bins_kernel, ens, x, batch_size=batch_size, devices=devices, fn_name=fn)  # [N, F]
    draws = _row_draws(key, repeats, n, n_sub)
    take = np.stack([rows for rows, _ in draws])  # [R, n_sub] rows scored in each repeat
    source = np.stack([src for _, src in draws])  # [R, n_sub] the rows their values come from
    if n_sub == n:  # all repeats score all rows: each row carries one permuted copy per repeat
        rows = (bins, bins[source.T])
    else:  # repeat r scores its own rows: R n_sub rows, one permuted copy each
        rows = (bins[take.reshape(-1)], bins[source.reshape(-1)][:, None, :])
    raw, permuted = map_rows(_permuted_kernel, (ens, plan), rows, batch_size=batch_size, devices=devices,
                             fn_name=fn, cpu=platform == "cpu")
    shared = n_sub == n
    if shared:  # raw [N, K], permuted [N, R, G, K]
        y_scored, w_scored = targets, weights
    else:  # raw [R n_sub, K], permuted [R n_sub, 1, G, K]
        y_scored, w_scored = targets[take], weights[take]
        raw = raw.reshape(repeats, n_sub, -1)
        permuted = permuted.reshape(repeats, n_sub, len(groups), -1)
    base, scores = _score_runner(score_fn, ens.n_outputs, shared)(y_scored, w_scored, raw, permuted)
    importances = np.asarray(base, np.float64)[None, :] - np.asarray(scores, np.float64).T  # [G, R]
    return Bunch(importances_mean=importances.mean(axis=1), importances_std=importances.std(axis=1),
                 importances=importances)


def _default_batch(platform: str, plan: _Plan, n_outputs: int, repeats: int) -> int:
    """Rows per step: small on CPU (little padding); elsewhere as many as ~2 GiB of pair tables allow."""
    if platform == "cpu":
        return _CPU_BATCH
    pairs = plan.flip_split.size + plan.tree.size + plan.chunks.size * repeats
    rows = _ACCELERATOR_BYTES // (16 * max(1, pairs) * n_outputs)
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
    draws = []
    for r in range(repeats):  # R draws of index vectors; all row work is vectorized
        seed = np.asarray(jax.random.key_data(jax.random.fold_in(key, r))).ravel().tolist()
        rng = np.random.default_rng(seed)
        rows = np.arange(n) if n_sub == n else np.sort(rng.choice(n, n_sub, replace=False))
        draws.append((rows, rows[rng.permutation(n_sub)]))
    return draws


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


def _check_groups(feature_groups: Any, ens: ObliviousEnsemble, fn_name: str) -> list[np.ndarray]:
    """Groups as arrays of column indices; names are looked up in ``ens.feature_names``."""
    if feature_groups is None:
        return [np.array([f]) for f in range(ens.n_features)]
    if isinstance(feature_groups, (str, bytes)) or not hasattr(feature_groups, "__len__") or not len(feature_groups):
        raise ValueError(f"{fn_name}: feature_groups must be a non-empty list of lists of columns; "
                         f"got {feature_groups!r}")
    names = {name: i for i, name in enumerate(ens.feature_names)}
    groups = []
    for g, group in enumerate(feature_groups):
        if isinstance(group, (str, bytes, int, np.integer)) or not hasattr(group, "__len__") or not len(group):
            raise ValueError(f"{fn_name}: feature_groups[{g}] must be a non-empty list of columns; got {group!r}")
        columns = []
        for c in group:
            if isinstance(c, (int, np.integer)) and not isinstance(c, bool) and 0 <= c < ens.n_features:
                columns.append(int(c))
            elif isinstance(c, str) and c in names:
                columns.append(names[c])
            else:
                raise ValueError(
                    f"{fn_name}: feature_groups[{g}] must hold column indices in [0, {ens.n_features}) "
                    f"or feature names; got {c!r}"
                )
        if len(set(columns)) != len(columns):
            raise ValueError(f"{fn_name}: feature_groups[{g}] must not repeat a column; got {list(group)!r}")
        groups.append(np.array(columns))
    return groups
