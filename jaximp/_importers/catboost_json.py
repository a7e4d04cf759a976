"""What every CatBoost importer reads first: the model as its JSON export (from a model object or
a ``.cbm`` / ``.json`` file), whether jaximp supports it, the features its splits read, and the
model-level fields (scale, bias, loss, class names) both layouts take.

A split names its binary feature by ``split_index``: the float features' borders, then the
one-hot values, then the CTRs' borders, in that order (``jaximp._models.featurizer``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import struct
import tempfile
from collections.abc import Iterator
from typing import Any

import numpy as np

from jaximp._importers.catboost_ctrs import featurizer_from_json
from jaximp._importers.cbm import SIGNATURE, read_cbm
from jaximp._importers.padded import ModelFields
from jaximp._models.featurizer import Featurizer

_NAN_MODES = {"AsFalse": "Min", "AsTrue": "Max", "AsIs": "AsIs"}


def load_json(model_or_path: Any) -> dict:
    """The model as CatBoost's JSON export lays it out, from a CatBoost model, a ``.json`` file (its
    export) or a ``.cbm`` file (read without CatBoost, :mod:`jaximp._importers.cbm`; a model
    object is saved to a temporary ``.cbm`` and read the same way, so nothing its JSON export
    loses is lost: per-target CTR tables, exact mean-value CTRs).

    Raises:
        TypeError: ``model_or_path`` is neither a CatBoost model nor a path.
        ValueError: a missing, unreadable or corrupt file, or an unfitted model.
    """
    if isinstance(model_or_path, (str, os.PathLike)):
        path = os.fspath(model_or_path)
        if not os.path.isfile(path):
            raise ValueError(f"from_catboost: model_or_path must be an existing file; got {path!r}")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ValueError(f"from_catboost: cannot read {path!r} ({e})") from e
        if path.lower().endswith(".json") or (data[:1] == b"{" and data[:4] != SIGNATURE):
            return _parse_json(data, path)
        return _parse_cbm(data, path)
    try:
        import catboost
    except ImportError:  # pragma: no cover - catboost is a core dependency
        catboost = None
    if catboost is not None and isinstance(model_or_path, catboost.CatBoost):
        if not model_or_path.is_fitted():
            raise ValueError("from_catboost: model_or_path must be a fitted CatBoost model")
        return _parse_cbm(_cbm_bytes(model_or_path), "the model")
    raise TypeError(
        "from_catboost: model_or_path must be a CatBoost model or a path to a .cbm or .json "
        f"file; got {type(model_or_path).__name__}"
    )


def _parse_json(data: bytes, path: str) -> dict:
    """A JSON model file's dict, or a ``ValueError`` naming the file."""
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"from_catboost: {path!r} is not a readable CatBoost JSON model ({e})") from e
    except RecursionError as e:
        raise ValueError(f"from_catboost: {path!r} nests its JSON deeper than Python's reader allows; "
                         "a CatBoost model nests a few dozen levels: the file is damaged") from e


def _parse_cbm(data: bytes, what: str) -> dict:
    """A ``.cbm`` model's dict, or a ``ValueError`` naming the file."""
    name = what if what == "the model" else repr(what)
    try:
        return read_cbm(data)
    except (ValueError, struct.error, OverflowError, MemoryError) as e:
        damaged = "" if data[:4] != SIGNATURE else "a damaged .cbm file, "
        raise ValueError(f"from_catboost: {name} is not a readable CatBoost model ({damaged}{e})") from e


def _cbm_bytes(model) -> bytes:
    """The bytes of ``model.save_model(path)`` (CatBoost's ``.cbm`` format)."""
    import catboost

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.cbm")
        try:
            model.save_model(path)
        except catboost.CatBoostError as e:
            raise ValueError(f"from_catboost: cannot save the model ({e})") from e
        with open(path, "rb") as f:
            return f.read()


def check_supported(model_json: dict) -> None:
    """Raise unless ``model_json`` is a parsed CatBoost JSON model whose features and splits
    jaximp supports.

    Raises:
        ValueError: not a CatBoost JSON model, or one with text or embedding features or an
            unknown split type.
    """
    if not isinstance(model_json, dict) or "features_info" not in model_json:
        raise ValueError("from_catboost: the model file is not a CatBoost JSON model")
    info = model_json["features_info"]
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
    if found:
        raise ValueError("from_catboost: this model uses " + ", ".join(found)
                         + ", which jaximp does not support; retrain without them to explain the "
                         "model with jaximp")


@contextlib.contextmanager
def reporting_corrupt_models() -> Iterator[None]:
    """Turn what reading a malformed model meets (a missing key, a wrong type or length) into
    ``ValueError("from_catboost: the CatBoost JSON model is corrupt (...)")``."""
    try:
        yield
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise ValueError(f"from_catboost: the CatBoost JSON model is corrupt ({e!r})") from e


_SPLIT_TYPES = ("FloatFeature", "OneHotFeature", "OnlineCtr")
_MULTI_TARGET_LOSSES = ("MultiRMSE", "MultiLogloss", "MultiCrossEntropy", "MultiQuantile", "SurvivalAft")


def multi_target_ctrs(model_json: dict) -> bool:
    """A multi-target regression or multi-label model with CTRs: CatBoost keeps a CTR table per
    target, but its JSON export writes one per CTR identifier."""
    loss = loss_function_of(model_json.get("model_info", {}))
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


@dataclasses.dataclass(frozen=True)
class ModelFeatures:
    """What a CatBoost JSON model's splits read, shared by the oblivious and the non-symmetric
    importers.

    Attributes:
        splits: every binary feature's (evaluated feature, border index), see :class:`_Splits`.
        featurizer: None for numeric models, else the map from raw columns to the E evaluated
            features' bins (``jaximp._models.featurizer``).
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
    players, player_of, reads = attribution(featurizer)
    return ModelFeatures(splits=splits, featurizer=featurizer, nan_modes=nan_modes, names=names,
                         players=players, player_of=player_of, reads=reads)


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


def loss_function_of(model_info: dict) -> str:
    """The training loss's name, or "" when the model file does not say (then the functions
    that depend on the loss raise, asking for ``from_catboost(..., loss_function=...)``)."""
    loss = model_info.get("loss_function") or model_info.get("params", {}).get("loss_function")
    if isinstance(loss, str):
        loss = json.loads(loss) if loss.startswith("{") else {"type": loss}
    return str(loss.get("type", "")) if isinstance(loss, dict) else ""


def ensemble_fields(model_json: dict, features: ModelFeatures, loss_function: str | None) -> ModelFields:
    """The model-level fields of a parsed CatBoost JSON model, oblivious or not: ``scale_and_bias``,
    the loss (``loss_function``, or None: the model's own), the class names and the features'
    names, NaN modes and categorical description."""
    scale, bias = model_json.get("scale_and_bias", [1.0, [0.0]])
    model_info = model_json.get("model_info", {})
    return ModelFields(
        bias=np.atleast_1d(np.asarray(bias, np.float32)),
        feature_names=features.names,
        nan_modes=features.nan_modes,
        loss_function=loss_function or loss_function_of(model_info),
        scale=scale,
        class_names=tuple(model_info.get("class_params", {}).get("class_names", ())),
        featurizer=features.featurizer,
        players=features.players,
        player_of=features.player_of,
        reads=features.reads,
        n_searched=None if features.featurizer is None else 0,
    )
