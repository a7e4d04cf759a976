"""Read CatBoost's binary model files (``.cbm``) without CatBoost.

The layout (CatBoost's ``TFullModel::Save``, ``catboost/libs/model/model.cpp``): the signature
``b"CBM1"``, the core's size (``u32``; ``0xFFFFFFFF`` then a ``u64`` for 4 GiB and more), the core
(a FlatBuffers ``TModelCore``, ``catboost/libs/model/flatbuffers/model.fbs``: format version,
``TModelTrees``, the model's metadata as key/value strings, and the ids of the parts that follow
it), then each part: for ``"static_provider_v1"`` (the CTR tables) a count and, per table, its
size and a FlatBuffers ``TCtrValueTable`` (``ctr_data.fbs``, read in
:mod:`jaximp._importers.cbm_ctrs`).

:func:`read_cbm` turns a file into the dict CatBoost's JSON export (``save_model(path,
format="json")``, ``json_model_helpers.cpp``) would give, so that every importer reads one
description of the model; two things the export loses are kept: each CTR's target classifier
(``target_border_classifier_idx``, with one table per classifier: multi-target models keep one
per target) and the exact float sums of mean-value CTRs (the export's reload rounds them).
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np

from jaximp._importers.cbm_buffers import Table, corrupt, read_u32, root
from jaximp._importers.cbm_ctrs import ctr_description, ctr_tables

SIGNATURE = b"CBM1"
_FORMAT = "FlabuffersModel_v1"  # sic, CatBoost's CURRENT_CORE_FORMAT_STRING
_CTR_PART = "static_provider_v1"
_NAN_TREATMENTS = ("AsIs", "AsFalse", "AsTrue")
_MAX_OBLIVIOUS_DEPTH = 62  # 2**depth leaves counted in int64
MAX_TREE_DEPTH = 64  # non-symmetric trees: CatBoost trains at most 16 levels

# field numbers of TModelTrees (model.fbs)
(_DIMENSION, _SPLITS, _SIZES, _STARTS, _CAT, _FLOAT, _ONE_HOT, _CTRS, _VALUES, _WEIGHTS, _STEPS,
 _NODE_LEAVES, _TEXT, _ESTIMATED, _SCALE, _BIAS, _MULTI_BIAS, _REPACKED, _EMBEDDING) = range(19)
_STEP = np.dtype([("left", "<u2"), ("right", "<u2")])


def read_size(data: bytes, at: int, what: str) -> tuple[int, int]:
    """``(size, position after it)`` of CatBoost's ``SaveSize`` at ``at``."""
    size, at = read_u32(data, at, f"the size of {what}")
    if size == 0xFFFFFFFF:
        if at + 8 > len(data):
            raise corrupt(f"the file ends before the size of {what}")
        size = struct.unpack_from("<Q", data, at)[0]
        at += 8
    if size > len(data) - at:
        raise corrupt(f"{what} declares {size} bytes, but the file has {len(data) - at} left (truncated?)")
    return size, at


def read_cbm(data: bytes) -> dict:
    """The model of a ``.cbm`` file's bytes, as CatBoost's JSON export lays it out (see the module
    docstring).

    Raises:
        ValueError: not a CatBoost model (no ``CBM1`` signature), a truncated or damaged file, a
            format version or model part jaximp does not know.
    """
    if data[:4] != SIGNATURE:
        raise ValueError(f"the file does not start with CatBoost's signature {SIGNATURE!r} "
                         f"(it starts with {bytes(data[:4])!r}): not a .cbm model")
    size, at = read_size(data, 4, "the model core")
    core = root(bytes(data[at:at + size]), "the model core")
    version = core.string(0, "the format version")
    if version != _FORMAT:
        raise ValueError(f"unknown model format version {version!r} (CatBoost writes {_FORMAT!r})")
    trees = core.table(1, "the trees")
    if trees is None:
        raise ValueError("the model core has no trees")
    info = {kv.string(0, "a metadata key") or "": kv.string(1, "a metadata value") or ""
            for kv in core.tables(2, "the metadata")}
    at += size
    tables: dict = {}
    for part in core.strings(3, "the model part ids"):
        if part == _CTR_PART:
            tables, at = ctr_tables(data, at)
        elif "text" in part.lower() or "embed" in part.lower():  # "text_process...", "embed_process..."
            break  # text and embedding features: their features_info entries are refused
        else:
            raise ValueError(f"unknown model part {part!r} after the model core")
    return model_json(trees, info, tables)


def _model_info(info: dict[str, str]) -> dict:
    """The metadata as the JSON export writes it: values of keys ending in "params" parsed."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        if key.endswith("params") and value:
            try:
                out[key] = json.loads(value)
            except (ValueError, RecursionError) as e:
                raise ValueError(f"the metadata {key!r} is not valid JSON ({type(e).__name__})") from e
        else:
            out[key] = value
    return out


def model_json(trees: Table, info: dict[str, str], tables: dict) -> dict:
    """The JSON export's dict of a model core's ``TModelTrees`` (see the module docstring)."""
    features, bin_features = _features_info(trees)
    n_outputs = trees.scalar(_DIMENSION, "i", 1)
    if not 1 <= n_outputs <= 1 << 16:
        raise ValueError(f"the model declares {n_outputs} outputs")
    multi_bias = trees.array(_MULTI_BIAS, "<f8", "the bias")
    bias = multi_bias.tolist() if len(multi_bias) else [trees.scalar(_BIAS, "d", 0.0)]
    out = {"model_info": _model_info(info), "features_info": features,
           "scale_and_bias": [trees.scalar(_SCALE, "d", 1.0), bias]}
    if "text_features" in features or "embedding_features" in features:
        return out  # their splits are not read: the importers refuse such models
    steps = trees.array(_STEPS, _STEP, "the tree nodes")
    layout = _non_symmetric if len(steps) else _oblivious
    out["trees" if len(steps) else "oblivious_trees"] = layout(trees, bin_features, n_outputs, steps)
    if features.get("ctrs"):
        out["ctr_data"] = {key: tables[key] for key in {ctr["table"] for ctr in features["ctrs"]}
                           if key in tables}
        missing = [ctr["identifier"] for ctr in features["ctrs"] if ctr["table"] not in tables]
        if missing:
            raise ValueError(f"the CTR {missing[0]} has no table in the file")
    return out


def _features_info(trees: Table) -> tuple[dict, list[dict]]:
    """``(features_info, the splits of the model's binary features in split_index order)``."""
    info: dict[str, Any] = {}
    floats, splits = [], []
    for f in trees.tables(_FLOAT, "the float features"):
        borders = f.array(3, "<f4", "the borders").tolist()
        treatment = f.scalar(5, "b", 0)
        if not 0 <= treatment < len(_NAN_TREATMENTS):
            raise ValueError(f"a float feature has an unknown NaN treatment {treatment}")
        floats.append({"has_nans": bool(f.scalar(0, "?", False)), "feature_index": f.scalar(1, "i", -1),
                       "flat_feature_index": f.scalar(2, "i", -1), "borders": borders,
                       "feature_id": f.string(4, "the feature id") or "",
                       "nan_value_treatment": _NAN_TREATMENTS[treatment]})
        splits += [{"border": b, "float_feature_index": floats[-1]["feature_index"], "split_type": "FloatFeature"}
                   for b in borders]
    if floats:
        info["float_features"] = floats
    one_hot = {}
    for o in trees.tables(_ONE_HOT, "the one-hot features"):
        one_hot[o.scalar(0, "i", -1)] = values = o.array(1, "<i4", "the one-hot values").tolist()
        splits += [{"cat_feature_index": o.scalar(0, "i", -1), "value": v, "split_type": "OneHotFeature"}
                   for v in values]
    cats = []
    for c in trees.tables(_CAT, "the categorical features"):
        cats.append({"feature_index": c.scalar(0, "i", -1), "flat_feature_index": c.scalar(1, "i", -1),
                     "feature_id": c.string(2, "the feature id") or ""})
        if cats[-1]["feature_index"] in one_hot:
            cats[-1]["values"] = one_hot[cats[-1]["feature_index"]]
    if cats:
        info["categorical_features"] = cats
    ctrs = [ctr_description(c) for c in trees.tables(_CTRS, "the CTR features")]
    for ctr in ctrs:
        splits += [{"border": b, "ctr_target_border_idx": ctr["target_border_idx"], "split_type": "OnlineCtr"}
                   for b in ctr["borders"]]
    if ctrs:
        info["ctrs"] = ctrs
    for index, kind in ((_TEXT, "text"), (_EMBEDDING, "embedding")):
        found = trees.tables(index, f"the {kind} features")
        if found:
            info[f"{kind}_features"] = [len(found)]  # refused by check_supported
    estimated = trees.tables(_ESTIMATED, "the estimated features")  # computed from text or embeddings
    if estimated and "text_features" not in info and "embedding_features" not in info:
        info["text_features"] = [len(estimated)]
    return info, splits


def _split(bin_features: list[dict], index: int) -> dict:
    if not 0 <= index < len(bin_features):
        raise ValueError(f"a split reads binary feature {index}; the model has {len(bin_features)}")
    return dict(bin_features[index], split_index=index)


def _tree_starts(trees: Table, sizes: np.ndarray, n_splits: int) -> np.ndarray:
    """``int64[T]`` each tree's first entry of the per-split (per-node) arrays, checked."""
    if (sizes < 0).any():
        raise ValueError("a tree declares a negative size")
    ends = np.cumsum(sizes, dtype=np.int64)
    if len(sizes) and ends[-1] != n_splits:
        raise ValueError(f"the trees declare {int(ends[-1])} splits in all; the file holds {n_splits}")
    starts = ends - sizes
    declared = trees.array(_STARTS, "<i4", "the tree offsets")
    if len(declared) and not np.array_equal(declared, starts):
        raise ValueError("the trees' start offsets do not match their sizes")
    return starts


def _oblivious(trees: Table, bin_features: list[dict], n_outputs: int, _steps: Any) -> list[dict]:
    """The JSON export's ``oblivious_trees`` (``splits`` is None for a tree without splits)."""
    depths = trees.array(_SIZES, "<i4", "the tree depths").astype(np.int64)
    splits = trees.array(_SPLITS, "<i4", "the tree splits")
    starts = _tree_starts(trees, depths, len(splits))
    if len(depths) and depths.max() > _MAX_OBLIVIOUS_DEPTH:
        raise ValueError(f"a tree declares depth {int(depths.max())} (2**depth leaves)")
    leaves = np.left_shift(np.int64(1), depths)
    values = trees.array(_VALUES, "<f8", "the leaf values")
    weights = trees.array(_WEIGHTS, "<f8", "the leaf weights")
    if int(leaves.sum()) * n_outputs != len(values):  # python ints: no overflow
        raise ValueError(f"the trees declare {int(leaves.sum()) * n_outputs} leaf values; the file "
                         f"holds {len(values)}")
    if len(weights) and int(leaves.sum()) != len(weights):
        raise ValueError(f"the trees declare {int(leaves.sum())} leaf weights; the file holds {len(weights)}")
    out = []
    value_at = np.cumsum(leaves * n_outputs) - leaves * n_outputs
    weight_at = np.cumsum(leaves) - leaves
    for t, depth in enumerate(depths.tolist()):
        tree: dict[str, Any] = {}
        if len(weights):
            tree["leaf_weights"] = weights[weight_at[t]:weight_at[t] + (1 << depth)].tolist()
        tree["leaf_values"] = values[value_at[t]:value_at[t] + (n_outputs << depth)].tolist()
        own = splits[starts[t]:starts[t] + depth].tolist()
        tree["splits"] = [_split(bin_features, s) for s in own] or None  # as the export writes it
        out.append(tree)
    return out


def _non_symmetric(trees: Table, bin_features: list[dict], n_outputs: int, steps: np.ndarray) -> list[dict]:
    """The JSON export's ``trees``: nested ``{"split", "left", "right"}`` nodes and
    ``{"value", "weight"}`` leaves (CatBoost's ``BuildTreeJson``), built without recursion."""
    sizes = trees.array(_SIZES, "<i4", "the tree sizes").astype(np.int64)
    splits = trees.array(_SPLITS, "<i4", "the tree splits")
    node_leaves = trees.array(_NODE_LEAVES, "<u4", "the node leaves")
    values = trees.array(_VALUES, "<f8", "the leaf values")
    weights = trees.array(_WEIGHTS, "<f8", "the leaf weights")
    if not len(steps) == len(splits) == len(node_leaves):
        raise ValueError(f"the trees hold {len(steps)} nodes, {len(splits)} splits and {len(node_leaves)} "
                         "node leaves; they must be as many")
    starts = _tree_starts(trees, sizes, len(steps))
    if (sizes == 0).any():
        raise ValueError("a non-symmetric tree has no nodes")

    def leaf(node: int) -> dict:
        at = int(node_leaves[node])
        if at + n_outputs > len(values) or (len(weights) and at // n_outputs >= len(weights)):
            raise ValueError(f"node {node} names leaf {at}, past the {len(values)} leaf values")
        out: dict[str, Any] = {"value": float(values[at]) if n_outputs == 1 else values[at:at + n_outputs].tolist()}
        if len(weights):
            out["weight"] = float(weights[at // n_outputs])
        return out

    visited = np.zeros(len(steps), bool)
    out = []
    for t, start in enumerate(starts.tolist()):
        end = start + int(sizes[t])
        top: dict[str, Any] = {}
        stack = [(start, top, "root", 0)]
        while stack:
            node, parent, key, level = stack.pop()
            if visited[node]:
                raise ValueError(f"node {node} of tree {t} has two parents: not a tree")
            if level > MAX_TREE_DEPTH:
                raise ValueError(f"tree {t} is deeper than {MAX_TREE_DEPTH} levels (CatBoost trains at most 16)")
            visited[node] = True
            left, right = int(steps["left"][node]), int(steps["right"][node])
            if left == 0 and right == 0:
                parent[key] = leaf(node)
                continue
            parent[key] = this = {"split": _split(bin_features, int(splits[node]))}
            for side, diff in (("right", right), ("left", left)):
                if diff == 0:
                    this[side] = leaf(node)
                elif node + diff >= end:
                    raise ValueError(f"node {node} of tree {t} points past the tree's {end - start} nodes")
                else:
                    stack.append((node + diff, this, side, level + 1))
        out.append(top["root"])
    return out
