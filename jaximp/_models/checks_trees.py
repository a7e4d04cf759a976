"""Validation of :class:`~jaximp._models.trees.TreeEnsemble` at construction: its layout's
shapes, and each tree walked from its root (see :mod:`jaximp._models.checks` for the tiers and
the shared checks)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from jaximp._models.checks import (
    TRUSTED,
    ArraySpec,
    check_arrays,
    check_numbers,
    check_static,
    check_values,
    first_bad,
)

_TREES = "TreeEnsemble"
_TREE_ARRAYS = (
    ArraySpec("roots", ("T",), "int"),
    ArraySpec("node_features", ("T", "M"), "int"),
    ArraySpec("node_borders", ("T", "M"), "float"),
    ArraySpec("node_nan_right", ("T", "M"), "bool"),
    ArraySpec("node_children", ("T", "M", 2), "int"),
    ArraySpec("leaf_values", ("T", "L", "K"), "float"),
    ArraySpec("leaf_weights", ("T", "L"), "float"),
    ArraySpec("scale", (), "float"),
    ArraySpec("bias", ("K",), "float"),
    ArraySpec("node_gains", ("T", "M"), "float"),
    ArraySpec("node_weights", ("T", "M"), "float"),
    ArraySpec("leaf_ids", ("T", "L"), "int"),
    ArraySpec("node_categorical", ("T", "M"), "bool"),
    ArraySpec("node_categories", ("T", "M", "n_words"), "uint32"),
)
_IMPURITY_SCHEMES = ("", "forest", "boosting")


def check_trees(ens: Any) -> None:
    """The checks of ``TreeEnsemble.__post_init__`` (see its docstring)."""
    sizes = check_arrays(_TREES, ens, _TREE_ARRAYS)
    check_static(_TREES, ens, None)
    _check_tree_static(ens, sizes.get("M"))
    check_numbers(_TREES, ens, finite=("leaf_values", "leaf_weights", "scale", "bias"),
                  not_nan=("node_borders", "node_gains", "node_weights"))
    n_evaluated = len(ens.nan_modes)
    check_values(_check_node_features, (ens.node_features,), n_evaluated)
    if "L" not in sizes:
        return
    reach = check_values(_check_trees, (ens.roots, ens.node_children), sizes["L"], ens.depth, n_evaluated)
    if reach is not None and reach is not TRUSTED:
        check_values(_check_unreached_leaves, (ens.leaf_weights,), reach)


def _check_tree_static(ens: Any, n_nodes: int | None) -> None:
    depth = ens.depth
    if not isinstance(depth, (int, np.integer)) or isinstance(depth, bool) or depth < 0:
        raise TypeError(f"{_TREES}: depth must be a non-negative int (the longest root-to-leaf path); got {depth!r}")
    if n_nodes is not None and depth > max(n_nodes, 1):
        raise ValueError(f"{_TREES}: depth must be at most M = {n_nodes} (no path has more internal nodes than "
                         f"the tree); got {depth}")
    if ens.impurity_scheme not in _IMPURITY_SCHEMES:
        raise ValueError(f"{_TREES}: impurity_scheme must be one of {_IMPURITY_SCHEMES}; got {ens.impurity_scheme!r}")
    has = [ens.node_categorical is not None, ens.node_categories is not None]
    if has[0] != has[1] and (hasattr(ens.node_categorical, "shape") or hasattr(ens.node_categories, "shape")):
        raise ValueError(f"{_TREES}: node_categorical and node_categories go together (both None for a model "
                         "without set-membership splits)")


def _check_node_features(features: np.ndarray, n_evaluated: int) -> bool:
    bad = (features < 0) | (features >= max(n_evaluated, 1))
    if bad.any():
        raise ValueError(f"{_TREES}: node_features must be evaluated features in [0, E = {n_evaluated}) (E: "
                         f"nan_modes; 0 on padded nodes); got {first_bad(features, bad)}")
    return True


@dataclasses.dataclass(frozen=True, eq=False)
class _Reached:
    """Which internal nodes and leaves the roots reach: ``bool[..., T, M]``, ``bool[..., T, L]``
    (hashed by identity: a key of the checks run once)."""

    nodes: np.ndarray
    leaves: np.ndarray


def _check_trees(roots: np.ndarray, children: np.ndarray, n_leaves: int, depth: int, n_evaluated: int) -> _Reached:
    """Walk every tree from its root, one level per step, all trees at once (NumPy).

    Raises:
        ValueError: a pointer out of range, a node or leaf reached twice (a cycle, or a child of
            two parents), a path longer than ``depth``, the padding leaf L reached, a split in
            a model of no evaluated features.
    """
    try:
        batch = np.broadcast_shapes(roots.shape[:-1], children.shape[:-3])
    except ValueError:
        raise ValueError(f"{_TREES}: roots {roots.shape} and node_children {children.shape} have batch axes "
                         "that do not broadcast") from None
    t, m = children.shape[-3:-1]
    shape = (*batch, t)
    bad = (children >= m) | (children < -n_leaves - 1)
    if bad.any():
        raise ValueError(f"{_TREES}: node_children must point to internal nodes c in [0, M = {m}) or to leaves "
                         f"~j = -j - 1 with j in [0, L = {n_leaves}] (L: padding, never reached); got "
                         f"{first_bad(children, bad)}")
    bad = ((roots != 0) & (roots != -1)) | ((roots == 0) & (m == 0)) | ((roots == -1) & (n_leaves == 0))
    if bad.any():
        raise ValueError(f"{_TREES}: roots must be 0 (the root is internal node 0) or -1 (~0: a tree of the single "
                         f"leaf 0); got {first_bad(roots, bad)} (M = {m}, L = {n_leaves})")
    pointer = np.broadcast_to(roots, shape).reshape(-1).astype(np.int64)
    children = np.broadcast_to(children, (*shape, m, 2)).reshape(-1, m, 2).astype(np.int64)
    tree = np.arange(pointer.size)
    nodes, node_stamp = np.zeros(pointer.size * m, bool), np.zeros(pointer.size * m, np.int64)
    leaves, leaf_stamp = np.zeros(pointer.size * n_leaves, bool), np.zeros(pointer.size * n_leaves, np.int64)
    where = lambda flat, size: _tree_name(int(flat[0]) // size, shape)  # noqa: E731
    for level in range(depth + 1):
        inner = pointer >= 0
        padding = ~pointer[~inner] >= n_leaves
        if padding.any():
            raise ValueError(f"{_TREES}: {_tree_name(int(tree[~inner][padding][0]), shape)} reaches the padding "
                             f"leaf L = {n_leaves} (pointer {-n_leaves - 1}), which only unreached nodes may name")
        leaf = tree[~inner] * n_leaves + ~pointer[~inner]
        _visit(leaves, leaf_stamp, leaf, "leaf", lambda flat: where(flat, n_leaves))
        node = tree[inner] * m + pointer[inner]
        if not node.size:
            break
        if level == depth:
            raise ValueError(f"{_TREES}: {where(node, m)} has a path of more than depth = {depth} splits (or a "
                             "cycle in node_children); depth must be the longest root-to-leaf path")
        if not n_evaluated:
            raise ValueError(f"{_TREES}: a model of no evaluated features (nan_modes empty) has no splits; "
                             f"{where(node, m)} has one")
        _visit(nodes, node_stamp, node, "internal node", lambda flat: where(flat, m))
        tree, pointer = np.repeat(tree[inner], 2), children[tree[inner], pointer[inner]].reshape(-1)
    return _Reached(nodes.reshape(*shape, m), leaves.reshape(*shape, n_leaves))


def _tree_name(index: int, shape: tuple[int, ...]) -> str:
    """``"tree t"``, or ``"tree t of stacked model (b, ...)"`` in a batch of ensembles."""
    position = tuple(int(i) for i in np.unravel_index(index, shape))
    batch = f" of stacked model {position[:-1] if len(position) > 2 else position[0]}" if len(position) > 1 else ""
    return f"tree {position[-1]}{batch}"


def _visit(seen: np.ndarray, stamp: np.ndarray, flat: np.ndarray, what: str, where: Any) -> None:
    """Mark ``seen[flat]``, refusing an entry seen before or twice in ``flat`` (``stamp``: scratch
    of ``seen``'s size; the last of equal entries keeps its position there)."""
    order = np.arange(flat.size)
    stamp[flat] = order
    twice = seen[flat] | (stamp[flat] != order)
    if twice.any():
        raise ValueError(f"{_TREES}: {where(flat[twice])} reaches one {what} twice (a cycle in node_children, or "
                         "a child of two parents); every node but the root must have one parent")
    seen[flat] = True


def _check_unreached_leaves(weights: np.ndarray, reach: _Reached) -> bool:
    """Padded leaves (no root reaches them) must have weight 0: covers and expected values sum
    every leaf's weight. (Their values take no part in any result.)"""
    try:
        bad = ~reach.leaves & (weights != 0)
    except ValueError:  # stacked batches of different batch axes: not compared
        return True
    if bad.any():
        raise ValueError(f"{_TREES}: leaf_weights must be 0 on leaves that no root reaches (padding); got "
                         f"{first_bad(weights, bad)}")
    return True
