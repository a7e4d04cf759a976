"""Permutation importance and LossFunctionChange against CatBoost, sklearn and closed forms.

Oracles:
* brute force with the same row draws: CatBoost predicts every permuted copy of X (float64
  scores from sklearn.metrics or CatBoost's eval_metrics); jaximp's float32 scores of ~1 over a
  few hundred rows agree to rtol/atol 1e-5;
* sklearn.inspection.permutation_importance on the same model: its permutations are its own, so
  means agree within sampling error (4 standard errors of the difference, 30 repeats each);
* a one-split model, whose expected permuted MSE is a closed form;
* CatBoost's get_feature_importance(type="LossFunctionChange"), float64: jaximp's float32 SHAP
  values and predictions (magnitude ~3) give LFC to atol 1e-5.
"""

from __future__ import annotations

import functools

import catboost
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sklearn.metrics as skm
from conftest import KINDS, make_data, random_ensemble, summed, train
from scipy.special import expit, softmax
from sklearn.inspection import permutation_importance as sklearn_permutation_importance

import jaximp
from jaximp import loss_function_change, permutation_importance
from jaximp._importances.permutation import _row_draws, as_key
from jaximp._importances.scoring import as_targets

RTOL, ATOL = 1e-5, 1e-5
slow = pytest.mark.slow
_EVAL_METRIC = {"regression": "RMSE", "binary": "Logloss", "multiclass": "MultiClass",
                "multiregression": "MultiRMSE"}


def _raw(model, X):
    return model.predict(X, prediction_type="RawFormulaVal")


def _brute_force(X, score, draws, groups):
    """``f64[G, R]``: the importances, permuting X in NumPy and predicting with CatBoost."""
    out = np.zeros((len(groups), len(draws)))
    for r, (rows, source) in enumerate(draws):
        base = score(rows, X[rows])
        for g, cols in enumerate(groups):
            permuted = X[rows].copy()
            permuted[:, cols] = X[source][:, cols]
            out[g, r] = base - score(rows, permuted)
    return out


def _eval_metric_score(model, kind, y, w):
    """Minus the model's loss on the given rows, computed by CatBoost."""
    def score(rows, X):
        pool = catboost.Pool(X, y[rows], weight=None if w is None else w[rows])
        return -model.eval_metrics(pool, [_EVAL_METRIC[kind]])[_EVAL_METRIC[kind]][-1]
    return score


@pytest.mark.parametrize("kind, weighted, max_samples", [  # weights and subsamples: once by default
    pytest.param(kind, weighted, max_samples, marks=slow if weighted and kind != "multiclass" else ())
    for weighted, max_samples in [(False, 1.0), (True, 0.6)] for kind in KINDS])
def test_model_loss_matches_brute_force_with_the_same_draws(kind, weighted, max_samples):
    model, X, y, w = train(kind, weighted=weighted)
    ens = jaximp.from_catboost(model)
    got = permutation_importance(ens, X, y, n_repeats=3, random_state=7, sample_weight=w,
                                 max_samples=max_samples)
    draws = _row_draws(as_key(7, "test"), 3, len(X), int(max_samples * len(X)))
    want = _brute_force(X, _eval_metric_score(model, kind, y, w), draws,
                        [[f] for f in range(X.shape[1])])
    np.testing.assert_allclose(got.importances, want, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got.importances_mean, want.mean(1), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got.importances_std, want.std(1), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("model_data", ["depth-1", "mixed depths", "depth-8"])
def test_tree_shapes_match_brute_force(model_data):
    # depth 1: every (feature, tree) pair flips one bit; mixed depths: padded depths;
    # depth 8: pairs with several depths on one feature
    if model_data == "mixed depths":
        model, X, y = summed("multiclass")
    else:
        model, X, y, _ = train("regression", depth=1 if model_data == "depth-1" else 8, iterations=12)
    kind = "multiclass" if model_data == "mixed depths" else "regression"
    ens = jaximp.from_catboost(model)
    groups = [[f] for f in range(X.shape[1])] + [[0, 2], [1, 3, 4]]
    got = permutation_importance(ens, X, y, n_repeats=2, random_state=5, feature_groups=groups)
    draws = _row_draws(as_key(5, "test"), 2, len(X), len(X))
    want = _brute_force(X, _eval_metric_score(model, kind, y, None), draws, groups)
    np.testing.assert_allclose(got.importances, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("tabulated", [True, False])
@pytest.mark.parametrize("seed", [0, 1, pytest.param(2, marks=slow), pytest.param(3, marks=slow)])
def test_repeated_splits_match_brute_force(seed, tabulated, monkeypatch):
    # hand-made trees that split on one feature at several depths, often at the same border
    # twice, with padded depths and two outputs; the oracle predicts each permuted copy of X.
    # Both ways to get a split's increment: from a per-leaf table, or per row (deep trees)
    if not tabulated:
        monkeypatch.setattr(jaximp._importances.permutation_oblivious, "_INCREMENT_TABLE", 0)
    ens = random_ensemble(seed, depths=(6, 5, 1, 6, 3, 0), n_outputs=2)
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(150, ens.n_features)).astype(np.float32)
    y = rng.normal(size=(150, 2))
    groups = [[f] for f in range(ens.n_features)] + [[0, 1], [2, 3, 0]]
    got = permutation_importance(ens, X, y, scoring="neg_mean_squared_error", n_repeats=3, random_state=seed,
                                 feature_groups=groups)

    def score(rows, X):
        return -skm.mean_squared_error(y[rows], np.asarray(ens.predict(X), np.float64))

    want = _brute_force(X, score, _row_draws(as_key(seed, "test"), 3, len(X), len(X)), groups)
    np.testing.assert_allclose(got.importances, want, rtol=RTOL, atol=ATOL)


_NAMED = [
    ("regression", "r2", lambda y, raw, w: skm.r2_score(y, raw, sample_weight=w)),
    ("multiregression", "neg_mean_absolute_error",
     lambda y, raw, w: -skm.mean_absolute_error(y, raw, sample_weight=w)),
    ("binary", "roc_auc", lambda y, raw, w: skm.roc_auc_score(y, raw, sample_weight=w)),
    ("binary", "accuracy", lambda y, raw, w: skm.accuracy_score(y, raw > 0, sample_weight=w)),
    ("multiclass", "neg_log_loss",
     lambda y, raw, w: -skm.log_loss(y, softmax(raw, axis=1), sample_weight=w, labels=[0, 1, 2])),
    ("multiclass", "balanced_accuracy",
     lambda y, raw, w: skm.balanced_accuracy_score(y, raw.argmax(1), sample_weight=w)),
]


NAMED_DEFAULT = ("r2", "roc_auc", "accuracy", "balanced_accuracy")  # the others (log loss, MAE): the model's
# losses above, and every scorer against sklearn in tests/test_metrics.py


@pytest.mark.parametrize("kind, scoring, metric", [
    case if case[1] in NAMED_DEFAULT else pytest.param(*case, marks=slow) for case in _NAMED])
def test_named_scorers_and_groups_match_brute_force(kind, scoring, metric):
    model, X, y, w = train(kind, weighted=True)
    ens = jaximp.from_catboost(model)
    groups = [[0, 1], [2], [3, 4, 5], [5]]
    got = permutation_importance(ens, X, y, scoring=scoring, n_repeats=2, random_state=1,
                                 sample_weight=w, feature_groups=groups)
    draws = _row_draws(as_key(1, "test"), 2, len(X), len(X))
    want = _brute_force(X, lambda rows, Xp: metric(y[rows], _raw(model, Xp), w[rows]), draws, groups)
    assert got.importances.shape == (len(groups), 2)
    np.testing.assert_allclose(got.importances, want, rtol=RTOL, atol=ATOL)


@functools.cache
def _sklearn_model(kind):
    X, y = make_data(kind, n=400)
    cls = catboost.CatBoostClassifier if kind in ("binary", "multiclass") else catboost.CatBoostRegressor
    model = cls(iterations=30, depth=4, learning_rate=0.3, random_seed=0, verbose=0, thread_count=1,
                allow_writing_files=False)
    return model.fit(X, y), X, y


@pytest.mark.parametrize("kind, scoring", [  # the exact oracle is the brute force above: one model by default
    pytest.param("regression", "neg_root_mean_squared_error", marks=slow), ("binary", "neg_log_loss"),
    pytest.param("multiclass", "accuracy", marks=slow),
])
def test_agrees_with_sklearn_within_sampling_error(kind, scoring):
    model, X, y = _sklearn_model(kind)
    repeats = 30
    want = sklearn_permutation_importance(model, X, y, scoring=scoring, n_repeats=repeats, random_state=0)
    got = permutation_importance(jaximp.from_catboost(model), X, y, scoring=scoring, n_repeats=repeats,
                                 random_state=0)
    standard_error = np.sqrt((got.importances_std**2 + want.importances_std**2) / repeats)
    assert np.all(np.abs(got.importances_mean - want.importances_mean) <= 4 * standard_error + ATOL)
    assert got.importances_mean[0] > 10 * standard_error[0]  # the test has power: feature 0 matters


def test_unused_features_are_exactly_zero():
    X, y = make_data("regression", n=300)
    X[:, 4] = 1.0  # constant: no borders, never split on
    X[:, 5] = np.random.default_rng(0).normal(size=len(X))
    model = catboost.CatBoostRegressor(iterations=10, depth=2, random_seed=0, verbose=0, thread_count=1,
                                       allow_writing_files=False, ignored_features=[5]).fit(X, y)
    ens = jaximp.from_catboost(model)
    assert not np.isin([4, 5], np.asarray(ens.split_features)).any()
    for scoring in (None, "r2", "neg_mean_absolute_error"):
        got = permutation_importance(ens, X, y, scoring=scoring, n_repeats=4, random_state=0)
        np.testing.assert_array_equal(got.importances[4:], 0.0)
        assert np.all(got.importances_mean[:2] > 0)
    only_unused = permutation_importance(ens, X, y, n_repeats=2, random_state=0, feature_groups=[[4], [4, 5]])
    np.testing.assert_array_equal(only_unused.importances, 0.0)


def test_one_split_model_matches_the_closed_form():
    # raw = f(x0), one split; permuting x0 sends row i a uniformly random row's value, so
    # E[MSE_perm] = mean_i mean_j (y_i - f(x0_j))^2 exactly.
    X, y = make_data("regression", n=300)
    model = catboost.CatBoostRegressor(iterations=1, depth=1, learning_rate=1.0, random_seed=0, verbose=0,
                                       thread_count=1, allow_writing_files=False).fit(X[:, :1], y)
    ens = jaximp.from_catboost(model)
    f = _raw(model, X[:, :1])
    expected = np.mean((y[:, None] - f[None, :]) ** 2) - np.mean((y - f) ** 2)
    repeats = 400
    got = permutation_importance(ens, X[:, :1], y, scoring="neg_mean_squared_error", n_repeats=repeats,
                                 random_state=0)
    assert abs(got.importances_mean[0] - expected) <= 4 * got.importances_std[0] / np.sqrt(repeats)


def test_same_seed_same_result_for_any_batch_size_or_device_count():
    model, X, y, _ = train("multiclass")
    ens = jaximp.from_catboost(model)
    kw = {"n_repeats": 3, "random_state": 11}
    first = permutation_importance(ens, X, y, **kw)
    for batch_size in (None, 37, 256):
        again = permutation_importance(ens, X, y, batch_size=batch_size, devices=1, **kw)
        np.testing.assert_array_equal(again.importances, first.importances)
    if len(jax.devices()) >= 2:  # rows sharded over two devices
        again = permutation_importance(ens, X, y, batch_size=64, devices=2, **kw)
        np.testing.assert_array_equal(again.importances, first.importances)
    sub = [permutation_importance(ens, X, y, max_samples=100, batch_size=b, **kw).importances for b in (None, 64)]
    np.testing.assert_array_equal(sub[0], sub[1])
    np.testing.assert_array_equal(permutation_importance(ens, X, y, n_repeats=3,
                                                         random_state=jax.random.key(11)).importances,
                                  first.importances)
    other = permutation_importance(ens, X, y, n_repeats=3, random_state=12)
    assert not np.array_equal(other.importances, first.importances)


def test_groups_share_each_repeats_permutation():
    model, X, y, _ = train("regression")
    ens = jaximp.from_catboost(model)
    full = permutation_importance(ens, X, y, n_repeats=3, random_state=2)
    names = [ens.feature_names[3], 1]
    grouped = permutation_importance(ens, X, y, n_repeats=3, random_state=2, feature_groups=[names, [0]])
    assert grouped.importances.shape == (2, 3)
    # the same permutation as feature 0's row (another chunk layout: equal to float32 rounding)
    np.testing.assert_allclose(grouped.importances[1], full.importances[0], rtol=RTOL, atol=ATOL)


def test_jax_function_scoring_equals_the_named_scorer():
    model, X, y, w = train("regression", weighted=True)
    ens = jaximp.from_catboost(model)

    def neg_mse(y, raw, w):
        return -jnp.sum(w * (y - raw) ** 2) / jnp.sum(w)

    kw = {"n_repeats": 2, "random_state": 0, "sample_weight": w}
    named = permutation_importance(ens, X, y, scoring="neg_mean_squared_error", **kw)
    mine = permutation_importance(ens, X, y, scoring=neg_mse, **kw)
    np.testing.assert_allclose(mine.importances, named.importances, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"y": np.zeros(3)}, ValueError, r"permutation_importance: y must have shape \(400,\)"),
    ({"y": np.array(["a"] * 400)}, TypeError, "permutation_importance: y must hold numbers"),
    ({"scoring": "accuracy"}, ValueError, "scoring 'accuracy' is defined for binary and multiclass"),
    ({"scoring": "neg_mse"}, ValueError, r"scoring must be one of \[.*'neg_mean_squared_error'.*\]"),
    ({"n_repeats": 0}, ValueError, "permutation_importance: n_repeats must be an int >= 1; got 0"),
    ({"max_samples": 0.0}, ValueError, r"max_samples must be a float in \(0, 1\] or an int in \[1, 400\]"),
    ({"max_samples": 1.5}, ValueError, r"max_samples must be a float in \(0, 1\]"),
    ({"max_samples": 401}, ValueError, r"max_samples must be an int in \[1, 400\]"),
    ({"feature_groups": []}, ValueError, "feature_groups must be a non-empty list of lists"),
    ({"feature_groups": [0, 1]}, ValueError, r"feature_groups\[0\] must be a non-empty list of columns"),
    ({"feature_groups": [[0], []]}, ValueError, r"feature_groups\[1\] must be a non-empty list"),
    ({"feature_groups": [[9]]}, ValueError, r"feature_groups\[0\] must hold column indices in \[0, 6\)"),
    ({"feature_groups": [["nope"]]}, ValueError, "or feature names; got 'nope'"),
    ({"feature_groups": [[1, 1]]}, ValueError, r"feature_groups\[0\] must not repeat a column"),
    ({"random_state": "seed"}, TypeError, "random_state must be an int, None, a jax.random key"),
    ({"random_state": -1}, ValueError, r"random_state must be an int in \[0, 2\*\*64\); got -1"),
    ({"batch_size": 0}, ValueError, "permutation_importance: batch_size must be a positive int or None"),
    ({"sample_weight": -np.ones(400)}, ValueError, "sample_weight must be finite, non-negative"),
])
def test_bad_inputs_raise_clear_errors(kwargs, error, match):
    model, X, y, _ = train("regression")
    ens = jaximp.from_catboost(model)
    kwargs = {"y": y, **kwargs}
    with pytest.raises(error, match=match):
        permutation_importance(ens, X, **kwargs)


def test_classifier_labels_are_mapped_and_checked():
    model, X, y, _ = train("binary")
    ens = jaximp.from_catboost(model)
    labels = np.where(y == 1, 1, 0)
    a = permutation_importance(ens, X, labels, scoring="roc_auc", n_repeats=2, random_state=0)
    b = permutation_importance(ens, X, labels.astype(float), scoring="roc_auc", n_repeats=2, random_state=0)
    np.testing.assert_array_equal(a.importances, b.importances)
    with pytest.raises(ValueError, match=r"y must hold the model's class labels \[0, 1\]; got \[2\]"):
        permutation_importance(ens, X, labels * 2)
    with pytest.raises(ValueError, match="scoring 'roc_auc' needs every class in y"):
        permutation_importance(ens, X, np.zeros_like(labels), scoring="roc_auc")


# ----------------------------------------------------------------------------------------
# LossFunctionChange


@pytest.mark.parametrize("kind", ["regression", "binary", "multiclass"])
@pytest.mark.parametrize("weighted", [False, True])
def test_loss_function_change_matches_catboost(kind, weighted):
    model, X, y, w = train(kind, weighted=weighted)
    want = model.get_feature_importance(catboost.Pool(X, y, weight=w), type="LossFunctionChange")
    got = loss_function_change(jaximp.from_catboost(model), X, y, sample_weight=w)
    assert got.shape == (X.shape[1],) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("loss", ["MAE", "CrossEntropy"])
def test_loss_function_change_matches_catboost_other_losses(loss):
    X, y = make_data("binary" if loss == "CrossEntropy" else "regression")
    if loss == "CrossEntropy":
        y = np.clip(expit(X[:, 0] * 2), 0.05, 0.95)  # probabilistic targets
    model = catboost.CatBoost({"loss_function": loss, "iterations": 20, "depth": 3, "random_seed": 0, "verbose": 0,
                                   "thread_count": 1, "allow_writing_files": False}).fit(X, y)
    want = model.get_feature_importance(catboost.Pool(X, y), type="LossFunctionChange")
    got = loss_function_change(jaximp.from_catboost(model), X, y)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_loss_function_change_summed_mixed_depth_model():
    model, X, y = summed("regression")
    want = model.get_feature_importance(catboost.Pool(X, y), type="LossFunctionChange")
    got = loss_function_change(jaximp.from_catboost(model), X, y)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_loss_function_change_multiregression_follows_the_definition():
    # CatBoost raises "Multi-dimensional target fstr is unimplemented yet"; the definition with
    # its MultiRMSE metric and its own SHAP values is the oracle.
    model, X, y, w = train("multiregression", weighted=True)
    with pytest.raises(catboost.CatBoostError, match="Multi-dimensional target"):
        model.get_feature_importance(catboost.Pool(X, y, weight=w), type="LossFunctionChange")
    phi = model.get_feature_importance(catboost.Pool(X, y), type="ShapValues")  # [N, K, F + 1]
    raw = _raw(model, X)

    def multi_rmse(a):
        return np.sqrt(np.sum(w * np.sum((a - y) ** 2, axis=1)) / np.sum(w))

    want = [multi_rmse(raw - phi[:, :, f]) - multi_rmse(raw) for f in range(X.shape[1])]
    got = loss_function_change(jaximp.from_catboost(model), X, y, sample_weight=w)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_loss_function_change_is_batch_independent_and_checks_inputs():
    model, X, y, _ = train("multiclass")
    ens = jaximp.from_catboost(model)
    first = loss_function_change(ens, X, y)
    for batch_size in (37, 256):
        np.testing.assert_array_equal(loss_function_change(ens, X, y, batch_size=batch_size), first)
    if len(jax.devices()) >= 2:  # rows sharded over two devices
        np.testing.assert_array_equal(loss_function_change(ens, X, y, batch_size=64, devices=2), first)
    with pytest.raises(TypeError, match="loss_function_change: ens must be a jaximp.ObliviousEnsemble"):
        loss_function_change(model, X, y)
    with pytest.raises(TypeError, match="permutation_importance: ens must be a jaximp.ObliviousEnsemble"):
        permutation_importance(model, X, y)
    with pytest.raises(ValueError, match=r"loss_function_change: y must have shape \(400,\)"):
        loss_function_change(ens, X, y[:10])
    with pytest.raises(ValueError, match=r"loss_function_change: y must hold the model's class labels"):
        loss_function_change(ens, X, y + 5)
    quantile = catboost.CatBoost({"loss_function": "Quantile:alpha=0.8", "iterations": 2, "depth": 2, "verbose": 0,
                                      "thread_count": 1, "allow_writing_files": False}).fit(X, y.astype(float))
    with pytest.raises(ValueError, match=r"loss_function_change: the model's loss_function must be one of"):
        loss_function_change(jaximp.from_catboost(quantile), X, y)
    assert as_targets(y, ens, len(X), "f").dtype == np.int32
