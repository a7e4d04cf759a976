"""Non-symmetric CatBoost trees (Depthwise, Lossguide) with categorical features.

Oracles: CatBoost on the model reloaded from its own JSON export (the reference for
non-symmetric trees, see tests/test_trees.py): ``calc_leaf_indexes``, ``predict``,
``PredictionValuesChange``, ``ShapValues`` (Regular, Approximate) and ``ShapInteractionValues``
on raw rows with unseen categories and NaN in a float column. CatBoost's ``reference_data`` SHAP
crashes on non-symmetric trees, so interventional SHAP is checked against a brute-force Shapley
enumeration over the columns (every player of these models is one column) whose value function
is CatBoost's own prediction of hybrid raw rows. Tolerances as in tests/test_categorical.py
(``rtol=1e-5``, ``atol=1e-5 * magnitude``: float32 over a dozen trees against float64).
"""

from __future__ import annotations

import functools
import itertools
import math

import catboost
import numpy as np
import pandas as pd
import pytest
from conftest import json_reloaded
from test_categorical import CAT, assert_close, catboost_shap, explained, make_frame, make_target, pool

import jaximp
from jaximp._frontends.pool_rows import evaluated_from_pool
from jaximp._models.trees import leaf_paths
from jaximp._rows.inputs import as_features

_LOSS = {"regression": "RMSE", "binary": "Logloss", "multiclass": "MultiClass"}

# name: (kind, grow_policy, CatBoost options)
ZOO = {
    "depthwise_one_hot": ("regression", "Depthwise", dict(one_hot_max_size=255)),
    "depthwise_ctr": ("binary", "Depthwise", dict(one_hot_max_size=1, simple_ctr=["Borders", "Counter"])),
    "lossguide_mixed": ("multiclass", "Lossguide", dict(one_hot_max_size=4, max_leaves=12, nan_mode="Max")),
    "lossguide_ctr_complexity": ("regression", "Lossguide", dict(one_hot_max_size=2, max_leaves=10,
                                                                 max_ctr_complexity=3)),
}

CATEGORICAL_SPLITS = {"depthwise_one_hot": {"OneHotFeature"}, "depthwise_ctr": {"OnlineCtr"},
                      "lossguide_mixed": {"OneHotFeature", "OnlineCtr"}, "lossguide_ctr_complexity": {"OnlineCtr"}}


@functools.cache
def trained(name: str):
    """``(model, model reloaded from its JSON export, its JSON, ens, training frame, y)``."""
    kind, grow_policy, options = ZOO[name]
    frame = make_frame(400, seed=0)
    y = make_target(frame, kind)
    params = dict(loss_function=_LOSS[kind], iterations=8, depth=4, learning_rate=0.3, random_seed=0,
                  verbose=0, thread_count=1, allow_writing_files=False, cat_features=CAT,
                  grow_policy=grow_policy)
    params.update(options)
    model = catboost.CatBoost(params).fit(frame, y)
    model_json, reloaded = json_reloaded(model)
    return model, reloaded, model_json, jaximp.from_catboost(model), frame, y


def raw(model, frame):
    """CatBoost's raw prediction ``[N, K]``."""
    return np.asarray(model.predict(pool(frame), prediction_type="RawFormulaVal")).reshape(len(frame), -1)


def split_types(model_json) -> set:
    def walk(node):
        if "split" not in node:
            return set()
        return {node["split"]["split_type"]} | walk(node["left"]) | walk(node["right"])

    return set().union(*(walk(tree) for tree in model_json["trees"]))


# 1. What CatBoost exports, leaves and predictions ------------------------------------------


@pytest.mark.parametrize("name", list(ZOO))
def test_json_export_and_predictions(name):
    """The JSON export keeps one-hot and CTR splits with their tables, builds no CTR over
    combinations (max_ctr_complexity 3 included), and predicts as the trained model; jaximp's
    leaves are CatBoost's (the reloaded model's numbering) and its predictions CatBoost's."""
    model, reloaded, model_json, ens, _, _ = trained(name)
    kind = ZOO[name][0]
    assert split_types(model_json) - {"FloatFeature"} == CATEGORICAL_SPLITS[name]
    ctrs = model_json["features_info"].get("ctrs", [])
    assert all(len(ctr["elements"]) == 1 for ctr in ctrs) and (not ctrs or "ctr_data" in model_json)
    assert isinstance(ens, jaximp.TreeEnsemble) and all(len(player) == 1 for player in ens.players)
    frame, _ = explained(kind)
    assert frame.f1.isna().any() and (frame.c1 == "never-seen").any()
    assert_close(raw(reloaded, frame), raw(model, frame))
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, frame), reloaded.calc_leaf_indexes(pool(frame)))
    assert_close(np.reshape(ens.predict(frame), (len(frame), -1)), raw(reloaded, frame))


def test_model_files_and_input_forms(tmp_path):
    model, _, _, ens, _, _ = trained("lossguide_mixed")
    frame, _ = explained("multiclass")
    expected = np.asarray(ens.predict(frame))
    for fmt in ("cbm", "json"):
        path = tmp_path / f"model.{fmt}"
        model.save_model(str(path), format=fmt)
        np.testing.assert_array_equal(jaximp.from_catboost(path).predict(frame), expected)
    np.testing.assert_array_equal(ens.predict(frame.astype({c: "category" for c in CAT})), expected)
    np.testing.assert_array_equal(ens.predict(frame[list(reversed(frame.columns))]), expected)
    np.testing.assert_array_equal(ens.predict(frame.to_numpy(dtype=object)), expected)
    np.testing.assert_array_equal(ens.predict(frame, batch_size=16), expected)


# 2. Importances and SHAP --------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ZOO))
def test_prediction_values_change(name):
    """Per input column: a one-hot value or CTR of a column is credited to that column."""
    _, reloaded, _, ens, _, _ = trained(name)
    got = jaximp.prediction_values_change(ens)
    assert_close(got, reloaded.get_feature_importance(type="PredictionValuesChange"))
    assert abs(float(np.sum(got)) - 100.0) < 1e-3
    frame, y = explained(ZOO[name][0])
    assert_close(jaximp.prediction_values_change(ens, frame),
                 reloaded.get_feature_importance(pool(frame, y), type="PredictionValuesChange"))


def test_a_column_split_twice_in_a_path_is_one_player():
    """Paths that split on two evaluated features of one column (a one-hot value and a CTR, or
    two CTR types) exist in the zoo, so the SHAP tests below check that CatBoost's player is the
    combination class (the column), not the split's feature."""
    for name in ("depthwise_ctr", "lossguide_mixed"):
        ens = trained(name)[3]
        nodes, _, mask = (np.asarray(a) for a in leaf_paths(ens))
        tree = np.arange(ens.n_trees)[:, None, None]
        features = np.where(mask, np.asarray(ens.node_features)[tree, nodes], -1)
        players = np.where(mask, np.asarray(ens.node_players)[tree, nodes], -1)
        merged = [len(set(f)) > len(set(p)) for f, p in zip(features.reshape(-1, ens.depth),
                                                           players.reshape(-1, ens.depth))]
        assert any(merged), name


@pytest.mark.parametrize("name", [  # by default, a CTR model of each grow policy (one-hot splits included)
    n if n in ("depthwise_ctr", "lossguide_mixed") else pytest.param(n, marks=pytest.mark.slow) for n in ZOO])
def test_shap_values(name):
    _, reloaded, _, ens, _, _ = trained(name)
    frame, y = explained(ZOO[name][0])
    prediction = raw(reloaded, frame)
    for method, calc_type in (("path_dependent", "Regular"), ("approximate", "Approximate")):
        values, expected = catboost_shap(reloaded, pool(frame, y), shap_calc_type=calc_type)
        got = np.asarray(jaximp.shap_values(ens, frame, method=method)).reshape(values.shape)
        assert_close(got, values)
        assert_close(np.reshape(jaximp.expected_value(ens, method=method), -1), expected)
        assert_close(got.sum(1) + expected, prediction)


def brute_force_interventional(model, rows: pd.DataFrame, background: pd.DataFrame) -> np.ndarray:
    """``[N, F, K]`` interventional Shapley values over the F columns: ``v(S)`` is the mean over
    the background of CatBoost's raw prediction of the row with the columns outside ``S`` taken
    from the background row (the one-hot values and CTRs of a column follow it)."""
    n, b, f = len(rows), len(background), rows.shape[1]
    subsets = np.asarray(list(itertools.product([False, True], repeat=f)))  # [2**F, F]
    x, z = rows.to_numpy(dtype=object), background.to_numpy(dtype=object)
    hybrid = np.where(subsets[:, None, None, :], x[None, :, None, :], z[None, None, :, :]).reshape(-1, f)
    frame = pd.DataFrame(hybrid, columns=rows.columns).astype(rows.dtypes.to_dict())
    value = raw(model, frame).reshape(len(subsets), n, b, -1).mean(axis=2)  # [2**F, N, K]
    index = {tuple(s): i for i, s in enumerate(subsets)}
    out = np.zeros((n, f, value.shape[-1]))
    for s, members in enumerate(subsets):
        size = int(members.sum())
        for j in np.flatnonzero(~members):
            weight = math.factorial(size) * math.factorial(f - size - 1) / math.factorial(f)
            out[:, j] += weight * (value[index[tuple(members | (np.arange(f) == j))]] - value[s])
    return out


@pytest.mark.parametrize("name", ["depthwise_ctr", "lossguide_mixed"])
def test_interventional_against_brute_force(name):
    model, _, _, ens, train_frame, _ = trained(name)
    frame, _ = explained(ZOO[name][0])
    rows, background = frame.iloc[::10], pd.concat([train_frame.iloc[:6], frame.iloc[41::9]])
    expected = brute_force_interventional(model, rows, background)
    got = jaximp.shap_values(ens, rows, method="interventional", background=background)
    assert_close(np.reshape(got, expected.shape), expected)
    base = jaximp.expected_value(ens, method="interventional", background=background)
    assert_close(np.reshape(base, -1), raw(model, background).mean(0))


@pytest.mark.parametrize("name", [pytest.param("depthwise_one_hot", marks=pytest.mark.slow), "lossguide_mixed"])
def test_shap_interaction_values(name):
    _, reloaded, _, ens, _, _ = trained(name)
    frame, y = explained(ZOO[name][0])
    frame, y = frame.iloc[::4], y[::4]
    expected = np.asarray(reloaded.get_feature_importance(pool(frame, y), type="ShapInteractionValues"))
    got = np.asarray(jaximp.shap_interaction_values(ens, frame))
    if expected.ndim == 4:  # [N, K, F + 1, F + 1]
        assert_close(np.moveaxis(got, -1, 1), expected[:, :, :-1, :-1])
    else:
        assert_close(got, expected[:, :-1, :-1])
    assert_close(got.sum(2), np.asarray(jaximp.shap_values(ens, frame)))


def test_explainer_of_categorical_rows():
    _, _, _, ens, _, _ = trained("depthwise_ctr")
    frame, _ = explained("binary")
    explanation = jaximp.Explainer(ens)(frame)
    np.testing.assert_array_equal(explanation.values, jaximp.shap_values(ens, frame))
    np.testing.assert_array_equal(explanation.display_data[:, 1], frame["c0"].to_numpy())
    assert np.isnan(explanation.data[:, 1]).all()


# 3. The drop-in, with a catboost.Pool that hides its raw values ------------------------------


@pytest.mark.parametrize("name", ["depthwise_ctr", "lossguide_mixed"])
def test_dropin_with_a_categorical_pool(name):
    """CatBoost evaluates the Pool's splits for jaximp (a probe model over every split, since a
    non-symmetric tree's leaf only tells the splits on its path), and the drop-in gives the
    JSON-reloaded model's numbers; interventional values equal jaximp's on the raw frames."""
    model, reloaded, _, ens, _, _ = trained(name)
    frame, y = explained(ZOO[name][0])
    data = pool(frame, y)
    for kind, kw in (("ShapValues", {}), ("ShapValues", dict(shap_calc_type="Approximate")),
                     ("PredictionValuesChange", {}), ("ShapInteractionValues", {})):
        assert_close(jaximp.get_feature_importance(model, data, type=kind, **kw),
                     reloaded.get_feature_importance(data, type=kind, **kw))
    background = frame.iloc[::8]
    got = jaximp.get_feature_importance(model, data, type="ShapValues", reference_data=pool(background))
    phi = np.asarray(jaximp.shap_values(ens, frame, method="interventional", background=background))
    np.testing.assert_array_equal(np.moveaxis(got, 1, 2)[..., :-1, :] if phi.ndim == 3 else got[:, :-1], phi)


def test_probe_bins_decide_every_node_as_the_featurizer():
    model, _, _, ens, _, _ = trained("lossguide_mixed")
    frame, _ = explained("multiclass")
    probed = np.asarray(evaluated_from_pool(model, ens, pool(frame)))
    featurized = np.asarray(as_features(frame, ens, "test"))
    j = np.asarray(ens.node_borders)
    real = np.isfinite(j)
    feature = np.asarray(ens.node_features)[real]
    np.testing.assert_array_equal(probed[:, feature] > j[real], featurized[:, feature] > j[real])
    other, _, _, _, _, _ = trained("depthwise_ctr")
    with pytest.raises(ValueError, match="not the one the ensemble was imported from"):
        evaluated_from_pool(other, ens, pool(frame))


# 4. Bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize("change, error, match", [
    (lambda f: f.astype({"c2": float}), TypeError, "c2.*strings or integers"),
    (lambda f: f.drop(columns="c1"), ValueError, r"missing \['c1'\]"),
    (lambda f: pool(f), TypeError, "raw categorical values"),
    (lambda f: f[["f0", "f1"]].to_numpy(), ValueError, "must have 6 columns"),
])
def test_bad_rows(change, error, match):
    _, _, _, ens, frame, _ = trained("lossguide_mixed")
    with pytest.raises(error, match=match):
        ens.predict(change(frame))
    with pytest.raises(error, match=match):
        jaximp.shap_values(ens, change(frame))
