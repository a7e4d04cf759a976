"""The oblivious layout: symmetric trees as a pytree of dense arrays.

An oblivious (symmetric) tree of depth D applies the same split at every node of a level, so
a row's leaf index is ``sum_d 2**d * [x[split_features[d]] > split_borders[d]]``: bit ``d`` of
the leaf index is the outcome of the split at depth ``d`` (CatBoost's layout: the leaf numbers
that ``calc_leaf_indexes`` returns).
Trees shallower than D are padded: the padded depths have ``split_mask == False``, a border of
``+inf`` (never true), and leaves whose padded bits are set have weight 0, so every result is
that of the unpadded tree. ``players`` are CatBoost's combination classes (the players of
attribution); a categorical model's featurizer runs on the host, in NumPy, and computes every
bin (``n_searched`` 0), so no border search is spent on the many CTRs such a model has.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from jax import Array

from jaximp._models.checks_oblivious import check_oblivious
from jaximp._models.ensemble import Ensemble, NanMode, register_model, size
from jaximp._models.featurizer import Featurizer


@register_model
@dataclasses.dataclass(frozen=True, repr=False)  # Ensemble.__repr__: one line
class ObliviousEnsemble(Ensemble):
    """A trained CatBoost model of symmetric (oblivious) trees, as a frozen JAX pytree.

    A symmetric tree applies the same split at every node of a level, so a row's leaf index is
    ``sum_d 2**d * [x[split_features[d]] > split_borders[d]]`` (CatBoost's leaf numbering).
    Arrays are pytree leaves, sizes and names static fields, so the ensemble is an argument of
    ``jax.jit``, ``jax.vmap`` and ``jax.grad`` like any other, and ``dataclasses.replace``
    gives a modified copy. Build one with [`jaximp.from_catboost`][jaximp.from_catboost]. Trees
    shallower than the deepest (``catboost.sum_models``) are stored at its depth, with splits
    that are never taken and leaves of weight 0. E counts the features the splits read: the F
    input columns of a numeric model; with categorical features, its float features, one-hot
    values and CTRs.

    Attributes:
        split_features: ``i32[T, D]`` the feature each depth's split reads: an input column for
            numeric models (see ``featurizer`` for the others).
        split_borders: ``f32[T, D]`` the split is ``x > border`` (``+inf`` for a split never
            taken).
        split_bins: ``i32[T, D]`` the index of the border in ``borders[feature]``: the split is
            ``bin(x) > split_bins`` with ``bin(x) = #{b in borders[feature] : b < x}``.
        split_mask: ``bool[T, D]`` False on the depths a shallower tree does not have.
        borders: ``f32[E, n_borders]`` each of the E split features' sorted borders
            (CatBoost's quantization borders), ``+inf`` past the last.
        leaf_values: ``f32[T, L, K]`` leaf values as CatBoost stores them: the raw prediction
            is ``scale * sum_t leaf_values[t, leaf_t] + bias``.
        leaf_weights: ``f32[T, L]`` training weight of each leaf.
        scale: ``f32[]`` CatBoost's scale.
        bias: ``f32[K]`` CatBoost's bias.
        n_features: F, the model's input columns.
        feature_names: the F column names (CatBoost's feature ids, or "0", "1", ...).
        nan_modes: per split feature, CatBoost's ``nan_mode``: "Min" (NaN below every border),
            "Max" (above every border) or "AsIs" (every comparison with NaN is false, which
            routes like "Min").
        loss_function: the training loss as CatBoost names it ("RMSE", "Logloss", ...).
        class_names: class labels of a classifier, else ``()``.
        featurizer: None for numeric models. With categorical features, how the raw columns
            become the values the splits read (float features, one-hot values and CTRs), as
            CatBoost computes them from the model's hashing and CTR tables.
        players: None for numeric models; else the groups of input columns CatBoost credits
            together, each a sorted tuple: CatBoost credits a split on a CTR over several
            columns to those columns equally (``value / flatFeatures.size()``).
        player_of: with ``players``: the group of each split feature.
        reads: with ``players``: the input columns each split feature reads, a column once per
            element of a CTR's combination. It can be wider than the feature's group: CatBoost
            credits SHAP values of a CTR over categorical and float columns to the categorical
            columns only, but PredictionValuesChange to every element's column.
        leaf_weights_known: False when the model file carries no leaf weights (``leaf_weights``
            is then 0, and what needs training weights counts them on the rows given, as
            CatBoost does).
        n_searched: None when every split feature reads raw values; else the first
            ``n_searched`` do and the featurizer gives the others' border index directly.

    Examples:
        >>> ens
        ObliviousEnsemble(trees=20, depth=4, features=10, outputs=1, loss='RMSE')
        >>> ens.n_trees, ens.depth, ens.n_features, ens.n_outputs
        (20, 4, 10, 1)
        >>> ens.leaf_values.shape                                    # f32[T, L, K]
        (20, 16, 1)
    """

    split_features: Array
    split_borders: Array
    split_bins: Array
    split_mask: Array
    borders: Array
    leaf_values: Array
    leaf_weights: Array
    scale: Array
    bias: Array
    n_features: int = dataclasses.field(metadata=dict(static=True))
    feature_names: tuple[str, ...] = dataclasses.field(metadata=dict(static=True))
    nan_modes: tuple[NanMode, ...] = dataclasses.field(metadata=dict(static=True))
    loss_function: str = dataclasses.field(default="RMSE", metadata=dict(static=True))
    class_names: tuple = dataclasses.field(default=(), metadata=dict(static=True))
    featurizer: Featurizer | None = dataclasses.field(default=None, metadata=dict(static=True))
    players: tuple[tuple[int, ...], ...] | None = dataclasses.field(default=None, metadata=dict(static=True))
    player_of: tuple[int, ...] | None = dataclasses.field(default=None, metadata=dict(static=True))
    reads: tuple[tuple[int, ...], ...] | None = dataclasses.field(default=None, metadata=dict(static=True))
    leaf_weights_known: bool = dataclasses.field(default=True, metadata=dict(static=True))
    n_searched: int | None = dataclasses.field(default=None, metadata=dict(static=True))

    layout = "oblivious"

    @property
    def depth(self) -> int:
        """D, the depth of the deepest tree."""
        return self.split_features.shape[1]

    @property
    def n_evaluated(self) -> int:
        """E, the features the splits read: the F input columns of a numeric model; with
        categorical features, its float features, one-hot values and CTRs."""
        return self.borders.shape[0]

    @property
    def split_players(self) -> Array:
        """``i32[T, D]`` the group of columns (``players``) each split is credited to: its feature
        for numeric models."""
        if self.player_of is None:
            return self.split_features
        return jnp.asarray(self.player_of, jnp.int32)[self.split_features]

    def _depth_repr(self) -> int | str:
        return size(self.split_features, 1)

    def __post_init__(self) -> None:
        """Refuse inconsistent fields (``jaximp._models.checks_oblivious``): dtypes, shapes (L = ``2**D``,
        each field's trailing axes; leading axes are batch axes), static fields, and on concrete
        arrays: split features in ``[0, E)``, split bins within their feature's borders (``n_borders``
        on padded depths, which come last), sorted borders, zero weight on the leaves of padded
        depths, finite leaf values, weights, scale and bias.

        ``split_borders`` is what the soft model and :func:`~jaximp._models.trees.from_oblivious`
        read, ``split_bins`` and ``borders`` what every other kernel reads: they are not
        compared (a border moved for the soft model is a valid model).

        Raises:
            TypeError: a field of the wrong dtype or type.
            ValueError: shapes that disagree, an index out of range, a non-finite value.
        """
        check_oblivious(self)


def nan_fill_values(ens: ObliviousEnsemble) -> Array:
    """``f32[E]`` the value NaN takes before comparing with borders: -inf or +inf."""
    return jnp.asarray(
        [jnp.inf if mode == "Max" else -jnp.inf for mode in ens.nan_modes], jnp.float32
    )
