"""Non-symmetric models (Depthwise, Lossguide) whose file carries no leaf weights.

How such a model is made honestly: the JSON export with every leaf's ``"weight"`` deleted, which
CatBoost loads (``GetNonSymmetricModelTrees``, json_model_helpers.cpp, reads a weight only where
there is one) and then treats as a model without leaf weights: it asks for a data set and counts
the leaf weights on it (``InitLeafWeights`` -> ``CollectLeavesStatistics``, fstr/util.cpp).
(CatBoost 1.2.10 crashes when such a model object is saved again, so the drop-in is given the
JSON file; ``model.get_leaf_weights()`` then returns uninitialised memory.)

Oracle: CatBoost's ``get_feature_importance`` on that model. Its numbers are path-dependent SHAP
with the leaf counts of the explained rows, except that its recursion over non-symmetric trees
(``CalcNonObliviousInternalShapValuesForLeafRecursive``, shap_values.cpp) never enters a child
of zero weight: leaves no explained row reaches drop out (``jaximp._shap.tree_plans.covered``). Without
that rule the values differ by up to ~0.2 (``test_unreached_leaves_drop_out``).

Tolerance: float32 tables against CatBoost's float64, values of magnitude ~1-5 (PVC ~100):
``rtol=1e-5, atol=1e-5 * max(1, |expected|)``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import tempfile

import catboost
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import make_data

import jaximp
from jaximp import get_feature_importance
from jaximp._importers.catboost_trees import tree_ensemble_from_json

GRID = [  # (kind, loss, grow_policy, max_leaves)
    ("regression", "RMSE", "Depthwise", None),
    ("binary", "Logloss", "Lossguide", 24),
]


def _strip(node):
    node.pop("weight", None)
    if "split" in node:
        _strip(node["left"])
        _strip(node["right"])


@functools.cache
def trained(kind, loss, grow_policy, max_leaves):
    """``(ens without weights, CatBoost model loaded from that JSON, its path, X, y)``."""
    X, y = make_data(kind, n=400, n_features=5, nan_fraction=0.05)
    params = dict(loss_function=loss, depth=5, iterations=10, grow_policy=grow_policy, random_seed=0,
                  verbose=0, thread_count=1, allow_writing_files=False)
    if max_leaves:
        params["max_leaves"] = max_leaves
    model = catboost.CatBoost(params).fit(X, y)
    directory = tempfile.mkdtemp()
    path = os.path.join(directory, "model.json")
    model.save_model(path, format="json")
    with open(path) as f:
        model_json = json.load(f)
    for tree in model_json["trees"]:
        _strip(tree)
    with open(path, "w") as f:
        json.dump(model_json, f)
    reloaded = catboost.CatBoost()
    reloaded.load_model(path, format="json")
    return tree_ensemble_from_json(model_json), reloaded, path, X, y


@pytest.fixture(scope="module", ids=lambda c: "-".join(map(str, c[1:3])),
                params=[GRID[0], pytest.param(GRID[1], marks=pytest.mark.slow)])  # the second: its own compilations
def case(request):
    return trained(*request.param)


def assert_close(got, expected):
    expected = np.asarray(expected, np.float64)
    got = np.asarray(got, np.float64)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(expected).max()))


def test_the_model_has_no_leaf_weights(case):
    ens, *_ = case
    assert not ens.leaf_weights_known


@pytest.mark.parametrize("kwargs", [dict(type="ShapValues"), dict(type="ShapValues", shap_calc_type="Approximate"),
                                    dict(type="PredictionValuesChange")], ids=["shap", "approximate", "pvc"])
def test_unlabelled_types_equal_catboost(case, kwargs):
    _, reloaded, path, X, _ = case
    for rows in (X[:60], X[200:203]):
        pool = catboost.Pool(rows)
        assert_close(get_feature_importance(path, pool, **kwargs), reloaded.get_feature_importance(data=pool, **kwargs))


def test_loss_function_change_equals_catboost(case):
    ens, reloaded, path, X, y = case
    pool = catboost.Pool(X[:60], y[:60])
    expected = reloaded.get_feature_importance(data=pool, type="LossFunctionChange")
    assert_close(get_feature_importance(path, pool, type="LossFunctionChange"), expected)
    assert_close(jaximp.loss_function_change(ens, X[:60], y[:60]), expected)


def test_shap_interaction_values_equal_catboost(case):
    _, reloaded, path, X, _ = case
    pool = catboost.Pool(X[:15])
    assert_close(get_feature_importance(path, pool, type="ShapInteractionValues"),
                 reloaded.get_feature_importance(data=pool, type="ShapInteractionValues"))


def test_public_functions_count_on_the_rows(case):
    ens, reloaded, _, X, _ = case
    rows = X[:40]
    expected = reloaded.get_feature_importance(data=catboost.Pool(rows), type="ShapValues")
    values = np.asarray(jaximp.shap_values(ens, rows))
    assert_close(values, expected[:, :-1])
    raw = np.asarray(jaximp.predict(ens, rows), np.float64)
    np.testing.assert_allclose(values.sum(1) + expected[:, -1], raw, rtol=1e-5, atol=1e-5)  # additive
    assert_close(jaximp.shap_importance(ens, rows), np.abs(expected[:, :-1]).mean(0))
    assert_close(jaximp.prediction_values_change(ens, rows),
                 reloaded.get_feature_importance(data=catboost.Pool(rows), type="PredictionValuesChange"))


def test_unreached_leaves_drop_out(case):
    """Leaves no explained row reaches take no part: changing their values changes nothing, as in
    CatBoost's recursion (which never enters a child of zero weight); plain path-dependent SHAP
    with the counts would move by up to ~0.2 here."""
    ens, _, _, X, _ = case
    rows = X[:60]
    leaves = np.asarray(jaximp.leaf_indices(ens, rows))
    reached = np.zeros(ens.leaf_weights.shape, bool)
    reached[np.broadcast_to(np.arange(ens.n_trees), leaves.shape), leaves] = True
    assert (~reached).any()
    moved = jnp.where(jnp.asarray(reached)[..., None], ens.leaf_values, ens.leaf_values + 5.0)
    other = dataclasses.replace(ens, leaf_values=moved)
    np.testing.assert_array_equal(np.asarray(jaximp.shap_values(other, rows)),
                                  np.asarray(jaximp.shap_values(ens, rows)))


@pytest.mark.parametrize("kind", ["PredictionValuesChange", "ShapValues", "LossFunctionChange"])
def test_no_data_refused_like_catboost(case, kind):
    _, reloaded, path, _, _ = case
    with pytest.raises(catboost.CatBoostError):
        reloaded.get_feature_importance(type=kind)
    with pytest.raises(ValueError, match="data must be given|no leaf weights"):
        get_feature_importance(path, type=kind)


def test_public_functions_without_rows_refused(case):
    ens, *_ = case
    with pytest.raises(ValueError, match="no leaf weights"):
        jaximp.prediction_values_change(ens)
    with pytest.raises(ValueError, match="no leaf weights"):
        jaximp.expected_value(ens)


def test_weighted_pool_refused(case):
    _, _, path, X, _ = case
    pool = catboost.Pool(X[:20], weight=np.linspace(0.5, 2.0, 20))
    with pytest.raises(ValueError, match="unit row weights"):
        get_feature_importance(path, pool, type="ShapValues")


def test_interaction_needs_no_weights(case):
    _, reloaded, path, _, _ = case
    assert_close(get_feature_importance(path, type="Interaction"), reloaded.get_feature_importance(type="Interaction"))
