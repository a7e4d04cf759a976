"""Scores of the model's predictions: sklearn scorers by name, the model's own losses, the
scores that are sums over rows (computed inside a kernel, block by block), and the targets they
read.

Every score is a function ``(y, raw_prediction, sample_weight) -> scalar``, greater is better,
of the raw predictions in the API layout (``f32[n]`` when K == 1, ``f32[n, K]`` otherwise).
Targets are what ``jaximp._rows.targets.as_targets`` makes of the user's ``y``:

* regression: ``f32[n]``; multi-regression: ``f32[n, K]``;
* binary (``Logloss``/``CrossEntropy``): ``f32[n]`` in ``[0, 1]`` (class labels mapped to 0/1
  through the model's class names); raw = log-odds of the second class;
* multiclass (``MultiClass``): ``i32[n]`` class indices; raw = per-class scores, softmax.
* a model that records no loss jaximp knows the outputs of (an XGBoost ``count:poisson`` or
  quantile model, a CatBoost file without its loss): ``f32[n]`` or ``f32[n, K]`` numbers as
  given, for a scoring function only (its task is ``"unknown"``).

Two families:

* sklearn scorers by name (:data:`SCORERS`), "greater is better" like
  ``sklearn.metrics.get_scorer``: ``neg_mean_squared_error``, ``r2``, ``accuracy``,
  ``neg_log_loss``, ``roc_auc``, ..., each the ``sklearn.metrics`` function of
  ``jaximp._importances.metrics`` (negated where smaller is better).
* the model's own losses by CatBoost name (:data:`MODEL_LOSSES`): ``RMSE``, ``MultiRMSE``,
  ``MAE``, ``Logloss``, ``CrossEntropy``, ``MultiClass``, as CatBoost's ``eval_metrics``
  computes them (``sqrt(sum_i w_i l_i / sum_i w_i)`` for the root losses, the weighted mean of
  ``l_i`` otherwise).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._importances import metrics
from jaximp._importances.metrics import predicted_class
from jaximp._models.ensemble import Ensemble
from jaximp._models.tasks import CLASSES, REGRESSION, Task
from jaximp._rows.targets import target_summary, targets_on_device

_CATBOOST_FILE = ("a CatBoost model file that does not record its loss: import it with "
                  "jaximp.from_catboost(path, loss_function='RMSE'), or the loss it was trained with")


def as_columns(values: Array) -> Array:
    """``[n, K]`` view of ``[n]`` or ``[n, K]`` (one column per output)."""
    return values[:, None] if values.ndim == 1 else values


# ----------------------------------------------------------------------------------------
# sklearn scorers by name


def _negated(fn: Callable) -> Callable:
    def neg(y, raw, w):
        return -fn(y, raw, w)

    neg.__name__ = f"neg_{fn.__name__}"
    neg.__doc__ = f"Minus {fn.__name__} (greater is better)."
    return neg



# sklearn scorer name -> (metric, tasks where it is defined). Every scorer is "greater is better".
SCORERS: dict[str, tuple[Callable, tuple[Task, ...]]] = {
    "neg_mean_squared_error": (_negated(metrics.mean_squared_error), REGRESSION),
    "neg_root_mean_squared_error": (_negated(metrics.root_mean_squared_error), REGRESSION),
    "neg_mean_absolute_error": (_negated(metrics.mean_absolute_error), REGRESSION),
    "r2": (metrics.r2, REGRESSION),
    "explained_variance": (metrics.explained_variance, REGRESSION),
    "accuracy": (metrics.accuracy, CLASSES),
    "balanced_accuracy": (metrics.balanced_accuracy, CLASSES),
    "neg_log_loss": (_negated(metrics.log_loss), CLASSES),
    "neg_brier_score": (_negated(metrics.brier_score), ("binary",)),
    "roc_auc": (metrics.roc_auc, ("binary",)),
    "roc_auc_ovr": (metrics.roc_auc_ovr, ("multiclass",)),
    "roc_auc_ovr_weighted": (metrics.roc_auc_ovr_weighted, ("multiclass",)),
    "precision": (metrics.precision, ("binary",)),
    "recall": (metrics.recall, ("binary",)),
    "f1": (metrics.f1, ("binary",)),
    "f1_macro": (metrics.f1_macro, CLASSES),
    "f1_weighted": (metrics.f1_weighted, CLASSES),
}
_LABEL_SCORERS = {name for name, (_, tasks) in SCORERS.items() if set(tasks) <= set(CLASSES)}
_PROBABILITY_SCORERS = ("neg_log_loss", "neg_brier_score", "roc_auc_ovr", "roc_auc_ovr_weighted")


# ----------------------------------------------------------------------------------------
# The model's own losses, as CatBoost's eval_metrics computes them


@dataclasses.dataclass(frozen=True)
class ModelLoss:
    """A CatBoost loss: ``row_loss(y, raw [n, K]) -> f32[n]``, averaged with weights.

    The final value is ``mean_w(l)`` or, when ``root``, ``sqrt(mean_w(l))``.
    ``row_change(y, raw, delta)`` is ``row_loss(y, raw - delta) - row_loss(y, raw)`` written
    without cancellation where the loss allows it.
    """

    row_loss: Callable[[Array, Array], Array]
    root: bool = False
    row_change: Callable[[Array, Array, Array], Array] | None = None

    def change(self, y: Array, raw: Array, delta: Array) -> Array:
        """``f32[n]`` per-row loss change when ``raw: [n, K]`` becomes ``raw - delta``."""
        if self.row_change is not None:
            return self.row_change(y, raw, delta)
        return self.row_loss(y, raw - delta) - self.row_loss(y, raw)

    def final(self, total: Any, weight: Any) -> Any:
        """The metric from ``total = sum_i w_i l_i`` and ``weight = sum_i w_i``."""
        mean = total / weight
        return mean**0.5 if self.root else mean


def _squared_change(y, raw, delta):
    # (e - delta)^2 - e^2 = delta (delta - 2 e), e = raw - y: no cancellation between big squares
    return jnp.sum(delta * (delta - 2.0 * (raw - as_columns(y))), axis=-1)


def _logloss_rows(y, raw):
    return jax.nn.softplus(raw[:, 0]) - y * raw[:, 0]


def _multiclass_rows(y, raw):
    logp = jax.nn.log_softmax(raw, axis=-1)
    return -jnp.take_along_axis(logp, y.astype(jnp.int32)[:, None], axis=1)[:, 0]


MODEL_LOSSES: dict[str, ModelLoss] = {
    "RMSE": ModelLoss(lambda y, raw: (raw[:, 0] - y) ** 2, root=True, row_change=_squared_change),
    "MultiRMSE": ModelLoss(lambda y, raw: jnp.sum((raw - y) ** 2, axis=-1), root=True,
                           row_change=_squared_change),
    "MAE": ModelLoss(lambda y, raw: jnp.abs(raw[:, 0] - y)),
    "Logloss": ModelLoss(_logloss_rows),
    "CrossEntropy": ModelLoss(_logloss_rows),
    "MultiClass": ModelLoss(_multiclass_rows),
}


def model_loss(ens: Ensemble, fn_name: str) -> ModelLoss:
    """The :class:`ModelLoss` of ``ens.loss_function`` for CatBoost's LossFunctionChange, or a
    ValueError that names the supported losses and what to do instead."""
    instead = "permutation_importance(ens, X, y, scoring=...) measures importance with a metric of your choice"
    if not ens.loss_function:
        raise ValueError(
            f"{fn_name}: the model's loss_function must be known: LossFunctionChange is the change of the "
            f"training loss, and this model records none ({_CATBOOST_FILE}; for other models, {instead})"
        )
    if ens.loss_function not in MODEL_LOSSES:
        raise ValueError(
            f"{fn_name}: the model's loss_function must be one of {sorted(MODEL_LOSSES)} (LossFunctionChange "
            f"is the change of the training loss); got {ens.loss_function!r} ({instead})"
        )
    return MODEL_LOSSES[ens.loss_function]


@functools.cache
def loss_score(name: str) -> Callable:
    """``(y, raw, w) -> -loss``, the "greater is better" score of the model loss ``name`` (a key of
    :data:`MODEL_LOSSES`; API layout raw). A partial of a module function, made once per name,
    so that jitted programs taking it as a static argument are compiled once."""
    return functools.partial(_negated_loss, name=name)


def _negated_loss(y: Array, raw: Array, w: Array, *, name: str) -> Array:
    loss = MODEL_LOSSES[name]
    return -loss.final(jnp.sum(w * loss.row_loss(y, as_columns(raw))), jnp.sum(w))


def resolve_scoring(scoring: Any, ens: Ensemble, task: Task, fn_name: str) -> Callable:
    """A ``(y, raw, w) -> score`` function from ``scoring`` (None, a scorer name or a callable).

    Raises:
        ValueError: an unknown name or one not defined for the model's output kind.
        TypeError: ``scoring`` is neither None, a string nor callable.
    """
    if scoring is None:
        if ens.loss_function not in MODEL_LOSSES:
            raise ValueError(_scoring_needed(ens, task, fn_name))
        return loss_score(ens.loss_function)
    if callable(scoring):
        return scoring
    if not isinstance(scoring, str):
        raise TypeError(
            f"{fn_name}: scoring must be None, a scorer name or a function (y, raw, w) -> score; "
            f"got {type(scoring).__name__}"
        )
    if task == "unknown":
        raise ValueError(
            f"{fn_name}: scoring {scoring!r} needs to know what the model's outputs are, and the model records no "
            f"loss; pass scoring= a function (y, raw, sample_weight) -> score ({_CATBOOST_FILE})"
        )
    valid = sorted(name for name, (_, tasks) in SCORERS.items() if task in tasks)
    if scoring not in SCORERS:
        raise ValueError(f"{fn_name}: scoring must be one of {valid} for a {task} model; got {scoring!r}")
    fn, tasks = SCORERS[scoring]
    if task not in tasks:
        raise ValueError(
            f"{fn_name}: scoring {scoring!r} is defined for {' and '.join(tasks)} models only; "
            f"for this {task} model use one of {valid}"
        )
    if scoring in _PROBABILITY_SCORERS and ens.loss_function == "MultiClassOneVsAll":
        raise ValueError(
            f"{fn_name}: scoring {scoring!r} needs softmax probabilities; a MultiClassOneVsAll "
            f"model's are not (use 'accuracy', 'balanced_accuracy' or a function)"
        )
    if scoring in _PROBABILITY_SCORERS and not ens.loss_function:
        raise ValueError(
            f"{fn_name}: scoring {scoring!r} needs the model's logits; this model has no loss and its "
            f"outputs are not logits (use 'accuracy', 'balanced_accuracy', 'f1_macro' or a function)"
        )
    return fn


def _scoring_needed(ens: Ensemble, task: Task, fn_name: str) -> str:
    """The message of a default scoring (the model's own loss) that the model does not define."""
    valid = sorted(name for name, (_, tasks) in SCORERS.items() if task in tasks)
    names = f"a scorer name ({', '.join(map(repr, valid[:4]))}, ...) or " if valid else ""
    if not ens.loss_function:
        kind = "its outputs are class probabilities and " if task == "multiclass" else ""
        why = f"{kind}it records no training loss to score with by default (its loss_function must be known)"
        also = "" if task == "multiclass" else f" ({_CATBOOST_FILE})"
    else:
        why = f"its loss {ens.loss_function!r} is not one jaximp computes ({', '.join(sorted(MODEL_LOSSES))})"
        also = ""
    return (f"{fn_name}: scoring must be given for this model: {why}; pass scoring= {names}a function "
            f"(y, raw, sample_weight) -> score{also}")


# ----------------------------------------------------------------------------------------
# Scores that are functions of sums over rows (scored inside a kernel, block by block)


@dataclasses.dataclass(frozen=True)
class RowScore:
    """A score computed from weighted sums over rows: ``final(sum_i w_i rows(y_i, raw_i), sum_i w_i,
    stats(y, w))``.

    ``rows(y, raw f32[n, K]) -> f32[n, n_terms]`` are per-row terms, which a kernel sums per block
    (the blocks are added on the device in double-float precision, ``jaximp._rows.sums``).
    ``final(sums [..., n_terms], weight [...], stats) -> [...]`` is the score from the sums and
    the total weight, in NumPy (float64) or ``jax.numpy`` (on the device), whichever ``sums`` is
    held in; ``stats(y, w)`` (``jax.numpy``, or None) is what ``final`` needs of the scored rows'
    targets alone, such as R^2's total sum of squares, shaped to broadcast against ``sums``.
    Equal to the named scorer of :data:`SCORERS` computed on all rows at once
    (``tests/test_importances_metrics.py``).
    """

    rows: Callable[[Array, Array], Array]
    final: Callable[..., Any]
    stats: Callable[[Array, Array], Array] | None = None


def _xp(a: Any) -> Any:
    """``jax.numpy`` for sums held on a device, else NumPy."""
    return jnp if isinstance(a, jax.Array) else np


def _per_weight(sums: Any, weight: Any) -> Any:
    xp = _xp(sums)
    return sums / xp.expand_dims(xp.asarray(weight), -1)


def _label_rows(y, raw):  # 1 where the predicted class is the target
    predicted = predicted_class(raw[:, 0] if raw.shape[1] == 1 else raw)
    return (predicted == y.astype(jnp.int32)).astype(jnp.float32)[:, None]


def _log_loss_rows(y, raw):
    return (_logloss_rows(y, raw) if raw.shape[1] == 1 else _multiclass_rows(y, raw))[:, None]


def _r2_stats(y, w):
    """``[K]`` the weighted variance of each output's targets (two passes: no cancellation)."""
    y = as_columns(y).astype(w.dtype)
    weight = jnp.sum(w)
    mean = (w @ y) / weight
    return (w @ (y - mean) ** 2) / weight


def _r2_final(sums, weight, total):
    xp = _xp(sums)
    residual = _per_weight(sums, weight)
    total = xp.asarray(total, residual.dtype)
    ok = total > 0
    ratio = xp.where(ok, 1.0 - residual / xp.where(ok, total, 1.0), xp.where(residual == 0, 1.0, 0.0))
    return ratio.mean(axis=-1)


def _squared_rows(y, raw):
    return (raw - as_columns(y)) ** 2


def _mean_error(sums, weight, stats):
    return -_per_weight(sums, weight).mean(axis=-1)


def _root_mean_error(sums, weight, stats):
    return -_xp(sums).sqrt(_per_weight(sums, weight)).mean(axis=-1)


def _mean_gain(sign):
    return lambda sums, weight, stats: sign * sums[..., 0] / weight


ROW_SCORES: dict[str, RowScore] = {
    "neg_mean_squared_error": RowScore(_squared_rows, _mean_error),
    "neg_root_mean_squared_error": RowScore(_squared_rows, _root_mean_error),
    "neg_mean_absolute_error": RowScore(lambda y, raw: jnp.abs(raw - as_columns(y)), _mean_error),
    "r2": RowScore(_squared_rows, _r2_final, _r2_stats),
    "accuracy": RowScore(_label_rows, _mean_gain(1.0)),
    "neg_log_loss": RowScore(_log_loss_rows, _mean_gain(-1.0)),
    "neg_brier_score": RowScore(lambda y, raw: (jax.nn.sigmoid(raw) - as_columns(y)) ** 2, _mean_gain(-1.0)),
}


def block_sums(score: RowScore, y: Array, weight: Array, both: Array) -> Array:
    """``f32[R, G + 1, 1 + n_terms]``: a block's weighted sums of ``score``'s row terms in each
    repeat, after the sum of the weights themselves (term 0).

    Args:
        score: the score.
        y: ``[n]`` (or ``[n, K]``) the block's targets.
        weight: ``f32[n, R]`` each row's weight in each repeat's score (0 for rows a repeat
            does not score, and for padding).
        both: ``f32[n_sources, G + 1, n, K]`` raw predictions, baseline first, then with each
            group permuted; ``n_sources`` is R, or 1 when every repeat has its own rows
            (``weight`` tells them apart).

    Every (repeat, group) is summed by the same reduction, so a prediction that a permutation
    leaves bitwise unchanged gives a bitwise equal sum.
    """
    def terms(raw):
        return jnp.concatenate([jnp.ones((raw.shape[0], 1), raw.dtype), score.rows(y, raw)], axis=1)

    per_row = jax.vmap(jax.vmap(terms))(both)  # [n_sources, G + 1, n, 1 + n_terms]
    return jnp.sum(per_row * weight.T[:, None, :, None], axis=2)


@functools.cache
def _loss_row_score(name: str) -> RowScore:
    """The model loss ``name`` as a :class:`RowScore` (one object per loss: a static argument)."""
    loss = MODEL_LOSSES[name]
    return RowScore(lambda y, raw: loss.row_loss(y, raw)[:, None],
                    lambda sums, weight, stats: -loss.final(sums[..., 0], weight))


def row_score(scoring: Any, ens: Ensemble) -> RowScore | None:
    """The :class:`RowScore` of an already resolved ``scoring`` (None: the model's loss), or None
    for scores that are not sums over rows (ROC AUC, F1, functions)."""
    if scoring is None:
        return _loss_row_score(ens.loss_function)
    if isinstance(scoring, str):
        return ROW_SCORES.get(scoring)
    return None


def check_scorer_targets(scoring: Any, y: Any, task: Task, n_classes: int, fn_name: str) -> None:
    """Targets (checked by :func:`as_targets`) that a named scorer needs: class labels (not
    probabilities), every class for AUC."""
    if not isinstance(scoring, str) or isinstance(y, jax.core.Tracer):
        return
    needs_labels = task == "binary" and scoring in _LABEL_SCORERS
    if not (needs_labels or scoring.startswith("roc_auc")):
        return
    if targets_on_device(y):
        summary = jax.device_get(target_summary(y, n_classes))
        labels, present = bool(summary["whole"]), np.flatnonzero(summary["present"]).tolist()
    else:
        labels, present = bool(np.all((y == 0) | (y == 1))), np.unique(y).astype(int).tolist()
    if needs_labels and not labels:
        raise ValueError(f"{fn_name}: scoring {scoring!r} needs y to hold class labels, not probabilities")
    if scoring.startswith("roc_auc"):
        missing = sorted(set(range(n_classes)) - set(present))
        if missing:
            raise ValueError(
                f"{fn_name}: scoring {scoring!r} needs every class in y; classes {missing} are absent"
            )
