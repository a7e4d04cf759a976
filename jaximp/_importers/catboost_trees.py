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

Categorical features: the nodes' splits are written as in oblivious trees (``OneHotFeature``
with ``cat_feature_index`` and ``value``, ``OnlineCtr`` with ``split_index`` and ``border``),
and ``features_info.ctrs`` and ``ctr_data`` hold the CTRs and their tables; CatBoost builds no
CTRs over combinations for these grow policies (checked with ``max_ctr_complexity`` up to 4),
but they would be read as for oblivious trees. Such a model gets the oblivious importer's
featurizer (``jaximp._importers.catboost.model_features``): the kernels' rows are then the bins of the
evaluated features (``u8[N, E]``, NaN already placed by each float feature's treatment) and a
node's border is the index ``j`` of its border, since ``bin > j`` exactly when
``value > borders[j]``. The JSON export of such a model predicts as the model (checked on the
zoo of ``tests/test_trees_categorical.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jax.numpy as jnp
import numpy as np

from jaximp._importers.catboost_json import ModelFeatures, loss_function_of, model_features, unsupported
from jaximp._models.trees import TreeEnsemble


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
            support (text, embedding), or a corrupt file.
    """
    if not isinstance(model_json, dict) or "features_info" not in model_json:
        raise ValueError("from_catboost: the model file is not a CatBoost JSON model")
    if not model_json.get("trees"):
        raise ValueError("from_catboost: the model has no non-symmetric trees (\"trees\" is missing "
                         "or empty); oblivious models import as ObliviousEnsemble")
    found = unsupported(model_json)
    if found:
        raise ValueError("from_catboost: this model uses " + ", ".join(found)
                         + ", which jaximp does not support; retrain without them to explain the "
                         "model with jaximp")
    try:
        return _build(model_json, loss_function)
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise ValueError(f"from_catboost: the CatBoost JSON model is corrupt ({e!r})") from e


def preorder(root: dict) -> Iterator[tuple[dict, int, int, int]]:
    """``(node, parent, side, level)`` of every node of a JSON tree in depth-first, left-first
    order: leaves come out left to right, and internal nodes are numbered as they come (``parent``
    is that number, -1 at the root). The one traversal the importer and the probe share."""
    stack: list[tuple[dict, int, int, int]] = [(root, -1, 0, 0)]
    n_internal = 0
    while stack:
        node, parent, side, level = stack.pop()
        yield node, parent, side, level
        if "split" in node:
            stack.append((node["right"], n_internal, 1, level + 1))
            stack.append((node["left"], n_internal, 0, level + 1))
            n_internal += 1


class _Tree:
    """One tree flattened in depth-first order: internal nodes and leaves numbered as visited."""

    def __init__(self, root: dict, features: ModelFeatures, index: int):
        self.features: list[int] = []
        self.borders: list[float] = []
        self.children: list[list[int]] = []
        self.values: list[Any] = []
        self.weights: list[float | None] = []
        self.depth = 0
        self._features, self._index = features, index
        self.root = None
        for node, parent, side, level in preorder(root):
            pointer = self._add(node, level)
            if parent < 0:
                self.root = pointer
            else:
                self.children[parent][side] = pointer

    def _add(self, node: dict, level: int) -> int:
        if "split" not in node:
            self.values.append(node["value"])
            self.weights.append(node.get("weight"))
            self.depth = max(self.depth, level)
            return ~(len(self.values) - 1)
        feature, j = self._features.splits.locate(node["split"], self._index)
        self.features.append(feature)
        # binned rows (a featurizer): bin > j exactly when value > borders[j]
        binned = self._features.featurizer is not None
        self.borders.append(np.float32(j) if binned else self._features.splits.borders[feature][j])
        self.children.append([0, 0])
        return len(self.features) - 1


def _build(model_json: dict, loss_function: str | None) -> TreeEnsemble:
    described = model_features(model_json)
    binned = described.featurizer is not None
    trees = [_Tree(tree, described, t) for t, tree in enumerate(model_json["trees"])]

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
    # binned rows hold no NaN: the featurizer placed them already
    goes_right = np.asarray([mode == "Max" and not binned for mode in described.nan_modes] or [False])
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
        n_features=len(described.names),
        feature_names=described.names,
        nan_modes=described.nan_modes,
        loss_function=loss_function or loss_function_of(model_info),
        class_names=tuple(model_info.get("class_params", {}).get("class_names", ())),
        leaf_weights_known=known,
        featurizer=described.featurizer,
        players=described.players,
        player_of=described.player_of,
        reads=described.reads,
        n_searched=0 if binned else None,
    )
