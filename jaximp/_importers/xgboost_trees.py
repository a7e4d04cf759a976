"""One tree of XGBoost's JSON model document, checked and put in jaximp's numbering.

The tree's fields (``RegTree::SaveModel``, src/tree/tree_model.cc, and for vector leaves
``MultiTargetTree::SaveModel``, src/tree/multi_target_tree_model.cc): per node ``n`` (the root
0) ``left_children[n]`` and ``right_children[n]`` (``left`` -1 at a leaf), ``split_indices``,
``split_conditions`` (the threshold; at a leaf of a scalar tree, the leaf value, learning rate
applied), ``default_left``, ``loss_changes`` (the split's gain), ``sum_hessian`` (the node's
cover), ``split_type`` (1: categorical, the categories going right listed in ``categories``,
cut per node by ``categories_nodes``, ``categories_segments`` and ``categories_sizes``), and
``tree_param`` (``num_nodes``, ``size_leaf_vector``).

Vector leaves (``multi_strategy="multi_output_tree"``, ``size_leaf_vector`` K > 1): each leaf
holds K values. XGBoost 3.2 writes them to ``leaf_weights`` (``[n_leaves * K]``), the leaf's
slot in ``right_children[n]`` (``MultiTargetTree::LeafIdx``); XGBoost 2.0 to 3.1 wrote every
node's K values to ``base_weights`` (``[num_nodes * K]``) and no ``loss_changes`` or
``sum_hessian`` (so their covers are unknown).

A model file is untrusted input. Every array must have the tree's declared ``num_nodes``
entries, every child id must name a node of the tree (1 to ``num_nodes - 1``; -1 marks a leaf),
each node must be reached once from the root (no cycle, no shared subtree), split features must
be below ``num_feature``, numbers must be finite float32 values where XGBoost stores float32,
and categories must be non-negative; anything else is a ``ValueError`` naming the tree and node.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np

from jaximp._importers.padded import ParsedTree, check_budget

FN = "from_xgboost"
MAX_CATEGORY = 1 << 24  # XGBoost reads no category at or past 2**24 (``InvalidCat``, src/common/categorical.h)
_F32_MAX = float(np.finfo(np.float32).max)
_INTEGER = re.compile(r"[+-]?\d{1,19}")


def corrupt(detail: str) -> ValueError:
    """The error of a model document that breaks XGBoost's format: ``from_xgboost: ...``."""
    return ValueError(f"{FN}: the XGBoost model is corrupt: {detail}; load it with XGBoost and save it again")


def integer(value: Any, what: str, low: int = 0, high: int = 1 << 62) -> int:
    """An integer field (XGBoost writes parameters as strings: ``"7"``) within ``[low, high]``."""
    if isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
        number = int(value)
    elif isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        number = int(value)
    else:
        raise corrupt(f"{what} must be an integer; got {_shown(value)}")
    if not low <= number <= high:
        raise corrupt(f"{what} must be between {low} and {high}; got {number}")
    return number


def array(value: Any, what: str, kind: str, n: int | None = None) -> np.ndarray:
    """A 1-D numeric field: ``kind`` "int" (``i64``), "float" (``f64``, finite float32 values
    unless NaN or inf are checked by the caller) or "bool"; ``n`` entries when given."""
    if isinstance(value, (list, tuple)):
        try:
            values = np.asarray(value)
        except (ValueError, OverflowError, TypeError) as e:
            raise corrupt(f"{what} must be an array of numbers ({e})") from None
    elif isinstance(value, np.ndarray):  # a typed UBJSON array
        values = value
    else:
        raise corrupt(f"{what} must be an array; got {_shown(value)}")
    if values.size == 0:
        values = values.reshape(0).astype(np.float64)
    kinds = {"int": "iu", "float": "iuf", "bool": "biu"}[kind]
    if values.ndim != 1 or (values.size and values.dtype.kind not in kinds):
        raise corrupt(f"{what} must be a flat array of {kind}s; got {values.dtype} of shape {values.shape}")
    if n is not None and len(values) != n:
        raise corrupt(f"{what} has {len(values)} entries where the tree declares num_nodes = {n}")
    if kind == "bool":  # XGBoost reads 1 as true, anything else as false (``GetElem<Boolean>``)
        return values == 1
    if kind == "int":
        if values.dtype.kind == "u" and values.size and values.max() > np.iinfo(np.int64).max:
            raise corrupt(f"{what} holds {values.max()}, past int64")
        return values.astype(np.int64)
    with np.errstate(invalid="ignore"):  # a signalling NaN of a damaged file: a NaN, checked by the caller
        return values.astype(np.float64)


def float32s(values: np.ndarray, what: str, nodes: np.ndarray | None = None) -> np.ndarray:
    """``f32`` of float64 ``values``, refusing NaN, inf and values float32 cannot hold (where
    XGBoost stores float32, a file of XGBoost's own never has them); ``nodes``: the node id of
    each value (for messages), else its position."""
    bad = ~np.isfinite(values) | (np.abs(values) > _F32_MAX)
    if bad.any():
        index = int(np.flatnonzero(bad.reshape(len(values), -1).any(axis=1))[0])
        node = index if nodes is None else int(nodes[index])
        raise corrupt(f"{what} at node {node} is {float(np.ravel(values[index])[0])!r}, not a finite float32 "
                      "number")
    with np.errstate(invalid="ignore"):
        return values.astype(np.float32)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclasses.dataclass(frozen=True)
class TreeContext:
    """What a tree is checked against and where it adds.

    Attributes:
        index: the tree's number in the model (for messages).
        output: the output a scalar tree adds to (``tree_info``); vector trees add to all K.
        n_outputs: K.
        n_features: F, ``num_feature``.
        drop: dart's ``weight_drop`` of the tree (1 otherwise): XGBoost predicts ``drop`` times
            the leaf, in float32.
    """

    index: int
    output: int
    n_outputs: int
    n_features: int
    drop: np.float32 = np.float32(1.0)


def parse_tree(tree: Any, context: TreeContext, category_bytes: int = 0) -> ParsedTree:
    """XGBoost tree ``context.index`` in jaximp's numbering (internal nodes and leaves in
    depth-first, left-first order), checked (see the module docstring).

    Args:
        tree: the tree's JSON object.
        context: the model's sizes and where the tree adds.
        category_bytes: the bytes of category masks the trees before this one took (the budget
            counts them all).

    Returns:
        The tree; its leaf values ``f32[n_leaves]`` (adding to ``context.output``) or
        ``f32[n_leaves, K]`` (vector leaves, adding to every output).

    Raises:
        ValueError: the tree breaks XGBoost's format (naming the tree and node).
    """
    t = context.index
    if not isinstance(tree, dict):
        raise corrupt(f"tree {t} must be an object; got {_shown(tree)}")
    param = tree.get("tree_param", {})
    if not isinstance(param, dict):
        raise corrupt(f"tree {t}'s tree_param must be an object")
    left = array(tree.get("left_children"), f"tree {t}'s left_children", "int")
    n = len(left)
    if "num_nodes" in param and integer(param["num_nodes"], f"tree {t}'s num_nodes", 1) != n:
        raise corrupt(f"tree {t} declares num_nodes = {param['num_nodes']} but has {n} left_children")
    if n < 1:
        raise corrupt(f"tree {t} has no nodes")
    size = integer(param.get("size_leaf_vector", "1"), f"tree {t}'s size_leaf_vector", 0, 1 << 31) or 1
    vector = size > 1
    if vector and size != context.n_outputs:
        raise corrupt(f"tree {t} has vector leaves of {size} values, but the model has {context.n_outputs} outputs")
    right = array(tree.get("right_children"), f"tree {t}'s right_children", "int", n)
    order, levels = _preorder(left, right, t)
    if "parents" in tree:  # XGBoost follows them when it loads a tree (``RegTree::LoadModel``)
        _check_parents(array(tree["parents"], f"tree {t}'s parents", "int", n), left, right, order, t)
    internal, leaves = order[left[order] != -1], order[left[order] == -1]

    features = array(tree.get("split_indices"), f"tree {t}'s split_indices", "int", n)[internal]
    outside = (features < 0) | (features >= context.n_features)
    if outside.any():
        raise corrupt(f"tree {t} node {int(internal[outside][0])} splits on feature {int(features[outside][0])}, "
                      f"not one of the model's num_feature = {context.n_features}")
    split_type = np.zeros(n, np.int64) if "split_type" not in tree else array(
        tree["split_type"], f"tree {t}'s split_type", "int", n)
    categorical = split_type[internal] == 1
    if np.any((split_type[internal] != 0) & ~categorical):
        raise ValueError(f"{FN}: tree {t} has a split_type other than 0 (numerical) or 1 (categorical), which "
                         "this XGBoost version's format does not define")
    if vector and categorical.any():
        raise corrupt(f"tree {t} has vector leaves and categorical splits, which XGBoost does not train")
    conditions = array(tree.get("split_conditions"), f"tree {t}'s split_conditions", "float", n)
    with np.errstate(over="ignore", invalid="ignore"):  # XGBoost's float32 threshold (beyond float32: inf)
        thresholds = conditions[internal].astype(np.float32)
    unusable = ~categorical & (np.isnan(thresholds) | (thresholds == -np.inf))  # x < c for no x
    if unusable.any():
        node = int(internal[unusable][0])
        raise corrupt(f"tree {t} node {node} splits at {conditions[node]!r}, which no value can be below")
    borders = np.nextafter(thresholds, np.float32(-np.inf))
    covers, gains = _statistics(tree, n, t, vector)
    pointer = np.zeros(n, np.int64)
    pointer[internal] = np.arange(len(internal))
    pointer[leaves] = ~np.arange(len(leaves))
    right_categories = _right_categories(tree, internal[categorical], t, category_bytes)
    return ParsedTree(
        root=int(pointer[0]),
        node_features=features,
        # a categorical node reads values from 0 up (a negative value is no category: left)
        node_borders=np.where(categorical, np.float32(0.0), borders),
        node_nan_right=~array(tree.get("default_left"), f"tree {t}'s default_left", "bool", n)[internal],
        node_children=np.stack([pointer[left[internal]], pointer[right[internal]]], axis=-1),
        leaf_values=_leaf_values(tree, leaves, right, conditions, size, t, covers is not None) * context.drop,
        depth=int(max(levels)),
        output=None if vector else context.output,
        leaf_weights=None if covers is None else covers[leaves],
        node_gains=None if gains is None else gains[internal],
        node_weights=None if covers is None else covers[internal],
        leaf_ids=leaves,
        node_categorical=categorical,
        right_categories=tuple(right_categories),
        others_right=np.zeros(len(right_categories), bool),  # other values: left
    )


def _preorder(left: np.ndarray, right: np.ndarray, t: int) -> tuple[np.ndarray, list[int]]:
    """The nodes reached from the root in preorder (left child first) and their levels; every
    child id checked, every node reached at most once."""
    n = len(left)
    internal = left != -1
    bad = internal & ((left < 1) | (left >= n) | (right < 1) | (right >= n))
    if bad.any():
        node = int(np.flatnonzero(bad)[0])
        raise corrupt(f"tree {t} node {node} has children {int(left[node])} and {int(right[node])}, not node ids "
                      f"1 to {n - 1} (or -1 at a leaf)")
    seen = np.zeros(n, bool)
    order, levels = [], []
    stack = [(0, 0)]
    while stack:
        node, level = stack.pop()
        if seen[node]:
            raise corrupt(f"tree {t} is not a tree: node {node} is reached twice (a cycle or a shared subtree)")
        seen[node] = True
        order.append(node)
        levels.append(level)
        if internal[node]:
            stack.append((int(right[node]), level + 1))
            stack.append((int(left[node]), level + 1))
    return np.asarray(order, np.int64), levels


def _check_parents(parents: np.ndarray, left: np.ndarray, right: np.ndarray, order: np.ndarray, t: int) -> None:
    """Every node reached below the root names its parent in ``parents``."""
    internal = order[left[order] != -1]
    children = np.concatenate([left[internal], right[internal]])
    wrong = parents[children] != np.concatenate([internal, internal])
    if wrong.any():
        node = int(children[wrong][0])
        raise corrupt(f"tree {t}'s parents give node {node} the parent {int(parents[node])}, not the node above it")


def _statistics(tree: dict, n: int, t: int, vector: bool) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(covers f32[n], gains f32[n])`` from ``sum_hessian`` and ``loss_changes``; None where a
    vector-leaf tree of XGBoost before 3.2 has none."""
    if vector and "sum_hessian" not in tree and "loss_changes" not in tree:
        return None, None
    covers = float32s(array(tree.get("sum_hessian"), f"tree {t}'s sum_hessian", "float", n), f"tree {t}'s cover")
    gains = float32s(array(tree.get("loss_changes"), f"tree {t}'s loss_changes", "float", n), f"tree {t}'s gain")
    return covers, gains


def _leaf_values(tree: dict, leaves: np.ndarray, right: np.ndarray, conditions: np.ndarray, size: int,
                 t: int, since_3_2: bool) -> np.ndarray:
    """``f32[n_leaves]`` (scalar leaves: ``split_conditions``) or ``f32[n_leaves, K]`` (vector
    leaves: ``leaf_weights`` at slot ``right_children[n]``, or before 3.2, whose vector trees
    have no ``sum_hessian``, ``base_weights`` of the node)."""
    if size == 1:
        return float32s(conditions[leaves], f"tree {t}'s leaf value", leaves)
    if "leaf_weights" in tree or since_3_2:  # 3.2 writes covers and leaf_weights together
        weights = array(tree.get("leaf_weights"), f"tree {t}'s leaf_weights", "float")
        slots = right[leaves]
        if len(weights) % size or np.any((slots < 0) | (slots >= len(weights) // size)):
            raise corrupt(f"tree {t}'s leaves name slots {slots.tolist()[:8]} of leaf_weights, which holds "
                          f"{len(weights)} values of {size} outputs")
        rows = weights.reshape(-1, size)[slots]
    else:
        weights = array(tree.get("base_weights"), f"tree {t}'s base_weights", "float")
        if len(weights) != len(right) * size:
            raise corrupt(f"tree {t}'s base_weights has {len(weights)} values, not num_nodes x {size}")
        rows = weights.reshape(-1, size)[leaves]
    return float32s(rows, f"tree {t}'s leaf value", leaves)


def _right_categories(tree: dict, nodes: np.ndarray, t: int, bytes_before: int) -> list[np.ndarray]:
    """Per categorical node (XGBoost ids ``nodes``), ``bool[n_categories]`` the categories that
    go right (``n_categories`` one past the largest listed that XGBoost can read).

    The tree lists, per categorical node ``categories_nodes[i]``, the categories
    ``categories[categories_segments[i]:][:categories_sizes[i]]``: those go right, every other
    value (an unlisted or invalid category) left (``common::Decision``, src/common/categorical.h).
    A listed category at or past ``2**24`` matches no value (XGBoost reads every value there as
    no category), so it is left out. The masks' size (one byte a category), with the
    ``bytes_before`` of the trees before, is checked against the budget before they are made.
    """
    if not len(nodes):
        return []
    listed = array(tree.get("categories_nodes"), f"tree {t}'s categories_nodes", "int")
    starts = array(tree.get("categories_segments"), f"tree {t}'s categories_segments", "int")
    sizes = array(tree.get("categories_sizes"), f"tree {t}'s categories_sizes", "int")
    categories = array(tree.get("categories"), f"tree {t}'s categories", "int")
    if not len(listed) == len(starts) == len(sizes):
        raise corrupt(f"tree {t}'s categories_nodes, categories_segments and categories_sizes differ in length")
    if np.any((starts < 0) | (sizes < 0) | (starts + sizes > len(categories))):
        raise corrupt(f"tree {t}'s categories_segments and categories_sizes must cut its {len(categories)} categories")
    if np.any((categories < 0) | (categories >= 1 << 31)):  # XGBoost holds them as int32 (bst_cat_t)
        raise corrupt(f"tree {t}'s categories must be non-negative int32 values; got {int(categories.min())} "
                      f"to {int(categories.max())}")
    where = {int(node): i for i, node in enumerate(listed)}
    chosen = []
    for node in nodes:  # per categorical node, at import
        if int(node) not in where:
            raise corrupt(f"tree {t} node {int(node)} is categorical but not in categories_nodes")
        i = where[int(node)]
        values = categories[starts[i]:starts[i] + sizes[i]]
        chosen.append(values[values < MAX_CATEGORY])
    widths = [int(c.max(initial=-1)) + 1 for c in chosen]
    check_budget(bytes_before + sum(widths), f"the category sets of the model's categorical splits (codes up to "
                 f"{max(widths) - 1} in tree {t})", FN, "code the categories 0, 1, 2, ... before training")
    right = []
    for c, width in zip(chosen, widths):
        mask = np.zeros(width, bool)
        mask[c] = True
        right.append(mask)
    return right
