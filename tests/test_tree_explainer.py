"""``jaximp.TreeExplainer`` against shap's ``TreeExplainer`` on the same models and inputs.

The oracle is shap 0.51 itself, given the whole background (``Independent(bg,
max_samples=len(bg))``): values, interaction values, expected values and Explanations of
XGBoost, LightGBM, scikit-learn (forests, gradient boosting, HistGradientBoosting, a Pipeline)
and CatBoost models, regression, binary and multiclass, with NaN in the rows; every
``model_output`` / ``feature_perturbation`` combination shap allows, and its refusals.
"""

from __future__ import annotations

import functools
import warnings

import catboost
import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
import shap
from models import LOSS, lightgbm_model, make_data, sklearn_model, xgboost_model
from shap.utils._exceptions import ExplainerError

import jaximp

RTOL, ATOL = 1e-5, 2e-5  # float32 sums against shap's float64 (XGBoost's own float32 for its shortcut)


def _fitted(name):
    """``(model, X with NaN, y, kind)`` of a case."""
    library, _, case = name.partition(":")
    if library == "xgboost":
        f = xgboost_model(case)
        return f.model, f.X, f.y
    if library == "lightgbm":
        f = lightgbm_model(case)
        return f.model, f.X, f.y
    if library == "sklearn":
        f = sklearn_model(case)
        return f.model, f.X, f.y
    return _catboost(case)


@functools.cache
def _catboost(kind):
    """A CatBoostRegressor or CatBoostClassifier (shap reads only those classes with a background)."""
    X, y = make_data(kind, n=400, nan_fraction=0.05)
    make = catboost.CatBoostRegressor if kind == "regression" else catboost.CatBoostClassifier
    model = make(iterations=20, depth=4, learning_rate=0.3, random_seed=0, verbose=0, thread_count=1,
                 allow_writing_files=False, loss_function=LOSS[kind]).fit(X, y)
    return model, X, y


CASES = ["xgboost:squarederror", "xgboost:logistic", "xgboost:softprob", "lightgbm:regression", "lightgbm:binary",
         "lightgbm:multiclass", "sklearn:rf_reg", "sklearn:rf_clf", "sklearn:et_clf", "sklearn:gb_reg",
         "sklearn:gb_bin", "sklearn:hgb_reg", "sklearn:hgb_bin", "catboost:regression", "catboost:binary",
         "catboost:multiclass"]


# shap's interventional expected value misses XGBoost's per-class base score and CatBoost's bias
# there; jaximp's is the background's mean margin, as the library predicts it (tested below).
SHAP_MISSES_THE_BASE = ("xgboost:softprob", "catboost:regression")


def _whole(background):
    return shap.maskers.Independent(background, max_samples=len(background))


def _close(got, want):
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=RTOL, atol=ATOL)


def _same_expected(got, want):
    """shap's expected value: a number for one output, K numbers (a list or an array) else."""
    want = np.asarray(want, np.float64)
    if want.size == 1:
        assert np.ndim(got) == 0 and isinstance(got, np.floating)
    else:
        assert isinstance(got, np.ndarray) and got.shape == want.shape
    _close(got, want.reshape(np.shape(got)))


@pytest.mark.parametrize("name", CASES)
def test_path_dependent_equals_shap(name):
    model, X, _ = _fitted(name)
    rows = X[:40]
    ours, ref = jaximp.TreeExplainer(model), shap.TreeExplainer(model)
    assert ours.feature_perturbation == ref.feature_perturbation == "tree_path_dependent"
    want = ref.shap_values(rows)
    got = ours.shap_values(rows)
    assert type(got) is np.ndarray and got.shape == np.shape(want)
    _close(got, want)
    _same_expected(ours.expected_value, ref.expected_value)
    got_one, want_one = ours.shap_values(rows[3]), ref.shap_values(rows[3:4])[0]
    assert got_one.shape == want_one.shape
    _close(got_one, want_one)


@pytest.mark.parametrize("name", CASES)
def test_interaction_values_equal_shap(name):
    model, X, _ = _fitted(name)
    rows = X[:12]
    want = shap.TreeExplainer(model).shap_interaction_values(rows)
    if isinstance(want, list):  # shap's CatBoost multiclass shortcut: a list of K arrays
        want = np.stack(want, axis=-1)
    got = jaximp.TreeExplainer(model).shap_interaction_values(rows)
    if name == "lightgbm:multiclass":  # shap adds the classes' interactions up there (one [N, F, F] array)
        assert want.shape == got.shape[:-1]
        _close(got.sum(axis=-1), want)
        _close(got.sum(axis=2), shap.TreeExplainer(model).shap_values(rows))  # each class's rows: its values
        return
    assert got.shape == want.shape
    _close(got, want)


@pytest.mark.parametrize("name", [c for c in CASES if c != "catboost:multiclass"])  # shap crashes there
def test_interventional_equals_shap_with_the_whole_background(name):
    model, X, _ = _fitted(name)
    background, rows = X[100:160], X[:30]
    ours, ref = jaximp.TreeExplainer(model, background), shap.TreeExplainer(model, _whole(background))
    assert ours.feature_perturbation == ref.feature_perturbation == "interventional"
    if name == "lightgbm:multiclass":
        _check_lightgbm_classes_merged_by_shap(model, ours.shap_values(rows), ours.expected_value, ref, rows)
        return
    _close(ours.shap_values(rows), ref.shap_values(rows))
    if name not in SHAP_MISSES_THE_BASE:
        _same_expected(ours.expected_value, ref.expected_value)


def _check_lightgbm_classes_merged_by_shap(model, got, expected, ref, rows):
    """shap's own kernel reads a multiclass LightGBM model as one output (the classes' values
    added up, its additivity check failing); jaximp gives each class's values, which add up to
    LightGBM's raw scores."""
    want = ref.shap_values(rows, check_additivity=False)
    assert want.shape == got.shape[:-1]
    _close(got.sum(axis=-1), want)
    _close(got.sum(axis=1) + expected, model.predict(rows, raw_score=True))


def _rounded_up_split(booster):
    """``(feature, threshold)`` of the first tree root whose double threshold rounds up to
    float32: a float32 row equal to that rounding lies right of the threshold for LightGBM
    (float64 comparison) but on it for a float32 copy of the threshold."""
    for tree in booster.dump_model()["tree_info"]:
        root = tree["tree_structure"]
        if "split_feature" in root and float(np.float32(root["threshold"])) > root["threshold"]:
            return root["split_feature"], root["threshold"]
    raise AssertionError("no root threshold rounds up to float32")


def test_interventional_rows_on_a_rounded_threshold_go_lightgbms_way():
    """shap's interventional kernel holds thresholds in float32, so a row between a LightGBM
    threshold and its float32 rounding goes the other way there; jaximp's values are the Shapley
    values of LightGBM's own predictions (``v(S) = mean_b f(x_S, b_rest)``, every coalition
    predicted by LightGBM), and shap's are not."""
    from oracles import prediction_shap

    fitted = lightgbm_model("regression")
    booster = fitted.model
    feature, threshold = _rounded_up_split(booster)
    rows, background = np.nan_to_num(fitted.X[:3]).astype(np.float32), fitted.X[100:130].astype(np.float32)
    rows[:, feature] = np.float32(threshold)
    assert np.all(rows[:, feature].astype(np.float64) > threshold)  # right of it for LightGBM
    want = prediction_shap(lambda z: booster.predict(z, raw_score=True)[:, None], rows, background)[..., 0]
    _close(jaximp.TreeExplainer(booster, background).shap_values(rows), want)
    theirs = shap.TreeExplainer(booster, _whole(background)).shap_values(rows, check_additivity=False)
    assert np.abs(theirs[:, feature] - want[:, feature]).max() > 1e-2  # shap's rounding, not jaximp's


def test_lightgbm_random_forest_values_are_of_the_mean_of_the_trees():
    """A LightGBM random forest predicts the sigmoid of its trees' mean, but its ``pred_contrib``
    and ``predict(raw_score=True)`` are the trees' sum, and shap gives that sum's values. jaximp's
    are those of the mean: shap's divided by the number of trees, adding up to the margin whose
    sigmoid is LightGBM's probability (and, with ``model_output="probability"``, to it)."""
    import lightgbm

    X, y = make_data("binary", n=500, nan_fraction=0.05)
    params = dict(boosting_type="rf", objective="binary", bagging_freq=1, bagging_fraction=0.5, feature_fraction=0.5,
                  num_leaves=15, num_threads=1, verbose=-1, seed=0)
    booster = lightgbm.train(params, lightgbm.Dataset(X, y), num_boost_round=20)
    rows, background = X[:40], X[100:160]
    margin = booster.predict(rows, raw_score=True) / 20
    np.testing.assert_allclose(1 / (1 + np.exp(-margin)), booster.predict(rows), rtol=1e-12)
    for data in (None, background):
        ours, ref = jaximp.TreeExplainer(booster, data), shap.TreeExplainer(booster, None if data is None else
                                                                                _whole(background))
        got = ours.shap_values(rows)
        _close(got, ref.shap_values(rows) / 20)
        _close(got.sum(axis=1) + ours.expected_value, margin)
        _close(ours.expected_value, np.float64(ref.expected_value) / 20)
    chances = jaximp.TreeExplainer(booster, background, model_output="probability")
    _close(chances.shap_values(rows).sum(axis=1) + chances.expected_value, booster.predict(rows))


@pytest.mark.parametrize("name", SHAP_MISSES_THE_BASE)
def test_interventional_expected_value_is_the_mean_margin(name):
    """shap's interventional expected value of a multiclass XGBoost model adds one base score to
    every class, and that of a CatBoostRegressor misses the model's bias; jaximp's is the
    background's mean margin, as the library predicts it."""
    import xgboost

    model, X, _ = _fitted(name)
    background = X[100:160]
    if name.startswith("xgboost"):
        margins = model.predict(xgboost.DMatrix(background), output_margin=True)
    else:
        margins = model.predict(background, prediction_type="RawFormulaVal")
    _close(jaximp.TreeExplainer(model, background).expected_value, margins.mean(axis=0))


@pytest.mark.parametrize("name", ["xgboost:logistic", "lightgbm:regression", "sklearn:rf_clf", "sklearn:gb_reg"])
def test_path_dependent_with_data_recounts_the_covers_as_shap(name):
    model, X, _ = _fitted(name)
    background, rows = X[:300], X[:30]
    kw = dict(feature_perturbation="tree_path_dependent")
    ours, ref = jaximp.TreeExplainer(model, background, **kw), shap.TreeExplainer(model, _whole(background), **kw)
    _close(ours.shap_values(rows), ref.shap_values(rows))
    _same_expected(ours.expected_value, ref.expected_value)


@pytest.mark.parametrize("name", ["xgboost:logistic", "lightgbm:binary", "sklearn:gb_bin", "sklearn:rf_clf"])
def test_probability_equals_shap(name):
    model, X, _ = _fitted(name)
    background, rows = X[100:160], X[:30]
    ours = jaximp.TreeExplainer(model, background, model_output="probability")
    ref = shap.TreeExplainer(model, _whole(background), model_output="probability")
    _close(ours.shap_values(rows), ref.shap_values(rows))
    _same_expected(ours.expected_value, ref.expected_value)


@pytest.mark.parametrize("name", ["xgboost:logistic", "lightgbm:binary", "xgboost:squarederror"])
def test_log_loss_equals_shap(name):
    model, X, y = _fitted(name)
    background, rows, labels = X[100:160], X[:30], np.asarray(y[:30], np.float64)
    ours = jaximp.TreeExplainer(model, background, model_output="log_loss")
    ref = shap.TreeExplainer(model, _whole(background), model_output="log_loss")
    _close(ours.shap_values(rows, labels), ref.shap_values(rows, labels))
    for label in (0.0, 1.0):
        _same_expected(ours.expected_value(label), ref.expected_value(label))
    explanation = ours(rows, labels)  # each row's base value is that of its label
    _close(explanation.base_values, [ref.expected_value(v) for v in labels])
    _close(explanation.values.sum(1) + explanation.base_values, _losses(model, rows, labels, name))


def _losses(model, rows, labels, name):
    margin = jaximp.predict(jaximp.TreeExplainer(model).ens, rows).astype(np.float64)
    if name.endswith("squarederror"):
        return (margin - labels) ** 2
    return np.logaddexp(0, margin) - labels * margin


@pytest.mark.parametrize("name", ["xgboost:squarederror", "xgboost:softprob", "lightgbm:multiclass", "sklearn:rf_reg",
                                  "sklearn:gb_reg"])
@pytest.mark.parametrize("data", [False, True])
@pytest.mark.parametrize("tree_limit", [3, 7, -1])
def test_tree_limit_counts_as_shap(name, data, tree_limit):
    model, X, _ = _fitted(name)
    background, rows = (X[100:160] if data else None), X[:20]
    ours = jaximp.TreeExplainer(model, background)
    ref = shap.TreeExplainer(model, None if background is None else _whole(background))
    if name == "lightgbm:multiclass" and data:  # shap's own kernel: the classes added up
        got = ours.shap_values(rows, tree_limit=tree_limit)
        _close(got.sum(axis=-1), ref.shap_values(rows, tree_limit=tree_limit, check_additivity=False))
        return
    want = ref.shap_values(rows, tree_limit=tree_limit, check_additivity=False)  # shap checks the whole model
    _close(ours.shap_values(rows, tree_limit=tree_limit), want)


@pytest.mark.parametrize("name", ["xgboost:logistic", "xgboost:softprob", "sklearn:rf_reg", "sklearn:gb_bin"])
def test_approximate_gives_saabas_as_shap(name):
    model, X, _ = _fitted(name)
    rows = X[:30]
    _close(jaximp.TreeExplainer(model).shap_values(rows, approximate=True),
           shap.TreeExplainer(model).shap_values(rows, approximate=True))


def test_a_pipeline_runs_its_transform_steps_first():
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = pd.DataFrame(np.random.default_rng(0).normal(size=(300, 4)), columns=list("abcd")), None
    y = X["a"] * 2 + X["b"] * X["c"]
    pipe = make_pipeline(StandardScaler(), RandomForestRegressor(6, max_depth=4, random_state=0)).fit(X, y)
    rows, background = X[:25], X[100:150]
    transformed = pipe[:-1].transform
    for data in (None, background):
        ours = jaximp.TreeExplainer(pipe, data)
        ref = shap.TreeExplainer(pipe[-1], None if data is None else _whole(transformed(data)))
        _close(ours.shap_values(rows), ref.shap_values(transformed(rows)))
        _same_expected(ours.expected_value, ref.expected_value)
    explanation = jaximp.TreeExplainer(pipe)(rows)
    assert explanation.feature_names == list(pipe[:-1].get_feature_names_out())
    _close(explanation.data, transformed(rows))


@pytest.mark.parametrize("name", ["xgboost:logistic", "xgboost:softprob", "catboost:regression"])
def test_explanations_equal_shap(name):
    model, X, _ = _fitted(name)
    frame = pd.DataFrame(X[:30], columns=[f"x{i}" for i in range(X.shape[1])])
    for data in (None, X[100:160]):
        ours = jaximp.TreeExplainer(model, data)
        ref = shap.TreeExplainer(model, None if data is None else _whole(data))
        for interactions in (False, True):
            got, want = ours(frame, interactions=interactions), ref(frame, interactions=interactions)
            assert type(got) is type(want)
            assert got.feature_names == want.feature_names
            assert got.values.shape == want.values.shape and got.base_values.shape == want.base_values.shape
            if not (interactions and data is not None):  # shap's interventional interactions are zeros
                _close(got.values, want.values)
            if not (name in SHAP_MISSES_THE_BASE and data is not None):
                _close(got.base_values, want.base_values)
            _close(got.base_values, np.broadcast_to(ours.expected_value, got.base_values.shape))
            np.testing.assert_array_equal(got.data, want.data)


def test_shap_plots_run_on_the_explanation():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    model, X, _ = _fitted("xgboost:logistic")
    explanation = jaximp.TreeExplainer(model)(X[:50])
    shap.plots.beeswarm(explanation, show=False)
    shap.plots.bar(explanation, show=False)
    shap.plots.waterfall(explanation[0], show=False)
    shap.summary_plot(jaximp.TreeExplainer(model).shap_values(X[:50]), X[:50], show=False)
    plt.close("all")


def test_interventional_interactions_are_not_zeros():
    """shap returns zeros; jaximp's rows add up to the interventional SHAP values."""
    model, X, _ = _fitted("xgboost:logistic")
    explainer = jaximp.TreeExplainer(model, X[100:160])
    inter = explainer.shap_interaction_values(X[:10])
    _close(inter.sum(axis=2), explainer.shap_values(X[:10]))
    assert np.abs(inter - np.diagonal(inter, axis1=1, axis2=2)[:, :, None] * np.eye(X.shape[1])).max() > 1e-3


@pytest.mark.parametrize("case", ["xgboost-reg", "lightgbm-reg"])
def test_categorical_splits_with_a_background(case):
    """shap refuses XGBoost's and LightGBM's categorical splits with a background; jaximp gives the
    interventional values of [`jaximp.shap_values`]."""
    from models import library_categorical, library_categorical_rows

    fitted = library_categorical(case)
    rows, background = library_categorical_rows(case)[:20], fitted.X[:50]
    with pytest.raises((NotImplementedError, TypeError, ExplainerError)):  # shap: categorical splits unsupported
        shap.TreeExplainer(fitted.model, _whole(background)).shap_values(rows)
    got = jaximp.TreeExplainer(fitted.model, background).shap_values(rows)
    want = jaximp.shap_values(fitted.ens, rows, method="interventional", background=background)
    np.testing.assert_array_equal(got, want)


def test_device_rows_give_device_values_and_batches_change_no_bit():
    """Device rows give device values; batches and the suite's devices (two, tests/conftest.py)
    change no bit."""
    model, X, _ = _fitted("lightgbm:binary")
    explainer = jaximp.TreeExplainer(model, X[100:160])
    host = explainer.shap_values(X[:40])
    device = explainer.shap_values(jnp.asarray(X[:40]), batch_size=7, devices=1)
    assert isinstance(device, jax.Array)
    np.testing.assert_array_equal(np.asarray(device), host)
    np.testing.assert_array_equal(explainer.shap_values(X[:40], batch_size=5), host)
    shared = explainer.shap_values(jnp.asarray(X[:40]), batch_size=7, devices=len(jax.devices()))
    np.testing.assert_array_equal(np.asarray(shared), host)
    interactions = explainer.shap_interaction_values(X[:9])
    np.testing.assert_array_equal(explainer.shap_interaction_values(X[:9], devices=len(jax.devices())), interactions)


def test_check_additivity_raises_shaps_error():
    model, X, _ = _fitted("xgboost:logistic")
    explainer = jaximp.TreeExplainer(model)
    values = explainer.shap_values(X[:10])
    explainer._check_additivity(explainer.ens, "path_dependent", X[:10], values, None, None)  # holds
    with pytest.raises(ExplainerError, match="Additivity check failed"):
        explainer._check_additivity(explainer.ens, "path_dependent", X[:10], values + 0.1, None, None)


def test_a_masker_gives_shaps_sample():
    """``Independent(bg, max_samples=100)`` is the background shap keeps of a plain ``data=bg``."""
    model, X, _ = _fitted("lightgbm:regression")
    background = X[:300]
    got = jaximp.TreeExplainer(model, shap.maskers.Independent(background, max_samples=100)).shap_values(X[:20])
    _close(got, shap.TreeExplainer(model, background).shap_values(X[:20]))


def test_model_files_and_ensembles_are_models(tmp_path):
    model, X, _ = _fitted("xgboost:logistic")
    path = str(tmp_path / "model.json")
    model.save_model(path)
    want = shap.TreeExplainer(model).shap_values(X[:10])
    for given in (path, jaximp.from_xgboost(model)):
        _close(jaximp.TreeExplainer(given).shap_values(X[:10]), want)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(feature_perturbation="path_dependent"), ValueError, "feature_perturbation must be one of"),
    (dict(model_output="margin"), ValueError, "model_output must be one of"),
    (dict(model_output="probability"), ValueError, "needs feature_perturbation='interventional' and a background"),
    (dict(model_output="log_loss", feature_perturbation="tree_path_dependent", data=True), ValueError,
     "needs feature_perturbation='interventional'"),
    (dict(data="masker"), TypeError, "shap.maskers.Independent"),
])
def test_shaps_refusals_are_clear_errors(kwargs, error, message):
    model, X, _ = _fitted("xgboost:logistic")
    if kwargs.get("data") is True:
        kwargs["data"] = X[:20]
    elif kwargs.get("data") == "masker":
        kwargs["data"] = shap.maskers.Partition(X[:20])
    with pytest.raises(error, match=message):
        jaximp.TreeExplainer(model, **kwargs)


def test_refusals_of_the_calls():
    model, X, y = _fitted("xgboost:logistic")
    with pytest.raises(ValueError, match="needs y"):
        jaximp.TreeExplainer(model, X[:20], model_output="log_loss").shap_values(X[:5])
    with pytest.raises(ValueError, match="only model_output='raw' has SHAP interaction values"):
        jaximp.TreeExplainer(model, X[:20], model_output="probability").shap_interaction_values(X[:5])
    with pytest.raises(ValueError, match="approximate=True has no interaction values"):
        jaximp.TreeExplainer(model)(X[:5], interactions=True, approximate=True)
    with pytest.raises(ValueError, match="tree_limit=0 keeps no tree"):
        jaximp.TreeExplainer(model, X[:20]).shap_values(X[:5], tree_limit=0)
    with pytest.raises(TypeError, match="xgboost.DMatrix"):
        import xgboost

        jaximp.TreeExplainer(model).shap_values(xgboost.DMatrix(X[:5]))
    with pytest.raises(TypeError, match="model must be a CatBoost, XGBoost, LightGBM or scikit-learn"):
        jaximp.TreeExplainer(object())


def test_interventional_without_data_warns_and_uses_the_path_game_as_shap():
    model, X, _ = _fitted("xgboost:logistic")
    with pytest.warns(FutureWarning, match="needs a background"):
        ours = jaximp.TreeExplainer(model, feature_perturbation="interventional")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        ref = shap.TreeExplainer(model, feature_perturbation="interventional")
    assert ours.feature_perturbation == ref.feature_perturbation == "tree_path_dependent"
    _close(ours.shap_values(X[:10]), ref.shap_values(X[:10]))
