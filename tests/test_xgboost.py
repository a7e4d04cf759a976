"""XGBoost models (``jaximp.from_xgboost``) against XGBoost's own numbers.

Oracles, on real models trained here (a few hundred rows, NaN in X, ``nthread=1``):
* ``Booster.predict`` on a ``DMatrix``: ``output_margin=True`` (predict), ``pred_leaf=True``
  (leaf_indices), ``pred_contribs=True`` (path-dependent SHAP, the last column the expected
  value), ``pred_contribs=True, approx_contribs=True`` (Saabas) and ``pred_interactions=True``
  (interaction values, without the bias row and column; XGBoost's diagonal is SHAP minus the
  row's off-diagonal sum, as jaximp's);
* ``Booster.get_score`` for the split importances (keyed "f0".."f5" or by feature name, 0 for a
  feature never split on);
* shap's ``TreeExplainer`` (interventional) on the Booster;
* brute-force Shapley enumeration over the JSON trees (path-dependent with ``sum_hessian``
  covers, and interventional), and a permutation brute force with jaximp's own row draws scored
  by scikit-learn's metrics on XGBoost's predictions.

Tolerances: jaximp sums <= 16 trees in float32 where XGBoost sums in float32 or float64 in
another order, so values of magnitude ``m`` agree to about ``16 * 6e-8 * m``: ``rtol=1e-5,
atol=1e-5 * max(1, m)``; leaf indices exactly.

The default run checks SHAP on two models (regression, multiclass); every objective of GRID is
checked with ``-m slow`` (each model costs seconds of compilation per kernel).
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import sys

import numpy as np
import pytest
import shap
import xgboost as xgb
from conftest import make_data
from sklearn.metrics import log_loss, root_mean_squared_error

import jaximp
from jaximp._importances.permutation import _row_draws, as_key

RTOL = 1e-5
TYPES = ("weight", "gain", "cover", "total_gain", "total_cover")
GRID = {  # name: (kind of data, XGBoost parameters)
    "squarederror": ("regression", dict(objective="reg:squarederror", max_depth=6)),
    "logistic": ("binary", dict(objective="binary:logistic", max_depth=4, min_child_weight=0.5)),
    "softprob": ("multiclass", dict(objective="multi:softprob", num_class=3, max_depth=5)),
    "poisson": ("count", dict(objective="count:poisson", max_depth=3)),
    "reg-logistic-lossguide": ("probability", dict(objective="reg:logistic", grow_policy="lossguide",
                                                   max_depth=0, max_leaves=24)),
    "quantiles": ("regression", dict(objective="reg:quantileerror", quantile_alpha=[0.2, 0.8], max_depth=4)),
    "dart": ("regression", dict(booster="dart", rate_drop=0.3, skip_drop=0.0, max_depth=4)),
    "forest-softprob": ("multiclass", dict(objective="multi:softprob", num_class=3, num_parallel_tree=2,
                                           subsample=0.7, colsample_bynode=0.7, max_depth=4)),
}


def data(kind, n=400, n_features=6, seed=0):
    """``(X f32[n, F] with 5% NaN, y)`` for a kind of target."""
    base = {"count": "regression", "probability": "regression"}.get(kind, kind)
    X, y = make_data(base, n=n, n_features=n_features, seed=seed, nan_fraction=0.05)
    if kind == "count":
        y = np.random.default_rng(seed).poisson(np.exp(np.clip(y, -3, 3) / 2))
    elif kind == "probability":
        y = 1.0 / (1.0 + np.exp(-y))
    return X, y


@functools.cache
def trained(name, rounds=8):
    """``(Booster, ens, X)`` for a case of GRID."""
    kind, params = GRID[name]
    X, y = data(kind)
    booster = xgb.train(dict(params, eta=0.3, nthread=1, seed=0), xgb.DMatrix(X, y), num_boost_round=rounds)
    return booster, jaximp.from_xgboost(booster), X


FAST = ("squarederror", "softprob")  # the rest of GRID runs with -m slow (compile time)


def grid(names, fast=FAST):
    """``names`` as parameters, those not in ``fast`` marked slow."""
    return [pytest.param(name, marks=() if name in fast else pytest.mark.slow) for name in names]


@pytest.fixture(scope="module", params=list(GRID))
def case(request):
    return trained(request.param)


@pytest.fixture(scope="module", params=grid(GRID))
def shap_case(request):
    return trained(request.param)


def rows(X, n=60, seed=3):
    """Rows to explain: training rows plus fresh ones, NaN included."""
    rng = np.random.default_rng(seed)
    fresh = rng.normal(size=(n // 2, X.shape[1])).astype(np.float32)
    fresh[rng.random(fresh.shape) < 0.1] = np.nan
    return np.concatenate([X[: n - n // 2], fresh])


def assert_close(got, expected, rtol=RTOL):
    expected = np.asarray(expected, np.float64)
    magnitude = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(np.asarray(got, np.float64), expected, rtol=rtol, atol=rtol * magnitude)


def contributions(booster, x, **kw):
    """XGBoost's ``pred_contribs`` / ``pred_interactions`` with the outputs last: ``[N, F+1, K]``
    (or ``[N, F+1, F+1, K]``), K = 1 included."""
    out = booster.predict(xgb.DMatrix(x), **kw)
    if kw.get("pred_interactions"):
        return out[..., None] if out.ndim == 3 else out.transpose(0, 2, 3, 1)
    return out[..., None] if out.ndim == 2 else out.transpose(0, 2, 1)


# 1. Predictions and leaves -----------------------------------------------------------------


def test_predict_and_leaves(case):
    booster, ens, X = case
    x = rows(X, 200)
    expected = booster.predict(xgb.DMatrix(x), output_margin=True)
    got = jaximp.predict(ens, x)
    assert got.shape == expected.shape and got.dtype == np.float32
    assert_close(got, expected)
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, x), booster.predict(xgb.DMatrix(x), pred_leaf=True))
    assert ens.n_trees == len(booster.get_dump())


@pytest.mark.parametrize("params", [dict(tree_method="exact", gamma=1.0, max_depth=6), dict(min_split_loss=1e9)],
                         ids=["pruned", "single-leaf"])
def test_pruned_and_single_leaf_trees(params):
    """The exact method's pruning leaves deleted nodes in the arrays (``num_deleted`` > 0), never
    reached from the root; a split loss no split can pay leaves every tree a single leaf."""
    X, y = data("regression")
    booster = xgb.train(dict(params, nthread=1), xgb.DMatrix(X, y), num_boost_round=6)
    trees = json.loads(booster.save_raw("json"))["learner"]["gradient_booster"]["model"]["trees"]
    ens = jaximp.from_xgboost(booster)
    x = rows(X, 100)
    assert_close(jaximp.predict(ens, x), booster.predict(xgb.DMatrix(x), output_margin=True))
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, x), booster.predict(xgb.DMatrix(x), pred_leaf=True))
    score = booster.get_score(importance_type="weight")
    np.testing.assert_array_equal(jaximp.split_importance(ens, "weight"), [score.get(f"f{i}", 0) for i in range(6)])
    if "gamma" in params:
        assert sum(int(tree["tree_param"]["num_deleted"]) for tree in trees) > 0
    else:
        assert ens.depth == 0 and np.all(np.asarray(ens.roots) == -1)


def test_bias_and_loss_function():
    """``base_score`` is on the prediction scale: the margin adds its logit or log (checked
    above through predict); the objective names the loss used by scoring=None."""
    expected = {"squarederror": "RMSE", "logistic": "Logloss", "softprob": "MultiClass", "poisson": "",
                "reg-logistic-lossguide": "CrossEntropy", "quantiles": "", "dart": "RMSE"}
    for name, loss in expected.items():
        booster, ens, _ = trained(name)
        assert ens.loss_function == loss
        base = json.loads(booster.save_raw("json"))["learner"]["learner_model_param"]["base_score"]
        base = np.asarray(json.loads(base) if base.startswith("[") else [float(base)], np.float64)
        link = {"logistic": lambda p: np.log(p / (1 - p)), "reg-logistic-lossguide": lambda p: np.log(p / (1 - p)),
                "poisson": np.log}.get(name, lambda p: p)
        assert_close(np.asarray(ens.bias), np.broadcast_to(link(base), (ens.n_outputs,)))


# 2. Split importances ----------------------------------------------------------------------


@pytest.mark.parametrize("name", grid(GRID, fast=("forest-softprob",)))
def test_split_importance_matches_get_score(name):
    booster, ens, _ = trained(name)
    for type in TYPES:
        score = booster.get_score(importance_type=type)
        expected = [score.get(f"f{i}", 0.0) for i in range(ens.n_features)]
        got = jaximp.split_importance(ens, type)
        assert got.shape == (ens.n_features,)
        assert_close(got, expected)


def test_feature_names_from_a_data_frame():
    pd = pytest.importorskip("pandas")
    X, y = data("regression")
    frame = pd.DataFrame(X, columns=[f"col_{i}" for i in range(X.shape[1])])
    booster = xgb.train(dict(max_depth=3, nthread=1), xgb.DMatrix(frame, y), num_boost_round=5)
    ens = jaximp.from_xgboost(booster)
    assert ens.feature_names == tuple(frame.columns)
    score = booster.get_score(importance_type="total_gain")
    assert_close(jaximp.split_importance(ens, "total_gain"), [score.get(name, 0.0) for name in frame.columns])
    shuffled = frame[list(reversed(frame.columns))]  # matched by name
    assert_close(jaximp.predict(ens, shuffled), booster.predict(xgb.DMatrix(frame), output_margin=True))


# 3. SHAP -----------------------------------------------------------------------------------


def test_shap_values_match_pred_contribs(shap_case):
    booster, ens, X = shap_case
    x = rows(X)
    expected = contributions(booster, x, pred_contribs=True)  # [N, F+1, K]
    got = jaximp.shap_values(ens, x)
    assert_close(np.reshape(got, expected[:, :-1].shape), expected[:, :-1])
    assert_close(np.reshape(jaximp.expected_value(ens), -1), expected[0, -1])


@pytest.mark.parametrize("name", grid(GRID, fast=("softprob",)))
def test_approximate_matches_approx_contribs(name):
    booster, ens, X = trained(name)
    x = rows(X)
    expected = contributions(booster, x, pred_contribs=True, approx_contribs=True)
    got = jaximp.shap_values(ens, x, method="approximate")
    assert_close(np.reshape(got, expected[:, :-1].shape), expected[:, :-1])
    assert_close(np.reshape(jaximp.expected_value(ens, method="approximate"), -1), expected[0, -1])


@pytest.mark.parametrize("name", grid(["softprob", "reg-logistic-lossguide", "squarederror"], fast=("softprob",)))
def test_interaction_values_match_pred_interactions(name):
    booster, ens, X = trained(name)
    x = rows(X, 30)
    expected = contributions(booster, x, pred_interactions=True)[:, :-1, :-1]  # [N, F, F, K]
    got = jaximp.shap_interaction_values(ens, x)
    assert_close(np.reshape(got, expected.shape), expected)


@pytest.mark.parametrize("name", grid(["softprob", "squarederror", "poisson"], fast=("softprob",)))
def test_interventional_matches_shap(name):
    booster, ens, X = trained(name)
    x, background = rows(X, 30), X[100:140]
    explainer = shap.TreeExplainer(booster, data=background, feature_perturbation="interventional")
    expected = np.asarray(explainer.shap_values(x))
    got = jaximp.shap_values(ens, x, method="interventional", background=background)
    assert_close(np.reshape(got, expected.shape), expected)
    base = np.reshape(jaximp.expected_value(ens, method="interventional", background=background), -1)
    if ens.n_outputs == 1:
        assert_close(base, np.reshape(explainer.expected_value, -1))
    # shap 0.51 adds one base_score to every class of an XGBoost 3 multiclass model; additivity
    # against XGBoost's margin checks the expected value for every output
    margin = np.reshape(booster.predict(xgb.DMatrix(x), output_margin=True), (len(x), -1))
    assert_close(np.reshape(got, (len(x), ens.n_features, -1)).sum(1) + base, margin)


def brute_force(model_json, x, background=None):
    """``[N, F, K]`` Shapley values by enumerating coalitions of each JSON tree's features, with
    the path-dependent value function (children weighted by ``sum_hessian``) or the
    interventional one over ``background``; float64."""
    learner = model_json["learner"]
    model = learner["gradient_booster"]["model"]
    n_features = int(learner["learner_model_param"]["num_feature"])
    n_outputs = max(1, int(learner["learner_model_param"]["num_class"]))
    out = np.zeros((len(x), n_features, n_outputs))
    for tree, k in zip(model["trees"], model["tree_info"]):
        left, right, feature = tree["left_children"], tree["right_children"], tree["split_indices"]
        condition, default_left, cover = tree["split_conditions"], tree["default_left"], tree["sum_hessian"]

        def child(n, row):
            v = row[feature[n]]
            go_left = default_left[n] if np.isnan(v) else np.float32(v) < np.float32(condition[n])
            return left[n] if go_left else right[n]

        def path_value(n, row, S):
            if left[n] < 0:
                return condition[n]
            if feature[n] in S:
                return path_value(child(n, row), row, S)
            cl, cr = cover[left[n]], cover[right[n]]
            return (cl * path_value(left[n], row, S) + cr * path_value(right[n], row, S)) / (cl + cr)

        def leaf_value(row):
            n = 0
            while left[n] >= 0:
                n = child(n, row)
            return condition[n]

        players = sorted({feature[n] for n in range(len(left)) if left[n] >= 0})
        m = len(players)
        for i, row in enumerate(x):
            def value(S):
                if background is None:
                    return path_value(0, row, S)
                mixed = np.where(np.isin(np.arange(n_features), list(S)), row, background)
                return np.mean([leaf_value(b) for b in mixed])

            for p in players:
                others = [q for q in players if q != p]
                for r in range(m):
                    w = math.factorial(r) * math.factorial(m - r - 1) / math.factorial(m)
                    for S in itertools.combinations(others, r):
                        out[i, p, k] += w * (value(set(S) | {p}) - value(set(S)))
    return out


@pytest.mark.parametrize("kind, interventional", [
    ("multiclass", False), pytest.param("regression", True, marks=pytest.mark.slow),  # interventional: vs shap, above
    pytest.param("regression", False, marks=pytest.mark.slow), pytest.param("multiclass", True, marks=pytest.mark.slow),
])
def test_brute_force(kind, interventional):
    X, y = data(kind, n=300, n_features=4)
    params = dict(max_depth=3, eta=0.5, nthread=1, seed=0)
    if kind == "multiclass":
        params.update(objective="multi:softprob", num_class=3)
    booster = xgb.train(params, xgb.DMatrix(X, y), num_boost_round=2)
    ens = jaximp.from_xgboost(booster)
    x, background = rows(X, 10), (X[200:215] if interventional else None)
    expected = brute_force(json.loads(booster.save_raw("json")), x, background)
    method = "interventional" if interventional else "path_dependent"
    got = jaximp.shap_values(ens, x, method=method, background=background)
    assert_close(np.reshape(got, expected.shape), expected)


# 4. Permutation importance -------------------------------------------------------------------


@pytest.mark.parametrize("name, weighted, max_samples", [("logistic", True, 0.6), ("softprob", False, 1.0)])
def test_permutation_matches_brute_force_with_the_same_draws(name, weighted, max_samples):
    booster, ens, X = trained(name)
    kind = GRID[name][0]
    _, y = data(kind)
    w = np.random.default_rng(1).uniform(0.2, 3.0, size=len(X)) if weighted else None
    got = jaximp.permutation_importance(ens, X, y, n_repeats=3, random_state=7, sample_weight=w,
                                        max_samples=max_samples)

    def score(rows, Xp):  # minus the model's loss, XGBoost's predictions scored by scikit-learn
        p = booster.predict(xgb.DMatrix(Xp))
        ws = None if w is None else w[rows]
        if kind == "regression":
            return -root_mean_squared_error(y[rows], p, sample_weight=ws)
        return -log_loss(y[rows], p, sample_weight=ws, labels=np.arange(3) if kind == "multiclass" else None)

    draws = _row_draws(as_key(7, "test"), 3, len(X), int(max_samples * len(X)))
    expected = np.zeros((X.shape[1], 3))
    for r, (chosen, source) in enumerate(draws):
        base = score(chosen, X[chosen])
        for f in range(X.shape[1]):
            permuted = X[chosen].copy()
            permuted[:, f] = X[source, f]
            expected[f, r] = base - score(chosen, permuted)
    np.testing.assert_allclose(got.importances, expected, rtol=RTOL, atol=RTOL)


# 5. Sources: scikit-learn models, files, iteration ranges --------------------------------------


def test_sklearn_models():
    X, y = data("multiclass")
    classifier = xgb.XGBClassifier(n_estimators=6, max_depth=3, nthread=1).fit(X, y)
    ens = jaximp.from_xgboost(classifier)
    assert ens.class_names == (0, 1, 2) and ens.loss_function == "MultiClass"
    assert_close(jaximp.predict(ens, X), classifier.predict(X, output_margin=True))
    X, y = data("regression")
    early = xgb.XGBRegressor(n_estimators=200, max_depth=3, learning_rate=0.5, early_stopping_rounds=2, nthread=1)
    early.fit(X[:300], y[:300], eval_set=[(X[300:], y[300:])], verbose=False)
    ens = jaximp.from_xgboost(early)  # the rounds predict uses: up to best_iteration
    assert ens.n_trees == early.best_iteration + 1 < early.get_booster().num_boosted_rounds()
    assert_close(jaximp.predict(ens, X), early.predict(X, output_margin=True))
    every = jaximp.from_xgboost(early.get_booster())  # a Booster predicts with every round
    assert every.n_trees == early.get_booster().num_boosted_rounds()
    ranker = xgb.XGBRanker(n_estimators=4, max_depth=3, nthread=1)
    ranker.fit(X, (y > 0).astype(int), qid=np.repeat(np.arange(4), 100))
    assert_close(jaximp.predict(jaximp.from_xgboost(ranker), X), ranker.predict(X, output_margin=True))


def test_iteration_range():
    booster, _, X = trained("forest-softprob")  # 2 parallel trees x 3 classes per round
    ens = jaximp.from_xgboost(booster, iteration_range=(2, 5))
    assert ens.n_trees == 3 * 6
    assert_close(jaximp.predict(ens, X), booster.predict(xgb.DMatrix(X), output_margin=True, iteration_range=(2, 5)))
    for bad in [(3, 3), (0, 9), (-1, 2), "all"]:
        with pytest.raises(ValueError, match="iteration_range must"):
            jaximp.from_xgboost(booster, iteration_range=bad)


def assert_same_ensemble(a, b):
    for field in ("roots", "node_features", "node_borders", "node_nan_right", "node_children", "leaf_values",
                  "leaf_weights", "bias", "node_gains", "node_weights", "leaf_ids"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
    assert (a.feature_names, a.loss_function, a.depth) == (b.feature_names, b.loss_function, b.depth)


@pytest.mark.parametrize("name", ["softprob", "dart"])
def test_model_files_without_xgboost(name, tmp_path, monkeypatch):
    booster, ens, _ = trained(name)
    paths = [tmp_path / "model.json", tmp_path / "model.ubj"]
    for path in paths:
        booster.save_model(path)
    assert paths[1].read_bytes()[:1] == b"{" and paths[1].read_bytes()[1:2] != b'"'  # binary
    raw = [booster.save_raw("json"), booster.save_raw("ubj")]
    monkeypatch.setitem(sys.modules, "xgboost", None)  # `import xgboost` now fails
    for source in paths + [str(paths[0])] + raw:
        assert_same_ensemble(jaximp.from_xgboost(source), ens)


# 6. Refusals and bad input -------------------------------------------------------------------


def test_refusals(tmp_path):
    X, y = data("regression", n=200)
    linear = xgb.train(dict(booster="gblinear", nthread=1), xgb.DMatrix(X, y), num_boost_round=2)
    with pytest.raises(ValueError, match="tree booster .*gblinear"):
        jaximp.from_xgboost(linear)
    targets = np.stack([np.nan_to_num(y), np.nan_to_num(X[:, 4])], axis=1)
    vector = xgb.train(dict(tree_method="hist", multi_strategy="multi_output_tree", max_depth=2, nthread=1),
                       xgb.DMatrix(X, targets), num_boost_round=2)
    with pytest.raises(ValueError, match="vector leaves"):
        jaximp.from_xgboost(vector)
    with pytest.raises(ValueError, match="must be a fitted XGBoost model"):
        jaximp.from_xgboost(xgb.XGBRegressor())


def test_bad_sources(tmp_path):
    with pytest.raises(ValueError, match="existing model file"):
        jaximp.from_xgboost(tmp_path / "missing.json")
    text = tmp_path / "model.txt"
    text.write_text("booster[0]:\n0:[f0<1] yes=1,no=2\n")
    with pytest.raises(ValueError, match="saved as JSON or UBJSON"):
        jaximp.from_xgboost(text)
    broken = tmp_path / "broken.json"
    broken.write_text('{"learner": {')
    with pytest.raises(ValueError, match="not a readable XGBoost"):
        jaximp.from_xgboost(broken)
    with pytest.raises(ValueError, match="not a readable XGBoost"):
        jaximp.from_xgboost(trained("squarederror")[0].save_raw("ubj")[:-40])
    other = tmp_path / "other.json"
    other.write_text('{"features_info": {}}')
    with pytest.raises(ValueError, match="not an XGBoost model"):
        jaximp.from_xgboost(other)
    corrupt = json.loads(trained("squarederror")[0].save_raw("json"))
    del corrupt["learner"]["gradient_booster"]["model"]["trees"][0]["sum_hessian"]
    with pytest.raises(ValueError, match="corrupt"):
        jaximp.from_xgboost(corrupt)
    corrupt = json.loads(trained("squarederror")[0].save_raw("json"))
    corrupt["learner"]["gradient_booster"]["model"]["trees"][1]["left_children"][1] = 0  # a cycle
    with pytest.raises(ValueError, match="corrupt"):
        jaximp.from_xgboost(corrupt)
    with pytest.raises(TypeError, match="must be an xgboost.Booster"):
        jaximp.from_xgboost(3.0)
