"""LightGBM's model text, read as untrusted input: the header, one :class:`TextTree` per tree
block, the trailer.

A model text (``Booster.model_to_string()``, a saved model file) holds header lines
``key=value`` (a bare ``average_output`` line for random forests), one block per tree after a
``Tree=t`` line, then ``end of trees`` and ``key:value`` sections (``pandas_categorical``). A tree
block holds ``num_leaves``, then per internal node (``num_leaves - 1`` numbers)
``split_feature``, ``split_gain``, ``threshold``, ``decision_type``, ``left_child``,
``right_child``, ``internal_count``, per leaf ``leaf_value`` and ``leaf_count``, and for
categorical splits ``num_cat``, ``cat_boundaries`` and ``cat_threshold``. A child ``c >= 0`` is
internal node ``c`` and ``c < 0`` is leaf ``~c``; the root is node 0, and a tree of one leaf has
no nodes.

Every declared size is checked against what the text holds before anything of that size is
allocated: ``num_leaves`` against the ``leaf_value`` numbers, ``max_feature_idx`` against the
``feature_names``, ``num_cat`` against ``cat_boundaries``, the bitsets' total against the memory
they would take. Numbers are read strictly (digits, sign, point, exponent; ``inf``, ``nan``):
a token LightGBM would read differently (``1_0``, ``0x1p3``) is refused, not guessed. Every
failure is a ``ValueError`` naming what is wrong.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import numpy as np

from jaximp._models.categories import MAX_CATEGORY_WORDS, bitset_members

_FLOAT_CHARACTERS = re.compile(r"[0-9eE.+\-naifINFtyTY \t]*")  # then parsed by NumPy (Python's float syntax)
_INT_CHARACTERS = re.compile(r"[0-9+\- \t]*")
CATEGORICAL, DEFAULT_LEFT = 1, 2
MISSING_NONE, MISSING_ZERO, MISSING_NAN = 0, 1, 2


def parse_model_text(text: str) -> tuple[dict[str, str], list[dict[str, str]], dict[str, str], list[int]]:
    """Split a LightGBM model text into ``(header, trees, trailer, tree_lengths)``: ``key ->
    value`` strings and each tree block's length in characters (from its ``Tree=`` line to the
    next, as ``tree_sizes`` counts it).

    The header and each tree block are ``key=value`` lines (a header line without ``=`` is a
    flag, value ``""``); the trailer holds the ``key:value`` lines after ``end of trees``
    (``pandas_categorical``). Lines end at ``\n`` (a ``\r`` before it is dropped), as LightGBM
    reads them.

    Raises:
        ValueError: not a LightGBM model text, one cut short, a key written twice, or a line of
            a tree block that is no ``key=value``.
    """
    lines = text.split("\n") if isinstance(text, str) else [type(text).__name__]
    if not lines or lines[0].strip() != "tree":
        first = lines[0][:40] if lines else ""
        raise ValueError(f"model must be a LightGBM model text, whose first line is 'tree'; got {first!r}")
    header: dict[str, str] = {}
    trees: list[dict[str, str]] = []
    trailer: dict[str, str] = {}
    starts: list[int] = []
    block = header
    ended = False
    offset = len(lines[0]) + 1
    for raw in lines[1:]:
        line, at = raw.strip(), offset
        offset += len(raw) + 1
        if ended:
            key, sep, value = line.partition(":")
            if sep and not line.startswith("["):
                trailer[key] = value
            continue
        if line == "end of trees":
            ended = True
            starts.append(at)
        elif line.startswith("Tree="):
            block = {}
            trees.append(block)
            starts.append(at)
        elif line:
            key, sep, value = line.partition("=")
            if key in block or (not sep and block is not header):
                where = "the header" if block is header else f"tree {len(trees) - 1}"
                problem = "writes {key!r} twice" if key in block else "has a line that is no key=value: {key!r}"
                raise ValueError(f"{where} " + problem.format(key=key[:40]))
            block[key] = value
    if not ended:
        raise ValueError("the LightGBM model text is cut short (no 'end of trees' line)")
    return header, trees, trailer, [b - a for a, b in zip(starts, starts[1:])]


def integer(fields: dict[str, str], key: str, default: int | None = None) -> int:
    """The one integer of a ``key=value`` line (``default`` when the line is absent, None: required)."""
    if key not in fields:
        if default is None:
            raise ValueError(f"has no {key!r} line")
        return default
    text = fields[key].strip()
    if not re.fullmatch(r"[+-]?\d{1,18}", text):
        raise ValueError(f"{key!r} must be an integer; got {text[:40]!r}")
    return int(text)


def numbers(fields: dict[str, str], key: str, count: int, dtype: Any, default: Any = None) -> np.ndarray:
    """``count`` numbers of a ``key=value`` line as ``dtype``; ``default`` (a number) fills a
    missing line, None: the line is required. Integers (an integer ``dtype``) must be written as
    integers; the count is checked before a default of that size is allocated."""
    if key not in fields:
        if default is None:
            raise ValueError(f"has no {key!r} line")
        return np.full(count, default, dtype)
    line = fields[key]
    integral = np.issubdtype(dtype, np.integer)
    if not (_INT_CHARACTERS if integral else _FLOAT_CHARACTERS).fullmatch(line):
        raise ValueError(f"{key!r} must hold {'integers' if integral else 'numbers'}; got {line[:40]!r}")
    tokens = line.split()
    if len(tokens) != count:
        raise ValueError(f"{key!r} has {len(tokens)} numbers, not {count}")
    try:
        if integral:
            return np.fromiter(map(int, tokens), np.int64, count).astype(dtype)
        with np.errstate(over="ignore"):  # a gain past float32 reads as inf, as LightGBM's float does
            return np.asarray(tokens, np.float64).astype(dtype)
    except (ValueError, OverflowError) as e:
        raise ValueError(f"{key!r} holds a token that is not a number ({e})") from None


@dataclasses.dataclass(frozen=True)
class TextTree:
    """One tree block, checked, in LightGBM's numbering: internal nodes ``0..m-1`` (m =
    ``num_leaves - 1``), leaves ``0..n-1``.

    Attributes:
        index: the tree's position in the model.
        leaf_values: ``f64[n]``.
        leaf_counts: ``f32[n]`` the leaves' training data counts, or None (no ``leaf_count``).
        features, thresholds, decision, left, right: ``[m]`` each node's ``split_feature``,
            ``threshold`` (f64), ``decision_type``, children.
        gains, counts: ``f32[m]`` ``split_gain`` and ``internal_count`` (0 when absent).
        nodes, leaves: ``i64[m]``, ``i64[n]`` nodes and leaves in depth-first, left-first order.
        depth: the longest root-to-leaf path.
        bitsets: per categorical node in node order, ``u32[n_words]`` its ``cat_threshold``
            words (bit ``c % 32`` of word ``c // 32``: category ``c`` goes left).
    """

    index: int
    leaf_values: np.ndarray
    leaf_counts: np.ndarray | None
    features: np.ndarray
    thresholds: np.ndarray
    decision: np.ndarray
    left: np.ndarray
    right: np.ndarray
    gains: np.ndarray
    counts: np.ndarray
    nodes: np.ndarray
    leaves: np.ndarray
    depth: int
    bitsets: tuple[np.ndarray, ...]

    @property
    def categorical(self) -> np.ndarray:
        """``bool[m]`` the nodes that split on a set of categories."""
        return (self.decision & CATEGORICAL) > 0


class Unsupported(Exception):
    """A valid model that uses what jaximp does not support."""


def read_tree(fields: dict[str, str], index: int, n_features: int) -> TextTree:
    """Tree ``index`` from its block's lines, every size and index checked.

    Raises:
        ValueError: a line missing, malformed or inconsistent with another.
        Unsupported: a linear tree.
    """
    n = integer(fields, "num_leaves")
    if n < 1:
        raise ValueError(f"num_leaves is {n}")
    if integer(fields, "is_linear", 0):
        raise Unsupported(f"model must have constant leaves; got a linear tree (tree {index}, linear_tree=True), "
                          "whose leaves are linear functions of the features, which jaximp does not support "
                          "(LightGBM's own pred_contrib refuses linear trees too)")
    # num_leaves checked against the text here; values float32 cannot hold (NaN, beyond 3.4e38) are refused,
    # naming tree and leaf, by the padded layout every importer shares
    values = numbers(fields, "leaf_value", n, np.float64)
    m = n - 1
    counts = numbers(fields, "leaf_count", n, np.float32) if "leaf_count" in fields else None
    internal = numbers(fields, "internal_count", m, np.float32, 0.0)
    for key, array in (("leaf_count", counts), ("internal_count", internal)):
        if array is not None and not np.all(array >= 0):  # NaN too; the covers SHAP divides by
            raise ValueError(f"a {key} is no count (negative or NaN)")
    decision = numbers(fields, "decision_type", m, np.int64, 0)
    if np.any((decision < 0) | (decision > 127)) or np.any(((decision >> 2) & 3) > MISSING_NAN):
        raise ValueError("a decision_type is not LightGBM's (bits: categorical, default left, missing type 0-2)")
    features = numbers(fields, "split_feature", m, np.int64)
    if np.any((features < 0) | (features >= n_features)):
        raise ValueError(f"split_feature names a feature outside 0..{n_features - 1}")
    thresholds = numbers(fields, "threshold", m, np.float64)
    if np.any(np.isnan(thresholds)):
        raise ValueError("a threshold is NaN")
    left = numbers(fields, "left_child", m, np.int64)
    right = numbers(fields, "right_child", m, np.int64)
    nodes, leaves, depth = preorder(left, right, n)
    categorical = (decision & CATEGORICAL) > 0
    return TextTree(
        index=index, leaf_values=values, leaf_counts=counts, features=features, thresholds=thresholds,
        decision=decision, left=left, right=right,
        gains=numbers(fields, "split_gain", m, np.float32, 0.0),
        counts=internal,
        nodes=nodes, leaves=leaves, depth=depth, bitsets=_bitsets(fields, thresholds[categorical]))


def preorder(left: np.ndarray, right: np.ndarray, n_leaves: int) -> tuple[np.ndarray, np.ndarray, int]:
    """``(nodes i64[m], leaves i64[n_leaves], depth)``: internal nodes and leaves in depth-first,
    left-first order (nodes as met, leaves left to right) and the longest path.

    Raises:
        ValueError: the children do not form one binary tree over all nodes and leaves.
    """
    m = len(left)
    node_order, leaf_order, depth = [], [], 0
    stack = [(0 if m else -1, 0)]
    while stack:
        c, level = stack.pop()
        if c < 0:
            if ~c >= n_leaves:
                raise ValueError(f"a child names leaf {~c} of {n_leaves}")
            leaf_order.append(~c)
            depth = max(depth, level)
            continue
        if c >= m:
            raise ValueError(f"a child names node {c} of {m}")
        node_order.append(c)
        if len(node_order) > m:
            break
        stack.append((int(right[c]), level + 1))
        stack.append((int(left[c]), level + 1))
    if sorted(node_order) != list(range(m)) or sorted(leaf_order) != list(range(n_leaves)):
        raise ValueError("left_child/right_child do not form one binary tree over all nodes and leaves")
    return np.asarray(node_order, np.int64), np.asarray(leaf_order, np.int64), depth


def _bitsets(fields: dict[str, str], cat_index: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per categorical node (its ``threshold``, an index into ``cat_boundaries``), its words
    ``cat_threshold[cat_boundaries[i]:cat_boundaries[i + 1]]`` (views: one array per bitset)."""
    if not len(cat_index):
        return ()
    n_cat = integer(fields, "num_cat", 0)
    if n_cat < 1:
        raise ValueError(f"a categorical split needs num_cat >= 1; got {n_cat}")
    bounds = numbers(fields, "cat_boundaries", n_cat + 1, np.int64)
    if bounds[0] != 0 or np.any(np.diff(bounds) < 0):
        raise ValueError("cat_boundaries must rise from 0")
    words = numbers(fields, "cat_threshold", int(bounds[-1]), np.int64)
    if np.any((words < 0) | (words >= 1 << 32)):
        raise ValueError("cat_threshold holds a number that is no 32-bit word")
    words = words.astype(np.uint32)
    if not np.all((cat_index >= 0) & (cat_index < n_cat)):  # NaN and infinities included
        raise ValueError("a categorical split names no bitset of cat_boundaries")
    index = cat_index.astype(np.int64)
    if np.any(index != cat_index):
        raise ValueError("a categorical split names no bitset of cat_boundaries")
    return tuple(words[bounds[i]:bounds[i + 1]] for i in index)


def right_categories(trees: list[TextTree], fn_name: str) -> list[tuple[np.ndarray, ...]]:
    """Per tree, per categorical node in node order, ``bool[32 n_words]`` the categories that go
    right (those not in its bitset), after checking that the bitsets of every categorical node
    fit what jaximp holds (``MAX_CATEGORY_WORDS``; one bitset shared by many nodes counts once
    per node, as the padded layout holds it)."""
    n_split = sum(len(tree.bitsets) for tree in trees)
    n_words = max((len(b) for tree in trees for b in tree.bitsets), default=0) + 1
    if n_split * n_words > MAX_CATEGORY_WORDS:
        raise ValueError(f"{fn_name}: the model's {n_split} categorical splits hold bitsets of up to {n_words - 1} "
                         f"words each, more than jaximp holds ({MAX_CATEGORY_WORDS} words); code the categories "
                         "0, 1, 2, ... (a category column) before training")
    shared: dict[tuple[int, int], np.ndarray] = {}  # one array per distinct bitset

    def right(words: np.ndarray) -> np.ndarray:
        key = (words.ctypes.data, len(words))  # the words' place in their tree's cat_threshold
        if key not in shared:
            shared[key] = ~bitset_members(words)
        return shared[key]

    return [tuple(right(words) for words in tree.bitsets) for tree in trees]


def pandas_categorical(text: str) -> tuple[tuple, ...] | None:
    """The training frame's categories per ``category`` column (the trailer's JSON list), or None.

    Raises:
        ValueError: not JSON, nested too deep, or not a list of lists of numbers and strings.
    """
    try:
        lists = json.loads(text.strip() or "null")
    except (ValueError, RecursionError) as e:
        raise ValueError(f"pandas_categorical is not JSON ({type(e).__name__})") from None
    if lists is None:
        return None
    if not isinstance(lists, list) or not all(isinstance(c, list) for c in lists):
        raise ValueError("pandas_categorical must be a list of category lists")
    if not all(isinstance(v, (str, int, float, bool)) for c in lists for v in c):
        raise ValueError("pandas_categorical's categories must be numbers or strings")
    return tuple(tuple(c) for c in lists)
