"""Import XGBoost tree models (``gbtree`` and ``dart`` boosters) as :class:`TreeEnsemble`.

One parser reads XGBoost's JSON model document, whatever the model came as: a ``Booster`` or a
scikit-learn ``XGBModel`` (``save_raw("json")``), a ``.json`` file (the standard library's
``json``) or a ``.ubj`` file (``jaximp._importers.ubjson``, the same document in binary), so a
model file imports without XGBoost installed. The parts read (XGBoost 1.x to 3.x):

* ``learner.gradient_booster``: ``{"name": "gbtree", "model": model}`` or ``{"name": "dart",
  "gbtree": {"model": model}, "weight_drop": [T]}`` (dart scales tree ``t``'s output by
  ``weight_drop[t]`` when it predicts, and so in ``pred_contribs``); ``gblinear`` (no trees) is
  refused.
* ``model.trees[t]``: one tree (``jaximp._importers.xgboost_trees``: its fields, scalar and
  vector leaves). ``model.cats`` (XGBoost >= 3.1): the training frame's categories of each
  categorical feature, which code a DataFrame's ``category`` columns
  (``jaximp._models.categories``). ``model.tree_info[t]``: the output (class, target) tree ``t``
  adds to (vector-leaf trees add to all); ``model.iteration_indptr``: the trees of each
  boosting round.
* ``learner.learner_model_param``: ``base_score`` (one value, ``"5E-1"``, or one per output,
  ``"[v0,v1]"`` since 3.0), ``num_class``, ``num_target``, ``num_feature``; ``learner.objective.name``,
  ``learner.feature_names``, ``learner.feature_types``.

Decisions: XGBoost sends a row left when ``x < split_condition`` in float32 and a missing value
to ``default_left``. So a row goes right when ``x >= c``, exactly when ``x > c'`` with
``c' = nextafter(c, -inf)`` in float32: the border jaximp stores. A categorical split reads the
category ``trunc(x)`` and sends the listed categories right, everything else left: other
categories, negative values, values at or past ``2**24`` (``common::Decision``,
src/common/categorical.h); jaximp stores border 0 (the smallest category) and the listed
categories as the node's bitset, every other value left.

Missing values: a value is missing when it is NaN or equals the ``missing`` value the rows were
given to XGBoost with (``DMatrix(X, missing=...)``; an ``XGBModel``'s ``missing`` parameter, which
its ``predict`` passes on). ``missing`` belongs to the data, not the model: a saved model file
or a ``Booster`` does not carry it (``save_model`` stores no ``missing``), so
:func:`from_xgboost` reads it from an ``XGBModel`` and takes it as an argument otherwise. The
ensemble holds it as ``missing_value``: rows equal to it (in float32) read as NaN.

Bias: ``base_score`` is stored on the prediction scale, and the margin adds the objective's
inverse link of it (checked by experiment against ``predict(output_margin=True)`` for every
built-in objective, XGBoost 3.2): logit for ``binary:logistic`` and ``reg:logistic``, log for
``count:poisson``, ``reg:gamma``, ``reg:tweedie``, ``survival:cox`` and ``survival:aft``, the
value itself for the others (``multi:softprob`` stores margins, one per class).

Leaves are numbered depth-first, left to right, with ``leaf_ids`` holding their XGBoost node ids
(``predict(pred_leaf=True)``); leaf weights and node weights are ``sum_hessian``, the cover that
XGBoost's own TreeSHAP (``pred_contribs``) and ``get_score(importance_type="cover")`` use, and
node gains ``loss_changes`` (``get_score``'s gain).

A model file is untrusted input: every declared size (``num_feature``, ``num_class``,
``num_target``, a tree's ``num_nodes``, ``iteration_indptr``, ``tree_info``, category ids) is
checked against the document's real content before anything is allocated, the padded layout
against a memory budget (``jaximp._importers.padded``), and every failure is a ``ValueError``
starting ``from_xgboost:``.
"""

from __future__ import annotations

import json
import math
import os
import sys
from typing import Any

import numpy as np

from jaximp._importers.padded import MAX_FEATURES, ModelFields, ParsedTree, pad_trees
from jaximp._importers.paths import existing_file
from jaximp._importers.ubjson import loads
from jaximp._importers.xgboost_trees import FN, TreeContext, array, corrupt, float32s, integer, parse_tree
from jaximp._models.categories import CategoryCodes
from jaximp._models.trees import TreeEnsemble

_LOGIT = ("binary:logistic", "reg:logistic")
_LOG = ("count:poisson", "reg:gamma", "reg:tweedie", "survival:cox", "survival:aft")
_LOSSES = {  # XGBoost objective -> the CatBoost loss of the same definition on the margin
    "reg:squarederror": "RMSE", "binary:logistic": "Logloss", "binary:logitraw": "Logloss",
    "reg:logistic": "CrossEntropy", "multi:softprob": "MultiClass", "multi:softmax": "MultiClass",
    "reg:absoluteerror": "MAE",
}
_INTERNAL_ERRORS = (KeyError, IndexError, TypeError, AttributeError, OverflowError, ZeroDivisionError,
                    RecursionError, ValueError)


def from_xgboost(model: Any, *, iteration_range: tuple[int, int] | None = None,
                 missing: float | None = None) -> TreeEnsemble:
    """Import an XGBoost tree model (``gbtree`` or ``dart`` booster) as a [`TreeEnsemble`][jaximp.TreeEnsemble].

    The numbers equal XGBoost's own: ``jaximp.predict`` its ``predict(X, output_margin=True)``,
    ``jaximp.leaf_indices`` its ``predict(X, pred_leaf=True)``, ``jaximp.shap_values`` and
    ``jaximp.expected_value`` its ``predict(X, pred_contribs=True)`` (the expected value is its
    last, bias column), ``jaximp.shap_interaction_values`` its ``pred_interactions=True``, and
    ``jaximp.split_importance`` its ``Booster.get_score(importance_type=...)``. Model files are
    read without XGBoost installed.

    K is ``num_class`` for multiclass models, the number of targets for multi-output ones, and 1
    otherwise. Trees with vector leaves (``multi_strategy="multi_output_tree"``) are supported; XGBoost
    computes no SHAP values for them, and jaximp's are those of the same trees split into one
    tree per output. Categorical features (``enable_categorical=True``) read category codes:
    numbers as they are, a DataFrame's ``category`` columns coded by the training categories the
    model stores, as XGBoost codes them (a category unseen in training is refused). Nameless
    features are named ``"0".."F-1"`` (``get_score`` calls them ``"f0".."f{F-1}"``).

    Args:
        model: an ``xgboost.Booster``; a fitted ``XGBModel`` (``XGBRegressor``,
            ``XGBClassifier``, ``XGBRanker``, ...); the path of a model file saved as JSON
            (``save_model("m.json")``) or UBJSON (``"m.ubj"``); the bytes of
            ``Booster.save_raw("json")`` or ``save_raw("ubj")``; or the parsed JSON document (a
            dict).
        iteration_range: ``(begin, end)`` boosting rounds to import, as ``predict``'s
            ``iteration_range`` (end 0: to the last). None: the rounds ``predict`` uses by
            default: every round for a Booster or a file, up to ``best_iteration`` for an
            ``XGBModel`` fitted with early stopping.
        missing: the value that marks a missing entry in the rows, besides NaN, as XGBoost's
            ``DMatrix(X, missing=...)`` (compared in float32). None: an ``XGBModel``'s own
            ``missing`` parameter (``get_params()["missing"]``, what its ``predict`` uses);
            NaN alone for a Booster, a file, bytes or a document, which do not store it: pass
            the value the model was trained and is used with (``missing=-999``).

    Returns:
        TreeEnsemble: the ensemble, with ``leaf_values f32[T, L, K]``; its ``loss_function`` is
            ``"RMSE"``, ``"Logloss"``, ``"CrossEntropy"``, ``"MultiClass"``, ``"MultiRMSE"`` or
            ``"MAE"`` where the objective is that loss, else ``""`` (give permutation importance a
            ``scoring=``); its ``class_names`` an ``XGBClassifier``'s ``classes_``.

    Raises:
        TypeError: ``model`` is none of the above.
        ValueError: a missing or unreadable file, not an XGBoost model, a ``gblinear`` booster
            (a linear model: no trees), a corrupt model (a declared size the content does not
            have, a child id outside its tree, a cycle, a leaf value beyond float32, ...), a
            model that would need more memory than jaximp allows (the environment variable
            ``JAXIMP_MAX_PADDED_BYTES`` raises the limit), a bad ``iteration_range`` or
            ``missing``, an empty iteration range, or an unfitted model.

    Examples:
        >>> import xgboost
        >>> regressor = xgboost.XGBRegressor(n_estimators=10, max_depth=3).fit(X, y)
        >>> xgb_ens = jaximp.from_xgboost(regressor)
        >>> xgb_ens
        TreeEnsemble(trees=10, depth=3, features=10, outputs=1, loss='RMSE')
        >>> contribs = regressor.get_booster().predict(xgboost.DMatrix(X), pred_contribs=True)
        >>> np.allclose(jaximp.shap_values(xgb_ens, X), contribs[:, :-1], rtol=1e-5, atol=1e-3)
        True
    """
    model_json, class_names, default_range, model_missing = _load(model)
    if iteration_range is not None:
        if (not isinstance(iteration_range, (tuple, list)) or len(iteration_range) != 2
                or not all(isinstance(i, (int, np.integer)) and i >= 0 for i in iteration_range)):
            raise ValueError("from_xgboost: iteration_range must be None or (begin, end), two "
                             f"non-negative integers; got {iteration_range!r}")
        default_range = (int(iteration_range[0]), int(iteration_range[1]))
    return tree_ensemble_from_xgboost_json(model_json, class_names=class_names, iteration_range=default_range,
                                           missing=_missing_value(model_missing if missing is None else missing))


def _missing_value(missing: Any) -> float | None:
    """The float32 value of ``missing`` as XGBoost compares it, None for NaN (NaN alone)."""
    if missing is None:
        return None
    if isinstance(missing, (bool, np.bool_)) or not isinstance(missing, (int, float, np.integer, np.floating)):
        raise ValueError(f"from_xgboost: missing must be a number (the value that marks missing entries, "
                         f"as DMatrix(missing=...)) or None; got {missing!r}")
    with np.errstate(over="ignore"):  # beyond float32: +-inf, as XGBoost's float missing
        value = float(np.float32(missing))
    return None if math.isnan(value) else value


# --------------------------------------------------------------------------------------------
# Reading the model document


def _load(model: Any) -> tuple[dict, tuple, tuple[int, int], Any]:
    """``(JSON document, class names, default iteration range, missing)`` of anything
    ``from_xgboost`` takes (``missing``: an ``XGBModel``'s own, else None)."""
    if isinstance(model, dict):
        return model, (), (0, 0), None
    if isinstance(model, (bytes, bytearray, memoryview)):
        return _parse(bytes(model), "the model bytes"), (), (0, 0), None
    if isinstance(model, (str, os.PathLike)):
        path = existing_file(model, "from_xgboost: model", "an XGBoost model or an existing model file (.json or .ubj)")
        with open(path, "rb") as f:
            return _parse(f.read(), repr(path)), (), (0, 0), None
    xgboost = sys.modules.get("xgboost")  # imported wherever an XGBoost object exists
    if xgboost is not None and isinstance(model, xgboost.Booster):
        return _booster_json(model), (), (0, 0), None
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
        return _booster_json(booster), names, default, model.get_params().get("missing")
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
    except RecursionError:
        raise ValueError(f"from_xgboost: {where} is not a readable XGBoost model (nested deeper than "
                         "Python's JSON reader goes; XGBoost's files are 6 levels deep)") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"from_xgboost: {where} is not a readable XGBoost JSON or UBJSON model ({e})") from e
    raise ValueError(f"from_xgboost: {where} must be an XGBoost model saved as JSON or UBJSON "
                     "(save_model('model.json') or 'model.ubj'); XGBoost's old binary format is "
                     "not read: load it with XGBoost and save it again as JSON")


# --------------------------------------------------------------------------------------------
# The document -> TreeEnsemble


def tree_ensemble_from_xgboost_json(model_json: dict, *, class_names: tuple = (),
                                    iteration_range: tuple[int, int] = (0, 0),
                                    missing: float | None = None) -> TreeEnsemble:
    """Build a :class:`TreeEnsemble` from XGBoost's parsed JSON (or UBJSON) model document.

    Args:
        model_json: the document (see the module docstring).
        class_names: the classes of a classifier, if known.
        iteration_range: ``(begin, end)`` boosting rounds (end 0: to the last).
        missing: the float32 value that marks missing entries besides NaN, or None.

    Returns:
        The ensemble (see :func:`from_xgboost`).

    Raises:
        ValueError: not an XGBoost model, or one jaximp does not import (see :func:`from_xgboost`).
    """
    if not isinstance(model_json, dict) or not isinstance(model_json.get("learner"), dict):
        raise ValueError("from_xgboost: the document is not an XGBoost model (no \"learner\")")
    booster = model_json["learner"].get("gradient_booster", {})
    name = booster.get("name") if isinstance(booster, dict) else None
    if name == "gblinear":
        raise ValueError("from_xgboost: model must use a tree booster (gbtree or dart); got booster 'gblinear', "
                         "a linear model, which has no trees: its importances are its coefficients "
                         "(Booster.get_score / XGBModel.coef_)")
    if name not in ("gbtree", "dart"):
        raise ValueError(f"from_xgboost: model must use a tree booster (gbtree or dart); got booster {name!r}")
    try:
        return _build(model_json, booster, tuple(class_names), iteration_range, missing)
    except _INTERNAL_ERRORS as e:
        if isinstance(e, ValueError) and str(e).startswith(f"{FN}:"):
            raise
        raise corrupt(f"{type(e).__name__}: {e}") from e


def _numbers(text: Any, what: str) -> np.ndarray:
    """``f64[n]`` of a ``base_score``: ``"5E-1"`` (before 3.0) or ``"[5E-1,2E-1]"``."""
    if isinstance(text, str):
        try:
            return np.asarray([float(v) for v in text.strip("[] ").split(",") if v.strip()], np.float64)
        except ValueError:
            raise corrupt(f"{what} must be numbers; got {text[:60]!r}") from None
    return array([text] if np.ndim(text) == 0 else text, what, "float")


def _margin(base_score: np.ndarray, objective: str) -> np.ndarray:
    """The margin of ``base_score`` (stored on the prediction scale): the objective's inverse link."""
    with np.errstate(divide="ignore", invalid="ignore"):  # outside the link's domain: refused by the caller
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
    indptr = array(indptr, "iteration_indptr", "int")
    if indptr[0] != 0 or indptr[-1] != n_trees or np.any(np.diff(indptr) < 0):
        raise corrupt(f"iteration_indptr must rise from 0 to the {n_trees} trees; got {indptr.tolist()[:8]}...")
    n_rounds = len(indptr) - 1
    begin, end = iteration_range
    end = n_rounds if end == 0 else end
    if not 0 <= begin < end <= n_rounds:
        raise ValueError(f"from_xgboost: iteration_range must be within the model's {n_rounds} "
                         f"boosting rounds, begin < end; got {iteration_range!r}")
    return range(int(indptr[begin]), int(indptr[end]))


def _category_codes(model: dict, feature_types: list, n_features: int) -> CategoryCodes | None:
    """The :class:`CategoryCodes` of a model with categorical features (``feature_types`` "c"),
    from the training categories it stores (``cats``, XGBoost >= 3.1), else None."""
    encodings = model.get("cats", {}).get("enc", [])
    if not isinstance(encodings, list):
        raise corrupt("cats.enc must be a list")
    columns: list = [None] * n_features
    for j, enc in enumerate(encodings[:n_features]):
        if not isinstance(enc, dict):
            raise corrupt(f"cats.enc[{j}] must be an object")
        values = enc.get("values", [])
        if len(values) == 0:
            continue
        if "offsets" in enc:  # strings: UTF-8 bytes cut at the offsets
            raw = array(values, f"cats.enc[{j}].values", "int")
            bounds = array(enc["offsets"], f"cats.enc[{j}].offsets", "int")
            if (np.any((raw < 0) | (raw > 255)) or len(bounds) < 1 or bounds[0] != 0 or bounds[-1] != len(raw)
                    or np.any(np.diff(bounds) < 0)):
                raise corrupt(f"cats.enc[{j}] must cut its UTF-8 bytes at rising offsets")
            text = raw.astype(np.uint8).tobytes()
            columns[j] = tuple(text[a:b].decode("utf-8", "replace") for a, b in zip(bounds[:-1], bounds[1:]))
        else:
            columns[j] = tuple(array(values, f"cats.enc[{j}].values", "float").tolist())
    if "c" not in feature_types and all(c is None for c in columns):
        return None
    return CategoryCodes("XGBoost", tuple(columns), unseen="error")


def _build(model_json: dict, booster: dict, class_names: tuple, iteration_range: tuple[int, int],
           missing: float | None) -> TreeEnsemble:
    learner = model_json["learner"]
    model = booster["gbtree"]["model"] if booster["name"] == "dart" else booster["model"]
    param = learner["learner_model_param"]
    objective = learner.get("objective", {}).get("name", "")
    if not isinstance(objective, str):
        raise corrupt("objective.name must be a string")
    all_trees = model["trees"]
    if not isinstance(all_trees, list):
        raise corrupt("trees must be a list")
    if not all_trees:
        raise ValueError("from_xgboost: the model has no trees (trained for 0 rounds)")
    n_all = len(all_trees)
    all_trees = _by_id(all_trees)
    declared = model.get("gbtree_model_param", {})
    if "num_trees" in declared and integer(declared["num_trees"], "num_trees") != n_all:
        raise corrupt(f"gbtree_model_param declares num_trees = {declared['num_trees']} but the model has {n_all}")
    n_features = integer(param["num_feature"], "num_feature", 1, MAX_FEATURES)
    vector = _vector_size(all_trees[0])
    most = n_all if vector == 1 else vector  # every output has a tree of its own, or a value in every leaf
    n_class = integer(param.get("num_class", "0"), "num_class", 0, most)
    n_target = integer(param.get("num_target", "1"), "num_target", 0, most) or 1
    n_outputs = max(n_class, n_target, 1)
    tree_info = array(model["tree_info"], "tree_info", "int")
    if len(tree_info) != n_all or np.any((tree_info < 0) | (tree_info >= n_outputs)):
        raise corrupt(f"tree_info must name an output below {n_outputs} for each of the {n_all} trees")
    n_parallel = integer(declared.get("num_parallel_tree", "1"), "num_parallel_tree", 0) or 1
    chosen = _tree_range(model, n_all, n_parallel * (1 if vector > 1 else n_outputs), iteration_range)
    drop = (float32s(array(booster["weight_drop"], "weight_drop", "float"), "weight_drop")
            if "weight_drop" in booster else np.ones(n_all, np.float32))
    if len(drop) != n_all:
        raise corrupt(f"weight_drop has {len(drop)} entries for {n_all} trees")
    trees: list[ParsedTree] = []
    category_bytes = 0
    for t in chosen:
        context = TreeContext(t, int(tree_info[t]), n_outputs, n_features, drop[t])
        trees.append(parse_tree(all_trees[t], context, category_bytes))
        category_bytes += sum(len(mask) for mask in trees[-1].right_categories)

    loss = _LOSSES.get(objective, "")
    if n_outputs > 1 and loss != "MultiClass":
        loss = "MultiRMSE" if objective == "reg:squarederror" else ""
    if loss == "MultiClass" and len(class_names) not in (0, n_outputs):
        class_names = ()
    fields = ModelFields(bias=_bias(param, objective, n_outputs), feature_names=_feature_names(learner, n_features),
                         nan_modes=("AsIs",) * n_features, loss_function=loss, class_names=class_names,
                         missing_value=missing)
    types = learner.get("feature_types") or []
    codes = _category_codes(model, list(types) if isinstance(types, list) else [], n_features)
    return pad_trees(trees, fields, fn_name=FN, category_codes=codes)


def _bias(param: dict, objective: str, n_outputs: int) -> np.ndarray:
    """``f32[K]`` the margin of ``base_score`` (one value, or one per output)."""
    base = _numbers(param.get("base_score", "0.5"), "base_score")
    if base.size not in (1, n_outputs):
        raise corrupt(f"base_score must hold 1 or {n_outputs} values; got {base.size}")
    bias = np.broadcast_to(_margin(base, objective), (n_outputs,))
    if not np.all(np.isfinite(bias) & (np.abs(bias) <= np.finfo(np.float32).max)):
        raise corrupt(f"base_score {base.tolist()} has no finite float32 margin under the objective {objective!r}")
    return bias.astype(np.float32)


def _by_id(trees: list) -> list:
    """The trees in the order of their ``id`` (XGBoost puts each tree at its ``id``,
    ``GBTreeModel::LoadModel``), which must number them 0 to T-1 once each; as listed when no
    tree has one."""
    if not any(isinstance(tree, dict) and "id" in tree for tree in trees):
        return trees
    ids = []
    for t, tree in enumerate(trees):
        if not isinstance(tree, dict):
            raise corrupt(f"tree {t} must be an object; got {type(tree).__name__}")
        ids.append(integer(tree.get("id"), f"tree {t}'s id", 0, len(trees) - 1))
    if len(set(ids)) != len(trees):
        raise corrupt(f"the tree ids must number the {len(trees)} trees 0 to {len(trees) - 1} once each")
    ordered = [None] * len(trees)
    for tree, i in zip(trees, ids):
        ordered[i] = tree
    return ordered


def _vector_size(tree: Any) -> int:
    """The ``size_leaf_vector`` of a tree (1: scalar leaves), read before the trees are parsed."""
    param = tree.get("tree_param", {}) if isinstance(tree, dict) else {}
    if not isinstance(param, dict):
        return 1  # refused when the tree is parsed
    return integer(param.get("size_leaf_vector", "1"), "size_leaf_vector", 0, 1 << 31) or 1


def _feature_names(learner: dict, n_features: int) -> tuple[str, ...]:
    """The F feature names (``"0".."F-1"`` when the model has none)."""
    given = learner.get("feature_names") or ()
    if not isinstance(given, (list, tuple)) or not all(isinstance(name, str) for name in given):
        raise corrupt("feature_names must be a list of strings")
    if given and len(given) != n_features:
        raise ValueError(f"from_xgboost: feature_names must name the {n_features} features; got {len(given)}")
    return tuple(given) or tuple(str(i) for i in range(n_features))
