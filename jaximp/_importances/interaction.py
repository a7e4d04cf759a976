"""CatBoost's Interaction importance: how strongly pairs of features act together in the trees.

Each layout has its kernels (:data:`KERNELS`, keyed by ``ens.layout``): the matrix of a numeric
model, a pure JAX function of the leaf values, and the per-tree scores of pairs of CatBoost's
internal features for a model with categorical features, credited to pairs of columns here on
the host (:func:`_credited_pairs`, CatBoost's ``CalcFeatureInteraction``).

* oblivious trees: the interaction contrast of two depths ``a < b`` of a tree,
  ``sum_l s_ab(l) v[t, l, k]`` with ``s_ab = +1`` where bits a and b of the leaf differ, else -1;
* general trees: CatBoost's walk over each tree's nested splits
  (``jaximp._importances.interaction_trees``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._importances.interaction_trees import internal_pair_scores, tree_interaction
from jaximp._models.ensemble import Ensemble, check_model, safe_div
from jaximp._models.oblivious import ObliviousEnsemble

OUTPUT_REDUCTIONS = ("sum", "abs")


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


_pair_scores_kernel = jax.jit(_pair_scores, static_argnames=("output_reduction",))


@functools.partial(jax.jit, static_argnames=("output_reduction",))
def _oblivious_interaction(ens: ObliviousEnsemble, *, output_reduction: str) -> Array:
    """``f32[F, F]`` the Interaction of a numeric oblivious ensemble."""
    fa, fb = ens.split_features[:, :, None], ens.split_features[:, None, :]
    score = jnp.where(fa != fb, _pair_scores(ens, output_reduction), 0.0)
    n_features = ens.n_features
    lo, hi = jnp.minimum(fa, fb), jnp.maximum(fa, fb)
    flat = jnp.broadcast_to(lo * n_features + hi, score.shape)
    pairs = jax.ops.segment_sum(score.ravel(), flat.ravel(), num_segments=n_features * n_features)
    pairs = pairs.reshape(n_features, n_features)
    return 100.0 * safe_div(pairs + pairs.T, jnp.sum(pairs))


def _oblivious_internal_pairs(ens: ObliviousEnsemble, internal_of: tuple[int, ...], n_internal: int, *,
                              output_reduction: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The per-tree scores of pairs of internal features of an oblivious ensemble: per tree and
    pair of depths on different internal features (arguments and result as
    ``jaximp._importances.interaction_trees.internal_pair_scores``)."""
    internal = np.asarray(internal_of)[np.asarray(ens.split_features)]  # [T, D]
    mask = np.asarray(ens.split_mask)
    scores = np.asarray(_pair_scores_kernel(ens, output_reduction=output_reduction), np.float64)
    t, a, b = np.nonzero(np.triu(np.ones(scores.shape[1:], bool), 1)[None]
                         & (internal[:, :, None] != internal[:, None, :]))
    order = internal[mask]  # every split in the model's order: trees, then depths
    return internal[t, a], internal[t, b], scores[t, a, b], order


@dataclasses.dataclass(frozen=True)
class InteractionKernels:
    """The Interaction kernels of one layout.

    Attributes:
        matrix: ``(ens, *, output_reduction) -> f32[F, F]`` the Interaction of a numeric model.
        internal_pairs: ``(ens, internal_of, n_internal, *, output_reduction)`` ->
            ``(first, second, score, order)``, the per-tree scores of pairs of CatBoost's internal
            features (see :func:`_credited_pairs`).
    """

    matrix: Callable
    internal_pairs: Callable


KERNELS = {
    "oblivious": InteractionKernels(_oblivious_interaction, _oblivious_internal_pairs),
    "trees": InteractionKernels(tree_interaction, internal_pair_scores),
}


def _credited_pairs(credited: tuple[tuple[int, ...], ...], first: np.ndarray, second: np.ndarray,
                    score: np.ndarray, order: np.ndarray, n_features: int) -> Array:
    """``f32[F, F]`` CatBoost's Interaction from the scores of pairs of internal features.

    CatBoost's ``CalcFeatureInteraction`` for a model with categorical features, number for
    number: the scores are summed per pair of internal features, the pair ordered by the
    features' first appearance in the model's splits; each internal pair's score is then shared
    over the pairs of their credited columns, ``score / (|R1| |R2|)`` each, a column with itself
    dropped (but counted in the total). CatBoost's loop swaps its outer column into the smaller
    of the two whenever the inner one is smaller, and keeps it swapped for the rest of the inner
    loop; the same walk is reproduced here, so a CTR over a categorical column and a binarized
    float feature credits its pairs exactly as CatBoost does.

    Args:
        credited: the columns each internal feature is credited to.
        first: ``i[n_scores]`` the first internal feature of each score.
        second: ``i[n_scores]`` the second internal feature of each score (another feature).
        score: ``f64[n_scores]`` non-negative scores; their total is CatBoost's 100.
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


def interaction(ens: Ensemble, *, output_reduction: str | None = None) -> Array:
    """How strongly each pair of features interacts in the trees: CatBoost's ``Interaction``
    importance, as a symmetric ``[F, F]`` matrix.

    CatBoost's ``get_feature_importance(type="Interaction")`` lists the same numbers as rows
    ``[f, g, score]`` (CatBoost's documentation, "Feature interaction strength"). For every tree
    and pair of its depths ``a < b`` splitting on different features ``f != g``:

        delta_k = sum_l s(l) leaf_values[t, l, k],  s(l) = +1 if bits a and b of l differ, else -1
        score[f, g] += |sum_k delta_k|                       (output_reduction="sum", CatBoost)
                    or sum_k |delta_k|                       (output_reduction="abs")

    then the scores are scaled so that the pairs ``f < g`` sum to 100 (the whole symmetric
    matrix sums to 200). ``delta`` is the interaction contrast of the two splits, summed over
    the other splits' leaves; leaf weights play no part.

    ``output_reduction`` matters only for K > 1. CatBoost adds the K outputs before taking the
    absolute value ("sum"). A ``MultiClass`` model's leaf values sum to zero over the classes,
    so there ``sum_k delta_k`` is cancellation noise (about 1e-15 in CatBoost's float64, 1e-8 in
    float32) and CatBoost's Interaction is a normalised rounding error. The default (None) is
    therefore "abs" (the sum of per-output magnitudes) for ``loss_function == "MultiClass"`` and
    "sum", CatBoost's numbers, for every other loss; both agree when K == 1.

    A ``TreeEnsemble`` (non-symmetric trees) gets CatBoost's walk over its trees: each pair of
    nested splits on different features scores the signed sum of the leaf values below, summed
    per tree and feature pair before the absolute value. The numbers are those of the model
    reloaded from its JSON export, the one whose trees jaximp reads: in CatBoost, a freshly
    trained non-symmetric model's Interaction changes after that round trip
    ([CatBoost issue 2136](https://github.com/catboost/catboost/issues/2136)).

    With categorical features (either kind of ensemble), CatBoost scores pairs of its internal
    features (float features, each categorical feature's one-hot values together, CTRs), then
    credits each pair to the pairs of input columns those features are built from: a one-hot
    feature is credited to no column and a column paired with itself is dropped, but both stay
    in the total, so the upper triangle sums to 100 or less. That result is computed on the
    host and is not differentiable.

    Args:
        ens: the model.
        output_reduction: how the K outputs of a multi-output model are combined: "sum"
            (CatBoost's), "abs", or None ("abs" for ``MultiClass`` models, "sum" otherwise; see
            above).

    Returns:
        jax.Array: ``f32[F, F]`` (a ``jax.Array``), symmetric, non-negative, zero diagonal; the
            upper triangle sums to 100 (at most 100 with categorical features; all zeros when no
            tree has two splits on different features).

    Differentiable in: ``ens.leaf_values`` (numeric models; an absolute value inside, so not
    where a pair's score is 0); leaf weights play no part. With categorical features the result
    is computed on the host and cannot be traced (``jax.grad``, ``jit``, ``vmap`` refuse it).

    Raises:
        TypeError: ``ens`` is not an ``ObliviousEnsemble`` or ``TreeEnsemble``.
        ValueError: an unknown ``output_reduction``.

    Examples:
        >>> m = jaximp.interaction(ens)
        >>> m.shape
        (10, 10)
        >>> f, g, score = model.get_feature_importance(type="Interaction")[0]  # the top pair
        >>> np.allclose(m[int(f), int(g)], score, rtol=1e-5, atol=1e-4)
        True
    """
    fn_name = "interaction"
    kernels = KERNELS[check_model(ens, fn_name)]
    if output_reduction is None:
        output_reduction = "abs" if ens.loss_function == "MultiClass" else "sum"
    if output_reduction not in OUTPUT_REDUCTIONS:
        raise ValueError(
            f"{fn_name}: output_reduction must be None or one of {OUTPUT_REDUCTIONS}; got {output_reduction!r}"
        )
    if ens.n_features**2 >= 2**31:
        raise ValueError(f"{fn_name}: the model's features must number under 46341 for a pairwise "
                         f"[F, F] result indexed in int32; got {ens.n_features}")
    if ens.featurizer is None:
        return kernels.matrix(ens, output_reduction=output_reduction)
    # CatBoost scores pairs of its internal features (Featurizer.interaction_features), then
    # credits them to columns; computed on the host from the device's per-tree scores
    internal_of, credited = ens.featurizer.interaction_features()
    first, second, score, order = kernels.internal_pairs(ens, internal_of, len(credited),
                                                         output_reduction=output_reduction)
    return _credited_pairs(credited, first, second, score, order, ens.n_features)
