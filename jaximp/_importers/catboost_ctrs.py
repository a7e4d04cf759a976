"""The featurizer of a CatBoost JSON model with categorical features: its one-hot values and its
CTRs with their tables (``features_info`` and ``ctr_data`` of CatBoost's JSON export)."""

from __future__ import annotations

import hashlib
import json

import numpy as np

from jaximp._models.featurizer import CTR_TYPES, Ctr, Featurizer

_EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)  # an empty slot of CatBoost's hash tables


def featurizer_from_json(model_json: dict, float_features: list[dict], nan_fill: list[float]) -> Featurizer:
    """The featurizer of a CatBoost JSON model with categorical features.

    Args:
        model_json: the parsed JSON export.
        float_features: ``features_info.float_features`` sorted by ``flat_feature_index``.
        nan_fill: per float feature, the value NaN takes against borders.

    Raises:
        ValueError: an unknown CTR type or combination element, or a CTR without its table.
    """
    info = model_json["features_info"]
    cats = sorted(info.get("categorical_features", []), key=lambda c: c["feature_index"])
    one_hot = tuple((c["feature_index"], int(v)) for c in cats for v in c.get("values", []))
    ctrs = tuple(_ctr(ctr, model_json.get("ctr_data", {})) for ctr in info.get("ctrs", []))
    description = json.dumps(
        [info.get("categorical_features"), info.get("ctrs"), sorted(model_json.get("ctr_data", {}).items())],
        sort_keys=True,
    )
    n_columns = len(float_features) + len(cats)
    float_borders = tuple(np.asarray(f.get("borders", []), np.float32) for f in float_features)
    most_borders = max([1] + [len(b) for b in float_borders] + [len(c.borders) for c in ctrs])
    return Featurizer(
        n_columns=n_columns,
        float_columns=tuple(f["flat_feature_index"] for f in float_features),
        cat_columns=tuple(c["flat_feature_index"] for c in cats),
        one_hot=one_hot,
        ctrs=ctrs,
        float_nan_fill=tuple(nan_fill),
        digest=hashlib.sha256(description.encode()).hexdigest(),
        float_borders=float_borders,
        bin_dtype=np.uint8 if most_borders < 255 else np.int32,
    )


def _ctr(ctr: dict, ctr_data: dict) -> Ctr:
    ctr_type = ctr["ctr_type"]
    if ctr_type not in CTR_TYPES:
        raise ValueError(f"unknown CTR type {ctr_type!r}")
    cat_features, float_elements, one_hot_elements = [], [], []
    for element in ctr["elements"]:
        kind = element["combination_element"]
        if kind == "cat_feature_value":
            cat_features.append(int(element["cat_feature_index"]))
        elif kind == "float_feature":
            float_elements.append((int(element["float_feature_index"]), float(element["border"])))
        elif kind == "cat_feature_exact_value":
            one_hot_elements.append((int(element["cat_feature_index"]), int(element["value"])))
        else:
            raise ValueError(f"unknown CTR combination element {kind!r}")
    table = ctr_data.get(ctr["identifier"])
    if table is None:
        raise ValueError(f"the CTR {ctr['identifier']} has no ctr_data table")
    stride = int(table["hash_stride"])
    flat = table["hash_map"]
    keys = np.array([int(k) for k in flat[0::stride]], np.uint64)
    counts = np.array([flat[i + 1: i + stride] for i in range(0, len(flat), stride)], np.float64)
    counts = counts.reshape(len(keys), stride - 1)
    real = keys != _EMPTY
    order = np.argsort(keys[real], kind="stable")
    return Ctr(
        ctr_type=ctr_type,
        cat_features=tuple(cat_features),
        float_elements=tuple(float_elements),
        one_hot_elements=tuple(one_hot_elements),
        prior_num=float(ctr.get("prior_numerator", 0.0)),
        prior_denom=float(ctr.get("prior_denomerator", ctr.get("prior_denominator", 1.0))),
        shift=float(ctr.get("shift", 0.0)),
        scale=float(ctr.get("scale", 1.0)),
        target_border_idx=int(ctr.get("target_border_idx", 0)),
        borders=np.asarray(ctr["borders"], np.float32),
        keys=keys[real][order],
        counts=counts[real][order],
        counter_denominator=float(table.get("counter_denominator", 0)),
    )
