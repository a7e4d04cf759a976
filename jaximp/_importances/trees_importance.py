"""Importances of :class:`TreeEnsemble` models read from the model alone.

PredictionValuesChange for non-symmetric trees (CatBoost docs, "PredictionValuesChange"; seed
000, second half): sibling leaves are merged bottom-up. An internal node whose children hold
weights ``cL, cR`` and (weighted mean) values ``VL, VR [K]`` credits its feature with

    cL (VL - avr)^2 + cR (VR - avr)^2 = cL cR / (cL + cR) |VL - VR|^2,  avr = (cL VL + cR VR) / (cL + cR)

and becomes a leaf of weight ``cL + cR`` and value ``avr``. Merging bottom-up makes a node's
value the weighted mean of its subtree's leaves, so every node is computed at once from its
subtree's cover and weighted value sum (segment sums over the leaves' paths).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import Array

from jaximp._models.ensemble import to_columns
from jaximp._models.trees import TreeEnsemble, node_covers, parents, subtree_sums


def _safe_div(num: Array, den: Array) -> Array:
    ok = den > 0
    return jnp.where(ok, num / jnp.where(ok, den, 1.0), 0.0)


def node_gains(ens: TreeEnsemble, leaf_weights: Array) -> Array:
    """``f32[T, M]`` ``cL cR / (cL + cR) |VL - VR|^2`` of each internal node (0 where padded)."""
    cover, total = subtree_sums(ens, leaf_weights)
    children = ens.node_children  # [T, M, 2]
    is_node = children >= 0
    node = jnp.where(is_node, children, 0)
    leaf = jnp.where(is_node, 0, jnp.minimum(~children, ens.n_leaves - 1))
    rows = jnp.arange(ens.n_trees)[:, None, None]
    c = jnp.where(is_node, cover[rows, node], leaf_weights[rows, leaf])  # [T, M, 2]
    s = jnp.where(is_node[..., None], total[rows, node], (leaf_weights[..., None] * ens.leaf_values)[rows, leaf])
    real = (children >= 0) | (~children < ens.n_leaves)
    c = jnp.where(real, c, 0.0)
    v = _safe_div(s, c[..., None])  # [T, M, 2, K]
    dv = v[:, :, 0] - v[:, :, 1]
    return _safe_div(c[..., 0] * c[..., 1], c[..., 0] + c[..., 1]) * jnp.sum(dv * dv, axis=-1)


def per_feature(ens: TreeEnsemble, per_node: Array) -> Array:
    """``f32[F]``: ``per_node f32[T, M]`` summed onto the nodes' evaluated features (padded nodes
    add 0), each shared among the columns it reads (CatBoost's PredictionValuesChange)."""
    flat = jax.ops.segment_sum(per_node.reshape(-1), ens.node_features.reshape(-1), ens.n_evaluated)
    return to_columns(ens, flat, axis=0, per="evaluated")


@jax.jit
def _pvc_kernel(ens: TreeEnsemble, leaf_weights: Array) -> Array:
    effect = per_feature(ens, node_gains(ens, leaf_weights))
    return 100.0 * _safe_div(effect, jnp.sum(effect))


def tree_prediction_values_change(ens: TreeEnsemble, leaf_weights: Array | None = None) -> Array:
    """CatBoost's ``PredictionValuesChange`` of a non-symmetric ensemble (see the module docstring).

    Args:
        ens: the model.
        leaf_weights: ``f32[T, L]`` leaf weights to use (e.g. counted on data with
            ``tree_leaf_histogram``); None: the model's training weights.

    Returns:
        ``f32[F]``, non-negative, summing to 100 (all zeros when no node separates values).
        Differentiable in ``ens.leaf_values`` and ``leaf_weights``.

    Raises:
        TypeError: ``ens`` is not a TreeEnsemble.
        ValueError: the model carries no leaf weights and none are given.
    """
    fn_name = "prediction_values_change"
    if leaf_weights is None:
        if not ens.leaf_weights_known:
            raise ValueError(f"{fn_name}: the model file carries no leaf weights, which this needs; "
                             "pass X (the training rows) to count them")
        leaf_weights = ens.leaf_weights
    return _pvc_kernel(ens, jnp.asarray(leaf_weights, jnp.result_type(float, leaf_weights)))


def _reachable(ens: TreeEnsemble) -> Array:
    """``bool[T, M]`` the real splits: internal nodes a row can reach whose right side a row
    can take (a finite border, or NaN going right).

    Padding is never reached, and ``from_oblivious`` pads a shallower tree's missing depths with
    splits at ``+inf``, whose right subtrees no row reaches either; a split at ``+inf`` that sends
    NaN right is a real split on missing values (scikit-learn's trees and HistGradientBoosting).
    """
    node_parent, node_side, _, _ = parents(ens)
    two_sided = jnp.isfinite(ens.node_borders) | ens.node_nan_right
    up = jnp.maximum(node_parent, 0)
    open_edge = (node_parent >= 0) & ((node_side == 0) | jnp.take_along_axis(two_sided, up, axis=1))
    reach = (jnp.arange(ens.n_nodes) == 0)[None, :] & (ens.roots[:, None] == 0)
    for _ in range(ens.depth):  # one level further down per step
        reach = reach | (open_edge & jnp.take_along_axis(reach, up, axis=1))
    return reach & two_sided


@functools.partial(jax.jit, static_argnames="type")
def _split_kernel(ens: TreeEnsemble, *, type: str) -> Array:
    real = _reachable(ens).astype(jnp.float32)  # [T, M]
    weight = per_feature(ens, real)
    if type in ("weight", "split"):
        return weight
    if type in ("total_cover", "cover"):
        per_node = node_covers(ens) if ens.node_weights is None else ens.node_weights
    elif ens.node_gains is not None:
        per_node = ens.node_gains
    else:  # CatBoost: the weighted squared change of the output (see jaximp.split_importance)
        per_node = ens.scale**2 * node_gains(ens, ens.leaf_weights)
    per_node = real * per_node
    if type == "impurity":
        return _impurity(ens, real, per_node)
    total = per_feature(ens, per_node)
    return total if type.startswith("total_") else _safe_div(total, weight)


def _impurity(ens: TreeEnsemble, real: Array, decrease: Array) -> Array:
    """scikit-learn's ``feature_importances_`` from each node's weighted impurity decrease.

    Per tree (``Tree.compute_feature_importances(normalize=False)``): the decreases summed per
    feature over the root's weighted samples. Trees without a split are left out; a forest
    normalises each tree, averages and normalises again; boosting (and a single tree) averages
    and normalises once.
    """
    root = ens.node_weights[:, 0]  # [T]
    t, e = ens.n_trees, ens.n_evaluated
    index = (e * jnp.arange(t, dtype=jnp.int32)[:, None] + ens.node_features).reshape(-1)
    per_tree = jax.ops.segment_sum(decrease.reshape(-1), index, t * e).reshape(t, e)
    per_tree = to_columns(ens, per_tree, axis=1, per="evaluated")
    per_tree = _safe_div(per_tree, root[:, None])  # [T, F]
    relevant = jnp.any(real > 0, axis=1)  # [T] trees with a split
    if ens.impurity_scheme == "forest":
        per_tree = _safe_div(per_tree, jnp.sum(per_tree, axis=1, keepdims=True))
    total = jnp.sum(jnp.where(relevant[:, None], per_tree, 0.0), axis=0)
    return _safe_div(total, jnp.sum(total))


def tree_split_importance(ens: TreeEnsemble, type: str) -> Array:
    """Split statistics of a :class:`TreeEnsemble` per feature (see ``jaximp.split_importance``).

    Counts and sums run over the internal nodes rows can reach (padding excluded): "weight" /
    "split" the nodes splitting on a feature, "total_gain" / "total_cover" their gains and covers
    (the library's own when it stored them: ``ens.node_gains``, ``ens.node_weights``), "gain" /
    "cover" the means per split, "impurity" scikit-learn's MDI (``ens.impurity_scheme``).

    Returns:
        ``f32[F]``.
    """
    fn_name = "split_importance"
    if type == "impurity" and (not ens.impurity_scheme or ens.node_gains is None or ens.node_weights is None):
        raise ValueError(f"{fn_name}: type 'impurity' (scikit-learn's feature_importances_) is defined "
                         "for scikit-learn models only; use 'gain' or 'total_gain'")
    if type not in ("weight", "split") and ens.node_gains is None and not ens.leaf_weights_known:
        raise ValueError(f"{fn_name}: the model file carries no leaf weights, which type {type!r} needs")
    return _split_kernel(ens, type=type)
