"""scikit-learn's tree arrays (a ``sklearn.tree._tree.Tree``, a HistGradientBoosting
``TreePredictor``) read as :class:`Nodes`, checked, and renumbered as jaximp's
:class:`~jaximp._importers.padded.ParsedTree` (see :mod:`jaximp._importers.sklearn`).

A fitted model is input like a model file: every array is checked before it is used as an
index, and an inconsistent tree (a child out of range, a node that is the child of two nodes or
of none, a cycle, a split on a feature the model lacks, a NaN threshold, numbers that are no
finite float32) is refused with a ``ValueError`` naming the tree and the node.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from jaximp._importers.padded import ParsedTree, float32_below
from jaximp._models.categories import bitset_members

_FN = "from_sklearn"


@dataclasses.dataclass(frozen=True)
class Nodes:
    """One tree in its library's node numbering: ``n_all`` nodes, leaves included, the root 0.

    Attributes:
        feature: ``i64[n_all]`` the input column each split reads.
        threshold: ``f64[n_all]`` a row goes left when ``x <= threshold``.
        left, right: ``i64[n_all]`` the children, -1 at leaves.
        nan_left: ``bool[n_all]`` a NaN goes left.
        value: ``f64[n_all, K]`` the leaves' values.
        weight: ``f64[n_all]`` each node's weighted training samples.
        gain: ``f64[n_all]`` each split's gain (0 at leaves).
        categorical: ``bool[n_all]`` a split on a set of categories.
        right_set: ``bool[n_all, n_categories]`` the categories (codes ``0..n_categories-1``)
            a categorical split sends right.
    """

    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    right: np.ndarray
    nan_left: np.ndarray
    value: np.ndarray
    weight: np.ndarray
    gain: np.ndarray
    categorical: np.ndarray
    right_set: np.ndarray
    where: str = "the tree"


@dataclasses.dataclass(frozen=True)
class HistCategories:
    """HistGradientBoosting's categorical features.

    With categorical features, the model's ``OrdinalEncoder`` codes them and its
    ``ColumnTransformer`` puts them first.

    Attributes:
        columns: ``i64[F]`` the input column of the trees' feature ``k`` is ``columns[k]``.
        codes: a ``CategoryCodes`` holding each categorical column's training values in code
            order, or None (no categorical features).
        known: ``bool[n_categorical, n_categories]`` per categorical feature, the codes seen in
            training (``make_known_categories_bitsets``), ``n_categories`` the most codes of a
            feature.
        f_idx_map: ``i64[F]`` the row of the trees' feature ``k`` in ``known``.
    """

    columns: np.ndarray
    codes: Any
    known: np.ndarray
    f_idx_map: np.ndarray


def tree_nodes(tree: Any, value: np.ndarray, n_features: int, where: str) -> Nodes:
    """A ``sklearn.tree._tree.Tree`` with leaf values ``value f64[n_all, K]``, checked (a node is
    a leaf where ``children_left`` is -1, as scikit-learn's ``apply`` reads it)."""
    left = np.asarray(tree.children_left, np.int64)
    right = np.asarray(tree.children_right, np.int64)
    weight = np.asarray(tree.weighted_n_node_samples, np.float64)
    impurity = np.asarray(tree.impurity, np.float64)
    internal = left != -1
    check_children(left, right, internal, where)
    gain = np.zeros(len(left))
    l, r = left[internal], right[internal]
    gain[internal] = (weight[internal] * impurity[internal] - weight[l] * impurity[l]
                      - weight[r] * impurity[r])
    nan_left = np.asarray(tree.missing_go_to_left, bool)
    n = len(left)
    nodes = Nodes(np.asarray(tree.feature, np.int64), np.asarray(tree.threshold, np.float64),
                   np.where(internal, left, -1), right, nan_left, np.asarray(value, np.float64), weight, gain,
                   np.zeros(n, bool), np.zeros((n, 0), bool), where)
    check_nodes(nodes, n_features)
    return nodes


def check_children(left: np.ndarray, right: np.ndarray, internal: np.ndarray, where: str) -> None:
    """Every internal node's children are nodes of the tree other than the root."""
    n = len(left)
    if not n:
        raise ValueError(f"{_FN}: {where} has no nodes (an edited or damaged model: refit it)")
    bad = internal & ((left < 1) | (left >= n) | (right < 1) | (right >= n))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{_FN}: {where}'s node {i} has children ({left[i]}, {right[i]}), outside the tree's "
                         f"nodes 1..{n - 1} (an edited or damaged model: refit it)")


def check_nodes(nodes: Nodes, n_features: int) -> None:
    """The values a tree's splits and leaves hold: features of the model, thresholds that are
    numbers, finite float32 leaf values, finite weights and gains.

    Raises:
        ValueError: naming the tree and the node.
    """
    internal = nodes.left >= 0
    largest = np.finfo(np.float32).max
    problems = (
        (internal & ((nodes.feature < 0) | (nodes.feature >= n_features)), nodes.feature,
         f"splits on feature {{}}, outside the model's n_features_in_ = {n_features}"),
        (internal & ~nodes.categorical & np.isnan(nodes.threshold), nodes.threshold, "has threshold {}"),
        (~internal[:, None] & ~(np.abs(nodes.value) <= largest), nodes.value,
         "has leaf value {}, which is no finite float32 number (jaximp's leaf values are float32)"),
        (~(np.abs(nodes.weight) <= largest), nodes.weight, "has weighted sample count {}, which is no finite "
         "float32 number"),
        (internal & ~(np.abs(nodes.gain) <= largest), nodes.gain, "has an impurity decrease (gain) of {}, which is "
         "no finite float32 number"),
    )
    for bad, values, what in problems:
        if bad.any():
            at = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(f"{_FN}: {nodes.where}'s node {at[0]} {what.format(values[at])} (an edited or "
                             "damaged model: refit it)")


def predictor_nodes(predictor: Any, k: int, n_outputs: int, categories: HistCategories, where: str) -> Nodes:
    """A HistGradientBoosting ``TreePredictor``, values in column ``k``, features as input
    columns (``categories.columns``), checked.

    A categorical node sends a code right unless it is in its ``raw_left_cat_bitsets`` row
    (left) or unknown (``known``: missing, ``missing_go_to_left``), as ``_predict_one_from_raw_data``
    (sklearn/ensemble/_hist_gradient_boosting/_predictor.pyx) does.
    """
    nodes = predictor.nodes
    leaf = nodes["is_leaf"].astype(bool)
    left, right = nodes["left"].astype(np.int64), nodes["right"].astype(np.int64)
    check_children(left, right, ~leaf, where)
    value = np.zeros((len(nodes), n_outputs))
    value[:, k] = nodes["value"]
    feature = np.where(leaf, 0, nodes["feature_idx"].astype(np.int64))
    n_features = len(categories.columns)
    bad = (feature < 0) | (feature >= n_features)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{_FN}: {where}'s node {i} splits on feature {feature[i]}, outside the model's "
                         f"n_features_in_ = {n_features} (an edited or damaged model: refit it)")
    nan_left = nodes["missing_go_to_left"].astype(bool)
    categorical = nodes["is_categorical"].astype(bool) & ~leaf
    known = categories.known
    right_set = np.zeros((len(nodes), known.shape[1]), bool)
    if categorical.any():
        check_categorical(predictor, categorical, feature, categories, where)
        width = known.shape[1]
        left_set = bitset_members(predictor.raw_left_cat_bitsets[nodes["bitset_idx"][categorical]])[:, :width]
        seen = known[categories.f_idx_map[feature[categorical]]]
        right_set[categorical] = np.where(seen, ~left_set, ~nan_left[categorical, None])
    checked = Nodes(categories.columns[feature], nodes["num_threshold"].astype(np.float64),
                     np.where(leaf, -1, left), np.where(leaf, -1, right),
                     nan_left, value, nodes["count"].astype(np.float64),
                     np.where(leaf, 0.0, nodes["gain"].astype(np.float64)), categorical, right_set, where)
    check_nodes(checked, n_features)
    return checked


def check_categorical(predictor: Any, categorical: np.ndarray, feature: np.ndarray,
                       categories: HistCategories, where: str) -> None:
    """Categorical nodes split on categorical features, each with a row of category bitsets."""
    trees_feature = feature[categorical]  # the trees' feature order: categorical features first
    n_categorical = len(categories.known)
    bad = trees_feature >= n_categorical
    if bad.any():
        column = categories.columns[trees_feature[bad][0]]
        raise ValueError(f"{_FN}: {where} has a categorical split on feature {column}, which the model does not "
                         "declare categorical (an edited or damaged model: refit it)")
    index = predictor.nodes["bitset_idx"][categorical].astype(np.int64)
    bad = index >= len(predictor.raw_left_cat_bitsets)
    if bad.any():
        raise ValueError(f"{_FN}: {where} has a categorical split on bitset {index[bad][0]} of "
                         f"{len(predictor.raw_left_cat_bitsets)} (an edited or damaged model: refit it)")


def parsed_trees(trees: list[Nodes]) -> list[ParsedTree]:
    """The trees in jaximp's numbering: internal nodes in preorder (root 0), leaves depth-first
    left to right, each leaf's library node id kept in ``leaf_ids``.

    All trees are walked together, one level per step: levels down give each node's depth,
    levels up each subtree's leaf and internal-node counts, levels down again each node's
    position (a left child follows its parent; a right child follows its sibling's subtree).
    """
    sizes = np.asarray([len(t.left) for t in trees], np.int64)
    start = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    tree_of = np.repeat(np.arange(len(trees)), sizes)
    local = np.arange(int(sizes.sum())) - start[tree_of]
    cat = lambda field: np.concatenate([getattr(t, field) for t in trees])  # noqa: E731
    left, right = cat("left"), cat("right")
    internal = left >= 0
    left = np.where(internal, left + start[tree_of], -1)
    right = np.where(internal, right + start[tree_of], -1)
    parents = np.bincount(np.concatenate([left[internal], right[internal]]), minlength=len(left))
    bad = parents != (local != 0)  # the root of no node, every other node of one: then the walk ends
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{_FN}: {trees[tree_of[i]].where} is not a tree: its node {local[i]} is the child of "
                         f"{parents[i]} nodes (the root 0 must be the child of none, every other node of one; "
                         "an edited or damaged model: refit it)")

    levels, depth = [], np.full(len(left), -1, np.int64)
    frontier = start
    while frontier.size:
        depth[frontier] = len(levels)
        levels.append(frontier)
        inner = frontier[internal[frontier]]
        frontier = np.concatenate([left[inner], right[inner]])
    if (depth < 0).any():
        i = int(np.flatnonzero(depth < 0)[0])
        raise ValueError(f"{_FN}: {trees[tree_of[i]].where} is not a tree: its node {local[i]} is not reached "
                         "from the root (a cycle of nodes; an edited or damaged model: refit it)")
    n_leaves = (~internal).astype(np.int64)
    n_inner = internal.astype(np.int64)
    for nodes in reversed(levels):
        inner = nodes[internal[nodes]]
        n_leaves[inner] = n_leaves[left[inner]] + n_leaves[right[inner]]
        n_inner[inner] = 1 + n_inner[left[inner]] + n_inner[right[inner]]
    leaf_pos = np.zeros(len(left), np.int64)
    node_pos = np.zeros(len(left), np.int64)
    for nodes in levels:
        inner = nodes[internal[nodes]]
        l, r = left[inner], right[inner]
        leaf_pos[l], node_pos[l] = leaf_pos[inner], node_pos[inner] + 1
        leaf_pos[r], node_pos[r] = leaf_pos[inner] + n_leaves[l], node_pos[inner] + 1 + n_inner[l]
    pointer = np.where(internal, node_pos, ~leaf_pos)

    def per_tree(where: np.ndarray, position: np.ndarray, **arrays: np.ndarray) -> list[dict[str, np.ndarray]]:
        """Per tree, each array at its nodes among ``where``, in ``position`` order."""
        order = where[np.lexsort((position[where], tree_of[where]))]
        ends = np.cumsum(np.bincount(tree_of[order], minlength=len(trees))).tolist()
        ordered = {name: array[order] for name, array in arrays.items()}
        return [{name: array[begin:end] for name, array in ordered.items()} for begin, end in zip([0] + ends, ends)]

    categorical, nan_left, weight = cat("categorical"), cat("nan_left"), cat("weight")
    nodes = per_tree(
        np.flatnonzero(internal), node_pos,
        node_features=cat("feature"),
        node_borders=np.where(categorical, np.float32(0.0),  # codes are 0, 1, ...: below is no category
                              float32_below(cat("threshold"))),
        node_nan_right=~nan_left,
        node_children=np.stack([pointer[np.maximum(left, 0)], pointer[np.maximum(right, 0)]], axis=-1),
        node_gains=cat("gain"),
        node_weights=weight,
        node_categorical=categorical,
        right_set=cat("right_set"),
    )
    leaves = per_tree(np.flatnonzero(~internal), leaf_pos, leaf_values=cat("value"), leaf_weights=weight,
                      leaf_ids=local, depth=depth)
    parsed = []
    for node, leaf in zip(nodes, leaves):
        right_set, split = node.pop("right_set"), node["node_categorical"]
        parsed.append(ParsedTree(
            root=0 if len(node["node_features"]) else -1,
            depth=int(leaf.pop("depth").max()),
            right_categories=tuple(right_set[split]),
            others_right=node["node_nan_right"][split],  # unknown codes go where missing values go
            **node, **leaf,
        ))
    return parsed
