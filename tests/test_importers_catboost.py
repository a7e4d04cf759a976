"""``jaximp.from_catboost``: model objects and files (.cbm, .json) of both layouts (oblivious
trees as ObliviousEnsemble, Depthwise and Lossguide trees as TreeEnsemble), categorical
features, summed models, and what it refuses.

Oracles: the same model imported from its object and from its files; CatBoost's own numbers of
the imported model (``calc_leaf_indexes``, ``predict``, ``get_feature_importance``; for
non-symmetric trees on the model reloaded from its JSON export, CatBoost's reference); the
error messages. Tolerances: ``rtol=1e-5, atol=1e-5 * max(1, magnitude)``; predictions of the
same ensemble from two sources exactly.
"""

from __future__ import annotations

import json

import catboost
import models
import numpy as np
import pandas as pd
import pytest
from oracles import assert_close, catboost_shap, raw_output

import jaximp

# Oblivious models -------------------------------------------------------------------------------------------


def test_files_cbm_and_json(tmp_path):
    model, X, _, _ = models.train("multiclass", depth=3)
    model.save_model(tmp_path / "m.cbm")
    model.save_model(tmp_path / "m.json", format="json")
    expected = jaximp.from_catboost(model).predict(X)
    np.testing.assert_array_equal(jaximp.from_catboost(str(tmp_path / "m.cbm")).predict(X), expected)
    np.testing.assert_array_equal(jaximp.from_catboost(tmp_path / "m.json").predict(X), expected)
    assert jaximp.from_catboost(model).class_names == (0, 1, 2)
    assert jaximp.from_catboost(model).loss_function == "MultiClass"


def test_bad_models(tmp_path):
    with pytest.raises(TypeError, match="model_or_path must be a CatBoost model"):
        jaximp.from_catboost(42)
    with pytest.raises(ValueError, match="existing file"):
        jaximp.from_catboost(tmp_path / "missing.cbm")
    (tmp_path / "bad.cbm").write_bytes(b"not a model")
    with pytest.raises(ValueError, match="not a readable CatBoost model"):
        jaximp.from_catboost(tmp_path / "bad.cbm")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match="not a readable CatBoost JSON model"):
        jaximp.from_catboost(tmp_path / "bad.json")
    model, _, _, _ = models.train("regression", depth=2)
    model.save_model(tmp_path / "m.json", format="json")
    broken = json.loads((tmp_path / "m.json").read_text())
    del broken["oblivious_trees"][0]["leaf_values"]
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    with pytest.raises(ValueError, match="corrupt"):
        jaximp.from_catboost(tmp_path / "broken.json")
    with pytest.raises(ValueError, match="fitted"):
        jaximp.from_catboost(catboost.CatBoostRegressor())
    with pytest.raises(TypeError, match="predict: ens must be a jaximp.ObliviousEnsemble"):
        jaximp.predict(model, np.zeros((2, 6), np.float32))
    with pytest.raises(TypeError, match="leaf_indices: ens must be a jaximp.ObliviousEnsemble"):
        jaximp.leaf_indices(model, np.zeros((2, 6), np.float32))


def test_a_model_without_trees_is_refused():
    X, y = models.make_data("regression", n=100)
    model = catboost.CatBoostRegressor(iterations=3, depth=2, verbose=0).fit(X, y)
    model.shrink(ntree_end=0)
    with pytest.raises(ValueError, match="has no trees"):
        jaximp.from_catboost(model)


def test_a_model_file_without_its_loss_is_not_taken_for_rmse(tmp_path):
    model, X, y, _ = models.train("binary", depth=3)
    model.save_model(tmp_path / "m.json", format="json")
    stripped = json.loads((tmp_path / "m.json").read_text())
    stripped["model_info"].pop("params", None)
    stripped["model_info"].pop("loss_function", None)
    (tmp_path / "stripped.json").write_text(json.dumps(stripped))
    ens = jaximp.from_catboost(tmp_path / "stripped.json")
    np.testing.assert_array_equal(ens.predict(X), jaximp.from_catboost(model).predict(X))  # loss-free
    for call in (lambda: jaximp.loss_function_change(ens, X, y),
                 lambda: jaximp.permutation_importance(ens, X, y, n_repeats=1)):
        with pytest.raises(ValueError, match="loss_function='RMSE'"):
            call()
    named = jaximp.from_catboost(tmp_path / "stripped.json", loss_function="Logloss")
    np.testing.assert_allclose(jaximp.loss_function_change(named, X, y),
                               jaximp.loss_function_change(jaximp.from_catboost(model), X, y), rtol=1e-6)


# Non-symmetric models (Depthwise, Lossguide) ---------------------------------------------------------------------


def test_non_symmetric_model_imports_as_a_tree_ensemble():
    """Depthwise models import as jaximp.TreeEnsemble (their numbers: tests/test_leaves.py,
    test_shap_*.py and test_importances_*.py)."""
    X, y = models.make_data("regression", n=200)
    model = catboost.CatBoostRegressor(iterations=3, depth=3, grow_policy="Depthwise", verbose=0).fit(X, y)
    ens = jaximp.from_catboost(model)
    assert isinstance(ens, jaximp.TreeEnsemble)
    assert ens.n_trees == 3 and ens.depth == 3


def test_public_functions_take_a_tree_ensemble(tmp_path):
    """from_catboost of a Depthwise model's JSON file gives a TreeEnsemble that the public
    functions take, with CatBoost's numbers."""
    fitted = models.catboost_trees(*models.CATBOOST_TREES[2])
    reloaded, X = fitted.model, fitted.X
    path = tmp_path / "model.json"
    path.write_text(json.dumps(fitted.json))
    ens = jaximp.from_catboost(path)
    assert isinstance(ens, jaximp.TreeEnsemble)
    x = models.explained_rows(X)
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, x), reloaded.calc_leaf_indexes(x))
    assert_close(ens.predict(x), reloaded.predict(x, prediction_type="RawFormulaVal"))
    assert_close(jaximp.prediction_values_change(ens), reloaded.get_feature_importance(type="PredictionValuesChange"))
    values, expected = catboost_shap(reloaded, x)
    assert_close(jaximp.shap_values(ens, x), values[:, :, 0])
    assert_close(jaximp.expected_value(ens), expected[0])
    explanation = jaximp.Explainer(ens)(x)
    assert_close(explanation.values, values[:, :, 0])
    background = X[:30]
    np.testing.assert_array_equal(jaximp.shap_values(ens, x, method="interventional", background=background),
                                  jaximp.shap_values(fitted.ens, x, method="interventional", background=background))
    np.testing.assert_array_equal(jaximp.shap_interaction_values(ens, x[:10]),
                                  jaximp.shap_interaction_values(fitted.ens, x[:10]))


def test_summed_non_symmetric_models(tmp_path):
    """``catboost.sum_models`` of a Depthwise and a Lossguide model of different depths, weighted:
    trees of different sizes in one ensemble, each model's leaves scaled by its weight."""
    shallow = models.catboost_trees(*models.CATBOOST_TREES[0])
    deep = models.catboost_trees("regression", "Lossguide", 8, 24, "Min")
    path = str(tmp_path / "sum.json")
    catboost.sum_models([shallow.model, deep.model], weights=[0.3, 0.7]).save_model(path, format="json")
    model = catboost.CatBoost()
    model.load_model(path, format="json")
    ens = jaximp.from_catboost(path)
    x = models.explained_rows(shallow.X, 100)
    assert ens.n_trees == shallow.model.tree_count_ + deep.model.tree_count_
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, x), model.calc_leaf_indexes(x))
    assert_close(jaximp.predict(ens, x), model.predict(x, prediction_type="RawFormulaVal"))
    assert_close(jaximp.prediction_values_change(ens), model.get_feature_importance(type="PredictionValuesChange"))
    values, expected = catboost_shap(model, x)
    assert_close(jaximp.shap_values(ens, x), values[:, :, 0])
    assert_close(jaximp.expected_value(ens), expected[0])


def test_bad_non_symmetric_models():
    fitted = models.catboost_trees(*models.CATBOOST_TREES[0])
    with pytest.raises(ValueError, match="not a CatBoost JSON model"):
        models.from_json({"trees": []})
    with pytest.raises(ValueError, match="no non-symmetric trees"):
        models.from_json({**fitted.json, "trees": []})
    broken = json.loads(json.dumps(fitted.json))
    broken["trees"][0]["split"]["split_type"] = "OnlineCtr"
    with pytest.raises(ValueError, match="OnlineCtr"):
        models.from_json(broken)


# Categorical features --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["oblivious", "trees"])
def test_categorical_model_files(tmp_path, layout):
    """A model with one-hot and CTR splits saved as .cbm and .json (its CTR tables with it)."""
    if layout == "oblivious":
        fitted = models.catboost_categorical("combinations_2")
        model, frame = fitted.model, fitted.X
    else:
        fitted = models.catboost_categorical_trees("lossguide_mixed")
        model, frame = fitted.trained, models.explained("multiclass")[0]
    expected = np.asarray(fitted.ens.predict(frame))
    for fmt in ("cbm", "json"):
        path = tmp_path / f"model.{fmt}"
        model.save_model(str(path), format=fmt)
        np.testing.assert_array_equal(jaximp.from_catboost(path).predict(frame), expected)


def test_summed_categorical_models():
    fitted = models.catboost_categorical("combinations_2")
    both = catboost.sum_models([fitted.model, models.catboost_categorical("ctr").model], weights=[1.0, 0.5])
    expected = raw_output(both, models.pool(fitted.X))
    assert_close(jaximp.from_catboost(both).predict(fitted.X), expected)


CATEGORICAL_SPLITS = {"depthwise_one_hot": {"OneHotFeature"}, "depthwise_ctr": {"OnlineCtr"},
                      "lossguide_mixed": {"OneHotFeature", "OnlineCtr"}, "lossguide_ctr_complexity": {"OnlineCtr"}}


def split_types(model_json) -> set:
    def walk(node):
        if "split" not in node:
            return set()
        return {node["split"]["split_type"]} | walk(node["left"]) | walk(node["right"])

    return set().union(*(walk(tree) for tree in model_json["trees"]))


@pytest.mark.parametrize("name", list(models.CATEGORICAL_TREES))
def test_non_symmetric_categorical_json_export(name):
    """The JSON export keeps one-hot and CTR splits with their tables, builds no CTR over
    combinations (max_ctr_complexity 3 included), and predicts as the trained model; each
    player of the ensemble is one column (leaves and predictions: tests/test_leaves.py)."""
    fitted = models.catboost_categorical_trees(name)
    assert split_types(fitted.json) - {"FloatFeature"} == CATEGORICAL_SPLITS[name]
    ctrs = fitted.json["features_info"].get("ctrs", [])
    assert all(len(ctr["elements"]) == 1 for ctr in ctrs) and (not ctrs or "ctr_data" in fitted.json)
    assert isinstance(fitted.ens, jaximp.TreeEnsemble) and all(len(player) == 1 for player in fitted.ens.players)
    frame, _ = models.explained(models.CATEGORICAL_TREES[name][0])
    assert frame.f1.isna().any() and (frame.c1 == "never-seen").any()
    assert_close(raw_output(fitted.model, models.pool(frame)), raw_output(fitted.trained, models.pool(frame)))


def test_text_features_are_refused():
    frame = pd.DataFrame({"t": ["good day", "bad day", "so so", "fine"] * 20, "f": np.arange(80.0)})
    model = catboost.CatBoostClassifier(iterations=2, verbose=0, allow_writing_files=False, text_features=["t"])
    model.fit(frame, np.arange(80) % 2)
    with pytest.raises(ValueError, match="text features, which jaximp does not support"):
        jaximp.from_catboost(model)


@pytest.mark.parametrize("grow_policy", ["SymmetricTree", "Depthwise"])
def test_embedding_features_are_refused(grow_policy, tmp_path):
    """A model with embedding features (the ``.cbm`` part "embed_process...") is refused as
    unsupported, read from the object and from its file alike, not as a damaged file."""
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((80, 4))
    frame = pd.DataFrame({"e": list(vectors), "f": np.arange(80.0)})
    model = catboost.CatBoostClassifier(iterations=2, verbose=0, allow_writing_files=False, grow_policy=grow_policy,
                                        embedding_features=["e"])
    model.fit(frame, (vectors[:, 0] > 0).astype(int))
    path = tmp_path / "model.cbm"
    model.save_model(str(path))
    for source in (model, str(path)):
        with pytest.raises(ValueError, match=r"uses embedding features, which jaximp does not support") as info:
            jaximp.from_catboost(source)
        assert "text" not in str(info.value)
