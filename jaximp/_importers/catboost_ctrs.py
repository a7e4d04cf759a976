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
    if [c["feature_index"] for c in cats] != list(range(len(cats))):
        raise ValueError("the categorical features' feature_index are not 0..n-1")
    one_hot = tuple((c["feature_index"], int(np.int32(int(v)))) for c in cats for v in c.get("values", []))
    if len(set(one_hot)) != len(one_hot):
        raise ValueError("a categorical feature lists a one-hot value twice")
    ctr_data = model_json.get("ctr_data", {})
    ctrs = tuple(_ctr(ctr, ctr_data, len(float_features), len(cats)) for ctr in info.get("ctrs", []))
    n_columns = len(float_features) + len(cats)
    float_borders = tuple(sorted_borders(f.get("borders", []), f"the borders of float feature {i}")
                          for i, f in enumerate(float_features))
    digest = hashlib.sha256(json.dumps([info.get("categorical_features"), info.get("ctrs")], sort_keys=True,
                                       default=str).encode())
    for ctr in ctrs:  # the tables, from their arrays
        for array in (ctr.keys, ctr.counts, np.float64(ctr.counter_denominator)):
            digest.update(np.ascontiguousarray(array).tobytes())
    most_borders = max([1] + [len(b) for b in float_borders] + [len(c.borders) for c in ctrs])
    return Featurizer(
        n_columns=n_columns,
        float_columns=tuple(f["flat_feature_index"] for f in float_features),
        cat_columns=tuple(c["flat_feature_index"] for c in cats),
        one_hot=one_hot,
        ctrs=ctrs,
        float_nan_fill=tuple(nan_fill),
        digest=digest.hexdigest(),
        float_borders=float_borders,
        bin_dtype=np.uint8 if most_borders < 255 else np.int32,
    )


def _index(value: object, size: int, what: str) -> int:
    """``value`` as an index in ``[0, size)``, or a ``ValueError`` naming ``what``."""
    index = int(value)
    if not 0 <= index < size:
        raise ValueError(f"{what} {index} is out of range: the model has {size}")
    return index


def sorted_borders(values: object, what: str) -> np.ndarray:
    """``f32[n]`` strictly increasing borders, as CatBoost writes them (jaximp counts a value's
    bin by binary search), or a ``ValueError`` naming ``what``."""
    borders = np.asarray(values, np.float32).reshape(-1)
    if np.isnan(borders).any() or (np.diff(borders) <= 0).any():
        raise ValueError(f"{what} are not strictly increasing numbers")
    return borders


# the fewest numbers a table's key needs, per CTR type
_WIDTH = {"Counter": 1, "FeatureFreq": 1, "BinarizedTargetMeanValue": 2, "FloatTargetMeanValue": 2,
          "Borders": 1, "Buckets": 1}


def _ctr(ctr: dict, ctr_data: dict, n_float: int, n_cat: int) -> Ctr:
    """One CTR of ``features_info.ctrs`` with its table, every index checked against the model's
    ``n_float`` float and ``n_cat`` categorical features."""
    ctr_type = ctr["ctr_type"]
    if ctr_type not in CTR_TYPES:
        raise ValueError(f"unknown CTR type {ctr_type!r}")
    cat_features, float_elements, one_hot_elements = [], [], []
    for element in ctr["elements"]:
        kind = element["combination_element"]
        if kind == "cat_feature_value":
            cat_features.append(_index(element["cat_feature_index"], n_cat, "a CTR's categorical feature"))
        elif kind == "float_feature":
            float_elements.append((_index(element["float_feature_index"], n_float, "a CTR's float feature"),
                                   float(np.float32(element["border"]))))
        elif kind == "cat_feature_exact_value":
            one_hot_elements.append((_index(element["cat_feature_index"], n_cat, "a CTR's categorical feature"),
                                     int(np.int32(int(element["value"])))))
        else:
            raise ValueError(f"unknown CTR combination element {kind!r}")
    table = ctr_data.get(ctr.get("table", ctr["identifier"]))
    if table is None:
        raise ValueError(f"the CTR {ctr['identifier']} has no ctr_data table")
    keys, counts = _table_arrays(table)
    real = keys != _EMPTY
    keys, counts = keys[real][::-1], counts[real][::-1]  # a key listed twice: the last, as CatBoost
    keys, first = np.unique(keys, return_index=True)
    counts = counts[first]
    target_border_idx = int(ctr.get("target_border_idx", 0))
    if counts.shape[1] < _WIDTH[ctr_type] or (ctr_type in ("Borders", "Buckets")
                                              and not 0 <= target_border_idx < counts.shape[1]):
        raise ValueError(f"the {ctr_type} CTR {ctr['identifier']} has {counts.shape[1]} numbers per key "
                         f"and target_border_idx {target_border_idx}")
    return Ctr(
        ctr_type=ctr_type,
        cat_features=tuple(cat_features),
        float_elements=tuple(float_elements),
        one_hot_elements=tuple(one_hot_elements),
        prior_num=float(ctr.get("prior_numerator", 0.0)),
        prior_denom=float(ctr.get("prior_denomerator", ctr.get("prior_denominator", 1.0))),
        shift=float(ctr.get("shift", 0.0)),
        scale=float(ctr.get("scale", 1.0)),
        target_border_idx=target_border_idx,
        borders=sorted_borders(ctr["borders"], f"the borders of CTR {ctr['identifier']}"),
        keys=keys,
        counts=counts,
        counter_denominator=float(table.get("counter_denominator", 0)),
        target_classifier=int(ctr.get("target_border_classifier_idx", 0)),
    )


def _table_arrays(table: dict) -> tuple[np.ndarray, np.ndarray]:
    """``(u64[n] keys, f64[n, m] numbers)`` of a ``ctr_data`` table: arrays already (read from a
    ``.cbm`` file) or the JSON export's ``hash_map``, each key (a decimal string) followed by its
    ``hash_stride - 1`` numbers.

    Raises:
        ValueError: a stride below 2, a map that is not a whole number of strides, a key that is
            not an unsigned 64-bit integer or numbers that are not numbers.
    """
    if "keys" in table:
        return np.asarray(table["keys"], np.uint64), np.asarray(table["counts"], np.float64)
    stride = int(table["hash_stride"])
    flat = table["hash_map"]
    if stride < 2 or not isinstance(flat, list) or len(flat) % stride:
        raise ValueError(f"a ctr_data hash_map of {len(flat)} entries is not a whole number of strides of {stride}")
    keys = [int(k) for k in flat[0::stride]]
    if any(not 0 <= k < 1 << 64 for k in keys):
        raise ValueError("a ctr_data key is not an unsigned 64-bit integer")
    counts = np.array([flat[i + 1: i + stride] for i in range(0, len(flat), stride)], np.float64)
    return np.array(keys, np.uint64), counts.reshape(len(keys), stride - 1)
