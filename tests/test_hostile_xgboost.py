"""Hostile XGBoost model files: a damaged or malicious JSON or UBJSON document gives XGBoost's
numbers or a clear ``ValueError`` starting ``from_xgboost:``, within the time and address-space
limit of tests/hostile.py; never a traceback from deep inside, a hang or a huge allocation.
Also the padded layout every general-tree importer shares (jaximp._importers.padded): its memory
budget and its refusal of leaf values beyond float32.

Regression tests name each case: a UBJSON count past the data, deep nesting, declared sizes
(``num_feature``, ``num_class``, ``num_target``, ``num_nodes``, ``iteration_indptr``) the content
does not have, child ids outside the tree, cycles, shared subtrees, category ids, fields of the
wrong type, leaf values beyond float32, one deep tree among many stumps. Property-based tests
(hypothesis) damage real model files (truncate, flip and overwrite bytes, nest deeper, set a
field to another value or type, delete it, shorten or lengthen an array) and check the property.

Oracle for the files jaximp accepts: XGBoost itself, loading the same bytes in a subprocess
(XGBoost trusts child and parent ids and can crash on a damaged file) under its own address-space
limit; its ``predict(output_margin=True)`` and ``pred_leaf`` must equal jaximp's (assert_close,
leaves exactly). Where XGBoost refuses or crashes on a file jaximp accepts, there is no reference
number: jaximp reads fewer fields than XGBoost (``parents`` only for consistency, not
``base_weights`` of scalar trees) and reads integers where XGBoost wants floats.
"""

from __future__ import annotations

import copy
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
from hostile import EXAMPLES, assert_clear_refusal, outcome
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from models import XGBOOST_SMALL, make_data, with_tree_sizes, xgboost_small
from oracles import assert_close

import jaximp
from jaximp._importers.padded import ModelFields, ParsedTree, pad_trees
from jaximp._importers.ubjson import loads

# Documents, files and the property ------------------------------------------------------------------


def document(name: str) -> dict:
    """A fresh copy of the JSON document of ``xgboost_small(name)``."""
    return json.loads(xgboost_small(name).model.save_raw("json"))


def trees_of(doc: dict) -> list:
    return doc["learner"]["gradient_booster"]["model"]["trees"]


def ubjson(value) -> bytes:
    """``value`` as XGBoost writes UBJSON: keys and counts as int64, integers in the smallest
    type, float32 numbers where exact, NumPy arrays strongly typed (round-trips XGBoost's files)."""
    out = bytearray()
    _write(value, out)
    return bytes(out)


def _length(n, out):
    out += b"L" + struct.pack(">q", n)


def _write(v, out):
    if v is None or isinstance(v, bool):
        out += {None: b"Z", True: b"T", False: b"F"}[v]
    elif isinstance(v, (int, np.integer)):
        for marker, code, bits in ((b"i", "b", 7), (b"U", "B", 8), (b"I", "h", 15), (b"l", "i", 31), (b"L", "q", 63)):
            low = 0 if marker == b"U" else -(1 << bits)
            if low <= int(v) < 1 << bits:
                out += marker + struct.pack(">" + code, int(v))
                return
        text = str(int(v)).encode()
        out += b"H"
        _length(len(text), out)
        out += text
    elif isinstance(v, (float, np.floating)):
        f = float(v)
        exact = not np.isfinite(f) or (abs(f) < 3.4e38 and float(np.float32(f)) == f)
        out += b"d" + struct.pack(">f", f) if exact else b"D" + struct.pack(">d", f)
    elif isinstance(v, str):
        out += b"S"
        _length(len(v.encode()), out)
        out += v.encode()
    elif isinstance(v, np.ndarray):
        marker = {"f4": b"d", "i4": b"l", "i8": b"L", "u1": b"U"}[v.dtype.str[1:]]
        out += b"[$" + marker + b"#"
        _length(len(v), out)
        out += v.astype(v.dtype.newbyteorder(">")).tobytes()
    elif isinstance(v, list):
        out += b"[#"
        _length(len(v), out)
        for item in v:
            _write(item, out)
    else:
        out += b"{"
        for key, item in v.items():
            _length(len(key.encode()), out)
            out += key.encode()
            _write(item, out)
        out += b"}"


def rows_for(name: str, n_features: int) -> np.ndarray:
    """The rows of ``xgboost_small(name)`` cut or padded (NaN) to ``n_features`` columns."""
    x = xgboost_small(name).X
    pad = np.full((len(x), max(0, n_features - x.shape[1])), np.nan, np.float32)
    return np.concatenate([x, pad], axis=1)[:, :n_features]


def accepted_or_refused(source, found: list | None = None, name: str | None = None, blob: bytes | None = None):
    """The property's first half: ``from_xgboost(source)`` returns an ensemble that predicts, or
    refuses clearly, within the limits; an accepted one's numbers (and its file) go to ``found``
    for the comparison with XGBoost. Returns ``"value"`` or ``"refused"``."""
    kind, result = outcome(lambda: jaximp.from_xgboost(source))
    assert kind != "failed", f"{type(result).__name__}: {result}"
    if kind == "refused":
        assert_clear_refusal(result)
        return kind
    x = rows_for(name, result.n_features) if name else None
    if x is not None:
        numbers = outcome(lambda: (np.asarray(jaximp.predict(result, x)), np.asarray(jaximp.leaf_indices(result, x))))
        assert numbers[0] == "value", f"{type(numbers[1]).__name__}: {numbers[1]}"
        if found is not None:
            found.append(dict(blob=blob, rows=x, margin=numbers[1][0], leaves=numbers[1][1]))
    return kind


_REFERENCE = r"""
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
import numpy as np
import xgboost as xgb
folder, n = sys.argv[1], int(sys.argv[2])
for i in range(int(sys.argv[3]), n):
    try:
        booster = xgb.Booster(model_file=f"{folder}/{i}.model")
        x = np.load(f"{folder}/{i}.rows.npy")
        types = booster.feature_types if booster.feature_types and len(booster.feature_types) == x.shape[1] else None
        data = xgb.DMatrix(x, feature_types=types, enable_categorical=bool(types) and "c" in types)
        margin, leaves = booster.predict(data, output_margin=True), booster.predict(data, pred_leaf=True)
        np.savez(f"{folder}/{i}.npz", margin=margin, leaves=leaves)
    except Exception as e:  # XGBoost refuses the file
        open(f"{folder}/{i}.refused", "w").write(str(e)[:300])
"""


def xgboost_reference(found: list, folder) -> dict:
    """XGBoost's numbers of each accepted file, loaded in a subprocess (restarted after a crash
    on a file, which then has none): ``{i: (margin, leaves)}``, and the counts of files XGBoost
    refused or crashed on."""
    for i, case in enumerate(found):
        (folder / f"{i}.model").write_bytes(case["blob"])
        np.save(folder / f"{i}.rows.npy", case["rows"])
    numbers, counts, start = {}, {"refused": 0, "crashed": 0}, 0
    while start < len(found):
        done = subprocess.run([sys.executable, "-c", _REFERENCE, str(folder), str(len(found)), str(start)],
                              capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
        while start < len(found):
            if (folder / f"{start}.npz").exists():
                with np.load(folder / f"{start}.npz") as saved:
                    numbers[start] = (saved["margin"], saved["leaves"])
            elif (folder / f"{start}.refused").exists():
                counts["refused"] += 1
            else:
                break
            start += 1
        if start < len(found):  # XGBoost crashed on this file
            assert done.returncode != 0, done.stderr[-2000:]
            counts["crashed"] += 1
            print(f"XGBoost crashed ({done.returncode}) on {folder / f'{start}.model'}")
            start += 1
    return numbers, counts


def assert_xgboost_agrees(found: list, folder) -> dict:
    """The property's second half: every file jaximp accepted that XGBoost predicts with gives
    XGBoost's margins and leaves."""
    numbers, counts = xgboost_reference(found, folder)
    for i, (margin, leaves) in numbers.items():
        case = found[i]
        try:
            assert_close(case["margin"], margin.reshape(case["margin"].shape))
            np.testing.assert_array_equal(case["leaves"], leaves.reshape(case["leaves"].shape))
        except AssertionError as e:
            raise AssertionError(f"jaximp and XGBoost differ on {folder / f'{i}.model'}: {e}") from None
    return dict(counts, agreed=len(numbers))


# The UBJSON reader ---------------------------------------------------------------------------------


def with_count(blob: bytes, field: bytes, count: int) -> bytes:
    """``blob`` (XGBoost's UBJSON) with the count of the first array ``field`` set to ``count``."""
    at = blob.index(field + b"[") + len(field) + 1
    at = blob.index(b"#L", at) + 2
    return blob[:at] + struct.pack(">q", count) + blob[at + 8:]


@pytest.mark.parametrize("field, count", [(b"split_conditions", 1 << 40), (b"split_conditions", -5),
                                          (b"trees", 1 << 62), (b"iteration_indptr", 1 << 50)])
def test_ubjson_count_past_the_data(field, count):
    """A typed array's count (raw float32 block) or a container's count larger than the file."""
    blob = bytes(xgboost_small("numeric").model.save_raw("ubj"))
    kind, error = outcome(lambda: jaximp.from_xgboost(with_count(blob, field, count)))
    assert kind == "refused"
    assert_clear_refusal(error, "UBJSON")


@pytest.mark.parametrize("blob", [b"{L\x00\x00\x00\x00\x00\x00\x00\x01a[$Z#L\x40\x00\x00\x00\x00\x00\x00\x00}",
                                  b"{L\x00\x00\x00\x00\x00\x00\x00\x01aSL\x7f\xff\xff\xff\xff\xff\xff\xff}",
                                  b"{L\x00\x00\x00\x00\x00\x00\x00\x01aHL\x00\x00\x00\x00\x00\x00\x13\x88" + b"9" * 5000
                                  + b"}", b"{" + b"L\x00\x00\x00\x00\x00\x00\x00\x01a{" * 100 + b"}" * 101],
                         ids=["nulls", "string", "huge-integer", "nested"])
def test_ubjson_without_payload_or_too_deep(blob):
    """Elements without payload (2**62 nulls in no bytes), a string past the data, a 5000-digit
    integer, nesting deeper than any model."""
    kind, error = outcome(lambda: jaximp.from_xgboost(blob))
    assert kind == "refused"
    assert_clear_refusal(error, "not a readable")
    with pytest.raises(ValueError):
        loads(blob)


def test_json_nested_deeper_than_python():
    """Deeply nested JSON: Python's reader raises RecursionError, jaximp a clear refusal."""
    blob = b'{"learner": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    kind, error = outcome(lambda: jaximp.from_xgboost(blob))
    assert kind == "refused"
    assert_clear_refusal(error, "nested deeper")
    doc = document("numeric")
    value = []
    for _ in range(200):
        value = [value]
    doc["learner"]["gradient_booster"]["model"]["tree_info"] = value
    for blob in (json.dumps(doc).encode(), ubjson(doc)):
        kind, error = outcome(lambda: jaximp.from_xgboost(blob))
        assert kind == "refused"
        assert_clear_refusal(error)


# Declared sizes, ids and types ----------------------------------------------------------------------


def _set(path: str, value):
    """A change of the document at ``path`` (keys and indices by "/"; ``T`` for trees[0])."""
    def change(doc):
        keys = path.replace("T/", "learner/gradient_booster/model/trees/0/").split("/")
        node = doc
        for key in keys[:-1]:
            node = node[int(key)] if isinstance(node, list) else node[key]
        last = int(keys[-1]) if isinstance(node, list) else keys[-1]
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value(node[last]) if callable(value) else value
    return change


_DELETE = object()
_PARAM = "learner/learner_model_param/"
CASES = {  # name: (model, change of the document, words the refusal names)
    "num_feature-huge": ("numeric", _set(_PARAM + "num_feature", str(1 << 40)), ["num_feature"]),
    "num_feature-negative": ("numeric", _set(_PARAM + "num_feature", "-1"), ["num_feature"]),
    "num_feature-not-int": ("numeric", _set(_PARAM + "num_feature", "4.5"), ["num_feature", "integer"]),
    "num_feature-small": ("numeric", _set(_PARAM + "num_feature", "1"), ["feature"]),
    "num_class-huge": ("numeric", _set(_PARAM + "num_class", str(1 << 31)), ["num_class"]),
    "num_target-huge": ("vector", _set(_PARAM + "num_target", "1000000000"), ["num_target"]),
    "num_target-vector": ("vector", _set(_PARAM + "num_target", "3"), ["num_target"]),
    "base_score-overflow": ("numeric", _set(_PARAM + "base_score", "[1E39]"), ["base_score"]),
    "base_score-words": ("numeric", _set(_PARAM + "base_score", "[half]"), ["base_score"]),
    "num_nodes-more": ("numeric", _set("T/tree_param/num_nodes", lambda n: str(int(n) + 4)), ["num_nodes"]),
    "num_nodes-negative": ("numeric", _set("T/tree_param/num_nodes", "-1"), ["num_nodes"]),
    "num_nodes-text": ("numeric", _set("T/tree_param/num_nodes", "many"), ["num_nodes", "integer"]),
    "array-short": ("numeric", _set("T/split_conditions", lambda a: a[:-1]), ["split_conditions", "num_nodes"]),
    "size_leaf_vector-negative": ("vector", _set("T/tree_param/size_leaf_vector", "-3"), ["size_leaf_vector"]),
    "child-negative": ("numeric", _set("T/left_children/0", -5), ["children"]),
    "child-past-the-end": ("numeric", _set("T/right_children/0", 1000), ["children"]),
    "child-root": ("numeric", _set("T/left_children/1", 0), ["children"]),
    "child-int64": ("numeric", _set("T/left_children/0", 1 << 62), ["children"]),
    "child-huge": ("numeric", _set("T/left_children/0", 1 << 70), ["left_children"]),
    "cycle": ("numeric", _set("T/left_children/1", 1), ["reached twice"]),
    "shared-subtree": ("numeric", _set("T/right_children/0", lambda _: 1), ["reached twice"]),
    "parent": ("numeric", _set("T/parents/3", (1 << 63) - 1), ["parent"]),
    "feature-negative": ("numeric", _set("T/split_indices/0", -1), ["feature"]),
    "feature-past-num_feature": ("numeric", _set("T/split_indices/0", 4), ["feature", "num_feature"]),
    "category-negative": ("categorical", lambda d: _categorical_tree(d, "categories", -1), ["categories"]),
    "category-int64": ("categorical", lambda d: _categorical_tree(d, "categories", 1 << 40), ["categories", "int32"]),
    "category-segment": ("categorical", lambda d: _categorical_tree(d, "categories_segments", 10_000),
                         ["categories"]),
    "category-node": ("categorical", lambda d: _categorical_tree(d, "categories_nodes", 0), ["categorical"]),
    "leaf-overflow": ("numeric", lambda d: _leaf(d, 1e39), ["leaf value", "float32"]),
    "leaf-nan": ("numeric", lambda d: _leaf(d, float("nan")), ["leaf value", "float32"]),
    "condition-nan": ("numeric", _set("T/split_conditions/0", float("nan")), ["node 0"]),
    "condition-below-float32": ("numeric", _set("T/split_conditions/0", -1e39), ["node 0"]),
    "cover-inf": ("numeric", _set("T/sum_hessian/0", float("inf")), ["cover"]),
    "tree_info": ("numeric", _set("learner/gradient_booster/model/tree_info/0", 7), ["tree_info"]),
    "iteration_indptr": ("numeric", _set("learner/gradient_booster/model/iteration_indptr/3", 1 << 40),
                         ["iteration_indptr"]),
    "num_trees": ("numeric", _set("learner/gradient_booster/model/gbtree_model_param/num_trees", "9"), ["num_trees"]),
    "weight_drop": ("numeric", lambda d: d["learner"]["gradient_booster"].update(weight_drop=[1.0]),
                    ["weight_drop"]),
    "booster-list": ("numeric", _set("learner/gradient_booster", []), ["tree booster"]),
    "model-string": ("numeric", _set("learner/gradient_booster/model", "trees"), ["corrupt"]),
    "tree-id-twice": ("numeric", _set("learner/gradient_booster/model/trees/1/id", 0), ["tree ids"]),
    "tree-id-past": ("numeric", _set("learner/gradient_booster/model/trees/1/id", 3), ["id"]),
    "tree-number": ("numeric", _set("learner/gradient_booster/model/trees/1", 3), ["tree 1"]),
    "trees-missing": ("numeric", _set("learner/gradient_booster/model/trees", _DELETE), ["corrupt", "trees"]),
    "conditions-dict": ("numeric", _set("T/split_conditions", {"a": 1}), ["split_conditions"]),
    "conditions-strings": ("numeric", _set("T/split_conditions", lambda a: ["x"] * len(a)), ["split_conditions"]),
    "feature_names": ("numeric", _set("learner/feature_names", ["a", 3]), ["feature_names"]),
    "cats": ("categorical", _set("learner/gradient_booster/model/cats/enc", {"a": 1}), ["cats"]),
}


def _categorical_tree(doc, key, value):
    """Set ``key[0]`` of the first tree with categorical splits, made tree 0."""
    tree = next(t for t in trees_of(doc) if t["categories"])
    tree[key][0] = value
    trees_of(doc)[0] = tree


def _leaf(doc, value):
    tree = trees_of(doc)[0]
    tree["split_conditions"][tree["left_children"].index(-1)] = value


@pytest.mark.parametrize("case", list(CASES))
def test_damaged_document(case):
    """Each named damage, in JSON and UBJSON: a clear refusal naming it, within the limits."""
    name, change, words = CASES[case]
    doc = document(name)
    change(doc)
    for blob in (json.dumps(doc).encode(), ubjson(doc)):
        kind, error = outcome(lambda: jaximp.from_xgboost(blob))
        assert kind == "refused", f"{case}: {kind} {error}"
        assert_clear_refusal(error, *words)


def test_trees_in_the_order_of_their_ids():
    """XGBoost puts each tree at its ``id``, whatever the list's order: so does jaximp."""
    import xgboost as xgb

    fitted = xgboost_small("numeric")
    doc = document("numeric")
    trees = trees_of(doc)
    trees[0]["id"], trees[1]["id"] = 1, 0  # listed in the other order
    booster = xgb.Booster(model_file=bytearray(json.dumps(doc).encode()))
    ens = jaximp.from_xgboost(doc)
    data = xgb.DMatrix(fitted.X)
    assert_close(jaximp.predict(ens, fitted.X), booster.predict(data, output_margin=True))
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, fitted.X), booster.predict(data, pred_leaf=True))
    np.testing.assert_array_equal(np.asarray(ens.leaf_values)[:2], np.asarray(fitted.ens.leaf_values)[[1, 0]])


def test_categories_xgboost_cannot_read_are_ignored():
    """A listed category at or past 2**24 matches no value in XGBoost (it reads every value
    there as no category): the mask stays small and the numbers are the model's."""
    fitted = xgboost_small("categorical")
    doc = document("categorical")
    for tree in trees_of(doc):  # each categorical node also lists category 2**31 - 1
        for i in reversed(range(len(tree["categories_nodes"]))):
            end = tree["categories_segments"][i] + tree["categories_sizes"][i]
            tree["categories"].insert(end, (1 << 31) - 1)
            tree["categories_sizes"][i] += 1
            tree["categories_segments"][i + 1:] = [s + 1 for s in tree["categories_segments"][i + 1:]]
    kind, ens = outcome(lambda: jaximp.from_xgboost(doc))
    assert kind == "value" and ens.node_categories.shape[-1] == 1
    assert_close(jaximp.predict(ens, fitted.X), jaximp.predict(fitted.ens, fitted.X))
    np.testing.assert_array_equal(ens.node_categories, fitted.ens.node_categories)


# The padded layout: its budget and float32 leaves ----------------------------------------------------


def _balanced_tree(depth: int) -> dict:
    """An XGBoost tree of depth ``depth``, every leaf at that depth (heap numbering)."""
    n = (2 << depth) - 1
    ids = np.arange(n)
    internal = ids < (1 << depth) - 1
    return dict(left_children=np.where(internal, 2 * ids + 1, -1).tolist(),
                right_children=np.where(internal, 2 * ids + 2, -1).tolist(),
                parents=np.concatenate([[2147483647], (ids[1:] - 1) // 2]).tolist(),
                split_indices=(ids % 4 * internal).tolist(), split_conditions=np.where(internal, 0.0, 0.1).tolist(),
                default_left=[0] * n, loss_changes=[1.0] * n, sum_hessian=[1.0] * n, base_weights=[0.0] * n,
                split_type=[0] * n, categories=[], categories_nodes=[], categories_segments=[], categories_sizes=[],
                tree_param=dict(num_nodes=str(n), size_leaf_vector="1", num_feature="4", num_deleted="0"), id=0)


def test_one_deep_tree_among_many_stumps():
    """4000 single leaves and one tree of 32768 leaves: every stump padded to the deep tree, the
    layout would take 4.6 GiB; refused with the size and the reason before it is allocated."""
    doc = document("numeric")
    model = doc["learner"]["gradient_booster"]["model"]
    stump = _balanced_tree(0)
    model["trees"] = [dict(stump, id=i) for i in range(4000)] + [dict(_balanced_tree(15), id=4000)]
    model["tree_info"] = [0] * len(model["trees"])
    model["iteration_indptr"] = list(range(len(model["trees"]) + 1))
    model["gbtree_model_param"]["num_trees"] = str(len(model["trees"]))
    kind, error = outcome(lambda: jaximp.from_xgboost(doc), megabytes=512)
    assert kind == "refused", f"{kind}: {error}"
    assert_clear_refusal(error, "4001 trees", "32768 leaves", "GiB", "at most 1 leaves", "JAXIMP_MAX_PADDED_BYTES")


def test_padded_budget_from_the_environment(monkeypatch):
    fitted = xgboost_small("numeric")
    monkeypatch.setenv("JAXIMP_MAX_PADDED_BYTES", "100")
    with pytest.raises(ValueError, match=r"^from_xgboost: the dense layout of the model's 3 trees.* \d+ bytes, "
                                         r"more than the 100 bytes jaximp allows"):
        jaximp.from_xgboost(fitted.model)
    monkeypatch.setenv("JAXIMP_MAX_PADDED_BYTES", str(1 << 20))
    assert jaximp.from_xgboost(fitted.model).n_trees == 3
    monkeypatch.setenv("JAXIMP_MAX_PADDED_BYTES", "lots")
    with pytest.raises(ValueError, match="JAXIMP_MAX_PADDED_BYTES must be a number of bytes"):
        jaximp.from_xgboost(fitted.model)


def _stump(values) -> ParsedTree:
    return ParsedTree(root=0, node_features=np.zeros(1, np.int64), node_borders=np.zeros(1, np.float32),
                      node_nan_right=np.zeros(1, bool), node_children=np.asarray([[-1, -2]]),
                      leaf_values=np.asarray(values), depth=1, output=0, leaf_ids=np.asarray([1, 2]))


def test_leaf_values_beyond_float32_are_refused_by_every_importer(tmp_path):
    """The shared padded layout refuses a leaf value float32 cannot hold (it became inf), naming
    the tree and the leaf: XGBoost (JSON holds float64 text), LightGBM (text), scikit-learn."""
    fields = ModelFields(bias=np.zeros(1), feature_names=("a",), nan_modes=("AsIs",), loss_function="")
    with pytest.raises(ValueError, match=r"^from_test: tree 1's leaf 1 \(number 2 in the model\) holds 1e\+39"):
        pad_trees([_stump([0.5, 1.0]), _stump([0.0, 1e39])], fields, fn_name="from_test")
    with pytest.raises(ValueError, match="tree 0's leaf 0 .* holds nan"):
        pad_trees([_stump([np.nan, 1.0])], fields, fn_name="from_test")
    ens = pad_trees([_stump([0.0, 3e38])], fields, fn_name="from_test")  # within float32
    assert np.isfinite(np.asarray(ens.leaf_values)).all()
    from models import lightgbm_model

    text = lightgbm_model("regression").model.model_to_string()
    at = text.index("\nleaf_value=") + len("\nleaf_value=")
    path = tmp_path / "model.txt"
    path.write_text(with_tree_sizes(text[:at] + "1e39 " + text[text.index(" ", at) + 1:]))  # a readable text
    with pytest.raises(ValueError, match=r"^from_lightgbm: tree 0's leaf 0 .* holds 1e\+39"):
        jaximp.from_lightgbm(path)
    from sklearn.tree import DecisionTreeRegressor

    X, y = make_data("regression", n=100)
    tree = DecisionTreeRegressor(max_depth=2, random_state=0).fit(X, y)
    tree.tree_.value[2, 0, 0] = -1e39
    with pytest.raises(ValueError, match=r"^from_sklearn: the tree's node 2 has leaf value -1e\+39, which is no "
                                         r"finite float32"):
        jaximp.from_sklearn(tree)


def test_padded_layout_checks_outputs():
    fields = ModelFields(bias=np.zeros(2), feature_names=("a",), nan_modes=("AsIs",), loss_function="")
    wrong = dataclass_replace(_stump([0.0, 1.0]), output=2)
    with pytest.raises(ValueError, match="tree 0 adds to output 2 .* 2 outputs"):
        pad_trees([wrong], fields, fn_name="from_test")
    with pytest.raises(ValueError, match="^from_test: the model has no trees"):
        pad_trees([], fields, fn_name="from_test")


def dataclass_replace(tree, **changes):
    import dataclasses

    return dataclasses.replace(tree, **changes)


# Property-based: damaged real files ---------------------------------------------------------------


_INTERESTING = [-2, -1, 0, 1, 2, 3, 7, 2**31 - 1, 2**31, 2**40, 2**63 - 1, -(2**63), 2**70, 1.5, float("nan"),
                float("inf"), -float("inf"), 1e39, "abc", "7", "-1", "99999999999", None, [], {}, True]
_OF_A_KIND = {  # values of the same JSON type: damage that XGBoost loads too, so that numbers are compared
    int: [-2, -1, 0, 1, 2, 3, 5, 7, 2**31 - 1, 2**40],
    float: [0.0, -1.5, 0.25, 1e-45, 3e38, 1e39, -1e39, float("nan"), float("inf"), -float("inf")],
    str: ["0", "1", "2", "3", "4", "-1", "7", "2147483647", "1e5", "abc", "[1E39]", "[5E-1,5E-1]"],
}


def _places(doc, depth=0, out=None) -> list:
    """Every ``(container, key)`` of the document, down to ``depth`` 12."""
    out = [] if out is None else out
    if depth > 12:
        return out
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        out.append((doc, key))
        _places(value, depth + 1, out)
    return out


@st.composite
def damaged_documents(draw):
    """A real model's document with one to three fields set to another value or type, deleted,
    shortened, lengthened or nested deeper; as JSON or UBJSON bytes."""
    name = draw(st.sampled_from(XGBOOST_SMALL))
    doc = copy.deepcopy(document(name))
    for _ in range(draw(st.integers(1, 3))):
        places = _places(doc)
        if not places:
            break
        container, key = places[draw(st.integers(0, len(places) - 1))]
        change = draw(st.sampled_from(["set", "set", "set", "delete", "shorten", "lengthen", "nest"]))
        value = container[key]
        if change == "set" or (change in ("shorten", "lengthen") and not isinstance(value, list)):
            same = _OF_A_KIND.get(type(value))
            container[key] = draw(st.sampled_from(same if same and draw(st.booleans()) else _INTERESTING))
        elif change == "delete" and isinstance(container, dict):
            del container[key]
        elif change == "shorten":
            container[key] = value[:draw(st.integers(0, max(0, len(value) - 1)))]
        elif change == "lengthen":
            container[key] = value + draw(st.lists(st.sampled_from(_INTERESTING), min_size=1, max_size=3))
        else:
            for _ in range(draw(st.sampled_from([1, 3, 100, 5000]))):
                value = [value]
            container[key] = value
    as_json = draw(st.booleans())
    try:
        blob = json.dumps(doc).encode() if as_json else ubjson(doc)
    except RecursionError:
        blob = b'{"learner": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    return name, blob


@st.composite
def damaged_bytes(draw):
    """A real model file's bytes (JSON or UBJSON) cut short, with bytes flipped, eight bytes
    overwritten by a huge count, or brackets inserted."""
    name = draw(st.sampled_from(XGBOOST_SMALL))
    model = xgboost_small(name).model
    blob = bytearray(model.save_raw("json" if draw(st.booleans()) else "ubj"))
    at = draw(st.integers(0, len(blob) - 1))
    change = draw(st.sampled_from(["cut", "flip", "flip", "count", "nest"]))
    if change == "cut":
        return name, bytes(blob[:at])
    if change == "flip":
        for position in draw(st.lists(st.integers(0, len(blob) - 1), min_size=1, max_size=4)):
            blob[position] ^= draw(st.integers(1, 255))
        return name, bytes(blob)
    if change == "count":
        blob[at:at + 8] = b"\x7f\xff\xff\xff\xff\xff\xff\xff"[:len(blob[at:at + 8])]
        return name, bytes(blob)
    return name, bytes(blob[:at] + b"[" * draw(st.sampled_from([10, 1000, 100_000])) + blob[at:])


def _property(strategy, examples, folder):
    found = []

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(strategy)
    def check(case):
        name, blob = case
        accepted_or_refused(blob, found, name, blob)

    check()
    counts = assert_xgboost_agrees(found, folder)
    print(f"accepted {len(found)}: {counts}")
    return counts


def test_damaged_documents(tmp_path):
    """Fields of real files set to other values and types, deleted, resized, nested deeper:
    XGBoost's numbers or a clear refusal."""
    _property(damaged_documents(), EXAMPLES, tmp_path)


def test_damaged_bytes(tmp_path):
    """Real files cut, flipped, overwritten and nested at the byte level: XGBoost's numbers or a
    clear refusal."""
    _property(damaged_bytes(), EXAMPLES, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", [damaged_documents, damaged_bytes], ids=["documents", "bytes"])
def test_damaged_files_many(strategy, tmp_path):
    counts = _property(strategy(), 20 * EXAMPLES, tmp_path)
    assert counts["agreed"] > 0
