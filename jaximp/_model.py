"""The oblivious ensemble as a pytree of dense arrays.

Shape legend used across jaximp: N rows, F features, T trees, D depth (max over trees),
L = 2**D leaves, K outputs, R repeats, B background rows.

An oblivious (symmetric) tree of depth D applies the same split at every node of a level, so
a row's leaf index is ``sum_d 2**d * [x[split_features[d]] > split_borders[d]]``: bit ``d`` of
the leaf index is the outcome of the split at depth ``d`` (CatBoost's layout: the leaf numbers
that ``calc_leaf_indexes`` returns).
Trees shallower than D are padded: the padded depths have ``split_mask == False``, a border of
``+inf`` (never true), and leaves whose padded bits are set have weight 0, so every result is
that of the unpadded tree.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._categorical import Featurizer

NanMode = Literal["Min", "Max", "AsIs"]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ObliviousEnsemble:
    """A trained oblivious ensemble (CatBoost's symmetric trees) as a frozen JAX pytree.

    Arrays are pytree leaves, sizes and names static fields, so the ensemble is an argument of
    ``jax.jit``, ``jax.vmap`` and ``jax.grad`` like any other, and ``dataclasses.replace``
    gives a modified copy. Build one with :func:`jaximp.from_catboost`.

    Attributes:
        split_features: ``i32[T, D]`` evaluated feature read by the split at each depth (0 where
            padded): an input column for numeric models, see ``featurizer`` for the others.
        split_borders: ``f32[T, D]`` the split is ``x > border`` (``+inf`` where padded).
        split_bins: ``i32[T, D]`` index of the border in ``borders[feature]``: the split is
            ``bin(x) > split_bins`` with ``bin(x) = #{b in borders[feature] : b < x}``.
        split_mask: ``bool[T, D]`` False on padded depths of shallower trees.
        borders: ``f32[E, Bmax]`` each evaluated feature's sorted borders, padded with ``+inf``.
        leaf_values: ``f32[T, L, K]`` leaf values as CatBoost stores them: the raw prediction
            is ``scale * sum_t leaf_values[t, leaf_t] + bias``.
        leaf_weights: ``f32[T, L]`` training weight of each leaf (0 for padded leaves).
        scale: ``f32[]`` CatBoost's scale.
        bias: ``f32[K]`` CatBoost's bias.
        n_features: F, the model's input columns, static.
        feature_names: the F column names (CatBoost's feature ids, or "0", "1", ...).
        nan_modes: per evaluated feature "Min" (NaN below every border), "Max" (above every
            border) or "AsIs" (every comparison with NaN is false, which routes like "Min").
        loss_function: the training loss as CatBoost names it ("RMSE", "Logloss", ...).
        class_names: class labels of a classifier, else ``()``.
        featurizer: None for numeric models, whose evaluated features are the F input columns
            (E = F). With categorical features, the map (run on the host, in NumPy) from raw
            columns to the E evaluated features: float features, one-hot values and CTRs, as
            CatBoost computes them from the model's hashing and CTR tables.
        players: None (each input column is a player: P = F), or the P players of attribution:
            each a sorted tuple of the input columns it reads. CatBoost attributes to the
            distinct sets of columns that splits read, and divides a set's attribution equally
            among its columns (``value / flatFeatures.size()``).
        player_of: with ``players``: the player of each evaluated feature, ``E`` entries.
        reads: with ``players``: the input columns each evaluated feature reads, ``E`` entries,
            a column once per element of a CTR's combination. Wider than its player for a CTR
            over categorical and binarized float features: CatBoost credits SHAP to the
            categorical columns only, but PredictionValuesChange to every element's column.
        leaf_weights_known: False when the model file carries no leaf weights (``leaf_weights``
            is then 0, and what needs training weights must count them on data, as CatBoost does).
        n_searched: None when every evaluated feature holds raw values; else the first
            ``n_searched`` do and the others hold their bin already (``#{borders < value}``).
            The featurizer of a categorical model computes every bin (0 searched), so no border
            search is spent on the many CTRs such a model has.

    Example:
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

    @property
    def n_trees(self) -> int:
        """T, the number of trees."""
        return self.split_features.shape[0]

    @property
    def depth(self) -> int:
        """D, the depth of the deepest tree."""
        return self.split_features.shape[1]

    @property
    def n_leaves(self) -> int:
        """L = 2**D."""
        return self.leaf_values.shape[1]

    @property
    def n_evaluated(self) -> int:
        """E, the features the splits read: the F input columns of a numeric model; with
        categorical features, its float features, one-hot values and CTRs."""
        return self.borders.shape[0]

    @property
    def n_players(self) -> int:
        """P, the players of attribution (P = F unless splits read several columns at once)."""
        return self.n_features if self.players is None else len(self.players)

    @property
    def split_players(self) -> Array:
        """``i32[T, D]`` the player of each split (its evaluated feature's set of columns)."""
        if self.player_of is None:
            return self.split_features
        return jnp.asarray(self.player_of, jnp.int32)[self.split_features]

    @property
    def n_outputs(self) -> int:
        """K: 1 for regression and binary, classes for multiclass, targets for multi-regression."""
        return self.leaf_values.shape[2]

    def __repr__(self) -> str:
        """One line: ``ObliviousEnsemble(trees=T, depth=D, features=F, outputs=K, loss='RMSE')``."""
        return ensemble_repr(self, depth=size(self.split_features, 1))

    def predict(self, X, *, batch_size: int | None = None, devices=None) -> Any:
        """Raw predictions, CatBoost's ``prediction_type="RawFormulaVal"``.

        Args:
            X: ``[N, F]`` rows: NumPy/JAX array, pandas/polars DataFrame or numeric catboost.Pool.
            batch_size: rows per device step (None picks one).
            devices: None, an int or a list of ``jax.Device`` to shard rows over.

        Returns:
            ``f32[N]`` when K == 1, else ``f32[N, K]``: NumPy for rows in host memory, a
            ``jax.Array`` on the rows' device for rows given as one.

        Differentiable in: ``leaf_values``, ``scale``, ``bias`` (under ``jax.grad``, ``jit`` and
        ``vmap``); piecewise constant in ``X`` and the borders (zero gradient; see
        ``jaximp.soft_predict`` for a smooth relaxation).

        Example:
            >>> raw = ens.predict(X)
            >>> raw.shape
            (442,)
            >>> np.allclose(raw, model.predict(X), rtol=1e-5, atol=1e-3)  # float32 sums
            True
        """
        from jaximp._leaves import predict

        return predict(self, X, batch_size=batch_size, devices=devices)


def size(array: Any, axis: int) -> int | str:
    """``array.shape[axis]``, or "?" for a pytree leaf that is no array (such as the ints of a
    ``jax.vmap`` ``in_axes`` tree shaped like an ensemble)."""
    shape = getattr(array, "shape", None)
    return shape[axis] if shape is not None and len(shape) > axis else "?"


def ensemble_repr(ens: Any, *, depth: int | str) -> str:
    """``Kind(trees=T, depth=D, features=F, outputs=K, loss='...')`` for either ensemble (the
    loss left out when unknown); the arrays are summarised by their sizes, never printed."""
    loss = f", loss={ens.loss_function!r}" if ens.loss_function else ""
    return (f"{type(ens).__name__}(trees={size(ens.leaf_values, 0)}, depth={depth}, "
            f"features={ens.n_features}, outputs={size(ens.leaf_values, 2)}{loss})")


def check_ensemble(ens: Any, fn_name: str) -> None:
    """A ``TypeError`` unless ``ens`` is an :class:`ObliviousEnsemble` (functions that also take
    a ``TreeEnsemble`` dispatch to it before calling this)."""
    if type(ens).__name__ == "TreeEnsemble" and type(ens).__module__.startswith("jaximp"):
        raise TypeError(
            f"{fn_name}: ens must be a jaximp.ObliviousEnsemble; non-symmetric trees "
            "(jaximp.TreeEnsemble) are not supported by this function yet (predict, leaf_indices, "
            "prediction_values_change, interaction, shap_values, expected_value, "
            "shap_interaction_values, loss_function_change and permutation_importance are)"
        )
    if not isinstance(ens, ObliviousEnsemble):
        raise TypeError(
            f"{fn_name}: ens must be a jaximp.ObliviousEnsemble (convert a CatBoost model with "
            f"jaximp.from_catboost(model)); got {type(ens).__name__}"
        )


def _shares(sets: tuple[tuple[int, ...], ...], n_columns: int) -> np.ndarray:
    """``f32[len(sets), F]``: ``1 / len(set)`` on each set's columns, once per time it lists them."""
    weights = np.zeros((len(sets), n_columns), np.float32)
    for i, columns in enumerate(sets):
        np.add.at(weights[i], list(columns), 1.0 / len(columns))
    return weights


def _representatives(ens: ObliviousEnsemble) -> list[int]:
    """The first evaluated feature of each player in CatBoost's order (float features that have
    borders, one-hot values, CTRs: the evaluated features' own order)."""
    float_borders = ens.featurizer.float_borders  # float features without borders: not in the model
    unused = [e < len(float_borders) and not len(float_borders[e]) for e in range(len(ens.player_of))]
    first: dict[int, int] = {}
    for e, p in sorted(enumerate(ens.player_of), key=lambda item: unused[item[0]]):
        first.setdefault(p, e)
    return [first[p] for p in range(len(ens.players))]


def to_columns(ens: ObliviousEnsemble, values: Array, axis: int, *, per: str = "player") -> Array:
    """Attributions along ``axis`` -> attributions over the F input columns, each value shared
    equally among its columns (CatBoost's ``value / flatFeatures.size()``); a no-op for numeric
    models. Takes a ``TreeEnsemble`` too (``per="player"`` or ``"evaluated"``), through
    ``jaximp._tree_model.to_features``.

    Args:
        ens: the model.
        values: P values (one per player, ``per="player"``) or E values (one per evaluated
            feature, ``per="evaluated"``, shared among all the columns it reads) along ``axis``.
        axis: the axis to map.
        per: ``"player"``, ``"evaluated"``, or ``"representative"``: P values each shared
            among the columns its player's first evaluated feature reads (CatBoost's
            LossFunctionChange, see ``jaximp._loss_change``).
    """
    if ens.players is None:
        return values
    if per == "representative":
        sets = tuple(ens.reads[e] for e in _representatives(ens))
    else:
        sets = ens.players if per == "player" else ens.reads
    moved = jnp.moveaxis(values, axis, -1)
    return jnp.moveaxis(moved @ jnp.asarray(_shares(sets, ens.n_features), moved.dtype), -1, axis)


def nan_fill_values(ens: ObliviousEnsemble) -> Array:
    """``f32[E]`` the value NaN takes before comparing with borders: -inf or +inf."""
    return jnp.asarray(
        [jnp.inf if mode == "Max" else -jnp.inf for mode in ens.nan_modes], jnp.float32
    )


def squeeze_outputs(values: Array, n_outputs: int) -> Array:
    """Drop the trailing K axis when K == 1 (the API's single-output layout)."""
    return values[..., 0] if n_outputs == 1 else values
