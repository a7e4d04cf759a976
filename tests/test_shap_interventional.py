"""Interventional SHAP (a background data set) against shap and CatBoost, for every layout and
library, and what the background means.

Oracles: shap's ``TreeExplainer(model, data=background, feature_perturbation="interventional")``
on CatBoost's oblivious trees and non-symmetric JSON trees (as shap tree dictionaries, from
tests/oracles.py), XGBoost's and LightGBM's Boosters and scikit-learn's models where shap is
right; CatBoost's ``ShapValues`` with ``reference_data``; closed forms of the background (a
repeated background, a background of one row). (Brute-force Shapley values, and the models shap
explains wrongly or refuses: tests/test_shap_brute_force.py.)

Tolerances: float32 tables summed over <= 30 trees against float64: ``rtol=1e-5``,
``atol=1e-5 * max(1, magnitude)``.
"""

from __future__ import annotations

import dataclasses

import catboost
import lightgbm as lgb
import models
import numpy as np
import pytest
import shap
from oracles import (
    assert_close,
    catboost_json_trees,
    catboost_shap,
    oblivious_trees,
    raw_output,
    shap_tree_dict,
)

import jaximp
from jaximp import expected_value, shap_values

slow = pytest.mark.slow


# Against shap's TreeExplainer ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class AgainstShap:
    """An ensemble, its rows and background, and what shap explains (a model, or a tree dictionary)."""

    ens: object
    rows: np.ndarray
    background: np.ndarray
    model: object
    margin: np.ndarray | None = None  # the library's raw output of the rows, for additivity
    check_base: bool = True
    shap_kwargs: dict = dataclasses.field(default_factory=dict)


def _oblivious(kind):
    model, X_train, _, _ = models.train(kind, depth=6, iterations=8)
    ens = jaximp.from_catboost(model)
    return AgainstShap(ens, models.wide_rows(kind)[:40], X_train[:50], shap_tree_dict(oblivious_trees(ens), ens.bias))


def _catboost_trees(index):
    fitted = models.catboost_trees(*models.CATBOOST_TREES[index])
    trees = shap_tree_dict(catboost_json_trees(fitted.json), fitted.json["scale_and_bias"][1])
    return AgainstShap(fitted.ens, models.explained_rows(fitted.X, 40), fitted.X[100:150], trees)


def _xgboost(name):
    """shap 0.51 adds one base_score to every class of an XGBoost 3 multiclass model: additivity
    against XGBoost's margin checks the expected value for every output."""
    fitted = models.xgboost_model(name)
    x = models.explained_rows(fitted.X, 30)
    return AgainstShap(fitted.ens, x, fitted.X[100:140], fitted.model, raw_output(fitted.model, x).reshape(len(x), -1),
                       check_base=fitted.ens.n_outputs == 1)


def _lightgbm(name):
    """shap sends a NaN to ``default_left`` whatever the missing type, as LightGBM does for
    missing type NaN, which every node of these models has (NaN in every training column); rows
    within a float32 step of a threshold are left out, where shap's traversal (not LightGBM's)
    can go the other way. shap reads K outputs from the classifier, not from a Booster."""
    fitted = models.lightgbm_model(name)
    model, ens = fitted.model, fitted.ens
    if name == "multiclass":
        model = lgb.LGBMClassifier(n_estimators=12, num_leaves=15, learning_rate=0.3, n_jobs=1,
                                   verbose=-1, random_state=0, deterministic=True).fit(fitted.X, fitted.y)
        ens = jaximp.from_lightgbm(model)
    return AgainstShap(ens, models.lightgbm_rows(fitted.model, fitted.X, 45, edges=False), fitted.X[200:260], model)


def _sklearn(name):
    fitted = models.sklearn_model(name)
    return AgainstShap(fitted.ens, models.explained_rows(fitted.X, 30), fitted.X[100:140], fitted.model,
                       shap_kwargs=dict(check_additivity=False))


def _case(build, arg, name, default):
    return pytest.param(build, arg, id=name, marks=() if default else slow)


AGAINST_SHAP = (
    [_case(_oblivious, kind, f"catboost-oblivious-{kind}", kind == "multiclass")
     for kind in ("regression", "multiclass")]
    + [_case(_catboost_trees, i, f"catboost-trees-case{i}", i == 5) for i in (0, 3, 5)]
    + [_case(_xgboost, name, f"xgboost-{name}", name == "softprob") for name in ("softprob", "squarederror", "poisson")]
    + [_case(_lightgbm, name, f"lightgbm-{name}", False) for name in ("regression", "binary", "multiclass")]
    + [_case(_sklearn, name, f"sklearn-{name}", name == "gb_bin")
       for name in ("gb_bin", "dt_reg", "rf_reg", "rf_clf", "et_clf", "gb_reg")]
)


@pytest.mark.parametrize("build, arg", AGAINST_SHAP)
def test_against_shap(build, arg):
    case = build(arg)
    explainer = shap.TreeExplainer(case.model, data=case.background, feature_perturbation="interventional")
    values = np.asarray(explainer.shap_values(case.rows, **case.shap_kwargs))
    got = shap_values(case.ens, case.rows, method="interventional", background=case.background)
    assert_close(np.reshape(got, values.shape), values)
    base = np.reshape(expected_value(case.ens, method="interventional", background=case.background), -1)
    if case.check_base:
        assert_close(base, np.reshape(explainer.expected_value, -1))
    if case.margin is not None:
        assert_close(np.reshape(got, (len(case.rows), case.ens.n_features, -1)).sum(1) + base, case.margin)


# Against CatBoost's reference_data ------------------------------------------------------------------------------


def _reference_data(kind):
    model, X_train, y, _ = models.train(kind, depth=5, iterations=8)
    X, background = models.wide_rows(kind)[:30], X_train[:40]
    values, expected = catboost_shap(model, X, label=y[:30], reference_data=catboost.Pool(background, label=y[:40]))
    return jaximp.from_catboost(model), X, background, values, expected


def _categorical_reference_data(name):
    fitted = models.catboost_categorical(name)
    frame, y = models.explained(models.CATEGORICAL[name][0])
    background = fitted.X.iloc[:60]
    values, expected = catboost_shap(fitted.model, models.pool(frame, y),
                                     reference_data=models.pool(background, fitted.y[:60]))
    return fitted.ens, frame, background, values, expected


CATEGORICAL_DEFAULT = ("combinations_2", "combinations_4", "multiclass", "multiregression")  # players of one and of
# several columns, one-hot and CTR splits, every output kind
REFERENCE_DATA = (
    [_case(_reference_data, kind, kind, kind in ("regression", "multiclass")) for kind in models.KINDS]
    + [_case(_categorical_reference_data, name, f"categorical-{name}", name in CATEGORICAL_DEFAULT)
       for name in models.CATEGORICAL]
)


@pytest.mark.parametrize("build, arg", REFERENCE_DATA)
def test_against_catboost_reference_data(build, arg):
    ens, rows, background, values, expected = build(arg)
    got = shap_values(ens, rows, method="interventional", background=background)
    assert_close(np.reshape(got, values.shape), values)
    assert_close(np.reshape(expected_value(ens, method="interventional", background=background), -1), expected)


# What the background means --------------------------------------------------------------------------------------


def test_background_weighting_and_size():
    # The background enters through leaf histograms: a repeated background gives the same values,
    # and a background of one row explains the difference from that row's prediction.
    model, X, _, _ = models.train("regression", depth=5)
    ens = jaximp.from_catboost(model)
    once = shap_values(ens, X[:50], method="interventional", background=X[:10])
    assert_close(shap_values(ens, X[:50], method="interventional", background=np.tile(X[:10], (300, 1)),
                             batch_size=256), once)
    one = shap_values(ens, X[:50], method="interventional", background=X[:1])
    assert_close(one.sum(1), ens.predict(X[:50]) - ens.predict(X[:1]))
    assert_close(expected_value(ens, method="interventional", background=X[:1]), ens.predict(X[:1])[0])
