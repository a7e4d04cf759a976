"""Rows as users really pass them, to every public function of rows: the reference library's
numbers or a clear ``ValueError``/``TypeError``, within a time and memory limit.

Regression tests: one row given 1-D (shap's ``TreeExplainer`` layout, checked against shap
itself), duplicated column names, the float64 contract under ``jax_enable_x64``, the advice of
loss-dependent errors for models of every library, subnormal values (which XLA on CPU flushes
to zero inside kernels), values that are not real numbers. Property-based tests (hypothesis):
random rows of real models of CatBoost (oblivious and Depthwise), XGBoost and LightGBM, with
NaN, +-inf, huge, subnormal and border values, in every container (float32/float64/float16
NumPy, JAX, lists, pandas and polars frames with reordered, extra, duplicated and mistyped
columns), and arrays of every rank and size.

Oracles: the libraries' own raw predictions, leaf indices and SHAP values (CatBoost
``predict(prediction_type="RawFormulaVal")``, ``calc_leaf_indexes``, ``ShapValues``; XGBoost
``output_margin``, ``pred_leaf``, ``pred_contribs``; LightGBM ``raw_score``, ``pred_leaf``,
``pred_contrib``) on the same values in the model's column order; shap's ``TreeExplainer`` for
the 1-D layout; contracts between jaximp's functions (interaction values sum to SHAP values,
``shap_importance`` is the mean ``|SHAP|``, an ``Explanation`` holds the SHAP values). Where the
library refuses the values itself (XGBoost refuses infinities), jaximp's numbers are checked by
the contracts only. Tolerances: float32 sums against the libraries' float64, ``rtol=1e-5``,
``atol=1e-4``; leaf indices exact.

The number of examples is ``JAXIMP_HYPOTHESIS_EXAMPLES`` (default 25); ``-m slow`` runs 200.
"""

from __future__ import annotations

import warnings

import catboost
import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from hostile import EXAMPLES, assert_clear_refusal, outcome
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from models import (
    ROWS_LIBRARIES,
    ROWS_NAMES,
    catboost_categorical,
    library_categorical,
    library_categorical_rows,
    make_data,
    rows_named,
    rows_zero_borders,
    sklearn_model,
    xgboost_model,
)

import jaximp

RTOL, ATOL = 1e-5, 1e-4
HOSTILE = (np.nan, np.inf, -np.inf, 1e38, -1e38, float(np.finfo(np.float32).max), 1e300, -1e300, 1e-40, -1e-40,
           1e-45, -1e-45, 1e-310, -1e-310, 0.0, -0.0, 2.0**24 + 1, -(2.0**31))
slow = pytest.mark.slow


def cases(names, default):
    """``names`` as parameters, those not in ``default`` marked slow (the default run stays cheap:
    each model compiles its own programs)."""
    return [name if name in default else pytest.param(name, marks=slow) for name in names]


def hypothesis_settings(examples: int = EXAMPLES):
    return settings(max_examples=examples, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# References: the libraries on float64 rows in the model's column order ------------------------------------------------


def _dmatrix(M):
    import xgboost as xgb

    return xgb.DMatrix(pd.DataFrame(M, columns=list(ROWS_NAMES)), missing=np.nan)


def reference_predict(library: str, fitted, M: np.ndarray) -> np.ndarray:
    """The library's raw prediction ``[n]`` or ``[n, K]``."""
    if library.startswith("catboost"):
        return fitted.model.predict(M, prediction_type="RawFormulaVal")
    if library == "xgboost":
        return fitted.model.predict(_dmatrix(M), output_margin=True)
    return fitted.model.predict(M, raw_score=True)


def reference_leaves(library: str, fitted, M: np.ndarray) -> np.ndarray:
    """The library's leaf index of every row in every tree ``[n, T]``."""
    if library.startswith("catboost"):
        return fitted.model.calc_leaf_indexes(M)
    if library == "xgboost":
        return fitted.model.predict(_dmatrix(M), pred_leaf=True)
    return fitted.model.predict(M, pred_leaf=True)


def reference_shap(library: str, fitted, M: np.ndarray) -> np.ndarray:
    """The library's (path-dependent) SHAP values ``[n, F]`` or ``[n, F, K]``."""
    if library.startswith("catboost"):
        values = fitted.model.get_feature_importance(catboost.Pool(M), type="ShapValues")
    elif library == "xgboost":
        values = fitted.model.predict(_dmatrix(M), pred_contribs=True)
    else:
        values = fitted.model.predict(M, pred_contrib=True)
    return values[:, :-1] if values.ndim == 2 else values[:, :, :-1].transpose(0, 2, 1)


def library_says(fn, *args):
    """``("value", result)`` or ``("refused", error)``: what the library does with the rows."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return "value", np.asarray(fn(*args), np.float64)
    except Exception as e:  # noqa: BLE001 - each library refuses with its own error type
        return "refused", e


def assert_reference_or_contract(kind: str, got, library_kind: str, reference, exact: bool = False):
    """jaximp's value equals the library's, or (where the library refuses the rows) is finite."""
    assert kind == "value", f"{type(got).__name__}: {got}"
    got = np.asarray(got)
    if library_kind == "refused":
        assert np.all(np.isfinite(got))
    elif exact:
        np.testing.assert_array_equal(got, reference)
    else:
        np.testing.assert_allclose(got, reference, rtol=RTOL, atol=ATOL)


@pytest.fixture(scope="module")
def named(request):
    """``(library, Fitted)`` of a model trained on named columns, its programs compiled (so that
    the bounded calls below do not compile)."""
    fitted = rows_named(request.param)
    ens, X = fitted.ens, fitted.X.to_numpy()[:3]
    for fn in (jaximp.predict, jaximp.leaf_indices, jaximp.shap_values, jaximp.shap_interaction_values,
               jaximp.shap_importance):
        fn(ens, X)
        fn(ens, jnp.asarray(X))
    return request.param, fitted


# One row given 1-D ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["rf_reg", "rf_clf", pytest.param("gb_bin", marks=slow)])
def test_one_row_has_shaps_layout(name):
    """shap's TreeExplainer takes a 1-D row and drops the row axis; so does jaximp, with shap's
    numbers (scikit-learn models, which shap explains with its own tree algorithm)."""
    import shap

    fitted = sklearn_model(name)
    X = np.nan_to_num(fitted.X[:5]).astype(np.float64)  # shap's sklearn path takes no NaN for GradientBoosting
    explainer = shap.TreeExplainer(fitted.model)
    for row in X[:2]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs, theirs_inter = explainer.shap_values(row), explainer.shap_interaction_values(row)
        ours, ours_inter = jaximp.shap_values(fitted.ens, row), jaximp.shap_interaction_values(fitted.ens, row)
        assert ours.shape == np.shape(theirs) and ours_inter.shape == np.shape(theirs_inter)
        np.testing.assert_allclose(ours, theirs, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(ours_inter, theirs_inter, rtol=RTOL, atol=ATOL)
        explanation = jaximp.Explainer(fitted.ens)(row)
        assert explanation.values.shape == ours.shape and explanation.data.shape == (fitted.ens.n_features,)
        assert np.shape(explanation.base_values) == np.shape(jaximp.expected_value(fitted.ens))


def _row_forms(frame: pd.DataFrame, i: int) -> dict:
    values = frame.to_numpy()[i]
    forms = {"series": frame.iloc[i]}
    if all(pd.api.types.is_numeric_dtype(d) for d in frame.dtypes):
        forms.update(array=values, float32=values.astype(np.float32), list=values.tolist(),
                     tuple=tuple(values.tolist()), jax=jnp.asarray(values, jnp.float32))
    else:  # raw categorical values: a row of mixed types
        forms.update(object_array=values, list=values.tolist())
    return forms


ONE_ROW_MODELS = [*ROWS_LIBRARIES, "catboost-categorical", "sklearn-categorical"]


def _one_row_model(name):
    """``(ens, a DataFrame of 4 rows)`` of a model of ONE_ROW_MODELS (or ``lightgbm-categorical``)."""
    if name == "catboost-categorical":
        fitted = catboost_categorical("multiclass")
        return fitted.ens, fitted.X.iloc[:4].reset_index(drop=True)
    if name in ("sklearn-categorical", "lightgbm-categorical"):
        case = {"sklearn-categorical": "sklearn-reg", "lightgbm-categorical": "lightgbm-reg"}[name]
        return library_categorical(case).ens, library_categorical_rows(case).iloc[:4]
    fitted = rows_named(name)
    return fitted.ens, fitted.X.iloc[:4]


@pytest.mark.parametrize("name", cases(ONE_ROW_MODELS, ("catboost", "lightgbm", "catboost-categorical")))
def test_one_row_given_1d_gives_the_row_of_the_2d_result(name):
    """Every function of rows, every 1-D form (array, list, tuple, JAX array, pandas Series):
    the 2-D result's row, without the row axis; a JAX row gives JAX results."""
    ens, frame = _one_row_model(name)
    explainer = jaximp.Explainer(ens)
    functions = {
        "predict": lambda X: jaximp.predict(ens, X),
        "ens.predict": lambda X: ens.predict(X),
        "leaf_indices": lambda X: jaximp.leaf_indices(ens, X),
        "shap_values": lambda X: jaximp.shap_values(ens, X),
        "shap_interaction_values": lambda X: jaximp.shap_interaction_values(ens, X),
        "Explainer.shap_values": lambda X: explainer.shap_values(X),
        "Explainer": lambda X: explainer(X).values,
    }
    whole = {fn_name: np.asarray(fn(frame)) for fn_name, fn in functions.items()}
    outputs = () if ens.n_outputs == 1 else (ens.n_outputs,)
    phi = (ens.n_features, *outputs)
    layouts = {"predict": outputs, "ens.predict": outputs, "leaf_indices": (ens.n_trees,), "shap_values": phi,
               "shap_interaction_values": (ens.n_features, *phi), "Explainer.shap_values": phi, "Explainer": phi}
    for i in (2,):
        for form, row in _row_forms(frame, i).items():
            for fn_name, fn in functions.items():
                got = fn(row)
                assert np.shape(got) == layouts[fn_name], (form, fn_name)
                np.testing.assert_allclose(np.asarray(got), whole[fn_name][i], rtol=1e-6, atol=1e-6,
                                           err_msg=f"{form} {fn_name}")
                if form == "jax" and fn_name != "Explainer":
                    assert isinstance(got, jax.Array), (form, fn_name)
    explanation = explainer(frame.iloc[0])
    assert explanation.base_values.shape == np.shape(explainer.expected_value)
    assert explanation.data.shape == (ens.n_features,)
    # reductions take one row as one row
    np.testing.assert_allclose(jaximp.shap_importance(ens, frame.iloc[0]), np.abs(whole["shap_values"][0]),
                               rtol=1e-6, atol=1e-6)


def test_one_row_refusals_say_what_a_1d_array_is():
    fitted = rows_named("catboost")
    ens, X = fitted.ens, fitted.X.to_numpy()
    for fn in (jaximp.predict, jaximp.leaf_indices, jaximp.shap_values, jaximp.shap_interaction_values):
        with pytest.raises(ValueError, match=r"must have 6 columns.*a 1-D X of 5 values, which is one row.*"
                                             r"reshape\(-1, 1\)"):
            fn(ens, X[0, :5])
        with pytest.raises(ValueError, match=r"X must have rank 2"):
            fn(ens, X[None, :3])
        with pytest.raises(ValueError, match=r"X must have rank 2"):
            fn(ens, np.array(1.0, np.float32))
    with pytest.raises(ValueError, match="X must have rank 2"):  # functions of targets take [N, F] rows
        jaximp.permutation_importance(ens, X[0], fitted.y[:1])


def test_rows_vmapped_one_at_a_time():
    fitted = rows_named("xgboost")
    X = jnp.asarray(fitted.X.to_numpy()[:4], jnp.float32)
    np.testing.assert_allclose(jax.vmap(lambda row: jaximp.predict(fitted.ens, row))(X), jaximp.predict(fitted.ens, X),
                               rtol=1e-6, atol=1e-6)


# Duplicated columns -----------------------------------------------------------------------------------------------


def _duplicated(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """``frame`` with a second column named ``column``, holding other values (the first one is
    not the one a user may mean)."""
    copy = pd.DataFrame({column: frame[column].to_numpy()[::-1]}, index=frame.index)
    return pd.concat([frame, copy], axis=1)


@pytest.mark.parametrize("name", cases([*ROWS_LIBRARIES, "catboost-categorical", "lightgbm-categorical"],
                                       ("catboost", "xgboost", "catboost-categorical", "lightgbm-categorical")))
def test_duplicated_columns_are_refused_by_name(name):
    ens, frame = _one_row_model(name)
    column = ens.feature_names[1]
    bad = _duplicated(frame, column)
    calls = {
        "predict": lambda: jaximp.predict(ens, bad),
        "leaf_indices": lambda: jaximp.leaf_indices(ens, bad),
        "shap_values": lambda: jaximp.shap_values(ens, bad),
        "shap_importance": lambda: jaximp.shap_importance(ens, bad),
        "shap_interaction_values": lambda: jaximp.shap_interaction_values(ens, bad),
        "Explainer": lambda: jaximp.Explainer(ens)(bad),
        "expected_value": lambda: jaximp.expected_value(ens, method="interventional", background=bad),
    }
    for fn_name, call in calls.items():
        kind, error = outcome(call)
        assert kind == "refused", (fn_name, error)
        assert_clear_refusal(error, column, "more than once")
        assert str(error).startswith(f"{fn_name}: "), error
    # a duplicated column the model does not read is no ambiguity
    extra = pd.concat([frame, frame[[column]].rename(columns={column: "unused"})] * 1, axis=1)
    extra = pd.concat([extra, extra[["unused"]]], axis=1)
    np.testing.assert_allclose(jaximp.predict(ens, extra), jaximp.predict(ens, frame))


def test_duplicated_columns_with_targets():
    fitted = rows_named("catboost")
    ens, frame, y = fitted.ens, fitted.X.iloc[:50], fitted.y[:50]
    bad = _duplicated(frame, "age")
    for call in (lambda: jaximp.permutation_importance(ens, bad, y, n_repeats=1),
                 lambda: jaximp.loss_function_change(ens, bad, y)):
        kind, error = outcome(call)
        assert kind == "refused"
        assert_clear_refusal(error, "'age'", "more than once")


# The float64 contract ---------------------------------------------------------------------------------------------


@pytest.fixture
def x64():
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", previous)


def _as64(ens):
    return jax.tree_util.tree_map(
        lambda a: jnp.asarray(a, jnp.float64) if jnp.issubdtype(jnp.asarray(a).dtype, jnp.floating) else a, ens)


def _rows_functions(ens, X, y, tmp_path):
    """Every public function of rows, on ``X`` (and ``y``): name -> its float result."""
    frame = pd.DataFrame(np.asarray(X), columns=list(ens.feature_names))
    frame.to_parquet(tmp_path / "rows.parquet")
    explainer = jaximp.Explainer(ens)
    return {
        "predict": lambda: jaximp.predict(ens, X),
        "shap_values": lambda: jaximp.shap_values(ens, X),
        "shap_interaction_values": lambda: jaximp.shap_interaction_values(ens, X[:10]),
        "shap_importance": lambda: jaximp.shap_importance(ens, X),
        "shap_importance interventional": lambda: jaximp.shap_importance(ens, X, method="interventional",
                                                                         background=X[:20]),
        "shap_interaction_importance": lambda: jaximp.shap_interaction_importance(ens, X[:10]),
        "loss_function_change": lambda: jaximp.loss_function_change(ens, X, y),
        "prediction_values_change": lambda: jaximp.prediction_values_change(ens, X),
        "Explainer.shap_values": lambda: explainer.shap_values(X),
        "Explainer": lambda: explainer(X).values,
        "explain_files": lambda: jaximp.explain_files(ens, tmp_path / "rows.parquet", progress=False),
    }


@pytest.mark.parametrize("name, rows_on", [("catboost", ("host", "device")), ("lightgbm", ("host",)),
                                           pytest.param("lightgbm", ("device",), marks=slow)])
def test_results_follow_the_models_dtype_under_x64(name, rows_on, x64, tmp_path):
    """Under ``jax_enable_x64`` a float64 model gives float64 results from every function of
    rows (host and device rows), equal to the float32 model's to float32 rounding; a float32
    model gives float32 (permutation importance: float64 host arrays, as documented)."""
    fitted = rows_named(name)
    X, y = fitted.X.to_numpy()[:60].astype(np.float32), fitted.y[:60]
    wide = _as64(fitted.ens)
    narrow = {key: fn() for key, fn in _rows_functions(fitted.ens, X, y, tmp_path).items()}
    for rows in [{"host": X, "device": jnp.asarray(X)}[where] for where in rows_on]:
        for key, fn in _rows_functions(wide, rows, y, tmp_path).items():
            got = fn()
            assert got.dtype == np.float64 and narrow[key].dtype == np.float32, (key, got.dtype, narrow[key].dtype)
            on_device = isinstance(rows, jax.Array) and key not in ("Explainer", "explain_files")
            assert isinstance(got, jax.Array) == on_device, key
            np.testing.assert_allclose(np.asarray(got), narrow[key], rtol=1e-4, atol=1e-4, err_msg=key)
    permutation = jaximp.permutation_importance(wide, X, y, n_repeats=2, random_state=0)
    assert permutation.importances.dtype == np.float64


def test_float32_results_without_x64():
    fitted = rows_named("catboost")
    X, y = fitted.X.iloc[:50], fitted.y[:50]
    assert jaximp.shap_importance(fitted.ens, X).dtype == np.float32
    assert jaximp.loss_function_change(fitted.ens, X, y).dtype == np.float32
    assert jaximp.shap_interaction_importance(fitted.ens, X).dtype == np.float32


# Advice of the loss-dependent errors --------------------------------------------------------------------------------


def test_a_classifier_without_a_loss_asks_for_scoring():
    fitted = sklearn_model("rf_clf")
    with pytest.raises(ValueError) as error:
        jaximp.permutation_importance(fitted.ens, fitted.X, fitted.y)
    assert_clear_refusal(error.value, "scoring=", "'accuracy'")
    assert "from_catboost" not in str(error.value)
    result = jaximp.permutation_importance(fitted.ens, fitted.X, fitted.y, scoring="accuracy", n_repeats=2,
                                           random_state=0)
    assert result.importances.shape == (fitted.ens.n_features, 2)
    with pytest.raises(ValueError) as error:
        jaximp.loss_function_change(fitted.ens, fitted.X, fitted.y)
    assert_clear_refusal(error.value, "LossFunctionChange", "permutation_importance(ens, X, y, scoring=")


def test_a_model_with_an_unknown_loss_takes_a_scoring_function():
    """XGBoost count:poisson: its raw output is a log mean, which jaximp does not map to a loss;
    a scoring function works, a default or a named scorer asks for one."""
    fitted = xgboost_model("poisson")
    ens, X, y = fitted.ens, fitted.X, fitted.y
    for call, words in ((lambda: jaximp.permutation_importance(ens, X, y), ("scoring=", "function")),
                        (lambda: jaximp.permutation_importance(ens, X, y, scoring="r2"), ("'r2'", "function")),
                        (lambda: jaximp.loss_function_change(ens, X, y), ("permutation_importance",))):
        kind, error = outcome(call)
        assert kind == "refused"
        assert_clear_refusal(error, *words)

    def deviance(y, raw, w):
        mean = jnp.exp(raw)
        return -jnp.sum(w * (mean - y * raw)) / jnp.sum(w)

    result = jaximp.permutation_importance(ens, X, y, scoring=deviance, n_repeats=3, random_state=0)
    assert np.all(np.isfinite(result.importances)) and result.importances_mean.max() > 0


def test_an_unsupported_catboost_loss_names_the_alternatives():
    X, y = make_data("regression", n=200)
    model = catboost.CatBoost(dict(loss_function="Quantile:alpha=0.8", iterations=3, depth=2, verbose=0,
                                   thread_count=1, allow_writing_files=False)).fit(X, y)
    ens = jaximp.from_catboost(model)
    with pytest.raises(ValueError) as error:
        jaximp.permutation_importance(ens, X, y)
    assert_clear_refusal(error.value, "scoring=", "'neg_mean_absolute_error'", "Quantile")
    with pytest.raises(ValueError) as error:
        jaximp.loss_function_change(ens, X, y)
    assert_clear_refusal(error.value, "loss_function must be one of", "permutation_importance(ens, X, y, scoring=")


# Values that are not what they seem -----------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["numpy", "jax", "frame", "categorical"])
def test_subnormal_values_take_the_branch_the_library_takes(form):
    """XLA on CPU flushes subnormal floats to zero inside a kernel: without care, ``1e-40`` would
    take the branch of 0 at CatBoost's border 0 (``x > 0``)."""
    fitted = rows_zero_borders("catboost")
    rows = np.array([[1e-40, 0.5], [-1e-40, 0.5], [0.0, 0.5], [1e-45, 0.5], [-1e-45, 0.5], [1e-38, 0.5],
                     [-1e-38, 0.5], [-0.0, 0.5]], np.float32)
    keep = rows.copy()
    expected = fitted.model.predict(rows, prediction_type="RawFormulaVal")
    assert len(np.unique(np.round(expected, 4))) == 2  # both branches are taken
    given_rows = {"numpy": rows, "jax": jnp.asarray(rows), "frame": pd.DataFrame(rows, columns=["0", "1"])}.get(form)
    if form == "categorical":  # the float columns of a model with categorical features
        fitted = catboost_categorical("one_hot")
        given_rows = fitted.X.iloc[:8].copy()
        column = given_rows.columns[np.flatnonzero(given_rows.dtypes == np.float32)[0]]
        given_rows[column] = rows[:, 0]
        expected = fitted.model.predict(given_rows, prediction_type="RawFormulaVal")
    np.testing.assert_allclose(fitted.ens.predict(given_rows), expected, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(jaximp.shap_values(fitted.ens, given_rows).sum(1) + jaximp.expected_value(fitted.ens),
                               expected, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(rows, keep)  # the caller's array is not changed


def test_xgboost_split_condition_zero():
    """XGBoost stores a split at 0 (``x < 0`` goes left) as the border ``nextafter(0, -inf)``, a
    subnormal that XLA flushes to 0: rows equal to 0 (and -0.0) must still go right."""
    fitted = rows_zero_borders("xgboost")
    import xgboost as xgb

    rows = np.array([[0.0, 0.0], [-0.0, 1.0], [1e-40, 0.0], [-1e-40, 0.0], [-1.0, 0.0], [1.0, 0.0]], np.float32)
    expected = fitted.model.predict(xgb.DMatrix(rows), output_margin=True)
    np.testing.assert_allclose(jaximp.predict(fitted.ens, rows), expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("bad, words", [
    (lambda X: X.astype(np.complex64) + 1j, ("real numbers", "complex")),
    (lambda X: jnp.asarray(X, jnp.complex64), ("real numbers", "complex")),
    (lambda X: pd.DataFrame(X.astype(np.complex128), columns=list(ROWS_NAMES)), ("real numbers", "complex")),
    (lambda X: np.zeros(X.shape, "datetime64[s]"), ("real numbers", "dates")),
    (lambda X: np.zeros(X.shape, "timedelta64[ms]"), ("real numbers", "durations")),
    (lambda X: pd.DataFrame(X, columns=list(ROWS_NAMES)).assign(age=pd.Timestamp(0)), ("numbers", "'age'")),
    (lambda X: np.ma.masked_array(X, mask=np.eye(*X.shape, dtype=bool)), ("masked", "filled(np.nan)")),
    (lambda X: pd.DataFrame(X, columns=list(ROWS_NAMES)).assign(age="x"), ("numbers", "'age'")),
    (lambda X: X.astype(object).tolist()[:2] + [["a"] * 6], ("numbers",)),
])
def test_values_that_are_not_real_numbers_are_refused(bad, words):
    fitted = rows_named("catboost")
    X = fitted.X.to_numpy()[:4].astype(np.float32)
    for fn_name, fn in (("predict", jaximp.predict), ("shap_values", jaximp.shap_values)):
        kind, error = outcome(lambda fn=fn: fn(fitted.ens, bad(X)))
        assert kind == "refused", error
        assert str(error).startswith(f"{fn_name}: ")
        assert_clear_refusal(error, *words)


def test_categorical_float_column_of_dates_is_refused():
    fitted = catboost_categorical("one_hot")
    rows = fitted.X.iloc[:4].copy()
    column = rows.columns[np.flatnonzero(rows.dtypes == np.float32)[0]]
    rows[column] = pd.Timestamp(0)
    with pytest.raises(TypeError, match=f"predict: X's column '{column}' must hold real numbers; got dates"):
        jaximp.predict(fitted.ens, rows)


# Property: random rows with hostile values ------------------------------------------------------------------------


def _border_values(ens, j: int) -> list[float]:
    """Values at and around the model's borders on feature ``j`` (float32: at, one ulp up)."""
    if ens.layout == "oblivious":
        borders = np.asarray(ens.borders)[j]
    else:
        features, borders = np.asarray(ens.node_features).ravel(), np.asarray(ens.node_borders).ravel()
        borders = borders[features == j]
    borders = np.unique(borders[np.isfinite(borders)].astype(np.float32))[:6]
    return [float(v) for b in borders for v in (b, np.nextafter(b, np.float32(np.inf)))]


@st.composite
def hostile_matrix(draw, fitted):
    """``f64[n, F]`` training rows (in the model's order) with some cells replaced by hostile
    values or values at the model's borders."""
    X = fitted.X.to_numpy().astype(np.float64)
    n = draw(st.integers(1, 6))
    M = X[draw(st.lists(st.integers(0, len(X) - 1), min_size=n, max_size=n))].copy()
    for _ in range(draw(st.integers(0, 2 * M.size))):
        i, j = draw(st.integers(0, n - 1)), draw(st.integers(0, M.shape[1] - 1))
        M[i, j] = draw(st.sampled_from(HOSTILE + tuple(_border_values(fitted.ens, j))))
    return M


CONTAINERS = ("float64", "float32", "float16", "jax", "list", "frame", "frame-float32", "polars")


def as_container(M: np.ndarray, container: str):
    """``(rows as the user passes them, the float64 values a library reads from them)``."""
    if container in ("float32", "jax", "frame-float32"):
        values = M.astype(np.float32)
    elif container == "float16":
        with np.errstate(over="ignore"):
            values = M.astype(np.float16)
    else:
        values = M
    seen = values.astype(np.float64)
    if container == "jax":
        return jnp.asarray(values), seen
    if container == "list":
        return values.tolist(), seen
    if container.startswith("frame"):
        return pd.DataFrame(values, columns=list(ROWS_NAMES)), seen
    if container == "polars":
        import polars as pl

        return pl.DataFrame({name: values[:, j] for j, name in enumerate(ROWS_NAMES)}), seen
    return values, seen


@pytest.mark.parametrize("named", ROWS_LIBRARIES, indirect=True)
@given(data=st.data())
@hypothesis_settings()
def test_hostile_values_give_the_librarys_numbers(named, data):
    check_hostile_values(named, data)


@slow
@pytest.mark.parametrize("named", ROWS_LIBRARIES, indirect=True)
@given(data=st.data())
@hypothesis_settings(200)
def test_hostile_values_give_the_librarys_numbers_more(named, data):
    check_hostile_values(named, data)


def check_hostile_values(named, data):
    """predict, leaf_indices and shap_values equal the library's on the values it reads (or, where
    it refuses them, finite and additive); interaction values and mean |SHAP| agree with them."""
    library, fitted = named
    ens = fitted.ens
    M = data.draw(hostile_matrix(fitted), label="rows")
    rows, seen = as_container(M, data.draw(st.sampled_from(CONTAINERS), label="container"))
    with np.errstate(all="ignore"):
        kind, raw = outcome(lambda: jaximp.predict(ens, rows))
        assert_reference_or_contract(kind, raw, *library_says(reference_predict, library, fitted, seen))
        kind, leaves = outcome(lambda: jaximp.leaf_indices(ens, rows))
        assert_reference_or_contract(kind, leaves, *library_says(reference_leaves, library, fitted, seen), exact=True)
        kind, phi = outcome(lambda: jaximp.shap_values(ens, rows))
        assert_reference_or_contract(kind, phi, *library_says(reference_shap, library, fitted, seen))
        np.testing.assert_allclose(np.asarray(phi).sum(1) + np.asarray(jaximp.expected_value(ens)), np.asarray(raw),
                                   rtol=RTOL, atol=ATOL)
        kind, inter = outcome(lambda: jaximp.shap_interaction_values(ens, rows))
        assert kind == "value", inter
        np.testing.assert_allclose(np.asarray(inter).sum(2), np.asarray(phi), rtol=RTOL, atol=ATOL)
        kind, mean_abs = outcome(lambda: jaximp.shap_importance(ens, rows))
        assert kind == "value", mean_abs
        np.testing.assert_allclose(mean_abs, np.abs(np.asarray(phi)).mean(0), rtol=RTOL, atol=1e-6)


FRAME_CHANGES = ("as is", "reordered", "extra columns", "int column", "bool column", "nullable", "duplicated",
                 "missing", "object column", "string column", "category column", "empty")
REFUSED = {"duplicated": ("more than once",), "missing": ("missing",), "object column": ("numbers",),
           "string column": ("numbers",), "category column": ("numbers",), "empty": ("at least one row",)}


def changed_frame(M: np.ndarray, change: str, order: list[int], column: int):
    """``(a DataFrame of the rows M changed so, the float64 values the model should read)``."""
    frame = pd.DataFrame(M, columns=list(ROWS_NAMES))
    seen = M.copy()
    name = ROWS_NAMES[column]
    if change == "reordered":
        frame = frame.iloc[:, order]
    elif change == "extra columns":
        frame.insert(int(order[0]), "id", np.arange(len(frame)).astype(str))
        frame["noise"] = -1.0
    elif change in ("int column", "bool column"):
        finite = np.where(np.isfinite(M[:, column]), M[:, column], 0.0)
        cast = np.clip(finite, -1e9, 1e9).astype(np.int64) if change == "int column" else finite > 0
        frame[name], seen[:, column] = cast, cast.astype(np.float64)
    elif change == "nullable":
        frame[name] = pd.array(np.where(np.isnan(M[:, column]), None, M[:, column]), dtype="Float64")
    elif change == "duplicated":
        frame = pd.concat([frame, frame[[name]] + 1.0], axis=1)
    elif change == "missing":
        frame = frame.drop(columns=name)
    elif change == "object column":
        frame[name] = frame[name].astype(object)
    elif change == "string column":
        frame[name] = frame[name].astype(str)
    elif change == "category column":
        frame[name] = pd.Categorical(frame[name])
    elif change == "empty":
        frame = frame.iloc[:0]
    return frame, seen


@pytest.mark.parametrize("named", cases(ROWS_LIBRARIES, ("catboost", "xgboost")), indirect=True)
@given(data=st.data())
@hypothesis_settings()
def test_hostile_frames_give_the_librarys_numbers_or_a_clear_refusal(named, data):
    library, fitted = named
    ens = fitted.ens
    M = data.draw(hostile_matrix(fitted), label="rows")
    change = data.draw(st.sampled_from(FRAME_CHANGES), label="change")
    order = data.draw(st.permutations(range(len(ROWS_NAMES))), label="order")
    column = data.draw(st.integers(0, len(ROWS_NAMES) - 1), label="column")
    frame, seen = changed_frame(M, change, order, column)
    y = fitted.y[: len(frame)] if len(frame) else fitted.y[:0]
    calls = {
        "predict": (lambda: jaximp.predict(ens, frame), reference_predict),
        "shap_values": (lambda: jaximp.shap_values(ens, frame), reference_shap),
        "loss_function_change": (lambda: jaximp.loss_function_change(ens, frame, y), None),
        "permutation_importance": (lambda: jaximp.permutation_importance(ens, frame, y, n_repeats=2, random_state=0)
                                   .importances, None),
    }
    with np.errstate(all="ignore"):
        for fn_name, (call, reference) in calls.items():
            kind, got = outcome(call)
            if change in REFUSED:
                assert kind == "refused", (fn_name, change)
                assert str(got).startswith(f"{fn_name}: ")
                assert_clear_refusal(got, *REFUSED[change])
            elif reference is None:
                assert kind == "value", got
                assert np.all(np.isfinite(np.asarray(got))) or not np.all(np.isfinite(seen)), fn_name
            else:
                assert_reference_or_contract(kind, got, *library_says(reference, library, fitted, seen))


def _expected_shape(shape: tuple, F: int) -> str:
    """``"rows"`` for ``[N >= 1, F]``, ``"row"`` for ``[F]``, else ``"refused"``."""
    if len(shape) == 2 and shape[0] >= 1 and shape[1] == F:
        return "rows"
    if len(shape) == 1 and shape[0] == F:
        return "row"
    return "refused"


@pytest.mark.parametrize("named", cases(ROWS_LIBRARIES, ("catboost", "lightgbm")), indirect=True)
@given(data=st.data())
@hypothesis_settings()
def test_arrays_of_any_rank_and_size(named, data):
    """Rank 0 to 3, every size 0..F+1: ``[N, F]`` rows and ``[F]`` rows give results (the row of
    the 2-D result for ``[F]``), every other shape a clear refusal that names the shape."""
    _, fitted = named
    ens, F = fitted.ens, fitted.ens.n_features
    shape = tuple(data.draw(st.lists(st.integers(0, F + 1), min_size=0, max_size=3), label="shape"))
    rows = np.resize(fitted.X.to_numpy().astype(np.float32), shape) if all(shape) else np.zeros(shape, np.float32)
    container = data.draw(st.sampled_from(["numpy", "jax", "list"]), label="container")
    given_rows = {"numpy": rows, "jax": jnp.asarray(rows), "list": rows.tolist()}[container]
    expected = _expected_shape(shape, F)
    for fn_name in ("predict", "leaf_indices", "shap_values", "shap_interaction_values"):
        fn = getattr(jaximp, fn_name)
        kind, got = outcome(lambda fn=fn: fn(ens, given_rows))
        if expected == "refused":
            assert kind == "refused", (fn_name, shape, got)
            assert_clear_refusal(got)
            assert str(got).startswith(f"{fn_name}: ")
        else:
            assert kind == "value", got
            whole = np.asarray(fn(ens, rows if expected == "rows" else rows[None]))
            np.testing.assert_array_equal(np.asarray(got), whole if expected == "rows" else whole[0])
