"""Per-row terms of CatBoost's LossFunctionChange for :class:`TreeEnsemble` models.

The definition is that of ``jaximp._loss_change`` (catboost/libs/fstr/loss_change_fstr.cpp): the
model's metric with each row's prediction minus its path-dependent SHAP value of a feature,
minus the metric of the predictions. Per row this needs the raw prediction and the SHAP values;
both come from one row kernel over blocks: the prediction by the trees' descent
(``jaximp._tree_leaves``) and the SHAP values from per-leaf path tables built once
(``jaximp._tree_shap.tree_shap_plan``). For a model file without leaf weights the SHAP values
use the leaf counts of the rows themselves, as CatBoost's (``CollectLeavesStatistics`` on the
data set; leaves no row reaches drop out, see ``jaximp._tree_shap.covered``).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax import Array

from jaximp._batching import weighted_sums
from jaximp._metrics import ModelLoss
from jaximp._tree_leaves import _predict_kernel
from jaximp._tree_model import TreeEnsemble
from jaximp._tree_shap import _shap_kernel, tree_shap_plan


def _loss_change_kernel(params: tuple, rows: tuple[Array, Array], *, block: int, loss: ModelLoss,
                        kind: str, step_rows: int) -> tuple[Array, Array]:
    """Per row: the loss ``f32[n]`` and its change without each player ``f32[n, P]``.

    Args:
        params: ``(ens, plan)``, the model and its path-dependent SHAP plan.
        rows: ``(x f32[n, E], y)``.
        block: rows per fused block.
        loss: the model's loss (static).
        kind: the plan's kernel (``jaximp._tree_shap.Kind``, static).
        step_rows: rows per step of the SHAP kernel (the plan's).
    """
    ens, plan = params
    x, y = rows
    raw = _predict_kernel(ens, x, block=block)  # [n, K]
    phi = _shap_kernel((ens, plan), x, block=block, kind=kind, step_rows=step_rows, per_player=True)  # [n, P, K]
    change = jax.vmap(lambda delta: loss.change(y, raw, delta), in_axes=1, out_axes=1)(phi)
    return loss.row_loss(y, raw), change


def tree_loss_changes(ens: TreeEnsemble, x: Any, targets: np.ndarray, weights: np.ndarray, loss: ModelLoss, *,
                      batch_size: int | None, devices: Any, fn_name: str, progress: bool = True) -> tuple[Any, Any]:
    """Weighted sums of the rows' loss and loss changes, for ``jaximp.loss_function_change``.

    Args:
        ens: the model.
        x: ``f32[N, E]`` checked rows (bins of the evaluated features with a featurizer).
        targets: ``[N]`` (or ``[N, K]``) targets as ``jaximp._metrics.as_targets`` gives them.
        weights: ``f32[N]`` row weights.
        loss: the model's loss.
        batch_size: rows per device step; None picks one.
        devices: None, an int or a list of ``jax.Device``.
        fn_name: the public function, for messages.

    Returns:
        ``(f64[] sum_i w_i loss_i, f64[P] sum_i w_i change_i)``: the change of each row's loss
        without each player's SHAP value, summed block by block on the device (P == F for numeric
        models; ``jaximp._loss_change`` maps players to columns as CatBoost does).
    """
    plan, kind, step_rows = tree_shap_plan(ens, "path_dependent", fn_name=fn_name, x=x,
                                           batch_size=batch_size, devices=devices)
    return weighted_sums(_loss_change_kernel, (ens, plan), (x, targets), weights, batch_size=batch_size,
                         devices=devices, fn_name=fn_name, progress=progress, loss=loss, kind=kind,
                         step_rows=step_rows)
