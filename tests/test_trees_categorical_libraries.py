"""Categorical splits of XGBoost, LightGBM and scikit-learn models against each library's own numbers.

Models are trained here on four columns: ``a``, ``b`` numbers, ``c`` a pandas ``category`` of
strings (its categories listed out of alphabetical order) and ``d`` integer categories (XGBoost:
a ``category`` of the even numbers 0..30, so that codes differ from values; LightGBM and
scikit-learn: plain numbers declared categorical), both with missing values; about 20 trees.
XGBoost's regressor splits categories by partitions, its multiclass model ``c`` by one-hot
splits (``max_cat_to_onehot``).

Oracles:
* predictions: XGBoost ``predict(output_margin=True)``, LightGBM ``predict(raw_score=True)``,
  scikit-learn ``_raw_predict`` (``decision_function``); leaf indices: ``pred_leaf=True``; on
  DataFrames (each library coding them its own way) and on code matrices, with categories and
  codes unseen in training, negative and fractional codes and NaN;
* path-dependent SHAP and expected value: ``pred_contribs`` / ``pred_contrib``; Saabas:
  XGBoost's ``approx_contribs``; interactions: XGBoost's ``pred_interactions``;
* interventional SHAP: brute-force Shapley enumeration over the 2**4 coalitions, each value the
  mean of the library's own predictions on rows mixed with the background (shap refuses
  categorical splits);
* split importances: ``get_score`` and ``feature_importance``; permutation importance: the
  library's predictions on the same permuted rows; LossFunctionChange: the loss of the library's
  predictions minus its own SHAP values.

Tolerances as in the libraries' own test files: float32 sums of ~20 trees in another order,
``rtol = atol = 1e-5`` relative to the largest magnitude; leaf indices exactly.
"""

from __future__ import annotations

import functools
import itertools
import math

import lightgbm as lgb
import numpy as np
import pandas as pd
import pytest
import xgboost as xgb
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

import jaximp
import jaximp._models.categories
from jaximp._importances.permutation import _row_draws, as_key
from jaximp._rows.inputs import as_features

RTOL = 1e-5
STRINGS = [f"s{i}" for i in (3, 0, 7, 1, 9, 4, 2, 8, 6, 5)]  # category order != sorted order
EVENS = list(range(0, 32, 2))
NAMES = ["a", "b", "c", "d"]


def assert_close(got, expected, rtol=RTOL):
    expected = np.asarray(expected, np.float64)
    magnitude = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(np.asarray(got, np.float64), expected, rtol=rtol, atol=rtol * magnitude)


def frame(n, seed, library, unseen=False):
    """``(DataFrame, y, labels)`` of the four columns; ``unseen``: categories and values never
    seen in training too."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=(2, n)).astype(np.float32)
    strings = STRINGS + (["new"] if unseen else [])
    c = pd.Categorical(rng.choice(strings, n), categories=strings)
    d = rng.integers(0, 16, n)
    y = a + 2.0 * np.isin(c, ["s3", "s7", "s9", "s2"]) + np.sin(d) + 0.5 * b * (d % 3 == 0)
    y = y + 0.1 * rng.normal(size=n)
    c[rng.random(n) < 0.08] = np.nan
    if library == "xgboost":
        values = pd.Categorical(np.asarray(EVENS)[d], categories=EVENS[::-1])
        values[rng.random(n) < 0.08] = np.nan
    else:
        values = d.astype(np.float32)
        if unseen:  # codes past training, negative, fractional, huge
            values = np.where(rng.random(n) < 0.3, rng.choice([16, 40, -1, -0.5, 2.5, 1e10], n), values)
        values[rng.random(n) < 0.08] = np.nan
    labels = np.digitize(y, np.quantile(y, [1 / 3, 2 / 3]))
    return pd.DataFrame({"a": a, "b": b, "c": c, "d": values}), y, labels


@functools.cache
def trained(case):
    """``(library model, ens, training frame, y)`` of a case."""
    library, kind = case.split("-")
    df, y, labels = frame(300, 0, library)
    target = labels if kind == "multi" else y
    if library == "xgboost":
        params = dict(max_depth=4, eta=0.3, nthread=1, seed=0, max_cat_to_onehot=1)
        if kind == "multi":
            params.update(objective="multi:softprob", num_class=3, max_depth=3, max_cat_to_onehot=12)  # c one-hot
        model = xgb.train(params, xgb.DMatrix(df, target, enable_categorical=True),
                          num_boost_round=7 if kind == "multi" else 20)
        ens = jaximp.from_xgboost(model)
    elif library == "lightgbm":
        params = dict(objective="regression", num_leaves=8, min_data_in_leaf=5, min_data_per_group=5,
                      cat_smooth=1.0, max_cat_to_onehot=2, num_threads=1, verbose=-1, seed=0)
        model = lgb.train(params, lgb.Dataset(df, target, categorical_feature=["c", "d"]), num_boost_round=20)
        ens = jaximp.from_lightgbm(model)
    else:
        estimator = HistGradientBoostingClassifier if kind == "multi" else HistGradientBoostingRegressor
        model = estimator(max_iter=7 if kind == "multi" else 20, max_leaf_nodes=8, categorical_features=["c", "d"],
                          random_state=0).fit(df, target)
        ens = jaximp.from_sklearn(model)
    return model, ens, df, target


def raw(model, rows):
    """The library's raw output ``[n, K]`` of a DataFrame or a code matrix (XGBoost, LightGBM)."""
    if isinstance(model, xgb.Booster):
        data = xgb.DMatrix(rows, enable_categorical=True) if isinstance(rows, pd.DataFrame) else xgb.DMatrix(
            rows, feature_types=["q", "q", "c", "c"], feature_names=NAMES, enable_categorical=True)
        out = model.predict(data, output_margin=True)
    elif isinstance(model, lgb.Booster):
        out = model.predict(rows, raw_score=True)
    else:
        out = model._raw_predict(rows)
    return np.asarray(out, np.float64).reshape(len(rows), -1)


def explained_rows(case):
    """Rows to explain: training rows, then fresh ones (unseen values where the library takes them)."""
    model, ens, df, _ = trained(case)
    library = case.split("-")[0]
    fresh, _, _ = frame(60, 5, library, unseen=library != "xgboost")  # XGBoost refuses unseen categories
    rows = pd.concat([df.iloc[:40], fresh], ignore_index=True)
    return rows.assign(c=pd.Categorical(rows["c"], categories=fresh["c"].cat.categories))


CASES = ("xgboost-reg", "xgboost-multi", "lightgbm-reg", "sklearn-reg", "sklearn-multi")


# 1. Predictions and leaves ------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_predict_and_leaves(case):
    model, ens, _, _ = trained(case)
    assert ens.node_categorical is not None and np.asarray(ens.node_categorical).any()
    rows = explained_rows(case)
    assert_close(np.reshape(jaximp.predict(ens, rows), (len(rows), -1)), raw(model, rows))
    if isinstance(model, (xgb.Booster, lgb.Booster)):
        expected = (model.predict(xgb.DMatrix(rows, enable_categorical=True), pred_leaf=True)
                    if isinstance(model, xgb.Booster) else model.predict(rows, pred_leaf=True))
        np.testing.assert_array_equal(jaximp.leaf_indices(ens, rows), expected)


@pytest.mark.parametrize("case", ["xgboost-reg", "lightgbm-reg"])
def test_code_matrices(case):
    """Numbers are the codes: unseen codes, negative and fractional ones, huge ones and NaN go
    where the library sends them."""
    model, ens, _, _ = trained(case)
    rng = np.random.default_rng(9)
    codes = np.asarray([0, 1, 5, 9, 15, 16, 31, 40, 95, -1, -0.5, -0.0, 0.5, 2.7, 1e10, -1e10, np.nan])
    x = np.column_stack([rng.normal(size=(200, 2)), rng.choice(codes, (200, 2))]).astype(np.float32)
    assert_close(np.reshape(jaximp.predict(ens, x), (len(x), -1)), raw(model, x))
    leaves = (model.predict(xgb.DMatrix(x, feature_types=["q", "q", "c", "c"], feature_names=NAMES,
                                        enable_categorical=True), pred_leaf=True)
              if isinstance(model, xgb.Booster) else model.predict(x, pred_leaf=True))
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, x), leaves)


def test_sklearn_codes_values_as_its_encoder_does():
    """scikit-learn looks every value up among the training values (numbers too: 2.5 and 16 are
    unseen, hence missing) whatever the rows come as: a DataFrame or an object array."""
    model, ens, _, _ = trained("sklearn-reg")
    rows = explained_rows("sklearn-reg")
    objects = rows.to_numpy(dtype=object)
    assert_close(jaximp.predict(ens, objects), raw(model, rows)[:, 0])
    shuffled = rows[["d", "c", "b", "a"]]  # matched by name
    assert_close(jaximp.predict(ens, shuffled), raw(model, rows)[:, 0])


# 2. SHAP ------------------------------------------------------------------------------------


def contributions(model, rows, **kw):
    """``[N, F + 1(, F + 1), K]`` XGBoost's ``pred_contribs``/``pred_interactions`` or LightGBM's
    ``pred_contrib`` (class by class), outputs last."""
    if isinstance(model, xgb.Booster):
        out = model.predict(xgb.DMatrix(rows, enable_categorical=True), **kw)
        if kw.get("pred_interactions"):
            return out[..., None] if out.ndim == 3 else out.transpose(0, 2, 3, 1)
        return out[..., None] if out.ndim == 2 else out.transpose(0, 2, 1)
    out = np.asarray(model.predict(rows, pred_contrib=True))
    return out.reshape(len(rows), -1, len(NAMES) + 1).transpose(0, 2, 1)


@pytest.mark.parametrize("case", [pytest.param("xgboost-reg", marks=pytest.mark.slow), "xgboost-multi",
                                  "lightgbm-reg"])
def test_path_dependent_matches_library(case):
    model, ens, _, _ = trained(case)
    rows = explained_rows(case)
    expected = contributions(model, rows, pred_contribs=True)
    got = np.reshape(jaximp.shap_values(ens, rows), expected[:, :-1].shape)
    assert_close(got, expected[:, :-1])
    assert_close(np.reshape(jaximp.expected_value(ens), -1), expected[0, -1])


def test_approximate_matches_approx_contribs():
    model, ens, _, _ = trained("xgboost-multi")
    rows = explained_rows("xgboost-multi")
    expected = contributions(model, rows, pred_contribs=True, approx_contribs=True)
    got = np.reshape(jaximp.shap_values(ens, rows, method="approximate"), expected[:, :-1].shape)
    assert_close(got, expected[:, :-1])


def test_interactions_match_pred_interactions():
    model, ens, _, _ = trained("xgboost-multi")
    rows = explained_rows("xgboost-multi").iloc[::3]
    expected = contributions(model, rows, pred_interactions=True)[:, :-1, :-1]
    assert_close(np.reshape(jaximp.shap_interaction_values(ens, rows), expected.shape), expected)


def brute_force_interventional(model, x, background):
    """``f64[N, F, K]`` Shapley values of ``v(S) = mean_b f(x_S, b_rest)`` with ``f`` the
    library's raw output, over every coalition of the F columns (object arrays of raw values)."""
    n, f = x.shape
    coalitions = list(itertools.product([False, True], repeat=f))
    mixed = np.where(np.asarray(coalitions)[:, None, None, :], x[None, :, None, :], background[None, None, :, :])
    flat = mixed.reshape(-1, f)
    if isinstance(model, (xgb.Booster, lgb.Booster)):
        out = raw(model, flat.astype(np.float32))
    else:
        rows = pd.DataFrame(flat, columns=NAMES)
        rows = rows.astype({"a": np.float32, "b": np.float32, "d": np.float32})
        rows["c"] = pd.Categorical(rows["c"], categories=STRINGS + ["new"])
        out = raw(model, rows)
    value = out.reshape(len(coalitions), n, len(background), -1).mean(axis=2)  # [2**F, N, K]
    index = {c: i for i, c in enumerate(coalitions)}
    phi = np.zeros((n, f, value.shape[-1]))
    for coalition in coalitions:
        for j in np.flatnonzero(~np.asarray(coalition)):
            size = sum(coalition)
            weight = math.factorial(size) * math.factorial(f - size - 1) / math.factorial(f)
            joined = tuple(True if k == j else coalition[k] for k in range(f))
            phi[:, j] += weight * (value[index[joined]] - value[index[coalition]])
    return phi


@pytest.mark.parametrize("case", ["xgboost-multi", pytest.param("lightgbm-reg", marks=pytest.mark.slow),
                                  "sklearn-multi"])
def test_interventional_matches_brute_force(case):
    model, ens, df, _ = trained(case)
    rows = explained_rows(case)
    codes = isinstance(model, (xgb.Booster, lgb.Booster))  # rows as the frames' codes, else raw values
    x, background = (np.asarray(as_features(r, ens, "test"), np.float32).astype(object) if codes
                     else r.to_numpy(dtype=object) for r in (rows.iloc[::8], df.iloc[100:120]))
    expected = brute_force_interventional(model, x, background)
    got = jaximp.shap_values(ens, x, method="interventional", background=background)
    assert_close(np.reshape(got, expected.shape), expected)
    base = jaximp.expected_value(ens, method="interventional", background=background)
    assert_close(np.reshape(base, -1), raw(model, df.iloc[100:120]).mean(0))


# 3. Importances -------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["xgboost-reg", "xgboost-multi", "lightgbm-reg"])
def test_split_importance_matches_library(case):
    model, ens, _, _ = trained(case)
    if isinstance(model, xgb.Booster):
        for type in ("weight", "gain", "cover", "total_gain", "total_cover"):
            score = model.get_score(importance_type=type)
            assert_close(jaximp.split_importance(ens, type), [score.get(name, 0.0) for name in NAMES])
    else:
        assert_close(jaximp.split_importance(ens, "split"), model.feature_importance(importance_type="split"))
        assert_close(jaximp.split_importance(ens, "total_gain"), model.feature_importance(importance_type="gain"))


def model_loss(loss, y, raw_out):
    """The model's loss of raw predictions ``[n, K]`` in float64 (CatBoost's definitions)."""
    if loss == "RMSE":
        return np.sqrt(np.mean((raw_out[:, 0] - y) ** 2))
    log_p = raw_out - np.logaddexp.reduce(raw_out, axis=1, keepdims=True)
    return -np.mean(log_p[np.arange(len(y)), y.astype(int)])


def test_permutation_matches_the_library_on_the_same_draws():
    model, ens, df, y = trained("lightgbm-reg")
    got = jaximp.permutation_importance(ens, df, y, n_repeats=3, random_state=7)
    want = np.zeros((len(NAMES), 3))
    for r, (chosen, source) in enumerate(_row_draws(as_key(7, "test"), 3, len(df), len(df))):
        rows = df.iloc[chosen].reset_index(drop=True)
        base = model_loss("RMSE", y[chosen], raw(model, rows))
        for f, name in enumerate(NAMES):
            permuted = rows.copy()
            permuted[name] = df[name].iloc[source].reset_index(drop=True)  # its dtype kept
            want[f, r] = model_loss("RMSE", y[chosen], raw(model, permuted)) - base
    np.testing.assert_allclose(got.importances, want, rtol=RTOL, atol=RTOL)


@pytest.mark.parametrize("case", ["xgboost-multi", "lightgbm-reg"])
def test_loss_function_change_matches_the_library(case):
    """``M(y, raw - phi_f) - M(y, raw)`` with the library's raw output and its own SHAP values."""
    model, ens, df, y = trained(case)
    out = raw(model, df)
    phi = contributions(model, df, pred_contribs=True)[:, :-1]  # [N, F, K]
    want = [model_loss(ens.loss_function, y, out - phi[:, f]) - model_loss(ens.loss_function, y, out)
            for f in range(len(NAMES))]
    assert_close(jaximp.loss_function_change(ens, df, y), want)


# 4. Sources and refusals -------------------------------------------------------------------


def test_model_files(tmp_path):
    """The categories of a saved model: XGBoost's JSON and UBJSON (``cats``), LightGBM's text
    (``pandas_categorical``), imported without the library."""
    booster, ens, _, _ = trained("xgboost-multi")
    rows = explained_rows("xgboost-multi")
    for source in (booster.save_raw("json"), booster.save_raw("ubj")):
        again = jaximp.from_xgboost(source)
        assert again.category_codes == ens.category_codes
        assert_close(jaximp.predict(again, rows), jaximp.predict(ens, rows))
    model, ens, _, _ = trained("lightgbm-reg")
    path = tmp_path / "model.txt"
    model.save_model(path)
    again = jaximp.from_lightgbm(str(path))
    rows = explained_rows("lightgbm-reg")
    assert again.category_codes == ens.category_codes
    assert_close(jaximp.predict(again, rows), raw(model, rows)[:, 0])


def test_frames_the_libraries_refuse():
    booster, ens, df, _ = trained("xgboost-reg")
    unseen = df.iloc[:5].copy()
    unseen["c"] = pd.Categorical(["s1", "zz", "s3", None, "s1"], categories=STRINGS + ["zz"])
    with pytest.raises(xgb.core.XGBoostError, match="not in the training set"):
        booster.predict(xgb.DMatrix(unseen, enable_categorical=True))
    with pytest.raises(ValueError, match=r"predict: X's column 'c' must hold categories seen in training; "
                                         r"got \['zz'\], which have no code \(XGBoost refuses them too"):
        jaximp.predict(ens, unseen)
    numbers = df.assign(d=df["d"].cat.codes.astype(np.float32))  # codes, but not a category column
    with pytest.raises(xgb.core.XGBoostError, match="data type doesn't match"):
        booster.predict(xgb.DMatrix(numbers, enable_categorical=True))
    with pytest.raises(TypeError, match="predict: X's column 'd' must be a category column, as in training"):
        jaximp.predict(ens, numbers)
    model, ens, df, _ = trained("lightgbm-reg")
    plain = df.assign(c=df["c"].cat.codes.astype(np.float32))  # no category column left
    with pytest.raises(ValueError, match="train and valid dataset categorical_feature do not match"):
        model.predict(plain)
    with pytest.raises(ValueError, match=r"shap_values: X must have as many category columns as the frame the "
                                         r"LightGBM model was trained on \(1\); got 0"):
        jaximp.shap_values(ens, plain)
    model, ens, df, _ = trained("sklearn-reg")
    with pytest.raises(TypeError, match="X's column 'a' must hold numbers"):
        jaximp.predict(ens, df.assign(a="text"))


def test_bitsets_past_the_memory_bound_are_refused(monkeypatch):
    """Category codes in the millions would need bitsets of millions of bits at every node."""
    model, _, _, _ = trained("lightgbm-reg")
    monkeypatch.setattr(jaximp._models.categories, "MAX_CATEGORY_WORDS", 64)
    with pytest.raises(ValueError, match=r"from_lightgbm: the model's categorical splits read category codes up "
                                         r"to \d+, whose bitsets take \d+ x \d+ x \d+ words, more than jaximp holds"):
        jaximp.from_lightgbm(model)


def test_numeric_models_have_no_set_membership_splits():
    """Models without categorical splits keep the threshold rule alone (their kernels compile
    exactly as before)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3)).astype(np.float32)
    booster = xgb.train(dict(max_depth=2, nthread=1), xgb.DMatrix(X, X[:, 0]), num_boost_round=2)
    ens = jaximp.from_xgboost(booster)
    assert ens.node_categorical is None and ens.node_categories is None and ens.category_codes is None
