"""SHAP values of :class:`TreeEnsemble` models: a path decomposition into per-leaf games.

A tree's value function is a sum over its leaves of *product games* (the decomposition of
GPUTreeShap, Mitchell et al. 2022). Leaf ``l`` holds value ``v_l`` at the end of a path whose
edges read features; the path's *players* are its distinct features (a feature read at several
edges is one player). For a row ``x``, ``o_j(x) = 1`` when ``x`` takes every edge of player
``j`` (else 0) and ``z_j`` is the product of the edges' cover ratios ``cover(child) /
cover(node)`` (0.5 at a node of zero cover, as in ``jaximp._shap.oblivious_tables``). Then

* path-dependent (Lundberg et al. 2020, Algorithm 1; CatBoost ``Regular``, shap
  ``tree_path_dependent``): ``v_l(S) = v_l prod_{j in S} o_j(x) prod_{j not in S} z_j``;
* interventional over a background ``b`` (shap ``interventional``):
  ``v_l(S) = mean_b v_l prod_{j in S} o_j(x) prod_{j not in S} o_j(b)``;

and a tree's SHAP values are the sum over its leaves of the Shapley values of these games. With
``m`` the path's players, ``f_j(t) = z_j + (o_j - z_j) t`` and the Shapley weights
``s! (m-s-1)! / m! = integral_0^1 t^s (1 - t)^(m-s-1) dt``,

    phi_j = v_l (o_j - z_j) integral_0^1 prod_{k != j} f_k(t) dt

(and ``Phi_ij = v_l (o_i - z_i)(o_j - z_j) / 2 integral prod_{k != i, j} f_k`` for interactions),
a polynomial of degree below ``m`` integrated exactly by Gauss-Legendre quadrature on
``ceil(m / 2)`` nodes: O(L D^2) per row and tree, no ``2**m`` memory, and on CPU faster than
looking up a per-leaf table of the ``2**m`` subsets (the path-dependent SHAP values use it at
every depth). Interactions of shallow paths look their Shapley values up in per-leaf tables
over the row's pattern (``4**m`` work per leaf, built once per model). The interventional
game's value depends on a background row only through its pattern at the leaf, so a per-leaf
background histogram gives a table over the patterns (shallow paths). Deeper, the game over one
background row is the same game with ``z_j = o_j(b)``; its Shapley values depend only on the
counts of slots the row takes and the background row misses (``n_a``) and conversely (``n_b``),
so the background is summed by matrix products over slots (O(L D B) per row and tree). Saabas
(``approximate``) credits each edge of the row's own path with the change of the cover-weighted
mean value.

Paths, players, row patterns and buckets of leaves by players per path: ``jaximp._shap.paths``;
the games' Shapley values per bucket, by tables or quadrature: ``jaximp._shap.games``; what a
row kernel reads, built once per model (and background), and its steps:
``jaximp._shap.tree_plans``.

Shapes: the legend of :mod:`jaximp._models`, and ``n`` the rows of a step.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._leaves.predict import predict_rows, training_leaf_weights
from jaximp._leaves.tables import mean_prediction
from jaximp._leaves.trees import leaves_of
from jaximp._models.ensemble import safe_div, squeeze_outputs, to_columns
from jaximp._models.trees import TreeEnsemble, leaf_paths, subtree_sums
from jaximp._rows.batching import default_step_rows, map_rows, mean_abs_rows
from jaximp._rows.blocks import map_feature_blocks
from jaximp._rows.tuning import Tuning
from jaximp._shap.games import (
    Part,
    count_game_step,
    interventional_lookup_phi,
    one_group,
    pair_lookup_phi,
    quadrature_path_phi,
    scatter,
)
from jaximp._shap.tree_plans import (
    Kind,
    Plan,
    ShapPlan,
    bucket_pattern,
    interventional_plan,
    kernel_plan,
    row_patterns,
    taken,
)

METHODS = ("path_dependent", "approximate", "interventional")  # "exact" is CatBoost's for oblivious trees only
SHAP_METHODS = ("path_dependent", "exact", "approximate", "interventional")  # of shap_values, whatever the model
# why a method of shap_values is not one of general trees' (METHODS): the reason told with the refusal
NOT_FOR_TREES = {
    "exact": "exact SHAP values (CatBoost's shap_calc_type='Exact') are defined for CatBoost's symmetric "
             "(oblivious) trees only, and this model's trees are not symmetric",
}


def check_method(method: Any, background: Any, methods: tuple[str, ...], fn_name: str) -> None:
    """Refuse a ``method`` not among ``methods``, and a ``background`` missing for
    ``"interventional"`` or given to another method (the checks of every SHAP function). A
    method of ``shap_values`` missing from ``methods`` is refused with the reason: one that
    general trees do not define (``methods`` is :data:`METHODS`, the methods of this model), or
    one that the function ``fn_name`` does not compute."""
    if not isinstance(method, str) or method not in methods:
        raise ValueError(f"{fn_name}: method must be one of {', '.join(map(repr, methods))}"
                         f"{_unavailable(method, methods, fn_name)}")
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


def _unavailable(method: Any, methods: tuple[str, ...], fn_name: str) -> str:
    """The end of :func:`check_method`'s refusal: ``"; got 'x'"``, with the reason when ``method``
    is a method of ``shap_values`` that ``methods`` lacks."""
    if not isinstance(method, str) or method not in SHAP_METHODS:
        return f"; got {method!r}"
    if tuple(methods) == METHODS and method in NOT_FOR_TREES:
        return f" for this model; got {method!r}: {NOT_FOR_TREES[method]}"
    return f"; got {method!r}, a method of shap_values that {fn_name} does not compute"


# --------------------------------------------------------------------------------------------
# The row kernel


def _add_chunks(fn, part: Part, total: Array) -> Array:
    """``total + sum_i fn(chunk i of part)``, the chunks of a bucket in a loop (``fn`` traced
    once: its output is shaped as ``total``)."""
    return jax.lax.scan(lambda acc, p: (acc + fn(p), None), total, part)[0]


def _block_phi(ens: TreeEnsemble, kind: Kind, plan: Plan, xt: Array, n_players: int, out: Array) -> Array:
    """``out`` plus the SHAP (interaction) values ``f32[P(, P), K, n]`` of rows ``xt f32[E, n]``:
    their patterns at every leaf, then each bucket's games chunk by chunk."""
    u, decisions = row_patterns(kind, plan, xt)
    pairs = kind.name == "pairs"
    lookup = {"pairs": pair_lookup_phi, "interventional": interventional_lookup_phi}.get(kind.name)

    def games(b):
        def chunk_phi(part):
            part = one_group(part)
            if b.tables:
                return lookup(part, bucket_pattern(u, part, b.depth), n_players)
            return quadrature_path_phi(part, taken(part, u, decisions, b.depth), n_players, pairs, b.looped)
        return chunk_phi

    deep = []
    for b, part in zip(kind.layout, plan.parts):
        if kind.name == "interventional" and not b.tables:
            deep.append((b, part))  # every background row meets every row: after the others
        else:
            out = _add_chunks(games(b), part, out)
    if deep:
        out = out + _deep_interventional(kind, plan, u, decisions, deep, n_players)
    return out


def _deep_interventional(kind: Kind, plan: Plan, u: Array, decisions: Array | None, deep: list,
                         n_players: int) -> Array:
    """``f32[P, K, n]`` interventional SHAP values of the deep buckets ``(bucket, part)`` for rows
    of patterns ``u`` over the plan's background blocks, one block at a time."""
    rows_taken = [jax.lax.map(lambda p, d=b.depth: taken(one_group(p), u, decisions, d)[0], part) for b, part in deep]

    def step(acc, block):
        rows, weight = block
        ub, db = row_patterns(kind, plan, rows.T)

        def one(args, d):
            part, mine = one_group(args[0]), args[1][None]
            return count_game_step(part.paths, mine, taken(part, ub, db, d), weight)[0]

        return tuple(a + jax.lax.map(functools.partial(one, d=b.depth), (part, t))
                     for a, (b, part), t in zip(acc, deep, rows_taken)), None

    acc, _ = jax.lax.scan(step, tuple(jnp.zeros_like(t) for t in rows_taken), plan.background)
    return sum(scatter(phi[:, :, :, None, :] * part.values[:, :, None, :, None], part.paths.feature, n_players)
               for phi, (_, part) in zip(acc, deep))


def shap_kernel(params: tuple, x: Array, *, block: int, kind: Kind, step_rows: int,
                 per_player: bool = False, features_first: bool = False) -> Array:
    """Per-row SHAP (interaction) values ``f32[n, F(, F), K]`` of ``params = (ens, plan)`` and
    rows ``x f32[n, E]`` (``[E, n]`` with ``features_first``); ``f32[n, P, K]`` per player with
    ``per_player``, for SHAP values: what LossFunctionChange removes."""
    ens, plan = params
    e = ens.n_players
    pairs = kind.name == "pairs"

    def block_fn(xt):
        shape = (e, e) if pairs else (e,)
        floats = [a for part in plan.parts for a in (part.values, part.paths.z)]
        dtype = jnp.result_type(*floats) if floats else jnp.float32  # float64 models (jax_enable_x64) stay so
        acc = _block_phi(ens, kind, plan, xt, e, jnp.zeros(shape + (ens.n_outputs, xt.shape[1]), dtype))
        out = jnp.moveaxis(acc, -1, 0)  # [n, P(, P), K]
        if per_player:
            return out
        out = to_columns(ens, out, axis=1)
        return to_columns(ens, out, axis=2) if pairs else out

    return map_feature_blocks(block_fn, x, step_rows, features_first)


# --------------------------------------------------------------------------------------------
# The public functions of the layout


def plan(ens: TreeEnsemble, method: str = "path_dependent", background: Any = None, *, x: Any = None,
         batch_size: int | None = None, devices: Any = None, fn_name: str = "shap_values") -> ShapPlan:
    """Per-leaf tables of ``ens`` for ``method``, computed once.

    ``background``: checked rows ``f32[B, E]`` for ``method="interventional"``. ``x``: the
    checked rows to be explained, whose leaf counts are the weights of a model file that carries
    none (``jaximp._leaves.predict.training_leaf_weights``); their number changes nothing.
    """
    if method == "approximate":  # the plan is the leaf weights of the Saabas means
        weights = training_leaf_weights(ens, x, batch_size=batch_size, devices=devices, fn_name=fn_name)
        return ShapPlan(Kind("saabas", ()), weights, 0)
    if method == "path_dependent":
        weights = training_leaf_weights(ens, x, batch_size=batch_size, devices=devices, fn_name=fn_name)
        return kernel_plan(ens, "path", weights, x=x, devices=devices, fn_name=fn_name)
    return interventional_plan(ens, background, x=x, batch_size=batch_size, devices=devices, fn_name=fn_name)


def _saabas_table(ens: TreeEnsemble) -> tuple[Array, Array]:
    """``(f32[T, L, D, K] change of the mean value at each edge of each leaf's path, i32[T, L, D]
    the edge's player)``."""
    nodes, _, mask = leaf_paths(ens)
    cover, total = subtree_sums(ens, ens.leaf_weights)
    mean = safe_div(total, cover[..., None], 0.0)  # [T, M, K]
    rows = jnp.arange(ens.n_trees)[:, None, None]
    node_mean = mean[rows, nodes]  # [T, L, D, K]
    child_mean = jnp.concatenate([ens.leaf_values[:, :, None], node_mean[:, :, :-1]], axis=2)
    change = jnp.where(mask[..., None], child_mean - node_mean, 0.0) * ens.scale
    return change, jnp.where(mask, ens.node_players[rows, nodes], 0)


def _saabas_kernel(ens: TreeEnsemble, x: Array, *, block: int, tuning: Tuning, features_first: bool = False) -> Array:
    """``f32[n, F, K]`` Saabas values of rows ``x f32[n, E]`` (``[E, n]`` with ``features_first``):
    each edge of a row's path credited with the change of the cover-weighted mean value it makes
    (:func:`_saabas_table`)."""
    change, features = _saabas_table(ens)

    def block_fn(xt):
        n = xt.shape[1]
        leaves = leaves_of(ens, xt)  # [T, n]
        got = jnp.take_along_axis(change, leaves[:, :, None, None], axis=1)  # [T, n, D, K]
        feat = jnp.take_along_axis(features, leaves[:, :, None], axis=1)  # [T, n, D]
        rows = jnp.broadcast_to(jnp.arange(n)[None, :, None], feat.shape)
        out = jnp.zeros((n, ens.n_players, ens.n_outputs), change.dtype)
        out = out.at[rows.reshape(-1), feat.reshape(-1)].add(got.reshape(-1, ens.n_outputs))
        return to_columns(ens, out, axis=1)

    return map_feature_blocks(block_fn, x, min(block, tuning.saabas_rows), features_first)


def expected(ens: TreeEnsemble, method: str, background: Any = None, *, plan: ShapPlan | None = None,
             x: Any = None, batch_size: int | None = None, devices: Any = None,
             fn_name: str = "expected_value") -> Array:
    """The expected raw prediction: ``f32[]`` when K == 1, else ``f32[K]``.

    The training-weighted mean (``path_dependent``, ``approximate``; for a model file without
    leaf weights, the mean over the leaf counts of the explained rows ``x``) or the mean
    prediction over the background rows ``f32[B, E]`` (``interventional``), in raw score space.
    """
    if method == "interventional":
        rows = background if isinstance(background, jax.Array) else np.asarray(background, np.float32)
        predicted = predict_rows(ens, rows, batch_size=batch_size, devices=devices, fn_name=fn_name)
        if isinstance(predicted, jax.core.Tracer):  # under jax.grad, jit or vmap: stays in JAX
            return jnp.mean(predicted, axis=0)
        if isinstance(predicted, jax.Array):  # rows on a device: the mean stays there
            return _device_mean(predicted)
        mean = np.asarray(predicted, np.float64).mean(0)
        return squeeze_outputs(jnp.asarray(np.atleast_1d(mean), jnp.float32), ens.n_outputs)
    weights = training_leaf_weights(ens, x, batch_size=batch_size, devices=devices, fn_name=fn_name)
    return squeeze_outputs(mean_prediction(ens, weights), ens.n_outputs)


@jax.jit
def _device_mean(predicted: Array) -> Array:
    """The mean over rows of predictions on a device (float32), where they are."""
    return jnp.mean(predicted, axis=0, dtype=jnp.float32)


def _row_kernel(ens: TreeEnsemble, shap_plan: ShapPlan) -> tuple[Any, Any, dict]:
    """``(kernel, params, static)`` computing a plan's per-row values ``[n, F(, F), K]``."""
    if shap_plan.kind.name == "saabas":
        return _saabas_kernel, dataclasses.replace(ens, leaf_weights=shap_plan.arrays), {}
    return shap_kernel, (ens, shap_plan.arrays), dict(kind=shap_plan.kind, step_rows=shap_plan.step_rows)


def values(ens: TreeEnsemble, shap_plan: ShapPlan, x: Any, *, batch_size: int | None = None,
           devices: Any = None, reduce: bool = False, fn_name: str = "shap_values",
           progress: bool = True, per_player: bool = False) -> Any:
    """SHAP (interaction) values ``f32[N, F(, F)]`` (K == 1) or ``f32[N, F(, F), K]`` of checked
    rows ``x`` from a :func:`plan`, so that explaining more rows costs only the lookups.

    With ``reduce``, the mean over rows of the values' absolute value, ``f32[F(, F)]`` (K == 1)
    or ``f32[F(, F), K]``, summed step by step (``jaximp._rows.batching.mean_abs_rows``). With
    ``per_player``, the values of the players (``ens.players``), not yet shared among columns."""
    kernel, params, static = _row_kernel(ens, shap_plan)
    if per_player:
        static = dict(static, per_player=True)
    pairs = shap_plan.kind.name == "pairs"
    n = ens.n_players if per_player else ens.n_features
    width = n * ens.n_outputs * (n if pairs else 1)
    run = mean_abs_rows if reduce else map_rows
    out = run(kernel, params, x, batch_size=batch_size, devices=devices, fn_name=fn_name,
              row_floats=width, progress=progress, **static)
    return squeeze_outputs(out, ens.n_outputs)


def interactions(ens: TreeEnsemble, x: Any, *, batch_size: int | None = None, devices: Any = None,
                 reduce: bool = False, fn_name: str = "shap_interaction_values", progress: bool = True,
                 per_player: bool = False) -> Any:
    """Path-dependent SHAP interaction values of checked rows ``x: f32[N, E]``.

    The kernel's rows at once (its plan's ``step_rows``) are at most a default step's, whose output
    is bounded (``jaximp._rows.batching.resolve_batch_size``): a wide model's steps are then neither
    padded to more rows nor held whole in larger blocks. They are the model's and the platform's,
    whatever the call's N and ``batch_size``, so that a row's bits never depend on them.

    Returns:
        ``f32[N, F, F]`` when K == 1, else ``f32[N, F, F, K]``, symmetric; rows sum to the SHAP
        values (Lundberg et al. 2020, eq. 11-12). With ``reduce``, their mean absolute value over
        rows, ``f32[F, F(, K)]``. With ``per_player``, ``[N, P, P(, K)]`` between the players.
    """
    weights = training_leaf_weights(ens, x, batch_size=batch_size, devices=devices, fn_name=fn_name)
    shap_plan = kernel_plan(ens, "pairs", weights, x=x, devices=devices, fn_name=fn_name)
    n = ens.n_players if per_player else ens.n_features
    rows = default_step_rows(devices, x, fn_name, n * n * ens.n_outputs)  # the width values() steps by
    shap_plan = dataclasses.replace(shap_plan, step_rows=min(shap_plan.step_rows, rows))
    return values(ens, shap_plan, x, batch_size=batch_size, devices=devices, reduce=reduce, fn_name=fn_name,
                  progress=progress, per_player=per_player)
