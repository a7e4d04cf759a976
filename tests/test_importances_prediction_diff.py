"""PredictionDiff of non-symmetric trees (Depthwise, Lossguide) against CatBoost.

Oracle: CatBoost's ``get_feature_importance(type="PredictionDiff")`` on the model reloaded from
its JSON export (CatBoost's reference for non-symmetric trees; a freshly trained model stores
some leaves on their parent node and its numbers differ, see ``jaximp._importances.prediction_diff``).

The row pairs exercise each quirk of CatBoost's walk (compare_documents.cpp,
``CalcNonSymmetricIndicatorCoefficients``): random pairs, a row with itself (equal predictions),
values equal to a split border (the flip is filed in the row's own bin and lost), values below
every border of their feature and NaN (CatBoost's copy of the row reads 0.0 there, so its walk
can leave the row's true path and file a difference under the model's first split).

Tolerance: leaf values are float32 in jaximp, float64 in CatBoost; sums of ~50 of them of
magnitude ~1 agree to 1e-6 relative, so ``rtol=1e-5, atol=1e-5 * max(1, |expected|)``.
"""

from __future__ import annotations

import catboost
import numpy as np
import pandas as pd
import pytest
from models import catboost_trees, json_reloaded, make_data

import jaximp
from jaximp import get_feature_importance

GRID = [  # (kind, loss, grow_policy, max_leaves, nan_mode)
    ("regression", "RMSE", "Depthwise", None, "Min"),
    ("regression", "RMSE", "Lossguide", 20, "Max"),
    ("binary", "Logloss", "Lossguide", 16, "Min"),
    ("binary", "Logloss", "Depthwise", None, "Max"),
]


def trained(kind, loss, grow_policy, max_leaves, nan_mode):
    """``(ens, CatBoost model reloaded from JSON, X)``: 15 trees of depth 5, X has 5% NaN."""
    fitted = catboost_trees(kind, grow_policy, 5, max_leaves, nan_mode, iterations=15, n=400, n_features=5,
                            learning_rate=None)
    assert fitted.ens.loss_function == loss
    return fitted.ens, fitted.model, fitted.X


def _pairs(ens, X):
    """Row pairs ``f32[2, F]``: random, equal, on borders, below every border, NaN."""
    rng = np.random.default_rng(1)
    features, borders = np.asarray(ens.node_features), np.asarray(ens.node_borders)
    pairs = [X[rng.choice(len(X), 2, replace=False)] for _ in range(12)]
    pairs.append(X[[3, 3]])
    for k in range(12):
        rows = X[rng.choice(len(X), 2, replace=False)].copy()
        f, g = k % X.shape[1], (k + 2) % X.shape[1]
        mine = np.sort(borders[(features == f) & np.isfinite(borders)])
        rows[0, f] = mine[k % len(mine)]  # on a border
        rows[1, g] = np.min(borders[(features == g) & np.isfinite(borders)]) - 0.5  # below all
        if k % 4 == 0:
            rows[1, f] = np.nan
        pairs.append(rows)
    return pairs


def assert_close(got, expected):
    expected = np.asarray(expected, np.float64)
    assert got.shape == expected.shape and got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(expected).max()))


@pytest.mark.parametrize("case", GRID, ids=lambda c: "-".join(map(str, c[1:3])))
def test_prediction_diff_equals_catboost(case):
    ens, reloaded, X = trained(*case)
    for rows in _pairs(ens, X):
        expected = reloaded.get_feature_importance(type="PredictionDiff", data=catboost.Pool(rows))
        assert_close(get_feature_importance(reloaded, catboost.Pool(rows), type="PredictionDiff"), expected)
        assert_close(get_feature_importance(ens, rows, type="PredictionDiff"), expected)


def test_prediction_diff_prettified_and_dataframe():
    ens, reloaded, X = trained(*GRID[1])
    frame = pd.DataFrame(X[5:7], columns=ens.feature_names)
    expected = reloaded.get_feature_importance(type="PredictionDiff", data=catboost.Pool(frame), prettified=True)
    got = get_feature_importance(reloaded, frame, type="PredictionDiff", prettified=True)
    assert list(got["Feature Id"]) == list(expected["Feature Id"])
    assert_close(got["Importances"].to_numpy(), expected["Importances"].to_numpy())


def test_prediction_diff_of_a_model_file(tmp_path):
    _, reloaded, X = trained(*GRID[0])
    path = tmp_path / "model.json"
    reloaded.save_model(str(path), format="json")
    rows = X[[7, 40]]
    assert_close(get_feature_importance(str(path), rows, type="PredictionDiff"),
                 reloaded.get_feature_importance(type="PredictionDiff", data=catboost.Pool(rows)))


def test_stumps():
    X, y = make_data("regression", n=100, n_features=4)
    model = catboost.CatBoost(dict(loss_function="RMSE", depth=3, iterations=3, grow_policy="Lossguide",
                                   max_leaves=2, verbose=0, random_seed=0, allow_writing_files=False)).fit(X, y)
    _, reloaded, path = json_reloaded(model)
    ens = jaximp.from_catboost(path)
    for rows in (X[[0, 0]], X[[0, 1]]):
        assert_close(get_feature_importance(ens, rows, type="PredictionDiff"),
                     reloaded.get_feature_importance(type="PredictionDiff", data=catboost.Pool(rows)))


@pytest.mark.parametrize("kind, loss, match", [
    ("multiclass", "MultiClass", "one output"),
    ("multiregression", "MultiRMSE", "one output"),
])
def test_refused_like_catboost(kind, loss, match):
    X, y = make_data(kind, n=200, n_features=5)
    model = catboost.CatBoost(dict(loss_function=loss, depth=4, iterations=4, grow_policy="Depthwise",
                                   verbose=0, allow_writing_files=False)).fit(X, y)
    _, reloaded, _ = json_reloaded(model)
    with pytest.raises(catboost.CatBoostError, match="Is not supported for multiclass"):
        reloaded.get_feature_importance(type="PredictionDiff", data=catboost.Pool(X[:2]))
    with pytest.raises(ValueError, match=match):
        get_feature_importance(reloaded, X[:2], type="PredictionDiff")


def test_categorical_refused_like_catboost():
    X, y = make_data("regression", n=200, n_features=4)
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(4)])
    frame["c"] = np.where(X[:, 0] > 0, "a", "b")
    model = catboost.CatBoost(dict(loss_function="RMSE", depth=4, iterations=4, grow_policy="Lossguide",
                                   verbose=0, cat_features=["c"], allow_writing_files=False)).fit(frame, y)
    with pytest.raises(catboost.CatBoostError, match="categorical features are not supported"):
        model.get_feature_importance(type="PredictionDiff", data=catboost.Pool(frame[:2], cat_features=["c"]))
    with pytest.raises(ValueError, match="without categorical features"):
        get_feature_importance(jaximp.from_catboost(model), frame[:2], type="PredictionDiff")


def test_two_rows_required():
    ens, _, X = trained(*GRID[0])
    with pytest.raises(ValueError, match="exactly 2 rows"):
        get_feature_importance(ens, X[:3], type="PredictionDiff")
