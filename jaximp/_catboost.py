"""Import CatBoost oblivious ensembles into :class:`ObliviousEnsemble`.

The model is read from CatBoost's JSON export (``save_model(..., format="json")``), whose
``oblivious_trees[t]`` hold ``splits`` (depth ``d`` = bit ``d`` of the leaf index),
``leaf_values`` (leaf-major, ``L * K`` numbers) and ``leaf_weights`` (``L``), and whose
``features_info.float_features`` hold each feature's borders and NaN treatment.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import jax.numpy as jnp
import numpy as np

from jaximp._model import ObliviousEnsemble

_NAN_MODES = {"AsFalse": "Min", "AsTrue": "Max", "AsIs": "AsIs"}


def from_catboost(model_or_path: Any) -> ObliviousEnsemble:
    """Build an :class:`ObliviousEnsemble` from a CatBoost model or model file.

    Args:
        model_or_path: a fitted ``catboost.CatBoost`` / ``CatBoostRegressor`` /
            ``CatBoostClassifier``, or the path of a ``.cbm`` or ``.json`` model file.

    Returns:
        The ensemble, with ``leaf_values f32[T, L, K]``; trees of different depths (from
        ``catboost.sum_models``) are padded to the deepest.

    Raises:
        TypeError: ``model_or_path`` is neither a CatBoost model nor a path.
        ValueError: the file is missing, unreadable or corrupt, the model is not fitted, or it
            uses what jaximp does not support yet (categorical, text or embedding features,
            non-symmetric trees).

    Example:
        >>> model = catboost.CatBoostRegressor(iterations=10).fit(X, y)  # doctest: +SKIP
        >>> ens = jaximp.from_catboost(model)                            # doctest: +SKIP
    """
    return ensemble_from_json(_load_json(model_or_path))


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
            raise ValueError(f"from_catboost: cannot export the model as JSON ({e})") from e
        with open(path, encoding="utf-8") as f:
            return json.load(f)


def _unsupported(model_json: dict) -> list[str]:
    info = model_json.get("features_info", {})
    found = [
        name
        for key, name in (
            ("categorical_features", "categorical features"),
            ("text_features", "text features"),
            ("embedding_features", "embedding features"),
        )
        if info.get(key)
    ]
    if "trees" in model_json and "oblivious_trees" not in model_json:
        found.append("non-symmetric (Depthwise/Lossguide) trees")
    split_types = {
        split.get("split_type", "FloatFeature")
        for tree in model_json.get("oblivious_trees", [])
        for split in tree.get("splits", [])
    }
    found += sorted(f"{t} splits" for t in split_types - {"FloatFeature"})
    return found


def ensemble_from_json(model_json: dict) -> ObliviousEnsemble:
    """Build the ensemble from a parsed CatBoost JSON model (see the module docstring)."""
    if not isinstance(model_json, dict) or "features_info" not in model_json:
        raise ValueError("from_catboost: the model file is not a CatBoost JSON model")
    unsupported = _unsupported(model_json)
    if unsupported:
        raise ValueError(
            "from_catboost: this model uses " + ", ".join(unsupported)
            + ", which jaximp does not support yet; train on numeric features with "
            "grow_policy='SymmetricTree'"
        )
    try:
        return _build(model_json)
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise ValueError(f"from_catboost: the CatBoost JSON model is corrupt ({e!r})") from e


def _build(model_json: dict) -> ObliviousEnsemble:
    float_features = sorted(
        model_json["features_info"].get("float_features", []), key=lambda f: f["flat_feature_index"]
    )
    n_features = len(float_features)
    borders = [np.asarray(f.get("borders", []), np.float32) for f in float_features]
    n_borders = max([1] + [len(b) for b in borders])
    borders_table = np.full((n_features, n_borders), np.inf, np.float32)
    for f, b in enumerate(borders):
        borders_table[f, : len(b)] = b
    names = tuple(f.get("feature_id") or str(i) for i, f in enumerate(float_features))
    nan_modes = tuple(_NAN_MODES[f.get("nan_value_treatment", "AsIs")] for f in float_features)

    scale, bias = model_json.get("scale_and_bias", [1.0, [0.0]])
    bias = np.atleast_1d(np.asarray(bias, np.float32))
    n_outputs = len(bias)

    trees = model_json["oblivious_trees"]
    if not trees:
        raise ValueError("the model has no trees")
    depth = max(len(t["splits"]) for t in trees)
    n_leaves = 1 << depth
    shape = (len(trees), depth)
    split_features = np.zeros(shape, np.int32)
    split_borders = np.full(shape, np.inf, np.float32)
    split_bins = np.full(shape, n_borders, np.int32)
    split_mask = np.zeros(shape, bool)
    leaf_values = np.zeros((len(trees), n_leaves, n_outputs), np.float32)
    leaf_weights = np.zeros((len(trees), n_leaves), np.float32)
    for t, tree in enumerate(trees):
        d = len(tree["splits"])
        for level, split in enumerate(tree["splits"]):
            feature = split["float_feature_index"]
            border = np.float32(split["border"])
            split_features[t, level] = feature
            split_borders[t, level] = border
            split_bins[t, level] = np.searchsorted(borders[feature], border)
            if borders[feature][split_bins[t, level]] != border:
                raise ValueError(f"tree {t} splits on a border that feature {feature} lacks")
        split_mask[t, :d] = True
        values = np.asarray(tree["leaf_values"], np.float64).reshape(1 << d, n_outputs)
        leaf_values[t, : 1 << d] = values
        leaf_weights[t, : 1 << d] = np.asarray(tree.get("leaf_weights", np.ones(1 << d)))
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
        n_features=n_features,
        feature_names=names,
        nan_modes=nan_modes,
        loss_function=_loss_function(model_json.get("model_info", {})),
        class_names=tuple(model_json.get("model_info", {}).get("class_params", {}).get("class_names", ())),
    )


def _loss_function(model_info: dict) -> str:
    loss = model_info.get("loss_function") or model_info.get("params", {}).get("loss_function")
    if isinstance(loss, str):
        loss = json.loads(loss) if loss.startswith("{") else {"type": loss}
    return loss.get("type", "RMSE") if isinstance(loss, dict) else "RMSE"
