"""The one builder of padded tree arrays: parsed trees in, a :class:`TreeEnsemble` out.

Every general-tree importer (CatBoost's non-symmetric trees, XGBoost, LightGBM, scikit-learn)
parses its library's trees into :class:`ParsedTree` (one tree in jaximp's numbering: internal
nodes in preorder, the root 0, leaves depth-first left to right, child pointers as in
``TreeEnsemble.node_children``) and its model-level fields into :class:`ModelFields`, and
:func:`pad_trees` lays the trees out as the ensemble's arrays, padded to the largest tree (see
:mod:`jaximp._models.trees`). :class:`ModelFields` also fills the oblivious layout's model-level
fields (``jaximp._importers.catboost``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from jaximp._models.categories import category_words
from jaximp._models.thresholds import normal_borders
from jaximp._models.trees import TreeEnsemble

MAX_FEATURES = 1 << 22  # F: columns of a dense row (16 MiB a row in float32); more is refused
_DEFAULT_BUDGET = 2 << 30  # bytes of the padded layout, unless JAXIMP_MAX_PADDED_BYTES says otherwise


@dataclasses.dataclass(frozen=True)
class ParsedTree:
    """One tree in jaximp's numbering, before padding: ``n_nodes`` internal nodes (M before
    padding) and ``n_leaves`` leaves (L before padding).

    Attributes:
        root: the root pointer: 0, or ``~0 = -1`` for a tree that is a single leaf.
        node_features: ``int[n_nodes]`` the feature each internal node reads.
        node_borders: ``f32[n_nodes]`` a row goes right when ``x > border``.
        node_nan_right: ``bool[n_nodes]`` a NaN goes right.
        node_children: ``int[n_nodes, 2]`` left and right child pointers.
        leaf_values: ``float[n_leaves, K]`` for a tree that adds to every output (XGBoost's
            vector leaves, CatBoost's multi-output trees; ``float[n_leaves]`` when K is 1), or
            ``float[n_leaves]`` for a tree that adds to one output only (``output``); cast to
            float32 when padded, a value float32 cannot hold refused.
        depth: the longest root-to-leaf path.
        output: the one output the tree adds to, or None: all K.
        leaf_weights: ``f32[n_leaves]`` each leaf's cover, or None when the model file has none.
        node_gains: ``f32[n_nodes]`` the library's split gains, or None (computed from leaves).
        node_weights: ``f32[n_nodes]`` the library's node covers, or None (the sum of leaves').
        leaf_ids: ``int[n_leaves]`` the leaves' numbers in the library, or None (depth-first).
        node_categorical: ``bool[n_nodes]`` the set-membership splits, or None (none).
        right_categories: per set-membership split, in node order, ``bool[n_categories]``
            whether category ``c`` goes right.
        others_right: ``bool[n_categorical]`` per set-membership split, where every other value
            goes (right when True): categories it does not list, values below its border.
    """

    root: int
    node_features: np.ndarray
    node_borders: np.ndarray
    node_nan_right: np.ndarray
    node_children: np.ndarray
    leaf_values: np.ndarray
    depth: int
    output: int | None = None
    leaf_weights: np.ndarray | None = None
    node_gains: np.ndarray | None = None
    node_weights: np.ndarray | None = None
    leaf_ids: np.ndarray | None = None
    node_categorical: np.ndarray | None = None
    right_categories: tuple[np.ndarray, ...] = ()
    others_right: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, bool))


@dataclasses.dataclass(frozen=True)
class ModelFields:
    """The fields of an ensemble that no tree holds, the same in both layouts.

    Attributes:
        bias: ``float[K]`` the model's bias (its length is K).
        feature_names: the F input columns' names.
        nan_modes: per evaluated feature (E entries) "Min", "Max" or "AsIs".
        loss_function: the training loss's name, "" when unknown.
        scale: the model's scale.
        class_names: class labels of a classifier, else ``()``.
        featurizer, players, player_of, reads, n_searched: the categorical description of a
            CatBoost model (see ``ObliviousEnsemble``), None for numeric models.
    """

    bias: np.ndarray
    feature_names: tuple[str, ...]
    nan_modes: tuple[str, ...]
    loss_function: str
    scale: float = 1.0
    class_names: tuple = ()
    featurizer: Any = None
    players: tuple[tuple[int, ...], ...] | None = None
    player_of: tuple[int, ...] | None = None
    reads: tuple[tuple[int, ...], ...] | None = None
    n_searched: int | None = None
    missing_value: float | None = None

    @property
    def n_outputs(self) -> int:
        """K, the length of the bias."""
        return int(np.size(self.bias))

    def ensemble_arguments(self) -> dict[str, Any]:
        """The keyword arguments of either ensemble class these fields fill (``scale f32[]``,
        ``bias f32[K]``, ``n_features`` = F and the static fields; ``missing_value`` only when
        set, a field of ``TreeEnsemble`` alone)."""
        extra = {} if self.missing_value is None else dict(missing_value=self.missing_value)
        return dict(
            scale=on_device(np.float32(self.scale)),
            bias=on_device(np.asarray(self.bias, np.float32).reshape(self.n_outputs)),
            n_features=len(self.feature_names),
            feature_names=self.feature_names,
            nan_modes=self.nan_modes,
            loss_function=self.loss_function,
            class_names=self.class_names,
            featurizer=self.featurizer,
            players=self.players,
            player_of=self.player_of,
            reads=self.reads,
            n_searched=self.n_searched,
            **extra,
        )


def padded_budget() -> int:
    """The most bytes :func:`pad_trees` lays out: ``JAXIMP_MAX_PADDED_BYTES`` when set (an
    integer number of bytes), else 2 GiB."""
    text = os.environ.get("JAXIMP_MAX_PADDED_BYTES", "").strip()
    try:
        return max(0, int(text)) if text else _DEFAULT_BUDGET
    except ValueError:
        raise ValueError(f"JAXIMP_MAX_PADDED_BYTES must be a number of bytes; got {text!r}") from None


def _size(n_bytes: int) -> str:
    """``n_bytes`` for people: "3.2 GiB", "12.0 MiB", "512 bytes"."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n_bytes >= 1 << shift:
            return f"{n_bytes / (1 << shift):.1f} {unit}"
    return f"{n_bytes} bytes"


def check_budget(n_bytes: int, what: str, fn_name: str, fix: str = "") -> None:
    """Refuse (``ValueError`` naming the size) to allocate ``n_bytes`` for ``what`` past
    :func:`padded_budget`: the check every declared or derived size passes before it is allocated."""
    budget = padded_budget()
    if n_bytes > budget:
        raise ValueError(f"{fn_name}: {what} would take {_size(n_bytes)}, more than the {_size(budget)} jaximp "
                         f"allows (its memory budget); {fix + '; or ' if fix else ''}set the environment variable "
                         "JAXIMP_MAX_PADDED_BYTES (bytes) to allow more")


def padded_bytes(n_trees: int, n_nodes: int, n_leaves: int, n_outputs: int, n_split: int = 0,
                 n_words: int = 0) -> int:
    """The bytes of the padded arrays of T trees of M nodes and L leaves with K outputs:
    per node a feature, border, NaN direction, two children, categorical flag, gain and cover;
    per leaf K values, a weight and an id; ``n_split`` categorical nodes' bitsets of
    ``n_words`` words (as words, and as the bits they are built from)."""
    per_node = 4 + 4 + 1 + 8 + 1 + 4 + 4
    per_leaf = 4 * n_outputs + 4 + 4
    categories = n_trees * n_nodes * n_words * 4 + n_split * 32 * n_words
    return n_trees * (n_nodes * per_node + n_leaves * per_leaf) + categories


def pad_trees(trees: Sequence[ParsedTree], fields: ModelFields, *, fn_name: str, min_depth: int = 0,
              category_codes: Any = None, impurity_scheme: str = "") -> TreeEnsemble:
    """Lay parsed trees out as one :class:`TreeEnsemble`, padded to the largest.

    L is the most leaves of any tree and M = max(1, L - 1); padded nodes have feature 0, border
    ``+inf`` and children pointing to the out-of-range leaf L (never reached), padded leaves
    value, weight, id 0. A per-node or per-leaf field that any tree lacks (None) is None in the
    ensemble (``leaf_weights``: zeros, ``leaf_weights_known`` False). The size of the layout
    (:func:`padded_bytes`) is checked against :func:`padded_budget` before any of it is
    allocated.

    Args:
        trees: the T trees, in the order they add up.
        fields: the model-level fields; K is the length of their bias.
        fn_name: the importer, for messages.
        min_depth: the least D (1: a model of single leaves keeps one idle level).
        category_codes: how rows' categorical columns become codes (``TreeEnsemble``).
        impurity_scheme: scikit-learn's pooling of impurity importances (``TreeEnsemble``).

    Returns:
        The ensemble: ``leaf_values f32[T, L, K]``, nodes ``[T, M]``.

    Raises:
        ValueError: no trees; the padded layout (category bitsets included) would exceed the
            budget; a leaf value that float32 cannot hold (beyond about 3.4e38, or NaN); a tree
            whose output is not one of the K, or whose leaf values are not ``[n_leaves]`` or
            ``[n_leaves, K]``.
    """
    if not len(trees):
        raise ValueError(f"{fn_name}: the model has no trees")
    n_outputs = fields.n_outputs
    n_leaves = max(len(tree.leaf_values) for tree in trees)
    n_nodes = max(1, n_leaves - 1, *(len(tree.node_features) for tree in trees))
    nodes, leaves = (n_nodes,), (n_leaves,)  # M, L
    right = [mask for tree in trees for mask in tree.right_categories]  # row-major, as the nodes
    n_words = max(1, -(-(max((len(r) for r in right), default=0) + 1) // 32)) if right else 0
    check_budget(padded_bytes(len(trees), n_nodes, n_leaves, n_outputs, len(right), n_words),
                 _layout_words(trees, n_leaves, n_outputs), fn_name,
                 "import fewer trees, or a model of smaller trees")
    _check_outputs(trees, n_outputs, fn_name)
    features = _pad([tree.node_features for tree in trees], nodes, np.int32)
    borders = normal_borders(_pad([tree.node_borders for tree in trees], nodes, np.float32, np.inf))
    nan_right = _pad([tree.node_nan_right for tree in trees], nodes, bool)
    children = _pad([tree.node_children for tree in trees], (*nodes, 2), np.int32, ~n_leaves)  # never reached
    values = np.zeros((len(trees), n_leaves, n_outputs), np.float32)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf: refused below, naming the leaf
        for t, tree in enumerate(trees):
            leaf = np.asarray(tree.leaf_values)
            columns = tree.output if tree.output is not None else 0 if leaf.ndim == 1 else slice(None)
            values[t, :len(leaf), columns] = leaf
    _check_finite(values, trees, fn_name)
    leaf_weights = _pad([tree.leaf_weights for tree in trees], leaves, np.float32)
    categorical = _pad([np.zeros(0, bool) if tree.node_categorical is None else tree.node_categorical
                        for tree in trees], nodes, bool)
    categories = None
    if categorical.any():
        others = np.concatenate([np.asarray(tree.others_right, bool) for tree in trees])
        categories = category_words(categorical, right, others, fn_name)
    return TreeEnsemble(
        roots=on_device(np.asarray([tree.root for tree in trees], np.int32)),
        node_features=on_device(features),
        node_borders=on_device(borders),
        node_nan_right=on_device(nan_right),
        node_children=on_device(children),
        leaf_values=on_device(values),
        leaf_weights=on_device(np.zeros((len(trees), n_leaves), np.float32) if leaf_weights is None
                               else leaf_weights),
        depth=max(min_depth, *(tree.depth for tree in trees)),
        leaf_weights_known=leaf_weights is not None,
        node_gains=on_device(_pad([tree.node_gains for tree in trees], nodes, np.float32)),
        node_weights=on_device(_pad([tree.node_weights for tree in trees], nodes, np.float32)),
        leaf_ids=on_device(_pad([tree.leaf_ids for tree in trees], leaves, np.int32)),
        impurity_scheme=impurity_scheme,
        node_categorical=None if categories is None else on_device(categorical),
        node_categories=on_device(categories),
        category_codes=category_codes,
        **fields.ensemble_arguments(),
    )


def _layout_words(trees: Sequence[ParsedTree], n_leaves: int, n_outputs: int) -> str:
    """The padded layout in words, for the budget's message: how many trees padded to how many
    leaves, and the median tree when the largest is far larger (one deep tree among stumps)."""
    median = int(np.median([len(tree.leaf_values) for tree in trees]))
    words = (f"the dense layout of the model's {len(trees)} trees, each padded to the largest "
             f"({n_leaves} leaves{f' of {n_outputs} outputs' if n_outputs > 1 else ''})")
    if n_leaves > 4 * max(1, median):
        words += f", while half the trees have at most {median} leaves (every tree is padded to the largest)"
    return words


def _check_outputs(trees: Sequence[ParsedTree], n_outputs: int, fn_name: str) -> None:
    """Each tree adds to one of the K outputs (``leaf_values [n_leaves]``) or to all
    (``[n_leaves, K]``, or ``[n_leaves]`` when K is 1): an importer's trees and its bias agree."""
    for t, tree in enumerate(trees):
        shape = np.shape(tree.leaf_values)
        if tree.output is None:
            ok = (len(shape) == 2 and shape[1] == n_outputs) or (len(shape) == 1 and n_outputs == 1)
        else:
            ok = len(shape) == 1 and 0 <= tree.output < n_outputs
        if not ok:
            raise ValueError(f"{fn_name}: tree {t} adds to output {tree.output} with leaf values of shape "
                             f"{shape}, but the model has {n_outputs} outputs; the model is corrupt")


def _check_finite(values: np.ndarray, trees: Sequence[ParsedTree], fn_name: str) -> None:
    """Refuse a leaf value that float32 cannot hold (``values f32[T, L, K]`` as padded), naming
    its tree and leaf."""
    bad = ~np.isfinite(values)
    if not bad.any():
        return
    t, leaf, k = (int(i) for i in np.argwhere(bad)[0])
    tree = trees[t]
    given = np.asarray(tree.leaf_values)[leaf] if tree.output is not None else np.asarray(tree.leaf_values)[leaf, k]
    name = f"leaf {leaf}" + (f" (number {int(tree.leaf_ids[leaf])} in the model)" if tree.leaf_ids is not None else "")
    raise ValueError(f"{fn_name}: tree {t}'s {name} holds {float(given)!r}, which is not a finite float32 "
                     "number (|value| up to about 3.4e38): jaximp computes in float32; the model is corrupt "
                     "or its leaf values overflow")


def on_device(array: Any) -> Any:
    """``array`` (NumPy, or a scalar) on the default device, not committed to it, as
    ``jnp.asarray`` gives it; None for None. A transfer: ``jnp.asarray`` of a NumPy array would
    compile a small program for each new shape (JAX's ``lax.stage``), a dozen per model."""
    return None if array is None else jax.device_put(np.asarray(array))


def _pad(arrays: list[np.ndarray | None], shape: tuple[int, ...], dtype: Any, fill: Any = 0) -> np.ndarray | None:
    """``dtype[T, *shape]``: per tree its array (the first axis cut short), ``fill`` after it;
    None when a tree has None (the library does not give the field)."""
    if any(array is None for array in arrays):
        return None
    padded = np.full((len(arrays), *shape), fill, dtype)
    for t, array in enumerate(arrays):
        if len(array):  # a single leaf has no nodes
            padded[t, :len(array)] = array
    return padded


def float32_below(threshold: np.ndarray) -> np.ndarray:
    """``f32`` shaped as ``threshold`` (``f64``): the largest float32 at or below each threshold,
    the border of a split that sends ``x <= threshold`` left (``x32 > border`` iff
    ``x32 > threshold``; rounding to the nearest float32 instead would send rows equal to a
    rounded-up threshold the wrong way)."""
    with np.errstate(over="ignore"):  # beyond float32: inf, then float32's largest value below
        border = threshold.astype(np.float32)
    return np.where(border.astype(np.float64) > threshold, np.nextafter(border, np.float32(-np.inf)), border)
