"""CatBoost's ``PredictionDiff`` of two rows, for oblivious and non-symmetric trees.

Reproduces ``GetPredictionDiff`` (catboost/libs/fstr/compare_documents.cpp, CatBoost 1.2.10).
Per row, every single-split flip of the row's path adds ``v(flipped leaf) - v(row's leaf)``
(unscaled leaf values, flips with ``|diff| <= 1e-12`` dropped) to the split's feature at the bin
the flip moves the row to; running sums over the feature's bins away from the row's own bin
give the prediction change of moving the feature there (single flips added); the row's impact
is the largest such change that moves its prediction towards the other row's (up when its
prediction is below the other's, else down: equal predictions look down). The result is
``|impact_0 + impact_1|`` per feature.

For non-symmetric trees (``CalcNonSymmetricIndicatorCoefficients``) CatBoost walks each tree
with *its own copy* of the row, in which a value at or below all of its feature's borders
(NaN included) reads as 0.0; with that copy it follows the path, and at each node takes the
leaf that the copy reaches from the other child. Its bin is the border's index plus one when
the copy is *strictly* below the border (a row equal to a border flips right into its own bin,
which the sums skip: that flip is lost). The leaf the walk ends at is a node too (the model
reloaded from JSON stores every leaf as a node with split index 0): there CatBoost compares the
copy's leaf with the row's true leaf and files any difference under the model's first split
(the lowest border of the lowest-numbered split feature). All this is reproduced as is, so the
numbers equal CatBoost's on the model reloaded from its JSON export. A freshly trained model (or
a ``.cbm`` saved from one) stores the leaf child of a node whose other child is a subtree on the
node itself, and CatBoost then loses the flips into such leaves: its numbers differ there, as
its SHAP values do (CatBoost issue 2136, https://github.com/catboost/catboost/issues/2136).

Shapes (the legend of ``jaximp._models``): F features, T trees, D depth, M internal nodes;
``n_bins`` the most bins of a feature (the most borders plus one), ``n_moves`` the flips per
row (``T * D`` oblivious, ``T * (D + 1)`` non-symmetric). Each layout has its walk
(:data:`MOVES`, keyed by ``ens.layout``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaximp._leaves.predict import leaf_indices
from jaximp._models.ensemble import Ensemble
from jaximp._models.oblivious import ObliviousEnsemble
from jaximp._models.trees import TreeEnsemble

_DROPPED = 1e-12  # CatBoost skips flips whose leaf difference is this small


@dataclasses.dataclass(frozen=True)
class _Moves:
    """Each row's single-split flips, in CatBoost's order (tree by tree, root to leaf).

    Attributes:
        borders: ``f32[F, n_bins - 1]`` each feature's sorted borders, padded with ``+inf``.
        feature: ``i64[2, n_moves]`` the flipped split's feature.
        bin: ``i64[2, n_moves]`` the bin the flip moves the row to.
        diff: ``f64[2, n_moves]`` the leaf value change, 0 where dropped.
        raw: ``f64[2]`` the rows' raw predictions (float64 sums, as CatBoost's).
    """

    borders: np.ndarray
    feature: np.ndarray
    bin: np.ndarray
    diff: np.ndarray
    raw: np.ndarray


def prediction_diff(ens: Ensemble, x: np.ndarray) -> np.ndarray:
    """CatBoost's PredictionDiff of two checked rows (``x: f32[2, F]``).

    Args:
        ens: a numeric one-output ``ObliviousEnsemble`` or ``TreeEnsemble`` (the caller checks).
        x: the two rows, raw feature values (NaN allowed).

    Returns:
        ``f64[F]``: ``|impact_0 + impact_1|`` (see the module docstring).
    """
    moves = MOVES[ens.layout](ens, x)
    n_rows, n_features = x.shape
    width = moves.borders.shape[1] + 1
    sums = np.zeros((n_rows, n_features, width))
    rows = np.broadcast_to(np.arange(n_rows)[:, None], moves.feature.shape)
    np.add.at(sums, (rows, moves.feature, moves.bin), moves.diff)  # in order, as CatBoost adds
    own = (x[:, :, None] > moves.borders[None]).sum(axis=2)  # [2, F] each row's bin; NaN: 0
    n_bins = np.isfinite(moves.borders).sum(axis=1) + 1  # [F]
    upward = moves.raw < moves.raw[::-1]  # [2] CatBoost's tryIncrease
    impact = _largest_move(sums, own, n_bins, upward)
    return np.abs(impact[0] + impact[1])


def _largest_move(sums: np.ndarray, own: np.ndarray, n_bins: np.ndarray, upward: np.ndarray) -> np.ndarray:
    """``f64[2, F]`` per row and feature, the largest ``|change|`` of moving the feature's bin
    away from ``own`` (down to 0, or up to the last bin) whose running sum of ``sums`` has the
    wanted sign (``> 0`` where ``upward``, else ``< 0``); 0 when none has.

    Args:
        sums: ``f64[2, F, n_bins]`` summed flips per bin.
        own: ``i64[2, F]`` each row's own bin.
        n_bins: ``i64[F]`` each feature's bins.
        upward: ``bool[2]`` whether each row looks for an increase.
    """
    steps = np.arange(sums.shape[2])
    best = np.zeros(sums.shape[:2])
    for direction in (-1, 1):  # bins own-1, own-2, ..., 0, then own+1, ..., n_bins-1
        target = own[:, :, None] + direction * (steps + 1)  # [2, F, n_bins]
        valid = (target >= 0) & (target < n_bins[None, :, None])
        gathered = np.take_along_axis(sums, np.clip(target, 0, sums.shape[2] - 1), axis=2)
        moved = np.cumsum(np.where(valid, gathered, 0.0), axis=2)  # valid steps come first
        wanted = valid & np.where(upward[:, None, None], moved > 0, moved < 0)
        best = np.maximum(best, np.where(wanted, np.abs(moved), 0.0).max(axis=2))
    return best


def _raw(ens, values: np.ndarray, leaves: np.ndarray) -> np.ndarray:
    """``f64[2]`` raw predictions from ``values f64[T, L]`` and ``leaves i64[2, T]``."""
    trees = np.arange(values.shape[0])
    return float(ens.scale) * values[trees, leaves].sum(axis=1) + float(np.asarray(ens.bias)[0])


def _oblivious_moves(ens: ObliviousEnsemble, x: np.ndarray) -> _Moves:
    """The flips of an oblivious ensemble (``CalcObliviousIndicatorCoefficients``): flipping
    bit ``d`` of the leaf moves the row to bin ``split_bins + new bit``."""
    values = np.asarray(ens.leaf_values, np.float64)[..., 0]  # [T, L]: unscaled, as in CatBoost
    leaves = np.asarray(leaf_indices(ens, x, progress=False), np.int64)  # [2, T]
    depths = np.arange(ens.depth)
    flipped = leaves[:, :, None] ^ (1 << depths)  # [2, T, D]
    trees = np.arange(values.shape[0])[:, None]
    diff = values[trees, flipped] - values[np.arange(values.shape[0]), leaves][:, :, None]
    keep = np.asarray(ens.split_mask)[None] & (np.abs(diff) >= _DROPPED)
    n_rows = x.shape[0]
    features = np.broadcast_to(np.asarray(ens.split_features, np.int64), flipped.shape)
    bins = np.asarray(ens.split_bins, np.int64)[None] + ((flipped >> depths) & 1)
    return _Moves(np.asarray(ens.borders), features.reshape(n_rows, -1), bins.reshape(n_rows, -1),
                  np.where(keep, diff, 0.0).reshape(n_rows, -1), _raw(ens, values, leaves))


def _feature_borders(ens: TreeEnsemble) -> tuple[np.ndarray, np.ndarray]:
    """The model's borders per feature, as CatBoost's model keeps them (its splits' borders).

    Returns:
        ``(borders f32[F, n_bins - 1], node_bin i64[T, M])``: each feature's sorted distinct split
        borders padded with ``+inf``, and each node's border index among its feature's (0 where
        padded).
    """
    features = np.asarray(ens.node_features, np.int64)
    borders = np.asarray(ens.node_borders)
    real = np.isfinite(borders)
    f, b = features[real], borders[real]
    order = np.lexsort((b, f))
    fs, bs = f[order], b[order]
    new = np.r_[True, (fs[1:] != fs[:-1]) | (bs[1:] != bs[:-1])]
    distinct = np.cumsum(new) - 1  # [nodes] index of each sorted node's distinct split
    first_of_feature = np.searchsorted(fs[new], np.arange(ens.n_features))  # [F]
    rank = distinct - first_of_feature[fs]  # border index within the feature
    width = max(1, int(np.bincount(fs[new], minlength=ens.n_features).max(initial=0)))
    table = np.full((ens.n_features, width), np.inf, np.float32)
    table[fs[new], rank[new]] = bs[new]
    node_bin = np.zeros(features.shape, np.int64)
    node_bin[tuple(np.argwhere(real)[order].T)] = rank
    return table, node_bin


def _tree_moves(ens: TreeEnsemble, x: np.ndarray) -> _Moves:
    """The flips of a non-symmetric ensemble, walked as CatBoost walks the model reloaded from
    JSON (see the module docstring): ``D`` path entries per tree, then the leaf node's entry."""
    borders, node_bin = _feature_borders(ens)
    values = np.asarray(ens.leaf_values, np.float64)[..., 0]  # [T, L]
    n_trees, n_nodes = node_bin.shape
    leaves = np.asarray(leaf_indices(ens, x, progress=False), np.int64)  # [2, T] true leaves
    own_value = values[np.arange(n_trees), leaves]  # [2, T]
    # CatBoost's copy of the row: values at or below every border of their feature read as 0
    copy = np.where(x > borders[:, 0], x, np.float32(0.0)).astype(np.float32)  # [2, F]
    features = np.asarray(ens.node_features, np.int64)
    node_borders = np.asarray(ens.node_borders)
    children = np.asarray(ens.node_children, np.int64)
    goes_right = (copy[:, features] > node_borders).astype(np.int64)  # [2, T, M]
    # the leaf the copy reaches from every node
    pointer = np.broadcast_to(np.arange(n_nodes), goes_right.shape)
    tree_of = np.arange(n_trees)[None, :, None]
    for _ in range(ens.depth):
        node = np.maximum(pointer, 0)
        step = children[tree_of, node, np.take_along_axis(goes_right, node, axis=2)]
        pointer = np.where(pointer >= 0, step, pointer)
    reached = ~pointer  # [2, T, M]
    # the copy's path from the root, and the flip at each of its nodes
    rows, trees = np.arange(x.shape[0])[:, None], np.arange(n_trees)[None, :]
    at = np.broadcast_to(np.asarray(ens.roots, np.int64), (x.shape[0], n_trees))  # [2, T]
    feature, bins, diff = [], [], []
    for _ in range(ens.depth):
        node = np.maximum(at, 0)
        right = goes_right[rows, trees, node]
        other = children[trees, node, 1 - right]
        flipped = np.where(other >= 0, reached[rows, trees, np.maximum(other, 0)], ~other)
        change = values[trees, flipped] - own_value
        feature.append(features[trees, node])
        bins.append(node_bin[trees, node] + (copy[rows, features[trees, node]] < node_borders[trees, node]))
        diff.append(np.where((at >= 0) & (np.abs(change) > _DROPPED), change, 0.0))
        at = np.where(at >= 0, children[trees, node, right], at)
    # the leaf node: its split index is 0, the model's first split
    first = int(np.flatnonzero(np.isfinite(borders[:, 0]))[0]) if np.isfinite(borders).any() else 0
    change = values[trees, ~at] - own_value
    feature.append(np.full_like(at, first))
    bins.append(np.broadcast_to((copy[:, first] < borders[first, 0])[:, None], at.shape).astype(np.int64))
    diff.append(np.where(np.abs(change) > _DROPPED, change, 0.0))
    return _Moves(borders, _flat(feature), _flat(bins).astype(np.int64), _flat(diff), _raw(ens, values, leaves))


def _flat(levels: list[np.ndarray]) -> np.ndarray:
    """``[2, T * (D + 1)]`` from ``D + 1`` arrays ``[2, T]``, tree by tree (CatBoost's order)."""
    return np.stack(levels, axis=2).reshape(levels[0].shape[0], -1)


# ens.layout -> (ens, x f32[2, F]) -> the rows' flips
MOVES = {"oblivious": _oblivious_moves, "trees": _tree_moves}
