"""Import LightGBM models (a ``Booster``, an ``LGBMModel`` or a model text file) as :class:`TreeEnsemble`.

One reader: a ``Booster`` is read from its ``model_to_string()``, which is the text of a model
file, so a saved model imports without lightgbm installed (the text and its checks:
``jaximp._importers.lightgbm_text``). Leaf values already include the learning rate
(``shrinkage``) and, in the first trees, the initial score (``boost_from_average``).

Decision rule (``Tree::NumericalDecision``, include/LightGBM/tree.h). ``decision_type`` is a bit
field: bit 0 a categorical split, bit 1 ``default_left``, bits 2-3 the missing type (0 None,
1 Zero, 2 NaN). A row goes left when ``x <= threshold``, both doubles, except that:

* every value in the *zero band* ``|x| <= kZeroThreshold`` (the float32 ``1e-35f``) reads as 0.0:
  LightGBM's C API passes dense rows on as (column, value) pairs without them
  (``RowPairFunctionFromDenseMatric``, src/c_api.cpp), and absent columns are 0;
* missing type NaN: a NaN goes the default direction;
* missing type None: a NaN reads as 0.0 (so it goes where 0 goes);
* missing type Zero (``zero_as_missing=True``): NaN and 0.0 (the whole zero band) go the
  default direction.

jaximp's rule is "right iff ``x32 > border``, NaN right iff ``nan_right``", and the model carries
each column's float64 thresholds (``ens.value_thresholds``, ``jaximp._models.thresholds``) so
that rows are compared as LightGBM compares them, float64 rows included. A float32 value is exact
in double, so ``x32 <= threshold`` iff ``x32 <= border`` with ``border`` the largest float32 at or
below the threshold. The zero band goes where 0 goes by the threshold (missing types None, NaN):
when it goes left the border is raised to ``kZeroThreshold`` if below it, when it goes right
lowered below ``-kZeroThreshold`` if above. In a column with missing type Zero the rows' zero band
reads as NaN, and every node of the column sends NaN its default way (a node of missing type
None sends NaN where 0 goes, which is the same). A column two of whose thresholds share a border
(closer than float32 resolution: float64 training data) is held in bins: its nodes' borders are
their thresholds' positions among the column's, and the rows the number of thresholds below each
value. Rows read in float64 (float64 arrays, DataFrames with a float64 or int64 column, as
LightGBM reads them) are brought to float32 values that decide exactly as the doubles do
(``jaximp._rows.thresholds``).

Categorical splits (``Tree::CategoricalDecision``, LightGBM 4.x): ``threshold`` indexes
``cat_boundaries``, which cut ``cat_threshold`` into each split's bitset of 32-bit words (bit
``c % 32`` of word ``c // 32``); the row's category ``int(x)`` goes left when in the bitset, and
right otherwise: other categories, NaN (whatever the missing type), ``int(x) < 0`` (so ``-0.5``
reads as category 0, ``-1`` goes right). jaximp stores the bitset's complement as the categories
going right, every other value right, and the border ``nextafter(-1, 0)``, the smallest value
whose ``int`` is a category. A ``category`` column of a DataFrame is coded by the training
frame's categories (``pandas_categorical``; see ``jaximp._models.categories``).

Feature names: LightGBM replaces spaces in names with underscores; a DataFrame's column matches a
model's feature when its name does, or when its name with spaces replaced does.

Outputs: ``num_tree_per_iteration`` = K trees per iteration, tree ``t`` adds to output ``t % K``;
the raw score (``predict(raw_score=True)``) is the sum of the leaves, or their mean over the
iterations for random forests (``average_output``: scale ``K / T``). Leaf weights are the leaves'
training data counts (``leaf_count``), the covers LightGBM's own TreeSHAP (``pred_contrib``) and
shap's divide by. Linear trees (``linear_tree=True``) are refused: their leaves are functions of
the features (LightGBM's ``pred_contrib`` refuses them too).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

import numpy as np

from jaximp._importers.lightgbm_text import (
    CATEGORICAL,
    DEFAULT_LEFT,
    MISSING_NAN,
    MISSING_NONE,
    MISSING_ZERO,
    TextTree,
    Unsupported,
    integer,
    numbers,
    pandas_categorical,
    parse_model_text,
    read_tree,
    right_categories,
)
from jaximp._importers.padded import ModelFields, ParsedTree, float32_below, pad_trees
from jaximp._importers.paths import existing_file
from jaximp._models.categories import CategoryCodes
from jaximp._models.thresholds import ZERO_BAND, ValueThresholds, value_thresholds
from jaximp._models.trees import TreeEnsemble

_SMALLEST_CATEGORY = np.nextafter(np.float32(-1.0), np.float32(0.0))  # int(x) >= 0 from here up
_ZERO = np.float32(ZERO_BAND)  # LightGBM's kZeroThreshold (include/LightGBM/meta.h): 1e-35f in a double
_BELOW_ZERO_BAND = np.nextafter(-_ZERO, np.float32(-np.inf))  # largest float32 below the zero band
_MAX_BINS = 1 << 24  # thresholds of one column held in bins: positions exact in float32
_FN = "from_lightgbm"


def from_lightgbm(model: Any) -> TreeEnsemble:
    """Import a LightGBM model, or a LightGBM model text file, as a [`TreeEnsemble`][jaximp.TreeEnsemble].

    The numbers equal LightGBM's own: ``jaximp.predict`` its ``predict(X, raw_score=True)``
    (rows compared with the thresholds as LightGBM compares them, float32 and float64 rows
    alike; ``zero_as_missing`` models included), ``jaximp.leaf_indices`` its
    ``predict(X, pred_leaf=True)``, ``jaximp.shap_values`` and ``jaximp.expected_value`` its
    ``predict(X, pred_contrib=True)`` (the expected value is the last column of each output),
    and ``jaximp.split_importance(ens, "split")`` / ``"gain"`` its
    ``Booster.feature_importance("split")`` / ``("gain")``. A random forest
    (``boosting="rf"``) predicts the mean of its trees, as LightGBM's ``predict(X)`` does
    (LightGBM's ``raw_score=True`` and ``pred_contrib=True`` leave that division out).

    Categorical features (``categorical_feature=``, or a DataFrame's ``category`` columns) read
    category codes: numbers as they are, a DataFrame's ``category`` columns coded by the
    training frame's categories as LightGBM codes them (an unseen category is missing).

    Args:
        model: a ``lightgbm.Booster``, a fitted ``LGBMRegressor`` / ``LGBMClassifier`` /
            ``LGBMRanker`` (any ``LGBMModel``), or the path of a model text file
            (``Booster.save_model``), which needs no lightgbm installed. A Booster saves (and
            predicts with) its best iteration when it has one, all iterations otherwise; so does
            the import.

    Returns:
        TreeEnsemble: the ensemble, with ``leaf_values f32[T, L, K]`` (K =
            ``num_tree_per_iteration``: the classes of a multiclass model, else 1). Its
            ``loss_function`` names the CatBoost loss that scores raw predictions as the objective
            does: ``"RMSE"`` (``regression``), ``"MAE"`` (``regression_l1``), ``"Logloss"``
            (``binary``), ``"CrossEntropy"`` (``cross_entropy``), ``"MultiClass"`` (``multiclass``),
            ``"MultiClassOneVsAll"`` (``multiclassova``), else ``""`` (give permutation importance a
            ``scoring=``); its ``class_names`` are an ``LGBMClassifier``'s ``classes_``.

    Raises:
        TypeError: ``model`` is not a LightGBM model or a path.
        ValueError: the file is missing, not a LightGBM model text or a corrupt one (a size, an
            index or a number that the rest of the text contradicts), the estimator is not
            fitted, or the model has linear trees (``linear_tree=True``), which jaximp does not
            support.

    Examples:
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
        path = existing_file(model, f"{_FN}: model", "a LightGBM model or an existing model file (.txt)")
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
# Thresholds, borders and NaN directions


def _value_thresholds(trees: list[TextTree], n_features: int) -> ValueThresholds:
    """Each column's sorted distinct thresholds, their value-mode borders, whether the column is
    held in bins, whether its zero band is missing, whether it is categorical (see the module
    docstring).

    Raises:
        ValueError: a column split both as a category and as a number, or one whose zeros some
            split reads as missing and another (of missing type NaN) sends against its default.
    """
    features = np.concatenate([tree.features for tree in trees] or [np.zeros(0, np.int64)])
    thresholds = np.concatenate([tree.thresholds for tree in trees] or [np.zeros(0)])
    decision = np.concatenate([tree.decision for tree in trees] or [np.zeros(0, np.int64)])
    categorical_node = (decision & CATEGORICAL) > 0
    missing = (decision >> 2) & 3
    default_left = (decision & DEFAULT_LEFT) > 0
    categorical = np.zeros(n_features, bool)
    categorical[features[categorical_node]] = True
    numeric = ~categorical_node
    mixed = np.intersect1d(features[categorical_node], features[numeric])
    if len(mixed):
        raise ValueError(f"feature {int(mixed[0])} is split both as a category and as a number")
    zero_missing = np.zeros(n_features, bool)
    zero_missing[features[numeric & (missing == MISSING_ZERO)]] = True
    # a NaN-type node of such a column must send zeros (now NaN) where its threshold sends 0
    against = numeric & zero_missing[features] & (missing == MISSING_NAN) & (default_left != (thresholds >= 0.0))
    if np.any(against):
        j = int(features[np.flatnonzero(against)[0]])
        raise ValueError(f"feature {j}'s splits read zeros as missing (zero_as_missing) and, at another split, "
                         "as a number on the other side of its default; one model cannot hold both")
    order = np.lexsort((thresholds[numeric], features[numeric]))
    f_sorted, t_sorted = features[numeric][order], thresholds[numeric][order]
    columns = []
    for j in range(n_features):
        lo, hi = np.searchsorted(f_sorted, [j, j + 1])
        t = np.unique(t_sorted[lo:hi])
        with np.errstate(over="ignore"):  # thresholds past float32: borders at its largest value or -inf
            floor = float32_below(t)
        borders = floor if zero_missing[j] else np.where(
            t >= 0.0, np.maximum(floor, _ZERO), np.minimum(floor, _BELOW_ZERO_BAND)).astype(np.float32)
        binned = bool(np.any(np.diff(borders) <= 0))
        if binned and len(t) > _MAX_BINS:
            raise ValueError(f"feature {j} has {len(t)} thresholds closer than float32 resolution, more than "
                             f"jaximp holds in bins ({_MAX_BINS})")
        columns.append((t, floor if binned else borders, binned))
    return value_thresholds("LightGBM", columns, list(zero_missing), list(categorical), ZERO_BAND)


def _node_rules(tree: TextTree, table: ValueThresholds) -> tuple[np.ndarray, np.ndarray]:
    """``(border f32[m], nan_right bool[m])`` of a tree's nodes in LightGBM's numbering: a
    numerical node's border from its column's thresholds (value mode: the threshold's border;
    bins: its position), NaN right where LightGBM sends it right; categorical nodes read codes
    from ``nextafter(-1, 0)`` up and send NaN right."""
    borders = np.full(len(tree.features), _SMALLEST_CATEGORY, np.float32)
    for i in np.flatnonzero(~tree.categorical):
        j = int(tree.features[i])
        thresholds, column_borders = table.column(j)
        k = int(np.searchsorted(thresholds, tree.thresholds[i]))
        borders[i] = np.float32(k) if table.binned[j] else column_borders[k]
    missing = (tree.decision >> 2) & 3
    default_left = (tree.decision & DEFAULT_LEFT) > 0
    nan_right = np.where(missing == MISSING_NONE, tree.thresholds < 0.0, ~default_left)  # None: NaN reads 0
    return borders, nan_right | tree.categorical  # NaN is no category: right


def _parsed(tree: TextTree, table: ValueThresholds, right: tuple[np.ndarray, ...], n_outputs: int) -> ParsedTree:
    """The tree in jaximp's numbering: internal nodes and leaves renumbered as met depth-first,
    left first; ``leaf_ids`` LightGBM's leaf numbers, leaf weights the ``leaf_count`` (None when
    the text has none), values added to output ``index % K``."""
    nodes, leaves = tree.nodes, tree.leaves
    m, n = len(tree.features), len(tree.leaf_values)
    node_new = np.empty(m, np.int64)
    node_new[nodes] = np.arange(m)
    leaf_new = np.empty(n, np.int64)
    leaf_new[leaves] = np.arange(n)

    def renumbered(child: np.ndarray) -> np.ndarray:
        return np.where(child >= 0, node_new[np.maximum(child, 0)], ~leaf_new[np.maximum(~child, 0)])

    borders, nan_right = _node_rules(tree, table)
    categorical = tree.categorical
    ordinal = np.cumsum(categorical) - 1  # each categorical node's entry in right
    right_categories = tuple(right[ordinal[c]] for c in nodes[categorical[nodes]])
    return ParsedTree(
        root=0 if m else -1,
        node_features=tree.features[nodes].astype(np.int32),
        node_borders=borders[nodes],
        node_nan_right=nan_right[nodes],
        node_children=np.stack([renumbered(tree.left[nodes]), renumbered(tree.right[nodes])], -1).astype(np.int32),
        leaf_values=tree.leaf_values[leaves],
        depth=tree.depth,
        output=tree.index % n_outputs,
        leaf_weights=None if tree.leaf_counts is None else tree.leaf_counts[leaves],
        node_gains=tree.gains[nodes],
        node_weights=tree.counts[nodes],
        leaf_ids=leaves.astype(np.int32),
        node_categorical=categorical[nodes],
        right_categories=right_categories,
        others_right=np.ones(len(right_categories), bool),  # other values: right
    )


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
    try:
        header, blocks, trailer, lengths = parse_model_text(text)
    except ValueError as e:
        raise ValueError(f"{_FN}: {e}") from None
    try:
        n_features = _header_integer(header, "max_feature_idx") + 1
        if n_features < 1:
            raise ValueError(f"max_feature_idx is {n_features - 1}")
        if "feature_names" not in header:
            raise ValueError("its header has no 'feature_names' line (LightGBM refuses such a file too)")
        names = tuple(header["feature_names"].split())
        if len(names) != n_features:
            raise ValueError(f"feature_names has {len(names)} names, not max_feature_idx + 1 = {n_features}")
        n_classes = _header_integer(header, "num_class", 1)
        n_outputs = _header_integer(header, "num_tree_per_iteration", n_classes)
        if n_classes != n_outputs:
            raise ValueError(f"num_class ({n_classes}) differs from num_tree_per_iteration ({n_outputs}), which "
                             "LightGBM writes equal")
        if n_outputs < 1 or not blocks or len(blocks) % n_outputs:
            raise ValueError(f"{len(blocks)} trees are not a whole number of iterations of {n_outputs} trees")
        frame_categories = pandas_categorical(trailer.get("pandas_categorical", "null"))
        trees = []
        for t, fields in enumerate(blocks):
            try:
                trees.append(read_tree(fields, t, n_features))
            except ValueError as e:
                raise ValueError(f"tree {t} {e}" if str(e).startswith("has no") else f"tree {t}: {e}") from None
        _check_tree_sizes(header, lengths)  # after the trees: their own errors say more
        table = _value_thresholds(trees, n_features)
        right = right_categories(trees, _FN)
        parsed = [_parsed(tree, table, r, n_outputs) for tree, r in zip(trees, right)]
        return _ensemble(header, parsed, n_outputs, names, class_names, frame_categories, table)
    except Unsupported as e:
        raise ValueError(f"{_FN}: {e}") from None
    except ValueError as e:
        message = str(e)
        if message.startswith(f"{_FN}: "):
            raise
        raise ValueError(f"{_FN}: the LightGBM model text is corrupt ({message})") from None


def _check_tree_sizes(header: dict[str, str], lengths: list[int]) -> None:
    """The header's ``tree_sizes`` (when written) must find the trees where they are: LightGBM
    reads tree ``i`` at the sum of the sizes before it and refuses the text when no tree starts
    there, so every size but the last must be its tree's length (the last one only moves
    LightGBM past the trees, as an edited last tree does)."""
    if "tree_sizes" not in header:
        return
    sizes = numbers(header, "tree_sizes", len(header["tree_sizes"].split()), np.int64)
    if len(sizes) != len(lengths) or np.any(sizes[:-1] != lengths[:-1]) or sizes[-1] < 1:
        raise ValueError(f"its header's tree_sizes ({len(sizes)} sizes) do not match its {len(lengths)} trees' "
                         "text (LightGBM finds the trees by them and refuses such a file too)")


def _header_integer(header: dict[str, str], key: str, default: int | None = None) -> int:
    try:
        return integer(header, key, default)
    except ValueError as e:
        raise ValueError(f"its header {e}" if str(e).startswith("has no") else str(e)) from None


def _ensemble(header: dict[str, str], trees: list[ParsedTree], n_outputs: int, names: tuple[str, ...],
              class_names: tuple, frame_categories: tuple | None, table: ValueThresholds) -> TreeEnsemble:
    n_features = len(names)
    codes = None
    if frame_categories or any(tree.right_categories for tree in trees):
        # None: trained on an array (a frame's own codes); a tuple, maybe empty: on a DataFrame
        codes = CategoryCodes("LightGBM", (None,) * n_features, frame_categories=frame_categories)
    fields = ModelFields(
        bias=np.zeros(n_outputs),  # the initial score is in the first trees' leaves
        feature_names=names,
        nan_modes=("AsIs",) * n_features,  # informative only: each node carries its NaN direction
        loss_function=_loss_function(header.get("objective", "")),
        scale=n_outputs / len(trees) if "average_output" in header else 1.0,  # rf: mean over iterations
        class_names=tuple(class_names),
    )
    # a model of single leaves: one no-op level
    ens = pad_trees(trees, fields, fn_name=_FN, min_depth=1, category_codes=codes)
    return dataclasses.replace(ens, value_thresholds=table)
