"""The featurizer of a CatBoost JSON model with categorical features: its one-hot values and its
CTRs with their tables (``features_info`` and ``ctr_data`` of CatBoost's JSON export)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from jaximp._models.featurizer import CTR_TYPES, Ctr, Featurizer

_EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)  # an empty slot of CatBoost's hash tables


# Strict readers of a JSON model's values: CatBoost's JSON reader takes a wrong type as 0 (and
# Python's int() truncates, NumPy parses numeric text), so a value of the wrong type is refused.


def integer(value: Any, what: str) -> int:
    """``value`` as an int: a JSON integer (or an integral float), never a bool, text or null."""
    if type(value) is int or (type(value) is float and value.is_integer()):
        return int(value)
    raise ValueError(f"{what} must be an integer; got {value!r}")


def _is_number(value: Any) -> bool:
    """A JSON number a double holds exactly: a float, or an integer within ``2**53``."""
    return type(value) is float or (type(value) is int and abs(value) <= 1 << 53)


def number(value: Any, what: str) -> float:
    """``value`` as a float: a JSON number, never a bool, text or null."""
    if _is_number(value):
        return float(value)
    raise ValueError(f"{what} must be a number; got {value!r}")


def numbers(values: Any, what: str) -> np.ndarray:
    """``f64[n]`` of a JSON list of numbers."""
    if not isinstance(values, list) or not all(_is_number(v) for v in values):
        raise ValueError(f"{what} must be a list of numbers (integers within 2**53)")
    return np.asarray(values, np.float64)


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
    cats = sorted(info.get("categorical_features", []), key=lambda c: integer(c["feature_index"], "feature_index"))
    if [integer(c["feature_index"], "feature_index") for c in cats] != list(range(len(cats))):
        raise ValueError("the categorical features' feature_index are not 0..n-1")
    one_hot = tuple((i, int(np.int32(integer(v, "a one-hot value")))) for i, c in enumerate(cats)
                    for v in c.get("values", []))
    if len(set(one_hot)) != len(one_hot):
        raise ValueError("a categorical feature lists a one-hot value twice")
    ctr_data = model_json.get("ctr_data", {})
    tables = _tables_by_base(ctr_data, len(float_features), len(cats))
    ctrs = tuple(_ctr(ctr, ctr_data, tables, len(float_features), len(cats)) for ctr in info.get("ctrs", []))
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
        float_columns=tuple(integer(f["flat_feature_index"], "flat_feature_index") for f in float_features),
        cat_columns=tuple(integer(c["flat_feature_index"], "flat_feature_index") for c in cats),
        one_hot=one_hot,
        ctrs=ctrs,
        float_nan_fill=tuple(nan_fill),
        digest=digest.hexdigest(),
        float_borders=float_borders,
        bin_dtype=np.uint8 if most_borders < 255 else np.int32,
    )


def _index(value: object, size: int, what: str) -> int:
    """``value`` as an index in ``[0, size)``, or a ``ValueError`` naming ``what``."""
    index = integer(value, what)
    if not 0 <= index < size:
        raise ValueError(f"{what} {index} is out of range: the model has {size}")
    return index


def sorted_borders(values: object, what: str) -> np.ndarray:
    """``f32[n]`` strictly increasing borders, as CatBoost writes them (jaximp counts a value's
    bin by binary search), or a ``ValueError`` naming ``what``."""
    borders = numbers(values, what).astype(np.float32)
    if np.isnan(borders).any() or (np.diff(borders) <= 0).any():
        raise ValueError(f"{what} are not strictly increasing numbers")
    return borders


# the fewest numbers a table's key needs, per CTR type
_WIDTH = {"Counter": 1, "FeatureFreq": 1, "BinarizedTargetMeanValue": 2, "FloatTargetMeanValue": 2,
          "Borders": 1, "Buckets": 1}


def _combination(elements: Any, n_float: int, n_cat: int) -> tuple[tuple, tuple, tuple]:
    """``(categorical features, (float feature, f32 border) pairs, (categorical feature, value)
    pairs)`` of a CTR's combination, in CatBoost's order within each kind, indices checked."""
    if not isinstance(elements, list):
        raise ValueError("a CTR's elements are not a list")
    cat_features, float_elements, one_hot_elements = [], [], []
    for element in elements:
        kind = element["combination_element"]
        if kind == "cat_feature_value":
            cat_features.append(_index(element["cat_feature_index"], n_cat, "a CTR's categorical feature"))
        elif kind == "float_feature":
            float_elements.append((_index(element["float_feature_index"], n_float, "a CTR's float feature"),
                                   float(np.float32(number(element["border"], "a CTR's float border")))))
        elif kind == "cat_feature_exact_value":
            one_hot_elements.append((_index(element["cat_feature_index"], n_cat, "a CTR's categorical feature"),
                                     int(np.int32(integer(element["value"], "a CTR's one-hot value")))))
        else:
            raise ValueError(f"unknown CTR combination element {kind!r}")
    return tuple(cat_features), tuple(float_elements), tuple(one_hot_elements)


def _tables_by_base(ctr_data: dict, n_float: int, n_cat: int) -> dict[tuple, dict]:
    """``{(CTR type, combination): table}`` of a JSON export's ``ctr_data``, each key parsed as
    CatBoost's JSON reader parses it (``{"identifier": elements, "type": type}``); the tables
    of a ``.cbm`` file are named by their CTRs instead."""
    out: dict[tuple, dict] = {}
    for key, table in ctr_data.items():
        if isinstance(table, dict) and "keys" in table:
            continue
        try:
            parsed = json.loads(key)
        except (ValueError, RecursionError) as e:
            raise ValueError(f"a ctr_data key is not a CTR description ({type(e).__name__})") from e
        base = (parsed["type"],) + _combination(parsed["identifier"], n_float, n_cat)
        if base in out:
            raise ValueError("two ctr_data tables describe one CTR")
        out[base] = table
    return out


def _ctr(ctr: dict, ctr_data: dict, tables: dict, n_float: int, n_cat: int) -> Ctr:
    """One CTR of ``features_info.ctrs`` with its table, every index checked against the model's
    ``n_float`` float and ``n_cat`` categorical features."""
    ctr_type = ctr["ctr_type"]
    if ctr_type not in CTR_TYPES:
        raise ValueError(f"unknown CTR type {ctr_type!r}")
    cat_features, float_elements, one_hot_elements = _combination(ctr["elements"], n_float, n_cat)
    if "table" in ctr:  # read from a .cbm file: the table of its base and target classifier
        table = ctr_data.get(ctr["table"])
    else:  # CatBoost's JSON reader matches the CTR's elements with the tables' parsed keys
        table = tables.get((ctr_type, cat_features, float_elements, one_hot_elements))
    if table is None:
        raise ValueError(f"the CTR {ctr.get('identifier')} has no ctr_data table")
    keys, counts = _table_arrays(table, ctr_type)
    real = keys != _EMPTY
    keys, counts = keys[real][::-1], counts[real][::-1]  # a key listed twice: the last, as CatBoost
    keys, first = np.unique(keys, return_index=True)
    counts = counts[first]
    target_border_idx = integer(ctr.get("target_border_idx", 0), "target_border_idx")
    if counts.shape[1] < _WIDTH[ctr_type] or (ctr_type in ("Borders", "Buckets")
                                              and not 0 <= target_border_idx < counts.shape[1]):
        raise ValueError(f"the {ctr_type} CTR {ctr['identifier']} has {counts.shape[1]} numbers per key "
                         f"and target_border_idx {target_border_idx}")
    return Ctr(
        ctr_type=ctr_type,
        cat_features=cat_features,
        float_elements=float_elements,
        one_hot_elements=one_hot_elements,
        prior_num=number(ctr.get("prior_numerator", 0.0), "prior_numerator"),
        prior_denom=number(ctr.get("prior_denomerator", ctr.get("prior_denominator", 1.0)), "prior_denomerator"),
        shift=number(ctr.get("shift", 0.0), "shift"),
        scale=number(ctr.get("scale", 1.0), "scale"),
        target_border_idx=target_border_idx,
        borders=sorted_borders(ctr["borders"], f"the borders of CTR {ctr['identifier']}"),
        keys=keys,
        counts=counts,
        counter_denominator=float(integer(table.get("counter_denominator", 0), "counter_denominator")),
        target_classifier=integer(ctr.get("target_border_classifier_idx", 0), "target_border_classifier_idx"),
    )


def _table_arrays(table: dict, ctr_type: str) -> tuple[np.ndarray, np.ndarray]:
    """``(u64[n] keys, f64[n, m] numbers)`` of a ``ctr_data`` table: arrays already (read from a
    ``.cbm`` file) or the JSON export's ``hash_map``, each key (a decimal string) followed by its
    ``hash_stride - 1`` numbers.

    Raises:
        ValueError: a stride below 2, a map that is not a whole number of strides, a key that is
            not an unsigned 64-bit integer in decimal text, or numbers that are not numbers (counts
            that are not integers: all but the sums of mean-value CTRs).
    """
    if "keys" in table:
        return np.asarray(table["keys"], np.uint64), np.asarray(table["counts"], np.float64)
    stride = integer(table["hash_stride"], "hash_stride")
    flat = table["hash_map"]
    if stride < 2 or not isinstance(flat, list) or len(flat) % stride:
        raise ValueError(f"a ctr_data hash_map is not a whole number of strides of {stride}")
    keys = flat[0::stride]
    if not all(isinstance(k, str) and k.isdigit() and int(k) < 1 << 64 for k in keys):
        raise ValueError("a ctr_data key is not an unsigned 64-bit integer in decimal text")
    counts = numbers([v for i, v in enumerate(flat) if i % stride], "the numbers of a ctr_data hash_map")
    counts = counts.reshape(len(keys), stride - 1)
    integral = counts[:, 1:] if "Mean" in ctr_type else counts  # a mean-value CTR's sums are fractional
    if not (np.array_equal(integral, np.round(integral)) and (np.abs(integral) < 2**31).all()):
        raise ValueError("a ctr_data count is not a 32-bit integer (CatBoost stores int32 counts)")
    if not np.isfinite(counts.astype(np.float32)).all():
        raise ValueError("a ctr_data sum is beyond float32 (CatBoost stores float32 sums)")
    return np.array([int(k) for k in keys], np.uint64), counts
