"""The SHAP front door: ``jaximp.Explainer`` and its ``shap.Explanation``, the gradient of SHAP
values in closed form, and bad arguments as clear errors, for both layouts.

Oracles: ``jaximp.shap_values`` on the same rows (an Explanation carries them unchanged),
the model's prediction (additivity), the closed form of the gradient of summed path-dependent
values (``scale * (rows in leaf l - N * w_l / sum w)``), the error messages.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import shap
from models import (
    CATBOOST_TREES,
    catboost_categorical,
    catboost_categorical_trees,
    catboost_trees,
    explained,
    train,
    xgboost_tiny,
)
from oracles import assert_close

import jaximp
from jaximp import Explainer, expected_value, shap_interaction_values, shap_values


def test_explainer_returns_an_explanation_and_caches_tables(monkeypatch):
    model, X, _, _ = train("multiclass", depth=4)
    ens = jaximp.from_catboost(model)
    explainer = Explainer(ens, background=X[:20], method="interventional")
    calls = []
    monkeypatch.setattr("jaximp._shap.oblivious._build", lambda *a, **k: calls.append(1))
    explanation = explainer(X[:30])
    assert isinstance(explanation, shap.Explanation) and not calls
    assert explanation.values.shape == (30, 6, 3) and explanation.base_values.shape == (30, 3)
    np.testing.assert_array_equal(explanation.data, X[:30])
    assert list(explanation.feature_names) == list(ens.feature_names)
    np.testing.assert_array_equal(explanation.values, explainer.shap_values(X[:30]))
    monkeypatch.undo()
    np.testing.assert_array_equal(explanation.values,
                                  shap_values(ens, X[:30], method="interventional", background=X[:20]))
    assert_close(explanation.values.sum(1) + explanation.base_values, ens.predict(X[:30]))


@pytest.mark.parametrize("layout", ["oblivious", "trees"])
def test_explanation_of_categorical_rows(layout):
    """Raw categorical values are the Explanation's display data; its data hold NaN there."""
    if layout == "oblivious":
        fitted, rows = catboost_categorical("combinations_2"), catboost_categorical("combinations_2").X.iloc[:20]
    else:
        fitted, rows = catboost_categorical_trees("depthwise_ctr"), explained("binary")[0]
    explanation = jaximp.Explainer(fitted.ens)(rows)
    np.testing.assert_array_equal(explanation.values, shap_values(fitted.ens, rows))
    assert explanation.feature_names == list(rows.columns)
    np.testing.assert_array_equal(explanation.display_data[:, 1], rows["c0"].to_numpy())
    np.testing.assert_array_equal(explanation.data[:, 0], rows["f0"].to_numpy())
    assert np.isnan(explanation.data[:, 1]).all()


def test_grad_through_shap_values():
    # sum_i sum_f phi_if = sum_i predict(x_i) - N * E[V], so its gradient in leaf_values[t, l] is
    # scale * (rows in leaf l - N * w_l / sum w) for the path-dependent values.
    model, X, _, _ = train("regression", depth=3, iterations=5)
    ens = jaximp.from_catboost(model)
    grad = jax.grad(lambda v: jnp.sum(shap_values(dataclasses.replace(ens, leaf_values=v), X)))(ens.leaf_values)
    leaves = jaximp.leaf_indices(ens, X)
    counts = np.stack([np.bincount(leaves[:, t], minlength=ens.n_leaves) for t in range(ens.n_trees)])
    weights = np.asarray(ens.leaf_weights)
    closed_form = counts - len(X) * weights / weights.sum(1, keepdims=True)
    np.testing.assert_allclose(grad[..., 0], float(ens.scale) * closed_form, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("layout", ["oblivious", "trees"])
def test_errors(regression_model, layout):
    if layout == "trees":
        fitted = catboost_trees(*CATBOOST_TREES[0])
        ens, X = fitted.ens, fitted.X
        with pytest.raises(ValueError, match="method must be one of"):
            shap_values(ens, X, method="exact-ish")
        with pytest.raises(ValueError, match="background must be given"):
            shap_values(ens, X, method="interventional")
        return
    model, ens, X, _ = regression_model
    with pytest.raises(ValueError, match="shap_values: method must be one of"):
        shap_values(ens, X, method="tree_path_dependent")
    with pytest.raises(ValueError, match="background must be given for method='interventional'"):
        shap_values(ens, X, method="interventional")
    with pytest.raises(ValueError, match="background is only used by method='interventional'"):
        shap_values(ens, X, background=X)
    with pytest.raises(ValueError, match="shap_values: background must have 6 columns"):
        shap_values(ens, X, method="interventional", background=X[:, :4])
    with pytest.raises(ValueError, match="Explainer: background must have at least one row"):
        Explainer(ens, background=X[:0], method="interventional")
    with pytest.raises(ValueError, match="expected_value: method must be one of"):
        expected_value(ens, method="Regular")
    with pytest.raises(TypeError, match="shap_values: ens must be a jaximp.ObliviousEnsemble"):
        shap_values(model, X)
    with pytest.raises(ValueError, match="shap_values: X must have 6 columns"):
        shap_values(ens, X[:, :5])
    with pytest.raises(ValueError, match="shap_interaction_values: X must have rank 2"):
        shap_interaction_values(ens, X[None])


NOT_SYMMETRIC = ("method must be one of 'path_dependent', 'approximate', 'interventional' for this model; "
                 "got 'exact': exact SHAP values (CatBoost's shap_calc_type='Exact') are defined for CatBoost's "
                 "symmetric (oblivious) trees only, and this model's trees are not symmetric")


@pytest.mark.parametrize("library", ["xgboost", "catboost depthwise"])
def test_exact_on_trees_that_are_not_symmetric_says_why(library):
    fitted = xgboost_tiny("regression") if library == "xgboost" else catboost_trees(*CATBOOST_TREES[0])
    ens, X = fitted.ens, fitted.X[:5]
    for call, fn_name in [(lambda: shap_values(ens, X, method="exact"), "shap_values"),
                          (lambda: Explainer(ens, method="exact"), "Explainer"),
                          (lambda: expected_value(ens, method="exact"), "expected_value"),
                          (lambda: jaximp.shap_importance(ens, X, method="exact"), "shap_importance")]:
        with pytest.raises(ValueError) as error:
            call()
        assert str(error.value) == f"{fn_name}: {NOT_SYMMETRIC}"
    with pytest.raises(ValueError) as error:  # a method of shap_values that the function does not compute
        shap_interaction_values(ens, X, method="approximate")
    assert str(error.value) == ("shap_interaction_values: method must be one of 'path_dependent', 'interventional'; "
                                "got 'approximate', a method of shap_values that shap_interaction_values does not "
                                "compute")
    with pytest.raises(ValueError) as error:  # an unknown method: the list alone
        shap_values(ens, X, method="Exact")
    assert str(error.value) == ("shap_values: method must be one of 'path_dependent', 'exact', 'approximate', "
                                "'interventional'; got 'Exact'")
