"""The scores of permutation importance and LossFunctionChange: scikit-learn's scorers against
sklearn.metrics on random data, the model losses against CatBoost's eval_metrics.

Oracles run in float64 (sklearn, CatBoost); jaximp runs in float32 over a few hundred rows, so
scores agree to rtol 1e-5 (float32 sums of ~300 terms of magnitude ~1), atol 1e-6.
"""

from __future__ import annotations

import catboost
import jax
import numpy as np
import pytest
import sklearn.metrics as skm
from models import train
from scipy.special import expit, softmax

import jaximp
from jaximp._importances import metrics as m
from jaximp._importances import scoring
from jaximp._rows import targets
from jaximp._rows.inputs import as_weights

RTOL, ATOL = 1e-5, 1e-6
N, K = 300, 3


def _weights(rng, weighted):
    return rng.uniform(0.2, 3.0, N) if weighted else None


def _jax(fn, y, raw, w):
    ones = np.ones(len(y), np.float32)
    return float(jax.jit(fn)(y, np.float32(raw), ones if w is None else np.float32(w)))


def _regression_data(rng, k):
    shape = (N,) if k == 1 else (N, k)
    y = rng.normal(size=shape).astype(np.float32)
    raw = (y + rng.normal(scale=0.7, size=shape)).astype(np.float32)
    return y, raw


@pytest.mark.parametrize("k", [1, K])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("name, oracle", [
    ("neg_mean_squared_error", lambda y, p, w: -skm.mean_squared_error(y, p, sample_weight=w)),
    ("neg_root_mean_squared_error", lambda y, p, w: -skm.root_mean_squared_error(y, p, sample_weight=w)),
    ("neg_mean_absolute_error", lambda y, p, w: -skm.mean_absolute_error(y, p, sample_weight=w)),
    ("r2", lambda y, p, w: skm.r2_score(y, p, sample_weight=w)),
    ("explained_variance", lambda y, p, w: skm.explained_variance_score(y, p, sample_weight=w)),
])
def test_regression_scorers_match_sklearn(name, oracle, k, weighted):
    rng = np.random.default_rng(k + 10 * weighted)
    y, raw = _regression_data(rng, k)
    w = _weights(rng, weighted)
    fn, _ = scoring.SCORERS[name]
    np.testing.assert_allclose(_jax(fn, y, raw, w), oracle(np.float64(y), np.float64(raw), w),
                               rtol=RTOL, atol=ATOL)


def test_r2_constant_target_is_finite_like_sklearn():
    y = np.ones(N, np.float32)
    for raw in (y, y + 0.5):
        np.testing.assert_allclose(_jax(m.r2, y, raw, None), skm.r2_score(y, raw), rtol=0, atol=0)


def _binary_data(rng, ties):
    raw = rng.normal(scale=2.0, size=N)
    if ties:
        raw = np.round(raw)  # many tied scores across both classes
    y = (rng.random(N) < expit(raw + rng.normal(size=N))).astype(np.float32)
    return y, raw.astype(np.float32)


def _multiclass_data(rng, ties):
    raw = rng.normal(scale=2.0, size=(N, K))
    if ties:  # repeated rows: tied probabilities in float32 and float64 alike
        raw = raw[rng.integers(0, 20, N)]
    y = np.array([rng.choice(K, p=p) for p in softmax(raw + rng.normal(size=(N, K)), axis=1)], np.int32)
    return y, raw.astype(np.float32)


def _binary_oracles():
    def proba(raw):
        return expit(np.float64(raw))

    def label(raw):
        return (raw > 0).astype(int)
    return {
        "accuracy": lambda y, raw, w: skm.accuracy_score(y, label(raw), sample_weight=w),
        "balanced_accuracy": lambda y, raw, w: skm.balanced_accuracy_score(y, label(raw), sample_weight=w),
        "neg_log_loss": lambda y, raw, w: -skm.log_loss(y, np.stack([1 - proba(raw), proba(raw)], 1),
                                                       sample_weight=w),
        "neg_brier_score": lambda y, raw, w: -skm.brier_score_loss(y, proba(raw), sample_weight=w),
        "roc_auc": lambda y, raw, w: skm.roc_auc_score(y, raw, sample_weight=w),
        "precision": lambda y, raw, w: skm.precision_score(y, label(raw), sample_weight=w),
        "recall": lambda y, raw, w: skm.recall_score(y, label(raw), sample_weight=w),
        "f1": lambda y, raw, w: skm.f1_score(y, label(raw), sample_weight=w),
        "f1_macro": lambda y, raw, w: skm.f1_score(y, label(raw), average="macro", sample_weight=w),
        "f1_weighted": lambda y, raw, w: skm.f1_score(y, label(raw), average="weighted", sample_weight=w),
    }


def _multiclass_oracles():
    def proba(raw):
        return softmax(np.float64(raw), axis=1)

    def label(raw):
        return np.argmax(raw, axis=1)
    return {
        "accuracy": lambda y, raw, w: skm.accuracy_score(y, label(raw), sample_weight=w),
        "balanced_accuracy": lambda y, raw, w: skm.balanced_accuracy_score(y, label(raw), sample_weight=w),
        "neg_log_loss": lambda y, raw, w: -skm.log_loss(y, proba(raw), sample_weight=w),
        "roc_auc_ovr": lambda y, raw, w: skm.roc_auc_score(y, proba(raw), multi_class="ovr", sample_weight=w),
        "roc_auc_ovr_weighted": lambda y, raw, w: skm.roc_auc_score(
            y, proba(raw), multi_class="ovr", average="weighted", sample_weight=w),
        "f1_macro": lambda y, raw, w: skm.f1_score(y, label(raw), average="macro", sample_weight=w),
        "f1_weighted": lambda y, raw, w: skm.f1_score(y, label(raw), average="weighted", sample_weight=w),
    }


_CLASSIFICATION = {  # task: (seed, data, oracles)
    "binary": (1, _binary_data, _binary_oracles),
    "multiclass": (5, _multiclass_data, _multiclass_oracles),
}


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("task, name", [(t, n) for t, (_, _, o) in _CLASSIFICATION.items() for n in sorted(o())])
def test_classification_scorers_match_sklearn(task, name, weighted, ties):
    seed, data, oracles = _CLASSIFICATION[task]
    rng = np.random.default_rng(seed + weighted + 2 * ties)
    y, raw = data(rng, ties)
    w = _weights(rng, weighted)
    fn, tasks = scoring.SCORERS[name]
    assert task in tasks
    np.testing.assert_allclose(_jax(fn, y, raw, w), oracles()[name](y, raw, w), rtol=RTOL, atol=ATOL)


@pytest.mark.filterwarnings("ignore:y_pred contains classes not in y_true")
def test_balanced_accuracy_ignores_classes_absent_from_y():
    rng = np.random.default_rng(3)
    raw = rng.normal(size=(N, K)).astype(np.float32)
    y = rng.integers(0, 2, N).astype(np.int32)  # class 2 never true, sometimes predicted
    want = skm.balanced_accuracy_score(y, np.argmax(raw, 1))
    np.testing.assert_allclose(_jax(m.balanced_accuracy, y, raw, None), want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("kind, metric", [
    ("regression", "RMSE"), ("regression", "MAE"), ("binary", "Logloss"), ("binary", "CrossEntropy"),
    ("multiclass", "MultiClass"), ("multiregression", "MultiRMSE"),
])
@pytest.mark.parametrize("weighted", [False, True])
def test_model_losses_match_catboost_eval_metrics(kind, metric, weighted):
    model, X, y, w = train(kind, weighted=weighted)
    ens = jaximp.from_catboost(model)
    raw = np.asarray(ens.predict(X))
    want = model.eval_metrics(catboost.Pool(X, y, weight=w), [metric])[metric][-1]
    yt = targets.as_targets(y, ens, len(X), "test")
    got = -_jax(scoring.loss_score(metric), yt, raw, w)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_loss_change_matches_difference_of_losses():
    rng = np.random.default_rng(4)
    y, raw = _regression_data(rng, K)
    delta = rng.normal(size=(N, K)).astype(np.float32)
    loss = scoring.MODEL_LOSSES["MultiRMSE"]
    want = np.sum((np.float64(raw) - delta - y) ** 2 - (np.float64(raw) - y) ** 2, axis=1)
    np.testing.assert_allclose(loss.change(y, raw, delta), want, rtol=RTOL, atol=1e-5)


def test_targets_map_class_labels_through_class_names():
    model = catboost.CatBoostClassifier(iterations=3, depth=2, verbose=0, thread_count=1,
                                        allow_writing_files=False)
    X = np.random.default_rng(0).normal(size=(60, 3)).astype(np.float32)
    labels = np.array(["cat", "dog", "emu"])[np.digitize(X[:, 0], [-0.5, 0.5])]
    model.fit(X, labels)
    ens = jaximp.from_catboost(model)
    got = targets.as_targets(labels, ens, len(X), "f")
    np.testing.assert_array_equal(np.asarray(ens.class_names)[got], labels)
    with pytest.raises(ValueError, match=r"f: y must hold the model's class labels .*'cow'"):
        targets.as_targets(np.where(labels == "cat", "cow", labels), ens, len(X), "f")


@pytest.mark.parametrize("kind, y, error, match", [
    ("regression", np.zeros(5), ValueError, r"f: y must have shape \(400,\)"),
    ("regression", np.array(["a"] * 400), TypeError, "f: y must hold numbers for a regression model"),
    ("regression", np.full(400, np.nan), ValueError, "f: y must be finite"),
    ("binary", np.full(400, 7), ValueError, r"f: y must hold the model's class labels \[0, 1\]"),
    ("multiregression", np.zeros(400), ValueError, r"f: y must have shape \(400, 2\)"),
])
def test_bad_targets_raise(kind, y, error, match):
    ens = jaximp.from_catboost(train(kind)[0])
    with pytest.raises(error, match=match):
        targets.as_targets(y, ens, 400, "f")


def test_resolve_scoring_names_the_valid_scorers():
    ens = jaximp.from_catboost(train("regression")[0])
    with pytest.raises(ValueError, match=r"f: scoring must be one of \[.*'r2'.*\] for a regression model; got 'r3'"):
        scoring.resolve_scoring("r3", ens, "regression", "f")
    with pytest.raises(ValueError, match="f: scoring 'accuracy' is defined for binary and multiclass models only"):
        scoring.resolve_scoring("accuracy", ens, "regression", "f")
    with pytest.raises(TypeError, match="f: scoring must be None, a scorer name or a function"):
        scoring.resolve_scoring(3, ens, "regression", "f")


def _row_score_value(score, y, raw, w):
    """A RowScore's value: its row terms summed with weights in float64, then its final."""
    raw2 = np.float32(raw).reshape(len(raw), -1)
    terms = np.asarray(jax.jit(score.rows)(y, raw2), np.float64)  # [n, S]
    w = np.ones(len(y)) if w is None else np.asarray(w, np.float64)
    stats = None if score.stats is None else np.asarray(score.stats(y, np.float32(w)), np.float64)
    return float(score.final(w @ terms, w.sum(), stats))


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("name", sorted(scoring.ROW_SCORES))
def test_row_scores_equal_their_scorers(name, weighted):
    """Every score that permutation importance sums inside its kernel (``RowScore``) equals the
    scorer of the same name computed on all rows at once, on each task it is defined for."""
    rng = np.random.default_rng(5)
    w = _weights(rng, weighted)
    _, tasks = scoring.SCORERS[name]
    for task in tasks:
        if task in ("regression", "multiregression"):
            y, raw = _regression_data(rng, 1 if task == "regression" else K)
        elif task == "binary":
            y = rng.integers(0, 2, N).astype(np.float32)
            raw = rng.normal(size=N).astype(np.float32)
        else:
            y = rng.integers(0, K, N).astype(np.int32)
            raw = rng.normal(size=(N, K)).astype(np.float32)
        expected = _jax(scoring.SCORERS[name][0], y, raw, w)
        np.testing.assert_allclose(_row_score_value(scoring.ROW_SCORES[name], y, raw, w), expected, rtol=RTOL,
                                   atol=ATOL, err_msg=f"{name} {task}")


@pytest.mark.parametrize("kind, loss", [("regression", "RMSE"), ("binary", "Logloss"), ("multiclass", "MultiClass"),
                                        ("multiregression", "MultiRMSE")])
def test_model_loss_row_scores_equal_minus_the_loss(kind, loss):
    model, X, y, w = train(kind, depth=3, iterations=5, weighted=True)
    ens = jaximp.from_catboost(model)
    raw = np.asarray(ens.predict(X))
    yt = targets.as_targets(y, ens, len(y), "test")
    weights = as_weights(w, len(y), "test")
    assert scoring.model_loss(ens, "test") is scoring.MODEL_LOSSES[loss]
    expected = _jax(scoring.loss_score(loss), yt, raw, weights)
    np.testing.assert_allclose(_row_score_value(scoring.row_score(None, ens), yt, raw, weights), expected,
                               rtol=RTOL, atol=ATOL)
    assert scoring.row_score(None, ens) is scoring.row_score(None, ens)  # one object per loss: a static argument
    assert scoring.row_score("roc_auc", ens) is None and scoring.row_score(lambda y, r, w: 0.0, ens) is None
