"""The CTRs of a ``.cbm`` file: their descriptions in the model core and their value tables in
the ``"static_provider_v1"`` part after it.

A CTR's table is identified by its *base* (``TModelCtrBase``, ``ctr_data.fbs``): the feature
combination, the CTR type and the target classifier (``TargetBorderClassifierIdx``: one per
target of a multi-target model, which CatBoost's JSON export merges into one table). A
``TCtrValueTable`` holds an open-addressing hash index, ``IndexHashRaw``: ``2**k`` packed
buckets of ``(u64 hash, u32 row)`` (CatBoost's ``NCatboost::TBucket``; an empty bucket has the
hash ``2**64 - 1``), looked up from ``hash & (2**k - 1)`` onwards to the first empty bucket; and
the rows, ``CTRBlob``: per row ``TargetClassesCount`` int32 class counts (``Borders``,
``Buckets``), one int32 count (``Counter``, ``FeatureFreq``), or a float32 sum and an int32
count (the mean-value CTRs).
"""

from __future__ import annotations

import json

import numpy as np

from jaximp._importers.cbm_buffers import Table, corrupt, read_u32, root

_CTR_TYPES = ("Borders", "Buckets", "BinarizedTargetMeanValue", "FloatTargetMeanValue", "Counter",
              "FeatureFreq")
_BUCKET = np.dtype([("hash", "<u8"), ("row", "<u4")])  # packed: 12 bytes
_EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)
_FLOAT_SPLIT = np.dtype([("index", "<i4"), ("border", "<f4")])
_ONE_HOT_SPLIT = np.dtype([("index", "<i4"), ("value", "<i4")])


def _base(base: Table | None) -> tuple[str, list[dict], int]:
    """``(CTR type, combination elements as the JSON export writes them, target classifier)``
    of a ``TModelCtrBase``."""
    if base is None:
        raise ValueError("a CTR has no description (TModelCtrBase)")
    kind = base.scalar(1, "b", 0)
    if not 0 <= kind < len(_CTR_TYPES):
        raise ValueError(f"a CTR has an unknown type {kind}")
    combination = base.table(0, "the CTR's combination")
    elements: list[dict] = []
    if combination is not None:
        elements += [{"cat_feature_index": c, "combination_element": "cat_feature_value"}
                     for c in combination.array(0, "<i4", "the categorical features").tolist()]
        elements += [{"border": float(b), "combination_element": "float_feature", "float_feature_index": int(f)}
                     for f, b in combination.array(1, _FLOAT_SPLIT, "the float splits").tolist()]
        elements += [{"cat_feature_index": int(c), "combination_element": "cat_feature_exact_value", "value": int(v)}
                     for c, v in combination.array(2, _ONE_HOT_SPLIT, "the one-hot splits").tolist()]
    return _CTR_TYPES[kind], elements, base.scalar(2, "i", 0)


def _identifier(kind: str, elements: list[dict]) -> str:
    return json.dumps({"identifier": elements, "type": kind}, sort_keys=True, separators=(",", ":"))


def _table_key(identifier: str, classifier: int) -> str:
    return json.dumps([identifier, classifier])


def ctr_description(feature: Table) -> dict:
    """A ``TCtrFeature`` as an entry of the JSON export's ``features_info.ctrs``, with its target
    classifier and the key of its table in ``ctr_data`` (``"table"``)."""
    ctr = feature.table(0, "the CTR")
    if ctr is None:
        raise ValueError("a CTR feature has no CTR")
    kind, elements, classifier = _base(ctr.table(0, "the CTR's base"))
    identifier = _identifier(kind, elements)
    return {
        "borders": feature.array(1, "<f4", "the CTR's borders").tolist(),
        "ctr_type": kind,
        "elements": elements,
        "identifier": identifier,
        "prior_denomerator": ctr.scalar(3, "f", 1.0),  # sic, the export's key
        "prior_numerator": ctr.scalar(2, "f", 0.0),
        "scale": ctr.scalar(5, "f", 1.0),
        "shift": ctr.scalar(4, "f", 0.0),
        "target_border_idx": ctr.scalar(1, "i", 0),
        "target_border_classifier_idx": classifier,
        "table": _table_key(identifier, classifier),
    }


def ctr_tables(data: bytes, at: int) -> tuple[dict[str, dict], int]:
    """``({table key: table}, position after them)`` of the CTR part starting at ``at``; each
    table ``{"keys": u64[n], "counts": f64[n, m], "counter_denominator": int}``: per key of the
    hash index its row (see the module docstring)."""
    count, at = read_u32(data, at, "its CTR tables")
    if count * 4 > len(data) - at:
        raise corrupt(f"the file declares {count} CTR tables, more than its {len(data) - at} bytes left hold")
    tables = {}
    for k in range(count):
        size, at = read_u32(data, at, f"CTR table {k}")
        if size > len(data) - at:
            raise corrupt(f"CTR table {k} declares {size} bytes, but the file has {len(data) - at} left")
        key, table = _value_table(root(bytes(data[at:at + size]), f"CTR table {k}"))
        tables[key] = table  # a repeated base replaces the earlier one, as in CatBoost
        at += size
    return tables, at


def _rows(kind: str, blob: np.ndarray, n_classes: int) -> np.ndarray:
    """``f64[n_rows, m]`` the numbers of each row of a table's blob."""
    if kind in ("Borders", "Buckets"):
        if not 1 <= n_classes <= 1 << 16:
            raise ValueError(f"a CTR table declares {n_classes} target classes")
        width, dtype = 4 * n_classes, np.dtype("<i4")
    else:
        width, dtype = (8, np.dtype([("sum", "<f4"), ("count", "<i4")])) if "Mean" in kind else (4, np.dtype("<i4"))
    if len(blob) % width:
        raise ValueError(f"a {kind} CTR table holds {len(blob)} bytes, not a whole number of {width}-byte rows")
    rows = np.frombuffer(blob.tobytes(), dtype)
    if "Mean" in kind:
        return np.stack([rows["sum"].astype(np.float64), rows["count"].astype(np.float64)], axis=1)
    return rows.astype(np.float64).reshape(len(blob) // width, -1)


def _value_table(table: Table) -> tuple[str, dict]:
    """``(table key, table)`` of one ``TCtrValueTable``, its hash index checked: every key found
    where CatBoost's look-up finds it, once, naming a row that exists."""
    kind, elements, classifier = _base(table.table(0, "the table's CTR"))
    raw = table.array(1, "u1", "the hash index")
    if len(raw) % _BUCKET.itemsize:
        raise ValueError(f"a CTR hash index holds {len(raw)} bytes, not a whole number of 12-byte buckets")
    buckets = np.frombuffer(raw.tobytes(), _BUCKET)
    n = len(buckets)
    if n & (n - 1):
        raise ValueError(f"a CTR hash index has {n} buckets; CatBoost requires a power of 2")
    rows = _rows(kind, table.array(2, "u1", "the CTR values"), table.scalar(4, "i", 0))
    full = buckets["hash"] != _EMPTY
    keys, at = buckets["hash"][full], buckets["row"][full]
    if len(keys):
        if full.all():
            raise ValueError("a CTR hash index has no empty bucket (CatBoost's look-up of an unseen "
                             "category would never end)")
        if (at >= len(rows)).any():
            raise ValueError(f"a CTR hash index names row {int(at.max())} of a table of {len(rows)}")
        if len(np.unique(keys)) != len(keys):
            raise ValueError("a CTR hash index lists a key twice")
        empties = np.concatenate([[0], np.cumsum(~full)])  # empty buckets before each position
        position = np.flatnonzero(full)
        home = (keys & np.uint64(n - 1)).astype(np.int64)
        between = np.where(position >= home, empties[position] - empties[home],
                           empties[n] - empties[home] + empties[position])
        if (between > 0).any():
            raise ValueError("a CTR hash index holds a key where CatBoost's look-up cannot reach it")
    return _table_key(_identifier(kind, elements), classifier), {
        "keys": keys, "counts": rows[at], "counter_denominator": table.scalar(3, "i", 0), "ctr_type": kind}
