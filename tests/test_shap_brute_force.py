"""SHAP values against brute-force Shapley enumeration (tests/oracles.py), for every layout and
library.

* Oblivious ensembles made by hand (features repeated within trees, zero-weight leaves, mixed
  depths, two outputs): every method (path-dependent, CatBoost's Exact, Saabas, interventional)
  and the expected values, from the ensemble's own arrays.
* The trees of each library read independently of jaximp's importers (CatBoost's JSON export,
  XGBoost's JSON, LightGBM's ``dump_model``, scikit-learn's arrays), each with its own decision
  rule: the path-dependent game and the interventional one, on tiny models.
* Interventional values over the columns whose game is the model's own predictions of rows
  mixed with a background: models whose trees the oracle does not walk (categorical splits,
  multiclass boosting) or that shap explains wrongly.
* The kernels of deep trees (quadrature, slot bits counted over a path's edges) forced on tiny
  trees, against the same enumeration.

Tolerances: jaximp builds float32 tables where the enumeration is float64, over a few trees:
``rtol=1e-5, atol=1e-5 * max(1, magnitude)``.
"""

from __future__ import annotations

import dataclasses
import itertools

import jax.numpy as jnp
import models
import numpy as np
import pandas as pd
import pytest
import shap
import xgboost as xgb
from oracles import (
    assert_close,
    lightgbm_contributions,
    oblivious_shap,
    prediction_shap,
    raw_output,
    tiny_model,
    tree_shap,
)
from sklearn.datasets import load_diabetes

import jaximp
from jaximp import expected_value, shap_values
from jaximp._rows.inputs import as_features

METHODS = ("path_dependent", "exact", "approximate", "interventional")
slow = pytest.mark.slow


# Oblivious ensembles, every method ------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("seed, depths, n_outputs",
                         [(0, (1, 1, 1), 1), (1, (2, 3), 2), (2, (4, 2, 1, 3), 1), (3, (3,), 1)])
def test_oblivious_ensembles(method, seed, depths, n_outputs):
    ens = models.random_ensemble(seed, depths, n_outputs=n_outputs, scale=0.7)
    rng = np.random.default_rng(seed + 10)
    x = rng.normal(size=(12, ens.n_features)).astype(np.float32)
    background = rng.normal(size=(9, ens.n_features)).astype(np.float32) if method == "interventional" else None
    phi, expected = oblivious_shap(ens, x, method, background)
    got = shap_values(ens, x, method=method, background=background)
    base = expected_value(ens, method=method, background=background)
    assert got.shape == ((12, 4) if n_outputs == 1 else (12, 4, n_outputs)) and got.dtype == np.float32
    assert_close(got.reshape(phi.shape), phi)
    assert_close(np.reshape(base, -1), expected)
    # Additivity holds at every row, zero-weight leaves included.
    prediction = ens.predict(x).reshape(12, n_outputs)
    assert_close(got.reshape(phi.shape).sum(1) + np.reshape(base, -1), prediction)


def test_repeated_feature_is_one_player():
    # One tree splitting on feature 0 at both depths: feature 0 takes the whole deviation.
    ens = models.random_ensemble(5, (2,))
    ens = dataclasses.replace(ens, split_features=jnp.zeros((1, 2), jnp.int32))
    x = np.random.default_rng(0).normal(size=(20, 4)).astype(np.float32)
    for method in ("path_dependent", "exact", "approximate"):
        phi = shap_values(ens, x, method=method)
        np.testing.assert_array_equal(phi[:, 1:], 0.0)
        assert_close(phi[:, 0] + expected_value(ens, method=method), ens.predict(x))


# Each library's trees: the path-dependent and the interventional games ---------------------------------


def check_tree_games(library, name, method):
    """SHAP values of a tiny model against :func:`oracles.tree_shap`; ``(ens, rows, values)``."""
    fitted, x, background, trees = tiny_model(library, name)
    background = background if method == "interventional" else None
    expected = tree_shap(trees, x, fitted.ens.n_features, background)
    got = shap_values(fitted.ens, x, method=method, background=background)
    assert_close(np.reshape(got, expected.shape), expected)
    return fitted, x, got, expected


TREE_GAMES = [  # (library, model, method): by default each library once, both methods across them
    ("catboost", "regression-Depthwise", "path_dependent"),
    pytest.param("catboost", "multiclass-Depthwise", "interventional", marks=slow),
    pytest.param("catboost", "regression-Lossguide", "path_dependent", marks=slow),
    ("catboost", "multiclass-Lossguide", "interventional"),
    ("xgboost", "multiclass", "path_dependent"),
    pytest.param("xgboost", "regression", "interventional", marks=slow),  # interventional: against shap too
    pytest.param("xgboost", "regression", "path_dependent", marks=slow),
    pytest.param("xgboost", "multiclass", "interventional", marks=slow),
    ("lightgbm", "regression-none", "interventional"),
    pytest.param("lightgbm", "regression", "path_dependent", marks=slow),
    pytest.param("lightgbm", "multiclass", "path_dependent", marks=slow),
    pytest.param("lightgbm", "multiclass", "interventional", marks=slow),
    ("sklearn", "hgb", "path_dependent"),
    pytest.param("sklearn", "gb", "path_dependent", marks=slow),
]


@pytest.mark.parametrize("library, name, method", TREE_GAMES)
def test_tree_games(library, name, method):
    fitted, x, got, expected = check_tree_games(library, name, method)
    if library == "lightgbm" and method == "path_dependent":  # LightGBM's own TreeSHAP agrees with the enumeration
        assert_close(lightgbm_contributions(fitted.model, x)[0], expected)
    if library == "sklearn":  # additivity against the library's raw output
        total = got.sum(1) + np.asarray(expected_value(fitted.ens))
        assert_close(total, raw_output(fitted.model, x))


# The model's own predictions: interventional values over the columns ------------------------------------------


@dataclasses.dataclass(frozen=True)
class PredictionGame:
    """Rows and background as jaximp takes them (``rows``, ``background``) and as the model
    predicts their mixtures (``x``, ``bg``: arrays, object arrays of raw values included), the
    model's raw output ``predict(mixed rows) -> [M, K]``, and its mean over the background."""

    ens: object
    rows: object
    background: object
    x: np.ndarray
    bg: np.ndarray
    predict: object
    base: np.ndarray


def _sklearn_game(name):
    fitted = models.sklearn_model(name)
    x, background = models.explained_rows(fitted.X, 6), fitted.X[200:215]

    def predict(rows):
        return raw_output(fitted.model, rows).reshape(len(rows), -1)

    return PredictionGame(fitted.ens, x, background, x, background, predict, predict(background).mean(0))


def _catboost_game(name):
    """Non-symmetric models with one-hot and CTR splits (CatBoost's ``reference_data`` SHAP
    crashes on them): every player is one column, and a column's one-hot values and CTRs follow it."""
    fitted = models.catboost_categorical_trees(name)
    frame, _ = models.explained(models.CATEGORICAL_TREES[name][0])
    rows, background = frame.iloc[::10], pd.concat([fitted.X.iloc[:6], frame.iloc[41::9]])

    def predict(hybrid):
        hybrid = pd.DataFrame(hybrid, columns=rows.columns).astype(rows.dtypes.to_dict())
        return raw_output(fitted.trained, models.pool(hybrid)).reshape(len(hybrid), -1)

    base = raw_output(fitted.trained, models.pool(background)).reshape(len(background), -1).mean(0)
    return PredictionGame(fitted.ens, rows, background, rows.to_numpy(dtype=object), background.to_numpy(dtype=object),
                          predict, base)


def _library_game(case):
    """Categorical splits of XGBoost and LightGBM (rows as the frames' codes) and scikit-learn
    (raw values); shap refuses categorical splits."""
    fitted = models.library_categorical(case)
    rows, background = models.library_categorical_rows(case).iloc[::8], fitted.X.iloc[100:120]
    if case.startswith("sklearn"):
        def predict(hybrid):
            frame = pd.DataFrame(hybrid, columns=models.COLUMNS)
            frame = frame.astype({"a": np.float32, "b": np.float32, "d": np.float32})
            frame["c"] = pd.Categorical(frame["c"], categories=models.STRINGS + ["new"])
            return raw_output(fitted.model, frame).reshape(len(frame), -1)

        x, bg = rows.to_numpy(dtype=object), background.to_numpy(dtype=object)
    else:
        def predict(codes):
            data = codes.astype(np.float32)
            if case.startswith("xgboost"):
                data = xgb.DMatrix(data, feature_types=["q", "q", "c", "c"], feature_names=models.COLUMNS,
                                   enable_categorical=True)
            return raw_output(fitted.model, data).reshape(len(codes), -1)

        x, bg = (np.asarray(as_features(r, fitted.ens, "test"), np.float32).astype(object) for r in (rows, background))
    base = raw_output(fitted.model, background).reshape(len(background), -1).mean(0)
    return PredictionGame(fitted.ens, x, bg, x, bg, predict, base)


PREDICTION_GAMES = {  # id: (builder, name); models shap does not explain, explains wrongly or refuses
    "sklearn-gb_multi": (_sklearn_game, "gb_multi"),
    "sklearn-hgb_multi": (_sklearn_game, "hgb_multi"),
    "sklearn-hgb_reg": (_sklearn_game, "hgb_reg"),  # shap's interventional HistGradientBoosting
    "catboost-depthwise_ctr": (_catboost_game, "depthwise_ctr"),
    "catboost-lossguide_mixed": (_catboost_game, "lossguide_mixed"),
    "xgboost-categorical-multi": (_library_game, "xgboost-multi"),
    "lightgbm-categorical-reg": (_library_game, "lightgbm-reg"),
    "sklearn-categorical-multi": (_library_game, "sklearn-multi"),
}
PREDICTION_SLOW = ("sklearn-gb_multi", "sklearn-hgb_multi", "sklearn-hgb_reg", "lightgbm-categorical-reg")


@pytest.mark.parametrize("case", [pytest.param(c, marks=slow) if c in PREDICTION_SLOW else c
                                  for c in PREDICTION_GAMES])
def test_prediction_games(case):
    """Shapley values of ``v(S) = mean_b f(x_S, b_rest)``, ``f`` the model's own raw output, and
    the expected value: the mean raw output over the background (NaN and unseen categories in
    the rows)."""
    build, name = PREDICTION_GAMES[case]
    game = build(name)
    expected = prediction_shap(game.predict, game.x, game.bg)
    got = shap_values(game.ens, game.rows, method="interventional", background=game.background)
    assert_close(np.reshape(got, expected.shape), expected)
    base = expected_value(game.ens, method="interventional", background=game.background)
    assert_close(np.reshape(base, -1), game.base)


@slow
def test_interventional_where_shap_rounds_thresholds():
    """On diabetes, shap's interventional values of a decision tree differ from the Shapley
    values of the model's own predictions (by 2 on outputs of magnitude 80: it routes rows equal
    to a float32-rounded threshold as the rounded threshold says, see
    tests/test_leaves.py::test_sklearn_rows_equal_to_thresholds); jaximp's equal them."""
    from sklearn import tree

    X, y = load_diabetes(return_X_y=True)
    X = X.astype(np.float32)
    model = tree.DecisionTreeRegressor(max_depth=6, random_state=0).fit(X, y)
    ens = jaximp.from_sklearn(model)
    x, background = X[30:34], X[50:80]
    expected = prediction_shap(lambda rows: raw_output(model, rows).reshape(len(rows), -1), x, background)[..., 0]
    got = shap_values(ens, x, method="interventional", background=background)
    assert_close(got, expected)
    values = shap.TreeExplainer(model, data=background, feature_perturbation="interventional").shap_values(
        x, check_additivity=False)
    assert np.abs(values - expected).max() > 1.0  # shap's error, not jaximp's


# The kernels of deep trees, on tiny ones -------------------------------------------------------------------


@pytest.fixture
def no_tables(monkeypatch):
    """Force the deep-tree kernels (quadrature, count formula) on shallow trees."""
    import jaximp._shap.tree_plans as tree_shap

    monkeypatch.setattr(tree_shap, "MAX_PAIR_DEPTH", 0)
    monkeypatch.setattr(tree_shap, "MAX_INTERVENTIONAL_DEPTH", 0)


DEEP_DEFAULT = {("Depthwise", False, True), ("Lossguide", True, True), ("Lossguide", False, False),
                ("Depthwise", True, False)}  # each grow policy, method and way to read the slots


@pytest.mark.parametrize("grow_policy, interventional, bits", [
    pytest.param(*c, marks=() if c in DEEP_DEFAULT else slow)
    for c in itertools.product(["Depthwise", "Lossguide"], [False, True], [True, False])])
def test_deep_kernels(no_tables, monkeypatch, bits, grow_policy, interventional):
    """The deep kernels against brute-force Shapley on tiny CatBoost trees, with the rows' slot
    bits read from int32 patterns or counted over the path's edges (trees deeper than 30)."""
    import jaximp._shap.tree_plans as tree_shap

    if not bits:
        monkeypatch.setattr(tree_shap, "_BIT_DEPTH", 0)
    name = f"{'multiclass' if interventional else 'regression'}-{grow_policy}"
    fitted, x, got, _ = check_tree_games("catboost", name, "interventional" if interventional else "path_dependent")
    if not interventional:  # interactions: rows sum to the values, against the tables' interactions
        pairs = np.reshape(jaximp.shap_interaction_values(fitted.ens, x), (len(x), 4, 4, -1))
        assert_close(pairs.sum(2), np.reshape(got, pairs.shape[:2] + pairs.shape[3:]))
        monkeypatch.setattr(tree_shap, "MAX_PAIR_DEPTH", 8)
        assert_close(pairs, np.reshape(jaximp.shap_interaction_values(fitted.ens, x), pairs.shape))
