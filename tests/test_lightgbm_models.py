"""LightGBM models as users have them: ``zero_as_missing``, float64 rows against float64
thresholds, feature names with spaces, numeric ``category`` columns, linear trees, and the
importance types named as in the model's library.

Oracles: LightGBM's own numbers of the same rows (``predict(raw_score=True)``, ``pred_leaf``,
``pred_contrib``, ``feature_importance``), XGBoost's ``get_score``, permutations scored by
LightGBM with jaximp's draws. Leaf indices exactly; values within float32 tolerances
(``assert_close``: ``rtol=1e-5``, ``atol=1e-5 * max(1, magnitude)``).
"""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import lightgbm as lgb
import models
import numpy as np
import pandas as pd
import polars as pl
import pytest
from oracles import (
    LIGHTGBM_ZERO,
    assert_close,
    lightgbm_contributions,
    lightgbm_mean_scale,
    permutation_draws,
    permutation_importances,
)

import jaximp
from jaximp._rows.inputs import as_features

F32 = np.float32


def float32_below(t: float) -> float:
    """The largest float32 at or below ``t``, as a double."""
    b = F32(t)
    return float(b if float(b) <= t else np.nextafter(b, F32(-np.inf)))


def near_thresholds(booster, X: np.ndarray, per_column: int = 12) -> np.ndarray:
    """``f64[n, F]`` rows whose value at a split's column lies at, just beside or between the
    split's threshold and its float32 neighbours (read from ``dump_model``, not from jaximp):
    ``t``, the doubles next to it, the float32 at or below it and the one above, and the
    midpoints, which float32 rounding sends to the other side."""
    thresholds: dict[int, set] = {}

    def walk(node):
        if "split_index" in node:
            if node["decision_type"] == "<=":
                thresholds.setdefault(node["split_feature"], set()).add(float(node["threshold"]))
            walk(node["left_child"])
            walk(node["right_child"])

    for tree in booster.dump_model()["tree_info"]:
        walk(tree["tree_structure"])
    base = np.nan_to_num(np.asarray(X, np.float64)[:1])
    rows = []
    for j, ts in sorted(thresholds.items()):
        for t in sorted(ts)[:: max(1, len(ts) // per_column)]:
            below = float32_below(t)
            above = float(np.nextafter(F32(below), F32(np.inf)))
            for v in (t, np.nextafter(t, np.inf), np.nextafter(t, -np.inf), below, above, (below + t) / 2,
                      (t + above) / 2):
                row = base.copy()
                row[0, j] = v
                rows.append(row)
    return np.concatenate(rows)


def assert_lightgbm_numbers(ens, booster, x, jaximp_rows=None):
    """jaximp's leaves, predictions and SHAP values of ``jaximp_rows`` (default ``x``) equal
    LightGBM's of ``x``."""
    rows = x if jaximp_rows is None else jaximp_rows
    np.testing.assert_array_equal(np.asarray(jaximp.leaf_indices(ens, rows)), booster.predict(x, pred_leaf=True))
    raw = booster.predict(x, raw_score=True) * lightgbm_mean_scale(booster)  # a random forest's mean
    assert_close(np.asarray(jaximp.predict(ens, rows)), raw)
    values, expected = lightgbm_contributions(booster, x)
    got = np.asarray(jaximp.shap_values(ens, rows)).reshape(values.shape)
    assert_close(got, values)
    assert_close(np.asarray(jaximp.expected_value(ens)).reshape(-1), expected)


# zero_as_missing ---------------------------------------------------------------------------------------


def zero_rows(X: np.ndarray) -> np.ndarray:
    """Training rows, then rows with zeros, the zero band (both signs, subnormals), -0.0 and NaN."""
    rng = np.random.default_rng(5)
    specials = np.asarray([0.0, -0.0, LIGHTGBM_ZERO, -LIGHTGBM_ZERO, 1e-36, -1e-40, 1e-45, 2e-35, np.nan])
    fresh = rng.normal(size=(60, X.shape[1]))
    fresh[rng.random(fresh.shape) < 0.4] = rng.choice(specials, fresh.shape)[rng.random(fresh.shape) < 0.4]
    return np.concatenate([np.asarray(X[:60], np.float64), fresh])


@pytest.mark.parametrize("kind", ["regression", "binary"])
def test_zero_as_missing_models(kind):
    """Zeros and NaN go each split's default way, against the values next to zero where the
    model says so: LightGBM's leaves, predictions and pred_contrib, float32 and float64 rows."""
    fitted = models.lightgbm_zero_model(kind)
    booster, ens = fitted.model, fitted.ens
    assert all(ens.value_thresholds.zero_missing)
    x = np.concatenate([zero_rows(fitted.X), near_thresholds(booster, fitted.X)])
    assert_lightgbm_numbers(ens, booster, x)
    assert_lightgbm_numbers(ens, booster, x.astype(F32))


SPECIALS = np.asarray([0.0, -0.0, LIGHTGBM_ZERO, -LIGHTGBM_ZERO, np.nextafter(F32(LIGHTGBM_ZERO), F32(1)),
                       np.nextafter(F32(-LIGHTGBM_ZERO), F32(-1)), 1e-36, -1e-36, 1e-30, -1e-30, 1e-45, -1e-45,
                       0.3, -0.3, 0.5, -0.5, np.nan])
THRESHOLDS = [0.0, LIGHTGBM_ZERO, -LIGHTGBM_ZERO, 1e-36, -1e-36, 1e-35, -1e-35, 0.3, -0.3, 0.1234567891234,
              float(np.nextafter(F32(-LIGHTGBM_ZERO), F32(-1))), float(np.nextafter(F32(LIGHTGBM_ZERO), F32(1)))]


@functools.cache
def stump_text():
    X = np.random.default_rng(0).normal(size=(300, 2)).astype(F32)
    booster = lgb.train(models.lightgbm_params("regression", num_leaves=2, min_data_in_leaf=5), lgb.Dataset(X, X[:, 0]),
                        num_boost_round=1)
    return booster.model_to_string()


@pytest.mark.parametrize("decision_type", [0, 2, 4, 6, 8, 10])  # None, Zero, NaN x default right / left
def test_decision_rules_around_zero(decision_type):
    """Every threshold near zero, every missing type and default direction, the values next to
    zero, in the zero band, NaN and the doubles around the threshold: LightGBM's leaves, float32
    and float64 rows (missing type Zero sends the zero band against its threshold too)."""
    for threshold in THRESHOLDS:
        text = re.sub(r"\nthreshold=\S+", f"\nthreshold={threshold!r}", stump_text(), count=1)
        text = re.sub(r"\ndecision_type=\S+", f"\ndecision_type={decision_type}", text, count=1)
        booster = lgb.Booster(model_str=text)
        ens = jaximp.from_lightgbm(booster)
        around = [threshold, np.nextafter(threshold, 1.0), np.nextafter(threshold, -1.0), float32_below(threshold)]
        for values in (SPECIALS.astype(F32), np.concatenate([SPECIALS, around])):
            x = np.stack([values, np.zeros_like(values)], axis=1)
            np.testing.assert_array_equal(jaximp.leaf_indices(ens, x)[:, 0], booster.predict(x, pred_leaf=True)[:, 0],
                                          err_msg=f"{threshold!r} {values.dtype}")


# float64 rows against float64 thresholds -------------------------------------------------------------------


def test_float64_rows_between_rounded_and_exact_thresholds():
    """Rows between each threshold and its float32 neighbours: LightGBM compares them in float64,
    and so does jaximp (float64 arrays and DataFrames); float32 rows as before. The column of
    thresholds closer than float32 resolution is held in bins."""
    fitted = models.lightgbm_float64_model()
    booster, ens = fitted.model, fitted.ens
    table = ens.value_thresholds
    assert table.binned == (False, False, True, False)
    x = np.concatenate([fitted.X[:200], near_thresholds(booster, fitted.X)])
    assert_lightgbm_numbers(ens, booster, x)
    assert_lightgbm_numbers(ens, booster, x.astype(F32))
    frame = pd.DataFrame(x, columns=booster.feature_name())
    assert_lightgbm_numbers(ens, booster, frame)
    assert_lightgbm_numbers(ens, booster, pl.from_pandas(frame))
    wrong = np.count_nonzero(booster.predict(x.astype(F32), pred_leaf=True) != booster.predict(x, pred_leaf=True))
    assert wrong > 20  # the rows do reach the other side once rounded to float32


RF_PARAMS = dict(boosting_type="rf", objective="binary", bagging_freq=1, bagging_fraction=0.5, feature_fraction=0.5,
                 num_leaves=50, verbose=-1, num_threads=1)  # LightGBM's own tests' test_rf (test_engine.py)


@functools.cache
def breast_cancer_split():
    """LightGBM's test_rf data: breast cancer rows (float64), 10% held out (``random_state=42``)."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split

    X, y = load_breast_cancer(return_X_y=True)
    return train_test_split(X, y, test_size=0.1, random_state=42)


def rf_model(source, tmp_path):
    """``(model to import, its Booster)``: test_rf's random forest as a Booster, its model file,
    or an ``LGBMClassifier`` trained with the same parameters."""
    X_train, _, y_train, _ = breast_cancer_split()
    if source == "estimator":
        names = dict(bagging_freq="subsample_freq", bagging_fraction="subsample", feature_fraction="colsample_bytree",
                     num_threads="n_jobs")
        clf = lgb.LGBMClassifier(n_estimators=50, **{names.get(k, k): v for k, v in RF_PARAMS.items()})
        clf.fit(X_train, y_train)
        return clf, clf.booster_
    booster = lgb.train(RF_PARAMS, lgb.Dataset(X_train, y_train), num_boost_round=50)
    if source == "file":
        booster.save_model(tmp_path / "rf.txt")
        return tmp_path / "rf.txt", booster
    return booster, booster


@pytest.mark.parametrize("source", ["booster", "file", "estimator"])
def test_random_forest_rows_between_float32_and_float64_thresholds(source, tmp_path):
    """LightGBM's test_rf model: a held-out row lies between a threshold and its float32 border,
    where LightGBM's float64 comparison and a float32 one disagree; jaximp's leaves equal
    ``pred_leaf`` exactly and its SHAP values ``pred_contrib``, float64 rows and float32 rows
    (which LightGBM reads in float32) alike, from a Booster, a model file and an estimator."""
    model, booster = rf_model(source, tmp_path)
    _, X_test, _, _ = breast_cancer_split()
    ens = jaximp.from_lightgbm(model)
    narrow = X_test.astype(F32)
    assert np.any(booster.predict(narrow, pred_leaf=True) != booster.predict(X_test, pred_leaf=True))
    assert_lightgbm_numbers(ens, booster, X_test)
    assert_lightgbm_numbers(ens, booster, narrow)
    frame = pd.DataFrame(X_test, columns=booster.feature_name())
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, frame), booster.predict(frame, pred_leaf=True))


def crossing_value(t: float) -> float:
    """A double between the threshold ``t`` and the midpoint of the float32 values around it, so
    that rounding it to float32 carries it to the other side of ``t``."""
    below = float32_below(t)
    midpoint = (below + float(np.nextafter(F32(below), F32(np.inf)))) / 2
    return (t + midpoint) / 2


def test_crafted_row_between_float32_and_float64_threshold():
    """A gbdt model's first split: a row whose value lies between its threshold and the float32
    rounding midpoint goes one way in float64 and the other in float32, and jaximp goes
    LightGBM's way for each (leaves, predictions, SHAP values; arrays and DataFrames)."""
    fitted = models.lightgbm_model("regression")
    booster, ens = fitted.model, fitted.ens
    root = booster.dump_model()["tree_info"][0]["tree_structure"]
    j, t = root["split_feature"], float(root["threshold"])
    x = np.nan_to_num(np.asarray(fitted.X[:2], np.float64))
    x[:, j] = crossing_value(t)
    narrow = x.astype(F32)
    assert (x[0, j] <= t) != (float(narrow[0, j]) <= t)
    wide_leaves, narrow_leaves = booster.predict(x, pred_leaf=True), booster.predict(narrow, pred_leaf=True)
    assert np.all(wide_leaves[:, 0] != narrow_leaves[:, 0])  # LightGBM reads the two differently
    assert_lightgbm_numbers(ens, booster, x)
    assert_lightgbm_numbers(ens, booster, narrow)
    assert_lightgbm_numbers(ens, booster, pd.DataFrame(x, columns=booster.feature_name()))


def test_float32_rows_are_unchanged():
    """A model whose columns need neither bins nor missing zeros takes float32 rows as they are
    (no copy, no cost); the borders are the float32 borders of before."""
    fitted = models.lightgbm_model("regression")
    x = np.ascontiguousarray(fitted.X[:50], F32)
    assert not fitted.ens.value_thresholds.float32_work
    assert as_features(x, fitted.ens, "t") is x
    values, borders = fitted.ens.value_thresholds.column(0)
    assert np.all(borders.astype(np.float64) <= values)


def test_jax_arrays():
    """float32 JAX arrays are converted on their device (bins, missing zeros); under
    ``jax_enable_x64`` a float64 JAX array is compared in float64."""
    for fitted in (models.lightgbm_float64_model(), models.lightgbm_zero_model("regression")):
        booster, ens = fitted.model, fitted.ens
        x = np.concatenate([np.asarray(fitted.X[:100], np.float64), near_thresholds(booster, fitted.X, 4)])
        assert_lightgbm_numbers(ens, booster, x.astype(F32), jnp.asarray(x, jnp.float32))
        previous = jax.config.jax_enable_x64
        jax.config.update("jax_enable_x64", True)
        try:
            wide = jnp.asarray(x, jnp.float64)
            leaves = np.asarray(jaximp.leaf_indices(ens, wide))
            np.testing.assert_array_equal(leaves, booster.predict(x, pred_leaf=True))
            assert_close(np.asarray(jaximp.predict(ens, wide)), booster.predict(x, raw_score=True))
        finally:
            jax.config.update("jax_enable_x64", previous)


def test_explainer_on_jax_rows():
    """An Explainer called on a ``jax.Array`` of float32 rows reads each column once (its float64
    search among the thresholds is not applied twice) and gives LightGBM's numbers."""
    fitted = models.lightgbm_float64_model()
    x = np.asarray(fitted.X[:100], F32)
    values, _ = lightgbm_contributions(fitted.model, x)
    assert_close(np.asarray(jaximp.Explainer(fitted.ens)(jnp.asarray(x)).values), values[:, :, 0])


# Names, categories -------------------------------------------------------------------------------------------


def test_feature_names_with_spaces():
    """LightGBM stores ``"my feature"`` as ``"my_feature"``; a frame with the original names (in
    any order, pandas or polars, a category column among them) is read by those names."""
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"my feature": rng.normal(size=300), "b": rng.normal(size=300),
                       "c c": pd.Categorical(rng.choice(["x", "y", "z"], 300))})
    y = df["my feature"] + (df["c c"] == "x") + 0.1 * rng.normal(size=300)
    booster = lgb.train(models.lightgbm_params("regression", num_leaves=4, min_data_per_group=5), lgb.Dataset(df, y),
                        num_boost_round=5)
    ens = jaximp.from_lightgbm(booster)
    assert ens.feature_names == ("my_feature", "b", "c_c")
    assert_close(jaximp.predict(ens, df), booster.predict(df, raw_score=True))
    assert_close(jaximp.predict(ens, df[["c c", "b", "my feature"]]), booster.predict(df, raw_score=True))
    values, _ = lightgbm_contributions(booster, df)
    assert_close(jaximp.shap_values(ens, pl.from_pandas(df)), values[:, :, 0])
    with pytest.raises(ValueError, match=r"predict: X must have the model's feature columns; missing \['b'\]"):
        jaximp.predict(ens, df.rename(columns={"b": "q"}))


def numeric_category_frame(n=300, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=n)
    d = rng.choice([3.0, 5.0, 9.0, 12.0, 20.0], n)
    y = a + np.sin(d) + 0.1 * rng.normal(size=n)
    d[rng.random(n) < 0.05] = np.nan
    return pd.DataFrame({"a": a, "d": pd.Categorical(d)}), y


def test_numeric_category_column_in_permutation_importance():
    """A ``category`` column of numbers, as in training: permutations scored by LightGBM with
    jaximp's draws."""
    df, y = numeric_category_frame()
    booster = lgb.train(models.lightgbm_params("regression", num_leaves=6, min_data_per_group=5, cat_smooth=1.0),
                        lgb.Dataset(df, y), num_boost_round=8)
    ens = jaximp.from_lightgbm(booster)
    got = jaximp.permutation_importance(ens, df, y, n_repeats=3, random_state=2)

    def score(rows, frame):
        return -np.sqrt(np.mean((booster.predict(frame, raw_score=True) - y[rows]) ** 2))

    want = permutation_importances(df, score, permutation_draws(2, 3, len(df), len(df)), [["a"], ["d"]])
    assert_close(got.importances, want)
    assert want[1].mean() > 0.1


def test_numeric_category_column_where_training_had_none():
    """Trained on an array: LightGBM reads a frame's ``category`` column by its codes, and so does
    jaximp. Trained on a frame without ``category`` columns: LightGBM refuses one, and so does
    jaximp, saying how to pass the numbers (its codes would be read as the values)."""
    df, y = numeric_category_frame()
    numbers = df.astype({"d": "float64"})
    params = models.lightgbm_params("regression", num_leaves=6, min_data_per_group=5, cat_smooth=1.0)
    on_array = lgb.train(params, lgb.Dataset(numbers.to_numpy(), y, categorical_feature=[1]), num_boost_round=5)
    frame = df.set_axis(on_array.feature_name(), axis=1)
    assert_close(jaximp.predict(jaximp.from_lightgbm(on_array), frame), on_array.predict(frame, raw_score=True))
    on_frame = lgb.train(params, lgb.Dataset(numbers, y, categorical_feature=["d"]), num_boost_round=5)
    with pytest.raises(ValueError, match="categorical_feature do not match"):
        on_frame.predict(df)
    ens = jaximp.from_lightgbm(on_frame)
    with pytest.raises(ValueError, match=r"permutation_importance: X must have as many category columns .* "
                                         r"X.astype\(\{'d': 'float64'\}\)"):
        jaximp.permutation_importance(ens, df, y, n_repeats=2, random_state=0)
    assert_close(jaximp.predict(ens, numbers), on_frame.predict(numbers, raw_score=True))


# Linear trees, importance types ------------------------------------------------------------------------------------


def test_linear_trees_are_refused(tmp_path):
    """Leaves that are linear functions of the features: refused by name, from a Booster, an
    estimator and a file (LightGBM's pred_contrib refuses them too)."""
    X, y = models.make_data("regression", n=300)
    booster = lgb.train(models.lightgbm_params("regression", num_leaves=4, linear_tree=True), lgb.Dataset(X, y),
                        num_boost_round=2)
    with pytest.raises(Exception, match="linear trees"):
        booster.predict(X, pred_contrib=True)
    path = tmp_path / "linear.txt"
    booster.save_model(path)
    estimator = lgb.LGBMRegressor(n_estimators=2, num_leaves=4, linear_tree=True, verbose=-1).fit(X, y)
    for model in (booster, path, estimator):
        with pytest.raises(ValueError, match=r"^from_lightgbm: model must have constant leaves; got a linear tree"):
            jaximp.from_lightgbm(model)


@pytest.mark.parametrize("name", ["multiclass", "rf"])
def test_importance_types_named_as_in_lightgbm(name):
    """LightGBM's "split" and "gain" (the total) are ``feature_importance``'s; "total_gain" too."""
    fitted = models.lightgbm_model(name)
    gain, count = fitted.model.feature_importance("gain"), fitted.model.feature_importance("split")
    np.testing.assert_array_equal(jaximp.split_importance(fitted.ens, "split"), count)
    np.testing.assert_allclose(jaximp.split_importance(fitted.ens, "gain"), gain, rtol=1e-5)
    np.testing.assert_allclose(jaximp.split_importance(fitted.ens, "total_gain"), gain, rtol=1e-5)


@pytest.mark.parametrize("name", ["squarederror", "softprob"])
def test_importance_types_named_as_in_xgboost(name):
    """XGBoost's five types are ``get_score``'s ("gain" and "cover" the means)."""
    fitted = models.xgboost_model(name)
    for type in ("weight", "gain", "cover", "total_gain", "total_cover"):
        score = fitted.model.get_score(importance_type=type)
        want = [score.get(f"f{i}", 0.0) for i in range(fitted.ens.n_features)]
        assert_close(jaximp.split_importance(fitted.ens, type), want)
