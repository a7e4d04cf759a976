"""Hostile LightGBM model texts and rows: LightGBM's numbers or a clear refusal, within a time and
memory limit (``tests/hostile.py``).

Regression cases name each declared size and index a file can lie about (``num_leaves``,
``max_feature_idx``, ``num_class``, ``num_cat``, ``cat_boundaries``, ``tree_sizes``, children,
features, decision types, numbers LightGBM would read differently, nested JSON). Property-based
tests (hypothesis) mutate real model texts (truncate, flip bytes, change declared sizes and ids,
duplicate and drop lines, nest the trailer's JSON) and draw rows of every kind (NaN, infinities,
huge, subnormal, the zero band, the doubles around each threshold) in float32 and float64. A
mutated text that jaximp imports is loaded by LightGBM (its ``tree_sizes`` then agree with its
trees, so LightGBM finds them) and must give LightGBM's leaves and raw scores; one LightGBM
refuses may be read by jaximp (it reads ``tree_sizes``-free texts too) but never crash it.

Leaf indices exactly; raw scores within float32 tolerances (``assert_close``). jaximp's side runs
without jit (each mutated model would compile its own program) and its raw score is summed on the
host from its leaves, so that a hundred models take seconds.
"""

from __future__ import annotations

import functools
import os
import re

import jax
import lightgbm as lgb
import models
import numpy as np
import pytest
from hostile import EXAMPLES, assert_clear_refusal, bounded, outcome
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from models import with_tree_sizes
from oracles import assert_close

import jaximp
import jaximp._importers.lightgbm_text

SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
slow = pytest.mark.slow


# Real model texts and their rows -----------------------------------------------------------------------------


@functools.cache
def texts() -> dict[str, tuple[str, np.ndarray]]:
    """name -> (model text, f64 rows): NaN, zeros, the zero band and the values around thresholds."""
    out = {}
    for name, fitted in (("regression", models.lightgbm_model("regression", rounds=4)),
                         ("multiclass", models.lightgbm_model("multiclass", rounds=3)),
                         ("zero", models.lightgbm_zero_model("regression")),
                         ("float64", models.lightgbm_float64_model())):
        rows = np.asarray(fitted.X[:30], np.float64)
        rows[::7, 0] = 0.0
        rows[1::9, -1] = 1e-36
        out[name] = (fitted.model.model_to_string(), rows)
    fitted = models.library_categorical("lightgbm-reg")  # categorical splits (numbers as codes)
    rows = fitted.X[["a", "b"]].assign(c=fitted.X["c"].cat.codes.replace(-1, np.nan), d=fitted.X["d"])
    out["categorical"] = (fitted.model.model_to_string(), rows.to_numpy(np.float64)[:30])
    return out


def jaximp_numbers(ens, rows):
    """``(leaves i32[N, T] LightGBM's ids, raw f64[N, K])``: jaximp's leaves (without jit: every
    mutated model would compile its own program) and the raw score summed from them on the host."""
    with jax.disable_jit():
        leaves = np.asarray(jaximp.leaf_indices(ens, rows))
    ids = np.asarray(ens.leaf_ids)
    values = np.asarray(ens.leaf_values, np.float64)
    raw = np.zeros((len(rows), ens.n_outputs)) + np.asarray(ens.bias, np.float64)
    for t in range(ens.n_trees):
        position = np.argmax(ids[t][None, :] == leaves[:, t:t + 1], axis=1)  # LightGBM id -> jaximp's leaf
        raw += float(ens.scale) * values[t, position]
    return leaves, raw


_WORKER = r"""
import os, pickle, struct, sys
replies = os.fdopen(os.dup(1), "wb")
os.dup2(2, 1)  # LightGBM's own messages go to stderr, not into the replies
import numpy as np, lightgbm as lgb
while True:
    head = sys.stdin.buffer.read(8)
    if len(head) < 8:
        sys.exit(0)
    text, rows = pickle.loads(sys.stdin.buffer.read(struct.unpack("<Q", head)[0]))
    try:
        booster = lgb.Booster(model_str=text)
        reply = ("ok", [(booster.predict(x, pred_leaf=True, num_threads=1),
                         booster.predict(x, raw_score=True, num_threads=1)) for x in rows])
    except Exception as e:
        reply = ("error", repr(e))
    data = pickle.dumps(reply)
    replies.write(struct.pack("<Q", len(data)) + data)
    replies.flush()
"""


class LightGBMProcess:
    """LightGBM in a child process: a mutated text may crash LightGBM itself (a segmentation
    fault reading a truncated parameters section), which must not take the test run down."""

    def __init__(self):
        self.process = None

    def __call__(self, text: str, rows: list[np.ndarray], seconds: float = 60.0) -> tuple[str, object]:
        """``("ok", [(leaves, raw) per rows])``, ``("error", message)`` or ``("crashed", None)``."""
        import pickle
        import select
        import struct
        import subprocess
        import sys

        if self.process is None or self.process.poll() is not None:
            self.process = subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        data = pickle.dumps((text, rows))
        try:
            self.process.stdin.write(struct.pack("<Q", len(data)) + data)
            self.process.stdin.flush()
            if not select.select([self.process.stdout], [], [], seconds)[0]:
                raise TimeoutError
            head = self.process.stdout.read(8)
            if len(head) < 8:
                raise EOFError
            return pickle.loads(self.process.stdout.read(struct.unpack("<Q", head)[0]))
        except (OSError, EOFError, TimeoutError):
            self.process.kill()
            self.process.wait()
            self.process = None
            return "crashed", None


LIGHTGBM = LightGBMProcess()


def assert_lightgbm_or_refused(text: str, rows: np.ndarray) -> str:
    """The property: ``from_lightgbm`` of the text refuses clearly, or gives LightGBM's leaves
    and raw scores for float64 and float32 rows; nothing else, within the limits. A text that
    LightGBM refuses (or crashes on) may be read by jaximp, which must not fail on it."""
    kind, result = outcome(lambda: jaximp.from_lightgbm(_written(text)))
    assert kind != "failed", f"{type(result).__name__}: {result}"
    if kind == "refused":
        assert_clear_refusal(result)
        assert str(result).startswith("from_lightgbm: ")
        return kind
    ens = result
    both = [rows, rows.astype(np.float32)]
    status, reference = LIGHTGBM(text, both)
    for i, x in enumerate(both):
        kind, numbers = outcome(lambda x=x: jaximp_numbers(ens, x))
        assert kind != "failed", f"{type(numbers).__name__}: {numbers}"
        if kind == "refused" or status != "ok":
            continue
        leaves, raw = numbers
        np.testing.assert_array_equal(leaves, reference[i][0].reshape(leaves.shape))
        assert_close(raw.reshape(len(x), -1), reference[i][1].reshape(len(x), -1))
    return "value"


_FOLDER: list[str] = []


def _written(text: str | bytes) -> str:
    """The path of a file holding ``text`` (UTF-8, undecodable bytes kept) or ``bytes``."""
    import tempfile

    if not _FOLDER:
        _FOLDER.append(tempfile.mkdtemp(prefix="jaximp-hostile-lightgbm-"))
    path = os.path.join(_FOLDER[0], "model.txt")
    with open(path, "wb") as f:
        f.write(text if isinstance(text, bytes) else text.encode("utf-8", "surrogateescape"))
    return path


def categorical_index(text: str, index: int) -> str:
    """``text`` with the first categorical split's ``threshold`` (its bitset's index) set to ``index``."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("decision_type="):
            kinds = [int(v) for v in line.partition("=")[2].split()]
            node = next((k for k, v in enumerate(kinds) if v & 1), None)
            if node is None:
                continue
            j = next(j for j in range(i - 1, -1, -1) if lines[j].startswith("threshold="))
            values = lines[j].partition("=")[2].split()
            values[node] = str(index)
            lines[j] = "threshold=" + " ".join(values)
            return with_tree_sizes("\n".join(lines))
    raise AssertionError("no categorical split")


# Regression cases ---------------------------------------------------------------------------------------------


def _edit(text: str, pattern: str, replacement: str, tree_sizes: bool = True) -> str:
    edited, n = re.subn(pattern, replacement, text, count=1, flags=re.M)
    assert n == 1, pattern
    return with_tree_sizes(edited) if tree_sizes else edited


CASES = {  # name: (model, pattern, replacement, words the refusal names)
    "num_leaves huge": ("regression", r"^num_leaves=\d+", "num_leaves=1000000000000000", ["leaf_value", "numbers"]),
    "num_leaves zero": ("regression", r"^num_leaves=\d+", "num_leaves=0", ["num_leaves is 0"]),
    "num_leaves not a number": ("regression", r"^num_leaves=\d+", "num_leaves=7.5", ["num_leaves", "integer"]),
    "max_feature_idx huge": ("regression", r"^max_feature_idx=\d+", "max_feature_idx=999999999999",
                             ["feature_names"]),
    "max_feature_idx negative": ("regression", r"^max_feature_idx=\d+", "max_feature_idx=-5", ["max_feature_idx"]),
    "no feature_names": ("regression", r"^feature_names=.*$", "", ["feature_names"]),
    "num_tree_per_iteration 0": ("multiclass", r"^num_tree_per_iteration=\d+", "num_tree_per_iteration=0",
                                 ["num_tree_per_iteration"]),
    "num_tree_per_iteration huge": ("multiclass", r"^num_tree_per_iteration=\d+",
                                    "num_tree_per_iteration=99999999999", ["num_tree_per_iteration"]),
    "num_class differs": ("multiclass", r"^num_class=\d+", "num_class=5", ["num_class", "differs"]),
    "child out of range": ("regression", r"^left_child=\S+", "left_child=-1000000", ["leaf"]),
    "child huge": ("regression", r"^right_child=\S+", "right_child=99999999999999999999", ["right_child"]),
    "child cycle": ("regression", r"^left_child=\S+", "left_child=0", ["binary tree"]),
    "split_feature out of range": ("regression", r"^split_feature=\S+", "split_feature=123456",
                                   ["split_feature"]),
    "decision_type out of range": ("regression", r"^decision_type=\S+", "decision_type=300", ["decision_type"]),
    "decision_type missing type 3": ("regression", r"^decision_type=\S+", "decision_type=12", ["decision_type"]),
    "threshold NaN": ("regression", r"^threshold=\S+", "threshold=nan", ["NaN"]),
    "threshold 1_0": ("regression", r"^threshold=\S+", "threshold=1_0", ["threshold"]),
    "threshold hex": ("regression", r"^threshold=\S+", "threshold=0x1p3", ["threshold"]),
    "leaf value beyond float32": ("regression", r"^leaf_value=\S+", "leaf_value=1e300", ["float32"]),
    "leaf value text": ("regression", r"^leaf_value=\S+", "leaf_value=abc", ["leaf_value"]),
    "leaf count NaN": ("regression", r"^leaf_count=\S+", "leaf_count=nan", ["leaf_count"]),
    "internal count negative": ("regression", r"^internal_count=\S+", "internal_count=-5", ["internal_count"]),
    "num_cat huge": ("categorical", r"^num_cat=[1-9]\d*", "num_cat=1000000000000", ["cat_boundaries"]),
    "cat_boundaries not from 0": ("categorical", r"^cat_boundaries=0", "cat_boundaries=2", ["cat_boundaries"]),
    "cat_threshold past 32 bits": ("categorical", r"^cat_threshold=\S+", "cat_threshold=99999999999",
                                   ["cat_threshold"]),
    "duplicate key": ("regression", r"^(leaf_value=.*)$", r"\1\n\1", ["twice"]),
    "tree_sizes wrong": ("regression", r"^tree_sizes=(\d+)", r"tree_sizes=1\1", ["tree_sizes"]),
    "nested pandas_categorical": ("regression", r"^pandas_categorical:.*$",
                                  "pandas_categorical:" + "[" * 100000 + "]" * 100000, ["pandas_categorical"]),
    "pandas_categorical of objects": ("regression", r"^pandas_categorical:.*$",
                                      'pandas_categorical:[[{"a": 1}]]', ["pandas_categorical"]),
    "linear tree": ("regression", r"^is_linear=0", "is_linear=1", ["linear tree"]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_declared_sizes_and_ids_are_checked(name):
    """Each lie a file can tell is refused by name, quickly, without a large allocation (the
    ``tree_sizes`` of the edited text are repaired, so that the lie itself is what is read)."""
    model, pattern, replacement, words = CASES[name]
    text = _edit(texts()[model][0], pattern, replacement, tree_sizes=name != "tree_sizes wrong")
    kind, error = outcome(lambda: jaximp.from_lightgbm(_written(text)), seconds=10, megabytes=512)
    assert kind == "refused", f"{kind}: {error!r}"
    assert_clear_refusal(error, "from_lightgbm", *words)


@pytest.mark.parametrize("index", ["77", "-1", "0.5"])
def test_categorical_split_naming_no_bitset(index):
    text = categorical_index(texts()["categorical"][0], index)
    kind, error = outcome(lambda: jaximp.from_lightgbm(_written(text)), seconds=10, megabytes=512)
    assert kind == "refused", f"{kind}: {error!r}"
    assert_clear_refusal(error, "from_lightgbm", "bitset")


def test_files_that_are_no_model_text():
    for content in (b"", b"tree", b"\xff\xfe\x00garbage", b"tree\nversion=v4\n", b"{}"):
        path = _written(content)
        kind, error = outcome(lambda path=path: jaximp.from_lightgbm(path))
        assert kind == "refused", f"{content!r}: {kind} {error!r}"
        assert_clear_refusal(error, "from_lightgbm")


def test_shared_bitsets_are_bounded_before_they_are_expanded(monkeypatch):
    """Many categorical splits naming one large bitset would expand it once per split: the total
    is checked first."""
    monkeypatch.setattr(jaximp._importers.lightgbm_text, "MAX_CATEGORY_WORDS", 8)
    text = texts()["categorical"][0]
    with pytest.raises(ValueError, match=r"^from_lightgbm: the model's \d+ categorical splits hold bitsets"):
        jaximp.from_lightgbm(_written(text))


def test_unmutated_texts_give_lightgbm_numbers():
    for name, (text, rows) in texts().items():
        assert assert_lightgbm_or_refused(text, rows) == "value", name


# Property-based: mutated texts -------------------------------------------------------------------------------------

NAMES = st.sampled_from(["regression", "multiclass", "zero", "float64", "categorical"])
INTEGERS = st.one_of(st.integers(-3, 40), st.sampled_from([-(1 << 31), (1 << 31) - 1, 1 << 32, 10**12, 10**18, 10**30]))
SIZE_KEYS = ["num_leaves", "num_cat", "max_feature_idx", "num_class", "num_tree_per_iteration", "tree_sizes",
             "cat_boundaries"]
ID_KEYS = ["left_child", "right_child", "split_feature", "decision_type", "threshold", "cat_threshold", "leaf_count",
           "leaf_value"]


@SETTINGS
@given(name=NAMES, cut=st.floats(0.0, 1.0))
def test_truncated_texts(name, cut):
    text, rows = texts()[name]
    assert_lightgbm_or_refused(text[: int(cut * len(text))], rows)


@SETTINGS
@given(name=NAMES, where=st.floats(0.0, 1.0, exclude_max=True), byte=st.integers(0, 255), repair=st.booleans())
def test_flipped_bytes(name, where, byte, repair):
    text, rows = texts()[name]
    data = bytearray(text.encode())
    data[int(where * len(data))] = byte
    mutated = data.decode("utf-8", "surrogateescape")
    assert_lightgbm_or_refused(with_tree_sizes(mutated) if repair else mutated, rows)


@SETTINGS
@given(name=NAMES, key=st.sampled_from(SIZE_KEYS + ID_KEYS), which=st.integers(0, 50), token=st.integers(0, 30),
       value=st.one_of(INTEGERS, st.sampled_from(["nan", "inf", "-inf", "1e308", "-0", "1.5", ""])),
       repair=st.booleans())
def test_changed_sizes_and_ids(name, key, which, token, value, repair):
    """One number of a declared size or an id line replaced by another (``tree_sizes`` repaired
    or not)."""
    text, rows = texts()[name]
    lines = [i for i, line in enumerate(text.split("\n")) if line.startswith(key + "=")]
    if not lines:
        return
    split = text.split("\n")
    i = lines[which % len(lines)]
    tokens = split[i].partition("=")[2].split(" ")
    tokens[token % len(tokens)] = str(value)
    split[i] = f"{key}={' '.join(tokens)}"
    mutated = "\n".join(split)
    assert_lightgbm_or_refused(with_tree_sizes(mutated) if repair else mutated, rows)


@SETTINGS
@given(name=NAMES, which=st.integers(0, 10**6), duplicate=st.booleans())
def test_duplicated_and_dropped_lines(name, which, duplicate):
    text, rows = texts()[name]
    split = text.split("\n")
    i = which % len(split)
    split[i:i + 1] = [split[i], split[i]] if duplicate else []
    assert_lightgbm_or_refused(with_tree_sizes("\n".join(split)), rows)


@SETTINGS
@given(depth=st.integers(1, 200000))
def test_nested_pandas_categorical(depth):
    text, rows = texts()["regression"]
    mutated = re.sub(r"(?m)^pandas_categorical:.*$", lambda _: "pandas_categorical:" + "[" * depth + "]" * depth, text)
    assert_lightgbm_or_refused(mutated, rows)


# Property-based: rows -----------------------------------------------------------------------------------------------


def _thresholds(ens) -> np.ndarray:
    table = ens.value_thresholds
    return np.concatenate([table.column(j)[0] for j in range(ens.n_features)])


@st.composite
def hostile_rows(draw, ens):
    """``f64[n, F]`` rows drawn from a mix: ordinary values, the doubles around and the float32
    values next to every threshold, zeros, the zero band, subnormals, NaN, infinities, huge."""
    thresholds = _thresholds(ens)
    specials = [0.0, -0.0, 1e-35, -1e-35, 1.0000000180025095e-35, 1e-36, 5e-324, -1e-320, 1e-45, np.nan, np.inf,
                -np.inf, 1e300, -1e300, 3.4e38, 3.5e38]
    near = st.sampled_from(list(thresholds)).flatmap(lambda t: st.sampled_from([
        t, np.nextafter(t, np.inf), np.nextafter(t, -np.inf), float(np.float32(t)),
        float(np.nextafter(np.float32(t), np.float32(np.inf))), float(np.nextafter(np.float32(t), np.float32(-np.inf))),
        t + abs(t) * 1e-9, t - abs(t) * 1e-9])) if len(thresholds) else st.just(0.0)
    value = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(specials), near)
    n = draw(st.integers(1, 12))
    return np.asarray(draw(st.lists(st.lists(value, min_size=ens.n_features, max_size=ens.n_features),
                                    min_size=n, max_size=n)), np.float64)


@functools.cache
def _booster_and_ens(name):
    text, _ = texts()[name]
    return lgb.Booster(model_str=text), jaximp.from_lightgbm(lgb.Booster(model_str=text))


@SETTINGS
@given(data=st.data(), name=st.sampled_from(["regression", "zero", "float64"]))
def test_rows_of_every_kind(data, name):
    """LightGBM's leaves and raw scores for rows of every kind, in float64 and in float32."""
    booster, ens = _booster_and_ens(name)
    x = data.draw(hostile_rows(ens))
    for rows in (x, x.astype(np.float32)):
        with bounded():
            leaves = np.asarray(jaximp.leaf_indices(ens, rows))
            raw = np.asarray(jaximp.predict(ens, rows))
        np.testing.assert_array_equal(leaves, booster.predict(rows, pred_leaf=True).reshape(leaves.shape))
        assert_close(raw, booster.predict(rows, raw_score=True))
