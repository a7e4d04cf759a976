"""Importances from the model alone: CatBoost's PredictionValuesChange and Interaction, and the
split statistics of XGBoost, LightGBM and scikit-learn (``split_importance``), for every layout
and library.

Oracles: CatBoost's ``get_feature_importance`` (for non-symmetric trees on the model reloaded
from its JSON export, CatBoost's reference); XGBoost's ``get_score``, LightGBM's
``feature_importance``, scikit-learn's ``feature_importances_``; float64 loops written from the
definitions (tests/oracles.py: leaf pairs for PVC, the explicitly unrolled binary trees for the
split statistics, CatBoost's depth-first walk for Interaction); the published iris example; a
central finite difference for the gradient; closed forms.

Tolerances: importances normalised to sum 100 from float32 leaf values (relative rounding 6e-8)
summed over at most a few thousand terms err by a few 1e-6 of the total: oblivious models
against CatBoost ``rtol=1e-5, atol=1e-4`` (= 1e-6 * 100); general trees ``rtol=1e-5, atol=1e-5
* max(1, magnitude)``; split counts exactly, LightGBM's gains (float32 in LightGBM) ``rtol=1e-5``.
"""

from __future__ import annotations

import dataclasses
import json

import catboost
import jax
import jax.numpy as jnp
import models
import numpy as np
import pytest
from oracles import (
    assert_close,
    catboost_interaction,
    json_interaction,
    prediction_values_change,
    raw_output,
    split_statistics,
)

import jaximp
from jaximp import interaction, split_importance

RTOL, ATOL = 1e-5, 1e-4
slow = pytest.mark.slow


def catboost_pvc(model, data=None):
    return model.get_feature_importance(data, type="PredictionValuesChange")


# PredictionValuesChange ------------------------------------------------------------------------------------------


def test_seed_iris_example():
    """The published worked example: one depth-2 tree on iris, PVC = [0, 0, 44.4996, 55.5004]."""
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    model = catboost.CatBoostClassifier(iterations=1, depth=2, random_seed=42, verbose=0, thread_count=1,
                                        allow_writing_files=False)
    model.fit(X, y)
    ens = jaximp.from_catboost(model)
    got = jaximp.prediction_values_change(ens)
    np.testing.assert_allclose(got, [0.0, 0.0, 44.4996, 55.5004], atol=1e-4)  # published to 4 decimals
    assert got[0] == 0.0 and got[1] == 0.0  # never split on: exactly 0
    np.testing.assert_allclose(jaximp.prediction_values_change(ens, catboost.Pool(X, y)), got, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(
    "kind, depth, weighted",
    [("regression", 1, False), ("binary", 3, True), ("multiclass", 5, False),
     ("multiregression", 8, True), ("regression", 6, True)],
)
def test_pvc_of_oblivious_models(kind, depth, weighted):
    model, X, y, _ = models.train(kind, depth=depth, iterations=12, weighted=weighted)
    ens = jaximp.from_catboost(model)
    got = jaximp.prediction_values_change(ens)
    assert got.shape == (ens.n_features,) and got.dtype == jnp.float32
    np.testing.assert_allclose(got, catboost_pvc(model), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got, prediction_values_change(ens), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(float(got.sum()), 100.0, rtol=1e-6)
    unused = np.setdiff1d(np.arange(ens.n_features), np.asarray(ens.split_features)[np.asarray(ens.split_mask)])
    assert np.all(np.asarray(got)[unused] == 0.0)


@pytest.mark.parametrize("kind", ["regression", "multiclass"])
def test_pvc_with_data_recounts_leaf_weights(kind):
    """With a Pool, CatBoost recounts leaf weights from its rows (with the Pool's weights)."""
    model, X, y, _ = models.train(kind, depth=5, iterations=15)
    ens = jaximp.from_catboost(model)
    X_new, y_new = models.make_data(kind, n=300, seed=11)
    w_new = np.random.default_rng(3).uniform(0.1, 2.0, size=len(X_new))
    expected = catboost_pvc(model, catboost.Pool(X_new, y_new))
    assert np.abs(expected - catboost_pvc(model)).max() > 1e-2  # new rows do change the result
    np.testing.assert_allclose(jaximp.prediction_values_change(ens, X_new), expected, rtol=RTOL, atol=ATOL)
    expected_w = catboost_pvc(model, catboost.Pool(X_new, y_new, weight=w_new))
    np.testing.assert_allclose(jaximp.prediction_values_change(ens, X_new, sample_weight=w_new), expected_w,
                               rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(jaximp.prediction_values_change(ens, catboost.Pool(X_new, weight=w_new)), expected_w,
                               rtol=RTOL, atol=ATOL)
    # counting is exact, so batch size and device count change nothing
    np.testing.assert_array_equal(jaximp.prediction_values_change(ens, X_new, batch_size=7, devices=1),
                                  jaximp.prediction_values_change(ens, X_new))


def test_pvc_training_rows_give_model_weights():
    """The model's leaf weights are its training rows' weights: X=train data reproduces X=None."""
    model, X, _, w = models.train("regression", depth=4, iterations=10, weighted=True)
    ens = jaximp.from_catboost(model)
    np.testing.assert_allclose(jaximp.prediction_values_change(ens, X, sample_weight=w),
                               jaximp.prediction_values_change(ens), rtol=RTOL, atol=ATOL)


def test_pvc_class_weights_come_from_sample_weight():
    """CatBoost multiplies a labelled Pool's rows by the model's class weights."""
    X, _ = models.make_data("binary", n=300, seed=2)
    y = (X[:, 0] > 0.8).astype(int)
    model = catboost.CatBoostClassifier(iterations=8, depth=4, auto_class_weights="Balanced", verbose=0,
                                        thread_count=1, random_seed=0, allow_writing_files=False).fit(X, y)
    ens = jaximp.from_catboost(model)
    X_new, _ = models.make_data("binary", n=200, seed=12)
    y_new = (X_new[:, 0] > 0.8).astype(int)
    class_weights = np.asarray(model.get_all_params()["class_weights"])
    np.testing.assert_allclose(jaximp.prediction_values_change(ens, X_new, sample_weight=class_weights[y_new]),
                               catboost_pvc(model, catboost.Pool(X_new, y_new)), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(jaximp.prediction_values_change(ens, X_new), catboost_pvc(model, catboost.Pool(X_new)),
                               rtol=RTOL, atol=ATOL)


@dataclasses.dataclass(frozen=True)
class Reference:
    """An ensemble, CatBoost's model of it, and rows with their Pool (None: no rows)."""

    ens: object
    model: object
    rows: object = None
    data: object = None


def _catboost_trees(index):
    fitted = models.catboost_trees(*models.CATBOOST_TREES[index])
    return Reference(fitted.ens, fitted.model)


def _catboost_categorical(name):
    fitted = models.catboost_categorical(name)
    rows, _ = models.explained(models.CATEGORICAL[name][0])
    return Reference(fitted.ens, fitted.model, rows, models.pool(rows))


def _catboost_categorical_trees(name):
    """Per input column: a one-hot value or CTR of a column is credited to that column."""
    fitted = models.catboost_categorical_trees(name)
    frame, y = models.explained(models.CATEGORICAL_TREES[name][0])
    return Reference(fitted.ens, fitted.model, frame, models.pool(frame, y))


PVC = ([pytest.param(_catboost_trees, i, id=f"trees-case{i}") for i in range(len(models.CATBOOST_TREES))]
       + [pytest.param(_catboost_categorical, name, id=f"categorical-{name}") for name in models.CATEGORICAL]
       + [pytest.param(_catboost_categorical_trees, name, id=f"categorical-trees-{name}")
          for name in models.CATEGORICAL_TREES])


@pytest.mark.parametrize("build, arg", PVC)
def test_pvc_against_catboost(build, arg):
    """Without rows (the model's leaf weights) and with rows (their leaf counts): CatBoost's
    numbers, summing to 100."""
    case = build(arg)
    got = jaximp.prediction_values_change(case.ens)
    assert_close(got, catboost_pvc(case.model))
    assert abs(float(np.sum(got)) - 100.0) < 1e-3
    if case.rows is not None:
        assert_close(jaximp.prediction_values_change(case.ens, case.rows), catboost_pvc(case.model, case.data))


def test_pvc_gradient_matches_finite_difference():
    """jax.grad of a PVC entry w.r.t. leaf values equals the float64 central difference."""
    model, X, _, _ = models.train("regression", depth=3, iterations=6)
    ens = jaximp.from_catboost(model)
    f = int(np.argmax(np.asarray(jaximp.prediction_values_change(ens))))

    def entry(values):
        return jaximp.prediction_values_change(dataclasses.replace(ens, leaf_values=values))[f]

    grad = np.asarray(jax.grad(entry)(ens.leaf_values), np.float64)
    values = np.asarray(ens.leaf_values, np.float64)
    for seed in range(3):
        u = np.random.default_rng(seed).normal(size=values.shape)
        eps = 1e-5
        up = prediction_values_change(ens, leaf_values=values + eps * u)
        down = prediction_values_change(ens, leaf_values=values - eps * u)
        fd = (up[f] - down[f]) / (2 * eps)
        np.testing.assert_allclose(np.sum(grad * u), fd, rtol=1e-3, atol=1e-4 * np.abs(grad).sum())
    # through the data path (map_rows traced), and w.r.t. leaf weights with empty leaves
    via_rows = jax.grad(lambda v: jaximp.prediction_values_change(dataclasses.replace(ens, leaf_values=v), X)[f])
    np.testing.assert_allclose(via_rows(ens.leaf_values), grad, rtol=1e-4, atol=1e-6 * np.abs(grad).max())
    mixed = jaximp.from_catboost(models.summed("regression", depths=(2, 5, 3))[0])
    assert (np.asarray(mixed.leaf_weights) == 0).any()
    gw = jax.grad(lambda w: jaximp.prediction_values_change(dataclasses.replace(mixed, leaf_weights=w))[0])(
        mixed.leaf_weights)
    assert np.isfinite(np.asarray(gw)).all() and np.abs(np.asarray(gw)).max() > 0


# The three together, on oblivious models --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["regression", "multiclass", "multiregression"])
def test_summed_mixed_depths(kind):
    model, X, _ = models.summed(kind, depths=(2, 5, 3))
    ens = jaximp.from_catboost(model)
    assert not np.asarray(ens.split_mask).all()
    np.testing.assert_allclose(jaximp.prediction_values_change(ens), catboost_pvc(model), rtol=RTOL, atol=ATOL)
    X_new, y_new = models.make_data(kind, n=200, seed=13)
    np.testing.assert_allclose(jaximp.prediction_values_change(ens, X_new),
                               catboost_pvc(model, catboost.Pool(X_new, y_new)), rtol=RTOL, atol=ATOL)
    if kind != "multiclass":
        np.testing.assert_allclose(interaction(ens), catboost_interaction(model, ens.n_features),
                                   rtol=RTOL, atol=ATOL)
    stats = split_statistics(ens)
    np.testing.assert_allclose(split_importance(ens, "weight"), stats["weight"])
    np.testing.assert_allclose(split_importance(ens, "total_gain"), stats["total_gain"], rtol=1e-5,
                               atol=1e-6 * stats["total_gain"].sum())


def test_scale_and_bias_are_ignored():
    model, _, _, _ = models.train("regression", depth=4, iterations=10)
    scaled = model.copy()
    scaled.set_scale_and_bias(2.5, 1.0)
    ens = jaximp.from_catboost(scaled)
    assert float(ens.scale) == 2.5
    np.testing.assert_allclose(jaximp.prediction_values_change(ens), catboost_pvc(scaled), rtol=RTOL, atol=ATOL)
    unscaled = jaximp.from_catboost(model)
    np.testing.assert_allclose(interaction(ens), interaction(unscaled), rtol=1e-6)
    np.testing.assert_allclose(split_importance(ens, "total_gain"), 6.25 * split_importance(unscaled, "total_gain"),
                               rtol=1e-5)


def test_jit_gives_the_same():
    model, _, _, _ = models.train("multiclass", depth=4, iterations=8)
    ens = jaximp.from_catboost(model)
    np.testing.assert_allclose(jax.jit(jaximp.prediction_values_change)(ens), jaximp.prediction_values_change(ens),
                               rtol=1e-6)
    np.testing.assert_allclose(jax.jit(interaction)(ens), interaction(ens), rtol=1e-6)
    np.testing.assert_allclose(jax.jit(split_importance, static_argnames="type")(ens, type="gain"),
                               split_importance(ens, "gain"), rtol=1e-6)


# Interaction ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind, depth", [("regression", 2), ("binary", 6), ("multiregression", 8)])
def test_interaction_of_oblivious_models(kind, depth):
    model, _, _, _ = models.train(kind, depth=depth, iterations=12)
    ens = jaximp.from_catboost(model)
    got = np.asarray(interaction(ens))
    assert got.shape == (ens.n_features, ens.n_features) and got.dtype == np.float32
    np.testing.assert_allclose(got, catboost_interaction(model, ens.n_features), rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(got, got.T)
    assert np.all(np.diag(got) == 0.0) and np.all(got >= 0)
    np.testing.assert_allclose(np.triu(got).sum(), 100.0, rtol=1e-5)


def test_interaction_multiclass_catboost_is_cancellation_noise(tmp_path):
    """MultiClass leaf values sum to 0 over classes, so CatBoost's |sum_k delta_k| is rounding.

    CatBoost's numbers are reproduced exactly by the float64 loop on the JSON leaf values, yet
    every |sum_k delta_k| is below 1e-12 of the leaf values' size: hence the "abs" default.
    """
    model, _, _, _ = models.train("multiclass", depth=4, iterations=10)
    ens = jaximp.from_catboost(model)
    model.save_model(tmp_path / "model.json", format="json")
    trees = json.loads((tmp_path / "model.json").read_text())["oblivious_trees"]
    brute = np.zeros((ens.n_features, ens.n_features))
    brute_abs = np.zeros_like(brute)
    largest, size = 0.0, 0.0
    for tree in trees:
        features = [s["float_feature_index"] for s in tree["splits"]]
        depth = len(features)
        values = np.asarray(tree["leaf_values"], np.float64).reshape(1 << depth, -1)
        size = max(size, np.abs(values).max())
        for a in range(depth):
            for b in range(a + 1, depth):
                if features[a] == features[b]:
                    continue
                leaf = np.arange(1 << depth)
                sign = np.where(((leaf >> a) & 1) != ((leaf >> b) & 1), 1.0, -1.0)
                delta = 0.0
                for i in range(1 << depth):  # CatBoost's summation order
                    for k in range(values.shape[1]):
                        delta += sign[i] * values[i, k]
                largest = max(largest, abs(delta))
                f, g = sorted((features[a], features[b]))
                brute[f, g] += abs(delta)
                brute_abs[f, g] += np.abs(sign @ values).sum()
    brute = (brute + brute.T) / brute.sum() * 100
    np.testing.assert_allclose(brute, catboost_interaction(model, ens.n_features), rtol=1e-9, atol=1e-9)
    assert largest < 1e-12 * size
    brute_abs = (brute_abs + brute_abs.T) / brute_abs.sum() * 100
    np.testing.assert_allclose(interaction(ens), brute_abs, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(interaction(ens), interaction(ens, output_reduction="abs"))


@pytest.mark.parametrize("name", [n for n in models.CATEGORICAL if n != "multiclass"])
def test_interaction_of_oblivious_categorical_models(name):
    """CatBoost's Interaction rows, also where its walk over a CTR's columns credits pairs
    unevenly (CTRs over a categorical column and binarized float features) and where one-hot
    splits are credited to no column (the scores then sum to less than 100). MultiClass scores
    are CatBoost's float rounding noise (see jaximp.interaction)."""
    fitted = models.catboost_categorical(name)
    rows = fitted.model.get_feature_importance(type="Interaction")
    matrix = np.asarray(interaction(fitted.ens))
    np.testing.assert_allclose(matrix[rows[:, 0].astype(int), rows[:, 1].astype(int)], rows[:, 2],
                               rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(np.triu(matrix, 1).sum(), rows[:, 2].sum(), rtol=1e-5)
    np.testing.assert_array_equal(matrix, matrix.T)


def _interaction_trees(index):
    """Numeric Depthwise and Lossguide models: every pair of columns is counted."""
    fitted = models.catboost_trees(*models.IMPORTANCE_TREES[index], n=500)
    return fitted, True


def _interaction_categorical_trees(name):
    """One-hot splits are credited to no column, self pairs of a column's features are dropped
    after normalising: the scores sum to less than 100."""
    return models.catboost_categorical_trees(name), False


@pytest.mark.parametrize("build, arg", [
    pytest.param(_interaction_trees, i, id="-".join(map(str, models.IMPORTANCE_TREES[i][:3])))
    for i in range(len(models.IMPORTANCE_TREES))] + [
    pytest.param(_interaction_categorical_trees, name, id=f"categorical-{name}") for name in models.CATEGORICAL_TREES])
def test_interaction_of_non_symmetric_models(build, arg):
    """CatBoost's Interaction and its depth-first walk transcribed over the JSON trees. CatBoost
    adds the classes before |.|; MultiClass leaves sum to zero over classes, so its score is
    float64 cancellation noise: the per-output ("abs") definition is checked instead."""
    fitted, numeric = build(arg)
    ens = fitted.ens
    got = np.asarray(interaction(ens))
    assert got.shape == (ens.n_features,) * 2 and got.dtype == np.float32
    np.testing.assert_array_equal(got, got.T)
    np.testing.assert_array_equal(np.diag(got), 0.0)
    if ens.loss_function == "MultiClass":
        np.testing.assert_array_equal(got, interaction(ens, output_reduction="abs"))
        assert_close(got, json_interaction(fitted.json, "abs"))
    else:
        want = catboost_interaction(fitted.model, ens.n_features)
        assert_close(got, want)
        assert_close(got, json_interaction(fitted.json, "sum"))
        assert abs(np.triu(got, 1).sum() - np.triu(want, 1).sum()) < 1e-3
    if numeric:
        assert abs(np.triu(got).sum() - 100.0) < 1e-3
    else:
        assert np.triu(got, 1).sum() < 100.0 - 1e-3  # one-hot or self pairs counted in the total only


@pytest.mark.parametrize("name", ["combinations_2", "categorical_pairs"])
def test_interaction_of_ctrs_over_combinations(name):
    """CTRs over several columns (and binarized float features) credit each internal pair to
    several column pairs, in CatBoost's order of the internal features (oblivious trees written
    as non-symmetric ones: Depthwise and Lossguide models build no such CTRs)."""
    fitted = models.catboost_combinations(name)
    frame, _ = models.explained(models.CATEGORICAL[name][0])
    assert_close(np.asarray(fitted.ens.predict(frame)), raw_output(fitted.trained, models.pool(frame)))
    assert any(len(columns) > 1 for columns in fitted.ens.featurizer.interaction_features()[1])
    assert_close(interaction(fitted.ens), catboost_interaction(fitted.model, fitted.ens.n_features))


def test_interaction_is_differentiable_and_handles_stumps():
    ens = models.catboost_trees(*models.IMPORTANCE_TREES[0], n=500).ens
    grad = jax.grad(lambda v: interaction(ens.__class__(**{**ens.__dict__, "leaf_values": v}))[0, 1])(
        ens.leaf_values)
    assert grad.shape == ens.leaf_values.shape and np.isfinite(np.asarray(grad)).all()
    X, y = models.make_data("regression", n=200)
    stumps = catboost.CatBoostRegressor(iterations=3, depth=1, grow_policy="Depthwise", verbose=0,
                                        thread_count=1, allow_writing_files=False).fit(X, y)
    np.testing.assert_array_equal(interaction(jaximp.from_catboost(stumps)), 0.0)


# Split statistics -------------------------------------------------------------------------------------------------


def test_root_is_the_last_split():
    """CatBoost's plot_tree draws the split of the highest bit at the root (as split_importance reads it)."""
    model, _, _, _ = models.train("regression", depth=4, iterations=3)
    ens = jaximp.from_catboost(model)
    for t in range(ens.n_trees):
        source = model.plot_tree(t).source
        root = source.split('0 [label="', 1)[1].split(",", 1)[0]
        assert int(root) == int(ens.split_features[t, 3])


@pytest.mark.parametrize("kind, depth", [("regression", 1), ("multiclass", 4), ("binary", 7)])
def test_split_statistics_of_oblivious_models(kind, depth):
    model, _, _, _ = models.train(kind, depth=depth, iterations=10, weighted=True)
    ens = jaximp.from_catboost(model)
    stats = split_statistics(ens)
    weight = stats["weight"]
    used = weight > 0
    gain_atol = 1e-6 * stats["total_gain"].sum()
    expected = {
        "weight": weight, "split": weight,
        "total_gain": stats["total_gain"], "total_cover": stats["total_cover"],
        "gain": np.where(used, stats["total_gain"] / np.where(used, weight, 1), 0),
        "cover": np.where(used, stats["total_cover"] / np.where(used, weight, 1), 0),
    }
    for type_, value in expected.items():
        got = np.asarray(split_importance(ens, type_))
        assert got.shape == (ens.n_features,) and got.dtype == np.float32
        atol = gain_atol if "gain" in type_ else 0
        np.testing.assert_allclose(got, value, rtol=1e-5, atol=atol, err_msg=type_)
        assert np.all(got[~used] == 0.0)
    # closed form: a tree's gains add up to the weighted variance of its leaf values
    values = np.asarray(ens.leaf_values, np.float64)
    w = np.asarray(ens.leaf_weights, np.float64)[..., None]
    mean = (w * values).sum(1, keepdims=True) / w.sum(1, keepdims=True)
    np.testing.assert_allclose(split_importance(ens, "total_gain").sum(), (w * (values - mean) ** 2).sum(),
                               rtol=1e-5)


@pytest.mark.parametrize("kind", ["regression", pytest.param("multiclass", marks=slow)])
def test_split_statistics_of_oblivious_models_unrolled(kind):
    """A symmetric model unrolled into general trees (``from_oblivious``: the same nodes that
    the oblivious definition counts) has the same split statistics; gains and covers computed
    from leaf weights, as for CatBoost's non-symmetric models."""
    from jaximp._models.trees import from_oblivious

    X, y = models.make_data(kind, n=400, n_features=5, seed=3)
    cls = catboost.CatBoostClassifier if kind == "multiclass" else catboost.CatBoostRegressor
    model = cls(iterations=15, depth=4, verbose=0, random_seed=0).fit(X, y)
    ens = jaximp.from_catboost(model)
    tree = from_oblivious(ens)
    for type in ("weight", "split", "gain", "total_gain", "cover", "total_cover"):
        np.testing.assert_allclose(split_importance(tree, type), split_importance(ens, type), rtol=1e-5, err_msg=type)
    with pytest.raises(ValueError, match="scikit-learn models only"):
        split_importance(tree, "impurity")
    with pytest.raises(ValueError, match="scikit-learn models only"):
        split_importance(ens, "impurity")


XGBOOST_TYPES = ("weight", "gain", "cover", "total_gain", "total_cover")


def _xgboost(name):
    fitted = models.xgboost_model(name)
    names = [f"f{i}" for i in range(fitted.ens.n_features)]
    return fitted.ens, [(t, _get_score(fitted.model, t, names), "close") for t in XGBOOST_TYPES]


def _get_score(booster, type, names):
    """XGBoost's ``get_score`` by feature (0 for a feature never split on)."""
    score = booster.get_score(importance_type=type)
    return [score.get(name, 0.0) for name in names]


def _lightgbm(name):
    """LightGBM's own names give its numbers: "split" exactly, "gain" (its total gain, as
    ``feature_importance("gain")``) to ``rtol`` (LightGBM keeps ``split_gain`` in float32), and
    "total_gain" the same."""
    fitted = models.lightgbm_model(name)
    booster, ens = fitted.model, fitted.ens
    gain, count = booster.feature_importance("gain"), booster.feature_importance("split")
    return ens, [("split", count, "equal"), ("total_gain", gain, "rtol"), ("gain", gain, "rtol")]


def _sklearn(name):
    """MDI: ``feature_importances_``."""
    fitted = models.sklearn_model(name)
    return fitted.ens, [("impurity", fitted.model.feature_importances_, "close")]


def _library_categorical(case):
    """Categorical splits count as splits of their column."""
    fitted = models.library_categorical(case)
    if case.startswith("xgboost"):
        return fitted.ens, [(t, _get_score(fitted.model, t, ["a", "b", "c", "d"]), "close") for t in XGBOOST_TYPES]
    return fitted.ens, [("split", fitted.model.feature_importance(importance_type="split"), "close"),
                        ("total_gain", fitted.model.feature_importance(importance_type="gain"), "close")]


def _case(build, arg, name, default):
    return pytest.param(build, arg, id=name, marks=() if default else slow)


SPLIT_STATISTICS = (
    [_case(_xgboost, name, f"xgboost-{name}", name == "forest-softprob") for name in models.XGBOOST]
    + [_case(_lightgbm, name, f"lightgbm-{name}", name in ("multiclass", "rf"))
       for name in ("multiclass", "rf", "regression", "binary", "regression-none")]
    + [_case(_sklearn, name, f"sklearn-{name}", name in ("rf_reg", "gb_multi"))
       for name in ("rf_reg", "gb_multi", "dt_reg", "dt_clf", "rf_clf", "et_reg2", "et_clf", "gb_reg", "gb_bin")]
    + [_case(_library_categorical, case, f"{case.split('-')[0]}-categorical-{case.split('-')[1]}", True)
       for case in ("xgboost-reg", "xgboost-multi", "lightgbm-reg")]
)


@pytest.mark.parametrize("build, arg", SPLIT_STATISTICS)
def test_split_importance_against_the_library(build, arg):
    ens, references = build(arg)
    for type, expected, compare in references:
        got = jaximp.split_importance(ens, type)
        assert got.shape == (ens.n_features,), type
        if compare == "equal":
            np.testing.assert_array_equal(got, expected, err_msg=type)
        elif compare == "rtol":
            np.testing.assert_allclose(got, expected, rtol=1e-5, err_msg=type)
        else:
            assert_close(got, expected)


# Bad input --------------------------------------------------------------------------------------------------------


def test_errors(regression_model):
    model, ens, X, _ = regression_model
    with pytest.raises(TypeError, match="prediction_values_change: ens must be a jaximp.ObliviousEnsemble"):
        jaximp.prediction_values_change(model)
    with pytest.raises(TypeError, match="TreeEnsemble"):
        jaximp.prediction_values_change(object())
    with pytest.raises(TypeError, match="interaction: ens must be"):
        interaction(np.zeros(3))
    with pytest.raises(ValueError, match="sample_weight must come with X"):
        jaximp.prediction_values_change(ens, sample_weight=np.ones(3))
    with pytest.raises(ValueError, match=r"sample_weight must have shape \(400,\)"):
        jaximp.prediction_values_change(ens, X, sample_weight=np.ones(3))
    with pytest.raises(ValueError, match="sample_weight must be finite and non-negative"):
        jaximp.prediction_values_change(ens, X, sample_weight=-np.ones(len(X)))
    with pytest.raises(ValueError, match="X must have 6 columns"):
        jaximp.prediction_values_change(ens, X[:, :3])
    with pytest.raises(ValueError, match="output_reduction must be None or one of"):
        interaction(ens, output_reduction="max")
    with pytest.raises(ValueError, match="type must be one of 'weight', 'split', 'gain'"):
        split_importance(ens, "mdi")
    with pytest.raises(ValueError, match="scikit-learn models only"):
        split_importance(ens, "impurity")
    with pytest.raises(TypeError, match="split_importance: ens must be"):
        split_importance(model, "gain")
