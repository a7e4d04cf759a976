"""Fitted scikit-learn tree models as :class:`TreeEnsemble`.

What each model becomes (T trees, K outputs, raw prediction ``scale * sum_t leaf + bias``):

================================  ===========================  ==========================  ========
model                             raw prediction reproduced    K                           scale
================================  ===========================  ==========================  ========
DecisionTreeRegressor             ``predict``                  ``n_outputs_``              1
DecisionTreeClassifier            ``predict_proba``            ``n_classes_`` (also 2)     1
RandomForest*/ExtraTrees*         as the tree, averaged        as the tree                 1 / T
GradientBoostingRegressor         ``predict``                  1                           lr
GradientBoostingClassifier        ``decision_function``        1 (binary) or n_classes     lr
HistGradientBoostingRegressor     ``_raw_predict`` (predict    1                           1
                                  for identity-link losses)
HistGradientBoostingClassifier    ``decision_function``        1 (binary) or n_classes     1
================================  ===========================  ==========================  ========

A tree or forest classifier's leaves hold the class fractions of the leaf's (weighted)
training samples (``tree_.value`` normalised per leaf, which is what it stores since
scikit-learn 1.4), so its raw output is ``predict_proba`` and its ``loss_function`` is "" (no
logits). Boosting classifiers grow one tree per class and stage (one per stage when binary):
trees are listed stage-major (tree ``s * K + k`` is ``estimators_[s, k]``, or
``_predictors[s][k]``) and each holds its leaf values in its class's column, zeros elsewhere.
GradientBoosting's ``init_`` prediction (``_raw_predict_init``, a constant for the Dummy
estimators it is fitted with by default) and HistGradientBoosting's ``_baseline_prediction``
are the bias; GradientBoosting's ``learning_rate`` is the scale (HistGradientBoosting's leaves
hold it already).

Splits. A tree (also inside forests and GradientBoosting) goes left when ``x <= threshold``
with ``x`` cast to float32 (sklearn's ``DTYPE``) and the threshold a float64: the row goes
right exactly when ``x32 > border`` with ``border`` the largest float32 not above the
threshold (rounding to the nearest float32 instead sends rows equal to a rounded-up threshold
the wrong way). HistGradientBoosting compares float64 values with ``num_threshold`` (float64);
jaximp's rows are float32, so its splits are exact for float32 values (data stored in float32,
as most are) and a float64 value within float32 rounding of a threshold may go the other way.
A NaN goes where the node's ``missing_go_to_left`` sends it (trees since scikit-learn 1.3, and
HistGradientBoosting); a split on missing values alone has threshold ``+inf`` (everything else
goes left).

Weights and gains. ``leaf_weights`` and ``node_weights`` are the nodes' weighted training
samples (``tree_.weighted_n_node_samples``, HistGradientBoosting's ``count``), the cover that
shap's ``TreeExplainer`` uses for these models. ``node_gains`` are trees' weighted impurity
decreases ``w_n i_n - w_l i_l - w_r i_r`` (``Tree.compute_feature_importances``), so that
``split_importance(ens, "impurity")`` is ``feature_importances_``, and HistGradientBoosting's
split ``gain`` (it has no ``feature_importances_``: no "impurity" there).

Leaf numbers. ``leaf_indices`` returns scikit-learn's node ids, i.e. ``model.apply(X)`` for
trees and forests, and ``model.apply(X).reshape(N, -1)`` for GradientBoosting (``[N,
n_estimators, K]`` flattened stage-major, as the trees). HistGradientBoosting has no ``apply``:
its leaf numbers are the nodes' indices in each ``TreePredictor.nodes``.

Categorical features (HistGradientBoosting's ``categorical_features``): the model codes every
value of a categorical column, number or string, by its ``OrdinalEncoder`` (the sorted distinct
training values; an unseen value is missing) and puts those columns first for its trees, whose
feature indices jaximp maps back to the input columns. jaximp codes rows the same way on the host
(``jaximp._models.categories``). A categorical split sends a code left when in its
``raw_left_cat_bitsets`` row, right when a training code of the feature
(``make_known_categories_bitsets``), and any other code, negative value or NaN where missing
values go (``_predict_one_from_raw_data``, _predictor.pyx).

Not supported (a clear error): multi-output classifiers, GradientBoosting with an ``init``
estimator whose prediction depends on the row.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from jaximp._importers.padded import ModelFields, ParsedTree, float32_below, pad_trees
from jaximp._models.categories import CategoryCodes, bitset_members
from jaximp._models.trees import TreeEnsemble

_FN = "from_sklearn"
_TREES = ("DecisionTreeRegressor", "DecisionTreeClassifier", "ExtraTreeRegressor", "ExtraTreeClassifier")
_FORESTS = ("RandomForestRegressor", "RandomForestClassifier", "ExtraTreesRegressor", "ExtraTreesClassifier")
_BOOSTING = ("GradientBoostingRegressor", "GradientBoostingClassifier")
_HIST = ("HistGradientBoostingRegressor", "HistGradientBoostingClassifier")
# scikit-learn's loss or criterion -> the CatBoost loss of the same objective on the raw output
_REGRESSION_LOSSES = {"squared_error": "RMSE", "friedman_mse": "RMSE", "absolute_error": "MAE",
                      "quantile": "Quantile"}


@dataclasses.dataclass(frozen=True)
class _Nodes:
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


def from_sklearn(model: Any) -> TreeEnsemble:
    """Import a fitted scikit-learn tree model as a :class:`TreeEnsemble`.

    Args:
        model: a fitted ``DecisionTreeRegressor``/``Classifier``, ``ExtraTreeRegressor``/
            ``Classifier``, ``RandomForestRegressor``/``Classifier``, ``ExtraTreesRegressor``/
            ``Classifier``, ``GradientBoostingRegressor``/``Classifier`` or
            ``HistGradientBoostingRegressor``/``Classifier``.

    Returns:
        The ensemble: ``leaf_values f32[T, L, K]``, ``predict`` equal to the model's raw output
        (``predict`` for regressors, ``predict_proba`` for tree and forest classifiers,
        ``decision_function`` for boosting classifiers; K their outputs, classes, or 1 for a
        binary boosting classifier), ``leaf_indices`` to its ``apply``,
        ``split_importance(ens, "impurity")`` to its ``feature_importances_``. A forest's scale
        is ``1 / T``; GradientBoosting's is its ``learning_rate`` and its ``init_`` prediction
        the bias.
        ``feature_names`` are ``feature_names_in_`` (a DataFrame's columns are then matched by
        name), else ``"0".."F-1"`` (columns taken in order). A HistGradientBoosting model's
        categorical columns take raw values (strings, numbers, a ``category`` column), coded as
        the model codes them.

    Raises:
        TypeError: ``model`` is not one of the estimators above.
        ValueError: an unfitted model, a multi-output classifier, or a GradientBoosting ``init``
            whose prediction is not a constant.

    Example:
        >>> from sklearn.ensemble import RandomForestRegressor
        >>> forest = RandomForestRegressor(n_estimators=10, max_depth=4, random_state=0).fit(X, y)
        >>> forest_ens = jaximp.from_sklearn(forest)
        >>> forest_ens
        TreeEnsemble(trees=10, depth=4, features=10, outputs=1, loss='RMSE')
        >>> np.allclose(forest_ens.predict(X), forest.predict(X), rtol=1e-5, atol=1e-3)
        True
        >>> np.allclose(jaximp.split_importance(forest_ens, "impurity"), forest.feature_importances_,
        ...             rtol=1e-5, atol=1e-6)
        True
    """
    name = _estimator_name(model)
    _check_fitted(model, name)
    if name in _TREES or name in _FORESTS:
        return _forest(model, name)
    if name in _BOOSTING:
        return _gradient_boosting(model, name)
    return _hist_gradient_boosting(model, name)


def _estimator_name(model: Any) -> str:
    supported = _TREES + _FORESTS + _BOOSTING + _HIST
    for cls in type(model).__mro__:
        if cls.__name__ in supported and cls.__module__.startswith("sklearn."):
            return cls.__name__
    raise TypeError(f"{_FN}: model must be a scikit-learn {', '.join(supported)}; got {type(model).__name__}"
                    + (" (pass the pipeline's last step and transform the rows first)"
                       if type(model).__name__ == "Pipeline" else ""))


def _check_fitted(model: Any, name: str) -> None:
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    try:
        check_is_fitted(model)
    except NotFittedError:
        raise ValueError(f"{_FN}: model must be fitted; got an unfitted {name} (call fit first)") from None


# --------------------------------------------------------------------------------------------
# Per model


def _forest(model: Any, name: str) -> TreeEnsemble:
    trees = [model] if name in _TREES else list(model.estimators_)
    classifier = hasattr(model, "classes_")
    if model.n_outputs_ > 1 and classifier:
        raise ValueError(f"{_FN}: model must be a single-output classifier; got a {name} with "
                         f"{model.n_outputs_} outputs (multi-output classification is not supported)")
    nodes = []
    for estimator in trees:
        tree = estimator.tree_
        if classifier:  # class fractions (already so since scikit-learn 1.4; counts before)
            counts = tree.value[:, 0, :]
            value = counts / np.maximum(counts.sum(axis=1, keepdims=True), np.finfo(np.float64).tiny)
        else:
            value = tree.value[:, :, 0]
        nodes.append(_tree_nodes(tree, value))
    n_outputs = len(model.classes_) if classifier else model.n_outputs_
    criterion = trees[0].criterion
    loss = "" if classifier else _REGRESSION_LOSSES.get(criterion, "")
    if loss == "RMSE" and n_outputs > 1:
        loss = "MultiRMSE"
    elif loss != "RMSE" and n_outputs > 1:
        loss = ""
    return _ensemble(model, nodes, scale=1.0 / len(trees), bias=np.zeros(n_outputs),
                     loss_function=loss, impurity_scheme="boosting" if name in _TREES else "forest")


def _gradient_boosting(model: Any, name: str) -> TreeEnsemble:
    n_stages, n_outputs = model.estimators_.shape
    nodes = []
    for s in range(n_stages):
        for k in range(n_outputs):  # stage-major: tree s * K + k, as apply's [N, stages, K]
            tree = model.estimators_[s, k].tree_
            value = np.zeros((tree.node_count, n_outputs))
            value[:, k] = tree.value[:, 0, 0]
            nodes.append(_tree_nodes(tree, value))
    return _ensemble(model, nodes, scale=model.learning_rate,
                     bias=_init_prediction(model, name), loss_function=_boosting_loss(model, n_outputs),
                     impurity_scheme="boosting")


def _init_prediction(model: Any, name: str) -> np.ndarray:
    """``f64[K]`` GradientBoosting's raw prediction before the trees (``_raw_predict_init``),
    which is a constant for ``init=None`` (a Dummy estimator) and ``init="zero"``."""
    init = model.init_
    if isinstance(init, str) and init == "zero":
        return np.zeros(model.estimators_.shape[1])
    constant = type(init).__name__ in ("DummyRegressor", "DummyClassifier") and getattr(
        init, "strategy", None) != "stratified"
    if not constant:
        raise ValueError(f"{_FN}: model.init must be None, 'zero' or a DummyRegressor/DummyClassifier "
                         f"(a constant prediction); got {init!r}, whose prediction depends on the row")
    row = np.zeros((1, model.n_features_in_), np.float32)
    return np.asarray(model._raw_predict_init(row), np.float64)[0]


def _boosting_loss(model: Any, n_outputs: int) -> str:
    if hasattr(model, "classes_"):
        if model.loss != "log_loss":
            return ""  # exponential loss: the raw output is not log-odds
        return "Logloss" if n_outputs == 1 else "MultiClass"
    if model.loss == "poisson":  # HistGradientBoosting's log link, as CatBoost's Poisson
        return "Poisson"
    return _REGRESSION_LOSSES.get(model.loss, "")


def _hist_gradient_boosting(model: Any, name: str) -> TreeEnsemble:
    n_outputs = model.n_trees_per_iteration_
    categories = _hist_categories(model)
    nodes = []
    for stage in model._predictors:
        for k, predictor in enumerate(stage):
            nodes.append(_predictor_nodes(predictor, k, n_outputs, categories))
    bias = np.asarray(model._baseline_prediction, np.float64).reshape(-1)
    return _ensemble(model, nodes, scale=1.0, bias=bias, loss_function=_boosting_loss(model, n_outputs),
                     impurity_scheme="", category_codes=categories.codes)


@dataclasses.dataclass(frozen=True)
class _HistCategories:
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


def _hist_categories(model: Any) -> _HistCategories:
    """HistGradientBoosting's categorical features (see :class:`_HistCategories`)."""
    n_features = model.n_features_in_
    is_categorical = getattr(model, "is_categorical_", None)
    if is_categorical is None or not np.any(is_categorical) or model._preprocessor is None:
        return _HistCategories(np.arange(n_features), None, np.zeros((0, 0), bool), np.zeros(n_features, np.int64))
    categorical = np.flatnonzero(is_categorical)
    columns = np.concatenate([categorical, np.flatnonzero(~np.asarray(is_categorical, bool))])
    encoder = model._preprocessor.named_transformers_["encoder"]
    values = [None] * n_features
    for j, found in zip(categorical, encoder.categories_):
        found = np.asarray(found).tolist()  # Python scalars
        if found and isinstance(found[-1], float) and found[-1] != found[-1]:  # NaN: missing, no code
            found = found[:-1]
        values[j] = tuple(found)
    known_words, f_idx_map = model._bin_mapper.make_known_categories_bitsets()
    known = bitset_members(known_words)  # [n_categorical, 256]
    width = int(np.max(np.flatnonzero(known.any(axis=0)), initial=-1)) + 1
    codes = CategoryCodes("scikit-learn", tuple(values), lookup_numbers=True, unseen="missing")
    return _HistCategories(columns, codes, known[:, :width], np.asarray(f_idx_map, np.int64))


# --------------------------------------------------------------------------------------------
# Trees


def _tree_nodes(tree: Any, value: np.ndarray) -> _Nodes:
    """A ``sklearn.tree._tree.Tree`` with leaf values ``value f64[n_all, K]``."""
    left = np.asarray(tree.children_left, np.int64)
    right = np.asarray(tree.children_right, np.int64)
    weight = np.asarray(tree.weighted_n_node_samples, np.float64)
    impurity = np.asarray(tree.impurity, np.float64)
    internal = left >= 0
    gain = np.zeros(len(left))
    l, r = left[internal], right[internal]
    gain[internal] = (weight[internal] * impurity[internal] - weight[l] * impurity[l]
                      - weight[r] * impurity[r])
    nan_left = np.asarray(tree.missing_go_to_left, bool)
    n = len(left)
    return _Nodes(np.asarray(tree.feature, np.int64), np.asarray(tree.threshold, np.float64),
                  left, right, nan_left, np.asarray(value, np.float64), weight, gain,
                  np.zeros(n, bool), np.zeros((n, 0), bool))


def _predictor_nodes(predictor: Any, k: int, n_outputs: int, categories: _HistCategories) -> _Nodes:
    """A HistGradientBoosting ``TreePredictor``, values in column ``k``, features as input
    columns (``categories.columns``).

    A categorical node sends a code right unless it is in its ``raw_left_cat_bitsets`` row
    (left) or unknown (``known``: missing, ``missing_go_to_left``), as ``_predict_one_from_raw_data``
    (sklearn/ensemble/_hist_gradient_boosting/_predictor.pyx) does.
    """
    nodes = predictor.nodes
    leaf = nodes["is_leaf"].astype(bool)
    value = np.zeros((len(nodes), n_outputs))
    value[:, k] = nodes["value"]
    feature = nodes["feature_idx"].astype(np.int64)
    nan_left = nodes["missing_go_to_left"].astype(bool)
    categorical = nodes["is_categorical"].astype(bool) & ~leaf
    known = categories.known
    right = np.zeros((len(nodes), known.shape[1]), bool)
    if categorical.any():
        width = known.shape[1]
        left_set = bitset_members(predictor.raw_left_cat_bitsets[nodes["bitset_idx"][categorical]])[:, :width]
        seen = known[categories.f_idx_map[feature[categorical]]]
        right[categorical] = np.where(seen, ~left_set, ~nan_left[categorical, None])
    return _Nodes(categories.columns[feature], nodes["num_threshold"].astype(np.float64),
                  np.where(leaf, -1, nodes["left"].astype(np.int64)),
                  np.where(leaf, -1, nodes["right"].astype(np.int64)),
                  nan_left, value, nodes["count"].astype(np.float64),
                  np.where(leaf, 0.0, nodes["gain"].astype(np.float64)), categorical, right)


def _feature_names(model: Any) -> tuple[str, ...]:
    names = getattr(model, "feature_names_in_", None)
    if names is not None:
        return tuple(str(n) for n in names)
    return tuple(str(i) for i in range(model.n_features_in_))


def _ensemble(model: Any, trees: list[_Nodes], *, scale: float, bias: np.ndarray, loss_function: str,
              impurity_scheme: str, category_codes: Any = None) -> TreeEnsemble:
    """The trees as a :class:`TreeEnsemble` with the model's names and classes (K the length of
    ``bias``)."""
    names = _feature_names(model)
    classes = getattr(model, "classes_", None)
    fields = ModelFields(
        bias=bias,
        feature_names=names,
        nan_modes=("AsIs",) * len(names),  # each node's own NaN direction: node_nan_right
        loss_function=loss_function,
        scale=scale,
        class_names=() if classes is None else tuple(classes.tolist()),
    )
    # a model of single leaves: one idle level
    return pad_trees(_parsed_trees(trees), fields, fn_name=_FN, min_depth=1, category_codes=category_codes,
                     impurity_scheme=impurity_scheme)


def _parsed_trees(trees: list[_Nodes]) -> list[ParsedTree]:
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

    levels, depth = [], np.zeros(len(left), np.int64)
    frontier = start
    while frontier.size:
        depth[frontier] = len(levels)
        levels.append(frontier)
        inner = frontier[internal[frontier]]
        frontier = np.concatenate([left[inner], right[inner]])
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
