"""Path-dependent SHAP (and CatBoost's Exact, and Saabas's approximation) against each library's
own numbers, for every layout and library.

Oracles: CatBoost's ``ShapValues`` (``shap_calc_type`` Regular, Exact, Approximate; for
non-symmetric trees on the model reloaded from its JSON export, CatBoost's reference), XGBoost's
``pred_contribs`` (``approx_contribs`` for Saabas), LightGBM's ``pred_contrib`` (a random
forest's divided by its iterations), shap's ``TreeExplainer(feature_perturbation=
"tree_path_dependent")`` for CatBoost's oblivious and scikit-learn's models; the expected value
each reports; additivity against CatBoost's raw prediction. (Brute-force Shapley values:
tests/test_shap_brute_force.py.)

Tolerances: jaximp builds float32 tables and sums them over <= 30 trees where the references use
float64 (or float32 in another order), so results agree to about 30 * 6e-8 of the output
magnitude: ``rtol=1e-5``, ``atol=1e-5 * max(1, magnitude)``.
"""

from __future__ import annotations

import dataclasses

import catboost
import jax.numpy as jnp
import models
import numpy as np
import pytest
import shap
from oracles import (
    assert_close,
    catboost_shap,
    lightgbm_contributions,
    raw_output,
    shap_layout,
    xgboost_contributions,
)

import jaximp
from jaximp import expected_value, shap_values

slow = pytest.mark.slow  # kinds of output whose numbers the default run already checks on another model
CALC_TYPE = {"path_dependent": "Regular", "exact": "Exact", "approximate": "Approximate"}


# CatBoost's oblivious models: every method of the drop-in -----------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Explained:
    """A model with the rows jaximp explains (``rows``) and the same rows for the reference (``data``)."""

    model: object
    ens: object
    rows: object
    data: object


def _oblivious(kind, depth):
    model, _, _, _ = models.train(kind, depth=depth, iterations=10 if depth < 7 else 4)
    X = models.wide_rows(kind)
    return Explained(model, jaximp.from_catboost(model), X, X)


def _oblivious_categorical(name):
    fitted = models.catboost_categorical(name)
    frame, y = models.explained(models.CATEGORICAL[name][0])
    return Explained(fitted.model, fitted.ens, frame, models.pool(frame, y))


OBLIVIOUS_DEFAULT = ("combinations_2", "combinations_4", "multiclass", "multiregression")  # categorical models:
# players of one and of several columns, one-hot and CTR splits, every output kind (every model's featurizer:
# tests/test_leaves.py)
OBLIVIOUS = [  # numeric: (kind, depth); categorical: a name of models.CATEGORICAL
    pytest.param(_oblivious, ("regression", 1), id="regression-1"),
    pytest.param(_oblivious, ("regression", 6), id="regression-6"),
    pytest.param(_oblivious, ("binary", 3), id="binary-3"),
    pytest.param(_oblivious, ("multiclass", 4), id="multiclass-4", marks=slow),
    pytest.param(_oblivious, ("multiregression", 2), id="multiregression-2"),
    pytest.param(_oblivious, ("binary", 7), id="binary-7", marks=slow),
    pytest.param(_oblivious, ("multiclass", 8), id="multiclass-8"),
] + [pytest.param(_oblivious_categorical, (name,), id=f"categorical-{name}",
                  marks=() if name in OBLIVIOUS_DEFAULT else slow) for name in models.CATEGORICAL]


@pytest.mark.parametrize("build, args", OBLIVIOUS)
def test_oblivious_models_against_catboost(build, args):
    """Every method's values and expected value equal CatBoost's, and add up to its prediction."""
    case = build(*args)
    prediction = raw_output(case.model, case.data).reshape(len(case.rows), -1)
    for method, calc_type in CALC_TYPE.items():
        values, expected = catboost_shap(case.model, case.data, shap_calc_type=calc_type)
        got = np.asarray(shap_values(case.ens, case.rows, method=method)).reshape(values.shape)
        assert_close(got, values)
        assert_close(np.reshape(expected_value(case.ens, method=method), -1), expected)
        assert_close(got.sum(1) + expected, prediction)


@pytest.mark.parametrize("kind", [pytest.param("regression", marks=slow), "multiclass"])
def test_oblivious_models_against_shap(kind):
    model, _, _, _ = models.train(kind, depth=6, iterations=8)
    ens = jaximp.from_catboost(model)
    X = models.wide_rows(kind)[:40]
    explainer = shap.TreeExplainer(model)  # tree_path_dependent
    expected = np.asarray(explainer.shap_values(X))
    got = shap_values(ens, X)
    assert_close(got, expected.reshape(got.shape))
    assert_close(expected_value(ens), np.reshape(explainer.expected_value, -1).squeeze())


@pytest.mark.parametrize("kind", [pytest.param("regression", marks=slow), pytest.param("multiregression", marks=slow),
                                  "multiclass"])
def test_summed_models_of_mixed_depth(kind):
    model, X_train, y = models.summed(kind, depths=(2, 5, 3))
    ens = jaximp.from_catboost(model)
    X = models.wide_rows(kind)
    for method, calc_type in CALC_TYPE.items():
        values, expected = catboost_shap(model, X, shap_calc_type=calc_type)
        assert_close(shap_values(ens, X, method=method).reshape(values.shape), values)
        assert_close(np.reshape(expected_value(ens, method=method), -1), expected)
    background = X_train[:30]
    reference = catboost.Pool(background, label=y[:30])
    values, expected = catboost_shap(model, X[:20], label=y[:20], reference_data=reference)
    got = shap_values(ens, X[:20], method="interventional", background=background)
    assert_close(got.reshape(values.shape), values)


def test_sample_weights_and_scale():
    model, X, _, _ = models.train("regression", depth=4, weighted=True)
    ens = jaximp.from_catboost(model)
    values, expected = catboost_shap(model, X[:50])
    assert_close(shap_values(ens, X[:50]), values[..., 0])
    # CatBoost refuses a non-identity scale; the values scale linearly and the bias adds.
    scaled = dataclasses.replace(ens, scale=jnp.asarray(0.5, jnp.float32), bias=ens.bias + 2.0)
    for method in ("path_dependent", "approximate"):
        assert_close(shap_values(scaled, X[:50], method=method), 0.5 * shap_values(ens, X[:50], method=method))
        base = expected_value(ens, method=method)
        assert_close(expected_value(scaled, method=method), 0.5 * (base - ens.bias[0]) + ens.bias[0] + 2.0)
        total = shap_values(scaled, X[:50], method=method).sum(1) + expected_value(scaled, method=method)
        assert_close(total, scaled.predict(X[:50]))


@pytest.mark.parametrize("nan_mode", ["Min", pytest.param("Max", marks=slow)])  # both modes' leaves: test_leaves.py
def test_nan_rows_and_named_frames(nan_mode):
    import pandas as pd

    model, X_train, y, _ = models.train("regression", depth=4, nan_mode=nan_mode, nan_fraction=0.2)
    ens = jaximp.from_catboost(model)
    X, _ = models.make_data("regression", n=40, seed=5, nan_fraction=0.3)
    values, expected = catboost_shap(model, X)
    assert_close(shap_values(ens, X), values[..., 0])
    values, _ = catboost_shap(model, X, label=y[:40], reference_data=catboost.Pool(X_train[:30], label=y[:30]))
    assert_close(shap_values(ens, X, method="interventional", background=X_train[:30]), values[..., 0])
    # DataFrames: a background with shuffled columns of a model with names is matched by name.
    names = [f"f{i}" for i in range(6)]
    named = catboost.CatBoostRegressor(iterations=5, depth=3, verbose=0, thread_count=1, allow_writing_files=False)
    named.fit(pd.DataFrame(X_train, columns=names), y)
    ens = jaximp.from_catboost(named)
    frame = pd.DataFrame(X_train[:30], columns=names)[names[::-1]]
    assert_close(shap_values(ens, pd.DataFrame(X, columns=names), method="interventional", background=frame),
                 shap_values(ens, X, method="interventional", background=X_train[:30]))


# General trees of every library: the library's own TreeSHAP -----------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Reference:
    """An ensemble, the rows it explains, the library's values ``shap(method) -> (f64[N, F, K],
    f64[K])`` and, for CatBoost, its raw prediction ``f64[N, K]`` (additivity)."""

    ens: object
    rows: object
    shap: object
    raw: object = None


def _catboost_trees(index):
    fitted = models.catboost_trees(*models.CATBOOST_TREES[index])
    x = models.explained_rows(fitted.X)
    return Reference(fitted.ens, x, lambda method: catboost_shap(fitted.model, x, shap_calc_type=CALC_TYPE[method]),
                     raw_output(fitted.model, x).reshape(len(x), -1))


def _catboost_categorical_trees(name):
    fitted = models.catboost_categorical_trees(name)
    frame, y = models.explained(models.CATEGORICAL_TREES[name][0])
    data = models.pool(frame, y)
    return Reference(fitted.ens, frame,
                     lambda method: catboost_shap(fitted.model, data, shap_calc_type=CALC_TYPE[method]),
                     raw_output(fitted.model, models.pool(frame)).reshape(len(frame), -1))


def _xgboost_contributions(booster, rows, method):
    out = xgboost_contributions(booster, rows, pred_contribs=True, approx_contribs=method == "approximate")
    return out[:, :-1], out[0, -1]  # [N, F, K], [K]


def _xgboost(name):
    fitted = models.xgboost_model(name)
    x = models.explained_rows(fitted.X)
    return Reference(fitted.ens, x, lambda method: _xgboost_contributions(fitted.model, x, method))


def _lightgbm(name):
    fitted = models.lightgbm_model(name)
    x = models.lightgbm_rows(fitted.model, fitted.X)
    return Reference(fitted.ens, x, lambda method: lightgbm_contributions(fitted.model, x))


def _library_categorical(case):
    fitted = models.library_categorical(case)
    rows = models.library_categorical_rows(case)
    if case.startswith("xgboost"):
        return Reference(fitted.ens, rows, lambda method: _xgboost_contributions(fitted.model, rows, method))
    return Reference(fitted.ens, rows, lambda method: lightgbm_contributions(fitted.model, rows))


def _sklearn(name):
    """shap's TreeExplainer, where it is right: it refuses multiclass GradientBoosting and sums a
    multiclass HistGradientBoosting's classes into one output (brute force there instead)."""
    fitted = models.sklearn_model(name)
    x = models.explained_rows(fitted.X, 40)

    def reference(method):
        explainer = shap.TreeExplainer(fitted.model, feature_perturbation="tree_path_dependent")
        return shap_layout(explainer.shap_values(x), explainer.expected_value, fitted.ens.n_outputs)

    return Reference(fitted.ens, x, reference)


CATBOOST_TREES_DEFAULT = {0: "approximate", 1: "path_dependent", 2: "path_dependent", 3: "approximate",
                          4: "approximate", 5: "path_dependent"}  # the method run by default, the other with -m slow


def _case(build, arg, method, default, name):
    return pytest.param(build, arg, method, id=f"{name}-{method}", marks=() if default else slow)


GENERAL_TREES = (
    [_case(_catboost_trees, i, method, CATBOOST_TREES_DEFAULT[i] == method, f"catboost-trees-case{i}")
     for method in ("path_dependent", "approximate") for i in range(len(models.CATBOOST_TREES))]
    + [_case(_catboost_categorical_trees, name, method, name in ("depthwise_ctr", "lossguide_mixed"),
             f"catboost-categorical-{name}")
       for name in models.CATEGORICAL_TREES for method in ("path_dependent", "approximate")]
    + [_case(_xgboost, name, "path_dependent", name in ("squarederror", "softprob"), f"xgboost-{name}")
       for name in models.XGBOOST]  # every objective of XGBOOST with -m slow (each model costs seconds of compilation)
    + [_case(_xgboost, name, "approximate", name == "softprob", f"xgboost-{name}") for name in models.XGBOOST]
    + [_case(_library_categorical, case, "path_dependent", case != "xgboost-reg", f"{case.split('-')[0]}-categorical-"
             f"{case.split('-')[1]}") for case in ("xgboost-reg", "xgboost-multi", "lightgbm-reg")]
    + [_case(_library_categorical, "xgboost-multi", "approximate", True, "xgboost-categorical-multi")]
    + [_case(_lightgbm, name, "path_dependent", name in ("regression-none", "multiclass"), f"lightgbm-{name}")
       for name in ("regression-none", "multiclass", "regression", "binary", "rf")]
    + [_case(_sklearn, name, "path_dependent", name == "rf_clf", f"sklearn-{name}")
       for name in ("rf_clf", "dt_reg", "dt_clf", "rf_reg", "et_reg2", "et_clf", "gb_reg", "gb_bin", "hgb_reg",
                    "hgb_bin")]
)


@pytest.mark.parametrize("build, arg, method", GENERAL_TREES)
def test_general_trees_against_the_library(build, arg, method):
    """The values (NaN and unseen categories in the rows) and the expected value equal the
    library's; CatBoost's add up to its prediction."""
    case = build(arg)
    values, expected = case.shap(method)
    got = shap_values(case.ens, case.rows, method=method)
    n_outputs = case.ens.n_outputs
    assert got.shape == (len(case.rows), case.ens.n_features) + ((n_outputs,) if n_outputs > 1 else ())
    assert_close(np.reshape(got, values.shape), values)
    base = np.reshape(expected_value(case.ens, method=method), -1)
    assert_close(base, expected)
    if case.raw is not None:
        for value in (base, expected):  # jaximp's expected value, and CatBoost's
            assert_close(np.reshape(got, values.shape).sum(1) + value, case.raw)


def test_oblivious_tables_are_kept_per_model():
    """A model's tables built from its own leaf weights are kept for its next call (the same
    arrays); tables of a background or of weights counted on the explained rows are not."""
    from jaximp._models.cache import model_cache

    def kept(ens):
        return {how: v for how, v in model_cache().entries(ens).items() if how[0][0] == "tables"}

    model, X, _, _ = models.train("regression", depth=6, iterations=10)
    ens = jaximp.from_catboost(model)
    first = shap_values(ens, X[:20])
    (how, tables), = kept(ens).items()
    np.testing.assert_array_equal(shap_values(ens, X[:20]), first)
    assert kept(ens)[how] is tables
    shap_values(ens, X[:20], method="interventional", background=X[:30])
    assert kept(ens) == {how: tables}
    counted = dataclasses.replace(ens, leaf_weights_known=False)
    shap_values(counted, X[:20])
    assert kept(counted) == {}
