"""Import non-symmetric CatBoost models (``grow_policy="Depthwise"`` / ``"Lossguide"``).

CatBoost's JSON export (``save_model(path, format="json")``) of such a model has ``trees``
instead of ``oblivious_trees``: each tree is a nested object, an internal node
``{"split": {...}, "left": node, "right": node}`` or a leaf ``{"value": v, "weight": w}``
(``v`` a number, or K numbers for multiclass models). A row goes ``right`` when
``x > split["border"]`` in float32; a NaN goes where the float feature's
``nan_value_treatment`` sends it (``AsFalse``: left, as below every border; ``AsTrue``: right;
``AsIs``: every comparison is false, so left). ``calc_leaf_indexes`` numbers a tree's leaves in
depth-first, left-to-right order of the exported tree (checked by experiment against the model
reloaded from its JSON export, which is the reference: the training-time numbering may differ).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from jaximp._catboost import _NAN_MODES, _loss_function, _Splits, _unsupported
from jaximp._tree_model import TreeEnsemble


def tree_ensemble_from_json(model_json: dict, *, loss_function: str | None = None) -> TreeEnsemble:
    """Build a :class:`TreeEnsemble` from a parsed CatBoost JSON model with non-symmetric trees.

    Args:
        model_json: the parsed JSON export (``json.load``) of a Depthwise or Lossguide model.
        loss_function: the training loss's name for a file that does not record it; None reads
            it from the model.

    Returns:
        The ensemble: ``leaf_values f32[T, L, K]``, nodes ``[T, M]``, L the most leaves of any
        tree, leaves numbered as CatBoost's ``calc_leaf_indexes``.

    Raises:
        ValueError: not a CatBoost JSON model, no non-symmetric trees, features jaximp does not
            support yet for these trees (categorical, text, embedding), or a corrupt file.

    Example:
        >>> model.save_model("m.json", format="json")                     # doctest: +SKIP
        >>> ens = tree_ensemble_from_json(json.load(open("m.json")))      # doctest: +SKIP
    """
    if not isinstance(model_json, dict) or "features_info" not in model_json:
        raise ValueError("from_catboost: the model file is not a CatBoost JSON model")
    if not model_json.get("trees"):
        raise ValueError("from_catboost: the model has no non-symmetric trees (\"trees\" is missing "
                         "or empty); oblivious models import as ObliviousEnsemble")
    unsupported = _unsupported(model_json)
    if model_json["features_info"].get("categorical_features"):
        unsupported.append("categorical features in non-symmetric trees")
    if unsupported:
        raise ValueError("from_catboost: this model uses " + ", ".join(unsupported)
                         + ", which jaximp does not support; retrain without them to explain the "
                         "model with jaximp")
    try:
        return _build(model_json, loss_function)
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise ValueError(f"from_catboost: the CatBoost JSON model is corrupt ({e!r})") from e


class _Tree:
    """One tree flattened in depth-first order: internal nodes and leaves numbered as visited."""

    def __init__(self, root: dict, splits: _Splits, index: int):
        self.features: list[int] = []
        self.borders: list[float] = []
        self.children: list[list[int]] = []
        self.values: list[Any] = []
        self.weights: list[float | None] = []
        self.depth = 0
        self._splits, self._index = splits, index
        stack: list[tuple[dict, int, int, int]] = [(root, -1, 0, 0)]  # (node, parent, side, level)
        self.root = None
        while stack:  # iterative preorder, left first: leaves come out left to right
            node, parent, side, level = stack.pop()
            pointer = self._add(node, level)
            if parent < 0:
                self.root = pointer
            else:
                self.children[parent][side] = pointer
            if pointer >= 0:
                stack.append((node["right"], pointer, 1, level + 1))
                stack.append((node["left"], pointer, 0, level + 1))

    def _add(self, node: dict, level: int) -> int:
        if "split" not in node:
            self.values.append(node["value"])
            self.weights.append(node.get("weight"))
            self.depth = max(self.depth, level)
            return ~(len(self.values) - 1)
        split = node["split"]
        kind = split.get("split_type", "FloatFeature")
        if kind != "FloatFeature":
            raise ValueError(f"tree {self._index} has a {kind} split; only FloatFeature splits are "
                             "supported in non-symmetric trees")
        feature, j = self._splits.locate(split, self._index)
        self.features.append(feature)
        self.borders.append(self._splits.borders[feature][j])
        self.children.append([0, 0])
        return len(self.features) - 1


def _build(model_json: dict, loss_function: str | None) -> TreeEnsemble:
    info = model_json["features_info"]
    float_features = sorted(info.get("float_features", []), key=lambda f: f["flat_feature_index"])
    if [f["flat_feature_index"] for f in float_features] != list(range(len(float_features))):
        raise ValueError("the features' flat_feature_index are not 0..F-1")
    nan_modes = tuple(_NAN_MODES[f.get("nan_value_treatment", "AsIs")] for f in float_features)
    splits = _Splits(float_features, None, [])
    trees = [_Tree(tree, splits, t) for t, tree in enumerate(model_json["trees"])]

    scale, bias = model_json.get("scale_and_bias", [1.0, [0.0]])
    bias = np.atleast_1d(np.asarray(bias, np.float32))
    n_outputs = len(bias)
    n_trees = len(trees)
    n_leaves = max(len(tree.values) for tree in trees)
    n_nodes = max(1, n_leaves - 1)
    roots = np.asarray([tree.root for tree in trees], np.int32)
    features = np.zeros((n_trees, n_nodes), np.int32)
    borders = np.full((n_trees, n_nodes), np.inf, np.float32)
    nan_right = np.zeros((n_trees, n_nodes), bool)
    children = np.full((n_trees, n_nodes, 2), ~n_leaves, np.int32)  # padded: never reached
    values = np.zeros((n_trees, n_leaves, n_outputs), np.float32)
    weights = np.zeros((n_trees, n_leaves), np.float32)
    known = all(w is not None for tree in trees for w in tree.weights)
    goes_right = np.asarray([mode == "Max" for mode in nan_modes] or [False])
    for t, tree in enumerate(trees):
        m, l = len(tree.features), len(tree.values)
        features[t, :m] = tree.features
        borders[t, :m] = tree.borders
        nan_right[t, :m] = goes_right[features[t, :m]]
        if m:
            children[t, :m] = tree.children
        values[t, :l] = np.asarray(tree.values, np.float64).reshape(l, n_outputs)
        if known:
            weights[t, :l] = tree.weights
    model_info = model_json.get("model_info", {})
    return TreeEnsemble(
        roots=jnp.asarray(roots),
        node_features=jnp.asarray(features),
        node_borders=jnp.asarray(borders),
        node_nan_right=jnp.asarray(nan_right),
        node_children=jnp.asarray(children),
        leaf_values=jnp.asarray(values),
        leaf_weights=jnp.asarray(weights),
        scale=jnp.asarray(scale, jnp.float32),
        bias=jnp.asarray(bias),
        depth=max(tree.depth for tree in trees),
        n_features=len(float_features),
        feature_names=tuple(f.get("feature_id") or str(i) for i, f in enumerate(float_features)),
        nan_modes=nan_modes,
        loss_function=loss_function or _loss_function(model_info),
        class_names=tuple(model_info.get("class_params", {}).get("class_names", ())),
        leaf_weights_known=known,
    )
