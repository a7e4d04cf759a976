"""A model's first trees as a model of their own: shap's ``tree_limit``, CatBoost's ``ntree_end``.

Only the arrays with a tree axis are cut; the scale, the bias and everything per feature are
kept, so a forest's first trees keep its ``1 / T`` scale (shap's ``tree_limit`` on a
scikit-learn forest sums the first trees' scaled values, it does not average them again).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaximp._models.ensemble import Ensemble

# the fields of each layout with a leading tree axis (None fields are left None)
TREE_FIELDS = {
    "oblivious": ("split_features", "split_borders", "split_bins", "split_mask", "leaf_values", "leaf_weights"),
    "trees": ("roots", "node_features", "node_borders", "node_nan_right", "node_children", "leaf_values",
              "leaf_weights", "node_gains", "node_weights", "leaf_ids", "node_categorical", "node_categories"),
}


def first_trees(ens: Ensemble, n_trees: int) -> Ensemble:
    """The model of ``ens``'s first ``n_trees`` trees (in the model's order: boosting round after
    round, a multiclass round's trees class by class); ``ens`` itself when ``n_trees`` covers
    every tree. ``n_trees`` must be a positive int."""
    if n_trees >= ens.n_trees:
        return ens
    cut = {name: getattr(ens, name)[:n_trees] for name in TREE_FIELDS[ens.layout] if getattr(ens, name) is not None}
    if ens.layout == "trees":
        cut["depth"] = max(1, _longest_path(np.asarray(cut["roots"]), np.asarray(cut["node_children"])))
    return dataclasses.replace(ens, **cut)


def _longest_path(roots: np.ndarray, children: np.ndarray) -> int:
    """The longest root-to-leaf path, in splits, of trees given by their roots and child pointers
    (``jaximp._models.trees``' layout), one level of every tree at a time."""
    t = np.arange(len(roots))
    nodes, depth = roots.copy(), 0
    while (nodes >= 0).any():
        depth += 1
        inner = nodes >= 0
        step = children[t[inner], nodes[inner]]  # [n, 2]
        t, nodes = np.repeat(t[inner], 2), step.reshape(-1)
    return depth


def reached_leaves(ens: Ensemble) -> np.ndarray:
    """``bool[T, L]`` the leaves some row can reach: a child of some node (or the leaf of a
    one-leaf tree) for general trees; for symmetric trees, the leaves with training weight (a
    shallower tree's padded depths send every row to one side)."""
    if ens.layout == "oblivious":
        return np.asarray(ens.leaf_weights) > 0
    children = np.asarray(ens.node_children)  # [T, M, 2]; a leaf pointer c < 0 names leaf -c - 1
    n_trees, n_leaves = ens.n_trees, ens.n_leaves
    reached = np.zeros((n_trees, n_leaves + 1), bool)  # the last column takes the padding's pointers
    trees = np.broadcast_to(np.arange(n_trees)[:, None, None], children.shape)
    leaf = children < 0
    reached[trees[leaf], np.minimum(-children[leaf] - 1, n_leaves)] = True
    reached[np.asarray(ens.roots) < 0, 0] = True
    return reached[:, :n_leaves]
