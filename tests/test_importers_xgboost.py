"""``jaximp.from_xgboost``: Boosters and scikit-learn estimators, model files (JSON, UBJSON)
read without XGBoost, iteration ranges, pruned and single-leaf trees, categorical splits, and
what it refuses.

Oracles: XGBoost's own numbers of the imported model (``predict(output_margin=True)``,
``pred_leaf=True``, ``get_score``), its ``base_score`` and objective, the same model imported
from every source, the error messages. Tolerances: ``rtol=1e-5, atol=1e-5 * max(1, magnitude)``;
leaf indices and ensembles from two sources exactly.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import xgboost as xgb
from models import explained_rows, library_categorical, library_categorical_rows, xgboost_data, xgboost_model
from oracles import assert_close

import jaximp


def test_bias_and_loss_function():
    """``base_score`` is on the prediction scale: the margin adds its logit or log (checked
    through predict in tests/test_leaves.py); the objective names the loss used by scoring=None."""
    expected = {"squarederror": "RMSE", "logistic": "Logloss", "softprob": "MultiClass", "poisson": "",
                "reg-logistic-lossguide": "CrossEntropy", "quantiles": "", "dart": "RMSE"}
    for name, loss in expected.items():
        booster, ens = xgboost_model(name).model, xgboost_model(name).ens
        assert ens.loss_function == loss
        base = json.loads(booster.save_raw("json"))["learner"]["learner_model_param"]["base_score"]
        base = np.asarray(json.loads(base) if base.startswith("[") else [float(base)], np.float64)
        link = {"logistic": lambda p: np.log(p / (1 - p)), "reg-logistic-lossguide": lambda p: np.log(p / (1 - p)),
                "poisson": np.log}.get(name, lambda p: p)
        assert_close(np.asarray(ens.bias), np.broadcast_to(link(base), (ens.n_outputs,)))


@pytest.mark.parametrize("params", [dict(tree_method="exact", gamma=1.0, max_depth=6), dict(min_split_loss=1e9)],
                         ids=["pruned", "single-leaf"])
def test_pruned_and_single_leaf_trees(params):
    """The exact method's pruning leaves deleted nodes in the arrays (``num_deleted`` > 0), never
    reached from the root; a split loss no split can pay leaves every tree a single leaf."""
    X, y = xgboost_data("regression")
    booster = xgb.train(dict(params, nthread=1), xgb.DMatrix(X, y), num_boost_round=6)
    trees = json.loads(booster.save_raw("json"))["learner"]["gradient_booster"]["model"]["trees"]
    ens = jaximp.from_xgboost(booster)
    x = explained_rows(X, 100)
    assert_close(jaximp.predict(ens, x), booster.predict(xgb.DMatrix(x), output_margin=True))
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, x), booster.predict(xgb.DMatrix(x), pred_leaf=True))
    score = booster.get_score(importance_type="weight")
    np.testing.assert_array_equal(jaximp.split_importance(ens, "weight"), [score.get(f"f{i}", 0) for i in range(6)])
    if "gamma" in params:
        assert sum(int(tree["tree_param"]["num_deleted"]) for tree in trees) > 0
    else:
        assert ens.depth == 0 and np.all(np.asarray(ens.roots) == -1)


def test_feature_names_from_a_data_frame():
    import pandas as pd

    X, y = xgboost_data("regression")
    frame = pd.DataFrame(X, columns=[f"col_{i}" for i in range(X.shape[1])])
    booster = xgb.train(dict(max_depth=3, nthread=1), xgb.DMatrix(frame, y), num_boost_round=5)
    ens = jaximp.from_xgboost(booster)
    assert ens.feature_names == tuple(frame.columns)
    score = booster.get_score(importance_type="total_gain")
    assert_close(jaximp.split_importance(ens, "total_gain"), [score.get(name, 0.0) for name in frame.columns])
    shuffled = frame[list(reversed(frame.columns))]  # matched by name
    assert_close(jaximp.predict(ens, shuffled), booster.predict(xgb.DMatrix(frame), output_margin=True))


def test_sklearn_models():
    X, y = xgboost_data("multiclass")
    classifier = xgb.XGBClassifier(n_estimators=6, max_depth=3, nthread=1).fit(X, y)
    ens = jaximp.from_xgboost(classifier)
    assert ens.class_names == (0, 1, 2) and ens.loss_function == "MultiClass"
    assert_close(jaximp.predict(ens, X), classifier.predict(X, output_margin=True))
    X, y = xgboost_data("regression")
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
    fitted = xgboost_model("forest-softprob")  # 2 parallel trees x 3 classes per round
    booster, X = fitted.model, fitted.X
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
    booster, ens = xgboost_model(name).model, xgboost_model(name).ens
    paths = [tmp_path / "model.json", tmp_path / "model.ubj"]
    for path in paths:
        booster.save_model(path)
    assert paths[1].read_bytes()[:1] == b"{" and paths[1].read_bytes()[1:2] != b'"'  # binary
    raw = [booster.save_raw("json"), booster.save_raw("ubj")]
    monkeypatch.setitem(sys.modules, "xgboost", None)  # `import xgboost` now fails
    for source in paths + [str(paths[0])] + raw:
        assert_same_ensemble(jaximp.from_xgboost(source), ens)


def test_categorical_model_files():
    """The categories of a saved model (``cats``), in XGBoost's JSON and UBJSON."""
    fitted = library_categorical("xgboost-multi")
    rows = library_categorical_rows("xgboost-multi")
    for source in (fitted.model.save_raw("json"), fitted.model.save_raw("ubj")):
        again = jaximp.from_xgboost(source)
        assert again.category_codes == fitted.ens.category_codes
        assert_close(jaximp.predict(again, rows), jaximp.predict(fitted.ens, rows))


def test_numeric_models_have_no_set_membership_splits():
    """Models without categorical splits keep the threshold rule alone (their kernels compile
    exactly as before)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3)).astype(np.float32)
    booster = xgb.train(dict(max_depth=2, nthread=1), xgb.DMatrix(X, X[:, 0]), num_boost_round=2)
    ens = jaximp.from_xgboost(booster)
    assert ens.node_categorical is None and ens.node_categories is None and ens.category_codes is None


def test_refusals(tmp_path):
    X, y = xgboost_data("regression", n=200)
    linear = xgb.train(dict(booster="gblinear", nthread=1), xgb.DMatrix(X, y), num_boost_round=2)
    with pytest.raises(ValueError, match="tree booster .*gblinear"):
        jaximp.from_xgboost(linear)
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
    booster = xgboost_model("squarederror").model
    with pytest.raises(ValueError, match="not a readable XGBoost"):
        jaximp.from_xgboost(booster.save_raw("ubj")[:-40])
    other = tmp_path / "other.json"
    other.write_text('{"features_info": {}}')
    with pytest.raises(ValueError, match="not an XGBoost model"):
        jaximp.from_xgboost(other)
    corrupt = json.loads(booster.save_raw("json"))
    del corrupt["learner"]["gradient_booster"]["model"]["trees"][0]["sum_hessian"]
    with pytest.raises(ValueError, match="corrupt"):
        jaximp.from_xgboost(corrupt)
    corrupt = json.loads(booster.save_raw("json"))
    corrupt["learner"]["gradient_booster"]["model"]["trees"][1]["left_children"][1] = 0  # a cycle
    with pytest.raises(ValueError, match="corrupt"):
        jaximp.from_xgboost(corrupt)
    with pytest.raises(TypeError, match="must be an xgboost.Booster"):
        jaximp.from_xgboost(3.0)
