"""SHAP values, expected values and SHAP interaction values of either layout: the stage's
public functions, with the one dispatch of its kernels by layout (:data:`KERNELS`).

Every SHAP variant of a tree is the Shapley value of a game whose value ``v(S)`` for a coalition
``S`` of the tree's features and a row ``x`` depends on the method; a model's values are the sum
over its trees, times its scale (``phi_i = sum_{S not i} |S|! (m - |S| - 1)! / m! (v(S + i) -
v(S))`` over a tree's m distinct features):

* ``"path_dependent"``: Lundberg's TreeSHAP value function (Lundberg, Erion et al. 2020, "From
  local explanations to global understanding with explainable AI for trees", Algorithm 1):
  ``x`` is followed at splits on features in S, and both children are averaged by their
  training weight (cover) elsewhere. CatBoost ``ShapValues`` with ``shap_calc_type="Regular"``,
  shap's ``TreeExplainer(feature_perturbation="tree_path_dependent")``.
* ``"exact"`` (oblivious trees): CatBoost ``shap_calc_type="Exact"``: the features outside S
  are drawn from the tree's training leaf distribution.
* ``"approximate"``: CatBoost ``shap_calc_type="Approximate"``, Saabas' path attribution
  (Saabas 2014, "Interpreting random forests").
* ``"interventional"``: ``v(S) = mean_b V(x_S, b_notS)`` over the background rows ``b``
  (Lundberg et al. 2020; Janzing et al. 2020): CatBoost ``ShapValues`` with ``reference_data``,
  shap's ``TreeExplainer(data=background, feature_perturbation="interventional")``.

Each layout brings the same four functions (:class:`ShapKernels`): a *plan* of per-tree tables
computed once per model (and background), the values of checked rows from a plan, the expected
value, and the interaction values. Oblivious trees tabulate every method per leaf
(``jaximp._shap.oblivious``); general trees split each tree into one game per leaf
(``jaximp._shap.trees``). An oblivious model deeper than its tables allow is explained as the
equivalent general trees (:func:`general`). Each tree's attributions are tabulated once per
model; each row then costs one gather per tree.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from jax import Array

from jaximp._models.ensemble import Ensemble, check_model
from jaximp._models.groups import grouped
from jaximp._rows.frames import first_row, one_row
from jaximp._rows.inputs import as_features
from jaximp._shap import oblivious, trees
from jaximp._shap.interactions import general_trees, shap_interactions
from jaximp._shap.outputs import output_transform, output_values
from jaximp._shap.trees import check_method


@dataclasses.dataclass(frozen=True)
class ShapKernels:
    """The SHAP functions of one layout.

    Attributes:
        methods: the methods the layout computes.
        plan: ``(ens, method, background, *, x, batch_size, devices, fn_name) -> plan``,
            the per-tree tables of a method (``background``: checked rows or None; ``x``: the
            checked rows to explain, or None).
        values: ``(ens, plan, x, *, batch_size, devices, fn_name, reduce, progress)`` -> SHAP
            values ``f32[N, F(, K)]``, or their mean |.| over rows with ``reduce``.
        expected: ``(ens, method, background, *, plan, x, batch_size, devices, fn_name)`` -> the
            expected raw prediction ``f32[]`` or ``f32[K]``.
        interactions: ``(ens, x, *, batch_size, devices, fn_name, reduce, progress, per_player)``
            -> interaction values ``f32[N, F, F(, K)]``, or their mean |.| over rows with
            ``reduce``; ``[N, P, P(, K)]`` between the players with ``per_player``.
    """

    methods: tuple[str, ...]
    plan: Callable
    values: Callable
    expected: Callable
    interactions: Callable


KERNELS = {
    "oblivious": ShapKernels(oblivious.METHODS, oblivious.plan, oblivious.values, oblivious.expected,
                             oblivious.interactions),
    "trees": ShapKernels(trees.METHODS, trees.plan, trees.values, trees.expected, trees.interactions),
}
METHODS = oblivious.METHODS


def general(ens: Any, method: Any = "path_dependent", fn_name: str = "shap_values") -> Any:
    """An oblivious model deeper than its SHAP tables allow as the equivalent ``TreeEnsemble``
    (``jaximp._models.trees.from_oblivious``: CatBoost's numbers, at a cost growing as ``2**D``),
    kept with the model for its next call; any other model unchanged."""
    if check_model(ens, fn_name) != "oblivious" or ens.depth <= oblivious.MAX_DEPTH:
        return ens
    if method == "exact":
        raise ValueError(f"{fn_name}: method='exact' needs ens.depth <= {oblivious.MAX_DEPTH} (its tables "
                         f"grow as 4**depth); got {ens.depth}: use 'path_dependent' or 'interventional'")
    return general_trees(ens, fn_name)


def layout_kernels(ens: Any, method: Any, background: Any, fn_name: str) -> tuple[Ensemble, ShapKernels]:
    """``(ens, its layout's kernels)`` once the method and background are checked; an oblivious
    model too deep for tables as general trees (:func:`general`)."""
    check_model(ens, fn_name)
    check_method(method, background, METHODS, fn_name)
    ens = general(ens, method, fn_name)
    kernels = KERNELS[ens.layout]
    check_method(method, background, kernels.methods, fn_name)
    return ens, kernels


def _rows(ens: Ensemble, X: Any, background: Any, fn_name: str) -> tuple[Any, Any]:
    """The checked rows to explain and the checked background (or None)."""
    x = as_features(X, ens, fn_name)
    return x, None if background is None else as_features(background, ens, fn_name, "background")


def shap_values(ens: Ensemble, X: Any, *, method: str = "path_dependent", background: Any = None,
                model_output: str = "raw", y: Any = None, feature_groups: Any = None,
                batch_size: int | None = None, devices: Any = None, progress: bool = True) -> Any:
    """SHAP values of every row: each feature's contribution to the raw prediction.

    Additive: ``shap_values(ens, X, ...).sum(axis=1) + expected_value(ens, ...)`` equals
    ``jaximp.predict(ens, X)``. Each tree's values are the Shapley values ``phi_i = sum_{S not
    containing i} |S|! (m - |S| - 1)! / m! (v(S + i) - v(S))`` over its m features, summed over
    the trees; the methods differ in the value ``v(S)`` of a set S of features for a row:

    * ``"path_dependent"``: TreeSHAP (Lundberg et al. 2020, "From local explanations to global
      understanding with explainable AI for trees", Algorithm 1): the row is followed at splits
      on features in S, and both branches are averaged by their training weight elsewhere.
      Equals CatBoost's ``get_feature_importance(type="ShapValues")`` with
      ``shap_calc_type="Regular"``, shap's ``TreeExplainer(model,
      feature_perturbation="tree_path_dependent")``, XGBoost's ``predict(X,
      pred_contribs=True)`` and LightGBM's ``predict(X, pred_contrib=True)`` (their last
      column, the expected value, left out).
    * ``"exact"`` (CatBoost's symmetric trees): CatBoost's ``shap_calc_type="Exact"``, the
      features outside S drawn from the tree's training leaf distribution.
    * ``"approximate"``: Saabas' path attribution (Saabas 2014, "Interpreting random forests"),
      each split on the row's path credited with the change of the mean prediction it makes:
      CatBoost's ``shap_calc_type="Approximate"``, XGBoost's ``pred_contribs=True,
      approx_contribs=True``.
    * ``"interventional"``: ``v(S)`` is the mean prediction with the features outside S taken
      from each background row (Lundberg et al. 2020; Janzing et al. 2020): CatBoost's
      ``ShapValues`` with ``reference_data=background``, shap's ``TreeExplainer(model,
      data=background, feature_perturbation="interventional")``.

    CatBoost credits a split on a CTR over several categorical columns to those columns
    equally; so does jaximp.

    ``model_output="probability"`` or ``"log_loss"`` (with ``method="interventional"``)
    explains the model's probability or each row's loss instead of the raw output, as shap's
    ``TreeExplainer(model, data=shap.maskers.Independent(background,
    max_samples=len(background)), feature_perturbation="interventional", model_output=...)``:
    for each background row b the raw game's values are scaled by ``(T(f(x)) - T(f(b))) / (f(x)
    - f(b))``, then averaged, so a row's values add up to ``T(f(x))`` less the mean of ``T(f(b))``
    over the background. ``"log_loss"`` tracks which features raise a row's loss, as a drift
    monitor does. This costs ``O(N B)`` (pairs of rows and background rows), not ``O(N)``.

    Args:
        ens: the model (from ``jaximp.from_catboost``, ``from_xgboost``, ``from_lightgbm`` or
            ``from_sklearn``).
        X: ``[N, F]`` rows (NumPy/JAX array, pandas/polars DataFrame, ``catboost.Pool``), or
            one row given 1-D (an ``[F]`` array or list, a pandas Series such as ``X.iloc[0]``).
        method: ``"path_dependent"``, ``"exact"``, ``"approximate"`` or ``"interventional"``
            (see above).
        background: ``[B, F]`` background rows (e.g. a sample of the training data), needed by
            ``method="interventional"`` and refused by the others. The rows are weighted
            equally and enter only through how many of them reach each leaf, so the cost per
            explained row does not depend on B.
        model_output: ``"raw"`` (the raw prediction), ``"probability"`` (the sigmoid of a binary
            classifier's log-odds; a scikit-learn forest classifier's outputs are probabilities
            already) or ``"log_loss"`` (the row's loss: the log loss of a binary classifier, the
            squared error of a squared-error regression); the last two with
            ``method="interventional"``.
        y: ``[N]`` the rows' labels or targets, needed by ``model_output="log_loss"`` (class
            labels are matched to the model's classes) and refused otherwise.
        feature_groups: None, or a list of lists of column names or indices that partition the
            columns: each group is one player, and the values are the groups' Shapley values,
            ``f32[N, G]`` in the groups' order (not the sums of their features' values, which
            are not the group's Shapley value).
        batch_size: rows per device step; None picks one for the device.
        devices: None (default device), an int or a list of ``jax.Device`` to shard rows over.
        progress: a progress bar (tqdm) when the call lasts over 2 seconds; False silences it.

    Returns:
        np.ndarray | jax.Array: ``f32[N, F]`` when K == 1, else ``f32[N, F, K]``; one row given 1-D
            gives ``f32[F]`` (``f32[F, K]``), as shap's ``TreeExplainer.shap_values``. NumPy for
            rows in host memory, a ``jax.Array`` on the rows' device for rows given as one; float64
            for a float64 model under ``jax_enable_x64``.

    Raises:
        TypeError: ``ens`` is not a jaximp ensemble, or ``X`` or ``background`` is not rows.
        ValueError: an unknown ``method`` (or ``"exact"`` for a ``TreeEnsemble``), a
            ``background`` missing for ``"interventional"`` or given to another method, rows
            that do not hold the model's features, an unknown ``model_output`` (or one the
            model has no such output for, such as the probability of a regression), ``y``
            missing for ``"log_loss"``, given otherwise or of the wrong length, or
            ``feature_groups`` that overlap, miss a column or name an unknown one.

    Differentiable in: ``ens.leaf_values`` and ``ens.scale`` (every method; the raw output);
    ``ens.leaf_weights`` (``path_dependent``, ``exact``, ``approximate``: the covers). Piecewise constant in ``X``,
    ``background`` and the splits; see ``jaximp.soft_shap_values`` for gradients in ``X``.
    Rows, background and the model may be traced (``jax.jit``, ``vmap`` over stacked
    ensembles): the call then stays in JAX.

    Examples:
        >>> phi = jaximp.shap_values(ens, X)
        >>> phi.shape
        (442, 10)
        >>> jaximp.shap_values(ens, X.iloc[0]).shape     # one row given 1-D, as shap
        (10,)
        >>> catboost_phi = model.get_feature_importance(catboost.Pool(X), type="ShapValues")
        >>> np.allclose(phi, catboost_phi[:, :-1], rtol=1e-5, atol=1e-3)  # float32 sums
        True
        >>> phi = jaximp.shap_values(ens, X, method="interventional", background=X[:100])
        >>> base = jaximp.expected_value(ens, method="interventional", background=X[:100])
        >>> np.allclose(phi.sum(1) + base, ens.predict(X), rtol=1e-5, atol=1e-3)
        True
    """
    transform = output_transform(ens, model_output, method, y, "shap_values")
    return _values(ens, X, method=method, background=background, batch_size=batch_size, devices=devices,
                   fn_name="shap_values", progress=progress, transform=transform, y=y, feature_groups=feature_groups)


def shap_importance(ens: Ensemble, X: Any, *, method: str = "path_dependent",
                    background: Any = None, batch_size: int | None = None, devices: Any = None,
                    progress: bool = True) -> Any:
    """Mean absolute SHAP value of each feature over the rows ``X``, without holding the
    ``[N, F]`` SHAP values: the global importance that shap's ``shap.plots.bar(explanation)``
    draws ("mean(|SHAP value|)").

    Equals ``np.abs(shap_values(ens, X, ...)).mean(axis=0)`` to float32 rounding: each step of
    ``batch_size`` rows is reduced on the device and the blocks' sums are added there in
    double-float precision (about float64's), so memory stays that of one step whatever N.

    Args:
        ens: the model.
        X: ``[N, F]`` rows (as for [`shap_values`][jaximp.shap_values]; one row given 1-D counts as one row).
        method: ``"path_dependent"``, ``"exact"``, ``"approximate"`` or ``"interventional"``,
            as for [`shap_values`][jaximp.shap_values].
        background: ``[B, F]`` background rows for ``method="interventional"``, as for
            [`shap_values`][jaximp.shap_values].
        batch_size: rows per device step; None picks one for the device.
        devices: None, an int or a list of ``jax.Device`` to shard rows over.
        progress: a progress bar (tqdm) when the call lasts over 2 seconds; False silences it.

    Returns:
        np.ndarray | jax.Array: ``f32[F]`` when K == 1, else ``f32[F, K]``: NumPy for rows in host
            memory, a ``jax.Array`` for rows given as one.

    Raises:
        TypeError: as [`shap_values`][jaximp.shap_values].
        ValueError: as [`shap_values`][jaximp.shap_values].

    Differentiable in: as [`shap_values`][jaximp.shap_values] (``|.|`` has a kink where a value is
    0). Under ``jax.grad``, ``jit`` or ``vmap`` the rows go through one traced call (no host sums).

    Examples:
        >>> mean_abs = jaximp.shap_importance(ens, X)
        >>> mean_abs.shape
        (10,)
        >>> np.allclose(mean_abs, np.abs(jaximp.shap_values(ens, X)).mean(0), rtol=1e-5, atol=1e-5)
        True
    """
    return _values(ens, X, method=method, background=background, batch_size=batch_size, devices=devices,
                   fn_name="shap_importance", reduce=True, progress=progress)


def _values(ens: Any, X: Any, *, method: Any, background: Any, batch_size: int | None, devices: Any,
            fn_name: str, reduce: bool = False, progress: bool = True, transform: str = "identity", y: Any = None,
            feature_groups: Any = None) -> Any:
    """SHAP values ``[N, F(, K)]`` (``[F(, K)]`` for one row given 1-D), or with ``reduce`` their
    mean |.| ``[F(, K)]``: the layout's plan, then its values; of the ``transform``-ed output
    (``jaximp._shap.outputs``)."""
    ens, kernels = layout_kernels(ens, method, background, fn_name)
    X, single = one_row(X, ens, fn_name)
    x, background = _rows(ens, X, background, fn_name)
    groups = {} if feature_groups is None else {"per_player": True}
    if groups:
        ens = grouped(ens, feature_groups, fn_name)
    if transform != "identity":
        values = output_values(ens, x, background, y, transform, batch_size=batch_size, devices=devices,
                               fn_name=fn_name, per_player_values=bool(groups))
        return first_row(values, single)
    plan = kernels.plan(ens, method, background, x=x, batch_size=batch_size, devices=devices, fn_name=fn_name)
    values = kernels.values(ens, plan, x, batch_size=batch_size, devices=devices, fn_name=fn_name,
                            reduce=reduce, progress=progress, **groups)
    return values if reduce else first_row(values, single)


def expected_value(ens: Ensemble, *, method: str = "path_dependent",
                   background: Any = None) -> Array:
    """The SHAP base value: the raw prediction that [`shap_values`][jaximp.shap_values] distributes
    from.

    ``shap_values(ens, X, ...).sum(axis=1) + expected_value(ens, ...)`` equals the raw
    prediction. It is ``scale * sum_t sum_leaf p_t(leaf) V_t(leaf) + bias``, with ``p_t`` the
    share of the training weight in each leaf of tree t (``path_dependent``, ``exact``,
    ``approximate``) or of the background rows (``interventional``). Equals the last column of
    CatBoost's ``get_feature_importance(type="ShapValues")``, shap's
    ``TreeExplainer.expected_value``, and the last column of XGBoost's ``pred_contribs`` and
    LightGBM's ``pred_contrib``.

    Args:
        ens: the model.
        method: ``"path_dependent"``, ``"exact"``, ``"approximate"`` or ``"interventional"``,
            as for [`shap_values`][jaximp.shap_values].
        background: ``[B, F]`` background rows for ``method="interventional"``, as for
            [`shap_values`][jaximp.shap_values].

    Returns:
        jax.Array: ``f32[]`` when K == 1, else ``f32[K]``: a ``jax.Array``, as every function of the
            model alone (a background included).

    Raises:
        TypeError: ``ens`` is not a jaximp ensemble, or ``background`` is not rows.
        ValueError: an unknown ``method``, or a ``background`` missing for
            ``"interventional"`` or given to another method.

    Differentiable in: ``ens.leaf_values``, ``ens.scale``, ``ens.bias`` and (except for
    ``interventional``) ``ens.leaf_weights``; piecewise constant in ``background``.

    Examples:
        >>> base = jaximp.expected_value(ens)
        >>> base.shape
        ()
        >>> catboost_phi = model.get_feature_importance(catboost.Pool(X), type="ShapValues")
        >>> np.allclose(base, catboost_phi[0, -1], rtol=1e-5, atol=1e-3)
        True
    """
    fn_name = "expected_value"
    ens, kernels = layout_kernels(ens, method, background, fn_name)
    background = None if background is None else as_features(background, ens, fn_name, "background")
    return kernels.expected(ens, method, background, fn_name=fn_name)


def shap_interaction_values(ens: Ensemble, X: Any, *, method: str = "path_dependent", background: Any = None,
                            batch_size: int | None = None, devices: Any = None, progress: bool = True) -> Any:
    """SHAP interaction values of every row: the effect of each pair of features.

    Equal to CatBoost's ``get_feature_importance(type="ShapInteractionValues")`` without its
    last (bias) row and column, to shap's ``TreeExplainer(model).shap_interaction_values`` and
    to XGBoost's ``predict(X, pred_interactions=True)`` without its bias row and column. Per tree,
    the Shapley interaction index (Lundberg et al. 2020, eq. 11) with the path-dependent value
    function of [`shap_values`][jaximp.shap_values]: for ``i != j``, ``Phi_ij = sum_{S without
    i, j} |S|! (m - |S| - 2)! / (2 (m - 1)!) (v(S+i+j) - v(S+i) - v(S+j) + v(S))``, and
    ``Phi_ii = phi_i - sum_{j != i} Phi_ij``; so each row's ``values.sum(axis=2)`` is its SHAP
    values.

    CatBoost credits a split on a CTR over several categorical columns to those columns
    equally, and leaves out the part of such a split's interactions that falls on one column
    with itself; so does jaximp, so those columns' rows sum to slightly less than their SHAP
    values.

    With ``method="interventional"`` the game is that of interventional SHAP values over the
    ``background`` (shap's ``TreeExplainer`` returns zeros for these): the same layout, from the
    Shapley interaction index of [`interaction_values`][jaximp.interaction_values] (``"SII"``,
    order 2), so each row's ``values.sum(axis=2)`` is its interventional SHAP values.

    Args:
        ens: the model.
        X: ``[N, F]`` rows, or one row given 1-D (as for [`shap_values`][jaximp.shap_values]).
        method: ``"path_dependent"`` or ``"interventional"``.
        background: ``[B, F]`` rows for ``method="interventional"`` (refused by the other).
        batch_size: rows per device step; None picks one for the device: the most rows whose
            output (``F * F * K`` 4-byte values a row) takes at most 64 MiB on a CPU (1 GiB on a
            GPU or TPU; never over 1/16 of the device's memory), e.g. 256 rows of 200 features.
            The kernels' intermediates take about as much again, whatever N (XLA's temporary
            memory of a step of 200 features: 40 MiB for oblivious trees, 54 MiB for general
            ones, 17 to 25 MiB for ``"interventional"``). Any ``batch_size`` is rounded up to
            whole blocks of rows, as small for a wide model; the values are the same bits
            whatever the batch size.
        devices: None, an int or a list of ``jax.Device`` to shard rows over.
        progress: a progress bar (tqdm) when the call lasts over 2 seconds; False silences it
            (path-dependent).

    Returns:
        np.ndarray | jax.Array: ``f32[N, F, F]`` when K == 1, else ``f32[N, F, F, K]``, symmetric in
            the two F axes; one row given 1-D gives ``f32[F, F]`` (``f32[F, F, K]``), as shap's
            ``TreeExplainer.shap_interaction_values``. NumPy for rows in host memory, a
            ``jax.Array`` on the rows' device for rows given as one; the model's dtype.

    Raises:
        TypeError: ``ens`` is not a jaximp ensemble, or ``X`` is not rows.
        ValueError: ``X`` does not hold the model's features, an unknown method, or a background
            missing for ``"interventional"`` or given to ``"path_dependent"``.

    Differentiable in: ``ens.leaf_values``, ``ens.leaf_weights`` and ``ens.scale``; piecewise
    constant in ``X`` and the splits.

    Examples:
        >>> inter = jaximp.shap_interaction_values(ens, X[:50])
        >>> inter.shape
        (50, 10, 10)
        >>> np.allclose(inter.sum(2), jaximp.shap_values(ens, X[:50]), rtol=1e-5, atol=1e-3)
        True
    """
    fn_name = "shap_interaction_values"
    check_model(ens, fn_name)
    check_method(method, background, ("path_dependent", "interventional"), fn_name)
    if method == "interventional":
        return shap_interactions(ens, X, method=method, background=background, batch_size=batch_size,
                                 devices=devices, fn_name=fn_name)
    return _interactions(ens, X, batch_size=batch_size, devices=devices, fn_name=fn_name, progress=progress)


def shap_interaction_importance(ens: Ensemble, X: Any, *, batch_size: int | None = None,
                                devices: Any = None, progress: bool = True) -> Any:
    """Mean absolute SHAP interaction value of every pair of features over the rows ``X``,
    without holding the ``[N, F, F]`` interaction values.

    Equals ``np.abs(shap_interaction_values(ens, X)).mean(axis=0)`` to float32 rounding (each
    step reduced on the device, the blocks added there in double-float precision); memory ``O(batch_size F^2)``
    whatever N, the default steps as those of [`shap_interaction_values`][jaximp.shap_interaction_values].

    Args:
        ens: the model.
        X: ``[N, F]`` rows (one row given 1-D counts as one row).
        batch_size: rows per device step; None picks one for the device.
        devices: None, an int or a list of ``jax.Device`` to shard rows over.
        progress: a progress bar (tqdm) when the call lasts over 2 seconds; False silences it.

    Returns:
        np.ndarray | jax.Array: ``f32[F, F]`` when K == 1, else ``f32[F, F, K]``, symmetric (the
            diagonal holds the mean |main effect|): NumPy for rows in host memory, a ``jax.Array``
            for rows given as one.

    Raises:
        TypeError: as [`shap_interaction_values`][jaximp.shap_interaction_values].
        ValueError: as [`shap_interaction_values`][jaximp.shap_interaction_values].

    Differentiable in: as [`shap_interaction_values`][jaximp.shap_interaction_values] (``|.|`` has
    a kink at 0).

    Examples:
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
                  reduce: bool = False, progress: bool = True, per_player: bool = False) -> Any:
    """Interaction values ``[N, F, F(, K)]`` (``[F, F(, K)]`` for one row given 1-D), or with
    ``reduce`` their mean |.| ``[F, F(, K)]``; with ``per_player`` those between the players
    (``ens.players``: CatBoost's combination classes), ``[N, P, P(, K)]``."""
    ens, kernels = layout_kernels(ens, "path_dependent", None, fn_name)
    X, single = one_row(X, ens, fn_name)
    x = as_features(X, ens, fn_name)
    values = kernels.interactions(ens, x, batch_size=batch_size, devices=devices, fn_name=fn_name,
                                  reduce=reduce, progress=progress, per_player=per_player)
    return values if reduce else first_row(values, single)


def player_interaction_values(ens: Ensemble, X: Any, fn_name: str) -> Any:
    """Path-dependent SHAP interaction values between the model's players (CatBoost's
    combination classes, ``ens.players``; the columns of a model without them), before they are
    shared among columns: ``f32[N, P, P(, K)]``, as CatBoost's ``CalcShapInteraction`` computes
    them before unpacking."""
    return _interactions(ens, X, batch_size=None, devices=None, fn_name=fn_name, progress=False, per_player=True)
