"""Rows of a ``catboost.Pool`` with categorical features, read by CatBoost itself.

A Pool keeps only CatBoost's hashes of its categorical values, with no getter for them, so the
rows' evaluated features (``jaximp._models.featurizer``) are read through a *probe*: a CatBoost
model built from the ensemble alone, whose features are the model's (float features with their
borders and NaN treatment, categorical features, one-hot values, CTRs with their tables, each
table keyed by its target classifier as in the model) and whose oblivious trees split on the
ensemble's distinct splits, ``_PROBE_BITS`` a tree, with leaf values 0. CatBoost's
``calc_leaf_indexes`` of the probe on the Pool gives the outcome of every split (bit ``d`` of a
row's leaf in probe tree ``p`` is split ``p * _PROBE_BITS + d``), and each evaluated feature gets
the smallest bin that agrees with every outcome: every kernel then sees CatBoost's decisions.

The probe is written as CatBoost's binary format (``.cbm``: the signature ``b"CBM1"``, the size
and FlatBuffers bytes of a ``TModelCore``, then the CTR value tables, see
``jaximp._importers.cbm``) rather than as JSON: CatBoost's JSON reader rounds the float sums of
mean-value CTRs and keeps one table per CTR over all targets, and either would change decisions.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from jaximp._models.ensemble import Ensemble
from jaximp._models.featurizer import Ctr, Featurizer
from jaximp._rows.frames import EvaluatedRows

_PROBE_BITS = 8  # splits per probe tree (256 leaves each)
_CTR_TYPES = ("Borders", "Buckets", "BinarizedTargetMeanValue", "FloatTargetMeanValue", "Counter",
              "FeatureFreq")
_EMPTY = 0xFFFFFFFFFFFFFFFF


# --------------------------------------------------------------------------------------------
# FlatBuffers, written front to back: a table's children come after it (offsets are unsigned)


class _Table:
    """A table to write: ``{field number: (struct format, value)}`` for scalars, or an object
    (``_Table``, ``_Vector``, ``str``, a list of tables) for offset fields."""

    def __init__(self, fields: dict[int, Any]):
        self.fields = fields


class _Vector:
    """A vector of fixed-size elements (a NumPy array: scalars or packed structs)."""

    def __init__(self, array: np.ndarray):
        self.array = np.ascontiguousarray(array)


def _align(buf: bytearray, to: int, then: int = 0) -> None:
    """Pad ``buf`` so that ``len(buf) + then`` is a multiple of ``to``."""
    buf.extend(b"\0" * (-(len(buf) + then) % to))


def flatbuffer(top: _Table) -> bytes:
    """The FlatBuffers bytes of ``top`` and everything it holds, every scalar aligned to its size."""
    buf = bytearray(4)  # the root offset
    pending: list[tuple[Any, int]] = [(top, 0)]
    while pending:
        item, referrer = pending.pop(0)
        if isinstance(item, _Table):
            at = _write_table(buf, item, pending)
        elif isinstance(item, _Vector):
            _align(buf, max(4, item.array.dtype.alignment), then=4)
            at = len(buf)
            buf += struct.pack("<I", len(item.array)) + item.array.tobytes()
        elif isinstance(item, str):
            _align(buf, 4)
            at = len(buf)
            data = item.encode()
            buf += struct.pack("<I", len(data)) + data + b"\0"
        else:  # a vector of tables or strings
            _align(buf, 4)
            at = len(buf)
            buf += struct.pack("<I", len(item)) + b"\0" * (4 * len(item))
            pending += [(child, at + 4 + 4 * k) for k, child in enumerate(item)]
        struct.pack_into("<I", buf, referrer, at - referrer)
    _align(buf, 8)
    return bytes(buf)


def _write_table(buf: bytearray, table: _Table, pending: list) -> int:
    """Write ``table`` (its vtable just before it) and queue its children; its position."""
    slots = []  # (field, size, format, value): scalars largest first, then offsets
    for field, value in table.fields.items():
        if isinstance(value, tuple):
            slots.append((field, struct.calcsize("<" + value[0]), value[0], value[1]))
        else:
            slots.append((field, 4, None, value))
    slots.sort(key=lambda slot: -slot[1])
    offsets, inline = {}, 4
    for field, size, _, _ in slots:
        inline += -inline % size
        offsets[field] = inline
        inline += size
    inline += -inline % 4
    n_fields = max(table.fields) + 1 if table.fields else 0
    vtable = struct.pack(f"<HH{n_fields}H", 4 + 2 * n_fields, inline, *(offsets.get(f, 0) for f in range(n_fields)))
    _align(buf, 2)
    vtable_at = len(buf)
    buf += vtable
    _align(buf, 8)
    at = len(buf)
    body = bytearray(inline)
    struct.pack_into("<i", body, 0, at - vtable_at)
    for field, _, fmt, value in slots:
        if fmt is not None:
            struct.pack_into("<" + fmt, body, offsets[field], value)
        else:
            pending.append((value, at + offsets[field]))
    buf += body
    return at


# --------------------------------------------------------------------------------------------
# The probe model


def _ctr_base(ctr: Ctr) -> _Table:
    """CatBoost's ``TModelCtrBase`` of a CTR: its combination, type and target classifier."""
    floats = np.array(list(ctr.float_elements), dtype=[("index", "<i4"), ("border", "<f4")])
    one_hot = np.array(list(ctr.one_hot_elements), dtype=[("index", "<i4"), ("value", "<i4")])
    combination = _Table({0: _Vector(np.asarray(ctr.cat_features, "<i4")), 1: _Vector(floats),
                          2: _Vector(one_hot)})
    return _Table({0: combination, 1: ("b", _CTR_TYPES.index(ctr.ctr_type)), 2: ("i", ctr.target_classifier)})


def hash_index(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(u64[size] hashes, u32[size] rows)``: CatBoost's open-addressing index of ``keys`` (see
    ``jaximp._importers.cbm_ctrs``), ``size`` a power of 2 at least twice the keys. Keys sorted by
    their home bucket ``hash & (size - 1)`` take consecutive free buckets, so every bucket from a
    key's home to its own is taken: CatBoost's look-up finds it, and stops at an empty bucket for
    any other hash. A run that would wrap past the last bucket doubles the size."""
    size = 1 << max(1, (2 * len(keys) - 1).bit_length())
    for _ in range(64 - size.bit_length()):
        home = (keys & np.uint64(size - 1)).astype(np.int64)
        order = np.argsort(home, kind="stable")
        steps = np.arange(len(keys))
        slots = np.maximum.accumulate(home[order] - steps) + steps if len(keys) else steps
        if not len(keys) or slots[-1] < size:
            break
        size *= 2
    hashes = np.full(size, _EMPTY, np.uint64)
    rows = np.zeros(size, np.uint32)
    hashes[slots], rows[slots] = keys[order], order
    return hashes, rows


def _value_table(ctr: Ctr) -> bytes:
    """A ``TCtrValueTable`` of the CTR's keys (:func:`hash_index`) and numbers."""
    hashes, rows = hash_index(np.asarray(ctr.keys, np.uint64))
    buckets = np.empty(len(hashes), [("hash", "<u8"), ("row", "<u4")])
    buckets["hash"], buckets["row"] = hashes, rows
    n_keys = len(ctr.keys)
    counts = np.asarray(ctr.counts)
    if "Mean" in ctr.ctr_type:
        blob = np.empty(n_keys, [("sum", "<f4"), ("count", "<i4")])
        blob["sum"], blob["count"] = counts[:, 0], counts[:, 1]
    else:
        blob = counts.astype("<i4")
    n_classes = counts.shape[1] if ctr.ctr_type in ("Borders", "Buckets") else 0
    return flatbuffer(_Table({0: _ctr_base(ctr), 1: _Vector(buckets.view(np.uint8)), 2: _Vector(blob.view(np.uint8)),
                              3: ("i", int(ctr.counter_denominator)), 4: ("i", n_classes)}))


def _split_offsets(featurizer: Featurizer) -> np.ndarray:
    """``i64[E]`` the index of each evaluated feature's first binary feature in CatBoost's order
    (the float features' borders, then the one-hot values, then the CTRs' borders)."""
    counts = [len(b) for b in featurizer.float_borders] + [1] * len(featurizer.one_hot)
    counts += [len(ctr.borders) for ctr in featurizer.ctrs]
    return np.cumsum([0] + counts[:-1]).astype(np.int64)


def probe_cbm(featurizer: Featurizer, names: tuple[str, ...], split_indices: np.ndarray) -> bytes:
    """The ``.cbm`` bytes of a probe of ``featurizer``'s features (columns named ``names``) whose
    oblivious trees split on ``split_indices`` (binary features, CatBoost's order),
    ``_PROBE_BITS`` a tree, leaf values 0."""
    f = featurizer
    float_features = [_Table({0: ("?", True), 1: ("i", i), 2: ("i", column), 3: _Vector(np.asarray(borders, "<f4")),
                              4: names[column], 5: ("b", 2 if f.float_nan_fill[i] > 0 else 1)})
                      for i, (column, borders) in enumerate(zip(f.float_columns, f.float_borders))]
    cat_features = [_Table({0: ("i", i), 1: ("i", column), 2: names[column]}) for i, column in enumerate(f.cat_columns)]
    one_hot: dict[int, list[int]] = {}
    for c, value in f.one_hot:
        one_hot.setdefault(c, []).append(value)
    one_hot_features = [_Table({0: ("i", c), 1: _Vector(np.asarray(values, "<i4"))}) for c, values in one_hot.items()]
    ctr_features = [
        _Table({0: _Table({0: _ctr_base(ctr), 1: ("i", ctr.target_border_idx), 2: ("f", ctr.prior_num),
                           3: ("f", ctr.prior_denom), 4: ("f", ctr.shift), 5: ("f", ctr.scale)}),
                1: _Vector(np.asarray(ctr.borders, "<f4"))})
        for ctr in f.ctrs]
    sizes = [min(_PROBE_BITS, len(split_indices) - s) for s in range(0, len(split_indices), _PROBE_BITS)]
    trees = _Table({
        0: ("i", 1), 1: _Vector(np.asarray(split_indices, "<i4")), 2: _Vector(np.asarray(sizes, "<i4")),
        3: _Vector(np.arange(0, len(split_indices), _PROBE_BITS, dtype="<i4")), 4: cat_features, 5: float_features,
        6: one_hot_features, 7: ctr_features, 8: _Vector(np.zeros(sum(1 << s for s in sizes), "<f8")),
    })
    tables: dict[tuple, bytes] = {}
    for ctr in f.ctrs:  # one table per CTR base, as CatBoost keys them
        key = (ctr.ctr_type, ctr.cat_features, ctr.float_elements, ctr.one_hot_elements, ctr.target_classifier)
        if key not in tables:
            tables[key] = _value_table(ctr)
    core = flatbuffer(_Table({0: "FlabuffersModel_v1", 1: trees, 3: ["static_provider_v1"] if tables else []}))
    out = bytearray(b"CBM1" + struct.pack("<I", len(core)) + core)
    if tables:
        out += struct.pack("<I", len(tables))
        for table in tables.values():
            out += struct.pack("<I", len(table)) + table
    return bytes(out)


# --------------------------------------------------------------------------------------------
# Rows


def _oblivious_splits(ens: Any) -> tuple[np.ndarray, np.ndarray]:
    t, d = np.nonzero(np.asarray(ens.split_mask))
    return np.asarray(ens.split_features)[t, d], np.asarray(ens.split_bins)[t, d]


def _tree_splits(ens: Any) -> tuple[np.ndarray, np.ndarray]:
    borders = np.asarray(ens.node_borders)
    real = np.isfinite(borders)  # padded nodes have border +inf; real ones the border's index
    return np.asarray(ens.node_features)[real], borders[real].astype(np.int64)


# layout -> (evaluated feature, border index) of every split of the ensemble
_SPLITS: dict[str, Callable[[Any], tuple[np.ndarray, np.ndarray]]] = {
    "oblivious": _oblivious_splits,
    "trees": _tree_splits,
}


_POPCOUNT = np.array([bin(v).count("1") for v in range(256)], np.uint16)
_CHUNK = 1 << 24  # leaf indices read from CatBoost at a time (rows x probe trees)


def _bins_from_leaves(leaves: np.ndarray, features: np.ndarray, thresholds: np.ndarray,
                      out: np.ndarray) -> None:
    """Write into ``out [n, E]`` each evaluated feature's bin from the probe's leaves ``[n, P]``.

    The splits are laid out grouped by evaluated feature, thresholds ascending (split ``s`` is
    bit ``s % _PROBE_BITS`` of probe tree ``s // _PROBE_BITS``). A feature's splits are true for
    thresholds below its bin and false from it on (``bin > j``), so the number ``c`` of its true
    splits gives the bin, ``thresholds[c - 1] + 1`` (0 when none is), the smallest bin that
    agrees with every outcome; each count is a popcount of a few bits of one or two leaves.
    """
    starts = np.flatnonzero(np.r_[True, np.diff(features) != 0])
    ends = np.r_[starts[1:], len(features)]
    for a, b in zip(starts.tolist(), ends.tolist()):
        count = np.zeros(len(leaves), np.uint16)
        for tree in range(a // _PROBE_BITS, (b - 1) // _PROBE_BITS + 1):
            lo, hi = max(a, tree * _PROBE_BITS), min(b, (tree + 1) * _PROBE_BITS)
            bits = (leaves[:, tree] >> (lo - tree * _PROBE_BITS)) & ((1 << (hi - lo)) - 1)
            count += _POPCOUNT[bits]
        table = np.r_[0, thresholds[a:b] + 1].astype(out.dtype)
        out[:, features[a]] = table[count]


def pool_rows(pool: Any, ens: Ensemble, fn_name: str, arg: str = "X") -> EvaluatedRows:
    """``[N, E]`` the bins of the evaluated features (``ens.featurizer.bin_dtype``) of a
    ``catboost.Pool`` with categorical features, as CatBoost reads the Pool (see the module
    docstring). Costs one probe model loaded into CatBoost and its ``calc_leaf_indexes``, read
    in slices of the Pool so that the leaf indices held at once stay bounded.

    Raises:
        TypeError: the Pool has text or embedding features, or CatBoost cannot read it with the
            model's features (CatBoost's message).
        ValueError: the Pool has no rows.
    """
    import catboost

    if pool.get_text_feature_indices() or pool.get_embedding_feature_indices():
        raise TypeError(f"{fn_name}: {arg} must be a catboost.Pool without text or embedding features, "
                        "which the model does not use")
    n = pool.num_row()
    if n == 0:
        raise ValueError(f"{fn_name}: {arg} must have at least one row; got an empty catboost.Pool")
    featurizer = ens.featurizer
    out = np.zeros((n, ens.n_evaluated), featurizer.bin_dtype)
    features, thresholds = _SPLITS[ens.layout](ens)
    pairs = np.unique(np.stack([features, thresholds], axis=1).astype(np.int64).reshape(-1, 2), axis=0)
    if not len(pairs):
        return out.view(EvaluatedRows)
    features, thresholds = pairs[:, 0], pairs[:, 1]  # sorted by feature, then threshold
    probe = catboost.CatBoost()
    probe.load_model(blob=probe_cbm(featurizer, ens.feature_names, _split_offsets(featurizer)[features] + thresholds))
    step = max(1, _CHUNK // -(-len(pairs) // _PROBE_BITS))
    for start in range(0, n, step):
        part = pool if step >= n else pool.slice(list(range(start, min(n, start + step))))
        try:
            leaves = np.asarray(probe.calc_leaf_indexes(part), np.uint8)  # [n, probe trees], < 2**8
        except catboost.CatBoostError as e:
            raise TypeError(f"{fn_name}: {arg} is a catboost.Pool that CatBoost cannot read with the model's "
                            f"features ({e})") from e
        _bins_from_leaves(leaves, features, thresholds, out[start:start + len(leaves)])
    return out.view(EvaluatedRows)
