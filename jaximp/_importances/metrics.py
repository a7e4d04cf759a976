"""The metrics of ``sklearn.metrics`` as pure JAX functions of ``(y, raw_prediction, sample_weight)``.

Every metric takes the targets ``y``, the model's raw predictions in the API layout
(``f32[n]`` when K == 1, ``f32[n, K]`` otherwise) and ``sample_weight: f32[n]``, and returns a
scalar. Targets are in the layout of ``jaximp._rows.targets.as_targets``:

* regression: ``f32[n]``; multi-regression: ``f32[n, K]``;
* binary (``Logloss``/``CrossEntropy``): ``f32[n]`` in ``[0, 1]``; raw = log-odds of the second
  class;
* multiclass (``MultiClass``): ``i32[n]`` class indices; raw = per-class scores, softmax.

Each reproduces the ``sklearn.metrics`` function of its name with ``sample_weight``
(multi-output regression: the default ``multioutput="uniform_average"``). Differences:
probabilities are never clipped (sklearn clips at float64 eps, which only matters for
``|raw| > 36``), and the multiclass ROC AUC needs every class present in ``y``. The scorers
that name them ("greater is better", as ``sklearn.metrics.get_scorer``) and the model's own
losses are in ``jaximp._importances.scoring``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import Array

from jaximp._models.ensemble import safe_div

# ----------------------------------------------------------------------------------------
# Building blocks


def _weighted_mean(values: Array, w: Array) -> Array:
    """Weighted mean over the row axis (axis 0) of ``values: [n, ...]``."""
    w = w.reshape(w.shape + (1,) * (values.ndim - 1))
    return jnp.sum(w * values, axis=0) / jnp.sum(w, axis=0)


def _finite_ratio(num: Array, den: Array) -> Array:
    """``1 - num/den``, with sklearn's ``force_finite``: 1 when both are 0, 0 when only den is."""
    safe = jnp.where(den > 0, den, 1.0)
    return jnp.where(den > 0, 1.0 - num / safe, jnp.where(num == 0, 1.0, 0.0))


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


def predicted_class(raw: Array) -> Array:
    """``i32[n]``: 1 where the log-odds are positive (binary), else the argmax of the scores."""
    return (raw > 0).astype(jnp.int32) if raw.ndim == 1 else jnp.argmax(raw, axis=-1).astype(jnp.int32)


def _confusion(y: Array, raw: Array, w: Array, n_classes: int) -> Array:
    """``f32[K, K]`` weighted confusion matrix, rows = true class, columns = predicted."""
    true = jax.nn.one_hot(y.astype(jnp.int32), n_classes) * w[:, None]
    pred = jax.nn.one_hot(predicted_class(raw), n_classes)
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
    return _weighted_mean((predicted_class(raw) == y.astype(jnp.int32)).astype(w.dtype), w)


def balanced_accuracy(y, raw, w):
    """``sklearn.metrics.balanced_accuracy_score``: mean recall over the classes present in ``y``."""
    c = _confusion(y, raw, w, _n_classes(raw))
    support = c.sum(axis=1)
    present = support > 0
    recall = safe_div(jnp.diag(c), support)
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
    return safe_div(tp, pred), safe_div(tp, true), safe_div(2 * tp, true + pred), true, pred


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
