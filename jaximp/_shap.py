"""SHAP values of oblivious ensembles: per-tree leaf tables, then one gather per tree and row.

Every SHAP variant of an oblivious tree depends on a row only through the leaf it reaches, so
:mod:`jaximp._shap_tables` computes, once per model (and background), a table
``phi_t[player, leaf]`` for each tree, and a row's SHAP values are the sum over trees of
``phi_t[:, leaf_t(row)]`` scattered onto the players' features: the per-row cost is that of a
prediction, whatever the method or the size of the background.

Methods (``v(S)``: the value of a coalition S of a tree's features for a row ``x`` reaching leaf
``a``; ``phi_i = sum_{S not i} |S|! (n - |S| - 1)! / n! (v(S + i) - v(S))`` over the tree's n
distinct features; a model's values are the sum over trees, times its scale):

* ``"path_dependent"``: Lundberg's TreeSHAP value function (Lundberg, Erion et al. 2020, "From
  local explanations to global understanding with explainable AI for trees", Algorithm 1):
  ``v(S)`` walks from the root (CatBoost's last depth) to the leaves, following ``x`` at splits on
  features in S and averaging both children by their training weight (cover) elsewhere. Equal to
  CatBoost ``ShapValues`` with ``shap_calc_type="Regular"`` and shap's
  ``TreeExplainer(feature_perturbation="tree_path_dependent")``.
* ``"exact"``: CatBoost ``shap_calc_type="Exact"``: ``v(S) = E_b[V(x_S, b_notS)]``, the leaf value
  with the bits of features outside S taken from a leaf ``b`` drawn from the tree's training leaf
  weights (the interventional value function with the training leaf distribution as background).
* ``"approximate"``: CatBoost ``shap_calc_type="Approximate"``, Saabas' path attribution (Saabas
  2014, "Interpreting random forests"): along the root-to-leaf path, each split is credited with
  the change of the cover-weighted mean value of the node it leads to.
* ``"interventional"``: ``v(S) = mean_b V(x_S, b_notS)`` over the background rows ``b`` (Lundberg
  et al. 2020, "interventional" Tree SHAP; Janzing et al. 2020): equal to CatBoost ``ShapValues``
  with ``reference_data`` and shap's ``TreeExplainer(data=background,
  feature_perturbation="interventional")``, both of which weight background rows equally. The
  background enters only through each tree's histogram of background leaves.

Expected values: the training-weighted mean prediction (the first three methods) or the mean
prediction over the background (``interventional``), in raw score space (log-odds for
classifiers), so that ``shap_values(X).sum(1) + expected_value == ens.predict(X)``.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp import _shap_tables
from jaximp._batching import map_rows, mean_abs_rows
from jaximp._inputs import as_features, as_raw_columns, display_values
from jaximp._leaves import leaf_histogram, map_leaves
from jaximp._model import ObliviousEnsemble, check_ensemble, squeeze_outputs, to_columns
from jaximp._tree_model import TreeEnsemble, from_oblivious
from jaximp._tree_shap import (
    tree_expected_value,
    tree_shap_interaction_values,
    tree_shap_plan,
    tree_shap_values,
    tree_shap_values_from_plan,
)

METHODS = ("path_dependent", "exact", "approximate", "interventional")
_TABLE_KIND = {
    "path_dependent": "shapley_path",
    "exact": "shapley_hybrid",
    "approximate": "saabas",
    "interventional": "shapley_hybrid",
}
# Per-block budget of gathered table entries: on CPU 8 MiB, so that they stay in cache; elsewhere
# only a memory bound (1 GiB), since splitting a block's gathers costs ~26% on an H100 (ANCHORS.md).
_GATHER_FLOATS = {"cpu": 1 << 21}
_ACCELERATOR_GATHER_FLOATS = 1 << 28


class ShapTables(NamedTuple):
    """Per-tree SHAP tables of a model (a pytree).

    Attributes:
        values: ``f32[T, D, K, L]`` attribution of each player slot at each leaf (scaled), or
            ``f32[T, D, D, K, L]`` for interactions.
        features: ``i32[T, D]`` player of each slot (0 for null slots, whose values are 0).
        expected: ``f32[K]`` the expected raw prediction.
    """

    values: Array
    features: Array
    expected: Array


def _check_model(ens: Any, fn_name: str) -> None:
    check_ensemble(ens, fn_name)
    if ens.depth > _shap_tables.MAX_DEPTH:
        raise ValueError(
            f"{fn_name}: ens.depth must be at most {_shap_tables.MAX_DEPTH} for per-leaf SHAP "
            f"tables (their cost grows as 4**depth); got {ens.depth}"
        )


def general(ens: Any, method: Any = "path_dependent", fn_name: str = "shap_values") -> Any:
    """An oblivious model deeper than its SHAP tables allow as the equivalent ``TreeEnsemble``
    (``jaximp._tree_model.from_oblivious``: CatBoost's numbers, at a cost growing as ``2**D``);
    any other model unchanged."""
    if not isinstance(ens, ObliviousEnsemble) or ens.depth <= _shap_tables.MAX_DEPTH:
        return ens
    if method == "exact":
        raise ValueError(f"{fn_name}: method='exact' needs ens.depth <= {_shap_tables.MAX_DEPTH} (its tables "
                         f"grow as 4**depth); got {ens.depth}: use 'path_dependent' or 'interventional'")
    return from_oblivious(ens)


def _check_method(method: Any, background: Any, fn_name: str) -> None:
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"{fn_name}: method must be one of {', '.join(map(repr, METHODS))}; got {method!r}")
    if method == "interventional" and background is None:
        raise ValueError(
            f"{fn_name}: background must be given for method='interventional' (rows [B, F], "
            "e.g. a sample of the training data); got None"
        )
    if method != "interventional" and background is not None:
        raise ValueError(
            f"{fn_name}: background is only used by method='interventional'; got a background "
            f"with method={method!r} (drop it, or pass method='interventional')"
        )


def background_histogram(ens: ObliviousEnsemble, background: Any, *, fn_name: str,
                         batch_size: int | None = None, devices: Any = None) -> Array:
    """``f32[T, L]`` number of background rows reaching each leaf of each tree."""
    x = as_features(background, ens, fn_name, arg="background")
    weight = np.ones(x.shape[0], np.float32)
    return leaf_histogram(ens, x, weight, batch_size=batch_size, devices=devices, fn_name=fn_name)


@functools.partial(jax.jit, static_argnames=("kind",))
def _build(ens: ObliviousEnsemble, dist: Array, *, kind: str) -> ShapTables:
    values, features = _shap_tables.tables(ens, dist, kind=kind)
    return ShapTables(values, features, _shap_tables.expected_output(ens, dist))


def training_distribution(ens: ObliviousEnsemble, x: Any = None, *, fn_name: str,
                          batch_size: int | None = None, devices: Any = None) -> Array:
    """``f32[T, L]`` the leaf weights of the path-dependent methods: the model's training leaf
    weights or, for a model file that carries none, the leaf counts of the checked rows ``x``
    being explained, as CatBoost counts them then.

    Raises:
        ValueError: the model carries no leaf weights and no rows are given.
    """
    if ens.leaf_weights_known:
        return _shap_tables.effective_weights(ens)
    if x is None:
        raise ValueError(
            f"{fn_name}: the model file carries no leaf weights, which CatBoost then counts on the "
            "rows being explained; pass rows (jaximp.shap_values(ens, X), "
            "jaximp.prediction_values_change(ens, X)) or use a model exported with its leaf weights"
        )
    counts = leaf_histogram(ens, x, np.ones(x.shape[0], np.float32), batch_size=batch_size,
                            devices=devices, fn_name=fn_name)
    return _shap_tables.effective_weights(ens, counts)


def shap_tables(ens: ObliviousEnsemble, method: str = "path_dependent", background: Any = None, *,
                x: Any = None, fn_name: str = "shap_tables", batch_size: int | None = None,
                devices: Any = None) -> ShapTables:
    """Per-tree SHAP tables of ``ens`` for ``method`` (see the module docstring).

    ``x``: the checked rows to be explained, which give the leaf weights of a model that
    carries none (see :func:`training_distribution`).

    Raises:
        TypeError, ValueError: a bad model, method or background.
    """
    _check_model(ens, fn_name)
    _check_method(method, background, fn_name)
    if method == "interventional":
        dist = background_histogram(ens, background, fn_name=fn_name, batch_size=batch_size,
                                    devices=devices)
    else:
        dist = training_distribution(ens, x, fn_name=fn_name, batch_size=batch_size, devices=devices)
    return _build(ens, dist, kind=_TABLE_KIND[method])


def _gather_block(block: int, per_row: int, platform: str = "cpu") -> int:
    """Rows per gather: ``block``, halved until the gathered entries fit the platform's budget (a
    divisor of ``block``, so that every row still runs the same program)."""
    budget = _GATHER_FLOATS.get(platform, _ACCELERATOR_GATHER_FLOATS)
    while block > 1 and block % 2 == 0 and block * per_row > budget:
        block //= 2
    return block


def values_from_leaves(ens: ObliviousEnsemble, tab: ShapTables, leaves: Array, *,
                       per_player: bool = False) -> Array:
    """``f32[n, F, K]`` SHAP values of rows from their leaves ``[T, n]``: one gather per tree and
    slot, scattered onto the slots' players, then shared among the players' columns
    (``f32[n, P, K]`` per player with ``per_player``)."""
    t, d, k, _ = tab.values.shape
    leaves = leaves.astype(jnp.int32)
    gathered = jnp.take_along_axis(tab.values, leaves[:, None, None, :], axis=3)  # [T, D, K, n]
    out = jnp.zeros((ens.n_players, k, leaves.shape[1]), gathered.dtype)
    out = out.at[tab.features.reshape(-1)].add(gathered.reshape(t * d, k, -1))
    out = jnp.transpose(out, (2, 0, 1))
    return out if per_player else to_columns(ens, out, axis=1)


def values_block(tab: ShapTables, block: int, platform: str = "cpu") -> int:
    """Rows per fused block for row kernels that gather from ``tab`` (see ``_gather_block``)."""
    t, d, k, _ = tab.values.shape
    return _gather_block(block, t * d * k, platform)


def _values_kernel(params: tuple[ObliviousEnsemble, ShapTables], x: Array, *, block: int, platform: str) -> Array:
    ens, tab = params
    return map_leaves(lambda leaves: values_from_leaves(ens, tab, leaves), ens, x,
                      values_block(tab, block, platform))


def _interaction_kernel(params: tuple[ObliviousEnsemble, ShapTables], x: Array, *, block: int,
                        platform: str) -> Array:
    ens, tab = params
    t, d, _, k, _ = tab.values.shape
    f = ens.n_players
    pair_features = (tab.features[:, :, None] * f + tab.features[:, None, :]).reshape(-1)

    def rows_fn(leaves):
        leaves = leaves.astype(jnp.int32)
        gathered = jnp.take_along_axis(tab.values, leaves[:, None, None, None, :], axis=4)
        out = jnp.zeros((f * f, k, leaves.shape[1]), gathered.dtype)
        out = out.at[pair_features].add(gathered.reshape(t * d * d, k, -1))
        out = jnp.transpose(out, (2, 0, 1)).reshape(-1, f, f, k)  # [n, P, P, K]
        return _pairs_to_columns(ens, out)

    return map_leaves(rows_fn, ens, x, _gather_block(block, t * d * d * k, platform))


def _pairs_to_columns(ens: ObliviousEnsemble, values: Array) -> Array:
    """``[n, P, P, K]`` interaction values of players -> ``[n, F, F, K]`` of columns, as CatBoost
    unpacks combination classes (``UnpackInternalShapInteractionValues``): a player's main effect
    goes to the diagonal of each of its columns, shared equally; the interaction of two players
    to every pair of their columns, divided by the product of their sizes, except a column with
    itself (dropped, so rows no longer sum to the SHAP values there: CatBoost's numbers)."""
    if ens.players is None:
        return values
    eye = jnp.eye(ens.n_players, dtype=bool)[None, :, :, None]
    between = to_columns(ens, to_columns(ens, jnp.where(eye, 0.0, values), axis=1), axis=2)
    between = jnp.where(jnp.eye(ens.n_features, dtype=bool)[None, :, :, None], 0.0, between)
    main = to_columns(ens, jnp.diagonal(values, axis1=1, axis2=2), axis=2)  # [n, K, F]
    return between + jnp.moveaxis(main, 1, -1)[:, :, None, :] * jnp.eye(ens.n_features)[None, :, :, None]


def _explain(ens: ObliviousEnsemble, tab: ShapTables, X: Any, *, batch_size: int | None, devices: Any,
             fn_name: str, reduce: bool = False, progress: bool = True) -> Any:
    """SHAP values of rows ``X`` from per-tree tables: ``f32[N, F]`` (K == 1) or ``f32[N, F, K]``;
    with ``reduce`` their mean absolute value over rows, ``f32[F]`` or ``f32[F, K]``."""
    x = as_features(X, ens, fn_name)
    run = mean_abs_rows if reduce else map_rows
    out = run(_values_kernel, (ens, tab), x, batch_size=batch_size, devices=devices, fn_name=fn_name,
              row_floats=ens.n_features * ens.n_outputs, progress=progress)
    return squeeze_outputs(out, ens.n_outputs)



class Explainer:
    """SHAP explainer of a tree ensemble, with its per-tree tables computed once, in the manner
    of shap's ``TreeExplainer``: calling it gives a ``shap.Explanation``, so shap's plots work.

    Args:
        ens: the model (``ObliviousEnsemble`` or ``TreeEnsemble``).
        background: ``[B, F]`` rows for ``method="interventional"`` (NumPy/JAX array, pandas or
            polars DataFrame, catboost.Pool); None otherwise.
        method: ``"path_dependent"`` (default), ``"exact"``, ``"approximate"`` or
            ``"interventional"``; definitions and references in :func:`shap_values`.

    Raises:
        TypeError, ValueError: ``ens`` is not an ensemble, an unknown method, a missing or
            unexpected background, or a background with the wrong columns.

    Example:
        >>> explainer = jaximp.Explainer(ens)
        >>> explainer
        Explainer(ObliviousEnsemble(trees=20, depth=4, features=10, outputs=1, loss='RMSE'), method='path_dependent')
        >>> explanation = explainer(X)             # shap.plots.beeswarm(explanation) draws it
        >>> explanation.values.shape, explanation.feature_names[:3]
        ((442, 10), ['age', 'sex', 'bmi'])
        >>> np.allclose(explainer.shap_values(X), jaximp.shap_values(ens, X))
        True
    """

    def __init__(self, ens: ObliviousEnsemble | TreeEnsemble, background: Any = None,
                 method: str = "path_dependent"):
        ens = general(ens, method, "Explainer")
        self.ens = ens
        self.method = method
        self._background_rows = None if background is None else _n_rows(background)
        if isinstance(ens, TreeEnsemble):
            background = None if background is None else as_features(background, ens, "Explainer", "background")
            self.tables = tree_shap_plan(ens, method, background)
            self._expected = tree_expected_value(ens, method=method, background=background)
        else:
            self.tables = shap_tables(ens, method, background, fn_name="Explainer")
            self._expected = squeeze_outputs(self.tables.expected, ens.n_outputs)

    def __repr__(self) -> str:
        """One line: the model's summary, the method and the background's rows."""
        background = "" if self._background_rows is None else f", background_rows={self._background_rows}"
        return f"Explainer({self.ens!r}, method={self.method!r}{background})"

    @property
    def expected_value(self) -> Array:
        """The expected raw prediction, as :func:`expected_value`: ``f32[]`` when K == 1, else
        ``f32[K]``, a ``jax.Array`` (a function of the model and the background alone)."""
        return self._expected

    def shap_values(self, X: Any, *, batch_size: int | None = None, devices: Any = None,
                    progress: bool = True, fn_name: str = "Explainer.shap_values") -> Any:
        """SHAP values ``f32[N, F]`` (K == 1) or ``f32[N, F, K]`` from the explainer's tables,
        as :func:`shap_values` computes them: NumPy for rows in host memory, a ``jax.Array`` on
        the rows' device for rows given as one."""
        if isinstance(self.ens, TreeEnsemble):
            return tree_shap_values_from_plan(self.ens, as_features(X, self.ens, fn_name), self.tables,
                                              batch_size=batch_size, devices=devices, progress=progress)
        return _explain(self.ens, self.tables, X, batch_size=batch_size, devices=devices, fn_name=fn_name,
                        progress=progress)

    def __call__(self, X: Any, *, batch_size: int | None = None, devices: Any = None, progress: bool = True):
        """A ``shap.Explanation`` of the rows ``X``.

        Returns:
            ``shap.Explanation`` with ``values`` ``f32[N, F]`` (``f32[N, F, K]``), ``base_values``
            ``f32[N]`` (``f32[N, K]``), ``data`` ``f32[N, F]`` and the model's feature names.
            With categorical features, ``data`` holds the float columns and NaN in the
            categorical ones (shap's plots color by number), and ``display_data`` ``object[N, F]``
            the raw values.
        """
        try:
            import shap
        except ImportError as e:  # pragma: no cover - shap is an optional dependency
            raise ImportError("Explainer.__call__: returning a shap.Explanation needs the shap package "
                              "(pip install shap); Explainer.shap_values works without it") from e
        x = as_features(X, self.ens, "Explainer")
        values = self.shap_values(x, batch_size=batch_size, devices=devices, progress=progress, fn_name="Explainer")
        expected = np.asarray(self.expected_value)
        data, display = np.asarray(x), None
        featurizer = self.ens.featurizer
        if featurizer is not None:
            display = display_values(X, self.ens, "Explainer")
            data = np.full((x.shape[0], self.ens.n_features), np.nan, np.float32)
            data[:, list(featurizer.float_columns)] = as_raw_columns(X, self.ens, "Explainer").floats
        return shap.Explanation(
            values=values,
            base_values=np.broadcast_to(expected, (x.shape[0],) + expected.shape).copy(),
            data=data,
            display_data=display,
            feature_names=list(self.ens.feature_names),
        )


def _n_rows(rows: Any) -> int:
    """Rows of an array, DataFrame or ``catboost.Pool`` (``shape[0]``), or of a list."""
    shape = getattr(rows, "shape", None)
    return int(shape[0]) if shape is not None else len(rows)


def shap_values(ens: ObliviousEnsemble, X: Any, *, method: str = "path_dependent", background: Any = None,
                batch_size: int | None = None, devices: Any = None, progress: bool = True) -> Any:
    """SHAP values of every row, in raw score space.

    Each tree's attributions are tabulated per leaf once; each row then costs one gather per
    tree. The methods differ in the value ``v(S)`` of a coalition S of a tree's features for a
    row ``x``, and each tree's values ``phi_i = sum_{S not i} |S|! (n - |S| - 1)! / n! (v(S + i)
    - v(S))`` over its n distinct features are summed over the trees:

    * ``"path_dependent"``: TreeSHAP (Lundberg et al. 2020, "From local explanations to global
      understanding with explainable AI for trees", Algorithm 1): ``x`` is followed at splits on
      features in S, and both children are averaged by their training weight elsewhere.
    * ``"exact"``: CatBoost's ``"Exact"``: the features outside S are drawn from the tree's
      training leaf distribution.
    * ``"approximate"``: Saabas' path attribution (Saabas 2014, "Interpreting random forests"):
      each split on the row's path is credited with the change of the mean value it makes.
    * ``"interventional"``: ``v(S)`` is the mean prediction with the features outside S taken
      from each background row (Lundberg et al. 2020; Janzing et al. 2020).

    Args:
        ens: the model.
        X: ``[N, F]`` rows (NumPy/JAX array, pandas/polars DataFrame, numeric catboost.Pool).
        method: ``"path_dependent"`` (CatBoost ``shap_calc_type="Regular"``, shap
            ``tree_path_dependent``), ``"exact"`` (CatBoost ``"Exact"``), ``"approximate"``
            (CatBoost ``"Approximate"``, Saabas) or ``"interventional"`` (needs ``background``;
            CatBoost ``reference_data``, shap ``interventional``).
        background: ``[B, F]`` background rows, only with ``method="interventional"``; rows are
            weighted equally and enter only through each tree's leaf histogram, so the cost per
            explained row does not depend on B.
        batch_size: rows per device step; None picks one for the device.
        devices: None (default device), an int or a list of ``jax.Device`` to shard rows over.
        progress: a progress bar (tqdm) when the call lasts over 2 seconds; False silences it.

    Returns:
        ``f32[N, F]`` when K == 1, else ``f32[N, F, K]``, with
        ``shap_values(...).sum(1) + expected_value(...) == ens.predict(X)``: NumPy for rows in
        host memory, a ``jax.Array`` on the rows' device for rows given as one.

    Differentiable in: ``ens.leaf_values`` and ``ens.scale`` (every method); ``ens.leaf_weights``
    (``path_dependent``, ``exact``, ``approximate``: the covers). Piecewise constant in ``X``,
    ``background`` (it enters through leaf counts) and the splits; see
    ``jaximp.soft_shap_values`` for gradients in ``X``. Rows, background and the model may be
    traced (``jax.jit``, ``vmap`` over stacked ensembles): the call then stays in JAX.

    Raises:
        TypeError, ValueError: a bad model, rows, method or background.

    Example:
        >>> phi = jaximp.shap_values(ens, X)
        >>> phi.shape
        (442, 10)
        >>> catboost_phi = model.get_feature_importance(catboost.Pool(X), type="ShapValues")
        >>> np.allclose(phi, catboost_phi[:, :-1], rtol=1e-5, atol=1e-3)  # float32 sums
        True
        >>> phi = jaximp.shap_values(ens, X, method="interventional", background=X[:100])
        >>> base = jaximp.expected_value(ens, method="interventional", background=X[:100])
        >>> np.allclose(phi.sum(1) + base, ens.predict(X), rtol=1e-5, atol=1e-3)
        True
    """
    ens = general(ens, method)
    if isinstance(ens, TreeEnsemble):
        background = None if background is None else as_features(background, ens, "shap_values", "background")
        return tree_shap_values(ens, as_features(X, ens, "shap_values"), method=method, background=background,
                                batch_size=batch_size, devices=devices, progress=progress)
    _check_model(ens, "shap_values")
    _check_method(method, background, "shap_values")
    x = as_features(X, ens, "shap_values")
    tab = shap_tables(ens, method, background, x=x, fn_name="shap_values", batch_size=batch_size,
                      devices=devices)
    return _explain(ens, tab, x, batch_size=batch_size, devices=devices, fn_name="shap_values", progress=progress)


def shap_importance(ens: ObliviousEnsemble | TreeEnsemble, X: Any, *, method: str = "path_dependent",
                    background: Any = None, batch_size: int | None = None, devices: Any = None,
                    progress: bool = True) -> Any:
    """Mean absolute SHAP value of each feature over the rows ``X`` (shap's global "mean(|SHAP|)"
    bar), without holding the ``[N, F]`` SHAP matrix.

    Rows go through the SHAP kernel of :func:`shap_values` step by step; each step sums its
    rows' ``|phi|`` on the device and the steps' sums are added in float64, so the result equals
    ``np.abs(shap_values(ens, X, ...)).mean(0)`` to float32 rounding while memory stays that of
    one step (``batch_size`` rows) whatever N.

    Args:
        ens: the model.
        X: ``[N, F]`` rows (as for :func:`shap_values`).
        method, background: as for :func:`shap_values`.
        batch_size: rows per device step; None picks one for the device.
        devices: None, an int or a list of ``jax.Device`` to shard rows over.
        progress: a progress bar (tqdm) when the call lasts over 2 seconds; False silences it.

    Returns:
        ``f32[F]`` when K == 1, else ``f32[F, K]``: NumPy for rows in host memory, a
        ``jax.Array`` for rows given as one.

    Differentiable in: as :func:`shap_values` (``|.|`` has a kink where a value is 0). Under
    ``jax.grad``, ``jit`` or ``vmap`` the rows go through one traced call (no host sums).

    Raises:
        TypeError, ValueError: as :func:`shap_values`.

    Example:
        >>> mean_abs = jaximp.shap_importance(ens, X)
        >>> mean_abs.shape
        (10,)
        >>> np.allclose(mean_abs, np.abs(jaximp.shap_values(ens, X)).mean(0), rtol=1e-5, atol=1e-5)
        True
    """
    fn_name = "shap_importance"
    ens = general(ens, method, fn_name)
    if isinstance(ens, TreeEnsemble):
        background = None if background is None else as_features(background, ens, fn_name, "background")
        x = as_features(X, ens, fn_name)
        plan = tree_shap_plan(ens, method, background, batch_size=batch_size, devices=devices, fn_name=fn_name, x=x)
        return tree_shap_values_from_plan(ens, x, plan, batch_size=batch_size,
                                          devices=devices, reduce=True, fn_name=fn_name, progress=progress)
    _check_model(ens, fn_name)
    _check_method(method, background, fn_name)
    x = as_features(X, ens, fn_name)
    tab = shap_tables(ens, method, background, x=x, fn_name=fn_name, batch_size=batch_size, devices=devices)
    return _explain(ens, tab, x, batch_size=batch_size, devices=devices, fn_name=fn_name, reduce=True,
                    progress=progress)


def expected_value(ens: ObliviousEnsemble | TreeEnsemble, *, method: str = "path_dependent",
                   background: Any = None) -> Array:
    """The SHAP base value, in raw score space: CatBoost's last ``ShapValues`` column.

    ``scale * sum_t sum_leaf p_t(leaf) V_t(leaf) + bias`` with ``p_t`` the tree's training leaf
    weights (``path_dependent``, ``exact``, ``approximate``) or its background leaf histogram
    (``interventional``), normalised.

    Args:
        ens: the model.
        method, background: as for :func:`shap_values`.

    Returns:
        ``f32[]`` when K == 1, else ``f32[K]``: a ``jax.Array``, as every function of the model
        alone (a background included).

    Differentiable in: ``ens.leaf_values``, ``ens.scale``, ``ens.bias`` and (except for
    ``interventional``) ``ens.leaf_weights``; piecewise constant in ``background``.

    Raises:
        TypeError, ValueError: a bad model, method or background.

    Example:
        >>> base = jaximp.expected_value(ens)
        >>> base.shape
        ()
        >>> catboost_phi = model.get_feature_importance(catboost.Pool(X), type="ShapValues")
        >>> np.allclose(base, catboost_phi[0, -1], rtol=1e-5, atol=1e-3)
        True
    """
    ens = general(ens, method, "expected_value")
    if isinstance(ens, TreeEnsemble):
        background = None if background is None else as_features(background, ens, "expected_value", "background")
        return tree_expected_value(ens, method=method, background=background)
    _check_model(ens, "expected_value")
    _check_method(method, background, "expected_value")
    if method == "interventional":
        dist = background_histogram(ens, background, fn_name="expected_value")
    else:
        dist = training_distribution(ens, fn_name="expected_value")
    return squeeze_outputs(_shap_tables.expected_output(ens, dist), ens.n_outputs)


def shap_interaction_values(ens: ObliviousEnsemble | TreeEnsemble, X: Any, *, batch_size: int | None = None,
                            devices: Any = None, progress: bool = True) -> Any:
    """SHAP interaction values (path-dependent), CatBoost ``ShapInteractionValues`` without the
    bias row and column.

    Per tree, the Shapley interaction index of Lundberg et al. 2020 (eq. 11) over the tree's
    distinct features with the path-dependent value function: ``Phi_ij = sum_{S without i, j}
    |S|! (n - |S| - 2)! / (2 (n - 1)!) (v(S+i+j) - v(S+i) - v(S+j) + v(S))`` for ``i != j``, and
    ``Phi_ii = phi_i - sum_{j != i} Phi_ij``; so ``values.sum(2) == shap_values(ens, X)``. With
    categorical features the players are CatBoost's combination classes (the sets of columns a
    split reads), unpacked onto columns as CatBoost does; where a CTR combines several
    categorical columns,
    CatBoost drops the part of its interactions that falls on a column with itself, and so does
    this function, so those rows sum to slightly less than the SHAP values.

    Args:
        ens: the model.
        X: ``[N, F]`` rows.
        batch_size: rows per device step; None picks one for the device.
        devices: None, an int or a list of ``jax.Device``.
        progress: a progress bar (tqdm) when the call lasts over 2 seconds; False silences it.

    Returns:
        ``f32[N, F, F]`` when K == 1, else ``f32[N, F, F, K]``, symmetric in the two F axes:
        NumPy for rows in host memory, a ``jax.Array`` on the rows' device for rows given as one.

    Differentiable in: ``ens.leaf_values``, ``ens.leaf_weights`` and ``ens.scale``; piecewise
    constant in ``X`` and the splits.

    Raises:
        TypeError, ValueError: a bad model or rows.

    Example:
        >>> inter = jaximp.shap_interaction_values(ens, X[:50])
        >>> inter.shape
        (50, 10, 10)
        >>> np.allclose(inter.sum(2), jaximp.shap_values(ens, X[:50]), rtol=1e-5, atol=1e-3)
        True
    """
    return _interactions(ens, X, batch_size=batch_size, devices=devices, fn_name="shap_interaction_values",
                         progress=progress)


def shap_interaction_importance(ens: ObliviousEnsemble | TreeEnsemble, X: Any, *, batch_size: int | None = None,
                                devices: Any = None, progress: bool = True) -> Any:
    """Mean absolute SHAP interaction value of every pair of features over the rows ``X``,
    without holding the ``[N, F, F]`` interaction values.

    Equals ``np.abs(shap_interaction_values(ens, X)).mean(0)`` to float32 rounding (steps
    reduced on the device, added in float64); memory ``O(batch_size F^2)`` whatever N.

    Args:
        ens: the model.
        X: ``[N, F]`` rows.
        batch_size, devices, progress: as for :func:`shap_interaction_values`.

    Returns:
        ``f32[F, F]`` when K == 1, else ``f32[F, F, K]``, symmetric (the diagonal holds the mean
        |main effect|): NumPy for rows in host memory, a ``jax.Array`` for rows given as one.

    Differentiable in: as :func:`shap_interaction_values` (``|.|`` has a kink at 0).

    Raises:
        TypeError, ValueError: as :func:`shap_interaction_values`.

    Example:
        >>> mean_abs = jaximp.shap_interaction_importance(ens, X[:50])
        >>> mean_abs.shape
        (10, 10)
        >>> np.allclose(mean_abs, np.abs(jaximp.shap_interaction_values(ens, X[:50])).mean(0),
        ...             rtol=1e-5, atol=1e-5)
        True
    """
    return _interactions(ens, X, batch_size=batch_size, devices=devices, fn_name="shap_interaction_importance",
                         reduce=True, progress=progress)


def _interactions(ens: Any, X: Any, *, batch_size: int | None, devices: Any, fn_name: str,
                  reduce: bool = False, progress: bool = True) -> Any:
    """Interaction values ``[N, F, F(, K)]``, or with ``reduce`` their mean |.| ``[F, F(, K)]``."""
    ens = general(ens, fn_name=fn_name)
    if isinstance(ens, TreeEnsemble):
        return tree_shap_interaction_values(ens, as_features(X, ens, fn_name), batch_size=batch_size,
                                            devices=devices, reduce=reduce, fn_name=fn_name, progress=progress)
    _check_model(ens, fn_name)
    if ens.n_players ** 2 >= 2**31:
        raise ValueError(f"{fn_name}: the model's features must number under 46341 for [F, F] pairs "
                         f"indexed in int32; got {ens.n_players}")
    x = as_features(X, ens, fn_name)
    dist = training_distribution(ens, x, fn_name=fn_name, batch_size=batch_size, devices=devices)
    tab = _build(ens, dist, kind="interaction_path")
    run = mean_abs_rows if reduce else map_rows
    out = run(_interaction_kernel, (ens, tab), x, batch_size=batch_size, devices=devices, fn_name=fn_name,
              row_floats=ens.n_features ** 2 * ens.n_outputs, progress=progress)
    return squeeze_outputs(out, ens.n_outputs)
