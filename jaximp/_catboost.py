"""Import CatBoost oblivious ensembles into :class:`ObliviousEnsemble`.

The model is read from CatBoost's JSON export (``save_model(..., format="json")``), whose
``oblivious_trees[t]`` hold ``splits`` (depth ``d`` = bit ``d`` of the leaf index),
``leaf_values`` (leaf-major, ``L * K`` numbers) and ``leaf_weights`` (``L``), and whose
``features_info`` holds each float feature's borders and NaN treatment, the categorical
features' one-hot values and the CTRs (with their tables in ``ctr_data``). A split names its
binary feature by ``split_index``: the float features' borders, then the one-hot values, then
the CTRs' borders, in that order (``jaximp._categorical`` evaluates the last two).
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from jaximp._categorical import Featurizer, featurizer_from_json
from jaximp._model import ObliviousEnsemble
from jaximp._tree_model import TreeEnsemble

_NAN_MODES = {"AsFalse": "Min", "AsTrue": "Max", "AsIs": "AsIs"}


def from_catboost(model_or_path: Any, *, loss_function: str | None = None) -> ObliviousEnsemble | TreeEnsemble:
    """Build an :class:`ObliviousEnsemble` from a CatBoost model or model file, or a
    :class:`TreeEnsemble` from a non-symmetric one (``grow_policy="Depthwise"``/``"Lossguide"``).

    Categorical features (one-hot and CTR splits, CTRs over combinations of columns) are
    supported: the ensemble then takes their raw values (strings or integers) and evaluates
    each split as CatBoost does, with the model's hashing and CTR tables.

    Args:
        model_or_path: a fitted ``catboost.CatBoost`` / ``CatBoostRegressor`` /
            ``CatBoostClassifier``, or the path of a ``.cbm`` or ``.json`` model file.
        loss_function: the training loss's name (``"RMSE"``, ``"Logloss"``, ...), for a model
            file that does not record it; None reads it from the model. Only the results that
            depend on the loss (LossFunctionChange, permutation importance's default score)
            need it.

    Returns:
        The ensemble, with ``leaf_values f32[T, L, K]``; trees of different depths (from
        ``catboost.sum_models``) are padded to the deepest. A non-symmetric model gives a
        ``TreeEnsemble`` (categorical features included), which every function takes (SHAP's
        ``"exact"`` method excepted: CatBoost refuses it for such trees too).

    Raises:
        TypeError: ``model_or_path`` is neither a CatBoost model nor a path.
        ValueError: the file is missing, unreadable or corrupt, the model is not fitted or has
            no trees, or it uses what jaximp does not support (text or embedding features).

    Example:
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
    return ensemble_from_json(_load_json(model_or_path), loss_function=loss_function)


def _load_json(model_or_path: Any) -> dict:
    if isinstance(model_or_path, (str, os.PathLike)):
        path = os.fspath(model_or_path)
        if not os.path.isfile(path):
            raise ValueError(f"from_catboost: model_or_path must be an existing file; got {path!r}")
        if path.lower().endswith(".json"):
            try:
                with open(path, encoding="utf-8") as f:
                    return json.load(f)
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
                raise ValueError(
                    f"from_catboost: {path!r} is not a readable CatBoost JSON model ({e})"
                ) from e
        return _json_of_model(_load_cbm(path))
    try:
        import catboost
    except ImportError:  # pragma: no cover - catboost is a core dependency
        catboost = None
    if catboost is not None and isinstance(model_or_path, catboost.CatBoost):
        if not model_or_path.is_fitted():
            raise ValueError("from_catboost: model_or_path must be a fitted CatBoost model")
        return _json_of_model(model_or_path)
    raise TypeError(
        "from_catboost: model_or_path must be a CatBoost model or a path to a .cbm or .json "
        f"file; got {type(model_or_path).__name__}"
    )


def _load_cbm(path: str):
    import catboost

    model = catboost.CatBoost()
    try:
        model.load_model(path, format="cbm")
    except catboost.CatBoostError as e:
        raise ValueError(f"from_catboost: {path!r} is not a readable CatBoost model ({e})") from e
    return model


def _json_of_model(model) -> dict:
    import catboost

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.json")
        try:
            model.save_model(path, format="json")
        except catboost.CatBoostError as e:
            for kind in ("text", "embedding"):
                if f"{kind} features" in str(e):  # CatBoost exports such models only as .cbm
                    raise ValueError(f"from_catboost: this model uses {kind} features, which jaximp "
                                     "does not support; retrain without them to explain the model "
                                     "with jaximp") from e
            raise ValueError(f"from_catboost: cannot export the model as JSON ({e})") from e
        with open(path, encoding="utf-8") as f:
            return json.load(f)


def _unsupported(model_json: dict) -> list[str]:
    info = model_json.get("features_info", {})
    found = [
        name
        for key, name in (("text_features", "text features"), ("embedding_features", "embedding features"))
        if info.get(key)
    ]
    split_types = {
        split.get("split_type", "FloatFeature")
        for tree in model_json.get("oblivious_trees") or []
        for split in tree.get("splits", [])
    }
    found += sorted(f"{t} splits" for t in split_types - set(_SPLIT_TYPES))
    return found


def ensemble_from_json(model_json: dict, *, loss_function: str | None = None) -> ObliviousEnsemble | TreeEnsemble:
    """Build the ensemble from a parsed CatBoost JSON model (see the module docstring): an
    :class:`ObliviousEnsemble`, or a :class:`TreeEnsemble` for non-symmetric trees."""
    if not isinstance(model_json, dict) or "features_info" not in model_json:
        raise ValueError("from_catboost: the model file is not a CatBoost JSON model")
    if "trees" in model_json and "oblivious_trees" not in model_json:
        from jaximp._tree_catboost import tree_ensemble_from_json

        return tree_ensemble_from_json(model_json, loss_function=loss_function)
    unsupported = _unsupported(model_json)
    if unsupported:
        raise ValueError(
            "from_catboost: this model uses " + ", ".join(unsupported)
            + ", which jaximp does not support; retrain without them to explain the model with jaximp"
        )
    if _multi_target_ctrs(model_json):
        raise ValueError(
            "from_catboost: this multi-target model has CTR features, whose tables CatBoost's JSON "
            "export does not keep per target (the reloaded export predicts differently from the "
            "model); jaximp reads models through that export, so it cannot explain this one exactly: "
            "retrain with one_hot_max_size above the categorical cardinalities (one-hot splits only)"
        )
    if not model_json.get("oblivious_trees"):
        raise ValueError("from_catboost: the model has no trees (e.g. after model.shrink(0, 0)); "
                         "there is nothing to explain")
    try:
        return _build(model_json, loss_function)
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise ValueError(f"from_catboost: the CatBoost JSON model is corrupt ({e!r})") from e


_SPLIT_TYPES = ("FloatFeature", "OneHotFeature", "OnlineCtr")
_MULTI_TARGET_LOSSES = ("MultiRMSE", "MultiLogloss", "MultiCrossEntropy", "MultiQuantile", "SurvivalAft")


def _multi_target_ctrs(model_json: dict) -> bool:
    """A multi-target regression or multi-label model with CTRs: CatBoost keeps a CTR table per
    target, but its JSON export writes one per CTR identifier."""
    loss = _loss_function(model_json.get("model_info", {}))
    return loss in _MULTI_TARGET_LOSSES and bool(model_json.get("features_info", {}).get("ctrs"))


class _Splits:
    """The binary features of the JSON model, in ``split_index`` order, as (evaluated feature,
    border index): float features' borders, then one-hot values, then CTRs' borders."""

    def __init__(self, float_features: list[dict], featurizer: Featurizer | None, ctrs: list[dict]):
        self.borders = [np.asarray(f.get("borders", []), np.float32) for f in float_features]
        n_float = len(float_features)
        self.table = [(f, j) for f, b in enumerate(self.borders) for j in range(len(b))]
        self.categorical = featurizer is not None
        if featurizer is not None:
            self.one_hot = {key: n_float + i for i, key in enumerate(featurizer.one_hot)}
            self.table += [(n_float + i, 0) for i in range(len(featurizer.one_hot))]
            self.borders += [np.asarray([0.5], np.float32)] * len(featurizer.one_hot)
            start = n_float + len(featurizer.one_hot)
            self.table += [(start + k, j) for k, c in enumerate(ctrs) for j in range(len(c["borders"]))]
            self.borders += [np.asarray(c["borders"], np.float32) for c in ctrs]

    def locate(self, split: dict, tree: int) -> tuple[int, int]:
        """(evaluated feature, border index) of one split.

        Raises:
            ValueError: an unknown split type, a categorical split in a model without
                categorical features, or a border the feature lacks.
        """
        kind = split.get("split_type", "FloatFeature")
        if kind not in _SPLIT_TYPES:
            raise ValueError(f"tree {tree} has a {kind} split, which jaximp does not support")
        if kind != "FloatFeature" and not self.categorical:
            raise ValueError(f"tree {tree} has a {kind} split, but the model has no categorical features")
        if kind == "FloatFeature":
            feature = split["float_feature_index"]
            border = np.float32(split["border"])
            j = int(np.searchsorted(self.borders[feature], border))
            if j == len(self.borders[feature]) or self.borders[feature][j] != border:
                raise ValueError(f"tree {tree} splits on a border that feature {feature} lacks")
            return feature, j
        if kind == "OneHotFeature":
            return self.one_hot[(split["cat_feature_index"], int(split["value"]))], 0
        feature, j = self.table[split["split_index"]]
        if self.borders[feature][j] != np.float32(split["border"]):
            raise ValueError(f"tree {tree}: split_index {split['split_index']} does not match its border")
        return feature, j


class ModelFeatures(NamedTuple):
    """What a CatBoost JSON model's splits read, shared by the oblivious and the non-symmetric
    importers.

    Attributes:
        splits: every binary feature's (evaluated feature, border index), see :class:`_Splits`.
        featurizer: None for numeric models, else the map from raw columns to the E evaluated
            features' bins (``jaximp._categorical``).
        nan_modes: per evaluated feature (E entries): the float features' modes, then "Min" for
            one-hot values and CTRs (their bins are never NaN).
        names: the F input columns' names, in CatBoost's flat order.
        players, player_of, reads: the attribution fields of the ensembles (None for numeric
            models), see :func:`attribution`.
    """

    splits: _Splits
    featurizer: Featurizer | None
    nan_modes: tuple[str, ...]
    names: tuple[str, ...]
    players: tuple[tuple[int, ...], ...] | None
    player_of: tuple[int, ...] | None
    reads: tuple[tuple[int, ...], ...] | None


def model_features(model_json: dict) -> ModelFeatures:
    """The evaluated features of a parsed CatBoost JSON model (oblivious or not).

    Raises:
        ValueError, KeyError: the features' flat indices are not ``0..F-1``, or a corrupt
            categorical description (see ``featurizer_from_json``).
    """
    info = model_json["features_info"]
    float_features = sorted(info.get("float_features", []), key=lambda f: f["flat_feature_index"])
    cat_features = sorted(info.get("categorical_features", []), key=lambda f: f["flat_feature_index"])
    columns = sorted(float_features + cat_features, key=lambda f: f["flat_feature_index"])
    if [f["flat_feature_index"] for f in columns] != list(range(len(columns))):
        raise ValueError("the features' flat_feature_index are not 0..F-1")
    float_modes = tuple(_NAN_MODES[f.get("nan_value_treatment", "AsIs")] for f in float_features)
    featurizer = None
    if cat_features:
        nan_fill = [np.inf if mode == "Max" else -np.inf for mode in float_modes]
        featurizer = featurizer_from_json(model_json, float_features, nan_fill)
    splits = _Splits(float_features, featurizer, info.get("ctrs", []))
    nan_modes = float_modes + ("Min",) * (len(splits.borders) - len(float_features))
    names = tuple(f.get("feature_id") or str(i) for i, f in enumerate(columns))
    return ModelFeatures(splits, featurizer, nan_modes, names, *attribution(featurizer))


def attribution(featurizer: Featurizer | None) -> tuple[Any, Any, Any]:
    """``(players, player_of, reads)`` of a model: None for numeric models; else the P distinct
    combination classes (sorted by size, then columns), the player of each of the E evaluated
    features, and the columns each evaluated feature reads (see ``ObliviousEnsemble``)."""
    if featurizer is None:
        return None, None, None
    credited = featurizer.evaluated_columns(attributed=True)
    players = tuple(sorted(set(credited), key=lambda cols: (len(cols), cols)))
    player_of = tuple(players.index(cols) for cols in credited)
    return players, player_of, tuple(featurizer.evaluated_columns())


def _build(model_json: dict, loss_function: str | None) -> ObliviousEnsemble:
    features = model_features(model_json)
    splits, featurizer = features.splits, features.featurizer
    n_evaluated = len(splits.borders)
    n_borders = max([1] + [len(b) for b in splits.borders])
    borders_table = np.full((n_evaluated, n_borders), np.inf, np.float32)
    for f, b in enumerate(splits.borders):
        borders_table[f, : len(b)] = b

    scale, bias = model_json.get("scale_and_bias", [1.0, [0.0]])
    bias = np.atleast_1d(np.asarray(bias, np.float32))
    n_outputs = len(bias)

    trees = model_json["oblivious_trees"]
    depth = max(len(t["splits"]) for t in trees)
    if len(trees) << depth >= 1 << 31:
        raise ValueError(f"{len(trees)} trees of depth {depth} have more than 2**31 leaves in all")
    n_leaves = 1 << depth
    shape = (len(trees), depth)
    split_features = np.zeros(shape, np.int32)
    split_borders = np.full(shape, np.inf, np.float32)
    split_bins = np.full(shape, n_borders, np.int32)
    split_mask = np.zeros(shape, bool)
    leaf_values = np.zeros((len(trees), n_leaves, n_outputs), np.float32)
    leaf_weights = np.zeros((len(trees), n_leaves), np.float32)
    weights_known = all("leaf_weights" in tree for tree in trees)
    for t, tree in enumerate(trees):
        d = len(tree["splits"])
        for level, split in enumerate(tree["splits"]):
            feature, j = splits.locate(split, t)
            split_features[t, level] = feature
            split_bins[t, level] = j
            split_borders[t, level] = borders_table[feature, j]
        split_mask[t, :d] = True
        values = np.asarray(tree["leaf_values"], np.float64).reshape(1 << d, n_outputs)
        leaf_values[t, : 1 << d] = values
        if weights_known:
            leaf_weights[t, : 1 << d] = np.asarray(tree["leaf_weights"])
    model_info = model_json.get("model_info", {})
    return ObliviousEnsemble(
        split_features=jnp.asarray(split_features),
        split_borders=jnp.asarray(split_borders),
        split_bins=jnp.asarray(split_bins),
        split_mask=jnp.asarray(split_mask),
        borders=jnp.asarray(borders_table),
        leaf_values=jnp.asarray(leaf_values),
        leaf_weights=jnp.asarray(leaf_weights),
        scale=jnp.asarray(scale, jnp.float32),
        bias=jnp.asarray(bias),
        n_features=len(features.names),
        feature_names=features.names,
        nan_modes=features.nan_modes,
        loss_function=loss_function or _loss_function(model_info),
        class_names=tuple(model_info.get("class_params", {}).get("class_names", ())),
        featurizer=featurizer,
        players=features.players,
        player_of=features.player_of,
        reads=features.reads,
        leaf_weights_known=weights_known,
        n_searched=None if featurizer is None else 0,
    )


def _loss_function(model_info: dict) -> str:
    """The training loss's name, or "" when the model file does not say (then the functions
    that depend on the loss raise, asking for ``from_catboost(..., loss_function=...)``)."""
    loss = model_info.get("loss_function") or model_info.get("params", {}).get("loss_function")
    if isinstance(loss, str):
        loss = json.loads(loss) if loss.startswith("{") else {"type": loss}
    return str(loss.get("type", "")) if isinstance(loss, dict) else ""
