"""Metrics as pure JAX functions of ``(y, raw_prediction, sample_weight)``, and target checks.

Every metric takes the targets ``y``, the model's raw predictions in the API layout
(``f32[n]`` when K == 1, ``f32[n, K]`` otherwise) and ``sample_weight: f32[n]``, and returns a
scalar. Targets are what :func:`as_targets` makes of the user's ``y``:

* regression: ``f32[n]``; multi-regression: ``f32[n, K]``;
* binary (``Logloss``/``CrossEntropy``): ``f32[n]`` in ``[0, 1]`` (class labels mapped to 0/1
  through the model's class names); raw = log-odds of the second class;
* multiclass (``MultiClass``): ``i32[n]`` class indices; raw = per-class scores, softmax.

Two families live here:

* sklearn scorers by name (:data:`SCORERS`), "greater is better" like
  ``sklearn.metrics.get_scorer``: ``neg_mean_squared_error``, ``r2``, ``accuracy``,
  ``neg_log_loss``, ``roc_auc``, ... Each reproduces the ``sklearn.metrics`` function with
  ``sample_weight`` (multi-output regression: the default ``multioutput="uniform_average"``).
  Differences: probabilities are never clipped (sklearn clips at float64 eps, which only matters
  for ``|raw| > 36``), and the multiclass ROC AUC needs every class present in ``y``.
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

from jaximp._models.oblivious import ObliviousEnsemble

Task = str  # "regression" | "multiregression" | "binary" | "multiclass"
_BINARY_LOSSES = ("Logloss", "CrossEntropy")
_MULTICLASS_LOSSES = ("MultiClass", "MultiClassOneVsAll")


def check_loss_known(ens: ObliviousEnsemble, fn_name: str) -> None:
    """A ValueError when the model file did not record its training loss (never guessed)."""
    if not ens.loss_function:
        raise ValueError(
            f"{fn_name}: the model's loss_function must be known for this result; the model file "
            "does not record it: import it with jaximp.from_catboost(model, loss_function='RMSE') "
            "(or the loss it was trained with)"
        )


def task_of(ens: ObliviousEnsemble, fn_name: str = "task_of") -> Task:
    """The model's output kind, from its loss and number of outputs.

    A model with no loss but one output per class (scikit-learn's tree and forest classifiers,
    whose outputs are class probabilities) is "multiclass": scorers of the highest-scoring
    class apply to it, not those that read its outputs as logits (see :func:`resolve_scoring`).
    """
    if not ens.loss_function and ens.n_outputs > 1 and len(ens.class_names) == ens.n_outputs:
        return "multiclass"
    check_loss_known(ens, fn_name)
    if ens.loss_function in _BINARY_LOSSES:
        return "binary"
    if ens.loss_function in _MULTICLASS_LOSSES:
        return "multiclass"
    return "regression" if ens.n_outputs == 1 else "multiregression"


# ----------------------------------------------------------------------------------------
# Building blocks


def _weighted_mean(values: Array, w: Array) -> Array:
    """Weighted mean over the row axis (axis 0) of ``values: [n, ...]``."""
    w = w.reshape(w.shape + (1,) * (values.ndim - 1))
    return jnp.sum(w * values, axis=0) / jnp.sum(w, axis=0)


def _columns(values: Array) -> Array:
    """``[n, K]`` view of ``[n]`` or ``[n, K]`` (one column per output)."""
    return values[:, None] if values.ndim == 1 else values


def _finite_ratio(num: Array, den: Array) -> Array:
    """``1 - num/den``, with sklearn's ``force_finite``: 1 when both are 0, 0 when only den is."""
    safe = jnp.where(den > 0, den, 1.0)
    return jnp.where(den > 0, 1.0 - num / safe, jnp.where(num == 0, 1.0, 0.0))


def _safe_div(num: Array, den: Array) -> Array:
    """``num / den``, 0 where ``den == 0`` (sklearn's ``zero_division=0``)."""
    return jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), 0.0)


def binary_roc_auc(y: Array, score: Array, w: Array) -> Array:
    """Weighted ROC AUC of ``score: f32[n]`` for labels ``y`` in {0, 1}, ties counting 1/2.

    ``sum_i w_i [y_i = 1] (W-(score < s_i) + W-(score = s_i) / 2) / (W+ W-)``, the
    Mann-Whitney form of the trapezoidal area under sklearn's ``roc_curve``. Only the scores
    are sorted, as int32 keys (XLA's CPU sort is several times slower on floats, and again
    with a payload): each score's tie group is the first place of its key among the sorted
    keys, where the group's negative weight is added up.
    """
    pos, neg = y * w, (1.0 - y) * w
    key = _sort_key(score)
    group = jnp.searchsorted(jnp.sort(key), key, side="left")  # [n] first place of the score's ties
    tied = jnp.zeros_like(neg).at[group].add(neg)  # negative weight of each tie group
    below = jnp.cumsum(tied) - tied  # negative weight of the lower scores
    credit = below[group] + 0.5 * tied[group]
    return jnp.sum(pos * credit) / (jnp.sum(pos) * jnp.sum(neg))


def _sort_key(x: Array) -> Array:
    """``i32`` keys in the order of the ``f32`` values ``x`` (-0.0 and 0.0 equal)."""
    x = x.astype(jnp.float32)
    bits = jax.lax.bitcast_convert_type(jnp.where(x == 0, 0.0, x), jnp.int32)  # -0.0 as 0.0
    return jnp.where(bits < 0, bits ^ jnp.int32(0x7FFFFFFF), bits)


def _class_scores(raw: Array) -> Array:
    """``f32[n, K]`` per-class probabilities from raw scores (softmax)."""
    return jax.nn.softmax(raw, axis=-1)


def _predicted_class(raw: Array) -> Array:
    """``i32[n]``: 1 where the log-odds are positive (binary), else the argmax of the scores."""
    return (raw > 0).astype(jnp.int32) if raw.ndim == 1 else jnp.argmax(raw, axis=-1).astype(jnp.int32)


def _confusion(y: Array, raw: Array, w: Array, n_classes: int) -> Array:
    """``f32[K, K]`` weighted confusion matrix, rows = true class, columns = predicted."""
    true = jax.nn.one_hot(y.astype(jnp.int32), n_classes) * w[:, None]
    pred = jax.nn.one_hot(_predicted_class(raw), n_classes)
    return true.T @ pred


def _n_classes(raw: Array) -> int:
    return 2 if raw.ndim == 1 else raw.shape[-1]


# ----------------------------------------------------------------------------------------
# Regression (K == 1: y, raw f32[n]; multi-regression: f32[n, K], averaged over outputs)


def mean_squared_error(y, raw, w):
    """``sklearn.metrics.mean_squared_error``."""
    return jnp.mean(_weighted_mean((raw - y) ** 2, w))


def root_mean_squared_error(y, raw, w):
    """``sklearn.metrics.root_mean_squared_error``: the mean over outputs of per-output RMSE."""
    return jnp.mean(jnp.sqrt(_weighted_mean((raw - y) ** 2, w)))


def mean_absolute_error(y, raw, w):
    """``sklearn.metrics.mean_absolute_error``."""
    return jnp.mean(_weighted_mean(jnp.abs(raw - y), w))


def r2(y, raw, w):
    """``sklearn.metrics.r2_score``: ``1 - sum w (y - raw)^2 / sum w (y - mean_w y)^2``."""
    num = _weighted_mean((y - raw) ** 2, w)  # [] or [K]: scalars for one output (fast on CPU)
    den = _weighted_mean((y - _weighted_mean(y, w)) ** 2, w)
    return jnp.mean(_finite_ratio(num, den))


def explained_variance(y, raw, w):
    """``sklearn.metrics.explained_variance_score``: ``1 - var_w(y - raw) / var_w(y)``."""
    err = y - raw
    num = _weighted_mean((err - _weighted_mean(err, w)) ** 2, w)
    den = _weighted_mean((y - _weighted_mean(y, w)) ** 2, w)
    return jnp.mean(_finite_ratio(num, den))


# ----------------------------------------------------------------------------------------
# Classification (binary: y f32[n] in {0, 1}, raw = log-odds f32[n];
#                 multiclass: y i32[n], raw f32[n, K])


def accuracy(y, raw, w):
    """``sklearn.metrics.accuracy_score`` of the predicted class (log-odds > 0, or argmax)."""
    return _weighted_mean((_predicted_class(raw) == y.astype(jnp.int32)).astype(w.dtype), w)


def balanced_accuracy(y, raw, w):
    """``sklearn.metrics.balanced_accuracy_score``: mean recall over the classes present in ``y``."""
    c = _confusion(y, raw, w, _n_classes(raw))
    support = c.sum(axis=1)
    present = support > 0
    recall = _safe_div(jnp.diag(c), support)
    return jnp.sum(jnp.where(present, recall, 0.0)) / jnp.sum(present)


def log_loss(y, raw, w):
    """``sklearn.metrics.log_loss`` of the model's probabilities (sigmoid or softmax of raw)."""
    if raw.ndim == 1:
        return _weighted_mean(jax.nn.softplus(raw) - y * raw, w)
    logp = jax.nn.log_softmax(raw, axis=-1)
    return -_weighted_mean(jnp.take_along_axis(logp, y.astype(jnp.int32)[:, None], axis=1)[:, 0], w)


def brier_score(y, raw, w):
    """``sklearn.metrics.brier_score_loss`` (binary): ``mean_w (sigmoid(raw) - y)^2``."""
    return _weighted_mean((jax.nn.sigmoid(raw) - y) ** 2, w)


def roc_auc(y, raw, w):
    """``sklearn.metrics.roc_auc_score`` (binary): AUC of the log-odds (ties count 1/2)."""
    return binary_roc_auc(y, raw, w)


def _ovr_auc(y, raw, w, *, weighted: bool):
    """One-vs-rest multiclass AUC on softmax probabilities, macro or support-weighted."""
    k = raw.shape[-1]
    onehot = jax.nn.one_hot(y.astype(jnp.int32), k)
    aucs = jax.vmap(binary_roc_auc, in_axes=(1, 1, None))(onehot, _class_scores(raw), w)
    if not weighted:
        return jnp.mean(aucs)
    support = jnp.sum(onehot * w[:, None], axis=0)
    return jnp.sum(aucs * support) / jnp.sum(support)


def roc_auc_ovr(y, raw, w):
    """``roc_auc_score(multi_class="ovr", average="macro")`` on softmax probabilities."""
    return _ovr_auc(y, raw, w, weighted=False)


def roc_auc_ovr_weighted(y, raw, w):
    """``roc_auc_score(multi_class="ovr", average="weighted")`` on softmax probabilities."""
    return _ovr_auc(y, raw, w, weighted=True)


def _precision_recall_f1(y, raw, w):
    """Per-class weighted ``(precision, recall, f1, true support, predicted support)``."""
    c = _confusion(y, raw, w, _n_classes(raw))
    tp, true, pred = jnp.diag(c), c.sum(axis=1), c.sum(axis=0)
    return _safe_div(tp, pred), _safe_div(tp, true), _safe_div(2 * tp, true + pred), true, pred


def precision(y, raw, w):
    """``sklearn.metrics.precision_score`` (binary, positive class 1)."""
    return _precision_recall_f1(y, raw, w)[0][1]


def recall(y, raw, w):
    """``sklearn.metrics.recall_score`` (binary, positive class 1)."""
    return _precision_recall_f1(y, raw, w)[1][1]


def f1(y, raw, w):
    """``sklearn.metrics.f1_score`` (binary, positive class 1)."""
    return _precision_recall_f1(y, raw, w)[2][1]


def f1_macro(y, raw, w):
    """``f1_score(average="macro")`` over the classes present in ``y`` or in the predictions."""
    _, _, f, true, pred = _precision_recall_f1(y, raw, w)
    present = (true + pred) > 0
    return jnp.sum(jnp.where(present, f, 0.0)) / jnp.sum(present)


def f1_weighted(y, raw, w):
    """``f1_score(average="weighted")``: per-class F1 weighted by the true (weighted) support."""
    _, _, f, true, _ = _precision_recall_f1(y, raw, w)
    return jnp.sum(f * true) / jnp.sum(true)


def _negated(fn: Callable) -> Callable:
    def neg(y, raw, w):
        return -fn(y, raw, w)

    neg.__name__ = f"neg_{fn.__name__}"
    neg.__doc__ = f"Minus {fn.__name__} (greater is better)."
    return neg


_REGRESSION = ("regression", "multiregression")
_CLASSES = ("binary", "multiclass")

# sklearn scorer name -> (metric, tasks where it is defined). Every scorer is "greater is better".
SCORERS: dict[str, tuple[Callable, tuple[Task, ...]]] = {
    "neg_mean_squared_error": (_negated(mean_squared_error), _REGRESSION),
    "neg_root_mean_squared_error": (_negated(root_mean_squared_error), _REGRESSION),
    "neg_mean_absolute_error": (_negated(mean_absolute_error), _REGRESSION),
    "r2": (r2, _REGRESSION),
    "explained_variance": (explained_variance, _REGRESSION),
    "accuracy": (accuracy, _CLASSES),
    "balanced_accuracy": (balanced_accuracy, _CLASSES),
    "neg_log_loss": (_negated(log_loss), _CLASSES),
    "neg_brier_score": (_negated(brier_score), ("binary",)),
    "roc_auc": (roc_auc, ("binary",)),
    "roc_auc_ovr": (roc_auc_ovr, ("multiclass",)),
    "roc_auc_ovr_weighted": (roc_auc_ovr_weighted, ("multiclass",)),
    "precision": (precision, ("binary",)),
    "recall": (recall, ("binary",)),
    "f1": (f1, ("binary",)),
    "f1_macro": (f1_macro, _CLASSES),
    "f1_weighted": (f1_weighted, _CLASSES),
}
_LABEL_SCORERS = {name for name, (_, tasks) in SCORERS.items() if set(tasks) <= set(_CLASSES)}
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
    return jnp.sum(delta * (delta - 2.0 * (raw - _columns(y))), axis=-1)


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


def model_loss(ens: ObliviousEnsemble, fn_name: str) -> ModelLoss:
    """The :class:`ModelLoss` of ``ens.loss_function``, or a ValueError naming the supported ones."""
    check_loss_known(ens, fn_name)
    if ens.loss_function not in MODEL_LOSSES:
        raise ValueError(
            f"{fn_name}: the model's loss_function must be one of {sorted(MODEL_LOSSES)} to be "
            f"computed here; got {ens.loss_function!r} (pass scoring= a metric name or function)"
        )
    return MODEL_LOSSES[ens.loss_function]


@functools.cache
def loss_score(loss: ModelLoss) -> Callable:
    """``(y, raw, w) -> -loss``, the "greater is better" score of a model loss (API layout raw)."""

    def score(y, raw, w):
        total = jnp.sum(w * loss.row_loss(y, _columns(raw)))
        return -loss.final(total, jnp.sum(w))

    return score


def resolve_scoring(scoring: Any, ens: ObliviousEnsemble, task: Task, fn_name: str) -> Callable:
    """A ``(y, raw, w) -> score`` function from ``scoring`` (None, a scorer name or a callable).

    Raises:
        ValueError: an unknown name or one not defined for the model's output kind.
        TypeError: ``scoring`` is neither None, a string nor callable.
    """
    if scoring is None:
        return loss_score(model_loss(ens, fn_name))
    if callable(scoring):
        return scoring
    if not isinstance(scoring, str):
        raise TypeError(
            f"{fn_name}: scoring must be None, a scorer name or a function (y, raw, w) -> score; "
            f"got {type(scoring).__name__}"
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


# ----------------------------------------------------------------------------------------
# Scores that are functions of sums over rows (scored inside a kernel, block by block)


@dataclasses.dataclass(frozen=True)
class RowScore:
    """A score computed from weighted sums over rows: ``final(sum_i w_i rows(y_i, raw_i), ...)``.

    ``rows(y, raw f32[n, K]) -> f32[n, S]`` are per-row terms (a kernel sums them per block,
    the host adds the blocks in float64); ``final(sums f64[..., S], weight f64[], y, w) -> f64[...]``
    is the score from the sums, the total weight and the scored rows' targets and weights (NumPy,
    for terms that depend on the targets alone, such as R^2's total sum of squares). Equal to the
    named scorer of :data:`SCORERS` computed on all rows at once (``tests/test_metrics.py``).
    """

    rows: Callable[[Array, Array], Array]
    final: Callable[..., Any]


def _label_rows(y, raw):  # 1 where the predicted class is the target
    predicted = _predicted_class(raw[:, 0] if raw.shape[1] == 1 else raw)
    return (predicted == y.astype(jnp.int32)).astype(jnp.float32)[:, None]


def _log_loss_rows(y, raw):
    return (_logloss_rows(y, raw) if raw.shape[1] == 1 else _multiclass_rows(y, raw))[:, None]


def _r2_final(sums, weight, y, w):
    y = y.reshape(len(y), -1).astype(np.float64)
    mean = (w @ y) / weight
    total = (w @ (y - mean) ** 2) / weight  # [K]
    residual = sums / weight
    ok = total > 0
    ratio = np.where(ok, 1.0 - residual / np.where(ok, total, 1.0), np.where(residual == 0, 1.0, 0.0))
    return ratio.mean(axis=-1)


def _squared_rows(y, raw):
    return (raw - _columns(y)) ** 2


ROW_SCORES: dict[str, RowScore] = {
    "neg_mean_squared_error": RowScore(_squared_rows, lambda s, n, y, w: -np.mean(s / n, axis=-1)),
    "neg_root_mean_squared_error": RowScore(_squared_rows, lambda s, n, y, w: -np.mean(np.sqrt(s / n), axis=-1)),
    "neg_mean_absolute_error": RowScore(lambda y, raw: jnp.abs(raw - _columns(y)),
                                        lambda s, n, y, w: -np.mean(s / n, axis=-1)),
    "r2": RowScore(_squared_rows, _r2_final),
    "accuracy": RowScore(_label_rows, lambda s, n, y, w: s[..., 0] / n),
    "neg_log_loss": RowScore(_log_loss_rows, lambda s, n, y, w: -s[..., 0] / n),
    "neg_brier_score": RowScore(lambda y, raw: (jax.nn.sigmoid(raw) - _columns(y)) ** 2,
                                lambda s, n, y, w: -s[..., 0] / n),
}


def block_sums(score: RowScore, y: Array, weight: Array, both: Array) -> Array:
    """``f32[R, G + 1, S]``: a block's weighted sums of ``score``'s row terms in each repeat.

    Args:
        score: the score.
        y: ``[b]`` (or ``[b, K]``) the block's targets.
        weight: ``f32[b, R]`` each row's weight in each repeat's score (0 for rows a repeat
            does not score, and for padding).
        both: ``f32[R', G + 1, b, K]`` raw predictions, baseline first, then with each group
            permuted; R' = R, or 1 when every repeat has its own rows (``weight`` tells them apart).

    Every (repeat, group) is summed by the same reduction, so a prediction that a permutation
    leaves bitwise unchanged gives a bitwise equal sum.
    """
    terms = jax.vmap(jax.vmap(lambda raw: score.rows(y, raw)))(both)  # [R', G + 1, b, S]
    return jnp.sum(terms * weight.T[:, None, :, None], axis=2)


@functools.cache
def _loss_row_score(name: str) -> RowScore:
    """The model loss ``name`` as a :class:`RowScore` (one object per loss: a static argument)."""
    loss = MODEL_LOSSES[name]
    return RowScore(lambda y, raw: loss.row_loss(y, raw)[:, None],
                    lambda s, n, y, w: -np.asarray(loss.final(s[..., 0], n), np.float64))


def row_score(scoring: Any, ens: ObliviousEnsemble) -> RowScore | None:
    """The :class:`RowScore` of an already resolved ``scoring`` (None: the model's loss), or None
    for scores that are not sums over rows (ROC AUC, F1, functions)."""
    if scoring is None:
        return _loss_row_score(ens.loss_function)
    if isinstance(scoring, str):
        return ROW_SCORES.get(scoring)
    return None


def check_scorer_targets(scoring: Any, y: np.ndarray, task: Task, n_classes: int, fn_name: str) -> None:
    """Targets that a named scorer needs: class labels (not probabilities), every class for AUC."""
    if not isinstance(scoring, str):
        return
    if task == "binary" and scoring in _LABEL_SCORERS and not np.all((y == 0) | (y == 1)):
        raise ValueError(f"{fn_name}: scoring {scoring!r} needs y to hold class labels, not probabilities")
    if scoring.startswith("roc_auc"):
        missing = sorted(set(range(n_classes)) - set(np.unique(y).astype(int).tolist()))
        if missing:
            raise ValueError(
                f"{fn_name}: scoring {scoring!r} needs every class in y; classes {missing} are absent"
            )


# ----------------------------------------------------------------------------------------
# Targets and weights from the user


def as_targets(y: Any, ens: ObliviousEnsemble, n_rows: int, fn_name: str) -> np.ndarray:
    """The targets in the layout the metrics expect (see the module docstring).

    Args:
        y: labels or values; class labels are matched to ``ens.class_names`` when it has them.
        ens: the model.
        n_rows: N, the number of rows of X.
        fn_name: the public function, for error messages.

    Returns:
        ``f32[N]`` (regression, binary), ``f32[N, K]`` (multi-regression) or ``i32[N]``
        (multiclass class indices).

    Raises:
        TypeError: non-numeric targets for a regression.
        ValueError: wrong length or shape, NaN, or labels that are not the model's classes.
    """
    task = task_of(ens, fn_name)
    if isinstance(y, jax.core.Tracer):
        return _traced_targets(y, ens, task, n_rows, fn_name)
    if hasattr(y, "to_numpy"):  # pandas / polars Series or DataFrame
        y = y.to_numpy()
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1 and task != "multiregression":
        y = y[:, 0]
    want = (n_rows, ens.n_outputs) if task == "multiregression" else (n_rows,)
    if y.shape != want:
        raise ValueError(f"{fn_name}: y must have shape {want}, one target per row of X; got {y.shape}")
    if task in _CLASSES and ens.class_names:
        return _class_indices(y, ens.class_names, task, fn_name)
    if not (np.issubdtype(y.dtype, np.number) or y.dtype == bool):
        names = "" if task in _REGRESSION else " (the model has no class names)"
        raise TypeError(f"{fn_name}: y must hold numbers for a {task} model{names}; got dtype {y.dtype}")
    y = y.astype(np.float64)
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{fn_name}: y must be finite; got {int(np.sum(~np.isfinite(y)))} NaN/inf values")
    if task == "binary" and not np.all((y >= 0) & (y <= 1)):
        raise ValueError(f"{fn_name}: y must be 0/1 labels or probabilities in [0, 1]; got values in "
                         f"[{y.min()}, {y.max()}]")
    if task == "multiclass":
        if not np.all((y == np.round(y)) & (y >= 0) & (y < ens.n_outputs)):
            raise ValueError(f"{fn_name}: y must hold class indices 0..{ens.n_outputs - 1}")
        return y.astype(np.int32)
    return y.astype(np.float32)


def _traced_targets(y: Array, ens: ObliviousEnsemble, task: Task, n_rows: int, fn_name: str) -> Array:
    """Targets traced by ``jax.jit``, ``grad`` or ``vmap``, taken as the metrics' layout (see the
    module docstring: values, the second class's 0/1 or probability, class indices), never as
    class labels; only their shape can be checked."""
    if y.ndim == 2 and y.shape[1] == 1 and task != "multiregression":
        y = y[:, 0]
    want = (n_rows, ens.n_outputs) if task == "multiregression" else (n_rows,)
    if y.shape != want:
        raise ValueError(f"{fn_name}: y must have shape {want}, one target per row of X; got {y.shape}")
    if task == "multiclass":
        return y.astype(jnp.int32)
    return y.astype(jnp.result_type(float, y))


def _class_indices(y: np.ndarray, class_names: tuple, task: Task, fn_name: str) -> np.ndarray:
    """Map labels to their position in ``class_names`` (numbers by value, others by string)."""
    labels, inverse = np.unique(y, return_inverse=True)
    index = []
    for label in labels.tolist():  # a loop over the distinct labels, not over rows
        found = [i for i, name in enumerate(class_names) if _same_label(label, name)]
        index.append(found[0] if found else -1)
    index = np.asarray(index)
    if np.any(index < 0):
        bad = labels[np.flatnonzero(index < 0)[:5]].tolist()
        raise ValueError(f"{fn_name}: y must hold the model's class labels {list(class_names)}; got {bad}")
    out = index[inverse.reshape(-1)]
    return out.astype(np.float32) if task == "binary" else out.astype(np.int32)


def _same_label(label: Any, name: Any) -> bool:
    numbers = (int, float, np.number)
    if isinstance(label, numbers) and not isinstance(label, bool) and isinstance(name, numbers):
        return float(label) == float(name)
    return str(label) == str(name)
