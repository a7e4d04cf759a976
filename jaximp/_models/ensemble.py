"""What both layouts of a tree ensemble share: attribution to columns, the one-line summary,
the check that an argument is an ensemble, and the hook through which ``ens.predict`` reaches the
leaves stage. What is computed once per model object lives in :mod:`jaximp._models.cache`.

The model is one idea with two layouts (see :mod:`jaximp._models`): :class:`ObliviousEnsemble`
(symmetric trees: per tree, D split features and borders and a ``2**D`` leaf table) and
:class:`TreeEnsemble` (general binary trees as padded node arrays). Both derive from
:class:`Ensemble`, whose ``layout`` names the layout; a stage that needs a different kernel for
each reads ``ens.layout`` once, in one place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

NanMode = Literal["Min", "Max", "AsIs"]
Layout = Literal["oblivious", "trees"]

_PREDICT: list[Callable] = []  # the leaves stage's predict, registered when it is imported


def register_model(cls: type) -> type:
    """Register a frozen model dataclass as a pytree whose arrays are its leaves and whose fields
    marked ``static`` are its static data, rebuilt without calling ``__init__`` (as equinox's
    ``Module`` is): a model is checked when it is built or imported, not each time JAX rebuilds it
    from its leaves (tracing, ``vmap``, ``tree_map``), which would read its arrays back from the
    device or check tracers. ``dataclasses.replace`` builds a new model, checked again."""
    fields = dataclasses.fields(cls)
    data = tuple(f.name for f in fields if not f.metadata.get("static"))
    meta = tuple(f.name for f in fields if f.metadata.get("static"))
    keys = tuple(jax.tree_util.GetAttrKey(name) for name in data)

    def flatten(model: Any) -> tuple[list, tuple]:
        return [getattr(model, name) for name in data], tuple(getattr(model, name) for name in meta)

    def flatten_with_keys(model: Any) -> tuple[list, tuple]:
        children, static = flatten(model)
        return list(zip(keys, children)), static

    def unflatten(static: tuple, children: Any) -> Any:
        model = object.__new__(cls)
        for name, value in (*zip(data, children), *zip(meta, static)):
            object.__setattr__(model, name, value)
        return model

    jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)
    return cls


def register_predict(predict: Callable) -> Callable:
    """Make ``predict(ens, X, *, batch_size, devices)`` the function behind ``ens.predict``.

    The model does not import the stages that evaluate it (they import the model); the leaves
    stage registers its ``predict`` here when it is imported, and importing ``jaximp`` imports
    every stage. Returns ``predict`` unchanged (usable as a decorator).
    """
    _PREDICT[:] = [predict]
    return predict


class Ensemble:
    """The part of the ensemble model that does not depend on its layout (a mixin of both
    frozen dataclasses; it holds no fields of its own).

    Attributes:
        layout: ``"oblivious"`` or ``"trees"``, the key of every per-layout kernel table.
    """

    layout: ClassVar[Layout]

    @property
    def n_trees(self) -> int:
        """T, the number of trees."""
        return self.leaf_values.shape[0]

    @property
    def n_leaves(self) -> int:
        """L, the leaves of each tree's table: ``2**D`` for oblivious trees, the most leaves of
        any tree for general trees (every tree is stored with L)."""
        return self.leaf_values.shape[1]

    @property
    def n_outputs(self) -> int:
        """K: 1 for regression and binary, classes for multiclass, targets for multi-regression."""
        return self.leaf_values.shape[2]

    @property
    def n_players(self) -> int:
        """P, the groups of columns SHAP values are computed for before they are shared among the
        columns: F, unless CatBoost's CTRs combine several columns (``players``)."""
        return self.n_features if self.players is None else len(self.players)

    def predict(self, X: Any, *, batch_size: int | None = None, devices: Any = None) -> Any:
        """Raw predictions of the model: ``jaximp.predict(ens, X)`` as a method.

        Equal to CatBoost's ``predict(X, prediction_type="RawFormulaVal")``, XGBoost's
        ``predict(X, output_margin=True)``, LightGBM's ``predict(X, raw_score=True)`` and
        scikit-learn's raw output (see ``jaximp.predict``).

        Args:
            X: ``[N, F]`` rows (NumPy/JAX array, pandas/polars DataFrame, ``catboost.Pool``), or
                one row given 1-D.
            batch_size: rows per device step; None picks one for the device.
            devices: None (default device), an int or a list of ``jax.Device`` to shard rows
                over.

        Returns:
            np.ndarray | jax.Array: ``f32[N]`` when K == 1, else ``f32[N, K]``: NumPy for rows in
                host memory, a ``jax.Array`` on the rows' device for rows given as one.

        Raises:
            TypeError: ``X`` is not rows.
            ValueError: ``X`` does not hold the model's features.

        Differentiable in: ``leaf_values``, ``scale``, ``bias`` (under ``jax.grad``, ``jit`` and
        ``vmap``); piecewise constant in ``X`` and the borders (zero gradient; see
        ``jaximp.soft_predict`` for a smooth relaxation).

        Examples:
            >>> raw = ens.predict(X)
            >>> raw.shape
            (442,)
            >>> np.allclose(raw, model.predict(X), rtol=1e-5, atol=1e-3)  # float32 sums
            True
            >>> from sklearn.tree import DecisionTreeRegressor
            >>> tree = DecisionTreeRegressor(max_depth=3, random_state=0).fit(X, y)
            >>> np.allclose(jaximp.from_sklearn(tree).predict(X), tree.predict(X), rtol=1e-5)
            True
        """
        return _PREDICT[0](self, X, batch_size=batch_size, devices=devices)

    def __repr__(self) -> str:
        """One line: ``Kind(trees=T, depth=D, features=F, outputs=K, loss='...')`` (the loss left
        out when unknown); the arrays are summarised by their sizes, never printed."""
        loss = f", loss={self.loss_function!r}" if self.loss_function else ""
        return (f"{type(self).__name__}(trees={size(self.leaf_values, 0)}, depth={self._depth_repr()}, "
                f"features={self.n_features}, outputs={size(self.leaf_values, 2)}{loss})")

    def _depth_repr(self) -> int | str:
        return self.depth


def size(array: Any, axis: int) -> int | str:
    """``array.shape[axis]``, or "?" for a pytree leaf that is no array (such as the ints of a
    ``jax.vmap`` ``in_axes`` tree shaped like an ensemble)."""
    shape = getattr(array, "shape", None)
    return shape[axis] if shape is not None and len(shape) > axis else "?"


def check_model(ens: Any, fn_name: str) -> Layout:
    """``ens.layout``, or a ``TypeError`` naming ``fn_name`` unless ``ens`` is an ensemble."""
    if not isinstance(ens, Ensemble):
        raise TypeError(
            f"{fn_name}: ens must be a jaximp.ObliviousEnsemble or jaximp.TreeEnsemble (import a model "
            f"with jaximp.from_catboost, from_xgboost, from_lightgbm or from_sklearn); got {type(ens).__name__}"
        )
    return ens.layout


def squeeze_outputs(values: Array, n_outputs: int) -> Array:
    """Drop the trailing K axis when K == 1 (the API's single-output layout)."""
    return values[..., 0] if n_outputs == 1 else values


def _shares(sets: tuple[tuple[int, ...], ...], n_columns: int) -> np.ndarray:
    """``f32[len(sets), F]``: ``1 / len(set)`` on each set's columns, once per time it lists them."""
    weights = np.zeros((len(sets), n_columns), np.float32)
    for i, columns in enumerate(sets):
        np.add.at(weights[i], list(columns), 1.0 / len(columns))
    return weights


def _representatives(ens: Ensemble) -> list[int]:
    """The first evaluated feature of each player in CatBoost's order (float features that have
    borders, one-hot values, CTRs: the evaluated features' own order)."""
    float_borders = ens.featurizer.float_borders  # float features without borders: not in the model
    unused = [e < len(float_borders) and not len(float_borders[e]) for e in range(len(ens.player_of))]
    first: dict[int, int] = {}
    for e, p in sorted(enumerate(ens.player_of), key=lambda item: unused[item[0]]):
        first.setdefault(p, e)
    return [first[p] for p in range(len(ens.players))]


def to_columns(ens: Ensemble, values: Array, axis: int, *, per: str = "player") -> Array:
    """Attributions along ``axis`` -> attributions over the F input columns, each value shared
    equally among its columns (CatBoost's ``value / flatFeatures.size()``); a no-op for numeric
    models (P == E == F).

    Args:
        ens: the model.
        values: P values (one per player, ``per="player"``) or E values (one per evaluated
            feature, ``per="evaluated"``, shared per element among the columns it reads:
            PredictionValuesChange) along ``axis``.
        axis: the axis to map.
        per: ``"player"``, ``"evaluated"``, or ``"representative"``: P values each shared
            among the columns its player's first evaluated feature reads (CatBoost's
            LossFunctionChange, see ``jaximp._importances.loss_change``).

    Returns:
        ``values`` with ``axis`` of length F, same dtype.
    """
    if ens.players is None:
        return values
    if per == "representative":
        sets = tuple(ens.reads[e] for e in _representatives(ens))
    else:
        sets = ens.players if per == "player" else ens.reads
    moved = jnp.moveaxis(values, axis, -1)
    shares = _shares(sets, ens.n_features).astype(moved.dtype)
    if not isinstance(moved, jax.core.Tracer) and len(moved.devices()) == 1:  # put where the values are
        shares = jax.device_put(shares, next(iter(moved.devices())))
    return jnp.moveaxis(moved @ shares, -1, axis)


def has_real_names(ens: Ensemble) -> bool:
    """Whether the model was trained with column names (not CatBoost's default ``0..F-1``)."""
    return tuple(ens.feature_names) != tuple(str(i) for i in range(ens.n_features))


def namespace(*arrays: Any) -> Any:
    """The array module computing on ``arrays``: NumPy when every one is a NumPy array, else
    ``jax.numpy`` (the array API's ``array_namespace``, as in scikit-learn).

    The functions that build a model's per-leaf tables from its structure take it from their
    arguments: one implementation runs in NumPy on a concrete model, once per call with no
    program to compile, and in JAX inside a traced one (``jax.jit``, ``jax.grad``)."""
    return np if all(isinstance(a, (np.ndarray, np.generic)) for a in arrays) else jnp


def safe_div(num: Array, den: Array, fill: float = 0.0) -> Array:
    """``num / den`` where ``den > 0``, else ``fill``, with finite gradients everywhere (empty
    leaves and nodes of zero cover give exact zeros): the one guarded division of every weighted
    mean of the model (in NumPy for NumPy arrays, :func:`namespace`)."""
    xp = namespace(num, den)
    ok = den > 0
    return xp.where(ok, num / xp.where(ok, den, 1.0), fill)
