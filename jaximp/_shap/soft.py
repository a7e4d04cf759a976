"""Soft trees: every split relaxed to a sigmoid, so that predictions and SHAP values are smooth
functions of the rows, the borders and the temperature.

A split "right when ``x > border``" becomes "right with probability ``p = sigmoid((x - border) /
temperature)``" (the soft decision trees of Irsoy, Yildiz and Alpaydin 2012, "Soft decision
trees", ICPR). A row then reaches every leaf of a tree with the product of its path's edge
probabilities (``p`` on a right edge, ``1 - p`` on a left one): for an oblivious tree, the
product over its depths. The soft prediction is ``scale * sum_t sum_l P_t(l | x) v_t[l] + bias``.
As the temperature goes to 0, ``P_t(. | x)`` goes to the leaf the row reaches and the soft
prediction to ``predict``, except for a value exactly on a border (probability 1/2 there).

A missing value (NaN) takes the split's NaN direction with probability 1, as the hard model
does: right where the node sends NaN right (CatBoost ``nan_mode="Max"``, a library's default
direction), else left (``"Min"``; ``"AsIs"`` compares false, so left). A border of ``+inf``
(padding) is never taken right.

Soft SHAP values are the path-dependent SHAP values (Lundberg et al. 2020, Algorithm 1) of the
soft model: a feature in the coalition S routes the row with its soft probabilities, the others
by the nodes' cover ratios. Leaf ``l``'s game is then the product game of ``jaximp._shap.trees``,
``v_l(S) = v_l prod_{j in S} o_j prod_{j not in S} z_j``, with ``o_j`` in [0, 1] the product of
the soft probabilities of player j's edges on the path (1 or 0 in the hard model) and ``z_j`` the
product of their cover ratios, whose Shapley value is

    phi_j = v_l (o_j - z_j) integral_0^1 prod_{k != j} (z_k + (o_k - z_k) t) dt,

a polynomial of degree below D integrated exactly by Gauss-Legendre quadrature. They add up to
the soft prediction minus the path-dependent ``expected_value`` and go to the hard
path-dependent SHAP values as the temperature goes to 0.

Models with categorical features split on one-hot values and CTRs, which have no border to
relax: the soft functions refuse them.

Shapes: the legend of :mod:`jaximp._models`, and in words ``chunk`` (the trees of a chunk of
trees), ``n`` (the rows of a block) and ``n_points`` (the nodes of the quadrature).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._models.ensemble import Ensemble, check_model, squeeze_outputs
from jaximp._models.trees import TreeEnsemble, from_oblivious, leaf_paths, parents
from jaximp._rows.batching import map_rows
from jaximp._rows.blocks import map_blocks, row_blocks
from jaximp._rows.inputs import as_features
from jaximp._rows.tuning import Tuning, rows_tuning
from jaximp._shap.games import quadrature
from jaximp._shap.paths import tree_paths

# Soft trees are general trees: each layout as general trees, the one dispatch by layout here
_AS_TREES = {"oblivious": from_oblivious, "trees": lambda trees: trees}


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SoftTrees:
    """Per-tree arrays of the soft kernels (a pytree; ``T`` trees, or chunks of them).

    Attributes:
        node_features: ``i32[T, M]`` each node's feature.
        node_borders: ``f[T, M]`` each node's border.
        node_nan_right: ``bool[T, M]`` NaN goes right.
        node_temperatures: ``f[T, M]`` each node's temperature (its feature's).
        nodes: ``i32[T, L, D]`` the internal node of each edge of each leaf's path.
        right: ``bool[T, L, D]`` the edge goes right.
        mask: ``bool[T, L, D]`` the entry is a real edge.
        real: ``bool[T, L]`` the leaf is a real leaf (not padding).
        values: ``f[T, L, K]`` scaled leaf values ``scale * leaf_values``.
        slot, player, feature, z: for SHAP (``jaximp._shap.paths.Paths``, root first): each edge's
            player slot ``i32[T, L, D]``, whether a slot is a player, its feature, its cover ratio
            product (``[T, L, D]``); None for predictions.
    """

    node_features: Array
    node_borders: Array
    node_nan_right: Array
    node_temperatures: Array
    nodes: Array
    right: Array
    mask: Array
    real: Array
    values: Array
    slot: Array | None = None
    player: Array | None = None
    feature: Array | None = None
    z: Array | None = None


def _check(ens: Any, fn_name: str) -> None:
    """A ``TypeError`` unless ``ens`` is an ensemble; a ``ValueError`` for categorical models."""
    check_model(ens, fn_name)
    if ens.featurizer is not None:
        raise ValueError(f"{fn_name}: ens must have numeric features only; a model with categorical "
                         "features splits on one-hot values and CTRs, which have no border to relax")


def _temperatures(temperature: Any, ens: Any, fn_name: str) -> Array:
    """``f[F]`` one temperature per feature, from a scalar or ``[F]``; positive and finite."""
    traced = isinstance(temperature, jax.core.Tracer)  # its values cannot be checked
    t = temperature if traced else np.asarray(temperature)
    if t.ndim > 1 or (t.ndim == 1 and t.shape[0] != ens.n_features) or not np.issubdtype(t.dtype, np.number):
        raise ValueError(f"{fn_name}: temperature must be a positive number or an array of {ens.n_features} "
                         f"(one per feature); got shape {t.shape}, dtype {t.dtype}")
    if not traced and not np.all(np.isfinite(t) & (t > 0)):
        raise ValueError(f"{fn_name}: temperature must be positive and finite; got {temperature!r}")
    if traced:
        return jnp.broadcast_to(t.astype(jnp.result_type(float, t)), (ens.n_features,))
    return np.broadcast_to(t.astype(jnp.result_type(float, t)), (ens.n_features,))  # no program to trace


def _rows(X: Any, ens: Any, fn_name: str) -> Any:
    """Checked rows ``[N, F]``: float JAX arrays (traced ones included) keep their dtype, so
    that gradients in the rows can be taken in float64."""
    x = as_features(X, ens, fn_name)
    if isinstance(X, jax.Array) and jnp.issubdtype(X.dtype, jnp.floating):
        return X
    return x


def _real_leaves(trees: TreeEnsemble) -> Array:
    """``bool[T, L]``: a leaf below an internal node, or the root of a single-leaf tree."""
    _, _, leaf_parent, _ = parents(trees)
    root_leaf = jnp.arange(trees.n_leaves)[None, :] == ~trees.roots[:, None]
    return (leaf_parent >= 0) | root_leaf


def soft_trees(trees: TreeEnsemble, temperatures: Array, *, shap: bool = False) -> SoftTrees:
    """The :class:`SoftTrees` of ``trees`` with per-feature ``temperatures f[F]``; with ``shap``
    the paths root first and their covers from the training leaf weights."""
    if shap:
        paths = tree_paths(trees, trees.leaf_weights)
        nodes, right, mask = paths.nodes, paths.right, paths.mask
        extra = dict(slot=paths.slot, player=paths.player, feature=paths.feature, z=paths.z)
    else:
        nodes, right, mask = leaf_paths(trees)
        extra = {}
    return SoftTrees(trees.node_features, trees.node_borders, trees.node_nan_right,
                     temperatures[trees.node_features], nodes, right, mask, _real_leaves(trees),
                     trees.scale * trees.leaf_values, **extra)


@functools.partial(jax.jit, static_argnames=("tuning", "shap"))
def _prepare(ens: Ensemble, temperatures: Array, *, tuning: Tuning, shap: bool = False) -> tuple[SoftTrees, Array]:
    """``(chunked soft trees, bias f[K])`` of ``ens`` (an oblivious tree unrolled to general
    trees, its borders kept differentiable), in one compiled program."""
    trees = _AS_TREES[ens.layout](ens)
    width = 3 * trees.depth + (4 * (-(-trees.depth // 2)) if shap else 0) + 1  # floats per leaf and row
    return _chunked(soft_trees(trees, temperatures, shap=shap), width, tuning), trees.bias


def _chunked(soft: SoftTrees, width: int, tuning: Tuning) -> SoftTrees:
    """``soft`` cut in chunks of trees ``[n_chunks, chunk, ...]`` (zero trees pad the last one),
    so that a chunk's ``[chunk, L, width, n]`` intermediates of ``tuning.soft_rows`` rows stay
    within ``tuning.soft_chunk_floats``."""
    n_trees, n_leaves = soft.real.shape
    chunk = int(max(1, min(n_trees, tuning.soft_chunk_floats // (n_leaves * max(width, 1) * tuning.soft_rows))))
    return jax.tree_util.tree_map(lambda a: row_blocks(a, chunk), soft)


def _right_probabilities(soft: SoftTrees, xt: Array) -> Array:
    """``f[chunk, M, n]`` the probability that each row ``xt f[F, n]`` goes right at each node."""
    value = xt[soft.node_features]  # [chunk, M, n]
    border = soft.node_borders[..., None]
    finite = jnp.isfinite(border)
    missing = jnp.isnan(value)
    shifted = jnp.where(missing, 0.0, value) - jnp.where(finite, border, 0.0)
    p = jax.nn.sigmoid(shifted / soft.node_temperatures[..., None])
    p = jnp.where(finite, p, jnp.where(border < 0, 1.0, 0.0))  # +inf: never right; -inf: always
    return jnp.where(missing, soft.node_nan_right[..., None].astype(p.dtype), p)


def _edge_probabilities(soft: SoftTrees, xt: Array) -> Array:
    """``f[chunk, L, D, n]`` the probability of each edge of each leaf's path (1 past the path)."""
    p = _right_probabilities(soft, xt)
    c, l, d = soft.nodes.shape
    at = jnp.take_along_axis(p, soft.nodes.reshape(c, l * d)[..., None], axis=1).reshape(c, l, d, -1)
    return jnp.where(soft.mask[..., None], jnp.where(soft.right[..., None], at, 1.0 - at), 1.0)


def _leaf_probabilities(soft: SoftTrees, xt: Array) -> Array:
    """``f[chunk, L, n]`` the probability of each leaf (0 for padded leaves)."""
    return jnp.where(soft.real[..., None], jnp.prod(_edge_probabilities(soft, xt), axis=2), 0.0)


def _leave_one_out(f: Array) -> Array:
    """``prod_{k != j} f[:, :, k]`` at every ``j`` of axis 2 (prefix times suffix products)."""
    d = f.shape[2]
    before, after = [jnp.ones_like(f[:, :, 0])], [jnp.ones_like(f[:, :, 0])]
    for k in range(d - 1):
        before.append(before[-1] * f[:, :, k])
        after.append(after[-1] * f[:, :, d - 1 - k])
    return jnp.stack(before, axis=2) * jnp.stack(after[::-1], axis=2)


def _shap_block(soft: SoftTrees, xt: Array, n_features: int) -> Array:
    """``f[F, K, n]`` soft path-dependent SHAP values of a chunk of trees (module docstring)."""
    q = _edge_probabilities(soft, xt)  # [chunk, L, entries, n]
    c, l, d, _ = q.shape
    owner = (soft.slot[..., :, None] == jnp.arange(d)) & soft.mask[..., :, None]  # [chunk, L, entries, slots]
    o = jnp.ones((c, l, d) + q.shape[3:], q.dtype)
    for e in range(d):  # o_s: the product of the probabilities of slot s's edges
        o = o * jnp.where(owner[:, :, e, :, None], q[:, :, e, None, :], 1.0)
    player = soft.player[..., None, None]
    z = soft.z[..., None, None]
    slope = jnp.where(player, o[:, :, :, None] - z, 0.0)  # [chunk, L, slots, 1, n]: o_j - z_j
    t, w = (jnp.asarray(a, q.dtype) for a in quadrature(d))
    f = jnp.where(player, z + slope * t[:, None], 1.0)  # [chunk, L, slots, n_points, n]
    phi = slope[:, :, :, 0] * jnp.einsum("clsqb,q->clsb", _leave_one_out(f), w)  # [chunk, L, slots, n]
    out = phi[:, :, :, None, :] * soft.values[:, :, None, :, None]  # [chunk, L, slots, K, n]
    return jax.ops.segment_sum(out.reshape((c * l * d,) + out.shape[3:]), soft.feature.reshape(-1), n_features)


def _scan_trees(soft: SoftTrees, xb: Array, step: Any, init: Array) -> Any:
    """``sum`` over chunks of ``step(chunk, xt)`` (``init``: its zero), rows ``xb [n, F]``."""
    xt = xb.T
    total, _ = jax.lax.scan(lambda acc, chunk: (acc + step(chunk, xt), None), init, soft)
    return total


def _predict_kernel(params: tuple[SoftTrees, Array], x: Array, *, block: int, tuning: Tuning) -> Array:
    """``f[n, K]`` soft raw predictions of ``params = (soft trees, bias f[K])``."""
    soft, bias = params
    dtype = jnp.result_type(soft.values, soft.node_borders, bias, x)

    def rows_fn(xb):
        step = lambda chunk, xt: jnp.einsum("clb,clk->bk", _leaf_probabilities(chunk, xt), chunk.values)  # noqa: E731
        return _scan_trees(soft, xb, step, jnp.broadcast_to(bias, (xb.shape[0],) + bias.shape).astype(dtype))

    return map_blocks(rows_fn, x, min(block, tuning.soft_rows))


def _leaf_kernel(soft: SoftTrees, x: Array, *, block: int, tuning: Tuning) -> Array:
    """``f[n, T, L]`` leaf probabilities, trees padded to whole chunks."""
    def rows_fn(xb):
        xt = xb.T
        probs = jax.lax.map(lambda chunk: _leaf_probabilities(chunk, xt), soft)  # [n_chunks, chunk, L, n]
        return jnp.moveaxis(probs.reshape((-1,) + probs.shape[2:]), -1, 0)

    return map_blocks(rows_fn, x, min(block, tuning.soft_rows))


def _shap_kernel(soft: SoftTrees, x: Array, *, block: int, tuning: Tuning, n_features: int) -> Array:
    """``f[n, F, K]`` soft path-dependent SHAP values."""
    dtype = jnp.result_type(soft.values, soft.node_borders, soft.z, x)

    def rows_fn(xb):
        init = jnp.zeros((n_features, soft.values.shape[-1], xb.shape[0]), dtype)
        step = lambda chunk, xt: _shap_block(chunk, xt, n_features)  # noqa: E731
        return jnp.moveaxis(_scan_trees(soft, xb, step, init), -1, 0)

    return map_blocks(rows_fn, x, min(block, tuning.soft_rows))


def soft_predict(ens: Ensemble, X: Any, temperature: Any, *,
                 batch_size: int | None = None, devices: Any = None, progress: bool = True) -> Any:
    """Raw predictions of a smooth version of the model: every split relaxed to a sigmoid.

    A split "right when ``x > border``" goes right with probability ``p = sigmoid((x - border) /
    temperature)``, and the prediction is ``scale * sum_t sum_l P_t(l | x) leaf_values[t, l] +
    bias`` with ``P_t(l | x)`` the product of the probabilities along the leaf's path
    ([`soft_leaf_probabilities`][jaximp.soft_leaf_probabilities]; the soft decision trees of Irsoy,
    Yildiz and Alpaydin 2012, "Soft decision trees"). Equal to [`predict`][jaximp.predict] as
    ``temperature -> 0``, except for values exactly on a border (1/2 each way); a missing value
    (NaN) follows the split's NaN direction, as in the model.

    Args:
        ens: the model (numeric features only: CatBoost's one-hot and CTR splits have no border
            to relax).
        X: ``[N, F]`` rows (NumPy/JAX array, pandas/polars DataFrame, numeric
            ``catboost.Pool``).
        temperature: a positive float, or ``f[F]`` one per feature, in the units of the feature.
        batch_size: rows per device step; None picks one for the device.
        devices: None, an int or a list of ``jax.Device`` to shard rows over.
        progress: a progress bar (tqdm) when the call lasts over 2 seconds; False silences it.

    Returns:
        np.ndarray | jax.Array: ``f32[N]`` when K == 1, else ``f32[N, K]``: NumPy for rows in host
            memory, a ``jax.Array`` for rows given as one (float64 rows stay float64 under
            ``jax_enable_x64``).

    Raises:
        TypeError: ``ens`` is not a jaximp ensemble, or ``X`` is not rows.
        ValueError: a model with categorical features, rows without the model's features, or a
            temperature that is not positive and finite (or not one per feature).

    Differentiable in: ``X``, ``temperature``, ``ens.leaf_values``, the borders
    (``split_borders`` of an ``ObliviousEnsemble``, ``node_borders`` of a ``TreeEnsemble``),
    ``scale`` and ``bias``; ``jax.jit`` and ``jax.vmap`` apply.

    Examples:
        >>> soft = jaximp.soft_predict(ens, X, 1e-6)          # a cold model: the hard predictions
        >>> np.allclose(soft, jaximp.predict(ens, X), rtol=1e-5, atol=1e-3)
        True
        >>> import jax
        >>> rows = jax.numpy.asarray(X.to_numpy(np.float32))
        >>> jax.grad(lambda x: jaximp.soft_predict(ens, x, 0.01).sum())(rows).shape  # d/dX
        (442, 10)
    """
    fn_name = "soft_predict"
    _check(ens, fn_name)
    temperatures, x = _temperatures(temperature, ens, fn_name), _rows(X, ens, fn_name)
    params = _prepare(ens, temperatures, tuning=rows_tuning(devices, x, fn_name))
    out = map_rows(_predict_kernel, params, x, batch_size=batch_size,
                   devices=devices, fn_name=fn_name, row_floats=ens.n_outputs, progress=progress)
    return squeeze_outputs(out, ens.n_outputs)


def soft_leaf_probabilities(ens: Ensemble, X: Any, temperature: Any, *,
                            batch_size: int | None = None, devices: Any = None, progress: bool = True) -> Any:
    """The probability that each row reaches each leaf of each tree, in the smooth model of
    [`soft_predict`][jaximp.soft_predict].

    ``P_t(l | x) = prod over the splits on leaf l's path of p (right) or 1 - p (left)``, with ``p =
    sigmoid((x[feature] - border) / temperature)`` (1 or 0 for NaN, by the split's NaN direction).
    Each tree's probabilities sum to 1; as ``temperature -> 0`` they go to the one-hot of the leaf
    the row reaches ([`leaf_indices`][jaximp.leaf_indices]). The leaf axis is that of
    ``ens.leaf_values`` (CatBoost's leaf index for CatBoost models), so ``soft_predict == scale *
    einsum("ntl,tlk->nk", P, leaf_values) + bias``.

    Args:
        ens: the model (numeric features only).
        X: ``[N, F]`` rows (NumPy/JAX array, pandas/polars DataFrame, numeric
            ``catboost.Pool``).
        temperature: a positive float, or ``f[F]`` one per feature, in the units of the feature.
        batch_size: rows per device step; None picks one for the device.
        devices: None, an int or a list of ``jax.Device`` to shard rows over.
        progress: a progress bar (tqdm) when the call lasts over 2 seconds; False silences it.

    Returns:
        np.ndarray | jax.Array: ``f32[N, T, L]``, 0 on the leaves a smaller tree does not have:
            NumPy for rows in host memory, a ``jax.Array`` for rows given as one.

    Raises:
        TypeError: as [`soft_predict`][jaximp.soft_predict].
        ValueError: as [`soft_predict`][jaximp.soft_predict].

    Differentiable in: ``X``, ``temperature`` and the borders (see
    [`soft_predict`][jaximp.soft_predict]).

    Examples:
        >>> P = jaximp.soft_leaf_probabilities(ens, X[:5], 0.01)
        >>> P.shape                                                  # [N, T, L]
        (5, 20, 16)
        >>> np.allclose(P.sum(-1), 1.0, atol=1e-5)                   # one leaf per tree, softly
        True
    """
    fn_name = "soft_leaf_probabilities"
    _check(ens, fn_name)
    temperatures, x = _temperatures(temperature, ens, fn_name), _rows(X, ens, fn_name)
    soft, _ = _prepare(ens, temperatures, tuning=rows_tuning(devices, x, fn_name))
    out = map_rows(_leaf_kernel, soft, x, batch_size=batch_size, devices=devices,
                   fn_name=fn_name, row_floats=ens.n_trees * ens.n_leaves, progress=progress)
    return out[:, : ens.n_trees]


def soft_shap_values(ens: Ensemble, X: Any, temperature: Any, *,
                     batch_size: int | None = None, devices: Any = None, progress: bool = True) -> Any:
    """SHAP values of the smooth model of [`soft_predict`][jaximp.soft_predict]: explanations with
    gradients in ``X``.

    The path-dependent value function of [`shap_values`][jaximp.shap_values] (Lundberg et al. 2020,
    Algorithm 1) applied to the soft trees: a feature of the coalition routes the row with its soft
    probabilities, the others by the splits' training covers. Computed exactly, at ``O(T L D^2)``
    per row. The values add up to ``soft_predict(ens, X, temperature) - expected_value(ens)`` and
    go to ``shap_values(ens, X)`` as ``temperature -> 0`` (rows off the borders).

    Args:
        ens: the model (numeric features only, with leaf weights).
        X: ``[N, F]`` rows (NumPy/JAX array, pandas/polars DataFrame, numeric
            ``catboost.Pool``).
        temperature: a positive float, or ``f[F]`` one per feature, in the units of the feature.
        batch_size: rows per device step; None picks one for the device.
        devices: None, an int or a list of ``jax.Device`` to shard rows over.
        progress: a progress bar (tqdm) when the call lasts over 2 seconds; False silences it.

    Returns:
        np.ndarray | jax.Array: ``f32[N, F]`` when K == 1, else ``f32[N, F, K]``: NumPy for rows in
            host memory, a ``jax.Array`` for rows given as one.

    Raises:
        TypeError: as [`soft_predict`][jaximp.soft_predict].
        ValueError: as [`soft_predict`][jaximp.soft_predict], or a model file without leaf weights.

    Differentiable in: ``X``, ``temperature``, the borders, ``ens.leaf_values``,
    ``ens.leaf_weights`` and ``scale``.

    Examples:
        >>> phi = jaximp.soft_shap_values(ens, X[:5], 0.01)
        >>> soft = jaximp.soft_predict(ens, X[:5], 0.01)
        >>> np.allclose(phi.sum(1) + jaximp.expected_value(ens), soft, rtol=1e-5, atol=1e-3)
        True
        >>> np.allclose(jaximp.soft_shap_values(ens, X[:5], 1e-6), jaximp.shap_values(ens, X[:5]),
        ...             rtol=1e-5, atol=1e-3)                     # cold: the hard SHAP values
        True
    """
    fn_name = "soft_shap_values"
    _check(ens, fn_name)
    if not ens.leaf_weights_known:
        raise ValueError(f"{fn_name}: the model must carry its leaf weights (the covers of the "
                         "path-dependent value function); this model file has none")
    temperatures, x = _temperatures(temperature, ens, fn_name), _rows(X, ens, fn_name)
    soft, _ = _prepare(ens, temperatures, tuning=rows_tuning(devices, x, fn_name), shap=True)
    out = map_rows(_shap_kernel, soft, x, batch_size=batch_size, devices=devices,
                   fn_name=fn_name, row_floats=ens.n_features * ens.n_outputs, progress=progress,
                   n_features=ens.n_features)
    return squeeze_outputs(out, ens.n_outputs)
