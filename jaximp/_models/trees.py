"""General binary-tree ensembles as a pytree of dense, padded arrays.

Shapes follow the legend of :mod:`jaximp._models`: here D is the longest root-to-leaf path over
all trees, L the most leaves of any tree (not ``2**D``) and M = max(1, L - 1) the most internal
nodes; ``n_words`` counts the 32-bit words of a category bitset.

Each tree is stored as its internal nodes ``0..M-1`` and its leaves ``0..L-1``. A child (or
root) pointer ``c`` names internal node ``c`` when ``c >= 0`` and leaf ``~c = -c - 1`` when
``c < 0``. A row at node ``n`` goes right when ``x[node_features[n]] > node_borders[n]`` in
float32 (CatBoost's rule; importers of libraries that split on ``x < t`` or ``x <= t`` convert
their thresholds), and a NaN value goes right where ``node_nan_right[n]``. Leaves are numbered
in depth-first, left-to-right order, which is CatBoost's ``calc_leaf_indexes`` numbering for
non-symmetric trees. Trees smaller than the largest are padded: padded nodes are never reached
(their children point to the out-of-range leaf ``L``), padded leaves have value and weight 0.

A model with categorical features (``featurizer`` set) reads the bins of its evaluated features
(``u8[N, E]``: float features, one-hot values, CTRs; ``jaximp._models.featurizer``) instead of raw
values, and each node's border is then the index ``j`` of its border among the feature's
borders: ``bin > j`` exactly when ``value > borders[j]``, and bins are never NaN.

Set-membership splits (XGBoost's ``split_type`` 1, LightGBM's categorical ``decision_type``,
scikit-learn's ``is_categorical``) read a feature holding category codes. Such a node ``n``
(``node_categorical[n]``) sends a value ``x`` right by bit ``c`` of its bitset
``node_categories[n]`` (word ``c // 32``, bit ``c % 32``): ``c = trunc(x)`` where
``node_borders[n] <= x < last`` with ``last = 32 n_words - 1``, else ``c = last``, so that the last
bit holds where every other value goes (below the library's smallest category, at or past ``last``, or a
category the node's library bitset does not cover); a NaN goes right where ``node_nan_right[n]``.
:func:`goes_right` is that rule, the one every kernel applies.

Field notes (the class docstring says what each field means to a user): padded nodes have
feature 0 and border ``+inf``; ``featurizer`` runs on the host, in NumPy; ``players`` are
CatBoost's combination classes (the players of attribution, P of them, each its sorted input
columns) with ``player_of`` the player of each of the E evaluated features; ``category_codes`` is
a ``jaximp._models.categories.CategoryCodes`` and ``value_thresholds`` a
``jaximp._models.thresholds.ValueThresholds`` (its ``library`` names the model's library);
``node_categorical`` None keeps the kernels of models without set-membership splits as they
were.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._models.checks import trusted
from jaximp._models.checks_trees import check_trees
from jaximp._models.ensemble import Ensemble, NanMode, register_model


@register_model
@dataclasses.dataclass(frozen=True, repr=False)  # Ensemble.__repr__: one line
class TreeEnsemble(Ensemble):
    """A trained ensemble of binary trees of any shape, as a frozen JAX pytree.

    The trees of scikit-learn, XGBoost and LightGBM, and CatBoost's non-symmetric trees
    (``grow_policy="Depthwise"``/``"Lossguide"``), import as one: build it with
    [`jaximp.from_sklearn`][jaximp.from_sklearn], [`jaximp.from_xgboost`][jaximp.from_xgboost],
    [`jaximp.from_lightgbm`][jaximp.from_lightgbm] or
    [`jaximp.from_catboost`][jaximp.from_catboost]. Arrays are pytree leaves, sizes and names
    static fields, so the ensemble is an argument of ``jax.jit``, ``jax.vmap`` and ``jax.grad``
    like any other, and ``dataclasses.replace`` gives a modified copy. Every tree is stored with
    the shape of the largest (M internal nodes, L leaves); the extra nodes are never reached and
    the extra leaves have value and weight 0. A child pointer ``c`` names internal node ``c`` when
    ``c >= 0`` and leaf ``-c - 1`` when ``c < 0``; leaves are numbered depth-first, left to right
    (CatBoost's ``calc_leaf_indexes`` numbering).

    Attributes:
        roots: ``i32[T]`` each tree's root: internal node 0, or ``-1`` (leaf 0) for a tree that
            is a single leaf.
        node_features: ``i32[T, M]`` the feature each internal node splits on (with categorical
            features, one of the values CatBoost computes from the columns: see ``featurizer``).
        node_borders: ``f32[T, M]`` a row goes right when ``x > border`` (in float32); with
            categorical features, ``x`` is the index of the value among the feature's borders.
            At a split on a set of categories, the smallest value that reads as a category.
        node_nan_right: ``bool[T, M]`` a missing value (NaN) goes right, else left.
        node_children: ``i32[T, M, 2]`` left and right child pointers.
        leaf_values: ``f32[T, L, K]`` the leaf values: the raw prediction is
            ``scale * sum_t leaf_values[t, leaf_t] + bias``.
        leaf_weights: ``f32[T, L]`` training weight (cover) of each leaf; an internal node's
            cover is the sum of its leaves'.
        scale: ``f32[]`` the model's scale (a forest's ``1 / T``, for instance).
        bias: ``f32[K]`` the model's bias (base score).
        depth: D, the longest root-to-leaf path.
        n_features: F, the model's input columns.
        feature_names: the F column names.
        nan_modes: per split feature, CatBoost's NaN treatment ``"Min"``, ``"Max"`` or
            ``"AsIs"`` (each node's own direction is ``node_nan_right``).
        loss_function: the training loss's name (``"RMSE"``, ``"Logloss"``, ...), ``""`` when
            unknown.
        class_names: class labels of a classifier, else ``()``.
        leaf_weights_known: False when the model file carries no leaf weights.
        featurizer: None for numeric models. With CatBoost's categorical features, how the raw
            columns become the values the splits read (float features, one-hot values, CTRs),
            as CatBoost computes them.
        players: None for numeric models; else the groups of input columns that CatBoost
            credits together (the columns a CTR combines), each a sorted tuple.
        player_of: with ``players``: the group of each split feature.
        reads: with ``players``: the input columns each split feature reads.
        n_searched: None when the rows hold raw values; 0 when the featurizer gives each split
            feature's border index directly.
        node_gains: ``f32[T, M]`` each split's gain as its library reports it (XGBoost's
            ``loss_chg``, LightGBM's ``split_gain``, scikit-learn's weighted impurity
            decrease); None (CatBoost): computed from leaf values and weights.
        node_weights: ``f32[T, M]`` each internal node's cover as its library stores it
            (XGBoost's hessian sum, LightGBM's data count, scikit-learn's weighted samples);
            None: the sum of its leaves' weights.
        leaf_ids: ``i32[T, L]`` each leaf's number in its library (scikit-learn's ``apply``,
            XGBoost's and LightGBM's ``pred_leaf``), which ``leaf_indices`` returns; None:
            leaves numbered depth-first (CatBoost's numbering).
        node_categorical: ``bool[T, M]`` the node splits on a set of categories (XGBoost's,
            LightGBM's and HistGradientBoosting's categorical splits); None for models without
            such splits.
        node_categories: ``u32[T, M, n_words]`` the categories each categorical node sends
            right, as a bitset of 32-bit words; None with ``node_categorical``.
        category_codes: how a DataFrame's categorical columns become the category codes the
            splits read, as the model's library codes them; None: rows hold numbers.
        impurity_scheme: how ``split_importance(ens, "impurity")`` (scikit-learn's
            ``feature_importances_``) pools trees: ``"forest"`` (RandomForest, ExtraTrees),
            ``"boosting"`` (DecisionTree, GradientBoosting), ``""`` (not a scikit-learn model).
        missing_value: a value of the rows that reads as missing besides NaN, compared in
            float32: XGBoost's ``missing`` (``DMatrix(X, missing=-999)``); None: NaN alone.
        value_thresholds: LightGBM's thresholds in float64, so that rows are compared as
            LightGBM compares them; None: rows are compared with ``node_borders`` in float32.

    Examples:
        >>> from sklearn.tree import DecisionTreeRegressor
        >>> tree = DecisionTreeRegressor(max_depth=3, random_state=0).fit(X, y)
        >>> jaximp.from_sklearn(tree)
        TreeEnsemble(trees=1, depth=3, features=10, outputs=1, loss='RMSE')
    """

    roots: Array
    node_features: Array
    node_borders: Array
    node_nan_right: Array
    node_children: Array
    leaf_values: Array
    leaf_weights: Array
    scale: Array
    bias: Array
    depth: int = dataclasses.field(metadata=dict(static=True))
    n_features: int = dataclasses.field(metadata=dict(static=True))
    feature_names: tuple[str, ...] = dataclasses.field(metadata=dict(static=True))
    nan_modes: tuple[NanMode, ...] = dataclasses.field(metadata=dict(static=True))
    loss_function: str = dataclasses.field(default="RMSE", metadata=dict(static=True))
    class_names: tuple = dataclasses.field(default=(), metadata=dict(static=True))
    leaf_weights_known: bool = dataclasses.field(default=True, metadata=dict(static=True))
    featurizer: Any = dataclasses.field(default=None, metadata=dict(static=True))
    players: tuple[tuple[int, ...], ...] | None = dataclasses.field(default=None, metadata=dict(static=True))
    player_of: tuple[int, ...] | None = dataclasses.field(default=None, metadata=dict(static=True))
    reads: tuple[tuple[int, ...], ...] | None = dataclasses.field(default=None, metadata=dict(static=True))
    n_searched: int | None = dataclasses.field(default=None, metadata=dict(static=True))
    node_gains: Array | None = None
    node_weights: Array | None = None
    leaf_ids: Array | None = None
    impurity_scheme: str = dataclasses.field(default="", metadata=dict(static=True))
    node_categorical: Array | None = None
    node_categories: Array | None = None
    category_codes: Any = dataclasses.field(default=None, metadata=dict(static=True))
    missing_value: float | None = dataclasses.field(default=None, metadata=dict(static=True))
    value_thresholds: Any = dataclasses.field(default=None, metadata=dict(static=True))

    layout = "trees"

    @property
    def n_nodes(self) -> int:
        """M, the most internal nodes of any tree (every tree is stored with M)."""
        return self.node_features.shape[1]

    @property
    def n_evaluated(self) -> int:
        """E, the features the splits read: the F input columns of a numeric model; with
        categorical features, its float features, one-hot values and CTRs."""
        return len(self.nan_modes)

    @property
    def node_players(self) -> Array:
        """``i32[T, M]`` the group of columns (``players``) each internal node is credited to: its
        feature for numeric models. Two splits on the same columns (a one-hot value and a CTR of
        one column, say) count as one, as in CatBoost."""
        if self.player_of is None:
            return self.node_features
        return jnp.asarray(self.player_of, jnp.int32)[self.node_features]

    def __post_init__(self) -> None:
        """Refuse inconsistent fields (``jaximp._models.checks_trees``): dtypes, shapes (each field's
        trailing axes; leading axes are batch axes), static fields (``depth`` at most M), and on
        concrete arrays: node features in ``[0, E)``, child pointers in range (internal nodes
        ``[0, M)``, leaves ``[0, L]`` with L the padding), and from each root a tree (no node or
        leaf reached twice, no cycle, no path longer than ``depth``, the padding leaf never
        reached) whose unreached leaves have weight 0; finite leaf values, weights,
        scale and bias, no NaN border, gain or node weight.

        Raises:
            TypeError: a field of the wrong dtype or type.
            ValueError: shapes that disagree, an index out of range, trees that are not trees, a
                non-finite value.
        """
        check_trees(self)


def goes_right(value: Array, border: Array, nan_right: Array, categorical: Array | None = None,
               words: Array | None = None, node: Array | None = None) -> Array:
    """Whether values go right at their nodes: the decision rule of every :class:`TreeEnsemble`
    kernel (see the module docstring).

    Args:
        value: ``f32[...]`` each value the node reads.
        border: ``f32`` the node's border, broadcast to ``value``.
        nan_right: ``bool`` the node's NaN direction (True: right), broadcast to ``value``.
        categorical: None (no set-membership splits: the threshold rule alone), or ``bool``
            broadcast to ``value``: the node splits on categories.
        words: ``u32[T M, n_words]`` the category bitsets of every node (``node_categories``
            flattened), with ``categorical``.
        node: ``i32`` broadcast to ``value``: the row of each value's node in ``words``.

    Returns:
        ``bool`` shaped as ``value``: True where the value goes right.
    """
    right = value > border
    if categorical is None:
        return right | (jnp.isnan(value) & nan_right)
    other = 32 * words.shape[-1] - 1  # the bit of every value that is no listed category
    code = jnp.where((value >= border) & (value < other), value, other).astype(jnp.int32)  # NaN: other
    member = ((words[node, code >> 5] >> (code & 31).astype(jnp.uint32)) & 1) == 1
    return jnp.where(jnp.isnan(value), nan_right, jnp.where(categorical, member, right))


def parents(ens: TreeEnsemble) -> tuple[Array, Array, Array, Array]:
    """Each node's and each leaf's parent and side.

    Returns:
        ``(node_parent i32[T, M], node_side i32[T, M], leaf_parent i32[T, L], leaf_side i32[T, L])``:
        the internal node above (-1 for roots and padding) and 1 when reached by its right edge.
    """
    t, m, l = ens.n_trees, ens.n_nodes, ens.n_leaves
    children = ens.node_children.reshape(t, 2 * m)
    node = jnp.broadcast_to(jnp.repeat(jnp.arange(m, dtype=jnp.int32), 2), (t, 2 * m))
    side = jnp.broadcast_to(jnp.tile(jnp.arange(2, dtype=jnp.int32), m), (t, 2 * m))
    rows = jnp.arange(t, dtype=jnp.int32)[:, None]
    to_node = jnp.where(children >= 0, children, m)  # out of range: dropped
    to_leaf = jnp.where(children < 0, ~children, l)
    node_parent = jnp.full((t, m), -1, jnp.int32).at[rows, to_node].set(node, mode="drop")
    node_side = jnp.zeros((t, m), jnp.int32).at[rows, to_node].set(side, mode="drop")
    leaf_parent = jnp.full((t, l), -1, jnp.int32).at[rows, to_leaf].set(node, mode="drop")
    leaf_side = jnp.zeros((t, l), jnp.int32).at[rows, to_leaf].set(side, mode="drop")
    return node_parent, node_side, leaf_parent, leaf_side


def leaf_paths(ens: TreeEnsemble) -> tuple[Array, Array, Array]:
    """Each leaf's root-to-leaf path, listed from the leaf up.

    Returns:
        ``(nodes i32[T, L, D], right bool[T, L, D], mask bool[T, L, D])``: entry ``j`` is the
        ``j``-th ancestor of the leaf (0: its parent), whether the path goes right there, and
        whether the entry is real (False past the root and for padded leaves).
    """
    t, l, depth = ens.n_trees, ens.n_leaves, ens.depth
    node_parent, node_side, leaf_parent, leaf_side = parents(ens)
    nodes, right = [leaf_parent], [leaf_side]
    for _ in range(depth - 1):
        up = jnp.maximum(nodes[-1], 0)
        parent = jnp.where(nodes[-1] >= 0, jnp.take_along_axis(node_parent, up, axis=1), -1)
        nodes.append(parent)
        right.append(jnp.take_along_axis(node_side, up, axis=1))
    nodes = jnp.stack(nodes, axis=-1) if depth else jnp.zeros((t, l, 0), jnp.int32)
    right = jnp.stack(right, axis=-1) if depth else jnp.zeros((t, l, 0), jnp.int32)
    mask = nodes >= 0
    return jnp.maximum(nodes, 0), (right == 1) & mask, mask


def node_covers(ens: TreeEnsemble, leaf_weights: Array | None = None) -> Array:
    """``f32[T, M]`` cover of each internal node: the sum of its leaves' weights."""
    weights = ens.leaf_weights if leaf_weights is None else leaf_weights
    nodes, _, mask = leaf_paths(ens)
    t, l, d = nodes.shape
    flat = (nodes + ens.n_nodes * jnp.arange(t, dtype=jnp.int32)[:, None, None]).reshape(-1)
    contrib = jnp.where(mask, weights[:, :, None], 0.0).reshape(-1)
    return jax.ops.segment_sum(contrib, flat, t * ens.n_nodes).reshape(t, ens.n_nodes)


def subtree_sums(ens: TreeEnsemble, leaf_weights: Array) -> tuple[Array, Array]:
    """``(cover f32[T, M], weighted value sum f32[T, M, K])`` of each internal node's subtree."""
    nodes, _, mask = leaf_paths(ens)
    t, m, k = ens.n_trees, ens.n_nodes, ens.n_outputs
    flat = (nodes + m * jnp.arange(t, dtype=jnp.int32)[:, None, None]).reshape(-1)
    weight = jnp.where(mask, leaf_weights[:, :, None], 0.0)  # [T, L, D]
    cover = jax.ops.segment_sum(weight.reshape(-1), flat, t * m).reshape(t, m)
    value = weight[..., None] * ens.leaf_values[:, :, None, :]  # [T, L, D, K]
    total = jax.ops.segment_sum(value.reshape(-1, k), flat, t * m).reshape(t, m, k)
    return cover, total


def from_oblivious(ens: Any) -> TreeEnsemble:
    """An ``ObliviousEnsemble`` as the equivalent :class:`TreeEnsemble` (same predictions, leaf
    weights, features and players), for what only general trees compute: SHAP of oblivious trees
    deeper than their per-leaf tables allow (CatBoost trains depth up to 16). Each tree becomes
    ``2**D - 1`` internal nodes and ``2**D`` leaves, so the cost grows as ``2**D``, as CatBoost's.

    A padded depth of a shallower tree becomes a split that no row takes to the right (border
    ``+inf``, zero weight on the right): a null player of every game, so every SHAP value is
    unchanged.
    """
    t, d = (int(n) for n in ens.split_features.shape)
    if ens.n_searched not in (None, 0):
        raise ValueError("from_oblivious: the model's rows must hold every evaluated feature raw or binned")
    featurized = ens.featurizer is not None
    mask = ens.split_mask  # device arrays throughout: the conversion runs under jax.jit and vmap too
    borders = jnp.where(mask, ens.split_bins.astype(jnp.float32) if featurized else ens.split_borders, jnp.inf)
    features = ens.split_features.astype(jnp.int32)
    nan_right = jnp.asarray([mode == "Max" for mode in ens.nan_modes])[features] & mask & (not featurized)
    # internal node i of level k (root: k = 0) is node 2**k - 1 + i and splits as the oblivious
    # tree's depth D - 1 - k (CatBoost's root is its last depth); a leaf's depth-first number,
    # its decisions from the root down as bits from the most significant, is then CatBoost's
    # oblivious leaf index (bit d: the decision at depth d)
    level = np.repeat(np.arange(d), 2 ** np.arange(d))  # [M]
    first = 2**level - 1
    index = np.arange(2**d - 1) - first
    left = np.where(level < d - 1, 2 * first + 1 + 2 * index, ~(2 * index))
    right = np.where(level < d - 1, left + 1, ~(2 * index + 1))
    depth = d - 1 - level
    with trusted():  # full trees of a checked model: no value to read back from the device
        return TreeEnsemble(
            roots=jnp.full(t, 0 if d else -1, jnp.int32),  # depth 0: single leaves
            node_features=features[:, depth],
            node_borders=borders[:, depth],
            node_nan_right=nan_right[:, depth],
            node_children=jnp.asarray(np.broadcast_to(np.stack([left, right], -1), (t, 2**d - 1, 2)).astype(np.int32)),
            leaf_values=ens.leaf_values,
            leaf_weights=ens.leaf_weights,
            scale=ens.scale, bias=ens.bias, depth=d, n_features=ens.n_features,
            feature_names=ens.feature_names, nan_modes=ens.nan_modes, loss_function=ens.loss_function,
            class_names=ens.class_names, leaf_weights_known=ens.leaf_weights_known, featurizer=ens.featurizer,
            players=ens.players, player_of=ens.player_of, reads=ens.reads,
            n_searched=0 if featurized else None)
