"""``jaximp.from_sklearn``: the loss and names each scikit-learn model gives its ensemble, its
initial estimators, single-leaf trees, and what it refuses.

Oracles: scikit-learn's own predictions of the imported model (``decision_function``,
``predict``, ``apply``, ``feature_importances_``), the error messages. Tolerances:
``rtol=1e-5, atol=1e-5 * max(1, magnitude)``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from models import make_data
from oracles import assert_close
from sklearn import ensemble, tree
from sklearn.linear_model import LinearRegression

import jaximp


def test_losses_and_names():
    X, y = make_data("regression", n=120, n_features=4)
    X = X[:, :3]
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    losses = {
        ensemble.GradientBoostingRegressor(n_estimators=2, loss="absolute_error"): "MAE",
        ensemble.GradientBoostingRegressor(n_estimators=2, loss="huber"): "",
        ensemble.GradientBoostingRegressor(n_estimators=2, loss="quantile"): "Quantile",
        ensemble.HistGradientBoostingRegressor(max_iter=2, loss="poisson"): "Poisson",
        ensemble.HistGradientBoostingRegressor(max_iter=2, loss="gamma"): "",
        tree.DecisionTreeRegressor(max_depth=2, criterion="poisson"): "",
        tree.DecisionTreeRegressor(max_depth=2, criterion="friedman_mse"): "RMSE",
        ensemble.RandomForestRegressor(2, max_depth=2, criterion="absolute_error"): "MAE",
    }
    positive = np.exp(y / 4)
    for model, loss in losses.items():
        ens = jaximp.from_sklearn(model.fit(frame, positive))
        assert ens.loss_function == loss, model
        assert ens.feature_names == ("a", "b", "c")
    binary = (y > 0).astype(int)
    exponential = ensemble.GradientBoostingClassifier(n_estimators=2, loss="exponential").fit(X, binary)
    assert jaximp.from_sklearn(exponential).loss_function == ""
    assert jaximp.from_sklearn(tree.DecisionTreeClassifier(max_depth=2).fit(X, np.array(["u", "v"])[binary])
                               ).class_names == ("u", "v")
    # a DataFrame's columns are matched by name; the Poisson ensemble's raw output is the log
    model = ensemble.HistGradientBoostingRegressor(max_iter=5, loss="poisson").fit(frame, positive)
    ens = jaximp.from_sklearn(model)
    assert_close(jaximp.predict(ens, frame[["c", "a", "b"]]), np.log(model.predict(frame)))


def test_init_and_zero_init():
    X, y = make_data("multiclass", n=200, n_features=4)
    for init in ("zero", None):
        model = ensemble.GradientBoostingClassifier(n_estimators=5, max_depth=2, init=init).fit(X, y)
        assert_close(jaximp.predict(jaximp.from_sklearn(model), X), model.decision_function(X))


def test_single_leaf_trees():
    """A constant target: every tree one leaf (the root), no player, importances all 0."""
    X, _ = make_data("regression", n=50, n_features=4)
    model = ensemble.RandomForestRegressor(3, random_state=0).fit(X, np.full(50, 2.5))
    ens = jaximp.from_sklearn(model)
    assert ens.n_leaves == 1 and np.all(np.asarray(ens.roots) == -1)
    assert_close(jaximp.predict(ens, X), model.predict(X))
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, X), model.apply(X))
    np.testing.assert_array_equal(jaximp.shap_values(ens, X[:3]), 0.0)
    assert_close(jaximp.expected_value(ens), 2.5)
    np.testing.assert_array_equal(jaximp.split_importance(ens, "impurity"), model.feature_importances_)


def test_errors():
    X, y = make_data("regression", n=100, n_features=4)
    X = X[:, :3]
    with pytest.raises(ValueError, match="from_sklearn: model must be fitted; got an unfitted RandomForestRegressor"):
        jaximp.from_sklearn(ensemble.RandomForestRegressor())
    with pytest.raises(TypeError, match="from_sklearn: model must be a scikit-learn .*; got LinearRegression"):
        jaximp.from_sklearn(LinearRegression().fit(X, y))
    with pytest.raises(TypeError, match="got str"):
        jaximp.from_sklearn("model.pkl")
    two = tree.DecisionTreeClassifier(max_depth=2).fit(X, np.stack([y > 0, y > 1], 1))
    with pytest.raises(ValueError, match="single-output classifier; got a DecisionTreeClassifier with 2 outputs"):
        jaximp.from_sklearn(two)
    linear_init = ensemble.GradientBoostingRegressor(n_estimators=2, init=LinearRegression()).fit(X, y)
    with pytest.raises(ValueError, match="model.init must be None, 'zero' or a DummyRegressor"):
        jaximp.from_sklearn(linear_init)
