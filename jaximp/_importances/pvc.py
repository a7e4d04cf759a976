"""PredictionValuesChange: how much a tree's value changes across each of its splits, per feature.

A closed form of the leaf tables ``leaf_values f32[T, L, K]`` and the leaf weights ``f32[T, L]``
(the training weights ``ens.leaf_weights``, or the weights of given rows), so a pure JAX function
of the ensemble pytree: ``jax.jit`` and ``jax.grad`` (w.r.t. ``leaf_values`` and the weights) go
through it. Divisions are guarded (``jaximp._models.ensemble.safe_div``) so that empty leaves
give exact zeros with finite gradients. One kernel serves both layouts; only the per-split
effect differs (:data:`EFFECTS`, keyed by ``ens.layout``):

* oblivious trees: bit ``d`` of a leaf index is the outcome of a tree's split at depth ``d``;
  two leaves ``i`` and ``i ^ (1 << d)`` differ only at that split (a *leaf pair*), and each pair
  credits the split with ``c1 (v1 - avr)^2 + c2 (v2 - avr)^2`` (CatBoost docs, "Feature
  importance", PredictionValuesChange);
* general trees: sibling leaves are merged bottom-up (CatBoost's rule for non-symmetric trees).
  An internal node whose children hold weights ``cL, cR`` and (weighted mean) values
  ``VL, VR [K]`` credits its feature with
  ``cL (VL - avr)^2 + cR (VR - avr)^2 = cL cR / (cL + cR) |VL - VR|^2``,
  ``avr = (cL VL + cR VR) / (cL + cR)``, and becomes a leaf of weight ``cL + cR`` and value
  ``avr``. Merging bottom-up makes a node's value the weighted mean of its subtree's leaves, so
  every node is computed at once from its subtree's cover and weighted value sum (segment sums
  over the leaves' paths).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._leaves.predict import leaf_histogram
from jaximp._models.ensemble import Ensemble, check_model, safe_div, to_columns
from jaximp._models.oblivious import ObliviousEnsemble
from jaximp._models.trees import TreeEnsemble, subtree_sums
from jaximp._rows.batching import where_rows
from jaximp._rows.frames import is_pool
from jaximp._rows.inputs import as_features, as_weights


def check_weights_known(ens: Ensemble, fn_name: str, fix: str) -> None:
    """A ValueError naming ``fn_name`` (and ``fix``, what to do instead) when the model file
    carries no leaf weights."""
    if not ens.leaf_weights_known:
        raise ValueError(f"{fn_name}: the model file carries no leaf weights, which this needs; {fix}")


def feature_sums(ens: Ensemble, per_split: Array, split_features: Array) -> Array:
    """``f32[F]``: values of splits summed onto the evaluated feature each split reads, then shared
    equally among the input columns that feature reads (CatBoost's ``CalcRegularFeatureEffect``:
    a CTR over a combination credits each of its columns).

    Args:
        ens: the model.
        per_split: ``f32[T, D]`` (one per depth of an oblivious tree) or ``f32[T, M]`` (one per
            internal node), 0 where padded.
        split_features: ``i32`` of the same shape, the evaluated feature each split reads.
    """
    flat = jax.ops.segment_sum(per_split.ravel(), split_features.ravel(), num_segments=ens.n_evaluated)
    return to_columns(ens, flat, axis=0, per="evaluated")


def depth_sums(ens: ObliviousEnsemble, per_depth: Array) -> Array:
    """``f32[F]``: :func:`feature_sums` of ``per_depth f32[T, D]`` (padded depths add 0)."""
    return feature_sums(ens, jnp.where(ens.split_mask, per_depth, 0.0), ens.split_features)


def _leaf_pair_gains(leaf_values: Array, weights: Array) -> Array:
    """``f32[T, D]``: sum over the leaf pairs of each depth of ``c1 (v1-avr)^2 + c2 (v2-avr)^2``.

    Uses ``c1 (v1 - avr)^2 + c2 (v2 - avr)^2 = c1 c2 / (c1 + c2) * (v1 - v2)^2`` with
    ``avr = (c1 v1 + c2 v2) / (c1 + c2)``, summed over the K outputs.
    """
    n_leaves = leaf_values.shape[1]
    depth = max(n_leaves.bit_length() - 1, 0)
    leaf = np.arange(n_leaves)
    bit = 1 << np.arange(depth)[:, None]  # [D, 1]
    partner = leaf[None, :] ^ bit  # [D, L]: the leaf that differs at depth d only
    first = (leaf[None, :] & bit) == 0  # [D, L]: count each pair once
    c1 = weights[:, None, :]  # [T, 1, L]
    c2 = weights[:, partner]  # [T, D, L]
    dv = leaf_values[:, None, :, :] - leaf_values[:, partner, :]  # [T, D, L, K]
    pair = safe_div(c1 * c2, c1 + c2) * jnp.sum(dv * dv, axis=-1)  # [T, D, L]
    return jnp.sum(jnp.where(first, pair, 0.0), axis=-1)


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
    v = safe_div(s, c[..., None])  # [T, M, 2, K]
    dv = v[:, :, 0] - v[:, :, 1]
    return safe_div(c[..., 0] * c[..., 1], c[..., 0] + c[..., 1]) * jnp.sum(dv * dv, axis=-1)


# ens.layout -> (ens, leaf_weights f32[T, L]) -> f32[F], each feature's unnormalised effect
EFFECTS = {
    "oblivious": lambda ens, weights: depth_sums(ens, _leaf_pair_gains(ens.leaf_values, weights)),
    "trees": lambda ens, weights: feature_sums(ens, node_gains(ens, weights), ens.node_features),
}


@jax.jit
def _pvc_kernel(ens: Ensemble, weights: Array) -> Array:
    effect = EFFECTS[ens.layout](ens, weights)
    return 100.0 * safe_div(effect, jnp.sum(effect))


def prediction_values_change(
    ens: Ensemble,
    X: Any = None,
    *,
    sample_weight: Any = None,
    batch_size: int | None = None,
    devices: Any = None,
) -> Any:
    """How much the prediction changes, on average, across each feature's splits: CatBoost's
    ``PredictionValuesChange`` importance.

    Equals CatBoost's ``get_feature_importance(type="PredictionValuesChange")`` (also its
    default ``type="FeatureImportance"`` for non-ranking losses), scaled to sum to 100. For
    every split of a symmetric tree and every two leaves that differ only at that split, with
    training weights ``c1, c2`` and values ``v1, v2 [K]`` (CatBoost's documentation, "Feature
    importance"):

        avr = (c1 v1 + c2 v2) / (c1 + c2)
        importance[feature of the split] += sum_k c1 (v1 - avr)^2 + c2 (v2 - avr)^2

    A ``TreeEnsemble`` gets CatBoost's rule for non-symmetric trees: sibling leaves are merged
    bottom-up, each split scoring the same sum over its two children's weights and weighted
    mean values. Leaves without weight add 0. Like CatBoost, the model's ``scale`` and
    ``bias`` play no part (the normalisation removes ``scale**2``).

    Without ``X`` the leaf weights are the model's training weights (``ens.leaf_weights``).
    With ``X``, as CatBoost's ``get_feature_importance(Pool(X),
    type="PredictionValuesChange")``, they are recounted from the rows: each leaf's sum of
    ``sample_weight`` over the rows that reach it (1 per row without weights; a
    ``catboost.Pool`` brings its own weights). CatBoost also multiplies by the model's class
    weights when the Pool has labels and the model was trained with
    ``class_weights``/``auto_class_weights``; pass ``sample_weight=class_weights[y]`` to
    reproduce that.

    Args:
        ens: the model.
        X: None, or ``[N, F]`` rows (NumPy/JAX array, pandas/polars DataFrame,
            ``catboost.Pool``) to count the leaf weights on.
        sample_weight: ``f[N]`` non-negative row weights (only with ``X``); None: 1 per row, or
            the Pool's weights.
        batch_size: rows per device step when counting leaves; None picks one.
        devices: None, an int or a list of ``jax.Device`` to shard rows over.

    Returns:
        np.ndarray | jax.Array: ``f32[F]``, non-negative, summing to 100 (all zeros if no split
            changes a value): a ``jax.Array`` without ``X``; with ``X``, NumPy for rows in host
            memory and a ``jax.Array`` for rows given as one.

    Differentiable in: ``ens.leaf_values`` and ``ens.leaf_weights`` (without ``X``) or
    ``sample_weight`` (with ``X``: the leaf weights are its sums per leaf); piecewise constant in
    ``X`` and the splits. Not differentiable where both leaves of a split have weight 0 (a kink).

    Raises:
        TypeError: ``ens`` is not an ensemble; ``X`` or ``sample_weight`` of a wrong type.
        ValueError: ``X`` of a wrong shape, ``sample_weight`` without ``X``, of a wrong length,
            negative or not finite; no ``X`` for a model file without leaf weights.

    Examples:
        >>> pvc = jaximp.prediction_values_change(ens)
        >>> pvc.shape
        (10,)
        >>> catboost_pvc = model.get_feature_importance(type="PredictionValuesChange")
        >>> np.allclose(pvc, catboost_pvc, rtol=1e-5, atol=1e-4)    # float32, summing to 100
        True
        >>> on_rows = jaximp.prediction_values_change(ens, X[:100])  # leaf weights of these rows
        >>> np.allclose(on_rows, model.get_feature_importance(catboost.Pool(X[:100]),
        ...                                                   type="PredictionValuesChange"),
        ...             rtol=1e-5, atol=1e-4)
        True
    """
    fn_name = "prediction_values_change"
    check_model(ens, fn_name)
    if X is None:
        if sample_weight is not None:
            raise ValueError(f"{fn_name}: sample_weight must come with X (it weighs X's rows); got X=None")
        check_weights_known(ens, fn_name, "pass X (the training rows) to count them, as CatBoost asks for "
                                          "the training dataset then")
        return _pvc_kernel(ens, ens.leaf_weights)
    x = as_features(X, ens, fn_name)
    if sample_weight is None and is_pool(X):
        sample_weight = X.get_weight()
    w = as_weights(sample_weight, x.shape[0], fn_name, allow_all_zero=True)
    weights = leaf_histogram(ens, x, w, batch_size=batch_size, devices=devices, fn_name=fn_name)
    return where_rows(_pvc_kernel(ens, weights), x)
