"""Models whose file carries no leaf weights: non-symmetric (Depthwise, Lossguide) and oblivious.

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
import json

import catboost
import jax.numpy as jnp
import numpy as np
import oracles
import pytest
from models import catboost_trees, train

import jaximp
from jaximp import get_feature_importance

GRID = [  # (kind, loss, grow_policy, max_leaves)
    ("regression", "RMSE", "Depthwise", None),
    ("binary", "Logloss", "Lossguide", 24),
]


def trained(kind, loss, grow_policy, max_leaves):
    """``(ens without weights, CatBoost model loaded from that JSON, its path, X, y)``: 10 trees
    of depth 5 on 400 rows with 5% NaN, the JSON export with every leaf's weight deleted."""
    fitted = catboost_trees(kind, grow_policy, 5, max_leaves, nan_mode=None, iterations=10, n=400, n_features=5,
                            learning_rate=None, strip_weights=True)
    assert fitted.ens.loss_function == loss
    return fitted.ens, fitted.model, fitted.path, fitted.X, fitted.y


@pytest.fixture(scope="module", ids=lambda c: "-".join(map(str, c[1:3])),
                params=[GRID[0], pytest.param(GRID[1], marks=pytest.mark.slow)])  # the second: its own compilations
def case(request):
    return trained(*request.param)


def assert_close(got, expected):
    assert np.shape(got) == np.shape(expected)
    oracles.assert_close(got, expected)


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


def test_an_oblivious_model_file_without_leaf_weights_counts_them_on_the_rows(tmp_path):
    """CatBoost counts leaf weights on the rows it explains when the model carries none, and
    asks for data where it needs training weights."""
    model, X, y, _ = train("regression", depth=4)
    model.save_model(tmp_path / "m.json", format="json")
    stripped = json.loads((tmp_path / "m.json").read_text())
    for tree in stripped["oblivious_trees"]:
        tree.pop("leaf_weights")
    (tmp_path / "stripped.json").write_text(json.dumps(stripped))
    reference = catboost.CatBoost()
    reference.load_model(str(tmp_path / "stripped.json"), format="json")
    ens = jaximp.from_catboost(tmp_path / "stripped.json")
    pool = catboost.Pool(X, y)
    np.testing.assert_allclose(jaximp.shap_values(ens, X),
                               reference.get_feature_importance(pool, type="ShapValues")[:, :-1],
                               rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(jaximp.prediction_values_change(ens, X),
                               reference.get_feature_importance(pool, type="PredictionValuesChange"),
                               rtol=1e-5, atol=1e-4)
    for call in (lambda: jaximp.prediction_values_change(ens), lambda: jaximp.Explainer(ens),
                 lambda: jaximp.expected_value(ens), lambda: jaximp.split_importance(ens, "gain")):
        with pytest.raises(ValueError, match="carries no leaf weights"):
            call()
