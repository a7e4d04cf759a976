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

from jaximp._importers.catboost_ctrs import featurizer_from_json, integer, number, numbers, sorted_borders
from jaximp._importers.cbm import SIGNATURE, read_cbm
from jaximp._importers.padded import ModelFields
from jaximp._importers.paths import existing_file
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
        path = existing_file(model_or_path, "from_catboost: model_or_path",
                             "a CatBoost model or an existing model file (.cbm or .json)")
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
            unknown split type, or a multi-target model with CTRs read from a JSON export.
    """
    if not isinstance(model_json, dict) or not isinstance(model_json.get("features_info"), dict):
        raise ValueError("from_catboost: the model file is not a CatBoost JSON model (it has no "
                         "features_info object)")
    info = model_json["features_info"]
    found = [
        name
        for key, name in (("text_features", "text features"), ("embedding_features", "embedding features"))
        if info.get(key)
    ]
    trees = model_json.get("oblivious_trees") or []
    split_types = {split.get("split_type", "FloatFeature") if isinstance(split, dict) else None
                   for t, tree in enumerate(trees if isinstance(trees, list) else []) for split in tree_splits(tree, t)}
    found += sorted(f"{t} splits" for t in split_types - set(_SPLIT_TYPES) - {None})
    if found:
        raise ValueError("from_catboost: this model uses " + ", ".join(found)
                         + ", which jaximp does not support; retrain without them to explain the "
                         "model with jaximp")
    if multi_target_ctrs(model_json):
        raise ValueError(
            "from_catboost: this multi-target model has CTR features, whose tables CatBoost's JSON "
            "export does not keep per target (the reloaded export predicts differently from the "
            "model): read the model from its .cbm file (model.save_model(path), then "
            "jaximp.from_catboost(path)) or pass the model object"
        )


def tree_splits(tree: Any, index: int) -> list:
    """The ``splits`` of an oblivious JSON tree: ``[]`` for a tree without splits (the export
    writes ``null``: such a tree adds its one leaf value).

    Raises:
        ValueError: the tree is not an object, or its splits are not a list.
    """
    if not isinstance(tree, dict):
        raise ValueError(f"from_catboost: the CatBoost model is corrupt (tree {index} is not an object)")
    splits = tree.get("splits")
    if splits is None:
        return []
    if not isinstance(splits, list):
        raise ValueError(f"from_catboost: the CatBoost model is corrupt (the splits of tree {index} are "
                         f"not a list: {type(splits).__name__})")
    return splits


@contextlib.contextmanager
def reporting_corrupt_models() -> Iterator[None]:
    """Turn what reading a malformed model meets (a missing key, a wrong type or length, an index
    out of range, a number too large) into ``ValueError("from_catboost: the CatBoost model is
    corrupt (...)")``; errors that name ``from_catboost`` already pass unchanged."""
    try:
        yield
    except ValueError as e:
        if str(e).startswith("from_catboost:"):
            raise
        raise ValueError(f"from_catboost: the CatBoost model is corrupt ({e})") from e
    except (KeyError, IndexError, TypeError, AttributeError, OverflowError, ZeroDivisionError) as e:
        raise ValueError(f"from_catboost: the CatBoost model is corrupt ({type(e).__name__}: {e})") from e


def finite_float32(values: Any, what: str) -> np.ndarray:
    """``f32[n]`` of a list of numbers, or a ``ValueError`` naming ``what`` when one is not finite
    in float32 (a leaf value beyond float32's range would silently become infinite)."""
    array = numbers(values, what)
    with np.errstate(over="ignore"):
        out = array.astype(np.float32)
    if not np.isfinite(out).all():
        raise ValueError(f"from_catboost: {what} hold {array[~np.isfinite(out)][0]!r}, which float32 (jaximp's "
                         "precision) cannot hold; the model cannot be explained in float32")
    return out


_SPLIT_TYPES = ("FloatFeature", "OneHotFeature", "OnlineCtr")
_MULTI_TARGET_LOSSES = ("MultiRMSE", "MultiLogloss", "MultiCrossEntropy", "MultiQuantile", "SurvivalAft")


def multi_target_ctrs(model_json: dict) -> bool:
    """A multi-target regression or multi-label model with CTRs read from a JSON export: CatBoost
    keeps a CTR table per target, but its JSON export writes one per CTR identifier (a ``.cbm``
    file keeps them all: its CTRs name their table)."""
    loss = loss_function_of(model_json.get("model_info", {}))
    ctrs = model_json["features_info"].get("ctrs") or []
    return loss in _MULTI_TARGET_LOSSES and any(not isinstance(c, dict) or "table" not in c for c in ctrs)


class _Splits:
    """The binary features of the JSON model, in ``split_index`` order, as (evaluated feature,
    border index): float features' borders, then one-hot values, then CTRs' borders."""

    def __init__(self, float_features: list[dict], featurizer: Featurizer | None, ctrs: list[dict]):
        if featurizer is not None:
            self.borders = list(featurizer.float_borders)
        else:
            self.borders = [sorted_borders(f.get("borders", []), f"the borders of float feature {i}")
                            for i, f in enumerate(float_features)]
        self.n_float = n_float = len(float_features)
        self.table = [(f, j) for f, b in enumerate(self.borders) for j in range(len(b))]
        self.categorical = featurizer is not None
        self.first_ctr = n_float
        if featurizer is not None:
            self.one_hot = {key: n_float + i for i, key in enumerate(featurizer.one_hot)}
            self.table += [(n_float + i, 0) for i in range(len(featurizer.one_hot))]
            self.borders += [np.asarray([0.5], np.float32)] * len(featurizer.one_hot)
            self.first_ctr = start = n_float + len(featurizer.one_hot)
            self.table += [(start + k, j) for k, c in enumerate(featurizer.ctrs) for j in range(len(c.borders))]
            self.borders += [c.borders for c in featurizer.ctrs]

    def locate(self, split: dict, tree: int) -> tuple[int, int]:
        """(evaluated feature, border index) of one split: its ``split_index`` (what CatBoost's
        JSON reader reads) checked against the split's own description.

        Raises:
            ValueError: an unknown split type, a categorical split in a model without
                categorical features, a border or value the feature lacks, or a ``split_index``
                that names another binary feature than the split describes.
        """
        kind = split.get("split_type", "FloatFeature")
        if kind not in _SPLIT_TYPES:
            raise ValueError(f"tree {tree} has a {kind} split, which jaximp does not support")
        if kind != "FloatFeature" and not self.categorical:
            raise ValueError(f"tree {tree} has a {kind} split, but the model has no categorical features")
        if kind == "FloatFeature":
            feature = integer(split["float_feature_index"], "float_feature_index")
            if not 0 <= feature < self.n_float:
                raise ValueError(f"tree {tree} splits on float feature {feature}; the model has {self.n_float}")
            border = np.float32(number(split["border"], "a split's border"))
            j = int(np.searchsorted(self.borders[feature], border))
            if j == len(self.borders[feature]) or self.borders[feature][j] != border:
                raise ValueError(f"tree {tree} splits on a border that feature {feature} lacks")
            found = (feature, j)
        elif kind == "OneHotFeature":
            key = (integer(split["cat_feature_index"], "cat_feature_index"), integer(split["value"], "a one-hot value"))
            if key not in self.one_hot:
                raise ValueError(f"tree {tree} splits on one-hot value {key[1]} of categorical feature "
                                 f"{key[0]}, which the model does not list")
            found = (self.one_hot[key], 0)
        else:
            index = integer(split["split_index"], "split_index")
            if not 0 <= index < len(self.table) or self.table[index][0] < self.first_ctr:
                raise ValueError(f"tree {tree}: split_index {index} is not a CTR border of the model")
            found = self.table[index]
            if self.borders[found[0]][found[1]] != np.float32(number(split["border"], "a split's border")):
                raise ValueError(f"tree {tree}: split_index {index} does not match its border")
        if "split_index" not in split:
            raise ValueError(f"tree {tree} has a split without split_index (what CatBoost's JSON reader reads)")
        named = integer(split["split_index"], "split_index")
        if not (0 <= named < len(self.table) and self.table[named] == found):
            raise ValueError(f"tree {tree}: split_index {split['split_index']} names another split than "
                             "the one described (CatBoost reads the split_index)")
        return found


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
    flat = lambda f: integer(f["flat_feature_index"], "flat_feature_index")  # noqa: E731
    float_features = sorted(info.get("float_features", []), key=flat)
    cat_features = sorted(info.get("categorical_features", []), key=flat)
    columns = sorted(float_features + cat_features, key=flat)
    if [flat(f) for f in columns] != list(range(len(columns))):
        raise ValueError("the features' flat_feature_index are not 0..F-1")
    if [integer(f.get("feature_index", i), "feature_index") for i, f in enumerate(float_features)] \
            != list(range(len(float_features))):
        raise ValueError("the float features' feature_index are not 0..n-1 in flat order")
    float_modes = tuple(_NAN_MODES[f.get("nan_value_treatment", "AsIs")] for f in float_features)
    featurizer = None
    if cat_features:
        nan_fill = [np.inf if mode == "Max" else -np.inf for mode in float_modes]
        featurizer = featurizer_from_json(model_json, float_features, nan_fill)
    splits = _Splits(float_features, featurizer, info.get("ctrs", []))
    nan_modes = float_modes + ("Min",) * (len(splits.borders) - len(float_features))
    names = tuple(_name(f.get("feature_id"), i) for i, f in enumerate(columns))
    if len(set(names)) != len(names):
        raise ValueError("two features have the same feature_id")
    players, player_of, reads = attribution(featurizer)
    return ModelFeatures(splits=splits, featurizer=featurizer, nan_modes=nan_modes, names=names,
                         players=players, player_of=player_of, reads=reads)


def _name(feature_id: Any, index: int) -> str:
    """A column's name: its ``feature_id``, or its index when it has none (CatBoost's default)."""
    if feature_id is None or feature_id == "":
        return str(index)
    if not isinstance(feature_id, str):
        raise ValueError(f"a feature_id must be text; got {feature_id!r}")
    return feature_id


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
    bias = finite_float32(bias if isinstance(bias, list) else [bias], "the bias")
    if not 1 <= len(bias) <= 1 << 16:
        raise ValueError(f"the model's bias has {len(bias)} outputs")
    return ModelFields(
        bias=bias,
        feature_names=features.names,
        nan_modes=features.nan_modes,
        loss_function=loss_function or loss_function_of(model_info),
        scale=float(finite_float32([number(scale, "the scale")], "the scale")[0]),
        class_names=tuple(model_info.get("class_params", {}).get("class_names", ())),
        featurizer=features.featurizer,
        players=features.players,
        player_of=features.player_of,
        reads=features.reads,
        n_searched=None if features.featurizer is None else 0,
    )
