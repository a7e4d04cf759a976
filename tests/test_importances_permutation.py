"""Permutation importance against brute force with the same row draws, scikit-learn and closed
forms, for every layout and library.

Oracles:
* brute force with jaximp's own row draws (tests/oracles.py): the library predicts every
  permuted copy of the rows (raw categorical columns permuted in pandas, their one-hot values
  and CTRs following them), scored by CatBoost's ``eval_metrics``, scikit-learn's metrics or the
  model's loss in float64;
* ``sklearn.inspection.permutation_importance`` on the same model: its permutations are its own,
  so means agree within sampling error (4 standard errors of the difference, 30 repeats each);
* a one-split model, whose expected permuted MSE is a closed form; exact zeros for columns no
  split reads.

Tolerances: jaximp's float32 scores of magnitude ~1 over a few hundred rows agree with the
float64 brute force to ``rtol = atol = 1e-5`` (CatBoost's categorical models, whose CTRs CatBoost
computes in float32 too: ``rtol=1e-4``; scikit-learn's forest: ``atol=1e-5 * magnitude``).
"""

from __future__ import annotations

import dataclasses
import functools

import catboost
import jax
import jax.numpy as jnp
import models
import numpy as np
import pytest
import sklearn.metrics as skm
import xgboost as xgb
from oracles import (
    assert_close,
    catboost_loss_score,
    model_loss,
    permutation_draws,
    permutation_importances,
    raw_output,
)
from scipy.special import softmax
from sklearn.inspection import permutation_importance as sklearn_permutation_importance

import jaximp
from jaximp import permutation_importance

RTOL, ATOL = 1e-5, 1e-5
slow = pytest.mark.slow


# Brute force with the same draws -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    """``permutation_importance(ens, X, y, **kwargs)`` and its brute force: the columns of each
    group (``groups``, None: each column alone) permuted, ``score(rows, X[rows])`` of every
    permuted copy; tolerances, and whether the result's mean and std are checked too."""

    ens: object
    X: object
    y: object
    kwargs: dict
    score: object
    groups: list | None = None
    rtol: float = RTOL
    atol: float = ATOL
    relative: bool = False  # atol relative to the largest importance
    summaries: bool = False


def _oblivious(kind, weighted, max_samples):
    """The model's loss, scored by CatBoost's eval_metrics."""
    model, X, y, w = models.train(kind, weighted=weighted)
    return Case(jaximp.from_catboost(model), X, y,
                dict(n_repeats=3, random_state=7, sample_weight=w, max_samples=max_samples),
                catboost_loss_score(model, models.LOSS[kind], y, w), summaries=True)


def _tree_shapes(shape):
    """depth 1: every (feature, tree) pair flips one bit; mixed depths: padded depths; depth 8:
    pairs with several depths on one feature."""
    if shape == "mixed depths":
        model, X, y = models.summed("multiclass")
    else:
        model, X, y, _ = models.train("regression", depth=1 if shape == "depth-1" else 8, iterations=12)
    kind = "multiclass" if shape == "mixed depths" else "regression"
    groups = [[f] for f in range(X.shape[1])] + [[0, 2], [1, 3, 4]]
    return Case(jaximp.from_catboost(model), X, y, dict(n_repeats=2, random_state=5, feature_groups=groups),
                catboost_loss_score(model, models.LOSS[kind], y, None), groups)


def _named_scorer(kind, scoring, metric):
    model, X, y, w = models.train(kind, weighted=True)
    groups = [[0, 1], [2], [3, 4, 5], [5]]

    def score(rows, X_rows):
        return metric(y[rows], raw_output(model, X_rows), w[rows])

    return Case(jaximp.from_catboost(model), X, y, dict(scoring=scoring, n_repeats=2, random_state=1,
                                                        sample_weight=w, feature_groups=groups), score, groups)


def _catboost_trees(index, weighted, max_samples):
    """Groups of columns by index and by name."""
    fitted = models.catboost_trees(*models.IMPORTANCE_TREES[index], n=500)
    X, y = fitted.X, fitted.y
    w = models.sample_weights(len(X)) if weighted else None
    groups = [[f] for f in range(X.shape[1])] + [[0, 2], [fitted.ens.feature_names[1], 3, 4]]
    return Case(fitted.ens, X, y, dict(n_repeats=3, random_state=7, sample_weight=w, max_samples=max_samples,
                                       feature_groups=groups),
                catboost_loss_score(fitted.model, models.LOSS[models.IMPORTANCE_TREES[index][0]], y, w),
                [[f] for f in range(X.shape[1])] + [[0, 2], [1, 3, 4]], summaries=True)


def _catboost_categorical_trees(name, weighted, max_samples):
    """Each raw column permuted, its one-hot values and CTRs following it; groups by index and
    name across float and categorical columns."""
    fitted = models.catboost_categorical_trees(name)
    kind = models.CATEGORICAL_TREES[name][0]
    frame, y = models.explained(kind)
    w = np.random.default_rng(3).uniform(0.2, 3.0, len(frame)) if weighted else None
    groups = [[c] for c in frame.columns] + [["c0", "c1"], ["f0", "c2", "c3"]]
    return Case(fitted.ens, frame, y, dict(n_repeats=2, random_state=5, sample_weight=w, max_samples=max_samples,
                                           feature_groups=[[0]] + groups[1:]),
                catboost_loss_score(fitted.model, models.LOSS[kind], y, w, cat_features=CATEGORICAL_CAT), groups,
                rtol=1e-4, summaries=True)


CATEGORICAL_CAT = ["c0", "c1", "c2", "c3"]


def _ctr_of_two_columns(name):
    """A CTR over two columns straddles a group holding one of them: that group's rows are
    featurized again and predicted by the trees."""
    fitted = models.catboost_combinations(name)
    frame, y = models.explained("binary")
    groups = [[c] for c in frame.columns] + [["c1", "c3"]]
    return Case(fitted.ens, frame, y, dict(n_repeats=2, random_state=1, feature_groups=groups),
                catboost_loss_score(fitted.model, "Logloss", y, None, cat_features=CATEGORICAL_CAT), groups, rtol=1e-4)


def _catboost_categorical(name, groups, max_samples):
    """Each permuted column re-evaluated by CatBoost itself: its one-hot values, its CTRs and
    the CTRs over combinations that it is part of (a group inside or across them)."""
    fitted = models.catboost_categorical(name)
    kind = models.CATEGORICAL[name][0]
    frame, y = models.explained(kind)

    def score(rows, rows_frame):
        raw = raw_output(fitted.model, models.pool(rows_frame))
        if kind == "binary":
            p = 1 / (1 + np.exp(-raw))
            return np.mean(y[rows] * np.log(p) + (1 - y[rows]) * np.log(1 - p))
        if kind == "multiclass":
            z = raw - raw.max(1, keepdims=True)
            logp = z - np.log(np.exp(z).sum(1, keepdims=True))
            return np.mean(logp[np.arange(len(rows)), y[rows]])
        return -np.sqrt(np.mean((raw - y[rows]) ** 2))

    return Case(fitted.ens, frame, y, dict(n_repeats=2, random_state=3, feature_groups=groups,
                                           max_samples=max_samples), score, groups, rtol=1e-4)


def _lightgbm(name, weighted, max_samples):
    """LightGBM predicts every permuted copy, scored with the model's loss in float64."""
    fitted = models.lightgbm_model(name)
    booster, ens, X, y = fitted.model, fitted.ens, fitted.X, fitted.y
    w = np.random.default_rng(1).uniform(0.2, 3.0, size=len(X)) if weighted else None
    weight = np.ones(len(X)) if w is None else w
    groups = [[f] for f in range(X.shape[1])] + [[0, 2]]

    def score(rows, X_rows):
        return -model_loss(ens.loss_function, y[rows], raw_output(booster, X_rows), weight[rows])

    return Case(ens, X, y, dict(n_repeats=3, random_state=7, sample_weight=w, max_samples=max_samples,
                                feature_groups=groups), score, groups)


def _xgboost(name, weighted, max_samples):
    """Minus the model's loss: XGBoost's predictions scored by scikit-learn."""
    fitted = models.xgboost_model(name)
    booster, X, y = fitted.model, fitted.X, fitted.y
    kind = "regression" if name == "squarederror" else "multiclass" if name == "softprob" else "binary"
    w = np.random.default_rng(1).uniform(0.2, 3.0, size=len(X)) if weighted else None

    def score(rows, X_rows):
        p = booster.predict(xgb.DMatrix(X_rows))
        ws = None if w is None else w[rows]
        if kind == "regression":
            return -skm.root_mean_squared_error(y[rows], p, sample_weight=ws)
        return -skm.log_loss(y[rows], p, sample_weight=ws, labels=np.arange(3) if kind == "multiclass" else None)

    return Case(fitted.ens, X, y, dict(n_repeats=3, random_state=7, sample_weight=w, max_samples=max_samples), score)


def _sklearn(name):
    """RMSE (the ensemble's loss): scikit-learn predicts every permuted copy of X."""
    fitted = models.sklearn_model(name)
    model, X, y = fitted.model, fitted.X, fitted.y

    def score(rows, X_rows):
        return -np.sqrt(np.mean((model.predict(X_rows) - y[rows]) ** 2))

    return Case(fitted.ens, X, y, dict(n_repeats=3, random_state=7, max_samples=0.8), score, relative=True)


def _library_categorical(case):
    """Categorical columns permuted with their dtype; LightGBM predicts every permuted frame."""
    fitted = models.library_categorical(case)

    def score(rows, rows_frame):
        return -model_loss("RMSE", fitted.y[rows], raw_output(fitted.model, rows_frame).reshape(len(rows), -1))

    return Case(fitted.ens, fitted.X, fitted.y, dict(n_repeats=3, random_state=7), score)


def _case(build, args, name, default=True):
    return pytest.param(build, args, id=name, marks=() if default else slow)


NAMED = [  # (kind, scoring, the scorer on raw predictions)
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
# losses above, and every scorer against sklearn in tests/test_importances_metrics.py

BRUTE_FORCE = (
    [_case(_oblivious, (kind, weighted, max_samples), f"oblivious-{kind}-{weighted}-{max_samples}",
           not (weighted and kind != "multiclass"))  # weights and subsamples: once by default
     for weighted, max_samples in [(False, 1.0), (True, 0.6)] for kind in models.KINDS]
    + [_case(_tree_shapes, (shape,), f"oblivious-{shape}") for shape in ("depth-1", "mixed depths", "depth-8")]
    + [_case(_named_scorer, case, f"oblivious-{case[1]}", case[1] in NAMED_DEFAULT) for case in NAMED]
    + [_case(_catboost_trees, (0, False, 1.0), "trees-regression"),
       _case(_catboost_trees, (3, True, 0.6), "trees-multiclass-weighted")]
    + [_case(_catboost_categorical_trees, args, f"categorical-trees-{args[0]}")
       for args in [("depthwise_one_hot", False, 1.0), ("depthwise_ctr", True, 0.5), ("lossguide_mixed", False, 1.0),
                    ("lossguide_ctr_complexity", True, 1.0)]]
    + [_case(_ctr_of_two_columns, ("categorical_pairs",), "categorical-trees-ctr-of-two-columns")]
    + [_case(_catboost_categorical, args, f"categorical-{args[0]}")
       for args in [("combinations_2", None, 1.0), ("combinations_4", [["c0", "c1"], ["f0", "c2", "c3"], ["f1"]], 0.5),
                    ("multiclass", None, 1.0)]]
    + [_case(_lightgbm, args, f"lightgbm-{args[0]}", args[0] == "regression")
       for args in [("regression", False, 1.0), ("binary", True, 1.0), ("multiclass", True, 0.6)]]
    + [_case(_xgboost, args, f"xgboost-{args[0]}") for args in [("logistic", True, 0.6), ("softprob", False, 1.0)]]
    + [_case(_sklearn, ("rf_reg",), "sklearn-rf_reg")]
    + [_case(_library_categorical, ("lightgbm-reg",), "lightgbm-categorical-reg")]
)


@pytest.mark.parametrize("build, args", BRUTE_FORCE)
def test_equals_brute_force_with_the_same_draws(build, args):
    case = build(*args)
    got = permutation_importance(case.ens, case.X, case.y, **case.kwargs)
    n_rows = len(case.X)
    draws = permutation_draws(case.kwargs["random_state"], case.kwargs["n_repeats"], n_rows,
                      int(case.kwargs.get("max_samples", 1.0) * n_rows))
    columns = case.X.columns if hasattr(case.X, "columns") else range(case.X.shape[1])
    groups = case.groups or [[c] for c in columns]
    want = permutation_importances(case.X, case.score, draws, groups)
    assert got.importances.shape == want.shape
    if case.relative:
        assert_close(got.importances, want)
    else:
        np.testing.assert_allclose(got.importances, want, rtol=case.rtol, atol=case.atol)
    if case.summaries:
        np.testing.assert_allclose(got.importances_mean, want.mean(1), rtol=case.rtol, atol=case.atol)
        np.testing.assert_allclose(got.importances_std, want.std(1), rtol=case.rtol, atol=case.atol)


@pytest.mark.parametrize("tabulated", [True, False])
@pytest.mark.parametrize("seed", [0, 1, pytest.param(2, marks=slow), pytest.param(3, marks=slow)])
def test_repeated_splits_match_brute_force(seed, tabulated, monkeypatch):
    # hand-made trees that split on one feature at several depths, often at the same border
    # twice, with padded depths and two outputs; the oracle predicts each permuted copy of X.
    # Both ways to get a split's increment: from a per-leaf table, or per row (deep trees)
    if not tabulated:
        monkeypatch.setattr(jaximp._importances.permutation_oblivious, "_INCREMENT_TABLE", 0)
    ens = models.random_ensemble(seed, depths=(6, 5, 1, 6, 3, 0), n_outputs=2)
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(150, ens.n_features)).astype(np.float32)
    y = rng.normal(size=(150, 2))
    groups = [[f] for f in range(ens.n_features)] + [[0, 1], [2, 3, 0]]
    got = permutation_importance(ens, X, y, scoring="neg_mean_squared_error", n_repeats=3, random_state=seed,
                                 feature_groups=groups)

    def score(rows, X):
        return -skm.mean_squared_error(y[rows], np.asarray(ens.predict(X), np.float64))

    want = permutation_importances(X, score, permutation_draws(seed, 3, len(X), len(X)), groups)
    np.testing.assert_allclose(got.importances, want, rtol=RTOL, atol=ATOL)


# Against scikit-learn, within sampling error ---------------------------------------------------------------------


@functools.cache
def _catboost_estimator(kind, grow_policy=None):
    X, y = models.make_data(kind, n=400)
    cls = catboost.CatBoostClassifier if kind in ("binary", "multiclass") else catboost.CatBoostRegressor
    if grow_policy is None:
        model = cls(iterations=30, depth=4, learning_rate=0.3, random_seed=0, verbose=0, thread_count=1,
                    allow_writing_files=False)
    else:
        model = cls(iterations=20, depth=5, grow_policy=grow_policy, learning_rate=0.3, random_seed=0, verbose=0,
                    thread_count=1, allow_writing_files=False)
    return model.fit(X, y), X, y


def _estimator(library, name, kind=None):
    if library == "catboost":
        model, X, y = _catboost_estimator(kind, name)
        return model, jaximp.from_catboost(model), X, y
    fitted = models.sklearn_model(name)
    return fitted.model, fitted.ens, fitted.X, fitted.y


SAMPLING = [  # (library, model, kind, scoring): the exact oracle is the brute force above
    pytest.param("catboost", None, "regression", "neg_root_mean_squared_error", id="oblivious-regression", marks=slow),
    pytest.param("catboost", None, "binary", "neg_log_loss", id="oblivious-binary"),
    pytest.param("catboost", None, "multiclass", "accuracy", id="oblivious-multiclass", marks=slow),
    pytest.param("catboost", "Depthwise", "regression", "neg_root_mean_squared_error", id="depthwise-regression"),
    pytest.param("catboost", "Lossguide", "binary", "neg_log_loss", id="lossguide-binary"),
    pytest.param("sklearn", "gb_bin", None, "neg_log_loss", id="sklearn-gb_bin", marks=slow),
    pytest.param("sklearn", "rf_clf", None, "accuracy", id="sklearn-rf_clf", marks=slow),
    pytest.param("sklearn", "hgb_reg", None, "r2", id="sklearn-hgb_reg", marks=slow),
]


@pytest.mark.parametrize("library, name, kind, scoring", SAMPLING)
def test_agrees_with_sklearn_within_sampling_error(library, name, kind, scoring):
    model, ens, X, y = _estimator(library, name, kind)
    repeats = 30
    want = sklearn_permutation_importance(model, X, y, scoring=scoring, n_repeats=repeats, random_state=0)
    got = permutation_importance(ens, X, y, scoring=scoring, n_repeats=repeats, random_state=0)
    standard_error = np.sqrt((got.importances_std**2 + want.importances_std**2) / repeats)
    assert np.all(np.abs(got.importances_mean - want.importances_mean) <= 4 * standard_error + ATOL)
    assert got.importances_mean[0] > 10 * standard_error[0]  # the test has power: feature 0 matters


# Closed forms and semantics ----------------------------------------------------------------------------------------


def test_one_split_model_matches_the_closed_form():
    # raw = f(x0), one split; permuting x0 sends row i a uniformly random row's value, so
    # E[MSE_perm] = mean_i mean_j (y_i - f(x0_j))^2 exactly.
    X, y = models.make_data("regression", n=300)
    model = catboost.CatBoostRegressor(iterations=1, depth=1, learning_rate=1.0, random_seed=0, verbose=0,
                                       thread_count=1, allow_writing_files=False).fit(X[:, :1], y)
    ens = jaximp.from_catboost(model)
    f = raw_output(model, X[:, :1])
    expected = np.mean((y[:, None] - f[None, :]) ** 2) - np.mean((y - f) ** 2)
    repeats = 400
    got = permutation_importance(ens, X[:, :1], y, scoring="neg_mean_squared_error", n_repeats=repeats,
                                 random_state=0)
    assert abs(got.importances_mean[0] - expected) <= 4 * got.importances_std[0] / np.sqrt(repeats)


def test_unused_features_are_exactly_zero():
    X, y = models.make_data("regression", n=300)
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


def test_unused_features_of_tree_ensembles_get_exactly_zero():
    X, y = models.make_data("regression", n=300)
    X[:, 4] = 1.0  # constant: no borders, never split on
    model = catboost.CatBoostRegressor(iterations=6, depth=4, grow_policy="Lossguide", max_leaves=10,
                                       random_seed=0, verbose=0, thread_count=1, allow_writing_files=False,
                                       ignored_features=[5]).fit(X, y)
    ens = jaximp.from_catboost(model)
    assert not np.isin([4, 5], np.asarray(ens.node_features)[np.asarray(ens.node_borders) < np.inf]).any()
    got = permutation_importance(ens, X, y, n_repeats=2, random_state=0, feature_groups=[[4], [4, 5], [0]])
    np.testing.assert_array_equal(got.importances[:2], 0.0)
    assert np.all(got.importances[2] > 0)
    np.testing.assert_array_equal(np.asarray(jaximp.interaction(ens))[4:], 0.0)


def test_semantics_of_categorical_tree_ensembles():
    """sklearn's layout; a column no split reads scores exactly 0; results do not depend on the
    batch size; an sklearn scorer by name."""
    ens = models.catboost_categorical_trees("lossguide_mixed").ens
    frame, y = models.explained("multiclass")
    unused = [c for c in range(ens.n_features) if all(c not in player for player in ens.players)]
    assert unused  # column c1 is never split on in this model
    kw = dict(n_repeats=3, random_state=0, scoring="accuracy")
    got = permutation_importance(ens, frame, y, **kw)
    assert got.importances.shape == (ens.n_features, 3)
    np.testing.assert_array_equal(got.importances_mean, got.importances.mean(1))
    np.testing.assert_array_equal(got.importances_std, got.importances.std(1))
    np.testing.assert_array_equal(got.importances[unused], 0.0)
    again = permutation_importance(ens, frame, y, batch_size=16, **kw)
    np.testing.assert_array_equal(again.importances, got.importances)


def test_same_seed_same_result_for_any_batch_size_or_device_count():
    model, X, y, _ = models.train("multiclass")
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


def test_tree_ensembles_do_not_depend_on_batch_size_or_devices():
    fitted = models.catboost_trees(*models.IMPORTANCE_TREES[3], n=500)
    ens, X, y = fitted.ens, fitted.X, fitted.y
    kw = dict(n_repeats=2, random_state=3, scoring="accuracy")
    first = permutation_importance(ens, X, y, **kw)
    np.testing.assert_array_equal(permutation_importance(ens, X, y, batch_size=64, **kw).importances,
                                  first.importances)
    if len(jax.devices()) >= 2:
        again = permutation_importance(ens, X, y, batch_size=64, devices=2, **kw)
        np.testing.assert_array_equal(again.importances, first.importances)


def test_groups_share_each_repeats_permutation():
    model, X, y, _ = models.train("regression")
    ens = jaximp.from_catboost(model)
    full = permutation_importance(ens, X, y, n_repeats=3, random_state=2)
    names = [ens.feature_names[3], 1]
    grouped = permutation_importance(ens, X, y, n_repeats=3, random_state=2, feature_groups=[names, [0]])
    assert grouped.importances.shape == (2, 3)
    # the same permutation as feature 0's row (another chunk layout: equal to float32 rounding)
    np.testing.assert_allclose(grouped.importances[1], full.importances[0], rtol=RTOL, atol=ATOL)


def test_jax_function_scoring_equals_the_named_scorer():
    model, X, y, w = models.train("regression", weighted=True)
    ens = jaximp.from_catboost(model)

    def neg_mse(y, raw, w):
        return -jnp.sum(w * (y - raw) ** 2) / jnp.sum(w)

    kw = {"n_repeats": 2, "random_state": 0, "sample_weight": w}
    named = permutation_importance(ens, X, y, scoring="neg_mean_squared_error", **kw)
    mine = permutation_importance(ens, X, y, scoring=neg_mse, **kw)
    np.testing.assert_allclose(mine.importances, named.importances, rtol=RTOL, atol=ATOL)


def test_classifier_labels_are_mapped_and_checked():
    model, X, y, _ = models.train("binary")
    ens = jaximp.from_catboost(model)
    labels = np.where(y == 1, 1, 0)
    a = permutation_importance(ens, X, labels, scoring="roc_auc", n_repeats=2, random_state=0)
    b = permutation_importance(ens, X, labels.astype(float), scoring="roc_auc", n_repeats=2, random_state=0)
    np.testing.assert_array_equal(a.importances, b.importances)
    with pytest.raises(ValueError, match=r"y must hold the model's class labels \[0, 1\]; got \[2\]"):
        permutation_importance(ens, X, labels * 2)
    with pytest.raises(ValueError, match="scoring 'roc_auc' needs every class in y"):
        permutation_importance(ens, X, np.zeros_like(labels), scoring="roc_auc")


def test_probability_outputs_refuse_logit_scorers():
    fitted = models.sklearn_model("rf_clf")
    ens, X, y = fitted.ens, fitted.X, fitted.y
    with pytest.raises(ValueError, match="'neg_log_loss' needs the model's logits"):
        permutation_importance(ens, X, y, scoring="neg_log_loss")
    with pytest.raises(ValueError, match="loss_function must be known"):
        permutation_importance(ens, X, y)


# Bad input ----------------------------------------------------------------------------------------------------------


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
    model, X, y, _ = models.train("regression")
    ens = jaximp.from_catboost(model)
    kwargs = {"y": y, **kwargs}
    with pytest.raises(error, match=match):
        permutation_importance(ens, X, **kwargs)
