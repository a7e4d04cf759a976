"""CatBoost's Interaction importance of :class:`TreeEnsemble` models (non-symmetric trees).

CatBoost (catboost/libs/fstr/feature_str.cpp, ``CalcMostInteractingFeatures`` for non-oblivious
models) walks each tree depth-first, carrying the path's edges as ``(feature, sign)`` with sign
-1 for a left edge and +1 for a right edge. At each terminal node with value ``v [K]`` it adds,
for every pair of path edges ``a`` above ``b`` on different features ``f != g``,
``s_a s_b sum_k v_k`` to the tree's score of the pair ``{f, g}``; the tree's scores enter the
model's as absolute values, and the pairs' totals are scaled to sum to 100
(``CalcFeatureInteraction``, calc_fstr.cpp). A left and a right edge from the same node sum to
the difference of the node's two children, so the tree's score of ``{f, g}`` is

    delta_t(f, g) = sum_{b, a ancestor of b, {feat a, feat b} = {f, g}} s_a(b) (S(right_b) - S(left_b))

with ``S(c) = sum_k`` of the leaf values under child ``c`` and ``s_a(b)`` the sign of the edge
leaving ``a`` towards ``b``: O(T M D) terms instead of O(T L D^2).

Which layout CatBoost walks matters. A model loaded from CatBoost's JSON export has every leaf as
a terminal node of its own (json_model_helpers.cpp, ``GetNonSymmetricModelTrees``), which is the
walk above. A freshly trained or ``.cbm`` model keeps a leaf whose sibling is an internal node
*inside* its parent (model_build_helper.cpp, ``TNonSymmetricTreeModelBuilder::AddTreeNode``), and
the same walk then drops that leaf's last edge and gives its sibling sign -1 even on the right:
that is why CatBoost's Interaction of such a model changes after a JSON round trip.
The JSON-reloaded model, which predicts the same and is CatBoost's reference for these trees, is
the one reproduced here (checked against CatBoost 1.2.10).

With categorical features the walk's "feature" is CatBoost's internal feature
(``GetFeatureToIdxMap``: a float feature, a categorical feature's one-hot values together, a
CTR), so :func:`internal_pair_scores` keys the same terms on internal features and returns the
per-tree scores; ``jaximp._importances.interaction`` credits them to columns as for oblivious
models. The internal features' order of first appearance, which orients the pairs there, is
that of the nodes (trees, then each tree's nodes as stored), CatBoost's order for the
JSON-reloaded model (checked on CTRs over several columns, where the orientation matters).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._models.ensemble import safe_div, to_columns
from jaximp._models.trees import TreeEnsemble, parents, subtree_sums
from jaximp._rows.batching import is_traced


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class PairTerms:
    """The terms of every tree's pair scores (host arrays, or device arrays as a kernel's
    argument): ``n_terms`` terms, ``n_keys`` (tree, feature pair) keys.

    Attributes:
        tree: ``i32[n_terms]`` the term's tree.
        node: ``i32[n_terms]`` its lower internal node ``b``.
        sign: ``f32[n_terms]`` ``s_a(b)``: +1 when ``b`` is below its ancestor's right edge, else -1.
        key: ``i32[n_terms]`` its (tree, feature pair) key, ``0..n_keys-1``.
        pair: ``i32[n_keys]`` each key's feature pair ``f * E + g`` (``f < g``, evaluated
            features; with ``node_keys``, the given features and their number in place of E).
    """

    tree: Any
    node: Any
    sign: Any
    key: Any
    pair: Any


def pair_terms(ens: TreeEnsemble, node_keys: np.ndarray | None = None, n_keys: int | None = None) -> PairTerms:
    """The :class:`PairTerms` of ``ens``: every (internal node, ancestor) whose features differ.

    Reads the trees' structure only (on the host), so it is computed once per model and the
    scores stay differentiable in ``ens.leaf_values``.

    Args:
        ens: the model.
        node_keys: ``i[T, M]`` the feature each node counts as, ``0..n_keys-1`` (CatBoost's
            internal feature of a categorical model's split); None: ``ens.node_features``.
        n_keys: the number of such features; None: E.
    """
    node_parent, node_side, _, _ = (np.asarray(a) for a in parents(ens))  # [T, M]
    features = np.asarray(ens.node_features if node_keys is None else node_keys)
    t, m = features.shape
    rows = np.arange(t)[:, None]
    ancestor, side = node_parent, node_side  # the 0-th ancestor: the parent, reached by side
    terms = []
    for _ in range(max(ens.depth - 1, 0)):  # internal nodes have at most D - 1 ancestors
        real = ancestor >= 0
        tree, node = np.nonzero(real)
        a = ancestor[tree, node]
        terms.append((tree, node, 2.0 * side[tree, node] - 1.0, features[tree, a], features[tree, node]))
        up = np.maximum(ancestor, 0)
        side = np.where(real, node_side[rows, up], 0)
        ancestor = np.where(real, node_parent[rows, up], -1)
    tree, node, sign, fa, fb = (np.concatenate([term[i] for term in terms]) if terms else np.zeros(0, int)
                                for i in range(5))
    keep = fa != fb
    tree, node, sign = tree[keep], node[keep], sign[keep]
    lo, hi = np.minimum(fa, fb)[keep].astype(np.int64), np.maximum(fa, fb)[keep].astype(np.int64)
    e = ens.n_evaluated if n_keys is None else n_keys
    keys, key = np.unique((tree * e + lo) * e + hi, return_inverse=True)
    return PairTerms(tree.astype(np.int32), node.astype(np.int32), sign.astype(np.float32),
                     key.reshape(-1).astype(np.int32), (keys % (e * e)).astype(np.int32))


def child_sum_difference(ens: TreeEnsemble) -> Array:
    """``f32[T, M, K]`` ``S(right) - S(left)`` of each internal node: the sums of the leaf values
    below its two children (padded nodes: anything, never read)."""
    _, total = subtree_sums(ens, jnp.ones_like(ens.leaf_weights))  # [T, M, K] unit-weight sums
    children = ens.node_children  # [T, M, 2]
    is_node = children >= 0
    node = jnp.where(is_node, children, 0)
    leaf = jnp.where(is_node, 0, jnp.clip(~children, 0, ens.n_leaves - 1))
    rows = jnp.arange(ens.n_trees)[:, None, None]
    sums = jnp.where(is_node[..., None], total[rows, node], ens.leaf_values[rows, leaf])  # [T, M, 2, K]
    return sums[:, :, 1] - sums[:, :, 0]


def _key_scores(ens: TreeEnsemble, terms: PairTerms, *, output_reduction: str) -> Array:
    """``f32[n_keys]`` each (tree, feature pair) key's score: ``|sum_k delta_t(f, g)_k|`` ("sum") or
    ``sum_k |delta_t(f, g)_k|`` ("abs")."""
    contrib = terms.sign[:, None] * child_sum_difference(ens)[terms.tree, terms.node]  # [n_terms, K]
    per_key = jax.ops.segment_sum(contrib, terms.key, terms.pair.shape[0])  # [n_keys, K]: delta_t(f, g)
    return _reduce_outputs(per_key, output_reduction)


_key_scores_kernel = jax.jit(_key_scores, static_argnames=("output_reduction",))


def _reduce_outputs(per_key: Array, output_reduction: str) -> Array:
    """``[n_keys, K] -> [n_keys]``: ``|sum_k|`` ("sum") or ``sum_k |.|`` ("abs")."""
    if output_reduction == "sum":
        return jnp.abs(jnp.sum(per_key, axis=-1))
    return jnp.sum(jnp.abs(per_key), axis=-1)


def _device_key_scores(ens: TreeEnsemble, *, output_reduction: str) -> tuple[Array, Array]:
    """The (tree, feature pair) scores of :func:`_key_scores` from the trees' structure on the
    device, for a structure that is traced (``jax.jit`` or ``jax.vmap`` over whole ensembles).

    Every (internal node, ancestor) is a term, keyed on its pair ``lo * E + hi`` of features
    (``E * E`` for a padded entry or two equal features); each tree's terms are sorted by key
    and summed per run of equal keys.

    Returns:
        ``(score f32[T * n_terms], pair i32[T * n_terms])``, ``n_terms = M (D - 1)`` terms per
        tree: each run's score (0 past the runs) and its pair (``E * E`` where nothing is scored).
    """
    node_parent, node_side, _, _ = parents(ens)  # [T, M]
    features, e = ens.node_features, ens.n_evaluated
    difference = child_sum_difference(ens)  # [T, M, K]
    ancestor, side, keys, terms = node_parent, node_side, [], []
    for _ in range(max(ens.depth - 1, 0)):  # internal nodes have at most D - 1 ancestors
        real = ancestor >= 0
        up = jnp.maximum(ancestor, 0)
        above = jnp.take_along_axis(features, up, axis=1)
        scored = real & (above != features)
        keys.append(jnp.where(scored, jnp.minimum(above, features) * e + jnp.maximum(above, features), e * e))
        terms.append(jnp.where(scored[..., None], (2.0 * side - 1.0)[..., None] * difference, 0.0))
        side = jnp.where(real, jnp.take_along_axis(node_side, up, axis=1), 0)
        ancestor = jnp.where(real, jnp.take_along_axis(node_parent, up, axis=1), -1)
    t, k = ens.n_trees, ens.n_outputs
    if not keys:  # stumps: no pairs
        return jnp.zeros(t, difference.dtype), jnp.full(t, e * e, jnp.int32)
    key, term = jnp.concatenate(keys, axis=1), jnp.concatenate(terms, axis=1)  # [T, n_terms], [T, n_terms, K]
    order = jnp.argsort(key, axis=1)
    key = jnp.take_along_axis(key, order, axis=1)
    term = jnp.take_along_axis(term, order[..., None], axis=1)
    first = jnp.concatenate([jnp.ones((t, 1), bool), key[:, 1:] != key[:, :-1]], axis=1)
    run = jnp.cumsum(first.reshape(-1)) - 1  # [T * n_terms] each term's run of equal keys in its tree
    size = key.size
    per_key = jax.ops.segment_sum(term.reshape(-1, k), run, size)  # [T * n, K]
    pair = jnp.full(size, e * e, jnp.int32).at[run].set(key.reshape(-1).astype(jnp.int32))
    return _reduce_outputs(per_key, output_reduction), pair


def _pair_matrix(ens: TreeEnsemble, score: Array, pair: Array) -> Array:
    """``f32[F, F]`` the Interaction matrix from key scores and their pairs ``f * E + g``
    (``E * E``: nothing), normalised so that the upper triangle sums to 100."""
    e = ens.n_evaluated
    pairs = jax.ops.segment_sum(jnp.where(pair < e * e, score, 0.0), jnp.minimum(pair, e * e - 1), e * e)
    pairs = pairs.reshape(e, e)  # upper triangle
    matrix = to_columns(ens, to_columns(ens, pairs + pairs.T, axis=0), axis=1)
    return 100.0 * safe_div(matrix, jnp.sum(pairs))


@functools.partial(jax.jit, static_argnames=("output_reduction",))
def _interaction_kernel(ens: TreeEnsemble, terms: PairTerms, *, output_reduction: str) -> Array:
    return _pair_matrix(ens, _key_scores(ens, terms, output_reduction=output_reduction), terms.pair)


def tree_interaction(ens: TreeEnsemble, *, output_reduction: str) -> Array:
    """CatBoost's ``Interaction`` of a numeric non-symmetric ensemble (see the module docstring;
    categorical models go through :func:`internal_pair_scores`).

    Args:
        ens: the model (numeric features only).
        output_reduction: ``"sum"`` (CatBoost: the K outputs added before the absolute value) or
            ``"abs"`` (their absolute values added); checked by ``jaximp.interaction``.

    Returns:
        ``f32[F, F]`` symmetric, non-negative, zero diagonal, the upper triangle summing to 100
        (all zeros when no tree has two nested splits on different features). Differentiable in
        ``ens.leaf_values``. A concrete structure's terms are listed once on the host; a traced
        one (``jax.jit`` or ``jax.vmap`` over whole ensembles) is read on the device
        (:func:`_device_key_scores`), with the same result up to the order of float sums.
    """
    if is_traced((ens.roots, ens.node_features, ens.node_children)):
        score, pair = _device_key_scores(ens, output_reduction=output_reduction)
        return _pair_matrix(ens, score, pair)
    with jax.ensure_compile_time_eval():  # a concrete model read inside a caller's jax.jit
        terms = jax.tree_util.tree_map(jnp.asarray, pair_terms(ens))
    return _interaction_kernel(ens, terms, output_reduction=output_reduction)


def internal_pair_scores(ens: TreeEnsemble, internal_of: tuple[int, ...], n_internal: int, *,
                         output_reduction: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """CatBoost's per-tree pair scores of a categorical model, keyed on its internal features.

    CatBoost's walk keys a node on its internal feature (a float feature, a categorical feature's
    one-hot values all together, a CTR: ``Featurizer.interaction_features``), so two nested
    splits on one-hot values of one column are no pair, and a tree's pair of internal features
    enters as one absolute value.

    Args:
        ens: the model (with a featurizer).
        internal_of: ``[E]`` the internal feature of each evaluated feature.
        n_internal: the number of internal features.
        output_reduction: ``"sum"`` or ``"abs"`` (see :func:`tree_interaction`).

    Returns:
        ``(first i64[n_keys], second i64[n_keys], score f64[n_keys], order i64[n_splits])``: each
        (tree, internal pair) key's features (``first < second``) and score, and the internal
        feature of every real node in the model's order (trees, then nodes), whose first appearances order the pairs
        (CatBoost's ``GetFeatureToIdxMap``).
    """
    internal = np.asarray(internal_of, np.int64)[np.asarray(ens.node_features)]  # [T, M]
    terms = pair_terms(ens, internal, n_internal)
    score = _key_scores_kernel(ens, jax.tree_util.tree_map(jnp.asarray, terms), output_reduction=output_reduction)
    pair = terms.pair.astype(np.int64)
    order = internal[np.isfinite(np.asarray(ens.node_borders))]  # padded nodes have border +inf
    return pair // n_internal, pair % n_internal, np.asarray(score, np.float64), order
