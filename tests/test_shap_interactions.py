"""SHAP interaction values against each library's own, for every layout and library.

Oracles: CatBoost's ``ShapInteractionValues`` without its bias row and column (for
non-symmetric trees on the model reloaded from its JSON export), XGBoost's
``pred_interactions`` (whose diagonal is SHAP minus the row's off-diagonal sum, as jaximp's),
shap's ``shap_interaction_values``; a row of interaction values sums to the row's SHAP values.

Tolerances: float32 tables against float64: ``rtol=1e-5``, ``atol=1e-5 * max(1, magnitude)``.
"""

from __future__ import annotations

import dataclasses

import models
import numpy as np
import pytest
import shap
from oracles import assert_close, catboost_interactions, xgboost_contributions

import jaximp
from jaximp import shap_interaction_values, shap_values

slow = pytest.mark.slow


@pytest.mark.parametrize("kind, depth", [("regression", 3), pytest.param("binary", 6, marks=slow), ("multiclass", 4),
                                         pytest.param("multiregression", 2, marks=slow)])
def test_oblivious_models_against_catboost(kind, depth):
    model, _, _, _ = models.train(kind, depth=depth, iterations=6)
    ens = jaximp.from_catboost(model)
    X = models.wide_rows(kind)[:30]
    expected = catboost_interactions(model, X)
    got = shap_interaction_values(ens, X)
    assert got.shape == expected.shape and got.dtype == np.float32
    assert_close(got, expected)
    np.testing.assert_array_equal(got, np.swapaxes(got, 1, 2))
    assert_close(got.sum(2), shap_values(ens, X))
    if kind == "regression":
        assert_close(got, shap.TreeExplainer(model).shap_interaction_values(X))


@dataclasses.dataclass(frozen=True)
class Reference:
    """An ensemble, the rows it explains and the library's interaction values of them
    (``f64[N, F, F]`` or ``f64[N, F, F, K]``); ``sums``: check that rows sum to SHAP values."""

    ens: object
    rows: object
    expected: np.ndarray
    sums: bool = False


def _catboost_trees(index):
    fitted = models.catboost_trees(*models.CATBOOST_TREES[index])
    x = models.explained_rows(fitted.X, 20)
    return Reference(fitted.ens, x, catboost_interactions(fitted.model, x), sums=True)


def _catboost_categorical(name):
    fitted = models.catboost_categorical(name)
    frame, y = models.explained(models.CATEGORICAL[name][0])
    frame, y = frame.iloc[::4], y[::4]
    return Reference(fitted.ens, frame, catboost_interactions(fitted.model, models.pool(frame, y)))


def _catboost_categorical_trees(name):
    fitted = models.catboost_categorical_trees(name)
    frame, y = models.explained(models.CATEGORICAL_TREES[name][0])
    frame, y = frame.iloc[::4], y[::4]
    return Reference(fitted.ens, frame, catboost_interactions(fitted.model, models.pool(frame, y)), sums=True)


def _xgboost(name):
    fitted = models.xgboost_model(name)
    x = models.explained_rows(fitted.X, 30)
    return Reference(fitted.ens, x, xgboost_contributions(fitted.model, x, pred_interactions=True)[:, :-1, :-1])


def _xgboost_categorical(case):
    fitted = models.library_categorical(case)
    rows = models.library_categorical_rows(case).iloc[::3]
    return Reference(fitted.ens, rows, xgboost_contributions(fitted.model, rows, pred_interactions=True)[:, :-1, :-1])


def _case(build, arg, name, default):
    return pytest.param(build, arg, id=name, marks=() if default else slow)


GENERAL = (
    [_case(_catboost_trees, i, f"catboost-trees-case{i}", i == 4) for i in (0, 2, 4)]
    + [_case(_catboost_categorical, name, f"catboost-categorical-{name}", True)
       for name in ("one_hot", "combinations_2", "multiclass")]
    + [_case(_catboost_categorical_trees, name, f"catboost-categorical-trees-{name}", name == "lossguide_mixed")
       for name in ("depthwise_one_hot", "lossguide_mixed")]
    + [_case(_xgboost, name, f"xgboost-{name}", name == "softprob")
       for name in ("softprob", "reg-logistic-lossguide", "squarederror")]
    + [_case(_xgboost_categorical, "xgboost-multi", "xgboost-categorical-multi", True)]
)


@pytest.mark.parametrize("build, arg", GENERAL)
def test_against_the_library(build, arg):
    case = build(arg)
    got = np.asarray(shap_interaction_values(case.ens, case.rows))
    assert_close(np.reshape(got, case.expected.shape), case.expected)
    if case.sums:
        phi = shap_values(case.ens, case.rows)
        expected = case.expected
        assert_close(np.reshape(got, expected.shape).sum(2), np.reshape(phi, expected.shape[:2] + expected.shape[3:]))
