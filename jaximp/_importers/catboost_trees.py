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
featurizer
(``jaximp._importers.catboost_json.model_features``): the kernels' rows are then the bins of the
evaluated features (``u8[N, E]``, NaN already placed by each float feature's treatment) and a
node's border is the index ``j`` of its border, since ``bin > j`` exactly when
``value > borders[j]``. The JSON export of such a model predicts as the model (checked on the
categorical models of ``tests/models.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from jaximp._importers.catboost_json import (
    ModelFeatures,
    check_supported,
    ensemble_fields,
    finite_float32,
    model_features,
    reporting_corrupt_models,
)
from jaximp._importers.cbm import MAX_TREE_DEPTH
from jaximp._importers.padded import ParsedTree, check_budget, pad_trees
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
    with reporting_corrupt_models():
        check_supported(model_json)
        if not model_json.get("trees") or not isinstance(model_json["trees"], list):
            raise ValueError("from_catboost: the model has no non-symmetric trees (\"trees\" is missing "
                             "or empty); oblivious models import as ObliviousEnsemble")
        return _build(model_json, loss_function)


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


def _parse_tree(root: dict, features: ModelFeatures, index: int, n_outputs: int) -> ParsedTree:
    """One JSON tree (tree ``index``) in jaximp's numbering: internal nodes and leaves numbered as
    :func:`preorder` visits them."""
    binned = features.featurizer is not None
    # binned rows hold no NaN: the featurizer placed them already
    goes_right = [mode == "Max" and not binned for mode in features.nan_modes]
    node_features, borders, children, values, weights = [], [], [], [], []
    tree_root, depth = 0, 0
    for node, parent, side, level in preorder(root):
        if level > MAX_TREE_DEPTH:
            raise ValueError(f"from_catboost: tree {index} is deeper than {MAX_TREE_DEPTH} levels (CatBoost "
                             "trains at most 16): the file is damaged")
        if not isinstance(node, dict):
            raise ValueError(f"a node of tree {index} is not an object")
        if "split" in node:
            feature, j = features.splits.locate(node["split"], index)
            node_features.append(feature)
            # binned rows (a featurizer): bin > j exactly when value > borders[j]
            borders.append(np.float32(j) if binned else features.splits.borders[feature][j])
            children.append([0, 0])
            pointer = len(node_features) - 1
        else:
            value = node["value"]
            values.append(value if isinstance(value, list) else [value])
            if len(values[-1]) != n_outputs:
                raise ValueError(f"a leaf of tree {index} has {len(values[-1])} values; the model has "
                                 f"{n_outputs} outputs")
            weights.append(node.get("weight"))
            depth = max(depth, level)
            pointer = ~(len(values) - 1)
        if parent < 0:
            tree_root = pointer
        else:
            children[parent][side] = pointer
    return ParsedTree(
        root=tree_root,
        node_features=np.asarray(node_features, np.int32),
        node_borders=np.asarray(borders, np.float32),
        node_nan_right=np.asarray([goes_right[f] for f in node_features], bool),
        node_children=np.asarray(children, np.int32).reshape(-1, 2),
        leaf_values=finite_float32([v for leaf in values for v in leaf], f"the leaf values of tree {index}").reshape(
            len(values), n_outputs),
        depth=depth,
        leaf_weights=None if None in weights else finite_float32(weights, f"the leaf weights of tree {index}"),
    )


def _build(model_json: dict, loss_function: str | None) -> TreeEnsemble:
    described = model_features(model_json)
    fields = ensemble_fields(model_json, described, loss_function)
    trees = [_parse_tree(tree, described, t, fields.n_outputs) for t, tree in enumerate(model_json["trees"])]
    n_leaves = max(len(tree.leaf_values) for tree in trees)
    check_budget(len(trees) * n_leaves * (4 * fields.n_outputs + 28),
                     f"{len(trees)} trees padded to {n_leaves} leaves with {fields.n_outputs} outputs", "from_catboost")
    return pad_trees(trees, fields, fn_name="from_catboost")
