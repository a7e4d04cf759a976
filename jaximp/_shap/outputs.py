"""SHAP values of the probability and of the loss: ``jaximp.shap_values(...,
model_output="probability" | "log_loss")``, as shap's interventional ``TreeExplainer`` defines
them.

shap explains a transformed output ``T`` (the sigmoid of the margin, or the row's loss) one
background row at a time: the Shapley values of the raw margin in the game of the row ``x``
against one background row ``b`` add up to ``f(x) - f(b)``, and are scaled by
``(T(f(x)) - T(f(b))) / (f(x) - f(b))`` so that they add up to ``T(f(x)) - T(f(b))``; the values
are the mean over the background (``dense_independent`` in shap's ``tree_shap.h``). The scale
depends on the pair, so the game cannot be summarized by the background's leaf histograms: each
leaf's Shapley values pair the rows with the background's blocks on the device
(``jaximp._shap.index_background.paired_values``, weighted by
``jaximp._shap.index_background.rescale_factor``), at ``O(N B)`` pairs. Where ``f(x) = f(b)``
shap scales by 1 and jaximp by the limit ``T'(f(x))``; the pair's values are then zero whenever
``x`` and ``b`` reach the same leaves.

Shapes: the legend of :mod:`jaximp._models` (P players, the columns of numeric models).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaximp._leaves.predict import predict_rows
from jaximp._models.ensemble import Ensemble, squeeze_outputs, to_columns
from jaximp._models.tasks import task_of
from jaximp._rows.batching import map_rows
from jaximp._rows.targets import as_targets
from jaximp._shap.dense import per_player
from jaximp._shap.index_games import rescaled_kernel
from jaximp._shap.interactions import general_trees, interventional_plan

MODEL_OUTPUTS = ("raw", "probability", "log_loss")


def output_transform(ens: Ensemble, model_output: Any, method: Any, y: Any, fn_name: str) -> str:
    """The transform of ``model_output`` for the model, as shap's ``TreeEnsemble.get_transform``
    picks it: "identity" for ``"raw"`` and for the probability of a forest whose outputs are
    already class probabilities (scikit-learn's classifiers), "logistic" for the probability of a
    binary classifier's log-odds, "logistic_nlogloss" / "squared_loss" for the log loss of a
    binary classifier / a squared-error regression; else a ValueError naming what is supported."""
    if not isinstance(model_output, str) or model_output not in MODEL_OUTPUTS:
        raise ValueError(f"{fn_name}: model_output must be one of {', '.join(map(repr, MODEL_OUTPUTS))}; "
                         f"got {model_output!r:.100}")
    if model_output != "log_loss" and y is not None:
        raise ValueError(f"{fn_name}: y is read only with model_output='log_loss' (the loss of each row); "
                         f"got y with model_output={model_output!r} (pass y=None)")
    if model_output == "raw":
        return "identity"
    if method != "interventional":
        raise ValueError(f"{fn_name}: model_output={model_output!r} needs method='interventional' and a "
                         f"background, as in shap's TreeExplainer; got method={method!r}")
    task, loss = task_of(ens, fn_name), ens.loss_function
    if model_output == "log_loss":
        if y is None:
            raise ValueError(f"{fn_name}: model_output='log_loss' needs y, the rows' labels (y=...)")
        if task == "binary" and ens.n_outputs == 1:
            return "logistic_nlogloss"
        if loss == "RMSE" and ens.n_outputs == 1:
            return "squared_loss"
        raise ValueError(f"{fn_name}: model_output='log_loss' needs a binary classifier (Logloss, CrossEntropy) "
                         f"or a squared-error regression (RMSE) with one output, as shap supports; the model's "
                         f"loss is {loss or 'not recorded'!r} with {ens.n_outputs} output(s)")
    if task == "binary" and ens.n_outputs == 1:
        return "logistic"
    if not loss and task == "multiclass":  # class probabilities already: scikit-learn's forests
        return "identity"
    raise ValueError(f"{fn_name}: model_output='probability' needs a binary classifier whose raw output is the "
                     f"log-odds (Logloss, CrossEntropy) or a forest of class probabilities; the model's loss is "
                     f"{loss or 'not recorded'!r} with {ens.n_outputs} output(s) (a regression's output is no "
                     f"probability; for a multiclass model's softmax, shap has no interventional values either)")


def output_values(ens: Ensemble, x: Any, background: Any, y: Any, transform: str, *, batch_size: int | None,
                  devices: Any, fn_name: str, per_player_values: bool = False) -> Any:
    """``f32[N, F]`` (``f32[N, P]`` with ``per_player_values``) the interventional SHAP values of the
    ``transform``-ed output of the checked rows ``x`` over the checked ``background``, with the
    rows' targets ``y`` for a loss (else None). Where the rows are."""
    model = general_trees(ens, fn_name)
    n = x.shape[0]
    margin_x, margin_b = (predict_rows(model, rows, batch_size=batch_size, devices=devices, progress=False,
                                       fn_name=fn_name) for rows in (x, background))  # f32[n]: one output
    on_host = isinstance(margin_x, np.ndarray)
    target = as_targets(y, ens, n, fn_name) if y is not None else (np.zeros(n, np.float32) if on_host
                                                                   else jnp.zeros_like(margin_x))
    if on_host != isinstance(target, np.ndarray):  # targets go where the rows are, explicitly
        target = np.asarray(target) if on_host else jax.device_put(target, next(iter(margin_x.devices())))
    plan, tables, spec, subsets = interventional_plan(model, background, x, "SV", 1, batch_size=batch_size,
                                                      devices=devices, fn_name=fn_name, transform=transform,
                                                      margins=margin_b)
    values = map_rows(rescaled_kernel, (model, plan.arrays, subsets.ids, tables), (x, margin_x, target),
                      batch_size=batch_size, devices=devices, fn_name=fn_name, row_floats=subsets.count,
                      progress=False, small_step_rows=1, kind=plan.kind, step_rows=plan.step_rows, spec=spec)
    players = tuple(int(p) for p in subsets.by_size[0][:, 0])
    out = per_player(squeeze_outputs(values, 1), players, model.n_players, axis=1)  # [N, P]
    return out if per_player_values else to_columns(model, out, axis=1)

