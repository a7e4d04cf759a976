"""``jaximp.from_lightgbm``: Boosters and scikit-learn estimators, model text files read without
LightGBM, objectives, single-leaf trees and early stopping, categorical splits, and what it
refuses (its decision rules around zero: tests/test_leaves.py).

Oracles: LightGBM's own numbers of the imported model (``predict(raw_score=True)``,
``pred_contrib=True``), the same model imported from its Booster and its file, the error
messages. Tolerances: ``rtol=1e-5, atol=1e-5 * max(1, magnitude)``; arrays of the same model
from two sources exactly.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys

import lightgbm as lgb
import models
import numpy as np
import pytest
from oracles import assert_close, lightgbm_contributions, raw_output

import jaximp

slow = pytest.mark.slow


def test_model_file_equals_booster(tmp_path):
    booster, X = models.lightgbm_model("multiclass").model, models.lightgbm_model("multiclass").X
    path = tmp_path / "model.txt"
    booster.save_model(str(path))
    from_file, from_booster = jaximp.from_lightgbm(path), jaximp.from_lightgbm(booster)
    for field in ("roots", "node_features", "node_borders", "node_nan_right", "node_children", "leaf_values",
                  "leaf_weights", "node_gains", "node_weights", "leaf_ids"):
        np.testing.assert_array_equal(getattr(from_file, field), getattr(from_booster, field), err_msg=field)
    x = models.lightgbm_rows(booster, X, 60)
    assert_close(jaximp.predict(jaximp.from_lightgbm(str(path)), x), booster.predict(x, raw_score=True))
    values, _ = lightgbm_contributions(lgb.Booster(model_file=str(path)), x)
    assert_close(jaximp.shap_values(from_file, x), values)


@slow
def test_model_file_imports_without_lightgbm(tmp_path):
    """A child process where ``import lightgbm`` fails reads the file and predicts as LightGBM."""
    booster, X = models.lightgbm_model("regression").model, models.lightgbm_model("regression").X
    booster.save_model(str(tmp_path / "model.txt"))
    x = models.lightgbm_rows(booster, X, 30)
    np.save(tmp_path / "x.npy", x)
    model, rows_in, out = (str(tmp_path / name) for name in ("model.txt", "x.npy", "p.npy"))
    script = (
        "import sys; sys.modules['lightgbm'] = None\n"  # any import of lightgbm now fails
        "import numpy as np, jaximp\n"
        f"ens = jaximp.from_lightgbm({model!r})\n"
        f"np.save({out!r}, np.asarray(jaximp.predict(ens, np.load({rows_in!r}))))\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=str(tmp_path.parent),
                   env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert_close(np.load(tmp_path / "p.npy"), booster.predict(x, raw_score=True))


def test_estimators():
    X, y = models.make_data("binary", n=400)
    labels = np.asarray(["no", "yes"])[y]
    clf = lgb.LGBMClassifier(n_estimators=8, num_leaves=7, n_jobs=1, verbose=-1, random_state=0).fit(X, labels)
    ens = jaximp.from_lightgbm(clf)
    assert ens.class_names == ("no", "yes") and ens.loss_function == "Logloss"
    assert_close(jaximp.predict(ens, X), clf.predict(X, raw_score=True))
    got = jaximp.permutation_importance(ens, X, labels, n_repeats=2, random_state=0)  # labels by name
    unnamed = dataclasses.replace(ens, class_names=())  # the same model reading 0 / 1
    again = jaximp.permutation_importance(unnamed, X, y, n_repeats=2, random_state=0)
    np.testing.assert_array_equal(got.importances, again.importances)
    reg = lgb.LGBMRegressor(n_estimators=5, num_leaves=7, n_jobs=1, verbose=-1).fit(X, X[:, 0])
    assert jaximp.from_lightgbm(reg).class_names == () and jaximp.from_lightgbm(reg).loss_function == "RMSE"
    ranker = lgb.LGBMRanker(n_estimators=3, num_leaves=5, n_jobs=1, verbose=-1).fit(X, y, group=[100] * 4)
    ens = jaximp.from_lightgbm(ranker)
    assert ens.loss_function == ""
    assert_close(jaximp.predict(ens, X), ranker.predict(X, raw_score=True))
    with pytest.raises(ValueError, match="must be fitted"):
        jaximp.from_lightgbm(lgb.LGBMRegressor())


@pytest.mark.parametrize("objective, extra, loss", [
    ("regression_l1", {}, "MAE"), ("huber", {}, ""), ("cross_entropy", {}, "CrossEntropy"),
    ("multiclassova", dict(num_class=3), "MultiClassOneVsAll"), ("binary", dict(sigmoid=2.0), ""),
    ("regression", dict(reg_sqrt=True), ""), ("poisson", {}, ""),
])
def test_loss_function_names(objective, extra, loss):
    """CatBoost's loss name where it scores LightGBM's raw score the same way, else ""."""
    X, y = models.make_data("multiclass", n=200)
    target = {"cross_entropy": y / 2.0, "binary": (y > 0) * 1, "poisson": y * 1.0}.get(objective, y)
    booster = lgb.train(models.lightgbm_params(objective, num_leaves=4, **extra), lgb.Dataset(X, target),
                        num_boost_round=2)
    assert jaximp.from_lightgbm(booster).loss_function == loss


@slow
def test_single_leaf_trees_and_best_iteration():
    """Trees that cannot split (one leaf, no nodes) and a Booster that stopped early: the import
    reads the best iteration, as ``predict`` does."""
    X, y = models.make_data("regression", n=300)
    stump = lgb.train(models.lightgbm_params("regression", min_data_in_leaf=400), lgb.Dataset(X, y), num_boost_round=2)
    ens = jaximp.from_lightgbm(stump)
    assert ens.n_trees == 1 and int(ens.roots[0]) == -1
    assert_close(jaximp.predict(ens, X), stump.predict(X, raw_score=True))
    values, expected = lightgbm_contributions(stump, X[:5])
    assert_close(jaximp.shap_values(ens, X[:5]), values[:, :, 0])
    assert_close(jaximp.expected_value(ens), expected[0])
    early = lgb.train(models.lightgbm_params("regression", num_leaves=7, learning_rate=0.5),
                      lgb.Dataset(X[:200], y[:200]), num_boost_round=60, valid_sets=[lgb.Dataset(X[200:], y[200:])],
                      callbacks=[lgb.early_stopping(3, verbose=False)])
    assert 0 < early.best_iteration < 60
    ens = jaximp.from_lightgbm(early)
    assert ens.n_trees == early.best_iteration
    assert_close(jaximp.predict(ens, X), early.predict(X, raw_score=True))


def test_categorical_model_file(tmp_path):
    """The categories of a saved model (``pandas_categorical`` in its text), imported from the file."""
    fitted = models.library_categorical("lightgbm-reg")
    path = tmp_path / "model.txt"
    fitted.model.save_model(path)
    again = jaximp.from_lightgbm(str(path))
    rows = models.library_categorical_rows("lightgbm-reg")
    assert again.category_codes == fitted.ens.category_codes
    assert_close(jaximp.predict(again, rows), raw_output(fitted.model, rows))


def test_bitsets_past_the_memory_bound_are_refused(monkeypatch):
    """Category codes in the millions would need bitsets of millions of bits at every node."""
    import jaximp._models.categories

    model = models.library_categorical("lightgbm-reg").model
    monkeypatch.setattr(jaximp._models.categories, "MAX_CATEGORY_WORDS", 64)
    with pytest.raises(ValueError, match=r"from_lightgbm: the model's categorical splits read category codes up "
                                         r"to \d+, whose bitsets take \d+ x \d+ x \d+ words, more than jaximp holds"):
        jaximp.from_lightgbm(model)


def test_refuses_what_it_does_not_support(tmp_path):
    X, y = models.make_data("regression", n=300)
    linear = lgb.train(models.lightgbm_params("regression", num_leaves=4, linear_tree=True), lgb.Dataset(X, y),
                       num_boost_round=2)
    with pytest.raises(ValueError, match="linear tree"):
        jaximp.from_lightgbm(linear)


def test_refuses_bad_models(tmp_path):
    booster = models.lightgbm_model("regression", rounds=2).model
    text = booster.model_to_string()
    with pytest.raises(TypeError, match="from_lightgbm: model must be a lightgbm.Booster"):
        jaximp.from_lightgbm(object())
    with pytest.raises(ValueError, match="existing model file"):
        jaximp.from_lightgbm(tmp_path / "missing.txt")
    cases = {
        "must be a LightGBM model text": '{"format": "json"}',
        "cut short": text[: len(text) // 3],
        "has no 'leaf_value' line": re.sub(r"\nleaf_value=.*", "", text, count=1),
        "'threshold' has": re.sub(r"\nthreshold=(\S+) ", r"\nthreshold=", text, count=1),
        "do not form one binary tree": re.sub(r"\nleft_child=(\S+)", r"\nleft_child=0", text, count=1),
        "header has no 'max_feature_idx'": re.sub(r"\nmax_feature_idx=.*", "", text, count=1),
    }
    for message, content in cases.items():
        path = tmp_path / "bad.txt"
        path.write_text(content)
        with pytest.raises(ValueError, match=re.escape(message)):
            jaximp.from_lightgbm(path)
