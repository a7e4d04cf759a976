"""Import LightGBM models (a ``Booster``, an ``LGBMModel`` or a model text file) as :class:`TreeEnsemble`.

One reader: a ``Booster`` is read from its ``model_to_string()``, which is the text of a model
file, so a saved model imports without lightgbm installed. The text holds header lines
``key=value`` (``num_class``, ``num_tree_per_iteration``, ``max_feature_idx``, ``objective``,
``feature_names``; a bare ``average_output`` line for random forests), then one block per tree
after a ``Tree=t`` line, then ``end of trees`` and sections jaximp does not read. A tree block
holds ``num_leaves``, then per internal node (``num_leaves - 1`` numbers) ``split_feature``,
``split_gain``, ``threshold``, ``decision_type``, ``left_child``, ``right_child``,
``internal_count``, and per leaf ``leaf_value`` and ``leaf_count``. A child ``c >= 0`` is internal
node ``c`` and ``c < 0`` is leaf ``~c``, the number ``predict(pred_leaf=True)`` reports; the root
is node 0, and a tree of one leaf has no nodes. Leaf values already include the learning rate
(``shrinkage``) and, in the first trees, the initial score (``boost_from_average``).

Decision rule (``Tree::NumericalDecision``, include/LightGBM/tree.h). ``decision_type`` is a bit
field: bit 0 a categorical split, bit 1 ``default_left``, bits 2-3 the missing type (0 None,
1 Zero, 2 NaN). A row goes left when ``x <= threshold`` in double, except that:

* every value in the *zero band* ``|x| <= kZeroThreshold`` (the float32 ``1e-35f``) reads as 0.0:
  LightGBM's C API passes dense rows on as (column, value) pairs without them
  (``RowPairFunctionFromDenseMatric``, src/c_api.cpp), and absent columns are 0;
* missing type NaN: a NaN goes the default direction;
* missing type None: a NaN reads as 0.0 (so it goes where 0 goes);
* missing type Zero (``zero_as_missing=True``): NaN and 0.0 (the whole zero band) go the
  default direction.

jaximp's rule is "right iff ``x32 > border``, NaN right iff ``nan_right``". Rows arrive as float32,
exact in double, so away from the zero band ``x32 <= threshold`` iff ``x32 <= border`` with
``border`` the largest float32 at or below the threshold. The zero band goes where 0 goes by the
threshold (missing types None, NaN) or the default way (Zero); when it goes left the border is
raised to ``kZeroThreshold`` if below it, when it goes right lowered below ``-kZeroThreshold`` if
above. That is exact unless a float32 outside the band lies between the band and the threshold on
the other side, which only missing type Zero allows (zeros sent against their threshold): then
left and right alternate along the axis (left, right, zero band, right) and no single border (nor
any tree without copied subtrees) expresses the node. Such models are refused, as are linear
trees (``linear_tree=True``).

Categorical splits (``Tree::CategoricalDecision``, LightGBM 4.x): ``threshold`` indexes
``cat_boundaries``, which cut ``cat_threshold`` into each split's bitset of 32-bit words (bit
``c % 32`` of word ``c // 32``); the row's category ``int(x)`` goes left when in the bitset, and
right otherwise: other categories, NaN (whatever the missing type), ``int(x) < 0`` (so ``-0.5``
reads as category 0, ``-1`` goes right). jaximp stores the bitset's complement as the categories
going right, every other value right, and the border ``nextafter(-1, 0)``, the smallest value
whose ``int`` is a category. A ``category`` column of a DataFrame is coded by the training
frame's categories (``pandas_categorical``; see ``jaximp._models.categories``).

Outputs: ``num_tree_per_iteration`` = K trees per iteration, tree ``t`` adds to output ``t % K``;
the raw score (``predict(raw_score=True)``) is the sum of the leaves, or their mean over the
iterations for random forests (``average_output``: scale ``K / T``). Leaf weights are the leaves'
training data counts (``leaf_count``), the covers LightGBM's own TreeSHAP (``pred_contrib``) and
shap's divide by.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import numpy as np

from jaximp._importers.padded import ModelFields, ParsedTree, float32_below, pad_trees
from jaximp._models.categories import CategoryCodes, bitset_members
from jaximp._models.trees import TreeEnsemble

_SMALLEST_CATEGORY = np.nextafter(np.float32(-1.0), np.float32(0.0))  # int(x) >= 0 from here up
_ZERO = np.float32(1e-35)  # LightGBM's kZeroThreshold (include/LightGBM/meta.h): 1e-35f in a double
_BELOW_ZERO_BAND = np.nextafter(-_ZERO, np.float32(-np.inf))  # largest float32 below the zero band
_CATEGORICAL, _DEFAULT_LEFT = 1, 2
_MISSING_NONE, _MISSING_ZERO, _MISSING_NAN = 0, 1, 2
_FN = "from_lightgbm"


def from_lightgbm(model: Any) -> TreeEnsemble:
    """Build a :class:`TreeEnsemble` from a LightGBM model or model text file.

    Args:
        model: a ``lightgbm.Booster``, a fitted ``LGBMRegressor`` / ``LGBMClassifier`` /
            ``LGBMRanker`` (any ``LGBMModel``), or the path of a model text file
            (``Booster.save_model``), which needs no lightgbm installed. A Booster saves (and
            predicts with) its best iteration when it has one, all iterations otherwise; so does
            the import.

    Returns:
        The ensemble: ``leaf_values f32[T, L, K]`` (K = ``num_tree_per_iteration``), leaf weights
        the training data counts, ``node_gains`` LightGBM's ``split_gain``, ``node_weights`` its
        ``internal_count``, ``leaf_ids`` its leaf numbers (``jaximp.leaf_indices`` equals
        ``predict(X, pred_leaf=True)``). ``predict`` equals ``predict(X, raw_score=True)`` on
        float32 rows (for random forests, ``average_output``, the mean of the trees, as
        ``predict(X)`` uses it; LightGBM's ``raw_score=True`` and ``pred_contrib=True`` skip that
        division). ``loss_function`` names CatBoost's loss that scores the raw score as the
        objective does: ``"RMSE"`` (``regression``), ``"MAE"`` (``regression_l1``), ``"Logloss"``
        (``binary``), ``"CrossEntropy"`` (``cross_entropy``), ``"MultiClass"`` (``multiclass``),
        ``"MultiClassOneVsAll"`` (``multiclassova``), else ``""`` (pass ``scoring=``).
        ``class_names`` are an ``LGBMClassifier``'s ``classes_``. Categorical features
        (``categorical_feature=``, or a DataFrame's ``category`` columns) read category codes:
        numbers as they are, a DataFrame's ``category`` columns coded by the training frame's
        categories as LightGBM codes them (an unseen category is missing).

    Raises:
        TypeError: ``model`` is not a LightGBM model or a path.
        ValueError: the file is missing or not a LightGBM model text, the estimator is not
            fitted, or the model has what jaximp does not support: linear trees, or
            ``zero_as_missing`` splits whose zeros go against their threshold (see the module
            docstring).

    Example:
        >>> import lightgbm
        >>> regressor = lightgbm.LGBMRegressor(n_estimators=10, num_leaves=8, verbose=-1).fit(X, y)
        >>> lgb_ens = jaximp.from_lightgbm(regressor)
        >>> lgb_ens
        TreeEnsemble(trees=10, depth=..., features=10, outputs=1, loss='RMSE')
        >>> contribs = regressor.predict(X, pred_contrib=True)
        >>> np.allclose(jaximp.shap_values(lgb_ens, X), contribs[:, :-1], rtol=1e-5, atol=1e-3)
        True
    """
    text, class_names = _model_text(model)
    return tree_ensemble_from_text(text, class_names=class_names)


def _model_text(model: Any) -> tuple[str, tuple]:
    """``(model text, class names)`` of a Booster, an LGBMModel or a model file's path."""
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise ValueError(f"{_FN}: model must be a LightGBM model or an existing model file; got {path!r}")
        try:
            with open(path, encoding="utf-8") as f:
                return f.read(), ()
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"{_FN}: {path!r} is not a readable LightGBM model text file ({e})") from e
    lightgbm = sys.modules.get("lightgbm")  # a LightGBM object means lightgbm is imported already
    if lightgbm is not None and isinstance(model, lightgbm.LGBMModel):
        if not model.__sklearn_is_fitted__():
            raise ValueError(f"{_FN}: model must be fitted; got an unfitted {type(model).__name__}")
        classes = getattr(model, "classes_", None)
        names = () if classes is None else tuple(np.asarray(classes).tolist())
        return model.booster_.model_to_string(), names
    if lightgbm is not None and isinstance(model, lightgbm.Booster):
        return model.model_to_string(), ()
    raise TypeError(f"{_FN}: model must be a lightgbm.Booster, an LGBMModel or the path of a LightGBM "
                    f"model text file; got {type(model).__name__}")


# --------------------------------------------------------------------------------------------
# The text format


def parse_model_text(text: str) -> tuple[dict[str, str], list[dict[str, str]], dict[str, str]]:
    """Split a LightGBM model text into ``(header, trees, trailer)`` of ``key -> value`` strings.

    The header and each tree block are ``key=value`` lines (a line without ``=`` is a flag, value
    ``""``); the trailer holds the ``key:value`` lines after ``end of trees``
    (``pandas_categorical``).

    Raises:
        ValueError: not a LightGBM model text, or one cut short.
    """
    lines = text.splitlines() if isinstance(text, str) else [type(text).__name__]
    if not lines or lines[0].strip() != "tree":
        first = lines[0][:40] if lines else ""
        raise ValueError(f"{_FN}: model must be a LightGBM model text, whose first line is 'tree'; got {first!r}")
    header: dict[str, str] = {}
    trees: list[dict[str, str]] = []
    trailer: dict[str, str] = {}
    block = header
    ended = False
    for line in lines[1:]:
        line = line.strip()
        if ended:
            key, sep, value = line.partition(":")
            if sep and not line.startswith("["):
                trailer[key] = value
            continue
        if line == "end of trees":
            ended = True
        elif line.startswith("Tree="):
            block = {}
            trees.append(block)
        elif line:
            key, _, value = line.partition("=")
            block[key] = value
    if not ended:
        raise ValueError(f"{_FN}: the LightGBM model text is cut short (no 'end of trees' line)")
    return header, trees, trailer


def _numbers(fields: dict[str, str], key: str, count: int, dtype: Any, default: Any = None) -> np.ndarray:
    """``count`` numbers of a tree line; ``default`` (a number) fills a missing line, None: required."""
    if key not in fields:
        if default is None:
            raise ValueError(f"has no {key!r} line")
        return np.full(count, default, dtype)
    values = np.asarray(fields[key].split(), np.float64)
    if values.size != count:
        raise ValueError(f"{key!r} has {values.size} numbers, not {count}")
    return values.astype(dtype)


def node_rules(threshold: np.ndarray, decision_type: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """jaximp's ``(border f32, nan_right bool, expressible bool)`` of numerical LightGBM nodes
    (thresholds ``f64``, ``decision_type`` bit fields; see the module docstring), each shaped as
    ``threshold``."""
    floor = float32_below(threshold)
    default_left = (decision_type & _DEFAULT_LEFT) > 0
    missing = (decision_type >> 2) & 3
    nan_right = np.where(missing == _MISSING_NONE, threshold < 0.0, ~default_left)  # None: NaN reads 0
    band_left = np.where(missing == _MISSING_ZERO, default_left, threshold >= 0.0)  # where 0.0 goes
    border = np.where(band_left, np.maximum(floor, _ZERO), np.minimum(floor, _BELOW_ZERO_BAND))
    # no float32 outside the band lies between the band and the threshold on the other side
    expressible = np.where(band_left, floor >= _BELOW_ZERO_BAND, floor <= _ZERO)
    return border.astype(np.float32), nan_right, expressible


def _parse_tree(fields: dict[str, str], index: int, n_features: int, n_outputs: int) -> ParsedTree:
    """LightGBM tree ``index`` (its block's lines) in jaximp's numbering: internal nodes and leaves
    renumbered as met depth-first, left first; ``leaf_ids`` LightGBM's leaf numbers, leaf weights
    the ``leaf_count`` (None when the text has none), values added to output ``index % K``."""
    n = int(fields["num_leaves"])
    if n < 1:
        raise ValueError(f"num_leaves is {n}")
    if int(fields.get("is_linear", "0") or 0):
        raise _Unsupported(f"model must have constant leaves; got a linear tree (tree {index}, "
                           "linear_tree=True), which jaximp does not support")
    m = n - 1
    values = _numbers(fields, "leaf_value", n, np.float64)
    weights = _numbers(fields, "leaf_count", n, np.float32) if "leaf_count" in fields else None
    decision = _numbers(fields, "decision_type", m, np.int64, 0)
    categorical = (decision & _CATEGORICAL) > 0
    if np.any(((decision >> 2) & 3) > _MISSING_NAN):
        raise ValueError("a decision_type has an unknown missing type")
    features = _numbers(fields, "split_feature", m, np.int64)
    if np.any((features < 0) | (features >= n_features)):
        raise ValueError(f"split_feature names a feature outside 0..{n_features - 1}")
    threshold = _numbers(fields, "threshold", m, np.float64)
    borders, nan_right, expressible = node_rules(threshold, decision)
    right_sets = _right_categories(fields, threshold[categorical])
    borders = np.where(categorical, _SMALLEST_CATEGORY, borders)
    nan_right = nan_right | categorical  # NaN is no category: right
    expressible = expressible | categorical
    if not np.all(expressible):
        node = int(np.flatnonzero(~expressible)[0])
        left_default = bool(decision[node] & _DEFAULT_LEFT)
        side, other, near = ("left", "right", "below") if left_default else ("right", "left", "above")
        raise _Unsupported(
            "model's zero_as_missing splits must send zeros and NaN where their threshold sends the "
            f"values next to zero; got tree {index} node {node} (feature {features[node]}) sending them "
            f"{side} while its threshold {float(threshold[node])!r} sends the values just {near} zero "
            f"{other}, which one border cannot express (retrain with zero_as_missing=False)")
    left = _numbers(fields, "left_child", m, np.int64)
    right = _numbers(fields, "right_child", m, np.int64)
    gains = _numbers(fields, "split_gain", m, np.float32, 0.0)
    counts = _numbers(fields, "internal_count", m, np.float32, 0.0)
    nodes, leaves, depth = _preorder(left, right, n)
    node_new = np.empty(m, np.int64)
    node_new[nodes] = np.arange(m)
    leaf_new = np.empty(n, np.int64)
    leaf_new[leaves] = np.arange(n)

    def renumbered(child: np.ndarray) -> np.ndarray:
        return np.where(child >= 0, node_new[np.maximum(child, 0)], ~leaf_new[np.maximum(~child, 0)])

    ordinal = np.cumsum(categorical) - 1  # each categorical node's entry in right_sets
    right_categories = tuple(right_sets[ordinal[c]] for c in nodes[categorical[nodes]])
    return ParsedTree(
        root=0 if m else -1,
        node_features=features[nodes].astype(np.int32),
        node_borders=borders[nodes],
        node_nan_right=nan_right[nodes],
        node_children=np.stack([renumbered(left[nodes]), renumbered(right[nodes])], -1).astype(np.int32),
        leaf_values=values[leaves],
        depth=depth,
        output=index % n_outputs,
        leaf_weights=None if weights is None else weights[leaves],
        node_gains=gains[nodes],
        node_weights=counts[nodes],
        leaf_ids=leaves.astype(np.int32),
        node_categorical=categorical[nodes],
        right_categories=right_categories,
        others_right=np.ones(len(right_categories), bool),  # other values: right
    )


def _preorder(left: np.ndarray, right: np.ndarray, n_leaves: int) -> tuple[np.ndarray, np.ndarray, int]:
    """``(nodes i64[m], leaves i64[n_leaves], depth)``: LightGBM's internal nodes and leaves in
    depth-first, left-first order (nodes as met, leaves left to right) and the longest path.

    Raises:
        ValueError: the children do not form one binary tree over all nodes and leaves.
    """
    m = len(left)
    node_order, leaf_order, depth = [], [], 0
    stack = [(0 if m else -1, 0)]
    while stack:
        c, level = stack.pop()
        if c < 0:
            if ~c >= n_leaves:
                raise ValueError(f"a child names leaf {~c} of {n_leaves}")
            leaf_order.append(~c)
            depth = max(depth, level)
            continue
        if c >= m:
            raise ValueError(f"a child names node {c} of {m}")
        node_order.append(c)
        stack.append((int(right[c]), level + 1))
        stack.append((int(left[c]), level + 1))
        if len(node_order) > m:
            break
    if sorted(node_order) != list(range(m)) or sorted(leaf_order) != list(range(n_leaves)):
        raise ValueError("left_child/right_child do not form one binary tree over all nodes and leaves")
    return np.asarray(node_order, np.int64), np.asarray(leaf_order, np.int64), depth


def _right_categories(fields: dict[str, str], cat_index: np.ndarray) -> list[np.ndarray]:
    """Per categorical node (its ``threshold``, an index into ``cat_boundaries``),
    ``bool[32 n_words]`` the categories that go right: those not in its bitset of ``n_words``
    32-bit words ``cat_threshold[cat_boundaries[i]:cat_boundaries[i + 1]]`` (bit ``c % 32`` of
    word ``c // 32``), which go left."""
    if not len(cat_index):
        return []
    n_cat = int(fields.get("num_cat", "0") or 0)
    bounds = _numbers(fields, "cat_boundaries", n_cat + 1, np.int64)
    words = _numbers(fields, "cat_threshold", int(bounds[-1]), np.int64).astype(np.uint32)
    index = cat_index.astype(np.int64)
    if np.any((index < 0) | (index >= n_cat)) or np.any(np.diff(bounds) < 0):
        raise ValueError("a categorical split names no bitset of cat_boundaries")
    return [~bitset_members(words[bounds[i]:bounds[i + 1]]) for i in index]


class _Unsupported(Exception):
    """A valid model that uses what jaximp does not support."""


def _loss_function(objective: str) -> str:
    """CatBoost's name of LightGBM's objective where that loss scores the raw score the same way."""
    name, *options = objective.split() or [""]
    sigmoid = [o.partition(":")[2] for o in options if o.startswith("sigmoid:")]
    if name in ("binary", "multiclassova") and sigmoid not in ([], ["1"]):
        return ""  # probabilities sigmoid(sigmoid * raw) with another sigmoid
    if name == "regression" and options:
        return ""  # "regression sqrt" predicts the square of the raw score
    return _LOSSES.get(name, "")


_LOSSES = {"regression": "RMSE", "regression_l1": "MAE", "binary": "Logloss", "cross_entropy": "CrossEntropy",
           "multiclass": "MultiClass", "multiclassova": "MultiClassOneVsAll"}


def tree_ensemble_from_text(text: str, *, class_names: tuple = ()) -> TreeEnsemble:
    """Build a :class:`TreeEnsemble` from a LightGBM model text (``Booster.model_to_string()``
    or a model file's content); see the module docstring and :func:`from_lightgbm`.

    Raises:
        ValueError: not a LightGBM model text, a corrupt one, or one jaximp does not support.
    """
    header, blocks, trailer = parse_model_text(text)
    try:
        n_features = int(header["max_feature_idx"]) + 1
        n_outputs = int(header.get("num_tree_per_iteration", header.get("num_class", "1")))
        names = tuple(header["feature_names"].split()) if "feature_names" in header else tuple(
            f"Column_{i}" for i in range(n_features))
        if len(names) != n_features:
            raise ValueError(f"feature_names has {len(names)} names, not max_feature_idx + 1 = {n_features}")
        if not blocks or len(blocks) % n_outputs:
            raise ValueError(f"{len(blocks)} trees are not a whole number of iterations of {n_outputs} trees")
        frame_categories = _pandas_categorical(trailer.get("pandas_categorical", "null"))
        trees = []
        for t, fields in enumerate(blocks):
            try:
                trees.append(_parse_tree(fields, t, n_features, n_outputs))
            except KeyError as e:
                raise ValueError(f"tree {t} has no {e} line") from e
            except ValueError as e:
                raise ValueError(f"tree {t}: {e}") from e
    except _Unsupported as e:
        raise ValueError(f"{_FN}: {e}") from e
    except KeyError as e:
        raise ValueError(f"{_FN}: the LightGBM model text is corrupt (its header has no {e} line)") from e
    except ValueError as e:
        raise ValueError(f"{_FN}: the LightGBM model text is corrupt ({e})") from e
    return _ensemble(header, trees, n_outputs, names, class_names, frame_categories)


def _pandas_categorical(text: str) -> tuple[tuple, ...] | None:
    """The training frame's categories per ``category`` column (the trailer's JSON list), or None."""
    try:
        lists = json.loads(text.strip() or "null")
    except ValueError as e:
        raise ValueError(f"pandas_categorical is not JSON ({e})") from e
    if lists is None:
        return None
    if not isinstance(lists, list) or not all(isinstance(c, list) for c in lists):
        raise ValueError("pandas_categorical must be a list of category lists")
    return tuple(tuple(c) for c in lists)


def _ensemble(header: dict[str, str], trees: list[ParsedTree], n_outputs: int, names: tuple[str, ...],
              class_names: tuple, frame_categories: tuple | None) -> TreeEnsemble:
    n_features = len(names)
    codes = None
    if frame_categories or any(tree.right_categories for tree in trees):
        codes = CategoryCodes("LightGBM", (None,) * n_features, frame_categories=frame_categories or ())
    fields = ModelFields(
        bias=np.zeros(n_outputs),  # the initial score is in the first trees' leaves
        feature_names=names,
        nan_modes=("AsIs",) * n_features,  # informative only: each node carries its NaN direction
        loss_function=_loss_function(header.get("objective", "")),
        scale=n_outputs / len(trees) if "average_output" in header else 1.0,  # rf: mean over iterations
        class_names=tuple(class_names),
    )
    # a model of single leaves: one no-op level
    return pad_trees(trees, fields, fn_name=_FN, min_depth=1, category_codes=codes)
