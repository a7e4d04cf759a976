"""XGBoost models as users have them: trained with ``missing=-999``, with vector leaves
(``multi_strategy="multi_output_tree"``), and ``gblinear`` (refused: a linear model has no trees).

Oracles: XGBoost's own numbers of the same model and rows (``predict(output_margin=True)``,
``pred_leaf``, ``pred_contribs``, ``pred_interactions``, ``get_score``). XGBoost 3.2 computes no
SHAP values for vector leaves (``pred_contribs`` refuses them), so their oracle is XGBoost's
``pred_contribs`` of the same trees split into K scalar trees (:func:`scalar_twin`: per tree and
output, a tree of the same splits and covers whose leaves hold that output's value), which is
what SHAP values of a vector tree are, output by output; the twin predicts exactly as the model.
Tolerances: float32 sums against XGBoost's float32 (``assert_close``: rtol=1e-5, atol=1e-5 x
magnitude); leaf indices and split counts exactly.
"""

from __future__ import annotations

import copy
import json

import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
import xgboost as xgb
from models import (
    XGBOOST_MISSING,
    XGBOOST_VECTOR,
    explained_rows,
    xgboost_data,
    xgboost_missing_model,
    xgboost_missing_rows,
    xgboost_vector_model,
)
from oracles import assert_close, xgboost_contributions

import jaximp

IMPORTANCES = ("weight", "gain", "cover", "total_gain", "total_cover")


def scalar_twin(booster) -> xgb.Booster:
    """The model of ``booster``'s vector-leaf trees split into scalar trees: each tree becomes K
    trees (one per output, in ``tree_info`` order) with the same nodes, splits and
    ``sum_hessian``, leaf ``n`` holding value ``k`` of its vector; rounds keep their trees."""
    doc = json.loads(booster.save_raw("json"))
    model = doc["learner"]["gradient_booster"]["model"]
    trees, info, indptr = [], [], [0]
    for begin, end in zip(model["iteration_indptr"][:-1], model["iteration_indptr"][1:]):
        for tree in model["trees"][begin:end]:
            k_outputs = int(tree["tree_param"]["size_leaf_vector"])
            left, right = np.asarray(tree["left_children"]), np.asarray(tree["right_children"])
            leaf = left == -1
            values = np.asarray(tree["leaf_weights"]).reshape(-1, k_outputs)[right[leaf]]
            for k in range(k_outputs):
                scalar = copy.deepcopy(tree)
                conditions = np.asarray(tree["split_conditions"], np.float64)
                conditions[leaf] = values[:, k]
                scalar.update(split_conditions=conditions.tolist(), base_weights=conditions.tolist(),
                              right_children=np.where(leaf, -1, right).tolist(), id=len(trees),
                              tree_param=dict(tree["tree_param"], size_leaf_vector="1"))
                del scalar["leaf_weights"]
                trees.append(scalar)
                info.append(k)
        indptr.append(len(trees))
    model.update(trees=trees, tree_info=info, iteration_indptr=indptr)
    model["gbtree_model_param"]["num_trees"] = str(len(trees))
    return xgb.Booster(model_file=bytearray(json.dumps(doc).encode()))


def assert_same_ensemble(a, b):
    for field in ("roots", "node_features", "node_borders", "node_nan_right", "node_children", "leaf_values",
                  "leaf_weights", "bias", "node_gains", "node_weights", "leaf_ids"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
    assert (a.feature_names, a.loss_function, a.depth) == (b.feature_names, b.loss_function, b.depth)


# missing=-999 ---------------------------------------------------------------------------------


def test_missing_value_of_an_xgbmodel():
    """An ``XGBModel``'s ``missing`` parameter: values equal to it are missing, as its predict
    reads them (XGBoost's predictions, leaves, SHAP values and interactions; NaN is missing too)."""
    fitted = xgboost_missing_model()
    model, ens, x = fitted.model, fitted.ens, xgboost_missing_rows()
    assert ens.missing_value == XGBOOST_MISSING and (x == XGBOOST_MISSING).any() and np.isnan(x).any()
    data = xgb.DMatrix(x, missing=XGBOOST_MISSING)
    assert_close(jaximp.predict(ens, x), model.predict(x, output_margin=True))
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, x), model.get_booster().predict(data, pred_leaf=True))
    contributions = xgboost_contributions(model.get_booster(), data, pred_contribs=True)[..., 0]
    assert_close(jaximp.shap_values(ens, x), contributions[:, :-1])
    assert_close(jaximp.expected_value(ens), contributions[0, -1])
    interactions = xgboost_contributions(model.get_booster(), data, pred_interactions=True)[..., 0]
    assert_close(jaximp.shap_interaction_values(ens, x), interactions[:, :-1, :-1])
    # the same rows as float64 (-999 within float32 rounding), a JAX array and a DataFrame
    wide = x.astype(np.float64)
    wide[wide == XGBOOST_MISSING] = XGBOOST_MISSING * (1 + 1e-9)  # -999 once in float32, as XGBoost compares
    assert_close(jaximp.predict(ens, wide), model.predict(wide, output_margin=True))
    assert_close(np.asarray(jaximp.predict(ens, jnp.asarray(x))), model.predict(x, output_margin=True))
    frame = pd.DataFrame(x, columns=ens.feature_names)
    assert_close(jaximp.predict(ens, frame), model.predict(x, output_margin=True))


def test_missing_value_of_a_booster_or_file(tmp_path):
    """A Booster or a saved model does not store ``missing`` (it belongs to the data): imported
    without the argument, -999 is a number and the predictions are wrong by several units;
    ``missing=-999`` gives XGBoost's numbers. An explicit argument overrides the XGBModel's."""
    fitted = xgboost_missing_model()
    booster, x = fitted.model.get_booster(), xgboost_missing_rows()
    expected = fitted.model.predict(x, output_margin=True)
    assert np.abs(jaximp.predict(jaximp.from_xgboost(booster), x) - expected).max() > 1.0
    path = tmp_path / "model.ubj"
    booster.save_model(path)
    assert b"-999" not in path.read_bytes() and b"missing" not in booster.save_raw("json")
    for source in (booster, path, booster.save_raw("json")):
        assert_close(jaximp.predict(jaximp.from_xgboost(source, missing=XGBOOST_MISSING), x), expected)
    nan_only = jaximp.from_xgboost(fitted.model, missing=np.nan)  # NaN alone, as DMatrix(x)
    assert nan_only.missing_value is None
    assert_close(jaximp.predict(nan_only, x), booster.predict(xgb.DMatrix(x), output_margin=True))
    assert jaximp.from_xgboost(booster, missing=np.float32(-1)).missing_value == -1.0


@pytest.mark.parametrize("bad", ["-999", True, [-999], object()])
def test_missing_must_be_a_number(bad):
    with pytest.raises(ValueError, match="^from_xgboost: missing must be a number"):
        jaximp.from_xgboost(xgboost_missing_model().model, missing=bad)


# Vector leaves ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(XGBOOST_VECTOR))
def test_vector_leaves(name):
    """Each leaf adds K values: XGBoost's predictions, leaf indices and importances; SHAP values,
    expected values and interactions of the scalar twin, which XGBoost computes."""
    fitted = xgboost_vector_model(name)
    booster, ens, x = fitted.model, fitted.ens, explained_rows(fitted.X, 40)
    k = 2 if name == "multiregression" else 3
    assert ens.n_outputs == k and ens.loss_function == ("MultiRMSE" if k == 2 else "MultiClass")
    assert ens.n_trees == booster.num_boosted_rounds() * (2 if "forest" in name else 1)
    data = xgb.DMatrix(x)
    assert_close(jaximp.predict(ens, x), booster.predict(data, output_margin=True))
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, x), booster.predict(data, pred_leaf=True))
    names = [f"f{i}" for i in range(ens.n_features)]
    for kind in IMPORTANCES:
        score = booster.get_score(importance_type=kind)
        assert_close(jaximp.split_importance(ens, kind), [score.get(f, 0.0) for f in names])
    twin = scalar_twin(booster)
    assert_close(twin.predict(data, output_margin=True), booster.predict(data, output_margin=True))
    with pytest.raises(xgb.core.XGBoostError, match="multi-target"):  # why the twin is the oracle
        booster.predict(data, pred_contribs=True)
    contributions = xgboost_contributions(twin, data, pred_contribs=True)
    assert_close(jaximp.shap_values(ens, x), contributions[:, :-1])
    assert_close(jaximp.expected_value(ens), contributions[0, -1])
    interactions = xgboost_contributions(twin, data, pred_interactions=True)
    assert_close(jaximp.shap_interaction_values(ens, x), interactions[:, :-1, :-1])


def test_vector_leaves_from_files(tmp_path):
    fitted = xgboost_vector_model("multiregression")
    for source in (tmp_path / "m.json", tmp_path / "m.ubj"):
        fitted.model.save_model(source)
        assert_same_ensemble(jaximp.from_xgboost(source), fitted.ens)
    assert_same_ensemble(jaximp.from_xgboost(fitted.model.save_raw("ubj")), fitted.ens)


def test_vector_leaves_before_xgboost_3_2():
    """XGBoost 2.0 to 3.1 wrote every node's K values to ``base_weights`` and neither
    ``leaf_weights`` nor covers nor gains: the same predictions, covers unknown."""
    fitted = xgboost_vector_model("multiregression")
    doc = json.loads(fitted.model.save_raw("json"))
    for tree in doc["learner"]["gradient_booster"]["model"]["trees"]:
        k_outputs = int(tree["tree_param"]["size_leaf_vector"])
        left, right = np.asarray(tree["left_children"]), np.asarray(tree["right_children"])
        weights = np.zeros((len(left), k_outputs))
        weights[left == -1] = np.asarray(tree.pop("leaf_weights")).reshape(-1, k_outputs)[right[left == -1]]
        tree["base_weights"] = weights.ravel().tolist()
        tree["right_children"] = np.where(left == -1, -1, right).tolist()
        del tree["sum_hessian"], tree["loss_changes"]
    old = jaximp.from_xgboost(doc)
    assert not old.leaf_weights_known and old.node_weights is None
    x = explained_rows(fitted.X, 40)
    assert_close(jaximp.predict(old, x), fitted.model.predict(xgb.DMatrix(x), output_margin=True))


# gblinear -----------------------------------------------------------------------------------------


def test_gblinear_is_refused(tmp_path):
    """A linear booster has no trees: refused by name, from every source."""
    X, y = xgboost_data("regression", n=200)
    booster = xgb.train(dict(booster="gblinear", nthread=1), xgb.DMatrix(X, y), num_boost_round=2)
    regressor = xgb.XGBRegressor(booster="gblinear", n_estimators=2, nthread=1).fit(X, y)
    path = tmp_path / "linear.ubj"
    booster.save_model(path)
    for source in (booster, regressor, path, booster.save_raw("json")):
        with pytest.raises(ValueError, match="^from_xgboost: .*'gblinear'.* no trees"):
            jaximp.from_xgboost(source)
