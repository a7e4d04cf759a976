"""scikit-learn tree models imported with ``jaximp.from_sklearn``.

Oracles, all on models fitted here on small data (a few hundred rows, NaN included where the
model takes missing values):

* scikit-learn itself: ``predict`` / ``predict_proba`` / ``decision_function`` (the raw output
  each model's ensemble reproduces), ``apply`` (leaf numbers), ``feature_importances_`` (MDI),
  ``permutation_importance`` (within sampling error) and its ``predict`` on permuted copies of
  X (the same row draws as jaximp: exact);
* shap's ``TreeExplainer`` (``tree_path_dependent`` and ``interventional``) where it supports
  the model and is right: it refuses multiclass GradientBoosting, sums a multiclass
  HistGradientBoosting's classes into one output, and its interventional algorithm compares
  float32 values with thresholds rounded to the nearest float32 (see
  ``test_interventional_where_shap_rounds_thresholds``);
* brute-force Shapley values enumerating coalitions: over the library's own tree arrays for the
  path-dependent game, over the model's own predictions for the interventional one.

Tolerances: jaximp works in float32 where the oracles use float64; over at most a few dozen
trees results agree to ``rtol=1e-5, atol=1e-5 * magnitude`` (leaf numbers exactly).
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pandas as pd
import pytest
import shap
from conftest import make_data
from sklearn import ensemble, tree
from sklearn.datasets import load_diabetes
from sklearn.inspection import permutation_importance as sklearn_permutation_importance
from sklearn.linear_model import LinearRegression

import jaximp
from jaximp._importances.permutation import _row_draws, as_key

RTOL = 1e-5


def grid(fast, slow):
    """Parameters: ``fast`` run by default, ``slow`` marked slow (each new shape costs jaximp a
    few seconds of compilation, and the file keeps to about a minute by default)."""
    return list(fast) + [pytest.param(case, marks=pytest.mark.slow) for case in slow]

MODELS = {  # name: (estimator, data kind, NaN in X)
    "dt_reg": (lambda: tree.DecisionTreeRegressor(max_depth=6, random_state=0), "regression", True),
    "dt_clf": (lambda: tree.DecisionTreeClassifier(max_depth=5, random_state=0), "multiclass", True),
    "rf_reg": (lambda: ensemble.RandomForestRegressor(8, max_depth=6, random_state=0), "regression", True),
    "rf_clf": (lambda: ensemble.RandomForestClassifier(8, max_depth=6, random_state=0), "binary", True),
    "et_reg2": (lambda: ensemble.ExtraTreesRegressor(6, max_depth=5, random_state=0), "multiregression", True),
    "et_clf": (lambda: ensemble.ExtraTreesClassifier(8, max_depth=6, random_state=0), "multiclass", True),
    "gb_reg": (lambda: ensemble.GradientBoostingRegressor(n_estimators=15, max_depth=3, random_state=0),
               "regression", False),
    "gb_bin": (lambda: ensemble.GradientBoostingClassifier(n_estimators=10, max_depth=3, random_state=0),
               "binary", False),
    "gb_multi": (lambda: ensemble.GradientBoostingClassifier(n_estimators=8, max_depth=3, subsample=0.7,
                                                             random_state=0), "multiclass", False),
    "hgb_reg": (lambda: ensemble.HistGradientBoostingRegressor(max_iter=15, max_leaf_nodes=15, random_state=0),
                "regression", True),
    "hgb_bin": (lambda: ensemble.HistGradientBoostingClassifier(max_iter=10, random_state=0), "binary", True),
    "hgb_multi": (lambda: ensemble.HistGradientBoostingClassifier(max_iter=6, max_leaf_nodes=8, random_state=0),
                  "multiclass", True),
}


def assert_close(got, expected, rtol=RTOL):
    expected = np.asarray(expected, np.float64)
    magnitude = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(np.asarray(got, np.float64), expected, rtol=rtol, atol=rtol * magnitude)


@functools.cache
def fitted(name, n=300, n_features=6):
    """``(model, ensemble, X f32 with NaN where the model takes them, y)``."""
    make, kind, nan = MODELS[name]
    X, y = make_data(kind, n=n, n_features=n_features, nan_fraction=0.05 if nan else 0.0)
    model = make().fit(X, y)
    return model, jaximp.from_sklearn(model), X, y


def rows(X, n=60, seed=3):
    """Rows to explain: training rows plus fresh ones (NaN where X has them)."""
    rng = np.random.default_rng(seed)
    fresh = rng.normal(size=(n // 2, X.shape[1])).astype(np.float32)
    if np.isnan(X).any():
        fresh[rng.random(fresh.shape) < 0.1] = np.nan
    return np.concatenate([X[: n - n // 2], fresh])


def raw_output(model, X):
    """The output the ensemble reproduces (see jaximp._importers.sklearn)."""
    if isinstance(model, (ensemble.GradientBoostingClassifier, ensemble.HistGradientBoostingClassifier)):
        return model.decision_function(X)
    if hasattr(model, "predict_proba"):
        return model.predict_proba(X)
    return model.predict(X)


# 1. Predictions, leaves, importances ---------------------------------------------------------


@pytest.mark.parametrize("name", grid(["dt_reg", "rf_clf", "gb_multi", "hgb_bin"],
                                       ["dt_clf", "rf_reg", "et_reg2", "et_clf", "gb_reg", "gb_bin", "hgb_reg",
                                        "hgb_multi"]))
def test_predict_and_leaf_indices(name):
    model, ens, X, _ = fitted(name)
    x = rows(X, 200)
    expected = raw_output(model, x)
    got = jaximp.predict(ens, x)
    assert got.shape == expected.shape and got.dtype == np.float32
    assert_close(got, expected)
    if hasattr(model, "apply"):  # GradientBoosting: [N, stages, K] -> stage-major trees
        np.testing.assert_array_equal(jaximp.leaf_indices(ens, x), model.apply(x).reshape(len(x), -1))
    else:  # HistGradientBoosting: the predictor's node index, checked against its values
        leaves = np.asarray(jaximp.leaf_indices(ens, x))
        values = [p.nodes["value"] for stage in model._predictors for p in stage]
        k = model.n_trees_per_iteration_
        summed = sum(np.eye(k)[t % k] * values[t][leaves[:, t], None] for t in range(len(values)))
        assert_close(summed + model._baseline_prediction.reshape(-1), expected.reshape(len(x), k))
    assert ens.feature_names == tuple(str(i) for i in range(X.shape[1]))
    assert ens.class_names == tuple(getattr(model, "classes_", np.zeros(0)).tolist())


@pytest.mark.parametrize("name", grid(["rf_reg", "gb_multi"],
                                      ["dt_reg", "dt_clf", "rf_clf", "et_reg2", "et_clf", "gb_reg", "gb_bin"]))
def test_impurity_importance_is_feature_importances(name):
    model, ens, _, _ = fitted(name)
    got = jaximp.split_importance(ens, "impurity")
    assert got.shape == (ens.n_features,)
    assert_close(got, model.feature_importances_)


def test_losses_and_names():
    X, y = make_data("regression", n=120, n_features=4)
    X = X[:, :3]
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    losses = {
        ensemble.GradientBoostingRegressor(n_estimators=2, loss="absolute_error"): "MAE",
        ensemble.GradientBoostingRegressor(n_estimators=2, loss="huber"): "",
        ensemble.GradientBoostingRegressor(n_estimators=2, loss="quantile"): "Quantile",
        ensemble.HistGradientBoostingRegressor(max_iter=2, loss="poisson"): "Poisson",
        ensemble.HistGradientBoostingRegressor(max_iter=2, loss="gamma"): "",
        tree.DecisionTreeRegressor(max_depth=2, criterion="poisson"): "",
        tree.DecisionTreeRegressor(max_depth=2, criterion="friedman_mse"): "RMSE",
        ensemble.RandomForestRegressor(2, max_depth=2, criterion="absolute_error"): "MAE",
    }
    positive = np.exp(y / 4)
    for model, loss in losses.items():
        ens = jaximp.from_sklearn(model.fit(frame, positive))
        assert ens.loss_function == loss, model
        assert ens.feature_names == ("a", "b", "c")
    binary = (y > 0).astype(int)
    exponential = ensemble.GradientBoostingClassifier(n_estimators=2, loss="exponential").fit(X, binary)
    assert jaximp.from_sklearn(exponential).loss_function == ""
    assert jaximp.from_sklearn(tree.DecisionTreeClassifier(max_depth=2).fit(X, np.array(["u", "v"])[binary])
                               ).class_names == ("u", "v")
    # a DataFrame's columns are matched by name; the Poisson ensemble's raw output is the log
    model = ensemble.HistGradientBoostingRegressor(max_iter=5, loss="poisson").fit(frame, positive)
    ens = jaximp.from_sklearn(model)
    assert_close(jaximp.predict(ens, frame[["c", "a", "b"]]), np.log(model.predict(frame)))


def test_init_and_zero_init():
    X, y = make_data("multiclass", n=200, n_features=4)
    for init in ("zero", None):
        model = ensemble.GradientBoostingClassifier(n_estimators=5, max_depth=2, init=init).fit(X, y)
        assert_close(jaximp.predict(jaximp.from_sklearn(model), X), model.decision_function(X))


def test_single_leaf_trees():
    """A constant target: every tree one leaf (the root), no player, importances all 0."""
    X, _ = make_data("regression", n=50, n_features=4)
    model = ensemble.RandomForestRegressor(3, random_state=0).fit(X, np.full(50, 2.5))
    ens = jaximp.from_sklearn(model)
    assert ens.n_leaves == 1 and np.all(np.asarray(ens.roots) == -1)
    assert_close(jaximp.predict(ens, X), model.predict(X))
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, X), model.apply(X))
    np.testing.assert_array_equal(jaximp.shap_values(ens, X[:3]), 0.0)
    assert_close(jaximp.expected_value(ens), 2.5)
    np.testing.assert_array_equal(jaximp.split_importance(ens, "impurity"), model.feature_importances_)


# 2. Thresholds ----------------------------------------------------------------------------


def test_rows_equal_to_thresholds():
    """Diabetes columns hold float64 values a float32 apart, so sklearn's thresholds (float64
    midpoints of float32 values) often round up to the float32 of a row: rows equal to every
    threshold go where scikit-learn sends them (x32 <= t), which rounding the thresholds to the
    nearest float32 would not."""
    X, y = load_diabetes(return_X_y=True)
    model = ensemble.RandomForestRegressor(4, max_depth=8, random_state=0).fit(X, y)
    ens = jaximp.from_sklearn(model)
    probe = []
    for estimator in model.estimators_:
        t = estimator.tree_
        for node in np.flatnonzero(t.children_left >= 0):
            row = X[node % len(X)].copy()
            row[t.feature[node]] = t.threshold[node]
            probe.append(row)
    probe = np.asarray(probe)  # float64, cast to float32 by both
    thresholds = np.concatenate([e.tree_.threshold[e.tree_.children_left >= 0] for e in model.estimators_])
    assert np.sum(np.float32(thresholds) > thresholds) > 20  # rounding to nearest would send these right
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, probe), model.apply(probe))
    assert_close(jaximp.predict(ens, probe), model.predict(probe))


def test_hist_gradient_boosting_thresholds_and_nan_splits():
    """HistGradientBoosting compares float64 values with float64 thresholds: float32 rows on
    either side of every threshold (the float32 at or below it, the next one up), and NaN, go
    where it sends them, including splits on missing values alone (threshold +inf)."""
    X, y = make_data("regression", n=400, n_features=4)
    X[:150, 1] = np.nan
    y[:150] += 3.0  # missingness matters: splits on NaN
    model = ensemble.HistGradientBoostingRegressor(max_iter=8, max_leaf_nodes=12, random_state=0).fit(X, y)
    ens = jaximp.from_sklearn(model)
    nodes = [p.nodes for stage in model._predictors for p in stage]
    assert any(np.isinf(n["num_threshold"][n["is_leaf"] == 0]).any() for n in nodes)
    probe = []
    for n in nodes:
        for node in n[n["is_leaf"] == 0]:
            t = node["num_threshold"]
            below = np.float32(t) if np.float32(t) <= t else np.nextafter(np.float32(t), np.float32(-np.inf))
            for value in (below, np.nextafter(below, np.float32(np.inf)), np.nan):
                row = X[len(probe) % len(X)].copy()
                row[node["feature_idx"]] = value
                probe.append(row)
    probe = np.asarray(probe, np.float32)
    assert_close(jaximp.predict(ens, probe), model.predict(probe))
    # the splits on NaN count as splits
    weight = np.asarray(jaximp.split_importance(ens, "weight"))
    assert weight.sum() == sum(int((n["is_leaf"] == 0).sum()) for n in nodes)


# 3. SHAP ----------------------------------------------------------------------------------


def shap_layout(values, expected, k):
    """shap's values as ``[N, F, K]`` and its expected value as ``[K]``."""
    values = np.asarray(values)
    return values.reshape(values.shape[:2] + (k,)), np.asarray(expected).reshape(k)


@pytest.mark.parametrize("name", grid(["rf_clf"], ["dt_reg", "dt_clf", "rf_reg", "et_reg2", "et_clf", "gb_reg",
                                                   "gb_bin", "hgb_reg", "hgb_bin"]))
def test_path_dependent_shap_matches_shap(name):
    model, ens, X, _ = fitted(name)
    x = rows(X, 40)
    explainer = shap.TreeExplainer(model, feature_perturbation="tree_path_dependent")
    expected, base = shap_layout(explainer.shap_values(x), explainer.expected_value, ens.n_outputs)
    got = jaximp.shap_values(ens, x)
    assert got.shape == ((len(x), ens.n_features) if ens.n_outputs == 1 else expected.shape)
    assert_close(np.reshape(got, expected.shape), expected)
    assert_close(np.reshape(jaximp.expected_value(ens), -1), base)


@pytest.mark.parametrize("name", grid(["gb_bin"], ["dt_reg", "rf_reg", "rf_clf", "et_clf", "gb_reg"]))
def test_interventional_shap_matches_shap(name):
    model, ens, X, _ = fitted(name)
    x, background = rows(X, 30), X[100:140]
    explainer = shap.TreeExplainer(model, data=background, feature_perturbation="interventional")
    expected, base = shap_layout(explainer.shap_values(x, check_additivity=False), explainer.expected_value,
                                 ens.n_outputs)
    got = jaximp.shap_values(ens, x, method="interventional", background=background)
    assert_close(np.reshape(got, expected.shape), expected)
    assert_close(np.reshape(jaximp.expected_value(ens, method="interventional", background=background), -1), base)


def brute_interventional(model, x, background):
    """``f64[N, F, K]``: Shapley values of ``v(S) = mean_b raw(x_S, b_rest)`` by enumerating all
    coalitions, each evaluated by the model's own prediction."""
    f = x.shape[1]
    masks = np.array(list(itertools.product([False, True], repeat=f)))  # [2^F, F]
    code = masks @ (1 << np.arange(f))
    out = []
    for row in x:
        mixed = np.where(masks[:, None, :], row, background[None]).reshape(-1, f)
        v = np.asarray(raw_output(model, mixed), np.float64).reshape(len(masks), len(background), -1).mean(1)
        v = v[np.argsort(code)]  # v[c]: coalition with bit p set for player p
        phi = np.zeros((f, v.shape[1]))
        for c in range(len(masks)):
            size = bin(c).count("1")
            for p in range(f):
                if not c >> p & 1:
                    w = math.factorial(size) * math.factorial(f - size - 1) / math.factorial(f)
                    phi[p] += w * (v[c | 1 << p] - v[c])
        out.append(phi)
    return np.asarray(out)


@pytest.mark.slow
def test_interventional_where_shap_rounds_thresholds():
    """On diabetes, shap's interventional values of a decision tree differ from the Shapley
    values of the model's own predictions (by 2 on outputs of magnitude 80: it routes rows equal
    to a float32-rounded threshold as the rounded threshold says, see test_rows_equal_to_thresholds);
    jaximp's equal them."""
    X, y = load_diabetes(return_X_y=True)
    X = X.astype(np.float32)
    model = tree.DecisionTreeRegressor(max_depth=6, random_state=0).fit(X, y)
    ens = jaximp.from_sklearn(model)
    x, background = X[30:34], X[50:80]
    expected = brute_interventional(model, x, background)[..., 0]
    got = jaximp.shap_values(ens, x, method="interventional", background=background)
    assert_close(got, expected)
    shap_values = shap.TreeExplainer(model, data=background, feature_perturbation="interventional").shap_values(
        x, check_additivity=False)
    assert np.abs(shap_values - expected).max() > 1.0  # shap's error, not jaximp's


@pytest.mark.parametrize("name", grid([], ["gb_multi", "hgb_multi", "hgb_reg"]))
def test_interventional_matches_brute_force(name):
    """Models shap does not explain (multiclass boosting) or explains wrongly (interventional
    HistGradientBoosting): Shapley values of the model's own predictions, NaN included."""
    model, ens, X, _ = fitted(name)
    x, background = rows(X, 6), X[200:215]
    expected = brute_interventional(model, x, background)
    got = jaximp.shap_values(ens, x, method="interventional", background=background)
    assert_close(np.reshape(got, expected.shape), expected)
    base = np.asarray(raw_output(model, background), np.float64).reshape(len(background), -1).mean(0)
    assert_close(np.reshape(jaximp.expected_value(ens, method="interventional", background=background), -1), base)


def library_trees(model):
    """``[(left, right, feature, threshold, nan_left, value [n, K], cover, scale)]`` read from
    the library's own arrays (independently of the importer), for the brute force."""
    out = []
    if isinstance(model, ensemble.HistGradientBoostingClassifier):
        k = model.n_trees_per_iteration_
        for stage in model._predictors:
            for c, p in enumerate(stage):
                n = p.nodes
                value = np.zeros((len(n), k))
                value[:, c] = n["value"]
                out.append((np.where(n["is_leaf"] == 1, -1, n["left"].astype(int)), n["right"].astype(int),
                            n["feature_idx"], n["num_threshold"], n["missing_go_to_left"] == 1, value,
                            n["count"].astype(float), 1.0))
        return out
    k = model.estimators_.shape[1]
    for s, c in itertools.product(range(model.estimators_.shape[0]), range(k)):
        t = model.estimators_[s, c].tree_
        value = np.zeros((t.node_count, k))
        value[:, c] = t.value[:, 0, 0]
        out.append((t.children_left, t.children_right, t.feature, t.threshold, t.missing_go_to_left == 1, value,
                    t.weighted_n_node_samples, model.learning_rate))
    return out


def brute_path_dependent(model, x):
    """``f64[N, F, K]``: Shapley values of Lundberg's path-dependent game per tree (a feature
    outside S follows both children weighted by cover), enumerating coalitions of its features."""
    out = np.zeros((len(x), x.shape[1], 0))
    for left, right, feature, threshold, nan_left, value, cover, scale in library_trees(model):
        out = out if out.shape[2] else np.zeros((len(x), x.shape[1], value.shape[1]))

        def v(node, row, S):
            if left[node] < 0:
                return value[node]
            f = feature[node]
            if f in S:
                go_left = nan_left[node] if np.isnan(row[f]) else np.float64(row[f]) <= threshold[node]
                return v(left[node] if go_left else right[node], row, S)
            l, r = left[node], right[node]
            return (cover[l] * v(l, row, S) + cover[r] * v(r, row, S)) / cover[node]

        players = sorted(set(feature[left >= 0].tolist()))
        for i, row in enumerate(x):
            for p in players:
                others = [q for q in players if q != p]
                for size in range(len(players)):
                    w = math.factorial(size) * math.factorial(len(players) - size - 1) / math.factorial(len(players))
                    for S in itertools.combinations(others, size):
                        out[i, p] += scale * w * (v(0, row, set(S) | {p}) - v(0, row, set(S)))
    return out


@pytest.mark.parametrize("make", grid(
    [lambda: ensemble.HistGradientBoostingClassifier(max_iter=3, max_leaf_nodes=5, random_state=0)],
    [lambda: ensemble.GradientBoostingClassifier(n_estimators=3, max_depth=2, random_state=0)],
), ids=["hgb_multi", "gb_multi"])
def test_path_dependent_matches_brute_force(make):
    X, y = make_data("multiclass", n=300, n_features=4, nan_fraction=0.0)
    if "Hist" in type(make()).__name__:
        X[np.random.default_rng(1).random(X.shape) < 0.05] = np.nan
    model = make().fit(X, y)
    ens = jaximp.from_sklearn(model)
    x = rows(X, 8)
    expected = brute_path_dependent(model, x)
    assert_close(jaximp.shap_values(ens, x), expected)
    # additivity against the library's raw output
    got = jaximp.shap_values(ens, x).sum(1) + np.asarray(jaximp.expected_value(ens))
    assert_close(got, raw_output(model, x))


@pytest.mark.slow
def test_deep_forest_uses_the_deep_kernel_and_matches_shap():
    """Unlimited depth (> 12 levels): jaximp's quadrature kernel, against shap."""
    X, y = make_data("regression", n=400, n_features=5, seed=2)
    model = ensemble.RandomForestRegressor(3, random_state=0).fit(X, y)
    ens = jaximp.from_sklearn(model)
    assert ens.depth > 12
    x = rows(X, 20)
    expected = shap.TreeExplainer(model).shap_values(x)
    assert_close(jaximp.shap_values(ens, x), expected)


# 4. Permutation importance ----------------------------------------------------------------


def test_permutation_matches_brute_force_with_the_same_draws():
    """RMSE (the ensemble's loss): scikit-learn predicts every permuted copy of X."""
    model, ens, X, y = fitted("rf_reg")
    got = jaximp.permutation_importance(ens, X, y, n_repeats=3, random_state=7, max_samples=0.8)
    want = np.zeros((X.shape[1], 3))
    for r, (rows_, source) in enumerate(_row_draws(as_key(7, "test"), 3, len(X), int(0.8 * len(X)))):
        def score(Xp):
            return -np.sqrt(np.mean((model.predict(Xp) - y[rows_]) ** 2))

        for f in range(X.shape[1]):
            permuted = X[rows_].copy()
            permuted[:, f] = X[source, f]
            want[f, r] = score(X[rows_]) - score(permuted)
    assert_close(got.importances, want)


@pytest.mark.slow
@pytest.mark.parametrize("name, scoring", [("gb_bin", "neg_log_loss"), ("rf_clf", "accuracy"), ("hgb_reg", "r2")])
def test_permutation_agrees_with_sklearn_within_sampling_error(name, scoring):
    model, ens, X, y = fitted(name)
    repeats = 30
    want = sklearn_permutation_importance(model, X, y, scoring=scoring, n_repeats=repeats, random_state=0)
    got = jaximp.permutation_importance(ens, X, y, scoring=scoring, n_repeats=repeats, random_state=0)
    standard_error = np.sqrt((got.importances_std**2 + want.importances_std**2) / repeats)
    assert np.all(np.abs(got.importances_mean - want.importances_mean) <= 4 * standard_error + 1e-5)
    assert got.importances_mean[0] > 10 * standard_error[0]  # the test has power: feature 0 matters


def test_probability_outputs_refuse_logit_scorers():
    _, ens, X, y = fitted("rf_clf")
    with pytest.raises(ValueError, match="'neg_log_loss' needs the model's logits"):
        jaximp.permutation_importance(ens, X, y, scoring="neg_log_loss")
    with pytest.raises(ValueError, match="loss_function must be known"):
        jaximp.permutation_importance(ens, X, y)


# 5. Bad input ----------------------------------------------------------------------------


def test_errors():
    X, y = make_data("regression", n=100, n_features=4)
    X = X[:, :3]
    with pytest.raises(ValueError, match="from_sklearn: model must be fitted; got an unfitted RandomForestRegressor"):
        jaximp.from_sklearn(ensemble.RandomForestRegressor())
    with pytest.raises(TypeError, match="from_sklearn: model must be a scikit-learn .*; got LinearRegression"):
        jaximp.from_sklearn(LinearRegression().fit(X, y))
    with pytest.raises(TypeError, match="got str"):
        jaximp.from_sklearn("model.pkl")
    two = tree.DecisionTreeClassifier(max_depth=2).fit(X, np.stack([y > 0, y > 1], 1))
    with pytest.raises(ValueError, match="single-output classifier; got a DecisionTreeClassifier with 2 outputs"):
        jaximp.from_sklearn(two)
    linear_init = ensemble.GradientBoostingRegressor(n_estimators=2, init=LinearRegression()).fit(X, y)
    with pytest.raises(ValueError, match="model.init must be None, 'zero' or a DummyRegressor"):
        jaximp.from_sklearn(linear_init)
