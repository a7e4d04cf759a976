"""SHAP values of oblivious trees: per-tree leaf tables, then one gather per tree and row.

Every SHAP variant of an oblivious tree depends on a row only through the leaf it reaches, so
:mod:`jaximp._shap.oblivious_tables` computes, once per model (and background), a table
``phi_t[player, leaf]`` for each tree, and a row's SHAP values are the sum over trees of
``phi_t[:, leaf_t(row)]`` scattered onto the players' features: the per-row cost is that of a
prediction, whatever the method or the size of the background.

Methods (``v(S)``: the value of a coalition S of a tree's features for a row ``x`` reaching leaf
``a``; ``phi_i = sum_{S not i} |S|! (m - |S| - 1)! / m! (v(S + i) - v(S))`` over the tree's m
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

Shapes: the legend of :mod:`jaximp._models`, and ``n`` the rows of a block.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from jax import Array

from jaximp._leaves.oblivious import map_leaves
from jaximp._leaves.predict import leaf_histogram, training_leaf_weights
from jaximp._leaves.tables import mean_prediction
from jaximp._models.cache import kept
from jaximp._models.ensemble import squeeze_outputs, to_columns
from jaximp._models.oblivious import ObliviousEnsemble
from jaximp._rows.batching import gc_paused, is_traced, map_rows, mean_abs_rows, unit_weights
from jaximp._rows.tuning import Tuning, rows_tuning
from jaximp._shap import oblivious_tables as _shap_tables

METHODS = ("path_dependent", "exact", "approximate", "interventional")
MAX_DEPTH = _shap_tables.MAX_DEPTH
_TABLE_KIND = {
    "path_dependent": "shapley_path",
    "exact": "shapley_hybrid",
    "approximate": "saabas",
    "interventional": "shapley_hybrid",
}


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ShapTables:
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


def _tables(ens: ObliviousEnsemble, dist: Array, *, kind: str, tuning: Tuning, training: bool = False) -> ShapTables:
    """The tables of ``dist``: the leaf weights as they come with ``training`` (made uniform
    where a tree's sum to 0 in this program, not in one of their own)."""
    dist = _shap_tables.effective_weights(ens, dist) if training else dist
    values, features = _shap_tables.tables(ens, dist, kind=kind, tuning=tuning)
    return ShapTables(values, features, mean_prediction(ens, dist))


# The tables' program runs once per model (its tables are kept, :func:`_build`) or per background.
# Compiled without LLVM's optimizations of its machine code it compiles in half the time (100 trees
# of depth 6: 0.94 -> 0.49 s) and runs 8-12 times slower (0.002 -> 0.015 s; 1000 trees 0.009 ->
# 0.10 s), which pays for tables built once per model and, built at every call, up to the tuning's
# ``quick_table_entries`` T 4**D; a program traced inside another (jax.jit, jax.grad) is compiled
# with it. The choice is the model's (and background's), never a global setting's: the two programs
# may round the tables' sums differently.
_PROGRAMS = {quick: jax.jit(_tables, static_argnames=("kind", "tuning", "training"), **options)
             for quick, options in ((False, {}), (True, {"compiler_options": {"xla_backend_optimization_level": 0}}))}


def _build(ens: ObliviousEnsemble, dist: Array, *, kind: str, tuning: Tuning, training: bool = False,
           x: Any = None) -> ShapTables:
    """:func:`_tables` of ``ens`` and ``dist``, those of the model's own leaf weights kept for its
    next call (``jaximp._models.cache.kept``); ``x``: the rows explained (traced rows:
    the tables' program is traced into the caller's); ``tuning``: their devices'."""
    traced = is_traced((ens, dist, x))
    own = dist is ens.leaf_weights and not traced
    quick = not traced and (own or ens.n_trees * 4 ** ens.depth <= tuning.quick_table_entries)

    def build():
        with gc_paused():  # a first call traces and lowers the tables' program here
            return _PROGRAMS[quick](ens, dist, kind=kind, tuning=tuning, training=training)

    return kept(ens, ("tables", kind, training), build, keep=own)


def training_distribution(ens: ObliviousEnsemble, x: Any = None, *, fn_name: str,
                          batch_size: int | None = None, devices: Any = None) -> Array:
    """``f32[T, L]`` the leaf weights of the path-dependent methods
    (``jaximp._leaves.predict.training_leaf_weights``), uniform over a tree's real leaves where
    they sum to 0."""
    weights = training_leaf_weights(ens, x, batch_size=batch_size, devices=devices, fn_name=fn_name)
    return _shap_tables.effective_weights(ens, weights)


def _distribution(ens: ObliviousEnsemble, method: str, background: Any, x: Any, *, batch_size: int | None,
                  devices: Any, fn_name: str, effective: bool = True) -> Array:
    """``f32[T, L]`` the leaf distribution of ``method``: the background's leaf counts
    (``interventional``, checked rows ``f32[B, E]``) or the training leaf weights (as
    :func:`training_distribution` gives them, or as the model has them unless ``effective``)."""
    if method == "interventional":
        return leaf_histogram(ens, background, unit_weights(background), batch_size=batch_size, devices=devices,
                              fn_name=fn_name)
    if not effective:
        return training_leaf_weights(ens, x, batch_size=batch_size, devices=devices, fn_name=fn_name)
    return training_distribution(ens, x, fn_name=fn_name, batch_size=batch_size, devices=devices)


def plan(ens: ObliviousEnsemble, method: str, background: Any = None, *, x: Any = None,
         batch_size: int | None = None, devices: Any = None, fn_name: str = "shap_values") -> ShapTables:
    """Per-tree SHAP tables of ``ens`` for ``method`` (see the module docstring), computed once.

    Args:
        ens: the model (depth at most :data:`MAX_DEPTH`).
        method: one of :data:`METHODS`.
        background: checked rows ``f32[B, E]`` for ``method="interventional"``, else None.
        x: the checked rows to be explained, which give the leaf weights of a model that carries
            none (see :func:`training_distribution`).
    """
    dist = _distribution(ens, method, background, x, batch_size=batch_size, devices=devices, fn_name=fn_name,
                         effective=False)  # training weights made uniform inside the tables' program
    return _build(ens, dist, kind=_TABLE_KIND[method], tuning=rows_tuning(devices, x, fn_name),
                  training=method != "interventional", x=(x, background))


def expected(ens: ObliviousEnsemble, method: str, background: Any = None, *, plan: ShapTables | None = None,
             x: Any = None, batch_size: int | None = None, devices: Any = None,
             fn_name: str = "expected_value") -> Array:
    """The expected raw prediction of ``method``, ``f32[]`` (K == 1) or ``f32[K]``: the plan's
    when it is given, else from the method's leaf distribution alone."""
    if plan is not None:
        return squeeze_outputs(plan.expected, ens.n_outputs)
    dist = _distribution(ens, method, background, x, batch_size=batch_size, devices=devices, fn_name=fn_name)
    return squeeze_outputs(mean_prediction(ens, dist), ens.n_outputs)


def _gather_block(block: int, per_row: int, tuning: Tuning) -> int:
    """Rows per gather: ``block``, halved until the gathered entries fit the tuning's
    ``gather_floats`` (a divisor of ``block``, so that every row still runs the same program)."""
    while block > 1 and block % 2 == 0 and block * per_row > tuning.gather_floats:
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


def values_block(tab: ShapTables, block: int, tuning: Tuning) -> int:
    """Rows per fused block for row kernels that gather from ``tab`` (see ``_gather_block``)."""
    t, d, k, _ = tab.values.shape
    return _gather_block(block, t * d * k, tuning)


def _values_kernel(params: tuple[ObliviousEnsemble, ShapTables], x: Array, *, block: int, tuning: Tuning,
                   per_player: bool = False, features_first: bool = False) -> Array:
    ens, tab = params
    return map_leaves(lambda leaves: values_from_leaves(ens, tab, leaves, per_player=per_player), ens, x,
                      values_block(tab, block, tuning), features_first=features_first, tuning=tuning)


def _interaction_kernel(params: tuple[ObliviousEnsemble, ShapTables], x: Array, *, block: int,
                        tuning: Tuning, per_player: bool = False, features_first: bool = False) -> Array:
    """``[n, F, F, K]`` interaction values of rows ``x`` (``[n, P, P, K]`` of the players with
    ``per_player``; rows ``[E, n]`` with ``features_first``, see ``map_leaves``)."""
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
        return out if per_player else _pairs_to_columns(ens, out)

    return map_leaves(rows_fn, ens, x, _gather_block(block, t * d * d * k, tuning), features_first=features_first,
                      tuning=tuning)


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


def values(ens: ObliviousEnsemble, tab: ShapTables, x: Any, *, batch_size: int | None, devices: Any,
           fn_name: str, reduce: bool = False, progress: bool = True, per_player: bool = False) -> Any:
    """SHAP values of checked rows ``x`` from per-tree tables: ``f32[N, F]`` (K == 1) or
    ``f32[N, F, K]``; with ``reduce`` their mean absolute value over rows, ``f32[F]`` or ``f32[F, K]``;
    with ``per_player`` those of the players (``f32[N, P(, K)]``)."""
    run = mean_abs_rows if reduce else map_rows
    static = dict(per_player=True) if per_player else {}
    out = run(_values_kernel, (ens, tab), x, batch_size=batch_size, devices=devices, fn_name=fn_name,
              row_floats=ens.n_features * ens.n_outputs, progress=progress, **static)
    return squeeze_outputs(out, ens.n_outputs)


def interactions(ens: ObliviousEnsemble, x: Any, *, batch_size: int | None, devices: Any, fn_name: str,
                 reduce: bool = False, progress: bool = True, per_player: bool = False) -> Any:
    """Interaction values of checked rows ``x``, ``f32[N, F, F(, K)]``, or with ``reduce`` their
    mean |.| ``f32[F, F(, K)]``; with ``per_player``, ``[N, P, P(, K)]`` between the players."""
    if ens.n_players ** 2 >= 2**31:
        raise ValueError(f"{fn_name}: the model's features must number under 46341 for [F, F] pairs "
                         f"indexed in int32; got {ens.n_players}")
    dist = _distribution(ens, "path_dependent", None, x, batch_size=batch_size, devices=devices, fn_name=fn_name,
                         effective=False)
    tab = _build(ens, dist, kind="interaction_path", tuning=rows_tuning(devices, x, fn_name), training=True, x=x)
    run = mean_abs_rows if reduce else map_rows
    static = dict(per_player=True) if per_player else {}
    n = ens.n_players if per_player else ens.n_features
    out = run(_interaction_kernel, (ens, tab), x, batch_size=batch_size, devices=devices, fn_name=fn_name,
              row_floats=n ** 2 * ens.n_outputs, progress=progress, **static)
    return squeeze_outputs(out, ens.n_outputs)
