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

from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from jaximp._models.categories import CategoryCodes, bitset_members, category_words
from jaximp._models.trees import TreeEnsemble

_FN = "from_sklearn"
_TREES = ("DecisionTreeRegressor", "DecisionTreeClassifier", "ExtraTreeRegressor", "ExtraTreeClassifier")
_FORESTS = ("RandomForestRegressor", "RandomForestClassifier", "ExtraTreesRegressor", "ExtraTreesClassifier")
_BOOSTING = ("GradientBoostingRegressor", "GradientBoostingClassifier")
_HIST = ("HistGradientBoostingRegressor", "HistGradientBoostingClassifier")
# scikit-learn's loss or criterion -> the CatBoost loss of the same objective on the raw output
_REGRESSION_LOSSES = {"squared_error": "RMSE", "friedman_mse": "RMSE", "absolute_error": "MAE",
                      "quantile": "Quantile"}


class _Nodes(NamedTuple):
    """One tree in its library's node numbering (``n`` nodes; children -1 at leaves)."""

    feature: np.ndarray  # i64[n]
    threshold: np.ndarray  # f64[n] go left when x <= threshold
    left: np.ndarray  # i64[n]
    right: np.ndarray  # i64[n]
    nan_left: np.ndarray  # bool[n]
    value: np.ndarray  # f64[n, K]
    weight: np.ndarray  # f64[n]
    gain: np.ndarray  # f64[n]
    categorical: np.ndarray  # bool[n] a split on a set of categories
    right_set: np.ndarray  # bool[n, C] the categories (codes 0..C-1) a categorical split sends right


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
    return _ensemble(model, nodes, n_outputs=n_outputs, scale=1.0 / len(trees), bias=np.zeros(n_outputs),
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
    return _ensemble(model, nodes, n_outputs=n_outputs, scale=model.learning_rate,
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
    columns, codes, known, f_idx_map = _hist_categories(model)
    nodes = []
    for stage in model._predictors:
        for k, predictor in enumerate(stage):
            nodes.append(_predictor_nodes(predictor, k, n_outputs, columns, known, f_idx_map))
    bias = np.asarray(model._baseline_prediction, np.float64).reshape(-1)
    return _ensemble(model, nodes, n_outputs=n_outputs, scale=1.0, bias=bias,
                     loss_function=_boosting_loss(model, n_outputs), impurity_scheme="", category_codes=codes)


def _hist_categories(model: Any) -> tuple[np.ndarray, Any, np.ndarray, np.ndarray]:
    """HistGradientBoosting's categorical features: ``(columns i64[F], codes, known bool[G, C],
    f_idx_map)``.

    With categorical features, the model's ``OrdinalEncoder`` codes them and its
    ``ColumnTransformer`` puts them first: the trees' feature ``k`` is input column
    ``columns[k]``. ``codes`` (a ``CategoryCodes``, or None) holds each categorical column's
    training values in code order; ``known[f_idx_map[k]]`` the codes of feature ``k`` seen in
    training (``make_known_categories_bitsets``), C the most codes of a feature.
    """
    n_features = model.n_features_in_
    is_categorical = getattr(model, "is_categorical_", None)
    if is_categorical is None or not np.any(is_categorical) or model._preprocessor is None:
        return np.arange(n_features), None, np.zeros((0, 0), bool), np.zeros(n_features, np.int64)
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
    known = bitset_members(known_words)  # [G, 256]
    width = int(np.max(np.flatnonzero(known.any(axis=0)), initial=-1)) + 1
    codes = CategoryCodes("scikit-learn", tuple(values), lookup_numbers=True, unseen="missing")
    return columns, codes, known[:, :width], np.asarray(f_idx_map, np.int64)


# --------------------------------------------------------------------------------------------
# Trees


def _tree_nodes(tree: Any, value: np.ndarray) -> _Nodes:
    """A ``sklearn.tree._tree.Tree`` with leaf values ``value f64[n, K]``."""
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


def _predictor_nodes(predictor: Any, k: int, n_outputs: int, columns: np.ndarray, known: np.ndarray,
                     f_idx_map: np.ndarray) -> _Nodes:
    """A HistGradientBoosting ``TreePredictor``, values in column ``k``, features as input
    columns (``columns``, see :func:`_hist_categories`).

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
    right = np.zeros((len(nodes), known.shape[1]), bool)
    if categorical.any():
        width = known.shape[1]
        left_set = bitset_members(predictor.raw_left_cat_bitsets[nodes["bitset_idx"][categorical]])[:, :width]
        seen = known[f_idx_map[feature[categorical]]]
        right[categorical] = np.where(seen, ~left_set, ~nan_left[categorical, None])
    return _Nodes(columns[feature], nodes["num_threshold"].astype(np.float64),
                  np.where(leaf, -1, nodes["left"].astype(np.int64)),
                  np.where(leaf, -1, nodes["right"].astype(np.int64)),
                  nan_left, value, nodes["count"].astype(np.float64),
                  np.where(leaf, 0.0, nodes["gain"].astype(np.float64)), categorical, right)


def _float32_below(threshold: np.ndarray) -> np.ndarray:
    """``f32``: the largest float32 ``b <= threshold``, so that ``x32 > b`` iff ``x32 > threshold``."""
    border = threshold.astype(np.float32)
    return np.where(border > threshold, np.nextafter(border, np.float32(-np.inf)), border)


def _feature_names(model: Any) -> tuple[str, ...]:
    names = getattr(model, "feature_names_in_", None)
    if names is not None:
        return tuple(str(n) for n in names)
    return tuple(str(i) for i in range(model.n_features_in_))


def _ensemble(model: Any, trees: list[_Nodes], *, n_outputs: int, scale: float, bias: np.ndarray,
              loss_function: str, impurity_scheme: str, category_codes: Any = None) -> TreeEnsemble:
    """The trees laid out as :class:`TreeEnsemble` arrays: internal nodes in preorder (root 0),
    leaves depth-first left to right, each leaf's library node id kept in ``leaf_ids``.

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

    t, l_max = len(trees), int(n_leaves[start].max())
    m_max = max(1, l_max - 1)
    ti, pi = tree_of[internal], node_pos[internal]
    features = np.zeros((t, m_max), np.int32)
    borders = np.full((t, m_max), np.inf, np.float32)
    nan_right = np.zeros((t, m_max), bool)
    children = np.full((t, m_max, 2), ~l_max, np.int32)  # padded: never reached
    node_weights = np.zeros((t, m_max), np.float32)
    node_gains = np.zeros((t, m_max), np.float32)
    features[ti, pi] = cat("feature")[internal]
    borders[ti, pi] = _float32_below(cat("threshold")[internal])
    nan_right[ti, pi] = ~cat("nan_left")[internal]
    categorical = np.zeros((t, m_max), bool)
    categorical[ti, pi] = cat("categorical")[internal]
    node_categories = None
    if categorical.any():
        split = np.flatnonzero(internal & cat("categorical"))
        split = split[np.lexsort((node_pos[split], tree_of[split]))]  # row-major, as categorical
        right_sets = np.concatenate([tree.right_set for tree in trees])[split]  # [S, C]
        node_categories = category_words(categorical, list(right_sets), ~cat("nan_left")[split],
                                         _FN)  # unknown codes go where missing values go
        borders[categorical] = 0.0  # codes are 0, 1, ...: anything below is no category
    children[ti, pi, 0] = pointer[left[internal]]
    children[ti, pi, 1] = pointer[right[internal]]
    weight = cat("weight")
    node_weights[ti, pi] = weight[internal]
    node_gains[ti, pi] = cat("gain")[internal]
    tl, pl = tree_of[~internal], leaf_pos[~internal]
    values = np.zeros((t, l_max, n_outputs), np.float32)
    leaf_weights = np.zeros((t, l_max), np.float32)
    leaf_ids = np.full((t, l_max), -1, np.int32)
    values[tl, pl] = cat("value")[~internal]
    leaf_weights[tl, pl] = weight[~internal]
    leaf_ids[tl, pl] = local[~internal]

    names = _feature_names(model)
    classes = getattr(model, "classes_", None)
    return TreeEnsemble(
        roots=jnp.asarray(np.where(internal[start], 0, -1).astype(np.int32)),
        node_features=jnp.asarray(features),
        node_borders=jnp.asarray(borders),
        node_nan_right=jnp.asarray(nan_right),
        node_children=jnp.asarray(children),
        leaf_values=jnp.asarray(values),
        leaf_weights=jnp.asarray(leaf_weights),
        scale=jnp.asarray(scale, jnp.float32),
        bias=jnp.asarray(np.asarray(bias, np.float32).reshape(n_outputs)),
        depth=max(1, int(depth[~internal].max())),  # a model of single leaves: one idle level
        n_features=len(names),
        feature_names=names,
        nan_modes=("AsIs",) * len(names),  # each node's own NaN direction: node_nan_right
        loss_function=loss_function,
        class_names=() if classes is None else tuple(classes.tolist()),
        node_gains=jnp.asarray(node_gains),
        node_weights=jnp.asarray(node_weights),
        leaf_ids=jnp.asarray(leaf_ids),
        impurity_scheme=impurity_scheme,
        node_categorical=None if node_categories is None else jnp.asarray(categorical),
        node_categories=None if node_categories is None else jnp.asarray(node_categories),
        category_codes=category_codes,
    )
