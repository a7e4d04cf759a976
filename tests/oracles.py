"""What jaximp's numbers are checked against: definitions enumerated in float64 NumPy, and the
reference libraries' own numbers in jaximp's layouts. Every brute force of the suite is here.

* ``shapley``: exact Shapley values of any set function, by enumerating every coalition.
* ``Tree``: one binary tree as node arrays with the library's own decision rule, read from each
  library's model independently of jaximp's importers (``oblivious_trees``,
  ``catboost_json_trees``, ``xgboost_json_trees``, ``lightgbm_trees``, ``sklearn_trees``; and
  ``soft_trees`` of a jaximp ensemble with sigmoid splits), its games (``path_dependent_game``:
  Lundberg et al. 2020, Algorithm 1; ``interventional_game``; ``saabas``) and ``tree_shap``, the
  Shapley values of an ensemble of them; ``oblivious_shap`` adds CatBoost's Exact game.
* ``prediction_shap``: interventional Shapley values over the columns, each coalition's value the
  mean of the model's own predictions of rows mixed with a background.
* ``permutation_importances``: permutation importance with jaximp's own row draws
  (``permutation_draws``), the model predicting every permuted copy, scored by ``catboost_loss_score``
  (CatBoost's eval_metrics), ``model_loss`` or any scorer.
* ``prediction_values_change``, ``split_statistics``, ``json_interaction``, ``mean_abs``:
  CatBoost's and XGBoost's model importances and mean |SHAP| written out from their definitions.
* CatBoost, XGBoost, LightGBM, scikit-learn and shap as references: ``catboost_shap``,
  ``catboost_interactions``, ``catboost_interaction``, ``xgboost_contributions``,
  ``lightgbm_contributions``, ``raw_output``, ``shap_tree_dict``, ``shap_layout``.
* ``assert_close``: explicit tolerances, relative to the expected magnitude.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Callable
from typing import Any

import catboost
import models
import numpy as np
import pandas as pd

import jaximp
from jaximp._importances.draws import as_key, row_draws

# Tolerances ---------------------------------------------------------------------------------


def assert_close(got, expected, rtol=1e-5, atol=None, floor=1.0):
    """``|got - expected| <= rtol |expected| + atol * max(floor, max |expected|)`` elementwise,
    ``atol`` defaulting to ``rtol``: float32 results against float64 references, whose rounding
    grows with the magnitude of the numbers summed."""
    expected = np.asarray(expected, np.float64)
    magnitude = max(floor, float(np.abs(expected).max()))
    atol = rtol if atol is None else atol
    np.testing.assert_allclose(np.asarray(got, np.float64), expected, rtol=rtol, atol=atol * magnitude)


def mean_abs(values):
    """Mean absolute values over the rows (axis 0) in float64: a global importance."""
    return np.abs(np.asarray(values, np.float64)).mean(0)


# Shapley values by enumeration ------------------------------------------------------------------


def shapley(value: Callable, players) -> dict:
    """``{player: phi}``: the Shapley values of the game ``value(frozenset of players) -> f64[K]``,
    ``phi_p = sum_{S subset of P - p} |S|! (n - |S| - 1)! / n! (v(S + p) - v(S))``, every
    coalition enumerated (each evaluated once)."""
    players = list(players)
    n = len(players)
    v = {frozenset(S): np.asarray(value(frozenset(S)), np.float64)
         for r in range(n + 1) for S in itertools.combinations(players, r)}
    phi = {}
    for p in players:
        others = [q for q in players if q != p]
        total = 0.0
        for r in range(n):
            w = math.factorial(r) * math.factorial(n - r - 1) / math.factorial(n)
            for S in itertools.combinations(others, r):
                total = total + w * (v[frozenset(S) | {p}] - v[frozenset(S)])
        phi[p] = total
    return phi


# Binary trees and their games ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class Tree:
    """One binary tree as node arrays (node 0 the root), read from a library's model."""

    left: np.ndarray  # i[nodes]: the left child; -1 at leaves
    right: np.ndarray  # i[nodes]
    feature: np.ndarray  # i[nodes]: the feature (player) a node splits on
    value: np.ndarray  # f64[nodes, K]: the leaves' values (scaled as in the model's raw output)
    cover: np.ndarray  # f64[nodes]: the training weight at each node
    goes_right: Callable  # (node, row) -> 1.0 (right) or 0.0 (left), as the library decides; soft: in between
    threshold: np.ndarray | None = None  # f64[nodes], for shap's dictionaries
    default_left: np.ndarray | None = None  # bool[nodes]: where NaN goes, for shap's dictionaries

    def players(self) -> list:
        return sorted(set(self.feature[self.left >= 0].tolist()))

    def leaf(self, row) -> int:
        node = 0
        while self.left[node] >= 0:
            node = self.right[node] if self.goes_right(node, row) > 0.5 else self.left[node]
        return node

    def leaves_under(self, node) -> list:
        if self.left[node] < 0:
            return [node]
        return self.leaves_under(self.left[node]) + self.leaves_under(self.right[node])

    def mean(self, node):
        """The cover-weighted mean of the leaves under ``node`` (a plain mean where they have no cover)."""
        under = self.leaves_under(node)
        w = self.cover[under]
        return w @ self.value[under] / w.sum() if w.sum() > 0 else self.value[under].mean(0)


def with_covers(left, right, cover):
    """``cover`` with each internal node's the sum of its leaves' (leaves given, internal nodes 0)."""
    cover = np.asarray(cover, np.float64).copy()

    def fill(node):
        if left[node] >= 0:
            cover[node] = fill(left[node]) + fill(right[node])
        return cover[node]

    fill(0)
    return cover


def path_dependent_game(tree: Tree, row) -> Callable:
    """``v(S)`` of Lundberg's path-dependent game: a split on a feature of ``S`` follows the row,
    any other split both children weighted by their covers (half each where both are 0)."""
    def v(S, node=0):
        if tree.left[node] < 0:
            return tree.value[node]
        left, right = tree.left[node], tree.right[node]
        if tree.feature[node] in S:
            p = tree.goes_right(node, row)
            if p == 1.0:
                return v(S, right)
            if p == 0.0:
                return v(S, left)
            return p * v(S, right) + (1 - p) * v(S, left)
        cl, cr = tree.cover[left], tree.cover[right]
        if cl + cr > 0:
            return (cl * v(S, left) + cr * v(S, right)) / (cl + cr)
        return 0.5 * (v(S, left) + v(S, right))

    return v


def interventional_game(tree: Tree, row, background) -> Callable:
    """``v(S)``: the mean over the background rows of the leaf reached by the row's features in
    ``S`` and the background row's other features."""
    def v(S):
        mixed = np.where(np.isin(np.arange(len(row)), list(S)), row, background)
        return np.mean([tree.value[tree.leaf(b)] for b in mixed], axis=0)

    return v


def saabas(tree: Tree, row) -> dict:
    """``{feature: phi}``: Saabas's attributions, the change of the node mean at each split of
    the row's path credited to the split's feature."""
    phi, node = {}, 0
    before = tree.mean(node)
    while tree.left[node] >= 0:
        child = tree.right[node] if tree.goes_right(node, row) > 0.5 else tree.left[node]
        after = tree.mean(child)
        phi[tree.feature[node]] = phi.get(tree.feature[node], 0.0) + after - before
        node, before = child, after
    return phi


def tree_shap(trees, x, n_features, background=None):
    """``f64[N, F, K]``: the sum over ``trees`` of the Shapley values of each tree's
    path-dependent game, or its interventional one over ``background``, the features it splits
    on as players."""
    out = np.zeros((len(x), n_features, trees[0].value.shape[1]))
    for tree in trees:
        for i, row in enumerate(x):
            game = path_dependent_game(tree, row) if background is None else interventional_game(tree, row, background)
            for p, phi in shapley(game, tree.players()).items():
                out[i, p] += phi
    return out


def exact_indices(trees, row, n_features, index, order, output=0, background=None, groups=None) -> Any:
    """shapiq's ``ExactComputer`` (every coalition enumerated) on the sum over ``trees`` of their
    path-dependent games for ``row`` (interventional over ``background`` when given), output
    ``output``: a ``shapiq.InteractionValues``. With ``groups`` (lists of features), the players
    are the groups: a coalition is the union of its groups' features."""
    import shapiq

    games = [path_dependent_game(tree, row) if background is None else interventional_game(tree, row, background)
             for tree in trees]
    groups = [[f] for f in range(n_features)] if groups is None else groups

    def game(coalitions):
        sets = [{f for g in np.flatnonzero(c) for f in groups[g]} for c in coalitions]
        return np.array([sum(float(np.atleast_1d(v(s))[output]) for v in games) for s in sets])

    return shapiq.ExactComputer(n_players=len(groups), game=game)(index, order)


def tiny_model(library, name):
    """``(fitted, rows, background, the library's trees)`` of a tiny model (a few trees over 4
    features): CatBoost ``kind-grow_policy`` (3 trees of depth 3), XGBoost ``kind`` (2 rounds of
    depth 3), LightGBM ``name`` (3 iterations of 6 leaves), scikit-learn ``hgb`` / ``gb``."""
    if library == "catboost":
        kind, grow_policy = name.split("-")
        max_leaves = 6 if grow_policy == "Lossguide" else None
        fitted = models.catboost_trees(kind, grow_policy, 3, max_leaves, "Max", iterations=3, n_features=4)
        return fitted, models.explained_rows(fitted.X, 10), fitted.X[200:215], catboost_json_trees(fitted.json)
    if library == "xgboost":
        fitted = models.xgboost_tiny(name)
        trees = xgboost_json_trees(json.loads(fitted.model.save_raw("json")))
        return fitted, models.explained_rows(fitted.X, 10), fitted.X[200:215], trees
    if library == "lightgbm":
        fitted = models.lightgbm_model(name, n_features=4, rounds=3, num_leaves=6)
        return fitted, models.lightgbm_rows(fitted.model, fitted.X, 12), fitted.X[300:315], lightgbm_trees(fitted.model)
    fitted = models.sklearn_tiny(name)
    return fitted, models.explained_rows(fitted.X, 8), None, sklearn_trees(fitted.model)


def _heap_tree(features, borders, values, weights, goes_right, default_left=True) -> Tree:
    """An oblivious tree of depth ``d`` (``features``, ``borders`` by depth, ``values [2**d, K]``
    and ``weights`` by leaf index) as the binary tree it unrolls to, in heap order: the root
    splits at depth d - 1 (the leaf index's highest bit), the left child is the bit's 0."""
    d = len(features)
    n = (2 << d) - 1
    left, right, feature = np.full(n, -1), np.full(n, -1), np.full(n, -2)
    threshold, value, cover = np.full(n, -2.0), np.zeros((n, values.shape[1])), np.zeros(n)
    for i in range(n):
        level = (i + 1).bit_length() - 1
        lo, hi = (i - (1 << level) + 1) << (d - level), (i - (1 << level) + 2) << (d - level)
        cover[i] = weights[lo:hi].sum()
        value[i] = values[lo:hi].mean(0)  # the leaf's value at leaves; shap's node values elsewhere
        if level < d:
            left[i], right[i] = 2 * i + 1, 2 * i + 2
            feature[i] = int(features[d - 1 - level])
            threshold[i] = float(borders[d - 1 - level])
    split_depth = {i: d - 1 - ((i + 1).bit_length() - 1) for i in range(n)}
    return Tree(left, right, feature, value, cover, lambda node, row: goes_right(split_depth[node], row),
                threshold, np.full(n, default_left))


def _oblivious_parts(ens, t):
    """``(features, borders, values f64[2**d, K] scaled, weights f64[2**d])`` of tree ``t``'s real
    depth ``d``; a tree without weight counts its leaves equally."""
    d = int(np.asarray(ens.split_mask[t]).sum())
    weights = np.asarray(ens.leaf_weights[t, : 1 << d], np.float64)
    if weights.sum() == 0:
        weights = np.ones_like(weights)
    return (np.asarray(ens.split_features[t, :d]), np.asarray(ens.split_borders[t, :d]),
            np.asarray(ens.leaf_values[t, : 1 << d], np.float64) * float(ens.scale), weights)


def oblivious_trees(ens) -> list:
    """The trees of an ObliviousEnsemble (read from its arrays), ``x > border`` going right."""
    trees = []
    for t in range(ens.n_trees):
        features, borders, values, weights = _oblivious_parts(ens, t)
        trees.append(_heap_tree(features, borders, values, weights,
                                lambda k, row, f=features, b=borders: float(row[f[k]] > b[k])))
    return trees


def oblivious_exact_game(ens, t, row) -> Callable:
    """``v(S)`` of CatBoost's Exact game on oblivious tree ``t``: the splits on features outside
    ``S`` take the bits of a leaf drawn by training weight."""
    features, borders, values, weights = _oblivious_parts(ens, t)
    d = len(features)
    row_bits = [int(row[features[k]] > borders[k]) for k in range(d)]

    def v(S):
        hybrid = [values[sum((row_bits[k] if features[k] in S else (b >> k) & 1) << k for k in range(d))]
                  for b in range(1 << d)]
        return np.tensordot(weights, np.array(hybrid), 1) / weights.sum()

    return v


def oblivious_shap(ens, x, method, background=None):
    """``(phi f64[N, F, K], expected f64[K])`` of an ObliviousEnsemble by enumeration, for
    ``method`` path_dependent, exact (CatBoost's Exact), approximate (Saabas) or interventional."""
    phi = np.zeros((len(x), ens.n_features, ens.n_outputs))
    expected = np.asarray(ens.bias, np.float64).copy()
    for t, tree in enumerate(oblivious_trees(ens)):
        leaves = tree.leaves_under(0)
        for i, row in enumerate(x):
            if method == "approximate":
                found = saabas(tree, row)
            else:
                game = {"path_dependent": lambda: path_dependent_game(tree, row),
                        "exact": lambda: oblivious_exact_game(ens, t, row),
                        "interventional": lambda: interventional_game(tree, row, background)}[method]()
                found = shapley(game, tree.players())
            for p, value in found.items():
                phi[i, p] += value
        if method == "interventional":
            expected += np.mean([tree.value[tree.leaf(b)] for b in background], axis=0)
        else:
            expected += tree.cover[leaves] @ tree.value[leaves] / tree.cover[leaves].sum()
    return phi, expected


def catboost_json_trees(model_json) -> list:
    """The non-symmetric trees of a CatBoost JSON export (float splits): ``x > border`` goes
    right (both in float32), NaN to the side of the feature's nan treatment; covers: the leaves'
    weights."""
    nan_right = [f.get("nan_value_treatment") == "AsTrue" for f in model_json["features_info"]["float_features"]]
    scale, bias = model_json["scale_and_bias"]
    n_outputs = len(np.atleast_1d(bias))
    trees = []
    for root in model_json["trees"]:
        nodes = []

        def add(node):
            i = len(nodes)
            nodes.append(node)
            if "value" not in node:
                children.append((i, add(node["left"]), add(node["right"])))
            return i

        children = []
        add(root)
        n = len(nodes)
        left, right = np.full(n, -1), np.full(n, -1)
        for i, lo, hi in children:
            left[i], right[i] = lo, hi
        feature = np.asarray([node["split"]["float_feature_index"] if "split" in node else -2 for node in nodes])
        threshold = np.asarray([node["split"]["border"] if "split" in node else -2.0 for node in nodes], np.float64)
        value = np.zeros((n, n_outputs))
        cover = np.zeros(n)
        for i, node in enumerate(nodes):
            if "value" in node:
                value[i] = np.atleast_1d(node["value"]) * scale
                cover[i] = node["weight"]

        def goes_right(node, row, feature=feature, threshold=threshold):
            v = row[feature[node]]
            return float(nan_right[feature[node]] if np.isnan(v) else np.float32(v) > np.float32(threshold[node]))

        default_left = np.asarray([not nan_right[f] if f >= 0 else True for f in feature])
        trees.append(Tree(left, right, feature, value, with_covers(left, right, cover), goes_right, threshold,
                          default_left))
    return trees


def xgboost_json_trees(model_json) -> list:
    """The trees of an XGBoost JSON model: ``x < condition`` goes left (both in float32), NaN to
    ``default_left``; covers: ``sum_hessian``; each tree adds to its ``tree_info`` output."""
    learner = model_json["learner"]
    model = learner["gradient_booster"]["model"]
    n_outputs = max(1, int(learner["learner_model_param"]["num_class"]))
    trees = []
    for tree, k in zip(model["trees"], model["tree_info"]):
        left, right = np.asarray(tree["left_children"]), np.asarray(tree["right_children"])
        feature, condition = np.asarray(tree["split_indices"]), np.asarray(tree["split_conditions"])
        default_left = np.asarray(tree["default_left"], bool)
        value = np.zeros((len(left), n_outputs))
        value[left < 0, k] = condition[left < 0]

        def goes_right(node, row, feature=feature, condition=condition, default_left=default_left):
            v = row[feature[node]]
            go_left = default_left[node] if np.isnan(v) else np.float32(v) < np.float32(condition[node])
            return 0.0 if go_left else 1.0

        trees.append(Tree(left, right, feature, value, np.asarray(tree["sum_hessian"], np.float64), goes_right))
    return trees


LIGHTGBM_ZERO = float(np.float32(1e-35))  # LightGBM's kZeroThreshold


def lightgbm_goes_left(node, value):
    """LightGBM's ``NumericalDecision`` on a row passed through its C API, in float64."""
    v = float(value)
    if abs(v) <= LIGHTGBM_ZERO:  # the zero band is dropped from dense rows: it reads 0.0
        v = 0.0
    if math.isnan(v) and node["missing_type"] != "NaN":
        v = 0.0
    if (node["missing_type"] == "Zero" and v == 0.0) or (node["missing_type"] == "NaN" and math.isnan(v)):
        return node["default_left"]
    return v <= node["threshold"]


def lightgbm_trees(booster) -> list:
    """The trees of ``Booster.dump_model()`` (LightGBM's JSON, read independently of jaximp's text
    reader), deciding as ``NumericalDecision``; covers: the data counts; tree ``t`` adds to
    output ``t % K``."""
    model = booster.dump_model()
    k = model["num_tree_per_iteration"]
    trees = []
    for t, info in enumerate(model["tree_info"]):
        nodes, children = [], []

        def add(node):
            i = len(nodes)
            nodes.append(node)
            if "split_index" in node:
                children.append((i, add(node["left_child"]), add(node["right_child"])))
            return i

        add(info["tree_structure"])
        n = len(nodes)
        left, right = np.full(n, -1), np.full(n, -1)
        for i, lo, hi in children:
            left[i], right[i] = lo, hi
        feature = np.asarray([node.get("split_feature", -1) for node in nodes])
        value = np.zeros((n, k))
        for i, node in enumerate(nodes):
            if "split_index" not in node:
                value[i, t % k] = node["leaf_value"]
        cover = np.asarray([node["internal_count"] if "split_index" in node else node.get("leaf_count", 0)
                            for node in nodes], np.float64)

        def goes_right(node, row, nodes=nodes, feature=feature):
            return 0.0 if lightgbm_goes_left(nodes[node], row[feature[node]]) else 1.0

        trees.append(Tree(left, right, feature, value, cover, goes_right))
    return trees


def sklearn_trees(model) -> list:
    """The trees of a scikit-learn GradientBoosting* or HistGradientBoostingClassifier, read from
    its own arrays: ``x <= threshold`` (float64) goes left, NaN to ``missing_go_to_left``; covers:
    the (weighted) sample counts; values scaled by the learning rate."""
    from sklearn import ensemble

    trees = []

    def tree_of(left, right, feature, threshold, nan_left, value, cover):
        def goes_right(node, row):
            x = row[feature[node]]
            return 0.0 if (nan_left[node] if np.isnan(x) else np.float64(x) <= threshold[node]) else 1.0

        return Tree(np.asarray(left), np.asarray(right), np.asarray(feature), value, np.asarray(cover, np.float64),
                    goes_right)

    if isinstance(model, ensemble.HistGradientBoostingClassifier):
        k = model.n_trees_per_iteration_
        for stage in model._predictors:
            for c, p in enumerate(stage):
                n = p.nodes
                value = np.zeros((len(n), k))
                value[:, c] = n["value"]
                trees.append(tree_of(np.where(n["is_leaf"] == 1, -1, n["left"].astype(int)), n["right"].astype(int),
                                     n["feature_idx"], n["num_threshold"], n["missing_go_to_left"] == 1, value,
                                     n["count"].astype(float)))
        return trees
    k = model.estimators_.shape[1]
    for s, c in itertools.product(range(model.estimators_.shape[0]), range(k)):
        t = model.estimators_[s, c].tree_
        value = np.zeros((t.node_count, k))
        value[:, c] = t.value[:, 0, 0] * model.learning_rate
        trees.append(tree_of(t.children_left, t.children_right, t.feature, t.threshold, t.missing_go_to_left == 1,
                             value, t.weighted_n_node_samples))
    return trees


def _sigmoid_right(x, border, nan_right, temperature):
    """The soft model's share of the right child: NaN as the nan treatment says, never right at
    a padding split (border +inf), else ``sigmoid((x - border) / temperature)``."""
    if np.isnan(x):
        return float(nan_right)
    if not np.isfinite(border):
        return 0.0
    return 1.0 / (1.0 + math.exp(-(x - border) / temperature))


def soft_trees(ens, temperature) -> list:
    """The trees of a jaximp ensemble (read from its arrays, every depth of an oblivious one) with
    splits relaxed to sigmoids: the soft model whose path-dependent game ``soft_shap_values`` takes."""
    trees = []
    for t in range(ens.n_trees):
        values = np.asarray(ens.leaf_values[t]) * float(ens.scale)
        weights = np.asarray(ens.leaf_weights[t])
        if isinstance(ens, jaximp.ObliviousEnsemble):  # level k from the root splits at depth D - 1 - k
            features, borders = np.asarray(ens.split_features[t]), np.asarray(ens.split_borders[t])
            nan_right = [ens.nan_modes[f] == "Max" for f in features]
            trees.append(_heap_tree(features, borders, values, weights, lambda k, row, f=features, b=borders,
                                    r=nan_right: _sigmoid_right(row[f[k]], b[k], r[k], temperature)))
            continue
        children = np.asarray(ens.node_children[t])
        node_features, node_borders = np.asarray(ens.node_features[t]), np.asarray(ens.node_borders[t])
        node_nan_right = np.asarray(ens.node_nan_right[t])
        pointers = []  # jaximp's node (>= 0) or ~leaf of each node here, depth first

        def add(pointer):
            i = len(pointers)
            pointers.append(pointer)
            if pointer >= 0:
                links.append((i, add(int(children[pointer, 0])), add(int(children[pointer, 1]))))
            return i

        links = []
        add(int(ens.roots[t]))
        n = len(pointers)
        left, right = np.full(n, -1), np.full(n, -1)
        for i, lo, hi in links:
            left[i], right[i] = lo, hi
        feature = np.asarray([node_features[p] if p >= 0 else -1 for p in pointers])
        value = np.asarray([values[~p] if p < 0 else np.zeros(values.shape[1]) for p in pointers])
        cover = with_covers(left, right, [weights[~p] if p < 0 else 0.0 for p in pointers])

        def goes_right(node, row, pointers=pointers, feature=feature, borders=node_borders, nan=node_nan_right):
            p = pointers[node]
            return _sigmoid_right(row[feature[node]], borders[p], nan[p], temperature)

        trees.append(Tree(left, right, feature, value, cover, goes_right))
    return trees


def shap_tree_dict(trees, bias) -> dict:
    """shap's dictionary format of ``trees`` (with thresholds): ``x <= threshold`` goes left."""
    out = []
    for tree in trees:
        default = np.where(tree.default_left, tree.left, tree.right)
        out.append(dict(children_left=tree.left, children_right=tree.right, children_default=default,
                        features=tree.feature, thresholds=tree.threshold, values=tree.value,
                        node_sample_weight=tree.cover))
    return {"trees": out, "base_offset": np.atleast_1d(np.asarray(bias, np.float64))}


# Shapley values of a model's own predictions ------------------------------------------------------------


def prediction_shap(predict, x, background):
    """``f64[N, F, K]``: Shapley values over the F columns of ``v(S) = mean_b f(x_S, b_rest)``,
    ``f = predict`` (the model's raw output ``[M, K]`` of rows ``[M, F]``, object arrays of raw
    values included), every coalition predicted at once."""
    n, f = x.shape
    masks = np.asarray(list(itertools.product([False, True], repeat=f)))  # [2**F, F]
    hybrid = np.where(masks[:, None, None, :], x[None, :, None, :], background[None, None, :, :]).reshape(-1, f)
    value = np.asarray(predict(hybrid), np.float64).reshape(len(masks), n, len(background), -1).mean(axis=2)
    index = {frozenset(np.flatnonzero(mask).tolist()): i for i, mask in enumerate(masks)}
    out = np.zeros((n, f, value.shape[-1]))
    for i in range(n):
        for p, phi in shapley(lambda S: value[index[S], i], range(f)).items():
            out[i, p] = phi
    return out


# Permutation importance ---------------------------------------------------------------------------------


def permutation_draws(random_state, n_repeats, n_rows, n_samples):
    """``[(rows, source)]`` per repeat: the rows jaximp's permutation importance scores and the
    rows each permuted column is taken from, for ``random_state`` (an int): the draws are part of
    its definition (``jax.random``), the rest of the oracle is independent of it."""
    take, source = np.asarray(row_draws(as_key(random_state, "test"), n_repeats, n_rows, n_samples))
    return list(zip(take, source))


def _rows(X, rows):
    return X.iloc[rows].reset_index(drop=True) if isinstance(X, (pd.DataFrame, pd.Series)) else X[rows]


def permutation_importances(X, score, draws, groups):
    """``f64[G, R]``: ``score(rows, X[rows])`` minus the score with the columns of each group taken
    from ``X[source]`` (a DataFrame's columns by name, their dtypes kept), for each draw."""
    out = np.zeros((len(groups), len(draws)))
    for r, (rows, source) in enumerate(draws):
        base = score(rows, _rows(X, rows))
        for g, columns in enumerate(groups):
            permuted = _rows(X, rows).copy()
            if isinstance(X, pd.DataFrame):
                for column in columns:
                    permuted[column] = _rows(X[column], source)
            else:
                permuted[:, columns] = X[source][:, columns]
            out[g, r] = base - score(rows, permuted)
    return out


def catboost_loss_score(model, metric, y, w=None, cat_features=None):
    """``score(rows, X[rows])``: minus CatBoost's ``eval_metrics`` of ``metric`` on the rows
    (targets ``y[rows]``, weights ``w[rows]``), CatBoost predicting them."""
    def score(rows, X_rows):
        data = catboost.Pool(X_rows, y[rows], weight=None if w is None else w[rows], cat_features=cat_features)
        return -model.eval_metrics(data, [metric])[metric][-1]

    return score


def model_loss(loss, y, raw, w=None):
    """The model's loss (CatBoost's definitions: RMSE, Logloss, MultiClass) of raw predictions, in
    float64, weighted by ``w``."""
    w = np.ones(len(y)) if w is None else w
    raw = np.asarray(raw, np.float64)
    if loss in ("RMSE", "Logloss") and raw.ndim == 2:
        raw = raw[:, 0]
    if loss == "RMSE":
        return np.sqrt(np.sum(w * (raw - y) ** 2) / np.sum(w))
    if loss == "Logloss":
        return np.sum(w * (np.logaddexp(0.0, raw) - y * raw)) / np.sum(w)
    log_p = raw - np.logaddexp.reduce(raw, axis=1, keepdims=True)
    return -np.sum(w * log_p[np.arange(len(y)), y.astype(int)]) / np.sum(w)


# Model importances from their definitions -----------------------------------------------------------------


def prediction_values_change(ens, weights=None, leaf_values=None):
    """CatBoost's PredictionValuesChange of an ObliviousEnsemble by looping over trees, depths and
    leaf pairs: ``sum c1 (v1 - avr)^2 + c2 (v2 - avr)^2`` per split, normalised to 100."""
    sf, mask = np.asarray(ens.split_features), np.asarray(ens.split_mask)
    values = np.asarray(ens.leaf_values if leaf_values is None else leaf_values, np.float64)
    weights = np.asarray(ens.leaf_weights if weights is None else weights, np.float64)
    out = np.zeros(ens.n_features)
    for t in range(ens.n_trees):
        for d in range(int(mask[t].sum())):
            for i in range(ens.n_leaves):
                j = i ^ (1 << d)
                c1, c2 = weights[t, i], weights[t, j]
                if j < i or c1 == 0 or c2 == 0:
                    continue
                avr = (c1 * values[t, i] + c2 * values[t, j]) / (c1 + c2)
                out[sf[t, d]] += np.sum(c1 * (values[t, i] - avr) ** 2 + c2 * (values[t, j] - avr) ** 2)
    return out / out.sum() * 100


def split_statistics(ens):
    """XGBoost-style split statistics (``weight``, ``total_gain``, ``total_cover``) of an
    ObliviousEnsemble's trees explicitly unrolled into binary trees: the root tests the highest
    bit; the node reached by the higher bits ``prefix`` holds the leaves ``l >> (d + 1) == prefix``."""
    sf, mask = np.asarray(ens.split_features), np.asarray(ens.split_mask)
    values = float(ens.scale) * np.asarray(ens.leaf_values, np.float64)
    weights = np.asarray(ens.leaf_weights, np.float64)
    stats = {k: np.zeros(ens.n_features) for k in ("weight", "total_gain", "total_cover")}

    def mean(t, leaves):
        c = weights[t, leaves].sum()
        return c, (weights[t, leaves, None] * values[t, leaves]).sum(0) / c if c > 0 else 0.0

    for t in range(ens.n_trees):
        depth = int(mask[t].sum())
        leaf = np.arange(1 << depth)
        for d in range(depth - 1, -1, -1):
            for prefix in range(1 << (depth - 1 - d)):
                node = leaf[(leaf >> (d + 1)) == prefix]
                c, v = mean(t, node)
                gain = 0.0
                for side in (0, 1):
                    cc, vc = mean(t, node[((node >> d) & 1) == side])
                    gain += cc * np.sum((vc - v) ** 2)
                f = sf[t, d]
                stats["weight"][f] += 1
                stats["total_gain"][f] += gain
                stats["total_cover"][f] += c
    return stats


def json_interaction(model_json: dict, output_reduction: str) -> np.ndarray:
    """CatBoost's Interaction: its depth-first walk (catboost/libs/fstr/feature_str.cpp, ``DFS``,
    and calc_fstr.cpp, ``CalcFeatureInteraction``) over the non-symmetric JSON trees in float64,
    ``[F, F]`` normalised to 100 over the pairs of internal features, every leaf a terminal node
    as the JSON loader builds them; ``output_reduction`` "sum" (CatBoost's) or "abs" (per output).

    A split's internal feature: its float feature, its categorical feature for a one-hot value
    (all values of a column are one feature), its CTR (found from ``split_index``: the float
    features' borders, then the one-hot values, then the CTRs' borders). Credited columns: a
    float feature's, a CTR's categorical column, none for one-hot features; so for models whose
    internal features are each credited to at most one column (Depthwise and Lossguide build no
    CTR over combinations), where the pairs' orientation plays no part.
    """
    info = model_json["features_info"]
    floats = info.get("float_features", [])
    cats = info.get("categorical_features", [])
    first_ctr = sum(len(f.get("borders") or []) for f in floats) + sum(len(c.get("values", [])) for c in cats)
    ctr_ends = np.cumsum([len(c["borders"]) for c in info.get("ctrs", [])])
    cat_column = {c["feature_index"]: c["flat_feature_index"] for c in cats}
    n_features = len(floats) + len(cats)

    def internal(split):
        if split["split_type"] == "FloatFeature":
            column = floats[split["float_feature_index"]]["flat_feature_index"]
            return ("float", split["float_feature_index"]), (column,)
        if split["split_type"] == "OneHotFeature":
            return ("one_hot", split["cat_feature_index"]), ()
        k = int(np.searchsorted(ctr_ends, split["split_index"] - first_ctr, side="right"))
        elements = info["ctrs"][k]["elements"]
        assert len(elements) == 1 and elements[0]["combination_element"] == "cat_feature_value"
        return ("ctr", k), (cat_column[elements[0]["cat_feature_index"]],)

    scores, total = np.zeros((n_features, n_features)), 0.0
    for tree in model_json["trees"]:
        per_tree, credit = {}, {}

        def visit(node, path):
            if "split" not in node:
                value = np.atleast_1d(np.asarray(node["value"], np.float64))
                for i, (a, s) in enumerate(path):
                    for b, t in path[i + 1:]:
                        if a != b:
                            key = tuple(sorted((a, b)))
                            per_tree[key] = per_tree.get(key, 0.0) + s * t * value
                return
            key, columns = internal(node["split"])
            credit[key] = columns
            visit(node["left"], path + [(key, -1.0)])
            visit(node["right"], path + [(key, 1.0)])

        visit(tree, [])
        for (a, b), delta in per_tree.items():
            score = abs(delta.sum()) if output_reduction == "sum" else np.abs(delta).sum()
            total += score
            for f in credit[a]:
                for g in credit[b]:
                    if f != g:
                        scores[min(f, g), max(f, g)] += score
    return 100.0 * (scores + scores.T) / total


# The reference libraries, in jaximp's layouts ---------------------------------------------------------------


def catboost_shap(model, data, label=None, **kw):
    """CatBoost's ShapValues as ``(values f64[N, F, K], expected f64[K])``; ``data`` a Pool or rows."""
    if not isinstance(data, catboost.Pool):
        data = catboost.Pool(data, label=label)
    out = np.asarray(model.get_feature_importance(data=data, type="ShapValues", **kw))
    out = out[:, None, :] if out.ndim == 2 else out  # [N, K, F + 1]
    return np.moveaxis(out[:, :, :-1], 1, 2), out[0, :, -1]


def catboost_interactions(model, data):
    """CatBoost's ShapInteractionValues without the bias row and column, outputs last:
    ``f64[N, F, F]`` (K == 1) or ``f64[N, F, F, K]``; ``data`` a Pool or rows."""
    if not isinstance(data, catboost.Pool):
        data = catboost.Pool(data)
    out = np.asarray(model.get_feature_importance(data=data, type="ShapInteractionValues"))
    return out[:, :-1, :-1] if out.ndim == 3 else np.moveaxis(out[:, :, :-1, :-1], 1, -1)


def catboost_interaction(model, n_features):
    """CatBoost's Interaction rows ``[f, g, score]`` as a symmetric ``f64[F, F]`` matrix."""
    matrix = np.zeros((n_features, n_features))
    for f, g, score in model.get_feature_importance(type="Interaction"):
        matrix[int(f), int(g)] = matrix[int(g), int(f)] = score
    return matrix


def _library(model) -> str:
    return type(model).__module__.split(".")[0]


def raw_output(model, rows):
    """The library's raw output of ``rows``, the numbers jaximp's ``predict`` reproduces:
    CatBoost's RawFormulaVal, XGBoost's margin, LightGBM's raw score (a random forest's sum of its
    trees), scikit-learn's ``decision_function`` for boosted classifiers, ``predict_proba`` for
    other classifiers, ``predict`` for regressors (see jaximp._importers.sklearn)."""
    library = _library(model)
    if library == "catboost":
        return np.asarray(model.predict(rows, prediction_type="RawFormulaVal"), np.float64)
    if library == "xgboost":
        import xgboost as xgb

        if not isinstance(rows, xgb.DMatrix):
            rows = xgb.DMatrix(rows, enable_categorical=isinstance(rows, pd.DataFrame))
        return np.asarray(model.predict(rows, output_margin=True), np.float64)
    if library == "lightgbm":
        return np.asarray(model.predict(rows, raw_score=True), np.float64)
    from sklearn import ensemble

    if isinstance(model, (ensemble.GradientBoostingClassifier, ensemble.HistGradientBoostingClassifier)):
        return model.decision_function(rows)
    if hasattr(model, "predict_proba"):
        return model.predict_proba(rows)
    return model.predict(rows)


def xgboost_contributions(booster, x, **kw):
    """XGBoost's ``pred_contribs`` / ``pred_interactions`` with the outputs last: ``[N, F+1, K]``
    (or ``[N, F+1, F+1, K]``), K = 1 included; the last entry is the expected value."""
    import xgboost as xgb

    data = x if isinstance(x, xgb.DMatrix) else xgb.DMatrix(x, enable_categorical=isinstance(x, pd.DataFrame))
    out = booster.predict(data, **kw)
    if kw.get("pred_interactions"):
        return out[..., None] if out.ndim == 3 else out.transpose(0, 2, 3, 1)
    return out[..., None] if out.ndim == 2 else out.transpose(0, 2, 1)


def lightgbm_mean_scale(booster):
    """1 / iterations for random forests (their prediction is the mean of the trees), else 1."""
    return 1.0 / booster.current_iteration() if "average_output" in booster.model_to_string() else 1.0


def lightgbm_contributions(booster, x):
    """LightGBM's ``pred_contrib`` as ``(values [N, F, K], expected [K])``, rf means included."""
    out = booster.predict(x, pred_contrib=True) * lightgbm_mean_scale(booster)
    out = out.reshape(len(x), booster.num_model_per_iteration(), -1)  # class by class
    return out[:, :, :-1].transpose(0, 2, 1), out[0, :, -1]


def shap_layout(values, expected, k):
    """shap's values as ``[N, F, K]`` and its expected value as ``[K]``."""
    values = np.asarray(values)
    return values.reshape(values.shape[:2] + (k,)), np.asarray(expected).reshape(k)
