"""Split statistics per feature: XGBoost's ``get_score`` and LightGBM's ``feature_importance``.

Counts, covers and gains of the nodes that split on each feature, read from the model alone:
pure JAX functions of the ensemble pytree. Each layout has its kernel (:data:`KERNELS`, keyed
by ``ens.layout``):

* oblivious trees are read as the binary trees they unroll to, with CatBoost's orientation (the
  root is the split of the highest bit, as ``plot_tree`` draws it): the split of bit ``d`` of a
  tree of depth ``D_t`` is repeated in ``2**(D_t - 1 - d)`` nodes;
* general trees count their own nodes, those that rows can reach, with the statistics their
  library stored when it did (``ens.node_gains``, ``ens.node_weights``).

A tree's computed gains add up to the weighted variance of its output,
``scale^2 sum_l c_l |v_l - mean|^2``. At the deepest split a node's gain equals
PredictionValuesChange's leaf-pair term; above it, the leaf-pair formula compares leaves, not
the node's children, so the two differ.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import Array

from jaximp._importances.pvc import check_weights_known, depth_sums, feature_sums, node_gains
from jaximp._models.ensemble import Ensemble, check_model, safe_div, to_columns
from jaximp._models.oblivious import ObliviousEnsemble
from jaximp._models.trees import TreeEnsemble, node_covers, parents

SPLIT_IMPORTANCE_TYPES = ("weight", "split", "gain", "total_gain", "cover", "total_cover", "impurity")
_COUNTS = ("weight", "split")


def _mean_or_total(type: str, total: Array, weight: Array) -> Array:
    """``total`` for the "total_" types, else its mean per split ``total / weight``."""
    return total if type.startswith("total_") else safe_div(total, weight)


def _impurity_refused(fn_name: str) -> ValueError:
    return ValueError(f"{fn_name}: type 'impurity' (scikit-learn's feature_importances_) is defined "
                      "for scikit-learn models only; use 'gain' or 'total_gain'")


# --------------------------------------------------------------------------------------------
# Oblivious trees


def _node_gains(leaf_values: Array, weights: Array) -> Array:
    """``f32[T, D]``: total gain of the unrolled tree's nodes that split on each depth.

    Merges sibling subtrees bottom-up (bit 0 first, the root is the highest bit): a node whose
    children have weights ``cL, cR`` and weighted-mean values ``VL, VR [K]`` gains
    ``cL (VL - V)^2 + cR (VR - V)^2 = cL cR / (cL + cR) |VL - VR|^2``, ``V`` the node's mean.
    Leaves of a tree's index range are contiguous blocks, so each merge is a reshape.
    """
    n_trees, n_leaves, n_outputs = leaf_values.shape
    depth = max(n_leaves.bit_length() - 1, 0)
    w, v = weights, leaf_values
    gains = []
    for _ in range(depth):  # static: D levels, each vectorized over trees and nodes
        w2 = w.reshape(n_trees, -1, 2)
        v2 = v.reshape(n_trees, -1, 2, n_outputs)
        dv = v2[:, :, 0] - v2[:, :, 1]
        gains.append(jnp.sum(safe_div(w2[..., 0] * w2[..., 1], w2[..., 0] + w2[..., 1]) * jnp.sum(dv * dv, -1), -1))
        w = jnp.sum(w2, axis=-1)
        v = safe_div(jnp.sum(w2[..., None] * v2, axis=2), w[..., None])
    if not gains:
        return jnp.zeros((n_trees, 0), leaf_values.dtype)
    return jnp.stack(gains, axis=1)


@functools.partial(jax.jit, static_argnames=("type",))
def _oblivious_kernel(ens: ObliviousEnsemble, *, type: str) -> Array:
    tree_depth = jnp.sum(ens.split_mask, axis=1, keepdims=True)  # [T, 1]
    level = tree_depth - 1 - jnp.arange(ens.depth)  # [T, D]: distance of depth d from the root
    n_nodes = jnp.where(ens.split_mask, 2.0 ** jnp.maximum(level, 0), 0.0)
    weight = depth_sums(ens, n_nodes)
    if type in _COUNTS:
        return weight
    if type in ("total_cover", "cover"):
        tree_weight = jnp.sum(ens.leaf_weights, axis=1, keepdims=True)  # every row reaches every depth
        total = depth_sums(ens, jnp.broadcast_to(tree_weight, n_nodes.shape))
    else:
        total = ens.scale**2 * depth_sums(ens, _node_gains(ens.leaf_values, ens.leaf_weights))
    return _mean_or_total(type, total, weight)


def _oblivious_statistics(ens: ObliviousEnsemble, type: str, fn_name: str) -> Array:
    """``f32[F]`` split statistics of oblivious trees (CatBoost's gains and covers)."""
    if type == "impurity":
        raise _impurity_refused(fn_name)
    if type not in _COUNTS:
        check_weights_known(ens, fn_name, f"type {type!r} reads them; the counts 'weight' and 'split' do not")
    return _oblivious_kernel(ens, type=type)


# --------------------------------------------------------------------------------------------
# General trees


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


@functools.partial(jax.jit, static_argnames=("type",))
def _trees_kernel(ens: TreeEnsemble, *, type: str) -> Array:
    real = _reachable(ens).astype(jnp.float32)  # [T, M]
    weight = feature_sums(ens, real, ens.node_features)
    if type in _COUNTS:
        return weight
    if type in ("total_cover", "cover"):
        per_node = node_covers(ens) if ens.node_weights is None else ens.node_weights
    elif ens.node_gains is not None:
        per_node = ens.node_gains
    else:  # CatBoost: the weighted squared change of the output (see split_importance)
        per_node = ens.scale**2 * node_gains(ens, ens.leaf_weights)
    per_node = real * per_node
    if type == "impurity":
        return _impurity(ens, real, per_node)
    return _mean_or_total(type, feature_sums(ens, per_node, ens.node_features), weight)


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
    per_tree = safe_div(per_tree, root[:, None])  # [T, F]
    relevant = jnp.any(real > 0, axis=1)  # [T] trees with a split
    if ens.impurity_scheme == "forest":
        per_tree = safe_div(per_tree, jnp.sum(per_tree, axis=1, keepdims=True))
    total = jnp.sum(jnp.where(relevant[:, None], per_tree, 0.0), axis=0)
    return safe_div(total, jnp.sum(total))


def model_library(ens: Ensemble) -> str:
    """The library whose importance types name ``ens``'s statistics: "LightGBM" for a model that
    LightGBM trained (its ``value_thresholds`` say so), else "" (XGBoost's names)."""
    table = getattr(ens, "value_thresholds", None)
    return "" if table is None else table.library


def _trees_statistics(ens: TreeEnsemble, type: str, fn_name: str) -> Array:
    """``f32[F]`` split statistics of general trees: counts and sums over the internal nodes rows
    can reach (padding excluded), the library's own gains and covers when it stored them,
    scikit-learn's MDI (``ens.impurity_scheme``) for "impurity"; LightGBM's "gain" is its total."""
    if type == "gain" and model_library(ens) == "LightGBM":
        type = "total_gain"  # Booster.feature_importance(importance_type="gain")
    if type == "impurity" and (not ens.impurity_scheme or ens.node_gains is None or ens.node_weights is None):
        raise _impurity_refused(fn_name)
    if type not in _COUNTS and ens.node_gains is None:
        check_weights_known(ens, fn_name, f"type {type!r} reads them; the counts 'weight' and 'split' do not")
    return _trees_kernel(ens, type=type)


# ens.layout -> (ens, type, fn_name) -> f32[F], the checks of what the layout stores, then its kernel
KERNELS = {"oblivious": _oblivious_statistics, "trees": _trees_statistics}


def split_importance(ens: Ensemble, type: str) -> Array:
    """Split statistics per feature: how often, with how much gain and over how much training
    weight (cover) each feature is split on.

    Each ``type`` gives the number the model's library gives under that name:

    * XGBoost models: "weight", "gain" (mean), "cover" (mean), "total_gain" and "total_cover"
      equal XGBoost's ``Booster.get_score(importance_type=type)`` (gains and covers as XGBoost
      stored them, pooled over every class's trees).
    * LightGBM models: "split" and "gain" equal LightGBM's ``Booster.feature_importance(type)``,
      so "gain" is the *total* gain there (equal to "total_gain"); the other names keep
      XGBoost's meaning ("cover" and "total_cover" read LightGBM's ``internal_count``).
    * scikit-learn models: "impurity" equals the model's ``feature_importances_`` (mean decrease
      in impurity); the XGBoost names use its weighted impurity decreases and samples.
    * CatBoost models take XGBoost's names, computed as XGBoost would count the nodes of the
      binary trees CatBoost's trees unroll to (CatBoost stores no gains): see below.

    Types: "weight" and "split" (number of nodes splitting on the feature), "total_gain" (sum
    of their gains), "gain" (= total_gain / weight; LightGBM models: total_gain),
    "total_cover" (sum of their covers), "cover" (= total_cover / weight). A feature never
    split on gets 0.

    For CatBoost's symmetric trees, the split of depth ``d`` of a tree of depth ``D_t`` sits in
    ``2**(D_t - 1 - d)`` nodes of the unrolled tree (the root is the split of the highest bit,
    as CatBoost's ``plot_tree`` draws it), each counted as one split, so each depth adds the
    tree's total training weight to "total_cover". A node's cover is the training weight
    reaching it (CatBoost stores weights, not hessians; they agree for RMSE); its gain is the
    weighted squared change of the model's output that its split makes:

        gain(node) = scale^2 * (cL |VL - V|^2 + cR |VR - V|^2)      (summed over the K outputs)

    with ``cL, cR`` the children's covers and ``VL, VR, V`` the cover-weighted mean leaf values
    of the children and the node. This is CatBoost's PredictionValuesChange term for
    non-symmetric trees and, for squared loss without leaf regularisation, XGBoost's
    structure-score gain ``(GL^2/HL + GR^2/HR - G^2/H) / 2`` times ``2 * learning_rate^2``. A
    tree's gains add up to the weighted variance of its output.

    Args:
        ens: the model.
        type: one of "weight", "split", "gain", "total_gain", "cover", "total_cover",
            "impurity" (see above).

    Returns:
        jax.Array: ``f32[F]`` (a ``jax.Array``); not normalised, except "impurity" (sums to 1, or
            all 0 without a split).

    Differentiable in: for CatBoost models' "gain" and "total_gain", ``ens.leaf_values``,
    ``ens.leaf_weights`` and ``ens.scale``; "cover" and "total_cover" in ``ens.leaf_weights``;
    stored library statistics only in themselves (``node_gains``, ``node_weights``); counts
    ("weight", "split") are piecewise constant.

    Raises:
        TypeError: ``ens`` is not an ensemble.
        ValueError: an unknown ``type``, "impurity" for a model not from scikit-learn, or gains
            and covers of a model without leaf weights.

    Examples:
        >>> jaximp.split_importance(ens, "total_gain").shape
        (10,)
        >>> int(jaximp.split_importance(ens, "weight").sum())  # 20 trees of 2**4 - 1 nodes
        300
    """
    fn_name = "split_importance"
    statistics = KERNELS[check_model(ens, fn_name)]
    if not isinstance(type, str) or type not in SPLIT_IMPORTANCE_TYPES:
        raise ValueError(
            f"{fn_name}: type must be one of {', '.join(repr(t) for t in SPLIT_IMPORTANCE_TYPES)}; got {type!r}"
        )
    return statistics(ens, type, fn_name)
