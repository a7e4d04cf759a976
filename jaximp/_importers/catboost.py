"""Import CatBoost oblivious ensembles into :class:`ObliviousEnsemble`.

The model is read as CatBoost's JSON export (``save_model(..., format="json")``) lays it out:
from a ``.json`` file, or from a ``.cbm`` file or a model object through jaximp's own ``.cbm``
reader (:mod:`jaximp._importers.cbm`). ``oblivious_trees[t]`` hold ``splits`` (depth ``d`` = bit
``d`` of the leaf index; ``null`` for a tree without splits, a constant that adds its one leaf
value to every row), ``leaf_values`` (leaf-major, ``L * K`` numbers) and ``leaf_weights``
(``L``), and ``features_info`` holds each float feature's borders and NaN treatment, the
categorical features' one-hot values and the CTRs (with their tables in ``ctr_data``). A split
names its binary feature by ``split_index``: the float features' borders, then the one-hot
values, then the CTRs' borders, in that order (``jaximp._models.featurizer`` evaluates the last
two). Every size is checked against the content before the dense arrays are allocated, and a
layout over the memory budget (``jaximp._importers.padded.check_budget``) is refused with the
size it would need.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jaximp._importers.catboost_json import (
    check_supported,
    ensemble_fields,
    finite_float32,
    load_json,
    model_features,
    reporting_corrupt_models,
    tree_splits,
)
from jaximp._importers.catboost_trees import tree_ensemble_from_json
from jaximp._importers.padded import check_budget, on_device
from jaximp._models.oblivious import ObliviousEnsemble
from jaximp._models.thresholds import normal_borders
from jaximp._models.trees import TreeEnsemble

_MAX_DEPTH = 30  # 2**30 leaves a tree: deeper is a damaged file (CatBoost trains at most 16 levels)


def from_catboost(model_or_path: Any, *, loss_function: str | None = None) -> ObliviousEnsemble | TreeEnsemble:
    """Import a CatBoost model, or a CatBoost model file, for explanation.

    Symmetric trees (CatBoost's default ``grow_policy="SymmetricTree"``) give an
    [`ObliviousEnsemble`][jaximp.ObliviousEnsemble]; ``grow_policy="Depthwise"`` or ``"Lossguide"``
    give a [`TreeEnsemble`][jaximp.TreeEnsemble]. Every jaximp function takes either. The numbers
    equal CatBoost's own: ``jaximp.predict`` its ``predict(X, prediction_type="RawFormulaVal")``,
    ``jaximp.leaf_indices`` its ``calc_leaf_indexes``, ``jaximp.shap_values`` its
    ``get_feature_importance(type="ShapValues")``, and each importance the
    ``get_feature_importance`` type of the same name.

    Categorical features (one-hot and CTR splits, CTRs over combinations of columns) are
    supported: the ensemble then takes their raw values (strings or integers), or a
    ``catboost.Pool``, and evaluates each split as CatBoost does. A ``.cbm`` file is read by
    jaximp itself, so CatBoost need not be installed; a model object is saved to a temporary
    ``.cbm`` and read the same way. Trees of different depths (``catboost.sum_models``) and trees
    without splits (a constant) are supported.

    Args:
        model_or_path: a fitted ``catboost.CatBoost`` / ``CatBoostRegressor`` /
            ``CatBoostClassifier``, or the path of a ``.cbm`` or ``.json`` model file
            (``save_model(path)`` or ``save_model(path, format="json")``).
        loss_function: the training loss's name (``"RMSE"``, ``"Logloss"``, ...), for a model
            file that does not record it; None reads it from the model. Only the results that
            depend on the loss (LossFunctionChange, permutation importance's default score)
            need it.

    Returns:
        ObliviousEnsemble | TreeEnsemble: the ensemble, with ``leaf_values f32[T, L, K]`` (K: 1 for
            regression and binary classification, the classes of a multiclass model, the targets of
            a multi-target one), its ``feature_names`` the model's feature names. A non-symmetric
            model gives a ``TreeEnsemble``, which every function takes except
            ``shap_values(..., method="exact")`` (CatBoost refuses ``shap_calc_type="Exact"`` for
            such trees too).

    Raises:
        TypeError: ``model_or_path`` is neither a CatBoost model nor a path, or
            ``loss_function`` is not a string.
        ValueError: the file is missing, unreadable or corrupt (truncated, damaged, not a
            CatBoost model, sizes or indices it declares but does not hold, values of the wrong
            type); the model would need more memory than jaximp allows (the size it needs is
            named; the environment variable ``JAXIMP_MAX_PADDED_BYTES`` raises the limit); the
            model is not fitted or has no trees; it is a multi-target model with CTRs read from
            a JSON export (which loses their tables: read the ``.cbm``); or it uses what jaximp
            does not support (text or embedding features).

    Examples:
        >>> model = catboost.CatBoostRegressor(iterations=20, depth=4, verbose=0,
        ...                                    allow_writing_files=False).fit(X, y)
        >>> jaximp.from_catboost(model)
        ObliviousEnsemble(trees=20, depth=4, features=10, outputs=1, loss='RMSE')
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "model.cbm")
        >>> model.save_model(path)
        >>> jaximp.from_catboost(path).feature_names[:3]
        ('age', 'sex', 'bmi')
    """
    if loss_function is not None and not isinstance(loss_function, str):
        raise TypeError(f"from_catboost: loss_function must be None or a string such as 'RMSE'; "
                        f"got {loss_function!r}")
    return ensemble_from_json(load_json(model_or_path), loss_function=loss_function)


def ensemble_from_json(model_json: dict, *, loss_function: str | None = None) -> ObliviousEnsemble | TreeEnsemble:
    """Build the ensemble from a parsed CatBoost JSON model (see the module docstring): an
    :class:`ObliviousEnsemble`, or a :class:`TreeEnsemble` for non-symmetric trees."""
    with reporting_corrupt_models():
        if isinstance(model_json, dict) and "trees" in model_json and "oblivious_trees" not in model_json:
            return tree_ensemble_from_json(model_json, loss_function=loss_function)
        check_supported(model_json)
        if not model_json.get("oblivious_trees"):
            raise ValueError("from_catboost: the model has no trees (e.g. after model.shrink(0, 0)); "
                             "there is nothing to explain")
        return _build(model_json, loss_function)


def _build(model_json: dict, loss_function: str | None) -> ObliviousEnsemble:
    features = model_features(model_json)
    splits = features.splits
    n_evaluated = len(splits.borders)
    n_borders = max([1] + [len(b) for b in splits.borders])
    fields = ensemble_fields(model_json, features, loss_function)
    n_outputs = fields.n_outputs

    trees = model_json["oblivious_trees"]
    if not isinstance(trees, list):
        raise ValueError("oblivious_trees is not a list")
    tree_split_lists = [tree_splits(tree, t) for t, tree in enumerate(trees)]
    depth = max(len(own) for own in tree_split_lists)
    if depth > _MAX_DEPTH:
        raise ValueError(f"from_catboost: a tree has {depth} splits, 2**{depth} leaves (CatBoost's "
                         "oblivious trees have at most 16 levels): the file is damaged")
    for t, (tree, own) in enumerate(zip(trees, tree_split_lists)):  # before any allocation
        values, weights = tree["leaf_values"], tree.get("leaf_weights")
        if not isinstance(values, list) or len(values) != n_outputs << len(own):
            raise ValueError(f"tree {t} has {len(values) if isinstance(values, list) else 'no list of'} leaf "
                             f"values; its {len(own)} splits and {n_outputs} outputs need {n_outputs << len(own)}")
        if weights is not None and (not isinstance(weights, list) or len(weights) != 1 << len(own)):
            raise ValueError(f"tree {t}'s leaf_weights are not a list of {1 << len(own)} numbers")
    check_budget(len(trees) * (1 << depth) * (n_outputs + 1) * 4 + n_evaluated * n_borders * 4,
                     f"{len(trees)} trees padded to depth {depth} with {n_outputs} outputs", "from_catboost")
    borders_table = np.full((n_evaluated, n_borders), np.inf, np.float32)
    for f, b in enumerate(splits.borders):
        borders_table[f, : len(b)] = b
    borders_table = normal_borders(borders_table)

    n_leaves = 1 << depth
    shape = (len(trees), depth)
    split_features = np.zeros(shape, np.int32)
    split_borders = np.full(shape, np.inf, np.float32)
    split_bins = np.full(shape, n_borders, np.int32)
    split_mask = np.zeros(shape, bool)
    leaf_values = np.zeros((len(trees), n_leaves, n_outputs), np.float32)
    leaf_weights = np.zeros((len(trees), n_leaves), np.float32)
    weights_known = all("leaf_weights" in tree for tree in trees)
    for t, (tree, own) in enumerate(zip(trees, tree_split_lists)):
        d = len(own)
        for level, split in enumerate(own):
            feature, j = splits.locate(split, t)
            split_features[t, level] = feature
            split_bins[t, level] = j
            split_borders[t, level] = borders_table[feature, j]
        split_mask[t, :d] = True
        leaf_values[t, : 1 << d] = finite_float32(tree["leaf_values"], f"the leaf values of tree {t}").reshape(
            1 << d, n_outputs)
        if weights_known:
            leaf_weights[t, : 1 << d] = finite_float32(tree["leaf_weights"], f"the leaf weights of tree {t}")
    return ObliviousEnsemble(
        split_features=on_device(split_features),
        split_borders=on_device(split_borders),
        split_bins=on_device(split_bins),
        split_mask=on_device(split_mask),
        borders=on_device(borders_table),
        leaf_values=on_device(leaf_values),
        leaf_weights=on_device(leaf_weights),
        leaf_weights_known=weights_known,
        **fields.ensemble_arguments(),
    )
