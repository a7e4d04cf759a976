"""Models with categorical features against CatBoost: one-hot and CTR splits, every CTR type
CatBoost trains on CPU, CTRs over combinations (of categorical columns and binarized float
features), NaN in float columns, categories never seen in training, every output kind.

CatBoost is the oracle throughout: ``calc_leaf_indexes`` and ``predict`` for the featurizer,
``get_feature_importance`` for every importance; permutation importance is checked against
CatBoost's predictions of the permuted raw rows.
"""

from __future__ import annotations

import functools
import runpy

import catboost
import numpy as np
import pandas as pd
import pytest

import jaximp
from jaximp._importances.permutation import _row_draws, as_key
from jaximp._rows.hashing import cat_hash, hash_column

CAT = ["c0", "c1", "c2", "c3"]
LONG = ["v" * k + str(k) for k in range(5, 150, 12)]  # strings of every CityHash length class


def make_frame(n: int, seed: int, unseen: bool = False) -> pd.DataFrame:
    """Rows with 2 float columns (one with NaN) and 4 categorical ones (strings, ints, long
    strings), interleaved; ``unseen`` replaces some categories by ones no model has seen."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({
        "f0": rng.normal(size=n).astype(np.float32),
        "c0": rng.choice(list("abcd"), n),
        "c1": rng.choice([f"k{i}" for i in range(40)], n),
        "f1": np.where(rng.random(n) < 0.1, np.nan, rng.normal(size=n)).astype(np.float32),
        "c2": rng.integers(0, 7, n),
        "c3": rng.choice(LONG, n),
    })
    if unseen:
        frame.loc[frame.index[::3], "c1"] = "never-seen"
        frame.loc[frame.index[1::4], "c0"] = "zz"
    return frame


def make_target(frame: pd.DataFrame, kind: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    signal = (frame.f0 + (frame.c0 == "a") + pd.to_numeric(frame.c1.str[1:], errors="coerce").fillna(0) / 20
              + frame.c2 / 3
              + frame.c3.str.len() % 3 + 0.3 * rng.normal(size=len(frame))).to_numpy()
    pair = pd.to_numeric(frame.c1.str[1:], errors="coerce").fillna(0) % 3 == 0
    signal = signal + 2.0 * (pair ^ (frame.c3.str.len() % 2 == 0)).to_numpy()  # c1 x c3
    if kind == "regression":
        return signal
    if kind == "binary":
        return (signal > np.median(signal)).astype(int)
    if kind == "multiclass":
        return np.digitize(signal, np.quantile(signal, [0.33, 0.66]))
    return np.stack([signal, frame.f0.to_numpy() - signal], axis=1)


_LOSS = {"regression": "RMSE", "binary": "Logloss", "multiclass": "MultiClass", "multiregression": "MultiRMSE"}

# name: (kind, CatBoost options)
ZOO = {
    "one_hot": ("regression", dict(one_hot_max_size=255)),
    "ctr": ("binary", dict(one_hot_max_size=1)),
    "ctr_types": ("binary", dict(one_hot_max_size=4, simple_ctr=["Borders", "Buckets", "Counter",
                                                                  "BinarizedTargetMeanValue"])),
    "combinations_2": ("binary", dict(one_hot_max_size=4, max_ctr_complexity=2)),
    "combinations_4": ("regression", dict(one_hot_max_size=2, max_ctr_complexity=4, depth=5)),
    "categorical_pairs": ("binary", dict(one_hot_max_size=1, max_ctr_complexity=3)),
    "multiclass": ("multiclass", dict(one_hot_max_size=4, max_ctr_complexity=2)),
    "multiregression": ("multiregression", dict(one_hot_max_size=255)),
}


@functools.cache
def trained(name: str):
    """``(model reloaded from its JSON export, ens, frame, y)`` of a zoo model."""
    kind, options = ZOO[name]
    frame = make_frame(500, seed=0)
    y = make_target(frame, kind)
    params = dict(loss_function=_LOSS[kind], iterations=12, depth=4, learning_rate=0.3, random_seed=0,
                  verbose=0, thread_count=1, allow_writing_files=False, cat_features=CAT)
    params.update(options)
    model = catboost.CatBoost(params).fit(frame, y)
    ens = jaximp.from_catboost(model)
    return model, ens, frame, y


def pool(frame, y=None):
    return catboost.Pool(frame, label=y, cat_features=CAT)


def assert_close(got, expected):
    expected = np.asarray(expected, np.float64)
    magnitude = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(np.asarray(got, np.float64), expected, rtol=1e-5, atol=1e-5 * magnitude)


def explained(kind: str):
    """Rows from the training distribution and rows with unseen categories, with targets."""
    frame = pd.concat([make_frame(40, seed=5), make_frame(40, seed=6, unseen=True)], ignore_index=True)
    return frame, make_target(frame, kind, seed=1)


# The featurizer ---------------------------------------------------------------------------


def test_cat_hash_is_catboosts(tmp_path):
    """CatBoost's own table of its training values' hashes (its Python export) for strings of
    every CityHash length class, integers and booleans."""
    values = ["a", "zz", "abcd", "k17", "x" * 9, "y" * 20, "z" * 40, "w" * 100, "é" * 7, 7, 0, True]
    frame = pd.DataFrame({"c": np.array(values * 5, dtype=object), "f": np.arange(60.0)})
    model = catboost.CatBoostRegressor(iterations=2, depth=1, verbose=0, allow_writing_files=False,
                                       cat_features=["c"])
    model.fit(frame, np.arange(60.0) % 7)
    path = tmp_path / "model.py"
    model.save_model(str(path), format="python", pool=catboost.Pool(frame, cat_features=["c"]))
    # {value's UTF-8 bytes read as Latin-1: int32 hash}
    exported = runpy.run_path(str(path))["cat_features_hashes"]
    assert len(exported) == len(values)  # True is the category "1"
    for value in values:
        key = value.encode("utf-8").decode("latin-1") if isinstance(value, str) else str(int(value))
        assert cat_hash(value) == exported[key]
    np.testing.assert_array_equal(hash_column(pd.Series(values[:9], dtype="category")),
                                  [cat_hash(v) for v in values[:9]])


@pytest.mark.parametrize("name", list(ZOO))
def test_leaves_and_predictions(name):
    model, ens, _, _ = trained(name)
    frame, _ = explained(ZOO[name][0])
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, frame), model.calc_leaf_indexes(pool(frame)))
    expected = np.asarray(model.predict(pool(frame), prediction_type="RawFormulaVal"))
    assert_close(np.asarray(ens.predict(frame)).reshape(expected.shape), expected)


def test_input_forms_agree():
    model, ens, frame, _ = trained("combinations_2")
    expected = np.asarray(ens.predict(frame))
    as_category = frame.astype({c: "category" for c in CAT})
    np.testing.assert_array_equal(ens.predict(as_category), expected)
    np.testing.assert_array_equal(ens.predict(frame.to_numpy(dtype=object)), expected)
    np.testing.assert_array_equal(ens.predict(frame[list(reversed(frame.columns))]), expected)  # by name
    polars = pytest.importorskip("polars")
    np.testing.assert_array_equal(ens.predict(polars.from_pandas(frame)), expected)
    np.testing.assert_array_equal(ens.predict(polars.from_pandas(as_category)), expected)


def test_model_files_and_summed_models(tmp_path):
    model, ens, frame, _ = trained("combinations_2")
    for fmt, suffix in (("cbm", ".cbm"), ("json", ".json")):
        path = tmp_path / f"m{suffix}"
        model.save_model(str(path), format=fmt)
        np.testing.assert_array_equal(jaximp.from_catboost(path).predict(frame), ens.predict(frame))
    other, _, _, _ = trained("ctr")
    both = catboost.sum_models([model, other], weights=[1.0, 0.5])
    expected = np.asarray(both.predict(pool(frame), prediction_type="RawFormulaVal"))
    assert_close(jaximp.from_catboost(both).predict(frame), expected)


# Importances and SHAP -----------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ZOO))
def test_prediction_values_change(name):
    model, ens, frame, y = trained(name)
    assert_close(jaximp.prediction_values_change(ens), model.get_feature_importance(type="PredictionValuesChange"))
    rows, _ = explained(ZOO[name][0])
    assert_close(jaximp.prediction_values_change(ens, rows),
                 model.get_feature_importance(pool(rows), type="PredictionValuesChange"))


@pytest.mark.parametrize("name", [n for n in ZOO if n != "multiclass"])
def test_interaction(name):
    """CatBoost's Interaction rows, also where its walk over a CTR's columns credits pairs
    unevenly (CTRs over a categorical column and binarized float features) and where one-hot
    splits are credited to no column (the scores then sum to less than 100). MultiClass scores
    are CatBoost's float rounding noise (see jaximp.interaction)."""
    model, ens, _, _ = trained(name)
    rows = model.get_feature_importance(type="Interaction")
    matrix = np.asarray(jaximp.interaction(ens))
    np.testing.assert_allclose(matrix[rows[:, 0].astype(int), rows[:, 1].astype(int)], rows[:, 2],
                               rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(np.triu(matrix, 1).sum(), rows[:, 2].sum(), rtol=1e-5)
    np.testing.assert_array_equal(matrix, matrix.T)


def catboost_shap(model, data, **kw):
    out = np.asarray(model.get_feature_importance(data, type="ShapValues", **kw))
    out = out[:, None, :] if out.ndim == 2 else out  # [N, K, F + 1]
    return np.moveaxis(out[:, :, :-1], 1, 2), out[0, :, -1]


SHAP_DEFAULT = ("combinations_2", "combinations_4", "multiclass", "multiregression")  # players of one and of
# several columns, one-hot and CTR splits, every output kind; every model's featurizer: test_leaves_and_predictions


@pytest.mark.parametrize("name", [n if n in SHAP_DEFAULT else pytest.param(n, marks=pytest.mark.slow) for n in ZOO])
def test_shap_values(name):
    model, ens, train_frame, train_y = trained(name)
    frame, y = explained(ZOO[name][0])
    prediction = np.asarray(model.predict(pool(frame), prediction_type="RawFormulaVal")).reshape(len(frame), -1)
    for method, calc_type in (("path_dependent", "Regular"), ("exact", "Exact"), ("approximate", "Approximate")):
        values, expected = catboost_shap(model, pool(frame, y), shap_calc_type=calc_type)
        got = np.asarray(jaximp.shap_values(ens, frame, method=method)).reshape(values.shape)
        assert_close(got, values)
        assert_close(np.reshape(jaximp.expected_value(ens, method=method), -1), expected)
        assert_close(got.sum(1) + expected, prediction)
    background = train_frame.iloc[:60]
    values, expected = catboost_shap(model, pool(frame, y),
                                     reference_data=pool(background, train_y[:60]))
    got = jaximp.shap_values(ens, frame, method="interventional", background=background)
    assert_close(np.asarray(got).reshape(values.shape), values)


@pytest.mark.parametrize("name", ["one_hot", "combinations_2", "multiclass"])
def test_shap_interaction_values(name):
    model, ens, _, _ = trained(name)
    frame, y = explained(ZOO[name][0])
    frame, y = frame.iloc[::4], y[::4]
    expected = np.asarray(model.get_feature_importance(pool(frame, y), type="ShapInteractionValues"))
    got = np.asarray(jaximp.shap_interaction_values(ens, frame))
    if expected.ndim == 4:  # [N, K, F + 1, F + 1]
        assert_close(np.moveaxis(got, -1, 1), expected[:, :, :-1, :-1])
    else:
        assert_close(got, expected[:, :-1, :-1])


def test_combination_classes_of_several_categorical_columns():
    """The zoo has CTRs over several categorical columns: SHAP credits them as one player."""
    _, ens, _, _ = trained("categorical_pairs")
    assert any(len(player) > 1 for player in ens.players)


@pytest.mark.parametrize("name", ["one_hot", "ctr_types", "combinations_4", "categorical_pairs", "multiclass"])
def test_loss_function_change(name):
    model, ens, _, _ = trained(name)
    frame, y = explained(ZOO[name][0])
    assert_close(jaximp.loss_function_change(ens, frame, y),
                 model.get_feature_importance(pool(frame, y), type="LossFunctionChange"))


@pytest.mark.parametrize("name, groups, max_samples", [
    ("combinations_2", None, 1.0),
    ("combinations_4", [["c0", "c1"], ["f0", "c2", "c3"], ["f1"]], 0.5),
    ("multiclass", None, 1.0),
])
def test_permutation_importance_re_evaluates_every_split(name, groups, max_samples):
    """Each permuted column re-evaluated by CatBoost itself: its one-hot values, its CTRs and
    the CTRs over combinations that it is part of (a group inside or across them)."""
    model, ens, _, _ = trained(name)
    kind = ZOO[name][0]
    frame, y = explained(kind)
    repeats = 2
    got = jaximp.permutation_importance(ens, frame, y, n_repeats=repeats, random_state=3,
                                        feature_groups=groups, max_samples=max_samples)
    columns = [[c] for c in frame.columns] if groups is None else groups
    n_sub = len(frame) if max_samples == 1.0 else int(max_samples * len(frame))
    draws = _row_draws(as_key(3, "test"), repeats, len(frame), n_sub)

    def score(rows, raw):
        if kind == "binary":
            p = 1 / (1 + np.exp(-raw))
            return np.mean(y[rows] * np.log(p) + (1 - y[rows]) * np.log(1 - p))
        if kind == "multiclass":
            z = raw - raw.max(1, keepdims=True)
            logp = z - np.log(np.exp(z).sum(1, keepdims=True))
            return np.mean(logp[np.arange(len(rows)), y[rows]])
        return -np.sqrt(np.mean((raw - y[rows]) ** 2))

    expected = np.zeros((len(columns), repeats))
    for r, (rows, source) in enumerate(draws):
        base = score(rows, np.asarray(model.predict(pool(frame.iloc[rows]), prediction_type="RawFormulaVal")))
        for g, group in enumerate(columns):
            permuted = frame.iloc[rows].copy()
            permuted[group] = frame.iloc[source][group].to_numpy()
            raw = np.asarray(model.predict(pool(permuted), prediction_type="RawFormulaVal"))
            expected[g, r] = base - score(rows, raw)
    np.testing.assert_allclose(got.importances, expected, rtol=1e-4, atol=1e-5)


# Bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize("change, error, match", [
    (lambda f: f.astype({"c2": float}), TypeError, "c2.*strings or integers"),
    (lambda f: f.drop(columns="c1"), ValueError, r"missing \['c1'\]"),
    (lambda f: f.assign(c0=[None] + list(f.c0[1:])), TypeError, "c0.*missing value"),
    (lambda f: pool(f), TypeError, "raw categorical values"),
    (lambda f: f[["f0", "f1"]].to_numpy(), ValueError, "must have 6 columns"),
])
def test_bad_rows(change, error, match):
    _, ens, frame, _ = trained("combinations_2")
    with pytest.raises(error, match=match):
        ens.predict(change(frame))


def test_multi_target_models_with_ctrs_are_refused():
    """CatBoost's JSON export of a MultiRMSE model with CTRs predicts differently from the model
    (it keeps one CTR table per CTR, not per target): refused rather than wrong."""
    frame = make_frame(300, seed=0)
    y = make_target(frame, "multiregression")
    model = catboost.CatBoost(dict(loss_function="MultiRMSE", iterations=5, depth=3, verbose=0,
                                   allow_writing_files=False, cat_features=CAT, one_hot_max_size=2))
    model.fit(frame, y)
    with pytest.raises(ValueError, match="multi-target model has CTR features"):
        jaximp.from_catboost(model)


def test_text_features_are_refused():
    frame = pd.DataFrame({"t": ["good day", "bad day", "so so", "fine"] * 20, "f": np.arange(80.0)})
    model = catboost.CatBoostClassifier(iterations=2, verbose=0, allow_writing_files=False, text_features=["t"])
    model.fit(frame, np.arange(80) % 2)
    with pytest.raises(ValueError, match="text features, which jaximp does not support"):
        jaximp.from_catboost(model)


def test_explainer_explanation_of_categorical_rows():
    _, ens, frame, _ = trained("combinations_2")
    rows = frame.iloc[:20]
    explanation = jaximp.Explainer(ens)(rows)
    np.testing.assert_array_equal(explanation.values, jaximp.shap_values(ens, rows))
    assert explanation.feature_names == list(frame.columns)
    np.testing.assert_array_equal(explanation.display_data[:, 1], rows["c0"].to_numpy())
    np.testing.assert_array_equal(explanation.data[:, 0], rows["f0"].to_numpy())
    assert np.isnan(explanation.data[:, 1]).all()
