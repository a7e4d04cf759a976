"""Import XGBoost tree models (``gbtree`` and ``dart`` boosters) as :class:`TreeEnsemble`.

One parser reads XGBoost's JSON model document, whatever the model came as: a ``Booster`` or a
scikit-learn ``XGBModel`` (``save_raw("json")``), a ``.json`` file (the standard library's
``json``) or a ``.ubj`` file (``jaximp._importers.ubjson``, the same document in binary), so a
model file imports without XGBoost installed. The parts read (XGBoost 1.x to 3.x):

* ``learner.gradient_booster``: ``{"name": "gbtree", "model": model}`` or ``{"name": "dart",
  "gbtree": {"model": model}, "weight_drop": [T]}`` (dart scales tree ``t``'s output by
  ``weight_drop[t]`` when it predicts, and so in ``pred_contribs``); ``gblinear`` is refused.
* ``model.trees[t]``: per node ``n`` (XGBoost's node id, the root 0), ``left_children[n]`` and
  ``right_children[n]`` (-1 at a leaf), ``split_indices`` (feature), ``split_conditions``
  (the threshold; at a leaf, the leaf value, learning rate applied), ``default_left`` (where a
  missing value goes), ``loss_changes`` (the split's gain), ``sum_hessian`` (the node's cover),
  ``split_type`` (1: a categorical split, whose categories going right are listed in
  ``categories``, cut per node by ``categories_nodes``, ``categories_segments`` and
  ``categories_sizes``) and ``tree_param.size_leaf_vector`` (> 1: vector leaves of
  ``multi_strategy="multi_output_tree"``, not imported). ``model.cats`` (XGBoost >= 3.1): the
  training frame's categories of each categorical feature, which code a DataFrame's
  ``category`` columns (``jaximp._models.categories``). ``model.tree_info[t]``: the output
  (class, target) tree ``t`` adds to; ``model.iteration_indptr``: the trees of each boosting
  round.
* ``learner.learner_model_param``: ``base_score`` (one value, ``"5E-1"``, or one per output,
  ``"[v0,v1]"`` since 3.0), ``num_class``, ``num_target``, ``num_feature``; ``learner.objective.name``,
  ``learner.feature_names``.

Decisions: XGBoost sends a row left when ``x < split_condition`` in float32 and a missing value
(NaN) to ``default_left``. So a row goes right when ``x >= c``, exactly when ``x > c'`` with
``c' = nextafter(c, -inf)`` in float32: the border jaximp stores. A categorical split reads the
category ``trunc(x)`` and sends the listed categories right, everything else left: other
categories, negative values, values at or past ``2**24`` (``common::Decision``,
src/common/categorical.h); jaximp stores border 0 (the smallest category) and the listed
categories as the node's bitset, every other value left.

Bias: ``base_score`` is stored on the prediction scale, and the margin adds the objective's
inverse link of it (checked by experiment against ``predict(output_margin=True)`` for every
built-in objective, XGBoost 3.2): logit for ``binary:logistic`` and ``reg:logistic``, log for
``count:poisson``, ``reg:gamma``, ``reg:tweedie``, ``survival:cox`` and ``survival:aft``, the
value itself for the others (``multi:softprob`` stores margins, one per class).

Leaves are numbered depth-first, left to right, with ``leaf_ids`` holding their XGBoost node ids
(``predict(pred_leaf=True)``); leaf weights and node weights are ``sum_hessian``, the cover that
XGBoost's own TreeSHAP (``pred_contribs``) and ``get_score(importance_type="cover")`` use, and
node gains ``loss_changes`` (``get_score``'s gain).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import numpy as np

from jaximp._importers.padded import ModelFields, ParsedTree, pad_trees
from jaximp._importers.ubjson import loads
from jaximp._models.categories import CategoryCodes
from jaximp._models.trees import TreeEnsemble

_LOGIT = ("binary:logistic", "reg:logistic")
_LOG = ("count:poisson", "reg:gamma", "reg:tweedie", "survival:cox", "survival:aft")
_LOSSES = {  # XGBoost objective -> the CatBoost loss of the same definition on the margin
    "reg:squarederror": "RMSE", "binary:logistic": "Logloss", "binary:logitraw": "Logloss",
    "reg:logistic": "CrossEntropy", "multi:softprob": "MultiClass", "multi:softmax": "MultiClass",
    "reg:absoluteerror": "MAE",
}


def from_xgboost(model: Any, *, iteration_range: tuple[int, int] | None = None) -> TreeEnsemble:
    """Import an XGBoost tree model as a :class:`TreeEnsemble`.

    Args:
        model: an ``xgboost.Booster``; a fitted ``XGBModel`` (``XGBRegressor``,
            ``XGBClassifier``, ``XGBRanker``, ...); the path of a model file saved as JSON
            (``save_model("m.json")``) or UBJSON (``"m.ubj"``), read without XGBoost; the
            bytes of ``Booster.save_raw("json")`` or ``save_raw("ubj")``; or the parsed JSON
            document (a dict).
        iteration_range: ``(begin, end)`` boosting rounds to import, as ``predict``'s
            ``iteration_range`` (end 0: to the last). None: the rounds ``predict`` uses by
            default: every round for a Booster or a file, up to ``best_iteration`` for an
            ``XGBModel`` fitted with early stopping.

    Returns:
        The ensemble, whose ``predict`` equals XGBoost's ``predict(output_margin=True)``,
        ``leaf_indices`` its ``pred_leaf=True``, ``shap_values`` and ``expected_value`` its
        ``pred_contribs=True`` (the bias column), ``shap_interaction_values`` its
        ``pred_interactions=True``, and ``split_importance`` its ``get_score``. K is
        ``num_class`` for multiclass models, the number of targets for multi-output ones, else
        1. ``loss_function``: "RMSE", "Logloss", "CrossEntropy", "MultiClass", "MultiRMSE" or
        "MAE" where the objective is that loss, else "" (pass ``scoring=``). ``class_names``:
        an ``XGBClassifier``'s ``classes_``. Nameless features are named ``"0".."F-1"``
        (XGBoost's ``get_score`` calls them ``"f0".."f{F-1}"``). Categorical features
        (``enable_categorical=True``) read category codes: numbers as they are, a DataFrame's
        ``category`` columns coded by the training categories the model stores, as XGBoost
        codes them (a category unseen in training is refused).

    Raises:
        TypeError: ``model`` is none of the above.
        ValueError: a missing or unreadable file, not an XGBoost model, a ``gblinear`` booster,
            vector leaves (not imported), an empty iteration range, or an unfitted model.

    Example:
        >>> import xgboost
        >>> regressor = xgboost.XGBRegressor(n_estimators=10, max_depth=3).fit(X, y)
        >>> xgb_ens = jaximp.from_xgboost(regressor)
        >>> xgb_ens
        TreeEnsemble(trees=10, depth=3, features=10, outputs=1, loss='RMSE')
        >>> contribs = regressor.get_booster().predict(xgboost.DMatrix(X), pred_contribs=True)
        >>> np.allclose(jaximp.shap_values(xgb_ens, X), contribs[:, :-1], rtol=1e-5, atol=1e-3)
        True
    """
    model_json, class_names, default_range = _load(model)
    if iteration_range is not None:
        if (not isinstance(iteration_range, (tuple, list)) or len(iteration_range) != 2
                or not all(isinstance(i, (int, np.integer)) and i >= 0 for i in iteration_range)):
            raise ValueError("from_xgboost: iteration_range must be None or (begin, end), two "
                             f"non-negative integers; got {iteration_range!r}")
        default_range = (int(iteration_range[0]), int(iteration_range[1]))
    return tree_ensemble_from_xgboost_json(model_json, class_names=class_names,
                                           iteration_range=default_range)


# --------------------------------------------------------------------------------------------
# Reading the model document


def _load(model: Any) -> tuple[dict, tuple, tuple[int, int]]:
    """``(JSON document, class names, default iteration range)`` of anything ``from_xgboost`` takes."""
    if isinstance(model, dict):
        return model, (), (0, 0)
    if isinstance(model, (bytes, bytearray, memoryview)):
        return _parse(bytes(model), "the model bytes"), (), (0, 0)
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise ValueError(f"from_xgboost: model must be an XGBoost model or an existing model file; got {path!r}")
        with open(path, "rb") as f:
            return _parse(f.read(), repr(path)), (), (0, 0)
    xgboost = sys.modules.get("xgboost")  # imported wherever an XGBoost object exists
    if xgboost is not None and isinstance(model, xgboost.Booster):
        return _booster_json(model), (), (0, 0)
    if xgboost is not None and isinstance(model, xgboost.XGBModel):
        try:
            booster = model.get_booster()
        except Exception as e:  # XGBoost raises NotFittedError (a ValueError) or its own XGBoostError
            raise ValueError(f"from_xgboost: model must be a fitted XGBoost model ({e})") from e
        classes = getattr(model, "classes_", None)
        names = tuple(np.asarray(classes).tolist()) if classes is not None else ()
        try:
            best = model.best_iteration  # set by early stopping; predict stops there
            default = (0, int(best) + 1)
        except AttributeError:
            default = (0, 0)
        return _booster_json(booster), names, default
    raise TypeError("from_xgboost: model must be an xgboost.Booster, a fitted XGBModel or the path "
                    f"of a .json or .ubj model file; got {type(model).__name__}")


def _booster_json(booster: Any) -> dict:
    return json.loads(booster.save_raw(raw_format="json"))


def _parse(data: bytes, where: str) -> dict:
    """The JSON document of a model file's bytes, JSON or UBJSON (told apart by the first key:
    JSON's is a quoted string, UBJSON's a length marker)."""
    head = data.lstrip()[:2]
    try:
        if head[:1] == b"{" and head[1:2] in (b'"', b"}", b"\n", b"\r", b" ", b"\t"):
            return json.loads(data.decode("utf-8"))
        if head[:1] == b"{":
            return loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"from_xgboost: {where} is not a readable XGBoost JSON or UBJSON model ({e})") from e
    raise ValueError(f"from_xgboost: {where} must be an XGBoost model saved as JSON or UBJSON "
                     "(save_model('model.json') or 'model.ubj'); XGBoost's old binary format is "
                     "not read: load it with XGBoost and save it again as JSON")


# --------------------------------------------------------------------------------------------
# The document -> TreeEnsemble


def tree_ensemble_from_xgboost_json(model_json: dict, *, class_names: tuple = (),
                                    iteration_range: tuple[int, int] = (0, 0)) -> TreeEnsemble:
    """Build a :class:`TreeEnsemble` from XGBoost's parsed JSON (or UBJSON) model document.

    Args:
        model_json: the document (see the module docstring).
        class_names: the classes of a classifier, if known.
        iteration_range: ``(begin, end)`` boosting rounds (end 0: to the last).

    Returns:
        The ensemble (see :func:`from_xgboost`).

    Raises:
        ValueError: not an XGBoost model, or one jaximp does not import (see :func:`from_xgboost`).
    """
    if not isinstance(model_json, dict) or not isinstance(model_json.get("learner"), dict):
        raise ValueError("from_xgboost: the document is not an XGBoost model (no \"learner\")")
    booster = model_json["learner"].get("gradient_booster", {})
    name = booster.get("name")
    if name not in ("gbtree", "dart"):
        raise ValueError(f"from_xgboost: model must use a tree booster (gbtree or dart); got "
                         f"booster {name!r}" + (", a linear model whose importances are its "
                                               "coefficients" if name == "gblinear" else ""))
    try:
        return _build(model_json, booster, tuple(class_names), iteration_range)
    except (KeyError, IndexError, TypeError) as e:
        raise ValueError(f"from_xgboost: the XGBoost model is corrupt ({e!r})") from e


def _numbers(text: Any) -> np.ndarray:
    """``f64[n]`` of a ``base_score``: ``"5E-1"`` (before 3.0) or ``"[5E-1,2E-1]"``."""
    if isinstance(text, str):
        return np.asarray([float(v) for v in text.strip("[] ").split(",") if v.strip()], np.float64)
    return np.atleast_1d(np.asarray(text, np.float64))


def _margin(base_score: np.ndarray, objective: str) -> np.ndarray:
    """The margin of ``base_score`` (stored on the prediction scale): the objective's inverse link."""
    if objective in _LOGIT:
        return np.log(base_score) - np.log1p(-base_score)
    if objective in _LOG:
        return np.log(base_score)
    return base_score


def _tree_range(model: dict, n_trees: int, n_per_round: int, iteration_range: tuple[int, int]) -> range:
    """The trees of boosting rounds ``[begin, end)``."""
    indptr = model.get("iteration_indptr")
    if indptr is None or len(indptr) < 1:  # before 2.0: every round has the same trees
        indptr = np.arange(0, n_trees + 1, max(1, n_per_round))
    indptr = np.asarray(indptr, np.int64)
    n_rounds = len(indptr) - 1
    begin, end = iteration_range
    end = n_rounds if end == 0 else end
    if not 0 <= begin < end <= n_rounds:
        raise ValueError(f"from_xgboost: iteration_range must be within the model's {n_rounds} "
                         f"boosting rounds, begin < end; got {iteration_range!r}")
    return range(int(indptr[begin]), int(indptr[end]))


def _parse_tree(tree: dict, t: int, output: int, drop: np.float32) -> ParsedTree:
    """XGBoost tree ``t`` in jaximp's numbering (internal nodes and leaves in depth-first,
    left-first order), adding ``drop`` times its leaves to ``output`` (dart: XGBoost predicts
    ``weight_drop[t]`` times the leaf)."""
    left = np.asarray(tree["left_children"], np.int64)
    right = np.asarray(tree["right_children"], np.int64)
    size = int(tree.get("tree_param", {}).get("size_leaf_vector", 1) or 1)
    if size > 1:
        raise ValueError("from_xgboost: trees with vector leaves (multi_strategy="
                         "'multi_output_tree') are not imported; train with multi_strategy="
                         "'one_output_per_tree' (the default) to explain the model with jaximp")
    order, levels = [], []
    stack = [(0, 0)]
    while stack:  # preorder, left child first
        n, level = stack.pop()
        order.append(n)
        levels.append(level)
        if len(order) > len(left):
            raise ValueError(f"from_xgboost: the XGBoost model is corrupt (tree {t} has a cycle)")
        if left[n] >= 0:
            stack.append((int(right[n]), level + 1))
            stack.append((int(left[n]), level + 1))
    order = np.asarray(order, np.int64)
    is_leaf = left[order] < 0
    internal, leaves = order[~is_leaf], order[is_leaf]
    split_type = np.asarray(tree.get("split_type", np.zeros(len(left))), np.int64)
    if np.any((split_type[internal] != 0) & (split_type[internal] != 1)):
        raise ValueError(f"from_xgboost: tree {t} has a split_type other than 0 (numerical) or "
                         "1 (categorical), which this XGBoost version's format does not define")
    pointer = np.zeros(len(left), np.int64)
    pointer[internal] = np.arange(len(internal))
    pointer[leaves] = ~np.arange(len(leaves))
    conditions = np.asarray(tree["split_conditions"], np.float32)
    hessians = np.asarray(tree["sum_hessian"], np.float32)
    categorical = split_type[internal] == 1
    right_categories = _right_categories(tree, internal[categorical])
    return ParsedTree(
        root=int(pointer[0]),
        node_features=np.asarray(tree["split_indices"], np.int64)[internal],
        # a categorical node reads values from 0 up (a negative value is no category: left)
        node_borders=np.where(categorical, np.float32(0.0),
                              np.nextafter(conditions[internal], np.float32(-np.inf))),
        node_nan_right=np.asarray(tree["default_left"], np.int64)[internal] == 0,
        node_children=np.stack([pointer[left[internal]], pointer[right[internal]]], axis=-1),
        leaf_values=conditions[leaves] * drop,
        depth=int(max(levels)),
        output=output,
        leaf_weights=hessians[leaves],
        node_gains=np.asarray(tree["loss_changes"], np.float32)[internal],
        node_weights=hessians[internal],
        leaf_ids=leaves,
        node_categorical=categorical,
        right_categories=tuple(right_categories),
        others_right=np.zeros(len(right_categories), bool),  # other values: left
    )


def _right_categories(tree: dict, nodes: np.ndarray) -> list[np.ndarray]:
    """Per categorical node (XGBoost ids ``nodes``), ``bool[n_categories]`` the categories that
    go right (``n_categories`` one past the largest listed).

    The tree lists, per categorical node ``categories_nodes[i]``, the categories
    ``categories[categories_segments[i]:][:categories_sizes[i]]``: those go right, every other
    value (an unlisted or invalid category) left (``common::Decision``, src/common/categorical.h).
    """
    if not len(nodes):
        return []
    listed = np.asarray(tree["categories_nodes"], np.int64)
    starts = np.asarray(tree["categories_segments"], np.int64)
    sizes = np.asarray(tree["categories_sizes"], np.int64)
    categories = np.asarray(tree["categories"], np.int64)
    where = {int(n): i for i, n in enumerate(listed)}
    right = []
    for n in nodes:  # per categorical node, at import
        i = where[int(n)]
        chosen = categories[starts[i]:starts[i] + sizes[i]]
        mask = np.zeros(int(chosen.max(initial=-1)) + 1, bool)
        mask[chosen] = True
        right.append(mask)
    return right


def _category_codes(model: dict, feature_types: list, n_features: int) -> CategoryCodes | None:
    """The :class:`CategoryCodes` of a model with categorical features (``feature_types`` "c"),
    from the training categories it stores (``cats``, XGBoost >= 3.1), else None."""
    encodings = model.get("cats", {}).get("enc", [])
    columns = [None] * n_features
    for j, enc in enumerate(encodings[:n_features]):
        values = enc.get("values", [])
        if len(values) == 0:
            continue
        if "offsets" in enc:  # strings: UTF-8 bytes cut at the offsets
            raw = np.asarray(values, np.int64).astype(np.uint8).tobytes()
            bounds = np.asarray(enc["offsets"], np.int64)
            columns[j] = tuple(raw[a:b].decode("utf-8", "replace") for a, b in zip(bounds[:-1], bounds[1:]))
        else:
            columns[j] = tuple(np.asarray(values).tolist())
    if "c" not in feature_types and all(c is None for c in columns):
        return None
    return CategoryCodes("XGBoost", tuple(columns), unseen="error")


def _build(model_json: dict, booster: dict, class_names: tuple, iteration_range: tuple[int, int]) -> TreeEnsemble:
    learner = model_json["learner"]
    model = booster["gbtree"]["model"] if booster["name"] == "dart" else booster["model"]
    param = learner["learner_model_param"]
    objective = learner.get("objective", {}).get("name", "")
    n_class, n_target = int(param.get("num_class", 0)), int(param.get("num_target", 1) or 1)
    n_outputs = max(n_class, n_target, 1)
    n_features = int(param["num_feature"])
    all_trees, tree_info = model["trees"], np.asarray(model["tree_info"], np.int64)
    if not all_trees:
        raise ValueError("from_xgboost: the model has no trees (trained for 0 rounds)")
    n_parallel = int(model.get("gbtree_model_param", {}).get("num_parallel_tree", 1) or 1)
    chosen = _tree_range(model, len(all_trees), n_parallel * n_outputs, iteration_range)
    drop = np.asarray(booster.get("weight_drop", np.ones(len(all_trees))), np.float32)
    outputs, drop = tree_info[list(chosen)], drop[list(chosen)]
    trees = [_parse_tree(all_trees[t], t, int(k), w) for t, k, w in zip(chosen, outputs, drop)]
    if np.any((outputs < 0) | (outputs >= n_outputs)):
        raise ValueError(f"from_xgboost: tree_info must name outputs below {n_outputs}; "
                         f"got {sorted(set(outputs.tolist()))}")
    features = np.concatenate([tree.node_features for tree in trees])
    if features.size and (features.min() < 0 or features.max() >= n_features):
        raise ValueError(f"from_xgboost: split features must be below num_feature = {n_features}")

    base = _numbers(param.get("base_score", "0.5"))
    if base.size not in (1, n_outputs):
        raise ValueError(f"from_xgboost: base_score must hold 1 or {n_outputs} values; got {base.size}")
    bias = np.broadcast_to(_margin(base, objective), (n_outputs,)).astype(np.float32)
    names = tuple(str(name) for name in learner.get("feature_names") or ()) or tuple(str(i) for i in range(n_features))
    if len(names) != n_features:
        raise ValueError(f"from_xgboost: feature_names must name the {n_features} features; got {len(names)}")
    loss = _LOSSES.get(objective, "")
    if n_outputs > 1 and loss != "MultiClass":
        loss = "MultiRMSE" if objective == "reg:squarederror" else ""
    if loss == "MultiClass" and len(class_names) not in (0, n_outputs):
        class_names = ()
    fields = ModelFields(bias=bias, feature_names=names, nan_modes=("AsIs",) * n_features, loss_function=loss,
                         class_names=class_names)
    codes = _category_codes(model, list(learner.get("feature_types") or ()), n_features)
    return pad_trees(trees, fields, fn_name="from_xgboost", category_codes=codes)
