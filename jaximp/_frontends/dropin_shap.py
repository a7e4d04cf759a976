"""The drop-in's SHAP types in CatBoost's layouts: ShapValues (with the expected value as the last
column, ``reference_data`` and ``model_output``'s rescaling of CatBoost's
``independent_tree_shap.cpp``) and ShapInteractionValues (the bias as the last row and column,
``interaction_indices``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jaximp._frontends.dropin_arguments import FN_NAME, SHAP_CALC_TYPES, pool_labels
from jaximp._leaves.predict import predict
from jaximp._rows.frames import is_pool
from jaximp._shap.values import expected_value, player_interaction_values, shap_interaction_values, shap_values


def _outputs_first(values: np.ndarray) -> np.ndarray:
    """``[N, F(, K)]`` -> ``[N, F]`` or ``[N, K, F]``."""
    return values if values.ndim == 2 else np.transpose(values, (0, 2, 1))


def _with_expected(values: np.ndarray, expected: Any) -> np.ndarray:
    """Append the expected value (``[K]``) as the last column of ``[N, F]`` or ``[N, K, F]``."""
    expected = np.asarray(expected, np.float64).reshape(-1)
    if values.ndim == 2:
        return np.concatenate([values, np.full((values.shape[0], 1), expected[0])], axis=1)
    column = np.broadcast_to(expected, values.shape[:2])
    return np.concatenate([values, column[..., None]], axis=2)


def shap_rows(ens: Any, data: Any, calc: str, reference_data: Any) -> np.ndarray:
    """CatBoost's ShapValues: ``f64[N, F+1]``, or ``f64[N, K, F+1]`` when K > 1, the expected value
    last; ``calc`` a ``shap_calc_type`` name, or interventional values with ``reference_data``."""
    method = "interventional" if reference_data is not None else SHAP_CALC_TYPES[calc]
    values = np.asarray(shap_values(ens, data, method=method, background=reference_data), np.float64)
    try:
        expected = np.asarray(expected_value(ens, method=method, background=reference_data), np.float64)
    except ValueError:  # a model file without leaf weights: CatBoost counts them on data
        raw = np.asarray(predict(ens, data), np.float64)
        expected = np.mean(raw - values.sum(axis=1), axis=0)
    return _with_expected(_outputs_first(values), expected)


# --------------------------------------------------------------------------------------------
# ShapValues with model_output="Probability" / "LossFunction" (CatBoost independent_tree_shap.cpp)


def _probability(raw: np.ndarray) -> np.ndarray:
    """CatBoost's ``Probability`` of raw predictions ``[rows, K]``: the sigmoid for K == 1, else
    the softmax over the K outputs (for every multi-output loss, as CatBoost's ``predict`` does)."""
    if raw.shape[1] == 1:
        return 1.0 / (1.0 + np.exp(-raw))
    shifted = np.exp(raw - raw.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def _row_loss(ens: Any, y: np.ndarray, raw: np.ndarray) -> np.ndarray:
    """CatBoost's metric of the training loss on one row, ``[N]`` or ``[N, B]`` (raw broadcast)."""
    loss = ens.loss_function
    y = y.reshape(y.shape + (1,) * (raw.ndim - 1))
    if loss in ("RMSE", "MAE"):
        return np.abs(y - raw)
    # log(1 + e^-z) and log(1 + e^z) without overflow
    return y * np.logaddexp(0.0, -raw) + (1.0 - y) * np.logaddexp(0.0, raw)


def _loss_targets(ens: Any, data: Any) -> np.ndarray:
    """``f64[N]`` the labels of ``data`` (a labelled Pool) as the loss reads them: class indices
    of a Logloss model with class names, else the numbers."""
    loss = ens.loss_function
    if loss not in ("RMSE", "MAE", "Logloss", "CrossEntropy"):
        raise ValueError(f"{FN_NAME}: model_output='LossFunction' needs the model's loss to be one of 'RMSE', "
                         f"'MAE', 'Logloss', 'CrossEntropy' for one output; got {loss!r} "
                         "(CatBoost computes it for one-output models only)")
    label, _ = pool_labels(data, "ShapValues", "labels for model_output='LossFunction'")
    if loss == "Logloss" and ens.class_names:
        names = [str(c) for c in ens.class_names]
        unknown = sorted({str(v) for v in label.tolist()} - set(names))
        if unknown:
            raise ValueError(f"{FN_NAME}: data's labels must be the model's classes {names}; got {unknown[:5]}")
        return np.asarray([names.index(str(v)) for v in label.tolist()], np.float64)
    try:
        return np.asarray(label, np.float64).reshape(-1)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{FN_NAME}: data's labels must be numbers for a {loss} model; got {label.dtype}") from e


def _reference_rows(reference_data: Any) -> list:
    """The reference rows one by one, each a ``[1, ...]`` slice in a form jaximp accepts."""
    if is_pool(reference_data):
        return [reference_data.slice([b]) for b in range(reference_data.num_row())]
    if hasattr(reference_data, "iloc"):
        return [reference_data.iloc[b : b + 1] for b in range(len(reference_data))]
    if type(reference_data).__module__.startswith("polars"):
        return [reference_data.slice(b, 1) for b in range(reference_data.height)]
    array = np.asanyarray(reference_data)  # keeps evaluated rows marked as such
    return [array[b : b + 1] for b in range(array.shape[0])] if array.ndim == 2 else [array]


def output_shap_rows(ens: Any, data: Any, reference_data: Any, model_output: str, *,
                     labelled: Any) -> np.ndarray:
    """CatBoost's ShapValues with ``reference_data`` and ``model_output`` "Probability" or
    "LossFunction": each reference row's interventional values rescaled to the transformed output
    (see ``get_feature_importance``), averaged over the references.

    Args:
        ens: the model.
        data: the rows to explain, as jaximp reads them.
        reference_data: the B reference rows, as jaximp reads them.
        model_output: "Probability" or "LossFunction".
        labelled: the Pool given as ``data``, whose labels "LossFunction" reads.

    Returns:
        ``f64[N, F+1]``, or ``f64[N, K, F+1]`` when K > 1, the mean transformed output of the
        references last. Costs one interventional table per reference row.
    """
    raw_x = np.asarray(predict(ens, data), np.float64).reshape(-1, ens.n_outputs)  # [N, K]
    refs = _reference_rows(reference_data)
    raw_b = np.asarray(predict(ens, reference_data), np.float64).reshape(-1, ens.n_outputs)  # [B, K]
    if model_output == "Probability":
        t_x = _probability(raw_x)
        t_b = np.broadcast_to(_probability(raw_b)[None], (raw_x.shape[0],) + raw_b.shape)  # [N, B, K]
    else:
        if ens.n_outputs != 1:
            raise ValueError(f"{FN_NAME}: model_output='LossFunction' needs a one-output model, as in "
                             "CatBoost ('Multi-dimensional target fstr is unimplemented'); "
                             f"got {ens.n_outputs} outputs")
        y = _loss_targets(ens, labelled)
        t_x = _row_loss(ens, y, raw_x[:, 0])[:, None]
        t_b = _row_loss(ens, y, raw_b[None, :, 0])[..., None]  # [N, B, 1]
    n, k = raw_x.shape
    total = np.zeros((n, k, ens.n_features), np.float64)
    for b, row in enumerate(refs):
        phi = np.asarray(shap_values(ens, data, method="interventional", background=row), np.float64)
        phi = phi.reshape(n, ens.n_features, k).transpose(0, 2, 1)  # [N, K, F]
        dx = raw_x - raw_b[b]
        same = dx == 0
        coef = np.where(same, 1.0, (t_x - t_b[:, b]) / np.where(same, 1.0, dx))
        total += phi * coef[..., None]
    total /= len(refs)
    expected = np.mean(t_b, axis=1)  # [N, K]
    out = np.concatenate([total, expected[..., None]], axis=2)
    return out[:, 0] if k == 1 else out


# --------------------------------------------------------------------------------------------
# ShapInteractionValues


def _feature_index(ens: Any, value: Any) -> int:
    """A feature's index, given as its index or its name."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        if 0 <= int(value) < ens.n_features:
            return int(value)
    elif isinstance(value, str) and value in ens.feature_names:
        return list(ens.feature_names).index(value)
    raise ValueError(f"{FN_NAME}: interaction_indices must hold feature indices in [0, {ens.n_features}) or "
                     f"the model's feature names; got {value!r}")


def _pair_of_classes(ens: Any, data: Any, i: int, j: int) -> np.ndarray:
    """``f64[N, K, 2, 2]`` (``[N, K, 1, 1]`` when ``i == j``) CatBoost's ShapInteractionValues of
    the pair of columns ``(i, j)`` of a model with combination classes (``CalcShapInteraction``
    with ``pairOfFeatures``): over the classes holding ``i`` and those holding ``j``, the main
    effect of a class holding both goes to both diagonal entries divided by its size, and the
    interaction of two classes to the entries of their columns ``i`` and ``j`` (0 and 1), divided
    by the product of their sizes; the entry ``[1, 0]`` is then that of ``[0, 1]``."""
    phi = np.asarray(player_interaction_values(ens, data, FN_NAME), np.float64)  # [N, P, P(, K)]
    phi = phi if phi.ndim == 4 else phi[..., None]
    first, second = ([p for p, cols in enumerate(ens.players) if c in cols] for c in (i, j))
    size = 1 if i == j else 2
    out = np.zeros((phi.shape[0], phi.shape[3], size, size))
    for a in first:
        for b in second:
            ends_a = [int(c != i) for c in ens.players[a] if c in (i, j)]
            ends_b = [int(c != i) for c in ens.players[b] if c in (i, j)]
            if a == b:
                for e in ends_a:
                    out[:, :, e, e] += phi[:, a, a] / len(ens.players[a])
                continue
            for e in ends_a:
                for g in ends_b:
                    if e != g:
                        out[:, :, e, g] += phi[:, a, b] / (len(ens.players[a]) * len(ens.players[b]))
    if size == 2:
        out[:, :, 1, 0] = out[:, :, 0, 1]
    return out


def shap_interaction_rows(ens: Any, data: Any, interaction_indices: Any) -> np.ndarray:
    """CatBoost's ShapInteractionValues: ``f64[N, F+1, F+1]``, or ``f64[N, K, F+1, F+1]`` when
    K > 1, the model's bias in the last row and column and 0 in their corner. With
    ``interaction_indices=(i, j)``: ``[N, 3, 3]`` with ``Phi_ij`` off the diagonal and zeros on
    it, or ``[N, 2, 2]`` with ``Phi_ii`` when ``i == j`` (``[N, K, ...]`` when K > 1); for a model
    whose splits read several columns at once (CTRs over combinations), the pair's diagonal holds
    the main effects of the combinations that read both columns, as CatBoost computes them
    (:func:`_pair_of_classes`)."""
    pair = None
    if interaction_indices is not None:
        if isinstance(interaction_indices, (str, bytes)) or not hasattr(interaction_indices, "__len__") \
                or len(interaction_indices) != 2:
            raise ValueError(f"{FN_NAME}: interaction_indices must be two feature indices or names; "
                             f"got {interaction_indices!r}")
        pair = [_feature_index(ens, v) for v in interaction_indices]
    if pair is not None and ens.players is not None:
        values = _pair_of_classes(ens, data, *pair)  # [N, K, 2, 2] or [N, K, 1, 1]
    else:
        values = np.asarray(shap_interaction_values(ens, data), np.float64)
        if values.ndim == 3:
            values = values[..., None]
        values = np.transpose(values, (0, 3, 1, 2))  # [N, K, F, F]
        if pair is not None:
            i, j = pair
            if i == j:
                values = values[:, :, [i]][:, :, :, [i]]
            else:  # one column per player: no class holds both columns, the diagonal is 0
                phi = values[:, :, i, j]
                values = np.zeros(values.shape[:2] + (2, 2))
                values[:, :, 0, 1] = values[:, :, 1, 0] = phi
    n, k = values.shape[:2]
    size = values.shape[-1]
    out = np.zeros((n, k, size + 1, size + 1))
    out[:, :, :size, :size] = values
    bias = np.asarray(ens.bias, np.float64).reshape(-1)[None, :, None]
    out[:, :, size, :size] = bias
    out[:, :, :size, size] = bias
    return out[:, 0] if k == 1 else out
