"""SHAP values of the probability and of the loss (``jaximp.shap_values(...,
model_output="probability" | "log_loss")``) against shap's interventional TreeExplainer.

* shap's ``TreeExplainer(model, data=Independent(background, max_samples=B),
  feature_perturbation="interventional", model_output=...)`` on XGBoost, LightGBM and
  scikit-learn models, rows with missing values included.
* Closed forms: a row's values add up to ``T(f(x))`` less the mean of ``T(f(b))`` over the
  background (each background row's values are rescaled to add up to ``T(f(x)) - T(f(b))``).
* The rescale factor, a divided difference computed without cancellation, against float64.
* A row's values are its own; rows on a device give results there.
* Bad input: clear errors, no result.

Tolerances: float32 sums against shap's float64 (``oracles.assert_close``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import models
import numpy as np
import pytest
import shap
from oracles import assert_close

import jaximp
from jaximp._shap.index_background import rescale_factor


def shap_reference(model, x, background, model_output, y=None):
    explainer = shap.TreeExplainer(model, data=shap.maskers.Independent(background, max_samples=len(background)),
                                   feature_perturbation="interventional", model_output=model_output)
    return np.asarray(explainer.shap_values(x, y) if y is not None else explainer.shap_values(x))


CASES = {  # name: the fitted model
    "xgboost-logistic": lambda: models.xgboost_model("logistic"),
    "xgboost-squarederror": lambda: models.xgboost_model("squarederror"),
    "lightgbm-binary": lambda: models.lightgbm_model("binary"),
    "lightgbm-regression": lambda: models.lightgbm_model("regression"),
    "sklearn-gb_bin": lambda: models.sklearn_model("gb_bin"),
    "sklearn-rf_clf": lambda: models.sklearn_model("rf_clf"),
}


def rows_of(fitted):
    x = np.asarray(fitted.X, np.float32)
    return x[:25], x[200:240], np.asarray(fitted.y)[:25]


@pytest.mark.parametrize("name", ["xgboost-logistic", "lightgbm-binary", "sklearn-gb_bin", "sklearn-rf_clf"])
def test_probability_equals_shap(name):
    fitted = CASES[name]()
    x, background, _ = rows_of(fitted)
    got = jaximp.shap_values(fitted.ens, x, method="interventional", background=background,
                             model_output="probability")
    assert_close(got, shap_reference(fitted.model, x, background, "probability"))


@pytest.mark.parametrize("name", ["xgboost-logistic", "xgboost-squarederror", "lightgbm-binary",
                                  "lightgbm-regression"])
def test_log_loss_equals_shap(name):
    fitted = CASES[name]()
    x, background, y = rows_of(fitted)
    got = jaximp.shap_values(fitted.ens, x, method="interventional", background=background, model_output="log_loss",
                             y=y)
    assert_close(got, shap_reference(fitted.model, x, background, "log_loss", y))


def transformed(margin, transform, y=0.0):
    margin = np.asarray(margin, np.float64)
    if transform == "logistic":
        return 1 / (1 + np.exp(-margin))
    if transform == "logistic_nlogloss":
        return np.logaddexp(0.0, margin) - y * margin
    return (margin - y) ** 2


@pytest.mark.parametrize("name, model_output, transform", [
    ("xgboost-logistic", "probability", "logistic"), ("xgboost-logistic", "log_loss", "logistic_nlogloss"),
    ("xgboost-squarederror", "log_loss", "squared_loss")])
def test_values_add_up_to_the_transformed_output(name, model_output, transform):
    fitted = CASES[name]()
    x, background, y = rows_of(fitted)
    labels = y if model_output == "log_loss" else None
    got = jaximp.shap_values(fitted.ens, x, method="interventional", background=background,
                             model_output=model_output, y=labels)
    f_x, f_b = np.asarray(jaximp.predict(fitted.ens, x)), np.asarray(jaximp.predict(fitted.ens, background))
    y_col = 0.0 if labels is None else np.asarray(labels, np.float64)[:, None]
    expected = transformed(f_x, transform, y_col[:, 0] if labels is not None else 0.0) \
        - transformed(f_b[None, :], transform, y_col).mean(axis=1)
    assert_close(np.asarray(got, np.float64).sum(axis=1), expected)


@pytest.mark.parametrize("transform", ["logistic", "logistic_nlogloss", "squared_loss"])
def test_rescale_factor_is_the_divided_difference(transform):
    rng = np.random.default_rng(0)
    a = np.concatenate([rng.normal(0, 3, 300), rng.normal(0, 30, 100), [0.0, 5.0, -40.0, 80.0]])
    b = np.concatenate([a[:100] + rng.normal(0, 1e-4, 100), a[100:200] + rng.normal(0, 0.5, 100),
                        rng.normal(0, 3, 200), [0.0, 5.0, -39.0, -80.0]])
    y = rng.integers(0, 2, a.size).astype(np.float64)
    got = np.asarray(rescale_factor(transform, jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32),
                                    jnp.asarray(y, jnp.float32)), np.float64)
    a32, b32 = a.astype(np.float32).astype(np.float64), b.astype(np.float32).astype(np.float64)
    apart = a32 != b32
    expected = np.empty_like(a)
    expected[apart] = ((transformed(a32, transform, y) - transformed(b32, transform, y)) / (a32 - b32))[apart]
    derivative = {"logistic": lambda m: transformed(m, "logistic") * (1 - transformed(m, "logistic")),
                  "logistic_nlogloss": lambda m: transformed(m, "logistic") - y,
                  "squared_loss": lambda m: 2 * (m - y)}[transform](a32)
    expected[~apart] = derivative[~apart]
    # float32 relative accuracy; "logistic_nlogloss" subtracts y from a factor of order 1 (float32
    # rounding of that factor, 6e-8, is its absolute accuracy)
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=1.2e-7 if transform == "logistic_nlogloss" else 0)


def test_a_rows_values_are_its_own():
    fitted = CASES["xgboost-logistic"]()
    x, background, y = rows_of(fitted)
    kw = dict(method="interventional", background=background, model_output="log_loss")
    together = jaximp.shap_values(fitted.ens, x, y=y, **kw)
    alone = jaximp.shap_values(fitted.ens, x[3:4], y=y[3:4], **kw)
    batched = jaximp.shap_values(fitted.ens, x, y=y, batch_size=7, **kw)
    np.testing.assert_array_equal(alone[0], together[3])
    np.testing.assert_array_equal(batched, together)


def test_device_rows_give_device_results():
    fitted = CASES["xgboost-logistic"]()
    x, background, y = rows_of(fitted)
    kw = dict(method="interventional", model_output="log_loss")
    host = jaximp.shap_values(fitted.ens, x, background=background, y=y, **kw)
    on_device = jaximp.shap_values(fitted.ens, jnp.asarray(x), background=jnp.asarray(background),
                                   y=jnp.asarray(y, jnp.float32), **kw)
    assert isinstance(on_device, jax.Array)
    np.testing.assert_allclose(np.asarray(on_device), host, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name, kwargs, message", [
    ("xgboost-logistic", dict(model_output="logit"), "model_output must be one of"),
    ("xgboost-logistic", dict(model_output="log_loss"), "needs y"),
    ("xgboost-logistic", dict(model_output="probability", y=np.zeros(25)), "y is read only with"),
    ("xgboost-logistic", dict(model_output="log_loss", y=np.zeros(24)), "y must have shape"),
    ("xgboost-logistic", dict(model_output="log_loss", y=np.full(25, 2.0)), "0/1 labels"),
    ("xgboost-squarederror", dict(model_output="probability"), "regression's output is no probability"),
    ("xgboost-softprob", dict(model_output="probability"), "softmax"),
    ("xgboost-poisson", dict(model_output="log_loss", y=np.zeros(25)), "squared-error regression"),
])
def test_bad_arguments(name, kwargs, message):
    fitted = CASES[name]() if name in CASES else models.xgboost_model(name.split("-", 1)[1])
    x, background, _ = rows_of(fitted)
    with pytest.raises(ValueError, match=message):
        jaximp.shap_values(fitted.ens, x, method="interventional", background=background, **kwargs)


def test_transformed_outputs_need_the_interventional_game():
    fitted = CASES["xgboost-logistic"]()
    x, _, _ = rows_of(fitted)
    with pytest.raises(ValueError, match="needs method='interventional'"):
        jaximp.shap_values(fitted.ens, x, model_output="probability")
