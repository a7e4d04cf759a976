"""The CatBoost drop-in ``get_feature_importance`` against CatBoost's own method.

Oracle: ``model.get_feature_importance(...)`` of CatBoost 1.2.10, type by type, raw and
prettified, on small trained oblivious models (regression, binary Logloss, MultiClass,
MultiRMSE, categorical features: ``MODELS``) and non-symmetric ones (Depthwise, Lossguide, with
and without categorical features: the numbers of the model reloaded from its JSON export,
CatBoost's reference, given the freshly trained model object).

Tolerances: jaximp computes in float32 what CatBoost computes in float64, summed over <= 20
trees, so values agree to a few 1e-7 of their magnitude: ``rtol=1e-5, atol=1e-5 * magnitude``
(importances summing to 100 have magnitude 100: atol 1e-3 at most). ShapValues with
``model_output="Probability"`` for K > 1 divide by ``f(x) - f(b)`` per output while the
softmax moves with every output, which amplifies the float32 rounding of the raw predictions:
``atol=1e-4 * magnitude`` there (observed 5e-5 of 8).
"""

from __future__ import annotations

import functools

import catboost
import models
import numpy as np
import oracles
import pandas as pd
import pytest

import jaximp
from jaximp import get_feature_importance
from jaximp._frontends import dropin_cache as _dropin
from jaximp._rows.inputs import as_features
from jaximp._rows.pools import pool_rows

N_ROWS, N_REFERENCE = 12, 8


def _numeric(kind):
    def build():
        model, X, y, _ = models.train(kind)
        return model, X, y
    return build


def _named():
    """A regression model trained on a DataFrame with column names (interaction_indices by name)."""
    model, X, y, _ = models.train("regression")
    frame = pd.DataFrame(X, columns=[f"c{i}" for i in range(X.shape[1])])
    named = catboost.CatBoost(dict(loss_function="RMSE", depth=3, iterations=8, random_seed=0,
                                   verbose=0, thread_count=1, allow_writing_files=False))
    named.fit(frame, y)
    return named, frame, y


def _categorical(kind):
    """A model with one-hot and CTR splits on raw categorical columns (frames and Pools with
    cat_features, which jaximp reads through CatBoost's own leaf indices)."""
    def build():
        frame = models.make_frame(300, seed=0)
        y = models.make_target(frame, kind)
        model = catboost.CatBoost(dict(loss_function={"binary": "Logloss", "multiclass": "MultiClass"}[kind],
                                       iterations=8, depth=4, random_seed=0, verbose=0, thread_count=1,
                                       allow_writing_files=False, cat_features=models.CAT, one_hot_max_size=4,
                                       max_ctr_complexity=1))
        return model.fit(frame, y), frame, y
    return build


# (name, builder -> (model, X, y)): add Depthwise models here.
MODELS = [
    ("regression", _numeric("regression")),
    ("binary", _numeric("binary")),
    ("multiclass", _numeric("multiclass")),
    ("multiregression", _numeric("multiregression")),
    ("categorical", _categorical("binary")),
    ("categorical_multiclass", _categorical("multiclass")),
]
NAMES = [name for name, _ in MODELS]


def names(slow=()):
    """NAMES as parameters, those in ``slow`` marked slow (each model compiles its own kernels;
    the layouts those models share with the others are checked by default)."""
    return [pytest.param(name, marks=pytest.mark.slow) if name in slow else name for name in NAMES]


@functools.cache
def model_of(name):
    return dict(MODELS)[name]()


def pools(name):
    model, X, y = model_of(name)
    cats = models.CAT if isinstance(X, pd.DataFrame) and "c0" in X else None
    data = catboost.Pool(X[:N_ROWS], y[:N_ROWS], cat_features=cats)
    reference = catboost.Pool(X[100 : 100 + N_REFERENCE], cat_features=cats)
    return model, data, reference


def assert_close(got, expected, scale=1e-5):
    """CatBoost's layout and dtype (float64), values to ``rtol=1e-5, atol=scale * magnitude``."""
    got = np.asarray(got)
    assert got.shape == np.shape(expected)
    assert got.dtype == np.float64
    oracles.assert_close(got, expected, atol=scale)


def assert_frames_close(got, expected):
    assert list(got.columns) == list(expected.columns)
    assert len(got) == len(expected)
    for column in expected.columns:
        if expected[column].dtype.kind == "f":
            assert_close(got[column].to_numpy(), expected[column].to_numpy())
        else:
            assert got[column].tolist() == expected[column].tolist()


def both(model, **kwargs):
    return get_feature_importance(model, **kwargs), model.get_feature_importance(**kwargs)


# ------------------------------------------------------------------------------------------
# Type by type, against CatBoost


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("prettified", [False, True])
def test_prediction_values_change(name, prettified):
    model, data, _ = pools(name)
    for kwargs in (dict(), dict(type="PredictionValuesChange"), dict(data=data, type="PredictionValuesChange")):
        got, expected = both(model, prettified=prettified, **kwargs)
        if prettified:
            assert_frames_close(got, expected)
        else:
            assert_close(got, expected)
            assert got.sum() == pytest.approx(100.0, rel=1e-5)


@pytest.mark.parametrize("name", [n for n in NAMES if n != "multiregression"])
@pytest.mark.parametrize("prettified", [False, True])
def test_loss_function_change(name, prettified):
    model, data, _ = pools(name)
    got, expected = both(model, data=data, type="LossFunctionChange", prettified=prettified)
    (assert_frames_close if prettified else assert_close)(got, expected)


def test_loss_function_change_with_weights():
    model, X, y = model_of("regression")
    data = catboost.Pool(X[:N_ROWS], y[:N_ROWS], weight=np.linspace(0.5, 2.0, N_ROWS))
    assert_close(*both(model, data=data, type="LossFunctionChange"))


def test_loss_function_change_multiregression_where_catboost_refuses():
    model, data, _ = pools("multiregression")
    with pytest.raises(catboost.CatBoostError, match="Multi-dimensional"):
        model.get_feature_importance(data, type="LossFunctionChange")
    got = get_feature_importance(model, data, type="LossFunctionChange")
    ens = jaximp.from_catboost(model)
    expected = jaximp.loss_function_change(ens, data, data.get_label())
    np.testing.assert_array_equal(got, np.asarray(expected, np.float64))


@pytest.mark.parametrize("name, calc", [  # Exact and Approximate take Regular's layout: two models each by default
    (name, calc) if calc == "Regular" or name in ("regression", "multiclass") else
    pytest.param(name, calc, marks=pytest.mark.slow) for calc in ["Regular", "Exact", "Approximate"] for name in NAMES])
def test_shap_values(name, calc):
    model, data, _ = pools(name)
    got, expected = both(model, data=data, type="ShapValues", shap_calc_type=calc)
    assert_close(got, expected)
    k = model.get_scale_and_bias()[1]
    assert got.shape == ((N_ROWS, len(k), 7) if np.ndim(k) and len(k) > 1 else (N_ROWS, 7))


@pytest.mark.parametrize("name", NAMES)
def test_shap_values_prettified(name):
    model, data, _ = pools(name)
    got, expected = both(model, data=data, type="ShapValues", prettified=True)
    assert type(got) is type(expected)
    if isinstance(expected, pd.DataFrame):
        assert_frames_close(got, expected)
    else:
        assert_close(got, expected)


@pytest.mark.parametrize("name", names(slow=("multiregression", "categorical_multiclass")))
@pytest.mark.parametrize("output", ["Raw", "Probability", "LossFunction"])
def test_shap_values_reference_data(name, output):
    model, data, reference = pools(name)
    kwargs = dict(data=data, type="ShapValues", reference_data=reference, model_output=output)
    if output == "LossFunction" and "multi" in name:
        with pytest.raises(catboost.CatBoostError):  # CatBoost: internal error / bad_cast
            model.get_feature_importance(**kwargs)
        with pytest.raises(ValueError, match="one-output model"):
            get_feature_importance(model, **kwargs)
        return
    got, expected = both(model, **kwargs)
    multi_output = output == "Probability" and got.ndim == 3
    assert_close(got, expected, scale=1e-4 if multi_output else 1e-5)


INTERACTIONS_SLOW = ("binary", "multiregression", "categorical_multiclass")


@pytest.mark.parametrize("name", names(slow=INTERACTIONS_SLOW))
def test_shap_interaction_values(name):
    model, data, _ = pools(name)
    got, expected = both(model, data=data, type="ShapInteractionValues")
    assert_close(got, expected)
    bias = np.atleast_1d(model.get_scale_and_bias()[1]).astype(np.float32)
    bias = bias[0] if got.ndim == 3 else bias[None, :, None]  # CatBoost's bias row and column
    np.testing.assert_allclose(got[..., -1, :-1], np.broadcast_to(bias, got[..., -1, :-1].shape), rtol=1e-6)
    np.testing.assert_allclose(got[..., :-1, -1], np.broadcast_to(bias, got[..., :-1, -1].shape), rtol=1e-6)
    assert np.all(got[..., -1, -1] == 0)


@pytest.mark.parametrize("name", names(slow=INTERACTIONS_SLOW))
@pytest.mark.parametrize("pair", [(1, 3), (3, 1), (2, 2)])
def test_shap_interaction_values_pair(name, pair):
    model, data, _ = pools(name)
    assert_close(*both(model, data=data, type="ShapInteractionValues", interaction_indices=list(pair)))


def test_shap_interaction_values_pair_by_name():
    model, frame, _ = _named()
    data = catboost.Pool(frame[:N_ROWS])
    for pair in (["c1", "c2"], ["c2", "c2"]):
        got, expected = both(model, data=data, type="ShapInteractionValues", interaction_indices=pair)
        assert_close(got, expected)
    np.testing.assert_array_equal(
        get_feature_importance(model, data, "ShapInteractionValues", interaction_indices=["c1", "c2"]),
        get_feature_importance(model, data, "ShapInteractionValues", interaction_indices=[1, 2]))


@pytest.mark.parametrize("name", [n for n in NAMES if "multiclass" not in n])
@pytest.mark.parametrize("prettified", [False, True])
def test_interaction(name, prettified):
    model, _, _ = pools(name)
    got, expected = both(model, type="Interaction", prettified=prettified)
    if prettified:
        assert_frames_close(got, expected)
    else:
        assert_close(got, expected, scale=1e-6)  # scores <= 100: atol 1e-4


def test_interaction_multiclass_is_catboost_definition():
    """CatBoost's MultiClass Interaction is rounding noise; the drop-in computes the same definition
    (output_reduction="sum"), whose float32 noise differs: same layout, sorted, summing to 100."""
    model, _, _ = pools("multiclass")
    got = get_feature_importance(model, type="Interaction")
    ens = jaximp.from_catboost(model)
    matrix = np.asarray(jaximp.interaction(ens, output_reduction="sum"))
    assert got.shape[1] == 3 and np.all(got[:, 0] < got[:, 1])
    assert np.all(np.diff(got[:, 2]) <= 0)
    np.testing.assert_allclose(got[:, 2], matrix[got[:, 0].astype(int), got[:, 1].astype(int)], rtol=1e-6)
    assert got[:, 2].sum() == pytest.approx(100.0, rel=1e-4)


@pytest.mark.parametrize("name", ["regression", "binary"])
@pytest.mark.parametrize("prettified", [False, True])
def test_prediction_diff(name, prettified):
    model, X, _ = model_of(name)
    for rows in (X[:2], X[5:7], X[[3, 3]]):
        got, expected = both(model, data=catboost.Pool(rows), type="PredictionDiff", prettified=prettified)
        (assert_frames_close if prettified else assert_close)(got, expected)
    got, expected = both(model, data=X[10:12], type="PredictionDiff")  # a plain array, as CatBoost takes
    assert_close(got, expected)


def test_enum_types_and_fstr_type_alias():
    model, data, _ = pools("binary")
    reference = model.get_feature_importance(data, type="ShapValues")
    assert_close(get_feature_importance(model, data, catboost.EFstrType.ShapValues), reference)
    assert_close(get_feature_importance(model, data, fstr_type="ShapValues"), reference)
    assert_close(get_feature_importance(model, data, "ShapValues",
                                        shap_calc_type=catboost.EShapCalcType.Exact),
                 model.get_feature_importance(data, type="ShapValues", shap_calc_type="Exact"))


def test_model_file_and_ensemble(tmp_path):
    model, data, _ = pools("regression")
    expected = model.get_feature_importance(data, type="ShapValues")
    path = tmp_path / "model.cbm"
    model.save_model(str(path))
    assert_close(get_feature_importance(str(path), data, type="ShapValues"), expected)
    assert_close(get_feature_importance(jaximp.from_catboost(model), data, type="ShapValues"), expected)


def test_numpy_and_dataframe_data():
    model, X, _ = model_of("regression")
    expected = model.get_feature_importance(catboost.Pool(X[:N_ROWS]), type="ShapValues")
    assert_close(get_feature_importance(model, X[:N_ROWS], type="ShapValues"), expected)
    assert_close(get_feature_importance(model, pd.DataFrame(X[:N_ROWS]), type="ShapValues"), expected)


# ------------------------------------------------------------------------------------------
# Caching of the imported model


def test_cache_builds_once_and_rebuilds_after_refit(monkeypatch):
    calls = []
    real = _dropin.from_catboost
    monkeypatch.setattr(_dropin, "from_catboost", lambda m, **kw: calls.append(1) or real(m, **kw))
    model, X, y, _ = models.train("regression", iterations=3)
    model = model.copy()
    get_feature_importance(model)
    get_feature_importance(model, catboost.Pool(X[:3]), type="ShapValues")
    assert len(calls) == 1
    model.fit(X[:200], y[:200])  # same object, refitted on other rows: new leaves
    assert_close(get_feature_importance(model), model.get_feature_importance())
    assert len(calls) == 2
    model.set_scale_and_bias(2.0, 0.5)
    get_feature_importance(model)
    assert len(calls) == 3
    other = model.copy()
    get_feature_importance(other)
    assert len(calls) == 4
    key = id(other)
    del other
    import gc

    gc.collect()
    assert key not in _dropin._MODELS


# ------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(type="Nope"), ValueError, "get_feature_importance: type must be one of"),
    (dict(type="shapvalues"), ValueError, "type must be one of"),
    (dict(type="ShapValues"), ValueError, "data must be given for type='ShapValues'"),
    (dict(type="ShapInteractionValues"), ValueError, "data must be given"),
    (dict(type="LossFunctionChange"), ValueError, "data must be given"),
    (dict(type="PredictionDiff"), ValueError, "data must be given"),
    (dict(type="ShapValues", data="X", shap_mode="Fast"), ValueError, "shap_mode must be one of"),
    (dict(type="ShapValues", data="X", shap_calc_type="Fast"), ValueError, "shap_calc_type must be one of"),
    (dict(type="ShapValues", data="X", model_output="Margin"), ValueError, "model_output must be one of"),
    (dict(type="ShapValues", data="X", model_output="Probability"), ValueError, "model_output must be 'Raw'"),
    (dict(type="PredictionValuesChange", reference_data="X"), ValueError, "reference_data must be None"),
    (dict(type="ShapInteractionValues", data="X", reference_data="X"), ValueError, "reference_data must be None"),
    (dict(type="ShapValues", data="X", reference_data="X", shap_calc_type="Exact"), ValueError,
     "shap_calc_type must be 'Regular' with reference_data"),
    (dict(type="ShapInteractionValues", data="X", shap_calc_type="Exact"), ValueError,
     "shap_calc_type must be 'Regular'"),
    (dict(type="LossFunctionChange", data="X", shap_calc_type="Exact"), ValueError, "path-dependent"),
    (dict(type="Interaction", shap_calc_type="Exact"), ValueError, "uses no SHAP values"),
    (dict(type="ShapValues", data="X", interaction_indices=[0, 1]), ValueError, "interaction_indices must be None"),
    (dict(type="ShapInteractionValues", data="X", interaction_indices=[0]), ValueError, "two feature indices"),
    (dict(type="ShapInteractionValues", data="X", interaction_indices=[0, 6]), ValueError, r"indices in \[0, 6\)"),
    (dict(type="ShapInteractionValues", data="X", interaction_indices=[0, "zz"]), ValueError, "feature names"),
    (dict(type="LossFunctionChange", data="X"), ValueError, "catboost.Pool with labels"),
    (dict(type="LossFunctionChange", data="pool"), ValueError, "a Pool without labels"),
    (dict(type="ShapValues", data="X", reference_data="X", model_output="LossFunction"), ValueError,
     "catboost.Pool with labels"),
    (dict(type="PredictionDiff", data="X"), ValueError, "exactly 2 rows"),
    (dict(type="SageValues", data="X"), ValueError, "cannot be reproduced"),
    (dict(verbose=-1), ValueError, "verbose must be non-negative"),
    (dict(verbose="yes"), TypeError, "verbose must be a bool or an int"),
    (dict(prettified="yes"), TypeError, "prettified must be a bool"),
])
def test_errors(kwargs, error, match):
    model, X, _ = model_of("regression")
    rows = {"X": X[:5], "pool": catboost.Pool(X[:5])}
    kwargs = {k: rows.get(v, v) if isinstance(v, str) and k in ("data", "reference_data") else v
              for k, v in kwargs.items()}
    with pytest.raises(error, match=match):
        get_feature_importance(model, **kwargs)


def test_errors_model_and_unsupported():
    with pytest.raises(TypeError, match="model must be a fitted CatBoost model"):
        get_feature_importance(np.zeros(3))
    with pytest.raises(ValueError, match="not fitted|fitted"):
        get_feature_importance(catboost.CatBoostRegressor())
    with pytest.raises(ValueError, match="existing file"):
        get_feature_importance("/nonexistent/model.cbm")
    model, X, _ = model_of("multiclass")
    with pytest.raises(ValueError, match="one output"):
        get_feature_importance(model, X[:2], type="PredictionDiff")


def test_interaction_with_data_warns_like_catboost_notice():
    model, data, _ = pools("regression")
    with pytest.warns(UserWarning, match="data is not used"):
        got = get_feature_importance(model, data, type="Interaction")
    assert_close(got, model.get_feature_importance(type="Interaction"), scale=1e-6)


# Non-symmetric models: the numbers of the model reloaded from its JSON export ---------------------


@pytest.mark.slow  # by default: the drop-in on categorical Depthwise models (below)
def test_numeric_non_symmetric_models():
    """get_feature_importance of a freshly trained Depthwise model object: CatBoost's layouts, and
    the numbers of that model reloaded from its JSON export (CatBoost's trained-model walk for
    Interaction and its SHAP differ, see jaximp._importances.interaction_trees)."""
    X, y = models.make_data("regression", n=300, nan_fraction=0.05)
    trained_model = catboost.CatBoostRegressor(iterations=8, depth=5, grow_policy="Depthwise", random_seed=0,
                                               verbose=0, thread_count=1, allow_writing_files=False).fit(X, y)
    _, model, _ = models.json_reloaded(trained_model)
    data = catboost.Pool(X, y)
    for kind in ("LossFunctionChange", "PredictionValuesChange"):
        np.testing.assert_allclose(get_feature_importance(trained_model, data, type=kind),
                                   model.get_feature_importance(data, type=kind), rtol=1e-5, atol=1e-5)
        frame = get_feature_importance(trained_model, data, type=kind, prettified=True)
        want = model.get_feature_importance(data, type=kind, prettified=True)
        assert list(frame.columns) == list(want.columns) and list(frame["Feature Id"]) == list(want["Feature Id"])
    rows = get_feature_importance(trained_model, type="Interaction")
    want = model.get_feature_importance(type="Interaction")
    assert rows.shape == want.shape
    np.testing.assert_array_equal(rows[:, :2], want[:, :2])  # same pairs, same order (no ties here)
    oracles.assert_close(rows[:, 2], want[:, 2])
    frame = get_feature_importance(trained_model, type="Interaction", prettified=True)
    assert list(frame.columns) == list(model.get_feature_importance(type="Interaction", prettified=True).columns)
    pair = catboost.Pool(X[:2])
    oracles.assert_close(get_feature_importance(trained_model, pair, type="PredictionDiff"),
                         model.get_feature_importance(pair, type="PredictionDiff"))
    with pytest.raises(ValueError, match="method must be one of"):
        get_feature_importance(trained_model, data, type="ShapValues", shap_calc_type="Exact")


@pytest.mark.parametrize("name", ["depthwise_ctr", pytest.param("lossguide_ctr_complexity", marks=pytest.mark.slow)])
def test_categorical_non_symmetric_models(name):
    """get_feature_importance of the freshly trained model object gives the numbers of the model
    reloaded from its JSON export, CatBoost's layouts included."""
    fitted = models.catboost_categorical_trees(name)
    model, reloaded = fitted.trained, fitted.model
    frame, y = models.explained(models.CATEGORICAL_TREES[name][0])
    data = models.pool(frame, y)
    oracles.assert_close(get_feature_importance(model, data, type="LossFunctionChange"),
                         reloaded.get_feature_importance(data, type="LossFunctionChange"))
    rows = get_feature_importance(model, type="Interaction")
    want = reloaded.get_feature_importance(type="Interaction")
    assert rows.shape == want.shape
    np.testing.assert_array_equal(rows[:, :2], want[:, :2])  # same pairs, same order (no ties here)
    oracles.assert_close(rows[:, 2], want[:, 2])
    frame_out = get_feature_importance(model, data, type="LossFunctionChange", prettified=True)
    assert isinstance(frame_out, pd.DataFrame)
    assert list(frame_out.columns) == list(reloaded.get_feature_importance(data, type="LossFunctionChange",
                                                                           prettified=True).columns)


@pytest.mark.parametrize("name", ["depthwise_ctr", "lossguide_mixed"])
def test_a_categorical_pool_of_non_symmetric_models(name):
    """CatBoost evaluates the Pool's splits for jaximp (a probe model over every split, since a
    non-symmetric tree's leaf only tells the splits on its path), and the drop-in gives the
    JSON-reloaded model's numbers; interventional values equal jaximp's on the raw frames."""
    fitted = models.catboost_categorical_trees(name)
    model, reloaded, ens = fitted.trained, fitted.model, fitted.ens
    frame, y = models.explained(models.CATEGORICAL_TREES[name][0])
    data = models.pool(frame, y)
    for kind, kw in (("ShapValues", {}), ("ShapValues", dict(shap_calc_type="Approximate")),
                     ("PredictionValuesChange", {}), ("ShapInteractionValues", {})):
        oracles.assert_close(get_feature_importance(model, data, type=kind, **kw),
                             reloaded.get_feature_importance(data, type=kind, **kw))
    background = frame.iloc[::8]
    got = get_feature_importance(model, data, type="ShapValues", reference_data=models.pool(background))
    phi = np.asarray(jaximp.shap_values(ens, frame, method="interventional", background=background))
    np.testing.assert_array_equal(np.moveaxis(got, 1, 2)[..., :-1, :] if phi.ndim == 3 else got[:, :-1], phi)


def test_probe_bins_decide_every_node_as_the_featurizer():
    fitted = models.catboost_categorical_trees("lossguide_mixed")
    ens = fitted.ens
    frame, _ = models.explained("multiclass")
    probed = np.asarray(pool_rows(models.pool(frame), ens, "test", "pool"))
    featurized = np.asarray(as_features(frame, ens, "test"))
    j = np.asarray(ens.node_borders)
    real = np.isfinite(j)
    feature = np.asarray(ens.node_features)[real]
    np.testing.assert_array_equal(probed[:, feature] > j[real], featurized[:, feature] > j[real])
