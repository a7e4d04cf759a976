"""Hostile CatBoost model files: ``from_catboost`` gives CatBoost's numbers or a clear refusal
(``ValueError``/``TypeError`` naming ``from_catboost`` and the problem), within the time and
address-space limits of ``tests/hostile.py``; never a traceback from deep inside, a hang or an
allocation sized by a declared count.

Property-based tests (hypothesis) mutate real model files, JSON exports and ``.cbm`` files of
oblivious and non-symmetric, numeric and categorical models: values replaced by hostile ones
(huge, negative, wrong types, deeply nested), keys deleted, bytes truncated or flipped, declared
sizes and offsets overwritten. Where jaximp accepts a mutated file, CatBoost loads the same file
and both predict the same rows (the reference; a file CatBoost refuses has none). Regression
tests pin each known case: declared sizes, deep nesting, escaping errors, the dense-layout
budget. ``JAXIMP_HYPOTHESIS_EXAMPLES`` sets the examples per property (25 by default; the slow
variants run 10 times more).
"""

from __future__ import annotations

import copy
import json
import struct

import catboost
import models
import numpy as np
import pytest
from hostile import EXAMPLES, assert_clear_refusal, outcome
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracles import assert_close

import jaximp

SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))

# The files mutated -------------------------------------------------------------------------------------------


def _small_models() -> dict:
    """name -> (model, rows a Pool is built from, cat_features): small real models of each kind."""
    frame = models.make_frame(200, seed=0)
    cat = catboost.CatBoost(dict(loss_function="Logloss", iterations=4, depth=3, random_seed=0, verbose=0,
                                 thread_count=1, allow_writing_files=False, cat_features=models.CAT,
                                 one_hot_max_size=4, max_ctr_complexity=2))
    cat.fit(frame, models.make_target(frame, "binary"))
    X, y = models.make_data("multiclass", n=200, n_features=4, nan_fraction=0.05)
    numeric = catboost.CatBoost(dict(loss_function="MultiClass", iterations=4, depth=3, random_seed=0, verbose=0,
                                     thread_count=1, allow_writing_files=False)).fit(X, y)
    X2, y2 = models.make_data("regression", n=200, n_features=4, nan_fraction=0.05)
    trees = catboost.CatBoost(dict(loss_function="RMSE", iterations=3, grow_policy="Lossguide", max_leaves=6,
                                   random_seed=0, verbose=0, thread_count=1, allow_writing_files=False)).fit(X2, y2)
    return {"categorical": (cat, frame.iloc[:30], models.CAT), "multiclass": (numeric, X[:30], None),
            "lossguide": (trees, X2[:30], None)}


_MODELS = _small_models()
_FILES: dict[tuple[str, str], bytes] = {}


def _file(name: str, fmt: str) -> bytes:
    """The bytes of model ``name`` saved as ``fmt`` ("cbm" or "json")."""
    if (name, fmt) not in _FILES:
        path = models.write_json({}).replace("model.json", f"model.{fmt}")
        _MODELS[name][0].save_model(path, format=fmt)
        with open(path, "rb") as f:
            _FILES[name, fmt] = f.read()
    return _FILES[name, fmt]


def _write(data: bytes, fmt: str) -> str:
    path = models.write_json({}).replace("model.json", f"hostile.{fmt}")
    with open(path, "wb") as f:
        f.write(data)
    return path


def _catboost_raw(path: str, fmt: str, name: str):
    """CatBoost's raw predictions of the rows with the model in ``path``, or None when CatBoost
    refuses the file or the rows."""
    _, rows, cats = _MODELS[name]
    model = catboost.CatBoost()
    try:
        model.load_model(path, format=fmt)
        return np.asarray(model.predict(catboost.Pool(rows, cat_features=cats), prediction_type="RawFormulaVal"))
    except catboost.CatBoostError:
        return None


def check_property(data: bytes, fmt: str, name: str) -> str:
    """The hostile-input property for one file: a clear refusal, or CatBoost's predictions."""
    path = _write(data, fmt)
    kind, result = outcome(lambda: jaximp.from_catboost(path))
    assert kind != "failed", f"{type(result).__name__}: {result}"
    if kind == "refused":
        assert_clear_refusal(result)
        assert str(result).startswith("from_catboost: ")
        return kind
    _, rows, cats = _MODELS[name]
    reference = _catboost_raw(path, fmt, name)
    kind_rows, got = outcome(lambda: result.predict(rows))
    assert kind_rows != "failed", f"{type(got).__name__}: {got}"
    if reference is not None and kind_rows == "value" and np.isfinite(reference).all():
        assert_close(np.asarray(got).reshape(reference.shape), reference, rtol=1e-4)
    return kind


# JSON mutations -------------------------------------------------------------------------------------------------------


def _locations(node, path=()):
    """Every (path, value) inside a parsed JSON document."""
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _locations(value, path + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _locations(value, path + (i,))


def _set(document, path, value):
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value


HOSTILE_VALUES = st.one_of(
    st.integers(-2**70, 2**70), st.sampled_from([-1, 0, 1, 2**31, -2**31 - 1, 2**64, 30, 64]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e39, -1e39, 3.4e38]),
    st.text(max_size=8), st.none(), st.booleans(), st.just([]), st.just({}),
    st.lists(st.integers(-5, 5), max_size=4), st.just([[[[[1]]]]]),
)
JSON_NAMES = st.sampled_from(sorted(_MODELS))


@st.composite
def json_mutants(draw):
    """``(name, bytes)``: a model's JSON export with one value replaced, a key deleted, or the text
    truncated."""
    name = draw(JSON_NAMES)
    original = json.loads(_file(name, "json"))
    document = copy.deepcopy(original)
    places = [(p, v) for p, v in _locations(document) if p and p[0] != "model_info"]
    path, _ = draw(st.randoms(use_true_random=False)).choice(places)  # uniformly: integers() favour the first
    how = draw(st.sampled_from(["replace", "replace", "delete", "truncate"]))
    if how == "replace":
        _set(document, path, draw(HOSTILE_VALUES))
    elif how == "delete":
        parent = document
        for key in path[:-1]:
            parent = parent[key]
        del parent[path[-1]]
    text = json.dumps(document).encode()
    if how == "truncate":
        text = text[:draw(st.integers(0, len(text) - 1))]
    return name, text


# .cbm mutations -------------------------------------------------------------------------------------------------------


def _structure(name: str) -> np.ndarray:
    """Positions of a .cbm file outside its runs of text (the metadata: training parameters as
    JSON, most of a small model's bytes), where the trees, features and CTR tables are."""
    data = np.frombuffer(_file(name, "cbm"), np.uint8)
    text = (data >= 0x20) & (data < 0x7F)
    edges = np.flatnonzero(np.diff(np.r_[0, text.astype(np.int8), 0]))
    keep = np.ones(len(data), bool)
    for start, end in zip(edges[::2], edges[1::2]):
        if end - start >= 32:
            keep[start:end] = False
    return np.flatnonzero(keep)


@st.composite
def cbm_mutants(draw):
    """``(name, bytes)``: a model's .cbm file truncated, with bytes flipped, or with an aligned
    32-bit word (a declared size, an offset, a count, a value) overwritten."""
    name = draw(JSON_NAMES)
    data = bytearray(_file(name, "cbm"))
    how = draw(st.sampled_from(["truncate", "flip", "word", "word"]))
    if how == "truncate":
        return name, bytes(data[:draw(st.integers(0, len(data) - 1))])
    places = _structure(name) if draw(st.integers(0, 4)) else np.arange(len(data))  # mostly not metadata text
    pick = draw(st.randoms(use_true_random=False)).choice  # uniformly: integers() favour the first bytes
    if how == "flip":
        for _ in range(draw(st.integers(1, 8))):
            data[int(pick(places))] ^= 1 << draw(st.integers(0, 7))
        return name, bytes(data)
    at = int(pick(places[places % 4 == 0]))
    word = draw(st.one_of(st.sampled_from([0, 1, 2, 16, 30, 64, 255, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]),
                          st.integers(0, 2**32 - 1)))
    struct.pack_into("<I", data, at, word)
    return name, bytes(data)


MUTANTS = {"json": json_mutants(), "cbm": cbm_mutants()}  # kind of file: its mutations


@pytest.mark.parametrize("kind", MUTANTS)
@settings(max_examples=EXAMPLES, **SETTINGS)
@given(data=st.data())
def test_mutated_models(kind, data):
    name, content = data.draw(MUTANTS[kind])
    check_property(content, kind, name)


@pytest.mark.slow
@pytest.mark.parametrize("kind", MUTANTS)
@settings(max_examples=10 * EXAMPLES, **SETTINGS)
@given(data=st.data())
def test_mutated_models_many(kind, data):
    name, content = data.draw(MUTANTS[kind])
    check_property(content, kind, name)


# Regression tests: each known case ------------------------------------------------------------------------------------


def _refused(data, fmt, *words):
    path = _write(data if isinstance(data, bytes) else json.dumps(data).encode(), fmt)
    kind, error = outcome(lambda: jaximp.from_catboost(path))
    assert kind == "refused", f"{kind}: {error!r}"
    assert_clear_refusal(error, *words)
    return error


def _json(name="categorical"):
    return json.loads(_file(name, "json"))


def test_deeply_nested_json():
    """A JSON file nested 100000 levels deep: a clear refusal, not a RecursionError."""
    _refused(b"[" * 100_000 + b"]" * 100_000, "json", "nests")
    document = _json()
    document["features_info"]["ctrs"][0]["elements"] = json.loads("[" * 50 + "]" * 50)
    _refused(document, "json", "corrupt")


def test_declared_sizes_json():
    """A tree that declares 30 splits (2**30 leaves) but holds 8 leaf values, a hash map of stride 0
    and a map not a whole number of strides: refused before anything is allocated."""
    document = _json("multiclass")
    tree = document["oblivious_trees"][0]
    tree["splits"] = tree["splits"] * 10
    _refused(document, "json", "leaf values")
    document = _json()
    table = next(iter(document["ctr_data"].values()))
    table["hash_stride"] = 0
    _refused(document, "json", "stride")
    table["hash_stride"], table["hash_map"] = 3, table["hash_map"][:-1]
    _refused(document, "json", "stride")


def test_indices_out_of_range_json():
    """Category ids, feature ids and split indices out of range (negative ones too, which Python
    would wrap around): refused at import, not at predict time."""
    for edit, words in [
        (lambda d: d["features_info"]["ctrs"][0]["elements"][0].update(cat_feature_index=99), "out of range"),
        (lambda d: d["features_info"]["ctrs"][0]["elements"][0].update(cat_feature_index=-1), "out of range"),
        (lambda d: d["oblivious_trees"][0]["splits"][0].update(split_index=10**6), "split_index"),
        (lambda d: d["oblivious_trees"][0]["splits"][0].update(split_index=-1), "split_index"),
        (lambda d: d["features_info"]["categorical_features"][0].update(feature_index=7), "feature_index"),
        (lambda d: d["features_info"]["ctrs"][0].update(target_border_idx=5), "target_border_idx"),
    ]:
        document = _json()
        edit(document)
        _refused(document, "json", words)
    document = _json("multiclass")
    document["oblivious_trees"][0]["splits"][0]["float_feature_index"] = -1
    _refused(document, "json", "float feature")


def test_errors_that_escaped_json():
    """What used to escape the importer: int() of text, a division by a zero stride, a list where an
    object belongs (AttributeError), a leaf value beyond float32 (silently infinite)."""
    cases = [
        (lambda d: d["features_info"]["ctrs"][0].update(target_border_idx="abc"), ("corrupt",)),
        (lambda d: d.update(features_info=[]), ("features_info",)),
        (lambda d: d["features_info"].update(float_features={}), ("corrupt",)),
        (lambda d: d["oblivious_trees"][0].update(leaf_values=[1e39] * len(d["oblivious_trees"][0]["leaf_values"])),
         ("float32",)),
        (lambda d: d["oblivious_trees"].__setitem__(0, []), ("tree 0",)),
        (lambda d: d.update(scale_and_bias=[1.0, "x"]), ("corrupt",)),
    ]
    for edit, words in cases:
        document = _json()
        edit(document)
        _refused(document, "json", *words)


def test_deep_non_symmetric_trees():
    """A non-symmetric tree 200 levels deep: refused, as CatBoost trains at most 16 levels."""
    document = _json("lossguide")
    leaf = {"value": 0.0, "weight": 1.0}
    node = leaf
    split = next(n["split"] for n in [document["trees"][0]] if "split" in n)
    for _ in range(200):
        node = {"split": split, "left": node, "right": dict(leaf)}
    document["trees"][0] = node
    _refused(document, "json", "deeper than")


def test_dense_layout_budget(monkeypatch):
    """A layout over the memory budget is refused with the size it would need (here the budget is
    lowered; a real case: depth-16 trees of many outputs, or one deep tree padding many stumps)."""
    monkeypatch.setenv("JAXIMP_MAX_PADDED_BYTES", "256")
    error = _refused(_file("multiclass", "cbm"), "cbm", "bytes", "budget", "4 trees padded to depth 3")
    assert "would take" in str(error)
    _refused(_file("lossguide", "json"), "json", "budget")


def _cbm_words(data: bytes, value: int) -> list[int]:
    """Aligned positions of the 32-bit word ``value`` in ``data``."""
    return [at for at in range(0, len(data) - 3, 4) if struct.unpack_from("<I", data, at)[0] == value]


def test_declared_sizes_cbm():
    """A .cbm that declares more than it holds (the core's size, a CTR table count, a vector's
    length): refused by comparing with the bytes that are there, before allocating."""
    data = _file("categorical", "cbm")
    core_size = struct.unpack_from("<I", data, 4)[0]
    for at, word in [(4, 0xFFFFFFF0), (8 + core_size, 0xFFFFFFF0), (12 + core_size, 0xFFFFFFF0)]:
        mutated = bytearray(data)
        struct.pack_into("<I", mutated, at, word)
        error = _refused(bytes(mutated), "cbm", "readable CatBoost model")
        assert "declares" in str(error)
    _refused(data[:len(data) // 2], "cbm", "truncated")


def test_depth_30_cbm():
    """Oblivious tree depths raised to 30 (2**30 leaves a tree) in a .cbm: refused (the leaf values
    the file holds do not match), not a 2**30-leaf allocation."""
    data = _file("multiclass", "cbm")
    model = _MODELS["multiclass"][0]
    depths = [int(np.log2(count)) for count in model.get_tree_leaf_counts()]
    sizes = struct.pack(f"<{len(depths) + 1}I", len(depths), *depths)  # the TreeSizes vector
    at = data.find(sizes)
    assert at > 0
    mutated = bytearray(data)
    struct.pack_into("<I", mutated, at + 4, 30)
    _refused(bytes(mutated), "cbm", "declare")


def test_not_a_cbm():
    """Wrong signature, text, an empty file, flipped bytes in the metadata: a clear ValueError
    (CatBoost's loader used to raise UnicodeDecodeError through jaximp)."""
    data = _file("categorical", "cbm")
    _refused(b"XBM1" + data[4:], "cbm", "CBM1")
    _refused(b"", "cbm", "CBM1")
    _refused(b"\xff\xfe not a model at all", "cbm", "CBM1")
    at = data.find(b'{"detailed_profile"')
    mutated = bytearray(data)
    mutated[at + 1] = 0xFF  # not UTF-8
    _refused(bytes(mutated), "cbm", "UTF-8")
