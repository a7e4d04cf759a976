"""Importances read from the model alone: PredictionValuesChange, Interaction, split statistics.

All three are closed forms of the leaf tables ``leaf_values f32[T, L, K]`` and
``leaf_weights f32[T, L]`` (training weight of each leaf), so they are pure JAX functions of the
ensemble pytree: ``jax.jit`` and ``jax.grad`` (w.r.t. ``leaf_values`` and ``leaf_weights``) go
through them. Divisions are guarded (``where(den > 0, num / where(den > 0, den, 1), 0)``) so that
empty leaves give exact zeros with finite gradients.

Bit ``d`` of a leaf index is the outcome of a tree's split at depth ``d``; two leaves ``i`` and
``i ^ (1 << d)`` differ only at that split (a *leaf pair*, as in CatBoost's
PredictionValuesChange). CatBoost draws the split of
the highest bit as the root of the tree (``plot_tree``), so in the binary tree an oblivious tree
unrolls to, the split of bit ``d`` of a tree of depth ``D_t`` is repeated in ``2**(D_t - 1 - d)``
nodes.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._importances.interaction_trees import internal_pair_scores, tree_interaction
from jaximp._importances.trees_importance import tree_prediction_values_change, tree_split_importance
from jaximp._leaves.predict import leaf_histogram
from jaximp._models.ensemble import check_model, to_columns
from jaximp._models.oblivious import ObliviousEnsemble
from jaximp._models.trees import TreeEnsemble
from jaximp._rows.batching import where_rows
from jaximp._rows.frames import is_pool
from jaximp._rows.inputs import as_features, as_weights

SPLIT_IMPORTANCE_TYPES = ("weight", "split", "gain", "total_gain", "cover", "total_cover", "impurity")
OUTPUT_REDUCTIONS = ("sum", "abs")


def _check_weights_known(ens: ObliviousEnsemble, fn_name: str) -> None:
    if not ens.leaf_weights_known:
        raise ValueError(
            f"{fn_name}: the model file carries no leaf weights, which this needs; pass X (the "
            "training rows) to count them, as CatBoost asks for the training dataset then"
        )


def _safe_div(num: Array, den: Array) -> Array:
    """``num / den`` where ``den > 0``, else 0, with finite gradients everywhere."""
    ok = den > 0
    return jnp.where(ok, num / jnp.where(ok, den, 1.0), 0.0)


def _feature_sum(ens: ObliviousEnsemble, per_split: Array) -> Array:
    """``f32[F]``: ``per_split f32[T, D]`` summed into each split's evaluated feature (padded
    depths add 0), then shared equally among the input columns it reads (CatBoost's
    ``CalcRegularFeatureEffect``: a CTR over a combination credits each of its columns)."""
    values = jnp.where(ens.split_mask, per_split, 0.0)
    per_feature = jax.ops.segment_sum(values.ravel(), ens.split_features.ravel(), num_segments=ens.n_evaluated)
    return to_columns(ens, per_feature, axis=0, per="evaluated")


# --------------------------------------------------------------------------------------------
# PredictionValuesChange


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
    pair = _safe_div(c1 * c2, c1 + c2) * jnp.sum(dv * dv, axis=-1)  # [T, D, L]
    return jnp.sum(jnp.where(first, pair, 0.0), axis=-1)


@jax.jit
def _pvc_kernel(ens: ObliviousEnsemble, weights: Array) -> Array:
    effect = _feature_sum(ens, _leaf_pair_gains(ens.leaf_values, weights))
    return 100.0 * _safe_div(effect, jnp.sum(effect))


def prediction_values_change(
    ens: ObliviousEnsemble | TreeEnsemble,
    X: Any = None,
    *,
    sample_weight: Any = None,
    batch_size: int | None = None,
    devices: Any = None,
) -> Any:
    """CatBoost's ``PredictionValuesChange`` importance (``FeatureImportance`` for non-ranking losses).

    For every tree, depth ``d`` and leaf pair ``(i, i ^ 2**d)`` (leaves that differ only at the
    split of depth ``d``), with weights ``c1, c2`` and values ``v1, v2 [K]``::

        avr = (c1 v1 + c2 v2) / (c1 + c2)
        importance[split_features[t, d]] += sum_k c1 (v1 - avr)^2 + c2 (v2 - avr)^2

    then the importances are scaled to sum to 100 (CatBoost docs, "Feature importance",
    PredictionValuesChange). Pairs with an empty leaf add 0, padded depths of
    shallower trees add 0. Like CatBoost, the model's ``scale`` and ``bias`` play no part (a
    scale multiplies every term by ``scale**2``, which the normalisation removes).

    Without ``X`` the leaf weights are the model's training weights (``ens.leaf_weights``).
    With ``X``, CatBoost's ``get_feature_importance(Pool(X), type="PredictionValuesChange")``
    recounts them from the rows of ``X``: ``c = sum of sample_weight over the rows in the leaf``
    (1 per row without weights). A ``catboost.Pool`` brings its own weights. CatBoost also
    multiplies by the model's class weights when the Pool has labels and the model was trained
    with ``class_weights``/``auto_class_weights``; pass ``sample_weight=class_weights[y]`` to
    reproduce that.

    A ``TreeEnsemble`` (non-symmetric trees) gets CatBoost's rule for such trees: sibling leaves
    are merged bottom-up, each internal node scoring ``c1 (v1 - avr)^2 + c2 (v2 - avr)^2`` of
    its two children's weights and weighted mean values.

    Args:
        ens: the model.
        X: None, or ``[N, F]`` rows (NumPy/JAX array, pandas/polars DataFrame, catboost.Pool).
        sample_weight: ``f[N]`` non-negative row weights (only with ``X``); None: 1 per row, or
            the Pool's weights.
        batch_size: rows per device step when counting leaves; None picks one.
        devices: None, an int or a list of ``jax.Device`` to shard rows over.

    Returns:
        ``f32[F]``, non-negative, summing to 100 (all zeros if every leaf pair has equal values):
        a ``jax.Array`` without ``X`` (differentiable in ``leaf_values`` and ``leaf_weights``);
        with ``X``, NumPy for rows in host memory and a ``jax.Array`` for rows given as one.

    Differentiable in: ``ens.leaf_values`` and ``ens.leaf_weights`` (without ``X``) or
    ``sample_weight`` (with ``X``: the leaf weights are its sums per leaf); piecewise constant in
    ``X`` and the splits. Not differentiable where a leaf pair's weights are both 0 (a kink).

    Raises:
        TypeError: ``ens`` is not an ensemble; ``X`` or ``sample_weight`` of a wrong type.
        ValueError: ``X`` of a wrong shape, ``sample_weight`` without ``X``, of a wrong length,
            negative or not finite.

    Example:
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
    if isinstance(ens, TreeEnsemble):
        return _tree_pvc(ens, X, sample_weight, batch_size, devices, fn_name)
    check_model(ens, fn_name)
    if X is None:
        if sample_weight is not None:
            raise ValueError(f"{fn_name}: sample_weight must come with X (it weighs X's rows); got X=None")
        _check_weights_known(ens, fn_name)
        return _pvc_kernel(ens, ens.leaf_weights)
    x = as_features(X, ens, fn_name)
    if sample_weight is None and is_pool(X):
        sample_weight = X.get_weight()
    w = as_weights(sample_weight, x.shape[0], fn_name, allow_all_zero=True)
    weights = leaf_histogram(ens, x, w, batch_size=batch_size, devices=devices, fn_name=fn_name)
    return where_rows(_pvc_kernel(ens, weights), x)


def _tree_pvc(ens: TreeEnsemble, X: Any, sample_weight: Any, batch_size: Any, devices: Any,
              fn_name: str) -> Array:
    """PredictionValuesChange of non-symmetric trees (sibling leaves merged bottom-up), with the
    leaf weights recounted on ``X`` when it is given, as for oblivious trees."""
    if X is None:
        if sample_weight is not None:
            raise ValueError(f"{fn_name}: sample_weight must come with X (it weighs X's rows); got X=None")
        _check_weights_known(ens, fn_name)
        return tree_prediction_values_change(ens)
    x = as_features(X, ens, fn_name)
    if sample_weight is None and is_pool(X):
        sample_weight = X.get_weight()
    w = as_weights(sample_weight, x.shape[0], fn_name, allow_all_zero=True)
    counts = leaf_histogram(ens, x, w, batch_size=batch_size, devices=devices, fn_name=fn_name)
    return where_rows(tree_prediction_values_change(ens, counts), x)


# --------------------------------------------------------------------------------------------
# Interaction


def _pair_scores(ens: ObliviousEnsemble, output_reduction: str) -> Array:
    """``f32[T, D, D]`` the interaction score of each tree's pair of depths ``a < b`` (0 elsewhere).

    ``delta[t, a, b, k] = sum_l s_ab(l) v[t, l, k]`` with ``s_ab = +1`` where bits a and b differ,
    else -1; the score is ``|sum_k delta|`` ("sum") or ``sum_k |delta|`` ("abs").
    """
    depth = ens.depth
    bits = (np.arange(ens.n_leaves)[None, :] >> np.arange(depth)[:, None]) & 1
    sign = jnp.asarray(1 - 2 * bits, jnp.float32)  # [D, L]: +1 where bit d is 0, -1 where 1
    delta = -jnp.einsum("al,bl,tlk->tabk", sign, sign, ens.leaf_values)
    if output_reduction == "sum":
        score = jnp.abs(jnp.sum(delta, axis=-1))
    else:
        score = jnp.sum(jnp.abs(delta), axis=-1)
    upper = np.triu(np.ones((depth, depth), bool), k=1)
    return jnp.where(upper & ens.split_mask[:, :, None] & ens.split_mask[:, None, :], score, 0.0)


@functools.partial(jax.jit, static_argnames=("output_reduction",))
def _interaction_kernel(ens: ObliviousEnsemble, *, output_reduction: str) -> Array:
    fa, fb = ens.split_features[:, :, None], ens.split_features[:, None, :]
    score = jnp.where(fa != fb, _pair_scores(ens, output_reduction), 0.0)
    n_features = ens.n_features
    lo, hi = jnp.minimum(fa, fb), jnp.maximum(fa, fb)
    flat = jnp.broadcast_to(lo * n_features + hi, score.shape)
    pairs = jax.ops.segment_sum(score.ravel(), flat.ravel(), num_segments=n_features * n_features)
    pairs = pairs.reshape(n_features, n_features)
    return 100.0 * _safe_div(pairs + pairs.T, jnp.sum(pairs))


def _categorical_interaction(ens: ObliviousEnsemble | TreeEnsemble, output_reduction: str) -> Array:
    """CatBoost's ``CalcFeatureInteraction`` for a model with categorical features, number for number.

    CatBoost scores pairs of its internal features (float features, one-hot features, CTRs:
    ``Featurizer.interaction_features``): per tree and pair of depths of an oblivious tree, per
    tree and pair of internal features of a non-symmetric one (``internal_pair_scores``). The
    scores are summed per pair of internal features, the pair ordered by the features' first
    appearance in the model's splits; each internal pair's score is then shared over the
    pairs of their credited columns, ``score / (|R1| |R2|)`` each, a column with itself dropped
    (but counted in the total). CatBoost's loop swaps its outer column into the smaller of the
    two whenever the inner one is smaller, and keeps it swapped for the rest of the inner loop;
    the same walk is reproduced here, so a CTR over a categorical column and a binarized float
    feature credits its pairs exactly as CatBoost does. Computed on the host from the device's
    per-tree scores (not differentiable in the leaf values, unlike the numeric path).
    """
    internal_of, credited = ens.featurizer.interaction_features()
    n_internal = len(credited)
    if isinstance(ens, TreeEnsemble):
        i, j, score, order = internal_pair_scores(ens, internal_of, n_internal, output_reduction=output_reduction)
    else:
        internal = np.asarray(internal_of)[np.asarray(ens.split_features)]  # [T, D]
        mask = np.asarray(ens.split_mask)
        scores = np.asarray(jax.jit(_pair_scores, static_argnums=1)(ens, output_reduction), np.float64)
        t, a, b = np.nonzero(np.triu(np.ones(scores.shape[1:], bool), 1)[None]
                             & (internal[:, :, None] != internal[:, None, :]))
        i, j, score = internal[t, a], internal[t, b], scores[t, a, b]
        order = internal[mask]  # every split in the model's order: trees, then depths
    return _credited_pairs(credited, i, j, score, order, ens.n_features)


def _credited_pairs(credited: tuple[tuple[int, ...], ...], first: np.ndarray, second: np.ndarray,
                    score: np.ndarray, order: np.ndarray, n_features: int) -> Array:
    """``f32[F, F]`` CatBoost's Interaction from the scores of pairs of internal features.

    Args:
        credited: the columns each internal feature is credited to.
        first, second: ``i[n]`` the internal features of each score (different features).
        score: ``f64[n]`` non-negative scores; their total is CatBoost's 100.
        order: the internal feature of every split in the model's order (first appearances
            orient each pair, as CatBoost's ``GetFeatureToIdxMap``).
        n_features: F.
    """
    n_internal = len(credited)
    rank = np.full(n_internal, n_internal)
    rank[order[::-1]] = np.arange(len(order))[::-1]  # first appearance
    keep = score > 0
    i, j = first[keep], second[keep]
    i, j = np.where(rank[i] <= rank[j], i, j), np.where(rank[i] <= rank[j], j, i)
    keys, inverse = np.unique(i * n_internal + j, return_inverse=True)
    sums = np.bincount(inverse.reshape(-1), weights=score[keep], minlength=len(keys))
    total = score.sum()
    pairs = np.zeros((n_features, n_features))
    for key, value in zip(keys.tolist(), sums.tolist()):  # the distinct internal pairs, CatBoost's loop
        first_columns, second_columns = credited[key // n_internal], credited[key % n_internal]
        for f in first_columns:
            for g in second_columns:
                if f == g:
                    continue
                if g < f:
                    f, g = g, f  # CatBoost's swap, which outlives the inner iteration
                pairs[f, g] += value / (len(first_columns) * len(second_columns))
    pairs = 100.0 * pairs / total if total > 0 else pairs
    return jnp.asarray(pairs + pairs.T, jnp.float32)


def interaction(ens: ObliviousEnsemble | TreeEnsemble, *, output_reduction: str | None = None) -> Array:
    """CatBoost's ``Interaction`` importance as a symmetric ``[F, F]`` matrix.

    For every tree and pair of its depths ``a < b`` splitting on different features ``f != g``::

        delta_k = sum_l s(l) leaf_values[t, l, k],  s(l) = +1 if bits a and b of l differ, else -1
        score[f, g] += |sum_k delta_k|                       (output_reduction="sum", CatBoost)
                    or sum_k |delta_k|                       (output_reduction="abs")

    then the scores are scaled so that the pairs ``f < g`` sum to 100 (the whole symmetric
    matrix sums to 200). ``delta`` is the interaction contrast of the two splits, summed over
    the other splits' leaves; leaf weights play no part. CatBoost's
    ``get_feature_importance(type="Interaction")`` lists the same numbers as rows
    ``[f, g, score]`` (CatBoost docs, "Feature interaction strength"; ``CalcMostInteractingFeatures``).

    ``output_reduction`` matters only for K > 1. CatBoost adds the K outputs before taking the
    absolute value ("sum"). A ``MultiClass`` model's leaf values sum to zero over the classes,
    so there ``sum_k delta_k`` is cancellation noise (about 1e-15 in CatBoost's float64, 1e-8 in
    float32) and CatBoost's Interaction is a normalised rounding error. The default (None) is
    therefore "abs" (the sum of per-output magnitudes) for ``loss_function == "MultiClass"`` and
    "sum", CatBoost's numbers, for every other loss; both agree when K == 1.

    A ``TreeEnsemble`` (non-symmetric trees) gets CatBoost's walk over its trees: each pair of
    nested splits on different features scores the signed sum of the leaf values below, summed
    per tree and feature pair before the absolute value. The numbers are those of the model
    reloaded from its JSON export: in CatBoost, a freshly trained non-symmetric model's
    Interaction changes after that round trip (CatBoost issue 2136), and the reloaded model is
    the one whose trees jaximp reads.

    With categorical features (either kind of ensemble), CatBoost scores pairs of its internal
    features (float features, each categorical feature's one-hot values together, CTRs), then
    credits each pair to the pairs of input columns those features are built from: a one-hot
    feature is credited to no column and a column paired with itself is dropped, but both stay
    in the total, so the upper triangle sums to 100 or less. That result is computed on the
    host and is not differentiable.

    Args:
        ens: the model.
        output_reduction: None (see above), "sum" or "abs".

    Returns:
        ``f32[F, F]`` (a ``jax.Array``), symmetric, non-negative, zero diagonal; the upper
        triangle sums to 100 (at most 100 with categorical features; all zeros when no tree has
        two splits on different features).

    Differentiable in: ``ens.leaf_values`` (numeric models; an absolute value inside, so not
    where a pair's score is 0); leaf weights play no part. With categorical features the result
    is computed on the host and cannot be traced (``jax.grad``, ``jit``, ``vmap`` refuse it).

    Raises:
        TypeError: ``ens`` is not an ``ObliviousEnsemble`` or ``TreeEnsemble``.
        ValueError: an unknown ``output_reduction``.

    Example:
        >>> m = jaximp.interaction(ens)
        >>> m.shape
        (10, 10)
        >>> f, g, score = model.get_feature_importance(type="Interaction")[0]  # the top pair
        >>> np.allclose(m[int(f), int(g)], score, rtol=1e-5, atol=1e-4)
        True
    """
    fn_name = "interaction"
    if not isinstance(ens, TreeEnsemble):
        check_model(ens, fn_name)
    if output_reduction is None:
        output_reduction = "abs" if ens.loss_function == "MultiClass" else "sum"
    if output_reduction not in OUTPUT_REDUCTIONS:
        raise ValueError(
            f"{fn_name}: output_reduction must be None or one of {OUTPUT_REDUCTIONS}; got {output_reduction!r}"
        )
    if ens.n_features**2 >= 2**31:
        raise ValueError(f"{fn_name}: the model's features must number under 46341 for a pairwise "
                         f"[F, F] result indexed in int32; got {ens.n_features}")
    if ens.featurizer is not None:
        return _categorical_interaction(ens, output_reduction)
    if isinstance(ens, TreeEnsemble):
        return tree_interaction(ens, output_reduction=output_reduction)
    return _interaction_kernel(ens, output_reduction=output_reduction)


# --------------------------------------------------------------------------------------------
# Split statistics (XGBoost get_score / LightGBM feature_importance)


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
        gains.append(jnp.sum(_safe_div(w2[..., 0] * w2[..., 1], w2[..., 0] + w2[..., 1]) * jnp.sum(dv * dv, -1), -1))
        w = jnp.sum(w2, axis=-1)
        v = _safe_div(jnp.sum(w2[..., None] * v2, axis=2), w[..., None])
    if not gains:
        return jnp.zeros((n_trees, 0), leaf_values.dtype)
    return jnp.stack(gains, axis=1)


@functools.partial(jax.jit, static_argnames=("type",))
def _split_kernel(ens: ObliviousEnsemble, *, type: str) -> Array:
    tree_depth = jnp.sum(ens.split_mask, axis=1, keepdims=True)  # [T, 1]
    level = tree_depth - 1 - jnp.arange(ens.depth)  # [T, D]: distance of depth d from the root
    n_nodes = jnp.where(ens.split_mask, 2.0 ** jnp.maximum(level, 0), 0.0)
    weight = _feature_sum(ens, n_nodes)
    if type in ("weight", "split"):
        return weight
    if type in ("total_cover", "cover"):
        tree_weight = jnp.sum(ens.leaf_weights, axis=1, keepdims=True)  # every row reaches every depth
        total = _feature_sum(ens, jnp.broadcast_to(tree_weight, n_nodes.shape))
    else:
        total = ens.scale**2 * _feature_sum(ens, _node_gains(ens.leaf_values, ens.leaf_weights))
    return total if type.startswith("total_") else _safe_div(total, weight)


def split_importance(ens: ObliviousEnsemble | TreeEnsemble, type: str) -> Array:
    """Split statistics per feature: XGBoost's ``get_score`` and LightGBM's ``feature_importance``.

    An oblivious tree is read as the binary tree it unrolls to, with CatBoost's orientation (the
    root is the split of the highest bit, as ``plot_tree`` draws it): the split of depth ``d``
    of a tree of depth ``D_t`` sits in ``2**(D_t - 1 - d)`` nodes, each counted as one split,
    exactly as XGBoost would count the nodes of that binary tree (XGBoost docs,
    ``Booster.get_score``'s ``importance_type``). A node's
    cover is the training weight reaching it (``ens.leaf_weights`` summed over its leaves:
    CatBoost stores weights, not hessians; they agree for RMSE); its gain is the weighted
    squared change of the model's output that its split makes::

        gain(node) = scale^2 * (cL |VL - V|^2 + cR |VR - V|^2)      (summed over the K outputs)

    with ``cL, cR`` the children's covers and ``VL, VR, V`` the cover-weighted mean leaf values
    of the children and the node. This is the bottom-up merge of CatBoost's
    PredictionValuesChange for non-symmetric trees and, for squared loss without leaf
    regularisation, XGBoost's structure-score gain ``(GL^2/HL + GR^2/HR - G^2/H) / 2`` times
    ``2 * learning_rate^2``. A tree's gains add up to the weighted variance of its output,
    ``scale^2 sum_l c_l |v_l - mean|^2``. At the deepest split it equals PredictionValuesChange's
    leaf-pair term; above, the leaf-pair formula compares leaves, not the node's children.

    Types: "weight" and "split" (number of nodes splitting on the feature), "total_gain" (sum
    of their gains), "gain" (= total_gain / weight), "total_cover" (sum of their covers: the
    nodes of one depth partition the tree's rows, so each depth adds the tree's total training
    weight), "cover" (= total_cover / weight). A feature never split on gets 0.

    A ``TreeEnsemble`` counts its own nodes; the gains and covers its library stored (XGBoost's
    ``get_score``: loss change and hessian sum per split, pooled over every class's trees;
    LightGBM's ``feature_importance``: "split" counts, "total_gain" its "gain"), else CatBoost's
    as above. "impurity" is scikit-learn's ``feature_importances_`` (mean decrease in impurity,
    each tree's decreases over its root's weighted samples; forests normalise each tree, average
    and normalise again; boosting and single trees average and normalise once), for scikit-learn
    models only.

    Args:
        ens: the model.
        type: one of "weight", "split", "gain", "total_gain", "cover", "total_cover", "impurity".

    Returns:
        ``f32[F]`` (a ``jax.Array``); not normalised, except "impurity" (sums to 1, or all 0
        without a split).

    Differentiable in: for CatBoost models' "gain" and "total_gain", ``ens.leaf_values``,
    ``ens.leaf_weights`` and ``ens.scale``; "cover" and "total_cover" in ``ens.leaf_weights``;
    stored library statistics only in themselves (``node_gains``, ``node_weights``); counts
    ("weight", "split") are piecewise constant.

    Raises:
        TypeError: ``ens`` is not an ensemble.
        ValueError: an unknown ``type``, "impurity" for a model not from scikit-learn, or gains
            and covers of a model without leaf weights.

    Example:
        >>> jaximp.split_importance(ens, "total_gain").shape
        (10,)
        >>> int(jaximp.split_importance(ens, "weight").sum())  # 20 trees of 2**4 - 1 nodes
        300
    """
    fn_name = "split_importance"
    if not isinstance(ens, TreeEnsemble):
        check_model(ens, fn_name)
    if not isinstance(type, str) or type not in SPLIT_IMPORTANCE_TYPES:
        raise ValueError(
            f"{fn_name}: type must be one of {', '.join(repr(t) for t in SPLIT_IMPORTANCE_TYPES)}; got {type!r}"
        )
    if isinstance(ens, TreeEnsemble):
        return tree_split_importance(ens, type)
    if type == "impurity":
        raise ValueError(f"{fn_name}: type 'impurity' (scikit-learn's feature_importances_) is defined "
                         "for scikit-learn models only; use 'gain' or 'total_gain'")
    if type not in ("weight", "split"):
        _check_weights_known(ens, fn_name)
    return _split_kernel(ens, type=type)
