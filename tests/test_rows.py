"""Rows as jaximp takes them: arrays, lists, JAX arrays, pandas and polars frames (columns
matched by name), catboost.Pool, raw categorical values (CatBoost's hashing, each library's
category codes), and bad rows as clear errors.

Oracles: the same rows in another form (results equal exactly), CatBoost's own hashes of its
training values (its Python export), each library's predictions of the same frames, the error
messages of jaximp and of the libraries.
"""

from __future__ import annotations

import runpy
import time

import catboost
import jax.numpy as jnp
import models
import numpy as np
import pandas as pd
import pytest
import xgboost as xgb
from oracles import assert_close, raw_output

import jaximp
from jaximp._rows.hashing import cat_hash, hash_column
from jaximp._rows.inputs import as_weights

# Numbers -------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def named():
    """A model trained on a DataFrame with named columns."""
    X, y = models.make_data("regression", n=300)
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    model = catboost.CatBoostRegressor(iterations=10, depth=3, verbose=0, thread_count=1).fit(frame, y)
    return model, jaximp.from_catboost(model), frame


def test_pandas_columns_are_matched_by_name(named):
    model, ens, frame = named
    assert ens.feature_names == tuple(frame.columns)
    shuffled = frame[frame.columns[::-1]].assign(extra=1.0)
    np.testing.assert_array_equal(ens.predict(shuffled), ens.predict(frame.to_numpy()))
    np.testing.assert_allclose(ens.predict(shuffled), model.predict(frame), rtol=1e-5, atol=1e-5)


def test_polars_and_pool_inputs(named):
    import polars as pl

    model, ens, frame = named
    expected = ens.predict(frame.to_numpy())
    polars_frame = pl.from_pandas(frame).select(list(frame.columns[::-1]))
    np.testing.assert_array_equal(ens.predict(polars_frame), expected)
    np.testing.assert_array_equal(ens.predict(catboost.Pool(frame)), expected)


def test_pool_columns_are_matched_by_name_or_refused(named):
    model, ens, frame = named
    expected = ens.predict(frame.to_numpy())
    np.testing.assert_array_equal(ens.predict(catboost.Pool(frame[frame.columns[::-1]])), expected)
    with pytest.raises(ValueError, match=r"missing \['f0'\]"):
        ens.predict(catboost.Pool(frame.rename(columns={"f0": "other"})))


def test_float64_jax_and_list_inputs(regression_model):
    model, ens, X, _ = regression_model
    expected = ens.predict(X)
    np.testing.assert_array_equal(ens.predict(X.astype(np.float64)), expected)
    np.testing.assert_array_equal(ens.predict(jnp.asarray(X)), expected)
    np.testing.assert_array_equal(ens.predict(X[:5].tolist()), expected[:5])
    np.testing.assert_array_equal(jaximp.predict(ens, X), expected)


@pytest.mark.parametrize(
    "bad, error, match",
    [
        (np.zeros((4, 5), np.float32), ValueError, "must have 6 columns"),
        (np.zeros((2, 3, 6), np.float32), ValueError, "rank 2"),
        (np.zeros(5, np.float32), ValueError, "a 1-D X of 5 values, which is one row"),
        (np.zeros((0, 6), np.float32), ValueError, "at least one row"),
        (np.full((2, 6), "a"), TypeError, "must hold numbers"),
        ({"a": 1}, TypeError, "must be a NumPy or JAX array"),
    ],
)
def test_bad_rows(regression_model, bad, error, match):
    _, ens, _, _ = regression_model
    with pytest.raises(error, match=match):
        ens.predict(bad)
    with pytest.raises(error, match="leaf_indices: X"):
        jaximp.leaf_indices(ens, bad)


def test_bad_frames(named):
    _, ens, frame = named
    with pytest.raises(ValueError, match=r"missing \['f2'\]"):
        ens.predict(frame.drop(columns="f2"))
    with pytest.raises(TypeError, match=r"non-numeric columns \['f1'\]"):
        ens.predict(frame.assign(f1="x"))


@pytest.mark.parametrize("w, match", [
    (np.ones(3), r"f: sample_weight must have shape \(400,\)"),
    (-np.ones(400), "f: sample_weight must be finite, non-negative and not all 0"),
    (np.zeros(400), "f: sample_weight must be finite, non-negative and not all 0"),
])
def test_bad_weights(w, match):
    with pytest.raises(ValueError, match=match):
        as_weights(w, 400, "f")


# CatBoost's categorical values -----------------------------------------------------------------------------------


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


@pytest.mark.parametrize("dtype", [object, "str", "string", "category"])
def test_hashes_of_columns_seen_before(dtype, monkeypatch):
    """A column's hashes are CatBoost's (``cat_hash`` of each value) whether its values were
    hashed before (kept in a memo), are new, or overflow the memo (which then starts over); string
    columns of every pandas kind (Arrow, Python) and categories alike."""
    from jaximp._rows import hashing

    monkeypatch.setattr(hashing, "_MEMO_SIZE", 5)
    monkeypatch.setattr(hashing, "_MEMO", {})
    values = ["a", "zz", "abcd", "k17", "x" * 9, "y" * 20, "é" * 7, "a", "zz"]
    expected = [cat_hash(v) for v in values]
    for part in (values[:4], values, values[2:] + ["new", "newer"] * 3):
        column = pd.Series(part, dtype=dtype)
        np.testing.assert_array_equal(hash_column(column), [cat_hash(v) for v in part])
        assert len(hashing._MEMO) <= 5
    np.testing.assert_array_equal(hash_column(pd.Series(values, dtype=dtype)), expected)


def _categorical(layout):
    """``(ens, rows)``: an oblivious model with CTRs over combinations and its training rows, or a
    Lossguide model with one-hot and CTR splits and rows with unseen categories."""
    if layout == "oblivious":
        fitted = models.catboost_categorical("combinations_2")
        return fitted.ens, fitted.X
    return models.catboost_categorical_trees("lossguide_mixed").ens, models.explained("multiclass")[0]


@pytest.mark.parametrize("layout", ["oblivious", "trees"])
def test_categorical_input_forms_agree(layout):
    """Strings and integers as they are, as a pandas ``category``, as an object array, in
    another column order (by name), by batches, and as polars frames."""
    ens, frame = _categorical(layout)
    expected = np.asarray(ens.predict(frame))
    as_category = frame.astype({c: "category" for c in models.CAT})
    np.testing.assert_array_equal(ens.predict(as_category), expected)
    np.testing.assert_array_equal(ens.predict(frame.to_numpy(dtype=object)), expected)
    np.testing.assert_array_equal(ens.predict(frame[list(reversed(frame.columns))]), expected)  # by name
    np.testing.assert_array_equal(ens.predict(frame, batch_size=16), expected)
    import polars

    np.testing.assert_array_equal(ens.predict(polars.from_pandas(frame)), expected)
    np.testing.assert_array_equal(ens.predict(polars.from_pandas(as_category)), expected)


def test_float_borders_searched_beside_the_ctrs_give_the_same_bins(monkeypatch):
    """Many rows search their float features' borders in a second thread while the CTRs are
    computed: the bins equal those of one thread, and the predictions CatBoost's."""
    from jaximp._rows import featurize
    from jaximp._rows.inputs import as_features

    fitted = models.catboost_categorical("combinations_2")
    frame = pd.concat([fitted.X] * 4, ignore_index=True)
    frame.loc[::7, "f0"] = np.nan
    monkeypatch.setattr(featurize, "_THREADED_ROWS", 1 << 30)
    one_thread = np.asarray(as_features(frame, fitted.ens, "test"))
    monkeypatch.setattr(featurize, "_THREADED_ROWS", 1)
    np.testing.assert_array_equal(np.asarray(as_features(frame, fitted.ens, "test")), one_thread)
    assert_close(fitted.ens.predict(frame), raw_output(fitted.model, frame))


BORDERS = {  # sets of float borders as models have them, and the hard ones
    "normal": lambda rng: rng.normal(size=rng.integers(1, 255)),
    "half-integers": lambda rng: rng.integers(-40, 40, rng.integers(1, 80)) + 0.5,
    "tiny and huge": lambda rng: np.concatenate([rng.normal(size=30) * 1e-30, [0.0, 1e-45, -1e-45, 3e38, -3e38]]),
    "dense": lambda rng: 1000.0 + rng.random(rng.integers(20, 200)) * 3.0,  # too dense: binary search
    "signed zeros": lambda rng: [-0.0, 1.0, -2.0][: rng.integers(1, 4)],
}


@pytest.mark.parametrize("kind", list(BORDERS))
def test_float_borders_by_table_equal_a_binary_search(kind):
    """A float feature's bins, counted by a table of the borders in each bucket of values,
    equal a binary search's (``np.searchsorted``): on random values, every border, its
    neighbouring floats, signed zeros, the smallest and largest floats and infinities."""
    from jaximp._rows.featurize import bucket_search

    rng = np.random.default_rng(list(BORDERS).index(kind))
    for _ in range(20):
        borders = np.unique(np.asarray(BORDERS[kind](rng), np.float32))
        values = np.concatenate([
            rng.normal(size=2000).astype(np.float32) * np.float32(10.0) ** rng.integers(-3, 4),
            borders, np.nextafter(borders, np.float32(np.inf)), np.nextafter(borders, np.float32(-np.inf)),
            np.float32([0.0, -0.0, 1e-45, -1e-45, 1.17549435e-38, 3.4028235e38, -3.4028235e38, np.inf, -np.inf]),
        ])
        np.testing.assert_array_equal(bucket_search(borders)(values), np.searchsorted(borders, values))


BAD_CATEGORICAL = [
    (lambda f: f.astype({"c2": float}), TypeError, "c2.*strings or integers"),
    (lambda f: f.drop(columns="c1"), ValueError, r"missing \['c1'\]"),
    (lambda f: f.assign(c0=[None] + list(f.c0[1:])), TypeError, "c0.*missing value"),
    (lambda f: f[["f0", "f1"]].to_numpy(), ValueError, "must have 6 columns"),
]


@pytest.mark.parametrize("layout, change, error, match", [("oblivious", *case) for case in BAD_CATEGORICAL]
                         + [("trees", *case) for i, case in enumerate(BAD_CATEGORICAL) if i != 2])
def test_bad_categorical_rows(layout, change, error, match):
    if layout == "oblivious":
        fitted = models.catboost_categorical("combinations_2")
    else:
        fitted = models.catboost_categorical_trees("lossguide_mixed")
    ens, frame = fitted.ens, fitted.X  # the training rows
    with pytest.raises(error, match=match):
        ens.predict(change(frame))
    with pytest.raises(error, match=match):
        jaximp.shap_values(ens, change(frame))


def test_categorical_values_hashed_in_two_threads_name_the_first_bad_column(monkeypatch):
    """The categorical columns are hashed by both threads in turn (many rows): the rows' hashes
    are those of one thread, and of two bad columns the error names the first, whichever thread
    hashed it."""
    from jaximp._rows import featurize
    from jaximp._rows.inputs import as_features

    fitted = models.catboost_categorical("combinations_2")
    frame = pd.concat([fitted.X] * 4, ignore_index=True)
    bad = frame.assign(c0=[None] + list(frame.c0[1:])).astype({"c2": float})  # c0 missing, c2 floats
    monkeypatch.setattr(featurize, "_THREADED_ROWS", 1 << 30)
    one_thread = np.asarray(as_features(frame, fitted.ens, "test"))
    monkeypatch.setattr(featurize, "_THREADED_ROWS", 1)
    np.testing.assert_array_equal(np.asarray(as_features(frame, fitted.ens, "test")), one_thread)
    with pytest.raises(TypeError, match="c0.*missing value"):
        as_features(bad, fitted.ens, "test")

    def failing(column: int, seconds: float):
        def hash_column():
            time.sleep(seconds)
            raise ValueError(f"column {column}")
        return hash_column

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as helper:  # the first column fails last, in either thread
        with pytest.raises(ValueError, match="column 0"):
            featurize._hashes([failing(0, 0.2), failing(1, 0.0), lambda: np.zeros(3, np.int64)], 3, helper)


# The category codes of XGBoost, LightGBM and scikit-learn ---------------------------------------------------------


def test_sklearn_codes_values_as_its_encoder_does():
    """scikit-learn looks every value up among the training values (numbers too: 2.5 and 16 are
    unseen, hence missing) whatever the rows come as: a DataFrame or an object array."""
    fitted = models.library_categorical("sklearn-reg")
    rows = models.library_categorical_rows("sklearn-reg")
    objects = rows.to_numpy(dtype=object)
    assert_close(jaximp.predict(fitted.ens, objects), raw_output(fitted.model, rows))
    shuffled = rows[["d", "c", "b", "a"]]  # matched by name
    assert_close(jaximp.predict(fitted.ens, shuffled), raw_output(fitted.model, rows))


@pytest.mark.parametrize("library", ["xgboost", "lightgbm", "sklearn"])
def test_frames_the_libraries_refuse(library):
    fitted = models.library_categorical(f"{library}-reg")
    model, ens, df = fitted.model, fitted.ens, fitted.X
    if library == "xgboost":
        unseen = df.iloc[:5].copy()
        unseen["c"] = pd.Categorical(["s1", "zz", "s3", None, "s1"], categories=models.STRINGS + ["zz"])
        with pytest.raises(xgb.core.XGBoostError, match="not in the training set"):
            model.predict(xgb.DMatrix(unseen, enable_categorical=True))
        with pytest.raises(ValueError, match=r"predict: X's column 'c' must hold categories seen in training; "
                                             r"got \['zz'\], which have no code \(XGBoost refuses them too"):
            jaximp.predict(ens, unseen)
        numbers = df.assign(d=df["d"].cat.codes.astype(np.float32))  # codes, but not a category column
        with pytest.raises(xgb.core.XGBoostError, match="data type doesn't match"):
            model.predict(xgb.DMatrix(numbers, enable_categorical=True))
        with pytest.raises(TypeError, match="predict: X's column 'd' must be a category column, as in training"):
            jaximp.predict(ens, numbers)
    elif library == "lightgbm":
        plain = df.assign(c=df["c"].cat.codes.astype(np.float32))  # no category column left
        with pytest.raises(ValueError, match="train and valid dataset categorical_feature do not match"):
            model.predict(plain)
        with pytest.raises(ValueError, match=r"shap_values: X must have as many category columns as the frame the "
                                             r"LightGBM model was trained on \(1\); got 0"):
            jaximp.shap_values(ens, plain)
    else:
        with pytest.raises(TypeError, match="X's column 'a' must hold numbers"):
            jaximp.predict(ens, df.assign(a="text"))
