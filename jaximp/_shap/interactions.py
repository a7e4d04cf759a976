"""Interaction indices of any order and Banzhaf values: ``jaximp.interaction_values``,
``jaximp.banzhaf_values`` and ``jaximp.interaction_importance``.

One engine for every index: each leaf's game is enumerated over the subsets of its path's
players up to the order (``jaximp._shap.index_games``), each index being a fixed functional of
the game's Möbius transform (``jaximp._shap.indices``); a row's values are added onto the
model's subsets, every subset of players that appear together on some path (the values of all
others are zero). Oblivious trees run as the equivalent general trees.

Shapes: the legend of :mod:`jaximp._models`, and M the model's subsets.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._leaves.predict import training_leaf_weights
from jaximp._models.cache import kept, rows_digest
from jaximp._models.ensemble import Ensemble, check_model, squeeze_outputs
from jaximp._models.groups import grouped
from jaximp._models.trees import TreeEnsemble, from_oblivious
from jaximp._rows.batching import map_rows, mean_abs_rows
from jaximp._rows.blocks import row_blocks
from jaximp._rows.frames import first_row, one_row
from jaximp._rows.inputs import as_features
from jaximp._rows.tuning import rows_tuning
from jaximp._shap import trees
from jaximp._shap.dense import pair_layout, per_player, shap_layout
from jaximp._shap.index_background import MAX_TABLE_DEPTH
from jaximp._shap.index_games import (
    index_kernel,
    index_spec,
    interventional_tables,
    local_width,
    model_subsets,
    path_tables,
    table_reads,
)
from jaximp._shap.indices import INDICES, aggregation_pairs, base_index, local_subsets
from jaximp._shap.paths import path_players
from jaximp._shap.tree_plans import ShapPlan, background_histograms, kernel_plan

_METHODS = ("path_dependent", "interventional")
_PAIRED_BLOCK = 64  # background rows per block where a leaf's tables would not fit


@dataclasses.dataclass(frozen=True)
class Interactions:
    """Interaction values of every row over the model's subsets of features.

    Attributes:
        subsets: M sorted tuples of feature indices, by size (1 to ``order``) and then
            lexicographically: every subset of features that appear together on some path of
            some tree (the values of all other subsets are zero).
        values: ``f32[N, M]`` (``f32[N, M, K]`` for K outputs) the index of each subset for each
            row; ``f32[M]`` for one row given 1-D. NumPy for rows in host memory, a
            ``jax.Array`` for rows given as one. ``jaximp.interaction_importance`` gives the
            mean absolute value over rows here, ``f32[M(, K)]``.
        baseline: ``f32[]`` (``f32[K]``) the empty coalition's value ``v({})``: the model's
            expected raw prediction under the game.
        index: the index (``"SV"``, ``"BV"``, ``"SII"``, ``"k-SII"``, ``"STII"``, ``"FSII"``,
            ``"BII"`` or ``"Moebius"``).
        order: the largest subset size.
        feature_names: the F features' names.
    """

    subsets: tuple[tuple[int, ...], ...]
    values: Any
    baseline: Any
    index: str
    order: int
    feature_names: tuple[str, ...]

    def to_dense(self) -> Any:
        """``f32[N, F, ..., F(, K)]`` (``order`` axes of F): at each index tuple, the value of
        the set of its indices, in every order (so ``[n, i, i]`` holds the value of ``{i}`` and
        ``[n, i, j]`` and ``[n, j, i]`` that of ``{i, j}``; 0 for subsets not listed). Memory
        grows as ``F**order``."""
        values = np.asarray(self.values)
        single = values.ndim == (1 if np.ndim(self.baseline) == 0 else 2)
        if single:
            values = values[None]
        f = len(self.feature_names)
        out = np.zeros((values.shape[0],) + (f,) * self.order + values.shape[2:], values.dtype)
        for m, subset in enumerate(self.subsets):
            for position in itertools.product(subset, repeat=self.order):
                if set(position) == set(subset):
                    out[(slice(None),) + position] = values[:, m]
        return out[0] if single else out

    def to_shapiq(self, i: int = 0, output: int = 0) -> Any:
        """Row ``i`` (output ``output`` for K outputs) as ``shapiq.InteractionValues``, with the
        empty set's value the baseline (shapiq must be installed)."""
        import shapiq

        values = np.asarray(self.values)
        k_outputs = np.ndim(self.baseline) > 0
        row = values if values.ndim == (2 if k_outputs else 1) else values[i]
        row = row[:, output] if k_outputs else row
        baseline = float(np.asarray(self.baseline)[output] if k_outputs else self.baseline)
        lookup = {(): 0, **{s: m + 1 for m, s in enumerate(self.subsets)}}
        return shapiq.InteractionValues(values=np.concatenate([[baseline], row.astype(np.float64)]),
                                        index=self.index, max_order=self.order, min_order=0,
                                        n_players=len(self.feature_names), interaction_lookup=lookup,
                                        baseline_value=baseline)


# --------------------------------------------------------------------------------------------
# Checks


def _check_index(index: Any, order: Any, fn_name: str) -> None:
    if not isinstance(index, str) or index not in INDICES:
        raise ValueError(f"{fn_name}: index must be one of {', '.join(map(repr, INDICES))}; got {index!r}")
    if not isinstance(order, (int, np.integer)) or isinstance(order, bool) or order < 1:
        raise ValueError(f"{fn_name}: order must be an int of at least 1; got {order!r}")
    if index in ("SV", "BV") and order != 1:
        raise ValueError(f"{fn_name}: index={index!r} is a value of single features, order 1; got order={order} "
                         f"(pass order=1, or index={'SII' if index == 'SV' else 'BII'!r} for interactions)")


def _player_columns(ens: TreeEnsemble, fn_name: str) -> np.ndarray | None:
    """``i32[P]`` the column of each player, or None when the players are the columns; a
    clear error for players of several columns (CTRs of combinations), whose games are not
    games of single columns."""
    if ens.players is None:
        return None
    if any(len(cols) != 1 for cols in ens.players):
        several = next(cols for cols in ens.players if len(cols) != 1)
        raise ValueError(f"{fn_name}: the model's splits read CTRs of combinations of categorical columns "
                         f"(columns {several}), so their games are not over single columns; interaction "
                         "indices need a model whose splits each read one column (train with "
                         "max_ctr_complexity=1)")
    return np.array([cols[0] for cols in ens.players], np.int32)


def _largest_order(ens: TreeEnsemble) -> int:
    """The most players on any path of the model: the largest useful order."""
    players = path_players(ens)
    return int(players.max(initial=0)) if players is not None else ens.depth


def _aggregated(values: Array, target: Array, source: Array, weight: Array, *, n_subsets: int) -> Array:
    """k-SII ``f32[n, M, K]`` from SII ``values f32[n, M, K]`` (``jaximp._shap.indices.aggregation_pairs``)."""
    moved = weight[:, None, None].astype(values.dtype) * jnp.moveaxis(values, 1, 0)[source]  # [nnz, n, K]
    return jnp.moveaxis(jax.ops.segment_sum(moved, target, n_subsets), 0, 1)


_aggregated_jit = jax.jit(_aggregated, static_argnames="n_subsets")


def _aggregate(values: Any, pairs: tuple[np.ndarray, ...], n_subsets: int) -> Any:
    """k-SII from SII values ``[N, M, K]``, where the values are."""
    out = _aggregated_jit(jnp.asarray(values), *(jax.device_put(a) for a in pairs), n_subsets=n_subsets)
    return np.asarray(out) if isinstance(values, np.ndarray) else out


def _k_sii_kernel(params: tuple, x: Array, *, block: int, kind: Any, step_rows: int, spec: Any,
                  features_first: bool = False) -> Array:
    """k-SII ``f32[n, M, K]`` of a step's rows: SII from :func:`index_kernel` (``params[:4]``)
    aggregated in the step by ``params[4:] = (target, source, weight)``, so that no call holds
    more than a step's SII."""
    sii = index_kernel(params[:4], x, block=block, kind=kind, step_rows=step_rows, spec=spec,
                       features_first=features_first)
    return _aggregated(sii, *params[4:], n_subsets=sii.shape[1])


def _shap_layout_kernel(params: tuple, x: Array, *, block: int, kind: Any, step_rows: int, spec: Any, f: int,
                        features_first: bool = False) -> Array:
    """shap's layout ``f32[n, F, F, K]`` of a step's SII of order 2 from :func:`index_kernel`
    (``params[:4]``) and ``params[4]`` (``jaximp._shap.dense.pair_layout``): no call holds more
    than a step's SII."""
    sii = index_kernel(params[:4], x, block=block, kind=kind, step_rows=step_rows, spec=spec,
                       features_first=features_first)
    return shap_layout(sii, params[4], f)


# --------------------------------------------------------------------------------------------
# The public functions


def general_trees(ens: Any, fn_name: str) -> TreeEnsemble:
    """The model as general trees: an oblivious model's equivalent ``TreeEnsemble``, kept with the
    model so that its plans and subsets are kept across calls too."""
    if check_model(ens, fn_name) != "oblivious":
        return ens
    return kept(ens, "general trees", lambda: from_oblivious(ens))


def _explain(ens: Any, X: Any, *, index: str, order: int, method: str, background: Any, feature_groups: Any,
             batch_size: int | None, devices: Any, fn_name: str, reduce: bool = False, dense: bool = False) -> Any:
    """The :class:`Interactions` of rows ``X`` (their mean |.| over rows with ``reduce``); with
    ``dense``, shap's layout of SII of order 2 over columns, ``f32[N, F, F(, K)]`` (``[F, F(, K)]``
    for one row given 1-D), built in each step (``jaximp._shap.dense.shap_layout``)."""
    check_model(ens, fn_name)
    _check_index(index, order, fn_name)
    trees.check_method(method, background, _METHODS, fn_name)
    names = ens.feature_names
    if feature_groups is not None:  # each group one player, named by its columns
        ens = grouped(ens, feature_groups, fn_name)
        names = tuple("+".join(names[c] for c in columns) for columns in ens.players)
    ens = general_trees(ens, fn_name)
    columns = None if feature_groups is not None else _player_columns(ens, fn_name)
    largest = _largest_order(ens)
    if order > max(largest, 1):
        raise ValueError(f"{fn_name}: order must be at most the most players (features, or feature groups) on "
                         f"any path of the model, {largest} (the largest useful order: larger subsets are on no "
                         f"path); got {order}")
    X, single = one_row(X, ens, fn_name)
    x = as_features(X, ens, fn_name)
    k = ens.n_outputs
    digest = None  # the background's key: its tables and mean are kept for the next call with it
    if method == "interventional":
        background = as_features(background, ens, fn_name, "background")
        digest = rows_digest(background)
        plan, tables, spec, subsets = interventional_plan(ens, background, x, index, order, batch_size=batch_size,
                                                           devices=devices, fn_name=fn_name, digest=digest)
    else:
        weights = training_leaf_weights(ens, x, batch_size=batch_size, devices=devices, fn_name=fn_name)
        plan = kernel_plan(ens, "path", weights, x=x, devices=devices, fn_name=fn_name,
                           width=lambda d: local_width(d, order, k))
        keep = weights is ens.leaf_weights
        subsets = kept_subsets(ens, plan, order, keep=keep)
        reads = table_reads(plan.kind, plan.arrays.parts, order, rows_tuning(devices, x, fn_name),
                            ("formula",) * len(plan.kind.layout))
        spec = index_spec(base_index(index), order, plan.kind, subsets.count, reads)
        tables = kept(ens, ("index tables", plan.kind, spec, tuple(p.leaves.shape for p in plan.arrays.parts)),
                      lambda: path_tables(plan.arrays.parts, kind=plan.kind, spec=spec), keep=keep)
    kernel, params = index_kernel, (ens, plan.arrays, subsets.ids, tables)
    pairs = aggregation_pairs(list(subsets.by_size), ens.n_players) if index == "k-SII" else None
    if pairs is not None:
        pairs = tuple(a.astype(np.float32) if a.dtype == np.float64 else a for a in pairs)
    if reduce and pairs is not None:  # aggregated in each step: no call holds more than a step's SII
        kernel, params = _k_sii_kernel, params + pairs
    width, static = subsets.count * k, {} if reduce else {"small_step_rows": 1}
    if dense:  # the step's output is F * F * K values a row, and its steps are sized so
        layout = pair_layout(_in_columns(subsets.by_size, columns))
        kernel, params, width, static = _shap_layout_kernel, params + (layout,), len(names) ** 2 * k, \
            {**static, "f": len(names)}
    run = mean_abs_rows if reduce else map_rows
    values = run(kernel, params, x, batch_size=batch_size, devices=devices, fn_name=fn_name, row_floats=width,
                 progress=False, kind=plan.kind, step_rows=plan.step_rows, spec=spec, **static)
    if dense:
        return first_row(squeeze_outputs(values, k), single)
    if not reduce and pairs is not None:  # aggregated where the values are, in one program (faster than per step)
        values = _aggregate(values, pairs, subsets.count)
    listed, order_of = _listed(subsets.by_size, columns)
    if order_of is not None:
        values = values[:, order_of] if not reduce else values[order_of]
    values = squeeze_outputs(values, k)
    if not reduce:
        values = first_row(values, single)
    baseline = kept(ens, ("baseline", digest), lambda: trees.expected(
        ens, method, background, x=x, batch_size=batch_size, devices=devices, fn_name=fn_name), keep=digest is not None)
    return Interactions(listed, values, baseline, index, order, tuple(names))


def kept_subsets(ens: TreeEnsemble, plan: ShapPlan, order: int, keep: bool) -> Any:
    """The plan's ``jaximp._shap.index_games.Subsets``, kept with the model when the plan is."""
    how = ("index subsets", plan.kind, order, tuple(p.leaves.shape for p in plan.arrays.parts))
    return kept(ens, how, lambda: model_subsets(plan, order, ens.n_players), keep=keep)


def interventional_plan(ens: TreeEnsemble, background: Any, x: Any, index: str, order: int, *,
                        batch_size: int | None, devices: Any, fn_name: str, transform: str = "",
                        margins: Any = None, digest: str | None = None) -> tuple:
    """``(plan, tables, spec, subsets)`` of the interventional game over the checked
    background rows: an "interventional" plan whose buckets of at most ``MAX_TABLE_DEPTH``
    slots read per-leaf family tables built from the background's pattern histograms
    (``jaximp._shap.index_background``), the others the background in blocks. With a
    ``transform``, every bucket pairs rows with the background, whose raw predictions
    ``margins f32[B]`` go in its blocks (the pairs' rescale factors). The tables are kept under
    the background's ``digest`` (``jaximp._models.cache.rows_digest``; None: not kept)."""
    k, b_rows = ens.n_outputs, len(background)

    def width(d):
        per_row = (k + order + 2) if d <= MAX_TABLE_DEPTH else (k + 3 * _PAIRED_BLOCK)
        return sum(len(c) for c in local_subsets(d, order)) * per_row + 6 * d

    plan = kernel_plan(ens, "interventional", ens.leaf_weights, x=x, devices=devices, fn_name=fn_name,
                       n_background=b_rows, width=width)
    reads = table_reads(plan.kind, plan.arrays.parts, order, rows_tuning(devices, x, fn_name),
                        tuple("families" if b.tables and b.depth <= MAX_TABLE_DEPTH and not transform else "paired"
                              for b in plan.kind.layout))
    if "paired" in reads:
        rows = background if isinstance(background, jax.Array) else np.asarray(background, np.float32)
        home = next(iter(rows.devices())) if isinstance(rows, jax.Array) else jax.devices()[0]
        weight = np.full(b_rows, 1.0 / b_rows, np.float32)
        blocks = tuple(_blocks(a if isinstance(a, jax.Array) else jax.device_put(a, home))  # sent explicitly
                       for a in (rows, weight) + ((margins,) if transform else ()))
        plan = dataclasses.replace(plan, arrays=dataclasses.replace(plan.arrays, background=blocks))
    tabled = any(b.tables and how != "paired" for b, how in zip(plan.kind.layout, reads))
    subsets = kept_subsets(ens, plan, order, keep=True)
    spec = index_spec(base_index(index), order, plan.kind, subsets.count, reads, transform)

    def build():
        histograms = iter(background_histograms(ens, plan, background, batch_size=batch_size, devices=devices,
                                                fn_name=fn_name) if tabled else ())
        tables = []
        for b, part, rules, how in zip(plan.kind.layout, plan.arrays.parts, spec.rules, reads):
            histogram = next(histograms) if b.tables and tabled else None
            tables.append(np.zeros((part.leaves.shape[0], 0), np.float32) if how == "paired" else
                          interventional_tables(histogram, rules=rules, order=order, d=b.depth, values=how == "values"))
        return tuple(tables)

    how = ("interventional tables", plan.kind, spec, digest, tuple(p.leaves.shape for p in plan.arrays.parts))
    tables = kept(ens, how, build, keep=tabled and digest is not None)
    return plan, tables, spec, subsets


_blocks = jax.jit(functools.partial(row_blocks, block=_PAIRED_BLOCK))


def _in_columns(by_size: tuple[np.ndarray, ...], columns: np.ndarray | None) -> tuple[tuple[int, ...], ...]:
    """The subsets of players ``by_size``, in their values' order, as tuples of columns."""
    return tuple(tuple(int(c) for c in (row if columns is None else columns[row])) for rows in by_size for row in rows)


def _listed(by_size: tuple[np.ndarray, ...], columns: np.ndarray | None) -> tuple[tuple, np.ndarray | None]:
    """The subsets as sorted tuples of columns, by size and then lexicographically, and the
    order that takes the players' subsets there (None when the players are the columns)."""
    if columns is None:
        return _in_columns(by_size, None), None
    mapped = [np.sort(columns[rows], axis=-1) for rows in by_size]
    offsets = np.cumsum([0] + [len(rows) for rows in by_size])
    orders = [np.lexsort(rows.T[::-1]) if len(rows) else np.zeros(0, np.int64) for rows in mapped]
    listed = tuple(tuple(int(i) for i in row) for rows, o in zip(mapped, orders) for row in rows[o])
    return listed, np.concatenate([start + o for start, o in zip(offsets, orders)]).astype(np.int32)


def shap_interactions(ens: Ensemble, X: Any, *, method: str, background: Any, batch_size: int | None,
                      devices: Any, fn_name: str) -> Any:
    """SHAP interaction values in shap's layout, ``f32[N, F, F(, K)]`` (``f32[F, F(, K)]`` for
    one row given 1-D), from SII of order 2 (``jaximp._shap.dense.shap_layout``, in each step):
    what ``jaximp.shap_interaction_values`` computes for the interventional game."""
    order = 2 if _largest_order(general_trees(ens, fn_name)) >= 2 else 1
    return _explain(ens, X, index="SII", order=order, method=method, background=background, feature_groups=None,
                    batch_size=batch_size, devices=devices, fn_name=fn_name, dense=True)


def interaction_values(ens: Ensemble, X: Any, *, index: str = "k-SII", order: int = 2,
                       method: str = "path_dependent", background: Any = None, feature_groups: Any = None,
                       batch_size: int | None = None, devices: Any = None) -> Interactions:
    """Interaction indices of every row, of any order: the joint effect of each subset of
    features on the raw prediction.

    Each tree's leaves are product games over their paths' features (the path-dependent game of
    ``jaximp.shap_values``: TreeSHAP's value function, Lundberg et al. 2020), every cardinal index
    a fixed linear map of a game's Möbius transform, ``I(S) = sum_{T >= S} w(|T|, |S|) m(T)``
    (Fumagalli et al., "SHAP-IQ", 2023), with the weights of shapiq's ``ExactComputer``:

    * ``"SV"`` Shapley values and ``"BV"`` Banzhaf values (order 1);
    * ``"SII"`` Shapley interaction index (Grabisch and Roubens 1999) and ``"BII"`` Banzhaf
      interaction index;
    * ``"k-SII"`` (Bordt and von Luxburg 2023): SII aggregated with Bernoulli numbers, so that
      the values of all subsets sum to ``f(x) - v({})``;
    * ``"STII"`` Shapley-Taylor (Sundararajan et al. 2020) and ``"FSII"`` Faith-Shap (Tsai et al.
      2023), both efficient;
    * ``"Moebius"``: the Möbius transform (Harsanyi dividends) itself.

    Equal to shapiq's ``ExactComputer`` on the model's game (every coalition enumerated, for
    either game), and to shapiq's ``TreeExplainer`` (TreeSHAP-IQ, Muschalik et al. 2024) on
    scikit-learn forests.

    Args:
        ens: the model.
        X: ``[N, F]`` rows, or one row given 1-D.
        index: the index (above).
        order: the largest subset size (1 for ``"SV"`` and ``"BV"``); at most the most features
            on any path of the model.
        method: ``"path_dependent"`` (the game of TreeSHAP: covers) or ``"interventional"``
            (``v(S)`` the mean prediction with the features outside ``S`` taken from each
            background row; shap's ``TreeExplainer`` returns zeros for its interactions).
        background: ``[B, F]`` rows for ``method="interventional"`` (refused by the other). They
            enter through per-leaf tables of how many of them take each subset of a path's
            splits, so the cost per explained row does not grow with B.
        feature_groups: None, or a list of lists of column names or indices that partition the
            columns: each group is one player, ``.subsets`` hold group indices and
            ``.feature_names`` the groups' names (their columns' joined by "+").
        batch_size: rows per device step; None picks one for the device.
        devices: None, an int or a list of ``jax.Device`` to shard rows over.

    Returns:
        Interactions: the values as [`jaximp.Interactions`][jaximp.Interactions], with ``.subsets``
            (M tuples of feature indices, sizes 1 to ``order``, sorted), ``.values`` ``f32[N, M]``
            (``f32[N, M, K]``), ``.baseline``, ``.to_dense()`` and ``.to_shapiq(i)``; memory linear
            in ``N M``.

    Raises:
        TypeError: ``ens`` is not a jaximp ensemble, or ``X`` is not rows.
        ValueError: an unknown index, an order below 1 or above the model's largest useful
            order, an unknown method, a background missing for ``"interventional"`` or given to
            ``"path_dependent"``, rows that do not hold the model's features, or
            ``feature_groups`` that overlap, miss a column or name an unknown one.

    Examples:
        >>> inter = jaximp.interaction_values(ens, X[:5], index="k-SII", order=2)
        >>> inter.values.shape[0], inter.subsets[0]
        (5, (0,))
        >>> total = inter.values.sum(1) + inter.baseline     # k-SII is efficient
        >>> np.allclose(total, ens.predict(X[:5]), rtol=1e-5, atol=1e-3)
        True
    """
    return _explain(ens, X, index=index, order=order, method=method, background=background,
                    feature_groups=feature_groups, batch_size=batch_size, devices=devices,
                    fn_name="interaction_values")


def interaction_importance(ens: Ensemble, X: Any, *, index: str = "k-SII", order: int = 2,
                           method: str = "path_dependent", background: Any = None, feature_groups: Any = None,
                           batch_size: int | None = None, devices: Any = None) -> Interactions:
    """The mean absolute index of every subset over the rows ``X``, summed on the device
    without holding the ``[N, M]`` values: memory is one step's values.

    Args:
        ens: the model.
        X: ``[N, F]`` rows (one row given 1-D counts as one row).
        index: the index, as for [`interaction_values`][jaximp.interaction_values].
        order: the largest subset size.
        method: ``"path_dependent"`` or ``"interventional"``.
        background: ``[B, F]`` rows for ``method="interventional"``.
        feature_groups: groups of columns as players, as for
            [`interaction_values`][jaximp.interaction_values].
        batch_size: rows per device step; None picks one for the device.
        devices: None, an int or a list of ``jax.Device`` to shard rows over.

    Returns:
        Interactions: a [`jaximp.Interactions`][jaximp.Interactions] whose ``.values`` are
            ``f32[M]`` (``f32[M, K]``), the mean of ``|values|`` over rows.

    Raises:
        TypeError: ``ens`` is not a jaximp ensemble, or ``X`` is not rows.
        ValueError: the arguments [`interaction_values`][jaximp.interaction_values] refuses.

    Examples:
        >>> mean_abs = jaximp.interaction_importance(ens, X[:50], index="SII", order=2)
        >>> exact = jaximp.interaction_values(ens, X[:50], index="SII", order=2)
        >>> np.allclose(mean_abs.values, np.abs(exact.values).mean(0), rtol=1e-5, atol=1e-6)
        True
    """
    return _explain(ens, X, index=index, order=order, method=method, background=background,
                    feature_groups=feature_groups, batch_size=batch_size, devices=devices,
                    fn_name="interaction_importance", reduce=True)


def banzhaf_values(ens: Ensemble, X: Any, *, method: str = "path_dependent", background: Any = None,
                   feature_groups: Any = None) -> Any:
    """Banzhaf values of every row: each feature's mean marginal contribution over all
    coalitions of the other features of its trees' paths, ``phi_i = sum_{S not i} (v(S + i) -
    v(S)) / 2**(m - 1)``, with the game of [`interaction_values`][jaximp.interaction_values]
    (shapiq's ``"BV"``). Not efficient: the values do not sum to ``f(x) - v({})``.

    Args:
        ens: the model.
        X: ``[N, F]`` rows, or one row given 1-D.
        method: ``"path_dependent"`` or ``"interventional"`` (as for
            [`interaction_values`][jaximp.interaction_values]).
        background: ``[B, F]`` rows for ``method="interventional"``.
        feature_groups: groups of columns as players, as for
            [`interaction_values`][jaximp.interaction_values].

    Returns:
        np.ndarray | jax.Array: ``f32[N, F]`` (``f32[N, F, K]``; ``f32[F]`` for one row given 1-D; G
            groups for F with ``feature_groups``), 0 for features on no path.

    Raises:
        TypeError: ``ens`` is not a jaximp ensemble, or ``X`` is not rows.
        ValueError: the arguments [`interaction_values`][jaximp.interaction_values] refuses.

    Examples:
        >>> bv = jaximp.banzhaf_values(ens, X[:5])
        >>> bv.shape
        (5, 10)
    """
    inter = _explain(ens, X, index="BV", order=1, method=method, background=background,
                     feature_groups=feature_groups, batch_size=None, devices=None, fn_name="banzhaf_values")
    axis = inter.values.ndim - (2 if np.ndim(inter.baseline) > 0 else 1)  # the subsets' axis
    return per_player(inter.values, tuple(s[0] for s in inter.subsets), len(inter.feature_names), axis)
