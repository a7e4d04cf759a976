"""CatBoost's LossFunctionChange: how much the model's loss grows without each feature.

CatBoost (``get_feature_importance(type="LossFunctionChange")``, catboost/libs/fstr/
loss_change_fstr.cpp) approximates "the model without feature f" on each row by the raw
prediction minus that row's SHAP value of f (path-dependent TreeSHAP, its ``"Regular"`` SHAP),
and reports the change of the model's own metric over the data set:

    LFC_f = M(y, raw - phi_f, w) - M(y, raw, w)

with ``M`` the metric of the training loss (``RMSE``, ``Logloss``, ``MultiClass``, ...; for
metrics where greater is better the sign is flipped, none of the supported losses is one).
Features the model never splits on get 0.

With categorical features, CatBoost removes each combination class's SHAP value (a player:
the set of categorical columns a CTR reads, see ``ObliviousEnsemble.players``) and shares the
class's loss change among the columns of the class's first feature in the model's order (its
float or categorical column, or every element of a CTR's combination, binarized float features
included). When a class's features read different columns and the model has more than 30
features and CTRs, CatBoost's choice of that first feature depends on its unstable sort; jaximp
takes the model's order.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._importances.scoring import ModelLoss, model_loss
from jaximp._leaves.oblivious import map_leaves
from jaximp._leaves.tables import leaf_prediction
from jaximp._leaves.trees import predict_kernel, prepare
from jaximp._models.ensemble import Ensemble, check_model, to_columns
from jaximp._rows.batching import is_traced, on_device, weighted_sums
from jaximp._rows.inputs import as_features, as_weights
from jaximp._rows.targets import as_targets
from jaximp._rows.tuning import Tuning
from jaximp._shap import oblivious, trees
from jaximp._shap.oblivious import values_block, values_from_leaves
from jaximp._shap.values import general


def _oblivious_kernel(params, rows, *, block: int, loss: ModelLoss, tuning: Tuning) -> tuple[Array, Array, Array]:
    """Per row: a one ``f32[n]``, the loss ``f32[n]`` and its change without each player ``f32[n, P]``.

    Each row's leaves are found once and give both its raw prediction and its SHAP values.

    Args:
        params (tuple): ``(ens, tables)``, the model and its path-dependent SHAP tables.
        rows (tuple): ``(x f32[n, F], y)``.
        block: rows per fused block.
        loss: the model's loss (static).
        tuning: the devices' tuning (``jaximp._rows.tuning``).
    """
    ens, tables = params

    x, y = rows

    def rows_fn(leaves, y):
        raw = leaf_prediction(ens, leaves)  # [n, K]
        phi = values_from_leaves(ens, tables, leaves, per_player=True)  # [n, P, K]
        change = jax.vmap(lambda delta: loss.change(y, raw, delta), in_axes=1, out_axes=1)(phi)
        return _terms(loss.row_loss(y, raw), change)

    return map_leaves(rows_fn, ens, x, values_block(tables, block, tuning), y, tuning=tuning)


def _terms(row_loss: Array, change: Array) -> tuple[Array, Array, Array]:
    """Per row: a one (its weight, once summed), its loss and its loss changes."""
    return jnp.ones_like(row_loss), row_loss, change


def _trees_kernel(params: tuple, rows: tuple[Array, Array], *, block: int, loss: ModelLoss, kind: Any,
                  step_rows: int, tuning: Tuning) -> tuple[Array, Array, Array]:
    """Per row: a one, the loss ``f32[n]`` and its change without each player ``f32[n, P]``, for general
    trees: the prediction by the trees' descent, the SHAP values from the per-leaf tables of a
    ``jaximp._shap.trees.ShapPlan`` (its ``kind`` and ``step_rows`` static); ``params`` is
    ``(jaximp._leaves.trees.prepare(ens), the plan's arrays)``."""
    descent, arrays = params
    ens = descent[0]
    x, y = rows
    raw = predict_kernel(descent, x, block=block, tuning=tuning)  # [n, K]
    phi = trees.shap_kernel((ens, arrays), x, block=block, kind=kind, step_rows=step_rows, per_player=True)
    change = jax.vmap(lambda delta: loss.change(y, raw, delta), in_axes=1, out_axes=1)(phi)
    return _terms(loss.row_loss(y, raw), change)


def _kernel(ens: Ensemble, x: Any, *, batch_size: int | None, devices: Any,
            fn_name: str) -> tuple[Callable, Any, dict]:
    """``(kernel, params, static)`` of the per-row loss changes of ``ens``'s layout, with its
    path-dependent SHAP tables built once (leaf weights counted on ``x`` for a model file that
    carries none, as CatBoost's ``CollectLeavesStatistics``)."""
    if ens.layout == "oblivious":
        tables = oblivious.plan(ens, "path_dependent", x=x, batch_size=batch_size, devices=devices, fn_name=fn_name)
        return _oblivious_kernel, (ens, tables), {}
    plan = trees.plan(ens, "path_dependent", x=x, batch_size=batch_size, devices=devices, fn_name=fn_name)
    return _trees_kernel, (prepare(ens), plan.arrays), dict(kind=plan.kind, step_rows=plan.step_rows)


def loss_function_change(
    ens: Ensemble,
    X: Any,
    y: Any,
    *,
    sample_weight: Any = None,
    batch_size: int | None = None,
    devices: Any = None,
    progress: bool = True,
) -> np.ndarray | Array:
    """CatBoost's LossFunctionChange importance of every feature, for the model's own loss.

    ``LFC_f = M(y, raw - phi_f) - M(y, raw)``: the increase of the training loss's metric ``M``
    (weighted by ``sample_weight``) when each row's prediction loses its path-dependent SHAP
    value of feature f (CatBoost's approximation of the model trained without f). Reproduces
    ``model.get_feature_importance(Pool(X, y, weight=sample_weight), type="LossFunctionChange")``
    for ``RMSE``, ``MAE``, ``Logloss``, ``CrossEntropy`` and ``MultiClass`` models. For
    ``MultiRMSE`` models, where CatBoost raises "Multi-dimensional target fstr is unimplemented
    yet", the same definition is computed with CatBoost's MultiRMSE metric. CatBoost uses only a
    subset of the rows above ``max(2e5, 2e9 / F)`` rows; jaximp always uses all of them.

    A ``TreeEnsemble`` (non-symmetric trees) gets the same definition with its own
    path-dependent SHAP values (CatBoost credits a split on a CTR over several columns to
    those columns equally): CatBoost's numbers on the model reloaded from its JSON export (in
    CatBoost, a freshly trained non-symmetric model's LossFunctionChange changes after that
    round trip; [CatBoost issue 2136](https://github.com/catboost/catboost/issues/2136)).

    Args:
        ens: the model.
        X: ``[N, F]`` rows (NumPy/JAX array, pandas/polars DataFrame, numeric
            ``catboost.Pool``).
        y: ``[N]`` targets or class labels (matched to ``ens.class_names``), ``[N, K]`` for
            multi-regression.
        sample_weight: ``[N]`` non-negative row weights, or None.
        batch_size: rows per device step; None picks one for the device.
        devices: None (default device), an int or a list of ``jax.Device`` to shard rows over.
        progress: a progress bar (tqdm) when the call lasts over 2 seconds; False silences it.

    Returns:
        np.ndarray | jax.Array: ``f32[F]``, positive when the loss grows without the feature: NumPy
            for rows in host memory, a ``jax.Array`` on the rows' device for rows given as one;
            float64 for a float64 model under ``jax_enable_x64``. Memory does not grow with N: the
            per-row terms are summed on the device step by step.

    Differentiable in: ``ens.leaf_values``, ``ens.leaf_weights`` (the covers of the SHAP
    values), ``ens.scale``, ``ens.bias``, ``sample_weight`` and, for regression, ``y``;
    piecewise constant in ``X`` and the splits. Under ``jax.grad``, ``jit`` or ``vmap`` the
    result is computed in JAX (a traced ``y`` is read in the metrics' layout: values, the
    second class's 0/1 or probability, class indices; never as class labels).

    Raises:
        TypeError: ``ens`` is not a jaximp ensemble, or ``X``, ``y`` or ``sample_weight`` is of
            the wrong type.
        ValueError: a bad ``X``, ``y`` or ``sample_weight``, or a model whose loss is not one of
            the above (a model file without its loss: import it with
            ``from_catboost(path, loss_function=...)``).

    Examples:
        >>> lfc = jaximp.loss_function_change(ens, X, y)
        >>> lfc.shape
        (10,)
        >>> catboost_lfc = model.get_feature_importance(catboost.Pool(X, y), type="LossFunctionChange")
        >>> np.allclose(lfc, catboost_lfc, rtol=1e-5, atol=1e-4)    # float32 losses
        True
    """
    fn = "loss_function_change"
    check_model(ens, fn)
    ens = general(ens, fn_name=fn)  # an oblivious model deeper than its SHAP tables: as general trees
    loss = model_loss(ens, fn)
    x = as_features(X, ens, fn)
    n = x.shape[0]
    targets = as_targets(y, ens, n, fn)
    weights = as_weights(sample_weight, n, fn)
    if devices is None and on_device(x) and not is_traced(x):  # computed where the rows are
        devices = list(x.devices())
    kernel, params, static = _kernel(ens, x, batch_size=batch_size, devices=devices, fn_name=fn)
    weight, total, delta = weighted_sums(kernel, params, (x, targets), weights, batch_size=batch_size,
                                         devices=devices, fn_name=fn, progress=progress, loss=loss, **static)
    result = to_columns(ens, metric_change(loss, weight, total, delta), axis=0, per="representative")  # [F]
    if is_traced(result) or on_device(x):  # under jax.grad, jit or vmap, or rows on a device: stays in JAX
        return result
    return np.asarray(result, jax.dtypes.canonicalize_dtype(ens.leaf_values.dtype))  # float64 under x64


def metric_change(loss: ModelLoss, weight: float, total: Any, delta: Any) -> np.ndarray:
    """``f64[P]`` the change of the metric from the weighted sums of the rows' losses ``total
    f64[]`` and of their changes ``delta f64[P]``, and the total weight ``weight``.

    The sums come from per-block sums added on the device in double-float precision
    (``jaximp._rows.batching.weighted_sums``): identical whatever the batch size or device count,
    read back as float64 for rows in host memory. Sums held on a device (rows on a device, or
    traced by ``jax.grad``, ``jit``, ``vmap``) give a result computed there with ``jax.numpy``.
    """
    if isinstance(total, jax.Array):
        return _device_metric_change(loss, weight, total, delta)
    return _metric_change(np, loss, weight, total, delta)


@functools.partial(jax.jit, static_argnames="loss")
def _device_metric_change(loss: ModelLoss, weight: Array, total: Array, delta: Array) -> Array:
    return _metric_change(jnp, loss, weight, total, delta)


def _metric_change(xp: Any, loss: ModelLoss, weight: Any, total: Any, delta: Any) -> Any:
    if loss.root:  # sqrt(a + d) - sqrt(a) = d / (sqrt(a + d) + sqrt(a)), without cancellation
        before, after = xp.sqrt(total / weight), xp.sqrt(xp.maximum(total + delta, 0.0) / weight)
        denom = before + after
        result = xp.where(denom > 0, (delta / weight) / xp.where(denom > 0, denom, 1.0), 0.0)
    else:
        result = delta / weight
    return result
