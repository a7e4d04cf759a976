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

A fitted model is input like a model file (it may be unpickled from elsewhere, or edited): its
attributes and tree arrays are checked before anything is built (``jaximp._importers.sklearn_trees``)
and an inconsistent model is refused with a ``ValueError`` naming the tree and the node, so that
jaximp gives scikit-learn's numbers or refuses.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from jaximp._importers.padded import ModelFields, pad_trees
from jaximp._importers.sklearn_trees import HistCategories, Nodes, parsed_trees, predictor_nodes, tree_nodes
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


def from_sklearn(model: Any) -> TreeEnsemble:
    """Import a fitted scikit-learn tree model as a [`TreeEnsemble`][jaximp.TreeEnsemble].

    The numbers equal scikit-learn's own: ``jaximp.predict`` the model's raw output
    (``predict`` for regressors, ``predict_proba`` for tree and forest classifiers,
    ``decision_function`` for boosting classifiers), ``jaximp.leaf_indices`` its ``apply``,
    ``jaximp.split_importance(ens, "impurity")`` its ``feature_importances_``; and
    ``jaximp.shap_values`` equals shap's ``TreeExplainer(model,
    feature_perturbation="tree_path_dependent")``.

    Columns are matched by name when the model was fitted on a DataFrame
    (``feature_names_in_``), else taken in order and named ``"0".."F-1"``. A
    HistGradientBoosting model's categorical columns take raw values (strings, numbers, a
    ``category`` column), coded as the model codes them.

    Args:
        model: a fitted ``DecisionTreeRegressor``/``Classifier``, ``ExtraTreeRegressor``/
            ``Classifier``, ``RandomForestRegressor``/``Classifier``, ``ExtraTreesRegressor``/
            ``Classifier``, ``GradientBoostingRegressor``/``Classifier`` or
            ``HistGradientBoostingRegressor``/``Classifier``.

    Returns:
        TreeEnsemble: the ensemble, with ``leaf_values f32[T, L, K]``: K the outputs of a regressor,
            the classes of a tree or forest classifier, the classes of a multiclass boosting
            classifier, 1 for a binary one. A forest's ``scale`` is ``1 / T`` (the mean of its
            trees); GradientBoosting's is its ``learning_rate``, and its ``init_`` prediction the
            ``bias``.

    Raises:
        TypeError: ``model`` is not one of the estimators above.
        ValueError: an unfitted model, a multi-output classifier, a GradientBoosting ``init``
            whose prediction is not a constant, or a model whose fitted trees are inconsistent
            (edited, or unpickled from another scikit-learn version).

    Examples:
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
    with _damaged(name):
        _check_fitted(model, name)  # scikit-learn's check reads attributes an edited model may lack
        if name in _TREES or name in _FORESTS:
            return _forest(model, name)
        if name in _BOOSTING:
            return _gradient_boosting(model, name)
        return _hist_gradient_boosting(model, name)


@contextlib.contextmanager
def _damaged(name: str) -> Iterator[None]:
    """Report what the checks of the trees do not name (a fitted attribute missing or of the wrong
    type, as in a model unpickled from another version) as a ``ValueError`` on the model."""
    try:
        yield
    except (AttributeError, IndexError, KeyError) as error:
        raise ValueError(f"{_FN}: the fitted {name} is inconsistent ({type(error).__name__}: {error}); refit it, "
                         "or load it with the scikit-learn version that saved it") from None
    except ValueError as error:
        if not str(error).startswith("TreeEnsemble: "):
            raise
        raise ValueError(f"{_FN}: the fitted {name}'s trees are inconsistent: {error}") from None


def _estimator_name(model: Any) -> str:
    supported = _TREES + _FORESTS + _BOOSTING + _HIST
    for cls in type(model).__mro__:
        if cls.__name__ in supported and cls.__module__.startswith("sklearn."):
            return cls.__name__
    library = type(model).__module__.split(".")[0]
    hint = {"xgboost": " (import it with jaximp.from_xgboost)", "lightgbm": " (import it with jaximp.from_lightgbm)",
            "catboost": " (import it with jaximp.from_catboost)"}.get(library, "")
    if type(model).__name__ == "Pipeline":
        hint = " (pass the pipeline's last step and transform the rows first)"
    raise TypeError(f"{_FN}: model must be a scikit-learn {', '.join(supported)}; got {type(model).__name__}{hint}")


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
    trees = [model] if name in _TREES else _estimators(model, name)
    classifier = hasattr(model, "classes_")
    if model.n_outputs_ > 1 and classifier:
        raise ValueError(f"{_FN}: model must be a single-output classifier; got a {name} with "
                         f"{model.n_outputs_} outputs (multi-output classification is not supported)")
    n_outputs = len(model.classes_) if classifier else model.n_outputs_
    nodes = []
    for i, estimator in enumerate(trees):
        where = "the tree" if name in _TREES else f"estimators_[{i}]"
        tree = _tree(estimator, model, where)
        _check_value_shape(tree, (1, n_outputs) if classifier else (n_outputs, 1), where)
        if classifier:
            value = _class_fractions(tree.value[:, 0, :])
        else:
            value = tree.value[:, :, 0]
        nodes.append(tree_nodes(tree, value, model.n_features_in_, where))
    criterion = trees[0].criterion
    loss = "" if classifier else _REGRESSION_LOSSES.get(criterion, "")
    if loss == "RMSE" and n_outputs > 1:
        loss = "MultiRMSE"
    elif loss != "RMSE" and n_outputs > 1:
        loss = ""
    return _ensemble(model, nodes, scale=1.0 / len(trees), bias=np.zeros(n_outputs),
                     loss_function=loss, impurity_scheme="boosting" if name in _TREES else "forest")


def _gradient_boosting(model: Any, name: str) -> TreeEnsemble:
    estimators = model.estimators_
    classes = getattr(model, "classes_", None)
    expected = 1 if classes is None or len(classes) == 2 else len(classes)
    if not isinstance(estimators, np.ndarray) or estimators.ndim != 2 or estimators.shape[1] != expected:
        raise ValueError(f"{_FN}: the fitted {name}'s estimators_ must be an array of [n_stages, {expected}] trees; "
                         f"got {type(estimators).__name__} of shape {getattr(estimators, 'shape', '?')} (refit it)")
    n_stages, n_outputs = estimators.shape
    if not n_stages:
        raise ValueError(f"{_FN}: the fitted {name} has no trees (estimators_ is empty)")
    nodes = []
    for s in range(n_stages):
        for k in range(n_outputs):  # stage-major: tree s * K + k, as apply's [N, stages, K]
            where = f"estimators_[{s}, {k}]"
            tree = _tree(estimators[s, k], model, where)
            _check_value_shape(tree, (1, 1), where)
            value = np.zeros((tree.node_count, n_outputs))
            value[:, k] = tree.value[:, 0, 0]
            nodes.append(tree_nodes(tree, value, model.n_features_in_, where))
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
    bias = np.asarray(model._raw_predict_init(row), np.float64)[0]
    if not np.isfinite(bias).all():
        raise ValueError(f"{_FN}: the fitted {name}'s initial prediction must be finite; got {bias} (refit it)")
    return bias


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
    stages = list(model._predictors)
    if not stages or any(len(stage) != n_outputs for stage in stages):
        raise ValueError(f"{_FN}: the fitted {name} must hold n_trees_per_iteration_ = {n_outputs} trees per "
                         f"iteration; got {[len(stage) for stage in stages][:10]} (refit it)")
    nodes = []
    for s, stage in enumerate(stages):
        for k, predictor in enumerate(stage):
            nodes.append(predictor_nodes(predictor, k, n_outputs, categories, f"_predictors[{s}][{k}]"))
    bias = np.asarray(model._baseline_prediction, np.float64).reshape(-1)
    if bias.shape != (n_outputs,) or not np.isfinite(bias).all():
        raise ValueError(f"{_FN}: the fitted {name}'s _baseline_prediction must be {n_outputs} finite numbers; "
                         f"got {bias[:10]} (refit it)")
    return _ensemble(model, nodes, scale=1.0, bias=bias, loss_function=_boosting_loss(model, n_outputs),
                     impurity_scheme="", category_codes=categories.codes)


def _hist_categories(model: Any) -> HistCategories:
    """HistGradientBoosting's categorical features (see :class:`HistCategories`)."""
    n_features = model.n_features_in_
    is_categorical = getattr(model, "is_categorical_", None)
    if is_categorical is None or not np.any(is_categorical) or model._preprocessor is None:
        return HistCategories(np.arange(n_features), None, np.zeros((0, 0), bool), np.zeros(n_features, np.int64))
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
    return HistCategories(columns, codes, known[:, :width], np.asarray(f_idx_map, np.int64))


# --------------------------------------------------------------------------------------------
# Trees


def _estimators(model: Any, name: str) -> list[Any]:
    """A forest's fitted trees."""
    trees = list(model.estimators_)
    if not trees:
        raise ValueError(f"{_FN}: the fitted {name} has no trees (estimators_ is empty)")
    return trees


def _tree(estimator: Any, model: Any, where: str) -> Any:
    """``estimator.tree_``, a ``sklearn.tree._tree.Tree`` reading the model's features."""
    from sklearn.tree._tree import Tree

    tree = getattr(estimator, "tree_", None)
    if not isinstance(tree, Tree):
        raise ValueError(f"{_FN}: {where} must be a fitted scikit-learn decision tree; got "
                         f"{type(estimator).__name__} without a tree_ (refit the model)")
    if tree.n_features != model.n_features_in_:
        raise ValueError(f"{_FN}: {where} reads {tree.n_features} features but the model has n_features_in_ = "
                         f"{model.n_features_in_} (an edited or damaged model: refit it)")
    return tree


def _check_value_shape(tree: Any, trailing: tuple[int, int], where: str) -> None:
    """``tree.value`` is ``[node_count, *trailing]``: the model's outputs (classes) per node."""
    shape = np.shape(tree.value)
    if len(shape) != 3 or shape[1:] != trailing:
        raise ValueError(f"{_FN}: {where}'s tree_.value must be [node_count, {trailing[0]}, {trailing[1]}] (the "
                         f"model's outputs); got {shape} (an edited or damaged model: refit it)")


def _class_fractions(counts: np.ndarray) -> np.ndarray:
    """``f64[n_all, K]`` a classifier tree's ``predict_proba`` at each node: ``tree_.value``, the
    class fractions it stores since scikit-learn 1.4, or before that the class counts normalised
    as ``predict_proba`` did (by their sum, 1 where the sum is 0)."""
    from sklearn import __version__

    counts = np.asarray(counts, np.float64)
    if tuple(int(part) for part in __version__.split(".")[:2]) >= (1, 4):
        return counts
    total = counts.sum(axis=1, keepdims=True)
    return counts / np.where(total == 0, 1.0, total)


def _feature_names(model: Any) -> tuple[str, ...]:
    names = getattr(model, "feature_names_in_", None)
    if names is not None:
        return tuple(str(n) for n in names)
    return tuple(str(i) for i in range(model.n_features_in_))


def _ensemble(model: Any, trees: list[Nodes], *, scale: float, bias: np.ndarray, loss_function: str,
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
    return pad_trees(parsed_trees(trees), fields, fn_name=_FN, min_depth=1, category_codes=category_codes,
                     impurity_scheme=impurity_scheme)
